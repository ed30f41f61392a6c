//! Task creation, as Accent makes a process (Fitzgerald & Rashid, section 3.7.2, the
//! null program of Table 3-12), and fork by inheritance.
//!
//! A task is made in four steps, each a system call on the new task's port, so a parent
//! (a shell, a process manager) does what Accent's parent shell did:
//!
//! 1. `task_create`: an empty task (an address space holding only the kernel's half, an
//!    empty map, an empty name space, no thread), charged and limited as `spawn`'s tasks;
//!    the caller gets a send right to its task port;
//! 2. `task_map_program`: its program, mapped copy-on-write from its source, and its
//!    initial stack. The source is a boot module today: the module's bytes are an *image
//!    object* whose pages are the boot image's own frames (`crate::vm::make_image`), made
//!    at the module's first use and kept for the kernel's life, as Accent kept a program's
//!    code pages resident between runs. Pages holding only part of a segment's file bytes
//!    are private copies, so no byte of the image beyond a segment is ever visible, and
//!    `.bss` is zeroed pages made now (`kern::loader::plan`). A program file in a memory
//!    object (a file of the file server, `docs/files.md`) is a source of the same call
//!    (`task::PROGRAM_OBJECT`): its headers and partial pages are read through the
//!    caller's shared mapping of it (a page its pager has not supplied makes the call
//!    wait and be made again), and its whole pages are mapped copy-on-write from the
//!    object;
//! 3. `task_init_thread`: its first thread, made but not run (`Blocked::Unstarted`);
//! 4. `task_start`: the thread runs, with a bootstrap right and the start message that
//!    `spawn` gives (the arguments and environment, `baton_abi::start`).
//!
//! `spawn` takes the same steps inside the kernel (`Kernel::spawn_started`, through the
//! `map_program` hook), so there is one way tasks are made. `task_fork` makes a task whose
//! map is a copy of the caller's by inheritance (`kern::vm::copy::fork`): nothing is
//! copied until written, except the calling thread's IPC buffer page (wired for the kernel,
//! so not inherited), which the child gets as a copy of its own, wired for its thread.
//!
//! This family's state is its own: the image objects (by module) and the tasks being made.
//!
//! # Invariants
//! - A task in `making` has had no thread run: its one thread, if made, is
//!   `Blocked::Unstarted`. It leaves `making` when started or when it ends.
//! - A task being made ends with its creator (`task_released`): nothing half made outlives
//!   the task that made it.
//! - Every image object holds the reference made with it for the kernel's life, so it is
//!   never destroyed, reclaimed or collapsed, and its boot-image frames never reach the
//!   frame allocator.

use crate::arch::serial::kprintln;
use crate::arch::trap::TrapFrame;
use crate::kernel::{Ending, Kernel, TaskId};
use crate::kobject::KObject;
use crate::thread::ThreadId;
use crate::vm::{Fill, Owner};
use alloc::vec::Vec;
use baton_abi::layout::{USER_END, USER_MIN, USER_STACK_SIZE, USER_STACK_TOP};
use baton_abi::{Error, MODULE_NAME_MAX, PRIORITY_DEFAULT};
use core::cell::UnsafeCell;
use kern::frame::PAGE_SIZE;
use kern::loader::RunKind;
use kern::vm::object::ObjectId;
use kern::vm::Prot;

/// A task being made.
#[derive(Clone, Copy, Debug)]
struct Making {
    task: TaskId,
    creator: TaskId,
    /// The program's entry point, once mapped.
    entry: Option<u64>,
    /// Its first thread, once made.
    thread: Option<ThreadId>,
}

/// The family's state.
struct State {
    /// The image object of each boot module used so far (by index of `Kernel::modules`;
    /// `None` inside: not made yet).
    images: Vec<Option<Option<ObjectId>>>,
    /// What the image objects are charged to: an account of their own, outside the
    /// tasks' tree (their frames are the boot image's, never the allocator's, and their
    /// bookkeeping is bounded by the boot image), so that a program's first run charges
    /// no task and no task's limit.
    image_account: Option<kern::quota::AccountRef>,
    making: Vec<Making>,
}

