//! Tests of the map, fault and copy modules, through a simulated machine: page tables
//! that act as the cache of the maps they are (an access that finds a translation uses
//! it without asking the map, as the hardware does), and frames whose contents are one
//! word. A missing write-protection or shootdown therefore shows up as a wrong read.

use super::copy::{copy_in, copy_out, copy_region, fork};
use super::fault::{resolve, Decision, FaultStats};
use super::map::{Map, Placement, ENTRIES_MAX, ENTRY_BYTES, SLACK_MAX};
use super::object::Objects;
use super::{Access, Inherit, Machine, Prot, PAGE_SIZE};
use crate::quota::{Account, AccountRef, Resource};
use baton_abi::Error;
use std::collections::BTreeMap;
use std::vec::Vec;

pub(crate) const P: u64 = PAGE_SIZE;
pub(crate) const LO: u64 = 0x1000_0000;
pub(crate) const HI: u64 = 0x2000_0000;

/// Simulated page tables and frames.
#[derive(Debug, Default)]
pub(crate) struct Mmu {
    /// Per task: page -> (frame, writable).
    pub pts: BTreeMap<usize, BTreeMap<u64, (u64, bool)>>,
    /// The task whose map is being operated on.
    pub current: usize,
    /// Frame -> contents.
    pub mem: BTreeMap<u64, u64>,
    next: u64,
    /// The default pager's store: slot -> contents of a paged-out page.
    pub store: BTreeMap<u32, u64>,
    /// Its slots, as the kernel hands them out.
    pub slots: super::clock::Slots,
}

impl Mmu {
    pub fn new_frame(&mut self, value: u64) -> u64 {
        self.next += 1;
        self.mem.insert(self.next, value);
        self.next
    }

    pub fn drop_task(&mut self, task: usize) {
        self.pts.remove(&task);
    }
}

impl Machine<u64> for Mmu {
    fn free_frame(&mut self, frame: u64) {
        for (t, pt) in &self.pts {
            assert!(
                pt.values().all(|(f, _)| *f != frame),
                "frame {frame} freed while task {t} still translates to it"
            );
        }
        assert!(
            self.mem.remove(&frame).is_some(),
            "frame {frame} freed twice"
        );
    }
    fn unmap(&mut self, start: u64, end: u64) {
        if let Some(pt) = self.pts.get_mut(&self.current) {
            pt.retain(|p, _| *p < start || *p >= end);
        }
    }
    fn write_protect(&mut self, start: u64, end: u64) {
        if let Some(pt) = self.pts.get_mut(&self.current) {
            for (_, (_, w)) in pt.range_mut(start..end) {
                *w = false;
            }
        }
    }
    fn write_protect_everywhere(&mut self, frame: u64) {
        for pt in self.pts.values_mut() {
            for (f, w) in pt.values_mut() {
                if *f == frame {
                    *w = false;
                }
            }
        }
    }
    fn unmap_everywhere(&mut self, frame: u64) {
        for pt in self.pts.values_mut() {
            pt.retain(|_, (f, _)| *f != frame);
        }
    }
    fn free_slot(&mut self, slot: u32) {
        assert!(self.slots.is_used(slot), "slot {slot} freed but not used");
        assert!(
            self.store.remove(&slot).is_some(),
            "slot {slot} holds nothing"
        );
        self.slots.free(slot);
    }
}

/// Objects, the machine, counters.
pub(crate) struct Sim {
    pub objs: Objects<u64>,
    pub mmu: Mmu,
    pub stats: FaultStats,
    pub root: AccountRef,
    pub clock: super::clock::Clock,
}

impl Sim {
    pub fn new() -> Sim {
        Sim {
            objs: Objects::new(1 << 20),
            mmu: Mmu::default(),
            stats: FaultStats::default(),
            root: Account::root(1 << 40, 1 << 30).unwrap(),
            clock: super::clock::Clock::new(),
        }
    }

    pub fn map(&self) -> Map {
        let acct = Account::child(&self.root, 1 << 40, 1 << 30).unwrap();
        Map::new(acct, LO, HI, ENTRIES_MAX).unwrap()
    }

    /// The frame an access of `task` (whose map is `map`) reaches, faulting as needed.
    pub fn access(
        &mut self,
        task: usize,
        map: &mut Map,
        addr: u64,
        access: Access,
    ) -> Result<u64, Decision<u64>> {
        let page = addr & !(P - 1);
        let pt = self.mmu.pts.entry(task).or_default();
        if let Some((f, w)) = pt.get(&page) {
            if access != Access::Write || *w {
                return Ok(*f);
            }
        }
        let mut reclaimed = false;
        for round in 0..6 {
            let fault = resolve(map, &mut self.objs, addr, access).unwrap();
            if round == 0 {
                self.stats.record(access, &fault);
                reclaimed = fault.reclaimed.is_some();
            }
            match fault.decision {
                Decision::Map { frame, writable } => {
                    assert!(access != Access::Write || writable);
                    self.mmu
                        .pts
                        .entry(task)
                        .or_default()
                        .insert(page, (frame, writable));
                    if reclaimed {
                        self.reclaim_ahead(task, map, page);
                    }
                    return Ok(frame);
                }
                Decision::ZeroFill {
                    object,
                    offset,
                    then_map,
                } => {
                    let f = self.mmu.new_frame(0);
                    self.objs.insert_page(object, offset, f).unwrap();
                    if let Some(writable) = then_map {
                        // The shortcut the kernel takes: exactly what the next round
                        // decides (checked here on every zero fill of every test).
                        let next = resolve(map, &mut self.objs, addr, access).unwrap();
                        assert_eq!(next.decision, Decision::Map { frame: f, writable });
                        self.mmu
                            .pts
                            .entry(task)
                            .or_default()
                            .insert(page, (f, writable));
                        if reclaimed {
                            self.reclaim_ahead(task, map, page);
                        }
                        return Ok(f);
                    }
                }
                Decision::CopyOnWrite {
                    from,
                    to,
                    offset,
                    unmap_from,
                } => {
                    let v = self.mmu.mem[&from];
                    let f = self.mmu.new_frame(v);
                    self.objs.insert_page(to, offset, f).unwrap();
                    if unmap_from {
                        self.mmu.unmap_everywhere(from);
                    }
                }
                Decision::SwapIn {
                    object,
                    offset,
                    slot,
                } => {
                    // The default pager answers at once here.
                    let v = self.mmu.store.remove(&slot).expect("a slot with contents");
                    self.mmu.slots.free(slot);
                    let f = self.mmu.new_frame(v);
                    self.objs.swap_in(object, offset, slot, f).unwrap();
                }
                d => return Err(d),
            }
        }
        panic!("fault at {addr:#x} took more than six rounds");
    }

    /// What the kernel does after a reclaim: the translations `reclaim_ahead` offers
    /// are made writable where they still map the frame it names.
    /// Those it changed count as reclaimed pages, as the kernel counts them.
    fn reclaim_ahead(&mut self, task: usize, map: &Map, page: u64) {
        let pt = self.mmu.pts.entry(task).or_default();
        let mut raised = 0;
        super::fault::reclaim_ahead(map, &mut self.objs, page, |va, frame| {
            if let Some((f, w)) = pt.get_mut(&va) {
                if *f == frame && !*w {
                    *w = true;
                    raised += 1;
                }
            }
        });
        self.stats.reclaimed_ahead(raised);
    }

    /// Page replacement: up to `n` pages chosen by the clock (`referenced` says which
    /// frames were referenced) leave memory as the kernel does it: every translation
    /// removed, the contents copied to the store, the frame freed. Returns how many.
    pub fn page_out(&mut self, n: usize, referenced: impl Fn(u64) -> bool) -> usize {
        if self.mmu.slots.capacity() == 0 {
            self.mmu.slots.set_capacity(1 << 12).unwrap();
        }
        let mut victims = Vec::with_capacity(n);
        self.clock.select(
            &self.objs,
            4 * n + 8,
            |_, _| true,
            |_, _| false,
            referenced,
            &mut victims,
        );
        let mut done = 0;
        for v in victims {
            assert!(!v.pager_backed);
            let Some(slot) = self.mmu.slots.alloc() else {
                break;
            };
            self.mmu.unmap_everywhere(v.frame);
            let f = self.objs.page_out(v.object, v.offset, slot).unwrap();
            assert_eq!(f, v.frame);
            let value = self.mmu.mem[&f];
            self.mmu.store.insert(slot, value);
            self.mmu.free_frame(f);
            done += 1;
        }
        done
    }

