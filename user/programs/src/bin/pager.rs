//! External pagers, booted (`docs/vm.md`, "External pagers"): a pager thread serves a
//! pager-backed object whose pages it computes on demand (each page starts with its page
//! number), and the test checks that nothing is asked before the first touch; that each
//! page is asked once and reads right (pager fills counted); a write returned to the pager
//! by a flush and supplied again; a clean that keeps the page; unavailable data read as
//! zeros; a pager's error reported to the exception port with the pager class; the kernel's
//! own copies (`wait`'s read, a receive into a pager-backed buffer) making their call again
//! once the page is there; a thread waiting for a pager that never answers being alerted
//! out of its wait; errors for bad arguments; and the pager's port dying while a thread
//! waits, which turns the wait into an exception. At the end the object's right and
//! mapping go and the kernel's objects and free frames are back where they were.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};

use baton_abi::decode_result;
use baton_abi::exception::ExcReply;
use baton_abi::host::BLOCKED_PAGE_IN;
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_BUF};
use baton_abi::vm::{FAULT_CLASS_SHIFT, FAULT_PAGER_ERROR};
use baton_rt::check::Failed;
use baton_rt::exception::{exception_port_set, info, set_reply};
use baton_rt::ipc::{
    cap_drop, msg_buf, msg_raw, port_allocate, port_make_send, IpcBuffer, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::pager::{
    self, Request, DATA_REQUEST, DATA_RETURN, DATA_UNLOCK, FLUSH_DROP, FLUSH_RETURN,
};
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::vm::{self, PROT_READ, PROT_RW};
use baton_rt::{println, Error, FOREVER};

baton_rt::entry!(main);

const TEST: &str = "pager";
const P: u64 = 4096;
/// Pages of the object.
const PAGES: u64 = 32;
/// What the pager is told in each request.
const COOKIE: u64 = 0xc00c1e;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// How the pager answers a request for a page.
const SUPPLY: u64 = 0;
const ZEROS: u64 = 1;
const FAIL: u64 = 2;
const IGNORE: u64 = 3;

static STACKS: StackPool<4, 32768> = StackPool::new();
/// The pager's port (receive right) and the object's right.
static PAGER_PORT: AtomicU64 = AtomicU64::new(0);
static OBJECT: AtomicU64 = AtomicU64::new(0);
/// Per page: how the pager answers, and the first word returned to it (0: none).
static MODE: [AtomicU64; PAGES as usize] = [const { AtomicU64::new(SUPPLY) }; PAGES as usize];
static RETURNED: [AtomicU64; PAGES as usize] = [const { AtomicU64::new(0) }; PAGES as usize];
/// Requests and returns the pager saw; requests with a wrong cookie or size.
static REQUESTS: Counter = Counter::new(0);
/// Unlock requests the pager answered, and the access the last one wanted.
static UNLOCKS: Counter = Counter::new(0);
static UNLOCK_ACCESS: AtomicU64 = AtomicU64::new(0);
static RETURNS: Counter = Counter::new(0);
static BAD: Counter = Counter::new(0);
/// The exception port, what the handler saw last, faults it answered.
static EXC_PORT: AtomicU64 = AtomicU64::new(0);
static SEEN_CLASS: AtomicU64 = AtomicU64::new(0);
static HANDLED: Counter = Counter::new(0);
/// The worker: its id, the address it reads at each go, what it read.
static WORKER: AtomicU64 = AtomicU64::new(0);
static WORK_ADDR: AtomicU64 = AtomicU64::new(0);
static WORK_READ: AtomicU64 = AtomicU64::new(0);
static GO: Counter = Counter::new(0);
static DONE: Counter = Counter::new(0);
static READY: Counter = Counter::new(0);

static TASK: AtomicU64 = AtomicU64::new(0);

fn main(task_id: u64) -> i32 {
    TASK.store(task_id, Ordering::SeqCst);
    baton_rt::check::finish(TEST, run())
}

/// The first word of page `i` as the pager computes it.
const fn pattern(i: u64) -> u64 {
    0x9a9e_0000_0000 + i
}

/// The pager: answers each data request as `MODE` says, keeps the first word of returned
/// pages (and supplies it back next time).
fn pager_thread(_: u64) {
    let port = PAGER_PORT.load(Ordering::SeqCst);
    let mut msg = [0u8; pager::RECEIVE_SIZE];
    let mut page = [0u8; P as usize];
    READY.increment();
    while msg_buf(&mut msg, MSG_RECEIVE, port, FOREVER).is_ok() {
        let Some(h) = MsgHeader::from_bytes(&msg) else {
            BAD.increment();
            continue;
        };
        let data = msg.get(HEADER_SIZE..h.size as usize).unwrap_or(&[]);
        let Some(req) = Request::from_bytes(data) else {
            BAD.increment();
            continue;
        };
        let i = req.offset / P;
        if req.cookie != COOKIE || req.len != P || i >= PAGES {
            BAD.increment();
            continue;
        }
        if h.id == DATA_RETURN {
            let mut w = [0u8; 8];
            w.copy_from_slice(data.get(32..40).unwrap_or(&[0; 8]));
            RETURNED[i as usize].store(u64::from_le_bytes(w), Ordering::SeqCst);
            RETURNS.increment();
            continue;
        }
        if h.id == DATA_UNLOCK {
            // Unlocks the page for every access.
            UNLOCK_ACCESS.store(req.access, Ordering::SeqCst);
            UNLOCKS.increment();
            if pager::lock(OBJECT.load(Ordering::SeqCst), req.offset, P, 7) != Ok(P) {
                BAD.increment();
            }
            continue;
        }
        if h.id != DATA_REQUEST {
            BAD.increment();
            continue;
        }
        REQUESTS.increment();
        let object = OBJECT.load(Ordering::SeqCst);
        let r = match MODE[i as usize].load(Ordering::SeqCst) {
            SUPPLY => {
                let back = RETURNED[i as usize].load(Ordering::SeqCst);
                let first = if back != 0 { back } else { pattern(i) };
                page[..8].copy_from_slice(&first.to_le_bytes());
                page[8..16].copy_from_slice(&req.access.to_le_bytes());
                pager::supply(object, req.offset, &page)
            }
            ZEROS => pager::unavailable(object, req.offset, P),
            FAIL => pager::error(object, req.offset, P),
            _ => Ok(0),
        };
        if r.is_err() {
            BAD.increment();
        }
    }
}

/// The object served through activations, and the calls its pager took.
static ACT_OBJECT: AtomicU64 = AtomicU64::new(0);
static ACT_CALLS: Counter = Counter::new(0);
/// Unlock requests the activation pager answered.
static ACT_UNLOCKS: Counter = Counter::new(0);

/// The first word of page `i` of the activation pager's object.
const fn act_pattern(i: u64) -> u64 {
    0xac7_0000_0000 + i
}

/// The activation pager: runs on the faulting thread itself, supplies the page, returns.
fn act_pager(req: &mut baton_rt::migrate::Request) {
    let id = req.header().id;
    let Some(r) = Request::from_bytes(req.data()) else {
        BAD.increment();
        return;
    };
    if id == DATA_UNLOCK && r.cookie == COOKIE + 1 {
        // Unlocks the page for every access.
        ACT_UNLOCKS.increment();
        if pager::lock(ACT_OBJECT.load(Ordering::SeqCst), r.offset, P, 7) != Ok(P) {
            BAD.increment();
        }
        req.reply(0, &[]);
        return;
    }
    if id != DATA_REQUEST || r.cookie != COOKIE + 1 {
        BAD.increment();
        return;
    }
    ACT_CALLS.increment();
    let mut page = [0u8; P as usize];
    page[..8].copy_from_slice(&act_pattern(r.offset / P).to_le_bytes());
    if pager::supply(ACT_OBJECT.load(Ordering::SeqCst), r.offset, &page).is_err() {
        BAD.increment();
    }
    req.reply(0, &[]);
}

/// The exception handler: notes the class; a pager fault is answered by supplying the page
/// (zeros) and retrying.
fn handler(_: u64) {
    let port = EXC_PORT.load(Ordering::SeqCst);
    let Ok(mut buf) = IpcBuffer::new() else {
        return;
    };
    READY.increment();
    let mut r = buf.msg(MSG_RECEIVE, port, FOREVER);
    while r.is_ok() {
        let Some(e) = info(&buf) else {
            r = buf.msg(MSG_RECEIVE, port, FOREVER);
            continue;
        };
        let class = e.error >> FAULT_CLASS_SHIFT;
        SEEN_CLASS.store(class, Ordering::SeqCst);
        let page = e.addr & !(P - 1);
        let base = WORK_BASE.load(Ordering::SeqCst);
        let fixed = e.kind == 14
            && class == FAULT_PAGER_ERROR
            && if DEAD.load(Ordering::SeqCst) != 0 {
                // The pager is gone: ordinary memory in place of its page.
                // SAFETY: the page is this test's mapping of the object; no reference.
                unsafe { vm::deallocate(page, P) }.is_ok()
                    && vm::allocate(Some(page), P, PROT_RW).is_ok()
            } else {
                let z = [0u8; P as usize];
                pager::supply(OBJECT.load(Ordering::SeqCst), page - base, &z).is_ok()
            };
        HANDLED.increment();
        let reply = if fixed {
            ExcReply::Retry
        } else {
            ExcReply::Kill
        };
        if set_reply(&mut buf, reply).is_err() {
            break;
        }
        r = buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER);
    }
}

