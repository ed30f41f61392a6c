//! User drivers' kernel objects: interrupt lines delivered as notifications on a port, and
//! I/O-port ranges (`baton_abi::Sys::IrqAttach` … `IoOut`; `docs/kobjects.md`).
//!
//! Both are kernel-object ports (`crate::kobject`): `irq_attach` and `ioport_create`
//! return a send right to the object's port, and the calls that use the object
//! (`irq_ack`, `io_in`, `io_out`) take that name, so the authority can be passed on like
//! any right. Making either needs the host-privilege right. `kern::device` holds the rules
//! (one notification outstanding per line, range checks) as host-tested data;
//! `arch::ioapic` and `arch::portio` do the machine's part.
//!
//! **MSI vectors** (`msi_attach`, `msi_message`; `docs/drivers.md`) are interrupt objects
//! too: one of `arch::msi`'s vectors, numbered as a line after the ISA ones
//! (`kern::device::MSI_FIRST`), bound, notified, acknowledged and ended exactly as an
//! edge-triggered ISA line, except that nothing is masked (an MSI has no I/O APIC pin) and
//! the device is told the vector by its driver, which writes `msi_message`'s address and
//! data into the device's MSI or MSI-X table.
//!
//! - **An interrupt** of a bound line arrives on the boot CPU at its vector; the core
//!   (`kernel::on_trap`) calls [`on_interrupt`] through `family::Hooks::interrupt` before
//!   the end of interrupt. The notification ([`NOTIFY_INTERRUPT`], the line's number as
//!   its word) goes to the driver's port; until the driver's `irq_ack`, a level-triggered
//!   line stays masked and an edge-triggered one is only remembered as pending.
//! - **Memory**: a binding holds a send right to the driver's port and counts as one of
//!   the port's send-once rights for its queue room (`Port::reserve_queue`), so the
//!   notification never allocates (it is sent with interrupts off, on any path); each
//!   object's port is charged to its maker's account (`quota::PORT_BYTES`). At most 14
//!   ISA lines, 8 MSI vectors and `IO_OBJECTS_MAX` I/O-ports objects exist.
//! - **Lifetime**: both end with the task that made them ([`task_released`]): the line is
//!   masked, the rights the kernel held are released and the object's port dies, so every
//!   holder sees a dead name.
//!
//! # Invariants
//! - A bound line's object port carries the tag `KObject::Interrupt(line)`, an I/O-ports
//!   object's `KObject::IoPorts`; each is in `Kernel::devices` exactly while its port is
//!   alive.
//! - The kernel's own I/O ports (the PICs, the PIT and its gate, the exit device) are in no
//!   I/O-ports object; COM1 may be, as the kernel writes its own lines to it polled.

use crate::arch::{ioapic, portio};
use crate::kernel::{Kernel, TaskId};
use crate::kobject::{self, KObject};
use crate::thread::ThreadId;
use baton_abi::ipc::NOTIFY_INTERRUPT;
use baton_abi::Error;
use kern::device::{io_range_valid, overlaps, IoRange, OnAck, OnInterrupt, LINES};
use kern::ipc::{Message, PortId};

/// I/O ports the kernel drives itself, which no I/O-ports object may include: the two
/// legacy PICs, the PIT and its channel-2 gate (clock calibration), and QEMU's exit device.
const KERNEL_PORTS: [core::ops::Range<u64>; 5] =
    [0x20..0x22, 0x40..0x44, 0x61..0x62, 0xa0..0xa2, 0xf4..0xf8];

/// `irq_attach(irq, port, host_priv)` by thread `cur` of task `task`.
pub fn sys_irq_attach(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    irq: u64,
    port_name: u64,
    host_priv: u64,
) -> Result<u64, Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    k.devices.check_attach(irq)?;
    // Decode: the port must be one the caller may send to, alive.
    let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let notify = k.ipc.sendable_port(&t.names, port_name)?;
    let charge = crate::quota::heap(&t.account, crate::quota::PORT_BYTES)?;
    let level = ioapic::route(irq).ok_or(Error::InvalidArgument)?;
    let (name, object, held) =
        bind_object(k, task, port_name, notify, charge, KObject::Interrupt(irq))?;
    // Nothing below fails: count the binding as a send-once right of the driver's port,
    // for its queue room.
    if let Some(p) = k.ipc.port_mut(held) {
        p.send_onces += 1;
    }
    k.devices.attach(irq, held, object, task, level)?;
    ioapic::set_masked(irq, false);
    Ok(name)
}

