//! `sting_exc`: CPU faults of Sting threads delivered to the faulting thread as
//! continuations (the Sting paper's section 7.1, Figure 2; `docs/sting.md`).
//!
//! With `Config::exceptions`, the runtime serves the task's exception port: a fault of a
//! sting thread runs that thread's handler in its own context, and the handler resumes,
//! unwinds or ends the thread while the task and the other threads go on.
//!
//! - a divide error repaired by the handler (a new divisor) and the division retried;
//! - a breakpoint resumed past the `int3` with a register the handler set;
//! - a bad access (an unmapped address) unwound to a `catch`, with the address;
//! - an invalid opcode in a thread with no handler ends that thread only: another thread
//!   keeps counting, and the runtime goes on; the same in an absorbed thread ends it alone
//!   and its demander goes on;
//! - faults on every virtual processor at once, each repaired in its own thread;
//! - with the kernel's Block and Unblock upcalls, a thread that slept in the kernel (and
//!   may come back on another kernel thread) still gets its fault;
//! - the floating-point and vector registers live at the fault survive the handler;
//! - the kernel's threads and charged memory are back to the baseline afterwards.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use alloc::vec::Vec;
use baton_rt::check::{finish, Failed};
use core::arch::asm;
use core::sync::atomic::Ordering::SeqCst;
use core::sync::atomic::{AtomicBool, AtomicU64};
use sting::exception::vector;
use sting::{catch, with_handler, Action, Config, Kind, Terminated};

baton_rt::entry!(main);

const TEST: &str = "sting_exc";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) }
}

fn main(_task_id: u64) -> i32 {
    finish(TEST, run())
}

type Measure = (u64, u64);

fn baseline() -> Measure {
    baton_rt::sys::stats().map_or((0, 0), |s| (s.threads, s.kmem_charged))
}

/// The number of CPUs.
fn cpus() -> usize {
    baton_rt::sys::stats().map_or(1, |s| s.cpus.max(1) as usize)
}

fn run() -> Result<(), Failed> {
    // The first runs warm up what stays: the kernel's table slots for virtual processors
    // and spares, the main thread's exception reply port, tables that grow once. A run with
    // one processor per CPU spawns kernel threads whose stacks baton-rt keeps for good (its
    // rule for kernel threads' stacks), so the measured runs have one processor; two more
    // rounds after the baseline must leave nothing behind.
    faults(cpus())?;
    for _ in 0..2 {
        faults(1)?;
        upcalls()?;
    }
    let base = settled();
    for _ in 0..2 {
        faults(1)?;
        upcalls()?;
    }
    let mut now = baseline();
    for _ in 0..100 {
        if now == base {
            break;
        }
        let _ = baton_rt::sys::sleep_ns(10_000_000);
        now = baseline();
    }
    check!(
        now == base,
        "the kernel's threads and charged memory are back: {base:?} before, {now:?} after"
    );
    Ok(())
}

/// The baseline once this task's other kernel threads are gone.
fn settled() -> Measure {
    let mut now = baseline();
    for _ in 0..100 {
        if now.0 == 1 {
            break;
        }
        let _ = baton_rt::sys::sleep_ns(10_000_000);
        now = baseline();
    }
    now
}

/// `n / d` by `div`: a divide error if `d` is 0.
#[inline(never)]
fn div(n: u64, d: u64) -> u64 {
    let q: u64;
    // SAFETY: a division; a zero divisor raises a divide error, which the runtime
    // delivers to the thread's handler (which may change `rcx` and retry).
    unsafe {
        asm!("xor edx, edx", "div rcx", inout("rax") n => q, inout("rcx") d => _, out("rdx") _)
    };
    q
}

/// An `int3`; returns `rax` after it (0 unless a handler changed it).
#[inline(never)]
fn breakpoint() -> u64 {
    let v: u64;
    // SAFETY: a breakpoint trap; the handler resumes after it.
    unsafe { asm!("int3", inout("rax") 0u64 => v) };
    v
}

/// Reads the word at `addr` (a fault if it is not mapped).
#[inline(never)]
fn load(addr: u64) -> u64 {
    let v: u64;
    // SAFETY: the read may fault; the runtime delivers the fault to the thread's handler.
    unsafe { asm!("mov {v}, [{a}]", a = in(reg) addr, v = out(reg) v, options(readonly, nostack)) };
    v
}

/// An invalid opcode.
#[inline(never)]
fn invalid() {
    // SAFETY: raises an invalid-opcode fault, which ends the thread unless handled.
    unsafe { asm!("ud2", options(nostack)) };
}

