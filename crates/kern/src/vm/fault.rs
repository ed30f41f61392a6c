//! Page faults: what an access to an address needs, decided without touching the
//! machine (Accent section 2.2.5), classified as Accent's Table 3-10 counts them.
//!
//! [`resolve`] finds the entry, checks the protection, and looks the page up down the
//! entry's object chain. It changes the virtual-memory state only in ways no task can
//! see: it clears a copy-on-write flag nothing else needs any more (a *reclaim*), gives a
//! copy-on-write entry its own shadow before its first write, and marks a pager page as
//! being paged in. Everything physical — allocating, zeroing or copying a frame, editing
//! page tables, messaging the pager, blocking — is in the returned [`Decision`], for the
//! kernel to do. After a `ZeroFill`, `CopyOnWrite` or `PageIn` (once the data is
//! supplied) or a `Wait`, the kernel puts the page in place and calls [`resolve`] again;
//! a fault needs at most four rounds (reclaim or shadow, fill, copy, push), each
//! O(chain length × log pages). A `Map` ends the fault.
//!
//! Fault classes (Table 3-10): a fault is an *address error* when no entry maps the
//! address; a *write error* when the protection forbids the access (Accent's
//! WriteError, which Baton also raises for loads and fetches the protection forbids);
//! otherwise an address fault of kind *zero fill* (nothing anywhere: a new zeroed page),
//! *memory fill* (resident in some object: only a translation is missing), *pager fill*
//! (a pager must supply it), or a copy-on-write fault: *copy-on-write copy* (the write
//! needs its own copy of a page another mapping still sees) or *copy-on-write reclaim*
//! (the page is no longer shared: write permission is simply given back).
//!
//! # Invariants
//! - A writable translation is only ever decided for a page of the entry's own object,
//!   for an entry that is not copy-on-write, and, when that object has a copy object,
//!   only once the copy object has its own copy of the page: so a write never reaches
//!   a page another mapping must see as a snapshot.

use super::map::Map;
use super::object::{Found, Kind, ObjectId, Objects};
use super::{Access, Prot, PAGE_SIZE};
use baton_abi::Error;

/// What the kernel must do about a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision<F> {
    /// No entry maps the address: an exception for the task.
    AddressError,
    /// The entry's protection forbids the access: an exception for the task.
    ProtectionError,
    /// Allocate a zeroed frame, [`Objects::insert_page`] it into `object` at `offset`,
    /// and resolve again; or, when `then_map` is known, enter the translation to the new
    /// frame at once, writable as it says: the round after the fill would decide exactly
    /// `Map { frame, writable }` (its entry, object and copy object are what this round
    /// saw, and nothing else runs in between), so it is not needed.
    ZeroFill {
        /// The object that gets the page.
        object: ObjectId,
        /// Where in it.
        offset: u64,
        /// The next round's `Map { writable }`, when the fill cannot change it: `None`
        /// when `object` has a copy object (the fill may need a push first), and then the
        /// kernel resolves again. A writable one has marked the object written already.
        then_map: Option<bool>,
    },
    /// Allocate a frame, copy `from` into it, [`Objects::insert_page`] it into `to` at
    /// `offset`, and with `unmap_from` remove every translation of `from`
    /// ([`super::Machine::unmap_everywhere`]: mappings that must now see the new page
    /// find it on their next fault); then resolve again.
    CopyOnWrite {
        /// The page copied.
        from: F,
        /// The object that gets the copy.
        to: ObjectId,
        /// Where in it.
        offset: u64,
        /// Whether other address spaces may translate to `from` where they must now see
        /// the copy.
        unmap_from: bool,
    },
    /// Translate the faulting page to `frame`; writable or not. The fault is over.
    Map {
        /// The frame.
        frame: F,
        /// Whether the translation allows writes.
        writable: bool,
    },
    /// Translate the faulting page to the physical address `addr`. The fault is over.
    MapPhysical {
        /// Physical address of the frame.
        addr: u64,
        /// Whether the translation allows writes.
        writable: bool,
        /// Map it uncached.
        uncached: bool,
    },
    /// Ask `pager` for the page at `offset` of `object` (now marked as being paged in),
    /// block until [`Objects::insert_page`] supplies it (or the request fails:
    /// [`Objects::page_in_failed`]), then resolve again.
    PageIn {
        /// Whom to ask.
        pager: u64,
        /// The object.
        object: ObjectId,
        /// The offset.
        offset: u64,
    },
    /// Ask the default pager for the paged-out page at `offset` of `object` (now marked
    /// as asked), whose contents are in backing-store `slot`; block until
    /// [`Objects::swap_in`] puts it back (or the request fails:
    /// [`Objects::swap_in_failed`]), then resolve again.
    SwapIn {
        /// The object.
        object: ObjectId,
        /// The offset.
        offset: u64,
        /// The backing-store slot.
        slot: u32,
    },
    /// The page is being paged in already: block until it is there, then resolve again.
    Wait {
        /// The object.
        object: ObjectId,
        /// The offset.
        offset: u64,
    },
    /// The page is resident but its pager's lock forbids the access
    /// ([`Objects::set_lock`]): ask `pager` to unlock the page at `offset` of `object`,
    /// block until it changes the lock (or fails the page, or dies), then resolve again.
    Unlock {
        /// Whom to ask.
        pager: u64,
        /// The pager-backed object.
        object: ObjectId,
        /// The page's offset in it.
        offset: u64,
    },
    /// The page's pager is gone: an exception for the task.
    PagerError {
        /// The object.
        object: ObjectId,
        /// The offset.
        offset: u64,
    },
}

