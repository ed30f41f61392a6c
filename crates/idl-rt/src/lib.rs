//! `baton-idl-rt`: the runtime of Baton's interface definition macro (`baton-idl`), the
//! role of Mach's MIG runtime and Accent's MatchMaker support code.
//!
//! The macro `#[baton_idl::interface(base = N)]` turns a trait into a client stub, a server
//! dispatch function and message-id constants; the code it generates calls this crate:
//!
//! - [`MsgWriter`] builds a message (header, port descriptors, in-line data) in a caller's
//!   buffer, and [`MsgReader`] takes a received one apart, bounds-checking every read;
//! - [`Marshal`] and [`Unmarshal`] put values into messages and take them out, for the
//!   types listed in [`marshal`], and the port-right types of [`rights`];
//! - [`Transport`] is what a client stub sends its requests through (`baton-rt`
//!   implements it with the `ipc_msg` system call; tests with an in-process mock);
//! - [`client`] and [`server`] hold the request/reply conventions the generated code
//!   follows ([`REPLY_ID_OFFSET`], result codes), usable by hand-written code too.
//!
//! `docs/idl.md` describes the wire format and the generated items in prose.
//!
//! # Wire format (summary)
//! A message is the ABI's [`MsgHeader`], then its port [`Descriptor`]s, then in-line data
//! (see [`baton_abi::ipc`]). Arguments are written in declaration order twice: first every
//! port right as a descriptor, then every in-line value. In-line values are little-endian
//! and packed tightly (no alignment padding). A reply has id = request id +
//! [`REPLY_ID_OFFSET`]; its data starts with a `u64` result code (0 = `Ok`, else the
//! [`Error`] code), followed on success by the marshaled return value.
//!
//! # Invariants
//! - Nothing in this crate panics on any input bytes: every access to a buffer is a
//!   checked `get`, every size computation checked arithmetic; malformed messages are
//!   [`Error::BadFormat`], values that do not fit are [`Error::TooLarge`], misuse by the
//!   writer's caller is [`Error::InvalidArgument`].
//! - A [`MsgWriter`] never writes past its buffer nor produces a message larger than
//!   [`MSG_SIZE_MAX`] or with more than [`DESCRIPTORS_MAX`] descriptors.
//! - A [`MsgReader`] never reads past `header.size` nor past the received bytes.
#![no_std]
#![forbid(unsafe_code)]

pub mod client;
pub mod fixed;
pub mod marshal;
pub mod reader;
pub mod rights;
pub mod server;
pub mod transport;
pub mod writer;

#[cfg(test)]
mod tests;

pub use baton_abi::ipc::{
    Descriptor, Disposition, MsgHeader, DESCRIPTORS_MAX, DESCRIPTOR_SIZE, DESC_PORT, HEADER_SIZE,
    IPC_BUFFER_SIZE, KERNEL_ID_BASE, MSG_SIZE_MAX, NOTIFY_SEND_ONCE,
};
pub use baton_abi::Error;
pub use marshal::{FixedBytes, Marshal, Unmarshal};
pub use reader::MsgReader;
pub use rights::{MakeSend, MakeSendOnce, MoveSend, ReceiveRight, Right, SendOnceRight, SendRight};
pub use server::{migrated_request, Answered, Dispatched, ReplyTo, MIGRATED_REPLY};
pub use transport::Transport;
pub use writer::MsgWriter;

/// A reply's id is its request's id plus this (as in MIG). An interface therefore has at
/// most this many operations, so that its request and reply ids never overlap.
pub const REPLY_ID_OFFSET: u64 = 100;

/// The result code of a successful reply (the first in-line `u64` of every reply).
pub const RESULT_OK: u64 = 0;

/// The result code that stands for `e` in a reply: its positive ABI code.
pub const fn result_code(e: Error) -> u64 {
    e as i64 as u64
}

/// The error a nonzero result code stands for; a code this ABI does not know (which a
/// well-behaved server never sends) is [`Error::BadFormat`].
pub const fn error_from_code(code: u64) -> Error {
    match code {
        // Codes are small positive numbers; anything else is no known error.
        1..=0xffff => match Error::from_code(code as i64) {
            Some(e) => e,
            None => Error::BadFormat,
        },
        _ => Error::BadFormat,
    }
}
