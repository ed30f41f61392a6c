//! The host-privilege calls that look at and steer the whole system: list the tasks, a
//! task's threads and its rights, give a right to any task's port, shut down
//! (`baton_abi::Sys::HostTasks` … `HostShutdown`, `baton_abi::host`).
//!
//! Each takes the caller's name for its send right to the host-privilege port (after
//! Mach's privileged host port) and fails with `Denied` without one: an ordinary task sees
//! only itself and the tasks it made. The listings write at most
//! `baton_abi::host::RECORDS_MAX` fixed-size records into the caller's buffer, checked
//! writable as a whole first (a call that fails with `BadAddress` wrote nothing), and
//! return how many there are.

use crate::arch::apic;
use crate::arch::serial::kprintln;
use crate::kernel::{Ending, Kernel, TaskId};
use crate::kobject::{self, KObject};
use crate::thread::{Blocked, Thread, ThreadId, ThreadState};
use baton_abi::host::*;
use baton_abi::kobject::{THREAD_BLOCKED, THREAD_READY, THREAD_RUNNING};
use baton_abi::Error;

/// Nanoseconds of `tsc` ticks of the calibrated TSC.
fn tsc_ns(tsc: u64) -> u64 {
    let hz = u128::from(apic::tsc_hz().max(1));
    u64::try_from(u128::from(tsc) * 1_000_000_000 / hz).unwrap_or(u64::MAX)
}

/// Checks `max` and that `max` records of `words` words fit writable at `buf`.
fn check_buffer(
    k: &mut Kernel,
    task: TaskId,
    buf: u64,
    max: u64,
    words: usize,
) -> Result<(), Error> {
    if max > RECORDS_MAX {
        return Err(Error::TooLarge);
    }
    k.check_writable(task, buf, max as usize * words * 8)
}

/// The most words of any record.
const RECORD_WORDS_MAX: usize = 16;
const _: () = assert!(
    TASK_RECORD_WORDS <= RECORD_WORDS_MAX
        && THREAD_RECORD_WORDS <= RECORD_WORDS_MAX
        && NAME_RECORD_WORDS <= RECORD_WORDS_MAX
);

/// Writes record `i` (its `words`) at `buf`.
fn put(k: &mut Kernel, task: TaskId, buf: u64, i: usize, words: &[u64]) -> Result<(), Error> {
    let mut bytes = [0u8; 8 * RECORD_WORDS_MAX];
    let len = words.len() * 8;
    for (chunk, w) in bytes.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    let out = bytes.get(..len).ok_or(Error::InvalidArgument)?;
    k.copy_out(task, buf + (i * len) as u64, out)
}

/// Up to [`RECORDS_MAX`] values of `it`, sorted, in place (no allocation); the slice used.
fn sorted(it: impl Iterator<Item = u64>, out: &mut [u64; RECORDS_MAX as usize]) -> &[u64] {
    let mut n = 0;
    for (slot, v) in out.iter_mut().zip(it) {
        *slot = v;
        n += 1;
    }
    let used = out.get_mut(..n).unwrap_or(&mut []);
    used.sort_unstable();
    used
}

/// `host_tasks(host_priv, buf, max)` by thread `cur` of task `task`.
pub fn sys_tasks(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    args: [u64; 6],
) -> Result<u64, Error> {
    let [host_priv, buf, max, ..] = args;
    kobject::check_host_priv(k, cur, host_priv)?;
    check_buffer(k, task, buf, max, TASK_RECORD_WORDS)?;
    let mut ids = [0u64; RECORDS_MAX as usize];
    let total = k.tasks.len() as u64;
    let ids = sorted(k.tasks.iter().map(|(id, _)| id), &mut ids);
    let mut ids_copy = [0u64; RECORDS_MAX as usize];
    let n = ids.len().min(max as usize);
    for (d, s) in ids_copy.iter_mut().zip(ids.iter().take(n)) {
        *d = *s;
    }
    for (i, &id) in ids_copy.iter().take(n).enumerate() {
        let Some(t) = k.tasks.get(&id) else {
            continue;
        };
        let cpu_tsc = k
            .threads
            .iter()
            .filter(|(_, th)| th.home_task() == Some(id))
            .fold(0u64, |a, (_, th)| a.wrapping_add(th.cpu_tsc));
        let mut r = TaskRecord {
            id,
            creator: t.creator.unwrap_or(0),
            threads: t.threads,
            state: if t.lingering {
                TASK_LINGERING
            } else if t.ending.is_some() {
                TASK_ENDING
            } else {
                TASK_LIVE
            },
            cpu_ns: tsc_ns(cpu_tsc),
            name_len: t.name.len().min(TASK_NAME_BYTES) as u64,
            name: [0; TASK_NAME_BYTES],
        };
        for (d, s) in r.name.iter_mut().zip(t.name.bytes()) {
            *d = s;
        }
        put(k, task, buf, i, &r.to_words())?;
    }
    Ok(total)
}

