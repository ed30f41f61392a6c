//! The ready queues a virtual processor's own kernel thread works on without a lock.
//!
//! - [`Ring`]: a bounded ring that only its owner touches (the built-in FIFO and LIFO
//!   policies keep their threads from thieves, so nothing else ever reads it): a push or a
//!   pop is a few plain loads and stores, no atomic operation at all.
//! - [`ChaseLev`]: the bounded work-stealing deque of Chase and Lev ("Dynamic Circular
//!   Work-Stealing Deque", SPAA 2005), with the memory orderings of Lê, Pop, Cohen and
//!   Zappa Nardelli ("Correct and Efficient Work-Stealing for Weak Memory Models", PPoPP
//!   2013), for the built-in work-stealing policy: the owner pushes and pops at the bottom
//!   with plain stores and one fence (a compare-and-swap only when it takes the last
//!   entry, which a thief may be taking too); thieves take from the top with a
//!   compare-and-swap.
//!
//! Both are bounded: a push onto a full queue gives the item back, and the runtime queues
//! it on the processor's shared (locked) queue instead, so nothing is ever lost and no
//! allocation happens on a switch.
//!
//! The deque's code is written once, in the [`chase_lev`] macro, and instantiated here with
//! `core`'s atomics and, in the model-checking tests (`loom_deque.rs`), with `loom`'s: the
//! code checked is the code the runtime runs.
//!
//! # Invariants
//!
//! - `Ring`: `tail - head` (wrapping) is the number of items, at most the capacity; the
//!   slots `head..tail` (masked) hold initialised items.
//! - `ChaseLev`: `top <= bottom` except transiently inside the owner's `pop`; the slots
//!   `top..bottom` (masked) hold the entries; `top` only grows, by a successful
//!   compare-and-swap; only the owner writes `bottom` and the slots.

use core::mem::MaybeUninit;

/// Entries of each virtual processor's [`Ring`] and [`ChaseLev`] (a power of two).
pub const CAPACITY: usize = 256;

/// A bounded ring of `T`s, used by its owner alone, as a FIFO queue or a LIFO stack. Its
/// slots are inline (the mask is a constant).
pub struct Ring<T> {
    /// The slots; `head..tail` (masked) are initialised.
    buf: [MaybeUninit<T>; CAPACITY],
    /// The oldest item's index (unmasked, wrapping).
    head: usize,
    /// One past the newest item's index (unmasked, wrapping).
    tail: usize,
}

impl<T> Ring<T> {
    /// An empty ring of [`CAPACITY`] slots.
    pub const fn new() -> Ring<T> {
        Ring {
            buf: [const { MaybeUninit::uninit() }; CAPACITY],
            head: 0,
            tail: 0,
        }
    }

    /// The slot of unmasked index `i`.
    #[inline]
    fn slot(&mut self, i: usize) -> &mut MaybeUninit<T> {
        // SAFETY: `i & (CAPACITY - 1) < CAPACITY` (a power of two).
        unsafe { self.buf.get_unchecked_mut(i & (CAPACITY - 1)) }
    }

    /// Appends `item` as the newest; gives it back if the ring is full.
    #[inline]
    pub fn push(&mut self, item: T) -> Result<(), T> {
        if self.tail.wrapping_sub(self.head) >= CAPACITY {
            return Err(item);
        }
        let t = self.tail;
        self.slot(t).write(item);
        self.tail = t.wrapping_add(1);
        Ok(())
    }

    /// [`push`](Self::push) onto a ring whose tail the caller has just read as `t`
    /// ([`ends`](Self::ends)), knowing it has room (it was empty, say): no test.
    ///
    /// # Safety
    ///
    /// `t` is the ring's tail now and the ring holds fewer than [`CAPACITY`] items.
    #[inline]
    pub unsafe fn push_at(&mut self, t: usize, item: T) {
        self.slot(t).write(item);
        self.tail = t.wrapping_add(1);
    }

    /// Takes the oldest item (FIFO).
    #[inline]
    pub fn pop_oldest(&mut self) -> Option<T> {
        if self.head == self.tail {
            return None;
        }
        let h = self.head;
        self.head = h.wrapping_add(1);
        // SAFETY: `h` was in `head..tail`, so initialised; it is outside now, so it is read
        // once.
        Some(unsafe { self.slot(h).assume_init_read() })
    }

