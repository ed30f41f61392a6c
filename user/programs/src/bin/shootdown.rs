//! TLB shootdown: reader threads (on other CPUs when there are several) read a page in a
//! tight loop; the main thread unmaps it. Every reader must fault right away — a reader
//! that kept a stale translation would go on reading freed memory, and the main thread
//! would then report failure. The expected end is the task killed by a page fault at the
//! page's address, which the test harness checks.
//!
//! Also checks the argument errors of `mem_map`/`mem_unmap`.
#![no_std]
#![no_main]

use baton_rt::thread::{spawn, StackPool};
use baton_rt::{exit, mem_map, mem_unmap, println, sleep_ns, yield_now, Error};
use core::sync::atomic::{AtomicU64, Ordering};

baton_rt::entry!(main);

/// Where the shared page is mapped.
const PAGE: u64 = 0x5000_0000;
/// What the page holds.
const MAGIC: u64 = 0x1234_5678_9abc_def0;
/// Reader threads.
const READERS: usize = 3;

static STACKS: StackPool<READERS, 16384> = StackPool::new();
static READS: [AtomicU64; READERS] = [const { AtomicU64::new(0) }; READERS];

fn reader(i: u64) {
    let count = READS.get(i as usize).unwrap_or(&READS[0]);
    loop {
        // SAFETY: the page is mapped by `main` before any reader starts; once it is
        // unmapped this load faults, which ends the task (the point of the test).
        let v = unsafe { core::ptr::read_volatile(PAGE as *const u64) };
        if v != MAGIC {
            println!("TEST FAIL reader {i} read {v:#x}");
            exit(1);
        }
        count.fetch_add(1, Ordering::Relaxed);
    }
}

fn check(what: &str, got: Result<(), Error>, want: Error) -> bool {
    if got == Err(want) {
        true
    } else {
        println!("TEST FAIL mem_map {what}: got {got:?}, want {want:?}");
        false
    }
}

fn main(_task: u64) -> i32 {
    let mut ok = true;
    ok &= check(
        "misaligned",
        mem_map(PAGE + 1, 4096, true),
        Error::InvalidArgument,
    );
    ok &= check("empty", mem_map(PAGE, 0, true), Error::InvalidArgument);
    ok &= check(
        "kernel",
        mem_map(0xffff_8000_0000_0000, 4096, true),
        Error::BadAddress,
    );
    ok &= check("too large", mem_map(PAGE, 2 << 30, true), Error::TooLarge);
    if let Err(e) = mem_map(PAGE, 4096, true) {
        println!("TEST FAIL mem_map: {e:?}");
        return 1;
    }
    ok &= check(
        "over a mapping",
        mem_map(PAGE, 4096, true),
        Error::InvalidArgument,
    );
    if !ok {
        return 1;
    }
    println!("TEST PASS mem_map argument checks");
    // SAFETY: the page was just mapped writable and nothing else uses it.
    unsafe { core::ptr::write_volatile(PAGE as *mut u64, MAGIC) };

    for i in 0..READERS {
        let Some(stack) = STACKS.take() else {
            println!("TEST FAIL no stack");
            return 1;
        };
        if let Err(e) = spawn(stack, reader, i as u64) {
            println!("TEST FAIL spawn: {e:?}");
            return 1;
        }
    }
    // Wait until every reader has read the page (and so holds a translation).
    while READS.iter().any(|r| r.load(Ordering::Relaxed) == 0) {
        yield_now();
    }
    println!("all {READERS} readers are reading; unmapping the page");
    // SAFETY: no Rust reference points into the page; readers use raw loads.
    match unsafe { mem_unmap(PAGE, 4096) } {
        Ok(1) => {}
        other => {
            println!("TEST FAIL mem_unmap returned {other:?}");
            return 1;
        }
    }
    let _ = sleep_ns(200_000_000);
    println!("TEST FAIL readers survived the unmap");
    1
}
