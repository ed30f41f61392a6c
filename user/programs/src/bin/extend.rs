//! `extend`: SPIN-style extensions from user space (`docs/extensions.md`).
//!
//! - a built-in extension adds system calls (`null`, `sum`, `hello`) through
//!   `Trap.SystemCall`;
//! - authorisation: `baton.kernel` cannot be imported (`Denied`), a claim inside the base
//!   ABI is refused by the event's owner (`Denied`), another task's handler cannot be
//!   removed;
//! - a guard the owner attached filters which raises a handler sees (`Test.Raise`);
//! - several handlers on one event, their results summed by its combiner, in rank order;
//! - a WebAssembly extension (`extensions/null_syscall`, embedded) adds system calls too,
//!   linked against the interfaces it resolved;
//! - calls between extension domains: a module (`extensions/caller`) calls the procedures
//!   another module exports once a `Resolve` with that module's domain bound them; a
//!   callee that runs out of the caller's fuel, traps or was released aborts the caller;
//! - asynchronous handlers: run after the raise by an idle processor's thread, at most
//!   `ASYNC_PENDING_MAX` waiting per installer (the rest counted and dropped), purged with
//!   their handler, aborted under their fuel;
//! - malicious modules: an endless loop (out of fuel) and an access outside its linear
//!   memory are aborted, the call returns `Aborted`, the handler is removed and the task
//!   is told on its port; a huge memory, a forged import, an oversized and an invalid
//!   module are refused; the kernel keeps running;
//! - the kernel memory charged to the task is back to its baseline after everything is
//!   released;
//! - a child (`extend_child`) that ends with a WebAssembly and a built-in handler
//!   installed and its domains held leaves nothing behind: the charges come back and its
//!   system-call numbers are free.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec;
use baton_abi::ipc::{HEADER_SIZE, MSG_RECEIVE};
use baton_abi::spin::{EVENT_SYSCALL, EVENT_TEST, NOTIFY_ABORTED};
use baton_rt::check::{finish, Failed};
use baton_rt::ipc::{msg_buf, port_allocate, port_make_send};
use baton_rt::spin::{self, Domain};
use baton_rt::{println, Error};

baton_rt::entry!(main);

const TEST: &str = "extend";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) }
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// The WebAssembly extension, built by `cargo xtask build`.
static NULL_SYSCALL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/extensions/wasm32-unknown-unknown/release/null_syscall.wasm"
));

/// The extension that calls another domain's procedures (`extensions/caller`).
static CALLER: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/extensions/wasm32-unknown-unknown/release/caller.wasm"
));

/// A module whose memory asks for 1,000 pages (64 MB) and exports `one: (i64) -> i64`.
const HUGE_MEMORY: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
    0x01, 0x06, 0x01, 0x60, 0x01, 0x7e, 0x01, 0x7e, // type 0: (i64) -> i64
    0x03, 0x02, 0x01, 0x00, // function 0: type 0
    0x05, 0x04, 0x01, 0x00, 0xe8, 0x07, // memory: min 1000 pages
    0x07, 0x07, 0x01, 0x03, b'o', b'n', b'e', 0x00, 0x00, // export "one" = func 0
    0x0a, 0x06, 0x01, 0x04, 0x00, 0x42, 0x01, 0x0b, // code: i64.const 1
];

/// A module that imports `baton.kernel.secret: () -> i64` (which no task may import) and
/// exports `one: (i64) -> i64` calling it.
const FORGED_IMPORT: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
    0x01, 0x0a, 0x02, 0x60, 0x00, 0x01, 0x7e, 0x60, 0x01, 0x7e, 0x01, 0x7e, // types
    0x02, 0x17, 0x01, 0x0c, b'b', b'a', b't', b'o', b'n', b'.', b'k', b'e', b'r', b'n', b'e', b'l',
    0x06, b's', b'e', b'c', b'r', b'e', b't', 0x00, 0x00, // import func, type 0
    0x03, 0x02, 0x01, 0x01, // function 1: type 1
    0x07, 0x07, 0x01, 0x03, b'o', b'n', b'e', 0x00, 0x01, // export "one" = func 1
    0x0a, 0x06, 0x01, 0x04, 0x00, 0x10, 0x00, 0x0b, // code: call 0
];

