//! Token buckets: how the kernel limits the console lines user errors cause (one bucket
//! per task and one for the whole kernel), so that no task can flood the console.
//!
//! A bucket holds up to `burst` tokens and gains one every `period_ns`; each line takes
//! one, and a line that finds none is suppressed (and counted by the caller).

/// A token bucket; its burst and period are the caller's constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    tokens: u64,
    /// When the last token was added (or the bucket made).
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket at time `now_ns`.
    pub const fn full(burst: u64, now_ns: u64) -> TokenBucket {
        TokenBucket {
            tokens: burst,
            last_ns: now_ns,
        }
    }

    /// Takes a token at time `now_ns`, after adding those earned since the last one (at
    /// most `burst` in all); false when there is none. A clock that goes back adds nothing.
    pub fn take(&mut self, now_ns: u64, burst: u64, period_ns: u64) -> bool {
        let period = period_ns.max(1);
        let earned = now_ns.saturating_sub(self.last_ns) / period;
        if earned > 0 {
            self.tokens = self.tokens.saturating_add(earned).min(burst);
            self.last_ns = self.last_ns.saturating_add(earned.saturating_mul(period));
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_one_per_period() {
        let mut b = TokenBucket::full(3, 1000);
        assert!(b.take(1000, 3, 100));
        assert!(b.take(1000, 3, 100));
        assert!(b.take(1050, 3, 100));
        assert!(!b.take(1099, 3, 100));
        // One period later: one token.
        assert!(b.take(1100, 3, 100));
        assert!(!b.take(1150, 3, 100));
        // A long pause refills to the burst, no more.
        for _ in 0..3 {
            assert!(b.take(1_000_000, 3, 100));
        }
        assert!(!b.take(1_000_000, 3, 100));
    }

    #[test]
    fn clock_going_back_adds_nothing() {
        let mut b = TokenBucket::full(1, 5000);
        assert!(b.take(5000, 1, 10));
        assert!(!b.take(10, 1, 10));
        assert!(!b.take(0, 1, 0));
        assert!(b.take(5010, 1, 10));
    }

    #[test]
    fn a_flood_gets_a_bounded_number() {
        let mut b = TokenBucket::full(8, 0);
        let allowed = (0..=100_000u64)
            .filter(|i| b.take(i * 10_000, 8, 1_000_000_000))
            .count();
        // 1 second of calls: the burst plus one refill.
        assert_eq!(allowed, 9);
    }
}
