//! `sting_speedup`: the wall time of the four Figure 4 applications (`sting::selftest::APPS`)
//! at the sizes of `sting::selftest::SPEEDUP_SIZES` (the paper's, but N-body with fewer
//! bodies), on one virtual processor and on one per CPU, the median of three runs each,
//! for the speedup of the Sting paper's Figures 4 and 5. Each answer is checked against
//! the sequential program's. Meant for QEMU without `-icount` (where every CPU would
//! share one instruction clock): the figures are wall time of a software CPU on a shared
//! host, so they say how the programs scale, not how fast a machine is.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use baton_rt::check::{finish, Failed};
use baton_rt::println;
use sting::selftest::{App, Sizes, APPS, SPEEDUP_SIZES};

baton_rt::entry!(main);

const TEST: &str = "sting_speedup";
const RUNS: usize = 3;

fn main(_task_id: u64) -> i32 {
    finish(TEST, run(&SPEEDUP_SIZES))
}

/// The median wall time (ns) of `RUNS` runs of `app` on `vps` processors, its answers
/// (all the same, or the first that differs), and the last run's thread count.
fn timed(app: &App, vps: usize, z: &Sizes) -> (u64, u64, bool, u64) {
    let mut times = Vec::new();
    let (mut answer, mut same, mut threads) = (None, true, 0);
    for _ in 0..RUNS {
        let t0 = baton_rt::sys::clock_ns();
        let (a, s) = (app.parallel)(vps, z);
        times.push(baton_rt::sys::clock_ns().saturating_sub(t0));
        same &= answer.is_none_or(|b| b == a);
        answer.get_or_insert(a);
        threads = s.created;
    }
    times.sort_unstable();
    let median = times.get(RUNS / 2).copied().unwrap_or(0);
    (median, answer.unwrap_or(0), same, threads)
}

fn run(z: &Sizes) -> Result<(), Failed> {
    let cpus = baton_rt::sys::stats().map_or(1, |s| s.cpus.max(1) as usize);
    for app in APPS {
        let t0 = baton_rt::sys::clock_ns();
        let seq = (app.sequential)(z);
        let seq_ns = baton_rt::sys::clock_ns().saturating_sub(t0);
        let (one, a1, same1, threads) = timed(app, 1, z);
        let (all, an, same_n, _) = timed(app, cpus, z);
        println!(
            "SPEEDUP app={} size=\"{}\" cpus={cpus} threads={threads} sequential_ms={} one_vp_ms={} per_cpu_ms={} speedup={}.{:02} (wall time)",
            app.name,
            (app.size)(z),
            seq_ns / 1_000_000,
            one / 1_000_000,
            all / 1_000_000,
            one / all.max(1),
            (one * 100 / all.max(1)) % 100
        );
        baton_rt::check!(
            TEST,
            same1 && same_n && a1 == seq && an == seq,
            "{}: the sequential answer ({seq}) on 1 and {cpus} processors ({a1}, {an}), every run",
            app.name
        );
    }
    Ok(())
}
