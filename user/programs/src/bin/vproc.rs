//! `vproc`: virtual processors with Block and Unblock upcalls (Sting's kernel support;
//! `docs/sting.md`, "The kernel half").
//!
//! - bad registrations (addresses, stacks, sizes, alignment, a second one, foreign ids,
//!   calls by a thread that carries nothing) get their error codes;
//! - a sting thread that waits for the heap lock, while its processor's scheduler then
//!   waits for it too, gets no Block upcall (the wait is the runtime's own), and both get
//!   the lock;
//! - on one virtual processor with upcalls, a sting thread blocks in a kernel receive
//!   that only another task (`vproc_peer`) satisfies, and another in a futex `wait`: the
//!   other threads of the same processor make progress meanwhile (a progress counter moves
//!   while the receive waits), and each blocked thread resumes with its call's result (the
//!   peer's message; `wait`'s 0);
//! - with one spare, a second thread that blocks while the first is still blocked falls
//!   back to blocking the processor (one Block upcall, not two), and both resume right;
//! - a sting thread blocked in a kernel receive through its IPC buffer (with an upcall
//!   given) is the receiver of another task's RPC in the fast path's form: it resumes with
//!   the request (an Unblock upcall), its reply reaches the caller, and its processor ran
//!   its other thread meanwhile (the count of fast transfers is printed: so far the same
//!   with the fast path open to such a receiver or closed to it, so which path delivered
//!   the call is not yet pinned down);
//! - a child (`vproc_child`) killed while two of its threads are blocked with upcalls
//!   given and its spares parked leaves nothing behind: the kernel's threads, charges and
//!   heap are back to the baseline.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_abi::vproc::{VpConfig, VpEvent, UPCALL_STACK_MIN};
use baton_rt::check::{finish, Failed};
use baton_rt::ipc::{cap_drop, data_word, msg_buf, port_allocate, IpcBuffer};
use baton_rt::vproc::{vp_create, vp_create_raw, vp_destroy, vp_spares, vp_take, vp_wait_raw};
use baton_rt::{println, Error};
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use sting::{Config, Kind};

baton_rt::entry!(main);

const TEST: &str = "vproc";
/// The id of `vproc_peer`'s messages.
const PEER_ID: u64 = 0x7670_0001;
/// How long the peer waits before it answers a request: long enough for the test's
/// threads to have blocked.
const PEER_DELAY: u64 = 50_000_000;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) }
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    finish(TEST, run())
}

/// Receives one message on `port` into a buffer of the caller's (the IPC buffer belongs to
/// a kernel thread, and a sting thread may resume on another): its id, first data word
/// and reply right.
fn receive(port: u64, ns: u64) -> Result<(u64, u64, u64), Error> {
    let mut buf = [0u8; HEADER_SIZE + 16];
    msg_buf(&mut buf, MSG_RECEIVE, port, ns)?;
    let h = MsgHeader::from_bytes(&buf).ok_or(Error::BadFormat)?;
    Ok((
        h.id,
        data_word(buf.get(HEADER_SIZE..).unwrap_or(&[]), 0),
        h.reply,
    ))
}

/// Asks the peer (through `q`, a send right to its port) to send `count` messages after
/// `delay` nanoseconds.
fn request(q: u64, delay: u64, count: u64) -> Result<(), Error> {
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
    buf[HEADER_SIZE + 8..].copy_from_slice(&count.to_le_bytes());
    msg_buf(&mut buf, MSG_SEND, 0, baton_abi::FOREVER)
}

fn run() -> Result<(), Failed> {
    bad_registrations()?;
    let port = must("port_allocate", port_allocate(0))?;
    must(
        "spawn vproc_peer",
        baton_rt::sys::spawn_with("vproc_peer", port),
    )?;
    let (id, _, q) = must("the peer's hello", receive(port, 5_000_000_000))?;
    check!(
        id == PEER_ID && q != 0,
        "the peer said hello with a send right to its port"
    );
    heap_lock_waits()?;
    kernel_receive(port, q)?;
    exhaustion(port, q)?;
    two_processors(port, q)?;
    fast_path_receiver(port, q)?;
    per_cpu_sleepers()?;
    let _ = request(q, 0, 0);
    let _ = cap_drop(q);
    let _ = cap_drop(port);
    // The first round warms up what the kernel keeps once made (table slots); each later
    // one must give back exactly what it took.
    killed_child()?;
    for round in 1..=2 {
        let (base, after) = killed_child()?;
        check!(
            after == base,
            "round {round}: a child killed with threads blocked and spares parked leaves nothing: threads, charged kernel memory and heap {base:?} before, {after:?} after"
        );
    }
    Ok(())
}