/// Repairs divide errors with divisor 2.
fn fix_divisor(f: &mut sting::Fault) -> Action {
    if f.vector == vector::DIVIDE {
        f.regs.rcx = 2;
        Action::Resume
    } else {
        Action::Unwind
    }
}

fn faults(vps: usize) -> Result<(), Failed> {
    let config = Config::new(vps, Kind::Fifo).exceptions();
    let (r, stats) = sting::run(config, move || -> Result<(), Failed> {
        // Divide by zero, repaired and retried.
        let q = with_handler(fix_divisor, || div(84, 0));
        check!(
            q == Ok(42),
            "a divide error is repaired by the thread's handler and retried"
        );
        // A breakpoint, resumed past it with a register the handler set.
        let v = with_handler(
            |f| {
                if f.vector == vector::BREAKPOINT {
                    f.regs.rax = 0xb0b;
                }
                Action::Resume
            },
            breakpoint,
        );
        check!(
            v == Ok(0xb0b),
            "a breakpoint resumes past the int3 with the handler's rax"
        );
        // A bad access, unwound to a catch.
        let r = catch(|| load(0x10));
        check!(
            matches!(r, Err(f) if f.vector == vector::PAGE_FAULT && f.addr == 0x10),
            "a bad access unwinds to the catch with the faulting address"
        );
        // Vector state live at the fault survives the handler.
        let x = core::hint::black_box(1.5f64);
        let y = with_handler(fix_divisor, || {
            let a = core::hint::black_box(x) * 3.0;
            let q = div(10, 0);
            a + q as f64
        });
        check!(
            y == Ok(9.5),
            "floating-point values live across a fault are kept"
        );
        // No handler: the thread ends, the others go on.
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let (s2, c2) = (stop.clone(), count.clone());
        let counter = sting::fork(move || {
            while !s2.load(SeqCst) {
                c2.fetch_add(1, SeqCst);
                sting::yield_now();
            }
        });
        let victim = sting::fork(|| {
            invalid();
            1u32
        });
        victim.wait();
        check!(
            victim.value() == Err(Terminated),
            "an invalid opcode with no handler ends the faulting thread"
        );
        let at = count.load(SeqCst);
        while count.load(SeqCst) < at + 5 {
            sting::yield_now();
        }
        check!(true, "the other threads go on");
        // The same in an absorbed thread: it ends alone.
        let d = sting::delay(|| {
            invalid();
            2u32
        });
        check!(
            d.value() == Err(Terminated),
            "an absorbed thread's fault ends it alone; its demander goes on"
        );
        stop.store(true, SeqCst);
        counter.wait();
        // Every processor at once.
        let n = sting::vp_count();
        let ts: Vec<_> = (0..n)
            .map(|vp| {
                sting::fork_on(vp, move || {
                    let mut sum = 0;
                    for i in 0..50u64 {
                        sum += with_handler(fix_divisor, || div(i * 2, 0)).unwrap_or(0);
                    }
                    sum
                })
            })
            .collect();
        let want: u64 = (0..50u64).sum();
        check!(
            ts.iter().all(|t| t.value() == Ok(&want)),
            "faults on every virtual processor at once, each repaired in its own thread"
        );
        Ok(())
    });
    r?;
    let expect = 6 + 50 * vps as u64;
    check!(
        stats.exceptions == expect,
        "the runtime dispatched {} exceptions ({expect} expected)",
        stats.exceptions
    );
    Ok(())
}

/// A thread that blocked in the kernel (Block and Unblock upcalls) still gets its fault.
fn upcalls() -> Result<(), Failed> {
    let config = Config::new(1, Kind::Fifo).kernel_upcalls(2).exceptions();
    let (r, stats) = sting::run(config, || -> Result<(), Failed> {
        let t = sting::fork(|| {
            let _ = baton_rt::sys::sleep_ns(5_000_000);
            with_handler(fix_divisor, || div(6, 0)).unwrap_or(0)
        });
        let other = sting::fork(|| div(8, 4));
        check!(other.value() == Ok(&2), "another thread ran");
        t.wait();
        check!(
            t.value() == Ok(&3),
            "a thread back from a kernel block gets its fault"
        );
        Ok(())
    });
    r?;
    check!(
        stats.kernel_blocks >= 1 && stats.exceptions == 1,
        "with the kernel's upcalls: {} blocks, {} exceptions",
        stats.kernel_blocks,
        stats.exceptions
    );
    Ok(())
}
