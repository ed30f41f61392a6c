//! SPIN's `Strand` events (Bershad et al., section 4.2 and the scheduling interfaces of
//! section 4.4) on Sting's virtual processors: `Strand.Block`, `Strand.Unblock`,
//! `Strand.Checkpoint` and `Strand.Resume` are raised by the virtual-processor family
//! (`vproc.rs`) at the points where it gives the runtime an upcall (or, for Resume, where
//! it resumes a saved user-level thread), and the upcall (or the resume) is each event's
//! default implementation. An installed handler answers `STRAND_PROCEED` (the default
//! goes ahead) or `STRAND_VETO` (it does not: see `baton_abi::spin` for what a veto means
//! for each event); results combine so that any veto wins.
//!
//! Handlers are keyed by task: the owner gives every handler its installer's task as its
//! key, and a raise's key is the virtual processor's task, so a handler sees its
//! installer's virtual processors only (one handler stays a direct call after one compare).
//! The global scheduler is not an event: it stays preemptive and priority-based, and a
//! handler decides only what happens inside its own task's virtual processors.
//!
//! Handlers are built-in extensions (the `builtin.strand` interface: `count`, `veto`), Rust
//! that forbids `unsafe` and is trusted to terminate as SPIN trusted its compiler, or
//! WebAssembly procedures `(vp, thread: i64) -> i64` run under the extensions' fuel: one
//! that runs out of fuel or traps is aborted, the event falls back to its default (the
//! upcall), and the handler is removed with its installer told (`NOTIFY_ABORTED`), so a
//! misbehaving handler costs its own task at most one fuel budget per event.
//!
//! # State and locking
//! [`STATE`], reached only under the big kernel lock; a raise borrows it while its
//! handlers run, and handlers never touch it. [`INSTALLED`] counts handlers on all four
//! events, so that a raise with none costs one load.
//!
//! # Invariants
//! - Every installed handler has one [`Meta`] record; every task with a handler has one
//!   [`Tally`] (made at installation, fallibly), and both go when the task ends.
//! - A raise allocates nothing.

use crate::kernel::{Kernel, TaskId};
use crate::locked::Locked;
use crate::thread::ThreadId;
use alloc::vec::Vec;
use baton_abi::exception::{UserRegs, USER_REGS_WORDS};
use baton_abi::layout::USER_END;
use baton_abi::spin::{
    EVENT_STRAND_BLOCK, EVENT_STRAND_CHECKPOINT, EVENT_STRAND_RESUME, EVENT_STRAND_UNBLOCK, FUEL,
    STRAND_PROCEED, STRAND_VETO,
};
use baton_abi::Error;
use core::sync::atomic::{AtomicUsize, Ordering};
use kern::spin::domain::{DomainId, Domains, NameServer};
use kern::spin::domain::{Sig, Symbol};
use kern::spin::event::{
    Binding, Decision, Event, HandlerFn, HandlerId, Installer, Owner, Request,
};

/// Which `Strand` event: an index into the family's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Block = 0,
    Unblock = 1,
    Checkpoint = 2,
    Resume = 3,
}

const NAMES: [&str; 4] = [
    "Strand.Block",
    "Strand.Unblock",
    "Strand.Checkpoint",
    "Strand.Resume",
];

/// A `Strand` event's arguments: which virtual processor of which task, and the kernel
/// thread that carries (or carried) the user-level thread.
#[derive(Clone, Copy, Debug)]
pub struct Strand {
    pub task: TaskId,
    pub vp: u64,
    /// Given to handlers as SPIN's events give the strand; no built-in handler reads it.
    #[allow(dead_code)]
    pub thread: u64,
}

/// A `Strand` event: `(strand) -> STRAND_PROCEED | STRAND_VETO`.
pub type StrandEvent = Event<Kernel, Strand, u64>;

/// The type a `Strand` handler has in an extension image: `(vp, thread: i64) -> i64`.
pub const STRAND_SIG: Sig = Sig {
    params: 2,
    results: 1,
    wide: 0b111,
};

struct Meta {
    which: Which,
    id: HandlerId,
    task: TaskId,
    domain: DomainId,
    /// Where the installer is told if the handler is aborted.
    notify: Option<kern::ipc::PortId>,
}

/// How often a task's handlers ran on each event, and how often the raise was vetoed.
struct Tally {
    task: TaskId,
    ran: [u32; 4],
    vetoed: [u32; 4],
}

struct State {
    events: [StrandEvent; 4],
    meta: Vec<Meta>,
    tallies: Vec<Tally>,
}