/// An upcall entry for registrations that never get an upcall.
extern "C" fn never(_ev: *const VpEvent, _kind: u64, _cookie: u64) -> ! {
    panic!("vproc: an upcall that should not have come");
}

fn bad_registrations() -> Result<(), Failed> {
    let stack = alloc::vec![0u8; 2 * UPCALL_STACK_MIN as usize + 16];
    let lo = (stack.as_ptr() as u64 + 15) & !15;
    let good = VpConfig {
        entry: never as *const () as u64,
        upcall_lo: lo,
        upcall_hi: lo + 2 * UPCALL_STACK_MIN,
        ..VpConfig::default()
    };
    let with = |f: &dyn Fn(&mut VpConfig)| {
        let mut c = good;
        f(&mut c);
        vp_create(&c)
    };
    check!(
        vp_create_raw(0) == Err(Error::BadAddress),
        "vp_create: a null configuration is a bad address"
    );
    check!(
        vp_create_raw(0xffff_8000_0000_0000) == Err(Error::BadAddress),
        "vp_create: a kernel address is a bad address"
    );
    check!(
        with(&|c| c.entry = 0) == Err(Error::BadAddress),
        "vp_create: entry 0 is a bad address"
    );
    check!(
        with(&|c| c.entry = 0xffff_ffff_8000_0000) == Err(Error::BadAddress),
        "vp_create: an entry in the kernel half is a bad address"
    );
    check!(
        with(&|c| c.upcall_lo += 8) == Err(Error::InvalidArgument),
        "vp_create: a misaligned upcall stack is invalid"
    );
    check!(
        with(&|c| c.upcall_lo = c.upcall_hi - 16) == Err(Error::InvalidArgument),
        "vp_create: an upcall stack under the minimum is invalid"
    );
    check!(
        with(&|c| {
            c.upcall_lo = 0xffff_8000_0000_0000;
            c.upcall_hi = 0xffff_8000_0001_0000;
        }) == Err(Error::BadAddress),
        "vp_create: an upcall stack in the kernel half is a bad address"
    );
    check!(
        with(&|c| {
            c.upcall_lo = 0x10_0000_0000;
            c.upcall_hi = 0x10_0001_0000;
        }) == Err(Error::BadAddress),
        "vp_create: an unmapped upcall stack is a bad address"
    );
    check!(
        with(&|c| c.upcall_hi = c.upcall_lo) == Err(Error::BadAddress),
        "vp_create: an empty upcall stack is a bad address"
    );
    check!(
        with(&|c| c.mailbox = lo + 4) == Err(Error::InvalidArgument),
        "vp_create: a misaligned mailbox is invalid"
    );
    check!(
        with(&|c| c.mailbox = 0x10_0000_0000) == Err(Error::BadAddress),
        "vp_create: an unmapped mailbox is a bad address"
    );
    check!(
        with(&|c| {
            c.quiet_lo = 8;
            c.quiet_hi = 4;
        }) == Err(Error::BadAddress),
        "vp_create: a reversed quiet range is a bad address"
    );
    let mut ev = [VpEvent::default(); 2];
    check!(
        vp_take(&mut ev) == Err(Error::InvalidArgument),
        "vp_take by a thread that carries nothing is invalid"
    );
    let word = AtomicU32::new(0);
    check!(
        vp_wait_raw(word.as_ptr() as u64, 0, 1000) == Err(Error::InvalidArgument),
        "vp_wait by a thread that carries nothing is invalid"
    );
    check!(
        vp_spares(12345, 1) == Err(Error::NotFound),
        "vp_spares of no such processor is not found"
    );
    check!(
        vp_destroy(12345) == Err(Error::NotFound),
        "vp_destroy of no such processor is not found"
    );
    let top = good.upcall_hi - 8;
    let wired = |at: u64| baton_rt::vm::query(at).map(|r| r.wired).unwrap_or(u64::MAX);
    let before = wired(top);
    let vp = must("vp_create", vp_create(&good))?;
    let during = wired(top);
    check!(
        before == 0 && during == 1,
        "the page where upcall events are written is wired while the processor lives (wired {before}, then {during}): the kernel's upcall never waits for it"
    );
    check!(
        vp_create(&good) == Err(Error::Busy),
        "vp_create twice from one thread is busy"
    );
    check!(
        vp_spares(vp, 9) == Err(Error::InvalidArgument),
        "vp_spares above the limit is invalid"
    );
    check!(
        vp_spares(vp, 3) == Ok(3) && vp_spares(vp, 1) == Ok(1) && vp_spares(vp, 0) == Ok(0),
        "vp_spares makes and ends spares"
    );
    check!(
        vp_take(&mut ev) == Ok(0),
        "vp_take with nothing queued takes nothing"
    );
    // SAFETY: the count is refused before the buffer is looked at: nothing is written.
    let too_large = unsafe { baton_rt::vproc::vp_take_raw(0, 17) };
    check!(
        too_large == Err(Error::TooLarge),
        "vp_take above its maximum is too large"
    );
    check!(
        vp_wait_raw(word.as_ptr() as u64 + 1, 0, 1000) == Err(Error::InvalidArgument),
        "vp_wait on a misaligned word is invalid"
    );
    check!(
        vp_wait_raw(word.as_ptr() as u64, 1, 1000) == Err(Error::WouldBlock),
        "vp_wait on a changed word would block"
    );
    check!(
        vp_wait_raw(word.as_ptr() as u64, 0, 1000) == Err(Error::TimedOut),
        "vp_wait times out with nothing to deliver"
    );
    must("vp_spares 2", vp_spares(vp, 2))?;
    check!(
        vp_destroy(vp) == Ok(()) && vp_destroy(vp) == Err(Error::NotFound),
        "vp_destroy ends the processor (and its spares) once"
    );
    let after = wired(top);
    check!(
        after == 0,
        "vp_destroy unwires the upcall event's page (wired {after})"
    );
    let again = must("vp_create after destroy", vp_create(&good))?;
    must("vp_destroy", vp_destroy(again))?;
    Ok(())
}

