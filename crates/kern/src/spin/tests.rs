//! Unit tests of the dispatcher and the domains.

use super::domain::*;
use super::event::*;
use alloc::vec;
use alloc::vec::Vec;
use baton_abi::Error;

/// The context handlers write into: which closures ran, in order.
type Log = Vec<u64>;

fn handler(log: &mut Log, b: Binding, a: &u64) -> Option<u64> {
    log.push(b.closure);
    if b.closure == 666 {
        return None; // aborts
    }
    Some(b.closure + a)
}

fn default(log: &mut Log, a: &u64) -> u64 {
    log.push(0);
    1000 + a
}

fn even(word: u64, a: &u64) -> bool {
    (a & 1) == word
}

fn is(word: u64, a: &u64) -> bool {
    *a == word
}

/// Allows everything but claim 13; claims above 100 get the guard `arg == claim`.
fn authorize(r: &Request) -> Decision<u64> {
    match r.claim {
        13 => Decision::Deny,
        c if c > 100 => Decision::Allow {
            guard: Some(Guard { test: is, word: c }),
            key: None,
            budget: 7,
        },
        _ => Decision::Allow {
            guard: None,
            key: None,
            budget: 0,
        },
    }
}

fn owner() -> Owner<u64> {
    Owner {
        authorize,
        may_remove_primary: |i| i.task == 1,
    }
}

fn req(task: u64, claim: u64, rank: i32) -> Request {
    Request {
        installer: Installer {
            task,
            domain: 0,
            builtin: true,
        },
        claim,
        rank,
        mode: Mode::Synchronous,
    }
}

fn sum(acc: u64, r: u64) -> u64 {
    acc + r
}

#[test]
fn one_handler_without_guard_is_a_direct_call() {
    let mut e: Event<Log, u64, u64> = Event::new("T.E", owner(), default, None, false, 8).unwrap();
    let mut log = Log::new();
    assert_eq!(
        e.raise(&mut log, &5).result,
        1005,
        "no handler: the default answers"
    );
    assert!(e.raise(&mut log, &5).defaulted);
    let id = e.install(&req(2, 0, 0), handler, 40, &[]).unwrap();
    assert!(e.is_direct());
    log.clear();
    let r = e.raise(&mut log, &2);
    assert_eq!((r.result, r.ran, r.aborted, r.defaulted), (42, 1, 0, false));
    assert_eq!(log, vec![40]);
    // The one handler as a raiser that calls it directly sees it: its binding and no key.
    let (f, b, key) = e
        .single()
        .expect("one unguarded handler is the direct call");
    assert_eq!((b.closure, key), (40, None));
    log.clear();
    assert_eq!(
        f(&mut log, b, &2),
        Some(42),
        "the procedure is the handler's"
    );
    assert_eq!(log, vec![40]);
    // A guard makes it general.
    e.install(
        &req(2, 0, 0),
        handler,
        41,
        &[Guard {
            test: even,
            word: 0,
        }],
    )
    .unwrap();
    assert!(!e.is_direct());
    assert!(e.single().is_none(), "two handlers: no direct call");
    e.remove(id, None).unwrap();
    assert!(!e.is_direct(), "the one left has a guard");
    assert!(
        e.single().is_none(),
        "a guarded handler is not called directly"
    );
}

#[test]
fn primary_only_is_direct_and_removal_needs_the_owner() {
    let mut e: Event<Log, u64, u64> = Event::new("T.E", owner(), default, None, true, 8).unwrap();
    assert!(e.is_direct());
    let mut log = Log::new();
    assert_eq!(e.raise(&mut log, &1).result, 1001);
    assert!(!e.raise(&mut log, &1).defaulted, "the primary handler ran");
    let stranger = Installer {
        task: 2,
        domain: 0,
        builtin: true,
    };
    assert_eq!(e.remove(PRIMARY, Some(&stranger)), Err(Error::Denied));
    let allowed = Installer {
        task: 1,
        domain: 0,
        builtin: true,
    };
    // Replace: install, then remove the primary.
    e.install(&req(1, 0, 0), handler, 5, &[]).unwrap();
    e.remove(PRIMARY, Some(&allowed)).unwrap();
    assert!(e.is_direct());
    log.clear();
    assert_eq!(e.raise(&mut log, &1).result, 6);
    assert_eq!(log, vec![5]);
    e.restore_primary().unwrap();
    assert_eq!(e.restore_primary(), Err(Error::InvalidArgument));
    assert_eq!(e.len(), 2);
}

