//! `waitroom`: a `wait` that blocks leaves the kernel's heap as it found it, whichever
//! address it waits on.
//!
//! The kernel's wait queues are a fixed table of hash buckets (`kern::waitq`), each a ring
//! that keeps the room it grew to. Grown on first use, a bucket no wait had used before
//! took 96 bytes of heap at its first blocking wait, so the kernel's heap depended on which
//! waits had happened to block; tests that compare the heap after two rounds of the same
//! work (`fs_client::two_rounds`) then saw a round differ by 96 bytes on two CPUs under
//! load. The kernel now gives every bucket its ring at boot.
//!
//! This task waits, one after the other, on [`WORDS`] different words with a short
//! timeout (nobody wakes them, so each wait blocks and times out), spreading over the
//! buckets, and checks that every wait blocked and that the heap in use is the same
//! before and after. With the buckets grown on first use, the heap grows by 96 bytes for
//! each bucket these waits are the first to use.
//!
//! Verdict: `TEST PASS waitroom`.
#![no_std]
#![no_main]

use core::sync::atomic::AtomicU32;

use baton_rt::check::Failed;
use baton_rt::{println, Error};

baton_rt::entry!(main);

const TEST: &str = "waitroom";
/// Words waited on: enough to reach nearly every one of the 64 buckets.
const WORDS: usize = 256;
/// Each wait's timeout.
const TIMEOUT_NS: u64 = 100_000;

static WORD: [AtomicU32; WORDS] = [const { AtomicU32::new(0) }; WORDS];

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn run() -> Result<(), Failed> {
    // One wait first, so that whatever a first wait of the task may set up is there
    // before the heap is read.
    if let Some(w) = WORD.first() {
        let _ = baton_rt::sys::wait(w, 0, TIMEOUT_NS);
    }
    let before = must("stats", baton_rt::stats())?;
    let mut timed_out = 0;
    for w in WORD.iter() {
        if baton_rt::sys::wait(w, 0, TIMEOUT_NS) == Err(Error::TimedOut) {
            timed_out += 1;
        }
    }
    let after = must("stats", baton_rt::stats())?;
    let blocked = after.blocks_wait - before.blocks_wait;
    baton_rt::check!(
        TEST,
        timed_out == WORDS && blocked >= WORDS as u64,
        "each of {WORDS} waits on a different word blocked and timed out ({timed_out} timed out, {blocked} blocked)"
    );
    let grown = after.heap_used as i64 - before.heap_used as i64;
    baton_rt::check!(
        TEST,
        grown == 0,
        "waits on {WORDS} different words leave the kernel's heap as it was ({grown} bytes more)"
    );
    println!("waitroom: done");
    Ok(())
}
