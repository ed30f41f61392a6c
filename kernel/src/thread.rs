//! Threads and the control-transfer operations of the continuations paper (Figure 4):
//! [`thread_block`], [`thread_continue`] (`baton_thread_continue`), [`thread_dispatch`] and
//! [`thread_select`], written once above the machine interface of `arch::context`.
//!
//! A thread blocks either **with a continuation** — it gives up its kernel stack, which
//! is handed straight to the next thread when that one also resumes by continuation (stack
//! handoff), or returned to the pool after a switch (stack discard) — or **in the process
//! model**, keeping its stack and kernel registers (`switch_context` saves them) until it is
//! switched back to.
//!
//! # Invariants
//! - All of this runs under the big kernel lock with interrupts off.
//! - `stack.is_some()` for the running thread of every CPU and for threads blocked in the
//!   process model; `cont.is_some()` for every other thread (ready or blocked).
//! - A thread is in a run queue exactly when its state is [`ThreadState::Ready`].

use crate::arch::context::{self, KernelStack, SavedContext};
use crate::arch::gdt;
use crate::arch::trap::TrapFrame;
use crate::kernel::{self, Kernel, TaskId};
use kern::continuation::{Continuation, Resume};
use kern::frame::PhysAddr;
use kern::slab::Key;
use kern::timer::TimerKey;

/// Thread identifier: a generation-checked key of the kernel's thread slab, so the id of a
/// thread that has ended never names a later one. User space sees it as a `u64`.
pub type ThreadId = Key;

/// What a blocked thread waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// `sleep` until its timer fires.
    Sleep,
    /// `wait` on a word of its task, until woken or its timer fires.
    Wait {
        /// The wait-queue key: task and user address.
        key: (TaskId, u64),
    },
    /// Blocked in the process model (keeps its kernel stack) until its timer fires.
    ProcessModel,
}

/// A thread's scheduling state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadState {
    /// Running on this CPU.
    Running {
        /// The CPU.
        cpu: usize,
    },
    /// In a run queue.
    Ready,
    /// Waiting, with what for.
    Blocked(Blocked),
    /// Ended; reclaimed as soon as it is off its CPU.
    Halted,
    /// A CPU's idle thread while not running.
    Idle,
}

/// A thread: the schedulable entity.
///
/// Threads are boxed in the kernel's slab, so a thread object never moves while it exists:
/// the per-CPU area points at the running thread's `frame` (see `gdt::set_user_frame`).
pub struct Thread {
    /// The task it runs in (`None` for a CPU's idle thread).
    pub task: Option<TaskId>,
    /// Its task's page-table root and PCID, copied from the task (they never change), so
    /// a switch needs no task lookup.
    pub space: Option<(PhysAddr, u16)>,
    /// Priority, 0 (lowest) to 63.
    pub priority: u8,
    /// Scheduling state.
    pub state: ThreadState,
    /// How it resumes, when it has no stack.
    pub cont: Option<Continuation>,
    /// Its kernel stack, while running or blocked in the process model.
    pub stack: Option<KernelStack>,
    /// Kernel registers saved by `switch_context` (process model only).
    pub saved: SavedContext,
    /// User registers while not in user mode.
    pub frame: TrapFrame,
    /// The CPU it last ran on (its run queue).
    pub cpu: usize,
    /// Pending timeout, if any.
    pub timer: Option<TimerKey>,
    /// Set when its task is ending while it runs on another CPU.
    pub kill_pending: bool,
}

impl Thread {
    /// A thread of `task` (whose address space is `root` with `pcid`) that will start in
    /// user mode with `frame`.
    pub fn new_user(
        task: TaskId,
        space: (PhysAddr, u16),
        frame: TrapFrame,
        priority: u8,
        cpu: usize,
    ) -> Thread {
        Thread {
            task: Some(task),
            space: Some(space),
            priority,
            state: ThreadState::Ready,
            cont: Some(Continuation::new(Resume::UserReturn)),
            stack: None,
            saved: SavedContext::default(),
            frame,
            cpu,
            timer: None,
            kill_pending: false,
        }
    }

    /// The idle thread of `cpu`, running on `stack` (given when the CPU starts).
    pub fn new_idle(cpu: usize, stack: Option<KernelStack>) -> Thread {
        Thread {
            task: None,
            space: None,
            priority: 0,
            state: ThreadState::Running { cpu },
            cont: None,
            stack,
            saved: SavedContext::default(),
            frame: TrapFrame::default(),
            cpu,
            timer: None,
            kill_pending: false,
        }
    }
}

