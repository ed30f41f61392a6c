//! Migrating RPC (seed 001, Ford & Lepreau, sections 4 to 6): the calling thread itself
//! runs the server's dispatch routine in one of the server's activations.
//!
//! A thread is the scheduler's entity (priority, CPU accounting, kernel stack or
//! continuation); an activation is its execution context in one task. That context (its
//! user registers, where the system call entry saves them, its task, address space, IPC
//! buffer, exception port and control state) is one object, a [`Context`], which the
//! thread points at (`Thread::ctx`); the contexts of the activations *below* it on the
//! thread's activation stack are linked in `Thread::below`, each with the call it made.
//! A call makes the server activation's context current and links the caller's below it,
//! a return unlinks it again: pointers move, contexts are not copied. So a thread that
//! never migrates has an empty stack and pays nothing.
//!
//! - **Call** ([`migrate`], reached from the RPC fast path's plan, or [`try_migrate`] on
//!   the general path, e.g. with a timeout): an `ipc_msg(SEND | RECEIVE)` request (no descriptors,
//!   through the IPC buffer, or through a buffer of the caller's with `MSG_BUF`) to a port
//!   with a pool of activations takes a free activation
//!   ([`kern::activation::Pool::decide`]), links the caller's context below, copies the
//!   request into the activation's buffer, switches the address space and upcalls the
//!   dispatch routine: no second thread, no queue, no scheduler. The caller's priority and
//!   CPU accounting apply in the server because it is the caller's thread. The request's
//!   data is copied once, straight from the caller's buffer into the activation's: frame
//!   to frame for the IPC buffer page ([`migrate`]), through both tasks' page tables for a
//!   `MSG_BUF` buffer of up to the activation's buffer size ([`migrate_user`], with
//!   `kern::usercopy::copy_user_to_user`).
//! - **Return** ([`sys_act_return`]): the reply in the activation's buffer is copied to the
//!   caller's buffer (the one its request came from: [`ReplyTo`]), the activation goes back
//!   to its pool (waking a caller waiting for one), and the caller's context is current again. No rights
//!   move: the caller's reply port is never used (section 6.2).
//! - **Empty pool**: a call that finds no usable activation waits on the port (as a sender
//!   facing a full queue, with [`Resume::SendRetry`]) until one is given back. With the
//!   sidetrack on (`port_sidetrack`), the last free activation is kept for a *sidetrack
//!   upcall* (`rsi` = 0) in which the server may add activations; the call is then retried
//!   (the saved `rip` steps back over the `syscall` instruction) and waits if none were
//!   added.
//! - **Ending**: when the server's task ends (or its activation's thread is terminated) a
//!   migrated thread is not killed: it unwinds to the nearest activation below that lives,
//!   whose `ipc_msg` returns [`Error::Aborted`]. When a client's task ends while its thread
//!   runs in a server, the thread goes on in the server (which is not disturbed) and ends
//!   when it returns into the dead activation. A return into a dead activation copies no
//!   reply: after a split ([`split`]) that activation may already serve another call.
//!
//! # Invariants
//! - `Thread::below` is empty exactly when the thread runs in its home task; each context
//!   below names the activation occupied *above* it, which is given back when the context
//!   is current again.
//! - Permission checks that ask which task a thread belongs to use its home task
//!   ([`Thread::home_task`]), never the task it has migrated into.

use crate::arch::gdt::{USER_CS, USER_DS};
use crate::arch::paging::{self, KernelMem};
use crate::arch::trap::{TrapFrame, SYSCALL_VECTOR, USER_RFLAGS};
use crate::kernel::{self, Kernel, TaskId};
use crate::thread::{self, Blocked, Context, ContextBox, ReplyTo, Thread, ThreadId, ThreadState};
use alloc::vec::Vec;
use baton_abi::ipc::{
    Descriptor, Disposition, MsgHeader, DESCRIPTOR_SIZE, DESC_OOL, HEADER_SIZE, IPC_BUFFER_SIZE,
    KERNEL_ID_BASE, MSG_BUF, MSG_RECEIVE, MSG_SEND, MSG_SIZE_MAX,
};
use baton_abi::layout::{USER_END, USER_MIN};
use baton_abi::{Error, Sys};
use kern::activation::{ActId, Activation, Decision};
use kern::continuation::{Continuation, Resume};
use kern::frame::{PhysAddr, PAGE_SIZE};
use kern::ipc::{Held, PortId};
use kern::pmap::PhysMem;
use kern::slab::Key;
use kern::usercopy;

/// Tries to run the `ipc_msg` of `cur` (the running thread of `cpu`) as a migrating RPC.
/// Returns only when the message does not go to a port with activations, having changed
/// nothing; otherwise it upcalls the server or blocks the caller until an activation is
/// free.
#[inline(always)]
pub fn try_migrate(k: &mut Kernel, cpu: usize, cur: ThreadId) {
    let Some(th) = k.threads.get_mut(cur) else {
        return;
    };
    let [opts, _, _, buf, buf_size, ..] = th.ctx.frame.syscall_args().1;
    if opts == MSG_SEND | MSG_RECEIVE | MSG_BUF {
        return try_migrate_user(k, cpu, cur, buf, buf_size);
    }
    let (Some((_, page)), false) = (th.ctx.ipc_buffer, th.kill_pending) else {
        return;
    };
    if opts != MSG_SEND | MSG_RECEIVE {
        return;
    }
    let (s_key, sidetracked) = (th.ctx.task_key, th.sidetracked);
    let header = paging::read_header(page);
    if header.bits >> 16 != 0 {
        return migrate_ool(k, cpu, cur, page, &header, s_key, sidetracked);
    }
    let Some(port) = migrating_port(k, s_key, &header, IPC_BUFFER_SIZE) else {
        return;
    };
    migrate(k, cpu, cur, page, &header, port, sidetracked)
}

/// Most out-of-line regions a migrating call carries; a call with more takes the general
/// path (which refuses regions to a port with activations: `NotSupported`).
pub const MIGRATING_REGIONS: usize = 8;

/// A call whose request in the IPC buffer `page` carries out-of-line regions (its
/// descriptors, all `DESC_OOL`, at most [`MIGRATING_REGIONS`]) to a port with activations: as [`migrate`], with the
/// regions carried by value into the server's task before it is entered
/// (`crate::ool::carry_migrating`) and the descriptors in the activation's buffer giving
/// their addresses there. The regions are checked before an activation is taken (an
/// error then changes nothing); once one is taken only the kernel's own memory can fail,
/// and the activation goes back to its pool. Returns, changing nothing, when the request
/// is not such a call (the general path runs it: port rights never migrate).
#[cold]
#[inline(never)]
fn migrate_ool(
    k: &mut Kernel,
    cpu: usize,
    cur: ThreadId,
    page: PhysAddr,
    header: &MsgHeader,
    s_key: Key,
    sidetracked: bool,
) {
    let Some((n, port_id)) = ool_call_port(k, s_key, header, IPC_BUFFER_SIZE) else {
        return;
    };
    let (size, descs_end) = (header.size as usize, HEADER_SIZE + n * DESCRIPTOR_SIZE);
    // On the stack: nothing here may own heap memory, since the paths below end in
    // calls that do not return (a wait for an activation, the upcall, an error's return).
    let mut all = [Descriptor::default(); MIGRATING_REGIONS];
    let Some(descs) = all.get_mut(..n) else {
        return;
    };
    for (i, d) in descs.iter_mut().enumerate() {
        let mut raw = [0u8; DESCRIPTOR_SIZE];
        paging::read_phys(
            PhysAddr(page.0 + (HEADER_SIZE + i * DESCRIPTOR_SIZE) as u64),
            &mut raw,
        );
        match Descriptor::from_bytes(&raw) {
            Some(got) if got.kind == DESC_OOL => *d = got,
            _ => return,
        }
    }
    let Some(task) = k.threads.get(cur).and_then(|th| th.ctx.task) else {
        return;
    };
    if let Err(e) = crate::ool::check_migrating(task, descs) {
        crate::kernel::finish_entry(k, false, Some(e.to_raw()))
    }
    let (a, sidetrack) = take(k, cur, port_id, sidetracked);
    if !sidetrack {
        let carried = match k.acts.get(a).map(|act| act.task) {
            Some(server) => crate::ool::carry_migrating(k, task, server, descs),
            None => Err(Error::Aborted),
        };
        if let Err(e) = carried {
            regions_failed(k, cur, port_id, a, e)
        }
    }
    let Some(act) = occupy(&mut k.acts, cur, a, header) else {
        // Not reachable: a pool holds only live activations. Refuse rather than panic.
        crate::kernel::finish_entry(k, false, Some(Error::Aborted.to_raw()))
    };
    let to = if sidetrack {
        ReplyTo::Sidetrack
    } else {
        // The server sees the descriptors, rewritten to its addresses, then the data.
        let buffer = act.buffer.1;
        write_regions(buffer, header, descs);
        if size > descs_end {
            let at = descs_end as u64;
            paging::copy_phys(
                PhysAddr(buffer.0 + at),
                PhysAddr(page.0 + at),
                size - descs_end,
            );
        }
        ReplyTo::IpcBuffer
    };
    let into = KernelParts {
        stats: &mut k.stats,
        cpus: &mut k.cpus,
        kernel_root: k.kernel_root,
    };
    enter(act, into, cpu, a, port_id, size, to)
}

