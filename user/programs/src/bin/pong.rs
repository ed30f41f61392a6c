//! `pong`: two tasks take turns through `yield` alone (cross-task `wait`/`wake` needs
//! shared memory, which comes later). Each of the two tasks running this program yields
//! [`YIELDS`] times and counts the returns.
//!
//! Verdict: `TEST PASS yield pingpong task <id>`.
#![no_std]
#![no_main]

use baton_rt::report::print_summary;
use baton_rt::{clock_ns, println, yield_now};

baton_rt::entry!(main);

/// Yields per task.
const YIELDS: u32 = 500;

fn main(task_id: u64) -> i32 {
    let start = clock_ns();
    let mut returned = 0u32;
    for _ in 0..YIELDS {
        yield_now();
        returned += 1;
    }
    let elapsed = clock_ns() - start;
    if returned != YIELDS {
        println!("TEST FAIL yield pingpong task {task_id}: {returned} of {YIELDS} yields returned");
        return 1;
    }
    println!(
        "task {task_id}: {YIELDS} yields in {} us ({} ns each)",
        elapsed / 1000,
        elapsed / u64::from(YIELDS)
    );
    println!("TEST PASS yield pingpong task {task_id}");
    print_summary();
    0
}