/// Picks the thread to run next on `cpu`: the highest-priority ready thread, or the idle
/// thread.
pub fn thread_select(k: &mut Kernel, cpu: usize) -> ThreadId {
    match k.cpus.get_mut(cpu).and_then(|c| c.runq.pop()) {
        Some((t, _)) => t,
        None => k.cpu(cpu).idle,
    }
}

/// Makes `t` ready on its CPU's run queue (Mach's `thread_setrun`), waking that CPU if it is
/// idle elsewhere.
pub fn thread_setrun(k: &mut Kernel, t: ThreadId) {
    let Some(th) = k.threads.get_mut(t) else {
        return;
    };
    th.state = ThreadState::Ready;
    let (cpu, prio) = (th.cpu, th.priority);
    if let Some(c) = k.cpus.get_mut(cpu) {
        c.runq.push(t, prio);
    }
    kernel::poke_cpu(k, cpu, prio);
}

/// Blocks the current thread of this CPU and runs another.
///
/// With `Some(cont)` the thread blocks with a continuation: its stack is handed off or
/// discarded and the call never returns (the thread resumes later in `cont`). With `None`
/// it blocks in the process model and the call returns when it is switched back to.
///
/// The caller has already set the old thread's state (`Ready` and queued for a yield or a
/// preemption, `Blocked(..)`, `Halted`) and saved its user registers in `frame` if they are
/// needed later.
pub fn thread_block(k: &mut Kernel, cont: Option<Continuation>) {
    let cpu = gdt::this_cpu();
    let old = k.cpu(cpu).current;
    let new = thread_select(k, cpu);

    if new == old {
        // Nothing else to run: the old thread goes on.
        if let Some(th) = k.threads.get_mut(old) {
            th.state = ThreadState::Running { cpu };
        }
        if let Some(c) = cont {
            let start = k.current_stack_start(cpu);
            // SAFETY: we run on the current thread's own stack and abandon everything on it;
            // the continuation only uses the thread object.
            unsafe { continue_on_stack(k, start, old, c) };
        }
        return;
    }

    let new_has_stack = k.threads.get(new).is_some_and(|t| t.stack.is_some());
    match (cont, new_has_stack) {
        (Some(c), false) => {
            // Stack handoff: the running stack becomes the new thread's.
            let Some(stack) = k.threads.get_mut(old).and_then(|t| t.stack.take()) else {
                panic!("thread_block: running thread {old:?} has no stack");
            };
            let start = stack.start();
            if let Some(th) = k.threads.get_mut(old) {
                th.cont = Some(c);
            }
            let new_cont = k.threads.get_mut(new).and_then(|t| {
                t.stack = Some(stack);
                t.cont.take()
            });
            k.stats.stack_handoffs += 1;
            k.make_current(cpu, new);
            thread_dispatch(k, old);
            let resume = new_cont.unwrap_or(Continuation::new(Resume::UserReturn));
            // SAFETY: `start` is the base of the stack we are running on, now the new
            // thread's; nothing on it is used again.
            unsafe { continue_on_stack(k, start, new, resume) }
        }
        (cont, true) => {
            // The new thread resumes on its own stack (it blocked in the process model).
            if let Some(th) = k.threads.get_mut(old) {
                th.cont = cont;
            }
            switch_to(k, cpu, old, new, cont.is_none());
        }
        (None, false) => {
            // The old thread keeps its stack; the new one needs a stack to run its
            // continuation on.
            let Some(stack) = k.stack_alloc() else {
                panic!("out of kernel stacks");
            };
            let saved = context::stack_attach(&stack);
            if let Some(th) = k.threads.get_mut(new) {
                th.stack = Some(stack);
                th.saved = saved;
            }
            switch_to(k, cpu, old, new, true);
        }
    }
}

/// Blocks the current thread with continuation `cont` ([`thread_block`] with a
/// continuation): never returns.
pub fn thread_block_with(k: &mut Kernel, cont: Continuation) -> ! {
    thread_block(k, Some(cont));
    unreachable!("a thread that blocked with a continuation returned")
}

