//! Physical frame allocator: which 4 KiB frames of RAM are free.
//!
//! The kernel builds one [`FrameAllocator`] at boot from the boot loader's memory map (the
//! usable byte ranges) minus what is already in use (the kernel image, the initial ramdisk,
//! the boot page tables: the reserved byte ranges). The allocator itself only does
//! bookkeeping; it never reads or writes the frames it hands out (zeroing is the caller's
//! job, through [`crate::pmap::PhysMem::zero_frame`]).
//!
//! The state is two bitmaps over the frames between the lowest and the highest usable frame:
//! `managed` (the frame is one this allocator hands out at all) and `free` (it is free now),
//! plus a next-fit hint for [`FrameAllocator::alloc`]. The heap must already exist: the
//! bitmaps are `Vec`s.
//!
//! # Invariants
//! - `free` ⊆ `managed`: a bit set in `free` is always set in `managed`, so a frame outside
//!   the usable ranges, inside a reserved range, or frame 0 is never handed out.
//! - No bit at or beyond `frames` (the padding of the last bitmap word) is ever set.
//! - `free_count` equals the number of bits set in `free` and `total` the number set in
//!   `managed`; `allocated_frames() == total_frames() - free_frames()`.
//! - [`FrameAllocator::free`] changes nothing when it returns an error: a double free or a
//!   foreign address never corrupts the state.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

/// Size of a page and of a physical frame, in bytes.
pub const PAGE_SIZE: u64 = 4096;

/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;

/// One past the highest physical address the x86-64 page-table format can express (52 bits).
/// Usable ranges above it are ignored.
pub const MAX_PHYS: u64 = 1 << 52;

/// A physical address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PhysAddr(pub u64);

impl PhysAddr {
    /// The address as a number.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Whether the address is a multiple of [`PAGE_SIZE`].
    pub const fn is_page_aligned(self) -> bool {
        self.0.is_multiple_of(PAGE_SIZE)
    }

    /// The address `offset` bytes further on. Wraps on overflow (which cannot happen for an
    /// offset inside a frame of real memory); use [`PhysAddr::checked_add`] for offsets that
    /// come from outside.
    pub const fn add(self, offset: u64) -> PhysAddr {
        PhysAddr(self.0.wrapping_add(offset))
    }

    /// The address `offset` bytes further on, or `None` on overflow.
    pub const fn checked_add(self, offset: u64) -> Option<PhysAddr> {
        match self.0.checked_add(offset) {
            Some(a) => Some(PhysAddr(a)),
            None => None,
        }
    }

    /// The start of the frame containing this address.
    pub const fn frame_start(self) -> PhysAddr {
        PhysAddr(self.0 & !(PAGE_SIZE - 1))
    }

    /// The offset of this address inside its frame.
    pub const fn frame_offset(self) -> u64 {
        self.0 & (PAGE_SIZE - 1)
    }

    /// The frame number (address / [`PAGE_SIZE`]).
    pub const fn frame_number(self) -> u64 {
        self.0 >> PAGE_SHIFT
    }
}

impl fmt::Display for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Why [`FrameAllocator::free`] refused an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The address is not a multiple of [`PAGE_SIZE`].
    Misaligned,
    /// The frame is not one this allocator manages (outside every usable range, inside a
    /// reserved range, or frame 0).
    OutOfRange,
    /// The frame is managed but currently free (a double free, or a frame never allocated).
    NotAllocated,
}

