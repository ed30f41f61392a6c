//! Property tests: random sequences of operations on the policy managers and the TCB
//! pools, compared step by step with naive reference models built from the standard
//! library's collections.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use proptest::prelude::*;

use crate::policy::{Kind, Policy};
use crate::pool::{Global, Local, Thresholds};

/// An operation on a policy manager.
#[derive(Clone, Debug)]
enum PolicyOp {
    Enqueue,
    Next,
    Give,
}

fn policy_op() -> impl Strategy<Value = PolicyOp> {
    prop_oneof![
        3 => Just(PolicyOp::Enqueue),
        2 => Just(PolicyOp::Next),
        1 => Just(PolicyOp::Give),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Each policy against a deque model: FIFO takes the oldest, LIFO and work stealing
    /// the newest; only work stealing gives (its oldest) to thieves. Every item comes back
    /// exactly once.
    #[test]
    fn policies_match_their_models(
        kind in prop_oneof![Just(Kind::Fifo), Just(Kind::Lifo), Just(Kind::WorkStealing)],
        ops in proptest::collection::vec(policy_op(), 0..200),
    ) {
        let mut p: alloc::boxed::Box<dyn Policy<u32>> = kind.make();
        let mut model: VecDeque<u32> = VecDeque::new();
        let mut next_item = 0u32;
        let mut returned = Vec::new();
        for op in ops {
            match op {
                PolicyOp::Enqueue => {
                    p.enqueue(next_item);
                    model.push_back(next_item);
                    next_item += 1;
                }
                PolicyOp::Next => {
                    let want = match kind {
                        Kind::Fifo => model.pop_front(),
                        Kind::Lifo | Kind::WorkStealing => model.pop_back(),
                    };
                    let got = p.next();
                    prop_assert_eq!(got, want);
                    returned.extend(got);
                }
                PolicyOp::Give => {
                    let want = match kind {
                        Kind::WorkStealing => model.pop_front(),
                        Kind::Fifo | Kind::Lifo => None,
                    };
                    let got = p.give();
                    prop_assert_eq!(got, want);
                    returned.extend(got);
                }
            }
            prop_assert_eq!(p.len(), model.len());
            prop_assert_eq!(p.steals(), kind == Kind::WorkStealing);
        }
        returned.extend(core::iter::from_fn(|| p.next()));
        returned.sort_unstable();
        prop_assert_eq!(returned, (0..next_item).collect::<Vec<_>>());
    }
}

/// An operation on the pools of several virtual processors.
#[derive(Clone, Debug)]
enum PoolOp {
    /// Virtual processor `n` starts a thread: it needs a TCB.
    Acquire(usize),
    /// Virtual processor `n` gives back the TCB its thread `k`-th oldest in use had.
    Release(usize, usize),
}

fn pool_op() -> impl Strategy<Value = PoolOp> {
    prop_oneof![
        (0..3usize).prop_map(PoolOp::Acquire),
        (0..3usize, 0..64usize).prop_map(|(v, k)| PoolOp::Release(v, k)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Three virtual processors' local pools and the global pool, driven the way the
    /// runtime drives them, against a model: a new TCB is made only when the local and
    /// the global pool are both empty; a local pool never holds more than its overflow
    /// threshold after an operation; acquire returns the last TCB released locally; no TCB
    /// is ever in two places; and the number of TCBs made never exceeds the most ever in
    /// use at once plus what the other processors' pools may hold.
    #[test]
    fn pools_reuse_before_they_create(
        overflow in 1usize..8,
        refill in 1usize..6,
        ops in proptest::collection::vec(pool_op(), 0..300),
    ) {
        let limits = Thresholds { overflow, refill };
        let mut global = Global::new();
        let mut locals: Vec<Local<u32>> = (0..3).map(|_| Local::new(limits)).collect();
        // The model: the items each local pool holds (newest last), and the global pool.
        let mut model_local: Vec<Vec<u32>> = alloc::vec![Vec::new(); 3];
        let mut model_global: Vec<u32> = Vec::new();
        let mut in_use: Vec<u32> = Vec::new();
        let mut made = 0u32;
        let mut peak = 0usize;
        for op in ops {
            match op {
                PoolOp::Acquire(v) => {
                    let got = match locals[v].take() {
                        Some(t) => Some(t),
                        None => locals[v].refill(&mut global),
                    };
                    let want = if let Some(t) = model_local[v].pop() {
                        Some(t)
                    } else {
                        let take = refill.min(overflow + 1).min(model_global.len());
                        let from = model_global.len() - take;
                        model_local[v].extend(model_global.drain(from..));
                        model_local[v].pop()
                    };
                    prop_assert_eq!(got, want);
                    let t = match got {
                        Some(t) => t,
                        None => {
                            prop_assert!(model_local[v].is_empty() && model_global.is_empty());
                            made += 1;
                            made - 1
                        }
                    };
                    prop_assert!(!in_use.contains(&t));
                    in_use.push(t);
                    peak = peak.max(in_use.len());
                }
                PoolOp::Release(v, k) => {
                    if in_use.is_empty() {
                        continue;
                    }
                    let t = in_use.remove(k % in_use.len());
                    if locals[v].put(t) {
                        locals[v].spill(&mut global);
                    }
                    model_local[v].push(t);
                    if model_local[v].len() > overflow {
                        let half = model_local[v].len() / 2;
                        model_global.extend(model_local[v].drain(..half));
                    }
                }
            }
            for (l, m) in locals.iter().zip(&model_local) {
                prop_assert_eq!(l.len(), m.len());
                prop_assert!(l.len() <= overflow);
            }
            prop_assert_eq!(global.len(), model_global.len());
            prop_assert_eq!(
                in_use.len() + global.len() + locals.iter().map(Local::len).sum::<usize>(),
                made as usize
            );
        }
        // A TCB is made only when its processor's pool and the global pool are empty, so
        // at most the other two processors' pools hold TCBs then.
        prop_assert!(made as usize <= peak + 2 * overflow);
    }

    /// The owner's ring against a deque model, with the yields' one-step operations
    /// among the pushes and pops: `rotate_oldest` is `pop_oldest` then `push` (the FIFO
    /// yield), `replace_newest` is `pop_newest` then `push` (the LIFO yield), each taking
    /// what the pop would and never refusing for lack of room; `oldest` and `newest` peek
    /// at what the pops take.
    #[test]
    fn ring_yields_match_pop_then_push(ops in proptest::collection::vec(0u8..6, 0..700)) {
        use crate::deque::{Ring, CAPACITY};
        let mut r: Ring<u32> = Ring::new();
        let mut model: VecDeque<u32> = VecDeque::new();
        for (item, op) in (0u32..).zip(ops) {
            prop_assert_eq!(r.oldest().copied(), model.front().copied());
            prop_assert_eq!(r.newest().copied(), model.back().copied());
            match op {
                // Pushes twice as often as the rest, so that the ring fills up.
                0 | 1 => {
                    let got = r.push(item);
                    if model.len() < CAPACITY {
                        prop_assert_eq!(got, Ok(()));
                        model.push_back(item);
                    } else {
                        prop_assert_eq!(got, Err(item));
                    }
                }
                2 => prop_assert_eq!(r.pop_oldest(), model.pop_front()),
                3 => prop_assert_eq!(r.pop_newest(), model.pop_back()),
                4 => {
                    let want = match model.pop_front() {
                        Some(x) => {
                            model.push_back(item);
                            Ok(x)
                        }
                        None => Err(item),
                    };
                    prop_assert_eq!(r.rotate_oldest(item), want);
                }
                _ => {
                    let want = match model.pop_back() {
                        Some(x) => {
                            model.push_back(item);
                            Ok(x)
                        }
                        None => Err(item),
                    };
                    prop_assert_eq!(r.replace_newest(item), want);
                }
            }
            prop_assert_eq!(r.len(), model.len());
        }
        let mut rest = Vec::new();
        while let Some(x) = r.pop_oldest() {
            rest.push(x);
        }
        prop_assert_eq!(rest, model.into_iter().collect::<Vec<_>>());
    }

    /// The owned yield's ring operations against a deque model, over random pushes, pops
    /// and yields of a ring that fills up: `ends` and `at` read what the pops would take,
    /// `rotate_oldest_at` and `replace_newest_at` given the ends just read are the FIFO
    /// and LIFO yields (`pop_oldest` or `pop_newest`, then `push`), `push_at` given the
    /// tail just read of a ring with room is `push`, and `find_mut`
    /// rewrites the oldest matching item in place (the immediate signal's retargeting of
    /// an owned entry) and finds nothing that is not there.
    #[test]
    fn owned_ring_ops_match_a_deque(
        ops in proptest::collection::vec(0u8..7, 0..700),
        probe in 0u32..700,
    ) {
        use crate::deque::{Ring, CAPACITY};
        let mut r: Ring<u32> = Ring::new();
        let mut model: VecDeque<u32> = VecDeque::new();
        for (item, op) in (0u32..).zip(ops) {
            let (h, t) = r.ends();
            prop_assert_eq!(t.wrapping_sub(h), model.len());
            if h != t {
                // SAFETY: `h` and `t - 1` are in `h..t`.
                unsafe {
                    prop_assert_eq!(Some(*r.at(h)), model.front().copied());
                    prop_assert_eq!(Some(*r.at(t.wrapping_sub(1))), model.back().copied());
                }
            }
            match op {
                0 => {
                    if r.push(item).is_ok() {
                        model.push_back(item);
                    }
                    prop_assert!(model.len() <= CAPACITY);
                }
                1 if model.len() < CAPACITY => {
                    // SAFETY: `t` is the tail just read, and the ring has room.
                    unsafe { r.push_at(t, item) };
                    model.push_back(item);
                }
                1 => prop_assert!(r.push(item).is_err()),
                2 => prop_assert_eq!(r.pop_oldest(), model.pop_front()),
                3 if h != t => {
                    // SAFETY: `(h, t)` are the ends just read, `h != t`.
                    let out = unsafe { r.rotate_oldest_at(h, t, item) };
                    prop_assert_eq!(Some(out), model.pop_front());
                    model.push_back(item);
                }
                4 if h != t => {
                    // SAFETY: as above.
                    let out = unsafe { r.replace_newest_at(t, item) };
                    prop_assert_eq!(Some(out), model.pop_back());
                    model.push_back(item);
                }
                5 => {
                    let want = model.iter().position(|&x| x == probe);
                    let got = r.find_mut(|&x| x == probe).map(|x| {
                        *x = u32::MAX;
                    });
                    prop_assert_eq!(got.is_some(), want.is_some());
                    if let Some(i) = want {
                        model[i] = u32::MAX;
                    }
                }
                _ => prop_assert_eq!(r.pop_newest(), model.pop_back()),
            }
        }
        let mut rest = Vec::new();
        while let Some(x) = r.pop_oldest() {
            rest.push(x);
        }
        prop_assert_eq!(rest, model.into_iter().collect::<Vec<_>>());
    }

    /// The yield's shortcuts against the transitions they stand for, over words of every
    /// shape: `claim_ready` gives a word exactly when `claim` resumes a ready thread
    /// without moving it to another processor (its entry live, neither suspended nor
    /// pinned), and then the same word; the yield's addition is `yielded` for every
    /// running word with no live entry, the ticket wrapping included.
    #[test]
    fn yield_shortcuts_match_the_transitions(
        bits in any::<u64>(),
        ticket in any::<u32>(),
        same_ticket in any::<bool>(),
        vp in 0usize..4,
    ) {
        use crate::word::{Claim, Word};
        // Half the words carry the entry's ticket and a processor in 0..4, so that the
        // common case comes up.
        let w = if same_ticket {
            Word((bits & 0xffff_ffff & !(0xfffc << 16)) | (u64::from(ticket) << 32))
        } else {
            Word(bits)
        };
        let general = w.claim(ticket, vp);
        match w.claim_ready(ticket, vp) {
            Some(new) => prop_assert_eq!(general, Ok((new, Claim::Resume))),
            None => prop_assert!(
                !matches!(general, Ok((n, Claim::Resume)) if n.vp() == w.vp()),
                "{:?} claimed by {} on {}: {:?}", w, ticket, vp, general
            ),
        }
        if w.running_unqueued() {
            prop_assert_eq!(Word(w.0.wrapping_add(Word::YIELD_RUNNING)), w.yielded());
        }
    }

    /// An entry's liveness, tested with one exclusive-or and one mask, against its
    /// definition: the word queued and its ticket the entry's.
    #[test]
    fn is_live_matches_its_definition(bits in any::<u64>(), ticket in any::<u32>(), same in any::<bool>()) {
        use crate::word::Word;
        // Half the words carry the entry's ticket, so that both answers come up.
        let w = if same { Word((bits & 0xffff_ffff) | (u64::from(ticket) << 32)) } else { Word(bits) };
        prop_assert_eq!(w.is_live(ticket), w.queued() && w.ticket() == ticket);
    }
}
