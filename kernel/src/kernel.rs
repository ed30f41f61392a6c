//! Kernel state, the big kernel lock, and every entry from user mode or interrupts.
//!
//! All kernel state lives in one [`Kernel`] behind one lock, taken on every entry and
//! released on the way back to user mode or before an idle CPU halts — the big kernel lock
//! (as in seL4): the kernel runs with interrupts off, never blocks holding anything but
//! the CPU, and its operations are short, so one lock keeps SMP simple and correct; the
//! lock belongs to the CPU, not the thread, and passes across `switch_context`.
//!
//! # Invariants
//! - [`kernel()`] is called only with the lock held.
//! - Each CPU's `current` thread is `Running { cpu }` and holds a kernel stack.
//! - `loaded_root` of each CPU is what its CR3 holds: the kernel root (idle) or the root of
//!   a task with a thread running there, so a task's space is never destroyed while loaded.

use crate::arch::context::KernelStack;
use crate::arch::paging::KernelMem;
use crate::arch::serial::kprintln;
use crate::arch::stack::StackPool;
use crate::arch::trap::{self, TrapFrame, SPURIOUS_VECTOR, TIMER_VECTOR};
use crate::arch::{apic, cpu, gdt, serial};
use crate::family;
use crate::thread::{self, Blocked, Thread, ThreadId, ThreadState};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use baton_abi::{Stats, PRIORITY_DEFAULT};
use core::cell::UnsafeCell;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use kern::cmdline::BootConfig;
use kern::continuation::{Continuation, Resume};
use kern::frame::{FrameAllocator, PhysAddr};
use kern::gauge::Gauge;
use kern::idslab::IdSlab;
use kern::pmap::AddressSpace;
use kern::sched::RunQueue;
use kern::slab::Slab;
use kern::timer::TimerQueue;
use kern::waitq::WaitQueues;

/// Task identifier; never reused.
pub type TaskId = u64;

const PCIDS: usize = 4096;

/// The boot module that, named first in `init=`, is started as the name server.
pub const NAME_SERVER: &str = "names";

/// A user task: an address space and its threads.
pub struct Task {
    /// The boot module it runs.
    pub name: String,
    /// Its address space.
    pub space: AddressSpace,
    /// PCID used for its address space.
    pub pcid: u16,
    /// Threads alive.
    pub threads: u64,
    /// Set when the task is ending: the exit code, or the kill report already printed.
    pub ending: Option<Ending>,
    /// Its capability name space.
    pub names: kern::ipc::Space,
    /// Its exception port (a send right the kernel holds), if set.
    pub exc_port: Option<kern::ipc::PortId>,
    /// Its task port (receive right kept by the kernel), once asked for.
    pub kport: Option<kern::ipc::PortId>,
    /// The task that spawned it (`None` for boot tasks).
    pub creator: Option<TaskId>,
    /// Its console lines caused by user errors ([`crate::klog`]).
    pub log_bucket: kern::ratelimit::TokenBucket,
    /// Its last thread is gone but threads of other tasks still run in it (migrated into
    /// its activations, unwinding): it has released everything but its memory, which is
    /// freed when the last of them has left ([`LINGERING`], `Kernel::reap_lingering`).
    pub lingering: bool,
    /// What it and the tasks it creates may make the kernel hold (`crate::quota`).
    pub account: kern::quota::AccountRef,
    /// Frames its address space holds (pages and page tables), charged to `account`
    /// until the space is destroyed.
    pub frames: u64,
    /// The charge for the task object itself (held for its `Drop`, which gives it back).
    #[allow(dead_code, reason = "held only to be dropped with the task")]
    pub charge: Option<kern::quota::Charge>,
    /// Bytes charged to `account` for its activations (`crate::quota::settle`).
    pub acts_charged: u64,
}

/// Tasks whose removal waits for migrated threads to leave them (`Task::lingering`). While
/// 0, a migrating return or unwind looks for none (one relaxed load). Changed under the
/// big kernel lock.
pub static LINGERING: AtomicUsize = AtomicUsize::new(0);

/// Activations that are suspended (their threads must stop at their next return to user
/// mode, `Hooks::before_user`): kept by the control family, read on every way out of the
/// kernel (one relaxed load while 0).
pub static STOPS_PENDING: AtomicUsize = AtomicUsize::new(0);

/// How a task ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// `exit(code)` or its last thread exited (code 0).
    Exit(i32),
    /// Killed by an exception (already reported).
    Killed,
}

/// A boot module: a named ELF image inside the initrd.
pub struct Module {
    /// Its name (without the boot image's `tests/` folder).
    pub name: String,
    /// Its bytes.
    pub data: &'static [u8],
    /// A test program (it was under `tests/` in the boot image): not what a person runs.
    pub test: bool,
}

/// The boot image's folder of test programs.
const TESTS_DIR: &str = "tests/";

/// Per-CPU scheduling state.
pub struct Cpu {
    /// The running thread.
    pub current: ThreadId,
    /// This CPU's idle thread.
    pub idle: ThreadId,
    /// Ready threads that run here.
    pub runq: RunQueue<ThreadId>,
    /// What CR3 holds.
    pub loaded_root: PhysAddr,
    /// For each PCID, the task whose TLB entries this CPU may hold under it.
    pub pcid_owner: Vec<TaskId>,
    /// Whether the CPU is halted in its idle loop (wake it with an IPI).
    pub halted: bool,
    /// TSC when it last halted (meaningful while `halted`; see [`halted_ticks`]).
    pub halt_since: u64,
    /// TSC when the running thread was last charged (see [`charge`]).
    pub since: u64,
    /// Set by the RPC fast path when it declined an `ipc_msg` whose receiver waits for an
    /// exception handler's reply; the general path then tries the exception reply's fast
    /// path (`exception::reply_fast`), and only then. A hint: that path checks everything
    /// again.
    pub exc_reply_hint: bool,
    /// The save area of the running thread when it has one, whose values the CPU's
    /// floating-point and vector registers hold; null otherwise, and then `CR0.TS` is set
    /// (`crate::fpu`).
    pub fpu_live: *mut crate::arch::fpu::Area,
}

/// Charges the time since the CPU `c` last charged to `old`, its running thread, which is
/// about to stop running there (CPU accounting: a thread's `cpu_tsc`). Every switch
/// charges but the switching RPC fast path's (`crate::fastpath`), whose stretch of time
/// goes to the thread running at the CPU's next charge: a client and the server it calls
/// that way are charged together, as a migrating call's server work is its caller's.
#[inline(always)]
pub fn charge(c: &mut Cpu, old: &mut Thread) {
    let now = cpu::rdtsc();
    old.cpu_tsc = old.cpu_tsc.wrapping_add(now.wrapping_sub(c.since));
    c.since = now;
}

/// All kernel state.
pub struct Kernel {
    /// Physical frames.
    pub frames: FrameAllocator,
    /// The kernel's page-table root (shared kernel half).
    pub kernel_root: PhysAddr,
    /// Tasks by id, and by the slab key each of their threads caches (`Thread::task_key`).
    pub tasks: IdSlab<Task>,
    /// Threads by id (boxed: a thread object never moves, see [`Thread`]).
    pub threads: Slab<Box<Thread>>,
    /// Per-CPU state, one entry per online CPU.
    pub cpus: Vec<Cpu>,
    /// Sleep and wait timeouts, in nanoseconds since reset.
    pub timers: TimerQueue<ThreadId>,
    /// Threads in `wait`, by (task, user address).
    pub waits: WaitQueues<(TaskId, u64), ThreadId>,
    /// Every port.
    pub ipc: kern::ipc::Ipc<ThreadId>,
    /// Every activation of migrating RPC (the pools are in the ports).
    pub acts: kern::activation::Activations,
    /// The host-privilege port, made at boot.
    pub host_priv: Option<kern::ipc::PortId>,
    /// Interrupt lines bound to drivers' ports and I/O-ports objects (`crate::device`).
    pub devices: kern::device::Devices<kern::ipc::PortId>,
    /// The ports of pool activations, with their activations (at most one each; grown
    /// fallibly before a port is made).
    pub act_ports: Vec<(kern::activation::ActId, kern::ipc::PortId)>,
    /// Kernel stacks not attached to any thread.
    pub stacks: StackPool,
    /// Stacks attached to threads.
    pub stacks_in_use: Gauge,
    /// The always-on counters.
    pub stats: Stats,
    /// Transfers the RPC fast path made (`fastpath::try_ipc`). Each is also an IPC fast
    /// transfer, a recognition, an IPC block and a stack handoff: one counter on the path,
    /// added to those four in [`Kernel::snapshot_stats`].
    pub fast_transfers: u64,
    /// Boot modules.
    pub modules: Vec<Module>,
    /// Power off when the last task ends.
    pub shutdown_when_idle: bool,
    /// The floor cross-address-space calls' partners and calls in progress
    /// ([`crate::floor`]).
    pub floor: kern::floor::Xas<ThreadId>,
    /// Threads that exist at each priority: every CPU's run queue has room for all of
    /// them at their level, so making a thread ready never allocates
    /// (`thread::reserve_ready`).
    pub threads_at: [usize; 64],
    /// The list IPC operations name the threads they wake in (`ipc::effects`), with room
    /// for every thread.
    pub wake_list: Vec<(ThreadId, kern::ipc::Wake)>,
    /// A list of threads for task teardown (`end_task`), with room for every thread.
    pub thread_list: Vec<ThreadId>,
    next_task: TaskId,
    next_cpu: usize,
    /// The task whose console line is still open.
    open_line: Option<TaskId>,
    /// The rate limit and per-CPU buffers of lines caused by user errors.
    pub log: crate::klog::Log,
}

