//! Task creation in Accent's steps and fork by inheritance, booted (`docs/vm.md`, "Task
//! creation"): the null program made step by step with arguments and environment, run,
//! waited for and destroyed; two instances of one program writing their data segments
//! (mapped copy-on-write from the boot image) see only their own writes, and a third sees
//! the program's data; fork isolation both ways, the child's own copy of the IPC buffer;
//! a fork of a task with 1 MiB resident takes almost no frames; every bad argument an error
//! that changes nothing; half-made tasks killed, or ended with their creator. Two rounds:
//! the second must leave the kernel's heap, objects and free frames where the first did.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};

use baton_abi::ipc::{NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME};
use baton_abi::kobject::TASK_TERMINATE;
use baton_abi::task::PROGRAM_MODULE;
use baton_rt::check::Failed;
use baton_rt::ipc::{cap_drop, port_allocate, port_make_send, port_notify, IpcBuffer};
use baton_rt::ipc::{MSG_RECEIVE, MSG_SEND};
use baton_rt::task::{self, Forked};
use baton_rt::{kobject, println, vm, Error, FOREVER};

baton_rt::entry!(main);

const TEST: &str = "taskmake";
const P: u64 = 4096;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// A word of this program's data segment, for the fork checks.
static VALUE: AtomicU64 = AtomicU64::new(0x1234);

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// The kernel's heap in use, objects and free frames.
fn counts() -> Result<(u64, u64, u64), Failed> {
    let s = must("stats", baton_rt::stats())?;
    let v = must("vm stats", vm::system_stats())?;
    Ok((s.heap_used, v.objects, v.frames_free))
}

/// Waits until the task whose port is `task` has ended (its port is a dead name), then
/// releases the name: the parent's part of ending a child.
fn wait_end(task: u64, notify: u64) -> Result<(), Failed> {
    match port_notify(task, NOTIFY_KIND_DEAD_NAME, notify) {
        Ok(()) => {
            let mut buf = [0u8; 64];
            loop {
                must(
                    "wait for the end",
                    baton_rt::ipc::msg_buf(&mut buf, MSG_RECEIVE, notify, 10_000_000_000),
                )?;
                let h = baton_abi::ipc::MsgHeader::from_bytes(&buf).ok_or(Failed)?;
                let word = u64::from_le_bytes(
                    buf[baton_abi::ipc::HEADER_SIZE..][..8]
                        .try_into()
                        .map_err(|_| Failed)?,
                );
                if h.id == NOTIFY_DEAD_NAME && word == task {
                    break;
                }
            }
        }
        // It has ended already.
        Err(Error::DeadName) => {}
        Err(e) => return must("port_notify", Err(e)),
    }
    must("release the task's name", cap_drop(task))
}

fn run() -> Result<(), Failed> {
    let notify = must("port", port_allocate(0))?;
    // The image object of `task_null` is made at its first use and kept.
    let t = must("warm-up", task::run("task_null", 0, &["task_null"], &[]))?;
    wait_end(t, notify)?;
    let mut after = [(0, 0, 0); 2];
    for (round, slot) in after.iter_mut().enumerate() {
        println!("taskmake: round {round}");
        steps(notify)?;
        data_isolation(notify)?;
        errors(notify)?;
        half_made(notify)?;
        fork_isolation(notify)?;
        fork_resident(notify)?;
        *slot = settle(round)?;
    }
    check!(
        after[0] == after[1],
        "a second round leaves the kernel heap, objects and free frames as the first did ({:?})",
        after
    );
    must("drop the port", cap_drop(notify))
}

/// The counts, once the tasks just ended are gone (they go at their threads' next kernel
/// entry).
fn settle(round: usize) -> Result<(u64, u64, u64), Failed> {
    let mut last = counts()?;
    for _ in 0..100 {
        must("sleep", baton_rt::sleep_ns(5_000_000))?;
        let now = counts()?;
        if now == last {
            break;
        }
        last = now;
    }
    println!("taskmake: round {round} ends at {last:?}");
    Ok(last)
}

/// The null program made one step at a time, with arguments and environment.
fn steps(notify: u64) -> Result<(), Failed> {
    let t = must("task_create", task::create(0, 0))?;
    let entry = must("task_map_program", task::map_program(t, "task_null"))?;
    check!(
        (0x40_0000..0x50_0000).contains(&entry),
        "the program's entry point {entry:#x}"
    );
    let th = must("task_init_thread", task::init_thread(t, 0, 0))?;
    check!(th != 0, "its first thread {th:#x}");
    must(
        "task_start",
        task::start(t, 0, &["task_null", "args", "a b"], &[("KEY", "value")]),
    )?;
    wait_end(t, notify)?;
    check!(true, "the null program made in four steps ran and ended");
    Ok(())
}

