//! Virtual processors with Block and Unblock upcalls (Sting's kernel support, in the shape
//! of Anderson et al.'s scheduler activations): the protocol of one virtual processor as a
//! state machine over the kernel threads that carry it, free of any kernel detail so that
//! it can be tested on the host.
//!
//! A virtual processor is always carried by exactly one kernel thread, its *carrier*,
//! which runs the task's user-level threads. It owns a bounded pool of *spare* kernel
//! threads, parked. When the carrier blocks in the kernel, [`VpCore::on_block`] hands the
//! processor to a spare, which enters the runtime with a Block upcall; the thread that
//! blocked is *detached*: it still holds the user-level thread's registers, waiting in the
//! kernel. When a detached thread's operation completes, [`VpCore::on_unblock`] either
//! lets it take the processor over at once (the carrier is idle, waiting for events: it
//! becomes a spare, and the unblocked thread delivers an Unblock upcall) or queues an
//! Unblock *event* with the user registers and parks the thread as a spare; queued events
//! reach the runtime at its next idle wait or when it takes them.
//!
//! # Invariants
//! - Every kernel thread of a virtual processor has one role: carrier, spare or detached.
//!   The number of them never changes after the spares are made (a block moves one spare to
//!   carrier and the carrier to detached; an unblock moves one detached thread back).
//! - `detached + pending <= limit`: every detached thread has room for its event, and a
//!   block that would break this gets no upcall (the thread blocks as an ordinary thread).
//! - Nothing here allocates after [`VpCore::new`] and [`VpCore::add_spare`]: every list has
//!   its room from the start.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

/// Most spare kernel threads one virtual processor may have.
pub const SPARES_MAX: usize = 8;

/// What a kernel thread is to its virtual processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It runs the virtual processor.
    Carrier,
    /// Parked, until a block needs it.
    Spare,
    /// Blocked in the kernel with the registers of a user-level thread; its processor went
    /// on with a spare.
    Detached,
}

/// An Unblock that waits for the runtime: the thread's token and its user registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event<T, R> {
    /// The kernel thread that blocked (the token the Block upcall named).
    pub token: T,
    /// The user registers it resumes with (the call's result in them).
    pub regs: R,
}

/// What [`VpCore::on_unblock`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unblock<T> {
    /// The carrier was idle: the unblocked thread is the carrier now and delivers the
    /// Unblock upcall itself; the old carrier is a spare.
    TakeOver {
        /// The old carrier, now parked.
        parked: T,
    },
    /// The event is queued; the unblocked thread is a spare now.
    Queued,
    /// The thread is not detached from this virtual processor.
    NotDetached,
}

/// One virtual processor's threads and queued events.
#[derive(Debug)]
pub struct VpCore<T, R> {
    carrier: T,
    spares: Vec<T>,
    detached: Vec<T>,
    pending: VecDeque<Event<T, R>>,
    limit: usize,
}

impl<T: Copy + Eq, R: Copy> VpCore<T, R> {
    /// A virtual processor carried by `carrier`, with room for `limit` spares (at most
    /// [`SPARES_MAX`]); `None` when the heap has no room.
    pub fn new(carrier: T, limit: usize) -> Option<VpCore<T, R>> {
        let limit = limit.min(SPARES_MAX);
        let mut spares = Vec::new();
        spares.try_reserve_exact(limit).ok()?;
        let mut detached = Vec::new();
        detached.try_reserve_exact(limit).ok()?;
        let mut pending = VecDeque::new();
        pending.try_reserve_exact(limit).ok()?;
        Some(VpCore {
            carrier,
            spares,
            detached,
            pending,
            limit,
        })
    }

    /// The carrier.
    pub fn carrier(&self) -> T {
        self.carrier
    }