    /// Takes the newest item (LIFO).
    #[inline]
    pub fn pop_newest(&mut self) -> Option<T> {
        if self.head == self.tail {
            return None;
        }
        let t = self.tail.wrapping_sub(1);
        self.tail = t;
        // SAFETY: as in `pop_oldest`.
        Some(unsafe { self.slot(t).assume_init_read() })
    }

    /// The oldest item, left in place (what [`pop_oldest`](Self::pop_oldest) would take).
    #[inline]
    pub fn oldest(&self) -> Option<&T> {
        if self.head == self.tail {
            return None;
        }
        // SAFETY: `head` is in `head..tail`, so initialised; masked, it is in bounds.
        Some(unsafe {
            self.buf
                .get_unchecked(self.head & (CAPACITY - 1))
                .assume_init_ref()
        })
    }

    /// The newest item, left in place (what [`pop_newest`](Self::pop_newest) would take).
    #[inline]
    pub fn newest(&self) -> Option<&T> {
        if self.head == self.tail {
            return None;
        }
        // SAFETY: `tail - 1` is in `head..tail`, so initialised; masked, it is in bounds.
        Some(unsafe {
            self.buf
                .get_unchecked(self.tail.wrapping_sub(1) & (CAPACITY - 1))
                .assume_init_ref()
        })
    }

    /// Takes the oldest item and appends `item` as the newest, as [`pop_oldest`] then
    /// [`push`] do, in one step that never finds the ring full (a FIFO yield: the
    /// yielder goes to the back, the front runs). `Err(item)` if the ring is empty.
    ///
    /// [`pop_oldest`]: Self::pop_oldest
    /// [`push`]: Self::push
    #[inline]
    pub fn rotate_oldest(&mut self, item: T) -> Result<T, T> {
        let (h, t) = (self.head, self.tail);
        if h == t {
            return Err(item);
        }
        // SAFETY: `h` was in `head..tail`, so initialised; it is outside from now on, so it
        // is read once.
        let out = unsafe { self.slot(h).assume_init_read() };
        // The slot of `t` is free: `head..tail` held at most CAPACITY items, one of which
        // (at `h`) just left; when the ring was full, `t` and `h` are the same slot.
        self.slot(t).write(item);
        self.head = h.wrapping_add(1);
        self.tail = t.wrapping_add(1);
        Ok(out)
    }

    /// Replaces the newest item by `item`, as [`pop_newest`] then [`push`] do, in place
    /// (a LIFO yield: one slot rewritten). `Err(item)` if the ring is empty.
    ///
    /// [`pop_newest`]: Self::pop_newest
    /// [`push`]: Self::push
    #[inline]
    pub fn replace_newest(&mut self, item: T) -> Result<T, T> {
        if self.head == self.tail {
            return Err(item);
        }
        let slot = self.slot(self.tail.wrapping_sub(1));
        // SAFETY: `tail - 1` is in `head..tail`, so initialised; it is read once and
        // rewritten at once.
        let out = unsafe { slot.assume_init_read() };
        slot.write(item);
        Ok(out)
    }

    /// The unmasked indices of the oldest item and one past the newest (`head`, `tail`):
    /// the ring is empty when they are equal.
    #[inline]
    pub fn ends(&self) -> (usize, usize) {
        (self.head, self.tail)
    }

    /// The item at unmasked index `i`.
    ///
    /// # Safety
    ///
    /// `i` is in `head..tail` ([`ends`](Self::ends)).
    #[inline]
    pub unsafe fn at(&self, i: usize) -> &T {
        // SAFETY: the caller's promise: initialised; masked, in bounds.
        unsafe { self.buf.get_unchecked(i & (CAPACITY - 1)).assume_init_ref() }
    }