/// Two instances write their data segments at once; a third sees the program's data.
fn data_isolation(notify: u64) -> Result<(), Failed> {
    let a = must(
        "instance 1",
        task::run("task_null", 0, &["task_null", "data", "1"], &[]),
    )?;
    let b = must(
        "instance 2",
        task::run("task_null", 0, &["task_null", "data", "2"], &[]),
    )?;
    wait_end(a, notify)?;
    wait_end(b, notify)?;
    let c = must(
        "instance 3",
        task::run("task_null", 0, &["task_null", "data", "3"], &[]),
    )?;
    wait_end(c, notify)?;
    check!(true, "three instances ran (each checks its data segment)");
    Ok(())
}

/// Every bad argument is an error, and changes nothing.
fn errors(notify: u64) -> Result<(), Failed> {
    // (This task's own port is made at its first request and lives as long as the task.)
    let me = must("task_self", kobject::task_self())?;
    let before = must("stats", baton_rt::stats())?;
    let port = must("a port", port_allocate(0))?;
    let send = must("a send right", port_make_send(port, false))?;
    let name = "task_null";
    let module =
        |t| task::map_program_raw(t, PROGRAM_MODULE, name.as_ptr() as u64, name.len() as u64);
    check!(
        module(0) == Err(Error::InvalidName),
        "map into name 0: InvalidName"
    );
    check!(
        module(0xdead_0001) == Err(Error::InvalidName),
        "map into a name it lacks: InvalidName"
    );
    check!(
        module(send) == Err(Error::InvalidRight),
        "map into a port that is no task's: InvalidRight"
    );
    check!(
        task::init_thread(send, 0, 0) == Err(Error::InvalidRight),
        "a thread of a port that is no task's: InvalidRight"
    );
    check!(
        task::start_raw(send, 0, 0) == Err(Error::InvalidRight),
        "start a port that is no task's: InvalidRight"
    );
    check!(
        module(me) == Err(Error::Busy),
        "map into a running task: Busy"
    );
    check!(
        task::init_thread(me, 0, 0) == Err(Error::Busy),
        "a first thread for a running task: Busy"
    );
    check!(
        task::start_raw(me, 0, 0) == Err(Error::Busy),
        "start a running task: Busy"
    );
    let t = must("task_create", task::create(0, 0))?;
    check!(
        task::init_thread(t, 0, 0) == Err(Error::InvalidArgument),
        "a thread at the program's entry before a program: InvalidArgument"
    );
    check!(
        task::start_raw(t, 0, 0) == Err(Error::InvalidArgument),
        "start with no thread: InvalidArgument"
    );
    check!(
        task::map_program_raw(t, 7, name.as_ptr() as u64, name.len() as u64)
            == Err(Error::InvalidArgument),
        "an unknown source kind: InvalidArgument"
    );
    check!(
        task::map_object(t, port, 0, "x") == Err(Error::InvalidArgument),
        "a memory object as the source with no bytes: InvalidArgument"
    );
    check!(
        task::map_program_raw(t, PROGRAM_MODULE, name.as_ptr() as u64, 57) == Err(Error::TooLarge),
        "a name of 57 bytes: TooLarge"
    );
    check!(
        task::map_program_raw(t, PROGRAM_MODULE, 0xffff_8000_0000_0000, 4)
            == Err(Error::BadAddress),
        "a name in the kernel half: BadAddress"
    );
    check!(
        task::map_program(t, "no_such_program") == Err(Error::NotFound),
        "no such module: NotFound"
    );
    check!(
        task::map_program(t, "tasks/..") == Err(Error::NotFound),
        "a path: NotFound"
    );
    must(
        "the program after the errors",
        task::map_program(t, "task_null"),
    )?;
    check!(
        task::map_program(t, "task_null") == Err(Error::Busy),
        "map a second program: Busy"
    );
    check!(
        task::init_thread(t, 0xffff_8000_0000_0000, 0) == Err(Error::BadAddress),
        "a thread in the kernel half: BadAddress"
    );
    check!(
        task::init_thread(t, 0x40_0000, 0xffff_8000_0000_0000) == Err(Error::BadAddress),
        "a stack in the kernel half: BadAddress"
    );
    must("task_init_thread", task::init_thread(t, 0, 0))?;
    check!(
        task::init_thread(t, 0, 0) == Err(Error::Busy),
        "a second first thread: Busy"
    );
    check!(
        task::start_raw(t, 0xdead_0001, 0) == Err(Error::InvalidName),
        "start with a bootstrap name it lacks: InvalidName"
    );
    check!(
        task::start_raw(t, 0, 0xffff_8000_0000_0000) == Err(Error::BadAddress),
        "start with a start block in the kernel half: BadAddress"
    );
    let bad_block = [u64::MAX, 0];
    check!(
        task::start_raw(t, 0, bad_block.as_ptr() as u64) == Err(Error::TooLarge),
        "start with an oversized start block: TooLarge"
    );
    let garbage = [8u64, u64::MAX];
    check!(
        task::start_raw(t, 0, garbage.as_ptr() as u64) == Err(Error::BadFormat),
        "start with a start message that does not decode: BadFormat"
    );
    // After all that, the task starts as if nothing had happened.
    must(
        "task_start",
        task::start(t, send, &["task_null", "sleep"], &[]),
    )?;
    check!(
        task::start_raw(t, 0, 0) == Err(Error::Busy),
        "start twice: Busy"
    );
    check!(
        task::map_program(t, "task_null") == Err(Error::Busy),
        "map into a started task: Busy"
    );
    check!(
        task::init_thread(t, 0, 0) == Err(Error::Busy),
        "a first thread for a started task: Busy"
    );
    wait_end(t, notify)?;
    check!(
        task::start_raw(t, 0, 0) == Err(Error::InvalidName),
        "start a task whose name was released: InvalidName"
    );
    must("drop", cap_drop(send))?;
    must("drop", cap_drop(port))?;
    // The child's own names go with it, at its thread's last kernel exit: a moment after
    // its port died.
    let mut after = must("stats", baton_rt::stats())?;
    for _ in 0..100 {
        if after.names == before.names {
            break;
        }
        must("sleep", baton_rt::sleep_ns(2_000_000))?;
        after = must("stats", baton_rt::stats())?;
    }
    must("drop", cap_drop(me))?;
    check!(
        after.names == before.names
            && after.ports == before.ports
            && after.messages_queued == before.messages_queued,
        "no name, port or message left behind ({} {} {} -> {} {} {})",
        before.names,
        before.ports,
        before.messages_queued,
        after.names,
        after.ports,
        after.messages_queued
    );
    Ok(())
}

