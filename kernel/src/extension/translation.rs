//! SPIN's memory interfaces and `Translation` events in the kernel (Bershad et al.,
//! section 4.1; `docs/extensions.md`, "Memory interfaces").
//!
//! - The events `Translation.PageNotPresent`, `Translation.BadAddress` and
//!   `Translation.ProtectionFault`, raised for a user fault by the page-fault hook
//!   (`main.rs`: `crate::vm::translation_fault`, through the raise registered at boot,
//!   [`init`]) before the default, `crate::vm::page_fault`: the virtual-memory system's
//!   own resolution (zero fill, copy-on-write, ...), and then the exception port. Each
//!   handler is keyed to its installer's task: it sees only faults of its installer's own
//!   address space. A handler answers whether it resolved the fault, by changing the map;
//!   the default then enters the translation the map now allows, and the thread resumes
//!   from the trap (no crossing to user space and back). A handler
//!   that said so without making it true ([`kern::spin::translation::settle`]) is
//!   *refused*: its installer is told
//!   ([`NOTIFY_REFUSED`]) and the fault goes on to the default. A WebAssembly handler that
//!   runs out of fuel or traps is aborted, removed and its installer told, as for every
//!   event.
//! - The interfaces, for the installer's own address space only (there is no way to name
//!   another): `baton.translation` (`protect`, `query`, `add`, `remove`), `baton.virtaddr`
//!   (`allocate`, `deallocate`), `baton.physaddr` (`allocate`, `deallocate`) and
//!   `baton.clock.mark`, as WebAssembly imports and as the methods of [`Iface`] for the
//!   built-in extensions ([`ext`], under the name `builtin.appel`). Every change goes
//!   through Accent's address map (`crate::vm::spin_*`); page tables stay its cache.
//! - The system calls `spinvm_query` and `spinvm_mark`.
//!
//! # State and locking
//! Two cells of its own, both touched only under the big kernel lock: [`EVENTS`] (the
//! events and the family's record of each handler), borrowed by a raise while its
//! handlers run, and [`SIDE`] (the physical pages extensions hold, the handlers' clock
//! marks), which handlers use. Handlers never touch [`EVENTS`].
//!
//! # Invariants
//! - `crate::vm`'s handler count equals the handlers installed on the three events.
//! - A physical page handle names a page of its holder only; a task holds at most
//!   [`PHYS_PAGES_MAX`]; all go when it ends.

use super::wasm;
use crate::kernel::{Kernel, TaskId};
use crate::thread::ThreadId;
use alloc::vec::Vec;
use baton_abi::spin::FUEL;
use baton_abi::translation::{
    EVENT_BAD_ADDRESS, EVENT_PAGE_NOT_PRESENT, EVENT_PROTECTION_FAULT, NOTIFY_REFUSED,
    PHYS_PAGES_MAX,
};
use baton_abi::{Error, Sys};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};
use kern::ipc::{Message, PortId};
use kern::spin::domain::{DomainId, Domains, NameServer, Sig, Symbol};
use kern::spin::event::{
    Binding, Decision, Event, HandlerFn, HandlerId, Installer, Owner, Request,
};
use kern::spin::translation::{classify, settle, Class, Fault, PhysPages, Settle};
use kern::vm::object::ObjectId;
use kern::vm::{Access, Prot};

/// A `Translation` event: `(fault) -> resolved`.
pub type FaultEvent = Event<Kernel, Fault, bool>;

/// The type of a `Translation` handler in a WebAssembly image: `(addr, access: i64) ->
/// i64` (not 0: resolved).
pub const FAULT_SIG: Sig = Sig {
    params: 2,
    results: 1,
    wide: 0b111,
};

/// What the family remembers of an installed handler.
struct Meta {
    event: u64,
    id: HandlerId,
    task: TaskId,
    domain: DomainId,
    notify: Option<PortId>,
}

struct Events {
    /// `PageNotPresent`, `BadAddress`, `ProtectionFault`.
    ev: [FaultEvent; 3],
    meta: Vec<Meta>,
}

/// What handlers use: the physical pages extensions hold, and the clock marks.
struct Side {
    pages: PhysPages<ObjectId>,
    /// `(task, tsc)`: the last `baton.clock.mark` of a handler of each task.
    marks: Vec<(TaskId, u64)>,
}

