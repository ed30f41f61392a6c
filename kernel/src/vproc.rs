//! Virtual processors with Block and Unblock upcalls: Sting's kernel support (Jagannathan
//! and Philbin), in the shape of Anderson et al.'s scheduler activations, on Baton's
//! continuation-based threads. `docs/sting.md` ("The kernel half") and `docs/abi.md`
//! describe the protocol; `kern::vproc` is its state machine, tested on the host.
//!
//! A task makes one of its threads the *carrier* of a virtual processor (`vp_create`),
//! which runs its user-level threads, and gives it a bounded pool of *spare* kernel threads
//! (`vp_spares`), charged to the task as threads and parked (`Blocked::VpSpare`, no kernel
//! stack). When the carrier blocks in the kernel (the core calls [`on_block`] through the
//! `vp_blocking` hook), a spare takes the processor over and enters the runtime with a
//! Block upcall, while the blocked thread (now *detached*) keeps the user-level thread's
//! registers. When the detached thread's call completes, it reaches [`before_user`] on its
//! way out of the kernel (the core's `before_user` hook, called while
//! `kernel::STOPS_PENDING` counts a detached thread): there it either takes the processor
//! over, delivering an Unblock upcall, when the carrier is idle in `vp_wait`, or queues an
//! Unblock event for the runtime and parks as a spare.
//!
//! # Invariants
//! - The family's state is reached only under the big kernel lock.
//! - `Thread::vp` is set on a virtual processor's carrier, spares and detached threads,
//!   and on a detached thread whose processor has gone (an *orphan*: it ends when it
//!   would resume). Each detached or orphan thread counts one in `kernel::STOPS_PENDING`.
//! - A spare is `Blocked(VpSpare)`, with no stack, timer or queue entry; it becomes the
//!   carrier only with its frame rewritten as an upcall.
//! - Nothing here allocates after `vp_create` (the lists have their room from the start),
//!   so teardown never fails.

use crate::arch::trap::TrapFrame;
use crate::extension::strand::{self, Strand, Which};
use crate::kernel::{Kernel, TaskId, STOPS_PENDING};
use crate::thread::{self, Blocked, ThreadId, ThreadState};
use baton_abi::exception::UserRegs;
use baton_abi::layout::{USER_END, USER_MIN};
use baton_abi::vproc::{
    VpConfig, VpEventHead, FP_IMAGE_SIZE, SPARES_MAX, TAKE_MAX, UPCALL_STACK_MIN, VPS_PER_TASK_MAX,
    VP_BLOCK, VP_CONFIG_SIZE, VP_EVENT_HEAD, VP_EVENT_SIZE, VP_UNBLOCK,
};
use baton_abi::{Error, Sys, FOREVER};
use core::cell::UnsafeCell;
use core::sync::atomic::Ordering;
use kern::continuation::{Continuation, Resume};
use kern::slab::{Key, Slab};
use kern::vproc::{Preemption, Role, Unblock, VpCore};

/// What an Unblock gives back: the thread's user registers, and whether it blocked at a
/// fault rather than in a system call (its frame is not a `syscall`'s): then every register
/// and its floating-point and vector registers were live there, and the event carries an
/// image of the latter (kept in [`Vp::images`] while the event is queued).
#[derive(Clone, Copy)]
struct Back {
    regs: UserRegs,
    fault: bool,
}

impl Back {
    /// The Unblock event for thread `token` of processor `vp` (`pending` still queued),
    /// displacing `stopped` when that is given.
    fn event(
        &self,
        token: ThreadId,
        vp: Key,
        pending: usize,
        stopped: Option<UserRegs>,
    ) -> VpEventHead {
        VpEventHead {
            kind: VP_UNBLOCK,
            token: token.0,
            vp: vp.0,
            pending: pending as u64,
            interrupted: u64::from(stopped.is_some()),
            regs: self.regs,
            stopped: stopped.unwrap_or_default(),
            fault: u64::from(self.fault),
        }
    }
}

/// A floating-point image of a queued fault Unblock, with its thread's id (0: a free slot).
type Image = (u64, [u8; FP_IMAGE_SIZE]);

/// One virtual processor.
struct Vp {
    /// Its task.
    task: TaskId,
    /// Its threads and queued events.
    core: VpCore<ThreadId, Back>,
    /// Where the runtime is entered.
    cfg: VpConfig,
    /// The wait-queue key of the carrier's `vp_wait`, while it may be in one.
    idle: Option<(TaskId, u64)>,
    /// Whether, and after how long, the runtime is told of preemptions (Checkpoint).
    preempt: Preemption,
    /// `vp_interrupt` asked for a Checkpoint at the carrier's next stop in user mode.
    kick: bool,
    /// The floating-point images of queued fault Unblocks: one slot for each event the
    /// queue may hold, made with the processor.
    images: alloc::boxed::Box<[Image; SPARES_MAX as usize]>,
    /// Its charge to the task's account.
    _charge: kern::quota::Charge,
}

