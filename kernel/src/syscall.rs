//! System calls: decode the number, check every argument, then act.
//!
//! Calls that return at once edit the caller's frame in place. Calls that wait (`yield`,
//! `sleep`, `wait`) save the caller's user registers in its thread and block it with a
//! continuation; whoever finishes the call (a waker, a timeout) writes the result into
//! the saved `rax`. `debug_block_process_model` is the one call that blocks in the process
//! model, keeping its kernel stack.

use crate::arch::paging::KernelMem;
use crate::arch::serial::kprintln;
use crate::arch::trap::TrapFrame;
use crate::arch::{apic, gdt};
use crate::kernel::{self, Ending, Kernel, TaskId};
use crate::kobject::KObject;
use crate::thread::{self, Blocked, ThreadId, ThreadState};
use alloc::string::String;
use baton_abi::layout::{USER_END, USER_MIN};
use baton_abi::{
    Error, ModuleInfo, Stats, Sys, DEBUG_WRITE_MAX, FOREVER, MODULE_NAME_MAX, MODULE_TEST,
    PRIORITY_MAX, STATS_WORDS,
};
use kern::continuation::{Continuation, Resume};
use kern::frame::PAGE_SIZE;
use kern::quota::Resource;
use kern::slab::Key;
use kern::usercopy;

/// The system-call entry's call into this layer (`arch::trap`'s assembly): every
/// system call but `ipc_msg`'s fast paths and `act_return`.
#[no_mangle]
extern "C" fn syscall_dispatch(number: u64) -> ! {
    kernel::lock();
    // SAFETY: the lock is held.
    let k = unsafe { kernel::kernel() };
    if number == Sys::Null as u64 {
        // The cheapest call is answered here, in a function whose few registers need no
        // saving, unless its thread is to end or be preempted (the general path's cases).
        // SAFETY: this CPU runs the caller (it is in this system call), and the reference
        // is not used after `k` is used again.
        let th = unsafe { thread::current_mut() };
        if !th.kill_pending && !kernel::preempt_due(k, th.priority) {
            th.ctx.frame.rax = 0;
            kernel::leave_to_user()
        }
    }
    short_or_general(k, number)
}

/// Every system call but the null call answered at once: `wait` and `wake` take their
/// short way when they can ([`sync_short`]), the others (and these when their short way
/// does not apply) the general decode. A function of its own, so that the null call's
/// test stays the first (the compiler put the short way's test before it otherwise).
#[inline(never)]
fn short_or_general(k: &mut Kernel, number: u64) -> ! {
    if number == Sys::Wait as u64 || number == Sys::Wake as u64 {
        sync_short(k, number);
    }
    on_syscall(k, number)
}

/// The entry's call for a number of the extensions' range (`baton_abi::spin`): the entry's
/// assembly sends those here with the compare that already sends the floor calls off the
/// base calls' way, so the base calls pay nothing for the short way of an extension's
/// call ([`extension_short`]). A thread to be killed takes the general path.
#[no_mangle]
extern "C" fn extension_dispatch(number: u64) -> ! {
    kernel::lock();
    // SAFETY: the lock is held.
    let k = unsafe { kernel::kernel() };
    extension_short(k, number);
    on_syscall(k, number)
}

/// What the lean entry of the extensions' range does next (`arch::trap`'s
/// `high_syscall`): `value` goes to `rax`, and `next` says 0, back to user space at once
/// (the lock released); 1, the range's way with the full save ([`extension_dispatch`],
/// nothing ran, the lock released); 2, [`extension_finish`] (`value` is the answer, the
/// lock held); 3, [`extension_unknown`] (the lock held). For 1 and 3 the entry takes
/// the number back from the record it pushed.
#[repr(C)]
pub struct FastAnswer {
    value: u64,
    next: u64,
}

/// The lean entry's call for a number of the extensions' range: `Trap.SystemCall` is
/// raised with the record the entry pushed on the kernel stack (`call`: the number and
/// the arguments; the task is filled in here), the thread's saved frame not being
/// written at all. It does what [`extension_short`] does, in the
/// same order; what needs the frame (a thread to be killed, preempted or stopped, an
/// unknown number, a handler that may block its caller) is handed back to the entry,
/// which saves the frame and calls the function that does it.
///
/// The entry took the big lock before this call (in its assembly, so that nothing here
/// is kept across a call before the handler's); every answer but 2 and 3 releases it.
#[no_mangle]
extern "C" fn extension_fast(call: &mut crate::extension::Call) -> FastAnswer {
    // SAFETY: the lock is held (the entry took it).
    let k = unsafe { kernel::kernel() };
    // SAFETY: this CPU runs the caller (it is in this system call), and the reference is
    // not used after `k` is used again.
    let th = unsafe { thread::current_mut() };
    match th.ctx.task {
        Some(task) if !th.kill_pending => call.task = task,
        _ => return fast_not_here(),
    }
    // No page-wait note is cleared or taken: no handler this way runs copies its caller's
    // memory (`extension::system_call_lean`); those that do take the full way.
    let v = match crate::extension::system_call_lean(k, call) {
        Ok(v) => v,
        Err(why) => return fast_declined(why),
    };
    // SAFETY: as above; the handlers are done with the kernel.
    let prio = unsafe { thread::current_mut() }.priority;
    if kernel::preempt_due(k, prio)
        || kernel::STOPS_PENDING.load(core::sync::atomic::Ordering::Relaxed) > 0
    {
        return fast_finish(v);
    }
    kernel::unlock();
    FastAnswer { value: v, next: 0 }
}

/// The lean entry's raise gave no answer: 3 for a number no handler took (the lock
/// held), or the full save's way (nothing ran). Out of line, so that the answered way
/// keeps its value in a register and sets up no answer before it has one.
#[cold]
#[inline(never)]
fn fast_declined(why: crate::extension::Lean) -> FastAnswer {
    match why {
        crate::extension::Lean::Unknown => FastAnswer { value: 0, next: 3 },
        crate::extension::Lean::NeedsFrame => fast_not_here(),
    }
}

/// The lean entry's answer `v` for a thread to be preempted or stopped (2: the lock held).
#[cold]
#[inline(never)]
fn fast_finish(v: u64) -> FastAnswer {
    FastAnswer { value: v, next: 2 }
}

/// The lean entry's wait for the big lock, which another CPU holds (`kernel::lock`'s
/// loop: TLB shootdowns are answered meanwhile). Returns with the lock held.
#[no_mangle]
extern "C" fn extension_lock_wait() {
    kernel::lock();
}