#[test]
fn asynchronous_handlers_are_deferred_not_run() {
    let mut e: Event<Log, u64, u64> = Event::new("T.E", owner(), default, Some(sum), false, 8)
        .unwrap()
        .allow_asynchronous();
    let mut a = req(2, 0, 0);
    a.mode = Mode::Asynchronous;
    let h1 = e.install(&a, handler, 7, &[]).unwrap();
    // Alone, it is no direct call: the raise defers it and the default answers.
    assert!(!e.is_direct());
    let mut log = Log::new();
    let r = e.raise(&mut log, &5);
    assert_eq!(
        (r.result, r.ran, r.deferred, r.defaulted),
        (1005, 0, 1, true)
    );
    assert_eq!(log, vec![0]);
    // Beside a synchronous handler, behind a guard: only the deferred positions whose
    // guards hold.
    let s = e.install(&req(2, 0, 1), handler, 3, &[]).unwrap();
    let mut g = req(2, 200, 2);
    g.mode = Mode::Asynchronous;
    let h2 = e.install(&g, handler, 9, &[]).unwrap();
    let mut log = Log::new();
    let r = e.raise(&mut log, &5);
    assert_eq!(
        (r.result, r.ran, r.deferred, r.defaulted),
        (8, 1, 0b001, false)
    );
    assert_eq!(log, vec![3]);
    let r = e.raise(&mut log, &200);
    assert_eq!(r.deferred, 0b101);
    let ids: Vec<_> = e.handler_ids().collect();
    assert_eq!(ids, vec![h1, s, h2]);
    // The kernel runs a deferred one later, by id; a removed one is not found.
    let (f, b) = e.proc_of(h2).unwrap();
    assert_eq!(f(&mut log, b, &200), Some(209));
    e.remove(h2, None).unwrap();
    assert!(e.proc_of(h2).is_none());
    // An event that does not allow them refuses them.
    let mut plain: Event<Log, u64, u64> =
        Event::new("T.F", owner(), default, None, false, 8).unwrap();
    assert_eq!(plain.install(&a, handler, 1, &[]), Err(Error::NotSupported));
}

#[test]
fn owner_denies_and_guards() {
    let mut e: Event<Log, u64, u64> =
        Event::new("T.E", owner(), default, Some(sum), false, 8).unwrap();
    assert_eq!(
        e.install(&req(2, 13, 0), handler, 1, &[]),
        Err(Error::Denied)
    );
    let mut r = req(2, 0, 0);
    r.mode = Mode::Asynchronous;
    assert_eq!(e.install(&r, handler, 1, &[]), Err(Error::NotSupported));
    assert!(e.is_empty());
    // The owner's guard: only arg 200.
    let h = e.install(&req(2, 200, 0), handler, 10, &[]).unwrap();
    assert_eq!(
        e.binding(h),
        Some(Binding {
            closure: 10,
            budget: 7
        })
    );
    // The owner's guard and the installer's stacked: arg 300 and even.
    e.install(
        &req(2, 300, 0),
        handler,
        20,
        &[Guard {
            test: even,
            word: 0,
        }],
    )
    .unwrap();
    let mut log = Log::new();
    assert_eq!(e.raise(&mut log, &200).result, 210);
    assert_eq!(e.raise(&mut log, &300).result, 320);
    let r = e.raise(&mut log, &301);
    assert!(r.defaulted);
    assert_eq!(r.ran, 0);
    // Too many guards.
    let g = Guard {
        test: even,
        word: 0,
    };
    assert_eq!(
        e.install(&req(2, 300, 0), handler, 1, &[g, g, g, g]),
        Err(Error::TooLarge)
    );
}

#[test]
fn order_and_combiner() {
    let mut e: Event<Log, u64, u64> =
        Event::new("T.E", owner(), default, Some(sum), true, 8).unwrap();
    e.install(&req(2, 0, 5), handler, 3, &[]).unwrap();
    e.install(&req(2, 0, -5), handler, 1, &[]).unwrap();
    e.install(&req(2, 0, 5), handler, 4, &[]).unwrap();
    e.install(&req(2, 0, 0), handler, 2, &[]).unwrap();
    let mut log = Log::new();
    let r = e.raise(&mut log, &0);
    assert_eq!(
        log,
        vec![1, 0, 2, 3, 4],
        "rank order, the primary first of rank 0, ties in installation order"
    );
    assert_eq!(r.result, 1 + 1000 + 2 + 3 + 4);
    assert_eq!(r.ran, 5);
}

