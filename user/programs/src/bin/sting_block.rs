//! `sting_block`: a Sting thread that blocks in the kernel gives its virtual processor
//! back on every path (the Block and Unblock upcalls, `docs/sting.md`, "The kernel half"),
//! and an immediate signal reaches a thread running on another virtual processor at once.
//!
//! On one virtual processor with the kernel's upcalls, a counting thread runs beside a
//! thread that blocks in the kernel; the counter must move while the other is blocked,
//! and the blocked thread must resume with the right result:
//!
//! - an RPC through the thread's IPC buffer to another task (`sting_block_peer`) that
//!   waits for it the way the kernel's RPC fast path takes calls, answering after 50 ms;
//! - a migrating call into a server (an activation pool of this task) whose procedure
//!   sleeps 50 ms in the kernel: the thread blocks in the server, and its registers there
//!   never reach the runtime;
//! - an invalid opcode whose exception handler (a kernel thread of this task) answers after
//!   50 ms, with the processor busy (the Unblock is queued) and idle (it takes the
//!   processor over): the thread resumes past the instruction with every register (`rcx`
//!   and `r11`, which a system call's return clobbers, too) and its vector registers as
//!   they were at the fault;
//! - a page of a pager-backed object whose pager (a kernel thread of this task) supplies
//!   it after 50 ms: the thread's load completes with the page's value and every register
//!   kept;
//! - `act_get_state` on another kernel thread of this task, suspended while it is in a
//!   migrating call whose server sleeps 200 ms: the call waits in the kernel until that
//!   thread comes home and stops, and then reads its registers.
//!
//! Then, on two virtual processors with preemption on (a quantum far longer than the
//! test), a thread spinning in its own code with no checkpoint on processor 1 gets an
//! immediate signal from processor 0: the kernel stops it at once (`vp_interrupt`, a
//! Checkpoint upcall), and the handler runs in its context while it is still spinning.
//!
//! The kernel's threads and charged memory are back to the baseline afterwards.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use baton_abi::exception::ExcReply;
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_rt::check::{finish, Failed};
use baton_rt::exception::{exception_port_set, info, set_reply};
use baton_rt::ipc::{cap_drop, data_word, msg_buf, port_allocate, port_make_send, IpcBuffer};
use baton_rt::pager::{self, Request, DATA_REQUEST, PAGE_SIZE, RECEIVE_SIZE};
use baton_rt::{println, Error};
use core::arch::asm;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use core::sync::atomic::{AtomicBool, AtomicU64};
use sting::{Config, Kind, Priority};

baton_rt::entry!(main);

const TEST: &str = "sting_block";
/// The id of `sting_block_peer`'s messages.
const PEER_ID: u64 = 0x5b10_0001;
/// How long each blocking partner (the peer, the server, the handler, the pager) waits
/// before it answers: long enough for the counter to be seen moving. On the clock, which
/// runs on while a loaded host leaves a virtual CPU waiting: at 50 ms the peer once
/// answered before the processor had run its other thread at all (0 steps).
const DELAY: u64 = 200_000_000;
/// The id of the message that ends a helper thread.
const STOP: u64 = 0x5b10_0fff;
/// What the exception handler puts in `r12`, and the pager in the page.
const MARK: u64 = 0x5eed_0000_5eed;
const PAGE_VALUE: u64 = 0x9a9e_5b10_0000_0001;
/// Values kept live in registers across a fault.
const RCX: u64 = 0x1111_2222_3333_4444;
const R11: u64 = 0x5555_6666_7777_8888;
const XMM6: u64 = 0x3ff0_0000_0000_0001;
const XMM7: u64 = 0xc000_0000_dead_beef;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) }
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    finish(TEST, run())
}

type Measure = (u64, u64);

fn baseline() -> Measure {
    baton_rt::sys::stats().map_or((0, 0), |s| (s.threads, s.kmem_charged))
}

