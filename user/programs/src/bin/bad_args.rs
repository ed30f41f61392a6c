//! `bad_args`: system calls with hostile arguments. Each must fail with the right error and
//! leave the task running; then an undefined system-call number must kill the task.
//!
//! Verdicts: one `TEST PASS`/`TEST FAIL` line per check; the kernel's report of the
//! undefined call, and `TEST FAIL survived undefined system call` if the task lives on.
#![no_std]
#![no_main]

use core::fmt::Debug;

use baton_abi::{layout::USER_STACK_TOP, Error, Sys, DEBUG_WRITE_MAX};
use baton_rt::raw::raw_syscall;
use baton_rt::{debug_write_raw, println, set_affinity, spawn, spawn_raw};

baton_rt::entry!(main);

/// Start of the kernel's direct map.
const KERNEL_ADDRESS: u64 = 0xffff_8000_0000_0000;
/// A canonical user address nothing is mapped at.
const UNMAPPED_ADDRESS: u64 = 0x0000_1000_0000_0000;
/// Non-canonical: bit 63 set but bits 47..=62 clear.
const NON_CANONICAL_ADDRESS: u64 = 0x8000_0000_0000_0000;
/// The undefined system-call number whose use must kill the task.
const UNDEFINED_SYSCALL: u64 = 9999;

/// Prints the verdict of one check: `got` must be `Err(want)`.
fn expect_err<T: Debug>(what: &str, got: Result<T, Error>, want: Error) -> bool {
    match got {
        Err(e) if e == want => {
            println!("TEST PASS {what}");
            true
        }
        other => {
            println!("TEST FAIL {what}: got {other:?}, expected Err({want:?})");
            false
        }
    }
}

fn main(_task_id: u64) -> i32 {
    let mut ok = true;

    // The cheapest call, whatever its argument registers hold: 0, and those registers
    // as they were (the kernel answers it on a short path of its own).
    let args = [KERNEL_ADDRESS, u64::MAX, 1, 2, 3, 4];
    let (rax, rdi, r9): (u64, u64, u64);
    // SAFETY: `null` touches no memory; every register the ABI lets the kernel change
    // (rax, rcx, r11) is declared as an output, and the others are inputs it must keep.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") Sys::Null as u64 => rax,
            inlateout("rdi") args[0] => rdi,
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            inlateout("r9") args[5] => r9,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if rax == 0 && rdi == args[0] && r9 == args[5] {
        println!("TEST PASS null returns 0 and keeps its argument registers");
    } else {
        println!("TEST FAIL null: rax {rax:#x}, rdi {rdi:#x}, r9 {r9:#x}");
        ok = false;
    }

    ok &= expect_err(
        "kernel address rejected",
        debug_write_raw(KERNEL_ADDRESS, 16),
        Error::BadAddress,
    );
    ok &= expect_err(
        "unmapped address rejected",
        debug_write_raw(UNMAPPED_ADDRESS, 16),
        Error::BadAddress,
    );
    ok &= expect_err(
        "non-canonical address rejected",
        debug_write_raw(NON_CANONICAL_ADDRESS, 16),
        Error::BadAddress,
    );
    ok &= expect_err(
        "wrapping range rejected",
        debug_write_raw(u64::MAX - 4, 16),
        Error::BadAddress,
    );
    // The top 8 bytes of the stack are mapped (`_start`'s return address lives there); the
    // next 8 are above the stack, where nothing is mapped.
    ok &= expect_err(
        "range crossing into unmapped rejected",
        debug_write_raw(USER_STACK_TOP - 8, 16),
        Error::BadAddress,
    );
    // Valid, mapped memory (the buffer is written, so its stack pages exist), too long.
    let buffer = core::hint::black_box([b'x'; DEBUG_WRITE_MAX as usize + 1]);
    ok &= expect_err(
        "oversized write rejected",
        debug_write_raw(buffer.as_ptr() as u64, buffer.len() as u64),
        Error::TooLarge,
    );

    // SAFETY: the destination is a kernel address, which the kernel must reject without
    // writing anything; no user memory is written.
    let raw = unsafe { raw_syscall(Sys::ModuleInfo as u64, [0, KERNEL_ADDRESS, 0, 0, 0, 0]) };
    ok &= expect_err(
        "module_info to kernel address rejected",
        baton_abi::decode_result(raw),
        Error::BadAddress,
    );
    // The same call into a record we own must work, or the rejection above proves nothing.
    ok &= match baton_rt::module_info(0) {
        Ok(_) => {
            println!("TEST PASS module_info to user record accepted");
            true
        }
        Err(e) => {
            println!("TEST FAIL module_info to user record accepted: got Err({e:?})");
            false
        }
    };

    ok &= expect_err(
        "spawn of missing module rejected",
        spawn("no-such-module"),
        Error::NotFound,
    );
    ok &= expect_err(
        "spawn name at kernel address rejected",
        spawn_raw(KERNEL_ADDRESS, 4),
        Error::BadAddress,
    );
    ok &= expect_err(
        "affinity to a CPU that is not online rejected",
        set_affinity(0, 4096),
        Error::InvalidArgument,
    );
    ok &= expect_err(
        "affinity of a thread that does not exist rejected",
        set_affinity(0xdead_0000_0001, 0),
        Error::NotFound,
    );
    ok &= set_affinity(0, 0).is_ok() && set_affinity(0, baton_abi::CPU_ANY).is_ok();

    if !ok {
        println!("some checks failed; going on to the undefined system call");
    }
    println!("invoking undefined system call {UNDEFINED_SYSCALL}");
    // SAFETY: an undefined number touches no memory: the kernel raises an exception of this
    // thread, which (with no handler) ends the task.
    let raw = unsafe { raw_syscall(UNDEFINED_SYSCALL, [0; 6]) };
    println!("TEST FAIL survived undefined system call (it returned {raw:#x})");
    1
}
