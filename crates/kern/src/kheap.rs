//! Size-class caches for the kernel heap: small blocks in O(1), whatever else lies free.
//!
//! A first-fit heap walks its free blocks on every allocation, so a task that leaves
//! thousands of small holes (queued messages, half of them received) slows every later
//! allocation of everyone. [`Heap`] serves every block of at most [`MAX_SMALL`] bytes
//! (and alignment at most [`MAX_ALIGN`]) from a size class instead, as the slab allocators
//! of Bonwick's *The Slab Allocator* (USENIX 1994) and Linux's SLUB do: the request is
//! rounded up to one of [`CLASSES`], and the block comes from a [`CHUNK_SIZE`] chunk cut
//! into slots of that size. Larger or more strictly aligned blocks, and the chunks
//! themselves, come from a general allocator behind the [`Backing`] trait (the kernel
//! uses `talc`, whose binned free lists do not walk the holes either).
//!
//! Allocation and release are O(1), however many holes there are: the class comes from a
//! table; the slot from the first chunk on the class's list of chunks that have a free
//! slot (from the chunk's own free list, or the next slot never handed out); a released
//! slot goes back on its chunk's free list, the chunk being found by masking the address
//! (chunks are aligned to their size and begin with their header).
//!
//! **Memory goes back to the general allocator** when a chunk's last slot is released,
//! except that each class keeps one empty chunk as a spare, so that a block allocated and
//! released over and over at a chunk's edge does not take and return a chunk every time.
//! Empty chunks therefore strand at most `CLASSES.len() × CHUNK_SIZE` bytes (384 KiB) for
//! other sizes; partly used chunks hold their free slots for their own class, which is
//! the price of any slab (a chunk with one live block keeps its 16 KiB).
//!
//! [`Heap::used`] is the sum of the sizes callers asked for of the blocks live now (not
//! rounded to classes, without chunk headers, spares or the general allocator's own
//! overhead); [`Heap::taken`] is what the heap holds from its general allocator.
//!
//! # Invariants
//! - Every chunk of class `c` is in exactly one state: on `classes[c].partial` with
//!   `1 <= used < capacity(c)`; `classes[c].spare` with `used == 0`; or full
//!   (`used == capacity(c)`) and on no list.
//! - In every chunk, `used` + the length of its free list + `capacity - fresh` ==
//!   `capacity`: every slot is handed out, on the free list, or at an index at or past
//!   `fresh` (never handed out yet), and only one of these.
//! - A chunk's address is a multiple of [`CHUNK_SIZE`]; its slot `i` is at
//!   `HEADER + i * CLASSES[c]`, so a slot's chunk is its address rounded down.
//! - `used` is the sum of `layout.size()` over the live blocks; `taken` the sum of the
//!   sizes of the blocks held from the backing allocator.

use core::alloc::Layout;
use core::ptr::{self, NonNull};

/// Where the heap gets its chunks and its large blocks.
pub trait Backing {
    /// A block of `layout` (whose size is never 0), or `None` when there is no room.
    fn alloc(&mut self, layout: Layout) -> Option<NonNull<u8>>;

    /// Returns a block.
    ///
    /// # Safety
    /// `ptr` came from [`Backing::alloc`] of this backing with this `layout` and has not
    /// been returned since.
    unsafe fn free(&mut self, ptr: NonNull<u8>, layout: Layout);
}

/// The slot sizes, in bytes: every multiple of 16 up to 128, then four classes per
/// doubling (a block of more than 128 bytes loses less than a fifth of its slot to
/// rounding).
pub const CLASSES: [usize; 24] = [
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
    1280, 1536, 1792, 2048,
];

/// The largest block served from a size class.
pub const MAX_SMALL: usize = 2048;
/// The strictest alignment served from a size class.
pub const MAX_ALIGN: usize = 64;
/// Bytes of one chunk (and its alignment).
pub const CHUNK_SIZE: usize = 16 * 1024;
/// Offset of a chunk's first slot: room for its header, and a multiple of [`MAX_ALIGN`].
const HEADER: usize = 64;

/// The smallest class at least `16 * i` bytes, for `i` in `0..=MAX_SMALL / 16`.
const LOOKUP: [u8; MAX_SMALL / 16 + 1] = {
    let mut table = [0u8; MAX_SMALL / 16 + 1];
    let mut i = 0;
    let mut c = 0;
    while i < table.len() {
        while CLASSES[c] < i * 16 {
            c += 1;
        }
        table[i] = c as u8;
        i += 1;
    }
    table
};

