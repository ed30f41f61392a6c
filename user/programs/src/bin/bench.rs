//! `bench`: Baton's microbenchmarks, counted in instructions.
//!
//! Run by `cargo xtask bench`, which boots `init=bench shutdown` under QEMU with
//! `-icount shift=0,align=off,sleep=off` and one CPU. There the time-stamp counter advances
//! exactly once per instruction, so the difference of two [`rdtsc_ordered`] readings is the
//! exact number of instructions executed between them (user and kernel alike), and two runs
//! give the same figures to the instruction. `docs/benchmarks.md` defines every benchmark.
//!
//! # Method
//!
//! Each benchmark runs [`WARMUP`] iterations that are not recorded, then [`ITER`] recorded
//! ones, and keeps one delta per iteration. It prints
//!
//! ```text
//! BENCH name=<dotted.name> unit=instructions iterations=<n> median=<x> min=<y> max=<z>
//! ```
//!
//! where median (the lower median, element `(n - 1) / 2` of the sorted deltas), min and max
//! are over the per-iteration deltas. The readings include the timestamps' own cost, which
//! `floor.rdtsc.overhead` measures on its own. A timer tick (every 10 ms of virtual time,
//! that is every 10 million instructions) lands in a few iterations and shows in `max`; the
//! median is the figure to compare.
//!
//! Around the recorded iterations it reads the kernel's counters and prints their change,
//! which tells which kernel path the benchmark took:
//!
//! ```text
//! BENCHSTAT name=<dotted.name> handoffs=<d> switches=<d> discards=<d> recognitions=<d>
//! ```
//!
//! After the last benchmark it prints `BENCH done`. A failure prints `TEST FAIL bench: ...`
//! and the task exits with code 1.
#![no_std]
#![no_main]

use core::hint::black_box;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_abi::{process_model_check, Stats, Sys, FOREVER};
use baton_rt::exception;
use baton_rt::floor;
use baton_rt::ipc::{
    cap_drop, msg_buf, port_allocate, port_make_send, Disposition, IpcBuffer, MsgHeader,
    HEADER_SIZE, MSG_RECEIVE, MSG_SEND, MSG_SLOW,
};
use baton_rt::raw::{syscall0, syscall3};
use baton_rt::sync::{wait_until, Counter};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{println, rdtsc_ordered, set_affinity, spawn_with, stats, wake, yield_now, Error};

#[path = "../blk_bench.rs"]
mod blk_bench;
#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../file_bench.rs"]
mod file_bench;
#[path = "../fs_client.rs"]
mod fs_client;
#[path = "../fs_proto.rs"]
mod fs_proto;
#[path = "../mig_proto.rs"]
mod mig_proto;
#[path = "../ool_bench.rs"]
mod ool_bench;
#[path = "../swap_proto.rs"]
mod swap_proto;
#[path = "../table3_idl.rs"]
mod table3_idl;

baton_rt::entry!(main);

/// Iterations run before recording.
const WARMUP: usize = 100;
/// Recorded iterations of every benchmark.
const ITER: usize = 1000;
/// Every iteration, warm-up included.
const TOTAL: usize = WARMUP + ITER;
/// `SEQ` value meaning "warm-up iteration, do not record".
const NOT_RECORDED: u32 = u32::MAX;
/// Bytes of user stack of every thread the benchmarks create.
const STACK_SIZE: usize = 4096;
/// Seed for `debug_block_process_model`; the result must be `process_model_check(SEED)`.
const SEED: u64 = 0x0123_4567_89ab_cdef;

/// Per-iteration deltas of the benchmark being run (one-way, or the only series).
static SAMPLES: [AtomicU64; ITER] = [const { AtomicU64::new(0) }; ITER];
/// A second series (round trips) for the benchmarks that report two.
static SAMPLES2: [AtomicU64; ITER] = [const { AtomicU64::new(0) }; ITER];

/// Stacks of the partner threads (one per two-thread benchmark).
static PARTNER_STACKS: StackPool<8, 16384> = StackPool::new();
/// A fresh stack for every thread `thread.create_exit` creates: a stack is never reused,
/// so no thread can still be on a stack that is handed out again.
static CHILD_STACKS: StackPool<TOTAL, STACK_SIZE> = StackPool::new();
/// The same for `stress.frag.thread_create`.
static FRAG_STACKS: StackPool<TOTAL, STACK_SIZE> = StackPool::new();
/// Pairs of ports `stress.frag.thread_create` queues messages on.
const FRAG_PAIRS: usize = 8;
/// Messages queued on each port of a pair: `FRAG_PAIRS * FRAG_MESSAGES` holes in all.
const FRAG_MESSAGES: usize = 1000;
/// Bytes of in-line data of each of those messages.
const FRAG_BYTES: usize = 16;

/// The timestamp thread A took just before switching to thread B.
static STAMP: AtomicU64 = AtomicU64::new(0);
/// Index of the iteration thread A is in, or [`NOT_RECORDED`].
static SEQ: AtomicU32 = AtomicU32::new(NOT_RECORDED);
/// Set to 1 to make the partner thread stop.
static STOP: AtomicU32 = AtomicU32::new(0);
/// Incremented by a partner thread when it stops.
static PARTNER_DONE: Counter = Counter::new(0);
/// The round the main thread has started (`sync.waitwake.pingpong`).
static PING: AtomicU32 = AtomicU32::new(0);
/// The round the partner has answered (`sync.waitwake.pingpong`).
static PONG: AtomicU32 = AtomicU32::new(0);
/// The argument of the last child thread that ran (`thread.create_exit`).
static CHILD_RAN: AtomicU32 = AtomicU32::new(0);
/// Process-model calls whose result was not `process_model_check(SEED)`.
static BAD_RESULTS: AtomicU32 = AtomicU32::new(0);

/// A benchmark failed; the message has been printed.
struct Failed;

/// Prints `TEST FAIL bench: <what>` and gives [`Failed`].
macro_rules! fail {
    ($($arg:tt)*) => {{
        println!("TEST FAIL bench: {}", format_args!($($arg)*));
        Failed
    }};
}

/// `null`: the floor of a system call.
#[inline(always)]
fn sys_null() -> u64 {
    // SAFETY: `null` touches no user memory.
    unsafe { syscall0(Sys::Null as u64) }
}

/// `clock`.
#[inline(always)]
fn sys_clock() -> u64 {
    // SAFETY: `clock` touches no user memory.
    unsafe { syscall0(Sys::Clock as u64) }
}

/// `yield`.
#[inline(always)]
fn sys_yield() -> u64 {
    // SAFETY: `yield` touches no user memory.
    unsafe { syscall0(Sys::Yield as u64) }
}

/// `debug_block_process_model(0, seed, host_priv)`: a yield that keeps the kernel stack,
/// with this task's host-privilege right (`priv=bench` on the command line).
#[inline(always)]
fn sys_pmodel_yield(seed: u64, host_priv: u64) -> u64 {
    // SAFETY: `debug_block_process_model` touches no user memory.
    unsafe { syscall3(Sys::DebugBlockProcessModel as u64, 0, seed, host_priv) }
}

/// Stores `delta` as sample `index` of `series` (ignored when out of range).
#[inline(always)]
fn record(series: &[AtomicU64; ITER], index: usize, delta: u64) {
    if let Some(slot) = series.get(index) {
        slot.store(delta, Ordering::Relaxed);
    }
}

/// Clears both series, so that a sample a benchmark failed to record shows as 0.
fn clear_samples() {
    for slot in SAMPLES.iter().chain(SAMPLES2.iter()) {
        slot.store(0, Ordering::Relaxed);
    }
}

/// The task's send right to the host-privilege port: the one the boot command line gave
/// it (`priv=bench`), or its bootstrap right (the shell's `bench` passes its own that way).
fn host_priv() -> u64 {
    match baton_rt::start::host_priv() {
        0 => baton_rt::start::bootstrap(),
        h => h,
    }
}

/// Started with `--table` (the shell's `bench`): print a table a person reads, in TSC
/// ticks, instead of the `BENCH` lines `cargo xtask bench` parses.
static TABLE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Prints the `BENCH` line of `series` (or its row of the table).
fn report(name: &str, series: &[AtomicU64; ITER]) {
    report_n(name, series, ITER);
}

/// [`report`] of the first `n` samples (`n` at most [`ITER`]).
fn report_n(name: &str, series: &[AtomicU64; ITER], n: usize) {
    let n = n.clamp(1, ITER);
    let mut sorted = [0u64; ITER];
    for (dst, src) in sorted.iter_mut().zip(series.iter()).take(n) {
        *dst = src.load(Ordering::Relaxed);
    }
    let sorted = &mut sorted[..n];
    sorted.sort_unstable();
    let median = sorted.get((n - 1) / 2).copied().unwrap_or(0);
    let min = sorted.first().copied().unwrap_or(0);
    let max = sorted.last().copied().unwrap_or(0);
    if TABLE.load(Ordering::Relaxed) {
        println!("{name:<34} {median:>9} {min:>9} {max:>9}");
        return;
    }
    println!(
        "BENCH name={name} unit=instructions iterations={n} median={median} min={min} max={max}"
    );
}

/// The kernel's counters, or a failure.
fn read_stats() -> Result<Stats, Failed> {
    stats().map_err(|e| fail!("stats: {}", e.name()))
}

/// Prints the `BENCHSTAT` line: how the counters changed from `before` to `after`.
fn report_stats(name: &str, before: &Stats, after: &Stats) {
    if TABLE.load(Ordering::Relaxed) {
        return;
    }
    println!(
        "BENCHSTAT name={name} handoffs={} switches={} discards={} recognitions={}",
        after.stack_handoffs.wrapping_sub(before.stack_handoffs),
        after.context_switches.wrapping_sub(before.context_switches),
        after.stack_discards.wrapping_sub(before.stack_discards),
        after.recognitions.wrapping_sub(before.recognitions),
    );
}