    pub fn read(&mut self, task: usize, map: &mut Map, addr: u64) -> Result<u64, Decision<u64>> {
        let f = self.access(task, map, addr, Access::Read)?;
        Ok(self.mmu.mem[&f])
    }

    pub fn write(
        &mut self,
        task: usize,
        map: &mut Map,
        addr: u64,
        value: u64,
    ) -> Result<(), Decision<u64>> {
        let f = self.access(task, map, addr, Access::Write)?;
        self.mmu.mem.insert(f, value);
        Ok(())
    }

    pub fn end_task(&mut self, task: usize, map: &mut Map) {
        self.mmu.current = task;
        map.clear(&mut self.objs, &mut self.mmu);
        self.mmu.drop_task(task);
    }

    /// The longest object chain any entry of `map` starts.
    pub fn longest_chain(&self, map: &Map) -> usize {
        map.entries()
            .map(|(_, e)| self.objs.chain_len(e.object))
            .max()
            .unwrap_or(0)
    }
}

fn alloc(sim: &mut Sim, map: &mut Map, at: Placement, len: u64) -> Result<u64, Error> {
    map.allocate(&mut sim.objs, at, len, Prot::RW, &mut sim.mmu)
}

#[test]
fn allocate_anywhere_and_fixed_and_errors() {
    let mut sim = Sim::new();
    let mut map = sim.map();
    let a = alloc(&mut sim, &mut map, Placement::Anywhere, 4 * P).unwrap();
    assert_eq!(a, LO);
    let b = alloc(&mut sim, &mut map, Placement::Anywhere, P).unwrap();
    assert_eq!(b, LO + 4 * P);
    assert_eq!(
        alloc(&mut sim, &mut map, Placement::Fixed(LO + P), P),
        Err(Error::NoSpace),
        "overlap"
    );
    assert_eq!(
        alloc(&mut sim, &mut map, Placement::Fixed(LO + 1), P),
        Err(Error::InvalidArgument),
        "alignment"
    );
    assert_eq!(
        alloc(&mut sim, &mut map, Placement::Anywhere, 0),
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        alloc(&mut sim, &mut map, Placement::Anywhere, 3),
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        alloc(&mut sim, &mut map, Placement::Fixed(HI), P),
        Err(Error::BadAddress),
        "out of range"
    );
    assert_eq!(
        alloc(
            &mut sim,
            &mut map,
            Placement::Fixed(u64::MAX - P + 1),
            2 * P
        ),
        Err(Error::BadAddress),
        "wrapping"
    );
    assert_eq!(
        alloc(&mut sim, &mut map, Placement::Anywhere, HI),
        Err(Error::NoSpace)
    );
    let c = alloc(&mut sim, &mut map, Placement::Fixed(HI - P), P).unwrap();
    // No room above the last entry: the first gap from the bottom.
    map.deallocate(&mut sim.objs, a, 2 * P, &mut sim.mmu)
        .unwrap();
    assert_eq!(
        alloc(&mut sim, &mut map, Placement::Anywhere, 2 * P),
        Ok(LO)
    );
    assert_eq!(map.len(), 4);
    assert_eq!(map.query(c).map(|(s, _)| s), Some(c));
    assert_eq!(
        map.query(LO + 7 * P).map(|(s, _)| s),
        Some(c),
        "next region above"
    );
    sim.end_task(0, &mut map);
    assert!(sim.objs.is_empty());
    assert_eq!(map.account().used(Resource::Heap), 0);
}

#[test]
fn zero_fill_then_memory_fill_and_deallocate_frees() {
    let mut sim = Sim::new();
    let mut map = sim.map();
    let a = alloc(&mut sim, &mut map, Placement::Anywhere, 0x800_0000).unwrap();
    assert_eq!(sim.read(0, &mut map, a + 5 * P + 8).unwrap(), 0);
    sim.write(0, &mut map, a + 5 * P, 77).unwrap();
    assert_eq!(sim.read(0, &mut map, a + 5 * P).unwrap(), 77);
    assert_eq!(sim.stats.zero_fills, 1);
    // Lose the translation: the next read is a memory fill.
    sim.mmu.pts.clear();
    assert_eq!(sim.read(0, &mut map, a + 5 * P).unwrap(), 77);
    assert_eq!(sim.stats.memory_fills, 1);
    // Deallocating the middle of the private range frees its page at once.
    map.deallocate(&mut sim.objs, a + 4 * P, 4 * P, &mut sim.mmu)
        .unwrap();
    assert!(sim.mmu.mem.is_empty());
    assert_eq!(map.len(), 2);
    assert_eq!(
        sim.read(0, &mut map, a + 5 * P),
        Err(Decision::AddressError)
    );
    assert_eq!(sim.stats.address_errors, 1);
    sim.end_task(0, &mut map);
    assert!(sim.objs.is_empty());
}

#[test]
fn protect_inherit_wire_and_their_errors() {
    let mut sim = Sim::new();
    let mut map = sim.map();
    let a = alloc(&mut sim, &mut map, Placement::Anywhere, 8 * P).unwrap();
    sim.write(0, &mut map, a + 2 * P, 5).unwrap();
    sim.mmu.current = 0;
    map.protect(
        &mut sim.objs,
        a + 2 * P,
        2 * P,
        Prot::READ,
        false,
        &mut sim.mmu,
    )
    .unwrap();
    assert_eq!(map.len(), 3, "split in three");
    assert_eq!(sim.read(0, &mut map, a + 2 * P).unwrap(), 5);
    assert_eq!(
        sim.write(0, &mut map, a + 2 * P, 6),
        Err(Decision::ProtectionError)
    );
    assert_eq!(sim.stats.write_errors, 1);
    // Lower the maximum, then try to raise above it.
    map.protect(&mut sim.objs, a, P, Prot::READ, true, &mut sim.mmu)
        .unwrap();
    assert_eq!(
        map.protect(&mut sim.objs, a, P, Prot::RW, false, &mut sim.mmu),
        Err(Error::Denied)
    );
    assert_eq!(
        map.protect(&mut sim.objs, a, 16 * P, Prot::READ, false, &mut sim.mmu),
        Err(Error::BadAddress),
        "a hole"
    );
    assert_eq!(
        map.protect(&mut sim.objs, a + 1, P, Prot::READ, false, &mut sim.mmu),
        Err(Error::InvalidArgument)
    );
    map.protect(&mut sim.objs, a + 4 * P, P, Prot::NONE, false, &mut sim.mmu)
        .unwrap();
    assert_eq!(
        sim.read(0, &mut map, a + 4 * P),
        Err(Decision::ProtectionError)
    );
    map.inherit(&mut sim.objs, a, 8 * P, Inherit::Share)
        .unwrap();
    assert!(map.entries().all(|(_, e)| e.inherit == Inherit::Share));
    assert_eq!(
        map.inherit(&mut sim.objs, a, 9 * P, Inherit::None),
        Err(Error::BadAddress)
    );
    // Wiring.
    assert_eq!(map.unwire(&mut sim.objs, a, P), Err(Error::InvalidArgument));
    map.wire(&mut sim.objs, a + 6 * P, 2 * P).unwrap();
    map.wire(&mut sim.objs, a + 6 * P, P).unwrap();
    assert_eq!(map.entry(a + 6 * P).unwrap().1.wired, 2);
    assert_eq!(
        map.deallocate(&mut sim.objs, a, 8 * P, &mut sim.mmu),
        Err(Error::Denied)
    );
    map.unwire(&mut sim.objs, a + 6 * P, 2 * P).unwrap();
    map.unwire(&mut sim.objs, a + 6 * P, P).unwrap();
    map.deallocate(&mut sim.objs, a, 8 * P, &mut sim.mmu)
        .unwrap();
    assert!(map.is_empty());
    assert!(sim.objs.is_empty());
}

