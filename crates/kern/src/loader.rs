//! Loading a static ELF64 executable into a user address space.
//!
//! The kernel maps programs with [`plan`]: which pages of each segment come straight from
//! the program's image (copy-on-write), which are copied because they hold only part of
//! the segment's file bytes, and which are zero-filled (`docs/vm.md`, "Task creation").
//! [`load_elf`] is the eager form, which copies every byte into fresh frames of a page
//! table; it shares the checks with [`plan`] and tests them.
//!
//! [`load_elf`] accepts little-endian x86-64 `ET_EXEC` images (static, non-PIE, no
//! interpreter) and maps each `PT_LOAD` segment on fresh, zeroed, [`OWNED`](crate::pmap::OWNED)
//! frames: file bytes are copied in, the rest of the segment (`.bss`) stays zero. Bytes are
//! copied one page at a time, so `p_vaddr` and `p_offset` need not be congruent modulo the
//! page size. [`map_user_stack`] maps the initial thread's stack.
//!
//! Decode, then invoke: the header and every program header are validated before anything
//! is mapped. Errors after that point (running out of memory, colliding with an existing
//! mapping) leave partial mappings behind: **on any error the caller destroys the address
//! space** (which frees every frame this module mapped, since they are all owned).
//!
//! Two segments sharing a page (common when a linker such as lld does not page-align
//! segments) share one frame: the page gets the union of their permissions (so it may be
//! both writable and executable). Copying into separate frames is not an option, since
//! both segments' bytes must be visible at their addresses in the one page.
//!
//! # Invariants
//! - Every page mapped by this module lies in `[USER_MIN, USER_END)`, is a user page,
//!   writable only if a segment on it has `PF_W`, executable only if one has `PF_X`, and is
//!   backed by an owned frame that was zeroed before any byte was copied into it.
//! - No two loaded segments overlap in bytes; a page already mapped before the load is
//!   never reused (that is [`LoadError::Overlap`]).
//! - The entry point lies inside an executable segment.
//! - No byte outside the image is read: every file range is checked against its length.

use crate::frame::{PhysAddr, PAGE_SIZE};
use crate::pmap::{AddressSpace, MapError, MapFlags, PhysMem};
use alloc::vec::Vec;
use baton_abi::layout::{USER_END, USER_MIN, USER_STACK_SIZE, USER_STACK_TOP};
use core::fmt;
use elf::abi::{EM_X86_64, ET_EXEC, PF_W, PF_X, PT_INTERP, PT_LOAD};
use elf::endian::AnyEndian;
use elf::file::Class;
use elf::ElfBytes;

/// Why an image could not be loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// Not a parseable ELF file (bad magic, truncated headers, bad table sizes).
    BadElf,
    /// A 32-bit ELF file.
    WrongClass,
    /// A big-endian ELF file.
    WrongEndian,
    /// Not for x86-64.
    WrongMachine,
    /// Not a static executable (`ET_DYN`, relocatable, core, or has an interpreter).
    NotExecutable,
    /// A segment is malformed (`p_filesz > p_memsz`, file range outside the image), or the
    /// image has no loadable segment.
    BadSegment,
    /// A segment (or the stack) is not inside the user range, or wraps around.
    OutsideUser,
    /// Two segments overlap, or a segment collides with an existing mapping.
    Overlap,
    /// The entry point is not inside an executable segment.
    BadEntry,
    /// No frame for a page or page table.
    NoMemory,
}

