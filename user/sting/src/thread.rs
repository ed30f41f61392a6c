//! First-class threads: [`fork`], [`delay`], and the [`Thread`] handle with
//! [`value`](Thread::value) (the paper's `touch`), [`wait`](Thread::wait),
//! [`terminate`](Thread::terminate), [`suspend`](Thread::suspend) and
//! [`resume`](Thread::resume).
//!
//! A thread is created from a closure and is a value: handles can be cloned, stored,
//! sent to other threads, and outlive the thread that made them. Its value, once
//! determined, is read by reference through any handle.

use core::marker::PhantomData;

use crate::rt::{self, ThreadRef};
use crate::state::{Paper, State};

pub use crate::rt::Terminated;

/// A handle on a thread whose thunk returns a `T`.
pub struct Thread<T> {
    /// The thread.
    r: ThreadRef,
    /// What its value is.
    _value: PhantomData<fn() -> T>,
}

impl<T> Clone for Thread<T> {
    fn clone(&self) -> Thread<T> {
        Thread {
            r: self.r.clone(),
            _value: PhantomData,
        }
    }
}

/// A handle on a thread of any value type (what [`current`] and group listings give).
#[derive(Clone)]
pub struct AnyThread(pub(crate) ThreadRef);

/// Creates a thread running `f`, scheduled on the calling thread's virtual processor.
/// The child joins the caller's thread group, if it has one.
pub fn fork<T, F>(f: F) -> Thread<T>
where
    T: Send + Sync + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    Thread::wrap(rt::create(f, Some(rt::current_vp()), rt::current_group()))
}

/// Creates a thread running `f`, scheduled on virtual processor `vp` (the last one if
/// `vp` is past it): initial placement.
pub fn fork_on<T, F>(vp: usize, f: F) -> Thread<T>
where
    T: Send + Sync + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    Thread::wrap(rt::create(f, Some(vp), rt::current_group()))
}

/// Creates a *delayed* thread running `f`: it runs only when its value is demanded
/// ([`Thread::value`] absorbs it) or it is [`schedule`](Thread::schedule)d.
pub fn delay<T, F>(f: F) -> Thread<T>
where
    T: Send + Sync + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    Thread::wrap(rt::create(f, None, rt::current_group()))
}

/// The calling thread.
pub fn current() -> AnyThread {
    AnyThread(rt::current_ref())
}

impl<T> Thread<T> {
    /// Wraps a runtime reference made with value type `T`.
    pub(crate) fn wrap(r: ThreadRef) -> Thread<T> {
        Thread {
            r,
            _value: PhantomData,
        }
    }

    /// The runtime's reference.
    pub(crate) fn raw(&self) -> &ThreadRef {
        &self.r
    }

    /// The thread's value (the paper's `touch`): if it is delayed or scheduled and has not
    /// started, the calling thread runs it itself, on its own stack, with no context switch
    /// (absorption); if it is evaluating, waits for it; then returns its value, or
    /// [`Terminated`].
    pub fn value(&self) -> Result<&T, Terminated> {
        if rt::demand(&self.r, true) {
            // SAFETY: the thread is determined with a value, and was made with value type
            // `T` (`wrap`'s callers); the value lives as long as the thread, which `self`
            // keeps alive.
            unsafe { rt::value_of::<T>(self.r.core()) }.ok_or(Terminated)
        } else {
            Err(Terminated)
        }
    }

    /// The paper's name for [`value`](Self::value).
    pub fn touch(&self) -> Result<&T, Terminated> {
        self.value()
    }

    /// Waits until the thread is determined, without ever running it: a delayed thread is
    /// waited for until something else demands or schedules it.
    pub fn wait(&self) {
        rt::demand(&self.r, false);
    }

    /// Moves the value out of a determined thread whose last handle this is; otherwise
    /// gives the handle back.
    pub fn into_value(self) -> Result<Option<T>, Thread<T>> {
        let (state, _, _) = rt::state_of(&self.r);
        if !state.determined() || !self.r.unique() {
            return Err(self);
        }
        // SAFETY: determined, made with value type `T`, and this is its only reference.
        Ok(unsafe { rt::take_value::<T>(self.r.core()) })
    }

