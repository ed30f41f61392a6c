//! A family's own state: one value, made on first use, reached only under the big kernel
//! lock.
//!
//! Each object family that keeps state beside `Kernel` (virtual memory, out-of-line
//! regions, pagers, the default pager, page replacement, memory-object records, the
//! extensions) holds it in a `static` [`Locked`] and reaches it through a small accessor of
//! its own, which says what the value is made of. The cell itself only gives the
//! reference: it is the lock, held by every caller, that makes that sound.
//!
//! # Invariant
//! A `Locked` is read or written only by a CPU holding the big kernel lock
//! (`crate::kernel::lock`), and a reference it gave is not used after the holder calls
//! anything that may take the same cell again (each family takes it once per entry point
//! and passes it down).

use baton_abi::Error;
use core::cell::UnsafeCell;

/// A lazily made value under the big kernel lock (see the module's invariant).
pub struct Locked<T>(UnsafeCell<Option<T>>);

// SAFETY: by the module's invariant the value is only touched by the CPU holding the big
// kernel lock, so no two CPUs reach it at once; it never leaves the cell by reference past
// the lock's holder.
unsafe impl<T> Sync for Locked<T> {}

// A shared cell handing out the unique reference is the point: the big kernel lock, which
// every caller holds (each accessor is `unsafe` for that), makes it unique.
#[allow(clippy::mut_from_ref)]
impl<T> Locked<T> {
    /// An empty cell (the value is made at its first use).
    pub const fn new() -> Locked<T> {
        Locked(UnsafeCell::new(None))
    }

    /// The value, made by `make` if this is its first use.
    ///
    /// # Safety
    /// The caller holds the big kernel lock and keeps no other reference from this cell
    /// alive while it uses this one.
    pub unsafe fn get_or_make(&'static self, make: impl FnOnce() -> T) -> &'static mut T {
        // SAFETY: the caller holds the lock and no other reference to the cell is live;
        // the cell is `'static`, so it outlives the reference.
        let slot = unsafe { &mut *self.0.get() };
        slot.get_or_insert_with(make)
    }

    /// The value, made by `make` if this is its first use; `make`'s error if it fails
    /// (nothing is kept then, and a later call tries again).
    ///
    /// # Safety
    /// As [`Locked::get_or_make`].
    pub unsafe fn get_or_try_make(
        &'static self,
        make: impl FnOnce() -> Result<T, Error>,
    ) -> Result<&'static mut T, Error> {
        // SAFETY: as in `get_or_make`.
        let slot = unsafe { &mut *self.0.get() };
        if slot.is_none() {
            *slot = Some(make()?);
        }
        slot.as_mut().ok_or(Error::NoMemory)
    }

    /// The value if it was made (nothing is made).
    ///
    /// # Safety
    /// As [`Locked::get_or_make`].
    pub unsafe fn get(&'static self) -> Option<&'static mut T> {
        // SAFETY: as in `get_or_make`.
        unsafe { (*self.0.get()).as_mut() }
    }
}
