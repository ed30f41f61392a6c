//! The echo interface of the name-service test, shared by its client (`names_test`) and
//! its server (`names_echo`), which include this file with
//! `#[path = "../echo_idl.rs"] mod echo_idl;` (the programs are separate binaries with no
//! library between them).

// Each program uses one side of the interface: the client or the server.
#![allow(dead_code)]

use baton_rt::idl_rt::Error;

/// A small service to call through the name service. Request ids from `0x6563_686f_0000`
/// (`"echo"` in ASCII, shifted).
#[baton_rt::interface(base = 0x6563_686f_0000, rt = baton_rt::idl_rt)]
pub trait Echo {
    /// `data` back (the client's result borrows its transport's buffer).
    fn echo(&mut self, data: &[u8]) -> Result<&[u8], Error>;

    /// `a + b`; [`Error::TooLarge`] on overflow.
    fn add(&mut self, a: u64, b: u64) -> Result<u64, Error>;

    /// Replies, then the server exits.
    fn quit(&mut self) -> Result<(), Error>;
}