/// What one thread's receive got: its result and how far the progress counter moved
/// while it waited.
type Got = (Result<(u64, u64, u64), Error>, u64);

fn kernel_receive(port: u64, q: u64) -> Result<(), Failed> {
    let ((got, woke), st) = sting::run(Config::new(1, Kind::Fifo).kernel_upcalls(2), move || {
        let counter = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let word = Arc::new(AtomicU32::new(0));
        let (c, d) = (counter.clone(), done.clone());
        let busy = sting::fork(move || {
            while !d.load(Acquire) {
                c.fetch_add(1, Relaxed);
                sting::yield_now();
            }
        });
        let _ = request(q, PEER_DELAY, 1);
        let c = counter.clone();
        let receiver = sting::fork(move || -> Got {
            let before = c.load(Relaxed);
            let r = receive(port, 5_000_000_000);
            (r, c.load(Relaxed) - before)
        });
        let w = word.clone();
        let waiter = sting::fork(move || baton_rt::wait(&w, 0, 5_000_000_000));
        let (c, w) = (counter.clone(), word.clone());
        let waker = sting::fork(move || {
            while c.load(Relaxed) < 200 {
                sting::yield_now();
            }
            w.store(1, Release);
            baton_rt::wake(&w, 1)
        });
        let got = *receiver.value().unwrap_or(&(Err(Error::Aborted), 0));
        let woke = *waiter.value().unwrap_or(&Err(Error::Aborted));
        let _ = waker.value();
        done.store(true, Release);
        let _ = busy.value();
        (got, woke)
    });
    let (r, progress) = got;
    println!(
        "receive {r:?}, progress while blocked {progress}, wait {woke:?}; kernel blocks {}, unblocks {}",
        st.kernel_blocks, st.kernel_unblocks
    );
    check!(
        matches!(r, Ok((PEER_ID, seq, _)) if seq >= 1),
        "the thread blocked in a kernel receive resumed with the peer's message"
    );
    check!(
        progress > 0,
        "the other threads of its virtual processor ran while it was blocked ({progress} steps)"
    );
    check!(
        woke == Ok(()),
        "the thread blocked in wait resumed with its result"
    );
    check!(
        st.kernel_blocks >= 2 && st.kernel_unblocks == st.kernel_blocks,
        "each block was an upcall and came back ({} blocks, {} unblocks)",
        st.kernel_blocks,
        st.kernel_unblocks
    );
    Ok(())
}