/// Most tasks whose handlers' marks are kept at once.
const MARKS_MAX: usize = 64;

struct Cell<T>(UnsafeCell<T>);
// SAFETY: reached only through `events` and `side`, whose callers hold the big kernel
// lock, so one CPU at a time.
unsafe impl<T> Sync for Cell<T> {}

static EVENTS: Cell<Option<Events>> = Cell(UnsafeCell::new(None));
static SIDE: Cell<Side> = Cell(UnsafeCell::new(Side {
    pages: PhysPages::new(PHYS_PAGES_MAX),
    marks: Vec::new(),
}));

/// The events, if any handler was ever installed.
///
/// # Safety
/// The caller holds the big kernel lock and keeps no other reference from an earlier
/// call alive while it uses this one (a raise's handlers never call this).
unsafe fn events() -> Option<&'static mut Events> {
    // SAFETY: by the caller's contract, the only reference, under the lock.
    unsafe { (*EVENTS.0.get()).as_mut() }
}

/// The handlers' side state.
///
/// # Safety
/// As [`events`] (handlers may call this: nothing else holds it across a raise).
unsafe fn side() -> &'static mut Side {
    // SAFETY: by the caller's contract, the only reference, under the lock.
    unsafe { &mut *SIDE.0.get() }
}

fn index(event: u64) -> Option<usize> {
    match event {
        EVENT_PAGE_NOT_PRESENT => Some(0),
        EVENT_BAD_ADDRESS => Some(1),
        EVENT_PROTECTION_FAULT => Some(2),
        _ => None,
    }
}

fn class_index(c: Class) -> usize {
    match c {
        Class::PageNotPresent => 0,
        Class::BadAddress => 1,
        Class::ProtectionFault => 2,
    }
}

/// The owner of the three events: any task may install; the key is its own task, so its
/// handlers see only faults of its own address space.
fn authorize(r: &Request) -> Decision<Fault> {
    Decision::Allow {
        guard: None,
        key: Some(r.installer.task),
        budget: FUEL,
    }
}

/// The default: no handler resolved it (the virtual-memory system's resolution follows).
fn default(_: &mut Kernel, _: &Fault) -> bool {
    false
}

fn no_primary(_: &Installer) -> bool {
    false
}

fn make_events() -> Result<Events, Error> {
    let one = |name| {
        Event::keyed(
            name,
            Owner {
                authorize,
                may_remove_primary: no_primary,
            },
            default,
            Some(kern::spin::translation::any),
            false,
            kern::spin::event::MAX_HANDLERS,
            Some(kern::spin::translation::key),
        )
    };
    let mut meta = Vec::new();
    meta.try_reserve_exact(3 * kern::spin::event::MAX_HANDLERS)
        .map_err(|_| Error::NoMemory)?;
    Ok(Events {
        ev: [
            one("Translation.PageNotPresent")?,
            one("Translation.BadAddress")?,
            one("Translation.ProtectionFault")?,
        ],
        meta,
    })
}

/// Registers the raise with the virtual-memory family (at boot).
pub fn init() {
    crate::vm::set_translation(raise);
}

/// The fault path's raise (`crate::vm::TranslationRaise`): whether the fault is over (a
/// handler resolved a write fault and its page's translation was made writable in place,
/// `crate::vm::grant_write`). A resolution the map does not show is refused; any other
/// resolution is left to the default, which enters the translation the map now allows.
fn raise(
    k: &mut Kernel,
    _t: ThreadId,
    task: TaskId,
    addr: u64,
    access: Access,
    prot: Option<Prot>,
) -> bool {
    // SAFETY: the lock is held (the page-fault hook); the only reference.
    let Some(evs) = (unsafe { events() }) else {
        return false;
    };
    let class = classify(prot, access);
    let Some(e) = evs.ev.get_mut(class_index(class)) else {
        return false;
    };
    let fault = Fault {
        task,
        addr,
        access,
        class,
    };
    let event = class.event();
    let meta = &mut evs.meta;
    let r = super::raise_with_abort(k, e, &fault, |id, removed| {
        if removed {
            crate::vm::translation_watch(false);
        }
        let at = meta.iter().position(|m| m.event == event && m.id == id)?;
        let m = meta.swap_remove(at);
        Some(super::Forgotten {
            task: m.task,
            notify: m.notify,
        })
    });
    if r.defaulted || !r.result {
        return false;
    }
    // A write the translation can now take in place: `grant_write` found the map's entry
    // writable, so the resolution holds without another look at the map.
    if access == Access::Write && crate::vm::grant_write(k, task, addr) {
        return true;
    }
    match settle(true, crate::vm::prot_at(task, addr), access) {
        Settle::Resume => false,
        Settle::Refused | Settle::Default => {
            refused(k, event, task);
            false
        }
    }
}

