//! The host-privilege calls and the driver objects: interrupt lines, I/O ports, and the
//! calls that list tasks, threads and rights ([`baton_abi::host`]).
//!
//! Every call that makes an object or looks at other tasks takes the caller's name for its
//! send right to the host-privilege port ([`crate::start::host_priv`] in a boot task the
//! command line's `priv=` names) and fails with [`Error::Denied`] without it.

use baton_abi::host::{
    NameRecord, TaskRecord, ThreadRecord, NAME_RECORD_WORDS, RECORDS_MAX, TASK_RECORD_WORDS,
    THREAD_RECORD_WORDS,
};
use baton_abi::{decode_result, Error, Sys};

use crate::raw::{syscall1, syscall3, syscall6};

/// Binds ISA interrupt line `irq` to the port `port` (a receive or send right): each
/// interrupt arrives there as a `NOTIFY_INTERRUPT` notification, the next only after
/// [`irq_ack`]. Returns the interrupt object's name.
pub fn irq_attach(irq: u64, port: u64, host_priv: u64) -> Result<u64, Error> {
    // SAFETY: the call touches no user memory.
    decode_result(unsafe { syscall3(Sys::IrqAttach as u64, irq, port, host_priv) })
}

/// Acknowledges the last notification of interrupt object `irq_object`.
pub fn irq_ack(irq_object: u64) -> Result<(), Error> {
    // SAFETY: the call touches no user memory.
    decode_result(unsafe { syscall1(Sys::IrqAck as u64, irq_object) }).map(|_| ())
}

/// Binds a free message-signalled interrupt vector to `port` (notifications as for
/// [`irq_attach`]); the interrupt object's name, for [`irq_ack`] and [`msi_message`].
pub fn msi_attach(port: u64, host_priv: u64) -> Result<u64, Error> {
    // SAFETY: the call touches no user memory.
    decode_result(unsafe { syscall3(Sys::MsiAttach as u64, port, host_priv, 0) })
}

/// The (address, data) the device must write to raise the MSI line of `irq_object`.
pub fn msi_message(irq_object: u64) -> Result<(u64, u32), Error> {
    // SAFETY: the call touches no user memory.
    let m = decode_result(unsafe { syscall1(Sys::MsiMessage as u64, irq_object) })?;
    Ok((m & 0xffff_ffff, (m >> 32) as u32))
}

/// An I/O-ports object for the ports `base .. base + count`; its name.
pub fn ioport_create(base: u64, count: u64, host_priv: u64) -> Result<u64, Error> {
    // SAFETY: the call touches no user memory.
    decode_result(unsafe { syscall3(Sys::IoPortCreate as u64, base, count, host_priv) })
}

/// Reads `width` bytes (1, 2 or 4) from I/O port `port` through the object `io`.
pub fn io_in(io: u64, port: u64, width: u64) -> Result<u64, Error> {
    // SAFETY: the call touches no user memory.
    decode_result(unsafe { syscall3(Sys::IoIn as u64, io, port, width) })
}

/// Writes the low `width` bytes of `value` to I/O port `port` through the object `io`.
pub fn io_out(io: u64, port: u64, width: u64, value: u64) -> Result<(), Error> {
    // SAFETY: the call touches no user memory.
    decode_result(unsafe { syscall6(Sys::IoOut as u64, io, port, width, value, 0, 0) }).map(|_| ())
}

/// A send right to task `task`'s task port (any task).
pub fn task_port(host_priv: u64, task: u64) -> Result<u64, Error> {
    // SAFETY: the call touches no user memory.
    decode_result(unsafe { syscall6(Sys::HostTaskPort as u64, host_priv, task, 0, 0, 0, 0) })
}

/// Ends every task and powers the machine off; returns only with an error.
pub fn shutdown(host_priv: u64) -> Error {
    // SAFETY: the call touches no user memory.
    match decode_result(unsafe { syscall1(Sys::HostShutdown as u64, host_priv) }) {
        Ok(_) => Error::InvalidArgument,
        Err(e) => e,
    }
}

/// Turns the kernel's timeline trace on with `records` records per CPU (0: the default),
/// charged to this task; returns the records per CPU. `Busy` when it is on already.
pub fn trace_start(host_priv: u64, records: u64) -> Result<u64, Error> {
    // SAFETY: the call touches no user memory.
    decode_result(unsafe {
        syscall3(
            Sys::HostTrace as u64,
            host_priv,
            baton_abi::host::TRACE_START,
            records,
        )
    })
}

/// Turns the kernel's timeline trace off and has it printed to the console as `TRACE`
/// lines (`cargo xtask trace --log` turns a saved console log into a trace file); returns
/// how many records were printed.
pub fn trace_stop(host_priv: u64) -> Result<u64, Error> {
    // SAFETY: the call touches no user memory.
    decode_result(unsafe {
        syscall3(
            Sys::HostTrace as u64,
            host_priv,
            baton_abi::host::TRACE_STOP,
            0,
        )
    })
}

