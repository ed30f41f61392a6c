//! The program's heap: a global allocator, so that programs can use `alloc` (`Vec`,
//! `String`, `Box`, `BTreeMap`, `format!`, ...).
//!
//! Built with the cargo feature `heap` (on by default). A program opts in simply by
//! naming the crate:
//!
//! ```ignore
//! extern crate alloc;
//! use alloc::{string::String, vec::Vec};
//! ```
//!
//! # Where the memory comes from
//!
//! The allocator is `talc` (the kernel's own general allocator) over a range of the
//! address space reserved for it, [`USER_HEAP_BASE`] and up to [`USER_HEAP_MAX`] bytes
//! (`baton_abi::layout`). Nothing is mapped at start: when `talc` runs out of room, the
//! heap maps more zero-filled pages at its top with `mem_map` (at least [`GROW_MIN`],
//! a quarter of what it already has for a growing heap, or what the request needs), so a
//! program that never allocates never maps a heap page. When the free space at the top of
//! the heap exceeds [`RELEASE_ABOVE`], the heap gives those pages back with `mem_unmap`,
//! keeping [`KEEP`] bytes mapped above the last block in use, so that repeated rounds of
//! allocating and freeing neither grow the heap nor map and unmap at every turn.
//! [`mapped_bytes`] says how much is mapped now.
//!
//! # When memory runs out
//!
//! An allocation that the heap cannot satisfy (the kernel refuses the pages with
//! `NoMemory`, the task is at its frame limit, or the range is exhausted) returns null.
//! Fallible APIs such as `Vec::try_reserve` or `Box::try_new` then return an error; the
//! others call `handle_alloc_error`, which panics: the program's panic handler prints the
//! message and the task exits with [`PANIC_EXIT_CODE`](crate::PANIC_EXIT_CODE). A failed
//! growth leaves nothing mapped behind it.
//!
//! # Threads
//!
//! One lock, [`RawMutex`](crate::sync::RawMutex), guards the heap: a thread that finds it
//! taken spins briefly and then blocks in the kernel until it is free, so allocating from
//! several threads is safe and a preempted holder is not starved by spinners. The lock is
//! held across the `mem_map`/`mem_unmap` calls that grow and shrink the heap; those do not
//! allocate.
//!
//! # Rules for programs
//!
//! - Do not map or unmap anything in `USER_HEAP_BASE .. USER_HEAP_BASE + USER_HEAP_MAX`
//!   yourself: a page mapped there makes the heap's growth fail (allocations return null),
//!   and unmapping heap pages pulls memory from under live blocks.
//! - A program that wants its own `#[global_allocator]` builds `baton-rt` with
//!   `default-features = false` (no `heap` feature).

use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use baton_abi::layout::{USER_HEAP_BASE, USER_HEAP_MAX};
use baton_abi::MEM_MAP_MAX;
use talc::base::binning::Binning;
use talc::base::Talc;
use talc::source::Source;
use talc::sync::TalcLock;
use talc::DefaultBinning;

use crate::sync::RawMutex;
use crate::sys::{mem_map, mem_unmap};

/// The page size `mem_map` works in.
const PAGE: u64 = 4096;
/// The least the heap grows by at a time (so small allocations do not each make a call).
pub const GROW_MIN: u64 = 64 * 1024;
/// Free space at the top of the heap above which pages are given back to the kernel.
pub const RELEASE_ABOVE: u64 = 1024 * 1024;
/// What stays mapped above the last block in use when pages are given back.
pub const KEEP: u64 = 256 * 1024;

/// Bytes of the heap's range mapped now (mirrors [`Pages::end`], for [`mapped_bytes`]).
static MAPPED: AtomicU64 = AtomicU64::new(0);

/// The heap. `talc` allocates; [`Pages`] gives it memory.
#[global_allocator]
static HEAP: TalcLock<RawMutex, Pages, DefaultBinning> = TalcLock::new(Pages {
    end: USER_HEAP_BASE,
});

/// The addresses `[lo, hi)` of the heap's own record, which holds its lock: a `wait` on a
/// word in it is a wait for the heap lock. A runtime that gets told of its threads'
/// blocking calls (Sting's Block upcalls) treats such a wait as its own, not as one of the
/// program's: the lock's holder may be code that only that processor runs.
pub fn lock_range() -> (u64, u64) {
    let lo = &raw const HEAP as u64;
    (lo, lo + core::mem::size_of_val(&HEAP) as u64)
}

/// Whether the heap lock is free at this moment (taken and given back at once when it
/// is). A runtime that preempts its own threads (Sting's Checkpoint upcall) does not
/// switch away from a thread that may hold it.
pub fn lock_is_free() -> bool {
    HEAP.try_lock().is_some()
}

/// Runs `f` with the heap lock held (tests that make other threads wait for it); `f` must
/// not allocate or free, or it waits for itself.
pub fn with_lock<T>(f: impl FnOnce() -> T) -> T {
    let _held = HEAP.lock();
    f()
}

/// Bytes of the heap's range mapped now: what the heap holds from the kernel, in use or
/// not. 0 until the first allocation.
pub fn mapped_bytes() -> u64 {
    MAPPED.load(Ordering::Relaxed)
}

// SAFETY: `RawMutex::lock` returns only to the one thread that changed the word from
// unlocked to locked or contended (an atomic swap or compare-exchange with `Acquire`), and
// `unlock` makes it unlocked again with `Release`, so at most one thread holds the lock at
// a time and everything its holder did happens before the next holder's section. The
// guard may move between threads (`GuardSend`): the lock records no owner.
unsafe impl talc::lock_api::RawMutex for RawMutex {
    #[allow(clippy::declare_interior_mutable_const)] // Each use is a fresh, unlocked lock.
    const INIT: RawMutex = RawMutex::new();
    type GuardMarker = talc::lock_api::GuardSend;