/// The big kernel lock. Taken by [`lock`], and by the system-call entry's lean way for
/// the extensions' range in its assembly (`arch::trap`'s `high_syscall`, through the
/// symbol `kernel_lock_word`, as `arch` reaches everything above it by symbol), which
/// keeps nothing in a register across a call that may spin. A 32-bit word whose bit 0 is
/// the lock (1: held), so the assembly takes it with one `lock bts` and its carry.
#[export_name = "kernel_lock_word"]
static BKL: AtomicU32 = AtomicU32::new(0);

struct KernelCell(UnsafeCell<Option<Kernel>>);
// SAFETY: the cell is only accessed through `kernel()`, whose callers hold the big kernel
// lock, so at most one CPU touches it at a time.
unsafe impl Sync for KernelCell {}

static KERNEL: KernelCell = KernelCell(UnsafeCell::new(None));

/// Takes the big kernel lock (interrupts are off).
pub fn lock() {
    while BKL
        .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // A CPU waiting here has interrupts off: answer TLB shootdowns while waiting.
        crate::arch::tlb::service();
        core::hint::spin_loop();
    }
}

/// Takes the big kernel lock if it is free, without waiting: whether it was taken.
pub fn try_lock() -> bool {
    BKL.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// Releases the big kernel lock.
pub fn unlock() {
    BKL.store(0, Ordering::Release);
}

/// The kernel state.
///
/// # Safety
/// The caller must hold the big kernel lock, and must not keep the reference across a
/// point where another CPU could take the lock (the lock's release), nor use a reference
/// obtained before a `switch_context` after it.
pub unsafe fn kernel() -> &'static mut Kernel {
    // SAFETY: the caller holds the lock, so no other reference is in use on another CPU.
    match unsafe { &mut *KERNEL.0.get() } {
        Some(k) => k,
        None => panic!("kernel state used before it exists"),
    }
}

impl Kernel {
    /// Per-CPU state of `cpu`.
    #[inline]
    pub fn cpu(&self, cpu: usize) -> &Cpu {
        match self.cpus.get(cpu) {
            Some(c) => c,
            None => panic!("CPU {cpu} is not online"),
        }
    }

    /// Per-CPU state of `cpu`, mutably.
    pub fn cpu_mut(&mut self, cpu: usize) -> &mut Cpu {
        match self.cpus.get_mut(cpu) {
            Some(c) => c,
            None => panic!("CPU {cpu} is not online"),
        }
    }

