//! The floating-point and vector registers of user threads: the x87, SSE and (where the
//! CPU has it) AVX state, saved and restored with XSAVE/XRSTOR (XSAVEOPT where present), or
//! FXSAVE/FXRSTOR on a CPU without XSAVE.
//!
//! The kernel itself never uses these registers (it is built soft-float); they belong to
//! user threads. What this module gives the core (`crate::fpu`) is the machine half:
//! switching the registers on ([`init`], on every CPU), a save area ([`Area`]), saving into
//! one and restoring from one, loading the initial state, and `CR0.TS`, which makes the
//! first use by a thread without an area trap (#NM, "device not available").
//!
//! # Invariants
//! - `XCR0` holds the same components on every CPU ([`init`] computes them once, on the
//!   boot CPU), so one [`Area`] layout serves everywhere.
//! - An [`Area`] handed to [`restore`] holds what [`save`] wrote into it or
//!   [`Area::reset`] made (a header with no reserved bit set): XRSTOR never faults.

use core::arch::asm;
use core::arch::x86_64::{__cpuid, __cpuid_count};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use x86_64::registers::control::{Cr0, Cr0Flags, Cr4, Cr4Flags};

/// Bytes of a save area: the legacy region (512), the XSAVE header (64) and the AVX upper
/// halves (256), the standard layout for x87 | SSE | AVX.
pub const AREA_BYTES: usize = 832;

/// `XCR0` bits: x87, SSE, AVX.
const XCR0_X87: u64 = 1;
const XCR0_SSE: u64 = 1 << 1;
const XCR0_AVX: u64 = 1 << 2;

/// How the state is saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// FXSAVE/FXRSTOR: x87 and SSE.
    Fxsave = 0,
    /// XSAVE/XRSTOR.
    Xsave = 1,
    /// XSAVEOPT (saves only what changed since the last XRSTOR from the same area)/XRSTOR.
    Xsaveopt = 2,
}

/// The mode [`init`] chose.
static MODE: AtomicU8 = AtomicU8::new(Mode::Fxsave as u8);
/// The components in `XCR0` (0 without XSAVE).
static XCR0: AtomicU64 = AtomicU64::new(0);

/// What [`init`] found, for the boot report.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    /// How the state is saved.
    pub mode: Mode,
    /// Whether the AVX registers (YMM) are part of it.
    pub avx: bool,
    /// Bytes the CPU says its save area takes (`CPUID.(0xD,0).EBX`; 512 for FXSAVE).
    pub size: u32,
}

/// A thread's save area, in the standard (non-compacted) XSAVE layout; FXSAVE uses its
/// first 512 bytes.
#[repr(C, align(64))]
#[derive(Clone)]
pub struct Area(pub [u8; AREA_BYTES]);

impl core::fmt::Debug for Area {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Area(..)")
    }
}

impl Area {
    /// A save area in the initial state (`kern::fpu::initial_image`): x87 control word and
    /// MXCSR at their defaults, every register zero, no component marked in use (an XRSTOR
    /// of it puts every component in its initial state).
    pub const fn initial() -> Area {
        Area(kern::fpu::initial_image())
    }

    /// Puts the area back in the initial state ([`Area::initial`]).
    pub fn reset(&mut self) {
        *self = Area::initial();
    }
}

/// The initial state, loaded by [`load_initial`].
static INITIAL: Area = Area::initial();

/// Switches the floating-point and vector registers on for user threads on this CPU:
/// `CR0.EM` off and `CR0.MP` on, `CR4.OSFXSR` and `OSXMMEXCPT` on, and with XSAVE
/// `CR4.OSXSAVE` and `XCR0` = x87 | SSE (| AVX where the CPU has it); then `CR0.TS` on, so
/// that the first use traps until a thread with a save area runs. Called on every CPU,
/// after `cpu::init_features`.
pub fn init() -> Info {
    // CPUID leaf 1 exists on every x86-64 processor.
    let l1 = __cpuid(1);
    let xsave = l1.ecx & (1 << 26) != 0;
    let avx_cpu = l1.ecx & (1 << 28) != 0;
    let mut cr4 = Cr4::read();
    cr4 |= Cr4Flags::OSFXSR | Cr4Flags::OSXMMEXCPT_ENABLE;
    if xsave {
        cr4 |= Cr4Flags::OSXSAVE;
    }
    // SAFETY: FXSR and SSE are baseline x86-64; OSXSAVE is set only when CPUID has XSAVE.
    // The kernel runs no SSE instruction, so nothing it does changes.
    unsafe { Cr4::write(cr4) };
    let mut info = Info {
        mode: Mode::Fxsave,
        avx: false,
        size: 512,
    };
    if xsave {
        // Leaf 0xD exists when XSAVE does: sub-leaf 0 lists the components XCR0 may hold,
        // sub-leaf 1 the XSAVEOPT flag.
        let d0 = __cpuid_count(0xd, 0);
        let d1 = __cpuid_count(0xd, 1);
        let avx = avx_cpu && d0.eax & (XCR0_AVX as u32) != 0;
        let xcr0 = XCR0_X87 | XCR0_SSE | if avx { XCR0_AVX } else { 0 };
        // SAFETY: CR4.OSXSAVE is on; x87 and SSE are always valid components, AVX only
        // when CPUID lists it.
        unsafe { xsetbv(xcr0) };
        XCR0.store(xcr0, Ordering::Relaxed);
        // Sub-leaf 0's EBX: the size of the area for what XCR0 holds now.
        let size = __cpuid_count(0xd, 0).ebx;
        if size as usize > AREA_BYTES {
            panic!(
                "fpu: the CPU's save area for XCR0 {xcr0:#x} is {size} bytes, above {AREA_BYTES}"
            );
        }
        let mode = if d1.eax & 1 != 0 {
            Mode::Xsaveopt
        } else {
            Mode::Xsave
        };
        MODE.store(mode as u8, Ordering::Relaxed);
        info = Info { mode, avx, size };
    }
    let mut cr0 = Cr0::read();
    cr0.remove(Cr0Flags::EMULATE_COPROCESSOR);
    cr0.insert(Cr0Flags::MONITOR_COPROCESSOR | Cr0Flags::TASK_SWITCHED);
    // SAFETY: only the FPU controls change; with TS set, any x87/SSE/AVX instruction traps
    // (#NM), and the kernel runs none.
    unsafe { Cr0::write(cr0) };
    info
}

