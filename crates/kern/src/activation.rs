//! Activations and their pools: the server side of migrating RPC (seed 001, sections 4.2
//! and 6.2).
//!
//! An *activation* is the part of a thread that is fixed to one task: a user stack, the
//! entry point of the task's dispatch routine, and a buffer (one page or more) where
//! requests arrive and replies are written. A server creates unoccupied activations and attaches them to a port
//! (its pool). A migrating RPC to that port takes a free activation, and the *caller's*
//! thread runs the server's dispatch routine in it; the server's return gives the activation
//! back. No server thread and no scheduler are involved.
//!
//! This module keeps the activations ([`Activations`]) and decides what a call to a port
//! with a pool does ([`Pool::decide`]): take an activation, sidetrack (make a notification
//! upcall on the last one so the server can add more), or wait for one to come back.
//!
//! # Invariants
//! - A free activation is in exactly one port's pool (`Pool::free`) and is not occupied; an
//!   occupied one is in no pool and is named by exactly one saved activation record of one
//!   thread, which gives it back ([`Activations::give_back`]) when the call returns or is
//!   cut short.
//! - `Pool::attached` counts the activations attached to the port, free or occupied.
//! - An activation whose port or task is gone is *retired*: never handed out again, freed
//!   when it is given back (or at once if it is free).

use crate::frame::PhysAddr;
use crate::ipc::PortId;
use crate::slab::{Key, Slab};
use alloc::vec::Vec;

/// Most pages an activation's buffer has (a largest message).
pub const BUFFER_PAGES: usize = baton_abi::ipc::MSG_SIZE_MAX / crate::frame::PAGE_SIZE as usize;

/// An activation's name (a generation-checked slab key).
pub type ActId = Key;

/// Most activations one task may have.
pub const ACTIVATIONS_PER_TASK_MAX: usize = baton_abi::ACTIVATIONS_PER_TASK_MAX;

/// One activation. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activation {
    /// The task it runs in.
    pub task: u64,
    /// That task's key in the kernel's task table (cached: no lookup on a call).
    pub task_key: Key,
    /// That task's page-table root and PCID (cached).
    pub space: (PhysAddr, u16),
    /// The port whose pool it belongs to.
    pub port: PortId,
    /// The dispatch routine's entry point.
    pub entry: u64,
    /// The top of its user stack.
    pub stack: u64,
    /// Its buffer: user address and the frame of its first page (checked at creation,
    /// forgotten when any page of the buffer is unmapped, which retires the activation).
    pub buffer: (u64, PhysAddr),
    /// The buffer's size in bytes: a whole number of pages, from one page up to
    /// [`baton_abi::ipc::MSG_SIZE_MAX`], every one mapped writable at creation. A request
    /// through a caller's own buffer (`MSG_BUF`) may fill it; one through the caller's IPC
    /// buffer page never needs more than the first page.
    pub buffer_len: usize,
    /// The frame of each page of the buffer, in order (the first is `buffer.1`; the rest
    /// after `buffer_len` are unused): recorded at creation, so that a request or reply of
    /// more than a page is copied with no walk of the server's page tables (the buffer
    /// is retired, never used again, when any page of it is unmapped).
    pub frames: [PhysAddr; BUFFER_PAGES],
    /// A word the server chose, passed to the dispatch routine (e.g. which routine).
    pub cookie: u64,
    /// The thread running a call in it (the zero key when free).
    pub occupant: Key,
    /// Running a call (not in any pool).
    pub occupied: bool,
    /// Its port or task is gone, or its buffer was unmapped: never used again.
    pub retired: bool,
}

/// The control state of one activation (seed 001 section 5).
///
/// An alert is a request, not a demand: it is *pending* until the activation polls it or a
/// kernel wait in it returns early, and it is seen only where alerts are *on* (they are off
/// in every new activation, so an unwary server is not disturbed). A suspended activation
/// runs no user instruction: its thread stops when it would return into it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActState {
    /// An alert is pending.
    pub alert: bool,
    /// Alerts are delivered here (polled, and ending kernel waits).
    pub alerts_on: bool,
    /// Suspensions not yet resumed; suspended while non-zero.
    pub suspend: u32,
    /// Terminated: its thread ends (or unwinds further) when it returns into it.
    pub dead: bool,
    /// Activations above it may not change the thread's scheduling state.
    pub sched_locked: bool,
}

