//! `survivor`: runs beside a task that faults and must not be disturbed by its death. It
//! does 300 rounds of arithmetic with a `yield` after each, so it is still running when
//! the other task dies, then checks the result against its closed form (which also
//! catches registers not preserved across system calls or task switches).
//!
//! Verdict: `TEST PASS survivor`.
#![no_std]
#![no_main]

use core::hint::black_box;

use baton_rt::{println, yield_now};

baton_rt::entry!(main);

const ROUNDS: u64 = 300;
const PER_ROUND: u64 = 1000;

fn main(_task_id: u64) -> i32 {
    // Sum of k² for k in 0..ROUNDS * PER_ROUND, computed in rounds.
    let mut sum = 0u64;
    for round in 0..ROUNDS {
        let start = round * PER_ROUND;
        for k in start..start + PER_ROUND {
            let k = black_box(k);
            sum = sum.wrapping_add(k.wrapping_mul(k));
        }
        yield_now();
    }

    let n = ROUNDS * PER_ROUND;
    let expected = n * (n - 1) * (2 * n - 1) / 6;
    if sum == expected {
        println!("TEST PASS survivor");
        0
    } else {
        println!("TEST FAIL survivor: sum {sum}, expected {expected}");
        1
    }
}