    /// [`rotate_oldest`](Self::rotate_oldest) of a ring whose [`ends`](Self::ends) the
    /// caller has just read as `(h, t)`, with `h != t`: no test, no load of the ends.
    ///
    /// # Safety
    ///
    /// `(h, t)` are the ring's ends now and `h != t`.
    #[inline]
    pub unsafe fn rotate_oldest_at(&mut self, h: usize, t: usize, item: T) -> T {
        // SAFETY: as in `rotate_oldest`: `h` is initialised and read once; the slot of `t`
        // is free (or, full, the slot of `h` just read).
        let out = unsafe { self.slot(h).assume_init_read() };
        self.slot(t).write(item);
        self.head = h.wrapping_add(1);
        self.tail = t.wrapping_add(1);
        out
    }

    /// [`replace_newest`](Self::replace_newest) of a ring whose [`ends`](Self::ends) the
    /// caller has just read as `(h, t)`, with `h != t`.
    ///
    /// # Safety
    ///
    /// As [`rotate_oldest_at`](Self::rotate_oldest_at).
    #[inline]
    pub unsafe fn replace_newest_at(&mut self, t: usize, item: T) -> T {
        let slot = self.slot(t.wrapping_sub(1));
        // SAFETY: `t - 1` is in `head..tail`, so initialised; read once, rewritten at once.
        let out = unsafe { slot.assume_init_read() };
        slot.write(item);
        out
    }

    /// The oldest item that `pred` accepts, to change in place (a search from the oldest
    /// to the newest: for rare operations only).
    pub fn find_mut(&mut self, mut pred: impl FnMut(&T) -> bool) -> Option<&mut T> {
        let (h, t) = (self.head, self.tail);
        let mut i = h;
        while i != t {
            // SAFETY: `i` is in `head..tail`, so initialised.
            if pred(unsafe { self.slot(i).assume_init_ref() }) {
                // SAFETY: as above.
                return Some(unsafe { self.slot(i).assume_init_mut() });
            }
            i = i.wrapping_add(1);
        }
        None
    }

    /// Items in the ring.
    #[inline]
    pub fn len(&self) -> usize {
        self.tail.wrapping_sub(self.head)
    }

    /// Whether the ring is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head == self.tail
    }

    /// Room for more items.
    #[inline]
    pub fn room(&self) -> usize {
        CAPACITY - self.len()
    }
}

impl<T> Default for Ring<T> {
    fn default() -> Ring<T> {
        Ring::new()
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        while self.pop_oldest().is_some() {}
    }
}

/// What a thief's [`steal`](ChaseLev::steal) found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steal<T> {
    /// The deque was empty.
    Empty,
    /// Another thief or the owner took the entry first: try again.
    Lost,
    /// The oldest entry.
    Took(T),
}

