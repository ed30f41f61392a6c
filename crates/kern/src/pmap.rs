//! The x86-64 four-level page-table format, manipulated as data.
//!
//! An [`AddressSpace`] is the physical address of a PML4 frame. This module reads and writes
//! page-table entries only through the [`PhysMem`] trait, which the kernel implements over
//! its direct map of physical memory and the tests implement over a `HashMap`. Everything
//! that talks to the processor — loading CR3, `invlpg`, TLB shootdowns, enabling `EFER.NXE`
//! — stays in the kernel's arch module: after [`AddressSpace::unmap`] or
//! [`AddressSpace::protect`] on a live address space, the caller must flush the TLB entry.
//!
//! Levels are numbered as the hardware walks them: 3 = PML4, 2 = PDPT, 1 = PD, 0 = PT.
//! PML4 entries `0..256` are the user (lower) half and belong to the address space; entries
//! `256..512` are the kernel (upper) half, copied from the kernel's root when the space is
//! created, so every space shares the kernel's lower-level tables.
//!
//! # Invariants
//! - Every page-table frame reachable from a PML4 entry in `0..256` was allocated by this
//!   module for this address space and is freed exactly once, by [`AddressSpace::destroy`].
//!   Frames of the kernel half are never freed here.
//! - Page tables created by this module are zeroed before they are linked in, and their
//!   entries are `PRESENT | WRITABLE`, plus `USER` once any user mapping lies below them:
//!   permissions are decided by the leaf entry alone.
//! - A leaf entry with the software bit [`OWNED`] names a frame that belongs to the space:
//!   it is freed when it is unmapped or when the space is destroyed. Other leaves (device
//!   memory, shared frames) are never freed by this module.
//! - This module only creates 4 KiB leaves. It can translate 2 MiB and 1 GiB leaves (the
//!   kernel half uses them) but never splits, unmaps or frees them.
//! - User mappings lie in `[USER_MIN, USER_END)`; no address is used unless it is canonical.

use crate::frame::{PhysAddr, PAGE_SIZE};
use baton_abi::layout::{USER_END, USER_MIN};
use core::fmt;

/// Access to physical memory, supplied by the kernel (through its direct map) or by a test.
///
/// Addresses passed by this crate are always inside frames obtained from
/// [`PhysMem::alloc_frame`] or mapped by the caller; `write_bytes` and `read_bytes` are never
/// called by this crate with a range that crosses a frame (4 KiB) boundary, so an
/// implementation may rely on that.
pub trait PhysMem {
    /// Reads the aligned 64-bit word at `pa`.
    fn read_u64(&self, pa: PhysAddr) -> u64;
    /// Writes the aligned 64-bit word at `pa`.
    fn write_u64(&mut self, pa: PhysAddr, v: u64);
    /// Fills the 4 KiB frame starting at `frame` with zeros.
    fn zero_frame(&mut self, frame: PhysAddr);
    /// Copies `bytes` to physical memory starting at `pa` (never across a frame boundary).
    fn write_bytes(&mut self, pa: PhysAddr, bytes: &[u8]);
    /// Copies physical memory starting at `pa` into `out` (never across a frame boundary).
    fn read_bytes(&self, pa: PhysAddr, out: &mut [u8]);
    /// Appends the `len` bytes of physical memory starting at `pa` to `out` (never across a
    /// frame boundary). The default zeroes the new bytes and then reads into them; the
    /// kernel copies into the vector's spare capacity, each byte written once (a message's
    /// data is read this way: zeroing a 32 KiB buffer first cost about 8,000 instructions).
    fn append_bytes(&self, pa: PhysAddr, len: usize, out: &mut alloc::vec::Vec<u8>) {
        let start = out.len();
        out.resize(start + len, 0);
        if let Some(part) = out.get_mut(start..) {
            self.read_bytes(pa, part);
        }
    }
    /// Copies `len` bytes from physical `src` to physical `dst`, neither range crossing a
    /// frame boundary. The default goes through a small buffer on the stack; the kernel
    /// copies directly (one copy of each byte).
    fn copy_bytes(&mut self, dst: PhysAddr, src: PhysAddr, len: usize) {
        let mut bounce = [0u8; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(bounce.len());
            let at = done as u64;
            if let Some(part) = bounce.get_mut(..n) {
                self.read_bytes(PhysAddr(src.0 + at), part);
                self.write_bytes(PhysAddr(dst.0 + at), part);
            }
            done += n;
        }
    }
    /// Allocates a frame; its contents are unspecified (callers zero it). `None` when
    /// memory is exhausted.
    fn alloc_frame(&mut self) -> Option<PhysAddr>;
    /// Allocates a frame of zeros (a new page table). The default zeroes what
    /// [`PhysMem::alloc_frame`] gives; an allocator whose frames are already zero says so
    /// by overriding it, and the frame is not zeroed twice.
    fn alloc_zeroed(&mut self) -> Option<PhysAddr> {
        let f = self.alloc_frame()?;
        self.zero_frame(f);
        Some(f)
    }
    /// Returns a frame obtained from [`PhysMem::alloc_frame`].
    fn free_frame(&mut self, frame: PhysAddr);
}

/// Entry bit: the entry is valid.
pub const PRESENT: u64 = 1 << 0;
/// Entry bit: writes are allowed.
pub const WRITABLE: u64 = 1 << 1;
/// Entry bit: user-mode (CPL 3) accesses are allowed.
pub const USER: u64 = 1 << 2;
/// Entry bit: write-through caching.
pub const WRITE_THROUGH: u64 = 1 << 3;
/// Entry bit: caching disabled.
pub const NO_CACHE: u64 = 1 << 4;
/// Entry bit: set by the processor when the entry is used.
pub const ACCESSED: u64 = 1 << 5;
/// Entry bit: set by the processor when the page is written (leaves only).
pub const DIRTY: u64 = 1 << 6;
/// Entry bit: in a PDPT or PD entry, the entry maps a 1 GiB or 2 MiB page.
pub const HUGE: u64 = 1 << 7;
/// Entry bit: the translation survives CR3 loads (kernel pages).
pub const GLOBAL: u64 = 1 << 8;
/// Software entry bit (ignored by the processor): the leaf frame belongs to this address
/// space and is freed when unmapped or when the space is destroyed.
pub const OWNED: u64 = 1 << 9;
/// Entry bit: instruction fetches are not allowed (requires `EFER.NXE`).
pub const NO_EXECUTE: u64 = 1 << 63;
/// The physical-address bits of an entry pointing to a table or a 4 KiB page.
pub const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// Software bits of an entry that points to a table (bits 52..=59, which the processor
/// ignores in such entries): bit `52 + k` set means the table below may have present
/// entries among its indices `64k..64k + 64` ([`CHUNK`] entries a bit). Set when an entry
/// there is made present, never cleared while the table lives, so a clear bit is a
/// promise: [`AddressSpace::destroy`] reads only the chunks whose bit is set, instead of
/// all 512 entries of every table (most of a small task's tables hold one or two
/// entries).
pub const USED_CHUNKS: u64 = 0xff << USED_SHIFT;
/// Where [`USED_CHUNKS`] starts.
const USED_SHIFT: u64 = 52;
/// Entries one bit of [`USED_CHUNKS`] stands for.
pub const CHUNK: u64 = 64;

