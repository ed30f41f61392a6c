//! Accent's virtual memory, booted (`docs/vm.md`): lazy allocation (no frame before the
//! first touch, shown by the fault counters and the resident counts), zero fill on first
//! read and first write, the kernel's own copies into untouched memory, deallocation
//! giving frames back, copy-on-write copies, memory fills and reclaims (the translations
//! reclaimed ahead), copy-on-write chains bounded over 1,000 generations of copies,
//! protection faults delivered to the exception port with their
//! class, wired pages, errors for bad arguments, exhaustion (`NoMemory`) and recovery.
//! Every check runs in two rounds, and the second must leave the kernel's heap, objects
//! and free frames where the first did. It then starts `vm_victim`, which writes to a
//! read-only page with no handler and must be killed with a write error.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};

use baton_abi::decode_result;
use baton_abi::exception::ExcReply;
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_BUF};
use baton_abi::vm::{
    FAULT_ADDRESS_ERROR, FAULT_CLASS_SHIFT, FAULT_WRITE_ERROR, OBJECT_ANONYMOUS, PROT_READ,
};
use baton_rt::check::Failed;
use baton_rt::exception::{exception_port_set, info, set_reply};
use baton_rt::ipc::{
    cap_drop, msg_raw, port_allocate, port_make_send, IpcBuffer, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::vm::{self, PROT_RW};
use baton_rt::{println, Error, FOREVER};

baton_rt::entry!(main);

const TEST: &str = "vm";
const P: u64 = 4096;
/// Where the fixed-address checks put their memory.
const FIXED: u64 = 0x5100_0000_0000;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

static STACKS: StackPool<4, 16384> = StackPool::new();
/// The exception port the handler receives on.
static EXC_PORT: AtomicU64 = AtomicU64::new(0);
/// What the handler saw of the last fault: the class, the address.
static SEEN_CLASS: AtomicU64 = AtomicU64::new(0);
static SEEN_ADDR: AtomicU64 = AtomicU64::new(0);
/// Faults the handler answered; the worker's go signals and completions.
static HANDLED: Counter = Counter::new(0);
static GO: Counter = Counter::new(0);
static DONE: Counter = Counter::new(0);
/// The handler has its IPC buffer (so the task's map holds still during the checks).
static READY: Counter = Counter::new(0);
/// What the worker does at each go: the address, and whether it stores.
static WORK_ADDR: AtomicU64 = AtomicU64::new(0);
static WORK_STORE: AtomicU64 = AtomicU64::new(0);
static WORK_READ: AtomicU64 = AtomicU64::new(0);

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// The handler: for each page fault, notes its class and address, gives the page read
/// and write access back (allocating it when nothing is there) and retries.
fn handler(_: u64) {
    let port = EXC_PORT.load(Ordering::Relaxed);
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
        let page = e.addr & !(P - 1);
        SEEN_CLASS.store(e.error >> FAULT_CLASS_SHIFT, Ordering::SeqCst);
        SEEN_ADDR.store(e.addr, Ordering::SeqCst);
        let fixed = if e.kind != 14 {
            false
        } else if e.error >> FAULT_CLASS_SHIFT == FAULT_ADDRESS_ERROR {
            vm::allocate(Some(page), P, PROT_RW).is_ok()
        } else {
            // SAFETY: the page is the test's own scratch memory, no reference into it.
            unsafe { vm::protect(page, P, PROT_RW, false) }.is_ok()
        };
        let reply = if fixed {
            ExcReply::Retry
        } else {
            ExcReply::Kill
        };
        HANDLED.increment();
        if set_reply(&mut buf, reply).is_err() {
            break;
        }
        r = buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER);
    }
}

