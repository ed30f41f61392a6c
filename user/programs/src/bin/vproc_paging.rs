//! `vproc_paging`: Sting's upcall pages under memory pressure (`docs/sting.md`, "The
//! kernel half"; `docs/vm.md`, "Paging").
//!
//! The kernel writes a virtual processor's upcall event at the top of its upcall stack and
//! its Unblock events in its mailbox, from wherever the thread that blocks or resumes is:
//! such a write cannot wait for a page to come back from the default pager, so those pages
//! are wired while the processor lives. Booted with user memory limited to 256 frames, a
//! disk driver and a default pager on the disk's swap area, this test runs the Sting
//! runtime with kernel upcalls and, inside it, writes a region twice as large as memory:
//! the task's other pages go out to the swap area (its own page-out counter moves, the
//! region is not all resident), while every wired range of the task (the upcall stack's
//! event pages, the mailbox) stays wholly resident. Then a Sting thread blocks in a kernel
//! receive that only another task (`vproc_peer`) satisfies: the Block upcall arrives, the
//! processor's other threads run meanwhile, and the thread resumes with the peer's message
//! (the Unblock event intact). Three rounds: the third must leave the kernel's heap,
//! objects and free frames where the second did (the first warms up).
#![no_std]
#![no_main]

extern crate alloc;

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../swap_proto.rs"]
mod swap_proto;

use alloc::sync::Arc;
use alloc::vec::Vec;
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_rt::check::{finish, Failed};
use baton_rt::ipc::{cap_drop, data_word, msg_buf, port_allocate, IpcBuffer};
use baton_rt::{println, Error};
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicU64};
use sting::{Config, Kind};

baton_rt::entry!(main);

const TEST: &str = "vproc_paging";
/// The id of `vproc_peer`'s messages.
const PEER_ID: u64 = 0x7670_0001;
/// How long the peer waits before it answers: long enough for the receiver to block.
const PEER_DELAY: u64 = 50_000_000;
const P: u64 = 4096;
/// The region written under pressure: twice the frames of user memory.
const PRESSURE_PAGES: u64 = 512;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) }
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    finish(TEST, run())
}

/// One message from `port` into a buffer of the caller's: its id and first data word.
fn receive(port: u64, ns: u64) -> Result<(u64, u64), Error> {
    let mut buf = [0u8; HEADER_SIZE + 16];
    msg_buf(&mut buf, MSG_RECEIVE, port, ns)?;
    let h = MsgHeader::from_bytes(&buf).ok_or(Error::BadFormat)?;
    if h.reply != 0 {
        let _ = cap_drop(h.reply);
    }
    Ok((h.id, data_word(buf.get(HEADER_SIZE..).unwrap_or(&[]), 0)))
}

/// Asks the peer (through `q`) to send `count` messages after `delay` nanoseconds (`count`
/// 0 ends it).
fn request(q: u64, delay: u64, count: u64) -> Result<(), Error> {
    let mut buf = [0u8; HEADER_SIZE + 16];
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: (HEADER_SIZE + 16) as u32,
        dest: q,
        id: 1,
        ..MsgHeader::default()
    };
    buf[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    buf[HEADER_SIZE..HEADER_SIZE + 8].copy_from_slice(&delay.to_le_bytes());
    buf[HEADER_SIZE + 8..].copy_from_slice(&count.to_le_bytes());
    msg_buf(&mut buf, MSG_SEND, 0, baton_abi::FOREVER)
}

/// The task's wired ranges in its heap, where the runtime keeps each processor's upcall
/// stack and mailbox: (start, end, resident pages). (The runtime's IPC buffers, which the
/// kernel wires for its own copies and unwires when it finds them stale, are elsewhere.)
fn wired_ranges() -> Vec<(u64, u64, u64)> {
    use baton_abi::layout::{USER_HEAP_BASE, USER_HEAP_MAX};
    let mut out = Vec::new();
    let mut addr = USER_HEAP_BASE;
    while let Ok(r) = baton_rt::vm::query(addr) {
        if r.start >= USER_HEAP_BASE + USER_HEAP_MAX {
            break;
        }
        if r.wired > 0 {
            out.push((r.start, r.end, r.resident));
        }
        addr = r.end;
    }
    out
}

