//! A growable ring buffer of `Copy` values, small enough for the compiler to inline its
//! fast operations into the scheduler's hot path (the standard `VecDeque`'s `push_back`
//! stays an out-of-line call).
//!
//! # Invariants
//! - `buf.len()` (the capacity) is 0 or a power of two; `len <= buf.len()`.
//! - The live elements are at physical indices `(head + i) & (cap - 1)` for `i < len`;
//!   the other slots hold stale copies, never read.

use alloc::vec::Vec;

/// A FIFO/deque of `T` on a power-of-two ring. See the module documentation.
#[derive(Debug, Clone)]
pub struct Ring<T> {
    buf: Vec<T>,
    head: usize,
    len: usize,
}

impl<T: Copy + Default + PartialEq> Default for Ring<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default + PartialEq> Ring<T> {
    /// An empty ring; it allocates on the first push.
    pub const fn new() -> Ring<T> {
        Ring {
            buf: Vec::new(),
            head: 0,
            len: 0,
        }
    }

    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the ring is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Physical index of logical element `i` (capacity is a power of two, non-zero).
    #[inline(always)]
    fn phys(&self, i: usize) -> usize {
        (self.head + i) & (self.buf.len().wrapping_sub(1))
    }

    /// Doubles the capacity (at least 4), keeping the order; the head moves to 0.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let cap = (self.buf.len() * 2).max(4);
        if self.try_grow_to(cap).is_err() {
            // Only reached when a caller pushed without [`Ring::reserve`] or
            // [`Ring::try_push_back`] and the heap is exhausted: the kernel's callers
            // reserve first, so this is the allocation-error handler's case.
            alloc::alloc::handle_alloc_error(core::alloc::Layout::new::<T>());
        }
    }

    /// Grows the capacity to `cap` (a power of two above the current one), keeping the
    /// order (the head moves to 0), or changes nothing when the heap has no room.
    fn try_grow_to(&mut self, cap: usize) -> Result<(), ()> {
        let mut next = Vec::new();
        next.try_reserve_exact(cap).map_err(|_| ())?;
        for i in 0..self.len {
            next.push(self.buf.get(self.phys(i)).copied().unwrap_or_default());
        }
        next.resize(cap, T::default());
        self.buf = next;
        self.head = 0;
        Ok(())
    }

    /// Makes room for at least `n` elements in all, so that pushes up to that many never
    /// allocate; `Err` (nothing changed) when the heap has no room.
    pub fn reserve(&mut self, n: usize) -> Result<(), baton_abi::Error> {
        if n <= self.buf.len() {
            return Ok(());
        }
        let cap = n
            .checked_next_power_of_two()
            .ok_or(baton_abi::Error::NoMemory)?
            .max(4);
        self.try_grow_to(cap)
            .map_err(|()| baton_abi::Error::NoMemory)
    }

    /// Whether one more element fits without growing.
    #[inline(always)]
    pub fn has_room(&self) -> bool {
        self.len < self.buf.len()
    }

    /// [`Ring::push_back`], or `Err(t)` (nothing changed) when the ring must grow and the
    /// heap has no room.
    #[inline]
    pub fn try_push_back(&mut self, t: T) -> Result<(), T> {
        if self.len == self.buf.len() {
            let cap = (self.buf.len() * 2).max(4);
            if self.try_grow_to(cap).is_err() {
                return Err(t);
            }
        }
        self.push_back(t);
        Ok(())
    }

    /// Appends `t` at the back.
    #[inline(always)]
    pub fn push_back(&mut self, t: T) {
        if self.len == self.buf.len() {
            self.grow();
        }
        let i = self.phys(self.len);
        if let Some(slot) = self.buf.get_mut(i) {
            *slot = t;
            self.len += 1;
        }
    }

    /// Puts `t` at the front.
    #[inline]
    pub fn push_front(&mut self, t: T) {
        if self.len == self.buf.len() {
            self.grow();
        }
        let mask = self.buf.len().wrapping_sub(1);
        let i = self.head.wrapping_sub(1) & mask;
        if let Some(slot) = self.buf.get_mut(i) {
            *slot = t;
            self.head = i;
            self.len += 1;
        }
    }

    /// Takes the front element. (Inlined, as are [`Ring::front`] and [`Ring::push_back`]:
    /// the RPC fast path does each once per transfer.)
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let t = *self.buf.get(self.head)?;
        self.head = self.phys(1);
        self.len -= 1;
        Some(t)
    }

    /// The front element, left in place.
    #[inline(always)]
    pub fn front(&self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.buf.get(self.head).copied()
    }

    /// Logical index of the first element equal to `t`.
    pub fn position(&self, t: T) -> Option<usize> {
        (0..self.len).find(|&i| self.buf.get(self.phys(i)) == Some(&t))
    }

    /// Slots allocated.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Removes logical element `i`, shifting the later ones forward: O(1) for the front,
    /// O(len - i) otherwise.
    pub fn remove(&mut self, i: usize) -> Option<T> {
        if i >= self.len {
            return None;
        }
        if i == 0 {
            return self.pop_front();
        }
        let removed = *self.buf.get(self.phys(i))?;
        for j in i..self.len - 1 {
            let next = *self.buf.get(self.phys(j + 1))?;
            let at = self.phys(j);
            *self.buf.get_mut(at)? = next;
        }
        self.len -= 1;
        Some(removed)
    }

    /// The elements front to back.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        (0..self.len).filter_map(|i| self.buf.get(self.phys(i)).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::vec;

    #[test]
    fn fifo_order_across_growth() {
        let mut r = Ring::new();
        for i in 0..100u32 {
            r.push_back(i);
        }
        assert_eq!(r.len(), 100);
        for i in 0..100u32 {
            assert_eq!(r.pop_front(), Some(i));
        }
        assert_eq!(r.pop_front(), None);
        assert!(r.is_empty());
    }

    #[test]
    fn remove_and_position() {
        let mut r = Ring::new();
        for i in [1u32, 2, 3, 4, 5] {
            r.push_back(i);
        }
        assert_eq!(r.position(3), Some(2));
        assert_eq!(r.remove(2), Some(3));
        assert_eq!(r.position(3), None);
        assert_eq!(r.iter().collect::<vec::Vec<_>>(), vec![1, 2, 4, 5]);
        assert_eq!(r.remove(9), None);
    }

    #[test]
    fn matches_vecdeque_under_random_operations() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut r = Ring::new();
        let mut model = VecDeque::new();
        for step in 0..50_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 5 {
                0 | 1 => {
                    r.push_back(step);
                    model.push_back(step);
                }
                2 => {
                    r.push_front(step);
                    model.push_front(step);
                }
                3 => assert_eq!(r.pop_front(), model.pop_front()),
                _ => {
                    if !model.is_empty() {
                        let i = (x as usize >> 8) % model.len();
                        assert_eq!(r.remove(i), model.remove(i));
                    }
                }
            }
            assert_eq!(r.len(), model.len());
            assert_eq!(r.front(), model.front().copied());
        }
        assert_eq!(
            r.iter().collect::<vec::Vec<_>>(),
            model.iter().copied().collect::<vec::Vec<_>>()
        );
    }
}
