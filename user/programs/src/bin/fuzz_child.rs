//! `fuzz_child`: the child task the system-call fuzzer (`fuzz`) spawns, so that tasks are
//! started, used and killed while its threads hold their ports and ids. Never run alone.
//!
//! It allocates a port, sends a send right to it on its bootstrap port (when it has one),
//! then serves its port for a short while: a request with a reply right is answered (its id
//! plus 100, no data), [`FAULT`] makes it fault on purpose (`ud2`: the kernel kills it),
//! [`EXIT`] ends it. After [`ROUNDS`] receives of at most [`SLICE_NS`] each it exits by
//! itself, so a child nobody kills still ends and the boot can finish.
#![no_std]
#![no_main]

use baton_rt::ipc::{
    port_allocate, Descriptor, Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::start::bootstrap;

baton_rt::entry!(main);

/// Message id: fault on purpose.
const FAULT: u64 = 0xfa17;
/// Message id: exit at once.
const EXIT: u64 = 0xe817;
/// Receives before the child ends by itself.
const ROUNDS: u32 = 200;
/// Longest wait for one message.
const SLICE_NS: u64 = 5_000_000;

fn main(_task_id: u64) -> i32 {
    // A child the fuzzer made with limits too small for a buffer or a port has nothing to
    // serve: it ends at once, as one nobody talks to does.
    let Ok(mut buf) = IpcBuffer::new() else {
        return 0;
    };
    let Ok(port) = port_allocate(0) else {
        return 0;
    };
    if bootstrap() != 0 {
        let hello = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 1),
            dest: bootstrap(),
            id: 0xc41d,
            ..MsgHeader::default()
        };
        // Best effort: the fuzzer may have destroyed the port, or filled its queue.
        if buf
            .set(hello, &[Descriptor::port(port, Disposition::MakeSend)], &[])
            .is_ok()
        {
            let _ = buf.msg(MSG_SEND, 0, 0);
        }
    }
    for _ in 0..ROUNDS {
        if buf.msg(MSG_RECEIVE, port, SLICE_NS).is_err() {
            continue;
        }
        let h = buf.header();
        match h.id {
            FAULT => {
                // SAFETY: `ud2` raises an invalid-opcode exception at once; this task has no
                // exception port, so the kernel ends it. It touches no memory.
                unsafe { core::arch::asm!("ud2", options(nomem, nostack)) };
            }
            EXIT => return 0,
            id if h.reply != 0 => {
                let reply = MsgHeader {
                    bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
                    dest: h.reply,
                    id: id.wrapping_add(100),
                    ..MsgHeader::default()
                };
                if buf.set(reply, &[], &[]).is_ok() {
                    let _ = buf.msg(MSG_SEND, 0, 0);
                }
            }
            _ => {}
        }
    }
    0
}
