//! Memory objects as capabilities (Accent's memory objects, `docs/vm.md`): the constants,
//! the `vm_map` flags and the `memobj_info` record of calls 110–119.
//!
//! A memory object is named by a send right to its kernel-object port. Each such port
//! carries a maximum protection: `memobj_restrict` makes a new port for the same object
//! with a lower one (a read-only right derived from a full one), and `vm_map` through a
//! right never maps more than the right allows. The object lives while a right or a
//! mapping names it: when the last send right to a port goes, the port goes with it, and
//! the mappings keep the memory.

use crate::vm::{INHERIT_COPY, INHERIT_NONE, INHERIT_SHARE, PROT_EXECUTE, PROT_READ, PROT_WRITE};

/// Largest anonymous object (`memobj_create`), as `mem_map`'s limit: 1 GiB.
pub const SIZE_MAX: u64 = 1 << 30;
/// Largest DMA buffer (`memobj_dma`): 4 MiB of contiguous frames.
pub const DMA_MAX: u64 = 4 << 20;
/// Largest physical object (`memobj_physical`): 256 MiB.
pub const PHYS_SIZE_MAX: u64 = 256 << 20;
/// Physical objects lie below this address (the 32-bit physical space the kernel's direct
/// map always covers, where devices' registers are).
pub const PHYS_LIMIT: u64 = 4 << 30;
/// Most bytes one `vm_read` or `vm_write` moves.
pub const RW_MAX: u64 = 64 << 10;
/// Most memory-object ports that exist at once (each charged to its maker).
pub const PORTS_MAX: usize = 4096;

/// `memobj_physical` flag: map without caching (device registers).
pub const PHYS_UNCACHED: u64 = 1;

/// `vm_map` flags: the protection (`vm::PROT_*`) in bits 0–2.
pub const MAP_PROT_SHIFT: u32 = 0;
/// `vm_map` flags: the maximum protection in bits 4–6.
pub const MAP_MAX_SHIFT: u32 = 4;
/// `vm_map` flag: map a copy-on-write snapshot of the window rather than the object
/// itself (writes are the mapping's own; later writes to the object are not seen).
pub const MAP_COPY: u64 = 1 << 8;
/// `vm_map` flags: the inheritance (`vm::INHERIT_*`) in bits 12–13.
pub const MAP_INHERIT_SHIFT: u32 = 12;
/// Every bit `vm_map` flags may have.
pub const MAP_FLAGS_MASK: u64 = 0x7 | 0x7 << MAP_MAX_SHIFT | MAP_COPY | 0x3 << MAP_INHERIT_SHIFT;

/// Every protection bit.
const PROT_ALL: u64 = PROT_READ | PROT_WRITE | PROT_EXECUTE;

/// The `vm_map` flags word for protection `prot`, maximum `max_prot`, copy-on-write `copy`
/// and inheritance `inherit`.
pub const fn map_flags(prot: u64, max_prot: u64, copy: bool, inherit: u64) -> u64 {
    (prot & PROT_ALL) << MAP_PROT_SHIFT
        | (max_prot & PROT_ALL) << MAP_MAX_SHIFT
        | if copy { MAP_COPY } else { 0 }
        | (inherit & 3) << MAP_INHERIT_SHIFT
}

/// A decoded `vm_map` flags word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapRequest {
    /// `PROT_*` bits.
    pub prot: u64,
    /// `PROT_*` bits.
    pub max_prot: u64,
    /// A copy-on-write snapshot.
    pub copy: bool,
    /// `INHERIT_*`.
    pub inherit: u64,
}

impl MapRequest {
    /// Decodes `flags`: `None` for unknown bits, an unknown inheritance, or a protection
    /// above the maximum.
    pub const fn decode(flags: u64) -> Option<MapRequest> {
        if flags & !MAP_FLAGS_MASK != 0 {
            return None;
        }
        let prot = flags >> MAP_PROT_SHIFT & PROT_ALL;
        let max_prot = flags >> MAP_MAX_SHIFT & PROT_ALL;
        let inherit = flags >> MAP_INHERIT_SHIFT & 3;
        if !matches!(inherit, INHERIT_SHARE | INHERIT_COPY | INHERIT_NONE) {
            return None;
        }
        if prot & !max_prot != 0 {
            return None;
        }
        Some(MapRequest {
            prot,
            max_prot,
            copy: flags & MAP_COPY != 0,
            inherit,
        })
    }
}

