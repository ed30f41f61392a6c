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
