//! Pools of thread control blocks (each with its stack): a LIFO pool per virtual processor
//! and one global overflow pool, as in the paper's section 3.1.
//!
//! A finished thread's TCB goes back on the pool of the virtual processor it finished on;
//! the pool is LIFO, so the next new thread on that processor gets the TCB (and stack) that
//! was used last, whose lines are most likely still in the cache. Each local pool has an
//! *overflow* threshold: when a release makes it hold more, its older half moves to the
//! global pool. It has an *underflow* refill: when it is empty and a TCB is wanted, up to
//! `refill` TCBs move back from the global pool. A new TCB is made only when both are
//! empty, so how many are ever made is decided by all virtual processors together.
//!
//! (The direct hand-over of a finished thread's TCB to the next new thread, with no pool
//! operation at all, is done by the runtime before it gets here.)
//!
//! The pools are generic over the item (the runtime's TCB pointer) so that their logic is
//! tested on the host with integers.
//!
//! # Invariants
//!
//! - A local pool holds at most `overflow` items after every operation.
//! - An item is in at most one pool; `take` returns the most recently released item of the
//!   local pool, `refill` one from the global pool, else `None` (the caller makes one).

use alloc::vec::Vec;

/// Thresholds of a local pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// More than this many TCBs in a local pool moves its older half to the global pool.
    pub overflow: usize,
    /// How many TCBs an empty local pool takes from the global pool at once.
    pub refill: usize,
}

impl Thresholds {
    /// The runtime's default: at most 16 TCBs kept per virtual processor, refilled 4 at a
    /// time.
    pub const DEFAULT: Thresholds = Thresholds {
        overflow: 16,
        refill: 4,
    };
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds::DEFAULT
    }
}

/// The global overflow pool (the runtime guards it with a lock).
pub struct Global<T> {
    /// Newest at the end.
    items: Vec<T>,
}

impl<T> Global<T> {
    /// An empty pool.
    pub const fn new() -> Global<T> {
        Global { items: Vec::new() }
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Takes every item (to free them when the runtime ends).
    pub fn drain(&mut self) -> Vec<T> {
        core::mem::take(&mut self.items)
    }
}

impl<T> Default for Global<T> {
    fn default() -> Global<T> {
        Global::new()
    }
}

/// One virtual processor's pool.
pub struct Local<T> {
    /// Most recently released at the end.
    items: Vec<T>,
    /// Its thresholds.
    limits: Thresholds,
}

impl<T> Local<T> {
    /// An empty pool with these thresholds (`overflow` at least 1; `refill` at least 1 and
    /// at most `overflow + 1`, so that a refill, less the TCB it hands out, never leaves
    /// the pool over its overflow threshold).
    pub fn new(limits: Thresholds) -> Local<T> {
        let overflow = limits.overflow.max(1);
        Local {
            items: Vec::new(),
            limits: Thresholds {
                overflow,
                refill: limits.refill.clamp(1, overflow + 1),
            },
        }
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The most recently released item, if the pool holds any.
    pub fn take(&mut self) -> Option<T> {
        self.items.pop()
    }

    /// Underflow: the pool is empty and a TCB is wanted. Moves up to `refill` items (the
    /// global pool's newest) from `global` and returns the newest of them, or `None` if
    /// `global` is empty too (the caller then makes a new one).
    pub fn refill(&mut self, global: &mut Global<T>) -> Option<T> {
        let take = self.limits.refill.min(global.items.len());
        let from = global.items.len() - take;
        self.items.extend(global.items.drain(from..));
        self.items.pop()
    }

    /// Puts `item` back; returns whether the pool is now over its overflow threshold (the
    /// caller then calls [`spill`](Self::spill) with the global pool).
    pub fn put(&mut self, item: T) -> bool {
        self.items.push(item);
        self.items.len() > self.limits.overflow
    }

    /// Overflow: moves the older half of the pool to `global`; returns how many moved.
    pub fn spill(&mut self, global: &mut Global<T>) -> usize {
        let half = self.items.len() / 2;
        global.items.extend(self.items.drain(..half));
        half
    }

    /// Takes every item (to free them when the runtime ends).
    pub fn drain(&mut self) -> Vec<T> {
        core::mem::take(&mut self.items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        overflow: 4,
        refill: 2,
    };

    #[test]
    fn lifo_reuse() {
        let mut l = Local::new(T);
        assert_eq!(l.take(), None);
        assert!(!l.put(1));
        assert!(!l.put(2));
        assert_eq!(l.take(), Some(2));
        assert_eq!(l.take(), Some(1));
    }

    #[test]
    fn overflow_moves_the_older_half() {
        let mut g = Global::new();
        let mut l = Local::new(T);
        for i in 0..4 {
            assert!(!l.put(i));
        }
        assert!(l.put(4));
        assert_eq!(l.spill(&mut g), 2);
        assert_eq!(g.items, [0, 1]);
        assert_eq!(l.items, [2, 3, 4]);
    }

    #[test]
    fn underflow_refills_from_global() {
        let mut g = Global::new();
        g.items.extend([10, 11, 12]);
        let mut l = Local::new(T);
        assert_eq!(l.refill(&mut g), Some(12));
        assert_eq!(l.items, [11]);
        assert_eq!(g.items, [10]);
        assert_eq!(l.take(), Some(11));
        assert_eq!(l.refill(&mut g), Some(10));
        assert_eq!(l.refill(&mut g), None);
    }
}
