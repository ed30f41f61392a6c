//! `teardown`: tasks, threads and activations ending while threads are inside activations
//! (migrating RPC, seed 001), with `td_child` tasks and `mig_server` tasks.
//!
//! Checks, printing `ok: <what>` for each:
//! 1. a task returns from `main` while another of its threads is inside an activation of
//!    the same task, yielding there (on one CPU it is on the run queue when the task ends):
//!    the task ends and everything it had is freed;
//! 2. a client task ends while its thread spins inside a server's activation, and then the
//!    server exits: both end, nothing is left;
//! 3. the same with the client's thread asleep in the server;
//! 4. two clients of one server: the server's own thread terminates the activation of the
//!    first client's call while that call is nested in a second server (the thread splits);
//!    the activation goes back to the pool and the second client's call takes it; when the
//!    first call's nested part returns, the second client still gets its own reply;
//! 5. a server exits inside a call, on the caller's thread (the task lingers until that
//!    thread has left it): the call is aborted, and the task goes;
//! 6. a server with one activation exits while one client's call sleeps in it and another
//!    client's call waits for the activation: the first is aborted, the second fails as a
//!    call to a dead port does, and nothing is left.
//!
//! That each task's end is reported exactly once is checked on the log by the test
//! (`xtask`). Verdict: `TEST PASS teardown` or `TEST FAIL teardown: ...`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};

use baton_rt::check::Failed;
use baton_rt::ipc::MSG_RECEIVE;
use baton_rt::ipc::{port_allocate, Descriptor, Disposition, IpcBuffer};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{println, stats, Error};

#[path = "../mig_proto.rs"]
mod mig_proto;

use mig_proto::*;

baton_rt::entry!(main);

const TEST: &str = "teardown";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// `td_child`'s protocol (see that program).
const CONFIG_CHILD: u64 = 2;
const INSIDE: u64 = 30;
const SELF: u64 = 1;
const CLIENT: u64 = 2;

/// `INFO`'s words: `SLEEP` calls asleep in the server, `SPIN_ACT` calls spinning there.
const ASLEEP: usize = 4;
const SPINNING_NOW: usize = 5;

static STACKS: StackPool<24, 16384> = StackPool::new();
/// Our reply port (named by every call; shared by the task's threads).
static REPLY: AtomicU64 = AtomicU64::new(0);
/// The first and second clients of check 4: their server, their raw results, and the
/// second's reply words.
static SERVER: AtomicU64 = AtomicU64::new(0);
static FIRST: AtomicU64 = AtomicU64::new(u64::MAX);
static SECOND: AtomicU64 = AtomicU64::new(u64::MAX);
static SECOND_WORDS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// How long the first client's nested call sleeps in B (check 4), and the second's in A.
const NESTED_NS: u64 = 400_000_000;
const SECOND_NS: u64 = 900_000_000;
/// The second client's mark, after its sleep time in its request.
const MARK: u64 = 0x5ec0_11d0_c0ff_ee00;

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn run() -> Result<(), Failed> {
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    REPLY.store(must("reply port", port_allocate(0))?, Ordering::Relaxed);
    let base = must("stats", stats())?;
    self_call(&mut buf, &base)?;
    client_ends_then_server(&mut buf, &base, SPIN_ACT, "spins")?;
    client_ends_then_server(&mut buf, &base, SLEEP, "sleeps")?;
    for round in 0..3 {
        split_reply(&mut buf, &base, round)?;
    }
    server_exits_in_call(&mut buf, &base)?;
    server_exits_with_caller_queued(&mut buf, &base)?;
    Ok(())
}

/// A call of `id` with `data` to `to` through `buf`; the raw `ipc_msg` result.
fn raw_call(buf: &mut IpcBuffer, to: u64, id: u64, data: &[u8]) -> u64 {
    mig_proto::raw_call(buf, to, REPLY.load(Ordering::Relaxed), id, data)
}

/// Word `i` of `server`'s `INFO`, or `u64::MAX` if the call fails.
fn info(buf: &mut IpcBuffer, server: u64, i: usize) -> u64 {
    mig_proto::info(buf, server, REPLY.load(Ordering::Relaxed), i)
}

