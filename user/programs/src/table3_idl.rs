//! The `Table3` interface: the calls of seed 001's Table 3 (Ford & Lepreau, "Kernel Time +
//! User Marshaling": a null RPC, 32 bytes in, 1 KiB in) made through the interface macro's
//! stubs and dispatch, plus a few calls the `migrate_idl` test checks results with; and the
//! client's side of starting its server, `idl_server`, as a message-loop server or a
//! migrating one. Included by `bench`, `migrate_idl` and `idl_server` with
//! `#[path = "../table3_idl.rs"] mod table3_idl;` (they are separate binaries with no
//! library between them).

// Each program uses part of it.
#![allow(dead_code)]

use baton_rt::idl_rt::Error;
use baton_rt::ipc::{
    cap_drop, port_allocate, Descriptor, Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::{spawn_with, FOREVER};

/// Table 3's calls, and the test's. Request ids from `0x7461_6233_0000` (`"tab3"`).
#[baton_rt::interface(base = 0x7461_6233_0000, rt = baton_rt::idl_rt)]
pub trait Table3 {
    /// Table 3's "Null RPC": nothing in, nothing out.
    fn null(&mut self) -> Result<(), Error>;

    /// Table 3's "32 In": 32 bytes in line, nothing out. The server notes the first and
    /// last bytes ([`Table3::last`]).
    fn in32(&mut self, data: [u8; 32]) -> Result<(), Error>;

    /// Table 3's "1K In": 1,024 bytes in line, nothing out; noted as [`Table3::in32`].
    fn in1k(&mut self, data: [u8; 1024]) -> Result<(), Error>;

    /// The calls of `null`, `in32` and `in1k` so far, and the first and last bytes of the
    /// last `in32` or `in1k`.
    fn last(&mut self) -> Result<(u64, u8, u8), Error>;

    /// The sum of the bytes of `data`.
    fn sum(&mut self, data: [u8; 1024]) -> Result<u64, Error>;

    /// `a + b`; [`Error::TooLarge`] on overflow.
    fn add(&mut self, a: u64, b: u64) -> Result<u64, Error>;

    /// Fails with the error whose code is `code` ([`Error::InvalidArgument`] if none is).
    fn fail(&mut self, code: u64) -> Result<(), Error>;

    /// Sleeps `ns` nanoseconds in the server (holding the service, so calls to it wait),
    /// then returns how many calls of any kind the service had taken before this one.
    fn hold(&mut self, ns: u64) -> Result<u64, Error>;

    /// Replies, then the server stops serving and exits.
    fn quit(&mut self) -> Result<(), Error>;
}

/// One-way, server → bootstrap: carries a send right to the server's port.
pub const HELLO: u64 = 1;
/// One-way, client → server: data = activations (u64; 0: a message-loop server).
pub const CONFIG: u64 = 2;
/// One-way, server → bootstrap: serving.
pub const READY: u64 = 3;

/// Starts an `idl_server` serving [`Table3`] with `activations` activations (migrating),
/// or with a message loop on its own thread when 0; waits until it serves and returns the
/// send right to its port. [`Error::BadFormat`] if the server does not follow the protocol.
pub fn start(buf: &mut IpcBuffer, activations: u64) -> Result<u64, Error> {
    let boot = port_allocate(0)?;
    spawn_with("idl_server", boot)?;
    buf.msg(MSG_RECEIVE, boot, FOREVER)?;
    let server = match (buf.header().id, buf.descriptor(0)) {
        (HELLO, Some(d)) => d.value,
        _ => return Err(Error::BadFormat),
    };
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: server,
        id: CONFIG,
        ..MsgHeader::default()
    };
    buf.set(h, &[], &activations.to_le_bytes())?;
    buf.msg(MSG_SEND, 0, FOREVER)?;
    buf.msg(MSG_RECEIVE, boot, FOREVER)?;
    if buf.header().id != READY {
        return Err(Error::BadFormat);
    }
    cap_drop(boot)?;
    Ok(server)
}

/// The server's side of [`start`]'s first steps: [`HELLO`] to `boot` with a send right to
/// `port`, then the [`CONFIG`] message's activation count.
pub fn hello(buf: &mut IpcBuffer, boot: u64, port: u64) -> Result<u64, Error> {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: boot,
        id: HELLO,
        ..MsgHeader::default()
    };
    buf.set(h, &[Descriptor::port(port, Disposition::MakeSend)], &[])?;
    buf.msg(MSG_SEND, 0, FOREVER)?;
    buf.msg(MSG_RECEIVE, port, FOREVER)?;
    if buf.header().id != CONFIG {
        return Err(Error::BadFormat);
    }
    let cfg = buf.data();
    Ok(cfg
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes))
}

/// The server's [`READY`] to `boot` (whose right it then releases).
pub fn ready(buf: &mut IpcBuffer, boot: u64) -> Result<(), Error> {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: boot,
        id: READY,
        ..MsgHeader::default()
    };
    buf.set(h, &[], &[])?;
    buf.msg(MSG_SEND, 0, FOREVER)?;
    cap_drop(boot)
}
