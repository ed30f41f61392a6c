//! `spinvm`: SPIN's memory interfaces and `Translation` events from user space
//! (`docs/extensions.md`, "Memory interfaces").
//!
//! - a garbage collector's write barrier as a `Translation.ProtectionFault` handler, built
//!   in (`builtin.appel.gc`: the card table in this task's memory) and in WebAssembly
//!   (`extensions/appel`'s `gc`: the card table in the module's memory): pages
//!   write-protected, each first store recorded and let through in the kernel, with no
//!   exception sent to this task's exception port;
//! - the Appel–Li handlers: `unprotect`, `appel1` (unprotect, protect the partner page),
//!   `trap` (the clock mark);
//! - SPIN's `Dirty` through `spinvm_query` and through extension-added system calls;
//! - `VirtAddr.Allocate`, `PhysAddr.Allocate` and `Translation.AddMapping` by a
//!   `PageNotPresent` handler (demand paging from physical pages);
//! - malicious handlers: an endless loop (out of fuel) and a read outside linear memory
//!   are aborted (`NOTIFY_ABORTED`), handlers that claim a resolution they did not make
//!   (nothing done, a page of the kernel's half protected, a page they do not hold mapped)
//!   are refused (`NOTIFY_REFUSED`); each fault goes on to the default and this task's
//!   exception port, whose handler thread resolves it, and the kernel keeps running;
//! - bad arguments are errors; handlers of the wrong type are refused;
//! - the kernel memory charged to the task and the kernel heap are back to their
//!   baseline after a third round;
//! - a system call an extension added that reads its caller's memory (built-in `load`)
//!   meets a page an external pager has not supplied yet: the call waits for the page and
//!   is made again, as a base call's copy is, instead of failing with `BadAddress`;
//! - a handler sees only its installer's faults: a child (`fault_null`) that faults while
//!   this task has a `BadAddress` handler installed is not seen by it, and ends as any
//!   faulting task does.
#![no_std]
#![no_main]

use baton_abi::ipc::{HEADER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_abi::spin::{EVENT_SYSCALL, NOTIFY_ABORTED};
use baton_rt::check::{finish, Failed};
use baton_rt::exception::{exception_port_set, info, set_reply, ExcReply};
use baton_rt::ipc::{msg_buf, port_allocate, port_make_send, IpcBuffer};
use baton_rt::spin::{self, Domain};
use baton_rt::spinvm::{
    self, EVENT_PAGE_NOT_PRESENT, EVENT_PROTECTION_FAULT, NOTIFY_REFUSED, STATE_MAPPED,
    STATE_PROT_SHIFT, STATE_RESIDENT,
};
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::vm::{PROT_READ, PROT_RW};
use baton_rt::{println, Error};
use core::sync::atomic::{AtomicU64, Ordering};

baton_rt::entry!(main);

const TEST: &str = "spinvm";
const PAGE: u64 = 4096;
const SOON: u64 = 5_000_000_000;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) }
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// The WebAssembly extension, built by `cargo xtask build`.
static APPEL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/extensions/wasm32-unknown-unknown/release/appel.wasm"
));

static STACKS: StackPool<2, 16384> = StackPool::new();
/// The exception port the handler thread receives on.
static EXC_PORT: AtomicU64 = AtomicU64::new(0);
/// Page faults that reached the exception port (the default's end).
static EXCEPTIONS: AtomicU64 = AtomicU64::new(0);
static HANDLER_DONE: Counter = Counter::new(0);

