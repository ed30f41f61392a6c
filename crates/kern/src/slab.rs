//! Generation-checked slabs: objects named by keys that can never reach a later object.
//!
//! A [`Slab`] stores objects in numbered slots. A [`Key`] names a slot *and* the generation
//! of the object that was put there; when the object is removed the slot's generation is
//! bumped, so the old key stops matching and a new object in the same slot gets a new key.
//! Lookup is O(1): one bounds check, one compare of the key with the slot's tag — this is what the kernel's
//! hot paths (every system call finds its thread) use instead of a search tree, and what
//! capability names are built from (a stale name never reaches a new object).
//!
//! # Invariants
//! - `slots[i]` is full (its value initialised) exactly when the low half of its tag is
//!   `i`, and then its tag is the one live key of slot `i`; free slots are chained through
//!   the low halves of their tags, ending in [`NIL`] (see `Slot`).
//! - A slot's generation only grows (wrapping after 2^32 reuses of that one slot, which a
//!   caller that cares retires by never freeing it: see [`Slab::remove`]).
//! - `len` counts the full slots.

use alloc::vec::Vec;
use core::mem::MaybeUninit;

/// A slab key: slot index in the low 32 bits, the object's generation in the high 32.
/// Generation 0 is never handed out, so the all-zero key is never valid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(pub u64);

impl Key {
    /// The key of slot `index` at `generation`.
    pub const fn new(index: u32, generation: u32) -> Key {
        Key(((generation as u64) << 32) | index as u64)
    }

    /// The slot index.
    pub const fn index(self) -> u32 {
        self.0 as u32
    }

    /// The generation.
    pub const fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// End of the free list.
const NIL: u32 = u32::MAX;

/// One slot: a tag word and room for an object.
///
/// The tag of a *full* slot is the key of its object (its own index in the low half, the
/// object's generation in the high half), and the slot's `value` is initialised. The tag
/// of a *free* slot has the generation the next object there gets in the high half and
/// the next free slot's index (or [`NIL`]) in the low half, never the slot's own index
/// (the free list does not loop), and its `value` is uninitialised. So a slot is full
/// exactly when the low half of its tag is its own index, and a lookup is one compare of
/// the whole tag with the key: a key whose index names the slot matches only a full
/// slot's tag, and only at that object's generation.
struct Slot<T> {
    tag: u64,
    value: MaybeUninit<T>,
}

impl<T> Slot<T> {
    /// The key of the object held, if the slot (at `index`) is full.
    #[inline(always)]
    fn key(&self, index: usize) -> Option<Key> {
        (self.tag as u32 as usize == index).then_some(Key(self.tag))
    }
}

/// A slab of `T` with generation-checked [`Key`]s. See the module documentation.
pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free_head: u32,
    len: usize,
    /// At most this many slots (the index space of a key, or a caller's smaller limit).
    limit: u32,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for Slab<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<T> Drop for Slab<T> {
    fn drop(&mut self) {
        if !core::mem::needs_drop::<T>() {
            return;
        }
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.key(i).is_some() {
                // SAFETY: a full slot's value is initialised (the tag says so), and it is
                // dropped once: the slab goes with this call.
                unsafe { slot.value.assume_init_drop() };
            }
        }
    }
}

impl<T> Slab<T> {
    /// An empty slab.
    pub const fn new() -> Slab<T> {
        Slab::with_limit(NIL)
    }

    /// An empty slab that never holds more than `limit` objects (at most `u32::MAX - 1`).
    pub const fn with_limit(limit: u32) -> Slab<T> {
        Slab {
            slots: Vec::new(),
            free_head: NIL,
            len: 0,
            limit: if limit > NIL - 1 { NIL - 1 } else { limit },
        }
    }

    /// Bytes one slot takes.
    pub const SLOT_BYTES: usize = core::mem::size_of::<Slot<T>>();

