//! Handling exceptions in user space: a thread's faults, breakpoints and unknown system
//! calls arrive as messages on its exception port (see [`baton_abi::exception`] and
//! `docs/exceptions.md`).
//!
//! A handler receives on a port it set with [`exception_port_set`], reads the exception
//! with [`info`], and answers through the message's reply right with [`set_reply`]
//! followed by a send (typically `ipc_msg(SEND | RECEIVE)`, which also waits for the next
//! exception).

pub use baton_abi::exception::*;
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE};
use baton_abi::{decode_result, Error, Sys};

use crate::ipc::IpcBuffer;
use crate::raw::syscall2;

/// The id of a handler's reply (any user id will do; the kernel reads only the data).
pub const EXC_REPLY_ID: u64 = 1;

/// `exception_port_set(target, name)`: `name` (a send or receive right; 0 clears) becomes
/// the exception port of `target`: 0 for this task, else a thread id of this task.
pub fn exception_port_set(target: u64, name: u64) -> Result<(), Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall2(Sys::ExceptionPortSet as u64, target, name) }).map(|_| ())
}

/// The exception in `buf`, if it holds an exception message from the kernel.
#[inline]
pub fn info(buf: &IpcBuffer) -> Option<ExceptionInfo> {
    if buf.header().id != EXC_RAISE {
        return None;
    }
    ExceptionInfo::from_bytes(buf.data())
}

/// Replaces the exception message in `buf` by the reply `reply`, addressed to the message's
/// reply right; send it with [`IpcBuffer::msg`].
#[inline]
pub fn set_reply(buf: &mut IpcBuffer, reply: ExcReply) -> Result<(), Error> {
    let right = buf.header().reply;
    // The reply's data is written in place, after the header (no copy of it in between).
    let bytes = buf.bytes();
    let data: &mut [u8; EXC_REPLY_SET_SIZE] = bytes
        .get_mut(HEADER_SIZE..HEADER_SIZE + EXC_REPLY_SET_SIZE)
        .and_then(|d| d.try_into().ok())
        .ok_or(Error::TooLarge)?;
    let n = reply.to_bytes(data);
    buf.set_header(MsgHeader {
        bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
        size: (HEADER_SIZE + n) as u32,
        dest: right,
        id: EXC_REPLY_ID,
        ..MsgHeader::default()
    });
    Ok(())
}