fn notify(k: &mut Kernel, port: PortId, id: u64, word: u64) {
    let msg = Message {
        id,
        word: Some(word),
        ..Message::default()
    };
    let mut fx = crate::ipc::effects(k);
    k.ipc.enqueue(port, msg, &mut fx);
    crate::ipc::apply(k, fx);
}

/// Task `task`'s handlers of `event` said they resolved a fault the map still forbids:
/// each installer is told (the fault goes on to the default).
#[inline(never)]
fn refused(k: &mut Kernel, event: u64, task: TaskId) {
    // SAFETY: the lock is held; the raise's borrow has ended.
    let Some(evs) = (unsafe { events() }) else {
        return;
    };
    crate::arch::serial::kprintln!(
        "[kernel] a Translation handler of task {task} did not resolve the fault it claimed"
    );
    let mut ports = [None; kern::spin::event::MAX_HANDLERS];
    for (m, p) in evs
        .meta
        .iter()
        .filter(|m| m.event == event && m.task == task)
        .zip(ports.iter_mut())
    {
        *p = m.notify.map(|port| (port, m.id));
    }
    for (p, id) in ports.into_iter().flatten() {
        notify(k, p, NOTIFY_REFUSED, u64::from(id.0));
    }
}

/// Installs `symbol` (of domain `owner`, found by the extension family) on `event` for
/// task `task`: a built-in handler (`builtin`, its closure the claim) or a WebAssembly
/// one. Returns the handler id.
#[allow(clippy::too_many_arguments)]
pub fn install(
    k: &mut Kernel,
    domains: &Domains,
    task: TaskId,
    owner: DomainId,
    symbol: &Symbol,
    builtin: bool,
    req: &Request,
    event: u64,
    notify: Option<PortId>,
) -> Result<u64, Error> {
    let i = index(event).ok_or(Error::NotFound)?;
    // SAFETY: the lock is held (a system call); the only reference.
    let slot = unsafe { &mut *EVENTS.0.get() };
    if slot.is_none() {
        *slot = Some(make_events()?);
    }
    let evs = slot.as_mut().ok_or(Error::NoMemory)?;
    let (f, closure): (HandlerFn<Kernel, Fault, bool>, u64) = if builtin {
        (builtin_handler(symbol.target)?, req.claim)
    } else {
        if symbol.sig != FAULT_SIG {
            return Err(Error::InvalidArgument);
        }
        wasm::closure(k, domains, task, owner, symbol, wasm::Kind::Fault)?
            .pick(wasm::fault_tier, wasm::fault_handler)
    };
    if evs.meta.len() >= evs.meta.capacity() {
        return Err(Error::NoSpace);
    }
    let e = evs.ev.get_mut(i).ok_or(Error::NotFound)?;
    let id = e.install(req, f, closure, &[])?;
    evs.meta.push(Meta {
        event,
        id,
        task,
        domain: owner,
        notify,
    });
    crate::vm::translation_watch(true);
    Ok(u64::from(id.0))
}

/// `spin_remove` of a `Translation` handler by task `task`.
pub fn remove(task: TaskId, event: u64, id: HandlerId) -> Result<(), Error> {
    // SAFETY: the lock is held (a system call); the only reference.
    let evs = unsafe { events() }.ok_or(Error::NotFound)?;
    let e = index(event)
        .and_then(|i| evs.ev.get_mut(i))
        .ok_or(Error::NotFound)?;
    let who = Installer {
        task,
        domain: 0,
        builtin: false,
    };
    e.remove(id, Some(&who))?;
    crate::vm::translation_watch(false);
    evs.meta.retain(|m| !(m.event == event && m.id == id));
    Ok(())
}