impl FrameError {
    /// A short lower-case description for reports.
    pub const fn describe(self) -> &'static str {
        match self {
            FrameError::Misaligned => "frame address not page-aligned",
            FrameError::OutOfRange => "frame not managed by the allocator",
            FrameError::NotAllocated => "frame not allocated (double free?)",
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A bitmap allocator of 4 KiB physical frames. See the module documentation.
#[derive(Clone, Debug)]
pub struct FrameAllocator {
    /// Frame number of bit 0 of the bitmaps.
    base: u64,
    /// Number of frames the bitmaps cover.
    frames: u64,
    /// Bit set: the frame is handed out by this allocator at all.
    managed: Vec<u64>,
    /// Bit set: the frame is free now. Always a subset of `managed`.
    free: Vec<u64>,
    /// Number of bits set in `managed`.
    total: usize,
    /// Number of bits set in `free`.
    free_count: usize,
    /// Frame index where the next single-frame search starts (next fit).
    hint: u64,
}

/// Sets (`value == true`) or clears the bits `from..to` of `words`. Bits past the end of
/// `words` are ignored.
fn set_bits(words: &mut [u64], from: u64, to: u64, value: bool) {
    let mut i = from;
    while i < to {
        let Ok(w) = usize::try_from(i / 64) else {
            return;
        };
        let Some(word) = words.get_mut(w) else {
            return;
        };
        let bit = i % 64;
        let n = (64 - bit).min(to - i);
        let mask = if n == 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << bit
        };
        if value {
            *word |= mask;
        } else {
            *word &= !mask;
        }
        i += n;
    }
}

/// Whether bit `i` of `words` is set (false past the end).
fn test_bit(words: &[u64], i: u64) -> bool {
    let Ok(w) = usize::try_from(i / 64) else {
        return false;
    };
    match words.get(w) {
        Some(word) => word & (1u64 << (i % 64)) != 0,
        None => false,
    }
}

fn count_bits(words: &[u64]) -> usize {
    words.iter().map(|w| w.count_ones() as usize).sum()
}

/// Frames wholly inside the byte range `r`, clamped to [`MAX_PHYS`]: `(first, end)` frame
/// numbers, possibly empty.
fn inner_frames(r: &Range<u64>) -> (u64, u64) {
    let start = r.start.min(MAX_PHYS);
    let end = r.end.min(MAX_PHYS);
    // `start <= MAX_PHYS`, so rounding up cannot overflow.
    let first = start.div_ceil(PAGE_SIZE);
    let last = end / PAGE_SIZE;
    (first, last)
}

/// Frames touched by the byte range `r`, clamped to [`MAX_PHYS`]: `(first, end)` frame numbers.
fn outer_frames(r: &Range<u64>) -> (u64, u64) {
    if r.start >= r.end {
        return (0, 0);
    }
    let start = r.start.min(MAX_PHYS);
    let end = r.end.min(MAX_PHYS);
    (start / PAGE_SIZE, end.div_ceil(PAGE_SIZE))
}

impl FrameAllocator {
    /// Builds an allocator whose free frames are the whole 4 KiB frames that lie inside some
    /// `usable` byte range and touch no `reserved` byte range. Ranges may be unaligned,
    /// unsorted, overlapping or empty. Frame 0 and frames at or above [`MAX_PHYS`] are never
    /// free.
    ///
    /// The bitmaps span from the lowest to the highest usable frame (two bits per frame, 64
    /// KiB per GiB spanned), allocated on the kernel heap.
    pub fn new(usable: &[Range<u64>], reserved: &[Range<u64>]) -> FrameAllocator {
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        for r in usable {
            let (first, end) = inner_frames(r);
            let first = first.max(1);
            if first < end {
                lo = lo.min(first);
                hi = hi.max(end);
            }
        }
        if lo >= hi {
            return FrameAllocator::empty();
        }
        let frames = hi - lo;
        let words = usize::try_from(frames.div_ceil(64)).unwrap_or(0);
        let mut managed = vec![0u64; words];
        for r in usable {
            let (first, end) = inner_frames(r);
            let first = first.max(1);
            if first < end {
                set_bits(&mut managed, first - lo, end - lo, true);
            }
        }
        for r in reserved {
            let (first, end) = outer_frames(r);
            let first = first.max(lo);
            let end = end.min(hi);
            if first < end {
                set_bits(&mut managed, first - lo, end - lo, false);
            }
        }
        let total = count_bits(&managed);
        FrameAllocator {
            base: lo,
            frames,
            free: managed.clone(),
            managed,
            total,
            free_count: total,
            hint: 0,
        }
    }

    /// An allocator with no frames at all.
    pub const fn empty() -> FrameAllocator {
        FrameAllocator {
            base: 0,
            frames: 0,
            managed: Vec::new(),
            free: Vec::new(),
            total: 0,
            free_count: 0,
            hint: 0,
        }
    }

    fn addr_of(&self, index: u64) -> PhysAddr {
        PhysAddr((self.base + index) << PAGE_SHIFT)
    }