#[test]
fn entries_are_bounded_and_charged() {
    let mut sim = Sim::new();
    let acct = Account::child(&sim.root, 1 << 30, 1 << 20).unwrap();
    let mut map = Map::new(acct.clone(), LO, HI, 3).unwrap();
    for _ in 0..3 {
        alloc(&mut sim, &mut map, Placement::Anywhere, P).unwrap();
    }
    assert_eq!(
        alloc(&mut sim, &mut map, Placement::Anywhere, P),
        Err(Error::NoMemory)
    );
    // A deallocation that would need a split fails with nothing changed.
    let mut big = Map::new(acct.clone(), LO, HI, 1).unwrap();
    let a = alloc(&mut sim, &mut big, Placement::Anywhere, 4 * P).unwrap();
    assert_eq!(
        big.deallocate(&mut sim.objs, a + P, P, &mut sim.mmu),
        Err(Error::NoMemory)
    );
    assert_eq!(big.len(), 1);
    sim.end_task(1, &mut big);
    sim.end_task(0, &mut map);
    assert_eq!(acct.used(Resource::Heap), 0);
    // A small heap limit bounds the entries too.
    let tight = Account::child(
        &sim.root,
        3 * ENTRY_BYTES + 3 * super::object::OBJECT_BYTES,
        10,
    )
    .unwrap();
    let mut m2 = Map::new(tight.clone(), LO, HI, ENTRIES_MAX).unwrap();
    let mut n = 0;
    while alloc(&mut sim, &mut m2, Placement::Anywhere, P).is_ok() {
        n += 1;
    }
    assert_eq!(n, 3);
    sim.end_task(2, &mut m2);
    assert_eq!(tight.used(Resource::Heap), 0);
}

#[test]
fn allocation_is_flat_in_the_range_size() {
    // A huge range is one entry and one object, and touching nothing costs nothing.
    let mut sim = Sim::new();
    let mut map = sim.map();
    let a = alloc(&mut sim, &mut map, Placement::Anywhere, 0x800_0000).unwrap();
    assert_eq!(map.len(), 1);
    map.deallocate(&mut sim.objs, a, 0x800_0000, &mut sim.mmu)
        .unwrap();
    assert!(sim.objs.is_empty());
    // Ten thousand entries: the tree stays shallow.
    for _ in 0..10_000 {
        alloc(&mut sim, &mut map, Placement::Anywhere, P).unwrap();
    }
    assert_eq!(map.len(), 10_000);
    sim.end_task(0, &mut map);
}

#[test]
fn region_copy_is_by_value_both_ways() {
    let mut sim = Sim::new();
    let (mut a, mut b) = (sim.map(), sim.map());
    let x = alloc(&mut sim, &mut a, Placement::Anywhere, 4 * P).unwrap();
    sim.write(0, &mut a, x, 1).unwrap();
    sim.write(0, &mut a, x + P, 2).unwrap();
    sim.mmu.current = 0;
    let y = copy_region(
        &mut a,
        &mut sim.objs,
        x,
        4 * P,
        false,
        &mut b,
        Placement::Anywhere,
        &mut sim.mmu,
    )
    .unwrap();
    assert_eq!(sim.read(1, &mut b, y).unwrap(), 1);
    assert_eq!(sim.read(1, &mut b, y + 2 * P).unwrap(), 0);
    sim.write(0, &mut a, x, 10).unwrap();
    sim.write(1, &mut b, y + P, 20).unwrap();
    sim.write(1, &mut b, y + 3 * P, 30).unwrap();
    assert_eq!(
        sim.read(1, &mut b, y).unwrap(),
        1,
        "sender's later write unseen"
    );
    assert_eq!(
        sim.read(0, &mut a, x + P).unwrap(),
        2,
        "receiver's write unseen"
    );
    assert_eq!(sim.read(0, &mut a, x + 3 * P).unwrap(), 0);
    assert_eq!(sim.read(0, &mut a, x).unwrap(), 10);
    assert!(sim.stats.cow_copies >= 1);
    sim.end_task(1, &mut b);
    sim.end_task(0, &mut a);
    assert!(sim.objs.is_empty());
    assert!(sim.mmu.mem.is_empty());
}

#[test]
fn move_removes_the_source_and_shares_nothing() {
    let mut sim = Sim::new();
    let (mut a, mut b) = (sim.map(), sim.map());
    let x = alloc(&mut sim, &mut a, Placement::Anywhere, 2 * P).unwrap();
    sim.write(0, &mut a, x + P, 9).unwrap();
    sim.mmu.current = 0;
    let c = copy_out(&mut a, &mut sim.objs, x, 2 * P, true, &mut sim.mmu).unwrap();
    assert!(a.is_empty());
    assert!(!c.pieces()[0].cow, "a move makes nothing copy-on-write");
    assert_eq!(sim.read(0, &mut a, x), Err(Decision::AddressError));
    let y = copy_in(&mut b, c, Placement::Fixed(x + 16 * P)).unwrap();
    assert_eq!(y, x + 16 * P);
    assert_eq!(sim.read(1, &mut b, y + P).unwrap(), 9);
    sim.write(1, &mut b, y + P, 4).unwrap();
    assert_eq!(sim.stats.cow_copies, 0);
    sim.end_task(1, &mut b);
    assert!(sim.objs.is_empty());
}

#[test]
fn a_moved_regions_resident_pages_can_be_entered_when_received() {
    // What the kernel enters when it delivers a moved region (`resident_reads`) is
    // exactly what read faults would enter; a copied region (copy-on-write) gets nothing.
    let mut sim = Sim::new();
    let (mut a, mut b) = (sim.map(), sim.map());
    let x = alloc(&mut sim, &mut a, Placement::Anywhere, 3 * P).unwrap();
    sim.write(0, &mut a, x, 5).unwrap();
    sim.write(0, &mut a, x + 2 * P, 6).unwrap();
    sim.mmu.current = 0;
    let w = alloc(&mut sim, &mut a, Placement::Anywhere, P).unwrap();
    sim.write(0, &mut a, w, 4).unwrap();
    sim.mmu.current = 0;
    let c = copy_out(&mut a, &mut sim.objs, w, P, false, &mut sim.mmu).unwrap();
    let y = copy_in(&mut b, c, Placement::Anywhere).unwrap();
    b.resident_reads(&sim.objs, y, 8, |va, _| {
        panic!("copied, yet entered {va:#x}")
    });
    // The kernel moves a region as a copy whose source then goes (`ool.rs`): once the
    // source is gone the region's copy-on-write entry holds the only reference.
    let c = copy_out(&mut a, &mut sim.objs, x, 3 * P, false, &mut sim.mmu).unwrap();
    let z = copy_in(&mut b, c, Placement::Anywhere).unwrap();
    b.resident_reads(&sim.objs, z, 8, |va, _| {
        panic!("still shared, yet entered {va:#x}")
    });
    a.deallocate(&mut sim.objs, x, 3 * P, &mut sim.mmu).unwrap();
    let mut got = Vec::new();
    b.resident_reads(&sim.objs, z, 8, |va, f| got.push((va, f)));
    assert_eq!(
        got.iter().map(|(va, _)| *va).collect::<Vec<_>>(),
        [z, z + 2 * P]
    );
    for (va, f) in got {
        let fault = resolve(&mut b, &mut sim.objs, va, Access::Read).unwrap();
        assert!(
            matches!(fault.decision, Decision::Map { frame, .. } if frame == f),
            "{fault:?}"
        );
    }
    sim.end_task(1, &mut b);
    sim.end_task(0, &mut a);
    assert!(sim.objs.is_empty());
}

