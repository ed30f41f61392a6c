//! Remote calls over `ipc_msg`: [`Rpc`], the [`Transport`] that `baton-idl` client stubs
//! send through, and [`serve`], the loop of a server (see `docs/names.md` and
//! `docs/idl.md`).
//!
//! Both sides use the calling thread's [`IpcBuffer`], so that calls and replies can take
//! the kernel's fast path (a receiver blocked with an IPC buffer gets the message copied
//! straight in, and an RPC hands the sender's kernel stack to the receiver).
//!
//! A client:
//!
//! ```ignore
//! let mut rpc = Rpc::new()?;
//! let mut names = NamesClient::new(&mut rpc, baton_rt::start::bootstrap());
//! let fs = names.lookup("fs")?;
//! ```
//!
//! A server implements [`Service`] (usually a generated `*_dispatch` call, plus kernel
//! notifications) and runs [`serve`] on its port.
//!
//! # Invariants
//! - An [`Rpc`] owns its thread's IPC buffer (a thread has one registered buffer: make one
//!   `Rpc` per thread and lend it, `&mut Rpc` is a transport too) and the receive right of
//!   a reply port on which nothing but the reply to the call in progress can arrive: each
//!   call sends a fresh send-once right to it, and after a failed call (a timeout, say)
//!   the port is replaced, so a late reply is never taken for a later call's.
//! - [`serve`] uses up or releases the reply right of every request it receives and
//!   releases every right a request brought that no method took ([`Dispatched`]); it
//!   never panics on what it receives.

use baton_abi::ipc::{
    Disposition, MsgHeader, HEADER_SIZE, IPC_BUFFER_SIZE, MSG_RECEIVE, MSG_SEND, NOTIFY_DEAD_NAME,
    NOTIFY_INTERRUPT, NOTIFY_NO_SENDERS, NOTIFY_SEND_ONCE,
};
use baton_abi::{Error, FOREVER};
use baton_idl_rt::transport::{message_len, set_reply};
use baton_idl_rt::{Answered, Dispatched, Transport};

use crate::ipc::{cap_drop, cap_info, port_allocate, IpcBuffer};

/// The client side: the thread's IPC buffer and reply port. See the module invariants.
pub struct Rpc {
    ipc: IpcBuffer,
    /// Receive right of the reply port (0 after a replacement failed: calls then fail).
    reply_port: u64,
    /// Bound of each blocking phase of a call ([`FOREVER`] by default).
    timeout_ns: u64,
}

impl Rpc {
    /// A transport on a fresh IPC buffer (which replaces any the thread had registered)
    /// and a fresh reply port.
    pub fn new() -> Result<Rpc, Error> {
        Rpc::with_buffer(IpcBuffer::new()?)
    }

    /// A transport on the thread's IPC buffer `ipc`, with a fresh reply port.
    pub fn with_buffer(ipc: IpcBuffer) -> Result<Rpc, Error> {
        Ok(Rpc {
            ipc,
            reply_port: port_allocate(0)?,
            timeout_ns: FOREVER,
        })
    }

    /// Bounds each blocking phase of later calls (sending to a full queue, waiting for
    /// the reply) by `ns` nanoseconds; [`FOREVER`] for no bound. A call that times out
    /// fails with [`Error::TimedOut`].
    pub fn set_timeout(&mut self, ns: u64) {
        self.timeout_ns = ns;
    }

    /// The reply port's receive right.
    pub fn reply_port(&self) -> u64 {
        self.reply_port
    }

    /// The IPC buffer, for a server loop ([`serve`]) or a hand-made message on the same
    /// thread.
    pub fn ipc(&mut self) -> &mut IpcBuffer {
        &mut self.ipc
    }

    /// Replaces the reply port after a failed call: whatever the old one would still
    /// receive (a late reply) is destroyed with it. Out of line: the stubs' calls keep
    /// fewer registers live for a path they seldom take.
    #[cold]
    #[inline(never)]
    fn renew_reply_port(&mut self) {
        if self.reply_port != 0 {
            let _ = cap_drop(self.reply_port);
        }
        self.reply_port = port_allocate(0).unwrap_or(0);
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        if self.reply_port != 0 {
            let _ = cap_drop(self.reply_port);
        }
    }
}

