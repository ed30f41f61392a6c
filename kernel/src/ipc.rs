//! The message system calls: `ipc_msg` with its fast path, and the explicit port calls.
//!
//! The semantics live in `kern::ipc` (names, rights, queues, notifications); this module
//! moves bytes between user buffers and decides which path a message takes, as the
//! continuations paper's Figure 2 does for `mach_msg`:
//!
//! - **Fast path**: the destination port's queue is empty and a receiver is blocked on it
//!   with the [`Resume::Receive`] continuation and an IPC buffer. The sender copies the
//!   message straight into the receiver's buffer, moves the rights into the receiver's name
//!   space, and *recognises* the receiver's continuation: the receive is finished (its
//!   result written), so the receiver will just return to user mode. If the sender then
//!   receives too (an RPC), it blocks on its own port with the receive continuation and
//!   hands its kernel stack straight to the receiver (`thread_handoff`): no queue, no
//!   scheduler, no stack switch.
//! - **Slow path** (the general path): anything else. The message is copied into the
//!   kernel (its rights taken into a kernel message). When the port's queue is empty and
//!   its oldest receiver waits in the receive of `ipc_msg` into its IPC buffer, the
//!   sender's call runs that receive at once ([`hand_over`]: the message written once,
//!   into the receiver's buffer, the state changes those of a queued message received);
//!   otherwise it is queued, a blocked receiver is made ready and its continuation runs
//!   the receive again. A sender facing a full queue blocks with [`Resume::SendRetry`]
//!   and runs the call again when space frees up.
//!
//! Every transfer is counted by path (`Stats::ipc_fast`, `Stats::ipc_queued`), as Table 2
//! of the paper counts handoffs and recognitions.

use crate::arch::paging::KernelMem;
use crate::kernel::{Kernel, TaskId};
use crate::thread::{self, Blocked, ThreadId, ThreadState};
use crate::{arch::apic, arch::gdt};
use alloc::vec::Vec;
use baton_abi::ipc::{
    Descriptor, MsgHeader, DESCRIPTOR_SIZE, HEADER_SIZE, IPC_BUFFER_SIZE, MSG_BUF, MSG_OPTIONS,
    MSG_RECEIVE, MSG_SEND, MSG_SIZE_MAX, MSG_SLOW,
};
use baton_abi::{Error, FOREVER};
use kern::continuation::{Continuation, Resume};
use kern::frame::{PhysAddr, PAGE_SIZE};
use kern::ipc::{Effects, Ipc, PortId, Wake};
use kern::pmap::PhysMem;

/// Where a message is read from or written to.
#[derive(Clone, Copy, Debug)]
pub enum Buf {
    /// The thread's IPC buffer: one page whose frame is known (no page walk).
    Page(PhysAddr),
    /// A user buffer of a task, reached through `usercopy`.
    User {
        /// The task.
        task: TaskId,
        /// Its address.
        va: u64,
        /// Its size.
        len: usize,
    },
}

impl Buf {
    /// Size in bytes.
    fn len(&self) -> usize {
        match *self {
            Buf::Page(_) => IPC_BUFFER_SIZE,
            Buf::User { len, .. } => len,
        }
    }

    /// [`Error::TooLarge`] unless `len` bytes at `off` lie in the buffer.
    fn check(&self, off: usize, len: usize) -> Result<(), Error> {
        match off.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::TooLarge),
        }
    }

    /// Reads `out.len()` bytes at `off`.
    fn read(&self, k: &mut Kernel, off: usize, out: &mut [u8]) -> Result<(), Error> {
        self.check(off, out.len())?;
        match *self {
            Buf::Page(pa) => {
                let mem = KernelMem {
                    frames: &mut k.frames,
                };
                mem.read_bytes(PhysAddr(pa.0 + off as u64), out);
                Ok(())
            }
            Buf::User { task, va, .. } => k.copy_in(task, va + off as u64, out),
        }
    }

    /// Reads the message header at the start of the buffer (from an IPC buffer in one
    /// load of the frame, as the fast path reads it).
    #[inline(always)]
    fn read_header(&self, k: &mut Kernel) -> Result<MsgHeader, Error> {
        match *self {
            Buf::Page(pa) => Ok(crate::arch::paging::read_header(pa)),
            Buf::User { .. } => {
                let mut hb = [0u8; HEADER_SIZE];
                self.read(k, 0, &mut hb)?;
                MsgHeader::from_bytes(&hb).ok_or(Error::InvalidArgument)
            }
        }
    }

    /// Writes a message header at the start of the buffer (into an IPC buffer in one store
    /// to the frame).
    #[inline(always)]
    fn write_header(&self, k: &mut Kernel, h: &MsgHeader) -> Result<(), Error> {
        match *self {
            Buf::Page(pa) => {
                crate::arch::paging::write_header(pa, *h);
                Ok(())
            }
            Buf::User { .. } => self.write(k, 0, &h.to_bytes()),
        }
    }

    /// Reads the `len` bytes at `off` into a new vector, each byte written once (a
    /// message's data: never zeroed first).
    fn read_vec(&self, k: &mut Kernel, off: usize, len: usize) -> Result<Vec<u8>, Error> {
        self.check(off, len)?;
        match *self {
            Buf::Page(pa) => {
                let mem = KernelMem {
                    frames: &mut k.frames,
                };
                let mut out = Vec::new();
                out.try_reserve_exact(len).map_err(|_| Error::NoMemory)?;
                if len > 0 {
                    mem.append_bytes(PhysAddr(pa.0 + off as u64), len, &mut out);
                }
                Ok(out)
            }
            Buf::User { task, va, .. } => k.copy_in_vec(task, va + off as u64, len),
        }
    }

    /// Writes `data` at `off`.
    fn write(&self, k: &mut Kernel, off: usize, data: &[u8]) -> Result<(), Error> {
        self.check(off, data.len())?;
        match *self {
            Buf::Page(pa) => {
                let mut mem = KernelMem {
                    frames: &mut k.frames,
                };
                mem.write_bytes(PhysAddr(pa.0 + off as u64), data);
                Ok(())
            }
            Buf::User { task, va, .. } => k.copy_out(task, va + off as u64, data),
        }
    }
}

