//! The default pager: the user task that keeps anonymous memory the kernel's page
//! replacement takes out of physical memory (Accent section 2.2.6; Mach's default pager).
//! `docs/vm.md`, "Paging", describes the protocol; `crate::vm::replace` is the kernel's
//! side of the replacement itself.
//!
//! - `default_pager_register(port, slots, host_priv)`: a task holding the host-privilege
//!   right becomes the default pager. The kernel keeps a send right to `port` and offers
//!   `slots` pages of backing store to page replacement, and the root account's frame
//!   limit grows by them (anonymous memory may be committed up to memory plus the store,
//!   `crate::quota::set_backing`) until the pager is gone. One at a time; a new one may
//!   register once the old one's task has ended (restart).
//! - Page-out: a user fault that finds free frames at the low-water mark first reclaims a
//!   batch ([`page_fault`]); each anonymous victim's bytes go to the pager in a
//!   `PAGE_OUT` message and its frame is free once the message is queued. At most
//!   [`INFLIGHT_MAX`] messages wait in its queue: that bound, not a task's quota, limits
//!   the kernel heap they hold (a quota could make the path that frees memory fail).
//! - Page-in: a fault on a paged-out page sends `PAGE_IN` and the thread waits, blocked
//!   (`Blocked::PageIn`) with the continuation that returns to user mode, as for an
//!   external pager; `default_pager_supply` puts the page back and wakes it.
//! - The pager's end (its task ends, or its port is found dead): every slot it held is
//!   lost, every waiting thread wakes and faults again, and faults on lost pages are
//!   errors sent to the task's exception port. Memory that cannot be had (no pager, store
//!   full) is `NoMemory`, never a hang: a fault short of memory waits a moment (blocked,
//!   with a timeout, [`wait_memory`]) and is taken again only while page-outs are queued
//!   to a live pager or a new batch could be reclaimed.
//!
//! # Invariants
//! - Every thread in `waiting` is blocked `PageIn` on that page, once.
//! - `port` and `task` are both set, or neither; the kernel holds one send right to
//!   `port` while set.

use crate::kernel::{Kernel, TaskId};
use crate::locked::Locked;
use crate::thread::{self, Blocked, ThreadId};
use crate::vm::replace;
use crate::vm::{Failure, PageWait};
use alloc::vec::Vec;
use baton_abi::paging::{
    PagingStats, Transfer, PAGE_IN, PAGE_SIZE, SCOPE_SYSTEM, SCOPE_TASK, SLOTS_MAX, TRANSFER_SIZE,
};
use baton_abi::Error;
use kern::continuation::{Continuation, Resume};
use kern::ipc::{Message, PortId};
use kern::slab::Key;
use kern::vm::object::ObjectId;

/// Most page-out and page-in messages queued to the default pager at once.
pub const INFLIGHT_MAX: usize = 64;

struct State {
    /// The default pager's port and task.
    pager: Option<(PortId, TaskId)>,
    /// Threads waiting for a page: (thread, object, offset).
    waiting: Vec<(ThreadId, ObjectId, u64)>,
    registered: u64,
}

static STATE: Locked<State> = Locked::new();

/// The family's state.
///
/// # Safety
/// The caller holds the big kernel lock and keeps the reference only while it calls
/// nothing that could take it again.
unsafe fn state() -> &'static mut State {
    // SAFETY: the caller holds the lock and no other reference to the cell is live.
    unsafe {
        STATE.get_or_make(|| State {
            pager: None,
            waiting: Vec::new(),
            registered: 0,
        })
    }
}

/// Registers the family with the virtual-memory family (once, at boot).
pub fn init() {
    crate::vm::set_swapper(ask);
}

/// The system calls of this family.
pub fn sys(k: &mut Kernel, task: TaskId, call: baton_abi::Sys, a: [u64; 6]) -> Result<u64, Error> {
    use baton_abi::Sys;
    match call {
        Sys::DefaultPagerRegister => register(k, task, a[0], a[1], a[2]),
        Sys::DefaultPagerSupply => supply(k, task, a[0], a[1]),
        Sys::PagingStats => stats(k, task, a[0], a[1]),
        Sys::PagingLimit => {
            let cur = k.current_thread();
            crate::kobject::check_host_priv(k, cur, a[1])?;
            replace::set_limit(k, a[0])
        }
        Sys::PagingExempt => {
            let cur = k.current_thread();
            crate::kobject::check_host_priv(k, cur, a[1])?;
            let target = crate::taskmake::task_of(k, task, a[0])?;
            replace::exempt(k, target).map(|()| 0)
        }
        _ => Err(Error::InvalidArgument),
    }
}