/// The lean entry's call takes the range's way with the full save (nothing ran).
#[cold]
#[inline(never)]
fn fast_not_here() -> FastAnswer {
    kernel::unlock();
    FastAnswer { value: 0, next: 1 }
}

/// The lean entry's answer `v` for a thread to be preempted or stopped: the general exit,
/// the frame now saved and the lock still held.
#[no_mangle]
extern "C" fn extension_finish(v: u64) -> ! {
    // SAFETY: the lock is held (`extension_fast` kept it).
    let k = unsafe { kernel::kernel() };
    kernel::finish_entry(k, false, Some(v))
}

/// The lean entry's `number` no handler took: a bad call, the frame now saved and the
/// lock still held.
#[no_mangle]
extern "C" fn extension_unknown(number: u64) -> ! {
    // SAFETY: the lock is held (`extension_fast` kept it).
    let k = unsafe { kernel::kernel() };
    // SAFETY: this CPU runs the caller; the reference ends here.
    let cur = unsafe { thread::current_mut() }.id;
    bad_call(k, cur, number)
}

/// A number of the extensions' range (`baton_abi::spin`, outside the base ABI by
/// construction: `Sys::from_raw` knows none of them) goes to `Trap.SystemCall` at once,
/// without the general decode's tests for the base calls. It does what the general path
/// does for such a number, in the same order:
/// a thread to be killed is left to the general path, and a number no handler took is a
/// bad call. Returns only in the first case.
#[inline(always)]
fn extension_short(k: &mut Kernel, number: u64) {
    // SAFETY: this CPU runs the caller (it is in this system call), and the reference is
    // not used after `k` is used again.
    let th = unsafe { thread::current_mut() };
    if th.kill_pending {
        return;
    }
    let cur = th.id;
    if let Some(task) = th.ctx.task {
        // The arguments are copied once, into the event's argument record.
        let call = crate::extension::Call {
            task,
            number,
            args: th.ctx.frame.syscall_args().1,
        };
        // Only this call's copies may make it wait for a pager (`crate::pager::after_call`).
        crate::vm::clear_page_wait();
        if let Some(v) = crate::extension::system_call(k, &call) {
            extension_answered(k, v)
        }
    }
    bad_call(k, cur, number)
}

/// A handler of `Trap.SystemCall` answered `v`: the caller's result, and back to user
/// space (by the general exit when it is to be preempted). A handler's copy from or to
/// the caller's memory that met a page being paged in makes the call again once the page
/// is there, as for a base call (the thread waits now: `crate::pager::after_call`; the
/// caller's registers are in its frame on every way that comes here).
#[inline(always)]
fn extension_answered(k: &mut Kernel, v: u64) -> ! {
    // SAFETY: this CPU runs the caller (it is in this system call); the reference ends
    // here.
    let cur = unsafe { thread::current_mut() }.id;
    page_retry(k, cur);
    // SAFETY: this CPU runs the caller (it is in this system call), and the reference is
    // not used after `k` is used again; the handlers are done with the kernel.
    let th = unsafe { thread::current_mut() };
    if !kernel::preempt_due(k, th.priority) {
        th.ctx.frame.rax = v;
        kernel::leave_to_user()
    }
    kernel::finish_entry(k, false, Some(v))
}

/// `crate::pager::after_call` for the ways that need it ([`on_syscall`] and
/// [`extension_answered`]), called only when this thread's call noted a page to wait
/// for: with two callers the compiler no longer inlined `after_call` into the general
/// path, whose every call then paid a call and a frame (about 11 instructions) for the
/// common case, nothing noted, which this test answers in place.
#[inline(always)]
fn page_retry(k: &mut Kernel, cur: ThreadId) {
    if crate::vm::page_wait_noted(cur) {
        crate::pager::after_call(k, cur);
    }
}

/// A number neither the base ABI nor an extension's handler took: `EXC_BAD_SYSCALL` goes
/// to the thread's exception port, and without a handler that answers it the task is
/// killed.
#[inline(never)]
fn bad_call(k: &mut Kernel, cur: ThreadId, number: u64) -> ! {
    crate::exception::raise(k, cur, baton_abi::exception::EXC_BAD_SYSCALL, number);
    k.report(format_args!(
        "killed: bad system call {number} (no handler)"
    ));
    if let Some(th) = k.threads.get(cur) {
        crate::arch::trap::dump_frame(&th.ctx.frame);
        k.report_code(th.ctx.frame.rip);
    }
    if let Some(task) = k.current_task() {
        k.end_task(task, Ending::Killed);
    }
    thread::thread_terminate_current(k)
}

/// A number outside the base ABI (`Sys::from_raw` knew none): `Trap.SystemCall`, whose
/// handlers extensions install (`crate::extension`), for the extensions' range
/// (`baton_abi::spin`). Reached only once the general decode found no base call, so the
/// base calls pay nothing for it. Returns when no handler took the call (an unknown
/// number).
#[inline(never)]
fn on_extension_call(k: &mut Kernel, number: u64, task: Option<TaskId>, args: [u64; 6]) {
    if !(baton_abi::spin::EXT_SYSCALL_FIRST..baton_abi::spin::EXT_SYSCALL_END).contains(&number) {
        return;
    }
    let Some(task) = task else { return };
    let call = crate::extension::Call { task, number, args };
    if let Some(v) = crate::extension::system_call(k, &call) {
        extension_answered(k, v)
    }
}

/// The entry's call for `ipc_msg` (see [`on_ipc_fast`]). It does not return: a message
/// the fast paths decline falls into the general path with the lock still held, and a
/// function that never returns saves none of the caller's registers.
#[no_mangle]
extern "C" fn ipc_fast_dispatch() -> ! {
    on_ipc_fast()
}

/// The entry's call for `act_return` (see [`on_act_return`]).
#[no_mangle]
extern "C" fn act_return_dispatch() -> ! {
    on_act_return();
}

/// The RPC fast paths' entry, tried first for every `ipc_msg` (before [`on_syscall`]):
/// an RPC's request or reply may take the fast path, and a call to a port with activations
/// migrates. Neither returns when it applies; otherwise, having changed nothing, the
/// general path ([`on_syscall`]) takes the call, the lock held throughout.
#[inline(always)]
pub fn on_ipc_fast() -> ! {
    kernel::lock();
    // SAFETY: the lock is held.
    let k = unsafe { kernel::kernel() };
    // SAFETY: the running thread of this CPU is in this system call; the reference is not
    // used after the fast paths look threads up.
    if unsafe { crate::thread::current_mut().exc_hint } {
        exception_reply_hinted(k);
    }
    crate::fastpath::try_ipc(k, gdt::this_cpu());
    exception_reply(k);
    on_syscall(k, Sys::IpcMsg as u64)
}

