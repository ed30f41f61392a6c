//! Wait queues keyed by an address, for the futex-like `wait` / `wake` system calls.
//!
//! A thread that waits on a key (an (address space, address) pair) joins the back of its
//! key's FIFO; [`WaitQueues::wake_one`] releases the oldest waiter first. The queues are
//! hashed, as Linux's futex table is: a fixed array of [`BUCKETS`] rings of (key, thread),
//! the key's hash choosing the ring. Waiting and waking allocate nothing once a ring has
//! grown to the most waiters it has held at once, so the `wait`/`wake` path never enters
//! the heap allocator; and memory is bounded by the number of waiting threads, never by
//! the number of addresses user space chooses to wait on.
//!
//! A bucket's ring is allocated on the first wait that lands in it and kept. Which buckets
//! see a wait depends on timing (a `wait` whose word already changed never queues) and on
//! task ids, so, left to grow on first use, the heap held by the queues would differ
//! between two runs of the same work. [`WaitQueues::reserve_each`] gives every bucket its
//! first ring up front (the kernel does, at boot, for [`BOOT_ROOM`] waiters each): a bucket
//! then grows only past that many waiters at once.
//!
//! Costs: [`WaitQueues::enqueue`] O(1) (amortised); [`WaitQueues::wake_one`] and
//! [`WaitQueues::remove`] O(waiters in the key's bucket) at worst, O(1) when the oldest
//! waiter of the bucket is the one taken; [`WaitQueues::total`] O(1).
//!
//! # Invariants
//! - Within a bucket, entries are in the order their threads started waiting, so each
//!   key's waiters leave oldest first.
//! - `total` equals the sum of the bucket lengths.
//! - A thread waits in at most one queue, at most once. The structure does not check this
//!   (it would cost O(n) per enqueue): callers guarantee it through their thread state
//!   (a thread enqueues itself only on its transition to "waiting", and leaves through
//!   `wake_one` or `remove`).

use crate::ring::Ring;
use core::hash::{Hash, Hasher};

/// Number of hash buckets.
pub const BUCKETS: usize = 64;

/// A multiply-rotate hasher (the idea of rustc's FxHash): fast, and good enough to spread
/// word-aligned addresses over the buckets.
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }
}

/// Which bucket `key` lives in.
fn bucket_of<K: Hash>(key: &K) -> usize {
    let mut h = WordHasher(0);
    key.hash(&mut h);
    // The top bits of a multiplicative hash are the well-mixed ones.
    (h.finish() >> (64 - BUCKETS.trailing_zeros())) as usize
}

const _: () = assert!(BUCKETS.is_power_of_two());

/// Waiters every bucket has room for from boot ([`WaitQueues::reserve_each`]): a ring's
/// smallest size, so 64 rings of 4 (key, thread) entries (6 KiB for the kernel's keys).
pub const BOOT_ROOM: usize = 4;

/// Per-key FIFOs of waiting threads (`T`, a thread id). See the module documentation.
#[derive(Debug)]
pub struct WaitQueues<K: Copy + Eq + Hash + Default, T: Copy + PartialEq + Default> {
    /// (key, thread) in waiting order, per bucket.
    buckets: [Ring<(K, T)>; BUCKETS],
    /// Total number of waiters over all keys.
    total: usize,
}

impl<K: Copy + Eq + Hash + Default, T: Copy + PartialEq + Default> Default for WaitQueues<K, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Copy + Eq + Hash + Default, T: Copy + PartialEq + Default> WaitQueues<K, T> {
    /// No waiters.
    pub const fn new() -> Self {
        WaitQueues {
            buckets: [const { Ring::new() }; BUCKETS],
            total: 0,
        }
    }

    /// Gives every bucket room for `n` waiters at once, so that waits never allocate until
    /// more than `n` wait in one bucket at once; [`baton_abi::Error::NoMemory`] when the
    /// heap has no room (the buckets grown so far keep their room).
    pub fn reserve_each(&mut self, n: usize) -> Result<(), baton_abi::Error> {
        self.buckets.iter_mut().try_for_each(|b| b.reserve(n))
    }

