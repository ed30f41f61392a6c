//! `heap`: the runtime's heap (`baton_rt::heap`), through the `alloc` crate as a program
//! uses it.
//!
//! It checks, printing `ok: <what>` for each: a `Vec` of 100,000 `u64`s and its sum;
//! `format!` and `String`; `Box` (a value, a trait object, a 3 MiB slice); a `BTreeMap` of
//! 5,000 keys; that rounds of allocating and freeing do not make the heap map more than
//! the first round did, and that the pages of a big freed block go back to the kernel;
//! two threads allocating and freeing at once; and that allocations that cannot succeed
//! (1 TiB, past the heap's range; 16 GiB, more than the kernel grants) fail through the
//! fallible APIs (`Vec::try_reserve`) and as a null pointer from the global allocator,
//! leave nothing mapped, and do not break the heap.
//!
//! Verdict: `TEST PASS heap` or `TEST FAIL heap: ...`.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::sync::atomic::{AtomicU32, Ordering};

use baton_rt::check::Failed;
use baton_rt::heap::mapped_bytes;
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{println, Error};

baton_rt::entry!(main);

/// This program's name in its `ok:` / `TEST FAIL` lines (see `baton_rt::check`).
const TEST: &str = "heap";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

/// Runs `f`, turning an error into a failure that names `what`.
fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// Timeout for the worker threads (generous: QEMU without acceleration).
const SOON: u64 = 60_000_000_000;
/// Threads allocating at once.
const WORKERS: usize = 2;
/// Rounds each worker runs.
const WORKER_ROUNDS: u64 = 300;
static STACKS: StackPool<WORKERS, 16384> = StackPool::new();
/// Set to 1 when the workers may start (so that they run at once).
static GO: Counter = Counter::new(0);
static DONE: Counter = Counter::new(0);
/// Rounds in which a worker found its data changed under it.
static WORKER_ERRORS: AtomicU32 = AtomicU32::new(0);

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn run() -> Result<(), Failed> {
    check!(
        mapped_bytes() == 0,
        "nothing is mapped before the first allocation"
    );

    // Vec: 100,000 pushes (growing by doubling: many reallocations).
    let n: u64 = 100_000;
    let mut v = Vec::new();
    for i in 0..n {
        v.push(i);
    }
    let sum: u64 = v.iter().sum();
    check!(
        v.len() as u64 == n && sum == n * (n - 1) / 2,
        "Vec: 100,000 u64s pushed, sum {sum}; heap maps {} KiB",
        mapped_bytes() / 1024
    );
    drop(v);

    // String and format!.
    let mut s = format!("{}-{:04}-{:x}", "heap", 42, 0xbeefu32);
    s.push_str(", and more");
    for c in ['!', '?'] {
        s.push(c);
    }
    check!(
        s == "heap-0042-beef, and more!?",
        "String: format! and push give {s:?}"
    );

    // Box: a value, a trait object, a large zeroed slice.
    let b = Box::new(0x1234_5678_9abc_def0u64);
    let f: Box<dyn Fn(u64) -> u64> = Box::new(move |x| x + *b);
    let big = alloc::vec![0u8; 3 << 20].into_boxed_slice();
    check!(
        f(1) == 0x1234_5678_9abc_def1 && big.len() == 3 << 20 && big.iter().all(|&x| x == 0),
        "Box: a value, a closure, and a 3 MiB zeroed slice"
    );
    let before_free = mapped_bytes();
    drop(big);
    let after_free = mapped_bytes();
    check!(
        after_free < before_free && after_free <= before_free - (2 << 20),
        "freeing the 3 MiB block gives its pages back ({} KiB mapped, then {} KiB)",
        before_free / 1024,
        after_free / 1024
    );
    drop(f);

    // BTreeMap.
    let mut map = BTreeMap::new();
    for i in 0..5_000u64 {
        map.insert((i * 7_919) % 5_000, format!("v{i}"));
    }
    let ordered = map.keys().copied().eq(0..5_000u64);
    let found = map.get(&(7_919 % 5_000)).map(String::as_str) == Some("v1");
    map.retain(|k, _| k % 2 == 0);
    check!(
        ordered && found && map.len() == 2_500,
        "BTreeMap: 5,000 keys in order, lookups, retain"
    );
    drop(map);

    // Rounds of allocating and freeing: the heap maps no more than after the first.
    round();
    round();
    let first = mapped_bytes();
    let mut most = first;
    for _ in 0..30 {
        round();
        most = most.max(mapped_bytes());
    }
    check!(
        most <= first,
        "30 rounds of allocating and freeing: the heap stays at {} KiB mapped (at most {} KiB)",
        first / 1024,
        most / 1024
    );

    threads()?;

    // Allocations that cannot succeed.
    let mapped = mapped_bytes();
    let mut v: Vec<u8> = Vec::new();
    let tib = v.try_reserve(1 << 40);
    let gib16 = v.try_reserve(16 << 30);
    check!(
        tib.is_err() && gib16.is_err() && v.capacity() == 0,
        "Vec::try_reserve of 1 TiB (past the heap's range) and 16 GiB (more than the kernel grants) fail"
    );
    let layout = Layout::from_size_align(1 << 40, 8).map_err(|_| Failed)?;
    // The pointer escapes through `black_box`: otherwise the compiler, which may assume an
    // unused allocation succeeds, removes the call.
    // SAFETY: the layout's size is not zero; a block, were one returned, is freed at once
    // with the same layout.
    let p = core::hint::black_box(unsafe { alloc::alloc::alloc(layout) });
    let null = p.is_null();
    if !null {
        // SAFETY: `p` was just allocated with `layout` and nothing refers to it.
        unsafe { alloc::alloc::dealloc(p, layout) };
    }
    check!(
        null,
        "the global allocator returns null for 1 TiB (an infallible API then calls handle_alloc_error)"
    );
    check!(
        mapped_bytes() == mapped,
        "the failed allocations left nothing mapped ({} KiB)",
        mapped / 1024
    );
    let ok = v.try_reserve(1 << 20).is_ok();
    v.resize(1 << 20, 7);
    check!(
        ok && v.iter().all(|&x| x == 7),
        "the heap still allocates afterwards (1 MiB)"
    );
    drop(v);
    println!("heap: {} KiB mapped at the end", mapped_bytes() / 1024);
    Ok(())
}