/// Waits (up to 3 s, then fails the test) until word `i` of `server`'s `INFO` is `want`.
fn await_info(
    buf: &mut IpcBuffer,
    server: u64,
    i: usize,
    want: u64,
    what: &str,
) -> Result<(), Failed> {
    let reply = REPLY.load(Ordering::Relaxed);
    if must(
        "sleep",
        mig_proto::await_info(buf, server, reply, i, |n| n == want),
    )? {
        return Ok(());
    }
    println!("TEST FAIL {TEST}: waited 3 s for {what}");
    Err(Failed)
}

/// Waits (up to 3 s) until the kernel's counts satisfy `ok`; the last counts seen.
fn await_stats(ok: impl Fn(&baton_rt::Stats) -> bool) -> Result<baton_rt::Stats, Failed> {
    let mut now = must("stats", stats())?;
    for _ in 0..3_000 {
        if ok(&now) {
            break;
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
        now = must("stats", stats())?;
    }
    Ok(now)
}

/// Whether threads, activations, ports and names are back to `base`.
fn at_base(now: &baton_rt::Stats, base: &baton_rt::Stats) -> bool {
    now.threads == base.threads
        && now.activations == base.activations
        && now.ports == base.ports
        && now.names == base.names
        && now.messages_queued == base.messages_queued
}

/// Starts a `td_child` in `role` whose call is `id` with `arg` (to `server`, if not 0), and
/// waits until it says its call is inside the activation (and its `main` returns).
fn start_child(
    buf: &mut IpcBuffer,
    role: u64,
    server: u64,
    id: u64,
    arg: u64,
) -> Result<(), Failed> {
    let boot = must("boot port", port_allocate(0))?;
    must("spawn td_child", baton_rt::spawn_with("td_child", boot))?;
    must("hello", buf.msg(MSG_RECEIVE, boot, 5_000_000_000))?;
    let child = match (buf.header().id, buf.descriptor(0)) {
        (HELLO, Some(d)) => d.value,
        _ => {
            println!("TEST FAIL {TEST}: td_child did not say hello");
            return Err(Failed);
        }
    };
    let mut cfg = [0u8; 24];
    for (i, w) in [role, id, arg].iter().enumerate() {
        cfg[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    let rights = [Descriptor::port(server, Disposition::CopySend)];
    let with: &[Descriptor] = if server != 0 { &rights } else { &[] };
    must("config", send(buf, child, CONFIG_CHILD, with, &cfg))?;
    must("inside", buf.msg(MSG_RECEIVE, boot, 5_000_000_000))?;
    check!(
        buf.header().id == INSIDE,
        "the child's call is inside its activation"
    );
    must("drop", baton_rt::ipc::cap_drop(child))?;
    must("drop", baton_rt::ipc::cap_drop(boot))?;
    Ok(())
}

/// Check 1.
fn self_call(buf: &mut IpcBuffer, base: &baton_rt::Stats) -> Result<(), Failed> {
    start_child(buf, SELF, 0, ECHO, 0)?;
    let now = await_stats(|s| at_base(s, base))?;
    check!(
        at_base(&now, base),
        "a task returning from main while another of its threads yields inside its own activation ends, and all it had is freed ({} threads, {} activations, {} ports)",
        now.threads,
        now.activations,
        now.ports
    );
    Ok(())
}

/// Checks 2 and 3: `id` is `SPIN_ACT` or `SLEEP` (`how` says which).
fn client_ends_then_server(
    buf: &mut IpcBuffer,
    base: &baton_rt::Stats,
    id: u64,
    how: &str,
) -> Result<(), Failed> {
    let s = must("start mig_server", start(buf, 4, false, false))?;
    start_child(buf, CLIENT, s, id, 3_000_000_000)?;
    // The child's own thread is gone; its other thread is in the server, whose own thread
    // is the server's only one.
    let now = await_stats(|st| st.threads == base.threads + 2)?;
    let word = if id == SLEEP { ASLEEP } else { SPINNING_NOW };
    let inside = info(buf, s, word);
    check!(
        now.threads == base.threads + 2 && inside == 1,
        "a client task ended while its thread {how} in a server (threads {} for {}; {inside} inside)",
        now.threads,
        base.threads + 2
    );
    must("exit", send(buf, s, EXIT, &[], &[]))?;
    must("drop", baton_rt::ipc::cap_drop(s))?;
    let now = await_stats(|st| at_base(st, base))?;
    check!(
        at_base(&now, base),
        "then the server exits: the thread that {how} in it ends with both tasks, nothing is left ({} threads, {} activations, {} ports)",
        now.threads,
        now.activations,
        now.ports
    );
    Ok(())
}

/// Check 4's first client: `NEST_SLEEP` to A (its activation calls B's `SLEEP`).
fn first_client(_: u64) {
    if let Ok(mut b) = IpcBuffer::new() {
        let r = raw_call(
            &mut b,
            SERVER.load(Ordering::Relaxed),
            NEST_SLEEP,
            &NESTED_NS.to_le_bytes(),
        );
        FIRST.store(r, Ordering::SeqCst);
    }
}

/// Check 4's second client: `SLEEP` to A, its request's data its sleep time and [`MARK`],
/// which the echo must bring back.
fn second_client(_: u64) {
    if let Ok(mut b) = IpcBuffer::new() {
        let mut data = [0u8; 16];
        data[..8].copy_from_slice(&SECOND_NS.to_le_bytes());
        data[8..].copy_from_slice(&MARK.to_le_bytes());
        let r = raw_call(&mut b, SERVER.load(Ordering::Relaxed), SLEEP, &data);
        SECOND_WORDS[0].store(word(b.data(), 0), Ordering::SeqCst);
        SECOND_WORDS[1].store(word(b.data(), 1), Ordering::SeqCst);
        SECOND.store(r, Ordering::SeqCst);
    }
}

fn helper(f: fn(u64)) -> Result<u64, Failed> {
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL {TEST}: out of helper stacks");
        return Err(Failed);
    };
    must("spawn", spawn(stack, f, 0))
}

/// Waits until `slot` holds a result (at most 5 s); the result.
fn await_result(slot: &AtomicU64) -> Result<u64, Failed> {
    for _ in 0..5_000 {
        let v = slot.load(Ordering::SeqCst);
        if v != u64::MAX {
            return Ok(v);
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
    }
    println!("TEST FAIL {TEST}: a client thread did not finish in 5 s");
    Err(Failed)
}

/// Check 4.
fn split_reply(buf: &mut IpcBuffer, base: &baton_rt::Stats, round: u32) -> Result<(), Failed> {
    let a = must("start mig_server", start(buf, 2, false, false))?;
    let b = must("start mig_server", start(buf, 2, false, false))?;
    must(
        "peer",
        send(
            buf,
            a,
            PEER,
            &[Descriptor::port(b, Disposition::CopySend)],
            &[],
        ),
    )?;
    let reply = REPLY.load(Ordering::Relaxed);
    must("sync", sync(buf, a, reply, 3_000_000_000))?;
    SERVER.store(a, Ordering::Relaxed);
    FIRST.store(u64::MAX, Ordering::SeqCst);
    SECOND.store(u64::MAX, Ordering::SeqCst);
    helper(first_client)?;
    await_info(
        buf,
        b,
        ASLEEP,
        1,
        "the first client's nested call to sleep in B",
    )?;
    // A's own thread terminates the activation the first call occupies (below the top of
    // its thread: the thread splits, the activation goes back to A's pool).
    must("kill act", send(buf, a, KILL_ACT, &[], &[]))?;
    must("sync", sync(buf, a, reply, 3_000_000_000))?;
    let first = await_result(&FIRST)?;
    // The second client takes that activation (the last given back is taken first) while
    // the first call's nested part still sleeps in B.
    helper(second_client)?;
    let second = await_result(&SECOND)?;
    let words = [
        SECOND_WORDS[0].load(Ordering::SeqCst),
        SECOND_WORDS[1].load(Ordering::SeqCst),
    ];
    let killed = info(buf, a, 3);
    check!(
        baton_abi::decode_result(first) == Err(Error::Aborted) && killed == 0,
        "round {round}: terminating the first client's activation while its call is nested in B aborts that call ({first:#x}; A says {killed:#x})"
    );
    check!(
        second == 0 && words == [SECOND_NS, MARK],
        "round {round}: the second client, served in the same activation meanwhile, gets its own reply (result {second:#x}, words {:#x} {:#x})",
        words[0],
        words[1]
    );
    for s in [a, b] {
        must("exit", send(buf, s, EXIT, &[], &[]))?;
        must("drop", baton_rt::ipc::cap_drop(s))?;
    }
    let now = await_stats(|st| at_base(st, base))?;
    check!(
        at_base(&now, base),
        "round {round}: nothing is left ({} threads, {} activations, {} ports)",
        now.threads,
        now.activations,
        now.ports
    );
    Ok(())
}

/// Check 5.
fn server_exits_in_call(buf: &mut IpcBuffer, base: &baton_rt::Stats) -> Result<(), Failed> {
    let s = must("start mig_server", start(buf, 2, false, false))?;
    // The server's activation exits on this thread: the server's own thread ends at once,
    // and the task lingers while this thread is still in it, unwinding.
    let r = raw_call(buf, s, DIE, &[]);
    must("drop", baton_rt::ipc::cap_drop(s))?;
    let now = await_stats(|st| at_base(st, base))?;
    check!(
        baton_abi::decode_result(r) == Err(Error::Aborted) && at_base(&now, base),
        "a server that exits inside a call lingers until the call has left it (Aborted: {r:#x}), then goes ({} threads, {} activations, {} ports)",
        now.threads,
        now.activations,
        now.ports
    );
    Ok(())
}

/// Check 6's clients: a 2 s `SLEEP` call to [`SERVER`]; the raw result in `FIRST` (`arg`
/// 0) or `SECOND` (1).
fn long_sleeper(arg: u64) {
    if let Ok(mut b) = IpcBuffer::new() {
        let r = raw_call(
            &mut b,
            SERVER.load(Ordering::Relaxed),
            SLEEP,
            &2_000_000_000u64.to_le_bytes(),
        );
        if arg == 0 { &FIRST } else { &SECOND }.store(r, Ordering::SeqCst);
    }
}

/// Check 6.
fn server_exits_with_caller_queued(
    buf: &mut IpcBuffer,
    base: &baton_rt::Stats,
) -> Result<(), Failed> {
    let s = must("start mig_server", start(buf, 1, false, false))?;
    SERVER.store(s, Ordering::Relaxed);
    FIRST.store(u64::MAX, Ordering::SeqCst);
    SECOND.store(u64::MAX, Ordering::SeqCst);
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL {TEST}: out of helper stacks");
        return Err(Failed);
    };
    // The server's one activation is taken by the first call, which sleeps there; the
    // second finds none free and waits on the port. (Polling the kernel's counters, with
    // yields: a call to the server would wait for the activation too.)
    let b0 = must("stats", stats())?;
    must("spawn", spawn(stack, long_sleeper, 0))?;
    let asleep = await_count(|st| st.blocks_sleep > b0.blocks_sleep)?;
    let b1 = must("stats", stats())?;
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL {TEST}: out of helper stacks");
        return Err(Failed);
    };
    must("spawn", spawn(stack, long_sleeper, 1))?;
    let queued = await_count(|st| st.blocks_ipc > b1.blocks_ipc)?;
    let t0 = baton_rt::clock_ns();
    must("exit", send(buf, s, EXIT, &[], &[]))?;
    must("drop", baton_rt::ipc::cap_drop(s))?;
    let first = await_result(&FIRST)?;
    let second = await_result(&SECOND)?;
    let took = (baton_rt::clock_ns() - t0) / 1_000_000;
    let now = await_stats(|st| at_base(st, base))?;
    check!(
        asleep
            && queued
            && baton_abi::decode_result(first) == Err(Error::Aborted)
            && baton_abi::decode_result(second) == Err(Error::DeadName)
            && took < 1_500
            && at_base(&now, base),
        "a server exiting with one call inside and one waiting for its activation: the first is aborted ({first:#x}), the second gets DeadName ({second:#x}), both at once ({took} ms), nothing is left ({} threads, {} activations, {} ports)",
        now.threads,
        now.activations,
        now.ports
    );
    Ok(())
}

/// Yields (never sleeps, which would count) until the kernel's counters satisfy `ok`, for
/// up to 3 s; whether they did.
fn await_count(ok: impl Fn(&baton_rt::Stats) -> bool) -> Result<bool, Failed> {
    let t0 = baton_rt::clock_ns();
    while baton_rt::clock_ns() - t0 < 3_000_000_000 {
        if ok(&must("stats", stats())?) {
            return Ok(true);
        }
        baton_rt::sys::yield_now();
    }
    Ok(false)
}