impl LoadError {
    /// A short lower-case description for reports.
    pub const fn describe(&self) -> &'static str {
        match self {
            LoadError::BadElf => "not a valid ELF file",
            LoadError::WrongClass => "not a 64-bit ELF file",
            LoadError::WrongEndian => "not a little-endian ELF file",
            LoadError::WrongMachine => "not an x86-64 ELF file",
            LoadError::NotExecutable => "not a static executable",
            LoadError::BadSegment => "malformed or missing loadable segment",
            LoadError::OutsideUser => "segment outside the user address range",
            LoadError::Overlap => "overlapping segments or mappings",
            LoadError::BadEntry => "entry point outside executable segments",
            LoadError::NoMemory => "out of memory",
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

impl From<LoadError> for baton_abi::Error {
    fn from(e: LoadError) -> baton_abi::Error {
        match e {
            LoadError::NoMemory => baton_abi::Error::NoMemory,
            _ => baton_abi::Error::BadFormat,
        }
    }
}

impl From<MapError> for LoadError {
    fn from(e: MapError) -> LoadError {
        match e {
            MapError::NoMemory => LoadError::NoMemory,
            MapError::AlreadyMapped => LoadError::Overlap,
            MapError::OutsideUser | MapError::NonCanonical => LoadError::OutsideUser,
            MapError::Misaligned | MapError::NotMapped => LoadError::BadSegment,
        }
    }
}

/// A validated `PT_LOAD` segment.
#[derive(Clone, Copy, Debug)]
struct Segment {
    vaddr: u64,
    /// `vaddr + memsz`, `<= USER_END`.
    end: u64,
    /// File bytes, `offset..offset + filesz` inside the image.
    offset: usize,
    filesz: usize,
    flags: MapFlags,
}

impl Segment {
    /// First page of the segment.
    fn first_page(&self) -> u64 {
        self.vaddr & !(PAGE_SIZE - 1)
    }

    /// One past the last page of the segment (`end <= USER_END`, so no overflow).
    fn end_page(&self) -> u64 {
        self.end.div_ceil(PAGE_SIZE) * PAGE_SIZE
    }
}

/// Validates the image and returns its entry point and loadable segments, touching
/// nothing.
fn decode(image: &[u8]) -> Result<(u64, Vec<Segment>), LoadError> {
    decode_sized(image, image.len())
}

/// [`decode`] of a file of `file_len` bytes of which `image` holds the first bytes (at
/// least its headers): segments are checked against `file_len`.
fn decode_sized(image: &[u8], file_len: usize) -> Result<(u64, Vec<Segment>), LoadError> {
    let file = ElfBytes::<AnyEndian>::minimal_parse(image).map_err(|_| LoadError::BadElf)?;
    let ehdr = &file.ehdr;
    if ehdr.class != Class::ELF64 {
        return Err(LoadError::WrongClass);
    }
    if ehdr.endianness != AnyEndian::Little {
        return Err(LoadError::WrongEndian);
    }
    if ehdr.e_machine != EM_X86_64 {
        return Err(LoadError::WrongMachine);
    }
    if ehdr.e_type != ET_EXEC {
        return Err(LoadError::NotExecutable);
    }
    let phdrs = file.segments().ok_or(LoadError::BadSegment)?;
    let mut segments: Vec<Segment> = Vec::new();
    for ph in phdrs.iter() {
        if ph.p_type == PT_INTERP {
            return Err(LoadError::NotExecutable);
        }
        if ph.p_type != PT_LOAD {
            continue;
        }
        if ph.p_filesz > ph.p_memsz {
            return Err(LoadError::BadSegment);
        }
        if ph.p_memsz == 0 {
            continue;
        }
        let offset = usize::try_from(ph.p_offset).map_err(|_| LoadError::BadSegment)?;
        let filesz = usize::try_from(ph.p_filesz).map_err(|_| LoadError::BadSegment)?;
        let file_end = offset.checked_add(filesz).ok_or(LoadError::BadSegment)?;
        if file_end > file_len {
            return Err(LoadError::BadSegment);
        }
        let end = ph
            .p_vaddr
            .checked_add(ph.p_memsz)
            .ok_or(LoadError::OutsideUser)?;
        if ph.p_vaddr < USER_MIN || end > USER_END {
            return Err(LoadError::OutsideUser);
        }
        let seg = Segment {
            vaddr: ph.p_vaddr,
            end,
            offset,
            filesz,
            flags: MapFlags::user_owned(ph.p_flags & PF_W != 0, ph.p_flags & PF_X != 0),
        };
        if segments
            .iter()
            .any(|s| seg.vaddr < s.end && s.vaddr < seg.end)
        {
            return Err(LoadError::Overlap);
        }
        segments.try_reserve(1).map_err(|_| LoadError::NoMemory)?;
        segments.push(seg);
    }
    if segments.is_empty() {
        return Err(LoadError::BadSegment);
    }
    let entry = ehdr.e_entry;
    if !segments
        .iter()
        .any(|s| s.flags.executable && (s.vaddr..s.end).contains(&entry))
    {
        return Err(LoadError::BadEntry);
    }
    Ok((entry, segments))
}

/// Allocates a zeroed frame and maps it at `va` with `flags` (which include `owned`),
/// freeing the frame again if the mapping fails.
fn map_fresh(
    space: &mut AddressSpace,
    mem: &mut impl PhysMem,
    va: u64,
    flags: MapFlags,
) -> Result<PhysAddr, LoadError> {
    let frame = mem.alloc_frame().ok_or(LoadError::NoMemory)?;
    mem.zero_frame(frame);
    if let Err(e) = space.map(mem, va, frame, flags.with_owned()) {
        mem.free_frame(frame);
        return Err(e.into());
    }
    Ok(frame)
}

/// Loads the ELF executable `image` into `space` and returns its entry point.
///
/// See the module documentation for what is accepted. On error the space may hold partial
/// mappings; the caller destroys it.
pub fn load_elf(
    space: &mut AddressSpace,
    mem: &mut impl PhysMem,
    image: &[u8],
) -> Result<u64, LoadError> {
    let (entry, segments) = decode(image)?;
    for (i, seg) in segments.iter().enumerate() {
        let earlier = segments.get(..i).unwrap_or(&[]);
        let mut page = seg.first_page();
        while page < seg.end_page() {
            let frame = match space.translate(mem, page) {
                None => map_fresh(space, mem, page, seg.flags)?,
                Some((frame, flags)) => {
                    // Only a page shared with an earlier segment of this image may be
                    // reused; anything else was there before the load.
                    let shared = earlier
                        .iter()
                        .any(|s| (s.first_page()..s.end_page()).contains(&page));
                    if !shared || !flags.owned {
                        return Err(LoadError::Overlap);
                    }
                    space.protect(mem, page, flags.union(seg.flags))?;
                    frame
                }
            };
            copy_segment_page(mem, image, seg, page, frame)?;
            page += PAGE_SIZE;
        }
    }
    Ok(entry)
}

/// How one page run of a program is mapped ([`plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    /// Straight from the image, copy-on-write: the run's pages are whole pages of file
    /// bytes of one segment, at this page-aligned offset of the image.
    Image {
        /// Offset in the image of the run's first page.
        offset: u64,
    },
    /// Private pages filled now: a page holding only part of a page of file bytes (the
    /// segment's first or last file page), or file bytes not congruent to their address
    /// modulo the page size. The rest of each page is zero; no byte of the image outside
    /// the segment's file bytes is ever copied.
    Copy,
    /// Zeros (`.bss` past the file bytes' last page): no byte of the image.
    Zero,
}

/// A run of pages `[start, end)` mapped one way with one protection ([`plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// First page.
    pub start: u64,
    /// One past the last page.
    pub end: u64,
    /// How it is mapped.
    pub kind: RunKind,
    /// Writable.
    pub writable: bool,
    /// Executable.
    pub executable: bool,
    /// The segment's first byte's address and one past its last file byte's, and where its
    /// file bytes start in the image (for [`Run::file_bytes`]).
    seg: (u64, u64, usize),
}