#[test]
fn copy_errors_change_nothing() {
    let mut sim = Sim::new();
    let (mut a, mut b) = (sim.map(), sim.map());
    let x = alloc(&mut sim, &mut a, Placement::Anywhere, 2 * P).unwrap();
    let r = copy_out(&mut a, &mut sim.objs, x, 3 * P, false, &mut sim.mmu);
    assert_eq!(r.err(), Some(Error::BadAddress), "a hole");
    let r = copy_out(&mut a, &mut sim.objs, x + 1, P, false, &mut sim.mmu);
    assert_eq!(r.err(), Some(Error::InvalidArgument));
    alloc(&mut sim, &mut b, Placement::Fixed(LO), P).unwrap();
    let c = copy_out(&mut a, &mut sim.objs, x, 2 * P, false, &mut sim.mmu).unwrap();
    let (e, c) = copy_in(&mut b, c, Placement::Fixed(LO)).unwrap_err();
    assert_eq!(e, Error::NoSpace);
    c.release(&mut sim.objs, &mut sim.mmu);
    // A physical range is never copied.
    let d = sim
        .objs
        .physical(0xfee0_0000, P, true, a.account())
        .unwrap();
    let at = a
        .map_object(
            &mut sim.objs,
            Placement::Anywhere,
            P,
            d,
            0,
            Prot::RW,
            Prot::RW,
            false,
            Inherit::Copy,
            &mut sim.mmu,
        )
        .unwrap();
    sim.objs.release(d, &mut sim.mmu);
    let r = copy_out(&mut a, &mut sim.objs, at, P, false, &mut sim.mmu);
    assert_eq!(r.err(), Some(Error::InvalidArgument));
    let f = resolve(&mut a, &mut sim.objs, at, Access::Write).unwrap();
    assert_eq!(
        f.decision,
        Decision::MapPhysical {
            addr: 0xfee0_0000,
            writable: true,
            uncached: true
        }
    );
    sim.end_task(1, &mut b);
    sim.end_task(0, &mut a);
    assert!(sim.objs.is_empty());
}

#[test]
fn fork_by_inheritance() {
    let mut sim = Sim::new();
    let mut p = sim.map();
    let copy = alloc(&mut sim, &mut p, Placement::Anywhere, 2 * P).unwrap();
    let share = alloc(&mut sim, &mut p, Placement::Anywhere, P).unwrap();
    let none = alloc(&mut sim, &mut p, Placement::Anywhere, P).unwrap();
    p.inherit(&mut sim.objs, share, P, Inherit::Share).unwrap();
    p.inherit(&mut sim.objs, none, P, Inherit::None).unwrap();
    sim.write(0, &mut p, copy, 1).unwrap();
    sim.write(0, &mut p, share, 2).unwrap();
    sim.mmu.current = 0;
    let acct = Account::child(&sim.root, 1 << 30, 1 << 20).unwrap();
    let mut c = fork(&mut p, &mut sim.objs, acct, ENTRIES_MAX, &mut sim.mmu).unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!(sim.read(1, &mut c, none), Err(Decision::AddressError));
    sim.write(1, &mut c, copy, 11).unwrap();
    sim.write(1, &mut c, share, 12).unwrap();
    assert_eq!(sim.read(0, &mut p, copy).unwrap(), 1);
    assert_eq!(sim.read(0, &mut p, share).unwrap(), 12, "shared");
    sim.write(0, &mut p, copy + P, 3).unwrap();
    assert_eq!(sim.read(1, &mut c, copy + P).unwrap(), 0);
    // The child ends: the parent's private object is its own again (collapse), and its
    // next write reclaims instead of copying.
    sim.end_task(1, &mut c);
    assert_eq!(sim.longest_chain(&p), 1);
    let copies = sim.stats.cow_copies;
    sim.write(0, &mut p, copy, 4).unwrap();
    assert_eq!(sim.stats.cow_copies, copies);
    sim.end_task(0, &mut p);
    assert!(sim.objs.is_empty());
    assert!(sim.mmu.mem.is_empty());
}

/// A copy of 8 pages of which 5 were written, whose source then ends; the copy's task
/// and map, with the copy's address.
fn orphaned_copy(sim: &mut Sim) -> (Map, u64) {
    let mut src = sim.map();
    let a = alloc(sim, &mut src, Placement::Anywhere, 8 * P).unwrap();
    for i in 0..5 {
        sim.write(0, &mut src, a + i * P, 10 + i).unwrap();
    }
    let mut dst = sim.map();
    sim.mmu.current = 0;
    let b = copy_region(
        &mut src,
        &mut sim.objs,
        a,
        8 * P,
        false,
        &mut dst,
        Placement::Anywhere,
        &mut sim.mmu,
    )
    .unwrap();
    sim.end_task(0, &mut src);
    (dst, b)
}

#[test]
fn a_reclaim_counts_the_pages_it_gives_back() {
    // Table 3-10's "CopyOnWrite reclaims of N pages": the pages whose write permission
    // one reclaim gave back in the translations: the faulting page and the translated
    // pages after it (pages 2, 3 and 4 of the 5 written and read), not the window's 8.
    let mut sim = Sim::new();
    let (mut dst, b) = orphaned_copy(&mut sim);
    // The written pages read first: read-only translations of the object's pages.
    for i in 0..5 {
        assert_eq!(sim.read(1, &mut dst, b + i * P).unwrap(), 10 + i);
    }
    let before = sim.stats;
    sim.write(1, &mut dst, b + 2 * P, 99).unwrap();
    assert_eq!(sim.stats.cow_reclaims - before.cow_reclaims, 1);
    assert_eq!(
        sim.stats.cow_reclaimed_pages - before.cow_reclaimed_pages,
        3
    );
    // The other written pages were reclaimed ahead: their writes are neither reclaims
    // nor copies, and the translations of those that follow the faulting page were
    // made writable with it (no fault at all); those before it fault once each, and an
    // untouched page is a zero fill.
    for i in [3, 4] {
        sim.write(1, &mut dst, b + i * P, 100 + i).unwrap();
    }
    assert_eq!(sim.stats.faults - before.faults, 1, "written ahead");
    for i in [0, 1, 6] {
        sim.write(1, &mut dst, b + i * P, 100 + i).unwrap();
    }
    assert_eq!(sim.stats.faults - before.faults, 4);
    assert_eq!(sim.stats.cow_reclaims - before.cow_reclaims, 1);
    assert_eq!(
        sim.stats.cow_reclaimed_pages - before.cow_reclaimed_pages,
        3
    );
    assert_eq!(sim.stats.cow_copies, before.cow_copies);
    assert_eq!(sim.stats.zero_fills - before.zero_fills, 1);
    assert_eq!(sim.read(1, &mut dst, b + 2 * P).unwrap(), 99);
    sim.end_task(1, &mut dst);
    assert!(sim.objs.is_empty());

    // A reclaim whose faulting page the object does not hold yet fills it there (a zero
    // fill, which counts), in a copy with no translation to raise: 1.
    let mut sim = Sim::new();
    let (mut dst, b) = orphaned_copy(&mut sim);
    let before = sim.stats;
    sim.write(1, &mut dst, b + 7 * P, 1).unwrap();
    sim.write(1, &mut dst, b + 4 * P, 1).unwrap();
    assert_eq!(sim.stats.cow_reclaims - before.cow_reclaims, 1);
    assert_eq!(
        sim.stats.cow_reclaimed_pages - before.cow_reclaimed_pages,
        1
    );
    assert_eq!(sim.stats.zero_fills - before.zero_fills, 1);
    assert_eq!(sim.read(1, &mut dst, b).unwrap(), 10);
    sim.end_task(1, &mut dst);
    assert!(sim.objs.is_empty());
}

