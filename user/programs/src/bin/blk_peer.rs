//! `blk_peer`: a client of the block driver that was handed the driver's port (its
//! bootstrap right) by the task that started the driver (`blk_test`, `docs/drivers.md`).
//! It checks that a bad request is refused, writes the pattern of the sector its argument
//! names there, reads it back, and exits 0 if all went as expected.
#![no_std]
#![no_main]

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;

use baton_rt::ipc::{port_allocate, IpcBuffer};
use baton_rt::{println, Error};
use blk_client::{checksum, pattern, Client};
use blk_proto::*;

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err((what, e)) => {
            println!("blk_peer: {what}: {}", e.name());
            1
        }
    }
}

fn run() -> Result<(), (&'static str, Error)> {
    let sector: u64 = baton_rt::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .ok_or(("argument", Error::InvalidArgument))?;
    let mut c = Client {
        buf: IpcBuffer::new().map_err(|e| ("ipc buffer", e))?,
        reply: port_allocate(0).map_err(|e| ("reply port", e))?,
        driver: baton_rt::start::bootstrap(),
    };
    let r = c
        .call(BLK_WRITE, sector, 100, 0, &[0u8; 100], None)
        .map_err(|e| ("bad write", e))?;
    if r.result != Err(Error::InvalidArgument) {
        return Err(("a 100-byte write was not refused", Error::BadFormat));
    }
    let mut block = [0u8; 512];
    pattern(&mut block, sector);
    c.write(sector, &block).map_err(|e| ("write", e))?;
    let got = c.read_sum(sector, 512).map_err(|e| ("read", e))?;
    if got != checksum(&block) {
        return Err(("the block read back differs", Error::BadFormat));
    }
    println!("blk_peer: wrote and read back sector {sector} through the port it was given");
    Ok(())
}
