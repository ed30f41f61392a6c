//! The local APIC timer and the clock, calibrated against the PIT.
//!
//! The legacy 8259 PICs are remapped out of the exception range and masked. The LAPIC timer
//! and the TSC are both measured against a 2 ms window of PIT channel 2 (a known
//! 1.193182 MHz clock), until two measurements agree (at most 16), the shortest counting
//! (`kern::calibrate`: a stop of the CPU only ever lengthens one), then the LAPIC timer runs periodically at
//! [`TICK_HZ`]. Under QEMU
//! with `-icount shift=0` the TSC advances once per instruction, so "TSC Hz" there is the
//! instructions per second of virtual time.

use super::cpu::{inb, outb, rdmsr, rdtsc};
use super::paging::phys_to_virt;
use super::trap::{PIC_BASE, SPURIOUS_VECTOR, TIMER_VECTOR};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Timer interrupts per second (the round-robin quantum is one tick).
pub const TICK_HZ: u64 = 100;

/// Vector of the inter-processor interrupt that wakes an idle CPU.
pub const IPI_WAKE: u64 = 0x41;
/// Vector of the inter-processor interrupt that asks a CPU to flush its TLB.
pub const IPI_TLB: u64 = 0x42;

const REG_ID: u64 = 0x20;
const REG_EOI: u64 = 0xb0;
const REG_SVR: u64 = 0xf0;
const REG_ICR_LOW: u64 = 0x300;
const REG_ICR_HIGH: u64 = 0x310;
const REG_LVT_TIMER: u64 = 0x320;
const REG_TIMER_INIT: u64 = 0x380;
const REG_TIMER_CURRENT: u64 = 0x390;
const REG_TIMER_DIVIDE: u64 = 0x3e0;

const PIT_HZ: u64 = 1_193_182;
const CALIBRATE_MS: u64 = 2;
/// Calibration windows measured at most (see [`measure_window`]): until two agree within
/// one part in `1 << CALIBRATE_AGREE`; the shortest counts.
const CALIBRATE_ROUNDS: usize = 16;
/// How closely two windows must agree to end the calibration: 1/128 (0.8%).
const CALIBRATE_AGREE: u32 = 7;

static LAPIC_BASE: AtomicU64 = AtomicU64::new(0);
static TSC_HZ: AtomicU64 = AtomicU64::new(1);
/// How many calibration windows the boot measured ([`calibration_windows`]).
static WINDOWS: AtomicU32 = AtomicU32::new(0);
/// The LAPIC timer's initial count for one tick, as calibrated on the boot CPU.
static TIMER_COUNT: AtomicU32 = AtomicU32::new(0);

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

    // Measure the LAPIC timer and the TSC over CALIBRATE_MS of PIT channel 2, several
    // times: both counters start before the window opens and stop after it is seen closed,
    // so a stop of this CPU (a virtual CPU's host thread descheduled) only lengthens a
    // measurement, and the shortest is the truest (`kern::calibrate`).
    write(REG_LVT_TIMER, 1 << 16); // masked, one-shot
    let mut samples = [kern::calibrate::Sample::default(); CALIBRATE_ROUNDS];
    for n in 1..=CALIBRATE_ROUNDS {
        if let Some(sample) = samples.get_mut(n - 1) {
            *sample = measure_window();
        }
        WINDOWS.store(n as u32, Ordering::Relaxed);
        let done = samples.get(..n).unwrap_or(&samples);
        if kern::calibrate::settled(done, CALIBRATE_AGREE) {
            break;
        }
    }
    let best = kern::calibrate::shortest(&samples).unwrap_or_default();
    let window_us = CALIBRATE_MS * 1000;
    TSC_HZ.store(
        kern::calibrate::per_second(best.tsc, window_us),
        Ordering::Relaxed,
    );
    let per_tick = (kern::calibrate::per_second(best.lapic, window_us) / TICK_HZ)
        .clamp(1, u64::from(u32::MAX));
    TIMER_COUNT.store(per_tick as u32, Ordering::Relaxed);
    start_timer();
}

/// How many windows the calibration measured before two agreed (its boot line says so: a
/// count above 2 means the CPU was stopped during some).
pub fn calibration_windows() -> u32 {
    WINDOWS.load(Ordering::Relaxed)
}

