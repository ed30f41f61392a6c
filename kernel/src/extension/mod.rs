//! The extension family: SPIN's events, domains and extensions in the kernel
//! (`docs/extensions.md`).
//!
//! It owns two events, `Trap.SystemCall` (raised by the system-call decode for a number
//! outside the base ABI) and `Test.Raise` (raised by `spin_raise`, for tests and the
//! dispatcher's benchmarks), the domains and the name server of `kern::spin`, the
//! kernel's public interfaces (`baton.console`, `baton.task`, and `baton.kernel`, which no
//! task may import), the built-in extensions ([`builtin`], Rust that forbids `unsafe`) and
//! the WebAssembly extensions ([`wasm`], run by `wasmi` under a fuel budget).
//!
//! # State and locking
//! The family's state lives here, not in [`Kernel`]: [`STATE`] (events, domains, names,
//! handler records) and `wasm::EXTS` (compiled modules and their stores). Both are
//! touched only under the big kernel lock. A raise borrows the event from [`STATE`]
//! while its handlers run; handlers never touch [`STATE`] (a WebAssembly handler uses
//! only `wasm::EXTS`), and every change to the handler lists happens after the raise.
//!
//! # Asynchronous handlers
//! `Test.Raise` takes asynchronous handlers (`spin_install` with
//! `baton_abi::spin::INSTALL_ASYNC`): a raise does not run them but queues a [`Pending`]
//! record of each whose guards held (the handler's id, its installer, the argument), at
//! most `ASYNC_PENDING_MAX` per installer, each charged [`PENDING_BYTES`] of kernel heap
//! to the installer; past the bound, or when the charge or the queue's room fails, the
//! raise is counted as dropped for the installer and goes on. The worker is whichever
//! processor's idle thread next finds nothing to run ([`run_async`], the core's
//! `idle_work` hook): it runs up to [`ASYNC_BATCH`] of them, oldest first, each by its
//! handler id (one removed meanwhile is gone from the queue already: every removal purges
//! its records, giving back their charges), under the lock and, for a WebAssembly
//! handler, under its fuel; one that aborts is removed and its installer told, as for a
//! synchronous one. A handler cannot be unloaded while it runs (it runs under the big
//! lock, and nothing it may call releases domains).
//!
//! # Invariants
//! - Every installed handler has one [`Meta`] record (its event, id, installer, domain
//!   and notification port), and a domain's handlers go before the domain does.
//! - Everything a task made here goes when it ends ([`task_released`]).

pub mod builtin;
pub mod cthreads;
pub mod reclaim;
pub mod strand;
pub mod translation;
pub mod wasm;

use crate::kernel::{Kernel, TaskId};
use crate::locked::Locked;
use alloc::vec::Vec;
use baton_abi::spin::{
    ASYNC_DROPPED, ASYNC_PENDING, ASYNC_PENDING_MAX, ASYNC_RAN, DOMAINS_MAX, EVENT_SYSCALL,
    EVENT_TEST, EXT_SYSCALL_END, EXT_SYSCALL_FIRST, FUEL, INSTALL_ASYNC, NOTIFY_ABORTED,
};
use baton_abi::{Error, Sys};
use kern::ipc::{Message, PortId};
use kern::spin::domain::{
    DomainId, Domains, Holder, Image, Interface, Name, NameServer, Sig, Symbol,
};
use kern::spin::event::{
    Decision, Event, Guard, HandlerFn, HandlerId, Installer, Mode, Owner, Request,
};

/// `Trap.SystemCall`'s arguments. Laid out as the system-call entry's lean way for the
/// extensions' range pushes them on the kernel stack (`arch::trap`'s `high_syscall`: a
/// slot for the task, the number, the six argument registers), so the record is raised
/// where it lies.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Call {
    pub task: TaskId,
    pub number: u64,
    pub args: [u64; 6],
}

/// `Trap.SystemCall(call) -> rax` (`None`: no handler took it).
pub type SyscallEvent = Event<Kernel, Call, Option<u64>>;
/// `Test.Raise(arg) -> sum`.
pub type TestEvent = Event<Kernel, u64, u64>;

