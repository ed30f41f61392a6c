//! Property tests of the IPC name spaces and rights accounting against a naive model.
//!
//! Random sequences of operations (allocate, make and grant send rights, release names,
//! send messages carrying rights, receive them, block threads, request notifications,
//! end a task) are applied both to the real [`Ipc`] and [`Space`]s and to [`Model`]: plain
//! maps and vectors, ports numbered in creation order and never reused, and an `alive` flag
//! where the real code has generation-checked keys. After every step the two must agree on
//! the result, the threads woken, every name of every space (and what [`Ipc::info`] says of
//! it), and every port (alive or not, its receiver, counts, queue and blocked threads);
//! and the real state must satisfy the module's invariants, recounted from scratch: a
//! live port's send and send-once counts are the rights of that kind in name spaces and
//! queued messages (plus the kernel's send-once rights for notification requests), and its
//! receive right is in exactly one place.

use super::*;
use alloc::collections::{BTreeMap, VecDeque};
use baton_abi::ipc::{Descriptor, Disposition as D, MsgHeader};
use proptest::prelude::*;
use std::vec;

/// Tasks in a run (space ids 1..=SPACES).
const SPACES: usize = 3;

type I = Ipc<u32>;

/// A right in the model: its kind and the model's port number.
type MRight = (Held, usize);

/// A message in the model.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MMsg {
    id: u64,
    reply: Option<MRight>,
    rights: Vec<MRight>,
    data: Vec<u8>,
}

impl MMsg {
    fn notification(id: u64, word: u64) -> MMsg {
        MMsg {
            id,
            reply: None,
            rights: Vec::new(),
            data: word.to_le_bytes().to_vec(),
        }
    }
}

/// A port in the model.
#[derive(Clone, Debug, Default)]
struct MPort {
    alive: bool,
    /// Space index holding the receive right; `None` in flight.
    receiver: Option<usize>,
    queue: VecDeque<MMsg>,
    /// Queue limit (0 until set: the default).
    limit: u64,
    sends: u64,
    send_onces: u64,
    /// (notify port, name).
    no_senders: Option<(usize, u64)>,
    /// (notify port, name, space index).
    dead_names: Vec<(usize, u64, usize)>,
    receivers: VecDeque<u32>,
    senders: VecDeque<u32>,
}

/// The reference model. See the module documentation.
#[derive(Default)]
struct Model {
    /// Per space: name -> right.
    spaces: [BTreeMap<u64, MRight>; SPACES],
    ports: Vec<MPort>,
    /// Threads woken by the current operation.
    wakes: Vec<(u32, Wake)>,
}

fn allows(held: Held, d: D) -> bool {
    matches!(
        (held, d),
        (
            Held::Receive,
            D::MoveReceive | D::MakeSend | D::MakeSendOnce
        ) | (Held::Send, D::MoveSend | D::CopySend)
            | (Held::SendOnce, D::MoveSendOnce)
    )
}

fn moves(d: D) -> bool {
    matches!(d, D::MoveReceive | D::MoveSend | D::MoveSendOnce)
}

impl Model {
    fn alive(&self, p: usize) -> bool {
        self.ports[p].alive
    }

    fn port(&mut self, p: usize) -> Option<&mut MPort> {
        self.ports.get_mut(p).filter(|p| p.alive)
    }

    fn lookup(&self, s: usize, name: u64) -> Result<MRight, Error> {
        self.spaces[s].get(&name).copied().ok_or(Error::InvalidName)
    }

    fn enqueue(&mut self, p: usize, msg: MMsg) {
        match self.port(p) {
            Some(port) => {
                port.queue.push_back(msg);
                if let Some(t) = port.receivers.pop_front() {
                    self.wakes.push((t, Wake::Retry));
                }
            }
            None => {
                let mut rights = msg.rights;
                rights.extend(msg.reply);
                self.release_rights(rights);
            }
        }
    }

    fn drop_kernel_send_once(&mut self, p: usize) {
        if let Some(port) = self.port(p) {
            port.send_onces -= 1;
        }
    }

    fn fire_no_senders(&mut self, p: usize) {
        if let Some((notify, name)) = self.port(p).and_then(|p| p.no_senders.take()) {
            self.drop_kernel_send_once(notify);
            self.enqueue(notify, MMsg::notification(NOTIFY_NO_SENDERS, name));
        }
    }

