//! `exc`: exceptions as messages, handled in user space (test).
//!
//! A handler thread receives on the task's exception port and repairs what it is sent:
//! a page fault by mapping the page and retrying the store, an invalid opcode and a
//! breakpoint by changing registers, an unknown system call by supplying its result. A
//! worker thread's own exception port comes before the task's, and a dead one is passed
//! over. With a handler that waits without a timeout, exceptions and replies take the fast
//! path of seed 000 section 2.5 (counted in `exc_fast`, nothing queued). Then, acting as a
//! debugger, the program handles the faults of `exc_victim`, another task: it resumes the
//! victim once with new registers, then drops the reply right of its second fault, which
//! ends the victim with a report; two more victims get replies the fast path leaves to the
//! general one (registers outside user space, an explicit kill). At the end ports, names and
//! queued messages are back to the baseline (plus the main thread's exception reply
//! port, which lives as long as the thread). Prints `ok: <what>` per check and
//! `TEST PASS exc`.
#![no_std]
#![no_main]

use core::arch::asm;
use core::sync::atomic::{AtomicU64, Ordering};

use baton_rt::exception::{
    exception_port_set, head, info, set_reply, set_reply_regs, ExcHead, ExcReply, EXC_BAD_SYSCALL,
    EXC_RAISE,
};
use baton_rt::ipc::{
    cap_drop, port_allocate, port_make_send, port_notify, Disposition, IpcBuffer, MsgHeader,
    MSG_RECEIVE, MSG_SEND, NOTIFY_KIND_NO_SENDERS, NOTIFY_NO_SENDERS,
};
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{mem_map, spawn_with, stats, Error, FOREVER};

use baton_rt::check::Failed;

baton_rt::entry!(main);

/// Timeout for anything that should come at once.
const SOON: u64 = 5_000_000_000;
/// An unmapped page the handler maps on demand.
const LAZY: u64 = 0x5000_0000_0000;
/// What each handler puts in `rax` for an invalid opcode.
const VALUES: [u64; 3] = [0x600d, 0xbeef, 0xfa57];
/// The handler that waits without a timeout, as the exception fast path needs.
const FAST: u64 = 2;

static STACKS: StackPool<4, 16384> = StackPool::new();
/// The port each handler thread receives on.
static PORTS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
/// Exceptions each handler answered.
static HANDLED: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
/// Handlers and workers that have ended.
static ENDED: Counter = Counter::new(0);
/// The worker's go signals and its results.
static GO: Counter = Counter::new(0);
static WORKER_RAX: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
static WORKER_DONE: Counter = Counter::new(0);
/// While set, the fast handler sends a message to itself between an exception and its
/// reply (its next `ipc_msg` is then not the reply the kernel expects it to be); how many
/// such detours came back.
static DETOUR: AtomicU64 = AtomicU64::new(0);
static DETOURS: Counter = Counter::new(0);
/// The detour message's id.
const DETOUR_ID: u64 = 0x7e57;

/// This program's name in its `ok:` / `TEST FAIL` lines (see `baton_rt::check`).
const TEST: &str = "exc";

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

