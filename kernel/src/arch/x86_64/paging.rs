//! The kernel's page tables and its view of physical memory.
//!
//! Layout of the kernel half (shared by every address space):
//!
//! | virtual | what |
//! |---|---|
//! | `0xffff_8000_0000_0000 + pa` | direct map of all physical memory (at least 4 GiB, 2 MiB pages, no-execute) |
//! | `0xffff_ff00_0000_0000` (PML4 slot 510) | reserved for kernel mappings made after boot; its PDPT exists from boot on so every address space shares it |
//! | `0xffff_ffff_8000_0000 + pa` | the kernel image, 4 KiB pages: text read-only+executable, rodata read-only, data/bss writable, no-execute |
//!
//! The user half (PML4 slots 0–255) is empty in the kernel's own tables; each task's
//! address space copies slots 256–511 from here (see `kern::pmap::AddressSpace::new`).
//!
//! # Invariants
//! - No kernel-half PML4 entry changes after `init`, so copies in address spaces stay valid.
//! - Kernel code reaches user memory only through `kern::usercopy` over the direct map,
//!   never through user virtual addresses, which is why SMAP can be on without `stac`.

use crate::arch::serial::kprintln;
use kern::frame::{FrameAllocator, PhysAddr, PAGE_SIZE};
use kern::pmap::PhysMem;

/// Base of the direct map of physical memory.
pub const PHYS_OFFSET: u64 = 0xffff_8000_0000_0000;
/// Virtual address the kernel image is linked at (minus its physical load address).
pub const KERNEL_VMA: u64 = 0xffff_ffff_8000_0000;

const PRESENT: u64 = 1;
const WRITABLE: u64 = 1 << 1;
const HUGE: u64 = 1 << 7;
const GLOBAL: u64 = 1 << 8;
const NO_EXECUTE: u64 = 1 << 63;
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// The virtual address at which physical address `pa` is seen through the direct map.
pub const fn phys_to_virt(pa: u64) -> u64 {
    pa + PHYS_OFFSET
}

/// Physical memory as the kernel sees it: through the direct map, with frames from the
/// frame allocator. This is the `PhysMem` that `kern` manipulates page tables and user
/// memory through.
pub struct KernelMem<'a> {
    /// Where new frames come from and freed ones go.
    pub frames: &'a mut FrameAllocator,
}

impl KernelMem<'_> {
    fn ptr(pa: PhysAddr) -> *mut u8 {
        phys_to_virt(pa.0) as *mut u8
    }
}

impl PhysMem for KernelMem<'_> {
    fn read_u64(&self, pa: PhysAddr) -> u64 {
        // SAFETY: `kern` reads only page-table entries of frames it allocated through this
        // `PhysMem`, which are RAM covered by the direct map; entries are 8-byte aligned.
        unsafe { core::ptr::read_volatile(Self::ptr(pa) as *const u64) }
    }

    fn write_u64(&mut self, pa: PhysAddr, v: u64) {
        // SAFETY: as in `read_u64`; the frame belongs to a page table that `kern` owns.
        unsafe { core::ptr::write_volatile(Self::ptr(pa) as *mut u64, v) }
    }

    fn zero_frame(&mut self, frame: PhysAddr) {
        // SAFETY: `frame` is a whole 4 KiB frame owned by the caller, mapped by the direct map.
        unsafe { core::ptr::write_bytes(Self::ptr(frame), 0, PAGE_SIZE as usize) }
    }

    fn write_bytes(&mut self, pa: PhysAddr, bytes: &[u8]) {
        // SAFETY: `kern` never crosses a frame boundary here and writes only frames that it
        // owns or that it checked are mapped user pages; the direct map covers them and
        // kernel data never lives in those frames.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), Self::ptr(pa), bytes.len()) }
    }

    fn read_bytes(&self, pa: PhysAddr, out: &mut [u8]) {
        // SAFETY: as in `write_bytes`, for reading.
        unsafe { core::ptr::copy_nonoverlapping(Self::ptr(pa), out.as_mut_ptr(), out.len()) }
    }

    fn append_bytes(&self, pa: PhysAddr, len: usize, out: &mut alloc::vec::Vec<u8>) {
        out.reserve(len);
        let start = out.len();
        // SAFETY: the source is as in `read_bytes`; the destination is the vector's spare
        // capacity, at least `len` bytes after `reserve`, which no reference covers. Once
        // the copy has written all `len` bytes they are initialised, so the length may
        // grow over them.
        unsafe {
            core::ptr::copy_nonoverlapping(Self::ptr(pa), out.as_mut_ptr().add(start), len);
            out.set_len(start + len);
        }
    }

    fn copy_bytes(&mut self, dst: PhysAddr, src: PhysAddr, len: usize) {
        copy_phys(dst, src, len)
    }

    fn alloc_frame(&mut self) -> Option<PhysAddr> {
        let f = self.frames.alloc()?;
        self.zero_frame(f);
        Some(f)
    }

    fn alloc_zeroed(&mut self) -> Option<PhysAddr> {
        // `alloc_frame` hands its frames out zeroed already.
        self.alloc_frame()
    }

    fn free_frame(&mut self, frame: PhysAddr) {
        if self.frames.free(frame).is_err() {
            kprintln!("[kernel] warning: bad frame free {:#x}", frame.0);
        }
    }
}

