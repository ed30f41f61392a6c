//! `procmodel`: blocking in the *process model*, where a thread keeps its kernel stack while
//! it waits. The main thread calls `debug_block_process_model(20 ms, seed)` for five seeds;
//! the kernel computes a value from the seed in stack variables before blocking and
//! returns it afterwards, so each result must equal
//! [`process_model_check`]`(seed)`, and each call must last at least 20 ms. Meanwhile a
//! helper thread yields in a loop, counting: it must make progress while the main thread
//! is blocked (the block really gives up the processor), and the kernel must count at
//! least five process-model blocks.
//!
//! Verdict: `TEST PASS process model block`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_abi::process_model_check;
use baton_rt::report::print_summary;
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{clock_ns, debug_block_process_model, println, stats, yield_now, Stats};

baton_rt::entry!(main);

/// How long each block lasts.
const BLOCK_NS: u64 = 20_000_000;
/// The seeds. `rax` carries the result, so each check value must be below 2^63 to be
/// told apart from an error (asserted below).
const SEEDS: [u64; 5] = [
    0,
    1,
    0x0000_0000_dead_beef,
    0x1234_0000_5678_9abc,
    0xfedc_b000_0000_0001,
];
const _: () = {
    let mut i = 0;
    while i < SEEDS.len() {
        assert!(
            (process_model_check(SEEDS[i]) as i64) >= 0,
            "a seed's check value has the top bit set"
        );
        i += 1;
    }
};
/// The helper must have stopped this long after being told to.
const STOP_TIMEOUT_NS: u64 = 10_000_000_000;

static STACKS: StackPool<1, 4096> = StackPool::new();
/// Set to 1 to stop the helper.
static STOP: AtomicU32 = AtomicU32::new(0);
/// Loop iterations of the helper.
static SPINS: AtomicU64 = AtomicU64::new(0);
/// Set to 1 by the helper when it stops.
static HELPER_DONE: Counter = Counter::new(0);

fn helper(_arg: u64) {
    while STOP.load(Ordering::Acquire) == 0 {
        SPINS.fetch_add(1, Ordering::Relaxed);
        yield_now();
    }
    HELPER_DONE.increment();
}

fn read_stats() -> Option<Stats> {
    match stats() {
        Ok(s) => Some(s),
        Err(e) => {
            println!("TEST FAIL process model block: stats: {}", e.name());
            None
        }
    }
}

fn main(_task_id: u64) -> i32 {
    let Some(before) = read_stats() else {
        return 1;
    };
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL process model block: no stack");
        return 1;
    };
    if let Err(e) = spawn(stack, helper, 0) {
        println!(
            "TEST FAIL process model block: creating the helper: {}",
            e.name()
        );
        return 1;
    }

    let mut ok = true;
    let mut helper_progress = 0u64;
    for seed in SEEDS {
        let spins = SPINS.load(Ordering::Relaxed);
        let start = clock_ns();
        let result = debug_block_process_model(BLOCK_NS, seed, baton_rt::start::host_priv());
        let elapsed = clock_ns() - start;
        let progress = SPINS.load(Ordering::Relaxed).wrapping_sub(spins);
        helper_progress += progress;
        let want = process_model_check(seed);
        println!(
            "seed {seed:#x}: {result:x?} after {} us, helper ran {progress} times meanwhile",
            elapsed / 1000
        );
        if result != Ok(want) {
            println!(
                "TEST FAIL process model block: seed {seed:#x} gave {result:x?}, expected Ok({want:#x})"
            );
            ok = false;
        }
        if elapsed < BLOCK_NS {
            println!(
                "TEST FAIL process model block: seed {seed:#x} returned after {} us, before {} us",
                elapsed / 1000,
                BLOCK_NS / 1000
            );
            ok = false;
        }
    }
    if helper_progress == 0 {
        println!(
            "TEST FAIL process model block: the helper never ran while the main thread was blocked"
        );
        ok = false;
    }

    STOP.store(1, Ordering::Release);
    if let Err(e) = HELPER_DONE.wait_for(1, STOP_TIMEOUT_NS) {
        println!(
            "TEST FAIL process model block: helper did not stop: {}",
            e.name()
        );
        return 1;
    }

    let Some(after) = read_stats() else {
        return 1;
    };
    let blocks = after
        .blocks_process_model
        .saturating_sub(before.blocks_process_model);
    if after.blocks_process_model < SEEDS.len() as u64 || blocks < SEEDS.len() as u64 {
        println!(
            "TEST FAIL process model block: the kernel counted {blocks} process-model blocks, expected at least {}",
            SEEDS.len()
        );
        ok = false;
    }
    if ok {
        println!("TEST PASS process model block");
    }
    print_summary();
    if ok {
        0
    } else {
        1
    }
}