fn receive(port: u64, ns: u64) -> Result<(u64, u64), Error> {
    let mut buf = [0u8; 256];
    msg_buf(&mut buf, MSG_RECEIVE, port, ns)?;
    let h = baton_abi::ipc::MsgHeader::from_bytes(&buf).ok_or(Error::BadFormat)?;
    let word = buf
        .get(HEADER_SIZE..HEADER_SIZE + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    Ok((h.id, word))
}

fn charged() -> u64 {
    baton_rt::sys::stats().map_or(0, |s| s.kmem_charged)
}

fn main(task_id: u64) -> i32 {
    finish(TEST, run(task_id))
}

fn run(task_id: u64) -> Result<(), Failed> {
    // The notification port is made first (its name-table slot stays charged until the
    // task ends).
    let port = must("port_allocate", port_allocate(0))?;
    let send = must("port_make_send", port_make_send(port, false))?;
    // Round 1 warms up what the kernel keeps once made: the family's state and the
    // slots its tables grew to (domains, modules, handler records). Round 2 must then
    // give back exactly what it took, charges and heap alike.
    round(task_id, port, send)?;
    let base = charged();
    let heap_base = baton_rt::sys::stats().map_or(0, |s| s.heap_used);
    round(task_id, port, send)?;
    let after = charged();
    let heap_after = baton_rt::sys::stats().map_or(0, |s| s.heap_used);
    println!(
        "kernel memory charged: {base} before, {after} after; heap in use {heap_base} before, {heap_after} after"
    );
    check!(
        after == base,
        "the charges are back to the baseline ({base}, now {after})"
    );
    check!(
        heap_after == heap_base,
        "the kernel heap is back to the baseline ({heap_base}, now {heap_after})"
    );
    task_end()
}

/// A child installs a WebAssembly and a built-in handler and ends without releasing
/// anything: its charges come back, and its handlers are gone (the same numbers are free
/// for this task).
fn task_end() -> Result<(), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    must(
        "port_notify",
        baton_rt::ipc::port_notify(port, baton_abi::ipc::NOTIFY_KIND_NO_SENDERS, port),
    )?;
    // After the port (its name slot stays charged to this task).
    let base = charged();
    must(
        "spawn extend_child",
        baton_rt::sys::spawn_with("extend_child", port),
    )?;
    check!(
        receive(port, 5_000_000_000).map(|r| r.0) == Ok(baton_abi::ipc::NOTIFY_NO_SENDERS),
        "the child ended"
    );
    // The task's record goes a little after its last right: wait for the charges.
    let mut now = charged();
    for _ in 0..100 {
        if now == base {
            break;
        }
        let _ = baton_rt::sys::sleep_ns(10_000_000);
        now = charged();
    }
    check!(
        now == base,
        "the child's charges are back ({base}, now {now})"
    );
    must("cap_drop", baton_rt::ipc::cap_drop(port))?;
    let b = must("import builtin", spin::import("builtin.null_syscall"))?;
    let h = must(
        "install on the child's number",
        spin::install(b, "sum", EVENT_SYSCALL, 0, 0x1000, 0),
    )?;
    check!(
        spin::call(0x1000, [1, 1, 0, 0]) == 2,
        "this task's handler, not the child's"
    );
    must("remove", spin::remove(h))?;
    must("release", spin::release(b))?;
    Ok(())
}

fn round(task_id: u64, port: u64, send: u64) -> Result<(), Failed> {
    builtin(task_id)?;
    authorisation()?;
    guards_and_combiner()?;
    wasm(task_id)?;
    cross_domain(port, send)?;
    builtin_calls()?;
    asynchronous(port, send)?;
    malicious(port, send)
}

