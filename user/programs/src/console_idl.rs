//! The console's interface, shared by its server (`console`) and its clients (`shell`),
//! which include this file with `#[path = "../console_idl.rs"] mod console_idl;`.
//!
//! The server registers its port under [`CONSOLE_NAME`] with the name server.

// Each program uses one side of the interface: the client or the server.
#![allow(dead_code)]

use baton_rt::idl_rt::{Error, SendRight};

/// The name the console registers with the name server.
pub const CONSOLE_NAME: &str = "console";

/// Longest line `read_line` returns (longer input is not taken).
pub const LINE_MAX: usize = 200;

/// The id of the one-way message (header only) the console sends to the port named with
/// `interrupts_to` when Ctrl-C is typed while nobody reads a line.
pub const CONSOLE_INTERRUPT_ID: u64 = 0x636f_6e73_1000;

/// A serial console. Request ids from `0x636f_6e73_0000` (`"cons"` in ASCII, shifted).
#[baton_rt::interface(base = 0x636f_6e73_0000, rt = baton_rt::idl_rt)]
pub trait Console {
    /// Writes `text` to the console (a `\n` goes out as `\r\n`).
    fn write(&mut self, text: &[u8]) -> Result<(), Error>;

    /// Writes `prompt`, then returns the next line typed, edited (backspace, left and
    /// right arrows, up and down through the history), without its end. Ctrl-C gives an
    /// empty line. One reader at a time: [`Error::Busy`] while another waits.
    fn read_line(&mut self, prompt: &[u8]) -> Result<&[u8], Error>;

    /// From now on, Ctrl-C typed while nobody reads a line sends a message with id
    /// [`CONSOLE_INTERRUPT_ID`] to `port` (replacing any port named before).
    fn interrupts_to(&mut self, port: SendRight) -> Result<(), Error>;
}
