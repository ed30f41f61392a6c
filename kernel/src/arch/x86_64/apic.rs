//! The local APIC timer and the clock, calibrated against the PIT.
//!
//! The legacy 8259 PICs are remapped out of the exception range and masked. The LAPIC timer
//! and the TSC are both measured against a 10 ms interval of PIT channel 2 (a known
//! 1.193182 MHz clock), then the LAPIC timer runs periodically at [`TICK_HZ`]. Under QEMU
//! with `-icount shift=0` the TSC advances once per instruction, so "TSC Hz" there is the
//! instructions per second of virtual time.

use super::cpu::{inb, outb, rdmsr, rdtsc};
use super::paging::phys_to_virt;
use super::trap::{PIC_BASE, SPURIOUS_VECTOR, TIMER_VECTOR};
use core::sync::atomic::{AtomicU64, Ordering};

/// Vector of the wake-up IPI (new work for a halted or busy CPU).
pub const IPI_WAKE: u64 = 0x41;

/// Timer interrupts per second (the round-robin quantum is one tick).
pub const TICK_HZ: u64 = 100;

const REG_ID: u64 = 0x20;
const REG_EOI: u64 = 0xb0;
const REG_SVR: u64 = 0xf0;
const REG_LVT_TIMER: u64 = 0x320;
const REG_TIMER_INIT: u64 = 0x380;
const REG_TIMER_CURRENT: u64 = 0x390;
const REG_TIMER_DIVIDE: u64 = 0x3e0;

const PIT_HZ: u64 = 1_193_182;
const CALIBRATE_MS: u64 = 2;

static LAPIC_BASE: AtomicU64 = AtomicU64::new(0);
static TSC_HZ: AtomicU64 = AtomicU64::new(1);

fn reg(offset: u64) -> *mut u32 {
    (LAPIC_BASE.load(Ordering::Relaxed) + offset) as *mut u32
}

fn read(offset: u64) -> u32 {
    // SAFETY: `reg` points into the LAPIC's MMIO page through the direct map (set in
    // `init` before any access); LAPIC registers are 32-bit and 16-byte aligned.
    unsafe { core::ptr::read_volatile(reg(offset)) }
}

fn write(offset: u64, v: u32) {
    // SAFETY: as in `read`.
    unsafe { core::ptr::write_volatile(reg(offset), v) }
}

/// Remaps and masks the 8259s, enables the LAPIC, calibrates the TSC and the LAPIC timer,
/// and starts the periodic tick. Interrupts stay disabled (the kernel runs with them off).
pub fn init() {
    // SAFETY: the standard 8259 initialisation sequence on the PC's fixed ports; afterwards
    // every line is masked, so the PICs only ever raise spurious vectors above 31.
    unsafe {
        outb(0x20, 0x11);
        outb(0xa0, 0x11);
        outb(0x21, PIC_BASE as u8);
        outb(0xa1, PIC_BASE as u8 + 8);
        outb(0x21, 4);
        outb(0xa1, 2);
        outb(0x21, 1);
        outb(0xa1, 1);
        outb(0x21, 0xff);
        outb(0xa1, 0xff);
    }
    // SAFETY: IA32_APIC_BASE (0x1b) exists on every x86-64 processor.
    let base = unsafe { rdmsr(0x1b) } & 0x000f_ffff_ffff_f000;
    LAPIC_BASE.store(phys_to_virt(base), Ordering::Relaxed);
    write(REG_SVR, 0x100 | SPURIOUS_VECTOR as u32);
    write(REG_TIMER_DIVIDE, 0x3); // divide by 16

    // Measure the LAPIC timer and the TSC over CALIBRATE_MS of PIT channel 2.
    write(REG_LVT_TIMER, 1 << 16); // masked, one-shot
    let count = PIT_HZ * CALIBRATE_MS / 1000;
    // SAFETY: port 0x61 gates PIT channel 2 (speaker off), 0x43/0x42 program channel 2;
    // nothing else uses them.
    let (lapic_ticks, tsc_ticks) = unsafe {
        let gate = (inb(0x61) & !0x02) | 0x01;
        outb(0x61, gate);
        outb(0x43, 0xb0); // channel 2, lobyte/hibyte, mode 0
        outb(0x42, (count & 0xff) as u8);
        outb(0x42, (count >> 8) as u8);
        // Restart the count by toggling the gate.
        outb(0x61, gate & !0x01);
        outb(0x61, gate);
        write(REG_TIMER_INIT, u32::MAX);
        let t0 = rdtsc();
        while inb(0x61) & 0x20 == 0 {}
        let t1 = rdtsc();
        let remaining = read(REG_TIMER_CURRENT);
        write(REG_TIMER_INIT, 0);
        (u64::from(u32::MAX - remaining), t1 - t0)
    };
    TSC_HZ.store((tsc_ticks * 1000 / CALIBRATE_MS).max(1), Ordering::Relaxed);
    let per_tick = (lapic_ticks * 1000 / CALIBRATE_MS / TICK_HZ).clamp(1, u64::from(u32::MAX));
    write(REG_LVT_TIMER, (1 << 17) | TIMER_VECTOR as u32); // periodic
    write(REG_TIMER_INIT, per_tick as u32);
}

/// Signals end of interrupt to the LAPIC.
pub fn eoi() {
    write(REG_EOI, 0);
}

/// This CPU's LAPIC id.
pub fn id() -> u32 {
    read(REG_ID) >> 24
}

/// TSC ticks per second, as calibrated.
pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Nanoseconds since reset, from the TSC.
pub fn now_ns() -> u64 {
    let ns = u128::from(rdtsc()) * 1_000_000_000 / u128::from(tsc_hz());
    u64::try_from(ns).unwrap_or(u64::MAX)
}