/// The baseline once this task's other kernel threads are gone (the peer's one stays).
fn settled() -> Measure {
    let mut now = baseline();
    for _ in 0..200 {
        if now.0 == 2 {
            break;
        }
        let _ = baton_rt::sys::sleep_ns(10_000_000);
        now = baseline();
    }
    now
}

fn run() -> Result<(), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    must(
        "spawn sting_block_peer",
        baton_rt::sys::spawn_with("sting_block_peer", port),
    )?;
    let mut hello = [0u8; HEADER_SIZE];
    must(
        "the peer's hello",
        msg_buf(&mut hello, MSG_RECEIVE, port, 5_000_000_000),
    )?;
    let h = MsgHeader::from_bytes(&hello).unwrap_or_default();
    check!(
        h.id == PEER_ID && h.reply != 0,
        "the peer said hello with a send right to its port"
    );
    let q = h.reply;
    // The migrating server, made once (baton-rt keeps its activations' stacks for good).
    let server = must("port_allocate", port_allocate(0))?;
    must(
        "attach activations",
        baton_rt::migrate::attach(server, 2, slow_server),
    )?;
    // The first two rounds warm up what the kernel keeps once made (table slots, the main
    // thread's exception reply port, and what the first round's two processors left). A
    // later round must give back all it takes: two in a row must, of at most five (a
    // table that grows once more on one CPU count is not a leak; a leak grows each time).
    round(q, server, true)?;
    round(q, server, false)?;
    let mut clean = 0;
    let mut last = (settled(), settled());
    for _ in 0..5 {
        let base = settled();
        round(q, server, false)?;
        let mut now = settled();
        for _ in 0..100 {
            if now == base {
                break;
            }
            let _ = baton_rt::sys::sleep_ns(10_000_000);
            now = baseline();
        }
        last = (base, now);
        clean = if now == base { clean + 1 } else { 0 };
        if clean == 2 {
            break;
        }
    }
    let _ = peer_call(q, 0, 0);
    let _ = cap_drop(q);
    let _ = cap_drop(port);
    let _ = cap_drop(server);
    let (base, now) = last;
    check!(
        clean == 2,
        "two rounds in a row gave back every kernel thread and all charged memory they took: {base:?} before the last, {now:?} after"
    );
    Ok(())
}

/// One of each case. The signal's two processors (one a kernel thread whose stack
/// baton-rt keeps for good, and so more of the program's heap) run in the first round
/// only, before the baseline.
fn round(q: u64, server: u64, first: bool) -> Result<(), Failed> {
    fast_rpc(q, first)?;
    migrating(server, first)?;
    exception_wait(true, first)?;
    exception_wait(false, first)?;
    page_in(first)?;
    act_state_wait(server, first)?;
    if first {
        signal_across()?;
    }
    Ok(())
}

/// Runs `f` in a sting thread on one virtual processor with the kernel's upcalls, beside
/// a thread that counts (and yields) all the while when `busy`: `f`'s result, how far the
/// counter moved while `f` ran, and the runtime's counters.
fn beside_a_counter<T, F>(busy: bool, f: F) -> (T, u64, sting::Stats)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + Sync + Copy + 'static,
{
    let ((r, progress), st) = sting::run(Config::new(1, Kind::Fifo).kernel_upcalls(2), move || {
        let counter = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (c, d) = (counter.clone(), done.clone());
        let counting = sting::fork(move || {
            while busy && !d.load(Acquire) {
                c.fetch_add(1, Relaxed);
                sting::yield_now();
            }
        });
        while busy && counter.load(Relaxed) == 0 {
            sting::yield_now();
        }
        let c = counter.clone();
        let t = sting::fork(move || {
            let before = c.load(Relaxed);
            let r = f();
            (r, c.load(Relaxed) - before)
        });
        t.wait();
        let out = t.value().ok().copied();
        done.store(true, Release);
        let _ = counting.value();
        out.map_or((None, 0), |(r, p)| (Some(r), p))
    });
    match r {
        Some(r) => (r, progress, st),
        None => panic!("sting_block: the blocking thread was terminated"),
    }
}

