//! `regs_sane`: every way one thread can set another's user registers keeps them those of
//! a user thread (test).
//!
//! The kernel takes a register set from user space on these paths: an exception handler's
//! reply (the general path, and the exception fast path of seed 000 section 2.5),
//! `act_set_state` (of a thread's home activation and of a pool activation),
//! `THREAD_SET_STATE` through a thread port, `ACT_SET_STATE` through an activation port,
//! and `thread_create` (`entry` and `stack_top`, by system call and by `TASK_THREAD_CREATE`).
//! Its policy: `rip` and `rsp` in the user half (below `USER_END`; anything else, the
//! kernel half or a non-canonical address, is refused), of `rflags` only the arithmetic
//! flags, DF and TF taken, IF and the reserved bit 1 always set; IOPL, NT, AC, ID (and VM,
//! RF) never; the code and stack selectors are not in the register set at all.
//!
//! Each path is checked from user space: the target thread is sent to [`landing`] with
//! [`EVIL_FLAGS`] (IOPL 3, NT, AC, ID, IF clear, every arithmetic flag), where its first
//! instruction reads `rflags` back (`pushfq`), then it reads `cs` and `ss` and tries
//! `in al, dx`, which must raise a general-protection fault (IOPL 0), answered by this
//! task's exception handler. A kernel that took IOPL 3 from a handler would let the
//! thread do port I/O (and `cli`): privilege escalation. A register set with `rsp`
//! outside the user half is refused with `BadAddress` by the state calls; an exception
//! reply carrying one ends the task that raised it (`regs_victim`, another task, through
//! the general and the fast path), instead of resuming it.
//!
//! Verdict: `TEST PASS regs_sane` or `TEST FAIL regs_sane: ...`.
#![no_std]
#![no_main]

use core::arch::{asm, naked_asm};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_abi::exception::UserRegs;
use baton_abi::ipc::{Disposition, MsgHeader};
use baton_abi::Sys;
use baton_rt::check::Failed;
use baton_rt::exception::{exception_port_set, info, set_reply, ExcReply, EXC_RAISE};
use baton_rt::ipc::{
    msg_raw, port_allocate, port_make_send, port_notify, IpcBuffer, MSG_RECEIVE, MSG_SEND,
    NOTIFY_KIND_NO_SENDERS, NOTIFY_NO_SENDERS,
};
use baton_rt::kobject::{
    self, act_port, call as kcall, task_self, thread_port, StateOf, ACT_RESUME, ACT_SUSPEND,
    TASK_THREAD_CREATE, THREAD_RESUME, THREAD_SUSPEND,
};
use baton_rt::migrate::{self, Act, Request};
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{spawn_with, stats, Error, FOREVER};

baton_rt::entry!(main);

const TEST: &str = "regs_sane";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// Timeout for anything that should come at once.
const SOON: u64 = 5_000_000_000;
/// What a register set asks for in `rflags`: IOPL 3 (0x3000), NT (0x4000), AC (0x40000),
/// ID (0x200000), IF (0x200) and bit 1 clear, and CF, PF, AF, ZF, SF, DF, OF (0xcd5). TF is
/// left out: the thread would trap after its first instruction.
const EVIL_FLAGS: u64 = 0x3000 | 0x4000 | 0x4_0000 | 0x20_0000 | 0xcd5;
/// What a user thread must run with after asking for [`EVIL_FLAGS`]: the arithmetic flags
/// and DF as asked, IF and bit 1 set, nothing else.
const SANE_FLAGS: u64 = 0xcd5 | 0x202;
/// The flags of a new thread.
const FRESH_FLAGS: u64 = 0x202;
/// `rsp` values that are not user addresses: the first non-canonical address and the
/// start of the kernel half.
const BAD_RSPS: [u64; 2] = [0x0000_8000_0000_0000, 0xffff_8000_0000_0000];
/// What the exception handler puts in `r12` when it skips a faulting `in`.
const GP_MARK: u64 = 0x6770;

