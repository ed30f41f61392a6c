//! `stats`: prints every field of the kernel's counters on its own line,
//! `stats: <field> = <value>` (try `cargo xtask run -- init=init,stats`), then checks that
//! they are self-consistent.
//!
//! Verdict: `TEST PASS stats`.
#![no_std]
#![no_main]

use baton_rt::report::fields;
use baton_rt::{println, stats};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    let s = match stats() {
        Ok(s) => s,
        Err(e) => {
            println!("TEST FAIL stats: {}", e.name());
            return 1;
        }
    };
    for (name, value) in fields(&s) {
        println!("stats: {name} = {value}");
    }

    // What must hold whatever else is running: this thread exists and was created, and
    // this call runs on a kernel stack. (Not `stacks_allocated >= stacks_max`: stacks the
    // kernel booted on are in use without having been allocated from the pool.)
    let checks = [
        ("cpus >= 1", s.cpus >= 1),
        ("threads >= 1", s.threads >= 1),
        ("threads_created >= threads", s.threads_created >= s.threads),
        ("stacks_in_use >= 1", s.stacks_in_use >= 1),
        (
            "stacks_max >= stacks_in_use",
            s.stacks_max >= s.stacks_in_use,
        ),
        ("stack_bytes > 0", s.stack_bytes > 0),
        ("thread_bytes > 0", s.thread_bytes > 0),
        ("heap_used > 0", s.heap_used > 0),
    ];
    let mut ok = true;
    for (what, holds) in checks {
        if !holds {
            println!("TEST FAIL stats: {what} does not hold");
            ok = false;
        }
    }
    if ok {
        println!("TEST PASS stats");
        0
    } else {
        1
    }
}
