//! Exceptions as IPC (the continuations paper, section 2.5): a user thread's CPU exception
//! or unknown system call becomes an RPC to its exception port, and the handler's reply
//! resumes it, with registers it may have changed, or ends its task.
//!
//! `raise` sends `baton_abi::exception::EXC_RAISE` to the thread's exception port (else its
//! task's) with a send-once reply right to the thread's *exception reply port*, a port
//! whose receive right the kernel keeps (`kern::ipc::held`). The thread then waits on that
//! port like any receiver, with the [`Resume::ExceptionReply`] continuation, and hands its
//! kernel stack to the handler when the handler is already waiting for a message (the
//! handoff of section 2.5). When the reply (or, if the handler dropped the right or died,
//! the send-once notification) arrives, the continuation reads it and applies it.
//!
//! # Invariants
//! - A thread blocked here is `Blocked::Receive { port: exc_reply }` with the
//!   `ExceptionReply` continuation; the IPC paths never deliver into it directly (they
//!   check for the `Receive` continuation), they queue and wake it.
//! - `exc_port` of a thread or task is a send right the kernel holds (counted); it is
//!   released when replaced, and when the thread is reaped or the task ends.

use crate::arch::{cpu, gdt, paging};
use crate::kernel::{self, Ending, Kernel, TaskId};
use crate::thread::{self, Blocked, Thread, ThreadId, ThreadState};
use baton_abi::exception::{
    ExcAction, ExcReply, ExceptionInfo, UserRegs, EXCEPTION_INFO_SIZE, EXC_RAISE,
};
use baton_abi::ipc::{
    Disposition, MsgHeader, HEADER_SIZE, IPC_BUFFER_SIZE, MSG_BUF, MSG_RECEIVE, MSG_SEND, MSG_SLOW,
    NOTIFY_SEND_ONCE,
};
use baton_abi::layout::USER_END;
use baton_abi::Error;
use baton_abi::FOREVER;
use kern::continuation::{Continuation, Resume};
use kern::frame::PhysAddr;
use kern::ipc::{Fast, PortId, Wake};

/// `rflags` bits a handler may set: CF, PF, AF, ZF, SF, TF, DF, OF.
const USER_FLAGS: u64 = 0xdd5;
/// `rflags` bits always set in user mode: the reserved bit 1 and IF.
const FORCED_FLAGS: u64 = 0x202;

/// The direct entry of a user-mode CPU exception (`arch::trap`'s `trap_exception`: every
/// vector below 32 but the page fault, the first floating-point use and those with a stack
/// of their own, which go through `kernel::on_trap` and the `exception` hook): the core's
/// entry steps, then the exception raised, else the task's end. It does not return.
#[no_mangle]
extern "C" fn exception_dispatch() -> ! {
    let (k, cur, vector, error, task_port) = kernel::exception_entry();
    raise_with(k, cur, vector, error, task_port);
    kernel::exception_unhandled(k, cur, error)
}

/// Raises an exception of kind `kind` for the running thread `cur`, whose user registers
/// are in its thread object. Returns only when there is no usable exception port (the
/// caller then ends the task); otherwise the thread blocks until the handler's reply.
pub fn raise(k: &mut Kernel, cur: ThreadId, kind: u64, error: u64) {
    // SAFETY: `cur` is the running thread of this CPU; the reference is dropped at once.
    let task_key = unsafe { crate::thread::current_mut() }.ctx.task_key;
    let task_port = k.tasks.by_key(task_key).and_then(|t| t.exc_port);
    raise_with(k, cur, kind, error, task_port);
}

