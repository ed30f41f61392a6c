//! A timeline of what the kernel does: one record per kernel entry, per CPU, with TSC
//! timestamps.
//!
//! With the command-line word `trace` (or `trace=N`, records per CPU), every entry from
//! user mode — a system call, an exception, an interrupt — is recorded: when it entered and
//! when the CPU next left for user mode, which thread (and task) entered and which left,
//! the system call's number and first argument, the id of a message it sent and of the
//! message the leaving thread finds in its IPC buffer, and how many of the continuations
//! paper's events happened meanwhile: stack handoffs, recognitions, blocks, stack
//! discards, context switches, migrating calls, and messages passed by the fast path or
//! queued. A handoff shows as an entry by one thread that leaves in another; a migrating
//! call as one that leaves in the same thread in another task. The records are counted
//! from the kernel's own statistics at entry and exit, so no path of the kernel carries a
//! hook of its own: compiled in and off, tracing costs each system call one compare and
//! one branch in the `syscall` entry's assembly (`arch::trap::set_entry_hook`), each
//! exception or interrupt from user mode one test of [`ON`], and nothing at exit, where
//! the one test every exit already makes (`STOPS_PENDING`) sends the exits to [`exit`]
//! while tracing is on.
//!
//! The rings are dumped as `TRACE` lines when the kernel shuts down (`shutdown`); `cargo
//! xtask trace` turns them into a Chrome trace-event file that Perfetto's UI opens
//! (`docs/testing.md`, "Tracing").
//!
//! # Invariants
//! - The state is touched only under the big kernel lock (every entry hook runs after
//!   `lock`, [`exit`] before `unlock`).
//! - A CPU has at most one open record: the entry that is still in the kernel; a second
//!   entry hook before the exit (the RPC fast path declining to the general path) changes
//!   nothing.
//! - While [`ON`], `STOPS_PENDING` counts one more, so every exit reaches [`exit`].

use crate::arch::{gdt, paging, serial::kprintln};
use crate::kernel::{self, Kernel, STOPS_PENDING};
use alloc::vec::Vec;
use baton_abi::ipc::MSG_SEND;
use baton_abi::Sys;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// Whether tracing is on: tested at every entry from user mode.
pub static ON: AtomicBool = AtomicBool::new(false);

/// What kind of entry a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A system call (`num` is its number).
    Syscall = 0,
    /// An exception or interrupt from user mode (`num` is the vector).
    Trap = 1,
}

/// The counters a record takes the difference of, in this order.
const COUNTERS: usize = 8;

/// One kernel entry.
#[derive(Clone, Copy, Debug, Default)]
struct Record {
    /// TSC at entry and at the next exit to user mode (or idle).
    t0: u64,
    t1: u64,
    /// [`Kind`] and the system call's number or the vector.
    kind: u8,
    num: u64,
    /// The thread (and its task) that entered, and the one that left (0: the CPU went idle).
    thread_in: u64,
    task_in: u64,
    thread_out: u64,
    task_out: u64,
    /// The first argument (`rdi`).
    arg: u64,
    /// The id of the message an `ipc_msg` sent (0 for none or not known).
    id_in: u64,
    /// The id in the leaving thread's IPC buffer header (0 for none).
    id_out: u64,
    /// The counters at entry; at exit, their differences.
    counts: [u64; COUNTERS],
}

/// One CPU's ring.
struct Ring {
    /// The records, oldest overwritten first once full.
    recs: Vec<Record>,
    /// Where the next record goes.
    next: usize,
    /// Records written in all (more than `recs.len()` once it wrapped).
    written: u64,
    /// The entry still in the kernel, if any.
    open: Option<Record>,
}

struct Cell(UnsafeCell<Vec<Ring>>);
// SAFETY: the cell is only used under the big kernel lock (see the module invariants), so
// at most one CPU touches it at a time.
unsafe impl Sync for Cell {}

static RINGS: Cell = Cell(UnsafeCell::new(Vec::new()));

