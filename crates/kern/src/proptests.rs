//! Property tests of the kernel's containers and allocators against simple reference
//! models: random operation sequences applied to the real structure and to a model built
//! from the standard library's collections, compared after every step. (The IPC name
//! spaces have their own, in `ipc::proptests`.)

use crate::activation::{Activation, Activations, Decision, Pool, BUFFER_PAGES};
use crate::frame::{FrameAllocator, FrameError, PhysAddr, PAGE_SIZE};
use crate::idslab::IdSlab;
use crate::ring::Ring;
use crate::slab::{Key, Slab};
use crate::waitq::WaitQueues;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::vec::Vec;

/// Bytes of physical memory the frame allocator's ranges fall in.
const SPAN: u64 = 0xa0_000;

/// Few cases each: these run with every `cargo test -p kern`.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    }
}

#[derive(Clone, Debug)]
enum SlabOp {
    Insert(u32),
    /// `insert_with`, the value made from its own key.
    InsertWith,
    /// `get2_mut` of two picks.
    Get2(usize, usize),
    /// Remove a key handed out earlier (live or not), by pick.
    Remove(usize),
    Get(usize),
}

fn slab_op() -> impl Strategy<Value = SlabOp> {
    prop_oneof![
        3 => any::<u32>().prop_map(SlabOp::Insert),
        1 => Just(SlabOp::InsertWith),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| SlabOp::Get2(a, b)),
        2 => any::<usize>().prop_map(SlabOp::Remove),
        1 => any::<usize>().prop_map(SlabOp::Get),
    ]
}

#[derive(Clone, Debug)]
enum RingOp {
    PushBack(u8),
    PushFront(u8),
    PopFront,
    Remove(usize),
    Position(u8),
}

fn ring_op() -> impl Strategy<Value = RingOp> {
    prop_oneof![
        3 => any::<u8>().prop_map(RingOp::PushBack),
        2 => any::<u8>().prop_map(RingOp::PushFront),
        2 => Just(RingOp::PopFront),
        1 => (0usize..20).prop_map(RingOp::Remove),
        1 => any::<u8>().prop_map(RingOp::Position),
    ]
}

#[derive(Clone, Debug)]
enum WaitOp {
    /// A thread not waiting yet starts waiting on a key (of a few, so buckets are shared).
    Wait(u64),
    Wake(u64),
    /// Remove the picked thread from the picked key (often not where it waits).
    Remove(u64, usize),
}

fn wait_op() -> impl Strategy<Value = WaitOp> {
    // Keys 0..6 and a few far ones that may share buckets with them.
    let key = prop_oneof![0u64..6, Just(1 << 40), Just(u64::MAX)];
    prop_oneof![
        3 => key.clone().prop_map(WaitOp::Wait),
        2 => key.clone().prop_map(WaitOp::Wake),
        1 => (key, any::<usize>()).prop_map(|(k, t)| WaitOp::Remove(k, t)),
    ]
}

#[derive(Clone, Debug)]
enum FrameOp {
    Alloc,
    Contiguous(usize),
    /// Free the picked frame number (allocated or not), sometimes misaligned.
    Free(usize, bool),
}

fn frame_op() -> impl Strategy<Value = FrameOp> {
    prop_oneof![
        3 => Just(FrameOp::Alloc),
        1 => (0usize..6).prop_map(FrameOp::Contiguous),
        3 => (any::<usize>(), proptest::bool::weighted(0.1)).prop_map(|(f, m)| FrameOp::Free(f, m)),
    ]
}

#[derive(Clone, Debug)]
enum ActOp {
    /// Create an activation of task (0..3) in the pool of port (0..2).
    Create(u64, usize),
    /// A call to the port: `sidetracked` says it made its sidetrack upcall already.
    Call(usize, bool),
    /// Give back the picked occupied activation.
    Return(usize),
    Sidetrack(usize, bool),
    /// The task ends: its activations retire.
    EndTask(u64),
    /// The port is destroyed: its activations retire, and its pool is gone.
    EndPort(usize),
}

