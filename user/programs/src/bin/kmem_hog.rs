//! `kmem_hog`: drives each kind of kernel memory a task can make the kernel hold to its
//! task's limit — queued messages, ports, threads, mapped memory, kernel stacks kept by
//! threads blocked in the process model — and checks that the limit is an error
//! (`NoMemory`), not a kernel panic. At each limit it tells `kmem` (found through the name
//! server: see `kmem_proto`), which checks that it can still do all of these itself, and
//! then gives everything back before the next step. Started by the `kmem` test, as a
//! sibling of `kmem` (the default limits) and as its child with smaller limits. At the heap
//! limit it also checks that a message a waiting receiver takes at once still goes through
//! (it is never queued, so it is not charged).
#![no_std]
#![no_main]

#[path = "../kmem_proto.rs"]
mod kmem_proto;

use baton_rt::idl_rt::SendRight;
use baton_rt::ipc::{
    cap_drop, msg_buf, port_allocate, port_set_limit, Disposition, MsgHeader, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::names::NamesClient;
use baton_rt::rpc::Rpc;
use baton_rt::start::bootstrap;
use baton_rt::sys::{mem_map, mem_unmap};
use baton_rt::thread::create_raw;
use baton_rt::{println, sleep_ns, wake, yield_now, Error};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kmem_proto::*;

baton_rt::entry!(main);

/// One 64 KiB message (the largest).
const BIG: usize = 64 * 1024;
static mut BIG_BUF: [u8; BIG] = [0; BIG];
/// The most ports or threads it tries for (far above any default limit).
const MAX_OBJECTS: usize = 100_000;
static mut NAMES: [u64; MAX_OBJECTS] = [0; MAX_OBJECTS];
/// Where it maps memory: 1 MiB at a time from here.
const MAP_BASE: u64 = 0x10_0000_0000;
const MAP_CHUNK: u64 = 1 << 20;
/// At most this much mapped (far above any default limit).
const MAP_MAX_CHUNKS: u64 = 4096;
/// How long each process-model thread stays blocked.
const PM_NS: u64 = 2_000_000_000;

/// What the waiting and process-model threads share with the main thread (their `rdi`).
#[repr(C)]
struct Ctl {
    /// 0 while the waiters must wait.
    go: AtomicU32,
    /// Waiters that have ended.
    exited: AtomicU32,
    /// How long a process-model thread blocks.
    pm_ns: AtomicU64,
    /// Process-model calls that failed.
    pm_failed: AtomicU32,
    /// Process-model threads that have ended.
    pm_done: AtomicU32,
    /// The host-privilege right the debug call needs (0 without it).
    host: AtomicU64,
}

/// The waiting receiver of step 1: the port it receives on, its result (`u64::MAX`
/// until it has one), the first byte it got, and its stack.
static W_PORT: AtomicU64 = AtomicU64::new(0);
static W_RESULT: AtomicU64 = AtomicU64::new(u64::MAX);
static W_BYTE: AtomicU64 = AtomicU64::new(0);
/// Set by [`waiter`] once its IPC buffer exists, just before its receive.
static W_READY: AtomicU32 = AtomicU32::new(0);
static W_STACK: baton_rt::thread::StackPool<1, 16384> = baton_rt::thread::StackPool::new();

/// Receives one message on [`W_PORT`] into an IPC buffer of its own, made (and
/// announced in [`W_READY`]) before the task nears any limit.
fn waiter(_: u64) {
    let r = baton_rt::ipc::IpcBuffer::new().and_then(|mut buf| {
        W_READY.store(1, Ordering::Release);
        buf.msg(MSG_RECEIVE, W_PORT.load(Ordering::Relaxed), 30_000_000_000)?;
        W_BYTE.store(
            u64::from(buf.data().first().copied().unwrap_or(0)),
            Ordering::Relaxed,
        );
        Ok(())
    });
    W_RESULT.store(r.map_or_else(|e| e.to_raw(), |()| 0), Ordering::Relaxed);
}

static CTL: Ctl = Ctl {
    go: AtomicU32::new(0),
    exited: AtomicU32::new(0),
    pm_ns: AtomicU64::new(PM_NS),
    pm_failed: AtomicU32::new(0),
    pm_done: AtomicU32::new(0),
    host: AtomicU64::new(0),
};

/// A stack the threads below are given but never use (they touch no stack).
static mut DUMMY_STACK: [u64; 8] = [0; 8];

core::arch::global_asm!(
    // A thread that waits on `Ctl::go` until it is not 0, then counts itself out and
    // ends; it uses only registers.
    ".global kmem_waiter",
    "kmem_waiter:",
    "  mov r12, rdi",
    "2:",
    "  mov eax, 8", // wait(addr, 0, FOREVER)
    "  mov rdi, r12",
    "  xor esi, esi",
    "  mov rdx, -1",
    "  syscall",
    "  cmp dword ptr [r12], 0",
    "  je 2b",
    "  lock inc dword ptr [r12 + 4]",
    "  mov eax, 7", // thread_exit
    "  syscall",
    "  ud2",
    // A thread that blocks in the process model for `Ctl::pm_ns`, counts a failed call,
    // counts itself out and ends.
    ".global kmem_pm",
    "kmem_pm:",
    "  mov r12, rdi",
    "  mov eax, 13", // debug_block_process_model(ns, seed, host_priv)
    "  mov rdi, [r12 + 8]",
    "  mov rsi, r12",
    "  mov rdx, [r12 + 24]",
    "  syscall",
    "  cmp rax, -64", // error codes are -1 .. -63
    "  jb 3f",
    "  lock inc dword ptr [r12 + 16]",
    "3:",
    "  lock inc dword ptr [r12 + 20]",
    "  mov eax, 7",
    "  syscall",
    "  ud2",
);

extern "C" {
    fn kmem_waiter();
    fn kmem_pm();
}

fn dummy_top() -> u64 {
    core::ptr::addr_of!(DUMMY_STACK) as u64 + 64
}

fn names() -> &'static mut [u64; MAX_OBJECTS] {
    // SAFETY: only the main thread touches `NAMES`, one step at a time.
    unsafe { &mut *core::ptr::addr_of_mut!(NAMES) }
}

