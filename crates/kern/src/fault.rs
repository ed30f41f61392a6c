//! Allocation fault injection: every Nth allocation of a kind fails, to exercise the
//! kernel's handling of running out of memory.
//!
//! An [`Injector`] counts the allocations of each [`Site`] (kernel heap, kernel stacks,
//! physical frames) once it is armed and says which of them fail: the Nth, 2Nth, ... of
//! each site. The kernel arms the global [`INJECTOR`] when boot is done (the command-line
//! word `failalloc=N`, honoured only by kernels built with the `fault-inject` feature) and
//! reports the counts at shutdown or panic.
//!
//! The allocation sites ask [`should_fail`]. Without the `fault-inject` feature (the
//! normal build) it is a constant `false` and costs nothing; the [`Injector`] type itself
//! is always built, so that it is tested on the host.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The kinds of allocation that can be made to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// Kernel heap blocks (the global allocator).
    Heap = 0,
    /// Kernel stacks (the stack pool).
    Stack = 1,
    /// Physical frames ([`crate::frame::FrameAllocator`]).
    Frame = 2,
}

impl Site {
    /// Every site, in order.
    pub const ALL: [Site; 3] = [Site::Heap, Site::Stack, Site::Frame];

    /// The site's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Site::Heap => "heap",
            Site::Stack => "stack",
            Site::Frame => "frame",
        }
    }
}

/// Counts allocations per site and fails every `every`th once armed. Usable from several
/// CPUs at once (atomics only).
#[derive(Debug)]
pub struct Injector {
    /// Fail every this many allocations of a site; 0 never.
    every: AtomicU64,
    armed: AtomicBool,
    /// Allocations asked for while armed, per site.
    attempts: [AtomicU64; 3],
    /// Of those, failed on purpose.
    failed: [AtomicU64; 3],
}

impl Default for Injector {
    fn default() -> Self {
        Self::new()
    }
}

impl Injector {
    /// A disarmed injector with nothing counted.
    pub const fn new() -> Injector {
        Injector {
            every: AtomicU64::new(0),
            armed: AtomicBool::new(false),
            attempts: [const { AtomicU64::new(0) }; 3],
            failed: [const { AtomicU64::new(0) }; 3],
        }
    }

    /// Starts counting: from now on the `every`th, `2 × every`th, ... allocation of each
    /// site fails (`every` = 0: none does, but they are still counted).
    pub fn arm(&self, every: u64) {
        self.every.store(every, Ordering::Relaxed);
        self.armed.store(true, Ordering::Release);
    }

    /// Stops failing and counting (the counts stay).
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
    }

    /// Whether the injector is armed.
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Counts one allocation at `site`; whether it must fail.
    pub fn should_fail(&self, site: Site) -> bool {
        if !self.armed.load(Ordering::Acquire) {
            return false;
        }
        let i = site as usize;
        let Some(attempts) = self.attempts.get(i) else {
            return false;
        };
        let n = attempts.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let every = self.every.load(Ordering::Relaxed);
        if every == 0 || n % every != 0 {
            return false;
        }
        if let Some(f) = self.failed.get(i) {
            f.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// `(failed, attempts)` at `site` while armed.
    pub fn counts(&self, site: Site) -> (u64, u64) {
        let i = site as usize;
        let load = |a: &[AtomicU64; 3]| a.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
        (load(&self.failed), load(&self.attempts))
    }

    /// The period given to [`Injector::arm`].
    pub fn every(&self) -> u64 {
        self.every.load(Ordering::Relaxed)
    }
}

/// The kernel's injector (only in builds with the `fault-inject` feature).
#[cfg(feature = "fault-inject")]
pub static INJECTOR: Injector = Injector::new();

/// Whether this allocation at `site` must fail: asks [`INJECTOR`] in builds with the
/// `fault-inject` feature, and is a constant `false` in the others.
#[inline(always)]
pub fn should_fail(site: Site) -> bool {
    #[cfg(feature = "fault-inject")]
    {
        INJECTOR.should_fail(site)
    }
    #[cfg(not(feature = "fault-inject"))]
    {
        let _ = site;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn nothing_fails_until_armed() {
        let inj = Injector::new();
        assert!((0..100).all(|_| !inj.should_fail(Site::Heap)));
        assert_eq!(inj.counts(Site::Heap), (0, 0), "boot is not counted");
    }

    #[test]
    fn every_nth_of_each_site_fails() {
        let inj = Injector::new();
        inj.arm(3);
        let heap: Vec<bool> = (0..9).map(|_| inj.should_fail(Site::Heap)).collect();
        assert_eq!(
            heap,
            [false, false, true, false, false, true, false, false, true]
        );
        // Each site counts on its own.
        assert!(!inj.should_fail(Site::Frame));
        assert!(!inj.should_fail(Site::Frame));
        assert!(inj.should_fail(Site::Frame));
        assert_eq!(inj.counts(Site::Heap), (3, 9));
        assert_eq!(inj.counts(Site::Frame), (1, 3));
        assert_eq!(inj.counts(Site::Stack), (0, 0));
        inj.disarm();
        assert!((0..10).all(|_| !inj.should_fail(Site::Heap)));
        assert_eq!(
            inj.counts(Site::Heap),
            (3, 9),
            "disarmed: nothing more counted"
        );
    }

    #[test]
    fn every_zero_counts_but_never_fails() {
        let inj = Injector::new();
        inj.arm(0);
        assert!((0..10).all(|_| !inj.should_fail(Site::Stack)));
        assert_eq!(inj.counts(Site::Stack), (0, 10));
    }

    #[cfg(not(feature = "fault-inject"))]
    #[test]
    fn the_normal_build_never_fails() {
        assert!(Site::ALL.iter().all(|&s| !should_fail(s)));
    }
}
