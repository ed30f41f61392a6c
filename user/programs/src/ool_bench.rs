//! The `ipc.ool.*` benchmarks of `bench` (`docs/benchmarks.md`): an RPC carrying 4 KiB,
//! 64 KiB or 1 MiB out of line (Accent's MoveWords through a message), copied or moved
//! (`OOL_DEALLOCATE`). The server, a thread of the same task on its own port, receives the
//! region, reads one word of every page, deallocates it and replies with an empty message;
//! the figure is the client's whole round trip. Included by `bench.rs` with
//! `#[path = "../ool_bench.rs"] mod ool_bench;`.
//!
//! A copied region stays resident in the client across iterations (its pages are
//! copy-on-write after the first send, never copied: nobody writes them); a moved region
//! leaves the client, so each iteration allocates and writes a fresh one first, outside
//! the measured window. Fewer iterations than the other rows ([`WARM`] and [`RUNS`]): a
//! moved megabyte costs 256 zero fills to make again each time.

use baton_abi::ipc::{Descriptor, DESC_OOL, OOL_DEALLOCATE};
use baton_rt::ipc::{
    port_allocate, port_make_send, Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::vm::{self, PROT_RW};
use baton_rt::{println, rdtsc_ordered, Error, FOREVER};
use core::sync::atomic::{AtomicU64, Ordering};

/// Iterations not recorded.
pub const WARM: usize = 10;
/// Recorded iterations.
pub const RUNS: usize = 100;
const PAGE: u64 = 4096;
/// Request ids.
const CALL: u64 = 0x0e01;
const QUIT: u64 = 0x0e02;

static STACK: StackPool<1, 16384> = StackPool::new();
static PORT: AtomicU64 = AtomicU64::new(0);
static SERVER_DONE: Counter = Counter::new(0);

/// The server thread: see the module documentation.
fn server(_: u64) {
    let port = PORT.load(Ordering::Acquire);
    let Ok(mut buf) = IpcBuffer::new() else {
        return;
    };
    let mut r = buf.msg(MSG_RECEIVE, port, FOREVER);
    while r.is_ok() {
        let h = buf.header();
        if h.id == QUIT {
            break;
        }
        if let Some(d) = buf
            .descriptor(0)
            .filter(|d| d.kind == DESC_OOL && d.value != 0)
        {
            let mut a = d.value;
            while a < d.value + d.size {
                // SAFETY: the kernel mapped the region here, readable; no reference into it.
                core::hint::black_box(unsafe { (a as *const u64).read_volatile() });
                a += PAGE;
            }
            // SAFETY: the region is this thread's alone, and nothing refers to it.
            let _ = unsafe { vm::deallocate(d.value, d.size) };
        }
        let reply = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
            dest: h.reply,
            id: CALL,
            ..MsgHeader::default()
        };
        if buf.set(reply, &[], &[]).is_err() {
            break;
        }
        r = buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER);
    }
    SERVER_DONE.increment();
}

/// Writes one word of every page of `[a, a + len)`.
fn touch(a: u64, len: u64) {
    let mut p = a;
    while p < a + len {
        // SAFETY: allocated by the caller, writable, no reference into it.
        unsafe { (p as *mut u64).write_volatile(p) };
        p += PAGE;
    }
}

/// Runs the six rows; `Err` carries what failed.
pub fn run(table: bool) -> Result<(), &'static str> {
    let port = port_allocate(0).map_err(|_| "port")?;
    let send = port_make_send(port, false).map_err(|_| "send right")?;
    let reply = port_allocate(0).map_err(|_| "reply port")?;
    PORT.store(port, Ordering::Release);
    let stack = STACK.take().ok_or("no stack")?;
    spawn(stack, server, 0).map_err(|_| "server thread")?;
    let mut buf = IpcBuffer::new().map_err(|_| "IPC buffer")?;
    for (name, pages) in [("4k", 1), ("64k", 16), ("1m", 256)] {
        for moved in [false, true] {
            row(&mut buf, send, reply, name, pages, moved, table).map_err(|_| "an ool RPC")?;
        }
    }
    let quit = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: send,
        id: QUIT,
        ..MsgHeader::default()
    };
    buf.set(quit, &[], &[]).map_err(|_| "quit")?;
    buf.msg(MSG_SEND, 0, FOREVER).map_err(|_| "quit")?;
    SERVER_DONE.wait_for(1, FOREVER).map_err(|_| "server end")?;
    for name in [send, reply, port] {
        let _ = baton_rt::ipc::cap_drop(name);
    }
    Ok(())
}

fn row(
    buf: &mut IpcBuffer,
    send: u64,
    reply: u64,
    size: &str,
    pages: u64,
    moved: bool,
    table: bool,
) -> Result<(), Error> {
    let len = pages * PAGE;
    let mut samples = [0u64; RUNS];
    let mut a = 0;
    if !moved {
        a = vm::allocate(None, len, PROT_RW)?;
        touch(a, len);
    }
    let flags = if moved { OOL_DEALLOCATE } else { 0 };
    for i in 0..WARM + RUNS {
        if moved {
            a = vm::allocate(None, len, PROT_RW)?;
            touch(a, len);
        }
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
            dest: send,
            reply,
            id: CALL,
            ..MsgHeader::default()
        };
        let d = Descriptor {
            kind: DESC_OOL,
            disposition: flags,
            value: a,
            size: len,
        };
        buf.set(h, &[d], &[])?;
        let t0 = rdtsc_ordered();
        buf.msg(MSG_SEND | MSG_RECEIVE, reply, FOREVER)?;
        let t1 = rdtsc_ordered();
        if let Some(s) = i.checked_sub(WARM).and_then(|j| samples.get_mut(j)) {
            *s = t1.wrapping_sub(t0);
        }
    }
    if !moved {
        // SAFETY: allocated above, nothing refers to it.
        unsafe { vm::deallocate(a, len) }?;
    }
    samples.sort_unstable();
    let median = samples[(RUNS - 1) / 2];
    let name = if moved { ".move" } else { "" };
    if table {
        let full = if moved { "move" } else { "copy" };
        println!(
            "ipc.ool.{size:<4} {full:<24} {median:>9} {:>9} {:>9}",
            samples[0],
            samples[RUNS - 1]
        );
        return Ok(());
    }
    println!(
        "BENCH name=ipc.ool.{size}{name} unit=instructions iterations={RUNS} median={median} min={} max={}",
        samples[0],
        samples[RUNS - 1]
    );
    Ok(())
}
