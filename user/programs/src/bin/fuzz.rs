//! `fuzz`: a seeded, stateful system-call fuzzer (see `docs/fuzzing.md`).
//!
//! The program runs in two roles.
//!
//! - **Controller** (started by the kernel, no bootstrap right): reads its parameters from the
//!   name of an empty boot module `fuzz=FIRST:SEEDS:CALLS[:tTHREADS][:xCLASSES][:v]` if the
//!   initrd has one (`cargo xtask fuzz` adds it), else runs the default schedule
//!   ([`DEFAULT_SEEDS`] seeds of [`DEFAULT_CALLS`] calls, the first seed depending on the
//!   number of CPUs). For each seed it takes the kernel's counts ([`Stats`]), spawns itself
//!   as a worker task with a bootstrap right to a port of its own, answers the worker's
//!   request for its parameters, waits for its result and for the task to end, then waits
//!   for the kernel's counts to come back to what they were before (children of the worker
//!   may still be ending) and compares them.
//! - **Worker** (spawned by the controller): a supervisor thread and `THREADS` fuzzing
//!   threads ([`calls`]) that make `CALLS` system calls in all, chosen by a pseudo-random
//!   generator seeded with the seed and the thread's index, with arguments biased to edge
//!   values and to the names, ports, threads, activations and tasks earlier calls returned
//!   (kept in fixed-size pools, stale and live). It then ends what it made, reports, and
//!   exits; whatever it leaked ends with it, which the controller's comparison checks.
//!
//! A seed fails (`TEST FAIL fuzz`) when fewer than [`MIN_OK_PERCENT`] % of its calls
//! succeed, when the worker dies or does not finish, or when the counts do not come back.
//! Progress: `fuzz: seed S tT call N` before call N of fuzzing thread T, every
//! [`calls::PROGRESS`] calls (every call with `:v`), so a kernel panic can be placed.
#![no_std]
#![no_main]

#[path = "fuzz/calls.rs"]
mod calls;

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_rt::ipc::{
    cap_drop, cap_info, port_allocate, Disposition, IpcBuffer, MsgHeader, RightKind, MSG_RECEIVE,
    MSG_SEND,
};
use baton_rt::kobject::task_port;
use baton_rt::start::bootstrap;
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{clock_ns, module_info, println, sleep_ns, spawn_with, stats, Stats};

baton_rt::entry!(main);

/// Seeds per boot when no parameters are given.
const DEFAULT_SEEDS: u64 = 4;
/// Calls per seed when no parameters are given.
const DEFAULT_CALLS: u64 = 25_000;
/// Fuzzing threads per worker by default.
const DEFAULT_THREADS: u64 = 3;
/// Most fuzzing threads.
const MAX_THREADS: usize = 8;
/// A seed fails when fewer of its calls succeed.
const MIN_OK_PERCENT: u64 = 30;

/// Message id of the worker's request for its parameters.
const PARAMS: u64 = 1;

/// The worker's result, which the controller reads through the worker's task port
/// (`vm_read`) rather than receiving in a message: the fuzzed calls may drop or move any
/// right the worker holds (a name is a small number, one of them among the fuzzer's edge
/// values, others read back from its own messages), its bootstrap right included, but
/// cannot touch the controller's task port. Words: [`OUTCOME_READY`] once the other two
/// are the calls made and the calls that succeeded, then the controller's acknowledgement (set
/// with `vm_write`), after which the worker exits.
static OUTCOME: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];
/// `OUTCOME[0]` when the result is there.
const OUTCOME_READY: u64 = 0x0f0f_d0e5_f022_0001;
/// How long the worker waits for the controller to acknowledge its result.
const ACK_WAIT_NS: u64 = 10_000_000_000;

/// Reads the worker's [`OUTCOME`] through its task port: `Some((calls, ok))` once it is
/// there. (Controller and worker are the same program, so the static is at the same
/// address in both.)
fn read_outcome(task: u64) -> Option<(u64, u64)> {
    let mut bytes = [0u8; 24];
    baton_rt::memobj::read(task, OUTCOME.as_ptr() as u64, &mut bytes).ok()?;
    let word = |i: usize| baton_rt::ipc::data_word(&bytes, i);
    (word(0) == OUTCOME_READY).then_some((word(1), word(2)))
}

