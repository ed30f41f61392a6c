//! `sting_fp`: floating-point and vector isolation between Sting's user-level threads under
//! Checkpoint preemption (`docs/sting.md`, "Checkpoint and Resume").
//!
//! Three user-level threads share each virtual processor, which the kernel preempts with a
//! short quantum. Each thread, inside `sting::preemptible`, loads values of its own into
//! all sixteen XMM registers, the eight x87 stack registers, the x87 control word and
//! `mxcsr`, spins on nothing but an integer counter in memory for a while, and then takes
//! an `fxsave` image of what its registers hold, all in one `asm!` block so that no
//! compiled code runs in between. A round during which another thread of the same
//! processor made progress was a round in which this thread was stopped by a Checkpoint
//! upcall and resumed later (on one processor nothing else can run it); every thread is
//! preempted in the middle of its spin at least [`MIN_PREEMPTED`] times, and every image
//! must hold exactly the thread's own values: a Checkpoint or Resume that dropped or mixed
//! up the saved state shows another thread's values (or the runtime's) there.
//!
//! Run with one virtual processor, then one per CPU (threads on different processors are
//! isolated by the kernel's eager save on its own switches); after a one-processor run
//! the kernel's threads and charged memory are back to the baseline, and so are they, and
//! the task's resident pages, after each of three more runs with a processor per CPU.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use alloc::vec::Vec;
use baton_rt::check::{finish, Failed};
use baton_rt::println;
use core::arch::asm;
use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::Relaxed;
use sting::{Config, Kind};

baton_rt::entry!(main);

const TEST: &str = "sting_fp";
/// User-level threads on each virtual processor.
const THREADS: usize = 3;
/// Spin iterations of one round (a few milliseconds under TCG: a timer tick, every 10 ms,
/// often falls inside a round).
const SPIN: u64 = 200_000;
/// Rounds in which each thread must have been preempted part way.
const MIN_PREEMPTED: u64 = 20;
/// Rounds after which a thread gives up (the check then fails instead of hanging).
const MAX_ROUNDS: u64 = 10_000;
/// The preemption quantum asked for (nanoseconds; the timer ticks every 10 ms).
const QUANTUM: u64 = 1_000_000;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) }
}

fn main(_task_id: u64) -> i32 {
    finish(TEST, run())
}

type Measure = (u64, u64);

fn baseline() -> Measure {
    baton_rt::sys::stats().map_or((0, 0), |s| (s.threads, s.kmem_charged))
}

/// This task's resident pages.
fn resident() -> u64 {
    baton_rt::vm::stats().map_or(0, |v| v.resident)
}

/// The baseline once this task's other kernel threads (those of a runtime that ended)
/// are gone.
fn settled() -> Measure {
    let mut now = baseline();
    for _ in 0..100 {
        if now.0 == 1 {
            break;
        }
        let _ = baton_rt::sys::sleep_ns(10_000_000);
        now = baseline();
    }
    now
}

fn run() -> Result<(), Failed> {
    let cpus = baton_rt::sys::stats().map_or(1, |s| s.cpus.max(1) as usize);
    // The first runs grow what stays grown (the kernel's tables, baton-rt's kept stacks of
    // kernel threads); the one-processor run after them is measured against the baseline.
    isolated(1)?;
    if cpus > 1 {
        isolated(cpus)?;
    }
    let base = settled();
    isolated(1)?;
    let mut now = baseline();
    for _ in 0..100 {
        if now == base {
            break;
        }
        let _ = baton_rt::sys::sleep_ns(10_000_000);
        now = baseline();
    }
    check!(
        now == base,
        "the kernel's threads and charged memory are back: {base:?} before, {now:?} after"
    );
    // Runs with a processor per CPU, one after another, give back what they took too:
    // after the first (which makes the stacks of the processors' kernel threads, kept for
    // later runs), each leaves the kernel's threads, its charged memory and this task's
    // resident pages where they were.
    if cpus > 1 {
        isolated(cpus)?;
        let base = (settled(), resident());
        for run in 1..=3 {
            isolated(cpus)?;
            let mut now = (settled(), resident());
            for _ in 0..100 {
                if now == base {
                    break;
                }
                let _ = baton_rt::sys::sleep_ns(10_000_000);
                now = (baseline(), resident());
            }
            check!(
                now == base,
                "run {run} on {cpus} processors gives back what it took: (threads, charged kernel memory), resident pages {base:?} before, {now:?} after"
            );
        }
    }
    Ok(())
}

/// One thread's values: what it loads into its registers.
#[repr(C, align(16))]
struct Values {
    /// XMM0 to XMM15.
    xmm: [[u64; 2]; 16],
    /// Pushed onto the x87 stack in this order (so ST0 holds the last).
    x87: [i64; 8],
    /// `mxcsr` to load, then the default to restore.
    mxcsr: [u32; 2],
    /// The x87 control word to load.
    fcw: u16,
}

