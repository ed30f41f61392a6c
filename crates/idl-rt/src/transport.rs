//! [`Transport`]: how a client stub sends a request and gets its reply.
//!
//! The transport owns the message buffer, so that `baton-rt` can hand out the calling
//! thread's registered IPC buffer (the kernel's fast path, no page-table walk and no
//! extra copy), while a test or a program without one uses any byte array with
//! `MSG_BUF`.
//!
//! # What an implementation must do
//! A generated stub calls [`Transport::buffer`], writes the request at its start, then
//! calls [`Transport::call_written`] (by default [`Transport::call`]) with the request's
//! length. The request's header has
//! - `dest`: the server's send right (the client's destination name), disposition
//!   `CopySend`;
//! - `reply`: 0, reply disposition `None`: **the transport supplies the reply right**.
//!
//! `call(len)` must then
//! 1. put its reply right into the header with [`set_reply`]: for `baton-rt`, the name of
//!    a receive right of a per-thread reply port with [`Disposition::MakeSendOnce`], so
//!    that each call makes a fresh send-once right the server uses up by replying;
//! 2. send `buffer()[..len]` and receive the reply into the same `buffer()`: one
//!    `ipc_msg(MSG_SEND | MSG_RECEIVE, rcv_name = reply port, FOREVER, …)` (adding
//!    `MSG_BUF` with the buffer's address and size when it is not the IPC buffer);
//! 3. return the received message's length (its header's `size`, which
//!    [`message_len`] reads), or the system call's error.
//!
//! The stub checks everything about the reply itself (id, result code, contents), so the
//! transport need not look at it. A reply id of [`crate::NOTIFY_SEND_ONCE`] (the server
//! released the reply right without answering, e.g. because it died) reaches the caller
//! as [`Error::DeadName`]. A transport that can give up waiting (a timeout) must make sure
//! a late reply to the abandoned call is never taken for the reply of a later one, e.g.
//! by using a fresh reply port afterwards.
//!
//! # Invariants
//! - `buffer()` returns the same buffer for the request and the reply of one call, at
//!   least [`crate::HEADER_SIZE`] bytes long; a stub whose request does not fit gets
//!   [`Error::TooLarge`] before anything is sent.

use baton_abi::ipc::{Disposition, HEADER_SIZE};
use baton_abi::Error;

/// Sends requests and receives their replies. See the module documentation for what an
/// implementation must do.
pub trait Transport {
    /// The message buffer: requests are written at its start and replies received into it.
    fn buffer(&mut self) -> &mut [u8];

    /// Sends the request `buffer()[..len]` (after giving it a reply right with
    /// [`set_reply`]) and receives its reply into `buffer()`; returns the reply's length.
    fn call(&mut self, len: usize) -> Result<usize, Error>;

    /// [`Transport::call`] for a request that a generated stub has just written with
    /// [`crate::MsgWriter`] (whose `finish` returned `len` and wrote it as the header's
    /// size): a transport may leave out checking that the header's size is `len`. The
    /// default is [`Transport::call`].
    #[inline]
    fn call_written(&mut self, len: usize) -> Result<usize, Error> {
        self.call(len)
    }
}

impl<T: Transport + ?Sized> Transport for &mut T {
    #[inline]
    fn buffer(&mut self) -> &mut [u8] {
        (**self).buffer()
    }

    #[inline]
    fn call(&mut self, len: usize) -> Result<usize, Error> {
        (**self).call(len)
    }

    #[inline]
    fn call_written(&mut self, len: usize) -> Result<usize, Error> {
        (**self).call_written(len)
    }
}

/// Sets the reply right of the message at the start of `msg`: name `reply` with
/// `disposition` ([`Disposition::None`] with 0 for none). Error
/// [`Error::InvalidArgument`] if `msg` is shorter than a header or the two disagree about
/// whether there is a reply right.
#[inline]
pub fn set_reply(msg: &mut [u8], reply: u64, disposition: Disposition) -> Result<(), Error> {
    if (reply == 0) != (disposition == Disposition::None) {
        return Err(Error::InvalidArgument);
    }
    let bytes: &mut [u8; HEADER_SIZE] = msg.first_chunk_mut().ok_or(Error::InvalidArgument)?;
    // Only the reply disposition (bits 8..16 of `bits`, byte 1) and `reply` change.
    bytes[1] = disposition as u8;
    bytes[16..24].copy_from_slice(&reply.to_le_bytes());
    Ok(())
}

/// The length (`header.size`) of the message at the start of `msg`; [`Error::BadFormat`]
/// if there is no header or the size exceeds `msg`.
#[inline]
pub fn message_len(msg: &[u8]) -> Result<usize, Error> {
    let header = crate::reader::read_header(msg).ok_or(Error::BadFormat)?;
    let size = header.size as usize;
    if size < HEADER_SIZE || size > msg.len() {
        return Err(Error::BadFormat);
    }
    Ok(size)
}
