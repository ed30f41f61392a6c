//! `strand`: Sting's Checkpoint and Resume upcalls (the kernel preempts a user-level thread
//! and its virtual processor's runtime decides what runs next) and SPIN's `Strand` events
//! raised where the virtual processors get their upcalls (`docs/sting.md`,
//! `docs/extensions.md`).
//!
//! - bad `vp_preempt`, `vp_resume` and `strand_count` calls get their error codes;
//! - on one virtual processor, a compute-bound thread (integer and floating-point state in
//!   registers) is preempted by the kernel and another thread of the same processor makes
//!   progress (counters) before the first has finished; the first, resumed through
//!   `vp_resume`, gives the same checksum as a run without preemption;
//! - one virtual processor per CPU, two such threads on each: every checksum right;
//! - a built-in `Strand` handler that counts sees exactly its own task's Block upcalls and
//!   Checkpoints; one that vetoes `Strand.Block` leaves the processor blocked with its
//!   thread (no Block upcall), one that vetoes `Strand.Resume` makes `vp_resume` fail;
//!   another task's virtual processors (`strand_peer`) are not affected by this task's
//!   veto;
//! - WebAssembly `Strand` handlers: one that vetoes, and one that never returns, which
//!   its fuel stops (the Block upcall still comes, the handler is removed, the installer
//!   told);
//! - the kernel's threads and charged memory are back to the baseline afterwards.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use alloc::vec::Vec;
use baton_abi::exception::UserRegs;
use baton_abi::spin::{
    EVENT_STRAND_BLOCK, EVENT_STRAND_CHECKPOINT, EVENT_STRAND_RESUME, EVENT_STRAND_UNBLOCK,
};
use baton_abi::vproc::{VpConfig, VpEvent, UPCALL_STACK_MIN};
use baton_rt::check::{finish, Failed};
use baton_rt::vproc::{strand_count, vp_create, vp_destroy, vp_preempt, vp_resume_raw};
use baton_rt::{println, spin, Error};
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use sting::{Config, Kind};

baton_rt::entry!(main);

const TEST: &str = "strand";
/// Iterations of the compute-bound loop: long enough for several time slices under TCG.
const CRUNCH: u64 = 3_000_000;
/// The preemption quantum asked for (the timer ticks every 10 ms).
const QUANTUM: u64 = 2_000_000;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) }
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    finish(TEST, run())
}

type Measure = (u64, u64);

fn baseline() -> Measure {
    baton_rt::sys::stats().map_or((0, 0), |s| (s.threads, s.kmem_charged))
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
    bad_calls()?;
    let expect = crunch(CRUNCH, 0, &AtomicU64::new(0));
    // The first round warms up what the kernel keeps once made (table slots).
    preempted_on_one(expect)?;
    // So does the first task spawned; the peer then runs with no handler of ours at all.
    let first = must("strand_peer's report", peer_blocks())?;
    check!(
        first >= 1,
        "another task's virtual processor gets its Block upcalls ({first})"
    );
    // A run with one processor per CPU spawns kernel threads whose stacks baton-rt keeps
    // for good (its rule for kernel threads' stacks), so it goes before the baseline too.
    preempted_per_cpu()?;
    // And the first WebAssembly module (the slots the kernel's tables grow to).
    wasm_handlers()?;
    // And a first choosing handler (the tables it grows stay grown).
    chosen()?;
    let base = settled();
    preempted_on_one(expect)?;
    events(expect)?;
    chosen()?;
    chosen_refused(expect)?;
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
    Ok(())
}

/// The compute-bound work: integer and floating-point state that lives in registers
/// across the whole loop, so a resume that lost any register changes the result.
/// `progress` is set every 4096 iterations.
#[inline(never)]
fn crunch(n: u64, seed: u64, progress: &AtomicU64) -> u64 {
    let (mut a, mut b, mut c, mut d) = (seed | 1, 2u64, 3u64, 4u64);
    let (mut f, mut g) = (1.0f64, 0.5f64);
    for i in 0..n {
        a = a.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
        b ^= a.rotate_left(13);
        c = c.wrapping_add(b >> 7);
        d = d.rotate_left(5) ^ c;
        f = f * 0.999_999_9 + (a & 0xff) as f64 * 1e-9;
        g = g * 1.000_000_1 - (d & 0xf) as f64 * 1e-12;
        if i & 0xfff == 0 {
            progress.store(i + 1, Relaxed);
        }
    }
    a ^ b ^ c ^ d ^ f.to_bits() ^ g.to_bits().rotate_left(17)
}