impl ActState {
    /// The state of a new activation entered by a call from `caller`: alerts off, an alert
    /// pending in the caller carried up (alerts propagate along the chain).
    pub fn entered_from(caller: &ActState) -> ActState {
        ActState {
            alert: caller.alert,
            ..ActState::default()
        }
    }

    /// Polls: whether an alert is pending and alerts are on; the alert is consumed.
    pub fn take_alert(&mut self) -> bool {
        let seen = self.alert && self.alerts_on;
        if seen {
            self.alert = false;
        }
        seen
    }
}

/// A port's pool of activations (kept in the port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pool {
    /// Free activations, the most recently returned last (reused first: its stack is warm).
    pub free: Vec<ActId>,
    /// Activations attached, free or occupied.
    pub attached: u32,
    /// The server asked for a sidetrack upcall before its last free activation is used.
    pub sidetrack: bool,
}

/// What a migrating call to a port does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run the call in this activation (taken from the pool).
    Take(ActId),
    /// Only the last free activation is left and the server wants to hear of it first:
    /// make a sidetrack upcall in it (taken from the pool); the call is retried after.
    Sidetrack(ActId),
    /// No activation may be used now: wait until one is given back.
    Wait,
}

impl Pool {
    /// Whether calls to the port migrate.
    pub fn is_migrating(&self) -> bool {
        self.attached > 0
    }

    /// Decides a call; `sidetracked` says this call already made its sidetrack upcall (so
    /// the server declined to add activations if only the last is left). Takes the
    /// activation it names out of the pool.
    #[inline]
    pub fn decide(&mut self, sidetracked: bool) -> Decision {
        let left = self.free.len();
        let reserve = self.sidetrack && left == 1;
        match self.free.last().copied() {
            Some(a) if !reserve => {
                self.free.pop();
                Decision::Take(a)
            }
            Some(a) if !sidetracked => {
                self.free.pop();
                Decision::Sidetrack(a)
            }
            _ => Decision::Wait,
        }
    }
}

/// Every activation.
#[derive(Debug, Default)]
pub struct Activations {
    slab: Slab<Activation>,
}

impl Activations {
    /// None.
    pub const fn new() -> Activations {
        Activations { slab: Slab::new() }
    }

    /// Number of activations (free, occupied, or retired but still occupied).
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Every activation with its id.
    pub fn iter(&self) -> impl Iterator<Item = (ActId, &Activation)> {
        self.slab.iter()
    }

    /// The activation `id`.
    #[inline]
    pub fn get(&self, id: ActId) -> Option<&Activation> {
        self.slab.get(id)
    }

    /// The activation `id`, mutably.
    #[inline]
    pub fn get_mut(&mut self, id: ActId) -> Option<&mut Activation> {
        self.slab.get_mut(id)
    }

    /// How many activations of `task` exist (retired ones whose call has not returned
    /// included).
    pub fn count_of(&self, task: u64) -> usize {
        self.slab.iter().filter(|(_, a)| a.task == task).count()
    }

    /// Creates a free activation of `task` and puts it in `pool` (the pool of `act.port`).
    /// [`baton_abi::Error::NoSpace`] past [`ACTIVATIONS_PER_TASK_MAX`] for the task.
    pub fn create(&mut self, pool: &mut Pool, act: Activation) -> Result<ActId, baton_abi::Error> {
        let task = act.task;
        if self.count_of(task) >= ACTIVATIONS_PER_TASK_MAX {
            return Err(baton_abi::Error::NoSpace);
        }
        let id = self
            .slab
            .insert(Activation {
                occupied: false,
                retired: false,
                ..act
            })
            .map_err(|_| baton_abi::Error::NoMemory)?;
        pool.free.push(id);
        pool.attached += 1;
        Ok(id)
    }