static STATE: Locked<State> = Locked::new();

/// Handlers installed on the four events together.
static INSTALLED: AtomicUsize = AtomicUsize::new(0);

/// The state, made on first use.
///
/// # Safety
/// The caller holds the big kernel lock and keeps no other reference from an earlier call
/// alive while it uses this one.
unsafe fn state() -> Result<&'static mut State, Error> {
    // SAFETY: under the lock, by the caller's contract, this is the only reference.
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

/// The owner of the `Strand` events: anyone may install, keyed to its own task, with the
/// extensions' fuel as the bound.
fn authorize(r: &Request) -> Decision<Strand> {
    Decision::Allow {
        guard: None,
        key: Some(r.installer.task),
        budget: FUEL,
    }
}

fn key_of(s: &Strand) -> u64 {
    s.task
}

/// The default implementation: the upcall (or the resume) goes ahead.
fn proceed(_: &mut Kernel, _: &Strand) -> u64 {
    STRAND_PROCEED
}

fn no_primary(_: &Installer) -> bool {
    false
}

/// Any veto wins; otherwise the last handler that chose a thread (`Strand.Checkpoint`)
/// has its choice.
fn any_veto(a: u64, b: u64) -> u64 {
    if a == STRAND_VETO || b == STRAND_VETO {
        STRAND_VETO
    } else if b != STRAND_PROCEED {
        b
    } else {
        a
    }
}

impl State {
    fn new() -> Result<State, Error> {
        let make = |name: &'static str| {
            Event::keyed(
                name,
                Owner {
                    authorize,
                    may_remove_primary: no_primary,
                },
                proceed,
                Some(any_veto),
                false,
                kern::spin::event::MAX_HANDLERS,
                Some(key_of),
            )
        };
        let events = [
            make(NAMES[0])?,
            make(NAMES[1])?,
            make(NAMES[2])?,
            make(NAMES[3])?,
        ];
        let mut meta = Vec::new();
        meta.try_reserve_exact(4 * kern::spin::event::MAX_HANDLERS)
            .map_err(|_| Error::NoMemory)?;
        Ok(State {
            events,
            meta,
            tallies: Vec::new(),
        })
    }
}

/// The event number's `Strand` event, if it is one.
pub fn which(event: u64) -> Option<Which> {
    Some(match event {
        EVENT_STRAND_BLOCK => Which::Block,
        EVENT_STRAND_UNBLOCK => Which::Unblock,
        EVENT_STRAND_CHECKPOINT => Which::Checkpoint,
        EVENT_STRAND_RESUME => Which::Resume,
        _ => return None,
    })
}

/// Raises `which` for `s`: whether the default (the upcall, the resume) goes ahead. One
/// load when no handler is installed anywhere.
#[inline]
pub fn raise(k: &mut Kernel, which: Which, s: &Strand) -> bool {
    if INSTALLED.load(Ordering::Relaxed) == 0 {
        return true;
    }
    raise_slow(k, which, s)
}

#[inline(never)]
fn raise_slow(k: &mut Kernel, which: Which, s: &Strand) -> bool {
    raise_answer(k, which, s) != STRAND_VETO
}

/// `Strand.Checkpoint` for `s`, whose carrier `t` was preempted at `regs`: whether the
/// Checkpoint upcall goes ahead. A handler that chose a thread (an answer neither
/// `STRAND_PROCEED` nor `STRAND_VETO`: the address of a saved register record) has it
/// run now in place of the upcall ([`run_chosen`]); a choice that cannot be taken lets
/// the upcall go ahead. One load when no handler is installed anywhere.
#[inline]
pub fn checkpoint(k: &mut Kernel, s: &Strand, t: ThreadId, regs: &UserRegs) -> bool {
    if INSTALLED.load(Ordering::Relaxed) == 0 {
        return true;
    }
    match raise_answer(k, Which::Checkpoint, s) {
        STRAND_PROCEED => true,
        STRAND_VETO => false,
        at => run_chosen(k, s.task, t, at, regs).is_err(),
    }
}

