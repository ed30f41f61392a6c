//! `names_test`: the name service and the interface macro over real IPC. Booted as
//! `init=names,names_test`, so its bootstrap right is a send right to the name server.
//!
//! It spawns `names_echo` with that right, looks up the `"echo"` it registers (retrying
//! until it is there), and checks, printing `ok: <what>` for each: calls through the
//! generated `Echo` stub (and that they take the fast path), server errors reaching the
//! client, lookup of an unknown name, duplicate, too long and empty names, lookup giving a
//! new copy of the right each time, a destroyed port's name disappearing (dead-name
//! notification), the table's bound, unregister, bad requests answered without harm (and
//! the rights they carried released), the echo server quitting, and that the kernel's
//! port, name and message counts are back where they started.
//!
//! Verdict: `TEST PASS names` or `TEST FAIL names: ...`. When it ends, the name server
//! sees no senders left and exits too.
#![no_std]
#![no_main]

#[path = "../echo_idl.rs"]
mod echo_idl;

use baton_rt::idl_rt::client::{begin_request, open_reply};
use baton_rt::idl_rt::{SendRight, Transport};
use baton_rt::ipc::{
    cap_drop, cap_info, msg_buf, port_allocate, port_make_send, port_notify, Disposition,
    RightKind, IPC_BUFFER_SIZE, MSG_RECEIVE, NOTIFY_KIND_NO_SENDERS,
};
use baton_rt::names::{NamesClient, ALREADY_REGISTERED, ENTRIES_MAX, NAMES_REGISTER_ID, NAME_MAX};
use baton_rt::rpc::Rpc;
use baton_rt::{clock_ns, sleep_ns, spawn_with, start::bootstrap, stats, Error};
use echo_idl::EchoClient;

use baton_rt::check::Failed;

baton_rt::entry!(main);

/// How long anything that should happen soon may take.
const SOON: u64 = 5_000_000_000;
/// Calls of each kind through the echo stub.
const CALLS: u64 = 100;

/// This program's name in its `ok:` / `TEST FAIL` lines (see `baton_rt::check`).
const TEST: &str = "names";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

/// Runs `f`, turning an error into a failure that names `what`.
fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// A name service client on `rpc`.
fn names(rpc: &mut Rpc) -> NamesClient<&mut Rpc> {
    NamesClient::new(rpc, bootstrap())
}

/// Polls `f` every millisecond until it holds or [`SOON`] has passed.
fn soon(mut f: impl FnMut() -> bool) -> bool {
    let deadline = clock_ns().saturating_add(SOON);
    loop {
        if f() {
            return true;
        }
        if clock_ns() > deadline {
            return false;
        }
        let _ = sleep_ns(1_000_000);
    }
}

/// The kernel's port, name and queued-message counts.
fn counts() -> Result<(u64, u64, u64), Failed> {
    baton_rt::check::ipc_counts(TEST)
}

/// `"fill00"` … : a name for entry `i` of the table test.
fn fill_name(i: usize) -> [u8; 6] {
    let mut b = *b"fill00";
    b[4] = b'0' + (i / 10 % 10) as u8;
    b[5] = b'0' + (i % 10) as u8;
    b
}

fn run() -> Result<(), Failed> {
    let baseline = counts()?;
    let boot = bootstrap();
    check!(
        cap_info(boot) == Ok(RightKind::Send),
        "the bootstrap right is a send right (to the name service)"
    );
    let mut rpc = must("rpc transport", Rpc::new())?;
    check!(
        names(&mut rpc).lookup("echo") == Err(Error::NotFound),
        "lookup of an unregistered name is NotFound"
    );

    must("spawn names_echo", spawn_with("names_echo", boot))?;
    let mut echo = 0;
    let found = soon(|| match names(&mut rpc).lookup("echo") {
        Ok(SendRight(r)) => {
            echo = r;
            true
        }
        Err(_) => false,
    });
    check!(
        found && cap_info(echo) == Ok(RightKind::Send),
        "\"echo\" registered by the server is found: a send right"
    );

    calls(&mut rpc, echo)?;
    names_rules(&mut rpc)?;
    bad_requests(&mut rpc)?;

    let mut client = EchoClient::new(&mut rpc, echo);
    check!(client.quit() == Ok(()), "the echo server acknowledges quit");
    check!(
        soon(|| cap_info(echo) == Ok(RightKind::DeadName)),
        "the echo server's port is destroyed when it exits"
    );
    check!(
        client.add(1, 2) == Err(Error::DeadName),
        "a call to the exited server fails with DeadName"
    );
    must("drop echo", cap_drop(echo))?;
    drop(rpc);
    let mut now = baseline;
    let back = soon(|| {
        now = counts().unwrap_or_default();
        now == baseline
    });
    check!(
        back,
        "ports, names and queued messages back to the baseline ({:?} -> {:?})",
        baseline,
        now
    );
    Ok(())
}

/// Calls through the generated `Echo` stub.
fn calls(rpc: &mut Rpc, echo: u64) -> Result<(), Failed> {
    let mut client = EchoClient::new(rpc, echo);
    let before = must("stats", stats())?;
    let mut data = [0u8; 200];
    let mut good = true;
    for i in 0..CALLS {
        let n = (i as usize * 7) % data.len();
        for (j, b) in data.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(j as u8);
        }
        let sent = &data[..n];
        good &= client.echo(sent).map(|back| back == sent) == Ok(true);
        good &= client.add(i, 1000) == Ok(i + 1000);
    }
    let after = must("stats", stats())?;
    check!(
        good,
        "{} echo and add calls through the generated stub",
        2 * CALLS
    );
    let fast = after.ipc_fast - before.ipc_fast;
    check!(
        fast >= 2 * CALLS,
        "the calls take the fast path ({fast} fast, {} queued)",
        after.ipc_queued - before.ipc_queued
    );
    check!(
        client.add(u64::MAX, 1) == Err(Error::TooLarge),
        "a server's error reaches the client"
    );
    Ok(())
}

