//! A thread's state word: its state, whether it is on a ready queue and with which entry
//! (the ticket), whether it is suspended, a pending wake-up, its virtual processor, and a
//! pin, in one 64-bit word changed by compare-and-swap.
//!
//! The thread controller's common transitions (a virtual processor claiming a popped
//! entry, a thread yielding, parking, being woken, migrating) are one compare-and-swap of
//! this word each, with no lock. The thread's lock (`rt::Core::ctl`) still guards what
//! goes with the word in the rarer operations (its wait list, signals, the terminate
//! request): those take the lock *and* change the word by compare-and-swap, so a lock
//! holder sees the word change only by the lock-free transitions, none of which makes a
//! thread determined (only lock holders do), so a waiter pushed under the lock is never
//! missed.
//!
//! Each transition is a pure function from a word to the new word (and what the caller
//! needs to know), applied by [`update`]'s compare-and-swap loop; the loom tests
//! (`loom_tickets.rs`) run the same functions through the same loop on `loom`'s atomics.
//!
//! The ready queues hold (thread, ticket) entries and are never searched: an entry is
//! *live* only if the thread is queued and the entry's ticket is the thread's latest; an
//! entry made stale (the thread was absorbed, terminated, suspended, or claimed another
//! way) is dropped when popped. Exactly one claim can win per enqueue.
//!
//! **The pin.** A signal pushes a continuation onto the saved context of a ready or
//! blocked thread (`rt::signal`): it pins the word first (only from those states), and a
//! claim that finds the word pinned waits until it is unpinned, so no processor resumes
//! the context while it is being changed.
//!
//! # Layout
//!
//! | bits | what |
//! |---|---|
//! | 0–2 | the state ([`State`], determined split by how it ended) |
//! | 3 | queued: on a ready queue with a live entry |
//! | 4 | suspended |
//! | 5 | a wake-up (token) is pending |
//! | 6 | pinned |
//! | 7 | absorbed: it started by absorption (the paper's *absorbed* until determined) |
//! | 8 | waited for: a thread is (or was) on its wait list, so its end takes its lock |
//! | 16–31 | the virtual processor it was placed on or last ran on |
//! | 32–63 | the ticket of its latest entry |

use crate::state::{End, State};

/// The state's bits.
const STATE: u64 = 0b111;
/// On a ready queue, with a live entry.
const QUEUED: u64 = 1 << 3;
/// Suspended.
const SUSPENDED: u64 = 1 << 4;
/// A wake-up is pending.
const TOKEN: u64 = 1 << 5;
/// Pinned by a signal changing its saved context.
const PINNED: u64 = 1 << 6;
/// It started by absorption.
const ABSORBED: u64 = 1 << 7;
/// Someone waits (or waited) for it to be determined.
const WAITERS: u64 = 1 << 8;
/// Where the virtual processor's number starts.
const VP_SHIFT: u32 = 16;
/// The virtual processor's bits (after the shift).
const VP_MASK: u64 = 0xffff;
/// Where the ticket starts.
const TICKET_SHIFT: u32 = 32;

/// A thread's state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word(pub u64);

/// The most virtual processors a word can name.
pub const MAX_VPS: usize = VP_MASK as usize + 1;

/// A transition that does not apply to the word as it is (the word stays).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused;

/// What a claim of a popped entry found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The entry was stale (or the thread suspended, or in no runnable state): drop it.
    Stale,
    /// A scheduled thread: start it.
    Start,
    /// A ready thread: resume its TCB.
    Resume,
}

impl Word {
    /// A thread in `state`, placed on virtual processor `vp`, not queued.
    pub const fn new(state: State, vp: usize) -> Word {
        Word(encode(state) | ((vp as u64 & VP_MASK) << VP_SHIFT))
    }

    /// The state.
    #[inline]
    pub fn state(self) -> State {
        match self.0 & STATE {
            0 => State::Delayed,
            1 => State::Scheduled,
            2 => State::Ready,
            3 => State::Running,
            4 => State::Blocked,
            5 => State::Absorbed,
            6 => State::Determined(End::Value),
            _ => State::Determined(End::Terminated),
        }
    }

    /// The same word in state `s`.
    #[inline]
    #[must_use]
    pub fn with_state(self, s: State) -> Word {
        Word((self.0 & !STATE) | encode(s))
    }