/// `msi_attach(port, host_priv)` by thread `cur` of task `task`: a free MSI line
/// (`arch::msi`) bound to `port` as `irq_attach` binds an ISA line; the name of the
/// interrupt object's send right (`irq_ack` takes it, `msi_message` tells what the device
/// must write).
pub fn sys_msi_attach(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    port_name: u64,
    host_priv: u64,
) -> Result<u64, Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    if !k.devices.msi_free() {
        return Err(Error::NoSpace);
    }
    let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let notify = k.ipc.sendable_port(&t.names, port_name)?;
    let charge = crate::quota::heap(&t.account, crate::quota::PORT_BYTES)?;
    // The object's line is not known before it is bound: tag it after.
    let (name, object, held) = bind_object(
        k,
        task,
        port_name,
        notify,
        charge,
        KObject::Interrupt(u64::MAX),
    )?;
    let line = match k.devices.attach_msi(held, object, task) {
        Ok(l) => l,
        Err(e) => {
            let mut fx = crate::ipc::effects(k);
            k.ipc.release_held_send(held, &mut fx);
            crate::ipc::apply(k, fx);
            kobject::destroy(k, Some(object));
            return Err(e);
        }
    };
    kobject::tag(k, object, KObject::Interrupt(line));
    if let Some(p) = k.ipc.port_mut(held) {
        p.send_onces += 1;
    }
    Ok(name)
}

/// What binding an interrupt to the driver's port `notify` (named `port_name` in `task`)
/// takes, for an ISA line and an MSI vector alike: room for its notification in that
/// port's queue, the interrupt object (tagged `tag`, charged `charge`) with a send right
/// to it named in `task`, and a send right to the driver's port the kernel holds. Returns
/// (the name, the object's port, the held port); on an error nothing is left made.
fn bind_object(
    k: &mut Kernel,
    task: TaskId,
    port_name: u64,
    notify: PortId,
    charge: kern::quota::Charge,
    tag: KObject,
) -> Result<(u64, PortId, PortId), Error> {
    // Room for the notification in the driver's port before anything is held.
    k.ipc
        .port_mut(notify)
        .ok_or(Error::DeadName)?
        .reserve_queue(1)?;
    let object = kobject::make_object(k, tag, charge)?;
    let t = k.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
    let granted = k.ipc.grant_send(&mut t.names, object).and_then(|name| {
        let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
        Ok((name, k.ipc.hold_send(&t.names, port_name)?))
    });
    match granted {
        Ok((name, held)) => Ok((name, object, held)),
        Err(e) => {
            kobject::destroy(k, Some(object));
            Err(e)
        }
    }
}

/// `msi_message(name)`: what the device must write to raise the MSI line of the interrupt
/// object `name`: the address in the low 32 bits, the data in the high 32.
pub fn sys_msi_message(k: &Kernel, task: TaskId, name: u64) -> Result<u64, Error> {
    let Ok((_, Some(KObject::Interrupt(line)))) = object_of(k, task, name) else {
        return Err(Error::InvalidRight);
    };
    let (address, data) = crate::arch::msi::message(line).ok_or(Error::InvalidArgument)?;
    Ok(address | (data << 32))
}

/// The object `name` (a send right of `task`) stands for, if any.
fn object_of(k: &Kernel, task: TaskId, name: u64) -> Result<(PortId, Option<KObject>), Error> {
    let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let port = k.ipc.sendable_port(&t.names, name)?;
    Ok((port, kobject::object(k, port)))
}

/// `irq_ack(name)` by task `task`.
pub fn sys_irq_ack(k: &mut Kernel, task: TaskId, name: u64) -> Result<u64, Error> {
    let Ok((_, Some(KObject::Interrupt(irq)))) = object_of(k, task, name) else {
        return Err(Error::InvalidRight);
    };
    match k.devices.ack(irq)? {
        OnAck::Unmask => ioapic::set_masked(irq, false),
        OnAck::Nothing => {}
        OnAck::Notify(port) => notify(k, irq, port),
    }
    Ok(0)
}