    /// Takes one free frame (next fit: the search resumes after the frame handed out
    /// last, wrapping around), or `None` when none is left. The frame's contents are
    /// whatever was there.
    ///
    /// In builds with the `fault-inject` feature, [`crate::fault`] may make it fail (as it
    /// may [`FrameAllocator::alloc_contiguous`]).
    pub fn alloc(&mut self) -> Option<PhysAddr> {
        if crate::fault::should_fail(crate::fault::Site::Frame) {
            return None;
        }
        if self.free_count == 0 || self.frames == 0 {
            return None;
        }
        let start = if self.hint < self.frames {
            self.hint
        } else {
            0
        };
        let index = self
            .find_free_from(start, self.frames)
            .or_else(|| self.find_free_from(0, start))?;
        set_bits(&mut self.free, index, index + 1, false);
        self.free_count -= 1;
        self.hint = index + 1;
        Some(self.addr_of(index))
    }

    /// The first free frame index in `from..to`.
    fn find_free_from(&self, from: u64, to: u64) -> Option<u64> {
        let mut i = from;
        while i < to {
            let w = usize::try_from(i / 64).ok()?;
            // Ignore the bits below `i` in its word.
            let word = self.free.get(w)? & (u64::MAX << (i % 64));
            if word != 0 {
                let found = (i & !63) + u64::from(word.trailing_zeros());
                return (found < to).then_some(found);
            }
            i = (i & !63) + 64;
        }
        None
    }

    /// Takes `count` physically consecutive free frames (the lowest such run: first fit) and
    /// returns the address of the first, or `None` if there is no such run or `count` is 0.
    pub fn alloc_contiguous(&mut self, count: usize) -> Option<PhysAddr> {
        if crate::fault::should_fail(crate::fault::Site::Frame) {
            return None;
        }
        if count == 0 || count > self.free_count {
            return None;
        }
        let count = count as u64;
        let mut run_start = 0u64;
        let mut run_len = 0u64;
        let mut i = 0u64;
        while i < self.frames && run_len < count {
            let word = *self.free.get(usize::try_from(i / 64).ok()?)?;
            if i.is_multiple_of(64) && word == 0 {
                run_len = 0;
                i += 64;
                continue;
            }
            if i.is_multiple_of(64) && word == u64::MAX {
                if run_len == 0 {
                    run_start = i;
                }
                run_len += 64;
                i += 64;
                continue;
            }
            if word & (1u64 << (i % 64)) != 0 {
                if run_len == 0 {
                    run_start = i;
                }
                run_len += 1;
            } else {
                run_len = 0;
            }
            i += 1;
        }
        if run_len < count {
            return None;
        }
        set_bits(&mut self.free, run_start, run_start + count, false);
        // `count` fits in usize: it came from one.
        self.free_count -= count as usize;
        Some(self.addr_of(run_start))
    }

    /// Returns a frame obtained from [`FrameAllocator::alloc`] or
    /// [`FrameAllocator::alloc_contiguous`]. On error nothing changes.
    pub fn free(&mut self, frame: PhysAddr) -> Result<(), FrameError> {
        if !frame.is_page_aligned() {
            return Err(FrameError::Misaligned);
        }
        let index = frame
            .frame_number()
            .checked_sub(self.base)
            .filter(|&i| i < self.frames)
            .ok_or(FrameError::OutOfRange)?;
        if !test_bit(&self.managed, index) {
            return Err(FrameError::OutOfRange);
        }
        if test_bit(&self.free, index) {
            return Err(FrameError::NotAllocated);
        }
        set_bits(&mut self.free, index, index + 1, true);
        self.free_count += 1;
        Ok(())
    }

    /// Whether `frame` is a managed frame that is currently allocated.
    pub fn is_allocated(&self, frame: PhysAddr) -> bool {
        if !frame.is_page_aligned() {
            return false;
        }
        match frame.frame_number().checked_sub(self.base) {
            Some(i) if i < self.frames => test_bit(&self.managed, i) && !test_bit(&self.free, i),
            _ => false,
        }
    }

    /// Number of frames free now.
    pub fn free_frames(&self) -> usize {
        self.free_count
    }

    /// The frame numbers (physical address / [`PAGE_SIZE`]) the allocator spans: the
    /// first, and how many from it (managed or not).
    pub fn span(&self) -> (u64, u64) {
        (self.base, self.frames)
    }