/// Copies `len` bytes from `src` at `off` to `dst` at `off`.
fn copy_between(k: &mut Kernel, src: &Buf, dst: &Buf, off: usize, len: usize) -> Result<(), Error> {
    if let (Buf::Page(s), Buf::Page(d)) = (src, dst) {
        if off + len <= IPC_BUFFER_SIZE {
            crate::arch::paging::copy_phys(
                PhysAddr(d.0 + off as u64),
                PhysAddr(s.0 + off as u64),
                len,
            );
            return Ok(());
        }
    }
    let mut chunk = [0u8; 256];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(chunk.len());
        let part = chunk.get_mut(..n).ok_or(Error::TooLarge)?;
        src.read(k, off + done, part)?;
        dst.write(k, off + done, part)?;
        done += n;
    }
    Ok(())
}

/// The task a caller runs in: its id, and the key its thread caches for it (`Thread::
/// task_key`), through which the general path reaches the task in one slab lookup.
#[derive(Clone, Copy, Debug)]
struct Caller {
    id: TaskId,
    key: kern::slab::Key,
}

impl Caller {
    /// The task.
    #[inline]
    fn task(self, k: &Kernel) -> Option<&crate::kernel::Task> {
        k.tasks.get_keyed(self.id, self.key)
    }
}

/// The task of thread `t` (the caller) and the buffer of its `ipc_msg` with these
/// options, from one look at the thread.
#[inline(always)]
fn caller_buf(k: &Kernel, t: ThreadId, opts: u64, args: MsgArgs) -> Result<(Caller, Buf), Error> {
    caller_buf_of(k.threads.get(t).ok_or(Error::InvalidArgument)?, opts, args)
}

/// [`caller_buf`] of the thread itself.
#[inline(always)]
fn caller_buf_of(
    th: &crate::thread::Thread,
    opts: u64,
    args: MsgArgs,
) -> Result<(Caller, Buf), Error> {
    let (task, key, page) = (th.ctx.task, th.ctx.task_key, th.ctx.ipc_buffer);
    let task = task.ok_or(Error::InvalidArgument)?;
    let me = Caller { id: task, key };
    if opts & MSG_BUF != 0 {
        let len = usize::try_from(args.buf_size).map_err(|_| Error::TooLarge)?;
        if len > MSG_SIZE_MAX {
            return Err(Error::TooLarge);
        }
        return Ok((
            me,
            Buf::User {
                task,
                va: args.buf,
                len,
            },
        ));
    }
    match page {
        Some((_, pa)) => Ok((me, Buf::Page(pa))),
        None => Err(Error::InvalidArgument),
    }
}

/// The arguments of an `ipc_msg`, as saved in the caller's frame.
#[derive(Clone, Copy, Debug)]
struct MsgArgs {
    opts: u64,
    rcv_name: u64,
    timeout: u64,
    buf: u64,
    buf_size: u64,
}

impl MsgArgs {
    fn from(a: [u64; 6]) -> MsgArgs {
        MsgArgs {
            opts: a[0],
            rcv_name: a[1],
            timeout: a[2],
            buf: a[3],
            buf_size: a[4],
        }
    }

    /// The arguments of thread `t`'s pending call.
    fn of(k: &Kernel, t: ThreadId) -> Option<MsgArgs> {
        k.threads
            .get(t)
            .map(|th| MsgArgs::from(th.ctx.frame.syscall_args().1))
    }
}

/// What the send phase did.
enum Sent {
    /// The message was queued (slow path).
    Queued,
    /// The message went straight into this receiver's buffer (fast path); the receiver's
    /// call is finished and it is ready to return to user mode, but not yet queued to run.
    Delivered(ThreadId),
    /// As `Delivered`, to a receiver the sender may hand its processor to when it blocks
    /// ([`may_hand_to`] already asked).
    Handable(ThreadId),
}

/// `ipc_msg(options, rcv_name, timeout_ns, buf, buf_size)` by the running thread `cur`.
/// Returns the call's result, unless the thread blocks (then it does not return).
pub fn sys_ipc_msg(k: &mut Kernel, cur: ThreadId, a: [u64; 6]) -> u64 {
    // (An exception handler's reply to a waiting faulting thread was tried by the entry,
    // `syscall::on_ipc_fast`, right after the RPC fast path declined it.)
    match ipc_msg(k, cur, MsgArgs::from(a)) {
        Ok(()) => 0,
        Err(e) => e.to_raw(),
    }
}

