//! Checked access to user memory: the only way the kernel reads or writes it.
//!
//! A user address is an allegation until checked. [`copy_from_user`] and [`copy_to_user`]
//! check the whole range against the user half of the address space and walk the page
//! tables of the given [`AddressSpace`] for every page, then copy through [`PhysMem`], page
//! by page. They never dereference a user pointer, so they work whatever address space is
//! loaded in CR3 and cannot fault.
//!
//! # Invariants
//! - A copy touches only bytes in `[USER_MIN, USER_END)` of pages whose effective
//!   permissions (every page-table level) include `USER`, and `WRITABLE` for writes.
//!   Anything else is [`Error::BadAddress`], including ranges that wrap past `u64::MAX`.
//! - [`copy_to_user`] validates every page before writing a byte: it writes all or nothing.
//!   [`copy_from_user`] may have filled part of `out` when it fails; `out` is kernel memory,
//!   so that is harmless, and its contents are then unspecified.
//! - Each [`PhysMem::read_bytes`] or [`PhysMem::write_bytes`] call stays inside one page.
//! - Zero-length copies succeed at any address without looking at the page tables.

use crate::frame::PAGE_SIZE;
use crate::pmap::{AddressSpace, PhysMem};
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

/// Checks that `len` bytes at user address `va` of `space` could be written: in the user
/// range, mapped present, user-accessible and writable ([`Error::BadAddress`] if not).
pub fn check_writable(
    space: &AddressSpace,
    mem: &impl PhysMem,
    va: u64,
    len: usize,
) -> Result<(), Error> {
    if len == 0 {
        return Ok(());
    }
    let end = user_range(va, len)?;
    for (addr, _, _) in chunks(va, end) {
        match space.translate(mem, addr) {
            Some((_, flags)) if flags.user && flags.writable => {}
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
