//! Ports, rights and messages (Accent's ports, Mach's rights; `baton_abi::ipc` is the user
//! view).
//!
//! This module is the semantic reference of IPC, machine- and thread-independent: the
//! kernel keeps its threads, and asks this module to resolve names, move rights in and out
//! of messages, queue messages and destroy ports. Threads appear only as opaque `T` values
//! in each port's queues of blocked receivers and senders, and in the [`Effects`] an
//! operation returns: the threads the kernel must make ready, and with what.
//!
//! - A [`Port`] is a bounded message queue with one receive right, counted send and
//!   send-once rights, and notification requests.
//! - A task's rights live in its [`Space`]; an in-flight right (inside a queued message)
//!   is a [`Right`] owned by the message.
//! - [`Ipc::copyin`] turns a message in a sender's terms (names and dispositions) into a
//!   kernel [`Message`], in two phases: it first checks everything without side effects
//!   (decode), and only then moves the rights (invoke); [`Ipc::copyout`] does the reverse
//!   for the receiver, after checking that its name space has room.
//! - Releasing a right has consequences: the last send right triggers a no-senders
//!   notification, an unused send-once right a send-once notification, a receive right
//!   destroys its port (its queued messages, and the rights inside them, are released in
//!   turn — with an explicit work list, never by recursion), and a destroyed port triggers
//!   its dead-name notifications.
//!
//! # Invariants
//! - For every live port, `sends` equals the number of send entries naming it plus send
//!   rights inside queued messages; `send_onces` likewise for send-once rights, plus the
//!   send-once rights the kernel keeps for notification requests.
//! - A port's receive right is in exactly one place: a `Receive` entry of the space
//!   `receiver`, or (with `receiver == 0`) inside one queued message.
//! - Every port key a name entry or a message holds was handed out by this `Ipc`'s port
//!   slab (entries are made only here, `Space::insert` being private to this module), so
//!   the fast path finds a named port by one compare of generations
//!   ([`Slab::get_held`](crate::slab::Slab::get_held)).
//! - A thread is in a port's `receivers` only while blocked receiving on it, in `senders`
//!   only while blocked on its full queue; destroying the port or moving its receive right
//!   away hands every such thread back through [`Effects`].

pub mod fast;
pub mod held;
pub mod space;

use crate::ring::Ring;
use crate::slab::{Key, Slab};
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use baton_abi::ipc::{
    Descriptor, Disposition, MsgHeader, RightKind, DESCRIPTORS_MAX, DESCRIPTOR_SIZE, DESC_OOL,
    DESC_PORT, HEADER_SIZE, KERNEL_ID_BASE, NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME,
    NOTIFY_KIND_NO_SENDERS, NOTIFY_NO_SENDERS, NOTIFY_SEND_ONCE, QUEUE_LIMIT_DEFAULT,
    QUEUE_LIMIT_MAX,
};
use baton_abi::Error;
pub use fast::{Fast, FastMsg, FastPlan};
pub use held::KERNEL_SPACE;
pub use space::{Entry, Held, Space};

/// A port, by its slot in [`Ipc`]'s slab: destroyed ports fail the generation check.
pub type PortId = Key;
/// The name space (task) that holds a receive right; 0 means none (in flight).
pub type SpaceId = u64;

/// A right inside a kernel message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Right {
    /// What kind of right.
    pub kind: Held,
    /// To which port.
    pub port: PortId,
}

/// A message in the kernel: its rights are kernel-owned [`Right`]s, not names.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// The sender's operation id.
    pub id: u64,
    /// The reply right, if any.
    pub reply: Option<Right>,
    /// The port descriptors' rights, in order.
    pub rights: Vec<Right>,
    /// The in-line data.
    pub data: Vec<u8>,
    /// What it costs its sender's account while queued (`crate::quota`), if anything:
    /// given back when the message is received or destroyed.
    pub charge: Option<crate::quota::Charge>,
    /// A kernel notification's one data word, kept in the message (its `data` is then
    /// empty) so that a notification, sent on paths that must not fail, never allocates.
    pub word: Option<u64>,
    /// The out-of-line regions the message carries, in descriptor order (see
    /// [`Attached`]).
    pub ool: Vec<Attached>,
}

/// An out-of-line region attached to a message. This module never looks inside: the
/// region itself lives in a table of the kernel's virtual-memory side, and `handle` names
/// it there. A message destroyed undelivered hands its handles back in
/// [`Effects::dropped`], so that the kernel releases the regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attached {
    /// The descriptor's position in the message.
    pub index: u8,
    /// The kernel's handle for the region.
    pub handle: u64,
    /// The bytes the receiver is given.
    pub size: u64,
}

impl Message {
    /// Its size in the receiver's buffer: header, descriptors, data.
    pub fn size(&self) -> usize {
        HEADER_SIZE + (self.rights.len() + self.ool.len()) * DESCRIPTOR_SIZE + self.data_len()
    }

    /// Bytes of in-line data: `data`'s, or a notification's word.
    pub fn data_len(&self) -> usize {
        if self.word.is_some() {
            8
        } else {
            self.data.len()
        }
    }

    /// A kernel notification carrying one word.
    fn notification(id: u64, word: u64) -> Message {
        Message {
            id,
            reply: None,
            rights: Vec::new(),
            data: Vec::new(),
            charge: None,
            word: Some(word),
            ool: Vec::new(),
        }
    }
}

/// What a thread blocked on a port is told when it is made ready again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Try the operation again (a message arrived, or queue space freed up).
    Retry,
    /// Give up with this error (the port died, or its receive right moved away).
    Fail(Error),
}

/// Threads an operation unblocked; the kernel makes each ready with its [`Wake`]. And
/// the out-of-line regions of messages it destroyed, which the kernel releases.
#[derive(Debug)]
pub struct Effects<T> {
    /// In order.
    pub wake: Vec<(T, Wake)>,
    /// Handles ([`Attached::handle`]) of regions whose messages were destroyed
    /// undelivered. The kernel gives this list room for every region in transit before
    /// it queues one, so filling it never allocates.
    pub dropped: Vec<u64>,
}

