//! What a debugger attached to a hung kernel can ask it for (the core's; it names no
//! object family).
//!
//! `cargo xtask fuzz` (and anyone with gdb on QEMU's stub) calls [`baton_debug_threads`]
//! when a boot stops making progress: the kernel prints every thread on the serial line —
//! its task, scheduling state and what it waits on, its continuation, whether a timeout is
//! pending, its migrating depth and control state — so a hang names the threads that wait
//! and on what. The kernel never calls it itself.

use crate::arch::serial::kprintln;
use crate::kernel;

/// Keeps [`baton_debug_threads`] in the image: nothing in the kernel calls it, and the link
/// drops what nothing refers to; the linker script keeps this section (`.data.baton_keep`).
#[used]
#[link_section = ".data.baton_keep"]
static KEEP: extern "C" fn() = baton_debug_threads;

/// Prints every thread (module documentation). Does nothing when the big kernel lock is
/// taken: a CPU in the middle of a kernel operation would see the tables change under it.
#[no_mangle]
pub extern "C" fn baton_debug_threads() {
    if !kernel::try_lock() {
        kprintln!("[kernel] debugger: the kernel lock is held; no thread report");
        return;
    }
    // SAFETY: the lock is held (taken just above) and released before returning; the
    // reference is not kept past it.
    let k = unsafe { kernel::kernel() };
    kprintln!("[kernel] debugger: {} threads", k.threads.len());
    for (id, th) in k.threads.iter() {
        kprintln!(
            "[kernel] debugger: thread {:#x} task {:?} prio {} cpu {}{} state {:?} cont {:?} timer {} depth {} ctl {:?}{}",
            id.0,
            th.ctx.task,
            th.priority,
            th.cpu,
            if th.pinned { " (pinned)" } else { "" },
            th.state,
            th.cont.map(|c| c.point),
            th.timer.is_some(),
            th.below.len(),
            th.ctx.ctl,
            if th.kill_pending { " kill pending" } else { "" },
        );
    }
    for c in 0..k.cpus.len() {
        let cpu = k.cpu(c);
        kprintln!(
            "[kernel] debugger: CPU {c}: ready {} halted {}",
            cpu.runq.len(),
            cpu.halted
        );
    }
    kernel::unlock();
}
