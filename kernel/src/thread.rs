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
use kern::activation::ActId;
use kern::continuation::{Continuation, Resume};
use kern::frame::PhysAddr;
use kern::ipc::PortId;
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
    /// `ipc_msg` receiving on a port, until a message arrives or its timer fires.
    Receive {
        /// The port.
        port: kern::ipc::PortId,
    },
    /// `ipc_msg` sending to a full port (or waiting for an activation of its pool), until
    /// there is room or its timer fires.
    Send {
        /// The port.
        port: kern::ipc::PortId,
    },
    /// Stopped in a suspended activation, until it is resumed.
    Suspended,
    /// `act_get_state`/`act_set_state`, until the target thread stops in its suspended
    /// activation.
    StateWait {
        /// The target thread.
        target: ThreadId,
    },
    /// A page of a pager-backed memory object (`crate::pager`) is being paged in: until
    /// the pager supplies it, fails it or dies (the thread then makes its access again).
    PageIn {
        /// The object (its `kern::vm::object::ObjectId`'s key).
        object: u64,
        /// The page's offset in it.
        offset: u64,
    },
    /// The first thread of a task being made (`task_init_thread`), until the task is
    /// started (`task_start`) or ended.
    Unstarted,
    /// A spare kernel thread of a virtual processor, parked until a block of its carrier
    /// needs it (the virtual-processor family's, `crate::vproc`).
    VpSpare,
}

/// Where the reply of a migrating call goes: what the caller's `ipc_msg` used as its buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplyTo {
    /// The caller's IPC buffer page (`Context::ipc_buffer`, whose frame is known).
    #[default]
    IpcBuffer,
    /// No reply: the upcall above is a sidetrack, and on return the call is retried.
    Sidetrack,
    /// No reply: the upcall above is a pager's answer to a page fault of this activation
    /// (`crate::pager`); on return the faulting access (or the call whose copy faulted,
    /// its frame already moved back over the `syscall`) is made again as it was.
    Fault,
    /// The caller's own buffer (`MSG_BUF`): its user address and size, reached through the
    /// caller's page tables at the return.
    User {
        /// Its address.
        va: u64,
        /// Its size in bytes (at most `MSG_SIZE_MAX`).
        len: usize,
    },
}

/// The context of an activation: everything that belongs to the activation rather than to
/// the thread running in it (seed 001, section 4). A thread points at its running
/// activation's context (`Thread::ctx`); the contexts of the activations below it, each
/// with the call it made, are linked on its activation stack (`Thread::below`), and a
/// migrating call or return moves these pointers, never the contents
/// (`crate::activation`).
#[derive(Debug, Default)]
pub struct Context {
    /// User registers of the activation while not in user mode.
    pub frame: TrapFrame,
    /// The task it runs in (`None` for a CPU's idle thread).
    pub task: Option<TaskId>,
    /// Its task's key in `Kernel::tasks` (the zero key, which names nothing, for an idle
    /// thread): the fast path's one-step way to the task.
    pub task_key: Key,
    /// Its task's page-table root and PCID, copied from the task (they never change), so
    /// a switch needs no task lookup.
    pub space: Option<(PhysAddr, u16)>,
    /// Its IPC buffer: the user address and the frame behind it (checked when set,
    /// forgotten when the page is unmapped).
    pub ipc_buffer: Option<(u64, PhysAddr)>,
    /// Its exception port (a send right the kernel holds), if set.
    pub exc_port: Option<kern::ipc::PortId>,
    /// Its control state (alerts, suspension, termination).
    pub ctl: kern::activation::ActState,
    /// While it is below another on a thread's activation stack: the server activation
    /// its call occupies (the one above it).
    pub act: ActId,
    /// The port whose pool that activation came from.
    pub port: PortId,
    /// Where the reply goes (or that the upcall above is a sidetrack, retried on return).
    pub to: ReplyTo,
    /// For a page fault's call into a pager ([`ReplyTo::Fault`]) by a thread that uses
    /// floating point: its registers at the fault, put back at the return (a fault is not
    /// a call: nothing of the faulting context may change).
    pub fpu: Option<alloc::boxed::Box<crate::arch::fpu::Area>>,
    /// Whether `fpu` holds this fault's registers (the box is kept between faults).
    pub fpu_kept: bool,
    /// Whether it is a heap block of its own, freed with its [`ContextBox`], rather than a
    /// thread's own context (set only by [`ContextBox::try_new`]).
    heap: bool,
}

