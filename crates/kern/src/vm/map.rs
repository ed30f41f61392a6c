//! Address maps: a task's address space as ranges of memory objects (Accent's process
//! map, section 2.2.3, in Mach's form).
//!
//! Each [`Entry`] maps `[start, end)` to the window of an object from `offset`, with a
//! protection, a maximum protection the protection can never exceed, a copy-on-write
//! flag, an inheritance for fork, and a wiring count. The entries are kept in a
//! [`Tree`] keyed by start, so finding, inserting, splitting and removing an entry cost
//! O(log n) in the number of entries, whatever the size of the range: allocating or
//! deallocating a gigabyte of untouched memory is the same work as a page (Accent's
//! Figure 3-1 point). Operations over a range cost O(log n) per entry they touch, plus,
//! when they drop or protect memory, whatever the kernel does for the resident pages.
//!
//! The copy-on-write flag is Mach's *needs copy*: the entry sees its object as a
//! snapshot, and its first write makes a shadow object for it (or, when nothing else
//! names the object any more, simply clears the flag: Accent's copy-on-write reclaim).
//!
//! Every operation decodes first: it checks its whole range and arguments without
//! changing anything, then acts. The only step that can fail after that is splitting
//! the one or two entries at the range's ends, and a split alone changes nothing a task
//! can see.
//!
//! # Invariants
//! - Entries do not overlap, lie within `[lo, hi)`, are page aligned and non-empty.
//! - Each entry holds one reference to its object, and its window
//!   `[offset, offset + end - start)` lies within the object.
//! - `prot` is within `max_prot`; a physical object is never mapped copy-on-write.
//! - At most `limit` entries, each charged [`ENTRY_BYTES`] of heap to the map's account.

use super::object::{Kind, ObjectId, Objects};
use super::tree::Tree;
use super::{page_aligned, Inherit, Machine, Prot};
use crate::quota::{AccountRef, Resource};
use baton_abi::Error;

/// One range of a map. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// One past the last byte.
    pub end: u64,
    /// The object mapped.
    pub object: ObjectId,
    /// Offset of the range's first byte in the object.
    pub offset: u64,
    /// What accesses are allowed.
    pub prot: Prot,
    /// The most `prot` may ever be.
    pub max_prot: Prot,
    /// The object is a snapshot: the first write makes this entry's own shadow.
    pub cow: bool,
    /// What a fork gives the child.
    pub inherit: Inherit,
    /// How many times the range is wired (its pages must stay resident and mapped).
    pub wired: u32,
}

/// Heap bytes an entry is charged.
pub const ENTRY_BYTES: u64 = Tree::<Entry>::NODE_BYTES;

/// The default bound on a map's entries.
pub const ENTRIES_MAX: usize = 1 << 16;

/// How many neighbouring entries [`Map::protect_page`] may leave unmerged before it
/// merges every entry of the map that can be (a bound on what its laziness costs).
pub const SLACK_MAX: usize = 32;

/// Whether `b`, starting where `a` (starting at `a_start`) ends, continues it exactly: the
/// same object at the next offset and the same attributes, so the two could be one entry.
fn alike(a_start: u64, a: &Entry, b: &Entry) -> bool {
    a.object == b.object
        && a.offset.checked_add(a.end.wrapping_sub(a_start)) == Some(b.offset)
        && a.prot == b.prot
        && a.max_prot == b.max_prot
        && a.cow == b.cow
        && a.inherit == b.inherit
        && a.wired == b.wired
}

/// Where a new range goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Wherever there is room.
    Anywhere,
    /// At this address, which must be free.
    Fixed(u64),
}

/// A task's address map. See the module documentation.
#[derive(Debug)]
pub struct Map {
    entries: Tree<Entry>,
    account: AccountRef,
    lo: u64,
    hi: u64,
    limit: usize,
    /// Where "anywhere" placements start looking (`lo` unless set).
    floor: u64,
    /// Boundaries between entries that [`Map::protect_page`] left mergeable (at least
    /// as many as there are; other operations may have merged some since).
    slack: usize,
}

