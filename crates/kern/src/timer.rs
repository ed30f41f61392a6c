//! Timer queue: what happens when, for sleeps and timeouts.
//!
//! A [`TimerQueue`] holds entries (for example thread ids to wake) under deadlines in
//! nanoseconds of the kernel's monotonic clock. It is a binary min-heap ordered by
//! `(deadline, sequence number)` over a table of entries: entries with equal deadlines come
//! out in insertion order, and the key handed back by [`TimerQueue::insert`] names its
//! entry's slot and sequence number, so it cancels exactly that entry (each entry knows its
//! place in the heap). Insertion, cancellation and taking the earliest entry are O(log n);
//! [`TimerQueue::next_deadline`] is O(1).
//!
//! Room is made ahead with [`TimerQueue::reserve`] (the kernel keeps room for one entry
//! per thread, made when the thread is created), so [`TimerQueue::insert`] never allocates
//! then: a sleep, a wait or a timeout on a path that cannot fail never meets an exhausted
//! heap.
//!
//! # Invariants
//! - Every entry's sequence number is unique: `next_seq` only grows, so a [`TimerKey`] names
//!   at most one entry ever. Cancelling a key whose entry was already popped or cancelled
//!   finds nothing and returns `None`; it can never remove a later entry. (The counter would
//!   need 2^64 insertions to wrap: over 500 years at one per nanosecond.)
//! - `heap` holds the slot of every live entry exactly once, in heap order of
//!   `(deadline, seq)`; a live slot's `pos` is its index in `heap`; free slots are chained
//!   from `free` and hold no entry.

use alloc::vec::Vec;

/// Names one entry of a [`TimerQueue`], to cancel it. Returned by [`TimerQueue::insert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerKey {
    deadline: u64,
    seq: u64,
    slot: u32,
}

impl TimerKey {
    /// The deadline the entry was inserted with, in nanoseconds.
    pub const fn deadline(self) -> u64 {
        self.deadline
    }
}

/// End of the free list.
const NIL: u32 = u32::MAX;

/// One slot of the entry table.
#[derive(Clone, Copy, Debug)]
struct Slot<T> {
    deadline: u64,
    seq: u64,
    /// The entry, `None` while the slot is free.
    value: Option<T>,
    /// Its index in `heap` while live; the next free slot while free.
    pos: u32,
}

/// Entries ordered by deadline (u64 nanoseconds). See the module documentation.
#[derive(Debug)]
pub struct TimerQueue<T> {
    slots: Vec<Slot<T>>,
    heap: Vec<u32>,
    free: u32,
    /// The sequence number of the next insertion.
    next_seq: u64,
}

impl<T: Copy> Default for TimerQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> TimerQueue<T> {
    /// An empty queue.
    pub const fn new() -> Self {
        TimerQueue {
            slots: Vec::new(),
            heap: Vec::new(),
            free: NIL,
            next_seq: 0,
        }
    }

    /// Makes room for `n` entries in all, so that inserting up to that many never
    /// allocates; [`baton_abi::Error::NoMemory`] (nothing changed that matters) when the
    /// heap has no room.
    pub fn reserve(&mut self, n: usize) -> Result<(), baton_abi::Error> {
        let more = n.saturating_sub(self.slots.len());
        self.slots
            .try_reserve(more)
            .and_then(|()| self.heap.try_reserve(n.saturating_sub(self.heap.len())))
            .map_err(|_| baton_abi::Error::NoMemory)
    }

    /// The ordering key of the entry in `slot`.
    fn key(&self, slot: u32) -> (u64, u64) {
        self.slots
            .get(slot as usize)
            .map_or((u64::MAX, u64::MAX), |s| (s.deadline, s.seq))
    }

