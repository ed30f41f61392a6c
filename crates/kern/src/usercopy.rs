//! Checked access to user memory: the only way the kernel reads or writes it.
//!
//! A user address is an allegation until checked. [`copy_from_user`] and [`copy_to_user`]
//! check the whole range against the user half of the address space and walk the page
//! tables of the given [`AddressSpace`] for every page, then copy through [`PhysMem`], page
//! by page. [`copy_user_to_user`] copies between two address spaces the same way, frame to
//! frame, without a kernel buffer between. They never dereference a user pointer, so they
//! work whatever address space is loaded in CR3 and cannot fault.
//!
//! # Invariants
//! - A copy touches only bytes in `[USER_MIN, USER_END)` of pages whose effective
//!   permissions (every page-table level) include `USER`, and `WRITABLE` for writes.
//!   Anything else is [`Error::BadAddress`], including ranges that wrap past `u64::MAX`.
//! - [`copy_to_user`] and [`copy_user_to_user`] validate every page (of both ranges) before
//!   writing a byte: they write all or nothing.
//!   [`copy_from_user`] may have filled part of `out` when it fails; `out` is kernel memory,
//!   so that is harmless, and its contents are then unspecified.
//! - Each [`PhysMem::read_bytes`], [`PhysMem::write_bytes`] or [`PhysMem::copy_bytes`] call
//!   stays inside one page (on each side).
//! - Zero-length copies succeed at any address without looking at the page tables.

use crate::frame::{PhysAddr, PAGE_SIZE};
use crate::pmap::{AddressSpace, PhysMem};
use alloc::vec::Vec;
use baton_abi::layout::{USER_END, USER_MIN};
use baton_abi::Error;

/// Checks that `[va, va + len)` lies inside the user range without wrapping and returns its
/// end. `len` must be non-zero.
fn user_range(va: u64, len: usize) -> Result<u64, Error> {
    let len = u64::try_from(len).map_err(|_| Error::BadAddress)?;
    let end = va.checked_add(len).ok_or(Error::BadAddress)?;
    if va < USER_MIN || end > USER_END {
        return Err(Error::BadAddress);
    }
    Ok(end)
}

/// The pieces of `[va, end)` that lie in one page each: `(address, offset from va, length)`.
fn chunks(va: u64, end: u64) -> impl Iterator<Item = (u64, usize, usize)> {
    let mut cur = va;
    core::iter::from_fn(move || {
        if cur >= end {
            return None;
        }
        let page_end = (cur & !(PAGE_SIZE - 1)).saturating_add(PAGE_SIZE);
        let chunk_end = page_end.min(end);
        // Both fit in usize: they are bounded by the length of a slice.
        let offset = usize::try_from(cur - va).ok()?;
        let len = usize::try_from(chunk_end - cur).ok()?;
        let item = (cur, offset, len);
        cur = chunk_end;
        Some(item)
    })
}

/// Copies `out.len()` bytes from user address `va` of `space` into `out`.
///
/// Errors with [`Error::BadAddress`] if any byte is outside the user range or on a page
/// that is not mapped present and user-accessible.
pub fn copy_from_user(
    space: &AddressSpace,
    mem: &impl PhysMem,
    va: u64,
    out: &mut [u8],
) -> Result<(), Error> {
    if out.is_empty() {
        return Ok(());
    }
    let end = user_range(va, out.len())?;
    for (addr, offset, len) in chunks(va, end) {
        let (pa, flags) = space.translate(mem, addr).ok_or(Error::BadAddress)?;
        if !flags.user {
            return Err(Error::BadAddress);
        }
        let dst = offset
            .checked_add(len)
            .and_then(|e| out.get_mut(offset..e))
            .ok_or(Error::BadAddress)?;
        mem.read_bytes(pa, dst);
    }
    Ok(())
}

/// The naturally aligned 32-bit word at user address `va` of `space` (little-endian): what
/// [`copy_from_user`] of 4 bytes reads, in one page-table walk and no loop (the word of a
/// `wait`, on every call). [`Error::InvalidArgument`] when `va` is not a multiple of 4;
/// otherwise the errors of [`copy_from_user`].
#[inline]
pub fn read_user_u32(space: &AddressSpace, mem: &impl PhysMem, va: u64) -> Result<u32, Error> {
    if !va.is_multiple_of(4) {
        return Err(Error::InvalidArgument);
    }
    // Aligned, so the 4 bytes lie in one page: the range check is its start and end.
    if !(USER_MIN..=USER_END - 4).contains(&va) {
        return Err(Error::BadAddress);
    }
    let (pa, flags) = space.translate(mem, va).ok_or(Error::BadAddress)?;
    if !flags.user {
        return Err(Error::BadAddress);
    }
    let mut word = [0u8; 4];
    mem.read_bytes(pa, &mut word);
    Ok(u32::from_le_bytes(word))
}