fn exhaustion(port: u64, q: u64) -> Result<(), Failed> {
    let ((a, b), st) = sting::run(Config::new(1, Kind::Fifo).kernel_upcalls(1), move || {
        let _ = request(q, PEER_DELAY, 2);
        let first = sting::fork(move || receive(port, 5_000_000_000));
        let second = sting::fork(move || receive(port, 5_000_000_000));
        let a = *first.value().unwrap_or(&Err(Error::Aborted));
        let b = *second.value().unwrap_or(&Err(Error::Aborted));
        (a, b)
    });
    println!(
        "first {a:?}, second {b:?}; kernel blocks {}, unblocks {}",
        st.kernel_blocks, st.kernel_unblocks
    );
    check!(
        matches!((a, b), (Ok((PEER_ID, x, _)), Ok((PEER_ID, y, _))) if x != y),
        "both receivers resumed, each with one of the peer's messages"
    );
    check!(
        st.kernel_blocks == 1 && st.kernel_unblocks == 1,
        "with one spare the second block fell back to blocking the processor ({} upcalls)",
        st.kernel_blocks
    );
    Ok(())
}

/// Two virtual processors (one kernel thread each, on different CPUs when there are
/// several), each with a thread blocked in a receive and one counting: both receivers
/// resume with a message each, and both processors ran their counters meanwhile.
fn two_processors(port: u64, q: u64) -> Result<(), Failed> {
    let ((a, b), st) = sting::run(Config::new(2, Kind::Fifo).kernel_upcalls(2), move || {
        let done = Arc::new(AtomicBool::new(false));
        let counters = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        let mut busy = alloc::vec::Vec::new();
        for (vp, c) in counters.iter().enumerate() {
            let (c, d) = (c.clone(), done.clone());
            busy.push(sting::fork_on(vp, move || {
                while !d.load(Acquire) {
                    c.fetch_add(1, Relaxed);
                    sting::yield_now();
                }
            }));
        }
        let _ = request(q, PEER_DELAY, 2);
        let receivers = [0, 1].map(|vp| {
            let c = counters[vp].clone();
            sting::fork_on(vp, move || -> Got {
                let before = c.load(Relaxed);
                let r = receive(port, 5_000_000_000);
                (r, c.load(Relaxed) - before)
            })
        });
        let got = receivers.map(|r| *r.value().unwrap_or(&(Err(Error::Aborted), 0)));
        done.store(true, Release);
        for t in busy {
            let _ = t.value();
        }
        (got[0], got[1])
    });
    println!(
        "processor 0 {a:?}, processor 1 {b:?}; kernel blocks {}, unblocks {}",
        st.kernel_blocks, st.kernel_unblocks
    );
    check!(
        matches!((a.0, b.0), (Ok((PEER_ID, x, _)), Ok((PEER_ID, y, _))) if x != y),
        "on two virtual processors both receivers resumed, each with one of the peer's messages"
    );
    check!(
        a.1 > 0 && b.1 > 0,
        "each processor ran its other thread while its receiver was blocked ({} and {} steps)",
        a.1,
        b.1
    );
    check!(
        st.kernel_blocks >= 2 && st.kernel_unblocks == st.kernel_blocks,
        "each block was an upcall and came back ({} blocks, {} unblocks)",
        st.kernel_blocks,
        st.kernel_unblocks
    );
    Ok(())
}

/// Asks the peer (through `q`) to call this task's port `count` times after `delay`
/// nanoseconds (an RPC each, which the fast path may take).
fn request_calls(q: u64, delay: u64, count: u64) -> Result<(), Error> {
    let mut buf = [0u8; HEADER_SIZE + 24];
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: (HEADER_SIZE + 24) as u32,
        dest: q,
        id: 1,
        ..MsgHeader::default()
    };
    buf[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    for (i, w) in [delay, count, 1].into_iter().enumerate() {
        let at = HEADER_SIZE + 8 * i;
        buf[at..at + 8].copy_from_slice(&w.to_le_bytes());
    }
    msg_buf(&mut buf, MSG_SEND, 0, baton_abi::FOREVER)
}

/// The id of the peer's calls.
const PEER_CALL_ID: u64 = 0x7670_0003;
/// What the server adds to a call's word in its reply.
const REPLY_ADD: u64 = 1000;