/// Writes `XCR0`.
///
/// # Safety
/// CR4.OSXSAVE is on and `value` holds only components the CPU supports, x87 included.
unsafe fn xsetbv(value: u64) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "xsetbv",
            in("ecx") 0u32,
            in("eax") value as u32,
            in("edx") (value >> 32) as u32,
            options(nomem, nostack, preserves_flags)
        );
    }
}

/// The mode [`init`] chose.
#[inline(always)]
fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        2 => Mode::Xsaveopt,
        1 => Mode::Xsave,
        _ => Mode::Fxsave,
    }
}

/// Saves this CPU's floating-point and vector registers into `area`.
///
/// # Safety
/// `CR0.TS` is clear (the registers are live: [`clear_ts`]).
#[inline(always)]
pub unsafe fn save(area: &mut Area) {
    let mask = XCR0.load(Ordering::Relaxed);
    let (lo, hi) = (mask as u32, (mask >> 32) as u32);
    let p = area.0.as_mut_ptr();
    // SAFETY: `p` is a 64-byte-aligned area of `AREA_BYTES`, at least the CPU's size for
    // XCR0 (`init` checked); TS is clear (the caller), so nothing traps.
    unsafe {
        match mode() {
            Mode::Xsaveopt => {
                asm!("xsaveopt64 [{}]", in(reg) p, in("eax") lo, in("edx") hi, options(nostack, preserves_flags))
            }
            Mode::Xsave => {
                asm!("xsave64 [{}]", in(reg) p, in("eax") lo, in("edx") hi, options(nostack, preserves_flags))
            }
            Mode::Fxsave => asm!("fxsave64 [{}]", in(reg) p, options(nostack, preserves_flags)),
        }
    }
}

/// Loads this CPU's floating-point and vector registers from `area`.
///
/// # Safety
/// `CR0.TS` is clear; `area` holds a saved state or the initial one (the module's
/// invariant).
#[inline(always)]
pub unsafe fn restore(area: &Area) {
    let mask = XCR0.load(Ordering::Relaxed);
    let (lo, hi) = (mask as u32, (mask >> 32) as u32);
    let p = area.0.as_ptr();
    // SAFETY: as for `save`; the area's header and MXCSR are valid (the caller).
    unsafe {
        match mode() {
            Mode::Xsaveopt | Mode::Xsave => {
                asm!("xrstor64 [{}]", in(reg) p, in("eax") lo, in("edx") hi, options(nostack, preserves_flags, readonly))
            }
            Mode::Fxsave => {
                asm!("fxrstor64 [{}]", in(reg) p, options(nostack, preserves_flags, readonly))
            }
        }
    }
}

/// Puts every floating-point and vector register of this CPU in its initial state (zero,
/// with the default control words): one XRSTOR (or FXRSTOR) of [`Area::initial`].
///
/// # Safety
/// `CR0.TS` is clear.
#[inline(always)]
pub unsafe fn load_initial() {
    // SAFETY: TS is clear (the caller); `INITIAL` is the initial state.
    unsafe { restore(&INITIAL) }
}

/// Clears `CR0.TS`: floating-point and vector instructions run.
#[inline(always)]
pub fn clear_ts() {
    // SAFETY: `clts` only clears CR0.TS; the kernel runs no such instruction either way.
    unsafe { asm!("clts", options(nomem, nostack, preserves_flags)) };
}

/// Sets `CR0.TS`: the next floating-point or vector instruction traps (#NM). Three
/// instructions (a read, an `or`, a write), not the `x86_64` crate's read-modify-write,
/// which reads CR0 twice: it is on the switch path.
#[inline(always)]
pub fn set_ts() {
    // SAFETY: only CR0.TS (bit 3) changes, which makes user FP instructions trap; the
    // kernel runs none.
    unsafe {
        asm!(
            "mov {t}, cr0",
            "or {t}, 8",
            "mov cr0, {t}",
            t = out(reg) _,
            options(nomem, nostack)
        );
    }
}
