//! `fs_evict`: page replacement gives written pages of a file back to the file server, its
//! pager (`docs/files.md`, "Writing back"; `docs/vm.md`, "Paging"). Booted with a small
//! pageable limit (`pageable=256`), it creates a file three times as large (768 pages),
//! writes every page through a shared mapping and reads every page back: the written pages
//! that replacement took went to the server in data returns and were written into the file,
//! and came back from it at the next touch. Then it stops the server and reads the file
//! through a new one, from the disk, twice, by a shared writable mapping it only reads: its
//! clean pages are dropped by replacement and asked again, and none is returned (the
//! kernel keeps a dirty bit per page).
//!
//! Then, behind a default pager whose queue is full, the file is read again: its clean
//! pages are dropped for the next ones.
//!
//! All of it runs at least twice: a round must leave the kernel's heap, objects, free
//! frames, ports and names where the round before it did (the servers, the driver and the
//! children ended), within [`fs_client::MOST_ROUNDS`] rounds ([`fs_client::two_rounds`]
//! says why not always the first two).
#![no_std]
#![no_main]

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../fs_client.rs"]
mod fs_client;
#[path = "../fs_proto.rs"]
mod fs_proto;
#[path = "../swap_proto.rs"]
mod swap_proto;

use baton_abi::vm::{PROT_READ, PROT_WRITE};
use baton_rt::check::Failed;
use baton_rt::ipc::{cap_drop, IpcBuffer};
use baton_rt::{memobj, println, Error};

baton_rt::entry!(main);

