//! The rights half of the IPC fast path: which messages it may carry, and the right moves
//! it makes, split so that the kernel can decide everything before it changes anything.
//!
//! The fast path (the continuations paper's Figure 2, seL4's `fastpath_call` and
//! `fastpath_reply_recv`) carries the two messages of an RPC: the request, whose
//! destination is a send right used with `CopySend` and whose reply right is a
//! `MakeSendOnce` of a receive right the sender holds; and the reply, whose destination is
//! that send-once right used with `MoveSendOnce` and which carries no reply right. Neither
//! has descriptors. Anything else, including every malformed message, takes the general
//! path, which also produces the errors: [`Ipc::fast_plan`] never fails, it only declines.
//!
//! The moves are exactly those of [`Ipc::copyin`] followed by [`Ipc::copyout`] for such a
//! message, with no [`Message`](super::Message) in between: a moved send-once destination
//! is used up (no notification), a copied send right changes no count, and a
//! `MakeSendOnce` reply becomes one new send-once right in the receiver's space.
//!
//! The work is split so that the kernel decides everything before it changes anything, and
//! looks every name and port up once: [`Ipc::fast_plan`] reads, the kernel checks the two
//! threads and the receiver's room, then [`Ipc::fast_commit`] writes.
//!
//! # Invariants
//! - [`Ipc::fast_plan`] has no side effects; [`Ipc::fast_commit`] is called only with a
//!   [`FastPlan`] it returned for the same sender space, with nothing changed in between,
//!   and only when the receiver's space has room for the reply right.

use super::{Held, Ipc, PortId, Space};
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, KERNEL_ID_BASE};

/// A message the fast path can carry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastMsg {
    /// The destination port (alive).
    pub dest: PortId,
    /// The sender's name of the send-once destination right the message uses up, if the
    /// destination is moved (`MoveSendOnce`).
    pub consumed: Option<u64>,
    /// The port a `MakeSendOnce` reply right names (alive, its receive right held by the
    /// sender).
    pub reply: Option<PortId>,
    /// The message id.
    pub id: u64,
    /// Its size in bytes (header and in-line data).
    pub size: usize,
}

/// A fast-path transfer decided ([`Ipc::fast_plan`]): the message, the port the sender
/// receives on next, and the receiver that takes the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastPlan<T> {
    /// The message.
    pub msg: FastMsg,
    /// The sender's own port (alive, no queued message, not the destination).
    pub own: PortId,
    /// The first receiver waiting on the destination (which has no queued message).
    pub receiver: T,
}

/// What the fast path does with a message ([`Ipc::fast_plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fast<T> {
    /// Hand it to a waiting receiver.
    Transfer(FastPlan<T>),
    /// It is a call to this port, which has activations: it migrates.
    Migrate(PortId),
}

/// The two destination forms the fast path carries.
const CALL: u8 = Disposition::CopySend as u8;
/// See [`CALL`].
const REPLY: u8 = Disposition::MoveSendOnce as u8;

impl<T: Copy + Default + PartialEq> Ipc<T> {
    /// The whole decision of one fast-path transfer, on the IPC side: `header` (sent from
    /// `space` through a buffer of `limit` bytes) is a fast-path message (as
    /// described in the module documentation), the sender receives next on its receive right `rcv_name`,
    /// whose port has no queued message and is not the destination, and the destination
    /// port has no queued message and a receiver waiting. A call (not a reply) to a port
    /// with activations is [`Fast::Migrate`] instead (seed 001's migrating RPC). `None`
    /// sends the call down the general path. Looks each name and port up once.
    #[inline(always)]
    pub fn fast_plan(
        &self,
        space: &Space,
        header: &MsgHeader,
        limit: usize,
        rcv_name: u64,
    ) -> Option<Fast<T>> {
        if header.bits >> 16 != 0 || header.id >= KERNEL_ID_BASE {
            return None;
        }
        let size = header.size as usize;
        if !(HEADER_SIZE..=limit).contains(&size) {
            return None;
        }
        let dest = space.lookup(header.dest).ok()?;
        let to = self.ports.get(dest.port)?;
        let call = header.dest_disposition() == CALL && dest.kind == Held::Send;
        if call && to.pool.is_migrating() {
            // A call to a port with activations migrates; its reply port is never used.
            return Some(Fast::Migrate(dest.port));
        }
        let own = space.lookup(rcv_name).ok()?;
        let consumed = match (header.dest_disposition(), dest.kind, own.kind) {
            (CALL, Held::Send, Held::Receive) => None,
            (REPLY, Held::SendOnce, Held::Receive) => Some(header.dest),
            _ => return None,
        };
        if own.port == dest.port {
            return None;
        }
        let reply = match (header.reply_disposition(), header.reply) {
            (0, 0) => None,
            // The usual call: the reply comes to the port the caller receives on.
            (r, name) if r == Disposition::MakeSendOnce as u8 && name == rcv_name => Some(own.port),
            (r, name) if r == Disposition::MakeSendOnce as u8 => {
                let e = space.lookup(name).ok()?;
                if e.kind != Held::Receive || !self.ports.contains(e.port) {
                    return None;
                }
                Some(e.port)
            }
            _ => return None,
        };
        let receiver = to.receivers.front()?;
        if !to.queue.is_empty() || !self.ports.get(own.port)?.queue.is_empty() {
            return None;
        }
        Some(Fast::Transfer(FastPlan {
            msg: FastMsg {
                dest: dest.port,
                consumed,
                reply,
                id: header.id,
                size,
            },
            own: own.port,
            receiver,
        }))
    }

    /// Carries out a [`FastPlan`] made for the sender's `space` with nothing changed since:
    /// the sender's moves (a used send-once destination), the receiver's (the reply right into `to`,
    /// which receives on its name `rcv_name` and has room for the reply right), the
    /// receiver leaves the destination's receivers and `caller` joins those of its own
    /// port. Returns the header the receiver gets.
    #[inline(always)]
    pub fn fast_commit(
        &mut self,
        space: &mut Space,
        to: &mut Space,
        plan: &FastPlan<T>,
        rcv_name: u64,
        caller: T,
    ) -> MsgHeader {
        let m = &plan.msg;
        let sid = space.id();
        // The reply right goes into the receiver's space first (room was checked).
        let reply = m.reply.and_then(|port| {
            to.insert(super::Entry {
                kind: Held::SendOnce,
                port,
            })
            .ok()
        });
        let consumed = m
            .consumed
            .and_then(|name| space.remove(name).map(|e| (name, e)));
        let mut dead_names = false;
        if let Some((dest, own)) = self.ports.get2_mut(m.dest, plan.own) {
            dest.receivers.pop_front();
            own.receivers.push_back(caller);
            if consumed.is_some() {
                dest.send_onces = dest.send_onces.saturating_sub(1);
                dead_names = !dest.dead_names.is_empty();
            }
            match m.reply {
                Some(port) if reply.is_some() && port == plan.own => own.send_onces += 1,
                _ => {}
            }
        }
        if let (Some(port), Some(_)) = (m.reply, reply) {
            if port != plan.own {
                if let Some(p) = self.ports.get_mut(port) {
                    p.send_onces += 1;
                }
            }
        }
        if let (Some((name, e)), true) = (consumed, dead_names) {
            self.name_gone(e, name, sid);
        }
        MsgHeader {
            bits: MsgHeader::make_bits(
                Disposition::None,
                if reply.is_some() {
                    Disposition::MoveSendOnce
                } else {
                    Disposition::None
                },
                0,
            ),
            size: m.size as u32,
            dest: rcv_name,
            reply: reply.unwrap_or(0),
            id: m.id,
        }
    }
}