/// What the rings cost the account of the task that turned tracing on (`host_trace`),
/// given back when they are freed ([`dump`]); `None` for tracing from the command line.
struct ChargeCell(UnsafeCell<Option<kern::quota::Charge>>);
// SAFETY: as `Cell`: used only under the big kernel lock.
unsafe impl Sync for ChargeCell {}
static CHARGE: ChargeCell = ChargeCell(UnsafeCell::new(None));

/// Bytes the rings of `cpus` CPUs with `per_cpu` records each take.
pub fn ring_bytes(cpus: usize, per_cpu: usize) -> usize {
    cpus.saturating_mul(per_cpu)
        .saturating_mul(core::mem::size_of::<Record>())
}

/// The rings.
///
/// # Safety
/// The big kernel lock is held, and the reference is not kept past it.
unsafe fn rings() -> &'static mut Vec<Ring> {
    // SAFETY: by the caller's contract only this CPU uses the cell now.
    unsafe { &mut *RINGS.0.get() }
}

/// Starts tracing with `per_cpu` records for each of `cpus` CPUs (the lock held), the
/// rings' memory charged with `charge` if given (kept until [`dump`] frees them).
/// [`Error::Busy`] when tracing is on already, [`Error::NoMemory`] (printed, tracing
/// stays off) when the heap has no room for the rings.
pub fn start(
    cpus: usize,
    per_cpu: usize,
    charge: Option<kern::quota::Charge>,
) -> Result<(), baton_abi::Error> {
    // SAFETY: the caller holds the lock.
    let rings = unsafe { rings() };
    if ON.load(Ordering::Relaxed) {
        return Err(baton_abi::Error::Busy);
    }
    if per_cpu == 0 {
        return Ok(());
    }
    *rings = Vec::new();
    for _ in 0..cpus {
        let mut recs = Vec::new();
        if rings.try_reserve(1).is_err() || recs.try_reserve_exact(per_cpu).is_err() {
            *rings = Vec::new();
            kprintln!("[kernel] trace: no memory for {cpus} x {per_cpu} records; off");
            return Err(baton_abi::Error::NoMemory);
        }
        recs.resize(per_cpu, Record::default());
        rings.push(Ring {
            recs,
            next: 0,
            written: 0,
            open: None,
        });
    }
    // SAFETY: the caller holds the lock.
    unsafe { *CHARGE.0.get() = charge };
    STOPS_PENDING.fetch_add(1, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
    crate::arch::trap::set_entry_hook(true);
    kprintln!("[kernel] trace: on, {per_cpu} records per CPU");
    Ok(())
}

/// The counters of [`Record::counts`], now.
fn counters(k: &Kernel) -> [u64; COUNTERS] {
    let s = &k.stats;
    let fast = k.fast_transfers;
    [
        s.stack_handoffs + fast,
        s.recognitions + fast,
        s.blocks_ipc
            + s.blocks_wait
            + s.blocks_sleep
            + s.blocks_yield
            + s.blocks_preempt
            + s.blocks_internal
            + s.blocks_process_model
            + fast,
        s.stack_discards,
        s.context_switches,
        s.migrations,
        s.ipc_fast + fast,
        s.ipc_queued,
    ]
}

/// The running thread of `cpu`: its id, its task's and its IPC buffer header's id.
fn running(k: &Kernel, cpu: usize) -> (u64, u64, Option<baton_abi::ipc::MsgHeader>) {
    let t = k.cpu(cpu).current;
    match k.threads.get(t).and_then(|th| Some((th.ctx.task?, th))) {
        Some((task, th)) => (
            t.0,
            task,
            th.ctx.ipc_buffer.map(|(_, page)| paging::read_header(page)),
        ),
        None => (0, 0, None),
    }
}

/// The `syscall` entry's hook while tracing is on (`arch::trap::set_entry_hook`), before
/// the call is dispatched: records the entry of system call `number`.
#[no_mangle]
extern "C" fn syscall_entry_hook(number: u64) {
    kernel::lock();
    // SAFETY: the lock is held.
    let k = unsafe { kernel::kernel() };
    entry(k, Kind::Syscall, number);
    kernel::unlock();
}

/// An entry from user mode (`kind`, `num`) on this CPU, the lock held: opens a record,
/// unless one is open already (the same entry, seen again on the general path).
#[inline(never)]
pub fn entry(k: &Kernel, kind: Kind, num: u64) {
    let cpu = gdt::this_cpu();
    // SAFETY: the caller holds the lock.
    let Some(ring) = (unsafe { rings() }).get_mut(cpu) else {
        return;
    };
    if ring.open.is_some() {
        return;
    }
    let (thread, task, header) = running(k, cpu);
    // The first argument (`ipc_msg`'s options).
    let arg = k
        .threads
        .get(k.cpu(cpu).current)
        .map_or(0, |th| th.ctx.frame.rdi);
    let sends = kind == Kind::Syscall && num == Sys::IpcMsg as u64 && arg & MSG_SEND != 0;
    ring.open = Some(Record {
        t0: crate::arch::cpu::rdtsc(),
        kind: kind as u8,
        num,
        thread_in: thread,
        task_in: task,
        arg,
        id_in: if sends { header.map_or(0, |h| h.id) } else { 0 },
        counts: counters(k),
        ..Record::default()
    });
}

/// The way out to user mode on this CPU (or to idle, `idle`), the lock held: closes the
/// open record, if any, with the thread that leaves and the counters' differences.
#[inline(never)]
pub fn exit(k: &Kernel, idle: bool) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let cpu = gdt::this_cpu();
    // SAFETY: the caller holds the lock.
    let Some(ring) = (unsafe { rings() }).get_mut(cpu) else {
        return;
    };
    let Some(mut r) = ring.open.take() else {
        return;
    };
    r.t1 = crate::arch::cpu::rdtsc();
    if !idle {
        let (thread, task, header) = running(k, cpu);
        (r.thread_out, r.task_out) = (thread, task);
        r.id_out = header.map_or(0, |h| h.id);
    }
    let now = counters(k);
    for (c, n) in r.counts.iter_mut().zip(now) {
        *c = n.wrapping_sub(*c);
    }
    let len = ring.recs.len();
    if let Some(slot) = ring.recs.get_mut(ring.next) {
        *slot = r;
        ring.next = (ring.next + 1) % len.max(1);
        ring.written += 1;
    }
}