/// Queues a message of `HEADER_SIZE + 128` bytes (id `id`, data bytes `i + id`) on
/// `port` through `send`, from `out`.
fn queue_long(out: &mut IpcBuffer, send: u64, id: u64) -> Result<(), Failed> {
    let mut data = [0u8; 128];
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i as u64 + id) as u8;
    }
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: send,
        id,
        ..MsgHeader::default()
    };
    must("queue", out.set(h, &[], &data))?;
    must("send", out.msg(MSG_SEND, 0, FOREVER))
}

/// Whether the message of [`queue_long`] with `id` is at `at`.
fn long_at(at: u64, id: u64) -> bool {
    (0..128u64).all(|i| {
        // SAFETY: `at` is in this test's mapping of the activation pager's object.
        let b = unsafe { ((at + HEADER_SIZE as u64 + i) as *const u8).read_volatile() };
        b == (i + id) as u8
    })
}

/// A receive's copy, a step of `ipc_msg` after its first checks, meets a page of the
/// activation pager's object (mapped at `abase`) not there yet: a receive-only call is
/// rewound and the thread carries the request into the pager, then receives; so does the
/// receive after the call's own send, made again as the receive alone (the send is not
/// made twice). Before, the first failed with `BadAddress` (the page left marked as being
/// paged in, so the next touch waited for good) and the second with `NotSupported`.
fn act_later_steps(out: &mut IpcBuffer, abase: u64) -> Result<(), Failed> {
    let own = must("a port", port_allocate(0))?;
    let send = must("its send right", port_make_send(own, false))?;
    let _ = read(abase);
    queue_long(out, send, 7)?;
    let calls = ACT_CALLS.get();
    // The buffer's last 64 bytes are in page 0 (resident), the message runs into page 1.
    let at = abase + P - 64;
    // SAFETY: the buffer is this test's mapping of the object, which nothing references.
    let r = decode_result(unsafe { msg_raw(MSG_RECEIVE | MSG_BUF, own, FOREVER, at, 256) });
    check!(
        r.is_ok() && long_at(at, 7) && ACT_CALLS.get() == calls + 1,
        "a receive whose message runs into an activation pager's page carries the request into the pager and receives ({r:?}, {} calls)",
        ACT_CALLS.get() - calls
    );
    // A call's send, then its receive of an older, longer message that runs into page 2.
    queue_long(out, send, 9)?;
    let at = abase + 2 * P - 64;
    // SAFETY: as above; the first 32 bytes (resident, page 1) are the message sent.
    unsafe {
        (at as *mut [u8; HEADER_SIZE]).write_volatile(
            MsgHeader {
                bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
                size: HEADER_SIZE as u32,
                dest: send,
                id: 11,
                ..MsgHeader::default()
            }
            .to_bytes(),
        )
    };
    let calls = ACT_CALLS.get();
    // SAFETY: as above.
    let r =
        decode_result(unsafe { msg_raw(MSG_SEND | MSG_RECEIVE | MSG_BUF, own, FOREVER, at, 256) });
    check!(
        r.is_ok() && long_at(at, 9) && ACT_CALLS.get() == calls + 1,
        "the receive after a call's own send, into an activation pager's page not there, carries the request into the pager and receives the older message ({r:?}, {} calls)",
        ACT_CALLS.get() - calls
    );
    // The send was made once: the message sent is the only one left.
    must("receive", out.msg(MSG_RECEIVE, own, FOREVER))?;
    let sent = out.header().id;
    let more = out.msg(MSG_RECEIVE, own, 0);
    check!(
        sent == 11 && more.is_err(),
        "the call's send was made once: its message follows, and nothing else ({sent}, {more:?})"
    );
    let _ = cap_drop(send);
    let _ = cap_drop(own);
    Ok(())
}