/// What [`landed`] saw: `rflags` as the landing's first instruction read them, `cs` and
/// `ss`, and whether the `in` faulted.
static FLAGS: AtomicU64 = AtomicU64::new(0);
static SELECTORS: AtomicU64 = AtomicU64::new(0);
static IN_FAULTED: AtomicU32 = AtomicU32::new(0);
/// Landings completed.
static LANDED: Counter = Counter::new(0);
/// How a landing ends: [`END_THREAD`] (`thread_exit`) or [`END_CALL`] (`act_return`).
static ENDING: AtomicU32 = AtomicU32::new(END_THREAD);
const END_THREAD: u32 = 0;
const END_CALL: u32 = 1;
/// General-protection faults the handler answered.
static GP_FAULTS: AtomicU64 = AtomicU64::new(0);

/// The port each handler receives on: 0 the task's (with a timeout: general path), 1 a
/// thread's (without: fast path).
static PORTS: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
/// Handlers that have ended.
static HANDLERS_ENDED: Counter = Counter::new(0);
/// Set by a parked thread or a server activation once it sleeps in its loop.
static PARKED: Counter = Counter::new(0);
/// A pool activation's caller is done.
static CALLER_DONE: Counter = Counter::new(0);
/// The server port's send right, and the caller's reply port.
static SERVER: AtomicU64 = AtomicU64::new(0);
static CALL_REPLY: AtomicU64 = AtomicU64::new(0);

static STACKS: StackPool<12, 16384> = StackPool::new();

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// Where a thread is sent with new registers. Reads `rflags` before anything can change
/// them, makes them ordinary again (`popfq` at CPL 3 cannot touch IOPL or, with IOPL 0,
/// IF), and goes on in [`landed`] with `rflags`, `cs` and `ss`.
#[unsafe(naked)]
extern "C" fn landing() -> ! {
    naked_asm!(
        "pushfq",
        "pop rdi",
        "push 0x202",
        "popfq",
        "mov rsi, cs",
        "mov rdx, ss",
        "and rsp, -16",
        "call {landed}",
        "ud2",
        landed = sym landed,
    )
}

/// The rest of [`landing`]: records what it saw, tries port I/O, and ends the thread
/// (or the migrating call it is in).
extern "C" fn landed(flags: u64, cs: u64, ss: u64) -> ! {
    FLAGS.store(flags, Ordering::SeqCst);
    SELECTORS.store(cs << 16 | ss, Ordering::SeqCst);
    let r12: u64;
    // SAFETY: reading port 0x80 (the POST diagnostic port) has no effect on the machine;
    // at IOPL 0 it raises a general-protection fault, which the task's handler answers by
    // skipping the 1-byte `in` with `r12` set.
    unsafe { asm!("in al, dx", in("dx") 0x80u16, out("al") _, inout("r12") 0u64 => r12) };
    IN_FAULTED.store(u32::from(r12 == GP_MARK), Ordering::SeqCst);
    LANDED.increment();
    if ENDING.load(Ordering::SeqCst) == END_CALL {
        // SAFETY: `act_return` ends the migrating call this thread is in and never comes
        // back here; it reads only the activation's buffer, which the kernel checks.
        unsafe { baton_rt::raw::syscall0(Sys::ActReturn as u64) };
    }
    baton_rt::thread_exit()
}