#[test]
fn a_copy_of_shared_memory_is_a_snapshot() {
    let mut sim = Sim::new();
    let mut p = sim.map();
    let s = alloc(&mut sim, &mut p, Placement::Anywhere, 2 * P).unwrap();
    p.inherit(&mut sim.objs, s, 2 * P, Inherit::Share).unwrap();
    sim.write(0, &mut p, s, 1).unwrap();
    sim.mmu.current = 0;
    let acct = Account::child(&sim.root, 1 << 30, 1 << 20).unwrap();
    let mut c = fork(&mut p, &mut sim.objs, acct, ENTRIES_MAX, &mut sim.mmu).unwrap();
    // The child copies the shared range to a third task.
    let mut t = sim.map();
    sim.mmu.current = 1;
    let y = copy_region(
        &mut c,
        &mut sim.objs,
        s,
        2 * P,
        false,
        &mut t,
        Placement::Anywhere,
        &mut sim.mmu,
    )
    .unwrap();
    assert_eq!(sim.read(2, &mut t, y).unwrap(), 1);
    // Both sharers go on writing; the copy does not see it.
    sim.write(0, &mut p, s, 5).unwrap();
    sim.write(1, &mut c, s + P, 6).unwrap();
    assert_eq!(sim.read(1, &mut c, s).unwrap(), 5);
    assert_eq!(sim.read(0, &mut p, s + P).unwrap(), 6);
    assert_eq!(sim.read(2, &mut t, y).unwrap(), 1);
    assert_eq!(sim.read(2, &mut t, y + P).unwrap(), 0);
    sim.write(2, &mut t, y + P, 7).unwrap();
    assert_eq!(sim.read(0, &mut p, s + P).unwrap(), 6);
    sim.end_task(0, &mut p);
    sim.end_task(1, &mut c);
    assert_eq!(sim.read(2, &mut t, y).unwrap(), 1);
    assert_eq!(sim.read(2, &mut t, y + P).unwrap(), 7);
    sim.end_task(2, &mut t);
    assert!(sim.objs.is_empty());
    assert!(sim.mmu.mem.is_empty());
}

#[test]
fn copying_a_region_a_thousand_times_keeps_chains_bounded() {
    let mut sim = Sim::new();
    let (mut a, mut b) = (sim.map(), sim.map());
    let x = alloc(&mut sim, &mut a, Placement::Anywhere, 4 * P).unwrap();
    for i in 0..1000u64 {
        sim.mmu.current = 0;
        let y = copy_region(
            &mut a,
            &mut sim.objs,
            x,
            4 * P,
            false,
            &mut b,
            Placement::Anywhere,
            &mut sim.mmu,
        )
        .unwrap();
        sim.write(0, &mut a, x + (i % 4) * P, i).unwrap();
        sim.write(1, &mut b, y + ((i + 1) % 4) * P, i + 1).unwrap();
        assert_eq!(
            sim.read(1, &mut b, y + (i % 4) * P).unwrap(),
            i.saturating_sub(4) * u64::from(i >= 4)
        );
        // Keep the last copy alive across one round, then drop it.
        sim.mmu.current = 1;
        b.deallocate(&mut sim.objs, y, 4 * P, &mut sim.mmu).unwrap();
        assert!(
            sim.longest_chain(&a) <= 2,
            "chain {}",
            sim.longest_chain(&a)
        );
        assert!(sim.objs.len() <= 3, "objects {}", sim.objs.len());
    }
    assert_eq!(sim.objs.len(), 1);
    assert!(sim.mmu.mem.len() <= 4);
    sim.end_task(0, &mut a);
    assert!(sim.objs.is_empty());
}

#[test]
fn forking_a_thousand_generations_keeps_chains_bounded() {
    // Each generation forks a child, both write, and the parent ends: a chain of
    // ancestors that would grow without collapse.
    let mut sim = Sim::new();
    let mut cur = sim.map();
    let x = alloc(&mut sim, &mut cur, Placement::Anywhere, 2 * P).unwrap();
    sim.write(0, &mut cur, x, 1).unwrap();
    let mut task = 0;
    for i in 0..1000u64 {
        sim.mmu.current = task;
        let acct = Account::child(&sim.root, 1 << 30, 1 << 20).unwrap();
        let mut child = fork(&mut cur, &mut sim.objs, acct, ENTRIES_MAX, &mut sim.mmu).unwrap();
        sim.write(task, &mut cur, x + P, i).unwrap();
        sim.write(task + 1, &mut child, x, i + 2).unwrap();
        // Every parent writes after its fork: no child ever sees it.
        assert_eq!(sim.read(task + 1, &mut child, x + P).unwrap(), 0);
        assert_eq!(sim.read(task + 1, &mut child, x).unwrap(), i + 2);
        sim.end_task(task, &mut cur);
        cur = child;
        task += 1;
        assert!(sim.longest_chain(&cur) <= 2);
        assert!(sim.objs.len() <= 3);
    }
    sim.end_task(task, &mut cur);
    assert!(sim.objs.is_empty());
    assert!(sim.mmu.mem.is_empty());
}

#[test]
fn pager_faults_ask_once_and_wait() {
    let mut sim = Sim::new();
    let mut a = sim.map();
    let o = sim.objs.pager(7, 4 * P, a.account()).unwrap();
    let at = a
        .map_object(
            &mut sim.objs,
            Placement::Anywhere,
            4 * P,
            o,
            0,
            Prot::RW,
            Prot::ALL,
            false,
            Inherit::Share,
            &mut sim.mmu,
        )
        .unwrap();
    let d = sim.read(0, &mut a, at + P).unwrap_err();
    assert_eq!(
        d,
        Decision::PageIn {
            pager: 7,
            object: o,
            offset: P
        }
    );
    assert_eq!(sim.stats.pager_fills, 1);
    assert_eq!(
        sim.read(0, &mut a, at + P).unwrap_err(),
        Decision::Wait {
            object: o,
            offset: P
        }
    );
    let f = sim.mmu.new_frame(99);
    sim.objs.insert_page(o, P, f).unwrap();
    assert_eq!(sim.read(0, &mut a, at + P).unwrap(), 99);
    // A copy-on-write mapping of the same object sees it, and its writes stay its own.
    let cow = a
        .map_object(
            &mut sim.objs,
            Placement::Anywhere,
            4 * P,
            o,
            0,
            Prot::RW,
            Prot::ALL,
            true,
            Inherit::Copy,
            &mut sim.mmu,
        )
        .unwrap();
    sim.write(0, &mut a, cow + P, 5).unwrap();
    assert_eq!(sim.read(0, &mut a, at + P).unwrap(), 99);
    // The pager dies: a fault on an absent page is an error.
    assert!(matches!(
        sim.read(0, &mut a, at).unwrap_err(),
        Decision::PageIn { .. }
    ));
    sim.objs.pager_died(o);
    assert!(matches!(
        sim.read(0, &mut a, at).unwrap_err(),
        Decision::PagerError { .. }
    ));
    sim.objs.release(o, &mut sim.mmu);
    sim.end_task(0, &mut a);
    assert!(sim.objs.is_empty());
    assert!(sim.mmu.mem.is_empty());
}

