//! `fault_fpu`: executes an x87 instruction, then an SSE one, in user mode. Baton keeps no
//! floating-point or vector state per thread, so neither may run (one task would see the
//! registers another left): the first raises #NM ("device not available") and the kernel
//! ends the task, keeping everything else running.
//!
//! Verdict: the kernel's fault report; `TEST FAIL ...` if either instruction returns.
#![no_std]
#![no_main]

use core::arch::asm;

use baton_rt::println;

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    println!("executing fninit in user mode");
    // SAFETY: with CR0.EM set, `fninit` raises #NM before changing anything; were it to
    // run, it would only reset the x87 control state, which no code here uses.
    unsafe { asm!("fninit", options(nomem, nostack)) };
    println!("TEST FAIL still alive after fninit");
    // SAFETY: with CR4.OSFXSR clear, `xorps` raises #UD; were it to run, it would only
    // zero xmm0, which no code here uses.
    unsafe { asm!("xorps xmm0, xmm0", options(nomem, nostack)) };
    println!("TEST FAIL still alive after xorps");
    1
}
