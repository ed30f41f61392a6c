//! The work-stealing deque (`deque.rs`) model-checked with `loom`: the same macro text the
//! runtime's [`ChaseLev`](crate::deque::ChaseLev) is made from, instantiated on `loom`'s
//! atomics, run over every interleaving (up to a preemption bound) of the owner pushing and
//! popping and one or two thieves stealing.
//!
//! What must hold in every interleaving: every entry pushed is taken exactly once (by the
//! owner's pop or by one thief's steal), never twice and never lost, and what is taken is
//! the entry as it was pushed (both words).

use std::vec::Vec;

use loom::sync::Arc;
use loom::thread;

use crate::deque::Steal;

/// `loom`'s atomics, under the names the macro uses.
mod loom_atomics {
    pub use loom::sync::atomic::{fence, AtomicIsize, AtomicUsize, Ordering};
}

crate::deque::chase_lev!(
    /// The runtime's deque on `loom`'s atomics.
    Deque,
    loom_atomics
);

/// An entry whose two words belong together (a torn read shows).
fn entry(i: usize) -> (usize, usize) {
    (i, 1000 + i)
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A thief's turn: steals until it takes one entry, finds the deque empty, or has tried
/// `tries` times.
fn steal_one(d: &Deque, tries: usize) -> Option<(usize, usize)> {
    for _ in 0..tries {
        match d.steal() {
            Steal::Took(x) => return Some(x),
            Steal::Empty => return None,
            Steal::Lost => thread::yield_now(),
        }
    }
    None
}

/// Checks that `taken` is `0..n` exactly once each, whole.
fn check_once(mut taken: Vec<(usize, usize)>, n: usize) {
    for &(i, w) in &taken {
        assert_eq!(w, 1000 + i, "a torn entry: {taken:?}");
    }
    taken.sort_unstable();
    let want: Vec<_> = (0..n).map(entry).collect();
    assert_eq!(taken, want, "every entry taken exactly once");
}

/// The owner pushes two entries and pops twice while one thief steals: the race on the
/// last entry (the owner's pop against the thief's steal) is decided once.
#[test]
fn owner_pops_while_one_thief_steals() {
    model(|| {
        let d = Arc::new(Deque::with_capacity(4));
        d.push(entry(0)).unwrap();
        d.push(entry(1)).unwrap();
        let thief = {
            let d = d.clone();
            thread::spawn(move || steal_one(&d, 2))
        };
        let mut taken = Vec::new();
        taken.extend(d.pop());
        taken.extend(d.pop());
        taken.extend(thief.join().unwrap());
        // Whatever the thief lost the race for, the owner still holds or took.
        while let Some(x) = d.pop() {
            taken.push(x);
        }
        check_once(taken, 2);
    });
}

/// The owner pushes while a thief steals, then pops what is left: entries pushed after
/// the thief looked are never lost, and a thief never takes a slot before its entry is
/// written.
#[test]
fn push_races_steal() {
    model(|| {
        let d = Arc::new(Deque::with_capacity(4));
        let thief = {
            let d = d.clone();
            thread::spawn(move || {
                let mut got = Vec::new();
                got.extend(steal_one(&d, 2));
                got.extend(steal_one(&d, 2));
                got
            })
        };
        d.push(entry(0)).unwrap();
        d.push(entry(1)).unwrap();
        let mut taken = Vec::new();
        taken.extend(d.pop());
        taken.extend(thief.join().unwrap());
        while let Some(x) = d.pop() {
            taken.push(x);
        }
        check_once(taken, 2);
    });
}

/// One entry, the owner popping it against two thieves stealing it: exactly one of the
/// three takes it.
#[test]
fn two_thieves_and_the_owner_take_the_last_entry_once() {
    model(|| {
        let d = Arc::new(Deque::with_capacity(2));
        d.push(entry(0)).unwrap();
        let thieves: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || steal_one(&d, 1))
            })
            .collect();
        let mut taken: Vec<_> = d.pop().into_iter().collect();
        for t in thieves {
            taken.extend(t.join().unwrap());
        }
        taken.extend(d.pop());
        // A thief that lost its race leaves the entry to the others; none may double it,
        // and someone takes it.
        check_once(taken, 1);
    });
}

/// A bounded deque reused around its ring while a thief steals: an entry in a reused
/// slot is never taken twice, and a thief's stale read of a reused slot is never taken.
#[test]
fn wrap_around_with_a_thief() {
    model(|| {
        let d = Arc::new(Deque::with_capacity(2));
        d.push(entry(0)).unwrap();
        d.push(entry(1)).unwrap();
        let thief = {
            let d = d.clone();
            thread::spawn(move || steal_one(&d, 1))
        };
        let mut taken = Vec::new();
        taken.extend(d.pop());
        // Slot 1 is free again (and slot 0 too if the thief took it): push into it.
        let mut pushed = 2;
        if d.push(entry(2)).is_ok() {
            pushed = 3;
        }
        taken.extend(thief.join().unwrap());
        while let Some(x) = d.pop() {
            taken.push(x);
        }
        if pushed == 2 {
            // The push found it full: the thief had not taken slot 0 yet.
            check_once(taken, 2);
        } else {
            check_once(taken, 3);
        }
    });
}
