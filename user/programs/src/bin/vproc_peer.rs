//! `vproc_peer`: the other task of the `vproc` test and of the `sting.kernel_block`
//! benchmark. Its bootstrap right is a send right to its parent's port P. It makes a port
//! Q of its own and sends P a hello whose reply right is a send right to Q; then each
//! request on Q (`[delay_ns, count]`) makes it sleep `delay_ns` and send `count` messages
//! to P, numbered from 1 on. A request with `count` 0, or the death of either port, ends
//! it. So a thread of the parent blocked in a receive is woken by an IPC from another
//! task, when the parent chooses.
#![no_std]
#![no_main]

use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_rt::ipc::{data_word, msg_buf, port_allocate};

baton_rt::entry!(main);

/// The id of the peer's messages (hello and numbered).
pub const PEER_ID: u64 = 0x7670_0001;

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
    loop {
        let mut buf = [0u8; HEADER_SIZE + 16];
        if msg_buf(&mut buf, MSG_RECEIVE, q, 30_000_000_000).is_err() {
            return 0;
        }
        let data = buf.get(HEADER_SIZE..).unwrap_or(&[]);
        let (delay, count) = (data_word(data, 0), data_word(data, 1));
        if count == 0 {
            return 0;
        }
        if delay > 0 {
            let _ = baton_rt::sys::sleep_ns(delay);
        }
        for _ in 0..count {
            if send(to, 0, seq).is_err() {
                return 0;
            }
            seq += 1;
        }
    }
}
