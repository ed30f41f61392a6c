//! The protocol of `mig_server`, the migrating-RPC server of the `migrate` and `actctl`
//! tests and the `rpc.*.migrating` benchmarks: its message ids, and the client's side of
//! starting one. The programs include this file with
//! `#[path = "../mig_proto.rs"] mod mig_proto;` (they are separate binaries with no
//! library between them).
//!
//! One-way messages go to the server's own thread (they do not migrate); RPCs run in its
//! activations.

// Each program uses part of the protocol.
#![allow(dead_code)]

use baton_rt::ipc::{
    msg_raw, port_allocate, Descriptor, Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::{spawn_with, Error, FOREVER};

/// One-way, server → bootstrap: carries the send right.
pub const HELLO: u64 = 1;
/// One-way, client → server: data = activations (u64), sidetrack (u64 0/1), add on
/// sidetrack (u64 0/1), and optionally the activations' buffer size in bytes (u64; 0 or
/// absent: one page, `migrate::attach`; else `migrate::attach_sized`).
pub const CONFIG: u64 = 2;
/// One-way, server → bootstrap: the activations are attached.
pub const READY: u64 = 3;
/// One-way: a send right to the server [`NEST`] calls.
pub const PEER: u64 = 4;
/// One-way: exit.
pub const EXIT: u64 = 5;
/// RPC: echo the data (same id).
pub const ECHO: u64 = 10;
/// RPC: call the peer's [`ECHO`] with the data and reply with its reply.
pub const NEST: u64 = 11;
/// RPC: sleep for the nanoseconds in the request's first word (30 ms if none), then echo.
pub const SLEEP: u64 = 12;
/// RPC: the server task exits (its caller's call is aborted).
pub const DIE: u64 = 13;
/// One-way: the server's own thread ends with `thread_exit` (not `exit`): the task's last
/// own thread is gone while callers may still be inside its activations.
pub const QUIT: u64 = 16;
/// RPC: reply with the number of sidetrack upcalls so far (u64).
pub const COUNT: u64 = 14;
/// RPC: reply with a malformed header (descriptors claimed).
pub const BAD: u64 = 15;
/// RPC: spin (run, not sleep) for the nanoseconds in the request (u64); reply with how long
/// it spun (u64 ns).
pub const SPIN: u64 = 17;
/// RPC: reply with the CPU time (u64 ns) the server's own thread had used when it last
/// handled a one-way [`CPU`].
pub const MAIN_CPU: u64 = 18;
/// One-way: the server's own thread notes its CPU time (for [`MAIN_CPU`]).
pub const CPU: u64 = 6;
/// RPC: turn alerts on and wait (polling, and sleeping 1 ms at a time) up to 5 s for an
/// alert; reply with one word: 1 seen by polling, 2 by an interrupted sleep, 0 none.
pub const WAIT_ALERT: u64 = 19;
/// RPC: call the peer with the id in the request's first word (the rest of the data
/// forwarded); reply with the peer's reply data, then a word saying whether this activation
/// saw an alert after the nested call (alerts turned on then).
pub const NEST2: u64 = 20;
/// RPC: spin as [`SPIN`], with this activation's id noted for the server's own thread
/// ([`SUSPEND_ACT`]). A second word other than 0 makes the first a limit: the spin ends
/// as soon as the activation is alerted (alerts on while it spins), so a test whose server
/// thread acts on the spinning activation is not racing a fixed spin.
pub const SPIN_ACT: u64 = 21;
/// RPC: `set_priority(0, 1)` on the calling thread; reply with the raw result.
pub const SETPRIO: u64 = 22;
/// RPC: the activation unmaps its own buffer page and returns without a reply (the caller
/// gets `BadAddress`; the activation is retired).
pub const UNMAP: u64 = 24;
/// RPC: reply with seven words: the alerts [`WAIT_ALERT`] saw, the `rip` [`SUSPEND_ACT`]
/// read (or `1 << 62 | error`), the outcomes of [`PORT_ACT`] and [`KILL_ACT`] (read them
/// after a [`sync`]), how many [`SLEEP`] calls are asleep, how many [`SPIN_ACT`] calls spin
/// in the server now, and how many [`WAIT_ALERT`] calls wait for an alert.
pub const INFO: u64 = 23;
/// One-way: the server's own thread suspends the activation [`SPIN_ACT`] runs in, reads its
/// registers (waiting until the thread stops there), keeps it suspended 20 ms, resumes it.
pub const SUSPEND_ACT: u64 = 7;
/// One-way: the server's own thread takes the port of the activation [`SPIN_ACT`] runs in
/// (`act_port`) and, through it, asks about it (`ACT_INFO`), suspends it for 20 ms, resumes
/// it, alerts it, and checks that a second resume is refused; [`INFO`]'s third word is then
/// the occupant `ACT_INFO` named (the calling client's thread), or `1 << 62 | error`.
pub const PORT_ACT: u64 = 8;
/// One-way: the server's own thread terminates the activation [`SPIN_ACT`] runs in through
/// its port (`ACT_TERMINATE`), waits until the activation is free again and checks that
/// alerting it is then refused (`NotFound`); [`INFO`]'s fourth word is then 0, or
/// `1 << 62 | error`.
pub const KILL_ACT: u64 = 9;
/// RPC: note this activation (for [`KILL_ACT`]) and call the peer's [`SLEEP`] for the
/// nanoseconds in the request's first word; reply with the raw result of that call.
pub const NEST_SLEEP: u64 = 27;
/// RPC: add 1 to every byte of the request's data in place and reply with it (the caller
/// checks each byte: the request came in whole and the reply went back whole).
pub const INC: u64 = 25;
/// RPC: reply with as many bytes as the request's first word says (truncated to the
/// activation's buffer), byte `i` being [`fill_byte`]`(i)`.
pub const FILL: u64 = 26;

/// Byte `i` of a [`FILL`] reply.
pub fn fill_byte(i: usize) -> u8 {
    (i * 7 + 3) as u8
}

#[allow(unused_imports)]
pub use baton_rt::ipc::data_word as word;

/// A one-way message `id` to `to` (a send right, copied) through `buf`.
pub fn send(
    buf: &mut IpcBuffer,
    to: u64,
    id: u64,
    descriptors: &[Descriptor],
    data: &[u8],
) -> Result<(), Error> {
    buf.send(to, id, descriptors, data)
}

/// A call `id` with `data` to `to` (a send right, copied), with a send-once reply right
/// made from `reply` (a receive right of the caller's): the raw result of `ipc_msg` (0
/// when the reply is in `buf`, `u64::MAX` if the request did not fit).
pub fn raw_call(buf: &mut IpcBuffer, to: u64, reply: u64, id: u64, data: &[u8]) -> u64 {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: to,
        reply,
        id,
        ..MsgHeader::default()
    };
    if buf.set(h, &[], data).is_err() {
        return u64::MAX;
    }
    // SAFETY: the kernel writes only this thread's IPC buffer, which `buf` owns.
    unsafe { msg_raw(MSG_SEND | MSG_RECEIVE, reply, FOREVER, 0, 0) }
}