/// The worker: at each go, loads or stores at `WORK_ADDR`.
fn worker(_: u64) {
    let mut round = 0;
    while GO.wait_for(round + 1, 10_000_000_000).is_ok() {
        round += 1;
        let addr = WORK_ADDR.load(Ordering::SeqCst) as *mut u64;
        if WORK_STORE.load(Ordering::SeqCst) != 0 {
            // SAFETY: a page of the test's scratch memory; a fault goes to the handler.
            unsafe { addr.write_volatile(0x5eed) };
        } else {
            // SAFETY: as above.
            WORK_READ.store(unsafe { addr.read_volatile() }, Ordering::SeqCst);
        }
        DONE.increment();
    }
}

/// Has the worker access `addr` (a store with `store`) and waits until it is done.
fn work(addr: u64, store: bool) -> Result<(), Failed> {
    WORK_ADDR.store(addr, Ordering::SeqCst);
    WORK_STORE.store(u64::from(store), Ordering::SeqCst);
    let done = DONE.get();
    GO.increment();
    must(
        "the worker",
        DONE.wait_for(done + 1, 10_000_000_000).map(|_| ()),
    )
}

fn read(addr: u64) -> u64 {
    // SAFETY: the callers pass allocated memory of this test that no reference covers.
    unsafe { (addr as *const u64).read_volatile() }
}

fn write(addr: u64, v: u64) {
    // SAFETY: as in `read`, writable.
    unsafe { (addr as *mut u64).write_volatile(v) }
}

fn run() -> Result<(), Failed> {
    let port = must("port", port_allocate(0))?;
    EXC_PORT.store(port, Ordering::Relaxed);
    must("exception port", exception_port_set(0, port))?;
    for f in [handler as fn(u64), worker] {
        let stack = STACKS.take().ok_or(Failed)?;
        must("spawn", spawn(stack, f, 0))?;
    }
    must("the handler", READY.wait_for(1, 10_000_000_000).map(|_| ()))?;
    let mut after = [(0u64, 0u64, 0u64); 2];
    for (round, slot) in after.iter_mut().enumerate() {
        println!("vm: round {round}");
        one_round()?;
        let s = must("stats", baton_rt::stats())?;
        let v = must("vm stats", vm::system_stats())?;
        *slot = (s.heap_used, v.objects, v.frames_free);
    }
    check!(
        after[0] == after[1],
        "a second round leaves the kernel heap, objects and free frames as the first did ({:?})",
        after
    );
    // The victim: a store to read-only memory without a handler ends it.
    must("spawn vm_victim", baton_rt::spawn("vm_victim"))?;
    must("exception port off", exception_port_set(0, 0))?;
    must("drop the port", cap_drop(port))?;
    Ok(())
}

fn one_round() -> Result<(), Failed> {
    lazy()?;
    reclaim()?;
    chains()?;
    kernel_copies()?;
    faults_to_the_handler()?;
    wired()?;
    errors()?;
    exhaustion()?;
    Ok(())
}