impl Vp {
    /// Keeps the image of thread `token`'s queued fault Unblock (there is a slot: no more
    /// events are queued than there are slots).
    fn keep_image(&mut self, token: ThreadId, fp: &[u8; FP_IMAGE_SIZE]) {
        if let Some(slot) = self.images.iter_mut().find(|s| s.0 == 0) {
            *slot = (token.0, *fp);
        }
    }

    /// The image kept for thread `token`'s event.
    fn image(&self, token: ThreadId) -> Option<&[u8; FP_IMAGE_SIZE]> {
        self.images
            .iter()
            .find(|s| s.0 == token.0 && token.0 != 0)
            .map(|s| &s.1)
    }

    /// Frees the slot of thread `token`'s image (its event was delivered).
    fn drop_image(&mut self, token: ThreadId) {
        if let Some(slot) = self.images.iter_mut().find(|s| s.0 == token.0) {
            slot.0 = 0;
        }
    }
}

/// What a virtual processor costs its task besides its spare threads (each charged as a
/// thread): the record and the room of its lists, and its images' slots.
const VP_BYTES: usize = core::mem::size_of::<Vp>()
    + core::mem::size_of::<[Image; SPARES_MAX as usize]>()
    + SPARES_MAX as usize
        * (2 * core::mem::size_of::<ThreadId>()
            + core::mem::size_of::<kern::vproc::Event<ThreadId, Back>>())
    + 64;

struct State {
    vps: Slab<Vp>,
}

struct Global(UnsafeCell<State>);
// SAFETY: the state is only reached through `state`, whose callers hold the big kernel
// lock, so one CPU at a time uses it.
unsafe impl Sync for Global {}

static STATE: Global = Global(UnsafeCell::new(State { vps: Slab::new() }));

/// The family's state.
///
/// # Safety
/// The caller holds the big kernel lock (the `&mut Kernel` it passes is the evidence) and
/// keeps no other reference from an earlier call alive while it uses this one.
unsafe fn state(_k: &Kernel) -> &'static mut State {
    // SAFETY: under the lock, by the caller's contract, this is the only reference.
    unsafe { &mut *STATE.0.get() }
}

/// The virtual processor in which `t` has a role, with the role.
fn find(st: &State, t: ThreadId) -> Option<(Key, Role)> {
    st.vps
        .iter()
        .find_map(|(key, vp)| vp.core.role(t).map(|r| (key, r)))
}

/// The virtual processor of `task` that thread `t` carries. A carrier whose call migrated
/// into a server runs there in the server's task and carries no processor of it: the
/// server must not take, wait for or resume its client's events.
fn carried(st: &State, t: ThreadId, task: TaskId) -> Option<Key> {
    match find(st, t) {
        Some((key, Role::Carrier)) if st.vps.get(key).is_some_and(|v| v.task == task) => Some(key),
        _ => None,
    }
}

/// Whether `[lo, hi)` is a non-empty range of user addresses.
fn user_range(lo: u64, hi: u64) -> bool {
    USER_MIN <= lo && lo < hi && hi <= USER_END
}

/// The system calls of the family but `vp_wait` (which blocks: [`sys_vp_wait`]).
pub fn sys(k: &mut Kernel, task: TaskId, call: Sys, args: [u64; 6]) -> Result<u64, Error> {
    let cur = k.current_thread();
    match call {
        Sys::VpCreate => create(k, cur, task, args[0]),
        Sys::VpSpares => spares(k, task, args[0], args[1]),
        Sys::VpTake => take(k, cur, task, args[0], args[1]),
        Sys::VpDestroy => {
            // SAFETY: the lock is held (we have `k`); no other reference is alive.
            let st = unsafe { state(k) };
            let key = Key(args[0]);
            match st.vps.get(key) {
                Some(vp) if vp.task == task => {
                    destroy(k, key);
                    Ok(0)
                }
                _ => Err(Error::NotFound),
            }
        }
        Sys::VpPreempt => set_preempt(k, task, args[0], args[1]),
        Sys::VpInterrupt => interrupt(k, task, args[0]),
        _ => Err(Error::InvalidArgument),
    }
}