/// The [`USED_CHUNKS`] bit of entry `index` of a table.
const fn chunk_bit(index: u64) -> u64 {
    1 << (USED_SHIFT + index / CHUNK)
}

/// Number of entries in one page table.
pub const ENTRIES: u64 = 512;
/// First PML4 index of the kernel (upper) half.
pub const KERNEL_PML4_START: u64 = 256;

const SIZE_2M: u64 = 1 << 21;
const SIZE_1G: u64 = 1 << 30;
const ADDR_MASK_2M: u64 = ADDR_MASK & !(SIZE_2M - 1);
const ADDR_MASK_1G: u64 = ADDR_MASK & !(SIZE_1G - 1);

/// Whether `va` is canonical: bits 63..47 all equal (48-bit virtual addresses).
pub const fn canonical(va: u64) -> bool {
    let top = va >> 47;
    top == 0 || top == (1 << 17) - 1
}

/// Whether the whole page at `va` is a legal place for a user mapping.
fn in_user_range(va: u64) -> bool {
    (USER_MIN..USER_END).contains(&va)
}

/// Permissions of a 4 KiB mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapFlags {
    /// Writes allowed.
    pub writable: bool,
    /// Instruction fetches allowed (clear means the entry gets [`NO_EXECUTE`]).
    pub executable: bool,
    /// Accessible from user mode.
    pub user: bool,
    /// The frame belongs to the address space (see [`OWNED`]).
    pub owned: bool,
}

impl MapFlags {
    /// Flags from their four fields.
    pub const fn new(writable: bool, executable: bool, user: bool, owned: bool) -> MapFlags {
        MapFlags {
            writable,
            executable,
            user,
            owned,
        }
    }

    /// A user mapping of a frame the space owns.
    pub const fn user_owned(writable: bool, executable: bool) -> MapFlags {
        MapFlags::new(writable, executable, true, true)
    }

    /// A user mapping of a frame the space does not own (shared or device memory).
    pub const fn user_shared(writable: bool, executable: bool) -> MapFlags {
        MapFlags::new(writable, executable, true, false)
    }

    /// A kernel-only mapping of a frame the space does not own.
    pub const fn kernel(writable: bool, executable: bool) -> MapFlags {
        MapFlags::new(writable, executable, false, false)
    }

    /// The same flags with `owned` set.
    pub const fn with_owned(self) -> MapFlags {
        MapFlags {
            owned: true,
            ..self
        }
    }

    /// The permissions allowed by either `self` or `other`, `owned` if either is.
    pub const fn union(self, other: MapFlags) -> MapFlags {
        MapFlags {
            writable: self.writable || other.writable,
            executable: self.executable || other.executable,
            user: self.user || other.user,
            owned: self.owned || other.owned,
        }
    }

    /// The bits of a present leaf entry with these flags (without the address).
    pub const fn entry_bits(self) -> u64 {
        let mut bits = PRESENT;
        if self.writable {
            bits |= WRITABLE;
        }
        if self.user {
            bits |= USER;
        }
        if self.owned {
            bits |= OWNED;
        }
        if !self.executable {
            bits |= NO_EXECUTE;
        }
        bits
    }

    /// The flags of a leaf entry (presence is not checked).
    pub const fn from_entry(entry: u64) -> MapFlags {
        MapFlags {
            writable: entry & WRITABLE != 0,
            executable: entry & NO_EXECUTE == 0,
            user: entry & USER != 0,
            owned: entry & OWNED != 0,
        }
    }
}

/// Why a mapping operation failed. Nothing is mapped when one is returned, though empty
/// intermediate tables may have been added (they are freed by [`AddressSpace::destroy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// The virtual or physical address is not 4 KiB-aligned, or the physical address does
    /// not fit the 52-bit entry format.
    Misaligned,
    /// Something is already mapped there (a 4 KiB page, or a huge page covering it).
    AlreadyMapped,
    /// Nothing is mapped there.
    NotMapped,
    /// No frame for a page table.
    NoMemory,
    /// The virtual address is not canonical.
    NonCanonical,
    /// A user mapping outside `[USER_MIN, USER_END)`.
    OutsideUser,
}

impl MapError {
    /// A short lower-case description for reports.
    pub const fn describe(self) -> &'static str {
        match self {
            MapError::Misaligned => "address not page-aligned",
            MapError::AlreadyMapped => "address already mapped",
            MapError::NotMapped => "address not mapped",
            MapError::NoMemory => "out of memory for page tables",
            MapError::NonCanonical => "non-canonical address",
            MapError::OutsideUser => "user mapping outside the user range",
        }
    }
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

impl From<MapError> for baton_abi::Error {
    fn from(e: MapError) -> baton_abi::Error {
        match e {
            MapError::NoMemory => baton_abi::Error::NoMemory,
            MapError::NonCanonical | MapError::OutsideUser | MapError::NotMapped => {
                baton_abi::Error::BadAddress
            }
            MapError::Misaligned | MapError::AlreadyMapped => baton_abi::Error::InvalidArgument,
        }
    }
}

/// Index of `va` in the table at `level` (3 = PML4 .. 0 = PT).
const fn table_index(va: u64, level: u32) -> u64 {
    (va >> (12 + 9 * level)) & (ENTRIES - 1)
}

/// Physical address of entry `index` of the table at `table`.
const fn entry_addr(table: PhysAddr, index: u64) -> PhysAddr {
    table.add(index * 8)
}

/// A page-table tree rooted at a PML4 frame. Not `Clone`: it stands for the ownership of
/// its user-half tables, which [`AddressSpace::destroy`] consumes. Dropping one without
/// destroying it leaks its frames.
#[derive(Debug, PartialEq, Eq)]
pub struct AddressSpace {
    root: PhysAddr,
    /// The chunks of the PML4 that may hold present entries ([`USED_CHUNKS`] for the
    /// root, which has no entry above it: bit `k` for indices `64k..64k + 64`); all set
    /// for a space [`AddressSpace::from_root`] wraps, whose tables this module did not
    /// build.
    root_chunks: u8,
}

