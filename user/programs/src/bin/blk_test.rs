//! `blk_test`: the virtio block driver from user space (`docs/drivers.md`). Booted with
//! the host-privilege right (`priv=blk_test`) on a machine with a fresh disk image.
//!
//! It plays the boot task's part: starts the driver `blk`, hands it the host-privilege
//! right, and is its client. It writes patterned blocks of 512 B to 64 KiB (in-line and
//! out of line), reads them back and compares checksums; sends bad requests; kills the
//! driver while the device holds a request and sees the request fail; sees the dead
//! driver's DMA frames quarantined; restarts the driver, which resets the device and
//! releases the quarantine, and reads the earlier data back; and ends with the kernel's
//! heap, objects and free frames as a first such round left them.
#![no_std]
#![no_main]

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;

use baton_rt::ipc::{cap_drop, port_allocate, IpcBuffer, MSG_RECEIVE};
use baton_rt::vm::PROT_RW;
use baton_rt::{clock_ns, memobj, println, sleep_ns, Error};
use blk_client::{checksum, pattern, start_driver_with, Client};
use blk_proto::*;

baton_rt::entry!(main);

const SECONDS: u64 = 1_000_000_000;

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => {
            println!("TEST PASS blk");
            0
        }
        Err(what) => {
            println!("TEST FAIL blk: {what}");
            1
        }
    }
}

/// What failed, and why.
struct Msg(&'static str, &'static str);

impl core::fmt::Display for Msg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.0, self.1)
    }
}

type R<T> = Result<T, Msg>;

fn must<T>(what: &'static str, r: Result<T, Error>) -> R<T> {
    r.map_err(|e| Msg(what, e.name()))
}

fn fail(why: &'static str) -> Msg {
    Msg("check", why)
}

/// `n` in decimal, in `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    core::str::from_utf8(&buf[i..]).unwrap_or("0")
}

/// The (heap, objects, free frames) figures a test round must leave as it found them.
fn figures() -> R<(u64, u64, u64)> {
    let s = must("stats", baton_rt::stats())?;
    let v = must("vm stats", baton_rt::vm::system_stats())?;
    Ok((s.heap_used, v.objects, v.frames_free))
}

/// Sizes written and read back, and the sector each goes to.
const SIZES: [(u64, u64); 6] = [
    (512, 0),
    (1024, 8),
    (4096, 64),
    (8192, 256),
    (16384, 1000),
    (65536, 4096),
];

fn run() -> R<()> {
    let host = baton_rt::start::host_priv();
    if host == 0 {
        return Err(fail("no host-privilege right (priv=blk_test)"));
    }
    halted_ticks_grow(host)?;
    let buf = must("ipc buffer", IpcBuffer::new())?;
    let reply = must("reply port", port_allocate(0))?;
    let src = must(
        "source buffer",
        baton_rt::vm::allocate(None, MAX_BYTES * 2, PROT_RW),
    )?;
    // SAFETY: fresh memory of ours, twice `MAX_BYTES`.
    let source = unsafe { core::slice::from_raw_parts_mut(src as *mut u8, 2 * MAX_BYTES as usize) };
    source.fill(0);
    let mut c = Client {
        buf,
        reply,
        driver: 0,
    };
    // Two rounds: the second must leave the kernel's figures as the first left them (the
    // first also makes what this task makes lazily: page tables, map nodes).
    let mut after = [(0, 0, 0); 2];
    for (round, slot) in after.iter_mut().enumerate() {
        println!("blk_test: round {}", round + 1);
        *slot = one_round(&mut c, host, source, round as u64)?;
    }
    if after[0] != after[1] {
        println!(
            "blk_test: after round 1 {:?}, after round 2 {:?}",
            after[0], after[1]
        );
        return Err(fail("the kernel heap, objects or free frames are not back"));
    }
    println!("ok: a second round leaves the kernel heap, objects and free frames as the first did");
    Ok(())
}

