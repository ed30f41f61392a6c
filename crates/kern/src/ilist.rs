//! An intrusive FIFO: a queue whose links live in the queued objects themselves.
//!
//! A port's queue of receive-waiting threads is today a ring of thread ids, so taking the
//! waiter costs a slab lookup of the id and removing a thread from the middle (a timeout,
//! a kill) a search of the ring. With the links in the thread object instead (the core
//! owning a [`Link`] field that the IPC family uses), the front waiter is reached by its
//! handle (a pointer in the kernel), and a thread leaves any position in O(1), with no
//! allocation to push (so no quota check beyond the one that bounds the threads).
//!
//! This module holds the index and link logic only, generic over what a handle is and
//! where the links are stored ([`LinkStore`]), so that it is host-tested here against a
//! `VecDeque` model (`proptests`); the kernel binary supplies a store that reaches a
//! thread's links through its handle.
//!
//! # Invariants
//! - `head` is `None` exactly when `tail` is `None` exactly when `len == 0`.
//! - Following `next` from `head` visits `len` linked nodes and ends at `tail`; `prev`
//!   is the same walk backwards.
//! - A node is on at most one list at a time, and `Link::linked` says whether it is on
//!   one. Which list it is on is the caller's to know (the kernel records the port a
//!   thread waits on); [`IList::remove`] of a node linked on another list is the
//!   caller's bug, caught by a debug assertion when the walk's ends disagree.

/// The links a queued object carries: its neighbours on the list it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link<H> {
    prev: Option<H>,
    next: Option<H>,
    linked: bool,
}

impl<H> Default for Link<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H> Link<H> {
    /// Unlinked.
    pub const fn new() -> Link<H> {
        Link {
            prev: None,
            next: None,
            linked: false,
        }
    }

    /// Whether the object is on a list.
    #[inline(always)]
    pub fn is_linked(&self) -> bool {
        self.linked
    }
}

/// Where the links of the objects named by handles of type `H` are kept.
pub trait LinkStore<H> {
    /// The links of the object `h` names. Handles given to a list's operations name live
    /// objects (the kernel unlinks a thread before it frees it).
    fn link(&mut self, h: H) -> &mut Link<H>;
}

/// A FIFO of objects linked through their own [`Link`]s. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IList<H> {
    head: Option<H>,
    tail: Option<H>,
    len: usize,
}

impl<H> Default for IList<H> {
    fn default() -> Self {
        IList {
            head: None,
            tail: None,
            len: 0,
        }
    }
}

impl<H: Copy + PartialEq> IList<H> {
    /// Empty.
    pub const fn new() -> IList<H> {
        IList {
            head: None,
            tail: None,
            len: 0,
        }
    }

    /// Number of linked objects.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is linked.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// The oldest, without removing it.
    #[inline(always)]
    pub fn front(&self) -> Option<H> {
        self.head
    }

    /// Links `h` as the newest. `Err(h)` (nothing changed) when `h` is already on a list.
    #[inline]
    pub fn push_back<S: LinkStore<H>>(&mut self, store: &mut S, h: H) -> Result<(), H> {
        let l = store.link(h);
        if l.linked {
            return Err(h);
        }
        *l = Link {
            prev: self.tail,
            next: None,
            linked: true,
        };
        match self.tail {
            Some(t) => store.link(t).next = Some(h),
            None => self.head = Some(h),
        }
        self.tail = Some(h);
        self.len += 1;
        Ok(())
    }

    /// Unlinks and returns the oldest.
    #[inline]
    pub fn pop_front<S: LinkStore<H>>(&mut self, store: &mut S) -> Option<H> {
        let h = self.head?;
        let l = core::mem::take(store.link(h));
        self.head = l.next;
        match l.next {
            Some(n) => store.link(n).prev = None,
            None => self.tail = None,
        }
        self.len -= 1;
        Some(h)
    }

    /// Unlinks `h` from wherever it is on this list, in O(1); false (nothing changed) when
    /// `h` is on no list. `h` must not be on another list (see the module invariants).
    pub fn remove<S: LinkStore<H>>(&mut self, store: &mut S, h: H) -> bool {
        let l = *store.link(h);
        if !l.linked {
            return false;
        }
        debug_assert!(l.prev.is_some() || self.head == Some(h));
        debug_assert!(l.next.is_some() || self.tail == Some(h));
        match l.prev {
            Some(p) => store.link(p).next = l.next,
            None => self.head = l.next,
        }
        match l.next {
            Some(n) => store.link(n).prev = l.prev,
            None => self.tail = l.prev,
        }
        *store.link(h) = Link::new();
        self.len -= 1;
        true
    }

