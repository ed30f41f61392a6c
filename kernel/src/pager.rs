//! External pagers: memory objects whose pages a user task supplies (Accent's port memory
//! objects, seed 002 sections 2.1–2.2; the data protocol of Mach's external memory
//! management interface). `docs/vm.md`, "External pagers", describes the protocol.
//!
//! - `memobj_pager(port, size, cookie)` makes a pager-backed object (`kern::vm::object`,
//!   `Kind::Pager`) named by a memory-object right (`crate::memobj`). The kernel keeps a
//!   send right to the pager's port and watches the port's death.
//! - A fault on a page the object lacks marks it *being paged in* (`kern::vm::fault`) and
//!   comes here: the kernel sends the pager a data request ([`ask`]) and the faulting thread
//!   waits, blocked (`Blocked::PageIn`) with the continuation that returns to user mode, so
//!   that the access is made again once the page is there (a page fault keeps no kernel
//!   stack). A kernel copy that meets such a page (a call's buffer) asks the same way and
//!   its call is made again from the start when the page is there ([`after_call`]): calls
//!   copy their arguments in before they act, so nothing is done twice.
//! - The pager answers with calls: `pager_supply` (the data: copied into new frames),
//!   `pager_unavailable` (zeros), `pager_error` (faults on the page become exceptions);
//!   each wakes the threads waiting for those pages, which fault again and find them.
//! - `pager_lock` restricts the accesses to pages of the object (Mach's lock request):
//!   translations allowing more go, and an access the lock forbids is sent to the pager
//!   as a `DATA_UNLOCK` request and waits, as a page-in does, until a `pager_lock` allows
//!   it.
//! - `pager_flush` takes pages back: each resident page in the range is sent to the pager
//!   in a data return (charged to the caller until received) and, with `FLUSH_DROP`,
//!   removed from every address space and the object (a *clean* keeps it).
//! - The wait is interruptible: the thread's task ending or the thread being killed takes it
//!   off the wait (`forget_waiter`); an alert ends it with the fault reported to the
//!   exception port as a pager fault ([`interrupt`]). A pager whose port dies makes the
//!   object's absent pages errors, and every thread waiting for one faults again and gets
//!   the exception ([`tidy`]).
//!
//! # Invariants
//! - A record exists for each pager-backed object alive; it holds one kernel send right to
//!   its pager's port, given back when the object goes (`Objects::take_freed_pager`).
//! - Every thread in a record's `waiting` list is blocked `PageIn` on that record's object,
//!   and no thread is in two lists or twice in one.
//! - A page marked being paged in was asked of its pager (or the pager is dead and the
//!   mark has been cleared): no fault waits for a request that was never sent.

use crate::kernel::{Kernel, TaskId};
use crate::locked::Locked;
use crate::thread::{self, Blocked, ThreadId};
use crate::vm::{Failure, PageWait};
use alloc::vec::Vec;
use baton_abi::pager::{
    Request, ACCESS_EXECUTE, ACCESS_READ, ACCESS_WRITE, DATA_REQUEST, DATA_RETURN, DATA_UNLOCK,
    FLUSH_DROP, FLUSH_FLAGS, FLUSH_MAX_PAGES, FLUSH_RETURN, KIND_PAGER, PAGE_SIZE, REQUEST_SIZE,
    SUPPLY_MAX,
};
use baton_abi::Error;
use kern::continuation::{Continuation, Resume};
use kern::ipc::{Message, PortId};
use kern::slab::{Key, Slab};
use kern::vm::object::ObjectId;
use kern::vm::Access;

/// What the kernel keeps for one pager-backed object.
#[derive(Debug)]
struct Pager {
    /// The pager's port (a send right the kernel holds).
    port: PortId,
    /// What the pager is told in each request.
    cookie: u64,
    /// The object (`None` while it is being made).
    object: Option<ObjectId>,
    /// Threads waiting for a page of the object, with the page's offset.
    waiting: Vec<(ThreadId, u64)>,
    /// The record's heap, charged to the task that made the object.
    _charge: kern::quota::Charge,
}

/// Heap charged for a record (with its slab slot and a few waiters' room).
const RECORD_BYTES: usize = core::mem::size_of::<Pager>() + 64;