/// Copies `len` bytes from physical `src` to physical `dst` through the direct map.
///
/// Both ranges must lie inside frames of user memory (IPC buffers) that the caller has
/// checked are mapped in their tasks, and must not overlap.
pub fn copy_phys(dst: PhysAddr, src: PhysAddr, len: usize) {
    // SAFETY: the caller guarantees both ranges are RAM frames of user pages, covered by
    // the direct map; kernel data never lives in such frames, and distinct threads' IPC
    // buffers are distinct ranges (overlap would only garble user data, which `copy` —
    // not `copy_nonoverlapping` — tolerates).
    unsafe {
        core::ptr::copy(
            phys_to_virt(src.0) as *const u8,
            phys_to_virt(dst.0) as *mut u8,
            len,
        )
    }
}

/// Copies `bytes` to physical `dst` through the direct map.
///
/// The range must lie inside a frame of user memory (an IPC buffer) that the caller has
/// checked is mapped in its task.
pub fn write_phys(dst: PhysAddr, bytes: &[u8]) {
    // SAFETY: the caller guarantees the range is in a RAM frame of a user page, covered by
    // the direct map; kernel data never lives in such frames, so `bytes` (kernel memory)
    // does not overlap it.
    unsafe {
        core::ptr::copy_nonoverlapping(bytes.as_ptr(), phys_to_virt(dst.0) as *mut u8, bytes.len())
    }
}

/// Copies `out.len()` bytes from physical `src` into `out` through the direct map.
///
/// The same conditions as [`write_phys`]. The user may change the bytes meanwhile from
/// another CPU, which only garbles what is read.
pub fn read_phys(src: PhysAddr, out: &mut [u8]) {
    // SAFETY: as in `write_phys`, for reading; `out` is kernel memory, never in such a
    // frame.
    unsafe {
        core::ptr::copy_nonoverlapping(
            phys_to_virt(src.0) as *const u8,
            out.as_mut_ptr(),
            out.len(),
        )
    }
}

/// Reads a message header from an IPC buffer frame at physical `pa` (its first bytes).
///
/// `pa` must be the start of a frame of user memory that the caller has checked is mapped
/// in its task (a registered IPC buffer).
#[inline(always)]
pub fn read_header(pa: PhysAddr) -> baton_abi::ipc::MsgHeader {
    // SAFETY: the caller guarantees `pa` starts a RAM frame of a user page, covered by the
    // direct map and 4 KiB aligned (so aligned for the header); `MsgHeader` is `repr(C)`
    // plain integers, valid for any bits; the user may write the page concurrently from
    // another CPU, which only makes the value it sends garbled, never unsound (volatile).
    unsafe { core::ptr::read_volatile(phys_to_virt(pa.0) as *const baton_abi::ipc::MsgHeader) }
}

/// Writes a message header at the start of an IPC buffer frame at physical `pa`.
///
/// The same conditions as [`read_header`].
#[inline(always)]
pub fn write_header(pa: PhysAddr, h: baton_abi::ipc::MsgHeader) {
    // SAFETY: as in `read_header`; the frame is user memory, never kernel data.
    unsafe { core::ptr::write_volatile(phys_to_virt(pa.0) as *mut baton_abi::ipc::MsgHeader, h) }
}

/// Reads the word at physical `pa` (8-byte aligned) of an IPC buffer frame.
///
/// The same conditions as [`read_header`] (the word may be anywhere in the frame).
#[inline(always)]
pub fn read_word(pa: PhysAddr) -> u64 {
    debug_assert!(pa.0.is_multiple_of(8));
    // SAFETY: as in `read_header`: the caller guarantees an aligned word of a RAM frame of a
    // user page, covered by the direct map; any bits are a valid `u64`; volatile, since the
    // user may write it concurrently.
    unsafe { core::ptr::read_volatile(phys_to_virt(pa.0) as *const u64) }
}