    fn mem(&mut self) -> KernelMem<'_> {
        KernelMem {
            frames: &mut self.frames,
        }
    }

    fn now(&self) -> u64 {
        apic::now_ns()
    }

    /// Takes a kernel stack from the pool.
    pub fn stack_alloc(&mut self) -> Option<KernelStack> {
        let s = self.stacks.alloc(&mut self.frames, self.kernel_root)?;
        self.stats.stacks_allocated = self.stacks.created;
        let now = self.now();
        self.stacks_in_use.inc(now);
        Some(s)
    }

    /// Gives a kernel stack back to the pool.
    pub fn stack_free(&mut self, s: KernelStack) {
        self.stacks.free(s);
        let now = self.now();
        self.stacks_in_use.dec(now);
    }

    /// Makes `t` (which holds a stack) the running thread of `cpu` ([`switch_in`]).
    pub fn make_current(&mut self, cpu: usize, t: ThreadId) {
        let kernel_root = self.kernel_root;
        if let Some(c) = self.cpus.get_mut(cpu) {
            if c.current != t {
                if let Some(old) = self.threads.get_mut(c.current) {
                    charge(c, old);
                }
            }
        }
        let Some(th) = self.threads.get_mut(t) else {
            panic!("make_current: no thread {t:?}");
        };
        let Some(c) = self.cpus.get_mut(cpu) else {
            panic!("CPU {cpu} is not online");
        };
        switch_in(c, kernel_root, cpu, t, th);
    }

    /// Frees a halted thread that is off its CPU, and its task when it was the last thread.
    pub fn reap_thread(&mut self, t: ThreadId) {
        (family::hooks().thread_leaving)(self, t);
        let Some(mut th) = self.threads.remove(t) else {
            return;
        };
        thread::release_ready(self, th.priority);
        if let Some(timer) = th.timer {
            self.timers.cancel(timer);
        }
        if let Some(stack) = th.stack.take() {
            self.stack_free(stack);
        }
        crate::fpu::freed(self, &th);
        (family::hooks().thread_freed)(self, &th);
        let Some(task_id) = th.ctx.task else {
            return;
        };
        let last = match self.tasks.get_mut(&task_id) {
            Some(task) => {
                task.threads = task.threads.saturating_sub(1);
                task.threads == 0
            }
            None => false,
        };
        if last {
            self.last_thread_gone(task_id);
        }
        self.stats.threads = self.threads.len().saturating_sub(self.cpus.len()) as u64;
    }

    /// Task `task_id`'s last own thread is gone: the task ends (threads of other tasks that
    /// migrated into its activations unwind to their callers with `Aborted`), and it is
    /// removed now, or, while one of them still runs in its address space (on another CPU,
    /// until its next kernel entry), when the last of them leaves
    /// ([`Kernel::reap_lingering`]): its page tables must outlive every CPU using them.
    fn last_thread_gone(&mut self, task_id: TaskId) {
        self.end_task(task_id, Ending::Exit(0));
        if self
            .threads
            .iter()
            .any(|(_, t)| t.ctx.task == Some(task_id))
        {
            if self.tasks.get(&task_id).is_some_and(|t| !t.lingering) {
                // Everything but its memory goes now: its ports die at once.
                self.release_task(task_id);
                if let Some(task) = self.tasks.get_mut(&task_id) {
                    task.lingering = true;
                    LINGERING.fetch_add(1, Ordering::Relaxed);
                }
            }
            return;
        }
        self.remove_task(task_id);
    }

    /// Removes the lingering tasks (see [`Kernel::last_thread_gone`]) that no thread runs
    /// in any more. Called where a migrated thread is unwound out of a task (its caller's
    /// call fails), and at every timer tick for a thread that left by an ordinary return:
    /// a lingering task's memory is freed at most one tick after its last visitor left.
    /// One relaxed load while no task lingers.
    #[inline(always)]
    pub fn reap_lingering(&mut self) {
        if LINGERING.load(Ordering::Relaxed) != 0 {
            self.reap_lingering_slow();
        }
    }

    /// [`Kernel::reap_lingering`] when some task lingers.
    #[cold]
    #[inline(never)]
    fn reap_lingering_slow(&mut self) {
        // Allocates nothing (it ends tasks): one task found and removed at a time.
        loop {
            let Some(id) = self
                .tasks
                .iter()
                .filter(|(_, t)| t.lingering)
                .map(|(id, _)| id)
                .find(|&id| !self.threads.iter().any(|(_, t)| t.ctx.task == Some(id)))
            else {
                return;
            };
            self.remove_task(id);
        }
    }

    /// Removes task `task_id`, whose last thread is gone (and no floor call is in its
    /// address space, and no thread of another task runs in it): reports its exit, releases
    /// its rights and frees its memory. A lingering task did all but the last when its last
    /// thread went (`Kernel::last_thread_gone`): it is not reported or released again.
    pub fn remove_task(&mut self, task_id: TaskId) {
        if self.tasks.get(&task_id).is_some_and(|t| t.lingering) {
            let _ = LINGERING.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(1))
            });
        } else {
            self.release_task(task_id);
        }
        // The map goes first, while the space is still the task's (the virtual-memory
        // family reads what its translations say was written).
        if self.tasks.get(&task_id).is_some() {
            (family::hooks().space_freed)(self, task_id);
        }
        if let Some(task) = self.tasks.remove(&task_id) {
            task.account
                .give(kern::quota::Resource::Frames, task.frames);
            task.account
                .give(kern::quota::Resource::Heap, task.acts_charged);
            let mut mem = self.mem();
            task.space.destroy(&mut mem);
        }
    }

    /// Reports task `task_id`'s exit and releases everything it holds but its memory: its
    /// exception port, task port, rights (its ports die: holders see dead names) and the
    /// activations attached to its ports.
    fn release_task(&mut self, task_id: TaskId) {
        let Some(task) = self.tasks.get_mut(&task_id) else {
            return;
        };
        let (exc, kport) = (task.exc_port.take(), task.kport.take());
        if let Some(Ending::Exit(code)) = task.ending.or(Some(Ending::Exit(0))) {
            let name = core::mem::take(&mut task.name);
            self.close_line();
            crate::klog::task_ending(self);
            kprintln!("[kernel] task {task_id} ({name}) exited with code {code}");
            if let Some(task) = self.tasks.get_mut(&task_id) {
                task.name = name;
            }
        }
        if self.open_line == Some(task_id) {
            self.close_line();
        }
        (family::hooks().task_released)(self, task_id, exc, kport);
    }

    /// Creates the name server task from boot module `name`: its first thread starts with
    /// `rsi` = its name for the receive right of a new port (the name service port), which
    /// is returned so that the boot programs started after it get send rights to it.
    pub fn spawn_name_server(
        &mut self,
        name: &str,
    ) -> Result<(TaskId, kern::ipc::PortId), baton_abi::Error> {
        use baton_abi::Error;
        let id = self.spawn_with(
            name,
            None,
            crate::quota::task_account(crate::quota::root(), 0, 0)?,
        )?;
        let task = self.tasks.get_mut(&id).ok_or(Error::InvalidArgument)?;
        let made = self
            .ipc
            .allocate(&mut task.names, id, 0)
            .and_then(|n| Ok((n, self.ipc.receive_port(&task.names, n)?)));
        let (rcv_name, port) = match made {
            Ok(v) => v,
            Err(e) => {
                self.end_task(id, Ending::Killed);
                return Err(e);
            }
        };
        for (_, th) in self.threads.iter_mut() {
            if th.ctx.task == Some(id) {
                th.ctx.frame.rsi = rcv_name;
            }
        }
        Ok((id, port))
    }

    /// Gives boot task `id` (marked privileged on the command line) a send right to the
    /// host-privilege port, whose name its first thread finds in `rdx`.
    fn give_host_priv(&mut self, id: TaskId) {
        match (family::hooks().grant_host_priv)(self, id) {
            Ok(name) => {
                for (_, th) in self.threads.iter_mut() {
                    if th.ctx.task == Some(id) {
                        th.ctx.frame.rdx = name;
                    }
                }
            }
            Err(e) => kprintln!("[kernel] task {id}: no host-privilege right: {}", e.name()),
        }
    }

    /// Creates a task running boot module `name`, with one ready thread, which starts with
    /// `rsi` = its name for a send right to `bootstrap` (0 without one).
    pub fn spawn_with(
        &mut self,
        name: &str,
        bootstrap: Option<kern::ipc::PortId>,
        account: kern::quota::AccountRef,
    ) -> Result<TaskId, baton_abi::Error> {
        self.spawn_started(name, bootstrap, account, None)
    }

    /// [`Kernel::spawn_with`], handing the new task `start` (start-message data,
    /// `baton_abi::start`, checked by the caller) on a start port made in it, whose name its
    /// first thread finds in `rcx`: the message is charged to the new task's account.
    ///
    /// The steps are Accent's, the same the task-creation calls take one at a time
    /// (`docs/vm.md`, "Task creation"): an empty task ([`Kernel::create_task`]), its
    /// program mapped copy-on-write from the boot image (the `map_program` hook), its
    /// thread, and its start.
    pub fn spawn_started(
        &mut self,
        name: &str,
        bootstrap: Option<kern::ipc::PortId>,
        account: kern::quota::AccountRef,
        start: Option<Vec<u8>>,
    ) -> Result<TaskId, baton_abi::Error> {
        use baton_abi::Error;
        let module = self
            .modules
            .iter()
            .position(|m| m.name == name)
            .ok_or(Error::NotFound)?;
        let id = self.create_task(name, account)?;
        let made = (family::hooks().map_program)(self, id, module).and_then(|entry| {
            let mut frame = TrapFrame::new_user(entry, baton_abi::layout::USER_STACK_TOP, id);
            if let (Some(port), Some(task)) = (bootstrap, self.tasks.get_mut(&id)) {
                frame.rsi = self.ipc.grant_send(&mut task.names, port).unwrap_or(0);
            }
            if let Some(data) = start {
                frame.rcx = self.start_message(id, data)?;
            }
            self.create_thread(id, frame, PRIORITY_DEFAULT as u8)
        });
        if let Err(e) = made {
            self.destroy_unmade(id);
            return Err(e);
        }
        Ok(id)
    }

    /// Creates an empty task called `name`, charged to `account`: an address space with
    /// only the kernel's half, an empty address map (the `space_made` hook), an empty name
    /// space, no thread. It ends as any task does once it has had a thread, and before
    /// that only when it is ended ([`Kernel::end_task`]) or, failing half made,
    /// [`Kernel::destroy_unmade`].
    pub fn create_task(
        &mut self,
        name: &str,
        account: kern::quota::AccountRef,
    ) -> Result<TaskId, baton_abi::Error> {
        use baton_abi::Error;
        use kern::quota::Resource;
        let charge = crate::quota::heap(&account, crate::quota::TASK_BYTES)?;
        let mut task_name = String::new();
        task_name
            .try_reserve_exact(name.len())
            .map_err(|_| Error::NoMemory)?;
        task_name.push_str(name);
        let kernel_root = self.kernel_root;
        let free_before = self.frames.free_frames();
        let mut mem = self.mem();
        let space = AddressSpace::new(&mut mem, Some(kernel_root)).map_err(|_| Error::NoMemory)?;
        // Its root table, charged to it until its space goes.
        let frames = free_before.saturating_sub(self.frames.free_frames()) as u64;
        if let Err(e) = account.take(Resource::Frames, frames) {
            space.destroy(&mut self.mem());
            return Err(e);
        }
        let id = self.next_task;
        self.next_task += 1;
        let inserted = self.tasks.insert(
            id,
            Task {
                name: task_name,
                space,
                pcid: (id % (PCIDS as u64 - 1) + 1) as u16,
                threads: 0,
                ending: None,
                names: kern::ipc::Space::with_id(id),
                exc_port: None,
                kport: None,
                creator: None,
                log_bucket: crate::klog::task_bucket(apic::now_ns()),
                lingering: false,
                account,
                frames,
                charge: Some(charge),
                acts_charged: 0,
            },
        );
        if let Err(task) = inserted {
            task.account.give(Resource::Frames, task.frames);
            task.space.destroy(&mut self.mem());
            return Err(Error::NoMemory);
        }
        // The new space holds no slot yet, so this charges nothing and cannot fail.
        if let Some(task) = self.tasks.get_mut(&id) {
            let _ = task.names.set_account(task.account.clone());
        }
        // Its address map (the virtual-memory family).
        if let Err(e) = (family::hooks().space_made)(self, id) {
            self.destroy_unmade(id);
            return Err(e);
        }
        Ok(id)
    }

    /// Removes task `id`, which has never had a thread (its making failed half way), with
    /// its map, rights and space, unreported. Its task port, if one was made, is the
    /// caller's to destroy first.
    pub fn destroy_unmade(&mut self, id: TaskId) {
        use kern::quota::Resource;
        (family::hooks().space_freed)(self, id);
        if let Some(mut task) = self.tasks.remove(&id) {
            (family::hooks().names_released)(self, &mut task.names);
            task.account.give(Resource::Frames, task.frames);
            let mut mem = self.mem();
            task.space.destroy(&mut mem);
        }
    }

    /// Makes the start port of the new task `id` (a receive right in its name space) and
    /// queues on it the start message carrying `data` (`baton_abi::start`), charged to the
    /// task's account; returns the port's name. Nothing can wait on the new port, so the
    /// message wakes nobody.
    pub fn start_message(&mut self, id: TaskId, data: Vec<u8>) -> Result<u64, baton_abi::Error> {
        let task = self
            .tasks
            .get_mut(&id)
            .ok_or(baton_abi::Error::InvalidArgument)?;
        let charge = crate::quota::heap(&task.account, crate::quota::MESSAGE_BYTES + data.len())?;
        let name = self.ipc.allocate(&mut task.names, id, 0)?;
        let port = self.ipc.receive_port(&task.names, name)?;
        // Room for the message first: the queue must not grow while it is queued.
        self.ipc
            .port_mut(port)
            .ok_or(baton_abi::Error::InvalidArgument)?
            .reserve_queue(1)?;
        let msg = kern::ipc::Message {
            id: baton_abi::start::START_MESSAGE,
            reply: None,
            rights: Vec::new(),
            data,
            charge: Some(charge),
            word: None,
            ool: Vec::new(),
        };
        let mut fx = kern::ipc::Effects::default();
        self.ipc.enqueue(port, msg, &mut fx);
        Ok(name)
    }

    /// Creates a ready thread in `task`.
    pub fn create_thread(
        &mut self,
        task: TaskId,
        frame: TrapFrame,
        priority: u8,
    ) -> Result<ThreadId, baton_abi::Error> {
        self.create_thread_in_state(task, frame, priority, true)
    }

    /// Creates a thread in `task`: ready with `ready`, else blocked as
    /// [`Blocked::Unstarted`] until [`Kernel::unblock`] makes it ready (a task being made).
    pub fn create_thread_in_state(
        &mut self,
        task: TaskId,
        frame: TrapFrame,
        priority: u8,
        ready: bool,
    ) -> Result<ThreadId, baton_abi::Error> {
        let key = self.tasks.key_of(task).ok_or(baton_abi::Error::NotFound)?;
        let t = self
            .tasks
            .get_mut(&task)
            .ok_or(baton_abi::Error::NotFound)?;
        let space = (t.space.root(), t.pcid);
        let charge = crate::quota::heap(&t.account, crate::quota::THREAD_BYTES)?;
        let cpu = self.next_cpu % self.cpus.len().max(1);
        let ctx = || crate::thread::Context::user((task, key), space, frame);
        let mut thread = Thread::new_user(ctx, priority, cpu).ok_or(baton_abi::Error::NoMemory)?;
        thread.charge = Some(charge);
        thread::reserve_ready(self, priority)?;
        let Ok(id) = self.threads.insert(thread) else {
            thread::release_ready(self, priority);
            return Err(baton_abi::Error::NoMemory);
        };
        let Some(t) = self.tasks.get_mut(&task) else {
            return Err(baton_abi::Error::NotFound);
        };
        if let Some(th) = self.threads.get_mut(id) {
            th.id = id;
        }
        t.threads += 1;
        self.next_cpu = self.next_cpu.wrapping_add(1);
        self.stats.threads_created += 1;
        self.stats.threads = self.threads.len().saturating_sub(self.cpus.len()) as u64;
        if ready {
            thread::thread_setrun(self, id);
        } else if let Some(th) = self.threads.get_mut(id) {
            th.state = ThreadState::Blocked(Blocked::Unstarted);
        }
        Ok(id)
    }

    /// Makes a blocked thread ready again, cancelling its timeout.
    pub fn unblock(&mut self, t: ThreadId) {
        let Some(th) = self.threads.get_mut(t) else {
            return;
        };
        if let Some(timer) = th.timer.take() {
            self.timers.cancel(timer);
        }
        thread::thread_setrun(self, t);
    }

    /// Wakes every thread whose timeout has passed.
    pub fn expire_timers(&mut self) {
        self.reap_lingering();
        let now = self.now();
        while let Some((key, t)) = self.timers.pop_expired_key(now) {
            let Some(th) = self.threads.get_mut(t) else {
                continue;
            };
            // Only the timer the thread holds wakes it: an entry it no longer names (lost
            // track of without being cancelled) would time out a later wait and leave the
            // real timer behind.
            if th.timer != Some(key) {
                crate::thread::stale_timer(t);
                continue;
            }
            th.timer = None;
            match th.state {
                ThreadState::Blocked(Blocked::Sleep) => {
                    th.ctx.frame.rax = 0;
                    th.cont = Some(Continuation::new(Resume::UserReturn));
                }
                ThreadState::Blocked(Blocked::Wait { key }) => {
                    th.ctx.frame.rax = baton_abi::Error::TimedOut.to_raw();
                    th.cont = Some(Continuation::new(Resume::UserReturn));
                    self.waits.remove(key, t);
                }
                ThreadState::Blocked(Blocked::ProcessModel) => {}
                // A fault (or a call's step) waiting for memory (`pageout::wait_memory`), the
                // one page-in wait with a timeout: it goes on at the continuation it blocked
                // with (a fault is taken again from user mode, registers untouched).
                ThreadState::Blocked(why @ Blocked::PageIn { .. }) => {
                    if th.cont.is_none() {
                        th.cont = Some(Continuation::new(Resume::UserReturn));
                    }
                    (family::hooks().forget_waiter)(self, t, why);
                }
                ThreadState::Blocked(why @ (Blocked::Receive { .. } | Blocked::Send { .. })) => {
                    th.ctx.frame.rax = baton_abi::Error::TimedOut.to_raw();
                    th.cont = Some(Continuation::new(Resume::UserReturn));
                    (family::hooks().forget_waiter)(self, t, why);
                }
                _ => continue,
            }
            thread::thread_setrun(self, t);
        }
    }

    /// Ends task `id`: every thread stops (those running on other CPUs at their next
    /// entry). The current thread, if it belongs to the task, is left to the caller.
    pub fn end_task(&mut self, id: TaskId, how: Ending) {
        match self.tasks.get_mut(&id) {
            Some(task) if task.ending.is_none() => task.ending = Some(how),
            _ => return,
        }
        // No call migrates into the task any more, and its activations' ports die; so does
        // its task port at once (a thread of it running on another CPU ends only at its
        // next kernel entry, and the task goes with its last thread: who terminated it
        // must already see a dead name).
        let kport = self.tasks.get_mut(&id).and_then(|t| t.kport.take());
        (family::hooks().task_ending)(self, id, kport);
        // The threads are listed in the kept thread list (room for every thread, made
        // with the run queues': `thread::reserve_ready`), so ending a task allocates
        // nothing here.
        let mut list = core::mem::take(&mut self.thread_list);
        list.clear();
        list.extend(
            self.threads
                .iter()
                .filter(|(_, t)| t.ctx.task == Some(id))
                .map(|(tid, _)| tid),
        );
        for &tid in list.iter() {
            self.kill_thread(tid);
        }
        // Its threads that are deep in servers: their home activations end now, the parts
        // in the servers go on with an alert (seed 001's split).
        list.clear();
        list.extend(
            self.threads
                .iter()
                .filter(|(_, t)| t.ctx.task != Some(id) && t.home_task() == Some(id))
                .map(|(tid, _)| tid),
        );
        for &tid in list.iter() {
            (family::hooks().home_ending)(self, tid);
        }
        list.clear();
        if list.capacity() > self.thread_list.capacity() {
            self.thread_list = list;
        }
        // A task that never had a thread (one being made) has no last thread to end it:
        // it goes now.
        if self.tasks.get(&id).is_some_and(|t| t.threads == 0)
            && !self.threads.iter().any(|(_, t)| t.ctx.task == Some(id))
        {
            self.remove_task(id);
        }
    }

    /// Ends thread `t`, unless it is the running thread of this CPU (whose caller ends it
    /// with `thread_terminate_current`): at once when it is ready or blocked, at its next
    /// kernel exit when it runs on another CPU.
    pub fn kill_thread(&mut self, tid: ThreadId) {
        let Some(th) = self.threads.get_mut(tid) else {
            return;
        };
        // A thread that migrated into the ending activation goes back to its caller.
        if !th.below.is_empty() {
            match th.state {
                ThreadState::Ready => {
                    (family::hooks().unwind_other)(self, tid);
                    return;
                }
                ThreadState::Blocked(b) => {
                    self.forget_blocked(tid, b);
                    if (family::hooks().unwind_other)(self, tid) {
                        self.unblock(tid);
                    }
                    return;
                }
                _ => {}
            }
        }
        let Some(th) = self.threads.get_mut(tid) else {
            return;
        };
        match th.state {
            ThreadState::Running { cpu } => {
                if cpu != gdt::this_cpu() {
                    th.kill_pending = true;
                    poke_cpu(self, cpu, u8::MAX);
                }
            }
            ThreadState::Ready => self.halt_and_reap(tid),
            ThreadState::Blocked(b) => {
                th.state = ThreadState::Halted;
                self.forget_blocked(tid, b);
                self.reap_thread(tid);
            }
            ThreadState::Halted | ThreadState::Idle => {}
        }
    }

    /// Ends thread `t`, which is not running (ready, or blocked and already taken off what
    /// it waited in), and frees it: a ready thread leaves its run queue first, since a
    /// thread is in a run queue exactly while it is ready (a reaped thread left there is
    /// picked later and found gone).
    pub fn halt_and_reap(&mut self, t: ThreadId) {
        let Some(th) = self.threads.get_mut(t) else {
            return;
        };
        if let ThreadState::Running { cpu } = th.state {
            // Not reachable (callers hold threads that do not run); ending it at its next
            // kernel entry is the safe answer.
            th.kill_pending = true;
            poke_cpu(self, cpu, u8::MAX);
            return;
        }
        let was = core::mem::replace(&mut th.state, ThreadState::Halted);
        if was == ThreadState::Ready {
            let (cpu, prio) = (th.cpu, th.priority);
            if let Some(c) = self.cpus.get_mut(cpu) {
                c.runq.remove(t, prio);
            }
        }
        self.reap_thread(t);
    }

    /// Takes thread `t` off whatever it waits in as `b` (not its timer).
    pub fn forget_blocked(&mut self, t: ThreadId, b: Blocked) {
        match b {
            Blocked::Wait { key } => {
                self.waits.remove(key, t);
            }
            _ => (family::hooks().forget_waiter)(self, t, b),
        }
    }

    /// Reports something about the current thread's task.
    pub fn report(&mut self, what: core::fmt::Arguments<'_>) {
        self.close_line();
        let (id, name) = self.current_task_name();
        kprintln!("[kernel] task {id} ({name}) {what}");
    }

    fn current_task_name(&self) -> (TaskId, &str) {
        let cur = self.cpu(gdt::this_cpu()).current;
        let id = self.threads.get(cur).and_then(|t| t.ctx.task).unwrap_or(0);
        let name = self.tasks.get(&id).map(|t| t.name.as_str()).unwrap_or("?");
        (id, name)
    }

    /// The current thread's task id.
    pub fn current_task(&self) -> Option<TaskId> {
        let cur = self.cpu(gdt::this_cpu()).current;
        self.threads.get(cur).and_then(|t| t.ctx.task)
    }

    /// The current thread's id.
    pub fn current_thread(&self) -> ThreadId {
        self.cpu(gdt::this_cpu()).current
    }

    /// Ends a user line left open, so kernel lines start at the left margin.
    pub fn close_line(&mut self) {
        if self.open_line.take().is_some() {
            serial::CONSOLE.lock().write_bytes(b"\n");
        }
    }

    /// Writes user output, each line prefixed with `<task name>#<task id>| `.
    pub fn console_write(&mut self, id: TaskId, bytes: &[u8]) {
        if self.open_line.is_some_and(|o| o != id) {
            self.close_line();
        }
        let name = self.tasks.get(&id).map(|t| t.name.as_str()).unwrap_or("?");
        let mut out = serial::CONSOLE.lock();
        let mut open = self.open_line == Some(id);
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            if !open {
                let _ = write!(out, "{name}#{id}| ");
            }
            out.write_bytes(piece);
            open = piece.last() != Some(&b'\n');
        }
        self.open_line = if open { Some(id) } else { None };
    }

    /// Fills the counters that are derived on demand.
    pub fn snapshot_stats(&mut self) -> Stats {
        let now = self.now();
        let mut s = self.stats;
        let fast = self.fast_transfers;
        s.ipc_fast += fast;
        s.recognitions += fast;
        s.blocks_ipc += fast;
        s.stack_handoffs += fast;
        s.cpus = self.cpus.len() as u64;
        s.stacks_in_use = self.stacks_in_use.current();
        s.stacks_max = self.stacks_in_use.max();
        s.stacks_mean_milli = self.stacks_in_use.mean_milli(now);
        s.stack_bytes = crate::arch::stack::STACK_SIZE;
        // The thread object (its first context, register frame included, is stored in
        // it: `thread::ContextBox`) and its slab slot (a generation and the box pointer).
        s.thread_bytes = (core::mem::size_of::<Thread>() + 16) as u64;
        s.heap_used = crate::heap::heap_used() as u64;
        s.ports = self.ipc.ports() as u64;
        s.messages_queued = self.ipc.queued() as u64;
        s.names = self.tasks.values().map(|t| t.names.len() as u64).sum();
        let root = crate::quota::root();
        use kern::quota::Resource;
        s.kmem_charged = root.used(Resource::Heap);
        s.kmem_limit = root.limit(Resource::Heap);
        s.frames_charged = root.used(Resource::Frames);
        s.frames_limit = root.limit(Resource::Frames);
        s
    }
}