struct Cell(UnsafeCell<State>);
// SAFETY: the cell is only reached through `state()`, whose callers hold the big kernel
// lock, so at most one CPU touches it at a time.
unsafe impl Sync for Cell {}

static STATE: Cell = Cell(UnsafeCell::new(State {
    images: Vec::new(),
    image_account: None,
    making: Vec::new(),
}));

/// The family's state.
///
/// # Safety
/// The caller holds the big kernel lock and keeps the reference only while it does not
/// call anything that may reach this module again.
unsafe fn state() -> &'static mut State {
    // SAFETY: the caller holds the lock and no other reference to the cell is live.
    unsafe { &mut *STATE.0.get() }
}

/// Whether task `id` is being made (not started yet).
pub fn being_made(id: TaskId) -> bool {
    // SAFETY: the lock is held by every caller (a system call); dropped at once.
    unsafe { state() }.making.iter().any(|m| m.task == id)
}

fn making(id: TaskId) -> Result<Making, Error> {
    // SAFETY: the lock is held by every caller (a system call); dropped at once.
    unsafe { state() }
        .making
        .iter()
        .find(|m| m.task == id)
        .copied()
        .ok_or(Error::Busy)
}

fn update(id: TaskId, f: impl FnOnce(&mut Making)) {
    // SAFETY: the lock is held by every caller (a system call); dropped at once.
    if let Some(m) = unsafe { state() }.making.iter_mut().find(|m| m.task == id) {
        f(m);
    }
}

/// The image object of boot module `module`, made at its first use.
fn image_of(k: &mut Kernel, module: usize) -> Result<Option<ObjectId>, Error> {
    let n = k.modules.len();
    {
        // SAFETY: the lock is held; the reference ends before `make_image`.
        let s = unsafe { state() };
        if s.images.len() < n {
            s.images
                .try_reserve_exact(n - s.images.len())
                .map_err(|_| Error::NoMemory)?;
            s.images.resize(n, None);
        }
        if let Some(Some(made)) = s.images.get(module) {
            return Ok(*made);
        }
    }
    let data = k.modules.get(module).ok_or(Error::NotFound)?.data;
    let account = {
        // SAFETY: the lock is held; the reference ends here.
        let s = unsafe { state() };
        match &s.image_account {
            Some(a) => a.clone(),
            None => {
                let a = kern::quota::Account::root(u64::MAX / 2, u64::MAX / 2)?;
                s.image_account = Some(a.clone());
                a
            }
        }
    };
    let image = crate::vm::make_image(k, data, &account)?;
    // SAFETY: the lock is held; no other reference is live.
    if let Some(slot) = unsafe { state() }.images.get_mut(module) {
        *slot = Some(image);
    }
    Ok(image)
}

/// Hook `map_program` (and `task_map_program`): maps boot module `module` into the new
/// task `id`, copy-on-write from its image object, with its initial stack (lazy, 64 KiB
/// below `USER_STACK_TOP`); its entry point. On an error the map may hold part of it.
pub fn map_program(k: &mut Kernel, id: TaskId, module: usize) -> Result<u64, Error> {
    let image = image_of(k, module)?;
    let data = k.modules.get(module).ok_or(Error::NotFound)?.data;
    let pages = match image {
        Some(_) => data.len() as u64 / PAGE_SIZE,
        None => 0,
    };
    let (entry, runs) = kern::loader::plan(data, pages)?;
    for run in &runs {
        let mut prot = Prot::READ.bits() as u64;
        if run.writable {
            prot |= Prot::WRITE.bits() as u64;
        }
        if run.executable {
            prot |= Prot::EXECUTE.bits() as u64;
        }
        let prot = Prot::from_bits(prot).ok_or(Error::InvalidArgument)?;
        let len = run.end - run.start;
        match (run.kind, image) {
            (RunKind::Image { offset }, Some(image)) => {
                crate::vm::map_image(k, id, run.start, len, image, offset, prot)?
            }
            (RunKind::Image { .. }, None) => return Err(Error::BadFormat),
            (RunKind::Copy, _) => {
                crate::vm::allocate_filled(k, id, run.start, len, prot, &mut |page| {
                    let (at, src) = run.file_bytes(page)?;
                    Some(Fill::Bytes(at, data.get(src)?))
                })?
            }
            // `.bss` is made resident now, as the program's other private pages are: a
            // program's statics cost what they cost from its start, whichever it touches
            // (only its stack and the memory it allocates come at first touch).
            (RunKind::Zero, _) => {
                crate::vm::allocate_filled(k, id, run.start, len, prot, &mut |_| {
                    Some(Fill::Bytes(0, &[]))
                })?
            }
        }
    }
    let bottom = USER_STACK_TOP - USER_STACK_SIZE;
    crate::vm::allocate_filled(k, id, bottom, USER_STACK_SIZE, Prot::RW, &mut |_| None)?;
    Ok(entry)
}