/// One round: start the driver, write and read, bad requests, kill it mid-request,
/// restart it, read again, stop it and release its quarantined buffers. The kernel's
/// figures after it (taken once they settle).
fn one_round(c: &mut Client, host: u64, source: &mut [u8], round: u64) -> R<(u64, u64, u64)> {
    let (task, driver) = must(
        "start the driver",
        start_driver_with(&mut c.buf, host, SETUP_ALLOW_HOLD),
    )?;
    c.driver = driver;
    let info = must("info", c.call(BLK_INFO, 0, 0, 0, &[], None))?;
    must("info result", info.result)?;
    let capacity = info.words[0];
    if capacity != 131072 || info.words[1] != MAX_BYTES {
        return Err(fail(
            "the driver reports another capacity than the 64 MiB image",
        ));
    }
    println!("ok: the driver reports {capacity} sectors of 512 bytes, {MAX_BYTES} bytes at most per request");

    // Write every size, then read every one back.
    let mut sums = [0u64; SIZES.len()];
    for (i, &(len, sector)) in SIZES.iter().enumerate() {
        let block = &mut source[..len as usize];
        pattern(block, sector);
        sums[i] = checksum(block);
        must("write", c.write(sector, block))?;
    }
    for (i, &(len, sector)) in SIZES.iter().enumerate() {
        let got = must("read", c.read_sum(sector, len))?;
        if got != sums[i] {
            return Err(fail("a block read back differs from what was written"));
        }
        println!(
            "ok: {len} bytes at sector {sector} read back with the checksum written ({:#018x}, {})",
            got,
            if len > INLINE_MAX {
                "out of line"
            } else {
                "in-line"
            }
        );
    }
    let info = must("info", c.call(BLK_INFO, 0, 0, 0, &[], None))?;
    if info.words[2] == 0 {
        return Err(fail("the device's interrupt never reached the driver"));
    }
    println!(
        "ok: the device's MSI-X interrupt reached the driver as a notification ({} taken)",
        info.words[2]
    );
    // The unwritten sectors between read as zeros (the image is fresh).
    let zeros = checksum(&[0u8; 512]);
    if must("read a blank sector", c.read_sum(2, 512))? != zeros {
        return Err(fail("a sector never written is not zero"));
    }
    println!("ok: a sector never written reads as zeros");

    // Bad requests.
    let bad: [(&str, u64, u64, u64, Error); 7] = [
        ("length 0", BLK_READ, 0, 0, Error::InvalidArgument),
        (
            "length 513 (not whole sectors)",
            BLK_READ,
            0,
            513,
            Error::InvalidArgument,
        ),
        (
            "length 128 KiB",
            BLK_READ,
            0,
            2 * MAX_BYTES,
            Error::TooLarge,
        ),
        (
            "at the end of the disk",
            BLK_READ,
            capacity,
            512,
            Error::NoSpace,
        ),
        (
            "across the end of the disk",
            BLK_READ,
            capacity - 1,
            1024,
            Error::NoSpace,
        ),
        ("at sector 2^64-1", BLK_READ, u64::MAX, 512, Error::NoSpace),
        (
            "an unknown request",
            BLK_READ + 77,
            0,
            512,
            Error::NotSupported,
        ),
    ];
    for (what, id, sector, len, want) in bad {
        let r = must("bad request", c.call(id, sector, len, 0, &[], None))?;
        if r.result != Err(want) {
            println!("blk_test: {what}: {:?}", r.result);
            return Err(fail("a bad request got another answer"));
        }
        println!("ok: a read {what}: {want:?}");
    }
    let r = must(
        "short write",
        c.call(BLK_WRITE, 0, 1024, 0, &source[..512], None),
    )?;
    if r.result != Err(Error::BadFormat) {
        return Err(fail(
            "a write with less data than its length was not refused",
        ));
    }
    println!("ok: a write with 512 bytes of data for a length of 1024: BadFormat");
    if must("read after the refusals", c.read_sum(0, 512))? != sums[0] {
        return Err(fail("a refused write changed the disk"));
    }
    println!("ok: the refused requests changed nothing on the disk");

    // Kill the driver while the device holds a request.
    let tport = must("task port", baton_rt::host::task_port(host, task))?;
    must(
        "held request",
        c.send(BLK_WRITE, 20_000, 512, FLAG_HOLD, &source[..512], None),
    )?;
    sleep_ns(200_000_000).ok();
    must("terminate the driver", baton_rt::task::terminate(tport))?;
    must("drop the task port", cap_drop(tport))?;
    must(
        "wait for the held reply",
        c.buf.msg(MSG_RECEIVE, c.reply, 10 * SECONDS),
    )?;
    match c.take_reply(BLK_WRITE) {
        Err(Error::DeadName) => {
            println!("ok: the driver killed mid-request: its client's request fails with DeadName")
        }
        _ => return Err(fail("the held request did not fail when the driver died")),
    }
    match c.call(BLK_INFO, 0, 0, 0, &[], None) {
        Err(Error::DeadName) | Err(Error::InvalidName) => {
            println!("ok: a request to the dead driver's port fails at once")
        }
        _ => return Err(fail("the dead driver's port still takes requests")),
    }
    must("drop the dead name", cap_drop(c.driver))?;
    let quarantined = wait_quarantined(host)?;
    println!("ok: the dead driver's DMA buffers are quarantined ({quarantined} pages), not freed");
    // A DMA buffer made now does not get a quarantined frame.
    let probe = must("probe dma", memobj::dma(4096, host))?;
    let probe_pa = must("probe info", memobj::info(probe))?.phys;
    must("drop the probe", cap_drop(probe))?;
    println!("ok: a new DMA buffer ({probe_pa:#x}) comes from other frames while they wait");

    // Restart: the new instance resets the device and releases the quarantine.
    let (_task, driver) = must(
        "restart the driver",
        start_driver_with(&mut c.buf, host, SETUP_ALLOW_HOLD),
    )?;
    c.driver = driver;
    must(
        "info after restart",
        must("info", c.call(BLK_INFO, 0, 0, 0, &[], None))?.result,
    )?;
    if must("quarantine after restart", memobj::dma_quarantined(host))? != 0 {
        return Err(fail("the restarted driver did not release the quarantine"));
    }
    println!("ok: the restarted driver reset the device and released the quarantine");
    for (i, &(len, sector)) in SIZES.iter().enumerate() {
        if must("read after restart", c.read_sum(sector, len))? != sums[i] {
            return Err(fail("data written before the crash is gone"));
        }
    }
    println!("ok: after the restart every block written before reads back intact");
    // Another client: this task (as the boot task would) hands the driver's port to a
    // task it starts, which writes a block this task then reads back.
    let sector = 30_000 + 8 * round;
    must("clear the peer's block", c.write(sector, &[0u8; 512]))?;
    let mut want = [0u8; 512];
    pattern(&mut want, sector);
    let want = checksum(&want);
    let mut text = [0u8; 20];
    let arg = decimal(sector, &mut text);
    must(
        "spawn blk_peer",
        baton_rt::sys::spawn_args("blk_peer", c.driver, &["blk_peer", arg], &[]),
    )?;
    let deadline = clock_ns() + 10 * SECONDS;
    while must("read the peer's block", c.read_sum(sector, 512))? != want {
        if clock_ns() > deadline {
            return Err(fail("the second client's block never arrived"));
        }
        sleep_ns(10_000_000).ok();
    }
    println!("ok: a second client, handed the driver's port, wrote a block this task reads back");
    // The driver ends when its last send right goes; its buffers are quarantined until
    // released (it reset the device on its way out).
    must("drop the driver's port", cap_drop(c.driver))?;
    let q = wait_quarantined(host)?;
    // The driver's task is gone and nothing else runs: the quarantined pages are still
    // allocated, and the release gives exactly them back to the frame allocator.
    let held = figures()?.2;
    let freed = must("release", memobj::dma_quarantine_release(host))?;
    if freed != q {
        return Err(fail(
            "the release freed another number of pages than were held",
        ));
    }
    let free_now = figures()?.2;
    if free_now != held + freed {
        println!(
            "blk_test: free frames {held} before the release, {free_now} after, {freed} released"
        );
        return Err(fail(
            "the quarantined pages were not held as frames until the release",
        ));
    }
    println!("ok: the quarantined pages were frames held until the release: {freed} more free frames after it");
    if must(
        "quarantine after the release",
        memobj::dma_quarantined(host),
    )? != 0
    {
        return Err(fail("pages are still quarantined after the release"));
    }
    // The ended driver's task goes asynchronously: wait until the figures settle.
    let mut last = figures()?;
    for _ in 0..50 {
        sleep_ns(20_000_000).ok();
        let now = figures()?;
        if now == last {
            break;
        }
        last = now;
    }
    println!("ok: the driver stopped and its {freed} quarantined pages were released");
    Ok(last)
}