    fn release_rights(&mut self, mut work: Vec<MRight>) {
        while let Some((kind, p)) = work.pop() {
            if !self.alive(p) {
                continue;
            }
            match kind {
                Held::Send => {
                    let port = &mut self.ports[p];
                    port.sends -= 1;
                    if port.sends == 0 {
                        self.fire_no_senders(p);
                    }
                }
                Held::SendOnce => {
                    self.ports[p].send_onces -= 1;
                    self.enqueue(p, MMsg::notification(NOTIFY_SEND_ONCE, 0));
                }
                Held::Receive => {
                    let port = core::mem::take(&mut self.ports[p]);
                    for t in port.receivers {
                        self.wakes.push((t, Wake::Fail(Error::InvalidName)));
                    }
                    for t in port.senders {
                        self.wakes.push((t, Wake::Fail(Error::DeadName)));
                    }
                    if let Some((notify, _)) = port.no_senders {
                        self.drop_kernel_send_once(notify);
                    }
                    for (notify, name, _) in port.dead_names {
                        self.drop_kernel_send_once(notify);
                        self.enqueue(notify, MMsg::notification(NOTIFY_DEAD_NAME, name));
                    }
                    for msg in port.queue {
                        work.extend(msg.rights);
                        work.extend(msg.reply);
                    }
                }
            }
        }
    }

    /// Name `name` of space `s` (which held `r`) is gone: its dead-name requests go too.
    fn name_gone(&mut self, s: usize, name: u64, r: MRight) {
        if r.0 == Held::Receive || !self.alive(r.1) {
            return;
        }
        let requests = core::mem::take(&mut self.ports[r.1].dead_names);
        let (gone, kept): (Vec<_>, Vec<_>) = requests
            .into_iter()
            .partition(|&(_, nm, sp)| nm == name && sp == s);
        self.ports[r.1].dead_names = kept;
        for (notify, _, _) in gone {
            self.drop_kernel_send_once(notify);
        }
    }

    fn release(&mut self, s: usize, name: u64) -> Result<(), Error> {
        let r = self.spaces[s].remove(&name).ok_or(Error::InvalidName)?;
        self.name_gone(s, name, r);
        self.release_rights(vec![r]);
        Ok(())
    }

    fn release_space(&mut self, s: usize) {
        // In slot order (a name's low 32 bits), as the real space lists them.
        let mut names: Vec<(u64, MRight)> = self.spaces[s].iter().map(|(&n, &r)| (n, r)).collect();
        names.sort_by_key(|&(n, _)| n as u32);
        let mut rights = Vec::new();
        for (name, r) in names {
            self.spaces[s].remove(&name);
            self.name_gone(s, name, r);
            rights.push(r);
        }
        self.release_rights(rights);
    }

    fn receive_port(&self, s: usize, name: u64) -> Result<usize, Error> {
        let (kind, p) = self.lookup(s, name)?;
        if kind != Held::Receive {
            return Err(Error::InvalidRight);
        }
        if !self.alive(p) {
            return Err(Error::InvalidName);
        }
        Ok(p)
    }

    fn check_named(&self, s: usize, name: u64, d: D) -> Result<(u64, MRight, D), Error> {
        let r = self.lookup(s, name)?;
        if !allows(r.0, d) {
            return Err(Error::InvalidRight);
        }
        if !self.alive(r.1) {
            return Err(Error::DeadName);
        }
        Ok((name, r, d))
    }

    /// The port whose queue holds the message carrying `p`'s receive right, if any.
    fn transit(&self, p: usize) -> Option<usize> {
        self.ports.iter().position(|q| {
            q.alive
                && q.queue.iter().any(|m| {
                    m.rights
                        .iter()
                        .chain(m.reply.iter())
                        .any(|&r| r == (Held::Receive, p))
                })
        })
    }

    fn would_cycle(&self, moving: usize, dest: usize) -> bool {
        let mut at = Some(dest);
        while let Some(p) = at {
            if p == moving {
                return true;
            }
            at = self.transit(p);
        }
        false
    }