    /// The most spares (and so detached threads and queued events) it may have.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Spares, detached threads and queued events now.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.spares.len(), self.detached.len(), self.pending.len())
    }

    /// Every thread it has besides the carrier, and how many: spares then detached.
    pub fn members(&self) -> impl Iterator<Item = (T, Role)> + '_ {
        self.spares
            .iter()
            .map(|&t| (t, Role::Spare))
            .chain(self.detached.iter().map(|&t| (t, Role::Detached)))
    }

    /// `t`'s role, if it is one of this processor's threads.
    pub fn role(&self, t: T) -> Option<Role> {
        if t == self.carrier {
            Some(Role::Carrier)
        } else if self.spares.contains(&t) {
            Some(Role::Spare)
        } else if self.detached.contains(&t) {
            Some(Role::Detached)
        } else {
            None
        }
    }

    /// Adds a new parked thread `t` to the pool; `false` when the pool is full (or `t` is
    /// one of its threads already).
    pub fn add_spare(&mut self, t: T) -> bool {
        if self.spares.len() + self.detached.len() >= self.limit || self.role(t).is_some() {
            return false;
        }
        self.spares.push(t);
        true
    }

    /// Takes a parked thread out of the pool for good (the pool shrinks), if any.
    pub fn remove_spare(&mut self) -> Option<T> {
        self.spares.pop()
    }

    /// The carrier `t` blocks in the kernel: the spare that carries the processor on and
    /// enters the Block upcall, or `None` (no spare, or no room left for its Unblock; or
    /// `t` is not the carrier), and then `t` blocks as an ordinary thread.
    pub fn on_block(&mut self, t: T) -> Option<T> {
        if t != self.carrier || self.detached.len() + self.pending.len() >= self.limit {
            return None;
        }
        let spare = self.spares.pop()?;
        self.detached.push(t);
        self.carrier = spare;
        Some(spare)
    }

    /// Detached thread `t` may go on, with user registers `regs`: it takes the processor
    /// over when `carrier_idle` (the carrier waits for events), else its event is queued.
    pub fn on_unblock(&mut self, t: T, regs: R, carrier_idle: bool) -> Unblock<T> {
        let Some(i) = self.detached.iter().position(|&d| d == t) else {
            return Unblock::NotDetached;
        };
        self.detached.swap_remove(i);
        if carrier_idle {
            let parked = core::mem::replace(&mut self.carrier, t);
            self.spares.push(parked);
            Unblock::TakeOver { parked }
        } else {
            // Room: detached + pending <= limit held before, and one left `detached`.
            self.pending.push_back(Event { token: t, regs });
            self.spares.push(t);
            Unblock::Queued
        }
    }

    /// The oldest queued event, taken.
    pub fn take(&mut self) -> Option<Event<T, R>> {
        self.pending.pop_front()
    }

    /// Puts back an event just [`taken`](Self::take) that could not be delivered: it is
    /// the oldest again. (Its room is the one the take freed.)
    pub fn requeue_front(&mut self, ev: Event<T, R>) {
        if self.pending.len() + self.detached.len() < self.limit {
            self.pending.push_front(ev);
        }
    }

    /// Thread `t` is gone (ended): it leaves whatever role it had, which is returned. The
    /// carrier cannot leave this way (the processor ends with it: the caller drops it).
    pub fn forget(&mut self, t: T) -> Option<Role> {
        if let Some(i) = self.spares.iter().position(|&s| s == t) {
            self.spares.swap_remove(i);
            return Some(Role::Spare);
        }
        if let Some(i) = self.detached.iter().position(|&d| d == t) {
            self.detached.swap_remove(i);
            return Some(Role::Detached);
        }
        (t == self.carrier).then_some(Role::Carrier)
    }
}

/// Sting's preemption of the user-level threads of one virtual processor: when the kernel
/// stops its carrier in user mode, whether the runtime is told with a Checkpoint upcall.
/// Off until the runtime asks for it with a quantum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Preemption {
    /// The quantum (0: Checkpoint upcalls are off).
    pub quantum_ns: u64,
    /// When the running user-level thread last got the processor (the last upcall or
    /// resume).
    pub since_ns: u64,
}

