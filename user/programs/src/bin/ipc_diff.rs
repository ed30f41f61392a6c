//! `ipc_diff`: the IPC fast path against the general path, message by message.
//!
//! The kernel takes an RPC request or reply (`ipc_msg(MSG_SEND | MSG_RECEIVE)`, no
//! descriptors, a waiting receiver in another task) on its fast path
//! (`kernel/src/fastpath.rs`, `kern::ipc::fast`) or, failing that, on the general path,
//! which may still deliver straight to a waiting receiver; `MSG_SLOW` forces the queue.
//! Whatever path a message takes, its result must be the same. This program starts
//! `ipc_diff_server` (a second task, so that the fast path applies) and runs each case of
//! [`CASES`] twice from the same starting state: once as is, once with `MSG_SLOW` on the
//! message under test. It compares everything it can observe of the two runs: the call's
//! result, the received header (bits, size, id, whether `dest` is the receive name, the
//! reply right's kind and name slot), the data and whether the buffer past the message was
//! left alone, a second receive where the case has one, the kind of every name involved
//! afterwards, the kernel's port, name and queued-message counts across the call, and the
//! server's report of what it received and how its answer went. The kernel's `ipc_fast`
//! and `ipc_queued` counters across each run must match the case's expectation, so that the
//! first run really went fast where it could and the second did not. Each case also checks
//! the first run's outcome against what the ABI says (a result, an echo).
//!
//! Verdict: `TEST PASS ipc_diff` or `TEST FAIL ipc_diff: ...`.
#![no_std]
#![no_main]

use baton_rt::check::Failed;
use baton_rt::ipc::{
    cap_drop, cap_info, msg_buf, port_allocate, port_make_send, Descriptor, Disposition, IpcBuffer,
    MsgHeader, RightKind, HEADER_SIZE, IPC_BUFFER_SIZE, KERNEL_ID_BASE, MSG_RECEIVE, MSG_SEND,
    MSG_SLOW, NOTIFY_SEND_ONCE,
};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{println, spawn_with, stats, Error, Stats, FOREVER};

baton_rt::entry!(main);

/// This program's name in its `ok:` / `TEST FAIL` lines.
const TEST: &str = "ipc_diff";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

#[path = "../ipc_diff_proto.rs"]
mod ipc_diff_proto;

use ipc_diff_proto::*;

/// Timeout of the control calls.
const SOON: u64 = 5_000_000_000;
/// The id of the requests under test (the echo comes back with id + 100).
const ID: u64 = 7;

/// The helper thread's stacks (one per run of the busy-server case).
static STACKS: StackPool<2, 16384> = StackPool::new();
/// What the helper thread needs: the gate's name and the queued-message count to wait for.
static GATE: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static QUEUED: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static HELPER_DONE: baton_rt::sync::Counter = baton_rt::sync::Counter::new(0);

/// What one `ipc_msg` showed its caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Seen {
    /// 0, or the error's code.
    result: u64,
    bits: u32,
    size: u32,
    id: u64,
    /// Whether the header's `dest` is the name received on.
    dest_is_rcv: bool,
    /// The kind of the header's `reply` name (0 for none, 100 + code for an error).
    reply: u64,
    /// Its slot in the name space (the name without its generation).
    reply_slot: u64,
    /// A hash of the in-line data.
    data: u64,
    /// Whether the buffer past the message is as it was before the call.
    tail: bool,
}

/// Everything observed of one run of a case.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Obs {
    /// The call under test.
    main: Seen,
    /// A second call, where the case makes one.
    second: Seen,
    /// The kinds of the case's names afterwards.
    names: [u64; 4],
    /// Ports, names and queued messages: changes across the call (and second call).
    delta: [i64; 3],
    /// The server's report.
    server: [u64; REPORT_WORDS],
    /// Where the case times a receive that nothing answers: whether it lasted its whole
    /// timeout (a timer left over from the call under test would end it early).
    full_wait: bool,
}

/// One run: what was observed, and the kernel's (`ipc_fast`, `ipc_queued`) increments.
struct Run {
    obs: Obs,
    paths: (u64, u64),
}

/// The test's state.
struct Ctx {
    buf: IpcBuffer,
    /// Send right to the server's port `S`.
    server: u64,
    /// Send right to its gate `G`.
    gate: u64,
    /// The control calls' reply port.
    ctl: u64,
}