/// The task's user-level fault handler: a page fault gets read and write access to its
/// page back and is retried; anything else ends the task.
fn exception_handler(_: u64) {
    let port = EXC_PORT.load(Ordering::Relaxed);
    if let Ok(mut buf) = IpcBuffer::new() {
        let mut r = buf.msg(MSG_RECEIVE, port, baton_rt::FOREVER);
        while r.is_ok() {
            let reply = match info(&buf) {
                Some(e) if e.kind == 14 => {
                    EXCEPTIONS.fetch_add(1, Ordering::Relaxed);
                    // SAFETY: only the protection of this task's own page changes.
                    match unsafe {
                        baton_rt::vm::protect(e.addr & !(PAGE - 1), PAGE, PROT_RW, false)
                    } {
                        Ok(()) => ExcReply::Retry,
                        Err(_) => ExcReply::Kill,
                    }
                }
                _ => ExcReply::Kill,
            };
            r = set_reply(&mut buf, reply)
                .and_then(|()| buf.msg(MSG_SEND | MSG_RECEIVE, port, baton_rt::FOREVER));
        }
    }
    HANDLER_DONE.increment();
}

/// The external pager of `paged_argument`: its port (a receive right), the object it
/// serves now, what it is asked in each request, and the requests it answered.
static PAGER_PORT: AtomicU64 = AtomicU64::new(0);
static PAGER_OBJECT: AtomicU64 = AtomicU64::new(0);
const PAGER_COOKIE: u64 = 0x5b1c_00c1e;
static PAGER_REQUESTS: Counter = Counter::new(0);
static PAGER_DONE: Counter = Counter::new(0);

/// The word at offset 8 of page `i` of the pager's object.
const fn paged_word(i: u64) -> u64 {
    0x10ad_0000_0000 + i
}

/// The pager: supplies each page asked for, with [`paged_word`] at its offset 8, until
/// its port goes.
fn pager_thread(_: u64) {
    use baton_abi::ipc::MsgHeader;
    use baton_rt::pager::{self, Request, DATA_REQUEST};
    let port = PAGER_PORT.load(Ordering::SeqCst);
    let mut msg = [0u8; pager::RECEIVE_SIZE];
    let mut page = [0u8; PAGE as usize];
    while msg_buf(&mut msg, MSG_RECEIVE, port, baton_rt::FOREVER).is_ok() {
        let Some(h) = MsgHeader::from_bytes(&msg) else {
            continue;
        };
        let data = msg.get(HEADER_SIZE..h.size as usize).unwrap_or(&[]);
        let Some(req) = Request::from_bytes(data) else {
            continue;
        };
        if h.id != DATA_REQUEST || req.cookie != PAGER_COOKIE {
            continue;
        }
        PAGER_REQUESTS.increment();
        page[8..16].copy_from_slice(&paged_word(req.offset / PAGE).to_le_bytes());
        let _ = pager::supply(PAGER_OBJECT.load(Ordering::SeqCst), req.offset, &page);
    }
    PAGER_DONE.increment();
}

