//! Control of activations (seed 001 section 5): alerts, suspension, CPU state, termination
//! and the scheduling lock.
//!
//! Control is exercised on an *activation*, never on a thread as a whole: a task names its
//! activation on a thread either by the thread's id (a thread of the task: its home
//! activation, [`Target::Thread`]) or by the id of one of its own pool activations while a
//! call occupies it ([`Target::Activation`]). So a client can control its own part of a
//! thread that is deep in a server, and a server the part that runs in it, and neither can
//! touch the other's.
//!
//! - **Alerts** ask the callee to give up soon: an alert marks the target activation and
//!   every one above it; each sees it (polling with `alert_test`, or a kernel wait that
//!   returns [`Error::Interrupted`]) only once it turned alerts on.
//! - **Suspension** is an APC: the thread stops only when it would run user code in the
//!   suspended activation (`kernel::leave_to_user`, and a migrating return into it), so a
//!   client suspending itself while in a server does not stop the server.
//! - **Get/set state** act on a suspended activation and wait until its thread has
//!   stopped there (the caller re-issues the call when woken).
//! - **Termination** is immediate: a home activation terminated while its thread is in a
//!   server is marked dead, and the part above keeps running with an alert; the thread
//!   ends when it returns into it (`activation::resume_below`).
//! - **Scheduling lock**: an activation can forbid the ones above it to change the thread's
//!   priority or affinity.

use crate::arch::trap::TrapFrame;
use crate::kernel::{self, Kernel, TaskId};
use crate::thread::{self, Blocked, ThreadId, ThreadState};
use baton_abi::exception::{UserRegs, USER_REGS_WORDS};
use baton_abi::Error;
use core::sync::atomic::Ordering;
use kern::activation::ActState;
use kern::continuation::{Continuation, Resume};
use kern::slab::Key;

/// Activations suspended now, in all threads (while 0, no exit to user mode looks for
/// one): the core's counter, which this family keeps. Changed under the big kernel lock;
/// read by `kernel::leave_to_user` before it.
use crate::kernel::STOPS_PENDING as SUSPENDED;

/// `n` suspended activations are gone (resumed, or discarded with their thread).
pub fn suspended_sub(n: usize) {
    let _ = SUSPENDED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(n))
    });
}

/// How a control call names its activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The home activation of a thread of the calling task (0: the calling thread).
    Thread(u64),
    /// A pool activation of the calling task, occupied by a call.
    Activation(Key),
}

impl Target {
    /// Decodes `(kind, id)`: kind 0 a thread, 1 an activation.
    pub fn decode(kind: u64, id: u64) -> Result<Target, Error> {
        match kind {
            0 => Ok(Target::Thread(id)),
            1 => Ok(Target::Activation(Key(id))),
            _ => Err(Error::InvalidArgument),
        }
    }
}

/// Where an activation is on its thread's stack: the thread and the index (0 = home; the
/// top is `below.len()`).
#[derive(Clone, Copy, Debug)]
pub struct Place {
    /// The thread.
    pub thread: ThreadId,
    /// The activation's index on its stack.
    pub index: usize,
}

/// Resolves `target` for task `task` whose running thread is `cur`.
pub fn place(k: &Kernel, task: TaskId, cur: ThreadId, target: Target) -> Result<Place, Error> {
    match target {
        Target::Thread(0) => {
            let th = k.threads.get(cur).ok_or(Error::NotFound)?;
            // The calling thread's activation in this task: the top one.
            Ok(Place {
                thread: cur,
                index: th.below.len(),
            })
        }
        Target::Thread(id) => {
            let t = Key(id);
            match k.threads.get(t) {
                Some(th) if th.home_task() == Some(task) => Ok(Place {
                    thread: t,
                    index: 0,
                }),
                _ => Err(Error::NotFound),
            }
        }
        Target::Activation(a) => {
            let act = k.acts.get(a).ok_or(Error::NotFound)?;
            if act.task != task || !act.occupied {
                return Err(Error::NotFound);
            }
            let th = k.threads.get(act.occupant).ok_or(Error::NotFound)?;
            // Record i names the activation above it, at index i + 1.
            let i = th
                .below
                .iter()
                .position(|s| s.act == a)
                .ok_or(Error::NotFound)?;
            Ok(Place {
                thread: act.occupant,
                index: i + 1,
            })
        }
    }
}