/// `vp_create(config)`.
fn create(k: &mut Kernel, cur: ThreadId, task: TaskId, at: u64) -> Result<u64, Error> {
    let mut raw = [0u8; VP_CONFIG_SIZE];
    k.copy_in(task, at, &mut raw)?;
    let cfg = VpConfig::from_bytes(&raw);
    // Decode: everything is checked before anything changes.
    if !cfg.upcall_lo.is_multiple_of(16)
        || !cfg.upcall_hi.is_multiple_of(16)
        || !cfg.mailbox.is_multiple_of(8)
    {
        return Err(Error::InvalidArgument);
    }
    if !user_range(cfg.entry, cfg.entry.saturating_add(1))
        || !user_range(cfg.upcall_lo, cfg.upcall_hi)
        || (cfg.quiet_lo, cfg.quiet_hi) != (0, 0) && !user_range(cfg.quiet_lo, cfg.quiet_hi)
    {
        return Err(Error::BadAddress);
    }
    if cfg.upcall_hi - cfg.upcall_lo < UPCALL_STACK_MIN {
        return Err(Error::InvalidArgument);
    }
    k.check_writable(task, frame_at(&cfg) - 8, VP_EVENT_SIZE + 8)?;
    if cfg.mailbox != 0 {
        k.check_writable(task, cfg.mailbox, 8)?;
    }
    match k.threads.get(cur) {
        // A thread whose call migrated into this task (a server's activation) is its
        // client's: the server may not make it a carrier (its upcalls would carry the
        // client's registers here, and `vp_interrupt` would redirect it in its own task).
        Some(t) if t.home_task() != Some(task) => return Err(Error::InvalidArgument),
        Some(t) if !t.vp => {}
        _ => return Err(Error::Busy),
    }
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    if st.vps.iter().filter(|(_, v)| v.task == task).count() >= VPS_PER_TASK_MAX {
        return Err(Error::NoSpace);
    }
    let account = k
        .tasks
        .get(&task)
        .ok_or(Error::InvalidArgument)?
        .account
        .clone();
    let charge = crate::quota::heap(&account, VP_BYTES)?;
    let core = VpCore::new(cur, SPARES_MAX as usize).ok_or(Error::NoMemory)?;
    let images = kern::fallible::try_box([(0, [0; FP_IMAGE_SIZE]); SPARES_MAX as usize])
        .ok_or(Error::NoMemory)?;
    wire_written(k, task, &cfg)?;
    // SAFETY: as above (re-borrowed after the wiring used `k`).
    let st = unsafe { state(k) };
    let key = match st.vps.insert(Vp {
        task,
        core,
        cfg,
        idle: None,
        preempt: Preemption::default(),
        kick: false,
        images,
        _charge: charge,
    }) {
        Ok(key) => key,
        Err(_) => {
            unwire_written(k, task, &cfg);
            return Err(Error::NoMemory);
        }
    };
    if let Some(t) = k.threads.get_mut(cur) {
        t.vp = true;
    }
    Ok(key.0)
}

/// `vp_spares(vp, n)`: makes or ends spares until the processor has `n` threads besides
/// its carrier (as far as the detached ones allow).
fn spares(k: &mut Kernel, task: TaskId, vp: u64, n: u64) -> Result<u64, Error> {
    if n > SPARES_MAX {
        return Err(Error::InvalidArgument);
    }
    let key = Key(vp);
    loop {
        // SAFETY: the lock is held; the reference ends before `k` is used below.
        let st = unsafe { state(k) };
        let v = st
            .vps
            .get_mut(key)
            .filter(|v| v.task == task)
            .ok_or(Error::NotFound)?;
        let (spare, detached, _) = v.core.counts();
        let have = (spare + detached) as u64;
        if have > n {
            let Some(t) = v.core.remove_spare() else {
                return Ok(have);
            };
            // Not the processor's any more: it ends as an ordinary parked thread.
            if let Some(th) = k.threads.get_mut(t) {
                th.vp = false;
            }
            k.kill_thread(t);
            continue;
        }
        if have == n {
            return Ok(have);
        }
        let (entry, top) = (v.cfg.entry, frame_at(&v.cfg) - 8);
        let prio = k
            .threads
            .get(v.core.carrier())
            .map_or(baton_abi::PRIORITY_DEFAULT as u8, |t| t.priority);
        let t = k.create_thread(task, TrapFrame::new_user(entry, top, 0), prio)?;
        // Parked at once: off the run queue it was put on.
        if let Some(th) = k.threads.get_mut(t) {
            let (cpu, p) = (th.cpu, th.priority);
            th.state = ThreadState::Blocked(Blocked::VpSpare);
            th.cont = Some(Continuation::new(Resume::UserReturn));
            th.vp = true;
            if let Some(c) = k.cpus.get_mut(cpu) {
                c.runq.remove(t, p);
            }
        }
        // SAFETY: as above.
        let st = unsafe { state(k) };
        if !st.vps.get_mut(key).is_some_and(|v| v.core.add_spare(t)) {
            if let Some(th) = k.threads.get_mut(t) {
                th.vp = false;
            }
            k.kill_thread(t);
            return Err(Error::NoSpace);
        }
    }
}

/// Where an upcall's event goes: the top of the upcall stack, 16-byte aligned.
fn frame_at(cfg: &VpConfig) -> u64 {
    (cfg.upcall_hi & !15).saturating_sub(VP_EVENT_SIZE as u64) & !15
}

