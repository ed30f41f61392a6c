//! Virtual memory: wrappers for the `vm_*` calls (`docs/abi.md`, `docs/vm.md`).
//!
//! Memory comes from the task's address map: [`allocate`] reserves a range (its frames are
//! charged at once, taken at first touch), [`deallocate`] gives it back, [`protect`],
//! [`inherit`], [`wire`] and [`unwire`] change its attributes, and [`query`] and
//! [`stats`] say what the map and the fault counters hold.
//!
//! # Invariants
//! The kernel writes user memory only in [`query`] and [`stats`], into records this module
//! owns. The calls that can take memory away from under Rust references
//! ([`deallocate`], [`protect`]) are `unsafe`.

use crate::raw::{syscall2, syscall3, syscall6};
use baton_abi::vm::{VmRegion, VmStats, STATS_SYSTEM, STATS_TASK, VM_ANYWHERE};
use baton_abi::{decode_result, Error, Sys};

pub use baton_abi::vm::{
    INHERIT_COPY, INHERIT_NONE, INHERIT_SHARE, PROT_EXECUTE, PROT_READ, PROT_WRITE,
};

/// Read and write.
pub const PROT_RW: u64 = PROT_READ | PROT_WRITE;

/// Allocates `len` bytes (a page multiple) of zero-filled memory with protection `prot`,
/// at `addr` or, with `None`, wherever there is room; its address.
pub fn allocate(addr: Option<u64>, len: u64, prot: u64) -> Result<u64, Error> {
    let at = addr.unwrap_or(VM_ANYWHERE);
    // SAFETY: the kernel only adds memory where there was none.
    decode_result(unsafe { syscall3(Sys::VmAllocate as u64, at, len, prot) })
}

/// Deallocates every mapping in `[addr, addr + len)`.
///
/// # Safety
/// No Rust reference may point into the range (its memory disappears).
pub unsafe fn deallocate(addr: u64, len: u64) -> Result<(), Error> {
    // SAFETY: forwarded to the caller.
    decode_result(unsafe { syscall2(Sys::VmDeallocate as u64, addr, len) }).map(|_| ())
}

/// Sets the protection of `[addr, addr + len)` (with `set_max`, its maximum protection).
///
/// # Safety
/// No Rust reference may rely on an access the new protection takes away.
pub unsafe fn protect(addr: u64, len: u64, prot: u64, set_max: bool) -> Result<(), Error> {
    // SAFETY: forwarded to the caller.
    let r = unsafe {
        syscall6(
            Sys::VmProtect as u64,
            addr,
            len,
            prot,
            u64::from(set_max),
            0,
            0,
        )
    };
    decode_result(r).map(|_| ())
}

/// Sets what a fork-style copy gives a child for `[addr, addr + len)`.
pub fn inherit(addr: u64, len: u64, inheritance: u64) -> Result<(), Error> {
    // SAFETY: changes no memory the task sees.
    decode_result(unsafe { syscall3(Sys::VmInherit as u64, addr, len, inheritance) }).map(|_| ())
}

/// Wires `[addr, addr + len)`: every page resident, and kept so until [`unwire`].
pub fn wire(addr: u64, len: u64) -> Result<(), Error> {
    // SAFETY: changes no memory the task sees (pages arrive zero-filled as on a touch).
    decode_result(unsafe { syscall2(Sys::VmWire as u64, addr, len) }).map(|_| ())
}

/// Undoes one [`wire`] of exactly `[addr, addr + len)`.
pub fn unwire(addr: u64, len: u64) -> Result<(), Error> {
    // SAFETY: changes no memory the task sees.
    decode_result(unsafe { syscall2(Sys::VmUnwire as u64, addr, len) }).map(|_| ())
}

/// The region containing `addr`, or the next one above.
pub fn query(addr: u64) -> Result<VmRegion, Error> {
    let mut raw = [0u8; baton_abi::vm::VM_REGION_SIZE];
    // SAFETY: the kernel writes `VM_REGION_SIZE` bytes into `raw`, a local buffer of
    // exactly that size that nothing else borrows.
    let r = unsafe { syscall2(Sys::VmQuery as u64, addr, raw.as_mut_ptr() as u64) };
    decode_result(r)?;
    VmRegion::from_bytes(&raw).ok_or(Error::InvalidArgument)
}

/// [`query`] with a caller-chosen output address, for tests that pass bad ones.
pub fn query_raw(addr: u64, out: u64) -> Result<u64, Error> {
    // SAFETY: the kernel validates `out` (a user address it can write, else `BadAddress`
    // with nothing written); the caller passes addresses no Rust reference covers.
    decode_result(unsafe { syscall2(Sys::VmQuery as u64, addr, out) })
}

fn stats_of(scope: u64) -> Result<VmStats, Error> {
    let mut raw = [0u8; baton_abi::vm::VM_STATS_SIZE];
    // SAFETY: the kernel writes `VM_STATS_SIZE` bytes into `raw`, a local buffer of exactly
    // that size that nothing else borrows.
    let r = unsafe { syscall2(Sys::VmStats as u64, scope, raw.as_mut_ptr() as u64) };
    decode_result(r)?;
    VmStats::from_bytes(&raw).ok_or(Error::InvalidArgument)
}

/// The calling task's fault counts and memory.
pub fn stats() -> Result<VmStats, Error> {
    stats_of(STATS_TASK)
}

/// The system's fault counts and memory.
pub fn system_stats() -> Result<VmStats, Error> {
    stats_of(STATS_SYSTEM)
}

/// [`stats`] with a raw scope, for tests of bad arguments.
pub fn stats_raw(scope: u64) -> Result<VmStats, Error> {
    stats_of(scope)
}

pub use baton_abi::vm::{VM_COPY_CREATE, VM_COPY_DELETE};

/// `vm_copy` (Accent's MoveWords): copies the `len` bytes at `src` of task `src_task` by
/// value into task `dst_task` (0 for the caller, else a send right to a task's port): with
/// [`VM_COPY_CREATE`] into new memory wherever there is room, else over `dst`; with
/// [`VM_COPY_DELETE`] the source's whole pages go. Returns the data's address.
///
/// # Safety
/// With [`VM_COPY_DELETE`], or without [`VM_COPY_CREATE`] into the caller, memory changes
/// under any Rust reference into the ranges.
pub unsafe fn copy(
    src_task: u64,
    src: u64,
    len: u64,
    dst_task: u64,
    dst: u64,
    flags: u64,
) -> Result<u64, Error> {
    // SAFETY: forwarded to the caller.
    decode_result(unsafe { syscall6(Sys::VmCopy as u64, src_task, src, len, dst_task, dst, flags) })
}
