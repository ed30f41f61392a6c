//! `floor_partner`: the partner task of the floor cross-address-space call (`bench`'s
//! `floor.xas.call`, the `floor` test). Spawned by its client, never alone.
//!
//! It registers [`floor_partner_entry`] with a stack of its own (`floor_xas_register`),
//! for calls from the task that spawned it, with the host-privilege right that task passed
//! as its bootstrap right, and sleeps for ever; its client ends it through its task port. The entry runs on the
//! client's thread, in this task's address space, and returns `arg + PARTNER_SECRET`
//! (a word of this task's memory, so the client can tell the code ran here) — or, for
//! the test's special arguments (from `u64::MAX - 4095` up: [`MODE_SYSCALL`], [`MODE_SPIN`],
//! and `ud2` for any other), fills its registers with [`PARTNER_MARK`] and does
//! something that must end the call with `Interrupted`.
#![no_std]
#![no_main]

use core::sync::atomic::AtomicU64;

use baton_abi::floor::FLOOR_XAS_RETURN;
use baton_abi::{Sys, FOREVER};
use baton_rt::floor::xas_register;
use baton_rt::{println, sleep_ns};

baton_rt::entry!(main);

/// Added to the argument by the entry: read from this task's memory.
#[no_mangle]
static PARTNER_SECRET: u64 = 0x5ec2_e700_0000_0000;
/// Before each of the special modes the entry fills every general register it may (all
/// but `rsp` and `rax`, which the call gives back) and `xmm0` and `xmm15` with this: a
/// call that ends without the partner's return must show none of it to the caller.
const PARTNER_MARK: u64 = 0x6d61_726b_6d61_726b;
/// The entry makes a system call (`null`).
const MODE_SYSCALL: u64 = u64::MAX - 1;
/// The entry spins until an interrupt.
const MODE_SPIN: u64 = u64::MAX - 2;

/// The entry's stack (it uses none today; a partner that calls functions would).
static STACK: [AtomicU64; 2048] = [const { AtomicU64::new(0) }; 2048];

core::arch::global_asm!(
    r#"
    .global floor_partner_entry
floor_partner_entry:
    cmpq $-4096, %rdi
    jae 1f
    addq {secret}(%rip), %rdi
    movl ${ret}, %eax
    syscall
    ud2
1:
    movq %rdi, %rcx
    movabsq ${mark}, %rax
    movq %rax, %rbx
    movq %rax, %rdx
    movq %rax, %rsi
    movq %rax, %rdi
    movq %rax, %rbp
    movq %rax, %r8
    movq %rax, %r9
    movq %rax, %r10
    movq %rax, %r11
    movq %rax, %r12
    movq %rax, %r13
    movq %rax, %r14
    movq %rax, %r15
    movq %rax, %xmm0
    movq %rax, %xmm15
    cmpq ${mode_syscall}, %rcx
    je 2f
    cmpq ${mode_spin}, %rcx
    je 3f
    ud2
2:
    movl ${null}, %eax
    syscall
    ud2
3:
    jmp 3b
    "#,
    secret = sym PARTNER_SECRET,
    mark = const PARTNER_MARK as i64,
    ret = const FLOOR_XAS_RETURN,
    null = const Sys::Null as u64,
    mode_syscall = const MODE_SYSCALL as i64,
    mode_spin = const MODE_SPIN as i64,
    options(att_syntax)
);

extern "C" {
    fn floor_partner_entry();
}

fn main(_task_id: u64) -> i32 {
    let top = STACK.as_ptr() as u64 + core::mem::size_of_val(&STACK) as u64;
    // Its client passed its host-privilege right as this task's bootstrap right; the
    // registration lets the client (the task that spawned this one) call it.
    let entry = floor_partner_entry as *const () as u64;
    // A fault in the partner ends the call (`Interrupted`), and its pages are mapped at
    // first touch (the kernel maps programs lazily from the boot image): the pages the
    // entry runs and reads are wired first, so that they are there and stay there.
    let secret = core::ptr::addr_of!(PARTNER_SECRET) as u64;
    // The entry's code is under 64 bytes; the secret is a word.
    for (at, len) in [(entry, 64), (secret, 8)] {
        let page = at & !4095;
        let end = (at + len + 4095) & !4095;
        if let Err(e) = baton_rt::vm::wire(page, end - page) {
            println!("TEST FAIL floor_partner: wire {page:#x}: {}", e.name());
            return 1;
        }
    }
    if let Err(e) = xas_register(entry, top, 0, baton_rt::start::bootstrap()) {
        println!("TEST FAIL floor_partner: register: {}", e.name());
        return 1;
    }
    loop {
        let _ = sleep_ns(FOREVER);
    }
}