/// What a round saw.
#[derive(Default)]
struct Seen {
    /// Wired ranges while the runtime ran, before the pressure.
    wired: Vec<(u64, u64, u64)>,
    /// The same after it.
    wired_after: Vec<(u64, u64, u64)>,
    /// The task's own page-outs during the pressure.
    pageouts: u64,
    /// Pages of the pressure region resident at its end.
    resident: u64,
    /// The blocked receive's result.
    got: Option<Result<(u64, u64), Error>>,
    /// Steps the other thread made while the receive was blocked.
    progress: u64,
}

/// Writes every page of a fresh region twice as large as user memory: the task's own
/// page-outs over it, and the region's resident pages at the end.
fn pressure() -> Result<(u64, u64), Error> {
    let before = baton_rt::paging::stats()?.pageouts;
    let len = PRESSURE_PAGES * P;
    let va = baton_rt::vm::allocate(None, len, baton_rt::vm::PROT_RW)?;
    for i in 0..PRESSURE_PAGES {
        // SAFETY: `va` maps `len` bytes, read-write, only this task's.
        unsafe { ((va + i * P) as *mut u64).write_volatile(i) };
    }
    let resident = baton_rt::vm::query(va).map(|r| r.resident)?;
    let outs = baton_rt::paging::stats()?.pageouts - before;
    // SAFETY: ours; nothing refers to it.
    unsafe { baton_rt::vm::deallocate(va, len)? };
    Ok((outs, resident))
}

fn round(port: u64, q: u64) -> Result<(), Failed> {
    let outside = wired_ranges();
    check!(
        outside.is_empty(),
        "without a virtual processor, nothing of the task's heap is wired ({outside:x?})"
    );
    let (seen, st) = sting::run(Config::new(1, Kind::Fifo).kernel_upcalls(2), move || {
        let mut seen = Seen {
            wired: wired_ranges(),
            ..Seen::default()
        };
        match pressure() {
            Ok((outs, resident)) => {
                seen.pageouts = outs;
                seen.resident = resident;
            }
            Err(e) => println!("{TEST}: the pressure failed: {}", e.name()),
        }
        seen.wired_after = wired_ranges();
        let counter = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (c, d) = (counter.clone(), done.clone());
        let busy = sting::fork(move || {
            while !d.load(Acquire) {
                c.fetch_add(1, Relaxed);
                sting::yield_now();
            }
        });
        let c = counter.clone();
        let receiver = sting::fork(move || {
            // The busy thread runs a while first: its pages, paged out by the pressure,
            // are back before the receive blocks. (Waiting in the kernel, not by yielding:
            // a thread that only yields kept the processor from the busy thread once that
            // one had blocked in a page-in, and the test hung.)
            for _ in 0..1000 {
                if c.load(Relaxed) >= 100 {
                    break;
                }
                let _ = baton_rt::sleep_ns(1_000_000);
            }
            let _ = request(q, PEER_DELAY, 1);
            let before = c.load(Relaxed);
            let r = receive(port, 5_000_000_000);
            (r, c.load(Relaxed) - before)
        });
        if let Ok(&(r, progress)) = receiver.value() {
            seen.got = Some(r);
            seen.progress = progress;
        }
        done.store(true, Release);
        let _ = busy.value();
        seen
    });
    let whole = |w: &[(u64, u64, u64)]| w.iter().all(|&(s, e, r)| r == (e - s) / P);
    println!(
        "{TEST}: wired ranges {:x?} before the pressure, {:x?} after; {} page-outs, {} of {PRESSURE_PAGES} pages resident; receive {:?}, progress {}; kernel blocks {}, unblocks {}",
        seen.wired,
        seen.wired_after,
        seen.pageouts,
        seen.resident,
        seen.got,
        seen.progress,
        st.kernel_blocks,
        st.kernel_unblocks
    );
    check!(
        !seen.wired.is_empty() && whole(&seen.wired),
        "with kernel upcalls on, the task has wired ranges (its upcall pages), wholly resident ({} ranges)",
        seen.wired.len()
    );
    let gone = wired_ranges();
    check!(
        gone.is_empty(),
        "the processor destroyed, its upcall pages are unwired ({gone:x?})"
    );
    check!(
        seen.pageouts > 0 && seen.resident < PRESSURE_PAGES,
        "writing {PRESSURE_PAGES} pages in 256 frames paged the task's own pages out ({} page-outs, {} pages resident)",
        seen.pageouts,
        seen.resident
    );
    check!(
        seen.wired_after == seen.wired,
        "meanwhile every wired range (the upcall stack's event pages, the mailbox) stayed wholly resident"
    );
    check!(
        matches!(seen.got, Some(Ok((PEER_ID, n))) if n >= 1),
        "then a thread blocked in a kernel receive resumed with the peer's message ({:?})",
        seen.got
    );
    check!(
        seen.progress > 0 && st.kernel_blocks >= 1 && st.kernel_unblocks == st.kernel_blocks,
        "its Block upcall arrived and its Unblock came back: the processor's other thread ran meanwhile ({} steps; {} blocks, {} unblocks)",
        seen.progress,
        st.kernel_blocks,
        st.kernel_unblocks
    );
    Ok(())
}

