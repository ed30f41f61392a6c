//! The reverse map: for each physical frame of user memory, the translations (task,
//! virtual page) that may map it, so that taking a page away from everyone — a page-out,
//! a shadow-chain collapse freeing a hidden page, a copy object write-protecting its
//! pages, a pager's flush or lock — visits the translations of that page only, not every
//! task's (Mach's physical-to-virtual lists, `pv_entry`s, here kept as cheaply as the
//! fault path allows).
//!
//! Page tables are a cache of the maps, and this map is a cache of the page tables: it
//! records every translation the kernel enters and never has to be told when one goes.
//! A record is a *candidate*: whoever acts on it checks that the task's page table still
//! maps that frame at that address (`kern::pmap::AddressSpace::update_leaves` on the one
//! page, comparing the frame), so a stale record costs a walk and does nothing. What the
//! map must never do is *miss* a translation: a frame whose translation could not be
//! recorded (no memory for the record) is marked *unknown* until it is freed, and the
//! caller then falls back to sweeping every task, as before the map existed.
//!
//! - Two words per frame of the frame allocator's span, made at boot (sixteen bytes per
//!   4 KiB frame: 1/256 of memory), hold the first two translations: recording a private
//!   page's translation, the zero-fill fault's case, is one store, and so is the second
//!   mapping of a page shared by two (a region received out of line and its sender, a
//!   parent and its child after a fork). A translation removed from its own task's map
//!   ([`Rmap::forget`]) frees its word.
//! - A frame mapped at more places (memory shared by several tasks) keeps the others in
//!   a tree of records keyed by
//!   the frame's address and an index (`frame | 1 ..= frame | 0xfff`), each charged to the
//!   account of the task whose translation it records; recording first drops that task's
//!   stale records of the frame, so a task has at most one record more per frame than it
//!   has translations of it.
//! - Records go when their frame is freed ([`Rmap::frame_freed`]) or their task ends
//!   ([`Rmap::task_gone`]): every charge comes back.
//!
//! # Invariants
//! - Every translation of a frame in the span that the kernel entered through
//!   [`Rmap::record`] and that still exists is recorded (inline or in the tree), or the
//!   frame is marked unknown.
//! - `unknown` counts the frames marked unknown; `tasks` holds, for each task with tree
//!   records, their number (and the charge of its own node).
//! - A frame with tree records has [`MORE`] set in its word.

use super::tree::Tree;
use super::PAGE_SIZE;
use crate::quota::{Account, AccountRef, Charge, Resource};
use alloc::vec::Vec;
use baton_abi::Error;

/// Bits of the virtual page number kept inline (user addresses are below 2^47).
const VPN_BITS: u32 = 35;
/// log2 of the page size.
const PAGE_SHIFT: u32 = PAGE_SIZE.trailing_zeros();
/// Bits of the task id kept inline.
const TASK_BITS: u32 = 27;
const VPN_MASK: u64 = (1 << VPN_BITS) - 1;
const TASK_MASK: u64 = (1 << TASK_BITS) - 1;
/// The frame has records in the tree.
pub const MORE: u64 = 1 << 62;
/// A translation of the frame could not be recorded: its translations are not all known.
pub const UNKNOWN: u64 = 1 << 63;
/// The largest index of a frame's tree records (`frame | index`).
const INDEX_MAX: u64 = PAGE_SIZE - 1;

/// One translation recorded in the tree.
#[derive(Debug)]
pub struct Record {
    task: u64,
    va: u64,
    _charge: Charge,
}

/// A task's count of tree records.
#[derive(Debug)]
struct TaskCount {
    records: u64,
    _charge: Charge,
}

/// Heap charged for one tree record.
pub const RECORD_BYTES: u64 = Tree::<Record>::NODE_BYTES;

/// What [`Rmap::each`] knows of a frame's translations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// Every translation was passed to the callback (perhaps with stale ones).
    All,
    /// Not every translation is known (the frame is unknown or outside the span): the
    /// caller must look at every task's.
    Partial,
}

