//! Memory objects: Accent's repositories of data, which address maps map ranges of.
//!
//! An object is a sparse array of pages, `size` bytes long. Its [`Kind`] says where a
//! page it has no copy of comes from: zeros (anonymous), a fixed range of physical frames
//! (physical: device registers or a DMA buffer), or a pager, a user task the kernel
//! messages for the contents (pager-backed). An anonymous object may be a *shadow*
//! (Accent section 2.2.2): it holds only the pages that differ from the object it shadows
//! (its `backing`, at an offset), and a page it lacks is looked up there, and so on down
//! the chain. Resident pages map an offset to an opaque frame handle `F` that the kernel
//! supplies; a pager-backed object's page may also be *being paged in*.
//!
//! Objects live in a generation-checked [`Slab`] (a stale [`ObjectId`] reaches nothing)
//! and are reference counted: map entries, shadows, regions in transit and kernel handles
//! each hold one reference. When the last goes the object is destroyed with its frames
//! (handed to [`Machine::free_frame`]), and its reference to its backing object is
//! released in turn.
//!
//! **Collapse.** When an anonymous object's only reference is one shadow, nothing else can
//! see it: its pages are merged up into the shadow (those the shadow has its own copy of,
//! or that fall outside the shadow's window, are freed), the shadow takes over its
//! backing, and it is gone. This happens as references are released, so a chain never
//! holds an anonymous object with a single reference that is a shadow: every anonymous
//! object in the middle of a chain has at least two references, so the objects number at
//! most about twice the references held from outside (entries, regions, handles), however
//! many copies were made. Collapse moves tree nodes and allocates nothing; it is skipped
//! (the chain is left longer, which is still correct) only when the shadow's account
//! cannot take over the merged pages' charges.
//!
//! **Copy objects** (Mach's delayed copy). An object written in place by several
//! entries (shared memory) cannot simply be marked copy-on-write for a copy: its sharers
//! keep writing. A copy of it gets a *copy object*, a shadow of the whole object recorded
//! as its `copy`; every resident page's translations are write-protected, and a write in
//! place to a page the copy object lacks first pushes the old contents into it (the
//! fault module's `CopyOnWrite` decision). An older copy object is re-pointed to shadow
//! the newer one. A copy taken while neither the object nor its copy object was written
//! since reuses the copy object.
//!
//! # Invariants
//! - `refs` counts the references described above; an object with `refs == 0` is not in
//!   the slab. `shadows` counts the objects whose `backing` is this one, and `shadow_xor`
//!   is the xor of their keys (so when there is one, it is known without a list).
//! - A shadow's window `[offset, offset + size)` lies within its backing object.
//! - An object that a copy-on-write entry or a shadow other than its `copy` names is
//!   never written in place (*frozen*); pages only arrive in it by zero fill, page-in or
//!   collapse, none of which changes what any mapping sees.
//! - `private` objects are referenced only by entries of one map split from one entry,
//!   whose windows are disjoint: a window dropped from the map can drop its pages.
//! - Every resident page is charged: one frame, and one tree node of heap, to the
//!   object's account; the object itself is charged [`OBJECT_BYTES`].

use super::tree::Tree;
use super::{page_aligned, Machine, Prot, PAGE_SIZE};
use crate::quota::{AccountRef, Resource};
use crate::slab::{Key, Slab};
use baton_abi::Error;

/// Names an object: a key of the object slab (stale keys name nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(pub Key);

/// Where an object's pages come from when it has no copy of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Zero-filled on first touch (or looked up in the backing object, for a shadow).
    Anonymous,
    /// The physical frames from `base` on, contiguous; `uncached` for device registers.
    Physical {
        /// Physical address of the first frame.
        base: u64,
        /// Map without caching.
        uncached: bool,
    },
    /// Contents come from a pager: `pager` names what the kernel messages (a port).
    Pager {
        /// The pager's name for the kernel.
        pager: u64,
        /// The pager is gone: absent pages can no longer be filled.
        dead: bool,
    },
}

/// A page an object has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page<F> {
    /// In memory, in this frame.
    Resident(F),
    /// Asked of the pager; faults on it wait.
    PagingIn,
    /// The pager answered with an error (Mach's `data_error`): faults on it are errors
    /// until the pager supplies the page or it is flushed.
    Failed,
    /// Paged out to the default pager's backing store, in `slot` (`super::clock::Slots`);
    /// `asked` while the default pager has been asked for it (faults on it wait). Only
    /// pages of anonymous objects are ever paged out. The page keeps its frame charge: the
    /// object's account is charged for what it holds, resident or not.
    Out {
        /// The backing-store slot holding the contents.
        slot: u32,
        /// Asked of the default pager.
        asked: bool,
    },
}

/// Heap bytes an object is charged (its slab slot).
pub const OBJECT_BYTES: u64 = core::mem::size_of::<Object<u64>>() as u64 + 16;

/// A memory object. See the module documentation.
#[derive(Debug)]
pub struct Object<F> {
    kind: Kind,
    size: u64,
    pages: Tree<Page<F>>,
    /// A pager-backed object's locked pages (Mach's lock requests): the accesses its
    /// pager allows at each offset (absent: every access). See [`Objects::set_lock`].
    locks: Tree<Prot>,
    backing: Option<(ObjectId, u64)>,
    copy: Option<ObjectId>,
    written: bool,
    refs: u32,
    shadows: u32,
    shadow_xor: u64,
    private: bool,
    committed: bool,
    pinned: bool,
    account: AccountRef,
    heap: u64,
    frames: u64,
}

impl<F: Copy> Object<F> {
    /// Where pages come from.
    pub fn kind(&self) -> Kind {
        self.kind
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// The object this one shadows, and the offset of this one's window in it.
    pub fn backing(&self) -> Option<(ObjectId, u64)> {
        self.backing
    }
    /// The newest copy object of this one.
    pub fn copy(&self) -> Option<ObjectId> {
        self.copy
    }
    /// References held.
    pub fn refs(&self) -> u32 {
        self.refs
    }
    /// Number of shadows of this object.
    pub fn shadows(&self) -> u32 {
        self.shadows
    }
    /// Pages held (resident or being paged in).
    pub fn pages(&self) -> usize {
        self.pages.len()
    }
    /// The page at `offset`, if this object has one.
    pub fn page(&self, offset: u64) -> Option<Page<F>> {
        self.pages.get(offset).copied()
    }
    /// Every page held, in offset order.
    pub fn iter_pages(&self) -> impl Iterator<Item = (u64, Page<F>)> + '_ {
        self.pages.iter().map(|(k, p)| (k, *p))
    }
    /// Whether this object is written in place (an entry maps it writable).
    pub fn written(&self) -> bool {
        self.written
    }
    /// Frames charged (for a committed object, the frames committed: its resident pages
    /// and those still to come).
    pub fn frames(&self) -> u64 {
        self.frames
    }
    /// Whether its frames were charged when it was made (see [`Objects::committed`]).
    pub fn committed(&self) -> bool {
        self.committed
    }
    /// Whether its pages must stay where they are (a DMA buffer, a program image): page
    /// replacement never takes them ([`Objects::pin`]).
    pub fn pinned(&self) -> bool {
        self.pinned
    }
    /// Pages paged out to the default pager.
    pub fn out_pages(&self) -> usize {
        self.pages
            .iter()
            .filter(|(_, p)| matches!(p, Page::Out { .. }))
            .count()
    }
    /// The resident pages at offsets in `[from, to)`, in offset order, with their frames.
    pub fn resident_range(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, F)> + '_ {
        self.pages.range(from, to).filter_map(|(k, p)| match p {
            Page::Resident(f) => Some((k, *f)),
            Page::PagingIn | Page::Failed | Page::Out { .. } => None,
        })
    }
    /// Calls `f(offset, frame)` for at most `max` resident pages at offsets in `[from,
    /// to)`, in offset order: what [`Object::resident_range`] gives, in one walk of the
    /// page tree instead of a search from its root for each page (`Tree::each_in`).
    pub fn each_resident(&self, from: u64, to: u64, max: usize, mut f: impl FnMut(u64, F)) {
        let mut left = max;
        if left == 0 {
            return;
        }
        self.pages.each_in(from, to, |off, p| {
            if let Page::Resident(frame) = p {
                f(off, *frame);
                left -= 1;
            }
            left > 0
        });
    }
    /// Resident pages at offsets in `[from, to)`.
    pub fn resident_in(&self, from: u64, to: u64) -> u64 {
        self.pages
            .range(from, to)
            .filter(|(_, p)| matches!(p, Page::Resident(_)))
            .count() as u64
    }
}

