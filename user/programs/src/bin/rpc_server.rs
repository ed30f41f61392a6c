//! `rpc_server`: the server of the `rpc.*` benchmarks (spawned by `bench`, never alone).
//!
//! It measures as sel4bench does: it takes a timestamp as soon as each request has arrived
//! and another just before it replies, keeps both, and hands them over afterwards, so that
//! the client can split every round trip into its two one-way trips (client's timestamp
//! before the call → server's after receiving; server's before replying → client's after)
//! and leave the server's own work out. The timed replies are sent as the requests came:
//! same size, the request's data left in place (an echo).
//!
//! It sends a send right to its port to its bootstrap port (the client's), then serves:
//!
//! | id | request | reply |
//! |---|---|---|
//! | [`TIMED`] | any data | the same data; timestamps kept |
//! | [`RESET`] | — | empty; the next timed request is number 0 |
//! | [`DUMP`] | `u64` first index | up to [`DUMP_MAX`] `(arrived, replied)` pairs from it |
//! | [`EXIT`] | — | empty, then the task exits |
//! | [`BIG`] | — | empty; from then on requests are received into (and replies sent from) a 64 KiB buffer of the server's own, with `MSG_BUF` ([`serve_big`]) |
//!
//! Every reply has the request's id; anything else gets an empty reply with id
//! `u64::MAX - 1`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};

use baton_rt::ipc::{
    cap_drop, msg_buf, port_allocate, Descriptor, Disposition, IpcBuffer, MsgHeader, HEADER_SIZE,
    MSG_RECEIVE, MSG_SEND,
};
use baton_rt::{println, rdtsc_ordered, start::bootstrap, FOREVER};

baton_rt::entry!(main);

/// A timed request.
pub const TIMED: u64 = 1;
/// Start counting timed requests from 0.
pub const RESET: u64 = 2;
/// Send timestamps back.
pub const DUMP: u64 = 3;
/// Reply, then exit.
pub const EXIT: u64 = 4;
/// The hello message that carries the server's send right.
pub const HELLO: u64 = 5;
/// Serve through a 64 KiB buffer from now on.
pub const BIG: u64 = 6;
/// Where [`serve_big`] maps its buffer.
const BIG_BUF: u64 = 0x6c00_0000_0000;
/// Most timed requests kept.
pub const KEPT: usize = 1100;
/// Most timestamp pairs one `DUMP` reply carries.
pub const DUMP_MAX: usize = 250;

/// When each timed request arrived.
static ARRIVED: [AtomicU64; KEPT] = [const { AtomicU64::new(0) }; KEPT];
/// When each was replied to.
static REPLIED: [AtomicU64; KEPT] = [const { AtomicU64::new(0) }; KEPT];

fn main(_task_id: u64) -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL rpc_server: {}", e.name());
            1
        }
    }
}

fn serve() -> Result<(), baton_rt::Error> {
    let boot = bootstrap();
    let mut buf = IpcBuffer::new()?;
    let port = port_allocate(0)?;
    let hello = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: boot,
        id: HELLO,
        ..MsgHeader::default()
    };
    buf.set(hello, &[Descriptor::port(port, Disposition::MakeSend)], &[])?;
    buf.msg(MSG_SEND, 0, FOREVER)?;
    cap_drop(boot)?;
    buf.msg(MSG_RECEIVE, port, FOREVER)?;
    let mut next = 0usize;
    loop {
        let arrived = rdtsc_ordered();
        let request = buf.header();
        let mut reply = reply_to(&request);
        match request.id {
            TIMED => {
                // Echo: the data stays where it is.
                reply.size = request.size;
                buf.set_header(reply);
                keep(next, arrived);
                next += 1;
            }
            RESET => {
                next = 0;
                buf.set(reply, &[], &[])?;
            }
            DUMP => {
                let first = buf
                    .data()
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes) as usize;
                let mut words = [0u64; 2 * DUMP_MAX];
                for (i, pair) in words.chunks_exact_mut(2).enumerate() {
                    let at = first + i;
                    [pair[0], pair[1]] = kept(at);
                }
                let mut bytes = [0u8; 16 * DUMP_MAX];
                for (dst, w) in bytes.chunks_exact_mut(8).zip(words.iter()) {
                    dst.copy_from_slice(&w.to_le_bytes());
                }
                buf.set(reply, &[], &bytes)?;
            }
            EXIT => {
                buf.set(reply, &[], &[])?;
                buf.msg(MSG_SEND, 0, FOREVER)?;
                cap_drop(port)?;
                return Ok(());
            }
            BIG => {
                buf.set(reply, &[], &[])?;
                buf.msg(MSG_SEND, 0, FOREVER)?;
                return serve_big(port, next);
            }
            _ => {
                reply.id = u64::MAX - 1;
                buf.set(reply, &[], &[])?;
            }
        }
        // Reply and wait for the next request in one call (the fast path's form).
        if let Err(e) = buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER) {
            println!("rpc_server: reply failed: {}", e.name());
            buf.msg(MSG_RECEIVE, port, FOREVER)?;
        }
    }
}

