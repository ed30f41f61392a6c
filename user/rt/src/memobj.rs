//! Memory objects as capabilities: wrappers for calls 110–119 (`docs/abi.md`,
//! `docs/vm.md`, "Memory objects as capabilities").
//!
//! An object is named by a send right ([`create`], [`physical`], [`dma`]); [`map`] puts a
//! window of it in the address space, shared or copy-on-write; [`restrict`] derives a
//! right that maps at most a lower protection; dropping the last right
//! (`baton_rt::sys::cap_drop`) leaves the mappings their memory. [`read`] and [`write`]
//! reach another task's memory through its task port; [`wait_shared`] and
//! [`wake_shared`] are `wait`/`wake` between tasks that map one object.
//!
//! # Invariants
//! The kernel writes user memory only in [`info`] (a record this module owns) and
//! [`read`] (into the slice given). The calls that can make memory appear under Rust
//! references ([`map_raw`] at a fixed address) or change memory another task's Rust code
//! owns ([`write`]) leave that to their callers.

use crate::raw::{syscall2, syscall3, syscall6};
use baton_abi::{decode_result, Error, Sys};
use core::sync::atomic::AtomicU32;

pub use baton_abi::memobj::{
    map_flags, MemobjInfo, DMA_MAX, KIND_ANONYMOUS, KIND_DMA, KIND_PHYSICAL, PHYS_UNCACHED, RW_MAX,
    SIZE_MAX,
};

/// A new anonymous object of `size` bytes (a page multiple); the name of a send right.
pub fn create(size: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall2(Sys::MemobjCreate as u64, size, 0) })
}

/// Maps `[offset, offset + len)` of object `name` wherever there is room, with the
/// `vm_map` `flags` ([`map_flags`]); its address. Memory appears only where there was
/// none.
pub fn map(name: u64, len: u64, offset: u64, flags: u64) -> Result<u64, Error> {
    // SAFETY: at `VM_ANYWHERE` the kernel only adds memory where there was none.
    unsafe { map_raw(name, 0, len, offset, flags) }
}

/// [`map`] at `addr` (0: anywhere).
///
/// # Safety
/// A fixed `addr` must be a range nothing maps (the kernel refuses a taken range with
/// `NoSpace`); as [`map`] otherwise.
pub unsafe fn map_raw(
    name: u64,
    addr: u64,
    len: u64,
    offset: u64,
    flags: u64,
) -> Result<u64, Error> {
    // SAFETY: forwarded to the caller.
    decode_result(unsafe { syscall6(Sys::VmMap as u64, name, addr, len, offset, flags, 0) })
}

/// A right to the same object whose mappings allow at most `max_prot`.
pub fn restrict(name: u64, max_prot: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall2(Sys::MemobjRestrict as u64, name, max_prot) })
}

/// An object over the physical range `[base, base + size)` ([`PHYS_UNCACHED`] in
/// `flags`), with the host-privilege right `host_priv`.
pub fn physical(base: u64, size: u64, flags: u64, host_priv: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe {
        syscall6(
            Sys::MemobjPhysical as u64,
            base,
            size,
            flags,
            host_priv,
            0,
            0,
        )
    })
}

/// A DMA buffer of `size` bytes of contiguous frames, with the host-privilege right.
pub fn dma(size: u64, host_priv: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall2(Sys::MemobjDma as u64, size, host_priv) })
}

/// Releases the quarantined DMA buffers of ended tasks (the caller has reset the devices
/// they drove); the number of pages freed. Needs the host-privilege right.
pub fn dma_quarantine_release(host_priv: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall2(Sys::DmaQuarantineRelease as u64, host_priv, 0) })
}

/// Pages of DMA buffers of ended tasks held in quarantine now. Needs the host-privilege
/// right.
pub fn dma_quarantined(host_priv: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall2(Sys::DmaQuarantined as u64, host_priv, 0) })
}

