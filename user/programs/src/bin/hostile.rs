//! `hostile`: hostile messages and hostile port calls. Each must fail with its exact error
//! code and change nothing, while the kernel and another task keep running, and the
//! kernel's counts of ports, names, queued messages, threads and heap bytes must come back
//! to their baseline.
//!
//! It starts `hostile_peer` (a server) with a bootstrap right to a port of its own and
//! receives the server's send right from it. A client thread then calls the peer with echo
//! RPCs without pause while the main thread runs the case groups ([`GROUPS`]): malformed
//! options and headers, missing or bad IPC buffers, bad destination, reply and descriptor
//! rights, bad user buffers, the largest messages, the explicit port calls with garbage,
//! notification requests, cycles of receive rights, and threads blocked on ports that die
//! or lose their receive right under them (a waiter thread blocks in `ipc_msg` on
//! command). Hostile messages go to a port of this task (slow path) and to the peer (fast
//! path when it waits, with `MSG_SLOW`, and as RPCs without timeout, the form of the
//! kernel's RPC fast path). After each group a normal RPC asks the peer how many one-way
//! messages it got: it must still answer, and must have seen only those that were
//! accepted.
//!
//! Every group runs once to warm up (kernel structures that grow and keep their capacity
//! grow then), the baseline is taken, and every group runs [`ROUNDS`] more times. Around
//! each group the client thread is paused and the counts are compared (heap bytes after
//! the warm-up only); at the end the counts must equal the baseline. Then a last normal RPC,
//! and the peer is told to exit (its port's dead-name notification must come).
//!
//! Output: `ok: <group>` for each group without failures, and `TEST PASS hostile`; or a
//! `TEST FAIL hostile: <group>: <case> expected X got Y` line for each failure (all cases
//! run, whatever fails), then `TEST FAIL hostile: N failures`.
#![no_std]
#![no_main]

use core::fmt::{self, Debug};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_abi::layout::USER_MIN;
use baton_abi::{decode_result, Sys};
use baton_rt::ipc::{
    cap_drop, cap_info, msg_raw, port_allocate, port_make_send, port_notify, port_set_limit,
    Descriptor, Disposition, IpcBuffer, MsgHeader, RightKind, DESCRIPTORS_MAX, DESCRIPTOR_SIZE,
    DESC_OOL, DESC_PORT, HEADER_SIZE, IPC_BUFFER_SIZE, KERNEL_ID_BASE, MSG_BUF, MSG_RECEIVE,
    MSG_SEND, MSG_SIZE_MAX, MSG_SLOW, NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME,
    NOTIFY_KIND_NO_SENDERS, NOTIFY_NO_SENDERS, NOTIFY_SEND_ONCE, OOL_DEALLOCATE, QUEUE_LIMIT_MAX,
};
use baton_rt::raw::raw_syscall;
use baton_rt::sync::{wait_until, Counter};
use baton_rt::sys::wake;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{clock_ns, mem_map, mem_unmap, println, spawn_with, stats, yield_now};
use baton_rt::{Error, FOREVER};

baton_rt::entry!(main);

/// Message ids of `hostile_peer` (see that program).
const HELLO: u64 = 1;
const ECHO: u64 = 10;
const EXIT: u64 = 13;
const STATUS: u64 = 14;
const REPLY: u64 = 100;
/// Id of one-way messages to the peer (it counts them).
const ONE_WAY: u64 = 20;
/// Id of messages to this task's own ports.
const OWN: u64 = 30;

/// Rounds after the warm-up.
const ROUNDS: u32 = 3;
/// Timeout for anything that should happen at once.
const SOON: u64 = 5_000_000_000;
/// A short timeout, for waits that must time out.
const SHORT: u64 = 5_000_000;

/// Start of the kernel half.
const KERNEL_ADDRESS: u64 = 0xffff_8000_0000_0000;
/// The top page of the address space (kernel).
const TOP_PAGE: u64 = 0xffff_ffff_ffff_f000;
/// Non-canonical, page aligned.
const NON_CANONICAL: u64 = 0x8000_0000_0000_0000;
/// A canonical user address nothing is mapped at.
const UNMAPPED: u64 = 0x0000_1000_0000_0000;
/// Scratch memory for `MSG_BUF` messages: [`SCRATCH_LEN`] bytes, writable; nothing is
/// mapped in the page after it.
const SCRATCH: u64 = 0x5000_0000_0000;
const SCRATCH_LEN: usize = MSG_SIZE_MAX + 4096;
/// One read-only page.
const READ_ONLY: u64 = 0x5100_0000_0000;
/// A page mapped, registered as IPC buffer, and unmapped again.
const SPARE: u64 = 0x5200_0000_0000;

/// A page mapped for `wait` and never touched before it (not present until the kernel's
/// general path brings it in), unmapped again at the end of its group.
const FRESH: u64 = 0x5300_0000_0000;

/// A name that no right of this task has.
const GARBAGE: u64 = 12345;

static STACKS: StackPool<2, 16384> = StackPool::new();
/// The peer's send right, for the client thread.
static SERVER: AtomicU64 = AtomicU64::new(0);

/// Client thread control: the main thread asks for a pause, the client parks.
const RUN: u32 = 0;
const PAUSE: u32 = 1;
const PARKED: u32 = 2;
const STOP: u32 = 3;
const GONE: u32 = 4;
static CLIENT: AtomicU32 = AtomicU32::new(RUN);
static CLIENT_CALLS: AtomicU32 = AtomicU32::new(0);
static CLIENT_ERRORS: AtomicU32 = AtomicU32::new(0);

/// Waiter thread jobs: receive on a name, or send to one, with a timeout.
const W_RECEIVE: u32 = 1;
const W_SEND: u32 = 2;
const W_EXIT: u32 = 3;
/// Id of the waiter's messages.
const WAITER_ID: u64 = 40;
static W_OP: AtomicU32 = AtomicU32::new(0);
static W_NAME: AtomicU64 = AtomicU64::new(0);
static W_TIMEOUT: AtomicU64 = AtomicU64::new(0);
static W_GO: Counter = Counter::new(0);
static W_DONE: Counter = Counter::new(0);
static W_RESULT: AtomicU64 = AtomicU64::new(0);
static W_ID: AtomicU64 = AtomicU64::new(0);

/// One group of cases.
struct Group {
    name: &'static str,
    run: fn(&mut Ctx),
    /// Runs with the client thread paused (it needs the peer idle or counts `blocks_ipc`).
    quiet: bool,
}

const GROUPS: [Group; 26] = [
    group("ipc_msg options", g_options, false),
    group("no IPC buffer", g_no_buffer, false),
    group("ipc_buffer_set with bad addresses", g_buffer_set, false),
    group("malformed headers", g_headers, false),
    group("user buffers of bad sizes", g_buffer_sizes, false),
    group("bad destinations", g_dest, false),
    group("bad reply rights", g_reply, false),
    group("bad descriptors", g_descriptors, false),
    group("moved rights are gone", g_moved, false),
    group("bad receives", g_receive, false),
    group("bad user buffers", g_user_buffers, false),
    group("largest messages and full queues", g_huge, false),
    group("port calls with garbage", g_port_calls, false),
    group("notification requests", g_notify, false),
    group("cycles of receive rights", g_cycle, false),
    group("threads blocked on ports", g_waiters, true),
    group("a reply port with a full queue", g_full_reply, true),
    group("memory-object calls with garbage", g_memobj, false),
    group("task-creation calls with garbage", g_task_calls, false),
    group("virtual-processor calls with garbage", g_vproc, false),
    group("SPIN memory-interface calls with garbage", g_spinvm, false),
    group(
        "SPIN asynchronous handlers with garbage",
        g_spin_async,
        false,
    ),
    group("default-pager calls with garbage", g_paging, false),
    group("SPIN PhysAddr.Reclaim with garbage", g_spin_reclaim, false),
    group(
        "SPIN thread package and built-in calls with garbage",
        g_spin_threads,
        false,
    ),
    group("wait on words that cannot be read", g_wait, false),
];

const fn group(name: &'static str, run: fn(&mut Ctx), quiet: bool) -> Group {
    Group { name, run, quiet }
}

/// The kernel counts that must come back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    ports: u64,
    names: u64,
    queued: u64,
    threads: u64,
    heap: u64,
}

/// Where a hostile message goes.
#[derive(Clone, Copy)]
struct Target {
    what: &'static str,
    dest: u64,
    opts: u64,
    /// An RPC (`MSG_SEND | MSG_RECEIVE` on the sync port, no timeout: the form the
    /// kernel's RPC fast path looks at); a message without reply right gets one.
    rpc: bool,
}

/// The test's state.
struct Ctx {
    round: u32,
    group: &'static str,
    group_fails: u32,
    fails: u32,
    buf: IpcBuffer,
    /// [`SCRATCH`], which only the main thread uses.
    scratch: &'static mut [u8],
    server: u64,
    /// Receive right for the replies of [`Ctx::sync`].
    sync_port: u64,
    /// One-way messages the peer should have received so far.
    peer_others: u64,
    /// Jobs given to the waiter thread.
    waiter_jobs: u32,
    /// Whether the waiter thread still answers.
    waiter_alive: bool,
}

macro_rules! expect {
    ($c:expr, $got:expr, $want:expr, $($case:tt)+) => {{
        let got = $got;
        $c.expect(got, $want, format_args!($($case)+))
    }};
}

macro_rules! check {
    ($c:expr, $cond:expr, $($case:tt)+) => {{
        let cond = $cond;
        $c.check(cond, format_args!($($case)+))
    }};
}

/// Header `bits` from raw dispositions and a descriptor count.
const fn bits(dest: u8, reply: u8, descriptors: u8) -> u32 {
    (dest as u32) | ((reply as u32) << 8) | ((descriptors as u32) << 16)
}

/// A one-way message header to `dest` (`CopySend`), no descriptors, no data.
fn hdr(dest: u64, id: u64) -> MsgHeader {
    MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: HEADER_SIZE as u32,
        dest,
        reply: 0,
        id,
    }
}

/// `h` with its descriptor count and size set for `n` descriptors and `data` bytes.
fn sized(mut h: MsgHeader, n: usize, data: usize) -> MsgHeader {
    h.bits = (h.bits & !(0xff << 16)) | ((n as u32 & 0xff) << 16);
    h.size = (HEADER_SIZE + n * DESCRIPTOR_SIZE + data) as u32;
    h
}

/// A descriptor with raw fields.
const fn desc(kind: u32, disposition: u32, value: u64, size: u64) -> Descriptor {
    Descriptor {
        kind,
        disposition,
        value,
        size,
    }
}

/// A port descriptor.
const fn port(name: u64, d: Disposition) -> Descriptor {
    Descriptor::port(name, d)
}

/// Writes a message into `b` exactly as given (header fields unchanged). False if it does
/// not fit.
fn write_msg(b: &mut [u8], h: &MsgHeader, d: &[Descriptor], data: &[u8]) -> bool {
    let d_end = HEADER_SIZE + d.len() * DESCRIPTOR_SIZE;
    let end = d_end + data.len();
    let Some(b) = b.get_mut(..end) else {
        return false;
    };
    b[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    for (i, x) in d.iter().enumerate() {
        let at = HEADER_SIZE + i * DESCRIPTOR_SIZE;
        b[at..at + DESCRIPTOR_SIZE].copy_from_slice(&x.to_bytes());
    }
    b[d_end..end].copy_from_slice(data);
    true
}

/// Descriptor `i` of a received message in `b`.
fn desc_at(b: &[u8], i: usize) -> Option<Descriptor> {
    b.get(HEADER_SIZE + i * DESCRIPTOR_SIZE..)
        .and_then(Descriptor::from_bytes)
}

/// `ipc_buffer_set(addr)`.
fn buffer_set(addr: u64) -> Result<u64, Error> {
    // SAFETY: the call touches no user memory; the kernel only translates `addr`. Every
    // page this program registers is one of its own pages that it lets the kernel write
    // during its `ipc_msg` calls (the main IPC buffer, or `SPARE`).
    decode_result(unsafe { raw_syscall(Sys::IpcBufferSet as u64, [addr, 0, 0, 0, 0, 0]) })
}

fn main(_task_id: u64) -> i32 {
    let Some(mut c) = setup() else {
        println!("TEST FAIL hostile: setup");
        return 1;
    };
    let mut group_fails = [0u32; GROUPS.len()];
    let mut baseline = Counts::default();
    // Heap bytes at the end of the previous round, and the rounds after the warm-up in
    // which the heap grew: a leak grows it every round; a kernel structure that keeps a
    // larger capacity (a queue that met two waiters at once on SMP, say) grows it once.
    let mut heap_before = 0u64;
    let mut heap_growths = 0u32;
    for round in 0..=ROUNDS {
        c.round = round;
        if round == 1 {
            c.pause_client();
            baseline = c.counts();
            heap_before = baseline.heap;
            c.resume_client();
            println!("baseline after the warm-up: {baseline:?}");
        }
        for (i, g) in GROUPS.iter().enumerate() {
            c.group = g.name;
            c.group_fails = 0;
            c.pause_client();
            let before = c.counts();
            if !g.quiet {
                c.resume_client();
            }
            (g.run)(&mut c);
            c.sync();
            if !g.quiet {
                c.pause_client();
            }
            let after = c.counts();
            c.resume_client();
            // Heap bytes are judged per round, below. The warm-up round checks no counts:
            // on SMP the peer may still be settling (releasing its start-up rights) while
            // it runs.
            let same = round == 0 || Counts { heap: 0, ..after } == Counts { heap: 0, ..before };
            check!(
                c,
                same,
                "kernel counts back after the group: before {before:?} after {after:?}"
            );
            if let Some(n) = group_fails.get_mut(i) {
                *n += c.group_fails;
            }
        }
        if round >= 1 {
            c.pause_client();
            let heap = c.counts().heap;
            c.resume_client();
            if heap > heap_before {
                heap_growths += 1;
                println!("round {round}: heap grew by {} bytes", heap - heap_before);
            }
            heap_before = heap;
        }
        println!("round {round} done: {} failures so far", c.fails);
    }
    c.group = "end";
    c.pause_client();
    let end = c.counts();
    let counts_back = Counts { heap: 0, ..end }
        == Counts {
            heap: 0,
            ..baseline
        };
    check!(
        c,
        counts_back,
        "kernel counts back to the baseline {baseline:?} (now {end:?})"
    );
    check!(
        c,
        heap_growths <= 1,
        "kernel heap does not grow round after round (it grew in {heap_growths} of {ROUNDS} rounds; \
         baseline {} bytes, now {})",
        baseline.heap,
        end.heap
    );
    for (g, n) in GROUPS.iter().zip(group_fails) {
        if n == 0 {
            println!("ok: {}", g.name);
        }
    }
    if counts_back && heap_growths <= 1 {
        println!(
            "ok: ports, names, queued messages and threads back to the baseline after {ROUNDS} rounds, heap bytes not growing ({} -> {})",
            baseline.heap, end.heap
        );
    }
    finish(&mut c);
    if c.fails == 0 {
        println!("TEST PASS hostile");
        0
    } else {
        println!("TEST FAIL hostile: {} failures", c.fails);
        1
    }
}

/// Maps the scratch memory, starts the peer and the threads.
fn setup() -> Option<Ctx> {
    let must = |what: &str, r: Result<(), Error>| {
        if let Err(e) = r {
            println!("TEST FAIL hostile: setup: {what}: {}", e.name());
        }
        r.ok()
    };
    must(
        "scratch",
        mem_map(SCRATCH, SCRATCH_LEN as u64, true).map(|_| ()),
    )?;
    must("read-only page", mem_map(READ_ONLY, 4096, false))?;
    // SAFETY: the region was just mapped writable; only the main thread reaches it,
    // through this slice (and the kernel, during the main thread's `ipc_msg` calls).
    let scratch = unsafe { core::slice::from_raw_parts_mut(SCRATCH as *mut u8, SCRATCH_LEN) };
    let buf = IpcBuffer::new().ok()?;
    let boot = port_allocate(0).ok()?;
    must(
        "spawn hostile_peer",
        spawn_with("hostile_peer", boot).map(|_| ()),
    )?;
    let mut c = Ctx {
        round: 0,
        group: "setup",
        group_fails: 0,
        fails: 0,
        buf,
        scratch,
        server: 0,
        sync_port: 0,
        peer_others: 0,
        waiter_jobs: 0,
        waiter_alive: true,
    };
    must("hello", c.buf.msg(MSG_RECEIVE, boot, SOON))?;
    let hello = c.buf.header();
    c.server = c.buf.descriptor(0).map_or(0, |d| d.value);
    if hello.id != HELLO || cap_info(c.server) != Ok(RightKind::Send) {
        println!("TEST FAIL hostile: setup: the hello carries no send right");
        return None;
    }
    must("cap_drop boot", cap_drop(boot))?;
    c.sync_port = port_allocate(0).ok()?;
    SERVER.store(c.server, Ordering::Relaxed);
    for f in [client as fn(u64), waiter] {
        let stack = STACKS.take()?;
        must("thread", spawn(stack, f, 0).map(|_| ()))?;
    }
    Some(c)
}

/// The last RPC, the client and waiter threads' end, and the peer's.
fn finish(c: &mut Ctx) {
    let calls = CLIENT_CALLS.load(Ordering::Relaxed);
    let errors = CLIENT_ERRORS.load(Ordering::Relaxed);
    check!(
        c,
        calls > 0 && errors == 0,
        "the client thread's RPCs all come back intact ({calls} calls, {errors} errors)"
    );
    if calls > 0 && errors == 0 {
        println!("ok: {calls} echo RPCs of another thread answered while the cases ran");
    }
    CLIENT.store(STOP, Ordering::Release);
    let _ = wake(&CLIENT, u64::MAX);
    expect!(
        c,
        wait_until(&CLIENT, |v| v == GONE, SOON),
        Ok(()),
        "the client thread ends"
    );
    if c.waiter_alive {
        W_OP.store(W_EXIT, Ordering::Release);
        W_GO.increment();
    }
    // A normal RPC still works.
    let data = *b"the peer is still there";
    let request = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        reply: c.sync_port,
        ..hdr(c.server, ECHO)
    };
    let _ = c.buf.set(request, &[], &data);
    let sync_port = c.sync_port;
    let r = c.buf.msg(MSG_SEND | MSG_RECEIVE, sync_port, SOON);
    let good = r.is_ok() && c.buf.header().id == ECHO + REPLY && c.buf.data() == data;
    check!(c, good, "a last echo RPC to the peer ({r:?})");
    if good {
        println!("ok: the peer answers a normal RPC after all the hostile messages");
    }
    // The peer exits; its port's death is reported.
    let Some(dead) = expect!(c, port_allocate(0), Ok(()), "port_allocate") else {
        return;
    };
    let server = c.server;
    expect!(
        c,
        port_notify(server, NOTIFY_KIND_DEAD_NAME, dead),
        Ok(()),
        "dead-name request on the peer"
    );
    let exit = MsgHeader {
        id: EXIT,
        ..request
    };
    let _ = c.buf.set(exit, &[], &[]);
    expect!(
        c,
        c.buf.msg(MSG_SEND | MSG_RECEIVE, sync_port, SOON),
        Ok(()),
        "the exit RPC"
    );
    let got = c.buf.msg(MSG_RECEIVE, dead, SOON);
    let good = got.is_ok() && c.buf.header().id == NOTIFY_DEAD_NAME;
    check!(
        c,
        good,
        "the peer's end brings a dead-name notification ({got:?})"
    );
    if good {
        println!("ok: the peer exits when told to");
    }
    for name in [dead, server, sync_port] {
        expect!(c, cap_drop(name), Ok(()), "cap_drop({name:#x})");
    }
}

