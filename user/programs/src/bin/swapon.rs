//! `swapon`: turns paging to the disk on in the system a person boots (`cargo xtask run`
//! starts it after the shell, with the host-privilege right: `docs/vm.md`, "Paging").
//!
//! It starts the user-level disk driver `blk` (`docs/drivers.md`) and the default pager
//! `dpager` on the disk's swap partition (the pager finds it in the partition table, and
//! refuses to start without one), waits until the pager has registered with the kernel,
//! says so, and ends: the pager holds the driver's port from then on, and the name server
//! holds it under `DISK_NAME` for the other programs that serve the disk (the shell's file
//! server), so that the device has one driver. The shell's
//! `paging` command shows the counters; booting with `pageable=N` (N frames of user
//! memory, at least 64) makes a small machine page.
#![no_std]
#![no_main]

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../swap_proto.rs"]
mod swap_proto;

use baton_rt::idl_rt::SendRight;
use baton_rt::ipc::{cap_drop, IpcBuffer};
use baton_rt::names::NamesClient;
use baton_rt::rpc::Rpc;
use baton_rt::{paging, println, Error};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(slots) => {
            let s = paging::system_stats().ok();
            println!(
                "swapon: paging to the disk's swap area: {slots} pages; user memory limited to {} frames (shell: `paging`)",
                s.map_or(0, |s| s.pageable_limit)
            );
            0
        }
        Err((what, e)) => {
            println!("swapon: no paging: {what}: {}", e.name());
            1
        }
    }
}

fn run() -> Result<u64, (&'static str, Error)> {
    let host = match baton_rt::start::host_priv() {
        0 => {
            return Err((
                "no host-privilege right (boot it with priv=swapon)",
                Error::Denied,
            ))
        }
        h => h,
    };
    let mut buf = IpcBuffer::new().map_err(|e| ("IPC buffer", e))?;
    let (_driver, port) =
        blk_client::start_driver(&mut buf, host).map_err(|e| ("start the disk driver", e))?;
    let pager = swap_proto::start_pager(&mut buf, host, port, &["dpager"]);
    // The pager holds its own send right to the driver now (or failed to start, and the
    // driver ends with its last right). This one goes to the name server, the system's one
    // driver of the disk, which the shell's file server uses too.
    let names = baton_rt::start::bootstrap();
    let registered = match (&pager, names) {
        (Ok(_), 1..) => Rpc::new().and_then(|mut rpc| {
            NamesClient::new(&mut rpc, names).register(blk_proto::DISK_NAME, SendRight(port))
        }),
        _ => Err(Error::NotFound),
    };
    if registered.is_err() {
        let _ = cap_drop(port);
    }
    let pager = pager.map_err(|e| ("start the default pager", e))?;
    // The pager registers once it has read the partition table; it ends if it found none.
    for _ in 0..500 {
        match paging::system_stats() {
            Ok(s) if s.store_slots > 0 => {
                let _ = cap_drop(pager);
                return Ok(s.store_slots);
            }
            _ => {}
        }
        if baton_rt::sleep_ns(10_000_000).is_err() {
            break;
        }
    }
    let _ = cap_drop(pager);
    Err((
        "the default pager did not register (see its message)",
        Error::NotFound,
    ))
}