fn upcalls_ok(what: &str, st: &sting::Stats) -> Result<(), Failed> {
    check!(
        st.kernel_blocks >= 1 && st.kernel_unblocks == st.kernel_blocks,
        "{what}: each block was an upcall and came back ({} blocks, {} unblocks)",
        st.kernel_blocks,
        st.kernel_unblocks
    );
    Ok(())
}

/// One RPC to the peer through `ipc`: `[delay, value]` out, its answer's id and word back.
fn peer_rpc(ipc: &mut IpcBuffer, q: u64, delay: u64, value: u64) -> Result<(u64, u64), Error> {
    let reply = port_allocate(0)?;
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: q,
        reply,
        id: 1,
        ..MsgHeader::default()
    };
    let mut data = [0u8; 16];
    data[..8].copy_from_slice(&delay.to_le_bytes());
    data[8..].copy_from_slice(&value.to_le_bytes());
    ipc.set(h, &[], &data)?;
    let r = ipc.msg(MSG_SEND | MSG_RECEIVE, reply, baton_abi::FOREVER);
    let _ = cap_drop(reply);
    r?;
    Ok((ipc.header().id, data_word(ipc.data(), 0)))
}

/// A one-way request to the peer (`value` 0 ends it).
fn peer_call(q: u64, delay: u64, value: u64) -> Result<(), Error> {
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
    buf[HEADER_SIZE + 8..].copy_from_slice(&value.to_le_bytes());
    msg_buf(&mut buf, MSG_SEND, 0, baton_abi::FOREVER)
}

/// An RPC of the kind the kernel's fast path takes (through the caller's IPC buffer, to a
/// receiver in another task waiting through its own).
fn fast_rpc(q: u64, first: bool) -> Result<(), Failed> {
    let (got, progress, st) = beside_a_counter(true, move || {
        // The buffer is registered for the kernel thread that carries the processor now,
        // and the call is made before any runtime call could move the thread.
        let mut ipc = IpcBuffer::new()?;
        peer_rpc(&mut ipc, q, DELAY, 41)
    });
    if first {
        println!("fast-path RPC: {got:?}, progress while blocked {progress}");
    }
    check!(
        got == Ok((PEER_ID, 42)),
        "an RPC through the IPC buffer resumed with the peer's answer ({got:?})"
    );
    check!(
        progress > 0,
        "the other thread of its virtual processor ran while the RPC waited ({progress} steps)"
    );
    upcalls_ok("RPC", &st)
}

/// Calls the migrating server's procedure has taken.
static IN_SERVER: AtomicU64 = AtomicU64::new(0);
/// The value whose call the server holds four times as long (`act_state_wait`).
const LONG_CALL: u64 = 100;

/// The migrating server's procedure: sleeps in the kernel, then answers `value + 1`.
fn slow_server(req: &mut baton_rt::migrate::Request) {
    IN_SERVER.fetch_add(1, SeqCst);
    let value = data_word(req.data(), 0);
    let delay = if value == LONG_CALL { 4 * DELAY } else { DELAY };
    let _ = baton_rt::sys::sleep_ns(delay);
    req.reply(PEER_ID, &(value + 1).to_le_bytes());
}

/// One migrating call of `value` to the server `send` names: the answer's id and word.
fn call_server(send: u64, value: u64) -> Result<(u64, u64), Error> {
    let mut buf = [0u8; HEADER_SIZE + 8];
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: (HEADER_SIZE + 8) as u32,
        dest: send,
        id: 1,
        ..MsgHeader::default()
    };
    buf[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    buf[HEADER_SIZE..].copy_from_slice(&value.to_le_bytes());
    msg_buf(&mut buf, MSG_SEND | MSG_RECEIVE, 0, baton_abi::FOREVER)?;
    let h = MsgHeader::from_bytes(&buf).ok_or(Error::BadFormat)?;
    Ok((h.id, data_word(buf.get(HEADER_SIZE..).unwrap_or(&[]), 0)))
}