    /// Number of frames this allocator manages (free or allocated).
    pub fn total_frames(&self) -> usize {
        self.total
    }

    /// Number of frames allocated now.
    pub fn allocated_frames(&self) -> usize {
        self.total - self.free_count
    }
}

/// The first page-aligned place of `size` bytes inside one of the `usable` ranges, clear of
/// every `reserved` range (empty ones are ignored) and ending at or below `limit`: for the
/// kernel's own regions at boot, before the allocator exists. Candidates are the starts of
/// usable ranges and the ends of reserved ones.
pub fn find_free(
    usable: &[Range<u64>],
    reserved: &[Range<u64>],
    size: u64,
    limit: u64,
) -> Option<u64> {
    let candidates = usable
        .iter()
        .map(|r| r.start)
        .chain(reserved.iter().map(|r| r.end));
    for start in candidates {
        let Some(start) = start.checked_next_multiple_of(PAGE_SIZE) else {
            continue;
        };
        let Some(end) = start.checked_add(size) else {
            continue;
        };
        let inside = usable.iter().any(|r| r.start <= start && end <= r.end);
        let clear = reserved
            .iter()
            .all(|r| r.is_empty() || end <= r.start || r.end <= start);
        if inside && clear && end <= limit {
            return Some(start);
        }
    }
    None
}

/// Whether the `usable` ranges hold at least `bytes` bytes in whole pages outside every
/// `reserved` range. Counts page by page and stops as soon as it has enough, so asking
/// for a few MiB costs a few thousand steps however large the machine (it runs at boot,
/// before any heap exists, so it allocates nothing).
pub fn free_at_least(usable: &[Range<u64>], reserved: &[Range<u64>], bytes: u64) -> bool {
    let mut found = 0u64;
    for r in usable {
        let Some(mut page) = r.start.checked_next_multiple_of(PAGE_SIZE) else {
            continue;
        };
        while page.checked_add(PAGE_SIZE).is_some_and(|end| end <= r.end) {
            if found >= bytes {
                return true;
            }
            if !reserved.iter().any(|x| x.start <= page && page < x.end) {
                found += PAGE_SIZE;
            }
            page += PAGE_SIZE;
        }
    }
    found >= bytes
}

/// Where the kernel heap goes and how large it is: `wanted` bytes, else the largest of
/// `wanted / 2`, `wanted / 4`, ... down to `min`, that has a free place ([`find_free`])
/// and leaves at least as much free memory besides for frames ([`free_at_least`] of twice
/// the size): in a machine where the kernel's image and the boot modules leave little, a
/// heap of the usual size would leave too few frames to start a task. `min` is taken if
/// it fits at all; `None` when not even `min` fits.
pub fn place_heap(
    usable: &[Range<u64>],
    reserved: &[Range<u64>],
    wanted: u64,
    min: u64,
    limit: u64,
) -> Option<(u64, u64)> {
    let mut size = wanted.max(min);
    loop {
        let leaves_enough = size <= min || free_at_least(usable, reserved, size.saturating_mul(2));
        if let (true, Some(start)) = (leaves_enough, find_free(usable, reserved, size, limit)) {
            return Some((start, size));
        }
        if size <= min {
            return None;
        }
        size = (size / 2).max(min).next_multiple_of(PAGE_SIZE);
    }
}

#[cfg(test)]
// The allocator takes slices of ranges; one-range slices are what the tests mean.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const P: u64 = PAGE_SIZE;

    #[test]
    fn find_free_keeps_clear_of_reserved_ranges_and_the_limit() {
        let usable = [0x1000..0x9f000, 0x10_0000..0x100_0000];
        let reserved = [0..0x10_0000, 0x10_0000..0x40_0000, 0..0];
        // After the kernel image, in the second usable range.
        assert_eq!(
            find_free(&usable, &reserved, 0x20_0000, u64::MAX),
            Some(0x40_0000)
        );
        // Small enough for the low range.
        let low = [0x10_0000..0x40_0000];
        assert_eq!(find_free(&usable, &low, 0x1000, u64::MAX), Some(0x1000));
        // Too large for what is left, or above the limit.
        assert_eq!(find_free(&usable, &reserved, 0xc0_1000, u64::MAX), None);
        assert_eq!(find_free(&usable, &reserved, 0x20_0000, 0x50_0000), None);
        // A size that would wrap is no place.
        assert_eq!(find_free(&usable, &[], u64::MAX, u64::MAX), None);
    }