/// `default_pager_register(port, slots, host_priv)`.
fn register(
    k: &mut Kernel,
    task: TaskId,
    port_name: u64,
    slots: u64,
    host: u64,
) -> Result<u64, Error> {
    let cur = k.current_thread();
    crate::kobject::check_host_priv(k, cur, host)?;
    if slots == 0 || slots > SLOTS_MAX {
        return Err(Error::InvalidArgument);
    }
    // SAFETY: the lock is held; the reference ends in this statement.
    if let Some((_, t)) = unsafe { state() }.pager {
        if k.tasks.get(&t).is_some() {
            return Err(Error::Busy);
        }
        gone(k);
    }
    // Room for every thread that may wait, made now (a wait allocates nothing more than
    // this grows by, fallibly).
    let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let port = k.ipc.hold_send(&t.names, port_name)?;
    // SAFETY: the lock is held; the reference ends in this statement.
    let r = unsafe { replace::replace() };
    if let Err(e) = r.slots.set_capacity(slots as u32) {
        let mut fx = crate::ipc::effects(k);
        k.ipc.release_held_send(port, &mut fx);
        crate::ipc::apply(k, fx);
        return Err(e);
    }
    r.pager = Some(task);
    r.stats.pagers_registered += 1;
    // Anonymous memory may now be committed up to memory plus the pager's store.
    crate::quota::set_backing(slots);
    // SAFETY: the lock is held; the reference ends in this block.
    let st = unsafe { state() };
    st.pager = Some((port, task));
    st.registered += 1;
    Ok(0)
}

/// The default pager's port, if one is registered.
fn pager_port() -> Option<PortId> {
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.pager.map(|(p, _)| p)
}

/// Messages queued to the default pager now.
fn queued(k: &Kernel) -> usize {
    pager_port()
        .and_then(|p| k.ipc.port(p))
        .map_or(0, |p| p.queue.len())
}

/// Queues kernel message `id` with `data` to the default pager (uncharged: see the module
/// documentation). [`Error::DeadName`] if it is gone (it is then forgotten), `NoSpace`
/// when [`INFLIGHT_MAX`] are queued.
fn send(k: &mut Kernel, id: u64, data: Vec<u8>) -> Result<(), Error> {
    // SAFETY: the lock is held; the reference ends in this statement.
    let Some((port, task)) = unsafe { state() }.pager else {
        return Err(Error::DeadName);
    };
    let Some(p) = k.ipc.port_mut(port) else {
        gone(k);
        return Err(Error::DeadName);
    };
    if p.queue.len() >= INFLIGHT_MAX {
        return Err(Error::NoSpace);
    }
    p.reserve_queue(1)?;
    if k.tasks.get(&task).is_none() {
        return Err(Error::DeadName);
    }
    // Not charged to anyone: at most INFLIGHT_MAX such messages exist (the kernel's own
    // bounded reserve for replacement), and the path that frees memory must not fail for
    // the pager's (or a victim's) quota.
    let mut fx = crate::ipc::effects(k);
    k.ipc.enqueue(
        port,
        Message {
            id,
            data,
            ..Message::default()
        },
        &mut fx,
    );
    crate::ipc::apply(k, fx);
    Ok(())
}

/// Reclaims a batch and sends its page-outs; whether a page-out was sent.
///
/// Anonymous pages are not taken while the default pager's queue has no room for a whole
/// batch: a page-out that cannot be queued leaves its page resident but stripped of its
/// translations, so a reclaim then only costs the pages' next touches soft faults, and a
/// fault waiting for memory that retries would strip batch after batch while the pager
/// catches up (each retry finding the queue still full). Pages of pager-backed objects,
/// which need no room there, are taken all the same (a file read behind a busy default
/// pager goes on; `fs_evict` checks it).
fn reclaim(k: &mut Kernel) -> bool {
    // While the default pager's queue has no room for a batch, anonymous pages stay (their
    // page-outs could not be queued, and stripping them for nothing starved the tasks that
    // use them); pages that need no room there still go: clean pager-backed pages are
    // dropped, written ones go back to their own pager.
    let anonymous =
        pager_port().is_none() || queued(k).saturating_add(replace::BATCH) <= INFLIGHT_MAX;
    let outs = replace::reclaim(k, anonymous);
    let mut freed = false;
    for mut o in outs {
        let data = core::mem::take(&mut o.data);
        let sent = send(k, baton_abi::paging::PAGE_OUT, data).is_ok();
        replace::finish(k, &o, sent);
        freed |= sent;
    }
    freed
}