/// The type a handler of `Trap.SystemCall` has in an extension image:
/// `(number, a0, a1, a2: i64) -> i64`.
pub const SYSCALL_SIG: Sig = Sig {
    params: 4,
    results: 1,
    wide: 0b1_1111,
};
/// The type of a `Test.Raise` handler: `(i64) -> i64`.
pub const TEST_SIG: Sig = Sig {
    params: 1,
    results: 1,
    wide: 0b11,
};

/// What the family remembers of an installed handler.
struct Meta {
    event: u64,
    id: HandlerId,
    task: TaskId,
    domain: DomainId,
    notify: Option<PortId>,
    /// The handler needs its caller's registers saved in its thread: it may block or end
    /// its caller (the integrated C-Threads' calls), or copy from or to the caller's
    /// memory (a copy that meets a page being paged in makes the call again once the page
    /// is there: `crate::pager::after_call`). While one such handler is on
    /// `Trap.SystemCall` the system-call entry's lean way for the extensions' range is
    /// not taken (see [`Lean::NeedsFrame`]).
    frame: bool,
}

/// The installed handlers' records, and how many of them need their caller's frame on
/// `Trap.SystemCall` (kept with every change of the list).
struct Metas {
    list: Vec<Meta>,
    framed: usize,
}

impl Metas {
    fn push(&mut self, m: Meta) -> Result<(), Error> {
        self.list.try_reserve(1).map_err(|_| Error::NoMemory)?;
        self.framed += usize::from(m.frame);
        self.list.push(m);
        Ok(())
    }

    /// Removes and returns the first record `pick` chooses.
    fn take(&mut self, pick: impl Fn(&Meta) -> bool) -> Option<Meta> {
        let at = self.list.iter().position(pick)?;
        let m = self.list.swap_remove(at);
        self.framed -= usize::from(m.frame);
        Some(m)
    }

    /// Removes every record `pick` chooses.
    fn remove_all(&mut self, pick: impl Fn(&Meta) -> bool) {
        while self.take(&pick).is_some() {}
    }
}

/// A raise of an asynchronous `Test.Raise` handler waiting for a worker.
struct Pending {
    id: HandlerId,
    /// The handler's installer, charged for this record.
    task: TaskId,
    arg: u64,
    _charge: kern::quota::Charge,
}

/// Kernel heap a [`Pending`] record is charged to its installer.
pub const PENDING_BYTES: usize = 64;

/// Most asynchronous invocations one idle pass runs before it looks at its run queue
/// again.
pub const ASYNC_BATCH: usize = 4;

/// An installer's asynchronous counts: (task, ran, dropped).
type AsyncCount = (TaskId, u64, u64);

/// The family's state.
pub struct State {
    syscall: SyscallEvent,
    test: TestEvent,
    domains: Domains,
    names: NameServer,
    meta: Metas,
    /// The domains of the kernel's public interfaces.
    kernel_domains: [DomainId; 3],
    /// Raises of asynchronous handlers waiting for a worker, oldest first.
    pending: Vec<Pending>,
    /// The counts of each task that installed an asynchronous handler (made at its
    /// installation, so that counting a raise allocates nothing).
    async_counts: Vec<AsyncCount>,
}

static STATE: Locked<State> = Locked::new();

/// The family's state, made on first use.
///
/// # Safety
/// The caller holds the big kernel lock (the `&mut Kernel` it passes is the evidence) and
/// keeps no other reference from an earlier call alive while it uses this one.
unsafe fn state(_k: &mut Kernel) -> Result<&'static mut State, Error> {
    // SAFETY: under the lock, by the caller's contract, this is the only reference.
    unsafe { STATE.get_or_try_make(State::new) }
}

/// The state if it exists (nothing is made).
///
/// # Safety
/// As [`state`].
unsafe fn existing() -> Option<&'static mut State> {
    // SAFETY: as `state`.
    unsafe { STATE.get() }
}

/// Kernel interface targets (the `target` of the kernel domain's symbols).
pub const K_CONSOLE_WRITE: u64 = 1;
pub const K_TASK_ID: u64 = 2;
pub const K_SECRET: u64 = 3;

fn name(s: &str) -> Result<Name, Error> {
    Name::new(s.as_bytes())
}

