//! A slab whose objects also carry a stable, never-reused `u64` id.
//!
//! Tasks are named two ways: by the id user space sees (small, counting up, never reused,
//! what `spawn` returns and what the console prints), and by a [`Key`] of the slab they live
//! in, which the kernel caches in each of the task's threads so that its hot paths (the RPC
//! fast path finds the name spaces of both tasks) reach a task in one bounds check and one
//! generation compare instead of a search-tree walk. [`IdSlab`] keeps both: the objects in a
//! [`Slab`], and the ids with their keys, sorted by id, for everything that starts from an
//! id: a binary search (ids are handed out counting up, so a new one goes at the end), and
//! room for a new entry is made fallibly, so that an insertion fails instead of stopping
//! the kernel when the heap has none.
//!
//! A lookup by id first tries a small direct-mapped table of recent keys (`recent`,
//! indexed by the id's low bits and filled on insertion), which is checked against the
//! id stored with the object in the slab: a stale or colliding entry is only a miss, after
//! which the binary search runs. With fewer live objects than the table has entries, and
//! ids counting up, every lookup by id is one table load and one slab lookup.
//!
//! # Invariants
//! - `ids` holds exactly the ids of the objects held, once each, in increasing order, each
//!   with its key: `ids.len() == slab.len()`, and `slab.get(key)` for the pair `(id, key)`
//!   is the object inserted with `id`.

use crate::slab::{Key, Slab};
use alloc::vec::Vec;

/// Objects by id and by slab key. See the module documentation.
#[derive(Debug)]
pub struct IdSlab<T> {
    slab: Slab<(u64, T)>,
    ids: Vec<(u64, Key)>,
    /// Keys of recently inserted objects, at their id modulo [`RECENT`]: a hint only,
    /// checked against the id kept in the slab.
    recent: [Key; RECENT],
}

/// Entries of the table of recent keys (a power of two).
const RECENT: usize = 64;

impl<T> Default for IdSlab<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> IdSlab<T> {
    /// Empty.
    pub const fn new() -> IdSlab<T> {
        IdSlab {
            slab: Slab::new(),
            ids: Vec::new(),
            recent: [Key(0); RECENT],
        }
    }

    /// Stores `value` under `id` and returns its key; gives the value back if `id` is
    /// already held, the slab is full or the heap has no room.
    pub fn insert(&mut self, id: u64, value: T) -> Result<Key, T> {
        let Err(at) = self.position(id) else {
            return Err(value);
        };
        if self.ids.try_reserve(1).is_err() {
            return Err(value);
        }
        let key = self.slab.insert((id, value)).map_err(|(_, v)| v)?;
        // Room reserved above: this does not allocate.
        self.ids.insert(at, (id, key));
        if let Some(r) = self.recent.get_mut(id as usize % RECENT) {
            *r = key;
        }
        Ok(key)
    }

    /// Where `id` is in `ids` (`Ok`), or where it would go (`Err`). Ids come counting up,
    /// so the last one is looked at first.
    #[inline]
    fn position(&self, id: u64) -> Result<usize, usize> {
        match self.ids.last() {
            Some(&(last, _)) if last < id => Err(self.ids.len()),
            None => Err(0),
            _ => self.ids.binary_search_by_key(&id, |&(i, _)| i),
        }
    }

    /// The key of the object `id`.
    #[inline]
    pub fn key_of(&self, id: u64) -> Option<Key> {
        if let Some(&key) = self.recent.get(id as usize % RECENT) {
            if self.slab.get(key).is_some_and(|&(i, _)| i == id) {
                return Some(key);
            }
        }
        self.key_of_slow(id)
    }

    /// [`IdSlab::key_of`] when the table of recent keys misses: the binary search.
    #[inline(never)]
    fn key_of_slow(&self, id: u64) -> Option<Key> {
        let at = self.position(id).ok()?;
        self.ids.get(at).map(|&(_, k)| k)
    }

    /// The object `id`: one slab lookup when the table of recent keys has it (the id kept
    /// with the object confirms the hint), else the binary search and a second one.
    #[inline]
    pub fn get(&self, id: &u64) -> Option<&T> {
        let id = *id;
        let hint = self.recent.get(id as usize % RECENT).copied();
        match hint.and_then(|key| self.slab.get(key)) {
            Some((i, v)) if *i == id => Some(v),
            _ => self.slab.get(self.key_of_slow(id)?).map(|(_, v)| v),
        }
    }

    /// The object `id`, mutably (as [`IdSlab::get`]). A miss of the table of recent keys
    /// puts the key found there, so that the next lookup of `id` hits: an object whose
    /// entry a later id took (and left stale when it went, as a short-lived task does) is
    /// otherwise searched for at every lookup for the rest of its life.
    #[inline]
    pub fn get_mut(&mut self, id: &u64) -> Option<&mut T> {
        let id = *id;
        let hint = self.recent.get(id as usize % RECENT).copied();
        let hit = hint.filter(|&key| self.slab.get(key).is_some_and(|&(i, _)| i == id));
        let key = match hit {
            Some(key) => key,
            None => self.refresh(id)?,
        };
        self.slab.get_mut(key).map(|(_, v)| v)
    }

