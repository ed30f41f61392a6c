//! `builtin.cthreads`: SPIN's "integrated" C-Threads (Bershad et al., section 5.2, Table
//! 3): a thread package built into the kernel as an extension, which exports its
//! interface to user space as system calls it adds on `Trap.SystemCall`, and which is
//! integrated with the kernel's scheduling (its threads are the kernel's threads, and a
//! thread that waits in it blocks in the kernel with a continuation, as every blocking
//! call does).
//!
//! The package's procedures (each a `Trap.SystemCall` handler, installed by the task on a
//! number of the extensions' range it chooses, `docs/extensions.md`):
//!
//! | symbol | call | what |
//! |---|---|---|
//! | `fork` | `(entry, stack_top, arg) -> handle` | a new thread of the task at `entry` with `rsp = stack_top`, `rdi = arg`, at the caller's priority (`cthread_fork`) |
//! | `join` | `(handle) -> value` | waits until that thread has ended; its `exit` value (0 when it ended otherwise); the handle is then free (`cthread_join`) |
//! | `exit` | `(value)` | ends the calling thread, which `fork` made; its joiner gets `value` (`cthread_exit`) |
//! | `signal` | `(c)` | condition `c` (0..16) of the task: wakes its oldest waiter, or, with none, is remembered for the next `wait` (a count) |
//! | `wait` | `(c)` | takes a remembered signal of `c`, or waits for one |
//! | `handoff` | `(s, w)` | `signal(s)` and `wait(w)` in one call: SPIN's ping-pong, "the first thread signals the second and blocks" |
//!
//! A condition remembers its signals (it counts them, as a semaphore): with the kernel's
//! one lock there is no mutex to hold across the test and the wait, so a signal that came
//! before its `wait` must not be lost.
//!
//! The code of the package ([`ext`], which forbids `unsafe`) sees [`Threads`], the
//! kernel's thread interface for built-in extensions: make a thread in the installer's
//! task, the calling thread, end it, wait on one of the package's keys and wake a waiter
//! with a value. A blocking procedure does not return: its thread blocks with a
//! continuation (its kernel stack, the dispatcher's frames with it, is discarded), and the
//! value its waker gives becomes the call's `rax`.
//!
//! # Resources
//! A task's package state ([`Pkg`]: [`THREADS_MAX`] thread slots, [`CONDITIONS`]
//! conditions) is made at its first call, charged to the task's kernel-heap account, and
//! goes when the task ends. Threads are charged as any thread. A thread that `fork` made
//! and that ends without `exit` (`thread_exit`, killed) is noticed by the core's
//! `thread_leaving` hook ([`thread_leaving`]), so its joiner is not left waiting.
//!
//! # State and locking
//! [`STATE`], reached only under the big kernel lock; [`FORKED`] counts live threads the
//! package made, so that a thread's end costs one load when there are none.

use crate::arch::trap::TrapFrame;
use crate::kernel::{Kernel, TaskId};
use crate::thread::{self, Blocked, ThreadId};
use alloc::vec::Vec;
use baton_abi::layout::{USER_END, USER_MIN};
use baton_abi::Error;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};
use kern::continuation::{Continuation, Resume};
use kern::spin::domain::{Domains, NameServer};
use kern::spin::event::{Binding, HandlerFn};

use super::{Call, SYSCALL_SIG};

/// Thread slots of one task's package: threads forked and not yet joined.
pub const THREADS_MAX: usize = 32;
/// Conditions of one task's package.
pub const CONDITIONS: usize = 16;

/// Wait keys of the package (the second word of `Kernel::waits`' key, the task the
/// first): in the kernel's half of the address space, which no user `wait` can name.
const KEY_JOIN: u64 = 0xffff_ff00_0000_0000;
const KEY_COND: u64 = 0xffff_ff00_0001_0000;

/// A thread `fork` made.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// The kernel thread while it runs.
    thread: Option<ThreadId>,
    /// Its value, once it ended.
    done: Option<u64>,
    /// Whether the slot is taken (forked and not joined).
    used: bool,
    /// Bumped at every reuse, so a stale handle is `NotFound`.
    generation: u32,
}

/// One task's package state.
pub struct Pkg {
    task: TaskId,
    slots: [Slot; THREADS_MAX],
    /// Signals remembered per condition.
    counts: [u32; CONDITIONS],
    _charge: kern::quota::Charge,
}

/// Kernel heap a task's package state is charged.
const PKG_BYTES: usize = core::mem::size_of::<Pkg>();

