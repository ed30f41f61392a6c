//! Paging to the default pager, booted (`docs/vm.md`, "Paging"): with user memory limited
//! to a few hundred frames (`pageable=`), the disk driver (`blk`) started, a default pager
//! (`dpager`) registered on the disk's swap partition, and children whose working sets
//! are several times that:
//! - every byte of a working set three times the frames survives two rounds of writes
//!   and reads, a kernel copy into a paged-out page waits for it, and the page-out and
//!   page-in counters move, per task and system-wide;
//! - a child that wants more than the frames and the store together is stopped by a
//!   no-memory fault, and the store is empty again after it;
//! - the default pager killed while a child's pages are out: the child is stopped by a
//!   pager fault when it touches one, the kernel counts the lost pages and stays well;
//! - the default pager killed while it waits for the disk with a child's page-in (the
//!   driver holds the read, `FLAG_HOLD`), and then the driver killed the same way: the
//!   child is stopped by a pager fault, the pager ends when its driver is gone;
//! - a new default pager (and a new driver) starts (restart) and paging works again;
//! - while a default pager is registered the root account's frame limit (what anonymous
//!   memory may commit) is memory plus its store, and memory alone once it is gone;
//! - bad arguments are errors; and a second round of all this leaves the kernel's heap,
//!   objects and free frames where the first did.
//!
//! This task's own memory is wired first, so that it never has pages out when its pager
//! is killed.
#![no_std]
#![no_main]

extern crate alloc;

use baton_rt::check::Failed;
use baton_rt::ipc::{cap_drop, msg_buf, port_allocate, MSG_RECEIVE};
use baton_rt::paging::{self, PagingStats};
use baton_rt::{println, task, vm, Error};

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../swap_proto.rs"]
mod swap_proto;

use baton_rt::ipc::IpcBuffer;

baton_rt::entry!(main);

const TEST: &str = "paging";
/// The default pager's store, in pages.
const STORE: u64 = 1024;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn sys() -> Result<PagingStats, Failed> {
    must("paging stats", paging::system_stats())
}

/// The kernel's heap in use, objects and free frames.
fn counts() -> Result<(u64, u64, u64), Failed> {
    let s = must("stats", baton_rt::stats())?;
    let v = must("vm stats", vm::system_stats())?;
    Ok((s.heap_used, v.objects, v.frames_free))
}

/// The root account's frame limit (`Stats::frames_limit`): the frames anonymous memory
/// may commit, which a registered default pager's store adds to.
fn frames_limit() -> Result<u64, Failed> {
    Ok(must("stats", baton_rt::stats())?.frames_limit)
}

/// Wires every range of this task (its pages would otherwise be paged out like any).
fn wire_everything() -> Result<(), Failed> {
    must("wire", swap_proto::wire_everything())
}

/// Waits until the task whose port is `task` has ended, then releases the name.
fn wait_end(task: u64, notify: u64) -> Result<(), Failed> {
    must(
        "wait for the end",
        swap_proto::wait_end(task, notify, 120_000_000_000),
    )
}

/// Polls the system counters until `done` holds.
fn until(what: &str, done: impl Fn(&PagingStats) -> bool) -> Result<PagingStats, Failed> {
    swap_proto::until(done).map_err(|e| {
        println!("TEST FAIL {TEST}: waiting for {what}: {e:?}");
        Failed
    })
}

/// The disk: the test's client of the driver (its IPC buffer, reply port and the driver's
/// service port), the host-privilege right, and the driver's task port.
struct Disk {
    c: blk_client::Client,
    host: u64,
    task: u64,
}

impl Disk {
    /// Starts the driver, allowing held requests (the tests of a kill mid-request).
    fn start(buf: IpcBuffer, host: u64) -> Result<Disk, Failed> {
        let mut d = Disk {
            c: blk_client::Client {
                buf,
                reply: must("reply port", port_allocate(0))?,
                driver: 0,
            },
            host,
            task: 0,
        };
        d.restart()?;
        Ok(d)
    }

    fn restart(&mut self) -> Result<(), Failed> {
        let (id, port) = must(
            "start the disk driver",
            blk_client::start_driver_with(&mut self.c.buf, self.host, blk_proto::SETUP_ALLOW_HOLD),
        )?;
        self.task = must(
            "the driver's task port",
            baton_rt::host::task_port(self.host, id),
        )?;
        self.c.driver = port;
        Ok(())
    }