/// The control state of the activation at `index` of thread `t`.
fn state_mut(k: &mut Kernel, t: ThreadId, index: usize) -> Option<&mut ActState> {
    let th = k.threads.get_mut(t)?;
    if index == th.below.len() {
        Some(&mut th.ctx.ctl)
    } else {
        th.below.get_mut(index).map(|s| &mut s.ctl)
    }
}

/// `act_alert(kind, id)`: alerts the activation and every one above it; a kernel wait in
/// the top one, if its alerts are on, returns [`Error::Interrupted`].
pub fn sys_alert(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    target: Target,
) -> Result<u64, Error> {
    let p = place(k, task, cur, target)?;
    alert_from(k, p.thread, p.index);
    Ok(0)
}

/// Alerts the activation at `p` and every one above it (as [`sys_alert`]).
pub fn alert_at(k: &mut Kernel, p: Place) {
    alert_from(k, p.thread, p.index);
}

/// Terminates the pool activation at `p` (index 1 or more: a call occupies it), at once
/// when it is the top of its thread: the thread unwinds out of it and its caller's
/// `ipc_msg` fails with [`Error::Aborted`] (the running thread of this CPU is left to the
/// caller, which must end its top activation with `thread::thread_terminate_current`).
/// Below the top, the activation is marked dead and the part above goes on with an alert;
/// the thread unwinds through it when it returns into it (as for a home activation,
/// [`terminate_home`]). Returns whether `p` is the current thread's top activation.
pub fn terminate_at(k: &mut Kernel, p: Place) -> bool {
    let Some(th) = k.threads.get_mut(p.thread) else {
        return false;
    };
    if p.index == 0 {
        return false;
    }
    if p.index == th.below.len() {
        if p.thread == k.current_thread() {
            return true;
        }
        // Ready, blocked or running elsewhere: `kill_thread` unwinds a migrated thread's
        // top activation (at its next kernel entry when it runs on another CPU).
        k.kill_thread(p.thread);
        return false;
    }
    // Below the top: the thread splits (seed 001), or, when the part below cannot go on by
    // itself, the activation is marked dead and the thread unwinds through it later.
    if crate::activation::split(k, p.thread, p.index) {
        alert_from(k, p.thread, 1);
        return false;
    }
    let Some(th) = k.threads.get_mut(p.thread) else {
        return false;
    };
    if let Some(rec) = th.below.get_mut(p.index) {
        rec.ctl.dead = true;
    }
    alert_from(k, p.thread, p.index + 1);
    false
}

/// Marks the activations of `t` from `index` up alerted, and interrupts a kernel wait of
/// the top one if it sees alerts.
fn alert_from(k: &mut Kernel, t: ThreadId, index: usize) {
    let Some(th) = k.threads.get_mut(t) else {
        return;
    };
    for s in th.below.iter_mut().skip(index) {
        s.ctl.alert = true;
    }
    th.ctx.ctl.alert = true;
    interrupt_wait(k, t);
}

/// Ends a kernel wait of `t` (sleep, wait, receive, waiting for a queue or an activation)
/// with [`Error::Interrupted`] if its running activation sees a pending alert.
fn interrupt_wait(k: &mut Kernel, t: ThreadId) {
    let Some(th) = k.threads.get_mut(t) else {
        return;
    };
    let why = match th.state {
        ThreadState::Blocked(
            b @ (Blocked::Sleep
            | Blocked::Wait { .. }
            | Blocked::Receive { .. }
            | Blocked::Send { .. }
            | Blocked::PageIn { .. }),
        ) => b,
        _ => return,
    };
    if !th.ctx.ctl.take_alert() {
        return;
    }
    if let Blocked::PageIn { .. } = why {
        if !waits_in_step(th.cont) {
            // No call to fail: the access is made again and reported as a pager fault.
            crate::pager::interrupt(k, t, why);
            return;
        }
        // A call's later step waiting for its buffer's page (`crate::pager::wait_in_step`):
        // the call ends `Interrupted`, as a receive or a send waiting for room would.
        crate::pager::forget_waiter(k, t, why);
    }
    let Some(th) = k.threads.get_mut(t) else {
        return;
    };
    th.ctx.frame.rax = Error::Interrupted.to_raw();
    th.cont = Some(Continuation::new(Resume::UserReturn));
    if let Blocked::Wait { key } = why {
        k.waits.remove(key, t);
    }
    crate::ipc::forget_waiter(k, t, why);
    k.unblock(t);
}

/// Whether the running activation of `t`, about to wait in the kernel, has an alert to
/// see (consumed): the wait returns [`Error::Interrupted`] instead.
pub fn alerted(k: &mut Kernel, t: ThreadId) -> bool {
    k.threads
        .get_mut(t)
        .is_some_and(|th| th.ctx.ctl.take_alert())
}