/// What [`long_caller`]'s call answered: 1 + the answer's word, 0 until it returns,
/// `u64::MAX` on an error.
static LONG_DONE: AtomicU64 = AtomicU64::new(0);

/// A kernel thread of this task (not a sting thread) making the long call to the server
/// `send` names.
fn long_caller(send: u64) {
    let r = match call_server(send, LONG_CALL) {
        Ok((PEER_ID, v)) => v + 1,
        _ => u64::MAX,
    };
    LONG_DONE.store(r, SeqCst);
}

/// A sting thread's `act_get_state` that waits in the kernel for another thread to stop
/// leaves its virtual processor to the others, and reads the registers once it has.
fn act_state_wait(server: u64, first: bool) -> Result<(), Failed> {
    use baton_rt::migrate::{get_state, suspend, Act};
    let send = must("port_make_send", port_make_send(server, false))?;
    let entered = IN_SERVER.load(SeqCst);
    LONG_DONE.store(0, SeqCst);
    let w = must(
        "spawn the caller",
        baton_rt::thread::spawn(stack(), long_caller, send),
    )?;
    let mut inside = false;
    for _ in 0..2_000 {
        if IN_SERVER.load(SeqCst) > entered {
            inside = true;
            break;
        }
        let _ = baton_rt::sys::sleep_ns(1_000_000);
    }
    check!(
        inside,
        "act_get_state: the other thread's call reached the server"
    );
    must("suspend the caller", suspend(Act::Thread(w), true))?;
    let (got, progress, st) = beside_a_counter(true, move || {
        get_state(Act::Thread(w)).map(|r| (r.rip != 0, LONG_DONE.load(SeqCst)))
    });
    must("resume the caller", suspend(Act::Thread(w), false))?;
    for _ in 0..2_000 {
        if LONG_DONE.load(SeqCst) != 0 {
            break;
        }
        let _ = baton_rt::sys::sleep_ns(1_000_000);
    }
    let _ = cap_drop(send);
    if first {
        println!("act_get_state's wait: {got:?}, progress while blocked {progress}");
    }
    check!(
        got == Ok((true, 0)),
        "act_get_state waited until the other thread stopped at home, and read its registers before it went on ({got:?})"
    );
    check!(
        LONG_DONE.load(SeqCst) == LONG_CALL + 2,
        "the other thread's call completed with its answer once resumed ({})",
        LONG_DONE.load(SeqCst)
    );
    check!(
        progress > 0,
        "act_get_state: the other thread of its virtual processor ran while it waited ({progress} steps)"
    );
    upcalls_ok("act_get_state", &st)?;
    settled();
    Ok(())
}

fn migrating(port: u64, first: bool) -> Result<(), Failed> {
    let send = must("port_make_send", port_make_send(port, false))?;
    let (got, progress, st) = beside_a_counter(true, move || call_server(send, 6));
    let _ = cap_drop(send);
    if first {
        println!("migrating call: {got:?}, progress while blocked {progress}");
    }
    check!(
        got == Ok((PEER_ID, 7)),
        "a migrating call whose server slept resumed with its answer ({got:?})"
    );
    check!(
        progress > 0,
        "the other thread ran while the call slept in the server ({progress} steps)"
    );
    upcalls_ok("migrating call", &st)
}

/// Registers as a fault left them: `rcx`, `r11`, `r12`, `xmm6`, `xmm7`, and what was
/// loaded (the page-in case).
type Live = (u64, u64, u64, u64, u64, u64);

