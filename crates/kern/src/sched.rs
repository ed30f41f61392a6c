//! Run queues: which ready thread runs next.
//!
//! A [`RunQueue`] is a fixed-priority queue with [`LEVELS`] levels (0 lowest, 63 highest):
//! one FIFO per level plus a `u64` bitmap whose bit `i` says level `i` is non-empty. The
//! next thread to run is the front of the highest non-empty level, found with one
//! `leading_zeros`; within a level the policy is round robin (a thread whose quantum ends
//! or that yields goes to the back of its level with [`RunQueue::push`], a preempted thread
//! that should resume first goes to the front with [`RunQueue::push_front`]).
//!
//! Every operation the scheduler performs per switch ([`RunQueue::push`],
//! [`RunQueue::push_front`], [`RunQueue::pop`], [`RunQueue::peek_priority`],
//! [`RunQueue::len`]) is O(1) (amortised, for the ring growth), independent of the
//! number of threads. Only [`RunQueue::remove`], used for cancellation (exit, kill), costs
//! O(length of one level).
//!
//! # Invariants
//! - Bit `i` of the bitmap is set exactly when level `i` is non-empty.
//! - The stored length equals the sum of the lengths of the levels.
//! - A thread is in the queue at most once. The queue does **not** check this (a check
//!   would cost O(n) per push): callers guarantee it through their thread state, queueing a
//!   thread only on its transition to "ready" and removing or popping it before it can
//!   become ready again. A duplicate would simply run twice per round; the queue's own
//!   state stays consistent.
//! - Priorities above 63 are clamped to 63 on the way in, so every level index is in
//!   bounds by construction.

use crate::ring::Ring;

/// Number of priority levels: priorities `0..=63`, one bit each in a `u64` bitmap.
pub const LEVELS: usize = 64;

// The bitmap is a `u64`: one bit per level.
const _: () = assert!(LEVELS == u64::BITS as usize);

/// The highest priority; larger values passed in are clamped to it.
const MAX_PRIO: u8 = (LEVELS - 1) as u8;

/// The level index of `prio`, clamped to the highest level.
fn level(prio: u8) -> usize {
    usize::from(prio.min(MAX_PRIO))
}

/// A priority run queue of ready threads, identified by `T` (a thread id). See the module
/// documentation.
#[derive(Debug)]
pub struct RunQueue<T> {
    /// Bit `i` set: `levels[i]` is non-empty.
    bitmap: u64,
    /// One FIFO per priority level, index = priority.
    levels: [Ring<T>; LEVELS],
    /// Total number of queued threads.
    len: usize,
}

impl<T: Copy + Default + PartialEq> Default for RunQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default + PartialEq> RunQueue<T> {
    /// An empty queue.
    pub const fn new() -> Self {
        RunQueue {
            bitmap: 0,
            levels: [const { Ring::new() }; LEVELS],
            len: 0,
        }
    }

    /// Makes `t` ready at priority `prio`, at the back of its level (round robin). A `prio`
    /// above 63 is clamped to 63. The caller guarantees `t` is not already queued (see the
    /// module invariants).
    #[inline]
    pub fn push(&mut self, t: T, prio: u8) {
        let l = level(prio);
        self.levels[l].push_back(t);
        self.bitmap |= 1 << l;
        self.len += 1;
    }

    /// Makes `t` ready at priority `prio`, at the front of its level: it runs before the
    /// other threads of that level (for a preempted thread resuming its quantum). A `prio`
    /// above 63 is clamped to 63. The caller guarantees `t` is not already queued.
    pub fn push_front(&mut self, t: T, prio: u8) {
        let l = level(prio);
        self.levels[l].push_front(t);
        self.bitmap |= 1 << l;
        self.len += 1;
    }

    /// Makes room at priority `prio` for `n` ready threads, so that pushing up to that many
    /// there never allocates; `Err` (nothing changed) when the heap has no room.
    pub fn reserve(&mut self, prio: u8, n: usize) -> Result<(), baton_abi::Error> {
        self.levels[level(prio)].reserve(n)
    }

    /// Takes the next thread to run, the front of the highest non-empty level, with its
    /// (clamped) priority.
    #[inline]
    pub fn pop(&mut self) -> Option<(T, u8)> {
        let prio = self.peek_priority()?;
        let l = usize::from(prio);
        let q = &mut self.levels[l];
        let t = q.pop_front();
        if q.is_empty() {
            self.bitmap &= !(1 << l);
        }
        let t = t?;
        self.len -= 1;
        Some((t, prio))
    }