/// One case: its name, its scenario (given the extra options of the run: 0 or
/// `MSG_SLOW`), the expected path counts of the plain and the slow run, and what the plain
/// run's outcome must be.
struct Case {
    what: &'static str,
    run: fn(&mut Ctx, u64) -> Result<Run, Failed>,
    fast: (u64, u64),
    slow: (u64, u64),
    expect: fn(&Obs) -> bool,
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// `n` bytes of a pattern.
fn pattern(n: usize) -> impl Iterator<Item = u8> {
    (0..n).map(|i| (i * 7 + 3) as u8)
}

/// The hash of [`pattern`]`(n)`.
fn pattern_hash(n: usize) -> u64 {
    pattern(n).fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn kind_of(k: RightKind) -> u64 {
    k as u64
}

fn err(e: Error) -> u64 {
    e as i64 as u64
}

/// A header with raw dispositions.
fn header(dest: u64, dd: u8, reply: u64, rd: u8, id: u64) -> MsgHeader {
    MsgHeader {
        bits: u32::from(dd) | (u32::from(rd) << 8),
        dest,
        reply,
        id,
        ..MsgHeader::default()
    }
}

/// The usual request: a copied send right, a send-once reply right made from `reply`.
fn request(dest: u64, reply: u64) -> MsgHeader {
    header(
        dest,
        Disposition::CopySend as u8,
        reply,
        Disposition::MakeSendOnce as u8,
        ID,
    )
}

/// Writes `h` with `n` bytes of [`pattern`] and `descriptors`.
fn put(
    buf: &mut IpcBuffer,
    h: MsgHeader,
    descriptors: &[Descriptor],
    n: usize,
) -> Result<(), Failed> {
    let mut data = [0u8; IPC_BUFFER_SIZE];
    for (d, b) in data.iter_mut().zip(pattern(n)) {
        *d = b;
    }
    must("writing the message", buf.set(h, descriptors, &data[..n]))
}

/// `ipc_msg(options, rcv, timeout)` through the buffer, and what it showed.
fn observe(buf: &mut IpcBuffer, options: u64, rcv: u64, timeout: u64) -> Seen {
    let before = *buf.view();
    let r = buf.msg(options, rcv, timeout);
    let h = buf.header();
    let size = (h.size as usize).clamp(HEADER_SIZE, IPC_BUFFER_SIZE);
    Seen {
        result: code(r),
        bits: h.bits,
        size: h.size,
        id: h.id,
        dest_is_rcv: h.dest == rcv,
        reply: kind(h.reply),
        reply_slot: h.reply & 0xffff_ffff,
        data: hash(buf.data()),
        tail: buf.view()[size..] == before[size..],
    }
}

/// The kernel's counters now.
fn mark() -> Result<Stats, Failed> {
    must("stats", stats())
}

/// Changes since `s0`: ports, names, queued messages; and (`ipc_fast`, `ipc_queued`).
fn since(s0: &Stats) -> Result<([i64; 3], (u64, u64)), Failed> {
    let s = mark()?;
    let d = |a: u64, b: u64| a as i64 - b as i64;
    Ok((
        [
            d(s.ports, s0.ports),
            d(s.names, s0.names),
            d(s.messages_queued, s0.messages_queued),
        ],
        (s.ipc_fast - s0.ipc_fast, s.ipc_queued - s0.ipc_queued),
    ))
}

impl Ctx {
    /// A control call to the server: `id` with `words` and `descriptors`; the reply's
    /// first descriptor's name (0 if none).
    fn ctl(&mut self, id: u64, words: &[u64], descriptors: &[Descriptor]) -> Result<u64, Failed> {
        let mut data = [0u8; 64];
        for (i, w) in words.iter().enumerate() {
            data[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let h = request(self.server, self.ctl);
        must(
            "control message",
            self.buf
                .set(MsgHeader { id, ..h }, descriptors, &data[..words.len() * 8]),
        )?;
        must(
            "control call",
            self.buf.msg(MSG_SEND | MSG_RECEIVE, self.ctl, SOON),
        )?;
        let h = self.buf.header();
        if h.id != id + 100 {
            println!(
                "TEST FAIL {TEST}: control call {id:#x} answered with id {:#x}",
                h.id
            );
            return Err(Failed);
        }
        Ok(self.buf.descriptor(0).map_or(0, |d| d.value))
    }

    /// Sets the server's mode.
    fn mode(&mut self, action: u64, extra: u64, timeout: u64) -> Result<(), Failed> {
        self.ctl(C_MODE, &[action, extra, timeout], &[]).map(|_| ())
    }

    /// The server's report of the case messages since the last one.
    fn report(&mut self) -> Result<[u64; REPORT_WORDS], Failed> {
        self.ctl(C_REPORT, &[], &[])?;
        let mut r = [0u64; REPORT_WORDS];
        let data = self.buf.data();
        for (i, w) in r.iter_mut().enumerate() {
            *w = baton_rt::ipc::data_word(data, i);
        }
        Ok(r)
    }
}

/// A case that calls the server with `n` bytes of data: the header made by `make(server,
/// r)` for a new port `r`, with a descriptor carrying a send right to `r` if `with_right`;
/// the server echoes with `server_extra` added to its reply's options; the call adds
/// `extra` and receives on `r` (or, with `receive_on_send_right`, on a send right to `r`);
/// with `drain`, a second receive on `r` follows.
#[allow(clippy::too_many_arguments)]
fn rpc(
    cx: &mut Ctx,
    extra: u64,
    n: usize,
    make: fn(u64, u64) -> MsgHeader,
    with_right: bool,
    server_extra: u64,
    receive_on_send_right: bool,
    drain: bool,
) -> Result<Run, Failed> {
    cx.mode(A_ECHO, server_extra, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    let rs = must("port_make_send", port_make_send(r, false))?;
    let descs = [Descriptor::port(r, Disposition::MakeSend)];
    let descs: &[Descriptor] = if with_right { &descs } else { &[] };
    put(&mut cx.buf, make(cx.server, r), descs, n)?;
    let rcv = if receive_on_send_right { rs } else { r };
    let s0 = mark()?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, rcv, FOREVER);
    let second = if drain {
        observe(&mut cx.buf, MSG_RECEIVE, r, SOON)
    } else {
        Seen::default()
    };
    let (delta, paths) = since(&s0)?;
    let names = [kind(r), kind(rs), kind(cx.server), 0];
    let server = cx.report()?;
    must("cap_drop", cap_drop(rs))?;
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            second,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// An RPC of `n` bytes, as usual.
fn rpc_n(cx: &mut Ctx, extra: u64, n: usize) -> Result<Run, Failed> {
    rpc(cx, extra, n, request, false, 0, false, false)
}

fn echo_ok(o: &Obs, n: usize) -> bool {
    o.main.result == 0
        && o.main.id == ID + 100
        && o.main.bits == 0
        && o.main.size as usize == HEADER_SIZE + n
        && o.main.dest_is_rcv
        && o.main.reply == 0
        && o.main.data == pattern_hash(n)
        && o.main.tail
        && o.server[R_COUNT] == 1
        && o.server[R_ID] == ID
        && o.server[R_HASH] == pattern_hash(n)
        && o.server[R_REPLY_KIND] == kind_of(RightKind::SendOnce)
        && o.server[R_ANSWER] == 0
        && o.server[R_REPLY_AFTER] == 100 + err(Error::InvalidName)
        && o.delta == [0, 0, 0]
}

/// The result of a request the kernel refuses: `e`, nothing received by the server,
/// nothing changed.
fn refused(o: &Obs, e: Error) -> bool {
    o.main.result == err(e) && o.main.tail && o.server[R_COUNT] == 0 && o.delta == [0, 0, 0]
}

/// A request with a reply right from a port whose queue holds a message already: the
/// receive takes that message; the server's answer (always queued) is received next.
fn queued_reply_port(cx: &mut Ctx, extra: u64) -> Result<Run, Failed> {
    cx.mode(A_ECHO, MSG_SLOW, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    let rs = must("port_make_send", port_make_send(r, false))?;
    put(
        &mut cx.buf,
        header(rs, Disposition::CopySend as u8, 0, 0, 55),
        &[],
        16,
    )?;
    must("queueing on the reply port", cx.buf.msg(MSG_SEND, 0, 0))?;
    put(&mut cx.buf, request(cx.server, r), &[], 32)?;
    let s0 = mark()?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, FOREVER);
    let second = observe(&mut cx.buf, MSG_RECEIVE, r, SOON);
    let (delta, paths) = since(&s0)?;
    let names = [kind(r), kind(rs), kind(cx.server), 0];
    let server = cx.report()?;
    must("cap_drop", cap_drop(rs))?;
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            second,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// The helper of [`busy_server`]: once the request is queued, opens the gate.
fn open_gate(_arg: u64) {
    let want = QUEUED.load(core::sync::atomic::Ordering::Relaxed);
    let start = baton_rt::clock_ns();
    while stats().map_or(0, |s| s.messages_queued) < want && baton_rt::clock_ns() - start < SOON {
        let _ = baton_rt::sleep_ns(1_000_000);
    }
    let go = MsgHeader {
        size: HEADER_SIZE as u32,
        ..header(
            GATE.load(core::sync::atomic::Ordering::Relaxed),
            Disposition::CopySend as u8,
            0,
            0,
            1,
        )
    };
    let mut bytes = go.to_bytes();
    if let Err(e) = msg_buf(&mut bytes, MSG_SEND, 0, SOON) {
        println!("TEST FAIL {TEST}: opening the gate: {}", e.name());
    }
    HELPER_DONE.increment();
}

/// A request while the server is busy (waiting on its gate, not on its port): queued; a
/// helper thread opens the gate once it is.
fn busy_server(cx: &mut Ctx, extra: u64) -> Result<Run, Failed> {
    cx.mode(A_ECHO, 0, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    cx.ctl(C_HOLD, &[], &[])?;
    put(&mut cx.buf, request(cx.server, r), &[], 32)?;
    let s0 = mark()?;
    GATE.store(cx.gate, core::sync::atomic::Ordering::Relaxed);
    QUEUED.store(
        s0.messages_queued + 1,
        core::sync::atomic::Ordering::Relaxed,
    );
    let Some(stack) = STACKS.take() else {
        println!("TEST FAIL {TEST}: no stack for the helper");
        return Err(Failed);
    };
    let done = HELPER_DONE.get();
    must("helper thread", spawn(stack, open_gate, 0))?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, FOREVER);
    must("helper", HELPER_DONE.wait_for(done + 1, SOON).map(|_| ()))?;
    let (delta, paths) = since(&s0)?;
    let names = [kind(r), kind(cx.server), kind(cx.gate), 0];
    let server = cx.report()?;
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// A request to a name from `dest(cx)`: a right to the victim port, destroyed (dead
/// name) or released by the client (stale name).
fn bad_dest(cx: &mut Ctx, extra: u64, dead: bool) -> Result<Run, Failed> {
    cx.mode(A_ECHO, 0, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    let v = cx.ctl(C_VICTIM, &[0], &[])?;
    if dead {
        cx.ctl(C_KILL, &[], &[])?;
    } else {
        must("cap_drop", cap_drop(v))?;
    }
    put(&mut cx.buf, request(v, r), &[], 32)?;
    let s0 = mark()?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, FOREVER);
    let (delta, paths) = since(&s0)?;
    let names = [kind(r), kind(v), kind(cx.server), 0];
    let server = cx.report()?;
    if dead {
        must("cap_drop", cap_drop(v))?;
    } else {
        cx.ctl(C_KILL, &[], &[])?;
    }
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// The server answers with `action`, its answer (or second answer) with `extra`.
fn server_side(cx: &mut Ctx, extra: u64, action: u64) -> Result<Run, Failed> {
    cx.mode(action, extra, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    put(&mut cx.buf, request(cx.server, r), &[], 32)?;
    let s0 = mark()?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE, r, FOREVER);
    let (delta, paths) = since(&s0)?;
    let names = [kind(r), kind(cx.server), 0, 0];
    // Destroyed before the report: a dead-name request left behind on the used-up reply
    // right would now send a notification, which the report shows.
    must("cap_drop", cap_drop(r))?;
    let server = cx.report()?;
    Ok(Run {
        obs: Obs {
            main,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// The client answers like a server: a message through a send-once right to the server's
/// port (`MoveSendOnce`, no reply right), receiving on its own port, to which the server
/// answers through a send right it was given; then the same send-once name again. With
/// `dead`, the send-once right's port (the victim) is destroyed first.
fn send_once_from_client(cx: &mut Ctx, extra: u64, dead: bool) -> Result<Run, Failed> {
    cx.mode(A_BACK, 0, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    cx.ctl(C_TAKE, &[], &[Descriptor::port(r, Disposition::MakeSend)])?;
    let once = if dead {
        let v = cx.ctl(C_VICTIM, &[1], &[])?;
        cx.ctl(C_KILL, &[], &[])?;
        v
    } else {
        cx.ctl(C_ONCE, &[], &[])?
    };
    let h = header(once, Disposition::MoveSendOnce as u8, 0, 0, ID);
    put(&mut cx.buf, h, &[], 40)?;
    let s0 = mark()?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, FOREVER);
    put(&mut cx.buf, h, &[], 40)?;
    let second = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, FOREVER);
    let (delta, paths) = since(&s0)?;
    let names = [kind(r), kind(once), kind(cx.server), 0];
    let server = cx.report()?;
    if dead {
        must("cap_drop", cap_drop(once))?;
    }
    cx.ctl(C_TAKE, &[], &[])?;
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            second,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// A request whose destination is a right of the server's other than the send right it
/// sent first: `which` = [`C_SEND`] (a new send right, moved with `MoveSend`, or used as
/// `MoveSendOnce`: `dd`) or [`C_ONCE`] (a send-once right used as `CopySend`).
fn other_dest(cx: &mut Ctx, extra: u64, which: u64, dd: Disposition) -> Result<Run, Failed> {
    cx.mode(A_ECHO, 0, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    let d = cx.ctl(which, &[], &[])?;
    let h = header(d, dd as u8, r, Disposition::MakeSendOnce as u8, ID);
    put(&mut cx.buf, h, &[], 32)?;
    let s0 = mark()?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, FOREVER);
    let (delta, paths) = since(&s0)?;
    let names = [kind(r), kind(d), kind(cx.server), 0];
    let server = cx.report()?;
    match cap_info(d) {
        Ok(RightKind::SendOnce) => {
            // Used up without a reply right: the server takes it as a no-op.
            let nop = header(d, Disposition::MoveSendOnce as u8, 0, 0, C_NOP);
            put(&mut cx.buf, nop, &[], 0)?;
            must(
                "using up the send-once right",
                cx.buf.msg(MSG_SEND, 0, SOON),
            )?;
        }
        Ok(_) => must("cap_drop", cap_drop(d))?,
        Err(_) => {}
    }
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// A request with a raw header change `f` applied after it is written (reserved bits, a
/// kernel id, a size below a header or above the buffer).
fn malformed(cx: &mut Ctx, extra: u64, f: fn(&mut MsgHeader)) -> Result<Run, Failed> {
    cx.mode(A_ECHO, 0, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    put(&mut cx.buf, request(cx.server, r), &[], 32)?;
    let mut h = cx.buf.header();
    f(&mut h);
    cx.buf.set_header(h);
    let s0 = mark()?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, FOREVER);
    let (delta, paths) = since(&s0)?;
    let names = [kind(r), kind(cx.server), 0, 0];
    let server = cx.report()?;
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// A request to the client's own port (its send right to the reply port), receiving on
/// that port: the request comes back to the client with a send-once right to it, whose
/// release brings a send-once notification.
fn own_port(cx: &mut Ctx, extra: u64) -> Result<Run, Failed> {
    cx.mode(A_ECHO, 0, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    let rs = must("port_make_send", port_make_send(r, false))?;
    put(&mut cx.buf, request(rs, r), &[], 32)?;
    let s0 = mark()?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, FOREVER);
    let reply = cx.buf.header().reply;
    let names = [kind(r), kind(rs), kind(reply), 0];
    if reply != 0 {
        must("cap_drop", cap_drop(reply))?;
    }
    let second = observe(&mut cx.buf, MSG_RECEIVE, r, SOON);
    let (delta, paths) = since(&s0)?;
    let server = cx.report()?;
    must("cap_drop", cap_drop(rs))?;
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            second,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// A call with a timeout (`timeout`) to a server whose receive has a timeout
/// (`server_timeout`; 0: none), then a receive on the reply port with nothing to come,
/// which must last its whole [`WAIT`], and a pause until [`PAUSE`] after the call before
/// the report. Both timeouts end inside that time: a timer either path failed to cancel
/// would end the client's receive early, or a later receive of the server (which the
/// report counts as one more message).
fn timers(cx: &mut Ctx, extra: u64, timeout: u64, server_timeout: u64) -> Result<Run, Failed> {
    cx.mode(A_ECHO, 0, server_timeout)?;
    let r = must("port_allocate", port_allocate(0))?;
    put(&mut cx.buf, request(cx.server, r), &[], 32)?;
    let s0 = mark()?;
    let start = baton_rt::clock_ns();
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, timeout);
    let (delta, paths) = since(&s0)?;
    let waiting = baton_rt::clock_ns();
    let second = observe(&mut cx.buf, MSG_RECEIVE, r, WAIT);
    let full_wait = baton_rt::clock_ns() - waiting >= WAIT;
    let rest = PAUSE.saturating_sub(baton_rt::clock_ns() - start);
    must("sleep", baton_rt::sleep_ns(rest))?;
    let names = [kind(r), kind(cx.server), 0, 0];
    let server = cx.report()?;
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            second,
            names,
            delta,
            server,
            full_wait,
        },
        paths,
    })
}

/// [`timers`]: the client's receive that nothing answers.
const WAIT: u64 = 300_000_000;
/// [`timers`]: the call's timeout (the call itself takes far less).
const CALL_TIMEOUT: u64 = 100_000_000;
/// [`timers`]: the server's receive timeout.
const SERVER_TIMEOUT: u64 = 400_000_000;
/// [`timers`]: how long after the call the report is asked for.
const PAUSE: u64 = 500_000_000;

/// A request made by `make(m, r)` to the server's port `M`, which has an activation (a
/// call to it migrates), with a reply right from a new port `r`. Only for requests the
/// general path refuses: with `MSG_SLOW` a call to `M` is queued for a thread that never
/// comes.
fn migrating(cx: &mut Ctx, extra: u64, make: fn(u64, u64) -> MsgHeader) -> Result<Run, Failed> {
    cx.mode(A_ECHO, 0, 0)?;
    let r = must("port_allocate", port_allocate(0))?;
    let m = cx.ctl(C_MIGRATING, &[], &[])?;
    put(&mut cx.buf, make(m, r), &[], 32)?;
    let s0 = mark()?;
    let main = observe(&mut cx.buf, MSG_SEND | MSG_RECEIVE | extra, r, FOREVER);
    let (delta, paths) = since(&s0)?;
    let names = [kind(r), kind(m), 0, 0];
    let server = cx.report()?;
    must("cap_drop", cap_drop(m))?;
    must("cap_drop", cap_drop(r))?;
    Ok(Run {
        obs: Obs {
            main,
            names,
            delta,
            server,
            ..Obs::default()
        },
        paths,
    })
}

/// Runs `case` twice, plain and with `MSG_SLOW`, and compares.
fn diff(cx: &mut Ctx, case: &Case) -> Result<(), Failed> {
    let base = baton_rt::check::ipc_counts(TEST)?;
    let a = (case.run)(cx, 0)?;
    let mid = baton_rt::check::ipc_counts(TEST)?;
    let b = (case.run)(cx, MSG_SLOW)?;
    let end = baton_rt::check::ipc_counts(TEST)?;
    let what = case.what;
    check!(
        mid == base && end == base,
        "{what}: ports, names and queued messages back to {base:?} after each run (now {mid:?}, {end:?})"
    );
    check!(
        a.paths == case.fast && b.paths == case.slow,
        "{what}: the plain run takes the paths expected (fast, queued) = {:?} (saw {:?}), the MSG_SLOW run {:?} (saw {:?})",
        case.fast,
        a.paths,
        case.slow,
        b.paths
    );
    if a.obs != b.obs {
        println!("{TEST}: {what}: plain run    {:?}", a.obs);
        println!("{TEST}: {what}: MSG_SLOW run {:?}", b.obs);
    }
    check!(
        a.obs == b.obs,
        "{what}: both paths give the same result and state"
    );
    if !(case.expect)(&a.obs) {
        println!("{TEST}: {what}: {:?}", a.obs);
    }
    check!(
        (case.expect)(&a.obs),
        "{what}: the outcome is the one the ABI describes"
    );
    Ok(())
}

/// The cases.
const CASES: &[Case] = &[
    Case {
        what: "request and reply with no data",
        run: |cx, x| rpc_n(cx, x, 0),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| echo_ok(o, 0),
    },
    Case {
        what: "request and reply with 8 bytes",
        run: |cx, x| rpc_n(cx, x, 8),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| echo_ok(o, 8),
    },
    Case {
        what: "request and reply with 32 bytes",
        run: |cx, x| rpc_n(cx, x, 32),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| echo_ok(o, 32),
    },
    Case {
        what: "request and reply with 37 bytes",
        run: |cx, x| rpc_n(cx, x, 37),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| echo_ok(o, 37),
    },
    Case {
        what: "request and reply filling the IPC buffer (4064 bytes)",
        run: |cx, x| rpc_n(cx, x, IPC_BUFFER_SIZE - HEADER_SIZE),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| echo_ok(o, IPC_BUFFER_SIZE - HEADER_SIZE),
    },
    Case {
        what: "the reply through the send-once right",
        run: |cx, x| server_side(cx, x, A_ECHO),
        fast: (2, 0),
        slow: (1, 1),
        expect: |o| echo_ok(o, 32),
    },
    Case {
        what: "the reply after a dead-name request on the send-once right",
        run: |cx, x| server_side(cx, x, A_NOTIFY),
        fast: (2, 0),
        slow: (1, 1),
        expect: |o| echo_ok(o, 32) && o.server[R_SECOND] == 0 && o.server[R_NOTIFIED] == 0,
    },
    Case {
        what: "a second reply through the used-up send-once name",
        run: |cx, x| server_side(cx, x, A_TWICE),
        fast: (2, 0),
        slow: (2, 0),
        expect: |o| echo_ok(o, 32) && o.server[R_SECOND] == err(Error::InvalidName),
    },
    Case {
        what: "a request whose reply port has a message queued",
        run: queued_reply_port,
        fast: (1, 1),
        slow: (0, 2),
        expect: |o| {
            o.main.result == 0
                && o.main.id == 55
                && o.main.data == pattern_hash(16)
                && o.second.id == ID + 100
                && o.second.data == pattern_hash(32)
                && o.server[R_COUNT] == 1
                && o.delta == [0, 0, -1]
        },
    },
    Case {
        what: "a request while the server is busy",
        run: busy_server,
        fast: (2, 1),
        slow: (1, 2),
        expect: |o| echo_ok(o, 32),
    },
    Case {
        what: "a request to a dead name",
        run: |cx, x| bad_dest(cx, x, true),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::DeadName) && o.names[1] == kind_of(RightKind::DeadName),
    },
    Case {
        what: "a request to a released name",
        run: |cx, x| bad_dest(cx, x, false),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidName),
    },
    Case {
        what: "a request with a MoveReceive reply right",
        run: |cx, x| {
            let make = |s, r| {
                header(
                    s,
                    Disposition::CopySend as u8,
                    r,
                    Disposition::MoveReceive as u8,
                    ID,
                )
            };
            rpc(cx, x, 32, make, false, 0, false, false)
        },
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidArgument) && o.names[0] == kind_of(RightKind::Receive),
    },
    Case {
        what: "a request with an unknown reply disposition",
        run: |cx, x| {
            let make = |s, r| header(s, Disposition::CopySend as u8, r, 9, ID);
            rpc(cx, x, 32, make, false, 0, false, false)
        },
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidArgument),
    },
    Case {
        what: "a request with reply disposition None and a reply name",
        run: |cx, x| {
            let make = |s, r| header(s, Disposition::CopySend as u8, r, 0, ID);
            rpc(cx, x, 32, make, false, 0, false, false)
        },
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidArgument),
    },
    Case {
        what: "a request making a send-once reply right from a send right",
        run: |cx, x| {
            let make = |s, _| request(s, s);
            rpc(cx, x, 32, make, false, 0, false, false)
        },
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidRight),
    },
    Case {
        what: "a request with a send reply right (MakeSend)",
        run: |cx, x| {
            let make = |s, r| {
                header(
                    s,
                    Disposition::CopySend as u8,
                    r,
                    Disposition::MakeSend as u8,
                    ID,
                )
            };
            rpc(cx, x, 32, make, false, 0, false, false)
        },
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| {
            o.main.result == 0
                && o.main.id == ID + 100
                && o.server[R_REPLY_KIND] == kind_of(RightKind::Send)
                && o.server[R_ANSWER] == 0
        },
    },
    Case {
        what: "a request with a port right in a descriptor",
        run: |cx, x| rpc(cx, x, 32, request, true, 0, false, false),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| {
            o.main.result == 0
                && o.main.size as usize == HEADER_SIZE
                && o.server[R_DESCRIPTORS] == 1
                && o.server[R_DESC0_KIND] == kind_of(RightKind::Send)
        },
    },
    Case {
        what: "a request receiving on a send right",
        run: |cx, x| rpc(cx, x, 32, request, false, MSG_SLOW, true, true),
        fast: (1, 1),
        slow: (0, 2),
        expect: |o| {
            o.main.result == err(Error::InvalidRight)
                && o.second.result == 0
                && o.second.id == ID + 100
                && o.server[R_COUNT] == 1
        },
    },
    Case {
        what: "a send right used as MoveSendOnce",
        run: |cx, x| other_dest(cx, x, C_SEND, Disposition::MoveSendOnce),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidRight) && o.names[1] == kind_of(RightKind::Send),
    },
    Case {
        what: "a send-once right used as CopySend",
        run: |cx, x| other_dest(cx, x, C_ONCE, Disposition::CopySend),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidRight) && o.names[1] == kind_of(RightKind::SendOnce),
    },
    Case {
        what: "a request moving its destination send right",
        run: |cx, x| other_dest(cx, x, C_SEND, Disposition::MoveSend),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| {
            o.main.result == 0
                && o.main.id == ID + 100
                && o.names[1] == 100 + err(Error::InvalidName)
                && o.delta == [0, -1, 0]
        },
    },
    Case {
        what: "a message through a send-once right from the client, then the name again",
        run: |cx, x| send_once_from_client(cx, x, false),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| {
            o.main.result == 0
                && o.main.id == ID + 100
                && o.main.data == pattern_hash(40)
                && o.server[R_BITS] == 0
                && o.server[R_REPLY_KIND] == 0
                && o.second.result == err(Error::InvalidName)
                && o.names[1] == 100 + err(Error::InvalidName)
        },
    },
    Case {
        what: "a message through a send-once right whose port is dead",
        run: |cx, x| send_once_from_client(cx, x, true),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| {
            o.main.result == err(Error::DeadName)
                && o.server[R_COUNT] == 0
                && o.names[1] == kind_of(RightKind::DeadName)
        },
    },
    Case {
        what: "a request with reserved bits set",
        run: |cx, x| malformed(cx, x, |h| h.bits |= 1 << 24),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidArgument),
    },
    Case {
        what: "a request with a kernel message id",
        run: |cx, x| malformed(cx, x, |h| h.id = KERNEL_ID_BASE),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidArgument),
    },
    Case {
        what: "a request smaller than a header",
        run: |cx, x| malformed(cx, x, |h| h.size = 16),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidArgument),
    },
    Case {
        what: "a request larger than the IPC buffer",
        run: |cx, x| malformed(cx, x, |h| h.size = IPC_BUFFER_SIZE as u32 + 8),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::TooLarge),
    },
    Case {
        what: "a request to the client's own port",
        run: own_port,
        fast: (0, 1),
        slow: (0, 1),
        expect: |o| {
            o.main.result == 0
                && o.main.id == ID
                && o.main.reply == kind_of(RightKind::SendOnce)
                && o.second.id == NOTIFY_SEND_ONCE
                && o.server[R_COUNT] == 0
        },
    },
    Case {
        what: "a request to a server waiting with a timeout",
        run: |cx, x| timers(cx, x, FOREVER, SERVER_TIMEOUT),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| echo_ok(o, 32) && o.second.result == err(Error::TimedOut) && o.full_wait,
    },
    Case {
        what: "a call with a timeout",
        run: |cx, x| timers(cx, x, CALL_TIMEOUT, 0),
        fast: (2, 0),
        slow: (0, 2),
        expect: |o| echo_ok(o, 32) && o.second.result == err(Error::TimedOut) && o.full_wait,
    },
    Case {
        what: "a reply while a message waits on the server's port",
        run: |cx, x| server_side(cx, x, A_SELFQ),
        fast: (2, 1),
        slow: (1, 2),
        expect: |o| {
            o.main.result == 0
                && o.main.id == ID + 100
                && o.server[R_COUNT] == 2
                && o.server[R_ID] == SELF_ID
                && o.delta == [0, 0, 0]
        },
    },
    Case {
        what: "a call to a port with activations with a kernel message id",
        run: |cx, x| {
            migrating(cx, x, |m, r| MsgHeader {
                id: KERNEL_ID_BASE + 1,
                ..request(m, r)
            })
        },
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidArgument),
    },
    // A call to a port with activations never uses its reply right, but the right is
    // checked as for any message, on every path (docs/migrating.md).
    Case {
        what: "a call to a port with activations with a MoveReceive reply right",
        run: |cx, x| {
            migrating(cx, x, |m, r| {
                header(
                    m,
                    Disposition::CopySend as u8,
                    r,
                    Disposition::MoveReceive as u8,
                    ID,
                )
            })
        },
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidArgument),
    },
    Case {
        what: "a call to a port with activations with an unknown reply disposition",
        run: |cx, x| {
            migrating(cx, x, |m, r| {
                header(m, Disposition::CopySend as u8, r, 9, ID)
            })
        },
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidArgument),
    },
    Case {
        what: "a call to a port with activations making a send-once reply right from a send right",
        run: |cx, x| migrating(cx, x, |m, _| request(m, m)),
        fast: (0, 0),
        slow: (0, 0),
        expect: |o| refused(o, Error::InvalidRight),
    },
];