#[test]
fn pager_locks_send_forbidden_accesses_back_to_the_pager() {
    let mut sim = Sim::new();
    let mut a = sim.map();
    let acct = a.account().clone();
    let o = sim.objs.pager(7, 4 * P, &acct).unwrap();
    let map = |sim: &mut Sim, a: &mut Map, copy: bool| {
        a.map_object(
            &mut sim.objs,
            Placement::Anywhere,
            4 * P,
            o,
            0,
            Prot::RW,
            Prot::ALL,
            copy,
            if copy { Inherit::Copy } else { Inherit::Share },
            &mut sim.mmu,
        )
        .unwrap()
    };
    let at = map(&mut sim, &mut a, false);
    let f = sim.mmu.new_frame(99);
    sim.objs.insert_page(o, P, f).unwrap();
    sim.write(0, &mut a, at + P, 5).unwrap();
    let heap = acct.used(Resource::Heap);
    let unlock = Decision::Unlock {
        pager: 7,
        object: o,
        offset: P,
    };
    // Read-only: the writable translation already there is write-protected, reads go on
    // without a fault, a write goes back to the pager.
    sim.objs.set_lock(o, P, Prot::READ, &mut sim.mmu).unwrap();
    assert!(acct.used(Resource::Heap) > heap);
    assert_eq!(sim.objs.lock_at(o, P), Prot::READ);
    assert_eq!(sim.read(0, &mut a, at + P).unwrap(), 5);
    assert_eq!(sim.write(0, &mut a, at + P, 6).unwrap_err(), unlock);
    assert_eq!(sim.read(0, &mut a, at + P).unwrap(), 5);
    // A copy-on-write mapping reads it, and so may copy it for a write of its own.
    let cow = map(&mut sim, &mut a, true);
    sim.write(0, &mut a, cow + P, 8).unwrap();
    assert_eq!(sim.read(0, &mut a, at + P).unwrap(), 5);
    // No access at all: the translation goes, and even a read asks.
    sim.objs.set_lock(o, P, Prot::NONE, &mut sim.mmu).unwrap();
    assert_eq!(sim.read(0, &mut a, at + P).unwrap_err(), unlock);
    let locked = acct.used(Resource::Heap);
    // Unlocked: everything again, and the lock's charge comes back.
    sim.objs.set_lock(o, P, Prot::ALL, &mut sim.mmu).unwrap();
    assert_eq!(
        acct.used(Resource::Heap),
        locked - super::tree::Tree::<Prot>::NODE_BYTES
    );
    sim.write(0, &mut a, at + P, 6).unwrap();
    assert_eq!(sim.read(0, &mut a, at + P).unwrap(), 6);
    assert_eq!(sim.read(0, &mut a, cow + P).unwrap(), 8);
    // Only a pager-backed object can be locked, inside it; a lock left at the end goes
    // with the object.
    let anon = sim.objs.anonymous(P, &acct).unwrap();
    assert_eq!(
        sim.objs.set_lock(anon, 0, Prot::READ, &mut sim.mmu),
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        sim.objs.set_lock(o, 4 * P, Prot::READ, &mut sim.mmu),
        Err(Error::InvalidArgument)
    );
    sim.objs.release(anon, &mut sim.mmu);
    sim.objs
        .set_lock(o, 2 * P, Prot::READ, &mut sim.mmu)
        .unwrap();
    sim.objs.release(o, &mut sim.mmu);
    sim.end_task(0, &mut a);
    assert!(sim.objs.is_empty());
    assert_eq!(acct.used(Resource::Heap), 0);
}

#[test]
fn fault_stats_add_up() {
    let mut sim = Sim::new();
    let mut a = sim.map();
    let x = alloc(&mut sim, &mut a, Placement::Anywhere, 4 * P).unwrap();
    sim.write(0, &mut a, x, 1).unwrap();
    let _ = sim.read(0, &mut a, HI - P);
    let c = copy_out(&mut a, &mut sim.objs, x, 4 * P, false, &mut sim.mmu).unwrap();
    sim.write(0, &mut a, x, 2).unwrap(); // shared: a copy
    c.release(&mut sim.objs, &mut sim.mmu);
    sim.write(0, &mut a, x + P, 3).unwrap();
    let s = sim.stats;
    assert_eq!(s.faults, s.read_faults + s.write_faults + s.execute_faults);
    assert_eq!(s.address_errors, 1);
    assert_eq!(s.cow_copies, 1);
    assert_eq!(s.zero_fills, 2);
    let mut total = FaultStats::default();
    total.add(&s);
    total.add(&s);
    assert_eq!(total.faults, 2 * s.faults);
    assert_eq!(s.address_faults(), 3);
    sim.end_task(0, &mut a);
    let _: Vec<u64> = Vec::new();
}

#[test]
fn committed_memory_is_charged_once_at_allocation_and_given_back_by_window() {
    let mut sim = Sim::new();
    let mut map = sim.map();
    let acct = map.account().clone();
    let (a, o) = map
        .allocate_with(
            &mut sim.objs,
            Placement::Anywhere,
            4 * P,
            Prot::RW,
            true,
            &mut sim.mmu,
        )
        .unwrap();
    assert!(sim.objs.get(o).unwrap().committed());
    // Charged before any touch; a touch takes a frame but no further charge.
    assert_eq!(acct.used(Resource::Frames), 4);
    sim.write(0, &mut map, a + P, 7).unwrap();
    sim.write(0, &mut map, a + 3 * P, 9).unwrap();
    assert_eq!(acct.used(Resource::Frames), 4);
    assert_eq!(sim.objs.get(o).unwrap().resident_in(0, 4 * P), 2);
    // Dropping a window gives back its commitment, resident or not.
    map.deallocate(&mut sim.objs, a, 2 * P, &mut sim.mmu)
        .unwrap();
    assert_eq!(acct.used(Resource::Frames), 2);
    assert_eq!(sim.read(0, &mut map, a + 3 * P), Ok(9));
    map.deallocate(&mut sim.objs, a + 2 * P, 2 * P, &mut sim.mmu)
        .unwrap();
    assert_eq!(acct.used(Resource::Frames), 0);
    assert_eq!(acct.used(Resource::Heap), 0);
    assert!(sim.objs.is_empty());
    assert!(sim.mmu.mem.is_empty());
    // A commitment over the account's limit is refused, with nothing charged.
    let tight = Account::child(&sim.root, 1 << 20, 3).unwrap();
    let mut small = Map::new(tight.clone(), LO, HI, ENTRIES_MAX).unwrap();
    assert_eq!(
        small.allocate_with(
            &mut sim.objs,
            Placement::Anywhere,
            4 * P,
            Prot::RW,
            true,
            &mut sim.mmu
        ),
        Err(Error::NoMemory)
    );
    assert_eq!(tight.used(Resource::Frames), 0);
    assert_eq!(tight.used(Resource::Heap), 0);
    assert!(small.is_empty());
}

#[test]
fn a_committed_object_collapsed_into_its_shadow_moves_only_its_resident_charges() {
    let mut sim = Sim::new();
    let acct = Account::child(&sim.root, 1 << 30, 1 << 20).unwrap();
    let x = sim.objs.committed(4 * P, &acct).unwrap();
    let f = sim.mmu.new_frame(5);
    sim.objs.insert_page(x, P, f).unwrap();
    assert_eq!(acct.used(Resource::Frames), 4);
    // A shadow takes one reference; dropping the other collapses x into it.
    sim.objs.add_ref(x).unwrap();
    let s = sim.objs.shadow(x, 0, 4 * P, &acct).unwrap();
    sim.objs.release(x, &mut sim.mmu);
    assert_eq!(sim.objs.len(), 1);
    assert_eq!(sim.objs.get(s).unwrap().frames(), 1);
    assert_eq!(acct.used(Resource::Frames), 1);
    sim.objs.release(s, &mut sim.mmu);
    assert_eq!(acct.used(Resource::Frames), 0);
    assert_eq!(acct.used(Resource::Heap), 0);
    assert!(sim.mmu.mem.is_empty());
}

#[test]
fn wiring_and_protecting_parts_then_undoing_it_leaves_one_entry() {
    let mut sim = Sim::new();
    let mut map = sim.map();
    let a = alloc(&mut sim, &mut map, Placement::Anywhere, 16 * P).unwrap();
    let o = map.entry(a).unwrap().1.object;
    let heap = map.account().used(Resource::Heap);
    for round in 0..100 {
        let at = a + (round % 14 + 1) * P;
        map.wire(&mut sim.objs, at, P).unwrap();
        assert_eq!(map.len(), 3);
        map.protect(&mut sim.objs, at, 2 * P, Prot::READ, false, &mut sim.mmu)
            .unwrap();
        map.unwire(&mut sim.objs, at, P).unwrap();
        map.protect(&mut sim.objs, at, 2 * P, Prot::RW, false, &mut sim.mmu)
            .unwrap();
        map.inherit(&mut sim.objs, at, P, Inherit::None).unwrap();
        map.inherit(&mut sim.objs, at, P, Inherit::Copy).unwrap();
        assert_eq!(map.len(), 1, "round {round}");
        assert_eq!(sim.objs.get(o).unwrap().refs(), 1);
    }
    assert_eq!(map.account().used(Resource::Heap), heap);
    assert_eq!(map.entry(a + 5 * P).unwrap(), (a, map.entry(a).unwrap().1));
    // Different attributes stay apart; a hole between two pieces of one object too.
    map.protect(&mut sim.objs, a, P, Prot::READ, false, &mut sim.mmu)
        .unwrap();
    assert_eq!(map.len(), 2);
    map.deallocate(&mut sim.objs, a + 4 * P, P, &mut sim.mmu)
        .unwrap();
    map.protect(&mut sim.objs, a, P, Prot::RW, false, &mut sim.mmu)
        .unwrap();
    assert_eq!(map.len(), 2);
    assert_eq!(sim.objs.get(o).unwrap().refs(), 2);
    sim.end_task(0, &mut map);
    assert!(sim.objs.is_empty());
}