/// One round of allocating and freeing a mix of sizes.
fn round() {
    let mut v: Vec<u64> = Vec::with_capacity(16);
    for i in 0..20_000 {
        v.push(i);
    }
    let boxes: Vec<Box<[u8; 100]>> = (0..200).map(|i| Box::new([i as u8; 100])).collect();
    let strings: Vec<String> = (0..200).map(|i| format!("string {i}")).collect();
    core::hint::black_box((&v, &boxes, &strings));
}

/// Two threads allocating and freeing at once, each checking its own data.
fn threads() -> Result<(), Failed> {
    for i in 0..WORKERS {
        let stack = STACKS.take().ok_or(Failed)?;
        must("spawning a worker", spawn(stack, worker, i as u64))?;
    }
    GO.increment();
    must(
        "waiting for the workers",
        DONE.wait_for(WORKERS as u32, SOON),
    )?;
    check!(
        WORKER_ERRORS.load(Ordering::Relaxed) == 0,
        "{WORKERS} threads allocating at once ({WORKER_ROUNDS} rounds each): every block intact"
    );
    Ok(())
}

/// A worker: rounds of Vec growth, Boxes and a BTreeMap, all tagged with `id` and checked.
fn worker(id: u64) {
    if GO.wait_for(1, SOON).is_err() {
        WORKER_ERRORS.fetch_add(1, Ordering::Relaxed);
    }
    let tag = (id + 1) << 48;
    for round in 0..WORKER_ROUNDS {
        let mut v = Vec::new();
        let mut boxes = Vec::new();
        let mut map = BTreeMap::new();
        for i in 0..64 {
            v.push(tag | round << 16 | i);
            boxes.push(Box::new(tag | i));
            map.insert(i, tag | round);
        }
        let good = v
            .iter()
            .enumerate()
            .all(|(i, &x)| x == tag | round << 16 | i as u64)
            && boxes.iter().enumerate().all(|(i, b)| **b == tag | i as u64)
            && map.values().all(|&x| x == tag | round);
        if !good {
            WORKER_ERRORS.fetch_add(1, Ordering::Relaxed);
        }
    }
    DONE.increment();
}