fn receive(port: u64, ns: u64) -> Result<(u64, u64), Error> {
    let mut buf = [0u8; 256];
    msg_buf(&mut buf, MSG_RECEIVE, port, ns)?;
    let h = baton_abi::ipc::MsgHeader::from_bytes(&buf).ok_or(Error::BadFormat)?;
    let word = buf
        .get(HEADER_SIZE..HEADER_SIZE + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    Ok((h.id, word))
}

fn charged() -> u64 {
    baton_rt::sys::stats().map_or(0, |s| s.kmem_charged)
}

fn frames_charged() -> u64 {
    baton_rt::sys::stats().map_or(0, |s| s.frames_charged)
}

fn heap_used() -> u64 {
    baton_rt::sys::stats().map_or(0, |s| s.heap_used)
}

fn main(_task_id: u64) -> i32 {
    finish(TEST, run())
}

fn run() -> Result<(), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    let send = must("port_make_send", port_make_send(port, false))?;
    let exc = must("port_allocate", port_allocate(0))?;
    EXC_PORT.store(exc, Ordering::Relaxed);
    let stack = must("a stack", STACKS.take().ok_or(Error::NoMemory))?;
    must("spawn", spawn(stack, exception_handler, 0))?;
    must("exception_port_set", exception_port_set(0, exc))?;
    PAGER_PORT.store(must("port_allocate", port_allocate(0))?, Ordering::SeqCst);
    let stack = must("a stack", STACKS.take().ok_or(Error::NoMemory))?;
    must("spawn", spawn(stack, pager_thread, 0))?;
    // Rounds 1 and 2 warm up what the kernel keeps once made (the events, tables grown to
    // their size: the heap settles after the second); round 3 must give back exactly what
    // it took.
    round(port, send)?;
    round(port, send)?;
    let (base, heap_base, frames_base) = (charged(), heap_used(), frames_charged());
    round(port, send)?;
    let (after, heap_after, frames_after) = (charged(), heap_used(), frames_charged());
    check!(
        frames_after == frames_base,
        "the frames charged are back to the baseline ({frames_base}, now {frames_after})"
    );
    println!(
        "kernel memory charged: {base} before, {after} after; heap in use {heap_base} before, {heap_after} after"
    );
    check!(
        after == base,
        "the charges are back to the baseline ({base}, now {after})"
    );
    check!(
        heap_after == heap_base,
        "the kernel heap is back to the baseline ({heap_base}, now {heap_after})"
    );
    isolation(port, send)?;
    must("exception_port_set", exception_port_set(0, 0))?;
    must("cap_drop", baton_rt::ipc::cap_drop(exc))?;
    let _ = HANDLER_DONE.wait_for(1, SOON);
    must(
        "cap_drop",
        baton_rt::ipc::cap_drop(PAGER_PORT.load(Ordering::SeqCst)),
    )?;
    let _ = PAGER_DONE.wait_for(1, SOON);
    Ok(())
}

fn round(port: u64, send: u64) -> Result<(), Failed> {
    let b = must("import builtin.appel", spin::import("builtin.appel"))?;
    let m = must("create appel", spin::create(APPEL))?;
    for i in [
        "baton.translation",
        "baton.virtaddr",
        "baton.physaddr",
        "baton.clock",
    ] {
        let d = must("import", spin::import(i))?;
        must("resolve", spin::resolve(d, m))?;
        must("release", spin::release(d))?;
    }
    write_barrier_builtin(b)?;
    write_barrier_wasm(m)?;
    snapshot(b)?;
    appel(b, m)?;
    dirty(b, m)?;
    paged_argument(b)?;
    demand(m)?;
    bad_arguments(b, m)?;
    malicious(m, port, send)?;
    must("release", spin::release(m))?;
    must("release", spin::release(b))?;
    Ok(())
}

/// `n` pages of fresh memory, written (resident), then made read-only.
fn protected_pages(n: u64) -> Result<u64, Failed> {
    let a = must("allocate", baton_rt::vm::allocate(None, n * PAGE, PROT_RW))?;
    for i in 0..n {
        // SAFETY: just allocated, read-write, nothing else refers to it.
        unsafe { ((a + i * PAGE) as *mut u64).write_volatile(i) };
    }
    // SAFETY: nothing else refers to the range.
    must("protect", unsafe {
        baton_rt::vm::protect(a, n * PAGE, PROT_READ, false)
    })?;
    Ok(a)
}

fn free(a: u64, n: u64) -> Result<(), Failed> {
    // SAFETY: nothing refers to the range any more.
    must("deallocate", unsafe {
        baton_rt::vm::deallocate(a, n * PAGE)
    })
}

fn store(addr: u64, v: u64) {
    // SAFETY: the callers pass pages of this task's own memory that a handler (or the
    // exception handler) makes writable.
    unsafe { (addr as *mut u64).write_volatile(v) };
}

fn load(addr: u64) -> u64 {
    // SAFETY: as `store`.
    unsafe { (addr as *const u64).read_volatile() }
}

fn prot_of(addr: u64) -> u64 {
    spinvm::query(addr).map_or(99, |s| s >> STATE_PROT_SHIFT & 7)
}

