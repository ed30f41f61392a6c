//! `ipc`: ports, rights and messages between two tasks, from user space.
//!
//! It starts `ipc_echo` with a bootstrap right to a port of its own, receives the server's
//! send right from it, and then checks, printing `ok: <what>` for each:
//! RPCs with 32 B and 1 KiB of data (and that they took the fast path), the same with the
//! slow path forced, a full queue that refuses (timeout 0) and times out, rights rules
//! (forged names, wrong kinds, send-once used once), the send-once notification when a
//! server drops a reply right, the no-senders notification when the last send right is
//! released, a receiver thread already waiting when a general-path message comes (a
//! message larger than its buffer refused and left queued, one that fits delivered by the
//! sender's call, the receive's timeout gone with it), several client threads calling at
//! once, the dead-name notification when the
//! server task ends, and that the kernel's port, name and message counts are back where
//! they started.
//!
//! Verdict: `TEST PASS ipc` or `TEST FAIL ipc: ...`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, Ordering};

use baton_rt::ipc::{
    cap_drop, cap_info, port_allocate, port_make_send, port_notify, port_set_limit, Descriptor,
    Disposition, IpcBuffer, MsgHeader, RightKind, MSG_RECEIVE, MSG_SEND, MSG_SLOW,
    NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME, NOTIFY_KIND_NO_SENDERS, NOTIFY_NO_SENDERS,
    NOTIFY_SEND_ONCE,
};
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{println, spawn_with, stats, Error};

use baton_rt::check::Failed;

baton_rt::entry!(main);

/// Request ids of `ipc_echo` (see that program).
const ECHO: u64 = 10;
const DROP_REPLY: u64 = 11;
const TAKE_RIGHT: u64 = 12;
const EXIT: u64 = 13;
const HELLO: u64 = 1;
/// Timeout for anything that should come at once.
const SOON: u64 = 5_000_000_000;

/// Client threads calling at once.
const CLIENTS: usize = 4;
/// RPCs per client thread.
const CALLS: u32 = 200;
/// The client threads' stacks, the receiver thread's, and the three threads of
/// [`full_queue_hand_over`].
static STACKS: StackPool<{ CLIENTS + 4 }, 16384> = StackPool::new();
static CLIENTS_DONE: Counter = Counter::new(0);
static CLIENT_ERRORS: AtomicU32 = AtomicU32::new(0);
/// The client's name for the server's send right (shared by the task's threads).
static SERVER: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// This program's name in its `ok:` / `TEST FAIL` lines (see `baton_rt::check`).
const TEST: &str = "ipc";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

/// Runs `f`, turning an error into a failure that names `what`.
fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// A request header for the server.
fn request(server: u64, reply: u64, id: u64) -> MsgHeader {
    MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: server,
        reply,
        id,
        ..MsgHeader::default()
    }
}

/// One echo RPC of `data`; checks the reply.
fn echo(
    buf: &mut IpcBuffer,
    server: u64,
    reply: u64,
    data: &[u8],
    slow: bool,
) -> Result<bool, Error> {
    buf.set(request(server, reply, ECHO), &[], data)?;
    let extra = if slow { MSG_SLOW } else { 0 };
    buf.msg(MSG_SEND | MSG_RECEIVE | extra, reply, SOON)?;
    let h = buf.header();
    Ok(h.id == ECHO + 100 && h.dest == reply && buf.data() == data)
}

fn counts() -> Result<(u64, u64, u64), Failed> {
    baton_rt::check::ipc_counts(TEST)
}