/// The family's state.
struct State {
    pagers: Slab<Pager>,
    /// Threads whose page-in wait an alert ended: their next fault on a page still being
    /// paged in is reported as a pager fault instead of waiting again.
    interrupted: Vec<ThreadId>,
    /// Set while [`tidy`] runs (it releases rights, whose effects call it again).
    tidying: bool,
}

static STATE: Locked<State> = Locked::new();

/// The family's state (made on first use).
///
/// # Safety
/// The caller holds the big kernel lock and keeps the reference only while it calls
/// nothing that could take it again.
unsafe fn state() -> &'static mut State {
    // SAFETY: the caller holds the lock and no other reference to the cell is live.
    unsafe {
        STATE.get_or_make(|| State {
            pagers: Slab::new(),
            interrupted: Vec::new(),
            tidying: false,
        })
    }
}

/// Registers the family with the virtual-memory family (once, at boot).
pub fn init() {
    crate::vm::set_pager(ask);
    crate::vm::replace::set_returner(return_page);
}

/// The system calls of this family.
pub fn sys(k: &mut Kernel, task: TaskId, call: baton_abi::Sys, a: [u64; 6]) -> Result<u64, Error> {
    use baton_abi::Sys;
    tidy(k);
    match call {
        Sys::MemobjPager => create(k, task, a[0], a[1], a[2]),
        Sys::PagerSupply => supply(k, task, a[0], a[1], a[2], a[3]),
        Sys::PagerUnavailable => fill(k, task, a[0], a[1], a[2], Fill::Zeros),
        Sys::PagerError => fill(k, task, a[0], a[1], a[2], Fill::Error),
        Sys::PagerFlush => flush(k, task, a[0], a[1], a[2], a[3]),
        Sys::PagerLock => lock(k, task, a[0], a[1], a[2], a[3]),
        _ => Err(Error::InvalidArgument),
    }
}

/// `memobj_pager(port, size, cookie)`.
fn create(
    k: &mut Kernel,
    task: TaskId,
    port_name: u64,
    size: u64,
    cookie: u64,
) -> Result<u64, Error> {
    if size == 0 || !size.is_multiple_of(PAGE_SIZE) {
        return Err(Error::InvalidArgument);
    }
    if size > baton_abi::pager::OBJECT_SIZE_MAX {
        return Err(Error::TooLarge);
    }
    let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let charge = crate::quota::heap(&t.account, RECORD_BYTES)?;
    let port = k.ipc.hold_send(&t.names, port_name)?;
    let release_port = |k: &mut Kernel| {
        let mut fx = crate::ipc::effects(k);
        k.ipc.release_held_send(port, &mut fx);
        crate::ipc::apply(k, fx);
    };
    if let Err(e) = k.ipc.watch(port) {
        release_port(k);
        return Err(e);
    }
    let rec = Pager {
        port,
        cookie,
        object: None,
        waiting: Vec::new(),
        _charge: charge,
    };
    // SAFETY: the lock is held; the reference ends in this statement.
    let key = match unsafe { state() }.pagers.insert(rec) {
        Ok(key) => key,
        Err(_) => {
            release_port(k);
            return Err(Error::NoMemory);
        }
    };
    let forget = |k: &mut Kernel| {
        // SAFETY: the lock is held; the reference ends in this statement.
        unsafe { state() }.pagers.remove(key);
        release_port(k);
    };
    let object = match crate::vm::pager_object(k, task, key.0, size) {
        Ok(o) => o,
        Err(e) => {
            forget(k);
            return Err(e);
        }
    };
    // SAFETY: the lock is held; the reference ends in this statement.
    if let Some(p) = unsafe { state() }.pagers.get_mut(key) {
        p.object = Some(object);
    }
    // The right takes over the creation's reference (and drops it on failure, which ends
    // the object and, through `tidy`, the record).
    let named = crate::memobj::name_object(k, task, object, KIND_PAGER);
    tidy(k);
    named
}

/// The pager-backed object the memory-object right `name` of `task` names, and its
/// pager's record key.
fn pager_object(k: &Kernel, task: TaskId, name: u64) -> Result<(ObjectId, Key, u64), Error> {
    let object = crate::memobj::object_of(k, task, name)?;
    let (pager, dead, size) = crate::vm::pager_of(object).ok_or(Error::InvalidArgument)?;
    if dead {
        return Err(Error::DeadName);
    }
    Ok((object, Key(pager), size))
}

