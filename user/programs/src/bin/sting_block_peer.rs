//! `sting_block_peer`: the other task of the `sting_block` test. Its bootstrap right is a
//! send right to its parent's port P. It makes a port Q, sends P a hello whose reply right
//! is a send right to Q, and then serves RPCs on Q through its IPC buffer, the way the
//! kernel's RPC fast path takes them: each request (`[delay_ns, value]`, with a send-once
//! reply right) is answered, after `delay_ns`, with `value + 1`, by an
//! `ipc_msg(SEND | RECEIVE)` that also waits for the next request. A request with `value`
//! 0 ends it.
#![no_std]
#![no_main]

use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_rt::ipc::{data_word, msg_buf, port_allocate, IpcBuffer};
use baton_rt::Error;

baton_rt::entry!(main);

/// The id of the peer's messages (hello and replies).
pub const PEER_ID: u64 = 0x5b10_0001;

fn hello(to: u64, q: u64) -> Result<(), Error> {
    let mut buf = [0u8; HEADER_SIZE];
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSend, 0),
        size: HEADER_SIZE as u32,
        dest: to,
        reply: q,
        id: PEER_ID,
    };
    buf.copy_from_slice(&h.to_bytes());
    msg_buf(&mut buf, MSG_SEND, 0, baton_abi::FOREVER)
}

fn serve(ipc: &mut IpcBuffer, q: u64) -> Result<(), Error> {
    ipc.msg(MSG_RECEIVE, q, 60_000_000_000)?;
    loop {
        let data = ipc.data();
        let (delay, value) = (data_word(data, 0), data_word(data, 1));
        let reply = ipc.header().reply;
        if value == 0 || reply == 0 {
            return Ok(());
        }
        if delay > 0 {
            let _ = baton_rt::sys::sleep_ns(delay);
        }
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
            dest: reply,
            id: PEER_ID,
            ..MsgHeader::default()
        };
        ipc.set(h, &[], &(value + 1).to_le_bytes())?;
        ipc.msg(MSG_SEND | MSG_RECEIVE, q, baton_abi::FOREVER)?;
    }
}

fn main(_task_id: u64) -> i32 {
    let to = baton_rt::start::bootstrap();
    let (Ok(q), Ok(mut ipc)) = (port_allocate(0), IpcBuffer::new()) else {
        return 1;
    };
    if hello(to, q).is_err() {
        return 1;
    }
    match serve(&mut ipc, q) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}