/// SPIN's protected in-kernel call between built-in domains: `builtin.caller.call_n`
/// calls the procedure its import was bound to (`builtin.callee.null`), which a task may
/// install only while it holds a capability for the callee's domain.
fn builtin_calls() -> Result<(), Failed> {
    let caller = must("import builtin.caller", spin::import("builtin.caller"))?;
    check!(
        spin::install(caller, "call_n", EVENT_TEST, 0, 0, 0) == Err(Error::NotFound),
        "call_n without a capability for the callee's domain: NotFound"
    );
    let callee = must("import builtin.callee", spin::import("builtin.callee"))?;
    check!(
        spin::install(callee, "null", EVENT_TEST, 0, 0, 0) == Err(Error::InvalidArgument),
        "the callee's procedure is no Test.Raise handler: InvalidArgument"
    );
    let h = must(
        "install call_n",
        spin::install(caller, "call_n", EVENT_TEST, 0, 0, 0),
    )?;
    check!(
        spin::raise(0) == Ok(0) && spin::raise(7) == Ok(7),
        "call_n made the calls it was asked for through the linked procedure"
    );
    check!(
        spin::raise(u64::MAX) == Ok(1000),
        "call_n stops at 1,000 calls a raise"
    );
    must("remove call_n", spin::remove(h))?;
    let h = must(
        "install local_n",
        spin::install(caller, "local_n", EVENT_TEST, 0, 0, 0),
    )?;
    check!(spin::raise(9) == Ok(9), "local_n made its direct calls");
    must("remove local_n", spin::remove(h))?;
    // The link is checked at installation: without the callee's capability again, no
    // new installation.
    must("release callee", spin::release(callee))?;
    check!(
        spin::install(caller, "call_n", EVENT_TEST, 0, 0, 0) == Err(Error::NotFound),
        "after the callee's capability is released: NotFound again"
    );
    must("release caller", spin::release(caller))?;
    Ok(())
}

/// The calling task's asynchronous counts: (waiting, ran, dropped).
fn async_counts() -> Result<(u64, u64, u64), Failed> {
    use baton_abi::spin::{ASYNC_DROPPED, ASYNC_PENDING, ASYNC_RAN};
    Ok((
        must("spin_async", spin::async_count(ASYNC_PENDING))?,
        must("spin_async", spin::async_count(ASYNC_RAN))?,
        must("spin_async", spin::async_count(ASYNC_DROPPED))?,
    ))
}

/// Waits (sleeping, so that a processor goes idle and its worker runs) until none of
/// this task's asynchronous raises is waiting; the counts then.
fn settle_async() -> Result<(u64, u64, u64), Failed> {
    for _ in 0..200 {
        let c = async_counts()?;
        if c.0 == 0 {
            return Ok(c);
        }
        let _ = baton_rt::sys::sleep_ns(5_000_000);
    }
    async_counts()
}