/// A benchmark of one thread: `op` between two timestamps, [`TOTAL`] times.
fn single(name: &str, mut op: impl FnMut()) -> Result<(), Failed> {
    for _ in 0..WARMUP {
        op();
    }
    let before = read_stats()?;
    for i in 0..ITER {
        let t0 = rdtsc_ordered();
        op();
        let t1 = rdtsc_ordered();
        record(&SAMPLES, i, t1.wrapping_sub(t0));
    }
    let after = read_stats()?;
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// `start_partner_on` argument: leave the partner's CPU to the scheduler.
const NO_CPU: u64 = u64::MAX;

/// Starts a partner thread running `f`.
fn start_partner(f: fn(u64)) -> Result<(), Failed> {
    start_partner_on(f, NO_CPU)
}

/// Starts a partner thread running `f(arg)`.
fn start_partner_on(f: fn(u64), arg: u64) -> Result<(), Failed> {
    STOP.store(0, Ordering::Release);
    SEQ.store(NOT_RECORDED, Ordering::Release);
    let stack = PARTNER_STACKS
        .take()
        .ok_or_else(|| fail!("no stack left for a partner thread"))?;
    spawn(stack, f, arg).map_err(|e| fail!("creating a partner thread: {}", e.name()))?;
    Ok(())
}

/// Waits until every thread the benchmark created has ended and been reclaimed (the
/// kernel's thread count is back to `threads`), so the next benchmark starts alone.
fn wait_threads_gone(threads: u64) -> Result<(), Failed> {
    loop {
        if read_stats()?.threads <= threads {
            return Ok(());
        }
        yield_now();
    }
}

/// Stops the partner thread: sets `STOP`, runs `nudge` to get it past its blocking call,
/// waits for it to say so and for the kernel to reclaim it.
fn stop_partner(threads: u64, nudge: impl FnOnce()) -> Result<(), Failed> {
    let stopped = PARTNER_DONE.get().wrapping_add(1);
    STOP.store(1, Ordering::Release);
    nudge();
    PARTNER_DONE
        .wait_for(stopped, FOREVER)
        .map_err(|e| fail!("waiting for the partner thread: {}", e.name()))?;
    wait_threads_gone(threads)
}

/// Thread B of `sched.yield.switch` and `sched.pmodel.switch`: yields back at once, and
/// records the one-way delta from A's timestamp before A switched to its own after its
/// `yield` returned.
fn yield_partner(_arg: u64) {
    loop {
        sys_yield();
        let t1 = rdtsc_ordered();
        if STOP.load(Ordering::Acquire) != 0 {
            break;
        }
        let seq = SEQ.load(Ordering::Relaxed);
        if seq != NOT_RECORDED {
            let t0 = STAMP.load(Ordering::Relaxed);
            record(&SAMPLES, seq as usize, t1.wrapping_sub(t0));
        }
    }
    PARTNER_DONE.increment();
}

/// `sched.yield.switch` and `sched.yield.roundtrip` (`pmodel` false), or
/// `sched.pmodel.switch` and `sched.pmodel.roundtrip` (`pmodel` true): thread A (this one)
/// switches to thread B with `yield` (or a process-model yield); B yields back.
fn switch_pair(one_way: &str, round_trip: &str, pmodel: bool, threads: u64) -> Result<(), Failed> {
    clear_samples();
    start_partner(yield_partner)?;
    let host_priv = host_priv();
    let mut before = Stats::default();
    for w in 0..TOTAL {
        let recorded = w.checked_sub(WARMUP);
        if recorded == Some(0) {
            before = read_stats()?;
        }
        SEQ.store(
            recorded.map_or(NOT_RECORDED, |i| i as u32),
            Ordering::Relaxed,
        );
        let t0 = rdtsc_ordered();
        STAMP.store(t0, Ordering::Relaxed);
        let result = if pmodel {
            sys_pmodel_yield(SEED, host_priv)
        } else {
            sys_yield()
        };
        let t2 = rdtsc_ordered();
        if let Some(i) = recorded {
            record(&SAMPLES2, i, t2.wrapping_sub(t0));
        }
        if pmodel && result != process_model_check(SEED) {
            BAD_RESULTS.fetch_add(1, Ordering::Relaxed);
        }
    }
    let after = read_stats()?;
    stop_partner(threads, yield_now)?;
    let bad = BAD_RESULTS.swap(0, Ordering::Relaxed);
    if bad != 0 {
        return Err(fail!(
            "{bad} process-model yields returned the wrong value (the kernel stack did not survive)"
        ));
    }
    report(one_way, &SAMPLES);
    report_stats(one_way, &before, &after);
    report(round_trip, &SAMPLES2);
    report_stats(round_trip, &before, &after);
    Ok(())
}

/// `fpu.switch.cost`: whether the two threads touch a vector register before switching.
static FPU_TOUCH: AtomicU32 = AtomicU32::new(0);
/// The two threads' stacks, for each of the two runs.
static FPU_STACKS: StackPool<4, 16384> = StackPool::new();
/// `fpu.switch.cost`'s threads that finished.
static FPU_DONE: Counter = Counter::new(0);

/// Executes one vector instruction: the thread's first use of the floating-point and vector
/// registers, which gives it a save area that the kernel switches from then on.
fn touch_fpu() {
    // SAFETY: zeroes xmm0, declared clobbered.
    unsafe { core::arch::asm!("xorps xmm0, xmm0", out("xmm0") _, options(nomem, nostack)) };
}

/// Thread A of `fpu.switch.cost`: the loop of [`switch_pair`]'s thread A, in a thread of its
/// own (the main thread has used the registers long ago), then `STOP`.
fn fpu_switch_a(_arg: u64) {
    if FPU_TOUCH.load(Ordering::Relaxed) != 0 {
        touch_fpu();
    }
    for w in 0..TOTAL {
        let recorded = w.checked_sub(WARMUP);
        SEQ.store(
            recorded.map_or(NOT_RECORDED, |i| i as u32),
            Ordering::Relaxed,
        );
        STAMP.store(rdtsc_ordered(), Ordering::Relaxed);
        sys_yield();
    }
    STOP.store(1, Ordering::Release);
    FPU_DONE.increment();
}

/// Thread B of `fpu.switch.cost`: [`yield_partner`], after touching the registers when
/// A does.
fn fpu_switch_b(_arg: u64) {
    if FPU_TOUCH.load(Ordering::Relaxed) != 0 {
        touch_fpu();
    }
    loop {
        sys_yield();
        let t1 = rdtsc_ordered();
        if STOP.load(Ordering::Acquire) != 0 {
            break;
        }
        let seq = SEQ.load(Ordering::Relaxed);
        if seq != NOT_RECORDED {
            let t0 = STAMP.load(Ordering::Relaxed);
            record(&SAMPLES, seq as usize, t1.wrapping_sub(t0));
        }
    }
    FPU_DONE.increment();
}

/// `fpu.switch.cost`: `sched.yield.switch` (one way, A to B) between two threads that both
/// have used the floating-point registers, less the same between two that never have
/// (neither has a save area, so the kernel switches nothing). Under icount each XSAVEOPT
/// and XRSTOR counts as one instruction. Checks the kernel's count of save areas made:
/// none in the first run, one per thread in the second.
fn fpu_switch_cost(threads: u64) -> Result<(), Failed> {
    let mut medians = [(0u64, 0u64, 0u64); 2];
    for (touch, slot) in medians.iter_mut().enumerate() {
        clear_samples();
        STOP.store(0, Ordering::Release);
        SEQ.store(NOT_RECORDED, Ordering::Release);
        FPU_TOUCH.store(touch as u32, Ordering::Relaxed);
        let before = read_stats()?;
        let done = FPU_DONE.get();
        for f in [fpu_switch_b, fpu_switch_a] {
            let stack = FPU_STACKS
                .take()
                .ok_or_else(|| fail!("fpu.switch.cost: no stack left"))?;
            spawn(stack, f, 0).map_err(|e| fail!("fpu.switch.cost: spawn: {}", e.name()))?;
        }
        FPU_DONE
            .wait_for(done.wrapping_add(2), FOREVER)
            .map_err(|e| fail!("fpu.switch.cost: waiting: {}", e.name()))?;
        wait_threads_gone(threads)?;
        let after = read_stats()?;
        let made = after.fpu_first_uses.wrapping_sub(before.fpu_first_uses);
        if made != 2 * touch as u64 {
            return Err(fail!(
                "fpu.switch.cost: {made} save areas made in the run with{} floating point (expected {})",
                if touch == 0 { "out" } else { "" },
                2 * touch
            ));
        }
        let mut sorted = [0u64; ITER];
        for (dst, src) in sorted.iter_mut().zip(SAMPLES.iter()) {
            *dst = src.load(Ordering::Relaxed);
        }
        sorted.sort_unstable();
        *slot = (
            sorted.get((ITER - 1) / 2).copied().unwrap_or(0),
            sorted.first().copied().unwrap_or(0),
            sorted.last().copied().unwrap_or(0),
        );
    }
    let [(m0, lo0, hi0), (m1, lo1, hi1)] = medians;
    let (median, min, max) = (
        m1.saturating_sub(m0),
        lo1.saturating_sub(lo0),
        hi1.saturating_sub(hi0),
    );
    if TABLE.load(Ordering::Relaxed) {
        println!("{:<34} {median:>9} {min:>9} {max:>9}", "fpu.switch.cost");
        return Ok(());
    }
    println!(
        "BENCH name=fpu.switch.cost unit=instructions iterations={ITER} median={median} min={min} max={max}"
    );
    println!("fpu.switch.cost: one way {m0} without floating point, {m1} with");
    Ok(())
}

/// Thread B of `sync.waitwake.pingpong`: waits for each round in `PING`, answers it in
/// `PONG` and wakes A.
fn pong_partner(cpu: u64) {
    if cpu != NO_CPU && set_affinity(0, cpu).is_err() {
        return;
    }
    let mut round = 1u32;
    loop {
        let seen = wait_until(&PING, |v| v >= round, FOREVER);
        if STOP.load(Ordering::Acquire) != 0 || seen.is_err() {
            break;
        }
        PONG.store(round, Ordering::Release);
        let _ = wake(&PONG, 1);
        round = round.wrapping_add(1);
    }
    PARTNER_DONE.increment();
}

/// `sync.waitwake.pingpong`: one round trip of A (this thread) waking B and waiting, and
/// B waking A and waiting; `sync.waitwake.cross` the same with A pinned to CPU 0 and B to
/// CPU 1 (`cross`).
fn waitwake_pingpong(threads: u64, cross: bool) -> Result<(), Failed> {
    let name = if cross {
        "sync.waitwake.cross"
    } else {
        "sync.waitwake.pingpong"
    };
    clear_samples();
    PING.store(0, Ordering::Release);
    PONG.store(0, Ordering::Release);
    let partner_cpu = if cross {
        set_affinity(0, 0).map_err(|e| fail!("{name}: pinning to CPU 0: {}", e.name()))?;
        1
    } else {
        NO_CPU
    };
    start_partner_on(pong_partner, partner_cpu)?;
    let mut before = Stats::default();
    for w in 0..TOTAL {
        let recorded = w.checked_sub(WARMUP);
        if recorded == Some(0) {
            before = read_stats()?;
        }
        let round = w as u32 + 1;
        let t0 = rdtsc_ordered();
        PING.store(round, Ordering::Release);
        let woken = wake(&PING, 1);
        let answered = wait_until(&PONG, |v| v >= round, FOREVER);
        let t1 = rdtsc_ordered();
        if let Some(i) = recorded {
            record(&SAMPLES, i, t1.wrapping_sub(t0));
        }
        if let Err(e) = woken.and(answered) {
            return Err(fail!("{name}: round {round}: {}", e.name()));
        }
    }
    let after = read_stats()?;
    stop_partner(threads, || {
        PING.store(u32::MAX, Ordering::Release);
        let _ = wake(&PING, 1);
    })?;
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// A thread of `thread.create_exit`: says it ran, and ends.
fn child(arg: u64) {
    CHILD_RAN.store(arg as u32, Ordering::Release);
    let _ = wake(&CHILD_RAN, 1);
}

/// `thread.create_exit`: create a thread, wait until it has run, and it ends; named
/// `name`, with a fresh stack from `stacks` for every thread.
fn create_exit(
    name: &str,
    stacks: &'static StackPool<TOTAL, STACK_SIZE>,
    threads: u64,
) -> Result<(), Failed> {
    clear_samples();
    // The pool is `.bss`, whose pages the kernel zero-fills at first touch: touched here,
    // so that each thread's first run does not take its stack's zero fill (the row times
    // a thread's life, not the first touch of fresh memory: `vm.fault.zero` does).
    let base = core::ptr::addr_of!(*stacks) as u64;
    for page in (0..(TOTAL * STACK_SIZE) as u64).step_by(4096) {
        // SAFETY: a read of the pool's memory (its first field, `repr(C)`), which no
        // thread uses yet; nothing holds a reference into it.
        unsafe { core::ptr::read_volatile((base + page) as *const u8) };
    }
    CHILD_RAN.store(0, Ordering::Release);
    let mut before = Stats::default();
    for w in 0..TOTAL {
        let recorded = w.checked_sub(WARMUP);
        if recorded == Some(0) {
            before = read_stats()?;
        }
        let tag = w as u32 + 1;
        let stack = stacks
            .take()
            .ok_or_else(|| fail!("{name}: out of stacks at iteration {w}"))?;
        let t0 = rdtsc_ordered();
        let created = spawn(stack, child, u64::from(tag));
        let ran = created.and_then(|_| wait_until(&CHILD_RAN, |v| v >= tag, FOREVER));
        let t1 = rdtsc_ordered();
        if let Some(i) = recorded {
            record(&SAMPLES, i, t1.wrapping_sub(t0));
        }
        if let Err(e) = ran {
            return Err(fail!("{name}: iteration {w}: {}", e.name()));
        }
    }
    let after = read_stats()?;
    wait_threads_gone(threads)?;
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// `stress.frag.thread_create`: `thread.create_exit` after this task has left
/// `FRAG_PAIRS * FRAG_MESSAGES` holes in the kernel heap. It queues `FRAG_BYTES`-byte
/// messages on pairs of ports in turn (each queued message holds its data in a small heap
/// block, so the two ports' blocks interleave), then receives every message of the first
/// port of each pair: the second port's messages stay queued around the holes while the
/// threads are created. A heap whose cost grows with its free blocks (first fit) shows it
/// here; the row should stay within 1.2 times `thread.create_exit`.
fn frag_create_exit(threads: u64) -> Result<(), Failed> {
    let name = "stress.frag.thread_create";
    let mut buf = IpcBuffer::new().map_err(|e| fail!("{name}: ipc buffer: {}", e.name()))?;
    let mut ports = [(0u64, 0u64); 2 * FRAG_PAIRS];
    for p in ports.iter_mut() {
        let receive =
            port_allocate(FRAG_MESSAGES as u64).map_err(|e| fail!("{name}: port: {}", e.name()))?;
        let send = port_make_send(receive, false)
            .map_err(|e| fail!("{name}: send right: {}", e.name()))?;
        *p = (receive, send);
    }
    let data = [0x5au8; FRAG_BYTES];
    for m in 0..FRAG_MESSAGES {
        for (i, &(_, send)) in ports.iter().enumerate() {
            buf.send(send, (m * ports.len() + i) as u64, &[], &data)
                .map_err(|e| fail!("{name}: queueing message {m} on port {i}: {}", e.name()))?;
        }
    }
    // Drain the first port of every pair: a hole between every two blocks still in use.
    for (i, &(receive, _)) in ports.iter().enumerate().step_by(2) {
        for m in 0..FRAG_MESSAGES {
            buf.msg(MSG_RECEIVE, receive, FOREVER)
                .map_err(|e| fail!("{name}: receiving message {m} on port {i}: {}", e.name()))?;
        }
    }
    let measured = create_exit(name, &FRAG_STACKS, threads);
    for (receive, send) in ports {
        let _ = cap_drop(send);
        let _ = cap_drop(receive);
    }
    measured
}

/// `rpc_server`'s request ids (see that program).
mod rpc_ids {
    pub const TIMED: u64 = 1;
    pub const RESET: u64 = 2;
    pub const DUMP: u64 = 3;
    pub const EXIT: u64 = 4;
    /// From now on receive into a 64 KiB buffer of the server's own (`MSG_BUF`).
    pub const BIG: u64 = 6;
    /// Timestamp pairs per `DUMP` reply.
    pub const DUMP_MAX: usize = 250;
}

/// The client's timestamps of each timed RPC: before the call, after the reply.
static CALLED: [AtomicU64; TOTAL] = [const { AtomicU64::new(0) }; TOTAL];
/// See [`CALLED`].
static RETURNED: [AtomicU64; TOTAL] = [const { AtomicU64::new(0) }; TOTAL];

/// Timed RPC number `i`: `call` between two timestamps, kept in [`CALLED`] and
/// [`RETURNED`] for `pair_timestamps`; the call's result.
#[inline(always)]
fn timed_call(
    i: usize,
    call: impl FnOnce() -> Result<(), baton_rt::Error>,
) -> Result<(), baton_rt::Error> {
    let t0 = rdtsc_ordered();
    let r = call();
    let t1 = rdtsc_ordered();
    if let (Some(c), Some(r)) = (CALLED.get(i), RETURNED.get(i)) {
        c.store(t0, Ordering::Relaxed);
        r.store(t1, Ordering::Relaxed);
    }
    r
}

/// One `rpc_server` call outside the timed loop: a request with `id` and `data`, its reply
/// left in `buf`.
fn rpc_call(
    buf: &mut IpcBuffer,
    server: u64,
    reply: u64,
    id: u64,
    data: &[u8],
) -> Result<(), Failed> {
    let header = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: server,
        reply,
        id,
        ..MsgHeader::default()
    };
    buf.set(header, &[], data)
        .and_then(|()| buf.msg(MSG_SEND | MSG_RECEIVE, reply, FOREVER))
        .map_err(|e| fail!("rpc_server request {id}: {}", e.name()))
}

/// `rpc.*`: echo RPCs with 0, 32 or 1,024 bytes of in-line data to the `rpc_server` task
/// (another address space), measured as sel4bench measures Call + ReplyRecv: the client's
/// timestamp right before its `ipc_msg(SEND|RECEIVE)` to the server's right after its
/// receive returned, plus the server's right before its `ipc_msg(SEND|RECEIVE)` (reply and
/// wait) to the client's right after its call returned. `rpc.*.roundtrip` is the client's
/// whole round trip, the server's work (reading the request, writing the reply header)
/// included. `rpc.32k.switching` sends 32 KiB the same way from a buffer of the client's own
/// to a buffer of the server's (`MSG_BUF`: the IPC buffer is one page), which the fast path
/// does not take: the general path copies each message into the kernel and out again.
fn rpc_benchmarks() -> Result<(), Failed> {
    use rpc_ids::*;
    let mut buf = IpcBuffer::new().map_err(|e| fail!("ipc buffer: {}", e.name()))?;
    let boot = port_allocate(0).map_err(|e| fail!("port: {}", e.name()))?;
    spawn_with("rpc_server", boot).map_err(|e| fail!("spawn rpc_server: {}", e.name()))?;
    buf.msg(MSG_RECEIVE, boot, FOREVER)
        .map_err(|e| fail!("hello: {}", e.name()))?;
    let server = buf.descriptor(0).map(|d| d.value).unwrap_or(0);
    let reply = port_allocate(0).map_err(|e| fail!("port: {}", e.name()))?;
    for (name, len, slow) in [
        ("rpc.null.fast", 0, false),
        ("rpc.32b.fast", 32, false),
        ("rpc.1k.fast", 1024, false),
        ("rpc.null.slow", 0, true),
        ("rpc.32b.slow", 32, true),
        ("rpc.1k.slow", 1024, true),
    ] {
        timed_rpcs(&mut buf, server, reply, name, len, slow)?;
    }
    // 32 KiB through the general path: the server receives into a buffer of its own from
    // now on (its IPC buffer is one page).
    rpc_call(&mut buf, server, reply, BIG, &[])?;
    timed_rpcs_32k(&mut buf, server, reply, "rpc.32k.switching")?;
    rpc_call(&mut buf, server, reply, EXIT, &[])?;
    for name in [server, reply, boot] {
        let _ = cap_drop(name);
    }
    Ok(())
}

/// `rpc.*.migrating`: the same echo RPCs, measured the same way, to a `mig_server` whose
/// port has activations: the client's thread runs the server's dispatch routine itself
/// (seed 001's migrating RPC). `rpc.32k.migrating` sends 32 KiB from the client's own
/// buffer (`MSG_BUF`) to a `mig_server` whose activations have nine-page buffers.
fn migrating_benchmarks() -> Result<(), Failed> {
    let mut buf = IpcBuffer::new().map_err(|e| fail!("ipc buffer: {}", e.name()))?;
    // Two activations, no sidetrack.
    let server = mig_proto::start(&mut buf, 2, false, false)
        .map_err(|e| fail!("start mig_server: {}", e.name()))?;
    let reply = port_allocate(0).map_err(|e| fail!("port: {}", e.name()))?;
    for (name, len) in [
        ("rpc.null.migrating", 0),
        ("rpc.32b.migrating", 32),
        ("rpc.1k.migrating", 1024),
    ] {
        timed_rpcs(&mut buf, server, reply, name, len, false)?;
    }
    let _ = mig_proto::send(&mut buf, server, mig_proto::EXIT, &[], &[]);
    // 32 KiB from the client's own buffer (`MSG_BUF`), to activations whose buffers hold
    // it (nine pages): copied once each way, between the two tasks' pages.
    let big = mig_proto::start_sized(&mut buf, 2, false, false, (HEADER_SIZE + KIB32) as u64)
        .map_err(|e| fail!("start mig_server: {}", e.name()))?;
    timed_rpcs_32k(&mut buf, big, reply, "rpc.32k.migrating")?;
    let _ = mig_proto::send(&mut buf, big, mig_proto::EXIT, &[], &[]);
    for name in [server, big, reply] {
        let _ = cap_drop(name);
    }
    Ok(())
}

/// `rpc.*.switching.marshal` and `rpc.*.migrating.marshal`: seed 001's Table 3, "Kernel
/// Time + User Marshaling". The calls of the `Table3` interface (a null RPC, 32 bytes in,
/// 1 KiB in) through the interface macro's client stub and server dispatch, to the same
/// service served by `idl_server` two ways: by the message loop `rpc::serve` on the
/// server's own thread (switching: the fast path's handoff) and by `migrate::serve` with
/// two activations (migrating: the client's thread runs the dispatch). One figure per
/// call, as the client sees it: from its timestamp before the stub call to its timestamp
/// after the stub returned, the marshaling and unmarshaling on both sides included.
fn marshal_benchmarks() -> Result<(), Failed> {
    use table3_idl::Table3Client;
    let mut rpc = baton_rt::rpc::Rpc::new().map_err(|e| fail!("rpc: {}", e.name()))?;
    for (activations, names) in [
        (
            0,
            [
                "rpc.null.switching.marshal",
                "rpc.32b.switching.marshal",
                "rpc.1k.switching.marshal",
            ],
        ),
        (
            2,
            [
                "rpc.null.migrating.marshal",
                "rpc.32b.migrating.marshal",
                "rpc.1k.migrating.marshal",
            ],
        ),
    ] {
        let server = table3_idl::start(rpc.ipc(), activations)
            .map_err(|e| fail!("start idl_server: {}", e.name()))?;
        let mut client = Table3Client::new(&mut rpc, server);
        let data32: [u8; 32] = core::array::from_fn(|i| i as u8 + 1);
        let data1k: [u8; 1024] = core::array::from_fn(|i| (i % 251) as u8 + 1);
        let [null, in32, in1k] = names;
        timed_calls(null, || client.null())?;
        timed_calls(in32, || client.in32(black_box(data32)))?;
        timed_calls(in1k, || client.in1k(black_box(data1k)))?;
        let expected = (3 * TOTAL as u64, data1k[0], data1k[1023]);
        match client.last() {
            Ok(got) if got == expected => {}
            other => {
                return Err(fail!(
                "{in1k}: the server saw {other:?}, not {expected:?} (calls, first and last byte)"
            ))
            }
        }
        client
            .quit()
            .map_err(|e| fail!("{null}: quit: {}", e.name()))?;
        let _ = cap_drop(server);
    }
    Ok(())
}

/// A benchmark of calls: `call` between two timestamps, [`TOTAL`] times (the first
/// [`WARMUP`] not recorded); any failed call fails it.
fn timed_calls(
    name: &str,
    mut call: impl FnMut() -> Result<(), baton_rt::Error>,
) -> Result<(), Failed> {
    clear_samples();
    for _ in 0..WARMUP {
        call().map_err(|e| fail!("{name}: {}", e.name()))?;
    }
    let before = read_stats()?;
    let mut failed = None;
    for i in 0..ITER {
        let t0 = rdtsc_ordered();
        let r = call();
        let t1 = rdtsc_ordered();
        if let Err(e) = r {
            failed = Some(e);
        }
        record(&SAMPLES, i, t1.wrapping_sub(t0));
    }
    let after = read_stats()?;
    if let Some(e) = failed {
        return Err(fail!("{name}: {}", e.name()));
    }
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// One series of timed echo RPCs of `len` bytes to `server` (which keeps timestamps and
/// hands them over as `rpc_server` does), reported as `name` and `name.roundtrip`.
fn timed_rpcs(
    buf: &mut IpcBuffer,
    server: u64,
    reply: u64,
    name: &str,
    len: usize,
    slow: bool,
) -> Result<(), Failed> {
    use rpc_ids::*;
    let data = [0xa5u8; 1024];
    {
        clear_samples();
        rpc_call(buf, server, reply, RESET, &[])?;
        let request = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
            dest: server,
            reply,
            id: TIMED,
            ..MsgHeader::default()
        };
        buf.set(request, &[], &data[..len])
            .map_err(|e| fail!("{name}: {}", e.name()))?;
        let opts = MSG_SEND | MSG_RECEIVE | if slow { MSG_SLOW } else { 0 };
        let mut failed = None;
        let mut before = read_stats()?;
        for i in 0..TOTAL {
            if i == WARMUP {
                // The kernel paths of the recorded iterations only.
                before = read_stats()?;
            }
            // The reply came back in place: the data is the same, the header is not.
            buf.set_header(MsgHeader {
                size: (HEADER_SIZE + len) as u32,
                ..request
            });
            if let Err(e) = timed_call(i, || buf.msg(opts, reply, FOREVER)) {
                failed = Some(e);
            }
        }
        let after = read_stats()?;
        if let Some(e) = failed {
            return Err(fail!("{name}: {}", e.name()));
        }
        pair_timestamps(buf, server, reply, name, &before, &after)?;
    }
    Ok(())
}

/// Fetches the server's timestamps of the timed RPCs just made (`DUMP`, through `buf`),
/// pairs them with the client's ([`CALLED`], [`RETURNED`]) and reports `name` (the one-way
/// sums) and `name.roundtrip`, with the kernel paths between `before` and `after`.
fn pair_timestamps(
    buf: &mut IpcBuffer,
    server: u64,
    reply: u64,
    name: &str,
    before: &Stats,
    after: &Stats,
) -> Result<(), Failed> {
    use rpc_ids::*;
    let mut first = 0usize;
    while first < TOTAL {
        rpc_call(buf, server, reply, DUMP, &(first as u64).to_le_bytes())?;
        let got = buf.data();
        for (j, pair) in got.chunks_exact(16).take(DUMP_MAX).enumerate() {
            let i = first + j;
            let (Some(c), Some(r)) = (CALLED.get(i), RETURNED.get(i)) else {
                break;
            };
            let word = |at: usize| {
                pair.get(at..at + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes)
            };
            let (arrived, replied) = (word(0), word(8));
            let (t0, t1) = (c.load(Ordering::Relaxed), r.load(Ordering::Relaxed));
            if i >= WARMUP {
                let one_way = arrived
                    .wrapping_sub(t0)
                    .wrapping_add(t1.wrapping_sub(replied));
                record(&SAMPLES, i - WARMUP, one_way);
                record(&SAMPLES2, i - WARMUP, t1.wrapping_sub(t0));
            }
        }
        first += DUMP_MAX;
    }
    report(name, &SAMPLES);
    report_stats(name, before, after);
    let mut rt = [0u8; 40];
    let rt_name = join(&mut rt, name, ".roundtrip");
    report(rt_name, &SAMPLES2);
    Ok(())
}

/// Bytes of in-line data of the `rpc.32k.*` rows: seed 001 Table 3's "32K In".
const KIB32: usize = 32 * 1024;
/// Where the client maps its buffer for the `rpc.32k.*` rows.
const BIG_BUF: u64 = 0x6c00_0000_0000;

/// The client's buffer of the `rpc.32k.*` rows: a 32 KiB request and its header, mapped
/// at [`BIG_BUF`] the first time.
fn big_buffer() -> Result<&'static mut [u8], Failed> {
    static MAPPED: AtomicU32 = AtomicU32::new(0);
    let len = HEADER_SIZE + KIB32;
    if MAPPED.swap(1, Ordering::Relaxed) == 0 {
        let bytes = len.next_multiple_of(4096) as u64;
        baton_rt::sys::mem_map(BIG_BUF, bytes, true)
            .map_err(|e| fail!("map the 32 KiB buffer: {}", e.name()))?;
    }
    // SAFETY: the pages at BIG_BUF are mapped writable for good (above), and the `rpc.32k`
    // rows, one after the other on this thread, are the only users of them.
    Ok(unsafe { core::slice::from_raw_parts_mut(BIG_BUF as *mut u8, len) })
}

/// One series of timed echo RPCs with [`KIB32`] bytes of in-line data to `server`, sent and
/// answered through the client's own buffer (`ipc_msg` with `MSG_BUF`, since the IPC
/// buffer is one page), measured and reported as [`timed_rpcs`] does (the server's
/// timestamps fetched through `buf`). Checks that the last reply came back whole.
fn timed_rpcs_32k(buf: &mut IpcBuffer, server: u64, reply: u64, name: &str) -> Result<(), Failed> {
    use rpc_ids::*;
    clear_samples();
    rpc_call(buf, server, reply, RESET, &[])?;
    let big = big_buffer()?;
    let request = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        size: (HEADER_SIZE + KIB32) as u32,
        dest: server,
        reply,
        id: TIMED,
    }
    .to_bytes();
    big[HEADER_SIZE..].fill(0xa5);
    let mut failed = None;
    let mut before = read_stats()?;
    for i in 0..TOTAL {
        if i == WARMUP {
            before = read_stats()?;
        }
        // The reply came back in place: the data is the same, the header is not.
        big[..HEADER_SIZE].copy_from_slice(&request);
        if let Err(e) = timed_call(i, || msg_buf(big, MSG_SEND | MSG_RECEIVE, reply, FOREVER)) {
            failed = Some(e);
        }
    }
    let after = read_stats()?;
    if let Some(e) = failed {
        return Err(fail!("{name}: {}", e.name()));
    }
    let h = MsgHeader::from_bytes(big).unwrap_or_default();
    if h.id != TIMED
        || h.size as usize != HEADER_SIZE + KIB32
        || big.iter().skip(HEADER_SIZE).any(|&b| b != 0xa5)
    {
        return Err(fail!(
            "{name}: the last reply is not the 32 KiB echo (id {}, size {})",
            h.id,
            h.size
        ));
    }
    pair_timestamps(buf, server, reply, name, &before, &after)
}