impl AddressSpace {
    /// Allocates a zeroed PML4 and, if `kernel_root` is given, copies its kernel-half
    /// entries (`256..512`) so the new space shares the kernel's mappings. Kernel-half PML4
    /// entries the kernel adds later are not seen by spaces created before, so the kernel
    /// should populate all of them at boot.
    pub fn new(
        mem: &mut impl PhysMem,
        kernel_root: Option<PhysAddr>,
    ) -> Result<AddressSpace, MapError> {
        let root = mem.alloc_zeroed().ok_or(MapError::NoMemory)?;
        if let Some(kroot) = kernel_root {
            // The kernel half's 256 entries in one copy.
            let half = entry_addr(PhysAddr(0), KERNEL_PML4_START).0;
            mem.copy_bytes(root.add(half), kroot.add(half), half as usize);
        }
        Ok(AddressSpace {
            root,
            root_chunks: 0,
        })
    }

    /// Wraps an existing PML4 (for example the kernel's boot tables) to translate or map
    /// in it. [`AddressSpace::destroy`] on such a space frees its user half, so only call it
    /// if this module built that half.
    pub const fn from_root(root: PhysAddr) -> AddressSpace {
        AddressSpace {
            root,
            root_chunks: u8::MAX,
        }
    }

    /// The physical address of the PML4, for CR3.
    pub const fn root(&self) -> PhysAddr {
        self.root
    }

    /// Maps the 4 KiB page at `va` to the frame at `pa`, creating intermediate tables as
    /// needed (`PRESENT | WRITABLE`, plus `USER` when the mapping is a user one).
    ///
    /// User mappings must lie in `[USER_MIN, USER_END)`. Kernel mappings may go anywhere
    /// canonical; in the kernel half they change the tables shared with every space (and
    /// tables created there are not freed by [`AddressSpace::destroy`]).
    pub fn map(
        &mut self,
        mem: &mut impl PhysMem,
        va: u64,
        pa: PhysAddr,
        flags: MapFlags,
    ) -> Result<(), MapError> {
        if !canonical(va) {
            return Err(MapError::NonCanonical);
        }
        if !va.is_multiple_of(PAGE_SIZE) || pa.0 & !ADDR_MASK != 0 {
            return Err(MapError::Misaligned);
        }
        if flags.user && !in_user_range(va) {
            return Err(MapError::OutsideUser);
        }
        let ea = self.leaf_slot(mem, va, flags)?;
        if mem.read_u64(ea) & PRESENT != 0 {
            return Err(MapError::AlreadyMapped);
        }
        mem.write_u64(ea, pa.0 | flags.entry_bits());
        Ok(())
    }

    /// The address of `va`'s 4 KiB leaf entry (present or not), the tables on the way made
    /// as needed and the entries above it given `USER` (for a user mapping) and the
    /// used-chunk bit of the entry below. `va` is canonical and page aligned.
    fn leaf_slot(
        &mut self,
        mem: &mut impl PhysMem,
        va: u64,
        flags: MapFlags,
    ) -> Result<PhysAddr, MapError> {
        // A page that is taken is refused before anything is allocated: tables are made
        // only below an absent entry, where nothing can be mapped yet. (On the way down to
        // a taken page, entries above it may gain `USER` or a used-chunk bit, neither of
        // which grants an access the leaf does not.)
        let mut table = self.root;
        for level in [3, 2, 1] {
            let index = table_index(va, level);
            let ea = entry_addr(table, index);
            let e = mem.read_u64(ea);
            // The entry below, in the table this entry leads to, will be present.
            let below = chunk_bit(table_index(va, level - 1));
            if e & PRESENT != 0 {
                if e & HUGE != 0 {
                    return Err(MapError::AlreadyMapped);
                }
                let user = if flags.user { USER } else { 0 };
                if e & (user | below) != user | below {
                    mem.write_u64(ea, e | user | below);
                }
                table = PhysAddr(e & ADDR_MASK);
            } else {
                let t = mem.alloc_zeroed().ok_or(MapError::NoMemory)?;
                let user = if flags.user { USER } else { 0 };
                mem.write_u64(ea, t.0 | PRESENT | WRITABLE | user | below);
                if level == 3 {
                    self.root_chunks |= (chunk_bit(index) >> USED_SHIFT) as u8;
                }
                table = t;
            }
        }
        Ok(entry_addr(table, table_index(va, 0)))
    }

    /// Physical address of the present 4 KiB leaf entry for `va`, if the walk reaches one
    /// (no huge page on the way).
    fn leaf_entry(&self, mem: &impl PhysMem, va: u64) -> Option<PhysAddr> {
        if !canonical(va) {
            return None;
        }
        let mut table = self.root;
        for level in [3, 2, 1] {
            let e = mem.read_u64(entry_addr(table, table_index(va, level)));
            if e & PRESENT == 0 || e & HUGE != 0 {
                return None;
            }
            table = PhysAddr(e & ADDR_MASK);
        }
        let ea = entry_addr(table, table_index(va, 0));
        if mem.read_u64(ea) & PRESENT == 0 {
            return None;
        }
        Some(ea)
    }

    /// Removes the 4 KiB mapping of the page at `va` and returns the frame and flags it
    /// had. If the frame was [`OWNED`], it is freed here (with [`PhysMem::free_frame`]), so
    /// the caller must flush the TLB entry before the frame can be reused (on one processor
    /// with interrupts off: right after this call). Returns `None`, changing nothing, if
    /// `va` is unaligned, non-canonical, unmapped or inside a huge page. Page tables left
    /// empty stay until [`AddressSpace::destroy`].
    pub fn unmap(&mut self, mem: &mut impl PhysMem, va: u64) -> Option<(PhysAddr, MapFlags)> {
        if !va.is_multiple_of(PAGE_SIZE) {
            return None;
        }
        let ea = self.leaf_entry(mem, va)?;
        let e = mem.read_u64(ea);
        mem.write_u64(ea, 0);
        let frame = PhysAddr(e & ADDR_MASK);
        let flags = MapFlags::from_entry(e);
        if flags.owned {
            mem.free_frame(frame);
        }
        Some((frame, flags))
    }

    /// Changes the flags of the existing 4 KiB mapping at `va`, keeping its frame. The
    /// caller flushes the TLB entry. Errors: `NotMapped` (also for huge pages),
    /// `Misaligned`, `NonCanonical`, `OutsideUser` (user flags outside the user range).
    pub fn protect(
        &mut self,
        mem: &mut impl PhysMem,
        va: u64,
        flags: MapFlags,
    ) -> Result<(), MapError> {
        if !canonical(va) {
            return Err(MapError::NonCanonical);
        }
        if !va.is_multiple_of(PAGE_SIZE) {
            return Err(MapError::Misaligned);
        }
        if flags.user && !in_user_range(va) {
            return Err(MapError::OutsideUser);
        }
        let ea = self.leaf_entry(mem, va).ok_or(MapError::NotMapped)?;
        if flags.user {
            // The intermediate entries must let user accesses through.
            let mut table = self.root;
            for level in [3, 2, 1] {
                let ia = entry_addr(table, table_index(va, level));
                let e = mem.read_u64(ia);
                if e & USER == 0 {
                    mem.write_u64(ia, e | USER);
                }
                table = PhysAddr(e & ADDR_MASK);
            }
        }
        let e = mem.read_u64(ea);
        mem.write_u64(ea, (e & ADDR_MASK) | flags.entry_bits());
        Ok(())
    }

