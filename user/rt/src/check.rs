//! The conventions of Baton's test programs: an `ok: <what>` line for every check that
//! holds, `TEST FAIL <test>: <what>` for the first that does not (the program then stops
//! with [`Failed`]), and `TEST PASS <test>` at the end. `xtask`'s integration tests read
//! these lines from the serial log.
//!
//! A program names itself once and forwards to this module:
//!
//! ```ignore
//! const TEST: &str = "exc";
//! macro_rules! check { ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) } }
//! fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
//!     baton_rt::check::must(TEST, what, r)
//! }
//! ```

use crate::{println, stats, Error};

/// A check failed; its `TEST FAIL` line has been printed.
#[derive(Debug)]
pub struct Failed;

/// Prints `ok: <what>` when `cond` holds; otherwise `TEST FAIL <test>: <what>` and returns
/// `Err(Failed)` from the enclosing function.
#[macro_export]
macro_rules! check {
    ($test:expr, $cond:expr, $($what:tt)*) => {
        if $cond {
            $crate::println!("ok: {}", format_args!($($what)*));
        } else {
            $crate::println!("TEST FAIL {}: {}", $test, format_args!($($what)*));
            return Err($crate::check::Failed);
        }
    };
}

/// `r`'s value, or (printing `TEST FAIL <test>: <what>: <error>`) [`Failed`].
pub fn must<T>(test: &str, what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    r.map_err(|e| {
        println!("TEST FAIL {test}: {what}: {}", e.name());
        Failed
    })
}

/// Polls `done` until it holds or `limit_ms` milliseconds have passed on the clock,
/// sleeping 1 ms between looks: whether it held. Bounded by time, not by a count of
/// sleeps: a 1 ms sleep lasts at least a timer tick (10 ms), so a counted wait lasts ten
/// times what it says, and one that never ends runs into the test's time limit instead of
/// failing with its name. A failed sleep is `TEST FAIL <test>: wait: <error>`.
pub fn poll_until(
    test: &str,
    limit_ms: u64,
    mut done: impl FnMut() -> bool,
) -> Result<bool, Failed> {
    let t0 = crate::clock_ns();
    loop {
        if done() {
            return Ok(true);
        }
        if crate::clock_ns().wrapping_sub(t0) > limit_ms.saturating_mul(1_000_000) {
            return Ok(false);
        }
        must(test, "wait", crate::sleep_ns(1_000_000))?;
    }
}

/// The exit code of a test program whose checks gave `result`, after printing
/// `TEST PASS <test>` if they all held.
pub fn finish(test: &str, result: Result<(), Failed>) -> i32 {
    match result {
        Ok(()) => {
            println!("TEST PASS {test}");
            0
        }
        Err(Failed) => 1,
    }
}

/// The kernel's counts of ports, names and queued messages (to compare with a baseline).
pub fn ipc_counts(test: &str) -> Result<(u64, u64, u64), Failed> {
    let s = must(test, "stats", stats())?;
    Ok((s.ports, s.names, s.messages_queued))
}

/// The kernel's statistics once the activations and ports of servers just told to exit
/// are gone, back to `base`'s counts (waiting up to 200 ms: a task ends at its threads'
/// next kernel entry); after 200 ms, whatever they are. Compare the result with `base`.
pub fn settled(test: &str, base: &baton_abi::Stats) -> Result<baton_abi::Stats, Failed> {
    let mut now = must(test, "stats", stats())?;
    for _ in 0..200 {
        if now.activations == base.activations && now.ports == base.ports {
            break;
        }
        must(test, "wait", crate::sleep_ns(1_000_000))?;
        now = must(test, "stats", stats())?;
    }
    Ok(now)
}