/// What object `name` is.
pub fn info(name: u64) -> Result<MemobjInfo, Error> {
    let mut raw = [0u8; baton_abi::memobj::INFO_SIZE];
    // SAFETY: the kernel writes `INFO_SIZE` bytes into `raw`, a local buffer of exactly
    // that size that nothing else borrows.
    let r = unsafe { syscall2(Sys::MemobjInfo as u64, name, raw.as_mut_ptr() as u64) };
    decode_result(r)?;
    MemobjInfo::from_bytes(&raw).ok_or(Error::InvalidArgument)
}

/// [`info`] with a caller-chosen output address, for tests that pass bad ones.
pub fn info_raw(name: u64, out: u64) -> Result<u64, Error> {
    // SAFETY: the kernel validates `out` (writable user memory, else `BadAddress` with
    // nothing written); the caller passes addresses no Rust reference covers.
    decode_result(unsafe { syscall2(Sys::MemobjInfo as u64, name, out) })
}

/// Copies `out.len()` bytes from `addr` in the task whose task port `task` names.
pub fn read(task: u64, addr: u64, out: &mut [u8]) -> Result<u64, Error> {
    // SAFETY: the kernel writes at most `out.len()` bytes into `out`, which the caller
    // lends exclusively.
    decode_result(unsafe {
        syscall6(
            Sys::VmRead as u64,
            task,
            addr,
            out.as_mut_ptr() as u64,
            out.len() as u64,
            0,
            0,
        )
    })
}

/// Copies `data` to `addr` in the task whose task port `task` names.
///
/// # Safety
/// When `task` names the calling task, no Rust reference may rely on the bytes written.
pub unsafe fn write(task: u64, addr: u64, data: &[u8]) -> Result<u64, Error> {
    // SAFETY: the kernel only reads `data`; what it writes is the caller's contract.
    decode_result(unsafe {
        syscall6(
            Sys::VmWrite as u64,
            task,
            addr,
            data.as_ptr() as u64,
            data.len() as u64,
            0,
            0,
        )
    })
}

/// The raw `vm_read`/`vm_write` call (`write`), for tests that pass bad arguments.
///
/// # Safety
/// The kernel writes `len` bytes at `buf` (read) or at `addr` in `task` (write): no Rust
/// reference may rely on those bytes.
pub unsafe fn read_write_raw(
    write: bool,
    task: u64,
    addr: u64,
    buf: u64,
    len: u64,
) -> Result<u64, Error> {
    let n = if write { Sys::VmWrite } else { Sys::VmRead };
    // SAFETY: forwarded to the caller.
    decode_result(unsafe { syscall6(n as u64, task, addr, buf, len, 0, 0) })
}

/// `wait` keyed by the (object, offset) `word` maps (wherever each task maps it).
pub fn wait_shared(word: &AtomicU32, expected: u32, timeout_ns: u64) -> Result<(), Error> {
    wait_shared_raw(word.as_ptr() as u64, expected, timeout_ns)
}

/// [`wait_shared`] with an arbitrary address (the kernel only reads the word, after
/// checking it).
pub fn wait_shared_raw(addr: u64, expected: u32, timeout_ns: u64) -> Result<(), Error> {
    // SAFETY: the kernel only reads user memory, and validates the address.
    let raw = unsafe {
        syscall3(
            Sys::WaitShared as u64,
            addr,
            u64::from(expected),
            timeout_ns,
        )
    };
    decode_result(raw).map(|_| ())
}

/// Wakes up to `n` threads of any task waiting with [`wait_shared`] on the (object,
/// offset) `word` maps; how many.
pub fn wake_shared(word: &AtomicU32, n: u64) -> Result<u64, Error> {
    wake_shared_raw(word.as_ptr() as u64, n)
}

/// [`wake_shared`] with an arbitrary address (the kernel only looks it up in the map).
pub fn wake_shared_raw(addr: u64, n: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall2(Sys::WakeShared as u64, addr, n) })
}
