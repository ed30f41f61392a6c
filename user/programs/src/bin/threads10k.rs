//! `threads10k`: 10,000 blocked threads cost no kernel stacks (the continuations paper's
//! central claim). The main thread creates [`THREADS`] threads on 4 KiB user stacks: the
//! even-numbered ones `wait` on `GO` (expected 0, no timeout), the odd-numbered ones
//! `sleep` 300 ms at a time until `GO` is set. Each increments `STARTED` before blocking.
//! Once all have started, `stats` must show every thread alive and at most `cpus + 2`
//! kernel stacks in use. Then `GO` is set and woken; every thread increments `DONE`
//! (waking the main thread) and exits, and after that every thread object must have been
//! reclaimed.
//!
//! The sleepers sleep in a loop rather than once because creating 10,000 threads can take
//! longer than 300 ms (under TCG it does): a single sleep would let early sleepers finish
//! and exit before the count is taken.
//!
//! Verdicts: `TEST PASS 10000 threads blocked with at most cpus+2 kernel stacks (N in use)`
//! and `TEST PASS all 10000 threads finished and were reclaimed`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, Ordering};

use baton_rt::report::{print_summary, Summary};
use baton_rt::sync::{wait_until, Counter};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{clock_ns, println, sleep_ns, stats, wake, yield_now, Stats, FOREVER};

baton_rt::entry!(main);

/// Threads created (besides the main one).
const THREADS: usize = 10_000;
/// Bytes of user stack per thread.
const STACK_SIZE: usize = 4096;
/// How long an odd-numbered thread sleeps before looking at `GO` again.
const SLEEP_NS: u64 = 300_000_000;
/// Print a progress line after creating this many threads.
const PROGRESS_EVERY: usize = 1000;
/// Give up waiting for the threads to start, or to finish, after this long.
const PHASE_TIMEOUT_NS: u64 = 100_000_000_000;
/// Pause before the first look at the thread count after all threads finished.
const REAP_PAUSE_NS: u64 = 50_000_000;
/// How many pauses to allow for the kernel to reclaim the exited threads.
const REAP_TRIES: u32 = 40;

static STACKS: StackPool<THREADS, STACK_SIZE> = StackPool::new();
/// 0 until the main thread releases every thread.
static GO: AtomicU32 = AtomicU32::new(0);
/// Threads that have started (incremented before blocking; the main thread polls it).
static STARTED: AtomicU32 = AtomicU32::new(0);
/// Threads that have finished.
static DONE: Counter = Counter::new(0);
/// System calls that failed in a worker.
static FAILURES: AtomicU32 = AtomicU32::new(0);