fn act_op() -> impl Strategy<Value = ActOp> {
    prop_oneof![
        3 => (0u64..3, 0usize..2).prop_map(|(t, p)| ActOp::Create(t, p)),
        4 => (0usize..2, any::<bool>()).prop_map(|(p, s)| ActOp::Call(p, s)),
        3 => any::<usize>().prop_map(ActOp::Return),
        1 => (0usize..2, any::<bool>()).prop_map(|(p, s)| ActOp::Sidetrack(p, s)),
        1 => (0u64..3).prop_map(ActOp::EndTask),
        1 => (0usize..2).prop_map(ActOp::EndPort),
    ]
}

fn activation(task: u64, port: usize) -> Activation {
    Activation {
        task,
        task_key: Key::new(task as u32, 1),
        space: (PhysAddr(0x5000), 1),
        port: Key::new(port as u32, 1),
        entry: 0x1000,
        stack: 0x2000,
        buffer: (0x3000, PhysAddr(0x4000)),
        buffer_len: 0x1000,
        frames: [PhysAddr(0x4000); BUFFER_PAGES],
        cookie: 0,
        occupant: Key(0),
        // Whatever the caller says, a new activation is free and not retired.
        occupied: true,
        retired: true,
    }
}

/// The model of one activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MAct {
    task: u64,
    port: usize,
    occupant: Option<u64>,
    retired: bool,
}

