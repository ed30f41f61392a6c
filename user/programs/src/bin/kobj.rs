//! `kobj`: kernel objects through capabilities (test).
//!
//! Tasks and threads are ports: the program reads its own task through `task_self`,
//! creates a thread in itself through its task port, acts on a child task (`kobj_child`)
//! through the child's task port — reads it, allocates a port in it, and at the end
//! terminates it — and on one of its own threads through that thread's port. A debugger
//! thread interposes on the child's task port: requests sent to a port of its own are
//! counted and forwarded, and the kernel's reply reaches the caller directly. Malformed and
//! unknown requests get error replies; ports, names and queued messages return to the
//! baseline. Prints `ok: <what>` per check and `TEST PASS kobj`.
#![no_std]
#![no_main]

use core::arch::naked_asm;
use core::sync::atomic::{AtomicU64, Ordering};

use baton_rt::ipc::{
    cap_drop, cap_info, port_allocate, port_make_send, Disposition, IpcBuffer, MsgHeader,
    RightKind, MSG_RECEIVE, MSG_SEND, NOTIFY_SEND_ONCE,
};
use baton_rt::kobject::{
    call, task_port, task_self, thread_port, TASK_INFO, TASK_PORT_ALLOCATE, TASK_TERMINATE,
    TASK_THREAD_CREATE, THREAD_BLOCKED, THREAD_INFO, THREAD_TERMINATE,
};
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{spawn_with, stats, thread_exit, Error};

use baton_rt::check::Failed;

baton_rt::entry!(main);

/// Timeout for anything that should come at once.
const SOON: u64 = 5_000_000_000;

static STACKS: StackPool<4, 16384> = StackPool::new();
/// The port of the thread that ends itself through it, and that thread's reply port.
static SELF_PORT: AtomicU64 = AtomicU64::new(0);
static SELF_REPLY: AtomicU64 = AtomicU64::new(0);
/// Its go signal, and whether it survived its own termination.
static SELF_GO: Counter = Counter::new(0);
static SURVIVED: AtomicU64 = AtomicU64::new(0);
/// Set by the thread made through the task port.
static CREATED_RAN: AtomicU64 = AtomicU64::new(0);
/// Counts the runs of that thread.
static CREATED: Counter = Counter::new(0);
/// The port the debugger receives on, and the real port it forwards to.
static INTERPOSED: AtomicU64 = AtomicU64::new(0);
static REAL: AtomicU64 = AtomicU64::new(0);
/// Requests the debugger forwarded.
static FORWARDED: AtomicU64 = AtomicU64::new(0);
/// A signal the sleeper waits for (never given).
static NEVER: Counter = Counter::new(0);
static ENDED: Counter = Counter::new(0);

/// This program's name in its `ok:` / `TEST FAIL` lines (see `baton_rt::check`).
const TEST: &str = "kobj";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

/// Runs `f`, turning an error into a failure that names `what`.
fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run(task_id))
}

/// Entry of the thread made through the task port: `rdi` = its argument.
#[unsafe(naked)]
extern "C" fn created_entry() -> ! {
    naked_asm!("and rsp, -16", "call {main}", "ud2", main = sym created_main)
}

extern "C" fn created_main(arg: u64) -> ! {
    CREATED_RAN.store(arg, Ordering::Release);
    CREATED.increment();
    thread_exit()
}

/// A thread that blocks until it is terminated.
fn sleeper(_arg: u64) {
    let _ = NEVER.wait_for(1, u64::MAX);
}

/// A thread that ends itself through its own thread port, with a reply right it will
/// never use.
fn self_terminator(_arg: u64) {
    if SELF_GO.wait_for(1, SOON).is_ok() {
        if let Ok(mut buf) = IpcBuffer::new() {
            let port = SELF_PORT.load(Ordering::Relaxed);
            let reply = SELF_REPLY.load(Ordering::Relaxed);
            let _ = call(&mut buf, port, reply, THREAD_TERMINATE, &[], SOON);
        }
    }
    SURVIVED.store(1, Ordering::Relaxed);
}