impl Preemption {
    /// Whether a carrier stopped at `now` in user mode, with its stack pointer at `rsp`,
    /// gets a Checkpoint upcall: Checkpoints are on, the carrier ran a user-level thread
    /// (`rsp` in none of the runtime's own stacks, `quiet`), and either the kernel is
    /// taking the CPU from it (`preempted`) or the thread has had its quantum.
    pub fn due(&self, now: u64, preempted: bool, rsp: u64, quiet: &[(u64, u64)]) -> bool {
        self.quantum_ns != 0
            && Preemption::runs_a_thread(rsp, quiet)
            && (preempted || now.saturating_sub(self.since_ns) >= self.quantum_ns)
    }

    /// Whether a carrier stopped with its stack pointer at `rsp` runs a user-level thread:
    /// `rsp` in none of the runtime's own stacks (`quiet`). What an interruption the
    /// runtime asked for (`vp_interrupt`) needs, whatever the quantum.
    pub fn runs_a_thread(rsp: u64, quiet: &[(u64, u64)]) -> bool {
        !quiet.iter().any(|&(lo, hi)| lo <= rsp && rsp < hi)
    }

    /// A user-level thread got the processor at `now`: its quantum starts.
    pub fn restart(&mut self, now: u64) {
        self.since_ns = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Vp = VpCore<u32, u64>;

    #[test]
    fn block_then_unblock_while_busy_queues_the_event() {
        let mut vp = Vp::new(1, 2).unwrap();
        assert!(vp.add_spare(2));
        assert!(vp.add_spare(3));
        assert!(!vp.add_spare(4), "the pool is full");
        assert_eq!(vp.on_block(1), Some(3));
        assert_eq!(vp.carrier(), 3);
        assert_eq!(vp.role(1), Some(Role::Detached));
        assert_eq!(
            vp.on_block(1),
            None,
            "only the carrier blocks with an upcall"
        );
        assert_eq!(vp.on_unblock(1, 42, false), Unblock::Queued);
        assert_eq!(vp.role(1), Some(Role::Spare));
        assert_eq!(vp.take(), Some(Event { token: 1, regs: 42 }));
        assert_eq!(vp.take(), None);
    }

    #[test]
    fn an_interruption_needs_only_a_running_thread() {
        let quiet = [(0x1000, 0x2000), (0x8000, 0x9000)];
        assert!(Preemption::runs_a_thread(0x5000, &quiet));
        assert!(
            Preemption::runs_a_thread(0x2000, &quiet),
            "the ranges are half open"
        );
        assert!(!Preemption::runs_a_thread(0x1000, &quiet));
        assert!(!Preemption::runs_a_thread(0x8fff, &quiet));
        let off = Preemption::default();
        assert!(
            !off.due(10, true, 0x5000, &quiet),
            "no quantum: no Checkpoint due"
        );
        let on = Preemption {
            quantum_ns: 100,
            since_ns: 0,
        };
        assert!(!on.due(50, false, 0x5000, &quiet), "within the quantum");
        assert!(on.due(50, true, 0x5000, &quiet), "preempted");
        assert!(on.due(100, false, 0x5000, &quiet), "the quantum is over");
        assert!(!on.due(100, true, 0x1800, &quiet), "in a quiet range");
    }

    #[test]
    fn unblock_while_idle_takes_over() {
        let mut vp = Vp::new(1, 1).unwrap();
        assert!(vp.add_spare(2));
        assert_eq!(vp.on_block(1), Some(2));
        assert_eq!(vp.on_unblock(1, 7, true), Unblock::TakeOver { parked: 2 });
        assert_eq!(vp.carrier(), 1);
        assert_eq!(vp.role(2), Some(Role::Spare));
        assert_eq!(vp.on_unblock(1, 7, true), Unblock::NotDetached);
    }

    #[test]
    fn exhausted_pool_falls_back() {
        let mut vp = Vp::new(1, 1).unwrap();
        assert_eq!(vp.on_block(1), None, "no spare at all");
        assert!(vp.add_spare(2));
        assert_eq!(vp.on_block(1), Some(2));
        assert_eq!(vp.on_block(2), None, "the one spare is in use");
        assert_eq!(vp.on_unblock(1, 0, false), Unblock::Queued);
        // One event queued fills the room: no further block is given an upcall until it
        // is taken, so the queue never outgrows what was reserved.
        assert_eq!(vp.on_block(2), None);
        assert!(vp.take().is_some());
        assert_eq!(vp.on_block(2), Some(1));
    }

    #[test]
    fn forget_each_role() {
        let mut vp = Vp::new(1, 3).unwrap();
        assert!(vp.add_spare(2) && vp.add_spare(3));
        assert_eq!(vp.on_block(1), Some(3));
        assert_eq!(vp.forget(1), Some(Role::Detached));
        assert_eq!(vp.forget(2), Some(Role::Spare));
        assert_eq!(vp.forget(3), Some(Role::Carrier));
        assert_eq!(vp.forget(9), None);
        assert_eq!(vp.counts(), (0, 0, 0));
    }
}

#[cfg(test)]
mod proptests {
    //! The protocol against a model: random blocks, unblocks (with the carrier idle or
    //! busy), takes, spares added and removed, and threads that end, applied to a
    //! [`VpCore`] and to a model of roles and a queue; after every step the roles agree,
    //! every thread has one role, the bound `detached + pending <= limit` holds, and the
    //! lists never grow past the room they were made with (nothing allocates).
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, VecDeque};