/// The number of descriptors of a request `header` that may carry out-of-line regions into
/// a migrating call (at most [`MIGRATING_REGIONS`], all within its `size`), and the port
/// it migrates to ([`migrating_port`] of the header without them, through a buffer of
/// `limit` bytes). `None` when the request is not such a call.
fn ool_call_port(
    k: &Kernel,
    s_key: Key,
    header: &MsgHeader,
    limit: usize,
) -> Option<(usize, PortId)> {
    let n = ((header.bits >> 16) & 0xff) as usize;
    if n > MIGRATING_REGIONS || HEADER_SIZE + n * DESCRIPTOR_SIZE > header.size as usize {
        return None;
    }
    let plain = MsgHeader {
        bits: header.bits & 0xffff,
        ..*header
    };
    migrating_port(k, s_key, &plain, limit).map(|port| (n, port))
}

/// A migrating call's regions could not be carried into the server (`e`) after
/// activation `a` of `port` was taken for `cur`: undone as `migrate_user` undoes (the
/// activation goes back to its pool, the call fails with `e`).
fn regions_failed(k: &mut Kernel, cur: ThreadId, port: PortId, a: ActId, e: Error) -> ! {
    if let Some(p) = k.ipc.port_mut(port) {
        p.pool.free.push(a);
    }
    if let Some(th) = k.threads.get_mut(cur) {
        th.sidetracked = false;
    }
    crate::kernel::finish_entry(k, false, Some(e.to_raw()))
}

/// The port a request `header` (sent by the task of key `s_key`, through a buffer of
/// `limit` bytes) migrates to: a call (`CopySend` of a send right, no descriptors, a size
/// within the buffer, an id below the kernel's, no reply right or a send-once one made from
/// a receive right) to a port with activations. `None` for anything else, which the
/// general path then runs (or reports: a kernel id or a wrong reply right is refused
/// there, so a client cannot make a migrated call look like a kernel notification, and
/// both paths give the same result).
#[inline(always)]
fn migrating_port(k: &Kernel, s_key: Key, header: &MsgHeader, limit: usize) -> Option<PortId> {
    if header.bits >> 16 != 0
        || header.id >= KERNEL_ID_BASE
        || header.dest_disposition() != Disposition::CopySend as u8
        || !(HEADER_SIZE..=limit).contains(&(header.size as usize))
    {
        return None;
    }
    let names = &k.tasks.by_key(s_key)?.names;
    // The reply right is never used, but it is checked as the general path checks it.
    if !kern::ipc::fast::migration_reply_ok(names, header) {
        return None;
    }
    let dest = names.lookup(header.dest).ok()?;
    let migrating =
        dest.kind == Held::Send && k.ipc.port(dest.port).is_some_and(|p| p.pool.is_migrating());
    migrating.then_some(dest.port)
}

/// Runs the call of `cur` (on `cpu`; its request `header` is in its IPC buffer `page`;
/// `sidetracked` is its `Thread::sidetracked`) in an activation of `port`, which has a
/// pool; or blocks it until one is free. `cur` is the thread running on this CPU.
#[inline(always)]
pub fn migrate(
    k: &mut Kernel,
    cpu: usize,
    cur: ThreadId,
    page: PhysAddr,
    header: &MsgHeader,
    port_id: PortId,
    sidetracked: bool,
) -> ! {
    let size = header.size as usize;
    let (a, sidetrack) = take(k, cur, port_id, sidetracked);
    let Some(act) = occupy(&mut k.acts, cur, a, header) else {
        // Not reachable: a pool holds only live activations. Refuse rather than panic.
        crate::kernel::finish_entry(k, false, Some(Error::Aborted.to_raw()))
    };
    if size > HEADER_SIZE && !sidetrack {
        let at = HEADER_SIZE as u64;
        paging::copy_phys(
            PhysAddr(act.buffer.1 .0 + at),
            PhysAddr(page.0 + at),
            size - HEADER_SIZE,
        );
    }
    let to = if sidetrack {
        ReplyTo::Sidetrack
    } else {
        ReplyTo::IpcBuffer
    };
    let into = KernelParts {
        stats: &mut k.stats,
        cpus: &mut k.cpus,
        kernel_root: k.kernel_root,
    };
    enter(act, into, cpu, a, port_id, size, to)
}

/// A pager serving through activations answers a page fault of `cur` (the thread running
/// on `cpu`) on the faulting thread itself: the thread migrates into an activation of the
/// pager's port `port_id` with the data request `request` (message id `id`) in its buffer,
/// as a call would (seed 001 section 9 names this as future work), and when the pager's
/// handler returns the faulting access (or the call, its frame moved back) is made again.
/// Does not return when it migrates; otherwise returns why not: [`Error::Busy`] when no
/// activation is free now (the caller waits for one), [`Error::NoMemory`] without room for
/// the caller's record, [`Error::DeadName`] for a port that is gone.
pub fn migrate_fault(
    k: &mut Kernel,
    cpu: usize,
    cur: ThreadId,
    port_id: PortId,
    id: u64,
    request: &[u8],
) -> Error {
    // SAFETY: `cur` runs on this CPU (it is in this fault or call) and no other reference
    // to it is in use; this one ends with the check.
    if !record_ready(unsafe { thread::current_mut() }) {
        return Error::NoMemory;
    }
    let Some(port) = k.ipc.port_mut(port_id) else {
        return Error::DeadName;
    };
    let size = HEADER_SIZE + request.len();
    if size > IPC_BUFFER_SIZE {
        return Error::TooLarge;
    }
    let a = match port.pool.decide(false) {
        Decision::Take(a) | Decision::Sidetrack(a) => a,
        Decision::Wait => return Error::Busy,
    };
    let header = MsgHeader {
        bits: 0,
        size: size as u32,
        dest: 0,
        reply: 0,
        id,
    };
    // The faulting context's floating-point registers, kept in it for the return (the call
    // and its return put them in their initial state).
    let Some(th) = k.threads.get_mut(cur) else {
        return Error::Aborted;
    };
    let reuse = th.ctx.fpu.take();
    let kept = k.cpus.get(cpu).is_some_and(|c| !c.fpu_live.is_null());
    let fpu = match k
        .cpus
        .get(cpu)
        .map(|c| crate::fpu::save_for_fault(c, reuse))
    {
        Some(Ok(f)) => f,
        _ => return Error::NoMemory,
    };
    if let Some(th) = k.threads.get_mut(cur) {
        th.ctx.fpu = fpu;
        th.ctx.fpu_kept = kept;
    }
    let Some(act) = occupy(&mut k.acts, cur, a, &header) else {
        return Error::Aborted;
    };
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    mem.write_bytes(PhysAddr(act.buffer.1 .0 + HEADER_SIZE as u64), request);
    let into = KernelParts {
        stats: &mut k.stats,
        cpus: &mut k.cpus,
        kernel_root: k.kernel_root,
    };
    enter(act, into, cpu, a, port_id, size, ReplyTo::Fault)
}

