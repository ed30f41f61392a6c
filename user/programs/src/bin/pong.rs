//! `pong`: two tasks take turns through `yield` alone (cross-task `wait`/`wake` needs
//! shared memory, which comes later). Each of the two tasks running this program pins
//! itself to CPU 0, so that the two share one processor at every CPU count, then yields
//! [`YIELDS`] times and counts the returns. For its first [`TURNS`] yields it prints
//! `turn <n>` before each: since a yield must hand the processor to the other task, which
//! is ready, the two tasks' `turn` lines alternate in the log (the test checks that; a
//! timer tick between a line and its yield may break the alternation once in a while).
//! The two tasks do not wake from their pinning sleep together, so each first yields
//! until a yield of its has visibly switched (the kernel's `blocks_yield` grew by two
//! across it: the other task ran in between), for at most [`WARM_UP_NS`].
//!
//! Verdict: `TEST PASS yield pingpong task <id>`.
#![no_std]
#![no_main]

use baton_rt::report::print_summary;
use baton_rt::{clock_ns, println, set_affinity, sleep_ns, stats, yield_now};

baton_rt::entry!(main);

/// Yields per task.
const YIELDS: u32 = 500;
/// Yields preceded by a `turn` line.
const TURNS: u32 = 40;
/// The longest the warm-up waits for the other task.
const WARM_UP_NS: u64 = 2_000_000_000;

/// Yields until one yield switched to another thread and back, or [`WARM_UP_NS`] passed.
fn warm_up() {
    let start = clock_ns();
    let switches = || stats().map_or(0, |s| s.blocks_yield);
    while clock_ns() - start < WARM_UP_NS {
        let before = switches();
        yield_now();
        if switches() >= before + 2 {
            return;
        }
    }
}

fn main(task_id: u64) -> i32 {
    // A running thread moves to the CPU it is pinned to when it next blocks.
    if let Err(e) = set_affinity(0, 0).and_then(|()| sleep_ns(10_000_000)) {
        println!(
            "TEST FAIL yield pingpong task {task_id}: pinning to CPU 0: {}",
            e.name()
        );
        return 1;
    }
    warm_up();
    let start = clock_ns();
    let mut returned = 0u32;
    for turn in 0..YIELDS {
        if turn < TURNS {
            println!("turn {turn}");
        }
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