/// A handler that last received an exception from the exception fast path
/// (`Thread::exc_hint`) sends its `ipc_msg`: the exception reply's fast path is tried
/// before the RPC fast path, which would plan the reply only to decline it. It does not
/// return when it applies; when it does not, the RPC fast path runs as for any message.
/// Out of line, so that the RPC fast path's code stays as it was.
#[inline(never)]
fn exception_reply_hinted(k: &mut Kernel) {
    // SAFETY: as in `on_ipc_fast`; the reference is dropped before the fast path runs.
    unsafe { crate::thread::current_mut().exc_hint = false };
    crate::exception::reply_fast(k, gdt::this_cpu());
}

/// After the RPC fast path declined a message of this CPU's running thread: if it was an
/// exception handler's reply (`Cpu::exc_reply_hint`), the exception reply's own fast path
/// runs at once (it does not return when it applies). Out of line, so that the RPC fast
/// path's code stays as it was.
#[inline(never)]
fn exception_reply(k: &mut Kernel) {
    let cpu = gdt::this_cpu();
    if k.cpus
        .get_mut(cpu)
        .is_some_and(|c| core::mem::take(&mut c.exc_reply_hint))
    {
        crate::exception::reply_fast(k, cpu);
    }
}

/// `act_return`'s entry, taken before [`on_syscall`] for the reason [`on_ipc_fast`] is:
/// the end of a migrating call, whose caller resumes (an error only outside one).
#[inline(always)]
pub fn on_act_return() -> ! {
    kernel::lock();
    // SAFETY: the lock is held.
    let k = unsafe { kernel::kernel() };
    // SAFETY: this CPU runs the caller (it is in this system call), and the reference is
    // dropped at once.
    let cur = unsafe { thread::current_mut() }.id;
    let e = crate::activation::sys_act_return(k, cur);
    kernel::finish_entry(k, false, Some(e.to_raw()))
}

/// Entry for the `syscall` instruction, with the call `number` (the user's `rax`), the
/// lock held. The caller's user registers are already in its thread object (the entry
/// pushed them there); the result goes into its saved `rax`.
#[inline(never)]
fn on_syscall(k: &mut Kernel, number: u64) -> ! {
    // SAFETY: this CPU runs the caller (it is in this system call), and the reference is
    // not used after the lookups below start.
    let th = unsafe { thread::current_mut() };
    let cur = th.id;
    if th.kill_pending {
        thread::thread_terminate_current(k);
    }
    // The two calls that need no arguments take the short way.
    if number == Sys::Null as u64 {
        kernel::finish_entry(k, false, Some(0))
    }
    if number == Sys::Yield as u64 {
        thread::thread_yield(k, cur)
    }
    let args = th.ctx.frame.syscall_args().1;
    let task_of = (th.ctx.task, th.ctx.task_key);
    // Only this call's copies may make it wait for a pager (`crate::pager::after_call`).
    crate::vm::clear_page_wait();
    let Some(call) = Sys::from_raw(number) else {
        on_extension_call(k, number, task_of.0, args);
        bad_call(k, cur, number)
    };
    let result = match call {
        Sys::Null | Sys::Yield => 0,
        Sys::Exit => {
            if let Some(task) = k.current_task() {
                k.end_task(task, Ending::Exit(args[0] as i32));
            }
            thread::thread_terminate_current(k);
        }
        Sys::ThreadExit => thread::thread_terminate_current(k),
        Sys::Sleep if crate::control::alerted(k, cur) => Error::Interrupted.to_raw(),
        Sys::Sleep => {
            let deadline = apic::now_ns().saturating_add(args[0]);
            thread::block_until(k, Blocked::Sleep, Some(deadline));
            k.stats.blocks_sleep += 1;
            thread::thread_block_with(k, Continuation::new(Resume::Sleep));
        }
        Sys::Wait | Sys::WaitShared => {
            match check_wait(k, task_of, args[0], args[1]).and_then(|key| match call {
                Sys::WaitShared => crate::memobj::wait_key(k, key.0, key.1),
                _ => Ok(key),
            }) {
                Ok(key) => wait_on(k, cur, key, args[2]),
                Err(e) => e.to_raw(),
            }
        }
        Sys::DebugBlockProcessModel => match crate::kobject::check_host_priv(k, cur, args[2]) {
            Ok(()) => process_model_block(args[0], args[1]),
            Err(e) => e.to_raw(),
        },
        Sys::IpcMsg => crate::ipc::sys_ipc_msg(k, cur, args),
        Sys::HostShutdown => match task_of.0 {
            Some(task) => match crate::host::shutdown(k, task, cur, args[0]) {
                Ok(()) => thread::thread_terminate_current(k),
                Err(e) => e.to_raw(),
            },
            None => Error::InvalidArgument.to_raw(),
        },
        Sys::ActReturn => crate::activation::sys_act_return(k, cur).to_raw(),
        Sys::VpWait => match task_of.0 {
            Some(task) => crate::vproc::sys_vp_wait(k, cur, task, args),
            None => Error::InvalidArgument.to_raw(),
        },
        Sys::VpResume => match task_of.0 {
            Some(task) => crate::vproc::sys_vp_resume(k, cur, task, args[0]),
            None => Error::InvalidArgument.to_raw(),
        },
        other => match k.syscall(task_of.0, other, args) {
            Ok(v) => v,
            Err(e) => e.to_raw(),
        },
    };
    // SAFETY: the lock is still held (a process-model block returns with it, on this
    // thread).
    let k = unsafe { kernel::kernel() };
    // A copy met a page a pager is asked for: the call is made again once it is there.
    page_retry(k, cur);
    // A call that dropped the last reference to a pager-backed object (a deallocation)
    // lets go of its pager's right now, not at the next IPC operation.
    crate::pager::tidy(k);
    let cpu = gdt::this_cpu();
    if crate::klog::pending(k, cpu) {
        // Lines this call caused are written with the lock released (the thread stays
        // this CPU's running one meanwhile; `finish_entry` sees a kill that came then).
        crate::klog::flush(cpu);
    }
    // SAFETY: the lock is held (again).
    let k = unsafe { kernel::kernel() };
    kernel::finish_entry(k, false, Some(result))
}

