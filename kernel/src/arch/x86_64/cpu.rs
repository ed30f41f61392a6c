//! Processor features, control registers, MSRs, port I/O and the time-stamp counter.

use core::arch::asm;
use core::arch::x86_64::__cpuid_count;
use core::sync::atomic::{AtomicBool, Ordering};
use x86_64::registers::control::{Cr4, Cr4Flags};
use x86_64::registers::model_specific::Msr;

/// Whether CR4.PCIDE is on (address spaces carry a PCID and switches keep TLB entries).
static PCID: AtomicBool = AtomicBool::new(false);

/// Features found and switched on, for the boot report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    /// Supervisor-mode execution prevention.
    pub smep: bool,
    /// Supervisor-mode access prevention.
    pub smap: bool,
    /// Process-context identifiers.
    pub pcid: bool,
}

/// Detects and enables SMEP, SMAP, PCID and global pages where the CPU has them (the
/// floating-point and vector registers are `arch::fpu`'s).
pub fn init_features() -> Features {
    // CPUID leaves 1 and 7 exist on every x86-64 processor.
    let (l1, l7) = (__cpuid_count(1, 0), __cpuid_count(7, 0));
    let f = Features {
        smep: l7.ebx & (1 << 7) != 0,
        smap: l7.ebx & (1 << 20) != 0,
        pcid: l1.ecx & (1 << 17) != 0,
    };
    let mut cr4 = Cr4::read();
    cr4 |= Cr4Flags::PAGE_GLOBAL;
    if f.smep {
        cr4 |= Cr4Flags::SUPERVISOR_MODE_EXECUTION_PROTECTION;
    }
    if f.smap {
        cr4 |= Cr4Flags::SUPERVISOR_MODE_ACCESS_PREVENTION;
    }
    if f.pcid {
        cr4 |= Cr4Flags::PCID;
    }
    // SAFETY: every flag set was checked in CPUID (PGE is baseline x86-64). The current CR3 has PCID 0, as PCIDE requires. The kernel never touches user
    // pages through user addresses, so SMAP/SMEP cannot fault kernel code.
    unsafe { Cr4::write(cr4) };
    PCID.store(f.pcid, Ordering::Relaxed);
    super::uaccess::set_smap(f.smap);
    f
}

/// Loads CR3 with `root` (PCID 0, full flush of non-global entries).
///
/// # Safety
/// `root` must be a valid PML4 that maps the running kernel at the same addresses.
#[inline(always)]
pub unsafe fn write_cr3(root: u64) {
    // SAFETY: the caller guarantees `root` maps the kernel.
    unsafe { asm!("mov cr3, {}", in(reg) root, options(nostack, preserves_flags)) };
}

/// Switches to the address space with root `root` and PCID `pcid`. With `keep` the TLB
/// entries tagged `pcid` are kept (the caller knows they belong to this space).
///
/// # Safety
/// `root` must be a valid PML4 whose kernel half is the kernel's.
///
/// Always inlined: it is on both RPC paths, and once it had enough callers for the
/// compiler to make it a call, each direction of an RPC paid 9 instructions more.
#[inline(always)]
pub unsafe fn switch_space(root: u64, pcid: u16, keep: bool) {
    let value = if PCID.load(Ordering::Relaxed) {
        root | u64::from(pcid & 0xfff) | if keep { 1 << 63 } else { 0 }
    } else {
        root
    };
    // SAFETY: the caller guarantees `root` maps the kernel.
    unsafe { write_cr3(value) };
}

/// Whether address spaces carry PCIDs.
pub fn pcid_enabled() -> bool {
    PCID.load(Ordering::Relaxed)
}

/// Reads the time-stamp counter.
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no side effects and is always available in ring 0.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// RFLAGS.AC: with SMAP on, set only inside a `stac`/`clac` window of the kernel's.
pub const RFLAGS_AC: u64 = 1 << 18;

/// Checks that SMAP is in force: the kernel runs with RFLAGS.AC clear outside a `stac`
/// window, whatever flags the user thread it came from had (the trap entry clears what a
/// thread set itself). Called on a cold path after a user trap (a thread ended by an
/// exception), so a way into the kernel that forgot AC is found by a test (`smap_ac`)
/// instead of leaving user pages open to the kernel.
pub fn check_ac_clear() {
    let flags: u64;
    // SAFETY: `pushfq; pop` reads RFLAGS through the stack and changes nothing else.
    unsafe { asm!("pushfq", "pop {}", out(reg) flags, options(nomem, preserves_flags)) };
    if flags & RFLAGS_AC != 0 {
        panic!("RFLAGS.AC is set in kernel mode: SMAP is off (rflags {flags:#x})");
    }
}

/// Reads the page-fault linear address.
pub fn read_cr2() -> u64 {
    let v: u64;
    // SAFETY: reading CR2 has no side effects.
    unsafe { asm!("mov {}, cr2", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Writes a model-specific register.
///
/// # Safety
/// `msr` must exist and `value` must be valid for it, without breaking memory safety.
pub unsafe fn wrmsr(msr: u32, value: u64) {
    // SAFETY: forwarded to the caller.
    unsafe { Msr::new(msr).write(value) };
}

/// Reads a model-specific register.
///
/// # Safety
/// `msr` must exist.
pub unsafe fn rdmsr(msr: u32) -> u64 {
    // SAFETY: forwarded to the caller.
    unsafe { Msr::new(msr).read() }
}

/// Writes a byte to an I/O port.
///
/// # Safety
/// The port write must not break memory safety (device-specific).
pub unsafe fn outb(port: u16, v: u8) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!("out dx, al", in("dx") port, in("al") v, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a byte from an I/O port.
///
/// # Safety
/// The port read must not break memory safety (device-specific).
pub unsafe fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!("in al, dx", out("al") v, in("dx") port, options(nomem, nostack, preserves_flags))
    };
    v
}

/// Stops this CPU for good (interrupts off).
pub fn halt_forever() -> ! {
    loop {
        // SAFETY: disabling interrupts and halting only stops this CPU.
        unsafe { asm!("cli; hlt", options(nomem, nostack)) };
    }
}

/// Leaves QEMU through the `isa-debug-exit` device (port 0xf4): QEMU exits with status
/// `(code << 1) | 1`. On a machine without the device, halts.
pub fn qemu_exit(code: u8) -> ! {
    // SAFETY: port 0xf4 is QEMU's debug-exit device or unused on other machines.
    unsafe { outb(0xf4, code) };
    halt_forever()
}

/// QEMU exit code for a clean shutdown (QEMU status 33).
pub const EXIT_SUCCESS: u8 = 0x10;
/// QEMU exit code for a kernel failure (QEMU status 35).
pub const EXIT_FAILURE: u8 = 0x11;