/// Where the object is mapped; whether the pager's port is gone.
static WORK_BASE: AtomicU64 = AtomicU64::new(0);
static DEAD: AtomicU64 = AtomicU64::new(0);

/// The worker: alerts on, then at each go reads `WORK_ADDR`.
fn worker(_: u64) {
    let _ = baton_rt::migrate::alert_enable(true);
    let mut round = 0;
    while GO.wait_for(round + 1, 30_000_000_000).is_ok() {
        round += 1;
        let addr = WORK_ADDR.load(Ordering::SeqCst) as *const u64;
        // SAFETY: a page of the test's mapping; a fault goes to the pager or the handler.
        WORK_READ.store(unsafe { addr.read_volatile() }, Ordering::SeqCst);
        DONE.increment();
    }
}

/// Has the worker read `addr`, without waiting.
fn go(addr: u64) -> u32 {
    WORK_ADDR.store(addr, Ordering::SeqCst);
    let done = DONE.get();
    GO.increment();
    done
}

fn wait_done(done: u32) -> Result<(), Failed> {
    must(
        "the worker",
        DONE.wait_for(done + 1, 30_000_000_000).map(|_| ()),
    )
}

fn read(addr: u64) -> u64 {
    // SAFETY: the callers pass mapped memory of this test that no reference covers.
    unsafe { (addr as *const u64).read_volatile() }
}