proptest! {
    #![proptest_config(config())]

    /// A slab against a map: keys are never reused, a removed key is dead for good, and
    /// the limit holds.
    #[test]
    fn slab_matches_map(limit in 1u32..12, ops in proptest::collection::vec(slab_op(), 1..80)) {
        let mut slab = Slab::with_limit(limit);
        let mut live: BTreeMap<Key, u32> = BTreeMap::new();
        let mut issued: Vec<Key> = Vec::new();
        for op in ops {
            match op {
                SlabOp::Insert(v) => match slab.insert(v) {
                    Ok(k) => {
                        prop_assert!(!issued.contains(&k), "key {k:?} handed out twice");
                        prop_assert_ne!(k, Key(0));
                        prop_assert!(live.len() < limit as usize);
                        issued.push(k);
                        live.insert(k, v);
                    }
                    Err(back) => {
                        prop_assert_eq!(back, v);
                        prop_assert_eq!(live.len(), limit as usize, "refused below the limit");
                    }
                },
                SlabOp::InsertWith => match slab.insert_with(|k| k.0 as u32 ^ 0x5555) {
                    Ok(k) => {
                        prop_assert!(!issued.contains(&k), "key {k:?} handed out twice");
                        prop_assert!(live.len() < limit as usize);
                        prop_assert_eq!(slab.get(k), Some(&(k.0 as u32 ^ 0x5555)));
                        issued.push(k);
                        live.insert(k, k.0 as u32 ^ 0x5555);
                    }
                    Err(_) => prop_assert_eq!(live.len(), limit as usize),
                },
                SlabOp::Get2(a, b) if !issued.is_empty() => {
                    // Keys handed out, and one past every slot there is.
                    let key = |pick: usize| {
                        issued
                            .get(pick % (issued.len() + 1))
                            .copied()
                            .unwrap_or(Key::new(limit + 5, 1))
                    };
                    let (a, b) = (key(a), key(b));
                    let want = match (live.get(&a), live.get(&b)) {
                        (Some(&x), Some(&y)) if a.index() != b.index() => Some((x, y)),
                        _ => None,
                    };
                    prop_assert_eq!(slab.get2_mut(a, b).map(|(x, y)| (*x, *y)), want);
                }
                SlabOp::Remove(pick) if !issued.is_empty() => {
                    let k = issued[pick % issued.len()];
                    prop_assert_eq!(slab.remove(k), live.remove(&k));
                }
                SlabOp::Get(pick) if !issued.is_empty() => {
                    let k = issued[pick % issued.len()];
                    prop_assert_eq!(slab.get(k), live.get(&k));
                    prop_assert_eq!(slab.contains(k), live.contains_key(&k));
                    if let Some(v) = slab.get_mut(k) {
                        *v = v.wrapping_add(1);
                        *live.get_mut(&k).unwrap() = *v;
                    }
                }
                _ => {}
            }
            prop_assert_eq!(slab.len(), live.len());
            prop_assert_eq!(slab.is_empty(), live.is_empty());
            // Slots are added one by one and never dropped; a free one is reused first.
            let slots: BTreeSet<u32> = issued.iter().map(|k| k.index()).collect();
            prop_assert_eq!(slab.slots(), slots.len());
            prop_assert_eq!(slab.has_free(), slab.slots() > slab.len());
            let mut real: Vec<(Key, u32)> = slab.iter().map(|(k, v)| (k, *v)).collect();
            let in_slot_order = real.windows(2).all(|w| w[0].0.index() < w[1].0.index());
            prop_assert!(in_slot_order);
            real.sort();
            prop_assert_eq!(real, live.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
        }
        // Two live keys give two objects; a key with itself gives none.
        let keys: Vec<Key> = live.keys().copied().collect();
        if let [a, b, ..] = keys[..] {
            let (x, y) = slab.get2_mut(a, b).unwrap();
            prop_assert_eq!((*x, *y), (live[&a], live[&b]));
            prop_assert!(slab.get2_mut(a, a).is_none());
        }
    }

    /// An id slab against a map: ids are unique, and the key and the id reach the same
    /// object.
    #[test]
    fn idslab_matches_map(ops in proptest::collection::vec((0u64..8, any::<bool>(), any::<u16>()), 1..60)) {
        let mut s = IdSlab::new();
        let mut model: BTreeMap<u64, u16> = BTreeMap::new();
        for (id, insert, v) in ops {
            if insert {
                let real = s.insert(id, v);
                prop_assert_eq!(real.is_ok(), !model.contains_key(&id));
                if real.is_ok() {
                    model.insert(id, v);
                }
            } else {
                prop_assert_eq!(s.remove(&id), model.remove(&id));
            }
            prop_assert_eq!(s.len(), model.len());
            prop_assert_eq!(s.is_empty(), model.is_empty());
            prop_assert_eq!(s.iter().map(|(i, v)| (i, *v)).collect::<Vec<_>>(),
                model.iter().map(|(i, v)| (*i, *v)).collect::<Vec<_>>());
            prop_assert_eq!(s.values().copied().collect::<Vec<_>>(),
                model.values().copied().collect::<Vec<_>>());
            for probe in 0..8 {
                prop_assert_eq!(s.get(&probe), model.get(&probe));
                let by_key = s.key_of(probe).and_then(|k| s.by_key(k));
                prop_assert_eq!(by_key, model.get(&probe));
                // Writes through the id and through the key reach the same object.
                if let Some(v) = s.get_mut(&probe) {
                    *v = v.wrapping_add(1);
                    *model.get_mut(&probe).unwrap() = model[&probe].wrapping_add(1);
                }
                if let Some(k) = s.key_of(probe) {
                    let v = s.by_key_mut(k).unwrap();
                    *v = v.wrapping_add(1);
                    *model.get_mut(&probe).unwrap() = model[&probe].wrapping_add(1);
                }
                prop_assert_eq!(s.get(&probe), model.get(&probe));
            }
            let ids: Vec<u64> = model.keys().copied().collect();
            if let [a, b, ..] = ids[..] {
                let (ka, kb) = (s.key_of(a).unwrap(), s.key_of(b).unwrap());
                let (x, y) = s.by_keys2_mut(ka, kb).unwrap();
                prop_assert_eq!((*x, *y), (model[&a], model[&b]));
                prop_assert!(s.by_keys2_mut(ka, ka).is_none());
            }
        }
    }

    /// A ring against `VecDeque`, across growth and wrap-around.
    #[test]
    fn ring_matches_vecdeque(ops in proptest::collection::vec(ring_op(), 1..120)) {
        let mut ring: Ring<u8> = Ring::new();
        let mut model: VecDeque<u8> = VecDeque::new();
        for op in ops {
            match op {
                RingOp::PushBack(v) => {
                    ring.push_back(v);
                    model.push_back(v);
                }
                RingOp::PushFront(v) => {
                    ring.push_front(v);
                    model.push_front(v);
                }
                RingOp::PopFront => prop_assert_eq!(ring.pop_front(), model.pop_front()),
                RingOp::Remove(i) => prop_assert_eq!(ring.remove(i), model.remove(i)),
                RingOp::Position(v) => {
                    prop_assert_eq!(ring.position(v), model.iter().position(|&x| x == v));
                }
            }
            prop_assert_eq!(ring.len(), model.len());
            prop_assert_eq!(ring.is_empty(), model.is_empty());
            prop_assert_eq!(ring.front(), model.front().copied());
            prop_assert!(ring.capacity() >= ring.len());
            prop_assert!(ring.capacity() == 0 || ring.capacity().is_power_of_two());
            prop_assert_eq!(ring.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
        }
    }

    /// Wait queues against a map of per-key FIFOs, with and without every bucket's room
    /// reserved first; reserved, the room does not change while no more than that many
    /// threads have waited at once.
    #[test]
    fn waitq_matches_fifos(
        ops in proptest::collection::vec(wait_op(), 1..100),
        reserved in proptest::bool::ANY,
    ) {
        let mut q: WaitQueues<u64, u32> = WaitQueues::new();
        if reserved {
            prop_assert!(q.reserve_each(crate::waitq::BOOT_ROOM).is_ok());
        }
        let room = q.capacity();
        let mut most = 0usize;
        let mut model: BTreeMap<u64, VecDeque<u32>> = BTreeMap::new();
        let mut next = 1u32;
        for op in ops {
            match op {
                WaitOp::Wait(k) => {
                    q.enqueue(k, next);
                    model.entry(k).or_default().push_back(next);
                    next += 1;
                }
                WaitOp::Wake(k) => {
                    let want = model.get_mut(&k).and_then(VecDeque::pop_front);
                    prop_assert_eq!(q.wake_one(k), want);
                }
                WaitOp::Remove(k, pick) => {
                    let t = (pick % next as usize) as u32;
                    let fifo = model.entry(k).or_default();
                    let want = match fifo.iter().position(|&x| x == t) {
                        Some(i) => fifo.remove(i).is_some(),
                        None => false,
                    };
                    prop_assert_eq!(q.remove(k, t), want);
                }
            }
            let total: usize = model.values().map(VecDeque::len).sum();
            prop_assert_eq!(q.total(), total);
            prop_assert_eq!(q.is_empty(), total == 0);
            for (&k, fifo) in &model {
                prop_assert_eq!(q.waiters(k), fifo.len());
            }
            most = most.max(total);
            if reserved && most <= crate::waitq::BOOT_ROOM {
                prop_assert_eq!(q.capacity(), room);
            }
        }
    }

    /// The frame allocator against a set of free frame numbers: what is managed, what
    /// `alloc` may return, first fit for runs, and `free`'s errors.
    #[test]
    fn frames_match_set(
        usable in proptest::collection::vec((0u64..0x60_000, 0u64..0x40_000), 1..4),
        reserved in proptest::collection::vec((0u64..0x80_000, 0u64..0x8000), 0..3),
        ops in proptest::collection::vec(frame_op(), 1..120),
    ) {
        let usable: Vec<_> = usable.iter().map(|&(s, l)| s..s + l).collect();
        let reserved: Vec<_> = reserved.iter().map(|&(s, l)| s..s + l).collect();
        let mut fa = FrameAllocator::new(&usable, &reserved);
        // Managed: frames wholly inside a usable range, touching no reserved one, not 0.
        let managed: BTreeSet<u64> = (1..SPAN / PAGE_SIZE)
            .filter(|&f| {
                let (a, b) = (f * PAGE_SIZE, (f + 1) * PAGE_SIZE);
                usable.iter().any(|r| r.start <= a && b <= r.end)
                    && !reserved.iter().any(|r| r.start < b && a < r.end)
            })
            .collect();
        let mut free = managed.clone();
        prop_assert_eq!(fa.total_frames(), managed.len());
        for op in ops {
            match op {
                FrameOp::Alloc => match fa.alloc() {
                    Some(a) => {
                        prop_assert!(a.is_page_aligned());
                        prop_assert!(free.remove(&(a.as_u64() / PAGE_SIZE)), "{a} was not free");
                    }
                    None => prop_assert!(free.is_empty()),
                },
                FrameOp::Contiguous(n) => {
                    let first = free
                        .iter()
                        .copied()
                        .find(|&f| (f..f + n as u64).all(|g| free.contains(&g)));
                    let want = if n == 0 { None } else { first };
                    let got = fa.alloc_contiguous(n).map(|a| a.as_u64() / PAGE_SIZE);
                    prop_assert_eq!(got, want, "first fit for {} frames", n);
                    if let Some(f) = got {
                        for g in f..f + n as u64 {
                            free.remove(&g);
                        }
                    }
                }
                FrameOp::Free(pick, misaligned) => {
                    let f = pick as u64 % (SPAN / PAGE_SIZE + 8);
                    let addr = PhysAddr(f * PAGE_SIZE + if misaligned { 8 } else { 0 });
                    let want = if misaligned {
                        Err(FrameError::Misaligned)
                    } else if !managed.contains(&f) {
                        Err(FrameError::OutOfRange)
                    } else if free.contains(&f) {
                        Err(FrameError::NotAllocated)
                    } else {
                        free.insert(f);
                        Ok(())
                    };
                    prop_assert_eq!(fa.free(addr), want);
                }
            }
            prop_assert_eq!(fa.free_frames(), free.len());
            prop_assert_eq!(fa.allocated_frames(), managed.len() - free.len());
        }
        for f in 0..SPAN / PAGE_SIZE + 2 {
            let allocated = managed.contains(&f) && !free.contains(&f);
            prop_assert_eq!(fa.is_allocated(PhysAddr(f * PAGE_SIZE)), allocated);
        }
    }

    /// Activations and their pools against a model: calls take the most recently returned
    /// activation, the sidetrack keeps the last one back once, returns go back to the pool
    /// unless retired, and each port's `attached` counts its activations.
    #[test]
    fn activations_match_model(ops in proptest::collection::vec(act_op(), 1..80)) {
        let mut acts = Activations::new();
        let mut pools = [Pool::default(), Pool::default()];
        let mut port_alive = [true, true];
        let mut model: BTreeMap<Key, MAct> = BTreeMap::new();
        let mut m_free: [Vec<Key>; 2] = [Vec::new(), Vec::new()];
        let mut m_sidetrack = [false, false];
        let mut next_thread = 1u64;
        for op in ops {
            match op {
                ActOp::Create(task, port) if port_alive[port] => {
                    let id = acts.create(&mut pools[port], activation(task, port)).unwrap();
                    prop_assert!(!model.contains_key(&id));
                    model.insert(id, MAct { task, port, occupant: None, retired: false });
                    m_free[port].push(id);
                }
                ActOp::Call(port, sidetracked) if port_alive[port] => {
                    let left = m_free[port].len();
                    let want = match m_free[port].last().copied() {
                        None => Decision::Wait,
                        Some(a) if !(m_sidetrack[port] && left == 1) => Decision::Take(a),
                        Some(a) if !sidetracked => Decision::Sidetrack(a),
                        Some(_) => Decision::Wait,
                    };
                    let got = pools[port].decide(sidetracked);
                    prop_assert_eq!(got, want);
                    if let Decision::Take(a) | Decision::Sidetrack(a) = got {
                        m_free[port].pop();
                        let t = Key(next_thread);
                        next_thread += 1;
                        let occupied = acts.occupy(a, t).unwrap();
                        prop_assert!(occupied.occupied && occupied.occupant == t);
                        model.get_mut(&a).unwrap().occupant = Some(t.0);
                    }
                }
                ActOp::Return(pick) => {
                    let busy: Vec<Key> = model
                        .iter()
                        .filter(|(_, a)| a.occupant.is_some())
                        .map(|(&k, _)| k)
                        .collect();
                    if busy.is_empty() {
                        continue;
                    }
                    let id = busy[pick % busy.len()];
                    let m = model[&id];
                    let pool = port_alive[m.port].then_some(&mut pools[m.port]);
                    let back = !m.retired && port_alive[m.port];
                    prop_assert_eq!(acts.give_back(id, pool), back);
                    if back {
                        m_free[m.port].push(id);
                        model.get_mut(&id).unwrap().occupant = None;
                    } else {
                        model.remove(&id);
                    }
                    if !back {
                        prop_assert!(acts.get(id).is_none(), "a freed activation is gone");
                        prop_assert!(!acts.give_back(id, None));
                    }
                }
                ActOp::Sidetrack(port, on) => {
                    pools[port].sidetrack = on;
                    m_sidetrack[port] = on;
                }
                ActOp::EndTask(task) => {
                    let freed = acts.retire(|a| a.task == task);
                    let mut want = Vec::new();
                    for (&id, a) in model.iter_mut().filter(|(_, a)| a.task == task) {
                        if a.occupant.is_some() {
                            a.retired = true;
                        } else {
                            want.push((id, Key::new(a.port as u32, 1)));
                        }
                    }
                    let mut sorted = freed.clone();
                    sorted.sort();
                    prop_assert_eq!(sorted, want);
                    for (id, port) in freed {
                        model.remove(&id);
                        let p = port.index() as usize;
                        m_free[p].retain(|&f| f != id);
                        pools[p].forget(id);
                    }
                }
                ActOp::EndPort(port) if port_alive[port] => {
                    port_alive[port] = false;
                    let freed = acts.retire(|a| a.port.index() as usize == port);
                    for (id, _) in &freed {
                        prop_assert!(model.remove(id).is_some());
                    }
                    for a in model.values_mut().filter(|a| a.port == port) {
                        prop_assert!(a.occupant.is_some(), "free activations are freed at once");
                        a.retired = true;
                    }
                    m_free[port].clear();
                }
                _ => {}
            }
            prop_assert_eq!(acts.len(), model.len());
            prop_assert_eq!(acts.is_empty(), model.is_empty());
            for id in model.keys() {
                prop_assert!(acts.get_mut(*id).is_some());
            }
            for (id, a) in acts.iter() {
                let m = model.get(&id).copied();
                prop_assert_eq!(
                    Some((a.task, a.port.index() as usize, a.occupied, a.retired)),
                    m.map(|m| (m.task, m.port, m.occupant.is_some(), m.retired))
                );
                prop_assert_eq!(a.occupant, Key(m.and_then(|m| m.occupant).unwrap_or(0)));
            }
            for port in 0..2 {
                if !port_alive[port] {
                    continue;
                }
                prop_assert_eq!(&pools[port].free, &m_free[port]);
                prop_assert_eq!(pools[port].is_migrating(), pools[port].attached > 0);
                let attached = model.values().filter(|a| a.port == port).count();
                prop_assert_eq!(pools[port].attached as usize, attached, "attached of {}", port);
            }
        }
    }
}

#[test]
fn an_activation_buffer_holds_a_largest_message() {
    assert_eq!(
        BUFFER_PAGES * PAGE_SIZE as usize,
        baton_abi::ipc::MSG_SIZE_MAX
    );
}