/// The port `exception_handler` receives on.
static EXC_PORT: AtomicU64 = AtomicU64::new(0);

/// The handler of `exc.roundtrip`: answers every invalid opcode by resuming after it,
/// until its port dies. It is also the user-level fault handler of the `spin.vm.*.user`
/// rows (one handler, so that the compiler treats `exc.roundtrip`'s loop as before): a
/// page fault is answered by reading the clock, making the page read-write (and, for
/// `appel1`, its partner read-only) with `vm_protect`, and retrying the access.
fn exception_handler(_arg: u64) {
    let port = EXC_PORT.load(Ordering::Relaxed);
    if let Ok(mut buf) = IpcBuffer::new() {
        let mut r = buf.msg(MSG_RECEIVE, port, FOREVER);
        while r.is_ok() {
            // The exception is read and answered in place (`baton_rt::exception::head`
            // and `set_reply_regs`), as a handler that only moves `rip` would.
            r = match exception::head(&buf) {
                Some(e) if e.kind == 6 => exception::set_reply_regs(&mut buf, |regs| regs.rip += 2),
                Some(e) if e.kind == 14 => exception::set_reply(&mut buf, vm_fault_reply(e.addr)),
                _ => exception::set_reply(&mut buf, exception::ExcReply::Kill),
            }
            .and_then(|()| buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER));
        }
    }
    PARTNER_DONE.increment();
}

/// `exc.roundtrip`: an invalid opcode (`ud2`) handled in user space, from the faulting
/// thread's timestamp before the instruction to its timestamp after it: the exception
/// RPC to a handler thread of the same task waiting on the task's exception port, its
/// reply with new registers (`rip` past the instruction), and the resumption.
fn exception_roundtrip(threads: u64) -> Result<(), Failed> {
    clear_samples();
    let port = port_allocate(0).map_err(|e| fail!("port: {}", e.name()))?;
    EXC_PORT.store(port, Ordering::Relaxed);
    start_partner(exception_handler)?;
    exception::exception_port_set(0, port)
        .map_err(|e| fail!("exception_port_set: {}", e.name()))?;
    single("exc.roundtrip", || {
        // SAFETY: `ud2` raises an exception, which the handler answers by resuming after
        // it; no register or memory changes.
        unsafe { core::arch::asm!("ud2") };
    })?;
    exception::exception_port_set(0, 0).map_err(|e| fail!("exception_port_set: {}", e.name()))?;
    stop_partner(threads, || {
        let _ = cap_drop(port);
    })
}

/// `floor.fault.roundtrip`: a 2-byte load from the floor page-fault window, which the
/// kernel's page-fault entry resumes behind the instruction; the window is armed before
/// each iteration, outside the timestamps (a switch of thread would disarm it).
fn fault_roundtrip() -> Result<(), Failed> {
    let name = "floor.fault.roundtrip";
    clear_samples();
    for _ in 0..WARMUP {
        floor::fault_arm(true);
        floor::fault_load();
    }
    let before = read_stats()?;
    for i in 0..ITER {
        floor::fault_arm(true);
        let t0 = rdtsc_ordered();
        floor::fault_load();
        let t1 = rdtsc_ordered();
        record(&SAMPLES, i, t1.wrapping_sub(t0));
    }
    let after = read_stats()?;
    floor::fault_arm(false);
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// `floor_partner`'s `PARTNER_SECRET`, which its entry adds to the argument.
const PARTNER_SECRET: u64 = 0x5ec2_e700_0000_0000;

/// `floor.xas.call`: the floor cross-address-space call to the `floor_partner` task and
/// its return, from the client's timestamp before the call to its timestamp after it.
/// A call a timer tick interrupts (`Interrupted`) is made again, and its figure is the
/// repeated call's.
fn xas_call(threads: u64) -> Result<(), Failed> {
    let name = "floor.xas.call";
    clear_samples();
    // The partner registers with the host-privilege right it gets as its bootstrap right.
    let partner = baton_rt::spawn_with("floor_partner", host_priv())
        .map_err(|e| fail!("spawn floor_partner: {}", e.name()))?;
    // Until it has registered.
    while floor::xas_call(partner, 0) == Err(baton_rt::Error::NotFound) {
        yield_now();
    }
    let mut before = Stats::default();
    let mut w = 0;
    while w < TOTAL {
        if w == WARMUP {
            before = read_stats()?;
        }
        let arg = w as u64;
        let t0 = rdtsc_ordered();
        let r = floor::xas_call(partner, arg);
        let t1 = rdtsc_ordered();
        match r {
            Ok(v) if v == arg.wrapping_add(PARTNER_SECRET) => {}
            Err(baton_rt::Error::Interrupted) => continue,
            other => return Err(fail!("{name}: call {w}: {other:?}")),
        }
        if let Some(i) = w.checked_sub(WARMUP) {
            record(&SAMPLES, i, t1.wrapping_sub(t0));
        }
        w += 1;
    }
    let after = read_stats()?;
    // The partner ends through its task port.
    let mut buf = IpcBuffer::new().map_err(|e| fail!("ipc buffer: {}", e.name()))?;
    let reply = port_allocate(0).map_err(|e| fail!("port: {}", e.name()))?;
    let port =
        baton_rt::kobject::task_port(partner).map_err(|e| fail!("task_port: {}", e.name()))?;
    baton_rt::kobject::call(
        &mut buf,
        port,
        reply,
        baton_rt::kobject::TASK_TERMINATE,
        &[],
        FOREVER,
    )
    .map_err(|e| fail!("terminating floor_partner: {}", e.name()))?;
    for n in [port, reply] {
        let _ = cap_drop(n);
    }
    wait_threads_gone(threads)?;
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// `a` followed by `b`, in `out` (cut short if it does not fit).
fn join<'a>(out: &'a mut [u8], a: &str, b: &str) -> &'a str {
    let mut n = 0;
    for (dst, src) in out.iter_mut().zip(a.bytes().chain(b.bytes())) {
        *dst = src;
        n += 1;
    }
    core::str::from_utf8(out.get(..n).unwrap_or(&[])).unwrap_or("")
}

/// Runs `measure` as the main thread of a one-virtual-processor Sting runtime with a FIFO
/// policy (Figure 3's configuration: one ready queue), then prints its row from
/// [`SAMPLES`]. `measure` records [`ITER`] samples after [`WARMUP`] unrecorded
/// iterations. The row is printed after the runtime has stopped, on this kernel thread's
/// own stack (a Sting thread's stack is small).
fn sting_row(name: &str, measure: fn()) -> Result<(), Failed> {
    sting_row_with(name, sting::Config::new(1, sting::Kind::Fifo), measure)
}