/// [`raise`], given the thread's task's exception port `task_port` (its `Task::exc_port`),
/// which the direct entry found already.
#[inline(always)]
fn raise_with(k: &mut Kernel, cur: ThreadId, kind: u64, error: u64, task_port: Option<PortId>) {
    // SAFETY: `cur` is the running thread of this CPU (it raises its own exception); the
    // reference is not used after `k`'s thread table is used below.
    let th: &Thread = unsafe { crate::thread::current_mut() };
    if th.id != cur {
        return;
    }
    let Some(task) = th.ctx.task else {
        return;
    };
    let alive = |k: &Kernel, p: Option<PortId>| p.filter(|&p| k.ipc.port(p).is_some());
    // The task's port is looked at only when the thread has none of its own.
    let (own, vp) = (th.ctx.exc_port, th.vp);
    let Some(port) = alive(k, own).or_else(|| alive(k, task_port)) else {
        return;
    };
    let reply = match th.exc_reply {
        Some(r) => r,
        None => match k.ipc.allocate_kernel() {
            Ok(r) => {
                if let Some(th) = k.threads.get_mut(cur) {
                    th.exc_reply = Some(r);
                }
                r
            }
            Err(_) => return,
        },
    };
    let head = Head {
        kind,
        error,
        addr: if kind == 14 { cpu::read_cr2() } else { 0 },
        thread: cur.0,
        task,
    };
    // A thread of a virtual processor waits through `block_until` below, which lets its
    // processor go on with a spare (a Block upcall).
    if !vp {
        raise_fast(k, cur, port, reply, &head);
    }
    // The general path: the message built in kernel memory.
    let Some(regs) = k.threads.get(cur).map(|th| th.ctx.frame.user_regs()) else {
        return;
    };
    let info = ExceptionInfo {
        kind,
        error,
        addr: head.addr,
        thread: cur.0,
        task,
        regs,
    };
    // Room for the thread among the reply port's receivers first: then nothing below
    // allocates once the exception is sent.
    if let Some(p) = k.ipc.port_mut(reply) {
        let n = p.receivers.len() + 1;
        if p.receivers.reserve(n).is_err() {
            return;
        }
    }
    // The message's data, allocated where failing is allowed (the task then ends as
    // with no handler).
    let bytes = info.to_bytes();
    let mut data = alloc::vec::Vec::new();
    if data.try_reserve_exact(bytes.len()).is_err() {
        return;
    }
    data.extend_from_slice(&bytes);
    let mut fx = crate::ipc::effects(k);
    if k.ipc
        .send_kernel(port, EXC_RAISE, reply, data, &mut fx)
        .is_err()
    {
        return;
    }
    if let Some(p) = k.ipc.port_mut(reply) {
        p.receivers.push_back(cur);
    }
    thread::block_until(k, Blocked::Receive { port: reply }, None);
    k.stats.blocks_ipc += 1;
    let cont = Continuation::new(Resume::ExceptionReply);
    // The handler, if it was waiting, takes over this stack at once.
    let cpu = gdt::this_cpu();
    let handler = match fx.wake.first() {
        Some(&(h, Wake::Retry)) if can_hand_off(k, h, cpu) => Some(h),
        _ => None,
    };
    if let Some(h) = handler {
        fx.wake.remove(0);
        if let Some(timer) = k.threads.get_mut(h).and_then(|t| t.timer.take()) {
            k.timers.cancel(timer);
        }
    }
    crate::ipc::apply(k, fx);
    match handler {
        Some(h) => thread::thread_handoff(k, cpu, cur, cont, h),
        None => thread::thread_block_with(k, cont),
    }
}

/// An exception's words before its registers (those of [`ExceptionInfo`]).
struct Head {
    kind: u64,
    error: u64,
    addr: u64,
    thread: u64,
    task: u64,
}

/// Words of a [`Head`] (an [`ExceptionInfo`]'s before its registers).
const HEAD_WORDS: usize =
    baton_abi::exception::EXCEPTION_INFO_WORDS - baton_abi::exception::USER_REGS_WORDS;

/// The `bits` of a reply the fast path takes: a send-once right used up, nothing else.
const REPLY_BITS: u32 = MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0);

/// Bytes of an exception message: the header and the [`ExceptionInfo`].
const RAISE_SIZE: usize = HEADER_SIZE + EXCEPTION_INFO_SIZE;
const _: () = assert!(RAISE_SIZE <= IPC_BUFFER_SIZE);