    /// Takes a checked right out of space `s` into a message.
    fn take(&mut self, s: usize, (name, (kind, p), d): (u64, MRight, D)) -> MRight {
        if moves(d) {
            self.spaces[s].remove(&name);
            self.name_gone(s, name, (kind, p));
        }
        let mut woken = Vec::new();
        if let Some(port) = self.port(p) {
            match d {
                D::MakeSend | D::CopySend => port.sends += 1,
                D::MakeSendOnce => port.send_onces += 1,
                D::MoveReceive => {
                    port.receiver = None;
                    woken.extend(port.receivers.drain(..));
                }
                _ => {}
            }
        }
        for t in woken {
            self.wakes.push((t, Wake::Fail(Error::InvalidName)));
        }
        let kind = match d {
            D::MoveReceive => Held::Receive,
            D::MakeSendOnce | D::MoveSendOnce => Held::SendOnce,
            _ => Held::Send,
        };
        (kind, p)
    }

    /// `copyin` and `enqueue` of a message from space `s`.
    fn send(&mut self, s: usize, m: &Send) -> Result<usize, Error> {
        let dd = D::from_raw(m.dest_disp).ok_or(Error::InvalidArgument)?;
        if matches!(dd, D::None | D::MoveReceive) {
            return Err(Error::InvalidArgument);
        }
        let dest = self.check_named(s, m.dest, dd)?;
        let rd = D::from_raw(m.reply_disp).ok_or(Error::InvalidArgument)?;
        let reply = match (rd, m.reply) {
            (D::None, 0) => None,
            (D::None, _) | (D::MoveReceive, _) => return Err(Error::InvalidArgument),
            (d, name) => Some(self.check_named(s, name, d)?),
        };
        let mut named = Vec::new();
        for &(name, raw) in &m.descs {
            let d = D::from_raw(raw).ok_or(Error::InvalidArgument)?;
            if d == D::None {
                return Err(Error::InvalidArgument);
            }
            let n = self.check_named(s, name, d)?;
            if d == D::MoveReceive && self.would_cycle(n.1 .1, dest.1 .1) {
                return Err(Error::InvalidArgument);
            }
            named.push(n);
        }
        let uses: Vec<(u64, bool)> = core::iter::once((m.dest, moves(dd)))
            .chain(reply.map(|r| (r.0, moves(r.2))))
            .chain(named.iter().map(|n| (n.0, moves(n.2))))
            .collect();
        for (i, &(name, moving)) in uses.iter().enumerate() {
            for (j, &(other, m2)) in uses.iter().enumerate() {
                if i != j && name == other && (moving || m2) {
                    return Err(Error::InvalidArgument);
                }
            }
        }
        let dest_port = dest.1 .1;
        let reply = reply.map(|n| self.take(s, n));
        let rights = named.into_iter().map(|n| self.take(s, n)).collect();
        // The destination's moved right goes last, after the rights the message carries.
        if moves(dd) {
            self.spaces[s].remove(&m.dest);
            self.name_gone(s, m.dest, dest.1);
            match dest.1 .0 {
                Held::SendOnce => self.ports[dest_port].send_onces -= 1,
                kind => self.release_rights(vec![(kind, dest_port)]),
            }
        }
        self.enqueue(
            dest_port,
            MMsg {
                id: m.id,
                reply,
                rights,
                data: m.data.clone(),
            },
        );
        Ok(dest_port)
    }

    fn request_notify(
        &mut self,
        s: usize,
        name: u64,
        kind: u64,
        notify_name: u64,
    ) -> Result<(), Error> {
        let (held, p) = self.lookup(s, name)?;
        let notify = match notify_name {
            0 => None,
            n => Some(self.receive_port(s, n)?),
        };
        match (kind, held) {
            (NOTIFY_KIND_DEAD_NAME, Held::Send | Held::SendOnce) => {
                if !self.alive(p) {
                    return Err(Error::DeadName);
                }
            }
            (NOTIFY_KIND_NO_SENDERS, Held::Receive) => {}
            (NOTIFY_KIND_DEAD_NAME | NOTIFY_KIND_NO_SENDERS, _) => return Err(Error::InvalidRight),
            _ => return Err(Error::InvalidArgument),
        }
        let mut released = Vec::new();
        if kind == NOTIFY_KIND_NO_SENDERS {
            released.extend(self.ports[p].no_senders.take().map(|(n, _)| n));
        } else {
            let requests = core::mem::take(&mut self.ports[p].dead_names);
            let (gone, kept): (Vec<_>, Vec<_>) = requests
                .into_iter()
                .partition(|&(_, nm, sp)| nm == name && sp == s);
            self.ports[p].dead_names = kept;
            released.extend(gone.into_iter().map(|(n, _, _)| n));
        }
        for n in released {
            self.drop_kernel_send_once(n);
        }
        let Some(notify) = notify else {
            return Ok(());
        };
        self.ports[notify].send_onces += 1;
        if kind == NOTIFY_KIND_NO_SENDERS {
            self.ports[p].no_senders = Some((notify, name));
            if self.ports[p].sends == 0 {
                self.fire_no_senders(p);
            }
        } else {
            self.ports[p].dead_names.push((notify, name, s));
        }
        Ok(())
    }
}

