//! Calibrating the time-stamp counter and the local APIC timer against a known clock,
//! robustly when the processor itself may be stopped for a while (a virtual CPU whose host
//! thread is descheduled).
//!
//! One measurement opens a window of a known length on the reference clock (the PIT) and
//! counts the TSC and LAPIC ticks that pass while it is open. The counting starts before
//! the window opens and stops after it is seen closed, so anything that delays the
//! processor (a host that runs another thread for a few milliseconds) can only make a
//! measurement *longer* than the window, never shorter. Of several measurements, the
//! shortest is then the closest to the truth: [`shortest`] takes it, once two
//! measurements agree ([`settled`]). With one measurement
//! of 2 ms, a virtual CPU stopped for 7 ms while its window closed calibrated its TSC at
//! 12 GHz instead of 2.66 (every time the kernel measured then ran four times slow).
//!
//! # Invariants
//! - [`shortest`] returns a sample given to it (the one with the fewest TSC ticks, the
//!   first of equals), or `None` for no sample or only empty ones.

/// One measurement: the TSC ticks and the LAPIC timer ticks counted over one window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Time-stamp counter ticks.
    pub tsc: u64,
    /// Local APIC timer ticks (after its divider).
    pub lapic: u64,
}

/// The sample least stretched by delays: the one with the fewest TSC ticks (both counters
/// ran over the same interval, so its LAPIC count goes with it). Samples with no TSC tick
/// (a counter that did not run) are left out.
pub fn shortest(samples: &[Sample]) -> Option<Sample> {
    samples
        .iter()
        .copied()
        .filter(|s| s.tsc > 0)
        .fold(None, |best: Option<Sample>, s| match best {
            Some(b) if b.tsc <= s.tsc => Some(b),
            _ => Some(s),
        })
}

/// Whether `samples` have settled: their two shortest measurements (of TSC ticks) differ by
/// at most one part in `1 << shift`. A stop of the processor stretches a window by a
/// length of its own, so two that agree were most likely both unstretched; measuring
/// stops there.
pub fn settled(samples: &[Sample], shift: u32) -> bool {
    let mut best = [u64::MAX; 2];
    for s in samples.iter().filter(|s| s.tsc > 0) {
        if s.tsc < best[0] {
            best = [s.tsc, best[0]];
        } else if s.tsc < best[1] {
            best[1] = s.tsc;
        }
    }
    best[1] != u64::MAX && best[1] - best[0] <= best[0] >> shift
}

/// Ticks per second of a counter that advanced `ticks` over a window of `window_us`
/// microseconds (at least 1, and 1 for an empty window).
pub fn per_second(ticks: u64, window_us: u64) -> u64 {
    if window_us == 0 {
        return 1;
    }
    let hz = u128::from(ticks) * 1_000_000 / u128::from(window_us);
    u64::try_from(hz).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(tsc: u64, lapic: u64) -> Sample {
        Sample { tsc, lapic }
    }

    /// A window stretched by a stop of the processor (the second and fourth) never wins
    /// over one that was not, wherever it comes.
    #[test]
    fn a_stretched_window_is_never_chosen() {
        let true_window = s(5_326_000, 62_500);
        let stretched = s(24_098_000, 290_000);
        for at in 0..4 {
            let mut v = [stretched; 4];
            v[at] = true_window;
            assert_eq!(shortest(&v), Some(true_window), "{at}");
        }
        assert_eq!(shortest(&[stretched]), Some(stretched));
    }

    #[test]
    fn the_lapic_count_goes_with_its_window_and_ties_keep_the_first() {
        assert_eq!(shortest(&[s(10, 1), s(9, 7), s(9, 8)]), Some(s(9, 7)));
        assert_eq!(shortest(&[]), None);
        assert_eq!(shortest(&[s(0, 5)]), None);
        assert_eq!(shortest(&[s(0, 5), s(3, 2)]), Some(s(3, 2)));
    }

    #[test]
    fn two_agreeing_windows_settle_a_stretched_one_does_not() {
        assert!(!settled(&[], 7));
        assert!(!settled(&[s(5_326_000, 1)], 7));
        assert!(!settled(&[s(5_326_000, 1), s(24_098_000, 1)], 7));
        // 5,326,000 and 5,360,000 differ by 0.64%: within 1/128, not within 1/256.
        let close = [s(24_098_000, 1), s(5_360_000, 1), s(5_326_000, 1)];
        assert!(settled(&close, 7));
        assert!(!settled(&close, 8));
        assert!(
            settled(&[s(9, 1), s(9, 1)], 7),
            "identical windows (icount)"
        );
        assert!(
            !settled(&[s(0, 1), s(0, 1)], 7),
            "counters that did not run"
        );
    }

    #[test]
    fn per_second_scales_and_never_overflows_or_divides_by_zero() {
        assert_eq!(per_second(5_326_000, 2_000), 2_663_000_000);
        assert_eq!(per_second(0, 2_000), 1);
        assert_eq!(per_second(7, 0), 1);
        assert_eq!(per_second(u64::MAX, 1), u64::MAX);
    }
}