/// [`sting_row`] with a configuration of the caller's.
fn sting_row_with(name: &str, config: sting::Config, measure: fn()) -> Result<(), Failed> {
    clear_samples();
    let before = read_stats()?;
    let ((), _) = sting::run(config, measure);
    let after = read_stats()?;
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// `record` for iteration `w` of [`TOTAL`], if it is past the warm-up.
#[inline(always)]
fn record_after_warmup(w: usize, delta: u64) {
    if let Some(i) = w.checked_sub(WARMUP) {
        record(&SAMPLES, i, delta);
    }
}

/// The Sting runtime's operations (the paper's Figure 3), on one virtual processor.
fn sting_benchmarks() -> Result<(), Failed> {
    // Thread creation: a delayed null thread (the object only; no TCB, no queue).
    sting_row("sting.create", || {
        for w in 0..TOTAL {
            let t0 = rdtsc_ordered();
            let t = sting::delay(|| ());
            let t1 = rdtsc_ordered();
            drop(black_box(t));
            record_after_warmup(w, t1.wrapping_sub(t0));
        }
    })?;
    // Fork a null thread and take its value: created, queued, started on a TCB (the
    // forker blocks, so the child runs; its TCB comes from the pool), finished, and the
    // forker resumed. `wait` first, so that the child is not absorbed.
    sting_row("sting.fork_value", || {
        for w in 0..TOTAL {
            let t0 = rdtsc_ordered();
            let t = sting::fork(|| ());
            t.wait();
            black_box(t.value().is_ok());
            let t1 = rdtsc_ordered();
            drop(t);
            record_after_warmup(w, t1.wrapping_sub(t0));
        }
    })?;
    // Touch a delayed null thread: absorbed, run on the toucher's stack.
    sting_row("sting.absorb", || {
        for w in 0..TOTAL {
            let t = sting::delay(|| ());
            let t0 = rdtsc_ordered();
            black_box(t.value().is_ok());
            let t1 = rdtsc_ordered();
            drop(t);
            record_after_warmup(w, t1.wrapping_sub(t0));
        }
    })?;
    // Put a thread on the virtual processor's ready queue and take it off: a started
    // thread (the caller) as its processor queues its own, an owned entry.
    sting_row("sting.enqueue_dequeue", || {
        for w in 0..TOTAL {
            let t0 = rdtsc_ordered();
            let back = sting::probe_enqueue_dequeue();
            let t1 = rdtsc_ordered();
            black_box(back);
            record_after_warmup(w, t1.wrapping_sub(t0));
        }
    })?;
    // The same for a thread that has not started (delayed): a ticketed entry, marked and
    // claimed by compare-and-swap, as a fork or a wake-up queues one.
    sting_row("sting.enqueue_dequeue.scheduled", || {
        let t = sting::delay(|| ());
        for w in 0..TOTAL {
            let t0 = rdtsc_ordered();
            let back = sting::probe_enqueue_dequeue_scheduled(&t);
            let t1 = rdtsc_ordered();
            black_box(back);
            record_after_warmup(w, t1.wrapping_sub(t0));
        }
    })?;
    // Synchronous context switch: A yields to B, which was waiting in its own yield; from
    // A's timestamp before its yield to B's after its yield returned.
    sting_row("sting.switch", || {
        let b = sting::fork(|| {
            for _ in 0..TOTAL {
                sting::yield_now();
                let t1 = rdtsc_ordered();
                let seq = SEQ.load(Ordering::Relaxed) as usize;
                record_after_warmup(seq, t1.wrapping_sub(STAMP.load(Ordering::Relaxed)));
            }
        });
        for w in 0..=TOTAL {
            SEQ.store(w as u32, Ordering::Relaxed);
            STAMP.store(rdtsc_ordered(), Ordering::Relaxed);
            sting::yield_now();
        }
        b.wait();
    })?;
    // Block and resume: A wakes B (parked) and blocks, in one step (`hand_off`: B is
    // parked on A's processor, so A switches straight to it, with no trip through the
    // ready queue); B resumes. From A's timestamp before its hand-off to B's after its
    // park returned.
    sting_row("sting.block_resume", || {
        let a = sting::current();
        let b = sting::fork(move || {
            for _ in 0..TOTAL {
                sting::park();
                let t1 = rdtsc_ordered();
                let seq = SEQ.load(Ordering::Relaxed) as usize;
                record_after_warmup(seq, t1.wrapping_sub(STAMP.load(Ordering::Relaxed)));
                a.unpark();
            }
        });
        // Let B start and park.
        sting::yield_now();
        let b_any = b.any();
        for w in 0..TOTAL {
            SEQ.store(w as u32, Ordering::Relaxed);
            STAMP.store(rdtsc_ordered(), Ordering::Relaxed);
            b_any.hand_off();
        }
        b.wait();
    })?;
    // One small allocation from the thread's private area (Sting's section 5): no lock;
    // the value is dropped (last in, first out) outside the timed part.
    sting_row("sting.area.alloc", || {
        for w in 0..TOTAL {
            let t0 = rdtsc_ordered();
            let p = sting::area::alloc(w as u64);
            let t1 = rdtsc_ordered();
            drop(black_box(p));
            record_after_warmup(w, t1.wrapping_sub(t0));
        }
    })?;
    // A divide by zero in a Sting thread delivered to its handler and resumed (Sting's
    // section 7.1): the fault, the kernel's exception message to the runtime's dispatcher
    // thread, its reply pushing the handler's continuation onto the faulting thread, the
    // handler (a new divisor) in the thread's context, and the resumption that retries
    // the division. From before the `div` to after it.
    sting_row_with(
        "sting.exception",
        sting::Config::new(1, sting::Kind::Fifo).exceptions(),
        || {
            let fix = |f: &mut sting::Fault| {
                f.regs.rcx = 1;
                sting::Action::Resume
            };
            let _ = sting::with_handler(fix, || {
                for w in 0..TOTAL {
                    let t0 = rdtsc_ordered();
                    let q = sting_div(w as u64, 0);
                    let t1 = rdtsc_ordered();
                    black_box(q);
                    record_after_warmup(w, t1.wrapping_sub(t0));
                }
            });
        },
    )?;
    Ok(())
}

/// `n / d` by `div` (a divide error when `d` is 0, which a handler may repair).
#[inline(never)]
fn sting_div(n: u64, d: u64) -> u64 {
    let q: u64;
    // SAFETY: a division; a zero divisor raises a divide error, delivered by the Sting
    // runtime to the thread's handler, which sets a divisor and retries.
    unsafe {
        core::arch::asm!("xor edx, edx", "div rcx", inout("rax") n => q, inout("rcx") d => _, out("rdx") _)
    };
    q
}

/// The id of `vproc_peer`'s messages.
const PEER_ID: u64 = 0x7670_0001;

/// Sends `vproc_peer` (through `q`) a request for `count` messages after `delay` ns.
fn peer_request(q: u64, delay: u64, count: u64) -> Result<(), baton_rt::Error> {
    let mut buf = [0u8; HEADER_SIZE + 16];
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: (HEADER_SIZE + 16) as u32,
        dest: q,
        id: 1,
        ..MsgHeader::default()
    };
    buf[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    buf[HEADER_SIZE..HEADER_SIZE + 8].copy_from_slice(&delay.to_le_bytes());
    buf[HEADER_SIZE + 8..].copy_from_slice(&count.to_le_bytes());
    msg_buf(&mut buf, MSG_SEND, 0, FOREVER)
}

/// Receives a message on `port` into a buffer of the caller's; its id and reply right.
fn peer_receive(port: u64) -> Result<(u64, u64), baton_rt::Error> {
    let mut buf = [0u8; HEADER_SIZE + 16];
    msg_buf(&mut buf, MSG_RECEIVE, port, FOREVER)?;
    let h = MsgHeader::from_bytes(&buf).ok_or(baton_rt::Error::BadFormat)?;
    Ok((h.id, h.reply))
}

/// `sting.kernel_block`: Sting's kernel half. On one virtual processor with upcalls, the
/// main thread A blocks in a kernel receive; the Block upcall lets the processor run B,
/// which asks another task (`vproc_peer`) for a message and ends; the processor, idle,
/// waits in `vp_wait`; the peer's message wakes A's kernel thread, which takes the
/// processor over with an Unblock upcall, and the runtime resumes A. From A's timestamp
/// before its receive to A's after it returned.
fn sting_kernel_block() -> Result<(), Failed> {
    kernel_block_row("sting.kernel_block")
}

/// `spin.strand.block`: [`sting_kernel_block`] with one built-in handler (`count`, of
/// `builtin.strand`) installed by this task on SPIN's `Strand.Block`, which the kernel
/// raises where it gives the Block upcall (the upcall is its default).
fn spin_strand_block() -> Result<(), Failed> {
    let d = baton_rt::spin::import("builtin.strand").map_err(|e| fail!("import: {e:?}"))?;
    let h = baton_rt::spin::install(d, "count", baton_abi::spin::EVENT_STRAND_BLOCK, 0, 0, 0)
        .map_err(|e| fail!("install: {e:?}"))?;
    let r = kernel_block_row("spin.strand.block");
    let ran = baton_rt::vproc::strand_count(baton_abi::spin::EVENT_STRAND_BLOCK);
    let _ = baton_rt::spin::remove(h);
    let _ = baton_rt::spin::release(d);
    r?;
    match ran {
        Ok((n, 0)) if n >= TOTAL as u64 => Ok(()),
        other => Err(fail!(
            "spin.strand.block: the handler ran {other:?} times for {TOTAL} blocks"
        )),
    }
}

/// Preemptions measured by `sting.checkpoint_resume` (each takes a timer tick, 10 ms of
/// instructions under `-icount`, so few).
const PREEMPTIONS: usize = 20;

/// `sting.checkpoint_resume`: Sting's preemption. On one virtual processor with
/// Checkpoint upcalls, two preemptible threads spin reading the time stamp counter; the
/// kernel's timer stops one (a Checkpoint upcall: the runtime saves its registers and
/// vector state and requeues it) and the runtime resumes the other, which was preempted
/// before, through `vp_resume`. One sample is the gap between the last stamp one thread
/// published and the first stamp the other takes once it sees it runs again: the timer
/// interrupt, the upcall, the runtime's decision, the switch and the resume.
///
/// Each thread publishes its stamps in a slot of its own, and the thread that finds it has
/// just been switched in takes a fresh stamp: a thread stopped between taking a stamp and
/// publishing it (under `-icount` the timer's interrupt comes at the `rdtsc` that ends a
/// translation block, so every preemption of a run can fall there) leaves its
/// previous stamp, one pass of the loop older, and no switch goes unrecorded.
fn sting_checkpoint_resume() -> Result<(), Failed> {
    static STAMP: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
    static OWNER: AtomicU64 = AtomicU64::new(0);
    static SWITCHES: AtomicU64 = AtomicU64::new(0);
    clear_samples();
    STAMP.iter().for_each(|s| s.store(0, Ordering::Relaxed));
    OWNER.store(0, Ordering::Relaxed);
    SWITCHES.store(0, Ordering::Relaxed);
    let config = sting::Config::new(1, sting::Kind::Fifo)
        .kernel_upcalls(2)
        .preempt(1_000_000);
    let spinner = |me: usize| {
        let other = 3 - me;
        move || {
            sting::preemptible(|| loop {
                let t = rdtsc_ordered();
                if OWNER.load(Ordering::Relaxed) != me as u64 {
                    // Switched in (or the first pass): `t` may predate this thread's
                    // preemption, so the sample's end is taken now. A thread's first
                    // pass is a start, not a resume, and is not recorded.
                    let now = rdtsc_ordered();
                    let prev = STAMP[other].load(Ordering::Relaxed);
                    let resumed = STAMP[me].load(Ordering::Relaxed) != 0;
                    if resumed && prev != 0 && now > prev {
                        let n = SWITCHES.fetch_add(1, Ordering::Relaxed) as usize;
                        if let Some(slot) = SAMPLES.get(n) {
                            slot.store(now - prev, Ordering::Relaxed);
                        }
                    }
                    OWNER.store(me as u64, Ordering::Relaxed);
                    STAMP[me].store(now, Ordering::Relaxed);
                    continue;
                }
                STAMP[me].store(t, Ordering::Relaxed);
                if SWITCHES.load(Ordering::Relaxed) as usize >= PREEMPTIONS {
                    break;
                }
            })
        }
    };
    let ((), st) = sting::run(config, move || {
        let a = sting::fork(spinner(1));
        let b = sting::fork(spinner(2));
        a.wait();
        b.wait();
    });
    if st.checkpoints < PREEMPTIONS as u64 {
        return Err(fail!(
            "sting.checkpoint_resume: {} Checkpoints for {PREEMPTIONS} switches",
            st.checkpoints
        ));
    }
    report_n("sting.checkpoint_resume", &SAMPLES, PREEMPTIONS);
    Ok(())
}

/// A kernel-block row (`sting.kernel_block`, and the same with a `Strand.Block` handler).
fn kernel_block_row(name: &str) -> Result<(), Failed> {
    let port = port_allocate(0).map_err(|e| fail!("port_allocate: {}", e.name()))?;
    spawn_with("vproc_peer", port).map_err(|e| fail!("spawn vproc_peer: {}", e.name()))?;
    let q = match peer_receive(port) {
        Ok((PEER_ID, q)) if q != 0 => q,
        other => return Err(fail!("vproc_peer's hello: {other:?}")),
    };
    clear_samples();
    let before = read_stats()?;
    let config = sting::Config::new(1, sting::Kind::Fifo).kernel_upcalls(2);
    let (ok, st) = sting::run(config, move || {
        let mut ok = true;
        for w in 0..TOTAL {
            let b = sting::fork(move || {
                let _ = peer_request(q, 0, 1);
            });
            let t0 = rdtsc_ordered();
            let got = peer_receive(port);
            let t1 = rdtsc_ordered();
            ok &= matches!(got, Ok((PEER_ID, _)));
            b.wait();
            record_after_warmup(w, t1.wrapping_sub(t0));
        }
        ok
    });
    let after = read_stats()?;
    let _ = peer_request(q, 0, 0);
    let _ = cap_drop(q);
    let _ = cap_drop(port);
    if !ok || st.kernel_blocks < TOTAL as u64 {
        return Err(fail!(
            "{name}: results {ok}, {} Block upcalls for {TOTAL} receives",
            st.kernel_blocks
        ));
    }
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// The WebAssembly extension (`extensions/null_syscall`), built by `cargo xtask build`.
static NULL_SYSCALL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/extensions/wasm32-unknown-unknown/release/null_syscall.wasm"
));

/// SPIN's dispatcher (`docs/extensions.md`): system calls added by extensions, and
/// `Test.Raise` with 1, 2, 4 and 8 handlers whose owner's guards hold or fail.
fn spin_benchmarks() -> Result<(), Failed> {
    use baton_abi::spin::{EVENT_SYSCALL, EVENT_TEST};
    use baton_rt::spin;
    let ok = |what: &str, r: Result<spin::Handler, baton_abi::Error>| {
        r.map_err(|e| fail!("{what}: {e:?}"))
    };
    let b = spin::import("builtin.null_syscall").map_err(|e| fail!("import: {e:?}"))?;
    let m = spin::create(NULL_SYSCALL).map_err(|e| fail!("create: {e:?}"))?;
    for i in ["baton.console", "baton.task"] {
        let d = spin::import(i).map_err(|e| fail!("import {i}: {e:?}"))?;
        spin::resolve(d, m).map_err(|e| fail!("resolve: {e:?}"))?;
    }
    // Each row with its one handler alone on the event: the raise is then the direct
    // call (with a second handler installed, any task's, the dispatcher walks the list
    // comparing keys).
    let h = ok(
        "install",
        spin::install(b, "null", EVENT_SYSCALL, 0, 0x1000, 0),
    )?;
    single("spin.syscall.event", || {
        black_box(spin::call(0x1000, [0; 4]));
    })?;
    let _ = spin::remove(h);
    let h = ok(
        "install",
        spin::install(m, "null", EVENT_SYSCALL, 0, 0x1001, 0),
    )?;
    single("spin.syscall.event.wasm", || {
        black_box(spin::call(0x1001, [0; 4]));
    })?;
    let _ = spin::remove(h);
    // No handler: the default answers (the raise's system call and the dispatcher's
    // look at an empty list).
    single("spin.dispatch.0", || {
        black_box(spin::raise(0).ok());
    })?;
    // One handler, no guard: the direct call.
    let h = ok("install", spin::install(b, "one", EVENT_TEST, 0, 0, 0))?;
    single("spin.dispatch.1", || {
        black_box(spin::raise(0).ok());
    })?;
    let _ = spin::remove(h);
    let h = ok("install", spin::install(m, "one", EVENT_TEST, 0, 0, 0))?;
    single("spin.dispatch.1.wasm", || {
        black_box(spin::raise(0).ok());
    })?;
    let _ = spin::remove(h);
    // n handlers, each with the owner's guard `arg == 0` (claim 1: true for the raise's
    // argument 0) or `arg == 1` (claim 2: false); built in, then WebAssembly.
    const NAMES: [[&str; 4]; 4] = [
        [
            "spin.dispatch.1.true",
            "spin.dispatch.2.true",
            "spin.dispatch.4.true",
            "spin.dispatch.8.true",
        ],
        [
            "spin.dispatch.1.false",
            "spin.dispatch.2.false",
            "spin.dispatch.4.false",
            "spin.dispatch.8.false",
        ],
        [
            "spin.dispatch.1.true.wasm",
            "spin.dispatch.2.true.wasm",
            "spin.dispatch.4.true.wasm",
            "spin.dispatch.8.true.wasm",
        ],
        [
            "spin.dispatch.1.false.wasm",
            "spin.dispatch.2.false.wasm",
            "spin.dispatch.4.false.wasm",
            "spin.dispatch.8.false.wasm",
        ],
    ];
    for (d, claim, names) in [
        (b, 1, NAMES[0]),
        (b, 2, NAMES[1]),
        (m, 1, NAMES[2]),
        (m, 2, NAMES[3]),
    ] {
        for (n, name) in [1usize, 2, 4, 8].into_iter().zip(names) {
            let mut hs = [None; 8];
            for slot in hs.iter_mut().take(n) {
                *slot = Some(ok(
                    "install",
                    spin::install(d, "one", EVENT_TEST, 0, claim, 0),
                )?);
            }
            single(name, || {
                black_box(spin::raise(0).ok());
            })?;
            for h in hs.into_iter().flatten() {
                let _ = spin::remove(h);
            }
        }
    }
    spin_call_benchmarks(m)?;
    let _ = spin::release(m);
    let _ = spin::release(b);
    Ok(())
}

