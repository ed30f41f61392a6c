//! The protocol between `kmem_hog` and `kmem`: the hog drives one kind of kernel memory to
//! its task's limit, then tells `kmem` so with a call whose id is the step and whose data
//! is `[count, error]` (how many it got before the limit, and the error code the limit
//! gave), and waits for the reply; `kmem` checks that everything it does still works
//! meanwhile, then replies. [`DONE`] ends the hog's run (data: `[0, 0]` if every step hit
//! its limit cleanly, else the failed step).

use baton_rt::ipc::{Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND};
use baton_rt::{sleep_ns, Error, FOREVER};

/// The name `kmem` registers its port under.
pub const SERVICE: &str = "kmem";

/// Step ids.
pub const STEP_MESSAGES: u64 = 1;
/// Ports allocated until the limit.
pub const STEP_PORTS: u64 = 2;
/// Threads created until the limit.
pub const STEP_THREADS: u64 = 3;
/// Memory mapped until the limit.
pub const STEP_MEMORY: u64 = 4;
/// Threads blocked in the process model (each keeping a kernel stack) until the limit.
pub const STEP_STACKS: u64 = 5;
/// The run is over.
pub const DONE: u64 = 99;

/// What each step is called in reports.
pub fn step_name(step: u64) -> &'static str {
    match step {
        STEP_MESSAGES => "queued 64 KiB messages",
        STEP_PORTS => "ports",
        STEP_THREADS => "sleeping threads",
        STEP_MEMORY => "mapped memory",
        STEP_STACKS => "threads blocked in the process model",
        DONE => "done",
        _ => "unknown",
    }
}

/// Tells `kmem` (the send right `to`) that `step` is at its limit and waits for its go
/// ahead. Sending needs no kernel memory of the hog's when `kmem` waits (the message goes
/// straight into its buffer); if it must be queued and the hog is at its limit, the call
/// fails with `NoMemory`, and is tried again a little later.
pub fn report(
    buf: &mut IpcBuffer,
    to: u64,
    reply_port: u64,
    step: u64,
    count: u64,
    error: u64,
) -> Result<(), Error> {
    let mut data = [0u8; 16];
    data[..8].copy_from_slice(&count.to_le_bytes());
    data[8..].copy_from_slice(&error.to_le_bytes());
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: to,
        reply: reply_port,
        id: step,
        ..MsgHeader::default()
    };
    let mut tries = 0;
    loop {
        buf.set(h, &[], &data)?;
        match buf.msg(MSG_SEND | MSG_RECEIVE, reply_port, FOREVER) {
            Err(Error::NoMemory) if tries < 1000 => {
                tries += 1;
                sleep_ns(1_000_000)?;
            }
            other => return other,
        }
    }
}
