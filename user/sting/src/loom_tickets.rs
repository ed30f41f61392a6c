//! The thread state word's protocol (`word.rs`) model-checked with `loom`: every
//! interleaving (up to a preemption bound) of wakers, parkers, controllers suspending and
//! resuming, a toucher absorbing, a terminator, a signaller pinning a thread's context and
//! the virtual processors that pop and claim entries, with the runtime's own transitions
//! ([`Word`]'s functions) applied by the runtime's own compare-and-swap loops
//! ([`word::update`], [`word::claim`]) on `loom`'s atomics, the operations that take the
//! thread's lock in the runtime taking a lock here too, and the ready queues as locked
//! FIFOs of tickets.
//!
//! What must hold in every interleaving: a thread is run by at most one processor for one
//! wake-up (never twice, never by two at once), a wake-up is never lost (once the queues
//! are drained, the woken thread has been run exactly once, or is suspended with no live
//! entry until resumed; a wake-up that comes before the park makes the park return), a
//! thread terminated or absorbed before it started is never started by a stale entry, a
//! stale entry never runs a thread since queued on another processor, and no processor
//! resumes a context while a signal has it pinned.

use std::collections::VecDeque;

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;
use loom::sync::{Arc, Mutex};
use loom::thread;

use crate::state::{End, State};
use crate::word::{self, Cell64, Claim, Word};

impl Cell64 for AtomicU64 {
    fn get(&self) -> u64 {
        self.load(loom::sync::atomic::Ordering::Acquire)
    }
    fn cas(&self, old: u64, new: u64) -> Result<u64, u64> {
        use loom::sync::atomic::Ordering::{AcqRel, Acquire};
        self.compare_exchange(old, new, AcqRel, Acquire)
    }
}

/// A thread as far as the protocol goes.
struct ModelThread {
    /// Its state word.
    word: AtomicU64,
    /// Its lock (`Core::ctl`), held by the rarer operations.
    lock: Mutex<()>,
    /// How many times a claim (or a switch, or an absorption) won, and by whom last: the
    /// test's own record.
    runs: Mutex<(u32, usize)>,
    /// Its saved context, which a signal changes while the word is pinned.
    sp: UnsafeCell<usize>,
}

type Thread = Arc<ModelThread>;
type ReadyQueue = Arc<Mutex<VecDeque<u32>>>;

fn thread_in(state: State) -> Thread {
    Arc::new(ModelThread {
        word: AtomicU64::new(Word::new(state, 0).0),
        lock: Mutex::new(()),
        runs: Mutex::new((0, usize::MAX)),
        sp: UnsafeCell::new(0),
    })
}

fn word_of(t: &Thread) -> Word {
    Word(t.word.get())
}

fn runs(t: &Thread) -> (u32, usize) {
    *t.runs.lock().unwrap()
}

fn ran(t: &Thread, vp: usize) {
    let mut r = t.runs.lock().unwrap();
    r.0 += 1;
    r.1 = vp;
}

/// `Core::apply`.
fn apply(t: &Thread, f: impl Fn(Word) -> Word) -> Word {
    word::update(&t.word, |w| Ok::<_, ()>(f(w))).unwrap()
}

/// `rt::unpark`: a blocked thread becomes ready and is queued on `queue`; any other keeps
/// the wake-up.
fn unpark(t: &Thread, queue: &ReadyQueue) {
    let old = apply(t, Word::unpark);
    if old.state() == State::Blocked {
        queue.lock().unwrap().push_back(old.unpark().ticket());
    }
}

/// `rt::park`'s transition: whether the thread blocked (else a wake-up was consumed).
fn park(t: &Thread) -> bool {
    !apply(t, Word::park).token()
}

/// `rt::suspend` of another thread.
fn suspend(t: &Thread) {
    let _c = t.lock.lock().unwrap();
    let _ = word::update(&t.word, |w| {
        if w.state().determined() {
            return Err(());
        }
        Ok(w.with_suspended(true))
    });
}

