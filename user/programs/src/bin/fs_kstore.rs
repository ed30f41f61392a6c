//! `fs_kstore`: what the kernel stores into a buffer through its direct map (a message
//! delivered into an IPC buffer, an exception's words written into a handler's buffer) is
//! a write of the page, though no translation's dirty bit sees it (`docs/vm.md`,
//! "Paging"). Booted with a small pageable limit (`pageable=256`), this task makes pages of
//! a file its buffers, through a shared writable mapping it never writes itself:
//!
//! 1. page 0 is the main thread's IPC buffer while another thread's call arrives in it;
//!    that thread then asks the file server to sync the file, whose flush must return
//!    page 0 (it is still a buffer);
//! 2. page 1 is the buffer in which the main thread, as exception handler, receives a
//!    worker's invalid-opcode exception, and answers it from another buffer;
//! 3. both pages stop being buffers, the task writes the file's other 766 pages, so that
//!    replacement evicts pages 0 and 1, and reads them again: each is asked of the server
//!    again and holds what the kernel wrote there; so does the file read from the disk by
//!    a new server.
//!
//! Without the kernel counting such stores as writes, the evicted pages were dropped as
//! clean and came back as the file's zeros, and the sync returned nothing.
//!
//! All of it runs at least twice: a round must leave the kernel's heap, objects, free
//! frames, ports and names where the round before it did (the servers, the driver and the
//! threads ended). Up to [`fs_client::MOST_ROUNDS`] rounds run, until two in a row agree:
//! on two CPUs under load, a later round can raise one of the kernel's high-water marks
//! (tables that keep the room they grew to) a little past where the first left it, which
//! the next round no longer does, while a leak shows after every round (see
//! [`fs_client::two_rounds`]).
#![no_std]
#![no_main]

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../fs_client.rs"]
mod fs_client;
#[path = "../fs_proto.rs"]
mod fs_proto;

use core::arch::asm;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_abi::exception::{ExcReply, ExceptionInfo, EXC_RAISE};
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_abi::vm::{PROT_READ, PROT_WRITE};
use baton_abi::{decode_result, Sys};
use baton_rt::check::Failed;
use baton_rt::exception::{exception_port_set, set_reply};
use baton_rt::ipc::{cap_drop, msg_buf, port_allocate, port_make_send, IpcBuffer};
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{memobj, println, Error};

baton_rt::entry!(main);

const TEST: &str = "fs_kstore";
const PAGES: u64 = 768;
const P: u64 = 4096;
const PATH: &str = "/KSTORE.BIN";
/// Bytes of each buffer page compared (the messages are shorter).
const SEEN: usize = 512;
const TEN_S: u64 = 10_000_000_000;
/// The call's id and its data words.
const CALL_ID: u64 = 0x4b53;
const CALL_WORDS: usize = 40;
/// What the handler puts in the worker's `rax`.
const MAGIC: u64 = 0x6b73_746f_7265;

