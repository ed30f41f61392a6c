//! The server side of the request/reply convention, as generated dispatch functions use
//! it.
//!
//! A dispatch function reads the request with a [`MsgReader`], finds where the reply goes
//! with [`ReplyTo::of`], and answers with [`ReplyTo::respond`] (the method ran) or
//! [`ReplyTo::reject`] (the request never reached a method: unknown id, undecodable
//! arguments). Both return a [`Dispatched`], which tells the server loop what to send and
//! which rights of the request it still has to release.
//!
//! # The reply
//! - header `dest` = the request's reply name, with `MoveSendOnce` when the request
//!   brought a send-once right (the usual case: the client's transport made one) and
//!   `MoveSend` when it brought a send right. Either way the server's name is used up by
//!   the reply, so a server never accumulates reply rights. (Each received right gets a
//!   fresh name in Baton, so moving a received send right back cannot take a name the
//!   server uses for anything else.)
//! - no reply right; id = request id + [`REPLY_ID_OFFSET`];
//! - data: a `u64` result code ([`RESULT_OK`] or the error's code), then, on success, the
//!   return value marshaled (its rights as descriptors before the code).
//!
//! # Migrating calls
//! A request that reached a server by a *migrating* call (seed 001: the caller's thread
//! runs the server's code in one of its activations) arrives without a reply right: the
//! reply goes back to the caller when the activation returns, whatever its header says.
//! [`migrated_request`] gives such a request a stand-in reply right ([`MIGRATED_REPLY`]),
//! so that a generated dispatch function answers it as it answers a message-loop request.
//!
//! # Invariants
//! - A reply is written only when the request had a reply right; otherwise
//!   `reply_len` is 0.
//! - When a successful result does not fit in the reply buffer, the reply is an error
//!   reply with the marshaling error ([`Error::TooLarge`]), so the client is never left
//!   waiting while the server can still answer.

use crate::marshal::Marshal;
use crate::reader::MsgReader;
use crate::writer::MsgWriter;
use crate::{result_code, REPLY_ID_OFFSET, RESULT_OK};
use baton_abi::ipc::{Disposition, HEADER_SIZE};
use baton_abi::Error;

/// The stand-in reply name [`migrated_request`] gives a migrated request. No port right has
/// it: a server must never release it (a migrated request carries no rights, so
/// [`Dispatched::leftover_rights`] is not needed for one).
pub const MIGRATED_REPLY: u64 = u64::MAX;

/// Prepares a request delivered by a migrating call (the message at the start of
/// `request`) for a dispatch function: gives it the reply name [`MIGRATED_REPLY`] with
/// `MoveSendOnce`, so that the dispatch writes a reply (with that name as its
/// destination, which the kernel ignores on a migrating return: the reply always goes to
/// the caller). Returns the request's length (`header.size`).
///
/// Error [`Error::BadFormat`] when `request` does not start with a header of what the
/// kernel delivers to an activation: no reply right, no descriptors, a size within
/// `request`.
#[inline]
pub fn migrated_request(request: &mut [u8]) -> Result<usize, Error> {
    let h = crate::reader::read_header(request).ok_or(Error::BadFormat)?;
    let len = h.size as usize;
    // Bits 8..32 of `bits` (the reply disposition, the descriptor count and the reserved
    // bits) all zero, no reply name, a size within `request`.
    if h.reply != 0 || h.bits >> 8 != 0 || len < HEADER_SIZE || len > request.len() {
        return Err(Error::BadFormat);
    }
    let bytes: &mut [u8; HEADER_SIZE] = request.first_chunk_mut().ok_or(Error::BadFormat)?;
    bytes[1] = Disposition::MoveSendOnce as u8;
    bytes[16..24].copy_from_slice(&MIGRATED_REPLY.to_le_bytes());
    Ok(len)
}

/// What a dispatch function did with a request, for the server loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatched {
    /// Length of the reply written at the start of the reply buffer, to be sent as is
    /// (which uses up the request's reply right); 0 when there is nothing to send.
    pub reply_len: usize,
    /// Whether the request reached a method, which then owns the rights it carried.
    /// When false, those rights are still the server task's to release.
    pub delivered: bool,
}

impl Dispatched {
    /// The names the server loop should release (`cap_drop`) after handling `request`:
    /// the request's port descriptors when it was not delivered, and its reply right
    /// when no reply is sent.
    pub fn leftover_rights<'r>(&self, request: &'r [u8]) -> impl Iterator<Item = u64> + 'r {
        let reader = MsgReader::new(request).ok();
        let reply = match &reader {
            Some(r) if self.reply_len == 0 && r.header().reply != 0 => Some(r.header().reply),
            _ => None,
        };
        let ports = if self.delivered { None } else { reader };
        let names = ports.into_iter().flat_map(|r| {
            (0..r.descriptors()).filter_map(move |i| {
                let d = r.descriptor(i).ok()?;
                (d.kind == crate::DESC_PORT && d.value != 0).then_some(d.value)
            })
        });
        reply.into_iter().chain(names)
    }
}

