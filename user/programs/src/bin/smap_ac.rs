//! `smap_ac`: a user thread that sets RFLAGS.AC must not switch SMAP off in the kernel.
//!
//! With SMAP on, the processor refuses kernel-mode accesses to user pages unless
//! RFLAGS.AC is set (`stac`). AC is a flag user code may set itself (`popfq`), and
//! `syscall` clears it through the kernel's flag mask, but an interrupt or exception
//! entry keeps it: unless the trap entry clears it, the kernel handles the trap with
//! SMAP off. The kernel checks the flag when it reports a thread killed by an exception
//! (`arch::cpu::check_ac_clear`, a panic when it is set).
//!
//! The program sets AC and, with it set, writes to 16 untouched pages (16 zero-fill page
//! faults) and spins for about 50 ms (timer interrupts); its own AC must still be set
//! afterwards (the kernel restores the user's flags). Then, with AC set, it executes
//! `ud2` with no exception port: the kernel ends the task and reports it, and must not
//! panic doing so.
//!
//! Verdict: `ok:` lines, the kernel's report of the kill, no kernel panic.
#![no_std]
#![no_main]

use core::arch::asm;

use baton_rt::vm::{allocate, PROT_RW};
use baton_rt::{clock_ns, println};

baton_rt::entry!(main);

/// RFLAGS.AC.
const AC: u64 = 1 << 18;
/// Pages written with AC set.
const PAGES: u64 = 16;
/// How long the program spins with AC set.
const SPIN_NS: u64 = 50_000_000;

/// The time-stamp counter.
fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: `rdtsc` reads the counter into edx:eax and touches nothing else.
    unsafe { asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack)) };
    u64::from(hi) << 32 | u64::from(lo)
}

/// Time-stamp-counter ticks in `ns` nanoseconds, measured against the kernel's clock.
fn ticks_for(ns: u64) -> u64 {
    let (t0, c0) = (clock_ns(), rdtsc());
    while clock_ns() - t0 < 10_000_000 {}
    let (t1, c1) = (clock_ns(), rdtsc());
    (c1 - c0).saturating_mul(ns) / (t1 - t0).max(1)
}

fn main(_task_id: u64) -> i32 {
    let len = PAGES * 4096;
    let base = match allocate(None, len, PROT_RW) {
        Ok(a) => a,
        Err(e) => {
            println!("TEST FAIL smap_ac: vm_allocate: {}", e.name());
            return 1;
        }
    };
    let deadline_ticks = ticks_for(SPIN_NS);
    let flags: u64;
    // SAFETY: sets AC, writes one byte to each of the `PAGES` pages at `base` (allocated
    // above, read-write, this task's own), spins until the time-stamp counter has
    // advanced by `deadline_ticks`, reads the flags and clears AC again. Byte stores are
    // aligned, so AC's alignment checking cannot fault them; the stack is used only by
    // `pushfq`/`popfq` pairs.
    unsafe {
        asm!(
            "pushfq",
            "or qword ptr [rsp], {ac}",
            "popfq",
            "2:",
            "mov byte ptr [{p}], 1",
            "add {p}, 4096",
            "dec {n}",
            "jnz 2b",
            "rdtsc",
            "shl rdx, 32",
            "or rax, rdx",
            "add {end}, rax",
            "3:",
            "pause",
            "rdtsc",
            "shl rdx, 32",
            "or rax, rdx",
            "cmp rax, {end}",
            "jb 3b",
            "pushfq",
            "pop {flags}",
            "pushfq",
            "and qword ptr [rsp], {not_ac}",
            "popfq",
            ac = in(reg) AC,
            not_ac = in(reg) !AC,
            p = inout(reg) base => _,
            n = inout(reg) PAGES => _,
            end = inout(reg) deadline_ticks => _,
            flags = out(reg) flags,
            out("rax") _,
            out("rdx") _,
        )
    };
    if flags & AC == 0 {
        println!("TEST FAIL smap_ac: RFLAGS.AC was lost across page faults and interrupts");
        return 1;
    }
    println!("ok: RFLAGS.AC kept across {PAGES} page faults and timer interrupts");
    println!("executing ud2 with RFLAGS.AC set");
    // SAFETY: sets AC and raises an invalid-opcode exception; with no exception port the
    // kernel ends this task, so nothing after `ud2` runs.
    unsafe {
        asm!(
            "pushfq",
            "or qword ptr [rsp], {ac}",
            "popfq",
            "ud2",
            ac = in(reg) AC,
        )
    };
    println!("TEST FAIL smap_ac: still alive after ud2");
    1
}