/// `rt::resume`: a ready or scheduled thread with no live entry is queued on `queue`.
fn resume(t: &Thread, queue: &ReadyQueue) {
    let _c = t.lock.lock().unwrap();
    let Ok(old) = word::update(&t.word, |w| w.resume().map(|(w, _)| w)) else {
        return;
    };
    if let Ok((new, true)) = old.resume() {
        queue.lock().unwrap().push_back(new.ticket());
    }
}

/// `Vp::claim` of one popped entry by processor `vp`: whether it runs the thread.
fn claim_on(t: &Thread, ticket: u32, vp: usize) -> bool {
    match word::claim(&t.word, ticket, vp, thread::yield_now) {
        Claim::Stale => false,
        Claim::Start | Claim::Resume => {
            ran(t, vp);
            true
        }
    }
}

/// A claim whose processor does not matter.
fn claim(t: &Thread, ticket: u32) -> bool {
    claim_on(t, ticket, usize::MAX)
}

/// A processor's turn: pops one entry (if any) and claims it.
fn pop_and_claim(t: &Thread, queue: &ReadyQueue) -> bool {
    let entry = queue.lock().unwrap().pop_front();
    entry.is_some_and(|ticket| claim(t, ticket))
}

/// Drains every queue, claiming each entry (what the processors do eventually).
fn drain(t: &Thread, queues: &[&ReadyQueue]) {
    for q in queues {
        loop {
            let entry = q.lock().unwrap().pop_front();
            match entry {
                Some(ticket) => {
                    claim(t, ticket);
                }
                None => break,
            }
        }
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A blocked thread is unparked onto one processor's queue while a controller suspends
/// and resumes it (which may queue it on another's), and both processors pop and claim:
/// it runs exactly once, whatever the order.
#[test]
fn wake_suspend_resume_claims_once() {
    model(|| {
        let t = thread_in(State::Blocked);
        let (q0, q1): (ReadyQueue, ReadyQueue) = Default::default();
        let waker = {
            let (t, q0) = (t.clone(), q0.clone());
            thread::spawn(move || unpark(&t, &q0))
        };
        let controller = {
            let (t, q1) = (t.clone(), q1.clone());
            thread::spawn(move || {
                suspend(&t);
                resume(&t, &q1);
            })
        };
        let vp1 = {
            let (t, q1) = (t.clone(), q1.clone());
            thread::spawn(move || pop_and_claim(&t, &q1))
        };
        pop_and_claim(&t, &q0);
        waker.join().unwrap();
        controller.join().unwrap();
        vp1.join().unwrap();
        drain(&t, &[&q0, &q1]);
        let w = word_of(&t);
        assert_eq!(runs(&t).0, 1, "run once for one wake-up: {w:?}");
        assert_eq!(w.state(), State::Running, "{w:?}");
        assert!(!w.queued() && !w.suspended(), "{w:?}");
    });
}

/// A thread is suspended while queued and stays suspended: no processor runs it, and no
/// entry stays live for it (its resume must queue it again).
#[test]
fn suspended_while_queued_is_not_run() {
    model(|| {
        let t = thread_in(State::Blocked);
        let q0: ReadyQueue = Default::default();
        let waker = {
            let (t, q0) = (t.clone(), q0.clone());
            thread::spawn(move || unpark(&t, &q0))
        };
        let vp = {
            let (t, q0) = (t.clone(), q0.clone());
            thread::spawn(move || pop_and_claim(&t, &q0))
        };
        suspend(&t);
        waker.join().unwrap();
        let ran_before = vp.join().unwrap();
        drain(&t, &[&q0]);
        {
            let w = word_of(&t);
            // The processor may have claimed it before the suspension; after it, never.
            assert_eq!(runs(&t).0, u32::from(ran_before), "{w:?}");
            if !ran_before {
                assert_eq!(w.state(), State::Ready, "{w:?}");
                assert!(!w.queued(), "no live entry while suspended: {w:?}");
            }
        }
        resume(&t, &q0);
        drain(&t, &[&q0]);
        assert_eq!(runs(&t).0, 1, "resumed, it runs once");
    });
}

/// A scheduled thread (queued, not started) is claimed by a processor, absorbed by a
/// toucher, or terminated: exactly one of them takes it, and a terminated thread never
/// starts.
#[test]
fn start_absorb_terminate_race() {
    model(|| {
        let t = thread_in(State::Delayed);
        let (q0, q1): (ReadyQueue, ReadyQueue) = Default::default();
        // `rt::schedule`: delayed to scheduled, queued on processor 0.
        let old = word::update(&t.word, Word::schedule).unwrap();
        q0.lock()
            .unwrap()
            .push_back(old.schedule().unwrap().ticket());
        let vp0 = {
            let (t, q0) = (t.clone(), q0.clone());
            thread::spawn(move || pop_and_claim(&t, &q0))
        };
        let toucher = {
            let t = t.clone();
            thread::spawn(move || {
                // `rt::demand` with absorption.
                let _c = t.lock.lock().unwrap();
                if word::update(&t.word, |w| w.absorb(2)).is_ok() {
                    ran(&t, 2);
                }
            })
        };
        // `rt::terminate` of a thread that has not started.
        {
            let _c = t.lock.lock().unwrap();
            let _ = word::update(&t.word, |w| match w.state() {
                State::Delayed | State::Scheduled => {
                    Ok(w.with_state(State::Determined(End::Terminated)).unqueue())
                }
                _ => Err(()),
            });
        }
        vp0.join().unwrap();
        toucher.join().unwrap();
        drain(&t, &[&q0, &q1]);
        let w = word_of(&t);
        match w.state() {
            State::Determined(End::Terminated) => assert_eq!(runs(&t).0, 0, "{w:?}"),
            State::Running | State::Absorbed => assert_eq!(runs(&t).0, 1, "{w:?}"),
            _ => panic!("unexpected end state {w:?}"),
        }
    });
}

/// A ready thread queued on processor 0 is taken another way (a signal's immediate switch
/// to it, `rt::switch_to_target`, which leaves its entry stale) and then migrates to
/// processor 1 (queued there with a new ticket), while processor 0 pops and claims the old
/// entry: the old entry never runs the migrated thread, which runs on processor 1.
#[test]
fn stale_entry_never_runs_a_migrated_thread() {
    model(|| {
        let t = thread_in(State::Ready);
        let (q0, q1): (ReadyQueue, ReadyQueue) = Default::default();
        let first = apply(&t, Word::enqueue).enqueue().ticket();
        q0.lock().unwrap().push_back(first);
        let vp0 = {
            let (t, q0) = (t.clone(), q0.clone());
            thread::spawn(move || {
                let entry = q0.lock().unwrap().pop_front();
                entry.is_some_and(|ticket| claim_on(&t, ticket, 0))
            })
        };
        // The signalling thread's switch to `t` (on processor 0), then `t`'s migration to
        // processor 1.
        let switched = word::update(&t.word, |w| w.take_ready(0)).is_ok();
        if switched {
            ran(&t, usize::MAX);
            let old = apply(&t, |w| w.with_vp(1).yielded());
            q1.lock()
                .unwrap()
                .push_back(old.with_vp(1).yielded().ticket());
        }
        let vp0_ran = vp0.join().unwrap();
        assert!(
            !(switched && vp0_ran),
            "run by the switch and by processor 0"
        );
        loop {
            let entry = q1.lock().unwrap().pop_front();
            match entry {
                Some(ticket) => {
                    claim_on(&t, ticket, 1);
                }
                None => break,
            }
        }
        if switched {
            assert_eq!(runs(&t), (2, 1), "migrated, it ran on processor 1");
        } else {
            assert_eq!(runs(&t), (1, 0));
        }
    });
}

/// A running thread parks while another wakes it: the wake-up is never lost. Either the
/// park consumes it and returns at once, or the thread blocks and the wake-up queues it,
/// and it then runs exactly once.
#[test]
fn park_and_unpark_never_lose_a_wake_up() {
    model(|| {
        let t = thread_in(State::Running);
        let q: ReadyQueue = Default::default();
        let waker = {
            let (t, q) = (t.clone(), q.clone());
            thread::spawn(move || unpark(&t, &q))
        };
        let blocked = park(&t);
        let vp = {
            let (t, q) = (t.clone(), q.clone());
            thread::spawn(move || pop_and_claim(&t, &q))
        };
        waker.join().unwrap();
        vp.join().unwrap();
        drain(&t, &[&q]);
        let w = word_of(&t);
        assert!(!w.token(), "the wake-up is consumed: {w:?}");
        assert_eq!(w.state(), State::Running, "{w:?}");
        assert_eq!(runs(&t).0, u32::from(blocked), "{w:?}");
    });
}

/// A signaller pins a ready, queued thread and changes its saved context while a
/// processor pops and claims it and then resumes the context: the processor never reads
/// the context while it is being changed (`loom` reports such an access as a race), and
/// reads the changed one if the signal came first.
#[test]
fn a_pinned_context_is_not_resumed() {
    model(|| {
        let t = thread_in(State::Ready);
        let q: ReadyQueue = Default::default();
        let ticket = apply(&t, Word::enqueue).enqueue().ticket();
        q.lock().unwrap().push_back(ticket);
        let vp = {
            let (t, q) = (t.clone(), q.clone());
            thread::spawn(move || {
                if pop_and_claim(&t, &q) {
                    // `switch_to`: the claimed context is read.
                    // SAFETY: `loom` checks that no write races this read.
                    Some(t.sp.with(|p| unsafe { *p }))
                } else {
                    None
                }
            })
        };
        // `rt::signal`: pin, change the context, unpin.
        let pinned = {
            let _c = t.lock.lock().unwrap();
            let pinned = word::update(&t.word, |w| {
                if matches!(w.state(), State::Ready | State::Blocked) && !w.pinned() {
                    Ok(w.with_pinned(true))
                } else {
                    Err(())
                }
            })
            .is_ok();
            if pinned {
                // SAFETY: pinned, no one else touches it now (`loom` checks it).
                t.sp.with_mut(|p| unsafe { *p = 1 });
                apply(&t, |w| w.with_pinned(false));
            }
            pinned
        };
        let seen = vp.join().unwrap();
        assert_eq!(
            seen,
            Some(u32::from(pinned) as usize),
            "claimed once, whole"
        );
    });
}

/// Two wakers race to wake one blocked thread: it is queued once, and the second wake-up
/// is kept for its next park.
#[test]
fn two_wakers_queue_once() {
    model(|| {
        let t = thread_in(State::Blocked);
        let (q0, q1): (ReadyQueue, ReadyQueue) = Default::default();
        let w1 = {
            let (t, q1) = (t.clone(), q1.clone());
            thread::spawn(move || unpark(&t, &q1))
        };
        unpark(&t, &q0);
        w1.join().unwrap();
        let entries = q0.lock().unwrap().len() + q1.lock().unwrap().len();
        assert_eq!(entries, 1, "queued once");
        drain(&t, &[&q0, &q1]);
        let w = word_of(&t);
        assert_eq!(runs(&t).0, 1);
        assert!(
            w.token(),
            "the second wake-up is kept for the next park: {w:?}"
        );
    });
}

/// `rt::hand_off`'s wake-up of `t` by processor 0, where the caller runs: straight to
/// running when it is parked there (the caller switches to it: a run), else `unpark`
/// onto `own`.
fn hand_off(t: &Thread, own: &ReadyQueue) {
    if let Ok(old) = word::update(&t.word, |w| w.take_parked(0)) {
        assert!(
            !old.suspended() && !old.pinned(),
            "a suspended or pinned thread was taken: {old:?}"
        );
        ran(t, 0);
    } else {
        unpark(t, own);
    }
}

/// A parked thread is handed the processor directly while another waker unparks it onto
/// a second processor's queue and a controller suspends and resumes it: it runs exactly
/// once (taken by the hand-off or claimed from one entry), the other wake-up is kept for
/// its next park, and a suspended thread is never taken.
#[test]
fn hand_off_races_a_waker_and_a_suspension() {
    model(|| {
        let t = thread_in(State::Blocked);
        let (q0, q1): (ReadyQueue, ReadyQueue) = Default::default();
        let waker = {
            let (t, q1) = (t.clone(), q1.clone());
            thread::spawn(move || unpark(&t, &q1))
        };
        let controller = {
            let (t, q1) = (t.clone(), q1.clone());
            thread::spawn(move || {
                suspend(&t);
                resume(&t, &q1);
            })
        };
        hand_off(&t, &q0);
        waker.join().unwrap();
        controller.join().unwrap();
        drain(&t, &[&q0, &q1]);
        let w = word_of(&t);
        assert_eq!(runs(&t).0, 1, "run once for two wake-ups: {w:?}");
        assert_eq!(w.state(), State::Running, "{w:?}");
        assert!(!w.queued() && !w.suspended(), "{w:?}");
        assert!(
            w.token(),
            "the second wake-up is kept for the next park: {w:?}"
        );
    });
}

/// A thread parks while another hands it the processor: the hand-off either finds it
/// parked and runs it, or leaves the wake-up that makes its park return; never both,
/// never neither.
#[test]
fn hand_off_to_a_thread_parking() {
    model(|| {
        let t = thread_in(State::Running);
        let q: ReadyQueue = Default::default();
        let giver = {
            let (t, q) = (t.clone(), q.clone());
            thread::spawn(move || hand_off(&t, &q))
        };
        let blocked = park(&t);
        giver.join().unwrap();
        drain(&t, &[&q]);
        let w = word_of(&t);
        assert!(!w.token(), "the wake-up is consumed: {w:?}");
        assert_eq!(w.state(), State::Running, "{w:?}");
        assert_eq!(runs(&t).0, u32::from(blocked), "{w:?}");
    });
}

/// The owned yield (`rt::Own`): a running thread goes on its processor's ring with its
/// word untouched, and its processor later resumes it, reads its attention flag and
/// attends (here: suspends itself, as `attend` does for a suspension) or parks. Meanwhile
/// a waker unparks it and a controller suspends it (word and flag, under the lock). What
/// must hold: neither request is lost, since the owner never writes the word while the
/// thread sits on the ring (a plain store of the state there would drop a wake-up or a
/// suspension set in between: that is why the state stays in the word, changed by others
/// only, and the owner's queue position and ready flag live outside it). In every
/// interleaving the word ends suspended, and the wake-up is either still pending, consumed
/// by the park, or has queued the parked thread once.
#[test]
fn an_owned_entry_keeps_what_others_ask() {
    use loom::sync::atomic::AtomicBool;
    use loom::sync::atomic::Ordering::{Acquire, Release};
    model(|| {
        let t = thread_in(State::Running);
        let attention = Arc::new(AtomicBool::new(false));
        let q: ReadyQueue = Default::default();
        let waker = {
            let (t, q) = (t.clone(), q.clone());
            thread::spawn(move || unpark(&t, &q))
        };
        let controller = {
            let (t, a) = (t.clone(), attention.clone());
            thread::spawn(move || {
                suspend(&t);
                a.store(true, Release);
            })
        };
        // The owner: the yield reads the word (running, no live entry) and writes nothing
        // to it; the resumption reads the flag.
        assert!(word_of(&t).running_unqueued() || word_of(&t).suspended());
        let mut parked = None;
        if attention.load(Acquire) {
            let _c = t.lock.lock().unwrap();
            if word_of(&t).suspended() {
                apply(&t, |w| w.with_state(State::Ready).unqueue());
            }
        } else {
            parked = Some(park(&t));
        }
        waker.join().unwrap();
        controller.join().unwrap();
        let w = word_of(&t);
        assert!(w.suspended(), "the suspension survived: {w:?}");
        match parked {
            // Suspended itself before parking: the wake-up waits for its next park.
            None => assert!(w.token(), "the wake-up is pending: {w:?}"),
            // Parked with the wake-up pending: consumed, it goes on.
            Some(false) => assert!(!w.token() && w.state() == State::Running, "{w:?}"),
            // Parked first: the wake-up made it ready and queued it once.
            Some(true) => {
                assert_eq!(w.state(), State::Ready, "{w:?}");
                assert_eq!(q.lock().unwrap().len(), 1, "{w:?}");
            }
        }
    });
}
