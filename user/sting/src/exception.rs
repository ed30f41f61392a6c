//! Exceptions as continuations, and signals between threads (the Sting paper's section 7.1
//! and Figure 2).
//!
//! An exception is handled in the execution context of the thread it is meant for, by an
//! ordinary closure: there is no exception stack. A thread installs handlers with
//! [`with_handler`] (or [`catch`], whose handler always unwinds), dynamically scoped: the
//! innermost one that is still running gets the exception, and a fault inside a handler
//! goes to the next one out. The handler sees the [`Fault`] and the thread's registers and
//! chooses an [`Action`]:
//!
//! - [`Action::Resume`]: the thread continues where it stopped, with the registers as the
//!   handler left them (a repaired `rcx`, an `rip` past the faulting instruction);
//! - [`Action::Unwind`]: the [`with_handler`] call returns `Err(fault)`: its frames above
//!   are abandoned without running their destructors, as [`Thread::terminate`]'s are;
//! - [`Action::Terminate`]: the thread is determined as terminated (so is a thread with no
//!   handler at all). The task and the other threads go on.
//!
//! **CPU faults** (`Config::exceptions`, on Baton): a divide error, a breakpoint, an
//! invalid opcode, a bad memory access of a sting thread goes, as any fault does, to the
//! task's exception port as a message (`docs/exceptions.md`). The runtime serves that port
//! with a dispatcher thread of its own: it finds the faulting sting thread by its stack
//! pointer (the TCB below it, checked against the runtime's list of TCBs), pushes the
//! continuation of the handler onto the thread's stack (a copy of its registers, the
//! exception, room for its vector state) and replies with registers that resume the thread
//! at that continuation ([`crate::arch::exception_entry`]). The thread then saves its
//! vector state and runs the dispatcher's second half, in its own context: it looks up the
//! handler, calls it, and resumes, unwinds or ends. A fault elsewhere (the runtime's own
//! stacks, another thread of the task) is answered with the kernel's default: the task
//! ends with a report.
//!
//! **Software exceptions**: [`raise`] delivers a fault to the calling thread's handlers
//! the same way, without the kernel.
//!
//! **Signals** ([`crate::Thread::signal`]): a closure pushed onto another thread, run in
//! that thread's context before it next runs its own code: at its next checkpoint or
//! runtime call that switches (yield, park, a lock, a suspension) if it is running, as the
//! first thing it does when it is resumed if it is ready or blocked, or, with
//! `Config::preempt`, when a Checkpoint upcall next stops it. The signaller then does what
//! the [`Priority`] says (Figure 2, lines 8 to 11): go on (`Continue`), switch to the target
//! at once when the target is ready on the signaller's processor (`Immediate`), or give
//! up its processor, going back to its ready queue (`Reschedule`).
//!
//! # Invariants
//!
//! - A TCB's handler list (`Tcb::handlers`) names frames of live [`with_handler`] calls on
//!   its stack, innermost first; it is empty whenever a thread starts or ends on the TCB.
//! - A TCB's absorption list (`Tcb::absorb`) names the live absorptions on its stack,
//!   innermost first.

use alloc::vec::Vec;
use core::fmt;
use core::ptr;

pub use crate::arch::UserRegs as Regs;
use crate::spin::SpinLock;

/// What a handler decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Continue the thread where it stopped, with the (possibly changed) registers.
    Resume,
    /// Return `Err(fault)` from the [`with_handler`] call whose handler this is.
    Unwind,
    /// End the thread, determined as terminated.
    Terminate,
}

/// The CPU vectors a handler sees most.
pub mod vector {
    /// Divide error (`div` by zero, or a quotient too large).
    pub const DIVIDE: u64 = 0;
    /// Breakpoint (`int3`); `rip` is past the instruction.
    pub const BREAKPOINT: u64 = 3;
    /// Invalid opcode (`ud2`).
    pub const INVALID_OPCODE: u64 = 6;
    /// General protection (a non-canonical address, a privileged instruction).
    pub const GENERAL_PROTECTION: u64 = 13;
    /// Page fault (a bad access; `Fault::addr` says where).
    pub const PAGE_FAULT: u64 = 14;
    /// Not a CPU vector: an exception raised by software ([`super::raise`]).
    pub const SOFTWARE: u64 = 0x1000;
}

