//! Events, handlers, guards and the dispatcher (SPIN, section 3.2).
//!
//! An [`Event`] is a typed procedure: raising it with arguments `A` calls its handlers and
//! yields one result `R`. Its **owner** (the module that exports the procedure, its default
//! implementation) decides every installation: [`Owner::authorize`] denies it, or allows
//! it and may attach a guard and a bound on the handler's running time. A guard is a
//! predicate on the event's arguments, evaluated before the handler; the installer may
//! stack guards of its own after the owner's. A handler is a procedure of the event's type
//! with the **closure** word it was installed with, so one procedure serves several
//! contexts.
//!
//! Raising runs the handlers synchronously, in order of their rank (lower first; equal
//! ranks in installation order), each behind its guards. Their results are folded by the
//! event's **combiner** (by default the last result wins, the paper's procedure-call
//! semantics). A handler may **abort** (it ran out of its budget, trapped, touched memory
//! not its own): its result is left out, its position is reported in [`Raised::aborted`]
//! so the kernel can remove it and tell its installer, and when no handler produced a
//! result the **default implementation** runs — so an event always has an answer.
//!
//! An event may have a **key** (`key_of`, a function of its arguments; for
//! `Trap.SystemCall`, the calling task and the call number). The owner may then give an
//! installation a key instead of (or besides) a guard: the handler sees only raises whose
//! key is equal. That is a guard of the one most common form — "this instance of the
//! event" — that the dispatcher evaluates itself, with one compare and no call, so one
//! keyed handler is still a direct call, and many are one compare each.
//!
//! The **primary handler** is the default implementation installed as a handler (rank 0,
//! no guard). An event may start with or without it; the owner decides whether an
//! installer may remove it ([`Owner::may_remove_primary`]), after which a new handler
//! replaces it. The default still answers an event no handler answered.
//!
//! An **asynchronous** handler (SPIN's handler constraint: it runs in a thread of its own,
//! isolating the raiser from its latency) is allowed only on an event that says it may
//! have them ([`Event::allow_asynchronous`]; elsewhere the request is refused with
//! [`Error::NotSupported`]). A raise does not run it: when its key and guards hold, its
//! position is reported in [`Raised::deferred`], and the kernel runs it later
//! ([`Event::proc_of`], by id, so a handler removed meanwhile is not run). Its result is
//! not part of the raise's.
//!
//! # Invariants
//! - `handlers` is sorted by `(rank, id)`, holds at most `limit` entries, and ids are
//!   never reused within an event.
//! - `single` is `Some` exactly when `handlers` holds one entry and it has no guard; it is
//!   then a copy of that entry's procedure and key, which [`Event::raise`] calls directly
//!   (after one compare of the key, if it has one).
//! - Raising allocates nothing; an installation allocates (fallibly) only when the list
//!   grows past its capacity.

use alloc::vec::Vec;
use baton_abi::Error;

/// Most guards one handler may carry (the owner's and the installer's).
pub const MAX_GUARDS: usize = 4;

/// Most handlers an event may have (positions fit [`Raised::aborted`]'s 32 bits).
pub const MAX_HANDLERS: usize = 32;

/// What a handler is called with besides the event's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The closure word given at installation.
    pub closure: u64,
    /// The bound the owner set on the handler's running time (0 = the kernel's default):
    /// for an interpreted extension, the fuel of one invocation.
    pub budget: u64,
}

/// A handler's procedure: `None` when it aborted.
pub type HandlerFn<C, A, R> = fn(&mut C, Binding, &A) -> Option<R>;

/// The default implementation: trusted, it always answers.
pub type DefaultFn<C, A, R> = fn(&mut C, &A) -> R;

/// A guard's predicate: its word and the event's arguments.
pub type GuardFn<A> = fn(u64, &A) -> bool;

/// Folds one more handler result into the result so far (the first result is taken as
/// it is, so one handler's result never passes through it).
pub type Combiner<R> = fn(R, R) -> R;