#[test]
fn without_a_combiner_the_last_result_wins() {
    let mut e: Event<Log, u64, u64> = Event::new("T.E", owner(), default, None, false, 8).unwrap();
    e.install(&req(2, 0, 0), handler, 1, &[]).unwrap();
    e.install(&req(2, 0, 0), handler, 2, &[]).unwrap();
    assert_eq!(e.raise(&mut Log::new(), &0).result, 2);
}

#[test]
fn an_aborted_handler_falls_back_to_the_default_and_is_reported() {
    let mut e: Event<Log, u64, u64> =
        Event::new("T.E", owner(), default, Some(sum), false, 8).unwrap();
    let bad = e.install(&req(3, 0, 0), handler, 666, &[]).unwrap();
    let mut log = Log::new();
    let r = e.raise(&mut log, &1);
    assert_eq!((r.result, r.aborted, r.defaulted), (1001, 1, true));
    assert_eq!(e.installer_at(0).map(|x| x.0), Some(bad));
    e.install(&req(2, 0, 0), handler, 7, &[]).unwrap();
    let r = e.raise(&mut log, &1);
    assert_eq!((r.result, r.aborted, r.defaulted), (8, 1, false));
    // Only the installer (or the kernel) removes it.
    let other = Installer {
        task: 2,
        domain: 0,
        builtin: true,
    };
    assert_eq!(e.remove(bad, Some(&other)), Err(Error::Denied));
    assert_eq!(e.remove_where(|i| i.task == 3), 1);
    assert_eq!(e.remove(bad, None), Err(Error::NotFound));
}

#[test]
fn the_limit_holds() {
    let mut e: Event<Log, u64, u64> = Event::new("T.E", owner(), default, None, false, 2).unwrap();
    e.install(&req(2, 0, 0), handler, 1, &[]).unwrap();
    e.install(&req(2, 0, 0), handler, 1, &[]).unwrap();
    assert_eq!(
        e.install(&req(2, 0, 0), handler, 1, &[]),
        Err(Error::NoSpace)
    );
}

fn n(s: &str) -> Name {
    Name::new(s.as_bytes()).unwrap()
}

fn sig(params: u8, results: u8) -> Sig {
    Sig {
        params,
        results,
        wide: 0,
    }
}

fn console_image() -> Image {
    Image {
        exports: vec![Interface {
            name: n("console"),
            symbols: vec![
                Symbol {
                    name: n("write"),
                    sig: sig(2, 0),
                    target: 1,
                },
                Symbol {
                    name: n("read"),
                    sig: sig(0, 1),
                    target: 2,
                },
            ],
        }],
        imports: vec![],
    }
}

fn client_image() -> Image {
    Image {
        exports: vec![],
        imports: vec![
            Import {
                interface: n("console"),
                name: n("write"),
                sig: sig(2, 0),
            },
            Import {
                interface: n("console"),
                name: n("read"),
                sig: sig(1, 1),
            },
            Import {
                interface: n("clock"),
                name: n("now"),
                sig: sig(0, 1),
            },
        ],
    }
}

#[test]
fn names_are_bounded() {
    assert_eq!(Name::new(&[b'a'; 33]), Err(Error::TooLarge));
    assert_eq!(Name::new(b""), Err(Error::InvalidArgument));
    assert_eq!(n("abc").as_bytes(), b"abc");
}

#[test]
fn resolve_binds_matching_names_and_types_only() {
    let mut d = Domains::new();
    let k = Holder::Kernel;
    let t = Holder::Task(5);
    let console = d.create(k, console_image()).unwrap();
    let client = d.create(t, client_image()).unwrap();
    // The task holds no capability for the console domain.
    assert_eq!(d.resolve(t, console, client), Err(Error::NotFound));
    d.grant(k, console, t).unwrap();
    assert_eq!(
        d.resolve(t, console, client),
        Ok(1),
        "read has another type"
    );
    let dom = d.get(t, client).unwrap();
    assert_eq!(
        dom.imports()[0].1,
        Some(Bound {
            domain: console,
            target: 1
        })
    );
    assert_eq!(dom.imports()[1].1, None);
    assert!(!dom.resolved());
    // Resolving again binds nothing more, and exports nothing.
    assert_eq!(d.resolve(t, console, client), Ok(0));
    assert!(d.get(t, client).unwrap().own_exports().is_empty());
}