/// Checks a range of an object of `size` bytes: page aligned, non-empty, inside.
fn check_range(offset: u64, len: u64, size: u64) -> Result<(), Error> {
    if !offset.is_multiple_of(PAGE_SIZE) || len == 0 || !len.is_multiple_of(PAGE_SIZE) {
        return Err(Error::InvalidArgument);
    }
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument),
    }
}

/// `pager_supply(name, offset, buf, len)`: copies the pages in, then wakes their waiters.
fn supply(
    k: &mut Kernel,
    task: TaskId,
    name: u64,
    offset: u64,
    buf: u64,
    len: u64,
) -> Result<u64, Error> {
    let (object, key, size) = pager_object(k, task, name)?;
    if len > SUPPLY_MAX {
        return Err(Error::TooLarge);
    }
    check_range(offset, len, size)?;
    // Copy everything in first: a bad buffer changes nothing.
    let mut data: Vec<u8> = Vec::new();
    data.try_reserve_exact(len as usize)
        .map_err(|_| Error::NoMemory)?;
    data.resize(len as usize, 0);
    k.copy_in(task, buf, &mut data)?;
    let mut put = 0;
    for (i, page) in data.chunks_exact(PAGE_SIZE as usize).enumerate() {
        let off = offset + i as u64 * PAGE_SIZE;
        if !matches!(crate::vm::pager_page(object, off), None | Some(None)) {
            continue;
        }
        let frame = crate::vm::alloc_frame_with(k, page).ok_or(Error::NoMemory)?;
        if crate::vm::pager_put(k, object, off, frame)? {
            put += 1;
        }
    }
    wake(k, key, offset, offset + len);
    Ok(put)
}

/// What `pager_unavailable` and `pager_error` make of the pages.
#[derive(Clone, Copy)]
enum Fill {
    Zeros,
    Error,
}

/// `pager_unavailable` / `pager_error` (name, offset, len).
fn fill(
    k: &mut Kernel,
    task: TaskId,
    name: u64,
    offset: u64,
    len: u64,
    how: Fill,
) -> Result<u64, Error> {
    let (object, key, size) = pager_object(k, task, name)?;
    if len > SUPPLY_MAX {
        return Err(Error::TooLarge);
    }
    check_range(offset, len, size)?;
    let mut done = 0;
    let mut off = offset;
    while off < offset + len {
        // A resident page stays as it is.
        if matches!(crate::vm::pager_page(object, off), None | Some(None)) {
            match how {
                Fill::Zeros => {
                    let frame = crate::vm::alloc_frame_with(k, &[]).ok_or(Error::NoMemory)?;
                    if crate::vm::pager_put(k, object, off, frame)? {
                        done += 1;
                    }
                }
                Fill::Error => {
                    crate::vm::pager_fail(object, off)?;
                    done += 1;
                }
            }
        }
        off += PAGE_SIZE;
    }
    wake(k, key, offset, offset + len);
    Ok(done)
}