/// A guard: a predicate and the word it was made with.
#[derive(Debug)]
pub struct Guard<A> {
    pub test: GuardFn<A>,
    pub word: u64,
}

// By hand: a derive would ask `A: Copy`, but only a function of `&A` is held.
impl<A> Clone for Guard<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Guard<A> {}

impl<A> Guard<A> {
    #[inline]
    fn holds(&self, args: &A) -> bool {
        (self.test)(self.word, args)
    }
}

/// Who asks to install a handler, as the owner sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Installer {
    /// The installing task's id.
    pub task: u64,
    /// The domain the handler's code comes from.
    pub domain: u64,
    /// Whether the handler is a built-in extension (Rust, trusted to terminate) rather
    /// than an interpreted one.
    pub builtin: bool,
}

/// How a handler is to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// In the raiser's thread, to completion, before the raise returns.
    Synchronous,
    /// After the raise, in a thread of its own; its result is not the raise's.
    Asynchronous,
}

/// An installation request.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub installer: Installer,
    /// What the installer asks the owner for (for `Trap.SystemCall`, the call number): the
    /// owner builds the guard from it.
    pub claim: u64,
    /// Order among the event's handlers: lower runs first.
    pub rank: i32,
    pub mode: Mode,
}

/// The owner's answer to a [`Request`].
#[derive(Debug)]
pub enum Decision<A> {
    Deny,
    Allow {
        /// A guard the owner attaches (first of the handler's guards).
        guard: Option<Guard<A>>,
        /// The key the handler is for (the event must have `key_of`), if any.
        key: Option<u64>,
        /// A bound on the handler's running time ([`Binding::budget`]; 0 = default).
        budget: u64,
    },
}

/// An event's owner: its default implementation's policy.
pub struct Owner<A> {
    pub authorize: fn(&Request) -> Decision<A>,
    pub may_remove_primary: fn(&Installer) -> bool,
}

/// A handler's identity within its event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HandlerId(pub u32);

/// The primary handler's id.
pub const PRIMARY: HandlerId = HandlerId(0);

enum Run<C, A, R> {
    Primary,
    Proc(HandlerFn<C, A, R>, Binding),
}

impl<C, A, R> Clone for Run<C, A, R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C, A, R> Copy for Run<C, A, R> {}

/// One installed handler.
struct Installed<C, A, R> {
    id: HandlerId,
    key: Option<u64>,
    rank: i32,
    installer: Option<Installer>,
    run: Run<C, A, R>,
    guards: [Option<Guard<A>>; MAX_GUARDS],
    mode: Mode,
}

impl<C, A, R> Installed<C, A, R> {
    fn unguarded(&self) -> bool {
        self.guards.iter().all(Option::is_none)
    }
}

/// What a raise gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raised<R> {
    pub result: R,
    /// Handlers whose guards held and that ran (aborted ones included).
    pub ran: u32,
    /// Positions (in [`Event::handler_ids`] order at the time of the raise) of the
    /// handlers that aborted; 0 when none did.
    pub aborted: u32,
    /// Whether the default implementation answered (no handler produced a result).
    pub defaulted: bool,
    /// Positions (as for `aborted`) of the asynchronous handlers whose key and guards
    /// held: the raise did not run them, the kernel is to.
    pub deferred: u32,
}

/// The one handler of an event raised by a direct call: its procedure, binding and key.
pub type Single<C, A, R> = (HandlerFn<C, A, R>, Binding, Option<u64>);

/// An event (see the module documentation).
pub struct Event<C, A, R> {
    name: &'static str,
    owner: Owner<A>,
    default: DefaultFn<C, A, R>,
    combiner: Option<Combiner<R>>,
    handlers: Vec<Installed<C, A, R>>,
    key_of: Option<fn(&A) -> u64>,
    single: Option<Single<C, A, R>>,
    primary_single: bool,
    /// Whether some handler is asynchronous (a raise without one never compares modes).
    deferring: bool,
    next_id: u32,
    limit: usize,
    asynchronous: bool,
}

