//! SPIN's `PhysAddr.Reclaim` in the kernel (Bershad et al., section 4.1;
//! `docs/extensions.md`, "PhysAddr.Reclaim"): page replacement (`crate::vm::replace`),
//! about to take a page of a task that installed a handler, raises the event with the
//! page's address in that task's address space; a handler answers with the address of
//! another of the task's pages to take instead, or the candidate's own to let it go. The
//! virtual-memory family judges the answer (`kern::spin::reclaim::judge`: the installer's
//! own page, resident, not wired, not chosen already) and reports the verdict back, which
//! this family counts for the installer (`spin_reclaim`).
//!
//! Handlers are keyed by task (each sees only its installer's pages), run in the kernel
//! in whatever thread's fault made replacement run, and may look but not touch: while the
//! event is raised the memory interfaces that change a map or allocate
//! (`Translation.Protect`, `AddMapping`, `RemoveMapping`, `VirtAddr.*`, `PhysAddr.*`)
//! answer `Denied` (`super::translation::set_read_only`), since replacement holds a batch
//! of pages chosen from the maps as they are. Built-in handlers (`builtin.physaddr`: `mru`,
//! `table`) are trusted to terminate; a WebAssembly one, `(candidate: i64) -> i64`, runs
//! under the extensions' fuel, and one that runs out or traps is aborted, removed and its
//! installer told (`NOTIFY_ABORTED`), and the clock's choice stands.
//!
//! # State and locking
//! [`STATE`], reached only under the big kernel lock; a raise borrows it while its
//! handlers run, and handlers never touch it. [`INSTALLED`] counts handlers, so that
//! replacement with none asks nothing.
//!
//! # Invariants
//! - Every installed handler has one [`Meta`] record; every task with a handler has one
//!   [`Tally`] (made at installation, fallibly); both go with the task.
//! - A raise allocates nothing.

use crate::arch::paging::KernelMem;
use crate::kernel::{Kernel, TaskId};
use crate::locked::Locked;
use alloc::vec::Vec;
use baton_abi::spin::FUEL;
use baton_abi::translation::{RECLAIM_ASKED, RECLAIM_IGNORED, RECLAIM_TAKEN};
use baton_abi::Error;
use core::sync::atomic::{AtomicUsize, Ordering};
use kern::ipc::PortId;
use kern::spin::domain::{DomainId, Domains, NameServer, Sig, Symbol};
use kern::spin::event::{
    Binding, Decision, Event, HandlerFn, HandlerId, Installer, Owner, Request,
};
use kern::spin::reclaim::Ignored;

/// `PhysAddr.Reclaim`'s argument: the candidate page, by its address in its task's map.
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    pub task: TaskId,
    pub va: u64,
}

/// `PhysAddr.Reclaim(candidate) -> nominee` (`None`: no other page named).
pub type ReclaimEvent = Event<Kernel, Candidate, Option<u64>>;

/// The type of a `Reclaim` handler in an extension image: `(candidate: i64) -> i64`.
pub const RECLAIM_SIG: Sig = Sig {
    params: 1,
    results: 1,
    wide: 0b11,
};

struct Meta {
    id: HandlerId,
    task: TaskId,
    domain: DomainId,
    notify: Option<PortId>,
}

/// What a task's handlers did: asked, nominations taken, nominations ignored.
struct Tally {
    task: TaskId,
    counts: [u64; 3],
}

struct State {
    event: ReclaimEvent,
    meta: Vec<Meta>,
    tallies: Vec<Tally>,
}

static STATE: Locked<State> = Locked::new();

/// Handlers installed.
static INSTALLED: AtomicUsize = AtomicUsize::new(0);

/// The state, made on first use.
///
/// # Safety
/// The caller holds the big kernel lock and keeps no other reference from an earlier call
/// alive while it uses this one.
unsafe fn state() -> Result<&'static mut State, Error> {
    // SAFETY: under the lock, by the caller's contract, the only reference.
    unsafe { STATE.get_or_try_make(State::new) }
}

/// The state if it exists.
///
/// # Safety
/// As [`state`].
unsafe fn existing() -> Option<&'static mut State> {
    // SAFETY: as `state`.
    unsafe { STATE.get() }
}