impl Values {
    /// Values that no other thread (`id` differs) has in any register.
    fn of(id: u64) -> Values {
        let mut xmm = [[0u64; 2]; 16];
        for (k, r) in (0u64..).zip(xmm.iter_mut()) {
            let seed = (id + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (k << 56);
            *r = [seed, !seed.rotate_left(k as u32 + 7)];
        }
        let mut x87 = [0i64; 8];
        for (k, v) in (0i64..).zip(x87.iter_mut()) {
            *v = (id as i64 + 1) * 1_000_003 + k * 7_919 + 1;
        }
        // A rounding mode of its own in both control words (the default is 0, nearest).
        let rc = (id % 3 + 1) as u32;
        Values {
            xmm,
            x87,
            mxcsr: [0x1f80 | (rc << 13), 0x1f80],
            fcw: 0x037f | ((rc as u16) << 10),
        }
    }
}

/// An `fxsave` image.
#[repr(C, align(16))]
struct FxArea([u8; 512]);

impl FxArea {
    fn u16_at(&self, at: usize) -> u16 {
        let b = &self.0;
        u16::from_le_bytes([b[at], b[at + 1]])
    }
    fn u32_at(&self, at: usize) -> u32 {
        let b = &self.0;
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    fn u64_at(&self, at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.0[at..at + 8]);
        u64::from_le_bytes(w)
    }
    /// XMM`k` as two words.
    fn xmm(&self, k: usize) -> [u64; 2] {
        [self.u64_at(160 + 16 * k), self.u64_at(168 + 16 * k)]
    }
    /// ST`k`'s 80 bits (mantissa, sign and exponent).
    fn st(&self, k: usize) -> (u64, u16) {
        (self.u64_at(32 + 16 * k), self.u16_at(40 + 16 * k))
    }
}

/// Loads `v` into the registers, increments `*counter` `spin` times touching no other
/// register state, and saves the registers into `out`; then puts the x87 stack and the
/// control words back to the ABI's defaults.
#[inline(never)]
fn round(v: &Values, counter: &AtomicU64, spin: u64, out: &mut FxArea) {
    // SAFETY: every pointer is to memory of the right size borrowed for the call (`v`
    // read, `counter` written only by this thread while others read it atomically, `out`
    // written, 16-byte aligned); every vector and x87 register is declared clobbered, and
    // the x87 stack is left empty and both control words at their defaults, as the ABI
    // wants on leaving.
    unsafe {
        asm!(
            "ldmxcsr [{v} + 320]",
            "fninit",
            "fldcw [{v} + 328]",
            "fild qword ptr [{v} + 256]",
            "fild qword ptr [{v} + 264]",
            "fild qword ptr [{v} + 272]",
            "fild qword ptr [{v} + 280]",
            "fild qword ptr [{v} + 288]",
            "fild qword ptr [{v} + 296]",
            "fild qword ptr [{v} + 304]",
            "fild qword ptr [{v} + 312]",
            "movdqa xmm0, [{v}]",
            "movdqa xmm1, [{v} + 16]",
            "movdqa xmm2, [{v} + 32]",
            "movdqa xmm3, [{v} + 48]",
            "movdqa xmm4, [{v} + 64]",
            "movdqa xmm5, [{v} + 80]",
            "movdqa xmm6, [{v} + 96]",
            "movdqa xmm7, [{v} + 112]",
            "movdqa xmm8, [{v} + 128]",
            "movdqa xmm9, [{v} + 144]",
            "movdqa xmm10, [{v} + 160]",
            "movdqa xmm11, [{v} + 176]",
            "movdqa xmm12, [{v} + 192]",
            "movdqa xmm13, [{v} + 208]",
            "movdqa xmm14, [{v} + 224]",
            "movdqa xmm15, [{v} + 240]",
            "2:",
            "add qword ptr [{c}], 1",
            "dec {n}",
            "jnz 2b",
            "fxsave64 [{out}]",
            "fninit",
            "ldmxcsr [{v} + 324]",
            v = in(reg) v,
            c = in(reg) counter.as_ptr(),
            out = in(reg) out.0.as_mut_ptr(),
            n = inout(reg) spin.max(1) => _,
            out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
            out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
            out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
            out("xmm12") _, out("xmm13") _, out("xmm14") _, out("xmm15") _,
            out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
            out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
            options(nostack),
        );
    }
}

/// The registers of `img` that do not hold `v` (the x87 ones compared with `reference`,
/// taken with the same values): how many, and the first one's name.
fn mismatch(img: &FxArea, v: &Values, reference: &FxArea) -> Option<(u32, &'static str)> {
    const XMM: [&str; 16] = [
        "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",
    ];
    const ST: [&str; 8] = ["st0", "st1", "st2", "st3", "st4", "st5", "st6", "st7"];
    let mut bad = 0;
    let mut first = None;
    let mut note = |differs: bool, name: &'static str| {
        if differs {
            bad += 1;
            first = first.or(Some(name));
        }
    };
    for (k, name) in XMM.iter().enumerate() {
        note(img.xmm(k) != v.xmm[k], name);
    }
    for (k, name) in ST.iter().enumerate() {
        note(img.st(k) != reference.st(k), name);
    }
    note(img.u32_at(24) != v.mxcsr[0], "mxcsr");
    note(img.u16_at(0) != v.fcw, "the x87 control word");
    first.map(|f| (bad, f))
}