/// Makes thread `t` (`th`, which holds a stack) the running thread of CPU `cpu` (`c`):
/// loads its address space unless it is loaded, points user entries at its kernel stack
/// and its saved user registers.
#[inline(always)]
pub fn switch_in(c: &mut Cpu, kernel_root: PhysAddr, cpu: usize, t: ThreadId, th: &mut Thread) {
    th.state = ThreadState::Running { cpu };
    if !th.pinned {
        th.cpu = cpu;
    }
    c.current = t;
    load_space(c, kernel_root, th);
    if let Some(stack) = &th.stack {
        gdt::set_kernel_stack(stack.top());
    }
    crate::fpu::switch(c, th);
    gdt::set_user_frame(
        core::ptr::addr_of!(th.ctx.frame) as u64,
        core::ptr::addr_of!(*th) as u64,
    );
}

/// [`switch_in`] for a stack handoff (the RPC fast path): `th` takes over the kernel stack
/// this CPU is running on, so the CPU's stack pointers stay as they are; and `th` may run
/// on `cpu` (unpinned, or pinned to it), so its CPU is simply `cpu`.
#[inline(always)]
pub fn switch_in_handoff(
    c: &mut Cpu,
    kernel_root: PhysAddr,
    cpu: usize,
    t: ThreadId,
    th: &mut Thread,
) {
    th.state = ThreadState::Running { cpu };
    th.cpu = cpu;
    c.current = t;
    load_space(c, kernel_root, th);
    crate::fpu::switch(c, th);
    gdt::set_user_frame(
        core::ptr::addr_of!(th.ctx.frame) as u64,
        core::ptr::addr_of!(*th) as u64,
    );
}

