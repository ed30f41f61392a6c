//! The claim/ticket protocol of the ready queues, model-checked with `loom`: every
//! interleaving (up to a preemption bound) of the wakers, the controllers and the
//! virtual processors that pop and claim, with the runtime's own [`Queued`] and the
//! state table [`State::on`], each thread's changing state under one lock as in the
//! runtime (`Core::ctl`), and the ready queues as locked FIFOs of tickets.
//!
//! What must hold in every interleaving: a thread is run by at most one processor for one
//! wake-up (never twice, never by two at once), a wake-up is never lost (once the
//! queues are drained, the woken thread has been run exactly once, or is suspended with no
//! live entry until resumed), and a thread terminated or absorbed before it started is
//! never started by a stale entry.

use std::collections::VecDeque;

use loom::sync::{Arc, Mutex};
use loom::thread;

use crate::state::{End, Event, State};
use crate::ticket::Queued;

/// What the runtime keeps under a thread's lock, as far as the protocol goes.
#[derive(Debug)]
struct Ctl {
    state: State,
    suspended: bool,
    q: Queued,
    /// How many times a processor's claim won (and would run the thread).
    runs: u32,
    /// The processor whose claim won last.
    ran_on: usize,
}

type Thread = Arc<Mutex<Ctl>>;
type ReadyQueue = Arc<Mutex<VecDeque<u32>>>;

fn thread_in(state: State) -> Thread {
    Arc::new(Mutex::new(Ctl {
        state,
        suspended: false,
        q: Queued::new(),
        runs: 0,
        ran_on: usize::MAX,
    }))
}

/// `rt::unpark`: a blocked thread becomes ready and is queued on `queue`.
fn unpark(t: &Thread, queue: &ReadyQueue) {
    let ticket = {
        let mut c = t.lock().unwrap();
        if c.state != State::Blocked {
            return;
        }
        c.state = c.state.on(Event::Unblock).unwrap();
        c.q.enqueue()
    };
    queue.lock().unwrap().push_back(ticket);
}

/// `rt::suspend` of another thread.
fn suspend(t: &Thread) {
    let mut c = t.lock().unwrap();
    if !c.state.determined() {
        c.suspended = true;
    }
}

/// `rt::resume`: a ready or scheduled thread with no live entry is queued on `queue`.
fn resume(t: &Thread, queue: &ReadyQueue) {
    let ticket = {
        let mut c = t.lock().unwrap();
        if !c.suspended {
            return;
        }
        c.suspended = false;
        if !matches!(c.state, State::Ready | State::Scheduled) || c.q.is_queued() {
            return;
        }
        c.q.enqueue()
    };
    queue.lock().unwrap().push_back(ticket);
}

/// `Vp::claim` of one popped entry by processor `vp`: whether it runs the thread.
fn claim_on(t: &Thread, ticket: u32, vp: usize) -> bool {
    let mut c = t.lock().unwrap();
    if !c.q.claim(ticket) {
        return false;
    }
    if c.suspended {
        return false;
    }
    let event = match c.state {
        State::Scheduled => Event::Start,
        State::Ready => Event::Dispatch,
        _ => return false,
    };
    c.state = c.state.on(event).unwrap();
    c.runs += 1;
    c.ran_on = vp;
    true
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
        while pop_and_claim(t, q) {}
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
        let c = t.lock().unwrap();
        assert_eq!(c.runs, 1, "run once for one wake-up: {c:?}");
        assert_eq!(c.state, State::Running, "{c:?}");
        assert!(!c.q.is_queued() && !c.suspended, "{c:?}");
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
            let c = t.lock().unwrap();
            // The processor may have claimed it before the suspension; after it, never.
            assert_eq!(c.runs, u32::from(ran_before), "{c:?}");
            if !ran_before {
                assert_eq!(c.state, State::Ready, "{c:?}");
                assert!(!c.q.is_queued(), "no live entry while suspended: {c:?}");
            }
        }
        resume(&t, &q0);
        drain(&t, &[&q0]);
        let c = t.lock().unwrap();
        assert_eq!(c.runs, 1, "resumed, it runs once: {c:?}");
    });
}

/// A scheduled thread (queued, not started) is claimed by two processors from two
/// entries (queued, then queued again after a suspension and resume), absorbed by a
/// toucher, or terminated: exactly one of them takes it, and a terminated thread never
/// starts.
#[test]
fn start_absorb_terminate_race() {
    model(|| {
        let t = thread_in(State::Delayed);
        let (q0, q1): (ReadyQueue, ReadyQueue) = Default::default();
        // `rt::schedule`: delayed to scheduled, queued on processor 0.
        let ticket = {
            let mut c = t.lock().unwrap();
            c.state = c.state.on(Event::Schedule).unwrap();
            c.q.enqueue()
        };
        q0.lock().unwrap().push_back(ticket);
        let vp0 = {
            let (t, q0) = (t.clone(), q0.clone());
            thread::spawn(move || pop_and_claim(&t, &q0))
        };
        let toucher = {
            let t = t.clone();
            thread::spawn(move || {
                // `rt::demand` with absorption.
                let mut c = t.lock().unwrap();
                if matches!(c.state, State::Delayed | State::Scheduled) && !c.suspended {
                    c.state = c.state.on(Event::Absorb).unwrap();
                    c.q.unqueue();
                    c.runs += 1;
                }
            })
        };
        // `rt::terminate` of a thread that has not started.
        {
            let mut c = t.lock().unwrap();
            if matches!(c.state, State::Delayed | State::Scheduled) {
                c.state = c.state.on(Event::Terminate).unwrap();
                c.q.unqueue();
            }
        }
        vp0.join().unwrap();
        toucher.join().unwrap();
        drain(&t, &[&q0, &q1]);
        let c = t.lock().unwrap();
        match c.state {
            State::Determined(End::Terminated) => assert_eq!(c.runs, 0, "{c:?}"),
            State::Running | State::Absorbed => assert_eq!(c.runs, 1, "{c:?}"),
            _ => panic!("unexpected end state {c:?}"),
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
        let first = t.lock().unwrap().q.enqueue();
        q0.lock().unwrap().push_back(first);
        let vp0 = {
            let (t, q0) = (t.clone(), q0.clone());
            thread::spawn(move || {
                let entry = q0.lock().unwrap().pop_front();
                entry.is_some_and(|ticket| claim_on(&t, ticket, 0))
            })
        };
        // The signalling thread's switch to `t`, then `t`'s migration to processor 1.
        let switched = {
            let mut c = t.lock().unwrap();
            if c.state == State::Ready && c.q.is_queued() && !c.suspended {
                c.q.unqueue();
                c.state = c.state.on(Event::Dispatch).unwrap();
                c.runs += 1;
                true
            } else {
                false
            }
        };
        if switched {
            let ticket = {
                let mut c = t.lock().unwrap();
                c.state = c.state.on(Event::Preempt).unwrap();
                c.q.enqueue()
            };
            q1.lock().unwrap().push_back(ticket);
        }
        let vp0_ran = vp0.join().unwrap();
        assert!(
            !(switched && vp0_ran),
            "run by the switch and by processor 0"
        );
        while let Some(ticket) = q1.lock().unwrap().pop_front() {
            claim_on(&t, ticket, 1);
        }
        let c = t.lock().unwrap();
        if switched {
            assert_eq!(
                (c.runs, c.ran_on),
                (2, 1),
                "migrated, it ran on processor 1: {c:?}"
            );
        } else {
            assert_eq!((c.runs, c.ran_on), (1, 0), "{c:?}");
        }
    });
}