/// The exception fast path of seed 000 section 2.5: when a handler waits on the exception
/// port `port` with the receive continuation (through its IPC buffer), the faulting thread
/// `cur`, running on this CPU, builds no message and queues nothing: it writes the
/// exception straight into the handler's buffer with a send-once right to its reply port
/// `reply`, blocks there with the [`Resume::ExceptionReply`] continuation and hands its
/// kernel stack to the handler, whose receive it has finished (recognition). The rights
/// move as [`kern::ipc::Ipc::send_kernel`] and the handler's receive would move them.
/// Returns, having changed nothing, when the handler is not waiting so (or is this thread,
/// pinned elsewhere, being killed, or has no room for the reply right) or this thread is
/// being killed; the general path then sends the message.
fn raise_fast(k: &mut Kernel, cur: ThreadId, port: PortId, reply: PortId, head: &Head) {
    let cpu = gdt::this_cpu();
    let Some(plan) = k.ipc.fast_plan_kernel(port, reply, EXC_RAISE, RAISE_SIZE) else {
        return;
    };
    let h = plan.receiver;
    let Some((th, ht)) = k.threads.get2_mut(cur, h) else {
        return;
    };
    let (th, ht) = (&mut **th, &mut **ht);
    let [r_opts, r_name, ..] = ht.ctx.frame.syscall_args().1;
    let Some((_, r_page)) = ht.ctx.ipc_buffer else {
        return;
    };
    if th.stack.is_none()
        || th.kill_pending
        || ht.stack.is_some()
        || ht.cont.map(|c| c.point) != Some(Resume::Receive)
        || r_opts & (MSG_BUF | MSG_SLOW) != 0
        || ht.kill_pending
        || (ht.pinned && ht.cpu != cpu)
    {
        return;
    }
    let Some(c) = k.cpus.get_mut(cpu) else {
        return;
    };
    let Some(handler_task) = k.tasks.by_key_mut(ht.ctx.task_key) else {
        return;
    };
    let Some(out) = k
        .ipc
        .fast_commit_call(&mut handler_task.names, &plan, r_name, cur)
    else {
        return;
    };
    // From here on the exception is delivered.
    paging::write_header(r_page, out);
    // The exception's words go from the faulting thread's frame straight into the
    // handler's buffer.
    // (`ExceptionInfo`'s words: the head's five, then the registers in `UserRegs`' order.)
    let at = r_page.0 + HEADER_SIZE as u64;
    paging::write_words(
        PhysAddr(at),
        [head.kind, head.error, head.addr, head.thread, head.task],
    );
    let regs_at = at + 8 * HEAD_WORDS as u64;
    th.ctx.frame.for_each_user_reg(|i, w| {
        paging::write_words(PhysAddr(regs_at + 8 * i as u64), [w]);
    });
    ht.ctx.frame.rax = 0;
    ht.exc_hint = true;
    if let Some(timer) = ht.timer.take() {
        k.timers.cancel(timer);
    }
    th.timer = None;
    // Counted as a fast transfer (a recognition, an IPC block and a stack handoff too).
    k.fast_transfers += 1;
    k.stats.exc_fast += 1;
    let blocked = Blocked::Receive { port: reply };
    let root = k.kernel_root;
    hand_over(c, root, cpu, th, (blocked, Resume::ExceptionReply), (h, ht))
}

/// The end of either leg of the exception fast path: the running thread `th` of `cpu`
/// (`c`) blocks as `blocked`, to resume with `resume`, and thread `t` (`tt`), whose wait
/// was just finished for it (recognition), takes its kernel stack and returns to user mode.
#[inline(always)]
fn hand_over(
    c: &mut kernel::Cpu,
    kernel_root: PhysAddr,
    cpu: usize,
    th: &mut Thread,
    (blocked, resume): (Blocked, Resume),
    (t, tt): (ThreadId, &mut Thread),
) -> ! {
    th.state = ThreadState::Blocked(blocked);
    th.cont = Some(Continuation::new(resume));
    tt.cont = None;
    tt.stack = th.stack.take();
    kernel::charge(c, th);
    kernel::switch_in_handoff(c, kernel_root, cpu, t, tt);
    kernel::leave_to_user()
}

/// Whether blocked thread `h` may take over the running stack on `cpu` at once.
fn can_hand_off(k: &Kernel, h: ThreadId, cpu: usize) -> bool {
    k.threads.get(h).is_some_and(|t| {
        t.stack.is_none()
            && t.cont.is_some_and(|c| c.point == Resume::Receive)
            && !(t.pinned && t.cpu != cpu)
            && !t.kill_pending
    })
}