fn iface(n: &str, symbols: &[(&str, Sig, u64)]) -> Result<Interface, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(symbols.len())
        .map_err(|_| Error::NoMemory)?;
    for (s, sig, target) in symbols {
        v.push(Symbol {
            name: name(s)?,
            sig: *sig,
            target: *target,
        });
    }
    Ok(Interface {
        name: name(n)?,
        symbols: v,
    })
}

fn anyone(_: Holder, _: u64) -> bool {
    true
}

/// Makes a kernel domain exporting the one interface `iname` with `symbols` (name,
/// signature, target) and exports it to the name server under `iname`, imported by whoever
/// `auth` allows: how the kernel's interfaces and built-in extensions are offered.
fn export_kernel_interface(
    domains: &mut Domains,
    names: &mut NameServer,
    iname: &str,
    symbols: &[(&str, Sig, u64)],
    auth: kern::spin::domain::Authorizer,
) -> Result<DomainId, Error> {
    let mut exports = Vec::new();
    exports.try_reserve_exact(1).map_err(|_| Error::NoMemory)?;
    exports.push(iface(iname, symbols)?);
    let d = domains.create(
        Holder::Kernel,
        Image {
            exports,
            imports: Vec::new(),
        },
    )?;
    names.export(domains, Holder::Kernel, name(iname)?, d, auth, 0)?;
    Ok(d)
}

fn kernel_only(who: Holder, _: u64) -> bool {
    who == Holder::Kernel
}

/// The owner of `Trap.SystemCall`: a claim is a number in the extension range; the key
/// it gives the handler (the event's key is the calling task and the number: [`call_key`])
/// lets it see only that number, called by the installer's task. A key rather than a
/// guard procedure: the dispatcher compares it itself, so one handler stays a direct call.
fn syscall_authorize(r: &Request) -> Decision<Call> {
    if !(EXT_SYSCALL_FIRST..EXT_SYSCALL_END).contains(&r.claim) || r.installer.task >= 1 << 43 {
        return Decision::Deny;
    }
    Decision::Allow {
        guard: None,
        key: Some(r.installer.task << 20 | r.claim),
        budget: FUEL,
    }
}

/// `Trap.SystemCall`'s key: the task in the high bits, the number in the low 20.
#[inline(always)]
fn call_key(c: &Call) -> u64 {
    c.task << 20 | (c.number & 0xf_ffff)
}

/// No handler took the call: the caller's decode goes on as for any unknown number.
fn syscall_default(_: &mut Kernel, _: &Call) -> Option<u64> {
    None
}

/// The owner of `Test.Raise`: claim 0 installs without a guard; claim `1 + x` with the
/// guard `arg == x`.
fn test_authorize(r: &Request) -> Decision<u64> {
    Decision::Allow {
        guard: r.claim.checked_sub(1).map(|x| Guard {
            test: |w, a| *a == w,
            word: x,
        }),
        key: None,
        budget: FUEL,
    }
}

fn test_default(_: &mut Kernel, _: &u64) -> u64 {
    0
}

fn no_primary(_: &Installer) -> bool {
    false
}

impl State {
    fn new() -> Result<State, Error> {
        let syscall = Event::keyed(
            "Trap.SystemCall",
            Owner {
                authorize: syscall_authorize,
                may_remove_primary: no_primary,
            },
            syscall_default,
            None,
            false,
            kern::spin::event::MAX_HANDLERS,
            Some(call_key),
        )?;
        let test = Event::new(
            "Test.Raise",
            Owner {
                authorize: test_authorize,
                may_remove_primary: no_primary,
            },
            test_default,
            Some(u64::wrapping_add),
            false,
            kern::spin::event::MAX_HANDLERS,
        )?
        .allow_asynchronous();
        let mut domains = Domains::new();
        let mut names = NameServer::new();
        let none = Sig {
            params: 0,
            results: 0,
            wide: 0,
        };
        let i64_result = Sig {
            params: 0,
            results: 1,
            wide: 0b1,
        };
        // One domain per public interface, so that each name's authoriser guards exactly
        // its own symbols (a capability for the console's domain resolves nothing else).
        let mut kernel_domains = [DomainId(0); 3];
        for (slot, (iname, sym, sig, target, auth)) in kernel_domains.iter_mut().zip([
            (
                "baton.console",
                "write",
                Sig { params: 2, ..none },
                K_CONSOLE_WRITE,
                anyone as kern::spin::domain::Authorizer,
            ),
            ("baton.task", "id", i64_result, K_TASK_ID, anyone),
            ("baton.kernel", "secret", i64_result, K_SECRET, kernel_only),
        ]) {
            *slot = export_kernel_interface(
                &mut domains,
                &mut names,
                iname,
                &[(sym, sig, target)],
                auth,
            )?;
        }
        builtin::register(&mut domains, &mut names)?;
        translation::register(&mut domains, &mut names)?;
        strand::register(&mut domains, &mut names)?;
        reclaim::register(&mut domains, &mut names)?;
        cthreads::register(&mut domains, &mut names)?;
        let mut list = Vec::new();
        list.try_reserve_exact(2 * kern::spin::event::MAX_HANDLERS)
            .map_err(|_| Error::NoMemory)?;
        let meta = Metas { list, framed: 0 };
        Ok(State {
            syscall,
            test,
            domains,
            names,
            meta,
            kernel_domains,
            pending: Vec::new(),
            async_counts: Vec::new(),
        })
    }
}

