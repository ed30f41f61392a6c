//! What the runtime needs from the system below it, in one place: starting a virtual
//! processor (a kernel thread), parking an idle one and waking it, and giving up the CPU.
//!
//! On Baton (`baton`) these are `baton-rt`'s threads and `wait`/`wake`; on
//! the host, where the runtime's logic is tested, they are `std` threads and a short sleep.
//!
//! Today each virtual processor is one kernel thread, so a user-level thread that blocks in
//! the kernel (a system call that waits) blocks its whole virtual processor. The kernel's
//! virtual-processor upcalls (Block and Unblock) are what will change that: this module
//! is where the runtime will take them.

use core::sync::atomic::AtomicU32;

/// Starts a virtual processor: a kernel thread running `f(arg)`.
#[cfg(baton)]
pub fn spawn_vp(f: fn(u64), arg: u64) -> Result<(), ()> {
    /// Bytes of each virtual processor's own stack (its scheduler loop and idle wait).
    const VP_STACK: usize = 16 * 1024;
    // A kernel thread's stack is never given back (baton-rt's rule): leak it.
    let stack = alloc::boxed::Box::leak(alloc::vec![0u8; VP_STACK].into_boxed_slice());
    baton_rt::thread::spawn(stack, f, arg)
        .map(|_| ())
        .map_err(|_| ())
}

/// Starts a virtual processor: a `std` thread running `f(arg)`.
#[cfg(not(baton))]
pub fn spawn_vp(f: fn(u64), arg: u64) -> Result<(), ()> {
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
