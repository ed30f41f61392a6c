//! Virtual memory (Accent's address maps, `docs/vm.md`): the `vm_*` calls' constants and
//! structures, and the fault classes of Accent's Table 3-10 as the exception message and
//! the statistics call carry them.
//!
//! A page fault that cannot be satisfied is sent to the exception port (or ends the task
//! with a report) as today's faults are, with its class in bits 32 and up of
//! `ExceptionInfo::error` ([`FAULT_CLASS_SHIFT`]; the CPU's error code stays in the low
//! 32 bits).

/// `vm_allocate`'s address meaning "wherever there is room".
pub const VM_ANYWHERE: u64 = 0;

/// Protection bit: loads.
pub const PROT_READ: u64 = 1;
/// Protection bit: stores.
pub const PROT_WRITE: u64 = 2;
/// Protection bit: instruction fetches.
pub const PROT_EXECUTE: u64 = 4;

/// Inheritance: a fork-style copy shares the memory.
pub const INHERIT_SHARE: u64 = 0;
/// Inheritance: a fork-style copy gets a copy-on-write copy (the default).
pub const INHERIT_COPY: u64 = 1;
/// Inheritance: a fork-style copy gets a hole.
pub const INHERIT_NONE: u64 = 2;

/// `VmRegion::object`: an anonymous object (zero-filled memory).
pub const OBJECT_ANONYMOUS: u64 = 0;
/// `VmRegion::object`: a shadow object (a copy-on-write copy's own pages).
pub const OBJECT_SHADOW: u64 = 1;
/// `VmRegion::object`: physical memory.
pub const OBJECT_PHYSICAL: u64 = 2;
/// `VmRegion::object`: a pager-backed object.
pub const OBJECT_PAGER: u64 = 3;

/// `vm_copy` flag: remove the source's whole pages (Accent's DeleteSource: a move).
pub const VM_COPY_DELETE: u64 = 1;
/// `vm_copy` flag: copy into new memory wherever there is room (Accent's
/// CreateDestination); without it the copy goes over a given destination range.
pub const VM_COPY_CREATE: u64 = 2;

/// `vm_stats` scope: the calling task's counts.
pub const STATS_TASK: u64 = 0;
/// `vm_stats` scope: the whole system's.
pub const STATS_SYSTEM: u64 = 1;

/// Where a page fault's class sits in `ExceptionInfo::error`.
pub const FAULT_CLASS_SHIFT: u32 = 32;
/// Fault class: no range maps the address.
pub const FAULT_ADDRESS_ERROR: u64 = 1;
/// Fault class: the range's protection forbids the access (Accent's write error).
pub const FAULT_WRITE_ERROR: u64 = 2;
/// Fault class: the page's pager is gone.
pub const FAULT_PAGER_ERROR: u64 = 3;
/// Fault class: the kernel could not get a frame, page table or record for the page.
pub const FAULT_NO_MEMORY: u64 = 4;

/// The name of a fault class code.
pub const fn fault_class_name(code: u64) -> &'static str {
    match code {
        FAULT_ADDRESS_ERROR => "address error",
        FAULT_WRITE_ERROR => "write error",
        FAULT_PAGER_ERROR => "pager error",
        FAULT_NO_MEMORY => "no memory",
        _ => "unknown",
    }
}

/// Reads `N` little-endian words.
fn words<const N: usize>(b: &[u8]) -> Option<[u64; N]> {
    let mut w = [0u64; N];
    for (i, slot) in w.iter_mut().enumerate() {
        let at = i * 8;
        *slot = u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?);
    }
    Some(w)
}

fn to_bytes<const N: usize, const B: usize>(w: [u64; N]) -> [u8; B] {
    let mut b = [0u8; B];
    for (dst, v) in b.chunks_exact_mut(8).zip(w.iter()) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// What `vm_query` writes: the region containing the address, or the next one above.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmRegion {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Protection ([`PROT_READ`] | [`PROT_WRITE`] | [`PROT_EXECUTE`]).
    pub prot: u64,
    /// The most `prot` may become.
    pub max_prot: u64,
    /// [`INHERIT_SHARE`], [`INHERIT_COPY`] or [`INHERIT_NONE`].
    pub inherit: u64,
    /// The kind of object mapped (`OBJECT_*`).
    pub object: u64,
    /// Pages of the region resident in its own object.
    pub resident: u64,
    /// How many times the region is wired (by the task or for the kernel's caches).
    pub wired: u64,
    /// 1 when the region is a copy-on-write snapshot not written yet.
    pub copy_on_write: u64,
}

/// Bytes of a [`VmRegion`].
pub const VM_REGION_SIZE: usize = 9 * 8;

impl VmRegion {
    /// The wire form (little-endian words in field order).
    pub fn to_bytes(&self) -> [u8; VM_REGION_SIZE] {
        to_bytes([
            self.start,
            self.end,
            self.prot,
            self.max_prot,
            self.inherit,
            self.object,
            self.resident,
            self.wired,
            self.copy_on_write,
        ])
    }

    /// Parses the wire form.
    pub fn from_bytes(b: &[u8]) -> Option<VmRegion> {
        let [start, end, prot, max_prot, inherit, object, resident, wired, copy_on_write] =
            words::<9>(b)?;
        Some(VmRegion {
            start,
            end,
            prot,
            max_prot,
            inherit,
            object,
            resident,
            wired,
            copy_on_write,
        })
    }
}