/// Continuation [`Resume::ExceptionReply`] of thread `t` (current, on a fresh stack): a
/// message arrived on its exception reply port. Applies the handler's reply and returns to
/// user mode, or ends the task.
pub fn continue_reply(k: &mut Kernel, t: ThreadId) -> ! {
    let reply = k.threads.get(t).and_then(|th| th.exc_reply);
    let mut fx = crate::ipc::effects(k);
    let msg = reply.and_then(|p| k.ipc.dequeue(p, &mut fx));
    let Some(msg) = msg else {
        // Woken with nothing queued: wait again.
        crate::ipc::apply(k, fx);
        if let Some(p) = reply.and_then(|p| k.ipc.port_mut(p)) {
            p.receivers.push_back(t);
        }
        if let (Some(th), Some(port)) = (k.threads.get_mut(t), reply) {
            th.state = ThreadState::Blocked(Blocked::Receive { port });
        }
        thread::thread_block_with(k, Continuation::new(Resume::ExceptionReply));
    };
    let action = match msg.id {
        NOTIFY_SEND_ONCE => None,
        _ => ExcReply::from_bytes(&msg.data),
    };
    k.ipc.destroy_message(msg, &mut fx);
    crate::ipc::apply(k, fx);
    let resumed = match action {
        Some(ExcReply::Retry) => true,
        Some(ExcReply::Set(regs)) => set_regs(k, t, &regs).is_ok(),
        Some(ExcReply::Kill) | None => false,
    };
    if !resumed {
        let why = match action {
            None => "no reply from the exception handler",
            Some(ExcReply::Kill) => "the exception handler ended the task",
            Some(_) => "the exception handler's registers are invalid",
        };
        k.report(format_args!("killed: {why}"));
        if let Some(task) = k.current_task() {
            k.end_task(task, Ending::Killed);
        }
        thread::thread_terminate_current(k);
    }
    crate::kernel::finish_entry(k, false, None)
}

/// Writes a handler's registers into thread `t`'s frame, after checking them.
pub fn set_regs(k: &mut Kernel, t: ThreadId, r: &UserRegs) -> Result<(), Error> {
    let r = checked_regs(r)?;
    let th = k.threads.get_mut(t).ok_or(Error::InvalidArgument)?;
    th.ctx.frame.set_user_regs(&r);
    Ok(())
}

/// Registers a handler asks for, as a user thread may have them: `rip` and `rsp` in the
/// user half ([`Error::BadAddress`] otherwise), and only the arithmetic and direction
/// flags of `rflags` taken (interrupts stay on).
fn checked_regs(r: &UserRegs) -> Result<UserRegs, Error> {
    let (rip, rsp, rflags) = checked_pc_sp_flags(r.rip, r.rsp, r.rflags)?;
    Ok(UserRegs {
        rip,
        rsp,
        rflags,
        ..*r
    })
}

/// [`checked_regs`]' checks of the three registers they concern: `rip` and `rsp` as they
/// are, `rflags` with only the flags a user thread may set.
#[inline(always)]
fn checked_pc_sp_flags(rip: u64, rsp: u64, rflags: u64) -> Result<(u64, u64, u64), Error> {
    if rip >= USER_END || rsp >= USER_END {
        return Err(Error::BadAddress);
    }
    Ok((rip, rsp, (rflags & USER_FLAGS) | FORCED_FLAGS))
}