    #[derive(Clone, Debug)]
    enum Op {
        Block,
        /// Unblock the detached thread of this pick, with the carrier idle or not.
        Unblock(usize, bool),
        Take,
        AddSpare,
        RemoveSpare,
        /// A thread of this pick (not the carrier) ends.
        End(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Block),
            3 => (any::<usize>(), any::<bool>()).prop_map(|(i, idle)| Op::Unblock(i, idle)),
            2 => Just(Op::Take),
            2 => Just(Op::AddSpare),
            1 => Just(Op::RemoveSpare),
            1 => any::<usize>().prop_map(Op::End),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn protocol_matches_the_model(limit in 0usize..=SPARES_MAX, ops in proptest::collection::vec(op(), 0..200)) {
            let mut vp: VpCore<u32, u32> = VpCore::new(0, limit).unwrap();
            let caps = (vp.spares.capacity(), vp.detached.capacity(), vp.pending.capacity());
            let mut roles: BTreeMap<u32, Role> = BTreeMap::new();
            roles.insert(0, Role::Carrier);
            let mut carrier = 0u32;
            let mut queue: VecDeque<u32> = VecDeque::new();
            let mut next = 1u32;
            for op in ops {
                let count = |r: Role, roles: &BTreeMap<u32, Role>| roles.values().filter(|&&x| x == r).count();
                match op {
                    Op::Block => {
                        let spare = roles.iter().find(|(_, &r)| r == Role::Spare).map(|(&t, _)| t);
                        let room = count(Role::Detached, &roles) + queue.len() < limit;
                        let got = vp.on_block(carrier);
                        match spare {
                            Some(_) if room => {
                                let s = got.expect("a spare and room: an upcall");
                                prop_assert_eq!(roles.get(&s), Some(&Role::Spare));
                                roles.insert(carrier, Role::Detached);
                                roles.insert(s, Role::Carrier);
                                carrier = s;
                            }
                            _ => prop_assert_eq!(got, None),
                        }
                    }
                    Op::Unblock(i, idle) => {
                        let detached: Vec<u32> = roles.iter().filter(|(_, &r)| r == Role::Detached).map(|(&t, _)| t).collect();
                        if detached.is_empty() {
                            prop_assert_eq!(vp.on_unblock(99_999, 0, idle), Unblock::NotDetached);
                            continue;
                        }
                        let t = detached[i % detached.len()];
                        match vp.on_unblock(t, t, idle) {
                            Unblock::TakeOver { parked } => {
                                prop_assert!(idle);
                                prop_assert_eq!(parked, carrier);
                                roles.insert(parked, Role::Spare);
                                roles.insert(t, Role::Carrier);
                                carrier = t;
                            }
                            Unblock::Queued => {
                                prop_assert!(!idle);
                                roles.insert(t, Role::Spare);
                                queue.push_back(t);
                            }
                            Unblock::NotDetached => prop_assert!(false, "a detached thread"),
                        }
                    }
                    Op::Take => {
                        let want = queue.pop_front();
                        let got = vp.take().map(|e| { assert_eq!(e.token, e.regs); e.token });
                        prop_assert_eq!(got, want);
                    }
                    Op::AddSpare => {
                        let fits = count(Role::Spare, &roles) + count(Role::Detached, &roles) < limit;
                        prop_assert_eq!(vp.add_spare(next), fits);
                        if fits {
                            roles.insert(next, Role::Spare);
                        }
                        next += 1;
                    }
                    Op::RemoveSpare => {
                        if let Some(t) = vp.remove_spare() {
                            prop_assert_eq!(roles.remove(&t), Some(Role::Spare));
                        } else {
                            prop_assert_eq!(count(Role::Spare, &roles), 0);
                        }
                    }
                    Op::End(i) => {
                        let others: Vec<u32> = roles.keys().copied().filter(|&t| t != carrier).collect();
                        if let Some(&t) = others.get(i % others.len().max(1)) {
                            let role = roles.remove(&t);
                            prop_assert_eq!(vp.forget(t), role);
                        }
                    }
                }
                // The two agree, and the bounds hold.
                prop_assert_eq!(vp.carrier(), carrier);
                for (&t, &r) in &roles {
                    prop_assert_eq!(vp.role(t), Some(r));
                }
                let (s, d, p) = vp.counts();
                prop_assert_eq!((s, d, p), (count(Role::Spare, &roles), count(Role::Detached, &roles), queue.len()));
                prop_assert!(d + p <= limit);
                prop_assert_eq!(vp.members().count(), s + d);
                prop_assert_eq!((vp.spares.capacity(), vp.detached.capacity(), vp.pending.capacity()), caps);
            }
        }
    }