    /// Entries the buckets have room for, in all (what the queues keep of the heap, in
    /// units of one (key, thread) entry).
    pub fn capacity(&self) -> usize {
        self.buckets.iter().map(Ring::capacity).sum()
    }

    fn bucket(&mut self, key: &K) -> Option<&mut Ring<(K, T)>> {
        self.buckets.get_mut(bucket_of(key))
    }

    /// Makes `t` wait on `key`, behind the threads already waiting there. The caller
    /// guarantees `t` is not already waiting anywhere (see the module invariants).
    pub fn enqueue(&mut self, key: K, t: T) {
        let _ = self.try_enqueue(key, t);
    }

    /// [`WaitQueues::enqueue`], or [`baton_abi::Error::NoMemory`] (nothing changed) when
    /// the bucket must grow and the heap has no room.
    pub fn try_enqueue(&mut self, key: K, t: T) -> Result<(), baton_abi::Error> {
        if let Some(b) = self.bucket(&key) {
            b.try_push_back((key, t))
                .map_err(|_| baton_abi::Error::NoMemory)?;
            self.total += 1;
        }
        Ok(())
    }

    /// Releases the oldest thread waiting on `key`, if any.
    pub fn wake_one(&mut self, key: K) -> Option<T> {
        let b = self.bucket(&key)?;
        // Most often the bucket's oldest waiter is the key's.
        if b.front().is_some_and(|(k, _)| k == key) {
            let (_, t) = b.pop_front()?;
            self.total -= 1;
            return Some(t);
        }
        let i = b.iter().position(|(k, _)| k == key)?;
        let (_, t) = b.remove(i)?;
        self.total -= 1;
        Some(t)
    }

    /// Takes `t` out of `key`'s queue (its wait timed out, or it was killed). Returns
    /// whether it was there.
    pub fn remove(&mut self, key: K, t: T) -> bool {
        let Some(b) = self.bucket(&key) else {
            return false;
        };
        let Some(i) = b.position((key, t)) else {
            return false;
        };
        let removed = b.remove(i).is_some();
        if removed {
            self.total -= 1;
        }
        removed
    }

