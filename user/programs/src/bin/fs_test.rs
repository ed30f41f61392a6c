//! `fs_test`: the file server (`docs/files.md`) on the disk `cargo xtask` made, played as
//! the boot task does: it starts the block driver and the file server, and is their client.
//!
//! Each of two rounds: reads the sample file by mapping it copy-on-write and touching every
//! byte, checked against what xtask wrote, each page asked of the server once (cold) and
//! none the second time (warm); lists `/` and `/bin`; starts `/bin/fs_child` from its file
//! (`task_map_program` from a memory object) and sees it run and end; creates a file, writes
//! it through a shared mapping, syncs (the pager's data return), stops the server, and
//! reads the bytes back through a new server, from the disk; deletes it; kills the server
//! while a client maps a file, sees requests fail with `DeadName` and a child touching a
//! page of the dead server's object end by a pager fault, and starts the server again. The
//! second round must leave the kernel's heap, objects and free frames where the first did.
//! Then, once: a disk too full for a file is a clear `NoSpace`; a broken partition table and
//! a broken file-system boot sector are refused (`BadFormat`) and the server ends, and it
//! serves again once they are repaired.
#![no_std]
#![no_main]

extern crate alloc;

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../fs_client.rs"]
mod fs_client;
#[path = "../fs_proto.rs"]
mod fs_proto;

use baton_abi::ipc::{MsgHeader, HEADER_SIZE, NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME};
use baton_abi::vm::{PROT_READ, PROT_WRITE};
use baton_rt::check::Failed;
use baton_rt::ipc::{cap_drop, msg_buf, port_allocate, port_notify, IpcBuffer, MSG_RECEIVE};
use baton_rt::{clock_ns, memobj, println, sleep_ns, task, Error};
use blk_client::{start_driver, Client};
use blk_proto::{BLK_READ, SECTOR};
use fs_client::{start_server, Fs};

baton_rt::entry!(main);

const TEST: &str = "fs";
const SECONDS: u64 = 1_000_000_000;
const P: u64 = 4096;

macro_rules! check { ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) } }
fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// The (heap, objects, free frames) figures a round must leave as it found them.
fn figures() -> Result<(u64, u64, u64), Failed> {
    let s = must("stats", baton_rt::stats())?;
    let v = must("vm stats", baton_rt::vm::system_stats())?;
    Ok((s.heap_used, v.objects, v.frames_free))
}

/// The driver and the file server, started as the boot task starts them.
struct System {
    host: u64,
    driver: u64,
    fs_task: u64,
    fs: Fs,
}

fn run() -> Result<(), Failed> {
    let host = baton_rt::start::host_priv();
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let mut after = [(0, 0, 0); 2];
    for round in 0..2 {
        println!("fs_test: round {}", round + 1);
        let mut sys = start(&mut buf, host)?;
        read_sample(&mut buf, &sys, true)?;
        read_sample(&mut buf, &sys, false)?;
        listing(&mut buf, &sys)?;
        run_from_file(&mut buf, &sys)?;
        write_back(&mut buf, &mut sys, round)?;
        kill_server(&mut buf, &mut sys)?;
        stop(&mut buf, sys)?;
        after[round] = settle(&after, round)?;
    }
    check!(
        after[0] == after[1],
        "a second round leaves the kernel heap, objects and free frames as the first did \
         ({:?}, {:?})",
        after[0],
        after[1]
    );
    let sys = start(&mut buf, host)?;
    disk_full(&mut buf, &sys)?;
    refused(buf, sys)?;
    Ok(())
}

/// The figures, once what the round ended has gone (the second round waits for the first's).
fn settle(after: &[(u64, u64, u64); 2], round: usize) -> Result<(u64, u64, u64), Failed> {
    let deadline = clock_ns() + 5 * SECONDS;
    loop {
        let f = figures()?;
        if round == 0 || f == after[0] || clock_ns() > deadline {
            return Ok(f);
        }
        sleep_ns(10_000_000).ok();
    }
}

