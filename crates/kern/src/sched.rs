//! Run queues: which ready thread runs next.
//!
//! The foundation's policy is plain round robin: a FIFO of ready threads, the running one
//! going to the back when its quantum ends or it yields. The continuation-based scheduler
//! with priorities and per-CPU queues replaces it (see `docs/architecture.md`).
//!
//! # Invariants
//! - A thread is in the queue at most once: [`RunQueue::push`] refuses a duplicate, so a
//!   double wake-up can never make a thread run twice per round.

use alloc::collections::VecDeque;

/// A round-robin queue of ready threads, identified by `T` (a thread id).
#[derive(Debug)]
pub struct RunQueue<T> {
    ready: VecDeque<T>,
}

impl<T: Copy + PartialEq> Default for RunQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + PartialEq> RunQueue<T> {
    /// An empty queue.
    pub const fn new() -> Self {
        RunQueue {
            ready: VecDeque::new(),
        }
    }

    /// Makes `t` ready, at the back of the queue. Returns `false` (and changes nothing) if
    /// it was already queued.
    pub fn push(&mut self, t: T) -> bool {
        if self.ready.contains(&t) {
            return false;
        }
        self.ready.push_back(t);
        true
    }

    /// Takes the next thread to run.
    pub fn pop(&mut self) -> Option<T> {
        self.ready.pop_front()
    }

    /// Removes `t` wherever it is (when it exits or is killed). Returns whether it was there.
    pub fn remove(&mut self, t: T) -> bool {
        match self.ready.iter().position(|&x| x == t) {
            Some(i) => self.ready.remove(i).is_some(),
            None => false,
        }
    }

    /// Number of ready threads.
    pub fn len(&self) -> usize {
        self.ready.len()
    }

    /// Whether no thread is ready.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_order() {
        let mut q = RunQueue::new();
        for t in 1..=3u32 {
            assert!(q.push(t));
        }
        // The running thread goes to the back when its quantum ends.
        let first = q.pop().unwrap();
        assert!(q.push(first));
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(3));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }

    #[test]
    fn no_duplicates_and_removal() {
        let mut q = RunQueue::new();
        assert!(q.push(7u32));
        assert!(!q.push(7));
        assert_eq!(q.len(), 1);
        assert!(q.push(8));
        assert!(q.remove(7));
        assert!(!q.remove(7));
        assert_eq!(q.pop(), Some(8));
    }
}