#[test]
fn one_page_protections_move_boundaries_and_stay_bounded() {
    let mut sim = Sim::new();
    let mut map = sim.map();
    let a = alloc(&mut sim, &mut map, Placement::Anywhere, 100 * P).unwrap();
    let o = map.entry(a).unwrap().1.object;
    let heap = map.account().used(Resource::Heap);
    // Appel–Li's second test: the whole range read-only, then page by page back to
    // read-write. The first page splits; every later one moves a boundary.
    map.protect(&mut sim.objs, a, 100 * P, Prot::READ, false, &mut sim.mmu)
        .unwrap();
    for i in 0..100 {
        map.protect_page(&mut sim.objs, a + i * P, Prot::RW, &mut sim.mmu)
            .unwrap();
        assert!(map.len() <= 2, "page {i}: {} entries", map.len());
        let (s, e) = map.entry(a + i * P).unwrap();
        // The last page is an entry of its own by then: changed in place, not merged.
        let from = if i == 99 { i } else { 0 };
        assert_eq!(
            (s, e.end, e.offset, e.prot),
            (a + from * P, a + (i + 1) * P, from * P, Prot::RW)
        );
        if i < 99 {
            let (s, e) = map.entry(a + (i + 1) * P).unwrap();
            assert_eq!(
                (s, e.offset, e.prot),
                (a + (i + 1) * P, (i + 1) * P, Prot::READ)
            );
        }
    }
    // The last page, an entry of its own, changed in place; one general protect merges.
    map.protect(&mut sim.objs, a, 100 * P, Prot::RW, false, &mut sim.mmu)
        .unwrap();
    assert_eq!(map.len(), 1);
    // The same from the top down: each page joins the entry above.
    map.protect(&mut sim.objs, a, 100 * P, Prot::READ, false, &mut sim.mmu)
        .unwrap();
    for i in (0..100).rev() {
        map.protect_page(&mut sim.objs, a + i * P, Prot::RW, &mut sim.mmu)
            .unwrap();
        assert!(map.len() <= 2, "page {i}: {} entries", map.len());
        assert_eq!(map.entry(a + i * P).unwrap().1.offset, i * P);
    }
    // Appel–Li's first test (and many pages each made read-only and back): the map
    // grows by at most the slack, and everything is one entry once all pages agree.
    for round in 0..1000u64 {
        let k = round * 7 % 100;
        let pg = a + k * P;
        map.protect_page(&mut sim.objs, pg, Prot::READ, &mut sim.mmu)
            .unwrap();
        map.protect_page(&mut sim.objs, a + (k ^ 1) * P, Prot::RW, &mut sim.mmu)
            .unwrap();
        assert_eq!(map.entry(pg).unwrap().1.prot, Prot::READ);
        assert!(map.len() <= SLACK_MAX + 4, "{} entries", map.len());
        map.protect_page(&mut sim.objs, pg, Prot::RW, &mut sim.mmu)
            .unwrap();
    }
    map.protect(&mut sim.objs, a, 100 * P, Prot::RW, false, &mut sim.mmu)
        .unwrap();
    assert_eq!(map.len(), 1);
    assert_eq!(sim.objs.get(o).unwrap().refs(), 1);
    assert_eq!(map.account().used(Resource::Heap), heap);
    // Errors as the general path's, with nothing changed.
    let r = map.protect_page(&mut sim.objs, a + 100 * P, Prot::READ, &mut sim.mmu);
    assert_eq!(r, Err(Error::BadAddress));
    let r = map.protect_page(&mut sim.objs, a + 1, Prot::READ, &mut sim.mmu);
    assert_eq!(r, Err(Error::InvalidArgument));
    map.protect(&mut sim.objs, a, P, Prot::READ, true, &mut sim.mmu)
        .unwrap();
    let r = map.protect_page(&mut sim.objs, a, Prot::RW, &mut sim.mmu);
    assert_eq!(r, Err(Error::Denied));
    assert_eq!(map.entry(a).unwrap().1.prot, Prot::READ);
    sim.end_task(0, &mut map);
    assert!(sim.objs.is_empty());
}

#[test]
fn a_write_in_place_only_where_resolve_would_map_the_frame_writable() {
    use super::fault::write_in_place;
    let mut sim = Sim::new();
    let mut p = sim.map();
    let s = alloc(&mut sim, &mut p, Placement::Anywhere, 2 * P).unwrap();
    // Not resident yet: a zero fill is to be done first.
    assert_eq!(write_in_place(&p, &mut sim.objs, s), None);
    p.inherit(&mut sim.objs, s, 2 * P, Inherit::Share).unwrap();
    sim.write(0, &mut p, s, 1).unwrap();
    let own = write_in_place(&p, &mut sim.objs, s).unwrap();
    let f = resolve(&mut p, &mut sim.objs, s, Access::Write).unwrap();
    assert_eq!(
        f.decision,
        Decision::Map {
            frame: own,
            writable: true
        }
    );
    // Read-only: no.
    p.protect_page(&mut sim.objs, s, Prot::READ, &mut sim.mmu)
        .unwrap();
    assert_eq!(write_in_place(&p, &mut sim.objs, s), None);
    p.protect_page(&mut sim.objs, s, Prot::RW, &mut sim.mmu)
        .unwrap();
    // A snapshot of the shared memory (a copy object lacking the page): the old contents
    // must be pushed first.
    sim.mmu.current = 0;
    let mut t = sim.map();
    let y = copy_region(
        &mut p,
        &mut sim.objs,
        s,
        2 * P,
        false,
        &mut t,
        Placement::Anywhere,
        &mut sim.mmu,
    )
    .unwrap();
    assert_eq!(write_in_place(&p, &mut sim.objs, s), None);
    assert!(matches!(
        resolve(&mut p, &mut sim.objs, s, Access::Write)
            .unwrap()
            .decision,
        Decision::CopyOnWrite { .. }
    ));
    // The copy's entry is copy-on-write: no.
    assert_eq!(sim.read(1, &mut t, y).unwrap(), 1);
    assert_eq!(write_in_place(&t, &mut sim.objs, y), None);
    // Once pushed, the page is the writer's own again.
    sim.write(0, &mut p, s, 5).unwrap();
    assert!(write_in_place(&p, &mut sim.objs, s).is_some());
    assert_eq!(sim.read(1, &mut t, y).unwrap(), 1);
    sim.end_task(0, &mut p);
    sim.end_task(1, &mut t);
    assert!(sim.objs.is_empty());
}

#[test]
fn anywhere_placements_keep_above_the_floor() {
    let mut sim = Sim::new();
    let mut map = sim.map();
    map.set_anywhere_floor(LO + 0x10_0000);
    // An entry at the top leaves no room above it: first fit, from the floor up.
    alloc(&mut sim, &mut map, Placement::Fixed(HI - P), P).unwrap();
    let a = alloc(&mut sim, &mut map, Placement::Anywhere, 4 * P).unwrap();
    assert_eq!(a, LO + 0x10_0000);
    // Fixed placements below the floor are still allowed.
    assert_eq!(alloc(&mut sim, &mut map, Placement::Fixed(LO), P), Ok(LO));
    let b = alloc(&mut sim, &mut map, Placement::Anywhere, P).unwrap();
    assert_eq!(b, a + 4 * P);
    sim.end_task(0, &mut map);
}