/// [`copy_from_user`] into a new vector of `len` bytes, which the bytes are appended to
/// (never zeroed first: see [`PhysMem::append_bytes`]). Same errors.
pub fn read_user_vec(
    space: &AddressSpace,
    mem: &impl PhysMem,
    va: u64,
    len: usize,
) -> Result<Vec<u8>, Error> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let end = user_range(va, len)?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| Error::NoMemory)?;
    for (addr, _, n) in chunks(va, end) {
        let (pa, flags) = space.translate(mem, addr).ok_or(Error::BadAddress)?;
        if !flags.user {
            return Err(Error::BadAddress);
        }
        mem.append_bytes(pa, n, &mut out);
    }
    Ok(out)
}

/// Checks that `len` bytes at user address `va` of `space` could be written: in the user
/// range, mapped present, user-accessible and writable ([`Error::BadAddress`] if not).
pub fn check_writable(
    space: &AddressSpace,
    mem: &impl PhysMem,
    va: u64,
    len: usize,
) -> Result<(), Error> {
    check_access(space, mem, va, len, true)
}

/// Checks that every page of `len` bytes at user address `va` of `space` is in the user
/// range, mapped present and user-accessible, and writable if `write`.
fn check_access(
    space: &AddressSpace,
    mem: &impl PhysMem,
    va: u64,
    len: usize,
    write: bool,
) -> Result<(), Error> {
    if len == 0 {
        return Ok(());
    }
    let end = user_range(va, len)?;
    for (addr, _, _) in chunks(va, end) {
        match space.translate(mem, addr) {
            Some((_, flags)) if flags.user && (flags.writable || !write) => {}
            _ => return Err(Error::BadAddress),
        }
    }
    Ok(())
}

/// Copies `data` to user address `va` of `space`.
///
/// Errors with [`Error::BadAddress`], writing nothing, if any byte is outside the user range
/// or on a page that is not mapped present, user-accessible and writable.
pub fn copy_to_user(
    space: &AddressSpace,
    mem: &mut impl PhysMem,
    va: u64,
    data: &[u8],
) -> Result<(), Error> {
    if data.is_empty() {
        return Ok(());
    }
    let end = user_range(va, data.len())?;
    // Decide first, with no side effect...
    check_writable(space, mem, va, data.len())?;
    // ...then act. The tables cannot have changed: we hold the only `&mut` to memory.
    for (addr, offset, len) in chunks(va, end) {
        let (pa, _) = space.translate(mem, addr).ok_or(Error::BadAddress)?;
        let src = offset
            .checked_add(len)
            .and_then(|e| data.get(offset..e))
            .ok_or(Error::BadAddress)?;
        mem.write_bytes(pa, src);
    }
    Ok(())
}

/// Checks that `len` bytes at user address `va` of `space` could be read: in the user
/// range, mapped present and user-accessible ([`Error::BadAddress`] if not).
pub fn check_readable(
    space: &AddressSpace,
    mem: &impl PhysMem,
    va: u64,
    len: usize,
) -> Result<(), Error> {
    check_access(space, mem, va, len, false)
}

/// Pages of one side of a user-to-user copy whose frames are remembered from the check (a
/// largest message, unaligned, spans this many); pages past them are walked again.
const FRAMES: usize = (baton_abi::ipc::MSG_SIZE_MAX / PAGE_SIZE as usize) + 1;

/// One side of a user-to-user copy: its range and the frames of its first [`FRAMES`]
/// pages, found while checking it (or known beforehand, [`Frames`]), so that the copy walks
/// no page table for them.
struct Side<'a> {
    /// Where to look up pages past the known ones (`None`: there are none to look up).
    space: Option<&'a AddressSpace>,
    /// The first page of the range.
    first: u64,
    frames: [PhysAddr; FRAMES],
}