/// Sends line `irq`'s notification to `port` (room for it was made at the binding).
fn notify(k: &mut Kernel, irq: u64, port: PortId) {
    let msg = Message {
        id: NOTIFY_INTERRUPT,
        word: Some(irq),
        ..Message::default()
    };
    let mut fx = crate::ipc::effects(k);
    k.ipc.enqueue(port, msg, &mut fx);
    crate::ipc::apply(k, fx);
}

/// ISA line `irq` fired (the core's hook, under the kernel lock, before the end of
/// interrupt).
pub fn on_interrupt(k: &mut Kernel, irq: u64) {
    match k.devices.interrupt(irq) {
        OnInterrupt::Notify(port) => {
            if k.devices.line(irq).is_some_and(|l| l.level) {
                ioapic::set_masked(irq, true);
            }
            notify(k, irq, port);
        }
        OnInterrupt::Hold { mask } => {
            if mask {
                ioapic::set_masked(irq, true);
            }
        }
    }
}

/// `ioport_create(base, count, host_priv)` by thread `cur` of task `task`.
pub fn sys_ioport_create(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    base: u64,
    count: u64,
    host_priv: u64,
) -> Result<u64, Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    let (base16, count32) = io_range_valid(base, count)?;
    if KERNEL_PORTS
        .iter()
        .any(|r| overlaps(base, count, r.clone()))
    {
        return Err(Error::Denied);
    }
    k.devices.reserve_io()?;
    let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let charge = crate::quota::heap(&t.account, crate::quota::PORT_BYTES)?;
    let object = kobject::make_object(k, KObject::IoPorts, charge)?;
    let t = k.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
    let name = match k.ipc.grant_send(&mut t.names, object) {
        Ok(n) => n,
        Err(e) => {
            kobject::destroy(k, Some(object));
            return Err(e);
        }
    };
    // Room was reserved above.
    k.devices.io.push(IoRange {
        base: base16,
        count: count32,
        object,
        owner: task,
    });
    Ok(name)
}

/// `io_in(name, port, width)` (`value` = `None`) or `io_out(name, port, width, value)`
/// by task `task`.
pub fn sys_io(
    k: &mut Kernel,
    task: TaskId,
    name: u64,
    port: u64,
    width: u64,
    value: Option<u64>,
) -> Result<u64, Error> {
    let Ok((object, Some(KObject::IoPorts))) = object_of(k, task, name) else {
        return Err(Error::InvalidRight);
    };
    let range = k.devices.io_of_object(object).ok_or(Error::InvalidRight)?;
    let port = range.check(port, width)?;
    match value {
        None => Ok(u64::from(portio::port_in(port, width))),
        Some(v) => {
            portio::port_out(port, width, v as u32);
            Ok(0)
        }
    }
}

/// Task `id` has ended: its lines are masked and unbound, its I/O-ports objects go, and
/// their ports die. Allocates nothing.
pub fn task_released(k: &mut Kernel, id: TaskId) {
    let mut lines = [0u64; LINES];
    let mut n = 0;
    for (slot, irq) in lines.iter_mut().zip(k.devices.lines_of(id)) {
        *slot = irq;
        n += 1;
    }
    for &irq in lines.iter().take(n) {
        ioapic::set_masked(irq, true);
        let Some(line) = k.devices.detach(irq) else {
            continue;
        };
        if let Some(p) = k.ipc.port_mut(line.notify) {
            p.send_onces = p.send_onces.saturating_sub(1);
        }
        let mut fx = crate::ipc::effects(k);
        k.ipc.release_held_send(line.notify, &mut fx);
        crate::ipc::apply(k, fx);
        kobject::destroy(k, Some(line.object));
    }
    let mut i = 0;
    while let Some(r) = k.devices.io.get(i) {
        if r.owner == id {
            let r = k.devices.io.swap_remove(i);
            kobject::destroy(k, Some(r.object));
        } else {
            i += 1;
        }
    }
}