/// A half-made task killed through its port; one left by its creator ends with it.
fn half_made(notify: u64) -> Result<(), Failed> {
    let reply = must("reply port", port_allocate(0))?;
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    // The IPC buffer in use once (its page tables made), then the baseline.
    let me = must("task_self", kobject::task_self())?;
    must(
        "TASK_INFO",
        kobject::call(
            &mut buf,
            me,
            reply,
            baton_abi::kobject::TASK_INFO,
            &[],
            1_000_000_000,
        )
        .map(|_| ()),
    )?;
    must("drop", cap_drop(me))?;
    let base = counts()?;
    let t = must("task_create", task::create(0, 0))?;
    must("task_map_program", task::map_program(t, "task_null"))?;
    must("task_init_thread", task::init_thread(t, 0, 0))?;
    must(
        "TASK_TERMINATE",
        kobject::call(&mut buf, t, reply, TASK_TERMINATE, &[], 1_000_000_000).map(|_| ()),
    )?;
    check!(
        baton_rt::ipc::cap_info(t) == Ok(baton_abi::ipc::RightKind::DeadName),
        "a half-made task killed through its port is gone"
    );
    must("drop", cap_drop(t))?;
    // And by a one-way request (no reply asked for).
    let t = must("task_create", task::create(0, 0))?;
    must("TASK_TERMINATE one way", task::terminate(t))?;
    check!(
        baton_rt::ipc::cap_info(t) == Ok(baton_abi::ipc::RightKind::DeadName),
        "a half-made task ended by a one-way request is gone"
    );
    must("drop", cap_drop(t))?;
    let now = counts()?;
    check!(
        now == base,
        "its memory, objects and heap are back: {base:?} -> {now:?}"
    );
    // A task that makes a task and ends before starting it (`task_null make`).
    let m = must(
        "task_null make",
        task::run("task_null", 0, &["task_null", "make"], &[]),
    )?;
    wait_end(m, notify)?;
    let now = settle_to(base)?;
    check!(
        now == base,
        "a half-made task ends with its creator: {base:?} -> {now:?}"
    );
    drop(buf);
    must("drop", cap_drop(reply))
}

