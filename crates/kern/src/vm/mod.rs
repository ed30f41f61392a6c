//! The machine-independent core of Accent's virtual memory (Fitzgerald & Rashid, "The
//! Integration of Virtual Memory Management and Interprocess Communication in Accent",
//! sections 2.1–2.2), with the refinements Mach made to it: memory objects, address maps, copy-on-write, lazy
//! evaluation, and the fault decision — data structures and decisions only. The kernel
//! supplies the machine (frames, page tables) through [`Machine`] and the frame handle
//! type `F`, and carries out the [`fault::Decision`]s; `docs/vm.md` describes the whole.
//!
//! - [`object`]: memory objects (anonymous, physical, pager-backed, shadows) in a
//!   generation-checked slab, with reference counts and shadow-chain collapse.
//! - [`map`]: a task's address map, ranges of (object, offset, protection, maximum
//!   protection, copy-on-write, inheritance, wiring), in a tree keyed by start.
//! - [`fault`]: what a fault at an address needs, classified as Accent's Table 3-10.
//! - [`copy`]: fork by inheritance, and a region's copy-on-write transfer (MoveWords), as
//!   out-of-line data in a message would travel.
//! - [`tree`]: the ordered map with fallible allocation both are built on.
//!
//! # Invariants (across the modules)
//! - Every address, length and offset is a multiple of [`PAGE_SIZE`]; nothing here ever
//!   works on a partial page.
//! - An object's reference count is the number of map entries, shadows, in-transit
//!   regions and kernel handles that name it; an object at zero is gone, with its frames.
//! - *Frozen objects*: an object that a copy-on-write entry or a shadow names is never
//!   written in place, except for its newest copy object's benefit (see [`object`]): a
//!   by-value copy never sees a later write by anyone else.
//! - No operation panics on any input; every allocation can fail and is charged to an
//!   account (`crate::quota`), so a task cannot make the kernel hold unbounded memory.

pub mod clock;
pub mod copy;
pub mod fault;
pub mod map;
pub mod object;
pub mod phys;
#[cfg(test)]
mod proptests;
pub mod rmap;
#[cfg(test)]
mod tests;
pub mod tree;

/// Bytes in a page (as `crate::frame::PAGE_SIZE`).
pub const PAGE_SIZE: u64 = crate::frame::PAGE_SIZE;

/// Whether `x` is a multiple of [`PAGE_SIZE`].
pub const fn page_aligned(x: u64) -> bool {
    x.is_multiple_of(PAGE_SIZE)
}

/// A set of access rights to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Prot(u8);

impl Prot {
    /// No access.
    pub const NONE: Prot = Prot(0);
    /// Loads.
    pub const READ: Prot = Prot(1);
    /// Stores.
    pub const WRITE: Prot = Prot(2);
    /// Instruction fetches.
    pub const EXECUTE: Prot = Prot(4);
    /// Loads and stores.
    pub const RW: Prot = Prot(3);
    /// Everything.
    pub const ALL: Prot = Prot(7);

    /// The rights in the low three bits of `bits` (read 1, write 2, execute 4), or `None`
    /// when other bits are set.
    pub const fn from_bits(bits: u64) -> Option<Prot> {
        if bits & !7 != 0 {
            None
        } else {
            Some(Prot(bits as u8))
        }
    }

    /// The bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every right of `other` is in `self`.
    pub const fn contains(self, other: Prot) -> bool {
        self.0 & other.0 == other.0
    }

    /// The rights in both.
    pub const fn and(self, other: Prot) -> Prot {
        Prot(self.0 & other.0)
    }

    /// The rights in `self` but not in `other`.
    pub const fn minus(self, other: Prot) -> Prot {
        Prot(self.0 & !other.0)
    }

    /// Whether `access` is allowed.
    pub const fn allows(self, access: Access) -> bool {
        self.contains(access.needs())
    }
}

/// The kind of access a fault was taken for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A load (Accent's ReadFault).
    Read,
    /// A store (Accent's WriteFault).
    Write,
    /// An instruction fetch.
    Execute,
}

impl Access {
    /// The right the access needs.
    pub const fn needs(self) -> Prot {
        match self {
            Access::Read => Prot::READ,
            Access::Write => Prot::WRITE,
            Access::Execute => Prot::EXECUTE,
        }
    }
}

/// What a fork-style task creation gives the child for a range (Mach's inheritance).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Inherit {
    /// The child maps the same object: writes on either side are seen by both.
    Share,
    /// The child gets a copy-on-write copy: a by-value snapshot.
    #[default]
    Copy,
    /// The child gets a hole.
    None,
}

/// The machine, as the virtual-memory core needs it: the kernel implements this over its
/// page tables and frame allocator. Page tables are only a cache of the maps: every call
/// here may be satisfied by throwing translations away (the next access faults and
/// [`fault::resolve`] maps it again).
pub trait Machine<F> {
    /// `frame` left the last object that held it: give it back to the frame allocator
    /// (its charge is already refunded). No translation of it is left in any map the
    /// virtual-memory core knows of.
    fn free_frame(&mut self, frame: F);
    /// Remove the current map's translations in `[start, end)`.
    fn unmap(&mut self, start: u64, end: u64);
    /// Remove write permission from the current map's translations in `[start, end)`.
    fn write_protect(&mut self, start: u64, end: u64);
    /// Remove write permission from every translation of `frame`, in every address space.
    fn write_protect_everywhere(&mut self, frame: F);
    /// Remove every translation of `frame`, in every address space.
    fn unmap_everywhere(&mut self, frame: F);
    /// A paged-out page whose contents were in backing-store `slot` is gone (its object
    /// or window went): the slot is free for another page. Nothing by default (a machine
    /// with no backing store has no slots).
    fn free_slot(&mut self, slot: u32) {
        let _ = slot;
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A [`Machine`] for tests: frames are numbers, and it records what it was asked.
    use super::Machine;
    use std::vec::Vec;

    /// Records every call.
    #[derive(Debug, Default)]
    pub struct Recorder {
        pub freed: Vec<u64>,
        pub unmapped: Vec<(u64, u64)>,
        pub protected: Vec<(u64, u64)>,
        pub protected_frames: Vec<u64>,
        pub unmapped_frames: Vec<u64>,
    }

    impl Machine<u64> for Recorder {
        fn free_frame(&mut self, frame: u64) {
            self.freed.push(frame);
        }
        fn unmap(&mut self, start: u64, end: u64) {
            self.unmapped.push((start, end));
        }
        fn write_protect(&mut self, start: u64, end: u64) {
            self.protected.push((start, end));
        }
        fn write_protect_everywhere(&mut self, frame: u64) {
            self.protected_frames.push(frame);
        }
        fn unmap_everywhere(&mut self, frame: u64) {
            self.unmapped_frames.push(frame);
        }
    }
}
