//! `fpu_nomem`: uses a vector register and exits with code 0. The `fpu` test spawns it
//! with kernel-memory limits too small for a floating-point save area, where its first use
//! of the registers (here, or earlier in the runtime's own code) must be an exception that
//! ends the task ("device not available"), not a kernel panic; and with one large enough,
//! where it ends normally.
#![no_std]
#![no_main]

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    // SAFETY: zeroes xmm0, which no compiled code around it relies on (declared clobbered).
    unsafe { core::arch::asm!("xorps xmm0, xmm0", out("xmm0") _, options(nomem, nostack)) };
    0
}