/// The pages the kernel writes outside any call of the processor's task (an upcall's
/// event and the mailbox: [`enter_upcall`], [`post`]), as page-aligned ranges (start,
/// length; a length of 0 for no mailbox). They are wired while the processor lives, as an
/// IPC buffer is: such a write cannot wait for a page paged out (there is no call to make
/// again, and the thread blocking or preempted is not the one that waits), so the pages
/// are never taken, and the kernel's stores there count as writes of them (`vm::Owner`).
fn kernel_written(cfg: &VpConfig) -> [(u64, u64); 2] {
    let page = kern::frame::PAGE_SIZE;
    let lo = (frame_at(cfg) - 8) & !(page - 1);
    let hi = (frame_at(cfg) + VP_EVENT_SIZE as u64).next_multiple_of(page);
    let mailbox = match cfg.mailbox {
        0 => (0, 0),
        m => (m & !(page - 1), page),
    };
    [(lo, hi - lo), mailbox]
}

/// Wires [`kernel_written`]'s pages of `cfg` in `task`; nothing stays wired on an error.
fn wire_written(k: &mut Kernel, task: TaskId, cfg: &VpConfig) -> Result<(), Error> {
    let [event, mailbox] = kernel_written(cfg);
    crate::vm::wire(k, task, event.0, event.1, crate::vm::Owner::Vp)?;
    if mailbox.1 != 0 {
        if let Err(e) = crate::vm::wire(k, task, mailbox.0, mailbox.1, crate::vm::Owner::Vp) {
            let _ = crate::vm::unwire(k, task, event.0, event.1, crate::vm::Owner::Vp);
            return Err(e);
        }
    }
    Ok(())
}

/// Undoes [`wire_written`] (a range the task unmapped meanwhile is unwired already).
fn unwire_written(k: &mut Kernel, task: TaskId, cfg: &VpConfig) {
    for (va, len) in kernel_written(cfg) {
        if len != 0 {
            let _ = crate::vm::unwire(k, task, va, len, crate::vm::Owner::Vp);
        }
    }
}

/// Writes `ev` (and its floating-point image `fp`, if any) at the top of the upcall stack
/// of `cfg` in `task` and points thread `t`'s user registers at the upcall entry. Nothing
/// changes on an error.
fn enter_upcall(
    k: &mut Kernel,
    task: TaskId,
    t: ThreadId,
    cfg: &VpConfig,
    ev: &VpEventHead,
    fp: Option<&[u8; FP_IMAGE_SIZE]>,
) -> Result<(), Error> {
    let at = frame_at(cfg);
    if let Some(fp) = fp {
        k.copy_out(task, at + VP_EVENT_HEAD as u64, fp)?;
    }
    let mut bytes = [0u8; VP_EVENT_HEAD + 8];
    if let Some(rest) = bytes.get_mut(8..) {
        rest.copy_from_slice(&ev.to_bytes());
    }
    k.copy_out(task, at - 8, &bytes)?;
    let th = k.threads.get_mut(t).ok_or(Error::InvalidArgument)?;
    let mut frame = TrapFrame::new_user(cfg.entry, at - 8, at);
    frame.rsi = ev.kind;
    frame.rdx = cfg.cookie;
    th.ctx.frame = frame;
    Ok(())
}

/// Writes how many events are queued to the processor's mailbox (if it has one; a
/// mailbox the task unmapped is its own loss).
fn post(k: &mut Kernel, task: TaskId, mailbox: u64, pending: usize) {
    if mailbox != 0 {
        let _ = k.copy_out(task, mailbox, &(pending as u64).to_le_bytes());
    }
}

