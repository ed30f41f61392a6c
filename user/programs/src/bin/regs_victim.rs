//! `regs_victim`: the task whose exception replies carry bad registers in the `regs_sane`
//! test (spawned by it, never alone).
//!
//! It makes its bootstrap right (a send right to `regs_sane`'s port) its task's exception
//! port and executes `ud2` with its resume address in `r13`. The handler answers with an
//! `rsp` outside user space, which must end this task; were it resumed anyway, its first
//! push faults and that exception goes to the same port, which `regs_sane` reports.
#![no_std]
#![no_main]

use core::arch::asm;

use baton_rt::exception::exception_port_set;
use baton_rt::{println, start::bootstrap};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    if let Err(e) = exception_port_set(0, bootstrap()) {
        println!("TEST FAIL regs_victim: exception_port_set: {}", e.name());
        return 1;
    }
    // SAFETY: `ud2` raises an exception. A handler that resumes this thread does so at
    // label 2 (its address is in r13), where the code goes on as if nothing had happened.
    unsafe {
        asm!(
            "lea r13, [rip + 2f]",
            "ud2",
            "2:",
            out("r13") _,
        )
    };
    println!("TEST FAIL regs_victim: resumed after a reply with an invalid rsp");
    1
}