    fn lock(&self) {
        RawMutex::lock(self);
    }

    fn try_lock(&self) -> bool {
        RawMutex::try_lock(self)
    }

    unsafe fn unlock(&self) {
        RawMutex::unlock(self);
    }
}

/// `talc`'s source of memory: pages mapped at the top of the heap's range.
#[derive(Debug)]
pub struct Pages {
    /// One past the last mapped byte: the heap is `USER_HEAP_BASE .. end`, all of it
    /// mapped writable (empty while `end == USER_HEAP_BASE`).
    end: u64,
}

/// `x` rounded up to a page, or `None` on overflow.
fn page_up(x: u64) -> Option<u64> {
    Some(x.checked_add(PAGE - 1)? & !(PAGE - 1))
}

/// Maps `[from, to)` (page aligned) in steps the kernel accepts. On failure, unmaps what
/// this call mapped and returns `Err`: nothing is left behind.
fn map_range(from: u64, to: u64) -> Result<(), ()> {
    let mut at = from;
    while at < to {
        let len = (to - at).min(MEM_MAP_MAX);
        if mem_map(at, len, true).is_err() {
            if at > from {
                // SAFETY: `[from, at)` was mapped by this call just now and is above the
                // heap's end, so no block (and no reference) lies in it.
                let _ = unsafe { mem_unmap(from, at - from) };
            }
            return Err(());
        }
        at += len;
    }
    Ok(())
}

// SAFETY: `acquire` and `resize` touch only `talc` (through the reference they are given),
// their own fields and the kernel (`mem_map`, `mem_unmap`); they never allocate, so they
// never re-enter the heap or its lock.
unsafe impl Source for Pages {
    fn acquire<B: Binning>(talc: &mut Talc<Self, B>, layout: Layout) -> Result<(), ()> {
        let end = talc.source.end;
        let have = end - USER_HEAP_BASE;
        let first = have == 0;
        // The request, its alignment, `talc`'s tags around a block, and the first time its
        // own metadata. The free space already at the top merges with the new pages, so this
        // is enough; were it not, `talc` calls `acquire` again.
        let metadata = if first {
            talc::min_first_heap_size::<B>() as u64
        } else {
            0
        };
        let need = (layout.size() as u64)
            .checked_add(layout.align() as u64)
            .and_then(|n| n.checked_add(metadata + 2 * talc::base::CHUNK_UNIT as u64))
            .ok_or(())?;
        let grow = page_up(need.max(GROW_MIN).max(have / 4)).ok_or(())?;
        let limit = USER_HEAP_BASE + USER_HEAP_MAX;
        let new_end = match end.checked_add(grow) {
            Some(e) if e <= limit => e,
            // Growing by a quarter would pass the limit: take what the request needs, if that
            // fits.
            _ => match page_up(need.max(GROW_MIN)).and_then(|g| end.checked_add(g)) {
                Some(e) if e <= limit => e,
                _ => return Err(()),
            },
        };
        map_range(end, new_end)?;
        if first {
            // SAFETY: `[USER_HEAP_BASE, new_end)` was just mapped writable for the heap alone
            // (programs leave the heap's range to it); it stays mapped until `resize` gives
            // pages back above what `talc` uses. Being page aligned and at least the first
            // heap's minimum, the claim ends exactly at `new_end`.
            let claimed =
                unsafe { talc.claim(USER_HEAP_BASE as *mut u8, (new_end - end) as usize) };
            let Some(claimed) = claimed else {
                // SAFETY: `talc` did not take the pages, so nothing refers to them.
                let _ = unsafe { mem_unmap(end, new_end - end) };
                return Err(());
            };
            // Page-aligned ends are `talc`'s chunk-aligned ends: nothing is cut off.
            debug_assert_eq!(claimed.as_ptr() as u64, new_end);
        } else {
            let heap_end = NonNull::new(end as *mut u8).ok_or(())?;
            // SAFETY: `end` is the heap's current end (the claim's end, moved only by
            // `extend` here and `resize`, which both keep `self.end` equal to it), and
            // `[end, new_end)` was just mapped writable for the heap alone.
            let extended = unsafe { talc.extend(heap_end, new_end as *mut u8) };
            debug_assert_eq!(extended.as_ptr() as u64, new_end);
        }
        talc.source.end = new_end;
        MAPPED.store(new_end - USER_HEAP_BASE, Ordering::Relaxed);
        Ok(())
    }

    const TRACK_HEAP_END: bool = true;

    unsafe fn resize(&mut self, chunk_base: *mut u8, heap_end: *mut u8, _: bool) -> *mut u8 {
        let (base, end) = (chunk_base as u64, heap_end as u64);
        debug_assert_eq!(end, self.end);
        if end - base <= RELEASE_ABOVE {
            return heap_end;
        }
        // At least `KEEP` above `base`: never the heap's base, so the heap (and `talc`'s
        // metadata in its first bytes) lives on.
        let Some(new_end) = base.checked_add(KEEP).and_then(page_up) else {
            return heap_end;
        };
        if new_end >= end {
            return heap_end;
        }
        // SAFETY: `talc` holds no block in `[base, end)` (its free space at the top) and
        // stops using `[new_end, end)` when this returns `new_end`; nothing else refers to
        // the heap's free pages.
        if unsafe { mem_unmap(new_end, end - new_end) }.is_err() {
            return heap_end;
        }
        self.end = new_end;
        MAPPED.store(new_end - USER_HEAP_BASE, Ordering::Relaxed);
        new_end as *mut u8
    }
}
