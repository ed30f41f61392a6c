//! `td_child`: a task the `teardown` test ends while one of its threads is inside an
//! activation (spawned by `teardown`, never alone).
//!
//! It sends a send right to a port of its own to its bootstrap port ([`HELLO`]), reads a
//! one-way [`CONFIG`] (a role, a message id and a word; for [`CLIENT`] a send right to a
//! `mig_server` in the descriptor), starts a second thread that makes a migrating call,
//! waits until that thread is inside the activation, tells its bootstrap port ([`INSIDE`])
//! and returns from `main` (the task exits with code 0) while the call is still running:
//!
//! - [`SELF`]: the call goes to an activation of this very task, whose dispatch routine
//!   yields over and over (the thread sits on its CPU's run queue when the task ends);
//! - [`CLIENT`]: the call goes to the `mig_server`, with the configured id (`SPIN_ACT` or
//!   `SLEEP`) and word (how long, in nanoseconds); the server goes on undisturbed.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_rt::ipc::{
    msg_raw, port_allocate, port_make_send, Descriptor, Disposition, IpcBuffer, MsgHeader,
    MSG_RECEIVE, MSG_SEND,
};
use baton_rt::migrate::{self, Request};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{println, start::bootstrap, Error, FOREVER};

#[path = "../mig_proto.rs"]
mod mig_proto;

use mig_proto::{word, HELLO, INFO};

baton_rt::entry!(main);

/// One-way, parent → child: role, id, word (and for [`CLIENT`] the server's send right).
pub const CONFIG: u64 = 2;
/// One-way, child → parent: the call is running in the activation; `main` returns now.
pub const INSIDE: u64 = 30;
/// Role: call an activation of this task.
pub const SELF: u64 = 1;
/// Role: call the `mig_server` whose send right came with [`CONFIG`].
pub const CLIENT: u64 = 2;

static STACKS: StackPool<2, 16384> = StackPool::new();
/// Where the call goes (a send right), its id and its word.
static TARGET: AtomicU64 = AtomicU64::new(0);
static ID: AtomicU64 = AtomicU64::new(0);
static ARG: AtomicU64 = AtomicU64::new(0);
/// Set by [`yielder`] once it runs (the [`SELF`] call is inside).
static IN_SELF: AtomicU32 = AtomicU32::new(0);
/// The receive right [`caller`] names in its call (its reply never comes through it: the
/// call migrates).
static RCV: AtomicU64 = AtomicU64::new(0);

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL td_child: {}", e.name());
            1
        }
    }
}

fn run() -> Result<(), Error> {
    let boot = bootstrap();
    let mut buf = IpcBuffer::new()?;
    let me = port_allocate(0)?;
    RCV.store(me, Ordering::Relaxed);
    buf.send(
        boot,
        HELLO,
        &[Descriptor::port(me, Disposition::MakeSend)],
        &[],
    )?;
    buf.msg(MSG_RECEIVE, me, FOREVER)?;
    if buf.header().id != CONFIG {
        return Err(Error::BadFormat);
    }
    let (role, id, arg) = (
        word(buf.data(), 0),
        word(buf.data(), 1),
        word(buf.data(), 2),
    );
    let server = buf.descriptor(0).map_or(0, |d| d.value);
    ID.store(id, Ordering::Relaxed);
    ARG.store(arg, Ordering::Relaxed);
    match role {
        SELF => {
            let own = port_allocate(0)?;
            migrate::attach(own, 2, yielder)?;
            TARGET.store(port_make_send(own, false)?, Ordering::Relaxed);
        }
        CLIENT => TARGET.store(server, Ordering::Relaxed),
        _ => return Err(Error::InvalidArgument),
    }
    let stack = STACKS.take().ok_or(Error::NoMemory)?;
    spawn(stack, caller, 0)?;
    // Until the call is inside its activation.
    let t0 = baton_rt::clock_ns();
    loop {
        let inside = match role {
            SELF => IN_SELF.load(Ordering::SeqCst) != 0,
            // `INFO`'s word 4 counts the `SLEEP` calls asleep in the server, word 5 the
            // `SPIN_ACT` calls spinning there.
            _ => {
                let what = if id == mig_proto::SLEEP { 4 } else { 5 };
                call(&mut buf, server, INFO, 0) == 0 && word(buf.data(), what) == 1
            }
        };
        if inside {
            break;
        }
        if baton_rt::clock_ns() - t0 > 5_000_000_000 {
            return Err(Error::TimedOut);
        }
        baton_rt::sys::yield_now();
    }
    buf.send(boot, INSIDE, &[], &[])?;
    // Returning from `main` ends the task while the other thread is in the activation.
    Ok(())
}

/// A call of `id` with one data word `arg` to `to` through `buf`; the raw result.
fn call(buf: &mut IpcBuffer, to: u64, id: u64, arg: u64) -> u64 {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: to,
        id,
        ..MsgHeader::default()
    };
    if buf.set(h, &[], &arg.to_le_bytes()).is_err() {
        return u64::MAX;
    }
    // SAFETY: the kernel writes only this thread's IPC buffer, which `buf` owns.
    unsafe {
        msg_raw(
            MSG_SEND | MSG_RECEIVE,
            RCV.load(Ordering::Relaxed),
            FOREVER,
            0,
            0,
        )
    }
}

/// The second thread: the call; it is not expected to come back (the task ends first).
fn caller(_: u64) {
    if let Ok(mut b) = IpcBuffer::new() {
        let r = call(
            &mut b,
            TARGET.load(Ordering::Relaxed),
            ID.load(Ordering::Relaxed),
            ARG.load(Ordering::Relaxed),
        );
        println!("td_child: the call came back ({r:#x}) before the task ended");
    }
}

/// The [`SELF`] activations' dispatch routine: yields for up to 10 s (the task ends long
/// before), then echoes.
fn yielder(req: &mut Request) {
    IN_SELF.store(1, Ordering::SeqCst);
    let t0 = baton_rt::clock_ns();
    while baton_rt::clock_ns() - t0 < 10_000_000_000 {
        baton_rt::sys::yield_now();
    }
    let id = req.header().id;
    req.reply(id, &[]);
}