    /// [`IdSlab::key_of_slow`], and the key put in the table of recent keys.
    #[inline(never)]
    fn refresh(&mut self, id: u64) -> Option<Key> {
        let key = self.key_of_slow(id)?;
        if let Some(r) = self.recent.get_mut(id as usize % RECENT) {
            *r = key;
        }
        Some(key)
    }

    /// The object `id` through `key`, a key it was known by: one slab lookup when the key
    /// still names `id`, else the lookup by id.
    #[inline]
    pub fn get_keyed(&self, id: u64, key: Key) -> Option<&T> {
        match self.slab.get(key) {
            Some((i, v)) if *i == id => Some(v),
            _ => self.get(&id),
        }
    }

    /// [`IdSlab::get_keyed`], mutably.
    #[inline]
    pub fn get_keyed_mut(&mut self, id: u64, key: Key) -> Option<&mut T> {
        if self.slab.get(key).is_some_and(|&(i, _)| i == id) {
            return self.slab.get_mut(key).map(|(_, v)| v);
        }
        self.get_mut(&id)
    }

    /// The object named by `key` (O(1)), if still there.
    #[inline]
    pub fn by_key(&self, key: Key) -> Option<&T> {
        self.slab.get(key).map(|(_, v)| v)
    }

    /// The object named by `key` (O(1)), mutably, if still there.
    #[inline]
    pub fn by_key_mut(&mut self, key: Key) -> Option<&mut T> {
        self.slab.get_mut(key).map(|(_, v)| v)
    }

    /// [`IdSlab::by_key_mut`] for a key this slab handed out: one compare, no bounds
    /// check (see [`Slab::get_held`]).
    ///
    /// # Safety
    /// `key` was returned by this slab's [`IdSlab::insert`] (at any time before).
    #[inline(always)]
    pub unsafe fn by_held_key_mut(&mut self, key: Key) -> Option<&mut T> {
        // SAFETY: the keys `insert` returns are the inner slab's.
        unsafe { self.slab.get_held_mut(key) }.map(|(_, v)| v)
    }

    /// The two distinct objects named by `a` and `b`, mutably (`None` also when `a == b`).
    #[inline]
    pub fn by_keys2_mut(&mut self, a: Key, b: Key) -> Option<(&mut T, &mut T)> {
        self.slab.get2_mut(a, b).map(|((_, x), (_, y))| (x, y))
    }

    /// Removes and returns the object `id`.
    pub fn remove(&mut self, id: &u64) -> Option<T> {
        let at = self.position(*id).ok()?;
        let (_, key) = self.ids.remove(at);
        self.slab.remove(key).map(|(_, v)| v)
    }

    /// Drops the object `id` in place ([`Slab::discard`]: no copy of it is returned).
    /// Whether it was there.
    pub fn discard(&mut self, id: &u64) -> bool {
        let Ok(at) = self.position(*id) else {
            return false;
        };
        let (_, key) = self.ids.remove(at);
        self.slab.discard(key)
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Every object, in id order.
    pub fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.ids
            .iter()
            .filter_map(|(_, k)| self.slab.get(*k).map(|(_, v)| v))
    }

    /// The smallest id held above `after` (the first with `None`): a walk over the ids
    /// that allocates nothing and lets the caller change the table between steps.
    /// O(log n).
    pub fn next_id(&self, after: Option<u64>) -> Option<u64> {
        let i = match after {
            None => 0,
            Some(a) => self.ids.partition_point(|(id, _)| *id <= a),
        };
        self.ids.get(i).map(|(id, _)| *id)
    }

