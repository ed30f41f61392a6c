//! Property test of the dispatcher against a model: a plain list of handlers, sorted and
//! filtered by hand at every raise.
//!
//! Random installs (with the owner's guard, stacked guards, ranks, closures that abort),
//! removals (by their installer, by another task, of the primary with and without the
//! owner's leave), restorations of the primary, and raises. After every step the real
//! [`Event`] and the model agree on the result or error, and on every raise on the
//! result, which handlers ran and in what order, which aborted, and whether the default
//! answered.

use super::event::*;
use alloc::vec::Vec;
use baton_abi::Error;
use proptest::prelude::*;

type Log = Vec<u64>;

fn handler(log: &mut Log, b: Binding, a: &u64) -> Option<u64> {
    log.push(b.closure);
    if b.closure.is_multiple_of(7) {
        return None;
    }
    Some(b.closure.wrapping_mul(31) ^ a)
}

fn default(log: &mut Log, a: &u64) -> u64 {
    log.push(u64::MAX);
    a.wrapping_add(17)
}

fn bit(word: u64, a: &u64) -> bool {
    a & word != 0
}

/// Denies claim 0; claims 20 to 39 get the key `claim % 4` (the event's key is
/// `arg % 4`); other claims above 8 get the guard `arg & claim != 0`.
fn authorize(r: &Request) -> Decision<u64> {
    match r.claim {
        0 => Decision::Deny,
        c @ 20..=39 => Decision::Allow {
            guard: None,
            key: Some(c % 4),
            budget: 0,
        },
        c if c > 8 => Decision::Allow {
            guard: Some(Guard { test: bit, word: c }),
            key: None,
            budget: 0,
        },
        _ => Decision::Allow {
            guard: None,
            key: None,
            budget: 0,
        },
    }
}

fn combine(acc: u64, r: u64) -> u64 {
    acc.wrapping_mul(3).wrapping_add(r)
}

#[derive(Clone, Debug)]
enum Op {
    Install {
        task: u64,
        claim: u64,
        rank: i32,
        closure: u64,
        guard: Option<u64>,
    },
    Remove {
        pick: usize,
        task: Option<u64>,
    },
    RemovePrimary {
        task: u64,
    },
    Restore,
    Raise(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..4u64, 0..40u64, -2..3i32, 1..50u64, proptest::option::of(1..16u64))
            .prop_map(|(task, claim, rank, closure, guard)| Op::Install { task, claim, rank, closure, guard }),
        1 => (0..12usize, proptest::option::of(1..4u64)).prop_map(|(pick, task)| Op::Remove { pick, task }),
        1 => (1..4u64).prop_map(|task| Op::RemovePrimary { task }),
        1 => Just(Op::Restore),
        4 => (0..64u64).prop_map(Op::Raise),
    ]
}

#[derive(Clone, Debug)]
struct MH {
    id: u32,
    rank: i32,
    task: Option<u64>,
    closure: Option<u64>,
    guards: Vec<u64>,
    key: Option<u64>,
}