    #[test]
    fn free_memory_is_counted_outside_reserved_ranges() {
        let usable = [0x1000..0x9f000, 0x10_0000..0x20_0000];
        // 158 low pages and 256 above 1 MiB; the start-info page reserved twice over.
        let reserved = [0..0x10_0000, 0x9000..0xa000, 0x18_0000..0x20_0000];
        assert!(free_at_least(&usable, &reserved, 0x8_0000));
        assert!(!free_at_least(&usable, &reserved, 0x8_1000));
        assert!(free_at_least(&usable, &[], (158 + 256) * P));
        assert!(!free_at_least(&usable, &[], (159 + 256) * P));
        // A range that is less than a page, or not page-aligned at its end, adds nothing.
        assert!(!free_at_least(&[0x1800..0x2800], &[], 1));
        assert!(free_at_least(&[], &[], 0));
    }

    #[test]
    fn the_heap_shrinks_to_what_a_small_machine_has_left() {
        let (mib, limit) = (1 << 20, 1 << 30);
        // 16 MiB of RAM; the kernel image to 3 MiB and boot modules of 5 MiB at the top:
        // 8 MiB free, so the wanted 4 MiB leaves as much besides.
        let usable = [0x1000..0x9f000, 0x10_0000..0x100_0000];
        let reserved = [0..0x10_0000, 0x10_0000..0x30_0000, 0xb0_0000..0x100_0000];
        assert_eq!(
            place_heap(&usable, &reserved, 4 * mib, mib, limit),
            Some((0x30_0000, 4 * mib))
        );
        // 13 MiB: 5 MiB free. 4 MiB would fit and leave one for frames: 2 MiB instead.
        let usable = [0x1000..0x9f000, 0x10_0000..0xd0_0000];
        let reserved = [0..0x10_0000, 0x10_0000..0x30_0000, 0x80_0000..0xd0_0000];
        assert_eq!(
            place_heap(&usable, &reserved, 4 * mib, mib, limit),
            Some((0x30_0000, 2 * mib))
        );
        // Modules of 6 MiB leave 3 MiB: the floor, which leaves two.
        let bigger = [0..0x10_0000, 0x10_0000..0x30_0000, 0x60_0000..0xc0_0000];
        let usable = [0x1000..0x9f000, 0x10_0000..0xc0_0000];
        assert_eq!(
            place_heap(&usable, &bigger, 4 * mib, mib, limit),
            Some((0x30_0000, mib))
        );
        // Less than the floor: no heap.
        let full = [0..0x10_0000, 0x10_0000..0x30_0000, 0x38_0000..0xc0_0000];
        assert_eq!(place_heap(&usable, &full, 4 * mib, mib, limit), None);
        // The floor is taken when it fits, even if it leaves less than itself.
        let tight = [0..0x10_0000, 0x10_0000..0x30_0000, 0x48_0000..0xc0_0000];
        assert_eq!(
            place_heap(&usable, &tight, 4 * mib, mib, limit),
            Some((0x30_0000, mib))
        );
        // A large machine gets what it wants at once.
        let big = [0x10_0000..0x1_0000_0000];
        assert_eq!(
            place_heap(&big, &reserved[..2], 64 * mib, mib, limit),
            Some((0x30_0000, 64 * mib))
        );
    }

    fn check_counts(a: &FrameAllocator) {
        assert_eq!(a.free_frames(), count_bits(&a.free));
        assert_eq!(a.total_frames(), count_bits(&a.managed));
        assert_eq!(a.allocated_frames() + a.free_frames(), a.total_frames());
        for (f, m) in a.free.iter().zip(&a.managed) {
            assert_eq!(f & !m, 0, "free bit outside managed");
        }
    }

    #[test]
    fn phys_addr_helpers() {
        let a = PhysAddr(0x1234);
        assert!(!a.is_page_aligned());
        assert!(PhysAddr(0x2000).is_page_aligned());
        assert_eq!(a.as_u64(), 0x1234);
        assert_eq!(a.add(4), PhysAddr(0x1238));
        assert_eq!(a.frame_start(), PhysAddr(0x1000));
        assert_eq!(a.frame_offset(), 0x234);
        assert_eq!(a.frame_number(), 1);
        assert_eq!(PhysAddr(u64::MAX).checked_add(1), None);
        assert_eq!(PhysAddr(1).checked_add(1), Some(PhysAddr(2)));
        assert_eq!(std::format!("{}", PhysAddr(0x1000)), "0x1000");
    }