/// Calls `call` (a `host_*` listing) with a word buffer for [`RECORDS_MAX`] records of
/// `words` words, then hands each record's words to `each`; returns how many there are.
fn listing<const W: usize>(
    call: Sys,
    host_priv: u64,
    task: Option<u64>,
    words: &mut alloc::vec::Vec<u64>,
    mut each: impl FnMut(&[u64; W]),
) -> Result<u64, Error> {
    words.clear();
    words.resize(RECORDS_MAX as usize * W, 0);
    let buf = words.as_mut_ptr() as u64;
    let raw = match task {
        // SAFETY: the kernel writes at most RECORDS_MAX records of W words into `words`,
        // which holds that many, and nothing else.
        None => unsafe { syscall6(call as u64, host_priv, buf, RECORDS_MAX, 0, 0, 0) },
        // SAFETY: as above.
        Some(t) => unsafe { syscall6(call as u64, host_priv, t, buf, RECORDS_MAX, 0, 0) },
    };
    let total = decode_result(raw)?;
    for chunk in words.chunks_exact(W).take(total.min(RECORDS_MAX) as usize) {
        if let Ok(w) = <&[u64; W]>::try_from(chunk) {
            each(w);
        }
    }
    Ok(total)
}

/// Every task (at most [`RECORDS_MAX`]), by id.
pub fn tasks(host_priv: u64) -> Result<alloc::vec::Vec<TaskRecord>, Error> {
    let mut words = alloc::vec::Vec::new();
    let mut out = alloc::vec::Vec::new();
    listing::<TASK_RECORD_WORDS>(Sys::HostTasks, host_priv, None, &mut words, |w| {
        out.push(TaskRecord::from_words(w))
    })?;
    Ok(out)
}

/// Task `task`'s threads (at most [`RECORDS_MAX`]), by id.
pub fn threads(host_priv: u64, task: u64) -> Result<alloc::vec::Vec<ThreadRecord>, Error> {
    let mut words = alloc::vec::Vec::new();
    let mut out = alloc::vec::Vec::new();
    listing::<THREAD_RECORD_WORDS>(Sys::HostThreads, host_priv, Some(task), &mut words, |w| {
        out.push(ThreadRecord::from_words(w))
    })?;
    Ok(out)
}

/// Task `task`'s rights (at most [`RECORDS_MAX`]), by name.
pub fn names(host_priv: u64, task: u64) -> Result<alloc::vec::Vec<NameRecord>, Error> {
    let mut words = alloc::vec::Vec::new();
    let mut out = alloc::vec::Vec::new();
    listing::<NAME_RECORD_WORDS>(Sys::HostNames, host_priv, Some(task), &mut words, |w| {
        out.push(NameRecord::from_words(w))
    })?;
    Ok(out)
}

/// Task `task`'s address map: its fault and memory counts and its regions (at most
/// [`RECORDS_MAX`]), lowest first (`host_vm`, `docs/vm.md`).
pub fn vm(
    host_priv: u64,
    task: u64,
) -> Result<
    (
        baton_abi::vm::VmStats,
        alloc::vec::Vec<baton_abi::vm::VmRegion>,
    ),
    Error,
> {
    use baton_abi::vm::{VmRegion, VmStats, VM_REGION_SIZE, VM_STATS_SIZE};
    let mut bytes = alloc::vec![0u8; VM_STATS_SIZE + RECORDS_MAX as usize * VM_REGION_SIZE];
    // SAFETY: the kernel writes the counts and at most RECORDS_MAX regions into `bytes`,
    // which holds that many, and nothing else.
    let raw = unsafe {
        syscall6(
            Sys::HostVm as u64,
            host_priv,
            task,
            bytes.as_mut_ptr() as u64,
            RECORDS_MAX,
            0,
            0,
        )
    };
    let total = decode_result(raw)?;
    let stats = VmStats::from_bytes(&bytes[..VM_STATS_SIZE]).unwrap_or_default();
    let regions = bytes[VM_STATS_SIZE..]
        .chunks_exact(VM_REGION_SIZE)
        .take(total.min(RECORDS_MAX) as usize)
        .filter_map(VmRegion::from_bytes)
        .collect();
    Ok((stats, regions))
}

/// TSC ticks all CPUs together have spent halted since boot (`Sys::HaltedTicks`), with the
/// host-privilege right: a benchmark window's TSC delta minus this counter's is the
/// instructions executed under `-icount`.
pub fn halted_ticks(host_priv: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall1(Sys::HaltedTicks as u64, host_priv) })
}