    /// Translates `va` to the physical address of that byte and the *effective* flags of
    /// the access path: `user` and `writable` only if every level allows them, `executable`
    /// unless some level has [`NO_EXECUTE`], `owned` from the leaf. Handles 4 KiB, 2 MiB and
    /// 1 GiB leaves. `None` if `va` is non-canonical or not mapped.
    pub fn translate(&self, mem: &impl PhysMem, va: u64) -> Option<(PhysAddr, MapFlags)> {
        if !canonical(va) {
            return None;
        }
        let mut table = self.root;
        let mut user = true;
        let mut writable = true;
        let mut executable = true;
        for level in [3u32, 2, 1, 0] {
            let e = mem.read_u64(entry_addr(table, table_index(va, level)));
            if e & PRESENT == 0 {
                return None;
            }
            user &= e & USER != 0;
            writable &= e & WRITABLE != 0;
            executable &= e & NO_EXECUTE == 0;
            let flags = MapFlags {
                writable,
                executable,
                user,
                owned: e & OWNED != 0,
            };
            let huge = e & HUGE != 0;
            match level {
                // Bit 7 of a PML4 entry is reserved: such a tree is not one we built.
                3 if huge => return None,
                2 if huge => {
                    return Some((PhysAddr((e & ADDR_MASK_1G) | (va & (SIZE_1G - 1))), flags))
                }
                1 if huge => {
                    return Some((PhysAddr((e & ADDR_MASK_2M) | (va & (SIZE_2M - 1))), flags))
                }
                0 => return Some((PhysAddr((e & ADDR_MASK) | (va & (PAGE_SIZE - 1))), flags)),
                _ => table = PhysAddr(e & ADDR_MASK),
            }
        }
        None
    }

    /// Enters the 4 KiB translation of `va` to `pa` with `flags`, replacing the one there
    /// (whose frame it returns; an [`OWNED`] frame is never replaced: `AlreadyMapped`), or
    /// creating it and the tables on the way as [`AddressSpace::map`] does. The caller
    /// flushes the TLB entry when one was replaced.
    pub fn set(
        &mut self,
        mem: &mut impl PhysMem,
        va: u64,
        pa: PhysAddr,
        flags: MapFlags,
    ) -> Result<Option<PhysAddr>, MapError> {
        if !canonical(va) {
            return Err(MapError::NonCanonical);
        }
        if !va.is_multiple_of(PAGE_SIZE) || pa.0 & !ADDR_MASK != 0 {
            return Err(MapError::Misaligned);
        }
        if flags.user && !in_user_range(va) {
            return Err(MapError::OutsideUser);
        }
        // One walk, making tables only below absent entries (where nothing is mapped).
        let ea = self.leaf_slot(mem, va, flags)?;
        let old = mem.read_u64(ea);
        if old & OWNED != 0 {
            return Err(MapError::AlreadyMapped);
        }
        mem.write_u64(ea, pa.0 | flags.entry_bits());
        Ok((old & PRESENT != 0).then_some(PhysAddr(old & ADDR_MASK)))
    }

    /// Calls `f(va, entry)` for every present 4 KiB leaf of the user half in `[start,
    /// end)` (page aligned), skipping absent tables whole, so the cost follows the tables
    /// present, not the length; `f` returns the entry to write back (the same to keep it).
    /// Returns how many entries changed. Huge leaves are skipped. The caller flushes the
    /// TLB for those that changed.
    ///
    /// The tables are walked from the root once per page table reached, not once per
    /// page: the leaves of one page table are visited in a row, and within it only the
    /// chunks of [`CHUNK`] entries that its entry's [`USED_CHUNKS`] bits say may be
    /// present are read.
    pub fn update_leaves(
        &mut self,
        mem: &mut impl PhysMem,
        start: u64,
        end: u64,
        mut f: impl FnMut(u64, u64) -> u64,
    ) -> u64 {
        /// Bytes one page table maps.
        const TABLE_SPAN: u64 = PAGE_SIZE * ENTRIES;
        /// Bytes one chunk of a page table's entries maps.
        const CHUNK_SPAN: u64 = PAGE_SIZE * CHUNK;
        let end = end.min(USER_END);
        let mut changed = 0;
        let mut va = start & !(PAGE_SIZE - 1);
        'outer: while va < end {
            let mut table = self.root;
            let mut used = 0;
            for level in [3u32, 2, 1] {
                let e = mem.read_u64(entry_addr(table, table_index(va, level)));
                if e & PRESENT == 0 || e & HUGE != 0 {
                    // Nothing below this entry: on to the next one at this level.
                    let span = PAGE_SIZE << (9 * level);
                    match (va & !(span - 1)).checked_add(span) {
                        Some(next) => va = next,
                        None => break 'outer,
                    }
                    continue 'outer;
                }
                table = PhysAddr(e & ADDR_MASK);
                used = e;
            }
            // The leaves of this page table up to `end` or the table's end.
            let table_end = (va & !(TABLE_SPAN - 1)).saturating_add(TABLE_SPAN);
            let stop = end.min(table_end);
            while va < stop {
                let index = table_index(va, 0);
                if used & chunk_bit(index) == 0 {
                    // No entry of this chunk was ever made present.
                    va = (va & !(CHUNK_SPAN - 1)) + CHUNK_SPAN;
                    continue;
                }
                let ea = entry_addr(table, index);
                let e = mem.read_u64(ea);
                if e & PRESENT != 0 {
                    let new = f(va, e);
                    if new != e {
                        mem.write_u64(ea, new);
                        changed += 1;
                    }
                }
                va += PAGE_SIZE;
            }
        }
        changed
    }

    /// Frees every page-table frame of the user half (PML4 entries `0..256`), every
    /// [`OWNED`] 4 KiB leaf frame in it, and the PML4 itself. The kernel half is never
    /// touched. The space must not be loaded in CR3 on any processor.
    pub fn destroy(self, mem: &mut impl PhysMem) {
        let root_used = u64::from(self.root_chunks) << USED_SHIFT;
        for i in used_indices(root_used).filter(|&i| i < KERNEL_PML4_START) {
            let e = mem.read_u64(entry_addr(self.root, i));
            if e & PRESENT != 0 && e & HUGE == 0 {
                free_table(mem, PhysAddr(e & ADDR_MASK), 2, e & USED_CHUNKS);
            }
        }
        mem.free_frame(self.root);
    }
}

