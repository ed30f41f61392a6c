//! Thread policy managers: what a virtual processor runs next, and which of its threads it
//! lets other virtual processors take.
//!
//! Each virtual processor is closed over one [`Policy`] object (the paper's thread policy
//! manager, a first-class value rather than code in the thread controller), chosen per
//! virtual processor when the runtime starts. The thread controller calls it and nothing
//! else does; the policies know nothing of threads beyond the items they queue, so they
//! are generic and tested on the host with plain integers.
//!
//! Migration is under the policy's control in both directions: a virtual processor that
//! has nothing to run asks the others only if its own policy [`steals`](Policy::steals),
//! and a victim hands over only what its policy [`give`](Policy::give)s.
//!
//! | policy | `next` | `give` (to a thief) | `steals` when idle |
//! |---|---|---|---|
//! | [`Fifo`] | oldest | nothing | no |
//! | [`Lifo`] | newest | nothing | no |
//! | [`WorkStealing`] | newest (the owner works depth-first) | oldest (the biggest piece of a divide-and-conquer tree) | yes |
//!
//! # Invariants
//!
//! - Every item enqueued is returned exactly once, by `next` or by `give`, unless the
//!   policy is dropped.
//! - `len` is the number of items enqueued and not yet returned.

use alloc::collections::VecDeque;

/// A thread policy manager over items of type `T` (the runtime's thread references).
pub trait Policy<T>: Send {
    /// A short name for reports (`fifo`, `lifo`, `steal`).
    fn name(&self) -> &'static str;
    /// Puts a runnable item on the queue (a new thread, or one that became ready again).
    fn enqueue(&mut self, item: T);
    /// The item to run next, if any.
    fn next(&mut self) -> Option<T>;
    /// An item another (idle) virtual processor may take, or `None` to keep them all.
    fn give(&mut self) -> Option<T>;
    /// Whether this virtual processor asks the others for work when it has none.
    fn steals(&self) -> bool;
    /// Items on the queue.
    fn len(&self) -> usize;
    /// Whether the queue is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// First in, first out: threads run in the order they became runnable. Keeps its threads.
pub struct Fifo<T> {
    /// Oldest at the front.
    queue: VecDeque<T>,
}

impl<T> Fifo<T> {
    /// An empty queue.
    pub const fn new() -> Fifo<T> {
        Fifo {
            queue: VecDeque::new(),
        }
    }
}

impl<T> Default for Fifo<T> {
    fn default() -> Fifo<T> {
        Fifo::new()
    }
}

impl<T: Send> Policy<T> for Fifo<T> {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn enqueue(&mut self, item: T) {
        self.queue.push_back(item);
    }
    fn next(&mut self) -> Option<T> {
        self.queue.pop_front()
    }
    fn give(&mut self) -> Option<T> {
        None
    }
    fn steals(&self) -> bool {
        false
    }
    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// Last in, first out: the newest runnable thread runs first. Keeps its threads.
pub struct Lifo<T> {
    /// Newest at the back.
    stack: VecDeque<T>,
}

impl<T> Lifo<T> {
    /// An empty stack.
    pub const fn new() -> Lifo<T> {
        Lifo {
            stack: VecDeque::new(),
        }
    }
}

impl<T> Default for Lifo<T> {
    fn default() -> Lifo<T> {
        Lifo::new()
    }
}

impl<T: Send> Policy<T> for Lifo<T> {
    fn name(&self) -> &'static str {
        "lifo"
    }
    fn enqueue(&mut self, item: T) {
        self.stack.push_back(item);
    }
    fn next(&mut self) -> Option<T> {
        self.stack.pop_back()
    }
    fn give(&mut self) -> Option<T> {
        None
    }
    fn steals(&self) -> bool {
        false
    }
    fn len(&self) -> usize {
        self.stack.len()
    }
}

/// Work stealing: the owner runs its newest thread (depth first, as a sequential program
/// would), an idle virtual processor takes the owner's oldest, and this virtual processor
/// steals in turn when it runs dry.
pub struct WorkStealing<T> {
    /// Newest at the back (the owner's end), oldest at the front (the thieves' end).
    deque: VecDeque<T>,
}

impl<T> WorkStealing<T> {
    /// An empty deque.
    pub const fn new() -> WorkStealing<T> {
        WorkStealing {
            deque: VecDeque::new(),
        }
    }
}

impl<T> Default for WorkStealing<T> {
    fn default() -> WorkStealing<T> {
        WorkStealing::new()
    }
}

impl<T: Send> Policy<T> for WorkStealing<T> {
    fn name(&self) -> &'static str {
        "steal"
    }
    fn enqueue(&mut self, item: T) {
        self.deque.push_back(item);
    }
    fn next(&mut self) -> Option<T> {
        self.deque.pop_back()
    }
    fn give(&mut self) -> Option<T> {
        self.deque.pop_front()
    }
    fn steals(&self) -> bool {
        true
    }
    fn len(&self) -> usize {
        self.deque.len()
    }
}

