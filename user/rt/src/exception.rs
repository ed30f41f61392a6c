//! Handling exceptions in user space: a thread's faults, breakpoints and unknown system
//! calls arrive as messages on its exception port (see [`baton_abi::exception`] and
//! `docs/exceptions.md`).
//!
//! A handler receives on a port it set with [`exception_port_set`], reads the exception
//! with [`info`] (a copy) or [`head`] (its first words, in place), and answers through the
//! message's reply right with [`set_reply`] or, to resume with the exception's registers
//! changed, [`set_reply_regs`] (in place), followed by a send (typically
//! `ipc_msg(SEND | RECEIVE)`, which also waits for the next exception).

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

/// The words of an exception before its registers, as [`head`] reads them in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExcHead {
    /// [`ExceptionInfo::kind`].
    pub kind: u64,
    /// [`ExceptionInfo::error`].
    pub error: u64,
    /// [`ExceptionInfo::addr`].
    pub addr: u64,
    /// [`ExceptionInfo::thread`].
    pub thread: u64,
    /// [`ExceptionInfo::task`].
    pub task: u64,
}

/// Whether `h` is the header of a kernel's exception message as a handler receives it
/// (id [`EXC_RAISE`], no descriptors, the whole [`ExceptionInfo`]).
#[inline(always)]
fn is_raise(h: &MsgHeader) -> bool {
    h.id == EXC_RAISE
        && h.descriptors() == 0
        && h.size as usize >= HEADER_SIZE + EXCEPTION_INFO_SIZE
}

/// Word `i` of `data`, little-endian.
#[inline(always)]
fn word_of<const N: usize>(data: &[u8; N], i: usize) -> u64 {
    data.get(8 * i..8 * i + 8)
        .and_then(|w| w.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// The exception in `buf`'s words before its registers, read in place (no copy of the
/// message): what a handler decides with before it answers with [`set_reply_regs`] or
/// [`set_reply`]. `None` when `buf` holds no exception message from the kernel.
#[inline]
pub fn head(buf: &IpcBuffer) -> Option<ExcHead> {
    if !is_raise(&buf.header()) {
        return None;
    }
    let data: &[u8; EXCEPTION_INFO_SIZE] = buf
        .view()
        .get(HEADER_SIZE..HEADER_SIZE + EXCEPTION_INFO_SIZE)?
        .try_into()
        .ok()?;
    Some(ExcHead {
        kind: word_of(data, 0),
        error: word_of(data, 1),
        addr: word_of(data, 2),
        thread: word_of(data, 3),
        task: word_of(data, 4),
    })
}

/// Replaces the exception message in `buf`, in place, by an [`EXC_REPLY_SET`] reply
/// addressed to its reply right: the exception's registers as `edit` changes them (a
/// handler that skips an instruction adds to `rip`). The registers go from the message to
/// the reply without a copy in between. [`Error::InvalidArgument`] when `buf` holds no
/// exception message from the kernel. Send it with [`IpcBuffer::msg`].
#[inline]
pub fn set_reply_regs(buf: &mut IpcBuffer, edit: impl FnOnce(&mut UserRegs)) -> Result<(), Error> {
    let h = buf.header();
    if !is_raise(&h) {
        return Err(Error::InvalidArgument);
    }
    let data: &mut [u8; EXCEPTION_INFO_SIZE] = buf
        .bytes()
        .get_mut(HEADER_SIZE..HEADER_SIZE + EXCEPTION_INFO_SIZE)
        .and_then(|d| d.try_into().ok())
        .ok_or(Error::InvalidArgument)?;
    let mut words = [0u64; USER_REGS_WORDS];
    for (i, w) in words.iter_mut().enumerate() {
        *w = word_of(data, EXCEPTION_INFO_WORDS - USER_REGS_WORDS + i);
    }
    let mut regs = UserRegs::from_words(&words);
    edit(&mut regs);
    let (action, rest) = data.split_at_mut(8);
    action.copy_from_slice(&EXC_REPLY_SET.to_le_bytes());
    for (dst, w) in rest.chunks_exact_mut(8).zip(regs.to_words()) {
        dst.copy_from_slice(&w.to_le_bytes());
    }
    buf.set_header(MsgHeader {
        bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
        size: (HEADER_SIZE + EXC_REPLY_SET_SIZE) as u32,
        dest: h.reply,
        id: EXC_REPLY_ID,
        ..MsgHeader::default()
    });
    Ok(())
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