/// The indices of a table that the [`USED_CHUNKS`] bits `used` say may be present.
fn used_indices(used: u64) -> impl Iterator<Item = u64> {
    (0..ENTRIES / CHUNK)
        .filter(move |k| used & (1 << (USED_SHIFT + k)) != 0)
        .flat_map(|k| k * CHUNK..(k + 1) * CHUNK)
}

/// Frees the table at `table` (at `level`, 2 = PDPT .. 0 = PT), its sub-tables and the
/// owned 4 KiB frames below it, reading only the chunks its entry's [`USED_CHUNKS`] bits
/// `used` name. Huge leaves are neither followed nor freed (this module never creates
/// them). Recursion depth is at most 3.
fn free_table(mem: &mut impl PhysMem, table: PhysAddr, level: u32, used: u64) {
    for i in used_indices(used) {
        let e = mem.read_u64(entry_addr(table, i));
        if e & PRESENT == 0 {
            continue;
        }
        if level == 0 {
            if e & OWNED != 0 {
                mem.free_frame(PhysAddr(e & ADDR_MASK));
            }
        } else if e & HUGE == 0 {
            free_table(mem, PhysAddr(e & ADDR_MASK), level - 1, e & USED_CHUNKS);
        }
    }
    mem.free_frame(table);
}

/// A fake physical memory for tests: frames in a `HashMap`, handed out by a
/// [`crate::frame::FrameAllocator`]. Fresh frames are filled with junk so that a missing
/// `zero_frame` shows; touching a frame that is not allocated panics (use after free).
#[cfg(test)]
pub(crate) mod fake {
    use super::PhysMem;
    use crate::frame::{FrameAllocator, PhysAddr, PAGE_SIZE};
    use std::boxed::Box;
    use std::collections::HashMap;

    pub(crate) struct FakeMem {
        pub frames: HashMap<u64, Box<[u8; PAGE_SIZE as usize]>>,
        pub alloc: FrameAllocator,
        /// Frames that may still be allocated before `alloc_frame` fails (None: no limit).
        pub budget: Option<usize>,
    }

    impl FakeMem {
        pub fn new() -> FakeMem {
            FakeMem::with_frames(4096)
        }

        pub fn with_frames(n: u64) -> FakeMem {
            let usable = 0x10_0000..0x10_0000 + n * PAGE_SIZE;
            FakeMem {
                frames: HashMap::new(),
                alloc: FrameAllocator::new(core::slice::from_ref(&usable), &[]),
                budget: None,
            }
        }

        /// Frames currently allocated.
        pub fn live(&self) -> usize {
            assert_eq!(self.frames.len(), self.alloc.allocated_frames());
            self.frames.len()
        }

        fn frame(&self, pa: PhysAddr) -> &[u8; PAGE_SIZE as usize] {
            self.frames
                .get(&pa.frame_start().0)
                .unwrap_or_else(|| panic!("access to unallocated frame {pa}"))
        }

        fn frame_mut(&mut self, pa: PhysAddr) -> &mut [u8; PAGE_SIZE as usize] {
            self.frames
                .get_mut(&pa.frame_start().0)
                .unwrap_or_else(|| panic!("access to unallocated frame {pa}"))
        }
    }

    impl PhysMem for FakeMem {
        fn read_u64(&self, pa: PhysAddr) -> u64 {
            assert_eq!(pa.0 % 8, 0);
            let off = pa.frame_offset() as usize;
            u64::from_le_bytes(self.frame(pa)[off..off + 8].try_into().unwrap())
        }