impl Transport for Rpc {
    #[inline]
    fn buffer(&mut self) -> &mut [u8] {
        self.ipc.bytes()
    }

    #[inline]
    fn call(&mut self, len: usize) -> Result<usize, Error> {
        if message_len(self.ipc.view()) != Ok(len) {
            return Err(Error::InvalidArgument);
        }
        self.call_written(len)
    }

    /// The kernel sends the header's size from the IPC buffer, which a generated stub has
    /// just written as `len`.
    #[inline]
    fn call_written(&mut self, _len: usize) -> Result<usize, Error> {
        if self.reply_port == 0 {
            return Err(Error::InvalidName);
        }
        set_reply(self.ipc.bytes(), self.reply_port, Disposition::MakeSendOnce)?;
        if let Err(e) = self
            .ipc
            .msg(MSG_SEND | MSG_RECEIVE, self.reply_port, self.timeout_ns)
        {
            // The request may have gone out, and its reply may still come: not here.
            self.renew_reply_port();
            return Err(e);
        }
        // The header's size as it is: the stub checks the reply (`open_reply` refuses a
        // size beyond the buffer or short of a header, as `message_len` would).
        Ok(MsgHeader::from_bytes(self.ipc.view()).map_or(0, |h| h.size as usize))
    }
}

/// A kernel notification (a message with an id from `KERNEL_ID_BASE` up, which only the
/// kernel can send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notification {
    /// The port of this send right (with a dead-name request) was destroyed: the name
    /// is now a dead name, still to be released.
    DeadName(u64),
    /// The port has no send rights left; the receive right's name as it was when asked.
    NoSenders(u64),
    /// A send-once right to the port was released unused.
    SendOnce,
    /// An interrupt line bound to the port fired (its number); acknowledge it with
    /// `host::irq_ack`.
    Interrupt(u64),
}

impl Notification {
    /// The notification `msg` is, or `None` if it is not one.
    pub fn of(msg: &[u8]) -> Option<Notification> {
        let h = MsgHeader::from_bytes(msg)?;
        let word = || {
            let bytes = msg.get(HEADER_SIZE..HEADER_SIZE + 8)?;
            Some(u64::from_le_bytes(bytes.try_into().ok()?))
        };
        match h.id {
            NOTIFY_DEAD_NAME => word().map(Notification::DeadName),
            NOTIFY_NO_SENDERS => word().map(Notification::NoSenders),
            NOTIFY_SEND_ONCE => Some(Notification::SendOnce),
            NOTIFY_INTERRUPT => word().map(Notification::Interrupt),
            _ => None,
        }
    }
}

/// A server, as [`serve`] runs it.
pub trait Service {
    /// Handles one message received on the server's port, a request or a kernel
    /// [`Notification`], writing any reply into `reply`: usually a generated
    /// `*_dispatch(self, request, reply)`. An `Err` is treated as "nothing delivered, no
    /// reply" (the loop releases the request's rights, and the client gets `DeadName`).
    fn handle(&mut self, request: &[u8], reply: &mut [u8]) -> Result<Dispatched, Error>;

    /// Handles the message received at the start of `buf` (the IPC buffer; `len` bytes,
    /// within it) as [`Service::handle`] does, but may answer in place: a reply written
    /// over the request, at the start of `buf` ([`Answered::in_place`]), goes out with no
    /// copy. The default hands `buf[..len]` to [`Service::handle`] with its reply in
    /// `scratch`. A service made of a generated dispatch overrides it with
    /// `*_dispatch_in_place(self, buf, len, scratch)`, whose fast path answers fixed-size
    /// calls in place (`docs/idl.md`, "Cost").
    fn handle_in_place(
        &mut self,
        buf: &mut [u8; IPC_BUFFER_SIZE],
        len: usize,
        scratch: &mut [u8; IPC_BUFFER_SIZE],
    ) -> Result<Answered, Error> {
        let request = buf.get(..len).unwrap_or(&[]);
        self.handle(request, scratch).map(Answered::in_scratch)
    }