/// A handler thread: answers the exceptions that arrive on `PORTS[which]` until the port
/// dies. Handler [`FAST`] waits without a timeout, so that its replies too can take the
/// fast path (which takes only a reply sent without one); the others with one, so that
/// their replies take the general path.
fn handler(which: u64) {
    let w = which as usize;
    let port = PORTS[w].load(Ordering::Relaxed);
    let timeout = if which == FAST { FOREVER } else { SOON * 4 };
    if let Ok(mut buf) = IpcBuffer::new() {
        let mut r = buf.msg(MSG_RECEIVE, port, timeout);
        // The kernel may be short of memory (a fault-injection run): a call that fails with
        // `NoMemory` is tried again. If it was a reply and its send went through, the reply
        // right is gone and the retry fails with `InvalidName`: then only receive.
        let mut replying = false;
        let mut retries = 0;
        loop {
            match r {
                Ok(_) => retries = 0,
                Err(Error::NoMemory) if retries < 1000 => {
                    retries += 1;
                    let _ = baton_rt::sleep_ns(1_000_000);
                    let opts = if replying {
                        MSG_SEND | MSG_RECEIVE
                    } else {
                        MSG_RECEIVE
                    };
                    r = buf.msg(opts, port, timeout);
                    continue;
                }
                Err(Error::InvalidName | Error::DeadName) if replying && retries > 0 => {
                    replying = false;
                    r = buf.msg(MSG_RECEIVE, port, timeout);
                    continue;
                }
                Err(_) => break,
            }
            replying = false;
            let Some(e) = info(&buf) else {
                r = buf.msg(MSG_RECEIVE, port, timeout);
                continue;
            };
            // The in-place reading agrees with the copy (a disagreement ends the task).
            let same = head(&buf)
                == Some(ExcHead {
                    kind: e.kind,
                    error: e.error,
                    addr: e.addr,
                    thread: e.thread,
                    task: e.task,
                });
            // The fast handler answers an invalid opcode in place (`set_reply_regs`) when it
            // sends nothing between the exception and its reply.
            let in_place =
                same && e.kind == 6 && which == FAST && DETOUR.load(Ordering::Relaxed) == 0;
            let mut regs = e.regs;
            let reply = match e.kind {
                _ if !same => ExcReply::Kill,
                14 => match mem_map(e.addr & !0xfff, 4096, true) {
                    Ok(()) => ExcReply::Retry,
                    Err(_) => ExcReply::Kill,
                },
                6 => {
                    regs.rip += 2; // past `ud2`
                    regs.rax = VALUES[w];
                    ExcReply::Set(regs)
                }
                3 => {
                    regs.r12 = 0xb0b; // `rip` is already past `int3`
                    ExcReply::Set(regs)
                }
                EXC_BAD_SYSCALL if e.error == 999 => {
                    regs.rax = 77;
                    ExcReply::Set(regs)
                }
                // A number of the extensions' range that no handler took (the entry's
                // short way to `Trap.SystemCall`), and one between that range and the
                // floor calls (the general decode).
                EXC_BAD_SYSCALL if e.error == 0x1abc || e.error == 0x2abc => {
                    regs.rax = e.error + 1;
                    ExcReply::Set(regs)
                }
                _ => ExcReply::Kill,
            };
            HANDLED[w].fetch_add(1, Ordering::Relaxed);
            if which == FAST && DETOUR.load(Ordering::Relaxed) != 0 {
                detour(&mut buf, port);
            }
            replying = true;
            let set = if in_place {
                set_reply_regs(&mut buf, |regs| {
                    regs.rip += 2; // past `ud2`
                    regs.rax = VALUES[w];
                })
            } else {
                set_reply(&mut buf, reply)
            };
            r = set.and_then(|()| buf.msg(MSG_SEND | MSG_RECEIVE, port, timeout));
        }
    }
    ENDED.increment();
}

/// Between an exception and its reply, a message through a send right to the handler's own
/// port, sent and received in one `ipc_msg`; the exception's reply right is kept aside and
/// put back in the buffer's header for the reply.
fn detour(buf: &mut IpcBuffer, port: u64) {
    let reply_right = buf.header().reply;
    let Ok(send) = port_make_send(port, false) else {
        return;
    };
    let header = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: send,
        id: DETOUR_ID,
        ..MsgHeader::default()
    };
    if buf.set(header, &[], &[]).is_ok()
        && buf.msg(MSG_SEND | MSG_RECEIVE, port, SOON).is_ok()
        && buf.header().id == DETOUR_ID
    {
        DETOURS.increment();
    }
    let _ = cap_drop(send);
    buf.set_header(MsgHeader {
        reply: reply_right,
        ..MsgHeader::default()
    });
}

/// A worker thread: an invalid opcode at each go signal; records `rax` after it.
fn worker(_arg: u64) {
    for round in 0..2u32 {
        if GO.wait_for(round + 1, SOON).is_err() {
            break;
        }
        let rax: u64;
        // SAFETY: `ud2` raises an exception; the handler resumes after it with `rax` set.
        unsafe { asm!("ud2", inout("rax") 0u64 => rax) };
        WORKER_RAX[round as usize].store(rax, Ordering::Relaxed);
        WORKER_DONE.increment();
    }
    ENDED.increment();
}

fn counts() -> Result<(u64, u64, u64), Failed> {
    baton_rt::check::ipc_counts(TEST)
}