/// Why [`system_call_lean`] gave no answer.
pub enum Lean {
    /// No handler took the number.
    Unknown,
    /// Nothing ran: a handler on `Trap.SystemCall` may block or end its caller, or copy
    /// its caller's memory (see `Meta::frame`), so the call must be made with the caller's
    /// registers saved in its thread ([`system_call`] from the entry's way that saves
    /// them).
    NeedsFrame,
}

/// [`system_call`] for the system-call entry's lean way, which has not saved the caller's
/// registers in its thread: the same, unless a handler that needs them is installed
/// ([`Lean::NeedsFrame`]). The one-handler case is inlined into the entry (its key
/// compared here, the procedure called directly, its answer told by one test); the
/// others are out of line. No handler this runs copies its caller's memory, so none notes
/// a page to wait for (`crate::vm::take_page_wait`): the lean way neither clears nor takes
/// that note.
#[inline(always)]
pub fn system_call_lean(k: &mut Kernel, call: &Call) -> Result<u64, Lean> {
    // SAFETY: the lock is held (we have `k`); the reference is the only one.
    let Some(s) = (unsafe { existing() }) else {
        return Err(Lean::Unknown);
    };
    if s.meta.framed != 0 {
        return Err(Lean::NeedsFrame);
    }
    let Some((f, b, key)) = s.syscall.single() else {
        return system_call_general(k, s, call).ok_or(Lean::Unknown);
    };
    // What `Event::raise` does for one handler, without the call of `call_key`.
    if key.is_some_and(|key| key != call_key(call)) {
        return Err(Lean::Unknown);
    }
    match f(k, b, call) {
        Some(Some(v)) => Ok(v),
        other => lean_other(k, s, other),
    }
}

/// The one handler on the lean way did not answer: it declined the number (`Some(None)`)
/// or aborted (`None`).
#[cold]
#[inline(never)]
fn lean_other(k: &mut Kernel, s: &mut State, r: Option<Option<u64>>) -> Result<u64, Lean> {
    match r {
        Some(r) => r,
        None => single_aborted(k, s),
    }
    .ok_or(Lean::Unknown)
}

/// `Trap.SystemCall`: a system call of the extension range (`call`: its number, the
/// calling task, the arguments). The handlers' answer, or `None` when no handler took it
/// (the caller's decode then treats it as an unknown number). Nothing is made when no
/// extension was ever installed. Inlined into the system-call entry's short way.
#[inline(always)]
pub fn system_call(k: &mut Kernel, call: &Call) -> Option<u64> {
    // SAFETY: the lock is held (we have `k`); the reference is the only one.
    let s = unsafe { existing() }?;
    if let Some((f, b, key)) = s.syscall.single() {
        // One handler, no guard: its key compared here, its procedure called directly
        // (what `Event::raise` does for this case, without the call of `call_key`).
        if key.is_some_and(|key| key != call_key(call)) {
            return None;
        }
        return match f(k, b, call) {
            Some(r) => r,
            None => single_aborted(k, s),
        };
    }
    system_call_general(k, s, call)
}