impl<T> Default for Effects<T> {
    fn default() -> Self {
        Effects {
            wake: Vec::new(),
            dropped: Vec::new(),
        }
    }
}

/// A port. See the module documentation.
#[derive(Debug)]
pub struct Port<T> {
    /// The space holding the receive right, 0 while it is in flight.
    pub receiver: SpaceId,
    /// Queued messages, oldest first.
    pub queue: VecDeque<Message>,
    /// Most queued messages senders may add (notifications may exceed it).
    pub limit: usize,
    /// Send rights in existence.
    pub sends: u64,
    /// Send-once rights in existence.
    pub send_onces: u64,
    /// No-senders request: the notify port (a kernel-held send-once right) and the name
    /// reported.
    no_senders: Option<(PortId, u64)>,
    /// Dead-name requests: notify port (kernel-held send-once right), the dead name, and
    /// the space that asked (names are per space: the same number in two spaces is two
    /// requests), in the order they were made: the port's death notifies them in it.
    dead_names: Vec<(PortId, u64, SpaceId)>,
    /// While the receive right is in flight: the port on whose queue the message carrying
    /// it waits (for the circularity check of `copyin`).
    transit: Option<PortId>,
    /// Threads blocked receiving here, oldest first.
    pub receivers: crate::waiters::Waiters<T>,
    /// Threads blocked on the full queue, or waiting for an activation of the pool to
    /// come back, oldest first.
    pub senders: Ring<T>,
    /// Activations attached for migrating RPC (seed 001 section 6.2), if any.
    pub pool: crate::activation::Pool,
    /// What it costs the account of the task that allocated it (`crate::quota`), if
    /// anything: given back when the port is destroyed.
    pub charge: Option<crate::quota::Charge>,
    /// The kernel object this port stands for, if the kernel keeps its receive right for
    /// one (a task's, a thread's, ...): an opaque tag the kernel defines, found from the
    /// port in one step ([`Ipc::object`]).
    object: Option<ObjectTag>,
    /// The kernel wants to hear of this port's death ([`Ipc::watch`]).
    watched: bool,
    /// A kernel-held port that goes when its last send right does: the kernel is told
    /// through [`Ipc::take_orphan`] (see [`Ipc::reap_on_no_senders`]).
    reap: bool,
}

/// What a kernel-object port stands for, in the kernel's own terms: a kind and an id the
/// kernel defines (this crate only keeps it with the port).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectTag {
    /// The kind of object.
    pub kind: u8,
    /// Which object of that kind.
    pub id: u64,
}

impl<T: Copy + Default + PartialEq> Port<T> {
    fn new(receiver: SpaceId, limit: usize) -> Port<T> {
        Port {
            receiver,
            queue: VecDeque::new(),
            limit,
            sends: 0,
            send_onces: 0,
            no_senders: None,
            dead_names: Vec::new(),
            transit: None,
            receivers: crate::waiters::Waiters::new(),
            senders: Ring::new(),
            pool: crate::activation::Pool::default(),
            charge: None,
            object: None,
            watched: false,
            reap: false,
        }
    }

    /// Whether a sender must wait.
    pub fn is_full(&self) -> bool {
        self.queue.len() >= self.limit
    }

    /// The kernel object this port stands for, if any (see [`Ipc::set_object`]).
    #[inline]
    pub fn object(&self) -> Option<ObjectTag> {
        self.object
    }

    /// Makes room in the queue for every message already queued, one per send-once right
    /// in existence, and `extra` more, so that nothing that arrives without a step that
    /// may fail — a send-once notification when such a right is destroyed (ending tasks
    /// included), a reply through one — ever makes the queue grow. [`Error::NoMemory`]
    /// (nothing changed) when the heap has no room. See "Queue room" in the module
    /// documentation.
    pub fn reserve_queue(&mut self, extra: usize) -> Result<(), Error> {
        let owed = usize::try_from(self.send_onces)
            .unwrap_or(usize::MAX)
            .saturating_add(extra);
        if self.queue.capacity() - self.queue.len() < owed {
            self.queue.try_reserve(owed).map_err(|_| Error::NoMemory)?;
        }
        Ok(())
    }
}

/// A right named in a message, checked but not yet taken (the decode phase's result).
#[derive(Clone, Copy, Debug)]
struct Named {
    name: u64,
    entry: Entry,
    disposition: Disposition,
}

/// A message's destination, resolved once ([`Ipc::resolve_dest`]) and reused by the
/// commit ([`Ipc::copyin_to`]): the port, the name and the disposition it was named with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    port: PortId,
    name: u64,
    disposition: Disposition,
}

impl Dest {
    /// The port.
    #[inline]
    pub fn port(self) -> PortId {
        self.port
    }
}

/// What the decode phase of [`Ipc::copyin`] found.
struct Decoded {
    dest: PortId,
    dest_disp: Disposition,
    reply: Option<Named>,
    named: Vec<Named>,
}

/// All ports.
#[derive(Debug)]
pub struct Ipc<T> {
    /// Every port, boxed (see [`Ipc::allocate`]).
    ports: Slab<alloc::boxed::Box<Port<T>>>,
    /// Messages queued on all ports.
    queued: usize,
    /// Rights inside queued messages (their reply rights included), all ports together.
    rights_queued: usize,
    /// The work list of [`Ipc::release_rights`], kept between uses: it has room for every
    /// right inside a queued message and a message's worth more, made where messages are
    /// made ([`Ipc::reserve_work`]), so releasing rights — a task's end included — never
    /// allocates.
    work: Vec<Right>,
    /// Watched ports destroyed since the kernel last asked ([`Ipc::take_died`]); room for
    /// every watched port is made when it is watched, so a destruction never allocates.
    died: Vec<PortId>,
    /// Ports watched now.
    watched: usize,
    /// Kernel-held ports marked [`Ipc::reap_on_no_senders`] whose last send right went,
    /// for the kernel to destroy ([`Ipc::take_orphan`]). It has room for every such port
    /// (made when one is marked), so a release never allocates for it.
    orphans: Vec<PortId>,
    /// Live ports marked [`Ipc::reap_on_no_senders`].
    reapable: usize,
}

