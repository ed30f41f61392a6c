//! Gauges: a level that changes over time, with its maximum and time-weighted mean.
//!
//! For statistics such as "kernel stacks in use: current, maximum, time-weighted mean". A
//! [`Gauge`] integrates its level over time (∫ level dt, in level × nanoseconds, in a
//! `u128`), so [`Gauge::mean_milli`] is exact: 1000 × the integral / the elapsed time,
//! rounded down. Every operation is O(1).
//!
//! Time is a `u64` in the caller's unit (nanoseconds of the monotonic clock in the
//! kernel). A `now` earlier than the last one seen is treated as no time having passed
//! (the change happens at the last time seen), so a clock glitch never panics or corrupts
//! the integral.
//!
//! # Invariants
//! - `start <= last`, and `last` never decreases.
//! - `integral` is ∫ level dt over `start..last`. It cannot overflow: the level is below
//!   2^64 and the total time below 2^64, so the integral is below 2^128 (it saturates
//!   anyway rather than wrap).
//! - `max >= current`, and `max` is the greatest level ever held.

/// A level over time. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gauge {
    /// When the gauge was created.
    start: u64,
    /// The latest time seen; the integral covers `start..last`.
    last: u64,
    /// The level now.
    current: u64,
    /// The greatest level ever held.
    max: u64,
    /// ∫ level dt over `start..last`.
    integral: u128,
}

impl Gauge {
    /// A gauge at level 0, starting at time `now`.
    pub const fn new(now: u64) -> Self {
        Gauge {
            start: now,
            last: now,
            current: 0,
            max: 0,
            integral: 0,
        }
    }

    /// Accounts for the time from `last` to `now` at the current level (nothing if `now`
    /// is not later than `last`).
    fn advance(&mut self, now: u64) {
        if let Some(dt) = now.checked_sub(self.last) {
            let area = u128::from(self.current) * u128::from(dt);
            self.integral = self.integral.saturating_add(area);
            self.last = now;
        }
    }

    /// Raises the level by one at time `now` (saturating at `u64::MAX`).
    pub fn inc(&mut self, now: u64) {
        self.set(now, self.current.saturating_add(1));
    }

    /// Lowers the level by one at time `now`, staying at 0 if it is already 0.
    pub fn dec(&mut self, now: u64) {
        self.set(now, self.current.saturating_sub(1));
    }

    /// Sets the level to `value` at time `now`.
    pub fn set(&mut self, now: u64, value: u64) {
        self.advance(now);
        self.current = value;
        self.max = self.max.max(value);
    }

    /// The level now.
    pub const fn current(&self) -> u64 {
        self.current
    }

    /// The greatest level ever held.
    pub const fn max(&self) -> u64 {
        self.max
    }