/// Domain `d` went: its handlers go (before its module does).
pub fn forget_domain(d: DomainId) {
    // SAFETY: the lock is held (the family's release paths); the only reference.
    let Some(evs) = (unsafe { events() }) else {
        return;
    };
    while let Some(at) = evs.meta.iter().position(|m| m.domain == d) {
        let m = evs.meta.swap_remove(at);
        if let Some(e) = index(m.event).and_then(|i| evs.ev.get_mut(i)) {
            if e.remove(m.id, None).is_ok() {
                crate::vm::translation_watch(false);
            }
        }
    }
}

/// Task `id` has ended: its handlers, physical pages and mark go (allocating nothing).
pub fn task_released(k: &mut Kernel, id: TaskId) {
    // SAFETY: the lock is held (the hook); the only reference, ended below.
    if let Some(evs) = unsafe { events() } {
        for e in evs.ev.iter_mut() {
            for _ in 0..e.remove_where(|i| i.task == id) {
                crate::vm::translation_watch(false);
            }
        }
        evs.meta.retain(|m| m.task != id);
    }
    loop {
        // SAFETY: the lock is held; this reference ends before the release below.
        let page = unsafe { side() }.pages.take_one(id);
        match page {
            Some(o) => crate::vm::object_release(k, o),
            None => break,
        }
    }
    // SAFETY: as above.
    unsafe { side() }.marks.retain(|(t, _)| *t != id);
}

// ---- the interfaces ---------------------------------------------------------------------

/// Kernel interface targets of the memory interfaces (the `target` of their symbols).
pub const K_PROTECT: u64 = 0x40;
pub const K_QUERY: u64 = 0x41;
pub const K_ADD: u64 = 0x42;
pub const K_REMOVE: u64 = 0x43;
pub const K_VALLOC: u64 = 0x44;
pub const K_VFREE: u64 = 0x45;
pub const K_PALLOC: u64 = 0x46;
pub const K_PFREE: u64 = 0x47;
pub const K_MARK: u64 = 0x48;

/// Whether `target` is one of the memory interfaces' procedures.
pub fn is_target(target: u64) -> bool {
    (K_PROTECT..=K_MARK).contains(&target)
}

fn sig(params: u8, results: u8) -> Sig {
    // Every parameter and result is an i64.
    Sig {
        params,
        results,
        wide: (1u16 << (params + results)) - 1,
    }
}

/// Makes the domains of the memory interfaces and of the built-in `builtin.appel`, and
/// exports them to the name server (any task may import them: each acts on its
/// importer's own address space only).
pub fn register(domains: &mut Domains, names: &mut NameServer) -> Result<(), Error> {
    /// An interface: its name, and each procedure's name, type and target.
    type Iface<'a> = (&'a str, &'a [(&'a str, Sig, u64)]);
    let ifaces: [Iface<'_>; 5] = [
        (
            "baton.translation",
            &[
                ("protect", sig(3, 1), K_PROTECT),
                ("query", sig(1, 1), K_QUERY),
                ("add", sig(3, 1), K_ADD),
                ("remove", sig(2, 1), K_REMOVE),
            ],
        ),
        (
            "baton.virtaddr",
            &[
                ("allocate", sig(1, 1), K_VALLOC),
                ("deallocate", sig(2, 1), K_VFREE),
            ],
        ),
        (
            "baton.physaddr",
            &[
                ("allocate", sig(0, 1), K_PALLOC),
                ("deallocate", sig(1, 1), K_PFREE),
            ],
        ),
        ("baton.clock", &[("mark", sig(0, 0), K_MARK)]),
        (
            "builtin.appel",
            &[
                ("unprotect", FAULT_SIG, T_UNPROTECT),
                ("trap", FAULT_SIG, T_TRAP),
                ("appel1", FAULT_SIG, T_APPEL1),
                ("gc", FAULT_SIG, T_GC),
                ("protect", super::SYSCALL_SIG, T_SYS_PROTECT),
                ("dirty", super::SYSCALL_SIG, T_SYS_DIRTY),
                ("load", super::SYSCALL_SIG, T_SYS_LOAD),
            ],
        ),
    ];
    for (iname, syms) in ifaces {
        super::export_kernel_interface(domains, names, iname, syms, |_, _| true)?;
    }
    Ok(())
}

/// Set while `PhysAddr.Reclaim` is raised: the interfaces that change a map or allocate
/// answer `Denied` (page replacement holds a batch chosen from the maps as they are).
static READ_ONLY: AtomicBool = AtomicBool::new(false);

