//! Safe wrappers around Baton's system calls, one per [`Sys`] number.
//!
//! Each returns a `Result` decoded with [`decode_result`], except where the call cannot
//! fail ([`yield_now`], [`clock_ns`]) or does not return ([`exit`]).
//!
//! # Invariants
//!
//! The kernel writes user memory only in [`module_info`], and only into a record this
//! module owns. The `*_raw` functions take caller-chosen addresses but only let the kernel
//! read them; the kernel validates every address, so they are safe whatever the address.

use baton_abi::{decode_result, Error, ModuleInfo, Sys, DEBUG_WRITE_MAX};

use crate::raw::{syscall0, syscall1, syscall2};

/// Writes `bytes` to the kernel console (the kernel prefixes each line with the task's
/// name). Longer buffers are split into calls of at most [`DEBUG_WRITE_MAX`] bytes.
/// Returns the number of bytes written.
pub fn debug_write(bytes: &[u8]) -> Result<usize, Error> {
    let mut done = 0usize;
    while let Some(rest) = bytes.get(done..).filter(|rest| !rest.is_empty()) {
        let chunk_len = rest.len().min(DEBUG_WRITE_MAX as usize);
        let written = debug_write_raw(rest.as_ptr() as u64, chunk_len as u64)?;
        if written == 0 {
            break;
        }
        done = done.saturating_add((written as usize).min(chunk_len));
    }
    Ok(done)
}

/// `debug_write` with an arbitrary address and length, for tests that pass bad ones.
///
/// Safe whatever the arguments: the kernel only reads the range, and validates it first
/// (an address that is not mapped user memory gives [`Error::BadAddress`], more than
/// [`DEBUG_WRITE_MAX`] bytes [`Error::TooLarge`]).
pub fn debug_write_raw(ptr: u64, len: u64) -> Result<u64, Error> {
    // SAFETY: `debug_write` only reads user memory, and the kernel validates the range.
    decode_result(unsafe { syscall2(Sys::DebugWrite as u64, ptr, len) })
}

/// Gives up the processor to the next ready thread, if there is one.
pub fn yield_now() {
    // SAFETY: `yield` touches no user memory.
    let _ = unsafe { syscall0(Sys::Yield as u64) };
}

/// Ends the calling task with `code`, which the kernel reports.
pub fn exit(code: i32) -> ! {
    // SAFETY: `exit` touches no user memory. The code is sign-extended to 64 bits.
    unsafe { syscall1(Sys::Exit as u64, i64::from(code) as u64) };
    // The kernel never returns from `exit`; if it did, fault rather than run on.
    // SAFETY: `ud2` raises an invalid-opcode exception, which ends this task.
    unsafe { core::arch::asm!("ud2", options(noreturn, nomem, nostack)) }
}

/// Nanoseconds since the machine was reset (from the kernel's calibrated TSC).
pub fn clock_ns() -> u64 {
    // SAFETY: `clock` touches no user memory.
    unsafe { syscall0(Sys::Clock as u64) }
}

/// Starts the boot module called `name` as a new task; returns its task id.
///
/// [`Error::NotFound`] if there is no such module, [`Error::BadFormat`] if it is not a
/// valid executable.
pub fn spawn(name: &str) -> Result<u64, Error> {
    spawn_raw(name.as_ptr() as u64, name.len() as u64)
}

/// `spawn` with an arbitrary name address and length, for tests that pass bad ones.
///
/// Safe whatever the arguments: the kernel only reads the name, and validates the range
/// first ([`Error::BadAddress`] if it is not mapped user memory).
pub fn spawn_raw(name_ptr: u64, name_len: u64) -> Result<u64, Error> {
    // SAFETY: `spawn` only reads user memory, and the kernel validates the range.
    decode_result(unsafe { syscall2(Sys::Spawn as u64, name_ptr, name_len) })
}

/// Describes boot module `index`; [`Error::NotFound`] past the last one.
pub fn module_info(index: usize) -> Result<ModuleInfo, Error> {
    let mut info = ModuleInfo::empty();
    let ptr = &raw mut info;
    // SAFETY: the kernel writes one `ModuleInfo` through `ptr`, which points to a local
    // record of exactly that type that nothing else borrows; every bit pattern is a valid
    // `ModuleInfo` (integers and bytes only).
    let raw = unsafe { crate::raw::syscall2(Sys::ModuleInfo as u64, index as u64, ptr as u64) };
    decode_result(raw).map(|_| info)
}
