//! SPIN's `PhysAddr.Reclaim`, machine-independent (Bershad et al., section 4.1): page
//! replacement is about to take a page of a task whose extension handles the event; the
//! handler may volunteer another page of that task's, "of less importance than the
//! candidate", to be taken instead. This module decides which pages are a task's to be
//! asked about ([`candidate_address`]) and whether a nomination is taken ([`judge`]); the
//! kernel's page replacement (`kernel/src/vm/replace.rs`) raises the event through a hook
//! and applies the verdict, and the extension family runs the handlers.
//!
//! Pages are named by their address in the installer's own address space, the only
//! address space an extension can name (its capabilities are for its installer's map).
//! A page is *the installer's* when its map maps it directly from a private object: an
//! object that no other map, memory object capability or copy references (Accent's
//! anonymous memory that was never shared), so volunteering it can hurt no other task.
//!
//! # Invariants
//! - A nomination is taken only for a page that is the installer's, resident, in no wired
//!   range (nor any window page replacement keeps, `pinned`), of an object page
//!   replacement may take pages of (`eligible`), and not chosen already: the batch keeps
//!   its size and takes only pages the clock itself could have taken, so a handler can
//!   steer replacement among its installer's pages and nothing else.
//! - Anything else is ignored, with its reason, and the clock's choice stands.

use crate::vm::clock::{pageable_kind, Victim};
use crate::vm::map::Map;
use crate::vm::object::{Kind, Object, ObjectId, Objects};
use crate::vm::PAGE_SIZE;

/// Why a nomination was ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// Not a page boundary.
    Unaligned,
    /// No range of the installer's map covers it (the kernel's half, another task's
    /// address, nothing).
    Unmapped,
    /// A wired range, or a window page replacement keeps (the default pager's, another
    /// map's wired range of the same object).
    Wired,
    /// Not the installer's alone: memory other maps, a memory object's capability or a
    /// copy may reach.
    Shared,
    /// Not resident in the object the installer's map names (not there, on its way in or
    /// out, or only in an object below it).
    NotResident,
    /// Of an object page replacement does not take pages of now (pinned, physical, a
    /// pager-backed object it could not give back).
    NotPageable,
    /// The clock chose it already in this batch.
    AlreadyChosen,
}

/// The address at which `map` (the installer's) maps the `victim` page directly from a
/// private object, if it does: the page is the installer's, and its handlers are asked.
pub fn candidate_address<F: Copy>(objs: &Objects<F>, map: &Map, victim: &Victim<F>) -> Option<u64> {
    if !objs.is_private(victim.object) {
        return None;
    }
    map.entries().find_map(|(start, e)| {
        let len = e.end - start;
        let within = victim
            .offset
            .checked_sub(e.offset)
            .filter(|&d| d < len && e.object == victim.object)?;
        Some(start + within)
    })
}

/// Whether `map` maps the `victim` page directly from a private object at `va`: the
/// check of one address the reverse map names (a translation of the victim's frame),
/// which answers exactly as [`candidate_address`] would for that address. A private
/// object's windows in its one map are disjoint, so at most one address of the map
/// passes, and it is the one [`candidate_address`] finds; a stale record fails the check.
pub fn candidate_at<F: Copy>(objs: &Objects<F>, map: &Map, victim: &Victim<F>, va: u64) -> bool {
    if !objs.is_private(victim.object) {
        return false;
    }
    map.entry(va).is_some_and(|(start, e)| {
        e.object == victim.object && e.offset.checked_add(va - start) == Some(victim.offset)
    })
}