impl Drop for Map {
    fn drop(&mut self) {
        // Entries still here (a map dropped without `clear`) give back their heap charge;
        // their object references can only be released by `clear`.
        self.account
            .give(Resource::Heap, self.entries.len() as u64 * ENTRY_BYTES);
    }
}

impl Map {
    /// An empty map of the addresses `[lo, hi)`, holding at most `limit` entries, charged
    /// to `account`.
    pub fn new(account: AccountRef, lo: u64, hi: u64, limit: usize) -> Result<Map, Error> {
        if !page_aligned(lo) || !page_aligned(hi) || lo >= hi {
            return Err(Error::InvalidArgument);
        }
        Ok(Map {
            entries: Tree::new(),
            account,
            lo,
            hi,
            limit,
            floor: lo,
            slack: 0,
        })
    }

    /// Makes "anywhere" placements go at or above `floor` (clamped to the map), so that
    /// they keep clear of low addresses a stray small pointer would reach.
    pub fn set_anywhere_floor(&mut self, floor: u64) {
        self.floor = floor.clamp(self.lo, self.hi) & !(super::PAGE_SIZE - 1);
    }

    /// The account the map is charged to.
    pub fn account(&self) -> &AccountRef {
        &self.account
    }

    /// The address range the map covers.
    pub fn bounds(&self) -> (u64, u64) {
        (self.lo, self.hi)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry containing `addr`, with its start.
    pub fn entry(&self, addr: u64) -> Option<(u64, Entry)> {
        // Entries never overlap, so one that starts at or below `addr` and ends above it
        // is the floor: the tree's hint (the entry last found) answers repeated lookups
        // of one page without a walk.
        self.entries
            .floor_where(addr, |_, e| addr < e.end)
            .map(|(s, e)| (s, *e))
    }

    /// The entry containing `addr`, or else the first one above it (what a region query
    /// reports).
    pub fn query(&self, addr: u64) -> Option<(u64, Entry)> {
        self.entry(addr)
            .or_else(|| self.entries.ceil(addr).map(|(s, e)| (s, *e)))
    }

    /// Every entry, in address order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, Entry)> + '_ {
        self.entries.iter().map(|(s, e)| (s, *e))
    }