fn run() -> Result<(), Failed> {
    let baseline = counts()?;
    let exc = must("port_allocate", port_allocate(0))?;
    PORTS[0].store(exc, Ordering::Relaxed);
    let stack = STACKS.take().ok_or(Failed)?;
    must("spawn handler", spawn(stack, handler, 0))?;
    check!(
        exception_port_set(0, 12345) == Err(Error::InvalidName),
        "a bad name is refused"
    );
    check!(
        exception_port_set(1, exc) == Err(Error::NotFound),
        "a thread id not of this task is refused"
    );
    must("exception_port_set", exception_port_set(0, exc))?;

    // A page fault: the handler maps the page and the store is retried.
    let v: u64;
    // SAFETY: the store faults (the page is unmapped); the handler maps a fresh page and
    // resumes the store, then the load reads it back. No Rust reference points there.
    unsafe {
        asm!(
            "mov qword ptr [{p}], {x}",
            "mov {v}, qword ptr [{p}]",
            p = in(reg) LAZY + 8,
            x = in(reg) 0x1234_5678u64,
            v = lateout(reg) v,
        )
    };
    check!(
        v == 0x1234_5678 && HANDLED[0].load(Ordering::Relaxed) == 1,
        "a page fault is repaired by the handler and the store retried"
    );

    // An invalid opcode: the handler skips it and sets `rax`.
    let rax: u64;
    // SAFETY: as in `worker`.
    unsafe { asm!("ud2", inout("rax") 0u64 => rax) };
    check!(
        rax == VALUES[0],
        "an invalid opcode resumes with new registers"
    );

    // A breakpoint: resumes after `int3` with `r12` set.
    let r12: u64;
    // SAFETY: `int3` raises an exception; the handler resumes after it with `r12` set.
    unsafe { asm!("int3", inout("r12") 0u64 => r12) };
    check!(r12 == 0xb0b, "a breakpoint goes to the handler");

    // An unknown system call: the handler supplies the result.
    let ret: u64;
    // SAFETY: system call 999 does not exist: it raises an exception, whose handler sets
    // `rax`; `rcx` and `r11` are clobbered as by any `syscall`.
    unsafe { asm!("syscall", inout("rax") 999u64 => ret, lateout("rcx") _, lateout("r11") _) };
    check!(ret == 77, "an unknown system call goes to the handler");
    for n in [0x1abcu64, 0x2abc] {
        let ret: u64;
        // SAFETY: as above: no handler takes number `n` (nothing was installed on
        // `Trap.SystemCall`), so it raises an exception, whose handler sets `rax`.
        unsafe { asm!("syscall", inout("rax") n => ret, lateout("rcx") _, lateout("r11") _) };
        check!(
            ret == n + 1,
            "an unknown system call above the base calls ({n:#x}) goes to the handler"
        );
    }

    // A thread's own exception port comes first; a dead one is passed over.
    let own = must("port_allocate", port_allocate(0))?;
    PORTS[1].store(own, Ordering::Relaxed);
    let stack = STACKS.take().ok_or(Failed)?;
    must("spawn handler", spawn(stack, handler, 1))?;
    let stack = STACKS.take().ok_or(Failed)?;
    let tid = must("spawn worker", spawn(stack, worker, 0))?;
    must("thread exception port", exception_port_set(tid, own))?;
    GO.increment();
    must("worker", WORKER_DONE.wait_for(1, SOON))?;
    check!(
        WORKER_RAX[0].load(Ordering::Relaxed) == VALUES[1],
        "a thread's exception port takes precedence over its task's"
    );
    must("cap_drop", cap_drop(own))?;
    GO.increment();
    must("worker", WORKER_DONE.wait_for(2, SOON))?;
    check!(
        WORKER_RAX[1].load(Ordering::Relaxed) == VALUES[0],
        "a dead thread exception port falls back to the task's"
    );

    fast_path(exc)?;
    debugger()?;

    // Clean up: the handler ends when its port dies.
    must("exception_port_set", exception_port_set(0, 0))?;
    must("cap_drop", cap_drop(exc))?;
    must("handlers and worker", ENDED.wait_for(4, SOON))?;
    let end = counts()?;
    let expected = (baseline.0 + 1, baseline.1, baseline.2);
    check!(
        end == expected,
        "ports, names and queued messages back to the baseline {expected:?} (now {end:?}; \
         the extra port is this thread's exception reply port)"
    );
    Ok(())
}

/// An invalid opcode, answered by the handler; `rax` after it.
fn invalid_opcode() -> u64 {
    let rax: u64;
    // SAFETY: as in `worker`.
    unsafe { asm!("ud2", inout("rax") 0u64 => rax) };
    rax
}

/// The fast path of seed 000 section 2.5: while handler [`FAST`] waits on the task's
/// exception port, an exception goes straight into its buffer (no message queued) and its
/// reply resumes the faulting thread at once; each leg is counted in `Stats::exc_fast`.
/// Afterwards the task's exception port is `exc` again.
fn fast_path(exc: u64) -> Result<(), Failed> {
    let fast = must("port_allocate", port_allocate(0))?;
    PORTS[FAST as usize].store(fast, Ordering::Relaxed);
    let stack = STACKS.take().ok_or(Failed)?;
    must("spawn handler", spawn(stack, handler, FAST))?;
    must("exception_port_set", exception_port_set(0, fast))?;
    // The first, perhaps before the handler waits (then the general path delivers it).
    let mut right = invalid_opcode() == VALUES[FAST as usize];
    let before = must("stats", stats())?;
    const ROUNDS: u64 = 3;
    for _ in 0..ROUNDS {
        right &= invalid_opcode() == VALUES[FAST as usize];
    }
    let after = must("stats", stats())?;
    let legs = after.exc_fast - before.exc_fast;
    check!(
        right && legs == 2 * ROUNDS && after.ipc_queued == before.ipc_queued,
        "with the handler waiting, each exception and its reply take the fast path: {legs} legs for {ROUNDS} round trips, no message queued, every resumption with the handler's registers"
    );
    // The kernel expects a handler fed by the exception fast path to reply next; one that
    // sends something else first is served as any sender, and its reply still resumes the
    // thread with its registers.
    DETOUR.store(1, Ordering::Relaxed);
    let before = must("stats", stats())?;
    let mut right = true;
    for _ in 0..ROUNDS {
        right &= invalid_opcode() == VALUES[FAST as usize];
    }
    let after = must("stats", stats())?;
    DETOUR.store(0, Ordering::Relaxed);
    let detours = u64::from(DETOURS.get());
    let legs = after.exc_fast - before.exc_fast;
    check!(
        right && detours == ROUNDS && legs == 2 * ROUNDS,
        "a handler that sends itself a message between an exception and its reply: {detours} of {ROUNDS} detours came back, every resumption with the handler's registers, {legs} fast legs"
    );
    must("exception_port_set", exception_port_set(0, exc))?;
    // The handler ends when its port dies.
    must("cap_drop", cap_drop(fast))?;
    Ok(())
}