impl Context {
    /// The context of a new thread of `task` (its id and slab key; whose address space is
    /// `root` with `pcid`) that will start in user mode with `frame`.
    #[inline(always)]
    pub fn user(
        (task, task_key): (TaskId, Key),
        space: (PhysAddr, u16),
        frame: TrapFrame,
    ) -> Context {
        Context {
            frame,
            task: Some(task),
            task_key,
            space: Some(space),
            ..Context::default()
        }
    }
}

/// An owning pointer to a [`Context`], which moves between a thread's running context
/// (`Thread::ctx`), its activation stack (`Thread::below`) and its spare by pointer. A
/// context is either a heap block of its own (a server activation's, made at a thread's
/// first migrating call at each depth) or the one stored inside its thread's own
/// allocation (`Thread::own`, the thread's first context), so that making a thread is one
/// allocation. A thread's own context is only ever the bottom of its activation stack
/// (the running context at home, else `below[0]`); a split, which gives that bottom to a
/// new thread, moves its contents into the new thread's storage ([`Thread::adopt_bottom`]).
pub struct ContextBox {
    /// The context (whose `heap` says which kind it is: one word, so that a call and a
    /// return move single words).
    ptr: core::ptr::NonNull<Context>,
}

// SAFETY: a `ContextBox` owns its context as a `Box` does (a heap one), or points into the
// boxed thread object that holds it (which never moves and outlives it, see
// `Thread::own`); contexts are reached only under the big kernel lock.
unsafe impl Send for ContextBox {}

impl ContextBox {
    /// A context in a heap block of its own, or `None` when the heap has no room.
    pub fn try_new(ctx: Context) -> Option<ContextBox> {
        let b = kern::fallible::try_box(Context { heap: true, ..ctx })?;
        Some(ContextBox {
            ptr: core::ptr::NonNull::from(alloc::boxed::Box::leak(b)),
        })
    }

    /// The context stored at `slot`, a thread's own (`Thread::own`), which is not freed
    /// with the box.
    fn inline(slot: &mut Context) -> ContextBox {
        slot.heap = false;
        ContextBox {
            ptr: core::ptr::NonNull::from(slot),
        }
    }

    /// Whether the context is stored inside a thread's own allocation.
    pub fn is_inline(&self) -> bool {
        !self.heap
    }
}

impl core::ops::Deref for ContextBox {
    type Target = Context;
    #[inline(always)]
    fn deref(&self) -> &Context {
        // SAFETY: `ptr` is a live context: a heap block this box owns, or the storage of a
        // boxed thread that outlives the box (a thread's own context is linked only on that
        // thread, see `Thread::adopt_bottom`); `&self` keeps others from `&mut`.
        unsafe { self.ptr.as_ref() }
    }
}

impl core::ops::DerefMut for ContextBox {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Context {
        // SAFETY: as in `deref`; the box is the only way to the context (a thread's own
        // storage is reached only through its box once linked), and `&mut self` is unique.
        unsafe { self.ptr.as_mut() }
    }
}

impl Drop for ContextBox {
    fn drop(&mut self) {
        if self.heap {
            // SAFETY: a heap box's `ptr` came from `Box::leak` in `try_new` and is freed
            // only here, once.
            drop(unsafe { alloc::boxed::Box::from_raw(self.ptr.as_ptr()) });
        }
    }
}