/// SPIN's asynchronous handlers: run after the raise, by an idle processor's thread,
/// bounded per installer, charged to it, purged when unloaded, aborted under their fuel.
fn asynchronous(port: u64, send: u64) -> Result<(), Failed> {
    use baton_abi::spin::ASYNC_PENDING_MAX;
    let b = must("import builtin", spin::import("builtin.null_syscall"))?;
    check!(
        spin::install_async(b, "null", EVENT_SYSCALL, 0, 0x1030, send) == Err(Error::NotSupported),
        "Trap.SystemCall takes no asynchronous handler: NotSupported"
    );
    let (_, ran0, dropped0) = settle_async()?;
    let h = must(
        "install an asynchronous one",
        spin::install_async(b, "one", EVENT_TEST, 0, 0, send),
    )?;
    check!(
        spin::raise(7) == Ok(0),
        "the raise returns before it runs: the default answers"
    );
    let (waiting, ran, _) = settle_async()?;
    check!(
        waiting == 0 && ran == ran0 + 1,
        "a worker ran it after the raise ({ran0} -> {ran})"
    );
    // The bound: raises back to back, with no idle processor between them (on one CPU),
    // queue at most ASYNC_PENDING_MAX; the rest are counted and dropped.
    for _ in 0..200 {
        let _ = spin::raise(1);
    }
    let (waiting, _, _) = async_counts()?;
    check!(
        waiting <= ASYNC_PENDING_MAX,
        "at most {ASYNC_PENDING_MAX} waiting ({waiting})"
    );
    let (_, ran2, dropped2) = settle_async()?;
    check!(
        (ran2 - ran) + (dropped2 - dropped0) == 200 && dropped2 > dropped0,
        "every raise ran or was dropped, some dropped ({} ran, {} dropped)",
        ran2 - ran,
        dropped2 - dropped0
    );
    // Unloaded while raises wait: they go with it, and their charges (the round's
    // baseline checks them).
    for _ in 0..5 {
        let _ = spin::raise(1);
    }
    must("remove", spin::remove(h))?;
    check!(
        async_counts()?.0 == 0,
        "removing the handler drops its waiting raises"
    );
    // A WebAssembly one that runs out of fuel in the worker: aborted, removed, the
    // installer told; the raise itself was not delayed.
    let callee = must("create", spin::create(NULL_SYSCALL))?;
    let console = must("import", spin::import("baton.console"))?;
    let task = must("import", spin::import("baton.task"))?;
    must("resolve", spin::resolve(console, callee))?;
    must("resolve", spin::resolve(task, callee))?;
    let caller = must("create", spin::create(CALLER))?;
    must("resolve", spin::resolve(callee, caller))?;
    let t = must(
        "install an asynchronous wasm one",
        spin::install_async(callee, "twice", EVENT_TEST, 0, 0, send),
    )?;
    check!(
        spin::raise(4) == Ok(0),
        "wasm: the default answers the raise"
    );
    let before = settle_async()?.1;
    must("remove", spin::remove(t))?;
    let f = must(
        "install an asynchronous endless one",
        spin::install_async(caller, "call_forever", EVENT_TEST, 0, 0, send),
    )?;
    check!(
        spin::raise(1) == Ok(0),
        "an endless asynchronous handler does not hold up the raise"
    );
    check!(
        receive(port, 5_000_000_000) == Ok((NOTIFY_ABORTED, f.id)),
        "the worker aborted it under its fuel and told the installer"
    );
    check!(
        spin::remove(f) == Err(Error::NotFound),
        "the aborted asynchronous handler is gone"
    );
    check!(before > ran2, "the wasm one ran too");
    for d in [caller, callee, console, task, b] {
        must("release", spin::release(d))?;
    }
    Ok(())
}

/// SPIN's calls between domains: the `caller` module calls what a `null_syscall` module
/// exports, once a `Resolve` with that domain (held by this task) bound its imports.
fn cross_domain(port: u64, send: u64) -> Result<(), Failed> {
    let callee = must("create the null_syscall module", spin::create(NULL_SYSCALL))?;
    let console = must("import baton.console", spin::import("baton.console"))?;
    let task = must("import baton.task", spin::import("baton.task"))?;
    must("resolve", spin::resolve(console, callee))?;
    must("resolve", spin::resolve(task, callee))?;
    let caller = must("create the caller module", spin::create(CALLER))?;
    check!(
        spin::install(caller, "call_twice", EVENT_TEST, 0, 0, send) == Err(Error::NotFound),
        "before a Resolve its imports are unbound: NotFound"
    );
    check!(
        spin::resolve(console, caller) == Ok(0),
        "the kernel's console exports nothing it imports"
    );
    check!(
        spin::resolve(callee, caller) == Ok(4),
        "Resolve with the other module's domain binds twice, one, forever and wild"
    );
    let h = must(
        "install call_twice",
        spin::install(caller, "call_twice", EVENT_TEST, 0, 0, send),
    )?;
    check!(
        spin::raise(21) == Ok(42),
        "a call into the other domain: 42"
    );
    must("remove", spin::remove(h))?;
    let h = must(
        "install call_n",
        spin::install(caller, "call_n", EVENT_TEST, 0, 0, send),
    )?;
    check!(spin::raise(50) == Ok(50), "50 calls into the other domain");
    must("remove", spin::remove(h))?;
    // A callee that runs out of the caller's fuel, or traps, aborts the caller.
    for sym in ["call_forever", "call_wild"] {
        let h = must(sym, spin::install(caller, sym, EVENT_TEST, 0, 0, send))?;
        check!(
            spin::raise(1) == Ok(0),
            "{sym}: the callee's abort aborts the caller; the default answers"
        );
        check!(
            receive(port, 1_000_000_000) == Ok((NOTIFY_ABORTED, h.id)),
            "{sym}: the installer is told"
        );
    }
    // The callee came back whole from its aborted calls.
    let h = must(
        "install call_twice again",
        spin::install(caller, "call_twice", EVENT_TEST, 0, 0, send),
    )?;
    check!(
        spin::raise(5) == Ok(10),
        "the callee still answers after the aborts"
    );
    // The callee's domain released while the caller is installed: its module goes, and
    // a call into it aborts the caller instead of reaching anything.
    must("release the callee", spin::release(callee))?;
    check!(
        spin::raise(5) == Ok(0),
        "a call into a released domain aborts"
    );
    check!(
        receive(port, 1_000_000_000) == Ok((NOTIFY_ABORTED, h.id)),
        "the installer is told"
    );
    for d in [caller, console, task] {
        must("release", spin::release(d))?;
    }
    Ok(())
}