/// Starts an `exc_victim` whose exception port is a new port of ours, with a no-senders
/// request on it to a second new port, and receives its first exception into `buf`; the
/// two ports.
fn start_victim(buf: &mut IpcBuffer) -> Result<(u64, u64), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    let gone = must("port_allocate", port_allocate(0))?;
    must(
        "no-senders request",
        port_notify(port, NOTIFY_KIND_NO_SENDERS, gone),
    )?;
    must("spawn exc_victim", spawn_with("exc_victim", port))?;
    must("victim's fault", buf.msg(MSG_RECEIVE, port, SOON))?;
    Ok((port, gone))
}

/// Handles the exceptions of `exc_victim`, another task, as a debugger would.
fn debugger() -> Result<(), Failed> {
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let (port, gone) = start_victim(&mut buf)?;
    let e = info(&buf);
    check!(
        e.is_some_and(|e| e.kind == 14 && e.addr == 0 && e.regs.r13 != 0),
        "the victim's null load arrives as an exception message"
    );
    let mut regs = e.map(|e| e.regs).unwrap_or_default();
    regs.rip = regs.r13; // the victim put its resume address there
    regs.rax = 42;
    must("reply", set_reply(&mut buf, ExcReply::Set(regs)))?;
    must("reply", buf.msg(MSG_SEND | MSG_RECEIVE, port, SOON))?;
    check!(
        buf.header().id == EXC_RAISE && info(&buf).is_some_and(|e| e.kind == 6),
        "the victim, resumed, raises its second exception"
    );
    // Drop the reply right: the victim ends with a report, and its rights to our port go.
    must("cap_drop", cap_drop(buf.header().reply))?;
    must("no-senders notification", buf.msg(MSG_RECEIVE, gone, SOON))?;
    check!(
        buf.header().id == NOTIFY_NO_SENDERS,
        "the victim ended when its exception went unanswered"
    );
    must("cap_drop", cap_drop(port))?;
    must("cap_drop", cap_drop(gone))?;

    // Replies the fast path leaves to the general one, sent as the fast path takes them
    // (send and receive, no timeout): registers outside user space, and an explicit kill.
    // Each ends the victim with a report, and no reply leg is counted as fast.
    check!(
        declined(&mut buf, true)?,
        "a reply with registers outside user space ends the victim, through the general path"
    );
    check!(
        declined(&mut buf, false)?,
        "a reply that asks to end the victim ends it, through the general path"
    );
    Ok(())
}

/// Starts an `exc_victim` and answers its first exception with registers whose `rip` is
/// in the kernel half (`bad_regs`) or with [`ExcReply::Kill`], sending the reply and then
/// receiving its end's no-senders notification in one `ipc_msg` without a timeout. Whether
/// the victim ended with no fast leg counted for the reply.
fn declined(buf: &mut IpcBuffer, bad_regs: bool) -> Result<bool, Failed> {
    let (port, gone) = start_victim(buf)?;
    let Some(e) = info(buf) else {
        return Ok(false);
    };
    let reply = if bad_regs {
        let mut regs = e.regs;
        regs.rip = 1 << 63;
        ExcReply::Set(regs)
    } else {
        ExcReply::Kill
    };
    let before = must("stats", stats())?.exc_fast;
    must("reply", set_reply(buf, reply))?;
    must("reply", buf.msg(MSG_SEND | MSG_RECEIVE, gone, FOREVER))?;
    let ended = buf.header().id == NOTIFY_NO_SENDERS;
    let legs = must("stats", stats())?.exc_fast - before;
    must("cap_drop", cap_drop(port))?;
    must("cap_drop", cap_drop(gone))?;
    Ok(ended && legs == 0)
}