fn ipc_msg(k: &mut Kernel, cur: ThreadId, args: MsgArgs) -> Result<(), Error> {
    // A call to a port with activations migrates (and does not return here).
    crate::activation::try_migrate(k, gdt::this_cpu(), cur);
    let opts = args.opts;
    if opts & !MSG_OPTIONS != 0 || opts & (MSG_SEND | MSG_RECEIVE) == 0 {
        return Err(Error::InvalidArgument);
    }
    let (me, buf) = caller_buf(k, cur, opts, args)?;
    let mut handoff = None;
    if opts & MSG_SEND != 0 {
        match send(k, cur, me, &buf, args)? {
            Sent::Queued => {}
            Sent::Handable(r) if opts & MSG_RECEIVE != 0 => handoff = Some(r),
            Sent::Delivered(r) if opts & MSG_RECEIVE != 0 && may_hand_to(k, r) => handoff = Some(r),
            Sent::Delivered(r) | Sent::Handable(r) => {
                thread::thread_setrun(k, r);
                if opts & MSG_RECEIVE == 0 {
                    return Ok(());
                }
            }
        }
    }
    if opts & MSG_RECEIVE != 0 {
        return receive(k, cur, me, &buf, args, handoff);
    }
    Ok(())
}

/// The send phase: the message in `buf` goes to its destination, by the fast path when a
/// receiver is waiting, else into the queue; a full queue blocks (or fails with
/// `WouldBlock` when the timeout is 0).
fn send(
    k: &mut Kernel,
    cur: ThreadId,
    me: Caller,
    buf: &Buf,
    args: MsgArgs,
) -> Result<Sent, Error> {
    let task = me.id;
    let header = buf.read_header(k)?;
    Ipc::<ThreadId>::check_header(&header, buf.len())?;
    let names = &me.task(k).ok_or(Error::InvalidArgument)?.names;
    // The destination, resolved once: `copyin` below reuses it.
    let resolved = k.ipc.resolve_dest(names, &header)?;
    let dest = resolved.port();
    let n = header.descriptors();
    let data_off = HEADER_SIZE + n * DESCRIPTOR_SIZE;
    let data_len = header.size as usize - data_off;

    // One look at the port: the kernel object it stands for, whether its queue is full,
    // and whether a receiver waits on its empty queue (then the message is likely handed
    // over, never queued: see the charge below).
    let (tag, full, waited) = k.ipc.port(dest).map_or((None, false, false), |p| {
        (
            p.object(),
            p.is_full(),
            p.queue.is_empty() && !p.receivers.is_empty(),
        )
    });
    // A kernel object's port: the kernel does the operation now and replies.
    if let Some(obj) = crate::kobject::object_of(tag) {
        let descriptors = read_descriptors(k, buf, n)?;
        let data = buf.read_vec(k, data_off, data_len)?;
        crate::kobject::invoke(k, task, &header, &descriptors, data, obj)?;
        return Ok(Sent::Queued);
    }

    if args.opts & MSG_SLOW == 0 {
        if let Some(r) = fast_receiver(k, dest, header.size as usize, n) {
            let descriptors = read_descriptors(k, buf, n)?;
            // Out-of-line regions take the general path below (`ool.rs`).
            if !crate::ool::has_ool(&descriptors) {
                return deliver(
                    k,
                    task,
                    buf,
                    &header,
                    &descriptors,
                    dest,
                    r,
                    data_off,
                    data_len,
                );
            }
        }
    }

    // A message through a send-once right (a reply) is never held up by the queue limit,
    // as in Mach: a client's full reply port must not wedge its server. There are only as
    // many such messages as send-once rights, which name spaces bound.
    let once = header.dest_disposition() == baton_abi::ipc::Disposition::MoveSendOnce as u8;
    if full && !once {
        if args.timeout == 0 {
            return Err(Error::WouldBlock);
        }
        if let Some(p) = k.ipc.port_mut(dest) {
            p.senders.try_push_back(cur).map_err(|_| Error::NoMemory)?;
        }
        block(k, Blocked::Send { port: dest }, args.timeout);
        k.stats.blocks_ipc += 1;
        // Nothing on this stack owns heap memory here: blocking abandons the stack.
        thread::thread_block_with(k, Continuation::new(Resume::SendRetry));
    }
    // A queued message is charged to its sender until it is received or destroyed, so
    // that no task can fill the kernel's heap with messages (`crate::quota`). One that a
    // waiting receiver takes at once is never queued and is not charged (as on the fast
    // path); should it be queued after all (the receiver cannot take it), it is charged
    // then, past the limit if need be ([`charge_queued`]): at most one such message per
    // moment a receiver waits on an empty queue.
    // The sender's account through its thread's cached task key (no search by id).
    let charge = if waited && n == 0 && header.size as usize <= IPC_BUFFER_SIZE {
        None
    } else {
        let account = &me.task(k).ok_or(Error::InvalidArgument)?.account;
        Some(crate::quota::heap(account, message_cost(n, data_len))?)
    };
    let descriptors = read_descriptors(k, buf, n)?;
    // No data (a null message): nothing to read or allocate (`check_header` bounded the
    // offset by the buffer already).
    let data = match data_len {
        0 => Vec::new(),
        _ => buf.read_vec(k, data_off, data_len)?,
    };
    if crate::ool::has_ool(&descriptors) {
        return queue_ool(k, task, &header, &descriptors, dest, data, charge);
    }
    let mut fx = crate::ipc::effects(k);
    let t = k
        .tasks
        .get_keyed_mut(me.id, me.key)
        .ok_or(Error::InvalidArgument)?;
    // The message stays where `copyin` wrote it (in the `Result`, not moved out) until
    // the queue takes it.
    let mut copied = k
        .ipc
        .copyin_to(&mut t.names, resolved, &header, &descriptors, data, &mut fx);
    let port = match &mut copied {
        Ok((port, msg)) => {
            msg.charge = charge;
            *port
        }
        Err(e) => {
            // Nothing moved; the lists go back for the next operation.
            let e = *e;
            apply(k, fx);
            return Err(e);
        }
    };
    k.stats.ipc_queued += 1;
    // A receiver waiting on the port takes the message at once, as if it had been queued
    // and taken by the receive its continuation would run again: the message is written
    // once into its buffer, never into the queue (see [`hand_over`]).
    let sent = match waiting_receiver(k, port) {
        Some(w) => hand_over(k, me, w, port, &mut copied, &mut fx),
        None => {
            if let Ok((_, mut msg)) = copied {
                charge_queued(k, me, &mut msg);
                k.ipc.enqueue(port, msg, &mut fx);
            }
            Sent::Queued
        }
    };
    apply(k, fx);
    Ok(sent)
}

