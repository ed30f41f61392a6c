//! SPIN's memory interfaces from user space (`docs/extensions.md`, "Memory interfaces"):
//! a page's state (`Translation.ExamineMapping`, `Dirty`) and the clock mark a
//! `Translation` handler left. Handlers themselves are installed with [`crate::spin`] on
//! the events `baton_abi::translation::EVENT_*`.

use crate::raw::{syscall0, syscall1};
use baton_abi::{decode_result, Error, Sys};

pub use baton_abi::translation::*;

/// The state word of the caller's page at `addr` (`STATE_*`; 0: no range covers it).
pub fn query(addr: u64) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinvmQuery as u64, addr) })
}

/// Whether the caller's page at `addr` was written through its current translation
/// (SPIN's `Dirty`).
pub fn dirty(addr: u64) -> Result<bool, Error> {
    query(addr).map(|s| s & STATE_DIRTY != 0)
}

/// The time-stamp counter a handler of this task last recorded with `baton.clock.mark`
/// (0 if none since the last call); clears it.
pub fn mark() -> u64 {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall0(Sys::SpinvmMark as u64) }).unwrap_or(0)
}
