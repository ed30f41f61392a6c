//! The runtime's behaviour checks, shared by the host's tests (`cargo test -p sting`, on
//! `std` threads) and the booted test program (`user/programs/src/bin/sting.rs`, on
//! Baton's kernel threads), so both run exactly the same scenarios.
//!
//! Each scenario starts its own runtime with `vps` virtual processors and returns a line
//! saying what it saw, or what went wrong.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};

use crate::spin::SpinLock;
use crate::{
    current, current_vp, delay, fork, fork_on, migrate, park, run, stats, vp_count, vp_stats,
    yield_now, AnyThread, Barrier, Condvar, Config, DeepCopy, End, Group, Kind, Mutex, Paper, Port,
    State, Terminated,
};

/// A scenario's outcome: what it saw, or what went wrong.
pub type Outcome = Result<String, String>;

/// A scenario: run with this many virtual processors.
pub type Scenario = fn(usize) -> Outcome;

/// Every scenario, by name.
pub const ALL: &[(&str, Scenario)] = &[
    ("states", states),
    ("absorb", absorb),
    ("pool_reuse", pool_reuse),
    ("policies", policies),
    ("full_queues", full_queues),
    ("stealing", stealing),
    ("migrate", migrate_between),
    ("mutex", mutex),
    ("condvar", condvar),
    ("barrier", barrier),
    ("suspend", suspend_resume),
    ("terminate", terminate),
    ("groups", groups),
    ("ports", ports),
    ("areas", areas),
    ("exceptions", exceptions),
    ("signals", signals),
    ("foreign_unpark", foreign_unpark),
    ("hand_off", hand_off),
    ("owned_entries", owned_entries),
    ("primes", primes),
    ("mst", mst),
    ("alphabeta", alphabeta),
    ("nbody", nbody),
];

/// Fails the scenario with a message unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($what:tt)*) => {
        if !$cond {
            return Err(format!($($what)*));
        }
    };
}

/// Threads that yield on a FIFO or LIFO processor wait on its ring as owned entries (their
/// word left running, `rt::Own`): each is reported ready there; a suspension or a
/// termination asked while it waits takes effect as it is resumed, before its own code runs
/// again; a resumption lets it go on; the owner's enqueue and dequeue of itself gives its
/// own entry back. On every processor count (the threads share the caller's processor).
pub fn owned_entries(vps: usize) -> Outcome {
    let mut seen = Vec::new();
    for kind in [Kind::Fifo, Kind::Lifo] {
        let (r, _) = run(Config::new(vps, kind), move || -> Outcome {
            ensure!(
                crate::probe_enqueue_dequeue(),
                "the owner's enqueue and dequeue of itself"
            );
            let here = current_vp();
            // One thread at a time beside the caller (a LIFO processor alternates the two
            // newest), counting its turns until stopped.
            let spinner = || {
                let stop = Arc::new(AtomicBool::new(false));
                let count = Arc::new(AtomicU64::new(0));
                let (st, c) = (stop.clone(), count.clone());
                let t = fork_on(here, move || {
                    while !st.load(SeqCst) {
                        c.fetch_add(1, SeqCst);
                        yield_now();
                    }
                });
                while count.load(SeqCst) < 3 {
                    yield_now();
                }
                (t, count, stop)
            };
            // It waits on the ring (we run), and is reported ready.
            let (t, count, stop) = spinner();
            ensure!(t.detail().0 == State::Ready, "queued: {:?}", t.detail());
            // Asked to suspend while queued: it does not run its own code again.
            t.suspend();
            let before = count.load(SeqCst);
            for _ in 0..20 {
                yield_now();
            }
            ensure!(
                count.load(SeqCst) == before,
                "suspended while queued, it ran: {} -> {}",
                before,
                count.load(SeqCst)
            );
            ensure!(t.detail().1, "not suspended: {:?}", t.detail());
            // Resumed, it goes on.
            t.resume();
            while count.load(SeqCst) == before {
                yield_now();
            }
            stop.store(true, SeqCst);
            ensure!(t.value().is_ok(), "stopped without its value");
            // Terminated while queued: it ends as it is resumed.
            let (t, count, _stop) = spinner();
            t.terminate();
            let before = count.load(SeqCst);
            t.wait();
            ensure!(t.value().is_err(), "terminated, yet a value");
            ensure!(
                count.load(SeqCst) == before,
                "terminated while queued, it ran"
            );
            Ok(format!("{kind:?} ok"))
        });
        seen.push(r?);
    }
    Ok(seen.join(", "))
}

/// Threads allocating from their private areas: no heap operation but for a chunk now and
/// then, the chunks recycled with the TCBs, everything reclaimed wholesale when a thread
/// returns, is terminated or (absorbed) is determined; a value moved to a group's shared
/// area outlives the thread that made it.
pub fn areas(vps: usize) -> Outcome {
    use crate::area;
    /// Threads forked.
    const THREADS: u64 = 1200;
    /// Private allocations per thread (each 48 bytes) and one slice of 2 KiB: more than
    /// the first chunk holds.
    const ALLOCS: u64 = 100;
    let (r, s) = run(Config::new(vps, Kind::Fifo), || -> Outcome {
        let group = Group::new();
        let shared = group.area();
        let mut sum = 0u64;
        let mut kept = Vec::new();
        for wave in 0..(THREADS / 8) {
            let ts: Vec<_> = (0..8u64)
                .map(|i| {
                    let shared = shared.clone();
                    group.fork(move || {
                        let n = wave * 8 + i;
                        let base = area::used();
                        let mut held = Vec::new();
                        for k in 0..ALLOCS {
                            held.push(area::alloc([n, k, n ^ k, 1, 2, 3]));
                        }
                        if i % 2 == 0 {
                            // Through the pools rather than handed over.
                            yield_now();
                        }
                        let bytes = area::alloc_slice(&[n as u8; 2048]);
                        // A LIFO drop gives its bytes straight back.
                        let before = area::used();
                        drop(area::alloc(0u64));
                        if area::used() != before {
                            return (u64::MAX, None);
                        }
                        let s: u64 = held.iter().map(|a| a[0] + a[1]).sum::<u64>()
                            + bytes.iter().map(|&b| u64::from(b)).sum::<u64>();
                        if area::used() < base + (ALLOCS * 48 + 2048) as usize {
                            return (u64::MAX - 1, None);
                        }
                        // The last thread of each wave leaves a value in the group's area.
                        let out = (i == 7).then(|| area::alloc(n * 3).share(&shared));
                        (s, out)
                    })
                })
                .collect();
            for t in &ts {
                t.wait();
            }
            for t in ts {
                let Ok(Some((v, out))) = t.into_value() else {
                    return Err(String::from("a thread had no value"));
                };
                ensure!(v < u64::MAX - 1, "LIFO free or accounting failed ({v})");
                sum += v;
                if let Some(out) = out {
                    kept.push(out);
                }
            }
        }
        let want: u64 = (0..THREADS)
            .map(|n| (0..ALLOCS).map(|k| n + k).sum::<u64>() + (n as u8 as u64) * 2048)
            .sum();
        ensure!(sum == want, "sum {sum}, want {want}");
        // The shared values outlived their threads, whose TCBs (and areas) were reused.
        for (w, v) in kept.iter().enumerate() {
            ensure!(**v == (w as u64 * 8 + 7) * 3, "shared value {w} is {}", **v);
        }
        ensure!(
            kept.first().is_some_and(|v| v.area().same(&shared)),
            "value in another area"
        );
        // An absorbed thread's allocations go when it is determined.
        let base = area::used();
        let d = delay(|| {
            let a = area::alloc([7u64; 16]);
            a[3]
        });
        ensure!(d.value() == Ok(&7), "absorbed value");
        ensure!(area::used() == base, "absorbed thread's bytes stayed");
        // A terminated thread's area is reclaimed too.
        let before = stats().area_resets;
        let t = fork(|| {
            let _a = area::alloc([1u64; 8]);
            loop {
                yield_now();
            }
        });
        while t.detail().0 == State::Scheduled {
            yield_now();
        }
        for _ in 0..4 {
            yield_now();
        }
        t.terminate();
        t.wait();
        ensure!(
            stats().area_resets > before,
            "a terminated thread's area was not reclaimed"
        );
        Ok(String::new())
    });
    r?;
    ensure!(
        s.area_resets > THREADS,
        "{} resets for {THREADS} threads",
        s.area_resets
    );
    // The slice and the last small value were dropped last-in first-out, so gave their
    // bytes back before the reset; the rest went with it.
    ensure!(
        s.area_reclaimed >= THREADS * (ALLOCS - 1) * 48,
        "{} bytes reclaimed",
        s.area_reclaimed
    );
    ensure!(
        s.area_chunks <= 2 * s.tcbs_created + 2,
        "{} chunks for {} TCBs",
        s.area_chunks,
        s.tcbs_created
    );
    Ok(format!(
        "{} private allocations by {} threads took {} chunks from the heap ({} TCBs); {} areas reset, {} KiB reclaimed wholesale",
        THREADS * (ALLOCS + 2) + 1,
        THREADS,
        s.area_chunks,
        s.tcbs_created,
        s.area_resets,
        s.area_reclaimed / 1024
    ))
}

