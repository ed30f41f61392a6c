//! The RPC fast path: a request or a reply goes from the caller's IPC buffer straight into
//! a waiting receiver's, and the caller's kernel stack goes with it.
//!
//! This is the continuations paper's Figure 2 as a single straight line, in the manner of
//! seL4's `fastpath_call` and `fastpath_reply_recv`: `on_syscall` tries it first for every
//! `ipc_msg`, and it either completes the whole call — send, recognition of the
//! receiver's continuation, block on the caller's own port, stack handoff, return to user
//! mode in the receiver — or returns having changed nothing, and the general path of
//! `crate::ipc` runs. It takes the call when:
//!
//! - the options are exactly `MSG_SEND | MSG_RECEIVE` with no timeout, through the
//!   caller's IPC buffer;
//! - the message is one of the two RPC forms of `kern::ipc::fast` (a request with a
//!   send-once reply right, or the reply through that right; no descriptors);
//! - the port the caller receives on has no queued message (else the receive would not
//!   block);
//! - the destination port has no queued message and a receiver blocked with the
//!   [`Resume::Receive`] continuation, through its IPC buffer, in another task, not
//!   pinned to another CPU, not being killed, at least as urgent as anything ready here,
//!   and its name space has room for the reply right.
//!
//! Everything it decides is read first; nothing is written until every check passed.
//! Every transfer is counted as the general fast path counts it (`ipc_fast`,
//! `recognitions`, `blocks_ipc`, `stack_handoffs`).

use crate::arch::{gdt, paging};
use crate::kernel::Kernel;
use crate::thread::{self, Blocked, ThreadId, ThreadState};
use baton_abi::ipc::{HEADER_SIZE, IPC_BUFFER_SIZE, MSG_BUF, MSG_RECEIVE, MSG_SEND, MSG_SLOW};
use baton_abi::FOREVER;
use kern::continuation::{Continuation, Resume};
use kern::frame::PhysAddr;

/// Tries the fast path for the `ipc_msg` of the running thread `cur`. Returns only when it
/// does not apply, having changed nothing.
#[inline(always)]
pub fn try_ipc(k: &mut Kernel, cur: ThreadId) {
    let cpu = gdt::this_cpu();
    let Some(th) = k.threads.get(cur) else {
        return;
    };
    let [opts, rcv_name, timeout, ..] = th.frame.syscall_args().1;
    if opts != MSG_SEND | MSG_RECEIVE || timeout != FOREVER {
        return;
    }
    let (Some((_, page)), Some(task)) = (th.ipc_buffer, th.task) else {
        return;
    };
    let header = paging::read_header(page);
    let Some(names) = k.tasks.get(&task).map(|t| &t.names) else {
        return;
    };
    let Some(m) = k.ipc.fast_decode(names, &header, IPC_BUFFER_SIZE) else {
        return;
    };
    let Ok(own) = k.ipc.receive_port(names, rcv_name) else {
        return;
    };
    if own == m.dest || k.ipc.port(own).is_none_or(|p| !p.queue.is_empty()) {
        return;
    }
    let Some(r) = k
        .ipc
        .port(m.dest)
        .filter(|p| p.queue.is_empty())
        .and_then(|p| p.receivers.front())
    else {
        return;
    };
    let Some(rt) = k.threads.get(r) else {
        return;
    };
    let [r_opts, r_name, ..] = rt.frame.syscall_args().1;
    let (Some((_, r_page)), Some(r_task)) = (rt.ipc_buffer, rt.task) else {
        return;
    };
    let urgent = k
        .cpu(cpu)
        .runq
        .peek_priority()
        .is_none_or(|p| p <= rt.priority);
    if r_task == task
        || r_opts & (MSG_BUF | MSG_SLOW) != 0
        || rt.stack.is_some()
        || rt.cont.map(|c| c.point) != Some(Resume::Receive)
        || rt.kill_pending
        || (rt.pinned && rt.cpu != cpu)
        || !urgent
    {
        return;
    }
    let Some(rt) = k.tasks.get_mut(&r_task) else {
        return;
    };
    if rt.names.room() < usize::from(m.reply.is_some()) {
        return;
    }

    // Every check passed: from here on the call completes.
    let out = k.ipc.fast_give(&mut rt.names, &m, r_name);
    if m.consumed.is_some() {
        if let Some(t) = k.tasks.get_mut(&task) {
            k.ipc.fast_take(&mut t.names, &m);
        }
    }
    paging::write_header(r_page, out);
    let data = m.size - HEADER_SIZE;
    if data > 0 {
        let at = HEADER_SIZE as u64;
        paging::copy_phys(PhysAddr(r_page.0 + at), PhysAddr(page.0 + at), data);
    }
    if let Some(p) = k.ipc.port_mut(m.dest) {
        p.receivers.pop_front();
    }
    if let Some(p) = k.ipc.port_mut(own) {
        p.receivers.push_back(cur);
    }
    if let Some(rt) = k.threads.get_mut(r) {
        rt.frame.rax = 0;
        rt.cont = Some(Continuation::new(Resume::UserReturn));
        if let Some(timer) = rt.timer.take() {
            k.timers.cancel(timer);
        }
    }
    if let Some(t) = k.threads.get_mut(cur) {
        t.state = ThreadState::Blocked(Blocked::Receive { port: own });
    }
    k.stats.ipc_fast += 1;
    k.stats.recognitions += 1;
    k.stats.blocks_ipc += 1;
    thread::thread_handoff(k, cpu, cur, Continuation::new(Resume::Receive), r)
}
