//! `flood`: one task's user errors must neither flood the console nor stall the others.
//! It measures its own progress (batches of `clock` calls, each of which takes the big
//! kernel lock) while another task makes 100,000 `debug_write` calls: first empty ones
//! from a good buffer (the control: the other CPU contends for the lock as much), then
//! ones with a bad address (each an error the kernel may report on the console), and
//! requires the mean batch (the run's time over the batches done in it) during the flood
//! to stay within [`SLOWDOWN_MAX`] times the control's, in one of [`ATTEMPTS`] pairs of
//! runs.
//! The log's bound on report lines is judged by `xtask` (`tests::flood_is_bounded`).
#![no_std]
#![no_main]

use baton_rt::check::Failed;
use baton_rt::ipc::{cap_drop, port_allocate};
use baton_rt::kobject::task_port;
use baton_rt::{clock_ns, spawn_with, Error};

baton_rt::entry!(main);

const TEST: &str = "flood";
macro_rules! check { ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) } }
fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// `clock` calls per batch.
const BATCH: u64 = 500;
/// How much slower the mean batch may get beside a task making errors than beside one
/// making as many good calls (a console write of every error under the lock costs far
/// more).
const SLOWDOWN_MAX: u64 = 4;

/// Nanoseconds of one batch of [`BATCH`] `clock` calls.
fn batch() -> u64 {
    let start = clock_ns();
    let mut last = start;
    for _ in 0..BATCH {
        last = clock_ns();
    }
    last.saturating_sub(start)
}

/// Whether task `id` still exists.
fn alive(id: u64) -> bool {
    match task_port(id) {
        Ok(port) => {
            let _ = cap_drop(port);
            true
        }
        Err(_) => false,
    }
}

fn main(_me: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// Runs `flood_spam` (the control run when `bootstrap` is not 0) and returns this task's
/// mean batch time while it ran, and the longest batch.
fn measure(bootstrap: u64) -> Result<(u64, u64), Failed> {
    let spam = must("spawn flood_spam", spawn_with("flood_spam", bootstrap))?;
    let start = clock_ns();
    let (mut n, mut max) = (0u64, 0u64);
    while alive(spam) {
        max = max.max(batch());
        n += 1;
    }
    check!(n >= 3, "{n} batches measured");
    Ok((clock_ns().saturating_sub(start) / n.max(1), max))
}

/// Measurement pairs tried before the test fails: the batches are timed by the clock, so
/// a host busy with other work can slow one run and not the other; a real stall slows
/// every flood run.
const ATTEMPTS: usize = 3;

fn run() -> Result<(), Failed> {
    let (mut flood, mut control, mut tries) = (0, 0, 0);
    while tries < ATTEMPTS {
        tries += 1;
        let port = must("port", port_allocate(0))?;
        let (c, cmax) = measure(port)?;
        let _ = cap_drop(port);
        let (f, fmax) = measure(0)?;
        baton_rt::println!(
            "flood: {BATCH} clock calls took {c} ns (mean; max {cmax}) beside good calls, {f} ns (mean; max {fmax}) beside bad ones"
        );
        (flood, control) = (f, c);
        if flood <= SLOWDOWN_MAX * control.max(1) {
            break;
        }
    }
    check!(
        flood <= SLOWDOWN_MAX * control.max(1),
        "another task's errors do not stall this one (mean batch {flood} ns <= {SLOWDOWN_MAX} x {control} ns; measured {tries} of at most {ATTEMPTS} times)"
    );
    Ok(())
}