/// Exceptions as continuations, raised by software (the same dispatcher the CPU faults
/// of `sting_exc` reach): a handler that resumes, `catch` unwinding, nested handlers and a
/// fault inside a handler going to the next one out, a thread with no handler (or whose
/// handler says so) terminated while the others go on, and an absorbed thread's fault
/// ending it alone, its demander going on.
pub fn exceptions(vps: usize) -> Outcome {
    use crate::area;
    use crate::exception::{vector, Action};
    use crate::{catch, raise, with_handler};
    let (r, s) = run(Config::new(vps, Kind::Fifo).exceptions(), || -> Outcome {
        // Resume: `raise` returns, the body goes on.
        let mut seen = Vec::new();
        let v = with_handler(
            |f| {
                seen.push(f.error);
                Action::Resume
            },
            || {
                raise(1);
                raise(2);
                40 + 2
            },
        );
        ensure!(v == Ok(42), "resumed body: {v:?}");
        ensure!(seen == [1, 2], "handler saw {seen:?}");
        // Unwind: `catch` returns the fault; the frames above are gone.
        let after = Arc::new(AtomicBool::new(false));
        let a2 = after.clone();
        let r = catch(move || {
            raise(7);
            a2.store(true, SeqCst);
        });
        ensure!(
            matches!(r, Err(f) if f.error == 7 && f.vector == vector::SOFTWARE),
            "catch: {r:?}"
        );
        ensure!(!after.load(SeqCst), "the body went on after an unwind");
        // Nested: the innermost handler first; a fault in a handler goes out one level.
        let mut outer = 0;
        let r = with_handler(
            |_| {
                outer += 1;
                Action::Resume
            },
            || {
                let inner = catch(|| raise(3));
                let h = with_handler(
                    |f| {
                        if f.error == 4 {
                            raise(5);
                        }
                        Action::Resume
                    },
                    || {
                        raise(4);
                        9
                    },
                );
                (inner.is_err(), h)
            },
        );
        ensure!(r == Ok((true, Ok(9))), "nested: {r:?}");
        ensure!(outer == 1, "outer handler ran {outer} times");
        // A thread with no handler, and one whose handler terminates, are terminated; the
        // runtime goes on.
        let bare = fork(|| {
            raise(8);
            1u32
        });
        let told = fork(|| with_handler(|_| Action::Terminate, || raise(9)).is_ok());
        ensure!(
            bare.value() == Err(Terminated),
            "unhandled: {:?}",
            bare.detail()
        );
        ensure!(
            told.value() == Err(Terminated),
            "handler's terminate: {:?}",
            told.detail()
        );
        // An absorbed thread's fault is its own, not its demander's: with no handler of its
        // own it is determined as terminated, its area bytes are released, and its
        // demander (whose `catch` sees nothing) goes on.
        let base = area::used();
        let d = delay(|| {
            let _a = area::alloc([0u8; 100]);
            raise(10);
            5u32
        });
        let d2 = d.clone();
        let r = catch(move || d2.value().is_ok());
        ensure!(r == Ok(false), "absorbed thread's fault: {r:?}");
        ensure!(
            d.detail().0 == State::Determined(End::Terminated),
            "absorbed thread after the unwind: {:?}",
            d.detail()
        );
        ensure!(area::used() == base, "absorbed thread's area bytes stayed");
        // Handlers were all removed: a raise now ends nobody but the raiser.
        let last = fork(|| {
            raise(11);
        });
        ensure!(last.value() == Err(Terminated), "after the scopes");
        Ok(String::new())
    });
    r?;
    ensure!(s.exceptions == 10, "{} exceptions dispatched", s.exceptions);
    Ok(format!(
        "{} exceptions: resumed, unwound, nested, terminated, absorbed",
        s.exceptions
    ))
}

/// Signals with the paper's three priorities: a handler runs in its target's context
/// before the target's own code; `Continue` leaves the signaller running, `Immediate`
/// switches to a ready target at once, `Reschedule` yields the signaller; a signal to
/// oneself runs at once, one to a determined thread is refused; a blocked thread runs its
/// handler when it is woken, a thread not yet started when it starts.
pub fn signals(vps: usize) -> Outcome {
    use crate::Priority;
    let (r, s) = run(Config::new(vps, Kind::Fifo), || -> Outcome {
        let me = current().id();
        // To oneself: at once, in one's own context.
        let ran_in = Arc::new(AtomicU64::new(0));
        let r2 = ran_in.clone();
        ensure!(
            current().signal(Priority::Continue, move || r2.store(current().id(), SeqCst)),
            "signal to self refused"
        );
        ensure!(
            ran_in.load(SeqCst) == me,
            "self-signal ran in {}",
            ran_in.load(SeqCst)
        );
        // A ready thread on this processor, for each priority.
        for prio in [
            Priority::Continue,
            Priority::Immediate,
            Priority::Reschedule,
        ] {
            let stop = Arc::new(AtomicBool::new(false));
            let hit = Arc::new(AtomicU64::new(0));
            let spins = Arc::new(AtomicU64::new(0));
            let (st, sp) = (stop.clone(), spins.clone());
            let t = fork_on(current_vp(), move || {
                while !st.load(SeqCst) {
                    sp.fetch_add(1, SeqCst);
                    yield_now();
                }
            });
            // Let it start and yield back: it is ready on our queue.
            while spins.load(SeqCst) == 0 {
                yield_now();
            }
            let h = hit.clone();
            let tid = t.id();
            ensure!(
                t.signal(prio, move || {
                    h.store(if current().id() == tid { 1 } else { 2 }, SeqCst)
                }),
                "signal refused"
            );
            let at_return = hit.load(SeqCst);
            match prio {
                // One processor: the target cannot have run yet.
                Priority::Continue if vp_count() == 1 => {
                    ensure!(
                        at_return == 0,
                        "Continue: handler ran before the signaller went on"
                    )
                }
                Priority::Continue => {}
                _ => ensure!(
                    at_return == 1,
                    "{prio:?}: handler not run at return ({at_return})"
                ),
            }
            while hit.load(SeqCst) == 0 {
                yield_now();
            }
            ensure!(
                hit.load(SeqCst) == 1,
                "{prio:?}: handler ran outside its target"
            );
            stop.store(true, SeqCst);
            t.wait();
        }
        // A parked thread runs its handler when woken, before its own code goes on.
        let log = Arc::new(Mutex::new(Vec::new()));
        let l2 = log.clone();
        let parked = fork_on(current_vp(), move || {
            crate::park();
            l2.lock().push("own code");
        });
        while parked.detail().0 != State::Blocked {
            yield_now();
        }
        let l3 = log.clone();
        parked.signal(Priority::Continue, move || l3.lock().push("handler"));
        ensure!(log.lock().is_empty(), "a blocked thread ran its handler");
        parked.any().unpark();
        parked.wait();
        ensure!(
            *log.lock() == ["handler", "own code"],
            "woken thread's order: {:?}",
            *log.lock()
        );
        // A thread not yet started runs it first.
        let flag = Arc::new(AtomicBool::new(false));
        let (f2, f3) = (flag.clone(), flag.clone());
        let fresh = fork(move || f2.load(SeqCst));
        fresh.signal(Priority::Continue, move || f3.store(true, SeqCst));
        ensure!(
            fresh.value() == Ok(&true),
            "a new thread's handler ran after its code"
        );
        // Determined: refused.
        ensure!(
            !fresh.signal(Priority::Continue, || {}),
            "signal to a determined thread accepted"
        );
        Ok(String::new())
    });
    r?;
    ensure!(s.signals == 6, "{} signal handlers ran", s.signals);
    Ok(format!(
        "{} signal handlers, each in its target's context",
        s.signals
    ))
}