impl<C, A, R: Copy> Event<C, A, R> {
    /// A new event named `name` with its owner's policy and default implementation, the
    /// default installed as the primary handler when `primary`, at most `limit` handlers
    /// (clamped to [`MAX_HANDLERS`]), without a key.
    pub fn new(
        name: &'static str,
        owner: Owner<A>,
        default: DefaultFn<C, A, R>,
        combiner: Option<Combiner<R>>,
        primary: bool,
        limit: usize,
    ) -> Result<Self, Error> {
        Self::keyed(name, owner, default, combiner, primary, limit, None)
    }

    /// As [`Event::new`], with the key function `key_of`.
    pub fn keyed(
        name: &'static str,
        owner: Owner<A>,
        default: DefaultFn<C, A, R>,
        combiner: Option<Combiner<R>>,
        primary: bool,
        limit: usize,
        key_of: Option<fn(&A) -> u64>,
    ) -> Result<Self, Error> {
        let limit = limit.clamp(1, MAX_HANDLERS);
        let mut handlers = Vec::new();
        handlers.try_reserve(limit).map_err(|_| Error::NoMemory)?;
        if primary {
            handlers.push(Installed {
                id: PRIMARY,
                key: None,
                rank: 0,
                installer: None,
                run: Run::Primary,
                guards: [const { None }; MAX_GUARDS],
                mode: Mode::Synchronous,
            });
        }
        let mut e = Event {
            name,
            owner,
            default,
            combiner,
            handlers,
            key_of,
            single: None,
            primary_single: false,
            deferring: false,
            next_id: 1,
            limit,
            asynchronous: false,
        };
        e.refresh();
        Ok(e)
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Lets installers ask for asynchronous handlers (the owner still decides each one).
    pub fn allow_asynchronous(mut self) -> Self {
        self.asynchronous = true;
        self
    }

    /// Installs handler `proc_` with `closure` after the owner allowed `req`, with the
    /// installer's own `guards` stacked after the owner's. `Denied` when the owner refuses,
    /// `NotSupported` for an asynchronous handler on an event that has none, `TooLarge` for
    /// too many guards,
    /// `NoSpace` at the event's limit.
    pub fn install(
        &mut self,
        req: &Request,
        proc_: HandlerFn<C, A, R>,
        closure: u64,
        guards: &[Guard<A>],
    ) -> Result<HandlerId, Error> {
        if req.mode == Mode::Asynchronous && !self.asynchronous {
            return Err(Error::NotSupported);
        }
        if self.handlers.len() >= self.limit {
            return Err(Error::NoSpace);
        }
        let Decision::Allow { guard, key, budget } = (self.owner.authorize)(req) else {
            return Err(Error::Denied);
        };
        if key.is_some() && self.key_of.is_none() {
            return Err(Error::InvalidArgument);
        }
        let mut all: [Option<Guard<A>>; MAX_GUARDS] = [const { None }; MAX_GUARDS];
        for (n, g) in guard.iter().chain(guards.iter()).enumerate() {
            let slot = all.get_mut(n).ok_or(Error::TooLarge)?;
            *slot = Some(*g);
        }
        let id = HandlerId(self.next_id);
        self.next_id = self.next_id.checked_add(1).ok_or(Error::NoSpace)?;
        let at = self
            .handlers
            .iter()
            .position(|h| h.rank > req.rank)
            .unwrap_or(self.handlers.len());
        self.handlers.try_reserve(1).map_err(|_| Error::NoMemory)?;
        self.handlers.insert(
            at,
            Installed {
                id,
                key,
                rank: req.rank,
                installer: Some(req.installer),
                run: Run::Proc(proc_, Binding { closure, budget }),
                guards: all,
                mode: req.mode,
            },
        );
        self.refresh();
        Ok(id)
    }

    /// Removes handler `id`. The primary handler goes only when the owner lets
    /// `installer` remove it (`Denied` otherwise); another handler only by the task that
    /// installed it (`Denied`), or by the kernel (`installer` `None`). `NotFound` for no
    /// such handler.
    pub fn remove(&mut self, id: HandlerId, installer: Option<&Installer>) -> Result<(), Error> {
        let at = self
            .handlers
            .iter()
            .position(|h| h.id == id)
            .ok_or(Error::NotFound)?;
        let h = self.handlers.get(at).ok_or(Error::NotFound)?;
        match (h.installer, installer) {
            (_, None) => {}
            (None, Some(who)) => {
                if !(self.owner.may_remove_primary)(who) {
                    return Err(Error::Denied);
                }
            }
            (Some(by), Some(who)) => {
                if by.task != who.task {
                    return Err(Error::Denied);
                }
            }
        }
        self.handlers.remove(at);
        self.refresh();
        Ok(())
    }

    /// Puts the primary handler back (first among rank 0). `InvalidArgument` if it is
    /// there already.
    pub fn restore_primary(&mut self) -> Result<(), Error> {
        if self.handlers.iter().any(|h| h.id == PRIMARY) {
            return Err(Error::InvalidArgument);
        }
        if self.handlers.len() >= self.limit {
            return Err(Error::NoSpace);
        }
        let at = self
            .handlers
            .iter()
            .position(|h| h.rank >= 0)
            .unwrap_or(self.handlers.len());
        self.handlers.insert(
            at,
            Installed {
                id: PRIMARY,
                key: None,
                rank: 0,
                installer: None,
                run: Run::Primary,
                guards: [const { None }; MAX_GUARDS],
                mode: Mode::Synchronous,
            },
        );
        self.refresh();
        Ok(())
    }

    /// Removes every handler `pred` picks (by installer), the kernel's cleanup when a task
    /// or a domain goes; how many.
    pub fn remove_where(&mut self, mut pred: impl FnMut(&Installer) -> bool) -> usize {
        let before = self.handlers.len();
        self.handlers
            .retain(|h| !h.installer.as_ref().is_some_and(&mut pred));
        self.refresh();
        before - self.handlers.len()
    }

    /// The handlers' ids in the order they run.
    pub fn handler_ids(&self) -> impl Iterator<Item = HandlerId> + '_ {
        self.handlers.iter().map(|h| h.id)
    }

