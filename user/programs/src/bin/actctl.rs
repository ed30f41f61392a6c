//! `actctl`: control of activations (seed 001 section 5) from user space, with two
//! `mig_server` tasks A and B (A's peer is B).
//!
//! Checks, printing `ok: <what>` for each: an alert on a client thread deep in A → B
//! propagates up to B (which polls) and to A; alerts are off by default and end a kernel
//! wait once on; a server suspends its own activation while a client is inside and reads
//! its registers; a client suspends its own thread's home activation while the thread is
//! in a server, reads and sets its registers once it is back, and resumes it; terminating
//! a client thread deep in A → B returns at once, B sees an alert, and the thread ends when
//! it comes home (the split); a scheduling lock stops a server from changing its caller's
//! priority; the same control through capabilities: a thread port alerts, suspends and
//! resumes its home activation, and an activation port (`act_port`) lets the server ask
//! which thread occupies its activation (the client's own), suspend, resume, alert and
//! terminate it (the client's call is aborted); and threads, activations, ports, names and
//! messages return to the baseline.
//!
//! Verdict: `TEST PASS actctl` or `TEST FAIL actctl: ...`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_rt::check::Failed;
use baton_rt::ipc::{
    port_allocate, Descriptor, Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::kobject::{
    self, call as kcall, thread_port, StateOf, THREAD_ALERT, THREAD_RESUME, THREAD_SET_STATE,
    THREAD_SUSPEND, THREAD_TERMINATE,
};
use baton_rt::migrate::{self, Act};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{println, stats, Error, FOREVER};

#[path = "../mig_proto.rs"]
mod mig_proto;

use mig_proto::*;

baton_rt::entry!(main);

const TEST: &str = "actctl";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

static STACKS: StackPool<48, 16384> = StackPool::new();
/// A's send right, and our reply port (shared by the task's threads).
static A: AtomicU64 = AtomicU64::new(0);
static REPLY: AtomicU64 = AtomicU64::new(0);
/// What a helper thread got: its result word and the raw `ipc_msg` result.
static GOT: AtomicU64 = AtomicU64::new(0);
static RAW: AtomicU64 = AtomicU64::new(0);
static DONE: AtomicU32 = AtomicU32::new(0);
/// Set by a sleeping helper just before it sleeps.
static ASLEEP: AtomicU32 = AtomicU32::new(0);
/// Set by the main thread once it has sent the alert [`quiet_sleeper`] waits for.
static ALERT_SENT: AtomicU32 = AtomicU32::new(0);

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// A call through `buf` of `id` with `data` to `to`; the raw `ipc_msg` result.
fn raw_call(buf: &mut IpcBuffer, to: u64, id: u64, data: &[u8]) -> u64 {
    mig_proto::raw_call(buf, to, REPLY.load(Ordering::Relaxed), id, data)
}

/// Whether [`deep_waiter`]'s home activation saw an alert once its call came back: 1 yes,
/// 0 no, `u64::MAX` before.
static HOME_SAW: AtomicU64 = AtomicU64::new(u64::MAX);

/// Helper: a NEST2 call to A whose inner call is B's WAIT_ALERT; stores B's answer and
/// whether A saw an alert (`GOT` = how * 16 + a_saw) and the raw result; then, back home,
/// turns alerts on and stores whether its home activation, the bottom of the chain that
/// was alerted, has one pending ([`HOME_SAW`]).
fn deep_waiter(_: u64) {
    if let Ok(mut b) = IpcBuffer::new() {
        DEEP_PAGE.store(b.bytes().as_ptr() as u64, Ordering::SeqCst);
        let r = raw_call(
            &mut b,
            A.load(Ordering::Relaxed),
            NEST2,
            &WAIT_ALERT.to_le_bytes(),
        );
        RAW.store(r, Ordering::SeqCst);
        GOT.store(word(b.data(), 0) * 16 + word(b.data(), 1), Ordering::SeqCst);
        let _ = migrate::alert_enable(true);
        HOME_SAW.store(u64::from(migrate::alert_test()), Ordering::SeqCst);
    }
    DONE.fetch_add(1, Ordering::SeqCst);
}

/// The IPC buffer page of the last [`deep_waiter`]: a thread terminated while it holds one
/// never drops it, so the main thread unmaps it (every mapping costs the kernel an entry
/// and an object: a page left behind per round would show as kernel heap growth).
static DEEP_PAGE: AtomicU64 = AtomicU64::new(0);

/// Helper: sleeps 5 s with alerts on; stores the raw result of the sleep.
fn alert_sleeper(_: u64) {
    let _ = migrate::alert_enable(true);
    ASLEEP.store(1, Ordering::SeqCst);
    let r = baton_rt::sleep_ns(5_000_000_000);
    RAW.store(r.err().map_or(0, |e| e as u64), Ordering::SeqCst);
    DONE.fetch_add(1, Ordering::SeqCst);
}

/// Helper: sleeps 50 ms with alerts off, then (once the main thread says it has sent its
/// alert, which a loaded host may deliver after the sleep) turns them on and polls.
fn quiet_sleeper(_: u64) {
    ASLEEP.store(1, Ordering::SeqCst);
    let r = baton_rt::sleep_ns(50_000_000);
    while ALERT_SENT.load(Ordering::SeqCst) == 0 {
        let _ = baton_rt::sleep_ns(1_000_000);
    }
    let _ = migrate::alert_enable(true);
    let seen = migrate::alert_test();
    RAW.store(r.err().map_or(0, |e| e as u64), Ordering::SeqCst);
    GOT.store(u64::from(seen), Ordering::SeqCst);
    DONE.fetch_add(1, Ordering::SeqCst);
}

/// Helper: one `SPIN_ACT` of a second in A (A counts it in `INFO`'s [`SPINNING`] while it
/// spins); the raw result. The steps that use it must act while it still spins (suspend
/// it there, or its home activation): the spin is on the clock, which runs on while a
/// loaded host leaves the guest's CPU waiting, so 200 ms was outrun once (the thread was
/// home before the suspension, and the test failed).
fn spin_caller(ns: u64) {
    spin_call(if ns == 0 { 1_000_000_000 } else { ns }, false);
}

/// Helper: as [`spin_caller`], but the spin ends as soon as its activation in the server is
/// alerted, at most 10 s (the steps whose server thread alerts or terminates it).
fn alertable_spin_caller(_: u64) {
    spin_call(10_000_000_000, true);
}

/// The call of [`spin_caller`] and [`alertable_spin_caller`].
fn spin_call(ns: u64, alertable: bool) {
    if let Ok(mut b) = IpcBuffer::new() {
        let mut data = [0u8; 16];
        data[..8].copy_from_slice(&ns.to_le_bytes());
        data[8..].copy_from_slice(&u64::from(alertable).to_le_bytes());
        let r = raw_call(&mut b, A.load(Ordering::Relaxed), SPIN_ACT, &data);
        RAW.store(r, Ordering::SeqCst);
    }
    DONE.fetch_add(1, Ordering::SeqCst);
}

/// What [`state_getter`] got: the error code of its `act_get_state`, 0 on success
/// (`u64::MAX` until it returns).
static STATE_GOT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Helper: reads the state of thread `w`'s home activation (waiting until `w` stops there)
/// and stores the outcome in [`STATE_GOT`]. Touches none of the statics [`helper`] resets.
fn state_getter(w: u64) {
    let r = match migrate::get_state(Act::Thread(w)) {
        Ok(_) => 0,
        Err(e) => e as u64,
    };
    STATE_GOT.store(r, Ordering::SeqCst);
}

/// Helper: receives on `port`, which nothing is sent to, without a timeout; stores the
/// call's error code in [`RAW`] (0 for a message).
fn forever_receiver(port: u64) {
    let r = match IpcBuffer::new() {
        Ok(mut buf) => {
            ASLEEP.store(1, Ordering::SeqCst);
            buf.msg(MSG_RECEIVE, port, FOREVER)
        }
        Err(e) => Err(e),
    };
    RAW.store(r.map_or_else(|e| e as u64, |()| 0), Ordering::SeqCst);
    DONE.store(1, Ordering::SeqCst);
}

/// A thread blocked in a receive without a timeout is suspended and its state asked for:
/// the receive is cut short at once (Mach's `thread_abort_safely`), the registers can be
/// read and set, and when resumed the call returns `Interrupted`.
fn interrupted_receive() -> Result<(), Failed> {
    let port = must("port", port_allocate(0))?;
    let w = helper(forever_receiver, port)?;
    await_asleep()?;
    // Let it block (a receive on an empty port blocks at once).
    must("sleep", baton_rt::sleep_ns(5_000_000))?;
    must("suspend", migrate::suspend(Act::Thread(w), true))?;
    let t0 = baton_rt::clock_ns();
    let regs = migrate::get_state(Act::Thread(w));
    let waited = baton_rt::clock_ns() - t0;
    let read = regs.is_ok() && DONE.load(Ordering::SeqCst) == 0;
    must("resume", migrate::suspend(Act::Thread(w), false))?;
    join(2_000)?;
    must("drop port", baton_rt::ipc::cap_drop(port))?;
    check!(
        read,
        "act_get_state on a thread blocked in a receive without a timeout answers at once ({} us)",
        waited / 1000
    );
    check!(
        RAW.load(Ordering::SeqCst) == Error::Interrupted as u64,
        "that receive returns Interrupted when the thread is resumed (got {:#x})",
        RAW.load(Ordering::SeqCst)
    );
    Ok(())
}

/// Helper: a `NEST_SLEEP` call to A of 400 ms in B; the raw result.
fn nest_sleeper(_: u64) {
    if let Ok(mut b) = IpcBuffer::new() {
        let r = raw_call(
            &mut b,
            A.load(Ordering::Relaxed),
            NEST_SLEEP,
            &400_000_000u64.to_le_bytes(),
        );
        RAW.store(r, Ordering::SeqCst);
    }
    DONE.fetch_add(1, Ordering::SeqCst);
}

/// Helper: locks its scheduling state, then asks A to lower its priority.
fn locked_caller(_: u64) {
    if let Ok(mut b) = IpcBuffer::new() {
        let locked = migrate::sched_lock();
        let r = raw_call(&mut b, A.load(Ordering::Relaxed), SETPRIO, &[]);
        GOT.store(
            if locked.is_ok() && r == 0 {
                word(b.data(), 0)
            } else {
                u64::MAX
            },
            Ordering::SeqCst,
        );
    }
    DONE.fetch_add(1, Ordering::SeqCst);
}

/// Starts `f(arg)` on a new thread; its id.
fn helper(f: fn(u64), arg: u64) -> Result<u64, Failed> {
    DONE.store(0, Ordering::SeqCst);
    ASLEEP.store(0, Ordering::SeqCst);
    ALERT_SENT.store(0, Ordering::SeqCst);
    GOT.store(0, Ordering::SeqCst);
    RAW.store(u64::MAX, Ordering::SeqCst);
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL {TEST}: out of helper stacks");
        return Err(Failed);
    };
    must("spawn", spawn(stack, f, arg))
}