    /// Whether it has a live entry.
    #[inline]
    pub fn queued(self) -> bool {
        self.0 & QUEUED != 0
    }

    /// The ticket of its latest entry.
    #[inline]
    pub fn ticket(self) -> u32 {
        (self.0 >> TICKET_SHIFT) as u32
    }

    /// Whether entry `ticket` is live.
    #[inline]
    pub fn is_live(self, ticket: u32) -> bool {
        // One exclusive-or and one mask: the queued bit set and the ticket equal.
        const MASK: u64 = (!0 << TICKET_SHIFT) | QUEUED;
        (self.0 ^ ((u64::from(ticket) << TICKET_SHIFT) | QUEUED)) & MASK == 0
    }

    /// Queued with a new ticket (any older entry stale from now on).
    #[inline]
    #[must_use]
    pub fn enqueue(self) -> Word {
        Word(self.0.wrapping_add(1 << TICKET_SHIFT) | QUEUED)
    }

    /// Not queued (every entry stale).
    #[inline]
    #[must_use]
    pub fn unqueue(self) -> Word {
        Word(self.0 & !QUEUED)
    }

    /// Whether suspended.
    #[inline]
    pub fn suspended(self) -> bool {
        self.0 & SUSPENDED != 0
    }

    /// Suspended or not.
    #[inline]
    #[must_use]
    pub fn with_suspended(self, on: bool) -> Word {
        Word(if on {
            self.0 | SUSPENDED
        } else {
            self.0 & !SUSPENDED
        })
    }

    /// Whether a wake-up is pending.
    #[inline]
    pub fn token(self) -> bool {
        self.0 & TOKEN != 0
    }

    /// Whether pinned.
    #[inline]
    pub fn pinned(self) -> bool {
        self.0 & PINNED != 0
    }

    /// Pinned or not.
    #[inline]
    #[must_use]
    pub fn with_pinned(self, on: bool) -> Word {
        Word(if on {
            self.0 | PINNED
        } else {
            self.0 & !PINNED
        })
    }

    /// Whether it started by absorption.
    #[inline]
    pub fn absorbed(self) -> bool {
        self.0 & ABSORBED != 0
    }

    /// Whether a thread waits (or waited) for it.
    #[inline]
    pub fn waited_for(self) -> bool {
        self.0 & WAITERS != 0
    }

    /// The virtual processor.
    #[inline]
    pub fn vp(self) -> usize {
        ((self.0 >> VP_SHIFT) & VP_MASK) as usize
    }

    /// On virtual processor `vp`.
    #[inline]
    #[must_use]
    pub fn with_vp(self, vp: usize) -> Word {
        Word((self.0 & !(VP_MASK << VP_SHIFT)) | ((vp as u64 & VP_MASK) << VP_SHIFT))
    }

    // The transitions: each gives the new word, or `Err` with what the caller needs when
    // the word is to stay as it is.

    /// A virtual processor `vp` claims the popped entry `ticket`. `Err(None)` while the
    /// word is pinned (the caller waits and tries again).
    #[inline]
    pub fn claim(self, ticket: u32, vp: usize) -> Result<(Word, Claim), Option<Claim>> {
        if !self.is_live(ticket) {
            return Err(Some(Claim::Stale));
        }
        if self.pinned() {
            return Err(None);
        }
        let w = self.unqueue();
        // Scheduled (1) starts, ready (2) resumes, both as running on `vp`; any other state,
        // or a suspended thread, only has its entry consumed. (Tested on the codes, not
        // through `state()`, to keep the claim a few instructions.)
        let code = w.0 & STATE;
        if w.suspended() || !(code == encode(State::Scheduled) || code == encode(State::Ready)) {
            return Ok((w, Claim::Stale));
        }
        let what = if code == encode(State::Scheduled) {
            Claim::Start
        } else {
            Claim::Resume
        };
        Ok((w.with_state(State::Running).with_vp(vp), what))
    }

    /// [`claim`](Self::claim) of entry `ticket` by processor `vp` in its common case, with
    /// one mask and one comparison: the word says ready, queued with that very ticket, on
    /// `vp`, neither suspended nor pinned; then the claim's new word (running on `vp`, not
    /// queued), which `claim` would give with [`Claim::Resume`]. `None` for any other word
    /// (the caller applies `claim`).
    #[inline]
    pub fn claim_ready(self, ticket: u32, vp: usize) -> Option<Word> {
        if vp > VP_MASK as usize {
            return None;
        }
        self.claim_ready_on(ticket, Word::ready_on(vp))
    }