impl core::fmt::Debug for ContextBox {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
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
    /// Its own id (its key in `Kernel::threads`, set when it is inserted there): the system
    /// call paths that reach the running thread through the per-CPU pointer get its id
    /// with it.
    pub id: ThreadId,
    /// The running activation's context: its user registers, task, address space, IPC
    /// buffer, exception port and control state (by pointer: a migrating call links the
    /// caller's context below and makes the server activation's current by moving
    /// pointers; the per-CPU area points at the running context's frame, see
    /// `gdt::set_user_frame`). At home it is the thread's own, `own`.
    pub ctx: ContextBox,
    /// The storage of the thread's own context (its home activation's), in the thread's
    /// allocation: reached only through the [`ContextBox`] that points at it (in `ctx`, or
    /// `below[0]` while the thread has migrated), never directly.
    own: Context,
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
    /// A context kept from the last migrating return, for the next call: the context of
    /// the activation left then (its frame holds that activation's registers, of the task
    /// its `task_key` names), which becomes the next server activation's (see
    /// `crate::activation`).
    pub spare: Option<ContextBox>,
    /// The CPU whose run queue it joins when ready: where it last ran, or where
    /// `set_affinity` pinned it.
    pub cpu: usize,
    /// Pinned to `cpu` by `set_affinity`: no other CPU steals it.
    pub pinned: bool,
    /// Pending timeout, if any.
    pub timer: Option<TimerKey>,
    /// Set when its task is ending while it runs on another CPU.
    pub kill_pending: bool,
    /// The port it waits on for an exception handler's reply (receive right kept by the
    /// kernel), made at its first exception.
    pub exc_reply: Option<kern::ipc::PortId>,
    /// Its thread port (receive right kept by the kernel), once asked for.
    pub kport: Option<kern::ipc::PortId>,
    /// TSC ticks it has run (charged when it stops running on a CPU, except at the
    /// switching RPC fast path's switches, see `kernel::charge`; a migrating call runs on
    /// the caller's thread, so the server's work is charged to the caller).
    pub cpu_tsc: u64,
    /// What it costs its task's account (`crate::quota`), given back when it is freed.
    pub charge: Option<kern::quota::Charge>,
    /// The frames of the kernel stack it keeps while blocked in the process model,
    /// charged to its task until it resumes or is freed.
    pub stack_charge: Option<kern::quota::Charge>,
    /// The contexts of the activations below the running one, innermost last (empty at
    /// home): see `crate::activation`.
    // By pointer on purpose: a context moves between `ctx`, this stack and `spare`, so a
    // call or a return copies no context.
    pub below: alloc::vec::Vec<ContextBox>,
    /// Its last migrating call made a sidetrack upcall (the retry must not make another).
    pub sidetracked: bool,
    /// It last received an exception message from the exception fast path, so its next
    /// `ipc_msg` is most likely the handler's reply: the exception reply's fast path is
    /// tried first, before the RPC fast path plans it and declines
    /// (`crate::exception::reply_fast`). Only a hint: a wrong one costs a declined try.
    pub exc_hint: bool,
    /// Threads waiting for this one to stop in a suspended activation (`act_get_state`).
    pub state_waiters: alloc::vec::Vec<ThreadId>,
    /// It belongs to a virtual processor (its carrier, a spare, or blocked with an upcall
    /// given): [`block_until`] tells the virtual-processor family when it blocks.
    pub vp: bool,
    /// Its floating-point and vector registers' save area, made at its first use of them
    /// (`crate::fpu`); `None` for a thread that never used them.
    pub fpu: Option<alloc::boxed::Box<crate::fpu::FpuState>>,
}

/// The thread running on this CPU, through the per-CPU pointer (`gdt::current_thread`): one
/// load instead of the per-CPU table and a slab lookup.
///
/// # Safety
/// The kernel lock is held; this CPU runs a user thread (the caller is in one of its
/// system calls or traps); and while the reference is used the caller makes no other
/// reference to that thread (through `Kernel::threads`), and does not keep it across a
/// switch to another thread.
#[inline(always)]
pub unsafe fn current_mut<'a>() -> &'a mut Thread {
    // SAFETY: `set_user_frame` recorded the address of the boxed thread object this CPU
    // runs, which stays put and is freed only once the thread is off every CPU; the lock
    // and the caller's promise make this the only reference in use.
    unsafe { &mut *(gdt::current_thread() as *mut Thread) }
}

