//! Rights the kernel itself holds: the send rights of exception ports, and the receive
//! rights of the ports a faulting thread waits on for its handler's reply.
//!
//! The kernel uses ports through the same counts as tasks do, so that a send right it
//! keeps holds off a no-senders notification, and a reply right it hands out is a real
//! send-once right: used by the handler's reply, or, when the handler drops it or dies, a
//! send-once notification to the reply port, which the kernel reads as "not handled".
//!
//! # Invariants
//! - A port with `receiver == KERNEL_SPACE` has its receive right in the kernel (in one
//!   thread's `exc_reply`), never in a space or a message; only [`Ipc::destroy_kernel`]
//!   destroys it.
//! - Every send right returned by [`Ipc::hold_send`] is counted in its port's `sends`
//!   until [`Ipc::release_held_send`] gives it back.

use super::{Effects, Held, Ipc, Message, ObjectTag, Port, PortId, Right, Space, SpaceId};
use alloc::vec::Vec;
use baton_abi::ipc::QUEUE_LIMIT_DEFAULT;
use baton_abi::Error;

/// The receiver of the ports whose receive right the kernel keeps.
pub const KERNEL_SPACE: SpaceId = u64::MAX;

impl<T: Copy + Default + PartialEq> Ipc<T> {
    /// A port whose receive right the kernel keeps.
    pub fn allocate_kernel(&mut self) -> Result<PortId, Error> {
        self.reserve_work(1)?;
        let port = crate::fallible::try_box(Port::new(KERNEL_SPACE, QUEUE_LIMIT_DEFAULT as usize))
            .ok_or(Error::NoMemory)?;
        self.ports.insert(port).map_err(|_| Error::NoSpace)
    }

    /// Records what kernel object `port` (a port the kernel keeps the receive right of)
    /// stands for, or forgets it (`None`). Does nothing to another port.
    pub fn set_object(&mut self, port: PortId, object: Option<ObjectTag>) {
        if let Some(p) = self.ports.get_mut(port) {
            if p.receiver == KERNEL_SPACE {
                p.object = object;
            }
        }
    }

    /// The kernel object `port` stands for, if any (see [`Ipc::set_object`]).
    #[inline]
    pub fn object(&self, port: PortId) -> Option<ObjectTag> {
        self.ports.get(port).and_then(|p| p.object)
    }

    /// Destroys a port the kernel received on, with what is queued there.
    pub fn destroy_kernel(&mut self, port: PortId, fx: &mut Effects<T>) {
        if self
            .ports
            .get(port)
            .is_some_and(|p| p.receiver == KERNEL_SPACE)
        {
            self.release_rights(
                [Right {
                    kind: Held::Receive,
                    port,
                }],
                fx,
            );
        }
    }

    /// Marks `port` (kernel-held) to be reaped when its last send right goes: it then
    /// joins the orphans [`Ipc::take_orphan`] hands to the kernel, which destroys it (a
    /// memory object's port: the object lives while a right or a mapping names it).
    /// [`Error::NoMemory`] (nothing changed) when the orphan list cannot get room for it.
    pub fn reap_on_no_senders(&mut self, port: PortId) -> Result<(), Error> {
        let Some(p) = self.ports.get(port) else {
            return Err(Error::DeadName);
        };
        if p.receiver != KERNEL_SPACE || p.reap {
            return Err(Error::InvalidRight);
        }
        // Room for every marked port, and for the ones listed already (a listed port may
        // have been destroyed since, and is no longer counted).
        let want = self.reapable + 1 + self.orphans.len();
        self.orphans
            .try_reserve(want.saturating_sub(self.orphans.len()))
            .map_err(|_| Error::NoMemory)?;
        if let Some(p) = self.ports.get_mut(port) {
            p.reap = true;
            self.reapable += 1;
        }
        Ok(())
    }

    /// A kernel-held port marked [`Ipc::reap_on_no_senders`] that has no send right left,
    /// if any: the kernel destroys it (it is not destroyed here).
    pub fn take_orphan(&mut self) -> Option<PortId> {
        self.orphans.pop()
    }

    /// Whether [`Ipc::take_orphan`] has anything (one load: checked after every operation).
    #[inline]
    pub fn has_orphans(&self) -> bool {
        !self.orphans.is_empty()
    }

    /// A send right for the kernel to keep, to the port `name` denotes in `space`: a copy
    /// of a send right, or a new one made from a receive right.
    pub fn hold_send(&mut self, space: &Space, name: u64) -> Result<PortId, Error> {
        let e = space.lookup(name)?;
        if !matches!(e.kind, Held::Send | Held::Receive) {
            return Err(Error::InvalidRight);
        }
        let p = self.ports.get_mut(e.port).ok_or(Error::DeadName)?;
        p.sends += 1;
        Ok(e.port)
    }

    /// Gives back a send right [`Ipc::hold_send`] returned.
    pub fn release_held_send(&mut self, port: PortId, fx: &mut Effects<T>) {
        self.release_rights(
            [Right {
                kind: Held::Send,
                port,
            }],
            fx,
        );
    }

    /// Sends a kernel message (`id` at or above `KERNEL_ID_BASE`, in-line `data`) to `dest`,
    /// whose send right the kernel holds, with a new send-once reply right to `reply`.
    pub fn send_kernel(
        &mut self,
        dest: PortId,
        id: u64,
        reply: PortId,
        data: Vec<u8>,
        fx: &mut Effects<T>,
    ) -> Result<(), Error> {
        // Room in the release work list for the message's reply right, and in both queues
        // (`Port::reserve_queue`): for this message, and for the reply or notification the
        // new send-once right may bring.
        self.reserve_work(1)?;
        self.ports
            .get_mut(dest)
            .ok_or(Error::DeadName)?
            .reserve_queue(1)?;
        let r = self.ports.get_mut(reply).ok_or(Error::DeadName)?;
        r.reserve_queue(1)?;
        r.send_onces += 1;
        let msg = Message {
            id,
            reply: Some(Right {
                kind: Held::SendOnce,
                port: reply,
            }),
            rights: Vec::new(),
            data,
            charge: None,
            word: None,
            ool: Vec::new(),
        };
        self.enqueue(dest, msg, fx);
        Ok(())
    }

    /// Answers a request the kernel handled itself (a kernel object's operation) through
    /// its reply right `reply`: the message goes to the right's port and the right is
    /// used up (a send-once right) or released (a send right). The request's other rights
    /// are released by the caller.
    pub fn reply_kernel(&mut self, reply: Right, id: u64, data: Vec<u8>, fx: &mut Effects<T>) {
        let msg = Message {
            id,
            reply: None,
            rights: Vec::new(),
            data,
            charge: None,
            word: None,
            ool: Vec::new(),
        };
        match reply.kind {
            Held::SendOnce => {
                if let Some(p) = self.ports.get_mut(reply.port) {
                    p.send_onces = p.send_onces.saturating_sub(1);
                }
                self.enqueue(reply.port, msg, fx);
            }
            Held::Send => {
                self.enqueue(reply.port, msg, fx);
                self.release_rights([reply], fx);
            }
            Held::Receive => self.release_rights([reply], fx),
        }
    }

    /// Releases the rights of a message the kernel consumed.
    pub fn release_message_rights(&mut self, rights: Vec<Right>, fx: &mut Effects<T>) {
        self.release_rights(rights, fx);
    }
}