/// Most bytes of a program file's partial pages (the pages holding part of a segment's
/// file bytes, which are private copies) that `task_map_program` reads from a memory
/// object: sixteen pages. A program Baton's linker makes has at most two such pages a
/// segment; an ELF whose segments are not congruent to their file offsets would need one a
/// page, and is refused past this (`TooLarge`) rather than copied whole into the kernel.
const OBJECT_COPY_MAX: usize = 16 * PAGE_SIZE as usize;

/// A program file read from a memory object: the object and where the file starts in it,
/// its plan, and the bytes of its partial pages (by page address).
struct ObjectProgram {
    object: ObjectId,
    offset: u64,
    entry: u64,
    runs: Vec<kern::loader::Run>,
    copies: Vec<(u64, usize, Vec<u8>)>,
}

/// Reads what `task_map_program` needs of the program file mapped at `[ptr, ptr + len)`
/// of task `caller` (a shared, not copy-on-write, mapping of one memory object): its
/// headers and the bytes of its partial pages, through the caller's mapping, so that a
/// page the file's pager has not supplied yet is asked for as any kernel copy asks (the
/// call is then made again once it is there). Changes nothing.
fn read_object_program(
    k: &mut Kernel,
    caller: TaskId,
    ptr: u64,
    len: u64,
) -> Result<ObjectProgram, Error> {
    if len == 0 || !ptr.is_multiple_of(PAGE_SIZE) {
        return Err(Error::InvalidArgument);
    }
    let last = ptr.checked_add(len - 1).ok_or(Error::BadAddress)?;
    let (object, offset) = crate::vm::shared_key(caller, ptr)?.ok_or(Error::InvalidArgument)?;
    match crate::vm::shared_key(caller, last)? {
        Some((o, at)) if o == object && Some(at) == offset.checked_add(len - 1) => {}
        _ => return Err(Error::InvalidArgument),
    }
    let file_len = usize::try_from(len).map_err(|_| Error::TooLarge)?;
    let head_len = file_len.min(PAGE_SIZE as usize);
    let mut head = Vec::new();
    head.try_reserve_exact(head_len)
        .map_err(|_| Error::NoMemory)?;
    head.resize(head_len, 0);
    k.copy_in(caller, ptr, &mut head)?;
    let (entry, runs) = kern::loader::plan_head(&head, file_len)?;
    drop(head);
    let mut copies: Vec<(u64, usize, Vec<u8>)> = Vec::new();
    let mut copied = 0usize;
    for run in runs.iter().filter(|r| r.kind == RunKind::Copy) {
        let mut page = run.start;
        while page < run.end {
            if let Some((at, src)) = run.file_bytes(page) {
                copied = copied.saturating_add(src.len());
                if copied > OBJECT_COPY_MAX {
                    return Err(Error::TooLarge);
                }
                let mut bytes = Vec::new();
                bytes
                    .try_reserve_exact(src.len())
                    .map_err(|_| Error::NoMemory)?;
                bytes.resize(src.len(), 0);
                k.copy_in(caller, ptr + src.start as u64, &mut bytes)?;
                copies.try_reserve(1).map_err(|_| Error::NoMemory)?;
                copies.push((page, at, bytes));
            }
            page += PAGE_SIZE;
        }
    }
    Ok(ObjectProgram {
        object,
        offset,
        entry,
        runs,
        copies,
    })
}