/// The size class of a block of `layout`, or `None` when it is too large or too strictly
/// aligned for one. The class's size is at least `layout.size()` and a multiple of
/// `layout.align()`, so every slot of it is aligned (slots start at multiples of the
/// class size from a [`MAX_ALIGN`]-aligned first slot).
#[inline]
pub fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size();
    let align = layout.align();
    if size > MAX_SMALL || align > MAX_ALIGN {
        return None;
    }
    let mut c = usize::from(*LOOKUP.get(size.div_ceil(16))?);
    if align > 16 {
        // Rare: the first class from here whose size is a multiple of the alignment.
        while !CLASSES.get(c)?.is_multiple_of(align) {
            c += 1;
        }
    }
    Some(c)
}

/// Slots in a chunk of class `c` (0 for no class).
#[inline]
fn capacity(c: usize) -> u32 {
    CLASSES
        .get(c)
        .map_or(0, |&size| ((CHUNK_SIZE - HEADER) / size) as u32)
}

/// The header at the start of every chunk.
#[repr(C)]
struct Chunk {
    /// Released slots, chained through their first word.
    free: *mut FreeSlot,
    /// Neighbours on the class's partial list (null at its ends).
    prev: *mut Chunk,
    next: *mut Chunk,
    /// Slots handed out now.
    used: u32,
    /// Slots at or past this index have never been handed out.
    fresh: u32,
}

const _: () = assert!(core::mem::size_of::<Chunk>() <= HEADER);
const _: () = assert!(HEADER.is_multiple_of(MAX_ALIGN) && CHUNK_SIZE.is_multiple_of(MAX_ALIGN));

/// A released slot.
struct FreeSlot {
    next: *mut FreeSlot,
}

/// One size class's chunks.
#[derive(Clone, Copy)]
struct Class {
    /// Chunks with a free slot and at least one live block (doubly linked).
    partial: *mut Chunk,
    /// An empty chunk kept for the next allocation (or null).
    spare: *mut Chunk,
}

const EMPTY_CLASS: Class = Class {
    partial: ptr::null_mut(),
    spare: ptr::null_mut(),
};

/// The layout of a chunk.
const CHUNK_LAYOUT: Layout = match Layout::from_size_align(CHUNK_SIZE, CHUNK_SIZE) {
    Ok(l) => l,
    Err(_) => panic!("chunk layout"),
};

/// A heap of size classes over `B`. See the module documentation.
pub struct Heap<B: Backing> {
    backing: B,
    classes: [Class; CLASSES.len()],
    /// Bytes callers asked for, of the blocks live now.
    used: usize,
    /// Bytes held from `backing` (chunks and large blocks).
    taken: usize,
    /// Chunks held (on a partial list, spare, or full).
    chunks: usize,
}

// SAFETY: the raw pointers are to chunks that the heap alone owns (taken from `backing`
// and given back only by the heap); nothing in them is tied to a thread, so the heap may
// move to another thread with its backing.
unsafe impl<B: Backing + Send> Send for Heap<B> {}

impl<B: Backing> Heap<B> {
    /// An empty heap over `backing`.
    pub const fn new(backing: B) -> Heap<B> {
        Heap {
            backing,
            classes: [EMPTY_CLASS; CLASSES.len()],
            used: 0,
            taken: 0,
            chunks: 0,
        }
    }

    /// The backing allocator.
    pub fn backing(&mut self) -> &mut B {
        &mut self.backing
    }

    /// Bytes asked for, of the blocks live now.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Bytes held from the backing allocator: chunks (in use or spare) and large blocks.
    pub fn taken(&self) -> usize {
        self.taken
    }

    /// Chunks held from the backing allocator.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// A block of `layout`, or `None` when the backing allocator has no room. A size of 0
    /// is served as 1.
    #[inline]
    pub fn alloc(&mut self, layout: Layout) -> Option<NonNull<u8>> {
        let block = match class_of(layout) {
            Some(c) => self.alloc_small(c)?,
            None => {
                let l = nonzero(layout)?;
                let block = self.backing.alloc(l)?;
                self.taken += l.size();
                block
            }
        };
        self.used += layout.size();
        Some(block)
    }

