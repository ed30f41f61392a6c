//! `reclaim`: SPIN's `PhysAddr.Reclaim` from user space (`docs/extensions.md`,
//! "PhysAddr.Reclaim"), under memory pressure: user memory limited at boot
//! (`pageable=`), the disk driver and the default pager started on the disk's swap area,
//! this task's own memory wired, and two regions of its own left pageable: a "hot" page
//! `H`, written once and then left alone, and a region `P` half again as large as the
//! limit, written from one end to the other over and over (a sequential scan, the case
//! where the clock takes exactly the wrong pages).
//!
//! - Without a handler (the control) the clock takes `H` (it is not referenced) within a
//!   few passes.
//! - With a handler that protects `H` by nominating, in its place, the page of `P` the
//!   scan wrote last (most-recently-used replacement for the scan), built in
//!   (`builtin.physaddr.mru`, its ranges in this task's memory) and in WebAssembly
//!   (`extensions/appel`'s `mru`, told its ranges by system calls the module adds): after
//!   as many passes again `H` is still resident (it was never paged out: nothing else
//!   brings it back), the kernel took nominations, and pages of `P` went out instead.
//! - Hostile handlers change nothing and the kernel goes on: nominations of a wired page,
//!   of a page of memory another task may map (a memory object's), of the kernel's half,
//!   of an unaligned or unmapped address (built in), of garbage (WebAssembly) are ignored
//!   and counted, and `H` goes as in the control; a handler that tries to change a
//!   protection while replacement runs is answered `Denied`; a handler that loops for
//!   ever (out of fuel) or reads outside its memory (a trap) is aborted, removed, and its
//!   installer told (`NOTIFY_ABORTED`).
//! - Two rounds: the second leaves the kernel's heap, objects and the extension charges
//!   where the first did; and every page-out replacement made was queued to the default
//!   pager (replacement does not strip pages it cannot send).
#![no_std]
#![no_main]

use baton_abi::ipc::{MsgHeader, HEADER_SIZE, NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME};
use baton_abi::spin::{EVENT_SYSCALL, NOTIFY_ABORTED};
use baton_abi::translation::{
    EVENT_RECLAIM, RECLAIM_ASKED, RECLAIM_IGNORED, RECLAIM_TAKEN, STATE_RESIDENT,
};
use baton_rt::check::Failed;
use baton_rt::ipc::IpcBuffer;
use baton_rt::ipc::{cap_drop, msg_buf, port_allocate, port_make_send, port_notify, MSG_RECEIVE};
use baton_rt::spin::{self, Domain};
use baton_rt::vm::PROT_RW;
use baton_rt::{println, spinvm, vm, Error};
use core::sync::atomic::{AtomicU64, Ordering};

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../swap_proto.rs"]
mod swap_proto;

baton_rt::entry!(main);

const TEST: &str = "reclaim";
const PAGE: u64 = 4096;
/// Most passes over `P` a case may take.
const PASSES: u32 = 4;
/// Extension system calls of the WebAssembly module.
const KEEP: u64 = 0x1500;
const SCANNED: u64 = 0x1501;
const LAST: u64 = 0x1502;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// The WebAssembly extension, built by `cargo xtask build`.
static APPEL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/extensions/wasm32-unknown-unknown/release/appel.wasm"
));

/// `builtin.physaddr.mru`'s closure: `[hot, hot_len, scan, scan_len, pos]` (wired with
/// the rest of this task's data).
static MRU: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
/// `builtin.physaddr.table`'s table: a count, then the addresses it nominates.
static TABLE: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// Wires every range of this task (at most 16 MiB each), so that only `H` and `P` are
/// its pages replacement may take.
fn wire_everything() -> Result<(), Failed> {
    let mut addr = 0;
    while let Ok(r) = vm::query(addr) {
        if r.wired == 0 && r.end - r.start <= 16 << 20 {
            must("wire", vm::wire(r.start, r.end - r.start))?;
        }
        addr = r.end;
    }
    Ok(())
}