impl Run {
    /// For a page `page` of a [`RunKind::Copy`] run: where in the page its file bytes go,
    /// and their range in the image (`None` when the page holds none).
    pub fn file_bytes(&self, page: u64) -> Option<(usize, core::ops::Range<usize>)> {
        let (vaddr, file_vend, offset) = self.seg;
        let start = vaddr.max(page);
        let stop = file_vend.min(page.checked_add(PAGE_SIZE)?);
        if start >= stop {
            return None;
        }
        let src = offset.checked_add(usize::try_from(start - vaddr).ok()?)?;
        let len = usize::try_from(stop - start).ok()?;
        Some(((start - page) as usize, src..src.checked_add(len)?))
    }
}

/// How to map the ELF executable `image` into an empty address space without copying its
/// file bytes (Accent's way of running a program: its pages are the file's, copy-on-write):
/// its entry point and the runs of pages of each loadable segment, in address order. Only
/// the first `image_pages` whole pages of the image can be mapped from it
/// ([`RunKind::Image`]); a page of file bytes beyond them, or one that holds file bytes only
/// in part, is [`RunKind::Copy`]; pages past the file bytes are [`RunKind::Zero`].
///
/// Checks what [`load_elf`] checks, and refuses ([`LoadError::Overlap`]) two segments that
/// share a page: each page is one segment's, with that segment's rights. Touches nothing.
pub fn plan(image: &[u8], image_pages: u64) -> Result<(u64, Vec<Run>), LoadError> {
    plan_runs(decode(image)?, image_pages)
}

/// [`plan`] for a program file of `file_len` bytes that is not at hand in full (a memory
/// object whose pages come from a pager): `head` is its first bytes, which must hold the
/// ELF header and the program headers (the first page does for any program Baton's linker
/// makes). Every whole page of the file can be mapped from it ([`RunKind::Image`]); the
/// bytes a [`RunKind::Copy`] page needs ([`Run::file_bytes`]) the caller reads from the
/// file itself. The section headers, which loading never needs, are not looked at (they
/// lie at the file's end, outside `head`).
pub fn plan_head(head: &[u8], file_len: usize) -> Result<(u64, Vec<Run>), LoadError> {
    if head.len() < 64 || head.len() > file_len {
        return Err(LoadError::BadElf);
    }
    let mut h: Vec<u8> = Vec::new();
    h.try_reserve_exact(head.len())
        .map_err(|_| LoadError::NoMemory)?;
    h.extend_from_slice(head);
    // ELF64: e_shoff at 0x28 (8 bytes), e_shnum at 0x3c and e_shstrndx at 0x3e (2 each).
    h[0x28..0x30].fill(0);
    h[0x3c..0x40].fill(0);
    plan_runs(decode_sized(&h, file_len)?, (file_len as u64) / PAGE_SIZE)
}

fn plan_runs(decoded: (u64, Vec<Segment>), image_pages: u64) -> Result<(u64, Vec<Run>), LoadError> {
    let (entry, mut segments) = decoded;
    segments.sort_unstable_by_key(|s| s.vaddr);
    let mut runs: Vec<Run> = Vec::new();
    let mut last_end = 0u64;
    for seg in &segments {
        if seg.first_page() < last_end {
            return Err(LoadError::Overlap);
        }
        last_end = seg.end_page();
        let file_vend = seg.vaddr + seg.filesz as u64;
        let congruent = (seg.offset as u64) % PAGE_SIZE == seg.vaddr % PAGE_SIZE;
        let info = (seg.vaddr, file_vend, seg.offset);
        let mut page = seg.first_page();
        while page < seg.end_page() {
            let whole_file_page = page >= seg.vaddr && page + PAGE_SIZE <= file_vend;
            let at = seg.offset as u64 + page.saturating_sub(seg.vaddr);
            let kind = if whole_file_page && congruent && at / PAGE_SIZE < image_pages {
                RunKind::Image { offset: at }
            } else if page < file_vend {
                RunKind::Copy
            } else {
                RunKind::Zero
            };
            let extends = runs.last_mut().filter(|r| {
                r.end == page
                    && r.seg == info
                    && match (r.kind, kind) {
                        (RunKind::Image { offset }, RunKind::Image { offset: o }) => {
                            offset + (page - r.start) == o
                        }
                        (a, b) => a == b,
                    }
            });
            match extends {
                Some(r) => r.end += PAGE_SIZE,
                None => {
                    runs.try_reserve(1).map_err(|_| LoadError::NoMemory)?;
                    runs.push(Run {
                        start: page,
                        end: page + PAGE_SIZE,
                        kind,
                        writable: seg.flags.writable,
                        executable: seg.flags.executable,
                        seg: info,
                    });
                }
            }
            page += PAGE_SIZE;
        }
    }
    Ok((entry, runs))
}

