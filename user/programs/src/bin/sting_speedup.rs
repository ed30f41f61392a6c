//! `sting_speedup`: the wall time of the four Figure 4 applications (`sting::selftest`)
//! on one virtual processor and on one per CPU, the median of five runs each, for the
//! speedup of the Sting paper's Figures 4 and 5. Meant for QEMU without `-icount` (where
//! every CPU would share one instruction clock): the figures are wall time of a software
//! CPU on a shared host, so they are noisy and say how the programs scale, not how fast
//! a machine is. Each parallel answer is checked against the one-processor run.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use baton_rt::check::{finish, Failed};
use baton_rt::println;

baton_rt::entry!(main);

const TEST: &str = "sting_speedup";
const RUNS: usize = 5;

fn main(_task_id: u64) -> i32 {
    finish(TEST, run())
}

/// The median wall time (ns) of `RUNS` runs of `app` on `vps` processors, and its answer.
fn timed(app: fn(usize) -> u64, vps: usize) -> (u64, u64) {
    let mut times = Vec::new();
    let mut answer = 0;
    for _ in 0..RUNS {
        let t0 = baton_rt::sys::clock_ns();
        answer = app(vps);
        times.push(baton_rt::sys::clock_ns().saturating_sub(t0));
    }
    times.sort_unstable();
    (times.get(RUNS / 2).copied().unwrap_or(0), answer)
}

fn run() -> Result<(), Failed> {
    let cpus = baton_rt::sys::stats().map_or(1, |s| s.cpus.max(1) as usize);
    for (name, app) in sting::selftest::APPS {
        let (one, a1) = timed(*app, 1);
        let (all, an) = timed(*app, cpus);
        println!(
            "SPEEDUP app={name} cpus={cpus} one_vp_ms={} per_cpu_ms={} speedup={}.{:02} (wall time)",
            one / 1_000_000,
            all / 1_000_000,
            one / all.max(1),
            (one * 100 / all.max(1)) % 100
        );
        baton_rt::check!(
            TEST,
            a1 == an,
            "{name}: the same answer on 1 and {cpus} processors ({a1}, {an})"
        );
    }
    Ok(())
}
