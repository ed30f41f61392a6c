//! `devcalls`: the driver and host-privilege calls, their errors and one real interrupt.
//! Booted with `priv=devcalls` (it needs the host-privilege right).
//!
//! - `irq_attach`: no right (0, another port's right) is `Denied`; lines 0, 2, 16 are
//!   `InvalidArgument`; a dead port `DeadName`; a second attach of a line `Busy`.
//! - a real interrupt: COM1's "transmitter empty" interrupt (line 4) arrives as one
//!   `NOTIFY_INTERRUPT` notification, and no other until `irq_ack`.
//! - `ioport_create`: no right `Denied`, the kernel's own ports `Denied`, empty or too long
//!   ranges `InvalidArgument`, the 17th object `NoSpace`; `io_in`/`io_out` outside the
//!   range or with a bad width `InvalidArgument`, through a name that is no I/O-ports
//!   object `InvalidRight`.
//! - `host_tasks`, `host_threads`, `host_names`, `host_task_port`: `Denied` without the
//!   right, `NotFound` for a task that does not exist, `TooLarge` and `BadAddress` for bad
//!   buffers, and their records name this task, its thread and its rights.
#![no_std]
#![no_main]

use baton_abi::host::{OBJECT_HOST_PRIV, OBJECT_INTERRUPT, OBJECT_IO_PORTS, RECORDS_MAX};
use baton_abi::ipc::{HEADER_SIZE, MSG_RECEIVE, NOTIFY_INTERRUPT};
use baton_abi::{decode_result, Sys, IO_OBJECTS_MAX};
use baton_rt::check::{finish, Failed};
use baton_rt::host::{self, io_in, io_out, ioport_create, irq_ack, irq_attach};
use baton_rt::ipc::{cap_drop, msg_buf, port_allocate, port_make_send};
use baton_rt::{start, Error};

baton_rt::entry!(main);

const TEST: &str = "devcalls";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) }
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(task_id: u64) -> i32 {
    finish(TEST, run(task_id))
}

const COM1: u64 = 0x3f8;