/// An exception delivered to a thread.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The CPU vector ([`vector`]), or [`vector::SOFTWARE`].
    pub vector: u64,
    /// The CPU's error code, or the value given to [`raise`].
    pub error: u64,
    /// The faulting address of a page fault, else 0.
    pub addr: u64,
    /// The thread's registers when it stopped (for a software exception, all zero). A
    /// handler that resumes may change them (not `rsp`).
    pub regs: Regs,
}

impl fmt::Debug for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Fault {{ vector: {}, error: {:#x}, addr: {:#x}, rip: {:#x} }}",
            self.vector, self.error, self.addr, self.regs.rip
        )
    }
}

impl Fault {
    /// Whether this is a CPU exception (not one raised by software).
    pub fn from_cpu(&self) -> bool {
        self.vector < 32
    }
}

/// One live [`with_handler`] call: its handler and its catch point.
pub(crate) struct HandlerFrame {
    /// The handler.
    handler: *mut dyn FnMut(&mut Fault) -> Action,
    /// The next frame out.
    prev: *const HandlerFrame,
    /// The stack pointer `catch_call` saved.
    catch_sp: usize,
    /// The TCB's absorption list when the handler was installed.
    absorb: *const AbsorbLink,
    /// The thread that installed it.
    thread: *const crate::rt::Core,
    /// The fault it unwound with.
    fault: Option<Fault>,
}

/// One live absorption on a TCB's stack (`rt::run_absorbed`).
pub(crate) struct AbsorbLink {
    /// The next absorption out.
    pub(crate) prev: *const AbsorbLink,
    /// The thread the TCB ran before this absorption (restored when it ends).
    pub(crate) demander: *const crate::rt::Core,
    /// The absorbed thread.
    pub(crate) absorbed: *const crate::rt::Core,
    /// The area's position when it started.
    pub(crate) mark: crate::area::Mark,
    /// The TCB's handler list when it started (restored when it ends by an exception).
    pub(crate) handlers: *const HandlerFrame,
    /// The catch point it runs under (0: none; `Config::exceptions` gives one).
    pub(crate) catch_sp: usize,
}

/// Whether handler frame `f` was installed while absorption `l` was the innermost one.
pub(crate) fn installed_under(f: *const HandlerFrame, l: *const AbsorbLink) -> bool {
    // SAFETY: the caller passes a live frame of the calling stack.
    unsafe { (*f).absorb == l }
}