/// Tells the worker its result was read (`OUTCOME[3]` through its task port).
fn acknowledge(task: u64) {
    // SAFETY: `task` is the worker's task, not this one: nothing of ours is written.
    let _ =
        unsafe { baton_rt::memobj::write(task, OUTCOME[3].as_ptr() as u64, &1u64.to_le_bytes()) };
}

/// How long the controller waits for a worker's result.
const WORKER_TIMEOUT_NS: u64 = 300_000_000_000;
/// How long the kernel's counts may take to come back after the worker ended (its children
/// end by themselves within about a second).
const SETTLE_NS: u64 = 10_000_000_000;

/// Parameters of one run.
#[derive(Clone, Copy)]
struct Params {
    first: u64,
    seeds: u64,
    calls: u64,
    threads: u64,
    /// Bit per excluded call class ([`calls::CLASSES`]).
    exclude: u64,
    verbose: bool,
}

fn main(task_id: u64) -> i32 {
    if bootstrap() != 0 {
        worker(task_id)
    } else {
        controller()
    }
}

// ---------------------------------------------------------------------------------------
// Controller

/// Parses `FIRST:SEEDS:CALLS[:tTHREADS][:xCLASSES][:v]`.
fn parse(args: &str) -> Option<Params> {
    let mut words = args.split(':');
    let num = |w: Option<&str>| w.and_then(|w| w.parse::<u64>().ok());
    let mut p = Params {
        first: num(words.next())?,
        seeds: num(words.next())?,
        calls: num(words.next())?,
        threads: DEFAULT_THREADS,
        exclude: 0,
        verbose: false,
    };
    for w in words {
        if let Some(t) = w.strip_prefix('t') {
            p.threads = t.parse().ok()?;
        } else if let Some(x) = w.strip_prefix('x') {
            for c in x.chars() {
                let i = calls::CLASSES.iter().position(|k| k.letter == c)?;
                p.exclude |= 1 << i;
            }
        } else if w == "v" {
            p.verbose = true;
        } else {
            return None;
        }
    }
    p.threads = p.threads.clamp(1, MAX_THREADS as u64);
    Some(p)
}

/// The parameters: from a `fuzz=` module name, else the default schedule.
fn params(cpus: u64) -> Result<Params, ()> {
    let mut i = 0;
    while let Ok(info) = module_info(i) {
        if let Some(args) = info.name().strip_prefix("fuzz=") {
            return parse(args).ok_or_else(|| println!("TEST FAIL fuzz: bad parameters `{args}`"));
        }
        i += 1;
    }
    Ok(Params {
        first: 1 + 100 * cpus.saturating_sub(1),
        seeds: DEFAULT_SEEDS,
        calls: DEFAULT_CALLS,
        threads: DEFAULT_THREADS,
        exclude: 0,
        verbose: false,
    })
}

/// The counts that must come back after a worker ended. Not the kernel stacks in use:
/// with several CPUs that count depends on what the other CPUs run at the instant it is
/// read (an idle CPU, a thread between blocking and discarding its stack), not on objects.
fn counts(s: &Stats) -> [u64; 5] {
    [
        s.threads,
        s.ports,
        s.names,
        s.activations,
        s.messages_queued,
    ]
}

/// Prints a `Stats` summary of the objects and the heap.
fn show(seed: u64, when: &str, s: &Stats) {
    println!(
        "fuzz: seed {seed}: {when}: threads={} ports={} names={} activations={} messages={} \
         stacks={} heap={} | since boot: threads created={} migrations={} ipc fast={} queued={}",
        s.threads,
        s.ports,
        s.names,
        s.activations,
        s.messages_queued,
        s.stacks_in_use,
        s.heap_used,
        s.threads_created,
        s.migrations,
        s.ipc_fast,
        s.ipc_queued
    );
}