/// `pager_flush(name, offset, len, flags)`: returns and/or drops the resident pages of the
/// range, at most [`FLUSH_MAX_PAGES`] of them; the bytes of the range done.
fn flush(
    k: &mut Kernel,
    task: TaskId,
    name: u64,
    offset: u64,
    len: u64,
    flags: u64,
) -> Result<u64, Error> {
    if flags & !FLUSH_FLAGS != 0 || flags == 0 {
        return Err(Error::InvalidArgument);
    }
    let object = crate::memobj::object_of(k, task, name)?;
    let (pager, _, size) = crate::vm::pager_of(object).ok_or(Error::InvalidArgument)?;
    check_range(offset, len, size)?;
    let end = offset + len;
    // SAFETY: the lock is held; the reference ends in this statement.
    let (port, cookie) = match unsafe { state() }.pagers.get(Key(pager)) {
        Some(p) => (p.port, p.cookie),
        None => return Err(Error::DeadName),
    };
    let account = k
        .tasks
        .get(&task)
        .ok_or(Error::InvalidArgument)?
        .account
        .clone();
    if flags & FLUSH_RETURN != 0 {
        // What the processor says was written, into the pages' sticky dirty bits.
        crate::vm::harvest_dirty(k, object, offset, end);
    }
    let mut from = offset;
    let mut pages = 0;
    while pages < FLUSH_MAX_PAGES {
        let Some((off, frame)) = crate::vm::pager_next(object, from, end) else {
            from = end;
            break;
        };
        from = off + PAGE_SIZE;
        if flags & FLUSH_RETURN != 0 {
            // Only a page written since it last went to the pager goes back (a clean one
            // is what the pager has already).
            if let Some(f) = frame.filter(|&f| crate::vm::replace::is_dirty(f)) {
                // The page's bytes go to the pager, charged to the caller until received.
                let req = Request {
                    cookie,
                    offset: off,
                    len: PAGE_SIZE,
                    access: 0,
                };
                let mut data: Vec<u8> = Vec::new();
                data.try_reserve_exact(REQUEST_SIZE + PAGE_SIZE as usize)
                    .map_err(|_| Error::NoMemory)?;
                data.extend_from_slice(&req.to_bytes());
                data.resize(REQUEST_SIZE + PAGE_SIZE as usize, 0);
                if let Some(page) = data.get_mut(REQUEST_SIZE..) {
                    crate::vm::read_frame(k, f, page);
                }
                let charge = crate::quota::heap(&account, data.len())?;
                send(
                    k,
                    port,
                    Message {
                        id: DATA_RETURN,
                        data,
                        charge: Some(charge),
                        ..Message::default()
                    },
                )?;
                crate::vm::replace::clear_dirty(f);
            }
        }
        if flags & FLUSH_DROP != 0 {
            if let Some(f) = crate::vm::pager_flush_page(k, object, off)? {
                crate::vm::free_frame(k, f);
            }
        }
        pages += 1;
    }
    Ok(from.min(end) - offset)
}

/// Page replacement gives back a written page of an object of pager `pager` (its key):
/// a `DATA_RETURN` of the page at `offset` with its bytes `page`, as `pager_flush` sends,
/// queued on the pager's port. It is charged to no task, as the default pager's page-outs
/// are (a quota must not make the path that frees memory fail), and bounded by the
/// port's queue limit: a full queue (or a dead port) refuses it, and the page stays.
fn return_page(k: &mut Kernel, pager: u64, offset: u64, page: Vec<u8>) -> bool {
    // SAFETY: the lock is held (replacement runs in a fault); the reference ends here.
    let Some((port, cookie)) = unsafe { state() }
        .pagers
        .get(Key(pager))
        .map(|p| (p.port, p.cookie))
    else {
        return false;
    };
    let req = Request {
        cookie,
        offset,
        len: PAGE_SIZE,
        access: 0,
    };
    let mut data: Vec<u8> = Vec::new();
    if data
        .try_reserve_exact(REQUEST_SIZE + PAGE_SIZE as usize)
        .is_err()
    {
        return false;
    }
    data.extend_from_slice(&req.to_bytes());
    data.extend_from_slice(page.get(..PAGE_SIZE as usize).unwrap_or(&[]));
    data.resize(REQUEST_SIZE + PAGE_SIZE as usize, 0);
    send(
        k,
        port,
        Message {
            id: DATA_RETURN,
            data,
            charge: None,
            ..Message::default()
        },
    )
    .is_ok()
}

/// Queues kernel message `msg` on `port` ([`Error::DeadName`] if it is gone).
fn send(k: &mut Kernel, port: PortId, msg: Message) -> Result<(), Error> {
    k.ipc
        .port_mut(port)
        .ok_or(Error::DeadName)?
        .reserve_queue(1)?;
    let mut fx = crate::ipc::effects(k);
    k.ipc.enqueue(port, msg, &mut fx);
    crate::ipc::apply(k, fx);
    Ok(())
}