/// Two threads a round, at most `MOST_ROUNDS` rounds.
static STACKS: StackPool<{ 2 * fs_client::MOST_ROUNDS as usize }, 32768> = StackPool::new();
/// The round (1, 2, ...): the counters below reach it once per round.
static ROUND: AtomicU32 = AtomicU32::new(0);
/// The server's port, the send right to the main thread's port, the sync's result.
static SERVER: AtomicU64 = AtomicU64::new(0);
static TO_MAIN: AtomicU64 = AtomicU64::new(0);
static SYNCED: AtomicU64 = AtomicU64::new(u64::MAX);
static WORKER_RAX: AtomicU64 = AtomicU64::new(0);
/// The main thread received the call and replied.
static ANSWERED: Counter = Counter::new(0);
/// The caller synced; the worker is to raise its exception; it resumed.
static SYNC_DONE: Counter = Counter::new(0);
static GO: Counter = Counter::new(0);
static WORKER_DONE: Counter = Counter::new(0);

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn call_word(j: usize) -> u64 {
    (j as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x6b73
}

fn round() -> u32 {
    ROUND.load(Ordering::Relaxed)
}

fn word(i: u64) -> u64 {
    i.wrapping_mul(0xff51_afd7_ed55_8ccd) ^ 0x6b5e
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// `ipc_buffer_set(va)` for the calling thread (the runtime's `IpcBuffer` keeps its own
/// page; this registers a page of the file instead, and back).
fn set_buffer(va: u64) -> Result<(), Error> {
    // SAFETY: touches no user memory (the kernel only translates and wires `va`).
    decode_result(unsafe { baton_rt::raw::syscall1(Sys::IpcBufferSet as u64, va) }).map(|_| ())
}

/// The first [`SEEN`] bytes of the page at `va`, read (never written).
fn snapshot(va: u64) -> [u8; SEEN] {
    let mut out = [0u8; SEEN];
    for (i, b) in out.iter_mut().enumerate() {
        // SAFETY: `va` maps a readable page of the file.
        *b = unsafe { ((va + i as u64) as *const u8).read_volatile() };
    }
    out
}

/// The caller: one call into the main thread's buffer, then a sync of the file.
fn caller(_: u64) {
    let r = (|| -> Result<u64, Error> {
        let mut b = IpcBuffer::new()?;
        let reply = port_allocate(0)?;
        let mut data = [0u8; CALL_WORDS * 8];
        for (j, w) in data.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&call_word(j).to_le_bytes());
        }
        b.set(
            MsgHeader {
                bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
                dest: TO_MAIN.load(Ordering::Relaxed),
                reply,
                id: CALL_ID,
                ..MsgHeader::default()
            },
            &[],
            &data,
        )?;
        b.msg(MSG_SEND | MSG_RECEIVE, reply, TEN_S)?;
        let _ = cap_drop(reply);
        ANSWERED.wait_for(round(), TEN_S)?;
        let fs = fs_client::Fs::new(SERVER.load(Ordering::Relaxed))?;
        // The client's reply port goes with `fs`.
        fs.sync(&mut b, PATH)
    })();
    SYNCED.store(r.unwrap_or(u64::MAX - 1), Ordering::Relaxed);
    SYNC_DONE.increment();
}

/// The worker: an invalid opcode once told to; records `rax` after it.
fn worker(_: u64) {
    if GO.wait_for(round(), TEN_S).is_ok() {
        // Give the handler time to wait in its receive (the exception's fast path).
        let _ = baton_rt::sleep_ns(20_000_000);
        let rax: u64;
        // SAFETY: `ud2` raises an exception; the handler resumes after it with `rax` set.
        unsafe { asm!("ud2", inout("rax") 0u64 => rax) };
        WORKER_RAX.store(rax, Ordering::Relaxed);
    }
    WORKER_DONE.increment();
}

/// Step 1: page 0 at `va` is the main thread's buffer while a call arrives in it and the
/// file is synced. Returns what the kernel wrote there.
fn call_into(va: u64) -> Result<[u8; SEEN], Failed> {
    let port = must("port", port_allocate(0))?;
    TO_MAIN.store(
        must("send right", port_make_send(port, false))?,
        Ordering::Relaxed,
    );
    must("register page 0", set_buffer(va))?;
    must(
        "spawn the caller",
        spawn(STACKS.take().ok_or(Failed)?, caller, 0),
    )?;
    // SAFETY: the kernel writes only the registered buffer, page 0 of the file, which this
    // task never writes itself.
    let got = unsafe { baton_rt::ipc::msg_raw(MSG_RECEIVE, port, TEN_S, 0, 0) };
    must("receive the call", decode_result(got))?;
    let seen = snapshot(va);
    let h = MsgHeader::from_bytes(&seen).ok_or(Failed)?;
    let words_ok = (0..CALL_WORDS).all(|j| {
        let at = HEADER_SIZE + 8 * j;
        seen.get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            == Some(call_word(j))
    });
    baton_rt::check!(
        TEST,
        h.id == CALL_ID && h.size as usize == HEADER_SIZE + 8 * CALL_WORDS && words_ok,
        "a call arrived in page 0 of the file, the main thread's IPC buffer"
    );
    // The reply from a buffer of the stack: page 0 stays as the kernel wrote it.
    let mut reply = [0u8; HEADER_SIZE];
    reply.copy_from_slice(
        &MsgHeader {
            bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
            size: HEADER_SIZE as u32,
            dest: h.reply,
            id: CALL_ID + 1,
            ..MsgHeader::default()
        }
        .to_bytes(),
    );
    must("reply", msg_buf(&mut reply, MSG_SEND, 0, TEN_S))?;
    ANSWERED.increment();
    must(
        "the caller's sync",
        SYNC_DONE.wait_for(round(), 3 * TEN_S).map(|_| ()),
    )?;
    let synced = SYNCED.load(Ordering::Relaxed);
    baton_rt::check!(
        TEST,
        synced == 1,
        "a sync while page 0 is still a buffer returns it ({synced} pages written back)"
    );
    must("drop", cap_drop(TO_MAIN.load(Ordering::Relaxed)))?;
    must("drop", cap_drop(port))?;
    Ok(seen)
}

