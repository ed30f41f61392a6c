//! `fault_sse`: executes an SSE instruction in user mode. Baton keeps no vector state per
//! thread, so it may not run (one task would see the registers another left): it raises
//! #UD ("invalid opcode") and the kernel ends the task, keeping everything else running.
//!
//! Verdict: the kernel's fault report; `TEST FAIL ...` if the instruction returns.
#![no_std]
#![no_main]

use core::arch::asm;

use baton_rt::println;

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    println!("executing movd in user mode");
    // SAFETY: with CR4.OSFXSR clear, `movd` to an xmm register raises #UD; were it to
    // run, it would only write xmm0, which no code here uses.
    unsafe { asm!("movd xmm0, {0:e}", in(reg) 7u32, options(nomem, nostack)) };
    println!("TEST FAIL still alive after movd");
    1
}