/// Untouched memory costs no frame; the first read and the first write zero-fill.
fn lazy() -> Result<(), Failed> {
    let s0 = must("stats", vm::stats())?;
    let sys0 = must("system stats", vm::system_stats())?;
    let a = must("allocate", vm::allocate(None, 256 * P, PROT_RW))?;
    let s1 = must("stats", vm::stats())?;
    let sys1 = must("system stats", vm::system_stats())?;
    let q = must("query", vm::query(a))?;
    check!(
        q.start == a && q.end == a + 256 * P && q.prot == PROT_RW && q.object == OBJECT_ANONYMOUS && q.resident == 0,
        "an untouched allocation of 256 pages is one anonymous region with no resident page ({q:?})"
    );
    check!(
        s1.resident == s0.resident
            && s1.zero_fills == s0.zero_fills
            && sys0.frames_free.abs_diff(sys1.frames_free) < 8,
        "it costs no frame: resident {} -> {}, free frames {} -> {}",
        s0.resident,
        s1.resident,
        sys0.frames_free,
        sys1.frames_free
    );
    // (The task's counters also count the other threads' faults, on another CPU: the
    // region's own resident count is exact.)
    let first = read(a + 5 * P);
    let s2 = must("stats", vm::stats())?;
    let r2 = must("query", vm::query(a))?.resident;
    check!(
        first == 0
            && s2.zero_fills > s1.zero_fills
            && s2.read_faults > s1.read_faults
            && r2 == 1,
        "the first read of a page zero-fills it: a read fault, a zero fill, one page ({} zero fills)",
        s2.zero_fills
    );
    write(a + 9 * P + 8, 0xabcd);
    let s3 = must("stats", vm::stats())?;
    let r3 = must("query", vm::query(a))?.resident;
    check!(
        read(a + 9 * P + 8) == 0xabcd
            && read(a + 9 * P) == 0
            && s3.zero_fills > s2.zero_fills
            && s3.write_faults > s2.write_faults
            && r3 == 2,
        "the first write zero-fills its page and lands ({} write faults)",
        s3.write_faults
    );
    write(a + 5 * P, 7);
    check!(
        read(a + 5 * P) == 7 && must("query", vm::query(a))?.resident == 2,
        "a page filled by a read of writable memory takes the store in place"
    );
    for i in 0..64 {
        write(a + (100 + i) * P, i);
    }
    let touched = must("query", vm::query(a))?.resident;
    let sys2 = must("system stats", vm::system_stats())?;
    check!(
        touched == 66 && sys2.frames_free + 60 <= sys1.frames_free,
        "64 pages touched: 64 resident, about 64 frames taken ({} -> {} free)",
        sys1.frames_free,
        sys2.frames_free
    );
    // SAFETY: nothing refers to the range.
    must("deallocate", unsafe { vm::deallocate(a, 256 * P) })?;
    let s5 = must("stats", vm::stats())?;
    let sys3 = must("system stats", vm::system_stats())?;
    check!(
        // (The stack may have grown by a page meanwhile, and page tables stay.)
        s5.resident <= s0.resident + 2 && sys3.frames_free + 8 >= sys0.frames_free,
        "deallocate gives every frame back (resident {}, free frames {} -> {})",
        s5.resident,
        sys0.frames_free,
        sys3.frames_free
    );
    check!(
        vm::query(a).map(|r| r.start != a) != Ok(false),
        "and the region is gone"
    );
    Ok(())
}

/// Copy-on-write chains stay bounded (Accent's shadow objects collapse): a region copied
/// 1,000 times in a loop — each generation a `vm_copy` of the last, written, and the last
/// deallocated — never holds more than a few objects in the whole kernel, however many
/// generations came before, and the last generation's words are every generation's own.
fn chains() -> Result<(), Failed> {
    const N: u64 = 4;
    const GENERATIONS: u64 = 1000;
    let start = must("system stats", vm::system_stats())?.objects;
    let mut a = must("allocate", vm::allocate(None, N * P, PROT_RW))?;
    for i in 0..N {
        write(a + i * P, i);
    }
    let mut most = 0;
    for g in 1..=GENERATIONS {
        // SAFETY: the copy goes into new memory; no reference covers either range.
        let c = must("vm_copy", unsafe {
            vm::copy(0, a, N * P, 0, 0, vm::VM_COPY_CREATE)
        })?;
        // One page of each generation is written (a copy of its own), the rest shared.
        write(c + (g % N) * P, g);
        // SAFETY: nothing refers to the old generation any more.
        must("deallocate", unsafe { vm::deallocate(a, N * P) })?;
        a = c;
        most = most.max(must("system stats", vm::system_stats())?.objects);
    }
    let mut words = [0u64; N as usize];
    for (i, w) in words.iter_mut().enumerate() {
        *w = read(a + i as u64 * P);
    }
    // The last write to page i was by the last generation g with g % N == i.
    let expected: [u64; N as usize] = core::array::from_fn(|i| {
        (1..=GENERATIONS)
            .rev()
            .find(|g| g % N == i as u64)
            .unwrap_or(i as u64)
    });
    check!(
        words == expected,
        "after {GENERATIONS} generations of copies each page holds its last writer's word ({words:?})"
    );
    check!(
        most <= start + 4,
        "{GENERATIONS} generations of copy-on-write copies keep the kernel's objects bounded: at most {most} (from {start}), the shadow chain collapsing as each generation goes"
    );
    // SAFETY: nothing refers to the last generation.
    must("deallocate", unsafe { vm::deallocate(a, N * P) })?;
    Ok(())
}