    /// Marks `id` occupied by thread `by` (just taken from its pool by [`Pool::decide`]).
    #[inline]
    pub fn occupy(&mut self, id: ActId, by: Key) -> Option<&Activation> {
        let a = self.slab.get_mut(id)?;
        a.occupied = true;
        a.occupant = by;
        Some(a)
    }

    /// The call in `id` is over: it goes back to `pool` (its port's, `None` if the port is
    /// gone), or is freed if retired. Returns whether it went back to the pool.
    #[inline]
    pub fn give_back(&mut self, id: ActId, pool: Option<&mut Pool>) -> bool {
        let retired = match self.slab.get_mut(id) {
            Some(a) => {
                a.occupied = false;
                a.occupant = Key(0);
                a.retired || pool.is_none()
            }
            None => return false,
        };
        match pool {
            Some(p) if !retired => {
                p.free.push(id);
                true
            }
            Some(p) => {
                p.attached = p.attached.saturating_sub(1);
                self.slab.remove(id);
                false
            }
            None => {
                self.slab.remove(id);
                false
            }
        }
    }

    /// Retires every activation for which `gone(activation)` holds: occupied ones are
    /// freed when they are given back; free ones are freed now and returned with their
    /// ports, whose pools the caller removes them from ([`Pool::forget`]).
    pub fn retire<F: Fn(&Activation) -> bool>(&mut self, gone: F) -> Vec<(ActId, PortId)> {
        let mut freed = Vec::new();
        self.retire_each(gone, |id, port| freed.push((id, port)));
        freed
    }

    /// [`Activations::retire`], handing each activation freed now, with its port, to
    /// `freed` instead of collecting them: nothing is allocated (a task's end uses it).
    pub fn retire_each<F: Fn(&Activation) -> bool>(
        &mut self,
        gone: F,
        mut freed: impl FnMut(ActId, PortId),
    ) {
        for index in 0..self.slab.slots() {
            let Some(id) = self.slab.key_at(index) else {
                continue;
            };
            let Some(a) = self.slab.get_mut(id) else {
                continue;
            };
            if !gone(a) {
                continue;
            }
            if a.occupied {
                a.retired = true;
            } else {
                let port = a.port;
                self.slab.remove(id);
                freed(id, port);
            }
        }
    }
}

impl Activation {
    /// Whether any byte of its buffer lies in `[start, end)`.
    pub fn buffer_within(&self, start: u64, end: u64) -> bool {
        let first = self.buffer.0;
        let last = first.saturating_add(self.buffer_len as u64);
        start < end && first < end && start < last
    }
}