fn write(addr: u64, v: u64) {
    // SAFETY: as in `read`, writable.
    unsafe { (addr as *mut u64).write_volatile(v) }
}

/// Maps the whole object `name` read-write, shared, anywhere.
fn map(name: u64, len: u64) -> Result<u64, Error> {
    let flags = baton_abi::memobj::map_flags(PROT_RW, PROT_RW, false, baton_abi::vm::INHERIT_SHARE);
    baton_rt::memobj::map(name, len, 0, flags)
}

/// Whether thread `t` of this task is blocked waiting for a pager (the host listing).
fn blocked_in_page_in(t: u64) -> bool {
    let host = baton_rt::start::host_priv();
    baton_rt::host::threads(host, TASK.load(Ordering::SeqCst))
        .map(|ts| ts.iter().any(|r| r.id == t && r.blocked == BLOCKED_PAGE_IN))
        .unwrap_or(false)
}

/// What `read_keeping_xmm` puts in `xmm5` before its load.
const XMM_MARK: u64 = 0x1234_5678_9abc_def0;

/// Loads the word at `addr` with [`XMM_MARK`] in `xmm5`; the word, and `xmm5` after.
fn read_keeping_xmm(addr: u64) -> (u64, u64) {
    let (v, x): (u64, u64);
    // SAFETY: `addr` is mapped memory of this test (a fault on it goes to the pager); the
    // block uses only the registers it names.
    unsafe {
        core::arch::asm!(
            "movq xmm5, {m}",
            "mov {v}, qword ptr [{a}]",
            "movq {x}, xmm5",
            m = in(reg) XMM_MARK,
            a = in(reg) addr,
            v = out(reg) v,
            x = out(reg) x,
            out("xmm5") _,
        );
    }
    (v, x)
}