fn run() -> Result<(), Failed> {
    let baseline = counts()?;
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let boot = must("port_allocate", port_allocate(0))?;
    must("spawn ipc_echo", spawn_with("ipc_echo", boot))?;
    must("receiving the hello", buf.msg(MSG_RECEIVE, boot, SOON))?;
    let hello = buf.header();
    let server = buf.descriptor(0).map(|d| d.value).unwrap_or(0);
    check!(
        hello.id == HELLO && cap_info(server) == Ok(RightKind::Send),
        "hello carries a send right to the server's port"
    );
    SERVER.store(server, Ordering::Relaxed);
    let reply = must("reply port", port_allocate(0))?;

    // RPCs, fast path.
    let before = must("stats", stats())?;
    let small = [0x5au8; 32];
    let mut big = [0u8; 1024];
    for (i, b) in big.iter_mut().enumerate() {
        *b = (i * 7) as u8;
    }
    let mut good = true;
    for _ in 0..50 {
        good &= must("echo 32 B", echo(&mut buf, server, reply, &small, false))?;
        good &= must("echo 1 KiB", echo(&mut buf, server, reply, &big, false))?;
    }
    let after = must("stats", stats())?;
    check!(good, "100 RPCs with 32 B and 1 KiB come back intact");
    check!(
        after.ipc_fast - before.ipc_fast >= 100,
        "RPCs take the fast path ({} fast, {} queued)",
        after.ipc_fast - before.ipc_fast,
        after.ipc_queued - before.ipc_queued
    );
    let before = after;
    let mut good = true;
    for _ in 0..20 {
        good &= must("slow echo", echo(&mut buf, server, reply, &small, true))?;
    }
    let after = must("stats", stats())?;
    check!(
        good && after.ipc_queued - before.ipc_queued >= 20,
        "RPCs with the slow path forced work and are queued ({} queued)",
        after.ipc_queued - before.ipc_queued
    );

    // A full queue.
    let q = must("port_allocate", port_allocate(1))?;
    let qs = must("port_make_send", port_make_send(q, false))?;
    let to_q = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: qs,
        id: 5,
        ..MsgHeader::default()
    };
    must("set", buf.set(to_q, &[], b"x"))?;
    must("first send to a queue of 1", buf.msg(MSG_SEND, 0, 0))?;
    must("set", buf.set(to_q, &[], b"y"))?;
    check!(
        buf.msg(MSG_SEND, 0, 0) == Err(Error::WouldBlock),
        "a full queue refuses a send with timeout 0"
    );
    must("set", buf.set(to_q, &[], b"y"))?;
    check!(
        buf.msg(MSG_SEND, 0, 20_000_000) == Err(Error::TimedOut),
        "a full queue blocks the sender until its timeout"
    );
    must("receive from q", buf.msg(MSG_RECEIVE, q, 0))?;
    check!(buf.data() == b"x", "the queued message is received");
    check!(
        buf.msg(MSG_RECEIVE, q, 0) == Err(Error::WouldBlock),
        "an empty queue refuses a receive with timeout 0"
    );
    check!(
        buf.msg(MSG_RECEIVE, q, 20_000_000) == Err(Error::TimedOut),
        "an empty queue times out a receive"
    );
    check!(
        port_set_limit(q, 0) == Err(Error::InvalidArgument),
        "limit 0 is refused"
    );

    // Rights rules.
    for forged in [12345u64, 0, u64::MAX, qs ^ (1 << 40)] {
        let h = MsgHeader {
            dest: forged,
            ..to_q
        };
        must("set", buf.set(h, &[], &[]))?;
        check!(
            buf.msg(MSG_SEND, 0, 0) == Err(Error::InvalidName),
            "a forged name {forged:#x} is refused"
        );
    }
    check!(
        buf.msg(MSG_RECEIVE, qs, 0) == Err(Error::InvalidRight),
        "receiving needs the receive right"
    );
    check!(
        port_make_send(qs, false) == Err(Error::InvalidRight),
        "making a send right needs the receive right"
    );
    must("set", buf.set(MsgHeader { dest: q, ..to_q }, &[], &[]))?;
    check!(
        buf.msg(MSG_SEND, 0, 0) == Err(Error::InvalidRight),
        "a receive right cannot be sent to as a send right"
    );
    let once = must("send-once", port_make_send(q, true))?;
    let by_once = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
        dest: once,
        id: 6,
        ..MsgHeader::default()
    };
    must("set", buf.set(by_once, &[], &[]))?;
    must("send-once send", buf.msg(MSG_SEND, 0, 0))?;
    must("set", buf.set(by_once, &[], &[]))?;
    check!(
        buf.msg(MSG_SEND, 0, 0) == Err(Error::InvalidName),
        "a send-once right works once"
    );
    must("drain", buf.msg(MSG_RECEIVE, q, 0))?;
    let dup = [
        Descriptor::port(q, Disposition::MoveReceive),
        Descriptor::port(q, Disposition::MakeSend),
    ];
    must("set", buf.set(to_q, &dup, &[]))?;
    check!(
        buf.msg(MSG_SEND, 0, 0) == Err(Error::InvalidArgument)
            && cap_info(q) == Ok(RightKind::Receive),
        "a message that moves a right and uses it again is refused whole"
    );

    // Notifications.
    must("set", buf.set(request(server, reply, DROP_REPLY), &[], &[]))?;
    must(
        "rpc that gets no reply",
        buf.msg(MSG_SEND | MSG_RECEIVE, reply, SOON),
    )?;
    check!(
        buf.header().id == NOTIFY_SEND_ONCE,
        "a reply right released unused brings a send-once notification"
    );
    let n = must("port_allocate", port_allocate(0))?;
    let ns = must("port_make_send", port_make_send(n, false))?;
    must(
        "no-senders request",
        port_notify(n, NOTIFY_KIND_NO_SENDERS, n),
    )?;
    must(
        "set",
        buf.set(
            request(server, reply, TAKE_RIGHT),
            &[Descriptor::port(ns, Disposition::MoveSend)],
            &[],
        ),
    )?;
    must(
        "rpc moving a send right",
        buf.msg(MSG_SEND | MSG_RECEIVE, reply, SOON),
    )?;
    check!(
        buf.header().id == TAKE_RIGHT + 100 && cap_info(ns) == Err(Error::InvalidName),
        "a moved send right leaves the sender"
    );
    must("no-senders notification", buf.msg(MSG_RECEIVE, n, SOON))?;
    check!(
        buf.header().id == NOTIFY_NO_SENDERS && buf.data() == n.to_le_bytes(),
        "releasing the last send right brings a no-senders notification"
    );

    // A receiver already waiting gets a general-path message from the sender's call.
    waiting_receiver(&mut buf)?;
    // ... and a sender blocked on a full queue keeps its place when the message handed
    // over is too large for that receiver.
    full_queue_hand_over(&mut buf)?;

    // Several clients at once.
    for i in 0..CLIENTS {
        let Some(stack) = STACKS.take() else {
            println!("TEST FAIL ipc: no stack for client thread {i}");
            return Err(Failed);
        };
        must("client thread", spawn(stack, client, i as u64))?;
    }
    must(
        "clients",
        CLIENTS_DONE.wait_for(CLIENTS as u32, SOON).map(|_| ()),
    )?;
    check!(
        CLIENT_ERRORS.load(Ordering::Relaxed) == 0,
        "{CLIENTS} client threads x {CALLS} concurrent RPCs all correct"
    );

    // The server ends: dead name.
    let dead = must("port_allocate", port_allocate(0))?;
    must(
        "dead-name request",
        port_notify(server, NOTIFY_KIND_DEAD_NAME, dead),
    )?;
    must("set", buf.set(request(server, reply, EXIT), &[], &[]))?;
    must("exit rpc", buf.msg(MSG_SEND | MSG_RECEIVE, reply, SOON))?;
    must("dead-name notification", buf.msg(MSG_RECEIVE, dead, SOON))?;
    check!(
        buf.header().id == NOTIFY_DEAD_NAME && buf.data() == server.to_le_bytes(),
        "the server's end brings a dead-name notification"
    );
    check!(
        cap_info(server) == Ok(RightKind::DeadName),
        "the server's name is a dead name"
    );
    must("set", buf.set(request(server, reply, ECHO), &[], &[]))?;
    check!(
        buf.msg(MSG_SEND, 0, 0) == Err(Error::DeadName),
        "sending to a dead name fails"
    );

    for name in [server, reply, q, qs, n, dead, boot] {
        must("cap_drop", cap_drop(name))?;
    }
    drop(buf);
    let end = counts()?;
    check!(
        end == baseline,
        "ports, names and queued messages back to the baseline {baseline:?} (now {end:?})"
    );
    Ok(())
}