/// What a queued message of `n` rights and `data_len` bytes of data costs its sender.
fn message_cost(n: usize, data_len: usize) -> usize {
    crate::quota::MESSAGE_BYTES + n * crate::quota::RIGHT_BYTES + data_len
}

/// Charges `msg`, admitted uncharged for a waiting receiver that did not take it, to its
/// sender `me` before it is queued: past the account's limit if need be (its rights have
/// moved already), which the sender's next charge sees.
#[cold]
fn charge_queued(k: &Kernel, me: Caller, msg: &mut kern::ipc::Message) {
    if msg.charge.is_some() {
        return;
    }
    if let Some(t) = me.task(k) {
        let cost = message_cost(msg.rights.len(), msg.data.len());
        msg.charge = Some(kern::quota::Account::charge_over(
            &t.account,
            kern::quota::Resource::Heap,
            cost as u64,
        ));
    }
}

/// A message made by `copyin`, where it was made.
type Copied = Result<(PortId, kern::ipc::Message), Error>;

/// A thread blocked receiving on a port, whose receive a sender can finish for it.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    /// The thread.
    thread: ThreadId,
    /// Its task.
    me: Caller,
    /// Its IPC buffer's frame.
    buf: PhysAddr,
    /// Its name for the port.
    rcv_name: u64,
}

/// The thread a message arriving on `port` would wake, if its receive can be finished
/// by the sender: the port's queue is empty and its oldest receiver is blocked in the
/// receive of `ipc_msg` on `port` with its continuation (not in the process model), into
/// its IPC buffer (whose writes cannot fault); not a virtual processor's thread (whose
/// wake its family sees) and not being ended.
fn waiting_receiver(k: &Kernel, port: PortId) -> Option<Waiting> {
    let p = k.ipc.port(port)?;
    if !p.queue.is_empty() {
        return None;
    }
    let t = p.receivers.front()?;
    let th = k.threads.get(t)?;
    let blocked_here = matches!(
        th.state,
        ThreadState::Blocked(Blocked::Receive { port: q }) if q == port
    );
    if !blocked_here
        || th.cont.map(|c| c.point) != Some(Resume::Receive)
        || th.stack.is_some()
        || th.vp
        || th.kill_pending
    {
        return None;
    }
    let args = MsgArgs::from(th.ctx.frame.syscall_args().1);
    if args.opts & MSG_BUF != 0 {
        return None;
    }
    let (_, buf) = th.ctx.ipc_buffer?;
    let me = Caller {
        id: th.ctx.task?,
        key: th.ctx.task_key,
    };
    // Its name still names `port`: a receive right leaves its space only by moving away or
    // dying, and both take every receiver off the port first (`kern::ipc`'s invariants),
    // so the name is not looked up again (the receive's continuation would find the same
    // port).
    debug_assert!(me.task(k).is_some_and(|t| k
        .ipc
        .receive_peek(&t.names, args.rcv_name)
        .is_ok_and(|(named, _)| named == port)));
    Some(Waiting {
        thread: t,
        me,
        buf,
        rcv_name: args.rcv_name,
    })
}