/// Maps the program `file` into the new task `id`: its whole file pages copy-on-write
/// from the object (a snapshot: the file's later writes are not seen by the task, its own
/// writes are its own), its partial pages private copies, `.bss` zeroed pages, and its
/// initial stack, as [`map_program`] maps a boot module. Its entry point. On an error the
/// map may hold part of it.
fn map_object_program(k: &mut Kernel, id: TaskId, file: &ObjectProgram) -> Result<u64, Error> {
    for run in &file.runs {
        let mut prot = Prot::READ.bits() as u64;
        if run.writable {
            prot |= Prot::WRITE.bits() as u64;
        }
        if run.executable {
            prot |= Prot::EXECUTE.bits() as u64;
        }
        let prot = Prot::from_bits(prot).ok_or(Error::InvalidArgument)?;
        let len = run.end - run.start;
        match run.kind {
            RunKind::Image { offset } => {
                let at = file.offset.checked_add(offset).ok_or(Error::BadFormat)?;
                crate::vm::map_object(
                    k,
                    id,
                    kern::vm::map::Placement::Fixed(run.start),
                    len,
                    file.object,
                    at,
                    prot,
                    Prot::ALL,
                    true,
                    kern::vm::Inherit::Copy,
                )?;
            }
            RunKind::Copy => {
                crate::vm::allocate_filled(k, id, run.start, len, prot, &mut |page| {
                    let (_, at, bytes) = file.copies.iter().find(|c| c.0 == page)?;
                    Some(Fill::Bytes(*at, bytes.as_slice()))
                })?
            }
            RunKind::Zero => crate::vm::allocate_filled(k, id, run.start, len, prot, &mut |_| {
                Some(Fill::Bytes(0, &[]))
            })?,
        }
    }
    let bottom = USER_STACK_TOP - USER_STACK_SIZE;
    crate::vm::allocate_filled(k, id, bottom, USER_STACK_SIZE, Prot::RW, &mut |_| None)?;
    Ok(file.entry)
}

/// The task a send right `name` of task `caller` names (a task port): `InvalidName`,
/// `DeadName` as for any right; `InvalidRight` for a port that is no task's.
pub fn task_of(k: &Kernel, caller: TaskId, name: u64) -> Result<TaskId, Error> {
    let t = k.tasks.get(&caller).ok_or(Error::InvalidArgument)?;
    let port = k.ipc.sendable_port(&t.names, name)?;
    match crate::kobject::object(k, port) {
        Some(KObject::Task(id)) if k.tasks.get(&id).is_some() => Ok(id),
        Some(KObject::Task(_)) => Err(Error::DeadName),
        _ => Err(Error::InvalidRight),
    }
}

/// A send right for task `caller` to the task port of task `id`.
fn grant_task_port(k: &mut Kernel, caller: TaskId, id: TaskId) -> Result<u64, Error> {
    let port = crate::kobject::port_of(k, KObject::Task(id))?;
    let t = k.tasks.get_mut(&caller).ok_or(Error::InvalidArgument)?;
    k.ipc.grant_send(&mut t.names, port)
}

/// Undoes a task made by this family that has had no thread.
fn unmake(k: &mut Kernel, id: TaskId) {
    let kport = k.tasks.get_mut(&id).and_then(|t| t.kport.take());
    crate::kobject::destroy(k, kport);
    // SAFETY: the lock is held; dropped at once.
    unsafe { state() }.making.retain(|m| m.task != id);
    k.destroy_unmade(id);
}

/// `task_create(heap_limit, frame_limit)` by task `caller`: the name of a send right to a
/// new empty task's port.
pub fn sys_create(k: &mut Kernel, caller: TaskId, heap: u64, frames: u64) -> Result<u64, Error> {
    let parent = k
        .tasks
        .get(&caller)
        .ok_or(Error::InvalidArgument)?
        .account
        .clone();
    let account = crate::quota::task_account(&parent, heap, frames)?;
    // SAFETY: the lock is held; dropped at once.
    unsafe { state() }
        .making
        .try_reserve(1)
        .map_err(|_| Error::NoMemory)?;
    let id = k.create_task("-", account)?;
    if let Some(t) = k.tasks.get_mut(&id) {
        t.creator = Some(caller);
    }
    // SAFETY: the lock is held; room was reserved above.
    unsafe { state() }.making.push(Making {
        task: id,
        creator: caller,
        entry: None,
        thread: None,
    });
    grant_task_port(k, caller, id).inspect_err(|_| unmake(k, id))
}

