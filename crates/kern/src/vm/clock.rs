//! Page replacement: Accent's global clock (seed 002 section 2.2.6, Table 3-8), as data
//! structures and decisions only; the kernel supplies the reference bits (from the page
//! tables' accessed bits), removes the victims' translations, copies them out to the
//! default pager and frees their frames.
//!
//! - [`Clock`]: the hand, which sweeps the resident pages of every object in slot and
//!   offset order. A page whose reference bit is set gets a second chance (the bit is
//!   cleared); one whose bit is clear is a victim. The sweep is global, over every task's
//!   pages at once, as Accent's was (and Unix 4.1bsd's).
//! - [`FrameSet`]: a set of frames by number (the reference bits the kernel gathers from
//!   the page tables, and which frames are pageable).
//! - [`Slots`]: the default pager's backing store, allocated a slot at a time when a page
//!   is first paged out (lazy backing store), and given back when the page is gone or
//!   paged in again.
//!
//! # Invariants
//! - [`Clock::select`] allocates nothing and examines at most its budget of pages, so a
//!   scan's cost is bounded whatever the objects hold.
//! - A slot is handed out at most once until it is freed; a *lost* slot (its default
//!   pager died holding it) is never handed out again until the page naming it is gone.

use super::object::{Kind, Object, ObjectId, Objects, Page};
use super::PAGE_SIZE;
use alloc::vec::Vec;
use baton_abi::Error;

/// A page the clock chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim<F> {
    /// The object holding it.
    pub object: ObjectId,
    /// Its offset there.
    pub offset: u64,
    /// Its frame.
    pub frame: F,
    /// Whether its object is pager-backed (a clean page is simply dropped: its pager can
    /// supply it again); otherwise it is anonymous and goes to the default pager.
    pub pager_backed: bool,
}

/// The clock hand: the object slot and the offset in it where the sweep goes on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    slot: usize,
    offset: u64,
    /// Pages examined since the clock was made.
    pub scanned: u64,
    /// Pages passed over because they were referenced (given a second chance).
    pub spared: u64,
}

/// Whether page replacement may take pages of `o` at all: anonymous objects (and
/// shadows) and live pager-backed objects with no copy object or shadow, never pinned
/// ones (DMA buffers, program images) nor physical ones.
pub fn pageable_kind<F: Copy>(o: &Object<F>) -> bool {
    if o.pinned() {
        return false;
    }
    match o.kind() {
        Kind::Anonymous => true,
        Kind::Pager { dead: false, .. } => o.copy().is_none() && o.shadows() == 0,
        Kind::Pager { dead: true, .. } | Kind::Physical { .. } => false,
    }
}

impl Clock {
    /// A hand at the start.
    pub const fn new() -> Clock {
        Clock {
            slot: 0,
            offset: 0,
            scanned: 0,
            spared: 0,
        }
    }