/// A message to send, in the sender's names.
#[derive(Clone, Debug)]
struct Send {
    dest: u64,
    dest_disp: u8,
    reply: u64,
    reply_disp: u8,
    descs: Vec<(u64, u8)>,
    id: u64,
    data: Vec<u8>,
}

/// One step; names are picks (see [`World::name`]).
#[derive(Clone, Debug)]
enum Op {
    /// Space and queue limit.
    Allocate(usize, u64),
    /// `sendable_port` of a pick.
    Sendable(usize, usize),
    MakeSend(usize, usize, bool),
    /// Space, and a pick of a port (by creation order).
    GrantSend(usize, usize),
    Release(usize, usize),
    Send {
        space: usize,
        dest: usize,
        dest_disp: u8,
        reply: Option<(usize, u8)>,
        descs: Vec<(usize, u8)>,
        data: Vec<u8>,
    },
    /// Space, a receive pick, and whether the message is put back (as when the receiver's
    /// buffer is too small) instead of copied out.
    Receive(usize, usize, bool),
    /// Space, a receive pick, and whether the thread blocks as a sender (on a full queue).
    Block(usize, usize, bool),
    Notify(usize, usize, u64, Option<usize>),
    ReleaseSpace(usize),
    /// `port_set_limit` on a receive pick.
    SetLimit(usize, usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0..SPACES;
    let pick = any::<usize>();
    // Dispositions 0..=7: 7 is not one; the common ones weigh more.
    // Raw dispositions 0..=7 (7 is not one), or 8 and up for one that fits the right.
    let disp = prop_oneof![1 => 0u8..=7, 4 => 8u8..=255];
    prop_oneof![
        3 => (
            s.clone(),
            prop_oneof![4 => Just(0), 2 => 1u64..4, 1 => Just(QUEUE_LIMIT_MAX), 1 => Just(QUEUE_LIMIT_MAX + 1)]
        )
            .prop_map(|(s, l)| Op::Allocate(s, l)),
        1 => (s.clone(), pick).prop_map(|(s, p)| Op::Sendable(s, p)),
        3 => (s.clone(), pick, any::<bool>()).prop_map(|(s, p, o)| Op::MakeSend(s, p, o)),
        3 => (s.clone(), pick).prop_map(|(s, p)| Op::GrantSend(s, p)),
        2 => (s.clone(), pick).prop_map(|(s, p)| Op::Release(s, p)),
        6 => (
            s.clone(),
            pick,
            disp.clone(),
            proptest::option::weighted(0.4, (pick, disp.clone())),
            proptest::collection::vec((pick, disp.clone()), 0..4),
            proptest::collection::vec(any::<u8>(), 0..4),
        )
            .prop_map(|(space, dest, dest_disp, reply, descs, data)| Op::Send {
                space,
                dest,
                dest_disp,
                reply,
                descs,
                data,
            }),
        4 => (s.clone(), pick, proptest::bool::weighted(0.2))
            .prop_map(|(s, p, back)| Op::Receive(s, p, back)),
        1 => (s.clone(), pick, any::<bool>()).prop_map(|(s, p, b)| Op::Block(s, p, b)),
        2 => (
            s.clone(),
            pick,
            prop_oneof![4 => 1u64..=2, 1 => 0u64..=3],
            proptest::option::weighted(0.8, pick)
        )
            .prop_map(|(s, p, k, n)| Op::Notify(s, p, k, n)),
        1 => s.clone().prop_map(Op::ReleaseSpace),
        1 => (s, pick, prop_oneof![3 => 1u64..4, 1 => Just(0), 1 => Just(QUEUE_LIMIT_MAX + 1)])
            .prop_map(|(s, p, l)| Op::SetLimit(s, p, l)),
    ]
}

/// The real state, the model, and the bookkeeping between them.
struct World {
    ipc: I,
    spaces: Vec<Space>,
    model: Model,
    /// Real port id of each model port.
    ids: Vec<PortId>,
    /// Every name ever handed out, in any space (stale and foreign names for the picks).
    seen: Vec<u64>,
    next_thread: u32,
}

impl World {
    fn new() -> World {
        World {
            ipc: I::new(),
            spaces: (1..=SPACES as u64).map(Space::with_id).collect(),
            model: Model::default(),
            ids: Vec::new(),
            seen: Vec::new(),
            next_thread: 1,
        }
    }