const TEST: &str = "fs_evict";
const PAGES: u64 = 768;
const P: u64 = 4096;
const PATH: &str = "/EVICT.BIN";

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn word(i: u64, j: u64) -> u64 {
    (i << 32 | j).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// Pages of the file at `va` whose two words differ from what was written.
fn wrong_pages(va: u64) -> u64 {
    let mut wrong = 0;
    for i in 0..PAGES {
        let page = (va + i * P) as *const u64;
        // SAFETY: `va` maps `PAGES` pages of the file, readable.
        let (a, b) = unsafe { (page.read_volatile(), page.add(511).read_volatile()) };
        if a != word(i, 0) || b != word(i, 511) {
            wrong += 1;
        }
    }
    wrong
}

/// Under memory pressure nothing can relieve (a child has wired user memory full, all but
/// the reserve; there is no default pager, and the server holds no file's pages), a file
/// not read yet is read through its mapping: the file server is on the path that frees
/// memory (`paging_exempt`, as its starter made it), so its faults and supplies may use
/// the reserve, and every page arrives intact; without that the server dies of a
/// no-memory fault.
fn pressure(fs: &fs_client::Fs, buf: &mut IpcBuffer) -> Result<(), Failed> {
    let hog = Hog::start()?;
    let path = baton_disk::SAMPLE_PATH;
    let (obj, size) = must("open the sample file", fs.open(buf, path))?;
    let ro = memobj::map_flags(PROT_READ, PROT_READ, false, 0);
    let va = must("map", memobj::map(obj, size, 0, ro))?;
    let mut wrong = 0;
    let mut at = 0;
    while at < size {
        // SAFETY: `va` maps `size` readable bytes of the file.
        let b = unsafe { ((va + at) as *const u8).read_volatile() };
        if b != baton_disk::sample_byte(at) {
            wrong += 1;
        }
        at += 512;
    }
    baton_rt::check!(
        TEST,
        wrong == 0,
        "with user memory full, a file read through the server arrives intact ({wrong} of {} samples differ)",
        size / 512
    );
    // SAFETY: ours.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, size) })?;
    must("drop", cap_drop(obj))?;
    hog.end()
}

/// A child holding every frame of user memory but the reserve wired.
struct Hog {
    task: u64,
    done: u64,
}

impl Hog {
    fn start() -> Result<Hog, Failed> {
        use baton_abi::ipc::HEADER_SIZE;
        use baton_rt::ipc::{data_word, msg_buf, port_allocate, MSG_RECEIVE};
        let done = must("port", port_allocate(0))?;
        let hog = must(
            "start paging_child",
            baton_rt::task::run("paging_child", done, &["paging_child", "wire", "1024"], &[]),
        )?;
        let mut m = [0u8; 64];
        must(
            "the child's word",
            msg_buf(&mut m, MSG_RECEIVE, done, 60_000_000_000),
        )?;
        let wired = data_word(&m[HEADER_SIZE..], 0);
        let s = must("paging stats", baton_rt::paging::system_stats())?;
        baton_rt::check!(
            TEST,
            wired > 0 && s.pageable_used + 20 >= s.pageable_limit,
            "a child wired {wired} pages: user memory holds {} of {} frames",
            s.pageable_used,
            s.pageable_limit
        );
        Ok(Hog { task: hog, done })
    }

    /// Ends the child and waits until it is gone.
    fn end(self) -> Result<(), Failed> {
        use baton_abi::ipc::{NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME};
        use baton_rt::ipc::{msg_buf, port_notify, MSG_RECEIVE};
        let Hog { task: hog, done } = self;
        let mut m = [0u8; 64];
        must("end the child", baton_rt::task::terminate(hog))?;
        match port_notify(hog, NOTIFY_KIND_DEAD_NAME, done) {
            // Gone already.
            Err(Error::DeadName) => {}
            r => {
                must("watch", r)?;
                loop {
                    must(
                        "its end",
                        msg_buf(&mut m, MSG_RECEIVE, done, 60_000_000_000),
                    )?;
                    let h = baton_abi::ipc::MsgHeader::from_bytes(&m).ok_or(Failed)?;
                    if h.id == NOTIFY_DEAD_NAME {
                        break;
                    }
                }
            }
        }
        must("drop", cap_drop(hog))?;
        must("drop", cap_drop(done))
    }
}

/// A server not exempt from replacement, its pages made already (it read the sample file
/// but its last page), cannot supply a page while a child holds all of user memory but
/// the reserve: it tries for a while, then fails the page, so a kernel copy from it fails
/// rather than waiting for good (before, the server ignored the supply's error and the
/// copy waited forever). Once memory is back, opening the file again makes the server
/// forget the failure, and the page reads intact.
fn supply_fails(host: u64, driver: u64, buf: &mut IpcBuffer) -> Result<(), Failed> {
    use baton_abi::ipc::{MSG_BUF, MSG_SEND};
    let (id, server) = must(
        "start a server not exempt",
        fs_client::start_server_as(buf, driver, false),
    )?;
    let fs = must("client", fs_client::Fs::new(server))?;
    let path = baton_disk::SAMPLE_PATH;
    let (obj, size) = must("open the sample file", fs.open(buf, path))?;
    let ro = memobj::map_flags(PROT_READ, PROT_READ, false, 0);
    let va = must("map", memobj::map(obj, size, 0, ro))?;
    let last = (size - 1) & !(P - 1);
    let mut at = 0;
    while at < last {
        // SAFETY: `va` maps `size` readable bytes of the file.
        let _ = unsafe { ((va + at) as *const u8).read_volatile() };
        at += P;
    }
    let hog = Hog::start()?;
    // A kernel copy from the last page, which the server cannot supply now (a send from
    // a buffer there: the kernel reads the header first).
    // SAFETY: the kernel only reads the buffer, a page of the mapping.
    let r = unsafe { baton_rt::ipc::msg_raw(MSG_SEND | MSG_BUF, 0, 1_000_000_000, va + last, 64) };
    let r = baton_abi::decode_result(r);
    baton_rt::check!(
        TEST,
        r == Err(Error::BadAddress),
        "a page the server cannot supply under full memory is failed: a kernel copy from it returns {r:?}"
    );
    hog.end()?;
    let (again, _) = must("open again", fs.open(buf, path))?;
    must("drop", cap_drop(again))?;
    // SAFETY: `va` maps `size` readable bytes of the file.
    let b = unsafe { ((va + last) as *const u8).read_volatile() };
    baton_rt::check!(
        TEST,
        b == baton_disk::sample_byte(last),
        "once memory is back and the file opened again, the failed page is asked again and arrives intact"
    );
    // SAFETY: ours.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, size) })?;
    must("drop", cap_drop(obj))?;
    stop(host, id, fs, buf)
}

/// A file read behind a busy default pager: a default pager that takes no message
/// (`dpager stall`) and a child writing more anonymous pages than user memory holds, so
/// that the pager's queue fills with page-outs and the child waits for memory. Reading
/// the file `path` (`PAGES` pages, as `round` wrote them) through a shared mapping must
/// still go on: its clean pages need no room in that queue, so replacement drops them
/// for the next ones (before, replacement took nothing while the queue was full, and the
/// read ended in a pager fault once the server could not supply a page).
fn busy_pager(
    host: u64,
    driver: u64,
    fs: &fs_client::Fs,
    buf: &mut IpcBuffer,
    path: &str,
) -> Result<(), Failed> {
    let pager = must(
        "start a default pager that takes no message",
        swap_proto::start_pager_registered(buf, host, driver, &["dpager", "1024", "stall"], 1024),
    )?;
    let before = must("paging stats", baton_rt::paging::system_stats())?;
    let hog = must(
        "start paging_child",
        baton_rt::task::run("paging_child", 0, &["paging_child", "touch", "1024"], &[]),
    )?;
    // The queue has no room for a batch once more than half of it is queued.
    let full = must(
        "the pager's queue fills",
        swap_proto::until(|s| {
            s.pageouts >= before.pageouts + 33 && s.pageable_used + 40 >= s.pageable_limit
        }),
    )?;
    must("a moment", baton_rt::sleep_ns(200_000_000))?;
    let (obj, size) = must("open", fs.open(buf, path))?;
    let ro = memobj::map_flags(PROT_READ, PROT_READ, false, 0);
    let va = must("map", memobj::map(obj, size, 0, ro))?;
    let wrong = wrong_pages(va);
    let after = must("paging stats", baton_rt::paging::system_stats())?;
    baton_rt::check!(
        TEST,
        wrong == 0,
        "behind a default pager whose queue is full ({} page-outs queued, none taken), a file of {PAGES} pages reads intact ({wrong} differ): {} clean file pages dropped meanwhile",
        full.pageouts - before.pageouts,
        after.reclaimed_pager - full.reclaimed_pager
    );
    // SAFETY: ours.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, size) })?;
    must("drop", cap_drop(obj))?;
    let notify = must("port", baton_rt::ipc::port_allocate(0))?;
    must("end the child", baton_rt::task::terminate(hog))?;
    must("its end", swap_proto::wait_end(hog, notify, 60_000_000_000))?;
    must("end the pager", baton_rt::task::terminate(pager))?;
    must(
        "its end",
        swap_proto::wait_end(pager, notify, 60_000_000_000),
    )?;
    must("drop", cap_drop(notify))
}

/// Stops the file server `fs` (task `id`), waits for its end and drops its name (the
/// client's reply port goes with `fs`).
fn stop(host: u64, id: u64, fs: fs_client::Fs, buf: &mut IpcBuffer) -> Result<(), Failed> {
    must(
        "stop the server",
        fs_client::end_and_wait(host, id, || fs.stop(buf)),
    )?;
    must("drop", cap_drop(fs.server))
}

fn run() -> Result<(), Failed> {
    let host = baton_rt::start::host_priv();
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    // None of this task's pages may go to the busy default pager of `busy_pager`.
    must("wire this task", swap_proto::wire_everything())?;
    fs_client::two_rounds(TEST, host, |_| round(host, &mut buf))?;
    println!("fs_evict: done");
    Ok(())
}

/// The test, once: the driver and every server it starts have ended when it returns.
fn round(host: u64, buf: &mut IpcBuffer) -> Result<(), Failed> {
    let (driver_id, driver) = must("start the driver", blk_client::start_driver(buf, host))?;
    let (id, server) = must("start the server", fs_client::start_server(buf, driver))?;
    let fs = must("client", fs_client::Fs::new(server))?;
    let len = PAGES * P;
    let limit = must("paging stats", baton_rt::paging::system_stats()).map(|s| s.pageable_limit)?;
    baton_rt::check!(
        TEST,
        limit < PAGES / 2,
        "user memory is limited to {limit} frames"
    );
    let (obj, _) = must("create", fs.create(buf, PATH, len))?;
    let rw = memobj::map_flags(PROT_READ | PROT_WRITE, PROT_READ | PROT_WRITE, false, 0);
    let va = must("map shared", memobj::map(obj, len, 0, rw))?;
    for i in 0..PAGES {
        let page = (va + i * P) as *mut u64;
        // SAFETY: `va` maps `PAGES` writable pages of the file, only this task's.
        unsafe {
            page.write_volatile(word(i, 0));
            page.add(511).write_volatile(word(i, 511));
        }
    }
    let returned = must("info", fs.info(buf))?[2];
    baton_rt::check!(
        TEST,
        returned > 0,
        "writing {PAGES} pages in {limit} frames: replacement returned {returned} written pages to the server"
    );
    let wrong = wrong_pages(va);
    baton_rt::check!(
        TEST,
        wrong == 0,
        "every page reads back what was written, the returned ones from the file ({wrong} differ)"
    );
    // SAFETY: ours; nothing refers to it.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, len) })?;
    must("drop", cap_drop(obj))?;
    stop(host, id, fs, buf)?;
    let (id, server) = must("restart the server", fs_client::start_server(buf, driver))?;
    let fs = must("client", fs_client::Fs::new(server))?;
    let (obj, size) = must("open", fs.open(buf, PATH))?;
    // Shared, not copy-on-write: a pager-backed object that a copy-on-write mapping needs
    // is never a victim, so its pages would not fit the limit. Writable, but only read:
    // replacement takes the pages, and since none was written none goes back to the
    // server (each page's dirty bit, not the mapping's protection, decides).
    let va = must("map", memobj::map(obj, size, 0, rw))?;
    let wrong = wrong_pages(va);
    baton_rt::check!(
        TEST,
        wrong == 0,
        "read through a new server, from the disk, every page is what was written ({wrong} differ)"
    );
    let again = wrong_pages(va);
    let info = must("info", fs.info(buf))?;
    baton_rt::check!(
        TEST,
        again == 0 && info[1] > PAGES && info[2] == 0,
        "pages only read through a writable mapping are dropped, not returned: {} data requests for {PAGES} pages read twice, {} pages written back",
        info[1],
        info[2]
    );
    // SAFETY: ours.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, size) })?;
    must("drop", cap_drop(obj))?;
    busy_pager(host, driver, &fs, buf, PATH)?;
    must("delete", fs.delete(buf, PATH))?;
    stop(host, id, fs, buf)?;
    // A third server, which has no file's pages yet: nothing in user memory can be taken.
    let (id, server) = must("restart the server", fs_client::start_server(buf, driver))?;
    let fs = must("client", fs_client::Fs::new(server))?;
    pressure(&fs, buf)?;
    stop(host, id, fs, buf)?;
    supply_fails(host, driver, buf)?;
    must(
        "end the driver",
        fs_client::end_and_wait(host, driver_id, || cap_drop(driver)),
    )
}