fn builtin(task_id: u64) -> Result<(), Failed> {
    let b = must(
        "import builtin.null_syscall",
        spin::import("builtin.null_syscall"),
    )?;
    let null = must(
        "install null",
        spin::install(b, "null", EVENT_SYSCALL, 0, 0x1000, 0),
    )?;
    let sum = must(
        "install sum",
        spin::install(b, "sum", EVENT_SYSCALL, 0, 0x1001, 0),
    )?;
    let hello = must(
        "install hello",
        spin::install(b, "hello", EVENT_SYSCALL, 0, 0x1002, 0),
    )?;
    check!(
        spin::call(0x1000, [1, 2, 3, 4]) == 0,
        "the added null call returns 0"
    );
    check!(
        spin::call(0x1001, [1, 2, 3, 4]) == 6,
        "the added sum call returns 1 + 2 + 3"
    );
    check!(
        spin::call(0x1002, [0; 4]) == task_id,
        "hello returns the caller's task id"
    );
    check!(
        spin::install(b, "nope", EVENT_SYSCALL, 0, 0x1003, 0) == Err(Error::NotFound),
        "a symbol the domain does not export: NotFound"
    );
    check!(
        spin::install(b, "one", EVENT_SYSCALL, 0, 0x1003, 0) == Err(Error::InvalidArgument),
        "a procedure of another type than the event's: InvalidArgument"
    );
    for h in [null, sum, hello] {
        must("remove", spin::remove(h))?;
    }
    check!(
        spin::remove(null) == Err(Error::NotFound),
        "a removed handler: NotFound"
    );
    must("release builtin", spin::release(b))?;
    Ok(())
}

fn authorisation() -> Result<(), Failed> {
    check!(
        spin::import("baton.kernel") == Err(Error::Denied),
        "baton.kernel: its authoriser denies every task"
    );
    check!(
        spin::import("no.such") == Err(Error::NotFound),
        "an unknown interface: NotFound"
    );
    let b = must("import builtin", spin::import("builtin.null_syscall"))?;
    check!(
        spin::install(b, "null", EVENT_SYSCALL, 0, 14, 0) == Err(Error::Denied),
        "claiming a base system call (14): the owner denies it"
    );
    check!(
        spin::install(b, "null", EVENT_SYSCALL, 0, 0x2000, 0) == Err(Error::Denied),
        "claiming past the extension range: Denied"
    );
    check!(
        spin::install(Domain(b.0 ^ 1), "null", EVENT_SYSCALL, 0, 0x1000, 0) == Err(Error::NotFound),
        "a domain id the task does not hold: NotFound"
    );
    check!(
        spin::install(b, "null", 99, 0, 0x1000, 0) == Err(Error::NotFound),
        "an unknown event: NotFound"
    );
    must("release", spin::release(b))?;
    check!(
        spin::release(b) == Err(Error::NotFound),
        "a released domain is gone for the task"
    );
    Ok(())
}

