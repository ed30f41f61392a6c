//! The bookkeeping of the DMA quarantine (`docs/drivers.md`, "DMA quarantine"), as
//! host-tested data: which DMA objects exist and which task made each, and which objects
//! of ended tasks the kernel holds back until the devices are declared reset. The kernel's
//! memory-object family (`kernel/src/memobj.rs`) keeps one [`DmaTable`] and does the
//! reference counting; this module holds only the rules.
//!
//! # Invariants
//! - Live and quarantined entries together never exceed [`DMA_OBJECTS_MAX`], so an entry
//!   moved from one list to the other always finds a slot, and nothing here allocates.
//! - An object is in at most one list at a time, once.

use baton_abi::Error;

/// Most DMA objects remembered at once, live and quarantined together.
pub const DMA_OBJECTS_MAX: usize = 64;

/// DMA objects (`O`, an object id) with their makers (`T`, a task id), and the
/// quarantined ones with their page counts.
pub struct DmaTable<O, T> {
    live: [Option<(O, T)>; DMA_OBJECTS_MAX],
    quarantined: [Option<(O, u64)>; DMA_OBJECTS_MAX],
}

impl<O: Copy + PartialEq, T: Copy + PartialEq> DmaTable<O, T> {
    /// An empty table.
    pub const fn new() -> Self {
        DmaTable {
            live: [None; DMA_OBJECTS_MAX],
            quarantined: [None; DMA_OBJECTS_MAX],
        }
    }

    fn used(&self) -> usize {
        self.live.iter().flatten().count() + self.quarantined.iter().flatten().count()
    }

    /// Forgets the live entries whose objects `alive` says have died (their makers let go
    /// of them); then whether one more entry fits ([`Error::NoSpace`] if not).
    pub fn make_room(&mut self, alive: impl Fn(O) -> bool) -> Result<(), Error> {
        for slot in self.live.iter_mut() {
            if slot.is_some_and(|(o, _)| !alive(o)) {
                *slot = None;
            }
        }
        if self.used() < DMA_OBJECTS_MAX {
            Ok(())
        } else {
            Err(Error::NoSpace)
        }
    }

    /// Remembers `object`, made by `maker` ([`Error::NoSpace`] when full: call
    /// [`DmaTable::make_room`] first).
    pub fn add(&mut self, object: O, maker: T) -> Result<(), Error> {
        if self.used() >= DMA_OBJECTS_MAX {
            return Err(Error::NoSpace);
        }
        let slot = self
            .live
            .iter_mut()
            .find(|s| s.is_none())
            .ok_or(Error::NoSpace)?;
        *slot = Some((object, maker));
        Ok(())
    }

    /// Takes the live entries of `maker` (an ended task) out of the table, into `out`;
    /// how many. The caller quarantines those still alive with [`DmaTable::quarantine`].
    pub fn take_made_by(&mut self, maker: T, out: &mut [Option<O>; DMA_OBJECTS_MAX]) -> usize {
        let mut n = 0;
        for slot in self.live.iter_mut() {
            if slot.is_some_and(|(_, t)| t == maker) {
                if let (Some((o, _)), Some(dst)) = (slot.take(), out.get_mut(n)) {
                    *dst = Some(o);
                    n += 1;
                }
            }
        }
        n
    }

    /// Puts `object` (of `pages` pages, taken out by [`DmaTable::take_made_by`]) in
    /// quarantine; false if there is no slot, which the invariant rules out.
    pub fn quarantine(&mut self, object: O, pages: u64) -> bool {
        if self.used() >= DMA_OBJECTS_MAX {
            return false;
        }
        match self.quarantined.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some((object, pages));
                true
            }
            None => false,
        }
    }

    /// Pages held in quarantine.
    pub fn quarantined_pages(&self) -> u64 {
        self.quarantined.iter().flatten().map(|&(_, p)| p).sum()
    }

    /// Takes one quarantined object out (to drop the quarantine's reference), with its
    /// pages; `None` when none is left.
    pub fn release_one(&mut self) -> Option<(O, u64)> {
        self.quarantined.iter_mut().find_map(|s| s.take())
    }
}

impl<O: Copy + PartialEq, T: Copy + PartialEq> Default for DmaTable<O, T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_table_refuses_until_dead_objects_are_forgotten() {
        let mut t: DmaTable<u32, u8> = DmaTable::new();
        for i in 0..DMA_OBJECTS_MAX as u32 {
            t.make_room(|_| true).unwrap();
            t.add(i, 1).unwrap();
        }
        assert_eq!(t.make_room(|_| true), Err(Error::NoSpace));
        assert_eq!(t.add(999, 1), Err(Error::NoSpace));
        // Object 7 died (its maker let go of it while alive): its entry goes, and one fits.
        assert_eq!(t.make_room(|o| o != 7), Ok(()));
        t.add(999, 2).unwrap();
        assert_eq!(t.make_room(|_| true), Err(Error::NoSpace));
    }

    #[test]
    fn an_ended_maker_s_objects_and_no_others_are_quarantined_and_released() {
        let mut t: DmaTable<u32, u8> = DmaTable::new();
        t.add(10, 1).unwrap();
        t.add(11, 2).unwrap();
        t.add(12, 1).unwrap();
        let mut out = [None; DMA_OBJECTS_MAX];
        assert_eq!(t.take_made_by(1, &mut out), 2);
        assert_eq!(&out[..3], &[Some(10), Some(12), None]);
        // Taken out: a second end of the same task finds nothing.
        let mut again = [None; DMA_OBJECTS_MAX];
        assert_eq!(t.take_made_by(1, &mut again), 0);
        assert!(t.quarantine(10, 16));
        assert!(t.quarantine(12, 3));
        assert_eq!(t.quarantined_pages(), 19);
        // Task 2's object is untouched, still live.
        assert_eq!(t.take_made_by(2, &mut again), 1);
        assert_eq!(again[0], Some(11));
        let mut released = [t.release_one(), t.release_one()];
        released.sort();
        assert_eq!(released, [Some((10, 16)), Some((12, 3))]);
        assert_eq!(t.release_one(), None);
        assert_eq!(t.quarantined_pages(), 0);
    }

    #[test]
    fn quarantined_entries_count_against_the_room() {
        let mut t: DmaTable<u32, u8> = DmaTable::new();
        for i in 0..DMA_OBJECTS_MAX as u32 {
            t.add(i, 1).unwrap();
        }
        let mut out = [None; DMA_OBJECTS_MAX];
        assert_eq!(t.take_made_by(1, &mut out), DMA_OBJECTS_MAX);
        for o in out.iter().flatten() {
            assert!(t.quarantine(*o, 1));
        }
        // Every slot is quarantined: no new DMA object until a release, even though no
        // live entry is left and nothing is dead.
        assert_eq!(t.make_room(|_| false), Err(Error::NoSpace));
        assert!(!t.quarantine(1000, 1));
        assert!(t.release_one().is_some());
        assert_eq!(t.make_room(|_| true), Ok(()));
        t.add(1000, 3).unwrap();
    }
}