/// What one thread saw.
#[derive(Clone, Copy, Default)]
struct Seen {
    rounds: u64,
    /// Rounds during which another thread of its processor ran.
    preempted: u64,
    /// The first round whose image held something else: how many registers differed,
    /// the first one's name, the round.
    bad: Option<(u32, &'static str, u64)>,
}

/// Runs [`THREADS`] threads on each of `vps` virtual processors (FIFO, no stealing, so each
/// stays on its own), preempted with a short quantum; checks what they saw.
fn isolated(vps: usize) -> Result<(), Failed> {
    let config = Config::new(vps, Kind::Fifo)
        .kernel_upcalls(2)
        .preempt(QUANTUM);
    let total = vps * THREADS;
    let (seen, st) = sting::run(config, move || {
        let counters: Arc<Vec<AtomicU64>> =
            Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
        let satisfied = Arc::new(AtomicU64::new(0));
        let kids: Vec<_> = (0..total)
            .map(|id| {
                let (counters, satisfied) = (counters.clone(), satisfied.clone());
                sting::fork_on(id / THREADS, move || {
                    let v = Values::of(id as u64);
                    // The x87 registers' 80-bit images, taken once before the spins (the
                    // XMM registers and control words are checked against `v` itself).
                    let mut reference = FxArea([0; 512]);
                    round(&v, &AtomicU64::new(0), 1, &mut reference);
                    let vp = id / THREADS;
                    let others = move |c: &[AtomicU64]| -> u64 {
                        (vp * THREADS..(vp + 1) * THREADS)
                            .filter(|&j| j != id)
                            .map(|j| c[j].load(Relaxed))
                            .sum()
                    };
                    sting::preemptible(|| {
                        let mut s = Seen::default();
                        let mut img = FxArea([0; 512]);
                        let mut counted = false;
                        while s.rounds < MAX_ROUNDS && satisfied.load(Relaxed) < total as u64 {
                            let before = others(&counters);
                            round(&v, &counters[id], SPIN, &mut img);
                            let after = others(&counters);
                            s.rounds += 1;
                            if after != before {
                                s.preempted += 1;
                            }
                            if s.bad.is_none() {
                                s.bad =
                                    mismatch(&img, &v, &reference).map(|(n, r)| (n, r, s.rounds));
                            }
                            if !counted && s.preempted >= MIN_PREEMPTED {
                                counted = true;
                                satisfied.fetch_add(1, Relaxed);
                            }
                        }
                        s
                    })
                })
            })
            .collect();
        kids.iter().for_each(|k| k.wait());
        kids.iter()
            .map(|k| k.value().map_or(Seen::default(), |s| *s))
            .collect::<Vec<Seen>>()
    });
    let rounds: Vec<u64> = seen.iter().map(|s| s.rounds).collect();
    let preempted: Vec<u64> = seen.iter().map(|s| s.preempted).collect();
    println!(
        "{vps} processor(s), {THREADS} threads each: rounds {rounds:?}, preempted part way {preempted:?}; {} Checkpoints, {} declined",
        st.checkpoints, st.declined
    );
    if let Some((id, (n, reg, r))) = seen
        .iter()
        .enumerate()
        .find_map(|(id, s)| s.bad.map(|b| (id, b)))
    {
        check!(
            false,
            "{vps} processor(s): thread {id} found {n} of its 26 registers changed under it (the first {reg}) after round {r}"
        );
    }
    check!(
        preempted.iter().all(|&p| p >= MIN_PREEMPTED),
        "{vps} processor(s): every thread was preempted part way through at least {MIN_PREEMPTED} spins ({preempted:?})"
    );
    check!(
        st.checkpoints >= total as u64 * MIN_PREEMPTED,
        "{vps} processor(s): the runtime took {} Checkpoints (at least {})",
        st.checkpoints,
        total as u64 * MIN_PREEMPTED
    );
    check!(
        seen.len() == total && seen.iter().all(|s| s.bad.is_none()),
        "{vps} processor(s): all {total} threads kept their own XMM, x87 and control registers through every preemption"
    );
    Ok(())
}
