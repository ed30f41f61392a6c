//! x86-64: boot, CPU setup, traps and system calls, page tables, the LAPIC timer, serial,
//! ACPI processor discovery and starting the other CPUs, the I/O APIC and port I/O for user
//! drivers.

pub mod acpi;
pub mod apic;
pub mod boot;
pub mod context;
pub mod cpu;
pub mod fpu;
pub mod gdt;
pub mod ioapic;
pub mod msi;
pub mod paging;
pub mod portio;
pub mod serial;
pub mod smp;
pub mod stack;
pub mod tlb;
pub mod trap;
pub mod uaccess;

/// Brings up the boot CPU after paging: segments, per-CPU area, traps, system calls,
/// processor features, the floating-point registers and the timer. Returns the features
/// found.
pub fn init_cpu() -> (cpu::Features, fpu::Info) {
    gdt::init(0);
    trap::init();
    let features = cpu::init_features();
    let fpu = fpu::init();
    apic::init();
    msi::init();
    (features, fpu)
}

/// The user-driver interrupt line of `vector`: an I/O APIC (ISA) line or an MSI line.
pub fn line_of_vector(vector: u64) -> Option<u64> {
    ioapic::irq_of_vector(vector).or_else(|| msi::line_of_vector(vector))
}

/// Waits for the next interrupt with interrupts enabled, then disables them again.
pub fn wait_for_interrupt() {
    // SAFETY: `sti; hlt` atomically enables interrupts and halts (the STI shadow covers
    // HLT); any interrupt handler runs on this stack and returns here; `cli` restores the
    // kernel's interrupts-off invariant.
    unsafe { core::arch::asm!("sti", "hlt", "cli", options(nomem, nostack)) };
}