/// Starts a helper thread running `f(arg)` without resetting what [`helper`] resets (another
/// helper may be running).
fn spawn_plain(f: fn(u64), arg: u64) -> Result<u64, Failed> {
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL {TEST}: out of helper stacks");
        return Err(Failed);
    };
    must("spawn", spawn(stack, f, arg))
}

/// Waits until the helper says it is done, at most `ms` milliseconds; the time it took.
fn join(ms: u64) -> Result<u64, Failed> {
    let t0 = baton_rt::clock_ns();
    while DONE.load(Ordering::SeqCst) == 0 {
        if baton_rt::clock_ns() - t0 > ms * 1_000_000 {
            println!("TEST FAIL {TEST}: a helper thread did not finish in {ms} ms");
            return Err(Failed);
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
    }
    Ok(baton_rt::clock_ns() - t0)
}

/// `INFO`'s word: calls spinning in the server now.
const SPINNING: usize = 5;
/// `INFO`'s word: `WAIT_ALERT` calls waiting for an alert in the server now.
const AWAITING_ALERT: usize = 6;

/// Waits until one `WAIT_ALERT` call waits for an alert in `b` (see [`await_info`]).
fn await_alert_wait(buf: &mut IpcBuffer, b: u64) -> Result<(), Failed> {
    await_info(buf, b, AWAITING_ALERT, "the helper to wait in B", |n| {
        n == 1
    })
}

/// How long the test waits for one of its threads to get somewhere before it fails: 10 s on
/// the clock, for what takes milliseconds alone and well under a second on a loaded host.
const PATIENCE_MS: u64 = 10_000;

/// [`baton_rt::check::poll_until`] for this test.
fn poll_until(limit_ms: u64, done: impl FnMut() -> bool) -> Result<bool, Failed> {
    baton_rt::check::poll_until(TEST, limit_ms, done)
}

/// Waits (up to [`PATIENCE_MS`], then fails the test) until a helper has set [`ASLEEP`]: it
/// is about to sleep (a kernel wait honours an alert that comes before it, so the few
/// instructions in between change no outcome).
fn await_asleep() -> Result<(), Failed> {
    if poll_until(PATIENCE_MS, || ASLEEP.load(Ordering::SeqCst) != 0)? {
        return Ok(());
    }
    println!("TEST FAIL {TEST}: waited {PATIENCE_MS} ms for a helper to sleep");
    Err(Failed)
}

/// Waits (up to [`PATIENCE_MS`], then fails the test) until word `i` of `server`'s `INFO` satisfies
/// `ok`. The test's waits for the other threads are these, not fixed sleeps, which a loaded
/// host outran.
fn await_info(
    buf: &mut IpcBuffer,
    server: u64,
    i: usize,
    what: &str,
    ok: impl Fn(u64) -> bool,
) -> Result<(), Failed> {
    let reply = REPLY.load(Ordering::Relaxed);
    if poll_until(PATIENCE_MS, || ok(info(buf, server, reply, i)))? {
        return Ok(());
    }
    println!("TEST FAIL {TEST}: waited {PATIENCE_MS} ms for {what}");
    Err(Failed)
}

/// Waits until `server`'s own thread has handled every one-way message sent to it before
/// (`mig_proto::sync`): its peer is set, and what `INFO` says of its control operations is
/// theirs.
fn control_done(buf: &mut IpcBuffer, server: u64) -> Result<(), Failed> {
    must(
        "sync with the server's thread",
        sync(buf, server, REPLY.load(Ordering::Relaxed), 3_000_000_000),
    )
}

/// Rounds of every check (see `migrate`'s: the heap may grow in at most one round after
/// the first).
const ROUNDS: usize = 3;

fn run() -> Result<(), Failed> {
    let base = must("stats", stats())?;
    let mut heap = [0u64; ROUNDS];
    for (round, h) in heap.iter_mut().enumerate() {
        println!("actctl: round {round}");
        one_round(&base)?;
        *h = must("stats", stats())?.heap_used;
    }
    let growths = heap.windows(2).filter(|w| w[1] > w[0]).count();
    check!(
        growths <= 1,
        "the kernel heap does not grow round after round ({:?} bytes after each)",
        heap
    );
    interrupted_receive()?;
    fuzz(&base)
}

/// Random arguments to every activation call (but suspending the calling thread, which
/// would stop it for good): each returns, nothing is left behind.
fn fuzz(base: &baton_rt::Stats) -> Result<(), Failed> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let calls = [40u64, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51];
    let mut errors = 0u32;
    for _ in 0..3000 {
        let call = calls[(next() % calls.len() as u64) as usize];
        let mut args = [0u64; 6];
        for a in args.iter_mut() {
            *a = match next() % 4 {
                0 => next() % 4,
                1 => next() % 64,
                2 => ((next() % 8) << 32) | (next() % 8),
                _ => next(),
            };
        }
        if call == 47 && args[0] == 0 && args[1] == 0 && args[2] == 1 {
            continue;
        }
        if call == 46 {
            // Leave alerts as they are (off) in the calling activation.
            args[0] = 0;
        }
        // SAFETY: no call given here writes memory except get_state through a random
        // pointer, which the kernel checks (BadAddress) — and it needs a suspended target,
        // which none of these ids is.
        let r = unsafe { baton_rt::raw::raw_syscall(call, args) };
        if baton_abi::decode_result(r).is_err() {
            errors += 1;
        }
    }
    let now = must("stats", stats())?;
    check!(
        errors > 1000
            && now.threads == base.threads
            && now.activations == base.activations
            && now.ports == base.ports,
        "3000 activation calls with random arguments return ({errors} errors) and leave nothing behind"
    );
    Ok(())
}