/// The reverse map. See the module documentation.
#[derive(Debug, Default)]
pub struct Rmap {
    /// First frame number of the span.
    base: u64,
    words: Vec<u64>,
    more: Tree<Record>,
    tasks: Tree<TaskCount>,
    unknown: u64,
    /// The last [`ENDED`] tasks that ended (0: none). Task ids are never used again, so an
    /// inline word naming one of them is stale for certain: [`Rmap::record_fast`] takes
    /// its place without asking the page tables (the next run of a program maps the same
    /// image pages its last run's words still name).
    ended: [u64; ENDED],
    /// Where the next ended task goes in `ended`.
    ended_at: usize,
}

/// How many ended tasks [`Rmap`] remembers.
const ENDED: usize = 8;

/// The inline word for (`task`, `va`), if both fit.
fn pack(task: u64, va: u64) -> Option<u64> {
    let vpn = va / PAGE_SIZE;
    (task != 0 && task <= TASK_MASK && vpn <= VPN_MASK && vpn != 0)
        .then_some(task << VPN_BITS | vpn)
}

/// The two words of `frame` in `words` (a map whose span starts at frame number
/// `base`), found with one slice check (the fault path's and the unmap path's way;
/// [`Rmap::slot`] is the checked one). `None` outside the span.
#[inline(always)]
fn words_mut(words: &mut [u64], base: u64, frame: u64) -> Option<&mut [u64; 2]> {
    // A frame below the span wraps to an index far beyond it (frame numbers are below
    // 2^52), which `get_mut` refuses like one above it.
    let i = ((frame >> PAGE_SHIFT).wrapping_sub(base) as usize).wrapping_mul(2);
    words.get_mut(i..).and_then(|w| w.first_chunk_mut::<2>())
}

/// [`pack`] as the fault and unmap paths test it: one shift-or and a compare. It takes
/// task 0 and page 0 too, which no translation the kernel records has, so the two
/// agree on every word that is ever packed.
#[inline(always)]
fn pack_fast(task: u64, va: u64) -> Option<u64> {
    ((task >> TASK_BITS) | (va >> (VPN_BITS + PAGE_SHIFT)) == 0)
        .then_some(task << VPN_BITS | va >> PAGE_SHIFT)
}

/// The (task, va) of an inline word (task 0: none).
fn unpack(w: u64) -> (u64, u64) {
    ((w >> VPN_BITS) & TASK_MASK, (w & VPN_MASK) * PAGE_SIZE)
}

