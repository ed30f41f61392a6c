//! `flood_spam`: makes [`CALLS`] `debug_write` calls with an unmapped buffer, each
//! refused with `BadAddress` (an error the kernel reports on its console, rate-limited),
//! for the `flood` test. Spawned with a bootstrap right, it is the test's control run
//! instead: as many empty `debug_write` calls from a good buffer, which print nothing.
#![no_std]
#![no_main]

use baton_rt::{debug_write_raw, println, Error};

baton_rt::entry!(main);

/// Bad calls made.
const CALLS: u64 = 100_000;
/// An address nothing maps (below the first user page).
const BAD: u64 = 0x10;

fn main(_me: u64) -> i32 {
    let control = baton_rt::start::bootstrap() != 0;
    let (ptr, len, want) = if control {
        (main as *const () as u64, 0, Ok(0))
    } else {
        (BAD, 8, Err(Error::BadAddress))
    };
    for i in 0..CALLS {
        let r = debug_write_raw(ptr, len);
        if r != want {
            println!("TEST FAIL flood_spam: call {i} returned {r:?}");
            return 1;
        }
    }
    if control {
        println!("TEST PASS flood_spam: {CALLS} empty calls");
    } else {
        println!("TEST PASS flood_spam: {CALLS} bad-address calls refused");
    }
    0
}