/// `task_map_program(task, kind, ptr, len)` by task `caller`: the entry point.
pub fn sys_map_program(k: &mut Kernel, caller: TaskId, a: [u64; 6]) -> Result<u64, Error> {
    let [task, kind, ptr, len, ..] = a;
    let id = task_of(k, caller, task)?;
    let m = making(id)?;
    if m.entry.is_some() || m.thread.is_some() {
        return Err(Error::Busy);
    }
    let (name_ptr, name_len) = match kind {
        baton_abi::task::PROGRAM_MODULE => (ptr, len),
        baton_abi::task::PROGRAM_OBJECT => (a[4], a[5]),
        _ => return Err(Error::InvalidArgument),
    };
    if name_len > MODULE_NAME_MAX as u64 {
        return Err(Error::TooLarge);
    }
    let mut buf = [0u8; MODULE_NAME_MAX];
    let name = buf.get_mut(..name_len as usize).ok_or(Error::TooLarge)?;
    k.copy_in(caller, name_ptr, name)?;
    let name = core::str::from_utf8(name).map_err(|_| Error::InvalidArgument)?;
    let mut task_name = alloc::string::String::new();
    task_name
        .try_reserve_exact(name.len())
        .map_err(|_| Error::NoMemory)?;
    task_name.push_str(name);
    let mapped = if kind == baton_abi::task::PROGRAM_OBJECT {
        // Everything read from the caller's mapping is read before the new task's map
        // changes: a read that must wait for the file's pager restarts the whole call.
        let file = read_object_program(k, caller, ptr, len)?;
        map_object_program(k, id, &file)
    } else {
        let module = k
            .modules
            .iter()
            .position(|m| m.name == name)
            .ok_or(Error::NotFound)?;
        map_program(k, id, module)
    };
    let entry = match mapped {
        Ok(entry) => entry,
        Err(e) => {
            // Nothing of it stays: the task is as empty as before.
            crate::vm::clear_map(k, id);
            return Err(e);
        }
    };
    if let Some(t) = k.tasks.get_mut(&id) {
        t.name = task_name;
    }
    update(id, |m| m.entry = Some(entry));
    Ok(entry)
}

/// `task_init_thread(task, entry, stack_top)` by task `caller`: the id of the new task's
/// first thread, not running yet.
pub fn sys_init_thread(k: &mut Kernel, caller: TaskId, a: [u64; 6]) -> Result<u64, Error> {
    let [task, entry, stack_top, ..] = a;
    let id = task_of(k, caller, task)?;
    let m = making(id)?;
    if m.thread.is_some() {
        return Err(Error::Busy);
    }
    let entry = match entry {
        0 => m.entry.ok_or(Error::InvalidArgument)?,
        e => e,
    };
    let stack_top = match stack_top {
        0 if m.entry.is_some() => USER_STACK_TOP,
        0 => return Err(Error::InvalidArgument),
        s => s,
    };
    if !(USER_MIN..USER_END).contains(&entry) || !(USER_MIN..=USER_END).contains(&stack_top) {
        return Err(Error::BadAddress);
    }
    let frame = TrapFrame::new_user(entry, stack_top, id);
    let t = k.create_thread_in_state(id, frame, PRIORITY_DEFAULT as u8, false)?;
    update(id, |m| m.thread = Some(t));
    Ok(t.0)
}

