//! A spin lock for the runtime's short critical sections (a ready queue, a thread's state,
//! a wait list): a few dozen instructions are held at most, and nothing blocks while one is
//! held, so spinning is cheaper than a system call. After [`SPINS`] failed tries a waiter
//! gives its CPU away ([`crate::platform::relax_hard`]), so that a holder preempted by the
//! kernel on the same CPU gets to finish.
//!
//! # Invariants
//!
//! - The value is reached only through a [`Guard`], and a guard exists only while `locked`
//!   is true and was set by its creator.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, Ordering};

/// Failed tries before a waiter yields its CPU.
const SPINS: u32 = 1000;

/// A value behind a spin lock.
pub struct SpinLock<T> {
    /// Whether a guard exists.
    locked: AtomicBool,
    /// The value.
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one guard at a time (the `locked` flag,
// taken with acquire and released with release ordering), so sharing the lock between
// threads shares `T` only as a `Mutex<T>` would: sound when `T: Send`.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock around `value`.
    pub const fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, spinning until it is free.
    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
        Guard { lock: self }
    }

    /// [`lock`](Self::lock) for the runtime's objects that threads use directly (mutexes,
    /// ports): first ends the calling thread's preemptible stretch, if any
    /// (`crate::rt::preemptible`), so that no Checkpoint switches away from a holder.
    #[inline]
    pub fn lock_disarmed(&self) -> Guard<'_, T> {
        crate::rt::disarm();
        self.lock()
    }

    /// The contended case of [`lock`](Self::lock).
    #[cold]
    fn lock_slow(&self) {
        let mut tries = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                tries = tries.wrapping_add(1);
                if tries.is_multiple_of(SPINS) {
                    crate::platform::relax_hard();
                } else {
                    core::hint::spin_loop();
                }
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Access to a [`SpinLock`]'s value; unlocks when dropped.
pub struct Guard<'a, T> {
    /// The lock held.
    lock: &'a SpinLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a guard exists only while it holds the lock, so no other reference to
        // the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the
        // guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}
