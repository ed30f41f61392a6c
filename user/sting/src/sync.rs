//! Synchronisation that blocks user-level threads, not virtual processors: a thread that
//! waits parks, and its virtual processor runs another thread meanwhile.
//!
//! [`Mutex`] hands the lock directly to the oldest waiter on unlock (no barging, no
//! thundering herd); [`Condvar`] works with it; [`Barrier`] releases a fixed number of
//! threads together. Each is a small spin-locked state with an intrusive list of waiters
//! whose nodes live on the waiting threads' stacks, so waiting allocates nothing.
//!
//! # Invariants
//!
//! - A `Mutex` is locked exactly while a [`MutexGuard`] for it exists; while waiters are
//!   queued it stays locked (unlock passes it on).

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

use crate::rt::{WaitList, Waiter};
use crate::spin::SpinLock;

/// A mutual-exclusion lock for user-level threads.
pub struct Mutex<T> {
    /// Whether it is held, and who waits.
    state: SpinLock<MutexState>,
    /// The data.
    value: UnsafeCell<T>,
}

/// A [`Mutex`]'s state.
struct MutexState {
    /// Held.
    locked: bool,
    /// Threads waiting for it, oldest first.
    waiters: WaitList,
}

// SAFETY: the lock gives access to the value to one guard at a time, as std's Mutex does.
unsafe impl<T: Send> Sync for Mutex<T> {}
// SAFETY: moving the mutex moves the value.
unsafe impl<T: Send> Send for Mutex<T> {}

impl<T> Mutex<T> {
    /// An unlocked mutex around `value`.
    pub const fn new(value: T) -> Mutex<T> {
        Mutex {
            state: SpinLock::new(MutexState {
                locked: false,
                waiters: WaitList::new(),
            }),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, parking the calling thread until it is handed the lock.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let node;
        {
            let mut s = self.state.lock_disarmed();
            if !s.locked {
                s.locked = true;
                return MutexGuard { mutex: self };
            }
            node = Waiter::current();
            s.waiters.push(&node);
        }
        // `unlock` hands the lock to us before it wakes us.
        node.wait();
        MutexGuard { mutex: self }
    }

    /// Takes the lock if it is free.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let mut s = self.state.lock_disarmed();
        if s.locked {
            return None;
        }
        s.locked = true;
        Some(MutexGuard { mutex: self })
    }

    /// Releases the lock: to the oldest waiter if there is one.
    fn unlock(&self) {
        let next = {
            let mut s = self.state.lock_disarmed();
            let next = s.waiters.pop();
            if next.is_none() {
                s.locked = false;
            }
            next
        };
        if let Some(w) = next {
            w.wake();
        }
    }
}

/// Access to a [`Mutex`]'s data; unlocks when dropped.
pub struct MutexGuard<'a, T> {
    /// The mutex held.
    mutex: &'a Mutex<T>,
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock: no other reference to the value exists.
        unsafe { &*self.mutex.value.get() }
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`.
        unsafe { &mut *self.mutex.value.get() }
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.unlock();
    }
}

/// A condition variable for user-level threads, used with a [`Mutex`].
pub struct Condvar {
    /// Threads waiting for a notification.
    waiters: SpinLock<WaitList>,
}

impl Default for Condvar {
    fn default() -> Condvar {
        Condvar::new()
    }
}

impl Condvar {
    /// A condition variable with no waiters.
    pub const fn new() -> Condvar {
        Condvar {
            waiters: SpinLock::new(WaitList::new()),
        }
    }

    /// Releases `guard`'s mutex, parks until notified, and takes the mutex again. Check
    /// the condition in a loop, as with any condition variable.
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        let mutex = guard.mutex;
        let node = Waiter::current();
        // Queued before the mutex is released, so a notification sent after the waiter's
        // check of the condition cannot be missed.
        self.waiters.lock_disarmed().push(&node);
        drop(guard);
        node.wait();
        mutex.lock()
    }

    /// Wakes the oldest waiter, if any.
    pub fn notify_one(&self) {
        let w = self.waiters.lock_disarmed().pop();
        if let Some(w) = w {
            w.wake();
        }
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        let all = self.waiters.lock_disarmed().take();
        all.wake_all();
    }
}

/// A barrier for `n` user-level threads.
pub struct Barrier {
    /// How many threads each round waits for.
    n: usize,
    /// The round's state.
    state: SpinLock<BarrierState>,
}

/// A [`Barrier`]'s state.
struct BarrierState {
    /// Threads arrived in this round.
    arrived: usize,
    /// Rounds completed.
    generation: u64,
    /// Threads waiting in this round.
    waiters: WaitList,
}

impl Barrier {
    /// A barrier for `n` threads (at least 1).
    pub const fn new(n: usize) -> Barrier {
        Barrier {
            n: if n == 0 { 1 } else { n },
            state: SpinLock::new(BarrierState {
                arrived: 0,
                generation: 0,
                waiters: WaitList::new(),
            }),
        }
    }

    /// Parks until `n` threads have called `wait` in this round; returns `true` in the one
    /// thread whose arrival completed the round (the leader).
    pub fn wait(&self) -> bool {
        let node;
        {
            let mut s = self.state.lock_disarmed();
            s.arrived += 1;
            if s.arrived == self.n {
                s.arrived = 0;
                s.generation = s.generation.wrapping_add(1);
                let all = s.waiters.take();
                drop(s);
                all.wake_all();
                return true;
            }
            node = Waiter::current();
            s.waiters.push(&node);
        }
        node.wait();
        false
    }

    /// Rounds completed so far.
    pub fn generation(&self) -> u64 {
        self.state.lock_disarmed().generation
    }
}