fn start(buf: &mut IpcBuffer, host: u64) -> Result<System, Failed> {
    let (_task, driver) = must("start the driver", start_driver(buf, host))?;
    let (fs_task, server) = must("start the file server", start_server(buf, driver))?;
    Ok(System {
        host,
        driver,
        fs_task,
        fs: must("client", Fs::new(server))?,
    })
}

/// Stops the file server (it writes back and ends) and the driver, and releases the driver's quarantined buffers.
fn stop(buf: &mut IpcBuffer, sys: System) -> Result<(), Failed> {
    // The client's reply port goes with `sys.fs`.
    stop_server(buf, sys.host, sys.fs_task, &sys.fs)?;
    must("drop the driver's port", cap_drop(sys.driver))?;
    let deadline = clock_ns() + 5 * SECONDS;
    while must("quarantined", memobj::dma_quarantined(sys.host))? == 0 {
        if clock_ns() > deadline {
            break;
        }
        sleep_ns(5_000_000).ok();
    }
    must("release", memobj::dma_quarantine_release(sys.host))?;
    Ok(())
}

/// Stops the file server `fs` (task `task`) and waits for its end.
fn stop_server(buf: &mut IpcBuffer, host: u64, task: u64, fs: &Fs) -> Result<(), Failed> {
    wait_end(host, task, || fs.stop(buf))?;
    must("drop the server's name", cap_drop(fs.server))
}

/// Does `end` (which makes task `task` end) and waits until the task is gone.
fn wait_end(host: u64, task: u64, end: impl FnOnce() -> Result<(), Error>) -> Result<(), Failed> {
    let port = must("wait port", port_allocate(0))?;
    let tp = baton_rt::host::task_port(host, task);
    let watched = tp.and_then(|tp| port_notify(tp, NOTIFY_KIND_DEAD_NAME, port).map(|()| tp));
    must("end", end())?;
    if let Ok(tp) = watched {
        let mut m = [0u8; 64];
        loop {
            must(
                "wait for the end",
                msg_buf(&mut m, MSG_RECEIVE, port, 30 * SECONDS),
            )?;
            let h = MsgHeader::from_bytes(&m).unwrap_or_default();
            let word = m
                .get(HEADER_SIZE..HEADER_SIZE + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes);
            if h.id == NOTIFY_DEAD_NAME && word == tp {
                break;
            }
        }
        must("drop the task's name", cap_drop(tp))?;
    }
    must("drop the wait port", cap_drop(port))
}

/// Opens the sample file, maps it copy-on-write and checks every byte; `cold`: each page
/// came from the server (one data request a page), else none did.
fn read_sample(buf: &mut IpcBuffer, sys: &System, cold: bool) -> Result<(), Failed> {
    let (obj, size) = must("open the sample", sys.fs.open(buf, baton_disk::SAMPLE_PATH))?;
    check!(
        size == baton_disk::SAMPLE_LEN,
        "{} is {size} bytes, as xtask wrote it",
        baton_disk::SAMPLE_PATH
    );
    let before = must("info", sys.fs.info(buf))?[1];
    let flags = memobj::map_flags(PROT_READ, PROT_READ, true, 0);
    let va = must("map the sample", memobj::map(obj, size, 0, flags))?;
    // SAFETY: `va` maps `size` readable bytes of the file, copy-on-write; nothing else
    // writes them while this slice lives.
    let bytes = unsafe { core::slice::from_raw_parts(va as *const u8, size as usize) };
    let wrong = bytes
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b != baton_disk::sample_byte(i as u64))
        .count();
    // SAFETY: the mapping is ours, and `bytes` is not used past here.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, size) })?;
    must("drop the right", cap_drop(obj))?;
    let asked = must("info", sys.fs.info(buf))?[1] - before;
    check!(
        wrong == 0,
        "every byte of the file read through its mapping is what xtask wrote ({wrong} differ)"
    );
    if cold {
        check!(
            asked == size / P,
            "cold: each of the {} pages was asked of the server once ({asked})",
            size / P
        );
    } else {
        check!(
            asked == 0,
            "warm: mapped again, no page was asked of the server ({asked})"
        );
    }
    Ok(())
}