/// `switch_context` from `old` to `new` (which has a stack with saved registers); with
/// `keep` the old thread keeps its stack and this returns when it is resumed.
fn switch_to(k: &mut Kernel, cpu: usize, old: ThreadId, new: ThreadId, keep: bool) {
    let new_saved = match k.threads.get(new) {
        Some(t) => t.saved,
        None => panic!("switch_to: thread {new:?} vanished"),
    };
    k.stats.context_switches += 1;
    k.make_current(cpu, new);
    let prev = if keep {
        let Some(th) = k.threads.get_mut(old) else {
            panic!("switch_to: thread {old:?} vanished");
        };
        // SAFETY: `new_saved` was produced by `stack_attach` or by the `switch_context` that
        // blocked `new`, on `new`'s own stack; `th.saved` is written before the switch and
        // read only when someone switches back to `old`.
        unsafe { context::switch_context(Some(&mut th.saved), new_saved, old.0) }
    } else {
        // SAFETY: as above; the old thread blocked with a continuation, so its stack is
        // abandoned here and discarded by the new thread's `thread_dispatch`.
        unsafe { context::switch_context(None, new_saved, old.0) }
    };
    // Back on `old`'s stack, switched to by some thread `prev`.
    // SAFETY: the big kernel lock is held (it passes from thread to thread with the CPU).
    let k = unsafe { kernel::kernel() };
    thread_dispatch(k, Key(prev));
}

/// After a switch, disposes of the thread that ran before (Figure 4's `thread_dispatch`):
/// discards its stack if it blocked with a continuation, reclaims it if it ended.
pub fn thread_dispatch(k: &mut Kernel, prev: ThreadId) {
    let Some(th) = k.threads.get_mut(prev) else {
        return;
    };
    if th.cont.is_some() || th.state == ThreadState::Halted {
        if let Some(stack) = th.stack.take() {
            k.stats.stack_discards += 1;
            k.stack_free(stack);
        }
    }
    if k.threads
        .get(prev)
        .is_some_and(|t| t.state == ThreadState::Halted)
    {
        k.reap_thread(prev);
    }
}

/// First code on a freshly attached stack (`thread_continue`): dispose of the previous
/// thread, then run the current thread's continuation.
#[no_mangle]
extern "C" fn baton_thread_continue(prev: u64) -> ! {
    // SAFETY: the big kernel lock is held across the switch that brought us here.
    let k = unsafe { kernel::kernel() };
    thread_dispatch(k, Key(prev));
    let cpu = gdt::this_cpu();
    let cur = k.cpu(cpu).current;
    let cont = k
        .threads
        .get_mut(cur)
        .and_then(|t| t.cont.take())
        .unwrap_or(Continuation::new(Resume::UserReturn));
    resume(k, cur, cont)
}

/// Runs continuation `cont` of the running thread `t`, abandoning everything on its stack
/// (whose start is `start`): a continuation that returns to user mode does so at once
/// (leaving the kernel discards the stack anyway); any other is called on the reset stack
/// (`call_continuation`).
///
/// # Safety
/// We must be running on the stack whose start is `start`, and abandon it.
unsafe fn continue_on_stack(k: &mut Kernel, start: u64, t: ThreadId, cont: Continuation) -> ! {
    if cont.returns_to_user() {
        kernel::leave_to_user()
    }
    if let Some(th) = k.threads.get_mut(t) {
        th.cont = Some(cont);
    }
    // SAFETY: forwarded from the caller; `continue_entry` reads the continuation back from
    // the thread object.
    unsafe { context::call_continuation(start, continue_entry, t.0) }
}

extern "C" fn continue_entry(t: u64) -> ! {
    // SAFETY: the big kernel lock is held by this CPU.
    let k = unsafe { kernel::kernel() };
    let t = Key(t);
    let cont = k
        .threads
        .get_mut(t)
        .and_then(|th| th.cont.take())
        .unwrap_or(Continuation::new(Resume::UserReturn));
    resume(k, t, cont)
}

/// Runs continuation `cont` of the current thread `t`.
fn resume(k: &mut Kernel, t: ThreadId, cont: Continuation) -> ! {
    match cont.point {
        Resume::Idle => kernel::idle_loop(),
        // The result of a finished call is already in the saved frame.
        Resume::UserReturn | Resume::Wait | Resume::Sleep => {
            if k.threads.get(t).is_none() {
                panic!("resuming thread {t:?} that does not exist");
            }
            kernel::leave_to_user()
        }
    }
}

/// Stops the current thread for good and runs the next one.
pub fn thread_terminate_current(k: &mut Kernel) -> ! {
    let cpu = gdt::this_cpu();
    let cur = k.cpu(cpu).current;
    if let Some(th) = k.threads.get_mut(cur) {
        th.state = ThreadState::Halted;
    }
    thread_block_with(k, Continuation::new(Resume::UserReturn))
}