/// Runs `body` with `handler` as the calling thread's innermost exception handler.
/// Returns `body`'s value, or `Err(fault)` if the handler unwound.
///
/// The handler runs in the thread's context, on its stack, above the frame that faulted;
/// while it runs, a fault goes to the next handler out.
#[allow(clippy::result_large_err)] // the fault with its registers is the catch's answer
pub fn with_handler<R, H, B>(mut handler: H, body: B) -> Result<R, Fault>
where
    H: FnMut(&mut Fault) -> Action,
    B: FnOnce() -> R,
{
    /// What the body's trampoline reads and writes.
    struct Env<B, R> {
        body: Option<B>,
        out: Option<R>,
    }
    /// Runs the body (called by `catch_call`).
    unsafe extern "C" fn call<B: FnOnce() -> R, R>(env: *mut u8) {
        // SAFETY: `env` is the `Env` below, alive for the whole call.
        let env = unsafe { &mut *env.cast::<Env<B, R>>() };
        if let Some(b) = env.body.take() {
            env.out = Some(b());
        }
    }
    let tcb = crate::rt::tcb_here();
    let h: &mut dyn FnMut(&mut Fault) -> Action = &mut handler;
    let mut frame = HandlerFrame {
        // SAFETY: only the lifetime is erased; the frame leaves the list before `handler`
        // is dropped (both when the body returns and when a fault unwinds to here).
        handler: unsafe {
            core::mem::transmute::<
                *mut (dyn FnMut(&mut Fault) -> Action + '_),
                *mut (dyn FnMut(&mut Fault) -> Action + 'static),
            >(h)
        },
        prev: crate::rt::handlers(tcb),
        catch_sp: 0,
        absorb: crate::rt::absorptions(tcb),
        thread: crate::rt::running_on(tcb),
        fault: None,
    };
    let mut env = Env::<B, R> {
        body: Some(body),
        out: None,
    };
    let fp: *mut HandlerFrame = &mut frame;
    crate::rt::set_handlers(tcb, fp);
    // SAFETY: `catch_sp` lives in this frame, which outlives the call; a `catch_jump` to it
    // comes only from `unwind_to`, on this stack, while the call runs.
    let unwound = unsafe {
        crate::arch::catch_call(
            call::<B, R>,
            (&mut env as *mut Env<B, R>).cast(),
            ptr::addr_of_mut!((*fp).catch_sp),
        )
    };
    // SAFETY: `fp` is our frame; the unwinder may have written it through the list.
    let frame = unsafe { &mut *fp };
    // The TCB is the same (a thread keeps its TCB), whichever processor runs it now.
    crate::rt::set_handlers(tcb, frame.prev);
    if unwound != 0 {
        return Err(frame.fault.take().unwrap_or(Fault {
            vector: vector::SOFTWARE,
            error: 0,
            addr: 0,
            regs: Regs::default(),
        }));
    }
    match env.out.take() {
        Some(v) => Ok(v),
        None => unreachable!("sting: a handler body returned no value"),
    }
}

/// Runs `body`, returning `Err(fault)` if an exception reaches it (its handler always
/// unwinds).
#[allow(clippy::result_large_err)] // as `with_handler`
pub fn catch<R>(body: impl FnOnce() -> R) -> Result<R, Fault> {
    with_handler(|_| Action::Unwind, body)
}

/// Raises a software exception (`vector::SOFTWARE`, `code` in `Fault::error`) in the
/// calling thread: its innermost handler runs now; if it resumes, `raise` returns.
pub fn raise(code: u64) {
    let mut fault = Fault {
        vector: vector::SOFTWARE,
        error: code,
        addr: 0,
        regs: Regs::default(),
    };
    let _ = dispatch(&mut fault);
}

/// The dispatcher's second half, in the target thread's context: finds the innermost
/// handler, runs it (with the handler list popped), and unwinds or ends the thread if it
/// says so. Returns only to resume.
fn dispatch(fault: &mut Fault) -> Action {
    let tcb = crate::rt::tcb_here();
    crate::rt::count_exception();
    let frame = crate::rt::handlers(tcb);
    if frame.is_null() || !crate::rt::handler_is_own(tcb, frame) {
        crate::rt::terminate_here(tcb);
    }
    // SAFETY: a listed frame is a live `with_handler` call below us on this stack.
    let f = unsafe { &mut *frame.cast_mut() };
    crate::rt::set_handlers(tcb, f.prev);
    // SAFETY: the handler outlives its frame's place on the list.
    let action = unsafe { (*f.handler)(fault) };
    crate::rt::set_handlers(tcb, frame);
    match action {
        Action::Resume => Action::Resume,
        Action::Unwind
            if f.thread != crate::rt::running_on(tcb) && crate::rt::absorbed_unlinked(tcb) =>
        {
            crate::rt::unlinked_absorption()
        }
        Action::Unwind => {
            f.fault = Some(*fault);
            // Absorptions since the handler was installed end here, as terminated.
            crate::rt::end_absorptions(tcb, f.absorb);
            let sp = f.catch_sp;
            // SAFETY: stored by the live `catch_call` of that frame, on this stack.
            unsafe { crate::arch::catch_jump(sp) }
        }
        Action::Terminate => crate::rt::terminate_here(tcb),
    }
}

/// Where a thread resumed at the continuation the dispatcher pushed enters Rust
/// (`arch::exception_entry`): `info` is what the dispatcher left on the stack, `fp` the
/// thread's saved vector state.
pub(crate) extern "C" fn in_thread(info: *mut crate::arch::ExcInfo, fp: *mut u8) -> ! {
    // SAFETY: laid by `prepare_exception` on this stack, for this call.
    let info = unsafe { &*info };
    let regs = info.regs;
    let mut fault = Fault {
        vector: info.vector,
        error: info.error,
        addr: info.addr,
        // SAFETY: as above; the copy is unaligned-safe to read.
        regs: unsafe { regs.read_unaligned() },
    };
    let rsp = fault.regs.rsp;
    let _ = dispatch(&mut fault);
    let mut out = fault.regs;
    out.rsp = rsp;
    // SAFETY: the copy is where `resume_full` wants it (laid by `prepare_exception`).
    unsafe { regs.write_unaligned(out) };
    // SAFETY: `regs` and `fp` are this thread's stopped context, resumed by nothing else;
    // nothing on this stack above them is used again.
    unsafe { crate::arch::resume_full(regs, fp) }
}

// ---------------------------------------------------------------------------------------
// The TCBs the dispatcher may push continuations on

/// Every live TCB's address (few: TCBs are recycled; added when made, removed when freed).
static TCBS: SpinLock<Vec<usize>> = SpinLock::new(Vec::new());

/// Records a new TCB.
pub(crate) fn register_tcb(tcb: usize) {
    TCBS.lock().push(tcb);
}

/// Forgets a freed TCB.
pub(crate) fn unregister_tcb(tcb: usize) {
    let mut t = TCBS.lock();
    if let Some(i) = t.iter().position(|&x| x == tcb) {
        t.swap_remove(i);
    }
}

/// Whether `addr` is a live TCB.
#[cfg_attr(not(baton), allow(dead_code))]
fn is_tcb(addr: usize) -> bool {
    TCBS.lock().contains(&addr)
}

/// Bytes of stack, above its TCB, a faulting thread must have left for the handler's
/// continuation and the handler itself to run.
#[cfg_attr(not(baton), allow(dead_code))]
const HANDLER_ROOM: usize = crate::arch::EXC_FRAME + 4096;

/// Where and how a thread stopped by `regs` is resumed to run its handler: `None` if it
/// is not a sting thread with room on its stack.
#[cfg_attr(not(baton), allow(dead_code))]
fn continuation_for(vector: u64, error: u64, addr: u64, regs: &Regs) -> Option<Regs> {
    let rsp = regs.rsp as usize;
    let base = rsp & !(crate::rt::STACK_SIZE - 1);
    if !is_tcb(base) || rsp - base < crate::rt::tcb_size() + HANDLER_ROOM {
        return None;
    }
    // SAFETY: `rsp` lies in a live TCB's stack with room for the frame below it, and the
    // thread is stopped (waiting for our reply) until we answer.
    let (sp, info) = unsafe { crate::arch::prepare_exception(regs, vector, error, addr) };
    let mut out = *regs;
    out.rip = crate::arch::exception_entry as *const () as u64;
    out.rsp = sp as u64;
    out.rdi = info as u64;
    // The ABI's flags for compiled code: direction forward, no single-stepping.
    out.rflags &= !(0x400 | 0x100);
    Some(out)
}

#[cfg(baton)]
pub(crate) use dispatcher::{start, stop};

/// The dispatcher thread: serves the task's exception port while the runtime runs.
#[cfg(baton)]
mod dispatcher {
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

    use baton_abi::exception::UserRegs as KRegs;
    use baton_abi::ipc::{MSG_RECEIVE, MSG_SEND};
    use baton_abi::Error;
    use baton_rt::exception::{exception_port_set, info, set_reply, ExcReply};
    use baton_rt::ipc::{cap_drop, port_allocate, IpcBuffer};

    /// Bytes of the dispatcher's stack.
    const STACK: usize = 16 * 1024;
    /// The dispatcher's stack, reused by every runtime (one runs at a time, and each
    /// waits for its dispatcher to end).
    struct Stack(UnsafeCell<[u8; STACK]>);
    // SAFETY: used by one dispatcher thread at a time (`RUNNING`).
    unsafe impl Sync for Stack {}
    static STACK_MEM: Stack = Stack(UnsafeCell::new([0; STACK]));
    /// The port it serves (0: none).
    static PORT: AtomicU64 = AtomicU64::new(0);
    /// 1 while a dispatcher runs.
    static RUNNING: AtomicU32 = AtomicU32::new(0);
    use baton_rt::FOREVER;

    /// Makes the port, starts the dispatcher and makes the port the task's exception port.
    pub(crate) fn start() {
        while RUNNING.load(Acquire) != 0 {
            let _ = baton_rt::wait(&RUNNING, 1, 1_000_000);
        }
        let Ok(port) = port_allocate(0) else {
            panic!("sting: no port for the exception dispatcher")
        };
        PORT.store(port, Release);
        RUNNING.store(1, Release);
        // SAFETY: no dispatcher runs (`RUNNING` was 0), so the stack is free; the next
        // user waits until this dispatcher has ended.
        let stack: &'static mut [u8] = unsafe { &mut *STACK_MEM.0.get() };
        if baton_rt::thread::spawn(stack, serve, port).is_err() {
            RUNNING.store(0, Release);
            let _ = cap_drop(port);
            panic!("sting: cannot start the exception dispatcher");
        }
        if exception_port_set(0, port).is_err() {
            panic!("sting: cannot set the task's exception port");
        }
    }

    /// Clears the task's exception port, destroys the port (which ends the dispatcher)
    /// and waits for the dispatcher to end.
    pub(crate) fn stop() {
        let _ = exception_port_set(0, 0);
        let port = PORT.swap(0, AcqRel);
        if port != 0 {
            let _ = cap_drop(port);
        }
        while RUNNING.load(Acquire) != 0 {
            let _ = baton_rt::wait(&RUNNING, 1, 1_000_000);
        }
    }

    /// The dispatcher's first half: answers each exception with the continuation of the
    /// faulting thread's handler, or with the kernel's default (end the task).
    fn serve(port: u64) {
        if let Ok(mut buf) = IpcBuffer::new() {
            let mut r = buf.msg(MSG_RECEIVE, port, FOREVER);
            let mut tries = 0;
            loop {
                match r {
                    Ok(()) => tries = 0,
                    Err(Error::NoMemory) if tries < 1000 => {
                        tries += 1;
                        let _ = baton_rt::sleep_ns(1_000_000);
                        r = buf.msg(MSG_RECEIVE, port, FOREVER);
                        continue;
                    }
                    Err(_) => break,
                }
                let Some(e) = info(&buf) else {
                    r = buf.msg(MSG_RECEIVE, port, FOREVER);
                    continue;
                };
                let reply = match super::continuation_for(
                    e.kind,
                    e.error,
                    e.addr,
                    &super::Regs::from(&e.regs),
                ) {
                    Some(regs) => ExcReply::Set(KRegs::from(&regs)),
                    None => ExcReply::Kill,
                };
                r = set_reply(&mut buf, reply)
                    .and_then(|()| buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER));
            }
        }
        RUNNING.store(0, Release);
        let _ = baton_rt::wake(&RUNNING, u64::MAX);
    }
}

/// How a signaller goes on after signalling (the paper's exception priorities).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// The signaller continues; the target runs the handler when it next runs.
    Continue,
    /// The signaller switches to the target at once if the target is ready on its
    /// processor (the handler runs first); a target running on another processor is
    /// stopped there at once by the kernel (with [`crate::Config::preempt`]; it runs the
    /// handler then if it is [`crate::preemptible`]); otherwise as `Continue`.
    Immediate,
    /// The signaller yields its processor (back to its ready queue).
    Reschedule,
}