        fn write_u64(&mut self, pa: PhysAddr, v: u64) {
            assert_eq!(pa.0 % 8, 0);
            let off = pa.frame_offset() as usize;
            self.frame_mut(pa)[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }

        fn zero_frame(&mut self, frame: PhysAddr) {
            assert!(frame.is_page_aligned());
            self.frame_mut(frame).fill(0);
        }

        fn write_bytes(&mut self, pa: PhysAddr, bytes: &[u8]) {
            let off = pa.frame_offset() as usize;
            assert!(off + bytes.len() <= PAGE_SIZE as usize, "crosses a frame");
            self.frame_mut(pa)[off..off + bytes.len()].copy_from_slice(bytes);
        }

        fn read_bytes(&self, pa: PhysAddr, out: &mut [u8]) {
            let off = pa.frame_offset() as usize;
            assert!(off + out.len() <= PAGE_SIZE as usize, "crosses a frame");
            out.copy_from_slice(&self.frame(pa)[off..off + out.len()]);
        }

        fn alloc_frame(&mut self) -> Option<PhysAddr> {
            if let Some(b) = &mut self.budget {
                if *b == 0 {
                    return None;
                }
                *b -= 1;
            }
            let f = self.alloc.alloc()?;
            let old = self
                .frames
                .insert(f.0, Box::new([0xa5; PAGE_SIZE as usize]));
            assert!(old.is_none());
            Some(f)
        }

        fn free_frame(&mut self, frame: PhysAddr) {
            self.alloc.free(frame).expect("bad free_frame");
            assert!(self.frames.remove(&frame.0).is_some());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeMem;
    use super::*;
    use std::vec::Vec;

    const P: u64 = PAGE_SIZE;

    #[test]
    fn canonical_addresses() {
        assert!(canonical(0));
        assert!(canonical(0x0000_7fff_ffff_ffff));
        assert!(!canonical(0x0000_8000_0000_0000));
        assert!(!canonical(0xffff_7fff_ffff_ffff));
        assert!(canonical(0xffff_8000_0000_0000));
        assert!(canonical(u64::MAX));
    }

    #[test]
    fn flags_round_trip() {
        for bits in 0..16u8 {
            let f = MapFlags::new(bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, bits & 8 != 0);
            let e = f.entry_bits();
            assert_eq!(MapFlags::from_entry(e), f);
            assert_ne!(e & PRESENT, 0);
            assert_eq!(e & NO_EXECUTE != 0, !f.executable);
            assert_eq!(e & USER != 0, f.user);
            assert_eq!(e & WRITABLE != 0, f.writable);
            assert_eq!(e & OWNED != 0, f.owned);
        }
        let a = MapFlags::user_owned(false, true);
        let b = MapFlags::user_shared(true, false);
        assert_eq!(a.union(b), MapFlags::user_owned(true, true));
        assert!(MapFlags::kernel(true, false).with_owned().owned);
    }

    #[test]
    fn map_translate_unmap() {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        let va = 0x40_0000;
        let pa = PhysAddr(0x7777_7000);
        let flags = MapFlags::user_shared(true, false);
        s.map(&mut mem, va, pa, flags).unwrap();
        // PML4 + PDPT + PD + PT.
        assert_eq!(mem.live(), 4);
        assert_eq!(s.translate(&mem, va), Some((pa, flags)));
        assert_eq!(
            s.translate(&mem, va + 0x123),
            Some((PhysAddr(pa.0 + 0x123), flags))
        );
        assert_eq!(s.translate(&mem, va + P), None);
        assert_eq!(s.translate(&mem, va - 1), None);

        // The leaf entry has exactly the bits we expect.
        let e = mem.read_u64(s.leaf_entry(&mem, va).unwrap());
        assert_eq!(e, pa.0 | PRESENT | WRITABLE | USER | NO_EXECUTE);

        assert_eq!(s.unmap(&mut mem, va), Some((pa, flags)));
        assert_eq!(s.translate(&mem, va), None);
        assert_eq!(s.unmap(&mut mem, va), None);
        // A shared (not owned) frame was not freed; the tables stay until destroy.
        assert_eq!(mem.live(), 4);
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn unmap_frees_owned_frames() {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        let f = mem.alloc_frame().unwrap();
        s.map(&mut mem, 0x1000, f, MapFlags::user_owned(false, true))
            .unwrap();
        let before = mem.live();
        let (got, flags) = s.unmap(&mut mem, 0x1000).unwrap();
        assert_eq!(got, f);
        assert!(flags.owned && flags.executable && !flags.writable);
        assert_eq!(mem.live(), before - 1);
        assert!(!mem.alloc.is_allocated(f));
        assert_eq!(s.unmap(&mut mem, 0x1001), None);
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn map_errors() {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        let u = MapFlags::user_shared(false, false);
        let k = MapFlags::kernel(true, false);
        let pa = PhysAddr(0x20_0000);
        assert_eq!(s.map(&mut mem, 0x1001, pa, u), Err(MapError::Misaligned));
        assert_eq!(
            s.map(&mut mem, 0x1000, PhysAddr(0x20_0008), u),
            Err(MapError::Misaligned)
        );
        assert_eq!(
            s.map(&mut mem, 0x1000, PhysAddr(1 << 52), u),
            Err(MapError::Misaligned)
        );
        assert_eq!(
            s.map(&mut mem, 0x0000_8000_0000_0000, pa, k),
            Err(MapError::NonCanonical)
        );
        assert_eq!(s.map(&mut mem, 0, pa, u), Err(MapError::OutsideUser));
        assert_eq!(s.map(&mut mem, USER_END, pa, u), Err(MapError::OutsideUser));
        assert_eq!(
            s.map(&mut mem, 0xffff_8000_0000_0000, pa, u),
            Err(MapError::OutsideUser)
        );
        // Nothing was allocated by the refused calls.
        assert_eq!(mem.live(), 1);
        // The first and last user pages are fine.
        s.map(&mut mem, USER_MIN, pa, u).unwrap();
        s.map(&mut mem, USER_END - P, pa, u).unwrap();
        assert_eq!(
            s.map(&mut mem, USER_MIN, pa, u),
            Err(MapError::AlreadyMapped)
        );
        assert_eq!(
            s.map(&mut mem, USER_MIN, pa, k),
            Err(MapError::AlreadyMapped)
        );
        // Kernel mappings may also sit in the lower half (page 0 included).
        s.map(&mut mem, 0, pa, k).unwrap();
        assert_eq!(s.translate(&mem, 0).unwrap().1, k);
        let live = mem.live();
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
        assert!(live > 1);
    }

    #[test]
    fn every_level_restricts_the_effective_flags() {
        // A restriction at any level of the walk (no USER, no WRITABLE, NO_EXECUTE) is in
        // the flags `translate` gives, whatever the leaf says; a leaf's own flags stay.
        let va = 0x40_3000;
        let f = MapFlags::user_shared(true, true);
        for level in [3u32, 2, 1] {
            for (clear, set) in [(USER, 0), (WRITABLE, 0), (0, NO_EXECUTE)] {
                let mut mem = FakeMem::new();
                let mut s = AddressSpace::new(&mut mem, None).unwrap();
                s.map(&mut mem, va, PhysAddr(0x30_0000), f).unwrap();
                assert_eq!(s.translate(&mem, va).unwrap().1, f);
                let mut table = s.root;
                for l in (level + 1..=3).rev() {
                    table =
                        PhysAddr(mem.read_u64(entry_addr(table, table_index(va, l))) & ADDR_MASK);
                }
                let at = entry_addr(table, table_index(va, level));
                let e = mem.read_u64(at);
                mem.write_u64(at, (e & !clear) | set);
                let got = s.translate(&mem, va).unwrap().1;
                let want = MapFlags {
                    user: clear != USER,
                    writable: clear != WRITABLE,
                    executable: set != NO_EXECUTE,
                    ..f
                };
                assert_eq!(got, want, "level {level}, cleared {clear:#x}, set {set:#x}");
                mem.write_u64(at, e);
                s.destroy(&mut mem);
            }
        }
    }

    #[test]
    fn user_bit_added_to_existing_tables() {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        // A kernel mapping creates tables without USER...
        s.map(
            &mut mem,
            0x2000,
            PhysAddr(0x30_0000),
            MapFlags::kernel(true, true),
        )
        .unwrap();
        assert!(!s.translate(&mem, 0x2000).unwrap().1.user);
        // ...then a user mapping beside it must still be user-accessible end to end.
        let f = MapFlags::user_shared(true, true);
        s.map(&mut mem, 0x3000, PhysAddr(0x30_1000), f).unwrap();
        assert_eq!(s.translate(&mem, 0x3000).unwrap().1, f);
        // The kernel page stays kernel-only (its leaf has no USER bit).
        assert!(!s.translate(&mem, 0x2000).unwrap().1.user);
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn protect_changes_flags_keeps_frame() {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        let frame = mem.alloc_frame().unwrap();
        s.map(&mut mem, 0x5000, frame, MapFlags::user_owned(false, false))
            .unwrap();
        let nf = MapFlags::user_owned(true, true);
        s.protect(&mut mem, 0x5000, nf).unwrap();
        assert_eq!(s.translate(&mem, 0x5000), Some((frame, nf)));
        assert_eq!(s.protect(&mut mem, 0x6000, nf), Err(MapError::NotMapped));
        assert_eq!(s.protect(&mut mem, 0x5001, nf), Err(MapError::Misaligned));
        assert_eq!(
            s.protect(&mut mem, 1 << 47, nf),
            Err(MapError::NonCanonical)
        );
        assert_eq!(s.protect(&mut mem, 0, nf), Err(MapError::OutsideUser));
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    /// Builds a fake kernel root whose upper half maps a 2 MiB page, a 1 GiB page and a
    /// 4 KiB page; returns (root, frames it used).
    fn fake_kernel_root(mem: &mut FakeMem) -> PhysAddr {
        let root = mem.alloc_frame().unwrap();
        mem.zero_frame(root);
        let pdpt = mem.alloc_frame().unwrap();
        mem.zero_frame(pdpt);
        let pd = mem.alloc_frame().unwrap();
        mem.zero_frame(pd);
        let pt = mem.alloc_frame().unwrap();
        mem.zero_frame(pt);
        // PML4[511] -> pdpt. 0xffff_ff80_0000_0000 is the base of that slot.
        mem.write_u64(entry_addr(root, 511), pdpt.0 | PRESENT | WRITABLE);
        // pdpt[0]: 1 GiB page at phys 0x4000_0000, global, NX.
        mem.write_u64(
            entry_addr(pdpt, 0),
            0x4000_0000 | PRESENT | WRITABLE | HUGE | GLOBAL | NO_EXECUTE,
        );
        // pdpt[1] -> pd; pd[0]: 2 MiB page at phys 0x20_0000 (read-only, executable).
        mem.write_u64(entry_addr(pdpt, 1), pd.0 | PRESENT | WRITABLE);
        mem.write_u64(entry_addr(pd, 0), 0x20_0000 | PRESENT | HUGE | GLOBAL);
        // pd[1] -> pt; pt[3]: 4 KiB page at phys 0x9000.
        mem.write_u64(entry_addr(pd, 1), pt.0 | PRESENT | WRITABLE);
        mem.write_u64(entry_addr(pt, 3), 0x9000 | PRESENT | WRITABLE | NO_EXECUTE);
        root
    }

    #[test]
    fn huge_page_translate() {
        let mut mem = FakeMem::new();
        let kroot = fake_kernel_root(&mut mem);
        let k = AddressSpace::from_root(kroot);
        let base = 0xffff_ff80_0000_0000u64;
        let (pa, f) = k.translate(&mem, base + 0x1234_5678).unwrap();
        assert_eq!(pa, PhysAddr(0x4000_0000 + 0x1234_5678));
        assert_eq!(f, MapFlags::kernel(true, false));
        let (pa, f) = k.translate(&mem, base + SIZE_1G + 0x1f_fff0).unwrap();
        assert_eq!(pa, PhysAddr(0x20_0000 + 0x1f_fff0));
        assert_eq!(f, MapFlags::kernel(false, true));
        let (pa, f) = k
            .translate(&mem, base + SIZE_1G + SIZE_2M + 3 * P + 5)
            .unwrap();
        assert_eq!(pa, PhysAddr(0x9005));
        assert_eq!(f, MapFlags::kernel(true, false));
        assert_eq!(k.translate(&mem, base + SIZE_1G + SIZE_2M), None);
        assert_eq!(k.translate(&mem, base + 2 * SIZE_1G), None);
        // Mapping inside a huge page is refused without allocating.
        let live = mem.live();
        let mut k = k;
        assert_eq!(
            k.map(
                &mut mem,
                base + P,
                PhysAddr(0x1000),
                MapFlags::kernel(true, false)
            ),
            Err(MapError::AlreadyMapped)
        );
        assert_eq!(k.unmap(&mut mem, base + SIZE_1G), None);
        assert_eq!(mem.live(), live);
    }

    #[test]
    fn kernel_half_shared_with_kernel_root() {
        let mut mem = FakeMem::new();
        let kroot = fake_kernel_root(&mut mem);
        let kernel_frames = mem.live();
        let mut a = AddressSpace::new(&mut mem, Some(kroot)).unwrap();
        let mut b = AddressSpace::new(&mut mem, Some(kroot)).unwrap();
        assert_ne!(a.root(), b.root());
        for i in KERNEL_PML4_START..ENTRIES {
            let ke = mem.read_u64(entry_addr(kroot, i));
            assert_eq!(mem.read_u64(entry_addr(a.root(), i)), ke);
        }
        for i in 0..KERNEL_PML4_START {
            assert_eq!(mem.read_u64(entry_addr(a.root(), i)), 0);
        }
        let kva = 0xffff_ff80_0000_0000u64 + SIZE_1G + SIZE_2M + 3 * P;
        let kernel_view = AddressSpace::from_root(kroot).translate(&mem, kva);
        assert_eq!(a.translate(&mem, kva), kernel_view);
        // A kernel mapping added through one space is seen by all sharing that table.
        let new_kva = kva + P;
        a.map(
            &mut mem,
            new_kva,
            PhysAddr(0xa000),
            MapFlags::kernel(true, false),
        )
        .unwrap();
        assert_eq!(b.translate(&mem, new_kva).unwrap().0, PhysAddr(0xa000));
        // User halves are private.
        let uf = mem.alloc_frame().unwrap();
        b.map(&mut mem, 0x1000, uf, MapFlags::user_owned(true, false))
            .unwrap();
        assert_eq!(a.translate(&mem, 0x1000), None);
        a.destroy(&mut mem);
        b.destroy(&mut mem);
        // Only the kernel's own tables remain.
        assert_eq!(mem.live(), kernel_frames);
        assert_eq!(
            AddressSpace::from_root(kroot).translate(&mem, kva),
            kernel_view
        );
    }

    #[test]
    fn destroy_frees_exactly_what_it_allocated() {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        // A shared frame the space does not own must survive destroy.
        let shared = mem.alloc_frame().unwrap();
        let mut owned = Vec::new();
        // Pages spread over several PTs, PDs and PDPTs.
        let vas = [
            0x1000u64,
            0x2000,
            0x20_0000,
            0x4000_0000,
            0x80_0000_0000,
            USER_END - P,
        ];
        for &va in &vas {
            let f = mem.alloc_frame().unwrap();
            owned.push(f);
            s.map(&mut mem, va, f, MapFlags::user_owned(true, false))
                .unwrap();
        }
        s.map(
            &mut mem,
            0x3000,
            shared,
            MapFlags::user_shared(false, false),
        )
        .unwrap();
        assert!(mem.live() > vas.len() + 2);
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 1);
        assert!(mem.alloc.is_allocated(shared));
        for f in owned {
            assert!(!mem.alloc.is_allocated(f));
        }
    }

    /// Pages in every chunk of every level (and the last page of the user half): the
    /// used-chunk bits lead `destroy` to every table and every owned frame, so nothing
    /// leaks; each table's entry above says which chunks it uses, and nothing more.
    #[test]
    fn destroy_reads_only_used_chunks_and_frees_everything() {
        let mut mem = FakeMem::with_frames(8192);
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut vas = Vec::new();
        for k in 0..CHUNK * 8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // A page whose index at some level lies in chunk `k % 8`.
            let level = (k / 8) % 4;
            let index = (k % 8) * CHUNK + x % CHUNK;
            let spread = ((x >> 20) << 12) | (index << (12 + 9 * level));
            let va = (spread % (USER_END - USER_MIN)) & !(P - 1);
            let va = (USER_MIN + va).min(USER_END - P) & !(P - 1);
            if vas.contains(&va) {
                continue;
            }
            let f = mem.alloc_frame().unwrap();
            s.map(&mut mem, va, f, MapFlags::user_owned(true, false))
                .unwrap();
            vas.push(va);
        }
        // Every page's walk passes entries that name its chunk at the level below.
        for &va in &vas {
            let mut table = s.root();
            for level in [3u32, 2, 1] {
                let e = mem.read_u64(entry_addr(table, table_index(va, level)));
                assert_ne!(e & chunk_bit(table_index(va, level - 1)), 0, "{va:#x}");
                assert_eq!(e & ADDR_MASK & USED_CHUNKS, 0);
                table = PhysAddr(e & ADDR_MASK);
            }
            assert!(s.translate(&mem, va).is_some());
        }
        // A first chunk-0 page alone leaves the other chunks' bits clear.
        let mut one = AddressSpace::new(&mut mem, None).unwrap();
        let f = mem.alloc_frame().unwrap();
        one.map(&mut mem, USER_MIN, f, MapFlags::user_owned(true, false))
            .unwrap();
        let e = mem.read_u64(entry_addr(one.root(), table_index(USER_MIN, 3)));
        assert_eq!(e & USED_CHUNKS, chunk_bit(table_index(USER_MIN, 2)));
        one.destroy(&mut mem);
        // Half the pages unmapped (their frames freed there), then everything else.
        for &va in vas.iter().step_by(2) {
            assert!(s.unmap(&mut mem, va).is_some());
        }
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn out_of_memory_leaves_no_leak() {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        // Room for the PDPT and PD but not the PT.
        mem.budget = Some(2);
        assert_eq!(
            s.map(
                &mut mem,
                0x1000,
                PhysAddr(0x20_0000),
                MapFlags::user_shared(true, false)
            ),
            Err(MapError::NoMemory)
        );
        assert_eq!(s.translate(&mem, 0x1000), None);
        mem.budget = None;
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
        mem.budget = Some(0);
        assert_eq!(AddressSpace::new(&mut mem, None), Err(MapError::NoMemory));
    }

    #[test]
    fn set_replaces_and_update_leaves_visits_only_present_pages() {
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        let (a, b) = (PhysAddr(0x20_0000), PhysAddr(0x30_0000));
        let ro = MapFlags::user_shared(false, false);
        let rw = MapFlags::user_shared(true, false);
        assert_eq!(s.set(&mut mem, 0x1000, a, ro), Ok(None));
        assert_eq!(s.set(&mut mem, 0x1000, b, rw), Ok(Some(a)));
        assert_eq!(s.translate(&mem, 0x1000), Some((b, rw)));
        // Pages far apart: one in the first table, one a GiB up.
        s.set(&mut mem, 0x4000_0000, a, rw).unwrap();
        let owned = mem.alloc_frame().unwrap();
        s.map(&mut mem, 0x8000, owned, MapFlags::user_owned(true, false))
            .unwrap();
        assert_eq!(s.set(&mut mem, 0x8000, a, rw), Err(MapError::AlreadyMapped));
        let mut seen = Vec::new();
        let n = s.update_leaves(&mut mem, 0x1000, USER_END, |va, e| {
            seen.push(va);
            e & !WRITABLE
        });
        assert_eq!(seen, [0x1000, 0x8000, 0x4000_0000]);
        assert_eq!(n, 3);
        assert_eq!(s.translate(&mem, 0x4000_0000).unwrap().1, ro);
        // Nothing to change: nothing counted; a range that leaves out the rest.
        assert_eq!(s.update_leaves(&mut mem, 0x1000, USER_END, |_, e| e), 0);
        assert_eq!(s.update_leaves(&mut mem, 0x2000, 0x8000, |_, _| 0), 0);
        assert_eq!(s.update_leaves(&mut mem, 0x1000, 0x2000, |_, _| 0), 1);
        assert_eq!(s.translate(&mem, 0x1000), None);
        s.update_leaves(&mut mem, 0x4000_0000, 0x4000_1000, |_, _| 0);
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn update_leaves_visits_exactly_the_present_pages_of_any_range() {
        // Pages in several chunks of one page table, in two page tables side by side and
        // across a PML4 boundary; every sub-range's visits must be the pages `translate`
        // finds present in it, in order.
        let mut mem = FakeMem::new();
        let mut s = AddressSpace::new(&mut mem, None).unwrap();
        let rw = MapFlags::user_shared(true, false);
        let frame = PhysAddr(0x20_0000);
        let base = 0x40_0000_0000u64;
        let pages: Vec<u64> = [0u64, 1, 63, 64, 130, 511, 512, 513, 1100, 1u64 << 27]
            .iter()
            .map(|p| base + p * PAGE_SIZE)
            .collect();
        for &va in &pages {
            s.set(&mut mem, va, frame, rw).unwrap();
        }
        let bounds = [
            0u64,
            1,
            2,
            63,
            64,
            65,
            200,
            511,
            512,
            513,
            514,
            1100,
            1101,
            1 << 27,
        ];
        for &lo in &bounds {
            for &hi in &bounds {
                let (start, end) = (base + lo * PAGE_SIZE, base + hi * PAGE_SIZE + PAGE_SIZE);
                let mut seen = Vec::new();
                let n = s.update_leaves(&mut mem, start, end, |va, e| {
                    seen.push(va);
                    e
                });
                let want: Vec<u64> = pages
                    .iter()
                    .copied()
                    .filter(|&va| va >= start && va < end)
                    .collect();
                assert_eq!(seen, want, "[{start:#x}, {end:#x})");
                assert_eq!(n, 0);
            }
        }
        // Changes are written and counted.
        let n = s.update_leaves(&mut mem, base, base + (1 << 28) * PAGE_SIZE, |_, e| {
            e & !WRITABLE
        });
        assert_eq!(n, pages.len() as u64);
        for &va in &pages {
            assert!(!s.translate(&mem, va).unwrap().1.writable);
        }
        for &va in &pages {
            s.update_leaves(&mut mem, va, va + PAGE_SIZE, |_, _| 0);
        }
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn errors_convert() {
        assert_eq!(
            baton_abi::Error::from(MapError::NoMemory),
            baton_abi::Error::NoMemory
        );
        assert_eq!(
            baton_abi::Error::from(MapError::OutsideUser),
            baton_abi::Error::BadAddress
        );
        assert!(!MapError::AlreadyMapped.describe().is_empty());
    }
}