/// Checks a `wait`: aligned user word that still holds `expected`.
fn check_wait(
    k: &mut Kernel,
    (task, key): (Option<TaskId>, Key),
    addr: u64,
    expected: u64,
) -> Result<(TaskId, u64), Error> {
    if !addr.is_multiple_of(4) {
        return Err(Error::InvalidArgument);
    }
    let task = task.ok_or(Error::InvalidArgument)?;
    let word = k.read_word_key(key, addr)?;
    if u64::from(word) != expected {
        return Err(Error::WouldBlock);
    }
    Ok((task, addr))
}

/// The rest of a `wait` whose word was as expected: thread `cur` waits on `key` for at
/// most `timeout` ns, unless an alert is pending (`Interrupted`) or the wait queues have no
/// room (`NoMemory`); the error, or it does not return.
#[inline(always)]
fn wait_on(k: &mut Kernel, cur: ThreadId, key: (TaskId, u64), timeout: u64) -> u64 {
    if crate::control::alerted(k, cur) {
        return Error::Interrupted.to_raw();
    }
    let deadline = match timeout {
        FOREVER => None,
        ns => Some(apic::now_ns().saturating_add(ns)),
    };
    if k.waits.try_enqueue(key, cur).is_err() {
        return Error::NoMemory.to_raw();
    }
    thread::block_until(k, Blocked::Wait { key }, deadline);
    k.stats.blocks_wait += 1;
    thread::thread_block_with(k, Continuation::new(Resume::Wait));
}

/// Whether `addr` may key a user's `wait` or `wake`: an aligned word of the user half. A
/// key outside it is none of the task's words: the kernel's own waits use keys in the
/// kernel's half (the built-in thread package's joins and conditions), which a user `wake`
/// must not reach.
#[inline(always)]
fn word_key_ok(addr: u64) -> bool {
    addr.is_multiple_of(4) && addr < baton_abi::layout::USER_END
}

/// `wait` and `wake`, the calls user-level synchronisation makes on every contended lock,
/// the short way: decoded before the general decode of [`on_syscall`], and done
/// without its steps for calls that copy user memory (no pager wait, no object dropped, no
/// console line can come of them). `wait` takes it only when its word can be read through
/// the caller's own mapping (`arch::uaccess`: a load whose fault is recovered); a word
/// whose page is not there (a pager's, or one out on the swap area), a misaligned
/// address, one outside the user half or a thread to be ended take the general path,
/// which gives the same results. Returns when the short way does not apply.
#[inline(never)]
fn sync_short(k: &mut Kernel, number: u64) {
    // SAFETY: this CPU runs the caller (it is in this system call), and the reference is
    // not used after `k` is used again.
    let th = unsafe { thread::current_mut() };
    let (cur, [addr, arg, timeout, ..]) = (th.id, th.ctx.frame.syscall_args().1);
    let (Some(task), false, true) = (th.ctx.task, th.kill_pending, word_key_ok(addr)) else {
        return;
    };
    if number == Sys::Wake as u64 {
        let woken = k.wake_key((task, addr), arg);
        kernel::finish_entry(k, false, Some(woken))
    }
    // Through the caller's own mapping (its space is the one loaded); a word whose page
    // is not there faults, recoverably, and takes the general path.
    let Some(word) = crate::arch::uaccess::read_user_u32(addr) else {
        return;
    };
    let result = if u64::from(word) != arg {
        Error::WouldBlock.to_raw()
    } else {
        wait_on(k, cur, (task, addr), timeout)
    };
    kernel::finish_entry(k, false, Some(result))
}

/// `debug_block_process_model(ns, seed)`: computes the answer into a stack variable,
/// blocks keeping this kernel stack, and returns the variable after the switch back.
#[inline(never)]
fn process_model_block(ns: u64, seed: u64) -> u64 {
    let answer = core::hint::black_box(baton_abi::process_model_check(seed));
    let guard = core::hint::black_box([seed, !seed, seed ^ 0xabcd]);
    {
        // SAFETY: the lock is held.
        let k = unsafe { kernel::kernel() };
        let cur = k.current_thread();
        // This thread keeps its kernel stack while it waits, so the thread that runs next
        // may need a new one: make sure the pool has it now, and charge the frames of the
        // stack kept to the task, or fail the call instead of blocking (`crate::quota`).
        if let Err(e) = reserve_process_model_stack(k, cur) {
            return e.to_raw();
        }
        if ns == 0 {
            // A yield in the process model: ready again at once, keeping the stack (the
            // benchmark of `switch_context` against stack handoff).
            thread::requeue_current(k, cur);
        } else {
            let deadline = apic::now_ns().saturating_add(ns);
            thread::block_until(k, Blocked::ProcessModel, Some(deadline));
        }
        k.stats.blocks_process_model += 1;
        thread::thread_block(k, None);
    }
    // Resumed on the same stack: the locals must be intact.
    {
        // SAFETY: the lock is held again (a process-model block returns with it).
        let k = unsafe { kernel::kernel() };
        let cur = k.current_thread();
        if let Some(t) = k.threads.get_mut(cur) {
            t.stack_charge = None;
        }
    }
    let guard = core::hint::black_box(guard);
    if guard != [seed, !seed, seed ^ 0xabcd] {
        kprintln!(
            "[kernel] process-model stack corrupted on CPU {}",
            gdt::this_cpu()
        );
        return Error::InvalidArgument.to_raw();
    }
    core::hint::black_box(answer)
}

/// Before thread `cur` blocks in the process model: charges its task for the kernel stack
/// it keeps (held in the thread until it resumes or is freed) and makes sure the stack
/// pool holds one for the thread that runs next ([`Error::NoMemory`] if either fails).
fn reserve_process_model_stack(k: &mut Kernel, cur: ThreadId) -> Result<(), Error> {
    let task = k.current_task().ok_or(Error::InvalidArgument)?;
    let account = &k.tasks.get(&task).ok_or(Error::InvalidArgument)?.account;
    let charge =
        kern::quota::Account::charge(account, Resource::Frames, crate::arch::stack::STACK_FRAMES)?;
    if k.stacks.pooled() == 0 {
        let spare = k.stack_alloc().ok_or(Error::NoMemory)?;
        k.stack_free(spare);
    }
    if let Some(t) = k.threads.get_mut(cur) {
        t.stack_charge = Some(charge);
    }
    Ok(())
}