fn listing(buf: &mut IpcBuffer, sys: &System) -> Result<(), Failed> {
    let mut root = must("list /", sys.fs.list(buf, "/"))?;
    let has = |text: &[u8], line: &[u8]| text.split(|&b| b == b'\n').any(|l| l.starts_with(line));
    let ok = has(root.text(), b"bin/") && has(root.text(), b"data/");
    root.release();
    check!(ok, "the root folder lists bin/ and data/");
    let mut bin = must("list /bin", sys.fs.list(buf, "/bin"))?;
    let entries = bin.words[0];
    let ok = has(bin.text(), b"fs_child ") && has(bin.text(), b"fs_test ");
    bin.release();
    check!(
        ok && entries > 10,
        "/bin lists the boot image's programs ({entries} entries)"
    );
    let size = must("size", sys.fs.size(buf, "/bin/fs_child"))?;
    check!(size > P, "/bin/fs_child is {size} bytes");
    check!(
        sys.fs.size(buf, "/bin/no_such_program") == Err(Error::NotFound),
        "a file that does not exist: NotFound"
    );
    check!(
        sys.fs.open(buf, "bin/fs_child").err() == Some(Error::InvalidArgument),
        "a path that is not absolute: InvalidArgument"
    );
    Ok(())
}

/// Starts `/bin/fs_child exit 7` from its file and waits for its end.
fn run_from_file(buf: &mut IpcBuffer, sys: &System) -> Result<(), Failed> {
    let (obj, size) = must("open /bin/fs_child", sys.fs.open(buf, "/bin/fs_child"))?;
    let len = size.next_multiple_of(P);
    let flags = memobj::map_flags(PROT_READ, PROT_READ, false, 0);
    let va = must("map the program", memobj::map(obj, len, 0, flags))?;
    let t = must("task_create", task::create(0, 0))?;
    let entry = task::map_object(t, va, size, "fs_child");
    // SAFETY: our mapping; nothing refers to it.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, len) })?;
    must("drop the right", cap_drop(obj))?;
    let entry = must("task_map_program from the file's object", entry)?;
    check!(
        entry >= 0x40_0000,
        "the program's entry point from its file: {entry:#x}"
    );
    let port = must("wait port", port_allocate(0))?;
    must("watch", port_notify(t, NOTIFY_KIND_DEAD_NAME, port))?;
    must("init thread", task::init_thread(t, 0, 0))?;
    must("start", task::start(t, 0, &["fs_child", "exit", "7"], &[]))?;
    let mut m = [0u8; 64];
    must(
        "wait for its end",
        msg_buf(&mut m, MSG_RECEIVE, port, 30 * SECONDS),
    )?;
    let h = MsgHeader::from_bytes(&m).unwrap_or_default();
    check!(
        h.id == NOTIFY_DEAD_NAME,
        "the program started from /bin/fs_child ran and ended"
    );
    must("drop", cap_drop(t))?;
    must("drop", cap_drop(port))?;
    // A mapping that is copy-on-write, or of another length than its object's window, is
    // refused.
    let t = must("task_create", task::create(0, 0))?;
    let (obj, size) = must("open /bin/fs_child", sys.fs.open(buf, "/bin/fs_child"))?;
    let cow = memobj::map_flags(PROT_READ, PROT_READ, true, 0);
    let va = must("map", memobj::map(obj, len, 0, cow))?;
    check!(
        task::map_object(t, va, size, "x") == Err(Error::InvalidArgument),
        "a copy-on-write mapping as the program's source: InvalidArgument"
    );
    // SAFETY: ours.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, len) })?;
    let va = must("map", memobj::map(obj, len, 0, flags))?;
    check!(
        task::map_object(t, va, len + P, "x") == Err(Error::BadAddress)
            || task::map_object(t, va, len + P, "x") == Err(Error::InvalidArgument),
        "a length past the mapping: refused"
    );
    check!(
        task::map_object(t, va, 64, "x") == Err(Error::BadFormat),
        "a file cut short of its segments: BadFormat"
    );
    // SAFETY: ours.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, len) })?;
    must("drop", cap_drop(obj))?;
    must("end the unmade task", task::terminate(t))?;
    must("drop", cap_drop(t))?;
    Ok(())
}

