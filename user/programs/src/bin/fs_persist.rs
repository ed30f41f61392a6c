//! `fs_persist`: a file survives a reboot (`docs/files.md`). Booted twice on the same disk
//! image (the `fs_persist` test's first boot prepares it): it starts the driver and the file
//! server and opens `/KEEP.TXT`. On the first boot there is none: it creates it, writes a
//! pattern through a shared mapping, syncs (the pager's data return writes it to the disk)
//! and stops the server. On the second it finds the file and reads the pattern back by
//! mapping it.
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

use baton_abi::vm::{PROT_READ, PROT_WRITE};
use baton_rt::check::Failed;
use baton_rt::ipc::{cap_drop, IpcBuffer};
use baton_rt::{memobj, println, Error};

baton_rt::entry!(main);

const TEST: &str = "fs_persist";
const PATH: &str = "/KEEP.TXT";
const LEN: u64 = 2 * 4096 + 300;

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn byte(i: u64) -> u8 {
    (i.wrapping_mul(0x9e37_79b9) >> 7) as u8 ^ 0x3c
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn run() -> Result<(), Failed> {
    let host = baton_rt::start::host_priv();
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let (_, driver) = must("start the driver", blk_client::start_driver(&mut buf, host))?;
    let (_, server) = must(
        "start the server",
        fs_client::start_server(&mut buf, driver),
    )?;
    let fs = must("client", fs_client::Fs::new(server))?;
    let map_len = LEN.next_multiple_of(4096);
    match fs.open(&mut buf, PATH) {
        Ok((obj, size)) => {
            let flags = memobj::map_flags(PROT_READ, PROT_READ, true, 0);
            let va = must("map", memobj::map(obj, map_len, 0, flags))?;
            // SAFETY: `va` maps `map_len` readable bytes of the file, copy-on-write.
            let got = unsafe { core::slice::from_raw_parts(va as *const u8, LEN as usize) };
            let same = size == LEN && got.iter().enumerate().all(|(i, &b)| b == byte(i as u64));
            // SAFETY: ours; `got` is not used past here.
            must("unmap", unsafe { baton_rt::vm::deallocate(va, map_len) })?;
            must("drop", cap_drop(obj))?;
            baton_rt::check!(
                TEST,
                same,
                "the file an earlier boot wrote through a mapping reads back, {size} bytes"
            );
            println!("TEST PASS fs_persist: files persisted across a reboot");
        }
        Err(Error::NotFound) => {
            let (obj, _) = must("create", fs.create(&mut buf, PATH, LEN))?;
            let rw = memobj::map_flags(PROT_READ | PROT_WRITE, PROT_READ | PROT_WRITE, false, 0);
            let va = must("map", memobj::map(obj, map_len, 0, rw))?;
            // SAFETY: `va` maps `map_len` writable bytes of the object, only this task's.
            let out = unsafe { core::slice::from_raw_parts_mut(va as *mut u8, LEN as usize) };
            for (i, b) in out.iter_mut().enumerate() {
                *b = byte(i as u64);
            }
            let pages = must("sync", fs.sync(&mut buf, PATH))?;
            // SAFETY: ours; `out` is not used past here.
            must("unmap", unsafe { baton_rt::vm::deallocate(va, map_len) })?;
            must("drop", cap_drop(obj))?;
            println!("ok: first boot: {PATH} written and synced ({pages} pages)");
            println!("TEST PASS fs_persist: written");
        }
        Err(e) => {
            must("open", Err::<(), _>(e))?;
        }
    }
    must("stop the server", fs.stop(&mut buf))?;
    must("drop", cap_drop(driver))?;
    Ok(())
}