/// Hands `msg`, made for `port`, to the receiver `w` found by [`waiting_receiver`]: the
/// state changes are those of [`Ipc::enqueue`] (the receiver leaves the port's
/// receivers) followed by the receive its continuation would run ([`take_message`]:
/// the size check, [`Ipc::dequeue`]'s retry for the oldest blocked sender, the rights'
/// copyout, the writes), without the message passing through the queue. When the
/// receive fails (the message is larger than the buffer, or the receiver's name space has
/// no room for its rights) the message is queued as that receive would have left it and
/// the error is the receiver's result. The receiver then only has to return to user mode
/// (continuation recognition).
#[inline(always)]
fn hand_over(
    k: &mut Kernel,
    me: Caller,
    w: Waiting,
    port: PortId,
    copied: &mut Copied,
    fx: &mut Effects<ThreadId>,
) -> Sent {
    // One look at the port: the receiver leaves it, and when the message fits the buffer
    // (the receive takes it), the oldest sender blocked on a full queue gets its retry.
    let fits = matches!(copied, Ok((_, msg)) if msg.size() <= IPC_BUFFER_SIZE);
    if let Some(p) = k.ipc.port_mut(port) {
        p.receivers.pop_front();
        if fits {
            if let Some(s) = p.senders.pop_front() {
                fx.wake.push((s, Wake::Retry));
            }
        }
    }
    let result = match take_at_once(k, w, copied) {
        Ok(written) => written,
        Err(e) => {
            // The message stays, at the front of the queue, as the receive leaves it.
            if let Ok((_, mut msg)) = core::mem::replace(copied, Err(Error::InvalidArgument)) {
                charge_queued(k, me, &mut msg);
                k.ipc.requeue_front(port, msg, fx);
            }
            Err(e)
        }
    };
    let Some(th) = k.threads.get_mut(w.thread) else {
        return Sent::Queued;
    };
    if let Some(timer) = th.timer.take() {
        k.timers.cancel(timer);
    }
    th.ctx.frame.rax = result.map_or_else(Error::to_raw, |()| 0);
    th.cont = Some(Continuation::new(Resume::UserReturn));
    k.stats.recognitions += 1;
    // What [`may_hand_to`] asks, from the thread in hand.
    let cpu = gdt::this_cpu();
    let urgent = k
        .cpus
        .get(cpu)
        .is_some_and(|c| c.runq.peek_priority().is_none_or(|p| p <= th.priority));
    if urgent && !(th.pinned && th.cpu != cpu) {
        Sent::Handable(w.thread)
    } else {
        Sent::Delivered(w.thread)
    }
}

/// The receive of [`hand_over`]: the message into `w`'s buffer, and the result of its
/// writes; an error (the message larger than the buffer, no room for its rights) when
/// nothing of the receiver's changed, and the caller queues the message.
#[inline(always)]
fn take_at_once(k: &mut Kernel, w: Waiting, copied: &Copied) -> Result<Result<(), Error>, Error> {
    let Ok((_, msg)) = copied else {
        return Err(Error::InvalidArgument);
    };
    if msg.size() > IPC_BUFFER_SIZE {
        return Err(Error::TooLarge);
    }
    let mut out = Vec::new();
    let hdr = match k.tasks.get_keyed_mut(w.me.id, w.me.key) {
        Some(t) => k
            .ipc
            .copyout(&mut t.names, w.me.id, w.rcv_name, msg, &mut out)?,
        None => return Err(Error::InvalidArgument),
    };
    Ok(write_received(k, &Buf::Page(w.buf), &hdr, &out, msg))
}

/// Whether the running thread, about to block on this CPU, may hand it straight to `r`
/// (a receiver whose call it finished) instead of making `r` ready: as on the fast path,
/// `r` is not pinned to another CPU and no thread of higher priority is ready here.
fn may_hand_to(k: &Kernel, r: ThreadId) -> bool {
    let cpu = gdt::this_cpu();
    let Some(th) = k.threads.get(r) else {
        return false;
    };
    let urgent = k
        .cpus
        .get(cpu)
        .is_some_and(|c| c.runq.peek_priority().is_none_or(|p| p <= th.priority));
    urgent && !(th.pinned && th.cpu != cpu)
}

/// Queues a message carrying out-of-line regions (`ool.rs`): the regions are taken after
/// the whole message checks out, released if the rights cannot be taken, and the moves'
/// pages leave the sender once the message is queued.
#[cold]
fn queue_ool(
    k: &mut Kernel,
    task: TaskId,
    header: &MsgHeader,
    descriptors: &[Descriptor],
    dest: PortId,
    data: Vec<u8>,
    charge: Option<kern::quota::Charge>,
) -> Result<Sent, Error> {
    let charge = match charge {
        Some(c) => c,
        None => {
            let account = &k.tasks.get(&task).ok_or(Error::InvalidArgument)?.account;
            let cost = message_cost(descriptors.len(), data.len());
            crate::quota::heap(account, cost)?
        }
    };
    let (attached, moves, mtask) = crate::ool::take(k, task, header, descriptors, dest)?.split();
    let handles = attached.clone();
    let mut fx = crate::ipc::effects(k);
    let copied = match k.tasks.get_mut(&task) {
        Some(t) => k
            .ipc
            .copyin_ool(&mut t.names, header, descriptors, data, attached, &mut fx),
        None => Err(Error::InvalidArgument),
    };
    let (port, mut msg) = match copied {
        Ok(x) => x,
        Err(e) => {
            apply(k, fx);
            crate::ool::undo(k, &handles);
            return Err(e);
        }
    };
    msg.charge = Some(charge);
    k.ipc.enqueue(port, msg, &mut fx);
    k.stats.ipc_queued += 1;
    apply(k, fx);
    crate::ool::finish(k, moves, mtask);
    Ok(Sent::Queued)
}

/// Reads the `n` descriptors after the header.
#[inline(always)]
fn read_descriptors(k: &mut Kernel, buf: &Buf, n: usize) -> Result<Vec<Descriptor>, Error> {
    // Most messages have none: no call, no stack frame for the array below.
    if n == 0 {
        return Ok(Vec::new());
    }
    read_some_descriptors(k, buf, n)
}

/// [`read_descriptors`] of `n` > 0 descriptors.
#[inline(never)]
fn read_some_descriptors(k: &mut Kernel, buf: &Buf, n: usize) -> Result<Vec<Descriptor>, Error> {
    // Read on the stack, kept in a vector allocated where failing is allowed.
    let mut raw = [0u8; baton_abi::ipc::DESCRIPTORS_MAX * DESCRIPTOR_SIZE];
    let raw = raw
        .get_mut(..n * DESCRIPTOR_SIZE)
        .ok_or(Error::InvalidArgument)?;
    buf.read(k, HEADER_SIZE, raw)?;
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| Error::NoMemory)?;
    out.extend(
        raw.chunks_exact(DESCRIPTOR_SIZE)
            .filter_map(Descriptor::from_bytes),
    );
    Ok(out)
}