/// Stacks of the threads `spin.thread.forkjoin` forks (each used once), and of the
/// partner of `spin.thread.pingpong`.
static SPIN_STACKS: StackPool<{ TOTAL + 1 }, 2048> = StackPool::new();

/// The first of the numbers the bench installs `builtin.cthreads` on.
const CTHREADS_FIRST: u64 = 0x1200;

/// A thread of `spin.thread.forkjoin`: its value is its argument.
fn forkjoin_child(arg: u64) -> u64 {
    arg
}

/// Thread B of `spin.thread.pingpong`: waits for condition 1, then answers each signal
/// with `handoff(0, 1)` until `STOP`.
fn pingpong_partner(_: u64) -> u64 {
    let p = baton_rt::spin::cthreads::Package::attach(CTHREADS_FIRST);
    if p.wait(1).is_err() {
        return 1;
    }
    while STOP.load(Ordering::Acquire) == 0 {
        if p.handoff(0, 1).is_err() {
            return 2;
        }
    }
    0
}

/// SPIN's Table 3 through its integrated thread package (`builtin.cthreads`, a built-in
/// extension whose procedures the bench installs as system calls): `spin.thread.forkjoin`
/// forks a thread that returns at once and joins it (the thread ends with the package's
/// `exit`, which wakes the joiner); `spin.thread.pingpong` is one round of two threads
/// synchronising, A's `handoff(1, 0)` (signal B, wait) answered by B's `handoff(0, 1)`.
fn spin_thread_benchmarks(threads: u64) -> Result<(), Failed> {
    use baton_rt::spin::cthreads::Package;
    let p = Package::install(CTHREADS_FIRST).map_err(|e| fail!("cthreads: {e:?}"))?;
    // The stacks are `.bss`: touched first, so that no thread's first run takes a zero
    // fill (as `thread.create_exit`).
    let base = core::ptr::addr_of!(SPIN_STACKS) as u64;
    for page in (0..(TOTAL * 2048) as u64).step_by(4096) {
        // SAFETY: a read of the pool's memory, which no thread uses yet.
        unsafe { core::ptr::read_volatile((base + page) as *const u8) };
    }
    let name = "spin.thread.forkjoin";
    clear_samples();
    for w in 0..TOTAL {
        let stack = SPIN_STACKS
            .take()
            .ok_or_else(|| fail!("{name}: out of stacks at iteration {w}"))?;
        let t0 = rdtsc_ordered();
        let r = p
            .fork(stack, forkjoin_child, w as u64)
            .and_then(|h| p.join(h));
        let t1 = rdtsc_ordered();
        if r != Ok(w as u64) {
            p.uninstall();
            return Err(fail!("{name}: iteration {w}: {r:?}"));
        }
        if let Some(i) = w.checked_sub(WARMUP) {
            record(&SAMPLES, i, t1.wrapping_sub(t0));
        }
    }
    report(name, &SAMPLES);
    wait_threads_gone(threads)?;

    let name = "spin.thread.pingpong";
    clear_samples();
    STOP.store(0, Ordering::Release);
    let stack = SPIN_STACKS
        .take()
        .ok_or_else(|| fail!("{name}: out of stacks"))?;
    let b = p
        .fork(stack, pingpong_partner, 0)
        .map_err(|e| fail!("{name}: fork: {e:?}"))?;
    for w in 0..TOTAL {
        let t0 = rdtsc_ordered();
        let r = p.handoff(1, 0);
        let t1 = rdtsc_ordered();
        if let Err(e) = r {
            return Err(fail!("{name}: round {w}: {e:?}"));
        }
        if let Some(i) = w.checked_sub(WARMUP) {
            record(&SAMPLES, i, t1.wrapping_sub(t0));
        }
    }
    STOP.store(1, Ordering::Release);
    let _ = p.signal(1);
    let ended = p.join(b);
    STOP.store(0, Ordering::Release);
    p.uninstall();
    if ended != Ok(0) {
        return Err(fail!("{name}: the partner ended with {ended:?}"));
    }
    report(name, &SAMPLES);
    wait_threads_gone(threads)
}

/// Stacks of the threads `spin.thread.forkjoin.layered` forks, and of the partner of
/// `spin.thread.pingpong.layered`.
static LAYERED_STACKS: StackPool<{ TOTAL + 1 }, 2048> = StackPool::new();
/// The record of the thread `spin.thread.forkjoin.layered` forks and joins.
static LAYERED_THREAD: baton_rt::spin::layered::Thread = baton_rt::spin::layered::Thread::new();
/// The partner's record in `spin.thread.pingpong.layered`.
static LAYERED_PARTNER: baton_rt::spin::layered::Thread = baton_rt::spin::layered::Thread::new();
/// `spin.thread.pingpong.layered`'s mutex, its two conditions and whose turn it is (0:
/// A, the main thread; 1: B).
static LAYERED_MUTEX: baton_rt::sync::RawMutex = baton_rt::sync::RawMutex::new();
static LAYERED_A: baton_rt::spin::layered::Condition = baton_rt::spin::layered::Condition::new();
static LAYERED_B: baton_rt::spin::layered::Condition = baton_rt::spin::layered::Condition::new();
static LAYERED_TURN: AtomicU32 = AtomicU32::new(0);

/// Thread B of `spin.thread.pingpong.layered`: with the mutex held, waits on condition B
/// for its turn, gives the turn back and signals A, until `STOP`.
fn layered_partner(_: u64) -> u64 {
    LAYERED_MUTEX.lock();
    let mut r = 0;
    while STOP.load(Ordering::Acquire) == 0 {
        if LAYERED_TURN.load(Ordering::Relaxed) != 1 {
            if LAYERED_B.wait(&LAYERED_MUTEX).is_err() {
                r = 1;
                break;
            }
            continue;
        }
        LAYERED_TURN.store(0, Ordering::Relaxed);
        LAYERED_A.signal();
    }
    LAYERED_MUTEX.unlock();
    r
}

/// SPIN's Table 3, "layered" column: the same two operations as [`spin_thread_benchmarks`]
/// with a user-level C-Threads library (`baton_rt::spin::layered`) over the kernel's
/// thread calls. `spin.thread.forkjoin.layered`: fork a thread that returns its argument,
/// join it (the library's record, `thread_create`, `wait`/`wake`);
/// `spin.thread.pingpong.layered`: one round of the C-Threads ping-pong, A taking the
/// mutex, giving B the turn, signalling B's condition and waiting on its own until B gives
/// the turn back.
fn spin_thread_layered(threads: u64) -> Result<(), Failed> {
    let base = core::ptr::addr_of!(LAYERED_STACKS) as u64;
    for page in (0..(TOTAL * 2048) as u64).step_by(4096) {
        // SAFETY: a read of the pool's memory, which no thread uses yet.
        unsafe { core::ptr::read_volatile((base + page) as *const u8) };
    }
    let name = "spin.thread.forkjoin.layered";
    clear_samples();
    for w in 0..TOTAL {
        let stack = LAYERED_STACKS
            .take()
            .ok_or_else(|| fail!("{name}: out of stacks at iteration {w}"))?;
        let t0 = rdtsc_ordered();
        let r = LAYERED_THREAD
            .fork(stack, forkjoin_child, w as u64)
            .and_then(|_| LAYERED_THREAD.join());
        let t1 = rdtsc_ordered();
        if r != Ok(w as u64) {
            return Err(fail!("{name}: iteration {w}: {r:?}"));
        }
        if let Some(i) = w.checked_sub(WARMUP) {
            record(&SAMPLES, i, t1.wrapping_sub(t0));
        }
    }
    report(name, &SAMPLES);
    wait_threads_gone(threads)?;

    let name = "spin.thread.pingpong.layered";
    clear_samples();
    STOP.store(0, Ordering::Release);
    LAYERED_TURN.store(0, Ordering::Relaxed);
    let stack = LAYERED_STACKS
        .take()
        .ok_or_else(|| fail!("{name}: out of stacks"))?;
    LAYERED_PARTNER
        .fork(stack, layered_partner, 0)
        .map_err(|e| fail!("{name}: fork: {e:?}"))?;
    LAYERED_MUTEX.lock();
    for w in 0..TOTAL {
        let t0 = rdtsc_ordered();
        LAYERED_TURN.store(1, Ordering::Relaxed);
        LAYERED_B.signal();
        let mut r = Ok(());
        while r.is_ok() && LAYERED_TURN.load(Ordering::Relaxed) != 0 {
            r = LAYERED_A.wait(&LAYERED_MUTEX);
        }
        let t1 = rdtsc_ordered();
        if let Err(e) = r {
            LAYERED_MUTEX.unlock();
            return Err(fail!("{name}: round {w}: {e:?}"));
        }
        if let Some(i) = w.checked_sub(WARMUP) {
            record(&SAMPLES, i, t1.wrapping_sub(t0));
        }
    }
    STOP.store(1, Ordering::Release);
    LAYERED_B.signal();
    LAYERED_MUTEX.unlock();
    let ended = LAYERED_PARTNER.join();
    STOP.store(0, Ordering::Release);
    if ended != Ok(0) {
        return Err(fail!("{name}: the partner ended with {ended:?}"));
    }
    report(name, &SAMPLES);
    wait_threads_gone(threads)
}

/// The extension that calls another domain's procedures (`extensions/caller`).
static CALLER: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/extensions/wasm32-unknown-unknown/release/caller.wasm"
));

/// Calls per iteration of the `spin.call.*` rows.
const CALLS: u64 = 100;

/// SPIN's protected in-kernel call between domains (its Table 2, line 1):
/// `spin.call.protected` is one call from the built-in `builtin.caller` into the procedure
/// `builtin.callee` exports (its import, bound by a `Resolve`), `spin.call.local` one
/// direct Rust call of a procedure of the caller's own; `spin.call.protected.wasm` is one
/// call from the `caller` module into a procedure the `null_syscall` module `callee`
/// exports (bound by a `Resolve`), `spin.call.local.wasm` one call of a procedure of the
/// caller's own. Each iteration raises `Test.Raise` with 0 and with [`CALLS`], whose
/// handler makes that many calls; the row is the difference per call.
fn spin_call_benchmarks(callee: baton_rt::spin::Domain) -> Result<(), Failed> {
    use baton_abi::spin::EVENT_TEST;
    use baton_rt::spin;
    let caller = spin::create(CALLER).map_err(|e| fail!("create caller: {e:?}"))?;
    spin::resolve(callee, caller).map_err(|e| fail!("resolve caller: {e:?}"))?;
    let b_caller = spin::import("builtin.caller").map_err(|e| fail!("import caller: {e:?}"))?;
    let b_callee = spin::import("builtin.callee").map_err(|e| fail!("import callee: {e:?}"))?;
    for (name, domain, sym) in [
        ("spin.call.protected", b_caller, "call_n"),
        ("spin.call.local", b_caller, "local_n"),
        ("spin.call.protected.wasm", caller, "call_n"),
        ("spin.call.local.wasm", caller, "local_n"),
    ] {
        let h = spin::install(domain, sym, EVENT_TEST, 0, 0, 0)
            .map_err(|e| fail!("install {sym}: {e:?}"))?;
        clear_samples();
        for i in 0..TOTAL {
            let t0 = rdtsc_ordered();
            let a = spin::raise(0);
            let t1 = rdtsc_ordered();
            let b = spin::raise(CALLS);
            let t2 = rdtsc_ordered();
            if a != Ok(0) || b != Ok(CALLS) {
                let _ = spin::remove(h);
                return Err(fail!("{name}: {a:?}, {b:?}"));
            }
            if let Some(j) = i.checked_sub(WARMUP) {
                let per = (t2.wrapping_sub(t1)).saturating_sub(t1.wrapping_sub(t0)) / CALLS;
                record(&SAMPLES, j, per);
            }
        }
        let _ = spin::remove(h);
        report(name, &SAMPLES);
    }
    for d in [b_caller, b_callee, caller] {
        let _ = spin::release(d);
    }
    Ok(())
}

/// The WebAssembly extension of SPIN's memory interfaces (`extensions/appel`).
static APPEL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/extensions/wasm32-unknown-unknown/release/appel.wasm"
));

/// What `exception_handler` does with a page fault: unprotect the page (0), and protect
/// its partner too (1).
static EXC_APPEL1: AtomicU64 = AtomicU64::new(0);
/// The time-stamp counter `exception_handler` read as a page fault arrived.
static EXC_TS: AtomicU64 = AtomicU64::new(0);

/// The `spin.vm.*.user` rows' answer to a page fault at `addr` (see
/// [`exception_handler`]).
#[inline(never)]
fn vm_fault_reply(addr: u64) -> exception::ExcReply {
    EXC_TS.store(rdtsc_ordered(), Ordering::Relaxed);
    let page = addr & !(PAGE - 1);
    // SAFETY: only the protection of this task's own benchmark pages changes.
    let ok = unsafe {
        baton_rt::vm::protect(page, PAGE, baton_rt::vm::PROT_RW, false).is_ok()
            && (EXC_APPEL1.load(Ordering::Relaxed) == 0
                || baton_rt::vm::protect(page ^ PAGE, PAGE, baton_rt::vm::PROT_READ, false).is_ok())
    };
    if ok {
        exception::ExcReply::Retry
    } else {
        exception::ExcReply::Kill
    }
}

/// How a `spin.vm.*` row reaches the memory system.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// A WebAssembly extension (`extensions/appel`): its fault handlers, and its system
    /// calls `prot` and `dirty`.
    Wasm,
    /// The built-in `builtin.appel`.
    Builtin,
    /// User space: the exception port, `vm_protect`, `spinvm_query`.
    User,
}

/// The `spin.vm.*` cases, in the order of [`SPIN_VM_ROWS`]' columns.
const SPIN_VM_CASES: [&str; 8] = [
    "trap",
    "fault",
    "prot1",
    "prot100",
    "unprot100",
    "appel1",
    "appel2",
    "dirty",
];
/// The rows' names, by [`Via`] and case.
const SPIN_VM_ROWS: [[&str; 8]; 3] = [
    [
        "spin.vm.trap",
        "spin.vm.fault",
        "spin.vm.prot1",
        "spin.vm.prot100",
        "spin.vm.unprot100",
        "spin.vm.appel1",
        "spin.vm.appel2",
        "spin.vm.dirty",
    ],
    [
        "spin.vm.trap.builtin",
        "spin.vm.fault.builtin",
        "spin.vm.prot1.builtin",
        "spin.vm.prot100.builtin",
        "spin.vm.unprot100.builtin",
        "spin.vm.appel1.builtin",
        "spin.vm.appel2.builtin",
        "spin.vm.dirty.builtin",
    ],
    [
        "spin.vm.trap.user",
        "spin.vm.fault.user",
        "spin.vm.prot1.user",
        "spin.vm.prot100.user",
        "spin.vm.unprot100.user",
        "spin.vm.appel1.user",
        "spin.vm.appel2.user",
        "spin.vm.dirty.user",
    ],
];

/// The row of `case` reached through `via`.
fn spin_vm_row(via: Via, case: &str) -> &'static str {
    let v = match via {
        Via::Wasm => 0,
        Via::Builtin => 1,
        Via::User => 2,
    };
    let c = SPIN_VM_CASES.iter().position(|x| *x == case).unwrap_or(0);
    SPIN_VM_ROWS[v][c]
}

/// Pages of the `spin.vm.*` area.
const APPEL_PAGES: u64 = 100;
/// Iterations of `spin.vm.appel2` (100 faults each), after [`APPEL2_WARMUP`].
const APPEL2_ITER: usize = 100;
const APPEL2_WARMUP: usize = 10;

/// The extension system-call numbers of the `spin.vm.*` rows.
const N_PROT: [u64; 2] = [0x1200, 0x1201];
const N_DIRTY: [u64; 2] = [0x1202, 0x1203];

/// Sets the protection of `n` pages at `a` the way `via` does.
fn vm_prot(via: Via, a: u64, n: u64, prot: u64) -> bool {
    match via {
        Via::Wasm => baton_rt::spin::call(N_PROT[0], [a, n * PAGE, prot, 0]) == 0,
        Via::Builtin => baton_rt::spin::call(N_PROT[1], [a, n * PAGE, prot, 0]) == 0,
        // SAFETY: only the protection of the benchmark's own pages changes.
        Via::User => unsafe { baton_rt::vm::protect(a, n * PAGE, prot, false).is_ok() },
    }
}