/// Accent's fault classes (Table 3-10). See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultClass {
    /// No mapping at the address.
    AddressError,
    /// The access is not allowed.
    WriteError,
    /// A new zeroed page.
    ZeroFill,
    /// Resident already; only the translation was missing.
    MemoryFill,
    /// From a pager (Accent's DiskFill).
    PagerFill,
    /// A write needed its own copy of a shared page.
    CopyOnWriteCopy,
    /// A write to a page no longer shared: write permission given back.
    CopyOnWriteReclaim,
}

/// A fault's outcome: what to do, and how Table 3-10 counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault<F> {
    /// What the kernel must do.
    pub decision: Decision<F>,
    /// The class (`None` for a fault that waits for a page-in already asked for, or
    /// finds the pager gone).
    pub class: Option<FaultClass>,
    /// `Some(pages)` when this fault cleared its entry's copy-on-write flag (a reclaim:
    /// the whole entry at once), with the pages whose write permission it gives back as
    /// Accent's Table 3-10 counts them ("CopyOnWrite reclaims of N pages"): here the
    /// faulting page, 1, when it is the object's own (resident or paged out there, or
    /// filled there by this fault), else 0 (a page of an object below is copied). The
    /// pages that follow it and whose translations the kernel then makes writable
    /// ([`reclaim_ahead`]) are added by the kernel ([`FaultStats::reclaimed_ahead`]).
    pub reclaimed: Option<u64>,
    /// Whether the entry allows instruction fetches (a translation the fault enters is
    /// executable then); `false` when no entry maps the address.
    pub executable: bool,
}

/// Fault counters, per task and system-wide (Accent's Table 3-10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Faults taken (first rounds only).
    pub faults: u64,
    /// Of which loads.
    pub read_faults: u64,
    /// Of which stores.
    pub write_faults: u64,
    /// Of which instruction fetches.
    pub execute_faults: u64,
    /// Address errors.
    pub address_errors: u64,
    /// Write (protection) errors.
    pub write_errors: u64,
    /// Zero fills.
    pub zero_fills: u64,
    /// Memory fills.
    pub memory_fills: u64,
    /// Pager fills.
    pub pager_fills: u64,
    /// Copy-on-write copies.
    pub cow_copies: u64,
    /// Copy-on-write reclaims.
    pub cow_reclaims: u64,
    /// Pages those reclaims covered.
    pub cow_reclaimed_pages: u64,
}