/// The owner: anyone may install, keyed to its own task (a handler is asked about its
/// installer's pages only), bounded by the extensions' fuel.
fn authorize(r: &Request) -> Decision<Candidate> {
    Decision::Allow {
        guard: None,
        key: Some(r.installer.task),
        budget: FUEL,
    }
}

fn key_of(c: &Candidate) -> u64 {
    c.task
}

/// The default: no other page (the clock's choice stands).
fn keep(_: &mut Kernel, _: &Candidate) -> Option<u64> {
    None
}

fn no_primary(_: &Installer) -> bool {
    false
}

/// The first handler (in rank order) that names another page decides.
fn first(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.or(b)
}

impl State {
    fn new() -> Result<State, Error> {
        let event = Event::keyed(
            "PhysAddr.Reclaim",
            Owner {
                authorize,
                may_remove_primary: no_primary,
            },
            keep,
            Some(first),
            false,
            kern::spin::event::MAX_HANDLERS,
            Some(key_of),
        )?;
        let mut meta = Vec::new();
        meta.try_reserve_exact(kern::spin::event::MAX_HANDLERS)
            .map_err(|_| Error::NoMemory)?;
        Ok(State {
            event,
            meta,
            tallies: Vec::new(),
        })
    }
}

/// Registers the event with page replacement (at boot).
pub fn init() {
    crate::vm::replace::set_nominator(crate::vm::replace::Nominator {
        any,
        asks,
        nominate,
        judged,
    });
}

/// Whether any handler is installed.
fn any() -> bool {
    INSTALLED.load(Ordering::Relaxed) != 0
}

/// Whether `task` has a handler (replacement asks about its pages).
fn asks(task: TaskId) -> bool {
    // SAFETY: the lock is held (replacement runs under it); the reference ends here.
    unsafe { existing() }.is_some_and(|st| st.meta.iter().any(|m| m.task == task))
}

/// Raises the event for `task`'s page at `va`: the page to take instead (`va` itself when
/// no handler named another).
fn nominate(k: &mut Kernel, task: TaskId, va: u64) -> u64 {
    // SAFETY: the lock is held; handlers do not reach the state, and the borrow ends
    // before `aborted` takes its own.
    let Some(st) = (unsafe { existing() }) else {
        return va;
    };
    super::translation::set_read_only(true);
    let meta = &mut st.meta;
    let r = super::raise_with_abort(k, &mut st.event, &Candidate { task, va }, |id, removed| {
        if removed {
            INSTALLED.fetch_sub(1, Ordering::Relaxed);
        }
        let at = meta.iter().position(|m| m.id == id)?;
        let m = meta.swap_remove(at);
        Some(super::Forgotten {
            task: m.task,
            notify: m.notify,
        })
    });
    super::translation::set_read_only(false);
    if r.ran != 0 {
        count(task, RECLAIM_ASKED);
    }
    r.result.unwrap_or(va)
}

/// Replacement's verdict on `task`'s answer, counted.
fn judged(task: TaskId, verdict: Result<bool, Ignored>) {
    match verdict {
        Ok(true) => count(task, RECLAIM_TAKEN),
        Ok(false) => {}
        // Counted, not printed: a handler may be asked about every page of a batch.
        Err(_) => count(task, RECLAIM_IGNORED),
    }
}

fn count(task: TaskId, which: u64) {
    // SAFETY: the lock is held; the reference ends here.
    let Some(st) = (unsafe { existing() }) else {
        return;
    };
    if let Some(c) = st
        .tallies
        .iter_mut()
        .find(|t| t.task == task)
        .and_then(|t| t.counts.get_mut(which as usize))
    {
        *c = c.saturating_add(1);
    }
}