fn guards_and_combiner() -> Result<(), Failed> {
    let b = must("import builtin", spin::import("builtin.null_syscall"))?;
    check!(
        spin::raise(5) == Ok(0),
        "no handler: Test.Raise's default (0)"
    );
    // Claim 1 + x: the owner's guard `arg == x`; a built-in's closure is its claim.
    let g = must(
        "install guarded",
        spin::install(b, "closure", EVENT_TEST, 0, 1 + 5, 0),
    )?;
    check!(
        spin::raise(5) == Ok(6),
        "the guard lets arg 5 through (closure 6)"
    );
    check!(
        spin::raise(4) == Ok(0),
        "the guard filters arg 4 out: the default answers"
    );
    // A second and third handler: the combiner sums.
    let one = must("install one", spin::install(b, "one", EVENT_TEST, 0, 0, 0))?;
    let one2 = must(
        "install one again",
        spin::install(b, "one", EVENT_TEST, -1, 0, 0),
    )?;
    check!(spin::raise(5) == Ok(8), "6 + 1 + 1 combined");
    check!(
        spin::raise(4) == Ok(2),
        "only the unguarded handlers: 1 + 1"
    );
    for h in [g, one, one2] {
        must("remove", spin::remove(h))?;
    }
    check!(spin::raise(5) == Ok(0), "all removed: the default again");
    must("release", spin::release(b))?;
    Ok(())
}

fn heap() -> u64 {
    baton_rt::sys::stats().map_or(0, |s| s.heap_used)
}

fn wasm(task_id: u64) -> Result<(), Failed> {
    let heap0 = heap();
    let m = must("create the null_syscall module", spin::create(NULL_SYSCALL))?;
    let heap1 = heap();
    check!(
        spin::install(m, "null", EVENT_SYSCALL, 0, 0x1010, 0) == Err(Error::NotFound),
        "installing before its imports are resolved: NotFound"
    );
    let console = must("import baton.console", spin::import("baton.console"))?;
    let task = must("import baton.task", spin::import("baton.task"))?;
    check!(
        spin::resolve(console, m) == Ok(1),
        "Resolve binds console.write"
    );
    check!(spin::resolve(task, m) == Ok(1), "Resolve binds task.id");
    let both = must("combine", spin::combine(console, task))?;
    check!(spin::resolve(both, m) == Ok(0), "nothing left to bind");
    let null = must(
        "install wasm null",
        spin::install(m, "null", EVENT_SYSCALL, 0, 0x1010, 0),
    )?;
    check!(spin::call(0x1010, [0; 4]) == 0, "the first call");
    // What `wasmi` took of the kernel heap for the module, compiled, instantiated and
    // called once, against what the task was charged for it (`docs/extensions.md`).
    let heap2 = heap();
    let charge = NULL_SYSCALL.len() as u64 * 16 + 16 * 65536 + 16 * 1024 * 16 + 16 * 1024;
    println!(
        "module of {} bytes: kernel heap +{} after create, +{} after instantiation and a call; charged {charge}",
        NULL_SYSCALL.len(),
        heap1.wrapping_sub(heap0),
        heap2.wrapping_sub(heap0)
    );
    check!(
        heap2.wrapping_sub(heap0) <= charge,
        "the module's heap use is within its charge"
    );
    let sum = must(
        "install wasm sum",
        spin::install(m, "sum", EVENT_SYSCALL, 0, 0x1011, 0),
    )?;
    let hello = must(
        "install wasm hello",
        spin::install(m, "hello", EVENT_SYSCALL, 0, 0x1012, 0),
    )?;
    check!(
        spin::call(0x1010, [0; 4]) == 0,
        "the wasm null call returns 0"
    );
    check!(
        spin::call(0x1011, [10, 20, 30, 0]) == 60,
        "the wasm sum call returns 60"
    );
    check!(
        spin::call(0x1012, [0; 4]) == task_id,
        "the wasm hello returns the task id"
    );
    let twice = must(
        "install wasm twice",
        spin::install(m, "twice", EVENT_TEST, 0, 0, 0),
    )?;
    let b = must("import builtin", spin::import("builtin.null_syscall"))?;
    let one = must(
        "install built-in one",
        spin::install(b, "one", EVENT_TEST, 0, 0, 0),
    )?;
    check!(spin::raise(21) == Ok(43), "wasm 42 + built-in 1, combined");
    for h in [null, sum, hello, twice, one] {
        must("remove", spin::remove(h))?;
    }
    // Releasing the module with a handler still installed removes the handler too.
    let _left = must(
        "install wasm null again",
        spin::install(m, "null", EVENT_SYSCALL, 0, 0x1010, 0),
    )?;
    for d in [m, console, task, both, b] {
        must("release", spin::release(d))?;
    }
    Ok(())
}

