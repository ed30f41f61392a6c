//! A thread's state and the transitions the thread controller may make, as a pure table.
//!
//! The paper's five states are [`Paper`]: *delayed* (runs only if its value is demanded),
//! *scheduled* (queued on a virtual processor, no storage yet), *evaluating* (has started:
//! it owns a thread control block and stack), *absorbed* (a delayed or scheduled thread
//! whose value was demanded, run on the demanding thread's stack), *determined* (its
//! thunk returned, or it was terminated). The runtime refines *evaluating* into
//! [`State::Ready`], [`State::Running`] and [`State::Blocked`], which is what its scheduler
//! needs; [`State::paper`] maps back.
//!
//! Suspension is not a state but a flag beside it (a suspended thread keeps its state and
//! is not run until resumed), so it is not in this table.
//!
//! # Invariants
//!
//! - [`State::on`] is the table of legal transitions; the runtime's transitions of a
//!   thread's state word (`crate::word`) follow it (a host test there checks each against
//!   it), by compare-and-swap.
//! - [`State::Determined`] is final: no event leaves it.

/// The state of a thread, as the runtime tracks it. (A one-byte tag, so that the thread
/// controller's tests of a state are one comparison.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Created with `delay`: runs only when its value is demanded (or it is scheduled).
    Delayed,
    /// On a virtual processor's ready queue; no TCB or stack yet.
    Scheduled,
    /// Evaluating, with a TCB, waiting on a ready queue to run again.
    Ready,
    /// Evaluating, running on a virtual processor now.
    Running,
    /// Evaluating, blocked (parked) until another thread wakes it.
    Blocked,
    /// Run by the thread that demanded its value, on that thread's stack.
    Absorbed,
    /// Finished: with a value, or terminated without one.
    Determined(End),
}

/// How a determined thread ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum End {
    /// Its thunk returned a value.
    Value,
    /// It was terminated; it has no value.
    Terminated,
}

/// The paper's five states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paper {
    /// Runs only if demanded.
    Delayed,
    /// Scheduled on a virtual processor, not yet given storage.
    Scheduled,
    /// Started: owns a TCB and stack.
    Evaluating,
    /// Running on its demander's stack.
    Absorbed,
    /// Finished.
    Determined,
}

/// What happens to a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A delayed thread is put on a ready queue (`Thread::schedule`).
    Schedule,
    /// A virtual processor takes a scheduled thread and gives it a TCB.
    Start,
    /// A thread demands the value of a delayed or scheduled thread and runs it itself.
    Absorb,
    /// A running thread gives up its processor but stays runnable (yield, migration,
    /// self-suspension).
    Preempt,
    /// A virtual processor takes a ready thread and runs it again.
    Dispatch,
    /// A running (or absorbed) thread parks.
    Block,
    /// A parked thread is woken.
    Unblock,
    /// The thunk returned.
    Finish,
    /// The thread is terminated: at once if it has not started, or at a checkpoint.
    Terminate,
}

/// A transition the table does not allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Illegal {
    /// The state the thread was in.
    pub from: State,
    /// What was asked of it.
    pub event: Event,
}

impl State {
    /// The state after `event`, or [`Illegal`].
    ///
    /// `Terminate` is legal from every state but `Determined`: an unstarted thread
    /// becomes determined at once; an evaluating one is terminated by the runtime when it
    /// reaches a checkpoint, which is when this transition is applied.
    pub fn on(self, event: Event) -> Result<State, Illegal> {
        use Event as E;
        use State as S;
        let next = match (self, event) {
            (S::Delayed, E::Schedule) => S::Scheduled,
            (S::Scheduled, E::Start) => S::Running,
            (S::Delayed | S::Scheduled, E::Absorb) => S::Absorbed,
            (S::Running | S::Absorbed, E::Preempt) => S::Ready,
            (S::Ready, E::Dispatch) => S::Running,
            (S::Running | S::Absorbed, E::Block) => S::Blocked,
            (S::Blocked, E::Unblock) => S::Ready,
            (S::Running | S::Absorbed, E::Finish) => S::Determined(End::Value),
            (S::Determined(_), E::Terminate) => return Err(Illegal { from: self, event }),
            (_, E::Terminate) => S::Determined(End::Terminated),
            _ => return Err(Illegal { from: self, event }),
        };
        Ok(next)
    }

