//! User threads' floating-point and vector state (x87, SSE, AVX): whose registers a CPU
//! holds, switched **eagerly** with the thread, and a save area made at a thread's first
//! use of them.
//!
//! A thread starts without a save area (`Thread::fpu` is `None`) and runs with `CR0.TS`
//! set, so its first floating-point or vector instruction traps (#NM). [`first_use`] then
//! makes its area (charged to the thread's home task; fallible), loads the initial state
//! (zero registers, default MXCSR and x87 control word) and lets the instruction run again.
//! From then on every switch to another thread on the CPU saves the registers into the
//! area and every switch to the thread restores them ([`switch`]), before any user code
//! runs: the registers never hold one thread's values while another runs in user mode
//! (a switch to a thread without an area puts them in their initial state before it sets
//! `CR0.TS`, because `TS` traps only the architectural use: a speculative one before the
//! trap could still read them, the LazyFP leak).
//! Decision: no lazy switching (leaving a thread's registers in the CPU until another
//! thread traps on its first use of them), which is the LazyFP leak (CVE-2018-3665):
//! speculative execution reads the stale registers before the trap. `TS` only tells the
//! kernel that a thread without an area has started using the registers.
//!
//! The state belongs to the *activation*: a migrating call runs the caller's thread in a
//! server, and the call and its return put every floating-point and vector register in
//! its initial state ([`activation_changed`]; all of them are caller-saved in the x86-64
//! calling convention), so a server never sees a client's values nor a client a server's.
//! So one area per thread serves every activation on its stack.
//!
//! The decision (save, restore, `TS`) is `kern::fpu::switch_plan`, tested on the host.
//!
//! # Invariants
//! - `Cpu::fpu_live` is the area of the CPU's running thread when that thread has one, and
//!   null otherwise; `CR0.TS` is clear exactly when it is not null.
//! - A thread's area is freed only with the thread, which is reaped only after the next
//!   [`switch`] on its CPU replaced it as `fpu_live` (threads are reaped once off their CPU).

use crate::arch::fpu::{self as hw, Area};
use crate::kernel::{Cpu, Kernel};
use crate::thread::Thread;
use baton_abi::Error;

/// A thread's save area and what it costs the thread's home task.
pub struct FpuState {
    /// The registers while the thread is not running (while it runs they are in the CPU).
    pub area: Area,
    /// The charge for it, given back when the thread is freed.
    _charge: kern::quota::Charge,
}

/// What a save area costs its task's account: the state and the heap's rounding.
pub const STATE_BYTES: usize = core::mem::size_of::<FpuState>() + 64;

/// Makes `th`'s floating-point state the CPU's (`c`) as `th` becomes its running thread:
/// saves the registers of the thread that ran before into its area, then restores `th`'s
/// (or, when `th` has none, sets `CR0.TS` so that its first use traps). Nothing when the
/// same area stays.
#[inline(always)]
pub fn switch(c: &mut Cpu, th: &mut Thread) {
    let next: *mut Area = match th.fpu.as_deref_mut() {
        Some(s) => &mut s.area,
        None => core::ptr::null_mut(),
    };
    let live = c.fpu_live;
    if live == next {
        return;
    }
    switch_slow(c, live, next);
}

/// [`switch`]'s work, out of line: most switches are between threads without an area.
#[inline(never)]
fn switch_slow(c: &mut Cpu, live: *mut Area, next: *mut Area) {
    let plan = kern::fpu::switch_plan(!live.is_null(), !next.is_null(), false);
    if plan.save {
        // SAFETY: `live` is the area of the thread that ran on this CPU until now (the
        // module's invariant), which is still alive (it is reaped only after this switch);
        // TS is clear because `live` is not null.
        unsafe { hw::save(&mut *live) };
    }
    if plan.scrub {
        // SAFETY: TS is still clear (the plan scrubs only when `live` is not null, and sets
        // it after this); the live registers were saved just above.
        unsafe { hw::load_initial() };
    }
    if plan.set_ts {
        hw::set_ts();
    }
    if plan.clear_ts {
        hw::clear_ts();
    }
    if plan.restore {
        // SAFETY: `next` is the incoming thread's area (not null: the plan restores only
        // then), which holds a saved state or the initial one; TS is clear (it was, or the
        // plan cleared it).
        unsafe { hw::restore(&*next) };
    }
    c.fpu_live = next;
}

/// The running thread of `c` changed activation (a migrating call or return): every
/// floating-point and vector register goes back to its initial state, so the activation
/// entered sees nothing of the one left. Nothing to do when the thread has no area (its
/// registers are unused; `TS` is set).
#[inline(always)]
pub fn activation_changed(c: &Cpu) {
    if !c.fpu_live.is_null() {
        // SAFETY: TS is clear (the module's invariant: `fpu_live` is not null).
        unsafe { hw::load_initial() };
    }
}

