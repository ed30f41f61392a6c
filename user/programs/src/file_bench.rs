//! The `file.read.56k` rows of `bench` (`docs/benchmarks.md`, `docs/files.md`): Accent's
//! Table 3-4 measurement, a 56 KiB file read by mapping it copy-on-write and touching each
//! of its 14 pages (seed 002, section 2.1.4's example). Included by `bench.rs`.
//!
//! - `file.read.56k`: cold: the file server has just started (no page of the file in
//!   memory, no disk block in its cache), so each page's first touch is a fault, a
//!   `DATA_REQUEST` to the server, its disk reads through the block driver and its
//!   `pager_supply`;
//! - `file.read.56k.warm`: the same with every page resident in the file's object (mapped
//!   and read before): the faults are memory fills.
//!
//! The window is the `vm_map`, the 14 touches and the unmap; the open before it is not in
//! it, and is its own row, `file.open` (Accent's "request file from server"): the first
//! `FS_OPEN` of the file after the server started, a round trip that looks the path up on
//! the disk (the folder's blocks read through the driver) and makes the file's object. While the driver waits for the disk every CPU halts and QEMU's `-icount` jumps the
//! TSC forward, so each figure is the TSC delta minus the kernel's halted ticks over the
//! window (`halted_ticks`), as for `blk.read.4k`: instructions executed, by the client, the
//! kernel, the file server and the driver, not the disk's time.

use crate::blk_client::start_driver;
use crate::fs_client::{start_server, Fs};
use baton_abi::ipc::NOTIFY_KIND_DEAD_NAME;
use baton_abi::vm::PROT_READ;
use baton_rt::ipc::{cap_drop, msg_buf, port_allocate, port_notify, IpcBuffer, MSG_RECEIVE};
use baton_rt::{memobj, println, rdtsc_ordered, Error};

/// Cold runs (each starts a new file server, once the last one has ended) and warm runs.
const COLD: usize = 9;
const WARM: usize = 31;

fn report(table: bool, name: &str, samples: &mut [u64]) {
    samples.sort_unstable();
    let n = samples.len();
    let (median, min, max) = (samples[(n - 1) / 2], samples[0], samples[n - 1]);
    if table {
        println!("{name:<34} {median:>9} {min:>9} {max:>9}");
    } else {
        println!(
            "BENCH name={name} unit=instructions iterations={n} median={median} min={min} max={max}"
        );
    }
}

/// Maps the open file `obj` of `size` bytes copy-on-write, reads a word of each page and
/// unmaps it: the instructions it took (halted ticks left out) and the words' sum.
fn touch(host: u64, obj: u64, size: u64) -> Result<(u64, u64), Error> {
    let flags = memobj::map_flags(PROT_READ, PROT_READ, true, 0);
    let h0 = baton_rt::host::halted_ticks(host)?;
    let t0 = rdtsc_ordered();
    let va = memobj::map(obj, size, 0, flags)?;
    let mut sum = 0u64;
    let mut at = va;
    while at < va + size {
        // SAFETY: `va` maps `size` readable bytes of the file.
        sum = sum.wrapping_add(unsafe { core::ptr::read_volatile(at as *const u64) });
        at += 4096;
    }
    // SAFETY: our mapping; nothing refers to it.
    unsafe { baton_rt::vm::deallocate(va, size) }?;
    let t1 = rdtsc_ordered();
    let h1 = baton_rt::host::halted_ticks(host)?;
    Ok((t1.wrapping_sub(t0).saturating_sub(h1.wrapping_sub(h0)), sum))
}

/// Runs both rows (`table`: the shell's table instead of `BENCH` lines).
pub fn run(table: bool) -> Result<(), Error> {
    let host = baton_rt::start::host_priv();
    if host == 0 {
        println!("bench: no host-privilege right: the file rows are skipped");
        return Ok(());
    }
    let mut buf = IpcBuffer::new()?;
    let (_task, driver) = start_driver(&mut buf, host)?;
    let mut cold = [0u64; COLD];
    let mut open = [0u64; COLD];
    let mut warm = [0u64; WARM];
    let mut want = None;
    for (i, slot) in cold.iter_mut().enumerate() {
        let (task, server) = match start_server(&mut buf, driver) {
            Ok(started) => started,
            Err(e) => {
                println!(
                    "bench: no file server ({}): the file rows are skipped",
                    e.name()
                );
                let _ = cap_drop(driver);
                return Ok(());
            }
        };
        let fs = Fs::new(server)?;
        let h0 = baton_rt::host::halted_ticks(host)?;
        let t0 = rdtsc_ordered();
        let (obj, size) = fs.open(&mut buf, baton_disk::SAMPLE_PATH)?;
        let t1 = rdtsc_ordered();
        let h1 = baton_rt::host::halted_ticks(host)?;
        open[i] = t1.wrapping_sub(t0).saturating_sub(h1.wrapping_sub(h0));
        let (took, sum) = touch(host, obj, size)?;
        if *want.get_or_insert(sum) != sum {
            return Err(Error::BadFormat);
        }
        *slot = took;
        if i == COLD - 1 {
            for w in warm.iter_mut() {
                *w = touch(host, obj, size)?.0;
            }
        }
        cap_drop(obj)?;
        // The next run starts once this server has ended (nothing of it runs meanwhile).
        let watch = port_allocate(0)?;
        let tp = baton_rt::host::task_port(host, task)?;
        port_notify(tp, NOTIFY_KIND_DEAD_NAME, watch)?;
        fs.stop(&mut buf)?;
        let mut m = [0u8; 64];
        msg_buf(&mut m, MSG_RECEIVE, watch, 10_000_000_000)?;
        cap_drop(tp)?;
        cap_drop(watch)?;
        cap_drop(fs.server)?;
    }
    report(table, "file.read.56k", &mut cold);
    report(table, "file.read.56k.warm", &mut warm);
    report(table, "file.open", &mut open);
    cap_drop(driver)?;
    for _ in 0..500 {
        if memobj::dma_quarantined(host)? > 0 {
            break;
        }
        baton_rt::sleep_ns(10_000_000)?;
    }
    memobj::dma_quarantine_release(host)?;
    Ok(())
}