/// A handler's resolution of a write to shared memory that a copy-on-write snapshot
/// still reads: the translation may not simply be made writable (the kernel's shortcut
/// for a resolved write fault), the old contents go to the snapshot first.
fn snapshot(b: Domain) -> Result<(), Failed> {
    use baton_abi::memobj::map_flags;
    use baton_rt::memobj;
    let o = must("memobj_create", memobj::create(PAGE))?;
    let a = must(
        "vm_map shared",
        memobj::map(o, PAGE, 0, map_flags(PROT_RW, PROT_RW, false, 1)),
    )?;
    store(a, 1);
    let snap = must(
        "vm_map a snapshot",
        memobj::map(o, PAGE, 0, map_flags(PROT_RW, PROT_RW, true, 1)),
    )?;
    // The page translated again (read-only: the snapshot still needs its contents).
    check!(load(a) == 1, "the shared page reads 1");
    // SAFETY: only this test's own page.
    must("protect", unsafe {
        baton_rt::vm::protect(a, PAGE, PROT_READ, false)
    })?;
    let h = must(
        "install unprotect",
        spin::install(b, "unprotect", EVENT_PROTECTION_FAULT, 0, 0, 0),
    )?;
    store(a, 2);
    check!(
        load(a) == 2 && load(snap) == 1,
        "a resolved write to shared memory leaves the snapshot as it was ({}, {})",
        load(a),
        load(snap)
    );
    must("remove", spin::remove(h))?;
    free(snap, 1)?;
    free(a, 1)?;
    must("cap_drop", baton_rt::ipc::cap_drop(o))?;
    Ok(())
}

fn write_barrier_builtin(b: Domain) -> Result<(), Failed> {
    let pages = protected_pages(8)?;
    let cards = must("allocate", baton_rt::vm::allocate(None, PAGE, PROT_RW))?;
    store(cards, 0);
    let exc = EXCEPTIONS.load(Ordering::Relaxed);
    let h = must(
        "install gc",
        spin::install(b, "gc", EVENT_PROTECTION_FAULT, 0, cards, 0),
    )?;
    for i in [1u64, 3, 5] {
        store(pages + i * PAGE, 100 + i);
    }
    check!(
        load(cards) == 3,
        "the built-in barrier recorded 3 pages ({})",
        load(cards)
    );
    check!(
        (0..3).all(|j| load(cards + 8 + j * 8) == pages + [1, 3, 5][j as usize] * PAGE),
        "the card table names the pages written, in order"
    );
    check!(
        [1u64, 3, 5]
            .iter()
            .all(|i| load(pages + i * PAGE) == 100 + i),
        "the stores went through"
    );
    check!(
        prot_of(pages + PAGE) == PROT_RW && prot_of(pages) == PROT_READ,
        "the written pages are writable again, the others still read-only"
    );
    check!(
        EXCEPTIONS.load(Ordering::Relaxed) == exc,
        "no exception reached the exception port"
    );
    must("remove", spin::remove(h))?;
    // With the handler gone, the exception port takes the fault (the default).
    store(pages, 7);
    check!(
        EXCEPTIONS.load(Ordering::Relaxed) == exc + 1 && load(pages) == 7,
        "without a handler the fault goes to the exception port"
    );
    free(pages, 8)?;
    free(cards, 1)
}