/// The `vp_blocking` hook: the running thread `t` (of a virtual processor) blocks on
/// `why`. When it is a carrier, blocking in a call or at a fault that waits (a receive or
/// send, on the general path or the fast path's way to it, in its own task or in a server
/// its call migrated into; `wait`, `sleep`, `act_get_state`'s wait for a thread to stop; a
/// fault's wait for its exception reply or for a page from a pager) away from the
/// runtime's own stacks, and a spare is free, the spare carries the processor on: it is put
/// first in this CPU's run queue, to enter the Block upcall. (Suspension, `Suspended`,
/// stops the kernel thread, processor and all; the other states are never a running
/// carrier's.)
pub fn on_block(k: &mut Kernel, t: ThreadId, why: Blocked) {
    let waits = matches!(
        why,
        Blocked::Receive { .. }
            | Blocked::Send { .. }
            | Blocked::Wait { .. }
            | Blocked::Sleep
            | Blocked::StateWait { .. }
            | Blocked::PageIn { .. }
    );
    if !waits {
        return;
    }
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    let Some((key, Role::Carrier)) = find(st, t) else {
        return;
    };
    let Some(vp) = st.vps.get_mut(key) else {
        return;
    };
    if let (Blocked::Wait { key: w }, Some(idle)) = (why, vp.idle) {
        if w == idle {
            // The carrier's own `vp_wait`.
            return;
        }
    }
    let Some(th) = k.threads.get(t) else {
        return;
    };
    // In a server its call migrated into, the thread's registers there are the server's:
    // the event carries its own task's, as they were at the call.
    let regs = match th.below.first() {
        Some(home) => home.frame.user_regs(),
        None => th.ctx.frame.user_regs(),
    };
    let cfg = vp.cfg;
    let in_range = |lo: u64, hi: u64| lo <= regs.rsp && regs.rsp < hi;
    if in_range(cfg.upcall_lo, cfg.upcall_hi) || in_range(cfg.quiet_lo, cfg.quiet_hi) {
        return;
    }
    let (task, vp_id) = (vp.task, key.0);
    if !strand::raise(
        k,
        Which::Block,
        &Strand {
            task,
            vp: vp_id,
            thread: t.0,
        },
    ) {
        // A `Strand.Block` handler vetoed the upcall: the processor blocks with `t`.
        return;
    }
    // SAFETY: as above (the earlier reference is no longer used; handlers do not reach
    // this state).
    let st = unsafe { state(k) };
    let Some(vp) = st.vps.get_mut(key) else {
        return;
    };
    let Some(spare) = vp.core.on_block(t) else {
        return;
    };
    let ev = VpEventHead {
        kind: VP_BLOCK,
        token: t.0,
        vp: key.0,
        pending: vp.core.counts().2 as u64,
        regs,
        ..VpEventHead::default()
    };
    let task = vp.task;
    if enter_upcall(k, task, spare, &cfg, &ev, None).is_err() {
        // The upcall stack is gone: undo, and `t` blocks as an ordinary thread.
        // SAFETY: as above (the earlier reference is no longer used).
        let st = unsafe { state(k) };
        if let Some(vp) = st.vps.get_mut(key) {
            let _ = vp.core.on_unblock(t, Back { regs, fault: false }, true);
        }
        return;
    }
    STOPS_PENDING.fetch_add(1, Ordering::Relaxed);
    let cpu = crate::arch::gdt::this_cpu();
    if let Some(s) = k.threads.get_mut(spare) {
        s.state = ThreadState::Ready;
        s.cont = Some(Continuation::new(Resume::UserReturn));
        if !s.pinned {
            s.cpu = cpu;
        }
        let (home, prio) = (s.cpu, s.priority);
        if let Some(c) = k.cpus.get_mut(home) {
            c.runq.push_front(spare, prio);
        }
        if home != cpu {
            crate::kernel::poke_cpu(k, home, prio);
        }
    }
}

/// Part of the `before_user` hook: the running thread, about to return to user mode, may
/// be a detached thread whose call completed. It takes its processor over with an Unblock
/// upcall when the carrier is idle in `vp_wait`, else queues its event and parks as a
/// spare. An orphan (its processor gone) ends. A thread on its way to user mode in a server
/// its call migrated into goes on there: it comes back to its processor when the call
/// returns into its own task. A thread whose frame is not a system call's (it blocked at
/// a fault, or its registers were set) gives back every register and its floating-point
/// state.
pub fn before_user(k: &mut Kernel) {
    let cur = k.current_thread();
    let Some(th) = k.threads.get(cur) else {
        return;
    };
    if !th.vp || !th.below.is_empty() {
        return;
    }
    let regs = th.ctx.frame.user_regs();
    let fault = th.ctx.frame.vector != crate::arch::trap::SYSCALL_VECTOR;
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    let Some((key, role)) = find(st, cur) else {
        // An orphan: its processor ended while it was blocked.
        thread::thread_terminate_current(k);
    };
    if role != Role::Detached {
        return;
    }
    let Some(vp) = st.vps.get_mut(key) else {
        return;
    };
    let carrier = vp.core.carrier();
    let idle = vp.idle.filter(|&w| {
        k.threads
            .get(carrier)
            .is_some_and(|c| c.state == ThreadState::Blocked(Blocked::Wait { key: w }))
    });
    let (task, cfg) = (vp.task, vp.cfg);
    // A `Strand.Unblock` veto keeps an idle processor from being interrupted: the event
    // waits in the queue.
    let strand = Strand {
        task,
        vp: key.0,
        thread: cur.0,
    };
    let idle = idle.filter(|_| strand::raise(k, Which::Unblock, &strand));
    // SAFETY: as above (handlers do not reach this state).
    let st = unsafe { state(k) };
    let Some(vp) = st.vps.get_mut(key) else {
        return;
    };
    let back = Back { regs, fault };
    let fp = fault.then(|| crate::fpu::legacy_image(k.cpu(crate::arch::gdt::this_cpu())));
    match vp.core.on_unblock(cur, back, idle.is_some()) {
        Unblock::NotDetached => {}
        Unblock::TakeOver { parked } => {
            STOPS_PENDING.fetch_sub(1, Ordering::Relaxed);
            vp.idle = None;
            let pending = vp.core.counts().2 as u64;
            let mut stopped = UserRegs::default();
            if let Some(w) = idle {
                k.waits.remove(w, parked);
            }
            if let Some(p) = k.threads.get_mut(parked) {
                p.state = ThreadState::Blocked(Blocked::VpSpare);
                p.cont = Some(Continuation::new(Resume::UserReturn));
                stopped = p.ctx.frame.user_regs();
                stopped.rax = 0;
                if let Some(timer) = p.timer.take() {
                    k.timers.cancel(timer);
                }
            }
            let ev = back.event(cur, key, pending as usize, Some(stopped));
            if enter_upcall(k, task, cur, &cfg, &ev, fp.as_ref()).is_err() {
                k.report(format_args!(
                    "killed: the upcall stack of virtual processor {} is not writable",
                    key.0
                ));
                k.end_task(task, crate::kernel::Ending::Killed);
                thread::thread_terminate_current(k);
            }
        }
        Unblock::Queued => {
            STOPS_PENDING.fetch_sub(1, Ordering::Relaxed);
            if let Some(fp) = &fp {
                vp.keep_image(cur, fp);
            }
            let pending = vp.core.counts().2;
            post(k, task, cfg.mailbox, pending);
            if let Some(th) = k.threads.get_mut(cur) {
                th.state = ThreadState::Blocked(Blocked::VpSpare);
            }
            k.stats.blocks_internal += 1;
            thread::thread_block_with(k, Continuation::new(Resume::UserReturn));
        }
    }
}

