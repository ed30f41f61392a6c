//! `sleepers`: timed blocking.
//!
//! 1. Sleep ordering: [`SLEEPERS`] threads, created in a shuffled order, sleep for
//!    distinct durations (30, 60, ..., 360 ms). They are released together (they wait on
//!    `GO`, and the main thread records the release time before setting it), and each
//!    sleeps until release + its duration, so creation and wake-up skew do not count. Each
//!    records its place in the finishing order on waking; the order must be by duration,
//!    and no thread may wake before its time by `clock`.
//! 2. `wait` on a word nobody wakes, with a 30 ms timeout: `TimedOut`, after at least
//!    30 ms.
//! 3. `wait` with an expected value the word does not hold: `WouldBlock`.
//! 4. `wait` on a misaligned address (`InvalidArgument`), a kernel address and an unmapped
//!    user address (`BadAddress`).
//!
//! Verdicts: `TEST PASS sleep ordering`, `TEST PASS wait timeout`,
//! `TEST PASS wait value mismatch`, `TEST PASS wait bad address`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use baton_rt::report::print_summary;
use baton_rt::sync::{wait_until, Counter};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{clock_ns, println, sleep_ns, wait, wait_raw, wake, Error};

baton_rt::entry!(main);

/// Sleeping threads; thread `k` sleeps `(k + 1) * STEP_NS`.
const SLEEPERS: usize = 12;
/// Difference between consecutive sleep durations: three timer ticks (10 ms each), so two
/// deadlines never expire in the same tick even when ticks are late. Threads woken in one
/// tick are ready at the same time and, on several CPUs, may run in either order: that is
/// the resolution the kernel promises, not a bug.
const STEP_NS: u64 = 30_000_000;
/// The order in which the sleepers are created (a permutation of `0..SLEEPERS`).
const CREATION_ORDER: [usize; SLEEPERS] = [7, 2, 11, 0, 5, 9, 3, 10, 1, 8, 4, 6];
/// The `wait` timeout of check 2.
const WAIT_TIMEOUT_NS: u64 = 30_000_000;
/// A timeout for calls that must fail at once (so a kernel that waits instead does not
/// hang the test).
const SHORT_TIMEOUT_NS: u64 = 1_000_000_000;
/// The sleepers must have finished this long after their release.
const FINISH_TIMEOUT_NS: u64 = 30_000_000_000;
/// Start of the kernel's direct map.
const KERNEL_ADDRESS: u64 = 0xffff_8000_0000_0000;
/// A canonical, aligned user address nothing is mapped at.
const UNMAPPED_ADDRESS: u64 = 0x0000_1000_0000_0000;
/// Marks an unused slot of `FINISH_ORDER`.
const EMPTY: u32 = u32::MAX;

static STACKS: StackPool<SLEEPERS, 4096> = StackPool::new();
/// 0 until the sleepers are released.
static GO: AtomicU32 = AtomicU32::new(0);
/// `clock_ns` at the release.
static RELEASE_NS: AtomicU64 = AtomicU64::new(0);
/// `FINISH_ORDER[i]` is the `k` of the `i`-th sleeper to wake.
static FINISH_ORDER: [AtomicU32; SLEEPERS] = [const { AtomicU32::new(EMPTY) }; SLEEPERS];
/// Next free index in `FINISH_ORDER`.
static FINISHED: AtomicUsize = AtomicUsize::new(0);
/// How late each sleeper woke, in ns past its deadline (`u64::MAX` if early).
static LATENESS_NS: [AtomicU64; SLEEPERS] = [const { AtomicU64::new(0) }; SLEEPERS];
/// Sleepers that have finished.
static DONE: Counter = Counter::new(0);
/// Sleepers whose system calls failed.
static FAILURES: AtomicU32 = AtomicU32::new(0);
/// Nobody ever wakes this word or changes it.
static NOBODY: AtomicU32 = AtomicU32::new(0);

fn duration_ns(k: usize) -> u64 {
    (k as u64 + 1) * STEP_NS
}