#[test]
fn combine_exports_both_and_keeps_them_alive() {
    let mut d = Domains::new();
    let t = Holder::Task(5);
    let console = d.create(t, console_image()).unwrap();
    let clock = d
        .create(
            t,
            Image {
                exports: vec![Interface {
                    name: n("clock"),
                    symbols: vec![Symbol {
                        name: n("now"),
                        sig: sig(0, 1),
                        target: 9,
                    }],
                }],
                imports: vec![],
            },
        )
        .unwrap();
    let public = d.combine(t, console, clock).unwrap();
    let mut gone = Vec::new();
    d.release(t, console, &mut gone).unwrap();
    d.release(t, clock, &mut gone).unwrap();
    assert!(gone.is_empty(), "the combined domain holds its members");
    let client = d.create(t, client_image()).unwrap();
    assert_eq!(d.resolve(t, public, client), Ok(2));
    assert_eq!(
        d.get(t, client).unwrap().imports()[2].1,
        Some(Bound {
            domain: public,
            target: 9
        })
    );
    d.release(t, public, &mut gone).unwrap();
    gone.sort();
    let mut want = vec![public, console, clock];
    want.sort();
    assert_eq!(gone, want);
    assert_eq!(d.len(), 1);
    assert_eq!(d.get(t, console).err(), Some(Error::NotFound));
}

#[test]
fn create_is_bounded() {
    let mut d = Domains::new();
    let imports = (0..=MAX_SYMBOLS)
        .map(|_| Import {
            interface: n("a"),
            name: n("b"),
            sig: sig(0, 0),
        })
        .collect();
    assert_eq!(
        d.create(
            Holder::Kernel,
            Image {
                exports: vec![],
                imports
            }
        ),
        Err(Error::TooLarge)
    );
}

#[test]
fn the_name_server_asks_the_exporter() {
    let mut d = Domains::new();
    let mut ns = NameServer::new();
    let console = d.create(Holder::Kernel, console_image()).unwrap();
    fn only_task_7(who: Holder, word: u64) -> bool {
        who == Holder::Task(word)
    }
    ns.export(&d, Holder::Kernel, n("console"), console, only_task_7, 7)
        .unwrap();
    assert_eq!(
        ns.export(&d, Holder::Kernel, n("console"), console, only_task_7, 7),
        Err(Error::Busy)
    );
    assert_eq!(
        ns.export(&d, Holder::Task(3), n("x"), console, only_task_7, 7),
        Err(Error::NotFound)
    );
    assert_eq!(
        ns.import(&mut d, Holder::Task(3), &n("console")),
        Err(Error::Denied)
    );
    assert_eq!(d.get(Holder::Task(3), console).err(), Some(Error::NotFound));
    assert_eq!(
        ns.import(&mut d, Holder::Task(7), &n("console")),
        Ok(console)
    );
    assert!(d.get(Holder::Task(7), console).is_ok());
    assert_eq!(
        ns.import(&mut d, Holder::Task(7), &n("nothing")),
        Err(Error::NotFound)
    );
    assert_eq!(d.held_by(7).collect::<Vec<_>>(), vec![console]);
    ns.forget(console);
    assert!(ns.is_empty());
}

#[test]
fn find_export_names_the_exporting_member() {
    let mut d = Domains::new();
    let t = Holder::Task(5);
    let console = d.create(t, console_image()).unwrap();
    let empty = d.create(t, Image::default()).unwrap();
    let both = d.combine(t, empty, console).unwrap();
    assert_eq!(
        d.find_export(t, both, &n("read"))
            .map(|(o, s)| (o, s.target)),
        Ok((console, 2))
    );
    assert_eq!(
        d.find_export(t, both, &n("nope")).err(),
        Some(Error::NotFound)
    );
    assert_eq!(
        d.find_export(Holder::Task(6), both, &n("read")).err(),
        Some(Error::NotFound)
    );
}

