//! The rights half of the IPC fast path: which messages it may carry, and the right moves
//! it makes, split so that the kernel can decide everything before it changes anything.
//!
//! The fast path (the continuations paper's Figure 2, seL4's `fastpath_call` and
//! `fastpath_reply_recv`) carries the two messages of an RPC: the request, whose
//! destination is a send right used with `CopySend` and whose reply right is a
//! `MakeSendOnce` of the receive right the sender receives on next; and the reply, whose
//! destination is that send-once right used with `MoveSendOnce` and which carries no reply
//! right. Neither has descriptors. Anything else, including every malformed message, takes the general
//! path, which also produces the errors: [`Ipc::fast_plan`] never fails, it only declines.
//!
//! The moves are exactly those of [`Ipc::copyin`] followed by [`Ipc::copyout`] for such a
//! message, with no [`Message`](super::Message) in between: a moved send-once destination
//! is used up (no notification), a copied send right changes no count, and a
//! `MakeSendOnce` reply becomes one new send-once right in the receiver's space.
//!
//! The work is split so that the kernel decides everything before it changes anything:
//! [`Ipc::fast_plan`] reads, the kernel checks the two threads, then
//! [`Ipc::fast_commit_call`] or [`Ipc::fast_commit_reply`] writes. Each direction changes
//! one name space only — a request the receiver's (the reply right goes in), a reply the
//! sender's (the send-once right is used up) — so the kernel never holds two tasks at once.
//!
//! # Invariants
//! - [`Ipc::fast_plan`] has no side effects. A commit is called only with a [`FastPlan`]
//!   it returned, with nothing changed in between (a reply's for the same sender space).
//!   A commit either does everything or, returning `None`, nothing.

use super::{Held, Ipc, PortId, Space};
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, KERNEL_ID_BASE};

/// A message the fast path can carry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastMsg {
    /// The destination port (alive).
    pub dest: PortId,
    /// A request (`CopySend` destination, a `MakeSendOnce` reply right made from the
    /// receive right the sender receives on next) rather than a reply (`MoveSendOnce`
    /// destination, no reply right).
    pub call: bool,
    /// The sender's name of the destination right (a reply uses it up).
    pub name: u64,
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
    /// The sender's own port (alive, not the destination).
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

/// The destination disposition of a call.
const CALL: u8 = Disposition::CopySend as u8;
/// The whole `bits` of a request: a copied send right, a send-once reply right made, no
/// descriptors.
const CALL_BITS: u32 = MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0);
/// The whole `bits` of a reply: a send-once right used up, no reply right, no descriptors.
/// A message with other bits is never a fast-path reply (it may be a call, or migrate).
pub const REPLY_BITS: u32 = MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0);

/// Whether the reply right of `header` (sent from `space`) lets a call migrate from a fast
/// path: none (disposition `None`, name 0), or a send-once right made from a receive right,
/// the forms the general path also accepts. Anything else (a wrong right, which the
/// general path refuses, or another valid form) takes the general path, so that both give
/// the same result for the same message.
#[inline(always)]
pub fn migration_reply_ok(space: &Space, header: &MsgHeader) -> bool {
    let reply = header.reply_disposition();
    if reply == Disposition::MakeSendOnce as u8 {
        space
            .lookup(header.reply)
            .is_ok_and(|e| e.kind == Held::Receive)
    } else {
        reply == Disposition::None as u8 && header.reply == 0
    }
}