impl<T: Copy + Default + PartialEq> Default for Ipc<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether an entry of kind `held` may be used with `disposition`.
fn allows(held: Held, disposition: Disposition) -> bool {
    matches!(
        (held, disposition),
        (
            Held::Receive,
            Disposition::MoveReceive | Disposition::MakeSend | Disposition::MakeSendOnce
        ) | (Held::Send, Disposition::MoveSend | Disposition::CopySend)
            | (Held::SendOnce, Disposition::MoveSendOnce)
    )
}

/// Whether `disposition` takes the sender's name away.
fn moves(disposition: Disposition) -> bool {
    matches!(
        disposition,
        Disposition::MoveReceive | Disposition::MoveSend | Disposition::MoveSendOnce
    )
}

impl<T: Copy + Default + PartialEq> Ipc<T> {
    /// No ports.
    pub const fn new() -> Ipc<T> {
        Ipc {
            ports: Slab::new(),
            queued: 0,
            rights_queued: 0,
            work: Vec::new(),
            died: Vec::new(),
            watched: 0,
            orphans: Vec::new(),
            reapable: 0,
        }
    }

    /// Asks to hear of `port`'s destruction ([`Ipc::take_died`]): a pager's port, whose
    /// death turns the faults waiting for it into errors. Watching a watched port changes
    /// nothing. [`Error::DeadName`] for a port that is gone.
    pub fn watch(&mut self, port: PortId) -> Result<(), Error> {
        let room = (self.watched + 1).saturating_sub(self.died.len());
        let p = self.ports.get_mut(port).ok_or(Error::DeadName)?;
        if p.watched {
            return Ok(());
        }
        self.died.try_reserve(room).map_err(|_| Error::NoMemory)?;
        p.watched = true;
        self.watched += 1;
        Ok(())
    }

    /// Stops watching `port` (nothing if it is not watched or gone).
    pub fn unwatch(&mut self, port: PortId) {
        if let Some(p) = self.ports.get_mut(port) {
            if core::mem::take(&mut p.watched) {
                self.watched -= 1;
            }
        }
    }

    /// Whether [`Ipc::take_died`] has something.
    #[inline]
    pub fn died_pending(&self) -> bool {
        !self.died.is_empty()
    }

    /// A watched port destroyed since the last call, if any.
    pub fn take_died(&mut self) -> Option<PortId> {
        self.died.pop()
    }

    /// Live ports.
    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// Every live port with its id (for leak reports: a port alive when no task is).
    pub fn iter_ports(&self) -> impl Iterator<Item = (PortId, &Port<T>)> {
        self.ports.iter().map(|(id, p)| (id, &**p))
    }

    /// Messages queued on all ports.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// The port `id`, if alive.
    #[inline]
    pub fn port(&self, id: PortId) -> Option<&Port<T>> {
        self.ports.get(id).map(|p| &**p)
    }

    /// The port `id`, mutably, if alive.
    #[inline]
    pub fn port_mut(&mut self, id: PortId) -> Option<&mut Port<T>> {
        self.ports.get_mut(id).map(|p| &mut **p)
    }

    /// `port_allocate`: a new port whose receive right goes into `space` (id `sid`).
    pub fn allocate(&mut self, space: &mut Space, sid: SpaceId, limit: u64) -> Result<u64, Error> {
        let limit = match limit {
            0 => QUEUE_LIMIT_DEFAULT,
            l if l <= QUEUE_LIMIT_MAX => l,
            _ => return Err(Error::InvalidArgument),
        } as usize;
        if space.room() == 0 {
            return Err(Error::NoSpace);
        }
        // Room to release the port's rights later, when its task ends (see `work`).
        self.reserve_work(1)?;
        // Boxed: the global table keeps only a pointer per slot, so the size it grows to
        // (it never shrinks) stays small beside what the ports themselves cost, which is
        // charged to their tasks and freed with them.
        let port = crate::fallible::try_box(Port::new(sid, limit)).ok_or(Error::NoMemory)?;
        let port = self.ports.insert(port).map_err(|_| Error::NoMemory)?;
        match space.insert(Entry {
            kind: Held::Receive,
            port,
        }) {
            Ok(name) => Ok(name),
            Err(e) => {
                self.ports.remove(port);
                Err(e)
            }
        }
    }

    /// The kind of right `name` is, dead names included.
    pub fn info(&self, space: &Space, name: u64) -> Result<RightKind, Error> {
        let e = space.lookup(name)?;
        Ok(match e.kind {
            _ if !self.ports.contains(e.port) => RightKind::DeadName,
            Held::Receive => RightKind::Receive,
            Held::Send => RightKind::Send,
            Held::SendOnce => RightKind::SendOnce,
        })
    }

    /// The live port of the receive right `name`.
    #[inline]
    pub fn receive_port(&self, space: &Space, name: u64) -> Result<PortId, Error> {
        let e = space.lookup(name)?;
        if e.kind != Held::Receive {
            return Err(Error::InvalidRight);
        }
        if !self.ports.contains(e.port) {
            return Err(Error::InvalidName);
        }
        Ok(e.port)
    }

    /// [`Ipc::receive_port`] and, from the same look at the port, the size of the message
    /// a receive would take ([`Ipc::peek_size`]), if one waits.
    pub fn receive_peek(&self, space: &Space, name: u64) -> Result<(PortId, Option<usize>), Error> {
        let e = space.lookup(name)?;
        if e.kind != Held::Receive {
            return Err(Error::InvalidRight);
        }
        let p = self.ports.get(e.port).ok_or(Error::InvalidName)?;
        Ok((e.port, p.queue.front().map(Message::size)))
    }

    /// `port_make_send`: a new send (or send-once) right from the receive right `name`.
    pub fn make_send(&mut self, space: &mut Space, name: u64, once: bool) -> Result<u64, Error> {
        let port = self.receive_port(space, name)?;
        if once {
            self.ports
                .get_mut(port)
                .ok_or(Error::InvalidName)?
                .reserve_queue(1)?;
        }
        let kind = if once { Held::SendOnce } else { Held::Send };
        let new = space.insert(Entry { kind, port })?;
        if let Some(p) = self.ports.get_mut(port) {
            match kind {
                Held::SendOnce => p.send_onces += 1,
                _ => p.sends += 1,
            }
        }
        Ok(new)
    }