/// An upcall entry for registrations that never get an upcall.
extern "C" fn never(_ev: *const VpEvent, _kind: u64, _cookie: u64) -> ! {
    panic!("strand: an upcall that should not have come");
}

/// Where a `vp_resume` that should have been refused would continue.
extern "C" fn resumed_wrongly() -> ! {
    println!("strand: FAIL: a vp_resume that should have been refused ran");
    baton_rt::sys::exit(1)
}

fn bad_calls() -> Result<(), Failed> {
    check!(
        vp_preempt(12345, QUANTUM) == Err(Error::NotFound),
        "vp_preempt of no such processor is not found"
    );
    // SAFETY: the call is refused (the caller carries nothing) before anything is read.
    let e = unsafe { vp_resume_raw(0) };
    check!(
        e == Error::InvalidArgument,
        "vp_resume by a thread that carries nothing is invalid ({e:?})"
    );
    check!(
        strand_count(7) == Err(Error::NotFound),
        "strand_count of an event that is not a Strand event is not found"
    );
    check!(
        strand_count(EVENT_STRAND_BLOCK) == Ok((0, 0)),
        "strand_count with no handler is 0"
    );
    let stack = alloc::vec![0u8; 2 * UPCALL_STACK_MIN as usize + 16];
    let lo = (stack.as_ptr() as u64 + 15) & !15;
    let cfg = VpConfig {
        entry: never as *const () as u64,
        upcall_lo: lo,
        upcall_hi: lo + 2 * UPCALL_STACK_MIN,
        ..VpConfig::default()
    };
    let vp = must("vp_create", vp_create(&cfg))?;
    check!(
        vp_preempt(vp, 1000) == Err(Error::InvalidArgument),
        "vp_preempt with a quantum under the minimum is invalid"
    );
    // An hour's quantum: a tick between the two calls (a loaded host can put one there)
    // must not bring a Checkpoint to this processor, whose entry is `never`.
    check!(
        vp_preempt(vp, 3_600_000_000_000) == Ok(()) && vp_preempt(vp, 0) == Ok(()),
        "vp_preempt turns Checkpoints on and off"
    );
    // SAFETY: each of these is refused before the registers are used.
    unsafe {
        check!(
            vp_resume_raw(0) == Error::BadAddress,
            "vp_resume of a null block is a bad address"
        );
        check!(
            vp_resume_raw(0xffff_8000_0000_0000) == Error::BadAddress,
            "vp_resume of a kernel address is a bad address"
        );
        let mut r = UserRegs {
            rip: 0xffff_ffff_8000_0000,
            rsp: lo + 1024,
            ..UserRegs::default()
        };
        check!(
            vp_resume_raw(core::ptr::from_ref(&r) as u64) == Error::BadAddress,
            "vp_resume to a kernel rip is a bad address"
        );
        r.rip = resumed_wrongly as *const () as u64;
        r.rsp = 0x8000_0000_0000;
        check!(
            vp_resume_raw(core::ptr::from_ref(&r) as u64) == Error::BadAddress,
            "vp_resume to a non-canonical rsp is a bad address"
        );
        // `Strand.Resume` vetoed: the call fails and nothing is resumed.
        let d = must("import builtin.strand", spin::import("builtin.strand"))?;
        let h = must(
            "install veto on Strand.Resume",
            spin::install(d, "veto", EVENT_STRAND_RESUME, 0, 0, 0),
        )?;
        r.rsp = lo + 1024;
        let e = vp_resume_raw(core::ptr::from_ref(&r) as u64);
        check!(
            e == Error::Denied,
            "a Strand.Resume handler's veto fails vp_resume ({e:?})"
        );
        check!(
            strand_count(EVENT_STRAND_RESUME) == Ok((1, 1)),
            "the veto was counted: {:?}",
            strand_count(EVENT_STRAND_RESUME)
        );
        must("remove", spin::remove(h))?;
        must("release", spin::release(d))?;
    }
    must("vp_destroy", vp_destroy(vp))?;
    Ok(())
}