    /// Whether an insert would reuse a free slot (rather than add one).
    #[inline(always)]
    pub fn has_free(&self) -> bool {
        self.free_head != NIL
    }

    /// Number of slots, free or full (what the slab has grown to).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slab is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes sure the next [`Slab::insert`] succeeds (a free slot, or room for a new one
    /// below the limit); `false` when the slab is at its limit or the heap has no room.
    pub fn reserve_one(&mut self) -> bool {
        if self.free_head != NIL {
            return true;
        }
        self.slots.len() < self.limit as usize
            && (self.slots.len() < self.slots.capacity() || self.slots.try_reserve(1).is_ok())
    }

    /// Stores `value` and returns its key, or gives the value back when the slab is at its
    /// limit.
    /// Inlined: the free-list case is a handful of instructions (the RPC fast path inserts
    /// a reply right on every call); growing the slab is out of line.
    #[inline(always)]
    pub fn insert(&mut self, value: T) -> Result<Key, T> {
        let index = self.free_head;
        // `NIL` is never an index (the limit is below it), so it finds no slot.
        if let Some(slot) = self.slots.get_mut(index as usize) {
            if slot.key(index as usize).is_none() {
                let key = Key::new(index, (slot.tag >> 32) as u32);
                self.free_head = slot.tag as u32;
                slot.tag = key.0;
                slot.value.write(value);
                self.len += 1;
                return Ok(key);
            }
        }
        self.insert_grow(value)
    }

    /// [`Slab::insert`] when no slot is free: a new slot at the end.
    #[inline(never)]
    fn insert_grow(&mut self, value: T) -> Result<Key, T> {
        self.insert_with(|_| value).map_err(|f| f(Key(0)))
    }

    /// Stores the value `make(key)` builds knowing its own key, and returns the key; when the
    /// slab is full, gives `make` back without calling it.
    #[inline]
    pub fn insert_with<F: FnOnce(Key) -> T>(&mut self, make: F) -> Result<Key, F> {
        if self.free_head != NIL {
            let index = self.free_head;
            let Some(slot) = self.slots.get_mut(index as usize) else {
                return Err(make);
            };
            if slot.key(index as usize).is_some() {
                return Err(make);
            }
            let key = Key::new(index, (slot.tag >> 32) as u32);
            self.free_head = slot.tag as u32;
            slot.value.write(make(key));
            slot.tag = key.0;
            self.len += 1;
            return Ok(key);
        }
        let index = self.slots.len();
        if index >= self.limit as usize {
            return Err(make);
        }
        // Growing may fail (the kernel heap is finite): the caller gets `make` back, as at
        // the limit, instead of the allocation-error handler stopping the kernel.
        if self.slots.len() == self.slots.capacity() && self.slots.try_reserve(1).is_err() {
            return Err(make);
        }
        let key = Key::new(index as u32, 1);
        self.slots.push(Slot {
            tag: key.0,
            value: MaybeUninit::new(make(key)),
        });
        self.len += 1;
        Ok(key)
    }

    /// The object named by `key`, if it is still there: a bounds check and one compare.
    #[inline]
    pub fn get(&self, key: Key) -> Option<&T> {
        let slot = self.slots.get(key.index() as usize)?;
        // SAFETY: the tag equals a key whose index is this slot's, so the slot is full
        // and its value initialised (see `Slot`).
        (slot.tag == key.0).then(|| unsafe { slot.value.assume_init_ref() })
    }