    /// The live port to which `name` (a send or receive right) lets its holder give send
    /// rights (e.g. a bootstrap port for a new task).
    pub fn sendable_port(&self, space: &Space, name: u64) -> Result<PortId, Error> {
        let e = space.lookup(name)?;
        if e.kind == Held::SendOnce {
            return Err(Error::InvalidRight);
        }
        if !self.ports.contains(e.port) {
            return Err(Error::DeadName);
        }
        Ok(e.port)
    }

    /// Puts a new send right to the live `port` into `space` (the kernel's own grant, e.g.
    /// a new task's bootstrap right); its name.
    pub fn grant_send(&mut self, space: &mut Space, port: PortId) -> Result<u64, Error> {
        if !self.ports.contains(port) {
            return Err(Error::DeadName);
        }
        let name = space.insert(Entry {
            kind: Held::Send,
            port,
        })?;
        if let Some(p) = self.ports.get_mut(port) {
            p.sends += 1;
        }
        Ok(name)
    }

    /// `port_set_limit`.
    pub fn set_limit(&mut self, space: &Space, name: u64, limit: u64) -> Result<(), Error> {
        if !(1..=QUEUE_LIMIT_MAX).contains(&limit) {
            return Err(Error::InvalidArgument);
        }
        let port = self.receive_port(space, name)?;
        if let Some(p) = self.ports.get_mut(port) {
            p.limit = limit as usize;
        }
        Ok(())
    }

    /// `cap_drop`: releases the right `name` of `space`, with its consequences.
    pub fn release(
        &mut self,
        space: &mut Space,
        name: u64,
        fx: &mut Effects<T>,
    ) -> Result<(), Error> {
        self.reserve_work(1)?;
        let e = space.remove(name).ok_or(Error::InvalidName)?;
        self.name_gone(e, name, space.id());
        self.release_rights(
            [Right {
                kind: e.kind,
                port: e.port,
            }],
            fx,
        );
        Ok(())
    }

    /// Releases every right of a space (its task ended), one at a time, allocating
    /// nothing.
    pub fn release_space(&mut self, space: &mut Space, fx: &mut Effects<T>) {
        let sid = space.id();
        // Every name is gone first (their dead-name requests cancelled), then the rights
        // are released last slot first, each with all that follows from it: the order a
        // single work list of all of them would take.
        for (name, e) in space.iter() {
            self.name_gone(e, name, sid);
        }
        for index in (0..space.slots()).rev() {
            if let Some((_, e)) = space.take_at(index) {
                self.release_rights(
                    [Right {
                        kind: e.kind,
                        port: e.port,
                    }],
                    fx,
                );
            }
        }
    }

    /// Makes room in the work list of [`Ipc::release_rights`] for every right inside a
    /// queued message plus `extra` (a message about to be made or queued carries at most
    /// [`DESCRIPTORS_MAX`] rights and a reply right; a release starts with at most that
    /// many): [`Error::NoMemory`] when the heap has no room.
    pub fn reserve_work(&mut self, extra: usize) -> Result<(), Error> {
        let want = self
            .rights_queued
            .saturating_add(extra)
            .saturating_add(DESCRIPTORS_MAX + 2);
        if self.work.capacity() < want {
            self.work
                .try_reserve(want - self.work.len())
                .map_err(|_| Error::NoMemory)?;
        }
        Ok(())
    }

    /// `port_notify`: registers (or with `notify_name` 0 cancels) a notification. The
    /// kernel keeps a send-once right to the notify port (whose receive right
    /// `notify_name` must be).
    pub fn request_notify(
        &mut self,
        space: &Space,
        name: u64,
        kind: u64,
        notify_name: u64,
        fx: &mut Effects<T>,
    ) -> Result<(), Error> {
        let sid = space.id();
        let e = space.lookup(name)?;
        let notify = match notify_name {
            0 => None,
            n => Some(self.receive_port(space, n)?),
        };
        let port = self.ports.get(e.port);
        match (kind, e.kind) {
            (NOTIFY_KIND_DEAD_NAME, Held::Send | Held::SendOnce) => {
                if port.is_none() {
                    return Err(Error::DeadName);
                }
            }
            (NOTIFY_KIND_NO_SENDERS, Held::Receive) => {
                if port.is_none() {
                    return Err(Error::InvalidName);
                }
            }
            (NOTIFY_KIND_DEAD_NAME | NOTIFY_KIND_NO_SENDERS, _) => return Err(Error::InvalidRight),
            _ => return Err(Error::InvalidArgument),
        }
        // Room first: the notify port's queue for the notification, the port's list for
        // a dead-name request (nothing below allocates).
        if let Some(np) = notify.and_then(|n| self.ports.get_mut(n)) {
            np.reserve_queue(1)?;
        }
        if kind == NOTIFY_KIND_DEAD_NAME && notify.is_some() {
            if let Some(p) = self.ports.get_mut(e.port) {
                p.dead_names.try_reserve(1).map_err(|_| Error::NoMemory)?;
            }
        }
        // Decoded; now act. Cancel the old request of this kind for this name (there is
        // at most one: each request replaces the last).
        let mut released = None;
        if let Some(p) = self.ports.get_mut(e.port) {
            if kind == NOTIFY_KIND_NO_SENDERS {
                released = p.no_senders.take().map(|(n, _)| n);
            } else if let Some(i) = p
                .dead_names
                .iter()
                .position(|&(_, nm, s)| nm == name && s == sid)
            {
                // `remove`, not `swap_remove`: the requests stay in the order they were
                // made, which is the order their notifications go in when the port dies.
                released = Some(p.dead_names.remove(i).0);
            }
        }
        if let Some(n) = released {
            self.drop_kernel_send_once(n);
        }
        let Some(notify) = notify else {
            return Ok(());
        };
        if let Some(np) = self.ports.get_mut(notify) {
            np.send_onces += 1;
        }
        let fire_now = match self.ports.get_mut(e.port) {
            Some(p) if kind == NOTIFY_KIND_NO_SENDERS => {
                p.no_senders = Some((notify, name));
                p.sends == 0
            }
            Some(p) => {
                p.dead_names.push((notify, name, sid));
                false
            }
            None => false,
        };
        if fire_now {
            self.fire_no_senders(e.port, fx);
        }
        Ok(())
    }