    /// The entries starting in `[start, end)`, in order.
    fn starts_in(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, Entry)> + '_ {
        self.entries.range(start, end).map(|(s, e)| (s, *e))
    }

    /// Checks `[start, start + len)`: page aligned and non-empty (else
    /// [`Error::InvalidArgument`]), inside the map (else [`Error::BadAddress`]); its end.
    pub fn check_range(&self, start: u64, len: u64) -> Result<u64, Error> {
        if len == 0 || !page_aligned(start) || !page_aligned(len) {
            return Err(Error::InvalidArgument);
        }
        let end = start.checked_add(len).ok_or(Error::BadAddress)?;
        if start < self.lo || end > self.hi {
            return Err(Error::BadAddress);
        }
        Ok(end)
    }

    /// Whether nothing is mapped in `[start, end)`.
    fn is_free(&self, start: u64, end: u64) -> bool {
        self.entries
            .floor(start)
            .is_none_or(|(_, e)| e.end <= start)
            && self.entries.ceil(start).is_none_or(|(s, _)| s >= end)
    }

    /// Whether every byte of `[start, end)` is mapped.
    fn covered(&self, start: u64, end: u64) -> bool {
        let mut cur = start;
        while cur < end {
            match self.entry(cur) {
                Some((_, e)) => cur = e.end,
                None => return false,
            }
        }
        true
    }

    /// A free range of `len` bytes: above the last entry when there is room there (one
    /// O(log n) look), else the first gap from the bottom (a walk of the entries).
    fn find_space(&self, len: u64) -> Result<u64, Error> {
        let top = self
            .entries
            .last()
            .map_or(self.floor, |(_, e)| e.end.max(self.floor));
        if top.checked_add(len).is_some_and(|end| end <= self.hi) {
            return Ok(top);
        }
        let mut cur = self.floor;
        for (s, e) in self.entries() {
            if s.saturating_sub(cur) >= len {
                return Ok(cur);
            }
            cur = cur.max(e.end);
        }
        if self.hi.saturating_sub(cur) >= len {
            Ok(cur)
        } else {
            Err(Error::NoSpace)
        }
    }

    /// Where a new range of `len` bytes goes: [`Error::NoSpace`] when a fixed range is
    /// taken or no room is left.
    pub fn place(&self, at: Placement, len: u64) -> Result<u64, Error> {
        match at {
            Placement::Anywhere => {
                // Checks the length alone.
                self.check_range(self.lo, len).map_err(|e| match e {
                    Error::BadAddress => Error::NoSpace,
                    e => e,
                })?;
                self.find_space(len)
            }
            Placement::Fixed(start) => {
                let end = self.check_range(start, len)?;
                if self.is_free(start, end) {
                    Ok(start)
                } else {
                    Err(Error::NoSpace)
                }
            }
        }
    }

    /// Adds an entry (its object reference is the caller's, kept by the entry on
    /// success only).
    pub(crate) fn insert(&mut self, start: u64, e: Entry) -> Result<(), Error> {
        if self.entries.len() >= self.limit {
            return Err(Error::NoMemory);
        }
        self.account.take(Resource::Heap, ENTRY_BYTES)?;
        match self.entries.insert(start, e) {
            Ok(None) => Ok(()),
            Ok(Some(old)) => {
                // Never happens (callers insert into free ranges): put the old one back.
                let _ = self.entries.insert(start, old);
                self.account.give(Resource::Heap, ENTRY_BYTES);
                Err(Error::NoSpace)
            }
            Err(e) => {
                self.account.give(Resource::Heap, ENTRY_BYTES);
                Err(e)
            }
        }
    }

    /// Removes the entry at `start` (its object reference goes to the caller).
    pub(crate) fn remove(&mut self, start: u64) -> Option<Entry> {
        let e = self.entries.remove(start)?;
        self.account.give(Resource::Heap, ENTRY_BYTES);
        Some(e)
    }

    /// The entry at `start`, to change in place.
    pub(crate) fn get_mut(&mut self, start: u64) -> Option<&mut Entry> {
        self.entries.get_mut(start)
    }

    /// Splits the entry containing `addr` so that one starts there (nothing when `addr`
    /// is already a boundary or unmapped).
    fn clip<F: Copy>(&mut self, objs: &mut Objects<F>, addr: u64) -> Result<(), Error> {
        let Some((start, e)) = self.entry(addr) else {
            return Ok(());
        };
        if start == addr {
            return Ok(());
        }
        let upper = Entry {
            offset: e.offset.saturating_add(addr - start),
            ..e
        };
        objs.add_split_ref(e.object)?;
        if let Err(err) = self.insert(addr, upper) {
            // Undo the reference; the entry still holds one, so this only counts down.
            objs.drop_split_ref(e.object);
            return Err(err);
        }
        if let Some(lower) = self.entries.get_mut(start) {
            lower.end = addr;
        }
        Ok(())
    }

    /// Splits the entries at both ends of `[start, end)`.
    fn clip_range<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        start: u64,
        end: u64,
    ) -> Result<(), Error> {
        self.clip(objs, start)?;
        self.clip(objs, end)
    }

    /// Merges neighbouring entries from the one containing (or just below) `start` up to
    /// the one starting at `end`, wherever two are one range of one object with the same
    /// attributes: what a protect, inherit, wire or unwire split and then made alike again
    /// is one entry again (Mach's `vm_map_simplify`), so repeating such calls on parts of
    /// a range does not grow the map. Allocates nothing.
    fn coalesce<F: Copy>(&mut self, objs: &mut Objects<F>, start: u64, end: u64) {
        let first = match self.entries.floor(start.saturating_sub(1)) {
            Some((s, _)) => s,
            None => match self.entries.ceil(start) {
                Some((s, _)) => s,
                None => return,
            },
        };
        let mut cur = first;
        while cur <= end {
            let Some(a) = self.entries.get(cur).copied() else {
                return;
            };
            let Some(b) = self.entries.get(a.end).copied() else {
                // Not adjacent to an entry: on to the next one.
                match self.entries.after(cur) {
                    Some((s, _)) => {
                        cur = s;
                        continue;
                    }
                    None => return,
                }
            };
            if !alike(cur, &a, &b) {
                cur = a.end;
                continue;
            }
            let b_start = a.end;
            if self.remove(b_start).is_none() {
                return;
            }
            if let Some(e) = self.entries.get_mut(cur) {
                e.end = b.end;
            }
            // The two entries held a reference each; one entry holds one.
            objs.drop_split_ref(a.object);
        }
    }

    /// Applies `f` to every entry starting in `[start, end)` (after a [`Map::clip_range`],
    /// exactly the entries inside it).
    fn for_each_in(&mut self, start: u64, end: u64, mut f: impl FnMut(u64, &mut Entry)) {
        let mut cur = start;
        while let Some((s, _)) = self.entries.ceil(cur).filter(|(s, _)| *s < end) {
            let Some(e) = self.entries.get_mut(s) else {
                return;
            };
            f(s, e);
            cur = e.end;
        }
    }

    /// Allocates `len` bytes of zero-filled memory (a new anonymous object) with
    /// protection `prot` (maximum: everything); its address.
    pub fn allocate<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        at: Placement,
        len: u64,
        prot: Prot,
        m: &mut impl Machine<F>,
    ) -> Result<u64, Error> {
        self.allocate_with(objs, at, len, prot, false, m)
            .map(|(start, _)| start)
    }

    /// [`Map::allocate`], with the new object committed (`commit`: its frames charged
    /// now, [`Objects::committed`]) or not; its address and the object (for the kernel
    /// to put pages it already has in, e.g. a program's image).
    pub fn allocate_with<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        at: Placement,
        len: u64,
        prot: Prot,
        commit: bool,
        m: &mut impl Machine<F>,
    ) -> Result<(u64, ObjectId), Error> {
        let start = self.place(at, len)?;
        let object = if commit {
            objs.committed(len, &self.account)?
        } else {
            objs.anonymous(len, &self.account)?
        };
        let e = Entry {
            end: start + len,
            object,
            offset: 0,
            prot,
            max_prot: Prot::ALL,
            cow: false,
            inherit: Inherit::Copy,
            wired: 0,
        };
        if let Err(err) = self.insert(start, e) {
            objs.release(object, m);
            return Err(err);
        }
        Ok((start, object))
    }

    /// Maps the window `[offset, offset + len)` of `object`. With `cow` the range is a
    /// by-value snapshot of the object as it is now (a copy object is taken when the
    /// object is written in place); without it, writes go to the object and every other
    /// direct mapping sees them.
    #[allow(clippy::too_many_arguments)]
    pub fn map_object<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        at: Placement,
        len: u64,
        object: ObjectId,
        offset: u64,
        prot: Prot,
        max_prot: Prot,
        cow: bool,
        inherit: Inherit,
        m: &mut impl Machine<F>,
    ) -> Result<u64, Error> {
        let o = objs.get(object).ok_or(Error::NotFound)?;
        if !page_aligned(offset) || offset.checked_add(len).is_none_or(|end| end > o.size()) {
            return Err(Error::InvalidArgument);
        }
        if !max_prot.contains(prot) {
            return Err(Error::Denied);
        }
        if cow && matches!(o.kind(), Kind::Physical { .. }) {
            return Err(Error::InvalidArgument);
        }
        let start = self.place(at, len)?;
        let mapped = if cow {
            objs.copy_object(object, &self.account, m)?
        } else {
            objs.add_ref(object)?;
            object
        };
        let e = Entry {
            end: start + len,
            object: mapped,
            offset,
            prot,
            max_prot,
            cow,
            inherit,
            wired: 0,
        };
        if let Err(err) = self.insert(start, e) {
            objs.release(mapped, m);
            return Err(err);
        }
        Ok(start)
    }

    /// Calls `enter(address, frame)` for at most `max` pages of the entry at `start` that a
    /// load would find resident in the entry's own object now, in address order: the
    /// translations a read fault would enter there (read-only; a store still faults, so
    /// that write permission is decided as [`super::fault::resolve`] decides it). Nothing
    /// for a copy-on-write entry whose object others may see (another's snapshot: a
    /// copy-on-write entry is offered only when it holds the one reference to an
    /// anonymous object without a copy object, as a region moved out of line holds once
    /// its sender's range is gone), one without read access, or one over physical memory.
    /// A kernel may enter these when it maps an object (Mach enters the resident pages of
    /// a new mapping the same way), so that the first touch of each page costs no fault;
    /// page tables stay a cache.
    pub fn resident_reads<F: Copy>(
        &self,
        objs: &Objects<F>,
        start: u64,
        max: usize,
        mut enter: impl FnMut(u64, F),
    ) {
        let Some(e) = self.entries.get(start) else {
            return;
        };
        if !e.prot.contains(Prot::READ) {
            return;
        }
        let Some(o) = objs.get(e.object) else {
            return;
        };
        if !matches!(o.kind(), Kind::Anonymous) {
            return;
        }
        if e.cow && (o.refs() != 1 || o.copy().is_some()) {
            return;
        }
        let len = e.end - start;
        o.each_resident(e.offset, e.offset + len, max, |off, frame| {
            enter(start + (off - e.offset), frame);
        });
    }

    /// Maps the window `[offset, offset + len)` of the image object `object`
    /// (`Objects::image`) copy-on-write, with no copy object: an image is never written in
    /// place, so its pages are a snapshot already (as a copy-on-write entry's frozen object
    /// is). The first write to a page gives the entry its own shadow and copies the page.
    #[allow(clippy::too_many_arguments)]
    pub fn map_frozen<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        at: Placement,
        len: u64,
        object: ObjectId,
        offset: u64,
        prot: Prot,
        max_prot: Prot,
        m: &mut impl Machine<F>,
    ) -> Result<u64, Error> {
        let o = objs.get(object).ok_or(Error::NotFound)?;
        if !page_aligned(offset) || offset.checked_add(len).is_none_or(|end| end > o.size()) {
            return Err(Error::InvalidArgument);
        }
        if o.kind() != Kind::Anonymous || objs.is_private(object) {
            return Err(Error::InvalidArgument);
        }
        if !max_prot.contains(prot) {
            return Err(Error::Denied);
        }
        let start = self.place(at, len)?;
        objs.add_ref(object)?;
        let e = Entry {
            end: start + len,
            object,
            offset,
            prot,
            max_prot,
            cow: true,
            inherit: Inherit::Copy,
            wired: 0,
        };
        if let Err(err) = self.insert(start, e) {
            objs.release(object, m);
            return Err(err);
        }
        Ok(start)
    }

    /// Removes every mapping in `[start, start + len)` (holes are fine); entries across
    /// the ends are split. [`Error::Denied`] when part of the range is wired.
    pub fn deallocate<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        start: u64,
        len: u64,
        m: &mut impl Machine<F>,
    ) -> Result<(), Error> {
        let end = self.check_range(start, len)?;
        let first = self.entry(start).map_or(start, |(s, _)| s);
        if self.starts_in(first, end).any(|(_, e)| e.wired > 0) {
            return Err(Error::Denied);
        }
        self.clip_range(objs, start, end)?;
        while let Some((s, _)) = self.entries.ceil(start).filter(|(s, _)| *s < end) {
            let Some(e) = self.remove(s) else { break };
            m.unmap(s, e.end);
            objs.free_window(e.object, e.offset, e.offset + (e.end - s), m);
            objs.release(e.object, m);
        }
        Ok(())
    }

    /// Removes every entry (a task's end).
    pub fn clear<F: Copy>(&mut self, objs: &mut Objects<F>, m: &mut impl Machine<F>) {
        while let Some((s, _)) = self.entries.first() {
            let Some(e) = self.remove(s) else { break };
            m.unmap(s, e.end);
            objs.release(e.object, m);
        }
    }

    /// Sets the protection of `[start, start + len)` to `prot`, or, with `set_max`, its
    /// maximum protection (which can only go down, and takes the protection down with
    /// it). The range must be mapped throughout ([`Error::BadAddress`]); a protection
    /// above an entry's maximum is [`Error::Denied`].
    pub fn protect<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        start: u64,
        len: u64,
        prot: Prot,
        set_max: bool,
        m: &mut impl Machine<F>,
    ) -> Result<(), Error> {
        let end = self.check_range(start, len)?;
        if !self.covered(start, end) {
            return Err(Error::BadAddress);
        }
        let first = self.entry(start).map_or(start, |(s, _)| s);
        if self
            .starts_in(first, end)
            .any(|(_, e)| !e.max_prot.contains(prot))
        {
            return Err(Error::Denied);
        }
        self.clip_range(objs, start, end)?;
        self.for_each_in(start, end, |s, e| {
            let old = e.prot;
            if set_max {
                e.max_prot = prot;
                e.prot = e.prot.and(prot);
            } else {
                e.prot = prot;
            }
            let lost = old.minus(e.prot);
            if lost.contains(Prot::READ) || lost.contains(Prot::EXECUTE) {
                m.unmap(s, e.end);
            } else if lost.contains(Prot::WRITE) {
                m.write_protect(s, e.end);
            }
        });
        self.coalesce(objs, start, end);
        Ok(())
    }

    /// Sets the protection of the one page at `page` to `prot`: what [`Map::protect`]
    /// does for a range of one page, at the cost SPIN's per-page protection changes
    /// assume (its Table 4: a garbage collector or a distributed shared memory changes
    /// one page at a time, at every fault).
    ///
    /// The page's entry is changed without the split-and-merge of the general path:
    /// - a page that is an entry of its own changes in place, and is left unmerged with
    ///   a neighbour it now matches (counted in the map's slack);
    /// - a page at either end of its entry whose neighbour across that end would continue
    ///   it with the new protection moves the boundary between the two entries by one
    ///   page ([`Tree::rekey`]: no node is made or freed);
    /// - otherwise the entry is split around the page, as the general path does.
    ///
    /// When more than [`SLACK_MAX`] boundaries may be mergeable, every entry that can be
    /// is merged, so repeated calls grow the map by at most that many entries. The map's
    /// contents (what each page maps, with which attributes) are exactly those the
    /// general path gives. Errors as [`Map::protect`]'s.
    pub fn protect_page<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        page: u64,
        prot: Prot,
        m: &mut impl Machine<F>,
    ) -> Result<(), Error> {
        let end = self.check_range(page, super::PAGE_SIZE)?;
        let (s, e) = self.entry(page).ok_or(Error::BadAddress)?;
        if !e.max_prot.contains(prot) {
            return Err(Error::Denied);
        }
        if e.prot == prot {
            return Ok(());
        }
        let new = Entry { prot, ..e };
        // The entry ending where this one starts, and the one starting where it ends.
        let left = self
            .entries
            .floor(s.wrapping_sub(1))
            .filter(|(ls, l)| s > 0 && *ls < s && l.end == s)
            .map(|(ls, l)| (ls, *l));
        let right = self.entries.get(e.end).copied();
        if s == page && e.end == end {
            // An entry of its own: changed in place.
            let was = left.is_some_and(|(ls, l)| alike(ls, &l, &e)) as usize
                + right.is_some_and(|r| alike(s, &e, &r)) as usize;
            let now = left.is_some_and(|(ls, l)| alike(ls, &l, &new)) as usize
                + right.is_some_and(|r| alike(s, &new, &r)) as usize;
            if let Some(me) = self.entries.get_mut(s) {
                me.prot = prot;
            }
            self.slack = (self.slack + now).saturating_sub(was);
        } else if let Some((ls, _)) = left.filter(|(ls, l)| s == page && alike(*ls, l, &new)) {
            // The first page of its entry joins the entry below.
            if !self.entries.rekey(s, end) {
                return Err(Error::NoSpace);
            }
            if let Some(me) = self.entries.get_mut(end) {
                me.offset = e.offset.saturating_add(super::PAGE_SIZE);
            }
            if let Some(l) = self.entries.get_mut(ls) {
                l.end = end;
            }
        } else if let Some(r) = right.filter(|r| {
            let mine = Entry {
                offset: e.offset.wrapping_add(page - s),
                ..new
            };
            e.end == end && alike(page, &mine, r)
        }) {
            // The last page of its entry joins the entry above.
            if !self.entries.rekey(end, page) {
                return Err(Error::NoSpace);
            }
            if let Some(rn) = self.entries.get_mut(page) {
                rn.offset = r.offset.saturating_sub(super::PAGE_SIZE);
            }
            if let Some(me) = self.entries.get_mut(s) {
                me.end = page;
            }
        } else {
            // In the middle, or next to nothing it could join: split around it. The
            // boundaries made separate different protections, so nothing is mergeable.
            self.clip_range(objs, page, end)?;
            if let Some(me) = self.entries.get_mut(page) {
                me.prot = prot;
            }
        }
        let lost = e.prot.minus(prot);
        if lost.contains(Prot::READ) || lost.contains(Prot::EXECUTE) {
            m.unmap(page, end);
        } else if lost.contains(Prot::WRITE) {
            m.write_protect(page, end);
        }
        if self.slack > SLACK_MAX {
            self.coalesce(objs, self.lo, self.hi);
            self.slack = 0;
        }
        Ok(())
    }

    /// Sets the inheritance of `[start, start + len)`, which must be mapped throughout.
    pub fn inherit<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        start: u64,
        len: u64,
        inherit: Inherit,
    ) -> Result<(), Error> {
        let end = self.check_range(start, len)?;
        if !self.covered(start, end) {
            return Err(Error::BadAddress);
        }
        self.clip_range(objs, start, end)?;
        self.for_each_in(start, end, |_, e| e.inherit = inherit);
        self.coalesce(objs, start, end);
        Ok(())
    }

    /// Wires `[start, start + len)` once more (mapped throughout, else
    /// [`Error::BadAddress`]). The kernel then faults every page in and keeps it mapped;
    /// a wired range cannot be deallocated and is not inherited.
    pub fn wire<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        start: u64,
        len: u64,
    ) -> Result<(), Error> {
        let end = self.check_range(start, len)?;
        if !self.covered(start, end) {
            return Err(Error::BadAddress);
        }
        let first = self.entry(start).map_or(start, |(s, _)| s);
        if self.starts_in(first, end).any(|(_, e)| e.wired == u32::MAX) {
            return Err(Error::NoSpace);
        }
        self.clip_range(objs, start, end)?;
        self.for_each_in(start, end, |_, e| e.wired += 1);
        self.coalesce(objs, start, end);
        Ok(())
    }

    /// Undoes one [`Map::wire`] of `[start, start + len)`: [`Error::InvalidArgument`] when
    /// part of it is not wired.
    pub fn unwire<F: Copy>(
        &mut self,
        objs: &mut Objects<F>,
        start: u64,
        len: u64,
    ) -> Result<(), Error> {
        let end = self.check_range(start, len)?;
        if !self.covered(start, end) {
            return Err(Error::BadAddress);
        }
        let first = self.entry(start).map_or(start, |(s, _)| s);
        if self.starts_in(first, end).any(|(_, e)| e.wired == 0) {
            return Err(Error::InvalidArgument);
        }
        self.clip_range(objs, start, end)?;
        self.for_each_in(start, end, |_, e| e.wired -= 1);
        self.coalesce(objs, start, end);
        Ok(())
    }
}