/// `vp_wait(addr, expected, timeout)` by the carrier `cur`: a queued event is delivered
/// at once as an Unblock upcall; otherwise the carrier waits as in `wait`, marked idle,
/// so that a thread whose call completes meanwhile takes the processor over. Returns the
/// result to write, or does not return.
pub fn sys_vp_wait(k: &mut Kernel, cur: ThreadId, task: TaskId, args: [u64; 6]) -> u64 {
    match vp_wait(k, cur, task, args) {
        Ok(v) => v,
        Err(e) => e.to_raw(),
    }
}

fn vp_wait(k: &mut Kernel, cur: ThreadId, task: TaskId, args: [u64; 6]) -> Result<u64, Error> {
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    let Some(key) = carried(st, cur, task) else {
        return Err(Error::InvalidArgument);
    };
    let vp = st.vps.get_mut(key).ok_or(Error::InvalidArgument)?;
    let cfg = vp.cfg;
    if let Some(ev) = vp.core.take() {
        let pending = vp.core.counts().2;
        let mut stopped = k
            .threads
            .get(cur)
            .map(|t| t.ctx.frame.user_regs())
            .unwrap_or_default();
        stopped.rax = 0;
        let event = ev.regs.event(ev.token, key, pending, Some(stopped));
        post(k, task, cfg.mailbox, pending);
        // SAFETY: as above (the earlier reference is no longer used).
        let st = unsafe { state(k) };
        let fp = st
            .vps
            .get(key)
            .filter(|_| ev.regs.fault)
            .and_then(|v| v.image(ev.token).copied());
        let sent = enter_upcall(k, task, cur, &cfg, &event, fp.as_ref());
        // SAFETY: as above.
        let st = unsafe { state(k) };
        if let Some(vp) = st.vps.get_mut(key) {
            match sent {
                Ok(()) => vp.drop_image(ev.token),
                // Not delivered: the event goes back (first), the call fails.
                Err(e) => {
                    vp.core.requeue_front(ev);
                    return Err(e);
                }
            }
        }
        crate::kernel::finish_entry(k, false, None)
    }
    let (addr, expected) = (args[0], args[1]);
    if !addr.is_multiple_of(4) {
        return Err(Error::InvalidArgument);
    }
    let mut word = [0u8; 4];
    k.copy_in(task, addr, &mut word)?;
    if u64::from(u32::from_le_bytes(word)) != expected {
        return Err(Error::WouldBlock);
    }
    let w = (task, addr);
    k.waits.try_enqueue(w, cur)?;
    // SAFETY: as above.
    let st = unsafe { state(k) };
    if let Some(vp) = st.vps.get_mut(key) {
        vp.idle = Some(w);
    }
    let deadline = match args[2] {
        FOREVER => None,
        ns => Some(crate::arch::apic::now_ns().saturating_add(ns)),
    };
    thread::block_until(k, Blocked::Wait { key: w }, deadline);
    k.stats.blocks_wait += 1;
    thread::thread_block_with(k, Continuation::new(Resume::Wait))
}