/// The reply half of the exception fast path (seed 000 section 2.5), tried by the general
/// `ipc_msg` path when the RPC fast path declined a message of the running thread of `cpu`
/// (the handler) whose receiver waits with the [`Resume::ExceptionReply`] continuation
/// (`Cpu::exc_reply_hint`). For a reply through a send-once right to a faulting thread's
/// reply port, sent from the handler's IPC buffer with `ipc_msg(SEND | RECEIVE)` and no
/// timeout, the reply is applied at once — registers set, or left for a retry — the
/// send-once right is used up, the handler blocks in its receive and hands its kernel stack
/// to the faulting thread, which returns to user mode (recognition: its continuation is
/// not run). Returns, having changed nothing, for anything else: a reply that ends the task
/// or is malformed, or anything `fastpath::try_ipc` would decline for an RPC (a pinned,
/// killed or less urgent thread, a message waiting on the handler's port); the general
/// path then delivers the reply, which [`continue_reply`] reads.
#[inline(never)]
pub fn reply_fast(k: &mut Kernel, cpu: usize) {
    // SAFETY: the running thread of this CPU is in this system call; the reference is
    // dropped before any other reference to a thread is made.
    let th = unsafe { crate::thread::current_mut() };
    let (cur, [opts, rcv_name, timeout, ..]) = (th.id, th.ctx.frame.syscall_args().1);
    let (Some((_, page)), true) = (th.ctx.ipc_buffer, opts == MSG_SEND | MSG_RECEIVE) else {
        return;
    };
    let header = paging::read_header(page);
    if header.bits != REPLY_BITS || timeout != FOREVER {
        return;
    }
    let Some(names) = k.tasks.by_key(th.ctx.task_key).map(|t| &t.names) else {
        return;
    };
    // The plan finds the destination, a send-once right (the header's bits): the thread
    // that waits on it must be the faulting thread whose exception reply port it is
    // (checked below), a port the kernel receives on; no other lookup is made first (this
    // path runs only when a hint says a faulting thread is answered).
    let plan = match k.ipc.fast_plan(names, &header, IPC_BUFFER_SIZE, rcv_name) {
        Some(Fast::Transfer(plan)) if !plan.msg.call => plan,
        _ => return,
    };
    let plan = &plan;
    // The reply is read in place, word by word (no copy of its bytes).
    let n = plan.msg.size.saturating_sub(HEADER_SIZE);
    let data = page.0 + HEADER_SIZE as u64;
    let word = |i: usize| paging::read_word(PhysAddr(data + 8 * i as u64));
    // Only the action and the three registers the kernel checks are read now; the others
    // go from the buffer to the frame once the reply is committed.
    let regs = match ExcReply::action_of(n, word) {
        Some(ExcAction::Retry) => None,
        Some(ExcAction::Set { rip, rsp, rflags }) => match checked_pc_sp_flags(rip, rsp, rflags) {
            Ok(checked) => Some(checked),
            Err(_) => return,
        },
        Some(ExcAction::Kill) | None => return,
    };
    let t = plan.receiver;
    let Some((th, tt)) = k.threads.get2_mut(cur, t) else {
        return;
    };
    let (th, tt) = (&mut **th, &mut **tt);
    let Some(c) = k.cpus.get_mut(cpu) else {
        return;
    };
    let urgent = c.runq.peek_priority().is_none_or(|p| p <= tt.priority);
    // A handler on a virtual processor takes the general path, whose receive gives its
    // processor a Block upcall.
    if th.stack.is_none()
        || th.kill_pending
        || th.vp
        || tt.stack.is_some()
        || tt.cont.map(|c| c.point) != Some(Resume::ExceptionReply)
        || tt.exc_reply != Some(plan.msg.dest)
        || tt.kill_pending
        || (tt.pinned && tt.cpu != cpu)
        || !urgent
    {
        return;
    }
    let Some(handler_task) = k.tasks.by_key_mut(th.ctx.task_key) else {
        return;
    };
    if k.ipc
        .fast_commit_reply(&mut handler_task.names, plan, 0, cur)
        .is_none()
    {
        return;
    }
    // From here on the reply is delivered.
    if let Some((rip, rsp, rflags)) = regs {
        let word = |i: usize| word(ExcReply::set_word(i));
        tt.ctx.frame.set_user_regs_with(word, rip, rsp, rflags);
    }
    k.fast_transfers += 1;
    k.stats.exc_fast += 1;
    let blocked = Blocked::Receive { port: plan.own };
    let root = k.kernel_root;
    hand_over(c, root, cpu, th, (blocked, Resume::Receive), (t, tt))
}

/// `exception_port_set(target, name)` by task `id`.
pub fn sys_exception_port_set(
    k: &mut Kernel,
    id: TaskId,
    target: u64,
    name: u64,
) -> Result<u64, Error> {
    let thread = match target {
        0 => None,
        t => {
            let t = kern::slab::Key(t);
            match k.threads.get(t) {
                Some(th) if th.home_task() == Some(id) => Some(t),
                _ => return Err(Error::NotFound),
            }
        }
    };
    let port = match name {
        0 => None,
        n => {
            let task = k.tasks.get(&id).ok_or(Error::InvalidArgument)?;
            Some(k.ipc.hold_send(&task.names, n)?)
        }
    };
    let old = match thread {
        Some(t) => k
            .threads
            .get_mut(t)
            // Its home activation's: while the thread runs in a server its call migrated
            // into, the running context is the server's, and its exceptions are not this
            // task's to handle.
            .and_then(|th| core::mem::replace(&mut th.home_ctx_mut().exc_port, port)),
        None => k
            .tasks
            .get_mut(&id)
            .and_then(|task| core::mem::replace(&mut task.exc_port, port)),
    };
    release(k, old, None);
    Ok(0)
}

/// Gives back the kernel's exception rights of a thread or task that is going away: its
/// exception port's send right and its exception reply port.
pub fn release(k: &mut Kernel, exc_port: Option<PortId>, exc_reply: Option<PortId>) {
    let mut fx = crate::ipc::effects(k);
    if let Some(p) = exc_port {
        k.ipc.release_held_send(p, &mut fx);
    }
    if let Some(p) = exc_reply {
        k.ipc.destroy_kernel(p, &mut fx);
    }
    crate::ipc::apply(k, fx);
}