/// The running thread `th` of CPU `c` changed activation (a migrating call or return):
/// loads the address space and registers of its new running activation. Its state, CPU and
/// kernel stack stay as they are.
#[inline(always)]
pub fn switch_activation(c: &mut Cpu, kernel_root: PhysAddr, th: &mut Thread) {
    load_space(c, kernel_root, th);
    crate::fpu::activation_changed(c);
    gdt::set_user_frame(
        core::ptr::addr_of!(th.ctx.frame) as u64,
        core::ptr::addr_of!(*th) as u64,
    );
}

/// Loads the address space of `th`'s running activation on CPU `c` (nothing when it is
/// loaded already), keeping the TLB entries of its PCID when this CPU last used that PCID
/// for the same task.
#[inline(always)]
fn load_space(c: &mut Cpu, kernel_root: PhysAddr, th: &Thread) {
    let root = th.ctx.space.map_or(kernel_root, |(root, _)| root);
    if root != c.loaded_root {
        match (th.ctx.task, th.ctx.space) {
            (Some(id), Some((root, pcid))) => {
                let slot = usize::from(pcid);
                let keep = c.pcid_owner.get(slot) == Some(&id);
                // SAFETY: the root belongs to a live task (the thread is alive, so its task
                // is) whose kernel half is the kernel's.
                unsafe { cpu::switch_space(root.0, pcid, keep) };
                if let Some(owner) = c.pcid_owner.get_mut(slot) {
                    *owner = id;
                }
            }
            // SAFETY: the kernel root maps the kernel.
            _ => unsafe { cpu::switch_space(kernel_root.0, 0, true) },
        }
        c.loaded_root = root;
    }
}