impl FaultStats {
    /// Counts a fault's first round.
    pub fn record<F>(&mut self, access: Access, fault: &Fault<F>) {
        self.faults += 1;
        match access {
            Access::Read => self.read_faults += 1,
            Access::Write => self.write_faults += 1,
            Access::Execute => self.execute_faults += 1,
        }
        if let Some(pages) = fault.reclaimed {
            self.cow_reclaims += 1;
            self.cow_reclaimed_pages += pages;
        }
        let slot = match fault.class {
            Some(FaultClass::AddressError) => &mut self.address_errors,
            Some(FaultClass::WriteError) => &mut self.write_errors,
            Some(FaultClass::ZeroFill) => &mut self.zero_fills,
            Some(FaultClass::MemoryFill) => &mut self.memory_fills,
            Some(FaultClass::PagerFill) => &mut self.pager_fills,
            Some(FaultClass::CopyOnWriteCopy) => &mut self.cow_copies,
            // Counted with `reclaimed` above.
            Some(FaultClass::CopyOnWriteReclaim) | None => return,
        };
        *slot += 1;
    }

    /// Counts `pages` more reclaimed by the last reclaim: the translations
    /// [`reclaim_ahead`] had made writable.
    pub fn reclaimed_ahead(&mut self, pages: u64) {
        self.cow_reclaimed_pages += pages;
    }

    /// Accent's "address faults": faults that found no translation.
    pub fn address_faults(&self) -> u64 {
        self.address_errors + self.zero_fills + self.memory_fills + self.pager_fills
    }

    /// Adds `other` in (per-task counts into system-wide ones).
    pub fn add(&mut self, other: &FaultStats) {
        self.faults += other.faults;
        self.read_faults += other.read_faults;
        self.write_faults += other.write_faults;
        self.execute_faults += other.execute_faults;
        self.address_errors += other.address_errors;
        self.write_errors += other.write_errors;
        self.zero_fills += other.zero_fills;
        self.memory_fills += other.memory_fills;
        self.pager_fills += other.pager_fills;
        self.cow_copies += other.cow_copies;
        self.cow_reclaims += other.cow_reclaims;
        self.cow_reclaimed_pages += other.cow_reclaimed_pages;
    }
}

fn done<F>(decision: Decision<F>, class: FaultClass, reclaimed: Option<u64>) -> Fault<F> {
    Fault {
        decision,
        class: Some(class),
        reclaimed,
        executable: false,
    }
}

/// The copy object of `top` that lacks its own copy of `offset` (a write in place there
/// must first push the old contents into it).
fn push_target<F: Copy>(objs: &Objects<F>, top: ObjectId, offset: u64) -> Option<ObjectId> {
    let c = objs.get(top)?.copy()?;
    match objs.get(c) {
        Some(co) if co.page(offset).is_none() => Some(c),
        _ => None,
    }
}

/// The frame a write to `page` may go to through the read-only translation already there,
/// with nothing else to do first: the entry allows writing and is not copy-on-write, the
/// page is resident in the entry's own object (not a physical one), and no copy object
/// needs its old contents pushed first. Exactly the case where [`resolve`] answers
/// `Decision::Map { writable: true }` for a write at the first round, without its other
/// work; like it, marks the object written. `None` in every other case (then [`resolve`]
/// decides). A SPIN fault handler's resolution ends here, making the translation
/// writable in place.
pub fn write_in_place<F: Copy>(map: &Map, objs: &mut Objects<F>, page: u64) -> Option<F> {
    let (start, e) = map.entry(page)?;
    if !e.prot.contains(Prot::WRITE) || e.cow {
        return None;
    }
    if matches!(objs.get(e.object)?.kind(), Kind::Physical { .. }) {
        return None;
    }
    let off = e.offset.checked_add(page.checked_sub(start)?)?;
    let frame = objs.resident(e.object, off)?;
    if push_target(objs, e.object, off).is_some() {
        return None;
    }
    if !objs.lock_at(e.object, off).contains(Prot::WRITE) {
        return None;
    }
    objs.mark_written(e.object);
    Some(frame)
}

/// Most pages [`reclaim_ahead`] offers after one reclaim (a bound on the fault's time).
pub const RECLAIM_AHEAD_MAX: usize = 1024;

