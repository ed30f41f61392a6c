//! `sting`: Baton's user-level concurrency runtime, after Jagannathan and Philbin's Sting
//! ("High-Level Abstractions for Efficient Concurrent Systems", 1994), sections 2 to 7.
//!
//! - First-class threads from closures ([`fork`], [`fork_on`], [`delay`], [`Thread`]) with
//!   the paper's states (delayed, scheduled, evaluating, absorbed, determined: [`Paper`]),
//!   [`Thread::value`] (touch), [`Thread::wait`], [`Thread::terminate`],
//!   [`Thread::suspend`]/[`Thread::resume`], [`yield_now`], [`migrate`], [`checkpoint`].
//!   Touching a thread that has not started runs it on the toucher's stack, with no
//!   context switch (absorption).
//! - Virtual processors, each closed over its own thread policy manager ([`policy`]:
//!   FIFO, LIFO, work stealing, or the caller's own [`Policy`]), chosen per virtual
//!   processor in the [`Config`] given to [`run`]; migration between virtual processors
//!   under the policies' control (stealing) or the thread's ([`migrate`]).
//! - Thread control blocks with their stacks, given to a thread only when it starts,
//!   recycled LIFO per virtual processor with a global overflow pool ([`pool`]) and handed
//!   directly from a finished thread to the next new one; [`stats`] counts it all.
//! - Synchronisation that parks user-level threads, not virtual processors ([`sync`]:
//!   [`Mutex`], [`Condvar`], [`Barrier`]), thread groups ([`Group`]) and first-class ports
//!   with shallow and deep copy ([`Port`]).
//! - Areas ([`area`]): a private heap per thread, no lock, reclaimed wholesale when the
//!   thread is determined; shared areas (per group or explicit) for what outlives it.
//! - Exceptions as continuations and signals ([`exception`]): a thread's faults (CPU
//!   faults with [`Config::exceptions`], or [`raise`]) run its own handler in its context
//!   ([`with_handler`], [`catch`]), which resumes, unwinds or ends it; signals push a
//!   handler onto another thread ([`Thread::signal`]) with the paper's three priorities.
//!
//! `docs/sting.md` describes the design, its use, its measured costs and what the kernel's
//! virtual-processor upcalls will change.
//!
//! A program:
//!
//! ```ignore
//! let (sum, stats) = sting::run(sting::Config::new(2, sting::Kind::WorkStealing), || {
//!     let kids: Vec<_> = (0..10u64).map(|i| sting::fork(move || i * i)).collect();
//!     kids.iter().map(|k| *k.value().unwrap()).sum::<u64>()
//! });
//! ```
//!
//! # Rules
//!
//! - Every function here except [`run`] must be called from a sting thread (code running
//!   under `run`); elsewhere it panics (or faults).
//! - A thread's stack is [`STACK_SIZE`] bytes less its TCB, with no guard page: deep
//!   recursion overflows into the TCB, which the runtime notices (and panics) at the next
//!   operation that looks at it.
//! - Each virtual processor is one kernel thread today: a user-level thread that blocks in
//!   the kernel (a system call that waits) blocks its virtual processor with it. The
//!   kernel's virtual-processor upcalls are what will change that (see `docs/sting.md`).
//!
//! # Layout
//!
//! The machine-independent parts ([`state`], [`policy`], [`pool`]) are plain data
//! structures tested on the host; [`rt`] is the thread controller and the virtual
//! processors (also run by the host's tests, on `std` threads); `arch` is the context
//! switch; `platform` is what the runtime asks of the system below it.
#![no_std]

extern crate alloc;
#[cfg(not(baton))]
extern crate std;

mod arch;
pub mod area;
pub mod deque;
pub mod exception;
pub mod group;
mod platform;
pub mod policy;
pub mod pool;
pub mod port;
pub mod rt;
pub mod selftest;
mod spin;
pub mod state;
pub mod sync;
pub mod thread;
mod upcall;
pub mod word;

#[cfg(test)]
mod loom_deque;
#[cfg(test)]
mod loom_tickets;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use exception::{catch, raise, with_handler, Action, Fault, Priority};
pub use group::Group;
pub use policy::{Kind, Policy};
pub use pool::Thresholds;
pub use port::{DeepCopy, Port};
pub use rt::{
    checkpoint, current_vp, migrate, park, preemptible, probe_enqueue_dequeue,
    probe_enqueue_dequeue_scheduled, run, stats, vp_count, vp_policy, vp_stats, yield_now, Config,
    Runnable, Stats, STACK_SIZE,
};
pub use state::{End, Paper, State};
pub use sync::{Barrier, Condvar, Mutex, MutexGuard};
pub use thread::{current, delay, fork, fork_on, AnyThread, Terminated, Thread};