/// The one handler of `Trap.SystemCall` aborted: it goes, its installer is told, and the
/// caller learns `Aborted` (the number was an extension's).
#[cold]
#[inline(never)]
fn single_aborted(k: &mut Kernel, s: &mut State) -> Option<u64> {
    let meta = &mut s.meta;
    remove_aborted(k, &mut s.syscall, 1, |id, _| {
        forget_meta(meta, EVENT_SYSCALL, id)
    });
    Some(Error::Aborted.to_raw())
}

/// `Trap.SystemCall` with no handler or several (guards, ordering, the combiner).
#[inline(never)]
fn system_call_general(k: &mut Kernel, s: &mut State, call: &Call) -> Option<u64> {
    let meta = &mut s.meta;
    let r = raise_with_abort(k, &mut s.syscall, call, |id, _| {
        forget_meta(meta, EVENT_SYSCALL, id)
    });
    if r.aborted != 0 && r.defaulted {
        // The number was an extension's, which failed: the caller learns that, rather
        // than being treated as having made an unknown call.
        return Some(Error::Aborted.to_raw());
    }
    r.result
}

/// An aborted handler's record, as a family's `forget` gives it to [`raise_with_abort`]:
/// its installer, and the port the installer named to be told.
pub(crate) struct Forgotten {
    pub task: TaskId,
    pub notify: Option<PortId>,
}

/// Raises `ev` with `arg`: the handlers run (a WebAssembly one under its fuel), and those
/// that aborted (out of fuel, a trap) are removed from `ev` and their installers told.
/// How every event of the family is raised. For each removed handler `forget(id,
/// removed)` drops the family's own record of it (`removed`: whether `ev` still had it)
/// and gives back its installer and port. Inlined, so a raise with no abort costs what
/// the raise costs.
#[inline(always)]
pub(crate) fn raise_with_abort<A, R: Copy>(
    k: &mut Kernel,
    ev: &mut Event<Kernel, A, R>,
    arg: &A,
    forget: impl FnMut(HandlerId, bool) -> Option<Forgotten>,
) -> kern::spin::event::Raised<R> {
    let r = ev.raise(k, arg);
    if r.aborted != 0 {
        remove_aborted(k, ev, r.aborted, forget);
    }
    r
}

/// Removes the handlers of `ev` at the positions in `mask` (they aborted in the raise that
/// just ended) and tells their installers (see [`raise_with_abort`]).
#[inline(never)]
pub(crate) fn remove_aborted<A, R: Copy>(
    k: &mut Kernel,
    ev: &mut Event<Kernel, A, R>,
    mask: u32,
    mut forget: impl FnMut(HandlerId, bool) -> Option<Forgotten>,
) {
    let mut ids = [None; kern::spin::event::MAX_HANDLERS];
    for (i, slot) in ids.iter_mut().enumerate() {
        if mask & (1 << i) != 0 {
            *slot = ev.installer_at(i).map(|x| x.0);
        }
    }
    let mut ports = [None; kern::spin::event::MAX_HANDLERS];
    for (id, port) in ids.into_iter().flatten().zip(ports.iter_mut()) {
        let removed = ev.remove(id, None).is_ok();
        if let Some(m) = forget(id, removed) {
            crate::arch::serial::kprintln!(
                "[kernel] extension handler {} of task {} on {} aborted and removed",
                id.0,
                m.task,
                ev.name()
            );
            *port = m.notify.map(|p| (p, id));
        }
    }
    for (port, id) in ports.into_iter().flatten() {
        let msg = Message {
            id: NOTIFY_ABORTED,
            word: Some(u64::from(id.0)),
            ..Message::default()
        };
        let mut fx = crate::ipc::effects(k);
        k.ipc.enqueue(port, msg, &mut fx);
        crate::ipc::apply(k, fx);
    }
}

/// The `forget` of [`raise_with_abort`] for the family's own two events: `event`'s record
/// of handler `id` leaves `meta`.
fn forget_meta(meta: &mut Metas, event: u64, id: HandlerId) -> Option<Forgotten> {
    let m = meta.take(|m| m.event == event && m.id == id)?;
    Some(Forgotten {
        task: m.task,
        notify: m.notify,
    })
}