    /// Releases a block.
    ///
    /// # Safety
    /// `ptr` came from [`Heap::alloc`] (or [`Heap::realloc`]) of this heap with this
    /// `layout` and has not been released since.
    #[inline]
    pub unsafe fn free(&mut self, ptr: NonNull<u8>, layout: Layout) {
        self.used = self.used.saturating_sub(layout.size());
        match class_of(layout) {
            // SAFETY: the caller's promise; the block was served from class `c`, since
            // `class_of` is a function of the layout.
            Some(c) => unsafe { self.free_small(ptr, c) },
            None => {
                let Some(l) = nonzero(layout) else { return };
                self.taken = self.taken.saturating_sub(l.size());
                // SAFETY: the caller's promise; the block came from `backing` with `l`.
                unsafe { self.backing.free(ptr, l) }
            }
        }
    }

    /// Resizes a block to `new_size` bytes (same alignment), keeping its contents up to
    /// the smaller size: in place when both sizes fall in the same class, else by a new
    /// block, a copy and the release of the old. `None` (the old block untouched) when
    /// there is no room.
    ///
    /// # Safety
    /// As for [`Heap::free`]; `new_size` with `layout.align()` is a valid layout.
    pub unsafe fn realloc(
        &mut self,
        ptr: NonNull<u8>,
        layout: Layout,
        new_size: usize,
    ) -> Option<NonNull<u8>> {
        let new = Layout::from_size_align(new_size, layout.align()).ok()?;
        let old_class = class_of(layout);
        if old_class.is_some() && old_class == class_of(new) {
            self.used = self.used.saturating_sub(layout.size()) + new_size;
            return Some(ptr);
        }
        let block = self.alloc(new)?;
        // SAFETY: both blocks are live and distinct (the new one was just handed out), and
        // each holds at least the smaller size.
        unsafe {
            ptr::copy_nonoverlapping(ptr.as_ptr(), block.as_ptr(), layout.size().min(new_size))
        };
        // SAFETY: the caller's promise.
        unsafe { self.free(ptr, layout) };
        Some(block)
    }

    /// A slot of class `c`.
    fn alloc_small(&mut self, c: usize) -> Option<NonNull<u8>> {
        let size = *CLASSES.get(c)?;
        let cap = capacity(c);
        let class = self.classes.get_mut(c)?;
        let mut chunk = class.partial;
        if chunk.is_null() {
            chunk = if class.spare.is_null() {
                let block = self.backing.alloc(CHUNK_LAYOUT)?;
                self.taken += CHUNK_SIZE;
                self.chunks += 1;
                let chunk = block.as_ptr().cast::<Chunk>();
                // SAFETY: `block` is a fresh, `CHUNK_SIZE`-aligned block of `CHUNK_SIZE`
                // bytes, which hold a `Chunk` at its start.
                unsafe {
                    chunk.write(Chunk {
                        free: ptr::null_mut(),
                        prev: ptr::null_mut(),
                        next: ptr::null_mut(),
                        used: 0,
                        fresh: 0,
                    })
                };
                chunk
            } else {
                core::mem::replace(&mut class.spare, ptr::null_mut())
            };
            // SAFETY: `chunk` is a chunk of this class on no list (fresh or the spare).
            unsafe { push(class, chunk) };
        }
        // SAFETY: `chunk` heads the partial list, so it is a live chunk of class `c` with
        // a free slot (the invariants), and the heap alone reaches it.
        unsafe {
            let ch = &mut *chunk;
            let slot = if !ch.free.is_null() {
                let slot = ch.free;
                ch.free = (*slot).next;
                slot.cast::<u8>()
            } else {
                // `fresh < cap`, or the chunk would have no free slot.
                let offset = HEADER + ch.fresh as usize * size;
                ch.fresh += 1;
                chunk.cast::<u8>().add(offset)
            };
            ch.used += 1;
            if ch.used == cap {
                unlink(class, chunk);
            }
            NonNull::new(slot)
        }
    }