fn write_barrier_wasm(m: Domain) -> Result<(), Failed> {
    let pages = protected_pages(8)?;
    let cards = must(
        "install cards",
        spin::install(m, "cards", EVENT_SYSCALL, 0, 0x1100, 0),
    )?;
    spin::call(0x1100, [-2i64 as u64, 0, 0, 0]);
    let exc = EXCEPTIONS.load(Ordering::Relaxed);
    let h = must(
        "install wasm gc",
        spin::install(m, "gc", EVENT_PROTECTION_FAULT, 0, 0, 0),
    )?;
    let (fast, slow) = tiers();
    for i in [0u64, 2, 7] {
        store(pages + i * PAGE, 200 + i);
    }
    let now = tiers();
    check!(
        now == (fast + 3, slow),
        "the barrier, which uses its linear memory, ran on the register-form tier ({fast}, {slow} -> {now:?})"
    );
    let n = spin::call(0x1100, [-1i64 as u64, 0, 0, 0]);
    check!(n == 3, "the WebAssembly barrier recorded 3 pages ({n})");
    check!(
        (0..3).all(|j| spin::call(0x1100, [j, 0, 0, 0]) == pages + [0, 2, 7][j as usize] * PAGE),
        "its card table names the pages written, in order"
    );
    check!(
        [0u64, 2, 7]
            .iter()
            .all(|i| load(pages + i * PAGE) == 200 + i)
            && EXCEPTIONS.load(Ordering::Relaxed) == exc,
        "the stores went through without an exception"
    );
    must("remove", spin::remove(h))?;
    must("remove", spin::remove(cards))?;
    free(pages, 8)
}

fn appel(b: Domain, m: Domain) -> Result<(), Failed> {
    for (d, what) in [(b, "built-in"), (m, "WebAssembly")] {
        let pages = protected_pages(2)?;
        // SAFETY: this task's own page.
        must("protect", unsafe {
            baton_rt::vm::protect(pages, 2 * PAGE, PROT_RW, false)
        })?;
        // SAFETY: as above.
        must("protect", unsafe {
            baton_rt::vm::protect(pages, PAGE, PROT_READ, false)
        })?;
        let h = must(
            "install appel1",
            spin::install(d, "appel1", EVENT_PROTECTION_FAULT, 0, 0, 0),
        )?;
        let (fast, slow) = tiers();
        store(pages, 1);
        check!(
            prot_of(pages) == PROT_RW && prot_of(pages + PAGE) == PROT_READ,
            "{what} appel1: the page unprotected, its partner protected"
        );
        store(pages + PAGE, 2);
        check!(
            prot_of(pages) == PROT_READ && prot_of(pages + PAGE) == PROT_RW,
            "{what} appel1: and back"
        );
        if d == m {
            let now = tiers();
            check!(
                now == (fast + 2, slow),
                "WebAssembly appel1 ran on the register-form tier ({fast}, {slow} -> {now:?})"
            );
        }
        must("remove", spin::remove(h))?;
        let _ = spinvm::mark();
        let h = must(
            "install trap",
            spin::install(d, "trap", EVENT_PROTECTION_FAULT, 0, 0, 0),
        )?;
        store(pages, 3);
        check!(
            spinvm::mark() != 0,
            "{what} trap: the handler marked the clock"
        );
        check!(spinvm::mark() == 0, "the mark is cleared once read");
        must("remove", spin::remove(h))?;
        free(pages, 2)?;
    }
    Ok(())
}

fn dirty(b: Domain, m: Domain) -> Result<(), Failed> {
    let hb = must(
        "install dirty",
        spin::install(b, "dirty", EVENT_SYSCALL, 0, 0x1101, 0),
    )?;
    let hw = must(
        "install dirty",
        spin::install(m, "dirty", EVENT_SYSCALL, 0, 0x1102, 0),
    )?;
    let a = must("allocate", baton_rt::vm::allocate(None, 2 * PAGE, PROT_RW))?;
    let s = must("query", spinvm::query(a))?;
    check!(
        s & STATE_MAPPED != 0 && s & STATE_RESIDENT == 0,
        "an untouched page is mapped, not resident ({s:#x})"
    );
    let _ = load(a);
    check!(
        !must("dirty", spinvm::dirty(a))?,
        "a page only read is clean"
    );
    check!(
        spin::call(0x1101, [a, 0, 0, 0]) == 0 && spin::call(0x1102, [a, 0, 0, 0]) == 0,
        "clean through the built-in and WebAssembly Dirty calls"
    );
    store(a, 5);
    check!(must("dirty", spinvm::dirty(a))?, "a page written is dirty");
    check!(
        spin::call(0x1101, [a, 0, 0, 0]) == 1 && spin::call(0x1102, [a, 0, 0, 0]) == 1,
        "dirty through the built-in and WebAssembly Dirty calls"
    );
    check!(
        spinvm::query(0x6100_0000_0000) == Ok(0),
        "an address no range covers has no state"
    );
    check!(
        spinvm::query(0xffff_8000_0000_0000) == Err(Error::BadAddress),
        "the kernel's half is a bad address"
    );
    free(a, 2)?;
    must("remove", spin::remove(hb))?;
    must("remove", spin::remove(hw))?;
    Ok(())
}