/// Where a lookup down a chain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found<F> {
    /// Resident in `object` (at `depth` below the first: 0 is the first) at `offset`.
    Resident {
        /// The object holding the page.
        object: ObjectId,
        /// Offset in that object.
        offset: u64,
        /// The frame.
        frame: F,
        /// How far down the chain.
        depth: usize,
    },
    /// Being paged in to `object`.
    PagingIn {
        /// The object.
        object: ObjectId,
        /// Offset in it.
        offset: u64,
    },
    /// The pager of `object` failed this page: an error for the faulting task.
    Failed {
        /// The object.
        object: ObjectId,
        /// Offset in it.
        offset: u64,
    },
    /// Nowhere: the pager-backed `object` must be asked.
    Pager {
        /// The object.
        object: ObjectId,
        /// Offset in it.
        offset: u64,
        /// Its pager.
        pager: u64,
        /// Whether the pager is gone.
        dead: bool,
    },
    /// Paged out to the default pager, in `slot` of its store (`asked`: asked already).
    Out {
        /// The object holding the page.
        object: ObjectId,
        /// Offset in it.
        offset: u64,
        /// The backing-store slot.
        slot: u32,
        /// Asked of the default pager already.
        asked: bool,
    },
    /// A physical object's frame at `addr`.
    Physical {
        /// Physical address.
        addr: u64,
        /// Map uncached.
        uncached: bool,
    },
    /// Nowhere in an anonymous chain: zeros.
    Zero,
}

/// Every memory object of the system. See the module documentation.
#[derive(Debug)]
pub struct Objects<F> {
    slab: Slab<Object<F>>,
    /// The pagers (`Kind::Pager::pager`) of pager-backed objects destroyed since the
    /// kernel last asked ([`Objects::take_freed_pager`]). Room for one per live
    /// pager-backed object is made when it is created, so a destruction never allocates.
    freed_pagers: alloc::vec::Vec<u64>,
    /// Live pager-backed objects.
    pagers: usize,
    /// Locked pages in all objects (none: a fault need not look).
    locked: u64,
}

impl<F: Copy> Objects<F> {
    /// Slots of the object slab (a bound for a walk by [`Objects::at`]).
    pub fn slots(&self) -> usize {
        self.slab.slots()
    }

    /// The object in slab slot `index`, if there is one (a cursor for page replacement's
    /// clock, which keeps its place by slot).
    pub fn at(&self, index: usize) -> Option<(ObjectId, &Object<F>)> {
        let key = self.slab.key_at(index)?;
        Some((ObjectId(key), self.slab.get(key)?))
    }

