//! The wake-storm programs' waiters (`wakestorm`, `wakestorm_child`): one wait of a kind
//! chosen at random, with a short random timeout, so that timeouts race whatever wakes
//! the thread meanwhile.

use baton_rt::ipc::{IpcBuffer, MSG_RECEIVE};
use core::sync::atomic::{AtomicU32, Ordering};

/// Steps the generator `n`, then waits once: a receive on `port`, a `wait` on `word`, or a
/// sleep, each for 10 to 70 microseconds. The result is not looked at: a timeout, a wake
/// and an error (the port gone) are all what the storm expects.
pub fn wait_once(buf: &mut IpcBuffer, port: u64, word: &AtomicU32, n: &mut u64) {
    *n = n
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let ns = 10_000 + (*n >> 40) % 60_000;
    match (*n >> 33) % 3 {
        0 => {
            let _ = buf.msg(MSG_RECEIVE, port, ns);
        }
        1 => {
            let seen = word.load(Ordering::Relaxed);
            let _ = baton_rt::wait(word, seen, ns);
        }
        _ => {
            let _ = baton_rt::sleep_ns(ns);
        }
    }
}
