//! SPIN's `Translation` service, machine-independent (Bershad et al., section 4.1): which
//! of the three events a user fault raises, what the page state word says, whether a
//! handler's resolution holds, and the table of physical pages (`PhysAddr.Allocate`) a
//! task's extensions hold.
//!
//! The kernel's side (`kernel/src/extension/translation.rs`) raises the events from the
//! virtual-memory family's fault path and carries out the interfaces on Accent's address
//! map (`kern::vm`); this module decides, with no state of the kernel's.
//!
//! # Invariants
//! - A fault is resumed after a handler only when the map itself now allows the access
//!   ([`settle`]): a handler that says it resolved a fault and did not can never make the
//!   thread fault again and again; the fault goes on to the default.
//! - A physical-page handle names a page of one task only ([`PhysPages::get`] checks the
//!   holder), and a task holds at most its limit of them.

use crate::vm::{Access, Prot};
use alloc::vec::Vec;
use baton_abi::translation::{
    ACCESS_EXECUTE, ACCESS_READ, ACCESS_WRITE, EVENT_BAD_ADDRESS, EVENT_PAGE_NOT_PRESENT,
    EVENT_PROTECTION_FAULT, STATE_ACCESSED, STATE_DIRTY, STATE_MAPPED, STATE_PROT_SHIFT,
    STATE_RESIDENT, STATE_WRITABLE,
};
use baton_abi::Error;

/// Which `Translation` event a fault raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// The map allows the access; the translation is missing (or read-only for a write
    /// the map allows: copy-on-write).
    PageNotPresent,
    /// No range of the map covers the address.
    BadAddress,
    /// The range's protection forbids the access.
    ProtectionFault,
}

impl Class {
    /// The event's number (`baton_abi::translation::EVENT_*`).
    pub const fn event(self) -> u64 {
        match self {
            Class::PageNotPresent => EVENT_PAGE_NOT_PRESENT,
            Class::BadAddress => EVENT_BAD_ADDRESS,
            Class::ProtectionFault => EVENT_PROTECTION_FAULT,
        }
    }
}

/// The class of an `access` to a page whose range has protection `prot` (`None`: no
/// range covers it).
pub const fn classify(prot: Option<Prot>, access: Access) -> Class {
    match prot {
        None => Class::BadAddress,
        Some(p) if !p.allows(access) => Class::ProtectionFault,
        Some(_) => Class::PageNotPresent,
    }
}

/// The access as a handler sees it (`ACCESS_*`).
pub const fn access_code(access: Access) -> u64 {
    match access {
        Access::Read => ACCESS_READ,
        Access::Write => ACCESS_WRITE,
        Access::Execute => ACCESS_EXECUTE,
    }
}

/// A `Translation` event's argument: the fault of a thread of `task`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The faulting task (the key: a handler sees only its installer's faults).
    pub task: u64,
    /// The faulting address.
    pub addr: u64,
    pub access: Access,
    pub class: Class,
}

/// The events' key: the faulting task.
pub fn key(f: &Fault) -> u64 {
    f.task
}

/// The events' result combiner: resolved if any handler resolved.
pub fn any(a: bool, b: bool) -> bool {
    a || b
}

/// What follows a raise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// A handler resolved it and the map allows the access now: enter the translation
    /// and resume the thread.
    Resume,
    /// A handler said it resolved it, but the map still forbids the access (or covers
    /// nothing there): its installer is told, and the default goes on.
    Refused,
    /// No handler resolved it: the default (the virtual-memory system's resolution, and
    /// then the exception port).
    Default,
}

/// What follows a raise whose handlers said `resolved`, the map's protection at the
/// address being now `prot_now`.
pub const fn settle(resolved: bool, prot_now: Option<Prot>, access: Access) -> Settle {
    if !resolved {
        return Settle::Default;
    }
    match prot_now {
        Some(p) if p.allows(access) => Settle::Resume,
        _ => Settle::Refused,
    }
}

/// What a page's translation (page-table entry) says, for [`page_state`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pte {
    pub writable: bool,
    pub dirty: bool,
    pub accessed: bool,
}