    /// Moves the hand on until `out` is full (its capacity: nothing is allocated here) or
    /// `budget` pages were examined, putting in `out` the resident pages of objects for
    /// which `eligible` holds (and [`pageable_kind`]), that `keep(object, offset)` does
    /// not keep, and whose frame `referenced` says was not referenced. `referenced(frame)` tests *and clears* the frame's reference bit:
    /// a referenced page is passed over this time and taken on the next sweep unless it
    /// is referenced again. One call goes at most once round (it stops where it began),
    /// so it looks at each page once: a page spared by this call is never taken by it,
    /// even when it is the only candidate (a caller short of frames calls again, and the
    /// next call takes it if it was not used meanwhile). Returns the pages examined.
    pub fn select<F: Copy>(
        &mut self,
        objs: &Objects<F>,
        budget: usize,
        mut eligible: impl FnMut(ObjectId, &Object<F>) -> bool,
        mut keep: impl FnMut(ObjectId, u64) -> bool,
        mut referenced: impl FnMut(F) -> bool,
        out: &mut Vec<Victim<F>>,
    ) -> usize {
        let slots = objs.slots();
        if slots == 0 {
            return 0;
        }
        let mut examined = 0;
        if self.slot >= slots {
            self.slot = 0;
            self.offset = 0;
        }
        // Where this call began: once the hand has wrapped round to it, the turn is over.
        let (first_slot, first_offset) = (self.slot, self.offset);
        let mut wrapped = false;
        // Every slot is left at most once per call, so the walk ends even with nothing
        // pageable (the turn's end ends it first; this bounds it whatever happens).
        let mut moves = 0;
        while out.len() < out.capacity() && examined < budget && moves <= slots {
            if self.slot >= slots {
                self.slot = 0;
                self.offset = 0;
                wrapped = true;
            }
            if wrapped && self.slot > first_slot {
                break;
            }
            let next = objs.at(self.slot).and_then(|(id, o)| {
                if !pageable_kind(o) || !eligible(id, o) {
                    return None;
                }
                let (off, f) = o.resident_range(self.offset, u64::MAX).next()?;
                Some((id, off, f, matches!(o.kind(), Kind::Pager { .. })))
            });
            if wrapped && self.slot == first_slot {
                // Back in the slot the call began in: only the pages before its start
                // are left of the turn (the hand stays on the next one for the next call).
                match next {
                    Some((_, off, ..)) if off < first_offset => {}
                    Some((_, off, ..)) => {
                        self.offset = off;
                        break;
                    }
                    None => {
                        self.offset = first_offset;
                        break;
                    }
                }
            }
            let Some((object, offset, frame, pager_backed)) = next else {
                self.slot += 1;
                self.offset = 0;
                moves += 1;
                continue;
            };
            examined += 1;
            self.scanned += 1;
            self.offset = offset.saturating_add(PAGE_SIZE);
            if keep(object, offset) {
                continue;
            }
            if referenced(frame) {
                self.spared += 1;
                continue;
            }
            out.push(Victim {
                object,
                offset,
                frame,
                pager_backed,
            });
        }
        examined
    }
}

/// A set of frames, by frame number (physical address / [`PAGE_SIZE`]), over a fixed
/// span of frame numbers; frames outside it are never members.
#[derive(Clone, Debug, Default)]
pub struct FrameSet {
    base: u64,
    count: u64,
    bits: Vec<u64>,
    len: u64,
}

impl FrameSet {
    /// An empty set able to hold frame numbers `first..first + count`; `NoMemory` when its
    /// bitmap cannot be allocated.
    pub fn new(first: u64, count: u64) -> Result<FrameSet, Error> {
        let words = usize::try_from(count.div_ceil(64)).map_err(|_| Error::NoMemory)?;
        let mut bits = Vec::new();
        bits.try_reserve_exact(words).map_err(|_| Error::NoMemory)?;
        bits.resize(words, 0);
        Ok(FrameSet {
            base: first,
            count,
            bits,
            len: 0,
        })
    }

    #[inline(always)]
    fn at(&self, addr: u64) -> Option<(usize, u64)> {
        // A frame below the span wraps to a number far above it: one comparison refuses
        // both (the word itself is still found with a checked `get`).
        let n = (addr / PAGE_SIZE).wrapping_sub(self.base);
        if n >= self.count {
            return None;
        }
        Some(((n / 64) as usize, 1 << (n % 64)))
    }

    /// Adds the frame at physical address `addr`; whether it was added (not there yet,
    /// and inside the span).
    pub fn insert(&mut self, addr: u64) -> bool {
        let Some((w, b)) = self.at(addr) else {
            return false;
        };
        match self.bits.get_mut(w) {
            Some(word) if *word & b == 0 => {
                *word |= b;
                self.len += 1;
                true
            }
            _ => false,
        }
    }