/// Asks the default pager for the paged-out page `w` (its slot in `w.ask`), for task
/// `task`'s access. On an error the page is not asked any more.
fn ask(k: &mut Kernel, task: TaskId, w: PageWait) -> Result<(), Failure> {
    let slot = w.ask.unwrap_or(0);
    let t = Transfer {
        object: w.object.0 .0,
        offset: w.offset,
        slot,
        task,
    };
    let mut data: Vec<u8> = Vec::new();
    let sent = data
        .try_reserve_exact(TRANSFER_SIZE)
        .map_err(|_| Error::NoMemory)
        .and_then(|()| {
            data.extend_from_slice(&t.to_bytes());
            send(k, PAGE_IN, data)
        });
    match sent {
        Ok(()) => Ok(()),
        Err(e) => {
            crate::vm::swap_not_asked(w.object, w.offset);
            Err(if e == Error::DeadName {
                Failure::Pager
            } else {
                Failure::NoMemory
            })
        }
    }
}

/// The page-fault hook: replacement first when memory is low, then the virtual-memory
/// family's work, then a wait for the default pager (or an external pager, through
/// `crate::pager`) when the page must come from one (does not return then).
pub fn page_fault(k: &mut Kernel, t: ThreadId, addr: u64, error: u64) -> Result<(), u64> {
    let Some(task) = k.threads.get(t).and_then(|th| th.ctx.task) else {
        return crate::pager::fault_result(k, t, Err(Failure::Address));
    };
    if replace::wanted(k, task) {
        reclaim(k);
    }
    match crate::vm::page_fault(k, t, addr, error) {
        Err(Failure::SwapIn(w)) => {
            if w.ask.is_some() {
                match ask(k, task, w) {
                    Ok(()) => {}
                    // The pager's queue is full of page-outs: it works through them
                    // first, then the access is made again (and asks again).
                    Err(Failure::NoMemory) if pager_port().is_some() => wait_memory(k, t),
                    Err(f) => return Err(f.code()),
                }
            }
            wait(k, t, w, Continuation::new(Resume::UserReturn)).map_err(Failure::code)
        }
        Err(Failure::NoMemory) => {
            // Page-outs on their way to a live pager free room as it takes them: wait a
            // little and fault again. Otherwise there is no memory to be had.
            if pager_port().is_some() && (queued(k) > 0 || reclaim(k)) {
                wait_memory(k, t);
            }
            replace::count_no_memory(task);
            Err(Failure::NoMemory.code())
        }
        r => crate::pager::fault_result(k, t, r),
    }
}

/// How long a fault short of memory waits, while page-outs are on their way to the
/// default pager, before it is taken again (the timer's resolution rounds it up).
const MEMORY_WAIT_NS: u64 = 1_000_000;
/// The object a fault waiting for memory names in its `Blocked::PageIn` (no object's id).
pub const WAIT_MEMORY: u64 = u64::MAX;

/// Blocks the current thread `t`, whose fault found no frame while page-outs wait in the
/// default pager's queue, for [`MEMORY_WAIT_NS`] (or until the pager ends); the fault is
/// then taken again. Blocking rather than yielding: the pager works at the disk's pace, and
/// a thread yielding in a loop meanwhile would keep the processor busy doing nothing.
fn wait_memory(k: &mut Kernel, t: ThreadId) -> ! {
    if let Err(()) = wait_memory_then(k, t, Continuation::new(Resume::UserReturn)) {
        thread::thread_yield_keeping(k, t);
    }
    unreachable!("wait_memory_then returns only when it cannot wait")
}

/// [`wait_memory`] for a kernel copy's page the default pager could not be asked for yet
/// (its queue full of page-outs): the thread waits a moment and resumes at `cont` (which
/// makes its copy, and so the request, again). Returns only when there is no room to
/// list the thread.
pub fn wait_memory_then(k: &mut Kernel, t: ThreadId, cont: Continuation) -> Result<(), ()> {
    let listed = {
        // SAFETY: the lock is held; the reference ends in this block.
        let st = unsafe { state() };
        let ok = st.waiting.try_reserve(1).is_ok();
        if ok {
            st.waiting.push((t, ObjectId(Key(WAIT_MEMORY)), 0));
        }
        ok
    };
    if !listed {
        return Err(());
    }
    let deadline = crate::arch::apic::now_ns().saturating_add(MEMORY_WAIT_NS);
    thread::block_until(
        k,
        Blocked::PageIn {
            object: WAIT_MEMORY,
            offset: 0,
        },
        Some(deadline),
    );
    thread::thread_block_with(k, cont);
}

/// Blocks the current thread `t` until the paged-out page `w` is back (or the default
/// pager dies); it then resumes at `cont` (with [`Resume::UserReturn`], it makes its access
/// again). Returns only on an error.
pub fn wait(k: &mut Kernel, t: ThreadId, w: PageWait, cont: Continuation) -> Result<(), Failure> {
    if pager_port().is_none() || !crate::vm::swap_asked(w.object, w.offset) {
        return Err(Failure::Pager);
    }
    {
        // SAFETY: the lock is held; the reference ends in this block.
        let st = unsafe { state() };
        st.waiting.try_reserve(1).map_err(|_| Failure::NoMemory)?;
        st.waiting.push((t, w.object, w.offset));
    }
    thread::block_until(
        k,
        Blocked::PageIn {
            object: w.object.0 .0,
            offset: w.offset,
        },
        None,
    );
    thread::thread_block_with(k, cont);
}