/// `vp_take(buf, max)` by the carrier `cur`.
fn take(k: &mut Kernel, cur: ThreadId, task: TaskId, buf: u64, max: u64) -> Result<u64, Error> {
    if max > TAKE_MAX {
        return Err(Error::TooLarge);
    }
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    let Some(key) = carried(st, cur, task) else {
        return Err(Error::InvalidArgument);
    };
    let queued = st.vps.get(key).map_or(0, |v| v.core.counts().2) as u64;
    let n = queued.min(max);
    if n == 0 {
        return Ok(0);
    }
    k.check_writable(task, buf, n as usize * VP_EVENT_SIZE)?;
    for i in 0..n {
        // SAFETY: as above (re-borrowed for each event, `k` is used between).
        let st = unsafe { state(k) };
        let Some(vp) = st.vps.get_mut(key) else {
            return Ok(i);
        };
        let Some(ev) = vp.core.take() else {
            return Ok(i);
        };
        let record = ev.regs.event(ev.token, key, vp.core.counts().2, None);
        let fp = vp.image(ev.token).filter(|_| ev.regs.fault).copied();
        let at = buf + i * VP_EVENT_SIZE as u64;
        let written = match &fp {
            Some(fp) => k.copy_out(task, at + VP_EVENT_HEAD as u64, fp),
            None => Ok(()),
        }
        .and_then(|()| k.copy_out(task, at, &record.to_bytes()));
        if written.is_ok() && fp.is_some() {
            // SAFETY: as above.
            let st = unsafe { state(k) };
            if let Some(vp) = st.vps.get_mut(key) {
                vp.drop_image(ev.token);
            }
        }
        if let Err(e) = written {
            // SAFETY: as above.
            let st = unsafe { state(k) };
            if let Some(vp) = st.vps.get_mut(key) {
                vp.core.requeue_front(ev);
            }
            return if i == 0 { Err(e) } else { Ok(i) };
        }
    }
    // SAFETY: as above.
    let st = unsafe { state(k) };
    let (pending, mailbox) = st
        .vps
        .get(key)
        .map_or((0, 0), |v| (v.core.counts().2, v.cfg.mailbox));
    post(k, task, mailbox, pending);
    Ok(n)
}

/// Ends virtual processor `key`: its spares end; its carrier goes on as an ordinary
/// thread; its detached threads become orphans, which end when they would resume.
/// Allocates nothing.
fn destroy(k: &mut Kernel, key: Key) {
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    let Some(vp) = st.vps.remove(key) else {
        return;
    };
    let mut spares = [Key(0); SPARES_MAX as usize];
    let mut n = 0;
    for (t, role) in vp.core.members() {
        if role == Role::Spare {
            if let Some(slot) = spares.get_mut(n) {
                *slot = t;
                n += 1;
            }
        }
    }
    if let Some(c) = k.threads.get_mut(vp.core.carrier()) {
        c.vp = false;
    }
    let (task, cfg) = (vp.task, vp.cfg);
    drop(vp);
    unwire_written(k, task, &cfg);
    for &t in spares.iter().take(n) {
        if let Some(th) = k.threads.get_mut(t) {
            th.vp = false;
        }
        k.kill_thread(t);
    }
}