/// Takes an activation from the pool of `port_id` (alive, with a pool) for the call of
/// `cur` (`sidetracked`: its `Thread::sidetracked`): the activation and whether the upcall
/// is a sidetrack. When none may be used now, blocks `cur` until one comes back (its call
/// is then run again) or its call's timeout passes (`TimedOut`, as a sender facing a full
/// queue), and does not return.
#[inline(always)]
fn take(k: &mut Kernel, cur: ThreadId, port_id: PortId, sidetracked: bool) -> (ActId, bool) {
    // The caller's record and its place on the stack are made before anything changes: a
    // call that cannot have them fails with `NoMemory` here, not later.
    // SAFETY: `cur` runs on this CPU (it is in this system call) and no other reference to
    // it is in use here; this one ends with the check.
    if !record_ready(unsafe { thread::current_mut() }) {
        crate::kernel::finish_entry(k, false, Some(Error::NoMemory.to_raw()))
    }
    let Some(port) = k.ipc.port_mut(port_id) else {
        // Not reachable: the caller found the port alive. Let the general path report.
        crate::kernel::finish_entry(k, false, Some(Error::DeadName.to_raw()))
    };
    match port.pool.decide(sidetracked) {
        Decision::Take(a) => (a, false),
        Decision::Sidetrack(a) => (a, true),
        Decision::Wait => {
            if port.senders.try_push_back(cur).is_err() {
                crate::kernel::finish_entry(k, false, Some(Error::NoMemory.to_raw()))
            }
            // The call's own timeout bounds the wait (the fast path takes only calls
            // without one, so this is the general path's business).
            let timeout = k
                .threads
                .get(cur)
                .map_or(baton_abi::FOREVER, |th| th.ctx.frame.syscall_args().1[2]);
            crate::ipc::block(k, Blocked::Send { port: port_id }, timeout);
            k.stats.blocks_ipc += 1;
            thread::thread_block_with(k, Continuation::new(Resume::SendRetry));
        }
    }
}

/// Whether thread `th` (the running thread) has a spare record and room on its stack of records for the call
/// it is making: after its first call at each depth it has, and this is two comparisons.
#[inline(always)]
fn record_ready(th: &mut Thread) -> bool {
    (th.spare.is_some() && th.below.len() < th.below.capacity()) || make_record(th)
}

/// Makes the spare record and the stack room [`record_ready`] asks for, fallibly (the
/// record is paid for by the activation it will sit below, see [`ACTIVATION_BYTES`]).
#[cold]
#[inline(never)]
fn make_record(th: &mut Thread) -> bool {
    if th.below.try_reserve(1).is_err() {
        return false;
    }
    if th.spare.is_none() {
        let Some(ctx) = ContextBox::try_new(Context::default()) else {
            return false;
        };
        th.spare = Some(ctx);
    }
    true
}

/// Marks activation `a` (just taken) occupied by `cur` and writes the request's header
/// (id and size only) into its buffer; the activation, which the upcall reads from where
/// it is (`None` only if `a` is not live, which a pool's activations always are).
#[inline(always)]
fn occupy<'a>(
    acts: &'a mut kern::activation::Activations,
    cur: ThreadId,
    a: ActId,
    header: &MsgHeader,
) -> Option<&'a Activation> {
    let act = acts.occupy(a, cur)?;
    paging::write_header(act.buffer.1, request_header(header));
    Some(act)
}

/// What [`enter`] needs of the kernel besides the activation (borrowed apart from it).
struct KernelParts<'k> {
    /// The counters.
    stats: &'k mut baton_abi::Stats,
    /// The CPUs.
    cpus: &'k mut Vec<kernel::Cpu>,
    /// The kernel's page-table root.
    kernel_root: PhysAddr,
}

/// [`try_migrate`] for `ipc_msg(SEND | RECEIVE | MSG_BUF, .., buf, buf_size)`: the request
/// is in the caller's own buffer `[va, va + len)`. Returns, having changed nothing, when
/// the call does not migrate (the general path then runs it, or reports what is wrong with
/// it); otherwise the call migrates ([`migrate_user`]).
#[inline(never)]
fn try_migrate_user(k: &mut Kernel, cpu: usize, cur: ThreadId, va: u64, len: u64) {
    let Some(th) = k.threads.get(cur) else {
        return;
    };
    if th.kill_pending {
        return;
    }
    let (s_key, sidetracked) = (th.ctx.task_key, th.sidetracked);
    let Ok(len) = usize::try_from(len) else {
        return;
    };
    if !(HEADER_SIZE..=MSG_SIZE_MAX).contains(&len) {
        return;
    }
    let Some(sender) = k.tasks.by_key(s_key) else {
        return;
    };
    let mem = KernelMem {
        frames: &mut k.frames,
    };
    let mut raw = [0u8; HEADER_SIZE];
    if usercopy::copy_from_user(&sender.space, &mem, va, &mut raw).is_err() {
        // A page not there yet: made resident as the caller's own access would (out of
        // line), then read again.
        if crate::vm::make_resident_key(k, s_key, va, HEADER_SIZE, false).is_err() {
            return;
        }
        let Some(sender) = k.tasks.by_key(s_key) else {
            return;
        };
        let mem = KernelMem {
            frames: &mut k.frames,
        };
        if usercopy::copy_from_user(&sender.space, &mem, va, &mut raw).is_err() {
            return;
        }
    }
    let Some(header) = MsgHeader::from_bytes(&raw) else {
        return;
    };
    if header.bits >> 16 != 0 {
        return migrate_user_ool(k, cpu, cur, &header, s_key, sidetracked, va, len);
    }
    let Some(port) = migrating_port(k, s_key, &header, len) else {
        return;
    };
    migrate_user(k, cpu, cur, &header, port, sidetracked, va, len)
}

/// Reads the `n` descriptors of a message whose header is at `va` of the task of key
/// `key` (made resident first if need be, as its own loads would), into `out`. `None`
/// when they cannot be read or one is not `DESC_OOL` (a migrating call carries regions
/// only).
fn user_regions(k: &mut Kernel, key: Key, va: u64, out: &mut [Descriptor]) -> Option<()> {
    let at = va.checked_add(HEADER_SIZE as u64)?;
    let len = out.len() * DESCRIPTOR_SIZE;
    let mut raw = [0u8; MIGRATING_REGIONS * DESCRIPTOR_SIZE];
    let raw = raw.get_mut(..len)?;
    let read = |k: &mut Kernel, raw: &mut [u8]| {
        let space = &k.tasks.by_key(key).ok_or(Error::BadAddress)?.space;
        let mem = KernelMem {
            frames: &mut k.frames,
        };
        usercopy::copy_from_user(space, &mem, at, raw)
    };
    if read(k, raw).is_err() {
        crate::vm::make_resident_key(k, key, at, len, false).ok()?;
        read(k, raw).ok()?;
    }
    for (d, bytes) in out.iter_mut().zip(raw.chunks_exact(DESCRIPTOR_SIZE)) {
        match Descriptor::from_bytes(bytes) {
            Some(got) if got.kind == DESC_OOL => *d = got,
            _ => return None,
        }
    }
    Some(())
}

/// [`migrate_user`] for a request (in the caller's own buffer `[va, va + len)`) that
/// carries out-of-line regions: as [`migrate_ool`] does for one in the IPC buffer, the
/// regions are checked before an activation is taken (an error then changes nothing),
/// carried by value into the server's task once the request's bytes are in the
/// activation's buffer, and the descriptors there rewritten to the server's addresses.
/// Returns, changing nothing, when the request is not such a call.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn migrate_user_ool(
    k: &mut Kernel,
    cpu: usize,
    cur: ThreadId,
    header: &MsgHeader,
    s_key: Key,
    sidetracked: bool,
    va: u64,
    len: usize,
) {
    let Some((n, port_id)) = ool_call_port(k, s_key, header, len) else {
        return;
    };
    let size = header.size as usize;
    // On the stack: the paths below end in calls that do not return.
    let mut all = [Descriptor::default(); MIGRATING_REGIONS];
    let Some(descs) = all.get_mut(..n) else {
        return;
    };
    if user_regions(k, s_key, va, descs).is_none() {
        return;
    }
    let Some(task) = k.threads.get(cur).and_then(|th| th.ctx.task) else {
        return;
    };
    if let Err(e) = crate::ool::check_migrating(task, descs) {
        crate::kernel::finish_entry(k, false, Some(e.to_raw()))
    }
    let (a, sidetrack) = take(k, cur, port_id, sidetracked);
    let carried = request_into(k, cur, a, va, size, sidetrack).and_then(|()| {
        if sidetrack {
            return Ok(());
        }
        match k.acts.get(a).map(|act| act.task) {
            Some(server) => crate::ool::carry_migrating(k, task, server, descs),
            None => Err(Error::Aborted),
        }
    });
    if let Err(e) = carried {
        regions_failed(k, cur, port_id, a, e)
    }
    let Some(act) = occupy(&mut k.acts, cur, a, header) else {
        // Not reachable: a pool holds only live activations. Refuse rather than panic.
        crate::kernel::finish_entry(k, false, Some(Error::Aborted.to_raw()))
    };
    let to = if sidetrack {
        ReplyTo::Sidetrack
    } else {
        // The server sees the descriptors rewritten to its addresses (the request's bytes
        // after them were copied by `request_into`).
        write_regions(act.buffer.1, header, descs);
        ReplyTo::User { va, len }
    };
    let into = KernelParts {
        stats: &mut k.stats,
        cpus: &mut k.cpus,
        kernel_root: k.kernel_root,
    };
    enter(act, into, cpu, a, port_id, size, to)
}

