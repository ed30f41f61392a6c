//! External pagers: memory objects whose contents a user task supplies (Accent's port
//! memory objects; Mach's external memory management interface). `docs/vm.md`,
//! "External pagers", describes the protocol; this module fixes its numbers.
//!
//! The kernel asks a pager for data with a message on the pager's port
//! ([`DATA_REQUEST`]) and gives pages back with [`DATA_RETURN`]; the pager answers with
//! calls naming the object by its memory-object right: [`crate::Sys::PagerSupply`],
//! [`crate::Sys::PagerUnavailable`], [`crate::Sys::PagerError`], and asks for pages back
//! with [`crate::Sys::PagerFlush`].

use crate::ipc::KERNEL_ID_BASE;

/// Message id of a data request: the words of [`Request`] in-line, no rights. The pager
/// answers with a supply, an unavailable or an error for the page.
pub const DATA_REQUEST: u64 = KERNEL_ID_BASE + 0x140;
/// Message id of a data return: the words of [`Request`] (the access field 0), then the
/// page's [`PAGE_SIZE`] bytes, in-line.
pub const DATA_RETURN: u64 = KERNEL_ID_BASE + 0x141;

/// Message id of an unlock request: the words of [`Request`] in-line (the access the
/// faulting thread wanted, which the page's lock forbids: [`crate::Sys::PagerLock`]). The
/// pager answers with a `pager_lock` that allows it (or fails the page).
pub const DATA_UNLOCK: u64 = KERNEL_ID_BASE + 0x142;

/// The access a faulting thread wanted ([`Request::access`]): a read.
pub const ACCESS_READ: u64 = 1;
/// A write.
pub const ACCESS_WRITE: u64 = 2;
/// An instruction fetch.
pub const ACCESS_EXECUTE: u64 = 4;

/// [`crate::Sys::PagerFlush`]: send the resident pages back ([`DATA_RETURN`]) before they
/// are dropped (Mach's "return" on a lock request).
pub const FLUSH_RETURN: u64 = 1;
/// [`crate::Sys::PagerFlush`]: drop the pages (without [`FLUSH_RETURN`]: their contents are
/// lost). Without it the pages stay (a *clean*: their contents go back, the pages remain).
pub const FLUSH_DROP: u64 = 2;
/// Every flag [`crate::Sys::PagerFlush`] knows.
pub const FLUSH_FLAGS: u64 = FLUSH_RETURN | FLUSH_DROP;

/// Most bytes one [`crate::Sys::PagerSupply`] copies (16 pages).
pub const SUPPLY_MAX: u64 = 16 * PAGE_SIZE;

/// The page size pagers deal in.
pub const PAGE_SIZE: u64 = 4096;
/// Most pages one [`crate::Sys::PagerFlush`] returns or drops (a larger range is flushed
/// by several calls: the call says how far it got).
pub const FLUSH_MAX_PAGES: u64 = 64;
/// Largest pager-backed object (1 GiB).
pub const OBJECT_SIZE_MAX: u64 = 1 << 30;

/// Memory-object kind ([`crate::Sys::MemobjInfo`]'s `kind`) of a pager-backed object.
pub const KIND_PAGER: u64 = 3;

/// The buffer a pager receives with must hold this many bytes: a data return's header,
/// its words and its page (more than an IPC buffer: pagers receive with `MSG_BUF`).
pub const RECEIVE_SIZE: usize = crate::ipc::HEADER_SIZE + REQUEST_SIZE + PAGE_SIZE as usize;

/// Words of a [`DATA_REQUEST`] or the head of a [`DATA_RETURN`].
pub const REQUEST_WORDS: usize = 4;
/// Bytes of them.
pub const REQUEST_SIZE: usize = REQUEST_WORDS * 8;

/// A data request, or a data return's head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// What the pager chose to be told when it made the object ([`crate::Sys::MemobjPager`]).
    pub cookie: u64,
    /// Offset of the page in the object.
    pub offset: u64,
    /// Bytes wanted (one page).
    pub len: u64,
    /// `ACCESS_*` of the fault; 0 for a data return.
    pub access: u64,
}

impl Request {
    /// The message's in-line bytes.
    pub fn to_bytes(&self) -> [u8; REQUEST_SIZE] {
        let mut b = [0u8; REQUEST_SIZE];
        let words = [self.cookie, self.offset, self.len, self.access];
        for (chunk, w) in b.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Decodes the first [`REQUEST_SIZE`] bytes; `None` if there are fewer.
    pub fn from_bytes(b: &[u8]) -> Option<Request> {
        let b = b.get(..REQUEST_SIZE)?;
        let w = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(b.get(i * 8..i * 8 + 8).unwrap_or(&[0; 8]));
            u64::from_le_bytes(x)
        };
        Some(Request {
            cookie: w(0),
            offset: w(1),
            len: w(2),
            access: w(3),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_and_short_input_is_none() {
        let r = Request {
            cookie: 7,
            offset: 0x3000,
            len: 4096,
            access: ACCESS_WRITE,
        };
        let b = r.to_bytes();
        assert_eq!(&b[8..16], &0x3000u64.to_le_bytes());
        assert_eq!(Request::from_bytes(&b), Some(r));
        assert_eq!(Request::from_bytes(&b[..REQUEST_SIZE - 1]), None);
    }

    #[test]
    fn numbers_are_pinned() {
        assert_eq!(DATA_REQUEST, 0xffff_0000_0000_0140);
        assert_eq!(DATA_UNLOCK, 0xffff_0000_0000_0142);
        assert_eq!(DATA_RETURN, 0xffff_0000_0000_0141);
        assert_eq!((FLUSH_RETURN, FLUSH_DROP), (1, 2));
        assert_eq!(KIND_PAGER, 3);
        assert_eq!(SUPPLY_MAX, 65536);
    }
}