impl Thread {
    /// The task the thread belongs to (where it was created), wherever it runs now.
    pub fn home_task(&self) -> Option<TaskId> {
        self.below.first().map_or(self.ctx.task, |s| s.task)
    }

    /// The context of its home activation (in its own task): the running one at home,
    /// else `below[0]`. What its task may read or set of it; while the thread runs in a
    /// server, the running context is the server's.
    pub fn home_ctx(&self) -> &Context {
        match self.below.first() {
            Some(home) => home,
            None => &self.ctx,
        }
    }

    /// [`Thread::home_ctx`], to change.
    pub fn home_ctx_mut(&mut self) -> &mut Context {
        match self.below.first_mut() {
            Some(home) => home,
            None => &mut self.ctx,
        }
    }
}

impl Thread {
    /// A thread that will run in user mode in the context `ctx` makes (see
    /// [`Context::user`]), stored in the thread's own allocation; `None` when the heap has
    /// no room. The thread is made in place, after the allocation (no copy of it).
    #[inline(always)]
    pub fn new_user(
        ctx: impl FnOnce() -> Context,
        priority: u8,
        cpu: usize,
    ) -> Option<alloc::boxed::Box<Thread>> {
        let th = kern::fallible::try_box_with(|| Thread {
            id: Key(0),
            ctx: ContextBox::dangling(),
            own: ctx(),
            priority,
            // Not in a run queue until made ready (`thread_setrun`).
            state: ThreadState::Blocked(Blocked::Unstarted),
            cont: Some(Continuation::new(Resume::UserReturn)),
            stack: None,
            saved: SavedContext::default(),
            spare: None,
            cpu,
            pinned: false,
            timer: None,
            kill_pending: false,
            exc_reply: None,
            kport: None,
            below: alloc::vec::Vec::new(),
            sidetracked: false,
            exc_hint: false,
            vp: false,
            state_waiters: alloc::vec::Vec::new(),
            fpu: None,
            cpu_tsc: 0,
            charge: None,
            stack_charge: None,
        })?;
        Some(Thread::link_own(th))
    }

    /// The idle thread of `cpu`, running on `stack` (given when the CPU starts).
    pub fn new_idle(cpu: usize, stack: Option<KernelStack>) -> alloc::boxed::Box<Thread> {
        Thread::link_own(alloc::boxed::Box::new(Thread {
            id: Key(0),
            ctx: ContextBox::dangling(),
            own: Context::default(),
            priority: 0,
            state: ThreadState::Running { cpu },
            cont: None,
            stack,
            saved: SavedContext::default(),
            spare: None,
            cpu,
            pinned: true,
            timer: None,
            kill_pending: false,
            exc_reply: None,
            kport: None,
            below: alloc::vec::Vec::new(),
            sidetracked: false,
            exc_hint: false,
            vp: false,
            state_waiters: alloc::vec::Vec::new(),
            fpu: None,
            cpu_tsc: 0,
            charge: None,
            stack_charge: None,
        }))
    }

    /// Points the thread's running context at its own storage, once the thread is in the
    /// allocation it keeps for life.
    fn link_own(mut th: alloc::boxed::Box<Thread>) -> alloc::boxed::Box<Thread> {
        let th_ref = &mut *th;
        // The placeholder names no context: forgotten, not dropped.
        core::mem::forget(core::mem::replace(
            &mut th_ref.ctx,
            ContextBox::inline(&mut th_ref.own),
        ));
        th
    }