fn sleeper(k: u64) {
    let k = k as usize;
    if wait_until(&GO, |go| go != 0, FINISH_TIMEOUT_NS).is_err() {
        FAILURES.fetch_add(1, Ordering::Relaxed);
    } else {
        let deadline = RELEASE_NS.load(Ordering::Acquire) + duration_ns(k);
        if sleep_ns(deadline.saturating_sub(clock_ns())).is_err() {
            FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        let woke = clock_ns();
        let place = FINISHED.fetch_add(1, Ordering::AcqRel);
        if let Some(slot) = FINISH_ORDER.get(place) {
            slot.store(k as u32, Ordering::Release);
        }
        if let Some(slot) = LATENESS_NS.get(k) {
            slot.store(
                woke.checked_sub(deadline).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
    }
    DONE.increment();
}

/// Check 1.
fn sleep_ordering() -> bool {
    for (index, &k) in CREATION_ORDER.iter().enumerate() {
        let Some(stack) = STACKS.take() else {
            println!("TEST FAIL sleep ordering: no stack for sleeper {index}");
            return false;
        };
        if let Err(e) = spawn(stack, sleeper, k as u64) {
            println!(
                "TEST FAIL sleep ordering: creating sleeper {k}: {}",
                e.name()
            );
            return false;
        }
    }
    RELEASE_NS.store(clock_ns(), Ordering::Release);
    GO.store(1, Ordering::Release);
    if let Err(e) = wake(&GO, u64::MAX) {
        println!("TEST FAIL sleep ordering: wake of GO: {}", e.name());
        return false;
    }
    if let Err(e) = DONE.wait_for(SLEEPERS as u32, FINISH_TIMEOUT_NS) {
        println!(
            "TEST FAIL sleep ordering: {} of {SLEEPERS} sleepers finished: {}",
            DONE.get(),
            e.name()
        );
        return false;
    }

    let mut ok = true;
    let failures = FAILURES.load(Ordering::Relaxed);
    if failures != 0 {
        println!("TEST FAIL sleep ordering: {failures} sleepers had a system call fail");
        ok = false;
    }
    let order = FINISH_ORDER
        .each_ref()
        .map(|slot| slot.load(Ordering::Acquire));
    println!("finishing order (by duration index): {order:?}");
    let mut late_us = [0u64; SLEEPERS];
    for (k, slot) in LATENESS_NS.iter().enumerate() {
        let late = slot.load(Ordering::Relaxed);
        if late == u64::MAX {
            println!(
                "TEST FAIL sleep ordering: sleeper {k} woke before its {} ms were up",
                duration_ns(k) / 1_000_000
            );
            ok = false;
        }
        if let Some(us) = late_us.get_mut(k) {
            *us = late / 1000;
        }
    }
    println!("lateness past each deadline (us, by duration index): {late_us:?}");
    if order
        .iter()
        .enumerate()
        .any(|(place, &k)| k as usize != place)
    {
        println!("TEST FAIL sleep ordering: sleepers finished out of order: {order:?}");
        ok = false;
    }
    if ok {
        println!("TEST PASS sleep ordering");
    }
    ok
}

/// Check 2.
fn wait_timeout() -> bool {
    let start = clock_ns();
    let result = wait(&NOBODY, 0, WAIT_TIMEOUT_NS);
    let elapsed = clock_ns() - start;
    match result {
        Err(Error::TimedOut) if elapsed >= WAIT_TIMEOUT_NS => {
            println!("TEST PASS wait timeout (after {} us)", elapsed / 1000);
            true
        }
        other => {
            println!(
                "TEST FAIL wait timeout: got {other:?} after {} us, expected Err(TimedOut) after at least {} us",
                elapsed / 1000,
                WAIT_TIMEOUT_NS / 1000
            );
            false
        }
    }
}

/// Prints the verdict of one sub-check of 3 and 4: `got` must be `Err(want)`.
fn expect_err(what: &str, got: Result<(), Error>, want: Error) -> bool {
    if got == Err(want) {
        true
    } else {
        println!("TEST FAIL {what}: got {got:?}, expected Err({want:?})");
        false
    }
}

fn main(_task_id: u64) -> i32 {
    let mut ok = sleep_ordering();
    ok &= wait_timeout();

    if expect_err(
        "wait value mismatch",
        wait(&NOBODY, 1, SHORT_TIMEOUT_NS),
        Error::WouldBlock,
    ) {
        println!("TEST PASS wait value mismatch");
    } else {
        ok = false;
    }

    let word = NOBODY.as_ptr() as u64;
    let mut bad = expect_err(
        "wait bad address (misaligned)",
        wait_raw(word + 1, 0, SHORT_TIMEOUT_NS),
        Error::InvalidArgument,
    );
    bad &= expect_err(
        "wait bad address (kernel)",
        wait_raw(KERNEL_ADDRESS, 0, SHORT_TIMEOUT_NS),
        Error::BadAddress,
    );
    bad &= expect_err(
        "wait bad address (unmapped)",
        wait_raw(UNMAPPED_ADDRESS, 0, SHORT_TIMEOUT_NS),
        Error::BadAddress,
    );
    if bad {
        println!("TEST PASS wait bad address");
    } else {
        ok = false;
    }

    print_summary();
    if ok {
        0
    } else {
        1
    }
}