/// Writes, at the start of the buffer whose first frame is `buffer`, a message header
/// with `header`'s id and size claiming `descs.len()` descriptors, and the descriptors.
fn write_regions(buffer: PhysAddr, header: &MsgHeader, descs: &[Descriptor]) {
    paging::write_header(
        buffer,
        MsgHeader {
            bits: (descs.len() as u32) << 16,
            ..request_header(header)
        },
    );
    for (i, d) in descs.iter().enumerate() {
        paging::write_phys(
            PhysAddr(buffer.0 + (HEADER_SIZE + i * DESCRIPTOR_SIZE) as u64),
            &d.to_bytes(),
        );
    }
}

/// Runs the call of `cur` (on `cpu`), whose request `header` is at the start of its own
/// buffer `[va, va + len)`, in an activation of `port_id`, as [`migrate`] does for a request
/// in the IPC buffer; or blocks it until an activation is free. The request's data goes
/// straight from the caller's pages into the activation's
/// (`kern::usercopy::copy_user_to_user`), and the reply will come back into the same
/// buffer ([`ReplyTo::User`]). Before anything changes the call fails with
/// [`Error::TooLarge`] if the request does not fit the activation's buffer and with
/// [`Error::BadAddress`] if the caller's data cannot be read (the activation then goes back
/// to the pool as it was, and the server is not entered).
#[allow(clippy::too_many_arguments)]
fn migrate_user(
    k: &mut Kernel,
    cpu: usize,
    cur: ThreadId,
    header: &MsgHeader,
    port_id: PortId,
    sidetracked: bool,
    va: u64,
    len: usize,
) -> ! {
    let size = header.size as usize;
    let (a, sidetrack) = take(k, cur, port_id, sidetracked);
    if let Err(e) = request_into(k, cur, a, va, size, sidetrack) {
        // Undone: the activation goes back where `decide` took it from (the end of the
        // free list), and the call fails.
        if let Some(p) = k.ipc.port_mut(port_id) {
            p.pool.free.push(a);
        }
        if let Some(th) = k.threads.get_mut(cur) {
            th.sidetracked = false;
        }
        crate::kernel::finish_entry(k, false, Some(e.to_raw()))
    }
    let Some(act) = occupy(&mut k.acts, cur, a, header) else {
        // Not reachable: a pool holds only live activations. Refuse rather than panic.
        crate::kernel::finish_entry(k, false, Some(Error::Aborted.to_raw()))
    };
    let to = if sidetrack {
        ReplyTo::Sidetrack
    } else {
        ReplyTo::User { va, len }
    };
    let into = KernelParts {
        stats: &mut k.stats,
        cpus: &mut k.cpus,
        kernel_root: k.kernel_root,
    };
    enter(act, into, cpu, a, port_id, size, to)
}

/// Checks a request of `size` bytes in the buffer at `va` of thread `cur`'s running
/// activation against activation `a` ([`Error::TooLarge`] past its buffer), and copies its
/// data (after the header) into `a`'s buffer, each byte once; for a sidetrack upcall
/// (which carries no request) only checks that the data could be read. Writes nothing but
/// the data into the activation's buffer, and nothing at all on an error.
fn request_into(
    k: &mut Kernel,
    cur: ThreadId,
    a: ActId,
    va: u64,
    size: usize,
    sidetrack: bool,
) -> Result<(), Error> {
    match request_once(k, cur, a, va, size, sidetrack) {
        // The caller's pages not there yet: made resident as its own loads would, then
        // once more (out of line: never on a path whose pages are there).
        Err(Error::BadAddress) => {
            let key = k
                .threads
                .get(cur)
                .map(|th| th.ctx.task_key)
                .ok_or(Error::InvalidArgument)?;
            let data = size.saturating_sub(HEADER_SIZE);
            crate::vm::make_resident_key(k, key, va + HEADER_SIZE as u64, data, false)?;
            request_once(k, cur, a, va, size, sidetrack)
        }
        r => r,
    }
}

/// One try of [`request_into`].
fn request_once(
    k: &mut Kernel,
    cur: ThreadId,
    a: ActId,
    va: u64,
    size: usize,
    sidetrack: bool,
) -> Result<(), Error> {
    let act = k.acts.get(a).ok_or(Error::Aborted)?;
    if size > act.buffer_len {
        return Err(Error::TooLarge);
    }
    // The activation was just taken from its pool, so it is not retired: its buffer's
    // frames are those recorded at its creation.
    let to = usercopy::Frames {
        va: act.buffer.0,
        frames: act
            .frames
            .get(..act.buffer_len / PAGE_SIZE as usize)
            .unwrap_or(&[]),
    };
    let from_key = k
        .threads
        .get(cur)
        .map(|th| th.ctx.task_key)
        .ok_or(Error::InvalidArgument)?;
    let from = &k
        .tasks
        .by_key(from_key)
        .ok_or(Error::InvalidArgument)?
        .space;
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    let at = HEADER_SIZE as u64;
    let data = size - HEADER_SIZE;
    if sidetrack {
        return usercopy::check_readable(from, &mem, va + at, data);
    }
    usercopy::copy_user_to_frames(from, va + at, to, to.va + at, data, &mut mem)
}

/// The header of a request as the activation sees it: id and size only.
#[inline(always)]
fn request_header(header: &MsgHeader) -> MsgHeader {
    MsgHeader {
        bits: 0,
        size: header.size,
        dest: 0,
        reply: 0,
        id: header.id,
    }
}

/// The second half of a migrating call of the thread running on `cpu`, its request (of
/// `size` bytes) already in the buffer of activation `a` (`act`: taken from the pool of
/// `port_id`, occupied): links the caller's context below the activation's, with the call
/// (whose reply goes `to`), switches to the activation and upcalls it.
#[inline(always)]
fn enter(
    act: &Activation,
    k: KernelParts<'_>,
    cpu: usize,
    a: ActId,
    port_id: PortId,
    size: usize,
    to: ReplyTo,
) -> ! {
    let sidetrack = to == ReplyTo::Sidetrack;
    k.stats.migrations += 1;
    // SAFETY: `cur` runs on this CPU (it is in this system call) and no other reference to
    // it is in use: everything above reached it only through `k.threads` inside calls
    // that have returned.
    let th = unsafe { thread::current_mut() };
    th.sidetracked = false;
    // The server activation's context is the thread's spare (made by `take`, see
    // `record_ready`, and recycled: no allocation after a thread's first call at each
    // depth); it becomes the running context and the caller's is linked below, by
    // pointer. Nothing of another task may show through its frame: unless it holds
    // registers the server's own task left in it (it is the context the thread last
    // returned from, of that task), every register is written.
    let Some(mut ctx) = th.spare.take() else {
        // Not reachable (`take` made it, and nothing between took it). Refuse rather than
        // allocate or panic.
        th.ctx.frame.rax = Error::NoMemory.to_raw();
        kernel::leave_to_user()
    };
    let rsi = if sidetrack { 0 } else { size as u64 };
    if ctx.task_key != act.task_key {
        // A context of another task (or a new one): its registers are cleared and its task
        // and space become the server's. A context the thread last returned from in this
        // same task keeps them (a task's key names it alone, and its space never changes):
        // the activations of a task share these, and only the buffer is each one's own.
        clear_frame(&mut ctx.frame);
        ctx.task = Some(act.task);
        ctx.task_key = act.task_key;
        ctx.space = Some(act.space);
    }
    let f = &mut ctx.frame;
    (f.rip, f.rsp, f.rdi, f.rsi, f.rdx, f.r8) =
        (act.entry, act.stack, act.buffer.0, rsi, a.0, act.cookie);
    (f.rflags, f.cs, f.ss, f.vector) = (
        USER_RFLAGS,
        u64::from(USER_CS),
        u64::from(USER_DS),
        SYSCALL_VECTOR,
    );
    ctx.ipc_buffer = Some(act.buffer);
    ctx.ctl = kern::activation::ActState::entered_from(&th.ctx.ctl);
    let mut caller = core::mem::replace(&mut th.ctx, ctx);
    (caller.act, caller.port, caller.to) = (a, port_id, to);
    th.below.push(caller);
    if let Some(c) = k.cpus.get_mut(cpu) {
        kernel::switch_activation(c, k.kernel_root, th);
    }
    kernel::leave_to_user()
}