/// `task_start(task, bootstrap, start)` by task `caller`, with the start-message data
/// `start` (read and checked by the system-call decode): the first thread runs.
pub fn sys_start(
    k: &mut Kernel,
    caller: TaskId,
    task: u64,
    bootstrap: u64,
    start: Option<Vec<u8>>,
) -> Result<u64, Error> {
    let id = task_of(k, caller, task)?;
    let m = making(id)?;
    let t = m.thread.ok_or(Error::InvalidArgument)?;
    let bootstrap = match bootstrap {
        0 => None,
        n => {
            let c = k.tasks.get(&caller).ok_or(Error::InvalidArgument)?;
            Some(k.ipc.sendable_port(&c.names, n)?)
        }
    };
    let start_name = match start {
        Some(data) => k.start_message(id, data)?,
        None => 0,
    };
    let boot_name = match (bootstrap, k.tasks.get_mut(&id)) {
        (Some(port), Some(task)) => k.ipc.grant_send(&mut task.names, port).unwrap_or(0),
        _ => 0,
    };
    if let Some(th) = k.threads.get_mut(t) {
        th.ctx.frame.rsi = boot_name;
        th.ctx.frame.rcx = start_name;
    }
    // SAFETY: the lock is held; dropped at once.
    unsafe { state() }.making.retain(|m| m.task != id);
    k.unblock(t);
    Ok(0)
}

/// `task_fork(heap_limit, frame_limit)` by thread `cur` of task `caller`: the name of a
/// send right to the child's task port; the child's thread returns 0.
pub fn sys_fork(
    k: &mut Kernel,
    caller: TaskId,
    cur: ThreadId,
    heap: u64,
    frames: u64,
) -> Result<u64, Error> {
    let (frame, priority, buffer) = {
        let th = k.threads.get(cur).ok_or(Error::InvalidArgument)?;
        // Only a thread in its own task (not in a migrating call into another) forks it.
        if th.ctx.task != Some(caller) || !th.below.is_empty() {
            return Err(Error::InvalidArgument);
        }
        (th.ctx.frame, th.priority, th.ctx.ipc_buffer)
    };
    let (parent, name) = {
        let t = k.tasks.get(&caller).ok_or(Error::InvalidArgument)?;
        let mut name = alloc::string::String::new();
        name.try_reserve_exact(t.name.len())
            .map_err(|_| Error::NoMemory)?;
        name.push_str(&t.name);
        (t.account.clone(), name)
    };
    let account = crate::quota::task_account(&parent, heap, frames)?;
    let id = k.create_task(&name, account)?;
    if let Some(t) = k.tasks.get_mut(&id) {
        t.creator = Some(caller);
    }
    if let Err(e) = crate::vm::fork_map(k, caller, id) {
        unmake(k, id);
        return Err(e);
    }
    let mut child = frame;
    child.rax = 0;
    let t = match k.create_thread_in_state(id, child, priority, false) {
        Ok(t) => t,
        Err(e) => {
            unmake(k, id);
            return Err(e);
        }
    };
    let made = (|| {
        if let Some((va, from)) = buffer {
            crate::vm::allocate_filled(k, id, va, PAGE_SIZE, Prot::RW, &mut |_| {
                Some(Fill::Frame(from))
            })?;
            crate::vm::wire(k, id, va, PAGE_SIZE, Owner::Thread(t))?;
            crate::ipc::sys_ipc_buffer_set(k, t, id, va)?;
        }
        grant_task_port(k, caller, id)
    })();
    match made {
        Ok(port) => {
            k.unblock(t);
            Ok(port)
        }
        Err(e) => {
            // Its thread never ran: ending it ends the task, unreported.
            k.end_task(id, Ending::Killed);
            Err(e)
        }
    }
}

/// Hook `task_released` (after the core's): task `id` has ended. If it was being made,
/// it is no longer; the tasks it was making end with it.
pub fn task_released(k: &mut Kernel, id: TaskId) {
    // SAFETY: the lock is held (every hook runs under it); dropped at once.
    unsafe { state() }.making.retain(|m| m.task != id);
    loop {
        // SAFETY: as above; the reference ends before `end_task` reaches this module.
        let Some(child) = unsafe { state() }
            .making
            .iter()
            .find(|m| m.creator == id)
            .map(|m| m.task)
        else {
            return;
        };
        k.close_line();
        kprintln!("[kernel] task {child} ended half made: its creator, task {id}, ended");
        // SAFETY: as above.
        unsafe { state() }.making.retain(|m| m.task != child);
        k.end_task(child, Ending::Killed);
    }
}