/// A system call an extension added whose handler reads its caller's memory (the
/// built-in `load`: the word at `a0`) meets a page of an external pager's object that is
/// not there yet: the pager is asked once, the call waits for the page and is made again
/// from the start, and answers the word, as a base call's copy does (before, the call
/// answered `BadAddress` and was not made again). Once the page is there, the call needs
/// no pager; a kernel address is still `BadAddress`.
fn paged_argument(b: Domain) -> Result<(), Failed> {
    use baton_abi::memobj::map_flags;
    const N_LOAD: u64 = 0x1103;
    let port = PAGER_PORT.load(Ordering::SeqCst);
    let object = must(
        "memobj_pager",
        baton_rt::pager::create(port, 2 * PAGE, PAGER_COOKIE),
    )?;
    PAGER_OBJECT.store(object, Ordering::SeqCst);
    let flags = map_flags(PROT_RW, PROT_RW, false, baton_abi::vm::INHERIT_SHARE);
    let base = must(
        "map the pager's object",
        baton_rt::memobj::map(object, 2 * PAGE, 0, flags),
    )?;
    let h = must(
        "install load",
        spin::install(b, "load", EVENT_SYSCALL, 0, N_LOAD, 0),
    )?;
    let before = PAGER_REQUESTS.get();
    let got = spin::call(N_LOAD, [base + PAGE + 8, 0, 0, 0]);
    let asked = PAGER_REQUESTS.get() - before;
    check!(
        got == paged_word(1) && asked == 1,
        "an extension's system call that reads a page not there yet waits for its pager and is made again ({got:#x}, {asked} requests)"
    );
    let again = spin::call(N_LOAD, [base + PAGE + 8, 0, 0, 0]);
    let asked = PAGER_REQUESTS.get() - before;
    check!(
        again == paged_word(1) && asked == 1,
        "the page there, the call reads it without its pager ({again:#x}, {asked} requests)"
    );
    let bad = spin::call(N_LOAD, [0xffff_8000_0000_0000, 0, 0, 0]);
    check!(
        bad == Error::BadAddress.to_raw(),
        "a kernel address is a bad address ({bad:#x})"
    );
    must("remove", spin::remove(h))?;
    // SAFETY: nothing refers to the mapping.
    must("deallocate", unsafe {
        baton_rt::vm::deallocate(base, 2 * PAGE)
    })?;
    must("cap_drop", baton_rt::ipc::cap_drop(object))?;
    Ok(())
}

