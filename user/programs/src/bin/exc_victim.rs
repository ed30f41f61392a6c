//! `exc_victim`: the debugged task of the `exc` test (spawned by it, never alone).
//!
//! It makes its bootstrap right (a send right to the `exc` program's port) its task's
//! exception port, then loads from address 0 with its resume address in `r13`; the
//! handler resumes it there with `rax` = 42. Then it executes `ud2`, whose exception the
//! handler leaves unanswered, which ends the task.
#![no_std]
#![no_main]

use core::arch::asm;

use baton_rt::exception::exception_port_set;
use baton_rt::{println, start::bootstrap};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    if let Err(e) = exception_port_set(0, bootstrap()) {
        println!("TEST FAIL exc_victim: exception_port_set: {}", e.name());
        return 1;
    }
    let v: u64;
    // SAFETY: the load from address 0 faults (nothing is mapped there); the handler resumes
    // at label 2 (whose address is in r13) with rax set, so no value is ever read from 0.
    unsafe {
        asm!(
            "lea r13, [rip + 2f]",
            "mov rax, qword ptr [0]",
            "2:",
            out("rax") v,
            out("r13") _,
        )
    };
    println!("ok: resumed by a handler in another task with rax {v}");
    // SAFETY: `ud2` raises an exception that is never answered: the task ends here.
    unsafe { asm!("ud2") };
    println!("TEST FAIL exc_victim: survived an unanswered exception");
    1
}