    /// Resolves the destination of a message without side effects: the live port of the
    /// header's `dest` name used with its disposition.
    #[inline]
    pub fn dest_port(&self, space: &Space, header: &MsgHeader) -> Result<PortId, Error> {
        self.resolve_dest(space, header).map(Dest::port)
    }

    /// [`Ipc::dest_port`], kept as a [`Dest`] that [`Ipc::copyin_to`] takes instead of
    /// resolving the name a second time.
    #[inline]
    pub fn resolve_dest(&self, space: &Space, header: &MsgHeader) -> Result<Dest, Error> {
        let d = Disposition::from_raw(header.dest_disposition()).ok_or(Error::InvalidArgument)?;
        if matches!(d, Disposition::None | Disposition::MoveReceive) {
            return Err(Error::InvalidArgument);
        }
        let e = space.lookup(header.dest)?;
        if !allows(e.kind, d) {
            return Err(Error::InvalidRight);
        }
        if !self.ports.contains(e.port) {
            return Err(Error::DeadName);
        }
        Ok(Dest {
            port: e.port,
            name: header.dest,
            disposition: d,
        })
    }

    /// Checks a message header's form: reserved bits, size, descriptor count, kernel ids.
    pub fn check_header(header: &MsgHeader, limit: usize) -> Result<(), Error> {
        let size = header.size as usize;
        let n = header.descriptors();
        if !header.reserved_clear() || header.id >= KERNEL_ID_BASE {
            return Err(Error::InvalidArgument);
        }
        if n > DESCRIPTORS_MAX {
            return Err(Error::TooLarge);
        }
        if size > limit {
            return Err(Error::TooLarge);
        }
        if size < HEADER_SIZE + n * DESCRIPTOR_SIZE {
            return Err(Error::InvalidArgument);
        }
        Ok(())
    }

    /// Checks a message as [`Ipc::copyin`] would, with no side effect: the error it would
    /// return before taking anything, if any. The kernel runs it before it takes a
    /// message's out-of-line regions, which it would otherwise have to put back;
    /// `ool_at(i)` says whether descriptor `i` is an out-of-line region the kernel will
    /// attach.
    pub fn check_copyin(
        &self,
        space: &Space,
        header: &MsgHeader,
        descriptors: &[Descriptor],
        ool_at: impl Fn(usize) -> bool,
    ) -> Result<PortId, Error> {
        self.decode(space, header, descriptors, ool_at)
            .map(|d| d.dest)
    }

    /// The decode phase of [`Ipc::copyin`]: every name, disposition and descriptor, with
    /// no side effect.
    fn decode(
        &self,
        space: &Space,
        header: &MsgHeader,
        descriptors: &[Descriptor],
        ool_at: impl Fn(usize) -> bool,
    ) -> Result<Decoded, Error> {
        let dest = self.resolve_dest(space, header)?;
        self.decode_to(space, header, dest, descriptors, ool_at)
    }

    /// [`Ipc::decode`] of a message whose destination is resolved already (`dest`, from
    /// [`Ipc::resolve_dest`] of the same space and header).
    #[inline(always)]
    fn decode_to(
        &self,
        space: &Space,
        header: &MsgHeader,
        dest: Dest,
        descriptors: &[Descriptor],
        ool_at: impl Fn(usize) -> bool,
    ) -> Result<Decoded, Error> {
        let Dest {
            port: dest,
            disposition: dest_disp,
            ..
        } = dest;
        let reply_disp =
            Disposition::from_raw(header.reply_disposition()).ok_or(Error::InvalidArgument)?;
        let reply = match (reply_disp, header.reply) {
            (Disposition::None, 0) => None,
            (Disposition::None, _) | (Disposition::MoveReceive, _) => {
                return Err(Error::InvalidArgument)
            }
            (d, name) => Some(self.check_named(space, name, d)?),
        };
        if descriptors.len() != header.descriptors() {
            return Err(Error::InvalidArgument);
        }
        let dest_use = (header.dest, moves(dest_disp));
        if descriptors.is_empty() {
            // Only the destination and the reply right (most messages): one comparison,
            // no list of names.
            if reply.is_some_and(|r| r.name == dest_use.0 && (moves(r.disposition) || dest_use.1)) {
                return Err(Error::InvalidArgument);
            }
            return Ok(Decoded {
                dest,
                dest_disp,
                reply,
                named: Vec::new(),
            });
        }
        let mut named: Vec<Named> = Vec::new();
        named
            .try_reserve_exact(descriptors.len())
            .map_err(|_| Error::NoMemory)?;
        for (i, d) in descriptors.iter().enumerate() {
            match d.kind {
                DESC_PORT => {}
                // Out-of-line regions are the kernel's to check and take; without one
                // attached (a kernel object's port, ...) the descriptor is refused.
                DESC_OOL if ool_at(i) => continue,
                DESC_OOL => return Err(Error::NotSupported),
                _ => return Err(Error::InvalidArgument),
            }
            if d.size != 0 {
                return Err(Error::InvalidArgument);
            }
            let disp = u8::try_from(d.disposition)
                .ok()
                .and_then(Disposition::from_raw)
                .ok_or(Error::InvalidArgument)?;
            if disp == Disposition::None {
                return Err(Error::InvalidArgument);
            }
            let n = self.check_named(space, d.value, disp)?;
            if n.disposition == Disposition::MoveReceive && self.would_cycle(n.entry.port, dest) {
                // A message cannot carry the receive right of its own destination, nor of
                // a port whose queue the destination's receive right sits in (directly or
                // further up): such a cycle could never be received or reclaimed.
                return Err(Error::InvalidArgument);
            }
            named.push(n);
        }
        // A name that moves may appear nowhere else in the message (checked pairwise, with
        // no allocation: at most 2 + DESCRIPTORS_MAX names). (Out-of-line descriptors name
        // no right: a message of only those has no port names beyond the two above.)
        let reply_use = reply.map(|r| (r.name, moves(r.disposition)));
        let uses = || {
            core::iter::once(dest_use)
                .chain(reply_use)
                .chain(named.iter().map(|n| (n.name, moves(n.disposition))))
        };
        for (i, (name, moving)) in uses().enumerate() {
            let clash = uses()
                .enumerate()
                .any(|(j, (other, m))| i != j && other == name && (moving || m));
            if clash {
                return Err(Error::InvalidArgument);
            }
        }

        Ok(Decoded {
            dest,
            dest_disp,
            reply,
            named,
        })
    }