fn demand(m: Domain) -> Result<(), Failed> {
    let hv = must(
        "install valloc",
        spin::install(m, "valloc", EVENT_SYSCALL, 0, 0x1103, 0),
    )?;
    let hp = must(
        "install pages",
        spin::install(m, "pages", EVENT_SYSCALL, 0, 0x1104, 0),
    )?;
    // (A first `vm_query` may fault in a stack page: before the baseline.)
    let _ = baton_rt::vm::query(0x6100_0000_0000);
    let base = charged();
    let frames = frames_charged();
    let a = spin::call(0x1103, [4 * PAGE, 0, 0, 0]);
    check!(
        (a as i64) > 0 && a.is_multiple_of(PAGE),
        "VirtAddr.Allocate gave a range ({a:#x})"
    );
    let h = must(
        "install demand",
        spin::install(m, "demand", EVENT_PAGE_NOT_PRESENT, 0, 0, 0),
    )?;
    store(a + PAGE, 42);
    store(a + 3 * PAGE, 43);
    check!(
        load(a + PAGE) == 42 && load(a + 3 * PAGE) == 43,
        "pages mapped by the handler from physical pages hold what was stored"
    );
    let r = must("vm_query", baton_rt::vm::query(a + PAGE))?;
    check!(
        r.start == a + PAGE && r.end == a + 2 * PAGE,
        "AddMapping made the page an entry of its own in the map ({:#x}..{:#x})",
        r.start,
        r.end
    );
    must("remove", spin::remove(h))?;
    let freed = spin::call(0x1104, [0; 4]);
    check!(freed == 2, "the handler took two physical pages ({freed})");
    check!(
        load(a + PAGE) == 42,
        "the mappings keep their pages after PhysAddr.Deallocate"
    );
    free(a, 4)?;
    let (now, frames_now) = (charged(), frames_charged());
    check!(
        now == base && frames_now == frames,
        "the physical pages went with their mappings (charges {base}, now {now}; frames {frames}, now {frames_now})"
    );
    // PhysAddr is bounded: the 257th page is refused, and all of them come back.
    let he = must(
        "install exhaust",
        spin::install(m, "exhaust", EVENT_SYSCALL, 0, 0x1107, 0),
    )?;
    let r = spin::call(0x1107, [0; 4]);
    let (n, err) = (r >> 8, r & 0xff);
    check!(
        n == baton_abi::translation::PHYS_PAGES_MAX as u64 && err == Error::NoSpace as u64,
        "PhysAddr.Allocate stops at {} pages with NoSpace (got {n} pages, error {err})",
        baton_abi::translation::PHYS_PAGES_MAX
    );
    let (now, frames_now) = (charged(), frames_charged());
    check!(
        now == base && frames_now == frames,
        "and they all came back (charges {base}, now {now}; frames {frames}, now {frames_now})"
    );
    must("remove", spin::remove(he))?;
    must("remove", spin::remove(hv))?;
    must("remove", spin::remove(hp))?;
    Ok(())
}

fn bad_arguments(b: Domain, m: Domain) -> Result<(), Failed> {
    let h = must(
        "install prot",
        spin::install(m, "prot", EVENT_SYSCALL, 0, 0x1105, 0),
    )?;
    let hb = must(
        "install protect",
        spin::install(b, "protect", EVENT_SYSCALL, 0, 0x1106, 0),
    )?;
    let a = must("allocate", baton_rt::vm::allocate(None, PAGE, PROT_RW))?;
    for n in [0x1105, 0x1106] {
        check!(
            spin::call(n, [a + 1, PAGE, PROT_READ, 0]) == Error::InvalidArgument.to_raw(),
            "an unaligned address is InvalidArgument"
        );
        check!(
            spin::call(n, [0xffff_8000_0000_0000, PAGE, PROT_READ, 0])
                == Error::BadAddress.to_raw(),
            "the kernel's half is BadAddress"
        );
        check!(
            spin::call(n, [a, PAGE, 0x40, 0]) == Error::InvalidArgument.to_raw(),
            "a protection of unknown bits is InvalidArgument"
        );
        check!(
            spin::call(n, [a, 1 << 50, PROT_READ, 0]) != 0,
            "a range past the map is an error"
        );
        check!(
            spin::call(n, [a, PAGE, PROT_READ, 0]) == 0,
            "a good protect works"
        );
    }
    free(a, 1)?;
    must("remove", spin::remove(h))?;
    must("remove", spin::remove(hb))?;
    check!(
        spin::install(m, "cards", EVENT_PROTECTION_FAULT, 0, 0, 0).err()
            == Some(Error::InvalidArgument),
        "a handler of another type is refused"
    );
    check!(
        spin::install(b, "protect", EVENT_PROTECTION_FAULT, 0, 0, 0).err()
            == Some(Error::InvalidArgument),
        "a built-in of another type is refused"
    );
    Ok(())
}