    /// The bits of a word ready and queued on processor `vp` (which is below
    /// [`MAX_VPS`]), neither suspended nor pinned, with ticket 0: what
    /// [`claim_ready_on`](Self::claim_ready_on) compares with (a processor keeps them, so
    /// that its claims do not compute them).
    pub const fn ready_on(vp: usize) -> u64 {
        ((vp as u64 & VP_MASK) << VP_SHIFT) | QUEUED | encode(State::Ready)
    }

    /// [`claim_ready`](Self::claim_ready) with the processor's
    /// [`ready_on`](Self::ready_on) bits.
    #[inline]
    pub fn claim_ready_on(self, ticket: u32, ready_on: u64) -> Option<Word> {
        const MASK: u64 =
            (!0 << TICKET_SHIFT) | (VP_MASK << VP_SHIFT) | PINNED | SUSPENDED | QUEUED | STATE;
        if self.0 & MASK != (u64::from(ticket) << TICKET_SHIFT) | ready_on {
            return None;
        }
        // Ready (2) becomes running (3), and the queued bit goes: one subtraction.
        Some(Word(
            self.0 - QUEUED + (encode(State::Running) - encode(State::Ready)),
        ))
    }

    /// What a running thread with no live entry adds to its word to yield
    /// ([`yielded`](Self::yielded) of such a word, as one atomic addition: `rt::yield_now`
    /// uses it, since only the thread itself changes the state and the queued bit of a
    /// running thread, so nothing can change them between its test and its addition).
    pub const YIELD_RUNNING: u64 = (1 << TICKET_SHIFT) + QUEUED - 1;

    /// Whether the word is running with no live entry: [`yielded`](Self::yielded) is then
    /// the addition of [`YIELD_RUNNING`](Self::YIELD_RUNNING).
    #[inline]
    pub fn running_unqueued(self) -> bool {
        self.0 & (STATE | QUEUED) == encode(State::Running)
    }

    /// The running thread gives up its processor and stays runnable (a yield, a
    /// preemption): ready, queued with a new entry.
    #[inline]
    pub fn yielded(self) -> Word {
        self.with_state(State::Ready).enqueue()
    }

    /// The running thread parks: blocked, or, if a wake-up was pending (`self.token()`),
    /// the wake-up consumed and it goes on at once.
    #[inline]
    #[must_use]
    pub fn park(self) -> Word {
        if self.token() {
            return Word(self.0 & !TOKEN);
        }
        self.with_state(State::Blocked)
    }

    /// A wake-up: a blocked thread (`self.state()`) becomes ready and queued; any other
    /// keeps the wake-up for its next park.
    #[inline]
    #[must_use]
    pub fn unpark(self) -> Word {
        if self.state() != State::Blocked {
            return Word(self.0 | TOKEN);
        }
        self.with_state(State::Ready).enqueue()
    }

    /// A delayed thread is scheduled (queued); `Err` for any other.
    #[inline]
    pub fn schedule(self) -> Result<Word, Refused> {
        if self.state() != State::Delayed {
            return Err(Refused);
        }
        Ok(self.with_state(State::Scheduled).enqueue())
    }

    /// A demander absorbs a delayed or scheduled thread that is not suspended (on its own
    /// processor `vp`): absorbed, its entry stale; `Err` for any other.
    #[inline]
    pub fn absorb(self, vp: usize) -> Result<Word, Refused> {
        if !matches!(self.state(), State::Delayed | State::Scheduled) || self.suspended() {
            return Err(Refused);
        }
        Ok(Word(
            self.with_state(State::Absorbed).unqueue().with_vp(vp).0 | ABSORBED,
        ))
    }

    /// A thread is about to wait for this one to be determined (under the thread's lock,
    /// where it then joins the wait list): marked waited for, or `Err` if it is determined
    /// already.
    #[inline]
    pub fn wait(self) -> Result<Word, Refused> {
        if self.state().determined() {
            return Err(Refused);
        }
        Ok(Word(self.0 | WAITERS))
    }