/// What `vm_stats` writes: faults by Accent's Table 3-10 class, and memory counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct VmStats {
    /// Faults taken (page faults and the kernel's own faults on user memory).
    pub faults: u64,
    pub read_faults: u64,
    pub write_faults: u64,
    pub execute_faults: u64,
    pub address_errors: u64,
    pub write_errors: u64,
    pub zero_fills: u64,
    pub memory_fills: u64,
    pub pager_fills: u64,
    pub cow_copies: u64,
    pub cow_reclaims: u64,
    /// Pages those reclaims gave write access back to: the pages the entry's object held
    /// in the entry's window (resident or paged out), and the faulting page when the
    /// fault filled it there (Accent's Table 3-10, "CopyOnWrite reclaims of N pages").
    pub cow_reclaimed_pages: u64,
    /// Resident pages (the task's mapped ones; or every object's).
    pub resident: u64,
    /// Map entries (the task's; or every task's).
    pub entries: u64,
    /// Memory objects in the system.
    pub objects: u64,
    /// Free physical frames in the system.
    pub frames_free: u64,
}

/// Words of a [`VmStats`].
pub const VM_STATS_WORDS: usize = 16;
/// Bytes of a [`VmStats`].
pub const VM_STATS_SIZE: usize = VM_STATS_WORDS * 8;

impl VmStats {
    /// The field names, in wire order.
    pub const FIELD_NAMES: [&'static str; VM_STATS_WORDS] = [
        "faults",
        "read_faults",
        "write_faults",
        "execute_faults",
        "address_errors",
        "write_errors",
        "zero_fills",
        "memory_fills",
        "pager_fills",
        "cow_copies",
        "cow_reclaims",
        "cow_reclaimed_pages",
        "resident",
        "entries",
        "objects",
        "frames_free",
    ];

    /// The fields as words, in wire order.
    pub const fn to_words(&self) -> [u64; VM_STATS_WORDS] {
        [
            self.faults,
            self.read_faults,
            self.write_faults,
            self.execute_faults,
            self.address_errors,
            self.write_errors,
            self.zero_fills,
            self.memory_fills,
            self.pager_fills,
            self.cow_copies,
            self.cow_reclaims,
            self.cow_reclaimed_pages,
            self.resident,
            self.entries,
            self.objects,
            self.frames_free,
        ]
    }

    /// The wire form.
    pub fn to_bytes(&self) -> [u8; VM_STATS_SIZE] {
        to_bytes(self.to_words())
    }

    /// Parses the wire form.
    pub fn from_bytes(b: &[u8]) -> Option<VmStats> {
        let w = words::<VM_STATS_WORDS>(b)?;
        Some(VmStats {
            faults: w[0],
            read_faults: w[1],
            write_faults: w[2],
            execute_faults: w[3],
            address_errors: w[4],
            write_errors: w[5],
            zero_fills: w[6],
            memory_fills: w[7],
            pager_fills: w[8],
            cow_copies: w[9],
            cow_reclaims: w[10],
            cow_reclaimed_pages: w[11],
            resident: w[12],
            entries: w[13],
            objects: w[14],
            frames_free: w[15],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_pinned() {
        assert_eq!(
            [VM_ANYWHERE, PROT_READ, PROT_WRITE, PROT_EXECUTE],
            [0, 1, 2, 4]
        );
        assert_eq!([INHERIT_SHARE, INHERIT_COPY, INHERIT_NONE], [0, 1, 2]);
        assert_eq!(
            [
                OBJECT_ANONYMOUS,
                OBJECT_SHADOW,
                OBJECT_PHYSICAL,
                OBJECT_PAGER
            ],
            [0, 1, 2, 3]
        );
        assert_eq!([STATS_TASK, STATS_SYSTEM], [0, 1]);
        assert_eq!(FAULT_CLASS_SHIFT, 32);
        assert_eq!(
            [
                FAULT_ADDRESS_ERROR,
                FAULT_WRITE_ERROR,
                FAULT_PAGER_ERROR,
                FAULT_NO_MEMORY
            ],
            [1, 2, 3, 4]
        );
        assert_eq!((VM_REGION_SIZE, VM_STATS_SIZE), (72, 128));
        assert_eq!(fault_class_name(FAULT_WRITE_ERROR), "write error");
        assert_eq!(fault_class_name(99), "unknown");
    }

    #[test]
    fn structures_round_trip() {
        let r = VmRegion {
            start: 1,
            end: 2,
            prot: 3,
            max_prot: 4,
            inherit: 5,
            object: 6,
            resident: 7,
            wired: 8,
            copy_on_write: 9,
        };
        assert_eq!(VmRegion::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(VmRegion::from_bytes(&[0; 71]), None);
        let mut w = [0u64; VM_STATS_WORDS];
        for (i, v) in w.iter_mut().enumerate() {
            *v = i as u64 + 1;
        }
        let s = VmStats::from_bytes(&to_bytes::<VM_STATS_WORDS, VM_STATS_SIZE>(w)).unwrap();
        assert_eq!(s.to_words(), w);
        assert_eq!(VmStats::from_bytes(&s.to_bytes()), Some(s));
    }
}