/// Writes `words` from physical `pa` (8-byte aligned) on, inside one IPC buffer frame.
///
/// The same conditions as [`read_header`], for the whole range.
/// Taken by value, so that the words can go from registers to the frame without a copy in
/// between.
#[inline(always)]
pub fn write_words<const N: usize>(pa: PhysAddr, words: [u64; N]) {
    debug_assert!(pa.0.is_multiple_of(8) && (pa.0 & 0xfff) + 8 * N as u64 <= 0x1000);
    let at = phys_to_virt(pa.0) as *mut u64;
    for (i, w) in words.into_iter().enumerate() {
        // SAFETY: the caller guarantees the range is inside a RAM frame of a user page,
        // covered by the direct map and aligned; user memory is never kernel data.
        unsafe { core::ptr::write_volatile(at.add(i), w) };
    }
}

extern "C" {
    static __text_start: u8;
    static __text_end: u8;
    static __rodata_end: u8;
    static __kernel_end: u8;
}

/// Physical end of the kernel image (everything up to it stays reserved).
pub fn kernel_phys_end() -> u64 {
    (core::ptr::addr_of!(__kernel_end) as u64) - KERNEL_VMA
}

/// Builds the kernel's page tables, switches to them and returns the root's physical
/// address. `phys_top` is one past the highest RAM address.
pub fn init(frames: &mut FrameAllocator, phys_top: u64) -> PhysAddr {
    let mut mem = KernelMem { frames };
    let root = alloc_table(&mut mem);

    // Direct map: all RAM and at least the 32-bit physical space (LAPIC, I/O APIC).
    let top = phys_top.max(4 << 30).next_multiple_of(1 << 30);
    let mut pa = 0;
    while pa < top {
        let va = phys_to_virt(pa);
        let pd = table_at(&mut mem, root, va, 2);
        let slot = (va >> 21) & 511;
        mem.write_u64(
            pd.add(slot * 8),
            pa | PRESENT | WRITABLE | HUGE | GLOBAL | NO_EXECUTE,
        );
        pa += 2 << 20;
    }

    // Slot 510: reserved for later kernel mappings, shared from boot on.
    let _ = table_at(&mut mem, root, 0xffff_ff00_0000_0000, 3);

    // The kernel image with per-section permissions.
    let (text_start, text_end, rodata_end, end) = (
        core::ptr::addr_of!(__text_start) as u64,
        core::ptr::addr_of!(__text_end) as u64,
        core::ptr::addr_of!(__rodata_end) as u64,
        core::ptr::addr_of!(__kernel_end) as u64,
    );
    let mut va = text_start;
    while va < end {
        let flags = if va < text_end {
            PRESENT | GLOBAL
        } else if va < rodata_end {
            PRESENT | GLOBAL | NO_EXECUTE
        } else {
            PRESENT | WRITABLE | GLOBAL | NO_EXECUTE
        };
        let pt = table_at(&mut mem, root, va, 1);
        mem.write_u64(pt.add(((va >> 12) & 511) * 8), (va - KERNEL_VMA) | flags);
        va += PAGE_SIZE;
    }

    // SAFETY: the new tables map the kernel image (code, stack, data) at the same virtual
    // addresses as the boot tables and the direct map at the same base, so execution goes
    // on unchanged after the switch.
    unsafe { super::cpu::write_cr3(root.0) };
    root
}

fn alloc_table(mem: &mut KernelMem<'_>) -> PhysAddr {
    match mem.alloc_frame() {
        Some(f) => f,
        None => panic!("out of memory building the kernel page tables"),
    }
}

/// Walks from `root` towards `va`, creating tables, and returns the table at `level`
/// (3 = PDPT, 2 = PD, 1 = PT).
fn table_at(mem: &mut KernelMem<'_>, root: PhysAddr, va: u64, level: u32) -> PhysAddr {
    let mut table = root;
    for l in (level + 1..=4).rev() {
        let idx = (va >> (12 + 9 * (l - 1))) & 511;
        let entry_pa = table.add(idx * 8);
        let e = mem.read_u64(entry_pa);
        table = if e & PRESENT != 0 {
            PhysAddr(e & ADDR_MASK)
        } else {
            let t = alloc_table(mem);
            mem.write_u64(entry_pa, t.0 | PRESENT | WRITABLE);
            t
        };
    }
    table
}
