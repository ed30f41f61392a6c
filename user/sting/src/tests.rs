//! Host tests of the whole runtime: every scenario of [`crate::selftest`] on 1, 2 and 4
//! virtual processors (`std` threads here). One runtime runs at a time, so the tests take
//! a lock.

use std::sync::Mutex as StdMutex;

static ONE_AT_A_TIME: StdMutex<()> = StdMutex::new(());

fn scenario(name: &str, vps: usize) {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_, f) = crate::selftest::ALL
        .iter()
        .find(|(n, _)| *n == name)
        .expect("no such scenario");
    match f(vps) {
        Ok(what) => std::println!("{name} on {vps}: {what}"),
        Err(why) => panic!("{name} on {vps} virtual processors: {why}"),
    }
}

macro_rules! scenarios {
    ($($name:ident),*) => { $(
        #[test]
        fn $name() {
            for vps in [1, 2, 4] {
                scenario(stringify!($name), vps);
            }
        }
    )* };
}

scenarios!(
    states,
    absorb,
    pool_reuse,
    policies,
    full_queues,
    stealing,
    mutex,
    condvar,
    barrier,
    terminate,
    groups,
    ports,
    areas,
    exceptions,
    signals,
    foreign_unpark,
    hand_off,
    owned_entries,
    primes,
    mst,
    alphabeta,
    nbody
);

#[test]
fn migrate() {
    for vps in [1, 2, 4] {
        scenario("migrate", vps);
    }
}

#[test]
fn suspend() {
    for vps in [1, 2, 4] {
        scenario("suspend", vps);
    }
}

/// `mxcsr` now.
fn mxcsr() -> u32 {
    let mut v = 0u32;
    // SAFETY: `stmxcsr` writes the four bytes of `v`.
    unsafe { core::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack)) };
    v
}

/// Sets `mxcsr` (every exception stays masked in the values used here).
fn set_mxcsr(v: u32) {
    // SAFETY: `ldmxcsr` reads the four bytes of `v`; the values used set no reserved bit.
    unsafe { core::arch::asm!("ldmxcsr [{}]", in(reg) &v, options(nostack)) };
}

/// The context switch keeps `mxcsr` (callee-saved in the ABI) per thread: a thread that
/// changes its rounding mode and switches away finds it again, and a thread started
/// meanwhile starts with the default.
#[test]
fn control_words_are_per_thread() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const TOWARD_ZERO: u32 = 0x1f80 | 3 << 13;
    let ((a, b), _) = crate::run(crate::Config::new(1, crate::Kind::Fifo), || {
        let gate = alloc::sync::Arc::new(core::sync::atomic::AtomicBool::new(false));
        let g = gate.clone();
        let a = crate::fork(move || {
            set_mxcsr(TOWARD_ZERO);
            while !g.load(core::sync::atomic::Ordering::SeqCst) {
                crate::yield_now();
            }
            let mine = mxcsr();
            set_mxcsr(0x1f80);
            mine
        });
        let b = crate::fork(move || {
            let seen = mxcsr();
            gate.store(true, core::sync::atomic::Ordering::SeqCst);
            seen
        });
        (*a.value().unwrap_or(&0), *b.value().unwrap_or(&0))
    });
    assert_eq!(a, TOWARD_ZERO, "the thread that changed its rounding mode");
    assert_eq!(
        b, 0x1f80,
        "a thread started while another had changed its rounding mode"
    );
}

/// The four applications at the paper's sizes (`selftest::PAPER_SIZES`: the first million
/// primes, 5,000 points, depth 10, 5,000 bodies): each parallel answer, on 1 and 2 virtual
/// processors, equals the sequential one. Long (seconds on the host), so run on demand:
/// `cargo test -p sting --release -- --ignored speedup_sizes --nocapture`.
#[test]
#[ignore]
fn speedup_sizes() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let z = crate::selftest::PAPER_SIZES;
    for app in crate::selftest::APPS {
        let t0 = std::time::Instant::now();
        let seq = (app.sequential)(&z);
        let t1 = std::time::Instant::now();
        for vps in [1, 2] {
            let t2 = std::time::Instant::now();
            let (par, s) = (app.parallel)(vps, &z);
            assert_eq!(par, seq, "{} on {vps}", app.name);
            std::println!(
                "{} ({}): {par} on {vps} VPs as sequentially ({} threads, {} TCBs); sequential {:?}, parallel {:?}",
                app.name,
                (app.size)(&z),
                s.created,
                s.tcbs_created,
                t1 - t0,
                t2.elapsed()
            );
        }
    }
}
