//! `hostile_peer`: the server side of the `hostile` test (spawned by it, never started
//! alone). It must keep serving whatever the hostile task sends it.
//!
//! It allocates its port, sends a send right to it to its bootstrap port (the hostile
//! task's), then serves requests:
//!
//! | id | request | reply (id + 100) |
//! |---|---|---|
//! | [`ECHO`] | any data, no descriptors | the same data |
//! | [`STATUS`] | — | one `u64`: how many other messages arrived so far |
//! | [`EXIT`] | — | empty, then the task exits |
//! | anything else | anything | empty, if the message carries a reply right |
//!
//! Every right a message brings is released at once, so the peer holds no more names
//! after a message than before it. A reply that cannot be sent (a reply right the kernel
//! refuses) is released. A message larger than the IPC buffer (which the kernel leaves at
//! the head of the queue, failing the receive with `TooLarge`) is taken with a 64 KiB
//! buffer and released unanswered.
#![no_std]
#![no_main]

use baton_rt::ipc::{
    cap_drop, cap_info, msg_buf, port_allocate, Descriptor, Disposition, IpcBuffer, MsgHeader,
    DESCRIPTOR_SIZE, HEADER_SIZE, MSG_RECEIVE, MSG_SEND, MSG_SIZE_MAX,
};
use baton_rt::{mem_map, println, start::bootstrap, Error, FOREVER};

baton_rt::entry!(main);

/// Message id of the hello message that carries the server's send right.
pub const HELLO: u64 = 1;
/// Request: echo the data.
pub const ECHO: u64 = 10;
/// Request: reply, then exit.
pub const EXIT: u64 = 13;
/// Request: how many other messages arrived.
pub const STATUS: u64 = 14;
/// Reply ids are request id + this.
pub const REPLY: u64 = 100;

/// Where the buffer for messages larger than the IPC buffer is mapped.
const BIG: u64 = 0x5300_0000_0000;

fn main(_task_id: u64) -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL hostile_peer: {}", e.name());
            1
        }
    }
}

/// Releases the rights a received message in `b` brings: its descriptors and, unless
/// `keep_reply`, its reply right.
fn release_rights(b: &[u8], keep_reply: bool) {
    let Some(h) = MsgHeader::from_bytes(b) else {
        return;
    };
    for i in 0..h.descriptors() {
        let at = HEADER_SIZE + i * DESCRIPTOR_SIZE;
        if let Some(d) = b.get(at..).and_then(Descriptor::from_bytes) {
            let _ = cap_drop(d.value);
        }
    }
    if !keep_reply && h.reply != 0 {
        let _ = cap_drop(h.reply);
    }
}

fn serve() -> Result<(), Error> {
    let boot = bootstrap();
    let mut buf = IpcBuffer::new()?;
    mem_map(BIG, MSG_SIZE_MAX as u64, true)?;
    // SAFETY: the region was just mapped writable and only this slice reaches it.
    let big = unsafe { core::slice::from_raw_parts_mut(BIG as *mut u8, MSG_SIZE_MAX) };
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
    let mut others: u64 = 0;
    let mut next = buf.msg(MSG_RECEIVE, port, FOREVER);
    loop {
        match next {
            Ok(()) => {}
            Err(Error::TooLarge) => {
                // Larger than the IPC buffer: take it with the big buffer, drop it.
                msg_buf(big, MSG_RECEIVE, port, 0)?;
                release_rights(big, false);
                others += 1;
                next = buf.msg(MSG_RECEIVE, port, FOREVER);
                continue;
            }
            Err(e) => return Err(e),
        }
        let req = buf.header();
        release_rights(buf.view(), true);
        if !matches!(req.id, ECHO | STATUS | EXIT) {
            others += 1;
        }
        if req.reply == 0 {
            if req.id == EXIT {
                return Ok(());
            }
            next = buf.msg(MSG_RECEIVE, port, FOREVER);
            continue;
        }
        let disposition = if req.reply_disposition() == Disposition::MoveSendOnce as u8 {
            Disposition::MoveSendOnce
        } else {
            Disposition::MoveSend
        };
        let reply = MsgHeader {
            bits: MsgHeader::make_bits(disposition, Disposition::None, 0),
            dest: req.reply,
            id: req.id.wrapping_add(REPLY),
            size: HEADER_SIZE as u32,
            ..MsgHeader::default()
        };
        match req.id {
            ECHO if req.descriptors() == 0 => {
                // The data stays where it is: only the header changes.
                buf.set_header(MsgHeader {
                    size: req.size,
                    ..reply
                });
            }
            STATUS => buf.set(reply, &[], &others.to_le_bytes())?,
            EXIT => {
                buf.set_header(reply);
                let _ = buf.msg(MSG_SEND, 0, FOREVER);
                return Ok(());
            }
            _ => buf.set_header(reply),
        }
        next = buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER);
        if next.is_err() && cap_info(req.reply).is_ok() {
            // The reply was refused and the right is still ours: release it.
            let _ = cap_drop(req.reply);
            next = buf.msg(MSG_RECEIVE, port, FOREVER);
        }
    }
}