/// Makes sure `cpu` notices new work of priority `prio`: an IPI if it is another CPU that
/// is halted or runs something less urgent.
pub fn poke_cpu(k: &mut Kernel, cpu: usize, prio: u8) {
    if cpu == gdt::this_cpu() {
        return;
    }
    let Some(c) = k.cpus.get(cpu) else {
        return;
    };
    let running = k.threads.get(c.current).map(|t| t.priority).unwrap_or(0);
    if c.halted || prio > running || c.current == c.idle {
        crate::arch::smp::wake_cpu(cpu);
    }
}

/// Sets up the kernel state on the boot CPU, starts the boot tasks and runs them.
pub fn start(
    frames: FrameAllocator,
    kernel_root: PhysAddr,
    initrd: &'static [u8],
    config: BootConfig,
    boot_stack: KernelStack,
    cpus: usize,
) -> ! {
    let modules = match kern::initrd::parse(initrd) {
        Ok(list) => list
            .into_iter()
            .map(|m| {
                let test = m.name.starts_with(TESTS_DIR);
                Module {
                    name: String::from(m.name.strip_prefix(TESTS_DIR).unwrap_or(&m.name)),
                    data: m.data,
                    test,
                }
            })
            .collect(),
        Err(e) => {
            kprintln!("[kernel] initrd unreadable: {e:?}");
            Vec::new()
        }
    };
    let now = apic::now_ns();
    let k = Kernel {
        frames,
        kernel_root,
        tasks: IdSlab::new(),
        threads: Slab::new(),
        cpus: Vec::new(),
        timers: TimerQueue::new(),
        waits: WaitQueues::new(),
        ipc: kern::ipc::Ipc::new(),
        acts: kern::activation::Activations::new(),
        host_priv: None,
        devices: kern::device::Devices::new(),
        act_ports: Vec::new(),
        stacks: StackPool::new(),
        stacks_in_use: Gauge::new(now),
        stats: Stats::default(),
        fast_transfers: 0,
        modules,
        shutdown_when_idle: config.shutdown_when_idle,
        floor: kern::floor::Xas::default(),
        threads_at: [0; 64],
        wake_list: Vec::new(),
        thread_list: Vec::new(),
        next_task: 1,
        next_cpu: 0,
        open_line: None,
        log: crate::klog::Log::new(now),
    };
    lock();
    // SAFETY: the lock is held and nothing else has touched the cell yet.
    unsafe { *KERNEL.0.get() = Some(k) };
    // SAFETY: the lock is held.
    let k = unsafe { kernel() };
    // Every wait-queue bucket's first ring now, so that the heap the queues hold does not
    // depend on which waits happened to block (`kern::waitq`). A heap too small for it
    // boots all the same, its buckets then grown on first use.
    if k.waits.reserve_each(kern::waitq::BOOT_ROOM).is_err() {
        kprintln!("[kernel] no room for the wait queues' buckets: they grow on first use");
    }
    for c in 0..cpus {
        add_cpu(k, c);
    }
    // The boot CPU's idle thread runs on the boot stack.
    let idle0 = k.cpu(0).idle;
    if let Some(t) = k.threads.get_mut(idle0) {
        t.stack = Some(boot_stack);
    }
    k.stacks_in_use.inc(apic::now_ns());
    let tests = k.modules.iter().filter(|m| m.test).count();
    kprintln!(
        "[kernel] {} boot modules: {} programs, {tests} test programs",
        k.modules.len(),
        k.modules.len() - tests
    );
    // Tracing starts before the first task, so its first system call is recorded.
    // (Its failure is printed; the boot goes on untraced.)
    let _ = crate::trace::start(k.cpus.len(), config.trace, None);
    for word in &config.unknown {
        kprintln!("[kernel] ignoring unknown command-line word `{word}`");
    }
    // `init=names,...`: the name server starts first, and every later boot program gets a
    // send right to its port as its bootstrap right.
    let mut names_port = None;
    for (i, name) in config.init.iter().enumerate() {
        let started = if i == 0 && name == NAME_SERVER {
            k.spawn_name_server(name).map(|(id, port)| {
                names_port = Some(port);
                id
            })
        } else {
            crate::quota::task_account(crate::quota::root(), 0, 0)
                .and_then(|account| k.spawn_with(name, names_port, account))
        };
        if let Ok(id) = started {
            if config.privileged.iter().any(|p| p == name) {
                k.give_host_priv(id);
            }
        }
        match started {
            Ok(id) => kprintln!("[kernel] task {id} ({name}) started"),
            Err(e) => kprintln!("[kernel] cannot start {name}: {}", e.name()),
        }
    }
    kprintln!(
        "[kernel] boot done after {} us ({} TSC ticks since reset)",
        apic::now_ns() / 1000,
        cpu::rdtsc()
    );
    crate::heap::boot_done();
    if config.crash {
        kprintln!("[kernel] crashing on purpose (crash=kernel-page-fault)");
        let v: u64;
        // SAFETY: deliberately loads from an unmapped address (nothing is mapped in the user
        // half of the kernel's tables); the page-fault handler reports it and stops the
        // machine, so no Rust value is ever formed from the access.
        unsafe {
            core::arch::asm!("mov {}, [{}]", out(reg) v, in(reg) 0xdead_0000u64, options(nostack, readonly));
        }
        kprintln!("[kernel] unexpectedly read {v:#x}");
    }
    unlock();
    crate::arch::smp::release_aps();
    lock();
    idle_loop()
}

/// Registers CPU `c` with its idle thread (running, on a stack set by the caller).
fn add_cpu(k: &mut Kernel, c: usize) {
    let Ok(idle) = k.threads.insert(Thread::new_idle(c, None)) else {
        panic!("no room for the idle thread of CPU {c}");
    };
    if let Some(th) = k.threads.get_mut(idle) {
        th.id = idle;
    }
    k.cpus.push(Cpu {
        current: idle,
        idle,
        runq: RunQueue::new(),
        loaded_root: k.kernel_root,
        pcid_owner: alloc::vec![0; PCIDS],
        halted: false,
        halt_since: 0,
        since: cpu::rdtsc(),
        exc_reply_hint: false,
        fpu_live: core::ptr::null_mut(),
    });
}

/// Entry of an application processor once it is in long mode on `stack`, lock not held.
pub fn ap_start(cpu: usize, stack: KernelStack) -> ! {
    lock();
    // SAFETY: the lock is held.
    let k = unsafe { kernel() };
    let idle = k.cpu(cpu).idle;
    if let Some(t) = k.threads.get_mut(idle) {
        t.stack = Some(stack);
    }
    k.stacks_in_use.inc(apic::now_ns());
    idle_loop()
}

/// TSC ticks the CPUs have spent halted in [`idle_loop`] and woken from since boot (the
/// interrupt that woke each one included); [`halted_ticks`] adds the halts in progress.
/// Changed only under the kernel lock, with the CPU's `halted`.
static HALTED_TICKS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// TSC ticks all CPUs together have spent halted since boot, the halts in progress
/// included (read under the kernel lock, so that a CPU waking meanwhile is counted once).
/// Under QEMU's `-icount` the TSC counts instructions, and while every CPU halts QEMU
/// jumps it forward to the next timer deadline: a benchmark window minus the halted ticks
/// is the instructions executed (`Sys::HaltedTicks`, `docs/benchmarks.md`).
pub fn halted_ticks(k: &Kernel) -> u64 {
    let now = crate::arch::cpu::rdtsc();
    k.cpus.iter().filter(|c| c.halted).fold(
        HALTED_TICKS.load(core::sync::atomic::Ordering::Relaxed),
        |sum, c| sum.wrapping_add(now.saturating_sub(c.halt_since)),
    )
}