/// A receiver the fast path can deliver to, with what delivery needs of it.
#[derive(Clone, Copy, Debug)]
struct FastReceiver {
    /// The thread.
    thread: ThreadId,
    /// Its task.
    task: TaskId,
    /// Its IPC buffer's frame.
    buf: PhysAddr,
    /// Its name for the port it receives on.
    rcv_name: u64,
}

/// The receiver the fast path may deliver a message of `size` bytes with `rights` port
/// descriptors to: the oldest thread blocked receiving on `dest` when the queue is empty,
/// if it waits with an IPC buffer and its name space has room.
fn fast_receiver(k: &Kernel, dest: PortId, size: usize, rights: usize) -> Option<FastReceiver> {
    let p = k.ipc.port(dest)?;
    if !p.queue.is_empty() || size > IPC_BUFFER_SIZE {
        return None;
    }
    let thread = p.receivers.front()?;
    let th = k.threads.get(thread)?;
    // A thread waiting for an exception reply takes its message from the queue.
    if th.cont.map(|c| c.point) != Some(Resume::Receive) {
        return None;
    }
    let args = MsgArgs::from(th.ctx.frame.syscall_args().1);
    let (_, buf) = th.ctx.ipc_buffer?;
    if args.opts & (MSG_BUF | MSG_SLOW) != 0 {
        return None;
    }
    let task = th.ctx.task?;
    (k.tasks.get(&task)?.names.room() > rights).then_some(FastReceiver {
        thread,
        task,
        buf,
        rcv_name: args.rcv_name,
    })
}

/// The fast path: moves the message straight from the sender's buffer into receiver `r`'s
/// IPC buffer and finishes `r`'s receive (continuation recognition).
#[allow(clippy::too_many_arguments)]
fn deliver(
    k: &mut Kernel,
    task: TaskId,
    buf: &Buf,
    header: &MsgHeader,
    descriptors: &[Descriptor],
    dest: PortId,
    r: FastReceiver,
    data_off: usize,
    data_len: usize,
) -> Result<Sent, Error> {
    // Data from a user buffer is read before anything changes: a buffer that cannot be
    // read must leave the rights where they are and the receiver waiting.
    let staged = match buf {
        Buf::User { .. } => Some(buf.read_vec(k, data_off, data_len)?),
        Buf::Page(_) => None,
    };
    let mut fx = crate::ipc::effects(k);
    let t = k.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
    let (_, msg) = k
        .ipc
        .copyin(&mut t.names, header, descriptors, Vec::new(), &mut fx)?;
    // Take the receiver off the port: its receive is finished here.
    if let Some(p) = k.ipc.port_mut(dest) {
        p.receivers.pop_front();
    }
    if let Some(timer) = k.threads.get_mut(r.thread).and_then(|th| th.timer.take()) {
        k.timers.cancel(timer);
    }
    let mut out = Vec::new();
    let rt = k.tasks.get_mut(&r.task).ok_or(Error::InvalidArgument)?;
    let mut hdr = match k
        .ipc
        .copyout(&mut rt.names, r.task, r.rcv_name, &msg, &mut out)
    {
        Ok(h) => h,
        Err(_) => {
            // Cannot happen (room was checked); keep the message rather than lose it.
            let mut msg = msg;
            msg.data = match staged {
                Some(data) => data,
                None => buf.read_vec(k, data_off, data_len)?,
            };
            k.ipc.enqueue(dest, msg, &mut fx);
            fx.wake.push((r.thread, Wake::Retry));
            apply(k, fx);
            return Ok(Sent::Queued);
        }
    };
    hdr.size = header.size;
    let rb = Buf::Page(r.buf);
    rb.write(k, 0, &hdr.to_bytes())?;
    for (i, d) in out.iter().enumerate() {
        rb.write(k, HEADER_SIZE + i * DESCRIPTOR_SIZE, &d.to_bytes())?;
    }
    match staged {
        Some(data) => rb.write(k, data_off, &data)?,
        None => copy_between(k, buf, &rb, data_off, data_len)?,
    }
    if let Some(th) = k.threads.get_mut(r.thread) {
        th.ctx.frame.rax = 0;
        th.cont = Some(Continuation::new(Resume::UserReturn));
    }
    k.stats.recognitions += 1;
    k.stats.ipc_fast += 1;
    apply(k, fx);
    Ok(Sent::Delivered(r.thread))
}