struct Global(UnsafeCell<Vec<Pkg>>);
// SAFETY: reached only through `pkgs`, whose callers hold the big kernel lock.
unsafe impl Sync for Global {}

static STATE: Global = Global(UnsafeCell::new(Vec::new()));

/// Threads forked and not yet ended, in every task.
static FORKED: AtomicUsize = AtomicUsize::new(0);

/// Every task's package state.
///
/// # Safety
/// The caller holds the big kernel lock and keeps no other reference from an earlier call
/// alive while it uses this one.
unsafe fn pkgs() -> &'static mut Vec<Pkg> {
    // SAFETY: under the lock, by the caller's contract, the only reference.
    unsafe { &mut *STATE.0.get() }
}

/// What the package may use of the kernel: its thread interface, for the installer's
/// task and the calling thread.
pub struct Threads<'a> {
    k: &'a mut Kernel,
    task: TaskId,
}

impl Threads<'_> {
    /// The calling thread.
    pub fn current(&self) -> ThreadId {
        self.k.current_thread()
    }

    /// A ready thread of the task at `entry` with `rsp = stack_top` and `rdi = arg`, at
    /// the caller's priority (`BadAddress` outside user memory; `NoMemory` past the
    /// task's account).
    pub fn make(&mut self, entry: u64, stack_top: u64, arg: u64) -> Result<ThreadId, Error> {
        if !(USER_MIN..USER_END).contains(&entry) || !(USER_MIN..=USER_END).contains(&stack_top) {
            return Err(Error::BadAddress);
        }
        let prio = self
            .k
            .threads
            .get(self.k.current_thread())
            .map_or(baton_abi::PRIORITY_DEFAULT as u8, |t| t.priority);
        self.k
            .create_thread(self.task, TrapFrame::new_user(entry, stack_top, arg), prio)
    }

    /// Wakes the oldest thread waiting on the package's key `key`, its call answering
    /// `value`; whether there was one.
    pub fn wake(&mut self, key: u64, value: u64) -> bool {
        wake(self.k, self.task, key, value)
    }

    /// Whether a thread waits on `key`.
    pub fn waited_on(&self, key: u64) -> bool {
        self.k.waits.waiters((self.task, key)) != 0
    }

    /// The calling thread waits on the package's key `key` until [`Threads::wake`] gives
    /// its call a value (or it is interrupted: `Interrupted`). Does not return, unless the
    /// wait cannot be queued (`NoMemory`) or the thread is alerted already.
    pub fn block(&mut self, key: u64) -> Error {
        let cur = self.k.current_thread();
        if crate::control::alerted(self.k, cur) {
            return Error::Interrupted;
        }
        let key = (self.task, key);
        if self.k.waits.try_enqueue(key, cur).is_err() {
            return Error::NoMemory;
        }
        thread::block_until(self.k, Blocked::Wait { key }, None);
        self.k.stats.blocks_wait += 1;
        thread::thread_block_with(self.k, Continuation::new(Resume::Wait))
    }

    /// Ends the calling thread.
    pub fn end(&mut self) -> ! {
        thread::thread_terminate_current(self.k)
    }
}

/// Wakes the oldest waiter on `(task, key)`, its call answering `value`.
fn wake(k: &mut Kernel, task: TaskId, key: u64, value: u64) -> bool {
    let Some(t) = k.waits.wake_one((task, key)) else {
        return false;
    };
    if let Some(th) = k.threads.get_mut(t) {
        th.ctx.frame.rax = value;
        if th.cont.is_some_and(|c| c.finishes_syscall()) {
            th.cont = Some(Continuation::new(Resume::UserReturn));
        }
    }
    k.unblock(t);
    true
}

/// The package's own code: C-Threads over [`Threads`] and its per-task state.
mod ext {
    #![forbid(unsafe_code)]
    use super::{Pkg, Threads, CONDITIONS, FORKED, KEY_COND, KEY_JOIN};
    use baton_abi::Error;
    use core::sync::atomic::Ordering;

    /// A slot's handle: its index and generation, never 0.
    fn handle(i: usize, generation: u32) -> u64 {
        (u64::from(generation) << 8 | i as u64) + 1
    }

    fn slot_of(p: &Pkg, h: u64) -> Option<usize> {
        let h = h.checked_sub(1)?;
        let i = (h & 0xff) as usize;
        let s = p.slots.get(i)?;
        (s.used && u64::from(s.generation) == h >> 8).then_some(i)
    }