/// What one preemption run saw.
struct Seen {
    /// The compute-bound thread's checksum.
    sum: u64,
    /// How far the first thread had got when the second first saw it part way (0: never).
    first_at_second: u64,
    /// The second thread's count when the first finished.
    second_at_first: u64,
    checkpoints: u64,
    declined: u64,
}

/// Runs the compute-bound thread and a counting thread on one virtual processor whose
/// threads the kernel preempts.
fn one_run(spares: u64) -> Seen {
    let config = Config::new(1, Kind::Fifo)
        .kernel_upcalls(spares)
        .preempt(QUANTUM);
    let (seen, st) = sting::run(config, || {
        let progress = Arc::new(AtomicU64::new(0));
        let count = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (p, c, dn) = (progress.clone(), count.clone(), done.clone());
        let first = sting::fork(move || {
            let sum = sting::preemptible(|| crunch(CRUNCH, 0, &p));
            let at = c.load(Relaxed);
            dn.store(true, Release);
            (sum, at)
        });
        let (p, c, dn) = (progress.clone(), count.clone(), done.clone());
        let second = sting::fork(move || {
            // The first thread's progress the first time this thread saw it part way
            // (started and not finished). A tick may preempt the first thread before its
            // first iteration, so the first look alone can see 0; looking on every pass
            // still needs the first thread preempted while part way, which is what the
            // test shows.
            let mut first_at = 0;
            // Floating-point work of its own, so that a switch that kept the first
            // thread's vector registers only by luck would show.
            sting::preemptible(|| {
                let mut x = 3.0f64;
                let mut n = 0u64;
                while n < 200_000_000 {
                    let at = p.load(Relaxed);
                    if dn.load(Acquire) {
                        break;
                    }
                    if first_at == 0 {
                        first_at = at;
                    }
                    x = x * 0.5 + 1.0;
                    n += 1;
                    c.store(n, Relaxed);
                }
                core::hint::black_box(x);
            });
            first_at
        });
        // Waited for, not absorbed: an absorbed thread runs on its demander's stack, and
        // the runtime does not preempt code absorbed there.
        first.wait();
        second.wait();
        let (sum, second_at_first) = *first.value().unwrap_or(&(0, 0));
        let first_at_second = *second.value().unwrap_or(&0);
        (sum, first_at_second, second_at_first)
    });
    Seen {
        sum: seen.0,
        first_at_second: seen.1,
        second_at_first: seen.2,
        checkpoints: st.checkpoints,
        declined: st.declined,
    }
}

fn preempted_on_one(expect: u64) -> Result<(), Failed> {
    let s = one_run(2);
    println!(
        "one processor: checksum {:#x} (expected {expect:#x}); the second thread saw the first part way at {} of {CRUNCH}; it had counted {} when the first finished; {} checkpoints, {} declined",
        s.sum, s.first_at_second, s.second_at_first, s.checkpoints, s.declined
    );
    check!(
        s.checkpoints >= 1,
        "the kernel preempted the compute-bound thread ({} Checkpoints)",
        s.checkpoints
    );
    check!(
        s.first_at_second > 0 && s.first_at_second < CRUNCH,
        "the second thread of the same processor ran while the first was part way ({} of {CRUNCH})",
        s.first_at_second
    );
    check!(
        s.second_at_first > 0,
        "the second thread made progress before the first finished ({})",
        s.second_at_first
    );
    check!(
        s.sum == expect,
        "the preempted thread, resumed, computed the right checksum ({:#x}, {expect:#x})",
        s.sum
    );
    Ok(())
}