    /// Turns the sender's message (its header and descriptors; `data`, the in-line bytes)
    /// into a kernel message for the port it returns, moving the rights out of `space`.
    /// Nothing changes unless everything checks out. An out-of-line descriptor is refused
    /// ([`Error::NotSupported`]): see [`Ipc::copyin_ool`].
    pub fn copyin(
        &mut self,
        space: &mut Space,
        header: &MsgHeader,
        descriptors: &[Descriptor],
        data: Vec<u8>,
        fx: &mut Effects<T>,
    ) -> Result<(PortId, Message), Error> {
        self.copyin_ool(space, header, descriptors, data, Vec::new(), fx)
    }

    /// [`Ipc::copyin`] of a message whose destination the caller resolved with
    /// [`Ipc::resolve_dest`] and has not changed `space` since: the plan's reference is
    /// reused, the name is not looked up again. Same results and effects as
    /// [`Ipc::copyin`].
    pub fn copyin_to(
        &mut self,
        space: &mut Space,
        dest: Dest,
        header: &MsgHeader,
        descriptors: &[Descriptor],
        data: Vec<u8>,
        fx: &mut Effects<T>,
    ) -> Result<(PortId, Message), Error> {
        debug_assert_eq!(self.resolve_dest(space, header), Ok(dest), "a stale Dest");
        let decoded = self.decode_to(space, header, dest, descriptors, |_| false)?;
        self.copyin_decoded(space, header, decoded, descriptors, data, Vec::new(), fx)
    }

    /// [`Ipc::copyin`] of a message carrying out-of-line regions: `ool` holds those the
    /// kernel took for its `DESC_OOL` descriptors, in order. Nothing changes unless
    /// everything checks out (the regions are then still the caller's to release).
    pub fn copyin_ool(
        &mut self,
        space: &mut Space,
        header: &MsgHeader,
        descriptors: &[Descriptor],
        data: Vec<u8>,
        ool: Vec<Attached>,
        fx: &mut Effects<T>,
    ) -> Result<(PortId, Message), Error> {
        let ool_at = |i: usize| ool.iter().any(|a| usize::from(a.index) == i);
        let decoded = self.decode(space, header, descriptors, ool_at)?;
        self.copyin_decoded(space, header, decoded, descriptors, data, ool, fx)
    }

    /// The invoke phase of [`Ipc::copyin_ool`], after its decode.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // the decode's result joins copyin's own arguments
    fn copyin_decoded(
        &mut self,
        space: &mut Space,
        header: &MsgHeader,
        decoded: Decoded,
        descriptors: &[Descriptor],
        data: Vec<u8>,
        ool: Vec<Attached>,
        fx: &mut Effects<T>,
    ) -> Result<(PortId, Message), Error> {
        let Decoded {
            dest,
            dest_disp,
            reply,
            named,
        } = decoded;
        let ools = descriptors.iter().filter(|d| d.kind == DESC_OOL).count();
        if ools != ool.len() {
            return Err(Error::InvalidArgument);
        }
        // The message's rights, room made now: nothing below allocates once rights move.
        let mut rights: Vec<Right> = Vec::new();
        rights
            .try_reserve_exact(named.len())
            .map_err(|_| Error::NoMemory)?;
        // Room in the release work list for this message's rights once it is queued.
        self.reserve_work(named.len() + 1)?;
        // Room in the queues, before anything moves: the destination's for this message,
        // and for each send-once right the message makes, its port's (see
        // [`Port::reserve_queue`]).
        self.ports
            .get_mut(dest)
            .ok_or(Error::DeadName)?
            .reserve_queue(1)?;
        let makes = || {
            reply
                .iter()
                .chain(named.iter())
                .filter(|n| n.disposition == Disposition::MakeSendOnce)
                .map(|n| n.entry.port)
        };
        if named.is_empty() {
            // At most the reply right makes a send-once right.
            if let Some(n) = reply.filter(|n| n.disposition == Disposition::MakeSendOnce) {
                if let Some(p) = self.ports.get_mut(n.entry.port) {
                    p.reserve_queue(1)?;
                }
            }
        } else {
            for port in makes() {
                let count = makes().filter(|&p| p == port).count();
                if let Some(p) = self.ports.get_mut(port) {
                    p.reserve_queue(count)?;
                }
            }
        }

        // Invoke: take the rights. The destination's moved right is released last: a send
        // right made or copied into this message must count before the destination's is
        // given up, or a port whose last send right is the destination would be told it has
        // no senders while this message carries one to it.
        let reply = reply.map(|n| self.take(space, n, fx));
        for n in named {
            let r = self.take(space, n, fx);
            rights.push(r);
        }
        if moves(dest_disp) {
            if let Some(e) = space.remove(header.dest) {
                self.name_gone(e, header.dest, space.id());
                self.forget_entry(e, fx);
            }
        }
        Ok((
            dest,
            Message {
                id: header.id,
                reply,
                rights,
                data,
                charge: None,
                word: None,
                ool,
            },
        ))
    }

    /// A moved-out entry that does not travel (the destination's `MoveSend` or
    /// `MoveSendOnce`): the send-once right is used up by this message, a send right is
    /// released.
    fn forget_entry(&mut self, e: Entry, fx: &mut Effects<T>) {
        match e.kind {
            Held::SendOnce => {
                if let Some(p) = self.ports.get_mut(e.port) {
                    p.send_onces = p.send_onces.saturating_sub(1);
                }
            }
            kind => self.release_rights([Right { kind, port: e.port }], fx),
        }
    }

