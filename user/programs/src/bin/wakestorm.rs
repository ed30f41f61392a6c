//! `wakestorm`: every way a thread is woken, at once, on two CPUs, with short timeouts.
//!
//! A thread is made ready by its timer (a receive, `wait` or `sleep` timing out), by a
//! message, by `wake`, by an alert, by a resume, and is ended by its task's end or by
//! `THREAD_TERMINATE`. The kernel must make it ready once per wait whatever the mix: a
//! thread put in a run queue twice, or queued while it runs or after it ended, runs on two
//! CPUs at once or is resumed after it was freed (the machine hangs or stops). This test
//! mixes them for a few hundred milliseconds:
//!
//! - four waiter threads of this task wait in turn in a receive on a port, a `wait` on a
//!   word and a `sleep`, each with a timeout of 10–70 µs, while a poker thread sends to the
//!   port and wakes the word;
//! - the main thread suspends a waiter through its thread port, reads its registers (the
//!   kernel stops it at once if it waits, or when it next leaves the kernel), alerts it and
//!   resumes it; every eighth round it terminates one and starts another;
//! - each round starts a `wakestorm_child` task, whose five threads wait the same way while
//!   its main thread wakes their word; the main thread sends to the child's port and then
//!   ends the child through its task port after 0–3 ms (every third child instead ends by
//!   itself, returning from `main` with its threads still waiting).
//!
//! The kernel refuses and reports any wake of a thread that is not blocked, and any timer
//! entry a thread no longer holds (`[kernel] wake refused`, `[kernel] stale timer`); the
//! test (`xtask`) requires that the log has neither. Here: every round completes, and at
//! the end the threads and ports are back to what they were. Verdict: `TEST PASS
//! wakestorm` or `TEST FAIL wakestorm: ...`.
#![no_std]
#![no_main]

#[path = "../wait_mix.rs"]
mod wait_mix;

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use baton_abi::kobject::{THREAD_ALERT, THREAD_RESUME, THREAD_SUSPEND, THREAD_TERMINATE};
use baton_rt::check::Failed;
use baton_rt::ipc::Disposition;
use baton_rt::ipc::{port_allocate, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND};
use baton_rt::kobject::{self, StateOf};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{println, stats, Error};

baton_rt::entry!(main);

const TEST: &str = "wakestorm";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// Rounds (one child task each).
const ROUNDS: u64 = 120;
/// Waiter threads of this task.
const WAITERS: usize = 4;

static STACKS: StackPool<24, 16384> = StackPool::new();
/// The waiters' word, woken by the poker.
static WORD: AtomicU32 = AtomicU32::new(0);
/// The waiters' port, sent to by the poker.
static PORT: AtomicU64 = AtomicU64::new(0);
/// Set at the end: the waiters and the poker return.
static STOP: AtomicBool = AtomicBool::new(false);
/// The waiters' thread ids (0: none there).
static IDS: [AtomicU64; WAITERS] = [const { AtomicU64::new(0) }; WAITERS];
/// Threads of this task running (waiters and poker).
static LIVE: AtomicU64 = AtomicU64::new(0);

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn run() -> Result<(), Failed> {
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let reply = must("reply port", port_allocate(0))?;
    let base = must("stats", stats())?;
    PORT.store(must("port", port_allocate(0))?, Ordering::Relaxed);
    for slot in 0..WAITERS {
        start_waiter(slot)?;
    }
    let stack = STACKS.take().ok_or(Failed)?;
    LIVE.fetch_add(1, Ordering::Relaxed);
    must("poker", spawn(stack, poker, 0))?;

    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..ROUNDS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let boot = must("boot port", port_allocate(0))?;
        let child = must("spawn", baton_rt::spawn_with("wakestorm_child", boot))?;
        let task_port = must("task port", kobject::task_port(child))?;
        // Its port, unless it is already ending (a hello lost is no error here).
        let child_port = match buf.msg(MSG_RECEIVE, boot, 2_000_000_000) {
            Ok(()) => buf.descriptor(0).map_or(0, |d| d.value),
            Err(_) => 0,
        };
        // Messages racing its receivers' timeouts.
        for i in 0..(x % 6) {
            if child_port != 0 {
                let h = MsgHeader {
                    bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
                    dest: child_port,
                    id: i,
                    ..MsgHeader::default()
                };
                if buf.set(h, &[], &[]).is_ok() {
                    let _ = buf.msg(MSG_SEND, 0, 50_000);
                }
            }
        }
        // A waiter stopped, read, alerted and resumed meanwhile.
        let slot = (x >> 8) as usize % WAITERS;
        stop_and_go(&mut buf, reply, slot)?;
        if round % 8 == 7 {
            replace_waiter(&mut buf, reply, (slot + 1) % WAITERS)?;
        }
        must("sleep", baton_rt::sleep_ns((x >> 16) % 3_000_000))?;
        if round % 3 != 2 {
            // Ended through its task port (it may have ended already: then it is a dead
            // name, and the send fails).
            let _ = baton_rt::task::terminate(task_port);
        }
        for name in [task_port, child_port, boot] {
            if name != 0 {
                let _ = baton_rt::ipc::cap_drop(name);
            }
        }
    }
    STOP.store(true, Ordering::Relaxed);
    // Everything of ours and the children ends: threads and ports back to the start.
    let mut now = must("stats", stats())?;
    for _ in 0..5_000 {
        if LIVE.load(Ordering::Relaxed) == 0 && now.threads == base.threads {
            break;
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
        now = must("stats", stats())?;
    }
    check!(
        LIVE.load(Ordering::Relaxed) == 0 && now.threads == base.threads,
        "every waiter and child thread ended ({} threads, {} at the start)",
        now.threads,
        base.threads
    );
    let _ = baton_rt::ipc::cap_drop(PORT.load(Ordering::Relaxed));
    let now = must("stats", stats())?;
    check!(
        now.ports == base.ports,
        "every child's ports are gone ({} ports, {} at the start)",
        now.ports,
        base.ports
    );
    println!("{TEST}: {ROUNDS} rounds");
    Ok(())
}