/// The counts once they come back to `base` (up to a second), else what they are.
fn settle_to(base: (u64, u64, u64)) -> Result<(u64, u64, u64), Failed> {
    let mut now = counts()?;
    for _ in 0..100 {
        if now == base {
            break;
        }
        must("sleep", baton_rt::sleep_ns(10_000_000))?;
        now = counts()?;
    }
    Ok(now)
}

/// Fork: each side's writes are its own, both ways; the child's IPC buffer is its own copy.
fn fork_isolation(notify: u64) -> Result<(), Failed> {
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    buf.bytes()[2048] = 0x5a;
    VALUE.store(5, Ordering::SeqCst);
    match must("task_fork", task::fork(0, 0))? {
        Forked::Child => {
            let ok = child(&mut buf);
            baton_rt::exit(if ok { 0 } else { 1 });
        }
        Forked::Parent(c) => {
            VALUE.store(6, Ordering::SeqCst);
            buf.bytes()[2048] = 0x6b;
            wait_end(c, notify)?;
            check!(
                VALUE.load(Ordering::SeqCst) == 6,
                "the parent's write stays the parent's"
            );
            check!(
                buf.bytes()[2048] == 0x6b,
                "the parent's IPC buffer is its own"
            );
        }
    }
    Ok(())
}

/// The child's side of [`fork_isolation`]: what it checks, printed.
fn child(buf: &mut IpcBuffer) -> bool {
    let saw = VALUE.load(Ordering::SeqCst);
    VALUE.store(7, Ordering::SeqCst);
    let _ = baton_rt::sleep_ns(20_000_000);
    let mine = VALUE.load(Ordering::SeqCst);
    let byte = buf.bytes()[2048];
    // Its IPC buffer works: a message to a port of its own, through it.
    let ipc = port_allocate(0).and_then(|p| {
        let h = baton_abi::ipc::MsgHeader {
            bits: baton_abi::ipc::MsgHeader::make_bits(
                baton_abi::ipc::Disposition::MakeSend,
                baton_abi::ipc::Disposition::None,
                0,
            ),
            dest: p,
            id: 77,
            ..Default::default()
        };
        buf.set(h, &[], &[9, 8, 7])?;
        buf.msg(MSG_SEND, 0, 0)?;
        buf.msg(MSG_RECEIVE, p, FOREVER)?;
        let ok = buf.header().id == 77 && buf.data() == [9, 8, 7];
        cap_drop(p)?;
        Ok(ok)
    });
    let ok = saw == 5 && mine == 7 && byte == 0x5a && ipc == Ok(true);
    if ok {
        println!("ok: the fork child sees the parent's memory as it was, keeps its own writes, and has its own IPC buffer");
    } else {
        println!("TEST FAIL {TEST}: fork child: saw {saw}, then {mine}, buffer byte {byte:#x}, ipc {ipc:?}");
    }
    ok
}

/// A fork of a task with 1 MiB resident copies nothing now.
fn fork_resident(notify: u64) -> Result<(), Failed> {
    const LEN: u64 = 1 << 20;
    let at = must("allocate 1 MiB", vm::allocate(None, LEN, vm::PROT_RW))?;
    for page in (0..LEN).step_by(P as usize) {
        // SAFETY: the page was just allocated read-write for this test.
        unsafe { ((at + page) as *mut u64).write_volatile(page) };
    }
    let before = must("vm stats", vm::system_stats())?;
    let forked = must("task_fork", task::fork(0, 0))?;
    let after = must("vm stats", vm::system_stats())?;
    match forked {
        Forked::Child => baton_rt::exit(0),
        Forked::Parent(c) => {
            let taken = before.frames_free.saturating_sub(after.frames_free);
            check!(
                taken < 16,
                "a fork of a task with 256 resident pages took {taken} frames"
            );
            wait_end(c, notify)?;
        }
    }
    // The child is gone: the parent's writes reclaim its pages instead of copying them.
    let mine = must("vm stats", vm::stats())?;
    for page in (0..LEN).step_by(P as usize) {
        // SAFETY: as above.
        unsafe { ((at + page) as *mut u64).write_volatile(page + 1) };
    }
    let later = must("vm stats", vm::stats())?;
    check!(
        later.cow_copies == mine.cow_copies,
        "after the child's end no page is copied ({} copies)",
        later.cow_copies - mine.cow_copies
    );
    // SAFETY: no reference points into the range (only raw pointers were used).
    must("deallocate", unsafe { vm::deallocate(at, LEN) })
}
