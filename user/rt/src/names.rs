//! The name service's interface: the one definition its server (`names`) and every client
//! share (see `docs/names.md`).
//!
//! The name server keeps a bounded table of names (UTF-8, at most [`NAME_MAX`] bytes)
//! and the send rights registered under them. A task reaches it through its bootstrap
//! right when booted as `init=names,<a>,<b>,...`, or when its creator passed one on:
//!
//! ```ignore
//! use baton_rt::names::{Names, NamesClient};
//! use baton_rt::rpc::Rpc;
//!
//! let mut rpc = Rpc::new()?;
//! let mut names = NamesClient::new(&mut rpc, baton_rt::start::bootstrap());
//! names.register("echo", SendRight(my_send_right))?;
//! let echo = names.lookup("echo")?; // this task's new name for a send right
//! ```
//!
//! # Errors
//! | error | when |
//! |---|---|
//! | [`ALREADY_REGISTERED`] ([`Error::InvalidArgument`]) | `register` of a name that is taken |
//! | [`Error::NotFound`] | `lookup` or `unregister` of a name that is not registered |
//! | [`Error::TooLarge`] | a name longer than [`NAME_MAX`] bytes |
//! | [`Error::BadFormat`] | an empty name (and, from the stubs, undecodable messages) |
//! | [`Error::NoSpace`] | `register` with [`ENTRIES_MAX`] names registered |
//! | [`Error::DeadName`] | `register` of a right whose port is already destroyed |

use baton_idl_rt::{Error, SendRight};

/// The longest name, in bytes.
pub const NAME_MAX: usize = 64;

/// The most names the server keeps.
pub const ENTRIES_MAX: usize = 64;

/// The error of `register` for a name that is already registered. The ABI has no
/// "already exists" code; within the name service this one is unambiguous.
pub const ALREADY_REGISTERED: Error = Error::InvalidArgument;

/// The name service. Request ids from `0x6e61_6d65_0000` (`"name"` in ASCII, shifted).
#[baton_idl::interface(base = 0x6e61_6d65_0000)]
pub trait Names {
    /// Registers a copy of the send right `port` under `name`.
    fn register(&mut self, name: &str, port: SendRight) -> Result<(), Error>;

    /// A copy of the send right registered under `name` (the caller's new name for it).
    fn lookup(&mut self, name: &str) -> Result<SendRight, Error>;

    /// Removes `name` and releases the server's send right.
    fn unregister(&mut self, name: &str) -> Result<(), Error>;
}