/// The kernel's halted-ticks counter (what the `blk.*` benchmarks subtract): it grows
/// while this task sleeps (its CPU, with nothing else to run, halts), and by no more than
/// the TSC advanced on all CPUs together.
fn halted_ticks_grow(host: u64) -> R<()> {
    let cpus = must("stats", baton_rt::stats())?.cpus;
    let h0 = must("halted_ticks", baton_rt::host::halted_ticks(host))?;
    let t0 = baton_rt::rdtsc_ordered();
    sleep_ns(50_000_000).ok();
    let t1 = baton_rt::rdtsc_ordered();
    let h1 = must("halted_ticks", baton_rt::host::halted_ticks(host))?;
    let halted = h1.wrapping_sub(h0);
    if halted == 0 || halted > (t1 - t0) * cpus {
        println!(
            "blk_test: {halted} ticks halted in a window of {} on {cpus} CPUs",
            t1 - t0
        );
        return Err(fail(
            "the halted-ticks counter does not count the halted time",
        ));
    }
    if baton_rt::host::halted_ticks(0) != Err(Error::Denied) {
        return Err(fail(
            "halted_ticks without the host-privilege right was not refused",
        ));
    }
    println!(
        "ok: halted_ticks grows while this task sleeps, by no more than the window on every CPU"
    );
    Ok(())
}

/// Waits (at most 5 s) for a dead driver's DMA pages to be quarantined; how many.
fn wait_quarantined(host: u64) -> R<u64> {
    let deadline = clock_ns() + 5 * SECONDS;
    loop {
        let q = must("quarantined", memobj::dma_quarantined(host))?;
        if q > 0 {
            return Ok(q);
        }
        if clock_ns() > deadline {
            return Err(fail("no DMA page was quarantined when the driver ended"));
        }
        sleep_ns(5_000_000).ok();
    }
}