/// Every thread state and transition: delayed, scheduled, evaluating (running, ready,
/// blocked), absorbed, determined with a value and terminated.
pub fn states(vps: usize) -> Outcome {
    run(Config::new(vps, Kind::Fifo), || -> Outcome {
        // Delayed → Scheduled → (Start) evaluating → determined.
        let d = delay(|| 7u32);
        ensure!(d.state() == Paper::Delayed, "new delayed thread: {:?}", d.state());
        let gate = Arc::new(AtomicBool::new(false));
        let g2 = gate.clone();
        let s = fork_on(current_vp(), move || {
            while !g2.load(SeqCst) {
                yield_now();
            }
            1u32
        });
        ensure!(s.state() == Paper::Scheduled, "new forked thread: {:?}", s.state());
        d.schedule();
        ensure!(d.state() == Paper::Scheduled, "scheduled delayed thread: {:?}", d.state());
        // Let both start: `s` yields (evaluating, ready), `d` finishes.
        yield_now();
        ensure!(s.state() == Paper::Evaluating, "started thread: {:?}", s.state());
        ensure!(d.detail().0 == State::Determined(End::Value), "{:?}", d.detail());
        ensure!(d.value() == Ok(&7), "value of the scheduled delayed thread");
        gate.store(true, SeqCst);
        ensure!(s.value() == Ok(&1), "value of the forked thread");
        ensure!(s.state() == Paper::Determined, "finished thread: {:?}", s.state());
        // Blocked: a thread waiting on a mutex held here.
        let m = Arc::new(Mutex::new(0u32));
        let guard = m.lock();
        let m2 = m.clone();
        let b = fork_on(current_vp(), move || {
            *m2.lock() += 1;
        });
        while b.detail().0 != State::Blocked {
            yield_now();
        }
        ensure!(b.state() == Paper::Evaluating, "blocked thread: {:?}", b.state());
        drop(guard);
        b.wait();
        ensure!(*m.lock() == 1, "the blocked thread ran after the unlock");
        // Absorbed: a delayed thread that looks at its own state while it runs.
        let seen = Arc::new(AtomicU32::new(0));
        let seen2 = seen.clone();
        let a = delay(move || {
            let me = current();
            seen2.store(
                match me.state() {
                    Paper::Absorbed => 1,
                    _ => 2,
                },
                SeqCst,
            );
            5u32
        });
        ensure!(a.value() == Ok(&5), "absorbed thread's value");
        ensure!(seen.load(SeqCst) == 1, "an absorbed thread sees itself absorbed");
        // Terminated before it started: determined without a value.
        let t = delay(|| 9u32);
        t.terminate();
        ensure!(
            t.detail().0 == State::Determined(End::Terminated),
            "terminated delayed thread: {:?}",
            t.detail()
        );
        ensure!(t.value() == Err(Terminated), "a terminated thread has no value");
        Ok(String::from(
            "delayed, scheduled, evaluating (ready, blocked), absorbed, determined (value, terminated)",
        ))
    })
    .0
}

/// What [`foreign_unparker`] is to wake, and how far it got (0 until it has woken it).
static FOREIGN: SpinLock<Option<(AnyThread, Arc<AtomicU32>)>> = SpinLock::new(None);

/// Not a sting thread: another kernel thread of the program (a `std` thread on the host).
/// Wakes the thread [`FOREIGN`] names and says so.
fn foreign_unparker(_: u64) {
    let job = FOREIGN.lock().take();
    if let Some((t, done)) = job {
        t.unpark();
        done.store(1, SeqCst);
    }
}

/// Starts [`foreign_unparker`] on `t` and waits (yielding) until it has unparked it.
fn unpark_from_outside(t: AnyThread) -> Result<(), String> {
    let done = Arc::new(AtomicU32::new(0));
    *FOREIGN.lock() = Some((t, done.clone()));
    crate::platform::spawn_vp(foreign_unparker, 0, |_, _| {})
        .map_err(|()| String::from("could not start a kernel thread"))?;
    while done.load(SeqCst) == 0 {
        yield_now();
    }
    Ok(())
}

/// `unpark` from a thread that is not a sting thread (another kernel thread of the
/// program): it wakes a parked thread, from the owner's queue kind (FIFO) and the shared
/// one (work stealing) alike, waking its idle processor; and a wake-up it leaves for a
/// thread that has not parked yet makes that thread's next `park` return at once.
pub fn foreign_unpark(vps: usize) -> Outcome {
    let mut woken = 0;
    for kind in [Kind::Fifo, Kind::WorkStealing] {
        let r = run(Config::new(vps, kind), move || -> Outcome {
            // 1. Parked: woken from outside, on the last processor (idle meanwhile).
            let go = Arc::new(AtomicBool::new(false));
            let g2 = go.clone();
            let parked = fork_on(vps - 1, move || {
                let mut parks = 0u32;
                while !g2.load(SeqCst) {
                    park();
                    parks += 1;
                }
                parks
            });
            while parked.detail().0 != State::Blocked {
                yield_now();
            }
            go.store(true, SeqCst);
            unpark_from_outside(parked.any())?;
            let parks = parked
                .value()
                .map_err(|_| String::from("parked thread terminated"))?;
            ensure!(*parks >= 1, "{kind:?}: the thread never parked");
            // 2. Not parked yet: the wake-up waits for its park.
            let gate = Arc::new(AtomicBool::new(false));
            let g3 = gate.clone();
            let later = fork_on(vps - 1, move || {
                while !g3.load(SeqCst) {
                    yield_now();
                }
                park();
                7u32
            });
            unpark_from_outside(later.any())?;
            gate.store(true, SeqCst);
            ensure!(
                later.value() == Ok(&7),
                "{kind:?}: the thread woken before it parked"
            );
            Ok(String::new())
        })
        .0;
        r?;
        woken += 2;
    }
    Ok(format!(
        "{woken} threads woken from another kernel thread (FIFO and work-stealing processors; parked, and not yet parked)"
    ))
}

/// `hand_off`: a thread parked on the caller's processor runs next, ahead of a thread
/// already on the ready queue (no trip through the queue; FIFO would run the queued one
/// first), and the caller stays parked until woken; two threads handing off to each other
/// alternate strictly; a hand-off to a thread parked on another processor, or to one not
/// parked, is an ordinary wake-up.
pub fn hand_off(vps: usize) -> Outcome {
    const ROUNDS: u32 = 1_000;
    run(Config::new(vps, Kind::Fifo), move || -> Outcome {
        // 1. Ahead of the queue.
        let order = Arc::new(AtomicU32::new(0));
        let go = Arc::new(AtomicBool::new(false));
        let me = current();
        let (o, g) = (order.clone(), go.clone());
        let parked = fork_on(0, move || {
            while !g.load(SeqCst) {
                park();
            }
            let at = o.fetch_add(1, SeqCst);
            me.unpark();
            at
        });
        while parked.detail().0 != State::Blocked {
            yield_now();
        }
        let o = order.clone();
        let queued = fork_on(0, move || o.fetch_add(1, SeqCst));
        go.store(true, SeqCst);
        parked.any().hand_off();
        parked.wait();
        queued.wait();
        let (p, q) = (*parked.value().unwrap_or(&9), *queued.value().unwrap_or(&9));
        ensure!(
            p == 0 && q == 1,
            "the parked thread ran at {p}, the queued one at {q}: the hand-off went through the queue"
        );
        // 2. Two threads handing off to each other alternate strictly.
        let turn = Arc::new(AtomicU32::new(0));
        let me = current();
        let t = turn.clone();
        let peer = fork_on(0, move || -> Result<(), String> {
            for i in 0..ROUNDS {
                while t.load(SeqCst) != 2 * i + 1 {
                    park();
                }
                t.store(2 * i + 2, SeqCst);
                me.hand_off();
            }
            Ok(())
        });
        let peer_any = peer.any();
        while peer.detail().0 != State::Blocked {
            yield_now();
        }
        for i in 0..ROUNDS {
            ensure!(
                turn.load(SeqCst) == 2 * i,
                "round {i}: the turn is {} (the peer ran out of turn)",
                turn.load(SeqCst)
            );
            turn.store(2 * i + 1, SeqCst);
            peer_any.hand_off();
            while turn.load(SeqCst) != 2 * i + 2 {
                park();
            }
        }
        // The peer is parked in its last hand-off.
        peer_any.unpark();
        peer.wait();
        ensure!(peer.value() == Ok(&Ok(())), "the peer failed");
        // 3. Another processor's parked thread, and a thread that is not parked.
        let far = vps - 1;
        let (g, me) = (Arc::new(AtomicBool::new(false)), current());
        let g2 = g.clone();
        let remote = fork_on(far, move || {
            while !g2.load(SeqCst) {
                park();
            }
            me.unpark();
            current_vp()
        });
        while remote.detail().0 != State::Blocked {
            yield_now();
        }
        g.store(true, SeqCst);
        remote.any().hand_off();
        ensure!(
            remote.value() == Ok(&far),
            "the thread parked on processor {far} ran there"
        );
        let busy = fork_on(0, || 5u32);
        let me = current();
        let b = busy.any();
        // `busy` is queued, not parked: an ordinary wake-up (kept for a park it never
        // makes), and the caller parks until the helper below wakes it.
        let waker = fork_on(0, move || me.unpark());
        b.hand_off();
        ensure!(busy.value() == Ok(&5), "the queued thread ran");
        waker.wait();
        Ok(format!(
            "woken ahead of the queue; {ROUNDS} alternations; across processors and to a thread not parked"
        ))
    })
    .0
}