    /// The thread is determined (`end`). If the old word was [`waited_for`](Self::waited_for),
    /// the caller takes the thread's lock to wake its waiters; otherwise no one can have
    /// joined its wait list, nor can from now on ([`wait`](Self::wait) refuses).
    #[inline]
    #[must_use]
    pub fn finish(self, end: End) -> Word {
        self.with_state(State::Determined(end))
    }

    /// A controller resumes a suspended thread: not suspended, and queued with a new
    /// entry if it is ready or scheduled with no live entry (`Ok(true)`). `Err` if it was
    /// not suspended.
    #[inline]
    pub fn resume(self) -> Result<(Word, bool), Refused> {
        if !self.suspended() {
            return Err(Refused);
        }
        let w = self.with_suspended(false);
        if matches!(w.state(), State::Ready | State::Scheduled) && !w.queued() {
            return Ok((w.enqueue(), true));
        }
        Ok((w, false))
    }

    /// A thread hands its processor `vp` straight to this one (`rt::hand_off`, the
    /// synchronous switch to a named thread): a thread parked on `vp`, with no entry, not
    /// suspended and not pinned, becomes running there without going through a queue;
    /// `Err` for any other (the caller wakes it the ordinary way, with `unpark`).
    #[inline]
    pub fn take_parked(self, vp: usize) -> Result<Word, Refused> {
        if self.0 & (STATE | QUEUED | SUSPENDED | PINNED) == encode(State::Blocked)
            && self.vp() == vp
        {
            return Ok(self.with_state(State::Running));
        }
        Err(Refused)
    }

    /// A signal switches at once to a thread ready on the signaller's processor `vp`
    /// (`rt::switch_to_target`): running, its entry stale; `Err` if it is not so.
    #[inline]
    pub fn take_ready(self, vp: usize) -> Result<Word, Refused> {
        if self.state() == State::Ready
            && self.queued()
            && !self.suspended()
            && !self.pinned()
            && self.vp() == vp
        {
            return Ok(self.unqueue().with_state(State::Running));
        }
        Err(Refused)
    }
}

/// The state's code.
const fn encode(s: State) -> u64 {
    match s {
        State::Delayed => 0,
        State::Scheduled => 1,
        State::Ready => 2,
        State::Running => 3,
        State::Blocked => 4,
        State::Absorbed => 5,
        State::Determined(End::Value) => 6,
        State::Determined(End::Terminated) => 7,
    }
}

/// A virtual processor `vp` claims the popped entry `ticket` of the thread whose word is in
/// `cell`: one compare-and-swap, or a wait (calling `relax`) while the word is pinned.
#[inline]
pub fn claim<C: Cell64>(cell: &C, ticket: u32, vp: usize, mut relax: impl FnMut()) -> Claim {
    let mut cur = cell.get();
    loop {
        match Word(cur).claim(ticket, vp) {
            Ok((new, what)) => match cell.cas(cur, new.0) {
                Ok(_) => return what,
                Err(seen) => cur = seen,
            },
            Err(Some(what)) => return what,
            Err(None) => {
                relax();
                cur = cell.get();
            }
        }
    }
}

/// A 64-bit atomic cell that [`update`] can drive (`core`'s, or `loom`'s in the tests).
pub trait Cell64 {
    /// Loads (acquire).
    fn get(&self) -> u64;
    /// Compare-and-swap (acquire-release on success, acquire on failure).
    fn cas(&self, old: u64, new: u64) -> Result<u64, u64>;
}

impl Cell64 for core::sync::atomic::AtomicU64 {
    #[inline]
    fn get(&self) -> u64 {
        self.load(core::sync::atomic::Ordering::Acquire)
    }
    #[inline]
    fn cas(&self, old: u64, new: u64) -> Result<u64, u64> {
        use core::sync::atomic::Ordering::{AcqRel, Acquire};
        self.compare_exchange(old, new, AcqRel, Acquire)
    }
}