const LIMIT: usize = 6;

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn dispatcher_matches_model(with_combiner: bool, primary: bool, ops in proptest::collection::vec(op(), 1..60)) {
        let owner = Owner { authorize, may_remove_primary: |i| i.task == 1 };
        let mut e: Event<Log, u64, u64> =
            Event::keyed("P.E", owner, default, with_combiner.then_some(combine as Combiner<u64>), primary, LIMIT, Some(|a: &u64| a % 4)).unwrap();
        let mut model: Vec<MH> = Vec::new();
        if primary {
            model.push(MH { id: 0, rank: 0, task: None, closure: None, guards: Vec::new(), key: None });
        }
        let mut next_id = 1;
        for o in ops {
            match o {
                Op::Install { task, claim, rank, closure, guard } => {
                    let installer = Installer { task, domain: 0, builtin: true };
                    let req = Request { installer, claim, rank, mode: Mode::Synchronous };
                    let extra: Vec<Guard<u64>> = guard.iter().map(|w| Guard { test: bit, word: *w }).collect();
                    let got = e.install(&req, handler, closure, &extra);
                    let want = if model.len() >= LIMIT {
                        Err(Error::NoSpace)
                    } else if claim == 0 {
                        Err(Error::Denied)
                    } else {
                        let mut guards: Vec<u64> = Vec::new();
                        let key = (20..40).contains(&claim).then_some(claim % 4);
                        if claim > 8 && key.is_none() { guards.push(claim); }
                        guards.extend(guard);
                        let id = next_id;
                        next_id += 1;
                        // Sorted by rank; among equal ranks after those already there.
                        let at = model.iter().position(|h| h.rank > rank).unwrap_or(model.len());
                        model.insert(at, MH { id, rank, task: Some(task), closure: Some(closure), guards, key });
                        Ok(HandlerId(id))
                    };
                    prop_assert_eq!(got, want);
                }
                Op::Remove { pick, task } => {
                    let Some(h) = model.iter().filter(|h| h.id != 0).nth(pick).cloned() else { continue };
                    let who = task.map(|t| Installer { task: t, domain: 0, builtin: true });
                    let got = e.remove(HandlerId(h.id), who.as_ref());
                    let want = match task {
                        Some(t) if Some(t) != h.task => Err(Error::Denied),
                        _ => {
                            model.retain(|m| m.id != h.id);
                            Ok(())
                        }
                    };
                    prop_assert_eq!(got, want);
                }
                Op::RemovePrimary { task } => {
                    let who = Installer { task, domain: 0, builtin: true };
                    let got = e.remove(PRIMARY, Some(&who));
                    let want = if !model.iter().any(|h| h.id == 0) {
                        Err(Error::NotFound)
                    } else if task != 1 {
                        Err(Error::Denied)
                    } else {
                        model.retain(|m| m.id != 0);
                        Ok(())
                    };
                    prop_assert_eq!(got, want);
                }
                Op::Restore => {
                    let got = e.restore_primary();
                    let want = if model.iter().any(|h| h.id == 0) {
                        Err(Error::InvalidArgument)
                    } else if model.len() >= LIMIT {
                        Err(Error::NoSpace)
                    } else {
                        let at = model.iter().position(|h| h.rank >= 0).unwrap_or(model.len());
                        model.insert(at, MH { id: 0, rank: 0, task: None, closure: None, guards: Vec::new(), key: None });
                        Ok(())
                    };
                    prop_assert_eq!(got, want);
                }
                Op::Raise(arg) => {
                    let mut log = Log::new();
                    let r = e.raise(&mut log, &arg);
                    let mut want_log = Vec::new();
                    let mut acc: Option<u64> = None;
                    let mut ran = 0;
                    let mut aborted = 0u32;
                    for (i, h) in model.iter().enumerate() {
                        if h.key.is_some_and(|k| k != arg % 4) { continue; }
                        if !h.guards.iter().all(|g| arg & g != 0) { continue; }
                        ran += 1;
                        let res = match h.closure {
                            None => { want_log.push(u64::MAX); Some(arg.wrapping_add(17)) }
                            Some(c) => {
                                want_log.push(c);
                                (!c.is_multiple_of(7)).then(|| c.wrapping_mul(31) ^ arg)
                            }
                        };
                        match res {
                            Some(v) => acc = Some(match acc { Some(a) if with_combiner => combine(a, v), _ => v }),
                            None => aborted |= 1 << i,
                        }
                    }
                    let (result, defaulted) = match acc {
                        Some(v) => (v, false),
                        None => { want_log.push(u64::MAX); (arg.wrapping_add(17), true) }
                    };
                    prop_assert_eq!(log, want_log);
                    prop_assert_eq!(r, Raised { result, ran, aborted, defaulted, deferred: 0 });
                    let direct = model.len() == 1 && model[0].guards.is_empty();
                    prop_assert_eq!(e.is_direct(), direct);
                }
            }
            let ids: Vec<u32> = e.handler_ids().map(|h| h.0).collect();
            let want: Vec<u32> = model.iter().map(|h| h.id).collect();
            prop_assert_eq!(ids, want);
        }
    }
}