/// Step 2: page 1 at `va` is the main thread's buffer while it receives a worker's
/// exception; it answers from `buf`. Returns what the kernel wrote there.
fn exception_into(va: u64, buf: &mut IpcBuffer) -> Result<[u8; SEEN], Failed> {
    let port = must("port", port_allocate(0))?;
    let tid = must(
        "spawn the worker",
        spawn(STACKS.take().ok_or(Failed)?, worker, 0),
    )?;
    must("the worker's exception port", exception_port_set(tid, port))?;
    must("register page 1", set_buffer(va))?;
    GO.increment();
    // SAFETY: the kernel writes only the registered buffer, page 1 of the file, which this
    // task never writes itself.
    let got = unsafe { baton_rt::ipc::msg_raw(MSG_RECEIVE, port, TEN_S, 0, 0) };
    must("receive the exception", decode_result(got))?;
    let seen = snapshot(va);
    let h = MsgHeader::from_bytes(&seen).ok_or(Failed)?;
    let info = seen
        .get(HEADER_SIZE..h.size as usize)
        .and_then(ExceptionInfo::from_bytes)
        .filter(|_| h.id == EXC_RAISE)
        .ok_or(Failed)?;
    baton_rt::check!(
        TEST,
        info.kind == 6 && info.thread == tid,
        "the worker's invalid opcode arrived in page 1 of the file, the handler's buffer"
    );
    // Answered from the runtime's own buffer: page 1 stays as the kernel wrote it.
    must(
        "register the buffer again",
        set_buffer(buf.view().as_ptr() as u64),
    )?;
    let mut regs = info.regs;
    regs.rip += 2; // past `ud2`
    regs.rax = MAGIC;
    buf.set_header(MsgHeader {
        reply: h.reply,
        ..MsgHeader::default()
    });
    must("reply", set_reply(buf, ExcReply::Set(regs)))?;
    must("send the reply", buf.msg(MSG_SEND, 0, TEN_S))?;
    must(
        "the worker's end",
        WORKER_DONE.wait_for(round(), TEN_S).map(|_| ()),
    )?;
    baton_rt::check!(
        TEST,
        WORKER_RAX.load(Ordering::Relaxed) == MAGIC,
        "the worker resumed with the handler's registers"
    );
    must("drop", cap_drop(port))?;
    Ok(seen)
}

fn run() -> Result<(), Failed> {
    let host = baton_rt::start::host_priv();
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    fs_client::two_rounds(TEST, host, |n| {
        ROUND.store(n, Ordering::Relaxed);
        SYNCED.store(u64::MAX, Ordering::Relaxed);
        one_round(host, &mut buf)
    })?;
    println!("fs_kstore: done");
    Ok(())
}

/// Stops the file server `fs` (task `id`), waits for its end and drops its name (the
/// client's reply port goes with `fs`).
fn stop(host: u64, id: u64, fs: fs_client::Fs, buf: &mut IpcBuffer) -> Result<(), Failed> {
    must(
        "stop the server",
        fs_client::end_and_wait(host, id, || fs.stop(buf)),
    )?;
    must("drop", cap_drop(fs.server))
}