/// An invalid opcode with values live in `rcx`, `r11`, `xmm6` and `xmm7`; what they hold
/// after the handler resumed the thread past it (and `r12`, which the handler sets).
fn ud2_with_live_registers() -> Live {
    let (mut x6, mut x7) = (XMM6, XMM7);
    let (rcx, r11, r12): (u64, u64, u64);
    // SAFETY: the `ud2` faults; the test's exception handler resumes past it with the
    // registers as they were but `r12`, which the block declares as changed. Nothing
    // else is touched.
    unsafe {
        asm!(
            "movq xmm6, {a}",
            "movq xmm7, {b}",
            "ud2",
            "movq {a}, xmm6",
            "movq {b}, xmm7",
            a = inout(reg) x6,
            b = inout(reg) x7,
            inout("rcx") RCX => rcx,
            inout("r11") R11 => r11,
            inout("r12") 0u64 => r12,
            out("xmm6") _,
            out("xmm7") _,
        );
    }
    (rcx, r11, r12, x6, x7, 0)
}

/// A load from `addr` (a page its pager has not supplied yet) with values live in `rcx`,
/// `r11`, `r12`, `xmm6` and `xmm7`.
fn load_with_live_registers(addr: u64) -> Live {
    let (mut x6, mut x7) = (XMM6, XMM7);
    let (rcx, r11, r12, v): (u64, u64, u64, u64);
    // SAFETY: `addr` is a mapped, readable page of a pager-backed object that outlives
    // the call; the load waits for the pager. Only the declared registers change.
    unsafe {
        asm!(
            "movq xmm6, {a}",
            "movq xmm7, {b}",
            "mov {v}, qword ptr [{p}]",
            "movq {a}, xmm6",
            "movq {b}, xmm7",
            a = inout(reg) x6,
            b = inout(reg) x7,
            p = in(reg) addr,
            v = out(reg) v,
            inout("rcx") RCX => rcx,
            inout("r11") R11 => r11,
            inout("r12") MARK => r12,
            out("xmm6") _,
            out("xmm7") _,
        );
    }
    (rcx, r11, r12, x6, x7, v)
}

/// The receive right of the exception handler's port.
static HANDLER_PORT: AtomicU64 = AtomicU64::new(0);
/// Exceptions the handler answered.
static HANDLED: AtomicU64 = AtomicU64::new(0);

/// The exception handler: after `DELAY`, resumes each faulting thread past its 2-byte
/// `ud2` with `r12` = `MARK`; ends on a message that is not an exception.
fn handler_thread(_: u64) {
    let port = HANDLER_PORT.load(SeqCst);
    let Ok(mut ipc) = IpcBuffer::new() else {
        return;
    };
    if ipc.msg(MSG_RECEIVE, port, baton_abi::FOREVER).is_err() {
        return;
    }
    while let Some(exc) = info(&ipc) {
        let _ = baton_rt::sys::sleep_ns(DELAY);
        let mut regs = exc.regs;
        regs.rip += 2;
        regs.r12 = MARK;
        HANDLED.fetch_add(1, SeqCst);
        if set_reply(&mut ipc, ExcReply::Set(regs)).is_err()
            || ipc
                .msg(MSG_SEND | MSG_RECEIVE, port, baton_abi::FOREVER)
                .is_err()
        {
            return;
        }
    }
}

/// Bytes of a helper kernel thread's stack.
const HELPER_STACK: usize = 32 * 1024;
/// The helper threads' stacks, made once and reused: each case waits for its helper to
/// end (`settled`) before it returns.
static STACK: AtomicU64 = AtomicU64::new(0);

/// The helper thread's stack.
fn stack() -> &'static mut [u8] {
    let mut at = STACK.load(SeqCst);
    if at == 0 {
        let made = alloc::boxed::Box::leak(alloc::vec![0u8; HELPER_STACK].into_boxed_slice());
        at = made.as_mut_ptr() as u64;
        STACK.store(at, SeqCst);
    }
    // SAFETY: a leaked block of `HELPER_STACK` bytes, used by one helper thread at a time:
    // the case that started the last one waited for it to end.
    unsafe { core::slice::from_raw_parts_mut(at as *mut u8, HELPER_STACK) }
}