/// Wakes the threads waiting for `offset` of `object` (every waiter, with `None`).
fn wake(k: &mut Kernel, page: Option<(ObjectId, u64)>) {
    loop {
        let next = {
            // SAFETY: the lock is held; the reference ends in this block.
            let st = unsafe { state() };
            st.waiting
                .iter()
                .position(|&(_, o, off)| page.is_none_or(|p| p == (o, off)))
                .map(|i| st.waiting.swap_remove(i).0)
        };
        match next {
            Some(t) => k.unblock(t),
            None => return,
        }
    }
}

/// Blocked thread `t` leaves its wait (a kill, its task's end, an alert).
pub fn forget_waiter(t: ThreadId) {
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.waiting.retain(|&(w, _, _)| w != t);
}

/// `default_pager_supply(transfer, buf)`.
fn supply(k: &mut Kernel, task: TaskId, transfer: u64, buf: u64) -> Result<u64, Error> {
    // SAFETY: the lock is held; the reference ends in this statement.
    if unsafe { state() }.pager.map(|(_, t)| t) != Some(task) {
        return Err(Error::Denied);
    }
    let mut rec = [0u8; TRANSFER_SIZE];
    k.copy_in(task, transfer, &mut rec)?;
    let t = Transfer::from_bytes(&rec).ok_or(Error::InvalidArgument)?;
    let slot = u32::try_from(t.slot).map_err(|_| Error::InvalidArgument)?;
    if t.offset % PAGE_SIZE != 0 {
        return Err(Error::InvalidArgument);
    }
    let mut page: Vec<u8> = Vec::new();
    page.try_reserve_exact(PAGE_SIZE as usize)
        .map_err(|_| Error::NoMemory)?;
    page.resize(PAGE_SIZE as usize, 0);
    k.copy_in(task, buf, &mut page)?;
    let object = ObjectId(Key(t.object));
    let put = match replace::swap_in(k, object, t.offset, slot, &page, t.task) {
        Ok(put) => put,
        Err(e) => {
            // Not even the reserve had a frame: the waiting threads fault again (after
            // reclaiming) and ask again, rather than wait for an answer that came.
            crate::vm::swap_not_asked(object, t.offset);
            wake(k, Some((object, t.offset)));
            return Err(e);
        }
    };
    if put {
        wake(k, Some((object, t.offset)));
    }
    Ok(u64::from(put))
}

/// `paging_stats(scope, out)`.
fn stats(k: &mut Kernel, task: TaskId, scope: u64, out: u64) -> Result<u64, Error> {
    let s: PagingStats = match scope {
        SCOPE_TASK => replace::stats(Some(task)),
        SCOPE_SYSTEM => replace::stats(None),
        _ => return Err(Error::InvalidArgument),
    }
    .ok_or(Error::InvalidArgument)?;
    let words: [u64; baton_abi::paging::PAGING_STATS_WORDS] = [
        s.pageouts,
        s.pageins,
        s.from_free,
        s.reclaimed_mapped,
        s.reclaimed_unmapped,
        s.reclaimed_pager,
        s.scanned,
        s.spared,
        s.no_store,
        s.no_memory,
        s.lost,
        s.pageable_limit,
        s.pageable_used,
        s.store_slots,
        s.store_used,
        s.pagers_registered,
        s.unsent,
    ];
    let mut bytes = [0u8; baton_abi::paging::PAGING_STATS_WORDS * 8];
    for (c, w) in bytes.chunks_exact_mut(8).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    k.copy_out(task, out, &bytes)?;
    Ok(0)
}

/// Task `id` was released: if it was the default pager, the pager is gone.
pub fn task_released(k: &mut Kernel, id: TaskId) {
    // SAFETY: the lock is held; the reference ends in this statement.
    if unsafe { state() }.pager.is_some_and(|(_, t)| t == id) {
        gone(k);
    }
}

/// The default pager is gone: its slots are lost, its port let go, every waiter woken
/// (each faults again and gets the error).
fn gone(k: &mut Kernel) {
    // SAFETY: the lock is held; the reference ends in this statement.
    let Some((port, _)) = unsafe { state() }.pager.take() else {
        return;
    };
    replace::pager_gone();
    crate::quota::set_backing(0);
    let mut fx = crate::ipc::effects(k);
    k.ipc.release_held_send(port, &mut fx);
    crate::ipc::apply(k, fx);
    wake(k, None);
}