/// The built-in policies, to choose one per virtual processor by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// [`Fifo`].
    Fifo,
    /// [`Lifo`].
    Lifo,
    /// [`WorkStealing`].
    WorkStealing,
}

impl Kind {
    /// A new, empty policy of this kind.
    pub fn make<T: Send + 'static>(self) -> alloc::boxed::Box<dyn Policy<T>> {
        match self {
            Kind::Fifo => alloc::boxed::Box::new(Fifo::new()),
            Kind::Lifo => alloc::boxed::Box::new(Lifo::new()),
            Kind::WorkStealing => alloc::boxed::Box::new(WorkStealing::new()),
        }
    }
}

/// A virtual processor's policy manager as the runtime holds it: one of the built-in
/// policies, held by value so that its operations are direct (inlined) calls, or the
/// caller's own behind the [`Policy`] trait. Every variant behaves as the policy it holds.
pub enum Queue<T> {
    /// [`Fifo`].
    Fifo(Fifo<T>),
    /// [`Lifo`].
    Lifo(Lifo<T>),
    /// [`WorkStealing`].
    WorkStealing(WorkStealing<T>),
    /// A policy of the caller's own.
    Custom(alloc::boxed::Box<dyn Policy<T>>),
}

impl<T: Send + 'static> Queue<T> {
    /// A new, empty built-in policy of `kind`.
    pub const fn of(kind: Kind) -> Queue<T> {
        match kind {
            Kind::Fifo => Queue::Fifo(Fifo::new()),
            Kind::Lifo => Queue::Lifo(Lifo::new()),
            Kind::WorkStealing => Queue::WorkStealing(WorkStealing::new()),
        }
    }

    /// Whether this policy keeps its threads from thieves whatever it holds (a built-in
    /// FIFO or LIFO policy): its owner may then keep them where only it looks.
    pub fn keeps(&self) -> bool {
        matches!(self, Queue::Fifo(_) | Queue::Lifo(_))
    }

    /// An empty queue of the same built-in policy (FIFO for a policy of the caller's own).
    pub fn empty_like(&self) -> Queue<T> {
        match self {
            Queue::Lifo(_) => Queue::of(Kind::Lifo),
            Queue::WorkStealing(_) => Queue::of(Kind::WorkStealing),
            Queue::Fifo(_) | Queue::Custom(_) => Queue::of(Kind::Fifo),
        }
    }

    /// Takes the oldest item enqueued (a built-in policy's), or the one `next` gives (the
    /// caller's own): what moving items to another queue in their order of queueing takes.
    pub fn take_oldest(&mut self) -> Option<T> {
        match self {
            Queue::Fifo(p) => p.queue.pop_front(),
            Queue::Lifo(p) => p.stack.pop_front(),
            Queue::WorkStealing(p) => p.deque.pop_front(),
            Queue::Custom(p) => p.next(),
        }
    }

    /// Moves every item to `to`, enqueued there in the order they were enqueued here (a
    /// built-in policy's), or in the order `next` gives them (the caller's own).
    pub fn transfer_to(&mut self, to: &mut Queue<T>) {
        let from = match self {
            Queue::Fifo(p) => &mut p.queue,
            Queue::Lifo(p) => &mut p.stack,
            Queue::WorkStealing(p) => &mut p.deque,
            Queue::Custom(p) => {
                while let Some(x) = p.next() {
                    to.enqueue(x);
                }
                return;
            }
        };
        while let Some(x) = from.pop_front() {
            to.enqueue(x);
        }
    }
}