/// [`MemobjInfo::kind`]: anonymous memory (`memobj_create`).
pub const KIND_ANONYMOUS: u64 = 0;
/// [`MemobjInfo::kind`]: a physical range (`memobj_physical`).
pub const KIND_PHYSICAL: u64 = 1;
/// [`MemobjInfo::kind`]: a DMA buffer (`memobj_dma`).
pub const KIND_DMA: u64 = 2;

/// What `memobj_info` writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemobjInfo {
    /// Bytes.
    pub size: u64,
    /// `KIND_*`.
    pub kind: u64,
    /// The most a mapping through this right may allow (`PROT_*`).
    pub max_prot: u64,
    /// The physical address of the first byte (physical objects and DMA buffers; 0 for
    /// anonymous memory, whose frames are nobody's business).
    pub phys: u64,
    /// [`PHYS_UNCACHED`] for an uncached physical object.
    pub flags: u64,
    /// Pages resident in the object.
    pub resident: u64,
}

/// Words of a [`MemobjInfo`].
pub const INFO_WORDS: usize = 6;
/// Bytes of a [`MemobjInfo`].
pub const INFO_SIZE: usize = INFO_WORDS * 8;

impl MemobjInfo {
    /// The fields as words, in wire order.
    pub const fn to_words(&self) -> [u64; INFO_WORDS] {
        [
            self.size,
            self.kind,
            self.max_prot,
            self.phys,
            self.flags,
            self.resident,
        ]
    }

    /// The wire form (little-endian words in field order).
    pub fn to_bytes(&self) -> [u8; INFO_SIZE] {
        let mut b = [0u8; INFO_SIZE];
        for (dst, v) in b.chunks_exact_mut(8).zip(self.to_words()) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Parses the wire form.
    pub fn from_bytes(b: &[u8]) -> Option<MemobjInfo> {
        let mut w = [0u64; INFO_WORDS];
        for (i, slot) in w.iter_mut().enumerate() {
            let at = i * 8;
            *slot = u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?);
        }
        let [size, kind, max_prot, phys, flags, resident] = w;
        Some(MemobjInfo {
            size,
            kind,
            max_prot,
            phys,
            flags,
            resident,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_pinned() {
        assert_eq!(
            (MAP_PROT_SHIFT, MAP_MAX_SHIFT, MAP_COPY, MAP_INHERIT_SHIFT),
            (0, 4, 0x100, 12)
        );
        assert_eq!(MAP_FLAGS_MASK, 0x3177);
        assert_eq!([KIND_ANONYMOUS, KIND_PHYSICAL, KIND_DMA], [0, 1, 2]);
        assert_eq!(PHYS_UNCACHED, 1);
        assert_eq!((SIZE_MAX, DMA_MAX, RW_MAX), (1 << 30, 4 << 20, 65536));
        assert_eq!(INFO_SIZE, 48);
    }

    #[test]
    fn flags_round_trip_and_bad_ones_are_refused() {
        for prot in 0..8 {
            for max in 0..8 {
                for copy in [false, true] {
                    for inherit in 0..4 {
                        let f = map_flags(prot, max, copy, inherit);
                        let d = MapRequest::decode(f);
                        let ok = prot & !max == 0 && inherit < 3;
                        assert_eq!(d.is_some(), ok, "{prot} {max} {copy} {inherit}");
                        if let Some(d) = d {
                            assert_eq!(
                                (d.prot, d.max_prot, d.copy, d.inherit),
                                (prot, max, copy, inherit)
                            );
                        }
                    }
                }
            }
        }
        assert_eq!(MapRequest::decode(1 << 3 | 0x70), None);
        assert_eq!(MapRequest::decode(1 << 63), None);
    }

    #[test]
    fn info_round_trips() {
        let i = MemobjInfo {
            size: 1,
            kind: 2,
            max_prot: 3,
            phys: 4,
            flags: 5,
            resident: 6,
        };
        assert_eq!(MemobjInfo::from_bytes(&i.to_bytes()), Some(i));
        assert_eq!(MemobjInfo::from_bytes(&[0; INFO_SIZE - 1]), None);
    }
}
