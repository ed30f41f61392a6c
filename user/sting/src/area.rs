//! Areas: thread-private and shared heaps (the Sting paper's section 5).
//!
//! Every thread allocates from its own *private area* ([`alloc`], [`alloc_slice`]): a bump
//! allocator over chunks that belongs to the thread's TCB, so allocating takes no lock (no
//! other thread ever touches the area) and is a few instructions when the current chunk
//! has room. What a thread allocated privately is reclaimed wholesale when the thread is
//! determined (it returns or is terminated): the area is reset, and its chunks stay with
//! the TCB, which goes back to the pools (or straight to the next new thread) and gives
//! the next thread on it an area that is already warm. A thread absorbed by another runs
//! on its demander's TCB and allocates from the same area; what it allocated is released
//! when its thunk returns.
//!
//! Data that outlives the thread goes to a *shared area* ([`SharedArea`]): one per group
//! ([`Group::area`](crate::Group::area)) or made explicitly, reference counted, with a
//! lock of its own (not the program's heap lock), freed as a whole when the area and the
//! last value in it are dropped. [`Private::share`] moves a private value there.
//!
//! # Why handles and not a default allocator
//!
//! A [`Private<T>`] is a `Box`-like handle that is neither `Send` nor `Sync`: it cannot be
//! a thread's value, cross a port, or be reached by another thread, so it cannot outlive
//! the thread whose area holds it (a thread's value and a port's messages must be `Send`).
//! That is what makes the wholesale reset sound without a garbage collector. A global
//! allocator that allocated privately by default could not know which allocations escape
//! (a `Vec` pushed on a port, a thread's value), and Rust's per-collection allocators are
//! not stable; the handles keep the program's ordinary heap (`Box`, `Vec`) for everything
//! else.
//!
//! # Invariants
//!
//! - A [`Bump`]'s chunks are a singly linked list from `first`; `cur` is on it; every
//!   chunk after `cur` is free (kept for reuse); `top..end` is the free part of `cur`.
//! - A private area is touched only by the thread running on its TCB (the handles are
//!   neither `Send` nor `Sync`).

use alloc::alloc::{alloc as heap_alloc, dealloc};
use alloc::sync::Arc;
use core::alloc::Layout;
use core::fmt;
use core::marker::PhantomData;
use core::mem;
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use crate::spin::SpinLock;

/// Bytes of an area's first chunk (later ones double, up to [`MAX_CHUNK`]).
pub const FIRST_CHUNK: usize = 4096;
/// The largest chunk made for small allocations (a larger allocation gets a chunk of its
/// own size).
const MAX_CHUNK: usize = 64 * 1024;
/// Bytes of chunks a private area keeps across a reset (the rest go back to the heap).
pub const KEEP: usize = 16 * 1024;

/// The header at the start of every chunk.
#[repr(C)]
struct Chunk {
    /// The next chunk of the area.
    next: *mut Chunk,
    /// Bytes of the chunk, header included.
    size: usize,
}

/// Where a chunk's usable bytes start.
const HEADER: usize = mem::size_of::<Chunk>();

/// A chunk's layout.
fn chunk_layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size, 16).ok()
}

/// What a reset gave back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reclaimed {
    /// Bytes the area had handed out (alignment padding included).
    pub bytes: usize,
    /// Chunks returned to the program's heap (beyond [`KEEP`]).
    pub chunks_freed: usize,
    /// Chunks taken from the program's heap since the reset before.
    pub chunks_made: u64,
}

/// A bump allocator over a list of chunks: an area's storage.
pub(crate) struct Bump {
    /// The first chunk (null until the first allocation).
    first: *mut Chunk,
    /// The chunk allocations come from.
    cur: *mut Chunk,
    /// The next free byte of `cur`.
    top: usize,
    /// The end of `cur`.
    end: usize,
    /// Chunks taken from the program's heap since the last reset (of an area in use).
    pub(crate) chunks_made: u64,
}

// SAFETY: a `Bump` owns its chunks (nothing else points into their list), so moving it to
// another thread moves them with it; a shared area keeps its `Bump` behind a lock.
unsafe impl Send for Bump {}

/// A position in a [`Bump`], to release back to.
#[derive(Clone, Copy)]
pub(crate) struct Mark {
    cur: *mut Chunk,
    top: usize,
}

impl Mark {
    /// The position of an area with nothing allocated.
    pub(crate) const EMPTY: Mark = Mark {
        cur: ptr::null_mut(),
        top: 0,
    };
}