    /// A yield by `t`, running at priority `prio`: when a thread of at least that priority
    /// is ready, takes it (as [`RunQueue::pop`]) and queues `t` at the back of its level in
    /// one step, returning the taken thread and its priority; otherwise changes nothing and
    /// returns `None` (the yielding thread goes on).
    #[inline]
    pub fn exchange(&mut self, t: T, prio: u8) -> Option<(T, u8)> {
        let top = self.peek_priority()?;
        let l = level(prio);
        if usize::from(top) < l {
            return None;
        }
        let q = &mut self.levels[usize::from(top)];
        let next = q.pop_front()?;
        if usize::from(top) == l {
            // Same level: a rotation, the bitmap and the length stay as they are.
            q.push_back(t);
        } else {
            if q.is_empty() {
                self.bitmap &= !(1 << top);
            }
            self.levels[l].push_back(t);
            self.bitmap |= 1 << l;
        }
        Some((next, top))
    }

    /// The highest priority at which a thread is ready, if any: what a newly woken thread
    /// must beat to preempt.
    #[inline]
    pub fn peek_priority(&self) -> Option<u8> {
        if self.bitmap == 0 {
            return None;
        }
        // 63 - leading_zeros is in 0..=63 for a non-zero u64: the cast cannot truncate.
        Some((u64::BITS - 1 - self.bitmap.leading_zeros()) as u8)
    }

    /// Removes `t` from level `prio` (clamped as in [`RunQueue::push`]) when it exits or is
    /// killed. Returns whether it was there. Costs O(length of that level).
    pub fn remove(&mut self, t: T, prio: u8) -> bool {
        let l = level(prio);
        let q = &mut self.levels[l];
        let Some(i) = q.position(t) else {
            return false;
        };
        let removed = q.remove(i).is_some();
        if q.is_empty() {
            self.bitmap &= !(1 << l);
        }
        if removed {
            self.len -= 1;
        }
        removed
    }

    /// Number of ready threads.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no thread is ready.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// Checks the module invariants from the outside-invisible state.
    fn check<T: Copy + Default + PartialEq>(q: &RunQueue<T>) {
        let mut total = 0;
        for (i, l) in q.levels.iter().enumerate() {
            assert_eq!(q.bitmap & (1 << i) != 0, !l.is_empty(), "bitmap bit {i}");
            total += l.len();
        }
        assert_eq!(q.len(), total);
        assert_eq!(q.is_empty(), total == 0);
    }