fn preempted_per_cpu() -> Result<(), Failed> {
    let n = baton_rt::sys::stats().map_or(1, |s| s.cpus.max(1) as usize);
    let expect: Vec<u64> = (0..2 * n as u64)
        .map(|i| crunch(CRUNCH / 4, i, &AtomicU64::new(0)))
        .collect();
    let config = Config::per_cpu(Kind::Fifo)
        .kernel_upcalls(2)
        .preempt(QUANTUM);
    let (sums, st) = sting::run(config, move || {
        let kids: Vec<_> = (0..2 * n)
            .map(|i| {
                sting::fork_on(i % n, move || {
                    sting::preemptible(|| crunch(CRUNCH / 4, i as u64, &AtomicU64::new(0)))
                })
            })
            .collect();
        kids.iter().for_each(|k| k.wait());
        kids.iter()
            .map(|k| *k.value().unwrap_or(&0))
            .collect::<Vec<u64>>()
    });
    println!(
        "{n} processors: {} checkpoints, {} declined",
        st.checkpoints, st.declined
    );
    check!(
        sums == expect,
        "two preemptible threads on each of {n} processors all computed their checksums"
    );
    check!(
        st.checkpoints >= 1,
        "threads were preempted ({})",
        st.checkpoints
    );
    Ok(())
}

/// How many times the busy thread counts before it wakes the sleeper.
const WAKE_AFTER: u64 = 50;
/// How long the sleeper waits when the busy thread is expected to wake it: long enough for
/// a loaded host (the busy thread runs only once the Block upcall has come, after any
/// handler of `Strand.Block` has run out of fuel), and reached only when it never runs.
const WOKEN_WITHIN_NS: u64 = 20_000_000_000;
/// How long the sleeper waits when the processor is expected to stay blocked with it.
const VETOED_NS: u64 = 30_000_000;

/// A run in which a thread blocks in the kernel while another counts, on one virtual
/// processor with upcalls: its statistics and how far the counter moved while it was
/// blocked. The sleeper waits on a word (up to `timeout_ns`) that the busy thread sets and
/// wakes after counting [`WAKE_AFTER`] times, so the result does not depend on how fast
/// the host runs: the counter moves if and only if the processor ran on while its thread
/// was blocked.
fn sleeper(timeout_ns: u64) -> (sting::Stats, u64) {
    let (moved, st) = sting::run(Config::new(1, Kind::Fifo).kernel_upcalls(2), move || {
        let count = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::new(AtomicU32::new(0));
        let (c, d, f) = (count.clone(), done.clone(), flag.clone());
        let busy = sting::fork(move || {
            let mut n = 0u64;
            while !d.load(Acquire) {
                c.fetch_add(1, Relaxed);
                n += 1;
                if n == WAKE_AFTER {
                    f.store(1, Release);
                    let _ = baton_rt::sys::wake(&f, 1);
                }
                sting::yield_now();
            }
        });
        let (c, f) = (count.clone(), flag.clone());
        let sleeper = sting::fork(move || {
            let before = c.load(Relaxed);
            // A wake for nobody or a spurious return waits again; only the flag or the
            // timeout ends the wait.
            while f.load(Acquire) == 0 {
                if let Err(Error::TimedOut) = baton_rt::sys::wait(&f, 0, timeout_ns) {
                    break;
                }
            }
            c.load(Relaxed) - before
        });
        let moved = *sleeper.value().unwrap_or(&0);
        done.store(true, Release);
        let _ = busy.value();
        moved
    });
    (st, moved)
}