/// The extension system calls (`Sys::Spin*`) of task `task`.
pub fn sys(k: &mut Kernel, task: TaskId, call: Sys, args: [u64; 6]) -> Result<u64, Error> {
    if call == Sys::SpinRaise {
        return raise_test(k, args[0]);
    }
    // SAFETY: the lock is held; nothing else of the state is borrowed.
    let s = unsafe { state(k) }?;
    let me = Holder::Task(task);
    match call {
        Sys::SpinTier => wasm::runs(args[0]),
        Sys::SpinAsync => {
            let (ran, dropped) = s
                .async_counts
                .iter()
                .find(|c| c.0 == task)
                .map_or((0, 0), |c| (c.1, c.2));
            match args[0] {
                ASYNC_PENDING => Ok(s.pending.iter().filter(|p| p.task == task).count() as u64),
                ASYNC_RAN => Ok(ran),
                ASYNC_DROPPED => Ok(dropped),
                _ => Err(Error::InvalidArgument),
            }
        }
        Sys::SpinImport => {
            let n = copy_name(k, task, args[0], args[1])?;
            check_room(s, task)?;
            s.names.import(&mut s.domains, me, &n).map(|d| d.0)
        }
        Sys::SpinCreate => {
            check_room(s, task)?;
            wasm::create(k, &mut s.domains, task, args[0], args[1]).map(|d| d.0)
        }
        Sys::SpinResolve => s
            .domains
            .resolve(me, DomainId(args[0]), DomainId(args[1]))
            .map(|n| n as u64),
        Sys::SpinCombine => {
            check_room(s, task)?;
            s.domains
                .combine(me, DomainId(args[0]), DomainId(args[1]))
                .map(|d| d.0)
        }
        Sys::SpinInstall => install(k, s, task, args),
        Sys::SpinRemove => {
            let id = HandlerId(u32::try_from(args[1]).map_err(|_| Error::NotFound)?);
            let who = Installer {
                task,
                domain: 0,
                builtin: false,
            };
            match args[0] {
                e if strand::which(e).is_some() => {
                    let w = strand::which(e).ok_or(Error::NotFound)?;
                    return strand::remove(task, w, id).map(|()| 0);
                }
                EVENT_SYSCALL => s.syscall.remove(id, Some(&who))?,
                EVENT_TEST => {
                    s.test.remove(id, Some(&who))?;
                    purge_pending(s);
                }
                e if baton_abi::translation::is_translation_event(e) => {
                    return translation::remove(task, e, id).map(|()| 0)
                }
                baton_abi::translation::EVENT_RECLAIM => {
                    return reclaim::remove(task, id).map(|()| 0)
                }
                _ => return Err(Error::NotFound),
            }
            s.meta.remove_all(|m| m.event == args[0] && m.id == id);
            Ok(0)
        }
        Sys::SpinRelease => release(s, me, DomainId(args[0])).map(|()| 0),
        _ => Err(Error::InvalidArgument),
    }
}

fn check_room(s: &State, task: TaskId) -> Result<(), Error> {
    if s.domains.held_by(task).count() >= DOMAINS_MAX {
        return Err(Error::NoSpace);
    }
    Ok(())
}

fn copy_name(k: &mut Kernel, task: TaskId, ptr: u64, len: u64) -> Result<Name, Error> {
    let len = usize::try_from(len).map_err(|_| Error::TooLarge)?;
    let mut buf = [0u8; kern::spin::domain::NAME_MAX];
    let out = buf.get_mut(..len).ok_or(Error::TooLarge)?;
    k.copy_in(task, ptr, out)?;
    Name::new(out)
}

/// `spin_raise(arg)`: `Test.Raise`.
fn raise_test(k: &mut Kernel, arg: u64) -> Result<u64, Error> {
    // SAFETY: the lock is held; the reference is the only one.
    let Some(s) = (unsafe { existing() }) else {
        return Ok(0);
    };
    let r = s.test.raise(k, &arg);
    // Deferred first: the positions in both masks are those of the raise, which removing
    // an aborted handler would shift.
    if r.deferred != 0 {
        defer(k, s, r.deferred, arg);
    }
    if r.aborted != 0 {
        let meta = &mut s.meta;
        remove_aborted(k, &mut s.test, r.aborted, |id, _| {
            forget_meta(meta, EVENT_TEST, id)
        });
    }
    Ok(r.result)
}