    #[test]
    fn checkpoints_are_off_until_asked_for() {
        let p = Preemption::default();
        assert!(!p.due(u64::MAX, true, 0x1000, &[]));
    }

    #[test]
    fn checkpoint_when_preempted_or_after_the_quantum() {
        let mut p = Preemption {
            quantum_ns: 100,
            since_ns: 0,
        };
        p.restart(1_000);
        assert!(!p.due(1_050, false, 0x5000, &[]), "quantum not over");
        assert!(p.due(1_050, true, 0x5000, &[]), "the kernel takes the CPU");
        assert!(p.due(1_100, false, 0x5000, &[]), "quantum over");
        assert!(
            !p.due(500, false, 0x5000, &[]),
            "a clock before the start is no quantum"
        );
    }

    #[test]
    fn no_checkpoint_on_the_runtimes_own_stacks() {
        let p = Preemption {
            quantum_ns: 1,
            since_ns: 0,
        };
        let quiet = [(0x1000, 0x2000), (0x8000, 0x9000)];
        assert!(!p.due(10, true, 0x1000, &quiet));
        assert!(!p.due(10, true, 0x8fff, &quiet));
        assert!(p.due(10, true, 0x2000, &quiet), "the top is outside");
        assert!(p.due(10, true, 0x4000, &quiet));
    }
}
