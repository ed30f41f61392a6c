//! Baton's disk layout (`docs/drivers.md`, "The disk's layout").
//!
//! A disk Baton uses for more than raw blocks carries a classic PC partition table (a
//! master boot record) in sector 0 with two primary partitions:
//!
//! | entry | type | what |
//! |---|---|---|
//! | 1 | [`TYPE_FILES`] | the file system the file server serves |
//! | 2 | [`TYPE_SWAP`] | the default pager's swap area |
//!
//! The same definitions serve both sides: `cargo xtask` writes the table into every disk
//! image it makes ([`write_table`]), and the programs on Baton that own a partition find
//! theirs with [`find`]. A table that does not parse (no boot signature, a partition
//! outside the disk, partitions overlapping) is refused with a [`LayoutError`], never
//! trusted.
#![no_std]

/// The disk's sector size, in bytes.
pub const SECTOR: u64 = 512;

/// Partition type of the file system (FAT32 with LBA addressing).
pub const TYPE_FILES: u8 = 0x0c;
/// Partition type of the swap area (the type Linux gives swap).
pub const TYPE_SWAP: u8 = 0x82;

/// The first partition starts here (1 MiB, the usual alignment).
pub const FIRST_SECTOR: u64 = 2048;
/// Sectors of the file system in the layout [`standard`] makes: 32 MiB.
pub const FILES_SECTORS: u64 = (32 << 20) / SECTOR;

/// Where the table's four entries start in sector 0.
const TABLE_OFFSET: usize = 446;
/// Bytes per entry.
const ENTRY_SIZE: usize = 16;
/// Entries in the table.
pub const ENTRIES: usize = 4;

/// One partition: its type and where it lies, in sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    pub kind: u8,
    pub start: u64,
    pub sectors: u64,
}

impl Partition {
    /// One past its last sector.
    pub fn end(&self) -> u64 {
        self.start + self.sectors
    }
}

/// Why a sector 0 is not a table Baton accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// No 0x55 0xAA boot signature: not a partition table at all.
    NoSignature,
    /// A partition reaches past the disk's end or into sector 0.
    OutOfDisk,
    /// Two partitions share sectors.
    Overlap,
    /// No partition of the type asked for.
    Missing,
    /// The disk is too small for the standard layout.
    TooSmall,
}

/// The standard layout of a disk of `capacity` sectors: the file system from
/// [`FIRST_SECTOR`] for [`FILES_SECTORS`], the swap area from there to the disk's end.
pub fn standard(capacity: u64) -> Result<[Partition; 2], LayoutError> {
    let swap_start = FIRST_SECTOR + FILES_SECTORS;
    if capacity <= swap_start {
        return Err(LayoutError::TooSmall);
    }
    Ok([
        Partition {
            kind: TYPE_FILES,
            start: FIRST_SECTOR,
            sectors: FILES_SECTORS,
        },
        Partition {
            kind: TYPE_SWAP,
            start: swap_start,
            sectors: capacity - swap_start,
        },
    ])
}

/// Writes a table holding `parts` (at most [`ENTRIES`]) into `sector0`, leaving its first
/// 446 bytes (boot code) as they are. Sizes past 32 bits are refused.
pub fn write_table(sector0: &mut [u8; 512], parts: &[Partition]) -> Result<(), LayoutError> {
    if parts.len() > ENTRIES {
        return Err(LayoutError::OutOfDisk);
    }
    sector0[TABLE_OFFSET..510].fill(0);
    for (i, p) in parts.iter().enumerate() {
        let start = u32::try_from(p.start).map_err(|_| LayoutError::OutOfDisk)?;
        let sectors = u32::try_from(p.sectors).map_err(|_| LayoutError::OutOfDisk)?;
        let e = &mut sector0[TABLE_OFFSET + i * ENTRY_SIZE..][..ENTRY_SIZE];
        // Status 0 (not bootable); the CHS fields say "use LBA" (0xfe 0xff 0xff).
        e[1..4].copy_from_slice(&[0xfe, 0xff, 0xff]);
        e[4] = p.kind;
        e[5..8].copy_from_slice(&[0xfe, 0xff, 0xff]);
        e[8..12].copy_from_slice(&start.to_le_bytes());
        e[12..16].copy_from_slice(&sectors.to_le_bytes());
    }
    sector0[510] = 0x55;
    sector0[511] = 0xaa;
    Ok(())
}