/// The kernel's heap in use, its objects and its free frames (with this task's resident
/// pages), once they stop changing.
fn settled() -> Result<(u64, u64, u64), Failed> {
    let look = || -> Result<(u64, u64, u64), Error> {
        let s = baton_rt::stats()?;
        let v = baton_rt::vm::system_stats()?;
        // This task's own pages come and go with the pressure (which of them are resident
        // after a round is the clock's choice): its resident pages count as free.
        let own = baton_rt::vm::stats()?.resident;
        Ok((s.heap_used, v.objects, v.frames_free + own))
    };
    // Stable for ten looks in a row (a tenth of a second): on two CPUs a task's end is
    // carried out at its threads' next kernel entry, and a frame can come back late.
    let mut last = must("counts", look())?;
    let mut same = 0;
    for _ in 0..300 {
        must("sleep", baton_rt::sleep_ns(10_000_000))?;
        let now = must("counts", look())?;
        same = if now == last { same + 1 } else { 0 };
        if same == 10 {
            break;
        }
        last = now;
    }
    Ok(last)
}

fn run() -> Result<(), Failed> {
    let host = baton_rt::start::host_priv();
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let (_, driver) = must("start the driver", blk_client::start_driver(&mut buf, host))?;
    let pager = must(
        "start the default pager",
        swap_proto::start_pager_registered(&mut buf, host, driver, &["dpager", "1024"], 1024),
    )?;
    let port = must("port", port_allocate(0))?;
    must(
        "spawn vproc_peer",
        baton_rt::sys::spawn_with("vproc_peer", port),
    )?;
    let mut hello = [0u8; HEADER_SIZE + 16];
    must(
        "the peer's hello",
        msg_buf(&mut hello, MSG_RECEIVE, port, 5_000_000_000),
    )?;
    let h = MsgHeader::from_bytes(&hello).ok_or(Failed)?;
    let q = h.reply;
    check!(
        h.id == PEER_ID && q != 0,
        "the peer said hello with a send right to its port"
    );
    // The first round warms up what the kernel keeps once made (table slots, the runtime's
    // upcall stack, which it reuses); the third must leave what the second did.
    let mut after = [(0, 0, 0); 3];
    for (n, figures) in after.iter_mut().enumerate() {
        println!("{TEST}: round {}", n + 1);
        round(port, q)?;
        *figures = settled()?;
    }
    check!(
        after[1] == after[2],
        "a third round leaves the kernel's heap, objects and free frames as the second did ({:?} -> {:?})",
        after[1],
        after[2]
    );
    let _ = request(q, 0, 0);
    must("drop", cap_drop(q))?;
    must("drop", cap_drop(port))?;
    let notify = must("port", port_allocate(0))?;
    must("end the pager", baton_rt::task::terminate(pager))?;
    must(
        "its end",
        swap_proto::wait_end(pager, notify, 60_000_000_000),
    )?;
    must("drop", cap_drop(notify))?;
    // The driver ends when its last send right goes.
    must("drop", cap_drop(driver))
}
