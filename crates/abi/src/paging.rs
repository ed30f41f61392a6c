//! Paging to the default pager (Accent section 2.2.6): when physical memory runs short the
//! kernel's global clock picks pages to replace, and the anonymous ones go to a user-level
//! *default pager*, which keeps them in its backing store until they are touched again.
//! `docs/vm.md`, "Paging", describes the protocol; this module fixes its numbers.
//!
//! A task holding the host-privilege right registers itself as the default pager with
//! [`crate::Sys::DefaultPagerRegister`], naming a port it receives on and how many pages
//! its store holds. The kernel then sends that port:
//! - [`PAGE_OUT`]: a [`Transfer`] (the object and offset for information; the store slot
//!   the kernel chose) and the page's [`PAGE_SIZE`] bytes, in-line. The pager keeps the
//!   bytes in that slot. The kernel has already freed the frame.
//! - [`PAGE_IN`]: a [`Transfer`] naming a slot the kernel filled before; the pager answers
//!   with [`crate::Sys::DefaultPagerSupply`], giving back the whole transfer record and
//!   the page's bytes. Messages arrive in the order sent, so a page-in always follows the
//!   page-out of its slot.

use crate::ipc::KERNEL_ID_BASE;

/// Message id of a page-out: a [`Transfer`], then [`PAGE_SIZE`] bytes, in-line.
pub const PAGE_OUT: u64 = KERNEL_ID_BASE + 0x180;
/// Message id of a page-in request: a [`Transfer`] in-line.
pub const PAGE_IN: u64 = KERNEL_ID_BASE + 0x181;

/// The page size.
pub const PAGE_SIZE: u64 = 4096;
/// Bytes of a [`Transfer`].
pub const TRANSFER_SIZE: usize = 32;
/// Bytes of a page-out message's data.
pub const PAGE_OUT_SIZE: usize = TRANSFER_SIZE + PAGE_SIZE as usize;
/// Fewest frames the pageable limit may be ([`crate::Sys::PagingLimit`]).
pub const LIMIT_MIN: u64 = 64;
/// Most slots a default pager may offer (1 GiB of pages).
pub const SLOTS_MAX: u64 = 1 << 18;

/// [`crate::Sys::PagingStats`] scope: the caller's task.
pub const SCOPE_TASK: u64 = 0;
/// [`crate::Sys::PagingStats`] scope: the whole system.
pub const SCOPE_SYSTEM: u64 = 1;

/// What a page-out or page-in message carries (four little-endian `u64`s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfer {
    /// The kernel's name for the memory object (opaque to the pager).
    pub object: u64,
    /// The page's offset in it.
    pub offset: u64,
    /// The store slot.
    pub slot: u64,
    /// The id of the task whose fault asked for the page (page-in), or 0.
    pub task: u64,
}

impl Transfer {
    /// The record's bytes.
    pub fn to_bytes(&self) -> [u8; TRANSFER_SIZE] {
        let mut b = [0u8; TRANSFER_SIZE];
        for (i, w) in [self.object, self.offset, self.slot, self.task]
            .iter()
            .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// The record in the first [`TRANSFER_SIZE`] bytes of `b`, if it is that long.
    pub fn from_bytes(b: &[u8]) -> Option<Transfer> {
        let w = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        Some(Transfer {
            object: w(0)?,
            offset: w(1)?,
            slot: w(2)?,
            task: w(3)?,
        })
    }
}

/// Paging counters, as [`crate::Sys::PagingStats`] writes them (all `u64`), after Accent's
/// Table 3-8: where the frames the kernel handed to user memory came from.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PagingStats {
    /// Pages written out to the default pager.
    pub pageouts: u64,
    /// Pages read back in from it.
    pub pageins: u64,
    /// Frames for user memory allocated from the free list.
    pub from_free: u64,
    /// Pages reclaimed: anonymous pages with a process mapping (paged out).
    pub reclaimed_mapped: u64,
    /// Pages reclaimed: anonymous pages without a process mapping (paged out).
    pub reclaimed_unmapped: u64,
    /// Pages reclaimed: clean pages of pager-backed objects (dropped).
    pub reclaimed_pager: u64,
    /// Pages the clock examined.
    pub scanned: u64,
    /// Of those, passed over because referenced.
    pub spared: u64,
    /// Reclaims that could not page anonymous memory out for want of backing store (the
    /// store full, or no default pager), and victims kept for that reason.
    pub no_store: u64,
    /// Faults that found no frame even after replacement (`NoMemory`).
    pub no_memory: u64,
    /// Faults on pages whose contents died with a default pager (errors).
    pub lost: u64,
    /// Frames user memory may hold (the boot parameter `pageable=`), or the frames the
    /// allocator manages when there is no such limit; system scope only.
    pub pageable_limit: u64,
    /// Frames user memory holds now; system scope only.
    pub pageable_used: u64,
    /// Store slots the default pager offers (0: none registered); system scope only.
    pub store_slots: u64,
    /// Store slots in use; system scope only.
    pub store_used: u64,
    /// Default pagers registered since boot; system scope only.
    pub pagers_registered: u64,
    /// Page-outs replacement made that could not be queued to the default pager (its
    /// queue full, or the pager gone): the page stayed, its translations removed for
    /// nothing; system scope only.
    pub unsent: u64,
}

/// Most tasks exempt from page replacement at once (`Sys::PagingExempt`), besides the
/// default pager.
pub const EXEMPT_MAX: usize = 8;

/// Words in [`PagingStats`].
pub const PAGING_STATS_WORDS: usize = core::mem::size_of::<PagingStats>() / 8;
