//! ACPI, only as far as finding the processors: RSDP → RSDT/XSDT → MADT local APIC entries.
//!
//! Firmware tables are read through the direct map (which covers the whole 32-bit physical
//! space, where firmware puts them) and trusted only after their checksums and lengths
//! check out. Anything missing or malformed degrades to "the boot CPU alone" with a
//! `[kernel] warning` line; nothing here panics.

use super::paging::phys_to_virt;
use crate::arch::serial::kprintln;
use alloc::vec;
use alloc::vec::Vec;
use core::mem::size_of;

/// Tables are read only below this physical address (the direct map covers at least 4 GiB).
const MAPPED_LIMIT: u64 = 4 << 30;
/// Longest system description table accepted (the MADT of 16 CPUs is well under 1 KiB).
const MAX_TABLE_LEN: u32 = 1 << 20;
/// Size of the common system-description-table header.
const HEADER_LEN: u32 = 36;

/// Plain integers and byte arrays: every bit pattern is a valid value.
trait Plain: Copy {}
impl Plain for u8 {}
impl Plain for u16 {}
impl Plain for u32 {}
impl Plain for u64 {}
impl<const N: usize> Plain for [u8; N] {}

/// Reads a `T` at physical address `pa`, or `None` beyond the mapped range.
fn read<T: Plain>(pa: u64) -> Option<T> {
    let end = pa.checked_add(size_of::<T>() as u64)?;
    if end > MAPPED_LIMIT {
        return None;
    }
    // SAFETY: `pa..end` lies below 4 GiB, which the direct map covers (RAM or not, as
    // write-back memory, which is how firmware tables are meant to be read); `T` is a plain
    // integer or byte array, valid for any bits; the read is unaligned-safe.
    Some(unsafe { core::ptr::read_unaligned(phys_to_virt(pa) as *const T) })
}

/// Whether the `len` bytes at `pa` sum to zero (mod 256), the ACPI checksum rule.
fn checksum_ok(pa: u64, len: u32) -> bool {
    let Some(end) = pa.checked_add(u64::from(len)) else {
        return false;
    };
    if end > MAPPED_LIMIT {
        return false;
    }
    let mut sum = 0u8;
    for a in pa..end {
        match read::<u8>(a) {
            Some(b) => sum = sum.wrapping_add(b),
            None => return false,
        }
    }
    sum == 0
}

/// A valid RSDP at `pa`: its revision, RSDT and XSDT addresses.
struct Rsdp {
    revision: u8,
    rsdt: u64,
    xsdt: u64,
}

fn rsdp_at(pa: u64) -> Option<Rsdp> {
    if read::<[u8; 8]>(pa)? != *b"RSD PTR " || !checksum_ok(pa, 20) {
        return None;
    }
    let revision = read::<u8>(pa + 15)?;
    let rsdt = u64::from(read::<u32>(pa + 16)?);
    let mut xsdt = 0;
    if revision >= 2 {
        let len = read::<u32>(pa + 20)?;
        if (36..=4096).contains(&len) && checksum_ok(pa, len) {
            xsdt = read::<u64>(pa + 24)?;
        }
    }
    Some(Rsdp {
        revision,
        rsdt,
        xsdt,
    })
}

/// Looks for the RSDP on 16-byte boundaries of `range`.
fn scan(range: core::ops::Range<u64>) -> Option<(u64, Rsdp)> {
    range
        .step_by(16)
        .find_map(|pa| rsdp_at(pa).map(|r| (pa, r)))
}

/// Finds the RSDP: the loader's pointer when it gives one, else the BIOS areas (the first
/// KiB of the EBDA, then 0xE0000–0xFFFFF).
fn find_rsdp(hint: u64) -> Option<(u64, Rsdp)> {
    if hint != 0 {
        if let Some(r) = rsdp_at(hint) {
            return Some((hint, r));
        }
        kprintln!("[kernel] warning: ACPI: no valid RSDP at {hint:#x}; scanning");
    }
    let ebda = u64::from(read::<u16>(0x40e).unwrap_or(0)) << 4;
    if (0x8_0000..0xa_0000).contains(&ebda) {
        if let Some(found) = scan(ebda..ebda + 1024) {
            return Some(found);
        }
    }
    scan(0xe_0000..0x10_0000)
}