/// Starts a waiter in `slot`.
fn start_waiter(slot: usize) -> Result<(), Failed> {
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL {TEST}: out of stacks");
        return Err(Failed);
    };
    LIVE.fetch_add(1, Ordering::Relaxed);
    let id = must("spawn waiter", spawn(stack, waiter, slot as u64))?;
    IDS[slot].store(id, Ordering::Relaxed);
    Ok(())
}

/// Suspends the waiter of `slot`, reads its registers once it has stopped, alerts it and
/// resumes it.
fn stop_and_go(buf: &mut IpcBuffer, reply: u64, slot: usize) -> Result<(), Failed> {
    let id = IDS[slot].load(Ordering::Relaxed);
    let port = must("thread port", kobject::thread_port(id))?;
    must(
        "suspend",
        kobject::call(buf, port, reply, THREAD_SUSPEND, &[], 2_000_000_000),
    )?;
    if let Err(e) = kobject::get_state(buf, port, reply, StateOf::Thread) {
        println!("TEST FAIL {TEST}: a suspended waiter's registers: {e:?}");
        return Err(Failed);
    }
    let _ = kobject::call(buf, port, reply, THREAD_ALERT, &[], 2_000_000_000);
    must(
        "resume",
        kobject::call(buf, port, reply, THREAD_RESUME, &[], 2_000_000_000),
    )?;
    let _ = baton_rt::ipc::cap_drop(port);
    Ok(())
}

/// Terminates the waiter of `slot` (whatever it waits in) and starts another there.
fn replace_waiter(buf: &mut IpcBuffer, reply: u64, slot: usize) -> Result<(), Failed> {
    let id = IDS[slot].load(Ordering::Relaxed);
    let port = must("thread port", kobject::thread_port(id))?;
    let r = kobject::call(buf, port, reply, THREAD_TERMINATE, &[], 2_000_000_000);
    let _ = baton_rt::ipc::cap_drop(port);
    // The terminated thread never decrements `LIVE` itself.
    if r.is_ok() {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
    start_waiter(slot)
}

/// Waiter `slot`: waits of every kind with short timeouts until the end.
fn waiter(slot: u64) {
    if let Ok(mut buf) = IpcBuffer::new() {
        let port = PORT.load(Ordering::Relaxed);
        let mut n = slot.wrapping_add(0x1234_5678);
        while !STOP.load(Ordering::Relaxed) {
            wait_mix::wait_once(&mut buf, port, &WORD, &mut n);
        }
    }
    LIVE.fetch_sub(1, Ordering::Relaxed);
}

/// Sends to the waiters' port and wakes their word until the end.
fn poker(_: u64) {
    if let Ok(mut buf) = IpcBuffer::new() {
        let port = PORT.load(Ordering::Relaxed);
        let mut i = 0u64;
        while !STOP.load(Ordering::Relaxed) {
            i = i.wrapping_add(1);
            let h = MsgHeader {
                bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
                dest: port,
                id: i,
                ..MsgHeader::default()
            };
            if buf.set(h, &[], &[]).is_ok() {
                let _ = buf.msg(MSG_SEND, 0, 20_000);
            }
            WORD.fetch_add(1, Ordering::Relaxed);
            let _ = baton_rt::wake(&WORD, 1);
            let _ = baton_rt::sleep_ns(20_000);
        }
    }
    LIVE.fetch_sub(1, Ordering::Relaxed);
}