/// Zeroes every register of `frame`, which holds another task's (or nobody's known)
/// registers, before a migrating call enters a server with it. Out of line: a thread
/// calling the same server again finds its own registers there and skips this.
#[inline(never)]
fn clear_frame(frame: &mut TrapFrame) {
    *frame = TrapFrame::default();
}

/// `act_return()`: ends the migrating call of the running activation of `cur` (the thread
/// running on this CPU). Never returns on success (the caller resumes); an error when
/// `cur` is not in one.
#[inline(always)]
pub fn sys_act_return(k: &mut Kernel, cur: ThreadId) -> Error {
    // SAFETY: `cur` runs on this CPU (it is in this system call); this is the only
    // reference to it in use until `resume_below`, which takes the thread from the table
    // again.
    let th = unsafe { thread::current_mut() };
    let Some(saved) = th.below.pop() else {
        return Error::InvalidArgument;
    };
    // A dead record (terminated, or its task ending) takes no reply: after a split its
    // activation is back in its pool and its buffer may already hold another call's
    // request. One test on the common path (the record's `to` and `dead` are both read).
    let result = if saved.to != ReplyTo::IpcBuffer || !lives(&saved) {
        reply_elsewhere(k, &saved)
    } else {
        match (th.ctx.ipc_buffer, saved.ipc_buffer) {
            (Some((_, from)), Some((_, to))) => {
                let reply = paging::read_header(from);
                let size = reply.size as usize;
                if reply.bits >> 16 != 0 {
                    reply_regions(k, &saved, from, to, &reply)
                } else if !(HEADER_SIZE..=IPC_BUFFER_SIZE).contains(&size) {
                    Err(refused(k, &saved, &reply))
                } else {
                    let [_, rcv_name, ..] = saved.frame.syscall_args().1;
                    paging::write_header(
                        to,
                        MsgHeader {
                            bits: 0,
                            size: reply.size,
                            dest: rcv_name,
                            reply: 0,
                            id: reply.id,
                        },
                    );
                    if size > HEADER_SIZE {
                        let at = HEADER_SIZE as u64;
                        paging::copy_phys(
                            PhysAddr(to.0 + at),
                            PhysAddr(from.0 + at),
                            size - HEADER_SIZE,
                        );
                    }
                    Ok(())
                }
            }
            // The server's buffer or the caller's was unmapped meanwhile.
            _ => Err(Error::BadAddress),
        }
    };
    resume_below(k, cur, saved, result)
}

/// The reply of the call `saved` when it does not go to the caller's IPC buffer page: none
/// for a sidetrack upcall, or into the caller's own buffer ([`reply_to_user`]); none at
/// all when `saved` is dead (its thread unwinds through it with [`Error::Aborted`]: nothing
/// is written to a buffer or memory of an activation that may serve another call now).
#[inline(never)]
fn reply_elsewhere(k: &mut Kernel, saved: &Context) -> Result<(), Error> {
    if !lives(saved) {
        return Err(Error::Aborted);
    }
    match saved.to {
        ReplyTo::User { va, len } => reply_to_user(k, saved, va, len),
        ReplyTo::Sidetrack | ReplyTo::IpcBuffer | ReplyTo::Fault => Ok(()),
    }
}

/// The `n` descriptors of a reply whose header `reply` is at `buffer` (a frame of an
/// activation's buffer), into `out`, checked for form: `n` at most
/// [`MIGRATING_REGIONS`], all `DESC_OOL`, inside the reply's `size` (at most `room`).
/// [`Error::BadFormat`] otherwise.
fn reply_descriptors<'d>(
    buffer: PhysAddr,
    reply: &MsgHeader,
    room: usize,
    out: &'d mut [Descriptor; MIGRATING_REGIONS],
) -> Result<&'d mut [Descriptor], Error> {
    let n = ((reply.bits >> 16) & 0xff) as usize;
    let size = reply.size as usize;
    let descs_end = HEADER_SIZE + n * DESCRIPTOR_SIZE;
    if reply.bits & 0xffff != 0 || n > MIGRATING_REGIONS || descs_end > size || size > room {
        return Err(Error::BadFormat);
    }
    let descs = out.get_mut(..n).ok_or(Error::BadFormat)?;
    for (i, d) in descs.iter_mut().enumerate() {
        let mut raw = [0u8; DESCRIPTOR_SIZE];
        paging::read_phys(
            PhysAddr(buffer.0 + (HEADER_SIZE + i * DESCRIPTOR_SIZE) as u64),
            &mut raw,
        );
        match Descriptor::from_bytes(&raw) {
            Some(got) if got.kind == DESC_OOL => *d = got,
            _ => return Err(Error::BadFormat),
        }
    }
    Ok(descs)
}

/// Carries the regions the reply of the call `saved` names (`descs`, in the server's
/// memory) by value into the caller's task, as a migrating request's are carried into the
/// server's (`crate::ool::carry_migrating`: copy-on-write, anywhere, the bytes outside
/// each range zeroed, the server's whole pages removed for `OOL_DEALLOCATE`), rewriting
/// each descriptor to the caller's address. Checked first: an error changes nothing.
fn carry_reply(k: &mut Kernel, saved: &Context, descs: &mut [Descriptor]) -> Result<(), Error> {
    let server = k
        .acts
        .get(saved.act)
        .map(|a| a.task)
        .ok_or(Error::Aborted)?;
    let client = saved.task.ok_or(Error::Aborted)?;
    crate::ool::check_migrating(server, descs)?;
    crate::ool::carry_migrating(k, server, client, descs)
}

/// The return of a call to the caller's IPC buffer page `to` whose reply (at `from`, the
/// server's buffer) carries out-of-line regions: they are carried into the caller's task
/// ([`carry_reply`]) and the caller receives the header claiming them, their descriptors
/// with its own addresses, and the rest of the reply. [`Error::BadFormat`] for a reply
/// whose descriptors are not all well-formed regions, [`Error::TooLarge`] for one that
/// does not fit the page, the region checks' errors for bad regions (nothing is carried
/// then).
#[cold]
#[inline(never)]
fn reply_regions(
    k: &mut Kernel,
    saved: &Context,
    from: PhysAddr,
    to: PhysAddr,
    reply: &MsgHeader,
) -> Result<(), Error> {
    let room = k
        .acts
        .get(saved.act)
        .map_or(IPC_BUFFER_SIZE, |a| a.buffer_len);
    let mut all = [Descriptor::default(); MIGRATING_REGIONS];
    let descs = reply_descriptors(from, reply, room, &mut all)?;
    let size = reply.size as usize;
    if size > IPC_BUFFER_SIZE {
        return Err(Error::TooLarge);
    }
    carry_reply(k, saved, descs)?;
    let [_, rcv_name, ..] = saved.frame.syscall_args().1;
    paging::write_header(
        to,
        MsgHeader {
            bits: (descs.len() as u32) << 16,
            size: reply.size,
            dest: rcv_name,
            reply: 0,
            id: reply.id,
        },
    );
    for (i, d) in descs.iter().enumerate() {
        paging::write_phys(
            PhysAddr(to.0 + (HEADER_SIZE + i * DESCRIPTOR_SIZE) as u64),
            &d.to_bytes(),
        );
    }
    let at = HEADER_SIZE + descs.len() * DESCRIPTOR_SIZE;
    if size > at {
        paging::copy_phys(
            PhysAddr(to.0 + at as u64),
            PhysAddr(from.0 + at as u64),
            size - at,
        );
    }
    Ok(())
}