/// Touching a delayed thread runs it on the toucher's stack without a switch; touching a
/// scheduled one that has not started does too; a chain of delayed threads touching each
/// other is absorbed all the way down.
pub fn absorb(vps: usize) -> Outcome {
    run(Config::new(vps, Kind::Fifo), || -> Outcome {
        let before = stats();
        let ts: Vec<_> = (0..100u64).map(|i| delay(move || i * 2)).collect();
        let sum: u64 = ts.iter().map(|t| *t.value().unwrap_or(&0)).sum();
        let after = stats();
        ensure!(sum == 9900, "sum of the absorbed values: {sum}");
        ensure!(
            after.absorbed - before.absorbed == 100,
            "absorbed {}",
            after.absorbed - before.absorbed
        );
        ensure!(
            after.switches == before.switches,
            "absorption switched {} times",
            after.switches - before.switches
        );
        ensure!(
            after.started == before.started,
            "absorbed threads took TCBs"
        );
        // A scheduled thread that has not started yet is absorbed too.
        let s = fork_on(current_vp(), || 11u32);
        ensure!(s.value() == Ok(&11), "scheduled thread's value");
        ensure!(
            stats().absorbed - after.absorbed == 1,
            "the scheduled thread was not absorbed"
        );
        // A chain: each touches the next.
        fn chain(n: u32) -> u32 {
            if n == 0 {
                0
            } else {
                let t = delay(move || chain(n - 1) + 1);
                *t.value().unwrap_or(&0)
            }
        }
        let c0 = stats();
        ensure!(chain(20) == 20, "chain");
        let c1 = stats();
        ensure!(
            c1.absorbed - c0.absorbed == 20 && c1.switches == c0.switches,
            "chain absorbed {}",
            c1.absorbed - c0.absorbed
        );
        Ok(String::from(
            "100 delayed threads absorbed with 0 switches, a scheduled one and a chain of 20 too",
        ))
    })
    .0
}

/// The paper's MST effect: many threads, few TCBs. 20,000 threads are forked in waves of
/// 8 and their values taken; the TCB pools and the direct hand-over keep the number of
/// TCBs ever made small.
pub fn pool_reuse(vps: usize) -> Outcome {
    let (r, s) = run(Config::new(vps, Kind::Fifo), || -> Outcome {
        let mut total = 0u64;
        for wave in 0..2500u64 {
            let ts: Vec<_> = (0..8u64)
                .map(|i| {
                    fork(move || {
                        // Half the threads switch away once: their TCBs cannot be handed
                        // over directly, and go through the pools.
                        if i % 2 == 0 {
                            yield_now();
                        }
                        wave * 8 + i
                    })
                })
                .collect();
            for t in &ts {
                t.wait();
                total += *t.value().unwrap_or(&0);
            }
        }
        ensure!(total == (0..20_000u64).sum::<u64>(), "sum {total}");
        Ok(String::new())
    });
    r?;
    ensure!(s.created >= 20_000, "created {}", s.created);
    let reused = s.reused_local + s.reused_global + s.handovers;
    ensure!(
        s.started == s.tcbs_created + reused,
        "started {} != created {} + reused {}",
        s.started,
        s.tcbs_created,
        reused
    );
    ensure!(
        s.tcbs_created <= 32,
        "{} TCBs for {} threads",
        s.tcbs_created,
        s.created
    );
    ensure!(s.handovers > 0, "no direct hand-over");
    Ok(format!(
        "{} threads with {} TCBs (reused {} from the local pool, {} from the global pool, {} handed over)",
        s.created, s.tcbs_created, s.reused_local, s.reused_global, s.handovers
    ))
}

/// Each built-in policy's order on one virtual processor: FIFO runs threads in the order
/// they were forked, LIFO newest first, work stealing newest first for the owner; a custom
/// policy can be closed over a virtual processor too.
pub fn policies(_vps: usize) -> Outcome {
    let mut out = String::new();
    for (kind, want) in [
        (Kind::Fifo, [0u32, 1, 2, 3, 4]),
        (Kind::Lifo, [4, 3, 2, 1, 0]),
        (Kind::WorkStealing, [4, 3, 2, 1, 0]),
    ] {
        let (order, _) = run(Config::new(1, kind), || {
            let log = Arc::new(Mutex::new(Vec::new()));
            let ts: Vec<_> = (0..5u32)
                .map(|i| {
                    let log = log.clone();
                    fork(move || log.lock().push(i))
                })
                .collect();
            for t in &ts {
                t.wait();
            }
            let v = log.lock().clone();
            v
        });
        ensure!(order == want, "{kind:?} ran {order:?}, expected {want:?}");
        out.push_str(&format!("{kind:?} {order:?}; "));
    }
    Ok(out)
}

/// More threads queued at once on one virtual processor than its own queue holds
/// (`crate::deque::CAPACITY`): the rest go on its shared queue, and each built-in policy
/// still runs every thread once, FIFO and LIFO in their exact orders.
pub fn full_queues(_vps: usize) -> Outcome {
    const N: u32 = crate::deque::CAPACITY as u32 * 2 + 44;
    let mut out = String::new();
    for kind in [Kind::Fifo, Kind::Lifo, Kind::WorkStealing] {
        let (order, _) = run(Config::new(1, kind), || {
            let log = Arc::new(Mutex::new(Vec::new()));
            let ts: Vec<_> = (0..N)
                .map(|i| {
                    let log = log.clone();
                    fork(move || log.lock().push(i))
                })
                .collect();
            for t in &ts {
                t.wait();
            }
            let v = log.lock().clone();
            v
        });
        let mut sorted = order.clone();
        sorted.sort_unstable();
        ensure!(
            sorted == (0..N).collect::<Vec<_>>(),
            "{kind:?}: not every thread ran exactly once ({} ran)",
            order.len()
        );
        match kind {
            Kind::Fifo => ensure!(order == (0..N).collect::<Vec<_>>(), "FIFO out of order"),
            Kind::Lifo => ensure!(
                order == (0..N).rev().collect::<Vec<_>>(),
                "LIFO out of order: {:?}",
                order.get(..8)
            ),
            Kind::WorkStealing => {}
        }
        out.push_str(&format!("{kind:?}: {N} ran once; "));
    }
    Ok(out)
}