/// One calibration window: the TSC and LAPIC timer ticks from just before PIT channel 2
/// starts counting CALIBRATE_MS down to just after its output is seen high (mode 0: high
/// at the terminal count). The LAPIC timer is masked and one-shot; it is stopped again.
fn measure_window() -> kern::calibrate::Sample {
    let count = PIT_HZ * CALIBRATE_MS / 1000;
    // SAFETY: port 0x61 gates PIT channel 2 (speaker off), 0x43/0x42 program channel 2;
    // nothing else uses them.
    let (lapic, tsc) = unsafe {
        let gate = (inb(0x61) & !0x02) | 0x01;
        outb(0x61, gate & !0x01);
        outb(0x43, 0xb0); // channel 2, lobyte/hibyte, mode 0
        outb(0x42, (count & 0xff) as u8);
        outb(0x42, (count >> 8) as u8);
        write(REG_TIMER_INIT, u32::MAX);
        let t0 = rdtsc();
        // The count starts on the gate's rising edge.
        outb(0x61, gate);
        while inb(0x61) & 0x20 == 0 {}
        let t1 = rdtsc();
        let remaining = read(REG_TIMER_CURRENT);
        write(REG_TIMER_INIT, 0);
        (u64::from(u32::MAX - remaining), t1.wrapping_sub(t0))
    };
    kern::calibrate::Sample { tsc, lapic }
}

/// Enables the LAPIC and the periodic tick on a CPU other than the boot CPU, with the boot
/// CPU's calibration (every LAPIC timer runs at the same bus clock). After [`init`].
pub fn init_ap() {
    enable();
    write(REG_TIMER_DIVIDE, 0x3); // divide by 16, as calibrated
    start_timer();
}

/// Software-enables this CPU's LAPIC (spurious vector [`SPURIOUS_VECTOR`]) so that it takes
/// IPIs; its timer is left as it is. After [`init`] on the boot CPU.
pub fn enable() {
    write(REG_SVR, 0x100 | SPURIOUS_VECTOR as u32);
}

/// Starts this CPU's LAPIC timer: periodic, [`TICK_HZ`], vector [`TIMER_VECTOR`].
fn start_timer() {
    write(REG_LVT_TIMER, (1 << 17) | TIMER_VECTOR as u32); // periodic
    write(REG_TIMER_INIT, TIMER_COUNT.load(Ordering::Relaxed).max(1));
}

/// ICR delivery modes (bits 8–10), level assert (bit 14) and delivery status (bit 12).
const ICR_FIXED: u32 = 0 << 8;
const ICR_INIT: u32 = 5 << 8;
const ICR_STARTUP: u32 = 6 << 8;
const ICR_ASSERT: u32 = 1 << 14;
const ICR_PENDING: u32 = 1 << 12;

/// Sends one IPI to the LAPIC `apic_id` (xAPIC mode: ids up to 254) and waits until this
/// LAPIC has delivered it. Interrupts must be off (the ICR is not shared safely with an
/// interrupt handler that sends IPIs).
fn send_icr(apic_id: u32, low: u32) {
    write(REG_ICR_HIGH, (apic_id & 0xff) << 24);
    write(REG_ICR_LOW, low);
    while read(REG_ICR_LOW) & ICR_PENDING != 0 {
        core::hint::spin_loop();
    }
}

/// Sends the fixed interrupt `vector` to the CPU with LAPIC id `apic_id`.
pub fn send_ipi(apic_id: u32, vector: u8) {
    send_icr(apic_id, ICR_FIXED | ICR_ASSERT | u32::from(vector));
}

/// Wait after INIT before the first start-up IPI (Intel SDM vol. 3, 8.4.4.1).
pub const INIT_DELAY_US: u64 = 10_000;
/// Wait after each start-up IPI.
pub const SIPI_DELAY_US: u64 = 200;

/// Sends INIT (assert) to `apic_id`: that CPU resets and waits for a start-up IPI. (Also
/// the way to stop a CPU for good.)
pub fn send_init(apic_id: u32) {
    send_icr(apic_id, ICR_INIT | ICR_ASSERT);
}

/// Sends one start-up IPI: a CPU waiting after INIT starts in real mode at physical
/// address `start_page << 12` (CS = `start_page << 8`, IP = 0). A CPU not waiting for one
/// ignores it.
pub fn send_sipi(apic_id: u32, start_page: u8) {
    send_icr(apic_id, ICR_STARTUP | ICR_ASSERT | u32::from(start_page));
}

/// Starts the CPU with LAPIC id `apic_id` at `start_page << 12`: INIT, [`INIT_DELAY_US`],
/// then a start-up IPI twice with [`SIPI_DELAY_US`] after each (the MP start-up sequence of
/// the Intel SDM, vol. 3, 8.4.4.1; the second start-up IPI is ignored by a CPU that
/// already started).
pub fn send_init_sipi(apic_id: u32, start_page: u8) {
    send_init(apic_id);
    delay_us(INIT_DELAY_US);
    for _ in 0..2 {
        send_sipi(apic_id, start_page);
        delay_us(SIPI_DELAY_US);
    }
}

/// Busy-waits `us` microseconds by the calibrated TSC.
pub fn delay_us(us: u64) {
    let end = rdtsc().saturating_add(tsc_hz().saturating_mul(us) / 1_000_000);
    while rdtsc() < end {
        core::hint::spin_loop();
    }
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