    /// Sector 0.
    fn read0(&mut self) -> Result<[u8; 512], Failed> {
        let r = must(
            "read sector 0",
            self.c.call(blk_proto::BLK_READ, 0, 512, 0, &[], None),
        )?;
        must("read sector 0", r.result)?;
        let mut s = [0u8; 512];
        s.copy_from_slice(r.inline.get(..512).ok_or(Failed)?);
        Ok(s)
    }

    fn write0(&mut self, sector: &[u8; 512]) -> Result<(), Failed> {
        must("write sector 0", self.c.write(0, sector))
    }

    /// Starts the default pager on the swap partition with a store of [`STORE`] pages
    /// (`hold`: its page-ins' reads are held by the driver) and waits for it to register.
    fn pager(&mut self, hold: bool) -> Result<u64, Failed> {
        let args: &[&str] = if hold {
            &["dpager", "1024", "hold"]
        } else {
            &["dpager", "1024"]
        };
        must(
            "start dpager and wait for it to register",
            swap_proto::start_pager_registered(
                &mut self.c.buf,
                self.host,
                self.c.driver,
                args,
                STORE,
            ),
        )
    }
}

/// Runs `paging_child <mode> <pages>` and waits for its end.
fn child(mode: &str, pages: u64, notify: u64) -> Result<(), Failed> {
    must(
        "run paging_child",
        swap_proto::run_child(mode, pages, notify, 120_000_000_000),
    )
}

fn run() -> Result<(), Failed> {
    let host = baton_rt::start::host_priv();
    let buf = must("IPC buffer", IpcBuffer::new())?;
    wire_everything()?;
    let notify = must("port", port_allocate(0))?;
    errors(host)?;
    let mut disk = Disk::start(buf, host)?;
    // Warm-up: the programs' image objects are made at their first use and kept, and the
    // kernel's slot bitmaps are made at the first registration.
    let t = must(
        "warm-up dpager",
        swap_proto::start_pager(
            &mut disk.c.buf,
            host,
            disk.c.driver,
            &["dpager", "1024", "once"],
        ),
    )?;
    wait_end(t, notify)?;
    refusals(&mut disk, notify)?;
    child("nop", 0, notify)?;
    let s0 = sys()?;
    check!(
        (64..=4096).contains(&s0.pageable_limit) && s0.store_slots == 0,
        "user memory is limited to {} frames and no default pager is registered",
        s0.pageable_limit
    );
    // Two rounds: the second must leave the kernel as the first did (the first also pays
    // for what is made once, such as a program's symbols for a fault report).
    let first = round(&mut disk, notify, 1)?;
    let second = round(&mut disk, notify, 2)?;
    check!(
        first == second,
        "a second round leaves the kernel's heap, objects and free frames as the first did ({first:?} -> {second:?})"
    );
    // The driver ends when its last send right goes (it resets the device on the way).
    must("drop the driver's port", cap_drop(disk.c.driver))?;
    wait_end(disk.task, notify)?;
    release_store(host)?;
    must("drop the port", cap_drop(notify))
}

