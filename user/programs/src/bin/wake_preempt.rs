//! `wake_preempt`: a system call that makes a higher-priority thread ready lets it run at
//! once, before the caller's next instruction, not at the next timer tick (test).
//!
//! All threads are pinned to CPU 0, so that the woken thread can only run by taking the
//! caller's processor. The main thread runs at priority [`LOW`]; a waiter at [`HIGH`]
//! blocks in `wait` on a word, a receiver at [`HIGH`] blocks receiving on a port. Each
//! round the main thread wakes the waiter (`wake`), or sends the receiver a one-way
//! message (`ipc_msg` send), and reads, right after the call returns, the round the woken
//! thread recorded: it must already be this round's. Then it sleeps briefly so that a
//! thread that did not run at once catches up, and goes on. A kernel that only preempts
//! at the next tick fails nearly every round.
//!
//! Verdict: `TEST PASS wake_preempt` or `TEST FAIL wake_preempt: ...`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_rt::check::Failed;
use baton_rt::ipc::{
    port_allocate, port_make_send, Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{set_affinity, set_priority, sleep_ns, wait, wake, Error, FOREVER};

baton_rt::entry!(main);

const TEST: &str = "wake_preempt";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// The main thread's priority.
const LOW: u64 = 20;
/// The woken threads' priority.
const HIGH: u64 = 50;
/// Rounds of each kind.
const ROUNDS: u32 = 20;

static STACKS: StackPool<2, 16384> = StackPool::new();
/// The round the main thread has started; the waiter waits on it.
static ROUND: AtomicU32 = AtomicU32::new(0);
/// The last round the waiter saw, and the receiver.
static WAITER_SAW: AtomicU32 = AtomicU32::new(0);
static RECEIVER_SAW: AtomicU64 = AtomicU64::new(0);
/// The port the receiver receives on.
static PORT: AtomicU64 = AtomicU64::new(0);

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// Waits for each new round and records it.
fn waiter(_: u64) {
    let mut seen = 0;
    while seen < ROUNDS {
        let now = ROUND.load(Ordering::SeqCst);
        if now == seen {
            let _ = wait(&ROUND, seen, FOREVER);
            continue;
        }
        seen = now;
        WAITER_SAW.store(seen, Ordering::SeqCst);
    }
}

/// Receives each round's message and records the round it carries.
fn receiver(_: u64) {
    let Ok(mut buf) = IpcBuffer::new() else {
        return;
    };
    let port = PORT.load(Ordering::SeqCst);
    for _ in 0..ROUNDS {
        if buf.msg(MSG_RECEIVE, port, FOREVER).is_err() {
            return;
        }
        let round = baton_rt::ipc::data_word(buf.data(), 0);
        RECEIVER_SAW.store(round, Ordering::SeqCst);
    }
}

/// Starts `f` on a new thread pinned to CPU 0 at priority [`HIGH`].
fn start(f: fn(u64)) -> Result<(), Failed> {
    let stack = STACKS.take().ok_or(Failed)?;
    let t = must("spawn", spawn(stack, f, 0))?;
    must("set_affinity", set_affinity(t, 0))?;
    must("set_priority", set_priority(t, HIGH))?;
    Ok(())
}

fn run() -> Result<(), Failed> {
    // Pinned to CPU 0 (a running thread moves when it next blocks), at the low priority.
    must("set_affinity", set_affinity(0, 0))?;
    must("set_priority", set_priority(0, LOW))?;
    must("sleep", sleep_ns(1_000_000))?;
    let port = must("port_allocate", port_allocate(0))?;
    PORT.store(port, Ordering::SeqCst);
    let send = must("port_make_send", port_make_send(port, false))?;
    start(waiter)?;
    start(receiver)?;
    // Both block (and, pinned, move to CPU 0) before the first round.
    must("sleep", sleep_ns(10_000_000))?;

    let mut late = 0;
    for round in 1..=ROUNDS {
        ROUND.store(round, Ordering::SeqCst);
        must("wake", wake(&ROUND, 1))?;
        if WAITER_SAW.load(Ordering::SeqCst) != round {
            late += 1;
        }
        must("sleep", sleep_ns(1_000_000))?;
    }
    check!(
        late == 0,
        "a waiter of higher priority woken by `wake` runs before the waker's next instruction ({late} of {ROUNDS} rounds late)"
    );

    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let mut late = 0;
    for round in 1..=u64::from(ROUNDS) {
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
            dest: send,
            id: 1,
            ..MsgHeader::default()
        };
        must("set", buf.set(h, &[], &round.to_le_bytes()))?;
        must("send", buf.msg(MSG_SEND, 0, FOREVER))?;
        if RECEIVER_SAW.load(Ordering::SeqCst) != round {
            late += 1;
        }
        must("sleep", sleep_ns(1_000_000))?;
    }
    check!(
        late == 0,
        "a receiver of higher priority sent a message runs before the sender's next instruction ({late} of {ROUNDS} rounds late)"
    );
    Ok(())
}