    /// What a refused free reports, directly and through `Display`.
    #[test]
    fn errors_describe_themselves() {
        for (e, text) in [
            (FrameError::Misaligned, "frame address not page-aligned"),
            (FrameError::OutOfRange, "frame not managed by the allocator"),
            (
                FrameError::NotAllocated,
                "frame not allocated (double free?)",
            ),
        ] {
            assert_eq!(e.describe(), text);
            assert_eq!(std::format!("{e}"), text);
        }
    }

    #[test]
    fn exhaustion_and_reuse() {
        let mut a = FrameAllocator::new(&[0x10000..0x10000 + 8 * P], &[]);
        assert_eq!(a.total_frames(), 8);
        let mut got = HashSet::new();
        for _ in 0..8 {
            let f = a.alloc().unwrap();
            assert!(f.is_page_aligned());
            assert!((0x10000..0x10000 + 8 * P).contains(&f.0));
            assert!(got.insert(f), "frame handed out twice");
            check_counts(&a);
        }
        assert_eq!(a.alloc(), None);
        assert_eq!(a.free_frames(), 0);
        assert_eq!(a.allocated_frames(), 8);
        let f = *got.iter().next().unwrap();
        a.free(f).unwrap();
        assert_eq!(a.alloc(), Some(f));
        assert_eq!(a.alloc(), None);
        for f in got {
            a.free(f).unwrap();
        }
        assert_eq!(a.free_frames(), 8);
        check_counts(&a);
    }

    #[test]
    fn next_fit_moves_on() {
        let mut a = FrameAllocator::new(&[P..1000 * P], &[]);
        let first = a.alloc().unwrap();
        let second = a.alloc().unwrap();
        a.free(first).unwrap();
        // Next fit does not go back to the frame just freed while later ones are free.
        let third = a.alloc().unwrap();
        assert_ne!(third, first);
        assert_ne!(third, second);
    }

    #[test]
    fn frame_zero_never_handed_out() {
        let mut a = FrameAllocator::new(&[0..4 * P], &[]);
        assert_eq!(a.total_frames(), 3);
        while let Some(f) = a.alloc() {
            assert_ne!(f.0, 0);
        }
        assert_eq!(a.free(PhysAddr(0)), Err(FrameError::OutOfRange));
    }

    #[test]
    fn reserved_ranges_honoured() {
        // Reserved ranges remove every frame they touch, even partly.
        let mut a = FrameAllocator::new(
            &[P..20 * P],
            &[3 * P..5 * P, 10 * P + 1..10 * P + 2, 19 * P - 1..40 * P],
        );
        let mut got = Vec::new();
        while let Some(f) = a.alloc() {
            got.push(f.0 / P);
        }
        got.sort();
        assert_eq!(got, vec![1, 2, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17]);
        assert_eq!(a.free(PhysAddr(3 * P)), Err(FrameError::OutOfRange));
        assert_eq!(a.free(PhysAddr(10 * P)), Err(FrameError::OutOfRange));
        check_counts(&a);
    }

    #[test]
    // Empty and inverted ranges are the point of this test.
    #[allow(clippy::reversed_empty_ranges)]
    fn unaligned_unsorted_overlapping_regions() {
        let a = FrameAllocator::new(
            &[
                // Only frames 3..5 are whole inside this one.
                3 * P - 1..5 * P + 100,
                // Empty and inverted ranges are ignored.
                7 * P..7 * P,
                9 * P..8 * P,
                // Overlapping ranges count each frame once.
                20 * P..30 * P,
                25 * P..35 * P,
                // Less than a frame: nothing.
                50 * P + 1..51 * P + 5,
            ],
            &[],
        );
        assert_eq!(a.total_frames(), 2 + 15);
        assert!(!a.is_allocated(PhysAddr(3 * P)));
        check_counts(&a);
    }