/// Accent's copy-on-write copy, memory fill, reclaim and reclaim-ahead: 64 written (and so
/// translated) pages copied by value with `vm_copy`; the copy's first store copies its
/// page, its first load of another maps the original's; once the copy is deallocated, a
/// store to each page of the original is one reclaim for all of them (the translations
/// after the first made writable with it), no copy, and the copy's store was never seen
/// here.
fn reclaim() -> Result<(), Failed> {
    const N: u64 = 64;
    let a = must("allocate", vm::allocate(None, N * P, PROT_RW))?;
    for i in 0..N {
        write(a + i * P, i);
    }
    // SAFETY: the copy goes into new memory; no reference covers either range.
    let c = must("vm_copy", unsafe {
        vm::copy(0, a, N * P, 0, 0, vm::VM_COPY_CREATE)
    })?;
    let s0 = must("stats", vm::stats())?;
    write(c + 3 * P, 1000);
    let s1 = must("stats", vm::stats())?;
    let four = read(c + 4 * P);
    let s2 = must("stats", vm::stats())?;
    check!(
        s1.cow_copies - s0.cow_copies == 1 && s2.memory_fills - s1.memory_fills == 1,
        "the copy's first store is a copy-on-write copy, its first load of a page the \
         original holds a memory fill (copies {}, fills {})",
        s1.cow_copies - s0.cow_copies,
        s2.memory_fills - s1.memory_fills
    );
    check!(
        read(a + 3 * P) == 3 && read(c + 3 * P) == 1000 && four == 4,
        "a copy is a value: its store is its own, its other pages the original's"
    );
    // The kernel's own store into copy-on-write memory: `ipc_msg` receiving into a page
    // of the copy copies that page first, as a user store would.
    let mut out = must("ipc buffer", IpcBuffer::new())?;
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
    let s3 = must("stats", vm::stats())?;
    // SAFETY: the buffer is a page of the copy, which nothing references.
    let r = unsafe { msg_raw(MSG_RECEIVE | MSG_BUF, own, FOREVER, c + 5 * P, P) };
    let s4 = must("stats", vm::stats())?;
    check!(
        decode_result(r).is_ok()
            && read(c + 5 * P + 24) == 4242
            && read(a + 5 * P) == 5
            && s4.cow_copies - s3.cow_copies == 1,
        "a receive into a copy-on-write page copies it and lands there only ({:?}, {} copies)",
        decode_result(r),
        s4.cow_copies - s3.cow_copies
    );
    must("drop", cap_drop(send))?;
    must("drop", cap_drop(own))?;
    drop(out);
    // SAFETY: nothing refers to the copy.
    must("deallocate the copy", unsafe { vm::deallocate(c, N * P) })?;
    let s0 = must("stats", vm::stats())?;
    for i in 0..N {
        write(a + i * P, 100 + i);
    }
    let s1 = must("stats", vm::stats())?;
    let ok = (0..N).all(|i| read(a + i * P) == 100 + i);
    check!(
        ok && s1.cow_reclaims - s0.cow_reclaims == 1
            && s1.cow_copies == s0.cow_copies
            && s1.cow_reclaimed_pages - s0.cow_reclaimed_pages == N
            && s1.faults - s0.faults < 8,
        "stores to 64 pages whose copy is gone: one reclaim of all 64 pages, no copy, {} \
         faults (reclaims {}, pages {}, copies {})",
        s1.faults - s0.faults,
        s1.cow_reclaims - s0.cow_reclaims,
        s1.cow_reclaimed_pages - s0.cow_reclaimed_pages,
        s1.cow_copies - s0.cow_copies
    );
    // SAFETY: nothing refers to the range.
    must("deallocate", unsafe { vm::deallocate(a, N * P) })?;
    Ok(())
}

