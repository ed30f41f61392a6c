//! Property tests of the virtual-memory core against a model of page contents.
//!
//! Random sequences of allocate, deallocate, protect, inherit, write, read, fork, region
//! copy (copy or move, between tasks or within one) and task end, on up to four tasks, are
//! applied to real maps and objects through the simulated machine of `vm::tests` (whose
//! page tables are a cache: a stale translation reads wrong) and to [`Model`]: per task,
//! page -> (cell, protection, inheritance), where a cell is one word of contents. Sharing
//! is two pages naming one cell; a copy is a new cell with the value copied. After every
//! step the two must agree on each result and on every mapped page's contents, and the
//! real state must keep its bounds: at most two objects per map entry (collapse works),
//! every frame held by exactly one object, and at the end nothing left at all.

use super::copy::{copy_in, copy_out, copy_region, fork};
use super::fault::{write_in_place, Decision};
use super::map::{Map, Placement, ENTRIES_MAX};
use super::object::Page;
use super::tests::{Sim, P};
use super::Access;
use super::{Inherit, Prot};
use crate::quota::{Account, Resource};
use baton_abi::Error;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::vec;
use std::vec::Vec;

/// Task slots.
const TASKS: usize = 4;
/// Pages in each map (small, so ranges collide).
const PAGES: u64 = 48;
const LO: u64 = 0x4000_0000;

fn addr(page: u64) -> u64 {
    LO + page * P
}

#[derive(Clone, Debug)]
enum Op {
    Allocate(usize, u64, Option<u64>),
    Deallocate(usize, u64, u64),
    Protect(usize, u64, u64, u8),
    /// One page's protection through `Map::protect_page`.
    ProtectPage(usize, u64, u8),
    Inherit(usize, u64, u64, u8),
    Write(usize, u64, u64),
    Read(usize, u64),
    Fork(usize),
    Copy {
        src: usize,
        page: u64,
        n: u64,
        dst: usize,
        delete: bool,
    },
    End(usize),
    /// Page replacement takes up to this many pages; frames whose number has this bit
    /// set count as referenced.
    PageOut(usize, u8),
}

fn op() -> impl Strategy<Value = Op> {
    let t = 0..TASKS;
    let pg = 0..PAGES;
    let n = 1..8u64;
    prop_oneof![
        3 => (t.clone(), n.clone(), proptest::option::of(pg.clone()))
            .prop_map(|(t, n, at)| Op::Allocate(t, n, at)),
        1 => (t.clone(), pg.clone(), n.clone()).prop_map(|(t, p, n)| Op::Deallocate(t, p, n)),
        1 => (t.clone(), pg.clone(), n.clone(), 0..3u8)
            .prop_map(|(t, p, n, r)| Op::Protect(t, p, n, r)),
        2 => (t.clone(), pg.clone(), n.clone(), 0..3u8)
            .prop_map(|(t, p, n, i)| Op::Inherit(t, p, n, i)),
        4 => (t.clone(), pg.clone(), 0..3u8).prop_map(|(t, p, r)| Op::ProtectPage(t, p, r)),
        6 => (t.clone(), pg.clone(), 1..1000u64).prop_map(|(t, p, v)| Op::Write(t, p, v)),
        4 => (t.clone(), pg.clone()).prop_map(|(t, p)| Op::Read(t, p)),
        1 => t.clone().prop_map(Op::Fork),
        2 => (t.clone(), pg.clone(), n, t.clone(), any::<bool>())
            .prop_map(|(src, page, n, dst, delete)| Op::Copy { src, page, n, dst, delete }),
        1 => t.prop_map(Op::End),
        2 => (1..12usize, 0..4u8).prop_map(|(n, b)| Op::PageOut(n, b)),
    ]
}

fn prot_of(r: u8) -> Prot {
    match r {
        0 => Prot::NONE,
        1 => Prot::READ,
        _ => Prot::RW,
    }
}

fn inherit_of(i: u8) -> Inherit {
    match i {
        0 => Inherit::Share,
        1 => Inherit::Copy,
        _ => Inherit::None,
    }
}

/// One mapped page in the model.
#[derive(Clone, Copy, Debug)]
struct MPage {
    cell: usize,
    prot: Prot,
    inherit: Inherit,
}

#[derive(Default)]
struct Model {
    cells: Vec<u64>,
    tasks: [Option<BTreeMap<u64, MPage>>; TASKS],
}

impl Model {
    fn cell(&mut self, v: u64) -> usize {
        self.cells.push(v);
        self.cells.len() - 1
    }

    fn free(&self, t: usize, page: u64, n: u64) -> bool {
        let Some(m) = &self.tasks[t] else {
            return false;
        };
        page + n <= PAGES && (page..page + n).all(|p| !m.contains_key(&p))
    }

