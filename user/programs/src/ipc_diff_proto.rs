//! The protocol of `ipc_diff_server`, the server of the `ipc_diff` test (a differential
//! test of the IPC fast paths against the general path): its message ids, its control
//! requests and the words of its report, and the helpers both sides use to turn what they
//! saw into numbers. The two programs include this file with
//! `#[path = "../ipc_diff_proto.rs"] mod ipc_diff_proto;` (they are separate binaries with
//! no library between them).

// Each program uses part of the protocol.
#![allow(dead_code)]

use baton_rt::ipc::cap_info;
use baton_rt::Error;

/// Message id of the hello message (descriptors: send rights to `S` and `G`).
pub const HELLO: u64 = 1;
/// The first control id.
pub const CTL_BASE: u64 = 0x1000;
/// Control: set the mode.
pub const C_MODE: u64 = CTL_BASE + 1;
/// Control: the report of the last case message.
pub const C_REPORT: u64 = CTL_BASE + 2;
/// Control: reply, then wait on the gate before serving again.
pub const C_HOLD: u64 = CTL_BASE + 3;
/// Control: a new send right to `S`.
pub const C_SEND: u64 = CTL_BASE + 4;
/// Control: a new send-once right to `S`.
pub const C_ONCE: u64 = CTL_BASE + 5;
/// Control: a right to a new port `V`.
pub const C_VICTIM: u64 = CTL_BASE + 6;
/// Control: destroy `V`.
pub const C_KILL: u64 = CTL_BASE + 7;
/// Control: keep descriptor 0's send right as the "back" right.
pub const C_TAKE: u64 = CTL_BASE + 8;
/// Control: nothing (a message without reply right, e.g. using up a send-once right).
pub const C_NOP: u64 = CTL_BASE + 9;
/// Control: reply, then exit.
pub const C_EXIT: u64 = CTL_BASE + 10;
/// Control: a send right to the migrating port `M` (made with its activation on first use).
pub const C_MIGRATING: u64 = CTL_BASE + 11;

/// Action: echo through the reply right.
pub const A_ECHO: u64 = 1;
/// Action: echo, then reply again through the used-up name.
pub const A_TWICE: u64 = 2;
/// Action: dead-name request on the reply right, then echo.
pub const A_NOTIFY: u64 = 3;
/// Action: echo to the "back" send right.
pub const A_BACK: u64 = 4;
/// Action: queue a message (id [`SELF_ID`], no reply right) on `S`, then echo.
pub const A_SELFQ: u64 = 5;
/// The id of [`A_SELFQ`]'s message.
pub const SELF_ID: u64 = 77;

/// Report words.
pub const R_RECEIVE: usize = 0;
pub const R_BITS: usize = 1;
pub const R_SIZE: usize = 2;
pub const R_ID: usize = 3;
pub const R_DEST_IS_S: usize = 4;
pub const R_REPLY_KIND: usize = 5;
pub const R_REPLY_SLOT: usize = 6;
pub const R_HASH: usize = 7;
pub const R_TAIL: usize = 8;
pub const R_DESCRIPTORS: usize = 9;
pub const R_DESC0_KIND: usize = 10;
pub const R_ANSWER: usize = 11;
pub const R_REPLY_AFTER: usize = 12;
pub const R_SECOND: usize = 13;
pub const R_NOTIFIED: usize = 14;
pub const R_COUNT: usize = 15;
/// Number of report words.
pub const REPORT_WORDS: usize = 16;
/// [`R_ANSWER`] when no answer was sent.
pub const NO_ANSWER: u64 = 0xff;

/// A result as a number: 0, or the error's code.
pub fn code<T>(r: Result<T, Error>) -> u64 {
    match r {
        Ok(_) => 0,
        Err(e) => e as i64 as u64,
    }
}

/// The kind of right `name` is, as a number (0 for name 0, 100 + the code of an error).
pub fn kind(name: u64) -> u64 {
    if name == 0 {
        return 0;
    }
    match cap_info(name) {
        Ok(k) => k as u64,
        Err(e) => 100 + e as i64 as u64,
    }
}

/// FNV-1a of `bytes`.
pub fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