#[test]
fn a_keyed_handler_is_still_a_direct_call() {
    fn keyed(r: &Request) -> Decision<u64> {
        Decision::Allow {
            guard: None,
            key: Some(r.claim),
            budget: 0,
        }
    }
    let own = Owner {
        authorize: keyed,
        may_remove_primary: |_| false,
    };
    let mut e: Event<Log, u64, u64> = Event::keyed(
        "T.K",
        own,
        default,
        Some(sum),
        false,
        8,
        Some(|a: &u64| a / 10),
    )
    .unwrap();
    e.install(&req(2, 3, 0), handler, 5, &[]).unwrap();
    assert!(e.is_direct());
    let mut log = Log::new();
    assert_eq!(e.raise(&mut log, &31).result, 36, "key 3: the handler");
    let r = e.raise(&mut log, &41);
    assert_eq!(
        (r.result, r.ran, r.defaulted),
        (1041, 0, true),
        "key 4: the default"
    );
    e.install(&req(2, 4, 0), handler, 6, &[]).unwrap();
    e.install(&req(2, 4, 0), handler, 7, &[]).unwrap();
    assert_eq!(e.raise(&mut log, &41).result, 47 + 48);
    assert_eq!(e.raise(&mut log, &30).result, 35);
    // A key on an event without a key function is refused.
    let mut plain: Event<Log, u64, u64> = Event::new(
        "T.P",
        Owner {
            authorize: keyed,
            may_remove_primary: |_| false,
        },
        default,
        None,
        false,
        8,
    )
    .unwrap();
    assert_eq!(
        plain.install(&req(2, 3, 0), handler, 5, &[]),
        Err(Error::InvalidArgument)
    );
}

/// The shape of the kernel's `Strand` events: the owner keys each handler to its
/// installer's task, the raise's key is the task whose virtual processor it is, results
/// are "proceed" (0) or "veto" (1) and any veto wins; with no handler of that task the
/// default (the upcall: proceed) answers.
#[test]
fn task_keyed_handlers_with_a_veto_that_wins() {
    fn by_task(r: &Request) -> Decision<u64> {
        Decision::Allow {
            guard: None,
            key: Some(r.installer.task),
            budget: 0,
        }
    }
    fn proceed(log: &mut Log, _: &u64) -> u64 {
        log.push(0);
        0
    }
    fn answer(log: &mut Log, b: Binding, _: &u64) -> Option<u64> {
        log.push(b.closure);
        Some(b.closure % 2)
    }
    fn any_veto(a: u64, b: u64) -> u64 {
        a | b
    }
    let mut e: Event<Log, u64, u64> = Event::keyed(
        "Strand.Block",
        Owner {
            authorize: by_task,
            may_remove_primary: |_| false,
        },
        proceed,
        Some(any_veto),
        false,
        MAX_HANDLERS,
        Some(|task: &u64| *task),
    )
    .unwrap();
    // Task 1: one handler that proceeds (closure 10), one that vetoes (11); task 2: one
    // that proceeds (20).
    e.install(&req(1, 0, 0), answer, 10, &[]).unwrap();
    e.install(&req(1, 0, 1), answer, 11, &[]).unwrap();
    e.install(&req(2, 0, 0), answer, 20, &[]).unwrap();
    let mut log = Log::new();
    let r = e.raise(&mut log, &1);
    assert_eq!((r.result, r.ran, log.as_slice()), (1, 2, &[10, 11][..]));
    log.clear();
    let r = e.raise(&mut log, &2);
    assert_eq!((r.result, r.ran, log.as_slice()), (0, 1, &[20][..]));
    log.clear();
    let r = e.raise(&mut log, &3);
    assert!(
        r.defaulted && r.result == 0 && log == [0],
        "no handler of task 3"
    );
    // Task 2's handler cannot be removed by task 1.
    let twenty = e
        .handler_ids()
        .find(|&id| e.binding(id).is_some_and(|b| b.closure == 20))
        .unwrap();
    let by = |task| Installer {
        task,
        domain: 0,
        builtin: true,
    };
    assert_eq!(e.remove(twenty, Some(&by(1))), Err(Error::Denied));
    assert_eq!(e.remove(twenty, Some(&by(2))), Ok(()));
}