/// Sends a `STOP` message to the port whose receive right is `port`.
fn stop(port: u64) {
    if let Ok(send) = port_make_send(port, false) {
        let mut buf = [0u8; HEADER_SIZE];
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::MoveSend, Disposition::None, 0),
            size: HEADER_SIZE as u32,
            dest: send,
            id: STOP,
            ..MsgHeader::default()
        };
        buf.copy_from_slice(&h.to_bytes());
        if msg_buf(&mut buf, MSG_SEND, 0, 1_000_000_000).is_err() {
            let _ = cap_drop(send);
        }
    }
}

fn live_ok(what: &str, live: Live, loaded: u64) -> Result<(), Failed> {
    let (rcx, r11, r12, x6, x7, v) = live;
    check!(
        (rcx, r11, x6, x7) == (RCX, R11, XMM6, XMM7),
        "{what}: rcx, r11, xmm6 and xmm7 kept across the wait ({rcx:#x}, {r11:#x}, {x6:#x}, {x7:#x})"
    );
    check!(
        r12 == MARK && v == loaded,
        "{what}: the thread resumed where it should, with r12 {r12:#x} and the value {v:#x}"
    );
    Ok(())
}

fn exception_wait(busy: bool, first: bool) -> Result<(), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    HANDLER_PORT.store(port, SeqCst);
    let handled = HANDLED.load(SeqCst);
    must(
        "spawn the handler",
        baton_rt::thread::spawn(stack(), handler_thread, 0),
    )?;
    must("exception_port_set", exception_port_set(0, port))?;
    let (live, progress, st) = beside_a_counter(busy, ud2_with_live_registers);
    let _ = exception_port_set(0, 0);
    stop(port);
    let what = if busy {
        "exception (processor busy)"
    } else {
        "exception (processor idle)"
    };
    if first {
        println!("{what}: {live:x?}, progress while blocked {progress}");
    }
    check!(
        HANDLED.load(SeqCst) == handled + 1,
        "{what}: the handler answered the fault"
    );
    live_ok(what, live, 0)?;
    if busy {
        check!(
            progress > 0,
            "{what}: the other thread ran while the fault waited for its handler ({progress} steps)"
        );
    }
    upcalls_ok(what, &st)?;
    let _ = cap_drop(port);
    settled();
    Ok(())
}

/// The pager's port (receive right) and object.
static PAGER_PORT: AtomicU64 = AtomicU64::new(0);
static OBJECT: AtomicU64 = AtomicU64::new(0);
/// Data requests the pager answered.
static SUPPLIED: AtomicU64 = AtomicU64::new(0);

/// The pager: after `DELAY`, supplies each requested page with `PAGE_VALUE` as its first
/// word; ends on a message that is not a data request.
fn pager_thread(_: u64) {
    let port = PAGER_PORT.load(SeqCst);
    let mut msg = [0u8; RECEIVE_SIZE];
    let mut page = [0u8; PAGE_SIZE as usize];
    page[..8].copy_from_slice(&PAGE_VALUE.to_le_bytes());
    while msg_buf(&mut msg, MSG_RECEIVE, port, baton_abi::FOREVER).is_ok() {
        let Some(h) = MsgHeader::from_bytes(&msg) else {
            return;
        };
        if h.id != DATA_REQUEST {
            return;
        }
        let data = msg.get(HEADER_SIZE..h.size as usize).unwrap_or(&[]);
        let Some(req) = Request::from_bytes(data) else {
            return;
        };
        let _ = baton_rt::sys::sleep_ns(DELAY);
        if pager::supply(OBJECT.load(SeqCst), req.offset, &page).is_ok() {
            SUPPLIED.fetch_add(1, SeqCst);
        }
    }
}