/// Work stealing under imbalance: 64 threads are forked on the main thread's virtual
/// processor, which the main thread then keeps busy (spinning without a checkpoint) until
/// half of them have finished: only stealing can run them.
pub fn stealing(vps: usize) -> Outcome {
    if vps < 2 {
        return Ok(String::from("one virtual processor: nothing to steal from"));
    }
    let (r, s) = run(Config::new(vps, Kind::WorkStealing), move || -> Outcome {
        let ran_on: Arc<Vec<AtomicU32>> = Arc::new((0..vps).map(|_| AtomicU32::new(0)).collect());
        let done = Arc::new(AtomicU32::new(0));
        let home = current_vp();
        let ts: Vec<_> = (0..64u64)
            .map(|i| {
                let (ran_on, done) = (ran_on.clone(), done.clone());
                fork_on(home, move || {
                    let mut x = i;
                    for _ in 0..2_000 {
                        x = core::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                    yield_now();
                    if let Some(c) = ran_on.get(current_vp()) {
                        c.fetch_add(1, SeqCst);
                    }
                    done.fetch_add(1, SeqCst);
                    x
                })
            })
            .collect();
        while done.load(SeqCst) < 32 {
            core::hint::spin_loop();
        }
        for t in &ts {
            t.wait();
        }
        let others: u32 = ran_on
            .iter()
            .enumerate()
            .filter(|(v, _)| *v != home)
            .map(|(_, c)| c.load(SeqCst))
            .sum();
        ensure!(
            others >= 32,
            "only {others} threads ran off virtual processor {home}"
        );
        Ok(format!(
            "{others} of 64 threads finished off the loaded virtual processor"
        ))
    });
    let r = r?;
    ensure!(s.stolen >= 32, "{} stolen", s.stolen);
    Ok(format!("{r}, {} stolen", s.stolen))
}

/// A thread moves itself between virtual processors; FIFO processors do not steal.
pub fn migrate_between(vps: usize) -> Outcome {
    let (r, s) = run(Config::new(vps, Kind::Fifo), move || -> Outcome {
        let n = vp_count();
        let t = fork(move || {
            let mut seen = Vec::new();
            for target in (0..n).chain(0..n).rev() {
                migrate(target);
                seen.push(current_vp());
            }
            seen
        });
        let seen = t.value().map_err(|_| String::from("terminated"))?.clone();
        let want: Vec<usize> = (0..n).chain(0..n).rev().collect();
        ensure!(seen == want, "visited {seen:?}, expected {want:?}");
        Ok(format!("visited {seen:?}"))
    });
    let r = r?;
    ensure!(vps < 2 || s.migrations > 0, "no migration counted");
    ensure!(s.stolen == 0, "a FIFO processor stole");
    Ok(r)
}

/// Many threads add to a counter under a mutex; none may lose an update.
pub fn mutex(vps: usize) -> Outcome {
    run(Config::new(vps, Kind::WorkStealing), || -> Outcome {
        let m = Arc::new(Mutex::new(0u64));
        let ts: Vec<_> = (0..16)
            .map(|i| {
                let m = m.clone();
                fork_on(i, move || {
                    for _ in 0..200 {
                        let mut g = m.lock();
                        let v = *g;
                        yield_now(); // hold it across a switch
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in &ts {
            t.wait();
        }
        let v = *m.lock();
        ensure!(v == 3200, "counter {v}, expected 3200");
        Ok(String::from(
            "16 threads × 200 increments under a mutex held across switches: 3200",
        ))
    })
    .0
}

/// A bounded buffer with two condition variables.
pub fn condvar(vps: usize) -> Outcome {
    run(Config::new(vps, Kind::WorkStealing), || -> Outcome {
        struct Buf {
            items: Vec<u64>,
        }
        let m = Arc::new(Mutex::new(Buf { items: Vec::new() }));
        let not_empty = Arc::new(Condvar::new());
        let not_full = Arc::new(Condvar::new());
        let producers: Vec<_> = (0..4u64)
            .map(|p| {
                let (m, ne, nf) = (m.clone(), not_empty.clone(), not_full.clone());
                fork_on(p as usize, move || {
                    for i in 0..250u64 {
                        let mut g = m.lock();
                        while g.items.len() >= 4 {
                            g = nf.wait(g);
                        }
                        g.items.push(p * 1000 + i);
                        drop(g);
                        ne.notify_one();
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..2)
            .map(|c| {
                let (m, ne, nf) = (m.clone(), not_empty.clone(), not_full.clone());
                fork_on(c + 1, move || {
                    let mut sum = 0u64;
                    for _ in 0..500 {
                        let mut g = m.lock();
                        while g.items.is_empty() {
                            g = ne.wait(g);
                        }
                        sum += g.items.pop().unwrap_or(0);
                        drop(g);
                        nf.notify_one();
                    }
                    sum
                })
            })
            .collect();
        for p in &producers {
            p.wait();
        }
        let total: u64 = consumers.iter().map(|c| *c.value().unwrap_or(&0)).sum();
        let want: u64 = (0..4u64)
            .map(|p| (0..250u64).map(|i| p * 1000 + i).sum::<u64>())
            .sum();
        ensure!(total == want, "consumed {total}, expected {want}");
        Ok(String::from(
            "4 producers, 2 consumers, a 4-slot buffer: every item consumed once",
        ))
    })
    .0
}

/// Threads meet at a barrier round after round; nobody passes before all arrive.
pub fn barrier(vps: usize) -> Outcome {
    run(Config::new(vps, Kind::Fifo), || -> Outcome {
        const N: usize = 6;
        const ROUNDS: u64 = 50;
        let b = Arc::new(Barrier::new(N));
        let arrived = Arc::new(AtomicU64::new(0));
        let bad = Arc::new(AtomicBool::new(false));
        let ts: Vec<_> = (0..N)
            .map(|i| {
                let (b, arrived, bad) = (b.clone(), arrived.clone(), bad.clone());
                fork_on(i, move || {
                    let mut leader = 0u32;
                    for round in 0..ROUNDS {
                        arrived.fetch_add(1, SeqCst);
                        if b.wait() {
                            leader += 1;
                        }
                        if arrived.load(SeqCst) < (round + 1) * N as u64 {
                            bad.store(true, SeqCst);
                        }
                        b.wait();
                    }
                    leader
                })
            })
            .collect();
        let leaders: u32 = ts.iter().map(|t| *t.value().unwrap_or(&0)).sum();
        ensure!(!bad.load(SeqCst), "a thread passed the barrier early");
        ensure!(
            leaders == ROUNDS as u32,
            "{leaders} leaders for {ROUNDS} rounds"
        );
        ensure!(
            b.generation() == 2 * ROUNDS,
            "generation {}",
            b.generation()
        );
        Ok(format!(
            "{N} threads, {ROUNDS} rounds, one leader per round"
        ))
    })
    .0
}

/// A suspended thread does not run until resumed, whether it was scheduled, ready or
/// running (it stops at its next checkpoint); a thread suspends itself.
pub fn suspend_resume(vps: usize) -> Outcome {
    run(Config::new(vps, Kind::Fifo), || -> Outcome {
        let count = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c2, s2) = (count.clone(), stop.clone());
        let t = fork_on(vp_count() - 1, move || {
            while !s2.load(SeqCst) {
                c2.fetch_add(1, SeqCst);
                yield_now();
            }
        });
        while count.load(SeqCst) < 10 {
            yield_now();
        }
        t.suspend();
        // It stops at its next checkpoint: once it is off its virtual processor (not
        // running), its count stays put. (Waiting for the count to look still instead
        // failed now and then on a busy host, whose scheduler had not run that virtual
        // processor's thread at all meanwhile.)
        while t.detail().0 == crate::state::State::Running {
            yield_now();
        }
        let last = count.load(SeqCst);
        for _ in 0..200 {
            yield_now();
        }
        ensure!(count.load(SeqCst) == last, "a suspended thread ran");
        t.resume();
        while count.load(SeqCst) < last + 10 {
            yield_now();
        }
        stop.store(true, SeqCst);
        t.wait();
        // Suspended before it starts: it does not start until resumed.
        let started = Arc::new(AtomicBool::new(false));
        let st2 = started.clone();
        let u = delay(move || st2.store(true, SeqCst));
        u.suspend();
        u.schedule();
        for _ in 0..100 {
            yield_now();
        }
        ensure!(
            !started.load(SeqCst),
            "a suspended scheduled thread started"
        );
        u.resume();
        u.wait();
        ensure!(started.load(SeqCst), "resumed thread did not run");
        // A thread that suspends itself.
        let me_done = Arc::new(AtomicBool::new(false));
        let md = me_done.clone();
        let w = fork(move || {
            current().suspend();
            md.store(true, SeqCst);
        });
        while !w.detail().1 {
            yield_now();
        }
        for _ in 0..50 {
            yield_now();
        }
        ensure!(!me_done.load(SeqCst), "a self-suspended thread ran on");
        w.resume();
        w.wait();
        Ok(String::from(
            "running, scheduled and self-suspended threads stop until resumed",
        ))
    })
    .0
}

/// Termination: a scheduled thread never runs; a running one ends at its next checkpoint
/// (its value is gone), and waiters are released.
pub fn terminate(vps: usize) -> Outcome {
    run(Config::new(vps, Kind::Fifo), || -> Outcome {
        let ran = Arc::new(AtomicBool::new(false));
        let r2 = ran.clone();
        let s = fork(move || r2.store(true, SeqCst));
        s.terminate();
        s.wait();
        ensure!(!ran.load(SeqCst), "a terminated scheduled thread ran");
        ensure!(
            s.value() == Err(Terminated),
            "terminated scheduled thread has a value"
        );
        let spins = Arc::new(AtomicU64::new(0));
        let sp2 = spins.clone();
        let t = fork_on(vp_count() - 1, move || loop {
            sp2.fetch_add(1, SeqCst);
            yield_now();
        });
        while spins.load(SeqCst) < 5 {
            yield_now();
        }
        t.terminate();
        t.wait();
        ensure!(
            t.value() == Err(Terminated),
            "terminated running thread has a value"
        );
        let at = spins.load(SeqCst);
        for _ in 0..100 {
            yield_now();
        }
        ensure!(spins.load(SeqCst) == at, "a terminated thread still runs");
        Ok(String::from(
            "a scheduled thread never ran; a running one ended at its checkpoint",
        ))
    })
    .0
}

/// A group lists its threads, suspends and terminates them all; children join their
/// parent's group.
pub fn groups(vps: usize) -> Outcome {
    run(Config::new(vps, Kind::Fifo), || -> Outcome {
        let g = Group::new();
        let ticks = Arc::new(AtomicU64::new(0));
        let mut ids = Vec::new();
        for i in 0..4 {
            let t2 = ticks.clone();
            let t = g.fork_on(i, move || {
                // A child of a member is a member.
                let t3 = t2.clone();
                let _child = fork(move || loop {
                    t3.fetch_add(1, SeqCst);
                    yield_now();
                });
                loop {
                    t2.fetch_add(1, SeqCst);
                    yield_now();
                }
            });
            ids.push(t.id());
        }
        while g.len() < 8 {
            yield_now();
        }
        let listed: Vec<u64> = g.list().iter().map(|t| t.id()).collect();
        ensure!(
            ids.iter().all(|id| listed.contains(id)),
            "list {listed:?} lacks one of {ids:?}"
        );
        ensure!(listed.len() == 8, "{} members, expected 8", listed.len());
        g.suspend_all();
        // A member stops at its next checkpoint: wait until none is running (on another
        // virtual processor, one may be between two checkpoints for as long as its host
        // thread is descheduled, so a pause in the ticks proves nothing).
        while g
            .list()
            .iter()
            .any(|t| t.detail().0 == crate::state::State::Running)
        {
            yield_now();
        }
        let last = ticks.load(SeqCst);
        for _ in 0..100 {
            yield_now();
        }
        ensure!(ticks.load(SeqCst) == last, "a suspended member ran");
        g.resume_all();
        while ticks.load(SeqCst) < last + 20 {
            yield_now();
        }
        g.terminate_all();
        for t in g.list() {
            t.wait();
        }
        ensure!(g.is_empty(), "{} members left after terminate_all", g.len());
        Ok(String::from(
            "8 members (4 children) listed, suspended, resumed, terminated",
        ))
    })
    .0
}

/// A message with shared substructure, for the ports' copy semantics.
#[derive(Clone)]
struct Msg {
    /// Copied by both puts.
    top: u64,
    /// Shared by a shallow put, copied by a deep one.
    shared: Arc<Cell>,
}

/// A mutable cell that deep copies by value.
struct Cell(AtomicU64);

impl DeepCopy for Cell {
    fn deep_copy(&self) -> Cell {
        Cell(AtomicU64::new(self.0.load(SeqCst)))
    }
}

impl DeepCopy for Msg {
    fn deep_copy(&self) -> Msg {
        Msg {
            top: self.top,
            shared: self.shared.deep_copy(),
        }
    }
}

/// Ports: `put` copies the top level and shares the rest, `put_deep` shares nothing;
/// `get` parks until a message arrives; a closure sent to a port runs as an active
/// message in a thread the receiver forks.
pub fn ports(vps: usize) -> Outcome {
    run(Config::new(vps, Kind::WorkStealing), || -> Outcome {
        let port: Port<Msg> = Port::new();
        let msg = Msg {
            top: 1,
            shared: Arc::new(Cell(AtomicU64::new(10))),
        };
        port.put(&msg);
        port.put_deep(&msg);
        let mut shallow = port.get();
        let deep = port.get();
        msg.shared.0.store(20, SeqCst);
        shallow.top = 2;
        ensure!(msg.top == 1, "the shallow copy's top level is the sender's");
        ensure!(
            shallow.shared.0.load(SeqCst) == 20,
            "a shallow copy does not share substructure"
        );
        ensure!(
            deep.shared.0.load(SeqCst) == 10,
            "a deep copy shares substructure"
        );
        // A receiver parked in get, and active messages.
        let jobs: Port<alloc::boxed::Box<dyn FnOnce() -> u64 + Send>> = Port::new();
        let results: Port<u64> = Port::new();
        let (j2, r2) = (jobs.clone(), results.clone());
        let receiver = fork_on(vp_count() - 1, move || {
            for _ in 0..10 {
                let job = j2.get();
                let r3 = r2.clone();
                fork(move || r3.send(job()));
            }
        });
        for _ in 0..20 {
            yield_now();
        }
        for i in 0..10u64 {
            jobs.send(alloc::boxed::Box::new(move || i * i));
        }
        let total: u64 = (0..10).map(|_| results.get()).sum();
        receiver.wait();
        ensure!(total == 285, "active messages gave {total}");
        Ok(String::from(
            "shallow put shares substructure, deep put does not; 10 active messages ran",
        ))
    })
    .0
}

/// The inputs of the four applications of the paper's Figure 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Primes: how many primes to find (the paper: the first million).
    pub primes: u64,
    /// Minimum spanning tree: random points (the paper: 5,000).
    pub mst_points: usize,
    /// Alpha-beta: the game tree's depth, fanout 8 (the paper: 10).
    pub ab_depth: u32,
    /// N-body: bodies, six steps (the paper: 5,000).
    pub nb_bodies: usize,
}

/// The sizes the checked scenarios use (`sting_smp1/2/4` and the host's tests): each
/// application well under a second of QEMU's software CPU.
pub const TEST_SIZES: Sizes = Sizes {
    primes: 6_000,
    mst_points: 500,
    ab_depth: 6,
    nb_bodies: 200,
};

/// The paper's sizes (its section 8): the first million primes, 5,000 points, depth 10,
/// 5,000 bodies.
pub const PAPER_SIZES: Sizes = Sizes {
    primes: 1_000_000,
    mst_points: 5_000,
    ab_depth: 10,
    nb_bodies: 5_000,
};

/// The sizes `sting_speedup` runs under QEMU's software CPU (`docs/sting.md`, "The
/// applications at the paper's sizes"): the paper's for primes, the minimum spanning tree
/// and alpha-beta; N-body with 2,000 bodies (its direct sum is quadratic: the paper's
/// 5,000 take six times as long, about ten seconds of software floating point a run,
/// which with the sequential check and three runs on each configuration is more than the
/// test suite can give it; the host's `speedup_sizes` test runs the paper's).
pub const SPEEDUP_SIZES: Sizes = Sizes {
    nb_bodies: 2_000,
    ..PAPER_SIZES
};

/// Slaves of the primes application: each sieves one range.
const PRIME_SLAVES: u64 = 64;

/// An upper bound of the `n`-th prime: `n (ln n + ln ln n)` for `n` ≥ 6 (Rosser's bound).
fn nth_prime_bound(n: u64) -> u64 {
    if n < 6 {
        return 14;
    }
    let l = libm::log(n as f64);
    (n as f64 * (l + libm::log(l))) as u64 + 1
}

/// The primes up to `limit` (inclusive), by the sieve of Eratosthenes.
fn small_primes(limit: u64) -> Vec<u64> {
    let n = limit as usize + 1;
    let mut composite = alloc::vec![false; n];
    let mut out = Vec::new();
    for i in 2..n {
        if !composite[i] {
            out.push(i as u64);
            let mut j = i * i;
            while j < n {
                composite[j] = true;
                j += i;
            }
        }
    }
    out
}

/// The primes in `[lo, hi)`, by sieving the range with `base` (every prime up to the
/// square root of `hi`); calls `each` with each, in order.
fn sieve_range(base: &[u64], lo: u64, hi: u64, mut each: impl FnMut(u64)) {
    if hi <= lo {
        return;
    }
    let mut composite = alloc::vec![false; (hi - lo) as usize];
    for &p in base {
        if p * p >= hi {
            break;
        }
        let mut m = (lo.div_ceil(p) * p).max(p * p);
        while m < hi {
            composite[(m - lo) as usize] = true;
            m += p;
        }
    }
    for (i, c) in composite.iter().enumerate() {
        let n = lo + i as u64;
        if !c && n >= 2 {
            each(n);
        }
    }
}

/// The `n`-th prime (1-based): one sieve of the whole range.
fn nth_prime_sequential(n: u64) -> u64 {
    let bound = nth_prime_bound(n);
    let base = small_primes(libm::sqrt(bound as f64) as u64 + 1);
    let (mut count, mut found) = (0, 0);
    sieve_range(&base, 0, bound, |p| {
        count += 1;
        if count == n {
            found = p;
        }
    });
    found
}

/// The `n`-th prime by the paper's master and slaves: the master forks a slave per range
/// of `[0, bound)`, each counts the primes of its range, and the master finds the range
/// the `n`-th falls in and the prime in it.
fn nth_prime_parallel(n: u64) -> u64 {
    let bound = nth_prime_bound(n);
    let base = Arc::new(small_primes(libm::sqrt(bound as f64) as u64 + 1));
    let chunk = bound.div_ceil(PRIME_SLAVES);
    let slaves: Vec<_> = (0..PRIME_SLAVES)
        .map(|i| {
            let base = base.clone();
            fork(move || {
                let mut count = 0u64;
                sieve_range(&base, i * chunk, ((i + 1) * chunk).min(bound), |_| {
                    count += 1
                });
                count
            })
        })
        .collect();
    let mut before = 0;
    for (i, s) in (0..PRIME_SLAVES).zip(&slaves) {
        let c = *s.value().unwrap_or(&0);
        if before + c >= n {
            let (mut k, mut found) = (before, 0);
            sieve_range(&base, i * chunk, ((i + 1) * chunk).min(bound), |p| {
                k += 1;
                if k == n {
                    found = p;
                }
            });
            return found;
        }
        before += c;
    }
    0
}

/// The primes application of the paper's Figure 4: the `n`-th prime found by a master and
/// its slaves, each sieving one range; checked against a sequential sieve.
pub fn primes(vps: usize) -> Outcome {
    let n = TEST_SIZES.primes;
    let sequential = nth_prime_sequential(n);
    let (parallel, s) = run(Config::new(vps, Kind::WorkStealing), move || {
        nth_prime_parallel(n)
    });
    ensure!(
        parallel == sequential && sequential != 0,
        "prime number {n}: {parallel}, sequentially {sequential}"
    );
    Ok(format!(
        "prime number {n} is {parallel}, as found sequentially ({PRIME_SLAVES} slaves, {} stolen, {} TCBs)",
        s.stolen, s.tcbs_created
    ))
}

/// The counters of each virtual processor, for a report line.
pub fn per_vp_finished() -> Vec<u64> {
    (0..vp_count()).map(|v| vp_stats(v).finished).collect()
}

/// A deterministic pseudo-random sequence (a 64-bit LCG's high bits), so that the parallel
/// and sequential runs of an application see the same input.
fn lcg(x: &mut u64) -> u64 {
    *x = x
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *x >> 33
}

/// Slaves per step of the parallel minimum spanning tree.
const MST_SLAVES: usize = 8;

/// `n` random points of the minimum-spanning-tree application.
fn mst_points(n: usize) -> Vec<(i64, i64)> {
    let mut x = 42;
    (0..n)
        .map(|_| ((lcg(&mut x) % 10_000) as i64, (lcg(&mut x) % 10_000) as i64))
        .collect()
}

/// Squared distance (exact; Prim's tree is the same as for the distance itself).
fn d2(a: (i64, i64), b: (i64, i64)) -> u64 {
    let (dx, dy) = (a.0 - b.0, a.1 - b.1);
    (dx * dx + dy * dy) as u64
}

/// One step of Prim's algorithm over `range` of the vertices: each vertex not in the tree
/// lowers its distance to the tree with the vertex `added`; returns the nearest of them
/// (distance, index), ties to the lower index.
fn mst_relax(
    pts: &[(i64, i64)],
    dist: &[AtomicU64],
    range: core::ops::Range<usize>,
    added: usize,
) -> (u64, usize) {
    let mut best = (u64::MAX, usize::MAX);
    for i in range {
        let Some(d) = dist.get(i) else { break };
        let cur = d.load(SeqCst);
        if cur == 0 {
            continue; // in the tree (distinct points: only tree vertices are at 0)
        }
        let nd = cur.min(d2(pts[i], pts[added]));
        d.store(nd, SeqCst);
        if (nd, i) < best {
            best = (nd, i);
        }
    }
    best
}

/// Prim's algorithm: the tree's total (squared) weight. With `par`, each step's relaxation
/// is split among forked slaves, one per slice of the vertices.
fn mst_weight(pts: Arc<Vec<(i64, i64)>>, par: bool) -> u64 {
    let n = pts.len();
    let dist: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(u64::MAX)).collect());
    if let Some(d) = dist.first() {
        d.store(0, SeqCst);
    }
    let (mut added, mut total) = (0usize, 0u64);
    for _ in 1..n {
        let best = if par {
            let chunk = n.div_ceil(MST_SLAVES);
            let slaves: Vec<_> = (0..MST_SLAVES)
                .map(|k| {
                    let (p, d) = (pts.clone(), dist.clone());
                    fork(move || mst_relax(&p, &d, k * chunk..((k + 1) * chunk).min(n), added))
                })
                .collect();
            for s in &slaves {
                s.wait();
            }
            slaves
                .iter()
                .map(|s| *s.value().unwrap_or(&(u64::MAX, usize::MAX)))
                .min()
                .unwrap_or((u64::MAX, usize::MAX))
        } else {
            mst_relax(&pts, &dist, 0..n, added)
        };
        let Some(d) = dist.get(best.1) else { break };
        total += best.0;
        d.store(0, SeqCst);
        added = best.1;
    }
    total
}

/// The minimum-spanning-tree application of the paper's Figure 4 (Prim's algorithm on
/// random points): the tree's weight in a runtime whose steps fork slaves, against a
/// sequential run.
pub fn mst(vps: usize) -> Outcome {
    let n = TEST_SIZES.mst_points;
    let pts = Arc::new(mst_points(n));
    let sequential = mst_weight(pts.clone(), false);
    let (parallel, s) = run(Config::new(vps, Kind::WorkStealing), move || {
        mst_weight(pts, true)
    });
    ensure!(
        parallel == sequential,
        "minimum spanning tree weight {parallel}, sequentially {sequential}"
    );
    Ok(format!(
        "minimum spanning tree of {n} points: weight {parallel} as sequentially ({} threads, {} TCBs)",
        s.created, s.tcbs_created
    ))
}

/// The game tree of the alpha-beta application: fanout 8.
const AB_FANOUT: u64 = 8;

/// A node's static value (at the leaves): a hash of its path, with the paper's 90% skew:
/// in nine nodes out of ten (decided by the hash) the first child is the best move, by a
/// bonus to every leaf below it.
fn ab_leaf(path: u64) -> i64 {
    let mut x = path ^ 0x9e37_79b9_7f4a_7c15;
    (lcg(&mut x) % 1000) as i64
}

fn ab_skew(path: u64) -> bool {
    let mut x = path.wrapping_mul(31).wrapping_add(7);
    !lcg(&mut x).is_multiple_of(10)
}

/// Negamax alpha-beta from the node `path` with `depth` plies to go.
fn alpha_beta(path: u64, depth: u32, mut alpha: i64, beta: i64, bonus: i64) -> i64 {
    if depth == 0 {
        return ab_leaf(path) + bonus;
    }
    let mut best = i64::MIN + 1;
    for c in 0..AB_FANOUT {
        let b = if c == 0 && ab_skew(path) { 300 } else { 0 };
        let v = -alpha_beta(
            path.wrapping_mul(AB_FANOUT).wrapping_add(c + 1),
            depth - 1,
            -beta,
            -alpha,
            -b,
        );
        best = best.max(v);
        alpha = alpha.max(v);
        if alpha >= beta {
            break;
        }
    }
    best
}

/// The sequential alpha-beta search of a tree of `depth`.
fn ab_sequential(depth: u32) -> i64 {
    alpha_beta(0, depth, i64::MIN + 1, i64::MAX, 0)
}

/// The parallel search: the root's first move is searched at once (it is the best nine
/// times in ten), then the others are forked, each searched with the window the first
/// gave, and their best is the root's value.
fn ab_parallel(depth: u32) -> i64 {
    let full = (i64::MIN + 1, i64::MAX);
    let b0 = if ab_skew(0) { 300 } else { 0 };
    let first = -alpha_beta(1, depth - 1, -full.1, -full.0, -b0);
    let rest: Vec<_> = (1..AB_FANOUT)
        .map(|c| fork(move || -alpha_beta(c + 1, depth - 1, -full.1, -first, 0)))
        .collect();
    for r in &rest {
        r.wait();
    }
    rest.iter()
        .map(|r| *r.value().unwrap_or(&i64::MIN))
        .fold(first, i64::max)
}

/// The alpha-beta application of Figure 4 (fanout 8, 90% skew) against the sequential
/// search. Alpha-beta returns the exact minimax value, so the two agree.
pub fn alphabeta(vps: usize) -> Outcome {
    let depth = TEST_SIZES.ab_depth;
    let sequential = ab_sequential(depth);
    let (parallel, s) = run(Config::new(vps, Kind::WorkStealing), move || {
        ab_parallel(depth)
    });
    ensure!(
        parallel == sequential,
        "alpha-beta value {parallel}, sequentially {sequential}"
    );
    Ok(format!(
        "alpha-beta, depth {depth}, fanout {AB_FANOUT}, 90% skew: value {parallel} as sequentially ({} threads, {} stolen)",
        s.created, s.stolen
    ))
}

/// Steps of the N-body application (the paper's six) and its slaves per step.
const NB_STEPS: usize = 6;
const NB_SLAVES: usize = 8;

type Body = ([f64; 3], [f64; 3]);

/// The acceleration of each body of `range` (direct sum over all bodies, softened).
fn nb_accel(bodies: &[Body], range: core::ops::Range<usize>) -> Vec<[f64; 3]> {
    range
        .map(|i| {
            let p = bodies[i].0;
            let mut a = [0.0f64; 3];
            for (j, q) in bodies.iter().enumerate() {
                if j == i {
                    continue;
                }
                let d = [q.0[0] - p[0], q.0[1] - p[1], q.0[2] - p[2]];
                let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + 0.01;
                let inv = 1.0 / (r2 * libm::sqrt(r2));
                for (ak, dk) in a.iter_mut().zip(d) {
                    *ak += dk * inv;
                }
            }
            a
        })
        .collect()
}

/// Runs the simulation of `n` bodies; with `par` each step's accelerations are computed
/// by forked slaves. Returns a checksum of the final positions' bits.
fn nb_run(n: usize, par: bool) -> u64 {
    let mut x = 7;
    let mut bodies: Vec<Body> = (0..n)
        .map(|_| {
            let mut c = || (lcg(&mut x) % 2000) as f64 / 100.0;
            ([c(), c(), c()], [0.0; 3])
        })
        .collect();
    for _ in 0..NB_STEPS {
        let acc: Vec<[f64; 3]> = if par {
            let shared = Arc::new(bodies.clone());
            let chunk = n.div_ceil(NB_SLAVES);
            let slaves: Vec<_> = (0..NB_SLAVES)
                .map(|k| {
                    let b = shared.clone();
                    fork(move || nb_accel(&b, k * chunk..((k + 1) * chunk).min(n)))
                })
                .collect();
            for s in &slaves {
                s.wait();
            }
            slaves
                .iter()
                .flat_map(|s| s.value().cloned().unwrap_or_default())
                .collect()
        } else {
            nb_accel(&bodies, 0..n)
        };
        for (b, a) in bodies.iter_mut().zip(acc.iter()) {
            for ((p, v), a) in b.0.iter_mut().zip(b.1.iter_mut()).zip(a) {
                *v += a * 0.01;
                *p += *v * 0.01;
            }
        }
    }
    bodies.iter().fold(0u64, |h, b| {
        b.0.iter().fold(h, |h, v| h.rotate_left(7) ^ v.to_bits())
    })
}

/// The N-body application of Figure 4 (direct summation, six steps): the final
/// positions, bit for bit, against a sequential run.
pub fn nbody(vps: usize) -> Outcome {
    let n = TEST_SIZES.nb_bodies;
    let sequential = nb_run(n, false);
    let (parallel, s) = run(Config::new(vps, Kind::WorkStealing), move || {
        nb_run(n, true)
    });
    ensure!(
        parallel == sequential,
        "N-body checksum {parallel:#x}, sequentially {sequential:#x}"
    );
    Ok(format!(
        "N-body, {n} bodies, {NB_STEPS} steps: positions as sequentially ({} threads, {} stolen)",
        s.created, s.stolen
    ))
}

/// One of the four Figure 4 applications, for timing its speedup and checking its answer
/// at any size.
pub struct App {
    /// Its name.
    pub name: &'static str,
    /// What `sizes` it is run at, in words.
    pub size: fn(&Sizes) -> String,
    /// The sequential program's answer (no runtime).
    pub sequential: fn(&Sizes) -> u64,
    /// The parallel program's answer, in a runtime of this many work-stealing virtual
    /// processors, and the runtime's counters.
    pub parallel: fn(usize, &Sizes) -> (u64, crate::Stats),
}

/// The four applications of Figure 4.
pub const APPS: &[App] = &[
    App {
        name: "primes",
        size: |z| format!("the first {} primes", z.primes),
        sequential: |z| nth_prime_sequential(z.primes),
        parallel: |vps, z| {
            let n = z.primes;
            run(Config::new(vps, Kind::WorkStealing), move || {
                nth_prime_parallel(n)
            })
        },
    },
    App {
        name: "mst",
        size: |z| format!("{} points", z.mst_points),
        sequential: |z| mst_weight(Arc::new(mst_points(z.mst_points)), false),
        parallel: |vps, z| {
            let pts = Arc::new(mst_points(z.mst_points));
            run(Config::new(vps, Kind::WorkStealing), move || {
                mst_weight(pts, true)
            })
        },
    },
    App {
        name: "alphabeta",
        size: |z| format!("depth {}, fanout {AB_FANOUT}, 90% skew", z.ab_depth),
        sequential: |z| ab_sequential(z.ab_depth) as u64,
        parallel: |vps, z| {
            let depth = z.ab_depth;
            let (v, s) = run(Config::new(vps, Kind::WorkStealing), move || {
                ab_parallel(depth)
            });
            (v as u64, s)
        },
    },
    App {
        name: "nbody",
        size: |z| format!("{} bodies, {NB_STEPS} steps", z.nb_bodies),
        sequential: |z| nb_run(z.nb_bodies, false),
        parallel: |vps, z| {
            let n = z.nb_bodies;
            run(Config::new(vps, Kind::WorkStealing), move || {
                nb_run(n, true)
            })
        },
    },
];