    /// 1000 × the time-weighted mean level from creation to `now`, rounded down: 1000 ×
    /// (∫ level dt) / (now − start). When no time has passed (or `now` is before the last
    /// time seen and no time had passed before it) it is 1000 × the current level. Saturates
    /// at `u64::MAX`.
    pub fn mean_milli(&self, now: u64) -> u64 {
        let now = now.max(self.last);
        let elapsed = u128::from(now.saturating_sub(self.start));
        let tail = u128::from(self.current) * u128::from(now.saturating_sub(self.last));
        let integral = self.integral.saturating_add(tail);
        let Some(q) = integral.checked_div(elapsed) else {
            // No time has passed: the mean is the current level.
            return self.current.saturating_mul(1000);
        };
        // floor(1000 × I / E) = 1000 × q + floor(1000 × r / E) with I = q × E + r, r < E:
        // this never forms 1000 × I, which could overflow a u128 (r × 1000 < 2^74 cannot).
        let r = integral - q * elapsed;
        let milli = q.saturating_mul(1000).saturating_add(r * 1000 / elapsed);
        u64::try_from(milli).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_empty() {
        let g = Gauge::new(100);
        assert_eq!(g.current(), 0);
        assert_eq!(g.max(), 0);
        assert_eq!(g.mean_milli(100), 0);
        assert_eq!(g.mean_milli(1_000), 0);
    }

    #[test]
    fn exact_time_weighted_mean() {
        let mut g = Gauge::new(1000);
        g.inc(1000); // 1 over 1000..1010
        g.inc(1010); // 2 over 1010..1030
        g.set(1030, 5); // 5 over 1030..1040
        g.dec(1040); // 4 from 1040 on
        assert_eq!(g.current(), 4);
        assert_eq!(g.max(), 5);
        // ∫ = 1×10 + 2×20 + 5×10 = 100 over 40: mean 2.5.
        assert_eq!(g.mean_milli(1040), 2500);
        // Plus 4×20 = 180 over 60: mean 3.0.
        assert_eq!(g.mean_milli(1060), 3000);
        // Plus 4×5 = 200 over 65: 3.0769… → 3076.
        assert_eq!(g.mean_milli(1065), 3076);
        // Querying does not change the gauge.
        assert_eq!(g.mean_milli(1040), 2500);
    }

    #[test]
    fn rounds_down() {
        let mut g = Gauge::new(0);
        g.set(0, 1);
        g.set(1, 0);
        // ∫ = 1 over 3: 333.33… → 333.
        assert_eq!(g.mean_milli(3), 333);
        assert_eq!(g.mean_milli(2), 500);
    }

    #[test]
    fn no_time_passed_is_current_level() {
        let mut g = Gauge::new(50);
        g.set(50, 7);
        assert_eq!(g.mean_milli(50), 7000);
        g.dec(50);
        assert_eq!(g.mean_milli(50), 6000);
        assert_eq!(g.max(), 7);
    }

    #[test]
    fn dec_saturates_at_zero() {
        let mut g = Gauge::new(0);
        g.dec(5);
        assert_eq!(g.current(), 0);
        g.inc(10);
        g.dec(20);
        g.dec(30);
        assert_eq!(g.current(), 0);
        assert_eq!(g.max(), 1);
        // ∫ = 1×10 over 40.
        assert_eq!(g.mean_milli(40), 250);
    }

    #[test]
    fn time_going_backwards_is_no_time() {
        let mut g = Gauge::new(100);
        g.set(200, 2); // 0 over 100..200, 2 from 200.
                       // A change "at 150" happens at 200: no time at level 2 is counted.
        g.set(150, 4);
        assert_eq!(g.current(), 4);
        assert_eq!(g.mean_milli(200), 0);
        assert_eq!(g.mean_milli(50), 0, "query before the last time seen");
        // 4 over 200..300: ∫ = 400 over 200.
        assert_eq!(g.mean_milli(300), 2000);
        // Before the start entirely: no time has passed.
        let mut h = Gauge::new(1000);
        h.set(1000, 3);
        assert_eq!(h.mean_milli(10), 3000);
        h.inc(5);
        assert_eq!(h.current(), 4);
        assert_eq!(h.mean_milli(0), 4000);
    }

    #[test]
    fn extremes_do_not_overflow() {
        let mut g = Gauge::new(0);
        g.set(0, u64::MAX);
        g.inc(0);
        assert_eq!(g.current(), u64::MAX);
        // ∫ = (2^64 − 1)^2, close to u128::MAX; 1000 × mean saturates.
        assert_eq!(g.mean_milli(u64::MAX), u64::MAX);
        assert_eq!(g.mean_milli(0), u64::MAX);
        g.set(u64::MAX, 0);
        assert_eq!(g.mean_milli(u64::MAX), u64::MAX);

        let mut h = Gauge::new(0);
        h.set(0, u64::MAX / 1000);
        h.set(u64::MAX / 2, 0);
        // Mean just under (u64::MAX / 1000) / 2, times 1000: fits.
        let m = h.mean_milli(u64::MAX);
        assert!(m <= u64::MAX / 2 + 1);
        assert!(m >= u64::MAX / 2 - 2000);
    }
}