/// The length of the valid table with signature `sig` at `pa`, if it is one.
fn table_at(pa: u64, sig: &[u8; 4]) -> Option<u32> {
    if read::<[u8; 4]>(pa)? != *sig {
        return None;
    }
    let len = read::<u32>(pa + 4)?;
    ((HEADER_LEN..=MAX_TABLE_LEN).contains(&len) && checksum_ok(pa, len)).then_some(len)
}

/// Finds the table with signature `sig` through the XSDT (8-byte pointers) or the RSDT
/// (4-byte pointers); returns its address and length.
fn find_table(rsdp: &Rsdp, sig: &[u8; 4]) -> Option<(u64, u32)> {
    let roots: [(u64, &[u8; 4], u64); 2] = [(rsdp.xsdt, b"XSDT", 8), (rsdp.rsdt, b"RSDT", 4)];
    for (root, root_sig, width) in roots {
        if root == 0 {
            continue;
        }
        let Some(len) = table_at(root, root_sig) else {
            continue;
        };
        let entries = u64::from(len - HEADER_LEN) / width;
        for i in 0..entries {
            let at = root + u64::from(HEADER_LEN) + i * width;
            let pa = if width == 8 {
                read::<u64>(at)
            } else {
                read::<u32>(at).map(u64::from)
            };
            if let Some(found) = pa.and_then(|pa| table_at(pa, sig).map(|len| (pa, len))) {
                return Some(found);
            }
        }
    }
    None
}

/// The enabled processors' local APIC ids from the MADT at `pa` (`len` bytes).
fn madt_apic_ids(pa: u64, len: u32) -> Option<Vec<u32>> {
    let end = pa + u64::from(len);
    // Entries follow the header, the local APIC address (u32) and the flags (u32).
    let mut at = pa + u64::from(HEADER_LEN) + 8;
    let mut ids = Vec::new();
    while at + 2 <= end {
        let kind = read::<u8>(at)?;
        let entry_len = u64::from(read::<u8>(at + 1)?);
        if entry_len < 2 || at + entry_len > end {
            kprintln!("[kernel] warning: ACPI: malformed MADT entry at {at:#x}");
            break;
        }
        let (id, flags) = match (kind, entry_len) {
            // Processor local APIC: ACPI processor id u8, APIC id u8, flags u32.
            (0, 8..) => (u32::from(read::<u8>(at + 3)?), read::<u32>(at + 4)?),
            // Processor local x2APIC: reserved u16, x2APIC id u32, flags u32, uid u32.
            (9, 16..) => (read::<u32>(at + 4)?, read::<u32>(at + 8)?),
            _ => (0, 0),
        };
        // Bit 0 "enabled": present and usable now. Bit 1 "online capable" without bit 0
        // means a processor that may be hot-added later, not one that is there to start.
        if flags & 1 != 0 && !ids.contains(&id) {
            ids.push(id);
        }
        at += entry_len;
    }
    Some(ids)
}

/// The boot CPU's initial APIC id (CPUID leaf 1).
pub fn bsp_apic_id() -> u32 {
    // CPUID leaf 1 exists on every x86-64 processor.
    core::arch::x86_64::__cpuid(1).ebx >> 24
}

/// The local APIC ids of the processors to run on, the boot CPU's first.
///
/// `rsdp_hint` is the RSDP address from the boot loader, or 0. When ACPI cannot be read the
/// answer is the boot CPU alone, after a warning line.
pub fn cpu_apic_ids(rsdp_hint: u64) -> Vec<u32> {
    let bsp = bsp_apic_id();
    let Some((rsdp_pa, rsdp)) = find_rsdp(rsdp_hint) else {
        kprintln!("[kernel] warning: ACPI: no RSDP found; using the boot CPU only");
        return vec![bsp];
    };
    let Some((madt, len)) = find_table(&rsdp, b"APIC") else {
        kprintln!(
            "[kernel] warning: ACPI: no valid MADT (RSDP at {rsdp_pa:#x}, revision {}); \
             using the boot CPU only",
            rsdp.revision
        );
        return vec![bsp];
    };
    let Some(mut ids) = madt_apic_ids(madt, len) else {
        kprintln!("[kernel] warning: ACPI: unreadable MADT; using the boot CPU only");
        return vec![bsp];
    };
    match ids.iter().position(|&id| id == bsp) {
        Some(i) => {
            ids.remove(i);
        }
        None => {
            kprintln!("[kernel] warning: ACPI: the boot CPU (APIC id {bsp}) is not in the MADT")
        }
    }
    ids.insert(0, bsp);
    ids
}