/// What a dispatch that may answer in place (the generated `*_dispatch_in_place`) did:
/// [`Dispatched`], and where the reply is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answered {
    /// What was done, as the plain dispatch reports it.
    pub dispatched: Dispatched,
    /// Whether the reply was written over the request, at the start of the request's
    /// buffer: then the request was delivered, carried no rights and had a send-once
    /// reply right, which the reply (always written: `reply_len > 0`) uses up, so nothing
    /// is left to release. When false the reply, if any, is in the scratch buffer, and the
    /// request is where it was.
    pub in_place: bool,
}

impl Answered {
    /// A reply written over its request.
    #[inline(always)]
    pub fn in_place(d: Result<Dispatched, Error>) -> Result<Answered, Error> {
        d.map(|dispatched| Answered {
            dispatched,
            in_place: true,
        })
    }

    /// A reply written into the scratch buffer (or none).
    #[inline(always)]
    pub fn in_scratch(dispatched: Dispatched) -> Answered {
        Answered {
            dispatched,
            in_place: false,
        }
    }
}

/// Where the reply to a request goes: the request's reply right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyTo {
    /// The server's name for the reply right (0: the request has none).
    pub name: u64,
    /// How the reply uses it: `MoveSendOnce` or `MoveSend` (`None` when `name` is 0).
    pub disposition: Disposition,
    /// The request's id.
    pub request_id: u64,
}

impl ReplyTo {
    /// The reply route of a received request. Error [`Error::BadFormat`] if the header's
    /// reply fields are not what the kernel delivers (a `MoveSendOnce` or `MoveSend`
    /// right, or none).
    #[inline]
    pub fn of(request: &MsgReader<'_>) -> Result<ReplyTo, Error> {
        let h = request.header();
        const ONCE: u8 = Disposition::MoveSendOnce as u8;
        const SEND: u8 = Disposition::MoveSend as u8;
        let disposition = match (h.reply != 0, h.reply_disposition()) {
            (true, ONCE) => Disposition::MoveSendOnce,
            (true, SEND) => Disposition::MoveSend,
            (false, 0) => Disposition::None,
            _ => return Err(Error::BadFormat),
        };
        Ok(ReplyTo {
            name: h.reply,
            disposition,
            request_id: h.id,
        })
    }

    /// Whether there is a reply right.
    #[inline]
    pub fn is_some(&self) -> bool {
        self.name != 0
    }

    /// Answers a request that reached its method with the method's `result`.
    ///
    /// Error [`Error::TooLarge`] only when `reply` cannot hold even an error reply.
    #[inline(always)]
    pub fn respond<T: Marshal>(
        &self,
        reply: &mut [u8],
        result: Result<T, Error>,
    ) -> Result<Dispatched, Error> {
        let reply_len = match result {
            Ok(value) => match self.write(reply, Ok(&value)) {
                Ok(len) => len,
                Err(e) => self.write::<()>(reply, Err(e))?,
            },
            Err(e) => self.write::<()>(reply, Err(e))?,
        };
        Ok(Dispatched {
            reply_len,
            delivered: true,
        })
    }

    /// Answers a request that did not reach a method with the error `e`
    /// ([`Error::NotSupported`] for an unknown id, [`Error::BadFormat`] for undecodable
    /// arguments). When no reply can be written (the reply id would be a kernel id), the
    /// result has `reply_len` 0.
    ///
    /// Error [`Error::TooLarge`] only when `reply` cannot hold an error reply.
    #[inline]
    pub fn reject(&self, reply: &mut [u8], e: Error) -> Result<Dispatched, Error> {
        let reply_len = match self.write::<()>(reply, Err(e)) {
            Err(Error::InvalidArgument) => 0,
            other => other?,
        };
        Ok(Dispatched {
            reply_len,
            delivered: false,
        })
    }

    /// Writes the reply message for `result` into `reply` (nothing, length 0, without a
    /// reply right).
    #[inline(always)]
    fn write<T: Marshal>(
        &self,
        reply: &mut [u8],
        result: Result<&T, Error>,
    ) -> Result<usize, Error> {
        if !self.is_some() {
            return Ok(0);
        }
        let id = self
            .request_id
            .checked_add(REPLY_ID_OFFSET)
            .ok_or(Error::InvalidArgument)?;
        let mut w = MsgWriter::new(reply, self.name, self.disposition, 0, Disposition::None, id)?;
        match result {
            Ok(value) => {
                value.marshal_ports(&mut w)?;
                w.bytes(&RESULT_OK.to_le_bytes())?;
                value.marshal_data(&mut w)?;
            }
            Err(e) => w.bytes(&result_code(e).to_le_bytes())?,
        }
        Ok(w.finish())
    }
}