/// The partitions of the table in `sector0` of a disk of `capacity` sectors (empty
/// entries left out), checked: each inside the disk past sector 0, none overlapping.
pub fn read_table(
    sector0: &[u8; 512],
    capacity: u64,
) -> Result<[Option<Partition>; ENTRIES], LayoutError> {
    if sector0[510] != 0x55 || sector0[511] != 0xaa {
        return Err(LayoutError::NoSignature);
    }
    let mut out = [None; ENTRIES];
    for (i, slot) in out.iter_mut().enumerate() {
        let e = &sector0[TABLE_OFFSET + i * ENTRY_SIZE..][..ENTRY_SIZE];
        let kind = e[4];
        let start = u64::from(u32::from_le_bytes([e[8], e[9], e[10], e[11]]));
        let sectors = u64::from(u32::from_le_bytes([e[12], e[13], e[14], e[15]]));
        if kind == 0 || sectors == 0 {
            continue;
        }
        let p = Partition {
            kind,
            start,
            sectors,
        };
        if start == 0 || p.end() > capacity {
            return Err(LayoutError::OutOfDisk);
        }
        *slot = Some(p);
    }
    for (i, a) in out.iter().enumerate() {
        for b in out.iter().skip(i + 1) {
            if let (Some(a), Some(b)) = (a, b) {
                if a.start < b.end() && b.start < a.end() {
                    return Err(LayoutError::Overlap);
                }
            }
        }
    }
    Ok(out)
}

/// The first partition of type `kind` in the table in `sector0` of a disk of `capacity`
/// sectors.
pub fn find(sector0: &[u8; 512], capacity: u64, kind: u8) -> Result<Partition, LayoutError> {
    read_table(sector0, capacity)?
        .into_iter()
        .flatten()
        .find(|p| p.kind == kind)
        .ok_or(LayoutError::Missing)
}

/// What `cargo xtask` puts on the file system besides the programs (`docs/files.md`): a
/// file of [`SAMPLE_LEN`] bytes at [`SAMPLE_PATH`], byte `i` being [`sample_byte`]`(i)`, which
/// the file tests and the `file.read.56k` row read and check.
pub const SAMPLE_PATH: &str = "/data/f56k.bin";
/// Its length: 56 KiB, the file of Accent's Table 3-4.
pub const SAMPLE_LEN: u64 = 56 << 10;
/// Folder the programs of the boot image are copied to, as `/bin/<name>`.
pub const PROGRAM_DIR: &str = "/bin";

/// Byte `i` of the sample file: a hash of its offset, so that a page read at the wrong
/// offset, or a byte out of place, is seen.
pub const fn sample_byte(i: u64) -> u8 {
    let x = (i ^ 0x5bd1_e995).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8 ^ (i >> 12) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISK: u64 = (64 << 20) / SECTOR;

    #[test]
    fn the_standard_layout_round_trips() {
        let parts = standard(DISK).unwrap();
        let mut s = [0u8; 512];
        write_table(&mut s, &parts).unwrap();
        assert_eq!(find(&s, DISK, TYPE_FILES).unwrap(), parts[0]);
        assert_eq!(find(&s, DISK, TYPE_SWAP).unwrap(), parts[1]);
        assert_eq!(parts[1].end(), DISK);
        assert_eq!(parts[0].end(), parts[1].start);
    }

    #[test]
    fn boot_code_is_kept() {
        let mut s = [0x90u8; 512];
        write_table(&mut s, &standard(DISK).unwrap()).unwrap();
        assert!(s[..446].iter().all(|&b| b == 0x90));
    }

    #[test]
    fn bad_tables_are_refused() {
        let parts = standard(DISK).unwrap();
        let mut s = [0u8; 512];
        assert_eq!(find(&s, DISK, TYPE_SWAP), Err(LayoutError::NoSignature));
        write_table(&mut s, &parts).unwrap();
        // The same table on a smaller disk: the swap area reaches past its end.
        assert_eq!(find(&s, DISK - 1, TYPE_SWAP), Err(LayoutError::OutOfDisk));
        // Overlapping partitions.
        let over = [
            parts[0],
            Partition {
                start: parts[0].end() - 1,
                ..parts[1]
            },
        ];
        write_table(&mut s, &over).unwrap();
        assert_eq!(read_table(&s, DISK), Err(LayoutError::Overlap));
        // A partition at sector 0 would cover the table itself.
        let zero = [Partition {
            start: 0,
            ..parts[0]
        }];
        write_table(&mut s, &zero).unwrap();
        assert_eq!(read_table(&s, DISK), Err(LayoutError::OutOfDisk));
        // Only a file system: no swap area.
        write_table(&mut s, &parts[..1]).unwrap();
        assert_eq!(find(&s, DISK, TYPE_SWAP), Err(LayoutError::Missing));
        assert_eq!(
            standard(FIRST_SECTOR + FILES_SECTORS),
            Err(LayoutError::TooSmall)
        );
    }

    #[test]
    fn every_byte_pattern_parses_or_is_refused() {
        // No sector 0 makes the reader panic; whatever it accepts lies inside the disk.
        let mut x: u64 = 0x1234_5678_9abc_def1;
        for _ in 0..20_000 {
            let mut s = [0u8; 512];
            for b in s[TABLE_OFFSET..].iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            s[510] = 0x55;
            s[511] = 0xaa;
            if let Ok(t) = read_table(&s, DISK) {
                for p in t.iter().flatten() {
                    assert!(p.start > 0 && p.end() <= DISK);
                }
            }
        }
    }
}