/// Makes the changing interfaces answer `Denied` (`true`) or work again (`false`).
pub fn set_read_only(on: bool) {
    READ_ONLY.store(on, Ordering::Relaxed);
}

/// `Denied` while the interfaces are read only.
fn may_change() -> Result<(), Error> {
    if READ_ONLY.load(Ordering::Relaxed) {
        Err(Error::Denied)
    } else {
        Ok(())
    }
}

/// `Translation.Protect(va, len, prot)` on `task`'s own map.
pub fn op_protect(
    k: &mut Kernel,
    task: TaskId,
    va: u64,
    len: u64,
    prot: u64,
) -> Result<u64, Error> {
    may_change()?;
    crate::vm::spin_protect(k, task, va, len, prot).map(|()| 0)
}

/// `Translation.ExamineMapping(va)`: the page's state word.
pub fn op_query(k: &mut Kernel, task: TaskId, va: u64) -> Result<u64, Error> {
    crate::vm::spin_query(k, task, va)
}

/// `Translation.AddMapping(va, page, prot)`: maps physical page `page` (a handle from
/// `PhysAddr.Allocate` the task holds) at `va`.
pub fn op_add(k: &mut Kernel, task: TaskId, va: u64, page: u64, prot: u64) -> Result<u64, Error> {
    may_change()?;
    // SAFETY: the lock is held; this reference ends here.
    let object = unsafe { side() }.pages.get(task, page)?;
    crate::vm::spin_add(k, task, va, object, prot).map(|()| 0)
}

/// `Translation.RemoveMapping(va, len)`: the range leaves the map.
pub fn op_remove(k: &mut Kernel, task: TaskId, va: u64, len: u64) -> Result<u64, Error> {
    may_change()?;
    crate::vm::deallocate(k, task, va, len).map(|()| 0)
}

/// `VirtAddr.Allocate(len)`: a range anywhere; its address.
pub fn op_valloc(k: &mut Kernel, task: TaskId, len: u64) -> Result<u64, Error> {
    may_change()?;
    crate::vm::spin_allocate(k, task, len)
}

/// `VirtAddr.Deallocate(va, len)`.
pub fn op_vfree(k: &mut Kernel, task: TaskId, va: u64, len: u64) -> Result<u64, Error> {
    may_change()?;
    crate::vm::deallocate(k, task, va, len).map(|()| 0)
}

/// `PhysAddr.Allocate()`: a zeroed page charged to the task; its handle.
pub fn op_palloc(k: &mut Kernel, task: TaskId) -> Result<u64, Error> {
    may_change()?;
    // SAFETY: the lock is held; each reference ends before the kernel is used again.
    unsafe { side() }.pages.reserve(task)?;
    let account = k
        .tasks
        .get(&task)
        .ok_or(Error::InvalidArgument)?
        .account
        .clone();
    let object = crate::vm::spin_page(k, &account)?;
    // SAFETY: as above.
    match unsafe { side() }.pages.insert(task, object) {
        Ok(h) => Ok(h),
        Err(o) => {
            crate::vm::object_release(k, o);
            Err(Error::NoMemory)
        }
    }
}

/// `PhysAddr.Deallocate(page)`: the handle goes (a mapping of the page keeps it).
pub fn op_pfree(k: &mut Kernel, task: TaskId, page: u64) -> Result<u64, Error> {
    may_change()?;
    // SAFETY: the lock is held; this reference ends before the release.
    let object = unsafe { side() }.pages.remove(task, page)?;
    crate::vm::object_release(k, object);
    Ok(0)
}

/// `baton.clock.mark()`: records the time-stamp counter for task `task`.
pub fn op_mark(task: TaskId) {
    let now = crate::arch::cpu::rdtsc();
    // SAFETY: the lock is held; this reference ends here.
    let s = unsafe { side() };
    if let Some(m) = s.marks.iter_mut().find(|(t, _)| *t == task) {
        m.1 = now;
    } else if s.marks.len() < MARKS_MAX && s.marks.try_reserve(1).is_ok() {
        s.marks.push((task, now));
    }
}

/// An interface call's result as a WebAssembly import returns it: the value, or the
/// error's (negative) code.
pub fn word(r: Result<u64, Error>) -> i64 {
    match r {
        Ok(v) => v as i64,
        Err(e) => e.to_raw() as i64,
    }
}