fn one_round(base: &baton_rt::Stats) -> Result<(), Failed> {
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    REPLY.store(must("reply port", port_allocate(0))?, Ordering::Relaxed);
    let a = must("start mig_server", start(&mut buf, 4, false, false))?;
    let b = must("start mig_server", start(&mut buf, 4, false, false))?;
    A.store(a, Ordering::Relaxed);
    must(
        "peer",
        send(
            &mut buf,
            a,
            PEER,
            &[Descriptor::port(b, Disposition::CopySend)],
            &[],
        ),
    )?;
    control_done(&mut buf, a)?;

    // 1. An alert on a thread deep in A → B reaches B (polling) and A, and the alerted
    //    activation itself: the thread's home, at the bottom of the chain, not its top.
    HOME_SAW.store(u64::MAX, Ordering::SeqCst);
    let x = helper(deep_waiter, 0)?;
    await_alert_wait(&mut buf, b)?;
    must("alert", migrate::alert(Act::Thread(x)))?;
    let took = join(2_000)?;
    let got = GOT.load(Ordering::SeqCst);
    check!(
        RAW.load(Ordering::SeqCst) == 0 && got >> 4 != 0 && got & 1 == 1,
        "an alert on a client thread deep in A -> B propagates up the chain (B saw it {}, A saw it {}) in {} ms",
        if got >> 4 == 1 { "polling" } else { "in a sleep" },
        got & 1,
        took / 1_000_000
    );
    let home = HOME_SAW.load(Ordering::SeqCst);
    check!(
        home == 1,
        "the alerted activation itself, the client's home below A and B, sees the alert once its call is back ({home})"
    );

    // 2. Alerts end kernel waits only where they are on.
    let y = helper(alert_sleeper, 0)?;
    await_asleep()?;
    must("alert", migrate::alert(Act::Thread(y)))?;
    let took = join(2_000)?;
    check!(
        RAW.load(Ordering::SeqCst) == Error::Interrupted as u64 && took < 1_000_000_000,
        "with alerts on, an alert ends a 5 s sleep at once (Interrupted)"
    );
    let z = helper(quiet_sleeper, 0)?;
    await_asleep()?;
    must("alert", migrate::alert(Act::Thread(z)))?;
    ALERT_SENT.store(1, Ordering::SeqCst);
    join(2_000)?;
    check!(
        RAW.load(Ordering::SeqCst) == 0 && GOT.load(Ordering::SeqCst) == 1,
        "alerts are off by default: the sleep runs its course, and the alert is seen once turned on"
    );

    // 3. A server suspends its own activation while a client is inside, and reads it.
    helper(spin_caller, 0)?;
    await_info(&mut buf, a, SPINNING, "the helper to spin in A", |n| n == 1)?;
    must("suspend act", send(&mut buf, a, SUSPEND_ACT, &[], &[]))?;
    join(3_000)?;
    control_done(&mut buf, a)?;
    check!(
        RAW.load(Ordering::SeqCst) == 0,
        "the call in the suspended server activation completes after its resume"
    );
    must(
        "info",
        buf.set(
            MsgHeader {
                bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
                dest: a,
                reply: REPLY.load(Ordering::Relaxed),
                id: INFO,
                ..MsgHeader::default()
            },
            &[],
            &[],
        ),
    )?;
    must(
        "info",
        buf.msg(
            MSG_SEND | MSG_RECEIVE,
            REPLY.load(Ordering::Relaxed),
            FOREVER,
        ),
    )?;
    let rip = word(buf.data(), 1);
    check!(
        rip > 0 && rip < 0x8000_0000_0000,
        "a server suspends its activation while a client is inside and reads its registers (rip {rip:#x})"
    );

    // 4. A client suspends its thread's home activation while the thread is in a server:
    //    the server is not stopped; get_state waits for the thread to come home. Through
    //    the thread's port (THREAD_GET_STATE) it waits the same way.
    let w = helper(spin_caller, 0)?;
    let wp = must("thread port", thread_port(w))?;
    let reply = REPLY.load(Ordering::Relaxed);
    check!(
        kobject::get_state(&mut buf, wp, reply, StateOf::Thread) == Err(Error::InvalidArgument),
        "THREAD_GET_STATE on a thread that is not suspended is refused"
    );
    await_info(&mut buf, a, SPINNING, "the helper to spin in A", |n| n == 1)?;
    must("suspend", migrate::suspend(Act::Thread(w), true))?;
    let t0 = baton_rt::clock_ns();
    let mut regs = must(
        "get state (port)",
        kobject::get_state(&mut buf, wp, reply, StateOf::Thread),
    )?;
    let waited = baton_rt::clock_ns() - t0;
    check!(
        regs.rax == 0 && waited >= 5_000_000 && DONE.load(Ordering::SeqCst) == 0,
        "suspending a client's home activation lets the server finish; THREAD_GET_STATE waited {} ms for the thread to come home",
        waited / 1_000_000
    );
    let by_id = must("get state", migrate::get_state(Act::Thread(w)))?;
    check!(
        by_id.to_words() == regs.to_words(),
        "act_get_state reads the registers THREAD_GET_STATE read"
    );
    check!(
        kcall(&mut buf, wp, reply, THREAD_SET_STATE, &[1, 2, 3], FOREVER).map(|_| ())
            == Err(Error::InvalidArgument),
        "THREAD_SET_STATE with fewer words than the registers is refused"
    );
    regs.rax = 0x1233;
    must(
        "set state (port)",
        kobject::set_state(&mut buf, wp, reply, StateOf::Thread, &regs),
    )?;
    let seen = must("get state", migrate::get_state(Act::Thread(w)))?;
    check!(
        seen.rax == 0x1233,
        "act_get_state sees what THREAD_SET_STATE set"
    );
    regs.rax = 0x1234;
    must("set state", migrate::set_state(Act::Thread(w), &regs))?;
    must("drop thread port", baton_rt::ipc::cap_drop(wp))?;
    must("resume", migrate::suspend(Act::Thread(w), false))?;
    join(2_000)?;
    check!(
        RAW.load(Ordering::SeqCst) == 0x1234,
        "set_state on the stopped activation changed what its call returned"
    );
    check!(
        migrate::suspend(Act::Thread(w), false) == Err(Error::InvalidArgument)
            || migrate::suspend(Act::Thread(w), false) == Err(Error::NotFound),
        "resuming what is not suspended is refused"
    );
    check!(
        migrate::get_state(Act::Thread(0)) == Err(Error::InvalidArgument),
        "get_state on the calling thread is refused"
    );

    // 4b. A thread waiting for a suspended activation's state is woken when the activation
    //     is resumed before its thread comes back: its call fails at once
    //     (InvalidArgument, the activation is no longer suspended) instead of waiting for
    //     a stop that will never come.
    // (A second's spin: the steps below must all happen while the thread is in A, and a
    // loaded host runs the test's threads late.)
    let w = helper(spin_caller, 1_000_000_000)?;
    await_info(&mut buf, a, SPINNING, "the caller to spin in A", |n| n == 1)?;
    must("suspend", migrate::suspend(Act::Thread(w), true))?;
    let waits = must("stats", stats())?.blocks_internal;
    STATE_GOT.store(u64::MAX, Ordering::SeqCst);
    spawn_plain(state_getter, w)?;
    let waiting = poll_until(PATIENCE_MS, || {
        stats().is_ok_and(|s| s.blocks_internal > waits)
    })?;
    must("resume", migrate::suspend(Act::Thread(w), false))?;
    poll_until(PATIENCE_MS, || STATE_GOT.load(Ordering::SeqCst) != u64::MAX)?;
    let got = STATE_GOT.load(Ordering::SeqCst);
    let still_in = DONE.load(Ordering::SeqCst) == 0;
    check!(
        waiting && got == Error::InvalidArgument as u64 && still_in,
        "resuming the activation wakes a thread waiting for its state; its act_get_state fails (InvalidArgument) while the thread is still in the server (waiting {waiting}, got {got:#x}, still inside {still_in})"
    );
    join(2_000)?;

    // 5. Terminating a client thread deep in A -> B: immediate; B gets an alert; the
    //    thread ends when it comes home.
    let v = helper(deep_waiter, 0)?;
    await_alert_wait(&mut buf, b)?;
    let tp = must("thread port", thread_port(v))?;
    let t0 = baton_rt::clock_ns();
    must(
        "terminate",
        kcall(
            &mut buf,
            tp,
            REPLY.load(Ordering::Relaxed),
            THREAD_TERMINATE,
            &[],
            FOREVER,
        )
        .map(|_| ()),
    )?;
    let answered = baton_rt::clock_ns() - t0;
    let gone = poll_until(PATIENCE_MS, || {
        baton_rt::sys::thread_cpu_ns(v) == Err(Error::NotFound)
    })?;
    let ended = baton_rt::clock_ns() - t0;
    must("drop thread port", baton_rt::ipc::cap_drop(tp))?;
    if gone {
        let page = DEEP_PAGE.swap(0, Ordering::SeqCst);
        // SAFETY: its thread is gone; nothing else refers to the page.
        must("unmap the terminated thread's buffer", unsafe {
            baton_rt::mem_unmap(page, 4096)
        })?;
    }
    check!(
        gone && DONE.load(Ordering::SeqCst) == 0 && answered < ended && ended < 2_000_000_000,
        "terminating a client thread deep in A -> B answers at once; the part in the servers goes on with an alert and the thread ends when it comes home ({} ms)",
        ended / 1_000_000
    );

    // 6. A scheduling lock keeps a server from changing its caller's priority.
    helper(locked_caller, 0)?;
    join(2_000)?;
    check!(
        GOT.load(Ordering::SeqCst) == Error::Denied as u64,
        "after act_sched_lock, a server's set_priority on its caller's thread is Denied"
    );
    let r = raw_call(&mut buf, a, SETPRIO, &[]);
    check!(
        r == 0 && word(buf.data(), 0) == 0,
        "without the lock it may"
    );
    must(
        "priority back",
        baton_rt::set_priority(0, baton_abi::PRIORITY_DEFAULT),
    )?;

    // 7. The thread port is the home activation's control capability: alert, suspend and
    //    resume through it.
    let y = helper(alert_sleeper, 0)?;
    await_asleep()?;
    let tp = must("thread port", thread_port(y))?;
    let reply = REPLY.load(Ordering::Relaxed);
    must(
        "alert through the port",
        kcall(&mut buf, tp, reply, THREAD_ALERT, &[], FOREVER).map(|_| ()),
    )?;
    join(2_000)?;
    must("drop thread port", baton_rt::ipc::cap_drop(tp))?;
    check!(
        RAW.load(Ordering::SeqCst) == Error::Interrupted as u64,
        "THREAD_ALERT through a thread port ends the thread's sleep (Interrupted)"
    );
    let w = helper(spin_caller, 0)?;
    await_info(&mut buf, a, SPINNING, "the helper to spin in A", |n| n == 1)?;
    let tp = must("thread port", thread_port(w))?;
    let port_call = |buf: &mut IpcBuffer, id| kcall(buf, tp, reply, id, &[], FOREVER).map(|_| ());
    // Not suspended: a resume is refused.
    let refused = port_call(&mut buf, THREAD_RESUME);
    must(
        "suspend through the port",
        port_call(&mut buf, THREAD_SUSPEND),
    )?;
    must("suspend again", port_call(&mut buf, THREAD_SUSPEND))?;
    // The spin in the server runs its course; the thread then stops at home, which
    // act_get_state waits for.
    let stopped = migrate::get_state(Act::Thread(w)).is_ok() && DONE.load(Ordering::SeqCst) == 0;
    must(
        "resume through the port",
        port_call(&mut buf, THREAD_RESUME),
    )?;
    // Still suspended once: still stopped there (act_get_state answers at once).
    let still = migrate::get_state(Act::Thread(w)).is_ok() && DONE.load(Ordering::SeqCst) == 0;
    must("resume again", port_call(&mut buf, THREAD_RESUME))?;
    join(2_000)?;
    must("drop thread port", baton_rt::ipc::cap_drop(tp))?;
    check!(
        refused == Err(Error::InvalidArgument),
        "THREAD_RESUME through a thread port is refused while the thread is not suspended"
    );
    check!(
        stopped && still && RAW.load(Ordering::SeqCst) == 0,
        "THREAD_SUSPEND (twice) through a thread port stops the thread when it comes home from the server; it goes on after the second THREAD_RESUME"
    );

    // 8. An activation port is the pool activation's control capability: the server's own
    //    thread asks about the activation a client occupies, suspends it, reads its
    //    registers, resumes and alerts it through its port; then terminates it, which
    //    aborts the client's call at once.
    let h = helper(alertable_spin_caller, 0)?;
    await_info(&mut buf, a, SPINNING, "the helper to spin in A", |n| n == 1)?;
    must("port act", send(&mut buf, a, PORT_ACT, &[], &[]))?;
    join(3_000)?;
    control_done(&mut buf, a)?;
    let spun = RAW.load(Ordering::SeqCst);
    let k = helper(alertable_spin_caller, 0)?;
    await_info(&mut buf, a, SPINNING, "the helper to spin in A", |n| n == 1)?;
    must("kill act", send(&mut buf, a, KILL_ACT, &[], &[]))?;
    join(3_000)?;
    control_done(&mut buf, a)?;
    let killed = RAW.load(Ordering::SeqCst);
    let r = raw_call(&mut buf, a, INFO, &[]);
    let (occupant, kill) = (word(buf.data(), 2), word(buf.data(), 3));
    check!(
        spun == 0 && r == 0 && occupant == h,
        "through an activation port the server sees its activation occupied by the client's own thread ({occupant:#x}, helper {h:#x}), suspends it, reads its registers (ACT_GET_STATE waits for the thread to stop there), resumes and alerts it; the call completes"
    );
    check!(
        baton_abi::decode_result(killed) == Err(Error::Aborted) && kill == 0,
        "ACT_TERMINATE through the activation port aborts the client's call in it (result {killed:#x}, helper {k:#x}); the activation is free again and refuses control (server says {kill:#x})"
    );
    check!(
        baton_rt::kobject::act_port(0) == Err(Error::NotFound)
            && baton_rt::kobject::act_port(0x1_0000_0001) == Err(Error::NotFound),
        "act_port of an activation that is not the caller's is NotFound"
    );

    // 9. The split (seed 001 section 5): a client's call is in A, whose activation called B
    //    (sleeping 400 ms there); A's own thread terminates its activation through the
    //    activation's port. The part below (the client) gets Aborted at once, while the
    //    part above is still asleep in B; that part ends when it comes back.
    //    B's count of sleeping calls tells when the helper's call sleeps there: first
    //    until the sleeps of earlier steps' threads in B are over, then until the helper's
    //    begins.
    await_info(&mut buf, b, 4, "earlier sleeps in B to end", |n| n == 0)?;
    helper(nest_sleeper, 0)?;
    await_info(&mut buf, b, 4, "the helper to sleep in B", |n| n == 1)?;
    must("kill act", send(&mut buf, a, KILL_ACT, &[], &[]))?;
    let joined = join(3_000)? / 1_000_000;
    control_done(&mut buf, a)?;
    let raw = RAW.load(Ordering::SeqCst);
    let r = raw_call(&mut buf, b, INFO, &[]);
    let asleep = word(buf.data(), 4);
    let r2 = raw_call(&mut buf, a, INFO, &[]);
    let kill = word(buf.data(), 3);
    check!(
        baton_abi::decode_result(raw) == Err(Error::Aborted) && r == 0 && r2 == 0 && asleep == 1 && kill == 0,
        "terminating a server activation below the top splits the thread: the client's call is aborted at once ({raw:#x} after {joined} ms) while the part above still sleeps in B ({asleep} asleep; A says {kill:#x})"
    );
    // The part above wakes in B, returns into the terminated activation and ends.
    poll_until(PATIENCE_MS, || {
        let _ = raw_call(&mut buf, b, INFO, &[]);
        word(buf.data(), 4) == 0
    })?;
    check!(
        word(buf.data(), 4) == 0,
        "the part above finishes its call in B"
    );

    // 10. Everything back.
    for s in [a, b] {
        must("exit", send(&mut buf, s, EXIT, &[], &[]))?;
        let _ = baton_rt::ipc::cap_drop(s);
    }
    must(
        "drop reply",
        baton_rt::ipc::cap_drop(REPLY.load(Ordering::Relaxed)),
    )?;
    let mut now = must("stats", stats())?;
    poll_until(3_000, || {
        if let Ok(s) = stats() {
            now = s;
        }
        now.activations == base.activations
            && now.ports == base.ports
            && now.threads == base.threads
    })?;
    check!(
        now.threads == base.threads
            && now.activations == base.activations
            && now.ports == base.ports
            && now.names == base.names
            && now.messages_queued == base.messages_queued,
        "threads, activations, ports, names and queued messages back to the baseline ({} {} {} {} {})",
        now.threads,
        now.activations,
        now.ports,
        now.names,
        now.messages_queued
    );
    Ok(())
}