    /// Puts `slot` at heap index `i` and records it there.
    fn place(&mut self, i: usize, slot: u32) {
        if let Some(h) = self.heap.get_mut(i) {
            *h = slot;
        }
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.pos = i as u32;
        }
    }

    /// Moves the entry at heap index `i` up while it is earlier than its parent.
    fn sift_up(&mut self, mut i: usize) {
        let slot = self.heap[i];
        let key = self.key(slot);
        while i > 0 {
            let parent = (i - 1) / 2;
            let p = self.heap[parent];
            if self.key(p) <= key {
                break;
            }
            self.place(i, p);
            i = parent;
        }
        self.place(i, slot);
    }

    /// Moves the entry at heap index `i` down while a child is earlier.
    fn sift_down(&mut self, mut i: usize) {
        let slot = self.heap[i];
        let key = self.key(slot);
        let n = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.key(self.heap[right]) < self.key(self.heap[left]) {
                right
            } else {
                left
            };
            let c = self.heap[child];
            if key <= self.key(c) {
                break;
            }
            self.place(i, c);
            i = child;
        }
        self.place(i, slot);
    }

    /// Adds `t` to fire at `deadline` (after every entry already queued with the same
    /// deadline). Returns the key that cancels it. Allocates only past the room made by
    /// [`TimerQueue::reserve`].
    pub fn insert(&mut self, deadline: u64, t: T) -> TimerKey {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let entry = Slot {
            deadline,
            seq,
            value: Some(t),
            pos: self.heap.len() as u32,
        };
        let slot = match self.slots.get_mut(self.free as usize) {
            Some(s) => {
                let slot = self.free;
                self.free = s.pos;
                *s = entry;
                slot
            }
            None => {
                self.slots.push(entry);
                (self.slots.len() - 1) as u32
            }
        };
        self.heap.push(slot);
        self.sift_up(self.heap.len() - 1);
        TimerKey {
            deadline,
            seq,
            slot,
        }
    }

    /// Takes the entry at heap index `i` out, freeing its slot.
    fn remove_at(&mut self, i: usize) -> Option<(u64, T)> {
        let slot = *self.heap.get(i)?;
        let last = self.heap.pop()?;
        if i < self.heap.len() {
            self.place(i, last);
            self.sift_down(i);
            let now = self.slots.get(last as usize).map_or(i, |s| s.pos as usize);
            self.sift_up(now);
        }
        let free = self.free;
        let s = self.slots.get_mut(slot as usize)?;
        let value = s.value.take()?;
        s.pos = free;
        self.free = slot;
        Some((s.deadline, value))
    }

    /// Removes the entry named by `key` and returns it, or `None` if it is no longer queued
    /// (already popped or cancelled).
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let s = self.slots.get(key.slot as usize)?;
        if s.value.is_none() || s.seq != key.seq {
            return None;
        }
        let pos = s.pos as usize;
        self.remove_at(pos).map(|(_, t)| t)
    }

    /// Takes the earliest entry whose deadline is at or before `now`, with its deadline;
    /// `None` if nothing has expired. Call it in a loop to take everything expired, in
    /// deadline order (insertion order for equal deadlines).
    pub fn pop_expired(&mut self, now: u64) -> Option<(u64, T)> {
        if self.next_deadline()? > now {
            return None;
        }
        self.remove_at(0)
    }

    /// [`TimerQueue::pop_expired`], with the key [`TimerQueue::insert`] handed out for the
    /// entry: whoever keeps a key per entry (the kernel keeps one per thread, in the
    /// thread) can tell the entry it holds from a stale one it lost track of.
    pub fn pop_expired_key(&mut self, now: u64) -> Option<(TimerKey, T)> {
        if self.next_deadline()? > now {
            return None;
        }
        let slot = *self.heap.first()?;
        let s = self.slots.get(slot as usize)?;
        let key = TimerKey {
            deadline: s.deadline,
            seq: s.seq,
            slot,
        };
        self.remove_at(0).map(|(_, t)| (key, t))
    }

    /// The earliest deadline queued, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        let slot = *self.heap.first()?;
        self.slots.get(slot as usize).map(|s| s.deadline)
    }

    /// Number of entries queued.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
        assert!(!q.is_empty());
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

    /// After `reserve(n)`, `n` entries go in without the tables growing.
    #[test]
    fn reserved_room_is_used_without_growing() {
        let mut q = TimerQueue::new();
        q.reserve(64).unwrap();
        let caps = (q.slots.capacity(), q.heap.capacity());
        let keys: Vec<_> = (0..64u64).map(|i| q.insert(1000 - i, i)).collect();
        for k in keys.iter().step_by(2) {
            q.cancel(*k).unwrap();
        }
        for i in 0..32u64 {
            q.insert(i, 100 + i);
        }
        assert_eq!((q.slots.capacity(), q.heap.capacity()), caps);
        assert_eq!(q.len(), 64);
    }

    /// `pop_expired_key` hands back the very key `insert` gave for the entry (so a holder
    /// of one key per entry recognises its own entry, and a stale one it lost track of),
    /// in the order `pop_expired` would, and the key then cancels nothing.
    #[test]
    fn popped_key_is_the_inserted_one() {
        let mut q = TimerQueue::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut held: Vec<(TimerKey, u32)> = Vec::new();
        for step in 0..5_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 3 {
                0 | 1 => held.push((q.insert((x >> 8) % 300, step), step)),
                _ => {
                    let now = (x >> 20) % 300;
                    let expect = held
                        .iter()
                        .filter(|(k, _)| k.deadline() <= now)
                        .min_by_key(|(k, _)| (k.deadline(), k.seq))
                        .copied();
                    let got = q.pop_expired_key(now);
                    assert_eq!(got, expect);
                    if let Some((k, _)) = got {
                        held.retain(|h| h.0 != k);
                        assert_eq!(q.cancel(k), None, "a popped key names nothing");
                    }
                }
            }
            assert_eq!(q.len(), held.len());
        }
        while q.pop_expired_key(u64::MAX).is_some() {}
        // A key replaced without being cancelled is told apart from the one held now.
        let stale = q.insert(0, 7u32);
        let now_held = q.insert(0, 7u32);
        assert_eq!(
            q.pop_expired_key(0).map(|(k, _)| k == now_held),
            Some(false)
        );
        assert_eq!(q.pop_expired_key(0), Some((now_held, 7)));
        assert_ne!(stale, now_held);
    }

    /// Random inserts, cancels and pops against a sorted model.
    #[test]
    fn matches_a_sorted_model() {
        let mut q = TimerQueue::new();
        let mut model: Vec<(u64, u64, u32)> = Vec::new(); // (deadline, seq, value)
        let mut keys: Vec<(TimerKey, u64)> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut seq = 0;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 4 {
                0 | 1 => {
                    let d = (x >> 8) % 500;
                    keys.push((q.insert(d, step), seq));
                    model.push((d, seq, step));
                    seq += 1;
                }
                2 if !keys.is_empty() => {
                    let (k, kseq) = keys.swap_remove((x >> 16) as usize % keys.len());
                    let want = model
                        .iter()
                        .position(|m| m.1 == kseq)
                        .map(|i| model.remove(i).2);
                    assert_eq!(q.cancel(k), want);
                }
                _ => {
                    let now = (x >> 24) % 500;
                    model.sort();
                    let want = model.first().filter(|m| m.0 <= now).copied();
                    let got = q.pop_expired(now);
                    assert_eq!(got, want.map(|m| (m.0, m.2)));
                    if want.is_some() {
                        model.remove(0);
                    }
                }
            }
            assert_eq!(q.len(), model.len());
            assert_eq!(q.next_deadline(), model.iter().map(|m| m.0).min());
        }
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