/// The system calls `spinvm_query` and `spinvm_mark` of task `task`.
pub fn sys(k: &mut Kernel, task: TaskId, call: Sys, args: [u64; 6]) -> Result<u64, Error> {
    match call {
        Sys::SpinvmQuery => op_query(k, task, args[0]),
        Sys::SpinvmMark => {
            // SAFETY: the lock is held; this reference ends here.
            let s = unsafe { side() };
            Ok(s.marks
                .iter_mut()
                .find(|(t, _)| *t == task)
                .map_or(0, |m| core::mem::take(&mut m.1)))
        }
        _ => Err(Error::InvalidArgument),
    }
}

// ---- the built-in extension `builtin.appel` -----------------------------------------------

/// What a built-in memory extension may use: the memory interfaces of its installer's own
/// address space, as methods, and that task's memory by word. Its kernel reference is
/// private.
pub struct Iface<'a> {
    k: &'a mut Kernel,
    task: TaskId,
}

impl Iface<'_> {
    /// `Translation.Protect`.
    pub fn protect(&mut self, va: u64, len: u64, prot: u64) -> Result<(), Error> {
        op_protect(self.k, self.task, va, len, prot).map(|_| ())
    }

    /// `Translation.ExamineMapping` (the state word).
    pub fn query(&mut self, va: u64) -> Result<u64, Error> {
        op_query(self.k, self.task, va)
    }

    /// `baton.clock.mark`.
    pub fn mark(&mut self) {
        op_mark(self.task);
    }

    /// The word at `addr` of the installer's memory.
    pub fn read_word(&mut self, addr: u64) -> Result<u64, Error> {
        let mut b = [0u8; 8];
        self.k.copy_in(self.task, addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes the word at `addr` of the installer's memory.
    pub fn write_word(&mut self, addr: u64, v: u64) -> Result<(), Error> {
        self.k.copy_out(self.task, addr, &v.to_le_bytes())
    }
}

/// The built-in extension's own code.
mod ext {
    #![forbid(unsafe_code)]
    use super::Iface;
    use baton_abi::translation::STATE_DIRTY;
    use kern::spin::translation::Fault;

    const PAGE: u64 = 4096;
    const RW: u64 = 3;
    const READ: u64 = 1;
    /// Most pages the card table at the closure records.
    pub const CARDS_MAX: u64 = 511;

    /// Gives the faulting page read and write access back.
    pub fn unprotect(io: &mut Iface<'_>, _closure: u64, f: &Fault) -> bool {
        io.protect(f.addr & !(PAGE - 1), PAGE, RW).is_ok()
    }

    /// Marks the clock as it starts (the Appel–Li `trap`), then as [`unprotect`].
    pub fn trap(io: &mut Iface<'_>, closure: u64, f: &Fault) -> bool {
        io.mark();
        unprotect(io, closure, f)
    }

    /// Appel–Li `appel1`: unprotects the faulting page and protects its partner (the other
    /// page of its aligned pair).
    pub fn appel1(io: &mut Iface<'_>, _closure: u64, f: &Fault) -> bool {
        let page = f.addr & !(PAGE - 1);
        io.protect(page, PAGE, RW).is_ok() && io.protect(page ^ PAGE, PAGE, READ).is_ok()
    }

    /// A garbage collector's write barrier: records the faulting page in the card table at
    /// `closure` in the installer's memory (a count word, then up to [`CARDS_MAX`] page
    /// addresses), and unprotects the page.
    pub fn gc(io: &mut Iface<'_>, closure: u64, f: &Fault) -> bool {
        let page = f.addr & !(PAGE - 1);
        let Ok(n) = io.read_word(closure) else {
            return false;
        };
        if n < CARDS_MAX {
            let at = closure.wrapping_add(8).wrapping_add(n.wrapping_mul(8));
            if io.write_word(at, page).is_err() || io.write_word(closure, n + 1).is_err() {
                return false;
            }
        }
        io.protect(page, PAGE, RW).is_ok()
    }

    /// `Trap.SystemCall` handler: `Translation.Protect(a0, a1, a2)` (0 or the error).
    pub fn sys_protect(io: &mut Iface<'_>, a: [u64; 3]) -> Result<u64, baton_abi::Error> {
        io.protect(a[0], a[1], a[2]).map(|()| 0)
    }

    /// `Trap.SystemCall` handler: SPIN's `Dirty(a0)` (1 or 0, or the error).
    pub fn sys_dirty(io: &mut Iface<'_>, a: [u64; 3]) -> Result<u64, baton_abi::Error> {
        io.query(a[0]).map(|s| u64::from(s & STATE_DIRTY != 0))
    }

    /// `Trap.SystemCall` handler: the word at `a0` of the caller's memory (a system call
    /// that reads its argument from the caller, as a call with a buffer does).
    pub fn sys_load(io: &mut Iface<'_>, a: [u64; 3]) -> Result<u64, baton_abi::Error> {
        io.read_word(a[0])
    }
}

/// Built-in symbol targets of `builtin.appel`.
const T_UNPROTECT: u64 = 0x300;
const T_TRAP: u64 = 0x301;
const T_APPEL1: u64 = 0x302;
const T_GC: u64 = 0x303;
const T_SYS_PROTECT: u64 = 0x310;
const T_SYS_DIRTY: u64 = 0x311;
const T_SYS_LOAD: u64 = 0x312;

fn h_unprotect(k: &mut Kernel, b: Binding, f: &Fault) -> Option<bool> {
    Some(ext::unprotect(&mut Iface { k, task: f.task }, b.closure, f))
}
fn h_trap(k: &mut Kernel, b: Binding, f: &Fault) -> Option<bool> {
    Some(ext::trap(&mut Iface { k, task: f.task }, b.closure, f))
}
fn h_appel1(k: &mut Kernel, b: Binding, f: &Fault) -> Option<bool> {
    Some(ext::appel1(&mut Iface { k, task: f.task }, b.closure, f))
}
fn h_gc(k: &mut Kernel, b: Binding, f: &Fault) -> Option<bool> {
    Some(ext::gc(&mut Iface { k, task: f.task }, b.closure, f))
}

/// The `Translation` handler for built-in target `t` (`InvalidArgument`: not one).
fn builtin_handler(t: u64) -> Result<HandlerFn<Kernel, Fault, bool>, Error> {
    Ok(match t {
        T_UNPROTECT => h_unprotect,
        T_TRAP => h_trap,
        T_APPEL1 => h_appel1,
        T_GC => h_gc,
        _ => return Err(Error::InvalidArgument),
    })
}

fn h_sys_protect(k: &mut Kernel, _b: Binding, c: &super::Call) -> Option<Option<u64>> {
    let r = ext::sys_protect(
        &mut Iface { k, task: c.task },
        [c.args[0], c.args[1], c.args[2]],
    );
    Some(Some(r.unwrap_or_else(Error::to_raw)))
}
fn h_sys_dirty(k: &mut Kernel, _b: Binding, c: &super::Call) -> Option<Option<u64>> {
    let r = ext::sys_dirty(
        &mut Iface { k, task: c.task },
        [c.args[0], c.args[1], c.args[2]],
    );
    Some(Some(r.unwrap_or_else(Error::to_raw)))
}

fn h_sys_load(k: &mut Kernel, _b: Binding, c: &super::Call) -> Option<Option<u64>> {
    let r = ext::sys_load(
        &mut Iface { k, task: c.task },
        [c.args[0], c.args[1], c.args[2]],
    );
    Some(Some(r.unwrap_or_else(Error::to_raw)))
}

/// The `Trap.SystemCall` handler for built-in target `t` of `builtin.appel`.
pub fn syscall_handler(t: u64) -> Option<HandlerFn<Kernel, super::Call, Option<u64>>> {
    match t {
        T_SYS_PROTECT => Some(h_sys_protect),
        T_SYS_DIRTY => Some(h_sys_dirty),
        T_SYS_LOAD => Some(h_sys_load),
        _ => None,
    }
}

/// Whether the `Trap.SystemCall` handler of built-in target `t` copies from or to its
/// caller's memory: such a copy may meet a page being paged in, and the call is then
/// made again once the page is there (`crate::pager::after_call`), which needs the
/// caller's registers saved in its thread. No other handler of the range copies user
/// memory (WebAssembly handlers reach only their linear memory), so none of them notes a
/// page to wait for.
pub fn syscall_copies(t: u64) -> bool {
    t == T_SYS_LOAD
}