impl Kernel {
    /// Calls that return to the caller at once, made by a thread running in task `task`.
    fn syscall(&mut self, task: Option<TaskId>, call: Sys, args: [u64; 6]) -> Result<u64, Error> {
        let id = task.ok_or(Error::InvalidArgument)?;
        let result = match call {
            Sys::DebugWrite => self.sys_debug_write(id, args[0], args[1]),
            Sys::Clock => Ok(apic::now_ns()),
            Sys::HaltedTicks => {
                let cur = self.current_thread();
                crate::kobject::check_host_priv(self, cur, args[0])
                    .map(|()| crate::kernel::halted_ticks(self))
            }
            Sys::Spawn => self.sys_spawn(id, args),
            Sys::ModuleInfo => self.sys_module_info(id, args[0], args[1]),
            Sys::ThreadCreate => self.thread_create_in(id, args[0], args[1], args[2]),
            Sys::Wake => self.sys_wake(id, args[0], args[1]),
            Sys::Stats => self.sys_stats(id, args[0]),
            Sys::SetPriority => self.sys_set_priority(id, args[0], args[1]),
            Sys::MemMap => crate::vm::sys_mem_map(self, id, args[0], args[1], args[2]),
            Sys::MemUnmap => crate::vm::sys_mem_unmap(self, id, args[0], args[1]),
            Sys::VmAllocate
            | Sys::VmDeallocate
            | Sys::VmProtect
            | Sys::VmInherit
            | Sys::VmQuery
            | Sys::VmWire
            | Sys::VmUnwire
            | Sys::VmStats => crate::vm::sys_vm(self, id, call, args),
            Sys::MemobjPager
            | Sys::PagerSupply
            | Sys::PagerUnavailable
            | Sys::PagerError
            | Sys::PagerFlush
            | Sys::PagerLock => crate::pager::sys(self, id, call, args),
            Sys::DefaultPagerRegister
            | Sys::DefaultPagerSupply
            | Sys::PagingStats
            | Sys::PagingLimit
            | Sys::PagingExempt => crate::pageout::sys(self, id, call, args),
            Sys::VmCopy => crate::ool::sys_vm_copy(self, id, args),
            Sys::SetAffinity => self.sys_set_affinity(id, args[0], args[1]),
            Sys::MemobjCreate
            | Sys::VmMap
            | Sys::MemobjRestrict
            | Sys::MemobjPhysical
            | Sys::MemobjDma
            | Sys::MemobjInfo
            | Sys::VmRead
            | Sys::VmWrite
            | Sys::WakeShared
            | Sys::DmaQuarantineRelease
            | Sys::DmaQuarantined => {
                let cur = self.current_thread();
                crate::memobj::sys(self, id, cur, call, args)
            }
            Sys::SpinImport
            | Sys::SpinCreate
            | Sys::SpinResolve
            | Sys::SpinCombine
            | Sys::SpinInstall
            | Sys::SpinRemove
            | Sys::SpinRelease
            | Sys::SpinRaise
            | Sys::SpinAsync
            | Sys::SpinTier => crate::extension::sys(self, id, call, args),
            Sys::SpinvmQuery | Sys::SpinvmMark => {
                crate::extension::translation::sys(self, id, call, args)
            }
            Sys::IpcBufferSet => {
                let cur = self.current_thread();
                self.ipc_buffer_set(cur, id, args[0])
            }
            Sys::PortAllocate => {
                let account = &self.tasks.get(&id).ok_or(Error::InvalidArgument)?.account;
                let charge = crate::quota::heap(account, crate::quota::PORT_BYTES)?;
                self.with_names(id, |ipc, names, _| {
                    let name = ipc.allocate(names, id, args[0])?;
                    if let Some(p) = names.lookup(name).ok().and_then(|e| ipc.port_mut(e.port)) {
                        p.charge = Some(charge);
                    }
                    Ok(name)
                })
            }
            Sys::PortMakeSend => self.with_names(id, |ipc, names, _| {
                let once = match args[1] {
                    0 => false,
                    1 => true,
                    _ => return Err(Error::InvalidArgument),
                };
                ipc.make_send(names, args[0], once)
            }),
            Sys::CapDrop => {
                let r = self.with_names(id, |ipc, names, fx| {
                    ipc.release(names, args[0], fx).map(|()| 0)
                });
                crate::activation::retire_orphans(self);
                r
            }
            Sys::ActCreate => crate::activation::sys_act_create(self, id, args),
            Sys::ActAlert => {
                let cur = self.current_thread();
                let t = crate::control::Target::decode(args[0], args[1])?;
                crate::control::sys_alert(self, id, cur, t)
            }
            Sys::AlertTest => {
                let cur = self.current_thread();
                crate::control::sys_alert_test(self, cur)
            }
            Sys::AlertEnable => {
                let cur = self.current_thread();
                crate::control::sys_alert_enable(self, cur, args[0])
            }
            Sys::ActSuspend => {
                let cur = self.current_thread();
                let t = crate::control::Target::decode(args[0], args[1])?;
                crate::control::sys_suspend(self, id, cur, t, args[2])
            }
            Sys::ActGetState | Sys::ActSetState => {
                let cur = self.current_thread();
                let t = crate::control::Target::decode(args[0], args[1])?;
                let set = call == Sys::ActSetState;
                crate::control::sys_state(self, id, cur, t, args[2], set)
            }
            Sys::ActSchedLock => {
                let cur = self.current_thread();
                crate::control::sys_sched_lock(self, cur)
            }
            Sys::ThreadCpuNs => {
                let t = self.own_thread(id, args[0])?;
                let cpu = gdt::this_cpu();
                let running = self.cpu(cpu);
                let (current, since) = (running.current, running.since);
                let th = self.threads.get(t).ok_or(Error::NotFound)?;
                let mut tsc = th.cpu_tsc;
                if t == current {
                    tsc = tsc.wrapping_add(crate::arch::cpu::rdtsc().wrapping_sub(since));
                }
                let hz = u128::from(apic::tsc_hz().max(1));
                Ok((u128::from(tsc) * 1_000_000_000 / hz) as u64)
            }
            Sys::PortSidetrack => crate::activation::sys_port_sidetrack(self, id, args[0], args[1]),
            Sys::CapInfo => self.with_names(id, |ipc, names, _| {
                ipc.info(names, args[0]).map(|k| k as u64)
            }),
            Sys::TaskSelf => crate::kobject::sys_object_port(self, id, KObject::Task(id)),
            Sys::TaskPort => crate::kobject::sys_object_port(self, id, KObject::Task(args[0])),
            Sys::ActPort => {
                crate::kobject::sys_object_port(self, id, KObject::Activation(Key(args[0])))
            }
            Sys::ThreadPort => {
                crate::kobject::sys_object_port(self, id, KObject::Thread(Key(args[0])))
            }
            Sys::ExceptionPortSet => {
                crate::exception::sys_exception_port_set(self, id, args[0], args[1])
            }
            Sys::IrqAttach => {
                let cur = self.current_thread();
                crate::device::sys_irq_attach(self, id, cur, args[0], args[1], args[2])
            }
            Sys::IrqAck => crate::device::sys_irq_ack(self, id, args[0]),
            Sys::MsiAttach => {
                let cur = self.current_thread();
                crate::device::sys_msi_attach(self, id, cur, args[0], args[1])
            }
            Sys::MsiMessage => crate::device::sys_msi_message(self, id, args[0]),
            Sys::IoPortCreate => {
                let cur = self.current_thread();
                crate::device::sys_ioport_create(self, id, cur, args[0], args[1], args[2])
            }
            Sys::IoIn => crate::device::sys_io(self, id, args[0], args[1], args[2], None),
            Sys::IoOut => crate::device::sys_io(self, id, args[0], args[1], args[2], Some(args[3])),
            Sys::HostTasks => {
                let cur = self.current_thread();
                crate::host::sys_tasks(self, id, cur, args)
            }
            Sys::HostThreads => {
                let cur = self.current_thread();
                crate::host::sys_threads(self, id, cur, args)
            }
            Sys::HostNames => {
                let cur = self.current_thread();
                crate::host::sys_names(self, id, cur, args)
            }
            Sys::HostVm => {
                let cur = self.current_thread();
                crate::vm::sys_host_vm(self, id, cur, args)
            }
            Sys::HostTrace => {
                let cur = self.current_thread();
                crate::host::trace(self, id, cur, args[0], args[1], args[2])
            }
            Sys::HostTaskPort => {
                let cur = self.current_thread();
                crate::host::sys_task_port(self, id, cur, args[0], args[1])
            }
            Sys::PortNotify => self.with_names(id, |ipc, names, fx| {
                ipc.request_notify(names, args[0], args[1], args[2], fx)
                    .map(|()| 0)
            }),
            Sys::PortSetLimit => self.with_names(id, |ipc, names, _| {
                ipc.set_limit(names, args[0], args[1]).map(|()| 0)
            }),
            Sys::TaskCreate => crate::taskmake::sys_create(self, id, args[0], args[1]),
            Sys::TaskMapProgram => crate::taskmake::sys_map_program(self, id, args),
            Sys::TaskInitThread => crate::taskmake::sys_init_thread(self, id, args),
            Sys::TaskStart => {
                let start = match args[2] {
                    0 => None,
                    at => Some(self.read_start(id, at)?),
                };
                crate::taskmake::sys_start(self, id, args[0], args[1], start)
            }
            Sys::TaskFork => {
                let cur = self.current_thread();
                crate::taskmake::sys_fork(self, id, cur, args[0], args[1])
            }
            Sys::Yield
            | Sys::Exit
            | Sys::ThreadExit
            | Sys::Wait
            | Sys::WaitShared
            | Sys::Sleep
            | Sys::DebugBlockProcessModel
            | Sys::IpcMsg
            | Sys::ActReturn
            | Sys::HostShutdown
            | Sys::VpWait
            | Sys::VpResume
            | Sys::Null => Err(Error::InvalidArgument),
            Sys::VpCreate
            | Sys::VpSpares
            | Sys::VpTake
            | Sys::VpDestroy
            | Sys::VpPreempt
            | Sys::VpInterrupt => crate::vproc::sys(self, id, call, args),
            Sys::StrandCount => crate::extension::strand::count(self, id, args[0]),
            Sys::SpinReclaim => crate::extension::reclaim::sys(id, args[0]),
        };
        let cur = self.current_thread();
        if result == Err(Error::BadAddress) && !crate::vm::page_wait_noted(cur) {
            // Rate-limited, and written after the lock is released (`klog`). A copy that
            // waits for a page (the call is made again once it is there) is no error.
            crate::klog::user_error(
                self,
                id,
                format_args!(
                    "{call:?}: bad user address in ({:#x}, {:#x}): returned BadAddress",
                    args[0], args[1]
                ),
            );
        }
        result
    }