fn controller() -> i32 {
    let Ok(first) = stats() else {
        println!("TEST FAIL fuzz: stats unavailable");
        return 1;
    };
    let Ok(p) = params(first.cpus) else {
        return 1;
    };
    let excluded: heapless_letters::Letters = heapless_letters::letters(p.exclude);
    println!(
        "fuzz: seeds {}..{} x {} calls, {} threads, {} cpus, excluded classes `{}`",
        p.first,
        p.first + p.seeds,
        p.calls,
        p.threads,
        first.cpus,
        excluded.as_str()
    );
    for (i, class) in calls::CLASSES.iter().enumerate() {
        if p.exclude & (1 << i) != 0 {
            println!("fuzz: excluded: `{}`: {}", class.letter, class.what);
        }
    }
    let (Ok(mut buf), Ok(port)) = (IpcBuffer::new(), port_allocate(0)) else {
        println!("TEST FAIL fuzz: no IPC buffer or port");
        return 1;
    };
    let (mut calls, mut ok, mut failures) = (0u64, 0u64, 0u32);
    // The heap after the first seed: kernel tables keep the capacity they grew to, so the
    // heap is compared with what it was after a first round, as `hostile` does.
    let mut heap_reference: Option<u64> = None;
    for seed in p.first..p.first.saturating_add(p.seeds) {
        match run_seed(&mut buf, port, seed, &p, &mut heap_reference) {
            Ok((c, k)) => {
                calls += c;
                ok += k;
            }
            Err(()) => failures += 1,
        }
    }
    let percent = (ok * 100).checked_div(calls).unwrap_or(0);
    println!("fuzz: total {calls} calls, {ok} succeeded ({percent}%), {failures} seeds failed");
    let _ = cap_drop(port);
    if failures == 0 && calls > 0 {
        println!("TEST PASS fuzz: {} seeds, {calls} calls", p.seeds);
        0
    } else {
        println!("TEST FAIL fuzz: {failures} of {} seeds failed", p.seeds);
        1
    }
}