    /// Every object with its id, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        self.ids
            .iter()
            .filter_map(|(id, k)| self.slab.get(*k).map(|(_, v)| (*id, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_keys_reach_the_same_object() {
        let mut s = IdSlab::new();
        let a = s.insert(1, "a").unwrap();
        let b = s.insert(2, "b").unwrap();
        assert_eq!(s.get(&1), Some(&"a"));
        assert_eq!(s.by_key(a), Some(&"a"));
        assert_eq!(s.key_of(2), Some(b));
        assert_eq!(s.insert(1, "again"), Err("again"), "ids are unique");
        let (x, y) = s.by_keys2_mut(b, a).unwrap();
        (*x, *y) = ("B", "A");
        assert_eq!(
            s.values().copied().collect::<alloc::vec::Vec<_>>(),
            ["A", "B"]
        );
        assert!(s.by_keys2_mut(a, a).is_none());
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn discard_removes_by_id() {
        let mut s = IdSlab::new();
        s.insert(1, "a").unwrap();
        s.insert(2, "b").unwrap();
        assert!(s.discard(&1));
        assert!(!s.discard(&1));
        assert_eq!(s.get(&1), None);
        assert_eq!(s.get(&2), Some(&"b"));
        assert_eq!(s.len(), 1);
        s.insert(1, "again").unwrap();
        assert_eq!(s.get(&1), Some(&"again"));
    }

    /// Ids that share an entry of the table of recent keys, removed and reinserted in any
    /// order, are always found by id exactly when they are held (the table is a hint).
    #[test]
    fn colliding_ids_are_found_through_the_search() {
        let mut s = IdSlab::new();
        let ids: alloc::vec::Vec<u64> = (0..5).map(|i| 3 + i * RECENT as u64).collect();
        for &id in &ids {
            s.insert(id, id * 10).unwrap();
        }
        for &id in &ids {
            assert_eq!(s.get(&id), Some(&(id * 10)));
        }
        assert_eq!(s.remove(&ids[4]), Some(ids[4] * 10));
        assert_eq!(s.get(&ids[4]), None, "the newest, removed, is gone");
        assert_eq!(s.get(&ids[0]), Some(&(ids[0] * 10)));
        assert_eq!(s.remove(&ids[0]), Some(ids[0] * 10));
        s.insert(ids[0], 1).unwrap();
        assert_eq!(s.get(&ids[0]), Some(&1));
        assert_eq!(s.get(&(3 + 9 * RECENT as u64)), None, "never inserted");
        for &id in &ids[1..4] {
            assert_eq!(s.key_of(id).and_then(|k| s.by_key(k)), Some(&(id * 10)));
        }
    }

    /// An object whose entry of the table of recent keys a later id took and left stale
    /// (inserted, then removed) is found by the search, and a lookup with `get_mut` puts
    /// its key back, so that the next lookups hit the table.
    #[test]
    fn a_mutable_lookup_refreshes_a_stale_hint() {
        let mut s = IdSlab::new();
        let a = s.insert(5, 50).unwrap();
        s.insert(5 + RECENT as u64, 0).unwrap();
        assert_eq!(s.remove(&(5 + RECENT as u64)), Some(0));
        assert_ne!(s.recent[5], a, "the later id took the entry");
        assert_eq!(s.get(&5), Some(&50), "found by the search");
        assert_ne!(s.recent[5], a, "a shared lookup leaves the table alone");
        *s.get_mut(&5).unwrap() = 51;
        assert_eq!(s.recent[5], a, "the entry names the object again");
        assert_eq!(s.get(&5), Some(&51));
        assert_eq!(s.get_mut(&(5 + RECENT as u64)), None, "gone ids stay gone");
        assert_eq!(s.recent[5], a, "a failed lookup changes nothing");
    }

    #[test]
    fn a_removed_object_is_gone_by_id_and_by_key() {
        let mut s = IdSlab::new();
        let a = s.insert(7, 70).unwrap();
        assert_eq!(s.remove(&7), Some(70));
        assert_eq!(s.get(&7), None);
        assert_eq!(s.by_key(a), None);
        assert_eq!(s.remove(&7), None);
        let b = s.insert(8, 80).unwrap();
        assert_eq!(b.index(), a.index(), "the slot is reused");
        assert_eq!(
            s.by_key(a),
            None,
            "the old key does not reach the new object"
        );
        assert_eq!(s.by_key(b), Some(&80));
        assert!(!s.is_empty());
        *s.get_mut(&8).unwrap() = 81;
        assert_eq!(s.iter().collect::<alloc::vec::Vec<_>>(), [(8, &81)]);
    }

    /// A key is only a hint for `get_keyed`: a stale one (its object gone, its slot
    /// reused) or one of another object falls back to the id.
    #[test]
    fn a_keyed_lookup_checks_the_id() {
        let mut s = IdSlab::new();
        let a = s.insert(1, 10).unwrap();
        let b = s.insert(2, 20).unwrap();
        assert_eq!(s.get_keyed(1, a), Some(&10));
        assert_eq!(s.get_keyed(1, b), Some(&10), "another object's key");
        *s.get_keyed_mut(2, a).unwrap() = 21;
        assert_eq!(s.get(&2), Some(&21));
        assert_eq!(s.remove(&1), Some(10));
        let c = s.insert(3, 30).unwrap();
        assert_eq!(c.index(), a.index(), "the slot is reused");
        assert_eq!(s.get_keyed(1, a), None, "gone by id and by key");
        assert_eq!(
            s.get_keyed(3, a),
            Some(&30),
            "a stale key falls back to the id"
        );
        assert_eq!(s.get_keyed_mut(1, c), None);
    }

    #[test]
    fn next_id_walks_the_ids_in_order() {
        let mut t: IdSlab<u8> = IdSlab::new();
        assert_eq!(t.next_id(None), None);
        for id in [7, 3, 11] {
            t.insert(id, 0).unwrap();
        }
        assert_eq!(t.next_id(None), Some(3));
        assert_eq!(t.next_id(Some(3)), Some(7));
        assert_eq!(t.next_id(Some(5)), Some(7));
        assert_eq!(t.next_id(Some(7)), Some(11));
        assert_eq!(t.next_id(Some(11)), None);
        t.remove(&7);
        assert_eq!(t.next_id(Some(3)), Some(11));
    }
}