    #[test]
    fn huge_and_empty_maps() {
        let mut a = FrameAllocator::new(&[], &[]);
        assert_eq!(a.total_frames(), 0);
        assert_eq!(a.alloc(), None);
        assert_eq!(a.alloc_contiguous(1), None);
        assert_eq!(a.free(PhysAddr(P)), Err(FrameError::OutOfRange));
        // Ranges beyond the 52-bit physical limit are clamped rather than overflowing.
        let a = FrameAllocator::new(&[MAX_PHYS - 2 * P..u64::MAX], &[u64::MAX - 1..u64::MAX]);
        assert_eq!(a.total_frames(), 2);
    }

    #[test]
    fn double_free_and_bad_frees_change_nothing() {
        let mut a = FrameAllocator::new(&[P..10 * P], &[]);
        let f = a.alloc().unwrap();
        let before = a.clone();
        assert_eq!(a.free(PhysAddr(f.0 + 1)), Err(FrameError::Misaligned));
        assert_eq!(a.free(PhysAddr(100 * P)), Err(FrameError::OutOfRange));
        assert_eq!(
            a.free(PhysAddr(0xffff_ffff_ffff_f000)),
            Err(FrameError::OutOfRange)
        );
        let other = PhysAddr(if f.0 == P { 2 * P } else { P });
        assert_eq!(a.free(other), Err(FrameError::NotAllocated));
        assert_eq!(a.free_frames(), before.free_frames());
        assert_eq!(a.free, before.free);
        a.free(f).unwrap();
        assert_eq!(a.free(f), Err(FrameError::NotAllocated));
        assert_eq!(a.free_frames(), 9);
        check_counts(&a);
    }

    #[test]
    fn contiguous_allocation() {
        // 200 frames: 1..201, with a hole at 70.
        let mut a = FrameAllocator::new(&[P..201 * P], &[70 * P..71 * P]);
        assert_eq!(a.alloc_contiguous(0), None);
        let run = a.alloc_contiguous(100).unwrap();
        // First fit: the run must avoid the hole, so it starts at frame 71.
        assert_eq!(run, PhysAddr(71 * P));
        for i in 71..171 {
            assert!(a.is_allocated(PhysAddr(i * P)));
        }
        // The lower run 1..70 is 69 frames long.
        assert_eq!(a.alloc_contiguous(70), None);
        assert_eq!(a.alloc_contiguous(69), Some(PhysAddr(P)));
        assert_eq!(a.free_frames(), 30);
        assert_eq!(a.alloc_contiguous(31), None);
        assert_eq!(a.alloc_contiguous(30), Some(PhysAddr(171 * P)));
        assert_eq!(a.free_frames(), 0);
        check_counts(&a);
        a.free(PhysAddr(100 * P)).unwrap();
        a.free(PhysAddr(101 * P)).unwrap();
        assert_eq!(a.alloc_contiguous(2), Some(PhysAddr(100 * P)));
        check_counts(&a);
    }

    #[test]
    fn contiguous_across_word_boundaries() {
        let mut a = FrameAllocator::new(&[64 * P..(64 * 5) * P], &[]);
        // Take one frame inside the second word so runs must skip it.
        let _ = a.alloc_contiguous(70).unwrap();
        let r = a.alloc_contiguous(130).unwrap();
        assert_eq!(r, PhysAddr((64 + 70) * P));
        assert_eq!(a.free_frames(), 256 - 200);
        check_counts(&a);
    }

    #[test]
    fn counts_consistent_under_mixed_use() {
        let mut a = FrameAllocator::new(&[P..300 * P], &[150 * P..160 * P]);
        let mut live = Vec::new();
        for round in 0..50u64 {
            if round % 3 == 0 {
                if let Some(f) = a.alloc_contiguous((round % 7 + 1) as usize) {
                    for k in 0..(round % 7 + 1) {
                        live.push(PhysAddr(f.0 + k * P));
                    }
                }
            } else if let Some(f) = a.alloc() {
                live.push(f);
            }
            if round % 4 == 0 && !live.is_empty() {
                let f = live.swap_remove((round as usize * 7) % live.len());
                a.free(f).unwrap();
            }
            assert_eq!(a.allocated_frames(), live.len());
            check_counts(&a);
        }
        let set: HashSet<_> = live.iter().collect();
        assert_eq!(set.len(), live.len());
    }
}