/// At shutdown, every task gone: whatever the tasks made the kernel keep must be gone too.
/// Each port still alive (but the host-privilege port, which lives as long as the kernel),
/// each activation and each thread but the CPUs' idle ones is a leak, reported on a
/// `KERNEL LEAK` line, which fails any test (`cargo xtask test` and `fuzz` forbid it).
fn report_leaks(k: &Kernel) {
    for (id, port) in k.ipc.iter_ports() {
        if Some(id) != k.host_priv {
            kprintln!("[kernel] KERNEL LEAK: port {id:?} alive after every task ended: {port:?}");
        }
    }
    let threads = k
        .threads
        .iter()
        .filter(|(_, t)| t.ctx.task.is_some())
        .count();
    if threads != 0 || !k.acts.is_empty() {
        kprintln!(
            "[kernel] KERNEL LEAK: {threads} threads and {} activations alive after every task ended",
            k.acts.len()
        );
    }
}

/// The idle thread's loop (its continuation): run ready work, else halt until an
/// interrupt. Entered with the lock held.
pub fn idle_loop() -> ! {
    loop {
        // SAFETY: the lock is held at the top of every iteration.
        let k = unsafe { kernel() };
        let cpu = gdt::this_cpu();
        if k.cpu(cpu).runq.is_empty() {
            steal_work(k, cpu);
        }
        if !k.cpu(cpu).runq.is_empty() {
            let idle = k.cpu(cpu).idle;
            if let Some(t) = k.threads.get_mut(idle) {
                t.state = ThreadState::Idle;
            }
            thread::thread_block(k, Some(Continuation::new(Resume::Idle)));
            continue;
        }
        // Deferred work of the families (asynchronous extension handlers), then look again.
        if (crate::family::hooks().idle_work)(k) {
            continue;
        }
        // A traced entry that ends with the CPU going idle ends here.
        crate::trace::exit(k, true);
        if k.tasks.is_empty() && k.shutdown_when_idle && cpu == 0 {
            k.close_line();
            let _ = crate::trace::dump();
            kprintln!("[kernel] all tasks finished; shutting down");
            report_leaks(k);
            crate::heap::report_fault_injection();
            cpu::qemu_exit(cpu::EXIT_SUCCESS);
        }
        k.cpu_mut(cpu).halted = true;
        k.cpu_mut(cpu).halt_since = crate::arch::cpu::rdtsc();
        unlock();
        crate::arch::wait_for_interrupt();
        lock();
        // SAFETY: the lock is held again.
        let k = unsafe { kernel() };
        let since = k.cpu(cpu).halt_since;
        HALTED_TICKS.fetch_add(
            crate::arch::cpu::rdtsc().saturating_sub(since),
            core::sync::atomic::Ordering::Relaxed,
        );
        k.cpu_mut(cpu).halted = false;
    }
}

/// Moves one ready thread from the busiest other CPU to `cpu`: the next one that CPU would
/// run, unless it is pinned there (then nothing moves).
fn steal_work(k: &mut Kernel, cpu: usize) {
    let busiest = (0..k.cpus.len())
        .filter(|&c| c != cpu)
        .max_by_key(|&c| k.cpus.get(c).map(|x| x.runq.len()).unwrap_or(0));
    let Some(from) = busiest else {
        return;
    };
    let Some((t, prio)) = k.cpus.get_mut(from).and_then(|c| c.runq.pop()) else {
        return;
    };
    let target = match k.threads.get_mut(t) {
        Some(th) if !th.pinned => {
            th.cpu = cpu;
            cpu
        }
        _ => from,
    };
    if target == from {
        k.cpu_mut(from).runq.push_front(t, prio);
    } else {
        k.cpu_mut(cpu).runq.push(t, prio);
    }
}

/// Leaves the kernel to user mode with the running thread's saved registers, releasing
/// the lock (`thread_exception_return` / `thread_syscall_return`). Inlined: every system
/// call leaves through it.
#[inline(always)]
pub fn leave_to_user() -> ! {
    if STOPS_PENDING.load(Ordering::Relaxed) > 0 {
        before_user();
    }
    unlock();
    trap::resume_current()
}

/// [`leave_to_user`] while `STOPS_PENDING` is not 0: an APC, where a thread stops when its
/// activation is suspended, and the end of a traced entry (tracing keeps `STOPS_PENDING`
/// above 0). Out of line, so the way out stays a load and a branch.
#[cold]
#[inline(never)]
fn before_user() {
    // SAFETY: every caller holds the lock (`leave_to_user`'s do).
    let k = unsafe { kernel() };
    (family::hooks().before_user)(k);
    crate::trace::exit(k, false);
}

/// The interrupt and exception stubs' call into the kernel (`arch::trap`'s assembly).
#[no_mangle]
extern "C" fn trap_dispatch(frame: *mut TrapFrame) {
    on_trap(frame);
}

/// Entry for every interrupt and exception. `frame` is where the CPU and the stub pushed
/// it: on the kernel stack for an entry from kernel mode, and the running thread's own
/// frame for one from user mode (`arch::trap`). The latter is then reached only through
/// the thread (the kernel's paths read and write it there), never through `frame`.
pub fn on_trap(frame: *mut TrapFrame) {
    // SAFETY: the entry passes the frame it has just pushed, valid and aligned; it is read
    // here, by value, before anything else refers to it.
    let (vector, error, user) = unsafe { ((*frame).vector, (*frame).error, (*frame).from_user()) };
    if vector == crate::arch::apic::IPI_TLB {
        crate::arch::tlb::service();
        apic::eoi();
        return;
    }
    if !user {
        // SAFETY: from kernel mode the frame is the stub's, on this kernel stack, and
        // nothing else refers to it.
        kernel_mode_trap(unsafe { &mut *frame });
        return;
    }
    lock();
    // SAFETY: the lock is held.
    let k = unsafe { kernel() };
    // The thread object holds the user registers: the entry pushed them into its frame
    // (`TSS.rsp0` is the frame's end), so `frame` is that frame, except for the vectors
    // with a stack of their own (`gdt::IST_FATAL`: a non-maskable interrupt, a double fault
    // or a machine check), whose frame is copied there.
    // SAFETY: the trap came from user mode, so this CPU runs a user thread; the reference
    // is not used after `k` is used again.
    let th = unsafe { thread::current_mut() };
    let (cur, task_key) = (th.id, th.ctx.task_key);
    if !core::ptr::eq(&th.ctx.frame, frame) {
        // SAFETY: `frame` is the stub's, on its own stack, distinct from the thread's.
        th.ctx.frame = unsafe { *frame };
    }
    trap_entered(k, vector);
    match vector {
        TIMER_VECTOR => {
            apic::eoi();
            k.expire_timers();
        }
        v if v == crate::arch::apic::IPI_WAKE => {
            apic::eoi();
            // A virtual processor's carrier may have been interrupted on purpose
            // (`vp_interrupt`): its family decides whether it is told.
            if k.threads.get(cur).is_some_and(|t| t.vp) {
                (family::hooks().vp_preempting)(k, cur, false);
            }
        }
        v if crate::arch::line_of_vector(v).is_some() => {
            // The family masks a level-triggered line before the end of interrupt.
            if let Some(irq) = crate::arch::line_of_vector(v) {
                (family::hooks().interrupt)(k, irq);
            }
            apic::eoi();
        }
        // A thread's first floating-point or vector instruction (`CR0.TS` set): its save
        // area is made and the instruction runs again; without memory for it, the trap is
        // the thread's exception below.
        7 if crate::fpu::first_use(k, gdt::this_cpu()).is_ok() => {}
        v if v < 32 => {
            let _ = exception_allowed(k, task_key);
            // A page fault goes to the virtual-memory family first: most are its work
            // (a page not there yet), and the thread resumes; the others carry their
            // fault class on to the exception path.
            let mut error = error;
            if v == 14 {
                match (family::hooks().page_fault)(k, cur, cpu::read_cr2(), error) {
                    Ok(()) => finish_entry(k, false, None),
                    Err(class) => {
                        error |= class << baton_abi::vm::FAULT_CLASS_SHIFT;
                    }
                }
            }
            (family::hooks().exception)(k, cur, v, error);
            exception_unhandled(k, cur, error)
        }
        _ => {}
    }
    finish_entry(k, TIMER_VECTOR == vector, None)
}