/// Creates a file, writes it through a shared mapping, syncs, and reads it back through a
/// new server (from the disk); deletes it.
fn write_back(buf: &mut IpcBuffer, sys: &mut System, round: usize) -> Result<(), Failed> {
    let path = "/NOTE.TXT";
    let len = 3 * P + 100;
    let (obj, size) = must("create", sys.fs.create(buf, path, len))?;
    check!(size == len, "created {path} of {len} bytes");
    check!(
        sys.fs.create(buf, path, len).err() == Some(Error::Busy),
        "creating it again: Busy"
    );
    let map_len = len.next_multiple_of(P);
    let rw = memobj::map_flags(PROT_READ | PROT_WRITE, PROT_READ | PROT_WRITE, false, 0);
    let va = must("map shared", memobj::map(obj, map_len, 0, rw))?;
    // SAFETY: `va` maps `map_len` writable bytes of the object, which only this task maps.
    let bytes = unsafe { core::slice::from_raw_parts_mut(va as *mut u8, map_len as usize) };
    let at = |i: usize| (i as u64 * 31 + round as u64 * 7 + 5) as u8;
    check!(
        bytes[..len as usize].iter().all(|&b| b == 0),
        "a new file reads as zeros"
    );
    for (i, b) in bytes.iter_mut().enumerate().take(len as usize) {
        *b = at(i);
    }
    let pages = must("sync", sys.fs.sync(buf, path))?;
    check!(
        pages == map_len / P,
        "sync wrote back the file's {} pages by the pager's data return ({pages})",
        map_len / P
    );
    // SAFETY: ours; `bytes` is not used past here.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, map_len) })?;
    must("drop", cap_drop(obj))?;
    // A new server reads the file from the disk.
    stop_server(buf, sys.host, sys.fs_task, &sys.fs)?;
    let (fs_task, server) = must("restart the server", start_server(buf, sys.driver))?;
    sys.fs_task = fs_task;
    sys.fs.server = server;
    let (obj, size) = must("open again", sys.fs.open(buf, path))?;
    check!(size == len, "{path} is still {len} bytes");
    let ro = memobj::map_flags(PROT_READ, PROT_READ, true, 0);
    let va = must("map", memobj::map(obj, map_len, 0, ro))?;
    // SAFETY: `va` maps `map_len` readable bytes, copy-on-write.
    let back = unsafe { core::slice::from_raw_parts(va as *const u8, map_len as usize) };
    let same = back[..len as usize]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == at(i));
    // SAFETY: ours; `back` is not used past here.
    must("unmap", unsafe { baton_rt::vm::deallocate(va, map_len) })?;
    must("drop", cap_drop(obj))?;
    check!(
        same,
        "what was written through the mapping reads back from the disk through a new server"
    );
    must("delete", sys.fs.delete(buf, path))?;
    check!(
        sys.fs.size(buf, path) == Err(Error::NotFound),
        "deleted: {path} is gone"
    );
    Ok(())
}

/// Kills the server while a client maps a file whose pages it has not touched: requests
/// fail with `DeadName`, a child touching a page ends by a pager fault, and a new server
/// serves again.
fn kill_server(buf: &mut IpcBuffer, sys: &mut System) -> Result<(), Failed> {
    let (obj, _) = must("open", sys.fs.open(buf, baton_disk::SAMPLE_PATH))?;
    // A new server's object: none of its pages resident.
    let host = sys.host;
    let tp = must("task port", baton_rt::host::task_port(host, sys.fs_task))?;
    wait_end(host, sys.fs_task, || task::terminate(tp))?;
    must("drop", cap_drop(tp))?;
    check!(
        matches!(
            sys.fs.size(buf, baton_disk::SAMPLE_PATH),
            Err(Error::DeadName) | Err(Error::InvalidName)
        ),
        "a request to the killed server fails with DeadName"
    );
    let child = must(
        "spawn fs_child",
        baton_rt::sys::spawn_args("fs_child", obj, &["fs_child", "touch"], &[]),
    )?;
    let deadline = clock_ns() + 30 * SECONDS;
    while baton_rt::host::task_port(host, child).map(cap_drop).is_ok() {
        if clock_ns() > deadline {
            break;
        }
        sleep_ns(10_000_000).ok();
    }
    check!(
        baton_rt::host::task_port(host, child) == Err(Error::NotFound),
        "a client touching a page of the dead server's file ended (by a pager fault)"
    );
    must("drop", cap_drop(obj))?;
    must("drop the dead name", cap_drop(sys.fs.server))?;
    let (fs_task, server) = must("restart the server", start_server(buf, sys.driver))?;
    sys.fs_task = fs_task;
    sys.fs.server = server;
    let size = must(
        "size after the restart",
        sys.fs.size(buf, baton_disk::SAMPLE_PATH),
    )?;
    check!(
        size == baton_disk::SAMPLE_LEN,
        "the restarted server serves the disk again"
    );
    Ok(())
}

