//! `spin`: CPU-bound work with no system calls inside the loop, to show that the kernel's
//! timer preempts user code. Two tasks run this program at once.
//!
//! The work is [`PHASES`] phases of [`ITERATIONS`] iterations of a multiply-add chain,
//! printing `progress <k>` after each. Every [`SAMPLE_EVERY`] iterations it reads the TSC;
//! an interval more than [`GAP_FACTOR`] times the shortest one seen while calibrating means
//! another task ran in between (a timer interrupt alone costs far less). Each phase starts
//! from the same seed, so every phase must end on the same value: a mismatch means user
//! registers were not preserved across preemption.
//!
//! Verdict: `TEST PASS spin` if it was preempted at least once.
#![no_std]
#![no_main]

use core::hint::black_box;

use baton_rt::{println, rdtsc};

baton_rt::entry!(main);

/// Number of work phases, each followed by a `progress` line.
const PHASES: u32 = 8;
/// Iterations per phase, tuned so that a phase takes about 40 ms under QEMU TCG. The loop
/// body is about 12 instructions; QEMU 7.2's TCG runs such a loop at roughly 3 billion
/// instructions a second (about 1 billion under `-icount shift=0`, where a phase is then
/// about 145 ms of wall time and of virtual time alike).
const ITERATIONS: u64 = 12_000_000;
/// Read the TSC once per this many iterations (a power of two).
const SAMPLE_EVERY: u64 = 4096;
/// Intervals used to calibrate the normal sampling interval.
const CALIBRATION_SAMPLES: u32 = 16;
/// An interval longer than this many normal ones counts as a preemption.
const GAP_FACTOR: u64 = 20;

/// What one phase observed.
struct Phase {
    /// Final value of the multiply-add chain.
    value: u64,
    /// Intervals longer than the threshold.
    gaps: u32,
    /// Longest interval.
    max_interval: u64,
}

/// One phase: `iterations` steps of the chain, with TSC sampling. Intervals longer than
/// `threshold` are counted as gaps; the phase boundary (where we print) is not an interval.
#[inline(never)]
fn run_phase(iterations: u64, threshold: u64) -> Phase {
    let mut value = 1u64;
    let mut phase = Phase {
        value: 0,
        gaps: 0,
        max_interval: 0,
    };
    let mut last = rdtsc();
    for i in 0..iterations {
        value = black_box(
            value
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(i | 1),
        );
        if i & (SAMPLE_EVERY - 1) == SAMPLE_EVERY - 1 {
            let now = rdtsc();
            let interval = now.wrapping_sub(last);
            last = now;
            phase.max_interval = phase.max_interval.max(interval);
            if interval > threshold {
                phase.gaps += 1;
            }
        }
    }
    phase.value = value;
    phase
}

/// The shortest TSC interval over [`SAMPLE_EVERY`] iterations, from a few samples. The
/// minimum is unaffected by a preemption during calibration.
fn calibrate() -> u64 {
    let mut shortest = u64::MAX;
    for _ in 0..CALIBRATION_SAMPLES {
        let start = rdtsc();
        let _ = run_phase(SAMPLE_EVERY, u64::MAX);
        shortest = shortest.min(rdtsc().wrapping_sub(start));
    }
    shortest.max(1)
}

fn main(_task_id: u64) -> i32 {
    let normal = calibrate();
    let threshold = normal.saturating_mul(GAP_FACTOR);
    println!(
        "normal interval {normal} ticks per {SAMPLE_EVERY} iterations, gap threshold {threshold}"
    );

    let mut preempted = 0u32;
    let mut longest = 0u64;
    let mut reference = None;
    let mut corrupted = false;
    for k in 1..=PHASES {
        let phase = run_phase(ITERATIONS, threshold);
        preempted += phase.gaps;
        longest = longest.max(phase.max_interval);
        match reference {
            None => reference = Some(phase.value),
            Some(v) if v != phase.value => corrupted = true,
            Some(_) => {}
        }
        println!("progress {k}");
    }

    println!("longest interval {longest} ticks");
    println!("preempted {preempted} times");
    if corrupted {
        println!("TEST FAIL spin: phases computed different values (registers corrupted?)");
        1
    } else if preempted == 0 {
        println!("TEST FAIL spin: never preempted");
        1
    } else {
        println!("TEST PASS spin");
        0
    }
}