#[test]
fn resident_reads_are_what_read_faults_would_enter() {
    let mut sim = Sim::new();
    let mut a = sim.map();
    let obj = sim.objs.anonymous(4 * P, a.account()).unwrap();
    // Pages 0 and 2 resident; 1 and 3 not.
    let f0 = sim.mmu.new_frame(10);
    let f2 = sim.mmu.new_frame(12);
    sim.objs.insert_page(obj, 0, f0).unwrap();
    sim.objs.insert_page(obj, 2 * P, f2).unwrap();
    let map = |a: &mut Map, sim: &mut Sim, off, len, prot, cow| {
        a.map_object(
            &mut sim.objs,
            Placement::Anywhere,
            len,
            obj,
            off,
            prot,
            Prot::RW,
            cow,
            Inherit::Copy,
            &mut sim.mmu,
        )
        .unwrap()
    };
    // A window from page 1: pages 2 (at +P) only; and the cap on how many.
    let at = map(&mut a, &mut sim, P, 3 * P, Prot::RW, false);
    let mut got = Vec::new();
    a.resident_reads(&sim.objs, at, 8, |va, f| got.push((va, f)));
    assert_eq!(got, [(at + P, f2)]);
    for (va, f) in &got {
        let fault = resolve(&mut a, &mut sim.objs, *va, Access::Read).unwrap();
        assert!(
            matches!(fault.decision, Decision::Map { frame, .. } if frame == *f),
            "{fault:?}"
        );
    }
    let whole = map(&mut a, &mut sim, 0, 4 * P, Prot::READ, false);
    let mut n = Vec::new();
    a.resident_reads(&sim.objs, whole, 1, |va, f| n.push((va, f)));
    assert_eq!(n, [(whole, f0)], "at most `max`");
    // Nothing for a copy-on-write window, one without read access, or no entry.
    let cow = map(&mut a, &mut sim, 0, 4 * P, Prot::RW, true);
    let none = map(&mut a, &mut sim, 0, 4 * P, Prot::NONE, false);
    for start in [cow, none, whole + P, HI - P] {
        a.resident_reads(&sim.objs, start, 8, |va, _| panic!("entered {va:#x}"));
    }
    sim.objs.release(obj, &mut sim.mmu);
    sim.end_task(0, &mut a);
    assert!(sim.objs.is_empty());
}

#[test]
fn a_received_region_is_writable_and_its_writes_stay_the_receivers() {
    // Out-of-line data arrives read-write whatever the sender's range allowed
    // (`Carried::set_prot`), and still by value: the receiver's write copies the page.
    let mut sim = Sim::new();
    let (mut a, mut b) = (sim.map(), sim.map());
    let x = alloc(&mut sim, &mut a, Placement::Anywhere, 2 * P).unwrap();
    sim.write(0, &mut a, x, 7).unwrap();
    sim.mmu.current = 0;
    a.protect(&mut sim.objs, x, 2 * P, Prot::READ, true, &mut sim.mmu)
        .unwrap();
    let mut c = copy_out(&mut a, &mut sim.objs, x, 2 * P, false, &mut sim.mmu).unwrap();
    assert!(c.pieces().iter().all(|p| p.prot == Prot::READ));
    c.set_prot(Prot::RW, Prot::READ);
    assert!(c
        .pieces()
        .iter()
        .all(|p| p.prot == Prot::RW && p.max_prot.contains(Prot::RW) && p.cow));
    let y = copy_in(&mut b, c, Placement::Anywhere).unwrap();
    sim.write(1, &mut b, y, 8).unwrap();
    assert_eq!(sim.read(1, &mut b, y).unwrap(), 8);
    assert_eq!(
        sim.read(0, &mut a, x).unwrap(),
        7,
        "the sender's page is untouched"
    );
    assert!(
        sim.write(0, &mut a, x, 9).is_err(),
        "the sender's range stays read-only"
    );
    sim.end_task(1, &mut b);
    sim.end_task(0, &mut a);
    assert!(sim.objs.is_empty());
}

#[test]
fn image_objects_are_mapped_by_value_and_never_written() {
    let mut sim = Sim::new();
    // An image of three pages holding 10, 20, 30, kept by its maker's reference.
    let image = sim.objs.image(3 * P, &sim.root).unwrap();
    for i in 0..3 {
        let f = sim.mmu.new_frame(10 * (i + 1));
        sim.objs.insert_page(image, i * P, f).unwrap();
    }
    let frames: Vec<u64> = (0..3)
        .map(|i| match sim.objs.get(image).unwrap().page(i * P) {
            Some(super::object::Page::Resident(f)) => f,
            p => panic!("page {i}: {p:?}"),
        })
        .collect();
    let mut a = sim.map();
    let mut b = sim.map();
    let at = LO + 4 * P;
    for m in [&mut a, &mut b] {
        m.map_frozen(
            &mut sim.objs,
            Placement::Fixed(at),
            2 * P,
            image,
            P,
            Prot::RW,
            Prot::ALL,
            &mut sim.mmu,
        )
        .unwrap();
    }
    // Reads find the image's own frames (memory fills), read-only.
    assert_eq!(sim.read(0, &mut a, at).unwrap(), 20);
    assert_eq!(sim.access(0, &mut a, at, Access::Read).unwrap(), frames[1]);
    assert_eq!(sim.mmu.pts[&0][&at], (frames[1], false));
    // Each writer gets its own copy; the other and the image keep the old value.
    sim.write(0, &mut a, at, 21).unwrap();
    sim.write(1, &mut b, at + P, 31).unwrap();
    assert_eq!(sim.read(0, &mut a, at).unwrap(), 21);
    assert_eq!(sim.read(1, &mut b, at).unwrap(), 20);
    assert_eq!(sim.read(0, &mut a, at + P).unwrap(), 30);
    assert_eq!(sim.read(1, &mut b, at + P).unwrap(), 31);
    assert_eq!(sim.mmu.mem[&frames[1]], 20);
    assert_eq!(sim.mmu.mem[&frames[2]], 30);
    // A fork of a task that wrote shares the image and copies its own page by value.
    sim.mmu.current = 0;
    let acct = Account::child(&sim.root, 1 << 30, 1 << 20).unwrap();
    let mut c = fork(&mut a, &mut sim.objs, acct, ENTRIES_MAX, &mut sim.mmu).unwrap();
    sim.write(2, &mut c, at, 22).unwrap();
    sim.write(2, &mut c, at + P, 32).unwrap();
    assert_eq!(sim.read(0, &mut a, at).unwrap(), 21);
    assert_eq!(sim.read(0, &mut a, at + P).unwrap(), 30);
    // Deallocating a mapped window frees no image page; ending every task leaves the
    // image whole, with only its maker's reference.
    sim.mmu.current = 1;
    b.deallocate(&mut sim.objs, at, 2 * P, &mut sim.mmu)
        .unwrap();
    sim.mmu.drop_task(1);
    sim.end_task(2, &mut c);
    sim.end_task(0, &mut a);
    assert_eq!(sim.objs.len(), 1);
    assert_eq!(sim.objs.get(image).unwrap().refs(), 1);
    assert_eq!(sim.objs.get(image).unwrap().pages(), 3);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(sim.mmu.mem[f], 10 * (i as u64 + 1));
    }
    // Only images may be mapped frozen, within their size.
    let mut d = sim.map();
    let anon = sim.objs.anonymous(P, &sim.root).unwrap();
    let frozen = |d: &mut Map, sim: &mut Sim, o, off, len| {
        d.map_frozen(
            &mut sim.objs,
            Placement::Anywhere,
            len,
            o,
            off,
            Prot::READ,
            Prot::ALL,
            &mut sim.mmu,
        )
    };
    assert_eq!(
        frozen(&mut d, &mut sim, anon, 0, P),
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        frozen(&mut d, &mut sim, image, 2 * P, 2 * P),
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        frozen(&mut d, &mut sim, image, 1, P),
        Err(Error::InvalidArgument)
    );
    assert!(d.is_empty());
    sim.objs.release(anon, &mut sim.mmu);
    sim.objs.release(image, &mut sim.mmu);
    assert!(sim.objs.is_empty());
    assert!(sim.mmu.mem.is_empty());
}