/// One round: paging, the store full, the pager killed, a new pager; the counts after.
fn round(disk: &mut Disk, notify: u64, n: u32) -> Result<(u64, u64, u64), Failed> {
    let host = disk.host;
    println!("paging: round {n}");
    let s0 = sys()?;
    let limit = s0.pageable_limit;
    let commit0 = frames_limit()?;

    // Data survives paging.
    let pager = disk.pager(false)?;
    let commit1 = frames_limit()?;
    check!(
        commit1 == commit0 + STORE,
        "with a default pager, anonymous memory may commit its store too: the root's frame limit {commit0} -> {commit1}"
    );
    child("work", 3 * limit, notify)?;
    let s1 = sys()?;
    check!(
        s1.pageouts > s0.pageouts + limit && s1.pageins > s0.pageins + limit,
        "a working set of {} pages in {limit} frames: {} page-outs, {} page-ins",
        3 * limit,
        s1.pageouts - s0.pageouts,
        s1.pageins - s0.pageins
    );
    check!(
        s1.reclaimed_mapped + s1.reclaimed_unmapped == s1.pageouts && s1.scanned > s0.scanned,
        "Table 3-8: {} from the free list, {} reclaimed with a mapping, {} without, {} scanned, {} spared",
        s1.from_free - s0.from_free,
        s1.reclaimed_mapped - s0.reclaimed_mapped,
        s1.reclaimed_unmapped - s0.reclaimed_unmapped,
        s1.scanned - s0.scanned,
        s1.spared - s0.spared
    );
    let s = until("the store empties", |s| s.store_used == 0)?;
    check!(
        s.store_used == 0,
        "the child's end gave its store slots back"
    );

    // Store full.
    child("hog", limit + STORE + 256, notify)?;
    let s2 = sys()?;
    check!(
        s2.no_memory > s1.no_memory && s2.no_store > s1.no_store,
        "wanting more than the frames and the store: a no-memory fault ({} faults, {} reclaims with no store)",
        s2.no_memory - s1.no_memory,
        s2.no_store - s1.no_store
    );
    until("the store empties", |s| s.store_used == 0)?;

    // The default pager killed while pages are out.
    let before = sys()?;
    let c = written("lose", 2 * limit, &before)?;
    must("kill the default pager", task::terminate(pager))?;
    wait_end(pager, notify)?;
    wait_end(c, notify)?;
    let s3 = sys()?;
    check!(
        s3.lost > before.lost && s3.store_slots == 0,
        "the pager's death: {} pages lost, and a fault on one stopped their task",
        s3.lost - before.lost
    );
    until("the lost slots are freed", |s| s.store_used == 0)?;
    let commit = frames_limit()?;
    check!(
        commit == commit0,
        "the pager gone, the root's frame limit is memory alone again ({commit}, {commit0} before the pager)"
    );

    // Restart.
    let pager = disk.pager(false)?;
    child("work", 2 * limit, notify)?;
    check!(
        sys()?.pagers_registered == s0.pagers_registered + 2,
        "a second default pager registered after the first died, and paging works again"
    );
    must("stop the default pager", task::terminate(pager))?;
    wait_end(pager, notify)?;
    until("the store is withdrawn", |s| s.store_slots == 0)?;

    // The default pager killed while the driver holds its page-in's read.
    let pager = disk.pager(true)?;
    let before = sys()?;
    let c = written("read", 2 * limit, &before)?;
    must("sleep", baton_rt::sleep_ns(500_000_000))?;
    must("kill the default pager mid-request", task::terminate(pager))?;
    wait_end(pager, notify)?;
    wait_end(c, notify)?;
    let s4 = sys()?;
    check!(
        s4.lost > before.lost && s4.store_slots == 0,
        "the pager killed while the disk held its read: {} pages lost, the reader stopped by a pager fault",
        s4.lost - before.lost
    );
    until("the lost slots are freed", |s| s.store_used == 0)?;

    // The driver killed while it holds a page-in's read: the pager ends with it.
    let pager = disk.pager(true)?;
    let before = sys()?;
    let c = written("read", 2 * limit, &before)?;
    must("sleep", baton_rt::sleep_ns(500_000_000))?;
    must("kill the driver mid-request", task::terminate(disk.task))?;
    wait_end(disk.task, notify)?;
    // A dead name now: released.
    let _ = cap_drop(disk.c.driver);
    wait_end(pager, notify)?;
    wait_end(c, notify)?;
    let s5 = sys()?;
    check!(
        s5.lost > before.lost && s5.store_slots == 0,
        "the driver killed while it held a page-in: the pager ended, {} pages lost, the reader stopped by a pager fault",
        s5.lost - before.lost
    );
    until("the lost slots are freed", |s| s.store_used == 0)?;

    // Both restarted: paging works again.
    disk.restart()?;
    let pager = disk.pager(false)?;
    child("work", 2 * limit, notify)?;
    check!(
        sys()?.pagers_registered == s0.pagers_registered + 5,
        "a new driver and a new default pager after both died, and paging works again"
    );
    must("stop the default pager", task::terminate(pager))?;
    wait_end(pager, notify)?;
    settle(host)
}