/// SPIN's Table 4, the Appel–Li suite (`docs/benchmarks.md`): the `spin.vm.<case>` rows
/// with the handler as a WebAssembly extension, `.builtin` with a built-in one, `.user`
/// through the user-level exception port and `vm_protect`.
fn spin_vm_benchmarks(threads: u64) -> Result<(), Failed> {
    use baton_abi::spin::EVENT_SYSCALL;
    use baton_abi::translation::EVENT_PROTECTION_FAULT;
    use baton_rt::spin;
    use baton_rt::vm::{PROT_READ, PROT_RW};
    let b = spin::import("builtin.appel").map_err(|e| fail!("import: {e:?}"))?;
    let m = spin::create(APPEL).map_err(|e| fail!("create appel: {e:?}"))?;
    for i in [
        "baton.translation",
        "baton.virtaddr",
        "baton.physaddr",
        "baton.clock",
    ] {
        let d = spin::import(i).map_err(|e| fail!("import {i}: {e:?}"))?;
        spin::resolve(d, m).map_err(|e| fail!("resolve: {e:?}"))?;
        let _ = spin::release(d);
    }
    let mut calls = [None; 4];
    for (slot, (d, sym, n)) in calls.iter_mut().zip([
        (m, "prot", N_PROT[0]),
        (b, "protect", N_PROT[1]),
        (m, "dirty", N_DIRTY[0]),
        (b, "dirty", N_DIRTY[1]),
    ]) {
        *slot = Some(
            spin::install(d, sym, EVENT_SYSCALL, 0, n, 0)
                .map_err(|e| fail!("install {sym}: {e:?}"))?,
        );
    }
    let area = baton_rt::vm::allocate(None, APPEL_PAGES * PAGE, PROT_RW)
        .map_err(|e| fail!("spin.vm: allocate: {}", e.name()))?;
    let page = |i: u64| area + i * PAGE;
    let touch = |i: u64| {
        // SAFETY: the benchmark's own page, writable when this runs (or made so by the
        // handler under test).
        unsafe { (page(i) as *mut u64).write_volatile(i) };
    };
    for i in 0..APPEL_PAGES {
        touch(i);
    }
    // The user-level handler, for the `.user` rows.
    let port = port_allocate(0).map_err(|e| fail!("port: {}", e.name()))?;
    EXC_PORT.store(port, Ordering::Relaxed);
    start_partner(exception_handler)?;
    for via in [Via::Wasm, Via::Builtin, Via::User] {
        let domain = match via {
            Via::Wasm => Some(m),
            Via::Builtin => Some(b),
            Via::User => None,
        };
        let name = |case: &str| spin_vm_row(via, case);
        if via == Via::User {
            exception::exception_port_set(0, port)
                .map_err(|e| fail!("exception_port_set: {}", e.name()))?;
        }
        // A handler on `ProtectionFault` for `case` (the exception port's for `.user`).
        let handler = |sym: &str| -> Result<Option<spin::Handler>, Failed> {
            EXC_APPEL1.store(u64::from(sym == "appel1"), Ordering::Relaxed);
            match domain {
                Some(d) => spin::install(d, sym, EVENT_PROTECTION_FAULT, 0, 0, 0)
                    .map(Some)
                    .map_err(|e| fail!("install {sym}: {e:?}")),
                None => Ok(None),
            }
        };
        let unhandle = |h: Option<spin::Handler>| {
            if let Some(h) = h {
                let _ = spin::remove(h);
            }
        };
        // trap and fault: a write to a read-only page, to the handler's first timestamp
        // and to the write's completion.
        for (case, trap) in [("trap", true), ("fault", false)] {
            clear_samples();
            let h = handler(if trap && via != Via::User {
                "trap"
            } else {
                "unprotect"
            })?;
            let _ = baton_rt::spinvm::mark();
            for i in 0..TOTAL {
                if !vm_prot(via, page(0), 1, PROT_READ) {
                    return Err(fail!("{}: protect", name(case)));
                }
                let t0 = rdtsc_ordered();
                touch(0);
                let t1 = rdtsc_ordered();
                let at = match (trap, via) {
                    (false, _) => t1,
                    (true, Via::User) => EXC_TS.load(Ordering::Relaxed),
                    (true, _) => baton_rt::spinvm::mark(),
                };
                if let Some(j) = i.checked_sub(WARMUP) {
                    record(&SAMPLES, j, at.wrapping_sub(t0));
                }
            }
            unhandle(h);
            report(name(case), &SAMPLES);
        }
        // appel1: two pages, one read-only at a time; a write to it makes it writable
        // and its partner read-only.
        clear_samples();
        let h = handler("appel1")?;
        if !vm_prot(via, page(0), 1, PROT_READ) {
            return Err(fail!("{}: protect", name("appel1")));
        }
        for i in 0..TOTAL {
            let t0 = rdtsc_ordered();
            touch(i as u64 % 2);
            let t1 = rdtsc_ordered();
            if let Some(j) = i.checked_sub(WARMUP) {
                record(&SAMPLES, j, t1.wrapping_sub(t0));
            }
        }
        unhandle(h);
        vm_prot(via, page(0), 2, PROT_RW);
        report(name("appel1"), &SAMPLES);
        // appel2: protect 100 pages with one call, then write each (each faults, its
        // handler unprotects it); per page.
        clear_samples();
        let h = handler("unprotect")?;
        for i in 0..APPEL2_WARMUP + APPEL2_ITER {
            let t0 = rdtsc_ordered();
            if !vm_prot(via, area, APPEL_PAGES, PROT_READ) {
                return Err(fail!("{}: protect", name("appel2")));
            }
            for p in 0..APPEL_PAGES {
                touch(p);
            }
            let t1 = rdtsc_ordered();
            if let Some(j) = i.checked_sub(APPEL2_WARMUP) {
                record(&SAMPLES, j, t1.wrapping_sub(t0) / APPEL_PAGES);
            }
        }
        unhandle(h);
        report_n(name("appel2"), &SAMPLES, APPEL2_ITER);
        if via == Via::User {
            exception::exception_port_set(0, 0)
                .map_err(|e| fail!("exception_port_set: {}", e.name()))?;
        }
        // prot1, prot100: increasing the protection of written, writable pages;
        // unprot100: decreasing that of read-only, resident ones.
        for (case, n, prot, undo) in [
            ("prot1", 1, PROT_READ, PROT_RW),
            ("prot100", APPEL_PAGES, PROT_READ, PROT_RW),
            ("unprot100", APPEL_PAGES, PROT_RW, PROT_READ),
        ] {
            clear_samples();
            for i in 0..TOTAL {
                if prot == PROT_READ {
                    for p in 0..n {
                        touch(p);
                    }
                } else if !vm_prot(via, area, n, undo) {
                    return Err(fail!("{}: protect", name(case)));
                }
                let t0 = rdtsc_ordered();
                let ok = vm_prot(via, area, n, prot);
                let t1 = rdtsc_ordered();
                if !ok {
                    return Err(fail!("{}: protect", name(case)));
                }
                if prot == PROT_READ {
                    vm_prot(via, area, n, undo);
                }
                if let Some(j) = i.checked_sub(WARMUP) {
                    record(&SAMPLES, j, t1.wrapping_sub(t0));
                }
            }
            report(name(case), &SAMPLES);
        }
        // dirty: SPIN's query of a page's state.
        clear_samples();
        touch(0);
        for i in 0..TOTAL {
            let t0 = rdtsc_ordered();
            let d = match via {
                Via::Wasm => baton_rt::spin::call(N_DIRTY[0], [page(0), 0, 0, 0]) == 1,
                Via::Builtin => baton_rt::spin::call(N_DIRTY[1], [page(0), 0, 0, 0]) == 1,
                Via::User => baton_rt::spinvm::dirty(page(0)) == Ok(true),
            };
            let t1 = rdtsc_ordered();
            if !d {
                return Err(fail!("{}: the page written is not dirty", name("dirty")));
            }
            if let Some(j) = i.checked_sub(WARMUP) {
                record(&SAMPLES, j, t1.wrapping_sub(t0));
            }
        }
        report(name("dirty"), &SAMPLES);
    }
    for h in calls.into_iter().flatten() {
        let _ = spin::remove(h);
    }
    let _ = spin::release(m);
    let _ = spin::release(b);
    // SAFETY: nothing refers to the area any more.
    unsafe { baton_rt::vm::deallocate(area, APPEL_PAGES * PAGE) }
        .map_err(|e| fail!("spin.vm: deallocate: {}", e.name()))?;
    stop_partner(threads, || {
        let _ = cap_drop(port);
    })
}

/// Runs every benchmark in turn.
/// Where the virtual-memory benchmarks put their memory.
const VM_BENCH: u64 = 0x5200_0000_0000;
const PAGE: u64 = 4096;