/// Accent's reclaim-ahead (section 2.2.5) carried to the translations: after a fault at
/// `page` reclaimed its entry ([`Fault::reclaimed`]), the pages that follow it in the
/// entry (at most [`RECLAIM_AHEAD_MAX`]) that the entry's object holds resident, each with
/// its frame: a translation of one to that frame may now allow writing, exactly as
/// [`write_in_place`] would decide at a store's fault (the entry writable and no longer
/// copy-on-write, an anonymous object with no copy object to push into and no locks).
/// Marks the object written when it offers any. Nothing when the entry does not qualify.
pub fn reclaim_ahead<F: Copy>(
    map: &Map,
    objs: &mut Objects<F>,
    page: u64,
    mut f: impl FnMut(u64, F),
) {
    let Some((start, e)) = map.entry(page) else {
        return;
    };
    if e.cow || !e.prot.contains(Prot::WRITE) || objs.has_locks(e.object) {
        return;
    }
    let Some(o) = objs.get(e.object) else {
        return;
    };
    if o.kind() != Kind::Anonymous || o.copy().is_some() {
        return;
    }
    let from = e.offset + (page - start);
    let to = e.offset + (e.end - start);
    let mut any = false;
    o.each_resident(from, to, RECLAIM_AHEAD_MAX, |off, frame| {
        f(start + (off - e.offset), frame);
        any = true;
    });
    if any {
        objs.mark_written(e.object);
    }
}