/// What `th` is blocked in, and on what.
fn blocked_of(th: &Thread) -> (u64, u64, u64) {
    match th.state {
        ThreadState::Running { .. } => (THREAD_RUNNING, BLOCKED_NONE, 0),
        ThreadState::Ready => (THREAD_READY, BLOCKED_NONE, 0),
        ThreadState::Blocked(b) => {
            let (kind, on) = match b {
                Blocked::Sleep => (BLOCKED_SLEEP, 0),
                Blocked::Wait { key } => (BLOCKED_WAIT, key.1),
                Blocked::ProcessModel => (BLOCKED_PROCESS_MODEL, 0),
                Blocked::Receive { port } => (BLOCKED_RECEIVE, port.0),
                Blocked::Send { port } => (BLOCKED_SEND, port.0),
                Blocked::Suspended => (BLOCKED_SUSPENDED, 0),
                Blocked::StateWait { target } => (BLOCKED_STATE_WAIT, target.0),
                Blocked::PageIn { offset, .. } => (BLOCKED_PAGE_IN, offset),
                Blocked::Unstarted => (BLOCKED_UNSTARTED, 0),
                Blocked::VpSpare => (BLOCKED_VP_SPARE, 0),
            };
            (THREAD_BLOCKED, kind, on)
        }
        ThreadState::Halted | ThreadState::Idle => (3, BLOCKED_NONE, 0),
    }
}

/// `host_threads(host_priv, task, buf, max)` by thread `cur` of task `caller`.
pub fn sys_threads(
    k: &mut Kernel,
    caller: TaskId,
    cur: ThreadId,
    args: [u64; 6],
) -> Result<u64, Error> {
    let [host_priv, task, buf, max, ..] = args;
    kobject::check_host_priv(k, cur, host_priv)?;
    if k.tasks.get(&task).is_none() {
        return Err(Error::NotFound);
    }
    check_buffer(k, caller, buf, max, THREAD_RECORD_WORDS)?;
    let mut ids = [0u64; RECORDS_MAX as usize];
    let total = k
        .threads
        .iter()
        .filter(|(_, th)| th.home_task() == Some(task))
        .count() as u64;
    let ids = sorted(
        k.threads
            .iter()
            .filter(|(_, th)| th.home_task() == Some(task))
            .map(|(t, _)| t.0),
        &mut ids,
    );
    let mut list = [0u64; RECORDS_MAX as usize];
    let n = ids.len().min(max as usize);
    for (d, s) in list.iter_mut().zip(ids.iter().take(n)) {
        *d = *s;
    }
    let activations = k.acts.count_of(task) as u64;
    let now = crate::arch::cpu::rdtsc();
    for (i, &id) in list.iter().take(n).enumerate() {
        let Some(th) = k.threads.get(kern::slab::Key(id)) else {
            continue;
        };
        let (state, blocked, on) = blocked_of(th);
        let mut tsc = th.cpu_tsc;
        if let ThreadState::Running { cpu } = th.state {
            // Its current slice too.
            if let Some(c) = k.cpus.get(cpu) {
                tsc = tsc.wrapping_add(now.saturating_sub(c.since));
            }
        }
        let r = ThreadRecord {
            id,
            home: task,
            task: th.ctx.task.unwrap_or(0),
            state,
            blocked,
            on,
            priority: u64::from(th.priority),
            cpu: th.cpu as u64,
            cpu_ns: tsc_ns(tsc),
            depth: th.below.len() as u64,
            activations,
        };
        put(k, caller, buf, i, &r.to_words())?;
    }
    Ok(total)
}

