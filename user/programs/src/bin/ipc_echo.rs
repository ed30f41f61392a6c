//! `ipc_echo`: the server side of the `ipc` test (spawned by it, never started alone).
//!
//! It allocates its port, sends a send right to it to its bootstrap port (the client's),
//! then serves requests, replying through each request's send-once reply right:
//!
//! | id | request | reply |
//! |---|---|---|
//! | [`ECHO`] | any data | the same data |
//! | [`DROP_REPLY`] | — | none: the reply right is released unused |
//! | [`TAKE_RIGHT`] | descriptor 0: a send right | empty, after releasing the right |
//! | [`EXIT`] | — | empty, then the task exits |
//!
//! Replies have id request id + 100; anything else gets an empty reply with id
//! `u64::MAX - 1`.
#![no_std]
#![no_main]

use baton_rt::ipc::{
    cap_drop, port_allocate, Descriptor, Disposition, IpcBuffer, MsgHeader, HEADER_SIZE,
    MSG_RECEIVE, MSG_SEND,
};
use baton_rt::{println, start::bootstrap, FOREVER};

baton_rt::entry!(main);

/// Request: echo the data.
pub const ECHO: u64 = 10;
/// Request: release the reply right without replying.
pub const DROP_REPLY: u64 = 11;
/// Request: release the send right in descriptor 0, then reply.
pub const TAKE_RIGHT: u64 = 12;
/// Request: reply, then exit.
pub const EXIT: u64 = 13;
/// Message id of the hello message that carries the server's send right.
pub const HELLO: u64 = 1;

fn main(_task_id: u64) -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL ipc_echo: {}", e.name());
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
    loop {
        let req = buf.header();
        let reply_to = req.reply;
        let mut reply = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
            dest: reply_to,
            id: req.id + 100,
            size: HEADER_SIZE as u32,
            ..MsgHeader::default()
        };
        match req.id {
            ECHO if req.descriptors() == 0 => {
                // The data stays where it is: only the header changes.
                reply.size = req.size;
            }
            DROP_REPLY => {
                cap_drop(reply_to)?;
                buf.msg(MSG_RECEIVE, port, FOREVER)?;
                continue;
            }
            TAKE_RIGHT => {
                if let Some(d) = buf.descriptor(0) {
                    cap_drop(d.value)?;
                }
            }
            EXIT => {
                buf.set_header(reply);
                buf.msg(MSG_SEND, 0, FOREVER)?;
                return Ok(());
            }
            _ => reply.id = u64::MAX - 1,
        }
        buf.set_header(reply);
        buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER)?;
    }
}