    fn mapped(&self, t: usize, page: u64, n: u64) -> bool {
        let Some(m) = &self.tasks[t] else {
            return false;
        };
        page + n <= PAGES && (page..page + n).all(|p| m.contains_key(&p))
    }

    fn has_gap(&self, t: usize, n: u64) -> bool {
        (0..PAGES).any(|p| self.free(t, p, n))
    }

    fn read(&self, t: usize, page: u64) -> Result<u64, Decision<u64>> {
        let m = self.tasks[t].as_ref().ok_or(Decision::AddressError)?;
        let mp = m.get(&page).ok_or(Decision::AddressError)?;
        if !mp.prot.contains(Prot::READ) {
            return Err(Decision::ProtectionError);
        }
        Ok(self.cells[mp.cell])
    }
}

struct World {
    sim: Sim,
    maps: [Option<Map>; TASKS],
    model: Model,
}

impl World {
    fn new() -> World {
        let mut w = World {
            sim: Sim::new(),
            maps: Default::default(),
            model: Model::default(),
        };
        w.start(0);
        w
    }

    fn start(&mut self, t: usize) {
        let acct = Account::child(&self.sim.root, 1 << 40, 1 << 30).unwrap();
        self.maps[t] = Some(Map::new(acct, LO, LO + PAGES * P, ENTRIES_MAX).unwrap());
        self.model.tasks[t] = Some(BTreeMap::new());
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Allocate(t, n, at) => {
                let Some(map) = self.maps[t].as_mut() else {
                    return;
                };
                let place = at.map_or(Placement::Anywhere, |p| Placement::Fixed(addr(p)));
                let r = map.allocate(
                    &mut self.sim.objs,
                    place,
                    n * P,
                    Prot::RW,
                    &mut self.sim.mmu,
                );
                let model_ok = match at {
                    Some(p) => {
                        if p + n > PAGES {
                            assert_eq!(r, Err(Error::BadAddress));
                            return;
                        }
                        self.model.free(t, p, n)
                    }
                    None => self.model.has_gap(t, n),
                };
                match r {
                    Ok(a) => {
                        assert!(model_ok);
                        let p0 = (a - LO) / P;
                        assert!(self.model.free(t, p0, n), "allocated over a mapping");
                        for p in p0..p0 + n {
                            let cell = self.model.cell(0);
                            let mp = MPage {
                                cell,
                                prot: Prot::RW,
                                inherit: Inherit::Copy,
                            };
                            self.model.tasks[t].as_mut().unwrap().insert(p, mp);
                        }
                    }
                    Err(e) => {
                        assert!(!model_ok, "refused {e:?}");
                        assert_eq!(e, Error::NoSpace);
                    }
                }
            }
            Op::Deallocate(t, p, n) => {
                let Some(map) = self.maps[t].as_mut() else {
                    return;
                };
                self.sim.mmu.current = t;
                let r = map.deallocate(&mut self.sim.objs, addr(p), n * P, &mut self.sim.mmu);
                if p + n > PAGES {
                    assert_eq!(r, Err(Error::BadAddress));
                    return;
                }
                assert_eq!(r, Ok(()));
                let m = self.model.tasks[t].as_mut().unwrap();
                for q in p..p + n {
                    m.remove(&q);
                }
            }
            Op::Protect(t, p, n, r) => {
                let Some(map) = self.maps[t].as_mut() else {
                    return;
                };
                self.sim.mmu.current = t;
                let prot = prot_of(r);
                let res = map.protect(
                    &mut self.sim.objs,
                    addr(p),
                    n * P,
                    prot,
                    false,
                    &mut self.sim.mmu,
                );
                if self.model.mapped(t, p, n) {
                    assert_eq!(res, Ok(()));
                    let m = self.model.tasks[t].as_mut().unwrap();
                    for q in p..p + n {
                        if let Some(mp) = m.get_mut(&q) {
                            mp.prot = prot;
                        }
                    }
                } else {
                    assert_eq!(res, Err(Error::BadAddress));
                }
            }
            Op::ProtectPage(t, p, r) => {
                let Some(map) = self.maps[t].as_mut() else {
                    return;
                };
                self.sim.mmu.current = t;
                let prot = prot_of(r);
                let res = map.protect_page(&mut self.sim.objs, addr(p), prot, &mut self.sim.mmu);
                if self.model.mapped(t, p, 1) {
                    assert_eq!(res, Ok(()));
                    if let Some(mp) = self.model.tasks[t].as_mut().unwrap().get_mut(&p) {
                        mp.prot = prot;
                    }
                } else {
                    assert_eq!(res, Err(Error::BadAddress));
                }
                // The laziness is bounded: no more entries than mapped pages, and at most
                // the slack more than a map whose neighbours are all merged.
                let mergeable = map
                    .entries()
                    .zip(map.entries().skip(1))
                    .filter(|((s, a), (bs, b))| {
                        a.end == *bs
                            && a.object == b.object
                            && a.offset + (a.end - s) == b.offset
                            && (a.prot, a.max_prot, a.cow, a.inherit, a.wired)
                                == (b.prot, b.max_prot, b.cow, b.inherit, b.wired)
                    })
                    .count();
                assert!(mergeable <= super::map::SLACK_MAX, "{mergeable} mergeable");
            }
            Op::Inherit(t, p, n, i) => {
                let Some(map) = self.maps[t].as_mut() else {
                    return;
                };
                let inh = inherit_of(i);
                let res = map.inherit(&mut self.sim.objs, addr(p), n * P, inh);
                if self.model.mapped(t, p, n) {
                    assert_eq!(res, Ok(()));
                    let m = self.model.tasks[t].as_mut().unwrap();
                    for q in p..p + n {
                        if let Some(mp) = m.get_mut(&q) {
                            mp.inherit = inh;
                        }
                    }
                } else {
                    assert_eq!(res, Err(Error::BadAddress));
                }
            }
            Op::Write(t, p, v) => {
                let Some(map) = self.maps[t].as_mut() else {
                    return;
                };
                // Where a handler's resolution would make the translation writable in
                // place, the fault path agrees: it maps that frame writable.
                if let Some(f) = write_in_place(map, &mut self.sim.objs, addr(p)) {
                    let d = super::fault::resolve(map, &mut self.sim.objs, addr(p), Access::Write)
                        .map(|x| x.decision);
                    assert_eq!(
                        d,
                        Ok(Decision::Map {
                            frame: f,
                            writable: true
                        })
                    );
                }
                let r = self.sim.write(t, map, addr(p), v);
                let m = self.model.tasks[t].as_ref().unwrap();
                match m.get(&p) {
                    None => assert_eq!(r, Err(Decision::AddressError)),
                    Some(mp) if !mp.prot.contains(Prot::WRITE) => {
                        assert_eq!(r, Err(Decision::ProtectionError))
                    }
                    Some(mp) => {
                        assert_eq!(r, Ok(()));
                        let c = mp.cell;
                        self.model.cells[c] = v;
                    }
                }
            }
            Op::Read(t, p) => {
                let Some(map) = self.maps[t].as_mut() else {
                    return;
                };
                assert_eq!(self.sim.read(t, map, addr(p)), self.model.read(t, p));
            }
            Op::Fork(t) => {
                let Some(slot) = (0..TASKS).find(|s| self.maps[*s].is_none()) else {
                    return;
                };
                let Some(parent) = self.maps[t].as_mut() else {
                    return;
                };
                self.sim.mmu.current = t;
                let acct = Account::child(&self.sim.root, 1 << 40, 1 << 30).unwrap();
                let child = fork(
                    parent,
                    &mut self.sim.objs,
                    acct,
                    ENTRIES_MAX,
                    &mut self.sim.mmu,
                )
                .unwrap();
                self.maps[slot] = Some(child);
                let mut cm = BTreeMap::new();
                let pm = self.model.tasks[t].clone().unwrap();
                for (p, mp) in pm {
                    match mp.inherit {
                        Inherit::None => {}
                        Inherit::Share => {
                            cm.insert(p, mp);
                        }
                        Inherit::Copy => {
                            let v = self.model.cells[mp.cell];
                            let cell = self.model.cell(v);
                            cm.insert(p, MPage { cell, ..mp });
                        }
                    }
                }
                self.model.tasks[slot] = Some(cm);
            }
            Op::Copy {
                src,
                page,
                n,
                dst,
                delete,
            } => {
                if self.maps[src].is_none() || self.maps[dst].is_none() {
                    return;
                }
                self.sim.mmu.current = src;
                let ok_src = self.model.mapped(src, page, n);
                let res = if src == dst {
                    let map = self.maps[src].as_mut().unwrap();
                    match copy_out(
                        map,
                        &mut self.sim.objs,
                        addr(page),
                        n * P,
                        delete,
                        &mut self.sim.mmu,
                    ) {
                        Ok(c) => match copy_in(map, c, Placement::Anywhere) {
                            Ok(a) => Ok(a),
                            Err((e, c)) => {
                                c.release(&mut self.sim.objs, &mut self.sim.mmu);
                                // The source is gone already for a move: the model
                                // does the same below.
                                Err((e, true))
                            }
                        },
                        Err(e) => Err((e, false)),
                    }
                } else {
                    let [a, b] = self.maps.get_disjoint_mut([src, dst]).unwrap();
                    let (a, b) = (a.as_mut().unwrap(), b.as_mut().unwrap());
                    copy_region(
                        a,
                        &mut self.sim.objs,
                        addr(page),
                        n * P,
                        delete,
                        b,
                        Placement::Anywhere,
                        &mut self.sim.mmu,
                    )
                    .map_err(|e| (e, false))
                };
                if !ok_src {
                    // A destination without room may be refused first.
                    assert!(
                        matches!(res, Err((Error::BadAddress | Error::NoSpace, false))),
                        "{res:?}"
                    );
                    return;
                }
                let taken: Vec<(u64, MPage)> = {
                    let m = self.model.tasks[src].as_ref().unwrap();
                    (page..page + n).map(|p| (p, m[&p])).collect()
                };
                let fresh: Vec<MPage> = taken
                    .iter()
                    .map(|(_, mp)| {
                        let v = self.model.cells[mp.cell];
                        MPage {
                            cell: self.model.cell(v),
                            prot: mp.prot,
                            inherit: Inherit::Copy,
                        }
                    })
                    .collect();
                let gap_before = src != dst && self.model.has_gap(dst, n);
                match res {
                    Ok(a) => {
                        if delete {
                            let m = self.model.tasks[src].as_mut().unwrap();
                            for p in page..page + n {
                                m.remove(&p);
                            }
                        }
                        let p0 = (a - LO) / P;
                        assert!(self.model.free(dst, p0, n), "copied over a mapping");
                        let m = self.model.tasks[dst].as_mut().unwrap();
                        for (i, mp) in fresh.into_iter().enumerate() {
                            m.insert(p0 + i as u64, mp);
                        }
                    }
                    Err((e, moved)) => {
                        assert_eq!(e, Error::NoSpace);
                        if src != dst {
                            assert!(!gap_before);
                        }
                        if moved && delete {
                            let m = self.model.tasks[src].as_mut().unwrap();
                            for p in page..page + n {
                                m.remove(&p);
                            }
                        }
                    }
                }
            }
            Op::PageOut(n, bit) => {
                // What is paged out must read back as it was: `check_reads` and every
                // later read see it through page-ins.
                self.sim.page_out(n, |f| f & (1 << bit) != 0);
            }
            Op::End(t) => {
                let Some(mut map) = self.maps[t].take() else {
                    return;
                };
                // Objects the task made may live on in others' maps, still charged to
                // its account (as a message outlives its sender): `finish` checks that
                // everything comes back in the end.
                self.sim.end_task(t, &mut map);
                self.model.tasks[t] = None;
                if self.maps.iter().all(Option::is_none) {
                    self.start(0);
                }
            }
        }
    }

    /// Every page of every task reads as the model says (faulting where needed, which
    /// makes pages resident: done now and then, not after every step).
    fn check_reads(&mut self) {
        for t in 0..TASKS {
            let Some(map) = self.maps[t].as_mut() else {
                continue;
            };
            for p in 0..PAGES {
                assert_eq!(
                    self.sim.read(t, map, addr(p)),
                    self.model.read(t, p),
                    "task {t} page {p}"
                );
            }
        }
    }

    /// The bounds and the frames' ownership.
    fn check(&self) {
        let entries: usize = self.maps.iter().flatten().map(Map::len).sum();
        assert!(
            self.sim.objs.len() <= 2 * entries,
            "{} objects for {entries} entries",
            self.sim.objs.len()
        );
        let resident: usize = self
            .sim
            .objs
            .iter()
            .map(|(_, o)| {
                o.iter_pages()
                    .filter(|(_, p)| matches!(p, Page::Resident(_)))
                    .count()
            })
            .sum();
        assert_eq!(
            resident,
            self.sim.mmu.mem.len(),
            "every frame in exactly one object"
        );
    }

    fn finish(mut self) {
        self.check_reads();
        for t in 0..TASKS {
            if let Some(mut map) = self.maps[t].take() {
                self.sim.end_task(t, &mut map);
            }
        }
        assert!(self.sim.objs.is_empty(), "objects leaked");
        assert!(self.sim.mmu.mem.is_empty(), "frames leaked");
        assert!(self.sim.mmu.store.is_empty(), "backing store leaked");
        assert_eq!(self.sim.mmu.slots.in_use(), 0, "slots leaked");
        assert_eq!(self.sim.root.used(Resource::Heap), 0);
        assert_eq!(self.sim.root.used(Resource::Frames), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn vm_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        let mut w = World::new();
        for (i, op) in ops.iter().enumerate() {
            w.step(op);
            w.check();
            if i % 16 == 15 {
                w.check_reads();
            }
        }
        w.finish();
    }
}