/// Runs one seed in a worker task; returns its calls and successes.
fn run_seed(
    buf: &mut IpcBuffer,
    port: u64,
    seed: u64,
    p: &Params,
    heap_reference: &mut Option<u64>,
) -> Result<(u64, u64), ()> {
    let fail = |why: &str| println!("TEST FAIL fuzz: seed {seed}: {why}");
    let before = stats().map_err(|_| fail("stats"))?;
    show(seed, "before", &before);
    let worker = spawn_with("fuzz", port).map_err(|e| fail(e.name()))?;
    let task = task_port(worker).map_err(|e| fail(e.name()))?;
    let deadline = clock_ns().saturating_add(WORKER_TIMEOUT_NS);
    let mut result: Option<(u64, u64)> = None;
    // Serve the worker until it has sent its result (or died).
    while result.is_none() {
        let now = clock_ns();
        if now >= deadline {
            fail("the worker did not finish in time");
            return Err(());
        }
        // Whether the worker has ended, seen before its result is read: a worker waits
        // for the acknowledgement before it exits, so an ended worker without a result
        // never gave one.
        let ended = cap_info(task) == Ok(RightKind::DeadName);
        if let Some(r) = read_outcome(task) {
            acknowledge(task);
            result = Some(r);
            break;
        }
        match buf.msg(MSG_RECEIVE, port, if ended { 0 } else { 10_000_000 }) {
            Ok(()) => {}
            Err(_) if ended => {
                fail("the worker ended without a result (killed?)");
                let _ = cap_drop(task);
                return Err(());
            }
            Err(_) => continue,
        }
        let h = buf.header();
        match h.id {
            PARAMS if h.reply != 0 => {
                let reply = MsgHeader {
                    bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
                    dest: h.reply,
                    id: PARAMS + 100,
                    ..MsgHeader::default()
                };
                let mut data = [0u8; 40];
                let words = [seed, p.calls, p.threads, p.exclude, u64::from(p.verbose)];
                for (d, w) in data.chunks_exact_mut(8).zip(words) {
                    d.copy_from_slice(&w.to_le_bytes());
                }
                if buf.set(reply, &[], &data).is_err() || buf.msg(MSG_SEND, 0, 0).is_err() {
                    fail("cannot answer the worker");
                }
            }
            _ => {
                // Names the fuzzer's children sent to this port by way of the worker
                // (hello messages with a send right): release them.
                if h.reply != 0 {
                    let _ = cap_drop(h.reply);
                }
                for i in 0..h.descriptors() {
                    if let Some(d) = buf.descriptor(i) {
                        let _ = cap_drop(d.value);
                    }
                }
            }
        }
    }
    let Some((calls, ok)) = result else {
        return Err(());
    };
    // Wait for the worker task to end, then for the counts to settle.
    let end = clock_ns().saturating_add(SETTLE_NS);
    while cap_info(task) != Ok(RightKind::DeadName) && clock_ns() < end {
        let _ = sleep_ns(1_000_000);
    }
    let _ = cap_drop(task);
    // Messages other tasks queued on our port after the worker's result.
    while buf.msg(MSG_RECEIVE, port, 0).is_ok() {
        let h = buf.header();
        if h.reply != 0 {
            let _ = cap_drop(h.reply);
        }
        for i in 0..h.descriptors() {
            if let Some(d) = buf.descriptor(i) {
                let _ = cap_drop(d.value);
            }
        }
    }
    let mut after = stats().map_err(|_| fail("stats"))?;
    while counts(&after) != counts(&before) && clock_ns() < end {
        let _ = sleep_ns(10_000_000);
        after = stats().map_err(|_| fail("stats"))?;
    }
    show(seed, "after", &after);
    let percent = (ok * 100).checked_div(calls).unwrap_or(0);
    println!("fuzz: seed {seed}: {calls} calls, {ok} succeeded ({percent}%)");
    let mut bad = false;
    if percent < MIN_OK_PERCENT {
        fail("too few calls succeeded");
        bad = true;
    }
    if counts(&after) != counts(&before) {
        fail("threads, ports, names, activations or queued messages did not come back");
        bad = true;
    }
    match *heap_reference {
        None => *heap_reference = Some(after.heap_used.max(before.heap_used)),
        Some(reference) if after.heap_used > reference + HEAP_SLACK => {
            println!(
                "TEST FAIL fuzz: seed {seed}: kernel heap grew to {} bytes (reference {reference})",
                after.heap_used
            );
            bad = true;
        }
        Some(_) => {}
    }
    if bad {
        Err(())
    } else {
        Ok((calls, ok))
    }
}

/// How far the heap may exceed its level after the first seed: the kernel's tables
/// (`Vec`-backed slabs of threads, ports, activations, tasks and their name spaces) keep
/// the capacity the busiest seed made them grow to, and a later seed may be busier.
const HEAP_SLACK: u64 = 64 * 1024;

/// Class letters for printing.
mod heapless_letters {
    /// Up to 16 class letters.
    pub struct Letters {
        bytes: [u8; 16],
        len: usize,
    }

    impl Letters {
        pub fn as_str(&self) -> &str {
            core::str::from_utf8(self.bytes.get(..self.len).unwrap_or(&[])).unwrap_or("")
        }
    }

    /// The letters of the classes whose bits are set in `mask`.
    pub fn letters(mask: u64) -> Letters {
        let mut l = Letters {
            bytes: [0; 16],
            len: 0,
        };
        for (i, class) in super::calls::CLASSES.iter().enumerate() {
            if mask & (1 << i) != 0 {
                if let Some(b) = l.bytes.get_mut(l.len) {
                    *b = class.letter as u8;
                    l.len += 1;
                }
            }
        }
        l
    }
}

// ---------------------------------------------------------------------------------------
// Worker