    pub fn fork(io: &mut Threads<'_>, p: &mut Pkg, a: &[u64; 6]) -> Result<u64, Error> {
        let i = p.slots.iter().position(|s| !s.used).ok_or(Error::NoSpace)?;
        let t = io.make(a[0], a[1], a[2])?;
        let s = p.slots.get_mut(i).ok_or(Error::NoSpace)?;
        s.generation = s.generation.wrapping_add(1) & 0x00ff_ffff;
        s.used = true;
        s.thread = Some(t);
        s.done = None;
        FORKED.fetch_add(1, Ordering::Relaxed);
        Ok(handle(i, s.generation))
    }

    /// The value, or the error, of `join(h)`; blocks when the thread still runs.
    pub fn join(io: &mut Threads<'_>, p: &mut Pkg, h: u64) -> Result<u64, Error> {
        let i = slot_of(p, h).ok_or(Error::NotFound)?;
        let s = p.slots.get_mut(i).ok_or(Error::NotFound)?;
        if let Some(v) = s.done {
            s.used = false;
            return Ok(v);
        }
        if s.thread == Some(io.current()) {
            return Err(Error::InvalidArgument);
        }
        let key = KEY_JOIN + i as u64;
        if io.waited_on(key) {
            return Err(Error::Busy);
        }
        Err(io.block(key))
    }

    /// The calling thread, one `fork` made, ends with `value`. Returns only on an error.
    pub fn exit(io: &mut Threads<'_>, p: &mut Pkg, value: u64) -> Error {
        let me = io.current();
        let Some(i) = p.slots.iter().position(|s| s.used && s.thread == Some(me)) else {
            return Error::NotFound;
        };
        ended(io, p, i, value);
        io.end()
    }

    /// Slot `i`'s thread has ended with `value`: its joiner, if one waits, gets it and the
    /// slot is free; otherwise the value waits for `join`.
    pub fn ended(io: &mut Threads<'_>, p: &mut Pkg, i: usize, value: u64) {
        let Some(s) = p.slots.get_mut(i) else {
            return;
        };
        s.thread = None;
        FORKED.fetch_sub(1, Ordering::Relaxed);
        if io.wake(KEY_JOIN + i as u64, value) {
            s.used = false;
        } else {
            s.done = Some(value);
        }
    }

    pub fn signal(io: &mut Threads<'_>, p: &mut Pkg, c: u64) -> Result<u64, Error> {
        let c = usize::try_from(c)
            .ok()
            .filter(|c| *c < CONDITIONS)
            .ok_or(Error::InvalidArgument)?;
        if !io.wake(KEY_COND + c as u64, 0) {
            let n = p.counts.get_mut(c).ok_or(Error::InvalidArgument)?;
            *n = n.saturating_add(1);
        }
        Ok(0)
    }

    pub fn wait(io: &mut Threads<'_>, p: &mut Pkg, c: u64) -> Result<u64, Error> {
        let c = usize::try_from(c)
            .ok()
            .filter(|c| *c < CONDITIONS)
            .ok_or(Error::InvalidArgument)?;
        let n = p.counts.get_mut(c).ok_or(Error::InvalidArgument)?;
        if *n > 0 {
            *n -= 1;
            return Ok(0);
        }
        Err(io.block(KEY_COND + c as u64))
    }

    pub fn handoff(io: &mut Threads<'_>, p: &mut Pkg, s: u64, w: u64) -> Result<u64, Error> {
        if s >= CONDITIONS as u64 || w >= CONDITIONS as u64 {
            return Err(Error::InvalidArgument);
        }
        signal(io, p, s)?;
        wait(io, p, w)
    }
}

/// The calling task's package state, made (and charged) at its first call.
fn pkg_of(k: &mut Kernel, task: TaskId) -> Result<&'static mut Pkg, Error> {
    // SAFETY: the lock is held (a system call); the only reference.
    let all = unsafe { pkgs() };
    if let Some(i) = all.iter().position(|p| p.task == task) {
        return all.get_mut(i).ok_or(Error::NotFound);
    }
    let t = k.tasks.get(&task).ok_or(Error::NotFound)?;
    let charge = crate::quota::heap(&t.account, PKG_BYTES)?;
    all.try_reserve(1).map_err(|_| Error::NoMemory)?;
    all.push(Pkg {
        task,
        slots: [Slot::default(); THREADS_MAX],
        counts: [0; CONDITIONS],
        _charge: charge,
    });
    all.last_mut().ok_or(Error::NoMemory)
}