    /// Handles a request delivered by a migrating call (`crate::migrate::serve`), as it
    /// arrived at the start of the activation's buffer `buf`: no reply right, since the
    /// reply goes back to the caller when the activation returns. As
    /// [`Service::handle_in_place`] after [`baton_idl_rt::migrated_request`] has given the
    /// request a stand-in reply right (what the default does); a service made of a
    /// generated dispatch overrides it with `*_dispatch_migrated(self, buf, scratch)`,
    /// whose fast path takes a fixed-size call as the kernel delivered it, with no rewrite
    /// of its header. Error [`Error::BadFormat`] for a request that is not what the kernel
    /// delivers to an activation.
    fn handle_migrated(
        &mut self,
        buf: &mut [u8; IPC_BUFFER_SIZE],
        scratch: &mut [u8; IPC_BUFFER_SIZE],
    ) -> Result<Answered, Error> {
        let len = baton_idl_rt::migrated_request(buf)?;
        self.handle_in_place(buf, len, scratch)
    }

    /// Whether [`serve`] should return; asked after each message (whose reply is then
    /// sent on its own).
    fn done(&self) -> bool {
        false
    }
}

/// What a [`Service`] returns for a message that needs no reply and brought no rights (a
/// notification it has dealt with).
pub const HANDLED: Dispatched = Dispatched {
    reply_len: 0,
    delivered: true,
};

/// Copies the reply `src[..len]` to the start of `dst`; false (nothing copied) if `len`
/// exceeds the buffers. A short reply (the usual one: a header, the result code and a
/// word or two) goes as a fixed copy of [`SHORT_REPLY`] bytes, a few moves where a
/// `memcpy` call of any length costs several times more; the bytes past `len` that come
/// with it are the server's own and are not sent.
#[inline(always)]
pub(crate) fn copy_reply(
    dst: &mut [u8; IPC_BUFFER_SIZE],
    src: &[u8; IPC_BUFFER_SIZE],
    len: usize,
) -> bool {
    if len <= SHORT_REPLY {
        dst[..SHORT_REPLY].copy_from_slice(&src[..SHORT_REPLY]);
        true
    } else if let (Some(d), Some(s)) = (dst.get_mut(..len), src.get(..len)) {
        d.copy_from_slice(s);
        true
    } else {
        false
    }
}

/// The longest reply [`copy_reply`] copies with fixed moves: a header, a result code and
/// two words.
const SHORT_REPLY: usize = HEADER_SIZE + 24;

/// How long a combined reply-and-receive may block when the reply goes through a *send*
/// right: on sending the reply (the client's reply port is full: a client that misbehaves
/// cannot hold the server longer than this) and then on waiting for the next request (after
/// which the loop waits without a bound). A reply through a send-once right (the usual
/// `MakeSendOnce` reply right) never blocks, since send-once messages pass a port's queue
/// limit, so it is sent with no timeout: the same behaviour, and the form the kernel's RPC
/// fast path carries (it declines calls with a timeout).
pub const REPLY_TIMEOUT_NS: u64 = 10_000_000;

