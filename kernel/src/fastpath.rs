//! The RPC fast path: a request or a reply goes from the caller's IPC buffer straight into
//! a waiting receiver's, and the caller's kernel stack goes with it.
//!
//! This is the continuations paper's Figure 2 as a single straight line, in the manner of
//! seL4's `fastpath_call` and `fastpath_reply_recv`: the system-call entry tries it first
//! for every `ipc_msg` (`syscall::on_ipc_fast`, before `on_syscall`), and it either
//! completes the whole call — send, recognition of the receiver's continuation, block on
//! the caller's own port, stack handoff, return to user mode in the receiver — or returns
//! having changed nothing, and the general path of `crate::ipc` runs. It takes the call
//! when:
//!
//! - the options are exactly `MSG_SEND | MSG_RECEIVE` with no timeout, through the
//!   caller's IPC buffer, and the caller is no virtual processor's thread (its receive
//!   must give the processor a Block upcall, which the general path does);
//! - the message is one of the two RPC forms of `kern::ipc::fast` (a request with a
//!   send-once reply right, or the reply through that right; no descriptors);
//! - the port the caller receives on has no queued message (else the receive would not
//!   block);
//! - the destination port has no queued message and a receiver blocked with the
//!   [`Resume::Receive`] continuation, through its IPC buffer, in another task, not
//!   pinned to another CPU, not being killed, and at least as urgent as anything ready
//!   here; and, for a request, the receiver's name space has room for the reply right.
//!
//! Everything it decides is read first; nothing is written until every check passed (the
//! rights' commit, which does all or nothing, is the last check).
//! Every transfer is counted as the general fast path counts it (`ipc_fast`,
//! `recognitions`, `blocks_ipc`, `stack_handoffs`), through one counter
//! (`Kernel::fast_transfers`) that the statistics add to those four.

use crate::arch::paging;
use crate::kernel::{self, Kernel, Task};
use crate::thread::{Blocked, Thread, ThreadState};
use baton_abi::ipc::{HEADER_SIZE, IPC_BUFFER_SIZE, MSG_BUF, MSG_RECEIVE, MSG_SEND, MSG_SLOW};
use baton_abi::FOREVER;
use kern::continuation::{Continuation, Resume};
use kern::frame::PhysAddr;
use kern::ipc::fast::REPLY_BITS;
use kern::ipc::Fast;

/// Tries the fast path for the `ipc_msg` of the running thread of CPU `cpu`. Returns only
/// when it does not apply, having changed nothing.
#[inline(always)]
pub fn try_ipc(k: &mut Kernel, cpu: usize) {
    // Decide: the caller's side. The caller is reached through the per-CPU pointer.
    // SAFETY: the caller runs on this CPU (it is in this system call) and nothing else
    // refers to it here; below it is kept only as a raw pointer across the other lookups.
    let th = unsafe { crate::thread::current_mut() };
    let [opts, rcv_name, timeout, ..] = th.ctx.frame.syscall_args().1;
    // A virtual processor's thread (`vp`) takes the general path, whose receive gives its
    // processor a Block upcall.
    let (Some((_, page)), false, true) = (
        th.ctx.ipc_buffer,
        th.kill_pending | th.vp,
        th.stack.is_some(),
    ) else {
        return;
    };
    if opts != MSG_SEND | MSG_RECEIVE || timeout != FOREVER {
        return;
    }
    let header = paging::read_header(page);
    // The two directions as two copies of one path, each specialised to its message (the
    // compiler keeps fewer values live in each): a reply's bits are exactly `REPLY_BITS`;
    // anything else is a call or declined.
    if header.bits == REPLY_BITS {
        transfer::<false>(k, cpu, th, page, &header, rcv_name)
    } else {
        transfer::<true>(k, cpu, th, page, &header, rcv_name)
    }
}