    /// The paper's name for this state. `absorbed` says whether the thread started by
    /// absorption (it stays absorbed, in the paper's sense, until it is determined).
    pub fn paper(self, absorbed: bool) -> Paper {
        match self {
            State::Delayed => Paper::Delayed,
            State::Scheduled => Paper::Scheduled,
            State::Determined(_) => Paper::Determined,
            State::Absorbed => Paper::Absorbed,
            State::Ready | State::Running | State::Blocked if absorbed => Paper::Absorbed,
            State::Ready | State::Running | State::Blocked => Paper::Evaluating,
        }
    }

    /// Whether the thread has a TCB of its own or borrowed (it has started).
    pub fn started(self) -> bool {
        matches!(
            self,
            State::Ready | State::Running | State::Blocked | State::Absorbed
        )
    }

    /// Whether the thread has finished.
    pub fn determined(self) -> bool {
        matches!(self, State::Determined(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATES: [State; 8] = [
        State::Delayed,
        State::Scheduled,
        State::Ready,
        State::Running,
        State::Blocked,
        State::Absorbed,
        State::Determined(End::Value),
        State::Determined(End::Terminated),
    ];
    const EVENTS: [Event; 9] = [
        Event::Schedule,
        Event::Start,
        Event::Absorb,
        Event::Preempt,
        Event::Dispatch,
        Event::Block,
        Event::Unblock,
        Event::Finish,
        Event::Terminate,
    ];

    #[test]
    fn the_whole_table() {
        use State as S;
        let legal: &[(State, Event, State)] = &[
            (S::Delayed, Event::Schedule, S::Scheduled),
            (S::Scheduled, Event::Start, S::Running),
            (S::Delayed, Event::Absorb, S::Absorbed),
            (S::Scheduled, Event::Absorb, S::Absorbed),
            (S::Running, Event::Preempt, S::Ready),
            (S::Absorbed, Event::Preempt, S::Ready),
            (S::Ready, Event::Dispatch, S::Running),
            (S::Running, Event::Block, S::Blocked),
            (S::Absorbed, Event::Block, S::Blocked),
            (S::Blocked, Event::Unblock, S::Ready),
            (S::Running, Event::Finish, S::Determined(End::Value)),
            (S::Absorbed, Event::Finish, S::Determined(End::Value)),
        ];
        for from in STATES {
            for event in EVENTS {
                let got = from.on(event);
                let want = if let Some(&(_, _, to)) =
                    legal.iter().find(|(f, e, _)| *f == from && *e == event)
                {
                    Ok(to)
                } else if event == Event::Terminate && !from.determined() {
                    Ok(S::Determined(End::Terminated))
                } else {
                    Err(Illegal { from, event })
                };
                assert_eq!(got, want, "{from:?} on {event:?}");
            }
        }
    }

    #[test]
    fn determined_is_final() {
        for end in [End::Value, End::Terminated] {
            for event in EVENTS {
                assert!(State::Determined(end).on(event).is_err());
            }
        }
    }

    #[test]
    fn paper_names() {
        assert_eq!(State::Delayed.paper(false), Paper::Delayed);
        assert_eq!(State::Scheduled.paper(false), Paper::Scheduled);
        assert_eq!(State::Running.paper(false), Paper::Evaluating);
        assert_eq!(State::Blocked.paper(false), Paper::Evaluating);
        assert_eq!(State::Blocked.paper(true), Paper::Absorbed);
        assert_eq!(State::Absorbed.paper(true), Paper::Absorbed);
        assert_eq!(
            State::Determined(End::Terminated).paper(true),
            Paper::Determined
        );
    }
}