    /// Number of threads waiting on `key`.
    pub fn waiters(&self, key: K) -> usize {
        self.buckets
            .get(bucket_of(&key))
            .map_or(0, |b| b.iter().filter(|(k, _)| *k == key).count())
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
    use std::vec::Vec;

    /// Wakes up to `n` waiters of `key`, oldest first.
    fn wake<K: Copy + Eq + Hash + Default, T: Copy + PartialEq + Default>(
        w: &mut WaitQueues<K, T>,
        key: K,
        n: usize,
    ) -> Vec<T> {
        let mut out = Vec::new();
        while out.len() < n {
            match w.wake_one(key) {
                Some(t) => out.push(t),
                None => break,
            }
        }
        out
    }

    /// Checks the module invariants.
    fn check<K: Copy + Eq + Hash + Default, T: Copy + PartialEq + Default>(w: &WaitQueues<K, T>) {
        let sum: usize = w.buckets.iter().map(Ring::len).sum();
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
        assert_eq!(wake(&mut w, 0x1000, 2), [1, 2]);
        assert_eq!(w.waiters(0x1000), 3);
        assert_eq!(w.total(), 4);
        check(&w);
        assert_eq!(wake(&mut w, 0x1000, 1), [3]);
        assert_eq!(wake(&mut w, 0x1000, usize::MAX), [4, 5]);
        assert_eq!(w.waiters(0x1000), 0);
        assert_eq!(wake(&mut w, 0x1000, 3), []);
        // The other key was untouched.
        assert_eq!(wake(&mut w, 0x2000, 10), [9]);
        assert!(w.is_empty());
        check(&w);
    }

    #[test]
    fn keys_sharing_a_bucket_stay_apart() {
        let mut w = WaitQueues::new();
        // Find two keys in one bucket.
        let a = 8u64;
        let b = (16..u64::MAX)
            .step_by(8)
            .find(|k| bucket_of(k) == bucket_of(&a))
            .unwrap();
        w.enqueue(a, 1u32);
        w.enqueue(b, 2);
        w.enqueue(a, 3);
        assert_eq!(w.waiters(a), 2);
        assert_eq!(w.wake_one(b), Some(2));
        assert_eq!(w.wake_one(b), None);
        assert_eq!(wake(&mut w, a, 5), [1, 3]);
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
        assert_eq!(
            wake(&mut w, 1, 5),
            [10, 12],
            "order kept around the removal"
        );
        w.enqueue(4, 40);
        assert!(w.remove(4, 40));
        assert!(w.is_empty());
        check(&w);
    }

    #[test]
    fn churn_over_new_addresses_keeps_memory_bounded() {
        let mut w = WaitQueues::new();
        w.enqueue(u64::MAX, 0u32); // One long-term waiter.
        for addr in 0..10_000u64 {
            w.enqueue(addr * 8, 1);
            w.enqueue(addr * 8, 2);
            if addr % 2 == 0 {
                assert_eq!(wake(&mut w, addr * 8, 2), [1, 2]);
            } else {
                assert!(w.remove(addr * 8, 2));
                assert_eq!(wake(&mut w, addr * 8, 1), [1]);
            }
            assert_eq!(w.total(), 1);
        }
        // No bucket ever held more than three entries at once.
        assert!(w.buckets.iter().all(|b| b.capacity() <= 4));
        check(&w);
    }

    #[test]
    fn a_reserved_bucket_grows_only_past_its_room() {
        // Whichever buckets see waits, and in whatever order, the room stays what
        // `reserve_each` made while no bucket holds more than `BOOT_ROOM` waiters: the heap
        // the queues hold does not depend on which waits happened to queue.
        let mut w = WaitQueues::new();
        w.reserve_each(BOOT_ROOM).unwrap();
        let room = w.capacity();
        assert_eq!(room, BUCKETS * BOOT_ROOM);
        for round in 0..50u64 {
            // Up to BOOT_ROOM waiters on keys of one task, then on keys of a new task id
            // each round (hashing to other buckets).
            for t in 0..BOOT_ROOM as u32 {
                w.enqueue((round, 0x1000 + 8 * round), t);
            }
            w.enqueue((round + 1000, 0x2000), 9);
            assert_eq!(w.capacity(), room, "round {round}");
            assert_eq!(
                wake(&mut w, (round, 0x1000 + 8 * round), 10).len(),
                BOOT_ROOM
            );
            assert_eq!(wake(&mut w, (round + 1000, 0x2000), 10), [9]);
            assert!(w.is_empty());
        }
        assert_eq!(w.capacity(), room);
        // Without the reservation, the first wait in a bucket grows it.
        let mut fresh: WaitQueues<u64, u32> = WaitQueues::new();
        assert_eq!(fresh.capacity(), 0);
        fresh.enqueue(8, 1);
        assert_eq!(fresh.capacity(), BOOT_ROOM);
        // Past the room, a bucket still grows (to the most waiters it held at once).
        let mut busy: WaitQueues<u64, u32> = WaitQueues::new();
        busy.reserve_each(BOOT_ROOM).unwrap();
        for t in 0..=BOOT_ROOM as u32 {
            busy.enqueue(8, t);
        }
        assert_eq!(busy.capacity(), room + BOOT_ROOM);
        assert_eq!(wake(&mut busy, 8, 10).len(), BOOT_ROOM + 1);
        check(&busy);
    }

    #[test]
    fn many_waiters() {
        let mut w = WaitQueues::new();
        for t in 0..10_000u32 {
            w.enqueue(u64::from(t % 10), t);
        }
        assert_eq!(w.total(), 10_000);
        assert_eq!(w.waiters(3), 1000);
        let woken = wake(&mut w, 3, 600);
        assert_eq!(woken.len(), 600);
        assert!(woken.windows(2).all(|p| p[0] < p[1]));
        assert!(woken.iter().all(|t| t % 10 == 3));
        assert_eq!(w.total(), 9_400);
        check(&w);
    }

    #[test]
    fn addresses_spread_over_buckets() {
        let used: std::collections::BTreeSet<usize> = (0..1024u64)
            .map(|a| bucket_of(&(1u64, 0x40_0000 + a * 4)))
            .collect();
        assert!(used.len() > BUCKETS / 2, "only {} buckets used", used.len());
    }
}