    /// The linked objects, oldest first (a walk of `next`: for checks and teardown).
    pub fn iter<'a, S: LinkStore<H>>(&self, store: &'a mut S) -> Iter<'a, H, S> {
        Iter {
            store,
            at: self.head,
        }
    }
}

/// Walk of an [`IList`], oldest first.
pub struct Iter<'a, H, S> {
    store: &'a mut S,
    at: Option<H>,
}

impl<H: Copy, S: LinkStore<H>> Iterator for Iter<'_, H, S> {
    type Item = H;
    fn next(&mut self) -> Option<H> {
        let h = self.at?;
        self.at = self.store.link(h).next;
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::vec::Vec;

    /// Nodes in a vector, named by index.
    struct Nodes(Vec<Link<usize>>);

    impl LinkStore<usize> for Nodes {
        fn link(&mut self, h: usize) -> &mut Link<usize> {
            &mut self.0[h]
        }
    }

    #[test]
    fn fifo_and_middle_removal() {
        let mut s = Nodes(std::vec![Link::new(); 4]);
        let mut l = IList::new();
        for h in 0..4 {
            assert_eq!(l.push_back(&mut s, h), Ok(()));
        }
        assert_eq!(l.push_back(&mut s, 2), Err(2), "already linked");
        assert!(l.remove(&mut s, 2));
        assert!(!l.remove(&mut s, 2), "removed twice");
        assert_eq!(l.iter(&mut s).collect::<Vec<_>>(), [0, 1, 3]);
        assert!(l.remove(&mut s, 3));
        assert_eq!(l.pop_front(&mut s), Some(0));
        assert_eq!(l.pop_front(&mut s), Some(1));
        assert_eq!(l.pop_front(&mut s), None);
        assert!(l.is_empty());
        assert!(s.0.iter().all(|k| *k == Link::new()));
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Push node `n` onto list `l`.
        Push(usize, usize),
        /// Pop the front of list `l`.
        Pop(usize),
        /// Remove node `n` from whichever list it is on.
        Remove(usize),
    }

    const NODES: usize = 12;
    const LISTS: usize = 3;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..LISTS, 0..NODES).prop_map(|(l, n)| Op::Push(l, n)),
            (0..LISTS).prop_map(Op::Pop),
            (0..NODES).prop_map(Op::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Several lists sharing one store of nodes behave as `VecDeque`s whose elements
        /// are each in at most one of them.
        #[test]
        fn matches_vecdeque(ops in proptest::collection::vec(op(), 0..200)) {
            let mut s = Nodes(std::vec![Link::new(); NODES]);
            let mut lists: Vec<IList<usize>> = (0..LISTS).map(|_| IList::new()).collect();
            let mut model: Vec<VecDeque<usize>> = (0..LISTS).map(|_| VecDeque::new()).collect();
            for op in ops {
                match op {
                    Op::Push(l, n) => {
                        let on = model.iter().any(|q| q.contains(&n));
                        let r = lists[l].push_back(&mut s, n);
                        prop_assert_eq!(r.is_err(), on);
                        if !on {
                            model[l].push_back(n);
                        }
                    }
                    Op::Pop(l) => {
                        prop_assert_eq!(lists[l].pop_front(&mut s), model[l].pop_front());
                    }
                    Op::Remove(n) => {
                        let at = model.iter().position(|q| q.contains(&n));
                        let removed = match at {
                            Some(l) => {
                                model[l].retain(|&x| x != n);
                                lists[l].remove(&mut s, n)
                            }
                            None => lists[0].remove(&mut s, n),
                        };
                        prop_assert_eq!(removed, at.is_some());
                    }
                }
                for l in 0..LISTS {
                    let got: Vec<usize> = lists[l].iter(&mut s).collect();
                    let want: Vec<usize> = model[l].iter().copied().collect();
                    prop_assert_eq!(&got, &want);
                    prop_assert_eq!(lists[l].len(), want.len());
                    prop_assert_eq!(lists[l].front(), want.first().copied());
                }
                for n in 0..NODES {
                    let on = model.iter().any(|q| q.contains(&n));
                    prop_assert_eq!(s.0[n].is_linked(), on);
                }
            }
        }
    }
}
