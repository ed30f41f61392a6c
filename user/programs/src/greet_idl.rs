//! The `Greet` interface of the example in `docs/programs.md`, shared by its server
//! (`greet_server`) and its client (`greet_client`), which include this file with
//! `#[path = "../greet_idl.rs"] mod greet_idl;`.

// Each program uses one side of the interface.
#![allow(dead_code)]

use baton_rt::idl_rt::Error;

/// A greeting service. Request ids from 0x6772_0000 (`"gr"`).
#[baton_rt::interface(base = 0x6772_0000, rt = baton_rt::idl_rt)]
pub trait Greet {
    /// "Hello, NAME!" (the result borrows the transport's buffer on the client's side).
    fn hello(&mut self, name: &[u8]) -> Result<&[u8], Error>;
    /// How many greetings the server has made.
    fn count(&mut self) -> Result<u64, Error>;
}
