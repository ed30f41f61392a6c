//! `blk_persist`: data on the virtio disk survives a reboot (`docs/drivers.md`). Booted
//! twice on the same disk image (`priv=blk_persist`; the `blk_persist` test's first boot
//! prepares the disk): it starts the driver and reads sector 100. On a fresh disk there is
//! no mark there: it writes 64 KiB of a pattern at sector 200 and then the mark with the
//! pattern's checksum, and says so. Finding the mark, it reads the 64 KiB back and checks
//! them against the checksum the earlier boot wrote. Either way it stops the driver and
//! releases its quarantined DMA buffers.
#![no_std]
#![no_main]

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;

use baton_rt::ipc::{cap_drop, port_allocate, IpcBuffer};
use baton_rt::vm::PROT_RW;
use baton_rt::{memobj, println, sleep_ns, Error};
use blk_client::{checksum, start_driver, Client};
use blk_proto::*;

baton_rt::entry!(main);

/// The mark's first word.
const MAGIC: u64 = 0xba70_0d15_c0de_0001;
const MARK_SECTOR: u64 = 100;
const DATA_SECTOR: u64 = 200;

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err((what, e)) => {
            println!("TEST FAIL blk_persist: {what}: {}", e.name());
            1
        }
    }
}

fn run() -> Result<(), (&'static str, Error)> {
    let host = baton_rt::start::host_priv();
    let mut buf = IpcBuffer::new().map_err(|e| ("ipc buffer", e))?;
    let (_task, driver) = start_driver(&mut buf, host).map_err(|e| ("start the driver", e))?;
    let mut c = Client {
        buf,
        reply: port_allocate(0).map_err(|e| ("reply port", e))?,
        driver,
    };
    let mark = c
        .call(BLK_READ, MARK_SECTOR, 512, 0, &[], None)
        .map_err(|e| ("read the mark", e))?;
    mark.result.map_err(|e| ("read the mark", e))?;
    // A driver set up without `SETUP_ALLOW_HOLD` (as the system's is) refuses held
    // requests: no client can stall it.
    let held = c
        .call(BLK_READ, MARK_SECTOR, 512, FLAG_HOLD, &[], None)
        .map_err(|e| ("a held read", e))?;
    if held.result != Err(Error::Denied) {
        println!(
            "TEST FAIL blk_persist: a held read on a driver that allows none: {:?}",
            held.result
        );
        return Ok(());
    }
    println!("ok: a held request is refused (Denied) by a driver set up without holds");
    let word = |i: usize| {
        let b = mark.inline.get(i * 8..i * 8 + 8).unwrap_or(&[0; 8]);
        u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
    };
    if word(0) == MAGIC {
        let want = word(1);
        let got = c
            .read_sum(DATA_SECTOR, MAX_BYTES)
            .map_err(|e| ("read the data back", e))?;
        if got != want {
            println!("TEST FAIL blk_persist: the data differs from what the earlier boot wrote");
            return Ok(());
        }
        println!("ok: the 64 KiB an earlier boot wrote read back with its checksum ({got:#018x})");
        println!("TEST PASS blk_persist: data persisted across a reboot");
    } else {
        let va = baton_rt::vm::allocate(None, MAX_BYTES, PROT_RW).map_err(|e| ("memory", e))?;
        // SAFETY: fresh memory of ours, `MAX_BYTES` long.
        let data = unsafe { core::slice::from_raw_parts_mut(va as *mut u8, MAX_BYTES as usize) };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for b in data.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let sum = checksum(data);
        c.write(DATA_SECTOR, data)
            .map_err(|e| ("write the data", e))?;
        let mut sector = [0u8; 512];
        sector[..8].copy_from_slice(&MAGIC.to_le_bytes());
        sector[8..16].copy_from_slice(&sum.to_le_bytes());
        c.write(MARK_SECTOR, &sector)
            .map_err(|e| ("write the mark", e))?;
        // SAFETY: allocated above; nothing refers to it any more.
        let _ = unsafe { baton_rt::vm::deallocate(va, MAX_BYTES) };
        println!("ok: first boot: 64 KiB written with the checksum {sum:#018x}");
        println!("TEST PASS blk_persist: written");
    }
    // Stop the driver (it resets the device as it ends) and release its buffers.
    cap_drop(c.driver).map_err(|e| ("drop the driver's port", e))?;
    for _ in 0..500 {
        if memobj::dma_quarantined(host).map_err(|e| ("quarantined", e))? > 0 {
            break;
        }
        sleep_ns(10_000_000).ok();
    }
    memobj::dma_quarantine_release(host).map_err(|e| ("release", e))?;
    Ok(())
}