impl Bump {
    /// An empty area (no chunk yet).
    pub(crate) const fn new() -> Bump {
        Bump {
            first: ptr::null_mut(),
            cur: ptr::null_mut(),
            top: 0,
            end: 0,
            chunks_made: 0,
        }
    }

    /// `layout`'s bytes from the area, or `None` if the heap has no room for a new chunk.
    #[inline]
    pub(crate) fn alloc(&mut self, layout: Layout) -> Option<NonNull<u8>> {
        let start = self.top.checked_add(layout.align() - 1)? & !(layout.align() - 1);
        let new_top = start.checked_add(layout.size())?;
        if new_top <= self.end && start != 0 {
            self.top = new_top;
            // `start` is inside a live chunk, so not null.
            return NonNull::new(start as *mut u8);
        }
        self.alloc_slow(layout)
    }

    /// [`alloc`](Self::alloc) when the current chunk is full: the next free chunk that
    /// fits, or a new one.
    #[cold]
    fn alloc_slow(&mut self, layout: Layout) -> Option<NonNull<u8>> {
        // The bytes a chunk needs to hold `layout` wherever its data starts.
        let need = HEADER
            .checked_add(layout.size())?
            .checked_add(layout.align().max(16))?;
        // Look for a kept chunk after `cur` that is large enough.
        let mut prev = self.cur;
        let mut c = if self.cur.is_null() {
            self.first
        } else {
            // SAFETY: `cur` is a live chunk of this area.
            unsafe { (*self.cur).next }
        };
        while !c.is_null() {
            // SAFETY: a live chunk of this area.
            if unsafe { (*c).size } >= need {
                return self.enter(c, layout);
            }
            prev = c;
            // SAFETY: as above.
            c = unsafe { (*c).next };
        }
        // None: make one, doubling the last size, at least `need`.
        let last = if prev.is_null() {
            FIRST_CHUNK / 2
        } else {
            // SAFETY: a live chunk of this area.
            unsafe { (*prev).size }
        };
        let size = last.saturating_mul(2).min(MAX_CHUNK).max(need);
        let lay = chunk_layout(size)?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { heap_alloc(lay) }.cast::<Chunk>();
        if p.is_null() {
            return None;
        }
        // SAFETY: a fresh block of `size` bytes, aligned for a Chunk.
        unsafe {
            p.write(Chunk {
                next: ptr::null_mut(),
                size,
            })
        };
        self.chunks_made += 1;
        if prev.is_null() {
            self.first = p;
        } else {
            // SAFETY: `prev` is the last live chunk of this area.
            unsafe { (*prev).next = p };
        }
        self.enter(p, layout)
    }

    /// Makes `c` (which has room for `layout`) the current chunk and allocates from it.
    fn enter(&mut self, c: *mut Chunk, layout: Layout) -> Option<NonNull<u8>> {
        self.cur = c;
        self.top = c as usize + HEADER;
        // SAFETY: a live chunk of this area.
        self.end = c as usize + unsafe { (*c).size };
        let start = (self.top + layout.align() - 1) & !(layout.align() - 1);
        let new_top = start.checked_add(layout.size())?;
        if new_top > self.end {
            return None;
        }
        self.top = new_top;
        NonNull::new(start as *mut u8)
    }

    /// Gives back `size` bytes at `p` if they are the last allocated (a LIFO free);
    /// otherwise they wait for the reset.
    #[inline]
    pub(crate) fn free_last(&mut self, p: *mut u8, size: usize) {
        if (p as usize).wrapping_add(size) == self.top && size != 0 {
            self.top = p as usize;
        }
    }