    /// Checks one named right against its disposition.
    fn check_named(
        &self,
        space: &Space,
        name: u64,
        disposition: Disposition,
    ) -> Result<Named, Error> {
        let entry = space.lookup(name)?;
        if !allows(entry.kind, disposition) {
            return Err(Error::InvalidRight);
        }
        if !self.ports.contains(entry.port) {
            return Err(Error::DeadName);
        }
        Ok(Named {
            name,
            entry,
            disposition,
        })
    }

    /// Takes a checked right out of `space` into a message.
    fn take(&mut self, space: &mut Space, n: Named, fx: &mut Effects<T>) -> Right {
        let port = n.entry.port;
        let kind = match n.disposition {
            Disposition::MoveReceive => Held::Receive,
            Disposition::MakeSendOnce | Disposition::MoveSendOnce => Held::SendOnce,
            _ => Held::Send,
        };
        if moves(n.disposition) {
            if let Some(e) = space.remove(n.name) {
                self.name_gone(e, n.name, space.id());
            }
        }
        if let Some(p) = self.ports.get_mut(port) {
            match n.disposition {
                Disposition::MakeSend | Disposition::CopySend => p.sends += 1,
                Disposition::MakeSendOnce => p.send_onces += 1,
                Disposition::MoveReceive => {
                    // The receive right leaves its task: whoever waits on it there gives
                    // up.
                    p.receiver = 0;
                    while let Some(t) = p.receivers.pop_front() {
                        fx.wake.push((t, Wake::Fail(Error::InvalidName)));
                    }
                }
                _ => {}
            }
        }
        Right { kind, port }
    }

    /// Queues `msg` on `port` (whatever its limit) and hands the oldest blocked receiver
    /// a retry. A message for a port that died meanwhile is destroyed.
    pub fn enqueue(&mut self, port: PortId, msg: Message, fx: &mut Effects<T>) {
        if !self.ports.contains(port) {
            self.destroy_message(msg, fx);
            return;
        }
        self.set_transit(&msg, Some(port));
        if let Some(p) = self.ports.get_mut(port) {
            self.rights_queued += msg.rights.len() + usize::from(msg.reply.is_some());
            p.queue.push_back(msg);
            self.queued += 1;
            if let Some(t) = p.receivers.pop_front() {
                fx.wake.push((t, Wake::Retry));
            }
        }
    }

    /// Takes the oldest message of `port`, handing the oldest blocked sender a retry.
    pub fn dequeue(&mut self, port: PortId, fx: &mut Effects<T>) -> Option<Message> {
        let p = self.ports.get_mut(port)?;
        let msg = p.queue.pop_front()?;
        self.queued -= 1;
        self.rights_queued -= msg.rights.len() + usize::from(msg.reply.is_some());
        if let Some(t) = p.senders.pop_front() {
            fx.wake.push((t, Wake::Retry));
        }
        self.set_transit(&msg, None);
        Some(msg)
    }

    /// Puts `msg` back at the front of `port`'s queue (it was dequeued but could not be
    /// received); destroyed if the port died meanwhile.
    pub fn requeue_front(&mut self, port: PortId, msg: Message, fx: &mut Effects<T>) {
        if !self.ports.contains(port) {
            self.destroy_message(msg, fx);
            return;
        }
        self.set_transit(&msg, Some(port));
        if let Some(p) = self.ports.get_mut(port) {
            self.rights_queued += msg.rights.len() + usize::from(msg.reply.is_some());
            p.queue.push_front(msg);
            self.queued += 1;
        }
    }

    /// The size the oldest message of `port` needs in a receive buffer.
    pub fn peek_size(&self, port: PortId) -> Option<usize> {
        self.ports.get(port)?.queue.front().map(Message::size)
    }

    /// Moves a message's rights into `space` (id `sid`), which receives it on the port it
    /// calls `rcv_name`. Returns the header and descriptors to write out. When the space
    /// has no room for every right ([`Error::NoSpace`]), or a name or `out` cannot be made
    /// (the heap or the space's account has no room: [`Error::NoMemory`] or
    /// [`Error::NoSpace`]), nothing happens: every name is made before any right moves.
    pub fn copyout(
        &mut self,
        space: &mut Space,
        sid: SpaceId,
        rcv_name: u64,
        msg: &Message,
        out: &mut Vec<Descriptor>,
    ) -> Result<MsgHeader, Error> {
        let needed = msg.rights.len() + usize::from(msg.reply.is_some());
        if space.room() < needed {
            return Err(Error::NoSpace);
        }
        out.clear();
        out.try_reserve(msg.rights.len() + msg.ool.len())
            .map_err(|_| Error::NoMemory)?;
        let entry = |r: &Right| Entry {
            kind: r.kind,
            port: r.port,
        };
        // The names first: each may fail (the space's table cannot grow, or its account
        // is at its limit), and then the names made go again and nothing has moved.
        let reply = match &msg.reply {
            Some(r) => space.insert(entry(r))?,
            None => 0,
        };
        for r in &msg.rights {
            match space.insert(entry(r)) {
                // `out` has room (reserved above).
                Ok(name) => out.push(Descriptor::port(name, Disposition::None)),
                Err(e) => {
                    for d in out.drain(..) {
                        space.remove(d.value);
                    }
                    if reply != 0 {
                        space.remove(reply);
                    }
                    return Err(e);
                }
            }
        }
        // Every name is made: the rights move.
        let moved = |this: &mut Self, r: &Right| match r.kind {
            Held::Receive => {
                if let Some(p) = this.ports.get_mut(r.port) {
                    p.receiver = sid;
                }
                Disposition::MoveReceive
            }
            Held::Send => Disposition::MoveSend,
            Held::SendOnce => Disposition::MoveSendOnce,
        };
        let reply_disp = match &msg.reply {
            Some(r) => moved(self, r),
            None => Disposition::None,
        };
        for (d, r) in out.iter_mut().zip(&msg.rights) {
            d.disposition = moved(self, r) as u32;
        }
        // The out-of-line descriptors go back to their places among the port descriptors
        // (`out` has room: reserved above), each holding the region's handle and size for
        // the kernel to turn into the receiver's address.
        for a in &msg.ool {
            let at = usize::from(a.index).min(out.len());
            out.insert(
                at,
                Descriptor {
                    kind: DESC_OOL,
                    disposition: 0,
                    value: a.handle,
                    size: a.size,
                },
            );
        }
        let n = msg.rights.len() + msg.ool.len();
        Ok(MsgHeader {
            bits: MsgHeader::make_bits(Disposition::None, reply_disp, n as u8),
            size: msg.size() as u32,
            dest: rcv_name,
            reply,
            id: msg.id,
        })
    }

