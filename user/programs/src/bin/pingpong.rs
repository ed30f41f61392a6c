//! `pingpong`: two threads of one task hand the turn back and forth [`ROUNDS`] times
//! through two words with `wait`/`wake`. In round `r` the main thread logs `(r, ping)`,
//! stores `r` in `PING` and wakes it, then waits for `PONG` to become `r`; the helper
//! waits for `PING` to become `r`, logs `(r, pong)`, stores `r` in `PONG` and wakes it.
//! Every entry goes into a shared log at the next free index, so the log must read
//! ping 1, pong 1, ping 2, pong 2, ... exactly: anything else means a thread ran when it
//! was not its turn, or saw a word before the write that preceded it.
//!
//! Verdict: `TEST PASS pingpong threads`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use baton_rt::report::print_summary;
use baton_rt::sync::{wait_until, Counter};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{clock_ns, println, stats, wake};

baton_rt::entry!(main);

/// Rounds of ping and pong.
const ROUNDS: u32 = 1000;
/// One round must not take longer than this.
const ROUND_TIMEOUT_NS: u64 = 10_000_000_000;
/// Log entry marker for the main thread's half of a round.
const PING: u32 = 0;
/// Log entry marker for the helper's half of a round.
const PONG: u32 = 1;
/// What the helper stores in `PONG_WORD` when it gives up, to unblock the main thread.
const GAVE_UP: u32 = u32::MAX;

static STACKS: StackPool<1, 16384> = StackPool::new();
/// The round the main thread has started.
static PING_WORD: AtomicU32 = AtomicU32::new(0);
/// The round the helper has finished.
static PONG_WORD: AtomicU32 = AtomicU32::new(0);
/// Entry `i` is `round << 1 | side`, written by whichever thread took index `i`.
static LOG: [AtomicU32; 2 * ROUNDS as usize] = [const { AtomicU32::new(0) }; 2 * ROUNDS as usize];
/// Next free index in `LOG`.
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Set to 1 by the helper when it has finished.
static HELPER_DONE: Counter = Counter::new(0);

fn log(round: u32, side: u32) {
    let index = NEXT.fetch_add(1, Ordering::AcqRel);
    if let Some(slot) = LOG.get(index) {
        slot.store(round << 1 | side, Ordering::Release);
    }
}

fn helper(_arg: u64) {
    for round in 1..=ROUNDS {
        match wait_until(&PING_WORD, |v| v >= round, ROUND_TIMEOUT_NS) {
            Ok(v) if v == round => {}
            Ok(v) => {
                println!("TEST FAIL pingpong threads: helper expected ping {round}, saw {v}");
                break;
            }
            Err(e) => {
                println!(
                    "TEST FAIL pingpong threads: helper waiting for ping {round}: {}",
                    e.name()
                );
                break;
            }
        }
        log(round, PONG);
        PONG_WORD.store(round, Ordering::Release);
        if let Err(e) = wake(&PONG_WORD, 1) {
            println!("TEST FAIL pingpong threads: wake of pong: {}", e.name());
            break;
        }
    }
    if PONG_WORD.load(Ordering::Acquire) != ROUNDS {
        PONG_WORD.store(GAVE_UP, Ordering::Release);
        let _ = wake(&PONG_WORD, 1);
    }
    HELPER_DONE.increment();
}

/// Runs the rounds from the main thread's side.
fn play() -> Result<(), ()> {
    for round in 1..=ROUNDS {
        log(round, PING);
        PING_WORD.store(round, Ordering::Release);
        if let Err(e) = wake(&PING_WORD, 1) {
            println!("TEST FAIL pingpong threads: wake of ping: {}", e.name());
            return Err(());
        }
        match wait_until(&PONG_WORD, |v| v >= round, ROUND_TIMEOUT_NS) {
            Ok(v) if v == round => {}
            Ok(v) => {
                println!("TEST FAIL pingpong threads: expected pong {round}, saw {v}");
                return Err(());
            }
            Err(e) => {
                println!(
                    "TEST FAIL pingpong threads: waiting for pong {round}: {}",
                    e.name()
                );
                return Err(());
            }
        }
    }
    Ok(())
}

/// Checks the log: ping 1, pong 1, ping 2, ...
fn check_log() -> Result<(), ()> {
    let entries = NEXT.load(Ordering::Acquire);
    if entries != LOG.len() {
        println!(
            "TEST FAIL pingpong threads: {entries} log entries, expected {}",
            LOG.len()
        );
        return Err(());
    }
    for (index, slot) in LOG.iter().enumerate() {
        let want = ((index / 2 + 1) as u32) << 1 | (index % 2) as u32;
        let got = slot.load(Ordering::Acquire);
        if got != want {
            let side = |v: u32| if v & 1 == PING { "ping" } else { "pong" };
            println!(
                "TEST FAIL pingpong threads: log entry {index} is {} {}, expected {} {}",
                side(got),
                got >> 1,
                side(want),
                want >> 1
            );
            return Err(());
        }
    }
    Ok(())
}

fn main(_task_id: u64) -> i32 {
    let waits_before = stats().map(|s| s.blocks_wait).unwrap_or(0);
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL pingpong threads: no stack");
        return 1;
    };
    if let Err(e) = spawn(stack, helper, 0) {
        println!(
            "TEST FAIL pingpong threads: creating the helper: {}",
            e.name()
        );
        return 1;
    }

    let start = clock_ns();
    let played = play();
    let elapsed = clock_ns() - start;
    if played.is_err() {
        return 1;
    }
    if let Err(e) = HELPER_DONE.wait_for(1, ROUND_TIMEOUT_NS) {
        println!(
            "TEST FAIL pingpong threads: helper did not finish: {}",
            e.name()
        );
        return 1;
    }
    if check_log().is_err() {
        return 1;
    }

    // How many of the waits really blocked (the others found the word already changed).
    let blocking_waits = stats()
        .map(|s| s.blocks_wait.saturating_sub(waits_before))
        .unwrap_or(0);
    println!(
        "{ROUNDS} rounds in {} us ({} ns per round trip), {blocking_waits} waits blocked",
        elapsed / 1000,
        elapsed / u64::from(ROUNDS)
    );
    println!("TEST PASS pingpong threads");
    print_summary();
    0
}
