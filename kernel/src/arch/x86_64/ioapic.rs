//! The I/O APIC: legacy ISA interrupt lines routed to vectors of the boot CPU, for user
//! drivers (`crate::device` binds a line to a port).
//!
//! The MADT (`acpi::interrupt_routing`) names the I/O APICs and the interrupt source
//! overrides (on QEMU's q35, ISA line 0 arrives on GSI 2, and the SCI is level-triggered).
//! At boot every redirection entry is masked; [`route`] programs line `irq` to vector
//! [`IRQ_VECTOR_BASE`]` + irq`, fixed delivery to the boot CPU's LAPIC, with the polarity
//! and trigger mode of its override (ISA default: active high, edge), still masked;
//! [`set_masked`] then masks and unmasks it.
//!
//! # Invariants
//! - The register window of each I/O APIC is accessed only with [`REGS`] held (a register
//!   access is a select write followed by a data access).
//! - Only the ISA lines' entries are ever unmasked.

use super::acpi::{self, IsaLine, Routing};
use super::paging::phys_to_virt;
use crate::arch::serial::kprintln;
use spin::{Mutex, Once};

/// Vector of ISA line 0; line `n` arrives at `IRQ_VECTOR_BASE + n` (up to `+ 15`).
pub const IRQ_VECTOR_BASE: u64 = 0x50;
/// ISA lines.
pub const ISA_LINES: u64 = 16;

/// The routing found at boot, and the boot CPU's APIC id (the destination).
struct State {
    routing: Routing,
    dest: u32,
}

static STATE: Once<Option<State>> = Once::new();
/// Serialises the select-then-access pairs of every I/O APIC's register window.
static REGS: Mutex<()> = Mutex::new(());

const IOREGSEL: u64 = 0x00;
const IOWIN: u64 = 0x10;
const REG_VERSION: u32 = 0x01;
const REDIR_BASE: u32 = 0x10;
const MASKED: u32 = 1 << 16;
const LEVEL: u32 = 1 << 15;
const ACTIVE_LOW: u32 = 1 << 13;

/// Reads register `reg` of the I/O APIC at physical `base`. [`REGS`] must be held.
fn read(base: u64, reg: u32) -> u32 {
    let va = phys_to_virt(base);
    // SAFETY: `base` is an I/O APIC's register window from the MADT, below 4 GiB and so
    // inside the direct map; IOREGSEL and IOWIN are 32-bit registers at offsets 0 and 0x10
    // of that window; the caller holds `REGS`, so no other access comes between the
    // select and the read.
    unsafe {
        core::ptr::write_volatile((va + IOREGSEL) as *mut u32, reg);
        core::ptr::read_volatile((va + IOWIN) as *const u32)
    }
}

/// Writes register `reg` of the I/O APIC at physical `base`. [`REGS`] must be held.
fn write(base: u64, reg: u32, value: u32) {
    let va = phys_to_virt(base);
    // SAFETY: as in `read`.
    unsafe {
        core::ptr::write_volatile((va + IOREGSEL) as *mut u32, reg);
        core::ptr::write_volatile((va + IOWIN) as *mut u32, value);
    }
}

/// Finds the I/O APICs and overrides in ACPI (`rsdp_hint` from the boot loader) and masks
/// every redirection entry. Once, on the boot CPU, after the direct map exists.
pub fn init(rsdp_hint: u64, boot_apic_id: u32) {
    STATE.call_once(|| {
        let routing = acpi::interrupt_routing(rsdp_hint)?;
        let _g = REGS.lock();
        for io in &routing.ioapics {
            if io.address >= 1 << 32 {
                continue;
            }
            let entries = ((read(io.address, REG_VERSION) >> 16) & 0xff) + 1;
            for pin in 0..entries {
                write(io.address, REDIR_BASE + 2 * pin, MASKED);
                write(io.address, REDIR_BASE + 2 * pin + 1, 0);
            }
        }
        kprintln!(
            "[kernel] I/O APIC at {:#x} (GSI {}..); ISA line 4 on GSI {}",
            routing.ioapics.first().map_or(0, |io| io.address),
            routing.ioapics.first().map_or(0, |io| io.gsi_base),
            routing.isa.get(4).map_or(4, |l| l.gsi),
        );
        Some(State {
            routing,
            dest: boot_apic_id,
        })
    });
}

/// The I/O APIC register window and pin of ISA line `irq`, with its override flags.
fn place(irq: u64) -> Option<(u64, u32, IsaLine, u32)> {
    let state = STATE.get()?.as_ref()?;
    let line = *state.routing.isa.get(usize::try_from(irq).ok()?)?;
    let io = state.routing.ioapics.iter().find(|io| {
        io.address < 1 << 32 && line.gsi >= io.gsi_base && line.gsi - io.gsi_base < 240
    })?;
    Some((io.address, line.gsi - io.gsi_base, line, state.dest))
}

/// Programs ISA line `irq` (below [`ISA_LINES`]) to its vector on the boot CPU, masked.
/// Whether it is level-triggered; `None` when the machine does not route it (no I/O
/// APIC, or no pin for its GSI).
pub fn route(irq: u64) -> Option<bool> {
    if irq >= ISA_LINES {
        return None;
    }
    let (base, pin, line, dest) = place(irq)?;
    let _g = REGS.lock();
    let entries = ((read(base, REG_VERSION) >> 16) & 0xff) + 1;
    if pin >= entries {
        return None;
    }
    // MPS INTI flags: polarity 0b11 = active low, trigger 0b11 = level (0 = the ISA
    // default: active high, edge).
    let active_low = line.flags & 0b11 == 0b11;
    let level = (line.flags >> 2) & 0b11 == 0b11;
    let mut low = MASKED | (IRQ_VECTOR_BASE + irq) as u32;
    if active_low {
        low |= ACTIVE_LOW;
    }
    if level {
        low |= LEVEL;
    }
    write(base, REDIR_BASE + 2 * pin + 1, (dest & 0xff) << 24);
    write(base, REDIR_BASE + 2 * pin, low);
    Some(level)
}

/// Masks (`true`) or unmasks ISA line `irq`'s redirection entry (after [`route`]).
pub fn set_masked(irq: u64, masked: bool) {
    let Some((base, pin, _, _)) = place(irq) else {
        return;
    };
    let _g = REGS.lock();
    let low = read(base, REDIR_BASE + 2 * pin);
    let low = if masked { low | MASKED } else { low & !MASKED };
    write(base, REDIR_BASE + 2 * pin, low);
}

/// The ISA line of interrupt `vector`, if it is one of theirs.
pub fn irq_of_vector(vector: u64) -> Option<u64> {
    vector
        .checked_sub(IRQ_VECTOR_BASE)
        .filter(|&irq| irq < ISA_LINES)
}