/// Installs `symbol` (of domain `owner`) on `PhysAddr.Reclaim` for `req`'s task: a
/// built-in handler (`builtin`, its closure the claim) or a WebAssembly one.
pub fn install(
    k: &mut Kernel,
    domains: &Domains,
    owner: DomainId,
    symbol: &Symbol,
    builtin: bool,
    req: &Request,
    notify: Option<PortId>,
) -> Result<u64, Error> {
    if symbol.sig != RECLAIM_SIG {
        return Err(Error::InvalidArgument);
    }
    let task = req.installer.task;
    let (f, closure): (HandlerFn<Kernel, Candidate, Option<u64>>, u64) = if builtin {
        (handler(symbol.target)?, req.claim)
    } else {
        super::wasm::closure(k, domains, task, owner, symbol, super::wasm::Kind::Reclaim)?
            .pick(super::wasm::reclaim_tier, super::wasm::reclaim_handler)
    };
    // SAFETY: the lock is held (a system call); the only reference.
    let st = unsafe { state() }?;
    if !st.tallies.iter().any(|t| t.task == task) {
        st.tallies.try_reserve(1).map_err(|_| Error::NoMemory)?;
        st.tallies.push(Tally {
            task,
            counts: [0; 3],
        });
    }
    if st.meta.len() >= st.meta.capacity() {
        return Err(Error::NoSpace);
    }
    let id = st.event.install(req, f, closure, &[])?;
    st.meta.push(Meta {
        id,
        task,
        domain: owner,
        notify,
    });
    INSTALLED.fetch_add(1, Ordering::Relaxed);
    Ok(u64::from(id.0))
}

/// `spin_remove` of handler `id` by `task`.
pub fn remove(task: TaskId, id: HandlerId) -> Result<(), Error> {
    // SAFETY: the lock is held; the only reference.
    let st = unsafe { existing() }.ok_or(Error::NotFound)?;
    let who = Installer {
        task,
        domain: 0,
        builtin: false,
    };
    st.event.remove(id, Some(&who))?;
    st.meta.retain(|m| m.id != id);
    INSTALLED.fetch_sub(1, Ordering::Relaxed);
    Ok(())
}