/// The debugger: forwards every request on its port to the real object's port, keeping
/// the caller's reply right, until its port dies.
fn debugger(_arg: u64) {
    let port = INTERPOSED.load(Ordering::Relaxed);
    let real = REAL.load(Ordering::Relaxed);
    if let Ok(mut buf) = IpcBuffer::new() {
        while buf.msg(MSG_RECEIVE, port, SOON).is_ok() {
            let h = buf.header();
            let forward = MsgHeader {
                bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MoveSendOnce, 0),
                dest: real,
                reply: h.reply,
                ..h
            };
            buf.set_header(forward);
            // Counted before the send: the kernel answers inside it, and on SMP the caller
            // may look at the count as soon as the answer is queued.
            FORWARDED.fetch_add(1, Ordering::Relaxed);
            if buf.msg(MSG_SEND, 0, SOON).is_err() {
                FORWARDED.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    ENDED.increment();
}

fn counts() -> Result<(u64, u64, u64), Failed> {
    baton_rt::check::ipc_counts(TEST)
}

fn run(task_id: u64) -> Result<(), Failed> {
    let baseline = counts()?;
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let reply = must("port_allocate", port_allocate(0))?;

    // Our own task.
    let me = must("task_self", task_self())?;
    let (r, n) = must("TASK_INFO", call(&mut buf, me, reply, TASK_INFO, &[], SOON))?;
    check!(
        n == 2 && r[0] == task_id && r[1] == 1,
        "task_self's port reads this task (id {}, threads {})",
        r[0],
        r[1]
    );
    let stack = STACKS.take().ok_or(Failed)?;
    let top = (stack.as_mut_ptr() as u64 + stack.len() as u64) & !15;
    let (r, _) = must(
        "TASK_THREAD_CREATE",
        call(
            &mut buf,
            me,
            reply,
            TASK_THREAD_CREATE,
            &[created_entry as *const () as u64, top, 77],
            SOON,
        ),
    )?;
    let ran = CREATED.wait_for(1, SOON);
    check!(
        r[0] != 0 && ran.is_ok() && CREATED_RAN.load(Ordering::Acquire) == 77,
        "a thread created through the task port runs"
    );
    check!(
        call(&mut buf, me, reply, TASK_THREAD_CREATE, &[1], SOON) == Err(Error::InvalidArgument),
        "a request with too few arguments is refused"
    );
    check!(
        call(&mut buf, me, reply, TASK_THREAD_CREATE, &[0, top, 0], SOON) == Err(Error::BadAddress),
        "a bad entry point is refused"
    );
    check!(
        call(&mut buf, me, reply, 0x4b0b_00ff, &[], SOON) == Err(Error::NotSupported),
        "an unknown operation is refused"
    );

    // A child task.
    let boot = must("port_allocate", port_allocate(0))?;
    let child = must("spawn kobj_child", spawn_with("kobj_child", boot))?;
    // Its hello says it has made its own port: the port counts below are ours alone.
    must("child's hello", buf.msg(MSG_RECEIVE, boot, SOON))?;
    check!(
        task_port(child + 1000) == Err(Error::NotFound),
        "task_port refuses a task this task did not create"
    );
    let cport = must("task_port", task_port(child))?;
    let (r, _) = must(
        "TASK_INFO",
        call(&mut buf, cport, reply, TASK_INFO, &[], SOON),
    )?;
    check!(r[0] == child, "the child's task port reads the child");
    let ports_before = must("stats", stats())?.ports;
    let (r, _) = must(
        "TASK_PORT_ALLOCATE",
        call(&mut buf, cport, reply, TASK_PORT_ALLOCATE, &[0], SOON),
    )?;
    check!(
        r[0] != 0 && must("stats", stats())?.ports == ports_before + 1,
        "a port is allocated in the child through its task port"
    );

    // A debugger interposes on the child's task port.
    let interposed = must("port_allocate", port_allocate(0))?;
    INTERPOSED.store(interposed, Ordering::Relaxed);
    REAL.store(cport, Ordering::Relaxed);
    let stack = STACKS.take().ok_or(Failed)?;
    must("spawn debugger", spawn(stack, debugger, 0))?;
    let fake = must("make send", port_make_send(interposed, false))?;
    let (r, _) = must(
        "TASK_INFO",
        call(&mut buf, fake, reply, TASK_INFO, &[], SOON),
    )?;
    check!(
        r[0] == child && FORWARDED.load(Ordering::Relaxed) == 1,
        "a debugger interposes on a task port and forwards the request"
    );

    // One of our threads, through its port.
    let stack = STACKS.take().ok_or(Failed)?;
    let tid = must("spawn sleeper", spawn(stack, sleeper, 0))?;
    let tport = must("thread_port", thread_port(tid))?;
    let mut info = call(&mut buf, tport, reply, THREAD_INFO, &[], SOON);
    let mut spins = 0;
    // Wait (up to 10 s) for it to block: on two CPUs it runs on the other one, which
    // yields in place cannot wait for (under TCG a CPU may run many of them in one slice).
    while info.is_ok_and(|(r, _)| r[2] != THREAD_BLOCKED) && spins < 10_000 {
        let _ = baton_rt::sleep_ns(1_000_000);
        info = call(&mut buf, tport, reply, THREAD_INFO, &[], SOON);
        spins += 1;
    }
    let (r, n) = must("THREAD_INFO", info)?;
    check!(
        n == 5 && r[0] == tid && r[1] == task_id && r[2] == THREAD_BLOCKED && r[3] != 0,
        "a thread port reads the thread (blocked, rip {:#x})",
        r[3]
    );
    must(
        "THREAD_TERMINATE",
        call(&mut buf, tport, reply, THREAD_TERMINATE, &[], SOON),
    )?;
    check!(
        cap_info(tport) == Ok(RightKind::DeadName),
        "a thread terminated through its port is gone (its port is a dead name)"
    );

    // A thread ends itself through its own port: its request's reply right is given
    // back (a send-once notification), not leaked.
    let self_reply = must("port_allocate", port_allocate(0))?;
    SELF_REPLY.store(self_reply, Ordering::Relaxed);
    let stack = STACKS.take().ok_or(Failed)?;
    let tid = must("spawn", spawn(stack, self_terminator, 0))?;
    let self_port = must("thread_port", thread_port(tid))?;
    SELF_PORT.store(self_port, Ordering::Relaxed);
    SELF_GO.increment();
    must(
        "send-once notification",
        buf.msg(MSG_RECEIVE, self_reply, SOON),
    )?;
    check!(
        buf.header().id == NOTIFY_SEND_ONCE
            && SURVIVED.load(Ordering::Relaxed) == 0
            && cap_info(self_port) == Ok(RightKind::DeadName),
        "a thread ending itself through its port gives back its request's reply right"
    );
    must("cap_drop", cap_drop(self_reply))?;
    must("cap_drop", cap_drop(self_port))?;

    // The child ends through its task port.
    must(
        "TASK_TERMINATE",
        call(&mut buf, cport, reply, TASK_TERMINATE, &[], SOON),
    )?;
    check!(
        cap_info(cport) == Ok(RightKind::DeadName),
        "a task terminated through its port is gone (its port is a dead name)"
    );

    for name in [fake, interposed, cport, tport, boot, me, reply] {
        must("cap_drop", cap_drop(name))?;
    }
    must("debugger", ENDED.wait_for(1, SOON))?;
    drop(buf);
    let end = counts()?;
    let expected = (baseline.0 + 1, baseline.1, baseline.2);
    check!(
        end == expected,
        "ports, names and queued messages back to the baseline {expected:?} (now {end:?}; \
         the extra port is this task's own task port, which lives as long as the task)"
    );
    Ok(())
}