/// Receives one call on `port` through an IPC buffer of this kernel thread's (blocking,
/// with an upcall given) and replies with its word plus [`REPLY_ADD`]: the call's id and
/// word.
fn serve_one(port: u64) -> Result<(u64, u64), Error> {
    let mut ipc = IpcBuffer::new()?;
    ipc.msg(MSG_RECEIVE, port, 5_000_000_000)?;
    let h = ipc.header();
    let word = data_word(ipc.data(), 0);
    // The reply goes through a buffer of the caller's: the thread may now run on another
    // kernel thread than the one whose IPC buffer received the call.
    let mut buf = [0u8; HEADER_SIZE + 8];
    let r = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
        size: (HEADER_SIZE + 8) as u32,
        dest: h.reply,
        id: h.id,
        ..MsgHeader::default()
    };
    buf[..HEADER_SIZE].copy_from_slice(&r.to_bytes());
    buf[HEADER_SIZE..].copy_from_slice(&(word + REPLY_ADD).to_le_bytes());
    msg_buf(&mut buf, MSG_SEND, 0, baton_abi::FOREVER)?;
    Ok((h.id, word))
}

/// A sting thread blocked in a kernel receive through its IPC buffer (a Block upcall
/// given) is the receiver of the peer's RPC, which the switching fast path may deliver
/// straight into its buffer: the thread comes back through an Unblock upcall with the
/// request, its reply reaches the peer (which sends the reply's word back), no upcall is
/// lost and the processor ran its other thread meanwhile.
fn fast_path_receiver(port: u64, q: u64) -> Result<(), Failed> {
    let fast_before = baton_rt::sys::stats().map_or(0, |s| s.ipc_fast);
    let ((got, progress), st) =
        sting::run(Config::new(1, Kind::Fifo).kernel_upcalls(2), move || {
            let counter = Arc::new(AtomicU64::new(0));
            let done = Arc::new(AtomicBool::new(false));
            let (c, d) = (counter.clone(), done.clone());
            let busy = sting::fork(move || {
                while !d.load(Acquire) {
                    c.fetch_add(1, Relaxed);
                    sting::yield_now();
                }
            });
            let _ = request_calls(q, PEER_DELAY, 1);
            let c = counter.clone();
            let server = sting::fork(move || {
                let before = c.load(Relaxed);
                let r = serve_one(port);
                (r, c.load(Relaxed) - before)
            });
            let got = *server.value().unwrap_or(&(Err(Error::Aborted), 0));
            done.store(true, Release);
            let _ = busy.value();
            got
        });
    let back = receive(port, 5_000_000_000);
    let fast = baton_rt::sys::stats().map_or(0, |s| s.ipc_fast) - fast_before;
    println!(
        "served {got:?}, progress while blocked {progress}, the peer got back {back:?}; kernel blocks {}, unblocks {}; fast transfers {fast}",
        st.kernel_blocks, st.kernel_unblocks
    );
    check!(
        matches!(got, Ok((PEER_CALL_ID, w)) if w >= 1),
        "the thread blocked in a receive through its IPC buffer resumed with the peer's call"
    );
    check!(
        matches!((got, back), (Ok((_, w)), Ok((PEER_ID, b, _))) if b == w + REPLY_ADD),
        "its reply reached the caller"
    );
    check!(
        progress > 0,
        "the other thread of its virtual processor ran while it was blocked ({progress} steps)"
    );
    check!(
        st.kernel_blocks >= 1 && st.kernel_unblocks == st.kernel_blocks,
        "each block was an upcall and came back ({} blocks, {} unblocks)",
        st.kernel_blocks,
        st.kernel_unblocks
    );
    Ok(())
}

/// Set by [`heap_holder`] once it holds the heap lock.
static HEAP_HELD: AtomicU32 = AtomicU32::new(0);

/// A plain kernel thread that holds the heap lock for 100 ms.
fn heap_holder(_: u64) {
    baton_rt::heap::with_lock(|| {
        HEAP_HELD.store(1, Release);
        let _ = baton_rt::sys::sleep_ns(100_000_000);
    });
    HEAP_HELD.store(2, Release);
}

/// A sting thread that waits for the heap lock while the scheduler of its processor then
/// waits for it too (to make a TCB for the next thread): the wait is the runtime's own,
/// so the processor waits with the thread (no Block upcall), and both get the lock once
/// its holder lets it go. With an upcall, the unlock would wake the detached thread,
/// whose Unblock the scheduler, itself waiting for the lock, would never take.
fn heap_lock_waits() -> Result<(), Failed> {
    let stack = alloc::boxed::Box::leak(alloc::vec![0u8; 16 * 1024].into_boxed_slice());
    let (got, st) = sting::run(Config::new(1, Kind::Fifo).kernel_upcalls(2), move || {
        // Queued, not started: starting it takes a new TCB from the heap.
        let next = sting::fork(|| 7u64);
        if baton_rt::thread::spawn(stack, heap_holder, 0).is_err() {
            return 0;
        }
        while HEAP_HELD.load(Acquire) == 0 {
            baton_rt::yield_now();
        }
        let b = alloc::boxed::Box::new(35u64);
        *b + *next.value().unwrap_or(&0)
    });
    check!(
        got == 42 && st.kernel_blocks == st.kernel_unblocks,
        "a thread that waited for the heap lock, and then its processor's scheduler, both got it (kernel blocks {}, unblocks {})",
        st.kernel_blocks,
        st.kernel_unblocks
    );
    Ok(())
}