/// The kernel's own copies into untouched memory fault it in as a store would, and an
/// IPC buffer is made resident and wired when it is registered.
fn kernel_copies() -> Result<(), Failed> {
    let a = must("allocate", vm::allocate(None, 2 * P, PROT_RW))?;
    must(
        "query into untouched memory",
        vm::query_raw(a, a + P).map(|_| ()),
    )?;
    let q = must("query", vm::query(a))?;
    check!(
        q.resident == 1 && read(a + P) == a && read(a + P + 8) == a + 2 * P,
        "the kernel writes a query's answer into an untouched page: zero-filled first, as a store would"
    );
    // SAFETY: nothing refers to the range.
    must("deallocate", unsafe { vm::deallocate(a, 2 * P) })?;
    let mut b = must("ipc buffer", IpcBuffer::new())?;
    let page = b.bytes().as_ptr() as u64;
    let q = must("query", vm::query(page))?;
    check!(
        q.wired == 1 && q.resident == 1,
        "a registered IPC buffer is resident and wired ({} wired, {} resident)",
        q.wired,
        q.resident
    );
    check!(
        // SAFETY: the page stays (the call is refused).
        unsafe { vm::deallocate(page, P) } == Err(Error::Denied),
        "so it cannot be deallocated while registered"
    );
    drop(b);
    check!(
        vm::query(page).map(|r| r.start <= page && page < r.end) != Ok(true),
        "unregistered and unmapped, it is gone"
    );
    Ok(())
}

/// Protection and address errors go to the exception port, with their class.
fn faults_to_the_handler() -> Result<(), Failed> {
    let a = must("allocate", vm::allocate(None, 4 * P, PROT_RW))?;
    write(a, 1);
    // SAFETY: no reference into the range relies on writing it.
    must("protect", unsafe {
        vm::protect(a, 4 * P, PROT_READ, false)
    })?;
    let s0 = must("stats", vm::stats())?;
    let handled = HANDLED.get();
    work(a + 8, true)?;
    let s1 = must("stats", vm::stats())?;
    check!(
        HANDLED.get() == handled + 1
            && SEEN_CLASS.load(Ordering::SeqCst) == FAULT_WRITE_ERROR
            && SEEN_ADDR.load(Ordering::SeqCst) == a + 8
            && read(a + 8) == 0x5eed
            && s1.write_errors > s0.write_errors,
        "a store to read-only memory reaches the exception port as a write error (class {}), and retries once the handler gives write access back",
        SEEN_CLASS.load(Ordering::SeqCst)
    );
    // SAFETY: as above; nothing reads the range meanwhile but the worker.
    must("protect", unsafe { vm::protect(a, 4 * P, 0, false) })?;
    work(a + 2 * P, false)?;
    check!(
        SEEN_CLASS.load(Ordering::SeqCst) == FAULT_WRITE_ERROR
            && WORK_READ.load(Ordering::SeqCst) == 0,
        "so does a load from memory with no access (Baton's write error covers loads too)"
    );
    // SAFETY: nothing refers to the range.
    must("deallocate", unsafe { vm::deallocate(a, 4 * P) })?;
    let s2 = must("stats", vm::stats())?;
    work(FIXED + 3 * P, true)?;
    let s3 = must("stats", vm::stats())?;
    check!(
        SEEN_CLASS.load(Ordering::SeqCst) == FAULT_ADDRESS_ERROR
            && read(FIXED + 3 * P) == 0x5eed
            && s3.address_errors > s2.address_errors,
        "an access where nothing is allocated is an address error; the handler allocates the page and the store goes through"
    );
    // SAFETY: nothing refers to the page.
    must("deallocate", unsafe { vm::deallocate(FIXED + 3 * P, P) })?;
    Ok(())
}

