//! `vproc_peer`: the other task of the `vproc` test and of the `sting.kernel_block`
//! benchmark. Its bootstrap right is a send right to its parent's port P. It makes a port
//! Q of its own and sends P a hello whose reply right is a send right to Q; then each
//! request on Q (`[delay_ns, count]`) makes it sleep `delay_ns` and send `count` messages
//! to P, numbered from 1 on; a request with a third word of 1 (`[delay_ns, count, 1]`)
//! makes it call P `count` times instead, each an RPC the fast path may take (a
//! `CopySend` request with a `MakeSendOnce` reply right, through its IPC buffer), and
//! send P, as a numbered message, the first data word of each reply. A request with
//! `count` 0, or the death of either port, ends it. So a thread of the parent blocked in a receive is woken by an IPC from another
//! task, when the parent chooses.
#![no_std]
#![no_main]

use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_rt::ipc::{data_word, msg_buf, port_allocate, IpcBuffer};

baton_rt::entry!(main);

/// The id of the peer's messages (hello and numbered).
pub const PEER_ID: u64 = 0x7670_0001;
/// The id of the peer's calls.
pub const PEER_CALL_ID: u64 = 0x7670_0003;

/// Calls `to` with `word` through the IPC buffer `buf`, its reply right made from the
/// receive right `reply`: the reply's first data word.
fn call(buf: &mut IpcBuffer, to: u64, reply: u64, word: u64) -> Result<u64, baton_rt::Error> {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: to,
        reply,
        id: PEER_CALL_ID,
        ..MsgHeader::default()
    };
    buf.set(h, &[], &word.to_le_bytes())?;
    buf.msg(MSG_SEND | MSG_RECEIVE, reply, baton_abi::FOREVER)?;
    Ok(data_word(buf.data(), 0))
}

fn send(to: u64, reply: u64, word: u64) -> Result<(), baton_rt::Error> {
    let mut buf = [0u8; HEADER_SIZE + 8];
    let reply_kind = if reply == 0 {
        Disposition::None
    } else {
        Disposition::MakeSend
    };
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, reply_kind, 0),
        size: (HEADER_SIZE + 8) as u32,
        dest: to,
        reply,
        id: PEER_ID,
    };
    buf[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    buf[HEADER_SIZE..].copy_from_slice(&word.to_le_bytes());
    msg_buf(&mut buf, MSG_SEND, 0, baton_abi::FOREVER)
}

fn main(_task_id: u64) -> i32 {
    let to = baton_rt::start::bootstrap();
    let Ok(q) = port_allocate(0) else {
        return 1;
    };
    if send(to, q, 0).is_err() {
        return 1;
    }
    let mut seq = 1u64;
    let Ok(reply) = port_allocate(0) else {
        return 1;
    };
    let Ok(mut ipc) = IpcBuffer::new() else {
        return 1;
    };
    loop {
        let mut buf = [0u8; HEADER_SIZE + 24];
        if msg_buf(&mut buf, MSG_RECEIVE, q, 30_000_000_000).is_err() {
            return 0;
        }
        let data = buf.get(HEADER_SIZE..).unwrap_or(&[]);
        let (delay, count, calls) = (data_word(data, 0), data_word(data, 1), data_word(data, 2));
        if count == 0 {
            return 0;
        }
        if delay > 0 {
            let _ = baton_rt::sys::sleep_ns(delay);
        }
        for _ in 0..count {
            let word = if calls == 1 {
                match call(&mut ipc, to, reply, seq) {
                    Ok(w) => w,
                    Err(_) => return 0,
                }
            } else {
                seq
            };
            if send(to, 0, word).is_err() {
                return 0;
            }
            seq += 1;
        }
    }
}