    /// Puts a delayed thread on its virtual processor's ready queue (no effect otherwise).
    pub fn schedule(&self) {
        rt::schedule(&self.r);
    }

    /// This thread as an [`AnyThread`].
    pub fn any(&self) -> AnyThread {
        AnyThread(self.r.clone())
    }

    /// See [`AnyThread::terminate`].
    pub fn terminate(&self) {
        rt::terminate(&self.r);
    }

    /// See [`AnyThread::signal`].
    pub fn signal(&self, prio: crate::Priority, handler: impl FnOnce() + Send + 'static) -> bool {
        rt::signal(&self.r, prio, alloc::boxed::Box::new(handler))
    }

    /// See [`AnyThread::suspend`].
    pub fn suspend(&self) {
        rt::suspend(&self.r);
    }

    /// See [`AnyThread::resume`].
    pub fn resume(&self) {
        rt::resume(&self.r);
    }

    /// See [`AnyThread::state`].
    pub fn state(&self) -> Paper {
        rt::paper_state_of(&self.r)
    }

    /// See [`AnyThread::detail`].
    pub fn detail(&self) -> (State, bool) {
        let (s, _, suspended) = rt::state_of(&self.r);
        (s, suspended)
    }

    /// See [`AnyThread::id`].
    pub fn id(&self) -> u64 {
        rt::id_of(&self.r)
    }
}

impl AnyThread {
    /// Terminates the thread: one that has not started is determined at once, without a
    /// value; a started one ends at its next checkpoint ([`crate::yield_now`],
    /// [`crate::checkpoint`], a suspension), abandoning its frames without running their
    /// destructors (what they hold stays held), as a cancelled thread does at a
    /// cancellation point. The calling thread ends at once, unless it was absorbed (then
    /// it is determined when its thunk returns).
    pub fn terminate(&self) {
        rt::terminate(&self.0);
    }

    /// Suspends the thread: the calling thread at once; another does not run again until
    /// [`resume`](Self::resume)d (if it runs on another virtual processor now, it stops at
    /// its next checkpoint).
    pub fn suspend(&self) {
        rt::suspend(&self.0);
    }

    /// Resumes a suspended thread.
    pub fn resume(&self) {
        rt::resume(&self.0);
    }

    /// The paper's state.
    pub fn state(&self) -> Paper {
        rt::paper_state_of(&self.0)
    }

    /// The runtime's state, and whether the thread is suspended.
    pub fn detail(&self) -> (State, bool) {
        let (s, _, suspended) = rt::state_of(&self.0);
        (s, suspended)
    }

    /// The thread's number (unique in the run).
    pub fn id(&self) -> u64 {
        rt::id_of(&self.0)
    }

    /// Waits until the thread is determined (never runs it).
    pub fn wait(&self) {
        rt::demand(&self.0, false);
    }

    /// Wakes the thread if it is parked in [`crate::park`], else leaves it a wake-up that
    /// its next `park` consumes at once. Unlike the rest of the runtime's calls, this one
    /// may also come from a thread that is not a sting thread (another kernel thread of
    /// the program, such as an exception handler or a server's thread).
    pub fn unpark(&self) {
        rt::unpark(&self.0);
    }

    /// Wakes the thread and parks the calling thread (a sting thread) in one step: when
    /// the thread is parked on the caller's virtual processor, the caller switches
    /// straight to it, with no trip through the ready queue or the policy manager;
    /// otherwise it is [`unpark`](Self::unpark) followed by [`park`](crate::park).
    pub fn hand_off(&self) {
        rt::hand_off(&self.0);
    }

    /// Signals the thread (the Sting paper's Figure 2): `handler` is pushed onto it and
    /// runs in its context before it next runs its own code — at once if it is the calling
    /// thread; as the first thing it does when resumed or started if it is ready, blocked
    /// or not yet started; at its next checkpoint, or the next switch it makes, if it is
    /// running on another processor (or, with `Config::preempt`, when a Checkpoint next
    /// stops it). The caller then goes on as `prio` says (`crate::exception`). Returns false
    /// if the thread is already determined (the handler is dropped).
    pub fn signal(&self, prio: crate::Priority, handler: impl FnOnce() + Send + 'static) -> bool {
        rt::signal(&self.0, prio, alloc::boxed::Box::new(handler))
    }
}