/// Defines a bounded Chase–Lev deque of `(usize, usize)` pairs (the runtime's entries: a
/// thread pointer and a ticket) named `$name`, on the atomics of module `$atomic` (which
/// must provide `AtomicIsize`, `AtomicUsize`, `fence` and `Ordering`).
macro_rules! chase_lev {
    ($(#[$m:meta])* $name:ident, $atomic:ident) => {
        $(#[$m])*
        pub struct $name {
            /// The slots: each entry's two words, read by thieves while the owner may be
            /// reusing the slot (a thief whose compare-and-swap then fails drops what it
            /// read), hence atomic.
            buf: alloc::boxed::Box<[[$atomic::AtomicUsize; 2]]>,
            /// The oldest entry's index: only grows, by a compare-and-swap.
            top: $atomic::AtomicIsize,
            /// One past the newest entry's index: written by the owner alone.
            bottom: $atomic::AtomicIsize,
        }

        impl $name {
            /// An empty deque of `cap` slots (a power of two).
            pub fn with_capacity(cap: usize) -> $name {
                let mut v = alloc::vec::Vec::with_capacity(cap);
                v.resize_with(cap, || {
                    [$atomic::AtomicUsize::new(0), $atomic::AtomicUsize::new(0)]
                });
                $name {
                    buf: v.into_boxed_slice(),
                    top: $atomic::AtomicIsize::new(0),
                    bottom: $atomic::AtomicIsize::new(0),
                }
            }

            /// The slot of unmasked index `i`.
            #[inline]
            fn slot(&self, i: isize) -> &[$atomic::AtomicUsize; 2] {
                let mask = self.buf.len() - 1;
                &self.buf[(i as usize) & mask]
            }

            /// The owner: appends `item` as the newest entry; gives it back if full.
            #[inline]
            pub fn push(&self, item: (usize, usize)) -> Result<(), (usize, usize)> {
                use $atomic::Ordering::{Acquire, Relaxed, Release};
                let b = self.bottom.load(Relaxed);
                let t = self.top.load(Acquire);
                if b.wrapping_sub(t) >= self.buf.len() as isize {
                    return Err(item);
                }
                let s = self.slot(b);
                s[0].store(item.0, Relaxed);
                s[1].store(item.1, Relaxed);
                // The entry is written before a thief can see the new bottom.
                $atomic::fence(Release);
                self.bottom.store(b.wrapping_add(1), Relaxed);
                Ok(())
            }

            /// The owner: takes the newest entry.
            #[inline]
            pub fn pop(&self) -> Option<(usize, usize)> {
                use $atomic::Ordering::{Relaxed, SeqCst};
                let b = self.bottom.load(Relaxed).wrapping_sub(1);
                self.bottom.store(b, Relaxed);
                // Orders the claim of slot `b` (the store above) before the read of `top`:
                // a thief that read the old bottom is then seen here.
                $atomic::fence(SeqCst);
                let t = self.top.load(Relaxed);
                if t > b {
                    // Empty: put bottom back.
                    self.bottom.store(b.wrapping_add(1), Relaxed);
                    return None;
                }
                let s = self.slot(b);
                let item = (s[0].load(Relaxed), s[1].load(Relaxed));
                if t == b {
                    // The last entry: a thief may be taking it too; one compare-and-swap
                    // decides.
                    let won = self
                        .top
                        .compare_exchange(t, t.wrapping_add(1), SeqCst, Relaxed)
                        .is_ok();
                    self.bottom.store(b.wrapping_add(1), Relaxed);
                    return won.then_some(item);
                }
                Some(item)
            }

            /// A thief (any thread): takes the oldest entry.
            #[inline]
            pub fn steal(&self) -> $crate::deque::Steal<(usize, usize)> {
                use $atomic::Ordering::{Acquire, Relaxed, SeqCst};
                let t = self.top.load(Acquire);
                $atomic::fence(SeqCst);
                let b = self.bottom.load(Acquire);
                if t >= b {
                    return $crate::deque::Steal::Empty;
                }
                let s = self.slot(t);
                let item = (s[0].load(Relaxed), s[1].load(Relaxed));
                if self
                    .top
                    .compare_exchange(t, t.wrapping_add(1), SeqCst, Relaxed)
                    .is_err()
                {
                    return $crate::deque::Steal::Lost;
                }
                $crate::deque::Steal::Took(item)
            }

            #[allow(dead_code)] // not every instantiation asks
            /// Entries in the deque (exact for the owner between its own operations; a
            /// hint for anyone else).
            #[inline]
            pub fn len(&self) -> usize {
                use $atomic::Ordering::Relaxed;
                let b = self.bottom.load(Relaxed);
                let t = self.top.load(Relaxed);
                b.wrapping_sub(t).max(0) as usize
            }

            /// Whether the deque looks empty.
            #[allow(dead_code)] // not every instantiation asks
            #[inline]
            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }
        }
    };
}

#[allow(unused_imports)] // used by the loom tests
pub(crate) use chase_lev;

/// The atomics the runtime's deque is built on.
mod atomics {
    pub use core::sync::atomic::{fence, AtomicIsize, AtomicUsize, Ordering};
}

chase_lev!(
    /// A bounded Chase–Lev work-stealing deque of `(usize, usize)` entries: the owner
    /// [`push`](ChaseLev::push)es and [`pop`](ChaseLev::pop)s the newest, thieves
    /// [`steal`](ChaseLev::steal) the oldest.
    ChaseLev,
    atomics
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn ring_is_fifo_and_lifo_and_bounded() {
        let mut r = Ring::new();
        for i in 0..CAPACITY {
            assert!(r.push(i).is_ok());
        }
        assert_eq!(r.push(999), Err(999), "full");
        assert_eq!(r.room(), 0);
        assert_eq!(r.pop_oldest(), Some(0));
        assert_eq!(r.pop_newest(), Some(CAPACITY - 1));
        assert_eq!(r.len(), CAPACITY - 2);
        // Wraps around.
        for i in 0..2 {
            assert!(r.push(1000 + i).is_ok());
        }
        assert_eq!(r.pop_newest(), Some(1001));
        let mut rest = Vec::new();
        while let Some(x) = r.pop_oldest() {
            rest.push(x);
        }
        let mut want: Vec<usize> = (1..CAPACITY - 1).collect();
        want.push(1000);
        assert_eq!(rest, want);
        assert!(r.is_empty());
    }

    #[test]
    fn ring_yields_in_one_step_even_when_full() {
        let mut r = Ring::new();
        assert_eq!(r.rotate_oldest(7), Err(7), "empty");
        assert_eq!(r.replace_newest(7), Err(7), "empty");
        for i in 0..CAPACITY {
            assert!(r.push(i).is_ok());
        }
        // Full: the yielder still takes the place of what runs.
        assert_eq!(r.rotate_oldest(1000), Ok(0));
        assert_eq!(r.replace_newest(2000), Ok(1000));
        assert_eq!(
            (r.oldest(), r.newest(), r.len()),
            (Some(&1), Some(&2000), CAPACITY)
        );
        assert_eq!(r.pop_newest(), Some(2000));
        assert_eq!(r.pop_oldest(), Some(1));
    }

    #[test]
    fn ring_drops_what_it_holds() {
        let x = alloc::sync::Arc::new(());
        let mut r = Ring::new();
        for _ in 0..5 {
            assert!(r.push(x.clone()).is_ok());
        }
        drop(r);
        assert_eq!(alloc::sync::Arc::strong_count(&x), 1);
    }

    #[test]
    fn chase_lev_owner_newest_thief_oldest_bounded() {
        let d = ChaseLev::with_capacity(8);
        assert_eq!(d.pop(), None);
        assert_eq!(d.steal(), Steal::Empty);
        for i in 0..8 {
            assert!(d.push((i, 100 + i)).is_ok());
        }
        assert_eq!(d.push((9, 9)), Err((9, 9)), "full");
        assert_eq!(d.len(), 8);
        assert_eq!(d.steal(), Steal::Took((0, 100)));
        assert_eq!(d.pop(), Some((7, 107)));
        // Room again, and the slots wrap around.
        assert!(d.push((20, 120)).is_ok());
        assert!(d.push((21, 121)).is_ok());
        assert_eq!(d.push((22, 122)), Err((22, 122)));
        let mut got = Vec::new();
        while let Steal::Took(x) = d.steal() {
            got.push(x.0);
        }
        assert_eq!(got, [1, 2, 3, 4, 5, 6, 20, 21]);
        assert_eq!(d.pop(), None);
        assert!(d.is_empty());
    }

    /// The owner pushes and pops while thieves steal on other threads: every entry is
    /// taken exactly once.
    #[test]
    fn chase_lev_every_entry_once_under_thieves() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        use std::sync::Arc;
        let d = Arc::new(ChaseLev::with_capacity(64));
        let done = Arc::new(AtomicBool::new(false));
        const N: usize = 20_000;
        let thieves: Vec<_> = (0..2)
            .map(|_| {
                let (d, done) = (d.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    loop {
                        match d.steal() {
                            Steal::Took(x) => got.push(x.0),
                            Steal::Lost => {}
                            Steal::Empty if done.load(SeqCst) => return got,
                            Steal::Empty => std::thread::yield_now(),
                        }
                    }
                })
            })
            .collect();
        let mut mine = Vec::new();
        let mut next = 0;
        while next < N {
            if d.push((next, next)).is_ok() {
                next += 1;
            }
            if next % 3 == 0 {
                if let Some(x) = d.pop() {
                    mine.push(x.0);
                }
            }
        }
        while let Some(x) = d.pop() {
            mine.push(x.0);
        }
        done.store(true, SeqCst);
        for t in thieves {
            mine.extend(t.join().unwrap());
        }
        mine.sort_unstable();
        assert_eq!(mine, (0..N).collect::<Vec<_>>());
    }
}
