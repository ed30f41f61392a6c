//! Message-signalled interrupts for user drivers: [`MSI_LINES`] vectors from
//! [`MSI_VECTOR_BASE`], each delivered to the boot CPU (as the I/O APIC's lines are) when a
//! device writes the vector's message — [`message`]'s address and data — which its driver
//! programs into the device's MSI or MSI-X table. The kernel numbers them as interrupt
//! lines after the ISA ones (`kern::device::MSI_FIRST` + slot), so `device.rs` binds and
//! notifies them exactly as it does ISA lines; an MSI is edge-triggered and is never
//! masked here (a device that keeps signalling costs one remembered pending bit).

use core::sync::atomic::{AtomicU32, Ordering};
use kern::device::{MSI_FIRST, MSI_LINES};

/// Vector of MSI slot 0; slot `n` arrives at `MSI_VECTOR_BASE + n`.
pub const MSI_VECTOR_BASE: u64 = 0x60;

/// The boot CPU's LAPIC id plus one (0 before [`init`]).
static BOOT_APIC: AtomicU32 = AtomicU32::new(0);

/// Records the boot CPU, the destination of every MSI (on the boot CPU, once).
pub fn init() {
    BOOT_APIC.store(super::apic::id() + 1, Ordering::Relaxed);
}

/// The interrupt line of `vector`, if it is an MSI vector.
pub fn line_of_vector(vector: u64) -> Option<u64> {
    vector
        .checked_sub(MSI_VECTOR_BASE)
        .filter(|&slot| slot < MSI_LINES as u64)
        .map(|slot| MSI_FIRST + slot)
}

/// The (address, data) a device writes to raise MSI line `line`: fixed delivery, physical
/// destination the boot CPU, edge-triggered, the line's vector. `None` for a line that is
/// no MSI line, or before [`init`].
pub fn message(line: u64) -> Option<(u64, u64)> {
    let slot = line
        .checked_sub(MSI_FIRST)
        .filter(|&s| s < MSI_LINES as u64)?;
    let apic = BOOT_APIC.load(Ordering::Relaxed).checked_sub(1)?;
    if apic > 0xff {
        return None;
    }
    Some((
        0xfee0_0000 | (u64::from(apic) << 12),
        MSI_VECTOR_BASE + slot,
    ))
}