/// Wiring makes pages resident at once and keeps them from being deallocated.
fn wired() -> Result<(), Failed> {
    let a = must("allocate", vm::allocate(None, 8 * P, PROT_RW))?;
    must("wire", vm::wire(a + 2 * P, 4 * P))?;
    let q = must("query", vm::query(a + 2 * P))?;
    check!(
        q.start == a + 2 * P && q.end == a + 6 * P && q.wired == 1 && q.resident == 4,
        "wiring 4 of 8 pages makes those 4 resident at once ({q:?})"
    );
    check!(
        // SAFETY: refused.
        unsafe { vm::deallocate(a, 8 * P) } == Err(Error::Denied),
        "a wired range cannot be deallocated"
    );
    check!(
        vm::unwire(a + 2 * P, 2 * P) == Err(Error::InvalidArgument)
            && vm::unwire(a, P) == Err(Error::InvalidArgument),
        "unwire needs exactly a range wired before"
    );
    must("wire again", vm::wire(a + 2 * P, 4 * P))?;
    must("unwire", vm::unwire(a + 2 * P, 4 * P))?;
    check!(
        must("query", vm::query(a + 2 * P))?.wired == 1,
        "wirings are counted"
    );
    must("unwire", vm::unwire(a + 2 * P, 4 * P))?;
    let q = must("query", vm::query(a))?;
    check!(
        q.start == a && q.end == a + 8 * P && q.wired == 0,
        "unwired, the range is one region again ({q:?})"
    );
    // SAFETY: nothing refers to the range.
    must("deallocate", unsafe { vm::deallocate(a, 8 * P) })?;
    Ok(())
}