impl<'a> Side<'a> {
    /// Checks `[va, va + len)` of `space` (`len` > 0): user pages, writable too if `write`
    /// ([`Error::BadAddress`] otherwise), remembering their frames.
    fn check(
        space: &'a AddressSpace,
        mem: &impl PhysMem,
        va: u64,
        len: usize,
        write: bool,
    ) -> Result<Side<'a>, Error> {
        let end = user_range(va, len)?;
        let first = va & !(PAGE_SIZE - 1);
        let mut side = Side {
            space: Some(space),
            first,
            frames: [PhysAddr(0); FRAMES],
        };
        for (i, (addr, _, _)) in chunks(va, end).enumerate() {
            match space.translate(mem, addr) {
                Some((pa, f)) if f.user && (f.writable || !write) => {
                    if let Some(slot) = side.frames.get_mut(i) {
                        *slot = pa.frame_start();
                    }
                }
                _ => return Err(Error::BadAddress),
            }
        }
        Ok(side)
    }

    /// The side of `[va, va + len)` inside the known buffer `known` ([`Error::BadAddress`]
    /// if the range leaves it).
    fn known(known: &Frames<'_>, va: u64, len: usize) -> Result<Side<'a>, Error> {
        let size = (known.frames.len().min(FRAMES) as u64) * PAGE_SIZE;
        let end = va
            .checked_add(u64::try_from(len).map_err(|_| Error::BadAddress)?)
            .ok_or(Error::BadAddress)?;
        if va < known.va || end > known.va.saturating_add(size) {
            return Err(Error::BadAddress);
        }
        let mut frames = [PhysAddr(0); FRAMES];
        for (slot, f) in frames.iter_mut().zip(known.frames) {
            *slot = f.frame_start();
        }
        Ok(Side {
            space: None,
            first: known.va,
            frames,
        })
    }

    /// The physical address of `va` (inside the checked range).
    fn at(&self, mem: &impl PhysMem, va: u64) -> Result<PhysAddr, Error> {
        let page = va & !(PAGE_SIZE - 1);
        let offset = va - page;
        let index = usize::try_from((page - self.first) / PAGE_SIZE).unwrap_or(usize::MAX);
        match (self.frames.get(index), self.space) {
            (Some(f), _) => Ok(PhysAddr(f.0 + offset)),
            // Past the remembered pages (a range longer than a largest message): walk again.
            (None, Some(space)) => space
                .translate(mem, va)
                .map(|(pa, _)| pa)
                .ok_or(Error::BadAddress),
            (None, None) => Err(Error::BadAddress),
        }
    }
}

/// A user buffer whose frames the kernel recorded when the buffer was registered (checked
/// user-writable then, and forgotten with the buffer as soon as any page of it is
/// unmapped): a copy into or out of it walks no page table on its side.
#[derive(Clone, Copy, Debug)]
pub struct Frames<'a> {
    /// Its user address (page-aligned).
    pub va: u64,
    /// The frame of each of its pages, in order.
    pub frames: &'a [PhysAddr],
}

/// Copies `total` bytes from `src_va` (in `src`) to `dst_va` (in `dst`), both checked, in
/// chunks that end at either side's page boundary, each byte once.
fn copy_sides(
    src: &Side<'_>,
    src_va: u64,
    dst: &Side<'_>,
    dst_va: u64,
    len: usize,
    mem: &mut impl PhysMem,
) -> Result<(), Error> {
    let total = u64::try_from(len).map_err(|_| Error::BadAddress)?;
    let mut done = 0u64;
    while done < total {
        let (s, d) = (src_va + done, dst_va + done);
        let room = |va: u64| PAGE_SIZE - (va & (PAGE_SIZE - 1));
        let n = (total - done).min(room(s)).min(room(d));
        let from = src.at(mem, s)?;
        let to = dst.at(mem, d)?;
        // `n` is at most a page.
        mem.copy_bytes(to, from, n as usize);
        done += n;
    }
    Ok(())
}

/// Copies `len` bytes from user address `src_va` of `src_space` to user address `dst_va`
/// of `dst_space` (two tasks' address spaces, or one), directly: each byte is copied once,
/// frame to frame ([`PhysMem::copy_bytes`]), with no kernel buffer between (seed 001's
/// single copy from the client's buffer into the server's).
///
/// Both ranges are checked first: the source must be readable user memory, the
/// destination writable user memory; otherwise [`Error::BadAddress`] and nothing is
/// written. The check walks each page's tables once and remembers the frames; the copy
/// then goes in chunks that end at either side's page boundary, so each chunk lies in one
/// frame on each side. Overlapping ranges (one space, the same pages) leave the
/// destination garbled but are not unsafe.
pub fn copy_user_to_user(
    src_space: &AddressSpace,
    src_va: u64,
    dst_space: &AddressSpace,
    dst_va: u64,
    len: usize,
    mem: &mut impl PhysMem,
) -> Result<(), Error> {
    if len == 0 {
        return Ok(());
    }
    // Decide first, with no side effect...
    let src = Side::check(src_space, mem, src_va, len, false)?;
    let dst = Side::check(dst_space, mem, dst_va, len, true)?;
    // ...then act: the tables cannot change meanwhile (we hold the only `&mut` to memory,
    // and user frames are never page tables).
    copy_sides(&src, src_va, &dst, dst_va, len, mem)
}

