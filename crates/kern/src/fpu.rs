//! The machine-independent half of user threads' floating-point and vector state: the
//! initial image a save area starts from, and what a thread switch does with the
//! registers (the kernel's `fpu` module and `arch::fpu` carry it out).
//!
//! The kernel switches the registers **eagerly**: the CPU records whose save area its
//! registers hold (*live*); a switch to another thread saves the live area's registers and
//! restores the incoming thread's, or, when the incoming thread has no area (it never
//! used the registers), puts the registers in their initial state and sets `CR0.TS` so
//! that its first use traps.
//!
//! `TS` alone does not hide the values left in the registers: a processor may execute a
//! floating-point or vector instruction speculatively before the trap and leak what it
//! read through the cache (the LazyFP leak, CVE-2018-3665). So registers that held a
//! thread's values are never left in the CPU while a thread without an area runs.
//!
//! # Invariants
//! - After every [`switch_plan`], `CR0.TS` is clear exactly when the incoming thread has an
//!   area (the registers are live for it) — so a thread without one can never read another
//!   thread's values architecturally.
//! - After every [`switch_plan`], the registers hold another thread's values only if they
//!   were restored from the incoming thread's area (they are its own) — so a thread without
//!   one cannot read them speculatively either.
//! - The registers are saved whenever they were live for another thread, before anything
//!   is restored over them.

/// Offset of the x87 control word in the FXSAVE/XSAVE legacy region.
pub const FCW_OFFSET: usize = 0;
/// Offset of MXCSR in the legacy region.
pub const MXCSR_OFFSET: usize = 24;
/// Offset of the XSAVE header (its first word is `XSTATE_BV`).
pub const HEADER_OFFSET: usize = 512;
/// Bytes of the legacy region and the header: the least an image may have.
pub const IMAGE_MIN: usize = 576;

/// MXCSR for a new thread (and at reset): every exception masked, round to nearest.
pub const MXCSR_DEFAULT: u32 = 0x1f80;
/// x87 control word for a new thread (what `fninit` sets): every exception masked,
/// 64-bit precision, round to nearest.
pub const FCW_DEFAULT: u16 = 0x037f;

/// The initial state as a save area of `N` bytes (`N` ≥ [`IMAGE_MIN`]): the default control
/// words, every register zero, the x87 tag word "all empty" (0 in the abridged form), and
/// an XSAVE header with no component marked in use, so that XRSTOR puts every component in
/// its initial state and FXRSTOR loads zeros.
pub const fn initial_image<const N: usize>() -> [u8; N] {
    assert!(
        N >= IMAGE_MIN,
        "an image holds at least the legacy region and the header"
    );
    let mut a = [0u8; N];
    let fcw = FCW_DEFAULT.to_le_bytes();
    a[FCW_OFFSET] = fcw[0];
    a[FCW_OFFSET + 1] = fcw[1];
    let mxcsr = MXCSR_DEFAULT.to_le_bytes();
    let mut i = 0;
    while i < 4 {
        a[MXCSR_OFFSET + i] = mxcsr[i];
        i += 1;
    }
    a
}

/// What a switch does with the registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchPlan {
    /// Save the registers into the live area (they are another thread's values).
    pub save: bool,
    /// Restore the incoming thread's area into the registers.
    pub restore: bool,
    /// Clear `CR0.TS` (first, before the restore).
    pub clear_ts: bool,
    /// Put the registers in their initial state (after the save, before `TS` is set):
    /// the outgoing thread's values must not stay in the CPU while a thread without an
    /// area runs.
    pub scrub: bool,
    /// Set `CR0.TS` (after the save and the scrub).
    pub set_ts: bool,
}

/// The plan for a switch: `live`, whether the registers hold a thread's area now (`TS`
/// clear); `next`, whether the incoming thread has an area; `same`, whether that is the
/// live one (the same thread again), when nothing moves.
pub const fn switch_plan(live: bool, next: bool, same: bool) -> SwitchPlan {
    if same && live && next {
        return SwitchPlan {
            save: false,
            restore: false,
            clear_ts: false,
            scrub: false,
            set_ts: false,
        };
    }
    SwitchPlan {
        save: live,
        restore: next,
        clear_ts: next && !live,
        scrub: live && !next,
        set_ts: live && !next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_image_holds_the_defaults_and_nothing_else() {
        let a: [u8; 832] = initial_image();
        assert_eq!(u16::from_le_bytes([a[0], a[1]]), 0x037f);
        assert_eq!(u32::from_le_bytes([a[24], a[25], a[26], a[27]]), 0x1f80);
        // XSTATE_BV, XCOMP_BV and the reserved header bytes are zero: XRSTOR takes every
        // component to its initial state and never faults.
        assert!(a[HEADER_OFFSET..HEADER_OFFSET + 64].iter().all(|&b| b == 0));
        let set: usize = a.iter().filter(|&&b| b != 0).count();
        assert_eq!(set, 4, "only the two control words are non-zero");
    }

    /// Every case, against the invariants: TS ends clear exactly when the incoming thread
    /// has an area; registers live for another thread are saved; a restore happens with
    /// TS clear; the same thread again costs nothing.
    #[test]
    fn every_switch_keeps_the_invariants() {
        for live in [false, true] {
            for next in [false, true] {
                for same in [false, true] {
                    if same && !(live && next) {
                        continue; // "the same area" needs one
                    }
                    let p = switch_plan(live, next, same);
                    let ts_clear_after = (live && !p.set_ts) || p.clear_ts;
                    assert_eq!(ts_clear_after, next, "{live} {next} {same}: TS");
                    assert_eq!(p.save, live && !same, "{live} {next} {same}: save");
                    assert_eq!(p.restore, next && !same, "{live} {next} {same}: restore");
                    assert!(!(p.set_ts && p.clear_ts));
                    // Whatever another thread left in the registers is overwritten before
                    // the incoming thread runs: by its own area, or by the initial state.
                    let others_left = live && !same && !p.restore && !p.scrub;
                    assert!(!others_left, "{live} {next} {same}: values left behind");
                    assert!(!(p.scrub && p.restore), "{live} {next} {same}: scrub");
                    if same {
                        assert_eq!(
                            p,
                            SwitchPlan {
                                save: false,
                                restore: false,
                                clear_ts: false,
                                scrub: false,
                                set_ts: false
                            }
                        );
                    }
                }
            }
        }
    }
}
