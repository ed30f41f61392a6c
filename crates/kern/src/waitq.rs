//! Wait queues keyed by an address, for the futex-like `wait` / `wake` system calls.
//!
//! A thread that waits on a key (typically a user address, or an (address space, address)
//! pair) joins the back of that key's FIFO; [`WaitQueues::wake`] releases the oldest
//! waiters first. Only keys with at least one waiter have a queue: an address that nobody
//! waits on any more costs nothing, so user space cannot grow the kernel's memory by
//! waiting on and waking ever new addresses. Finding a key's queue is O(log number of keys);
//! waking k threads costs O(k) more; [`WaitQueues::total`] is O(1).
//!
//! # Invariants
//! - No queue in the map is empty: a key is removed as soon as its last waiter leaves
//!   ([`WaitQueues::wake`] or [`WaitQueues::remove`]).
//! - `total` equals the sum of the queue lengths.
//! - A thread waits in at most one queue, at most once. The structure does not check this
//!   (it would cost O(n) per enqueue): callers guarantee it through their thread state
//!   (a thread enqueues itself only on its transition to "waiting", and leaves through
//!   `wake` or `remove`).
//! - Nothing here allocates in proportion to a number chosen by the caller: `wake` with a
//!   huge `n` allocates only for the waiters it actually wakes.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

/// Per-key FIFOs of waiting threads (`T`, a thread id). See the module documentation.
#[derive(Debug)]
pub struct WaitQueues<K: Ord + Copy, T: Copy + PartialEq> {
    /// Non-empty queues only, oldest waiter at the front.
    queues: BTreeMap<K, VecDeque<T>>,
    /// Total number of waiters over all keys.
    total: usize,
}

impl<K: Ord + Copy, T: Copy + PartialEq> Default for WaitQueues<K, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + Copy, T: Copy + PartialEq> WaitQueues<K, T> {
    /// No waiters.
    pub const fn new() -> Self {
        WaitQueues {
            queues: BTreeMap::new(),
            total: 0,
        }
    }

    /// Makes `t` wait on `key`, behind the threads already waiting there. The caller
    /// guarantees `t` is not already waiting anywhere (see the module invariants).
    pub fn enqueue(&mut self, key: K, t: T) {
        self.queues.entry(key).or_default().push_back(t);
        self.total += 1;
    }

    /// Releases up to `n` threads waiting on `key`, oldest first, and returns them in that
    /// order. `n == 0` wakes none; an `n` larger than the number of waiters wakes them all.
    pub fn wake(&mut self, key: K, n: usize) -> Vec<T> {
        if n == 0 {
            return Vec::new();
        }
        let Some(q) = self.queues.get_mut(&key) else {
            return Vec::new();
        };
        let k = n.min(q.len());
        let woken: Vec<T> = q.drain(..k).collect();
        if q.is_empty() {
            self.queues.remove(&key);
        }
        self.total -= woken.len();
        woken
    }

    /// Takes `t` out of `key`'s queue (its wait timed out, or it was killed). Returns
    /// whether it was there. Costs O(number of waiters on `key`).
    pub fn remove(&mut self, key: K, t: T) -> bool {
        let Some(q) = self.queues.get_mut(&key) else {
            return false;
        };
        let Some(i) = q.iter().position(|&x| x == t) else {
            return false;
        };
        let removed = q.remove(i).is_some();
        if q.is_empty() {
            self.queues.remove(&key);
        }
        if removed {
            self.total -= 1;
        }
        removed
    }

    /// Number of threads waiting on `key`.
    pub fn waiters(&self, key: K) -> usize {
        self.queues.get(&key).map_or(0, VecDeque::len)
    }

    /// Number of threads waiting on any key.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Whether no thread waits on any key.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks the module invariants.
    fn check<K: Ord + Copy, T: Copy + PartialEq>(w: &WaitQueues<K, T>) {
        assert!(w.queues.values().all(|q| !q.is_empty()), "empty queue kept");
        let sum: usize = w.queues.values().map(VecDeque::len).sum();
        assert_eq!(w.total(), sum);
        assert_eq!(w.is_empty(), sum == 0);
    }

