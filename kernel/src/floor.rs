//! The floor cross-address-space call: a hand-written minimal call from one task into
//! another and back, the floor of every RPC (`floor.xas.call` in `docs/benchmarks.md`).
//!
//! A partner task registers an entry point and a stack (`floor_xas_register`). A thread
//! of another task calls it (`floor_xas_call(partner, arg)`): the kernel keeps the caller's
//! `rip`, `rsp` and `rflags`, loads the partner's address space and `sysretq`s to the
//! entry on the partner's stack. The *same thread* runs the partner's code; the partner's
//! `floor_xas_return(value)` loads the caller's space again and `sysretq`s behind the
//! call with `rax = value`. No thread is blocked, woken or switched, and no message is
//! built: what is left is two system calls, two CR3 loads and the bookkeeping below.
//!
//! The other floor calls (`floor_minimal`, `floor_full`, `floor_space`,
//! `floor_fault_arm`) and the page-fault window are assembly only, in
//! `arch::x86_64::trap`.
//!
//! # Invariants
//! - Everything here runs under the big kernel lock. The calls in progress are per CPU
//!   (`kern::floor::Xas`, and `floor_call` in the per-CPU area, which the `syscall` entry
//!   and [`crate::kernel::on_trap`] test); the registrations are global.
//! - A call never survives a kernel entry: any interrupt, exception or system call on a
//!   CPU in a call, other than the partner's `floor_xas_return`, first ends the call
//!   ([`interrupt`]): the thread is back in its caller's space, at its caller's `rip`,
//!   with `Interrupted`, before anything else looks at it. So the scheduler, the exception
//!   path and every system call only ever see a thread in its own task's address space.
//! - While a call is in its address space, the partner task counts one thread more
//!   (`Task::threads`), so its address space cannot be freed under the borrowing CPU;
//!   the call's end gives the count back and removes the task if that was the last.
//! - The partner's space is loaded as [`crate::kernel::switch_in`] loads a task's (PCID
//!   owner kept), and `mem_unmap` shoots down the CPUs in a call to the task too.

use crate::arch::{cpu, gdt};
use crate::kernel::{self, Kernel, TaskId};
use crate::thread::ThreadId;
use baton_abi::floor::{FLOOR_XAS_CALL, FLOOR_XAS_REGISTER, FLOOR_XAS_RETURN};
use baton_abi::Error;
use kern::floor::Call;
use kern::frame::PhysAddr;

/// `rflags` the partner's entry starts with: interrupts on, nothing else.
const ENTRY_RFLAGS: u64 = 0x202;

/// The system-call entry's call into this module (`arch::trap`'s assembly), for the
/// cross-address-space floor calls and every system call of a thread in one.
#[no_mangle]
extern "C" fn floor_dispatch(number: u64) {
    on_syscall(number);
}

/// Entry for the cross-address-space floor calls, and for every system call made by a
/// thread in a call, with the call `number`; the caller's registers are in its frame.
pub fn on_syscall(number: u64) -> ! {
    kernel::lock();
    // SAFETY: the lock is held.
    let k = unsafe { kernel::kernel() };
    let cpu = gdt::this_cpu();
    let cur = k.cpu(cpu).current;
    if gdt::in_floor_call() {
        if number == FLOOR_XAS_RETURN {
            let value = k.threads.get(cur).map_or(0, |t| t.ctx.frame.rdi);
            let _ = end(k, cpu, value);
            kernel::leave_to_user();
        }
        // Any other system call from the partner's code ends the call.
        interrupt(k, cpu);
        kernel::finish_entry(k, false, None);
    }
    let result = match number {
        FLOOR_XAS_REGISTER => register(k, cur),
        FLOOR_XAS_CALL => match call(k, cpu, cur) {
            Ok(()) => kernel::leave_to_user(),
            Err(e) => Err(e),
        },
        // A return with no call in progress (or a number the entry never sends here).
        _ => Err(Error::InvalidArgument),
    };
    let raw = match result {
        Ok(v) => v,
        Err(e) => e.to_raw(),
    };
    kernel::finish_entry(k, false, Some(raw))
}

/// `floor_xas_register(entry, stack, caller, host_priv)`: the calling task registers
/// itself as the partner of task `caller` (0: the task that spawned it), with the
/// host-privilege right's authority (not needed to unregister). The call itself then
/// checks only that its caller is that task (`kern::floor::Xas::begin`).
fn register(k: &mut Kernel, cur: ThreadId) -> Result<u64, Error> {
    let th = k.threads.get(cur).ok_or(Error::InvalidArgument)?;
    let task = th.ctx.task.ok_or(Error::InvalidArgument)?;
    let f = &th.ctx.frame;
    let (entry, stack, caller, host_priv) = (f.rdi, f.rsi, f.rdx, f.r10);
    if entry == 0 && stack == 0 {
        return k.floor.register(task, 0, 0, 0).map(|()| 0);
    }
    crate::kobject::check_host_priv(k, cur, host_priv)?;
    let caller = match caller {
        0 => k
            .tasks
            .get(&task)
            .and_then(|t| t.creator)
            .ok_or(Error::NotFound)?,
        id => id,
    };
    k.floor.register(task, entry, stack, caller).map(|()| 0)
}