    /// The installer of the handler at `position` (as in [`Raised::aborted`]).
    pub fn installer_at(&self, position: usize) -> Option<(HandlerId, Option<Installer>)> {
        self.handlers.get(position).map(|h| (h.id, h.installer))
    }

    /// The procedure and binding of handler `id` (not the primary's): how the kernel runs
    /// a deferred asynchronous handler, if it is still installed.
    pub fn proc_of(&self, id: HandlerId) -> Option<(HandlerFn<C, A, R>, Binding)> {
        self.handlers
            .iter()
            .find(|h| h.id == id)
            .and_then(|h| match h.run {
                Run::Proc(f, b) => Some((f, b)),
                Run::Primary => None,
            })
    }

    /// The closure of the handler `id`.
    pub fn binding(&self, id: HandlerId) -> Option<Binding> {
        self.handlers
            .iter()
            .find(|h| h.id == id)
            .and_then(|h| match h.run {
                Run::Proc(_, b) => Some(b),
                Run::Primary => None,
            })
    }

    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// Whether a raise is one direct call (one handler, no guard).
    pub fn is_direct(&self) -> bool {
        self.single.is_some() || self.primary_single
    }

    /// The one handler of a direct raise (see [`Event::is_direct`]; `None` otherwise): its
    /// procedure, binding and key, for a raiser that compares the key itself (one compare
    /// instead of a call of the event's key function) and calls the procedure directly.
    /// The raiser must then do what [`Event::raise`] does for this case: the default when
    /// the key differs, the default and the handler's removal when it aborts (`None`).
    #[inline(always)]
    pub fn single(&self) -> Option<Single<C, A, R>> {
        self.single
    }