/// Copies the part of `seg`'s file bytes that falls in the page at `page` into `frame`.
fn copy_segment_page(
    mem: &mut impl PhysMem,
    image: &[u8],
    seg: &Segment,
    page: u64,
    frame: PhysAddr,
) -> Result<(), LoadError> {
    // `filesz <= memsz`, so `vaddr + filesz <= end` does not overflow.
    let file_vend = seg.vaddr + seg.filesz as u64;
    let start = seg.vaddr.max(page);
    let stop = file_vend.min(page + PAGE_SIZE);
    if start >= stop {
        return Ok(());
    }
    let src_start = usize::try_from(start - seg.vaddr)
        .ok()
        .and_then(|d| seg.offset.checked_add(d))
        .ok_or(LoadError::BadSegment)?;
    let len = usize::try_from(stop - start).map_err(|_| LoadError::BadSegment)?;
    let src = src_start
        .checked_add(len)
        .and_then(|e| image.get(src_start..e))
        .ok_or(LoadError::BadSegment)?;
    mem.write_bytes(frame.add(start - page), src);
    Ok(())
}

/// Maps the initial thread's user stack: [`USER_STACK_SIZE`] bytes of zeroed, writable,
/// non-executable, owned user pages ending at [`USER_STACK_TOP`], and returns the initial
/// stack pointer (`USER_STACK_TOP`, 16-byte aligned). The page below the stack must be
/// unmapped and stays so, as a guard. On error the caller destroys the space.
pub fn map_user_stack(space: &mut AddressSpace, mem: &mut impl PhysMem) -> Result<u64, LoadError> {
    let bottom = USER_STACK_TOP - USER_STACK_SIZE;
    let guard = bottom - PAGE_SIZE;
    let mut page = guard;
    while page < USER_STACK_TOP {
        if space.translate(mem, page).is_some() {
            return Err(LoadError::Overlap);
        }
        page += PAGE_SIZE;
    }
    let mut page = bottom;
    while page < USER_STACK_TOP {
        map_fresh(space, mem, page, MapFlags::user_owned(true, false))?;
        page += PAGE_SIZE;
    }
    Ok(USER_STACK_TOP)
}

const _: () =
    assert!(USER_STACK_TOP.is_multiple_of(16) && USER_STACK_TOP.is_multiple_of(PAGE_SIZE));
