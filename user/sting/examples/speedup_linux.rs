//! The Linux guest's side of the Sting paper's Figures 4 and 5: the same four applications
//! as Baton's `sting_speedup` (`sting::selftest::APPS`, at `SPEEDUP_SIZES`), built for
//! Linux as a static program (`cargo xtask sting-speedup` does it), where the runtime's
//! virtual processors are POSIX threads. Prints the same `SPEEDUP` lines: the wall time of
//! each parallel program on one virtual processor and on one per CPU, the median of three
//! runs, the answers checked against the sequential program's; `SPEEDUP done` at the end,
//! or a `TEST FAIL` line.

use std::time::Instant;
use sting::selftest::{App, Sizes, APPS, SPEEDUP_SIZES};

const RUNS: usize = 3;

/// The median wall time (ns) of `RUNS` runs, whether every answer was `want`, and the
/// last run's thread count.
fn timed(app: &App, vps: usize, z: &Sizes, want: u64) -> (u128, bool, u64) {
    let mut times = Vec::new();
    let (mut ok, mut threads) = (true, 0);
    for _ in 0..RUNS {
        let t0 = Instant::now();
        let (a, s) = (app.parallel)(vps, z);
        times.push(t0.elapsed().as_nanos());
        ok &= a == want;
        threads = s.created;
    }
    times.sort_unstable();
    (times[RUNS / 2], ok, threads)
}

fn main() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let z = SPEEDUP_SIZES;
    let mut failed = false;
    for app in APPS {
        let t0 = Instant::now();
        let seq = (app.sequential)(&z);
        let seq_ns = t0.elapsed().as_nanos();
        let (one, ok1, threads) = timed(app, 1, &z, seq);
        let (all, okn, _) = timed(app, cpus, &z, seq);
        println!(
            "SPEEDUP app={} size=\"{}\" cpus={cpus} threads={threads} sequential_ms={} one_vp_ms={} per_cpu_ms={} speedup={}.{:02} (wall time)",
            app.name,
            (app.size)(&z),
            seq_ns / 1_000_000,
            one / 1_000_000,
            all / 1_000_000,
            one / all.max(1),
            (one * 100 / all.max(1)) % 100
        );
        if !(ok1 && okn) {
            println!(
                "TEST FAIL speedup_linux: {} differs from its sequential answer {seq}",
                app.name
            );
            failed = true;
        }
    }
    if !failed {
        println!("SPEEDUP done");
    }
}