/// The default pager refuses a disk whose sector 0 holds no partition table, and one whose
/// table has no swap partition: it ends without registering. Sector 0 is put back after.
fn refusals(disk: &mut Disk, notify: u64) -> Result<(), Failed> {
    let table = disk.read0()?;
    let before = sys()?;
    let mut files_only = table;
    let capacity = must(
        "disk info",
        disk.c.call(blk_proto::BLK_INFO, 0, 0, 0, &[], None),
    )?
    .words[0];
    let parts = baton_disk::standard(capacity).map_err(|_| Failed)?;
    baton_disk::write_table(&mut files_only, &parts[..1]).map_err(|_| Failed)?;
    for (what, sector) in [
        ("no partition table", [0u8; 512]),
        ("no swap partition", files_only),
    ] {
        disk.write0(&sector)?;
        let t = must(
            "start dpager",
            swap_proto::start_pager(&mut disk.c.buf, disk.host, disk.c.driver, &["dpager"]),
        )?;
        wait_end(t, notify)?;
        let s = sys()?;
        check!(
            s.store_slots == 0 && s.pagers_registered == before.pagers_registered,
            "a disk with {what}: the default pager refused to start"
        );
    }
    disk.write0(&table)?;
    check!(disk.read0()? == table, "the partition table put back");
    Ok(())
}

/// Starts `paging_child <mode> <pages>` and waits for its word that it has written its
/// pages (half of them out by then, counted from `before`); its task port.
fn written(mode: &str, pages: u64, before: &PagingStats) -> Result<u64, Failed> {
    let mut buf = [0u8; 20];
    let n = swap_proto::fmt_u64(pages, &mut buf);
    let done = must("port", port_allocate(0))?;
    let c = must(
        "start paging_child",
        task::run("paging_child", done, &["paging_child", mode, n], &[]),
    )?;
    let mut msg = [0u8; 64];
    must(
        "the child's word",
        msg_buf(&mut msg, MSG_RECEIVE, done, 120_000_000_000),
    )?;
    must("drop", cap_drop(done))?;
    check!(
        sys()?.pageouts >= before.pageouts + pages / 4,
        "the child's pages are out"
    );
    Ok(c)
}

/// DMA memory the kernel holds back after its task's end in case a device still writes
/// it (`docs/drivers.md`): the killed driver's buffers, released by the new driver once
/// it has reset the device; released here too, so that a late quarantine on several
/// CPUs does not count.
fn release_store(host: u64) -> Result<(), Failed> {
    must(
        "release the stand-in store's DMA memory",
        baton_rt::memobj::dma_quarantine_release(host),
    )?;
    Ok(())
}

/// The counts once they stop changing (the tasks just ended go at their threads' next
/// kernel entry). DMA memory is quarantined when its task's end is carried out, which on
/// several CPUs may come after its end was reported: it is released at every look.
fn settle(host: u64) -> Result<(u64, u64, u64), Failed> {
    release_store(host)?;
    let mut last = counts()?;
    for _ in 0..100 {
        must("sleep", baton_rt::sleep_ns(10_000_000))?;
        release_store(host)?;
        let now = counts()?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}

/// Bad arguments and missing rights are errors.
fn errors(host: u64) -> Result<(), Failed> {
    let port = must("port", port_allocate(0))?;
    check!(
        paging::register(port, 16, 0) == Err(Error::InvalidName)
            || paging::register(port, 16, 0) == Err(Error::Denied),
        "registering without the host-privilege right is refused"
    );
    check!(
        paging::register(port, 0, host) == Err(Error::InvalidArgument)
            && paging::register(port, paging::SLOTS_MAX + 1, host) == Err(Error::InvalidArgument),
        "a store of no pages, or too many, is refused"
    );
    check!(
        paging::register(0xdead, 16, host).is_err(),
        "a port name that names nothing is refused"
    );
    let rec = [0u8; paging::TRANSFER_SIZE];
    let page = [0u8; 4096];
    check!(
        paging::supply(&rec, &page) == Err(Error::Denied)
            && paging::supply_raw(0, 0) == Err(Error::Denied),
        "a supply from a task that is not the default pager is refused"
    );
    check!(
        paging::stats_raw(2).is_err() && paging::stats().is_ok(),
        "paging_stats with a bad scope is refused"
    );
    must("drop", cap_drop(port))
}
