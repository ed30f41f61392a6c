//! Thread groups (the paper's section 5.2): a handle on a related set of threads, to list
//! them and to suspend, resume or terminate them all at once.
//!
//! A thread created by [`Group::fork`] is in that group, and every thread a member creates
//! (with [`crate::fork`] or [`crate::delay`]) joins its creator's group. A thread leaves
//! its group when it is determined. Threads created outside any group are in none (the
//! root group is not tracked, so that creating a thread costs no list insertion).
//!
//! # Invariants
//!
//! - `members` holds the group's threads that have been scheduled and are not yet
//!   determined (a delayed thread joins when it is scheduled; one that is absorbed
//!   without being scheduled never appears in the list).

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::area::SharedArea;
use crate::rt::{self, Core, ThreadRef};
use crate::spin::SpinLock;
use crate::thread::{AnyThread, Thread};

/// The shared part of a group.
pub(crate) struct GroupInner {
    /// Its live members.
    members: SpinLock<Vec<ThreadRef>>,
    /// The group's shared area, made at its first use.
    area: SpinLock<Option<SharedArea>>,
}

impl GroupInner {
    /// Adds a member (once).
    pub(crate) fn add(&self, t: &ThreadRef) {
        let mut m = self.members.lock_disarmed();
        if !m.iter().any(|x| x.same(t.core())) {
            m.push(t.clone());
        }
    }

    /// Removes a member.
    pub(crate) fn remove(&self, t: &Core) {
        let removed = {
            let mut m = self.members.lock_disarmed();
            m.iter().position(|x| x.same(t)).map(|i| m.swap_remove(i))
        };
        // Dropped outside the lock: it may be the last reference.
        drop(removed);
    }

    /// A snapshot of the members.
    fn snapshot(&self) -> Vec<ThreadRef> {
        self.members.lock_disarmed().clone()
    }
}

/// A thread group.
#[derive(Clone)]
pub struct Group {
    /// Shared by the handles and the members.
    inner: Arc<GroupInner>,
}

impl Default for Group {
    fn default() -> Group {
        Group::new()
    }
}

impl Group {
    /// A new, empty group.
    pub fn new() -> Group {
        Group {
            inner: Arc::new(GroupInner {
                members: SpinLock::new(Vec::new()),
                area: SpinLock::new(None),
            }),
        }
    }

    /// The group's shared area (`crate::area`): a heap its members share for data that
    /// outlives the thread that made it. Made at the first call; lives while any handle to
    /// the group or any value in it does.
    pub fn area(&self) -> SharedArea {
        self.inner
            .area
            .lock_disarmed()
            .get_or_insert_with(SharedArea::new)
            .clone()
    }

    /// Creates a thread in this group, scheduled on the calling thread's virtual processor.
    pub fn fork<T, F>(&self, f: F) -> Thread<T>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        Thread::wrap(rt::create(
            f,
            Some(rt::current_vp()),
            Some(self.inner.clone()),
        ))
    }

    /// Creates a thread in this group, scheduled on virtual processor `vp`.
    pub fn fork_on<T, F>(&self, vp: usize, f: F) -> Thread<T>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        Thread::wrap(rt::create(f, Some(vp), Some(self.inner.clone())))
    }

    /// The group's live threads.
    pub fn list(&self) -> Vec<AnyThread> {
        self.inner.snapshot().into_iter().map(AnyThread).collect()
    }

    /// How many live threads the group has.
    pub fn len(&self) -> usize {
        self.inner.members.lock_disarmed().len()
    }

    /// Whether the group has no live thread.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Suspends every member (the calling thread last, if it is one).
    pub fn suspend_all(&self) {
        self.each(rt::suspend);
    }

    /// Resumes every member.
    pub fn resume_all(&self) {
        self.each(rt::resume);
    }

    /// Terminates every member (the calling thread last, if it is one).
    pub fn terminate_all(&self) {
        self.each(rt::terminate);
    }

    /// Applies `op` to every member, the calling thread last.
    fn each(&self, op: fn(&ThreadRef)) {
        let me = rt::current_ref();
        let mut self_member = false;
        for t in self.inner.snapshot() {
            if t.same(me.core()) {
                self_member = true;
            } else {
                op(&t);
            }
        }
        if self_member {
            op(&me);
        }
    }
}