/// Applies transition `f` to the word in `cell` by compare-and-swap, retrying while other
/// transitions change it in between: `Ok(old)` once `f`'s new word is stored over `old`,
/// or `Err(e)` when `f` says the word stays (`e` computed from the word it saw).
#[inline]
pub fn update<C: Cell64, E>(
    cell: &C,
    mut f: impl FnMut(Word) -> Result<Word, E>,
) -> Result<Word, E> {
    let mut cur = cell.get();
    loop {
        let new = f(Word(cur))?;
        match cell.cas(cur, new.0) {
            Ok(_) => return Ok(Word(cur)),
            Err(seen) => cur = seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [State; 8] = [
        State::Delayed,
        State::Scheduled,
        State::Ready,
        State::Running,
        State::Blocked,
        State::Absorbed,
        State::Determined(End::Value),
        State::Determined(End::Terminated),
    ];

    #[test]
    fn fields_are_independent() {
        for s in ALL {
            let w = Word::new(s, 65_535)
                .enqueue()
                .enqueue()
                .with_suspended(true);
            assert_eq!(w.state(), s);
            assert_eq!(w.vp(), 65_535);
            assert_eq!(w.ticket(), 2);
            assert!(w.queued() && w.suspended() && !w.token() && !w.pinned());
            let w = w
                .with_state(State::Ready)
                .unqueue()
                .with_pinned(true)
                .with_vp(3);
            assert_eq!((w.state(), w.vp(), w.ticket()), (State::Ready, 3, 2));
            assert!(!w.queued() && w.suspended() && w.pinned());
        }
        // The ticket wraps without touching the rest.
        let w = Word(Word::new(State::Ready, 7).0 | (u64::from(u32::MAX) << 32)).enqueue();
        assert_eq!((w.ticket(), w.vp(), w.state()), (0, 7, State::Ready));
    }

    #[test]
    fn a_claim_wins_once_per_enqueue() {
        let w = Word::new(State::Scheduled, 0).enqueue();
        let t = w.ticket();
        let (w2, c) = w.claim(t, 4).unwrap();
        assert_eq!(
            (c, w2.state(), w2.vp(), w2.queued()),
            (Claim::Start, State::Running, 4, false)
        );
        assert_eq!(w2.claim(t, 4), Err(Some(Claim::Stale)), "claimed already");
        // A stale ticket after a new enqueue.
        let w3 = w2.yielded();
        assert_eq!(w3.claim(t, 0), Err(Some(Claim::Stale)));
        assert_eq!(w3.claim(w3.ticket(), 0).unwrap().1, Claim::Resume);
        // Pinned: wait; suspended: the entry is consumed and nothing runs.
        assert_eq!(w3.with_pinned(true).claim(w3.ticket(), 0), Err(None));
        let (w4, c) = w3.with_suspended(true).claim(w3.ticket(), 0).unwrap();
        assert_eq!(
            (c, w4.queued(), w4.state()),
            (Claim::Stale, false, State::Ready)
        );
        // A live entry of a thread in no runnable state is consumed and dropped.
        let odd = Word::new(State::Blocked, 0).enqueue();
        assert_eq!(odd.claim(odd.ticket(), 0).unwrap().1, Claim::Stale);
    }

    #[test]
    fn park_and_unpark_keep_one_wake_up() {
        let running = Word::new(State::Running, 1);
        // Woken before it parks: the token, consumed by the park.
        let w = running.unpark();
        assert!(w.token() && w.state() == State::Running);
        let w = w.park();
        assert!(!w.token() && w.state() == State::Running);
        // Parked, then woken: ready and queued.
        let w = w.park();
        assert_eq!(w.state(), State::Blocked);
        let w = w.unpark();
        assert!(w.state() == State::Ready && w.queued() && !w.token());
    }

    #[test]
    fn the_rarer_transitions() {
        assert!(Word::new(State::Running, 0).schedule().is_err());
        let s = Word::new(State::Delayed, 2).schedule().unwrap();
        assert!(s.queued() && s.state() == State::Scheduled);
        let a = s.absorb(5).unwrap();
        assert!(!a.queued() && a.state() == State::Absorbed && a.vp() == 5 && a.absorbed());
        assert!(!s.absorbed());
        // Waiting marks it; its end keeps the mark, and then no one may wait any more.
        let w = a.wait().unwrap();
        assert!(w.waited_for() && !a.waited_for());
        let d = w.finish(End::Value);
        assert!(d.waited_for() && d.absorbed() && d.state() == State::Determined(End::Value));
        assert!(d.wait().is_err());
        assert!(s.with_suspended(true).absorb(0).is_err());
        assert!(Word::new(State::Running, 0).absorb(0).is_err());
        // Resume queues a ready thread with no live entry, once.
        let r = Word::new(State::Ready, 0).with_suspended(true);
        let (r2, queued) = r.resume().unwrap();
        assert!(queued && r2.queued() && !r2.suspended());
        assert!(r2.resume().is_err());
        let (_, queued) = Word::new(State::Blocked, 0)
            .with_suspended(true)
            .resume()
            .unwrap();
        assert!(!queued);
        // An immediate signal's switch takes only a ready, queued thread of its processor.
        let q = Word::new(State::Ready, 1).enqueue();
        assert!(q.take_ready(0).is_err());
        assert!(q.with_pinned(true).take_ready(1).is_err());
        let t = q.take_ready(1).unwrap();
        assert!(t.state() == State::Running && !t.queued());
        // A hand-off takes only a thread parked on its processor, with no entry, not
        // suspended and not pinned; the rest of the word is kept.
        let parked = Word::new(State::Running, 2).park();
        assert!(parked.take_parked(1).is_err(), "another processor's");
        assert!(parked.with_suspended(true).take_parked(2).is_err());
        assert!(parked.with_pinned(true).take_parked(2).is_err());
        assert!(
            parked.unpark().take_parked(2).is_err(),
            "woken: ready and queued"
        );
        for s in [
            State::Ready,
            State::Running,
            State::Scheduled,
            State::Delayed,
        ] {
            assert!(Word::new(s, 2).take_parked(2).is_err(), "{s:?}");
        }
        let taken = parked.take_parked(2).unwrap();
        assert!(taken.state() == State::Running && !taken.queued() && taken.vp() == 2);
        assert_eq!(taken.ticket(), parked.ticket());
    }

    /// Every transition gives the state the paper's table (`State::on`) gives.
    #[test]
    fn transitions_follow_the_state_table() {
        use crate::state::Event as E;
        let on = |s: State, e: E| s.on(e).unwrap();
        let w = |s: State| Word::new(s, 0);
        let sched = w(State::Scheduled).enqueue();
        let ready = w(State::Ready).enqueue();
        assert_eq!(
            sched.claim(sched.ticket(), 0).unwrap().0.state(),
            on(State::Scheduled, E::Start)
        );
        assert_eq!(
            ready.claim(ready.ticket(), 0).unwrap().0.state(),
            on(State::Ready, E::Dispatch)
        );
        for s in [State::Running, State::Absorbed] {
            assert_eq!(w(s).yielded().state(), on(s, E::Preempt));
            assert_eq!(w(s).park().state(), on(s, E::Block));
            assert_eq!(w(s).finish(End::Value).state(), on(s, E::Finish));
        }
        assert_eq!(
            w(State::Blocked).unpark().state(),
            on(State::Blocked, E::Unblock)
        );
        assert_eq!(
            w(State::Delayed).schedule().unwrap().state(),
            on(State::Delayed, E::Schedule)
        );
        for s in [State::Delayed, State::Scheduled] {
            assert_eq!(w(s).absorb(0).unwrap().state(), on(s, E::Absorb));
            assert_eq!(w(s).finish(End::Terminated).state(), on(s, E::Terminate));
        }
        // A hand-off is the wake-up and the dispatch in one step.
        assert_eq!(
            w(State::Blocked).take_parked(0).unwrap().state(),
            on(on(State::Blocked, E::Unblock), E::Dispatch)
        );
        assert!(w(State::Ready).take_ready(0).is_err(), "not queued");
        assert_eq!(
            ready.take_ready(0).unwrap().state(),
            on(State::Ready, E::Dispatch)
        );
    }

    #[test]
    fn update_retries_over_a_changed_word() {
        use core::sync::atomic::AtomicU64;
        let cell = AtomicU64::new(Word::new(State::Running, 0).0);
        let mut first = true;
        let old = update(&cell, |w| {
            if first {
                // Another transition gets in between the load and the swap.
                first = false;
                cell.store(w.unpark().0, core::sync::atomic::Ordering::SeqCst);
            }
            Ok::<_, ()>(w.park())
        });
        // The retry saw the token and consumed it instead of blocking.
        assert!(old.unwrap().token());
        assert_eq!(Word(cell.get()).state(), State::Running);
        assert!(!Word(cell.get()).token());
    }
}