/// The default configuration, one virtual processor per CPU (work stealing), with four
/// threads per processor that sleep in the kernel: each sleep is a Block upcall where a
/// spare is free and comes back, and every thread resumes with `sleep`'s result.
fn per_cpu_sleepers() -> Result<(), Failed> {
    let config = Config::per_cpu(Kind::WorkStealing).kernel_upcalls(2);
    let (results, st) = sting::run(config, || {
        let n = 4 * sting::vp_count();
        let sleepers: alloc::vec::Vec<_> = (0..n)
            .map(|i| {
                sting::fork_on(i % sting::vp_count(), || {
                    baton_rt::sys::sleep_ns(20_000_000)
                })
            })
            .collect();
        let ok = sleepers
            .iter()
            .filter(|t| matches!(t.value(), Ok(Ok(()))))
            .count();
        (ok, n, sting::vp_count())
    });
    let (ok, n, vps) = results;
    println!(
        "{vps} processors, {ok} of {n} sleepers resumed; kernel blocks {}, unblocks {}",
        st.kernel_blocks, st.kernel_unblocks
    );
    check!(
        ok == n && st.kernel_blocks >= vps as u64 && st.kernel_unblocks == st.kernel_blocks,
        "one processor per CPU ({vps}): every sleeper resumed with its result, and each Block upcall came back as an Unblock ({} blocks, {} unblocks)",
        st.kernel_blocks,
        st.kernel_unblocks
    );
    Ok(())
}

/// Threads, charged kernel memory and kernel heap in use.
type Measure = (u64, u64, u64);

/// The kernel's [`Measure`] now.
fn baseline() -> Measure {
    baton_rt::sys::stats().map_or((0, 0, 0), |s| (s.threads, s.kmem_charged, s.heap_used))
}

/// Spawns `vproc_child`, waits until two of its threads are blocked with upcalls given,
/// kills it, and returns the baseline measured before it started and what is measured
/// once everything is back to it (or after a while).
fn killed_child() -> Result<(Measure, Measure), Failed> {
    let base = baseline();
    let port = must("port_allocate", port_allocate(0))?;
    let reply = must("port_allocate", port_allocate(0))?;
    let child = must(
        "spawn vproc_child",
        baton_rt::sys::spawn_with("vproc_child", port),
    )?;
    let (id, blocks, _) = must("the child's word", receive(port, 10_000_000_000))?;
    check!(
        id == 0x7670_0002 && blocks == 2,
        "the child has two threads blocked with upcalls given ({blocks})"
    );
    // Told when the child's send right goes (it holds it now).
    must(
        "port_notify",
        baton_rt::ipc::port_notify(port, baton_abi::ipc::NOTIFY_KIND_NO_SENDERS, port),
    )?;
    let tport = must("task_port", baton_rt::kobject::task_port(child))?;
    let mut buf = must("IpcBuffer", baton_rt::ipc::IpcBuffer::new())?;
    must(
        "TASK_TERMINATE",
        baton_rt::kobject::call(
            &mut buf,
            tport,
            reply,
            baton_rt::kobject::TASK_TERMINATE,
            &[],
            5_000_000_000,
        ),
    )?;
    let _ = cap_drop(tport);
    drop(buf);
    check!(
        receive(port, 5_000_000_000).map(|r| r.0) == Ok(baton_abi::ipc::NOTIFY_NO_SENDERS),
        "the child ended"
    );
    // This task's own ports go too (their queues keep room for the send-once rights the
    // notification and the kernel-object call made), so everything is as before.
    let _ = cap_drop(port);
    let _ = cap_drop(reply);
    let mut now = baseline();
    for _ in 0..100 {
        if now == base {
            break;
        }
        let _ = baton_rt::sys::sleep_ns(10_000_000);
        now = baseline();
    }
    Ok((base, now))
}