/// Asks the pager of `w.object` for the page `w` (the virtual-memory family's call, when a
/// fault marked it being paged in). On an error the mark is cleared, or the pager marked
/// dead if its port is gone.
fn ask(k: &mut Kernel, w: PageWait) -> Result<(), Failure> {
    let pager = w.ask.unwrap_or(0);
    // SAFETY: the lock is held; the reference ends in this statement.
    let rec = unsafe { state() }
        .pagers
        .get(Key(pager))
        .map(|p| (p.port, p.cookie));
    let Some((port, cookie)) = rec else {
        crate::vm::pager_dead(w.object);
        return Err(Failure::Pager);
    };
    if k.ipc.port(port).is_some_and(|p| p.pool.is_migrating()) {
        // A pager serving through activations is not sent a message: the thread carries
        // the request into it when its call is made again (`after_call`).
        crate::vm::pager_not_asked(w.object, w.offset);
        return Ok(());
    }
    let access = access_bits(w.access);
    let req = Request {
        cookie,
        offset: w.offset,
        len: PAGE_SIZE,
        access,
    };
    let mut data: Vec<u8> = Vec::new();
    let sent = data
        .try_reserve_exact(REQUEST_SIZE)
        .map_err(|_| Error::NoMemory)
        .and_then(|()| {
            data.extend_from_slice(&req.to_bytes());
            send(
                k,
                port,
                Message {
                    id: request_id(w),
                    data,
                    ..Message::default()
                },
            )
        });
    match sent {
        Ok(()) => Ok(()),
        Err(Error::DeadName) => {
            crate::vm::pager_dead(w.object);
            Err(Failure::Pager)
        }
        Err(_) => {
            crate::vm::pager_not_asked(w.object, w.offset);
            Err(Failure::NoMemory)
        }
    }
}

/// What a page fault's resolution (`crate::vm::page_fault`, from the paging family's
/// page-fault hook) comes to: a wait for a pager when the page must come from one (does
/// not return then), else the fault's class for the exception.
pub fn fault_result(k: &mut Kernel, t: ThreadId, r: Result<(), Failure>) -> Result<(), u64> {
    match r {
        Ok(()) => {
            forget_interrupted(t);
            Ok(())
        }
        Err(Failure::PageIn(w)) => {
            if take_interrupted(t) {
                if w.ask.is_some() {
                    crate::vm::pager_not_asked(w.object, w.offset);
                }
                return Err(Failure::Pager.code());
            }
            if w.ask.is_some() {
                if let Some((port, cookie)) = served_by_activations(k, w) {
                    // No request stays outstanding: the thread itself carries it.
                    crate::vm::pager_not_asked(w.object, w.offset);
                    return migrate(k, t, w, port, cookie).map_err(Failure::code);
                }
                ask(k, w).map_err(Failure::code)?;
            }
            wait(k, t, w, Continuation::new(Resume::UserReturn)).map_err(Failure::code)
        }
        Err(f) => Err(f.code()),
    }
}

/// After a call of thread `t` (the current one) whose kernel copy met a page being paged
/// in: the call is made again from the start once the page is there (the thread waits
/// now; does not return). Returns if there is nothing to wait for.
pub fn after_call(k: &mut Kernel, t: ThreadId) {
    let Some(w) = crate::vm::take_page_wait(t) else {
        return;
    };
    if take_interrupted(t) {
        return;
    }
    if let Some(th) = k.threads.get_mut(t) {
        // Back over the `syscall` instruction (two bytes), with the call's registers as
        // they were (the result is not written).
        th.ctx.frame.rip = th.ctx.frame.rip.wrapping_sub(2);
    }
    let waited = match served_by_activations(k, w) {
        Some((port, cookie)) => migrate(k, t, w, port, cookie),
        None => wait(k, t, w, Continuation::new(Resume::UserReturn)),
    };
    if waited.is_err() {
        if let Some(th) = k.threads.get_mut(t) {
            th.ctx.frame.rip = th.ctx.frame.rip.wrapping_add(2);
        }
    }
}

/// The message id of what `w` asks its pager: the page's data, or an unlock.
fn request_id(w: PageWait) -> u64 {
    if w.unlock {
        DATA_UNLOCK
    } else {
        DATA_REQUEST
    }
}

/// `pager_lock(name, offset, len, prot)`: the object's pager restricts the accesses to the
/// pages of the range to `prot` (all of read, write and execute: unlocked), at most
/// [`FLUSH_MAX_PAGES`] pages a call; threads waiting for an unlock of a page the new lock
/// allows more are woken (they make their access again). The bytes of the range done.
fn lock(
    k: &mut Kernel,
    task: TaskId,
    name: u64,
    offset: u64,
    len: u64,
    prot: u64,
) -> Result<u64, Error> {
    let allow = kern::vm::Prot::from_bits(prot).ok_or(Error::InvalidArgument)?;
    let (object, key, size) = pager_object(k, task, name)?;
    check_range(offset, len, size)?;
    let end = offset
        .saturating_add(FLUSH_MAX_PAGES * PAGE_SIZE)
        .min(offset + len);
    let mut done = offset;
    while done < end {
        if let Err(e) = crate::vm::pager_lock(k, object, done, allow) {
            if done == offset {
                return Err(e);
            }
            break;
        }
        done += PAGE_SIZE;
    }
    wake(k, key, offset, done);
    Ok(done - offset)
}

