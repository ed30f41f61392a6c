//! Paging to the default pager: wrappers for `default_pager_register`,
//! `default_pager_supply` and `paging_stats` (`docs/abi.md`, `docs/vm.md`, "Paging").
//!
//! A default pager registers with [`register`] (it needs the host-privilege right),
//! receives [`PAGE_OUT`] and [`PAGE_IN`] messages on its port (decode their record with
//! [`Transfer::from_bytes`]), keeps each page-out's bytes in its slot, and answers each
//! page-in with [`supply`].

use crate::raw::{syscall2, syscall3};
use baton_abi::{decode_result, Error, Sys};

pub use baton_abi::paging::{
    PagingStats, Transfer, PAGE_IN, PAGE_OUT, PAGE_OUT_SIZE, PAGE_SIZE, SCOPE_SYSTEM, SCOPE_TASK,
    SLOTS_MAX, TRANSFER_SIZE,
};

/// Makes this task the default pager: page-outs and page-in requests go to the port
/// `port` names; its store holds `slots` pages.
pub fn register(port: u64, slots: u64, host_priv: u64) -> Result<(), Error> {
    // SAFETY: the call changes no memory of this task.
    decode_result(unsafe { syscall3(Sys::DefaultPagerRegister as u64, port, slots, host_priv) })
        .map(|_| ())
}

/// Answers the page-in request `transfer` (its record as received) with the page `page`;
/// whether the page went in.
pub fn supply(transfer: &[u8; TRANSFER_SIZE], page: &[u8]) -> Result<bool, Error> {
    if page.len() < PAGE_SIZE as usize {
        return Err(Error::InvalidArgument);
    }
    supply_raw(transfer.as_ptr() as u64, page.as_ptr() as u64)
}

/// [`supply`] with raw pointers, for tests of bad arguments.
pub fn supply_raw(transfer: u64, page: u64) -> Result<bool, Error> {
    // SAFETY: the kernel only reads the memory named.
    decode_result(unsafe { syscall2(Sys::DefaultPagerSupply as u64, transfer, page) })
        .map(|n| n != 0)
}

/// Sets the pageable limit to `frames` (host-privileged); the limit it replaces.
pub fn set_limit(frames: u64, host_priv: u64) -> Result<u64, Error> {
    // SAFETY: the call changes no memory of this task.
    decode_result(unsafe { syscall2(Sys::PagingLimit as u64, frames, host_priv) })
}

/// `paging_exempt(task, host_priv)`: the task whose task port is `task` is on the path
/// that frees memory (a file server, a disk driver): page replacement never takes its
/// pages and it may use the frames kept in reserve, as the default pager does.
pub fn exempt(task: u64, host_priv: u64) -> Result<(), Error> {
    // SAFETY: the call changes no memory of this task.
    decode_result(unsafe { syscall2(Sys::PagingExempt as u64, task, host_priv) }).map(|_| ())
}

/// The counters of this task.
pub fn stats() -> Result<PagingStats, Error> {
    stats_raw(SCOPE_TASK)
}

/// The system-wide counters.
pub fn system_stats() -> Result<PagingStats, Error> {
    stats_raw(SCOPE_SYSTEM)
}

/// [`stats`] with a raw scope, for tests of bad arguments.
pub fn stats_raw(scope: u64) -> Result<PagingStats, Error> {
    let mut s = PagingStats::default();
    // SAFETY: the kernel writes `size_of::<PagingStats>()` bytes at `s`, a `repr(C)`
    // struct of `u64`s that nothing else borrows.
    let r = unsafe {
        syscall2(
            Sys::PagingStats as u64,
            scope,
            &mut s as *mut PagingStats as u64,
        )
    };
    decode_result(r)?;
    Ok(s)
}