/// Why the reply `reply` of the call `saved` (to the caller's IPC buffer page) is refused:
/// [`Error::TooLarge`] when it is well formed but larger than that page (it fits the
/// activation's buffer), else [`Error::BadFormat`].
#[cold]
#[inline(never)]
fn refused(k: &Kernel, saved: &Context, reply: &MsgHeader) -> Error {
    let room = k
        .acts
        .get(saved.act)
        .map_or(IPC_BUFFER_SIZE, |a| a.buffer_len);
    let size = reply.size as usize;
    if reply.bits >> 16 == 0 && size > IPC_BUFFER_SIZE && size <= room {
        Error::TooLarge
    } else {
        Error::BadFormat
    }
}

/// The return of a call whose request came from the caller's own buffer `[va, va + len)`
/// (`saved`): the reply in the activation's buffer (up to its size) is copied into that
/// buffer, each byte once, through both tasks' page tables. [`Error::BadFormat`] for a
/// malformed reply (descriptors claimed, shorter than a header, longer than the
/// activation's buffer), [`Error::TooLarge`] if it does not fit the caller's buffer,
/// [`Error::BadAddress`] if either buffer's memory went away; the caller's buffer is
/// written only when none of these happens.
fn reply_to_user(k: &mut Kernel, saved: &Context, va: u64, len: usize) -> Result<(), Error> {
    match reply_once(k, saved, va, len) {
        // Pages not there yet: the caller's buffer made resident and writable (as far as
        // the activation's buffer could fill it), and a retired activation's buffer
        // resident, as the tasks' own accesses would; then once more.
        Err(Error::BadAddress) => {
            let act = k.acts.get(saved.act).ok_or(Error::BadAddress)?;
            let (from_va, room, server) = (act.buffer.0, act.buffer_len, act.task_key);
            crate::vm::make_resident_key(k, saved.task_key, va, len.min(room), true)?;
            crate::vm::make_resident_key(k, server, from_va, room, false)?;
            reply_once(k, saved, va, len)
        }
        r => r,
    }
}

/// One try of [`reply_to_user`].
fn reply_once(k: &mut Kernel, saved: &Context, va: u64, len: usize) -> Result<(), Error> {
    let act = k.acts.get(saved.act).ok_or(Error::BadAddress)?;
    let (from_va, room) = (act.buffer.0, act.buffer_len);
    // While the activation is not retired its buffer is mapped and its frames are those
    // recorded at creation; once retired (perhaps because the server unmapped a page of
    // it) the server's page tables are walked, and say `BadAddress` for what is gone.
    let known = (!act.retired).then_some(usercopy::Frames {
        va: from_va,
        frames: act
            .frames
            .get(..act.buffer_len / PAGE_SIZE as usize)
            .unwrap_or(&[]),
    });
    let server = &k.tasks.by_key(act.task_key).ok_or(Error::BadAddress)?.space;
    let client = &k
        .tasks
        .by_key(saved.task_key)
        .ok_or(Error::BadAddress)?
        .space;
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    let reply = match known {
        Some(_) => paging::read_header(act.buffer.1),
        None => {
            let mut raw = [0u8; HEADER_SIZE];
            usercopy::copy_from_user(server, &mem, from_va, &mut raw)?;
            MsgHeader::from_bytes(&raw).ok_or(Error::BadFormat)?
        }
    };
    let size = reply.size as usize;
    if reply.bits >> 16 != 0 {
        return reply_regions_user(k, saved, va, len, &reply);
    }
    if !(HEADER_SIZE..=room).contains(&size) {
        return Err(Error::BadFormat);
    }
    if size > len {
        return Err(Error::TooLarge);
    }
    usercopy::check_writable(client, &mem, va, HEADER_SIZE)?;
    let at = HEADER_SIZE as u64;
    let data = size - HEADER_SIZE;
    match known {
        Some(known) => {
            usercopy::copy_frames_to_user(known, from_va + at, client, va + at, data, &mut mem)?
        }
        None => usercopy::copy_user_to_user(server, from_va + at, client, va + at, data, &mut mem)?,
    }
    let [_, rcv_name, ..] = saved.frame.syscall_args().1;
    let out = MsgHeader {
        bits: 0,
        size: reply.size,
        dest: rcv_name,
        reply: 0,
        id: reply.id,
    };
    usercopy::copy_to_user(client, &mut mem, va, &out.to_bytes())?;
    crate::vm::mark_stored(client, &mem, va, size);
    Ok(())
}

/// [`reply_once`] for a reply that carries out-of-line regions, into the caller's own
/// buffer `[va, va + len)`: everything that can fail for want of a page (the caller's
/// buffer writable for the whole reply, the server's reply readable) is checked before the
/// regions are carried ([`carry_reply`]), so a retry after [`Error::BadAddress`] never
/// carries twice; then the caller's buffer receives the header, the descriptors with its
/// addresses and the rest of the reply.
#[cold]
#[inline(never)]
fn reply_regions_user(
    k: &mut Kernel,
    saved: &Context,
    va: u64,
    len: usize,
    reply: &MsgHeader,
) -> Result<(), Error> {
    let act = k.acts.get(saved.act).ok_or(Error::BadAddress)?;
    let (from_va, room, server_key) = (act.buffer.0, act.buffer_len, act.task_key);
    let mut all = [Descriptor::default(); MIGRATING_REGIONS];
    let n = ((reply.bits >> 16) & 0xff) as usize;
    if n > MIGRATING_REGIONS {
        return Err(Error::BadFormat);
    }
    // The descriptors, read through the server's page tables (the activation may be
    // retired: its recorded frames are not trusted then).
    let descs = all.get_mut(..n).ok_or(Error::BadFormat)?;
    user_regions(k, server_key, from_va, descs).ok_or(Error::BadFormat)?;
    let size = reply.size as usize;
    let descs_end = HEADER_SIZE + n * DESCRIPTOR_SIZE;
    if reply.bits & 0xffff != 0 || descs_end > size || size > room {
        return Err(Error::BadFormat);
    }
    if size > len {
        return Err(Error::TooLarge);
    }
    {
        let server = &k.tasks.by_key(server_key).ok_or(Error::BadAddress)?.space;
        let client = &k
            .tasks
            .by_key(saved.task_key)
            .ok_or(Error::BadAddress)?
            .space;
        let mem = KernelMem {
            frames: &mut k.frames,
        };
        usercopy::check_writable(client, &mem, va, size)?;
        usercopy::check_readable(server, &mem, from_va, size)?;
    }
    carry_reply(k, saved, descs)?;
    let server = &k.tasks.by_key(server_key).ok_or(Error::BadAddress)?.space;
    let client = &k
        .tasks
        .by_key(saved.task_key)
        .ok_or(Error::BadAddress)?
        .space;
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    let data = size - descs_end;
    let at = descs_end as u64;
    // Checked above, and neither buffer is touched by the carry (regions are never wired
    // pages, and land in free space): these cannot fail now but for a bug, and then the
    // caller is told.
    usercopy::copy_user_to_user(server, from_va + at, client, va + at, data, &mut mem)?;
    for (i, d) in descs.iter().enumerate() {
        usercopy::copy_to_user(
            client,
            &mut mem,
            va + (HEADER_SIZE + i * DESCRIPTOR_SIZE) as u64,
            &d.to_bytes(),
        )?;
    }
    let [_, rcv_name, ..] = saved.frame.syscall_args().1;
    let out = MsgHeader {
        bits: (n as u32) << 16,
        size: reply.size,
        dest: rcv_name,
        reply: 0,
        id: reply.id,
    };
    usercopy::copy_to_user(client, &mut mem, va, &out.to_bytes())
}

