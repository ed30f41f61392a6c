//! `fault_null`: reads address 0, which is never mapped. The kernel must terminate the task
//! (reporting the page fault) and keep running everything else.
//!
//! Verdict: the kernel's fault report; `TEST FAIL ...` if the read returns.
#![no_std]
#![no_main]

use core::arch::asm;

use baton_rt::println;

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    println!("dereferencing null");
    let value: u64;
    // SAFETY: reading address 0 is well defined at the machine level: page 0 is never
    // mapped in a Baton task (`layout::USER_MIN` is 0x1000), so the load raises a page
    // fault and the kernel ends this task. No Rust-visible memory is touched.
    unsafe {
        asm!(
            "mov {value}, qword ptr [0]",
            value = out(reg) value,
            options(nostack, readonly, preserves_flags),
        );
    }
    println!(
        "TEST FAIL still alive after null dereference (read {:#x})",
        core::hint::black_box(value)
    );
    1
}