impl Pool {
    /// Removes the free activation `id` (retired) from the pool.
    pub fn forget(&mut self, id: ActId) {
        let before = self.free.len();
        self.free.retain(|&f| f != id);
        if self.free.len() != before {
            self.attached = self.attached.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(task: u64) -> Activation {
        Activation {
            task,
            task_key: Key::new(task as u32, 1),
            space: (PhysAddr(0x5000), 1),
            port: Key::new(0, 1),
            entry: 0x1000,
            stack: 0x2000,
            buffer: (0x3000, PhysAddr(0x4000)),
            buffer_len: 0x1000,
            frames: [PhysAddr(0x4000); BUFFER_PAGES],
            cookie: 7,
            occupant: Key(0),
            occupied: false,
            retired: false,
        }
    }

    #[test]
    fn take_and_give_back() {
        let mut acts = Activations::new();
        let mut pool = Pool::default();
        assert!(!pool.is_migrating());
        let a = acts.create(&mut pool, act(1)).unwrap();
        let b = acts.create(&mut pool, act(1)).unwrap();
        assert_eq!(pool.attached, 2);
        assert_eq!(
            pool.decide(false),
            Decision::Take(b),
            "the last returned first"
        );
        assert!(acts.occupy(b, Key(9)).unwrap().occupied);
        assert_eq!(acts.get(b).unwrap().occupant, Key(9));
        assert_eq!(pool.decide(false), Decision::Take(a));
        assert_eq!(pool.decide(false), Decision::Wait, "none left: wait");
        assert!(acts.give_back(a, Some(&mut pool)));
        assert_eq!(pool.free, [a]);
        assert!(!acts.get(a).unwrap().occupied);
        assert_eq!(acts.len(), 2);
    }

    #[test]
    fn sidetrack_before_the_last() {
        let mut acts = Activations::new();
        let mut pool = Pool {
            sidetrack: true,
            ..Pool::default()
        };
        let a = acts.create(&mut pool, act(1)).unwrap();
        let b = acts.create(&mut pool, act(1)).unwrap();
        assert_eq!(pool.decide(false), Decision::Take(b));
        assert_eq!(
            pool.decide(false),
            Decision::Sidetrack(a),
            "the last is for the upcall"
        );
        acts.give_back(a, Some(&mut pool));
        // The server declined (added none): the retried call waits.
        assert_eq!(pool.decide(true), Decision::Wait);
        assert_eq!(pool.free, [a], "waiting takes nothing");
        // It added one: the retried call proceeds, keeping the last in reserve.
        let c = acts.create(&mut pool, act(1)).unwrap();
        assert_eq!(pool.decide(true), Decision::Take(c));
        assert_eq!(pool.free, [a]);
    }

    #[test]
    fn retired_activations_are_freed() {
        let mut acts = Activations::new();
        let mut pool = Pool::default();
        let a = acts.create(&mut pool, act(1)).unwrap();
        let b = acts.create(&mut pool, act(1)).unwrap();
        let other = acts.create(&mut pool, act(2)).unwrap();
        assert_eq!(pool.decide(false), Decision::Take(other));
        acts.occupy(other, Key(9));
        assert_eq!(pool.decide(false), Decision::Take(b));
        acts.occupy(b, Key(9));
        let freed = acts.retire(|x| x.task == 1);
        assert_eq!(freed, [(a, Key::new(0, 1))], "the free one now");
        for (id, _) in freed {
            pool.forget(id);
        }
        assert_eq!(pool.free, []);
        assert_eq!(pool.attached, 2);
        assert!(acts.get(a).is_none());
        assert!(acts.get(b).unwrap().retired);
        assert!(
            !acts.give_back(b, Some(&mut pool)),
            "a retired one is freed"
        );
        assert!(acts.get(b).is_none());
        assert_eq!(pool.attached, 1);
        assert!(!acts.give_back(other, None), "a port gone frees it");
        assert_eq!(acts.len(), 0);
    }

    #[test]
    fn alerts_are_seen_only_where_on_and_propagate_into_calls() {
        let mut caller = ActState {
            alert: true,
            ..ActState::default()
        };
        assert!(!caller.take_alert(), "off by default");
        assert!(caller.alert, "still pending");
        let mut callee = ActState::entered_from(&caller);
        assert!(callee.alert && !callee.alerts_on && callee.suspend == 0 && !callee.dead);
        callee.alerts_on = true;
        assert!(callee.take_alert());
        assert!(!callee.take_alert(), "consumed");
    }

    #[test]
    fn buffer_ranges() {
        let a = Activation {
            buffer: (0x10_000, PhysAddr(0x4000)),
            buffer_len: 0x9000,
            frames: [PhysAddr(0x4000); BUFFER_PAGES],
            ..act(1)
        };
        assert!(a.buffer_within(0x10_000, 0x11_000), "the first page");
        assert!(a.buffer_within(0x18_000, 0x19_000), "the last page");
        assert!(a.buffer_within(0, u64::MAX), "everything");
        assert!(!a.buffer_within(0x19_000, 0x20_000), "just after");
        assert!(!a.buffer_within(0xf_000, 0x10_000), "just before");
        assert!(!a.buffer_within(0x12_000, 0x12_000), "an empty range");
    }

    #[test]
    fn per_task_limit() {
        let mut acts = Activations::new();
        let mut pool = Pool::default();
        for _ in 0..ACTIVATIONS_PER_TASK_MAX {
            acts.create(&mut pool, act(1)).unwrap();
        }
        assert_eq!(
            acts.create(&mut pool, act(1)),
            Err(baton_abi::Error::NoSpace)
        );
        assert!(acts.create(&mut pool, act(2)).is_ok());
    }
}