fn events(expect: u64) -> Result<(), Failed> {
    let d = must("import builtin.strand", spin::import("builtin.strand"))?;
    // Counting handlers on all four events.
    let mut hs = Vec::new();
    for ev in [
        EVENT_STRAND_BLOCK,
        EVENT_STRAND_UNBLOCK,
        EVENT_STRAND_CHECKPOINT,
        EVENT_STRAND_RESUME,
    ] {
        hs.push(must(
            "install count",
            spin::install(d, "count", ev, 0, 0, 0),
        )?);
    }
    let before = [
        strand_count(EVENT_STRAND_BLOCK).unwrap_or_default(),
        strand_count(EVENT_STRAND_CHECKPOINT).unwrap_or_default(),
        strand_count(EVENT_STRAND_RESUME).unwrap_or_default(),
    ];
    let (st, moved) = sleeper(WOKEN_WITHIN_NS);
    let s = one_run(2);
    let after = [
        strand_count(EVENT_STRAND_BLOCK).unwrap_or_default(),
        strand_count(EVENT_STRAND_CHECKPOINT).unwrap_or_default(),
        strand_count(EVENT_STRAND_RESUME).unwrap_or_default(),
    ];
    let blocks = after[0].0 - before[0].0;
    let checkpoints = after[1].0 - before[1].0;
    let resumes = after[2].0 - before[2].0;
    println!(
        "counting handlers: Strand.Block {blocks} (runtime: {} Block upcalls, the counter moved {moved} during the sleep), Strand.Checkpoint {checkpoints}, Strand.Resume {resumes} (runtime: {} checkpoints, {} declined)",
        st.kernel_blocks, s.checkpoints, s.declined
    );
    check!(
        st.kernel_blocks >= 1 && moved > 0,
        "with a counting handler the Block upcall still came ({}) and the processor ran on ({moved})",
        st.kernel_blocks
    );
    check!(
        blocks >= st.kernel_blocks,
        "Strand.Block's handler ran at every Block upcall ({blocks} for {})",
        st.kernel_blocks
    );
    check!(
        checkpoints == s.checkpoints + s.declined && checkpoints >= 1,
        "Strand.Checkpoint's handler ran at every Checkpoint upcall ({checkpoints} for {} + {})",
        s.checkpoints,
        s.declined
    );
    check!(
        resumes == checkpoints,
        "Strand.Resume's handler ran at every resume ({resumes} for {checkpoints})"
    );
    check!(
        s.sum == expect,
        "with handlers installed the checksum is still right"
    );
    for h in hs.drain(..) {
        must("remove", spin::remove(h))?;
    }
    // A veto on Strand.Block: the sleeping thread keeps its processor (no Block upcall),
    // so the counter does not move during the sleep.
    let veto = must(
        "install veto",
        spin::install(d, "veto", EVENT_STRAND_BLOCK, 0, 0, 0),
    )?;
    let (vetoed_before, _) = strand_count(EVENT_STRAND_BLOCK).unwrap_or_default();
    let (st, moved) = sleeper(VETOED_NS);
    let (vetoed_after, vetoes) = strand_count(EVENT_STRAND_BLOCK).unwrap_or_default();
    println!(
        "vetoing handler: {} Block upcalls, the counter moved {moved} during the sleep, {} vetoes",
        st.kernel_blocks, vetoes
    );
    check!(
        st.kernel_blocks == 0 && moved == 0,
        "a Strand.Block veto keeps the processor blocked with its thread ({} upcalls, moved {moved})",
        st.kernel_blocks
    );
    check!(
        vetoed_after > vetoed_before && vetoes >= 1,
        "the vetoes were counted"
    );
    // Another task's processors are not this task's handlers' business.
    let peer = must("strand_peer's report", peer_blocks())?;
    let (_, vetoes_now) = strand_count(EVENT_STRAND_BLOCK).unwrap_or_default();
    check!(
        peer >= 1 && vetoes_now == vetoes,
        "another task's thread got its Block upcalls ({peer}) while this task's veto was installed, and the veto did not run for it"
    );
    must("remove veto", spin::remove(veto))?;
    must("release", spin::release(d))?;
    wasm_handlers()
}

/// The second thread of [`chosen`]: it only counts, in integer registers (the vector
/// registers are the carrier's and a choice does not swap them).
static OTHER_COUNT: AtomicU64 = AtomicU64::new(0);

extern "C" fn other_thread() -> ! {
    loop {
        OTHER_COUNT.fetch_add(1, Relaxed);
    }
}

