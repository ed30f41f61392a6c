//! The `blk.read.4k` and `blk.write.4k` benchmarks of `bench` (`docs/benchmarks.md`,
//! `docs/drivers.md`): one request of 4 KiB from a client to the user-level virtio block
//! driver `blk` and back, the disk's own time left out. Included by `bench.rs`.
//!
//! The driver waits for the device's interrupt, and while every CPU halts QEMU's
//! `-icount` jumps the TSC forward to the next timer deadline. So
//! each figure is the TSC delta of the round trip minus the kernel's halted-ticks delta
//! (`halted_ticks`) over the same window: the instructions executed by the client, the
//! kernel and the driver (the interrupt's delivery included), not the time the device took.
//!
//! The data goes out of line both ways (4 KiB is more than the protocol's in-line limit):
//! a write sends a copy-on-write region, a read gets one moved back.

use crate::blk_client::{free_region, start_driver, Client};
use crate::blk_proto::*;
use baton_rt::ipc::{cap_drop, port_allocate, IpcBuffer};
use baton_rt::vm::{self, PROT_RW};
use baton_rt::{println, rdtsc_ordered, Error};

/// Iterations not recorded.
const WARM: usize = 5;
/// Recorded iterations.
const RUNS: usize = 50;
/// The first sector the rows write: past the partition table, and with all of their
/// `WARM + RUNS` blocks of 8 sectors before the first partition.
const FIRST_BENCH_SECTOR: u64 = 8;
const _: () = assert!(FIRST_BENCH_SECTOR + 8 * (WARM + RUNS) as u64 <= baton_disk::FIRST_SECTOR);

/// Runs both rows (`table`: the shell's table instead of `BENCH` lines).
pub fn run(table: bool) -> Result<(), Error> {
    let host = baton_rt::start::host_priv();
    if host == 0 {
        println!(
            "bench: no host-privilege right to start the disk driver: the blk rows are skipped"
        );
        return Ok(());
    }
    let mut buf = IpcBuffer::new()?;
    let (_task, driver) = start_driver(&mut buf, host)?;
    let mut c = Client {
        buf,
        reply: port_allocate(0)?,
        driver,
    };
    // Without a disk (a machine started without one) the driver finds no device and ends.
    if !c
        .call(BLK_INFO, 0, 0, 0, &[], None)
        .is_ok_and(|r| r.result.is_ok())
    {
        println!("bench: no virtio block device: the blk rows are skipped");
        let _ = cap_drop(c.driver);
        return Ok(());
    }
    let page = vm::allocate(None, 4096, PROT_RW)?;
    // SAFETY: a fresh page of ours.
    let data = unsafe { core::slice::from_raw_parts_mut(page as *mut u8, 4096) };
    for (i, b) in data.iter_mut().enumerate() {
        *b = i as u8;
    }
    for write in [false, true] {
        let mut samples = [0u64; RUNS];
        for i in 0..WARM + RUNS {
            // In the gap between the partition table (sector 0) and the first partition
            // (sector 2048): the benchmark's writes leave the table, the file system and
            // the swap area (which the paging rows use next) alone.
            let sector = FIRST_BENCH_SECTOR + 8 * i as u64;
            let h0 = baton_rt::host::halted_ticks(host)?;
            let t0 = rdtsc_ordered();
            let r = if write {
                c.call(BLK_WRITE, sector, 4096, 0, &[], Some((page, 4096)))?
            } else {
                c.call(BLK_READ, sector, 4096, 0, &[], None)?
            };
            let t1 = rdtsc_ordered();
            let h1 = baton_rt::host::halted_ticks(host)?;
            r.result?;
            if let Some((va, size)) = r.data {
                free_region(va, size);
            }
            if let Some(s) = i.checked_sub(WARM).and_then(|j| samples.get_mut(j)) {
                *s = t1.wrapping_sub(t0).saturating_sub(h1.wrapping_sub(h0));
            }
        }
        samples.sort_unstable();
        let (median, min, max) = (samples[(RUNS - 1) / 2], samples[0], samples[RUNS - 1]);
        let name = if write { "blk.write.4k" } else { "blk.read.4k" };
        if table {
            println!("{name:<34} {median:>9} {min:>9} {max:>9}");
        } else {
            println!(
                "BENCH name={name} unit=instructions iterations={RUNS} median={median} min={min} max={max}"
            );
        }
    }
    // The driver ends with its last send right; its DMA buffers then wait in quarantine
    // until released (it resets the device on its way out).
    cap_drop(c.driver)?;
    // SAFETY: allocated above; nothing refers to it any more.
    unsafe { vm::deallocate(page, 4096) }?;
    for _ in 0..500 {
        if baton_rt::memobj::dma_quarantined(host)? > 0 {
            break;
        }
        baton_rt::sleep_ns(10_000_000)?;
    }
    baton_rt::memobj::dma_quarantine_release(host)?;
    Ok(())
}
