//! A task's capability name space: the rights it holds, by name.
//!
//! A name is a [`Key`] of a per-task slab: a slot index and a generation, so a released name
//! never denotes a later right, and names mean nothing outside their task (the same number
//! in another task is another slot of another slab, or nothing).
//!
//! # Invariants
//! - Every entry names a port by its [`PortId`]; the port may since have been destroyed, in
//!   which case a send or send-once entry is a *dead name* (detected by the port's own
//!   generation check, so destroying a port never walks the name spaces).
//! - Each entry is counted once in its port's right counts (see `port`), until it is
//!   removed through [`super::Ipc`], which keeps the counts.

use super::PortId;
use crate::slab::{Key, Slab};
use baton_abi::ipc::NAMES_MAX;
use baton_abi::Error;

/// The kind of right an entry or an in-flight right is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// The receive right (one per port).
    Receive,
    /// A send right.
    Send,
    /// A send-once right.
    SendOnce,
}

/// One right held under a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What kind of right.
    pub kind: Held,
    /// To which port.
    pub port: PortId,
}

/// A name space. See the module documentation.
#[derive(Debug)]
pub struct Space {
    entries: Slab<Entry>,
    /// The id the kernel knows this space by (its task's), 0 for none.
    id: super::SpaceId,
}

impl Default for Space {
    fn default() -> Self {
        Self::new()
    }
}

impl Space {
    /// An empty name space holding at most [`NAMES_MAX`] rights.
    pub const fn new() -> Space {
        Space::with_id(0)
    }

    /// An empty name space of the space (task) `id`.
    pub const fn with_id(id: super::SpaceId) -> Space {
        Space {
            entries: Slab::with_limit(NAMES_MAX as u32),
            id,
        }
    }

    /// The id of the space.
    #[inline]
    pub fn id(&self) -> super::SpaceId {
        self.id
    }

    /// The right `name` denotes ([`Error::InvalidName`] if none).
    #[inline]
    pub fn lookup(&self, name: u64) -> Result<Entry, Error> {
        self.entries
            .get(Key(name))
            .copied()
            .ok_or(Error::InvalidName)
    }

    /// Adds a right; its new name ([`Error::NoSpace`] when full).
    #[inline(always)]
    pub(super) fn insert(&mut self, entry: Entry) -> Result<u64, Error> {
        self.entries
            .insert(entry)
            .map(|k| k.0)
            .map_err(|_| Error::NoSpace)
    }

    /// Removes the right `name`.
    #[inline(always)]
    pub(super) fn remove(&mut self, name: u64) -> Option<Entry> {
        self.entries.remove(Key(name))
    }

    /// How many more rights fit.
    #[inline]
    pub fn room(&self) -> usize {
        (NAMES_MAX as usize).saturating_sub(self.entries.len())
    }

    /// Number of rights held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no right is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every right with its name.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Entry)> + '_ {
        self.entries.iter().map(|(k, e)| (k.0, *e))
    }
}
