//! The fixed-shape fast path of the generated stubs and dispatch.
//!
//! Most calls have arguments and results of a size known in advance (integers, arrays,
//! `()`, tuples of these: [`crate::Unmarshal::FIXED`]). Their requests and replies have one
//! shape each, so instead of decoding the header field by field the generated code checks
//! the header's first word (flags and size) against a constant, and the id and the result
//! code against theirs: [`request`] on the server, [`reply`] on the client. A message that
//! does not have exactly that shape is handed to the general path
//! ([`crate::MsgReader::new`], [`crate::ReplyTo::of`], [`crate::client::open_reply`]),
//! which decides as it always did; so the fast path changes how much work a message costs,
//! never what the result is (the tests check both paths against each other).
//!
//! # Invariants
//! - [`request`] and [`reply`] accept only messages the general path accepts too, and
//!   position the reader where the general path would be after the same checks.

use crate::reader::MsgReader;
use crate::{MsgHeader, HEADER_SIZE, MIGRATED_REPLY, REPLY_ID_OFFSET, RESULT_OK};
use baton_abi::ipc::Disposition;

/// The first eight bytes of a header read as one little-endian word: `bits` in the low
/// half, `size` in the high half.
pub const fn header_word(bits: u32, size: usize) -> u64 {
    ((size as u64) << 32) | bits as u64
}

/// The bits of a request's first word that [`request`] compares: all but the
/// destination's disposition (byte 0), which no receiver looks at.
const REQUEST_MASK: u64 = !0xff;

/// The bits of a reply's first word that [`reply`] compares: all but the two
/// dispositions (bytes 0 and 1), which the client's general path does not look at either.
const REPLY_MASK: u64 = !0xffff;

/// The header and first data word of `msg`, if it has them.
#[inline(always)]
fn words(msg: &[u8]) -> Option<(MsgHeader, u64)> {
    let b: &[u8; HEADER_SIZE + 8] = msg.first_chunk()?;
    let word = |at: usize| header_word_at(b, at);
    let first = word(0);
    let header = MsgHeader {
        bits: first as u32,
        size: (first >> 32) as u32,
        dest: word(8),
        reply: word(16),
        id: word(24),
    };
    Some((header, word(32)))
}

/// The little-endian word at byte `at` of a message's first bytes `b`.
#[inline(always)]
fn header_word_at<const N: usize>(b: &[u8; N], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The request at the start of `request`, when it has exactly the shape of a request
/// whose arguments are `data` bytes of fixed-size values: `HEADER_SIZE + data` bytes
/// (within `request`), no descriptors, no reserved bits, and a send-once reply right
/// (`MoveSendOnce` and a nonzero name). Returns a reader at its data and the reply right's
/// name; `None` for any other message, which the general path then decodes.
///
/// The caller has matched the id already. A request with no data at all is only a header,
/// so `request` need not hold more than [`HEADER_SIZE`] bytes then.
#[inline(always)]
pub fn request(request: &[u8], data: usize) -> Option<(MsgReader<'_>, u64)> {
    let size = HEADER_SIZE.checked_add(data)?;
    let b: &[u8; HEADER_SIZE] = request.first_chunk()?;
    let word = |at: usize| header_word_at(b, at);
    let first = word(0);
    let reply = word(16);
    let expect = header_word((Disposition::MoveSendOnce as u32) << 8, size);
    if first & REQUEST_MASK != expect || reply == 0 {
        return None;
    }
    let msg = request.get(..size)?;
    let header = MsgHeader {
        bits: first as u32,
        size: (first >> 32) as u32,
        dest: word(8),
        reply,
        id: word(24),
    };
    Some((
        MsgReader::without_descriptors(msg, header, HEADER_SIZE),
        reply,
    ))
}

/// The request at the start of `request` as a migrating call delivers it to an activation
/// (no reply right: the reply goes back to the caller when the activation returns), when
/// it has exactly the shape of a request whose arguments are `data` bytes of fixed-size
/// values: `HEADER_SIZE + data` bytes (within `request`), no descriptors, no reserved bits,
/// no reply disposition and a reply name of 0. Returns a reader at its data and
/// [`MIGRATED_REPLY`], the reply name [`crate::migrated_request`] would have given it;
/// `None` for any other message, which the general path then decodes (after
/// [`crate::migrated_request`]). One compare of the header's first word and one of the
/// reply name, where [`crate::migrated_request`] followed by [`request`] checks the header
/// twice and rewrites its reply fields.
///
/// So a dispatch answers a migrated request as it would answer the same request after
/// [`crate::migrated_request`], without the rewrite.
#[inline(always)]
pub fn migrated(request: &[u8], data: usize) -> Option<(MsgReader<'_>, u64)> {
    let size = HEADER_SIZE.checked_add(data)?;
    let b: &[u8; HEADER_SIZE] = request.first_chunk()?;
    let word = |at: usize| header_word_at(b, at);
    let first = word(0);
    if first & REQUEST_MASK != header_word(0, size) || word(16) != 0 {
        return None;
    }
    let msg = request.get(..size)?;
    let header = MsgHeader {
        bits: (first as u32 & 0xff) | (Disposition::MoveSendOnce as u32) << 8,
        size: size as u32,
        dest: word(8),
        reply: MIGRATED_REPLY,
        id: word(24),
    };
    Some((
        MsgReader::without_descriptors(msg, header, HEADER_SIZE),
        MIGRATED_REPLY,
    ))
}

/// The reply `buf[..len]` to the request `request_id`, when it is a success with exactly
/// `data` bytes of fixed-size result: `HEADER_SIZE + 8 + data` bytes, no descriptors, no
/// reserved bits, the reply id (`request_id + REPLY_ID_OFFSET`) and result code
/// [`RESULT_OK`]. Returns a reader at the result; `None` for anything else (an error
/// reply, a notification, a malformed message), which [`crate::client::open_reply`]
/// then decides.
#[inline(always)]
pub fn reply(buf: &[u8], len: usize, request_id: u64, data: usize) -> Option<MsgReader<'_>> {
    let size = (HEADER_SIZE + 8).checked_add(data)?;
    let (header, code) = words(buf)?;
    let first = header_word(header.bits, header.size as usize);
    if len != size
        || first & REPLY_MASK != header_word(0, size)
        || Some(header.id) != request_id.checked_add(REPLY_ID_OFFSET)
        || code != RESULT_OK
    {
        return None;
    }
    let msg = buf.get(..size)?;
    Some(MsgReader::without_descriptors(msg, header, HEADER_SIZE + 8))
}

/// The id of the message at the start of `msg`, if it has a header: what the generated
/// dispatch's fast path matches on before [`request`] checks the rest.
#[inline(always)]
pub fn request_id(msg: &[u8]) -> Option<u64> {
    let b: &[u8; HEADER_SIZE] = msg.first_chunk()?;
    Some(header_word_at(b, 24))
}
