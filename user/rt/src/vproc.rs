//! Virtual processors with Block and Unblock upcalls (`baton_abi::vproc`, `docs/abi.md`):
//! the system calls, for a user-level runtime such as `sting`.

use crate::raw::{syscall1, syscall2, syscall3};
use baton_abi::exception::UserRegs;
use baton_abi::vproc::{VpConfig, VpEvent};
use baton_abi::{decode_result, Error, Sys};
use core::sync::atomic::AtomicU32;

/// Makes the calling thread the carrier of a new virtual processor entered through
/// upcalls as `cfg` says; returns its id.
pub fn vp_create(cfg: &VpConfig) -> Result<u64, Error> {
    vp_create_raw(core::ptr::from_ref(cfg) as u64)
}

/// [`vp_create`] with an arbitrary address, for tests that pass bad ones (the kernel only
/// reads there, after checking it).
pub fn vp_create_raw(at: u64) -> Result<u64, Error> {
    // SAFETY: the kernel only reads the configuration, after checking the address.
    decode_result(unsafe { syscall1(Sys::VpCreate as u64, at) })
}

/// Gives virtual processor `vp` `n` spare kernel threads; returns how many it has.
pub fn vp_spares(vp: u64, n: u64) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall2(Sys::VpSpares as u64, vp, n) })
}

/// By the carrier, when its runtime has nothing to run: as [`crate::wait`], but an Unblock
/// event is delivered as an upcall first (this call then returns 0 when the runtime
/// resumes the event's `stopped` context).
pub fn vp_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) -> Result<(), Error> {
    vp_wait_raw(word.as_ptr() as u64, expected, timeout_ns)
}

/// [`vp_wait`] with an arbitrary address.
pub fn vp_wait_raw(addr: u64, expected: u32, timeout_ns: u64) -> Result<(), Error> {
    // SAFETY: the kernel only reads the word, after checking the address; an upcall
    // delivered instead returns here through the runtime with every register but `rax`,
    // `rcx` and `r11` as they were, as a system call does.
    let raw = unsafe { syscall3(Sys::VpWait as u64, addr, u64::from(expected), timeout_ns) };
    decode_result(raw).map(|_| ())
}

/// Moves queued Unblock events of the calling carrier's virtual processor into `buf`;
/// returns how many.
pub fn vp_take(buf: &mut [VpEvent]) -> Result<usize, Error> {
    let max = buf.len().min(baton_abi::vproc::TAKE_MAX as usize) as u64;
    // SAFETY: `buf` is writable memory of `max` events.
    let raw = unsafe { syscall2(Sys::VpTake as u64, buf.as_mut_ptr() as u64, max) };
    decode_result(raw).map(|n| n as usize)
}

/// [`vp_take`] with an arbitrary buffer, for tests that pass bad ones.
///
/// # Safety
/// The kernel may write `max` events at `buf`: it must be memory the caller may lose.
pub unsafe fn vp_take_raw(buf: u64, max: u64) -> Result<u64, Error> {
    // SAFETY: the caller's promise.
    decode_result(unsafe { syscall2(Sys::VpTake as u64, buf, max) })
}

/// Ends virtual processor `vp`.
pub fn vp_destroy(vp: u64) -> Result<(), Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::VpDestroy as u64, vp) }).map(|_| ())
}

/// Turns on Checkpoint upcalls for virtual processor `vp`, with a quantum of
/// `quantum_ns` (0: off).
pub fn vp_preempt(vp: u64, quantum_ns: u64) -> Result<(), Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall2(Sys::VpPreempt as u64, vp, quantum_ns) }).map(|_| ())
}

/// Asks for a Checkpoint upcall on virtual processor `vp` at once (an inter-processor
/// interrupt when its carrier runs on another CPU), whatever its quantum.
pub fn vp_interrupt(vp: u64) -> Result<(), Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::VpInterrupt as u64, vp) }).map(|_| ())
}

/// By a carrier: continues at `regs` (every register restored). Returns only on an error.
///
/// # Safety
/// `regs` must be a context of this task that nothing else runs (a thread a Checkpoint
/// upcall stopped, say): it continues as if it had never stopped, and the calling context
/// is abandoned.
pub unsafe fn vp_resume(regs: &UserRegs) -> Error {
    // SAFETY: the caller's promise; the kernel only reads the block.
    unsafe { vp_resume_raw(core::ptr::from_ref(regs) as u64) }
}

/// [`vp_resume`] with an arbitrary address, for tests that pass bad ones.
///
/// # Safety
/// As [`vp_resume`], if the block there is readable and good.
pub unsafe fn vp_resume_raw(at: u64) -> Error {
    // SAFETY: the caller's promise.
    let raw = unsafe { syscall1(Sys::VpResume as u64, at) };
    match decode_result(raw) {
        Err(e) => e,
        Ok(_) => Error::InvalidArgument,
    }
}

/// How many times handlers the calling task installed on `Strand` event `event` ran
/// (low 32 bits) and vetoed (high 32 bits).
pub fn strand_count(event: u64) -> Result<(u64, u64), Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::StrandCount as u64, event) })
        .map(|v| (v & 0xffff_ffff, v >> 32))
}