    /// The current position.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            cur: self.cur,
            top: self.top,
        }
    }

    /// Releases everything allocated since `m` (the chunks stay, free).
    pub(crate) fn release(&mut self, m: Mark) {
        if m.cur.is_null() {
            // Nothing was allocated at the mark: no current chunk (the chunks stay, and
            // those made since are counted at the next reset).
            self.cur = ptr::null_mut();
            self.top = 0;
            self.end = 0;
            return;
        }
        self.cur = m.cur;
        self.top = m.top;
        // SAFETY: a mark's chunk is a live chunk of this area (chunks are freed only by
        // `reset` and `free_all`, after which no older mark is used).
        self.end = m.cur as usize + unsafe { (*m.cur).size };
    }

    /// Whether anything was allocated since the last reset.
    #[inline]
    pub(crate) fn in_use(&self) -> bool {
        !self.cur.is_null()
    }

    /// Bytes handed out since the last reset (padding included).
    pub(crate) fn used(&self) -> usize {
        if self.cur.is_null() {
            return 0;
        }
        let mut n = 0;
        let mut c = self.first;
        while !c.is_null() && c != self.cur {
            // SAFETY: a live chunk of this area.
            n += unsafe { (*c).size } - HEADER;
            // SAFETY: as above.
            c = unsafe { (*c).next };
        }
        n + (self.top - (self.cur as usize + HEADER))
    }

    /// Bytes of chunks the area holds.
    pub(crate) fn capacity(&self) -> usize {
        let mut n = 0;
        let mut c = self.first;
        while !c.is_null() {
            // SAFETY: a live chunk of this area.
            n += unsafe { (*c).size };
            // SAFETY: as above.
            c = unsafe { (*c).next };
        }
        n
    }

    /// Empties the area wholesale: everything allocated is gone; the first chunks, up to
    /// [`KEEP`] bytes, stay for the next user, the rest go back to the heap.
    pub(crate) fn reset(&mut self) -> Reclaimed {
        let bytes = self.used();
        let mut kept = 0usize;
        let mut chunks_freed = 0;
        let mut prev: *mut Chunk = ptr::null_mut();
        let mut c = self.first;
        while !c.is_null() {
            // SAFETY: a live chunk of this area.
            let (next, size) = unsafe { ((*c).next, (*c).size) };
            if kept + size <= KEEP {
                kept += size;
                prev = c;
            } else {
                if prev.is_null() {
                    self.first = next;
                } else {
                    // SAFETY: `prev` is a live chunk kept on the list.
                    unsafe { (*prev).next = next };
                }
                // SAFETY: made in `alloc_slow` with this layout; nothing refers to it (the
                // reset's caller promises no handle into the area is used again).
                unsafe { free_chunk(c, size) };
                chunks_freed += 1;
            }
            c = next;
        }
        self.cur = ptr::null_mut();
        self.top = 0;
        self.end = 0;
        Reclaimed {
            bytes,
            chunks_freed,
            chunks_made: mem::take(&mut self.chunks_made),
        }
    }

    /// Frees every chunk.
    pub(crate) fn free_all(&mut self) {
        let mut c = self.first;
        while !c.is_null() {
            // SAFETY: a live chunk of this area.
            let (next, size) = unsafe { ((*c).next, (*c).size) };
            // SAFETY: made in `alloc_slow` with this layout; the area is being dropped.
            unsafe { free_chunk(c, size) };
            c = next;
        }
        *self = Bump {
            chunks_made: self.chunks_made,
            ..Bump::new()
        };
    }
}

/// Frees one chunk.
///
/// # Safety
///
/// `c` was made by `alloc_slow` with `size` bytes and nothing refers to it any more.
unsafe fn free_chunk(c: *mut Chunk, size: usize) {
    if let Some(lay) = chunk_layout(size) {
        // SAFETY: the caller's promise; the same layout as at allocation.
        unsafe { dealloc(c.cast(), lay) };
    }
}

// ---------------------------------------------------------------------------------------
// Private areas

/// A value in the calling thread's private area: a `Box`-like owner that cannot leave the
/// thread (neither `Send` nor `Sync`). Dropping it runs the value's destructor; its bytes
/// come back at once if they were the last allocated, else when the thread is determined.
pub struct Private<T: ?Sized> {
    ptr: NonNull<T>,
    /// Not `Send`, not `Sync`: the area is the thread's alone.
    _thread: PhantomData<*mut T>,
}

/// The area's memory is exhausted (the program's heap had no room for a new chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AreaFull;

impl fmt::Display for AreaFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sting: no memory for an area chunk")
    }
}

/// Moves `value` into the calling thread's private area.
///
/// Panics on an exhausted heap ([`try_alloc`] returns the error) or outside a sting thread.
#[inline]
pub fn alloc<T>(value: T) -> Private<T> {
    match try_alloc(value) {
        Ok(p) => p,
        Err(_) => area_full(),
    }
}

#[cold]
fn area_full() -> ! {
    panic!("sting: no memory for an area chunk")
}

/// Moves `value` into the calling thread's private area, or gives it back if no chunk
/// could be had.
#[inline]
pub fn try_alloc<T>(value: T) -> Result<Private<T>, T> {
    let Some(p) = crate::rt::with_area(|a| a.alloc(Layout::new::<T>())) else {
        return Err(value);
    };
    let p = p.cast::<T>();
    // SAFETY: fresh bytes of the area, sized and aligned for a T.
    unsafe { p.as_ptr().write(value) };
    Ok(Private {
        ptr: p,
        _thread: PhantomData,
    })
}