    /// A name for space `s`: mostly one it holds (of kind `kind` if it has one), sometimes
    /// one it held or another space holds, or a made-up one.
    fn name(&self, s: usize, pick: usize, kind: Option<Held>) -> u64 {
        let own: Vec<u64> = self.model.spaces[s]
            .iter()
            .filter(|(_, r)| kind.is_none_or(|k| r.0 == k))
            .map(|(&n, _)| n)
            .collect();
        let own = if own.is_empty() {
            self.model.spaces[s].keys().copied().collect()
        } else {
            own
        };
        let forged = [0u64, 1, u64::MAX];
        if !pick.is_multiple_of(16) && !own.is_empty() {
            return own[(pick / 16) % own.len()];
        }
        let i = (pick / 16) % (self.seen.len() + forged.len());
        self.seen
            .get(i)
            .copied()
            .unwrap_or_else(|| forged[i - self.seen.len()])
    }

    /// The raw disposition `raw` for `name` of space `s`: as it is below 8; otherwise one
    /// that fits the right held (what a correct sender would use), chosen by `raw`.
    fn disposition(&self, s: usize, name: u64, raw: u8, dest: bool) -> u8 {
        if raw < 8 {
            return raw;
        }
        let choices: &[D] = match self.model.spaces[s].get(&name) {
            Some((Held::Receive, _)) if dest => &[D::MakeSend, D::MakeSendOnce],
            Some((Held::Receive, _)) => &[D::MakeSend, D::MakeSendOnce, D::MoveReceive],
            Some((Held::Send, _)) => &[D::CopySend, D::MoveSend],
            Some((Held::SendOnce, _)) => &[D::MoveSendOnce],
            None => &[D::CopySend],
        };
        choices[usize::from(raw) % choices.len()] as u8
    }

    fn model_port(&self, id: PortId) -> usize {
        self.ids
            .iter()
            .position(|&p| p == id)
            .expect("every real port is a model port")
    }

    fn to_model(&self, r: &Right) -> MRight {
        (r.kind, self.model_port(r.port))
    }

    fn msg_to_model(&self, m: &Message) -> MMsg {
        MMsg {
            id: m.id,
            reply: m.reply.as_ref().map(|r| self.to_model(r)),
            rights: m.rights.iter().map(|r| self.to_model(r)).collect(),
            // A notification's word is its data as the receiver sees it.
            data: m
                .word
                .map_or_else(|| m.data.clone(), |w| w.to_le_bytes().to_vec()),
        }
    }

    fn got_name(&mut self, s: usize, name: u64, r: MRight) {
        self.model.spaces[s].insert(name, r);
        self.seen.push(name);
    }