/// Waits until the task whose port is `task` has ended, then releases the name.
fn wait_end(task: u64, notify: u64) -> Result<(), Failed> {
    match port_notify(task, NOTIFY_KIND_DEAD_NAME, notify) {
        Ok(()) => {
            let mut buf = [0u8; 64];
            loop {
                must(
                    "wait for the end",
                    msg_buf(&mut buf, MSG_RECEIVE, notify, 120_000_000_000),
                )?;
                let h = MsgHeader::from_bytes(&buf).ok_or(Failed)?;
                let word = buf
                    .get(HEADER_SIZE..HEADER_SIZE + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes);
                if h.id == NOTIFY_DEAD_NAME && word == task {
                    break;
                }
            }
        }
        Err(Error::DeadName) => {}
        Err(e) => return must("port_notify", Err(e)),
    }
    must("release the task's name", cap_drop(task))
}

/// A notification on `port` within `ns`: (id, word).
fn receive(port: u64, ns: u64) -> Result<(u64, u64), Error> {
    let mut buf = [0u8; 256];
    msg_buf(&mut buf, MSG_RECEIVE, port, ns)?;
    let h = MsgHeader::from_bytes(&buf).ok_or(Error::BadFormat)?;
    let word = buf
        .get(HEADER_SIZE..HEADER_SIZE + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    Ok((h.id, word))
}

fn run() -> Result<(), Failed> {
    let host = baton_rt::start::host_priv();
    wire_everything()?;
    let notify = must("port", port_allocate(0))?;
    let mut buf = must("IPC buffer", IpcBuffer::new())?;
    let (driver_id, driver) = must("start blk", blk_client::start_driver(&mut buf, host))?;
    let driver_task = must(
        "blk's task port",
        baton_rt::host::task_port(host, driver_id),
    )?;
    let pager = must(
        "start dpager",
        swap_proto::start_pager(&mut buf, host, driver, &["dpager"]),
    )?;
    must("drop the driver's port", cap_drop(driver))?;
    let mut waited = 0;
    while must("paging stats", baton_rt::paging::system_stats())?.store_slots == 0 {
        check!(waited < 1000, "the default pager registers");
        let _ = baton_rt::sleep_ns(10_000_000);
        waited += 1;
    }
    let limit = must("paging stats", baton_rt::paging::system_stats())?.pageable_limit;
    println!("reclaim: user memory limited to {limit} frames");
    let unsent0 = must("paging stats", baton_rt::paging::system_stats())?.unsent;
    let first = round(limit)?;
    let second = round(limit)?;
    // Replacement reclaims only when the default pager's queue can take a whole batch: a
    // page-out it could not queue would have stripped a page's translations for nothing
    // (while a fault waited for the pager, every retry used to strip another batch, and
    // the handlers' recent pages with it).
    let unsent = must("paging stats", baton_rt::paging::system_stats())?.unsent - unsent0;
    check!(
        unsent == 0,
        "every page-out replacement made was queued to the default pager ({unsent} not)"
    );
    check!(
        first == second,
        "a second round leaves the kernel's heap, objects and extension charges as the first did ({first:?} -> {second:?})"
    );
    must("terminate dpager", baton_rt::task::terminate(pager))?;
    wait_end(pager, notify)?;
    wait_end(driver_task, notify)?;
    for _ in 0..500 {
        if baton_rt::memobj::dma_quarantined(host).is_ok_and(|n| n > 0) {
            break;
        }
        let _ = baton_rt::sleep_ns(10_000_000);
    }
    let _ = baton_rt::memobj::dma_quarantine_release(host);
    must("drop the port", cap_drop(notify))
}

/// The kernel's heap in use, objects, and this task's kernel-memory charge, once they
/// have settled: page-outs of the round's last pages may still be on their way to the
/// default pager (each message a page of kernel heap) when the round ends, and a busy
/// machine's pager takes a while to drain them. Eleven readings 20 ms apart must agree
/// (at most 10 s).
fn counts() -> Result<(u64, u64, u64), Failed> {
    let read = || -> Result<(u64, u64, u64), Failed> {
        let s = must("stats", baton_rt::stats())?;
        let v = must("vm stats", vm::system_stats())?;
        let mine = must("sys stats", baton_rt::sys::stats())?;
        Ok((s.heap_used, v.objects, mine.kmem_charged))
    };
    let mut last = read()?;
    let mut same = 0;
    for _ in 0..500 {
        let _ = baton_rt::sleep_ns(20_000_000);
        let now = read()?;
        same = if now == last { same + 1 } else { 0 };
        if same == 10 {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// The regions of one case: `H` (one page) and `P` (`pages` pages), both written once.
struct Regions {
    hot: u64,
    scan: u64,
    pages: u64,
}

impl Regions {
    fn new(limit: u64) -> Result<Regions, Failed> {
        let pages = limit + limit / 2;
        let hot = must("allocate H", vm::allocate(None, PAGE, PROT_RW))?;
        let scan = must("allocate P", vm::allocate(None, pages * PAGE, PROT_RW))?;
        store(hot, 0x4807);
        Ok(Regions { hot, scan, pages })
    }

    /// Writes every page of `P` once, in order, telling `tell` the index of each page
    /// written.
    fn pass(&self, round: u64, tell: &mut impl FnMut(u64)) {
        for i in 0..self.pages {
            store(self.scan + i * PAGE, round << 32 | i);
            tell(i);
        }
    }

    fn hot_resident(&self) -> bool {
        spinvm::query(self.hot).is_ok_and(|s| s & STATE_RESIDENT != 0)
    }

    /// Pages of `P` not resident now.
    fn scan_out(&self) -> u64 {
        (0..self.pages)
            .filter(|i| spinvm::query(self.scan + i * PAGE).is_ok_and(|s| s & STATE_RESIDENT == 0))
            .count() as u64
    }

    /// Passes over `P` until `H` is out (at most [`PASSES`]); how many it took (`None`:
    /// `H` stayed).
    fn until_hot_out(&self, tell: &mut impl FnMut(u64)) -> Option<u32> {
        for n in 1..=PASSES {
            self.pass(u64::from(n), tell);
            if !self.hot_resident() {
                return Some(n);
            }
        }
        None
    }

    /// Checks `H` and the last pass's pages hold what was written (paging them in), and
    /// frees both regions.
    fn finish(self, what: &str, last: u64) -> Result<(), Failed> {
        check!(
            load(self.hot) == 0x4807,
            "{what}: the hot page holds what was written"
        );
        let wrong = (0..self.pages)
            .filter(|i| load(self.scan + i * PAGE) != last << 32 | i)
            .count();
        check!(
            wrong == 0,
            "{what}: every page of the scan holds what was written ({wrong} wrong)"
        );
        // SAFETY: nothing refers to the regions any more.
        must("deallocate", unsafe { vm::deallocate(self.hot, PAGE) })?;
        // SAFETY: as above.
        must("deallocate", unsafe {
            vm::deallocate(self.scan, self.pages * PAGE)
        })
    }
}

fn store(addr: u64, v: u64) {
    // SAFETY: the callers pass pages of this task's own read-write regions.
    unsafe { (addr as *mut u64).write_volatile(v) };
}

fn load(addr: u64) -> u64 {
    // SAFETY: as `store`.
    unsafe { (addr as *const u64).read_volatile() }
}

fn counted(which: u64) -> Result<u64, Failed> {
    must("spin_reclaim", spin::reclaim_count(which))
}

/// One round of every case; the counts after it.
fn round(limit: u64) -> Result<(u64, u64, u64), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    let send = must("port_make_send", port_make_send(port, false))?;
    let b = must("import builtin.physaddr", spin::import("builtin.physaddr"))?;
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
    let sys: [spin::Handler; 3] = [
        must(
            "install keep",
            spin::install(m, "keep", EVENT_SYSCALL, 0, KEEP, 0),
        )?,
        must(
            "install scanned",
            spin::install(m, "scanned", EVENT_SYSCALL, 0, SCANNED, 0),
        )?,
        must(
            "install last",
            spin::install(m, "last", EVENT_SYSCALL, 0, LAST, 0),
        )?,
    ];
    control(limit)?;
    protect_builtin(limit, b)?;
    protect_wasm(limit, m)?;
    hostile_builtin(limit, b)?;
    hostile_wasm(limit, m, port, send)?;
    refused(b, m)?;
    for h in sys {
        must("remove", spin::remove(h))?;
    }
    must("release", spin::release(m))?;
    must("release", spin::release(b))?;
    must("drop", cap_drop(send))?;
    must("drop", cap_drop(port))?;
    counts()
}

/// No handler: the clock takes `H`.
fn control(limit: u64) -> Result<(), Failed> {
    let r = Regions::new(limit)?;
    let n = r.until_hot_out(&mut |_| {});
    check!(
        n.is_some(),
        "control: without a handler the clock takes the hot page within {PASSES} passes"
    );
    println!(
        "reclaim: control: the hot page went in pass {}",
        n.unwrap_or(0)
    );
    let last = u64::from(n.unwrap_or(PASSES));
    r.finish("control", last)
}

/// `PASSES` passes with a protecting handler installed: `H` stays, nominations were
/// taken, and pages of `P` went out.
fn protected(what: &str, r: &Regions, tell: &mut impl FnMut(u64)) -> Result<(), Failed> {
    let (asked0, taken0, ignored0) = (
        counted(RECLAIM_ASKED)?,
        counted(RECLAIM_TAKEN)?,
        counted(RECLAIM_IGNORED)?,
    );
    let outs0 = must("paging stats", baton_rt::paging::stats())?.pageouts;
    for n in 1..=PASSES {
        r.pass(u64::from(n), tell);
        check!(
            r.hot_resident(),
            "{what}: the hot page is still resident after pass {n}"
        );
    }
    let (asked, taken, ign) = (
        counted(RECLAIM_ASKED)? - asked0,
        counted(RECLAIM_TAKEN)? - taken0,
        counted(RECLAIM_IGNORED)? - ignored0,
    );
    let outs = must("paging stats", baton_rt::paging::stats())?.pageouts - outs0;
    let out_now = r.scan_out();
    println!(
        "reclaim: {what}: asked {asked} times, {taken} nominations taken, {ign} ignored, {outs} pages of this task paged out, {out_now} of the scan out now"
    );
    check!(asked > 0, "{what}: the handler was asked");
    check!(
        taken > 0,
        "{what}: nominations were taken instead of the hot page"
    );
    check!(
        outs > 0 && out_now > 0,
        "{what}: pages of the scan were paged out in the hot page's place"
    );
    Ok(())
}

fn protect_builtin(limit: u64, b: Domain) -> Result<(), Failed> {
    let r = Regions::new(limit)?;
    for (slot, v) in MRU.iter().zip([r.hot, PAGE, r.scan, r.pages * PAGE, 0]) {
        slot.store(v, Ordering::Relaxed);
    }
    let closure = MRU.as_ptr() as u64;
    let h = must(
        "install builtin mru",
        spin::install(b, "mru", EVENT_RECLAIM, 0, closure, 0),
    )?;
    protected("built-in mru", &r, &mut |i| {
        MRU[4].store(i, Ordering::Relaxed)
    })?;
    must("remove", spin::remove(h))?;
    r.finish("built-in mru", u64::from(PASSES))
}

fn protect_wasm(limit: u64, m: Domain) -> Result<(), Failed> {
    let r = Regions::new(limit)?;
    spin::call(KEEP, [r.hot, PAGE, 0, 0]);
    let (scan, len) = (r.scan, r.pages * PAGE);
    spin::call(SCANNED, [scan, len, 0, 0]);
    let h = must(
        "install wasm mru",
        spin::install(m, "mru", EVENT_RECLAIM, 0, 0, 0),
    )?;
    protected("WebAssembly mru", &r, &mut |i| {
        spin::call(SCANNED, [scan, len, i, 0]);
    })?;
    must("remove", spin::remove(h))?;
    r.finish("WebAssembly mru", u64::from(PASSES))
}

/// Passes with a handler whose nominations must all be ignored: `H` goes as without one.
fn ignored(what: &str, r: &Regions) -> Result<u32, Failed> {
    let (taken0, ignored0) = (counted(RECLAIM_TAKEN)?, counted(RECLAIM_IGNORED)?);
    let n = r.until_hot_out(&mut |_| {});
    let (taken, ign) = (
        counted(RECLAIM_TAKEN)? - taken0,
        counted(RECLAIM_IGNORED)? - ignored0,
    );
    println!("reclaim: {what}: {ign} nominations ignored, {taken} taken");
    check!(taken == 0, "{what}: no nomination was taken");
    check!(ign > 0, "{what}: the nominations were ignored");
    check!(
        n.is_some(),
        "{what}: the clock's choice stood: the hot page went within {PASSES} passes"
    );
    Ok(n.unwrap_or(PASSES))
}

/// Built-in `table` nominating, by the candidate's page number, a wired page, a page of a
/// memory object's mapping (memory other tasks may map), the kernel's half, an unaligned
/// address and an unmapped one.
fn hostile_builtin(limit: u64, b: Domain) -> Result<(), Failed> {
    use baton_abi::memobj::map_flags;
    let o = must("memobj_create", baton_rt::memobj::create(PAGE))?;
    let shared = must(
        "vm_map",
        baton_rt::memobj::map(o, PAGE, 0, map_flags(PROT_RW, PROT_RW, false, 1)),
    )?;
    store(shared, 5);
    let r = Regions::new(limit)?;
    let wired = MRU.as_ptr() as u64 & !(PAGE - 1);
    let table = [
        5,
        wired,
        shared,
        0xffff_8000_0000_0000,
        r.scan + 8,
        r.scan + (r.pages + 64) * PAGE,
    ];
    for (slot, v) in TABLE.iter().zip(table) {
        slot.store(v, Ordering::Relaxed);
    }
    let h = must(
        "install builtin table",
        spin::install(b, "table", EVENT_RECLAIM, 0, TABLE.as_ptr() as u64, 0),
    )?;
    let n = ignored(
        "built-in table (wired, shared, kernel, unaligned, unmapped)",
        &r,
    )?;
    must("remove", spin::remove(h))?;
    check!(load(shared) == 5, "the shared page is as it was");
    r.finish("built-in table", u64::from(n))?;
    // SAFETY: nothing refers to the mapping any more.
    must("deallocate", unsafe { vm::deallocate(shared, PAGE) })?;
    must("drop", cap_drop(o))
}

fn hostile_wasm(limit: u64, m: Domain, port: u64, send: u64) -> Result<(), Failed> {
    // Garbage: ignored.
    let r = Regions::new(limit)?;
    let h = must(
        "install reclaim_garbage",
        spin::install(m, "reclaim_garbage", EVENT_RECLAIM, 0, 0, 0),
    )?;
    let n = ignored("WebAssembly garbage", &r)?;
    must("remove", spin::remove(h))?;
    r.finish("WebAssembly garbage", u64::from(n))?;
    // A change of protection while replacement runs: denied; the candidate goes.
    let r = Regions::new(limit)?;
    let h = must(
        "install reclaim_change",
        spin::install(m, "reclaim_change", EVENT_RECLAIM, 0, 0, 0),
    )?;
    let n = r.until_hot_out(&mut |_| {});
    must("remove", spin::remove(h))?;
    let last = spin::call(LAST, [0; 4]);
    check!(
        last == Error::Denied.to_raw(),
        "a handler's protection change while replacement runs is Denied ({last:#x})"
    );
    check!(n.is_some(), "reclaim_change: the hot page went");
    check!(
        spinvm::query(r.hot).is_ok_and(|s| s >> baton_abi::translation::STATE_PROT_SHIFT & 7 == 3),
        "reclaim_change: the hot page is still read-write"
    );
    r.finish("reclaim_change", u64::from(n.unwrap_or(PASSES)))?;
    // Out of fuel, and a trap: aborted, removed, the installer told; the clock goes on.
    for sym in ["reclaim_spin", "reclaim_wild"] {
        let r = Regions::new(limit)?;
        let h = must("install", spin::install(m, sym, EVENT_RECLAIM, 0, 0, send))?;
        let n = r.until_hot_out(&mut |_| {});
        check!(n.is_some(), "{sym}: the hot page went");
        let got = receive(port, 5_000_000_000);
        check!(
            got == Ok((NOTIFY_ABORTED, h.id)),
            "{sym}: the installer is told its handler was aborted ({got:?})"
        );
        check!(
            spin::remove(h) == Err(Error::NotFound),
            "{sym}: the aborted handler was removed"
        );
        r.finish(sym, u64::from(n.unwrap_or(PASSES)))?;
    }
    Ok(())
}

/// Handlers of another type, unknown symbols, bad selectors.
fn refused(b: Domain, m: Domain) -> Result<(), Failed> {
    check!(
        spin::install(m, "unprotect", EVENT_RECLAIM, 0, 0, 0).map(|_| ())
            == Err(Error::InvalidArgument),
        "a handler of another type is refused"
    );
    check!(
        spin::install(b, "nothing", EVENT_RECLAIM, 0, 0, 0).map(|_| ()) == Err(Error::NotFound),
        "an unknown symbol is refused"
    );
    check!(
        spin::reclaim_count(3) == Err(Error::InvalidArgument),
        "spin_reclaim(3) is InvalidArgument"
    );
    Ok(())
}