fn main(_task: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL kmem_hog: {e}");
            1
        }
    }
}

/// The limit gave `e`: it must be `NoMemory`, after at least one success.
fn at_limit(step: u64, count: u64, e: Error) -> Result<(), &'static str> {
    println!(
        "{}: {count} before the limit ({}), at {} ms",
        step_name(step),
        e.name(),
        baton_rt::clock_ns() / 1_000_000
    );
    if e != Error::NoMemory {
        return Err("the limit was not NoMemory");
    }
    if count == 0 {
        return Err("nothing fitted below the limit");
    }
    Ok(())
}

fn run() -> Result<(), &'static str> {
    let mut rpc = Rpc::new().map_err(|_| "rpc transport")?;
    // `kmem` registers first; look until it has.
    let mut kmem = None;
    for _ in 0..2000 {
        if let Ok(SendRight(r)) = NamesClient::new(&mut rpc, bootstrap()).lookup(SERVICE) {
            kmem = Some(r);
            break;
        }
        sleep_ns(1_000_000).map_err(|_| "sleep")?;
    }
    let kmem = kmem.ok_or("kmem never registered")?;
    let reply = rpc.reply_port();
    let tell = |rpc: &mut Rpc, step: u64, count: u64, e: Error| {
        report(rpc.ipc(), kmem, reply, step, count, e as u64).map_err(|_| "report to kmem")
    };

    // A thread of this task waits in a receive on a port of its own, made before any
    // limit is near (step 1 sends to it at the heap limit).
    let w_port = port_allocate(0).map_err(|_| "waiter's port")?;
    let w_send = baton_rt::ipc::port_make_send(w_port, false).map_err(|_| "waiter's send")?;
    W_PORT.store(w_port, Ordering::Relaxed);
    let stack = W_STACK.take().ok_or("waiter's stack")?;
    baton_rt::thread::spawn(stack, waiter, 0).map_err(|_| "waiter thread")?;
    // Its IPC buffer must exist before the heap fills; it is then about to receive.
    for _ in 0..5000 {
        if W_READY.load(Ordering::Acquire) != 0 || W_RESULT.load(Ordering::Relaxed) != u64::MAX {
            break;
        }
        sleep_ns(1_000_000).map_err(|_| "sleep")?;
    }
    if W_READY.load(Ordering::Acquire) == 0 {
        return Err("the waiter never made its IPC buffer");
    }

    // 1. Queued messages: 64 KiB each on a port with room for 1,024.
    let port = port_allocate(1024).map_err(|_| "port")?;
    port_set_limit(port, 1024).map_err(|_| "port limit")?;
    let send = baton_rt::ipc::port_make_send(port, false).map_err(|_| "send right")?;
    // SAFETY: only this thread uses `BIG_BUF`.
    let big = unsafe { &mut *core::ptr::addr_of_mut!(BIG_BUF) };
    let mut queued = 0u64;
    let header = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: send,
        id: 7,
        size: BIG as u32,
        ..MsgHeader::default()
    }
    .to_bytes();
    let e = loop {
        big[..baton_rt::ipc::HEADER_SIZE].copy_from_slice(&header);
        match msg_buf(big, MSG_SEND, 0, 0) {
            Ok(()) => queued += 1,
            Err(e) => break e,
        }
        if queued > 1024 {
            return Err("more than the queue limit of messages were queued");
        }
    };
    at_limit(STEP_MESSAGES, queued, e)?;
    // At the heap limit, a message that a waiting receiver takes at once is never queued,
    // so it is not charged: it goes through, on the general path too. First the room a
    // 64 KiB message did not fit in is filled with one-byte messages, so that one more
    // charged message of that size would be refused.
    let fill = port_allocate(0).map_err(|_| "fill port")?;
    port_set_limit(fill, 1024).map_err(|_| "fill port limit")?;
    let fill_send = baton_rt::ipc::port_make_send(fill, false).map_err(|_| "fill send")?;
    let one_byte = |dest: u64| MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest,
        id: 8,
        size: (baton_rt::ipc::HEADER_SIZE + 1) as u32,
        ..MsgHeader::default()
    };
    let mut small = 0u32;
    loop {
        rpc.ipc()
            .set(one_byte(fill_send), &[], b"f")
            .map_err(|_| "a fill message")?;
        match rpc.ipc().msg(MSG_SEND, 0, 0) {
            Ok(()) => small += 1,
            Err(Error::NoMemory) => break,
            Err(_) => return Err("a one-byte message was refused for another reason than memory"),
        }
        if small >= 1024 {
            return Err("the one-byte messages never met the heap limit");
        }
    }
    let to_waiter = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: w_send,
        id: 8,
        size: (baton_rt::ipc::HEADER_SIZE + 1) as u32,
        ..MsgHeader::default()
    };
    rpc.ipc()
        .set(to_waiter, &[], b"w")
        .map_err(|_| "the message to the waiter")?;
    // The waiter announced itself just before its receive, so it may not be blocked
    // yet: a send that finds no one waiting would be queued and charged, so it is
    // refused for memory and tried again after a pause. One that finds the waiter must
    // go through; charged as a queued message would be, every try fails.
    let mut sent = Err(Error::NoMemory);
    for _ in 0..2000 {
        sent = rpc.ipc().msg(MSG_SEND | baton_rt::ipc::MSG_SLOW, 0, 0);
        if sent != Err(Error::NoMemory) || W_RESULT.load(Ordering::Relaxed) != u64::MAX {
            break;
        }
        sleep_ns(1_000_000).map_err(|_| "sleep")?;
        rpc.ipc()
            .set(to_waiter, &[], b"w")
            .map_err(|_| "the message to the waiter")?;
    }
    let mut got = W_RESULT.load(Ordering::Relaxed);
    for _ in 0..5000 {
        if got != u64::MAX {
            break;
        }
        sleep_ns(1_000_000).map_err(|_| "sleep")?;
        got = W_RESULT.load(Ordering::Relaxed);
    }
    if sent.is_err() || got != 0 || W_BYTE.load(Ordering::Relaxed) != u64::from(b'w') {
        println!(
            "at the heap limit: the send to a waiting receiver gave {sent:?}, its receive {got:#x}"
        );
        return Err("at the heap limit, a message to a waiting receiver did not go through");
    }
    println!("ok: at its heap limit, a message to a waiting receiver goes through (never queued, never charged; {small} one-byte messages filled the room left)");
    while rpc.ipc().msg(MSG_RECEIVE, fill, 0).is_ok() {}
    cap_drop(fill_send).map_err(|_| "drop the fill send")?;
    cap_drop(fill).map_err(|_| "drop the fill port")?;
    cap_drop(w_send).map_err(|_| "drop the waiter's send")?;
    cap_drop(w_port).map_err(|_| "drop the waiter's port")?;
    tell(&mut rpc, STEP_MESSAGES, queued, e)?;
    // Giving back: one message received frees room for one more.
    msg_buf(big, MSG_RECEIVE, port, 0).map_err(|_| "receive a queued message")?;
    big[..baton_rt::ipc::HEADER_SIZE].copy_from_slice(&header);
    msg_buf(big, MSG_SEND, 0, 0).map_err(|_| "a message after one was received")?;
    cap_drop(send).map_err(|_| "drop send")?;
    cap_drop(port).map_err(|_| "drop port")?;

    // 2. Ports.
    let mut ports = 0usize;
    let e = loop {
        if ports == MAX_OBJECTS {
            return Err("no limit on ports");
        }
        match port_allocate(0) {
            Ok(n) => {
                names()[ports] = n;
                ports += 1;
            }
            Err(e) => break e,
        }
    };
    at_limit(STEP_PORTS, ports as u64, e)?;
    tell(&mut rpc, STEP_PORTS, ports as u64, e)?;
    for &n in &names()[..ports] {
        cap_drop(n).map_err(|_| "drop a port")?;
    }
    port_allocate(0)
        .and_then(cap_drop)
        .map_err(|_| "a port after the others went")?;

    // 3. Threads that wait forever.
    let mut threads = 0u64;
    let e = loop {
        if threads as usize == MAX_OBJECTS {
            return Err("no limit on threads");
        }
        // SAFETY: `kmem_waiter` uses only registers and the `Ctl` its `rdi` points at,
        // which is static; it never touches its stack.
        match unsafe {
            create_raw(
                kmem_waiter as *const () as u64,
                dummy_top(),
                &CTL as *const Ctl as u64,
            )
        } {
            Ok(_) => threads += 1,
            Err(e) => break e,
        }
    };
    at_limit(STEP_THREADS, threads, e)?;
    tell(&mut rpc, STEP_THREADS, threads, e)?;
    CTL.go.store(1, Ordering::Release);
    wake(&CTL.go, u64::MAX).map_err(|_| "wake")?;
    for _ in 0..100_000 {
        if u64::from(CTL.exited.load(Ordering::Acquire)) == threads {
            break;
        }
        sleep_ns(1_000_000).map_err(|_| "sleep")?;
    }
    if u64::from(CTL.exited.load(Ordering::Acquire)) != threads {
        return Err("the waiting threads did not all end");
    }

    // 4. Mapped memory.
    let mut chunks = 0u64;
    let e = loop {
        if chunks == MAP_MAX_CHUNKS {
            return Err("no limit on memory");
        }
        match mem_map(MAP_BASE + chunks * MAP_CHUNK, MAP_CHUNK, true) {
            Ok(()) => chunks += 1,
            Err(e) => break e,
        }
    };
    at_limit(STEP_MEMORY, chunks, e)?;
    tell(&mut rpc, STEP_MEMORY, chunks, e)?;
    // SAFETY: nothing refers to the memory mapped above.
    unsafe { mem_unmap(MAP_BASE, chunks * MAP_CHUNK) }.map_err(|_| "unmap")?;

    // 5. Threads blocked in the process model (a debug call: only with the
    //    host-privilege right, which the sibling started from the command line has and a
    //    spawned child does not).
    CTL.host
        .store(baton_rt::start::host_priv(), Ordering::Relaxed);
    if CTL.host.load(Ordering::Relaxed) == 0 {
        println!("no host-privilege right: the process-model step is skipped");
        tell(&mut rpc, DONE, 0, Error::NoMemory)?;
        println!("TEST PASS kmem_hog");
        return Ok(());
    }
    // 5. Threads blocked in the process model, each keeping a kernel stack. They are
    //    created a few at a time, letting each batch block, until a call or a creation
    //    fails.
    let mut pm = 0u64;
    let mut create_error = None;
    while CTL.pm_failed.load(Ordering::Acquire) == 0 && create_error.is_none() {
        if pm as usize >= MAX_OBJECTS {
            return Err("no limit on process-model threads");
        }
        for _ in 0..32 {
            // SAFETY: as for `kmem_waiter`.
            match unsafe {
                create_raw(
                    kmem_pm as *const () as u64,
                    dummy_top(),
                    &CTL as *const Ctl as u64,
                )
            } {
                Ok(_) => pm += 1,
                Err(e) => {
                    create_error = Some(e);
                    break;
                }
            }
        }
        // Let them block (each runs once and blocks; a failed one ends at once).
        for _ in 0..40 {
            yield_now();
        }
    }
    let failed = CTL.pm_failed.load(Ordering::Acquire);
    let e = create_error.unwrap_or(Error::NoMemory);
    println!("process-model calls refused: {failed}, thread creation: {create_error:?}");
    at_limit(STEP_STACKS, pm, e)?;
    tell(&mut rpc, STEP_STACKS, pm, e)?;
    for _ in 0..100_000 {
        if u64::from(CTL.pm_done.load(Ordering::Acquire)) == pm {
            break;
        }
        sleep_ns(10_000_000).map_err(|_| "sleep")?;
    }
    if u64::from(CTL.pm_done.load(Ordering::Acquire)) != pm {
        return Err("the process-model threads did not all end");
    }

    tell(&mut rpc, DONE, 0, Error::NoMemory)?;
    println!("TEST PASS kmem_hog");
    Ok(())
}