/// The fast path for a message already read (`header`, from the caller's buffer `page`):
/// a call (`CALL`) or a reply. Returns only when it does not apply, having changed nothing.
#[inline(always)]
fn transfer<const CALL: bool>(
    k: &mut Kernel,
    cpu: usize,
    th: &mut Thread,
    page: PhysAddr,
    header: &baton_abi::ipc::MsgHeader,
    rcv_name: u64,
) {
    let cur = th.id;
    let s_key = th.ctx.task_key;
    // Each object is looked up once: the two threads (boxed, so they stay put) and the
    // two tasks are kept as pointers across the lookups of the others.
    let th: *mut Thread = th;
    // SAFETY: a running user thread's `task_key` is its task's key, which the task slab
    // handed out (`kern::idslab::IdSlab::key_of` or `insert`): the task may have gone (then
    // `None`), its slot has not (`kern::slab::Slab::get_held`). A context made by
    // `Context::default` has the never-valid key 0, whose slot 0 exists once any task was
    // made, as it was before any user thread runs.
    let Some(sender) = (unsafe { k.tasks.by_held_key_mut(s_key) }) else {
        return;
    };
    let plan = match k
        .ipc
        .fast_plan(&sender.names, header, IPC_BUFFER_SIZE, rcv_name)
    {
        Some(Fast::Transfer(plan)) if plan.msg.call == CALL => plan,
        Some(Fast::Migrate(port)) if CALL => {
            // SAFETY: `th` points into the boxed thread `cur`, alive and unmoved (only
            // lookups happened since it was taken, under the big kernel lock).
            let sidetracked = unsafe { (*th).sidetracked };
            crate::activation::migrate(k, cpu, cur, page, header, port, sidetracked)
        }
        _ => return,
    };
    let sender: *mut Task = sender;
    // The receiver's side.
    let r = plan.receiver;
    if r == cur {
        return;
    }
    // The thread itself, not its box: one load less at every use.
    // SAFETY: a port's receivers are threads' own ids, keys the thread slab handed out.
    let Some(rt) = (unsafe { k.threads.get_held_mut(r) }).map(|b| &mut **b) else {
        return;
    };
    let [r_opts, r_name, ..] = rt.ctx.frame.syscall_args().1;
    let Some(c) = k.cpus.get_mut(cpu) else {
        return;
    };
    // An exception handler's reply has a fast path of its own, which the general path
    // tries when told so (kept out of this function's code).
    let exc_reply = |c: &mut kernel::Cpu, rt: &Thread| {
        c.exc_reply_hint = rt.cont.map(|c| c.point) == Some(Resume::ExceptionReply);
    };
    let Some((_, r_page)) = rt.ctx.ipc_buffer else {
        exc_reply(c, rt);
        return;
    };
    let urgent = c.runq.peek_priority().is_none_or(|p| p <= rt.priority);
    if rt.ctx.task_key == s_key
        || r_opts & (MSG_BUF | MSG_SLOW) != 0
        || rt.stack.is_some()
        || rt.cont.map(|c| c.point) != Some(Resume::Receive)
        || rt.kill_pending
        || (rt.pinned && rt.cpu != cpu)
        || !urgent
    {
        exc_reply(c, rt);
        return;
    }
    // Every check of the threads passed. The rights: a request changes the receiver's
    // name space only, a reply the sender's only; either commit does all or nothing.
    let out = if CALL {
        // SAFETY: as for the sender's: a blocked user thread's `task_key` is a key the
        // task slab handed out.
        let Some(receiver) = (unsafe { k.tasks.by_held_key_mut(rt.ctx.task_key) }) else {
            return;
        };
        k.ipc
            .fast_commit_call(&mut receiver.names, &plan, r_name, cur)
    } else {
        // SAFETY: `sender` points into the task slab entry `s_key`, alive: nothing has been
        // inserted into or removed from the slab since it was taken (we hold the big kernel
        // lock and only looked threads up), and no other reference to a task is in use.
        let sender = unsafe { &mut *sender };
        k.ipc
            .fast_commit_reply(&mut sender.names, &plan, r_name, cur)
    };
    let Some(out) = out else {
        return;
    };
    // From here on the call completes.
    // SAFETY: `th` points into the boxed thread `cur`, alive and unmoved (only lookups
    // happened since it was taken, under the big kernel lock), and `cur != r`, so this
    // reference aliases not `rt`.
    let th = unsafe { &mut *th };
    paging::write_header(r_page, out);
    let data = plan.msg.size - HEADER_SIZE;
    if data > 0 {
        let at = HEADER_SIZE as u64;
        paging::copy_phys(PhysAddr(r_page.0 + at), PhysAddr(page.0 + at), data);
    }
    // The receiver's receive is finished here (recognition: it resumes straight in user
    // mode), and the caller blocks in its own receive, handing the stack over.
    rt.ctx.frame.rax = 0;
    if let Some(timer) = rt.timer.take() {
        k.timers.cancel(timer);
    }
    th.state = ThreadState::Blocked(Blocked::Receive { port: plan.own });
    th.cont = Some(Continuation::new(Resume::Receive));
    rt.cont = None;
    rt.stack = th.stack.take();
    // Counted as an IPC fast transfer, a recognition, an IPC block and a stack handoff.
    // No CPU time is charged here (`kernel::charge`): the time since the CPU last charged
    // goes to whichever thread runs there at its next ordinary switch, so a client's calls
    // on this path and the server's work for them are charged together, not split.
    k.fast_transfers += 1;
    // `rt` is not pinned elsewhere (checked above) and takes this CPU's stack.
    kernel::switch_in_handoff(c, k.kernel_root, cpu, r, rt);
    kernel::leave_to_user()
}