/// Copies `src` into the calling thread's private area.
pub fn alloc_slice<T: Copy>(src: &[T]) -> Private<[T]> {
    let Ok(layout) = Layout::array::<T>(src.len()) else {
        area_full()
    };
    let Some(p) = crate::rt::with_area(|a| a.alloc(layout)) else {
        area_full()
    };
    let p = p.cast::<T>();
    // SAFETY: fresh bytes of the area for `src.len()` Ts; `T: Copy`, so a bitwise copy is
    // a copy; the two cannot overlap (the area is fresh).
    unsafe { ptr::copy_nonoverlapping(src.as_ptr(), p.as_ptr(), src.len()) };
    let slice = ptr::slice_from_raw_parts_mut(p.as_ptr(), src.len());
    Private {
        // SAFETY: made from a non-null pointer.
        ptr: unsafe { NonNull::new_unchecked(slice) },
        _thread: PhantomData,
    }
}

/// Bytes allocated in the calling thread's private area since the thread started
/// (alignment padding included; bytes given back by a LIFO drop are not counted).
pub fn used() -> usize {
    crate::rt::with_area(|a| a.used())
}

/// Bytes of chunks the calling thread's private area holds (kept with its TCB).
pub fn capacity() -> usize {
    crate::rt::with_area(|a| a.capacity())
}

impl<T> Private<T> {
    /// Moves the value out (its bytes come back if they were the last allocated).
    pub fn into_inner(self) -> T {
        let p = self.ptr;
        mem::forget(self);
        // SAFETY: the handle owned a live T, which it no longer drops.
        let v = unsafe { p.as_ptr().read() };
        crate::rt::with_area(|a| a.free_last(p.as_ptr().cast(), mem::size_of::<T>()));
        v
    }

    /// Moves the value to `area`, where it may outlive this thread and be sent to others.
    pub fn share(self, area: &SharedArea) -> Shared<T>
    where
        T: Send,
    {
        area.alloc(self.into_inner())
    }
}