impl Ctx {
    fn fail(&mut self, case: fmt::Arguments<'_>, expected: &dyn Debug, got: &dyn Debug) {
        self.group_fails += 1;
        self.fails += 1;
        println!(
            "TEST FAIL hostile: {}: {case} expected {expected:?} got {got:?} (round {})",
            self.group, self.round
        );
    }

    /// Checks that `got` is `want` (`Ok(())` for any success); the success value.
    fn expect<T: Debug>(
        &mut self,
        got: Result<T, Error>,
        want: Result<(), Error>,
        case: fmt::Arguments<'_>,
    ) -> Option<T> {
        match (got, want) {
            (Ok(v), Ok(())) => Some(v),
            (Err(e), Err(w)) if e == w => None,
            (got, want) => {
                self.fail(case, &want, &got);
                None
            }
        }
    }

    fn check(&mut self, cond: bool, case: fmt::Arguments<'_>) {
        if !cond {
            self.group_fails += 1;
            self.fails += 1;
            println!(
                "TEST FAIL hostile: {}: {case} (round {})",
                self.group, self.round
            );
        }
    }

    /// The kernel counts.
    fn counts(&mut self) -> Counts {
        match stats() {
            Ok(s) => Counts {
                ports: s.ports,
                names: s.names,
                queued: s.messages_queued,
                threads: s.threads,
                heap: s.heap_used,
            },
            Err(e) => {
                self.fail(format_args!("stats"), &"Ok", &e);
                Counts::default()
            }
        }
    }

    /// Parks the client thread between two RPCs.
    fn pause_client(&mut self) {
        if CLIENT
            .compare_exchange(RUN, PAUSE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let _ = wake(&CLIENT, u64::MAX);
        }
        let r = wait_until(&CLIENT, |v| v == PARKED || v == GONE, SOON);
        expect!(self, r, Ok(()), "the client thread parks");
    }

    fn resume_client(&mut self) {
        if CLIENT
            .compare_exchange(PARKED, RUN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let _ = wake(&CLIENT, u64::MAX);
        }
    }

    /// A normal RPC to the peer: it answers, and has seen exactly the one-way messages
    /// that were accepted. The peer handles messages in order, so everything sent before
    /// has been handled (and its rights released) when the answer comes.
    fn sync(&mut self) {
        let request = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
            reply: self.sync_port,
            ..hdr(self.server, STATUS)
        };
        let _ = self.buf.set(request, &[], &[]);
        let sync_port = self.sync_port;
        let r = self.buf.msg(MSG_SEND | MSG_RECEIVE, sync_port, SOON);
        let h = self.buf.header();
        let seen = self
            .buf
            .data()
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        let want = self.peer_others;
        check!(
            self,
            r.is_ok() && h.id == STATUS + REPLY && seen == Some(want),
            "the peer answers a status RPC and saw only the accepted messages \
             ({r:?}, id {:#x}, saw {seen:?}, sent {want})",
            h.id
        );
        if let Some(seen) = seen {
            // Report a difference once.
            self.peer_others = seen;
        }
    }

    /// A new port: its receive right and a send right.
    fn pair(&mut self) -> (u64, u64) {
        let Some(p) = expect!(self, port_allocate(0), Ok(()), "port_allocate") else {
            return (0, 0);
        };
        let s = expect!(self, port_make_send(p, false), Ok(()), "port_make_send");
        (p, s.unwrap_or(0))
    }

    /// A new port: its receive right only.
    fn recv_port(&mut self) -> u64 {
        expect!(self, port_allocate(0), Ok(()), "port_allocate").unwrap_or(0)
    }

    /// A name this task held and released.
    fn stale(&mut self) -> u64 {
        let p = expect!(self, port_allocate(0), Ok(()), "port_allocate").unwrap_or(0);
        expect!(self, cap_drop(p), Ok(()), "cap_drop");
        p
    }

    /// A dead name (the caller releases it).
    fn dead(&mut self) -> u64 {
        let (p, s) = self.pair();
        expect!(self, cap_drop(p), Ok(()), "cap_drop");
        expect!(self, cap_info(s), Ok(()), "cap_info of a dead name");
        s
    }

    fn drop_names(&mut self, names: &[u64]) {
        for &n in names {
            expect!(self, cap_drop(n), Ok(()), "cap_drop({n:#x})");
        }
    }

    /// Writes a message into the IPC buffer exactly as given.
    fn put(&mut self, h: &MsgHeader, d: &[Descriptor], data: &[u8]) {
        write_msg(self.buf.bytes(), h, d, data);
    }

    /// Writes a message into the scratch memory at `off` exactly as given; its address.
    fn put_at(&mut self, off: usize, h: &MsgHeader, d: &[Descriptor], data: &[u8]) -> u64 {
        if let Some(b) = self.scratch.get_mut(off..) {
            write_msg(b, h, d, data);
        }
        SCRATCH + off as u64
    }

    /// `ipc_msg` on the IPC buffer.
    fn msg(&mut self, opts: u64, rcv: u64, timeout: u64) -> Result<(), Error> {
        self.buf.msg(opts, rcv, timeout)
    }

    /// Sends the message in the IPC buffer with `opts`, never blocking.
    fn send(&mut self, opts: u64) -> Result<(), Error> {
        self.buf.msg(opts, 0, 0)
    }

    /// Writes a message into the IPC buffer and sends it to `t` (its `dest` replaces the
    /// header's), never blocking.
    fn send_to(
        &mut self,
        t: Target,
        h: MsgHeader,
        d: &[Descriptor],
        data: &[u8],
    ) -> Result<(), Error> {
        let mut h = MsgHeader { dest: t.dest, ..h };
        if !t.rpc {
            self.put(&h, d, data);
            return self.send(t.opts);
        }
        if h.reply_disposition() == 0 && h.reply == 0 {
            h.bits |= (Disposition::MakeSendOnce as u32) << 8;
            h.reply = self.sync_port;
        }
        self.put(&h, d, data);
        let sync_port = self.sync_port;
        let r = self.buf.msg(t.opts, sync_port, FOREVER);
        if r.is_ok() {
            // Accepted after all: the peer answered (and counted it as sent).
            self.peer_others += 1;
        }
        r
    }

    /// `ipc_msg` with `MSG_BUF` and a raw buffer address and size.
    fn msg_at(
        &mut self,
        opts: u64,
        rcv: u64,
        timeout: u64,
        addr: u64,
        len: u64,
    ) -> Result<(), Error> {
        // SAFETY: the kernel writes user memory only in `[addr, addr + len)`, which is
        // either scratch memory that only this thread uses (and `&mut self` is borrowed for
        // the call), or memory that is not this program's to write (kernel, unmapped,
        // read-only), which the kernel must refuse.
        decode_result(unsafe { msg_raw(opts | MSG_BUF, rcv, timeout, addr, len) }).map(|_| ())
    }

    /// Receives from `port` into the IPC buffer without blocking; its header.
    fn take(&mut self, port: u64) -> Result<MsgHeader, Error> {
        self.buf
            .msg(MSG_RECEIVE, port, 0)
            .map(|()| self.buf.header())
    }

    /// Releases the rights of the message in the IPC buffer (descriptors and reply).
    fn release_received(&mut self) {
        let h = self.buf.header();
        for i in 0..h.descriptors() {
            if let Some(d) = self.buf.descriptor(i) {
                let _ = cap_drop(d.value);
            }
        }
        if h.reply != 0 {
            let _ = cap_drop(h.reply);
        }
    }

    /// Checks that nothing is queued on `port` (and drains whatever is).
    fn expect_empty(&mut self, port: u64, what: &str) {
        let mut n = 0;
        while let Ok(h) = self.take(port) {
            n += 1;
            self.release_received();
            if n == 1 {
                self.fail(
                    format_args!("nothing queued on {what} after refused messages"),
                    &"no message",
                    &h,
                );
            }
        }
    }

    /// The three places hostile messages go: a port of ours, and the peer (fast path when
    /// it waits, and slow path forced).
    fn targets(&self, own: u64) -> [Target; 3] {
        [
            Target {
                what: "own port",
                dest: own,
                opts: MSG_SEND,
                rpc: false,
            },
            Target {
                what: "peer",
                dest: self.server,
                opts: MSG_SEND,
                rpc: false,
            },
            Target {
                what: "peer, slow path",
                dest: self.server,
                opts: MSG_SEND | MSG_SLOW,
                rpc: false,
            },
        ]
    }

    /// An RPC to the peer without timeout, the form its fast path considers. Used only
    /// for messages that must be refused whatever the reply field: if one were accepted,
    /// the peer's reply ends the call.
    fn rpc_target(&self) -> Target {
        Target {
            what: "peer, RPC",
            dest: self.server,
            opts: MSG_SEND | MSG_RECEIVE,
            rpc: true,
        }
    }

    /// Gives the waiter thread a job and waits until it blocks in `ipc_msg` (the client
    /// thread is paused and the peer idle, so only the waiter blocks in IPC).
    fn waiter_start(&mut self, op: u32, name: u64, timeout: u64) -> bool {
        if !self.waiter_alive {
            return false;
        }
        let before = stats().map_or(0, |s| s.blocks_ipc);
        W_OP.store(op, Ordering::Release);
        W_NAME.store(name, Ordering::Release);
        W_TIMEOUT.store(timeout, Ordering::Release);
        self.waiter_jobs += 1;
        W_GO.increment();
        let deadline = clock_ns() + SOON;
        while clock_ns() < deadline {
            if stats().is_ok_and(|s| s.blocks_ipc > before) {
                return true;
            }
            yield_now();
        }
        self.fail(
            format_args!("the waiter thread blocks"),
            &"blocked",
            &"not blocked",
        );
        false
    }

    /// The waiter's result: `Ok(id received)` or its error; `None` if it does not finish.
    fn waiter_result(&mut self, timeout: u64) -> Option<Result<u64, Error>> {
        if W_DONE.wait_for(self.waiter_jobs, timeout).is_err() {
            self.waiter_alive = false;
            return None;
        }
        Some(decode_result(W_RESULT.load(Ordering::Acquire)).map(|_| W_ID.load(Ordering::Acquire)))
    }
}

// ---------------------------------------------------------------------------------------
// The groups.

fn g_options(c: &mut Ctx) {
    let (p, ps) = c.pair();
    c.put(&sized(hdr(ps, OWN), 0, 1), &[], b"x");
    for (what, opts) in [
        ("unknown option bit 16", MSG_SEND | 16),
        ("unknown option bit 63", MSG_SEND | 1 << 63),
        ("all bits set", u64::MAX),
        ("neither send nor receive", 0),
        ("only MSG_BUF", MSG_BUF),
        ("only MSG_SLOW", MSG_SLOW),
        ("MSG_BUF | MSG_SLOW", MSG_BUF | MSG_SLOW),
    ] {
        expect!(c, c.msg(opts, p, 0), Err(Error::InvalidArgument), "{what}");
    }
    c.expect_empty(p, "the own port");
    c.drop_names(&[ps, p]);
}

fn g_no_buffer(c: &mut Ctx) {
    let (p, ps) = c.pair();
    let page = c.buf.bytes().as_ptr() as u64;
    c.put(&sized(hdr(ps, OWN), 0, 0), &[], &[]);
    expect!(c, buffer_set(0), Ok(()), "ipc_buffer_set(0)");
    for (what, opts) in [
        ("send", MSG_SEND),
        ("receive", MSG_RECEIVE),
        ("send and receive", MSG_SEND | MSG_RECEIVE),
    ] {
        expect!(
            c,
            c.msg(opts, p, 0),
            Err(Error::InvalidArgument),
            "{what} with no IPC buffer registered"
        );
    }
    // A registered page that is unmapped is forgotten.
    if expect!(
        c,
        mem_map(SPARE, 4096, true),
        Ok(()),
        "mapping a spare page"
    )
    .is_some()
    {
        expect!(c, buffer_set(SPARE), Ok(()), "registering the spare page");
        // SAFETY: nothing refers to the spare page (it is only ever reached by address).
        let unmapped = unsafe { mem_unmap(SPARE, 4096) };
        expect!(c, unmapped, Ok(()), "unmapping the registered page");
        expect!(
            c,
            c.msg(MSG_RECEIVE, p, 0),
            Err(Error::InvalidArgument),
            "receive after the registered page was unmapped"
        );
    }
    expect!(
        c,
        buffer_set(page),
        Ok(()),
        "registering the IPC buffer again"
    );
    c.put(&sized(hdr(ps, OWN), 0, 0), &[], &[]);
    expect!(c, c.send(MSG_SEND), Ok(()), "a send with the buffer back");
    let got = c.take(p).map(|h| h.id);
    check!(c, got == Ok(OWN), "the message arrives ({got:?})");
    c.drop_names(&[ps, p]);
}

fn g_buffer_set(c: &mut Ctx) {
    let page = c.buf.bytes().as_ptr() as u64;
    for (what, addr, want) in [
        ("unaligned", page + 8, Error::InvalidArgument),
        ("u64::MAX", u64::MAX, Error::InvalidArgument),
        ("kernel half", KERNEL_ADDRESS, Error::BadAddress),
        ("top page", TOP_PAGE, Error::BadAddress),
        ("non-canonical", NON_CANONICAL, Error::BadAddress),
        ("unmapped", UNMAPPED, Error::BadAddress),
        ("lowest user page, unmapped", USER_MIN, Error::BadAddress),
        ("read-only page", READ_ONLY, Error::BadAddress),
        (
            "just after the scratch memory",
            SCRATCH + SCRATCH_LEN as u64,
            Error::BadAddress,
        ),
    ] {
        expect!(
            c,
            buffer_set(addr),
            Err(want),
            "ipc_buffer_set {what} {addr:#x}"
        );
    }
    // The old registration stays: this group's sync RPC uses it.
}