/// `floor_xas_call(partner, arg)`: checks, then enters the partner. On `Ok` the thread's
/// frame holds the partner's entry and the partner's space is loaded.
fn call(k: &mut Kernel, cpu: usize, cur: ThreadId) -> Result<(), Error> {
    let th = k.threads.get(cur).ok_or(Error::InvalidArgument)?;
    let caller = th.ctx.task.ok_or(Error::InvalidArgument)?;
    let f = &th.ctx.frame;
    let (partner, arg) = (f.rdi, f.rsi);
    let (root, pcid) = match k.tasks.get(&partner) {
        Some(t) if t.ending.is_none() => (t.space.root(), t.pcid),
        _ => return Err(Error::NotFound),
    };
    let call = Call {
        thread: cur,
        caller,
        partner,
        rip: f.rip,
        rsp: f.rsp,
        rflags: f.rflags,
    };
    let p = k.floor.begin(cpu, call)?;
    if let Some(t) = k.tasks.get_mut(&partner) {
        t.threads += 1;
    }
    load_space(k, cpu, partner, root, pcid);
    gdt::set_floor_call(true);
    if let Some(th) = k.threads.get_mut(cur) {
        let f = &mut th.ctx.frame;
        f.rip = p.entry;
        f.rsp = p.stack;
        f.rflags = ENTRY_RFLAGS;
        f.rdi = arg;
        f.rax = 0;
    }
    Ok(())
}

/// Ends the call in progress on `cpu` with `Interrupted` (another kernel entry came
/// first). The running thread's frame must hold its registers of this entry.
///
/// The partner did not choose to return, so nothing it held may reach the caller: every
/// general register but the ones the call gives back (`rip`, `rsp`, `rflags`, `rax`) is
/// zeroed, and the floating-point and vector registers go back to their initial state
/// (the partner ran on this thread, so they are its values). A return by
/// `floor_xas_return` keeps them: that is the partner's own answer.
pub fn interrupt(k: &mut Kernel, cpu: usize) {
    let Some(call) = end(k, cpu, Error::Interrupted.to_raw()) else {
        return;
    };
    if let Some(th) = k.threads.get_mut(call) {
        scrub(&mut th.ctx.frame);
    }
    if let Some(c) = k.cpus.get(cpu) {
        crate::fpu::activation_changed(c);
    }
}

/// Zeroes the general registers of `f` that an interrupted call does not give back.
fn scrub(f: &mut crate::arch::trap::TrapFrame) {
    for r in [
        &mut f.rbx, &mut f.rcx, &mut f.rdx, &mut f.rsi, &mut f.rdi, &mut f.rbp, &mut f.r8,
        &mut f.r9, &mut f.r10, &mut f.r11, &mut f.r12, &mut f.r13, &mut f.r14, &mut f.r15,
    ] {
        *r = 0;
    }
}

/// Ends the call in progress on `cpu`: the caller's space again, its `rip`, `rsp` and
/// `rflags`, `rax = value`; the partner's borrowed thread count given back. Returns the
/// calling thread, `None` when no call was in progress.
fn end(k: &mut Kernel, cpu: usize, value: u64) -> Option<ThreadId> {
    gdt::set_floor_call(false);
    let call = k.floor.end(cpu)?;
    let mut space = None;
    if let Some(th) = k.threads.get_mut(call.thread) {
        let f = &mut th.ctx.frame;
        f.rip = call.rip;
        f.rsp = call.rsp;
        f.rflags = call.rflags;
        f.rax = value;
        space = th.ctx.space;
    }
    match space {
        Some((root, pcid)) => load_space(k, cpu, call.caller, root, pcid),
        None => {
            let root = k.kernel_root;
            load_space(k, cpu, 0, root, 0);
        }
    }
    let last = match k.tasks.get_mut(&call.partner) {
        Some(t) => {
            t.threads = t.threads.saturating_sub(1);
            t.threads == 0
        }
        None => false,
    };
    if last {
        k.remove_task(call.partner);
    }
    Some(call.thread)
}

/// Task `id`'s floor entry, if it registered one, goes (its rights are released).
pub fn unregister(k: &mut Kernel, id: TaskId) {
    k.floor.unregister(id);
}

/// Task `id` is ending: its registration goes, and the CPUs in a call to it are made to
/// enter the kernel (which ends their calls).
pub fn task_ending(k: &mut Kernel, id: TaskId) {
    // The CPUs as a bit mask (at most 64; nothing allocated on a task's end).
    let cpus: u64 = k
        .floor
        .forget(id)
        .filter(|&c| c < 64)
        .fold(0, |mask, c| mask | 1 << c);
    for cpu in (0..64).filter(|c| cpus & (1 << c) != 0) {
        kernel::poke_cpu(k, cpu, u8::MAX);
    }
}

/// Loads the address space `root` (PCID `pcid`) of task `task` on `cpu` unless it is
/// loaded, keeping the PCID's TLB entries when this CPU's last user of the PCID was that
/// task (as [`kernel::switch_in`] does).
fn load_space(k: &mut Kernel, cpu: usize, task: TaskId, root: PhysAddr, pcid: u16) {
    let Some(c) = k.cpus.get_mut(cpu) else {
        return;
    };
    if c.loaded_root == root {
        return;
    }
    let slot = usize::from(pcid);
    let keep = pcid == 0 || c.pcid_owner.get(slot) == Some(&task);
    // SAFETY: `root` is the root of a live task's address space (the caller's, whose
    // thread runs here, or the partner's, checked alive under the lock and kept alive by
    // the call's thread count) or the kernel's own; every task's kernel half is the
    // kernel's.
    unsafe { cpu::switch_space(root.0, pcid, keep) };
    if pcid != 0 {
        if let Some(owner) = c.pcid_owner.get_mut(slot) {
            *owner = task;
        }
    }
    c.loaded_root = root;
}