/// The server loop: receives messages on `port` (a receive right) into the IPC buffer
/// `ipc`, hands each to `service`, releases the rights [`Dispatched::leftover_rights`]
/// names, and sends the reply together with receiving the next message, in one
/// `ipc_msg(MSG_SEND | MSG_RECEIVE)` as Mach servers do. Returns `Ok` when
/// [`Service::done`] says so, after sending the last reply.
///
/// A reply that cannot be sent (the client is gone, or its reply port stays full for
/// [`REPLY_TIMEOUT_NS`]) is dropped, and so is its reply right. Errors: a plain receive
/// failed (`port` is not a receive right or was destroyed, or the name space is full).
pub fn serve<S: Service + ?Sized>(
    ipc: &mut IpcBuffer,
    port: u64,
    service: &mut S,
) -> Result<(), Error> {
    let mut reply = [0u8; IPC_BUFFER_SIZE];
    // The reply right the reply waiting in the IPC buffer uses up (0: no reply waiting),
    // and the options and timeout of the next `ipc_msg` (a reply through a send-once right
    // cannot block, so it goes with the receive's `FOREVER`).
    let mut pending = 0u64;
    let mut options = MSG_RECEIVE;
    let mut timeout = FOREVER;
    loop {
        if let Err(e) = ipc.msg(options, port, timeout) {
            if options == MSG_RECEIVE {
                return Err(e);
            }
            // Either the send failed, which changes nothing (the reply right is still
            // ours: release it), or the receive did (say, it timed out); in both cases
            // the next round is a plain receive, whose errors are the loop's.
            if pending != 0 && cap_info(pending).is_ok() {
                let _ = cap_drop(pending);
            }
            pending = 0;
            options = MSG_RECEIVE;
            timeout = FOREVER;
            continue;
        }
        pending = 0;
        options = MSG_RECEIVE;
        timeout = FOREVER;
        // The request's size bounds it (the dispatch checks the rest as it decodes).
        let len = MsgHeader::from_bytes(ipc.view()).map_or(0, |h| h.size as usize);
        if !(HEADER_SIZE..=IPC_BUFFER_SIZE).contains(&len) {
            continue;
        }
        const NOTHING: Answered = Answered {
            dispatched: Dispatched {
                reply_len: 0,
                delivered: false,
            },
            in_place: false,
        };
        let a = service
            .handle_in_place(ipc.bytes(), len, &mut reply)
            .unwrap_or(NOTHING);
        if a.in_place {
            // Delivered, no rights, and a send-once reply right, which the reply (its
            // destination) uses up and which never blocks: the reply goes with the next
            // receive, as it is, with no timeout.
            if a.dispatched.reply_len > 0 {
                pending = MsgHeader::from_bytes(ipc.view()).map_or(0, |h| h.dest);
                options = MSG_SEND | MSG_RECEIVE;
            }
        } else if let Some((name, t)) = reply_from_scratch(ipc, &reply, len, a.dispatched) {
            pending = name;
            options = MSG_SEND | MSG_RECEIVE;
            timeout = t;
        }
        if service.done() {
            if options != MSG_RECEIVE && ipc.msg(MSG_SEND, 0, 0).is_err() && pending != 0 {
                let _ = cap_drop(pending);
            }
            return Ok(());
        }
    }
}

/// The rest of [`serve`]'s round for a request not answered in place (`len` bytes at the
/// start of `ipc`, dispatched as `d`, its reply if any in `reply`): releases the rights
/// [`Dispatched::leftover_rights`] names and copies the reply into the IPC buffer.
/// Returns the reply right the reply uses up and the timeout it goes with
/// ([`REPLY_TIMEOUT_NS`] for a send right, `FOREVER` for a send-once right), or `None`
/// when there is no reply to send. Out of line: the loop's way for a reply written in
/// place keeps fewer registers live.
#[inline(never)]
fn reply_from_scratch(
    ipc: &mut IpcBuffer,
    reply: &[u8; IPC_BUFFER_SIZE],
    len: usize,
    d: Dispatched,
) -> Option<(u64, u64)> {
    let h = MsgHeader::from_bytes(ipc.view())?;
    let request = ipc.view().get(..len).unwrap_or(&[]);
    // A delivered request whose reply goes out leaves nothing to release: skip the walk
    // over its header and descriptors.
    if !d.delivered || d.reply_len == 0 {
        for name in d.leftover_rights(request) {
            let _ = cap_drop(name);
        }
    }
    if d.reply_len > 0 && copy_reply(ipc.bytes(), reply, d.reply_len) {
        let timeout = if h.reply_disposition() == Disposition::MoveSendOnce as u8 {
            FOREVER
        } else {
            REPLY_TIMEOUT_NS
        };
        Some((h.reply, timeout))
    } else {
        None
    }
}