/// [`copy_user_to_user`] into a buffer whose frames are known (`dst`): `[dst_va, dst_va +
/// len)` must lie inside it ([`Error::BadAddress`] otherwise, as for an unreadable
/// source; nothing is written then).
pub fn copy_user_to_frames(
    src_space: &AddressSpace,
    src_va: u64,
    dst: Frames<'_>,
    dst_va: u64,
    len: usize,
    mem: &mut impl PhysMem,
) -> Result<(), Error> {
    if len == 0 {
        return Ok(());
    }
    let src = Side::check(src_space, mem, src_va, len, false)?;
    let dst = Side::known(&dst, dst_va, len)?;
    copy_sides(&src, src_va, &dst, dst_va, len, mem)
}

/// [`copy_user_to_user`] out of a buffer whose frames are known (`src`): `[src_va, src_va +
/// len)` must lie inside it, and the destination be writable user memory
/// ([`Error::BadAddress`] otherwise; nothing is written then).
pub fn copy_frames_to_user(
    src: Frames<'_>,
    src_va: u64,
    dst_space: &AddressSpace,
    dst_va: u64,
    len: usize,
    mem: &mut impl PhysMem,
) -> Result<(), Error> {
    if len == 0 {
        return Ok(());
    }
    let src = Side::known(&src, src_va, len)?;
    let dst = Side::check(dst_space, mem, dst_va, len, true)?;
    copy_sides(&src, src_va, &dst, dst_va, len, mem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmap::fake::FakeMem;
    use crate::pmap::MapFlags;
    use std::vec;
    use std::vec::Vec;

    const P: u64 = PAGE_SIZE;

    /// A space with zeroed owned pages at the given addresses and flags.
    fn space_with(mem: &mut FakeMem, pages: &[(u64, MapFlags)]) -> AddressSpace {
        let mut s = AddressSpace::new(mem, None).unwrap();
        for &(va, flags) in pages {
            let f = mem.alloc_frame().unwrap();
            mem.zero_frame(f);
            s.map(mem, va, f, flags.with_owned()).unwrap();
        }
        s
    }

    fn rw() -> MapFlags {
        MapFlags::user_owned(true, false)
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn cross_page_round_trip() {
        let mut mem = FakeMem::new();
        let base = 0x10_0000;
        let s = space_with(
            &mut mem,
            &[(base, rw()), (base + P, rw()), (base + 2 * P, rw())],
        );
        let data = pattern(2 * P as usize + 40);
        let va = base + P - 50;
        copy_to_user(&s, &mut mem, va, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        copy_from_user(&s, &mem, va, &mut back).unwrap();
        assert_eq!(back, data);
        // The bytes landed in the right frames at the right offsets.
        let (pa, _) = s.translate(&mem, base + P).unwrap();
        let mut first = [0u8; 4];
        mem.read_bytes(pa, &mut first);
        assert_eq!(first, data[50..54]);
        // Bytes before the range are untouched.
        let mut before = [0xffu8; 1];
        copy_from_user(&s, &mem, va - 1, &mut before).unwrap();
        assert_eq!(before, [0]);
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    /// `read_user_u32` reads what `copy_from_user` of 4 bytes reads, at every aligned
    /// offset of a page, and fails where it fails (unmapped, kernel-only, outside the user
    /// range), and refuses an unaligned address.
    #[test]
    fn read_user_u32_matches_copy_from_user() {
        let mut mem = FakeMem::new();
        let base = 0x10_0000;
        let kernel_only = MapFlags::kernel(true, false);
        let s = space_with(&mut mem, &[(base, rw()), (base + 2 * P, kernel_only)]);
        let data = pattern(P as usize);
        copy_to_user(&s, &mut mem, base, &data).unwrap();
        for off in (0..P).step_by(4) {
            let mut four = [0u8; 4];
            copy_from_user(&s, &mem, base + off, &mut four).unwrap();
            assert_eq!(
                read_user_u32(&s, &mem, base + off),
                Ok(u32::from_le_bytes(four))
            );
        }
        for va in [
            base + P,
            base + 2 * P,
            0,
            USER_END - 4,
            USER_END,
            u64::MAX - 3,
        ] {
            let mut four = [0u8; 4];
            let want = copy_from_user(&s, &mem, va, &mut four).map(|()| u32::from_le_bytes(four));
            assert_eq!(read_user_u32(&s, &mem, va), want, "at {va:#x}");
            assert!(want.is_err());
        }
        assert_eq!(
            read_user_u32(&s, &mem, base + 2),
            Err(Error::InvalidArgument)
        );
        s.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    /// `read_user_vec` reads what `copy_from_user` reads, across pages, and fails the same
    /// way (an unmapped page in the middle, a kernel address, an overflowing range).
    #[test]
    fn read_user_vec_matches_copy_from_user() {
        let mut mem = FakeMem::new();
        let base = 0x10_0000;
        let s = space_with(
            &mut mem,
            &[(base, rw()), (base + P, rw()), (base + 3 * P, rw())],
        );
        let data = pattern(2 * P as usize);
        copy_to_user(&s, &mut mem, base, &data).unwrap();
        for (va, len) in [
            (base, 0),
            (base + 5, 10),
            (base + P - 7, 20),
            (base, 2 * P as usize),
        ] {
            let got = read_user_vec(&s, &mem, va, len).unwrap();
            let mut want = vec![0u8; len];
            copy_from_user(&s, &mem, va, &mut want).unwrap();
            assert_eq!(got, want, "{va:#x} + {len}");
            assert_eq!(got.len(), len);
        }
        assert_eq!(
            read_user_vec(&s, &mem, base + P, 2 * P as usize + 1),
            Err(Error::BadAddress),
            "the page after the second is not mapped"
        );
        assert_eq!(
            read_user_vec(&s, &mem, USER_END - 4, 8),
            Err(Error::BadAddress)
        );
        assert_eq!(
            read_user_vec(&s, &mem, u64::MAX - 2, 8),
            Err(Error::BadAddress)
        );
        s.destroy(&mut mem);
    }

    #[test]
    fn unmapped_page_in_the_middle_writes_nothing() {
        let mut mem = FakeMem::new();
        let base = 0x10_0000;
        let s = space_with(&mut mem, &[(base, rw()), (base + 2 * P, rw())]);
        let data = pattern(3 * P as usize);
        assert_eq!(
            copy_to_user(&s, &mut mem, base, &data),
            Err(Error::BadAddress)
        );
        let mut back = vec![0xeeu8; P as usize];
        copy_from_user(&s, &mem, base, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0), "partial write");
        copy_from_user(&s, &mem, base + 2 * P, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0), "partial write");
        let mut big = vec![0u8; 3 * P as usize];
        assert_eq!(
            copy_from_user(&s, &mem, base, &mut big),
            Err(Error::BadAddress)
        );
        // Within one mapped page it works.
        copy_to_user(&s, &mut mem, base + 10, &data[..100]).unwrap();
        s.destroy(&mut mem);
    }

    #[test]
    fn read_only_page_refused_for_writes() {
        let mut mem = FakeMem::new();
        let base = 0x10_0000;
        let ro = MapFlags::user_owned(false, true);
        let s = space_with(&mut mem, &[(base, rw()), (base + P, ro)]);
        let data = pattern(200);
        assert_eq!(
            copy_to_user(&s, &mut mem, base + P - 100, &data),
            Err(Error::BadAddress)
        );
        let mut back = vec![0xeeu8; 100];
        copy_from_user(&s, &mem, base + P - 100, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0), "partial write");
        // Reading a read-only page is fine.
        let mut r = vec![0u8; 200];
        copy_from_user(&s, &mem, base + P - 100, &mut r).unwrap();
        s.destroy(&mut mem);
    }

    #[test]
    fn non_user_page_refused() {
        let mut mem = FakeMem::new();
        let base = 0x10_0000;
        let s = space_with(&mut mem, &[(base, MapFlags::kernel(true, false))]);
        let mut buf = [0u8; 8];
        assert_eq!(
            copy_from_user(&s, &mem, base, &mut buf),
            Err(Error::BadAddress)
        );
        assert_eq!(
            copy_to_user(&s, &mut mem, base, &buf),
            Err(Error::BadAddress)
        );
        s.destroy(&mut mem);
    }

    #[test]
    fn kernel_and_wrapping_addresses_refused() {
        let mut mem = FakeMem::new();
        let s = space_with(&mut mem, &[(USER_END - P, rw()), (USER_MIN, rw())]);
        let mut buf = [0u8; 16];
        for va in [
            0,
            USER_MIN - 1,
            USER_END - 8,
            USER_END,
            0x0000_8000_0000_0000,
            0xffff_8000_0000_0000,
            u64::MAX - 8,
            u64::MAX,
        ] {
            assert_eq!(
                copy_from_user(&s, &mem, va, &mut buf),
                Err(Error::BadAddress)
            );
            assert_eq!(copy_to_user(&s, &mut mem, va, &buf), Err(Error::BadAddress));
        }
        // The very last user bytes and the first are reachable.
        copy_to_user(&s, &mut mem, USER_END - 16, &buf).unwrap();
        copy_from_user(&s, &mem, USER_MIN, &mut buf).unwrap();
        s.destroy(&mut mem);
    }

    #[test]
    fn zero_length_anywhere() {
        let mut mem = FakeMem::new();
        let s = AddressSpace::new(&mut mem, None).unwrap();
        for va in [0, u64::MAX, 0xffff_8000_0000_0000, 0x1234] {
            copy_from_user(&s, &mem, va, &mut []).unwrap();
            copy_to_user(&s, &mut mem, va, &[]).unwrap();
        }
        s.destroy(&mut mem);
    }

    /// A space with `n` zeroed writable user pages from `base`.
    fn rw_pages(mem: &mut FakeMem, base: u64, n: u64) -> AddressSpace {
        space_with(
            mem,
            &(0..n).map(|i| (base + i * P, rw())).collect::<Vec<_>>(),
        )
    }

    /// A [`PhysMem`] that records every `copy_bytes` and counts byte reads and writes.
    struct Recording<'a> {
        mem: &'a mut FakeMem,
        copies: Vec<(PhysAddr, PhysAddr, usize)>,
        byte_calls: usize,
    }

    /// `copies` (a [`Recording`]'s) moved `n` bytes, each once, in chunks that lie in one
    /// frame on both sides, and nothing was written any other way.
    fn each_byte_once(copies: &[(PhysAddr, PhysAddr, usize)], byte_calls: usize, n: usize) {
        assert_eq!(copies.iter().map(|c| c.2).sum::<usize>(), n);
        assert_eq!(
            byte_calls, 0,
            "no bounce through write_bytes outside copy_bytes"
        );
        for &(d, s, len) in copies {
            assert!(
                d.frame_offset() as usize + len <= P as usize,
                "dst chunk crosses a frame"
            );
            assert!(
                s.frame_offset() as usize + len <= P as usize,
                "src chunk crosses a frame"
            );
        }
    }

    impl<'a> Recording<'a> {
        fn new(mem: &'a mut FakeMem) -> Recording<'a> {
            Recording {
                mem,
                copies: Vec::new(),
                byte_calls: 0,
            }
        }
    }

    impl PhysMem for Recording<'_> {
        fn read_u64(&self, pa: PhysAddr) -> u64 {
            self.mem.read_u64(pa)
        }
        fn write_u64(&mut self, pa: PhysAddr, v: u64) {
            self.mem.write_u64(pa, v)
        }
        fn zero_frame(&mut self, frame: PhysAddr) {
            self.mem.zero_frame(frame)
        }
        fn write_bytes(&mut self, pa: PhysAddr, bytes: &[u8]) {
            self.byte_calls += 1;
            self.mem.write_bytes(pa, bytes)
        }
        fn read_bytes(&self, pa: PhysAddr, out: &mut [u8]) {
            self.mem.read_bytes(pa, out)
        }
        fn copy_bytes(&mut self, dst: PhysAddr, src: PhysAddr, len: usize) {
            self.copies.push((dst, src, len));
            self.mem.copy_bytes(dst, src, len)
        }
        fn alloc_frame(&mut self) -> Option<PhysAddr> {
            self.mem.alloc_frame()
        }
        fn free_frame(&mut self, frame: PhysAddr) {
            self.mem.free_frame(frame)
        }
    }

    fn read_back(s: &AddressSpace, mem: &FakeMem, va: u64, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        copy_from_user(s, mem, va, &mut out).unwrap();
        out
    }

    #[test]
    fn user_to_user_across_spaces_once_per_byte() {
        let mut mem = FakeMem::new();
        let (a, b) = (0x10_0000, 0x40_0000);
        let src = rw_pages(&mut mem, a, 5);
        let dst = rw_pages(&mut mem, b, 5);
        let n = 3 * P as usize + 100;
        let data = pattern(n);
        let (sva, dva) = (a + P - 50, b + P - 3000);
        copy_to_user(&src, &mut mem, sva, &data).unwrap();
        let mut rec = Recording::new(&mut mem);
        copy_user_to_user(&src, sva, &dst, dva, n, &mut rec).unwrap();
        let (copies, byte_calls) = (rec.copies, rec.byte_calls);
        // Every byte once, in chunks that break at either side's page boundaries.
        each_byte_once(&copies, byte_calls, n);
        // Where a page boundary falls on either side, counted from the start: each one
        // inside the range ends a chunk.
        let mut cuts: Vec<u64> = [
            50,
            50 + P,
            50 + 2 * P,
            50 + 3 * P,
            3000,
            3000 + P,
            3000 + 2 * P,
        ]
        .into_iter()
        .filter(|&c| c < n as u64)
        .collect();
        cuts.sort_unstable();
        assert_eq!(copies.len(), cuts.len() + 1);
        assert_eq!(read_back(&dst, &mem, dva, n), data);
        // Bytes around the destination range are untouched.
        assert_eq!(read_back(&dst, &mem, dva - 1, 1), [0]);
        assert_eq!(read_back(&dst, &mem, dva + n as u64, 1), [0]);
        src.destroy(&mut mem);
        dst.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    /// The frames of `pages` pages of `space` from `va`.
    fn frames_of(space: &AddressSpace, mem: &FakeMem, va: u64, pages: u64) -> Vec<PhysAddr> {
        (0..pages)
            .map(|i| space.translate(mem, va + i * P).unwrap().0)
            .collect()
    }

    #[test]
    fn known_frames_round_trip_once_per_byte() {
        let mut mem = FakeMem::new();
        let (a, b) = (0x10_0000, 0x40_0000);
        let client = rw_pages(&mut mem, a, 5);
        let server = rw_pages(&mut mem, b, 4);
        let frames = frames_of(&server, &mem, b, 4);
        let known = Frames {
            va: b,
            frames: &frames,
        };
        let n = 3 * P as usize + 100;
        let data = pattern(n);
        let cva = a + P - 50;
        copy_to_user(&client, &mut mem, cva, &data).unwrap();
        // Into the known buffer, at an offset that is not page-aligned.
        let mut rec = Recording::new(&mut mem);
        copy_user_to_frames(&client, cva, known, b + 32, n, &mut rec).unwrap();
        let (copies, byte_calls) = (rec.copies, rec.byte_calls);
        each_byte_once(&copies, byte_calls, n);
        assert_eq!(read_back(&server, &mem, b + 32, n), data);
        assert_eq!(read_back(&server, &mem, b + 31, 1), [0]);
        // And back out, to another place of the client.
        let back = a + 2 * P + 9;
        let m = 2 * P as usize;
        copy_frames_to_user(known, b + 32, &client, back, m, &mut mem).unwrap();
        assert_eq!(
            read_back(&client, &mem, back, m),
            data.get(..m).unwrap().to_vec()
        );
        client.destroy(&mut mem);
        server.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn known_frames_refuse_ranges_outside_and_bad_user_memory() {
        let mut mem = FakeMem::new();
        let (a, b) = (0x10_0000, 0x40_0000);
        let client = space_with(&mut mem, &[(a, rw()), (a + P, rw())]);
        let server = space_with(&mut mem, &[(b, rw()), (b + P, rw())]);
        let frames = frames_of(&server, &mem, b, 2);
        let known = Frames {
            va: b,
            frames: &frames,
        };
        let data = pattern(2 * P as usize);
        copy_to_user(&client, &mut mem, a, &data).unwrap();
        let bad = Err(Error::BadAddress);
        // Past the known buffer's end, before its start, and wrapping.
        assert_eq!(
            copy_user_to_frames(&client, a, known, b + 1, 2 * P as usize, &mut mem),
            bad
        );
        assert_eq!(
            copy_user_to_frames(&client, a, known, b - 1, 10, &mut mem),
            bad
        );
        assert_eq!(
            copy_user_to_frames(&client, a, known, u64::MAX - 4, 10, &mut mem),
            bad
        );
        // An unmapped source page, an unmapped destination page.
        assert_eq!(
            copy_user_to_frames(&client, a + P, known, b, 2 * P as usize, &mut mem),
            bad
        );
        assert_eq!(
            copy_frames_to_user(known, b, &client, a + P, 2 * P as usize, &mut mem),
            bad
        );
        // Nothing was written by any of them.
        assert_eq!(
            read_back(&server, &mem, b, 2 * P as usize),
            vec![0; 2 * P as usize]
        );
        // Zero bytes is always fine.
        copy_user_to_frames(&client, 0, known, 0, 0, &mut mem).unwrap();
        copy_frames_to_user(known, 0, &client, 0, 0, &mut mem).unwrap();
        client.destroy(&mut mem);
        server.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn user_to_user_aligned_pages_are_whole_chunks() {
        let mut mem = FakeMem::new();
        let (a, b) = (0x10_0000, 0x40_0000);
        let src = rw_pages(&mut mem, a, 8);
        let dst = rw_pages(&mut mem, b, 8);
        // 32 KiB of data after a 32-byte header on both sides: both sides break at the
        // same places (nine chunks: 4064, then seven pages, then 32).
        let n = 32 * 1024;
        let data = pattern(n);
        let mut rec = Recording::new(&mut mem);
        let r = copy_user_to_user(&src, a + 32, &dst, b + 32, n, &mut rec);
        // The source's last 32 bytes lie past its eighth page: refused, nothing written.
        assert_eq!(r, Err(Error::BadAddress));
        assert!(rec.copies.is_empty());
        let n = 32 * 1024 - 32;
        copy_to_user(&src, &mut mem, a + 32, &data[..n]).unwrap();
        let mut rec = Recording::new(&mut mem);
        copy_user_to_user(&src, a + 32, &dst, b + 32, n, &mut rec).unwrap();
        let lens: Vec<usize> = rec.copies.iter().map(|c| c.2).collect();
        assert_eq!(lens, [vec![4064], vec![4096; 7]].concat());
        assert_eq!(read_back(&dst, &mem, b + 32, n), &data[..n]);
        src.destroy(&mut mem);
        dst.destroy(&mut mem);
    }

    #[test]
    fn user_to_user_longer_than_the_remembered_frames() {
        // 20 pages, unaligned on both sides (21 pages each): the pages past FRAMES are
        // walked again during the copy.
        let mut mem = FakeMem::new();
        let (a, b) = (0x10_0000, 0x40_0000);
        let pages = |base: u64| (0..22).map(|i| (base + i * P, rw())).collect::<Vec<_>>();
        let src = space_with(&mut mem, &pages(a));
        let dst = space_with(&mut mem, &pages(b));
        let n = 20 * P as usize;
        assert!(n / P as usize + 1 > FRAMES);
        let data = pattern(n);
        copy_to_user(&src, &mut mem, a + 100, &data).unwrap();
        copy_user_to_user(&src, a + 100, &dst, b + 4000, n, &mut mem).unwrap();
        assert_eq!(read_back(&dst, &mem, b + 4000, n), data);
        src.destroy(&mut mem);
        dst.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn user_to_user_checks_both_sides_first() {
        let mut mem = FakeMem::new();
        let (a, b) = (0x10_0000, 0x40_0000);
        let ro = MapFlags::user_owned(false, true);
        let src = space_with(
            &mut mem,
            &[
                (a, rw()),
                (a + P, rw()),
                (a + 2 * P, rw()),
                (a + 4 * P, rw()),
            ],
        );
        let dst = space_with(
            &mut mem,
            &[
                (b, rw()),
                (b + P, rw()),
                (b + 2 * P, ro),
                (b + 4 * P, rw()),
                (b + 5 * P, MapFlags::kernel(true, false)),
            ],
        );
        let data = pattern(3 * P as usize);
        copy_to_user(&src, &mut mem, a, &data).unwrap();
        let untouched = |mem: &FakeMem, dst: &AddressSpace| {
            read_back(dst, mem, b, 2 * P as usize)
                .iter()
                .all(|&x| x == 0)
                && read_back(dst, mem, b + 2 * P, P as usize)
                    .iter()
                    .all(|&x| x == 0)
        };
        let cases: [(u64, u64, usize); 8] = [
            // A read-only destination page at the end.
            (a, b, 3 * P as usize),
            // An unmapped destination page in the middle.
            (a, b + 2 * P + 100, 2 * P as usize),
            // A kernel-only destination page.
            (a, b + 4 * P + 8, P as usize),
            // An unmapped source page in the middle (destination fine).
            (a + 2 * P, b, 2 * P as usize + 10),
            // Kernel-half and wrapping addresses on either side.
            (0xffff_8000_0000_0000, b, 16),
            (a, 0xffff_8000_0000_0000, 16),
            (a, u64::MAX - 8, 16),
            (USER_END - 8, b, 16),
        ];
        for (s, d, n) in cases {
            let mut rec = Recording::new(&mut mem);
            assert_eq!(
                copy_user_to_user(&src, s, &dst, d, n, &mut rec),
                Err(Error::BadAddress),
                "{s:#x} -> {d:#x} ({n})"
            );
            assert!(
                rec.copies.is_empty() && rec.byte_calls == 0,
                "wrote something"
            );
            assert!(untouched(&mem, &dst));
        }
        // Zero bytes go anywhere; a read-only source is fine.
        copy_user_to_user(&src, u64::MAX, &dst, 0, 0, &mut mem).unwrap();
        copy_user_to_user(&dst, b + 2 * P, &src, a + 4 * P, 64, &mut mem).unwrap();
        // Within one space.
        copy_user_to_user(&src, a, &src, a + P + 7, 100, &mut mem).unwrap();
        assert_eq!(read_back(&src, &mem, a + P + 7, 100), &data[..100]);
        src.destroy(&mut mem);
        dst.destroy(&mut mem);
        assert_eq!(mem.live(), 0);
    }

    #[test]
    fn chunking_splits_at_pages() {
        let c: Vec<_> = chunks(0x1ffe, 0x3003).collect();
        assert_eq!(
            c,
            vec![(0x1ffe, 0, 2), (0x2000, 2, 0x1000), (0x3000, 0x1002, 3)]
        );
        let c: Vec<_> = chunks(0x1000, 0x2000).collect();
        assert_eq!(c, vec![(0x1000, 0, 0x1000)]);
        assert_eq!(chunks(5, 5).count(), 0);
    }
}