    /// Copies user bytes of `task` into `out`.
    /// [`Kernel::copy_in`] into a new vector of `len` bytes (not zeroed first:
    /// `kern::usercopy::read_user_vec`).
    pub fn copy_in_vec(
        &mut self,
        task: TaskId,
        ptr: u64,
        len: usize,
    ) -> Result<alloc::vec::Vec<u8>, Error> {
        let copy = |k: &mut Kernel| {
            let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
            let mem = KernelMem {
                frames: &mut k.frames,
            };
            usercopy::read_user_vec(&t.space, &mem, ptr, len)
        };
        match copy(self) {
            Err(Error::BadAddress) => {
                crate::vm::make_resident(self, task, ptr, len, false)?;
                copy(self)
            }
            r => r,
        }
    }

    pub fn copy_in(&mut self, task: TaskId, ptr: u64, out: &mut [u8]) -> Result<(), Error> {
        let key = self.tasks.key_of(task).ok_or(Error::InvalidArgument)?;
        self.copy_in_key(key, ptr, out)
    }

    /// [`Kernel::copy_in`] for the task of slab key `key` (what a thread caches: one
    /// lookup, no search by id).
    pub fn copy_in_key(&mut self, key: Key, ptr: u64, out: &mut [u8]) -> Result<(), Error> {
        let t = self.tasks.by_key(key).ok_or(Error::InvalidArgument)?;
        let mem = KernelMem {
            frames: &mut self.frames,
        };
        match usercopy::copy_from_user(&t.space, &mem, ptr, out) {
            // Pages not there yet: made resident as a user access would, once.
            Err(Error::BadAddress) => {
                crate::vm::make_resident_key(self, key, ptr, out.len(), false)?;
                let t = self.tasks.by_key(key).ok_or(Error::InvalidArgument)?;
                let mem = KernelMem {
                    frames: &mut self.frames,
                };
                usercopy::copy_from_user(&t.space, &mem, ptr, out)
            }
            r => r,
        }
    }