/// The empty reply to `request` (through its send-once reply right, with its id).
fn reply_to(request: &MsgHeader) -> MsgHeader {
    MsgHeader {
        bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
        size: HEADER_SIZE as u32,
        dest: request.reply,
        reply: 0,
        id: request.id,
    }
}

/// Keeps timed request `n`'s arrival timestamp `arrived`, then takes and keeps its reply
/// timestamp (the last thing before the reply is sent).
#[inline(always)]
fn keep(n: usize, arrived: u64) {
    if let Some(slot) = ARRIVED.get(n) {
        slot.store(arrived, Ordering::Relaxed);
    }
    let replied = rdtsc_ordered();
    if let Some(slot) = REPLIED.get(n) {
        slot.store(replied, Ordering::Relaxed);
    }
}

/// Timed request `n`'s `[arrived, replied]` timestamps (0 past the last kept).
fn kept(n: usize) -> [u64; 2] {
    let load = |a: &[AtomicU64]| a.get(n).map_or(0, |s| s.load(Ordering::Relaxed));
    [load(&ARRIVED), load(&REPLIED)]
}

/// The server loop after [`BIG`]: as [`serve`]'s, but every request is received into a
/// 64 KiB buffer of the server's own and every reply sent from it (`ipc_msg` with
/// `MSG_BUF`), so requests of up to 64 KiB arrive. Such a receive never takes the fast
/// path, which delivers only into IPC buffers. `next` is the next timed request's number.
fn serve_big(port: u64, mut next: usize) -> Result<(), baton_rt::Error> {
    let len = baton_rt::ipc::MSG_SIZE_MAX;
    baton_rt::sys::mem_map(BIG_BUF, len as u64, true)?;
    // SAFETY: just mapped writable, and used by this loop alone until the task exits.
    let big = unsafe { core::slice::from_raw_parts_mut(BIG_BUF as *mut u8, len) };
    msg_buf(big, MSG_RECEIVE, port, FOREVER)?;
    loop {
        let arrived = rdtsc_ordered();
        let request = MsgHeader::from_bytes(big).unwrap_or_default();
        let mut reply = reply_to(&request);
        match request.id {
            TIMED => {
                // Echo: the data stays where it is.
                reply.size = request.size;
                big[..HEADER_SIZE].copy_from_slice(&reply.to_bytes());
                keep(next, arrived);
                next += 1;
            }
            RESET => next = 0,
            DUMP => {
                let first = big
                    .get(HEADER_SIZE..HEADER_SIZE + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes) as usize;
                let pairs = big[HEADER_SIZE..HEADER_SIZE + 16 * DUMP_MAX].chunks_exact_mut(16);
                for (i, pair) in pairs.enumerate() {
                    let at = first + i;
                    let [a, r] = kept(at);
                    pair[..8].copy_from_slice(&a.to_le_bytes());
                    pair[8..].copy_from_slice(&r.to_le_bytes());
                }
                reply.size = (HEADER_SIZE + 16 * DUMP_MAX) as u32;
            }
            EXIT => {
                big[..HEADER_SIZE].copy_from_slice(&reply.to_bytes());
                msg_buf(big, MSG_SEND, 0, FOREVER)?;
                cap_drop(port)?;
                return Ok(());
            }
            _ => reply.id = u64::MAX - 1,
        }
        if request.id != TIMED {
            big[..HEADER_SIZE].copy_from_slice(&reply.to_bytes());
        }
        if let Err(e) = msg_buf(big, MSG_SEND | MSG_RECEIVE, port, FOREVER) {
            println!("rpc_server: reply failed: {}", e.name());
            msg_buf(big, MSG_RECEIVE, port, FOREVER)?;
        }
    }
}