/// `host_names(host_priv, task, buf, max)` by thread `cur` of task `caller`.
pub fn sys_names(
    k: &mut Kernel,
    caller: TaskId,
    cur: ThreadId,
    args: [u64; 6],
) -> Result<u64, Error> {
    let [host_priv, task, buf, max, ..] = args;
    kobject::check_host_priv(k, cur, host_priv)?;
    let total = k.tasks.get(&task).ok_or(Error::NotFound)?.names.len() as u64;
    check_buffer(k, caller, buf, max, NAME_RECORD_WORDS)?;
    let mut names = [0u64; RECORDS_MAX as usize];
    let t = k.tasks.get(&task).ok_or(Error::NotFound)?;
    let sorted_names = sorted(t.names.iter().map(|(n, _)| n), &mut names);
    let mut list = [0u64; RECORDS_MAX as usize];
    let n = sorted_names.len().min(max as usize);
    for (d, s) in list.iter_mut().zip(sorted_names.iter().take(n)) {
        *d = *s;
    }
    for (i, &name) in list.iter().take(n).enumerate() {
        let Some(t) = k.tasks.get(&task) else {
            break;
        };
        let Ok(entry) = t.names.lookup(name) else {
            continue;
        };
        let kind = k.ipc.info(&t.names, name).map_or(0, |kind| kind as u64);
        let port = k.ipc.port(entry.port);
        let r = NameRecord {
            name,
            kind,
            port: if port.is_some() { entry.port.0 } else { 0 },
            queued: port.map_or(0, |p| p.queue.len() as u64),
            object: kobject::object(k, entry.port).map_or(OBJECT_NONE, KObject::report_kind),
        };
        put(k, caller, buf, i, &r.to_words())?;
    }
    Ok(total)
}

/// `host_task_port(host_priv, task)` by thread `cur` of task `caller`.
pub fn sys_task_port(
    k: &mut Kernel,
    caller: TaskId,
    cur: ThreadId,
    host_priv: u64,
    task: u64,
) -> Result<u64, Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    if k.tasks.get(&task).is_none_or(|t| t.ending.is_some()) {
        return Err(Error::NotFound);
    }
    let port = kobject::port_of(k, KObject::Task(task))?;
    let t = k.tasks.get_mut(&caller).ok_or(Error::InvalidArgument)?;
    k.ipc.grant_send(&mut t.names, port)
}

/// `host_shutdown(host_priv)` by thread `cur` of task `caller`: every task ends (the
/// caller's too, whose thread the caller then ends), and the machine powers off when none
/// is left.
pub fn shutdown(
    k: &mut Kernel,
    caller: TaskId,
    cur: ThreadId,
    host_priv: u64,
) -> Result<(), Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    k.close_line();
    kprintln!("[kernel] shutdown requested by task {caller}");
    k.shutdown_when_idle = true;
    // One task at a time (nothing is allocated: a task ends here with its threads).
    loop {
        let next = k
            .tasks
            .iter()
            .find(|(_, t)| t.ending.is_none())
            .map(|(id, _)| id);
        let Some(id) = next else {
            break;
        };
        if let Some(t) = k.tasks.get(&id) {
            kprintln!("[kernel] task {id} ({}) killed: shutdown", t.name);
        }
        k.end_task(id, Ending::Killed);
    }
    Ok(())
}

/// `host_trace(host_priv, op, records)` by thread `cur` of task `caller`: turns the
/// timeline trace (`crate::trace`) on with `records` per CPU (0: the default), the rings
/// charged to the caller's account, or off, printing it.
pub fn trace(
    k: &mut Kernel,
    caller: TaskId,
    cur: ThreadId,
    host_priv: u64,
    op: u64,
    records: u64,
) -> Result<u64, Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    match op {
        TRACE_START => {
            let per_cpu = match records {
                0 => kern::cmdline::TRACE_DEFAULT as u64,
                n if n <= TRACE_RECORDS_MAX => n,
                _ => return Err(Error::InvalidArgument),
            };
            if crate::trace::ON.load(core::sync::atomic::Ordering::Relaxed) {
                return Err(Error::Busy);
            }
            let account = &k.tasks.get(&caller).ok_or(Error::InvalidArgument)?.account;
            let bytes = crate::trace::ring_bytes(k.cpus.len(), per_cpu as usize);
            let charge = crate::quota::heap(account, bytes)?;
            k.close_line();
            crate::trace::start(k.cpus.len(), per_cpu as usize, Some(charge))?;
            Ok(per_cpu)
        }
        TRACE_STOP => {
            k.close_line();
            Ok(crate::trace::dump())
        }
        _ => Err(Error::InvalidArgument),
    }
}