/// The receive phase: takes the oldest message of the port `args.rcv_name` into `buf`, or
/// blocks for one (handing the processor to `handoff` if given: the RPC fast path).
fn receive(
    k: &mut Kernel,
    cur: ThreadId,
    me: Caller,
    buf: &Buf,
    args: MsgArgs,
    handoff: Option<ThreadId>,
) -> Result<(), Error> {
    // Only this phase's copies may make it wait for a page (below).
    crate::vm::clear_page_wait();
    let port = match receive_now(k, me, buf, args) {
        Ok(Some(port)) => port,
        done => {
            // Not blocking after all: the thread we delivered to just becomes ready.
            if let Some(r) = handoff {
                thread::thread_setrun(k, r);
            }
            if let Err(Error::BadAddress) = done {
                // The buffer's page must come in first (it was paged out, or its pager is
                // asked): the receive waits for it and then runs again, its send (if
                // any) done once. Nothing was taken from the queue.
                let cont = Continuation::new(Resume::Receive);
                return Err(crate::pager::wait_in_step(k, cur, cont));
            }
            return done.map(|_| ());
        }
    };
    if crate::control::alerted(k, cur) {
        // A kernel wait in an activation that sees a pending alert returns at once.
        if let Some(r) = handoff {
            thread::thread_setrun(k, r);
        }
        return Err(Error::Interrupted);
    }
    if let Some(p) = k.ipc.port_mut(port) {
        if p.receivers.try_push_back(cur).is_err() {
            if let Some(r) = handoff {
                thread::thread_setrun(k, r);
            }
            return Err(Error::NoMemory);
        }
    }
    block(k, Blocked::Receive { port }, args.timeout);
    k.stats.blocks_ipc += 1;
    let cont = Continuation::new(Resume::Receive);
    match handoff {
        Some(r) => {
            let cpu = gdt::this_cpu();
            thread::thread_handoff(k, cpu, cur, cont, r)
        }
        None => thread::thread_block_with(k, cont),
    }
}

/// The receive phase without blocking: `Ok(None)` when a message was taken, `Ok(Some(port))`
/// when the caller must block on `port`, or the error to return.
fn receive_now(
    k: &mut Kernel,
    me: Caller,
    buf: &Buf,
    args: MsgArgs,
) -> Result<Option<PortId>, Error> {
    let names = &me.task(k).ok_or(Error::InvalidArgument)?.names;
    let (port, next) = k.ipc.receive_peek(names, args.rcv_name)?;
    if let Some(size) = next {
        if size > buf.len() {
            return Err(Error::TooLarge);
        }
        // Nothing may be taken from the queue that cannot be written out.
        if let Buf::User { task, va, .. } = *buf {
            k.check_writable(task, va, size)?;
        }
        return take_message(k, me, buf, port, args.rcv_name).map(|()| None);
    }
    if args.timeout == 0 {
        return Err(Error::WouldBlock);
    }
    Ok(Some(port))
}

/// Dequeues the oldest message of `port` into `buf` of `task`.
fn take_message(
    k: &mut Kernel,
    me: Caller,
    buf: &Buf,
    port: PortId,
    rcv_name: u64,
) -> Result<(), Error> {
    let task = me.id;
    let mut fx = crate::ipc::effects(k);
    let Some(msg) = k.ipc.dequeue(port, &mut fx) else {
        return Err(Error::WouldBlock);
    };
    let mut out = Vec::new();
    let t = k
        .tasks
        .get_keyed_mut(me.id, me.key)
        .ok_or(Error::InvalidArgument)?;
    let hdr = match k.ipc.copyout(&mut t.names, task, rcv_name, &msg, &mut out) {
        Ok(h) => h,
        Err(e) => {
            // No room for the rights: the message stays, at the front.
            k.ipc.requeue_front(port, msg, &mut fx);
            apply(k, fx);
            return Err(e);
        }
    };
    // Out-of-line regions go into the receiver's map (their descriptors get addresses).
    if !msg.ool.is_empty() {
        crate::ool::deliver(k, task, &mut out);
    }
    let written = write_received(k, buf, &hdr, &out, &msg);
    apply(k, fx);
    written
}

/// Writes a received message into `buf`: the header, the descriptors, the data.
fn write_received(
    k: &mut Kernel,
    buf: &Buf,
    hdr: &MsgHeader,
    out: &[Descriptor],
    msg: &kern::ipc::Message,
) -> Result<(), Error> {
    buf.write_header(k, hdr)?;
    for (i, d) in out.iter().enumerate() {
        buf.write(k, HEADER_SIZE + i * DESCRIPTOR_SIZE, &d.to_bytes())?;
    }
    let at = HEADER_SIZE + out.len() * DESCRIPTOR_SIZE;
    match msg.word {
        Some(w) => buf.write(k, at, &w.to_le_bytes()),
        None => buf.write(k, at, &msg.data),
    }
}

/// Marks the running thread blocked on `why` with a timeout (`FOREVER`: none).
pub fn block(k: &mut Kernel, why: Blocked, timeout: u64) {
    let deadline = match timeout {
        FOREVER => None,
        ns => Some(apic::now_ns().saturating_add(ns)),
    };
    thread::block_until(k, why, deadline);
}

/// Releases every right of task `id`'s name space: its ports die (their holders see dead
/// names), the rest is given back.
pub fn release_task_names(k: &mut Kernel, id: TaskId) {
    let mut fx = effects(k);
    if let Some(task) = k.tasks.get_mut(&id) {
        k.ipc.release_space(&mut task.names, &mut fx);
    }
    apply(k, fx);
}

/// Releases every right of the name space `names` (of a task that is gone, or was never
/// started).
pub fn release_names(k: &mut Kernel, names: &mut kern::ipc::Space) {
    let mut fx = effects(k);
    k.ipc.release_space(names, &mut fx);
    apply(k, fx);
}