/// An exception handler on `PORTS[which]`: an invalid opcode goes to [`landing`] with
/// [`EVIL_FLAGS`]; a general-protection fault (the landing's `in`) is skipped with `r12`
/// = [`GP_MARK`]; anything else ends the task. Handler 1 waits without a timeout, so that
/// its replies can take the exception fast path; handler 0 with one (the general path).
fn handler(which: u64) {
    let port = PORTS[which as usize].load(Ordering::Relaxed);
    let timeout = if which == 1 { FOREVER } else { SOON * 4 };
    if let Ok(mut buf) = IpcBuffer::new() {
        let mut r = buf.msg(MSG_RECEIVE, port, timeout);
        while r.is_ok() {
            let Some(e) = info(&buf) else {
                r = buf.msg(MSG_RECEIVE, port, timeout);
                continue;
            };
            let mut regs = e.regs;
            let reply = match e.kind {
                6 => {
                    regs.rip = landing as *const () as u64;
                    regs.rflags = EVIL_FLAGS;
                    ExcReply::Set(regs)
                }
                13 => {
                    GP_FAULTS.fetch_add(1, Ordering::SeqCst);
                    regs.rip += 1;
                    regs.r12 = GP_MARK;
                    ExcReply::Set(regs)
                }
                _ => ExcReply::Kill,
            };
            r = set_reply(&mut buf, reply)
                .and_then(|()| buf.msg(MSG_SEND | MSG_RECEIVE, port, timeout));
        }
    }
    HANDLERS_ENDED.increment();
}

/// Lets the raiser of the fast path go, once its exception port is set.
static GO: Counter = Counter::new(0);

/// A thread that raises an invalid opcode (the handler sends it to [`landing`]); with
/// `wait` 1, once [`GO`] says so.
fn raiser(wait: u64) {
    if wait == 1 && GO.wait_for(1, SOON).is_err() {
        return;
    }
    // SAFETY: `ud2` raises an exception; the handler never resumes the thread here.
    unsafe { asm!("ud2") };
}

/// A thread that sleeps in a loop until its registers are changed under it.
fn parked(_: u64) {
    PARKED.increment();
    loop {
        let _ = baton_rt::sleep_ns(2_000_000);
    }
}

/// A pool activation's code: sleeps in a loop until its registers are changed under it.
fn serve_parked(_req: &mut Request) {
    PARKED.increment();
    loop {
        let _ = baton_rt::sleep_ns(2_000_000);
    }
}

/// A thread that makes one migrating call to [`SERVER`].
fn caller(_: u64) {
    if let Ok(mut buf) = IpcBuffer::new() {
        let reply = CALL_REPLY.load(Ordering::Relaxed);
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
            dest: SERVER.load(Ordering::Relaxed),
            reply,
            id: 1,
            ..MsgHeader::default()
        };
        if buf.set(h, &[], &[]).is_ok() {
            // SAFETY: the kernel writes only this thread's IPC buffer, which `buf` owns.
            // Whatever the call returns is fine: its activation was sent elsewhere.
            let _ = unsafe { msg_raw(MSG_SEND | MSG_RECEIVE, reply, FOREVER, 0, 0) };
        }
    }
    CALLER_DONE.increment();
}

/// Starts `f(arg)` on a new thread; its id.
fn start(f: fn(u64), arg: u64) -> Result<u64, Failed> {
    let stack = STACKS.take().ok_or_else(|| {
        baton_rt::println!("TEST FAIL {TEST}: out of stacks");
        Failed
    })?;
    must("spawn", spawn(stack, f, arg))
}

/// Forgets the last landing's record.
fn reset() {
    FLAGS.store(0, Ordering::SeqCst);
    SELECTORS.store(0, Ordering::SeqCst);
    IN_FAULTED.store(0, Ordering::SeqCst);
}

/// Waits for landing number `n` and checks what it saw: `rflags` exactly `want`, user
/// selectors, and a faulting `in`.
fn landed_as(n: u32, want: u64, path: &str) -> Result<(), Failed> {
    must("landing", LANDED.wait_for(n, SOON))?;
    let (flags, sel) = (
        FLAGS.load(Ordering::SeqCst),
        SELECTORS.load(Ordering::SeqCst),
    );
    let (cs, ss) = (sel >> 16, sel & 0xffff);
    let faulted = IN_FAULTED.load(Ordering::SeqCst) == 1;
    check!(
        flags == want && cs & 3 == 3 && ss & 3 == 3 && faulted,
        "{path}: the thread runs with rflags {flags:#x} (want {want:#x}: no IOPL, NT, AC or ID, IF on), cs {cs:#x} and ss {ss:#x} at CPL 3, and `in` faults ({faulted})"
    );
    Ok(())
}