    /// Makes the bottom context of the thread's activation stack (`below[0]`, or the
    /// running one at home) its own: when it is another thread's own context (a split
    /// gave this thread the part below of that thread's stack), its contents move into
    /// this thread's storage, and that thread's storage is left empty (it never uses it
    /// again: its own bottom is now a heap context).
    pub fn adopt_bottom(&mut self) {
        let bottom = match self.below.first_mut() {
            Some(b) => b,
            None => &mut self.ctx,
        };
        if !bottom.is_inline() || core::ptr::eq(bottom.ptr.as_ptr(), &self.own) {
            return;
        }
        self.own = core::mem::take(&mut **bottom);
        *bottom = ContextBox::inline(&mut self.own);
    }
}

impl ContextBox {
    /// A placeholder, never dereferenced: replaced by [`Thread::link_own`] before the
    /// thread is used.
    fn dangling() -> ContextBox {
        ContextBox {
            ptr: core::ptr::NonNull::dangling(),
        }
    }
}

/// Picks the thread to run next on `cpu`: the highest-priority ready thread, or the idle
/// thread.
#[inline]
pub fn thread_select(k: &mut Kernel, cpu: usize) -> ThreadId {
    let c = k.cpu_mut(cpu);
    match c.runq.pop() {
        Some((t, _)) => t,
        None => c.idle,
    }
}

/// Makes `t` ready on its CPU's run queue (Mach's `thread_setrun`), waking that CPU if it is
/// idle elsewhere.
#[inline]
/// Before a thread comes to exist at priority `prio` (created, or moved there): counts
/// it, and makes every CPU's run queue able to hold every thread of that priority, and the
/// timer queue and the IPC wake list (`ipc::effects`) one entry for every thread, so that
/// making threads ready ([`thread_setrun`], preemption, stealing), giving one a timeout and
/// listing the threads an IPC operation wakes never allocate.
/// [`baton_abi::Error::NoMemory`] (and nothing counted) when the heap has no room.
pub fn reserve_ready(k: &mut Kernel, prio: u8) -> Result<(), baton_abi::Error> {
    k.timers.reserve(k.threads.len() + 1)?;
    let want = k.threads.len() + 1;
    if k.wake_list.capacity() < want {
        k.wake_list
            .try_reserve(want)
            .map_err(|_| baton_abi::Error::NoMemory)?;
    }
    if k.thread_list.capacity() < want {
        k.thread_list
            .try_reserve(want)
            .map_err(|_| baton_abi::Error::NoMemory)?;
    }
    let p = usize::from(prio.min(63));
    let n = k.threads_at.get(p).copied().unwrap_or(0) + 1;
    for c in k.cpus.iter_mut() {
        c.runq.reserve(prio, n)?;
    }
    if let Some(slot) = k.threads_at.get_mut(p) {
        *slot = n;
    }
    Ok(())
}

/// A thread at priority `prio` is gone or has moved: the count [`reserve_ready`] keeps
/// goes down (the run queues keep their room).
pub fn release_ready(k: &mut Kernel, prio: u8) {
    if let Some(slot) = k.threads_at.get_mut(usize::from(prio.min(63))) {
        *slot = slot.saturating_sub(1);
    }
}

/// Makes the blocked thread `t` ready on its CPU's run queue (Mach's `thread_setrun`),
/// waking that CPU if it is idle elsewhere.
///
/// Only a blocked thread becomes ready here: a wake of a thread that is already ready (in
/// a run queue), running, halted or idle is refused and reported ([`refused_wake`]). Every
/// waker (a message, a timeout, a port's death, an alert, a resume, a task's end) comes
/// through here, so no mix of them can put a thread in a run queue twice, or queue one that
/// runs on a CPU or has ended: the two CPUs would then both run it, on one kernel stack, or
/// one would resume a reaped thread. (The running thread requeues itself with
/// [`requeue_current`].)
pub fn thread_setrun(k: &mut Kernel, t: ThreadId) {
    let Some(th) = k.threads.get_mut(t) else {
        return;
    };
    if !matches!(th.state, ThreadState::Blocked(_)) {
        let state = th.state;
        refused_wake(k, t, state);
        return;
    }
    enqueue(k, t);
}

