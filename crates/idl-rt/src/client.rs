//! The client side of the request/reply convention, as generated stubs use it.
//!
//! A stub does
//! 1. [`begin_request`] on the transport's buffer, marshals the arguments (every
//!    argument's ports, then every argument's data), and finishes the message;
//! 2. [`crate::Transport::call_written`] (by default [`crate::Transport::call`]);
//! 3. [`open_reply`] on the reply, which checks its id and result code, then unmarshals the
//!    return value and checks with [`crate::MsgReader::finish`] that nothing is left.
//!
//! # Invariants
//! - A request never carries a reply right of its own (the transport adds it), and goes
//!   to the destination with `CopySend`, so the client keeps its send right.

use crate::reader::MsgReader;
use crate::writer::MsgWriter;
use crate::{error_from_code, NOTIFY_SEND_ONCE, REPLY_ID_OFFSET, RESULT_OK};
use baton_abi::ipc::Disposition;
use baton_abi::Error;

/// Starts a request with id `id` to the send right `dest` (`CopySend`, no reply right
/// yet) in `buf`.
#[inline]
pub fn begin_request(buf: &mut [u8], dest: u64, id: u64) -> Result<MsgWriter<'_>, Error> {
    MsgWriter::new(buf, dest, Disposition::CopySend, 0, Disposition::None, id)
}

/// Opens the reply `buf[..len]` to the request `request_id`: checks the reply id and
/// reads the result code. Returns a reader positioned at the return value when the code
/// is [`RESULT_OK`], else the error the code stands for.
///
/// Errors: the server's error; [`Error::DeadName`] when the reply is the kernel's
/// [`NOTIFY_SEND_ONCE`] (the server released the reply right unanswered);
/// [`Error::BadFormat`] for anything malformed, a wrong id, or an error reply that
/// carries more than its code.
#[inline]
pub fn open_reply(buf: &[u8], len: usize, request_id: u64) -> Result<MsgReader<'_>, Error> {
    let mut r = MsgReader::new(buf.get(..len).ok_or(Error::BadFormat)?)?;
    if r.id() == NOTIFY_SEND_ONCE {
        return Err(Error::DeadName);
    }
    if Some(r.id()) != request_id.checked_add(REPLY_ID_OFFSET) {
        return Err(Error::BadFormat);
    }
    let code = u64::from_le_bytes(r.array()?);
    if code == RESULT_OK {
        return Ok(r);
    }
    r.finish()?;
    Err(error_from_code(code))
}
