//! `wakestorm_child`: the child task of `wakestorm`. Never run alone.
//!
//! Sends a send right to its port on its bootstrap port, then its threads wait in every
//! kind of wait with a timeout of a few dozen microseconds — a receive on its port, a
//! `wait` on a word another thread keeps waking, a `sleep` — so that at any instant some
//! of them have a timer armed, some are being woken by a message or a `wake` just as their
//! timer fires, and some are ready. The parent sends to the port and ends the task through
//! its task port at a moment of its choosing; a child left alone returns from `main` after
//! [`LIFE_NS`] with its threads still waiting.
#![no_std]
#![no_main]

#[path = "../wait_mix.rs"]
mod wait_mix;

use core::sync::atomic::{AtomicU32, Ordering};

use baton_rt::ipc::MSG_SEND;
use baton_rt::ipc::{port_allocate, Descriptor, Disposition, IpcBuffer, MsgHeader};
use baton_rt::start::bootstrap;
use baton_rt::thread::{spawn, StackPool};

baton_rt::entry!(main);

/// Waiting threads.
const THREADS: usize = 5;
/// How long a child nobody ends lives.
const LIFE_NS: u64 = 20_000_000;

static STACKS: StackPool<THREADS, 16384> = StackPool::new();
/// The word the waiters `wait` on and the main thread wakes.
static WORD: AtomicU32 = AtomicU32::new(0);
/// The port the receivers receive on.
static PORT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

fn main(_task_id: u64) -> i32 {
    let Ok(mut buf) = IpcBuffer::new() else {
        return 0;
    };
    let Ok(port) = port_allocate(0) else {
        return 0;
    };
    PORT.store(port, Ordering::Relaxed);
    for i in 0..THREADS {
        let Some(stack) = STACKS.take() else {
            break;
        };
        let _ = spawn(stack, waiter, i as u64);
    }
    if bootstrap() != 0 {
        let hello = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 1),
            dest: bootstrap(),
            id: 0x57_0e,
            ..MsgHeader::default()
        };
        if buf
            .set(hello, &[Descriptor::port(port, Disposition::MakeSend)], &[])
            .is_ok()
        {
            let _ = buf.msg(MSG_SEND, 0, 0);
        }
    }
    // Wake the word's waiters now and then, racing their timeouts, until the life is over.
    let end = baton_rt::clock_ns().saturating_add(LIFE_NS);
    while baton_rt::clock_ns() < end {
        WORD.fetch_add(1, Ordering::Relaxed);
        let _ = baton_rt::wake(&WORD, 2);
        let _ = baton_rt::sleep_ns(30_000);
    }
    0
}

/// Thread `i`: waits of every kind, with short timeouts, forever (until its task ends).
fn waiter(i: u64) {
    let Ok(mut buf) = IpcBuffer::new() else {
        return;
    };
    let port = PORT.load(Ordering::Relaxed);
    let mut n = i;
    loop {
        wait_mix::wait_once(&mut buf, port, &WORD, &mut n);
    }
}