/// The name service's rules.
fn names_rules(rpc: &mut Rpc) -> Result<(), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    let send = must("port_make_send", port_make_send(port, false))?;
    let mut n = names(rpc);
    check!(
        n.register("echo", SendRight(send)) == Err(ALREADY_REGISTERED),
        "registering a taken name fails"
    );
    let long = [b'x'; NAME_MAX + 1];
    let long = core::str::from_utf8(&long).unwrap_or("");
    check!(
        n.register(long, SendRight(send)) == Err(Error::TooLarge)
            && n.lookup(long) == Err(Error::TooLarge)
            && n.register(&long[..NAME_MAX], SendRight(send)) == Ok(())
            && n.unregister(&long[..NAME_MAX]) == Ok(()),
        "names of {} bytes work, longer ones are TooLarge",
        NAME_MAX
    );
    check!(
        n.register("", SendRight(send)) == Err(Error::BadFormat),
        "an empty name is refused"
    );

    check!(
        n.register("extra", SendRight(send)) == Ok(()),
        "register \"extra\""
    );
    let a = n.lookup("extra");
    let b = n.lookup("extra");
    let copies = match (a, b) {
        (Ok(SendRight(a)), Ok(SendRight(b))) => {
            let both =
                a != b && cap_info(a) == Ok(RightKind::Send) && cap_info(b) == Ok(RightKind::Send);
            let _ = (cap_drop(a), cap_drop(b));
            both
        }
        _ => false,
    };
    check!(copies, "each lookup gives a new copy of the send right");
    // Destroying the port turns the server's right into a dead name, which the server
    // releases on its dead-name notification, without being asked: the kernel's name
    // count drops by three (our two names and its dead name) before any lookup.
    let names_before = must("stats", stats())?.names;
    must("drop send", cap_drop(send))?;
    must("destroy port", cap_drop(port))?;
    let mut names_now = names_before;
    let released = soon(|| {
        names_now = stats().map_or(0, |s| s.names);
        names_now + 3 == names_before
    });
    check!(
        released && n.lookup("extra") == Err(Error::NotFound),
        "a destroyed port's name goes away (dead-name notification; names {} -> {})",
        names_before,
        names_now
    );

    let port = must("port_allocate", port_allocate(0))?;
    let send = must("port_make_send", port_make_send(port, false))?;
    // "echo" is registered: fill the rest.
    let mut filled = true;
    for i in 0..ENTRIES_MAX - 1 {
        let name = fill_name(i);
        let name = core::str::from_utf8(&name).unwrap_or("");
        filled &= n.register(name, SendRight(send)) == Ok(());
    }
    let full = n.register("one too many", SendRight(send));
    let mut emptied = true;
    for i in 0..ENTRIES_MAX - 1 {
        let name = fill_name(i);
        let name = core::str::from_utf8(&name).unwrap_or("");
        emptied &= n.unregister(name) == Ok(());
    }
    check!(
        filled && full == Err(Error::NoSpace) && emptied,
        "the table holds {} names, then NoSpace",
        ENTRIES_MAX
    );
    must("drop send", cap_drop(send))?;
    must("destroy port", cap_drop(port))?;

    check!(
        n.unregister("echo") == Ok(())
            && n.lookup("echo") == Err(Error::NotFound)
            && n.unregister("echo") == Err(Error::NotFound),
        "unregister removes a name, once"
    );
    Ok(())
}

/// Requests the stubs would never send: answered with an error, and their rights
/// released by the server.
fn bad_requests(rpc: &mut Rpc) -> Result<(), Failed> {
    let dest = bootstrap();
    // An unknown id carrying a right: the server must release it, which leaves the port
    // without senders. (Asked for while our send right exists, so it does not fire at
    // once; the right then moves into the request.)
    let port = must("port_allocate", port_allocate(0))?;
    let send = must("port_make_send", port_make_send(port, false))?;
    must(
        "port_notify",
        port_notify(port, NOTIFY_KIND_NO_SENDERS, port),
    )?;
    let unknown = NAMES_REGISTER_ID + 50;
    let len = must("request", {
        begin_request(rpc.buffer(), dest, unknown).and_then(|mut w| {
            w.port(send, Disposition::MoveSend)?;
            w.bytes(b"junk")?;
            Ok(w.finish())
        })
    })?;
    let reply = rpc
        .call(len)
        .and_then(|n| open_reply(rpc.buffer(), n, unknown).map(|_| ()));
    check!(
        reply == Err(Error::NotSupported),
        "an unknown request id is answered NotSupported"
    );
    let mut note = [0u8; IPC_BUFFER_SIZE];
    let released = msg_buf(&mut note, MSG_RECEIVE, port, SOON).is_ok()
        && baton_rt::rpc::Notification::of(&note)
            == Some(baton_rt::rpc::Notification::NoSenders(port));
    check!(
        released,
        "the right a rejected request carried is released (no-senders)"
    );
    must("destroy port", cap_drop(port))?;

    // A register request without its arguments.
    let len = must(
        "request",
        begin_request(rpc.buffer(), dest, NAMES_REGISTER_ID).map(|w| w.finish()),
    )?;
    let reply = rpc
        .call(len)
        .and_then(|n| open_reply(rpc.buffer(), n, NAMES_REGISTER_ID).map(|_| ()));
    check!(
        reply == Err(Error::BadFormat),
        "a request with missing arguments is answered BadFormat"
    );
    check!(
        names(rpc).lookup("nothing") == Err(Error::NotFound),
        "the name server still answers"
    );
    Ok(())
}