/// `alert_test()`: whether the calling activation has a pending alert it sees (consumed).
pub fn sys_alert_test(k: &mut Kernel, cur: ThreadId) -> Result<u64, Error> {
    Ok(u64::from(alerted(k, cur)))
}

/// `alert_enable(on) -> previous`: turns alerts on or off in the calling activation.
pub fn sys_alert_enable(k: &mut Kernel, cur: ThreadId, on: u64) -> Result<u64, Error> {
    let on = match on {
        0 => false,
        1 => true,
        _ => return Err(Error::InvalidArgument),
    };
    let th = k.threads.get_mut(cur).ok_or(Error::NotFound)?;
    let was = th.ctx.ctl.alerts_on;
    th.ctx.ctl.alerts_on = on;
    Ok(u64::from(was))
}

/// `act_suspend(kind, id, on)`: suspends (`on` = 1) or resumes (0) the activation. A
/// suspension takes effect when the thread would next run user code in it.
pub fn sys_suspend(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    target: Target,
    on: u64,
) -> Result<u64, Error> {
    let p = place(k, task, cur, target)?;
    suspend_at(k, p, on)
}

/// Suspends (`on` = 1) or resumes (0) the activation at `p`. The last resume wakes the
/// threads waiting for the thread's state (their calls run again and see the change).
pub fn suspend_at(k: &mut Kernel, p: Place, on: u64) -> Result<u64, Error> {
    let s = state_mut(k, p.thread, p.index).ok_or(Error::NotFound)?;
    match on {
        1 => {
            s.suspend = s.suspend.checked_add(1).ok_or(Error::TooLarge)?;
            if s.suspend == 1 {
                SUSPENDED.fetch_add(1, Ordering::Relaxed);
            }
            // A thread running this activation on another CPU stops at its next exit.
            if let Some(th) = k.threads.get(p.thread) {
                if let ThreadState::Running { cpu } = th.state {
                    kernel::poke_cpu(k, cpu, u8::MAX);
                }
            }
        }
        0 => {
            if s.suspend == 0 {
                return Err(Error::InvalidArgument);
            }
            s.suspend -= 1;
            if s.suspend == 0 {
                suspended_sub(1);
                let stopped = k.threads.get(p.thread).is_some_and(|th| {
                    th.state == ThreadState::Blocked(Blocked::Suspended)
                        && th.below.len() == p.index
                });
                if stopped {
                    k.unblock(p.thread);
                }
                // Those waiting for the thread to stop in a suspended activation re-issue
                // their calls: the thread may now never stop there, and a call on an
                // activation no longer suspended fails (`InvalidArgument`).
                release_waiters(k, p.thread);
            }
        }
        _ => return Err(Error::InvalidArgument),
    }
    Ok(0)
}

/// On the way to user mode: if the running thread's activation is suspended, the thread
/// stops here (it resumes through `kernel::leave_to_user` again when resumed).
pub fn stop_if_suspended(k: &mut Kernel) {
    let cur = k.current_thread();
    let Some(th) = k.threads.get_mut(cur) else {
        return;
    };
    if th.ctx.ctl.suspend == 0 || th.ctx.task.is_none() {
        return;
    }
    mark_stopped(k, cur);
    thread::thread_block_with(k, Continuation::new(Resume::UserReturn));
}

/// Thread `t` stops in its suspended activation: its state says so, and whoever waits for
/// its state there is woken (their calls run again and find it stopped).
fn mark_stopped(k: &mut Kernel, t: ThreadId) {
    let Some(th) = k.threads.get_mut(t) else {
        return;
    };
    th.state = ThreadState::Blocked(Blocked::Suspended);
    let waiters = core::mem::take(&mut th.state_waiters);
    for w in waiters {
        k.unblock(w);
    }
    k.stats.blocks_internal += 1;
}

/// `act_get_state(kind, id, regs)` and `act_set_state(kind, id, regs)` (`set`): the user
/// registers of a suspended activation, once its thread has stopped in it. Until then the
/// caller waits, and re-issues the call when woken.
pub fn sys_state(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    target: Target,
    regs: u64,
    set: bool,
) -> Result<u64, Error> {
    let p = state_place(k, task, cur, target)?;
    await_arrival(k, cur, &p);
    let mut bytes = [0u8; 8 * USER_REGS_WORDS];
    if set {
        k.copy_in(task, regs, &mut bytes)?;
        let mut words = [0u64; USER_REGS_WORDS];
        for (w, b) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = b.try_into().map_or(0, u64::from_le_bytes);
        }
        set_state(k, &p, &words)?;
    } else {
        for (b, w) in bytes.chunks_exact_mut(8).zip(get_state(k, &p)?) {
            b.copy_from_slice(&w.to_le_bytes());
        }
        k.copy_out(task, regs, &bytes)?;
    }
    Ok(0)
}