    /// Records where the receive rights inside `msg` wait: on `port`'s queue, or (`None`)
    /// nowhere any more.
    fn set_transit(&mut self, msg: &Message, port: Option<PortId>) {
        for r in msg.rights.iter().filter(|r| r.kind == Held::Receive) {
            if let Some(p) = self.ports.get_mut(r.port) {
                p.transit = port;
            }
        }
    }

    /// Whether moving the receive right of `moving` into a message for `dest` would close a
    /// cycle: `moving` is `dest`, or `dest`'s receive right waits (directly or further up)
    /// in `moving`'s queue.
    fn would_cycle(&self, moving: PortId, dest: PortId) -> bool {
        let mut at = Some(dest);
        // A chain is at most as long as there are ports; the bound only guards the loop.
        for _ in 0..=self.ports.len() {
            match at {
                Some(p) if p == moving => return true,
                Some(p) => at = self.ports.get(p).and_then(|port| port.transit),
                None => return false,
            }
        }
        true
    }

    /// A name of space `sid` that held entry `e` is gone: its dead-name request, if any,
    /// is cancelled (the kernel's send-once right for it dropped).
    fn name_gone(&mut self, e: Entry, name: u64, sid: SpaceId) {
        if e.kind == Held::Receive {
            return;
        }
        let Some(p) = self.ports.get_mut(e.port) else {
            return;
        };
        if p.dead_names.is_empty() {
            return;
        }
        // At most one request per (name, space): each request replaces the last.
        let Some(i) = p
            .dead_names
            .iter()
            .position(|&(_, nm, s)| nm == name && s == sid)
        else {
            return;
        };
        // (In order, as above.)
        let (notify, _, _) = p.dead_names.remove(i);
        self.drop_kernel_send_once(notify);
    }

    /// Destroys a message that will never be received, releasing its rights.
    pub fn destroy_message(&mut self, msg: Message, fx: &mut Effects<T>) {
        fx.dropped.extend(msg.ool.iter().map(|a| a.handle));
        self.release_rights(msg.rights.into_iter().chain(msg.reply), fx);
    }

    /// A send-once right the kernel held for a notification, dropped without use.
    fn drop_kernel_send_once(&mut self, port: PortId) {
        if let Some(p) = self.ports.get_mut(port) {
            p.send_onces = p.send_onces.saturating_sub(1);
        }
    }

    /// Sends the no-senders notification of `port`, if requested.
    fn fire_no_senders(&mut self, port: PortId, fx: &mut Effects<T>) {
        let Some((notify, name)) = self.ports.get_mut(port).and_then(|p| p.no_senders.take())
        else {
            return;
        };
        self.drop_kernel_send_once(notify);
        self.enqueue(notify, Message::notification(NOTIFY_NO_SENDERS, name), fx);
    }

    /// Releases rights and everything that follows from that, without recursion, on the
    /// kept work list (see `work`: it has room for every right it can meet).
    fn release_rights(&mut self, first: impl IntoIterator<Item = Right>, fx: &mut Effects<T>) {
        let mut work = core::mem::take(&mut self.work);
        work.extend(first);
        while let Some(r) = work.pop() {
            match r.kind {
                Held::Send => {
                    let none_left = match self.ports.get_mut(r.port) {
                        Some(p) => {
                            p.sends = p.sends.saturating_sub(1);
                            p.sends == 0
                        }
                        None => false,
                    };
                    if none_left {
                        self.fire_no_senders(r.port, fx);
                        if self.ports.get(r.port).is_some_and(|p| p.reap) {
                            // Room was made when the port was marked.
                            self.orphans.push(r.port);
                        }
                    }
                }
                Held::SendOnce => {
                    if let Some(p) = self.ports.get_mut(r.port) {
                        p.send_onces = p.send_onces.saturating_sub(1);
                        self.enqueue(r.port, Message::notification(NOTIFY_SEND_ONCE, 0), fx);
                    }
                }
                Held::Receive => {
                    let Some(p) = self.ports.remove(r.port) else {
                        continue;
                    };
                    if p.watched {
                        self.watched -= 1;
                        // Room was made by `watch`.
                        if self.died.len() < self.died.capacity() {
                            self.died.push(r.port);
                        }
                    }
                    self.queued -= p.queue.len();
                    if p.reap {
                        self.reapable -= 1;
                    }
                    let mut receivers = p.receivers;
                    while let Some(t) = receivers.pop_front() {
                        fx.wake.push((t, Wake::Fail(Error::InvalidName)));
                    }
                    let mut senders = p.senders;
                    while let Some(t) = senders.pop_front() {
                        fx.wake.push((t, Wake::Fail(Error::DeadName)));
                    }
                    if let Some((notify, _)) = p.no_senders {
                        self.drop_kernel_send_once(notify);
                    }
                    for (notify, name, _) in p.dead_names {
                        self.drop_kernel_send_once(notify);
                        self.enqueue(notify, Message::notification(NOTIFY_DEAD_NAME, name), fx);
                    }
                    for msg in p.queue {
                        fx.dropped.extend(msg.ool.iter().map(|a| a.handle));
                        self.rights_queued -= msg.rights.len() + usize::from(msg.reply.is_some());
                        work.extend(msg.rights);
                        work.extend(msg.reply);
                    }
                }
            }
        }
        // The list goes back for the next release (the larger one, if another was made
        // meanwhile).
        if work.capacity() > self.work.capacity() {
            self.work = work;
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
