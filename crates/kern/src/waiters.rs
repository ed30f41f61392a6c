//! The threads waiting on a port, oldest first, with the oldest in a slot of its own.
//!
//! A port's receivers are almost always one server thread, which leaves the queue when a
//! request comes and joins it again when it waits for the next: the RPC fast path takes
//! the front, pops it and pushes the caller onto the caller's own port on every transfer.
//! [`Waiters`] keeps the oldest waiter in a field of its own and only the later ones in a
//! [`Ring`], so that with one waiter each of those operations is a test and a load or a
//! store, with none of the ring's index arithmetic.
//!
//! # Invariants
//! - `first` is `None` only when `rest` is empty: the oldest waiter is always `first`.
//! - The waiters, oldest first, are `first` followed by `rest` front to back.

use crate::ring::Ring;

/// A FIFO of waiters with the oldest in a slot of its own. See the module documentation.
#[derive(Debug, Clone)]
pub struct Waiters<T> {
    first: Option<T>,
    rest: Ring<T>,
}

impl<T: Copy + Default + PartialEq> Default for Waiters<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default + PartialEq> Waiters<T> {
    /// No waiters; the ring behind the first slot allocates when a second waiter comes.
    pub const fn new() -> Waiters<T> {
        Waiters {
            first: None,
            rest: Ring::new(),
        }
    }

    /// Number of waiters.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    /// Whether nobody waits.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Makes room for at least `n` waiters in all, so that pushes up to that many never
    /// allocate; `Err` (nothing changed) when the heap has no room.
    pub fn reserve(&mut self, n: usize) -> Result<(), baton_abi::Error> {
        match n {
            0 | 1 => Ok(()),
            n => self.rest.reserve(n - 1),
        }
    }

    /// Whether one more waiter fits without allocating.
    #[inline(always)]
    pub fn has_room(&self) -> bool {
        self.first.is_none() || self.rest.has_room()
    }

    /// [`Waiters::push_back`], or `Err(t)` (nothing changed) when the ring must grow and
    /// the heap has no room.
    #[inline]
    pub fn try_push_back(&mut self, t: T) -> Result<(), T> {
        if self.first.is_none() {
            self.first = Some(t);
            return Ok(());
        }
        self.rest.try_push_back(t)
    }

    /// Adds `t` as the newest waiter (allocating when the ring is full: callers that must
    /// not allocate check [`Waiters::has_room`] or [`Waiters::reserve`] first).
    #[inline(always)]
    pub fn push_back(&mut self, t: T) {
        if self.first.is_none() {
            self.first = Some(t);
        } else {
            self.rest.push_back(t);
        }
    }

    /// Takes the oldest waiter.
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<T> {
        let t = self.first?;
        self.first = if self.rest.is_empty() {
            None
        } else {
            self.rest.pop_front()
        };
        Some(t)
    }

    /// The oldest waiter, left in place.
    #[inline(always)]
    pub fn front(&self) -> Option<T> {
        self.first
    }

    /// Position of the first waiter equal to `t`, oldest first.
    pub fn position(&self, t: T) -> Option<usize> {
        if self.first? == t {
            return Some(0);
        }
        self.rest.position(t).map(|i| i + 1)
    }

    /// Removes the waiter at position `i` (oldest first), keeping the others' order.
    pub fn remove(&mut self, i: usize) -> Option<T> {
        match i {
            0 => self.pop_front(),
            i => self.rest.remove(i - 1),
        }
    }

    /// The waiters, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.first.into_iter().chain(self.rest.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::vec::Vec;

    /// One operation of the model test.
    #[derive(Clone, Debug)]
    enum Op {
        Push(u32),
        TryPush(u32),
        Pop,
        Remove(usize),
        RemoveValue(u32),
        Reserve(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u32..50).prop_map(Op::Push),
            1 => (1u32..50).prop_map(Op::TryPush),
            3 => Just(Op::Pop),
            1 => (0usize..8).prop_map(Op::Remove),
            1 => (1u32..50).prop_map(Op::RemoveValue),
            1 => (0usize..10).prop_map(Op::Reserve),
        ]
    }

    proptest! {
        /// Any sequence of operations gives what a `VecDeque` gives, and the room
        /// `has_room` and `reserve` promise is there.
        #[test]
        fn behaves_as_a_fifo(ops in proptest::collection::vec(op(), 0..200)) {
            let mut w = Waiters::new();
            let mut model: VecDeque<u32> = VecDeque::new();
            for op in ops {
                match op {
                    Op::Push(t) => {
                        w.push_back(t);
                        model.push_back(t);
                    }
                    Op::TryPush(t) => {
                        prop_assert_eq!(w.try_push_back(t), Ok(()));
                        model.push_back(t);
                    }
                    Op::Pop => prop_assert_eq!(w.pop_front(), model.pop_front()),
                    Op::Remove(i) => prop_assert_eq!(w.remove(i), model.remove(i)),
                    Op::RemoveValue(t) => {
                        let at = w.position(t);
                        prop_assert_eq!(at, model.iter().position(|&x| x == t));
                        if let Some(i) = at {
                            prop_assert_eq!(w.remove(i), model.remove(i));
                        }
                    }
                    Op::Reserve(n) => {
                        prop_assert!(w.reserve(n).is_ok());
                        if model.len() < n {
                            prop_assert!(w.has_room());
                        }
                    }
                }
                prop_assert_eq!(w.len(), model.len());
                prop_assert_eq!(w.is_empty(), model.is_empty());
                prop_assert_eq!(w.front(), model.front().copied());
                prop_assert_eq!(
                    w.iter().collect::<Vec<_>>(),
                    model.iter().copied().collect::<Vec<_>>()
                );
            }
        }
    }

    /// One waiter needs no ring at all: room for it is there from the start.
    #[test]
    fn one_waiter_needs_no_allocation() {
        let mut w: Waiters<u32> = Waiters::new();
        assert!(w.has_room());
        w.push_back(7);
        assert!(!w.has_room(), "a second waiter needs the ring");
        assert_eq!(w.rest.capacity(), 0);
        assert_eq!(w.pop_front(), Some(7));
        assert!(w.is_empty() && w.has_room());
    }
}