/// `regs` sent to [`landing`] with [`EVIL_FLAGS`].
fn evil(mut regs: UserRegs) -> UserRegs {
    regs.rip = landing as *const () as u64;
    regs.rflags = EVIL_FLAGS;
    regs
}

fn run() -> Result<(), Failed> {
    // The task's exception handler (general path), which also answers every landing's `in`.
    let exc = must("port_allocate", port_allocate(0))?;
    PORTS[0].store(exc, Ordering::Relaxed);
    start(handler, 0)?;
    must("exception_port_set", exception_port_set(0, exc))?;
    let mut landings = 0;

    // 1. An exception reply, general path.
    reset();
    start(raiser, 0)?;
    landings += 1;
    landed_as(landings, SANE_FLAGS, "exception reply (general path)")?;

    // 2. An exception reply, fast path: handler 1 waits without a timeout on the raiser's
    //    own exception port.
    let fast = must("port_allocate", port_allocate(0))?;
    PORTS[1].store(fast, Ordering::Relaxed);
    start(handler, 1)?;
    must("sleep", baton_rt::sleep_ns(20_000_000))?;
    reset();
    let before = must("stats", stats())?.exc_fast;
    // The raiser's own exception port is set before it raises.
    let t = start(raiser, 1)?;
    must("thread exception port", exception_port_set(t, fast))?;
    GO.increment();
    landings += 1;
    landed_as(landings, SANE_FLAGS, "exception reply (fast path)")?;
    let legs = must("stats", stats())?.exc_fast - before;
    check!(
        legs >= 2,
        "the fast-path handler's exceptions and replies took the fast path ({legs} legs)"
    );

    // 3. Exception replies with `rsp` outside user space, to another task.
    for fast_path in [false, true] {
        for rsp in BAD_RSPS {
            check!(
                victim_ends(rsp, fast_path)?,
                "an exception reply with rsp {rsp:#x} ends the task instead of resuming it ({} path)",
                if fast_path { "fast" } else { "general" }
            );
        }
    }

    // 4. act_set_state of a thread's home activation.
    let w = start(parked, 0)?;
    must("parked", PARKED.wait_for(1, SOON))?;
    must("suspend", migrate::suspend(Act::Thread(w), true))?;
    let regs = must("act_get_state", migrate::get_state(Act::Thread(w)))?;
    state_refusals("act_set_state (thread)", |r| {
        migrate::set_state(Act::Thread(w), r)
    })?;
    reset();
    must(
        "act_set_state",
        migrate::set_state(Act::Thread(w), &evil(regs)),
    )?;
    let seen = must("act_get_state", migrate::get_state(Act::Thread(w)))?;
    check!(
        seen.rflags == SANE_FLAGS,
        "act_get_state reads back rflags {:#x} after act_set_state asked for {EVIL_FLAGS:#x}",
        seen.rflags
    );
    must("resume", migrate::suspend(Act::Thread(w), false))?;
    landings += 1;
    landed_as(landings, SANE_FLAGS, "act_set_state (thread)")?;

    // 5. THREAD_SET_STATE through a thread port.
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let reply = must("port_allocate", port_allocate(0))?;
    let w = start(parked, 0)?;
    must("parked", PARKED.wait_for(2, SOON))?;
    let wp = must("thread_port", thread_port(w))?;
    must(
        "suspend",
        kcall(&mut buf, wp, reply, THREAD_SUSPEND, &[], SOON),
    )?;
    let regs = must(
        "THREAD_GET_STATE",
        kobject::get_state(&mut buf, wp, reply, StateOf::Thread),
    )?;
    state_refusals("THREAD_SET_STATE", |r| {
        kobject::set_state(&mut buf, wp, reply, StateOf::Thread, r)
    })?;
    reset();
    must(
        "THREAD_SET_STATE",
        kobject::set_state(&mut buf, wp, reply, StateOf::Thread, &evil(regs)),
    )?;
    must(
        "resume",
        kcall(&mut buf, wp, reply, THREAD_RESUME, &[], SOON),
    )?;
    landings += 1;
    landed_as(landings, SANE_FLAGS, "THREAD_SET_STATE")?;

    // 6 and 7. A pool activation, by act_set_state and through its activation port.
    let server = must("port_allocate", port_allocate(0))?;
    let act = must("attach", migrate::attach(server, 1, serve_parked))?;
    SERVER.store(
        must("make send", port_make_send(server, false))?,
        Ordering::Relaxed,
    );
    CALL_REPLY.store(must("port_allocate", port_allocate(0))?, Ordering::Relaxed);
    ENDING.store(END_CALL, Ordering::SeqCst);
    for (round, by_port) in [(1u32, false), (2, true)] {
        start(caller, 0)?;
        must("server entered", PARKED.wait_for(2 + round, SOON))?;
        reset();
        if by_port {
            let ap = must("act_port", act_port(act))?;
            must(
                "suspend",
                kcall(&mut buf, ap, reply, ACT_SUSPEND, &[], SOON),
            )?;
            let regs = must(
                "ACT_GET_STATE",
                kobject::get_state(&mut buf, ap, reply, StateOf::Activation),
            )?;
            state_refusals("ACT_SET_STATE", |r| {
                kobject::set_state(&mut buf, ap, reply, StateOf::Activation, r)
            })?;
            must(
                "ACT_SET_STATE",
                kobject::set_state(&mut buf, ap, reply, StateOf::Activation, &evil(regs)),
            )?;
            must("resume", kcall(&mut buf, ap, reply, ACT_RESUME, &[], SOON))?;
        } else {
            must("suspend", migrate::suspend(Act::Pool(act), true))?;
            let regs = must("act_get_state", migrate::get_state(Act::Pool(act)))?;
            state_refusals("act_set_state (pool activation)", |r| {
                migrate::set_state(Act::Pool(act), r)
            })?;
            must(
                "act_set_state",
                migrate::set_state(Act::Pool(act), &evil(regs)),
            )?;
            must("resume", migrate::suspend(Act::Pool(act), false))?;
        }
        landings += 1;
        landed_as(
            landings,
            SANE_FLAGS,
            if by_port {
                "ACT_SET_STATE"
            } else {
                "act_set_state (pool activation)"
            },
        )?;
        must("caller", CALLER_DONE.wait_for(round, SOON))?;
    }
    ENDING.store(END_THREAD, Ordering::SeqCst);

    // 8. thread_create, by system call and through the task port: a stack or entry outside
    //    user space is refused; a new thread starts with the flags of a fresh thread.
    let stack = STACKS.take().ok_or(Failed)?;
    let top = (stack.as_mut_ptr() as u64 + stack.len() as u64) & !15;
    let entry = landing as *const () as u64;
    let task = must("task_self", task_self())?;
    for bad in BAD_RSPS {
        // SAFETY: the kernel refuses both calls (bad addresses): no thread starts.
        let by_call = unsafe {
            (
                baton_rt::thread::create_raw(entry, bad, 0),
                baton_rt::thread::create_raw(bad, top, 0),
            )
        };
        let by_port = (
            kcall(
                &mut buf,
                task,
                reply,
                TASK_THREAD_CREATE,
                &[entry, bad, 0],
                SOON,
            )
            .map(|_| 0),
            kcall(
                &mut buf,
                task,
                reply,
                TASK_THREAD_CREATE,
                &[bad, top, 0],
                SOON,
            )
            .map(|_| 0),
        );
        check!(
            by_call == (Err(Error::BadAddress), Err(Error::BadAddress))
                && by_port == (Err(Error::BadAddress), Err(Error::BadAddress)),
            "thread_create and TASK_THREAD_CREATE refuse a stack or entry at {bad:#x} (got {by_call:?}, {by_port:?})"
        );
    }
    reset();
    // SAFETY: the new thread runs `landing` on `stack`, which it owns from here on (taken
    // from the pool, never used again); it ends with `thread_exit`.
    must("thread_create", unsafe {
        baton_rt::thread::create_raw(entry, top, 0)
    })?;
    landings += 1;
    landed_as(landings, FRESH_FLAGS, "thread_create")?;

    let gp = GP_FAULTS.load(Ordering::SeqCst);
    check!(
        gp == u64::from(landings),
        "every landing's `in` raised a general-protection fault ({gp} of {landings})"
    );

    // The handlers end when their ports die.
    must("exception_port_set", exception_port_set(0, 0))?;
    must("cap_drop", baton_rt::ipc::cap_drop(exc))?;
    must("cap_drop", baton_rt::ipc::cap_drop(fast))?;
    must("handlers", HANDLERS_ENDED.wait_for(2, SOON))?;
    Ok(())
}