fn run() -> Result<(), Failed> {
    let baseline = baton_rt::check::ipc_counts(TEST)?;
    let buf = must("ipc buffer", IpcBuffer::new())?;
    let boot = must("port_allocate", port_allocate(0))?;
    let ctl = must("port_allocate", port_allocate(0))?;
    must("spawn ipc_diff_server", spawn_with("ipc_diff_server", boot))?;
    let mut cx = Ctx {
        buf,
        server: 0,
        gate: 0,
        ctl,
    };
    must("receiving the hello", cx.buf.msg(MSG_RECEIVE, boot, SOON))?;
    let hello = cx.buf.header();
    cx.server = cx.buf.descriptor(0).map_or(0, |d| d.value);
    cx.gate = cx.buf.descriptor(1).map_or(0, |d| d.value);
    check!(
        hello.id == HELLO
            && cap_info(cx.server) == Ok(RightKind::Send)
            && cap_info(cx.gate) == Ok(RightKind::Send),
        "hello carries send rights to the server's port and gate"
    );
    // The server's migrating port exists from here on; a warm-up, so that the server's
    // name space and queues reach their working size.
    let m = cx.ctl(C_MIGRATING, &[], &[])?;
    must("cap_drop", cap_drop(m))?;
    for _ in 0..2 {
        rpc_n(&mut cx, 0, 32)?;
        rpc_n(&mut cx, MSG_SLOW, 32)?;
    }
    for case in CASES {
        diff(&mut cx, case)?;
    }
    cx.ctl(C_EXIT, &[], &[])?;
    for name in [cx.server, cx.gate, cx.ctl, boot] {
        must("cap_drop", cap_drop(name))?;
    }
    drop(cx);
    // The server's end releases its ports: wait for them to go.
    let mut end = baton_rt::check::ipc_counts(TEST)?;
    for _ in 0..200 {
        if end == baseline {
            break;
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
        end = baton_rt::check::ipc_counts(TEST)?;
    }
    check!(
        end == baseline,
        "ports, names and queued messages back to the baseline {baseline:?} (now {end:?})"
    );
    Ok(())
}
