//! Starting the default pager (`dpager`) on the disk (`docs/vm.md`, "Paging"): the
//! handshake between whoever starts it and the pager, as `blk_client::start_driver` is
//! for the driver.
//!
//! The starter spawns `dpager` with a port of its own as the bootstrap right; the pager
//! answers with [`DPAGER_HELLO`] carrying a send right to a port of its; the starter sends
//! [`DPAGER_SETUP`] there with two port descriptors: the host-privilege right (which the
//! pager registers with) and a send right to the block driver's port (which its swap
//! area is reached through).
#![allow(dead_code)] // each program uses part of it

use baton_abi::ipc::{Descriptor, Disposition, DESC_PORT};
use baton_rt::ipc::{cap_drop, port_allocate, IpcBuffer, MSG_RECEIVE};
use baton_rt::Error;

/// The pager's first message to its bootstrap port: a send right to its setup port.
pub const DPAGER_HELLO: u64 = 0x0d9a_0001;
/// The starter's answer: the host-privilege right and the driver's port, in that order.
pub const DPAGER_SETUP: u64 = 0x0d9a_0002;

/// Starts `dpager` with `args` (its first one `dpager`) on the swap area of the disk that
/// `driver` serves; its task port. The pager registers with the kernel on its own after
/// the setup: wait for `paging_stats` to show its store.
pub fn start_pager(
    buf: &mut IpcBuffer,
    host: u64,
    driver: u64,
    args: &[&str],
) -> Result<u64, Error> {
    let boot = port_allocate(0)?;
    let task = match baton_rt::task::run("dpager", boot, args, &[]) {
        Ok(t) => t,
        Err(e) => {
            let _ = cap_drop(boot);
            return Err(e);
        }
    };
    let hello = buf.msg(MSG_RECEIVE, boot, 10_000_000_000).and_then(|()| {
        let h = buf.header();
        match buf.descriptor(0) {
            Some(d) if h.id == DPAGER_HELLO && d.kind == DESC_PORT => Ok(d.value),
            _ => Err(Error::BadFormat),
        }
    });
    let _ = cap_drop(boot);
    let setup = hello.and_then(|to| {
        let sent = buf.send(
            to,
            DPAGER_SETUP,
            &[
                Descriptor::port(host, Disposition::CopySend),
                Descriptor::port(driver, Disposition::CopySend),
            ],
            &[],
        );
        let _ = cap_drop(to);
        sent
    });
    if let Err(e) = setup {
        let _ = baton_rt::task::terminate(task);
        let _ = cap_drop(task);
        return Err(e);
    }
    Ok(task)
}
