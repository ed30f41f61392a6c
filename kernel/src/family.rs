//! How the core tells the object families what happened, without naming them.
//!
//! The core (`kernel.rs`, `thread.rs`: state, lock, CPUs, threads, scheduling) sits below
//! the object families (ports and IPC, activations, exceptions, kernel-object ports,
//! control, the floor calls), which build on it. Where the core must let the families act
//! — a thread or a task ends, a blocked thread leaves what it waits in, a continuation of
//! theirs resumes, a user exception or interrupt arrives — it calls through [`Hooks`], one
//! table of functions that the crate root (`main.rs`, above every layer) fills in once at
//! boot with each family's handler ([`install`]). So every import runs one way (see "The
//! layers" in `docs/architecture.md`).
//!
//! Until [`install`] runs (early boot, when no task exists) the hooks do nothing.
//!
//! # Invariants
//! - Every hook runs under the big kernel lock, with the [`Kernel`] it is given.
//! - The teardown hooks allocate nothing (a dying task must never be stranded by a
//!   failed allocation): every family preallocates what its part of an ending needs.

use crate::kernel::{Kernel, TaskId};
use crate::thread::{Blocked, Thread, ThreadId};
use kern::continuation::Resume;
use kern::ipc::{PortId, Space};

/// What the families do at the core's events (see the module documentation).
pub struct Hooks {
    /// Thread `t` is about to be freed (off every CPU and queue, still in the slab): whoever
    /// waits for its state is released.
    pub thread_leaving: fn(&mut Kernel, ThreadId),
    /// A thread has been taken out of the slab (it is `thread`): what the families keep for
    /// it goes (its suspension counts, exception ports, thread port).
    pub thread_freed: fn(&mut Kernel, &Thread),
    /// Task `id` starts ending (no call may migrate into it any more): its activations are
    /// retired, its kernel-object port `kport` dies, its floor registration goes, and every
    /// activation of it below the top of a thread is marked dead.
    pub task_ending: fn(&mut Kernel, TaskId, Option<PortId>),
    /// Thread `t`, whose home task is ending, runs in another task's activation: its home
    /// activation ends there (the split of the migrating-threads paper).
    pub home_ending: fn(&mut Kernel, ThreadId),
    /// Task `id`'s rights go (it has ended): its exception port `exc` and task port
    /// `kport`, every name of its space (so its ports die), and the activations attached
    /// to ports that died with it.
    pub task_released: fn(&mut Kernel, TaskId, Option<PortId>, Option<PortId>),
    /// Releases every right of a name space that never had a task running (a spawn that
    /// failed half way).
    pub names_released: fn(&mut Kernel, &mut Space),
    /// Thread `t` (not running) that migrated into other activations goes back to its
    /// caller (it is being killed there); whether it should be made ready.
    pub unwind_other: fn(&mut Kernel, ThreadId) -> bool,
    /// The running thread ends: if it migrated, it unwinds to its caller instead (does not
    /// return then).
    pub unwind_current: fn(&mut Kernel),
    /// Blocked thread `t` leaves what it waits in as `b` (a port's queue, another thread's
    /// state waiters), on a timeout or a kill. (`Sleep`, `Wait` and `ProcessModel` are the
    /// core's own.)
    pub forget_waiter: fn(&mut Kernel, ThreadId, Blocked),
    /// Runs continuation `point` of thread `t` (the families' own: `Receive`, `SendRetry`,
    /// `ExceptionReply`).
    pub resume: fn(&mut Kernel, ThreadId, Resume) -> !,
    /// A user-mode exception (`vector`, `error`) of thread `t`: sent to its handler, if it
    /// has one (returns only when the thread is not to be resumed by one).
    pub exception: fn(&mut Kernel, ThreadId, u64, u64),
    /// An interrupt or exception arrived on `cpu` while it ran a floor call.
    pub floor_interrupted: fn(&mut Kernel, usize),
    /// Called on the way to user mode while [`crate::kernel::STOPS_PENDING`] is not zero:
    /// the running thread stops if its activation is suspended.
    pub before_user: fn(&mut Kernel),
    /// Gives boot task `id` a send right to the host-privilege port; its name.
    pub grant_host_priv: fn(&mut Kernel, TaskId) -> Result<u64, baton_abi::Error>,
    /// ISA interrupt line `irq` fired (before the end of interrupt): its driver is told.
    pub interrupt: fn(&mut Kernel, u64),
    /// Task `id` was just made (no thread yet, an empty space): its address map is made,
    /// empty. An error ends the task before it starts.
    pub space_made: fn(&mut Kernel, TaskId) -> Result<(), baton_abi::Error>,
    /// Maps boot module `module` (an index of `Kernel::modules`) as the program of the
    /// new task `id` (no thread yet), copy-on-write, with its initial stack: its entry
    /// point. On an error the caller destroys the task.
    pub map_program: fn(&mut Kernel, TaskId, usize) -> Result<u64, baton_abi::Error>,
    /// Task `id`'s space is about to be destroyed (no CPU has it loaded): its map goes.
    pub space_freed: fn(&mut Kernel, TaskId),
    /// A user-mode page fault of thread `t` at (`addr`, CPU error code): `Ok` when the page
    /// is now mapped and the thread resumes, else the fault class for the exception.
    pub page_fault: fn(&mut Kernel, ThreadId, u64, u64) -> Result<(), u64>,
    /// The running thread `t`, which belongs to a virtual processor (`Thread::vp`), has
    /// just been marked blocked on `why` and is about to leave its CPU: its processor may
    /// go on with a spare thread, made ready at the front of this CPU's run queue.
    pub vp_blocking: fn(&mut Kernel, ThreadId, Blocked),
    /// The running thread `t`, which belongs to a virtual processor, is on its way back to
    /// user mode at a timer tick or a wake-up interrupt, or about to be preempted
    /// (`preempted`): its processor may be told with a Checkpoint upcall (its user registers
    /// rewritten to enter it).
    pub vp_preempting: fn(&mut Kernel, ThreadId, bool),
    /// A processor is about to halt with nothing to run (its idle thread, under the
    /// lock): a family may do deferred work (SPIN's asynchronous handlers). Whether it
    /// did any (the idle loop then looks at its run queue again).
    pub idle_work: fn(&mut Kernel) -> bool,
}