/// A `Strand.Checkpoint` handler chooses the thread that runs: the built-in `run`, given
/// the address of a saved register record as its claim, has the kernel swap the preempted
/// thread with the one saved there at every Checkpoint. Two threads of one virtual
/// processor alternate with no upcall at all (the processor's upcall entry is `never`):
/// this thread sees the other's count move while it was preempted, several times.
fn chosen() -> Result<(), Failed> {
    // Everything made and touched before the processor exists: from then on, until it is
    // destroyed, nothing here may block (a Block upcall would go to `never`).
    let upcall = alloc::vec![0u8; 2 * UPCALL_STACK_MIN as usize + 16];
    let lo = (upcall.as_ptr() as u64 + 15) & !15;
    let mut stack = alloc::vec![0u8; 16 * 1024];
    for b in stack.iter_mut().step_by(4096) {
        // SAFETY: `b` is a valid byte of `stack`; the write makes its page present.
        unsafe { core::ptr::write_volatile(b, 1) };
    }
    let top = (stack.as_ptr() as u64 + stack.len() as u64) & !15;
    let mut slot = alloc::boxed::Box::new(UserRegs {
        rip: other_thread as *const () as u64,
        rsp: top - 8,
        ..UserRegs::default()
    });
    let at = core::ptr::from_mut(&mut *slot) as u64;
    let d = must("import builtin.strand", spin::import("builtin.strand"))?;
    let (ran_before, _) = strand_count(EVENT_STRAND_CHECKPOINT).unwrap_or_default();
    let h = must(
        "install run on Strand.Checkpoint",
        spin::install(d, "run", EVENT_STRAND_CHECKPOINT, 0, at, 0),
    )?;
    let cfg = VpConfig {
        entry: never as *const () as u64,
        upcall_lo: lo,
        upcall_hi: lo + 2 * UPCALL_STACK_MIN,
        ..VpConfig::default()
    };
    let vp = must("vp_create", vp_create(&cfg))?;
    must("vp_preempt", vp_preempt(vp, QUANTUM))?;
    let start = baton_rt::sys::clock_ns();
    let (mut mine, mut moves, mut last) = (0u64, 0u32, OTHER_COUNT.load(Relaxed));
    let mut timed_out = false;
    while moves < 3 {
        mine += 1;
        let now = OTHER_COUNT.load(Relaxed);
        if now != last {
            moves += 1;
            last = now;
        }
        if mine % 4096 == 0 && baton_rt::sys::clock_ns() - start > 20_000_000_000 {
            timed_out = true;
            break;
        }
    }
    let off = vp_preempt(vp, 0);
    let removed = spin::remove(h);
    let destroyed = vp_destroy(vp);
    let (ran_after, _) = strand_count(EVENT_STRAND_CHECKPOINT).unwrap_or_default();
    must("vp_preempt off", off)?;
    must("remove run", removed)?;
    must("vp_destroy", destroyed)?;
    must("release", spin::release(d))?;
    println!(
        "a Checkpoint handler that chooses: this thread was resumed {moves} times after the other ran (the other counted {last}, this one {mine}); the handler ran {} times",
        ran_after - ran_before
    );
    check!(
        !timed_out && moves >= 3,
        "the two threads alternated on the processor at the handler's choice ({moves} times)"
    );
    check!(
        ran_after - ran_before >= 2 * 3,
        "the handler chose at every Checkpoint (it ran {} times)",
        ran_after - ran_before
    );
    // SAFETY: `at` points into `slot`, alive; the kernel wrote it (hence the volatile read).
    let rsp =
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*(at as *const UserRegs)).rsp)) };
    check!(
        rsp == top - 8,
        "the record holds the other thread, saved at its last preemption (rsp {rsp:#x}, its stack's {:#x})",
        top - 8
    );
    drop(stack);
    drop(upcall);
    Ok(())
}

/// A choice the kernel cannot take (a record at a kernel address, one at an unmapped
/// user address) is refused: the Checkpoint upcall is delivered as with no handler, and
/// the preempted thread, resumed by the runtime, still computes the right checksum.
fn chosen_refused(expect: u64) -> Result<(), Failed> {
    let d = must("import builtin.strand", spin::import("builtin.strand"))?;
    for bad in [0xffff_8000_0000_0000u64, 0x10] {
        let h = must(
            "install run with a bad record",
            spin::install(d, "run", EVENT_STRAND_CHECKPOINT, 0, bad, 0),
        )?;
        let s = one_run(2);
        must("remove run", spin::remove(h))?;
        check!(
            s.checkpoints >= 1 && s.sum == expect,
            "a choice of the record at {bad:#x} is not taken: the runtime got its Checkpoints ({}) and the checksum is right",
            s.checkpoints
        );
    }
    must("release", spin::release(d))?;
    Ok(())
}