/// Domain `d` is gone: its handlers go.
pub fn forget_domain(d: DomainId) {
    // SAFETY: the lock is held (the caller's); the only reference.
    let Some(st) = (unsafe { existing() }) else {
        return;
    };
    while let Some(at) = st.meta.iter().position(|m| m.domain == d) {
        let m = st.meta.swap_remove(at);
        if st.event.remove(m.id, None).is_ok() {
            INSTALLED.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Task `id` has ended: its handlers and tally go.
pub fn task_released(id: TaskId) {
    // SAFETY: the lock is held (the hook runs under it); the only reference.
    let Some(st) = (unsafe { existing() }) else {
        return;
    };
    let n = st.event.remove_where(|i| i.task == id);
    INSTALLED.fetch_sub(n, Ordering::Relaxed);
    st.meta.retain(|m| m.task != id);
    st.tallies.retain(|t| t.task != id);
}

/// `spin_reclaim(which)`: the calling task's count `which` (`RECLAIM_*`).
pub fn sys(task: TaskId, which: u64) -> Result<u64, Error> {
    if which > RECLAIM_IGNORED {
        return Err(Error::InvalidArgument);
    }
    // SAFETY: the lock is held (a system call); the only reference.
    let Some(st) = (unsafe { existing() }) else {
        return Ok(0);
    };
    Ok(st
        .tallies
        .iter()
        .find(|t| t.task == task)
        .and_then(|t| t.counts.get(which as usize).copied())
        .unwrap_or(0))
}

// ---- the built-in extension `builtin.physaddr` --------------------------------------------

/// What a built-in `Reclaim` handler may use: its installer's memory, read only and only
/// where it is resident (nothing is faulted in while replacement runs), and the page state.
pub struct Peek<'a> {
    k: &'a mut Kernel,
    task: TaskId,
}

impl Peek<'_> {
    /// The word at `addr` of the installer's memory, if it is resident there.
    pub fn read_word(&mut self, addr: u64) -> Result<u64, Error> {
        let t = self.k.tasks.get(&self.task).ok_or(Error::NotFound)?;
        let mem = KernelMem {
            frames: &mut self.k.frames,
        };
        let mut b = [0u8; 8];
        kern::usercopy::copy_from_user(&t.space, &mem, addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// `Translation.ExamineMapping`: the page's state word (`STATE_CHOSEN` for a page of
    /// the batch being decided).
    pub fn query(&mut self, va: u64) -> Result<u64, Error> {
        super::translation::op_query(self.k, self.task, va)
    }
}

/// The built-in handlers' own code.
mod ext {
    #![forbid(unsafe_code)]
    use super::Peek;
    use baton_abi::translation::{STATE_CHOSEN, STATE_RESIDENT};

    const PAGE: u64 = 4096;
    /// How far back from the page written last `mru` looks, in pages (4 MiB): the whole
    /// scanned region up to that bound. Not only the last batch's worth: a fault that
    /// waits for page-outs is taken again, and each retry may run replacement again, so
    /// several batches can go while the scan stands still, taking every recent page, and
    /// the most recently used page still resident is then further back. Bounded because
    /// the region's length is the installer's word and a built-in handler runs under the
    /// kernel's lock.
    pub const RECENT: u64 = 1024;

    /// Most-recently-used replacement for a scanned region, and a protected range: the
    /// closure is the address, in the installer's memory, of five words `[hot, hot_len,
    /// scan, scan_len, pos]`. A candidate in `[hot, hot + hot_len)` is exchanged for the
    /// page of the scan region the application wrote last (index `pos`), or the one
    /// before it, and so on ([`RECENT`] at most): the first that is resident and not in
    /// the batch already (a sequential scan will not need it again until it comes round);
    /// any other candidate goes.
    pub fn mru(io: &mut Peek<'_>, closure: u64, candidate: u64) -> u64 {
        let word = |io: &mut Peek<'_>, i: u64| io.read_word(closure.wrapping_add(8 * i));
        let (Ok(hot), Ok(hot_len)) = (word(io, 0), word(io, 1)) else {
            return candidate;
        };
        if candidate.wrapping_sub(hot) >= hot_len {
            return candidate;
        }
        let (Ok(scan), Ok(scan_len), Ok(pos)) = (word(io, 2), word(io, 3), word(io, 4)) else {
            return candidate;
        };
        let pages = scan_len / PAGE;
        if pages == 0 {
            return candidate;
        }
        for back in 0..RECENT.min(pages) {
            let page = scan.wrapping_add(((pos % pages + pages - back) % pages) * PAGE);
            match io.query(page) {
                Ok(s) if s & STATE_RESIDENT != 0 && s & STATE_CHOSEN == 0 => return page,
                _ => {}
            }
        }
        candidate
    }

    /// Nominates from a table at the closure, in the installer's memory: a count `n` (at
    /// most 16), then `n` addresses; the one at the candidate's page number modulo `n`
    /// (for tests of what the kernel ignores). The candidate itself when the table
    /// cannot be read.
    pub fn table(io: &mut Peek<'_>, closure: u64, candidate: u64) -> u64 {
        let Ok(n) = io.read_word(closure) else {
            return candidate;
        };
        if n == 0 || n > 16 {
            return candidate;
        }
        let i = (candidate / PAGE) % n;
        io.read_word(closure.wrapping_add(8 + 8 * i))
            .unwrap_or(candidate)
    }
}

const T_MRU: u64 = 0x400;
const T_TABLE: u64 = 0x401;

fn answer(candidate: u64, nominee: u64) -> Option<Option<u64>> {
    Some((nominee != candidate).then_some(nominee))
}

fn h_mru(k: &mut Kernel, b: Binding, c: &Candidate) -> Option<Option<u64>> {
    let n = ext::mru(&mut Peek { k, task: c.task }, b.closure, c.va);
    answer(c.va, n)
}

fn h_table(k: &mut Kernel, b: Binding, c: &Candidate) -> Option<Option<u64>> {
    let n = ext::table(&mut Peek { k, task: c.task }, b.closure, c.va);
    answer(c.va, n)
}

fn handler(target: u64) -> Result<HandlerFn<Kernel, Candidate, Option<u64>>, Error> {
    Ok(match target {
        T_MRU => h_mru,
        T_TABLE => h_table,
        _ => return Err(Error::InvalidArgument),
    })
}

/// Makes the `builtin.physaddr` domain (`mru`, `table`) and exports it to the name server
/// for any task to import.
pub fn register(domains: &mut Domains, names: &mut NameServer) -> Result<(), Error> {
    super::export_kernel_interface(
        domains,
        names,
        "builtin.physaddr",
        &[("mru", RECLAIM_SIG, T_MRU), ("table", RECLAIM_SIG, T_TABLE)],
        |_, _| true,
    )
    .map(|_| ())
}