/// Restores `saved` (just popped off the activation stack of `cur`, the thread running on
/// this CPU) as `cur`'s running activation, gives its server activation back, and leaves
/// to user mode with `result` as its `ipc_msg`'s. A sidetrack record retries the call
/// instead. If the restored activation's task is ending, goes on unwinding below it with
/// [`Error::Aborted`], or ends the thread when it is home.
#[inline(always)]
fn resume_below(k: &mut Kernel, cur: ThreadId, saved: ContextBox, result: Result<(), Error>) -> ! {
    give_back(k, saved.act, saved.port);
    let alive = lives(&saved);
    let sidetrack = saved.to == ReplyTo::Sidetrack;
    let fault = saved.to == ReplyTo::Fault;
    let cpu = crate::arch::gdt::this_cpu();
    let mut saved = saved;
    let fpu = if fault {
        saved.fpu.take().map(|a| (a, saved.fpu_kept))
    } else {
        None
    };
    let kernel_root = k.kernel_root;
    let Some(c) = k.cpus.get_mut(cpu) else {
        panic!("resume_below: CPU {cpu} is not online (thread {cur:?})");
    };
    // SAFETY: `cur` runs on this CPU and every other reference to it (through
    // `k.threads`, in the calls above) is gone.
    let th = unsafe { thread::current_mut() };
    let left_exc_port = restore(th, saved);
    // A kill pending on a migrated thread was aimed at the activation just left (its
    // task is ending); the one below is dealt with by the `alive` check.
    th.kill_pending = false;
    if sidetrack {
        // Run the `ipc_msg` again: `rax` still holds its number, `rip` steps back over
        // the two-byte `syscall`.
        th.ctx.frame.rip = th.ctx.frame.rip.wrapping_sub(2);
        th.ctx.frame.rax = Sys::IpcMsg as u64;
        th.sidetracked = true;
    } else if !fault {
        th.ctx.frame.rax = result.map_or_else(Error::to_raw, |()| 0);
    }
    kernel::switch_activation(c, kernel_root, th);
    if let Some((area, kept)) = fpu {
        // Back from a pager: the faulting context's registers as they were. The copy's box
        // stays with the context for its next fault.
        crate::fpu::restore_after_fault(c, &area, kept);
        th.ctx.fpu = Some(area);
    }
    if let Some(port) = left_exc_port {
        release_exc_port(k, port);
    }
    if !alive {
        unwind_further(k, cur);
    }
    // A task this thread left by this return and that lingered for it is removed at the
    // next timer tick (`Kernel::reap_lingering`), off this path.
    kernel::leave_to_user()
}

/// The activation `cur` (the thread running on this CPU) just returned into is dead (its
/// task is ending, or it was terminated): unwind further, or end the thread at home. Out of
/// line, so that [`resume_below`], which it calls again, can be inlined into the return.
#[cold]
#[inline(never)]
fn unwind_further(k: &mut Kernel, cur: ThreadId) -> ! {
    // SAFETY: `cur` runs on this CPU and no other reference to it is in use.
    let th = unsafe { thread::current_mut() };
    let below = th.below.pop();
    k.reap_lingering();
    match below {
        Some(below) => resume_below(k, cur, below, Err(Error::Aborted)),
        None => thread::thread_terminate_current(k),
    }
}

/// Whether the activation `saved` lives on: it was not terminated, and its task is not
/// ending (`Kernel::end_task` marks every record of an ending task dead).
fn lives(saved: &Context) -> bool {
    !saved.ctl.dead
}

/// Makes `saved` (the context just unlinked from below the running one) the running
/// context of `th` again, by pointer. The context left is kept as the spare (its frame
/// holds its task's registers, which a next call into that task may find again).
///
/// Returns the exception port the activation left had set for the thread (a send right
/// the kernel holds, which belongs to that activation and ends with it): the caller gives
/// it back ([`release_exc_port`]) once it may use the kernel again.
#[must_use = "the exception port of the activation left is a held send right to give back"]
#[inline(always)]
fn restore(th: &mut Thread, saved: ContextBox) -> Option<PortId> {
    let mut left = core::mem::replace(&mut th.ctx, saved);
    let port = left.exc_port.take();
    if left.ctl.suspend > 0 {
        crate::control::suspended_sub(1);
    }
    th.spare = Some(left);
    port
}

/// Gives back an exception port's send right the kernel held for an activation that has
/// ended (off the common path: an activation rarely sets one).
#[cold]
#[inline(never)]
pub fn release_exc_port(k: &mut Kernel, port: PortId) {
    let mut fx = crate::ipc::effects(k);
    k.ipc.release_held_send(port, &mut fx);
    crate::ipc::apply(k, fx);
}

/// Gives the server activation `a` back to the pool of `port` and wakes one caller waiting
/// for an activation there.
#[inline(always)]
fn give_back(k: &mut Kernel, a: ActId, port: PortId) {
    let mut port = k.ipc.port_mut(port);
    if k.acts
        .give_back(a, port.as_deref_mut().map(|p| &mut p.pool))
    {
        if let Some(t) = port.and_then(|p| p.senders.pop_front()) {
            k.unblock(t);
        }
    }
    k.stats.activations = k.acts.len() as u64;
}

/// The running activation of the current thread is being terminated (its task ends, or it
/// asked to end): a migrated thread unwinds to its caller instead, whose call fails with
/// [`Error::Aborted`]. Returns only for a thread at home (which really ends).
pub fn unwind_current(k: &mut Kernel) {
    let cur = k.current_thread();
    let Some(th) = k.threads.get_mut(cur) else {
        return;
    };
    let Some(saved) = th.below.pop() else {
        return;
    };
    th.kill_pending = false;
    th.state = ThreadState::Running {
        cpu: crate::arch::gdt::this_cpu(),
    };
    resume_below(k, cur, saved, Err(Error::Aborted))
}

/// Unwinds thread `t` (not running) out of every activation of task `id` on the top of its
/// stack, its call failing with [`Error::Aborted`]; `t` is then ready (or ends, when every
/// activation below is gone too). Returns false, changing nothing, when `t` is at home.
pub fn unwind_other(k: &mut Kernel, t: ThreadId) -> bool {
    let Some(th) = k.threads.get_mut(t) else {
        return false;
    };
    let Some(saved) = th.below.pop() else {
        return false;
    };
    let mut saved = saved;
    loop {
        let alive = lives(&saved);
        let (act, port) = (saved.act, saved.port);
        let Some(th) = k.threads.get_mut(t) else {
            return true;
        };
        let left_exc_port = restore(th, saved);
        crate::fpu::reset_saved(th);
        th.ctx.frame.rax = Error::Aborted.to_raw();
        th.cont = Some(Continuation::new(Resume::UserReturn));
        if let Some(p) = left_exc_port {
            release_exc_port(k, p);
        }
        give_back(k, act, port);
        k.reap_lingering();
        if alive {
            return true;
        }
        match k.threads.get_mut(t).and_then(|th| th.below.pop()) {
            Some(next) => saved = next,
            None => {
                // Home is ending too: end the thread like any other of its task (off the
                // run queue first, when it was ready).
                k.halt_and_reap(t);
                return true;
            }
        }
    }
}

/// What a pool activation costs its task's account (`crate::quota`): the activation
/// (twice: its slab doubles), its pool entry and the saved record a call through it may
/// need.
pub const ACTIVATION_BYTES: usize = 2 * core::mem::size_of::<kern::activation::Activation>()
    + core::mem::size_of::<Context>()
    + 128;

/// `act_create(port_name, entry, stack_top, buffer, cookie, buffer_size)`.
pub fn sys_act_create(k: &mut Kernel, task: TaskId, a: [u64; 6]) -> Result<u64, Error> {
    let [_, entry, stack, buffer, _, buffer_size] = a;
    let user = |va: u64| (USER_MIN..USER_END).contains(&va);
    if !user(entry) || !user(stack.wrapping_sub(8)) || !stack.is_multiple_of(16) {
        return Err(Error::InvalidArgument);
    }
    if !buffer.is_multiple_of(PAGE_SIZE) {
        return Err(Error::InvalidArgument);
    }
    // 0: one page (the five-argument form); else whole pages, at most a largest message.
    let buffer_len = match buffer_size {
        0 => PAGE_SIZE as usize,
        n if n.is_multiple_of(PAGE_SIZE) && n <= MSG_SIZE_MAX as u64 => n as usize,
        _ => return Err(Error::InvalidArgument),
    };
    // The kernel records the buffer's frames: they are made resident and wired first
    // (the virtual-memory family), for as long as the activation lives.
    use crate::vm::Owner;
    let len = buffer_len as u64;
    crate::vm::wire(k, task, buffer, len, Owner::NewAct)?;
    match create_wired(k, task, a, buffer_len) {
        Ok(id) => {
            crate::vm::rename_wiring(task, buffer, len, Owner::NewAct, Owner::Act(Key(id)));
            Ok(id)
        }
        Err(e) => {
            let _ = crate::vm::unwire(k, task, buffer, len, Owner::NewAct);
            Err(e)
        }
    }
}