/// A `Strand.Checkpoint` handler chose the thread whose registers are saved at `at` in
/// `task`'s memory: they are swapped with `regs`, the preempted thread's (the record then
/// holds the preempted thread, for a later choice or the runtime), and the carrier `t`
/// resumes the chosen thread. Checked as `vp_resume` checks a record (`rip` and `rsp` in
/// user space, only the user flags taken); nothing changes on an error. The vector
/// registers are the carrier's and are not swapped (as with `vp_resume`).
fn run_chosen(
    k: &mut Kernel,
    task: TaskId,
    t: ThreadId,
    at: u64,
    regs: &UserRegs,
) -> Result<(), Error> {
    let mut raw = [0u8; USER_REGS_WORDS * 8];
    k.copy_in(task, at, &mut raw)?;
    let mut words = [0u64; USER_REGS_WORDS];
    for (w, chunk) in words.iter_mut().zip(raw.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    let chosen = UserRegs::from_words(&words);
    if chosen.rip >= USER_END || chosen.rsp >= USER_END {
        return Err(Error::BadAddress);
    }
    for (chunk, w) in raw.chunks_exact_mut(8).zip(regs.to_words()) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    k.copy_out(task, at, &raw)?;
    crate::exception::set_regs(k, t, &chosen)
}

/// Raises `which` for `s`: the handlers' combined answer (`STRAND_PROCEED` with none).
fn raise_answer(k: &mut Kernel, which: Which, s: &Strand) -> u64 {
    // SAFETY: the lock is held (we have `k`); the reference is the only one, and handlers
    // do not reach the state.
    let Some(st) = (unsafe { existing() }) else {
        return STRAND_PROCEED;
    };
    let Some(ev) = st.events.get_mut(which as usize) else {
        return STRAND_PROCEED;
    };
    let meta = &mut st.meta;
    let r = super::raise_with_abort(k, ev, s, |id, removed| {
        if removed {
            INSTALLED.fetch_sub(1, Ordering::Relaxed);
        }
        let at = meta.iter().position(|m| m.which == which && m.id == id)?;
        let m = meta.swap_remove(at);
        Some(super::Forgotten {
            task: m.task,
            notify: m.notify,
        })
    });
    let veto = r.result == STRAND_VETO;
    // What a handler of another event than Checkpoint answers besides a veto proceeds.
    let answer = match which {
        Which::Checkpoint => r.result,
        _ if veto => STRAND_VETO,
        _ => STRAND_PROCEED,
    };
    if r.ran != 0 {
        if let Some(t) = st.tallies.iter_mut().find(|t| t.task == s.task) {
            if let (Some(ran), Some(v)) = (
                t.ran.get_mut(which as usize),
                t.vetoed.get_mut(which as usize),
            ) {
                *ran = ran.saturating_add(r.ran);
                *v = v.saturating_add(u32::from(veto));
            }
        }
    }
    answer
}

/// What is installed: a built-in symbol (`target`, from a kernel domain) or a symbol of a
/// WebAssembly module (`owner`'s), of signature `sig`.
pub struct Proc<'a> {
    pub builtin: bool,
    pub sig: Sig,
    pub target: u64,
    pub owner: DomainId,
    pub symbol: &'a Symbol,
}

/// Installs `p` on `which` for `req`'s task; an abort is reported to `notify`.
pub fn install(
    k: &mut Kernel,
    domains: &Domains,
    which: Which,
    req: &Request,
    p: &Proc<'_>,
    notify: Option<kern::ipc::PortId>,
) -> Result<u64, Error> {
    if p.sig != STRAND_SIG {
        return Err(Error::InvalidArgument);
    }
    let (f, closure): (HandlerFn<Kernel, Strand, u64>, u64) = if p.builtin {
        (handler(p.target)?, req.claim)
    } else {
        super::wasm::closure(
            k,
            domains,
            req.installer.task,
            p.owner,
            p.symbol,
            super::wasm::Kind::Strand,
        )?
        .pick(super::wasm::strand_tier, super::wasm::strand_handler)
    };
    let domain = p.owner;
    // SAFETY: the lock is held (the caller is a system call); the only reference.
    let st = unsafe { state() }?;
    let task = req.installer.task;
    if !st.tallies.iter().any(|t| t.task == task) {
        st.tallies.try_reserve(1).map_err(|_| Error::NoMemory)?;
        st.tallies.push(Tally {
            task,
            ran: [0; 4],
            vetoed: [0; 4],
        });
    }
    st.meta.try_reserve(1).map_err(|_| Error::NoMemory)?;
    let ev = st.events.get_mut(which as usize).ok_or(Error::NotFound)?;
    let id = ev.install(req, f, closure, &[])?;
    st.meta.push(Meta {
        which,
        id,
        task,
        domain,
        notify,
    });
    INSTALLED.fetch_add(1, Ordering::Relaxed);
    Ok(u64::from(id.0))
}