    fn step(&mut self, op: &Op) {
        let mut fx = Effects::default();
        self.model.wakes.clear();
        match *op {
            Op::Allocate(s, limit) => {
                let sid = s as u64 + 1;
                let real = self.ipc.allocate(&mut self.spaces[s], sid, limit);
                if limit > QUEUE_LIMIT_MAX {
                    assert_eq!(real, Err(Error::InvalidArgument));
                    return;
                }
                let name = real.expect("room for a port");
                let id = self.spaces[s].lookup(name).unwrap().port;
                assert!(!self.ids.contains(&id), "a new port has a new id");
                self.ids.push(id);
                self.model.ports.push(MPort {
                    alive: true,
                    receiver: Some(s),
                    limit,
                    ..MPort::default()
                });
                let p = self.model.ports.len() - 1;
                self.got_name(s, name, (Held::Receive, p));
            }
            Op::MakeSend(s, pick, once) => {
                let name = self.name(s, pick, Some(Held::Receive));
                let real = self.ipc.make_send(&mut self.spaces[s], name, once);
                let want = self.model.receive_port(s, name);
                assert_eq!(real.map(|_| ()), want.map(|_| ()), "make_send {name:#x}");
                if let (Ok(new), Ok(p)) = (real, want) {
                    let kind = if once { Held::SendOnce } else { Held::Send };
                    match kind {
                        Held::SendOnce => self.model.ports[p].send_onces += 1,
                        _ => self.model.ports[p].sends += 1,
                    }
                    self.got_name(s, new, (kind, p));
                }
            }
            Op::Sendable(s, pick) => {
                let name = self.name(s, pick, None);
                let real = self.ipc.sendable_port(&self.spaces[s], name);
                let want = self.model.lookup(s, name).and_then(|(kind, p)| {
                    if kind == Held::SendOnce {
                        Err(Error::InvalidRight)
                    } else if !self.model.alive(p) {
                        Err(Error::DeadName)
                    } else {
                        Ok(p)
                    }
                });
                assert_eq!(
                    real.map(|id| self.model_port(id)),
                    want,
                    "sendable {name:#x}"
                );
            }
            Op::GrantSend(s, pick) => {
                if self.ids.is_empty() {
                    return;
                }
                let p = pick % self.ids.len();
                let real = self.ipc.grant_send(&mut self.spaces[s], self.ids[p]);
                if self.model.alive(p) {
                    let name = real.expect("grant to a live port");
                    self.model.ports[p].sends += 1;
                    self.got_name(s, name, (Held::Send, p));
                } else {
                    assert_eq!(real, Err(Error::DeadName));
                }
            }
            Op::Release(s, pick) => {
                let name = self.name(s, pick, None);
                let real = self.ipc.release(&mut self.spaces[s], name, &mut fx);
                assert_eq!(real, self.model.release(s, name), "release {name:#x}");
            }
            Op::Send {
                space: s,
                dest,
                dest_disp,
                reply,
                ref descs,
                ref data,
            } => {
                let dest = self.name(s, dest, None);
                let reply = reply.map(|(p, d)| {
                    let name = self.name(s, p, Some(Held::Receive));
                    (name, self.disposition(s, name, d, false))
                });
                let descs = descs
                    .iter()
                    .map(|&(p, d)| {
                        let name = self.name(s, p, None);
                        (name, self.disposition(s, name, d, false))
                    })
                    .collect();
                let m = Send {
                    dest,
                    dest_disp: self.disposition(s, dest, dest_disp, true),
                    reply: reply.map_or(0, |r| r.0),
                    reply_disp: reply.map_or(0, |r| r.1),
                    descs,
                    id: self.next_thread.into(),
                    data: data.clone(),
                };
                let header = MsgHeader {
                    bits: u32::from(m.dest_disp)
                        | u32::from(m.reply_disp) << 8
                        | (m.descs.len() as u32) << 16,
                    size: (HEADER_SIZE + m.descs.len() * DESCRIPTOR_SIZE + m.data.len()) as u32,
                    dest: m.dest,
                    reply: m.reply,
                    id: m.id,
                };
                let descriptors: Vec<Descriptor> = m
                    .descs
                    .iter()
                    .map(|&(name, d)| Descriptor {
                        kind: DESC_PORT,
                        disposition: d.into(),
                        value: name,
                        size: 0,
                    })
                    .collect();
                let real = self
                    .ipc
                    .copyin(
                        &mut self.spaces[s],
                        &header,
                        &descriptors,
                        m.data.clone(),
                        &mut fx,
                    )
                    .map(|(dest, msg)| {
                        self.ipc.enqueue(dest, msg, &mut fx);
                        dest
                    });
                let want = self.model.send(s, &m);
                assert_eq!(real.map(|id| self.model_port(id)), want, "send {m:x?}");
            }
            Op::Receive(s, pick, put_back) => {
                let name = self.name(s, pick, Some(Held::Receive));
                let real = self.ipc.receive_port(&self.spaces[s], name);
                let want = self.model.receive_port(s, name);
                assert_eq!(
                    real.map(|id| self.model_port(id)),
                    want,
                    "receive {name:#x}"
                );
                let (Ok(id), Ok(p)) = (real, want) else {
                    return;
                };
                let size = |m: &MMsg| HEADER_SIZE + m.rights.len() * DESCRIPTOR_SIZE + m.data.len();
                let front = self.model.ports[p].queue.front();
                assert_eq!(self.ipc.peek_size(id), front.map(size));
                let msg = self.ipc.dequeue(id, &mut fx);
                let port = &mut self.model.ports[p];
                let expected = port.queue.pop_front();
                if expected.is_some() {
                    if let Some(t) = port.senders.pop_front() {
                        self.model.wakes.push((t, Wake::Retry));
                    }
                }
                assert_eq!(msg.as_ref().map(|m| self.msg_to_model(m)), expected);
                let Some(msg) = msg else {
                    return;
                };
                if put_back {
                    self.ipc.requeue_front(id, msg, &mut fx);
                    self.model.ports[p].queue.push_front(expected.unwrap());
                    return self.check_step(op, &fx);
                }
                let mut out = Vec::new();
                let header = self
                    .ipc
                    .copyout(&mut self.spaces[s], s as u64 + 1, name, &msg, &mut out)
                    .expect("room for the rights");
                let expected = expected.unwrap();
                assert_eq!((header.dest, header.id), (name, expected.id));
                let size =
                    HEADER_SIZE + expected.rights.len() * DESCRIPTOR_SIZE + expected.data.len();
                assert_eq!((header.size as usize, msg.size()), (size, size));
                let disposition = |kind| match kind {
                    Held::Receive => D::MoveReceive,
                    Held::Send => D::MoveSend,
                    Held::SendOnce => D::MoveSendOnce,
                } as u8;
                match expected.reply {
                    Some(r) => {
                        assert_eq!(header.reply_disposition(), disposition(r.0));
                        self.got_name(s, header.reply, r);
                        if r.0 == Held::Receive {
                            self.model.ports[r.1].receiver = Some(s);
                        }
                    }
                    None => assert_eq!((header.reply, header.reply_disposition()), (0, 0)),
                }
                assert_eq!(out.len(), expected.rights.len());
                for (d, &r) in out.iter().zip(&expected.rights) {
                    assert_eq!(d.disposition, u32::from(disposition(r.0)));
                    self.got_name(s, d.value, r);
                    if r.0 == Held::Receive {
                        self.model.ports[r.1].receiver = Some(s);
                    }
                }
            }
            Op::Block(s, pick, as_sender) => {
                let name = self.name(s, pick, Some(Held::Receive));
                let Ok(p) = self.model.receive_port(s, name) else {
                    return;
                };
                let t = self.next_thread;
                self.next_thread += 1;
                let real = self.ipc.port_mut(self.ids[p]).unwrap();
                if as_sender {
                    real.senders.push_back(t);
                    self.model.ports[p].senders.push_back(t);
                } else {
                    real.receivers.push_back(t);
                    self.model.ports[p].receivers.push_back(t);
                }
            }
            Op::Notify(s, pick, kind, notify) => {
                let name = self.name(s, pick, None);
                let notify_name = notify.map_or(0, |n| self.name(s, n, Some(Held::Receive)));
                let real =
                    self.ipc
                        .request_notify(&self.spaces[s], name, kind, notify_name, &mut fx);
                let want = self.model.request_notify(s, name, kind, notify_name);
                assert_eq!(
                    real, want,
                    "notify {name:#x} kind {kind} to {notify_name:#x}"
                );
            }
            Op::ReleaseSpace(s) => {
                self.ipc.release_space(&mut self.spaces[s], &mut fx);
                self.model.release_space(s);
            }
            Op::SetLimit(s, pick, limit) => {
                let name = self.name(s, pick, Some(Held::Receive));
                let real = self.ipc.set_limit(&self.spaces[s], name, limit);
                let want = if (1..=QUEUE_LIMIT_MAX).contains(&limit) {
                    self.model.receive_port(s, name).map(|p| {
                        self.model.ports[p].limit = limit;
                    })
                } else {
                    Err(Error::InvalidArgument)
                };
                assert_eq!(real, want, "set_limit {name:#x} {limit}");
            }
        }
        self.check_step(op, &fx);
    }

