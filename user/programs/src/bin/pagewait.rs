//! A call's later step waits for its buffer's page (`docs/vm.md`, "Paging", "A kernel copy
//! that meets a page that is out"), booted with user memory limited (`pageable=256`), the
//! disk driver (`blk`) and a default pager (`dpager`) on the disk's swap partition:
//!
//! - `pagewait_child` sends a request with `SEND | RECEIVE` from a buffer of its own and
//!   waits for the reply; memory pressure (`paging_child touch`, twice the frames) pages
//!   the buffer out meanwhile; the reply must arrive intact (the kernel brings the page
//!   back before it delivers, instead of refusing with `BadAddress`), and the request must
//!   have been sent once (its receive waited, its send was not made again);
//! - the child then sends from a second buffer to this task's port while its queue is
//!   full; the buffer is paged out while the send waits for room, and the message must
//!   arrive intact once room is made;
//! - the child's watcher thread must have seen a page of each buffer out while its call
//!   waited (otherwise the test proves nothing, and fails);
//! - two rounds; the second leaves the kernel's heap, objects and free frames where the
//!   first did.
//!
//! This task's own memory is wired, so that only the children's pages go out.
#![no_std]
#![no_main]

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../swap_proto.rs"]
mod swap_proto;

use baton_abi::ipc::{Disposition, MsgHeader};
use baton_rt::check::Failed;
use baton_rt::ipc::{
    cap_drop, data_word, port_allocate, port_make_send, IpcBuffer, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::paging::{self, PagingStats};
use baton_rt::{println, task, vm, Error, FOREVER};

baton_rt::entry!(main);

const TEST: &str = "pagewait";
/// The default pager's store, in pages.
const STORE: u64 = 1024;
/// How long a receive here waits at most.
const WAIT: u64 = 120_000_000_000;

// The child's protocol (`pagewait_child.rs`).
const REQUEST: u64 = 10;
const REPLY: u64 = 20;
const LATE: u64 = 30;
const REPORT: u64 = 40;
const FILLER: u64 = 99;
const OUT_SEEN: u64 = 35;
const LEN: usize = 200;

const fn byte(step: u64, i: usize) -> u8 {
    ((i as u64).wrapping_mul(7) ^ step.wrapping_mul(0x5b)).wrapping_add(3) as u8
}

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn sys() -> Result<PagingStats, Failed> {
    must("paging stats", paging::system_stats())
}

/// The kernel's heap in use, objects and free frames.
fn counts() -> Result<(u64, u64, u64), Failed> {
    let s = must("stats", baton_rt::stats())?;
    let v = must("vm stats", vm::system_stats())?;
    Ok((s.heap_used, v.objects, v.frames_free))
}

/// Waits until the task whose port is `task` has ended, then releases the name.
fn wait_end(task: u64, notify: u64) -> Result<(), Failed> {
    must("wait for the end", swap_proto::wait_end(task, notify, WAIT))
}

/// Polls the system counters until `done` holds.
fn until(what: &str, done: impl Fn(&PagingStats) -> bool) -> Result<PagingStats, Failed> {
    swap_proto::until(done).map_err(|e| {
        println!("TEST FAIL {TEST}: waiting for {what}: {e:?}");
        Failed
    })
}

/// Memory pressure: a child writes `pages` pages once and ends; then a moment for the
/// child's watcher to look.
fn pressure(pages: u64, notify: u64) -> Result<(), Failed> {
    must(
        "run paging_child",
        swap_proto::run_child("touch", pages, notify, WAIT),
    )?;
    must("sleep", baton_rt::sleep_ns(300_000_000))
}

fn run() -> Result<(), Failed> {
    let host = baton_rt::start::host_priv();
    let mut buf = must("IPC buffer", IpcBuffer::new())?;
    must("wire", swap_proto::wire_everything())?;
    let notify = must("port", port_allocate(0))?;
    let (driver_id, driver) = must("start blk", blk_client::start_driver(&mut buf, host))?;
    let driver_task = must(
        "blk's task port",
        baton_rt::host::task_port(host, driver_id),
    )?;
    let pager = must(
        "start dpager and wait for it to register",
        swap_proto::start_pager_registered(&mut buf, host, driver, &["dpager", "1024"], STORE),
    )?;
    let limit = sys()?.pageable_limit;
    let first = round(&mut buf, notify, limit, 1)?;
    let second = round(&mut buf, notify, limit, 2)?;
    check!(
        first == second,
        "a second round leaves the kernel's heap, objects and free frames as the first did ({first:?} -> {second:?})"
    );
    must("stop the default pager", task::terminate(pager))?;
    wait_end(pager, notify)?;
    must("drop the driver's port", cap_drop(driver))?;
    wait_end(driver_task, notify)?;
    must(
        "release the driver's DMA memory",
        baton_rt::memobj::dma_quarantine_release(host),
    )?;
    must("drop the port", cap_drop(notify))
}

/// One round with one child; the counts after it.
fn round(buf: &mut IpcBuffer, notify: u64, limit: u64, n: u32) -> Result<(u64, u64, u64), Failed> {
    println!("pagewait: round {n}");
    // A queue of one message: the child's late send finds it full.
    let port = must("port", port_allocate(1))?;
    let to_self = must("send right", port_make_send(port, false))?;
    let child = must(
        "start pagewait_child",
        task::run("pagewait_child", port, &["pagewait_child"], &[]),
    )?;
    let before = sys()?;

    // 1. The request; its reply once the child's buffer is out.
    must("the request", buf.msg(MSG_RECEIVE, port, WAIT))?;
    let h = buf.header();
    check!(h.id == REQUEST, "the child's request arrived (id {})", h.id);
    let reply_to = h.reply;
    // Pressure until the child's watcher says a page of its buffer is out (at most five
    // times), and once more.
    let mut seen = false;
    for _ in 0..5 {
        pressure(2 * limit, notify)?;
        if buf.msg(MSG_RECEIVE, port, 1_000_000_000).is_ok() && buf.header().id == OUT_SEEN {
            seen = true;
            break;
        }
    }
    check!(
        seen,
        "the child's watcher saw its waiting receive's buffer paged out"
    );
    pressure(2 * limit, notify)?;
    // The queue is filled for step 2 before the reply lets the child go on.
    must("the filler", buf.send(to_self, FILLER, &[], &[]))?;
    let mut data = [0u8; LEN];
    for (i, b) in data.iter_mut().enumerate() {
        *b = byte(1, i);
    }
    let reply = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
        dest: reply_to,
        id: REPLY,
        ..MsgHeader::default()
    };
    // With a send right to a signal port of ours (our own port will be full).
    let signal = must("signal port", port_allocate(0))?;
    let desc = baton_abi::ipc::Descriptor::port(signal, Disposition::MakeSend);
    must("the reply", buf.set(reply, &[desc], &data))?;
    must("the reply", buf.msg(MSG_SEND, 0, FOREVER))?;

    // 2. The child's send waits for room; its buffer goes out (pressure until the child's
    //    watcher says so, at most five times); room is made.
    let mut seen = false;
    for _ in 0..5 {
        pressure(2 * limit, notify)?;
        if buf.msg(MSG_RECEIVE, signal, 1_000_000_000).is_ok() && buf.header().id == OUT_SEEN {
            seen = true;
            break;
        }
    }
    check!(
        seen,
        "the child's watcher saw its waiting send's buffer paged out"
    );
    // Once more, now that the send surely waits: its buffer is out when room is made.
    pressure(2 * limit, notify)?;
    must("the filler back", buf.msg(MSG_RECEIVE, port, WAIT))?;
    check!(buf.header().id == FILLER, "the filler came back first");
    must("the late message", buf.msg(MSG_RECEIVE, port, WAIT))?;
    let h = buf.header();
    let intact = h.id == LATE
        && buf.data().len() == LEN
        && buf.data().iter().enumerate().all(|(i, &b)| b == byte(2, i));
    check!(
        intact,
        "a message sent from a buffer paged out while the send waited for room arrived intact (id {}, {} bytes)",
        h.id,
        buf.data().len()
    );

    // 3. The child's report; nothing else came (no second request).
    must("the report", buf.msg(MSG_RECEIVE, port, WAIT))?;
    let h = buf.header();
    check!(
        h.id == REPORT,
        "the child's report came next (id {}): the request was sent once",
        h.id
    );
    let words = [0, 1, 2].map(|i| data_word(buf.data(), i));
    check!(
        words[0] == 1,
        "the reply arrived intact in the child's buffer that was paged out"
    );
    check!(
        words[1] == 1 && words[2] == 1,
        "the child saw its buffers paged out while its calls waited (receive {}, send {})",
        words[1],
        words[2]
    );
    check!(
        buf.msg(MSG_RECEIVE, port, 0) == Err(Error::WouldBlock),
        "nothing more in the queue"
    );
    wait_end(child, notify)?;
    let after = sys()?;
    check!(
        after.pageins > before.pageins && after.pageouts > before.pageouts,
        "pages went out and came back ({} page-outs, {} page-ins)",
        after.pageouts - before.pageouts,
        after.pageins - before.pageins
    );
    until("the store empties", |s| s.store_used == 0)?;
    must("drop the signal port", cap_drop(signal))?;
    must("drop the send right", cap_drop(to_self))?;
    must("drop the port", cap_drop(port))?;
    // The counts once they stop changing (the tasks just ended go at their threads'
    // next kernel entry).
    let mut last = counts()?;
    for _ in 0..100 {
        must("sleep", baton_rt::sleep_ns(10_000_000))?;
        let now = counts()?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}