/// The WebAssembly extension (`extensions/null_syscall`), built by `cargo xtask build`.
static NULL_SYSCALL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/extensions/wasm32-unknown-unknown/release/null_syscall.wasm"
));

/// `Strand` handlers loaded at run time: one that vetoes works as the built-in one does;
/// one that never returns is stopped by its fuel, the Block upcall (the default) still
/// comes, the handler is removed and its installer told.
fn wasm_handlers() -> Result<(), Failed> {
    let m = must("create the module", spin::create(NULL_SYSCALL))?;
    let console = must("import baton.console", spin::import("baton.console"))?;
    let task = must("import baton.task", spin::import("baton.task"))?;
    must("resolve", spin::resolve(console, m))?;
    must("resolve", spin::resolve(task, m))?;
    let veto = must(
        "install strand_veto",
        spin::install(m, "strand_veto", EVENT_STRAND_BLOCK, 0, 0, 0),
    )?;
    let (st, moved) = sleeper(VETOED_NS);
    check!(
        st.kernel_blocks == 0 && moved == 0,
        "a WebAssembly Strand.Block handler's veto keeps the processor blocked ({} upcalls, moved {moved})",
        st.kernel_blocks
    );
    must("remove", spin::remove(veto))?;
    let port = must("port_allocate", baton_rt::ipc::port_allocate(0))?;
    let send = must("port_make_send", baton_rt::ipc::port_make_send(port, false))?;
    let forever = must(
        "install strand_forever",
        spin::install(m, "strand_forever", EVENT_STRAND_BLOCK, 0, 0, send),
    )?;
    let (st, moved) = sleeper(WOKEN_WITHIN_NS);
    check!(
        st.kernel_blocks >= 1 && moved > 0,
        "a Strand.Block handler that never returns is stopped by its fuel and the Block upcall still comes ({} upcalls, moved {moved})",
        st.kernel_blocks
    );
    let mut buf = [0u8; baton_abi::ipc::HEADER_SIZE + 16];
    let got = baton_rt::ipc::msg_buf(&mut buf, baton_abi::ipc::MSG_RECEIVE, port, 5_000_000_000)
        .ok()
        .and_then(|()| baton_abi::ipc::MsgHeader::from_bytes(&buf))
        .map(|h| {
            (
                h.id,
                baton_rt::ipc::data_word(buf.get(baton_abi::ipc::HEADER_SIZE..).unwrap_or(&[]), 0),
            )
        });
    check!(
        got == Some((baton_abi::spin::NOTIFY_ABORTED, forever.id)),
        "the installer is told the handler was aborted ({got:?})"
    );
    check!(
        spin::remove(forever) == Err(Error::NotFound),
        "the aborted handler is gone"
    );
    let _ = baton_rt::ipc::cap_drop(send);
    let _ = baton_rt::ipc::cap_drop(port);
    for d in [m, console, task] {
        must("release", spin::release(d))?;
    }
    Ok(())
}

/// Spawns `strand_peer` and returns how many Block upcalls its runtime took.
fn peer_blocks() -> Result<u64, Error> {
    let port = baton_rt::ipc::port_allocate(0)?;
    let r = (|| {
        baton_rt::sys::spawn_with("strand_peer", port)?;
        let mut buf = [0u8; baton_abi::ipc::HEADER_SIZE + 16];
        baton_rt::ipc::msg_buf(&mut buf, baton_abi::ipc::MSG_RECEIVE, port, 30_000_000_000)?;
        Ok(baton_rt::ipc::data_word(
            buf.get(baton_abi::ipc::HEADER_SIZE..).unwrap_or(&[]),
            0,
        ))
    })();
    let _ = baton_rt::ipc::cap_drop(port);
    r
}
