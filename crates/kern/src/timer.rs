//! Timer queue: what happens when, for sleeps and timeouts.
//!
//! A [`TimerQueue`] holds entries (for example thread ids to wake) under deadlines in
//! nanoseconds of the kernel's monotonic clock. Entries live in a `BTreeMap` keyed by
//! `(deadline, sequence number)`: the earliest entry is the map's first, entries with equal
//! deadlines come out in insertion order, and the key handed back by
//! [`TimerQueue::insert`] cancels exactly that entry. Insertion, cancellation and taking the
//! earliest entry are O(log n); [`TimerQueue::next_deadline`] (for programming the one-shot
//! timer) is O(log n) too, independent of what is queued behind it.
//!
//! # Invariants
//! - Every entry's sequence number is unique: `next_seq` only grows, so a [`TimerKey`] names
//!   at most one entry ever. Cancelling a key whose entry was already popped or cancelled
//!   finds nothing and returns `None`; it can never remove a later entry. (The counter would
//!   need 2^64 insertions to wrap: over 500 years at one per nanosecond.)
//! - Entries are ordered by deadline, then by insertion.

use alloc::collections::BTreeMap;

/// Names one entry of a [`TimerQueue`], to cancel it. Returned by [`TimerQueue::insert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerKey {
    deadline: u64,
    seq: u64,
}

impl TimerKey {
    /// The deadline the entry was inserted with, in nanoseconds.
    pub const fn deadline(self) -> u64 {
        self.deadline
    }
}

/// Entries ordered by deadline (u64 nanoseconds). See the module documentation.
#[derive(Debug)]
pub struct TimerQueue<T> {
    /// The entries, keyed by (deadline, sequence number).
    entries: BTreeMap<(u64, u64), T>,
    /// The sequence number of the next insertion.
    next_seq: u64,
}

impl<T> Default for TimerQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> TimerQueue<T> {
    /// An empty queue.
    pub const fn new() -> Self {
        TimerQueue {
            entries: BTreeMap::new(),
            next_seq: 0,
        }
    }

    /// Adds `t` to fire at `deadline` (after every entry already queued with the same
    /// deadline). Returns the key that cancels it.
    pub fn insert(&mut self, deadline: u64, t: T) -> TimerKey {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.entries.insert((deadline, seq), t);
        TimerKey { deadline, seq }
    }

    /// Removes the entry named by `key` and returns it, or `None` if it is no longer queued
    /// (already popped or cancelled).
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        self.entries.remove(&(key.deadline, key.seq))
    }

    /// Takes the earliest entry whose deadline is at or before `now`, with its deadline;
    /// `None` if nothing has expired. Call it in a loop to take everything expired, in
    /// deadline order (insertion order for equal deadlines).
    pub fn pop_expired(&mut self, now: u64) -> Option<(u64, T)> {
        let entry = self.entries.first_entry()?;
        let (deadline, _) = *entry.key();
        if deadline > now {
            return None;
        }
        Some((deadline, entry.remove()))
    }

    /// The earliest deadline queued, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.entries
            .first_key_value()
            .map(|(&(deadline, _), _)| deadline)
    }

    /// Number of entries queued.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn deadline_order() {
        let mut q = TimerQueue::new();
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
        assert_eq!(q.pop_expired(u64::MAX), None);
        q.insert(300, 'c');
        q.insert(100, 'a');
        q.insert(200, 'b');
        assert_eq!(q.len(), 3);
        assert_eq!(q.next_deadline(), Some(100));
        assert_eq!(q.pop_expired(99), None, "nothing expired yet");
        assert_eq!(
            q.pop_expired(100),
            Some((100, 'a')),
            "deadline == now expires"
        );
        assert_eq!(q.pop_expired(250), Some((200, 'b')));
        assert_eq!(q.pop_expired(250), None);
        assert_eq!(q.next_deadline(), Some(300));
        assert_eq!(q.pop_expired(1000), Some((300, 'c')));
        assert_eq!(q.pop_expired(1000), None);
        assert!(q.is_empty());
    }

    #[test]
    fn ties_in_insertion_order() {
        let mut q = TimerQueue::new();
        for t in 0..5u32 {
            q.insert(50, t);
        }
        q.insert(10, 99);
        let got: Vec<_> = core::iter::from_fn(|| q.pop_expired(50)).collect();
        assert_eq!(got, [(10, 99), (50, 0), (50, 1), (50, 2), (50, 3), (50, 4)]);
    }

    #[test]
    fn cancel() {
        let mut q = TimerQueue::new();
        let a = q.insert(10, 'a');
        let b = q.insert(10, 'b');
        let c = q.insert(20, 'c');
        assert_eq!(a.deadline(), 10);
        assert_ne!(a, b);
        assert_eq!(q.cancel(b), Some('b'));
        assert_eq!(q.cancel(b), None, "already cancelled");
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop_expired(15), Some((10, 'a')));
        assert_eq!(q.cancel(a), None, "already popped");
        // A stale key never hits a later entry with the same deadline.
        let d = q.insert(10, 'd');
        assert_ne!(d, a);
        assert_eq!(q.cancel(a), None);
        assert_eq!(q.len(), 2);
        assert_eq!(q.cancel(c), Some('c'));
        assert_eq!(q.next_deadline(), Some(10));
        assert_eq!(q.cancel(d), Some('d'));
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn extreme_deadlines() {
        let mut q = TimerQueue::new();
        q.insert(u64::MAX, 2u8);
        q.insert(0, 1);
        assert_eq!(q.pop_expired(0), Some((0, 1)));
        assert_eq!(q.pop_expired(u64::MAX - 1), None);
        assert_eq!(q.pop_expired(u64::MAX), Some((u64::MAX, 2)));
    }

    #[test]
    fn many_entries() {
        const N: u64 = 10_000;
        let mut q = TimerQueue::new();
        // Deadlines in a scrambled order with many ties: (i * 7919) % 1000.
        let keys: Vec<_> = (0..N).map(|i| q.insert((i * 7919) % 1000, i)).collect();
        assert_eq!(q.len(), N as usize);
        // Cancel every third.
        for k in keys.iter().step_by(3) {
            assert!(q.cancel(*k).is_some());
        }
        let mut last: Option<(u64, u64)> = None;
        let mut n = 0;
        while let Some((d, i)) = q.pop_expired(u64::MAX) {
            assert_eq!(d, (i * 7919) % 1000);
            assert_ne!(i % 3, 0, "cancelled entry fired");
            if let Some((ld, li)) = last {
                assert!(d > ld || (d == ld && i > li));
            }
            last = Some((d, i));
            n += 1;
        }
        assert_eq!(n, N - N.div_ceil(3));
        assert!(q.is_empty());
        for k in keys {
            assert_eq!(q.cancel(k), None);
        }
    }
}