/// The running thread `cur` of this CPU goes back to its run queue (a preemption, a yield
/// that moves it to the CPU it is pinned to): the caller then blocks it.
pub fn requeue_current(k: &mut Kernel, cur: ThreadId) {
    let here = gdt::this_cpu();
    let running_here = k.cpu(here).current == cur
        && k.threads
            .get(cur)
            .is_some_and(|th| th.state == ThreadState::Running { cpu: here });
    if !running_here {
        let state = k
            .threads
            .get(cur)
            .map_or(ThreadState::Halted, |th| th.state);
        refused_wake(k, cur, state);
        return;
    }
    enqueue(k, cur);
}

/// Puts `t` in its CPU's run queue, ready, and pokes that CPU.
#[inline(always)]
fn enqueue(k: &mut Kernel, t: ThreadId) {
    let Some(th) = k.threads.get_mut(t) else {
        return;
    };
    th.state = ThreadState::Ready;
    let (cpu, prio) = (th.cpu, th.priority);
    if let Some(c) = k.cpus.get_mut(cpu) {
        c.runq.push(t, prio);
    }
    if cpu != gdt::this_cpu() {
        kernel::poke_cpu(k, cpu, prio);
    }
}

/// Timer entries that fired for a thread that no longer held them, since boot.
pub static STALE_TIMERS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// A timer entry of `t` fired that `t` does not hold (`Kernel::expire_timers` skips it):
/// counted, and the first few reported.
#[cold]
#[inline(never)]
pub fn stale_timer(t: ThreadId) {
    let n = STALE_TIMERS.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    if n < 8 {
        crate::arch::serial::kprintln!("[kernel] stale timer of thread {t:?} skipped");
    }
}

/// Wakes refused by [`thread_setrun`] and [`requeue_current`] since boot.
pub static REFUSED_WAKES: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// A wake of `t`, in `state`, that would have queued it twice, or queued a running,
/// halted or idle thread: counted, and the first few are reported (each is a kernel path
/// that wakes a thread it no longer holds; the refusal keeps the machine sound).
#[cold]
#[inline(never)]
fn refused_wake(k: &mut Kernel, t: ThreadId, state: ThreadState) {
    let n = REFUSED_WAKES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    if n < 8 {
        k.close_line();
        crate::arch::serial::kprintln!(
            "[kernel] wake refused: thread {t:?} is {state:?}, not blocked (on CPU {})",
            gdt::this_cpu()
        );
    }
}

/// `yield` by the running thread `cur`: when a thread of at least its priority is ready
/// here, `cur` goes to the back of its level and that thread runs; otherwise `cur` returns
/// to user mode at once, in place (a yield to itself touches no queue and no stack).
#[inline(always)]
pub fn thread_yield(k: &mut Kernel, cur: ThreadId) -> ! {
    yield_now(k, cur, true)
}

/// [`thread_yield`] for a thread that is not in a system call (a page fault that is to be
/// taken again once others have run): its registers are left as they are.
pub fn thread_yield_keeping(k: &mut Kernel, cur: ThreadId) -> ! {
    yield_now(k, cur, false)
}

/// The yield of both: with `result`, the thread's `yield` call returns 0. One function,
/// inlined into each, so that the system call's path looks its thread up once.
#[inline(always)]
fn yield_now(k: &mut Kernel, cur: ThreadId, result: bool) -> ! {
    let cpu = gdt::this_cpu();
    let Some(o) = k.threads.get_mut(cur) else {
        panic!("thread_yield: running thread {cur:?} vanished");
    };
    if result {
        o.ctx.frame.rax = 0;
    }
    if o.cpu != cpu {
        // Pinned elsewhere since it started running here: it moves now.
        k.stats.blocks_yield += 1;
        requeue_current(k, cur);
        thread_block_with(k, Continuation::new(Resume::UserReturn));
    }
    let Some(c) = k.cpus.get_mut(cpu) else {
        panic!("CPU {cpu} is not online");
    };
    let Some((next, _)) = c.runq.exchange(cur, o.priority) else {
        kernel::leave_to_user()
    };
    o.state = ThreadState::Ready;
    k.stats.blocks_yield += 1;
    kernel::charge(c, o);
    let stack = stack_detach(o, Continuation::new(Resume::UserReturn));
    run_handoff(k, cpu, cur, stack, next)
}