/// Queues the asynchronous handlers at the positions in `mask` of `Test.Raise` for a
/// worker, each charged to its installer; counts those past the bound as dropped.
#[inline(never)]
fn defer(k: &mut Kernel, s: &mut State, mask: u32, arg: u64) {
    for i in 0..kern::spin::event::MAX_HANDLERS {
        if mask & (1 << i) == 0 {
            continue;
        }
        let Some((id, Some(who))) = s.test.installer_at(i) else {
            continue;
        };
        let task = who.task;
        let waiting = s.pending.iter().filter(|p| p.task == task).count() as u64;
        let charge = k
            .tasks
            .get(&task)
            .and_then(|t| crate::quota::heap(&t.account, PENDING_BYTES).ok());
        let queued = match charge {
            Some(c) if waiting < ASYNC_PENDING_MAX && s.pending.try_reserve(1).is_ok() => {
                s.pending.push(Pending {
                    id,
                    task,
                    arg,
                    _charge: c,
                });
                true
            }
            _ => false,
        };
        if !queued {
            if let Some(c) = s.async_counts.iter_mut().find(|c| c.0 == task) {
                c.2 += 1;
            }
        }
    }
}

/// The core's `idle_work` hook: runs up to [`ASYNC_BATCH`] waiting asynchronous handlers
/// (see the module documentation). Whether it ran any.
pub fn run_async(k: &mut Kernel) -> bool {
    let mut ran = false;
    for _ in 0..ASYNC_BATCH {
        // SAFETY: the lock is held (the idle loop); the reference ends before the
        // handler runs, and the state is borrowed afresh after it.
        let Some(s) = (unsafe { existing() }) else {
            return ran;
        };
        if s.pending.is_empty() {
            return ran;
        }
        let p = s.pending.remove(0);
        let Some((f, b)) = s.test.proc_of(p.id) else {
            continue;
        };
        ran = true;
        let r = f(k, b, &p.arg);
        drop(p._charge);
        // SAFETY: as above; the handler's own use of the modules has ended.
        let Some(s) = (unsafe { existing() }) else {
            return ran;
        };
        if let Some(c) = s.async_counts.iter_mut().find(|c| c.0 == p.task) {
            c.1 += 1;
        }
        if r.is_none() {
            let at = s.test.handler_ids().position(|h| h == p.id);
            if let Some(at) = at {
                let meta = &mut s.meta;
                remove_aborted(
                    k,
                    &mut s.test,
                    1u32.checked_shl(at as u32).unwrap_or(0),
                    |id, _| forget_meta(meta, EVENT_TEST, id),
                );
            }
        }
    }
    ran
}

/// Drops the waiting raises of handlers no longer installed (their charges come back).
fn purge_pending(s: &mut State) {
    let test = &s.test;
    s.pending.retain(|p| test.proc_of(p.id).is_some());
}