/// Runs procedure `f` of the package for call `c`: its result as the call's `rax`.
#[inline(always)]
fn run(
    k: &mut Kernel,
    c: &Call,
    f: impl FnOnce(&mut Threads<'_>, &mut Pkg) -> Result<u64, Error>,
) -> Option<Option<u64>> {
    let r = match pkg_of(k, c.task) {
        Ok(p) => f(&mut Threads { k, task: c.task }, p),
        Err(e) => Err(e),
    };
    Some(Some(r.unwrap_or_else(Error::to_raw)))
}

fn h_fork(k: &mut Kernel, _b: Binding, c: &Call) -> Option<Option<u64>> {
    run(k, c, |io, p| ext::fork(io, p, &c.args))
}
fn h_join(k: &mut Kernel, _b: Binding, c: &Call) -> Option<Option<u64>> {
    run(k, c, |io, p| ext::join(io, p, c.args[0]))
}
fn h_exit(k: &mut Kernel, _b: Binding, c: &Call) -> Option<Option<u64>> {
    run(k, c, |io, p| Err(ext::exit(io, p, c.args[0])))
}
fn h_signal(k: &mut Kernel, _b: Binding, c: &Call) -> Option<Option<u64>> {
    run(k, c, |io, p| ext::signal(io, p, c.args[0]))
}
fn h_wait(k: &mut Kernel, _b: Binding, c: &Call) -> Option<Option<u64>> {
    run(k, c, |io, p| ext::wait(io, p, c.args[0]))
}
fn h_handoff(k: &mut Kernel, _b: Binding, c: &Call) -> Option<Option<u64>> {
    run(k, c, |io, p| ext::handoff(io, p, c.args[0], c.args[1]))
}

const T_FORK: u64 = 0x500;
const T_JOIN: u64 = 0x501;
const T_EXIT: u64 = 0x502;
const T_SIGNAL: u64 = 0x503;
const T_WAIT: u64 = 0x504;
const T_HANDOFF: u64 = 0x505;

/// The `Trap.SystemCall` handler for built-in target `t`, if it is the package's.
pub fn syscall_handler(t: u64) -> Option<HandlerFn<Kernel, Call, Option<u64>>> {
    Some(match t {
        T_FORK => h_fork,
        T_JOIN => h_join,
        T_EXIT => h_exit,
        T_SIGNAL => h_signal,
        T_WAIT => h_wait,
        T_HANDOFF => h_handoff,
        _ => return None,
    })
}

/// The core's `thread_leaving` hook: a thread the package made ended without `exit` (its
/// joiner gets 0). One load while the package has no live thread.
pub fn thread_leaving(k: &mut Kernel, t: ThreadId) {
    if FORKED.load(Ordering::Relaxed) == 0 {
        return;
    }
    // SAFETY: the lock is held (the hook runs under it); the only reference, and `ended`
    // does not reach the state.
    let all = unsafe { pkgs() };
    for p in all.iter_mut() {
        if let Some(i) = p.slots.iter().position(|s| s.used && s.thread == Some(t)) {
            let task = p.task;
            ext::ended(&mut Threads { k, task }, p, i, 0);
            return;
        }
    }
}

/// Task `id` has ended: its package state goes (its threads have ended before).
pub fn task_released(id: TaskId) {
    // SAFETY: the lock is held (the hook runs under it); the only reference.
    let all = unsafe { pkgs() };
    if let Some(i) = all.iter().position(|p| p.task == id) {
        let p = all.swap_remove(i);
        let live = p.slots.iter().filter(|s| s.thread.is_some()).count();
        FORKED.fetch_sub(live, Ordering::Relaxed);
    }
}

/// Makes the `builtin.cthreads` domain and exports it to the name server for any task.
pub fn register(domains: &mut Domains, names: &mut NameServer) -> Result<(), Error> {
    super::export_kernel_interface(
        domains,
        names,
        "builtin.cthreads",
        &[
            ("fork", SYSCALL_SIG, T_FORK),
            ("join", SYSCALL_SIG, T_JOIN),
            ("exit", SYSCALL_SIG, T_EXIT),
            ("signal", SYSCALL_SIG, T_SIGNAL),
            ("wait", SYSCALL_SIG, T_WAIT),
            ("handoff", SYSCALL_SIG, T_HANDOFF),
        ],
        |_, _| true,
    )
    .map(|_| ())
}