/// Runs `new` in place of the running thread `old` of `cpu`, which blocks with
/// continuation `cont` (Figure 4's `thread_handoff`): the caller chose `new` and took it off
/// any queue, and has set `old`'s state. When `new` has no stack (it blocked with a
/// continuation) the running stack is handed to it; otherwise this is [`thread_block`]'s
/// switch. Never returns.
#[inline(always)]
pub fn thread_handoff(
    k: &mut Kernel,
    cpu: usize,
    old: ThreadId,
    cont: Continuation,
    new: ThreadId,
) -> ! {
    let Some(o) = k.threads.get_mut(old) else {
        panic!("thread_handoff: running thread {old:?} vanished");
    };
    if let Some(c) = k.cpus.get_mut(cpu) {
        kernel::charge(c, o);
    }
    let stack = stack_detach(o, cont);
    run_handoff(k, cpu, old, stack, new)
}

/// The old half of a handoff (`stack_detach`): the running thread `o` blocks with `cont`
/// and gives up its stack, which is returned.
#[inline(always)]
fn stack_detach(o: &mut Thread, cont: Continuation) -> KernelStack {
    o.cont = Some(cont);
    match o.stack.take() {
        Some(stack) => stack,
        None => panic!("stack_detach: the running thread has no stack"),
    }
}

/// The new half of a handoff: `stack`, the running stack that `old` just gave up, goes to
/// `new` (`stack_handoff`) and `new` resumes in its continuation; or, when `new` has a
/// stack of its own (it blocked in the process model), `old`'s stack is discarded and we
/// switch to `new`'s. Reclaims `old` if it has halted. Never returns.
#[inline(always)]
fn run_handoff(k: &mut Kernel, cpu: usize, old: ThreadId, stack: KernelStack, new: ThreadId) -> ! {
    let kernel_root = k.kernel_root;
    let Some(n) = k.threads.get_mut(new) else {
        panic!("thread_handoff: thread {new:?} vanished");
    };
    if n.stack.is_some() {
        if let Some(o) = k.threads.get_mut(old) {
            o.stack = Some(stack);
        }
        switch_to(k, cpu, old, new, false);
        unreachable!("switch_context without a save returned");
    }
    let start = stack.start();
    n.stack = Some(stack);
    // A continuation that returns to user mode is finished here (the registers are in the
    // thread object); any other is left in the thread for `continue_entry`.
    let to_user = n.cont.as_ref().is_none_or(Continuation::returns_to_user);
    if to_user {
        n.cont = None;
    }
    k.stats.stack_handoffs += 1;
    let Some(c) = k.cpus.get_mut(cpu) else {
        panic!("CPU {cpu} is not online");
    };
    kernel::switch_in(c, kernel_root, cpu, new, n);
    if k.threads
        .get(old)
        .is_some_and(|o| o.state == ThreadState::Halted)
    {
        k.reap_thread(old);
    }
    if to_user {
        kernel::leave_to_user()
    }
    // SAFETY: `start` is the base of the stack we are running on, now the new thread's;
    // nothing on it is used again.
    unsafe { context::call_continuation(start, continue_entry, new.0) }
}

