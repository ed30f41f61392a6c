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
use crate::quota::{Account, Resource};
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
///
/// With an account ([`Space::set_account`]), every slot the space grows by is charged to
/// it before it is added ([`Error::NoMemory`] at the account's limit) and given back when
/// the space is dropped: a slot, once added, is reused for later names, so the charge
/// follows the memory the space holds, and reusing a slot (every RPC's reply right) costs
/// nothing.
#[derive(Debug)]
pub struct Space {
    entries: Slab<Entry>,
    /// The id the kernel knows this space by (its task's), 0 for none.
    id: super::SpaceId,
    /// Who pays for the slots, if anyone.
    account: Option<alloc::sync::Arc<Account>>,
    /// Bytes charged to `account` for the slots so far.
    charged: u64,
}

/// What one name slot is charged: the slot, twice (the slab grows by doubling).
pub const NAME_SLOT_BYTES: u64 = 2 * Slab::<Entry>::SLOT_BYTES as u64;

impl Drop for Space {
    fn drop(&mut self) {
        if let Some(a) = &self.account {
            a.give(Resource::Heap, self.charged);
        }
    }
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
            account: None,
            charged: 0,
        }
    }

    /// Makes `account` pay for the slots added from now on (and for those already there,
    /// [`Error::NoMemory`] and nothing changed when they do not fit).
    pub fn set_account(&mut self, account: alloc::sync::Arc<Account>) -> Result<(), Error> {
        let now = self.entries.slots() as u64 * NAME_SLOT_BYTES;
        account.take(Resource::Heap, now)?;
        if let Some(old) = self.account.replace(account) {
            old.give(Resource::Heap, self.charged);
        }
        self.charged = now;
        Ok(())
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
        if !self.entries.has_free() {
            return self.insert_new_slot(entry);
        }
        self.entries
            .insert(entry)
            .map(|k| k.0)
            .map_err(|_| Error::NoSpace)
    }

    /// [`Space::insert`] when the space must grow: the new slot is charged first.
    #[inline(never)]
    fn insert_new_slot(&mut self, entry: Entry) -> Result<u64, Error> {
        if self.entries.len() as u64 >= NAMES_MAX {
            return Err(Error::NoSpace);
        }
        if let Some(a) = &self.account {
            a.take(Resource::Heap, NAME_SLOT_BYTES)?;
        }
        match self.entries.insert(entry) {
            Ok(k) => {
                if self.account.is_some() {
                    self.charged += NAME_SLOT_BYTES;
                }
                Ok(k.0)
            }
            Err(_) => {
                if let Some(a) = &self.account {
                    a.give(Resource::Heap, NAME_SLOT_BYTES);
                }
                // At the limit, or the heap could not grow the slab.
                Err(Error::NoMemory)
            }
        }
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
