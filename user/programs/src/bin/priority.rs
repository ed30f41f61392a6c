//! `priority`: a high-priority thread is not starved by a low-priority CPU hog. The main
//! thread raises itself to priority 50, starts a spinner (which starts at the creator's
//! priority) and lowers the spinner to 10. Both are pinned to CPU 0 first (the spinner
//! pins itself and sleeps once, so that it moves there), so that at every CPU count they
//! compete for one processor: with a CPU each, as they would be on four CPUs otherwise,
//! nothing would be tested. The spinner spins without system calls until
//! `STOP` is set. The main thread then sleeps 2 ms fifty times: each time it wakes it must
//! get the processor back from the spinner, so all fifty sleeps complete while the spinner
//! is still spinning (and the spinner must have run at all, or nothing was shown). Then it
//! sets `STOP` and waits for the spinner to finish. Last, a priority above
//! [`PRIORITY_MAX`] must be rejected.
//!
//! Verdicts: `TEST PASS high priority runs over a spinner`,
//! `TEST PASS priority out of range rejected`.
#![no_std]
#![no_main]

use core::hint::spin_loop;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_abi::PRIORITY_MAX;
use baton_rt::report::print_summary;
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{clock_ns, println, set_affinity, set_priority, sleep_ns, Error};

baton_rt::entry!(main);

/// The main thread's priority.
const HIGH: u64 = 50;
/// The spinner's priority.
const LOW: u64 = 10;
/// Sleeps of the main thread.
const SLEEPS: u32 = 50;
/// Length of each sleep.
const SLEEP_NS: u64 = 2_000_000;
/// The spinner must have stopped this long after being told to.
const STOP_TIMEOUT_NS: u64 = 10_000_000_000;

static STACKS: StackPool<1, 4096> = StackPool::new();
/// Set to 1 to stop the spinner.
static STOP: AtomicU32 = AtomicU32::new(0);
/// Spin iterations, in thousands.
static SPINS: AtomicU64 = AtomicU64::new(0);
/// Set to 1 by the spinner when it stops.
static SPINNER_DONE: Counter = Counter::new(0);
/// Set to 1 by the spinner once it runs on CPU 0 (`u32::MAX` if it could not get there).
static SPINNER_PINNED: Counter = Counter::new(0);

fn spinner(_arg: u64) {
    // A running thread moves to the CPU it is pinned to when it next blocks.
    if set_affinity(0, 0)
        .and_then(|()| sleep_ns(1_000_000))
        .is_err()
    {
        SPINNER_PINNED.increment();
    }
    SPINNER_PINNED.increment();
    while STOP.load(Ordering::Acquire) == 0 {
        for _ in 0..1000 {
            spin_loop();
        }
        SPINS.fetch_add(1, Ordering::Relaxed);
    }
    SPINNER_DONE.increment();
}

/// The main part; the error is already printed.
fn high_over_spinner() -> Result<(), ()> {
    const WHAT: &str = "high priority runs over a spinner";
    if let Err(e) = set_priority(0, HIGH) {
        println!("TEST FAIL {WHAT}: set_priority(self, {HIGH}): {}", e.name());
        return Err(());
    }
    if let Err(e) = set_affinity(0, 0).and_then(|()| sleep_ns(1_000_000)) {
        println!("TEST FAIL {WHAT}: pinning to CPU 0: {}", e.name());
        return Err(());
    }
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL {WHAT}: no stack");
        return Err(());
    };
    let spinner_id = match spawn(stack, spinner, 0) {
        Ok(id) => id,
        Err(e) => {
            println!("TEST FAIL {WHAT}: creating the spinner: {}", e.name());
            return Err(());
        }
    };
    match SPINNER_PINNED.wait_for(1, STOP_TIMEOUT_NS) {
        Ok(1) => {}
        other => {
            println!("TEST FAIL {WHAT}: the spinner could not pin itself to CPU 0: {other:?}");
            return Err(());
        }
    }
    if let Err(e) = set_priority(spinner_id, LOW) {
        println!(
            "TEST FAIL {WHAT}: set_priority(spinner {spinner_id}, {LOW}): {}",
            e.name()
        );
        return Err(());
    }

    let start = clock_ns();
    let mut longest = 0u64;
    for i in 0..SLEEPS {
        let before = clock_ns();
        if let Err(e) = sleep_ns(SLEEP_NS) {
            println!("TEST FAIL {WHAT}: sleep {i}: {}", e.name());
            return Err(());
        }
        let took = clock_ns() - before;
        longest = longest.max(took);
        if took < SLEEP_NS {
            println!(
                "TEST FAIL {WHAT}: sleep {i} lasted {} us, less than {} us",
                took / 1000,
                SLEEP_NS / 1000
            );
            return Err(());
        }
    }
    let elapsed = clock_ns() - start;
    let spins = SPINS.load(Ordering::Relaxed);
    let spinner_finished = SPINNER_DONE.get() != 0;
    println!(
        "{SLEEPS} sleeps of {} us took {} us (longest {} us); the spinner ran {spins}k iterations",
        SLEEP_NS / 1000,
        elapsed / 1000,
        longest / 1000
    );
    let result = if spinner_finished {
        println!("TEST FAIL {WHAT}: the spinner finished before it was stopped");
        Err(())
    } else if spins == 0 {
        println!("TEST FAIL {WHAT}: the spinner never ran while the main thread slept");
        Err(())
    } else {
        println!("TEST PASS {WHAT}");
        Ok(())
    };

    STOP.store(1, Ordering::Release);
    if let Err(e) = SPINNER_DONE.wait_for(1, STOP_TIMEOUT_NS) {
        println!("TEST FAIL {WHAT}: the spinner did not stop: {}", e.name());
        return Err(());
    }
    println!("spinner stopped");
    result
}

fn main(_task_id: u64) -> i32 {
    let mut ok = high_over_spinner().is_ok();

    match set_priority(0, PRIORITY_MAX + 1) {
        Err(Error::InvalidArgument) => println!("TEST PASS priority out of range rejected"),
        other => {
            println!(
                "TEST FAIL priority out of range rejected: set_priority(self, {}) gave {other:?}, expected Err(InvalidArgument)",
                PRIORITY_MAX + 1
            );
            ok = false;
        }
    }

    print_summary();
    if ok {
        0
    } else {
        1
    }
}