    #[test]
    fn exchange_is_pop_then_push() {
        // Same level: rotation.
        let mut q = RunQueue::new();
        q.push(1u32, 10);
        q.push(2, 10);
        assert_eq!(q.exchange(9, 10), Some((1, 10)));
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some((2, 10)));
        assert_eq!(q.pop(), Some((9, 10)));
        assert!(q.is_empty());
        // Higher level ready: taken, the yielder queued at its own level.
        q.push(5, 20);
        assert_eq!(q.exchange(9, 10), Some((5, 20)));
        assert_eq!(q.peek_priority(), Some(10));
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(), Some((9, 10)));
        // Only lower levels ready, or none: nothing changes.
        q.push(3, 5);
        assert_eq!(q.exchange(9, 10), None);
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(), Some((3, 5)));
        assert_eq!(q.exchange(9, 10), None);
        assert!(q.is_empty());
    }

    #[test]
    fn priority_order() {
        let mut q = RunQueue::new();
        q.push(1u32, 5);
        q.push(2, 40);
        q.push(3, 0);
        q.push(4, 63);
        q.push(5, 40);
        check(&q);
        assert_eq!(q.peek_priority(), Some(63));
        assert_eq!(q.pop(), Some((4, 63)));
        assert_eq!(q.peek_priority(), Some(40));
        assert_eq!(q.pop(), Some((2, 40)));
        assert_eq!(q.pop(), Some((5, 40)));
        assert_eq!(q.pop(), Some((1, 5)));
        assert_eq!(q.pop(), Some((3, 0)));
        assert_eq!(q.pop(), None);
        assert_eq!(q.peek_priority(), None);
        check(&q);
    }

    #[test]
    fn round_robin_within_a_level() {
        let mut q = RunQueue::new();
        for t in 1..=3u32 {
            q.push(t, 10);
        }
        // The running thread goes to the back of its level when its quantum ends.
        let (first, prio) = q.pop().unwrap();
        assert_eq!((first, prio), (1, 10));
        q.push(first, prio);
        assert_eq!(q.pop(), Some((2, 10)));
        assert_eq!(q.pop(), Some((3, 10)));
        assert_eq!(q.pop(), Some((1, 10)));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }

    #[test]
    fn push_front_runs_first_in_its_level_only() {
        let mut q = RunQueue::new();
        q.push(1u32, 10);
        q.push(2, 10);
        q.push(9, 20);
        q.push_front(3, 10);
        check(&q);
        assert_eq!(q.pop(), Some((9, 20)));
        assert_eq!(q.pop(), Some((3, 10)));
        assert_eq!(q.pop(), Some((1, 10)));
        assert_eq!(q.pop(), Some((2, 10)));
        // push_front also works on an empty level and sets its bit.
        q.push_front(4, 7);
        check(&q);
        assert_eq!(q.peek_priority(), Some(7));
        assert_eq!(q.pop(), Some((4, 7)));
    }

    #[test]
    fn bitmap_after_pops_and_removes() {
        let mut q = RunQueue::new();
        q.push(1u32, 3);
        q.push(2, 3);
        q.push(3, 50);
        check(&q);
        assert_eq!(q.bitmap, (1 << 3) | (1 << 50));
        assert_eq!(q.pop(), Some((3, 50)));
        assert_eq!(q.bitmap, 1 << 3);
        check(&q);
        // Removing from the wrong level finds nothing and changes nothing.
        assert!(!q.remove(1, 4));
        assert_eq!(q.bitmap, 1 << 3);
        assert!(q.remove(1, 3));
        assert_eq!(q.bitmap, 1 << 3, "level 3 still holds thread 2");
        assert!(!q.remove(1, 3));
        assert!(q.remove(2, 3));
        assert_eq!(q.bitmap, 0);
        assert_eq!(q.len(), 0);
        assert_eq!(q.pop(), None);
        check(&q);
        // Removing from an empty level is harmless.
        assert!(!q.remove(2, 3));
        check(&q);
    }

    #[test]
    fn remove_keeps_fifo_order() {
        let mut q = RunQueue::new();
        for t in 1..=5u32 {
            q.push(t, 1);
        }
        assert!(q.remove(3, 1));
        let order: Vec<_> = core::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(1, 1), (2, 1), (4, 1), (5, 1)]);
    }

    #[test]
    fn priority_clamped_to_63() {
        let mut q = RunQueue::new();
        q.push(1u32, 63);
        q.push(2, 64);
        q.push(3, u8::MAX);
        q.push_front(4, 200);
        check(&q);
        assert_eq!(q.bitmap, 1 << 63);
        assert_eq!(q.peek_priority(), Some(63));
        // Removal clamps the same way.
        assert!(q.remove(3, 255));
        assert_eq!(q.pop(), Some((4, 63)));
        assert_eq!(q.pop(), Some((1, 63)));
        assert_eq!(q.pop(), Some((2, 63)));
        assert_eq!(q.pop(), None);
    }

    /// After `reserve(prio, n)`, `n` threads go in at that priority (clamped as for
    /// `push`) without the level growing.
    #[test]
    fn reserved_room_is_used_without_growing() {
        let mut q = RunQueue::new();
        q.reserve(10, 5).unwrap();
        q.reserve(200, 3).unwrap();
        let caps = (q.levels[10].capacity(), q.levels[63].capacity());
        assert!(caps.0 >= 5 && caps.1 >= 3, "{caps:?}");
        for t in 0..5u32 {
            q.push(t, 10);
        }
        for t in 5..8u32 {
            q.push_front(t, 63);
        }
        assert_eq!((q.levels[10].capacity(), q.levels[63].capacity()), caps);
        assert_eq!(q.len(), 8);
    }

    #[test]
    fn ten_thousand_threads() {
        const N: u32 = 10_000;
        let mut q = RunQueue::default();
        for t in 0..N {
            q.push(t, (t % 64) as u8);
        }
        assert_eq!(q.len(), N as usize);
        assert_eq!(q.bitmap, u64::MAX);
        check(&q);
        // Cancel every thread of level 17.
        for t in (17..N).step_by(64) {
            assert!(q.remove(t, 17));
        }
        assert_eq!(q.bitmap, !(1 << 17));
        check(&q);
        let mut last: Option<(u32, u8)> = None;
        let mut popped = 0usize;
        while let Some((t, p)) = q.pop() {
            assert_eq!(u32::from(p), t % 64);
            assert_ne!(p, 17);
            if let Some((lt, lp)) = last {
                // Non-increasing priority; FIFO (increasing ids) within a level.
                assert!(p < lp || (p == lp && t > lt));
            }
            last = Some((t, p));
            popped += 1;
        }
        let removed = (17..N).step_by(64).count();
        assert_eq!(popped, N as usize - removed);
        assert!(q.is_empty());
        assert_eq!(q.bitmap, 0);
        check(&q);
    }
}