impl<T: Send> Policy<T> for Queue<T> {
    #[inline]
    fn name(&self) -> &'static str {
        match self {
            Queue::Fifo(p) => p.name(),
            Queue::Lifo(p) => p.name(),
            Queue::WorkStealing(p) => p.name(),
            Queue::Custom(p) => p.name(),
        }
    }
    #[inline]
    fn enqueue(&mut self, item: T) {
        match self {
            Queue::Fifo(p) => p.enqueue(item),
            Queue::Lifo(p) => p.enqueue(item),
            Queue::WorkStealing(p) => p.enqueue(item),
            Queue::Custom(p) => p.enqueue(item),
        }
    }
    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            Queue::Fifo(p) => p.next(),
            Queue::Lifo(p) => p.next(),
            Queue::WorkStealing(p) => p.next(),
            Queue::Custom(p) => p.next(),
        }
    }
    #[inline]
    fn give(&mut self) -> Option<T> {
        match self {
            Queue::Fifo(p) => p.give(),
            Queue::Lifo(p) => p.give(),
            Queue::WorkStealing(p) => p.give(),
            Queue::Custom(p) => p.give(),
        }
    }
    #[inline]
    fn steals(&self) -> bool {
        match self {
            Queue::Fifo(p) => p.steals(),
            Queue::Lifo(p) => p.steals(),
            Queue::WorkStealing(p) => p.steals(),
            Queue::Custom(p) => p.steals(),
        }
    }
    #[inline]
    fn len(&self) -> usize {
        match self {
            Queue::Fifo(p) => p.len(),
            Queue::Lifo(p) => p.len(),
            Queue::WorkStealing(p) => p.len(),
            Queue::Custom(p) => p.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn drain(p: &mut dyn Policy<u32>) -> Vec<u32> {
        core::iter::from_fn(|| p.next()).collect()
    }

    #[test]
    fn fifo_runs_in_order_and_keeps_its_threads() {
        let mut p = Fifo::new();
        for i in 0..5 {
            p.enqueue(i);
        }
        assert_eq!(p.give(), None);
        assert!(!p.steals());
        assert_eq!(p.len(), 5);
        assert_eq!(drain(&mut p), [0, 1, 2, 3, 4]);
        assert!(p.is_empty());
    }

    #[test]
    fn lifo_runs_newest_first() {
        let mut p = Lifo::new();
        for i in 0..5 {
            p.enqueue(i);
        }
        assert_eq!(p.give(), None);
        assert_eq!(drain(&mut p), [4, 3, 2, 1, 0]);
    }

    #[test]
    fn work_stealing_owner_newest_thief_oldest() {
        let mut p = WorkStealing::new();
        for i in 0..5 {
            p.enqueue(i);
        }
        assert!(p.steals());
        assert_eq!(p.give(), Some(0));
        assert_eq!(p.next(), Some(4));
        assert_eq!(p.give(), Some(1));
        assert_eq!(drain(&mut p), [3, 2]);
        assert_eq!(p.give(), None);
    }

    #[test]
    fn queues_behave_as_the_policies_they_hold() {
        for kind in [Kind::Fifo, Kind::Lifo, Kind::WorkStealing] {
            let mut q = Queue::<u32>::of(kind);
            let mut p = kind.make::<u32>();
            assert_eq!(q.name(), p.name());
            assert_eq!(q.steals(), p.steals());
            assert_eq!(q.keeps(), kind != Kind::WorkStealing);
            for i in 0..6 {
                q.enqueue(i);
                p.enqueue(i);
            }
            assert_eq!(q.give(), p.give());
            assert_eq!(q.len(), p.len());
            assert_eq!(drain(&mut q), drain(&mut *p));
            // A transfer keeps the order of enqueueing, so the receiving queue then runs
            // them as if they had been enqueued there.
            let (mut a, mut b) = (Queue::<u32>::of(kind), Queue::<u32>::of(kind));
            b.enqueue(10);
            for i in 0..4 {
                a.enqueue(i);
            }
            a.transfer_to(&mut b);
            assert!(a.is_empty());
            let mut want = Queue::<u32>::of(kind);
            for i in [10, 0, 1, 2, 3] {
                want.enqueue(i);
            }
            assert_eq!(drain(&mut b), drain(&mut want));
            assert_eq!(a.empty_like().name(), q.name());
        }
        let mut c = Queue::Custom(Kind::Lifo.make::<u32>());
        assert!(!c.keeps());
        c.enqueue(1);
        c.enqueue(2);
        assert_eq!(drain(&mut c), [2, 1]);
    }

    #[test]
    fn kinds_make_their_policies() {
        assert_eq!(Kind::Fifo.make::<u32>().name(), "fifo");
        assert_eq!(Kind::Lifo.make::<u32>().name(), "lifo");
        assert_eq!(Kind::WorkStealing.make::<u32>().name(), "steal");
    }
}
