//! External pagers: wrappers for `memobj_pager` and the `pager_*` calls (`docs/abi.md`,
//! `docs/vm.md`, "External pagers").
//!
//! A pager makes an object with [`create`], receives [`baton_abi::pager::DATA_REQUEST`]
//! messages on its port (decode them with [`Request::from_bytes`]) and answers each with
//! [`supply`], [`unavailable`] or [`error`]; [`flush`] asks for pages back.

use crate::raw::{syscall3, syscall6};
use baton_abi::{decode_result, Error, Sys};

pub use baton_abi::pager::{
    Request, ACCESS_EXECUTE, ACCESS_READ, ACCESS_WRITE, DATA_REQUEST, DATA_RETURN, DATA_UNLOCK,
    FLUSH_DROP, FLUSH_RETURN, PAGE_SIZE, RECEIVE_SIZE, REQUEST_SIZE, SUPPLY_MAX,
};

/// A pager-backed memory object of `size` bytes whose requests go to the port `port`
/// names (a send or receive right of this task), each carrying `cookie`; its
/// memory-object right.
pub fn create(port: u64, size: u64, cookie: u64) -> Result<u64, Error> {
    // SAFETY: the call changes no memory of this task.
    decode_result(unsafe { syscall3(Sys::MemobjPager as u64, port, size, cookie) })
}

/// Supplies `data` (a page multiple) as the pages of `object` from `offset` on; the
/// pages put in.
pub fn supply(object: u64, offset: u64, data: &[u8]) -> Result<u64, Error> {
    // SAFETY: the kernel reads `data`, which outlives the call.
    decode_result(unsafe {
        syscall6(
            Sys::PagerSupply as u64,
            object,
            offset,
            data.as_ptr() as u64,
            data.len() as u64,
            0,
            0,
        )
    })
}

/// Says there is no data for `[offset, offset + len)`: the pages are zero-filled.
pub fn unavailable(object: u64, offset: u64, len: u64) -> Result<u64, Error> {
    // SAFETY: the call changes no memory of this task.
    decode_result(unsafe { syscall3(Sys::PagerUnavailable as u64, object, offset, len) })
}

/// Fails `[offset, offset + len)`: faults on those pages become exceptions.
pub fn error(object: u64, offset: u64, len: u64) -> Result<u64, Error> {
    // SAFETY: the call changes no memory of this task.
    decode_result(unsafe { syscall3(Sys::PagerError as u64, object, offset, len) })
}

/// Returns ([`FLUSH_RETURN`]) and/or drops ([`FLUSH_DROP`]) the resident pages of
/// `[offset, offset + len)`; the bytes of the range done (call again for the rest).
///
/// # Safety
/// With [`FLUSH_DROP`], no Rust reference may rely on the contents of a mapping of those
/// pages (they are fetched from the pager again).
pub unsafe fn flush(object: u64, offset: u64, len: u64, flags: u64) -> Result<u64, Error> {
    // SAFETY: forwarded to the caller.
    decode_result(unsafe { syscall6(Sys::PagerFlush as u64, object, offset, len, flags, 0, 0) })
}

/// Restricts the accesses to the pages of `[offset, offset + len)` to `prot` (`PROT_*`
/// bits; all of read, write and execute unlocks them): a forbidden access by anyone is
/// sent to this pager as a [`DATA_UNLOCK`] request and waits until a lock allows it. The
/// bytes of the range done (call again for the rest).
pub fn lock(object: u64, offset: u64, len: u64, prot: u64) -> Result<u64, Error> {
    // SAFETY: the call only changes page protections in the kernel; no memory of this
    // task is read or written by it.
    decode_result(unsafe { syscall6(Sys::PagerLock as u64, object, offset, len, prot, 0, 0) })
}