fn malicious(port: u64, send: u64) -> Result<(), Failed> {
    let m = must("create the module", spin::create(NULL_SYSCALL))?;
    let console = must("import baton.console", spin::import("baton.console"))?;
    let task = must("import baton.task", spin::import("baton.task"))?;
    must("resolve", spin::resolve(console, m))?;
    must("resolve", spin::resolve(task, m))?;

    let forever = must(
        "install forever",
        spin::install(m, "forever", EVENT_SYSCALL, 0, 0x1020, send),
    )?;
    let r = spin::call(0x1020, [0; 4]);
    check!(
        r == Error::Aborted.to_raw(),
        "an endless loop runs out of fuel: Aborted ({r:#x})"
    );
    check!(
        receive(port, 1_000_000_000) == Ok((NOTIFY_ABORTED, forever.id)),
        "the installer is told which handler was aborted"
    );
    check!(
        spin::remove(forever) == Err(Error::NotFound),
        "the aborted handler is gone"
    );

    let wild = must(
        "install wild",
        spin::install(m, "wild", EVENT_SYSCALL, 0, 0x1021, send),
    )?;
    let r = spin::call(0x1021, [0; 4]);
    check!(
        r == Error::Aborted.to_raw(),
        "an access outside its memory traps: Aborted ({r:#x})"
    );
    check!(
        receive(port, 1_000_000_000) == Ok((NOTIFY_ABORTED, wild.id)),
        "the installer is told"
    );
    // The module's other handlers still work.
    let sum = must(
        "install sum",
        spin::install(m, "sum", EVENT_SYSCALL, 0, 0x1022, send),
    )?;
    check!(
        spin::call(0x1022, [1, 1, 1, 0]) == 3,
        "the same module's sound handler still runs"
    );
    must("remove", spin::remove(sum))?;

    let huge = must("create the huge-memory module", spin::create(HUGE_MEMORY))?;
    check!(
        spin::install(huge, "one", EVENT_TEST, 0, 0, 0) == Err(Error::NoMemory),
        "a memory of 1,000 pages is refused at instantiation: NoMemory"
    );
    let forged = must(
        "create the forged-import module",
        spin::create(FORGED_IMPORT),
    )?;
    check!(
        spin::resolve(console, forged) == Ok(0),
        "the console resolves no baton.kernel import"
    );
    check!(
        spin::install(forged, "one", EVENT_TEST, 0, 0, 0) == Err(Error::NotFound),
        "a module with an unresolved (forged) import is not linked: NotFound"
    );
    let big = vec![0u8; baton_abi::spin::MODULE_MAX + 1];
    check!(
        spin::create(&big) == Err(Error::TooLarge),
        "an oversized module: TooLarge"
    );
    check!(
        spin::create(b"\0asm\x01\0\0\0\xff\xff\xff") == Err(Error::BadFormat),
        "an invalid module: BadFormat"
    );
    check!(
        spin::create(&[]) == Err(Error::BadFormat),
        "an empty module: BadFormat"
    );
    for d in [m, console, task, huge, forged] {
        must("release", spin::release(d))?;
    }
    check!(spin::raise(1) == Ok(0), "the kernel still dispatches");
    Ok(())
}