/// Receives one message on `port` within `ns`; its id and first data word.
fn receive(port: u64, ns: u64) -> Result<(u64, u64), Error> {
    let mut buf = [0u8; 256];
    msg_buf(&mut buf, MSG_RECEIVE, port, ns)?;
    let h = baton_abi::ipc::MsgHeader::from_bytes(&buf).ok_or(Error::BadFormat)?;
    let word = buf
        .get(HEADER_SIZE..HEADER_SIZE + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    Ok((h.id, word))
}

fn run(task_id: u64) -> Result<(), Failed> {
    let hp = start::host_priv();
    check!(hp != 0, "booted with the host-privilege right");
    let port = must("port_allocate", port_allocate(0))?;
    let other = must("port_make_send", port_make_send(port, false))?;

    // irq_attach's refusals.
    check!(
        irq_attach(4, port, 0) == Err(Error::Denied),
        "irq_attach without the right: Denied"
    );
    check!(
        irq_attach(4, port, other) == Err(Error::Denied),
        "irq_attach with another port's right: Denied"
    );
    for bad in [0, 2, 16, u64::MAX] {
        check!(
            irq_attach(bad, port, hp) == Err(Error::InvalidArgument),
            "irq_attach of line {bad}: InvalidArgument"
        );
    }
    check!(
        irq_attach(3, 0, hp) == Err(Error::InvalidName),
        "irq_attach to name 0: InvalidName"
    );
    let dead_rcv = must("port_allocate", port_allocate(0))?;
    let dead = must("port_make_send", port_make_send(dead_rcv, false))?;
    must("cap_drop", cap_drop(dead_rcv))?;
    check!(
        irq_attach(3, dead, hp) == Err(Error::DeadName),
        "irq_attach to a dead port: DeadName"
    );

    // A real interrupt: COM1's transmitter-empty interrupt on line 4.
    let io = must("ioport_create", ioport_create(COM1, 8, hp))?;
    let irq = must("irq_attach(4)", irq_attach(4, port, hp))?;
    check!(
        irq_attach(4, port, hp) == Err(Error::Busy),
        "a second irq_attach of line 4: Busy"
    );
    check!(
        irq_ack(irq) == Err(Error::InvalidArgument),
        "irq_ack with no notification out: InvalidArgument"
    );
    check!(
        irq_ack(port) == Err(Error::InvalidRight),
        "irq_ack of a port that is no interrupt: InvalidRight"
    );
    must("enable THRE interrupt", io_out(io, COM1 + 1, 1, 0x02))?;
    let got = receive(port, 2_000_000_000);
    // Quiet the UART again before anything else is printed (each of our lines would
    // raise it anew).
    let iir = must("read IIR", io_in(io, COM1 + 2, 1))?;
    must("disable UART interrupts", io_out(io, COM1 + 1, 1, 0))?;
    check!(
        got == Ok((NOTIFY_INTERRUPT, 4)),
        "the interrupt arrived as NOTIFY_INTERRUPT for line 4 ({got:?}, IIR {iir:#x})"
    );
    check!(
        receive(port, 50_000_000) == Err(Error::TimedOut),
        "no second notification before the acknowledgement"
    );
    must("irq_ack", irq_ack(irq))?;

    // I/O ports.
    check!(
        ioport_create(COM1, 8, 0) == Err(Error::Denied),
        "ioport_create without the right: Denied"
    );
    check!(
        ioport_create(0x20, 2, hp) == Err(Error::Denied),
        "ioport_create of the PIC: Denied"
    );
    check!(
        ioport_create(0x0, 0x100, hp) == Err(Error::Denied),
        "ioport_create over the PIT: Denied"
    );
    check!(
        ioport_create(0xf4, 1, hp) == Err(Error::Denied),
        "ioport_create of the exit device: Denied"
    );
    check!(
        ioport_create(COM1, 0, hp) == Err(Error::InvalidArgument),
        "ioport_create of no ports: InvalidArgument"
    );
    check!(
        ioport_create(0xffff, 2, hp) == Err(Error::InvalidArgument),
        "ioport_create past 0xffff: InvalidArgument"
    );
    check!(
        io_in(io, COM1 + 8, 1) == Err(Error::InvalidArgument),
        "io_in past the range: InvalidArgument"
    );
    check!(
        io_in(io, COM1 - 1, 1) == Err(Error::InvalidArgument),
        "io_in before the range: InvalidArgument"
    );
    check!(
        io_in(io, COM1 + 7, 2) == Err(Error::InvalidArgument),
        "io_in of 2 bytes over the end: InvalidArgument"
    );
    check!(
        io_in(io, COM1, 3) == Err(Error::InvalidArgument),
        "io_in of width 3: InvalidArgument"
    );
    check!(
        io_out(io, COM1 + 8, 1, 0) == Err(Error::InvalidArgument),
        "io_out past the range: InvalidArgument"
    );
    check!(
        io_in(port, COM1, 1) == Err(Error::InvalidRight),
        "io_in through a port that is no I/O object: InvalidRight"
    );
    check!(
        io_in(irq, COM1, 1) == Err(Error::InvalidRight),
        "io_in through the interrupt object: InvalidRight"
    );
    let lsr = must("io_in(LSR)", io_in(io, COM1 + 5, 1))?;
    check!(
        lsr & 0x20 != 0,
        "COM1's line status says the transmitter is ready ({lsr:#x})"
    );
    for i in 1..IO_OBJECTS_MAX {
        must("ioport_create", ioport_create(0x2f8, 1, hp).map(|_| i))?;
    }
    check!(
        ioport_create(0x2f8, 1, hp) == Err(Error::NoSpace),
        "the 17th I/O-ports object: NoSpace"
    );

    // The host-privilege listings.
    check!(
        host::tasks(0).err() == Some(Error::Denied),
        "host_tasks without the right: Denied"
    );
    check!(
        host::tasks(other).err() == Some(Error::Denied),
        "host_tasks with another port's right: Denied"
    );
    let tasks = must("host_tasks", host::tasks(hp))?;
    check!(
        tasks
            .iter()
            .any(|t| t.id == task_id && t.name() == "devcalls" && t.threads == 1),
        "host_tasks lists this task with its one thread"
    );
    let mut words = [0u64; 16];
    // SAFETY: the kernel refuses before writing anything (max too large, or the address).
    let too_many = decode_result(unsafe {
        baton_rt::raw::syscall6(
            Sys::HostTasks as u64,
            hp,
            words.as_mut_ptr() as u64,
            RECORDS_MAX + 1,
            0,
            0,
            0,
        )
    });
    check!(
        too_many == Err(Error::TooLarge),
        "host_tasks of more than RECORDS_MAX: TooLarge"
    );
    // SAFETY: as above: address 0x10 is never mapped.
    let bad = decode_result(unsafe {
        baton_rt::raw::syscall6(Sys::HostTasks as u64, hp, 0x10, 4, 0, 0, 0)
    });
    check!(
        bad == Err(Error::BadAddress),
        "host_tasks into an unmapped buffer: BadAddress"
    );
    check!(
        host::threads(hp, 999_999).err() == Some(Error::NotFound),
        "host_threads of no task: NotFound"
    );
    check!(
        host::threads(0, task_id).err() == Some(Error::Denied),
        "host_threads without the right: Denied"
    );
    let threads = must("host_threads", host::threads(hp, task_id))?;
    check!(
        threads.len() == 1 && threads.iter().all(|t| t.home == task_id && t.state == 0),
        "host_threads: this task's one thread, running"
    );
    check!(
        host::names(0, task_id).err() == Some(Error::Denied),
        "host_names without the right: Denied"
    );
    check!(
        host::names(hp, 999_999).err() == Some(Error::NotFound),
        "host_names of no task: NotFound"
    );
    let names = must("host_names", host::names(hp, task_id))?;
    let kind = |n: u64| {
        names
            .iter()
            .find(|r| r.name == n)
            .map(|r| (r.kind, r.object))
    };
    check!(
        kind(hp) == Some((2, OBJECT_HOST_PRIV)),
        "host_names: the host-privilege right, a send right"
    );
    check!(
        kind(irq) == Some((2, OBJECT_INTERRUPT)),
        "host_names: the interrupt object"
    );
    check!(
        kind(io) == Some((2, OBJECT_IO_PORTS)),
        "host_names: the I/O-ports object"
    );
    check!(
        kind(port) == Some((1, 0)),
        "host_names: the port's receive right"
    );
    check!(kind(dead) == Some((4, 0)), "host_names: the dead name");
    check!(
        host::task_port(0, task_id) == Err(Error::Denied),
        "host_task_port without the right: Denied"
    );
    check!(
        host::task_port(hp, 999_999) == Err(Error::NotFound),
        "host_task_port of no task: NotFound"
    );
    let tp = must("host_task_port", host::task_port(hp, task_id))?;
    let mut ipc = must("IPC buffer", baton_rt::ipc::IpcBuffer::new())?;
    let reply = must("port_allocate", port_allocate(0))?;
    let (info, _) = must(
        "TASK_INFO",
        baton_rt::kobject::call(
            &mut ipc,
            tp,
            reply,
            baton_abi::kobject::TASK_INFO,
            &[],
            baton_abi::FOREVER,
        ),
    )?;
    check!(
        info[0] == task_id,
        "the task port host_task_port gave answers TASK_INFO for this task"
    );
    check!(
        host::shutdown(0) == Error::Denied,
        "host_shutdown without the right: Denied"
    );
    Ok(())
}