    /// Removes the frame at `addr`; whether it was there.
    pub fn remove(&mut self, addr: u64) -> bool {
        let Some((w, b)) = self.at(addr) else {
            return false;
        };
        match self.bits.get_mut(w) {
            Some(word) if *word & b != 0 => {
                *word &= !b;
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// Whether the frame at `addr` is in the set.
    pub fn contains(&self, addr: u64) -> bool {
        self.at(addr)
            .and_then(|(w, b)| self.bits.get(w).map(|word| word & b != 0))
            .unwrap_or(false)
    }

    /// Members.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The default pager's backing store, as the kernel hands it out: `capacity` slots of one
/// page, each used by at most one paged-out page.
#[derive(Clone, Debug, Default)]
pub struct Slots {
    used: Vec<u64>,
    lost: Vec<u64>,
    capacity: u32,
    in_use: u32,
    hint: u32,
}

/// Most slots a store may have (1 GiB of 4 KiB pages).
pub const SLOTS_MAX: u32 = 1 << 18;

impl Slots {
    /// A store of no slots (no default pager yet).
    pub const fn new() -> Slots {
        Slots {
            used: Vec::new(),
            lost: Vec::new(),
            capacity: 0,
            in_use: 0,
            hint: 0,
        }
    }

    /// A (new) default pager offers `capacity` slots: slots below it become available,
    /// except those still lost or used. The bitmaps grow to cover it (`NoMemory` if they
    /// cannot; `TooLarge` past [`SLOTS_MAX`]). A smaller capacity than before leaves the
    /// slots above it used until freed and never hands them out again.
    pub fn set_capacity(&mut self, capacity: u32) -> Result<(), Error> {
        if capacity > SLOTS_MAX {
            return Err(Error::TooLarge);
        }
        let words = (capacity as usize).div_ceil(64);
        if words > self.used.len() {
            let more = words - self.used.len();
            self.used
                .try_reserve_exact(more)
                .map_err(|_| Error::NoMemory)?;
            self.lost
                .try_reserve_exact(more)
                .map_err(|_| Error::NoMemory)?;
            self.used.resize(words, 0);
            self.lost.resize(words, 0);
        }
        self.capacity = capacity;
        self.hint = 0;
        Ok(())
    }

    /// Slots offered.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Slots in use (lost ones included).
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    fn bit(slot: u32) -> (usize, u64) {
        ((slot / 64) as usize, 1 << (slot % 64))
    }

    /// A free slot, now used; `None` when the store is full.
    pub fn alloc(&mut self) -> Option<u32> {
        if self.in_use >= self.capacity {
            return None;
        }
        for i in 0..self.capacity {
            let s = (self.hint + i) % self.capacity;
            let (w, b) = Self::bit(s);
            let word = self.used.get_mut(w)?;
            if *word & b == 0 {
                *word |= b;
                self.in_use += 1;
                self.hint = (s + 1) % self.capacity;
                return Some(s);
            }
        }
        None
    }

    /// Gives `slot` back (its page is gone or resident again); nothing if it is not used.
    pub fn free(&mut self, slot: u32) {
        let (w, b) = Self::bit(slot);
        if let Some(word) = self.used.get_mut(w) {
            if *word & b != 0 {
                *word &= !b;
                self.in_use = self.in_use.saturating_sub(1);
                if let Some(l) = self.lost.get_mut(w) {
                    *l &= !b;
                }
            }
        }
    }

    /// Whether `slot` is used.
    pub fn is_used(&self, slot: u32) -> bool {
        let (w, b) = Self::bit(slot);
        self.used.get(w).is_some_and(|word| word & b != 0)
    }

    /// The default pager died: every slot in use is *lost* (its contents are gone; a
    /// fault on its page is an error) until its page goes; nothing more is offered until
    /// a new pager sets a capacity.
    pub fn lose_all(&mut self) {
        for (l, u) in self.lost.iter_mut().zip(&self.used) {
            *l |= *u;
        }
        self.capacity = 0;
    }

    /// Whether `slot`'s contents were lost with a default pager.
    pub fn is_lost(&self, slot: u32) -> bool {
        let (w, b) = Self::bit(slot);
        self.lost.get(w).is_some_and(|word| word & b != 0)
    }
}

/// Counts the pages of `objs` paged out (the [`Page::Out`] pages), for checks.
pub fn out_pages<F: Copy>(objs: &Objects<F>) -> usize {
    objs.iter()
        .map(|(_, o)| {
            o.iter_pages()
                .filter(|(_, p)| matches!(p, Page::Out { .. }))
                .count()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Account;
    use std::vec;

    const P: u64 = PAGE_SIZE;

    #[test]
    fn slots_are_handed_out_once_and_lost_with_their_pager() {
        let mut s = Slots::new();
        assert_eq!(s.alloc(), None, "no store yet");
        s.set_capacity(3).unwrap();
        let a = s.alloc().unwrap();
        let b = s.alloc().unwrap();
        let c = s.alloc().unwrap();
        assert!(a != b && b != c && a != c);
        assert_eq!(s.alloc(), None, "full");
        s.free(b);
        assert_eq!(s.alloc(), Some(b));
        s.lose_all();
        assert!(s.is_lost(a) && s.is_lost(b));
        assert_eq!(s.alloc(), None, "no pager, no store");
        s.set_capacity(3).unwrap();
        assert_eq!(s.alloc(), None, "lost slots are not offered again");
        s.free(a);
        assert!(!s.is_lost(a));
        assert_eq!(s.alloc(), Some(a));
        assert_eq!(s.set_capacity(SLOTS_MAX + 1), Err(Error::TooLarge));
    }

    #[test]
    fn frame_sets_hold_only_their_span() {
        let mut f = FrameSet::new(16, 100).unwrap();
        assert!(!f.insert(15 * P), "below the span");
        assert!(!f.insert(116 * P), "above the span");
        assert!(f.insert(16 * P) && f.insert(115 * P));
        assert!(!f.insert(16 * P), "twice");
        assert_eq!(f.len(), 2);
        assert!(f.contains(115 * P) && !f.contains(17 * P));
        assert!(f.remove(16 * P) && !f.remove(16 * P));
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn the_clock_gives_referenced_pages_a_second_chance() {
        let root = Account::root(1 << 30, 1 << 20).unwrap();
        let mut objs: Objects<u64> = Objects::new(64);
        let a = objs.anonymous(8 * P, &root).unwrap();
        let pinned = objs.anonymous(8 * P, &root).unwrap();
        objs.pin(pinned);
        for i in 0..4 {
            objs.insert_page(a, i * P, 100 + i).unwrap();
            objs.insert_page(pinned, i * P, 200 + i).unwrap();
        }
        objs.insert_page(a, 6 * P, 106).unwrap();
        let mut refd: Vec<u64> = vec![101, 103];
        let mut clock = Clock::new();
        let mut out = Vec::with_capacity(4);
        clock.select(
            &objs,
            100,
            |_, _| true,
            |_, off| off == 6 * P,
            |f| {
                let was = refd.contains(&f);
                refd.retain(|&x| x != f);
                was
            },
            &mut out,
        );
        let frames: Vec<u64> = out.iter().map(|v| v.frame).collect();
        // 100 and 102 now; 101 and 103 were spared (their bits cleared), and one call
        // goes round once, so they are left for the next.
        assert_eq!(frames, vec![100, 102]);
        assert!(out.iter().all(|v| v.object == a && !v.pager_backed));
        assert_eq!(clock.spared, 2);
        // The next call (the hand back at the start) takes them, not referenced since.
        let mut out = Vec::with_capacity(4);
        clock.select(
            &objs,
            100,
            |_, _| true,
            |_, off| off == 6 * P,
            |_| false,
            &mut out,
        );
        let frames: Vec<u64> = out.iter().map(|v| v.frame).collect();
        assert_eq!(frames, vec![100, 101, 102, 103]);
        // The budget bounds a scan.
        let mut out = Vec::with_capacity(4);
        assert_eq!(
            clock.select(&objs, 1, |_, _| true, |_, _| false, |_| true, &mut out),
            1
        );
        assert!(out.is_empty());
        // Nothing eligible: the walk ends.
        let mut out = Vec::with_capacity(4);
        assert_eq!(
            clock.select(&objs, 100, |_, _| false, |_, _| false, |_| false, &mut out),
            0
        );
        // Pages kept (a wired window) are passed over, the rest of the object not.
        let mut out = Vec::with_capacity(4);
        clock.select(
            &objs,
            100,
            |_, _| true,
            |_, off| off != 2 * P,
            |_| false,
            &mut out,
        );
        assert!(out.iter().all(|v| v.offset == 2 * P) && !out.is_empty());
        objs.release(a, &mut crate::vm::testing::Recorder::default());
        objs.release(pinned, &mut crate::vm::testing::Recorder::default());
    }

    /// Takes and clears `f`'s bit in `refd`: whether it was set.
    fn test_and_clear(refd: &mut Vec<u64>, f: u64) -> bool {
        let was = refd.contains(&f);
        refd.retain(|&x| x != f);
        was
    }

    #[test]
    fn one_call_never_takes_a_page_it_spared() {
        let root = Account::root(1 << 30, 1 << 20).unwrap();
        let mut objs: Objects<u64> = Objects::new(64);
        let a = objs.anonymous(8 * P, &root).unwrap();
        objs.insert_page(a, 3 * P, 103).unwrap();
        // The only candidate, used since the last sweep: spared, and not visited again
        // by the same call however much room and budget it has.
        let mut refd = vec![103];
        let mut clock = Clock::new();
        let mut out = Vec::with_capacity(8);
        let examined = clock.select(
            &objs,
            100,
            |_, _| true,
            |_, _| false,
            |f| test_and_clear(&mut refd, f),
            &mut out,
        );
        assert!(out.is_empty(), "taken in the call that spared it: {out:?}");
        assert_eq!((examined, clock.spared), (1, 1));
        // Used again before the next call: spared again.
        refd.push(103);
        clock.select(
            &objs,
            100,
            |_, _| true,
            |_, _| false,
            |f| test_and_clear(&mut refd, f),
            &mut out,
        );
        assert!(out.is_empty());
        // Not used since: the next call takes it, once.
        let examined = clock.select(
            &objs,
            100,
            |_, _| true,
            |_, _| false,
            |f| test_and_clear(&mut refd, f),
            &mut out,
        );
        assert_eq!(examined, 1);
        assert_eq!(out.iter().map(|v| v.frame).collect::<Vec<_>>(), vec![103]);
        objs.release(a, &mut crate::vm::testing::Recorder::default());
    }

    #[test]
    fn a_turn_ends_where_it_began_in_the_middle_of_an_object() {
        let root = Account::root(1 << 30, 1 << 20).unwrap();
        let mut objs: Objects<u64> = Objects::new(64);
        let a = objs.anonymous(8 * P, &root).unwrap();
        let b = objs.anonymous(8 * P, &root).unwrap();
        for i in 0..4 {
            objs.insert_page(a, i * P, 100 + i).unwrap();
            objs.insert_page(b, i * P, 200 + i).unwrap();
        }
        let mut clock = Clock::new();
        // Two taken: the hand stops on a's third page.
        let mut out = Vec::with_capacity(2);
        clock.select(&objs, 100, |_, _| true, |_, _| false, |_| false, &mut out);
        assert_eq!(
            out.iter().map(|v| v.frame).collect::<Vec<_>>(),
            vec![100, 101]
        );
        // Every page referenced: one turn from a's third page round to it, each page
        // seen once, none taken.
        let mut seen = Vec::new();
        let mut out = Vec::with_capacity(16);
        let examined = clock.select(
            &objs,
            100,
            |_, _| true,
            |_, _| false,
            |f| {
                seen.push(f);
                true
            },
            &mut out,
        );
        assert!(out.is_empty());
        assert_eq!(examined, 8);
        assert_eq!(seen, vec![102, 103, 200, 201, 202, 203, 100, 101]);
        // The next call begins where this one ended.
        let mut out = Vec::with_capacity(1);
        clock.select(&objs, 100, |_, _| true, |_, _| false, |_| false, &mut out);
        assert_eq!(out.iter().map(|v| v.frame).collect::<Vec<_>>(), vec![102]);
        objs.release(a, &mut crate::vm::testing::Recorder::default());
        objs.release(b, &mut crate::vm::testing::Recorder::default());
    }
}
