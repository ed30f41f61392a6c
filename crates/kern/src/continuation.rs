//! Continuations: how a blocked thread resumes, as a value the kernel can examine.
//!
//! A thread that blocks with a continuation gives up its kernel stack; when it runs again
//! the kernel calls the continuation on whatever stack it is handed. Following the
//! continuations paper, a continuation here is not an opaque closure but a [`Resume`] point,
//! so other code can *recognise* it: a thread that wakes a waiter can see that the waiter
//! only needs its system call finished, do that itself, and let the waiter return straight
//! to user mode. The paper's continuations keep their state in a small scratch area of the
//! thread; every resumption point here finds its state in the thread's saved registers
//! (the system call's arguments) and fields, so the continuation is the point alone: one
//! byte, written with one store when a thread blocks.
//!
//! # Invariants
//! - A thread has a continuation exactly when it is blocked (or ready) without a kernel
//!   stack; a thread blocked in the process model has none and keeps its stack.

/// Where a thread resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    /// Return to user mode with the thread's saved registers (`thread_exception_return`,
    /// and `thread_syscall_return` once the result is in the saved `rax`). Every new
    /// thread starts here.
    UserReturn,
    /// Finish a `wait` system call: the waker or the timeout writes the result.
    Wait,
    /// Finish a `sleep` system call.
    Sleep,
    /// A processor's idle loop.
    Idle,
    /// The receive phase of `ipc_msg`: run it again (a message arrived). A sender that
    /// finds a receiver here may instead deliver the message itself and replace the
    /// continuation with [`Resume::UserReturn`] (recognition, the RPC fast path).
    Receive,
    /// `ipc_msg` blocked on a full queue: run the whole call again (queue space freed).
    SendRetry,
    /// An exception was sent to a handler: read the reply that arrived on the thread's
    /// exception reply port and resume (or end) as it says.
    ExceptionReply,
}

/// A continuation: the resumption point and up to three words of state it keeps (the
/// paper's 28-byte scratch area).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Continuation {
    /// Where to resume.
    pub point: Resume,
}

impl Continuation {
    /// The continuation that resumes at `point`.
    pub const fn new(point: Resume) -> Continuation {
        Continuation { point }
    }

    /// Whether resuming means only returning to user mode once a result is written, so that
    /// a waker may finish the call in its own context (continuation recognition).
    pub const fn finishes_syscall(&self) -> bool {
        matches!(self.point, Resume::Wait | Resume::Sleep | Resume::Receive)
    }

    /// Whether resuming here just returns to user mode with the thread's saved registers
    /// (so a thread resuming here needs no kernel stack frame at all).
    pub const fn returns_to_user(&self) -> bool {
        matches!(
            self.point,
            Resume::UserReturn | Resume::Wait | Resume::Sleep
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognition() {
        assert!(Continuation::new(Resume::Wait).finishes_syscall());
        assert!(Continuation::new(Resume::Sleep).finishes_syscall());
        assert!(!Continuation::new(Resume::UserReturn).finishes_syscall());
        assert!(!Continuation::new(Resume::Idle).finishes_syscall());
        assert!(Continuation::new(Resume::UserReturn).returns_to_user());
        assert!(Continuation::new(Resume::Wait).returns_to_user());
        assert!(!Continuation::new(Resume::Idle).returns_to_user());
        assert!(!Continuation::new(Resume::Receive).returns_to_user());
        assert!(!Continuation::new(Resume::SendRetry).returns_to_user());
        assert!(Continuation::new(Resume::Receive).finishes_syscall());
        assert!(core::mem::size_of::<Continuation>() <= 32);
    }
}