/// The activation `target` whose state task `task` (whose running thread is `cur`) asks
/// for: it must be suspended, and not `cur`'s own ([`Error::InvalidArgument`]).
pub fn state_place(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    target: Target,
) -> Result<Place, Error> {
    let p = place(k, task, cur, target)?;
    if p.thread == cur {
        return Err(Error::InvalidArgument);
    }
    if state_mut(k, p.thread, p.index).is_none_or(|s| s.suspend == 0) {
        return Err(Error::InvalidArgument);
    }
    Ok(p)
}

/// Whether the thread of `p` has stopped in that activation (its state can be read).
fn arrived(k: &Kernel, p: &Place) -> bool {
    k.threads.get(p.thread).is_some_and(|th| {
        th.state == ThreadState::Blocked(Blocked::Suspended) && th.below.len() == p.index
    })
}

/// Returns once the thread of `p` has stopped in that activation; until then `cur` waits,
/// and issues its system call again when woken (so this does not return then). A thread
/// blocked at that activation in a wait that may be cut short is stopped at once
/// ([`interrupt_to_stop`]).
pub fn await_arrival(k: &mut Kernel, cur: ThreadId, p: &Place) {
    if !arrived(k, p) && !interrupt_to_stop(k, p) {
        wait_for_arrival(k, cur, p.thread);
    }
}

/// Stops the thread of `p` in its suspended activation now if it is blocked there in a
/// wait that may be cut short — a receive, a send waiting for room or for an activation, a
/// `wait`, a `sleep`, a wait for another thread's state — as Mach's `thread_abort_safely`
/// brings a thread in an interruptible wait to a clean point: it leaves what it waits in,
/// its call returns [`Error::Interrupted`] when the activation is resumed (nothing of it
/// was done: a `SEND | RECEIVE` blocked here had sent already and only its receive is cut
/// short), and its registers can be read and set at once. A thread running, ready, in a
/// call deeper than that activation, waiting for an exception handler's reply or blocked
/// in the process model is left alone. Whether it stopped.
fn interrupt_to_stop(k: &mut Kernel, p: &Place) -> bool {
    let Some(th) = k.threads.get(p.thread) else {
        return false;
    };
    let ThreadState::Blocked(b) = th.state else {
        return false;
    };
    let point = th.cont.map(|c| c.point);
    let cut_short = match b {
        Blocked::Receive { .. } => point == Some(Resume::Receive),
        Blocked::Send { .. } => point == Some(Resume::SendRetry),
        Blocked::Wait { .. } => point == Some(Resume::Wait),
        Blocked::Sleep => point == Some(Resume::Sleep),
        // Its frame was rewound to issue the call again (`wait_for_arrival`).
        Blocked::StateWait { .. } => point == Some(Resume::UserReturn),
        // A fault (or a call rewound: `crate::pager::after_call`) waiting for a pager: the
        // access is made again when the thread goes on. A call's later step waiting for
        // its buffer's page (`crate::pager::wait_in_step`) is cut short as its call.
        Blocked::PageIn { .. } => point == Some(Resume::UserReturn) || waits_in_step(th.cont),
        Blocked::ProcessModel | Blocked::Suspended | Blocked::Unstarted | Blocked::VpSpare => false,
    };
    if !cut_short || th.below.len() != p.index || th.stack.is_some() {
        return false;
    }
    k.forget_blocked(p.thread, b);
    let Some(th) = k.threads.get_mut(p.thread) else {
        return false;
    };
    if let Some(timer) = th.timer.take() {
        k.timers.cancel(timer);
    }
    if let Blocked::StateWait { .. } = b {
        // Not issued again: it returns.
        th.ctx.frame.rip = th.ctx.frame.rip.wrapping_add(2);
    }
    if !matches!(b, Blocked::PageIn { .. }) || point != Some(Resume::UserReturn) {
        th.ctx.frame.rax = Error::Interrupted.to_raw();
    }
    th.cont = Some(Continuation::new(Resume::UserReturn));
    mark_stopped(k, p.thread);
    true
}

