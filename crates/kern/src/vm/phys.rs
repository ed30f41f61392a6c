//! Which physical ranges a physical memory object may name.
//!
//! A physical object (device registers, `memobj_physical`) is made only with the
//! host-privilege right, and even then never over RAM: every byte of RAM belongs to the
//! kernel (its image, heap, page tables, and the frames it hands to objects), so a range
//! touching any usable RAM range of the boot memory map, or a range the kernel drives
//! itself (the local and I/O APICs), is refused. Ranges lie below a limit the kernel's
//! direct map covers, so the kernel's own copies through such a mapping cannot fault.

use super::page_aligned;
use baton_abi::Error;
use core::ops::Range;

/// Checks `[base, base + size)` for a physical object: page aligned and non-empty
/// ([`Error::InvalidArgument`]), at most `size_max` ([`Error::TooLarge`]), below `limit`
/// and not wrapping ([`Error::InvalidArgument`]), touching none of the `owned` ranges (RAM,
/// the kernel's devices: [`Error::Denied`]). Returns the end.
pub fn check_range(
    owned: &[Range<u64>],
    base: u64,
    size: u64,
    size_max: u64,
    limit: u64,
) -> Result<u64, Error> {
    if size == 0 || !page_aligned(base) || !page_aligned(size) {
        return Err(Error::InvalidArgument);
    }
    if size > size_max {
        return Err(Error::TooLarge);
    }
    let end = base.checked_add(size).ok_or(Error::InvalidArgument)?;
    if end > limit {
        return Err(Error::InvalidArgument);
    }
    if owned.iter().any(|r| r.start < end && base < r.end) {
        return Err(Error::Denied);
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMIT: u64 = 4 << 30;

    #[test]
    fn ram_and_bad_ranges_are_refused() {
        let owned = [
            0x1000..0x9f000,
            0x10_0000..0x1000_0000,
            0xfee0_0000..0xfee0_1000,
        ];
        let ok = |b, s| check_range(&owned, b, s, 1 << 28, LIMIT);
        assert_eq!(ok(0xb8000, 0x1000), Ok(0xb9000));
        assert_eq!(ok(0xfd00_0000, 0x10000), Ok(0xfd01_0000));
        assert_eq!(ok(0x9f000, 0x1000), Ok(0xa0000), "just above RAM");
        assert_eq!(ok(0x9e000, 0x2000), Err(Error::Denied), "half in RAM");
        assert_eq!(ok(0x0800_0000, 0x1000), Err(Error::Denied));
        assert_eq!(
            ok(0xfee0_0000, 0x1000),
            Err(Error::Denied),
            "the local APIC"
        );
        assert_eq!(ok(0xb8001, 0x1000), Err(Error::InvalidArgument));
        assert_eq!(ok(0xb8000, 0x1001), Err(Error::InvalidArgument));
        assert_eq!(ok(0xb8000, 0), Err(Error::InvalidArgument));
        assert_eq!(ok(0xb8000, 1 << 29), Err(Error::TooLarge));
        assert_eq!(ok(LIMIT - 0x1000, 0x2000), Err(Error::InvalidArgument));
        assert_eq!(ok(!0xfff, 0x1000_0000), Err(Error::InvalidArgument));
    }

    proptest! {
        /// Against a page-by-page model: accepted exactly when every page is outside
        /// every owned range.
        #[test]
        fn matches_a_page_model(
            base in 0u64..64, pages in 0u64..16,
            owned in proptest::collection::vec((0u64..64, 1u64..8), 0..4),
        ) {
            let owned: std::vec::Vec<Range<u64>> = owned
                .into_iter()
                .map(|(s, n)| s * 4096..(s + n) * 4096)
                .collect();
            let got = check_range(&owned, base * 4096, pages * 4096, 8 * 4096, 80 * 4096);
            let want = if pages == 0 {
                Err(Error::InvalidArgument)
            } else if pages > 8 {
                Err(Error::TooLarge)
            } else if (base..base + pages)
                .any(|p| owned.iter().any(|r| r.contains(&(p * 4096))))
            {
                Err(Error::Denied)
            } else {
                Ok((base + pages) * 4096)
            };
            prop_assert_eq!(got, want);
        }
    }
}