/// The state word of a page (`baton_abi::translation::STATE_*`): its range's protection
/// `prot` (`None`: no range) and its translation `pte` (`None`: none).
pub fn page_state(prot: Option<Prot>, pte: Option<Pte>) -> u64 {
    let Some(p) = prot else {
        return 0;
    };
    let mut s = STATE_MAPPED | u64::from(p.bits()) << STATE_PROT_SHIFT;
    if let Some(t) = pte {
        s |= STATE_RESIDENT;
        if t.writable {
            s |= STATE_WRITABLE;
        }
        if t.dirty {
            s |= STATE_DIRTY;
        }
        if t.accessed {
            s |= STATE_ACCESSED;
        }
    }
    s
}

/// The physical pages (`PhysAddr.Allocate`) tasks' extensions hold, by handle: each a
/// page of type `P` (the kernel's: a one-page memory object) and its holder.
pub struct PhysPages<P> {
    slots: Vec<Option<(u64, P)>>,
    per_task: usize,
}

impl<P: Copy> PhysPages<P> {
    /// An empty table; each task may hold at most `per_task` pages.
    pub const fn new(per_task: usize) -> Self {
        PhysPages {
            slots: Vec::new(),
            per_task,
        }
    }

    /// How many pages `task` holds.
    pub fn held_by(&self, task: u64) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|(t, _)| *t == task)
            .count()
    }

    /// Makes room for one more page of `task` (before the page is made, so that
    /// [`PhysPages::insert`] cannot fail): `NoSpace` at the task's limit, `NoMemory`.
    pub fn reserve(&mut self, task: u64) -> Result<(), Error> {
        if self.held_by(task) >= self.per_task {
            return Err(Error::NoSpace);
        }
        if self.slots.iter().all(Option::is_some) {
            self.slots.try_reserve(1).map_err(|_| Error::NoMemory)?;
        }
        Ok(())
    }

    /// Records `page` as `task`'s: its handle (never 0). Call [`PhysPages::reserve`]
    /// first; without room it gives the page back.
    pub fn insert(&mut self, task: u64, page: P) -> Result<u64, P> {
        if let Some(i) = self.slots.iter().position(Option::is_none) {
            if let Some(s) = self.slots.get_mut(i) {
                *s = Some((task, page));
                return Ok(i as u64 + 1);
            }
        }
        if self.slots.len() == self.slots.capacity() {
            return Err(page);
        }
        self.slots.push(Some((task, page)));
        Ok(self.slots.len() as u64)
    }

    /// `task`'s page of handle `h` (`NotFound`: none, or another task's).
    pub fn get(&self, task: u64, h: u64) -> Result<P, Error> {
        let i = usize::try_from(h.wrapping_sub(1)).map_err(|_| Error::NotFound)?;
        match self.slots.get(i) {
            Some(Some((t, p))) if *t == task => Ok(*p),
            _ => Err(Error::NotFound),
        }
    }

    /// Takes `task`'s page of handle `h` out of the table (`PhysAddr.Deallocate`).
    pub fn remove(&mut self, task: u64, h: u64) -> Result<P, Error> {
        let p = self.get(task, h)?;
        if let Some(s) = self.slots.get_mut(h.wrapping_sub(1) as usize) {
            *s = None;
        }
        Ok(p)
    }

    /// Takes one page of `task` out (its end), if it has any left.
    pub fn take_one(&mut self, task: u64) -> Option<P> {
        let s = self
            .slots
            .iter_mut()
            .find(|s| matches!(s, Some((t, _)) if *t == task))?;
        s.take().map(|(_, p)| p)
    }

    /// Pages held in all.
    pub fn len(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// Whether no page is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(classify(None, Access::Read), Class::BadAddress);
        assert_eq!(
            classify(Some(Prot::READ), Access::Write),
            Class::ProtectionFault
        );
        assert_eq!(
            classify(Some(Prot::NONE), Access::Read),
            Class::ProtectionFault
        );
        assert_eq!(
            classify(Some(Prot::RW), Access::Execute),
            Class::ProtectionFault
        );
        assert_eq!(
            classify(Some(Prot::RW), Access::Write),
            Class::PageNotPresent
        );
        assert_eq!(
            classify(Some(Prot::READ), Access::Read),
            Class::PageNotPresent
        );
        assert_eq!(Class::BadAddress.event(), EVENT_BAD_ADDRESS);
        assert_eq!(Class::ProtectionFault.event(), EVENT_PROTECTION_FAULT);
        assert_eq!(Class::PageNotPresent.event(), EVENT_PAGE_NOT_PRESENT);
        assert_eq!(access_code(Access::Write), ACCESS_WRITE);
    }

    #[test]
    fn settling() {
        // Not resolved: the default, whatever the map says.
        assert_eq!(
            settle(false, Some(Prot::RW), Access::Write),
            Settle::Default
        );
        // Resolved and the map allows it now.
        assert_eq!(settle(true, Some(Prot::RW), Access::Write), Settle::Resume);
        // Said resolved, still read-only: refused (no endless refault).
        assert_eq!(
            settle(true, Some(Prot::READ), Access::Write),
            Settle::Refused
        );
        // Said resolved, nothing mapped there.
        assert_eq!(settle(true, None, Access::Read), Settle::Refused);
    }

    #[test]
    fn combiner_and_key() {
        assert!(any(false, true) && any(true, false) && !any(false, false));
        let f = Fault {
            task: 7,
            addr: 0x1000,
            access: Access::Read,
            class: Class::PageNotPresent,
        };
        assert_eq!(key(&f), 7);
    }

    #[test]
    fn states() {
        assert_eq!(page_state(None, None), 0);
        let s = page_state(Some(Prot::READ), None);
        assert_eq!(s, STATE_MAPPED | 1 << STATE_PROT_SHIFT);
        let s = page_state(
            Some(Prot::RW),
            Some(Pte {
                writable: true,
                dirty: true,
                accessed: true,
            }),
        );
        assert_eq!(
            s,
            STATE_MAPPED
                | STATE_RESIDENT
                | STATE_WRITABLE
                | STATE_DIRTY
                | STATE_ACCESSED
                | 3 << STATE_PROT_SHIFT
        );
        let clean = page_state(Some(Prot::RW), Some(Pte::default()));
        assert_eq!(clean & STATE_DIRTY, 0);
        assert_ne!(clean & STATE_RESIDENT, 0);
    }

    #[test]
    fn phys_pages_bounded_and_private() {
        let mut t = PhysPages::<u32>::new(2);
        t.reserve(1).unwrap();
        let a = t.insert(1, 10).unwrap();
        t.reserve(1).unwrap();
        let b = t.insert(1, 11).unwrap();
        assert_ne!(a, 0);
        assert_ne!(a, b);
        assert_eq!(t.reserve(1), Err(Error::NoSpace));
        // Another task may not name task 1's pages, nor handle 0 or a wild one.
        assert_eq!(t.get(2, a), Err(Error::NotFound));
        assert_eq!(t.get(1, 0), Err(Error::NotFound));
        assert_eq!(t.get(1, u64::MAX), Err(Error::NotFound));
        assert_eq!(t.remove(2, b), Err(Error::NotFound));
        assert_eq!(t.get(1, b), Ok(11));
        t.reserve(2).unwrap();
        let c = t.insert(2, 20).unwrap();
        assert_eq!(t.remove(1, a), Ok(10));
        assert_eq!(t.remove(1, a), Err(Error::NotFound));
        assert_eq!(t.held_by(1), 1);
        // Room again for task 1; the freed slot is reused.
        t.reserve(1).unwrap();
        assert_eq!(t.insert(1, 12), Ok(a));
        assert!(t.take_one(1).is_some());
        assert!(t.take_one(1).is_some());
        assert_eq!(t.take_one(1), None);
        assert_eq!(t.get(2, c), Ok(20));
        assert_eq!(t.len(), 1);
        assert!(!t.is_empty());
    }

    #[test]
    fn insert_without_reserve_gives_back() {
        let mut t = PhysPages::<u32>::new(4);
        assert_eq!(t.insert(1, 5), Err(5));
    }
}
