//! SPIN's memory interfaces and the `Translation` events (`docs/extensions.md`, "Memory
//! interfaces"): the event numbers an extension installs on, the page state
//! [`crate::Sys::SpinvmQuery`] and `baton.translation.query` report, and the
//! notification a handler's installer gets when a resolution was refused.

/// `Translation.PageNotPresent`: a user access the address map allows found no
/// translation (or a read-only one for a write the map allows: a copy-on-write page).
/// Raised before the virtual-memory system's own resolution (the default handler).
pub const EVENT_PAGE_NOT_PRESENT: u64 = 0x10;
/// `Translation.BadAddress`: a user access to an address no range of the map covers.
pub const EVENT_BAD_ADDRESS: u64 = 0x11;
/// `Translation.ProtectionFault`: a user access the range's protection forbids.
pub const EVENT_PROTECTION_FAULT: u64 = 0x12;

/// Whether `event` is one of the three `Translation` events.
pub const fn is_translation_event(event: u64) -> bool {
    matches!(
        event,
        EVENT_PAGE_NOT_PRESENT | EVENT_BAD_ADDRESS | EVENT_PROTECTION_FAULT
    )
}

/// A fault handler's access argument: a load.
pub const ACCESS_READ: u64 = 0;
/// A store.
pub const ACCESS_WRITE: u64 = 1;
/// An instruction fetch.
pub const ACCESS_EXECUTE: u64 = 2;

/// Page state: a range of the map covers the page.
pub const STATE_MAPPED: u64 = 1 << 0;
/// The page has a translation now (the page tables hold it).
pub const STATE_RESIDENT: u64 = 1 << 1;
/// Its translation allows stores.
pub const STATE_WRITABLE: u64 = 1 << 2;
/// SPIN's `Dirty`: the page was written through its current translation (the hardware
/// dirty bit of the translation; a translation the kernel drops takes the bit with it,
/// `docs/extensions.md`).
pub const STATE_DIRTY: u64 = 1 << 3;
/// The page was read or written through its current translation (the accessed bit).
pub const STATE_ACCESSED: u64 = 1 << 4;
/// Page replacement has chosen the page in the batch it is deciding: set only while a
/// `PhysAddr.Reclaim` handler is asked ([`EVENT_RECLAIM`]), so that the handler can
/// nominate a page that is not going anyway.
pub const STATE_CHOSEN: u64 = 1 << 5;
/// Where the map's protection of the page starts in the state word (`vm::PROT_*`, three
/// bits).
pub const STATE_PROT_SHIFT: u32 = 8;

/// The notification a handler's installer gets when the handler said it resolved a fault
/// and the fault was not resolved (the map still forbids the access): a message with this
/// id whose word is the handler id; the fault goes on to the default.
pub const NOTIFY_REFUSED: u64 = 0x5350_0002;

/// Most physical pages (`PhysAddr.Allocate`) one task's extensions may hold at once.
pub const PHYS_PAGES_MAX: usize = 256;

/// `PhysAddr.Reclaim` (SPIN section 4.1): page replacement is about to take one of the
/// installer's pages (the candidate, named by its address in the installer's address
/// space); a handler `(candidate: i64) -> i64` answers with the address of another page
/// of the installer's to take instead, or the candidate's own address to let the clock's
/// choice stand. A nominee that is not the installer's own (a page of memory other tasks
/// may map), not resident, wired, or not a page at all is ignored. Numbers of this event
/// family are `0x5041_xxxx`.
pub const EVENT_RECLAIM: u64 = 0x5041_0001;

/// [`crate::Sys::SpinReclaim`]: how often the task's `Reclaim` handlers were asked.
pub const RECLAIM_ASKED: u64 = 0;
/// ... how many of their nominations were taken instead of the clock's choice.
pub const RECLAIM_TAKEN: u64 = 1;
/// ... how many were ignored (the clock's choice stood).
pub const RECLAIM_IGNORED: u64 = 2;