/// Before a page fault's call into a pager (`crate::activation::migrate_fault`): a copy of
/// the running thread's registers (`reuse` unchanged when it has no area: nothing to keep), which
/// [`restore_after_fault`] puts back at the return. A fault is not a call: the faulting
/// context must find every register as it was. `Err(NoMemory)` without heap for the copy.
/// `reuse` is the copy an earlier fault's record kept (made once per record, then reused).
pub fn save_for_fault(
    c: &Cpu,
    reuse: Option<alloc::boxed::Box<Area>>,
) -> Result<Option<alloc::boxed::Box<Area>>, Error> {
    if c.fpu_live.is_null() {
        return Ok(reuse);
    }
    let mut copy = match reuse {
        Some(b) => b,
        None => kern::fallible::try_box(Area::initial()).ok_or(Error::NoMemory)?,
    };
    // SAFETY: TS is clear (the module's invariant: `fpu_live` is not null); the live
    // registers are the running thread's.
    unsafe { hw::save(&mut copy) };
    Ok(Some(copy))
}

/// Back from a pager's call (`crate::activation` after [`activation_changed`]): the
/// faulting context's registers, as [`save_for_fault`] kept them, are the live ones again.
pub fn restore_after_fault(c: &Cpu, copy: &Area, kept: bool) {
    if kept && !c.fpu_live.is_null() {
        // SAFETY: TS is clear (`fpu_live` is not null); `copy` holds a state saved on this
        // machine by `save_for_fault`.
        unsafe { hw::restore(copy) };
    }
}

/// An `fxsave` image (the legacy region of the save area: x87, `mxcsr`, XMM) of the
/// floating-point and vector registers of `c`'s running thread, for a virtual processor's
/// runtime that resumes the thread on another kernel thread (`crate::vproc`): the initial
/// state's when the thread never used them. (The AVX upper halves are not in it; user
/// programs are built for SSE2.)
pub fn legacy_image(c: &Cpu) -> [u8; baton_abi::vproc::FP_IMAGE_SIZE] {
    let mut area = Area::initial();
    if !c.fpu_live.is_null() {
        // SAFETY: TS is clear (the module's invariant: `fpu_live` is not null); the live
        // registers are the running thread's. Components in their initial state that the
        // save skips keep the initial image's values, which are theirs.
        unsafe { hw::save(&mut area) };
    }
    let mut out = [0u8; baton_abi::vproc::FP_IMAGE_SIZE];
    if let Some(legacy) = area.0.get(..out.len()) {
        out.copy_from_slice(legacy);
    }
    out
}

/// A thread that is not running leaves an activation (an unwind after its server ended):
/// its saved floating-point state goes back to the initial one, as on a return.
pub fn reset_saved(th: &mut Thread) {
    if let Some(s) = th.fpu.as_deref_mut() {
        s.area.reset();
    }
}

/// The running thread of CPU `cpu` used a floating-point or vector register for the first
/// time (#NM with `CR0.TS` set): makes its save area, charged to its home task, and gives
/// it the registers in their initial state. `Err(NoMemory)` when the task's account or the
/// heap has no room: the trap is then the thread's exception.
pub fn first_use(k: &mut Kernel, cpu: usize) -> Result<(), Error> {
    // SAFETY: the trap came from user mode, so this CPU runs a user thread; no other
    // reference to it is made while `th` is used.
    let th = unsafe { crate::thread::current_mut() };
    let made = th.fpu.is_none();
    if made {
        let account = th
            .home_task()
            .and_then(|id| k.tasks.get(&id))
            .map(|t| t.account.clone())
            .ok_or(Error::NoMemory)?;
        let charge = crate::quota::heap(&account, STATE_BYTES)?;
        let state = kern::fallible::try_box(FpuState {
            area: Area([0; hw::AREA_BYTES]),
            _charge: charge,
        })
        .ok_or(Error::NoMemory)?;
        th.fpu = Some(state);
        k.stats.fpu_first_uses += 1;
        k.stats.fpu_states += 1;
    }
    let Some(c) = k.cpus.get_mut(cpu) else {
        return Err(Error::NoMemory);
    };
    let Some(s) = th.fpu.as_deref_mut() else {
        return Err(Error::NoMemory);
    };
    // The area is written at the next switch away; until then the registers are the
    // thread's, starting from the initial state (or, for a thread that had an area but not
    // the registers, which `switch` never leaves so, from its area).
    c.fpu_live = &mut s.area;
    hw::clear_ts();
    // SAFETY: TS was just cleared; an existing area holds a saved or the initial state.
    unsafe {
        if made {
            hw::load_initial();
        } else {
            hw::restore(&s.area);
        }
    }
    Ok(())
}

/// A thread is freed: its area goes with it (the charge is given back by the drop).
pub fn freed(k: &mut Kernel, th: &Thread) {
    if th.fpu.is_some() {
        k.stats.fpu_states = k.stats.fpu_states.saturating_sub(1);
    }
}