    fn refresh(&mut self) {
        self.single = None;
        self.primary_single = false;
        self.deferring = self.handlers.iter().any(|h| h.mode == Mode::Asynchronous);
        if let [only] = self.handlers.as_slice() {
            if only.unguarded() && only.mode == Mode::Synchronous {
                match only.run {
                    Run::Proc(f, b) => self.single = Some((f, b, only.key)),
                    Run::Primary => self.primary_single = true,
                }
            }
        }
    }

    /// Raises the event: one handler and no guard is a direct call; otherwise see the
    /// module documentation. Always inlined, so that the one-handler case is the call
    /// itself in the raiser (out of line, its frame and its result written through memory
    /// cost a system call added by an extension some 20 instructions); the general raise
    /// stays out of line.
    #[inline(always)]
    pub fn raise(&self, ctx: &mut C, args: &A) -> Raised<R> {
        if let Some((f, b, key)) = self.single {
            if let (Some(k), Some(key_of)) = (key, self.key_of) {
                if key_of(args) != k {
                    return Raised {
                        result: (self.default)(ctx, args),
                        ran: 0,
                        aborted: 0,
                        defaulted: true,
                        deferred: 0,
                    };
                }
            }
            if let Some(result) = f(ctx, b, args) {
                return Raised {
                    result,
                    ran: 1,
                    aborted: 0,
                    defaulted: false,
                    deferred: 0,
                };
            }
            return Raised {
                result: (self.default)(ctx, args),
                ran: 1,
                aborted: 1,
                defaulted: true,
                deferred: 0,
            };
        }
        if self.primary_single {
            return Raised {
                result: (self.default)(ctx, args),
                ran: 1,
                aborted: 0,
                defaulted: false,
                deferred: 0,
            };
        }
        self.raise_general(ctx, args)
    }

    #[inline(never)]
    fn raise_general(&self, ctx: &mut C, args: &A) -> Raised<R> {
        if self.deferring {
            self.raise_each::<true>(ctx, args)
        } else {
            self.raise_each::<false>(ctx, args)
        }
    }

    /// The general raise, with (`DEFERRING`) or without a look at each handler's mode.
    #[inline(always)]
    fn raise_each<const DEFERRING: bool>(&self, ctx: &mut C, args: &A) -> Raised<R> {
        let mut acc: Option<R> = None;
        let mut ran = 0;
        let mut aborted = 0u32;
        let mut deferred = 0u32;
        let key = self.key_of.map(|f| f(args));
        for (i, h) in self.handlers.iter().enumerate() {
            if h.key.is_some() && h.key != key {
                continue;
            }
            if !h.guards.iter().flatten().all(|g| g.holds(args)) {
                continue;
            }
            if DEFERRING && h.mode == Mode::Asynchronous {
                deferred |= 1u32.checked_shl(i as u32).unwrap_or(0);
                continue;
            }
            ran += 1;
            let r = match h.run {
                Run::Primary => Some((self.default)(ctx, args)),
                Run::Proc(f, b) => f(ctx, b, args),
            };
            match r {
                Some(r) => {
                    acc = Some(match (self.combiner, acc) {
                        (Some(c), Some(a)) => c(a, r),
                        _ => r,
                    })
                }
                None => aborted |= 1u32.checked_shl(i as u32).unwrap_or(0),
            }
        }
        match acc {
            Some(result) => Raised {
                result,
                ran,
                aborted,
                defaulted: false,
                deferred,
            },
            None => Raised {
                result: (self.default)(ctx, args),
                ran,
                aborted,
                defaulted: true,
                deferred,
            },
        }
    }
}