/// The port the [`receiver`] thread receives on, the timeout of its next receive, and
/// what that receive gave: its raw result, the data's length and first byte.
static R_PORT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static R_TIMEOUT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static R_RESULT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static R_DATA: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
/// Receives the [`receiver`] thread is told to make, and has made.
static R_GO: Counter = Counter::new(0);
static R_DONE: Counter = Counter::new(0);
/// Receives the [`receiver`] thread makes before it ends.
const R_ROUNDS: u32 = 3;

/// A thread of this task that receives on `R_PORT` into its IPC buffer, once per `R_GO`,
/// with the timeout `R_TIMEOUT`, and publishes what it got.
fn receiver(_: u64) {
    let Ok(mut buf) = IpcBuffer::new() else {
        R_RESULT.store(u64::MAX, Ordering::Relaxed);
        R_DONE.increment();
        return;
    };
    for round in 1..=R_ROUNDS {
        if R_GO.wait_for(round, SOON).is_err() {
            break;
        }
        let port = R_PORT.load(Ordering::Relaxed);
        let timeout = R_TIMEOUT.load(Ordering::Relaxed);
        let r = buf.msg(MSG_RECEIVE, port, timeout);
        let data = buf.data();
        let summary = (data.len() as u64) << 8 | u64::from(data.first().copied().unwrap_or(0));
        R_RESULT.store(r.map_or_else(|e| e.to_raw(), |()| 0), Ordering::Relaxed);
        R_DATA.store(summary, Ordering::Relaxed);
        R_DONE.increment();
    }
}