fn worker(index: u64) {
    STARTED.fetch_add(1, Ordering::Release);
    if index.is_multiple_of(2) {
        if wait_until(&GO, |go| go != 0, FOREVER).is_err() {
            FAILURES.fetch_add(1, Ordering::Relaxed);
        }
    } else {
        while GO.load(Ordering::Acquire) == 0 {
            if sleep_ns(SLEEP_NS).is_err() {
                FAILURES.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
    DONE.increment();
}

fn read_stats(when: &str) -> Option<Stats> {
    match stats() {
        Ok(s) => Some(s),
        Err(e) => {
            println!("TEST FAIL stats {when}: {}", e.name());
            None
        }
    }
}

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

fn main(_task_id: u64) -> i32 {
    let Some(before) = read_stats("before") else {
        return 1;
    };
    println!(
        "before: {} cpus, {} threads, {} kernel stacks in use, heap {} bytes",
        before.cpus, before.threads, before.stacks_in_use, before.heap_used
    );

    let start = clock_ns();
    for index in 0..THREADS {
        let Some(stack) = STACKS.take() else {
            println!("TEST FAIL out of stacks at thread {index}");
            return 1;
        };
        if let Err(e) = spawn(stack, worker, index as u64) {
            println!("TEST FAIL creating thread {index}: {}", e.name());
            return 1;
        }
        if (index + 1) % PROGRESS_EVERY == 0 {
            println!(
                "created {} threads in {} ms ({} started)",
                index + 1,
                ms(clock_ns() - start),
                STARTED.load(Ordering::Relaxed)
            );
        }
    }

    // Yield until every thread has run up to its blocking call.
    let deadline = clock_ns().saturating_add(PHASE_TIMEOUT_NS);
    while STARTED.load(Ordering::Acquire) < THREADS as u32 {
        if clock_ns() > deadline {
            println!(
                "TEST FAIL only {} of {THREADS} threads started",
                STARTED.load(Ordering::Relaxed)
            );
            return 1;
        }
        yield_now();
    }
    // The last threads to start may still be on their way into the kernel.
    for _ in 0..10 {
        yield_now();
    }
    println!(
        "all {THREADS} threads started after {} ms",
        ms(clock_ns() - start)
    );

    let Some(blocked) = read_stats("while blocked") else {
        return 1;
    };
    println!("{}", Summary(&blocked));
    let stack_limit = blocked.cpus + 2;
    let want_threads = before.threads + THREADS as u64;
    if blocked.stacks_in_use <= stack_limit && blocked.threads >= want_threads {
        println!(
            "TEST PASS {THREADS} threads blocked with at most cpus+2 kernel stacks ({} in use)",
            blocked.stacks_in_use
        );
    } else {
        println!(
            "TEST FAIL {THREADS} threads blocked: {} kernel stacks in use (limit {stack_limit}), {} threads (expected at least {want_threads})",
            blocked.stacks_in_use, blocked.threads
        );
    }
    println!(
        "while blocked: stacks_max {}, stacks_mean_milli {}, thread_bytes {}, heap {} bytes",
        blocked.stacks_max, blocked.stacks_mean_milli, blocked.thread_bytes, blocked.heap_used
    );
    let mut ok = blocked.stacks_in_use <= stack_limit && blocked.threads >= want_threads;

    let release = clock_ns();
    GO.store(1, Ordering::Release);
    match wake(&GO, u64::MAX) {
        Ok(woken) => println!("woke {woken} waiters"),
        Err(e) => {
            println!("TEST FAIL wake of GO: {}", e.name());
            return 1;
        }
    }
    match DONE.wait_for(THREADS as u32, PHASE_TIMEOUT_NS) {
        Ok(_) => println!(
            "all {THREADS} threads finished {} ms after release",
            ms(clock_ns() - release)
        ),
        Err(e) => {
            println!(
                "TEST FAIL only {} of {THREADS} threads finished: {}",
                DONE.get(),
                e.name()
            );
            return 1;
        }
    }

    // The threads exit right after counting themselves done: give the kernel a moment.
    let mut after = None;
    for attempt in 1..=REAP_TRIES {
        if sleep_ns(REAP_PAUSE_NS).is_err() {
            println!("TEST FAIL sleep while waiting for reclamation");
            return 1;
        }
        let Some(s) = read_stats("after") else {
            return 1;
        };
        let reclaimed = s.threads == before.threads;
        after = Some(s);
        if reclaimed {
            println!(
                "threads reclaimed after {} ms",
                attempt * ms(REAP_PAUSE_NS) as u32
            );
            break;
        }
    }
    let Some(after) = after else {
        return 1;
    };
    let failures = FAILURES.load(Ordering::Relaxed);
    let created = after.threads_created.saturating_sub(before.threads_created);
    if after.threads == before.threads && failures == 0 && created >= THREADS as u64 {
        println!("TEST PASS all {THREADS} threads finished and were reclaimed");
    } else {
        println!(
            "TEST FAIL all {THREADS} threads finished and were reclaimed: {} threads left (expected {}), {failures} failed system calls in workers, {created} created",
            after.threads, before.threads
        );
        ok = false;
    }
    println!(
        "after: stacks_max {}, stacks_mean_milli {}, stacks_allocated {}, heap {} bytes",
        after.stacks_max, after.stacks_mean_milli, after.stacks_allocated, after.heap_used
    );
    print_summary();
    if ok {
        0
    } else {
        1
    }
}