    /// The aligned 32-bit word at `ptr` of the task of slab key `key`
    /// (`usercopy::read_user_u32`: one page-table walk), made resident first if it is not.
    pub fn read_word_key(&mut self, key: Key, ptr: u64) -> Result<u32, Error> {
        let t = self.tasks.by_key(key).ok_or(Error::InvalidArgument)?;
        let mem = KernelMem {
            frames: &mut self.frames,
        };
        match usercopy::read_user_u32(&t.space, &mem, ptr) {
            Err(Error::BadAddress) => {
                let mut word = [0u8; 4];
                self.copy_in_key(key, ptr, &mut word)?;
                Ok(u32::from_le_bytes(word))
            }
            r => r,
        }
    }

    /// Runs a port operation on `task`'s name space, then makes ready the threads it
    /// unblocked.
    fn with_names(
        &mut self,
        task: TaskId,
        op: impl FnOnce(
            &mut kern::ipc::Ipc<crate::thread::ThreadId>,
            &mut kern::ipc::Space,
            &mut kern::ipc::Effects<crate::thread::ThreadId>,
        ) -> Result<u64, Error>,
    ) -> Result<u64, Error> {
        let mut fx = crate::ipc::effects(self);
        let t = self.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
        let result = op(&mut self.ipc, &mut t.names, &mut fx);
        crate::ipc::apply(self, fx);
        result
    }

    /// Copies `data` into user memory of `task`.
    /// Checks that `len` bytes at `ptr` of `task` could be written by [`Kernel::copy_out`].
    pub fn check_writable(&mut self, task: TaskId, ptr: u64, len: usize) -> Result<(), Error> {
        let check = |k: &mut Kernel| {
            let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
            let mem = KernelMem {
                frames: &mut k.frames,
            };
            usercopy::check_writable(&t.space, &mem, ptr, len)
        };
        match check(self) {
            Err(Error::BadAddress) => {
                crate::vm::make_resident(self, task, ptr, len, true)?;
                check(self)
            }
            r => r,
        }
    }

    pub fn copy_out(&mut self, task: TaskId, ptr: u64, data: &[u8]) -> Result<(), Error> {
        let copy = |k: &mut Kernel| {
            let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
            let mut mem = KernelMem {
                frames: &mut k.frames,
            };
            usercopy::copy_to_user(&t.space, &mut mem, ptr, data)?;
            // The kernel's store is a write of each page, for page replacement and a
            // pager's flush (their sticky dirty bits).
            crate::vm::mark_stored(&t.space, &mem, ptr, data.len());
            Ok(())
        };
        match copy(self) {
            // Pages not there yet (or copy-on-write): made resident and writable as a
            // user store would, once.
            Err(Error::BadAddress) => {
                crate::vm::make_resident(self, task, ptr, data.len(), true)?;
                copy(self)
            }
            r => r,
        }
    }

    /// `ipc_buffer_set(addr)`: the page is made resident and wired for the thread first
    /// (the kernel caches its frame), and the wiring of the page it replaces goes.
    fn ipc_buffer_set(&mut self, cur: ThreadId, task: TaskId, addr: u64) -> Result<u64, Error> {
        use crate::vm::Owner;
        let old = self
            .threads
            .get(cur)
            .and_then(|th| th.ctx.ipc_buffer)
            .map(|(va, _)| va);
        if addr != 0 && addr.is_multiple_of(PAGE_SIZE) && old != Some(addr) {
            crate::vm::wire(self, task, addr, PAGE_SIZE, Owner::Thread(cur))?;
        }
        let r = crate::ipc::sys_ipc_buffer_set(self, cur, task, addr);
        let new = self
            .threads
            .get(cur)
            .and_then(|th| th.ctx.ipc_buffer)
            .map(|(va, _)| va);
        // Whichever of the two pages the thread no longer uses loses its wiring.
        for va in [old, Some(addr)] {
            match va {
                Some(va) if va != 0 && new != Some(va) => {
                    let _ = crate::vm::unwire(self, task, va, PAGE_SIZE, Owner::Thread(cur));
                }
                _ => {}
            }
        }
        r
    }

    fn sys_debug_write(&mut self, id: TaskId, ptr: u64, len: u64) -> Result<u64, Error> {
        if len > DEBUG_WRITE_MAX {
            return Err(Error::TooLarge);
        }
        let mut buf = [0u8; DEBUG_WRITE_MAX as usize];
        let out = buf.get_mut(..len as usize).ok_or(Error::TooLarge)?;
        self.copy_in(id, ptr, out)?;
        self.console_write(id, out);
        Ok(len)
    }

    fn sys_spawn(&mut self, id: TaskId, args: [u64; 6]) -> Result<u64, Error> {
        let [ptr, len, bootstrap, heap_limit, frame_limit, start] = args;
        if len > MODULE_NAME_MAX as u64 {
            return Err(Error::TooLarge);
        }
        let bootstrap = match bootstrap {
            0 => None,
            n => {
                let t = self.tasks.get(&id).ok_or(Error::InvalidArgument)?;
                Some(self.ipc.sendable_port(&t.names, n)?)
            }
        };
        let mut buf = [0u8; MODULE_NAME_MAX];
        let out = buf.get_mut(..len as usize).ok_or(Error::TooLarge)?;
        self.copy_in(id, ptr, out)?;
        let name = core::str::from_utf8(out).map_err(|_| Error::InvalidArgument)?;
        let mut owned = String::new();
        owned
            .try_reserve_exact(name.len())
            .map_err(|_| Error::NoMemory)?;
        owned.push_str(name);
        let name = owned;
        let parent = self
            .tasks
            .get(&id)
            .ok_or(Error::InvalidArgument)?
            .account
            .clone();
        let account = crate::quota::task_account(&parent, heap_limit, frame_limit)?;
        let start = match start {
            0 => None,
            at => Some(self.read_start(id, at)?),
        };
        let child = self.spawn_started(&name, bootstrap, account, start)?;
        if let Some(t) = self.tasks.get_mut(&child) {
            t.creator = Some(id);
        }
        self.close_line();
        kprintln!("[kernel] task {child} ({name}) started by task {id}");
        Ok(child)
    }

    /// The start-message data at user address `at` of task `id` (a length word, then the
    /// data: `baton_abi::start`): [`Error::TooLarge`] past `START_DATA_MAX`,
    /// [`Error::BadFormat`] when it does not decode, [`Error::BadAddress`] when unreadable.
    fn read_start(&mut self, id: TaskId, at: u64) -> Result<alloc::vec::Vec<u8>, Error> {
        use baton_abi::start::{Start, START_DATA_MAX, START_LEN_BYTES};
        let mut len = [0u8; START_LEN_BYTES];
        self.copy_in(id, at, &mut len)?;
        let len = u64::from_le_bytes(len);
        if len > START_DATA_MAX as u64 {
            return Err(Error::TooLarge);
        }
        let data = self.copy_in_vec(id, at.wrapping_add(START_LEN_BYTES as u64), len as usize)?;
        Start::decode(&data).map_err(|_| Error::BadFormat)?;
        Ok(data)
    }