/// A kernel copy of the current thread `t` made by a *later step* of a call met a page
/// that must come in first (a page of a pager-backed object being paged in, or one paged
/// out to the default pager: [`crate::vm::take_page_wait`]). Such a step cannot be made
/// again by issuing the whole call again as [`after_call`] does: a receive after its send
/// would send twice, a message delivered by a continuation has no call to issue. So the
/// thread waits for the page here, interruptibly (an alert ends the call with
/// `Interrupted`, a kill or its task's end takes it off the wait), and then resumes at
/// `cont`, which makes that step again and only that step: the receive phase
/// ([`Resume::Receive`]) or a send that has not happened yet ([`Resume::SendRetry`]).
///
/// A page of a pager serving through activations is never asked by message: the thread
/// carries the request into one of the pager's activations, whose return makes the
/// thread's access or call again in user mode (`ReplyTo::Fault`). A step whose call has
/// done nothing yet — a receive-only call (its message stays queued until it is taken), a
/// send resumed before it was made — is made so: the call is rewound over its `syscall`
/// and the thread migrates into the pager, as a first step's copy does ([`after_call`]).
/// The receive after a call's own send is made so too, as the receive alone: its send is
/// made, and the activation's return cannot resume a kernel step, so the thread goes back
/// over its `syscall` with `MSG_SEND` taken out of its options (the register the user
/// sees after the call holds them so; the receive's timeout starts again).
///
/// Does not return when it waits or migrates. Otherwise returns the step's error:
/// `Interrupted` when an alert ended an earlier wait for the page, `BadAddress` when no
/// page was noted (the address is bad, or the page's pager failed or is gone) or when
/// there is no room to wait.
pub fn wait_in_step(k: &mut Kernel, t: ThreadId, cont: Continuation) -> Error {
    let Some(w) = crate::vm::take_page_wait(t) else {
        return Error::BadAddress;
    };
    if take_interrupted(t) {
        if w.ask.is_some() {
            crate::vm::pager_not_asked(w.object, w.offset);
        }
        return Error::Interrupted;
    }
    if let Some((port, cookie)) = served_by_activations(k, w) {
        // Marked as being paged in for this copy, but asked by no message: unmarked (the
        // thread carries the request, or the next access does).
        if w.ask.is_some() {
            crate::vm::pager_not_asked(w.object, w.offset);
        }
        let opts = k
            .threads
            .get(t)
            .map_or(0, |th| th.ctx.frame.syscall_args().1[0]);
        // The receive after the call's own send: the send is made, so the call made again
        // is the receive alone (its options without `MSG_SEND`, the rest as they were).
        let sent = cont.point == Resume::Receive && opts & baton_abi::ipc::MSG_SEND != 0;
        if let Some(th) = k.threads.get_mut(t) {
            // Back over the `syscall` (two bytes), its registers as they were.
            th.ctx.frame.rip = th.ctx.frame.rip.wrapping_sub(2);
            if sent {
                th.ctx.frame.rdi = opts & !baton_abi::ipc::MSG_SEND;
            }
        }
        let failed = migrate(k, t, w, port, cookie);
        if let Some(th) = k.threads.get_mut(t) {
            th.ctx.frame.rip = th.ctx.frame.rip.wrapping_add(2);
            th.ctx.frame.rdi = opts;
        }
        return match failed {
            Err(Failure::NoMemory) => Error::NoMemory,
            _ => Error::BadAddress,
        };
    }
    // (It returns only when the thread cannot wait.)
    match wait(k, t, w, cont) {
        Err(Failure::NoMemory) => Error::NoMemory,
        _ => Error::BadAddress,
    }
}

/// The `ACCESS_*` bits of an access.
fn access_bits(a: Access) -> u64 {
    match a {
        Access::Read => ACCESS_READ,
        Access::Write => ACCESS_WRITE,
        Access::Execute => ACCESS_EXECUTE,
    }
}