    #[test]
    fn wake_oldest_first_at_most_n() {
        let mut w = WaitQueues::new();
        for t in 1..=5u32 {
            w.enqueue(0x1000u64, t);
        }
        w.enqueue(0x2000, 9);
        check(&w);
        assert_eq!(w.waiters(0x1000), 5);
        assert_eq!(w.waiters(0x2000), 1);
        assert_eq!(w.waiters(0x3000), 0);
        assert_eq!(w.total(), 6);
        assert_eq!(w.wake(0x1000, 2), [1, 2]);
        assert_eq!(w.waiters(0x1000), 3);
        assert_eq!(w.total(), 4);
        check(&w);
        assert_eq!(w.wake(0x1000, 1), [3]);
        // More than are waiting: all of them, and the key's queue goes away.
        assert_eq!(w.wake(0x1000, usize::MAX), [4, 5]);
        assert_eq!(w.waiters(0x1000), 0);
        assert!(!w.queues.contains_key(&0x1000));
        assert_eq!(w.wake(0x1000, 3), []);
        // The other key was untouched.
        assert_eq!(w.wake(0x2000, 10), [9]);
        assert!(w.is_empty());
        assert!(w.queues.is_empty());
        check(&w);
    }

    #[test]
    fn wake_zero_wakes_none() {
        let mut w = WaitQueues::new();
        w.enqueue(1u64, 7u32);
        assert_eq!(w.wake(1, 0), []);
        assert_eq!(w.waiters(1), 1);
        // Waking nothing on an unknown key creates no queue.
        assert_eq!(w.wake(2, 0), []);
        assert_eq!(w.wake(2, 5), []);
        assert_eq!(w.queues.len(), 1);
        check(&w);
    }

    #[test]
    fn remove_for_timeouts_and_kills() {
        let mut w = WaitQueues::new();
        w.enqueue(1u64, 10u32);
        w.enqueue(1, 11);
        w.enqueue(1, 12);
        assert!(w.remove(1, 11));
        assert!(!w.remove(1, 11), "already gone");
        assert!(!w.remove(2, 10), "wrong key");
        assert!(!w.remove(3, 10), "unknown key");
        assert_eq!(w.total(), 2);
        check(&w);
        assert_eq!(w.wake(1, 5), [10, 12], "order kept around the removal");
        w.enqueue(4, 40);
        assert!(w.remove(4, 40));
        assert!(w.queues.is_empty(), "last waiter removed: key dropped");
        assert!(w.is_empty());
        check(&w);
    }

    #[test]
    fn churn_does_not_grow_the_map() {
        let mut w = WaitQueues::new();
        w.enqueue(u64::MAX, 0u32); // One long-term waiter.
        for addr in 0..10_000u64 {
            w.enqueue(addr * 8, 1);
            w.enqueue(addr * 8, 2);
            if addr % 2 == 0 {
                assert_eq!(w.wake(addr * 8, 2), [1, 2]);
            } else {
                assert!(w.remove(addr * 8, 2));
                assert_eq!(w.wake(addr * 8, 1), [1]);
            }
            assert_eq!(w.queues.len(), 1);
            assert_eq!(w.total(), 1);
        }
        check(&w);
    }

    #[test]
    fn many_waiters() {
        let mut w = WaitQueues::new();
        for t in 0..10_000u32 {
            w.enqueue(t % 10, t);
        }
        assert_eq!(w.total(), 10_000);
        assert_eq!(w.waiters(3), 1000);
        let woken = w.wake(3, 600);
        assert_eq!(woken.len(), 600);
        assert!(woken.windows(2).all(|p| p[0] < p[1]));
        assert!(woken.iter().all(|t| t % 10 == 3));
        assert_eq!(w.total(), 9_400);
        check(&w);
    }
}