/// Makes ready the threads an IPC operation unblocked.
pub fn apply(k: &mut Kernel, fx: Effects<ThreadId>) {
    // Out-of-line regions of messages destroyed undelivered (`ool.rs`).
    crate::ool::release_dropped(k, fx.dropped);
    let mut wake = fx.wake;
    for &(t, how) in wake.iter() {
        if let (Some(th), Wake::Fail(e)) = (k.threads.get_mut(t), how) {
            // A thread waiting for a pager's activation has no call to fail: it makes its
            // access again (`crate::pager`).
            if !matches!(th.state, ThreadState::Blocked(Blocked::PageIn { .. })) {
                th.ctx.frame.rax = e.to_raw();
                th.cont = Some(Continuation::new(Resume::UserReturn));
            }
        }
        k.unblock(t);
    }
    // The list goes back for the next operation (the larger one, if another was made
    // meanwhile).
    wake.clear();
    if wake.capacity() > k.wake_list.capacity() {
        k.wake_list = wake;
    }
    // Memory-object ports whose last send right went: the objects' references go.
    if k.ipc.has_orphans() {
        crate::memobj::reap(k);
    }
    // A pager's port died, or a pager-backed object ended: the pager family catches up.
    crate::pager::tidy(k);
}

/// The effects of an IPC operation, on the kernel's wake list: it has room for every
/// thread (`thread::reserve_ready` makes it), so listing the threads an operation wakes
/// never allocates, on teardown paths included. An operation that starts while another's
/// effects are still open gets a new, empty list.
pub fn effects(k: &mut Kernel) -> Effects<ThreadId> {
    Effects {
        wake: core::mem::take(&mut k.wake_list),
        dropped: crate::ool::take_dropped_list(),
    }
}

/// Continuation [`Resume::Receive`] of thread `t` (current, on a fresh stack): run the
/// receive phase of its `ipc_msg` again.
pub fn continue_receive(k: &mut Kernel, t: ThreadId) -> ! {
    let result = MsgArgs::of(k, t)
        .ok_or(Error::InvalidArgument)
        .and_then(|args| {
            let (me, buf) = caller_buf(k, t, args.opts, args)?;
            receive(k, t, me, &buf, args, None)
        });
    crate::kernel::finish_entry(k, false, Some(result.map_or_else(Error::to_raw, |()| 0)))
}

/// Continuation [`Resume::SendRetry`] of thread `t`: run its whole `ipc_msg` again.
pub fn continue_send(k: &mut Kernel, t: ThreadId) -> ! {
    crate::vm::clear_page_wait();
    let result = match MsgArgs::of(k, t) {
        Some(args) => ipc_msg(k, t, args),
        None => Err(Error::InvalidArgument),
    };
    // A page of the message's buffer must come in first: nothing was sent (the receive
    // phase waits on its own), so the whole call runs again once the page is there.
    let result = match result {
        Err(Error::BadAddress) => Err(crate::pager::wait_in_step(
            k,
            t,
            Continuation::new(Resume::SendRetry),
        )),
        r => r,
    };
    crate::kernel::finish_entry(k, false, Some(result.map_or_else(Error::to_raw, |()| 0)))
}

/// Takes thread `t`, blocked on a port for `why`, off that port's queue (timeout, kill).
pub fn forget_waiter(k: &mut Kernel, t: ThreadId, why: Blocked) {
    let (port, receiving) = match why {
        Blocked::Receive { port } => (port, true),
        Blocked::Send { port } => (port, false),
        _ => return,
    };
    if let Some(p) = k.ipc.port_mut(port) {
        if receiving {
            if let Some(i) = p.receivers.position(t) {
                p.receivers.remove(i);
            }
        } else if let Some(i) = p.senders.position(t) {
            p.senders.remove(i);
        }
    }
}

/// `ipc_buffer_set(addr)`: makes the page at `addr` thread `t`'s IPC buffer.
pub fn sys_ipc_buffer_set(
    k: &mut Kernel,
    t: ThreadId,
    task: TaskId,
    addr: u64,
) -> Result<u64, Error> {
    if addr == 0 {
        if let Some(th) = k.threads.get_mut(t) {
            th.ctx.ipc_buffer = None;
        }
        return Ok(0);
    }
    if !addr.is_multiple_of(PAGE_SIZE) {
        return Err(Error::InvalidArgument);
    }
    let mem = KernelMem {
        frames: &mut k.frames,
    };
    let space = &k.tasks.get(&task).ok_or(Error::InvalidArgument)?.space;
    let (pa, flags) = space.translate(&mem, addr).ok_or(Error::BadAddress)?;
    if !flags.user || !flags.writable {
        return Err(Error::BadAddress);
    }
    if let Some(th) = k.threads.get_mut(t) {
        th.ctx.ipc_buffer = Some((addr, pa));
    }
    Ok(0)
}

/// Forgets the IPC buffers of `task`'s threads that lie in `[start, end)` (the pages are
/// being unmapped).
pub fn unmap_buffers(k: &mut Kernel, task: TaskId, start: u64, end: u64) {
    let inside = |b: Option<(u64, PhysAddr)>| b.is_some_and(|(va, _)| (start..end).contains(&va));
    for (_, th) in k.threads.iter_mut() {
        if th.ctx.task == Some(task) && inside(th.ctx.ipc_buffer) {
            th.ctx.ipc_buffer = None;
        }
        // The buffers of activations below (a migrated thread's callers in this task).
        for s in th.below.iter_mut() {
            if s.task == Some(task) && inside(s.ipc_buffer) {
                s.ipc_buffer = None;
            }
        }
    }
    crate::activation::retire(k, |a| a.task == task && a.buffer_within(start, end));
}
