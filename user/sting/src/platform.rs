//! What the runtime needs from the system below it, in one place: starting a virtual
//! processor (a kernel thread), parking an idle one and waking it, and giving up the CPU.
//!
//! On Baton (`baton`) these are `baton-rt`'s threads and `wait`/`wake`; on
//! the host, where the runtime's logic is tested, they are `std` threads and a short sleep.
//!
//! Each virtual processor is one kernel thread, so a user-level thread that blocks in the
//! kernel (a system call that waits) blocks its whole virtual processor, unless the runtime
//! runs with the kernel's Block and Unblock upcalls (`crate::upcall`).

use core::sync::atomic::AtomicU32;

/// Bytes of each virtual processor's own stack (its scheduler loop and idle wait).
#[cfg(baton)]
const VP_STACK: usize = 16 * 1024;

/// The stacks of virtual processors' kernel threads made so far (their bases), each with
/// the kernel thread that last ran on it. A kernel thread's stack is never given back
/// (baton-rt's rule: the thread runs on it until the kernel has ended it), but a stack
/// whose thread the kernel no longer knows is free, and a later runtime's processor takes
/// it: runs one after another then use the same stacks instead of leaking one for each
/// processor but the first on each run (whose pages, touched, stayed charged to the task:
/// its memory and the kernel's page records for it grew with every run).
#[cfg(baton)]
static VP_STACKS: crate::spin::SpinLock<alloc::vec::Vec<(usize, u64)>> =
    crate::spin::SpinLock::new(alloc::vec::Vec::new());

/// Starts a virtual processor: a kernel thread running `f(arg)`, after telling `stack`
/// the range of its stack.
#[cfg(baton)]
pub fn spawn_vp(f: fn(u64), arg: u64, stack_range: impl FnOnce(usize, usize)) -> Result<(), ()> {
    let mut stacks = VP_STACKS.lock();
    // A stack whose thread has ended: the kernel no longer finds the thread (thread ids are
    // never reused).
    let free = stacks
        .iter()
        .position(|&(_, t)| baton_rt::sys::thread_cpu_ns(t) == Err(baton_rt::Error::NotFound));
    let (slot, stack) = match free {
        Some(i) => {
            let base = stacks.get(i).map_or(0, |s| s.0);
            // SAFETY: `base` is a block of `VP_STACK` bytes leaked below for a virtual
            // processor's stack and reached only through this list, under its lock; the
            // thread that last ran on it has ended (the kernel no longer knows it), so
            // nothing uses those bytes any more.
            let stack = unsafe { core::slice::from_raw_parts_mut(base as *mut u8, VP_STACK) };
            (Some(i), stack)
        }
        None => {
            if stacks.try_reserve(1).is_err() {
                return Err(());
            }
            let stack = alloc::boxed::Box::leak(alloc::vec![0u8; VP_STACK].into_boxed_slice());
            (None, stack)
        }
    };
    let lo = stack.as_ptr() as usize;
    stack_range(lo, lo + stack.len());
    let started = baton_rt::thread::spawn(stack, f, arg);
    // A stack no thread started on is free (no thread has an id of `u64::MAX`).
    let t = *started.as_ref().unwrap_or(&u64::MAX);
    match slot.and_then(|i| stacks.get_mut(i)) {
        Some(s) => s.1 = t,
        // Room was reserved above.
        None => stacks.push((lo, t)),
    }
    started.map(|_| ()).map_err(|_| ())
}

/// Starts a virtual processor: a `std` thread running `f(arg)`.
#[cfg(not(baton))]
pub fn spawn_vp(f: fn(u64), arg: u64, _stack_range: impl FnOnce(usize, usize)) -> Result<(), ()> {
    std::thread::Builder::new()
        .spawn(move || f(arg))
        .map(|_| ())
        .map_err(|_| ())
}

/// Parks the calling virtual processor while `word` holds `expected`, for at most
/// `timeout_ns` (it may return early: the caller re-checks).
#[cfg(baton)]
pub fn park(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let _ = baton_rt::wait(word, expected, timeout_ns);
}

/// Parks the calling virtual processor briefly (the host's tests poll).
#[cfg(not(baton))]
pub fn park(word: &AtomicU32, expected: u32, _timeout_ns: u64) {
    if word.load(core::sync::atomic::Ordering::Acquire) == expected {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

/// Wakes a virtual processor parked on `word`.
#[cfg(baton)]
pub fn unpark(word: &AtomicU32) {
    let _ = baton_rt::wake(word, 1);
}

/// Wakes a virtual processor parked on `word` (the host's park polls: nothing to do).
#[cfg(not(baton))]
pub fn unpark(_word: &AtomicU32) {}

/// How many CPUs the machine has (at least 1).
#[cfg(baton)]
pub fn cpus() -> usize {
    baton_rt::sys::stats().map_or(1, |s| s.cpus.max(1) as usize)
}

/// How many CPUs the host has (at least 1).
#[cfg(not(baton))]
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Gives the CPU to another kernel thread (a spinner's last resort).
#[cfg(baton)]
pub fn relax_hard() {
    baton_rt::yield_now();
}

/// Gives the CPU to another kernel thread (a spinner's last resort).
#[cfg(not(baton))]
pub fn relax_hard() {
    std::thread::yield_now();
}

/// Whether the program's heap lock is free (a Checkpoint upcall does not switch away from
/// a thread that may hold it).
#[cfg(baton)]
pub fn heap_free() -> bool {
    baton_rt::heap::lock_is_free()
}

/// Whether the program's heap lock is free: on the host no Checkpoint comes.
#[cfg(not(baton))]
pub fn heap_free() -> bool {
    true
}