/// [`sys_act_create`] once its arguments are checked and its buffer wired.
fn create_wired(
    k: &mut Kernel,
    task: TaskId,
    a: [u64; 6],
    buffer_len: usize,
) -> Result<u64, Error> {
    let [name, entry, stack, buffer, cookie, _] = a;
    let task_key = k.tasks.key_of(task).ok_or(Error::InvalidArgument)?;
    let mem = KernelMem {
        frames: &mut k.frames,
    };
    let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    // Every page of the buffer mapped user-writable (the request is copied into it).
    usercopy::check_writable(&t.space, &mem, buffer, buffer_len)?;
    let mut frames = [PhysAddr(0); kern::activation::BUFFER_PAGES];
    for (i, slot) in frames
        .iter_mut()
        .enumerate()
        .take(buffer_len / PAGE_SIZE as usize)
    {
        let (pa, flags) = t
            .space
            .translate(&mem, buffer + i as u64 * PAGE_SIZE)
            .ok_or(Error::BadAddress)?;
        if !flags.user || !flags.writable {
            return Err(Error::BadAddress);
        }
        *slot = pa;
    }
    let pa = frames[0];
    let space = (t.space.root(), t.pcid);
    let port = k.ipc.receive_port(&t.names, name)?;
    // The task pays for the activations it has, this one included: the charge follows the
    // count here and when the task ends (activations freed in between stay charged until
    // then, which errs on the safe side).
    let want = (k.acts.count_of(task) as u64 + 1) * ACTIVATION_BYTES as u64;
    let t = k.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
    crate::quota::settle(&t.account, &mut t.acts_charged, want)?;
    let p = k.ipc.port_mut(port).ok_or(Error::InvalidName)?;
    let id = k.acts.create(
        &mut p.pool,
        Activation {
            task,
            task_key,
            space,
            port,
            entry,
            stack,
            buffer: (buffer, pa),
            buffer_len,
            frames,
            cookie,
            occupant: Key(0),
            occupied: false,
            retired: false,
        },
    )?;
    k.stats.activations = k.acts.len() as u64;
    // A caller may be waiting for an activation of this port.
    if let Some(t) = k.ipc.port_mut(port).and_then(|p| p.senders.pop_front()) {
        k.unblock(t);
    }
    Ok(id.0)
}

/// `port_sidetrack(port_name, on)`.
pub fn sys_port_sidetrack(k: &mut Kernel, task: TaskId, name: u64, on: u64) -> Result<u64, Error> {
    let on = match on {
        0 => false,
        1 => true,
        _ => return Err(Error::InvalidArgument),
    };
    let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let port = k.ipc.receive_port(&t.names, name)?;
    let p = k.ipc.port_mut(port).ok_or(Error::InvalidName)?;
    p.pool.sidetrack = on;
    Ok(0)
}

/// Retires the activations for which `gone` holds (their task ended, their port died, a
/// page of their buffer was unmapped): free ones now, occupied ones when their call returns.
pub fn retire(k: &mut Kernel, gone: impl Fn(&Activation) -> bool) {
    let ipc = &mut k.ipc;
    k.acts.retire_each(gone, |id, port| {
        if let Some(p) = ipc.port_mut(port) {
            p.pool.forget(id);
        }
    });
    k.stats.activations = k.acts.len() as u64;
}

/// Task `id` is ending (its activations are retired, `retire`): every activation of it
/// below the top of a thread is dead from now on, so that a migrating return checks one flag ([`lives`])
/// instead of looking the task up. (No new record of the task can appear: its threads, own
/// or migrated into it, are killed and make no further call.) Allocates nothing.
pub fn task_ending(k: &mut Kernel, id: TaskId) {
    for (_, th) in k.threads.iter_mut() {
        for rec in th.below.iter_mut().filter(|r| r.task == Some(id)) {
            rec.ctl.dead = true;
        }
    }
}

/// Retires the activations attached to ports that no longer exist (their pools went with
/// the ports, so there is nothing to take them out of). Allocates nothing.
pub fn retire_orphans(k: &mut Kernel) {
    let ipc = &k.ipc;
    k.acts
        .retire_each(|a| ipc.port(a.port).is_none(), |_, _| {});
    k.stats.activations = k.acts.len() as u64;
}

/// Seed 001's split (section 5): pool activation `index` of thread `t` is terminated while
/// the thread runs above it (`1 <= index < below.len()`). The part below it becomes a new
/// thread at once: its top activation, the terminated one's caller, resumes with
/// [`Error::Aborted`] (the terminated activation goes back to its pool). `t` keeps the part
/// above, which goes on with an alert and ends when it returns into the terminated
/// activation (whose record is now `t`'s bottom, dead). Returns `false`, changing nothing,
/// when the part below cannot go on by itself (an activation of it is dead too, or its
/// task is ending): the caller then just marks the activation dead.
///
/// The part above keeps `t`'s id, since it may be running on another CPU or waiting in a
/// queue under that id; the part below, the caller's own code, gets a new id and takes
/// `t`'s thread port with it. Thread counts follow: the home task keeps one (now the new
/// thread), and the terminated activation's task counts `t`, which ends in it.
pub fn split(k: &mut Kernel, t: ThreadId, index: usize) -> bool {
    let Some(th) = k.threads.get(t) else {
        return false;
    };
    let Some(lower) = th.below.get(..index) else {
        return false;
    };
    if index == 0 || index >= th.below.len() || lower.iter().any(|r| r.ctl.dead) {
        return false;
    }
    let (Some(home), Some(top)) = (lower.first().and_then(|r| r.task), lower.last()) else {
        return false;
    };
    let (Some(_), Some(top_task), Some(_)) = (k.tasks.key_of(home), top.task, top.space) else {
        return false;
    };
    let upper_task = th.below.get(index).and_then(|r| r.task);
    if [Some(home), Some(top_task), upper_task]
        .into_iter()
        .any(|id| id.is_none_or(|id| k.tasks.get(&id).is_none_or(|task| task.ending.is_some())))
    {
        return false;
    }
    let (priority, cpu, pinned) = (th.priority, th.cpu, th.pinned);
    // The new thread needs room in the run queues, reserved before anything moves.
    if thread::reserve_ready(k, priority).is_err() {
        return false;
    }
    // Everything the new thread needs is made (and paid for by its home task) before
    // anything moves, so that a failure leaves `t` as it was.
    let made = (|| {
        let account = &k.tasks.get(&home)?.account;
        let charge = crate::quota::heap(account, crate::quota::THREAD_BYTES).ok()?;
        // A placeholder context, replaced by the part's top one below.
        let mut l = Thread::new_user(Context::default, priority, cpu)?;
        l.charge = Some(charge);
        l.below.try_reserve_exact(index).ok()?;
        Some(l)
    })();
    let Some(mut l) = made.filter(|_| k.threads.reserve_one()) else {
        thread::release_ready(k, priority);
        return false;
    };
    // The part below leaves `t`.
    let Some(th) = k.threads.get_mut(t) else {
        thread::release_ready(k, priority);
        return false;
    };
    l.below.extend(th.below.drain(..index));
    if let Some(rec) = th.below.first_mut() {
        rec.ctl.dead = true;
    }
    let kport = th.kport.take();
    let Some(mut top) = l.below.pop() else {
        thread::release_ready(k, priority);
        return false;
    };
    // The new thread runs the caller's activation, whose `ipc_msg` fails.
    let (top_act, top_port) = (top.act, top.port);
    top.frame.rax = Error::Aborted.to_raw();
    l.ctx = top;
    // The part's bottom is `t`'s own context: its contents move into the new thread.
    l.adopt_bottom();
    l.pinned = pinned;
    l.kport = kport;
    let Ok(lid) = k.threads.insert(l) else {
        // Not reachable (room reserved above). Refuse rather than panic; the part below is
        // gone with the box.
        thread::release_ready(k, priority);
        return false;
    };
    if let Some(th) = k.threads.get_mut(lid) {
        th.id = lid;
        for r in &th.below {
            if let Some(act) = k.acts.get_mut(r.act) {
                act.occupant = lid;
            }
        }
    }
    if let Some(port) = kport {
        crate::kobject::tag(k, port, crate::kobject::KObject::Thread(lid));
    }
    if let Some(task) = upper_task.and_then(|id| k.tasks.get_mut(&id)) {
        task.threads += 1;
    }
    // The terminated activation's call is over.
    give_back(k, top_act, top_port);
    k.stats.threads_created += 1;
    k.stats.threads = k.threads.len().saturating_sub(k.cpus.len()) as u64;
    thread::thread_setrun(k, lid);
    // Whoever waited for `t`'s state at some index looks again (the indexes moved).
    crate::control::release_waiters(k, t);
    true
}