    /// Releases slot `ptr` of class `c`.
    ///
    /// # Safety
    /// `ptr` is a live slot of class `c` of this heap.
    unsafe fn free_small(&mut self, ptr: NonNull<u8>, c: usize) {
        let cap = capacity(c);
        let Some(class) = self.classes.get_mut(c) else {
            return;
        };
        let chunk = ptr
            .as_ptr()
            .map_addr(|a| a & !(CHUNK_SIZE - 1))
            .cast::<Chunk>();
        // SAFETY: a slot's chunk starts at its address rounded down to `CHUNK_SIZE` (the
        // invariants); the slot is live, so the chunk is too, and only the heap reaches
        // its header and its free slots.
        unsafe {
            let ch = &mut *chunk;
            let was_full = ch.used == cap;
            let slot = ptr.as_ptr().cast::<FreeSlot>();
            slot.write(FreeSlot { next: ch.free });
            ch.free = slot;
            ch.used -= 1;
            if ch.used == 0 {
                if !was_full {
                    unlink(class, chunk);
                }
                if class.spare.is_null() {
                    class.spare = chunk;
                } else {
                    self.chunks -= 1;
                    self.taken = self.taken.saturating_sub(CHUNK_SIZE);
                    self.backing
                        .free(NonNull::new_unchecked(chunk.cast()), CHUNK_LAYOUT);
                }
            } else if was_full {
                push(class, chunk);
            }
        }
    }
}

/// `layout` with a size of at least 1.
fn nonzero(layout: Layout) -> Option<Layout> {
    Layout::from_size_align(layout.size().max(1), layout.align()).ok()
}

/// Puts `chunk` at the head of `class`'s partial list.
///
/// # Safety
/// `chunk` is a live chunk of the class on no list.
unsafe fn push(class: &mut Class, chunk: *mut Chunk) {
    // SAFETY: the caller's promise; the list's head, if any, is a live chunk.
    unsafe {
        (*chunk).prev = ptr::null_mut();
        (*chunk).next = class.partial;
        if !class.partial.is_null() {
            (*class.partial).prev = chunk;
        }
    }
    class.partial = chunk;
}