/// `spin_install(domain, sym_ptr, sym_len, event | rank << 32, claim, notify)`.
fn install(k: &mut Kernel, s: &mut State, task: TaskId, args: [u64; 6]) -> Result<u64, Error> {
    let domain = DomainId(args[0]);
    let sym = copy_name(k, task, args[1], args[2])?;
    let asynchronous = args[3] & INSTALL_ASYNC != 0;
    let event = args[3] & 0xffff_ffff & !INSTALL_ASYNC;
    let rank = (args[3] >> 32) as u32 as i32;
    let claim = args[4];
    let notify = match args[5] {
        0 => None,
        n => {
            let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
            Some(k.ipc.sendable_port(&t.names, n)?)
        }
    };
    let (owner, symbol) = s.domains.find_export(Holder::Task(task), domain, &sym)?;
    let builtin =
        s.domains.get(Holder::Kernel, owner).is_ok() && !s.kernel_domains.contains(&owner);
    let installer = Installer {
        task,
        domain: domain.0,
        builtin,
    };
    let req = Request {
        installer,
        claim,
        rank,
        mode: if asynchronous {
            Mode::Asynchronous
        } else {
            Mode::Synchronous
        },
    };
    if asynchronous {
        if event != EVENT_TEST {
            return Err(Error::NotSupported);
        }
        // Its counts, made now so that a raise never allocates to count.
        if !s.async_counts.iter().any(|c| c.0 == task) {
            s.async_counts.try_reserve(1).map_err(|_| Error::NoMemory)?;
            s.async_counts.push((task, 0, 0));
        }
    }
    if event == baton_abi::translation::EVENT_RECLAIM {
        return reclaim::install(k, &s.domains, owner, &symbol, builtin, &req, notify);
    }
    if baton_abi::translation::is_translation_event(event) {
        return translation::install(
            k, &s.domains, task, owner, &symbol, builtin, &req, event, notify,
        );
    }
    if let Some(w) = strand::which(event) {
        // The `Strand` events keep their own handlers (`strand.rs`).
        let p = strand::Proc {
            builtin,
            sig: symbol.sig,
            target: symbol.target,
            owner,
            symbol: &symbol,
        };
        return strand::install(k, &s.domains, w, &req, &p, notify);
    }
    let id = match event {
        EVENT_SYSCALL => {
            let (f, closure): (HandlerFn<Kernel, Call, Option<u64>>, u64) = if builtin {
                (builtin::syscall_handler(symbol.target)?, claim)
            } else {
                if symbol.sig != SYSCALL_SIG {
                    return Err(Error::InvalidArgument);
                }
                wasm::closure(k, &s.domains, task, owner, &symbol, wasm::Kind::Syscall)?
                    .pick(wasm::syscall_tier, wasm::syscall_handler)
            };
            s.syscall.install(&req, f, closure, &[])?
        }
        EVENT_TEST => {
            let (f, closure): (HandlerFn<Kernel, u64, u64>, u64) = if builtin {
                (
                    builtin::test_handler(symbol.target)?,
                    builtin::test_closure(&s.domains, task, owner, symbol.target, claim)?,
                )
            } else {
                if symbol.sig != TEST_SIG {
                    return Err(Error::InvalidArgument);
                }
                wasm::closure(k, &s.domains, task, owner, &symbol, wasm::Kind::Test)?
                    .pick(wasm::test_tier, wasm::test_handler)
            };
            s.test.install(&req, f, closure, &[])?
        }
        _ => return Err(Error::NotFound),
    };
    let frame = event == EVENT_SYSCALL
        && builtin
        && (cthreads::syscall_handler(symbol.target).is_some()
            || translation::syscall_copies(symbol.target));
    let m = Meta {
        event,
        id,
        task,
        domain: owner,
        notify,
        frame,
    };
    if s.meta.push(m).is_err() {
        let _ = match event {
            EVENT_SYSCALL => s.syscall.remove(id, None),
            _ => s.test.remove(id, None),
        };
        return Err(Error::NoMemory);
    }
    Ok(u64::from(id.0))
}

/// `who` lets go of `domain`; what went with it goes (its handlers, its module).
fn release(s: &mut State, who: Holder, domain: DomainId) -> Result<(), Error> {
    let mut gone = Vec::new();
    s.domains.release(who, domain, &mut gone)?;
    for d in gone {
        forget_domain(s, d);
    }
    Ok(())
}

fn forget_domain(s: &mut State, d: DomainId) {
    while let Some(m) = s.meta.take(|m| m.domain == d) {
        let _ = match m.event {
            EVENT_SYSCALL => s.syscall.remove(m.id, None),
            _ => s.test.remove(m.id, None),
        };
    }
    purge_pending(s);
    translation::forget_domain(d);
    s.names.forget(d);
    strand::forget_domain(d);
    reclaim::forget_domain(d);
    // Last: the handlers the tier runs point into the module (`wasm::Fast`).
    wasm::forget(d);
}

/// Task `id` has ended: its handlers go, and so do its domains (the ones only it held).
pub fn task_released(_k: &mut Kernel, id: TaskId) {
    translation::task_released(_k, id);
    // SAFETY: the lock is held (the hook runs under it); the reference is the only one.
    let Some(s) = (unsafe { existing() }) else {
        return;
    };
    s.syscall.remove_where(|i| i.task == id);
    s.test.remove_where(|i| i.task == id);
    purge_pending(s);
    s.async_counts.retain(|c| c.0 != id);
    strand::task_released(id);
    reclaim::task_released(id);
    cthreads::task_released(id);
    s.meta.remove_all(|m| m.task == id);
    loop {
        let Some(d) = s.domains.held_by(id).next() else {
            break;
        };
        if release(s, Holder::Task(id), d).is_err() {
            break;
        }
    }
}