fn run() -> Result<(), Failed> {
    let port = must("pager port", port_allocate(0))?;
    PAGER_PORT.store(port, Ordering::SeqCst);
    let exc = must("exception port", port_allocate(0))?;
    EXC_PORT.store(exc, Ordering::SeqCst);
    must("set the exception port", exception_port_set(0, exc))?;

    // Errors first: nothing is made.
    check!(
        pager::create(port, 0, COOKIE) == Err(Error::InvalidArgument)
            && pager::create(port, P + 1, COOKIE) == Err(Error::InvalidArgument)
            && pager::create(0xdead_beef, P, COOKIE) == Err(Error::InvalidName)
            && pager::create(port, 1 << 40, COOKIE) == Err(Error::TooLarge),
        "memobj_pager refuses an empty or unaligned size, a bad port name and a huge size"
    );
    for f in [pager_thread as fn(u64), handler] {
        let stack = STACKS.take().ok_or(Failed)?;
        must("spawn", spawn(stack, f, 0))?;
    }
    let stack = STACKS.take().ok_or(Failed)?;
    WORKER.store(
        must("spawn the worker", spawn(stack, worker, 0))?,
        Ordering::SeqCst,
    );
    must(
        "threads ready",
        READY.wait_for(2, 10_000_000_000).map(|_| ()),
    )?;
    let mut out = must("an IPC buffer", IpcBuffer::new())?;
    let object = must("memobj_pager", pager::create(port, PAGES * P, COOKIE))?;
    OBJECT.store(object, Ordering::SeqCst);
    check!(
        pager::supply(object, 0, &[0u8; 100]) == Err(Error::InvalidArgument)
            && pager::supply(object, PAGES * P, &[0u8; P as usize]) == Err(Error::InvalidArgument)
            && pager::supply(object, 1, &[0u8; P as usize]) == Err(Error::InvalidArgument)
            && pager::supply(port, 0, &[0u8; P as usize]) == Err(Error::InvalidRight)
            && pager::unavailable(object, 0, 0) == Err(Error::InvalidArgument)
            && pager::error(object, !(P - 1), P) == Err(Error::InvalidArgument),
        "supply, unavailable and error refuse partial pages, ranges outside the object and rights that are not memory objects"
    );
    // SAFETY: no mapping of the object exists yet.
    let bad_flags = unsafe { pager::flush(object, 0, P, 8) };
    check!(
        bad_flags == Err(Error::InvalidArgument),
        "flush refuses unknown flags ({bad_flags:?})"
    );

    let base = must("map the object", map(object, PAGES * P))?;
    WORK_BASE.store(base, Ordering::SeqCst);
    let s0 = must("stats", vm::stats())?;
    check!(REQUESTS.get() == 0, "mapping asks the pager for nothing");

    // On demand: each page asked once, with its number.
    let mut ok = true;
    for i in 0..8 {
        ok &= read(base + i * P) == pattern(i);
    }
    let s1 = must("stats", vm::stats())?;
    check!(ok, "eight pages read what the pager computed for them");
    check!(
        REQUESTS.get() == 8 && s1.pager_fills - s0.pager_fills == 8 && BAD.get() == 0,
        "each was asked once ({} requests, {} pager fills counted)",
        REQUESTS.get(),
        s1.pager_fills - s0.pager_fills
    );
    check!(
        read(base + 8 + 3 * P) == pager::ACCESS_READ,
        "a read fault asks for read access"
    );
    for i in 0..8 {
        ok &= read(base + i * P) == pattern(i);
    }
    check!(ok && REQUESTS.get() == 8, "reading them again asks nothing");

    // A write goes back to the pager with a flush, and comes back from it.
    write(base + 2 * P, 0x0123_4567);
    // SAFETY: no reference covers the mapping.
    let done = must("flush", unsafe {
        pager::flush(object, 2 * P, P, FLUSH_RETURN | FLUSH_DROP)
    })?;
    must(
        "the data return",
        RETURNS.wait_for(1, 10_000_000_000).map(|_| ()),
    )?;
    check!(
        done == P && RETURNED[2].load(Ordering::SeqCst) == 0x0123_4567,
        "a flush returns the written page to the pager ({done} bytes done)"
    );
    check!(
        read(base + 2 * P) == 0x0123_4567 && REQUESTS.get() == 9,
        "and drops it: the next read asks again and sees what the pager kept"
    );
    // A clean returns the page and keeps it.
    write(base + P, 0x77);
    // SAFETY: as above.
    must("clean", unsafe { pager::flush(object, P, P, FLUSH_RETURN) })?;
    must(
        "the clean's return",
        RETURNS.wait_for(2, 10_000_000_000).map(|_| ()),
    )?;
    check!(
        RETURNED[1].load(Ordering::SeqCst) == 0x77 && read(base + P) == 0x77 && REQUESTS.get() == 9,
        "a clean returns the page and keeps it resident"
    );
    // Only written pages go back: a page only read (page 0) and the page just cleaned
    // (page 1, not written since) are not returned; a page written since (page 3) is,
    // after them in the pager's queue, so once it is in nothing else came.
    write(base + 3 * P, 0x3333);
    // SAFETY: as above.
    let done = must("flush clean pages", unsafe {
        pager::flush(object, 0, 4 * P, FLUSH_RETURN)
    })?;
    must(
        "the written page's return",
        RETURNS.wait_for(3, 10_000_000_000).map(|_| ()),
    )?;
    check!(
        done == 4 * P
            && RETURNS.get() == 3
            && RETURNED[3].load(Ordering::SeqCst) == 0x3333
            && RETURNED[0].load(Ordering::SeqCst) == 0,
        "a flush returns only the pages written since they last went back ({} returns in all)",
        RETURNS.get()
    );
    // Writes fault with write access.
    write(base + 9 * P + 16, 5);
    check!(
        read(base + 9 * P + 8) == pager::ACCESS_WRITE,
        "a write fault asks for write access"
    );

    // Lock and unlock (Mach's lock request): the pager restricts access to resident
    // pages; an access the lock forbids comes back to it as an unlock request.
    let (u0, r0) = (UNLOCKS.get(), REQUESTS.get());
    let done = must("lock", pager::lock(object, 4 * P, 2 * P, PROT_READ))?;
    check!(
        done == 2 * P && read(base + 4 * P) == pattern(4) && UNLOCKS.get() == u0,
        "a page locked read-only still reads, asking nothing ({done} bytes locked)"
    );
    write(base + 4 * P + 24, 0x10c4);
    check!(
        UNLOCKS.get() == u0 + 1
            && UNLOCK_ACCESS.load(Ordering::SeqCst) == pager::ACCESS_WRITE
            && read(base + 4 * P + 24) == 0x10c4,
        "a write to it asks the pager to unlock it for writing, and is made once it has"
    );
    write(base + 4 * P + 32, 1);
    check!(
        UNLOCKS.get() == u0 + 1 && REQUESTS.get() == r0 && BAD.get() == 0,
        "unlocked, the next write asks nothing, and the page was never fetched again"
    );
    must("lock", pager::lock(object, 5 * P, P, 0))?;
    check!(
        read(base + 5 * P) == pattern(5)
            && UNLOCKS.get() == u0 + 2
            && UNLOCK_ACCESS.load(Ordering::SeqCst) == pager::ACCESS_READ,
        "a page locked against every access asks for an unlock even to be read"
    );
    // A kernel copy meets the lock as a user access does: `vm_query` writing its answer
    // into a page locked read-only asks for an unlock for writing, waits for it, and is
    // made again.
    check!(read(base + 6 * P) == pattern(6), "page 6 reads");
    must("lock", pager::lock(object, 6 * P, P, PROT_READ))?;
    let q = vm::query_raw(base, base + 6 * P + 64);
    check!(
        q.is_ok()
            && UNLOCKS.get() == u0 + 3
            && UNLOCK_ACCESS.load(Ordering::SeqCst) == pager::ACCESS_WRITE
            && read(base + 6 * P + 64) == base
            && read(base + 6 * P) == pattern(6),
        "a kernel copy into a page locked read-only asks for an unlock for writing and is made once it is unlocked ({q:?})"
    );
    check!(
        pager::lock(object, 0, P, 8) == Err(Error::InvalidArgument)
            && pager::lock(object, 1, P, PROT_READ) == Err(Error::InvalidArgument)
            && pager::lock(object, PAGES * P, P, PROT_READ) == Err(Error::InvalidArgument)
            && pager::lock(object, 0, 0, PROT_READ) == Err(Error::InvalidArgument)
            && pager::lock(port, 0, P, PROT_READ) == Err(Error::InvalidRight),
        "lock refuses unknown rights, partial pages, ranges outside the object and rights that are not memory objects"
    );

    // No data: zeros.
    MODE[10].store(ZEROS, Ordering::SeqCst);
    check!(
        read(base + 10 * P) == 0,
        "a page the pager has no data for reads as zeros"
    );

    // An error: the fault goes to the exception port with the pager class.
    MODE[11].store(FAIL, Ordering::SeqCst);
    let h0 = HANDLED.get();
    let d = go(base + 11 * P);
    wait_done(d)?;
    check!(
        HANDLED.get() == h0 + 1
            && SEEN_CLASS.load(Ordering::SeqCst) == FAULT_PAGER_ERROR
            && WORK_READ.load(Ordering::SeqCst) == 0,
        "a page the pager fails is a pager fault at the exception port (class {})",
        SEEN_CLASS.load(Ordering::SeqCst)
    );

    // The kernel's own copies: `wait` reads a pager-backed word, a receive lands in a
    // pager-backed buffer; each call is made again once the page is there.
    let r0 = REQUESTS.get();
    let w = baton_rt::sys::wait_raw(base + 12 * P, 1, 0);
    check!(
        w == Err(Error::WouldBlock) && REQUESTS.get() == r0 + 1,
        "wait on an untouched pager-backed word reads the pager's page ({w:?})"
    );
    let own = must("a port", port_allocate(0))?;
    let send = must("its send right", port_make_send(own, false))?;
    out.set_header(MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: HEADER_SIZE as u32,
        dest: send,
        id: 4242,
        ..MsgHeader::default()
    });
    must("send", out.msg(MSG_SEND, 0, FOREVER))?;
    // SAFETY: the buffer is this test's mapping of the object, which nothing references.
    let r = unsafe { msg_raw(MSG_RECEIVE | MSG_BUF, own, FOREVER, base + 13 * P, P) };
    check!(
        decode_result(r).is_ok() && read(base + 13 * P + 24) == 4242 && REQUESTS.get() == r0 + 2,
        "a receive into an untouched pager-backed buffer gets its message ({:?})",
        decode_result(r)
    );
    let _ = cap_drop(send);
    let _ = cap_drop(own);

    // A pager serving through activations: the faulting thread itself runs the pager's
    // handler (a migrating call), no message is queued, and the access is made again.
    let aport = must("activation pager port", port_allocate(0))?;
    must(
        "attach activations",
        baton_rt::migrate::attach(aport, 2, act_pager),
    )?;
    let aobj = must(
        "activation pager object",
        pager::create(aport, 8 * P, COOKIE + 1),
    )?;
    ACT_OBJECT.store(aobj, Ordering::SeqCst);
    let abase = must("map it", map(aobj, 8 * P))?;
    let (r0, m0) = (REQUESTS.get(), must("stats", baton_rt::stats())?.migrations);
    let first = read(abase + 3 * P);
    let m1 = must("stats", baton_rt::stats())?.migrations;
    check!(
        first == act_pattern(3) && ACT_CALLS.get() == 1 && REQUESTS.get() == r0 && m1 > m0,
        "a fault on an activation pager's page migrates into the pager and reads its page ({first:#x}, {} calls, {} migrations)",
        ACT_CALLS.get(),
        m1 - m0
    );
    let w = baton_rt::sys::wait_raw(abase + 5 * P, 1, 0);
    check!(
        w == Err(Error::WouldBlock)
            && ACT_CALLS.get() == 2
            && read(abase + 5 * P) == act_pattern(5),
        "a kernel copy from it migrates too and its call is made again ({w:?})"
    );
    let d = go(abase + 6 * P);
    wait_done(d)?;
    check!(
        WORK_READ.load(Ordering::SeqCst) == act_pattern(6) && ACT_CALLS.get() == 3,
        "another thread's fault does the same"
    );
    let (v, x) = read_keeping_xmm(abase + 7 * P);
    check!(
        v == act_pattern(7) && x == XMM_MARK && ACT_CALLS.get() == 4,
        "a fault served in the pager's activation leaves the faulting code's vector registers as they were ({x:#x})"
    );
    act_later_steps(&mut out, abase)?;
    // Lock and unlock through activations: an access the lock forbids sends its unlock
    // request by the faulting thread's own migration into the pager, from a user store
    // and from a kernel copy (`vm_query` writing its answer) alike.
    must("lock", pager::lock(aobj, 3 * P, P, PROT_READ))?;
    let u0 = ACT_UNLOCKS.get();
    write(abase + 3 * P + 40, 0x3e11);
    check!(
        ACT_UNLOCKS.get() == u0 + 1
            && read(abase + 3 * P + 40) == 0x3e11
            && read(abase + 3 * P) == act_pattern(3),
        "a store to a page an activation pager locked read-only migrates into it for the unlock, and is made"
    );
    must("lock", pager::lock(aobj, 5 * P, P, PROT_READ))?;
    let q = vm::query_raw(abase, abase + 5 * P + 64);
    check!(
        q.is_ok()
            && ACT_UNLOCKS.get() == u0 + 2
            && read(abase + 5 * P + 64) == abase
            && read(abase + 5 * P) == act_pattern(5),
        "a kernel copy into such a page migrates into the pager too, and its call is made again ({q:?}, {} unlocks)",
        ACT_UNLOCKS.get() - u0
    );
    // SAFETY: no reference covers the mapping.
    must("unmap it", unsafe { vm::deallocate(abase, 8 * P) })?;
    must("drop it", cap_drop(aobj))?;

    // A pager that never answers: the waiting thread is alerted out of its wait and its
    // fault goes to the exception port.
    MODE[14].store(IGNORE, Ordering::SeqCst);
    let worker = WORKER.load(Ordering::SeqCst);
    let h0 = HANDLED.get();
    let d = go(base + 14 * P);
    let mut blocked = false;
    for _ in 0..200 {
        if blocked_in_page_in(worker) {
            blocked = true;
            break;
        }
        let _ = baton_rt::sys::sleep_ns(1_000_000);
    }
    check!(
        blocked,
        "a thread waiting for the pager is listed as blocked in a page-in"
    );
    must(
        "alert",
        baton_rt::migrate::alert(baton_rt::migrate::Act::Thread(worker)),
    )?;
    wait_done(d)?;
    check!(
        HANDLED.get() == h0 + 1 && SEEN_CLASS.load(Ordering::SeqCst) == FAULT_PAGER_ERROR,
        "an alert ends the wait with a pager fault"
    );

    // The pager's port dies while a thread waits: the wait ends in an exception.
    MODE[15].store(IGNORE, Ordering::SeqCst);
    let h0 = HANDLED.get();
    let d = go(base + 15 * P);
    for _ in 0..200 {
        if blocked_in_page_in(worker) {
            break;
        }
        let _ = baton_rt::sys::sleep_ns(1_000_000);
    }
    DEAD.store(1, Ordering::SeqCst);
    must("drop the pager's port", cap_drop(port))?;
    wait_done(d)?;
    check!(
        HANDLED.get() == h0 + 1 && SEEN_CLASS.load(Ordering::SeqCst) == FAULT_PAGER_ERROR,
        "a pager whose port dies turns the waiting fault into a pager fault"
    );
    check!(
        pager::supply(object, 16 * P, &[0u8; P as usize]) == Err(Error::DeadName),
        "supplying a dead pager's object is an error"
    );
    check!(
        read(base) == pattern(0),
        "pages already resident stay readable"
    );

    // Everything goes back.
    // SAFETY: no reference covers the mapping.
    must("unmap", unsafe { vm::deallocate(base, PAGES * P) })?;
    let mapped = must("system stats", vm::system_stats())?;
    must("drop the object", cap_drop(object))?;
    must("exception port off", exception_port_set(0, 0))?;
    let sys1 = must("system stats", vm::system_stats())?;
    check!(
        sys1.objects + 1 == mapped.objects && sys1.frames_free > mapped.frames_free,
        "dropping the last right ends the object and frees its pages ({} objects before, {} after; {} free frames before, {} after)",
        mapped.objects,
        sys1.objects,
        mapped.frames_free,
        sys1.frames_free
    );
    println!(
        "pager: {} requests, {} returns",
        REQUESTS.get(),
        RETURNS.get()
    );
    Ok(())
}
