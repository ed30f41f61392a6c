//! Started by the `vm` test: writes to a page it made read-only, with no exception
//! handler, and must be killed with the fault's class, a write error, in the report.
#![no_std]
#![no_main]

use baton_rt::vm::{self, PROT_READ, PROT_RW};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    let Ok(a) = vm::allocate(None, 4096, PROT_RW) else {
        return 2;
    };
    // SAFETY: the page is this program's own, no reference into it.
    unsafe {
        (a as *mut u64).write_volatile(1);
        if vm::protect(a, 4096, PROT_READ, false).is_err() {
            return 3;
        }
        baton_rt::println!("vm_victim: storing to read-only memory at {a:#x}");
        (a as *mut u64).write_volatile(2);
    }
    baton_rt::println!("TEST FAIL vm_victim: the store to read-only memory went through");
    1
}