/// The port and cookie of the pager of `w`'s object when that port has activations: the
/// pager serves through them.
fn served_by_activations(k: &Kernel, w: PageWait) -> Option<(PortId, u64)> {
    let (pager, dead, _) = crate::vm::pager_of(w.object)?;
    if dead {
        return None;
    }
    // SAFETY: the lock is held; the reference ends in this statement.
    let (port, cookie) = unsafe { state() }
        .pagers
        .get(Key(pager))
        .map(|p| (p.port, p.cookie))?;
    k.ipc
        .port(port)
        .is_some_and(|p| p.pool.is_migrating())
        .then_some((port, cookie))
}

/// The current thread `t` carries the data request for `w` into an activation of the
/// pager's `port` (`crate::activation::migrate_fault`; does not return then). When every
/// activation is busy it waits in the port's line of callers, blocked for the page, and
/// faults again when one comes back (does not return either). Returns an error otherwise.
fn migrate(
    k: &mut Kernel,
    t: ThreadId,
    w: PageWait,
    port: PortId,
    cookie: u64,
) -> Result<(), Failure> {
    let req = Request {
        cookie,
        offset: w.offset,
        len: PAGE_SIZE,
        access: access_bits(w.access),
    };
    let cpu = crate::arch::gdt::this_cpu();
    match crate::activation::migrate_fault(k, cpu, t, port, request_id(w), &req.to_bytes()) {
        Error::Busy => {}
        Error::DeadName => {
            crate::vm::pager_dead(w.object);
            return Err(Failure::Pager);
        }
        _ => return Err(Failure::NoMemory),
    }
    k.ipc
        .port_mut(port)
        .ok_or(Failure::Pager)?
        .senders
        .try_push_back(t)
        .map_err(|_| Failure::NoMemory)?;
    let waited = wait(k, t, w, Continuation::new(Resume::UserReturn));
    // Not waiting after all: out of the line again.
    if let Some(p) = k.ipc.port_mut(port) {
        if let Some(i) = p.senders.position(t) {
            p.senders.remove(i);
        }
    }
    waited
}