/// A file larger than the free space: `NoSpace`, and nothing of it stays.
fn disk_full(buf: &mut IpcBuffer, sys: &System) -> Result<(), Failed> {
    let a = sys.fs.create(buf, "/BIG1.BIN", fs_proto::CREATE_MAX);
    let b = sys.fs.create(buf, "/BIG2.BIN", fs_proto::CREATE_MAX);
    check!(
        b.err() == Some(Error::NoSpace),
        "a second file of 16 MiB on the 32 MiB file system: NoSpace"
    );
    check!(
        sys.fs.size(buf, "/BIG2.BIN") == Err(Error::NotFound),
        "the file that did not fit is not left behind"
    );
    if let Ok((obj, _)) = a {
        must("drop", cap_drop(obj))?;
    }
    must("delete", sys.fs.delete(buf, "/BIG1.BIN"))?;
    let (obj, _) = must("create after freeing", sys.fs.create(buf, "/SMALL.BIN", P))?;
    must("drop", cap_drop(obj))?;
    must("delete", sys.fs.delete(buf, "/SMALL.BIN"))?;
    println!("ok: with the space freed, a file is made again");
    Ok(())
}

/// Breaks the partition table, then the file system's boot sector: each is refused with
/// `BadFormat` (the server ends); repaired, the disk is served again.
fn refused(mut buf: IpcBuffer, sys: System) -> Result<(), Failed> {
    let host = sys.host;
    stop_server(&mut buf, host, sys.fs_task, &sys.fs)?;
    let mut c = Client {
        buf,
        reply: must("port", port_allocate(0))?,
        driver: sys.driver,
    };
    let boot = baton_disk::FIRST_SECTOR;
    for (sector, what) in [
        (0u64, "a broken partition table"),
        (boot, "a broken file-system boot sector"),
    ] {
        let r = must("read", c.call(BLK_READ, sector, SECTOR, 0, &[], None))?;
        must("read", r.result)?;
        let mut good = [0u8; 512];
        good.copy_from_slice(&r.inline[..512]);
        let mut bad = good;
        for (i, b) in bad
            .iter_mut()
            .enumerate()
            .skip(if sector == 0 { 440 } else { 0 })
        {
            *b = (i as u8).wrapping_mul(13) ^ 0xa5;
        }
        must("break", c.write(sector, &bad))?;
        let got = start_server(&mut c.buf, sys.driver);
        if let Ok((_, server)) = got {
            let _ = cap_drop(server);
        }
        must("repair", c.write(sector, &good))?;
        check!(
            got.err() == Some(Error::BadFormat),
            "{what} is refused: BadFormat, and the server ends"
        );
    }
    let (fs_task, server) = must(
        "start on the repaired disk",
        start_server(&mut c.buf, sys.driver),
    )?;
    let mut fs = sys.fs;
    fs.server = server;
    let size = must("size", fs.size(&mut c.buf, baton_disk::SAMPLE_PATH))?;
    check!(
        size == baton_disk::SAMPLE_LEN,
        "repaired, the disk is served again"
    );
    stop(
        &mut c.buf,
        System {
            host,
            driver: sys.driver,
            fs_task,
            fs,
        },
    )?;
    must("drop", cap_drop(c.reply))?;
    Ok(())
}