/// Whether a thread blocked `PageIn` with continuation `cont` waits for a page in a later
/// step of a call (`crate::pager::wait_in_step`) rather than in a fault.
fn waits_in_step(cont: Option<Continuation>) -> bool {
    cont.is_some_and(|c| matches!(c.point, Resume::Receive | Resume::SendRetry))
}

/// The user registers of the activation of `p` (its thread stopped there), as
/// `UserRegs::to_words`.
pub fn get_state(k: &Kernel, p: &Place) -> Result<[u64; USER_REGS_WORDS], Error> {
    if !arrived(k, p) {
        return Err(Error::InvalidArgument);
    }
    let th = k.threads.get(p.thread).ok_or(Error::NotFound)?;
    Ok(th.ctx.frame.user_regs().to_words())
}

/// Sets the user registers of the activation of `p` (its thread stopped there) to
/// `words` (`UserRegs::from_words`), checked as an exception handler's reply is.
pub fn set_state(k: &mut Kernel, p: &Place, words: &[u64; USER_REGS_WORDS]) -> Result<(), Error> {
    if !arrived(k, p) {
        return Err(Error::InvalidArgument);
    }
    crate::exception::set_regs(k, p.thread, &UserRegs::from_words(words))
}

/// Blocks `cur` until thread `target` stops in a suspended activation (or ends); `cur`
/// then re-issues its system call (its saved `rip` steps back over `syscall`; `rax` still
/// holds the call number).
fn wait_for_arrival(k: &mut Kernel, cur: ThreadId, target: ThreadId) -> ! {
    if let Some(t) = k.threads.get_mut(target) {
        // Fallibly: the list grows with the number of waiters (at most every thread).
        if t.state_waiters.try_reserve(1).is_err() {
            crate::kernel::finish_entry(k, false, Some(Error::NoMemory.to_raw()))
        }
        t.state_waiters.push(cur);
    }
    if let Some(th) = k.threads.get_mut(cur) {
        rewind(&mut th.ctx.frame);
    }
    // Through `block_until`: a virtual processor's thread gives its processor a Block
    // upcall while it waits.
    thread::block_until(k, Blocked::StateWait { target }, None);
    k.stats.blocks_internal += 1;
    thread::thread_block_with(k, Continuation::new(Resume::UserReturn))
}

/// Makes a saved `syscall` frame issue its call again.
fn rewind(f: &mut TrapFrame) {
    f.rip = f.rip.wrapping_sub(2);
}

/// `act_sched_lock()`: the calling activation forbids those above it to change the
/// thread's scheduling state.
pub fn sys_sched_lock(k: &mut Kernel, cur: ThreadId) -> Result<u64, Error> {
    let th = k.threads.get_mut(cur).ok_or(Error::NotFound)?;
    th.ctx.ctl.sched_locked = true;
    Ok(0)
}

/// Whether the running activation of `cur` may change its own thread's scheduling state
/// (no activation below it forbade it).
pub fn may_schedule_self(k: &Kernel, cur: ThreadId) -> bool {
    k.threads
        .get(cur)
        .is_none_or(|th| !th.below.iter().any(|s| s.ctl.sched_locked))
}

/// Terminates the home activation of thread `t` (its task's own request, or its task
/// ending). At home, the thread ends as any other; deep in a server, the home activation
/// is marked dead and the part above goes on with an alert, so the server is not
/// disturbed, and the thread ends when it returns home (the split of section 5).
pub fn terminate_home(k: &mut Kernel, t: ThreadId) {
    let Some(th) = k.threads.get_mut(t) else {
        return;
    };
    match th.below.first_mut() {
        None => k.kill_thread(t),
        Some(home) => {
            home.ctl.dead = true;
            alert_from(k, t, 1);
        }
    }
}

/// A thread that has ended (or is being unwound) takes its waiters for its state with it:
/// they are woken and re-issue their calls (which then fail).
pub fn release_waiters(k: &mut Kernel, t: ThreadId) {
    let waiters = k
        .threads
        .get_mut(t)
        .map(|th| core::mem::take(&mut th.state_waiters))
        .unwrap_or_default();
    for w in waiters {
        k.unblock(w);
    }
}

/// A thread waiting for `target`'s state gives up (it is being killed).
pub fn forget_state_waiter(k: &mut Kernel, w: ThreadId, target: ThreadId) {
    if let Some(t) = k.threads.get_mut(target) {
        t.state_waiters.retain(|&x| x != w);
    }
}