fn page_in(first: bool) -> Result<(), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    PAGER_PORT.store(port, SeqCst);
    let object = must("memobj_pager", pager::create(port, PAGE_SIZE, 1))?;
    OBJECT.store(object, SeqCst);
    let supplied = SUPPLIED.load(SeqCst);
    must(
        "spawn the pager",
        baton_rt::thread::spawn(stack(), pager_thread, 0),
    )?;
    use baton_abi::vm::{INHERIT_SHARE, PROT_READ, PROT_WRITE};
    let flags = baton_abi::memobj::map_flags(
        PROT_READ | PROT_WRITE,
        PROT_READ | PROT_WRITE,
        false,
        INHERIT_SHARE,
    );
    let addr = must(
        "map the object",
        baton_rt::memobj::map(object, PAGE_SIZE, 0, flags),
    )?;
    let (live, progress, st) = beside_a_counter(true, move || load_with_live_registers(addr));
    // SAFETY: the mapping is ours, made above, and nothing refers to it any more.
    let _ = unsafe { baton_rt::sys::mem_unmap(addr, PAGE_SIZE) };
    stop(port);
    let _ = cap_drop(object);
    if first {
        println!("page-in: {live:x?}, progress while blocked {progress}");
    }
    check!(
        SUPPLIED.load(SeqCst) == supplied + 1,
        "page-in: the pager supplied the page once"
    );
    live_ok("page-in", live, PAGE_VALUE)?;
    check!(
        progress > 0,
        "page-in: the other thread ran while the load waited for the pager ({progress} steps)"
    );
    upcalls_ok("page-in", &st)?;
    let _ = cap_drop(port);
    settled();
    Ok(())
}

/// How long the target spins at most (TSC ticks: seconds under any clock QEMU gives).
const SPIN_TICKS: u64 = 20_000_000_000;

fn signal_across() -> Result<(), Failed> {
    // Preemption on, with a quantum far longer than the test: no Checkpoint comes but the
    // one the signal asks for.
    let config = Config::new(2, Kind::Fifo)
        .kernel_upcalls(2)
        .preempt(600_000_000_000);
    let ((seen, spun, delivered), st) = sting::run(config, || {
        let flag = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let (f, s) = (flag.clone(), started.clone());
        let target = sting::fork_on(1, move || {
            sting::preemptible(|| {
                s.store(true, Release);
                // SAFETY: reading the time-stamp counter has no effect.
                let t0 = unsafe { core::arch::x86_64::_rdtsc() };
                let mut spins = 0u64;
                // No checkpoint: no runtime call, no system call.
                while !f.load(Acquire) {
                    spins += 1;
                    // SAFETY: as above.
                    if unsafe { core::arch::x86_64::_rdtsc() } - t0 > SPIN_TICKS {
                        break;
                    }
                }
                (f.load(Acquire), spins)
            })
        });
        while !started.load(Acquire) {
            sting::yield_now();
        }
        let f = flag.clone();
        let delivered = target.signal(Priority::Immediate, move || f.store(true, Release));
        let (seen, spun) = *target.value().unwrap_or(&(false, 0));
        (seen, spun, delivered)
    });
    println!(
        "immediate signal across processors: seen while spinning {seen} after {spun} spins; {} interrupts, {} checkpoints, {} signals",
        st.interrupts, st.checkpoints, st.signals
    );
    check!(delivered, "the signal to a running thread was accepted");
    check!(
        seen,
        "the target, spinning with no checkpoint on another processor, ran the handler while it spun"
    );
    check!(
        st.interrupts >= 1 && st.checkpoints >= 1 && st.signals >= 1,
        "the kernel stopped it (interrupts {}, checkpoints {}, signals {})",
        st.interrupts,
        st.checkpoints,
        st.signals
    );
    Ok(())
}