const _: () = assert!(USER_STACK_SIZE.is_multiple_of(PAGE_SIZE) && USER_STACK_SIZE > 0);
const _: () = assert!(USER_STACK_TOP - USER_STACK_SIZE - PAGE_SIZE >= USER_MIN);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmap::fake::FakeMem;
    use std::vec;

    const P: u64 = PAGE_SIZE;

    /// A program header for the test image builder.
    #[derive(Clone)]
    struct Ph {
        p_type: u32,
        flags: u32,
        vaddr: u64,
        data: Vec<u8>,
        memsz: u64,
        /// Offset of the data in the file; `None` puts it after the previous data,
        /// congruent to `vaddr` modulo the page size.
        offset: Option<u64>,
    }

    fn load(flags: u32, vaddr: u64, data: &[u8], memsz: u64) -> Ph {
        Ph {
            p_type: PT_LOAD,
            flags,
            vaddr,
            data: data.to_vec(),
            memsz,
            offset: None,
        }
    }

    #[test]
    fn plan_maps_whole_file_pages_and_copies_partial_ones() {
        // Text: 2.5 pages of file bytes; data: 1 page + 100 bytes, memsz 4 pages.
        let text = vec![0xccu8; (2 * P + P / 2) as usize];
        let data = vec![0x11u8; (P + 100) as usize];
        let img = Img::new(
            0x40_0000,
            vec![
                load(PF_X | 4, 0x40_0000, &text, text.len() as u64),
                load(PF_W | 4, 0x50_0000, &data, 4 * P),
            ],
        )
        .build();
        let pages = img.len() as u64 / P;
        let (entry, runs) = plan(&img, pages).unwrap();
        assert_eq!(entry, 0x40_0000);
        let kinds: Vec<(u64, u64, RunKind, bool, bool)> = runs
            .iter()
            .map(|r| (r.start, r.end, r.kind, r.writable, r.executable))
            .collect();
        assert_eq!(kinds.len(), 5, "{kinds:?}");
        assert!(matches!(kinds[0].2, RunKind::Image { .. }));
        assert_eq!((kinds[0].0, kinds[0].1), (0x40_0000, 0x40_0000 + 2 * P));
        assert_eq!(
            kinds[1],
            (
                0x40_0000 + 2 * P,
                0x40_0000 + 3 * P,
                RunKind::Copy,
                false,
                true
            )
        );
        assert!(matches!(kinds[2].2, RunKind::Image { .. }));
        assert_eq!(
            (kinds[2].0, kinds[2].1, kinds[2].3),
            (0x50_0000, 0x50_0000 + P, true)
        );
        assert_eq!(
            kinds[3],
            (0x50_0000 + P, 0x50_0000 + 2 * P, RunKind::Copy, true, false)
        );
        assert_eq!(
            kinds[4],
            (
                0x50_0000 + 2 * P,
                0x50_0000 + 4 * P,
                RunKind::Zero,
                true,
                false
            )
        );
        // The image runs name the file bytes of their pages.
        let RunKind::Image { offset } = runs[0].kind else {
            unreachable!()
        };
        assert_eq!(
            &img[offset as usize..(offset + 2 * P) as usize],
            &text[..(2 * P) as usize]
        );
        // The partial page copies only the segment's bytes.
        let (at, src) = runs[1].file_bytes(runs[1].start).unwrap();
        assert_eq!((at, src.len()), (0, (P / 2) as usize));
        assert!(img[src].iter().all(|&b| b == 0xcc));
        let (at, src) = runs[3].file_bytes(runs[3].start).unwrap();
        assert_eq!((at, src.len()), (0, 100));
        assert!(img[src].iter().all(|&b| b == 0x11));
        assert_eq!(runs[4].file_bytes(runs[4].start), None);
    }

    #[test]
    fn plan_copies_what_the_image_cannot_give() {
        let text = vec![0xccu8; (2 * P) as usize];
        let img = Img::new(0x40_0000, vec![load(PF_X | 4, 0x40_0000, &text, 2 * P)]).build();
        // No whole page of the image may be mapped: everything is copied.
        let (_, runs) = plan(&img, 0).unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].kind, RunKind::Copy);
        // A segment whose address is not congruent to its offset is copied.
        let mut ph = load(PF_X | 4, 0x40_0000, &text, 2 * P);
        ph.offset = Some(P + 8);
        let img = Img::new(0x40_0000, vec![ph]).build();
        let (_, runs) = plan(&img, img.len() as u64 / P).unwrap();
        assert!(runs.iter().all(|r| r.kind == RunKind::Copy));
        let (at, src) = runs[0].file_bytes(0x40_0000).unwrap();
        assert_eq!(
            (at, src.start, src.len()),
            (0, (P + 8) as usize, P as usize)
        );
        // Two segments in one page are refused.
        let img = Img::new(
            0x40_0000,
            vec![
                load(PF_X | 4, 0x40_0000, &[1; 16], 16),
                load(PF_W | 4, 0x40_0800, &[2; 16], 16),
            ],
        )
        .build();
        assert_eq!(plan(&img, 8).unwrap_err(), LoadError::Overlap);
        // And what load_elf refuses, plan refuses.
        assert_eq!(plan(b"not an elf", 0).unwrap_err(), LoadError::BadElf);
    }

    #[test]
    fn plan_head_plans_from_the_headers_alone() {
        let text = vec![0xccu8; (2 * P + P / 2) as usize];
        let data = vec![0x11u8; (P + 100) as usize];
        let img = Img::new(
            0x40_0000,
            vec![
                load(PF_X | 4, 0x40_0000, &text, text.len() as u64),
                load(PF_W | 4, 0x50_0000, &data, 4 * P),
            ],
        )
        .build();
        // The whole file's plan and the plan from its first page agree.
        let full = plan(&img, img.len() as u64 / P).unwrap();
        let head = plan_head(&img[..P as usize], img.len()).unwrap();
        assert_eq!(full, head);
        // A file said to be shorter than its segments is refused.
        assert_eq!(
            plan_head(&img[..P as usize], P as usize).unwrap_err(),
            LoadError::BadSegment
        );
        // A head too short for the headers, or longer than the file, is refused.
        assert_eq!(
            plan_head(&img[..32], img.len()).unwrap_err(),
            LoadError::BadElf
        );
        assert_eq!(plan_head(&img[..100], 50).unwrap_err(), LoadError::BadElf);
        // Garbage of any length is refused, never a panic.
        for n in [64usize, 100, 4096] {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert!(plan_head(&junk, n * 3).is_err());
        }
    }

    struct Img {
        machine: u16,
        e_type: u16,
        entry: u64,
        phs: Vec<Ph>,
    }

    impl Img {
        fn new(entry: u64, phs: Vec<Ph>) -> Img {
            Img {
                machine: EM_X86_64,
                e_type: ET_EXEC,
                entry,
                phs,
            }
        }

        /// Serialises an ELF64 little-endian image.
        fn build(&self) -> Vec<u8> {
            let phoff = 64u64;
            let mut out = vec![0u8; 64 + 56 * self.phs.len()];
            out[..4].copy_from_slice(b"\x7fELF");
            out[4] = 2; // ELFCLASS64
            out[5] = 1; // little endian
            out[6] = 1; // EV_CURRENT
            out[16..18].copy_from_slice(&self.e_type.to_le_bytes());
            out[18..20].copy_from_slice(&self.machine.to_le_bytes());
            out[20..24].copy_from_slice(&1u32.to_le_bytes());
            out[24..32].copy_from_slice(&self.entry.to_le_bytes());
            out[32..40].copy_from_slice(&phoff.to_le_bytes());
            out[52..54].copy_from_slice(&64u16.to_le_bytes());
            out[54..56].copy_from_slice(&56u16.to_le_bytes());
            out[56..58].copy_from_slice(&(self.phs.len() as u16).to_le_bytes());
            out[58..60].copy_from_slice(&64u16.to_le_bytes());
            for (i, ph) in self.phs.iter().enumerate() {
                let off = match ph.offset {
                    Some(o) => o,
                    None => {
                        let mut o = out.len() as u64;
                        while o % P != ph.vaddr % P {
                            o += 1;
                        }
                        o
                    }
                };
                let end = off as usize + ph.data.len();
                if out.len() < end {
                    out.resize(end, 0);
                }
                out[off as usize..end].copy_from_slice(&ph.data);
                let h = 64 + 56 * i;
                out[h..h + 4].copy_from_slice(&ph.p_type.to_le_bytes());
                out[h + 4..h + 8].copy_from_slice(&ph.flags.to_le_bytes());
                out[h + 8..h + 16].copy_from_slice(&off.to_le_bytes());
                out[h + 16..h + 24].copy_from_slice(&ph.vaddr.to_le_bytes());
                out[h + 24..h + 32].copy_from_slice(&ph.vaddr.to_le_bytes());
                out[h + 32..h + 40].copy_from_slice(&(ph.data.len() as u64).to_le_bytes());
                out[h + 40..h + 48].copy_from_slice(&ph.memsz.to_le_bytes());
                out[h + 48..h + 56].copy_from_slice(&P.to_le_bytes());
            }
            out
        }
    }

    const CODE: &[u8] = &[0x48, 0x31, 0xc0, 0x0f, 0x05, 0xeb, 0xfe]; // xor rax,rax; syscall; jmp $

    fn read(s: &AddressSpace, mem: &FakeMem, va: u64, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        crate::usercopy::copy_from_user(s, mem, va, &mut v).unwrap();
        v
    }

    /// Loads `image` into a fresh space; on error destroys it and checks for leaks.
    fn try_load(image: &[u8]) -> Result<(FakeMem, AddressSpace, u64), LoadError> {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        match load_elf(&mut s, &mut mem, image) {
            Ok(entry) => Ok((mem, s, entry)),
            Err(e) => {
                s.destroy(&mut mem);
                assert_eq!(mem.live(), 0, "leak after failed load");
                Err(e)
            }
        }
    }

    fn finish(mut mem: FakeMem, s: AddressSpace) {
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0, "leak after destroy");
    }

    #[test]
    fn loads_text_data_bss() {
        let text_va = 0x40_1000;
        let data_va = 0x40_3000;
        let data: Vec<u8> = (0..100u8).collect();
        let img = Img::new(
            text_va,
            vec![
                load(PF_X | 4, text_va, CODE, CODE.len() as u64),
                // data + 3 pages of bss.
                load(PF_W | 4, data_va, &data, 100 + 3 * P),
            ],
        )
        .build();
        let (mut mem, mut s, entry) = try_load(&img).unwrap();
        assert_eq!(entry, text_va);
        assert_eq!(read(&s, &mem, text_va, CODE.len()), CODE);
        // The rest of the text page is zero (the frame was zeroed, not left as junk).
        assert!(read(&s, &mem, text_va + CODE.len() as u64, 100)
            .iter()
            .all(|&b| b == 0));
        let (_, tf) = s.translate(&mem, text_va).unwrap();
        assert_eq!(tf, MapFlags::user_owned(false, true));
        assert_eq!(read(&s, &mem, data_va, 100), data);
        for page in 0..4 {
            let (_, f) = s.translate(&mem, data_va + page * P).unwrap();
            assert_eq!(f, MapFlags::user_owned(true, false));
        }
        // bss is zero.
        assert!(read(&s, &mem, data_va + 100, 3 * P as usize)
            .iter()
            .all(|&b| b == 0));
        // Nothing beyond.
        assert_eq!(s.translate(&mem, data_va + 4 * P), None);
        assert_eq!(s.translate(&mem, text_va + P), None);
        assert_eq!(s.translate(&mem, text_va - P), None);
        // Writing through to a writable page works; to text does not.
        crate::usercopy::copy_to_user(&s, &mut mem, data_va, b"hi").unwrap();
        assert!(crate::usercopy::copy_to_user(&s, &mut mem, text_va, b"hi").is_err());
        let sp = map_user_stack(&mut s, &mut mem).unwrap();
        assert_eq!(sp, USER_STACK_TOP);
        finish(mem, s);
    }

    #[test]
    fn unaligned_segment_spanning_pages_and_noncongruent_offset() {
        let va = 0x40_0ff0;
        let code: Vec<u8> = (0..64u8).map(|b| b ^ 0x5a).collect();
        let mut ph = load(PF_X | 4, va, &code, 64);
        // File offset not congruent to the address modulo the page size.
        ph.offset = Some(0x1234);
        let img = Img::new(va + 20, vec![ph]).build();
        let (mem, s, entry) = try_load(&img).unwrap();
        assert_eq!(entry, va + 20);
        assert_eq!(read(&s, &mem, va, 64), code);
        assert!(s.translate(&mem, 0x40_0000).is_some());
        assert!(s.translate(&mem, 0x40_1000).is_some());
        finish(mem, s);
    }

    #[test]
    fn segments_sharing_a_page_are_merged() {
        // lld-style: text ends mid-page and data starts in the same page.
        let text_va = 0x20_1000;
        let text = vec![0x90u8; 0x1100];
        let data_va = text_va + 0x1100;
        let data = vec![0xabu8; 0x80];
        let img = Img::new(
            text_va,
            vec![
                load(PF_X | 4, text_va, &text, text.len() as u64),
                load(PF_W | 4, data_va, &data, 0x200),
            ],
        )
        .build();
        let (mem, s, _) = try_load(&img).unwrap();
        assert_eq!(read(&s, &mem, text_va, text.len()), text);
        assert_eq!(read(&s, &mem, data_va, data.len()), data);
        assert!(read(&s, &mem, data_va + 0x80, 0x180)
            .iter()
            .all(|&b| b == 0));
        // The shared page has both permissions; the others keep their own.
        let (_, shared) = s.translate(&mem, text_va + P).unwrap();
        assert_eq!(shared, MapFlags::user_owned(true, true));
        let (_, first) = s.translate(&mem, text_va).unwrap();
        assert_eq!(first, MapFlags::user_owned(false, true));
        finish(mem, s);
    }

    #[test]
    fn rejects_overlapping_segments() {
        let img = Img::new(
            0x40_0000,
            vec![
                load(PF_X | 4, 0x40_0000, CODE, 0x100),
                load(PF_W | 4, 0x40_00ff, b"x", 1),
            ],
        )
        .build();
        assert_eq!(try_load(&img).err(), Some(LoadError::Overlap));
    }

    #[test]
    fn rejects_collision_with_existing_mapping() {
        let img = Img::new(0x40_0000, vec![load(PF_X | 4, 0x40_0000, CODE, 7)]).build();
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        let f = mem.alloc_frame().unwrap();
        mem.zero_frame(f);
        s.map(&mut mem, 0x40_0000, f, MapFlags::user_owned(true, false))
            .unwrap();
        assert_eq!(load_elf(&mut s, &mut mem, &img), Err(LoadError::Overlap));
        finish(mem, s);
    }

    #[test]
    fn entry_validation() {
        // Entry in a non-executable segment.
        let img = Img::new(
            0x50_0000,
            vec![
                load(PF_X | 4, 0x40_0000, CODE, 7),
                load(PF_W | 4, 0x50_0000, b"d", 1),
            ],
        )
        .build();
        assert_eq!(try_load(&img).err(), Some(LoadError::BadEntry));
        // Entry just past the end of the text.
        let img = Img::new(0x40_0007, vec![load(PF_X | 4, 0x40_0000, CODE, 7)]).build();
        assert_eq!(try_load(&img).err(), Some(LoadError::BadEntry));
        // Entry zero.
        let img = Img::new(0, vec![load(PF_X | 4, 0x40_0000, CODE, 7)]).build();
        assert_eq!(try_load(&img).err(), Some(LoadError::BadEntry));
        // Last byte is fine.
        let img = Img::new(0x40_0006, vec![load(PF_X | 4, 0x40_0000, CODE, 7)]).build();
        let (mem, s, e) = try_load(&img).unwrap();
        assert_eq!(e, 0x40_0006);
        finish(mem, s);
    }

    fn good() -> Img {
        Img::new(0x40_0000, vec![load(PF_X | 4, 0x40_0000, CODE, 7)])
    }

    #[test]
    fn rejects_wrong_machine_and_type() {
        let mut img = good();
        img.machine = 3; // EM_386
        assert_eq!(try_load(&img.build()).err(), Some(LoadError::WrongMachine));
        let mut img = good();
        img.e_type = 3; // ET_DYN
        assert_eq!(try_load(&img.build()).err(), Some(LoadError::NotExecutable));
        let mut img = good();
        img.e_type = 1; // ET_REL
        assert_eq!(try_load(&img.build()).err(), Some(LoadError::NotExecutable));
        // An interpreter means dynamic linking.
        let mut img = good();
        img.phs.push(Ph {
            p_type: PT_INTERP,
            flags: 4,
            vaddr: 0,
            data: b"/lib/ld.so\0".to_vec(),
            memsz: 11,
            offset: None,
        });
        assert_eq!(try_load(&img.build()).err(), Some(LoadError::NotExecutable));
    }

    #[test]
    fn rejects_32_bit_and_big_endian() {
        // A minimal ELF32 header: 52 bytes, no program headers.
        let mut e32 = vec![0u8; 52];
        e32[..4].copy_from_slice(b"\x7fELF");
        e32[4] = 1;
        e32[5] = 1;
        e32[6] = 1;
        e32[16..18].copy_from_slice(&ET_EXEC.to_le_bytes());
        e32[18..20].copy_from_slice(&3u16.to_le_bytes());
        e32[20..24].copy_from_slice(&1u32.to_le_bytes());
        e32[40..42].copy_from_slice(&52u16.to_le_bytes());
        e32[42..44].copy_from_slice(&32u16.to_le_bytes());
        e32[46..48].copy_from_slice(&40u16.to_le_bytes());
        assert_eq!(try_load(&e32).err(), Some(LoadError::WrongClass));
        // Big endian: flip the data byte (the fields then read differently, but the
        // endianness check comes first after the class).
        let mut be = good().build();
        be[5] = 2;
        be[52..54].copy_from_slice(&64u16.to_be_bytes());
        be[54..56].copy_from_slice(&56u16.to_be_bytes());
        be[56..58].copy_from_slice(&1u16.to_be_bytes());
        be[32..40].copy_from_slice(&64u64.to_be_bytes());
        assert_eq!(try_load(&be).err(), Some(LoadError::WrongEndian));
    }

    #[test]
    fn rejects_segment_in_kernel_half_or_outside_user() {
        for va in [
            0xffff_8000_0000_0000u64,
            0,
            USER_END - 4,
            0x0000_8000_0000_0000,
        ] {
            let img = Img::new(va, vec![load(PF_X | 4, va, CODE, 7)]).build();
            assert_eq!(
                try_load(&img).err(),
                Some(LoadError::OutsideUser),
                "{va:#x}"
            );
        }
        // memsz wrapping around.
        let img = Img::new(0x40_0000, vec![load(PF_X | 4, 0x40_0000, CODE, u64::MAX)]).build();
        assert_eq!(try_load(&img).err(), Some(LoadError::OutsideUser));
    }

    #[test]
    fn rejects_bad_segments() {
        // filesz > memsz.
        let img = Img::new(0x40_0000, vec![load(PF_X | 4, 0x40_0000, CODE, 3)]).build();
        assert_eq!(try_load(&img).err(), Some(LoadError::BadSegment));
        // Offset past the end of the image.
        let mut img = good().build();
        let h = 64;
        img[h + 8..h + 16].copy_from_slice(&0x10_0000u64.to_le_bytes());
        assert_eq!(try_load(&img).err(), Some(LoadError::BadSegment));
        // Offset + filesz overflowing.
        img[h + 8..h + 16].copy_from_slice(&(u64::MAX - 2).to_le_bytes());
        assert_eq!(try_load(&img).err(), Some(LoadError::BadSegment));
        // No loadable segment at all.
        let img = Img::new(0x40_0000, vec![]).build();
        assert_eq!(try_load(&img).err(), Some(LoadError::BadSegment));
    }

    #[test]
    fn rejects_truncated_and_garbage_images() {
        let img = good().build();
        assert_eq!(try_load(&img[..40]).err(), Some(LoadError::BadElf));
        // Program header table cut off.
        assert_eq!(try_load(&img[..64 + 30]).err(), Some(LoadError::BadElf));
        // Data cut off.
        assert_eq!(
            try_load(&img[..img.len() - 1]).err(),
            Some(LoadError::BadSegment)
        );
        assert_eq!(try_load(b"").err(), Some(LoadError::BadElf));
        assert_eq!(try_load(&[0u8; 4096]).err(), Some(LoadError::BadElf));
        // Every prefix fails cleanly and leaks nothing (checked inside try_load).
        for n in 0..img.len() {
            assert!(try_load(&img[..n]).is_err());
        }
        // Random corruption of header bytes never panics.
        for i in 0..img.len().min(64 + 56) {
            for v in [0u8, 0xff, 0x80, 1] {
                let mut bad = img.clone();
                bad[i] = v;
                if let Ok((mem, s, _)) = try_load(&bad) {
                    finish(mem, s);
                }
            }
        }
    }

    #[test]
    fn out_of_memory_midway_is_clean_after_destroy() {
        let img = Img::new(
            0x40_0000,
            vec![load(PF_X | 4, 0x40_0000, &vec![1u8; 5 * P as usize], 5 * P)],
        )
        .build();
        for budget in 0..10 {
            let mut mem = FakeMem::new();
            let mut s = AddressSpace::new(&mut mem, None).unwrap();
            mem.budget = Some(budget);
            let r = load_elf(&mut s, &mut mem, &img);
            // 3 tables + 5 pages are needed.
            if budget < 8 {
                assert_eq!(r, Err(LoadError::NoMemory));
            } else {
                assert_eq!(r, Ok(0x40_0000));
            }
            mem.budget = None;
            finish(mem, s);
        }
    }

    #[test]
    fn user_stack() {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        let sp = map_user_stack(&mut s, &mut mem).unwrap();
        assert_eq!(sp, USER_STACK_TOP);
        assert_eq!(sp % 16, 0);
        let bottom = USER_STACK_TOP - USER_STACK_SIZE;
        let mut page = bottom;
        while page < USER_STACK_TOP {
            let (_, f) = s.translate(&mem, page).unwrap();
            assert_eq!(f, MapFlags::user_owned(true, false));
            page += P;
        }
        assert!(read(&s, &mem, bottom, USER_STACK_SIZE as usize)
            .iter()
            .all(|&b| b == 0));
        assert_eq!(s.translate(&mem, bottom - P), None, "guard page");
        assert_eq!(s.translate(&mem, USER_STACK_TOP), None);
        // A second stack collides.
        assert_eq!(map_user_stack(&mut s, &mut mem), Err(LoadError::Overlap));
        finish(mem, s);
        // A mapping in the guard page is refused too.
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        s.map(
            &mut mem,
            bottom - P,
            PhysAddr(0x1000),
            MapFlags::user_shared(true, false),
        )
        .unwrap();
        assert_eq!(map_user_stack(&mut s, &mut mem), Err(LoadError::Overlap));
        finish(mem, s);
    }

    #[test]
    fn errors_convert_and_describe() {
        assert_eq!(
            baton_abi::Error::from(LoadError::NoMemory),
            baton_abi::Error::NoMemory
        );
        assert_eq!(
            baton_abi::Error::from(LoadError::WrongMachine),
            baton_abi::Error::BadFormat
        );
        assert_eq!(LoadError::from(MapError::AlreadyMapped), LoadError::Overlap);
        assert!(!LoadError::BadEntry.describe().is_empty());
    }
}