impl<T: ?Sized> Deref for Private<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the handle owns a live value in its thread's area, which lives until
        // the thread is determined; the handle cannot outlive the thread (not `Send`).
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for Private<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; the handle is the value's only owner.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: ?Sized> Drop for Private<T> {
    fn drop(&mut self) {
        // SAFETY: the handle owns a live value, dropped once, here.
        let size = unsafe { mem::size_of_val(self.ptr.as_ref()) };
        // SAFETY: as above.
        unsafe { ptr::drop_in_place(self.ptr.as_ptr()) };
        crate::rt::with_area(|a| a.free_last(self.ptr.as_ptr().cast(), size));
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Private<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

// ---------------------------------------------------------------------------------------
// Shared areas

/// A shared area's storage.
struct SharedInner {
    bump: SpinLock<Bump>,
}

impl Drop for SharedInner {
    fn drop(&mut self) {
        self.bump.lock().free_all();
    }
}

/// A heap shared by threads, for data that outlives the thread that made it: a handle to
/// a reference-counted area (clone it to share). Its values ([`Shared`]) keep it alive; its
/// chunks go back to the program's heap, all at once, when the last handle and value are
/// dropped. Allocation takes the area's own lock, not the program's heap lock (but for a
/// new chunk).
#[derive(Clone)]
pub struct SharedArea {
    inner: Arc<SharedInner>,
}

impl Default for SharedArea {
    fn default() -> SharedArea {
        SharedArea::new()
    }
}

impl SharedArea {
    /// A new, empty area.
    pub fn new() -> SharedArea {
        SharedArea {
            inner: Arc::new(SharedInner {
                bump: SpinLock::new(Bump::new()),
            }),
        }
    }

    /// Moves `value` into the area. Panics on an exhausted heap. `T: Send`: nothing
    /// private to a thread (a [`Private`]) can be stored in a shared area.
    pub fn alloc<T: Send>(&self, value: T) -> Shared<T> {
        let Some(p) = self.inner.bump.lock_disarmed().alloc(Layout::new::<T>()) else {
            area_full()
        };
        let p = p.cast::<T>();
        // SAFETY: fresh bytes of the area, sized and aligned for a T.
        unsafe { p.as_ptr().write(value) };
        Shared {
            area: self.inner.clone(),
            ptr: p,
        }
    }

    /// Bytes handed out so far (values dropped out of order are not given back).
    pub fn used(&self) -> usize {
        self.inner.bump.lock_disarmed().used()
    }

    /// Whether `other` is a handle to the same area.
    pub fn same(&self, other: &SharedArea) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// A value in a [`SharedArea`]: owns it as a `Box` does, and keeps the area alive.
pub struct Shared<T> {
    area: Arc<SharedInner>,
    ptr: NonNull<T>,
}

// SAFETY: a `Shared<T>` owns its T as a `Box<T>` does (one owner, reached only through the
// handle), and the area it keeps alive is behind a lock: it may move to another thread
// whenever a `Box<T>` may.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: shared references to the handle give only `&T`, as a `Box<T>`'s do.
unsafe impl<T: Sync> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The area the value lives in.
    pub fn area(&self) -> SharedArea {
        SharedArea {
            inner: self.area.clone(),
        }
    }

    /// Moves the value out.
    pub fn into_inner(self) -> T {
        let p = self.ptr;
        let area = self.area.clone();
        mem::forget(self);
        // SAFETY: the handle owned a live T, which it no longer drops.
        let v = unsafe { p.as_ptr().read() };
        area.bump
            .lock_disarmed()
            .free_last(p.as_ptr().cast(), mem::size_of::<T>());
        // The handle's reference to the area: `forget` kept it, so release it here.
        // SAFETY: `mem::forget(self)` leaked exactly one strong count, which this gives
        // back.
        unsafe { Arc::decrement_strong_count(Arc::as_ptr(&area)) };
        v
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the handle owns a live value in an area it keeps alive.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; the handle is the value's only owner.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // SAFETY: the handle owns a live value, dropped once, here.
        unsafe { ptr::drop_in_place(self.ptr.as_ptr()) };
        self.area
            .bump
            .lock_disarmed()
            .free_last(self.ptr.as_ptr().cast(), mem::size_of::<T>());
    }
}

impl<T: fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bump_allocates_aligned_and_lifo_frees() {
        let mut b = Bump::new();
        assert!(!b.in_use());
        let a = b.alloc(Layout::new::<u8>()).unwrap();
        let c = b.alloc(Layout::new::<u64>()).unwrap();
        assert_eq!(c.as_ptr() as usize % 8, 0);
        assert!(c.as_ptr() as usize > a.as_ptr() as usize);
        assert_eq!(b.chunks_made, 1);
        let used = b.used();
        assert_eq!(used, (c.as_ptr() as usize + 8) - (a.as_ptr() as usize));
        b.free_last(c.as_ptr(), 8);
        assert_eq!(b.used(), used - 8);
        // Not the last: stays until the reset.
        b.free_last(a.as_ptr(), 1);
        assert_eq!(b.used(), used - 8);
        b.free_all();
    }

    #[test]
    fn bump_grows_and_reset_keeps_the_first_chunks() {
        let mut b = Bump::new();
        for _ in 0..10_000 {
            b.alloc(Layout::new::<[u64; 4]>()).unwrap();
        }
        assert!(b.used() >= 10_000 * 32);
        assert!(b.chunks_made >= 4);
        let cap = b.capacity();
        let r = b.reset();
        assert!(r.chunks_made >= 4);
        assert_eq!(b.chunks_made, 0);
        assert!(r.bytes >= 10_000 * 32);
        assert!(r.chunks_freed > 0);
        assert!(b.capacity() <= KEEP);
        assert!(b.capacity() < cap);
        assert_eq!(b.used(), 0);
        assert!(!b.in_use());
        // The kept chunks serve the next user without new ones.
        for _ in 0..100 {
            b.alloc(Layout::new::<[u64; 4]>()).unwrap();
        }
        assert_eq!(b.chunks_made, 0);
        b.free_all();
        assert_eq!(b.capacity(), 0);
    }

    #[test]
    fn bump_big_allocation_gets_its_own_chunk_and_marks_release() {
        let mut b = Bump::new();
        b.alloc(Layout::new::<u32>()).unwrap();
        let m = b.mark();
        let used = b.used();
        let big = b
            .alloc(Layout::from_size_align(200_000, 64).unwrap())
            .unwrap();
        assert_eq!(big.as_ptr() as usize % 64, 0);
        assert!(b.capacity() >= 200_000);
        b.release(m);
        assert_eq!(b.used(), used);
        // The next small allocation comes from the first chunk again.
        b.alloc(Layout::new::<u32>()).unwrap();
        assert_eq!(b.used(), used + 4);
        b.free_all();
    }

    #[test]
    fn bump_refuses_absurd_sizes() {
        let mut b = Bump::new();
        let lay = Layout::from_size_align(isize::MAX as usize - 64, 16).unwrap();
        assert!(b.alloc(lay).is_none());
        b.free_all();
    }
}
