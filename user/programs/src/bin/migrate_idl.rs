//! `migrate_idl`: an interface-macro server run as a migrating server
//! (`baton_rt::migrate::serve`) and as a message-loop server (`baton_rt::rpc::serve`),
//! the same service (`idl_server`, interface `Table3`) and the same checks against both.
//!
//! Checks, printing `ok: <what>` for each: the calls return the right results, in-line
//! data arrives whole, method errors come back as errors; unknown ids, truncated arguments
//! and bytes left over are refused with `NotSupported` and `BadFormat`; against the
//! migrating server every call migrated (no message queued) and a one-way message and a
//! call carrying a right are served by the server's own thread, on the same service; a call
//! made while another caller holds the service waits for it; `quit` ends the server
//! (its `serve` returns) and later calls fail; activations, ports, names and queued
//! messages return to their baseline.
//!
//! Verdict: `TEST PASS migrate_idl` or `TEST FAIL migrate_idl: ...`.
#![no_std]
#![no_main]

#[path = "../table3_idl.rs"]
mod table3_idl;

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_rt::check::Failed;
use baton_rt::idl_rt::REPLY_ID_OFFSET;
use baton_rt::ipc::{
    cap_drop, port_allocate, Descriptor, Disposition, MsgHeader, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::rpc::Rpc;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{clock_ns, println, sleep_ns, stats, Error, FOREVER};
use table3_idl::{Table3Client, TABLE3_ADD_ID, TABLE3_IN32_ID, TABLE3_NULL_ID};

baton_rt::entry!(main);

const TEST: &str = "migrate_idl";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

static STACKS: StackPool<4, 16384> = StackPool::new();
/// The server the helper thread calls.
static TARGET: AtomicU64 = AtomicU64::new(0);
/// The helper is about to call `hold`; then it is done (1 ok, 2 failed).
static HELPER_IN: AtomicU32 = AtomicU32::new(0);
static HELPER_DONE: AtomicU32 = AtomicU32::new(0);
/// When the helper made its call.
static HELPER_CALLED: AtomicU64 = AtomicU64::new(0);
/// How long the helper holds the service.
const HOLD_NS: u64 = 60_000_000;

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn run() -> Result<(), Failed> {
    let base = must("stats", stats())?;
    let mut rpc = must("rpc", Rpc::new())?;
    for (activations, how) in [(2u64, "migrating"), (0, "message-loop")] {
        against(&mut rpc, activations, how)?;
    }
    drop(rpc);
    // The servers have exited: everything they had is gone.
    let t0 = clock_ns();
    loop {
        let s = must("stats", stats())?;
        let back = (s.activations, s.ports, s.names, s.messages_queued)
            == (
                base.activations,
                base.ports,
                base.names,
                base.messages_queued,
            );
        if back || clock_ns() - t0 > 2_000_000_000 {
            check!(
                back,
                "activations, ports, names and queued messages back to the baseline \
                 ({}/{}/{}/{} now, {}/{}/{}/{} before)",
                s.activations,
                s.ports,
                s.names,
                s.messages_queued,
                base.activations,
                base.ports,
                base.names,
                base.messages_queued
            );
            break;
        }
        must("sleep", sleep_ns(5_000_000))?;
    }
    Ok(())
}

/// A request built by hand: `id`, in-line `data`, port `descriptors`; sent as a call
/// (`MSG_SEND | MSG_RECEIVE`, a fresh send-once reply right) through `rpc`'s buffer, or
/// one-way. For a call, the reply's id and result code.
fn raw(
    rpc: &mut Rpc,
    server: u64,
    id: u64,
    descriptors: &[Descriptor],
    data: &[u8],
    call: bool,
) -> Result<(u64, u64), Error> {
    let reply = rpc.reply_port();
    let h = MsgHeader {
        bits: MsgHeader::make_bits(
            Disposition::CopySend,
            if call {
                Disposition::MakeSendOnce
            } else {
                Disposition::None
            },
            0,
        ),
        dest: server,
        reply: if call { reply } else { 0 },
        id,
        ..MsgHeader::default()
    };
    let ipc = rpc.ipc();
    ipc.set(h, descriptors, data)?;
    if !call {
        return ipc.msg(MSG_SEND, 0, FOREVER).map(|()| (0, 0));
    }
    ipc.msg(MSG_SEND | MSG_RECEIVE, reply, FOREVER)?;
    let code = ipc
        .data()
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(u64::MAX, u64::from_le_bytes);
    Ok((ipc.header().id, code))
}

/// The helper: one `hold` call to `TARGET` with its own transport.
fn helper(_: u64) {
    let ok = Rpc::new().and_then(|mut rpc| {
        let mut c = Table3Client::new(&mut rpc, TARGET.load(Ordering::SeqCst));
        HELPER_CALLED.store(clock_ns(), Ordering::SeqCst);
        HELPER_IN.store(1, Ordering::SeqCst);
        c.hold(HOLD_NS)
    });
    HELPER_DONE.store(if ok.is_ok() { 1 } else { 2 }, Ordering::SeqCst);
}

/// Every check against an `idl_server` with `activations` activations (0: message loop).
fn against(rpc: &mut Rpc, activations: u64, how: &str) -> Result<(), Failed> {
    let migrating = activations > 0;
    let server = must(
        "start idl_server",
        table3_idl::start(rpc.ipc(), activations),
    )?;
    let data32: [u8; 32] = core::array::from_fn(|i| 100 + i as u8);
    let data1k: [u8; 1024] = core::array::from_fn(|i| (i * 7 % 256) as u8);
    let sum1k: u64 = data1k.iter().map(|&b| u64::from(b)).sum();

    let before = must("stats", stats())?;
    {
        let mut c = Table3Client::new(&mut *rpc, server);
        let results = (
            c.null(),
            c.in32(data32),
            c.last(),
            c.in1k(data1k),
            c.last(),
            c.sum(data1k),
            c.add(40, 2),
            c.add(u64::MAX, 1),
            c.fail(Error::Denied as u64),
            c.fail(9999),
        );
        check!(
            results
                == (
                    Ok(()),
                    Ok(()),
                    Ok((2, 100, 131)),
                    Ok(()),
                    Ok((3, data1k[0], data1k[1023])),
                    Ok(sum1k),
                    Ok(42),
                    Err(Error::TooLarge),
                    Err(Error::Denied),
                    Err(Error::InvalidArgument),
                ),
            "{how}: calls return their results, in-line data arrives whole, errors come back \
             ({results:?})"
        );
    }
    let refused = (
        raw(rpc, server, TABLE3_NULL_ID + 60, &[], &[], true),
        raw(rpc, server, TABLE3_IN32_ID, &[], &[1; 10], true),
        raw(rpc, server, TABLE3_NULL_ID, &[], &[0; 3], true),
        // A byte short of and a byte past the shape the fixed-size fast path takes
        // (`add`: two `u64`s): both go to the general path, which refuses them.
        raw(rpc, server, TABLE3_ADD_ID, &[], &[1; 15], true),
        raw(rpc, server, TABLE3_ADD_ID, &[], &[1; 17], true),
    );
    let code = |e: Error| e as i64 as u64;
    check!(
        refused
            == (
                Ok((
                    TABLE3_NULL_ID + 60 + REPLY_ID_OFFSET,
                    code(Error::NotSupported)
                )),
                Ok((TABLE3_IN32_ID + REPLY_ID_OFFSET, code(Error::BadFormat))),
                Ok((TABLE3_NULL_ID + REPLY_ID_OFFSET, code(Error::BadFormat))),
                Ok((TABLE3_ADD_ID + REPLY_ID_OFFSET, code(Error::BadFormat))),
                Ok((TABLE3_ADD_ID + REPLY_ID_OFFSET, code(Error::BadFormat))),
            ),
        "{how}: an unknown id is NotSupported, truncated arguments and bytes left over are \
         BadFormat ({refused:?})"
    );
    let after = must("stats", stats())?;
    // 15 calls: the 10 stub calls and the 5 refused ones.
    let migrated = after.migrations - before.migrations;
    let queued = after.ipc_queued - before.ipc_queued;
    if migrating {
        check!(
            migrated == 15 && queued == 0,
            "{how}: every call migrated ({migrated} of 15), none was queued ({queued})"
        );
    } else {
        check!(migrated == 0, "{how}: no call migrated");
    }

    if migrating {
        // What does not migrate reaches the same service, on the server's own thread.
        must(
            "one-way in32",
            raw(rpc, server, TABLE3_IN32_ID, &[], &[7; 32], false).map(|_| ()),
        )?;
        let t0 = clock_ns();
        let mut seen = Ok((0, 0, 0));
        while clock_ns() - t0 < 1_000_000_000 {
            seen = Table3Client::new(&mut *rpc, server).last();
            if seen == Ok((4, 7, 7)) {
                break;
            }
            must("sleep", sleep_ns(1_000_000))?;
        }
        check!(
            seen == Ok((4, 7, 7)),
            "{how}: a one-way message is served by the server's own thread, on the same \
             service ({seen:?})"
        );
        let port = must("port", port_allocate(0))?;
        let before = must("stats", stats())?;
        let mut args = [0u8; 16];
        args[..8].copy_from_slice(&1u64.to_le_bytes());
        args[8..].copy_from_slice(&2u64.to_le_bytes());
        let r = raw(
            rpc,
            server,
            TABLE3_ADD_ID,
            &[Descriptor::port(port, Disposition::MakeSend)],
            &args,
            true,
        );
        let after = must("stats", stats())?;
        check!(
            r == Ok((TABLE3_ADD_ID + REPLY_ID_OFFSET, code(Error::BadFormat)))
                && after.migrations == before.migrations,
            "{how}: a call carrying a right does not migrate; the server's own thread \
             refuses the unexpected right ({r:?})"
        );
        must("drop port", cap_drop(port))?;
    }

    // A call made while another caller holds the service waits until it is released.
    TARGET.store(server, Ordering::SeqCst);
    HELPER_IN.store(0, Ordering::SeqCst);
    HELPER_DONE.store(0, Ordering::SeqCst);
    let stack = STACKS.take().ok_or(Failed)?;
    must("spawn helper", spawn(stack, helper, 0))?;
    while HELPER_IN.load(Ordering::SeqCst) == 0 {
        must("sleep", sleep_ns(1_000_000))?;
    }
    // Let the helper get into the service.
    must("sleep", sleep_ns(20_000_000))?;
    let t0 = clock_ns();
    let sum = Table3Client::new(&mut *rpc, server).add(1, 2);
    let t1 = clock_ns();
    let waited = t1 - t0;
    while HELPER_DONE.load(Ordering::SeqCst) == 0 {
        must("sleep", sleep_ns(1_000_000))?;
    }
    check!(
        // It ended after the helper's call had held the service for `HOLD_NS`.
        sum == Ok(3)
            && HELPER_DONE.load(Ordering::SeqCst) == 1
            && t1 >= HELPER_CALLED.load(Ordering::SeqCst) + HOLD_NS,
        "{how}: a call made while another caller holds the service waits for it ({} ms)",
        waited / 1_000_000
    );

    let quit = Table3Client::new(&mut *rpc, server).quit();
    check!(quit == Ok(()), "{how}: quit is answered ({quit:?})");
    // The server stops serving: a later call fails (refused, or its port is gone).
    let mut c = Table3Client::new(&mut *rpc, server);
    let late = c.null();
    check!(late.is_err(), "{how}: a call after quit fails ({late:?})");
    if migrating {
        // Until the task has ended, a call is refused as by a dead server.
        check!(
            matches!(
                late,
                Err(Error::DeadName | Error::Aborted | Error::InvalidName)
            ),
            "{how}: it fails as a call to a dead server does"
        );
    }
    must("drop server", cap_drop(server))?;
    println!("{TEST}: {how} server done");
    Ok(())
}