/// Waits (at most [`SOON`]) until a thread has blocked in the kernel since `blocks` (the
/// `blocks_ipc` count): the receiver is waiting.
fn receiver_waits(blocks: u64) -> Result<(), Failed> {
    let start = baton_rt::clock_ns();
    loop {
        if must("stats", stats())?.blocks_ipc > blocks {
            return Ok(());
        }
        if baton_rt::clock_ns().saturating_sub(start) > SOON {
            println!("TEST FAIL ipc: the receiver thread never waited");
            return Err(Failed);
        }
        baton_rt::yield_now();
    }
}

/// A message on the general path to a port whose receiver already waits: the sender's
/// call runs that receive (`docs/ipc.md`, "General path"), and the receiver gets what a
/// receive from the queue gives: a message larger than its IPC buffer is refused with
/// `TooLarge` and stays queued; a message that fits arrives intact, its receive finished
/// (a continuation recognition), and the receive's timeout no longer runs.
fn waiting_receiver(buf: &mut IpcBuffer) -> Result<(), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    let send = must("port_make_send", port_make_send(port, false))?;
    R_PORT.store(port, Ordering::Relaxed);
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL ipc: no stack for the receiver thread");
        return Err(Failed);
    };
    must("receiver thread", spawn(stack, receiver, 0))?;
    let to_port = |size: usize| MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: send,
        id: 21,
        size: (baton_rt::ipc::HEADER_SIZE + size) as u32,
        ..MsgHeader::default()
    };
    // 1. 8 KiB from a buffer of the sender's own: larger than the receiver's IPC buffer.
    const BIG: usize = 8192;
    const H: usize = baton_rt::ipc::HEADER_SIZE;
    let pattern = |i: usize| (i % 251) as u8 + 1;
    let mut big = [0u8; H + BIG];
    big[..H].copy_from_slice(&to_port(BIG).to_bytes());
    for (i, b) in big[H..].iter_mut().enumerate() {
        *b = pattern(i);
    }
    R_TIMEOUT.store(SOON, Ordering::Relaxed);
    let blocks = must("stats", stats())?.blocks_ipc;
    R_GO.increment();
    receiver_waits(blocks)?;
    must(
        "8 KiB to the waiting receiver",
        baton_rt::ipc::msg_buf(&mut big, MSG_SEND, 0, 0),
    )?;
    must("receiver", R_DONE.wait_for(1, SOON).map(|_| ()))?;
    check!(
        R_RESULT.load(Ordering::Relaxed) == Error::TooLarge.to_raw(),
        "a waiting receiver's receive of a message larger than its IPC buffer fails with TooLarge"
    );
    big.fill(0);
    let taken = baton_rt::ipc::msg_buf(&mut big, MSG_RECEIVE, port, 0);
    let intact = big[H..].iter().enumerate().all(|(i, &b)| b == pattern(i));
    check!(
        taken.is_ok() && intact,
        "and the message stays queued, intact ({taken:?})"
    );
    // 2. 32 bytes with MSG_SLOW to a receiver waiting with a timeout: its receive is
    // finished by the send (a recognition, no queued message left).
    let before = must("stats", stats())?;
    R_TIMEOUT.store(1_000_000_000, Ordering::Relaxed);
    R_GO.increment();
    receiver_waits(before.blocks_ipc)?;
    must("set", buf.set(to_port(0), &[], &[0x77; 32]))?;
    must(
        "32 B to the waiting receiver",
        buf.msg(MSG_SEND | MSG_SLOW, 0, 0),
    )?;
    must("receiver", R_DONE.wait_for(2, SOON).map(|_| ()))?;
    let after = must("stats", stats())?;
    check!(
        R_RESULT.load(Ordering::Relaxed) == 0
            && R_DATA.load(Ordering::Relaxed) == (32 << 8 | 0x77)
            && after.ipc_queued > before.ipc_queued
            && after.recognitions > before.recognitions,
        "a waiting receiver gets a MSG_SLOW message intact, its receive finished by the send"
    );
    // 3. Its next receive waits longer than the first one's timeout: that timeout must
    // not cut it short.
    R_TIMEOUT.store(SOON, Ordering::Relaxed);
    let blocks = must("stats", stats())?.blocks_ipc;
    R_GO.increment();
    receiver_waits(blocks)?;
    must("sleep", baton_rt::sleep_ns(1_200_000_000))?;
    must("set", buf.set(to_port(0), &[], &[0x78; 8]))?;
    must(
        "8 B to the waiting receiver",
        buf.msg(MSG_SEND | MSG_SLOW, 0, 0),
    )?;
    must("receiver", R_DONE.wait_for(3, SOON).map(|_| ()))?;
    check!(
        R_RESULT.load(Ordering::Relaxed) == 0 && R_DATA.load(Ordering::Relaxed) == (8 << 8 | 0x78),
        "the first receive's timeout does not cut the next one short"
    );
    check!(
        buf.msg(MSG_RECEIVE, port, 0) == Err(Error::WouldBlock),
        "no message is left queued"
    );
    for name in [port, send] {
        must("cap_drop", cap_drop(name))?;
    }
    Ok(())
}