impl Rmap {
    /// A map for frame numbers `first..first + count` (physical address / page size),
    /// all unmapped; `NoMemory` when its words cannot be allocated.
    pub fn new(first: u64, count: u64) -> Result<Rmap, Error> {
        let n = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(2))
            .ok_or(Error::NoMemory)?;
        let mut words = Vec::new();
        words.try_reserve_exact(n).map_err(|_| Error::NoMemory)?;
        words.resize(n, 0);
        Ok(Rmap {
            base: first,
            words,
            more: Tree::new(),
            tasks: Tree::new(),
            unknown: 0,
            ended: [0; ENDED],
            ended_at: 0,
        })
    }

    /// The index of `frame`'s first word (its second follows).
    #[inline(always)]
    fn slot(&self, frame: u64) -> Option<usize> {
        let n = (frame / PAGE_SIZE).checked_sub(self.base)?;
        usize::try_from(n)
            .ok()
            .map(|i| 2 * i)
            .filter(|&i| i + 1 < self.words.len())
    }

    /// [`Rmap::record`] where it costs nothing: the translation is recorded already, or an
    /// inline word is free for it, or the frame is outside the span (nothing recorded).
    /// `false` when [`Rmap::record`] must be called (which may look at page tables).
    ///
    /// The zero-fill fault's case, a frame with no record (its words were cleared when
    /// it was last freed), is tested first: two loads, a test and a store.
    #[inline(always)]
    pub fn record_fast(&mut self, frame: u64, task: u64, va: u64) -> bool {
        // A task id or address too large to pack goes the slow way (the tree).
        let Some(p) = pack_fast(task, va) else {
            return false;
        };
        let Some([a, b]) = words_mut(&mut self.words, self.base, frame) else {
            return true;
        };
        if *a | *b == 0 {
            *a = p;
            return true;
        }
        let ia = *a & !(MORE | UNKNOWN);
        if ia == p || *b == p {
            return true;
        }
        if ia == 0 {
            *a |= p;
            return true;
        }
        if *b == 0 {
            *b = p;
            return true;
        }
        // A word naming a task that has ended gives its place.
        let ended = &self.ended;
        let gone = |w: u64| ended.contains(&((w >> VPN_BITS) & TASK_MASK));
        if gone(ia) {
            *a = p | (*a & (MORE | UNKNOWN));
            return true;
        }
        if gone(*b) {
            *b = p;
            return true;
        }
        false
    }

    /// Task `task`'s translation of `frame` at `va` was removed: its record goes (a record
    /// left behind would only be stale; forgetting it keeps its place free for the next).
    #[inline(always)]
    pub fn forget(&mut self, frame: u64, task: u64, va: u64) {
        let Some([a, b]) = words_mut(&mut self.words, self.base, frame) else {
            return;
        };
        let Some(p) = pack_fast(task, va) else {
            // Never packed: only the tree can hold it.
            return self.forget_more(frame, task, va);
        };
        if *a & !(MORE | UNKNOWN) == p {
            *a &= MORE | UNKNOWN;
        } else if *b == p {
            *b = 0;
        } else if *a & MORE != 0 {
            self.forget_more(frame, task, va);
        }
    }

    #[cold]
    fn forget_more(&mut self, frame: u64, task: u64, va: u64) {
        let frame = frame & !(PAGE_SIZE - 1);
        let key = self
            .more
            .range(frame | 1, (frame | INDEX_MAX) + 1)
            .find(|(_, r)| r.task == task && r.va == va)
            .map(|(k, _)| k);
        if let Some(k) = key {
            self.remove_record(k);
        }
    }

    /// Whether the map covers a span (it was made; a default map knows no frame).
    pub fn ready(&self) -> bool {
        !self.words.is_empty()
    }

    /// Frames marked unknown now.
    pub fn unknown(&self) -> u64 {
        self.unknown
    }

    /// Records in the tree (translations beyond each frame's first).
    pub fn records(&self) -> usize {
        self.more.len()
    }

    /// Records that task `task`'s page table maps `frame` at `va`. `live(task, va)` says
    /// whether that task's page table still maps `frame` at `va`: a recorded translation
    /// found stale is replaced (the inline word) or dropped (the task's own tree records
    /// of the frame) rather than kept beside the new one. A record that cannot be had
    /// (the task's account at its limit, no heap, more than 4,095 of one frame) marks
    /// the frame unknown. Frames outside the span are not recorded ([`Rmap::each`] says
    /// so).
    pub fn record(
        &mut self,
        frame: u64,
        task: u64,
        va: u64,
        account: &AccountRef,
        mut live: impl FnMut(u64, u64) -> bool,
    ) {
        if self.record_fast(frame, task, va) {
            return;
        }
        let Some(i) = self.slot(frame) else {
            return;
        };
        let Some(&w) = self.words.get(i) else {
            return;
        };
        if let Some(p) = pack(task, va) {
            // Both inline words taken: a stale one gives its place.
            for j in [i, i + 1] {
                let Some(&x) = self.words.get(j) else {
                    continue;
                };
                let (t, old_va) = unpack(x & !(MORE | UNKNOWN));
                if t == 0 || !live(t, old_va) {
                    if let Some(word) = self.words.get_mut(j) {
                        *word = p | (x & (MORE | UNKNOWN));
                    }
                    return;
                }
            }
        }
        if w & UNKNOWN != 0 {
            // Nothing recorded would be used: the frame is swept anyway until freed.
            return;
        }
        let frame = frame & !(PAGE_SIZE - 1);
        let (lo, hi) = (frame | 1, frame | INDEX_MAX);
        if w & MORE != 0 {
            if self
                .more
                .range(lo, hi + 1)
                .any(|(_, r)| r.task == task && r.va == va)
            {
                return;
            }
            // The task's stale records of the frame go (one at a time: each removal
            // changes the tree).
            loop {
                let stale = self
                    .more
                    .range(lo, hi + 1)
                    .find(|(_, r)| r.task == task && !live(r.task, r.va))
                    .map(|(k, _)| k);
                let Some(key) = stale else {
                    break;
                };
                self.remove_record(key);
            }
        }
        let last = self.more.floor(hi).map_or(frame, |(k, _)| k.max(frame));
        let last = if last < lo { frame } else { last };
        let index = (last & INDEX_MAX) + 1;
        if index > INDEX_MAX || self.add_record(frame | index, task, va, account).is_err() {
            self.mark_unknown(i);
            return;
        }
        if let Some(word) = self.words.get_mut(i) {
            *word |= MORE;
        }
    }

    fn add_record(
        &mut self,
        key: u64,
        task: u64,
        va: u64,
        account: &AccountRef,
    ) -> Result<(), Error> {
        let charge = Account::charge(account, Resource::Heap, RECORD_BYTES)?;
        if let Some(c) = self.tasks.get_mut(task) {
            self.more.insert(
                key,
                Record {
                    task,
                    va,
                    _charge: charge,
                },
            )?;
            c.records += 1;
            return Ok(());
        }
        let count_charge = Account::charge(account, Resource::Heap, Tree::<TaskCount>::NODE_BYTES)?;
        self.tasks.insert(
            task,
            TaskCount {
                records: 0,
                _charge: count_charge,
            },
        )?;
        if let Err(e) = self.more.insert(
            key,
            Record {
                task,
                va,
                _charge: charge,
            },
        ) {
            self.tasks.remove(task);
            return Err(e);
        }
        if let Some(c) = self.tasks.get_mut(task) {
            c.records = 1;
        }
        Ok(())
    }

    fn remove_record(&mut self, key: u64) {
        let Some(r) = self.more.remove(key) else {
            return;
        };
        let gone = match self.tasks.get_mut(r.task) {
            Some(c) => {
                c.records = c.records.saturating_sub(1);
                c.records == 0
            }
            None => false,
        };
        if gone {
            self.tasks.remove(r.task);
        }
    }

    fn mark_unknown(&mut self, i: usize) {
        if let Some(word) = self.words.get_mut(i) {
            if *word & UNKNOWN == 0 {
                *word |= UNKNOWN;
                self.unknown += 1;
            }
        }
    }

    /// Calls `f(task, va)` for every recorded translation of `frame` (stale ones
    /// included: the caller checks each page table); whether that is all of them.
    pub fn each(&self, frame: u64, mut f: impl FnMut(u64, u64)) -> Known {
        let Some(i) = self.slot(frame) else {
            return Known::Partial;
        };
        let (Some(&w), Some(&second)) = (self.words.get(i), self.words.get(i + 1)) else {
            return Known::Partial;
        };
        for x in [w & !(MORE | UNKNOWN), second] {
            let (t, va) = unpack(x);
            if t != 0 {
                f(t, va);
            }
        }
        if w & MORE != 0 {
            let frame = frame & !(PAGE_SIZE - 1);
            for (_, r) in self.more.range(frame | 1, (frame | INDEX_MAX) + 1) {
                f(r.task, r.va);
            }
        }
        if w & UNKNOWN != 0 {
            Known::Partial
        } else {
            Known::All
        }
    }

    /// `frame` went back to the frame allocator: it has no translation (the virtual-memory
    /// core removes them first), so its records go and their charges come back.
    #[inline]
    pub fn frame_freed(&mut self, frame: u64) {
        let Some(i) = self.slot(frame) else {
            return;
        };
        if let Some(second) = self.words.get_mut(i + 1) {
            *second = 0;
        }
        let Some(word) = self.words.get_mut(i) else {
            return;
        };
        let w = core::mem::take(word);
        if w & (MORE | UNKNOWN) != 0 {
            self.frame_freed_slow(frame & !(PAGE_SIZE - 1), w);
        }
    }

    #[cold]
    fn frame_freed_slow(&mut self, frame: u64, w: u64) {
        if w & UNKNOWN != 0 {
            self.unknown = self.unknown.saturating_sub(1);
        }
        if w & MORE != 0 {
            while let Some((key, _)) = self
                .more
                .ceil(frame | 1)
                .filter(|&(k, _)| k <= frame | INDEX_MAX)
            {
                self.remove_record(key);
            }
        }
    }

    /// Task `task` ended: its tree records go, and their charges come back (its inline
    /// words name a task that no longer maps anything: the next translation recorded for
    /// their frame replaces them, without asking the page tables while the task is among
    /// the last few that ended). A task id must never be used again after this.
    pub fn task_gone(&mut self, task: u64) {
        if task != 0 && task <= TASK_MASK {
            if let Some(slot) = self.ended.get_mut(self.ended_at) {
                *slot = task;
            }
            self.ended_at = (self.ended_at + 1) % ENDED;
        }
        if !self.tasks.contains(task) {
            return;
        }
        let mut at = 0;
        while let Some((key, r)) = self.more.ceil(at) {
            at = key.saturating_add(1);
            if r.task == task {
                let frame = key & !INDEX_MAX;
                self.remove_record(key);
                let others = self
                    .more
                    .ceil(frame | 1)
                    .is_some_and(|(k, _)| k <= frame | INDEX_MAX);
                if !others {
                    if let Some(word) = self.slot(frame).and_then(|i| self.words.get_mut(i)) {
                        *word &= !MORE;
                    }
                }
                if !self.tasks.contains(task) {
                    break;
                }
            }
            if key == u64::MAX {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Account;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    const F0: u64 = 0x10_0000;

    fn frame(n: u64) -> u64 {
        F0 + n * PAGE_SIZE
    }

    /// The page tables the map caches: (task, va) -> frame.
    type Tables = BTreeMap<(u64, u64), u64>;

    fn known(r: &Rmap, f: u64) -> (Known, BTreeSet<(u64, u64)>) {
        let mut seen = BTreeSet::new();
        let k = r.each(f, |t, va| {
            seen.insert((t, va));
        });
        (k, seen)
    }

    fn enter(r: &mut Rmap, pt: &mut Tables, acct: &AccountRef, f: u64, task: u64, va: u64) {
        pt.insert((task, va), f);
        let snapshot = pt.clone();
        r.record(f, task, va, acct, |t, v| snapshot.get(&(t, v)) == Some(&f));
    }

    #[test]
    fn first_translation_is_inline_and_costs_nothing() {
        let acct = Account::root(1 << 20, 100).unwrap();
        let mut r = Rmap::new(F0 / PAGE_SIZE, 16).unwrap();
        let mut pt = Tables::new();
        enter(&mut r, &mut pt, &acct, frame(3), 7, 0x40_0000);
        assert_eq!(r.records(), 0);
        assert_eq!(acct.used(Resource::Heap), 0);
        let (k, seen) = known(&r, frame(3));
        assert_eq!(k, Known::All);
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [(7, 0x40_0000)]);
        // Entered again at the same place: nothing new.
        enter(&mut r, &mut pt, &acct, frame(3), 7, 0x40_0000);
        assert_eq!(r.records(), 0);
    }

    #[test]
    fn shared_frames_keep_every_translation_and_charge_their_task() {
        let a = Account::root(1 << 20, 100).unwrap();
        let b = Account::root(1 << 20, 100).unwrap();
        let mut r = Rmap::new(F0 / PAGE_SIZE, 16).unwrap();
        let mut pt = Tables::new();
        enter(&mut r, &mut pt, &a, frame(1), 1, 0x1000);
        enter(&mut r, &mut pt, &b, frame(1), 2, 0x2000);
        // Two translations fit inline; the third is a record charged to its task.
        assert_eq!(r.records(), 0);
        enter(&mut r, &mut pt, &b, frame(1), 2, 0x3000);
        assert_eq!(r.records(), 1);
        assert_eq!(a.used(Resource::Heap), 0);
        assert!(b.used(Resource::Heap) >= RECORD_BYTES);
        let (k, seen) = known(&r, frame(1));
        assert_eq!(k, Known::All);
        assert_eq!(seen.len(), 3);
        // Task 2 unmaps 0x2000 (unknown to the map) and maps the frame at 0x5000: the
        // stale inline word gives its place.
        pt.remove(&(2, 0x2000));
        enter(&mut r, &mut pt, &b, frame(1), 2, 0x5000);
        assert_eq!(r.records(), 1);
        assert_eq!(known(&r, frame(1)).1.len(), 3);
        // A removal the map is told of frees the record.
        pt.remove(&(2, 0x3000));
        r.forget(frame(1), 2, 0x3000);
        assert_eq!(r.records(), 0);
        assert_eq!(b.used(Resource::Heap), 0);
        enter(&mut r, &mut pt, &b, frame(1), 2, 0x3000);
        assert_eq!(r.records(), 1);
        r.task_gone(2);
        assert_eq!(r.records(), 0);
        assert_eq!(b.used(Resource::Heap), 0);
        r.frame_freed(frame(1));
        assert_eq!(known(&r, frame(1)).1.len(), 0);
    }

    #[test]
    fn a_record_that_cannot_be_charged_makes_the_frame_unknown_until_freed() {
        let a = Account::root(1 << 20, 100).unwrap();
        let poor = Account::root(0, 100).unwrap();
        let mut r = Rmap::new(F0 / PAGE_SIZE, 16).unwrap();
        let mut pt = Tables::new();
        enter(&mut r, &mut pt, &a, frame(2), 1, 0x1000);
        enter(&mut r, &mut pt, &poor, frame(2), 2, 0x1000);
        assert_eq!(known(&r, frame(2)).0, Known::All);
        enter(&mut r, &mut pt, &poor, frame(2), 3, 0x1000);
        assert_eq!(known(&r, frame(2)).0, Known::Partial);
        assert_eq!(r.unknown(), 1);
        r.frame_freed(frame(2));
        assert_eq!(r.unknown(), 0);
        assert_eq!(known(&r, frame(2)).0, Known::All);
        // Outside the span: never known.
        assert_eq!(known(&r, frame(16)).0, Known::Partial);
        assert_eq!(known(&r, F0 - PAGE_SIZE).0, Known::Partial);
    }

    #[test]
    fn frames_outside_the_span_are_neither_recorded_nor_touched() {
        // Below the span (the index wraps far above it), just above it, and far above:
        // `record_fast` has nothing to do, `forget` and `frame_freed` change nothing, and
        // the frames in the span keep their records.
        let a = Account::root(1 << 20, 100).unwrap();
        let mut r = Rmap::new(F0 / PAGE_SIZE, 16).unwrap();
        let mut pt = Tables::new();
        enter(&mut r, &mut pt, &a, frame(0), 1, 0x1000);
        enter(&mut r, &mut pt, &a, frame(15), 1, 0x2000);
        for f in [0, PAGE_SIZE, F0 - PAGE_SIZE, frame(16), frame(1 << 40)] {
            assert!(r.record_fast(f, 1, 0x3000));
            r.forget(f, 1, 0x3000);
            r.frame_freed(f);
            assert_eq!(known(&r, f).0, Known::Partial);
        }
        assert_eq!(
            known(&r, frame(0)).1.into_iter().collect::<Vec<_>>(),
            [(1, 0x1000)]
        );
        assert_eq!(
            known(&r, frame(15)).1.into_iter().collect::<Vec<_>>(),
            [(1, 0x2000)]
        );
        assert_eq!(r.records(), 0);
        assert_eq!(a.used(Resource::Heap), 0);
    }

    #[test]
    fn a_word_naming_an_ended_task_gives_its_place_without_asking() {
        let mut r = Rmap::new(F0 / PAGE_SIZE, 16).unwrap();
        assert!(r.record_fast(frame(5), 1, 0x1000));
        assert!(r.record_fast(frame(5), 2, 0x2000));
        // Both words taken by live tasks: the page tables must be asked.
        assert!(!r.record_fast(frame(5), 3, 0x3000));
        r.task_gone(1);
        assert!(r.record_fast(frame(5), 3, 0x3000));
        let (k, seen) = known(&r, frame(5));
        assert_eq!(k, Known::All);
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            [(2, 0x2000), (3, 0x3000)]
        );
        r.task_gone(2);
        assert!(r.record_fast(frame(5), 4, 0x4000));
        assert_eq!(
            known(&r, frame(5)).1.into_iter().collect::<Vec<_>>(),
            [(3, 0x3000), (4, 0x4000)]
        );
        assert_eq!(r.records(), 0);
    }

    #[test]
    fn a_translation_too_large_to_pack_is_charged_and_forgotten_in_the_tree() {
        // A task id beyond the inline word's bits cannot be inline: `record_fast` declines
        // and `record` keeps it in the tree, charged; `forget` finds it there.
        let a = Account::root(1 << 20, 100).unwrap();
        let mut r = Rmap::new(F0 / PAGE_SIZE, 16).unwrap();
        let mut pt = Tables::new();
        let big = TASK_MASK + 1;
        assert!(!r.record_fast(frame(4), big, 0x1000));
        enter(&mut r, &mut pt, &a, frame(4), big, 0x1000);
        assert_eq!(r.records(), 1);
        assert!(a.used(Resource::Heap) >= RECORD_BYTES);
        assert_eq!(
            known(&r, frame(4)).1.into_iter().collect::<Vec<_>>(),
            [(big, 0x1000)]
        );
        r.forget(frame(4), big, 0x1000);
        assert_eq!(r.records(), 0);
        assert_eq!(a.used(Resource::Heap), 0);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Enter { f: u64, task: u64, page: u64 },
        Unmap { task: u64, page: u64 },
        Forget { task: u64, page: u64 },
        Free { f: u64 },
        End { task: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..6u64, 1..5u64, 1..6u64).prop_map(|(f, task, page)| Op::Enter { f, task, page }),
            2 => (1..5u64, 1..6u64).prop_map(|(task, page)| Op::Unmap { task, page }),
            2 => (1..5u64, 1..6u64).prop_map(|(task, page)| Op::Forget { task, page }),
            1 => (0..6u64).prop_map(|f| Op::Free { f }),
            1 => (1..5u64).prop_map(|task| Op::End { task }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        /// Against the page tables themselves: every live translation of a frame is
        /// among those the map reports (or the frame is unknown), each task's records
        /// stay within one more per frame than its translations, and every charge comes
        /// back when the frames are freed and the tasks end.
        #[test]
        fn never_misses_a_translation(ops in proptest::collection::vec(op(), 1..80), limit in 0..6u64) {
            let accts: Vec<AccountRef> = (0..5)
                .map(|_| Account::root(limit * RECORD_BYTES + 2 * Tree::<TaskCount>::NODE_BYTES, 100).unwrap())
                .collect();
            let mut r = Rmap::new(F0 / PAGE_SIZE, 6).unwrap();
            let mut pt = Tables::new();
            let mut ended = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Enter { f, task, page } => {
                        if ended.contains(&task) { continue; }
                        // A page holds one frame: entering another replaces it.
                        enter(&mut r, &mut pt, &accts[task as usize], frame(f), task, page * PAGE_SIZE);
                    }
                    Op::Unmap { task, page } => {
                        pt.remove(&(task, page * PAGE_SIZE));
                    }
                    Op::Forget { task, page } => {
                        // The removal the kernel's own unmap reports.
                        if let Some(f) = pt.remove(&(task, page * PAGE_SIZE)) {
                            r.forget(f, task, page * PAGE_SIZE);
                        }
                    }
                    Op::Free { f } => {
                        // The core removes every translation before a frame is freed.
                        pt.retain(|_, v| *v != frame(f));
                        r.frame_freed(frame(f));
                    }
                    Op::End { task } => {
                        pt.retain(|(t, _), _| *t != task);
                        r.task_gone(task);
                        ended.insert(task);
                    }
                }
                for f in 0..6 {
                    let (k, seen) = known(&r, frame(f));
                    if k == Known::All {
                        for (&(t, va), &g) in pt.iter() {
                            if g == frame(f) {
                                prop_assert!(seen.contains(&(t, va)), "frame {} misses ({}, {:#x})", f, t, va);
                            }
                        }
                    }
                }
            }
            for f in 0..6 {
                r.frame_freed(frame(f));
            }
            for t in 1..5 {
                r.task_gone(t);
            }
            prop_assert_eq!(r.records(), 0);
            prop_assert_eq!(r.unknown(), 0);
            for a in &accts {
                prop_assert_eq!(a.used(Resource::Heap), 0);
            }
        }
    }
}