/// `spin_remove` of handler `id` of `which` by `task`.
pub fn remove(task: TaskId, which: Which, id: HandlerId) -> Result<(), Error> {
    // SAFETY: the lock is held; the only reference.
    let st = unsafe { existing() }.ok_or(Error::NotFound)?;
    let who = Installer {
        task,
        domain: 0,
        builtin: false,
    };
    st.events
        .get_mut(which as usize)
        .ok_or(Error::NotFound)?
        .remove(id, Some(&who))?;
    st.meta.retain(|m| !(m.which == which && m.id == id));
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
        if let Some(ev) = st.events.get_mut(m.which as usize) {
            if ev.remove(m.id, None).is_ok() {
                INSTALLED.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// Task `id` has ended: its handlers and tally go.
pub fn task_released(id: TaskId) {
    // SAFETY: the lock is held (the hook runs under it); the only reference.
    let Some(st) = (unsafe { existing() }) else {
        return;
    };
    for ev in st.events.iter_mut() {
        let n = ev.remove_where(|i| i.task == id);
        INSTALLED.fetch_sub(n, Ordering::Relaxed);
    }
    st.meta.retain(|m| m.task != id);
    st.tallies.retain(|t| t.task != id);
}

/// `strand_count(event)`: the calling task's tally for `event`.
pub fn count(_k: &mut Kernel, task: TaskId, event: u64) -> Result<u64, Error> {
    let w = which(event).ok_or(Error::NotFound)? as usize;
    // SAFETY: the lock is held (we have `k`); the only reference.
    let Some(st) = (unsafe { existing() }) else {
        return Ok(0);
    };
    Ok(st.tallies.iter().find(|t| t.task == task).map_or(0, |t| {
        u64::from(t.ran.get(w).copied().unwrap_or(0))
            | u64::from(t.vetoed.get(w).copied().unwrap_or(0)) << 32
    }))
}

/// The built-in handlers' own code: it sees the event's arguments and its closure word,
/// nothing of the kernel.
mod ext {
    #![forbid(unsafe_code)]
    use super::Strand;
    use baton_abi::spin::{STRAND_PROCEED, STRAND_VETO};

    /// Lets the event go on (the dispatcher counts its runs).
    pub fn count(_closure: u64, _s: &Strand) -> u64 {
        STRAND_PROCEED
    }

    /// On `Strand.Checkpoint`, chooses the thread whose registers are saved at `closure`
    /// (the record's address the installer gave as its claim); the kernel swaps it with the
    /// preempted one. Proceeds with no record (0), and on the other events (an answer
    /// other than a veto proceeds there).
    pub fn run(closure: u64, _s: &Strand) -> u64 {
        if closure == STRAND_VETO {
            STRAND_PROCEED
        } else {
            closure
        }
    }

    /// Vetoes the event: for every virtual processor of the task (closure 0), or for
    /// virtual processor `closure - 1` only.
    pub fn veto(closure: u64, s: &Strand) -> u64 {
        if closure == 0 || closure == s.vp.wrapping_add(1) {
            STRAND_VETO
        } else {
            STRAND_PROCEED
        }
    }
}

fn h_count(_k: &mut Kernel, b: Binding, s: &Strand) -> Option<u64> {
    Some(ext::count(b.closure, s))
}

fn h_veto(_k: &mut Kernel, b: Binding, s: &Strand) -> Option<u64> {
    Some(ext::veto(b.closure, s))
}

fn h_run(_k: &mut Kernel, b: Binding, s: &Strand) -> Option<u64> {
    Some(ext::run(b.closure, s))
}

const T_COUNT: u64 = 0x300;
const T_VETO: u64 = 0x301;
const T_RUN: u64 = 0x302;

fn handler(target: u64) -> Result<HandlerFn<Kernel, Strand, u64>, Error> {
    Ok(match target {
        T_COUNT => h_count,
        T_VETO => h_veto,
        T_RUN => h_run,
        _ => return Err(Error::InvalidArgument),
    })
}

/// Makes the `builtin.strand` domain (symbols `count`, `veto`, `run`) and exports it to the name
/// server for any task to import.
pub fn register(domains: &mut Domains, names: &mut NameServer) -> Result<(), Error> {
    super::export_kernel_interface(
        domains,
        names,
        "builtin.strand",
        &[
            ("count", STRAND_SIG, T_COUNT),
            ("veto", STRAND_SIG, T_VETO),
            ("run", STRAND_SIG, T_RUN),
        ],
        |_, _| true,
    )
    .map(|_| ())
}
