//! Small synchronisation helpers on top of [`wait`] and [`wake`]: [`wait_until`], which
//! blocks until a 32-bit word satisfies a condition, and [`Counter`], a word that threads
//! bump and others wait on (a latch, when waited on for a target).
//!
//! The pattern they follow is the race-free one: load the word, test it, and if it is not
//! yet what we want, `wait` with the value just loaded. A writer stores the new value
//! first and then calls `wake`; if the store lands between our load and our `wait`, the
//! kernel sees a value other than the expected one and `wait` returns
//! [`Error::WouldBlock`] at once, so no wake-up is lost. Loads are `Acquire` and the
//! counter's increments `AcqRel`, so whatever a thread wrote before bumping a counter is
//! visible to the thread that saw the bump.

use core::sync::atomic::{AtomicU32, Ordering};

use baton_abi::{Error, FOREVER};

use crate::sys::{clock_ns, wait, wake};

/// Blocks until `done(word)` holds, re-checking after every wake-up, and returns the value
/// that satisfied it. `timeout_ns` bounds the whole wait by [`clock_ns`]
/// ([`FOREVER`] = no bound).
///
/// Errors: [`Error::TimedOut`] if the condition still does not hold after `timeout_ns`;
/// any error of [`wait`] other than [`Error::WouldBlock`] (which only means the word
/// changed, and is retried).
pub fn wait_until(
    word: &AtomicU32,
    mut done: impl FnMut(u32) -> bool,
    timeout_ns: u64,
) -> Result<u32, Error> {
    let deadline = (timeout_ns != FOREVER).then(|| clock_ns().saturating_add(timeout_ns));
    loop {
        let value = word.load(Ordering::Acquire);
        if done(value) {
            return Ok(value);
        }
        let remaining = match deadline {
            None => FOREVER,
            Some(deadline) => match deadline.checked_sub(clock_ns()) {
                Some(left) if left > 0 => left,
                _ => return Err(Error::TimedOut),
            },
        };
        match wait(word, value, remaining) {
            // Woken, the word changed, or our time is up: the loop re-checks all three.
            Ok(()) | Err(Error::WouldBlock | Error::TimedOut) => {}
            Err(e) => return Err(e),
        }
    }
}

/// A 32-bit counter that threads bump with [`increment`](Self::increment) and others
/// wait on with [`wait_for`](Self::wait_for).
///
/// Used as a latch: workers each increment `DONE` when finished, and the main thread waits
/// for `DONE` to reach the number of workers; or the main thread increments `GO` once and
/// every worker waits for it to reach 1.
pub struct Counter {
    /// The count; the word waiters block on.
    value: AtomicU32,
}

impl Counter {
    /// A counter starting at `value`.
    pub const fn new(value: u32) -> Counter {
        Counter {
            value: AtomicU32::new(value),
        }
    }

    /// The current count.
    pub fn get(&self) -> u32 {
        self.value.load(Ordering::Acquire)
    }

    /// Adds one and wakes every thread waiting on the counter; returns the new count.
    ///
    /// A failing `wake` (which a correct kernel never reports for a word we own) is
    /// ignored: the waiters then time out and report it.
    pub fn increment(&self) -> u32 {
        let new = self.value.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        let _ = wake(&self.value, u64::MAX);
        new
    }

    /// Blocks until the count is at least `target` (see [`wait_until`]); returns the count
    /// seen.
    pub fn wait_for(&self, target: u32, timeout_ns: u64) -> Result<u32, Error> {
        wait_until(&self.value, |v| v >= target, timeout_ns)
    }

    /// The underlying word, for direct [`wait`] and [`wake`] calls.
    pub fn word(&self) -> &AtomicU32 {
        &self.value
    }
}

/// A lock word that blocks in the kernel rather than spinning: three states, as in
/// Drepper's "Futexes are tricky" (unlocked, locked, locked with waiters).
///
/// A thread that finds it taken spins briefly and then sleeps in [`wait`] until the holder
/// [`unlock`](Self::unlock)s it, so a holder that was preempted (or runs at a lower priority
/// on the same CPU) gets the CPU back instead of being starved by spinners. It guards no
/// data itself; [`crate::heap`] uses it for the allocator's lock.
pub struct RawMutex {
    /// [`UNLOCKED`], [`LOCKED`] or [`CONTENDED`]: the word waiters block on.
    state: AtomicU32,
}

/// Nobody holds the lock.
const UNLOCKED: u32 = 0;
/// A thread holds the lock; nobody waits for it.
const LOCKED: u32 = 1;
/// A thread holds the lock, and others may be waiting in the kernel.
const CONTENDED: u32 = 2;
/// How many times [`RawMutex::lock`] re-reads a taken lock before sleeping.
const SPINS: u32 = 100;

impl RawMutex {
    /// An unlocked lock.
    pub const fn new() -> RawMutex {
        RawMutex {
            state: AtomicU32::new(UNLOCKED),
        }
    }

    /// Takes the lock if it is free; returns whether it did.
    pub fn try_lock(&self) -> bool {
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes the lock, blocking until it is free.
    pub fn lock(&self) {
        if self.try_lock() {
            return;
        }
        for _ in 0..SPINS {
            core::hint::spin_loop();
            if self.state.load(Ordering::Relaxed) == UNLOCKED && self.try_lock() {
                return;
            }
        }
        // Mark the lock contended; whoever unlocks it then wakes a waiter. If it was free,
        // we now hold it (contended: one spurious wake-up at most, never a lost one).
        while self.state.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            // Returns when woken, when the word is no longer `CONTENDED` (`WouldBlock`), or
            // on any other error: each case re-tries the swap, so none is lost.
            let _ = wait(&self.state, CONTENDED, FOREVER);
        }
    }

    /// Releases the lock and wakes one waiter, if any may be waiting.
    ///
    /// Only the thread that holds the lock may call this (which is why the `lock_api`
    /// trait's `unlock` is `unsafe`); an unlock by another thread breaks mutual exclusion,
    /// though not memory safety of the lock word itself.
    pub fn unlock(&self) {
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            // A failing `wake` (which a correct kernel never reports for a word we own)
            // leaves a waiter asleep; nothing better can be done here.
            let _ = wake(&self.state, 1);
        }
    }
}

impl Default for RawMutex {
    fn default() -> RawMutex {
        RawMutex::new()
    }
}