/// Part of the `thread_freed` hook: thread `th` is gone. A carrier's end ends its
/// processor; a spare or detached thread leaves it; a detached one (or an orphan) no
/// longer counts in `STOPS_PENDING`.
pub fn thread_freed(k: &mut Kernel, th: &crate::thread::Thread) {
    if !th.vp {
        return;
    }
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    match find(st, th.id) {
        Some((key, Role::Carrier)) => destroy(k, key),
        Some((key, role)) => {
            if let Some(vp) = st.vps.get_mut(key) {
                vp.core.forget(th.id);
            }
            if role == Role::Detached {
                STOPS_PENDING.fetch_sub(1, Ordering::Relaxed);
            }
        }
        None => {
            STOPS_PENDING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Part of the `task_released` hook: no virtual processor of task `id` is left (its
/// threads are gone, and each carrier's end removed its processor; this is the net).
pub fn task_released(k: &mut Kernel, id: TaskId) {
    loop {
        // SAFETY: the lock is held (we have `k`); no other reference is alive.
        let st = unsafe { state(k) };
        let Some(key) = st
            .vps
            .iter()
            .find(|(_, v)| v.task == id)
            .map(|(key, _)| key)
        else {
            return;
        };
        destroy(k, key);
    }
}

/// `vp_preempt(vp, quantum_ns)`: Checkpoint upcalls on (with a quantum) or off (0).
fn set_preempt(k: &mut Kernel, task: TaskId, vp: u64, quantum: u64) -> Result<u64, Error> {
    if quantum != 0 && quantum < baton_abi::vproc::QUANTUM_MIN_NS {
        return Err(Error::InvalidArgument);
    }
    let now = crate::arch::apic::now_ns();
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    let v = st
        .vps
        .get_mut(Key(vp))
        .filter(|v| v.task == task)
        .ok_or(Error::NotFound)?;
    v.preempt = Preemption {
        quantum_ns: quantum,
        since_ns: now,
    };
    Ok(0)
}

/// `vp_interrupt(vp)`: a Checkpoint at the carrier's next stop in user mode, which an
/// inter-processor interrupt makes now when the carrier runs on another CPU.
fn interrupt(k: &mut Kernel, task: TaskId, vp: u64) -> Result<u64, Error> {
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    let v = st
        .vps
        .get_mut(Key(vp))
        .filter(|v| v.task == task)
        .ok_or(Error::NotFound)?;
    v.kick = true;
    let carrier = v.core.carrier();
    if let Some(ThreadState::Running { cpu }) = k.threads.get(carrier).map(|t| t.state) {
        // The interrupt's way back to user mode calls `on_preempt` (the core's
        // `vp_preempting` hook); nothing when it is this CPU (the caller carries it).
        crate::arch::smp::wake_cpu(cpu);
    }
    Ok(0)
}

/// The `vp_preempting` hook: the carrier `t` is on its way to user mode at a timer tick or
/// a wake-up interrupt, or is being preempted (`preempted`). When its processor asked for
/// Checkpoints and the carrier runs a user-level thread that is due one
/// (`kern::vproc::Preemption::due`), or `vp_interrupt` asked for one, and no
/// `Strand.Checkpoint` handler vetoes it, its user registers are rewritten to enter the
/// runtime with a Checkpoint upcall carrying the thread's registers, all of them: the
/// carrier enters it now, or when it next runs. Not while the carrier runs a call it
/// migrated into a server (those registers are the server's). A runtime whose upcall stack
/// cannot be written ends.
pub fn on_preempt(k: &mut Kernel, t: ThreadId, preempted: bool) {
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    let Some((key, Role::Carrier)) = find(st, t) else {
        return;
    };
    let Some(vp) = st.vps.get_mut(key) else {
        return;
    };
    if vp.preempt.quantum_ns == 0 && !vp.kick {
        return;
    }
    let Some(th) = k.threads.get(t) else {
        return;
    };
    if !th.below.is_empty() {
        return;
    }
    let regs = th.ctx.frame.user_regs();
    let (cfg, task) = (vp.cfg, vp.task);
    let now = crate::arch::apic::now_ns();
    let quiet = [(cfg.upcall_lo, cfg.upcall_hi), (cfg.quiet_lo, cfg.quiet_hi)];
    let kicked = core::mem::take(&mut vp.kick);
    let due = if kicked {
        Preemption::runs_a_thread(regs.rsp, &quiet)
    } else {
        vp.preempt.due(now, preempted, regs.rsp, &quiet)
    };
    if !due {
        return;
    }
    vp.preempt.restart(now);
    let pending = vp.core.counts().2 as u64;
    if !strand::checkpoint(
        k,
        &Strand {
            task,
            vp: key.0,
            thread: t.0,
        },
        t,
        &regs,
    ) {
        return;
    }
    let ev = VpEventHead {
        kind: baton_abi::vproc::VP_CHECKPOINT,
        token: t.0,
        vp: key.0,
        pending,
        regs,
        ..VpEventHead::default()
    };
    if enter_upcall(k, task, t, &cfg, &ev, None).is_err() {
        k.report(format_args!(
            "killed: the upcall stack of virtual processor {} is not writable",
            key.0
        ));
        k.end_task(task, crate::kernel::Ending::Killed);
        thread::thread_terminate_current(k);
    }
}

/// `vp_resume(regs)` by the carrier `cur`: raises `Strand.Resume`, then continues at the
/// registers read from `at` (checked as an exception handler's are: `rip` and `rsp` in
/// user space, only the user flags taken), every register restored. Returns only the
/// error to give back.
pub fn sys_vp_resume(k: &mut Kernel, cur: ThreadId, task: TaskId, at: u64) -> u64 {
    match vp_resume(k, cur, task, at) {
        Ok(()) => crate::kernel::finish_entry(k, false, None),
        Err(e) => e.to_raw(),
    }
}

fn vp_resume(k: &mut Kernel, cur: ThreadId, task: TaskId, at: u64) -> Result<(), Error> {
    // SAFETY: the lock is held (we have `k`); no other reference is alive.
    let st = unsafe { state(k) };
    let Some(key) = carried(st, cur, task) else {
        return Err(Error::InvalidArgument);
    };
    let mut raw = [0u8; baton_abi::exception::USER_REGS_WORDS * 8];
    k.copy_in(task, at, &mut raw)?;
    let mut words = [0u64; baton_abi::exception::USER_REGS_WORDS];
    for (w, chunk) in words.iter_mut().zip(raw.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    let regs = UserRegs::from_words(&words);
    if regs.rip >= USER_END || regs.rsp >= USER_END {
        return Err(Error::BadAddress);
    }
    if !strand::raise(
        k,
        Which::Resume,
        &Strand {
            task,
            vp: key.0,
            thread: cur.0,
        },
    ) {
        return Err(Error::Denied);
    }
    crate::exception::set_regs(k, cur, &regs)?;
    let now = crate::arch::apic::now_ns();
    // SAFETY: as above (handlers do not reach this state).
    let st = unsafe { state(k) };
    if let Some(vp) = st.vps.get_mut(key) {
        vp.preempt.restart(now);
    }
    Ok(())
}