    /// No objects; never more than `limit` at once.
    pub fn new(limit: u32) -> Objects<F> {
        Objects {
            slab: Slab::with_limit(limit),
            freed_pagers: alloc::vec::Vec::new(),
            pagers: 0,
            locked: 0,
        }
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// The object `id`.
    pub fn get(&self, id: ObjectId) -> Option<&Object<F>> {
        self.slab.get(id.0)
    }

    fn get_mut(&mut self, id: ObjectId) -> Option<&mut Object<F>> {
        self.slab.get_mut(id.0)
    }

    /// Every object, with its id.
    pub fn iter(&self) -> impl Iterator<Item = (ObjectId, &Object<F>)> {
        self.slab.iter().map(|(k, o)| (ObjectId(k), o))
    }

    fn create(
        &mut self,
        kind: Kind,
        size: u64,
        backing: Option<(ObjectId, u64)>,
        private: bool,
        account: &AccountRef,
    ) -> Result<ObjectId, Error> {
        self.create_with(kind, size, backing, private, false, account)
    }

    fn create_with(
        &mut self,
        kind: Kind,
        size: u64,
        backing: Option<(ObjectId, u64)>,
        private: bool,
        committed: bool,
        account: &AccountRef,
    ) -> Result<ObjectId, Error> {
        if size == 0 || !page_aligned(size) {
            return Err(Error::InvalidArgument);
        }
        let frames = if committed { pages(size) } else { 0 };
        account.take(Resource::Frames, frames)?;
        if let Err(e) = account.take(Resource::Heap, OBJECT_BYTES) {
            account.give(Resource::Frames, frames);
            return Err(e);
        }
        let object = Object {
            kind,
            size,
            pages: Tree::new(),
            locks: Tree::new(),
            backing,
            copy: None,
            written: false,
            refs: 1,
            shadows: 0,
            shadow_xor: 0,
            private,
            committed,
            pinned: false,
            account: account.clone(),
            heap: OBJECT_BYTES,
            frames,
        };
        match self.slab.insert(object) {
            Ok(k) => Ok(ObjectId(k)),
            Err(_) => {
                account.give(Resource::Heap, OBJECT_BYTES);
                account.give(Resource::Frames, frames);
                Err(Error::NoMemory)
            }
        }
    }

    /// A new zero-filled object of `size` bytes whose frames are all charged to `account`
    /// now (a *commitment*: its pages need no charge when they arrive, so a fault on it
    /// never fails for want of the account's room), with one reference, private. A window
    /// dropped from its map gives back that window's frames; the object's end, the rest.
    pub fn committed(&mut self, size: u64, account: &AccountRef) -> Result<ObjectId, Error> {
        self.create_with(Kind::Anonymous, size, None, true, true, account)
    }

    /// A new zero-filled object of `size` bytes, charged to `account`, with one reference
    /// (the caller's, meant for one map entry: the object starts out private).
    pub fn anonymous(&mut self, size: u64, account: &AccountRef) -> Result<ObjectId, Error> {
        self.create(Kind::Anonymous, size, None, true, account)
    }

    /// A new *image* object of `size` bytes, with one reference (the caller's, which it
    /// keeps for the object's life): the kernel puts the pages of a program's file in it
    /// ([`Objects::insert_page`]) and maps it only copy-on-write
    /// (`super::map::Map::map_frozen`), so it is never written in place. Never private, so
    /// no deallocation frees its pages; while the caller's reference is held it is never
    /// reclaimed or collapsed into a shadow.
    pub fn image(&mut self, size: u64, account: &AccountRef) -> Result<ObjectId, Error> {
        let id = self.create(Kind::Anonymous, size, None, false, account)?;
        // Its frames are the boot image's, not the allocator's: never paged out.
        self.pin(id);
        Ok(id)
    }

    /// Marks `id` as *pinned*: page replacement never takes its pages (a DMA buffer, whose
    /// physical addresses a device uses; an image object, whose frames are the boot
    /// image's).
    pub fn pin(&mut self, id: ObjectId) {
        if let Some(o) = self.get_mut(id) {
            o.pinned = true;
        }
    }

    /// A new object over the `size` bytes of physical memory from `base` (the caller has
    /// checked the authority to name them), with one reference.
    pub fn physical(
        &mut self,
        base: u64,
        size: u64,
        uncached: bool,
        account: &AccountRef,
    ) -> Result<ObjectId, Error> {
        if !page_aligned(base) {
            return Err(Error::InvalidArgument);
        }
        base.checked_add(size).ok_or(Error::InvalidArgument)?;
        self.create(
            Kind::Physical { base, uncached },
            size,
            None,
            false,
            account,
        )
    }

    /// A new object of `size` bytes whose contents `pager` supplies, with one reference.
    pub fn pager(
        &mut self,
        pager: u64,
        size: u64,
        account: &AccountRef,
    ) -> Result<ObjectId, Error> {
        let kind = Kind::Pager { pager, dead: false };
        let room = (self.pagers + 1).saturating_sub(self.freed_pagers.len());
        self.freed_pagers
            .try_reserve(room)
            .map_err(|_| Error::NoMemory)?;
        let id = self.create(kind, size, None, false, account)?;
        self.pagers += 1;
        Ok(id)
    }

    /// The pager of a pager-backed object destroyed since the last call, if any (the
    /// kernel lets go of what it kept for that pager).
    pub fn take_freed_pager(&mut self) -> Option<u64> {
        self.freed_pagers.pop()
    }

    /// Whether [`Objects::take_freed_pager`] has something.
    #[inline]
    pub fn freed_pager_pending(&self) -> bool {
        !self.freed_pagers.is_empty()
    }

    /// A new shadow of the window `[offset, offset + size)` of `backing`, taking over the
    /// caller's reference to `backing` (on success only), with one reference for the
    /// caller; charged to `account`.
    pub fn shadow(
        &mut self,
        backing: ObjectId,
        offset: u64,
        size: u64,
        account: &AccountRef,
    ) -> Result<ObjectId, Error> {
        let b = self.get(backing).ok_or(Error::NotFound)?;
        if matches!(b.kind, Kind::Physical { .. })
            || !page_aligned(offset)
            || offset.checked_add(size).is_none_or(|end| end > b.size)
        {
            return Err(Error::InvalidArgument);
        }
        let s = self.create(
            Kind::Anonymous,
            size,
            Some((backing, offset)),
            true,
            account,
        )?;
        if let Some(b) = self.get_mut(backing) {
            b.shadows += 1;
            b.shadow_xor ^= s.0 .0;
            b.private = false;
        }
        Ok(s)
    }

    /// One more reference to `id`, from something other than a split of the entry that
    /// holds one (so the object stops being private).
    pub fn add_ref(&mut self, id: ObjectId) -> Result<(), Error> {
        let o = self.get_mut(id).ok_or(Error::NotFound)?;
        o.refs = o.refs.checked_add(1).ok_or(Error::NoSpace)?;
        o.private = false;
        Ok(())
    }

    /// One more reference to `id` for the second half of a split entry.
    pub(crate) fn add_split_ref(&mut self, id: ObjectId) -> Result<(), Error> {
        let o = self.get_mut(id).ok_or(Error::NotFound)?;
        o.refs = o.refs.checked_add(1).ok_or(Error::NoSpace)?;
        Ok(())
    }

    /// Takes back a reference [`Objects::add_split_ref`] gave, while another is held.
    pub(crate) fn drop_split_ref(&mut self, id: ObjectId) {
        if let Some(o) = self.get_mut(id) {
            o.refs = o.refs.saturating_sub(1).max(1);
        }
    }

    /// Whether `id` is private (see the module invariants).
    pub fn is_private(&self, id: ObjectId) -> bool {
        self.get(id).is_some_and(|o| o.private)
    }

    /// Records that `id` is written in place (a translation of it is writable).
    pub(crate) fn mark_written(&mut self, id: ObjectId) {
        if let Some(o) = self.get_mut(id) {
            o.written = true;
        }
    }

    /// Gives up one reference to `id`: destroys it at zero (and releases its backing in
    /// turn), collapses it into its shadow when that is its only reference.
    pub fn release(&mut self, id: ObjectId, m: &mut impl Machine<F>) {
        let mut next = Some(id);
        // Each step destroys an object, so the walk ends.
        while let Some(id) = next.take() {
            let Some(o) = self.get_mut(id) else { return };
            o.refs = o.refs.saturating_sub(1);
            match o.refs {
                0 => next = self.destroy(id, m),
                1 => self.try_collapse(id, m),
                _ => {}
            }
        }
    }

    /// Frees every page of `o` (refunding its account).
    fn free_pages(o: &mut Object<F>, m: &mut impl Machine<F>) {
        o.pages.drain(|_, p| match p {
            Page::Resident(f) => m.free_frame(f),
            Page::Out { slot, .. } => m.free_slot(slot),
            Page::PagingIn | Page::Failed => {}
        });
    }

    /// Removes `id` (its references are gone): frees its pages and charges, unhooks it
    /// from its backing object, and returns that object (whose reference it held).
    ///
    /// The object is emptied where it lies and then dropped there (`Slab::discard`):
    /// taking it out of the slab by value would copy the whole object, on every task's
    /// end for each object it held.
    fn destroy(&mut self, id: ObjectId, m: &mut impl Machine<F>) -> Option<ObjectId> {
        let o = self.slab.get_mut(id.0)?;
        Self::free_pages(o, m);
        let locks = o.locks.len() as u64;
        o.locks.drain(|_, _| {});
        o.account.give(Resource::Heap, o.heap);
        o.account.give(Resource::Frames, o.frames);
        let (kind, backing) = (o.kind, o.backing);
        self.slab.discard(id.0);
        self.locked = self.locked.saturating_sub(locks);
        if let Kind::Pager { pager, .. } = kind {
            self.pagers = self.pagers.saturating_sub(1);
            // Room was made at the creation (`pager`).
            if self.freed_pagers.len() < self.freed_pagers.capacity() {
                self.freed_pagers.push(pager);
            }
        }
        let (b, _) = backing?;
        if let Some(bo) = self.get_mut(b) {
            bo.shadows = bo.shadows.saturating_sub(1);
            bo.shadow_xor ^= id.0 .0;
            if bo.copy == Some(id) {
                bo.copy = None;
            }
        }
        Some(b)
    }

    /// Merges `x` into its one shadow if that shadow is its only reference (see the module
    /// documentation).
    fn try_collapse(&mut self, x: ObjectId, m: &mut impl Machine<F>) {
        let Some(xo) = self.get(x) else { return };
        if xo.refs != 1 || xo.shadows != 1 || xo.kind != Kind::Anonymous || xo.pinned {
            return;
        }
        // A page being paged in is waited for at its (object, offset): it must not move.
        if xo
            .pages
            .iter()
            .any(|(_, p)| matches!(p, Page::Out { asked: true, .. }))
        {
            return;
        }
        let s = ObjectId(Key(xo.shadow_xor));
        // A committed object's charge covers pages it never got: only the resident ones
        // move up, and the rest of the commitment is given back with it.
        let x_resident = xo
            .pages
            .iter()
            .filter(|(_, p)| matches!(p, Page::Resident(_)))
            .count() as u64;
        let x_frames = if xo.committed {
            x_resident.min(xo.frames)
        } else {
            xo.frames
        };
        let x_unused = xo.frames - x_frames;
        let x_heap = xo.pages.len() as u64 * Tree::<Page<F>>::NODE_BYTES;
        let x_account = xo.account.clone();
        let Some(so) = self.get(s) else { return };
        let Some((b, boff)) = so.backing else { return };
        if b != x {
            return;
        }
        let (s_size, s_account) = (so.size, so.account.clone());
        // The shadow's account takes over the charges of the pages that move up.
        if !AccountRef::ptr_eq(&x_account, &s_account) {
            if s_account.take(Resource::Heap, x_heap).is_err() {
                return;
            }
            if s_account.take(Resource::Frames, x_frames).is_err() {
                s_account.give(Resource::Heap, x_heap);
                return;
            }
            x_account.give(Resource::Heap, x_heap);
            x_account.give(Resource::Frames, x_frames);
        }
        let Some(mut xo) = self.slab.remove(x.0) else {
            return;
        };
        xo.heap = xo.heap.saturating_sub(x_heap);
        xo.frames = 0;
        x_account.give(Resource::Frames, x_unused);
        let Some(so) = self.slab.get_mut(s.0) else {
            // Unreachable (checked above); give back what x held.
            Self::free_pages(&mut xo, m);
            return;
        };
        so.heap += x_heap;
        so.frames += x_frames;
        xo.pages.drain_nodes(|mut node| {
            let off = node.key();
            let up = off.checked_sub(boff).filter(|o| *o < s_size);
            match up {
                Some(soff) if !so.pages.contains(soff) => {
                    node.set_key(soff);
                    so.pages.insert_node(node);
                }
                _ => {
                    // Hidden by the shadow's own page, or outside its window. No page
                    // table may keep a translation to a frame that is freed (it would
                    // reach whatever the frame holds next): page tables are a cache, so
                    // every translation of it goes first.
                    match node.into_value() {
                        Page::Resident(f) => {
                            m.unmap_everywhere(f);
                            m.free_frame(f);
                            so.frames = so.frames.saturating_sub(1);
                            so.account.give(Resource::Frames, 1);
                        }
                        Page::Out { slot, .. } => {
                            m.free_slot(slot);
                            so.frames = so.frames.saturating_sub(1);
                            so.account.give(Resource::Frames, 1);
                        }
                        Page::PagingIn | Page::Failed => {}
                    }
                    so.heap = so.heap.saturating_sub(Tree::<Page<F>>::NODE_BYTES);
                    so.account.give(Resource::Heap, Tree::<Page<F>>::NODE_BYTES);
                }
            }
        });
        so.backing = xo.backing.map(|(b2, o2)| (b2, o2.saturating_add(boff)));
        let below = xo.backing;
        x_account.give(Resource::Heap, xo.heap);
        drop(xo);
        if let Some((b2, _)) = below {
            let mut was_copy = false;
            if let Some(bo) = self.get_mut(b2) {
                bo.shadow_xor ^= x.0 .0 ^ s.0 .0;
                if bo.copy == Some(x) {
                    bo.copy = Some(s);
                    was_copy = true;
                }
            }
            // `s` is an older snapshot than the copy it absorbed: never reuse it as a
            // fresh one.
            if was_copy {
                self.mark_written(s);
            }
        }
    }

    /// A copy object of `o` for a by-value copy of it while it is written in place (see
    /// the module documentation), with a new reference for the caller.
    pub fn copy_object(
        &mut self,
        o: ObjectId,
        account: &AccountRef,
        m: &mut impl Machine<F>,
    ) -> Result<ObjectId, Error> {
        let obj = self.get(o).ok_or(Error::NotFound)?;
        let (size, old, written) = (obj.size, obj.copy, obj.written);
        if let Some(c) = old {
            if !written && self.get(c).is_some_and(|co| !co.written) {
                self.add_ref(c)?;
                return Ok(c);
            }
        }
        // The copy object's own reference to `o`.
        self.add_ref(o)?;
        let c = match self.shadow(o, 0, size, account) {
            Ok(c) => c,
            Err(e) => {
                if let Some(obj) = self.get_mut(o) {
                    obj.refs = obj.refs.saturating_sub(1);
                }
                return Err(e);
            }
        };
        if let Some(co) = self.get_mut(c) {
            co.private = false;
        }
        if let Some(old) = old.filter(|old| self.get(*old).is_some()) {
            // The older copy now looks through the newer one: its reference moves there.
            if let Some(oo) = self.get_mut(old) {
                oo.backing = Some((c, 0));
            }
            if let Some(co) = self.get_mut(c) {
                co.refs += 1;
                co.shadows = 1;
                co.shadow_xor = old.0 .0;
            }
            if let Some(obj) = self.get_mut(o) {
                obj.refs = obj.refs.saturating_sub(1);
                obj.shadows = obj.shadows.saturating_sub(1);
                obj.shadow_xor ^= old.0 .0;
            }
        }
        if let Some(obj) = self.get_mut(o) {
            obj.copy = Some(c);
            obj.written = false;
            obj.private = false;
            for (_, p) in obj.pages.iter() {
                if let Page::Resident(f) = p {
                    m.write_protect_everywhere(*f);
                }
            }
        }
        Ok(c)
    }

    /// Looks `offset` of `id` up down its chain.
    pub fn find(&self, id: ObjectId, offset: u64) -> Result<Found<F>, Error> {
        let (mut cur, mut off) = (id, offset);
        // A chain is acyclic; the bound only guards against a bug looping forever.
        for depth in 0..=self.slab.len() {
            let o = self.get(cur).ok_or(Error::NotFound)?;
            if let Kind::Physical { base, uncached } = o.kind {
                let addr = base.checked_add(off).ok_or(Error::InvalidArgument)?;
                return Ok(Found::Physical { addr, uncached });
            }
            match o.pages.get(off) {
                Some(Page::Resident(frame)) => {
                    return Ok(Found::Resident {
                        object: cur,
                        offset: off,
                        frame: *frame,
                        depth,
                    })
                }
                Some(Page::PagingIn) => {
                    return Ok(Found::PagingIn {
                        object: cur,
                        offset: off,
                    })
                }
                Some(Page::Failed) => {
                    return Ok(Found::Failed {
                        object: cur,
                        offset: off,
                    })
                }
                Some(Page::Out { slot, asked }) => {
                    return Ok(Found::Out {
                        object: cur,
                        offset: off,
                        slot: *slot,
                        asked: *asked,
                    })
                }
                None => {}
            }
            if let Kind::Pager { pager, dead } = o.kind {
                return Ok(Found::Pager {
                    object: cur,
                    offset: off,
                    pager,
                    dead,
                });
            }
            match o.backing {
                Some((b, boff)) => {
                    cur = b;
                    off = off.checked_add(boff).ok_or(Error::InvalidArgument)?;
                }
                None => return Ok(Found::Zero),
            }
        }
        Err(Error::InvalidArgument)
    }

    /// Objects from `id` to the bottom of its chain.
    pub fn chain_len(&self, id: ObjectId) -> usize {
        let mut n = 0;
        let mut cur = Some(id);
        while let Some(o) = cur.and_then(|c| self.get(c)) {
            n += 1;
            if n > self.slab.len() {
                break;
            }
            cur = o.backing.map(|(b, _)| b);
        }
        n
    }

    /// Checks a page about to be put in `id` at `offset`: `Ok(true)` when a node must
    /// be added (`Ok(false)`: a page being paged in is replaced).
    fn check_new_page(&self, id: ObjectId, offset: u64) -> Result<bool, Error> {
        let o = self.get(id).ok_or(Error::NotFound)?;
        if !page_aligned(offset) || offset >= o.size || matches!(o.kind, Kind::Physical { .. }) {
            return Err(Error::InvalidArgument);
        }
        match o.pages.get(offset) {
            Some(Page::Resident(_) | Page::Out { .. }) => Err(Error::InvalidArgument),
            Some(Page::PagingIn | Page::Failed) => Ok(false),
            None => Ok(true),
        }
    }

    /// Puts `frame` in `id` at `offset` (after a zero fill, a copy, or a pager's data
    /// supply for a page being paged in), charging a frame and a node to the object's
    /// account; on an error the frame comes back for the caller to free.
    pub fn insert_page(&mut self, id: ObjectId, offset: u64, frame: F) -> Result<(), (Error, F)> {
        // The common case (a zero fill or a copy: no record at `offset` yet) in one walk
        // of the page tree, charged as a new node first.
        let Some(o) = self.get_mut(id) else {
            return Err((Error::NotFound, frame));
        };
        if !page_aligned(offset) || offset >= o.size || matches!(o.kind, Kind::Physical { .. }) {
            return Err((Error::InvalidArgument, frame));
        }
        let node = Tree::<Page<F>>::NODE_BYTES;
        let charge = u64::from(!o.committed);
        if charge > 0 && o.account.take(Resource::Frames, charge).is_err() {
            return Err((Error::NoMemory, frame));
        }
        if o.account.take(Resource::Heap, node).is_ok() {
            let got = o.pages.insert_unless(offset, Page::Resident(frame), |p| {
                matches!(p, Page::Resident(_) | Page::Out { .. })
            });
            match got {
                Ok(Ok(None)) => {
                    o.frames += charge;
                    o.heap += node;
                    return Ok(());
                }
                Ok(Ok(Some(_))) => {
                    // It replaced a page being paged in (or failed): its node was
                    // charged already.
                    o.account.give(Resource::Heap, node);
                    o.frames += charge;
                    return Ok(());
                }
                Ok(Err(_)) => {
                    o.account.give(Resource::Heap, node);
                    o.account.give(Resource::Frames, charge);
                    return Err((Error::InvalidArgument, frame));
                }
                Err(_) => {
                    o.account.give(Resource::Heap, node);
                    o.account.give(Resource::Frames, charge);
                    return Err((Error::NoMemory, frame));
                }
            }
        }
        // The account cannot take a node: only a page being paged in (whose node is
        // charged already) can still arrive.
        o.account.give(Resource::Frames, charge);
        self.insert_page_charged(id, offset, frame)
    }

    /// [`Objects::insert_page`] checking first whether a node is needed (two walks).
    fn insert_page_charged(
        &mut self,
        id: ObjectId,
        offset: u64,
        frame: F,
    ) -> Result<(), (Error, F)> {
        let new = self.check_new_page(id, offset).map_err(|e| (e, frame))?;
        let Some(o) = self.get_mut(id) else {
            return Err((Error::NotFound, frame));
        };
        let node = if new { Tree::<Page<F>>::NODE_BYTES } else { 0 };
        // A committed object's frames were charged when it was made.
        let charge = u64::from(!o.committed);
        if o.account.take(Resource::Frames, charge).is_err() {
            return Err((Error::NoMemory, frame));
        }
        if o.account.take(Resource::Heap, node).is_err() {
            o.account.give(Resource::Frames, charge);
            return Err((Error::NoMemory, frame));
        }
        if o.pages.insert(offset, Page::Resident(frame)).is_err() {
            o.account.give(Resource::Frames, charge);
            o.account.give(Resource::Heap, node);
            return Err((Error::NoMemory, frame));
        }
        o.frames += charge;
        o.heap += node;
        Ok(())
    }

    /// Marks `offset` of the pager-backed `id` as being paged in.
    pub(crate) fn begin_page_in(&mut self, id: ObjectId, offset: u64) -> Result<(), Error> {
        if !self.check_new_page(id, offset)? {
            return Ok(());
        }
        let o = self.get_mut(id).ok_or(Error::NotFound)?;
        let node = Tree::<Page<F>>::NODE_BYTES;
        o.account.take(Resource::Heap, node)?;
        if o.pages.insert(offset, Page::PagingIn).is_err() {
            o.account.give(Resource::Heap, node);
            return Err(Error::NoMemory);
        }
        o.heap += node;
        Ok(())
    }

    /// The pager could not supply `offset` of `id`: it is absent again (the kernel then
    /// fails the faults waiting for it, or asks again).
    pub fn page_in_failed(&mut self, id: ObjectId, offset: u64) {
        if let Some(o) = self.get_mut(id) {
            if matches!(o.pages.get(offset), Some(Page::PagingIn)) {
                o.pages.remove(offset);
                o.heap = o.heap.saturating_sub(Tree::<Page<F>>::NODE_BYTES);
                o.account.give(Resource::Heap, Tree::<Page<F>>::NODE_BYTES);
            }
        }
    }

    /// The pager of `id` answered `offset` with an error: the page is [`Page::Failed`]
    /// (faults on it are errors) until a supply or a flush. A resident page is left as it
    /// is ([`Error::InvalidArgument`]), as are objects without a pager.
    pub fn page_in_error(&mut self, id: ObjectId, offset: u64) -> Result<(), Error> {
        let o = self.get(id).ok_or(Error::NotFound)?;
        if !matches!(o.kind, Kind::Pager { .. }) {
            return Err(Error::InvalidArgument);
        }
        let new = self.check_new_page(id, offset)?;
        let o = self.get_mut(id).ok_or(Error::NotFound)?;
        if new {
            let node = Tree::<Page<F>>::NODE_BYTES;
            o.account.take(Resource::Heap, node)?;
            if o.pages.insert(offset, Page::Failed).is_err() {
                o.account.give(Resource::Heap, node);
                return Err(Error::NoMemory);
            }
            o.heap += node;
        } else if let Some(p) = o.pages.get_mut(offset) {
            *p = Page::Failed;
        }
        Ok(())
    }

    /// The resident page of `id` at `offset`, if it has one of its own.
    pub fn resident(&self, id: ObjectId, offset: u64) -> Option<F> {
        // Through the page tree's hint: a fault's retry and a handler's change look up
        // the page the fault found.
        match self.get(id)?.pages.get_hinted(offset) {
            Some(Page::Resident(f)) => Some(*f),
            _ => None,
        }
    }

    /// The offset of the first page `id` holds at or above `from` and below `to`, and
    /// what it is (the pager's flush and clean walk an object this way).
    pub fn next_page(&self, id: ObjectId, from: u64, to: u64) -> Option<(u64, Page<F>)> {
        let o = self.get(id)?;
        o.pages
            .ceil(from)
            .filter(|(k, _)| *k < to)
            .map(|(k, p)| (k, *p))
    }

    /// Removes the page of the pager-backed `id` at `offset` (a pager's flush): every
    /// translation of it goes first, and its frame comes back to the caller (to return its
    /// contents to the pager, then free it); a failed page is forgotten (`None`). A page
    /// being paged in stays. [`Error::Denied`] when `id` has a copy object, which may
    /// still need the page (a flush would change what a copy sees).
    pub fn flush_page(
        &mut self,
        id: ObjectId,
        offset: u64,
        m: &mut impl Machine<F>,
    ) -> Result<Option<F>, Error> {
        let o = self.get_mut(id).ok_or(Error::NotFound)?;
        if !matches!(o.kind, Kind::Pager { .. }) {
            return Err(Error::InvalidArgument);
        }
        if o.copy.is_some() || o.shadows > 0 {
            return Err(Error::Denied);
        }
        let frame = match o.pages.get(offset) {
            None | Some(Page::PagingIn | Page::Out { .. }) => return Ok(None),
            Some(Page::Resident(f)) => Some(*f),
            Some(Page::Failed) => None,
        };
        if let Some(f) = frame {
            m.unmap_everywhere(f);
        }
        o.pages.remove(offset);
        o.heap = o.heap.saturating_sub(Tree::<Page<F>>::NODE_BYTES);
        o.account.give(Resource::Heap, Tree::<Page<F>>::NODE_BYTES);
        if frame.is_some() {
            let charge = u64::from(!o.committed);
            o.frames = o.frames.saturating_sub(charge);
            o.account.give(Resource::Frames, charge);
        }
        Ok(frame)
    }

    /// The pager of `id` is gone: pages being paged in are absent again, and faults on
    /// absent pages are errors from now on.
    pub fn pager_died(&mut self, id: ObjectId) {
        let Some(o) = self.get_mut(id) else { return };
        if let Kind::Pager { pager, .. } = o.kind {
            o.kind = Kind::Pager { pager, dead: true };
        }
        let mut from = 0;
        while let Some(off) = self.get(id).and_then(|o| {
            o.pages
                .range(from, u64::MAX)
                .find(|(_, p)| matches!(p, Page::PagingIn))
                .map(|(k, _)| k)
        }) {
            self.page_in_failed(id, off);
            from = off;
        }
    }

    /// Pages out the resident page of the anonymous `id` at `offset` into backing-store
    /// slot `slot` (page replacement): the page becomes [`Page::Out`] and its frame comes
    /// back to the caller, who has already removed every translation of it, and copies its
    /// contents out before freeing it. The frame charge stays with the object.
    /// [`Error::InvalidArgument`] for anything but a resident page of an anonymous object
    /// that is not pinned (nothing changed).
    pub fn page_out(&mut self, id: ObjectId, offset: u64, slot: u32) -> Result<F, Error> {
        let o = self.get_mut(id).ok_or(Error::NotFound)?;
        if o.kind != Kind::Anonymous || o.pinned {
            return Err(Error::InvalidArgument);
        }
        let p = o.pages.get_mut(offset).ok_or(Error::InvalidArgument)?;
        let Page::Resident(f) = *p else {
            return Err(Error::InvalidArgument);
        };
        *p = Page::Out { slot, asked: false };
        Ok(f)
    }

    /// Drops the resident page of the pager-backed `id` at `offset` (page replacement of
    /// a page its pager can supply again); its frame comes back to the caller, who has
    /// removed every translation of it. [`Error::InvalidArgument`] for anything else, and
    /// [`Error::Denied`] for an object with a copy object or shadows (they may still need
    /// the page as it is).
    pub fn drop_pager_page(&mut self, id: ObjectId, offset: u64) -> Result<F, Error> {
        let o = self.get(id).ok_or(Error::NotFound)?;
        if !matches!(o.kind, Kind::Pager { dead: false, .. }) {
            return Err(Error::InvalidArgument);
        }
        if !matches!(o.pages.get(offset), Some(Page::Resident(_))) {
            return Err(Error::InvalidArgument);
        }
        struct Keep;
        impl<F> Machine<F> for Keep {
            fn free_frame(&mut self, _: F) {}
            fn unmap(&mut self, _: u64, _: u64) {}
            fn write_protect(&mut self, _: u64, _: u64) {}
            fn write_protect_everywhere(&mut self, _: F) {}
            fn unmap_everywhere(&mut self, _: F) {}
        }
        self.flush_page(id, offset, &mut Keep)?
            .ok_or(Error::InvalidArgument)
    }

    /// Marks the paged-out page of `id` at `offset` as asked of the default pager; its
    /// slot. [`Error::InvalidArgument`] when it is not a paged-out page not yet asked for.
    pub(crate) fn begin_swap_in(&mut self, id: ObjectId, offset: u64) -> Result<u32, Error> {
        let o = self.get_mut(id).ok_or(Error::NotFound)?;
        match o.pages.get_mut(offset) {
            Some(Page::Out { slot, asked }) if !*asked => {
                *asked = true;
                Ok(*slot)
            }
            _ => Err(Error::InvalidArgument),
        }
    }

    /// Puts `frame` (holding the contents the default pager kept in `slot`) back at
    /// `offset` of `id`, whose page there is paged out to `slot`: resident again, with no
    /// new charge (the page kept its charge). The slot is the caller's to free. On an
    /// error (the page is not paged out to that slot any more) the frame comes back.
    pub fn swap_in(
        &mut self,
        id: ObjectId,
        offset: u64,
        slot: u32,
        frame: F,
    ) -> Result<(), (Error, F)> {
        let Some(o) = self.get_mut(id) else {
            return Err((Error::NotFound, frame));
        };
        match o.pages.get_mut(offset) {
            Some(p) if matches!(*p, Page::Out { slot: s, .. } if s == slot) => {
                *p = Page::Resident(frame);
                Ok(())
            }
            _ => Err((Error::InvalidArgument, frame)),
        }
    }

    /// The default pager could not be asked for the paged-out page of `id` at `offset`
    /// (or died before answering): not asked any more (the next fault asks again, or
    /// fails if there is no default pager).
    pub fn swap_in_failed(&mut self, id: ObjectId, offset: u64) {
        if let Some(o) = self.get_mut(id) {
            if let Some(Page::Out { asked, .. }) = o.pages.get_mut(offset) {
                *asked = false;
            }
        }
    }

    /// The pager of the pager-backed `id` restricts access to its page at `offset` to
    /// `allow` (every access: unlocked). The lock stays on the offset, whether the page is
    /// resident or not, until the pager changes it or the object goes; a lock node is
    /// charged to the object's account. When the lock takes a right away from a resident
    /// page, its translations everywhere lose it (write-protected, or removed when reads
    /// go too) and refault into the lock. [`Error::InvalidArgument`] for an object that is
    /// not pager-backed or an offset outside it, [`Error::NoMemory`] (nothing changed).
    pub fn set_lock(
        &mut self,
        id: ObjectId,
        offset: u64,
        allow: Prot,
        m: &mut impl Machine<F>,
    ) -> Result<(), Error> {
        let o = self.get_mut(id).ok_or(Error::NotFound)?;
        if !matches!(o.kind, Kind::Pager { .. }) || !page_aligned(offset) || offset >= o.size {
            return Err(Error::InvalidArgument);
        }
        let node = Tree::<Prot>::NODE_BYTES;
        let before = o.locks.get(offset).copied().unwrap_or(Prot::ALL);
        let (mut made, mut gone) = (false, false);
        if allow.contains(Prot::ALL) {
            if o.locks.remove(offset).is_some() {
                o.heap = o.heap.saturating_sub(node);
                o.account.give(Resource::Heap, node);
                gone = true;
            }
        } else if let Some(l) = o.locks.get_mut(offset) {
            *l = allow;
        } else {
            o.account.take(Resource::Heap, node)?;
            if o.locks.insert(offset, allow).is_err() {
                o.account.give(Resource::Heap, node);
                return Err(Error::NoMemory);
            }
            o.heap += node;
            made = true;
        }
        if made {
            self.locked += 1;
        }
        if gone {
            self.locked = self.locked.saturating_sub(1);
        }
        let taken = before.minus(allow);
        let Some(o) = self.slab.get(id.0) else {
            return Ok(());
        };
        if let Some(Page::Resident(f)) = o.pages.get(offset) {
            if taken.contains(Prot::READ) || taken.contains(Prot::EXECUTE) {
                m.unmap_everywhere(*f);
            } else if taken.contains(Prot::WRITE) {
                m.write_protect_everywhere(*f);
            }
        }
        Ok(())
    }

    /// The accesses the pager of `id` allows at `offset` (every access where it set no
    /// lock, and for an object that is not pager-backed).
    pub fn lock_at(&self, id: ObjectId, offset: u64) -> Prot {
        self.get(id)
            .and_then(|o| o.locks.get(offset).copied())
            .unwrap_or(Prot::ALL)
    }

    /// Whether `id` has any locked page (a quick test before [`Objects::lock_at`]; one
    /// load while no object has any).
    pub fn has_locks(&self, id: ObjectId) -> bool {
        self.locked > 0 && self.get(id).is_some_and(|o| !o.locks.is_empty())
    }

    /// Frees the pages of the private `id` in `[from, to)` (a window its map dropped);
    /// nothing for an object that is not private.
    pub(crate) fn free_window(
        &mut self,
        id: ObjectId,
        from: u64,
        to: u64,
        m: &mut impl Machine<F>,
    ) {
        let Some(o) = self.get_mut(id) else { return };
        if !o.private {
            return;
        }
        if o.committed {
            // The window's whole commitment goes, resident or not.
            let n = pages(to.saturating_sub(from)).min(o.frames);
            o.frames -= n;
            o.account.give(Resource::Frames, n);
        }
        let charge = u64::from(!o.committed);
        // A window holding every page (the whole object dropped): one pass over the tree.
        let all = o.pages.first().is_some_and(|(k, _)| k >= from)
            && o.pages.last().is_some_and(|(k, _)| k < to);
        if all {
            let (mut frames, mut nodes) = (0, 0);
            o.pages.drain(|_, p| {
                nodes += 1;
                match p {
                    Page::Resident(f) => {
                        m.free_frame(f);
                        frames += charge;
                    }
                    Page::Out { slot, .. } => {
                        m.free_slot(slot);
                        frames += charge;
                    }
                    Page::PagingIn | Page::Failed => {}
                }
            });
            let heap = nodes * Tree::<Page<F>>::NODE_BYTES;
            o.frames = o.frames.saturating_sub(frames);
            o.account.give(Resource::Frames, frames);
            o.heap = o.heap.saturating_sub(heap);
            o.account.give(Resource::Heap, heap);
            return;
        }
        while let Some(off) = o.pages.ceil(from).map(|(k, _)| k).filter(|k| *k < to) {
            match o.pages.remove(off) {
                Some(Page::Resident(f)) => {
                    m.free_frame(f);
                    o.frames = o.frames.saturating_sub(charge);
                    o.account.give(Resource::Frames, charge);
                }
                Some(Page::Out { slot, .. }) => {
                    m.free_slot(slot);
                    o.frames = o.frames.saturating_sub(charge);
                    o.account.give(Resource::Frames, charge);
                }
                _ => {}
            }
            o.heap = o.heap.saturating_sub(Tree::<Page<F>>::NODE_BYTES);
            o.account.give(Resource::Heap, Tree::<Page<F>>::NODE_BYTES);
        }
    }
}

/// Pages in `len` bytes.
pub const fn pages(len: u64) -> u64 {
    len / PAGE_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Account;
    use crate::vm::testing::Recorder;

    const P: u64 = PAGE_SIZE;

    fn setup() -> (Objects<u64>, AccountRef, Recorder) {
        (
            Objects::new(1000),
            Account::root(1 << 30, 1 << 20).unwrap(),
            Recorder::default(),
        )
    }

    #[test]
    fn create_insert_find_and_destroy_refunds_everything() {
        let (mut objs, acct, mut m) = setup();
        let o = objs.anonymous(4 * P, &acct).unwrap();
        assert_eq!(objs.find(o, P).unwrap(), Found::Zero);
        objs.insert_page(o, P, 7).unwrap();
        assert_eq!(acct.used(Resource::Frames), 1);
        assert!(matches!(
            objs.find(o, P).unwrap(),
            Found::Resident {
                frame: 7,
                depth: 0,
                ..
            }
        ));
        // A second page at the same offset, a bad offset, a partial page: refused.
        assert_eq!(objs.insert_page(o, P, 8), Err((Error::InvalidArgument, 8)));
        assert_eq!(
            objs.insert_page(o, 4 * P, 8),
            Err((Error::InvalidArgument, 8))
        );
        assert_eq!(objs.insert_page(o, 1, 8), Err((Error::InvalidArgument, 8)));
        // The refused page changed nothing: the first is still there, charged once.
        assert_eq!(objs.resident(o, P), Some(7));
        assert_eq!(acct.used(Resource::Frames), 1);
        assert_eq!(
            acct.used(Resource::Heap),
            OBJECT_BYTES + Tree::<Page<u64>>::NODE_BYTES
        );
        objs.release(o, &mut m);
        assert!(objs.is_empty());
        assert_eq!(m.freed, [7]);
        assert_eq!(acct.used(Resource::Frames), 0);
        assert_eq!(acct.used(Resource::Heap), 0);
        // The stale id reaches nothing.
        assert_eq!(objs.find(o, 0), Err(Error::NotFound));
        assert_eq!(objs.insert_page(o, 0, 9), Err((Error::NotFound, 9)));
    }

    #[test]
    fn bad_sizes_and_exhaustion_are_errors() {
        let (mut objs, acct, _) = setup();
        assert_eq!(objs.anonymous(0, &acct), Err(Error::InvalidArgument));
        assert_eq!(objs.anonymous(P + 1, &acct), Err(Error::InvalidArgument));
        assert_eq!(
            objs.physical(1, P, false, &acct),
            Err(Error::InvalidArgument)
        );
        let tiny = Account::root(OBJECT_BYTES, 1).unwrap();
        let o = objs.anonymous(P, &tiny).unwrap();
        assert_eq!(objs.anonymous(P, &tiny), Err(Error::NoMemory));
        // The frame fits, the page's node does not.
        assert_eq!(objs.insert_page(o, 0, 1), Err((Error::NoMemory, 1)));
        assert_eq!(tiny.used(Resource::Frames), 0);
        // A page being paged in has its node charged already: its supply arrives even
        // when the account could not take another node.
        let full = Account::root(OBJECT_BYTES + Tree::<Page<u64>>::NODE_BYTES, 4).unwrap();
        let pg = objs.pager(9, P, &full).unwrap();
        objs.begin_page_in(pg, 0).unwrap();
        assert_eq!(objs.insert_page(pg, 0, 3), Ok(()));
        assert_eq!(objs.resident(pg, 0), Some(3));
        assert_eq!(full.used(Resource::Heap), full.limit(Resource::Heap));
        let mut few: Objects<u64> = Objects::new(1);
        few.anonymous(P, &acct).unwrap();
        assert_eq!(few.anonymous(P, &acct), Err(Error::NoMemory));
    }

    #[test]
    fn physical_and_pager_lookups() {
        let (mut objs, acct, mut m) = setup();
        let d = objs.physical(0xfee0_0000, 2 * P, true, &acct).unwrap();
        assert_eq!(
            objs.find(d, P).unwrap(),
            Found::Physical {
                addr: 0xfee0_1000,
                uncached: true
            }
        );
        assert_eq!(objs.insert_page(d, 0, 1), Err((Error::InvalidArgument, 1)));
        assert_eq!(objs.shadow(d, 0, P, &acct), Err(Error::InvalidArgument));
        let p = objs.pager(42, 2 * P, &acct).unwrap();
        assert!(matches!(
            objs.find(p, 0).unwrap(),
            Found::Pager {
                pager: 42,
                dead: false,
                ..
            }
        ));
        objs.begin_page_in(p, 0).unwrap();
        assert!(matches!(objs.find(p, 0).unwrap(), Found::PagingIn { .. }));
        objs.insert_page(p, 0, 5).unwrap();
        assert!(matches!(
            objs.find(p, 0).unwrap(),
            Found::Resident { frame: 5, .. }
        ));
        objs.begin_page_in(p, P).unwrap();
        objs.pager_died(p);
        assert!(matches!(
            objs.find(p, P).unwrap(),
            Found::Pager { dead: true, .. }
        ));
        objs.release(p, &mut m);
        objs.release(d, &mut m);
        assert_eq!(m.freed, [5]);
        assert_eq!(acct.used(Resource::Heap), 0);
    }

    #[test]
    fn shadows_look_down_and_collapse_when_alone() {
        let (mut objs, acct, mut m) = setup();
        let o = objs.anonymous(4 * P, &acct).unwrap();
        objs.insert_page(o, 0, 10).unwrap();
        objs.insert_page(o, P, 11).unwrap();
        objs.insert_page(o, 3 * P, 13).unwrap();
        // Two shadows of the window [P, 4P): o's entry reference plus one more.
        objs.add_ref(o).unwrap();
        let s1 = objs.shadow(o, P, 3 * P, &acct).unwrap();
        let s2 = objs.shadow(o, P, 3 * P, &acct).unwrap();
        assert_eq!(objs.get(o).unwrap().shadows(), 2);
        objs.insert_page(s1, 0, 21).unwrap();
        assert!(matches!(
            objs.find(s2, 0).unwrap(),
            Found::Resident {
                frame: 11,
                depth: 1,
                ..
            }
        ));
        assert!(matches!(
            objs.find(s1, 0).unwrap(),
            Found::Resident { frame: 21, .. }
        ));
        assert_eq!(objs.find(s1, P).unwrap(), Found::Zero);
        // s2 goes: o's only reference is s1, so o collapses into it.
        objs.release(s2, &mut m);
        assert_eq!(objs.len(), 1);
        assert_eq!(objs.chain_len(s1), 1);
        let so = objs.get(s1).unwrap();
        assert_eq!(so.backing(), None);
        // s1 kept its own page 0; o's page P (s1's 0) was hidden, o's page 0 outside the
        // window: both freed; o's 3P moved up to s1's 2P.
        assert_eq!(so.page(0), Some(Page::Resident(21)));
        assert_eq!(so.page(2 * P), Some(Page::Resident(13)));
        assert_eq!(so.pages(), 2);
        let mut freed = m.freed.clone();
        freed.sort();
        assert_eq!(freed, [10, 11]);
        assert_eq!(acct.used(Resource::Frames), 2);
        objs.release(s1, &mut m);
        assert!(objs.is_empty());
        assert_eq!(acct.used(Resource::Heap), 0);
        assert_eq!(acct.used(Resource::Frames), 0);
    }

    #[test]
    fn collapse_waits_when_the_shadows_account_cannot_take_the_pages() {
        let (mut objs, acct, mut m) = setup();
        let o = objs.anonymous(P, &acct).unwrap();
        objs.insert_page(o, 0, 1).unwrap();
        objs.add_ref(o).unwrap();
        let poor = Account::root(OBJECT_BYTES, 0).unwrap();
        let s = objs.shadow(o, 0, P, &poor).unwrap();
        objs.release(o, &mut m);
        assert_eq!(
            objs.chain_len(s),
            2,
            "not collapsed: the frame's charge cannot move"
        );
        assert!(matches!(
            objs.find(s, 0).unwrap(),
            Found::Resident { frame: 1, .. }
        ));
        objs.release(s, &mut m);
        assert!(objs.is_empty());
        assert_eq!(m.freed, [1]);
    }

    #[test]
    fn copy_objects_chain_newest_first_and_are_reused_while_unwritten() {
        let (mut objs, acct, mut m) = setup();
        let o = objs.anonymous(2 * P, &acct).unwrap();
        objs.insert_page(o, 0, 1).unwrap();
        objs.add_ref(o).unwrap(); // a second sharer
        let c1 = objs.copy_object(o, &acct, &mut m).unwrap();
        assert_eq!(m.protected_frames, [1]);
        assert_eq!(objs.copy_object(o, &acct, &mut m).unwrap(), c1, "reused");
        assert_eq!(objs.get(c1).unwrap().refs(), 2);
        objs.mark_written(o);
        let c2 = objs.copy_object(o, &acct, &mut m).unwrap();
        assert_ne!(c1, c2);
        assert_eq!(objs.get(o).unwrap().copy(), Some(c2));
        assert_eq!(objs.get(c1).unwrap().backing(), Some((c2, 0)));
        assert_eq!(objs.get(o).unwrap().shadows(), 1);
        // o: two sharers and c2.
        assert_eq!(objs.get(o).unwrap().refs(), 3);
        objs.release(c2, &mut m);
        // c2's only reference is now c1, its shadow: it collapses into c1, which becomes
        // o's copy again, but is not reused as a fresh snapshot.
        assert_eq!(objs.len(), 2);
        assert_eq!(objs.get(o).unwrap().copy(), Some(c1));
        assert_eq!(objs.get(c1).unwrap().backing(), Some((o, 0)));
        assert!(objs.get(c1).unwrap().written());
        objs.release(c1, &mut m);
        objs.release(c1, &mut m);
        assert_eq!(objs.len(), 1);
        assert_eq!(objs.get(o).unwrap().copy(), None);
        assert_eq!(objs.get(o).unwrap().refs(), 2);
    }

    #[test]
    fn private_windows_free_their_pages() {
        let (mut objs, acct, mut m) = setup();
        let o = objs.anonymous(4 * P, &acct).unwrap();
        for i in 0..4 {
            objs.insert_page(o, i * P, i).unwrap();
        }
        objs.add_split_ref(o).unwrap();
        objs.free_window(o, P, 3 * P, &mut m);
        assert_eq!(m.freed, [1, 2]);
        assert_eq!(objs.get(o).unwrap().pages(), 2);
        objs.add_ref(o).unwrap();
        objs.free_window(o, 0, 4 * P, &mut m);
        assert_eq!(objs.get(o).unwrap().pages(), 2, "shared: nothing freed");
    }

    #[test]
    fn pager_errors_flushes_and_refills() {
        let (mut objs, acct, mut m) = setup();
        let o = objs.pager(9, 4 * P, &acct).unwrap();
        assert!(matches!(
            objs.find(o, P).unwrap(),
            Found::Pager { pager: 9, .. }
        ));
        // An error marks the page failed; a lookup says so; the heap node is charged.
        objs.page_in_error(o, P).unwrap();
        assert_eq!(
            objs.find(o, P).unwrap(),
            Found::Failed {
                object: o,
                offset: P
            }
        );
        let heap = acct.used(Resource::Heap);
        // A supply replaces the failed page, without a second node.
        objs.insert_page(o, P, 5).unwrap();
        assert_eq!(acct.used(Resource::Heap), heap);
        assert_eq!(objs.resident(o, P), Some(5));
        assert_eq!(objs.next_page(o, 0, 4 * P), Some((P, Page::Resident(5))));
        assert_eq!(objs.next_page(o, 2 * P, 4 * P), None);
        // An error on a resident page is refused and changes nothing.
        assert_eq!(objs.page_in_error(o, P), Err(Error::InvalidArgument));
        assert_eq!(objs.resident(o, P), Some(5));
        // A flush removes the page everywhere and hands the frame back, refunding it.
        assert_eq!(objs.flush_page(o, P, &mut m), Ok(Some(5)));
        assert_eq!(m.unmapped_frames, [5]);
        assert!(m.freed.is_empty());
        assert_eq!(acct.used(Resource::Frames), 0);
        assert!(matches!(objs.find(o, P).unwrap(), Found::Pager { .. }));
        // A failed page is forgotten by a flush; an absent one is nothing.
        objs.page_in_error(o, 0).unwrap();
        assert_eq!(objs.flush_page(o, 0, &mut m), Ok(None));
        assert!(matches!(objs.find(o, 0).unwrap(), Found::Pager { .. }));
        assert_eq!(objs.flush_page(o, 2 * P, &mut m), Ok(None));
        // Not for anonymous objects.
        let a = objs.anonymous(P, &acct).unwrap();
        assert_eq!(objs.page_in_error(a, 0), Err(Error::InvalidArgument));
        assert_eq!(objs.flush_page(a, 0, &mut m), Err(Error::InvalidArgument));
        objs.release(a, &mut m);
        assert_eq!(objs.take_freed_pager(), None);
        objs.release(o, &mut m);
        assert!(objs.is_empty());
        assert_eq!(acct.used(Resource::Heap), 0);
        // The kernel hears that pager 9's object is gone, once.
        assert_eq!(objs.take_freed_pager(), Some(9));
        assert_eq!(objs.take_freed_pager(), None);
    }

    #[test]
    fn a_pager_object_someone_copied_is_not_flushed() {
        let (mut objs, acct, mut m) = setup();
        let o = objs.pager(1, 2 * P, &acct).unwrap();
        objs.insert_page(o, 0, 3).unwrap();
        // The shadow takes over the creation reference.
        let s = objs.shadow(o, 0, 2 * P, &acct).unwrap();
        assert_eq!(objs.flush_page(o, 0, &mut m), Err(Error::Denied));
        assert_eq!(objs.resident(o, 0), Some(3));
        objs.release(s, &mut m);
        assert!(objs.is_empty());
    }
}