/// The verdict on `nominee`, the address a handler answered for `candidate` (which the
/// installer's `map` maps), `chosen` being the batch so far: `Ok(None)` when it names the
/// candidate itself (the clock's choice stands, as the handler wished), `Ok(Some(page))`
/// when `page` is taken instead, `Err` when it is ignored. `eligible` is page
/// replacement's test of an object (beyond [`pageable_kind`]) and `pinned(object,
/// offset)` its test of a kept window.
pub fn judge<F: Copy>(
    objs: &Objects<F>,
    map: &Map,
    nominee: u64,
    candidate: &Victim<F>,
    chosen: &[Victim<F>],
    eligible: impl Fn(ObjectId, &Object<F>) -> bool,
    pinned: impl Fn(ObjectId, u64) -> bool,
) -> Result<Option<Victim<F>>, Ignored> {
    if !nominee.is_multiple_of(PAGE_SIZE) {
        return Err(Ignored::Unaligned);
    }
    let (start, e) = map.entry(nominee).ok_or(Ignored::Unmapped)?;
    if e.wired != 0 {
        return Err(Ignored::Wired);
    }
    let object = e.object;
    let offset = e
        .offset
        .checked_add(nominee - start)
        .ok_or(Ignored::Unmapped)?;
    if object == candidate.object && offset == candidate.offset {
        return Ok(None);
    }
    if !objs.is_private(object) {
        return Err(Ignored::Shared);
    }
    let o = objs.get(object).ok_or(Ignored::Unmapped)?;
    let frame = objs.resident(object, offset).ok_or(Ignored::NotResident)?;
    if !pageable_kind(o) || !eligible(object, o) {
        return Err(Ignored::NotPageable);
    }
    if pinned(object, offset) {
        return Err(Ignored::Wired);
    }
    if chosen
        .iter()
        .any(|v| v.object == object && v.offset == offset)
    {
        return Err(Ignored::AlreadyChosen);
    }
    Ok(Some(Victim {
        object,
        offset,
        frame,
        pager_backed: matches!(o.kind(), Kind::Pager { .. }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Account;
    use crate::vm::map::Placement;
    use crate::vm::testing::Recorder;
    use crate::vm::{Inherit, Prot};
    use std::vec;
    use std::vec::Vec;

    const P: u64 = PAGE_SIZE;
    const LO: u64 = 0x1000_0000;
    const HI: u64 = 0x2000_0000;

    fn victim(objs: &Objects<u64>, object: ObjectId, offset: u64) -> Victim<u64> {
        Victim {
            object,
            offset,
            frame: objs.resident(object, offset).unwrap(),
            pager_backed: false,
        }
    }

    /// A map with: `hot` (1 page) and `cold` (8 pages) private ranges, each page resident;
    /// `wired` (2 pages, resident, wired); `shared` (an object another reference holds,
    /// 2 pages resident); `holey` (2 pages, only the first resident).
    struct World {
        objs: Objects<u64>,
        map: Map,
        other: Map,
        hot: u64,
        cold: u64,
        wired: u64,
        shared: u64,
        holey: u64,
        m: Recorder,
    }

    fn world() -> World {
        let root = Account::root(1 << 30, 1 << 20).unwrap();
        let mut objs: Objects<u64> = Objects::new(64);
        let mut m = Recorder::default();
        let mut map = Map::new(root.clone(), LO, HI, 64).unwrap();
        let mut other = Map::new(root.clone(), LO, HI, 64).unwrap();
        let mut next = 1000u64;
        let mut fill = |objs: &mut Objects<u64>, map: &Map, va: u64, pages: u64| {
            for i in 0..pages {
                let (s, e) = map.entry(va + i * P).unwrap();
                next += 1;
                objs.insert_page(e.object, e.offset + va + i * P - s, next)
                    .unwrap();
            }
        };
        let rw = Prot::RW;
        let hot = map
            .allocate(&mut objs, Placement::Anywhere, P, rw, &mut m)
            .unwrap();
        let cold = map
            .allocate(&mut objs, Placement::Anywhere, 8 * P, rw, &mut m)
            .unwrap();
        let wired = map
            .allocate(&mut objs, Placement::Anywhere, 2 * P, rw, &mut m)
            .unwrap();
        let holey = map
            .allocate(&mut objs, Placement::Anywhere, 2 * P, rw, &mut m)
            .unwrap();
        fill(&mut objs, &map, hot, 1);
        fill(&mut objs, &map, cold, 8);
        fill(&mut objs, &map, wired, 2);
        fill(&mut objs, &map, holey, 1);
        map.wire(&mut objs, wired, 2 * P).unwrap();
        // Shared: an object mapped by this map and by another task's.
        let obj = objs.anonymous(2 * P, &root).unwrap();
        let shared = map
            .map_object(
                &mut objs,
                Placement::Anywhere,
                2 * P,
                obj,
                0,
                rw,
                Prot::ALL,
                false,
                Inherit::Share,
                &mut m,
            )
            .unwrap();
        objs.add_ref(obj).unwrap();
        other
            .map_object(
                &mut objs,
                Placement::Anywhere,
                2 * P,
                obj,
                0,
                rw,
                Prot::ALL,
                false,
                Inherit::Share,
                &mut m,
            )
            .unwrap();
        fill(&mut objs, &map, shared, 2);
        World {
            objs,
            map,
            other,
            hot,
            cold,
            wired,
            shared,
            holey,
            m,
        }
    }

    fn object_at(w: &World, va: u64) -> (ObjectId, u64) {
        let (s, e) = w.map.entry(va).unwrap();
        (e.object, e.offset + va - s)
    }

    /// The reverse map's way (an address checked with [`candidate_at`]) finds what the
    /// walk over the map's entries finds, for every page of every range and for
    /// addresses that are stale, unaligned within the page, or outside everything.
    #[test]
    fn candidate_at_agrees_with_the_walk() {
        let w = world();
        let (mut checked, mut found) = (0, 0);
        for (va, pages) in [
            (w.hot, 1),
            (w.cold, 8),
            (w.wired, 2),
            (w.shared, 2),
            (w.holey, 2),
        ] {
            for i in 0..pages {
                let Some(frame) = w
                    .map
                    .entry(va + i * P)
                    .and_then(|(s, e)| w.objs.resident(e.object, e.offset + va + i * P - s))
                else {
                    continue;
                };
                let (object, offset) = object_at(&w, va + i * P);
                let v = Victim {
                    object,
                    offset,
                    frame,
                    pager_backed: false,
                };
                let walk = candidate_address(&w.objs, &w.map, &v);
                if let Some(a) = walk {
                    assert!((LO..LO + 64 * P).contains(&a), "the probes cover {a:#x}");
                    found += 1;
                }
                // Every address the reverse map could name, right or stale.
                for probe in (LO..LO + 64 * P).step_by(P as usize) {
                    assert_eq!(
                        candidate_at(&w.objs, &w.map, &v, probe),
                        walk == Some(probe),
                        "victim at {:#x}, probe {probe:#x}",
                        va + i * P
                    );
                }
                assert!(!candidate_at(&w.objs, &w.other, &v, va + i * P) || walk.is_none());
                checked += 1;
            }
        }
        assert_eq!(checked, 14, "every resident page was tried");
        // hot, cold, wired, holey's first: private; shared's two are not.
        assert_eq!(found, 12, "the private pages are the map's own");
    }

    fn judge_in(
        w: &World,
        nominee: u64,
        candidate: &Victim<u64>,
        chosen: &[Victim<u64>],
    ) -> Result<Option<Victim<u64>>, Ignored> {
        judge(
            &w.objs,
            &w.map,
            nominee,
            candidate,
            chosen,
            |_, _| true,
            |_, _| false,
        )
    }

    #[test]
    fn a_page_of_the_installers_own_is_taken_instead() {
        let w = world();
        let (ho, hoff) = object_at(&w, w.hot);
        let hot = victim(&w.objs, ho, hoff);
        let (co, coff) = object_at(&w, w.cold + 3 * P);
        let got = judge_in(&w, w.cold + 3 * P, &hot, &[hot]).unwrap().unwrap();
        assert_eq!(got, victim(&w.objs, co, coff));
        // Naming the candidate itself: the clock's choice stands, as the handler wished.
        assert_eq!(judge_in(&w, w.hot, &hot, &[hot]), Ok(None));
    }

    #[test]
    fn anything_but_a_resident_unwired_private_page_is_ignored() {
        let w = world();
        let (ho, hoff) = object_at(&w, w.hot);
        let hot = victim(&w.objs, ho, hoff);
        let (co, coff) = object_at(&w, w.cold);
        let cold0 = victim(&w.objs, co, coff);
        let cases: Vec<(u64, Ignored)> = vec![
            (w.cold + 1, Ignored::Unaligned),
            (!(P - 1), Ignored::Unmapped),
            (0xffff_8000_0000_0000, Ignored::Unmapped),
            (0, Ignored::Unmapped),
            (w.wired, Ignored::Wired),
            (w.wired + P, Ignored::Wired),
            (w.shared, Ignored::Shared),
            (w.holey + P, Ignored::NotResident),
            (w.cold, Ignored::AlreadyChosen),
        ];
        for (va, why) in cases {
            assert_eq!(
                judge_in(&w, va, &hot, &[hot, cold0]),
                Err(why),
                "nominee {va:#x}"
            );
        }
        // A page of another task's (resident, private there) is nothing in the
        // installer's map.
        let mut w = w;
        let theirs = w
            .other
            .allocate(
                &mut w.objs,
                Placement::Fixed(HI - 4 * P),
                P,
                crate::vm::Prot::RW,
                &mut w.m,
            )
            .unwrap();
        let (to, toff) = {
            let (s, e) = w.other.entry(theirs).unwrap();
            (e.object, e.offset + theirs - s)
        };
        w.objs.insert_page(to, toff, 4242).unwrap();
        assert_eq!(judge_in(&w, theirs, &hot, &[hot]), Err(Ignored::Unmapped));
        // A window page replacement keeps, and an object it may not take pages of now.
        let pinned = judge(
            &w.objs,
            &w.map,
            w.cold + 2 * P,
            &hot,
            &[hot],
            |_, _| true,
            |o, off| o == co && off == coff + 2 * P,
        );
        assert_eq!(pinned, Err(Ignored::Wired));
        let not_now = judge(
            &w.objs,
            &w.map,
            w.cold + 2 * P,
            &hot,
            &[hot],
            |_, _| false,
            |_, _| false,
        );
        assert_eq!(not_now, Err(Ignored::NotPageable));
    }

    #[test]
    fn only_pages_a_map_maps_from_a_private_object_are_asked_about() {
        let mut w = world();
        let (ho, hoff) = object_at(&w, w.hot);
        let (co, coff) = object_at(&w, w.cold + 5 * P);
        let (so, soff) = object_at(&w, w.shared);
        let hot = victim(&w.objs, ho, hoff);
        assert_eq!(candidate_address(&w.objs, &w.map, &hot), Some(w.hot));
        let cold = victim(&w.objs, co, coff);
        assert_eq!(
            candidate_address(&w.objs, &w.map, &cold),
            Some(w.cold + 5 * P)
        );
        // Shared memory: nobody's alone, nobody is asked.
        let shared = victim(&w.objs, so, soff);
        assert_eq!(candidate_address(&w.objs, &w.map, &shared), None);
        assert_eq!(candidate_address(&w.objs, &w.other, &shared), None);
        // Another map does not map the installer's page.
        assert_eq!(candidate_address(&w.objs, &w.other, &hot), None);
        // A range split in two (a protection change in its middle) still names the page.
        w.map
            .protect(&mut w.objs, w.cold + 2 * P, P, Prot::READ, false, &mut w.m)
            .unwrap();
        assert_eq!(
            candidate_address(&w.objs, &w.map, &cold),
            Some(w.cold + 5 * P)
        );
        assert_eq!(
            judge_in(&w, w.cold + 5 * P, &hot, &[hot]).map(|v| v.map(|v| v.offset)),
            Ok(Some(coff))
        );
    }
}
