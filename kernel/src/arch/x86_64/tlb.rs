//! TLB shootdown: making other CPUs forget translations of an address space that changed.
//!
//! The initiator (holding the big kernel lock) marks each target CPU's flag and sends it
//! `IPI_TLB`, then waits until every flag is clear. A target clears its flag after flushing
//! its TLB, either in the IPI handler (when it was in user mode or halted; the handler
//! needs no lock) or in the big kernel lock's spin loop (when it was waiting to enter the
//! kernel with interrupts off) — so the wait cannot deadlock on the lock.
//!
//! # Invariants
//! - The kernel never reads user memory through user virtual addresses (only through the
//!   direct map after a software walk), so a CPU inside the kernel with a stale TLB is
//!   harmless until it returns to user mode, and every path there either took the lock
//!   (serviced in the spin loop) or takes the IPI first.

use super::gdt::{self, MAX_CPUS};
use core::sync::atomic::{AtomicBool, Ordering};

static PENDING: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Flushes this CPU's non-global TLB entries of the loaded address space.
pub fn flush_local() {
    // SAFETY: rewriting CR3 with its own value (PCID kept, no-flush bit clear) only drops
    // non-global TLB entries of the current PCID; the mappings stay the same.
    unsafe {
        let cr3: u64;
        core::arch::asm!("mov {}, cr3", out(reg) cr3, options(nomem, nostack, preserves_flags));
        core::arch::asm!("mov cr3, {}", in(reg) cr3 & !(1u64 << 63), options(nostack, preserves_flags));
    }
}

/// Flushes this CPU's TLB if another CPU asked for it. Safe to call anywhere in kernel
/// mode, with or without the lock.
pub fn service() {
    let cpu = gdt::this_cpu();
    if let Some(flag) = PENDING.get(cpu) {
        if flag.load(Ordering::Acquire) {
            flush_local();
            flag.store(false, Ordering::Release);
        }
    }
}

/// Makes every CPU in `cpus` (other than this one) flush its TLB, and waits until all did.
pub fn shootdown(cpus: impl Iterator<Item = usize>) {
    const _: () = assert!(MAX_CPUS <= 64, "the CPUs sent to are a 64-bit mask");
    let me = gdt::this_cpu();
    // The CPUs sent to, as a bit mask: the wait below visits those only.
    let mut sent: u64 = 0;
    for cpu in cpus {
        if cpu == me {
            continue;
        }
        let (Some(flag), Some(apic_id)) = (PENDING.get(cpu), super::smp::apic_id(cpu)) else {
            continue;
        };
        flag.store(true, Ordering::Release);
        super::apic::send_ipi(apic_id, super::apic::IPI_TLB as u8);
        sent |= 1 << cpu;
    }
    while sent != 0 {
        let cpu = sent.trailing_zeros() as usize;
        sent &= sent - 1;
        while PENDING.get(cpu).is_some_and(|f| f.load(Ordering::Acquire)) {
            core::hint::spin_loop();
        }
    }
}