/// Turns tracing off and prints every CPU's records, oldest first, as `TRACE` lines, then
/// frees the rings (the lock held); returns how many records were printed (0 when tracing
/// was off). The format is `cargo xtask trace`'s input (`xtask/src/trace.rs`).
pub fn dump() -> u64 {
    if !ON.swap(false, Ordering::Relaxed) {
        return 0;
    }
    let mut printed = 0;
    crate::arch::trap::set_entry_hook(false);
    STOPS_PENDING.fetch_sub(1, Ordering::Relaxed);
    // SAFETY: the caller holds the lock.
    let rings = unsafe { rings() };
    kprintln!(
        "[kernel] trace: TSC {} kHz, {} CPUs",
        crate::arch::apic::tsc_hz() / 1000,
        rings.len()
    );
    for (cpu, ring) in rings.iter().enumerate() {
        let len = ring.recs.len() as u64;
        let kept = ring.written.min(len);
        let lost = ring.written - kept;
        kprintln!("[kernel] trace: CPU {cpu}: {kept} records ({lost} overwritten)");
        let first = if ring.written > len { ring.next } else { 0 };
        for i in 0..kept as usize {
            let Some(r) = ring.recs.get((first + i) % ring.recs.len().max(1)) else {
                continue;
            };
            let c = &r.counts;
            kprintln!(
                "TRACE {cpu} {} {} {} {} {:x} {} {:x} {} {:x} {:x} {:x} {} {} {} {} {} {} {} {}",
                r.t0,
                r.t1,
                r.kind,
                r.num,
                r.thread_in,
                r.task_in,
                r.thread_out,
                r.task_out,
                r.arg,
                r.id_in,
                r.id_out,
                c[0],
                c[1],
                c[2],
                c[3],
                c[4],
                c[5],
                c[6],
                c[7]
            );
            printed += 1;
        }
    }
    kprintln!("[kernel] trace: end");
    *rings = Vec::new();
    // SAFETY: the caller holds the lock; dropping the charge gives it back.
    unsafe { *CHARGE.0.get() = None };
    printed
}
