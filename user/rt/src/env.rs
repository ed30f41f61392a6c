//! A program's arguments and environment, from the start message its creator passed to
//! `spawn` (`baton_abi::start`), which waits on the task's start port
//! ([`crate::start::start_port`]).
//!
//! The first call of [`args`] or [`vars`] receives the message (without blocking: it was
//! queued before the task started) into a buffer on the heap and keeps it; a task started
//! without one (a boot task) has no arguments and an empty environment.
//!
//! ```ignore
//! for (i, a) in baton_rt::env::args().enumerate() {
//!     println!("argument {i}: {a}");
//! }
//! let home = baton_rt::env::var("HOME");
//! ```

use crate::ipc::msg_buf;
use crate::sync::RawMutex;
use alloc::vec::Vec;
use baton_abi::ipc::{MsgHeader, HEADER_SIZE, MSG_RECEIVE};
use baton_abi::start::{Start, START_DATA_MAX, START_MESSAGE};
use core::cell::UnsafeCell;

/// The start message's data once received (`None` before the first call).
struct Kept(UnsafeCell<Option<Vec<u8>>>);
// SAFETY: `KEPT` is written once, under `LOCK`, before any reference to its contents is
// handed out; afterwards it is only read.
unsafe impl Sync for Kept {}

static KEPT: Kept = Kept(UnsafeCell::new(None));
static LOCK: RawMutex = RawMutex::new();

/// The decoded start message (empty when there is none or it does not decode).
fn start() -> Start<'static> {
    // A task started without a start port (a boot task, or one its creator started with
    // no message) has no arguments: say so without touching the kept buffer, its lock or
    // the heap, so that a program that only asks starts in as few pages as it can (the
    // start port's name is set once, before `main`).
    if crate::start::start_port() == 0 {
        return Start::EMPTY;
    }
    LOCK.lock();
    // SAFETY: `LOCK` is held, so no other thread writes `KEPT` now, and it is written only
    // while it is `None` (below): a reference handed out earlier is never invalidated.
    let kept = unsafe { &mut *KEPT.0.get() };
    if kept.is_none() {
        *kept = Some(receive().unwrap_or_default());
    }
    LOCK.unlock();
    // SAFETY: `KEPT` is `Some` now and never written again, so the shared reference lives
    // as long as the program.
    let data: &'static [u8] = unsafe { (*KEPT.0.get()).as_deref().unwrap_or(&[]) };
    Start::decode(data).unwrap_or(Start::EMPTY)
}

/// Receives the start message from the start port, if the task has one.
fn receive() -> Option<Vec<u8>> {
    let port = crate::start::start_port();
    if port == 0 {
        return None;
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(HEADER_SIZE + START_DATA_MAX).ok()?;
    buf.resize(HEADER_SIZE + START_DATA_MAX, 0);
    msg_buf(&mut buf, MSG_RECEIVE, port, 0).ok()?;
    let header = MsgHeader::from_bytes(buf.get(..HEADER_SIZE)?)?;
    if header.id != START_MESSAGE {
        return None;
    }
    let end = (header.size as usize).min(buf.len());
    let data = buf.get(HEADER_SIZE..end)?.to_vec();
    // The port has done its job.
    let _ = crate::ipc::cap_drop(port);
    Some(data)
}

/// The program's arguments, in order (by convention the first is the program's name).
pub fn args() -> impl Iterator<Item = &'static str> {
    start().args()
}

/// The program's environment, as `(name, value)` pairs.
pub fn vars() -> impl Iterator<Item = (&'static str, &'static str)> {
    start().env()
}

/// The value of environment variable `name`, if set.
pub fn var(name: &str) -> Option<&'static str> {
    vars().find(|&(n, _)| n == name).map(|(_, v)| v)
}