/// What every trap from user mode does first, the lock held: the timeline trace's entry
/// record, and the end of a floor call in progress (a fault in the partner's code ends it
/// and nothing more: the thread resumes).
#[inline(always)]
fn trap_entered(k: &mut Kernel, vector: u64) {
    if crate::trace::ON.load(Ordering::Relaxed) {
        crate::trace::entry(k, crate::trace::Kind::Trap, vector);
    }
    if gdt::in_floor_call() {
        (family::hooks().floor_interrupted)(k, gdt::this_cpu());
        if vector < 32 {
            finish_entry(k, false, None);
        }
    }
}

/// A thread of a task already ending (another of its threads faulted first, on another
/// CPU) takes no exception: it just ends, and the task's end is handled and reported once.
/// Otherwise returns the task's exception port, found by the same lookup.
#[inline(always)]
fn exception_allowed(k: &mut Kernel, task_key: kern::slab::Key) -> Option<kern::ipc::PortId> {
    match k.tasks.by_key(task_key) {
        Some(t) if t.ending.is_some() => thread::thread_terminate_current(k),
        Some(t) => t.exc_port,
        None => None,
    }
}

/// The core's half of the direct entry of the user-mode exceptions that go straight to the
/// exception family (`arch::trap`'s `trap_exception`: every vector below 32 but the page
/// fault, the first floating-point use and those with a stack of their own): takes the
/// lock and does what [`on_trap`] does before it raises such an exception. Returns the
/// kernel, the running thread, the vector and the error code when the exception is to be
/// raised, and the task's exception port (`Task::exc_port`, found by the test of the
/// task's end); it does not return when the trap ended a floor call or the thread's task
/// is ending. The family then raises the exception and, when nothing takes it, calls
/// [`exception_unhandled`]: the same steps as [`on_trap`]'s, without its dispatch on the
/// vector or the hook.
#[inline(always)]
pub fn exception_entry() -> (
    &'static mut Kernel,
    ThreadId,
    u64,
    u64,
    Option<kern::ipc::PortId>,
) {
    lock();
    // SAFETY: the lock is held.
    let k = unsafe { kernel() };
    let (cur, task_key, vector, error) = {
        // SAFETY: the trap came from user mode (the entry checked `cs`), so this CPU runs
        // a user thread, whose frame the entry has just completed; the reference is
        // dropped before `k` is used.
        let th = unsafe { thread::current_mut() };
        (
            th.id,
            th.ctx.task_key,
            th.ctx.frame.vector,
            th.ctx.frame.error,
        )
    };
    trap_entered(k, vector);
    let task_port = exception_allowed(k, task_key);
    (k, cur, vector, error, task_port)
}

/// A user-mode exception (`error`: its error code, with the fault class for a page fault)
/// of the running thread `cur` that no handler took: the task ends with a report.
pub fn exception_unhandled(k: &mut Kernel, cur: ThreadId, error: u64) -> ! {
    if let Some(frame) = k.threads.get(cur).map(|th| th.ctx.frame) {
        k.report_exception(&frame, error);
    }
    if let Some(task) = k.current_task() {
        k.end_task(task, Ending::Killed);
    }
    thread::thread_terminate_current(k)
}

/// Whether a thread of priority `prio`, running on this CPU, is to give way now (a ready
/// thread here is more urgent): what [`finish_entry`] checks.
#[inline(always)]
pub fn preempt_due(k: &Kernel, prio: u8) -> bool {
    k.cpus
        .get(gdt::this_cpu())
        .and_then(|c| c.runq.peek_priority())
        .is_some_and(|p| p > prio)
}

/// On the way back to user mode: store the system call's `result` (if any) in the saved
/// `rax`, honour a pending kill, then preempt if a thread of higher priority is waiting (or
/// of the same priority, with `timeslice` for a timer tick: round robin within the level),
/// and leave to user mode, releasing the lock.
#[inline]
pub fn finish_entry(k: &mut Kernel, timeslice: bool, result: Option<u64>) -> ! {
    let cpu = gdt::this_cpu();
    // SAFETY: this CPU runs a user thread (every caller is in one of its system calls or
    // traps), and the reference is not used after `k` is used again.
    let th = unsafe { thread::current_mut() };
    let cur = th.id;
    if let Some(value) = result {
        th.ctx.frame.rax = value;
    }
    let (kill, prio, vp) = (th.kill_pending, th.priority, th.vp);
    if kill {
        thread::thread_terminate_current(k);
    }
    let preempt = match k.cpu(cpu).runq.peek_priority() {
        Some(p) => p > prio || (timeslice && p == prio),
        None => false,
    };
    if vp && (preempt || timeslice) {
        // A virtual processor's carrier: its runtime may be told (a Checkpoint upcall).
        (family::hooks().vp_preempting)(k, cur, preempt);
    }
    if preempt {
        k.stats.blocks_preempt += 1;
        thread::requeue_current(k, cur);
        thread::thread_block_with(k, Continuation::new(Resume::UserReturn));
    }
    leave_to_user()
}

/// Interrupts and exceptions taken in kernel mode: timer ticks and wake-ups while idle are
/// expected; anything else is a kernel bug and stops the machine with a report.
fn kernel_mode_trap(frame: &mut TrapFrame) {
    // A fault of the one recoverable user load (`wait`'s word) resumes at its recovery.
    if crate::arch::uaccess::fixup(frame) {
        return;
    }
    match frame.vector {
        TIMER_VECTOR => {
            apic::eoi();
            lock();
            // SAFETY: the lock is held.
            let k = unsafe { kernel() };
            k.expire_timers();
            unlock();
        }
        v if v == crate::arch::apic::IPI_WAKE => apic::eoi(),
        v if crate::arch::line_of_vector(v).is_some() => {
            // An interrupt line of a driver, taken while idle.
            lock();
            // SAFETY: the lock is held.
            let k = unsafe { kernel() };
            if let Some(irq) = crate::arch::line_of_vector(v) {
                (family::hooks().interrupt)(k, irq);
            }
            unlock();
            apic::eoi();
        }
        SPURIOUS_VECTOR => {}
        v if (trap::PIC_BASE..trap::PIC_BASE + 16).contains(&v) => {}
        v => {
            serial::force_unlock();
            kprintln!(
                "\n[kernel] KERNEL EXCEPTION: {} (vector {v}) in kernel mode on CPU {}",
                trap::exception_name(v),
                gdt::this_cpu()
            );
            if v == 14 {
                let (presence, access, mode) = trap::page_fault_detail(frame.error);
                kprintln!(
                    "  address {:#x}: {presence}, {access}, {mode}",
                    cpu::read_cr2()
                );
            }
            trap::dump_frame(frame);
            crate::heap::report_fault_injection();
            cpu::qemu_exit(cpu::EXIT_FAILURE);
        }
    }
}

impl Kernel {
    fn report_exception(&mut self, frame: &TrapFrame, error: u64) {
        cpu::check_ac_clear();
        let name = trap::exception_name(frame.vector);
        if frame.vector == 14 {
            let (presence, access, mode) = trap::page_fault_detail(frame.error);
            let addr = cpu::read_cr2();
            let class = baton_abi::vm::fault_class_name(error >> baton_abi::vm::FAULT_CLASS_SHIFT);
            self.report(format_args!(
                "killed: {name} at address {addr:#x} ({presence}, {access}, {mode}): {class}"
            ));
            if error >> baton_abi::vm::FAULT_CLASS_SHIFT == baton_abi::vm::FAULT_NO_MEMORY {
                // Whose memory ran out: the task's account, or the machine's frames.
                let (task, _) = self.current_task_name();
                if let Some(t) = self.tasks.get(&task) {
                    let r = kern::quota::Resource::Frames;
                    kprintln!(
                        "  frames: the task's account {} of {}, {} free in the allocator",
                        t.account.used(r),
                        t.account.limit(r),
                        self.frames.free_frames()
                    );
                }
            }
        } else {
            self.report(format_args!("killed: {name} (vector {})", frame.vector));
        }
        trap::dump_frame(frame);
        self.report_code(frame.rip);
    }

    /// Prints which function of the current task's program `rip` is in, from the symbol
    /// table its boot module keeps (nothing when it has none or no function contains it).
    pub fn report_code(&self, rip: u64) {
        let (_, name) = self.current_task_name();
        let Some(module) = self.modules.iter().find(|m| m.name == name) else {
            return;
        };
        if let Some(symbol) = kern::symbols::lookup(module.data, rip) {
            kprintln!("  in {symbol} ({name})");
        }
    }
}