    fn sys_module_info(&mut self, id: TaskId, index: u64, ptr: u64) -> Result<u64, Error> {
        let module = usize::try_from(index)
            .ok()
            .and_then(|i| self.modules.get(i))
            .ok_or(Error::NotFound)?;
        let name = module.name.as_bytes();
        let name_len = name.len().min(MODULE_NAME_MAX);
        // The wire form of `ModuleInfo` (repr(C): size, name_len, name).
        let mut bytes = [0u8; core::mem::size_of::<ModuleInfo>()];
        let (size_b, rest) = bytes.split_at_mut(8);
        let (len_b, name_b) = rest.split_at_mut(8);
        size_b.copy_from_slice(&(module.data.len() as u64).to_le_bytes());
        len_b.copy_from_slice(&(name_len as u64).to_le_bytes());
        for (dst, src) in name_b.iter_mut().zip(name.iter().take(name_len)) {
            *dst = *src;
        }
        let flags = if module.test { MODULE_TEST } else { 0 };
        self.copy_out(id, ptr, &bytes)?;
        Ok(flags)
    }

    /// `thread_create` in task `task` (also the task port's `TASK_THREAD_CREATE`).
    pub(crate) fn thread_create_in(
        &mut self,
        task: TaskId,
        entry: u64,
        stack_top: u64,
        arg: u64,
    ) -> Result<u64, Error> {
        let user = USER_MIN..USER_END;
        if !user.contains(&entry) || !(USER_MIN..=USER_END).contains(&stack_top) {
            return Err(Error::BadAddress);
        }
        let prio = self
            .threads
            .get(self.current_thread())
            .map(|t| t.priority)
            .unwrap_or(baton_abi::PRIORITY_DEFAULT as u8);
        let frame = TrapFrame::new_user(entry, stack_top, arg);
        self.create_thread(task, frame, prio).map(|t| t.0)
    }

    fn sys_wake(&mut self, task: TaskId, addr: u64, n: u64) -> Result<u64, Error> {
        if !word_key_ok(addr) {
            return Err(Error::InvalidArgument);
        }
        Ok(self.wake_key((task, addr), n))
    }

    /// Wakes up to `n` threads waiting on `key` (oldest first); how many.
    pub fn wake_key(&mut self, key: (TaskId, u64), n: u64) -> u64 {
        let mut woken = 0;
        while woken < n {
            let Some(t) = self.waits.wake_one(key) else {
                break;
            };
            woken += 1;
            let Some(th) = self.threads.get_mut(t) else {
                continue;
            };
            // Continuation recognition: the waiter only has to return from `wait`, so
            // finish its call here and let it go straight back to user mode.
            if th.cont.is_some_and(|c| c.finishes_syscall()) {
                th.ctx.frame.rax = 0;
                th.cont = Some(Continuation::new(Resume::UserReturn));
                self.stats.recognitions += 1;
            }
            // `unblock`, the thread already in hand.
            if let Some(timer) = th.timer.take() {
                self.timers.cancel(timer);
            }
            thread::thread_setrun(self, t);
        }
        woken
    }

    fn sys_stats(&mut self, task: TaskId, ptr: u64) -> Result<u64, Error> {
        let s: Stats = self.snapshot_stats();
        let words: [u64; STATS_WORDS] = s.to_words();
        let mut bytes = [0u8; STATS_WORDS * 8];
        for (chunk, w) in bytes.chunks_exact_mut(8).zip(words.iter()) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        self.copy_out(task, ptr, &bytes)?;
        Ok(0)
    }

    /// The thread a call of `task` names: `thread`, or the caller for 0; `NotFound` unless
    /// it is a live thread of `task`.
    fn own_thread(&self, task: TaskId, thread: u64) -> Result<ThreadId, Error> {
        let t = match thread {
            0 => return Ok(self.current_thread()),
            n => Key(n),
        };
        match self.threads.get(t) {
            Some(th) if th.home_task() == Some(task) => Ok(t),
            _ => Err(Error::NotFound),
        }
    }

    fn sys_set_priority(&mut self, task: TaskId, thread: u64, prio: u64) -> Result<u64, Error> {
        if prio > PRIORITY_MAX {
            return Err(Error::InvalidArgument);
        }
        let t = self.own_thread(task, thread)?;
        if thread == 0 && !crate::control::may_schedule_self(self, t) {
            return Err(Error::Denied);
        }
        let old = self.threads.get(t).ok_or(Error::NotFound)?.priority;
        if old != prio as u8 {
            thread::reserve_ready(self, prio as u8)?;
            thread::release_ready(self, old);
        }
        let Some(th) = self.threads.get_mut(t) else {
            return Err(Error::NotFound);
        };
        th.priority = prio as u8;
        if th.state == ThreadState::Ready {
            let cpu = th.cpu;
            if let Some(c) = self.cpus.get_mut(cpu) {
                if c.runq.remove(t, old) {
                    c.runq.push(t, prio as u8);
                }
            }
        }
        Ok(0)
    }
}

impl Kernel {
    fn sys_set_affinity(&mut self, task: TaskId, thread: u64, cpu: u64) -> Result<u64, Error> {
        let pin = match cpu {
            baton_abi::CPU_ANY => None,
            c => Some(
                usize::try_from(c)
                    .ok()
                    .filter(|&c| c < self.cpus.len())
                    .ok_or(Error::InvalidArgument)?,
            ),
        };
        let t = self.own_thread(task, thread)?;
        let Some(th) = self.threads.get_mut(t) else {
            return Err(Error::NotFound);
        };
        let Some(to) = pin else {
            th.pinned = false;
            return Ok(0);
        };
        th.pinned = true;
        let from = th.cpu;
        th.cpu = to;
        if th.state == ThreadState::Ready && from != to {
            let prio = th.priority;
            if self
                .cpus
                .get_mut(from)
                .is_some_and(|c| c.runq.remove(t, prio))
            {
                self.cpu_mut(to).runq.push(t, prio);
                kernel::poke_cpu(self, to, prio);
            }
        }
        Ok(0)
    }
}