fn g_headers(c: &mut Ctx) {
    let (p, ps) = c.pair();
    let q = c.recv_port();
    let base = sized(hdr(0, ONE_WAY), 0, 8);
    let cd = Disposition::CopySend as u8;
    let none = Disposition::None as u8;
    let cases: [(&str, MsgHeader, Error); 24] = [
        (
            "reserved bit 24",
            MsgHeader {
                bits: base.bits | 1 << 24,
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "reserved bit 31",
            MsgHeader {
                bits: base.bits | 1 << 31,
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "kernel id",
            MsgHeader {
                id: KERNEL_ID_BASE,
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "forged notification id",
            MsgHeader {
                id: NOTIFY_DEAD_NAME,
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "id u64::MAX",
            MsgHeader {
                id: u64::MAX,
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "size 0",
            MsgHeader { size: 0, ..base },
            Error::InvalidArgument,
        ),
        (
            "size 31 (less than a header)",
            MsgHeader { size: 31, ..base },
            Error::InvalidArgument,
        ),
        (
            "size larger than the IPC buffer",
            MsgHeader {
                size: IPC_BUFFER_SIZE as u32 + 1,
                ..base
            },
            Error::TooLarge,
        ),
        (
            "size above MSG_SIZE_MAX",
            MsgHeader {
                size: MSG_SIZE_MAX as u32 + 1,
                ..base
            },
            Error::TooLarge,
        ),
        (
            "size u32::MAX",
            MsgHeader {
                size: u32::MAX,
                ..base
            },
            Error::TooLarge,
        ),
        (
            "65 descriptors",
            sized(base, DESCRIPTORS_MAX + 1, 0),
            Error::TooLarge,
        ),
        (
            "255 descriptors",
            MsgHeader {
                bits: bits(cd, none, 255),
                size: 4096,
                ..base
            },
            Error::TooLarge,
        ),
        (
            "2 descriptors, size for 1",
            MsgHeader {
                bits: bits(cd, none, 2),
                size: 56,
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "1 descriptor, size of a header",
            MsgHeader {
                bits: bits(cd, none, 1),
                size: 32,
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "destination disposition None",
            MsgHeader {
                bits: bits(0, none, 0),
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "destination disposition 7",
            MsgHeader {
                bits: bits(7, none, 0),
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "destination disposition 255",
            MsgHeader {
                bits: bits(255, none, 0),
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "destination disposition MoveReceive",
            MsgHeader {
                bits: bits(1, none, 0),
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "reply disposition 7",
            MsgHeader {
                bits: bits(cd, 7, 0),
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "reply disposition 255",
            MsgHeader {
                bits: bits(cd, 255, 0),
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "reply disposition None with a reply name",
            MsgHeader { reply: q, ..base },
            Error::InvalidArgument,
        ),
        (
            "reply disposition MoveReceive",
            MsgHeader {
                bits: bits(cd, 1, 0),
                reply: q,
                ..base
            },
            Error::InvalidArgument,
        ),
        (
            "reply disposition MakeSendOnce, reply 0",
            MsgHeader {
                bits: bits(cd, 5, 0),
                reply: 0,
                ..base
            },
            Error::InvalidName,
        ),
        (
            "reply disposition CopySend, reply 0",
            MsgHeader {
                bits: bits(cd, 3, 0),
                reply: 0,
                ..base
            },
            Error::InvalidName,
        ),
    ];
    let rpc = c.rpc_target();
    for t in c.targets(ps).into_iter().chain([rpc]) {
        for (what, h, want) in cases {
            expect!(
                c,
                c.send_to(t, h, &[], &[0; 8]),
                Err(want),
                "{what} [{}]",
                t.what
            );
        }
    }
    check!(
        c,
        cap_info(q) == Ok(RightKind::Receive) && cap_info(ps) == Ok(RightKind::Send),
        "the rights named in refused headers are still there"
    );
    c.expect_empty(p, "the own port");
    c.drop_names(&[ps, p, q]);
}

fn g_buffer_sizes(c: &mut Ctx) {
    let (p, ps) = c.pair();
    let server = c.server;
    for (who, dest) in [("own port", ps), ("peer", server)] {
        let h = sized(hdr(dest, ONE_WAY), 0, 8);
        let at = c.put_at(0, &h, &[], &[7; 8]);
        for (what, len, want) in [
            ("0", 0, Error::TooLarge),
            ("16 (less than a header)", 16, Error::TooLarge),
            ("39 (less than the header's size)", 39, Error::TooLarge),
            ("MSG_SIZE_MAX + 1", MSG_SIZE_MAX as u64 + 1, Error::TooLarge),
            ("u64::MAX", u64::MAX, Error::TooLarge),
            ("2^32 + 40", (1 << 32) + 40, Error::TooLarge),
        ] {
            expect!(
                c,
                c.msg_at(MSG_SEND, 0, 0, at, len),
                Err(want),
                "MSG_BUF of size {what} [{who}]"
            );
        }
        let big = MsgHeader {
            size: MSG_SIZE_MAX as u32 + 1,
            ..h
        };
        let at = c.put_at(0, &big, &[], &[]);
        expect!(
            c,
            c.msg_at(MSG_SEND, 0, 0, at, MSG_SIZE_MAX as u64),
            Err(Error::TooLarge),
            "header size above MSG_SIZE_MAX in a MSG_SIZE_MAX buffer [{who}]"
        );
    }
    c.expect_empty(p, "the own port");
    c.drop_names(&[ps, p]);
}

fn g_dest(c: &mut Ctx) {
    let (p, ps) = c.pair();
    let so = expect!(c, port_make_send(p, true), Ok(()), "send-once").unwrap_or(0);
    let stale = c.stale();
    let dead = c.dead();
    let server = c.server;
    let with_gen = |n: u64, g: u64| (n & 0xffff_ffff) | (g << 32);
    use Disposition::*;
    for (what, d, dest, want) in [
        ("dest 0", CopySend, 0, Error::InvalidName),
        ("dest 12345", CopySend, GARBAGE, Error::InvalidName),
        ("dest u64::MAX", CopySend, u64::MAX, Error::InvalidName),
        ("a released name", CopySend, stale, Error::InvalidName),
        (
            "a name with the next generation",
            CopySend,
            ps + (1 << 32),
            Error::InvalidName,
        ),
        (
            "a name with generation 0",
            CopySend,
            with_gen(ps, 0),
            Error::InvalidName,
        ),
        (
            "a name with generation u32::MAX",
            CopySend,
            with_gen(ps, 0xffff_ffff),
            Error::InvalidName,
        ),
        (
            "slot 65535",
            CopySend,
            with_gen(0xffff, 1),
            Error::InvalidName,
        ),
        (
            "the peer's name with another generation",
            CopySend,
            server + (7 << 32),
            Error::InvalidName,
        ),
        (
            "a receive right with CopySend",
            CopySend,
            p,
            Error::InvalidRight,
        ),
        (
            "a receive right with MoveSend",
            MoveSend,
            p,
            Error::InvalidRight,
        ),
        (
            "a receive right with MoveSendOnce",
            MoveSendOnce,
            p,
            Error::InvalidRight,
        ),
        (
            "a send right with MoveSendOnce",
            MoveSendOnce,
            ps,
            Error::InvalidRight,
        ),
        (
            "a send right with MakeSend",
            MakeSend,
            ps,
            Error::InvalidRight,
        ),
        (
            "a send right with MakeSendOnce",
            MakeSendOnce,
            ps,
            Error::InvalidRight,
        ),
        (
            "the peer's send right with MakeSend",
            MakeSend,
            server,
            Error::InvalidRight,
        ),
        (
            "a send-once right with CopySend",
            CopySend,
            so,
            Error::InvalidRight,
        ),
        (
            "a send-once right with MoveSend",
            MoveSend,
            so,
            Error::InvalidRight,
        ),
        ("a dead name", CopySend, dead, Error::DeadName),
        ("a dead name with MoveSend", MoveSend, dead, Error::DeadName),
    ] {
        let h = sized(
            MsgHeader {
                bits: MsgHeader::make_bits(d, None, 0),
                dest,
                ..hdr(0, OWN)
            },
            0,
            0,
        );
        c.put(&h, &[], &[]);
        expect!(c, c.send(MSG_SEND), Err(want), "{what}");
    }
    check!(
        c,
        cap_info(p) == Ok(RightKind::Receive)
            && cap_info(ps) == Ok(RightKind::Send)
            && cap_info(so) == Ok(RightKind::SendOnce)
            && cap_info(dead) == Ok(RightKind::DeadName),
        "the rights named by refused messages are unchanged"
    );
    c.expect_empty(p, "the own port");
    // A send-once right works once.
    let by_once = sized(
        MsgHeader {
            bits: MsgHeader::make_bits(MoveSendOnce, None, 0),
            dest: so,
            ..hdr(0, OWN)
        },
        0,
        0,
    );
    c.put(&by_once, &[], &[]);
    expect!(c, c.send(MSG_SEND), Ok(()), "a send-once send");
    c.put(&by_once, &[], &[]);
    expect!(
        c,
        c.send(MSG_SEND),
        Err(Error::InvalidName),
        "a send-once right used twice"
    );
    expect!(
        c,
        cap_info(so),
        Err(Error::InvalidName),
        "the used send-once right's name"
    );
    let got = c.take(p).map(|h| h.id);
    check!(c, got == Ok(OWN), "the send-once message arrives ({got:?})");
    c.expect_empty(p, "the own port");
    c.drop_names(&[dead, ps, p]);
}

fn g_reply(c: &mut Ctx) {
    let (p, ps) = c.pair();
    let (q, qs) = c.pair();
    let stale = c.stale();
    let dead = c.dead();
    let server = c.server;
    use Disposition::*;
    for t in c.targets(ps) {
        for (what, d, reply, want) in [
            (
                "a reply name not held",
                MakeSendOnce,
                GARBAGE,
                Error::InvalidName,
            ),
            ("reply u64::MAX", MakeSendOnce, u64::MAX, Error::InvalidName),
            (
                "a released reply name",
                MakeSendOnce,
                stale,
                Error::InvalidName,
            ),
            (
                "a reply name with another generation",
                MakeSendOnce,
                q + (1 << 32),
                Error::InvalidName,
            ),
            (
                "MakeSendOnce of the peer's port (not ours)",
                MakeSendOnce,
                server,
                Error::InvalidRight,
            ),
            (
                "MakeSend of the peer's port (not ours)",
                MakeSend,
                server,
                Error::InvalidRight,
            ),
            (
                "MakeSendOnce of a send right",
                MakeSendOnce,
                qs,
                Error::InvalidRight,
            ),
            (
                "MakeSend of a send right",
                MakeSend,
                qs,
                Error::InvalidRight,
            ),
            (
                "MoveSendOnce of a receive right",
                MoveSendOnce,
                q,
                Error::InvalidRight,
            ),
            (
                "MoveSend of a receive right",
                MoveSend,
                q,
                Error::InvalidRight,
            ),
            (
                "CopySend of a receive right",
                CopySend,
                q,
                Error::InvalidRight,
            ),
            (
                "MoveSendOnce of a send right",
                MoveSendOnce,
                qs,
                Error::InvalidRight,
            ),
            ("CopySend of a dead name", CopySend, dead, Error::DeadName),
            (
                "MoveReceive as reply",
                MoveReceive,
                q,
                Error::InvalidArgument,
            ),
            (
                "reply moves the destination's name",
                MoveSend,
                t.dest,
                Error::InvalidArgument,
            ),
        ] {
            let h = sized(
                MsgHeader {
                    bits: MsgHeader::make_bits(CopySend, d, 0),
                    reply,
                    ..hdr(0, ONE_WAY)
                },
                0,
                0,
            );
            expect!(
                c,
                c.send_to(t, h, &[], &[]),
                Err(want),
                "{what} [{}]",
                t.what
            );
        }
    }
    check!(
        c,
        cap_info(q) == Ok(RightKind::Receive)
            && cap_info(qs) == Ok(RightKind::Send)
            && cap_info(ps) == Ok(RightKind::Send)
            && cap_info(server) == Ok(RightKind::Send),
        "the rights named as refused replies are unchanged"
    );
    c.expect_empty(p, "the own port");
    c.expect_empty(q, "the reply port");
    c.drop_names(&[dead, qs, q, ps, p]);
}

fn g_descriptors(c: &mut Ctx) {
    let (p, ps) = c.pair();
    let (q, qs) = c.pair();
    let so = expect!(c, port_make_send(q, true), Ok(()), "send-once").unwrap_or(0);
    let stale = c.stale();
    let dead = c.dead();
    let server = c.server;
    use Disposition::*;
    let pd = |n: u64, d: Disposition| port(n, d);
    let cases: [(&str, &[Descriptor], Error); 38] = [
        (
            "kind 0",
            &[desc(0, CopySend as u32, qs, 0)],
            Error::InvalidArgument,
        ),
        (
            "kind 3",
            &[desc(3, CopySend as u32, qs, 0)],
            Error::InvalidArgument,
        ),
        (
            "kind u32::MAX",
            &[desc(u32::MAX, CopySend as u32, qs, 0)],
            Error::InvalidArgument,
        ),
        (
            "out-of-line memory of size 0",
            &[desc(DESC_OOL, 0, SCRATCH, 0)],
            Error::InvalidArgument,
        ),
        (
            "out-of-line memory, deallocate, unmapped",
            &[desc(DESC_OOL, OOL_DEALLOCATE, UNMAPPED, 4096)],
            Error::BadAddress,
        ),
        (
            "out-of-line kernel memory",
            &[desc(DESC_OOL, 0, KERNEL_ADDRESS, 4096)],
            Error::BadAddress,
        ),
        (
            "out-of-line memory of a huge size",
            &[desc(DESC_OOL, 0, SCRATCH, u64::MAX)],
            Error::BadAddress,
        ),
        (
            "out-of-line memory running past what is mapped",
            &[desc(
                DESC_OOL,
                OOL_DEALLOCATE,
                SCRATCH,
                SCRATCH_LEN as u64 + 1,
            )],
            Error::BadAddress,
        ),
        (
            "out-of-line unknown flags",
            &[desc(DESC_OOL, u32::MAX, 0, 0)],
            Error::InvalidArgument,
        ),
        (
            "a port descriptor with a size",
            &[desc(DESC_PORT, CopySend as u32, qs, 1)],
            Error::InvalidArgument,
        ),
        (
            "disposition None",
            &[desc(DESC_PORT, 0, qs, 0)],
            Error::InvalidArgument,
        ),
        (
            "disposition 7",
            &[desc(DESC_PORT, 7, qs, 0)],
            Error::InvalidArgument,
        ),
        (
            "disposition 0x103 (CopySend in the low byte)",
            &[desc(DESC_PORT, 0x103, qs, 0)],
            Error::InvalidArgument,
        ),
        (
            "disposition u32::MAX",
            &[desc(DESC_PORT, u32::MAX, qs, 0)],
            Error::InvalidArgument,
        ),
        ("name 0", &[pd(0, CopySend)], Error::InvalidName),
        (
            "a name not held",
            &[pd(GARBAGE, CopySend)],
            Error::InvalidName,
        ),
        (
            "a released name",
            &[pd(stale, MoveSend)],
            Error::InvalidName,
        ),
        (
            "MoveReceive of a name not held",
            &[pd(GARBAGE, MoveReceive)],
            Error::InvalidName,
        ),
        (
            "MoveReceive of the peer's port (not held)",
            &[pd(server, MoveReceive)],
            Error::InvalidRight,
        ),
        (
            "MoveReceive of a send right",
            &[pd(qs, MoveReceive)],
            Error::InvalidRight,
        ),
        (
            "MakeSend of a send right",
            &[pd(qs, MakeSend)],
            Error::InvalidRight,
        ),
        (
            "MakeSend of the peer's send right",
            &[pd(server, MakeSend)],
            Error::InvalidRight,
        ),
        (
            "MakeSendOnce of a send right",
            &[pd(qs, MakeSendOnce)],
            Error::InvalidRight,
        ),
        (
            "MoveSendOnce of a send right",
            &[pd(qs, MoveSendOnce)],
            Error::InvalidRight,
        ),
        (
            "CopySend of a receive right",
            &[pd(q, CopySend)],
            Error::InvalidRight,
        ),
        (
            "MoveSend of a receive right",
            &[pd(q, MoveSend)],
            Error::InvalidRight,
        ),
        (
            "MoveSend of a send-once right",
            &[pd(so, MoveSend)],
            Error::InvalidRight,
        ),
        (
            "MakeSend of a send-once right",
            &[pd(so, MakeSend)],
            Error::InvalidRight,
        ),
        (
            "CopySend of a dead name",
            &[pd(dead, CopySend)],
            Error::DeadName,
        ),
        (
            "MoveSend of a dead name",
            &[pd(dead, MoveSend)],
            Error::DeadName,
        ),
        (
            "a send right moved twice",
            &[pd(qs, MoveSend), pd(qs, MoveSend)],
            Error::InvalidArgument,
        ),
        (
            "a send right moved and copied",
            &[pd(qs, MoveSend), pd(qs, CopySend)],
            Error::InvalidArgument,
        ),
        (
            "a receive right moved and used",
            &[pd(q, MakeSend), pd(q, MoveReceive)],
            Error::InvalidArgument,
        ),
        (
            "a send-once right moved twice",
            &[pd(so, MoveSendOnce), pd(so, MoveSendOnce)],
            Error::InvalidArgument,
        ),
        (
            "good rights then a bad kind",
            &[
                pd(q, MakeSend),
                pd(qs, MoveSend),
                pd(so, MoveSendOnce),
                desc(9, 0, 0, 0),
            ],
            Error::InvalidArgument,
        ),
        (
            "good rights then overlapping out-of-line regions",
            &[
                pd(qs, MoveSend),
                desc(DESC_OOL, OOL_DEALLOCATE, SCRATCH, 8192),
                desc(DESC_OOL, 0, SCRATCH + 4096, 8),
            ],
            Error::InvalidArgument,
        ),
        (
            "good rights then a name not held",
            &[pd(q, MoveReceive), pd(qs, MoveSend), pd(GARBAGE, CopySend)],
            Error::InvalidName,
        ),
        (
            "good rights then a dead name",
            &[pd(so, MoveSendOnce), pd(dead, CopySend)],
            Error::DeadName,
        ),
    ];
    let rpc = c.rpc_target();
    for t in c.targets(ps).into_iter().chain([rpc]) {
        for (what, d, want) in cases {
            let h = sized(hdr(0, ONE_WAY), d.len(), 8);
            expect!(
                c,
                c.send_to(t, h, d, &[1; 8]),
                Err(want),
                "{what} [{}]",
                t.what
            );
        }
        // The destination's own name moved in a descriptor.
        let h = sized(hdr(0, ONE_WAY), 1, 0);
        let own = [pd(t.dest, MoveSend)];
        expect!(
            c,
            c.send_to(t, h, &own, &[]),
            Err(Error::InvalidArgument),
            "the destination's name moved in a descriptor [{}]",
            t.what
        );
    }
    // The destination's own receive right inside the message.
    let h = sized(hdr(ps, ONE_WAY), 1, 0);
    c.put(&h, &[pd(p, MoveReceive)], &[]);
    expect!(
        c,
        c.send(MSG_SEND),
        Err(Error::InvalidArgument),
        "MoveReceive of the destination's own receive right"
    );
    check!(
        c,
        cap_info(p) == Ok(RightKind::Receive)
            && cap_info(q) == Ok(RightKind::Receive)
            && cap_info(qs) == Ok(RightKind::Send)
            && cap_info(so) == Ok(RightKind::SendOnce)
            && cap_info(server) == Ok(RightKind::Send),
        "no right moved out of a refused message"
    );
    c.expect_empty(p, "the own port");
    c.expect_empty(q, "the second port");
    // Released unused, the send-once right brings its notification.
    expect!(c, cap_drop(so), Ok(()), "cap_drop(send-once)");
    let got = c.take(q).map(|h| h.id);
    check!(
        c,
        got == Ok(NOTIFY_SEND_ONCE),
        "send-once notification ({got:?})"
    );
    c.drop_names(&[dead, qs, q, ps, p]);
}

fn g_moved(c: &mut Ctx) {
    use Disposition::*;
    let (p, ps) = c.pair();
    // A send right moved into a message to its own port.
    let s2 = expect!(c, port_make_send(p, false), Ok(()), "send right").unwrap_or(0);
    c.put(&sized(hdr(ps, OWN), 1, 0), &[port(s2, MoveSend)], &[]);
    expect!(
        c,
        c.send(MSG_SEND),
        Ok(()),
        "a send right moved to its own port"
    );
    c.put(&sized(hdr(s2, OWN), 0, 0), &[], &[]);
    expect!(
        c,
        c.send(MSG_SEND),
        Err(Error::InvalidName),
        "the moved send right used"
    );
    expect!(
        c,
        cap_info(s2),
        Err(Error::InvalidName),
        "cap_info of the moved right"
    );
    expect!(
        c,
        cap_drop(s2),
        Err(Error::InvalidName),
        "cap_drop of the moved right"
    );
    let got = c.take(p);
    let d = c.buf.descriptor(0);
    check!(
        c,
        got.is_ok() && d.is_some_and(|d| d.disposition == MoveSend as u32),
        "the moved send right arrives ({got:?}, {d:?})"
    );
    if let Some(d) = d {
        expect!(c, cap_info(d.value), Ok(()), "the new name");
        c.drop_names(&[d.value]);
    }
    // A receive right moved away.
    let (r, rs) = c.pair();
    c.put(&sized(hdr(ps, OWN), 1, 0), &[port(r, MoveReceive)], &[]);
    expect!(c, c.send(MSG_SEND), Ok(()), "a receive right moved");
    expect!(
        c,
        c.msg(MSG_RECEIVE, r, 0),
        Err(Error::InvalidName),
        "receive on the moved receive right"
    );
    expect!(
        c,
        port_make_send(r, false),
        Err(Error::InvalidName),
        "port_make_send of the moved receive right"
    );
    expect!(
        c,
        cap_info(rs),
        Ok(()),
        "a send right to the port in flight"
    );
    c.put(&sized(hdr(rs, OWN), 0, 0), &[], &[]);
    expect!(c, c.send(MSG_SEND), Ok(()), "a send to the port in flight");
    let got = c.take(p);
    let d = c.buf.descriptor(0);
    check!(
        c,
        got.is_ok() && d.is_some_and(|d| d.disposition == MoveReceive as u32),
        "the receive right arrives ({got:?}, {d:?})"
    );
    if let Some(d) = d {
        let got = c.take(d.value).map(|h| h.id);
        check!(
            c,
            got == Ok(OWN),
            "the message queued while in flight arrives ({got:?})"
        );
        c.drop_names(&[d.value]);
    }
    let info = cap_info(rs);
    check!(
        c,
        info == Ok(RightKind::DeadName),
        "the port is gone ({info:?})"
    );
    c.drop_names(&[rs]);
    // A send-once right moved: the new one works once.
    let so = expect!(c, port_make_send(p, true), Ok(()), "send-once").unwrap_or(0);
    c.put(&sized(hdr(ps, OWN), 1, 0), &[port(so, MoveSendOnce)], &[]);
    expect!(c, c.send(MSG_SEND), Ok(()), "a send-once right moved");
    let by_once = |dest| {
        sized(
            MsgHeader {
                bits: MsgHeader::make_bits(MoveSendOnce, None, 0),
                dest,
                ..hdr(0, OWN + 1)
            },
            0,
            0,
        )
    };
    c.put(&by_once(so), &[], &[]);
    expect!(
        c,
        c.send(MSG_SEND),
        Err(Error::InvalidName),
        "the moved send-once right used"
    );
    let _ = c.take(p);
    if let Some(d) = c.buf.descriptor(0) {
        c.put(&by_once(d.value), &[], &[]);
        expect!(
            c,
            c.send(MSG_SEND),
            Ok(()),
            "the received send-once right used"
        );
        c.put(&by_once(d.value), &[], &[]);
        expect!(
            c,
            c.send(MSG_SEND),
            Err(Error::InvalidName),
            "the received send-once right used twice"
        );
        let got = c.take(p).map(|h| h.id);
        check!(c, got == Ok(OWN + 1), "its message arrives ({got:?})");
    }
    // Rights to another task, which releases them.
    let x = expect!(c, port_allocate(0), Ok(()), "port_allocate").unwrap_or(0);
    let (y, ys) = c.pair();
    let to_peer = [
        port(x, MoveReceive),
        port(y, MakeSend),
        port(y, MakeSendOnce),
        port(ys, CopySend),
    ];
    let server = c.server;
    c.put(&sized(hdr(server, ONE_WAY), 4, 0), &to_peer, &[]);
    expect!(c, c.send(MSG_SEND), Ok(()), "rights moved to the peer");
    c.peer_others += 1;
    expect!(
        c,
        cap_info(x),
        Err(Error::InvalidName),
        "the receive right given away"
    );
    c.sync();
    let got = c.take(y).map(|h| h.id);
    check!(
        c,
        got == Ok(NOTIFY_SEND_ONCE),
        "the send-once right the peer released brings a notification ({got:?})"
    );
    c.expect_empty(p, "the own port");
    c.drop_names(&[ys, y, ps, p]);
}

fn g_receive(c: &mut Ctx) {
    let (p, ps) = c.pair();
    let so = expect!(c, port_make_send(p, true), Ok(()), "send-once").unwrap_or(0);
    let stale = c.stale();
    let dead = c.dead();
    let server = c.server;
    for (what, name, want) in [
        ("name 0", 0, Error::InvalidName),
        ("a name not held", GARBAGE, Error::InvalidName),
        ("u64::MAX", u64::MAX, Error::InvalidName),
        ("a released name", stale, Error::InvalidName),
        (
            "a name with another generation",
            p + (1 << 32),
            Error::InvalidName,
        ),
        ("a send right", ps, Error::InvalidRight),
        ("a send-once right", so, Error::InvalidRight),
        ("a dead name", dead, Error::InvalidRight),
        ("the peer's send right", server, Error::InvalidRight),
    ] {
        expect!(
            c,
            c.msg(MSG_RECEIVE, name, 0),
            Err(want),
            "receive on {what}"
        );
    }
    expect!(
        c,
        c.msg(MSG_RECEIVE, p, 0),
        Err(Error::WouldBlock),
        "receive with timeout 0 on an empty port"
    );
    expect!(
        c,
        c.msg(MSG_RECEIVE, p, SHORT),
        Err(Error::TimedOut),
        "receive with a short timeout"
    );
    // A message larger than the receive buffer stays queued.
    let data = [0x3c; 68];
    c.put(&sized(hdr(ps, OWN), 0, data.len()), &[], &data);
    expect!(c, c.send(MSG_SEND), Ok(()), "a 100-byte message");
    for len in [0, 16, 40, 99] {
        expect!(
            c,
            c.msg_at(MSG_RECEIVE, p, 0, SCRATCH, len),
            Err(Error::TooLarge),
            "receive of 100 bytes into {len}"
        );
    }
    let got = c.take(p);
    check!(
        c,
        got.is_ok_and(|h| h.id == OWN && h.size == 100) && c.buf.data() == data,
        "the message stays queued and arrives intact ({got:?})"
    );
    // An RPC whose receive half fails still sent its request.
    c.put(&sized(hdr(ps, OWN), 0, 0), &[], &[]);
    expect!(
        c,
        c.msg(MSG_SEND | MSG_RECEIVE, GARBAGE, 0),
        Err(Error::InvalidName),
        "send, then receive on a name not held"
    );
    let got = c.take(p).map(|h| h.id);
    check!(c, got == Ok(OWN), "its request was sent ({got:?})");
    let sync_port = c.sync_port;
    let status = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        reply: sync_port,
        ..sized(hdr(server, STATUS), 0, 0)
    };
    c.put(&status, &[], &[]);
    expect!(
        c,
        c.msg(MSG_SEND | MSG_RECEIVE, ps, SOON),
        Err(Error::InvalidRight),
        "an RPC to the peer receiving on a send right"
    );
    let got = c
        .msg(MSG_RECEIVE, sync_port, SOON)
        .map(|()| c.buf.header().id);
    check!(
        c,
        got == Ok(STATUS + REPLY),
        "the peer's reply still comes ({got:?})"
    );
    c.drop_names(&[so]);
    let got = c.take(p).map(|h| h.id);
    check!(
        c,
        got == Ok(NOTIFY_SEND_ONCE),
        "send-once notification ({got:?})"
    );
    c.expect_empty(p, "the own port");
    c.drop_names(&[dead, ps, p]);
}

fn g_user_buffers(c: &mut Ctx) {
    use Disposition::*;
    let (p, ps) = c.pair();
    let (t, ts) = c.pair();
    let server = c.server;
    let end = SCRATCH + SCRATCH_LEN as u64;
    for (who, dest) in [("own port", ps), ("peer", server)] {
        let h = sized(hdr(dest, ONE_WAY), 0, 16);
        c.put_at(0, &h, &[], &[5; 16]);
        for (what, addr, len, want) in [
            ("null", 0, 64, Error::BadAddress),
            ("kernel", KERNEL_ADDRESS, 64, Error::BadAddress),
            ("top page", TOP_PAGE, 64, Error::BadAddress),
            ("non-canonical", NON_CANONICAL, 64, Error::BadAddress),
            ("unmapped", UNMAPPED, 64, Error::BadAddress),
            ("wrapping", u64::MAX - 15, 64, Error::BadAddress),
            (
                "header across the end of mapped memory",
                end - 16,
                64,
                Error::BadAddress,
            ),
            ("length u64::MAX", SCRATCH, u64::MAX, Error::TooLarge),
        ] {
            expect!(
                c,
                c.msg_at(MSG_SEND, 0, 0, addr, len),
                Err(want),
                "send from a {what} buffer [{who}]"
            );
        }
        // Descriptors past the end of mapped memory (read before anything happens).
        let h = sized(hdr(dest, ONE_WAY), 1, 0);
        let at = c.put_at(SCRATCH_LEN - HEADER_SIZE, &h, &[], &[]);
        expect!(
            c,
            c.msg_at(MSG_SEND, 0, 0, at, 64),
            Err(Error::BadAddress),
            "send with the descriptors unmapped [{who}]"
        );
    }
    // In-line data past the end of mapped memory, to a port with no receiver waiting
    // (the fast-path case is in `g_waiters`).
    let h = sized(hdr(ps, OWN), 1, 200);
    let at = c.put_at(
        SCRATCH_LEN - HEADER_SIZE - DESCRIPTOR_SIZE,
        &h,
        &[port(ts, MoveSend)],
        &[],
    );
    expect!(
        c,
        c.msg_at(MSG_SEND, 0, 0, at, 256),
        Err(Error::BadAddress),
        "send with the data unmapped [own port]"
    );
    expect!(c, cap_info(ts), Ok(()), "the right in that message");
    // A misaligned buffer is fine.
    let data = *b"misaligned buffer";
    let at = c.put_at(3, &sized(hdr(ps, OWN), 0, data.len()), &[], &data);
    expect!(
        c,
        c.msg_at(MSG_SEND, 0, 0, at, 100),
        Ok(()),
        "send from a misaligned buffer"
    );
    let into = SCRATCH + 5001;
    expect!(
        c,
        c.msg_at(MSG_RECEIVE, p, 0, into, 1000),
        Ok(()),
        "receive into a misaligned buffer"
    );
    let got = c
        .scratch
        .get(5001..5001 + HEADER_SIZE + data.len())
        .map(|b| {
            (
                MsgHeader::from_bytes(b).map(|h| h.id),
                b.get(HEADER_SIZE..) == Some(&data[..]),
            )
        });
    check!(
        c,
        got == Some((Some(OWN), true)),
        "the misaligned message arrives intact ({got:?})"
    );
    // A receive into memory it cannot write fails and leaves the message queued.
    for (what, addr) in [
        ("null", 0),
        ("kernel", KERNEL_ADDRESS),
        ("unmapped", UNMAPPED),
        ("read-only", READ_ONLY),
        ("wrapping", u64::MAX - 15),
    ] {
        expect!(
            c,
            c.msg_at(MSG_RECEIVE, p, 0, addr, 4096),
            Err(Error::WouldBlock),
            "receive into a {what} buffer with nothing queued"
        );
        c.put(
            &sized(hdr(ps, OWN + 2), 1, 4),
            &[port(t, MakeSend)],
            b"kept",
        );
        expect!(c, c.send(MSG_SEND), Ok(()), "a message with a right");
        expect!(
            c,
            c.msg_at(MSG_RECEIVE, p, 0, addr, 4096),
            Err(Error::BadAddress),
            "receive into a {what} buffer"
        );
        let got = c.take(p).map(|h| h.id);
        check!(
            c,
            got == Ok(OWN + 2) && c.buf.data() == b"kept",
            "the message refused by a {what} receive buffer is still queued ({got:?})"
        );
        if got.is_ok() {
            c.release_received();
        }
    }
    c.expect_empty(p, "the own port");
    c.drop_names(&[ts, t, ps, p]);
}

fn g_huge(c: &mut Ctx) {
    use Disposition::*;
    let (p, ps) = c.pair();
    let q = c.recv_port();
    // The largest message, and receive buffers too small for it.
    let pattern = |i: usize| (i * 31 + 7) as u8;
    let len = MSG_SIZE_MAX - HEADER_SIZE;
    c.put_at(0, &sized(hdr(ps, OWN), 0, len), &[], &[]);
    for (i, b) in c
        .scratch
        .iter_mut()
        .enumerate()
        .take(MSG_SIZE_MAX)
        .skip(HEADER_SIZE)
    {
        *b = pattern(i);
    }
    expect!(
        c,
        c.msg_at(MSG_SEND, 0, 0, SCRATCH, MSG_SIZE_MAX as u64),
        Ok(()),
        "a message of MSG_SIZE_MAX bytes"
    );
    expect!(
        c,
        c.msg(MSG_RECEIVE, p, 0),
        Err(Error::TooLarge),
        "receiving it into the IPC buffer"
    );
    expect!(
        c,
        c.msg_at(MSG_RECEIVE, p, 0, SCRATCH, MSG_SIZE_MAX as u64 - 1),
        Err(Error::TooLarge),
        "receiving it into one byte less"
    );
    c.scratch.fill(0);
    expect!(
        c,
        c.msg_at(MSG_RECEIVE, p, 0, SCRATCH, MSG_SIZE_MAX as u64),
        Ok(()),
        "receiving it into MSG_SIZE_MAX bytes"
    );
    let h = MsgHeader::from_bytes(c.scratch).unwrap_or_default();
    let intact = c
        .scratch
        .iter()
        .enumerate()
        .take(MSG_SIZE_MAX)
        .skip(HEADER_SIZE)
        .all(|(i, &b)| b == pattern(i));
    check!(
        c,
        h.id == OWN && h.size as usize == MSG_SIZE_MAX && intact,
        "the largest message arrives intact ({h:?}, data intact: {intact})"
    );
    // The most descriptors.
    let many = [port(q, MakeSend); DESCRIPTORS_MAX];
    c.put(&sized(hdr(ps, OWN), DESCRIPTORS_MAX, 0), &many, &[]);
    expect!(
        c,
        c.send(MSG_SEND),
        Ok(()),
        "a message with DESCRIPTORS_MAX rights"
    );
    let got = c.take(p);
    let n = got.map_or(0, |h| h.descriptors());
    check!(
        c,
        n == DESCRIPTORS_MAX,
        "it arrives with all its rights ({n})"
    );
    for i in 0..n {
        let d = desc_at(c.buf.view(), i);
        let ok = d.is_some_and(|d| {
            d.disposition == MoveSend as u32 && cap_info(d.value) == Ok(RightKind::Send)
        });
        check!(c, ok, "received right {i} is a send right ({d:?})");
        if let Some(d) = d {
            let _ = cap_drop(d.value);
        }
    }
    // A full queue, then the port destroyed with its messages and their rights.
    for i in 0..16 {
        c.put(&sized(hdr(ps, OWN), 1, 0), &[port(q, MakeSend)], &[]);
        expect!(c, c.send(MSG_SEND), Ok(()), "message {i} of 16");
    }
    c.put(&sized(hdr(ps, OWN), 1, 0), &[port(q, MakeSend)], &[]);
    expect!(
        c,
        c.send(MSG_SEND),
        Err(Error::WouldBlock),
        "a 17th message with timeout 0"
    );
    c.put(&sized(hdr(ps, OWN), 1, 0), &[port(q, MakeSend)], &[]);
    expect!(
        c,
        c.msg(MSG_SEND, 0, SHORT),
        Err(Error::TimedOut),
        "a 17th message with a short timeout"
    );
    c.drop_names(&[p]);
    let info = cap_info(ps);
    check!(
        c,
        info == Ok(RightKind::DeadName),
        "the destroyed port's send right is dead ({info:?})"
    );
    // The largest message to the peer (more than its IPC buffer).
    let server = c.server;
    c.put_at(0, &sized(hdr(server, ONE_WAY), 0, len), &[], &[]);
    expect!(
        c,
        c.msg_at(MSG_SEND, 0, 0, SCRATCH, MSG_SIZE_MAX as u64),
        Ok(()),
        "a message of MSG_SIZE_MAX bytes to the peer"
    );
    c.peer_others += 1;
    c.drop_names(&[ps, q]);
}

fn g_port_calls(c: &mut Ctx) {
    for (what, limit) in [
        ("QUEUE_LIMIT_MAX + 1", QUEUE_LIMIT_MAX + 1),
        ("u64::MAX", u64::MAX),
        ("2^32", 1 << 32),
    ] {
        expect!(
            c,
            port_allocate(limit),
            Err(Error::InvalidArgument),
            "port_allocate({what})"
        );
    }
    if let Some(p) = expect!(
        c,
        port_allocate(QUEUE_LIMIT_MAX),
        Ok(()),
        "port_allocate(QUEUE_LIMIT_MAX)"
    ) {
        c.drop_names(&[p]);
    }
    let (p, ps) = c.pair();
    let so = expect!(c, port_make_send(p, true), Ok(()), "send-once").unwrap_or(0);
    let dead = c.dead();
    let server = c.server;
    for (what, name, limit, want) in [
        ("limit 0", p, 0, Error::InvalidArgument),
        (
            "limit QUEUE_LIMIT_MAX + 1",
            p,
            QUEUE_LIMIT_MAX + 1,
            Error::InvalidArgument,
        ),
        ("limit u64::MAX", p, u64::MAX, Error::InvalidArgument),
        ("a send right", ps, 5, Error::InvalidRight),
        ("a send-once right", so, 5, Error::InvalidRight),
        ("a dead name", dead, 5, Error::InvalidRight),
        ("the peer's send right", server, 5, Error::InvalidRight),
        ("name 0", 0, 5, Error::InvalidName),
        ("a name not held", GARBAGE, 5, Error::InvalidName),
    ] {
        expect!(
            c,
            port_set_limit(name, limit),
            Err(want),
            "port_set_limit on {what}"
        );
    }
    expect!(
        c,
        port_set_limit(p, QUEUE_LIMIT_MAX),
        Ok(()),
        "port_set_limit(QUEUE_LIMIT_MAX)"
    );
    expect!(c, port_set_limit(p, 1), Ok(()), "port_set_limit(1)");
    for (what, name, once, want) in [
        ("a send right", ps, false, Error::InvalidRight),
        ("a send-once right", so, true, Error::InvalidRight),
        ("a dead name", dead, false, Error::InvalidRight),
        ("the peer's send right", server, false, Error::InvalidRight),
        ("name 0", 0, false, Error::InvalidName),
        ("u64::MAX", u64::MAX, true, Error::InvalidName),
    ] {
        expect!(
            c,
            port_make_send(name, once),
            Err(want),
            "port_make_send of {what}"
        );
    }
    for (what, once) in [("2", 2), ("u64::MAX", u64::MAX)] {
        // SAFETY: touches no user memory.
        let raw = unsafe { raw_syscall(Sys::PortMakeSend as u64, [p, once, 0, 0, 0, 0]) };
        expect!(
            c,
            decode_result(raw),
            Err(Error::InvalidArgument),
            "port_make_send with once = {what}"
        );
    }
    use Error::*;
    const DEAD: u64 = NOTIFY_KIND_DEAD_NAME;
    const NO_SENDERS: u64 = NOTIFY_KIND_NO_SENDERS;
    for (what, name, kind, notify, want) in [
        ("kind 0", p, 0, p, InvalidArgument),
        ("kind 3", p, 3, p, InvalidArgument),
        ("kind u64::MAX, cancelling", p, u64::MAX, 0, InvalidArgument),
        ("name 0", 0, DEAD, p, InvalidName),
        ("a name not held", GARBAGE, NO_SENDERS, p, InvalidName),
        ("a notify name not held", ps, DEAD, GARBAGE, InvalidName),
        ("a send right as notify port", ps, DEAD, ps, InvalidRight),
        (
            "the peer's port as notify port",
            ps,
            DEAD,
            server,
            InvalidRight,
        ),
        ("a dead name as notify port", ps, DEAD, dead, InvalidRight),
        ("dead-name on a receive right", p, DEAD, p, InvalidRight),
        (
            "no-senders on a send right",
            ps,
            NO_SENDERS,
            p,
            InvalidRight,
        ),
        (
            "no-senders on a send-once right",
            so,
            NO_SENDERS,
            p,
            InvalidRight,
        ),
        ("dead-name on a dead name", dead, DEAD, p, DeadName),
    ] {
        expect!(
            c,
            port_notify(name, kind, notify),
            Err(want),
            "port_notify: {what}"
        );
    }
    for (what, name, kind) in [("dead-name", ps, DEAD), ("no-senders", p, NO_SENDERS)] {
        expect!(
            c,
            port_notify(name, kind, 0),
            Ok(()),
            "cancelling a {what} request never made"
        );
    }
    expect!(
        c,
        port_notify(so, DEAD, p),
        Ok(()),
        "dead-name request on a send-once right"
    );
    expect!(c, port_notify(so, DEAD, 0), Ok(()), "and its cancellation");
    let with_gen = |n: u64, g: u64| (n & 0xffff_ffff) | (g << 32);
    for (what, name) in [
        ("0", 0),
        ("u64::MAX", u64::MAX),
        ("12345", GARBAGE),
        ("slot 1, generation u32::MAX", with_gen(1, 0xffff_ffff)),
        ("the next generation of a held name", ps + (1 << 32)),
        ("a held name with bit 63 set", ps | 1 << 63),
        ("generation 0 of a held slot", with_gen(ps, 0)),
    ] {
        expect!(c, cap_info(name), Err(InvalidName), "cap_info({what})");
        expect!(c, cap_drop(name), Err(InvalidName), "cap_drop({what})");
    }
    let info = cap_info(dead);
    check!(
        c,
        info == Ok(RightKind::DeadName),
        "cap_info of a dead name ({info:?})"
    );
    expect!(c, cap_drop(dead), Ok(()), "cap_drop of a dead name");
    expect!(c, cap_drop(dead), Err(InvalidName), "cap_drop of it again");
    check!(
        c,
        cap_info(p) == Ok(RightKind::Receive) && cap_info(ps) == Ok(RightKind::Send),
        "the rights are unchanged"
    );
    c.drop_names(&[so]);
    let got = c.take(p).map(|h| h.id);
    check!(
        c,
        got == Ok(NOTIFY_SEND_ONCE),
        "send-once notification ({got:?})"
    );
    c.expect_empty(p, "the own port");
    c.drop_names(&[ps, p]);
}

fn g_notify(c: &mut Ctx) {
    use Disposition::*;
    let n = c.recv_port();
    // A dead-name request belongs to its name: released with it, it must not fire later.
    let l = c.recv_port();
    for _ in 0..16 {
        let Some(s) = expect!(c, port_make_send(l, false), Ok(()), "send right") else {
            break;
        };
        expect!(
            c,
            port_notify(s, NOTIFY_KIND_DEAD_NAME, n),
            Ok(()),
            "dead-name request"
        );
        expect!(c, cap_drop(s), Ok(()), "releasing the name");
    }
    c.drop_names(&[l]);
    let mut fired = 0;
    while c.take(n).is_ok() {
        fired += 1;
    }
    check!(
        c,
        fired == 0,
        "no dead-name notification for names released before their port died ({fired} came)"
    );
    // The same on the peer's port: copies of its send right, each with a request,
    // released. The requests must not pile up in the peer's port (heap bytes).
    let (p, ps) = c.pair();
    let server = c.server;
    for _ in 0..16 {
        c.put(&sized(hdr(ps, OWN), 1, 0), &[port(server, CopySend)], &[]);
        expect!(
            c,
            c.send(MSG_SEND),
            Ok(()),
            "a copy of the peer's send right"
        );
        let got = c.take(p);
        let Some(copy) = got.ok().and_then(|_| c.buf.descriptor(0)).map(|d| d.value) else {
            c.fail(format_args!("receiving the copy"), &"Ok", &got);
            break;
        };
        expect!(
            c,
            port_notify(copy, NOTIFY_KIND_DEAD_NAME, n),
            Ok(()),
            "dead-name request on the peer's port"
        );
        expect!(c, cap_drop(copy), Ok(()), "releasing the copy");
    }
    // No-senders: fires once when the last send right goes.
    let (m, ms) = c.pair();
    expect!(
        c,
        port_notify(m, NOTIFY_KIND_NO_SENDERS, m),
        Ok(()),
        "no-senders request"
    );
    let ms2 = expect!(c, port_make_send(m, false), Ok(()), "send right").unwrap_or(0);
    c.drop_names(&[ms]);
    expect!(
        c,
        c.take(m).map(|h| h.id),
        Err(Error::WouldBlock),
        "no notification while a send right is left"
    );
    c.drop_names(&[ms2]);
    let got = c.take(m).map(|h| h.id);
    check!(
        c,
        got == Ok(NOTIFY_NO_SENDERS),
        "the no-senders notification ({got:?})"
    );
    expect!(
        c,
        c.take(m).map(|h| h.id),
        Err(Error::WouldBlock),
        "only one"
    );
    // A request whose notify port is destroyed first.
    let k = c.recv_port();
    expect!(
        c,
        port_notify(ps, NOTIFY_KIND_DEAD_NAME, k),
        Ok(()),
        "dead-name request"
    );
    expect!(
        c,
        port_notify(p, NOTIFY_KIND_NO_SENDERS, k),
        Ok(()),
        "no-senders request"
    );
    c.drop_names(&[k, ps, p, m, n]);
}

fn g_cycle(c: &mut Ctx) {
    use Disposition::*;
    // Each port's receive right queued on the other port: nobody can ever receive either
    // again, so releasing the last send rights must reclaim both (or the second send be
    // refused).
    let (a, as_) = c.pair();
    let (b, bs) = c.pair();
    let before = stats().map(|s| s.ports);
    c.put(&sized(hdr(as_, OWN), 1, 0), &[port(b, MoveReceive)], &[]);
    expect!(c, c.send(MSG_SEND), Ok(()), "B's receive right queued on A");
    c.put(&sized(hdr(bs, OWN), 1, 0), &[port(a, MoveReceive)], &[]);
    if c.send(MSG_SEND).is_err() {
        // Refused: A is still ours, and releasing it reclaims B too.
        c.drop_names(&[a]);
    }
    c.drop_names(&[as_, bs]);
    let after = stats().map(|s| s.ports);
    check!(
        c,
        matches!((before, after), (Ok(x), Ok(y)) if y + 2 == x),
        "two ports whose receive rights sit in each other's queues are reclaimed \
         when their last send rights go (ports {before:?} -> {after:?})"
    );
}

fn g_waiters(c: &mut Ctx) {
    use Disposition::*;
    if !c.waiter_alive {
        c.check(
            false,
            format_args!("the waiter thread is stuck since an earlier round"),
        );
        return;
    }
    // A receiver whose port is destroyed.
    let w = c.recv_port();
    if c.waiter_start(W_RECEIVE, w, SOON) {
        c.drop_names(&[w]);
        let r = c.waiter_result(SOON);
        check!(
            c,
            r == Some(Err(Error::InvalidName)),
            "a receiver whose port is destroyed gets InvalidName ({r:?})"
        );
    }
    // A receiver whose receive right is moved away.
    let (p, ps) = c.pair();
    let w = c.recv_port();
    if c.waiter_start(W_RECEIVE, w, SOON) {
        c.put(&sized(hdr(ps, OWN), 1, 0), &[port(w, MoveReceive)], &[]);
        expect!(c, c.send(MSG_SEND), Ok(()), "moving the receive right away");
        let r = c.waiter_result(SOON);
        check!(
            c,
            r == Some(Err(Error::InvalidName)),
            "a receiver whose receive right moves gets InvalidName ({r:?})"
        );
    }
    if c.take(p).is_ok() {
        c.release_received();
    }
    // A sender blocked on a full queue whose port is destroyed, or drained.
    for destroy in [true, false] {
        let Some(f) = expect!(c, port_allocate(1), Ok(()), "port_allocate(1)") else {
            continue;
        };
        let fs = expect!(c, port_make_send(f, false), Ok(()), "send right").unwrap_or(0);
        c.put(&sized(hdr(fs, OWN), 0, 0), &[], &[]);
        expect!(c, c.send(MSG_SEND), Ok(()), "filling a queue of 1");
        if c.waiter_start(W_SEND, fs, SOON) {
            let r = if destroy {
                c.drop_names(&[f]);
                c.waiter_result(SOON)
            } else {
                let got = c.take(f).map(|h| h.id);
                check!(c, got == Ok(OWN), "the filler ({got:?})");
                let r = c.waiter_result(SOON);
                let got = c.take(f).map(|h| h.id);
                check!(
                    c,
                    got == Ok(WAITER_ID),
                    "the blocked sender's message ({got:?})"
                );
                c.drop_names(&[f]);
                r.map(|r| r.map(|_| 0))
            };
            let want = if destroy { Err(Error::DeadName) } else { Ok(0) };
            check!(
                c,
                r == Some(want),
                "a sender blocked on a full queue whose port is {} gets {want:?} ({r:?})",
                if destroy { "destroyed" } else { "drained" }
            );
        } else {
            c.drop_names(&[f]);
        }
        c.drop_names(&[fs]);
    }
    // A receive that times out.
    let (w, ws) = c.pair();
    if c.waiter_start(W_RECEIVE, w, 20_000_000) {
        let r = c.waiter_result(SOON);
        check!(
            c,
            r == Some(Err(Error::TimedOut)),
            "a receive with a timeout times out ({r:?})"
        );
    }
    // The fast path into a waiting receiver.
    if c.waiter_start(W_RECEIVE, w, SOON) {
        c.put(&sized(hdr(ws, OWN), 0, 0), &[], &[]);
        expect!(
            c,
            c.send(MSG_SEND),
            Ok(()),
            "a message to a waiting receiver"
        );
        let r = c.waiter_result(SOON);
        check!(
            c,
            r == Some(Ok(OWN)),
            "the waiting receiver gets it ({r:?})"
        );
    }
    // Refused fast-path messages leave the receiver waiting: descriptors unmapped, then
    // in-line data unmapped (read while the message is being delivered).
    let (x, xs) = c.pair();
    let moved = [port(xs, MoveSend)];
    for (what, off, d) in [
        ("descriptors", SCRATCH_LEN - HEADER_SIZE, &[][..]),
        (
            "in-line data",
            SCRATCH_LEN - HEADER_SIZE - DESCRIPTOR_SIZE,
            &moved[..],
        ),
    ] {
        if !c.waiter_start(W_RECEIVE, w, SOON) {
            break;
        }
        // Only the header (and the descriptor) fit before the unmapped page.
        let h = sized(hdr(ws, OWN), 1, 200);
        let at = c.put_at(off, &h, d, &[]);
        expect!(
            c,
            c.msg_at(MSG_SEND, 0, 0, at, u64::from(h.size)),
            Err(Error::BadAddress),
            "a fast-path message with its {what} unmapped"
        );
        let info = cap_info(xs);
        check!(
            c,
            info == Ok(RightKind::Send),
            "its right was not taken ({what} unmapped: {info:?})"
        );
        c.put(&sized(hdr(ws, OWN + 3), 0, 0), &[], &[]);
        expect!(c, c.send(MSG_SEND), Ok(()), "a good message after it");
        let r = c.waiter_result(2_000_000_000);
        check!(
            c,
            r == Some(Ok(OWN + 3)),
            "the receiver still waits after a fast-path message with its {what} unmapped, \
             and gets the next one ({r:?}; None: it hangs)"
        );
        if r.is_none() {
            break;
        }
    }
    if cap_info(xs).is_ok() {
        c.drop_names(&[xs]);
    }
    c.drop_names(&[x, ws, w, ps, p]);
}

fn g_full_reply(c: &mut Ctx) {
    // The peer replies through a send-once right to a port whose queue is full: it must
    // not be stuck there (Mach lets send-once messages past the queue limit).
    let Some(r) = expect!(c, port_allocate(1), Ok(()), "port_allocate(1)") else {
        return;
    };
    let rs = expect!(c, port_make_send(r, false), Ok(()), "send right").unwrap_or(0);
    c.put(&sized(hdr(rs, OWN), 0, 0), &[], &[]);
    expect!(c, c.send(MSG_SEND), Ok(()), "filling the reply port");
    let server = c.server;
    let request = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        reply: r,
        ..sized(hdr(server, ECHO), 0, 0)
    };
    c.put(&request, &[], &[]);
    expect!(
        c,
        c.send(MSG_SEND),
        Ok(()),
        "a request whose reply port is full"
    );
    let sync_port = c.sync_port;
    let status = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        reply: sync_port,
        ..sized(hdr(server, STATUS), 0, 0)
    };
    c.put(&status, &[], &[]);
    let got = c.msg(MSG_SEND | MSG_RECEIVE, sync_port, 500_000_000);
    check!(
        c,
        got.is_ok(),
        "the peer answers while its reply to a full port is pending ({got:?})"
    );
    // Clean up: the filler, the echo reply, and a late status reply.
    let mut ids = [0u64; 2];
    for id in &mut ids {
        *id = c
            .msg(MSG_RECEIVE, r, SOON)
            .map_or(0, |()| c.buf.header().id);
    }
    check!(
        c,
        ids == [OWN, ECHO + REPLY],
        "the filler and the echo reply arrive ({ids:?})"
    );
    if got.is_err() {
        let _ = c.msg(MSG_RECEIVE, sync_port, SOON);
    }
    c.drop_names(&[rs, r]);
}

// ---------------------------------------------------------------------------------------
// The other threads.

/// The client thread: echo RPCs to the peer without pause, parking when asked.
/// The task-creation calls (`task_map_program`, `task_init_thread`, `task_start`) on names
/// that are no task port, and on a new task with bad arguments; the task is then ended
/// through its port, half made.
fn g_task_calls(c: &mut Ctx) {
    use baton_rt::task;
    let (p, ps) = c.pair();
    let so = expect!(c, port_make_send(p, true), Ok(()), "send-once").unwrap_or(0);
    let dead = c.dead();
    let server = c.server;
    let name = "hostile_peer";
    let (np, nl) = (name.as_ptr() as u64, name.len() as u64);
    for (what, t, want) in [
        ("name 0", 0, Error::InvalidName),
        ("a name not held", GARBAGE, Error::InvalidName),
        ("a receive right", p, Error::InvalidRight),
        ("a send right", ps, Error::InvalidRight),
        ("a send-once right", so, Error::InvalidRight),
        ("a dead name", dead, Error::DeadName),
        ("the peer's send right", server, Error::InvalidRight),
    ] {
        expect!(
            c,
            task::map_program_raw(t, 0, np, nl),
            Err(want),
            "task_map_program on {what}"
        );
        expect!(
            c,
            task::init_thread(t, 0, 0),
            Err(want),
            "task_init_thread on {what}"
        );
        expect!(
            c,
            task::start_raw(t, 0, 0),
            Err(want),
            "task_start on {what}"
        );
    }
    let Some(t) = expect!(c, task::create(0, 0), Ok(()), "task_create") else {
        return;
    };
    for (what, kind, ptr, len, want) in [
        ("kind 2", 2, np, nl, Error::InvalidArgument),
        ("kind u64::MAX", u64::MAX, np, nl, Error::InvalidArgument),
        (
            "a memory object of no bytes",
            1,
            p,
            0,
            Error::InvalidArgument,
        ),
        ("length 57", 0, np, 57, Error::TooLarge),
        ("length u64::MAX", 0, np, u64::MAX, Error::TooLarge),
        ("a null name", 0, 0, 4, Error::BadAddress),
        (
            "a kernel name",
            0,
            0xffff_8000_0000_0000,
            4,
            Error::BadAddress,
        ),
        (
            "a non-canonical name",
            0,
            0x0000_8000_0000_0000,
            4,
            Error::BadAddress,
        ),
        ("an empty name", 0, np, 0, Error::NotFound),
    ] {
        expect!(
            c,
            task::map_program_raw(t, kind, ptr, len),
            Err(want),
            "task_map_program of {what}"
        );
    }
    // A program file from a memory object: the caller's shared mapping of it names it.
    let page = baton_rt::vm::allocate(None, 4096, baton_rt::vm::PROT_RW).unwrap_or(0);
    let frozen = np & !4095;
    for (what, ptr, len, want) in [
        ("an unaligned address", page + 1, 64, Error::InvalidArgument),
        (
            "a kernel address",
            0xffff_8000_0000_0000,
            4096,
            Error::BadAddress,
        ),
        (
            "a length past the address space",
            page,
            u64::MAX,
            Error::BadAddress,
        ),
        (
            "a length past the mapping",
            page,
            1 << 40,
            Error::BadAddress,
        ),
        ("memory that is no program", page, 4096, Error::BadFormat),
        (
            "a copy-on-write mapping",
            frozen,
            4096,
            Error::InvalidArgument,
        ),
    ] {
        expect!(
            c,
            task::map_object(t, ptr, len, "x"),
            Err(want),
            "task_map_program of a memory object: {what}"
        );
    }
    // SAFETY: allocated above; nothing refers to it.
    let _ = unsafe { baton_rt::vm::deallocate(page, 4096) };
    for (what, entry, stack, want) in [
        ("no program yet", 0, 0, Error::InvalidArgument),
        (
            "a kernel entry",
            0xffff_8000_0000_0000,
            0x1000,
            Error::BadAddress,
        ),
        ("entry 1", 1, 0x1000, Error::BadAddress),
        (
            "a non-canonical stack",
            0x40_0000,
            0x0000_8000_0000_0000,
            Error::BadAddress,
        ),
    ] {
        expect!(
            c,
            task::init_thread(t, entry, stack),
            Err(want),
            "task_init_thread with {what}"
        );
    }
    expect!(
        c,
        task::start_raw(t, 0, 0),
        Err(Error::InvalidArgument),
        "task_start with no thread"
    );
    expect!(
        c,
        task::map_program_raw(t, 0, np, nl),
        Ok(()),
        "task_map_program"
    );
    expect!(c, task::init_thread(t, 0, 0), Ok(()), "task_init_thread");
    for (what, boot, block, want) in [
        ("bootstrap 0xdead", 0xdead, 0, Error::InvalidName),
        ("a send-once bootstrap", so, 0, Error::InvalidRight),
        ("a dead bootstrap", dead, 0, Error::DeadName),
        (
            "a kernel start block",
            0,
            0xffff_8000_0000_0000,
            Error::BadAddress,
        ),
        ("start block 1", 0, 1, Error::BadAddress),
    ] {
        expect!(
            c,
            task::start_raw(t, boot, block),
            Err(want),
            "task_start with {what}"
        );
    }
    let reply = c.recv_port();
    // Through this thread's own IPC buffer (a new one would replace its registration).
    expect!(
        c,
        baton_rt::kobject::call(
            &mut c.buf,
            t,
            reply,
            baton_abi::kobject::TASK_TERMINATE,
            &[],
            FOREVER
        )
        .map(|_| ()),
        Ok(()),
        "TASK_TERMINATE of the half-made task"
    );
    expect!(c, cap_info(t), Ok(()), "cap_info of the ended task's port");
    c.drop_names(&[t, reply, p, ps, so, dead]);
}

fn client(_: u64) {
    if let Err(e) = client_loop() {
        println!("TEST FAIL hostile: client thread: {}", e.name());
        CLIENT_ERRORS.fetch_add(1, Ordering::Relaxed);
    }
    CLIENT.store(GONE, Ordering::Release);
    let _ = wake(&CLIENT, u64::MAX);
}

fn client_loop() -> Result<(), Error> {
    let mut buf = IpcBuffer::new()?;
    let reply = port_allocate(0)?;
    let server = SERVER.load(Ordering::Relaxed);
    let mut n: u32 = 0;
    loop {
        match CLIENT.load(Ordering::Acquire) {
            RUN => {
                n = n.wrapping_add(1);
                let data = [n as u8, (n >> 8) as u8, 0xc1, 0x1e];
                let request = MsgHeader {
                    bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
                    reply,
                    ..hdr(server, ECHO)
                };
                buf.set(request, &[], &data)?;
                // Every other call without timeout: the form of the RPC fast path.
                let timeout = if n.is_multiple_of(2) { FOREVER } else { SOON };
                let good = buf.msg(MSG_SEND | MSG_RECEIVE, reply, timeout).is_ok()
                    && buf.header().id == ECHO + REPLY
                    && buf.data() == data;
                if !good {
                    println!(
                        "TEST FAIL hostile: client thread: echo RPC {n}: bad reply {:?}",
                        buf.header()
                    );
                    CLIENT_ERRORS.fetch_add(1, Ordering::Relaxed);
                    while buf.msg(MSG_RECEIVE, reply, 0).is_ok() {}
                }
                CLIENT_CALLS.fetch_add(1, Ordering::Relaxed);
            }
            PAUSE => {
                CLIENT.store(PARKED, Ordering::Release);
                let _ = wake(&CLIENT, u64::MAX);
                wait_until(&CLIENT, |v| v != PARKED, FOREVER)?;
            }
            _ => break,
        }
    }
    cap_drop(reply)
}

/// The waiter thread: blocks in `ipc_msg` when told to, and reports the result.
fn waiter(_: u64) {
    let Ok(mut buf) = IpcBuffer::new() else {
        println!("TEST FAIL hostile: waiter thread: no IPC buffer");
        return;
    };
    let mut seen = 0;
    loop {
        if W_GO.wait_for(seen + 1, FOREVER).is_err() {
            return;
        }
        seen += 1;
        let name = W_NAME.load(Ordering::Acquire);
        let timeout = W_TIMEOUT.load(Ordering::Acquire);
        let op = W_OP.load(Ordering::Acquire);
        let result = match op {
            W_RECEIVE => buf.msg(MSG_RECEIVE, name, timeout),
            W_SEND => buf
                .set(hdr(name, WAITER_ID), &[], &[])
                .and_then(|()| buf.msg(MSG_SEND, 0, timeout)),
            _ => return,
        };
        if result.is_ok() && op == W_RECEIVE {
            let h = buf.header();
            W_ID.store(h.id, Ordering::Release);
            for i in 0..h.descriptors() {
                if let Some(d) = buf.descriptor(i) {
                    let _ = cap_drop(d.value);
                }
            }
            if h.reply != 0 {
                let _ = cap_drop(h.reply);
            }
        }
        W_RESULT.store(result.map_or_else(Error::to_raw, |()| 0), Ordering::Release);
        W_DONE.increment();
    }
}

/// The memory-object calls (110-119) with every kind of wrong name, window, flags and
/// address: each refused with its error, nothing mapped, every right given back.
fn g_memobj(c: &mut Ctx) {
    use baton_abi::memobj::map_flags;
    let sys = |n: Sys, a: [u64; 6]| {
        // SAFETY: every call here either is refused or maps memory only anywhere (unmapped
        // again below) and writes only into the scratch memory.
        decode_result(unsafe { raw_syscall(n as u64, a) })
    };
    const P: u64 = 4096;
    let rw = map_flags(3, 3, false, 1);
    let obj = expect!(
        c,
        sys(Sys::MemobjCreate, [2 * P, 0, 0, 0, 0, 0]),
        Ok(()),
        "memobj_create"
    )
    .unwrap_or(0);
    let (p, ps) = c.pair();
    let so = expect!(c, port_make_send(p, true), Ok(()), "send-once").unwrap_or(0);
    let dead = c.dead();
    let server = c.server;
    for (what, name, want) in [
        ("a receive right", p, Error::InvalidRight),
        ("a send right to a port", ps, Error::InvalidRight),
        ("a send-once right", so, Error::InvalidRight),
        ("a dead name", dead, Error::DeadName),
        ("the peer's send right", server, Error::InvalidRight),
        ("name 0", 0, Error::InvalidName),
        ("a name not held", GARBAGE, Error::InvalidName),
    ] {
        expect!(
            c,
            sys(Sys::VmMap, [name, 0, P, 0, rw, 0]),
            Err(want),
            "vm_map of {what}"
        );
        expect!(
            c,
            sys(Sys::MemobjRestrict, [name, 1, 0, 0, 0, 0]),
            Err(want),
            "memobj_restrict of {what}"
        );
        expect!(
            c,
            sys(Sys::MemobjInfo, [name, SCRATCH, 0, 0, 0, 0]),
            Err(want),
            "memobj_info of {what}"
        );
        expect!(
            c,
            sys(Sys::VmRead, [name, SCRATCH, SCRATCH, 8, 0, 0]),
            Err(want),
            "vm_read through {what}"
        );
        expect!(
            c,
            sys(Sys::VmWrite, [name, SCRATCH, SCRATCH, 8, 0, 0]),
            Err(want),
            "vm_write through {what}"
        );
        expect!(
            c,
            sys(Sys::PagerLock, [name, 0, P, 1, 0, 0]),
            Err(want),
            "pager_lock of {what}"
        );
    }
    // pager_lock of an object that has no pager, and with garbage ranges and rights.
    for (what, a) in [
        ("an anonymous object", [obj, 0, P, 1, 0, 0]),
        ("an unaligned offset", [obj, 1, P, 1, 0, 0]),
        ("an empty range", [obj, 0, 0, 1, 0, 0]),
        ("a wrapping range", [obj, !0xfff, 2 * P, 1, 0, 0]),
        ("unknown rights", [obj, 0, P, !0, 0, 0]),
    ] {
        expect!(
            c,
            sys(Sys::PagerLock, a),
            Err(Error::InvalidArgument),
            "pager_lock with {what}"
        );
    }
    for (what, size, want) in [
        ("0", 0, Error::InvalidArgument),
        ("1", 1, Error::InvalidArgument),
        ("P + 1", P + 1, Error::InvalidArgument),
        ("1 GiB + P", (1 << 30) + P, Error::TooLarge),
        ("u64::MAX", u64::MAX, Error::TooLarge),
    ] {
        expect!(
            c,
            sys(Sys::MemobjCreate, [size, 0, 0, 0, 0, 0]),
            Err(want),
            "memobj_create({what})"
        );
    }
    for (what, addr, len, offset, flags, want) in [
        (
            "unknown flag bits",
            0,
            P,
            0,
            1 << 40,
            Error::InvalidArgument,
        ),
        (
            "protection above maximum",
            0,
            P,
            0,
            map_flags(3, 1, false, 1),
            Error::InvalidArgument,
        ),
        (
            "inheritance 3",
            0,
            P,
            0,
            map_flags(1, 1, false, 3),
            Error::InvalidArgument,
        ),
        (
            "a window past the end",
            0,
            3 * P,
            0,
            rw,
            Error::InvalidArgument,
        ),
        (
            "an offset past the end",
            0,
            P,
            2 * P,
            rw,
            Error::InvalidArgument,
        ),
        ("an unaligned offset", 0, P, 1, rw, Error::InvalidArgument),
        (
            "a wrapping offset",
            0,
            P,
            !0xfff,
            rw,
            Error::InvalidArgument,
        ),
        ("length 0", 0, 0, 0, rw, Error::InvalidArgument),
        ("length u64::MAX", 0, u64::MAX, 0, rw, Error::TooLarge),
        (
            "the kernel half",
            KERNEL_ADDRESS,
            P,
            0,
            rw,
            Error::BadAddress,
        ),
        ("the top page", TOP_PAGE, P, 0, rw, Error::BadAddress),
        (
            "a non-canonical address",
            NON_CANONICAL,
            P,
            0,
            rw,
            Error::BadAddress,
        ),
        (
            "an unaligned address",
            UNMAPPED + 1,
            P,
            0,
            rw,
            Error::InvalidArgument,
        ),
        (
            "the scratch memory (taken)",
            SCRATCH,
            P,
            0,
            rw,
            Error::NoSpace,
        ),
    ] {
        expect!(
            c,
            sys(Sys::VmMap, [obj, addr, len, offset, flags, 0]),
            Err(want),
            "vm_map with {what}"
        );
    }
    let me = expect!(c, baton_rt::kobject::task_self(), Ok(()), "task_self").unwrap_or(0);
    for (what, addr, buf, len, want) in [
        (
            "an unmapped address",
            UNMAPPED,
            SCRATCH,
            8,
            Error::BadAddress,
        ),
        (
            "a kernel address",
            KERNEL_ADDRESS,
            SCRATCH,
            8,
            Error::BadAddress,
        ),
        (
            "a kernel buffer",
            SCRATCH,
            KERNEL_ADDRESS,
            8,
            Error::BadAddress,
        ),
        (
            "a wrapping range",
            u64::MAX - 3,
            SCRATCH,
            8,
            Error::BadAddress,
        ),
        (
            "a length over 64 KiB",
            SCRATCH,
            SCRATCH,
            (64 << 10) + 1,
            Error::TooLarge,
        ),
        (
            "length u64::MAX",
            SCRATCH,
            SCRATCH,
            u64::MAX,
            Error::TooLarge,
        ),
    ] {
        expect!(
            c,
            sys(Sys::VmRead, [me, addr, buf, len, 0, 0]),
            Err(want),
            "vm_read of {what}"
        );
        expect!(
            c,
            sys(Sys::VmWrite, [me, addr, buf, len, 0, 0]),
            Err(want),
            "vm_write of {what}"
        );
    }
    for (what, addr, want) in [
        ("an unaligned word", SCRATCH + 2, Error::InvalidArgument),
        ("an unmapped word", UNMAPPED, Error::BadAddress),
        ("a kernel word", KERNEL_ADDRESS, Error::BadAddress),
    ] {
        expect!(
            c,
            sys(Sys::WaitShared, [addr, 0, 0, 0, 0, 0]),
            Err(want),
            "wait_shared on {what}"
        );
        expect!(
            c,
            sys(Sys::WakeShared, [addr, 1, 0, 0, 0, 0]),
            Err(want),
            "wake_shared on {what}"
        );
    }
    for (what, a, want) in [
        (
            "memobj_physical without the right",
            [0xb8000, P, 0, obj, 0, 0],
            Error::Denied,
        ),
        (
            "memobj_physical with right 0",
            [0xb8000, P, 0, 0, 0, 0],
            Error::Denied,
        ),
        (
            "memobj_dma without the right",
            [P, ps, 0, 0, 0, 0],
            Error::Denied,
        ),
    ] {
        let n = if what.starts_with("memobj_dma") {
            Sys::MemobjDma
        } else {
            Sys::MemobjPhysical
        };
        expect!(c, sys(n, a), Err(want), "{what}");
    }
    // msi_message of anything but an MSI interrupt object.
    for (what, name, want) in [
        ("a send right to a port", ps, Error::InvalidRight),
        ("a memory object", obj, Error::InvalidRight),
        ("a dead name", dead, Error::InvalidRight),
        ("name 0", 0, Error::InvalidRight),
        ("a name not held", GARBAGE, Error::InvalidRight),
    ] {
        expect!(
            c,
            sys(Sys::MsiMessage, [name, 0, 0, 0, 0, 0]),
            Err(want),
            "msi_message of {what}"
        );
    }
    // The DMA quarantine's calls need the host-privilege right too: any other name, a
    // dead one, 0 or garbage is refused, and nothing is released.
    for (what, right, want) in [
        ("a send right to a port", ps, Error::Denied),
        ("a memory object", obj, Error::Denied),
        ("a dead name", dead, Error::Denied),
        ("0", 0, Error::Denied),
        ("a name not held", GARBAGE, Error::Denied),
    ] {
        expect!(
            c,
            sys(Sys::DmaQuarantineRelease, [right, 0, 0, 0, 0, 0]),
            Err(want),
            "dma_quarantine_release with {what}"
        );
        expect!(
            c,
            sys(Sys::DmaQuarantined, [right, u64::MAX, 0, 0, 0, 0]),
            Err(want),
            "dma_quarantined with {what}"
        );
        expect!(
            c,
            sys(Sys::HaltedTicks, [right, 0, 0, 0, 0, 0]),
            Err(want),
            "halted_ticks with {what}"
        );
        expect!(
            c,
            sys(Sys::MsiAttach, [ps, right, 0, 0, 0, 0]),
            Err(want),
            "msi_attach with {what}"
        );
    }
    // A good mapping anywhere and a restricted right, then everything given back.
    if let Some(a) = expect!(
        c,
        sys(Sys::VmMap, [obj, 0, 2 * P, 0, rw, 0]),
        Ok(()),
        "vm_map anywhere"
    ) {
        expect!(
            c,
            sys(Sys::VmDeallocate, [a, 2 * P, 0, 0, 0, 0]),
            Ok(()),
            "vm_deallocate"
        );
    }
    if let Some(ro) = expect!(
        c,
        sys(Sys::MemobjRestrict, [obj, 1, 0, 0, 0, 0]),
        Ok(()),
        "restrict"
    ) {
        expect!(
            c,
            sys(Sys::VmMap, [ro, 0, P, 0, rw, 0]),
            Err(Error::Denied),
            "vm_map writable through a read-only right"
        );
        c.drop_names(&[ro]);
    }
    c.drop_names(&[obj, p, ps, so, dead, me]);
}

/// An upcall entry for the virtual processors below, which never get an upcall (their
/// carrier, this thread, blocks in nothing but `vp_wait` while it carries one).
extern "C" fn vp_never(_ev: u64, _kind: u64, _cookie: u64) -> ! {
    println!("TEST FAIL hostile: an upcall that should not have come");
    baton_rt::sys::exit(1)
}

/// The virtual-processor calls (`vp_create`, `vp_spares`, `vp_take`, `vp_wait`,
/// `vp_destroy`) with bad configurations, ids, counts, buffers and words; a processor made
/// with spares and ended leaves no thread behind (the group's counts).
fn g_vproc(c: &mut Ctx) {
    use baton_abi::vproc::{VpConfig, SPARES_MAX, TAKE_MAX, UPCALL_STACK_MIN};
    use baton_rt::vproc::{
        vp_create, vp_create_raw, vp_destroy, vp_spares, vp_take_raw, vp_wait_raw,
    };
    let stack = [0u8; 2 * UPCALL_STACK_MIN as usize + 16];
    let lo = (core::hint::black_box(&stack).as_ptr() as u64 + 15) & !15;
    let good = VpConfig {
        entry: vp_never as *const () as u64,
        upcall_lo: lo,
        upcall_hi: lo + 2 * UPCALL_STACK_MIN,
        ..VpConfig::default()
    };
    for at in [0, 1, KERNEL_ADDRESS, u64::MAX, USER_MIN - 8] {
        expect!(
            c,
            vp_create_raw(at),
            Err(Error::BadAddress),
            "vp_create at {at:#x}"
        );
    }
    /// A bad configuration: what it is, how it is made from a good one, its error.
    type Bad = (&'static str, fn(&mut VpConfig), Error);
    let bad: [Bad; 9] = [
        ("entry 0", |v| v.entry = 0, Error::BadAddress),
        (
            "entry in the kernel",
            |v| v.entry = KERNEL_ADDRESS,
            Error::BadAddress,
        ),
        ("entry u64::MAX", |v| v.entry = u64::MAX, Error::BadAddress),
        (
            "stack misaligned",
            |v| v.upcall_hi -= 1,
            Error::InvalidArgument,
        ),
        (
            "stack reversed",
            |v| core::mem::swap(&mut v.upcall_lo, &mut v.upcall_hi),
            Error::BadAddress,
        ),
        (
            "stack wrapping",
            |v| {
                v.upcall_lo = u64::MAX - 15;
                v.upcall_hi = 16;
            },
            Error::BadAddress,
        ),
        (
            "stack too small",
            |v| v.upcall_lo = v.upcall_hi - 32,
            Error::InvalidArgument,
        ),
        (
            "mailbox in the kernel",
            |v| v.mailbox = KERNEL_ADDRESS,
            Error::BadAddress,
        ),
        (
            "quiet range in the kernel",
            |v| {
                v.quiet_lo = KERNEL_ADDRESS;
                v.quiet_hi = u64::MAX;
            },
            Error::BadAddress,
        ),
    ];
    for (what, f, want) in bad {
        let mut v = good;
        f(&mut v);
        expect!(c, vp_create(&v), Err(want), "vp_create with {what}");
    }
    for id in [0, 1, u64::MAX, 0x1_0000_0001] {
        expect!(
            c,
            vp_spares(id, 1),
            Err(Error::NotFound),
            "vp_spares of id {id:#x}"
        );
        expect!(
            c,
            vp_destroy(id),
            Err(Error::NotFound),
            "vp_destroy of id {id:#x}"
        );
    }
    let word = AtomicU32::new(0);
    // SAFETY: refused before any write (the caller carries no processor).
    let r = unsafe { vp_take_raw(KERNEL_ADDRESS, 1) };
    expect!(
        c,
        r,
        Err(Error::InvalidArgument),
        "vp_take by a thread that carries nothing"
    );
    expect!(
        c,
        vp_wait_raw(word.as_ptr() as u64, 0, 0),
        Err(Error::InvalidArgument),
        "vp_wait by a thread that carries nothing"
    );
    let Some(vp) = expect!(c, vp_create(&good), Ok(()), "vp_create") else {
        return;
    };
    expect!(
        c,
        vp_create(&good),
        Err(Error::Busy),
        "vp_create by a carrier"
    );
    for n in [SPARES_MAX + 1, u64::MAX, 1 << 32] {
        expect!(
            c,
            vp_spares(vp, n),
            Err(Error::InvalidArgument),
            "vp_spares({n:#x})"
        );
    }
    expect!(
        c,
        vp_spares(vp, SPARES_MAX),
        Ok(()),
        "vp_spares(SPARES_MAX)"
    );
    for (what, buf, max, want) in [
        ("max past TAKE_MAX", 0, TAKE_MAX + 1, Ok(0)),
        ("max u64::MAX", 0, u64::MAX, Ok(0)),
        ("a kernel buffer, nothing queued", KERNEL_ADDRESS, 1, Ok(0)),
        ("a null buffer, nothing queued", 0, TAKE_MAX, Ok(0)),
    ] {
        // SAFETY: nothing is queued, so nothing is written; a count is refused first.
        let r = unsafe { vp_take_raw(buf, max) };
        let want = if max > TAKE_MAX {
            Err(Error::TooLarge)
        } else {
            want
        };
        match want {
            Ok(n) => check!(c, r == Ok(n), "vp_take with {what}: {r:?}"),
            Err(e) => check!(c, r == Err(e), "vp_take with {what}: {r:?}"),
        };
    }
    for (what, addr, want) in [
        ("a kernel word", KERNEL_ADDRESS, Error::BadAddress),
        (
            "a misaligned word",
            word.as_ptr() as u64 + 2,
            Error::InvalidArgument,
        ),
        ("a null word", 0, Error::BadAddress),
    ] {
        expect!(
            c,
            vp_wait_raw(addr, 0, 1000),
            Err(want),
            "vp_wait on {what}"
        );
    }
    expect!(
        c,
        vp_wait_raw(word.as_ptr() as u64, 7, 1000),
        Err(Error::WouldBlock),
        "vp_wait on a changed word"
    );
    // Checkpoint and Resume (Sting's preemption) and the Strand events' count. Checkpoints
    // are never left on: this carrier's upcall entry must not be entered.
    {
        use baton_rt::vproc::{strand_count, vp_preempt, vp_resume_raw};
        for q in [1, 999_999] {
            expect!(
                c,
                vp_preempt(vp, q),
                Err(Error::InvalidArgument),
                "vp_preempt with a quantum of {q} ns"
            );
        }
        for id in [0, u64::MAX, vp + 1] {
            expect!(
                c,
                vp_preempt(id, 0),
                Err(Error::NotFound),
                "vp_preempt of id {id:#x}"
            );
        }
        expect!(c, vp_preempt(vp, 0), Ok(()), "vp_preempt off");
        // An interruption of no processor of this task (one of this carrier's would
        // enter its upcall entry at the next tick).
        for id in [0, u64::MAX, vp + 1, vp ^ (1 << 63)] {
            expect!(
                c,
                baton_rt::vproc::vp_interrupt(id),
                Err(Error::NotFound),
                "vp_interrupt of id {id:#x}"
            );
        }
        let wild = baton_abi::exception::UserRegs {
            rip: KERNEL_ADDRESS,
            rsp: KERNEL_ADDRESS,
            ..Default::default()
        };
        for (what, at) in [
            ("a null block", 0),
            ("a kernel block", KERNEL_ADDRESS),
            ("a non-canonical block", 0x8000_0000_0000),
            ("a block past the top of user space", u64::MAX - 8),
            ("a kernel rip and rsp", core::ptr::from_ref(&wild) as u64),
        ] {
            // SAFETY: each is refused before any register is loaded.
            let e = unsafe { vp_resume_raw(at) };
            check!(c, e == Error::BadAddress, "vp_resume of {what}: {e:?}");
        }
        for ev in [0, 3, baton_abi::spin::EVENT_STRAND_BLOCK - 1, u64::MAX] {
            expect!(
                c,
                strand_count(ev),
                Err(Error::NotFound),
                "strand_count({ev:#x})"
            );
        }
        if let Ok(d) = baton_rt::spin::import("builtin.strand") {
            expect!(
                c,
                baton_rt::spin::install(d, "count", baton_abi::spin::EVENT_SYSCALL, 0, 0x1000, 0),
                Err(Error::InvalidArgument),
                "a Strand handler installed on Trap.SystemCall"
            );
            expect!(
                c,
                baton_rt::spin::install(d, "nothing", baton_abi::spin::EVENT_STRAND_BLOCK, 0, 0, 0),
                Err(Error::NotFound),
                "an unknown symbol installed on Strand.Block"
            );
            expect!(
                c,
                baton_rt::spin::remove(baton_rt::spin::Handler {
                    event: baton_abi::spin::EVENT_STRAND_CHECKPOINT,
                    id: 12345
                }),
                Err(Error::NotFound),
                "removing a Strand handler that does not exist"
            );
            let _ = baton_rt::spin::release(d);
        }
        if let Ok(d) = baton_rt::spin::import("builtin.null_syscall") {
            expect!(
                c,
                baton_rt::spin::install(d, "null", baton_abi::spin::EVENT_STRAND_BLOCK, 0, 0, 0),
                Err(Error::InvalidArgument),
                "a Trap.SystemCall handler installed on Strand.Block"
            );
            let _ = baton_rt::spin::release(d);
        }
    }
    expect!(c, vp_destroy(vp), Ok(()), "vp_destroy");
    expect!(c, vp_destroy(vp), Err(Error::NotFound), "vp_destroy twice");
    expect!(
        c,
        vp_spares(vp, 1),
        Err(Error::NotFound),
        "vp_spares of a destroyed processor"
    );
}

/// SPIN's memory interfaces (`spinvm_query`, `spinvm_mark`, `Translation` handlers) with
/// bad arguments: each an error, nothing installed.
fn g_spinvm(c: &mut Ctx) {
    use baton_abi::translation::{EVENT_PAGE_NOT_PRESENT, EVENT_PROTECTION_FAULT};
    use baton_rt::spin;
    use baton_rt::spinvm::{mark, query};
    for at in [0, 1, KERNEL_ADDRESS, u64::MAX, USER_MIN - 8, 1 << 47] {
        expect!(
            c,
            query(at),
            Err(Error::BadAddress),
            "spinvm_query at {at:#x}"
        );
    }
    let r = query(0x6100_0000_0000);
    check!(c, r == Ok(0), "spinvm_query where nothing is mapped: {r:?}");
    let m = mark();
    check!(c, m == 0, "spinvm_mark with no handler: {m}");
    let Ok(b) = spin::import("builtin.appel") else {
        check!(c, false, "import builtin.appel");
        return;
    };
    expect!(
        c,
        spin::install(b, "gc", EVENT_PROTECTION_FAULT + 1, 0, 0, 0),
        Err(Error::NotFound),
        "a handler on no event"
    );
    expect!(
        c,
        spin::install(b, "protect", EVENT_PROTECTION_FAULT, 0, 0, 0),
        Err(Error::InvalidArgument),
        "a system-call handler on a Translation event"
    );
    expect!(
        c,
        spin::install(b, "nosuch", EVENT_PAGE_NOT_PRESENT, 0, 0, 0),
        Err(Error::NotFound),
        "no such procedure"
    );
    expect!(
        c,
        spin::install(
            spin::Domain(u64::MAX),
            "gc",
            EVENT_PAGE_NOT_PRESENT,
            0,
            0,
            0
        )
        .map(|_| ()),
        Err(Error::NotFound),
        "a domain not held"
    );
    for id in [0, 12345, u64::MAX] {
        expect!(
            c,
            spin::remove(spin::Handler {
                event: EVENT_PROTECTION_FAULT,
                id,
            }),
            Err(Error::NotFound),
            "removing handler {id:#x}"
        );
    }
    expect!(
        c,
        spin::install_async(b, "gc", EVENT_PROTECTION_FAULT, 0, 0, 0).map(|_| ()),
        Err(Error::NotSupported),
        "an asynchronous Translation handler"
    );
    // The built-in `load` system call reads a word of its caller's memory: every bad
    // address is `BadAddress`, the last word of user space and an unaligned one are read.
    match spin::install(b, "load", baton_abi::spin::EVENT_SYSCALL, 0, 0x1ffe, 0) {
        Ok(h) => {
            for at in [
                0,
                8,
                KERNEL_ADDRESS,
                u64::MAX,
                USER_MIN - 8,
                1 << 47,
                (1 << 47) - 4,
            ] {
                let r = decode_result(spin::call(0x1ffe, [at, 0, 0, 0]));
                check!(c, r == Err(Error::BadAddress), "load at {at:#x}: {r:?}");
            }
            let word = 0x5eed_u64;
            let at = core::ptr::addr_of!(word) as u64;
            let r = decode_result(spin::call(0x1ffe, [at, 0, 0, 0]));
            check!(c, r == Ok(0x5eed), "load of a word of the stack: {r:?}");
            expect!(c, spin::remove(h), Ok(()), "remove load");
        }
        Err(e) => check!(c, false, "install load: {e:?}"),
    }
    expect!(
        c,
        spin::install(b, "load", EVENT_PROTECTION_FAULT, 0, 0, 0).map(|_| ()),
        Err(Error::InvalidArgument),
        "load on a Translation event"
    );
    expect!(c, spin::release(b), Ok(()), "release builtin.appel");
}

/// Asynchronous handlers and calls between extension domains with bad arguments: each an
/// error, nothing installed or queued.
fn g_spin_async(c: &mut Ctx) {
    use baton_abi::spin::{ASYNC_DROPPED, ASYNC_PENDING, EVENT_STRAND_BLOCK, EVENT_SYSCALL};
    use baton_rt::spin;
    for which in [3, 4, 1 << 32, u64::MAX] {
        expect!(
            c,
            spin::async_count(which),
            Err(Error::InvalidArgument),
            "spin_async({which:#x})"
        );
    }
    let before = (
        spin::async_count(ASYNC_PENDING),
        spin::async_count(ASYNC_DROPPED),
    );
    check!(
        c,
        before == (Ok(0), Ok(0)),
        "no asynchronous handler yet: nothing waiting or dropped ({before:?})"
    );
    let Ok(b) = spin::import("builtin.null_syscall") else {
        check!(c, false, "import builtin.null_syscall");
        return;
    };
    for ev in [EVENT_SYSCALL, EVENT_STRAND_BLOCK] {
        expect!(
            c,
            spin::install_async(b, "null", ev, 0, 0x1000, 0).map(|_| ()),
            Err(Error::NotSupported),
            "an asynchronous handler on event {ev:#x}"
        );
    }
    expect!(
        c,
        spin::install_async(spin::Domain(u64::MAX), "one", 2, 0, 0, 0).map(|_| ()),
        Err(Error::NotFound),
        "an asynchronous handler from a domain not held"
    );
    // A domain another module's imports are resolved against must be held (a forged
    // domain number binds nothing).
    for d in [0, 12345, u64::MAX] {
        expect!(
            c,
            spin::resolve(spin::Domain(d), b),
            Err(Error::NotFound),
            "Resolve from domain {d:#x}"
        );
    }
    expect!(c, spin::release(b), Ok(()), "release builtin.null_syscall");
}

/// `PhysAddr.Reclaim`'s calls with bad arguments: bad selectors, handlers of another
/// type or from domains not held, removals of handlers that are not there; a handler with
/// a garbage closure is installed (the closure is only a word: its table is read, if at
/// all, resident and checked) and removed; nothing stays installed.
fn g_spin_reclaim(c: &mut Ctx) {
    use baton_abi::spin::{EVENT_SYSCALL, EVENT_TEST};
    use baton_abi::translation::{EVENT_RECLAIM, RECLAIM_ASKED, RECLAIM_TAKEN};
    use baton_rt::spin;
    for which in [3, 4, 1 << 32, u64::MAX] {
        expect!(
            c,
            spin::reclaim_count(which),
            Err(Error::InvalidArgument),
            "spin_reclaim({which:#x})"
        );
    }
    // `spin_tier`: only its two counters.
    for which in [2, 3, 1 << 32, u64::MAX] {
        expect!(
            c,
            spin::tier_count(which),
            Err(Error::InvalidArgument),
            "spin_tier({which:#x})"
        );
    }
    check!(
        c,
        spin::tier_count(baton_abi::spin::TIER_FAST).is_ok()
            && spin::tier_count(baton_abi::spin::TIER_WASMI).is_ok(),
        "spin_tier reads both counters"
    );
    let before = (
        spin::reclaim_count(RECLAIM_ASKED),
        spin::reclaim_count(RECLAIM_TAKEN),
    );
    let Ok(b) = spin::import("builtin.physaddr") else {
        check!(c, false, "import builtin.physaddr");
        return;
    };
    for (sym, ev) in [("mru", EVENT_SYSCALL), ("table", EVENT_TEST)] {
        expect!(
            c,
            spin::install(b, sym, ev, 0, 0x1000, 0).map(|_| ()),
            Err(Error::InvalidArgument),
            "a Reclaim handler ({sym}) on event {ev:#x}"
        );
    }
    if let Ok(n) = spin::import("builtin.null_syscall") {
        // The same type as a Reclaim handler, but not one.
        expect!(
            c,
            spin::install(n, "one", EVENT_RECLAIM, 0, 0, 0).map(|_| ()),
            Err(Error::InvalidArgument),
            "a Test.Raise handler on PhysAddr.Reclaim"
        );
        expect!(
            c,
            spin::install(n, "null", EVENT_RECLAIM, 0, 0, 0).map(|_| ()),
            Err(Error::InvalidArgument),
            "a Trap.SystemCall handler on PhysAddr.Reclaim"
        );
        expect!(c, spin::release(n), Ok(()), "release builtin.null_syscall");
    }
    expect!(
        c,
        spin::install(b, "nosuch", EVENT_RECLAIM, 0, 0, 0).map(|_| ()),
        Err(Error::NotFound),
        "an unknown symbol on PhysAddr.Reclaim"
    );
    expect!(
        c,
        spin::install(spin::Domain(u64::MAX), "mru", EVENT_RECLAIM, 0, 0, 0).map(|_| ()),
        Err(Error::NotFound),
        "a Reclaim handler from a domain not held"
    );
    for id in [0, 77, u64::MAX] {
        expect!(
            c,
            spin::remove(spin::Handler {
                event: EVENT_RECLAIM,
                id
            }),
            Err(Error::NotFound),
            "removing Reclaim handler {id:#x} that is not there"
        );
    }
    for closure in [0, GARBAGE, 0xffff_8000_0000_0000, u64::MAX] {
        match spin::install(b, "table", EVENT_RECLAIM, 0, closure, 0) {
            Ok(h) => {
                expect!(c, spin::remove(h), Ok(()), "remove a Reclaim handler");
            }
            Err(e) => {
                check!(
                    c,
                    false,
                    "install table with closure {closure:#x}: {}",
                    e.name()
                );
            }
        }
    }
    let after = (
        spin::reclaim_count(RECLAIM_ASKED),
        spin::reclaim_count(RECLAIM_TAKEN),
    );
    check!(
        c,
        before == after,
        "nothing was asked or taken ({before:?} -> {after:?})"
    );
    expect!(c, spin::release(b), Ok(()), "release builtin.physaddr");
}

/// The default pager's calls from a task that is not one and has no host-privilege right:
/// every garbage argument an error, nothing registered, nothing changed.
fn g_paging(c: &mut Ctx) {
    use baton_rt::paging::{self, SCOPE_SYSTEM, SLOTS_MAX, TRANSFER_SIZE};
    let before = paging::system_stats().map(|s| (s.store_slots, s.pagers_registered));
    let (p, ps) = c.pair();
    let dead = c.dead();
    for (what, port) in [
        ("name 0", 0),
        ("garbage", GARBAGE),
        ("a dead name", dead),
        ("a receive right", p),
        ("a send right", ps),
    ] {
        for (host, slots) in [
            (0, 16),
            (GARBAGE, 16),
            (ps, 16),
            (p, 0),
            (ps, SLOTS_MAX + 1),
            (u64::MAX, u64::MAX),
        ] {
            check!(
                c,
                paging::register(port, slots, host).is_err(),
                "default_pager_register({what}, {slots}, {host:#x}) without the host-privilege right"
            );
        }
    }
    let rec = [0u8; TRANSFER_SIZE];
    let page = [0u8; 4096];
    expect!(
        c,
        paging::supply(&rec, &page),
        Err(Error::Denied),
        "default_pager_supply from a task that is not the default pager"
    );
    for (t, b) in [
        (0, 0),
        (KERNEL_ADDRESS, KERNEL_ADDRESS),
        (u64::MAX, 1),
        (USER_MIN - 8, GARBAGE),
    ] {
        expect!(
            c,
            paging::supply_raw(t, b),
            Err(Error::Denied),
            "default_pager_supply({t:#x}, {b:#x}) from a task that is not the default pager"
        );
    }
    for (frames, host) in [
        (256, 0),
        (256, GARBAGE),
        (256, ps),
        (0, p),
        (u64::MAX, dead),
    ] {
        check!(
            c,
            paging::set_limit(frames, host).is_err(),
            "paging_limit({frames}, {host:#x}) without the host-privilege right"
        );
    }
    // `paging_exempt`: no host-privilege right, or a name that is no task port.
    for (task, host) in [
        (0, 0),
        (GARBAGE, GARBAGE),
        (p, ps),
        (ps, p),
        (dead, dead),
        (u64::MAX, 0),
    ] {
        check!(
            c,
            paging::exempt(task, host).is_err(),
            "paging_exempt({task:#x}, {host:#x}) without a task port and the host-privilege right"
        );
    }
    for scope in [2, 3, u64::MAX, 1 << 32] {
        expect!(
            c,
            paging::stats_raw(scope).map(|_| ()),
            Err(Error::InvalidArgument),
            "paging_stats scope {scope:#x}"
        );
    }
    for at in [0, 1, KERNEL_ADDRESS, u64::MAX - 8, USER_MIN - 8] {
        // SAFETY: the kernel writes nowhere it cannot: every address here is refused.
        let r = decode_result(unsafe {
            raw_syscall(Sys::PagingStats as u64, [SCOPE_SYSTEM, at, 0, 0, 0, 0])
        });
        expect!(c, r, Err(Error::BadAddress), "paging_stats into {at:#x}");
    }
    let after = paging::system_stats().map(|s| (s.store_slots, s.pagers_registered));
    check!(
        c,
        after == before,
        "no default pager registered, none counted ({before:?} -> {after:?})"
    );
    c.drop_names(&[p, ps, dead]);
}

/// SPIN's integrated thread package (`builtin.cthreads`, installed on extension numbers)
/// and the built-in caller with garbage: made-up handles, conditions past the last, a
/// fork at kernel and unmapped addresses (refused or a thread that only faults), `exit`
/// from a thread the package did not make; `call_n` without the callee's capability and
/// with a huge count (bounded).
fn g_spin_threads(c: &mut Ctx) {
    use baton_abi::decode_result;
    use baton_abi::spin::EVENT_TEST;
    use baton_rt::spin;
    const FIRST: u64 = 0x1300;
    let Ok(p) = spin::cthreads::Package::install(FIRST) else {
        check!(c, false, "install builtin.cthreads");
        return;
    };
    for h in [0, 1, 0x1_0000, u64::MAX] {
        expect!(c, p.join(h), Err(Error::NotFound), "join({h:#x})");
    }
    for cond in [16, 17, 1 << 40, u64::MAX] {
        expect!(
            c,
            p.signal(cond),
            Err(Error::InvalidArgument),
            "signal({cond:#x})"
        );
        expect!(
            c,
            p.wait(cond),
            Err(Error::InvalidArgument),
            "wait({cond:#x})"
        );
        expect!(
            c,
            p.handoff(0, cond),
            Err(Error::InvalidArgument),
            "handoff(0, {cond:#x})"
        );
    }
    for (entry, stack) in [
        (0u64, 0x1000u64),
        (0xffff_8000_0000_0000, 0x1000),
        (0x1000, 0xffff_ffff_ffff_0000),
        (u64::MAX, u64::MAX),
    ] {
        expect!(
            c,
            decode_result(spin::call(FIRST, [entry, stack, 0, 0])),
            Err(Error::BadAddress),
            "fork at {entry:#x} with stack {stack:#x}"
        );
    }
    expect!(
        c,
        decode_result(spin::call(FIRST + 2, [0, 0, 0, 0])),
        Err(Error::NotFound),
        "exit from the main thread"
    );
    // The package's joins and conditions wait on keys in the kernel's half: a user `wake`
    // there is refused, and wakes nothing.
    for addr in [
        baton_abi::layout::USER_END,
        0xffff_ff00_0000_0000,
        0xffff_ff00_0001_0000,
    ] {
        expect!(
            c,
            baton_rt::sys::wake_raw(addr, u64::MAX),
            Err(Error::InvalidArgument),
            "wake({addr:#x}), a key outside the user half"
        );
    }
    p.uninstall();
    if let Ok(caller) = spin::import("builtin.caller") {
        expect!(
            c,
            spin::install(caller, "call_n", EVENT_TEST, 0, 0, 0).map(|_| ()),
            Err(Error::NotFound),
            "call_n without the callee's capability"
        );
        if let Ok(callee) = spin::import("builtin.callee") {
            if let Ok(h) = spin::install(caller, "call_n", EVENT_TEST, 0, 0, 0) {
                let r = spin::raise(u64::MAX);
                check!(
                    c,
                    r == Ok(1000),
                    "call_n of u64::MAX calls stops at 1,000: {r:?}"
                );
                let _ = spin::remove(h);
            }
            let _ = spin::release(callee);
        }
        let _ = spin::release(caller);
    }
}

/// `wait` on words its short way cannot read through the caller's mapping (the load
/// faults and is recovered, and the general path answers) or must refuse: each gets the
/// general path's answer, and nothing blocks.
fn g_wait(c: &mut Ctx) {
    let wait = |addr: u64, expected: u64, ns: u64| {
        // SAFETY: `wait` only reads the word (or fails), and nothing here wakes it early.
        decode_result(unsafe { raw_syscall(Sys::Wait as u64, [addr, expected, ns, 0, 0, 0]) })
    };
    for (what, addr, want) in [
        ("an unaligned word", SCRATCH + 2, Error::InvalidArgument),
        ("an unmapped word", UNMAPPED, Error::BadAddress),
        ("the lowest page", 0, Error::BadAddress),
        ("an IPC buffer's page unmapped", SPARE, Error::BadAddress),
        ("a kernel word", KERNEL_ADDRESS, Error::BadAddress),
        ("the top word", TOP_PAGE + 4092, Error::BadAddress),
    ] {
        expect!(c, wait(addr, 0, SOON), Err(want), "wait on {what}");
    }
    // A word of a page mapped but never touched: the general path brings the page in
    // (zero-filled), so the word is 0.
    let mapped = mem_map(FRESH, 4096, true);
    expect!(c, mapped, Ok(()), "mem_map of a fresh page");
    if mapped.is_ok() {
        expect!(
            c,
            wait(FRESH + 8, 1, SOON),
            Err(Error::WouldBlock),
            "wait on a fresh page's word (0) expecting 1"
        );
        expect!(
            c,
            wait(FRESH + 12, 0, SHORT),
            Err(Error::TimedOut),
            "wait on a fresh page's word (0) expecting 0, for a short time"
        );
        // SAFETY: nothing refers to the page (only the kernel read it).
        let unmapped = unsafe { mem_unmap(FRESH, 4096) };
        expect!(c, unmapped, Ok(()), "mem_unmap of the fresh page");
    }
    // A read-only page reads; its word (0) differs from 7.
    expect!(
        c,
        wait(READ_ONLY, 7, SOON),
        Err(Error::WouldBlock),
        "wait on a read-only word expecting another value"
    );
}