/// `vm.fault.zero` and `vm.fault.zero.read`: the first store (load) to an untouched page
/// of anonymous memory, from before the access to after it: the fault, the zero fill
/// (the frame zeroed inside the window), the translation and the return.
fn vm_fault_zero(name: &str, store: bool) -> Result<(), Failed> {
    clear_samples();
    let len = TOTAL as u64 * PAGE;
    let a = baton_rt::vm::allocate(Some(VM_BENCH), len, baton_rt::vm::PROT_RW)
        .map_err(|e| fail!("{name}: allocate: {}", e.name()))?;
    let before = read_stats()?;
    for i in 0..TOTAL {
        let p = (a + i as u64 * PAGE) as *mut u64;
        let t0 = rdtsc_ordered();
        if store {
            // SAFETY: allocated above, writable, no reference into it.
            unsafe { p.write_volatile(1) };
        } else {
            // SAFETY: as above.
            black_box(unsafe { p.read_volatile() });
        }
        let t1 = rdtsc_ordered();
        if let Some(j) = i.checked_sub(WARMUP) {
            record(&SAMPLES, j, t1.wrapping_sub(t0));
        }
    }
    let after = read_stats()?;
    // SAFETY: nothing refers to the range.
    unsafe { baton_rt::vm::deallocate(a, len) }
        .map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// `vm.allocate.<n>` and `vm.deallocate.<n>`: allocating `n` untouched pages anywhere, and
/// deallocating them: the map's work, whatever `n` (Accent's Figure 3-1).
fn vm_allocate(n: u64, names: (&str, &str)) -> Result<(), Failed> {
    clear_samples();
    let len = n * PAGE;
    let before = read_stats()?;
    for i in 0..TOTAL {
        let t0 = rdtsc_ordered();
        let a = baton_rt::vm::allocate(None, len, baton_rt::vm::PROT_RW);
        let t1 = rdtsc_ordered();
        let a = a.map_err(|e| fail!("{}: {}", names.0, e.name()))?;
        let t2 = rdtsc_ordered();
        // SAFETY: just allocated, nothing refers to it.
        let d = unsafe { baton_rt::vm::deallocate(a, len) };
        let t3 = rdtsc_ordered();
        d.map_err(|e| fail!("{}: {}", names.1, e.name()))?;
        if let Some(j) = i.checked_sub(WARMUP) {
            record(&SAMPLES, j, t1.wrapping_sub(t0));
            record(&SAMPLES2, j, t3.wrapping_sub(t2));
        }
    }
    let after = read_stats()?;
    report(names.0, &SAMPLES);
    report_stats(names.0, &before, &after);
    report(names.1, &SAMPLES2);
    report_stats(names.1, &before, &after);
    Ok(())
}

/// `vm.copy.<n>` and `vm.copy.<n>.move`: `vm_copy` (Accent's MoveWords) of `n` untouched
/// pages into new memory of this task, without and with deleting the source (Accent's
/// Figure 3-2, MoveWords of unbacked memory: MoveWords-Create and MoveWords-Create-Delete).
/// Allocating the source before and deallocating the copy after are outside the window.
fn vm_copy_unbacked(n: u64, names: (&str, &str)) -> Result<(), Failed> {
    use baton_rt::vm::{VM_COPY_CREATE, VM_COPY_DELETE};
    let len = n * PAGE;
    for (name, flags) in [
        (names.0, VM_COPY_CREATE),
        (names.1, VM_COPY_CREATE | VM_COPY_DELETE),
    ] {
        clear_samples();
        let before = read_stats()?;
        let src = baton_rt::vm::allocate(None, len, baton_rt::vm::PROT_RW)
            .map_err(|e| fail!("{name}: allocate: {}", e.name()))?;
        let mut src = Some(src);
        for i in 0..TOTAL {
            let from = match src {
                Some(a) => a,
                None => baton_rt::vm::allocate(None, len, baton_rt::vm::PROT_RW)
                    .map_err(|e| fail!("{name}: allocate: {}", e.name()))?,
            };
            let t0 = rdtsc_ordered();
            // SAFETY: the source is untouched memory of this benchmark, the copy goes into
            // new memory; nothing in Rust refers to either.
            let copied = unsafe { baton_rt::vm::copy(0, from, len, 0, 0, flags) };
            let t1 = rdtsc_ordered();
            let to = copied.map_err(|e| fail!("{name}: {}", e.name()))?;
            src = (flags & VM_COPY_DELETE == 0).then_some(from);
            // SAFETY: the copy was just made and nothing refers to it.
            unsafe { baton_rt::vm::deallocate(to, len) }
                .map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
            if let Some(j) = i.checked_sub(WARMUP) {
                record(&SAMPLES, j, t1.wrapping_sub(t0));
            }
        }
        if let Some(a) = src {
            // SAFETY: the source of the copies, nothing refers to it.
            unsafe { baton_rt::vm::deallocate(a, len) }
                .map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
        }
        let after = read_stats()?;
        report(name, &SAMPLES);
        report_stats(name, &before, &after);
    }
    Ok(())
}

/// `vm.protect.<n>`: making `n` resident, writable, translated pages read-only (their
/// translations write-protected and shot down); `vm.unprotect.<n>`: giving write access
/// back to the same pages, read-only and translated (the map changed; the translations
/// stay read-only and the next store to each page upgrades it, as Mach's `vm_protect`
/// leaves a permission's increase to the fault). After each pair, every page is stored to
/// again (not measured).
fn vm_protect(n: u64, name: &str, unname: &str) -> Result<(), Failed> {
    use baton_rt::vm::{protect, PROT_READ, PROT_RW};
    clear_samples();
    let len = n * PAGE;
    let a = baton_rt::vm::allocate(Some(VM_BENCH), len, PROT_RW)
        .map_err(|e| fail!("{name}: allocate: {}", e.name()))?;
    let touch = || {
        for p in 0..n {
            // SAFETY: allocated above, writable again, no reference into it.
            unsafe { ((a + p * PAGE) as *mut u64).write_volatile(p) };
        }
    };
    touch();
    let before = read_stats()?;
    for i in 0..TOTAL {
        let t0 = rdtsc_ordered();
        // SAFETY: nothing relies on writing the range until it is writable again.
        let r = unsafe { protect(a, len, PROT_READ, false) };
        let t1 = rdtsc_ordered();
        r.map_err(|e| fail!("{name}: {}", e.name()))?;
        let t2 = rdtsc_ordered();
        // SAFETY: as above.
        let r = unsafe { protect(a, len, PROT_RW, false) };
        let t3 = rdtsc_ordered();
        r.map_err(|e| fail!("{unname}: {}", e.name()))?;
        touch();
        if let Some(j) = i.checked_sub(WARMUP) {
            record(&SAMPLES, j, t1.wrapping_sub(t0));
            record(&SAMPLES2, j, t3.wrapping_sub(t2));
        }
    }
    let after = read_stats()?;
    // SAFETY: nothing refers to the range.
    unsafe { baton_rt::vm::deallocate(a, len) }
        .map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    report(unname, &SAMPLES2);
    report_stats(unname, &before, &after);
    Ok(())
}

/// Memory-object benchmarks: an object of `pages` pages, every page resident (stored to
/// through a first mapping, which stays), named by a right; the mapping's address.
fn resident_object(name: &str, pages: u64) -> Result<(u64, u64), Failed> {
    use baton_rt::memobj::{self, map_flags};
    use baton_rt::vm::{INHERIT_COPY, PROT_RW};
    let obj = memobj::create(pages * PAGE).map_err(|e| fail!("{name}: create: {}", e.name()))?;
    let a = memobj::map(
        obj,
        pages * PAGE,
        0,
        map_flags(PROT_RW, PROT_RW, false, INHERIT_COPY),
    )
    .map_err(|e| fail!("{name}: map: {}", e.name()))?;
    for p in 0..pages {
        // SAFETY: mapped above, writable, no reference into it.
        unsafe { ((a + p * PAGE) as *mut u64).write_volatile(p + 1) };
    }
    Ok((obj, a))
}

/// Drops the right and the first mapping [`resident_object`] made.
fn drop_object(name: &str, (obj, a): (u64, u64), pages: u64) -> Result<(), Failed> {
    baton_rt::ipc::cap_drop(obj).map_err(|e| fail!("{name}: drop: {}", e.name()))?;
    // SAFETY: nothing refers to the range.
    unsafe { baton_rt::vm::deallocate(a, pages * PAGE) }
        .map_err(|e| fail!("{name}: deallocate: {}", e.name()))
}

/// `vm.map.<n>`: `vm_map` of `n` resident pages of an object (read and write, shared),
/// then a first load of each page through the new mapping (a memory fill each: the
/// translation entered from the object's page). The unmap is outside the window.
fn vm_map(n: u64, name: &str) -> Result<(), Failed> {
    use baton_rt::memobj::{self, map_flags};
    use baton_rt::vm::{INHERIT_COPY, PROT_RW};
    clear_samples();
    let o = resident_object(name, n)?;
    let flags = map_flags(PROT_RW, PROT_RW, false, INHERIT_COPY);
    let before = read_stats()?;
    // Fewer iterations for the large sizes (each touches every page): enough for a median.
    let total = if n >= 100 {
        WARMUP / 10 + ITER / 10
    } else {
        TOTAL
    };
    for i in 0..total {
        let t0 = rdtsc_ordered();
        let a = memobj::map(o.0, n * PAGE, 0, flags);
        let a = a.map_err(|e| fail!("{name}: {}", e.name()))?;
        for p in 0..n {
            // SAFETY: mapped just now, no reference into it.
            black_box(unsafe { ((a + p * PAGE) as *const u64).read_volatile() });
        }
        let t1 = rdtsc_ordered();
        // SAFETY: nothing refers to the range.
        unsafe { baton_rt::vm::deallocate(a, n * PAGE) }
            .map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
        let warm = if n >= 100 { WARMUP / 10 } else { WARMUP };
        if let Some(j) = i.checked_sub(warm) {
            record(&SAMPLES, j, t1.wrapping_sub(t0));
        }
    }
    let after = read_stats()?;
    drop_object(name, o, n)?;
    if n >= 100 {
        report_n(name, &SAMPLES, ITER / 10);
    } else {
        report(name, &SAMPLES);
    }
    report_stats(name, &before, &after);
    Ok(())
}

/// `vm.fault.fill` (`copy` false): the first load of a page resident in an object through
/// a second mapping of it (Accent's memory fill: only the translation is missing);
/// `vm.fault.cow` (`copy` true): the first store to a page of a copy-on-write mapping of
/// the object made after its pages were written (the page copied into the mapping's own
/// shadow, then mapped writable).
fn vm_fault_object(name: &str, copy: bool) -> Result<(), Failed> {
    use baton_abi::memobj::MAP_COPY;
    use baton_rt::memobj::{self, map_flags};
    use baton_rt::vm::{INHERIT_COPY, PROT_RW};
    clear_samples();
    let pages = TOTAL as u64;
    let o = resident_object(name, pages)?;
    // A store through a copy-on-write mapping; a load through a mapping made without
    // access and then given it, so that `vm_map` enters no translation of its own.
    let flags = if copy {
        map_flags(PROT_RW, PROT_RW, false, INHERIT_COPY) | MAP_COPY
    } else {
        map_flags(0, PROT_RW, false, INHERIT_COPY)
    };
    let b =
        memobj::map(o.0, pages * PAGE, 0, flags).map_err(|e| fail!("{name}: map: {}", e.name()))?;
    if !copy {
        // SAFETY: nothing refers to the range yet.
        unsafe { baton_rt::vm::protect(b, pages * PAGE, PROT_RW, false) }
            .map_err(|e| fail!("{name}: protect: {}", e.name()))?;
    }
    let before = read_stats()?;
    for i in 0..TOTAL {
        let p = (b + i as u64 * PAGE) as *mut u64;
        let t0 = rdtsc_ordered();
        if copy {
            // SAFETY: mapped above, writable, no reference into it.
            unsafe { p.write_volatile(7) };
        } else {
            // SAFETY: as above.
            black_box(unsafe { p.read_volatile() });
        }
        let t1 = rdtsc_ordered();
        if let Some(j) = i.checked_sub(WARMUP) {
            record(&SAMPLES, j, t1.wrapping_sub(t0));
        }
    }
    let after = read_stats()?;
    // SAFETY: nothing refers to the range.
    unsafe { baton_rt::vm::deallocate(b, pages * PAGE) }
        .map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
    drop_object(name, o, pages)?;
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// `vm.allocate.at10k`: `vm.allocate.1` in a space that already holds 10,000 map
/// entries (one-page allocations with a hole between each), the O(log n) claim.
fn vm_allocate_at10k(name: &str) -> Result<(), Failed> {
    use baton_rt::vm::{allocate, deallocate, PROT_RW};
    const ENTRIES: u64 = 10_000;
    for i in 0..ENTRIES {
        allocate(Some(VM_BENCH + 2 * i * PAGE), PAGE, PROT_RW)
            .map_err(|e| fail!("{name}: allocate entry {i}: {}", e.name()))?;
    }
    let entries = baton_rt::vm::stats()
        .map_err(|e| fail!("{name}: stats: {}", e.name()))?
        .entries;
    if entries < ENTRIES {
        return Err(fail!("{name}: only {entries} entries"));
    }
    clear_samples();
    let before = read_stats()?;
    for i in 0..TOTAL {
        let t0 = rdtsc_ordered();
        let a = allocate(None, PAGE, PROT_RW);
        let t1 = rdtsc_ordered();
        let a = a.map_err(|e| fail!("{name}: {}", e.name()))?;
        // SAFETY: just allocated, nothing refers to it.
        unsafe { deallocate(a, PAGE) }.map_err(|e| fail!("{name}: {}", e.name()))?;
        if let Some(j) = i.checked_sub(WARMUP) {
            record(&SAMPLES, j, t1.wrapping_sub(t0));
        }
    }
    let after = read_stats()?;
    // SAFETY: nothing refers to the range.
    unsafe { deallocate(VM_BENCH, 2 * ENTRIES * PAGE) }
        .map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// The pager port and object of `vm.fault.pager`.
static PAGER_PORT: AtomicU64 = AtomicU64::new(0);
static PAGER_OBJECT: AtomicU64 = AtomicU64::new(0);

/// `vm.fault.pager`'s pager: answers every data request with a page (its first word the
/// page number), until its port goes.
fn pager_partner(_: u64) {
    use baton_rt::pager::{supply, Request, RECEIVE_SIZE};
    let port = PAGER_PORT.load(Ordering::Acquire);
    let mut msg = [0u8; RECEIVE_SIZE];
    let mut page = [0u8; PAGE as usize];
    while baton_rt::ipc::msg_buf(&mut msg, baton_rt::ipc::MSG_RECEIVE, port, FOREVER).is_ok() {
        let data = msg.get(HEADER_SIZE..).unwrap_or(&[]);
        let Some(req) = Request::from_bytes(data) else {
            continue;
        };
        page[..8].copy_from_slice(&(req.offset / PAGE).to_le_bytes());
        let _ = supply(PAGER_OBJECT.load(Ordering::Acquire), req.offset, &page);
    }
}

/// `vm.fault.pager.migrating`'s pager, run by an activation on the faulting thread.
fn pager_activation(req: &mut baton_rt::migrate::Request) {
    use baton_rt::pager::{supply, Request};
    if let Some(r) = Request::from_bytes(req.data()) {
        let mut page = [0u8; PAGE as usize];
        page[..8].copy_from_slice(&(r.offset / PAGE).to_le_bytes());
        let _ = supply(PAGER_OBJECT.load(Ordering::Acquire), r.offset, &page);
    }
    req.reply(0, &[]);
}

/// `vm.fault.pager`: the first read of a page of a pager-backed object whose pager is a
/// thread of this task receiving requests as messages: fault, request, the pager's
/// receive and supply, the wake-up and the second fault that maps the page. With
/// `activations` (`vm.fault.pager.migrating`) the pager serves through an activation: the
/// faulting thread migrates into it, supplies, returns and faults again.
fn vm_fault_pager(name: &str, activations: bool) -> Result<(), Failed> {
    clear_samples();
    let len = TOTAL as u64 * PAGE;
    let port = baton_rt::ipc::port_allocate(0).map_err(|e| fail!("{name}: port: {}", e.name()))?;
    if activations {
        baton_rt::migrate::attach(port, 1, pager_activation)
            .map_err(|e| fail!("{name}: attach: {}", e.name()))?;
    }
    let object = baton_rt::pager::create(port, len, 1)
        .map_err(|e| fail!("{name}: memobj_pager: {}", e.name()))?;
    PAGER_PORT.store(port, Ordering::Release);
    PAGER_OBJECT.store(object, Ordering::Release);
    let flags = baton_abi::memobj::map_flags(
        baton_rt::vm::PROT_RW,
        baton_rt::vm::PROT_RW,
        false,
        baton_abi::vm::INHERIT_SHARE,
    );
    let a = baton_rt::memobj::map(object, len, 0, flags)
        .map_err(|e| fail!("{name}: vm_map: {}", e.name()))?;
    if !activations {
        start_partner(pager_partner)?;
    }
    let before = read_stats()?;
    let mut wrong = 0;
    for i in 0..TOTAL {
        let p = (a + i as u64 * PAGE) as *const u64;
        let t0 = rdtsc_ordered();
        // SAFETY: mapped above, no reference into it.
        let v = black_box(unsafe { p.read_volatile() });
        let t1 = rdtsc_ordered();
        wrong += u64::from(v != i as u64);
        if let Some(j) = i.checked_sub(WARMUP) {
            record(&SAMPLES, j, t1.wrapping_sub(t0));
        }
    }
    let after = read_stats()?;
    // SAFETY: nothing refers to the range.
    unsafe { baton_rt::vm::deallocate(a, len) }
        .map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
    let _ = baton_rt::ipc::cap_drop(object);
    let _ = baton_rt::ipc::cap_drop(port);
    if wrong != 0 {
        return Err(fail!("{name}: {wrong} pages read wrong"));
    }
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// `vm.reclaim.<n>`: a store to each of `n` resident pages of memory whose copy is gone
/// (Accent's copy-on-write reclaim, section 2.2.5): `n` pages written, copied into new
/// memory with `vm_copy` (which makes both copy-on-write and write-protects the
/// original's translations) and the copy deallocated (outside the window), then one store
/// to every page of the original, in order, as a parent writes its memory again after a
/// forked child has ended. The first store finds the object seen by no one else and
/// gives write access back; what the other stores cost is what reclaiming ahead saves
/// or not. The memory is deallocated outside the window.
fn vm_reclaim(n: u64, name: &str) -> Result<(), Failed> {
    use baton_rt::vm::{allocate, deallocate, PROT_RW, VM_COPY_CREATE};
    clear_samples();
    let len = n * PAGE;
    let before = read_stats()?;
    // Fewer iterations for the large size (each writes every page three times).
    let (warm, total) = if n >= 100 {
        (WARMUP / 10, WARMUP / 10 + ITER / 10)
    } else {
        (WARMUP, TOTAL)
    };
    let (mut reclaims, mut faults) = (0, 0);
    for i in 0..total {
        let src =
            allocate(None, len, PROT_RW).map_err(|e| fail!("{name}: allocate: {}", e.name()))?;
        for p in 0..n {
            // SAFETY: allocated above, writable, no reference into it.
            unsafe { ((src + p * PAGE) as *mut u64).write_volatile(p + 1) };
        }
        // SAFETY: the copy goes into new memory; nothing in Rust refers to either range.
        let to = unsafe { baton_rt::vm::copy(0, src, len, 0, 0, VM_COPY_CREATE) }
            .map_err(|e| fail!("{name}: vm_copy: {}", e.name()))?;
        // SAFETY: nothing refers to the copy.
        unsafe { deallocate(to, len) }.map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
        let s0 = baton_rt::vm::stats().map_err(|e| fail!("{name}: stats: {}", e.name()))?;
        let t0 = rdtsc_ordered();
        for p in 0..n {
            // SAFETY: the original, writable, no reference into it.
            unsafe { ((src + p * PAGE) as *mut u64).write_volatile(p) };
        }
        let t1 = rdtsc_ordered();
        let s1 = baton_rt::vm::stats().map_err(|e| fail!("{name}: stats: {}", e.name()))?;
        reclaims += s1.cow_reclaims - s0.cow_reclaims;
        faults += s1.faults - s0.faults;
        if s1.cow_copies != s0.cow_copies {
            return Err(fail!("{name}: a store copied a page nobody else sees"));
        }
        // SAFETY: nothing refers to the original.
        unsafe { deallocate(src, len) }.map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
        if let Some(j) = i.checked_sub(warm) {
            record(&SAMPLES, j, t1.wrapping_sub(t0));
        }
    }
    let after = read_stats()?;
    if reclaims == 0 {
        return Err(fail!("{name}: no store was a copy-on-write reclaim"));
    }
    println!("{name}: {reclaims} copy-on-write reclaims and {faults} faults in {total} iterations");
    if n >= 100 {
        report_n(name, &SAMPLES, ITER / 10);
    } else {
        report(name, &SAMPLES);
    }
    report_stats(name, &before, &after);
    Ok(())
}

/// Idle tasks [`vm_flush`] starts beside the benchmark's for its second row.
const FLUSH_IDLE: usize = 32;

/// `vm.flush.idle0` and `vm.flush.idle32`: a pager's `pager_flush(FLUSH_RETURN)` of one
/// resident page of its object, mapped by this task and not written since it was
/// supplied: the dirty bits of the page's translations gathered (through the reverse
/// map), nothing to return. The first row with the benchmark's tasks alone, the second
/// with 32 more tasks alive (each running `idle`, with its own map and page tables): the
/// kernel's work must not grow with the tasks that do not map the page.
fn vm_flush(names: (&str, &str)) -> Result<(), Failed> {
    use baton_abi::pager::FLUSH_RETURN;
    let name = names.0;
    let port = baton_rt::ipc::port_allocate(0).map_err(|e| fail!("{name}: port: {}", e.name()))?;
    let object = baton_rt::pager::create(port, PAGE, 1)
        .map_err(|e| fail!("{name}: memobj_pager: {}", e.name()))?;
    let page = [7u8; PAGE as usize];
    baton_rt::pager::supply(object, 0, &page).map_err(|e| fail!("{name}: supply: {}", e.name()))?;
    let flags = baton_abi::memobj::map_flags(
        baton_rt::vm::PROT_RW,
        baton_rt::vm::PROT_RW,
        false,
        baton_abi::vm::INHERIT_SHARE,
    );
    let a = baton_rt::memobj::map(object, PAGE, 0, flags)
        .map_err(|e| fail!("{name}: vm_map: {}", e.name()))?;
    // SAFETY: mapped above; a load (the page stays clean).
    if black_box(unsafe { (a as *const u64).read_volatile() }) != 0x0707_0707_0707_0707 {
        return Err(fail!("{name}: the supplied page reads wrong"));
    }
    let notify = port_allocate(0).map_err(|e| fail!("{name}: port: {}", e.name()))?;
    let mut idle = [0u64; FLUSH_IDLE];
    let mut result = Ok(());
    for (row, tasks) in [(names.0, 0), (names.1, FLUSH_IDLE)] {
        if tasks > 0 && TABLE.load(Ordering::Relaxed) {
            // From the shell: the idle tasks would be ended by this program, which the
            // shell tests' judge counts against them; the first row says enough there.
            break;
        }
        for slot in idle.iter_mut().take(tasks) {
            *slot = baton_rt::task::run("idle", 0, &["idle"], &[])
                .map_err(|e| fail!("{row}: start idle: {}", e.name()))?;
        }
        clear_samples();
        let before = read_stats()?;
        for i in 0..TOTAL {
            let t0 = rdtsc_ordered();
            // SAFETY: a return only (no drop): the mapping's contents stay.
            let r = unsafe { baton_rt::pager::flush(object, 0, PAGE, FLUSH_RETURN) };
            let t1 = rdtsc_ordered();
            if r != Ok(PAGE) {
                result = Err(fail!("{row}: pager_flush: {r:?}"));
                break;
            }
            if let Some(j) = i.checked_sub(WARMUP) {
                record(&SAMPLES, j, t1.wrapping_sub(t0));
            }
        }
        let after = read_stats()?;
        for t in idle.iter().take(tasks) {
            let _ = baton_rt::task::terminate(*t);
            let _ = wait_task(*t, notify);
        }
        if result.is_err() {
            break;
        }
        report(row, &SAMPLES);
        report_stats(row, &before, &after);
    }
    let _ = cap_drop(notify);
    // SAFETY: nothing refers to the range.
    unsafe { baton_rt::vm::deallocate(a, PAGE) }
        .map_err(|e| fail!("{name}: deallocate: {}", e.name()))?;
    let _ = cap_drop(object);
    let _ = cap_drop(port);
    result
}

/// The virtual-memory rows (`docs/benchmarks.md`).
fn vm_benchmarks() -> Result<(), Failed> {
    vm_fault_zero("vm.fault.zero", true)?;
    vm_fault_zero("vm.fault.zero.read", false)?;
    vm_allocate(1, ("vm.allocate.1", "vm.deallocate.1"))?;
    vm_allocate(16, ("vm.allocate.16", "vm.deallocate.16"))?;
    vm_allocate(256, ("vm.allocate.256", "vm.deallocate.256"))?;
    vm_allocate(1024, ("vm.allocate.1024", "vm.deallocate.1024"))?;
    vm_copy_unbacked(1, ("vm.copy.1", "vm.copy.1.move"))?;
    vm_copy_unbacked(16, ("vm.copy.16", "vm.copy.16.move"))?;
    vm_copy_unbacked(256, ("vm.copy.256", "vm.copy.256.move"))?;
    vm_copy_unbacked(1024, ("vm.copy.1024", "vm.copy.1024.move"))?;
    vm_protect(1, "vm.protect.1", "vm.unprotect.1")?;
    vm_protect(100, "vm.protect.100", "vm.unprotect.100")?;
    vm_protect(1024, "vm.protect.1024", "vm.unprotect.1024")?;
    vm_map(1, "vm.map.1")?;
    vm_map(100, "vm.map.100")?;
    vm_map(1024, "vm.map.1024")?;
    vm_fault_object("vm.fault.fill", false)?;
    vm_fault_object("vm.fault.cow", true)?;
    vm_allocate_at10k("vm.allocate.at10k")?;
    vm_fault_pager("vm.fault.pager", false)?;
    vm_fault_pager("vm.fault.pager.migrating", true)?;
    vm_reclaim(16, "vm.reclaim.16")?;
    vm_reclaim(256, "vm.reclaim.256")?;
    vm_flush(("vm.flush.idle0", "vm.flush.idle32"))?;
    Ok(())
}

/// Frames left to the paging rows' working set (`paging_limit` is set to what the disk
/// driver and the default pager hold, plus this and a few for the working set's task).
const PAGING_LIMIT: u64 = 256;
/// The working set: twice [`PAGING_LIMIT`] pages, as `pagebench`'s argument.
const PAGING_SET: &str = "512";
const _: () = assert!(2 * PAGING_LIMIT == 512);
/// Frames of the working set's task besides its region (stack, data, IPC buffer).
const PAGING_TASK_FRAMES: u64 = 16;

/// `v` in decimal, without the heap.
fn decimal(mut v: u64) -> Decimal {
    let mut d = Decimal {
        bytes: [0; 20],
        start: 20,
    };
    loop {
        d.start -= 1;
        if let Some(b) = d.bytes.get_mut(d.start) {
            *b = b'0' + (v % 10) as u8;
        }
        v /= 10;
        if v == 0 || d.start == 0 {
            return d;
        }
    }
}

/// A number's decimal digits.
struct Decimal {
    bytes: [u8; 20],
    start: usize,
}

impl Decimal {
    fn as_str(&self) -> &str {
        core::str::from_utf8(self.bytes.get(self.start..).unwrap_or(&[])).unwrap_or("0")
    }
}

/// The system's paging counters.
fn paging_stats(name: &str) -> Result<baton_rt::paging::PagingStats, Failed> {
    baton_rt::paging::system_stats().map_err(|e| fail!("{name}: paging_stats: {}", e.name()))
}

/// The paging rows (`docs/benchmarks.md`): the disk driver `blk`
/// and the default pager `dpager` on the disk's swap partition are started, user memory is
/// limited (by `pagebench` itself) to what they hold plus [`PAGING_LIMIT`] frames and a
/// few, and `pagebench`, a small task of its own, works a region of twice that many pages (`vm.pageout`, `vm.thrash`,
/// `vm.pagein`; it prints the rows). Everything else's idle memory, this program's too,
/// goes out to the disk at its first page-outs, and this program's comes back at the end,
/// before the pager and then the driver (which ends with the pager's send right, its last)
/// are stopped.
fn paging_benchmarks() -> Result<(), Failed> {
    use baton_rt::{paging, task};
    if TABLE.load(Ordering::Relaxed) {
        // From the shell: the running system's limit and default pager are left alone.
        return Ok(());
    }
    let name = "vm.paging";
    let host = host_priv();
    let notify = port_allocate(0).map_err(|e| fail!("{name}: port: {}", e.name()))?;
    let u0 = paging_stats(name)?.pageable_used;
    let mut buf = IpcBuffer::new().map_err(|e| fail!("{name}: IPC buffer: {}", e.name()))?;
    let (driver_id, driver) = blk_client::start_driver(&mut buf, host)
        .map_err(|e| fail!("{name}: start blk: {}", e.name()))?;
    let driver_task = baton_rt::host::task_port(host, driver_id)
        .map_err(|e| fail!("{name}: blk's task port: {}", e.name()))?;
    let pager = swap_proto::start_pager(&mut buf, host, driver, &["dpager"])
        .map_err(|e| fail!("{name}: start dpager: {}", e.name()))?;
    let _ = cap_drop(driver);
    let mut waited = 0;
    while paging_stats(name)?.store_slots == 0 {
        if waited == 1000 {
            return Err(fail!("{name}: the default pager did not register"));
        }
        let _ = baton_rt::sleep_ns(10_000_000);
        waited += 1;
    }
    let u1 = paging_stats(name)?.pageable_used;
    let limit = (u1.saturating_sub(u0) + PAGING_LIMIT + PAGING_TASK_FRAMES)
        .max(baton_abi::paging::LIMIT_MIN);
    let old = paging_stats(name)?.pageable_limit;
    // The working set's task lowers the limit itself once it exists (making a task needs
    // memory, which a limit already lowered would refuse) and puts it back at its end.
    let frames = decimal(limit);
    let child = task::run(
        "pagebench",
        host,
        &["pagebench", PAGING_SET, frames.as_str()],
        &[],
    )
    .map_err(|e| fail!("{name}: start pagebench: {}", e.name()))?;
    wait_task(child, notify).map_err(|e| fail!("{name}: wait for pagebench: {}", e.name()))?;
    paging::set_limit(old, host).map_err(|e| fail!("{name}: paging_limit: {}", e.name()))?;
    // Everything of this program that went out comes back before the pager goes (what
    // it held would be lost), and the pager and the driver are stopped: the run ends when
    // every task has.
    page_everything_in();
    task::terminate(pager).map_err(|e| fail!("{name}: stop dpager: {}", e.name()))?;
    wait_task(pager, notify).map_err(|e| fail!("{name}: wait for dpager: {}", e.name()))?;
    wait_task(driver_task, notify).map_err(|e| fail!("{name}: wait for blk: {}", e.name()))?;
    for _ in 0..500 {
        if baton_rt::memobj::dma_quarantined(host).is_ok_and(|n| n > 0) {
            break;
        }
        let _ = baton_rt::sleep_ns(10_000_000);
    }
    let _ = baton_rt::memobj::dma_quarantine_release(host);
    let _ = baton_rt::ipc::cap_drop(notify);
    Ok(())
}

/// Reads one byte of every readable page of this task, so that nothing of it is paged out
/// (before its default pager goes, which would lose those pages).
fn page_everything_in() {
    let mut addr = 0;
    while let Ok(r) = baton_rt::vm::query(addr) {
        if r.prot & baton_abi::vm::PROT_READ != 0 {
            let mut p = r.start;
            while p < r.end {
                // SAFETY: a readable page of this task's map; a volatile read of one byte.
                black_box(unsafe { (p as *const u8).read_volatile() });
                p += PAGE;
            }
        }
        addr = r.end;
    }
}

/// Waits for the end of the task whose port is `task` (a dead-name notification on
/// `notify`) and releases the name.
fn wait_task(task: u64, notify: u64) -> Result<(), Error> {
    match baton_rt::ipc::port_notify(task, baton_abi::ipc::NOTIFY_KIND_DEAD_NAME, notify) {
        Ok(()) => {
            let mut buf = [0u8; 64];
            baton_rt::ipc::msg_buf(&mut buf, MSG_RECEIVE, notify, FOREVER)?;
        }
        Err(Error::DeadName) => {}
        Err(e) => return Err(e),
    }
    baton_rt::ipc::cap_drop(task)
}

/// `task.null`: Accent's null program (Table 3-12) in four steps: an empty task, the
/// program `task_null` mapped from the boot image, its thread, its start (no start
/// message: it exits at once); then the wait for its end and the release of its port.
fn task_null() -> Result<(), Failed> {
    use baton_rt::task;
    let name = "task.null";
    clear_samples();
    let notify = port_allocate(0).map_err(|e| fail!("{name}: port: {}", e.name()))?;
    let mut before = Stats::default();
    for w in 0..TOTAL {
        let recorded = w.checked_sub(WARMUP);
        if recorded == Some(0) {
            before = read_stats()?;
        }
        let t0 = rdtsc_ordered();
        let made = task::create(0, 0).and_then(|t| {
            task::map_program(t, "task_null")?;
            task::init_thread(t, 0, 0)?;
            task::start_raw(t, 0, 0)?;
            wait_task(t, notify)
        });
        let t1 = rdtsc_ordered();
        if let Err(e) = made {
            return Err(fail!("{name}: iteration {w}: {}", e.name()));
        }
        if let Some(i) = recorded {
            record(&SAMPLES, i, t1.wrapping_sub(t0));
        }
    }
    let after = read_stats()?;
    let _ = cap_drop(notify);
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

/// `task.fork`: a fork of this task with 1 MiB resident (touched before), whose child
/// exits at once; until the parent has waited for its end.
fn task_fork() -> Result<(), Failed> {
    use baton_rt::task::{fork, Forked};
    const LEN: u64 = 1 << 20;
    let name = "task.fork";
    clear_samples();
    let notify = port_allocate(0).map_err(|e| fail!("{name}: port: {}", e.name()))?;
    let at = baton_rt::vm::allocate(None, LEN, baton_rt::vm::PROT_RW)
        .map_err(|e| fail!("{name}: allocate: {}", e.name()))?;
    for page in (0..LEN).step_by(4096) {
        // SAFETY: the range was just allocated read-write for this benchmark.
        unsafe { ((at + page) as *mut u64).write_volatile(page) };
    }
    let mut before = Stats::default();
    for w in 0..TOTAL {
        let recorded = w.checked_sub(WARMUP);
        if recorded == Some(0) {
            before = read_stats()?;
        }
        let t0 = rdtsc_ordered();
        let done = match fork(0, 0) {
            Ok(Forked::Child) => baton_rt::exit(0),
            Ok(Forked::Parent(c)) => wait_task(c, notify),
            Err(e) => Err(e),
        };
        let t1 = rdtsc_ordered();
        if let Err(e) = done {
            return Err(fail!("{name}: iteration {w}: {}", e.name()));
        }
        if let Some(i) = recorded {
            record(&SAMPLES, i, t1.wrapping_sub(t0));
        }
    }
    let after = read_stats()?;
    let _ = cap_drop(notify);
    // SAFETY: nothing refers to the range any more.
    let _ = unsafe { baton_rt::vm::deallocate(at, LEN) };
    report(name, &SAMPLES);
    report_stats(name, &before, &after);
    Ok(())
}

fn run_all() -> Result<(), Failed> {
    let start = read_stats()?;
    let threads = start.threads;
    println!(
        "bench: {WARMUP} warm-up and {ITER} recorded iterations per benchmark, {} CPUs",
        start.cpus
    );
    if start.cpus >= 2 {
        // The cross-CPU benchmarks (booted with two CPUs).
        waitwake_pingpong(threads, true)?;
        return Ok(());
    }

    single("floor.rdtsc.overhead", || {})?;
    single("floor.syscall.null", || {
        black_box(sys_null());
    })?;
    single("floor.syscall.clock", || {
        black_box(sys_clock());
    })?;
    single("floor.syscall.minimal", || {
        black_box(floor::minimal());
    })?;
    single("floor.syscall.full", || {
        black_box(floor::full());
    })?;
    single("floor.space.switch", || {
        black_box(floor::space());
    })?;
    fault_roundtrip()?;
    xas_call(threads)?;
    single("sched.yield.self", || {
        black_box(sys_yield());
    })?;
    switch_pair(
        "sched.yield.switch",
        "sched.yield.roundtrip",
        false,
        threads,
    )?;
    switch_pair(
        "sched.pmodel.switch",
        "sched.pmodel.roundtrip",
        true,
        threads,
    )?;
    fpu_switch_cost(threads)?;
    waitwake_pingpong(threads, false)?;
    rpc_benchmarks()?;
    migrating_benchmarks()?;
    marshal_benchmarks()?;
    exception_roundtrip(threads)?;
    create_exit("thread.create_exit", &CHILD_STACKS, threads)?;
    frag_create_exit(threads)?;
    sting_benchmarks()?;
    sting_kernel_block()?;
    spin_strand_block()?;
    sting_checkpoint_resume()?;
    vm_benchmarks()?;
    ool_bench::run(TABLE.load(Ordering::Relaxed)).map_err(|e| fail!("ipc.ool: {e}"))?;
    wait_threads_gone(threads)?;
    task_null()?;
    task_fork()?;
    spin_benchmarks()?;
    spin_thread_benchmarks(threads)?;
    spin_thread_layered(threads)?;
    spin_vm_benchmarks(threads)?;
    // The file rows first: the blk rows write over the disk's first sectors, the
    // partition table among them.
    file_bench::run(TABLE.load(Ordering::Relaxed)).map_err(|e| fail!("file: {}", e.name()))?;
    blk_bench::run(TABLE.load(Ordering::Relaxed)).map_err(|e| fail!("blk: {}", e.name()))?;
    paging_benchmarks()?;
    // Seed 000 Table 5: the kernel memory a thread costs (no stack: it blocks with a
    // continuation).
    let s = read_stats()?;
    if TABLE.load(Ordering::Relaxed) {
        println!("{:<34} {:>9} bytes", "mem.thread.bytes", s.thread_bytes);
        return Ok(());
    }
    println!(
        "BENCH name=mem.thread.bytes unit=bytes iterations=1 median={0} min={0} max={0}",
        s.thread_bytes
    );
    Ok(())
}

/// The kernel's system-wide virtual-memory counters after the whole run (`BENCHVM` lines,
/// `name=value` words, eight a line so that a line stays short): `cargo xtask bench` sets
/// them beside Accent's Table 3-10.
fn print_vm_counters() {
    struct Words<'a>(&'a [(&'static str, u64)]);
    impl core::fmt::Display for Words<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            self.0
                .iter()
                .try_for_each(|(name, value)| write!(f, " {name}={value}"))
        }
    }
    let Ok(stats) = baton_rt::vm::system_stats() else {
        return;
    };
    let words = stats.to_words();
    let mut pairs = [("", 0u64); baton_abi::vm::VM_STATS_WORDS];
    for (slot, (name, value)) in pairs
        .iter_mut()
        .zip(baton_abi::vm::VmStats::FIELD_NAMES.iter().zip(words))
    {
        *slot = (name, value);
    }
    for chunk in pairs.chunks(8) {
        println!("BENCHVM{}", Words(chunk));
    }
    // The paging counters (Accent's Table 3-8, and Table 3-10's paging lines).
    if let Ok(p) = baton_rt::paging::system_stats() {
        let paging = [
            ("paging_from_free", p.from_free),
            ("paging_reclaimed_mapped", p.reclaimed_mapped),
            ("paging_reclaimed_unmapped", p.reclaimed_unmapped),
            ("paging_reclaimed_pager", p.reclaimed_pager),
            ("paging_pageouts", p.pageouts),
            ("paging_pageins", p.pageins),
            ("paging_scanned", p.scanned),
            ("paging_spared", p.spared),
            ("paging_no_store", p.no_store),
        ];
        for chunk in paging.chunks(8) {
            println!("BENCHVM{}", Words(chunk));
        }
    }
}

fn main(_task_id: u64) -> i32 {
    if baton_rt::env::args().any(|a| a == "--table") {
        TABLE.store(true, Ordering::Relaxed);
        println!(
            "Figures are TSC ticks, medians of {ITER} iterations: instructions only when QEMU \
             counts instructions (-icount, as `cargo xtask bench` runs it), cycles under \
             hardware KVM, neither under plain TCG. `cargo xtask bench` gives the measured \
             table with the papers' and Linux's figures."
        );
        println!(
            "{:<34} {:>9} {:>9} {:>9}",
            "benchmark", "median", "min", "max"
        );
    }
    match run_all() {
        Ok(()) => {
            if TABLE.load(Ordering::Relaxed) {
                println!("bench: done");
            } else {
                print_vm_counters();
                println!("BENCH done");
            }
            0
        }
        Err(Failed) => 1,
    }
}