/// An I/O APIC from the MADT: its registers' physical address and its first global system
/// interrupt (GSI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoApicEntry {
    /// Physical address of its register window.
    pub address: u64,
    /// The GSI of its input 0.
    pub gsi_base: u32,
}

/// Where each legacy ISA interrupt line arrives: its GSI and the MPS flags of its
/// interrupt source override (polarity bits 0–1, trigger mode bits 2–3; 0 = the ISA
/// default, active high and edge-triggered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IsaLine {
    /// Its global system interrupt.
    pub gsi: u32,
    /// The override's flags, 0 without one.
    pub flags: u16,
}

/// The MADT's interrupt routing: the I/O APICs (at most [`IOAPICS_MAX`]) and the 16 ISA
/// lines, each identity-mapped to its GSI unless an interrupt source override says
/// otherwise.
#[derive(Clone, Debug)]
pub struct Routing {
    /// The I/O APICs found.
    pub ioapics: Vec<IoApicEntry>,
    /// ISA line `i`'s GSI and flags.
    pub isa: [IsaLine; 16],
}

/// Most I/O APICs used.
pub const IOAPICS_MAX: usize = 8;

/// The interrupt routing of the MADT at `pa` (`len` bytes).
fn madt_routing(pa: u64, len: u32) -> Option<Routing> {
    let end = pa + u64::from(len);
    let mut at = pa + u64::from(HEADER_LEN) + 8;
    let mut r = Routing {
        ioapics: Vec::new(),
        isa: core::array::from_fn(|i| IsaLine {
            gsi: i as u32,
            flags: 0,
        }),
    };
    while at + 2 <= end {
        let kind = read::<u8>(at)?;
        let entry_len = u64::from(read::<u8>(at + 1)?);
        if entry_len < 2 || at + entry_len > end {
            break;
        }
        match (kind, entry_len) {
            // I/O APIC: id u8, reserved u8, address u32, GSI base u32.
            (1, 12..) if r.ioapics.len() < IOAPICS_MAX => r.ioapics.push(IoApicEntry {
                address: u64::from(read::<u32>(at + 4)?),
                gsi_base: read::<u32>(at + 8)?,
            }),
            // Interrupt source override: bus u8 (0 = ISA), source u8, GSI u32, flags u16.
            (2, 10..) => {
                let (bus, source) = (read::<u8>(at + 2)?, read::<u8>(at + 3)?);
                if let (0, Some(line)) = (bus, r.isa.get_mut(usize::from(source))) {
                    *line = IsaLine {
                        gsi: read::<u32>(at + 4)?,
                        flags: read::<u16>(at + 8)?,
                    };
                }
            }
            _ => {}
        }
        at += entry_len;
    }
    Some(r)
}

/// The machine's interrupt routing from ACPI (`rsdp_hint` as for [`cpu_apic_ids`]), or
/// `None` (after a warning line) when there is no MADT or it names no I/O APIC: then no
/// interrupt line can be given to a driver.
pub fn interrupt_routing(rsdp_hint: u64) -> Option<Routing> {
    let found = find_rsdp(rsdp_hint).and_then(|(_, rsdp)| find_table(&rsdp, b"APIC"));
    let routing = found.and_then(|(madt, len)| madt_routing(madt, len));
    match routing {
        Some(r) if !r.ioapics.is_empty() => Some(r),
        _ => {
            kprintln!("[kernel] warning: ACPI: no I/O APIC found; no interrupt lines for drivers");
            None
        }
    }
}