/// Takes `chunk` off `class`'s partial list.
///
/// # Safety
/// `chunk` is on the class's partial list.
unsafe fn unlink(class: &mut Class, chunk: *mut Chunk) {
    // SAFETY: the caller's promise; its neighbours are live chunks of the list.
    unsafe {
        let (prev, next) = ((*chunk).prev, (*chunk).next);
        if prev.is_null() {
            class.partial = next;
        } else {
            (*prev).next = next;
        }
        if !next.is_null() {
            (*next).prev = prev;
        }
        (*chunk).prev = ptr::null_mut();
        (*chunk).next = ptr::null_mut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::vec::Vec;

    /// The host's allocator, with a record of what is out, which rejects bad frees.
    #[derive(Default)]
    struct Host {
        out: BTreeMap<usize, Layout>,
        allocs: usize,
        /// Fail every allocation while set.
        full: bool,
    }

    impl Backing for Host {
        fn alloc(&mut self, layout: Layout) -> Option<NonNull<u8>> {
            assert!(layout.size() > 0);
            if self.full {
                return None;
            }
            // SAFETY: the size is not 0.
            let p = NonNull::new(unsafe { std::alloc::alloc(layout) })?;
            self.out.insert(p.as_ptr() as usize, layout);
            self.allocs += 1;
            Some(p)
        }

        unsafe fn free(&mut self, ptr: NonNull<u8>, layout: Layout) {
            let had = self.out.remove(&(ptr.as_ptr() as usize));
            assert_eq!(
                had,
                Some(layout),
                "a free of a block not out, or with another layout"
            );
            // SAFETY: the block came from `std::alloc::alloc` with `layout` (checked above).
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        }
    }

    impl Host {
        fn bytes_out(&self) -> usize {
            self.out.values().map(|l| l.size()).sum()
        }
    }

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn classes_are_the_smallest_that_fit() {
        for size in 0..=MAX_SMALL {
            for align in [1, 2, 4, 8, 16, 32, 64] {
                let c = class_of(layout(size, align)).unwrap();
                let s = CLASSES[c];
                assert!(
                    s >= size && s.is_multiple_of(align),
                    "size {size} align {align}: {s}"
                );
                let smaller = CLASSES[..c]
                    .iter()
                    .any(|&t| t >= size && t.is_multiple_of(align));
                assert!(!smaller, "size {size} align {align}: a smaller class fits");
            }
        }
        assert_eq!(class_of(layout(MAX_SMALL + 1, 8)), None);
        assert_eq!(class_of(layout(16, 128)), None);
        // A class of 2048 holds 7 slots; every class at least that many.
        assert!((0..CLASSES.len()).all(|c| capacity(c) >= 7));
    }

    #[test]
    fn a_released_slot_is_the_next_handed_out() {
        let mut h = Heap::new(Host::default());
        let a = h.alloc(layout(24, 8)).unwrap();
        let b = h.alloc(layout(24, 8)).unwrap();
        assert_ne!(a, b);
        assert_eq!(h.used(), 48);
        // SAFETY: `a` is live with this layout.
        unsafe { h.free(a, layout(24, 8)) };
        assert_eq!(h.alloc(layout(30, 2)), Some(a), "same class (32), LIFO");
        assert_eq!(h.backing().allocs, 1, "one chunk for all of it");
    }

    #[test]
    fn holes_cost_nothing_and_are_reused() {
        let mut h = Heap::new(Host::default());
        let l16 = layout(16, 8);
        let blocks: Vec<_> = (0..16_000).map(|_| h.alloc(l16).unwrap()).collect();
        let chunks = h.chunks();
        let mut holes = std::collections::BTreeSet::new();
        for b in blocks.iter().step_by(2) {
            // SAFETY: every block is live with `l16`, each released once.
            unsafe { h.free(*b, l16) };
            holes.insert(b.as_ptr() as usize);
        }
        assert_eq!(h.chunks(), chunks, "no chunk became empty");
        // A larger block takes one new chunk and walks no hole.
        let allocs = h.backing().allocs;
        let big = h.alloc(layout(344, 8)).unwrap();
        assert_eq!(h.backing().allocs, allocs + 1);
        // Every hole is handed out again before any new chunk is taken.
        for _ in 0..8_000 {
            let p = h.alloc(l16).unwrap();
            assert!(holes.remove(&(p.as_ptr() as usize)));
        }
        assert_eq!(h.backing().allocs, allocs + 1);
        // SAFETY: live, released once.
        unsafe { h.free(big, layout(344, 8)) };
    }

    #[test]
    fn empty_chunks_go_back_but_one_spare_per_class() {
        let mut h = Heap::new(Host::default());
        let l = layout(100, 4); // class 112
        let blocks: Vec<_> = (0..5_000).map(|_| h.alloc(l).unwrap()).collect();
        assert!(h.chunks() > 30);
        for b in &blocks {
            // SAFETY: live, released once.
            unsafe { h.free(*b, l) };
        }
        assert_eq!(h.used(), 0);
        assert_eq!(h.chunks(), 1, "only the spare is kept");
        assert_eq!(h.taken(), CHUNK_SIZE);
        assert_eq!(h.backing().bytes_out(), CHUNK_SIZE);
        // The spare serves the next block without the backing allocator.
        let allocs = h.backing().allocs;
        let b = h.alloc(l).unwrap();
        assert_eq!(h.backing().allocs, allocs);
        // SAFETY: live, released once.
        unsafe { h.free(b, l) };
    }

    #[test]
    fn large_and_strictly_aligned_blocks_go_to_the_backing_allocator() {
        let mut h = Heap::new(Host::default());
        for l in [layout(4096, 8), layout(32 * 1024, 4096), layout(64, 128)] {
            let p = h.alloc(l).unwrap();
            assert_eq!(p.as_ptr() as usize % l.align(), 0);
            assert_eq!(
                h.backing()
                    .out
                    .get(&(p.as_ptr() as usize))
                    .map(|l| l.size()),
                Some(l.size())
            );
            assert_eq!(h.taken(), l.size());
            // SAFETY: live, released once.
            unsafe { h.free(p, l) };
            assert_eq!(h.taken(), 0);
        }
        assert_eq!(h.used(), 0);
    }

    #[test]
    fn no_room_leaves_the_heap_as_it_was() {
        let mut h = Heap::new(Host::default());
        h.backing().full = true;
        assert_eq!(h.alloc(layout(16, 8)), None);
        assert_eq!(h.alloc(layout(8192, 8)), None);
        assert_eq!((h.used(), h.taken(), h.chunks()), (0, 0, 0));
        h.backing().full = false;
        let p = h.alloc(layout(16, 8)).unwrap();
        h.backing().full = true;
        // SAFETY: `p` is live with this layout; 4096 with alignment 8 is a valid layout.
        let grown = unsafe { h.realloc(p, layout(16, 8), 4096) };
        assert_eq!(grown, None);
        assert_eq!(h.used(), 16, "the old block is still live");
        h.backing().full = false;
        // SAFETY: live, released once.
        unsafe { h.free(p, layout(16, 8)) };
    }

    #[test]
    fn realloc_keeps_contents() {
        let mut h = Heap::new(Host::default());
        let mut l = layout(10, 1);
        let mut p = h.alloc(l).unwrap();
        // SAFETY: the block holds 10 bytes.
        unsafe { ptr::copy_nonoverlapping(b"0123456789".as_ptr(), p.as_ptr(), 10) };
        for new_size in [12, 100, 3000, 16, 5] {
            // SAFETY: `p` is live with `l`.
            let q = unsafe { h.realloc(p, l, new_size) }.unwrap();
            if class_of(l) == class_of(layout(new_size, 1)) {
                assert_eq!(q, p, "same class: in place");
            }
            let keep = l.size().min(new_size).min(10);
            // SAFETY: the block holds at least `keep` bytes.
            let got = unsafe { std::slice::from_raw_parts(q.as_ptr(), keep) };
            assert_eq!(got, &b"0123456789"[..keep]);
            (p, l) = (q, layout(new_size, 1));
            assert_eq!(h.used(), new_size);
        }
        // SAFETY: live, released once.
        unsafe { h.free(p, l) };
    }

    /// A property test against a model: random allocations and releases of random sizes
    /// and alignments; every block is aligned, overlaps no other live block, keeps its
    /// contents until released, and once everything is released the heap holds no more
    /// than one spare chunk per class (all other memory went back).
    #[test]
    fn random_operations_against_a_model() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2 {
            let mut h = Heap::new(Host::default());
            // start address -> (layout, fill byte)
            let mut live: BTreeMap<usize, (Layout, u8)> = BTreeMap::new();
            let mut order: Vec<usize> = Vec::new();
            for step in 0..40_000u32 {
                let r = next();
                if r % 100 < 55 || order.is_empty() {
                    let size = match r >> 8 & 7 {
                        0 => (r >> 16) as usize % 6000,
                        1 => (r >> 16) as usize % 300,
                        _ => (r >> 16) as usize % 64,
                    };
                    let align = 1usize << ((r >> 32) % if round == 0 { 5 } else { 9 });
                    let l = layout(size, align);
                    let p = h.alloc(l).unwrap().as_ptr() as usize;
                    assert_eq!(p % align, 0, "step {step}: {l:?} at {p:#x}");
                    let end = p + size.max(1);
                    if let Some((&q, &(ql, _))) = live.range(..end).next_back() {
                        assert!(q + ql.size().max(1) <= p, "step {step}: overlaps {q:#x}");
                    }
                    let fill = step as u8;
                    // SAFETY: the block holds `size` bytes.
                    unsafe { ptr::write_bytes(p as *mut u8, fill, size) };
                    live.insert(p, (l, fill));
                    order.push(p);
                } else {
                    let i = (r >> 8) as usize % order.len();
                    let p = order.swap_remove(i);
                    let (l, fill) = live.remove(&p).unwrap();
                    // SAFETY: the block is live and holds `l.size()` bytes.
                    let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, l.size()) };
                    assert!(bytes.iter().all(|&b| b == fill), "step {step}: overwritten");
                    // SAFETY: live with `l`, released once.
                    unsafe { h.free(NonNull::new(p as *mut u8).unwrap(), l) };
                }
                let want: usize = live.values().map(|(l, _)| l.size()).sum();
                assert_eq!(h.used(), want);
                assert_eq!(h.taken(), h.backing().bytes_out());
            }
            for p in order {
                let (l, _) = live.remove(&p).unwrap();
                // SAFETY: live with `l`, released once.
                unsafe { h.free(NonNull::new(p as *mut u8).unwrap(), l) };
            }
            assert_eq!(h.used(), 0);
            assert!(h.chunks() <= CLASSES.len(), "{} chunks kept", h.chunks());
            assert_eq!(h.taken(), h.chunks() * CHUNK_SIZE);
            assert_eq!(h.backing().bytes_out(), h.taken());
        }
    }
}