/// The test, once: the driver and the servers have ended when it returns.
fn one_round(host: u64, buf: &mut IpcBuffer) -> Result<(), Failed> {
    let (driver_id, driver) = must("start the driver", blk_client::start_driver(buf, host))?;
    let (id, server) = must("start the server", fs_client::start_server(buf, driver))?;
    let fs = must("client", fs_client::Fs::new(server))?;
    SERVER.store(server, Ordering::Relaxed);
    let limit = must("paging stats", baton_rt::paging::system_stats()).map(|s| s.pageable_limit)?;
    baton_rt::check!(
        TEST,
        limit < PAGES / 2,
        "user memory is limited to {limit} frames"
    );
    let len = PAGES * P;
    let (obj, _) = must("create", fs.create(buf, PATH, len))?;
    let rw = memobj::map_flags(PROT_READ | PROT_WRITE, PROT_READ | PROT_WRITE, false, 0);
    let va = must("map shared", memobj::map(obj, len, 0, rw))?;

    let page0 = call_into(va)?;
    let page1 = exception_into(va + P, buf)?;

    // Neither page is a buffer now; the task writes every other page of the file, three
    // times what user memory may hold, so replacement takes pages 0 and 1 (not touched
    // since).
    for i in 2..PAGES {
        // SAFETY: `va` maps `PAGES` writable pages of the file, only this task's.
        unsafe { ((va + i * P) as *mut u64).write_volatile(word(i)) };
    }
    let before = must("info", fs.info(buf))?;
    let (again0, again1) = (snapshot(va), snapshot(va + P));
    let after = must("info", fs.info(buf))?;
    let asked = after[1] - before[1];
    baton_rt::check!(
        TEST,
        asked == 2,
        "pages 0 and 1 were evicted: reading them again asked the server for {asked} pages"
    );
    baton_rt::check!(
        TEST,
        again0 == page0 && again1 == page1,
        "after eviction, pages 0 and 1 hold what the kernel wrote there (call {}, exception {})",
        if again0 == page0 { "kept" } else { "lost" },
        if again1 == page1 { "kept" } else { "lost" }
    );
    // SAFETY: ours; nothing refers to it (neither page is a buffer any more).
    must("unmap", unsafe { baton_rt::vm::deallocate(va, len) })?;
    must("drop", cap_drop(obj))?;
    stop(host, id, fs, buf)?;

    // From the disk, through a new server.
    let (id, server) = must("restart the server", fs_client::start_server(buf, driver))?;
    let fs = must("client", fs_client::Fs::new(server))?;
    let (obj, size) = must("open", fs.open(buf, PATH))?;
    let ro = memobj::map_flags(PROT_READ, PROT_READ, false, 0);
    let va = must("map", memobj::map(obj, size, 0, ro))?;
    // The other pages too: the server wrote every page back before it answered the stop
    // (the pages still resident then were dirty).
    let wrong = (2..PAGES)
        // SAFETY: `va` maps the file's `PAGES` pages, readable.
        .filter(|i| unsafe { ((va + i * P) as *const u64).read_volatile() } != word(*i))
        .count();
    let (disk0, disk1) = (snapshot(va), snapshot(va + P));
    let differ = |a: &[u8; SEEN], b: &[u8; SEEN]| a.iter().zip(b).filter(|(x, y)| x != y).count();
    baton_rt::check!(
        TEST,
        disk0 == page0 && disk1 == page1 && wrong == 0,
        "read from the disk by a new server, the file holds what the kernel wrote in its buffers ({} and {} bytes differ; {wrong} of the task's own pages differ)",
        differ(&disk0, &page0),
        differ(&disk1, &page1)
    );
    // SAFETY: ours.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, size) })?;
    must("drop", cap_drop(obj))?;
    must("delete", fs.delete(buf, PATH))?;
    stop(host, id, fs, buf)?;
    must(
        "end the driver",
        fs_client::end_and_wait(host, driver_id, || cap_drop(driver)),
    )
}