    /// The object named by `key`, mutably, if it is still there.
    #[inline]
    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let slot = self.slots.get_mut(key.index() as usize)?;
        // SAFETY: as in `get`: a matching tag means a full slot.
        (slot.tag == key.0).then(|| unsafe { slot.value.assume_init_mut() })
    }

    /// The object named by `key`, a key this slab handed out (see [`Slab::get_held`]),
    /// mutably, if it is still there: one compare.
    ///
    /// # Safety
    /// As for [`Slab::get_held`].
    #[inline(always)]
    pub unsafe fn get_held_mut(&mut self, key: Key) -> Option<&mut T> {
        let i = key.index() as usize;
        debug_assert!(i < self.slots.len(), "a key this slab never handed out");
        // SAFETY: the caller guarantees `key` came from this slab's `insert`, when slot `i`
        // existed; slots are never removed (`slots` only grows), so `i` is in bounds.
        let slot = unsafe { self.slots.get_unchecked_mut(i) };
        // SAFETY: as in `get`: a matching tag means a full slot.
        (slot.tag == key.0).then(|| unsafe { slot.value.assume_init_mut() })
    }

    /// The object named by `key`, if it is still there, for a key this slab handed out:
    /// one compare of the key with the slot's tag, without the bounds check of
    /// [`Slab::get`]. A key the kernel keeps itself (a name entry's port, a queued
    /// thread, a thread's task) was returned by `insert` when its slot existed, and a slot
    /// is never removed (the slab only grows), so its index is in bounds for good: the
    /// object may be gone (the generation then differs and the answer is `None`), the slot
    /// may not.
    ///
    /// # Safety
    /// `key` was returned by this slab's [`Slab::insert`] or [`Slab::insert_with`] (at
    /// any time before): never a key made from user input or by another slab.
    #[inline(always)]
    pub unsafe fn get_held(&self, key: Key) -> Option<&T> {
        let i = key.index() as usize;
        debug_assert!(i < self.slots.len(), "a key this slab never handed out");
        // SAFETY: as in `get_held_mut`.
        let slot = unsafe { self.slots.get_unchecked(i) };
        // SAFETY: as in `get`: a matching tag means a full slot.
        (slot.tag == key.0).then(|| unsafe { slot.value.assume_init_ref() })
    }

    /// [`Slab::get2_mut`] for two keys this slab handed out: the two compares of the keys
    /// with their slots' tags and the test that they differ, without the bounds checks.
    ///
    /// # Safety
    /// As for [`Slab::get_held`], for both keys.
    #[inline(always)]
    pub unsafe fn get2_held_mut(&mut self, a: Key, b: Key) -> Option<(&mut T, &mut T)> {
        debug_assert!(
            (a.index() as usize) < self.slots.len() && (b.index() as usize) < self.slots.len()
        );
        // SAFETY: a key this slab handed out indexes a slot that exists (slots are never
        // removed): both indices are in bounds.
        unsafe { self.get2_in_bounds(a, b) }
    }

    /// [`Slab::get2_mut`] without the bounds check.
    ///
    /// # Safety
    /// Both keys' indices are below `self.slots.len()`.
    #[inline(always)]
    unsafe fn get2_in_bounds(&mut self, a: Key, b: Key) -> Option<(&mut T, &mut T)> {
        let (i, j) = (a.index() as usize, b.index() as usize);
        if i == j {
            return None;
        }
        let base = self.slots.as_mut_ptr();
        // SAFETY: `i` and `j` are in bounds (the caller's guarantee) and distinct, so the two references are to two different live elements of
        // `slots`, which `&mut self` borrows whole for as long as they live.
        let (sa, sb) = unsafe { (&mut *base.add(i), &mut *base.add(j)) };
        if sa.tag != a.0 || sb.tag != b.0 {
            return None;
        }
        // SAFETY: both tags match keys of their slots' indices, so both slots are full.
        Some(unsafe { (sa.value.assume_init_mut(), sb.value.assume_init_mut()) })
    }

    /// The two distinct objects named by `a` and `b`, mutably, if both are there (`None`
    /// also when `a == b`).
    #[inline(always)]
    pub fn get2_mut(&mut self, a: Key, b: Key) -> Option<(&mut T, &mut T)> {
        let len = self.slots.len();
        if a.index() as usize >= len || b.index() as usize >= len {
            return None;
        }
        // SAFETY: both indices were just checked to be below the length.
        unsafe { self.get2_in_bounds(a, b) }
    }

    /// Whether `key` names an object held.
    #[inline]
    pub fn contains(&self, key: Key) -> bool {
        self.get(key).is_some()
    }

    /// Removes and returns the object named by `key`. The slot's generation moves on, so
    /// `key` never matches again; a slot whose generation would wrap is retired (never
    /// reused) instead, so no key can ever come back to life. Inlined (the RPC fast path
    /// uses a reply right up on every reply).
    #[inline(always)]
    pub fn remove(&mut self, key: Key) -> Option<T> {
        let slot = self.free_slot(key)?;
        // SAFETY: `free_slot` found the slot full under `key` and has marked it free, so
        // its value is initialised and read out exactly once.
        Some(unsafe { slot.value.assume_init_read() })
    }

    /// Marks the full slot `key` names free (its generation moves on, or it is retired
    /// when that would wrap) and returns it, its value still there for the caller to take
    /// or drop; `None`, with nothing changed, when `key` names no object.
    #[inline(always)]
    fn free_slot(&mut self, key: Key) -> Option<&mut Slot<T>> {
        let index = key.index();
        let slot = self.slots.get_mut(index as usize)?;
        if slot.tag != key.0 {
            return None;
        }
        slot.tag = match key.generation().checked_add(1) {
            Some(generation) => {
                let next_free = self.free_head;
                self.free_head = index;
                ((generation as u64) << 32) | next_free as u64
            }
            // Retired: off the free list for good (its low half is never an index).
            None => NIL as u64,
        };
        self.len -= 1;
        Some(slot)
    }

    /// Drops the object named by `key` where it lies, as [`Slab::remove`] would remove
    /// it, without moving it out: for a large object whose value the caller does not
    /// need, `remove`'s return is a copy of the whole object (a `memcpy` once it is past
    /// the compiler's inline-copy size). Whether an object was there.
    pub fn discard(&mut self, key: Key) -> bool {
        let Some(slot) = self.free_slot(key) else {
            return false;
        };
        // SAFETY: `free_slot` found the slot full under `key` and has marked it free, so
        // its value is initialised and dropped exactly once, where it lies.
        unsafe { slot.value.assume_init_drop() };
        true
    }

    /// The key of the object in slot `index`, if it holds one (a cursor for removing
    /// objects while walking the slab: [`Slab::slots`] bounds the walk).
    pub fn key_at(&self, index: usize) -> Option<Key> {
        self.slots.get(index)?.key(index)
    }

    /// Every object with its key, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (Key, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            // SAFETY: the slot is full (its tag is a key of its index).
            s.key(i).map(|k| (k, unsafe { s.value.assume_init_ref() }))
        })
    }

    /// Every object with its key, mutably, in slot order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Key, &mut T)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, s)| {
            let k = s.key(i)?;
            // SAFETY: the slot is full (its tag is a key of its index).
            Some((k, unsafe { s.value.assume_init_mut() }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::vec;

    #[test]
    fn insert_get_remove() {
        let mut s = Slab::new();
        let a = s.insert("a").unwrap();
        let b = s.insert("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(s.get(a), Some(&"a"));
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.len(), 2);
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None, "a key works once");
        assert_eq!(s.len(), 1);
        *s.get_mut(b).unwrap() = "B";
        assert_eq!(s.get(b), Some(&"B"));
    }

    /// `discard` drops the object exactly once, in place, and retires its key as
    /// `remove` does; the slot is reused by the next insert.
    #[test]
    fn discard_drops_in_place_and_kills_the_key() {
        use std::rc::Rc;
        let mut s = Slab::new();
        let probe = Rc::new(());
        let a = s.insert(Rc::clone(&probe)).unwrap();
        let b = s.insert(Rc::clone(&probe)).unwrap();
        assert_eq!(Rc::strong_count(&probe), 3);
        assert!(s.discard(a));
        assert_eq!(Rc::strong_count(&probe), 2, "dropped once");
        assert!(!s.discard(a), "a key works once");
        assert!(s.get(a).is_none());
        assert_eq!(s.len(), 1);
        assert!(!s.discard(Key::new(99, 1)));
        let c = s.insert(Rc::clone(&probe)).unwrap();
        assert_eq!(c.index(), a.index(), "the slot is reused");
        assert!(s.get(a).is_none());
        assert!(s.contains(b) && s.contains(c));
    }

    #[test]
    fn stale_keys_never_reach_new_objects() {
        let mut s = Slab::new();
        let old = s.insert(1).unwrap();
        s.remove(old);
        let new = s.insert(2).unwrap();
        assert_eq!(new.index(), old.index(), "the slot is reused");
        assert_ne!(new, old);
        assert_eq!(s.get(old), None);
        assert_eq!(s.get_mut(old), None);
        assert_eq!(s.remove(old), None);
        assert_eq!(s.get(new), Some(&2));
    }

    #[test]
    fn zero_and_forged_keys_are_rejected() {
        let mut s = Slab::new();
        let k = s.insert(7).unwrap();
        assert_eq!(s.get(Key(0)), None);
        assert_eq!(s.get(Key::new(k.index(), k.generation() + 1)), None);
        assert_eq!(s.get(Key::new(1000, 1)), None);
        assert_eq!(s.get(Key(u64::MAX)), None);
        assert!(s.contains(k));
    }

    #[test]
    fn get2_mut_gives_both_or_nothing() {
        let mut s = Slab::new();
        let a = s.insert(1).unwrap();
        let b = s.insert(2).unwrap();
        let c = s.insert(3).unwrap();
        {
            let (x, y) = s.get2_mut(c, a).unwrap();
            assert_eq!((*x, *y), (3, 1));
            *x = 30;
            *y = 10;
        }
        assert_eq!(s.get(a), Some(&10));
        assert_eq!(s.get(c), Some(&30));
        assert_eq!(s.get2_mut(a, b).map(|(x, y)| (*x, *y)), Some((10, 2)));
        assert!(s.get2_mut(a, a).is_none());
        s.remove(b);
        assert!(s.get2_mut(a, b).is_none());
        assert!(s.get2_mut(b, a).is_none());
        assert!(s.get2_mut(a, Key::new(99, 1)).is_none());
    }

    /// The held lookups agree with the checked ones for every key the slab ever handed
    /// out, through removals, reuse of slots and growth: a gone object is `None`, a reused
    /// slot's new object is reached only by its own key.
    #[test]
    fn held_lookups_agree_with_checked_ones() {
        let mut s = Slab::new();
        let mut keys = vec::Vec::new();
        for round in 0..4u32 {
            for i in 0..8u32 {
                keys.push(s.insert(round * 100 + i).unwrap());
            }
            for k in keys.iter().skip(round as usize).step_by(3) {
                s.remove(*k);
            }
            for &a in &keys {
                // SAFETY: every key in `keys` was returned by `s.insert`.
                assert_eq!(unsafe { s.get_held(a) }, s.get(a));
                let checked = s.get_mut(a).copied();
                // SAFETY: as above.
                assert_eq!(unsafe { s.get_held_mut(a) }.copied(), checked);
                for &b in &keys {
                    let checked = s.get2_mut(a, b).map(|(x, y)| (*x, *y));
                    // SAFETY: as above.
                    let held = unsafe { s.get2_held_mut(a, b) }.map(|(x, y)| (*x, *y));
                    assert_eq!(held, checked);
                }
            }
        }
        // A held mutable lookup writes the object a checked lookup then sees.
        let k = s.insert(7).unwrap();
        // SAFETY: `k` was returned by `s.insert`.
        if let Some(v) = unsafe { s.get_held_mut(k) } {
            *v = 70;
        }
        assert_eq!(s.get(k), Some(&70));
    }

    #[test]
    fn limit_is_enforced() {
        let mut s = Slab::with_limit(2);
        let a = s.insert(1).unwrap();
        s.insert(2).unwrap();
        assert_eq!(s.insert(3), Err(3));
        s.remove(a);
        assert!(s.insert(4).is_ok());
    }

    #[test]
    fn reserve_one_promises_the_next_insert() {
        let mut s = Slab::with_limit(2);
        assert!(s.reserve_one());
        assert!(s.slots.capacity() > s.slots.len());
        let a = s.insert(1).unwrap();
        assert!(s.reserve_one());
        s.insert(2).unwrap();
        assert!(!s.reserve_one());
        s.remove(a);
        assert!(s.reserve_one());
        assert!(s.insert(3).is_ok());
    }

    #[test]
    fn insert_with_knows_its_key() {
        let mut s = Slab::new();
        let k = s.insert_with(|k| k.0).ok().unwrap();
        assert_eq!(s.get(k), Some(&k.0));
    }

    #[test]
    fn wrapped_generation_retires_the_slot() {
        let mut s: Slab<u8> = Slab::new();
        let k = s.insert(1).unwrap();
        // Force the slot to the last generation.
        let last = Key::new(k.index(), u32::MAX);
        s.slots[0].tag = last.0;
        assert_eq!(s.remove(last), Some(1));
        let next = s.insert(2).unwrap();
        assert_ne!(
            next.index(),
            0,
            "a slot at the last generation is never reused"
        );
        assert_eq!(s.get(last), None);
    }

    #[test]
    fn every_held_object_is_dropped_once() {
        use std::rc::Rc;
        let token = Rc::new(());
        {
            let mut s = Slab::new();
            let keys: Vec<Key> = (0..8).map(|_| s.insert(token.clone()).unwrap()).collect();
            assert_eq!(Rc::strong_count(&token), 9);
            for k in keys.iter().step_by(2) {
                drop(s.remove(*k));
            }
            assert_eq!(
                Rc::strong_count(&token),
                5,
                "removed objects are given back"
            );
            s.insert(token.clone()).unwrap();
            assert_eq!(Rc::strong_count(&token), 6);
        }
        assert_eq!(
            Rc::strong_count(&token),
            1,
            "the slab drops what it holds, once"
        );
    }

    #[test]
    fn keys_made_from_free_slots_find_nothing() {
        // A free slot's tag is the next free index and the next generation: no key built
        // from a free slot's index, at any generation, reaches it.
        let mut s = Slab::new();
        let a = s.insert(1u32).unwrap();
        let b = s.insert(2u32).unwrap();
        s.remove(a);
        s.remove(b);
        for slot in [a.index(), b.index()] {
            for generation in [0, 1, 2, 3, u32::MAX] {
                assert_eq!(s.get(Key::new(slot, generation)), None);
                assert_eq!(s.remove(Key::new(slot, generation)), None);
            }
        }
        assert_eq!(s.iter().count(), 0);
        assert_eq!(s.key_at(0), None);
    }

    #[test]
    fn matches_a_map_under_random_operations() {
        // A small deterministic xorshift drives inserts and removes; the slab must agree
        // with a BTreeMap model at every step.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut s = Slab::new();
        let mut model: BTreeMap<Key, u64> = BTreeMap::new();
        let mut dead = vec![];
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !x.is_multiple_of(3) || model.is_empty() {
                let k = s.insert(step).unwrap();
                assert!(model.insert(k, step).is_none(), "keys are unique");
            } else {
                let victim = *model.keys().nth((x as usize / 3) % model.len()).unwrap();
                assert_eq!(s.remove(victim), model.remove(&victim));
                dead.push(victim);
            }
            assert_eq!(s.len(), model.len());
        }
        for (k, v) in &model {
            assert_eq!(s.get(*k), Some(v));
        }
        for k in dead {
            assert_eq!(s.get(k), None);
        }
        let listed: BTreeMap<Key, u64> = s.iter().map(|(k, v)| (k, *v)).collect();
        assert_eq!(listed, model);
    }
}
