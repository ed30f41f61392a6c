//! Unprivileged processor instructions user programs may use directly.

use core::arch::asm;

/// Reads the time-stamp counter.
///
/// Under QEMU with `-icount shift=0` the TSC advances exactly once per instruction, so
/// differences are instruction counts; elsewhere they are TSC cycles. Not serialising:
/// earlier instructions may still be in flight when it executes.
#[inline(always)]
pub fn rdtsc() -> u64 {
    let lo: u32;
    let hi: u32;
    // SAFETY: `rdtsc` only reads the counter into edx:eax; Baton leaves CR4.TSD clear so it
    // is allowed in user mode.
    unsafe {
        asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Reads the time-stamp counter in program order: `lfence; rdtsc; lfence`.
///
/// The first `lfence` lets every earlier instruction finish before the counter is read;
/// the second keeps later instructions from starting before it. This is the timestamp for
/// benchmarks: a difference of two readings covers exactly the instructions between them
/// (on AMD processors `lfence` is dispatch-serialising only when the kernel has set the
/// bit that makes it so; under QEMU it makes no difference). Under QEMU with
/// `-icount shift=0` the difference is an exact instruction count, which includes the
/// `lfence`s and `rdtsc`s of the reading itself (a fixed overhead, measured by the
/// `bench` program as `floor.rdtsc.overhead`).
///
/// The asm does not claim `nomem`, so it is also a compiler barrier: memory accesses in
/// the code being measured are not moved across it.
#[inline(always)]
pub fn rdtsc_ordered() -> u64 {
    let lo: u32;
    let hi: u32;
    // SAFETY: `lfence` and `rdtsc` only order execution and read the counter into edx:eax;
    // Baton leaves CR4.TSD clear so `rdtsc` is allowed in user mode.
    unsafe {
        asm!(
            "lfence",
            "rdtsc",
            "lfence",
            out("eax") lo,
            out("edx") hi,
            options(nostack, preserves_flags),
        );
    }
    (u64::from(hi) << 32) | u64::from(lo)
}