/// Word `i` of `server`'s [`INFO`] (asked with replies to `reply`), or `u64::MAX` if the
/// call fails.
pub fn info(buf: &mut IpcBuffer, server: u64, reply: u64, i: usize) -> u64 {
    if raw_call(buf, server, reply, INFO, &[]) == 0 {
        word(buf.data(), i)
    } else {
        u64::MAX
    }
}

/// Whether word `i` of `server`'s [`INFO`] satisfies `ok` within 3 s (asked every
/// millisecond): tests wait for the state they need this way, not with fixed sleeps, which
/// a loaded host outruns.
pub fn await_info(
    buf: &mut IpcBuffer,
    server: u64,
    reply: u64,
    i: usize,
    ok: impl Fn(u64) -> bool,
) -> Result<bool, Error> {
    for _ in 0..3_000 {
        if ok(info(buf, server, reply, i)) {
            return Ok(true);
        }
        baton_rt::sleep_ns(1_000_000)?;
    }
    Ok(false)
}

/// One-way, with a send-once reply right: the server's own thread answers it (id `SYNC`,
/// no data) once it has handled every message queued before it ([`sync`]).
pub const SYNC: u64 = 28;

/// Waits until `server`'s own thread has handled every one-way message sent to it before
/// (a [`SYNC`] through `reply`, a receive right of the caller's), or `timeout_ns` passes.
/// Its results are then there to read; polling the server with RPCs instead would put the
/// caller's own thread into the server's activations while its thread works on them.
pub fn sync(buf: &mut IpcBuffer, server: u64, reply: u64, timeout_ns: u64) -> Result<(), Error> {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: server,
        reply,
        id: SYNC,
        ..MsgHeader::default()
    };
    buf.set(h, &[], &[])?;
    // A one-way send: it is queued for the server's thread, it does not migrate.
    buf.msg(MSG_SEND, 0, FOREVER)?;
    buf.msg(MSG_RECEIVE, reply, timeout_ns)?;
    if buf.header().id == SYNC {
        Ok(())
    } else {
        Err(Error::BadFormat)
    }
}

/// Starts a `mig_server` with `acts` activations, its sidetrack on or off, and adding an
/// activation on a sidetrack upcall or not; waits until it is ready and returns the send
/// right to its port. [`Error::BadFormat`] if the server does not follow the protocol.
pub fn start(buf: &mut IpcBuffer, acts: u64, sidetrack: bool, add: bool) -> Result<u64, Error> {
    start_sized(buf, acts, sidetrack, add, 0)
}

/// [`start`], the activations with buffers of `buffer_size` bytes (0: one page).
pub fn start_sized(
    buf: &mut IpcBuffer,
    acts: u64,
    sidetrack: bool,
    add: bool,
    buffer_size: u64,
) -> Result<u64, Error> {
    let boot = port_allocate(0)?;
    spawn_with("mig_server", boot)?;
    buf.msg(MSG_RECEIVE, boot, FOREVER)?;
    let server = match (buf.header().id, buf.descriptor(0)) {
        (HELLO, Some(d)) => d.value,
        _ => return Err(Error::BadFormat),
    };
    let mut cfg = [0u8; 32];
    for (i, w) in [acts, u64::from(sidetrack), u64::from(add), buffer_size]
        .iter()
        .enumerate()
    {
        cfg[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    send(buf, server, CONFIG, &[], &cfg)?;
    buf.msg(MSG_RECEIVE, boot, FOREVER)?;
    if buf.header().id != READY {
        return Err(Error::BadFormat);
    }
    baton_rt::ipc::cap_drop(boot)?;
    Ok(server)
}