/// Blocks the current thread of this CPU and runs another.
///
/// With `Some(cont)` the thread blocks with a continuation: its stack is handed off or
/// discarded and the call never returns (the thread resumes later in `cont`). With `None`
/// it blocks in the process model and the call returns when it is switched back to.
///
/// The caller has already set the old thread's state (`Ready` and queued for a yield or a
/// preemption, `Blocked(..)`, `Halted`); its user registers are in its thread object.
pub fn thread_block(k: &mut Kernel, cont: Option<Continuation>) {
    let cpu = gdt::this_cpu();
    let old = k.cpu(cpu).current;
    let new = thread_select(k, cpu);

    if new == old {
        // Nothing else to run: the old thread goes on.
        let Some(th) = k.threads.get_mut(old) else {
            panic!("thread_block: running thread {old:?} vanished");
        };
        th.state = ThreadState::Running { cpu };
        if let Some(c) = cont {
            let Some(start) = th.stack.as_ref().map(KernelStack::start) else {
                panic!("thread_block: running thread {old:?} has no stack");
            };
            // SAFETY: we run on the current thread's own stack and abandon everything on it;
            // the continuation only uses the thread object.
            unsafe { continue_on_stack(k, start, old, c) };
        }
        return;
    }

    if let Some(c) = cont {
        thread_handoff(k, cpu, old, c, new);
    }
    // The process model: the old thread keeps its stack and registers.
    let Some((o, n)) = k.threads.get2_mut(old, new) else {
        panic!("thread_block: thread {old:?} or {new:?} vanished");
    };
    o.cont = None;
    if n.stack.is_none() {
        // The new thread needs a stack to run its continuation on. The only process-model
        // wait reserves one in the pool before it blocks (`syscall`'s
        // `reserve_process_model_stack`), so the pool cannot be empty here.
        let Some(stack) = k.stack_alloc() else {
            panic!("thread_block: no kernel stack although one was reserved");
        };
        let saved = context::stack_attach(&stack);
        if let Some(th) = k.threads.get_mut(new) {
            th.stack = Some(stack);
            th.saved = saved;
        }
    }
    switch_to(k, cpu, old, new, true);
}

/// Blocks the current thread with continuation `cont` ([`thread_block`] with a
/// continuation): never returns.
#[inline(always)]
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
#[inline(always)]
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
        // The families' own continuations.
        point @ (Resume::Receive | Resume::SendRetry | Resume::ExceptionReply) => {
            (crate::family::hooks().resume)(k, t, point)
        }
        // The result of a finished call is already in the saved frame.
        Resume::UserReturn | Resume::Wait | Resume::Sleep => {
            if k.threads.get(t).is_none() {
                panic!("resuming thread {t:?} that does not exist");
            }
            kernel::leave_to_user()
        }
    }
}

/// Marks the current thread blocked on `why`, with an optional timeout (an absolute
/// deadline in nanoseconds).
#[inline]
pub fn block_until(k: &mut Kernel, why: Blocked, deadline: Option<u64>) {
    let cur = k.current_thread();
    let timer = deadline.map(|d| k.timers.insert(d, cur));
    if let Some(t) = k.threads.get_mut(cur) {
        t.state = ThreadState::Blocked(why);
        // A timer still held from an earlier wait is cancelled, never just forgotten: its
        // entry would fire into this wait (`Kernel::expire_timers` skips entries the thread
        // does not hold, but the heap would keep it).
        let held = core::mem::replace(&mut t.timer, timer);
        let vp = t.vp;
        if let Some(old) = held {
            cancel_held(k, old);
        }
        if vp {
            // Its virtual processor may go on with a spare thread (a Block upcall).
            (crate::family::hooks().vp_blocking)(k, cur, why);
        }
    }
}

/// [`block_until`]'s cancel of a timer the thread still held, out of line: no wait leaves
/// one behind today, so the common way keeps its registers.
#[cold]
#[inline(never)]
fn cancel_held(k: &mut Kernel, old: kern::timer::TimerKey) {
    k.timers.cancel(old);
}

/// Stops the current thread for good and runs the next one.
pub fn thread_terminate_current(k: &mut Kernel) -> ! {
    // A thread that migrated into the activation being ended goes back to its caller.
    (crate::family::hooks().unwind_current)(k);
    let cpu = gdt::this_cpu();
    let cur = k.cpu(cpu).current;
    if let Some(th) = k.threads.get_mut(cur) {
        th.state = ThreadState::Halted;
    }
    thread_block_with(k, Continuation::new(Resume::UserReturn))
}
