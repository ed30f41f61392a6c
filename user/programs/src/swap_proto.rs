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

/// [`start_pager`], then waits until the pager has registered a store of `store` pages
/// (at most 20 s); its task port.
pub fn start_pager_registered(
    buf: &mut IpcBuffer,
    host: u64,
    driver: u64,
    args: &[&str],
    store: u64,
) -> Result<u64, Error> {
    let task = start_pager(buf, host, driver, args)?;
    match until(|s| s.store_slots == store) {
        Ok(_) => Ok(task),
        Err(e) => {
            let _ = baton_rt::task::terminate(task);
            let _ = cap_drop(task);
            Err(e)
        }
    }
}

/// Polls the system's paging counters (every 5 ms, up to 20 s) until `done` holds
/// (`TimedOut` otherwise).
pub fn until(
    done: impl Fn(&baton_rt::paging::PagingStats) -> bool,
) -> Result<baton_rt::paging::PagingStats, Error> {
    for _ in 0..4000 {
        let s = baton_rt::paging::system_stats()?;
        if done(&s) {
            return Ok(s);
        }
        baton_rt::sleep_ns(5_000_000)?;
    }
    Err(Error::TimedOut)
}

/// Wires every range of this task (at most 16 MiB each): a test that kills or starves
/// the default pager keeps its own pages in (its program's private pages, data and stack
/// would otherwise be paged out like any).
pub fn wire_everything() -> Result<(), Error> {
    let mut addr = 0;
    while let Ok(r) = baton_rt::vm::query(addr) {
        if r.wired == 0 && r.end - r.start <= 16 << 20 {
            baton_rt::vm::wire(r.start, r.end - r.start)?;
        }
        addr = r.end;
    }
    Ok(())
}

/// Waits (up to `timeout_ns` for each message) until the task whose port is `task` has
/// ended, its dead-name notification coming to `notify`, then releases the name.
pub fn wait_end(task: u64, notify: u64, timeout_ns: u64) -> Result<(), Error> {
    use baton_abi::ipc::{MsgHeader, HEADER_SIZE, NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME};
    match baton_rt::ipc::port_notify(task, NOTIFY_KIND_DEAD_NAME, notify) {
        Ok(()) => {
            let mut buf = [0u8; 64];
            loop {
                baton_rt::ipc::msg_buf(&mut buf, MSG_RECEIVE, notify, timeout_ns)?;
                let h = MsgHeader::from_bytes(&buf).ok_or(Error::BadFormat)?;
                let word = baton_rt::ipc::data_word(&buf[HEADER_SIZE..], 0);
                if h.id == NOTIFY_DEAD_NAME && word == task {
                    break;
                }
            }
        }
        Err(Error::DeadName) => {}
        Err(e) => return Err(e),
    }
    cap_drop(task)
}

/// Runs `paging_child <mode> <pages>` (the paging tests' child: `docs/testing.md`) and
/// waits (up to `timeout_ns`) for its end.
pub fn run_child(mode: &str, pages: u64, notify: u64, timeout_ns: u64) -> Result<(), Error> {
    let mut n = [0u8; 20];
    let pages = fmt_u64(pages, &mut n);
    let t = baton_rt::task::run("paging_child", 0, &["paging_child", mode, pages], &[])?;
    wait_end(t, notify, timeout_ns)
}

/// `v` in decimal, in `buf`.
pub fn fmt_u64(mut v: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    core::str::from_utf8(&buf[i..]).unwrap_or("0")
}