/// The hooks before [`install`]: nothing to do.
const NONE: Hooks = Hooks {
    thread_leaving: |_, _| {},
    thread_freed: |_, _| {},
    task_ending: |_, _, _| {},
    home_ending: |_, _| {},
    task_released: |_, _, _, _| {},
    names_released: |_, _| {},
    unwind_other: |_, _| false,
    unwind_current: |_| {},
    forget_waiter: |_, _, _| {},
    resume: |_, _, _| crate::kernel::leave_to_user(),
    exception: |_, _, _, _| {},
    floor_interrupted: |_, _| {},
    before_user: |_| {},
    grant_host_priv: |_, _| Err(baton_abi::Error::NotFound),
    interrupt: |_, _| {},
    space_made: |_, _| Err(baton_abi::Error::NotSupported),
    map_program: |_, _, _| Err(baton_abi::Error::NotSupported),
    space_freed: |_, _| {},
    page_fault: |_, _, _, _| Err(0),
    vp_blocking: |_, _, _| {},
    vp_preempting: |_, _, _| {},
    idle_work: |_| false,
};

static HOOKS: spin::Once<Hooks> = spin::Once::new();

/// Installs the families' hooks (once, at boot, before the first task).
pub fn install(hooks: Hooks) {
    HOOKS.call_once(|| hooks);
}

/// The hooks.
#[inline]
pub fn hooks() -> &'static Hooks {
    HOOKS.get().unwrap_or(&NONE)
}
