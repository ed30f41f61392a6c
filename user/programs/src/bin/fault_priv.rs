//! `fault_priv`: executes `hlt`, a privileged instruction, in user mode. The processor
//! raises a general-protection fault; the kernel must terminate the task and keep running
//! everything else.
//!
//! Verdict: the kernel's fault report; `TEST FAIL ...` if `hlt` returns.
#![no_std]
#![no_main]

use core::arch::asm;

use baton_rt::println;

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    println!("executing hlt in user mode");
    // SAFETY: `hlt` at CPL 3 raises #GP before doing anything; the kernel ends this task.
    // It touches no memory.
    unsafe { asm!("hlt", options(nomem, nostack)) };
    println!("TEST FAIL still alive after hlt");
    1
}