/// [`full_queue_hand_over`]'s port (its receive right) and send right.
static F_PORT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static F_SEND: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
/// The two senders' results, and how many have finished.
static F_BIG: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(u64::MAX);
static F_SMALL: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(u64::MAX);
static F_SENT: Counter = Counter::new(0);
/// The receiver thread's rounds, its last result, and how many rounds it has finished.
static F_GO: Counter = Counter::new(0);
static F_RESULT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static F_DONE: Counter = Counter::new(0);
/// The size of [`full_queue_hand_over`]'s large message's data: more than an IPC buffer.
const F_BIG_SIZE: usize = 8192;

/// A message to [`F_SEND`] with `size` bytes of data.
fn to_full(size: usize) -> MsgHeader {
    MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: F_SEND.load(Ordering::Relaxed),
        id: 22,
        size: (baton_rt::ipc::HEADER_SIZE + size) as u32,
        ..MsgHeader::default()
    }
}

/// [`full_queue_hand_over`]'s first sender: [`F_BIG_SIZE`] bytes from a buffer of its
/// own, blocking while the queue is full.
fn full_big_sender(_: u64) {
    const H: usize = baton_rt::ipc::HEADER_SIZE;
    let mut big = [0x42u8; H + F_BIG_SIZE];
    big[..H].copy_from_slice(&to_full(F_BIG_SIZE).to_bytes());
    let r = baton_rt::ipc::msg_buf(&mut big, MSG_SEND, 0, SOON);
    F_BIG.store(r.map_or_else(|e| e.to_raw(), |_| 0), Ordering::Relaxed);
    F_SENT.increment();
}

/// [`full_queue_hand_over`]'s second sender: one byte through its IPC buffer, blocking
/// while the queue is full.
fn full_small_sender(_: u64) {
    let r = IpcBuffer::new().and_then(|mut buf| {
        buf.set(to_full(0), &[], b"3")?;
        buf.msg(MSG_SEND, 0, SOON)
    });
    F_SMALL.store(r.map_or_else(|e| e.to_raw(), |()| 0), Ordering::Relaxed);
    F_SENT.increment();
}

/// [`full_queue_hand_over`]'s receiver: one receive into its IPC buffer per [`F_GO`].
fn full_receiver(_: u64) {
    let Ok(mut buf) = IpcBuffer::new() else {
        F_RESULT.store(u64::MAX, Ordering::Relaxed);
        F_DONE.increment();
        return;
    };
    for round in 1..=2 {
        if F_GO.wait_for(round, SOON).is_err() {
            break;
        }
        let r = buf.msg(MSG_RECEIVE, F_PORT.load(Ordering::Relaxed), SOON);
        F_RESULT.store(r.map_or_else(|e| e.to_raw(), |()| 0), Ordering::Relaxed);
        F_DONE.increment();
    }
}