static STACKS: StackPool<MAX_THREADS, 32768> = StackPool::new();
/// Fuzzing threads that have finished.
static DONE: Counter = Counter::new(0);
/// Calls made and calls that succeeded, over all fuzzing threads.
static CALLS: AtomicU64 = AtomicU64::new(0);
static OK: AtomicU64 = AtomicU64::new(0);
/// Set when a fuzzing thread saw a kernel result that is wrong, not just an error.
static WRONG: AtomicU32 = AtomicU32::new(0);

fn worker(_task_id: u64) -> i32 {
    let Ok(mut buf) = IpcBuffer::new() else {
        return 1;
    };
    let Ok(reply) = port_allocate(0) else {
        return 1;
    };
    let ask = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: bootstrap(),
        reply,
        id: PARAMS,
        ..MsgHeader::default()
    };
    if buf.set(ask, &[], &[]).is_err()
        || buf
            .msg(MSG_SEND | MSG_RECEIVE, reply, 10_000_000_000)
            .is_err()
    {
        println!("TEST FAIL fuzz: worker: no parameters");
        return 1;
    }
    let word = |i: usize| baton_rt::ipc::data_word(buf.data(), i);
    let (seed, calls, threads, exclude, verbose) = (word(0), word(1), word(2), word(3), word(4));
    let _ = cap_drop(reply);
    let threads = threads.clamp(1, MAX_THREADS as u64) as usize;
    let start = stats().unwrap_or_default();
    if let Err(why) = calls::setup(seed, exclude, verbose != 0) {
        println!("TEST FAIL fuzz: seed {seed}: setup: {why}");
        return 1;
    }
    if let Err(why) = calls::privileged_refusals() {
        println!("TEST FAIL fuzz: seed {seed}: {why}");
        return 1;
    }
    let per_thread = calls.div_ceil(threads as u64);
    for t in 0..threads {
        let Some(stack) = STACKS.take() else {
            return 1;
        };
        match spawn(stack, fuzz_thread, (t as u64) | per_thread << 8) {
            Ok(id) => calls::add_worker(t, id),
            Err(e) => {
                println!(
                    "TEST FAIL fuzz: seed {seed}: cannot start a thread: {}",
                    e.name()
                );
                return 1;
            }
        }
    }
    if !calls::supervise(&DONE, threads as u32) {
        println!("TEST FAIL fuzz: seed {seed}: fuzzing threads stuck");
        calls::show_progress(threads);
        // Ending the task ends them; the controller then reports the seed as failed.
        return 1;
    }
    calls::cleanup();
    let end = stats().unwrap_or_default();
    println!(
        "fuzz: seed {seed}: in the worker after its cleanup: threads {} -> {}, ports {} -> {}, \
         names {} -> {}, activations {} -> {} (the rest ends with the task)",
        start.threads,
        end.threads,
        start.ports,
        end.ports,
        start.names,
        end.names,
        start.activations,
        end.activations
    );
    if WRONG.load(Ordering::Relaxed) != 0 {
        println!("TEST FAIL fuzz: seed {seed}: the kernel returned wrong results (see above)");
    }
    OUTCOME[1].store(CALLS.load(Ordering::Relaxed), Ordering::Relaxed);
    OUTCOME[2].store(OK.load(Ordering::Relaxed), Ordering::Relaxed);
    OUTCOME[0].store(OUTCOME_READY, Ordering::Release);
    // Exiting before the controller has read it would lose it.
    let until = clock_ns().saturating_add(ACK_WAIT_NS);
    while OUTCOME[3].load(Ordering::Acquire) == 0 {
        if clock_ns() >= until {
            println!("TEST FAIL fuzz: seed {seed}: the controller did not read the result");
            return 1;
        }
        let _ = sleep_ns(1_000_000);
    }
    0
}

/// A fuzzing thread: `arg` = index | calls << 8.
fn fuzz_thread(arg: u64) {
    let index = (arg & 0xff) as usize;
    let (calls, ok, wrong) = calls::run(index, arg >> 8);
    CALLS.fetch_add(calls, Ordering::Relaxed);
    OK.fetch_add(ok, Ordering::Relaxed);
    WRONG.fetch_add(wrong, Ordering::Relaxed);
    DONE.increment();
}