/// How many WebAssembly invocations the register-form tier and `wasmi` have run.
fn tiers() -> (u64, u64) {
    (
        spin::tier_count(baton_abi::spin::TIER_FAST).unwrap_or(u64::MAX),
        spin::tier_count(baton_abi::spin::TIER_WASMI).unwrap_or(u64::MAX),
    )
}

fn malicious(m: Domain, port: u64, send: u64) -> Result<(), Failed> {
    for (sym, note) in [
        ("spin", NOTIFY_ABORTED),
        ("wild", NOTIFY_ABORTED),
        ("spin_fast", NOTIFY_ABORTED),
        ("wild_fast", NOTIFY_ABORTED),
        ("liar", NOTIFY_REFUSED),
        ("foreign", NOTIFY_REFUSED),
        ("badpage", NOTIFY_REFUSED),
    ] {
        let pages = protected_pages(1)?;
        let exc = EXCEPTIONS.load(Ordering::Relaxed);
        let h = must(
            sym,
            spin::install(m, sym, EVENT_PROTECTION_FAULT, 0, 0, send),
        )?;
        let (fast, slow) = tiers();
        store(pages, 9);
        let (fast2, slow2) = tiers();
        // `spin` and `wild` use the stack pointer global: `wasmi` runs them.
        let want = if sym == "spin" || sym == "wild" {
            (fast, slow + 1)
        } else {
            (fast + 1, slow)
        };
        check!(
            (fast2, slow2) == want,
            "{sym}: ran on the expected tier (fast, wasmi: {fast}, {slow} -> {fast2}, {slow2})"
        );
        check!(
            load(pages) == 9 && EXCEPTIONS.load(Ordering::Relaxed) == exc + 1,
            "{sym}: the fault went on to the default and the exception port"
        );
        let got = receive(port, SOON);
        check!(
            got == Ok((note, h.id)),
            "{sym}: the installer was told ({got:?})"
        );
        let removed = spin::remove(h);
        if note == NOTIFY_ABORTED {
            check!(
                removed == Err(Error::NotFound),
                "{sym}: the aborted handler was removed"
            );
        } else {
            check!(
                removed.is_ok(),
                "{sym}: a refused handler stays until removed"
            );
        }
        free(pages, 1)?;
    }
    Ok(())
}

/// A `BadAddress` handler that claims every fault (`liar`, which would be refused and
/// reported) does not see a child's fault: the child (`fault_null`, which reads address 0)
/// is killed as usual, and no notification comes.
fn isolation(port: u64, send: u64) -> Result<(), Failed> {
    use baton_abi::translation::EVENT_BAD_ADDRESS;
    let m = must("create appel", spin::create(APPEL))?;
    for i in [
        "baton.translation",
        "baton.virtaddr",
        "baton.physaddr",
        "baton.clock",
    ] {
        let d = must("import", spin::import(i))?;
        must("resolve", spin::resolve(d, m))?;
        must("release", spin::release(d))?;
    }
    let h = must(
        "install liar",
        spin::install(m, "liar", EVENT_BAD_ADDRESS, 0, 0, send),
    )?;
    let end = must("port_allocate", port_allocate(0))?;
    must(
        "port_notify",
        baton_rt::ipc::port_notify(end, baton_abi::ipc::NOTIFY_KIND_NO_SENDERS, end),
    )?;
    must(
        "spawn fault_null",
        baton_rt::sys::spawn_with("fault_null", end),
    )?;
    check!(
        receive(end, SOON).map(|r| r.0) == Ok(baton_abi::ipc::NOTIFY_NO_SENDERS),
        "the child faulted and ended"
    );
    let got = receive(port, 200_000_000);
    check!(
        got == Err(Error::TimedOut),
        "the handler never saw the child's fault ({got:?})"
    );
    must("remove", spin::remove(h))?;
    must("cap_drop", baton_rt::ipc::cap_drop(end))?;
    must("release", spin::release(m))
}