/// Bad arguments get errors and change nothing.
fn errors() -> Result<(), Failed> {
    let s0 = must("stats", vm::stats())?;
    check!(
        vm::allocate(None, 0, PROT_RW) == Err(Error::InvalidArgument)
            && vm::allocate(None, P + 1, PROT_RW) == Err(Error::InvalidArgument)
            && vm::allocate(Some(FIXED + 1), P, PROT_RW) == Err(Error::InvalidArgument)
            && vm::allocate(None, P, 8) == Err(Error::InvalidArgument),
        "allocate: empty, partial page, misaligned address, unknown protection bits: InvalidArgument"
    );
    check!(
        vm::allocate(Some(0xffff_8000_0000_0000), P, PROT_RW) == Err(Error::BadAddress)
            && vm::allocate(Some(0x7fff_ffff_f000), 2 * P, PROT_RW) == Err(Error::BadAddress)
            && vm::allocate(Some(!(P - 1)), 2 * P, PROT_RW) == Err(Error::BadAddress),
        "allocate: kernel, past-the-end and wrapping ranges: BadAddress"
    );
    let a = must("allocate", vm::allocate(Some(FIXED), 4 * P, PROT_RW))?;
    check!(
        a == FIXED && vm::allocate(Some(FIXED + P), P, PROT_RW) == Err(Error::NoSpace),
        "allocate at a taken address: NoSpace"
    );
    check!(
        baton_rt::sys::mem_map(FIXED, P, true) == Err(Error::InvalidArgument),
        "mem_map over it keeps its old error (InvalidArgument)"
    );
    // SAFETY: refused or harmless (read-only then back), no reference into the range.
    unsafe {
        check!(
            vm::protect(FIXED + 8 * P, P, PROT_READ, false) == Err(Error::BadAddress)
                && vm::protect(FIXED, 8 * P, PROT_READ, false) == Err(Error::BadAddress),
            "protect of unallocated memory: BadAddress"
        );
        check!(
            vm::protect(FIXED, P, 9, false) == Err(Error::InvalidArgument)
                && vm::protect(FIXED, P, PROT_READ, false).is_ok()
                && vm::protect(FIXED, P, PROT_READ, true).is_ok()
                && vm::protect(FIXED, P, PROT_RW, false) == Err(Error::Denied),
            "protect above the maximum protection: Denied"
        );
    }
    check!(
        vm::inherit(FIXED, P, 3) == Err(Error::InvalidArgument)
            && vm::inherit(FIXED, P, vm::INHERIT_NONE).is_ok()
            && must("query", vm::query(FIXED))?.inherit == vm::INHERIT_NONE,
        "inherit: a bad value is refused, a good one recorded"
    );
    check!(
        vm::query(0x7fff_ffff_0000) == Err(Error::NotFound),
        "query above the last region: NotFound"
    );
    check!(
        vm::query_raw(FIXED, 0xffff_8000_0000_0000) == Err(Error::BadAddress)
            && vm::query_raw(FIXED, FIXED) == Err(Error::BadAddress),
        "query into a kernel address or read-only memory: BadAddress"
    );
    check!(
        vm::stats_raw(7) == Err(Error::InvalidArgument),
        "stats with an unknown scope: InvalidArgument"
    );
    check!(
        vm::wire(FIXED + 16 * P, P) == Err(Error::BadAddress)
            && vm::unwire(FIXED, P) == Err(Error::InvalidArgument),
        "wire of unallocated memory: BadAddress; unwire of memory never wired: InvalidArgument"
    );
    // SAFETY: both are refused, nothing is deallocated.
    let (kernel, nothing) = unsafe {
        (
            vm::deallocate(0xffff_8000_0000_0000, P),
            vm::deallocate(FIXED, 0),
        )
    };
    check!(
        kernel == Err(Error::BadAddress) && nothing == Err(Error::InvalidArgument),
        "deallocate of kernel memory or nothing: refused"
    );
    // SAFETY: nothing refers to the range.
    must("deallocate", unsafe { vm::deallocate(FIXED, 4 * P) })?;
    let s1 = must("stats", vm::stats())?;
    check!(
        s1.entries == s0.entries && s1.resident == s0.resident,
        "nothing is left of it"
    );
    Ok(())
}

/// Committing memory past the task's frame limit is NoMemory, and what was taken comes
/// back.
fn exhaustion() -> Result<(), Failed> {
    check!(
        vm::allocate(None, 1 << 40, PROT_RW) == Err(Error::NoMemory),
        "a terabyte at once: NoMemory"
    );
    const CHUNK: u64 = 16 << 20;
    let mut got = [0u64; 512];
    let mut n = 0;
    let e = loop {
        if n == got.len() {
            break Error::InvalidArgument;
        }
        match vm::allocate(None, CHUNK, PROT_RW) {
            Ok(a) => {
                got[n] = a;
                n += 1;
            }
            Err(e) => break e,
        }
    };
    check!(
        e == Error::NoMemory && n > 0,
        "16 MiB at a time, the task reaches its frame limit after {n} ({} MiB): NoMemory",
        n as u64 * (CHUNK >> 20)
    );
    for &a in got.iter().take(n) {
        // SAFETY: nothing refers to the range.
        must("deallocate", unsafe { vm::deallocate(a, CHUNK) })?;
    }
    let a = must("allocate after", vm::allocate(None, CHUNK, PROT_RW))?;
    write(a + CHUNK - 8, 1);
    check!(
        read(a + CHUNK - 8) == 1,
        "after deallocating, allocation works again"
    );
    // SAFETY: nothing refers to the range.
    must("deallocate", unsafe { vm::deallocate(a, CHUNK) })?;
    Ok(())
}