    /// After a step: the same threads woken, the same state, the invariants.
    fn check_step(&mut self, op: &Op, fx: &Effects<u32>) {
        self.next_thread += 1;
        assert_eq!(fx.wake, self.model.wakes, "threads woken by {op:?}");
        self.compare();
        self.check_invariants();
    }

    /// The real state equals the model's.
    fn compare(&self) {
        for (s, space) in self.spaces.iter().enumerate() {
            let real: BTreeMap<u64, MRight> = space
                .iter()
                .map(|(name, e)| (name, (e.kind, self.model_port(e.port))))
                .collect();
            assert_eq!(real, self.model.spaces[s], "names of space {s}");
            assert_eq!(space.len(), real.len());
            assert_eq!(space.is_empty(), real.is_empty());
            for (&name, &(kind, p)) in &self.model.spaces[s] {
                let want = match kind {
                    _ if !self.model.alive(p) => RightKind::DeadName,
                    Held::Receive => RightKind::Receive,
                    Held::Send => RightKind::Send,
                    Held::SendOnce => RightKind::SendOnce,
                };
                assert_eq!(self.ipc.info(space, name), Ok(want));
            }
        }
        let mut queued = 0;
        for (p, m) in self.model.ports.iter().enumerate() {
            let Some(real) = self.ipc.port(self.ids[p]) else {
                assert!(!m.alive, "port {p} destroyed too early");
                continue;
            };
            assert!(m.alive, "port {p} should be destroyed");
            assert_eq!(real.receiver, m.receiver.map_or(0, |s| s as u64 + 1));
            let limit = match m.limit {
                0 => QUEUE_LIMIT_DEFAULT,
                l => l,
            };
            assert_eq!(real.limit as u64, limit);
            assert_eq!(real.is_full(), m.queue.len() as u64 >= limit);
            assert_eq!(
                (real.sends, real.send_onces),
                (m.sends, m.send_onces),
                "counts of {p}"
            );
            let q: Vec<MMsg> = real
                .queue
                .iter()
                .map(|msg| self.msg_to_model(msg))
                .collect();
            assert_eq!(
                q,
                m.queue.iter().cloned().collect::<Vec<_>>(),
                "queue of {p}"
            );
            assert_eq!(
                real.receivers.iter().collect::<Vec<_>>(),
                m.receivers.iter().copied().collect::<Vec<_>>()
            );
            assert_eq!(
                real.senders.iter().collect::<Vec<_>>(),
                m.senders.iter().copied().collect::<Vec<_>>()
            );
            let no_senders = real.no_senders.map(|(n, name)| (self.model_port(n), name));
            assert_eq!(no_senders, m.no_senders);
            let dead: Vec<_> = real
                .dead_names
                .iter()
                .map(|&(n, name, sid)| (self.model_port(n), name, sid as usize - 1))
                .collect();
            assert_eq!(dead, m.dead_names);
            queued += m.queue.len();
        }
        assert_eq!(self.ipc.queued(), queued);
        assert_eq!(
            self.ipc.ports(),
            self.model.ports.iter().filter(|p| p.alive).count()
        );
    }