/// Decides what an `access` at `addr` in `map` needs. See the module documentation.
/// Errors: [`Error::NoMemory`] when a shadow or a page-in record cannot be allocated
/// (nothing changed), [`Error::NotFound`] when the map names an object that is gone
/// (a bug elsewhere, reported rather than trusted).
pub fn resolve<F: Copy>(
    map: &mut Map,
    objs: &mut Objects<F>,
    addr: u64,
    access: Access,
) -> Result<Fault<F>, Error> {
    let page = addr & !(PAGE_SIZE - 1);
    let Some((start, mut e)) = map.entry(page) else {
        return Ok(done(Decision::AddressError, FaultClass::AddressError, None));
    };
    if !e.prot.allows(access) {
        return Ok(done(
            Decision::ProtectionError,
            FaultClass::WriteError,
            None,
        ));
    }
    let obj = objs.get(e.object).ok_or(Error::NotFound)?;
    let rel = page - start;
    if let Kind::Physical { base, uncached } = obj.kind() {
        let addr = base
            .checked_add(e.offset)
            .and_then(|a| a.checked_add(rel))
            .ok_or(Error::InvalidArgument)?;
        let writable = e.prot.contains(Prot::WRITE);
        let d = Decision::MapPhysical {
            addr,
            writable,
            uncached,
        };
        return Ok(done(d, FaultClass::MemoryFill, None));
    }
    // Whether the entry's object has a copy object (a zero fill may then need a push).
    let (first, first_has_copy) = (e.object, obj.copy().is_some());
    let mut reclaimed = None;
    if access == Access::Write && e.cow {
        if obj.refs() == 1 && obj.kind() == Kind::Anonymous {
            // Nothing else sees the object: the entry simply owns it again, every page
            // of it at once (a page at a time costs more: `docs/vm.md`, "Copy-on-write
            // reclaim, and reclaiming ahead"). The faulting page counts as reclaimed when
            // it is the object's own.
            e.cow = false;
            reclaimed = Some(u64::from(obj.page(e.offset + rel).is_some()));
        } else {
            // The entry's own shadow takes over its reference to the object.
            let len = e.end - start;
            let s = objs.shadow(e.object, e.offset, len, map.account())?;
            e.object = s;
            e.offset = 0;
            e.cow = false;
        }
        if let Some(me) = map.get_mut(start) {
            *me = e;
        }
    }
    let top = e.object;
    let off = e.offset + rel;
    let class_if_in_top = if reclaimed.is_some() {
        FaultClass::CopyOnWriteReclaim
    } else {
        FaultClass::MemoryFill
    };
    let found = objs.find(top, off)?;
    // A resident page of a pager-backed object its pager has locked against this access
    // (a copy of it reads it: a write through a copy needs only a read).
    if let Found::Resident {
        object,
        offset,
        depth,
        ..
    } = found
    {
        if objs.has_locks(object) {
            let allow = objs.lock_at(object, offset);
            let needs = match (access, depth) {
                (Access::Write, 0) => Prot::WRITE,
                (Access::Execute, _) => Prot::EXECUTE,
                _ => Prot::READ,
            };
            let pager = match objs.get(object).map(|o| o.kind()) {
                Some(Kind::Pager { pager, dead: false }) => Some(pager),
                _ => None,
            };
            if !allow.contains(needs) {
                let decision = match pager {
                    Some(pager) => Decision::Unlock {
                        pager,
                        object,
                        offset,
                    },
                    None => Decision::PagerError { object, offset },
                };
                return Ok(Fault {
                    decision,
                    class: None,
                    reclaimed,
                    executable: e.prot.contains(Prot::EXECUTE),
                });
            }
            if depth == 0 && !allow.contains(Prot::WRITE) {
                // Readable only: a later write faults into the lock.
                if let Found::Resident { frame, .. } = found {
                    let d = Decision::Map {
                        frame,
                        writable: false,
                    };
                    return Ok(Fault {
                        executable: e.prot.contains(Prot::EXECUTE),
                        ..done(d, class_if_in_top, reclaimed)
                    });
                }
            }
        }
    }
    let fault = match found {
        Found::Physical { addr, uncached } => done(
            Decision::MapPhysical {
                addr,
                writable: false,
                uncached,
            },
            FaultClass::MemoryFill,
            reclaimed,
        ),
        Found::Zero => {
            // After the fill the page is `top`'s own (depth 0): the next round would map
            // it, writable as below, unless a copy object must get its old contents first.
            let has_copy = if top == first {
                first_has_copy
            } else {
                objs.get(top).is_some_and(|o| o.copy().is_some())
            };
            let then_map = (!has_copy).then(|| !e.cow && e.prot.contains(Prot::WRITE));
            if then_map == Some(true) {
                objs.mark_written(top);
            }
            done(
                Decision::ZeroFill {
                    object: top,
                    offset: off,
                    then_map,
                },
                FaultClass::ZeroFill,
                // A reclaim's faulting page, filled into the object it gave back.
                reclaimed.map(|pages| pages + 1),
            )
        }
        Found::PagingIn { object, offset }
        | Found::Out {
            object,
            offset,
            asked: true,
            ..
        } => Fault {
            decision: Decision::Wait { object, offset },
            class: None,
            reclaimed,
            executable: false,
        },
        Found::Out {
            object,
            offset,
            asked: false,
            ..
        } => {
            let slot = objs.begin_swap_in(object, offset)?;
            done(
                Decision::SwapIn {
                    object,
                    offset,
                    slot,
                },
                FaultClass::PagerFill,
                reclaimed,
            )
        }
        Found::Failed { object, offset }
        | Found::Pager {
            object,
            offset,
            dead: true,
            ..
        } => Fault {
            decision: Decision::PagerError { object, offset },
            class: None,
            reclaimed,
            executable: false,
        },
        Found::Pager {
            object,
            offset,
            pager,
            dead: false,
        } => {
            objs.begin_page_in(object, offset)?;
            done(
                Decision::PageIn {
                    pager,
                    object,
                    offset,
                },
                FaultClass::PagerFill,
                reclaimed,
            )
        }
        Found::Resident {
            frame, depth: 0, ..
        } => {
            let push = push_target(objs, top, off);
            match (access, push) {
                (Access::Write, Some(c)) => done(
                    Decision::CopyOnWrite {
                        from: frame,
                        to: c,
                        offset: off,
                        unmap_from: true,
                    },
                    FaultClass::CopyOnWriteCopy,
                    reclaimed,
                ),
                _ => {
                    let writable = !e.cow && e.prot.contains(Prot::WRITE) && push.is_none();
                    if writable {
                        objs.mark_written(top);
                    }
                    done(
                        Decision::Map { frame, writable },
                        class_if_in_top,
                        reclaimed,
                    )
                }
            }
        }
        Found::Resident { frame, .. } => match access {
            Access::Write => {
                let shared = objs.get(top).is_some_and(|o| o.refs() > 1);
                done(
                    Decision::CopyOnWrite {
                        from: frame,
                        to: top,
                        offset: off,
                        unmap_from: shared,
                    },
                    FaultClass::CopyOnWriteCopy,
                    reclaimed,
                )
            }
            Access::Read | Access::Execute => done(
                Decision::Map {
                    frame,
                    writable: false,
                },
                FaultClass::MemoryFill,
                reclaimed,
            ),
        },
    };
    Ok(Fault {
        executable: e.prot.contains(Prot::EXECUTE),
        ..fault
    })
}