/// Blocks the current thread `t` until the page `w` is supplied (or the pager fails or
/// dies); it then resumes at `cont`: [`Resume::UserReturn`] makes its access (or its
/// rewound call) again, a call's step makes that step again ([`wait_in_step`]). Returns
/// only on an error (no room to wait).
fn wait(k: &mut Kernel, t: ThreadId, w: PageWait, cont: Continuation) -> Result<(), Failure> {
    let Some((pager, dead, _)) = crate::vm::pager_of(w.object) else {
        // Not pager-backed: a paged-out page a kernel copy met waits for the default
        // pager (which refuses unless the page is being paged in). One that could not be
        // asked for yet (the pager's queue full of page-outs: still to ask) waits a moment
        // and the copy is made again.
        if w.ask.is_some() {
            return crate::pageout::wait_memory_then(k, t, cont).map_err(|()| Failure::NoMemory);
        }
        return crate::pageout::wait(k, t, w, cont);
    };
    if dead {
        return Err(Failure::Pager);
    }
    {
        // SAFETY: the lock is held; the reference ends in this block.
        let st = unsafe { state() };
        let p = st.pagers.get_mut(Key(pager)).ok_or(Failure::Pager)?;
        p.waiting.try_reserve(1).map_err(|_| Failure::NoMemory)?;
        st.interrupted
            .try_reserve(1)
            .map_err(|_| Failure::NoMemory)?;
        p.waiting.push((t, w.offset));
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

/// Wakes the threads of record `key` waiting for a page in `[from, to)`.
fn wake(k: &mut Kernel, key: Key, from: u64, to: u64) {
    loop {
        // SAFETY: the lock is held; the reference ends in this block.
        let next = unsafe { state() }.pagers.get_mut(key).and_then(|p| {
            let i = p
                .waiting
                .iter()
                .position(|&(_, off)| (from..to).contains(&off))?;
            Some(p.waiting.swap_remove(i).0)
        });
        match next {
            Some(t) => {
                leave_line(k, key, t);
                k.unblock(t);
            }
            None => return,
        }
    }
}

/// Blocked thread `t` leaves its page-in wait (a kill, its task's end).
pub fn forget_waiter(k: &mut Kernel, t: ThreadId, why: Blocked) {
    let Blocked::PageIn { object, .. } = why else {
        return;
    };
    crate::pageout::forget_waiter(t);
    let mut found = None;
    {
        // SAFETY: the lock is held; the reference ends in this block.
        let st = unsafe { state() };
        for (key, p) in st.pagers.iter_mut() {
            if p.object.is_some_and(|o| o.0 .0 == object) {
                p.waiting.retain(|&(w, _)| w != t);
                // (At most one record names an object.)
                found = Some(key);
                break;
            }
        }
    }
    if let Some(key) = found {
        leave_line(k, key, t);
    }
}

/// Takes `t` out of the line of callers waiting for an activation of record `key`'s
/// port, if it is there (a thread waiting for an activation pager, `migrate`).
fn leave_line(k: &mut Kernel, key: Key, t: ThreadId) {
    // SAFETY: the lock is held; the reference ends in this statement.
    let Some(port) = unsafe { state() }.pagers.get(key).map(|p| p.port) else {
        return;
    };
    if let Some(p) = k.ipc.port_mut(port) {
        if let Some(i) = p.senders.position(t) {
            p.senders.remove(i);
        }
    }
}

/// An alert ends thread `t`'s page-in wait: it faults again and the fault goes to its
/// exception port as a pager fault (or resolves, if the page came meanwhile).
pub fn interrupt(k: &mut Kernel, t: ThreadId, why: Blocked) {
    forget_waiter(k, t, why);
    // SAFETY: the lock is held; the reference ends in this block. Room was made when
    // the thread started waiting.
    let st = unsafe { state() };
    if !st.interrupted.contains(&t) && st.interrupted.len() < st.interrupted.capacity() {
        st.interrupted.push(t);
    }
    k.unblock(t);
}

fn take_interrupted(t: ThreadId) -> bool {
    // SAFETY: the lock is held; the reference ends in this block.
    let st = unsafe { state() };
    match st.interrupted.iter().position(|&x| x == t) {
        Some(i) => {
            st.interrupted.swap_remove(i);
            true
        }
        None => false,
    }
}

#[inline(always)]
fn forget_interrupted(t: ThreadId) {
    // SAFETY: the lock is held; the reference ends in this block.
    let st = unsafe { state() };
    if !st.interrupted.is_empty() {
        st.interrupted.retain(|&x| x != t);
    }
}

/// Catches up with deaths (after every IPC operation's effects, and before each pager
/// call): pagers whose port died make their objects' absent pages errors and wake every
/// waiting thread (which faults again and gets the exception); objects that ended let go
/// of their pager's port.
#[inline(always)]
pub fn tidy(k: &mut Kernel) {
    if k.ipc.died_pending() || crate::vm::freed_pager_pending() {
        tidy_slow(k);
    }
}

#[cold]
#[inline(never)]
fn tidy_slow(k: &mut Kernel) {
    {
        // SAFETY: the lock is held; the reference ends in this block.
        let st = unsafe { state() };
        if st.tidying {
            return;
        }
        st.tidying = true;
    }
    while let Some(port) = k.ipc.take_died() {
        let mut key = None;
        // SAFETY: the lock is held; the reference ends in this statement.
        for (kk, p) in unsafe { state() }.pagers.iter() {
            if p.port == port {
                key = Some((kk, p.object));
            }
        }
        if let Some((kk, object)) = key {
            if let Some(o) = object {
                crate::vm::pager_dead(o);
            }
            wake(k, kk, 0, u64::MAX);
        }
    }
    while let Some(pager) = crate::vm::take_freed_pager() {
        // SAFETY: the lock is held; the reference ends in this statement.
        let Some(p) = unsafe { state() }.pagers.remove(Key(pager)) else {
            continue;
        };
        for &(t, _) in &p.waiting {
            if let Some(port) = k.ipc.port_mut(p.port) {
                if let Some(i) = port.senders.position(t) {
                    port.senders.remove(i);
                }
            }
            k.unblock(t);
        }
        k.ipc.unwatch(p.port);
        let mut fx = crate::ipc::effects(k);
        k.ipc.release_held_send(p.port, &mut fx);
        crate::ipc::apply(k, fx);
    }
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.tidying = false;
}
