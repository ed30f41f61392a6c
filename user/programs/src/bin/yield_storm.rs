//! `yield_storm`: [`WORKERS`] threads and the main thread each call `yield` [`YIELDS`]
//! times, counting every return. The workers are released together (they wait on `GO`
//! first) so that all of them storm at once; the main thread then yields alongside and
//! waits for them to finish. Every count must be exact: a lost or doubled return from
//! `yield`, or a thread that never came back, shows up here.
//!
//! That the yields really hand the processor over is checked too. After each yield a
//! thread appends its number to a shared record ([`RECORD`], the first [`RECORDED`]
//! entries). Every thread is pinned to CPU 0 before the workers are released, so that on
//! a machine with more CPUs the others cannot take threads away and leave one alone on its
//! CPU (whether they did
//! depended on how the host ran the virtual CPUs: a loaded host once made every yield of a
//! 4-CPU run return in place): with several threads ready on the CPU, a yield must let
//! another run, so one thread's entry is rarely followed by its own (a *repeat*; a thread
//! that never switched would make nearly all of them repeats). At most
//! [`REPEATS_PERCENT_MAX`] percent of the entries may be repeats (a timer tick or the last
//! thread left makes a few), and the kernel must have counted a switching yield
//! (`blocks_yield`) for at least half of all the yields. The program prints both counts for
//! the test's check.
//!
//! Verdict: `TEST PASS yield storm`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};

use baton_rt::report::print_summary;
use baton_rt::sync::{wait_until, Counter};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{clock_ns, println, set_affinity, stats, wake, yield_now};

baton_rt::entry!(main);

/// Worker threads.
const WORKERS: usize = 8;
/// Yields per thread.
const YIELDS: u32 = 2000;
/// The workers must have finished this long after they were released.
const TIMEOUT_NS: u64 = 50_000_000_000;

static STACKS: StackPool<WORKERS, 4096> = StackPool::new();
/// 0 until the main thread releases the workers.
static GO: AtomicU32 = AtomicU32::new(0);
/// Yields completed by each worker, and by the main thread (last slot).
static COUNTS: [AtomicU32; WORKERS + 1] = [const { AtomicU32::new(0) }; WORKERS + 1];
/// Workers that have finished.
static DONE: Counter = Counter::new(0);
/// Workers pinned to CPU 0 and about to wait for `GO`.
static READY: Counter = Counter::new(0);
/// Workers whose wait for `GO` failed.
static FAILURES: AtomicU32 = AtomicU32::new(0);
/// Entries of [`RECORD`].
const RECORDED: usize = 4000;
/// Which thread returned from each yield, in order (the first [`RECORDED`] yields).
static RECORD: [AtomicU8; RECORDED] = [const { AtomicU8::new(u8::MAX) }; RECORDED];
/// The next free entry of [`RECORD`].
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// The most repeats allowed, in percent of the entries.
const REPEATS_PERCENT_MAX: usize = 10;

/// Yields [`YIELDS`] times, counting into `COUNTS[slot]` and recording into [`RECORD`].
fn storm(slot: usize) {
    if let Some(count) = COUNTS.get(slot) {
        for _ in 0..YIELDS {
            yield_now();
            count.fetch_add(1, Ordering::Relaxed);
            if let Some(entry) = RECORD.get(NEXT.fetch_add(1, Ordering::SeqCst)) {
                entry.store(slot as u8, Ordering::SeqCst);
            }
        }
    }
}

/// Entries of [`RECORD`] whose thread is the one of the entry before.
fn repeats() -> usize {
    RECORD
        .windows(2)
        .filter(|w| w[0].load(Ordering::SeqCst) == w[1].load(Ordering::SeqCst))
        .count()
}

/// Pins the calling thread to CPU 0 (see the module documentation).
fn pin() -> bool {
    set_affinity(0, 0).is_ok()
}

fn worker(index: u64) {
    let pinned = pin();
    READY.increment();
    if !pinned || wait_until(&GO, |go| go != 0, TIMEOUT_NS).is_err() {
        FAILURES.fetch_add(1, Ordering::Relaxed);
    } else {
        storm(index as usize);
    }
    DONE.increment();
}

fn main(_task_id: u64) -> i32 {
    let yields_before = stats().map(|s| s.blocks_yield).unwrap_or(0);
    if !pin() {
        println!("TEST FAIL yield storm: set_affinity(0, 0) failed");
        return 1;
    }
    for index in 0..WORKERS {
        let Some(stack) = STACKS.take() else {
            println!("TEST FAIL yield storm: no stack for worker {index}");
            return 1;
        };
        if let Err(e) = spawn(stack, worker, index as u64) {
            println!(
                "TEST FAIL yield storm: creating worker {index}: {}",
                e.name()
            );
            return 1;
        }
    }

    // Every worker is on CPU 0 before any starts: then all of them storm there together.
    if let Err(e) = READY.wait_for(WORKERS as u32, TIMEOUT_NS) {
        println!(
            "TEST FAIL yield storm: {} of {WORKERS} workers ready: {}",
            READY.get(),
            e.name()
        );
        return 1;
    }
    let start = clock_ns();
    GO.store(1, Ordering::Release);
    if let Err(e) = wake(&GO, u64::MAX) {
        println!("TEST FAIL yield storm: wake of GO: {}", e.name());
        return 1;
    }
    storm(WORKERS);
    if let Err(e) = DONE.wait_for(WORKERS as u32, TIMEOUT_NS) {
        println!(
            "TEST FAIL yield storm: {} of {WORKERS} workers finished: {}",
            DONE.get(),
            e.name()
        );
        return 1;
    }
    let elapsed = clock_ns() - start;

    let failures = FAILURES.load(Ordering::Relaxed);
    let mut ok = failures == 0;
    if !ok {
        println!("TEST FAIL yield storm: {failures} workers could not wait for the start");
    }
    let mut total = 0u64;
    for (slot, count) in COUNTS.iter().enumerate() {
        let n = count.load(Ordering::Relaxed);
        total += u64::from(n);
        if n != YIELDS {
            println!("TEST FAIL yield storm: thread {slot} counted {n} yields, expected {YIELDS}");
            ok = false;
        }
    }
    let after = stats();
    let (yields, cpus) = after
        .as_ref()
        .map(|s| (s.blocks_yield.saturating_sub(yields_before), s.cpus.max(1)))
        .unwrap_or((0, 1));
    println!(
        "{total} yields by {} threads in {} ms; the kernel counted {yields} yield blocks; {cpus} CPUs",
        WORKERS + 1,
        elapsed / 1_000_000
    );
    // What a failure below needs to be understood: the raw counters.
    println!(
        "yield blocks before {yields_before}, after {:?}; stack handoffs {:?}",
        after.as_ref().map(|s| s.blocks_yield),
        after.as_ref().map(|s| s.stack_handoffs)
    );
    let repeats = repeats();
    println!("{repeats} repeats in {RECORDED} recorded yields");
    let allowed = RECORDED * REPEATS_PERCENT_MAX / 100;
    if repeats > allowed {
        println!(
            "TEST FAIL yield storm: {repeats} of {RECORDED} yields were followed by the same \
             thread's (at most {allowed} allowed): yield does not switch"
        );
        ok = false;
    }
    if yields * 2 < total {
        println!("TEST FAIL yield storm: the kernel counted {yields} switching yields of {total}");
        ok = false;
    }
    if ok {
        println!("TEST PASS yield storm");
    }
    print_summary();
    if ok {
        0
    } else {
        1
    }
}