    /// The invariants of the module documentation, recounted from the real state alone.
    fn check_invariants(&self) {
        let mut sends: BTreeMap<PortId, u64> = BTreeMap::new();
        let mut send_onces: BTreeMap<PortId, u64> = BTreeMap::new();
        let mut receive_places: BTreeMap<PortId, Vec<u64>> = BTreeMap::new();
        let mut count = |kind: Held, port: PortId, place: u64| match kind {
            Held::Send => *sends.entry(port).or_default() += 1,
            Held::SendOnce => *send_onces.entry(port).or_default() += 1,
            Held::Receive => receive_places.entry(port).or_default().push(place),
        };
        for space in &self.spaces {
            for (_, e) in space.iter() {
                count(e.kind, e.port, space.id());
            }
        }
        for (_, port) in self.ipc.ports.iter() {
            for msg in &port.queue {
                for r in msg.rights.iter().chain(msg.reply.iter()) {
                    count(r.kind, r.port, 0);
                }
            }
            if let Some((notify, _)) = port.no_senders {
                count(Held::SendOnce, notify, 0);
            }
            for &(notify, _, _) in &port.dead_names {
                count(Held::SendOnce, notify, 0);
            }
        }
        for (id, port) in self.ipc.ports.iter() {
            assert_eq!(
                port.sends,
                sends.get(&id).copied().unwrap_or(0),
                "sends of {id:?}"
            );
            assert_eq!(
                port.send_onces,
                send_onces.get(&id).copied().unwrap_or(0),
                "send-onces of {id:?}"
            );
            assert_eq!(
                receive_places.get(&id).map(Vec::as_slice),
                Some(&[port.receiver][..]),
                "the receive right of {id:?} is in exactly one place"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn ipc_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut world = World::new();
        for s in 0..SPACES {
            world.step(&Op::Allocate(s, 0));
        }
        for op in &ops {
            world.step(op);
        }
        // Every task ends: every port dies, no right is left anywhere.
        for s in 0..SPACES {
            world.step(&Op::ReleaseSpace(s));
        }
        prop_assert_eq!(world.ipc.ports(), 0);
        prop_assert_eq!(world.ipc.queued(), 0);
    }
}