/// Sleeps in 1 ms steps (at most [`SOON`]) until a thread has blocked in the kernel since
/// `blocks` (the `blocks_ipc` count): a sender of lower priority, which runs only while
/// this thread sleeps, is blocked on the full queue.
fn sender_blocks(blocks: u64) -> Result<(), Failed> {
    let start = baton_rt::clock_ns();
    while must("stats", stats())?.blocks_ipc <= blocks {
        if baton_rt::clock_ns().saturating_sub(start) > SOON {
            println!("TEST FAIL ipc: a sender never blocked on the full queue");
            return Err(Failed);
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
    }
    Ok(())
}

/// Two senders blocked on a port's full queue (limit 1), the first with a message larger
/// than an IPC buffer, the second with a small one. A receiver takes the queued message,
/// which gives the first sender its retry, and waits again; the first sender's retry then
/// finds that receiver waiting and its message is handed over, which the receiver's IPC
/// buffer cannot take (`TooLarge`: the message stays queued). The second sender must keep
/// its place: once the large message is received, its own send goes through. (On one CPU
/// the priorities make exactly this order happen; on more, other orders give the same
/// results.)
fn full_queue_hand_over(buf: &mut IpcBuffer) -> Result<(), Failed> {
    const H: usize = baton_rt::ipc::HEADER_SIZE;
    let port = must("port_allocate", port_allocate(0))?;
    must("port_set_limit", port_set_limit(port, 1))?;
    let send = must("port_make_send", port_make_send(port, false))?;
    F_PORT.store(port, Ordering::Relaxed);
    F_SEND.store(send, Ordering::Relaxed);
    must("set", buf.set(to_full(0), &[], b"1"))?;
    must("the queued message", buf.msg(MSG_SEND, 0, 0))?;
    let threads: [(fn(u64), u64); 3] = [
        (full_big_sender, 8),
        (full_small_sender, 8),
        (full_receiver, baton_abi::PRIORITY_DEFAULT),
    ];
    for (i, (f, priority)) in threads.into_iter().enumerate() {
        let Some(stack) = STACKS.take() else {
            println!("TEST FAIL ipc: no stack for the full queue's thread {i}");
            return Err(Failed);
        };
        let blocks = must("stats", stats())?.blocks_ipc;
        let t = must("full queue thread", spawn(stack, f, 0))?;
        must("set_priority", baton_rt::sys::set_priority(t, priority))?;
        if i < 2 {
            sender_blocks(blocks)?;
        }
    }
    // The receiver takes the queued message: the large message's sender gets its retry.
    F_GO.increment();
    must("receiver", F_DONE.wait_for(1, SOON).map(|_| ()))?;
    check!(
        F_RESULT.load(Ordering::Relaxed) == 0,
        "a receive from a full queue takes its message"
    );
    // It waits again; the retried large message is handed to it and does not fit.
    F_GO.increment();
    must("receiver", F_DONE.wait_for(2, SOON).map(|_| ()))?;
    check!(
        F_RESULT.load(Ordering::Relaxed) == Error::TooLarge.to_raw(),
        "a message larger than the waiting receiver's IPC buffer is refused with TooLarge"
    );
    let mut big = [0u8; H + F_BIG_SIZE];
    let taken = baton_rt::ipc::msg_buf(&mut big, MSG_RECEIVE, port, SOON);
    check!(
        taken.is_ok() && big[H..].iter().all(|&b| b == 0x42),
        "the large message stays queued, intact ({taken:?})"
    );
    // The small message's sender kept its place and sends now.
    let small = buf.msg(MSG_RECEIVE, port, 2_000_000_000);
    check!(
        small.is_ok() && buf.data() == b"3",
        "a sender blocked on the full queue keeps its place across the refused hand-over ({small:?})"
    );
    must("senders", F_SENT.wait_for(2, 2 * SOON).map(|_| ()))?;
    check!(
        F_BIG.load(Ordering::Relaxed) == 0 && F_SMALL.load(Ordering::Relaxed) == 0,
        "both senders' sends succeed"
    );
    for name in [port, send] {
        must("cap_drop", cap_drop(name))?;
    }
    Ok(())
}

/// A client thread: its own IPC buffer and reply port, [`CALLS`] echo RPCs.
fn client(index: u64) {
    let ok = (|| -> Result<bool, Error> {
        let mut buf = IpcBuffer::new()?;
        let reply = port_allocate(0)?;
        let server = SERVER.load(Ordering::Relaxed);
        let mut good = true;
        for call in 0..CALLS {
            let data = [index as u8, call as u8, (call >> 8) as u8, 0xc1];
            good &= echo(&mut buf, server, reply, &data, call % 10 == 0)?;
        }
        cap_drop(reply)?;
        Ok(good)
    })();
    if ok != Ok(true) {
        CLIENT_ERRORS.fetch_add(1, Ordering::Relaxed);
    }
    CLIENTS_DONE.increment();
}