/// A state call's refusals: `rsp` at each of [`BAD_RSPS`], and `rip` in the kernel half,
/// each `BadAddress`.
fn state_refusals(
    what: &str,
    mut set: impl FnMut(&UserRegs) -> Result<(), Error>,
) -> Result<(), Failed> {
    let good = UserRegs {
        rip: landing as *const () as u64,
        rsp: 0x10_0000,
        rflags: FRESH_FLAGS,
        ..UserRegs::default()
    };
    for bad in BAD_RSPS {
        let r = set(&UserRegs { rsp: bad, ..good });
        check!(
            r == Err(Error::BadAddress),
            "{what} refuses rsp {bad:#x}: {r:?}"
        );
        let r = set(&UserRegs { rip: bad, ..good });
        check!(
            r == Err(Error::BadAddress),
            "{what} refuses rip {bad:#x}: {r:?}"
        );
    }
    Ok(())
}

/// Starts a `regs_victim` whose exception port is a new port of ours, which also asks for
/// its own no-senders notification, and answers its first exception (an invalid opcode
/// whose resume address is in `r13`) with `rsp` = `rsp`, through the general path (a send,
/// then a receive with a timeout) or as the fast path takes replies (send and receive in
/// one call, no timeout). Whether the next message on the port says the victim ended
/// (no senders), rather than that it raised another exception (it was resumed).
fn victim_ends(rsp: u64, fast_path: bool) -> Result<bool, Failed> {
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let port = must("port_allocate", port_allocate(0))?;
    must("spawn regs_victim", spawn_with("regs_victim", port))?;
    must(
        "no-senders request",
        port_notify(port, NOTIFY_KIND_NO_SENDERS, port),
    )?;
    must("victim's exception", buf.msg(MSG_RECEIVE, port, SOON))?;
    let Some(e) = info(&buf) else {
        baton_rt::println!(
            "TEST FAIL {TEST}: the victim's first message is not an exception (id {:#x})",
            buf.header().id
        );
        return Err(Failed);
    };
    let mut regs = e.regs;
    regs.rip = regs.r13;
    regs.rsp = rsp;
    must("reply", set_reply(&mut buf, ExcReply::Set(regs)))?;
    if fast_path {
        must("reply", buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER))?;
    } else {
        must("reply", buf.msg(MSG_SEND, 0, SOON))?;
        must("victim's end", buf.msg(MSG_RECEIVE, port, SOON))?;
    }
    let id = buf.header().id;
    if id == EXC_RAISE {
        baton_rt::println!(
            "{TEST}: the victim was resumed with rsp {rsp:#x} and raised exception {:?}",
            info(&buf).map(|e| (e.kind, e.addr))
        );
        // End it, so that the boot can end.
        must("kill", set_reply(&mut buf, ExcReply::Kill))?;
        must("kill", buf.msg(MSG_SEND, 0, SOON))?;
    }
    must("cap_drop", baton_rt::ipc::cap_drop(port))?;
    Ok(id == NOTIFY_NO_SENDERS)
}