impl<T: Copy + Default + PartialEq> Ipc<T> {
    /// The decision of one fast-path transfer, on the IPC side: `header` (sent from
    /// `space` through a buffer of `limit` bytes) is a fast-path message (as described in
    /// the module documentation), the sender receives next on its receive right
    /// `rcv_name`, whose port is not the destination, and the destination port has no
    /// queued message and a receiver waiting. (That the sender's own port has no queued
    /// message, so that its receive blocks, is the commit's last check.) A call (a copied
    /// send right, without descriptors) to a port with activations is [`Fast::Migrate`]
    /// instead (seed 001's migrating RPC), whatever its reply right. `None` sends the call
    /// down the general path. Looks each name and port up once.
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
        // SAFETY: a name entry's port is a key the port slab handed out (module invariants
        // of `super`: entries are made only for ports of this `Ipc`).
        let to = unsafe { self.ports.get_held(dest.port) }?;
        if header.dest_disposition() == CALL && dest.kind == Held::Send && to.pool.is_migrating() {
            // A call to a port with activations migrates; its reply port is never used, but
            // is checked as the general path checks it ([`migration_reply_ok`]).
            return migration_reply_ok(space, header).then_some(Fast::Migrate(dest.port));
        }
        // The two forms, each in one comparison of the bits: the usual call, whose reply
        // comes to the port the caller receives on; and the reply to it.
        let call = match (header.bits, dest.kind) {
            (CALL_BITS, Held::Send) if header.reply == rcv_name => true,
            (REPLY_BITS, Held::SendOnce) if header.reply == 0 => false,
            _ => return None,
        };
        let own = space.lookup(rcv_name).ok()?;
        if own.kind != Held::Receive || own.port == dest.port {
            return None;
        }
        // (The own port's queue is checked by the commit, which looks that port up anyway.)
        let receiver = to.receivers.front()?;
        if !to.queue.is_empty() {
            return None;
        }
        Some(Fast::Transfer(FastPlan {
            msg: FastMsg {
                dest: dest.port,
                call,
                name: header.dest,
                id: header.id,
                size,
            },
            own: own.port,
            receiver,
        }))
    }

    /// The decision of a kernel-sent fast-path message (seed 000 section 2.5, exceptions):
    /// the kernel sends a message with `id` of `size` bytes to `dest`, whose send right it
    /// holds, with a new send-once reply right to `own`, a port whose receive right it keeps
    /// and on which the sending thread waits next. The plan is a request's (commit it with
    /// [`Ipc::fast_commit_call`], which does the moves of [`Ipc::send_kernel`] followed by
    /// [`Ipc::copyout`]); `None` when `dest` has no receiver waiting, a queued message or
    /// activations, or either port is dead or they are the same. No side effects.
    #[inline(always)]
    pub fn fast_plan_kernel(
        &self,
        dest: PortId,
        own: PortId,
        id: u64,
        size: usize,
    ) -> Option<FastPlan<T>> {
        let to = self.ports.get(dest)?;
        if dest == own || !to.queue.is_empty() || to.pool.is_migrating() {
            return None;
        }
        let receiver = to.receivers.front()?;
        self.ports.get(own)?;
        Some(FastPlan {
            msg: FastMsg {
                dest,
                call: true,
                name: 0,
                id,
                size,
            },
            own,
            receiver,
        })
    }

    /// The destination port and the caller's own port of `plan`, unless a message waits on
    /// the caller's port (its receive would not block) or its receivers' ring or its queue's
    /// room for send-once messages would have to grow (allocations that may fail: the
    /// general path makes them, or fails the call): both commits' first step.
    #[inline(always)]
    fn fast_ports(
        &mut self,
        plan: &FastPlan<T>,
    ) -> Option<(&mut super::Port<T>, &mut super::Port<T>)> {
        // SAFETY: a plan's two ports were found through name entries or given by the
        // kernel from its own records (`fast_plan`, `fast_plan_kernel`), keys the port
        // slab handed out.
        let (dest, own) = unsafe { self.ports.get2_held_mut(plan.msg.dest, plan.own) }?;
        // The queue is empty, so it has room for its send-once rights' messages and one
        // more (the reply right a call makes) when its capacity exceeds their count.
        (own.queue.is_empty()
            && own.receivers.has_room()
            && (!plan.msg.call || own.queue.capacity() > own.send_onces as usize))
            .then_some((dest, own))
    }

    /// Carries out a request's [`FastPlan`] (`plan.msg.call`), with nothing changed since
    /// it was made: the reply right goes into the receiver's space `to` (which receives on
    /// its name `rcv_name`), the receiver leaves the destination's receivers and `caller`
    /// joins those of its own port. Returns the header the receiver gets; `None`, with
    /// nothing changed, when `to` has no room for the reply right or a message waits on the
    /// caller's own port (its receive would not block). The sender's space does not
    /// change.
    #[inline(always)]
    pub fn fast_commit_call(
        &mut self,
        to: &mut Space,
        plan: &FastPlan<T>,
        rcv_name: u64,
        caller: T,
    ) -> Option<MsgHeader> {
        let m = &plan.msg;
        let (dest, own) = self.fast_ports(plan)?;
        let reply = to
            .insert(super::Entry {
                kind: Held::SendOnce,
                port: plan.own,
            })
            .ok()?;
        own.send_onces += 1;
        dest.receivers.pop_front();
        own.receivers.push_back(caller);
        Some(MsgHeader {
            bits: MsgHeader::make_bits(Disposition::None, Disposition::MoveSendOnce, 0),
            size: m.size as u32,
            dest: rcv_name,
            reply,
            id: m.id,
        })
    }

    /// Carries out a reply's [`FastPlan`] (not `plan.msg.call`) made for the sender's
    /// `space`, with nothing changed since: the send-once destination right is used up (no
    /// notification; a dead-name request on the name is answered), the receiver leaves the
    /// destination's receivers and `caller` joins those of its own port. Returns the header
    /// the receiver (which receives on its name `rcv_name`) gets; `None`, with nothing
    /// changed, when a message waits on the caller's own port (its receive would not block)
    /// or the plan was not made for `space`. The receiver's space does not change.
    #[inline(always)]
    pub fn fast_commit_reply(
        &mut self,
        space: &mut Space,
        plan: &FastPlan<T>,
        rcv_name: u64,
        caller: T,
    ) -> Option<MsgHeader> {
        let m = &plan.msg;
        let (dest, own) = self.fast_ports(plan)?;
        let used = space.remove(m.name)?;
        dest.send_onces = dest.send_onces.saturating_sub(1);
        dest.receivers.pop_front();
        own.receivers.push_back(caller);
        if !dest.dead_names.is_empty() {
            self.name_gone(used, m.name, space.id());
        }
        Some(MsgHeader {
            bits: 0,
            size: m.size as u32,
            dest: rcv_name,
            reply: 0,
            id: m.id,
        })
    }
}
