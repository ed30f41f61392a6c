//! Kernel objects through capabilities: task, thread and activation ports, the
//! host-privilege port (`baton_abi::kobject`), and the device objects' ports (interrupt
//! lines and I/O ports, made and used by `crate::device`) and memory objects' ports (made
//! and used by `crate::memobj`); a message to one of those is answered `NotSupported`.
//!
//! Each task, thread and pool activation gets, at the first request for it, a port whose
//! receive right the kernel keeps (`kern::ipc::held`), tagged with the object it stands
//! for (`Ipc::set_object`, so that a send finds the object from the port in one step; and,
//! for an activation, listed in `Kernel::act_ports`: activations are `kern` objects with
//! no room for a kernel port). A message sent to
//! such a port is not queued: `crate::ipc::send` hands it to [`invoke`], which moves its
//! rights in (decode, then invoke, as for any message), does the operation, and answers
//! through the request's reply right. The caller's receive phase then finds the reply
//! queued on its reply port like any other.
//!
//! # Invariants
//! - Exactly the live object ports carry an object tag, that of their object; an object's
//!   port is destroyed (its holders see a dead name) when the object goes away (an
//!   activation's at the latest when its task ends, see [`reap_act_ports`]).
//! - `Kernel::act_ports` holds exactly the activation ports, once each.

use crate::arch::serial::kprintln;
use crate::kernel::{Ending, Kernel, TaskId};
use crate::thread::{self, ThreadId, ThreadState};
use alloc::vec::Vec;
use baton_abi::exception::USER_REGS_WORDS;
use baton_abi::ipc::{Descriptor, MsgHeader};
use baton_abi::kobject::*;
use baton_abi::Error;
use kern::activation::ActId;
use kern::ipc::{ObjectTag, PortId};

/// What a kernel object port stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KObject {
    /// A task.
    Task(TaskId),
    /// A thread (its home activation, for the control operations).
    Thread(ThreadId),
    /// A pool activation.
    Activation(ActId),
    /// The host-privilege port (after Mach's privileged host port): holding a send right
    /// to it is the authority for the debugging and benchmark calls ([`check_host_priv`]).
    /// Made at boot ([`make_host_priv`]); it lives as long as the kernel.
    HostPriv,
    /// An interrupt object: a legacy ISA interrupt line bound to a driver's port
    /// (`crate::device`).
    Interrupt(u64),
    /// An I/O-ports object (`crate::device`; its range is in `Kernel::devices`).
    IoPorts,
    /// A memory object's port (`crate::memobj`; the id is its record's key).
    Memory(u64),
}

impl KObject {
    /// The tag its port carries.
    fn tag(self) -> ObjectTag {
        let (kind, id) = match self {
            KObject::Task(id) => (0, id),
            KObject::Thread(t) => (1, t.0),
            KObject::Activation(a) => (2, a.0),
            KObject::HostPriv => (3, 0),
            KObject::Interrupt(irq) => (4, irq),
            KObject::IoPorts => (5, 0),
            KObject::Memory(key) => (16, key),
        };
        ObjectTag { kind, id }
    }

    /// The object of a port's tag.
    fn of_tag(tag: ObjectTag) -> Option<KObject> {
        Some(match tag.kind {
            0 => KObject::Task(tag.id),
            1 => KObject::Thread(kern::slab::Key(tag.id)),
            2 => KObject::Activation(kern::slab::Key(tag.id)),
            3 => KObject::HostPriv,
            4 => KObject::Interrupt(tag.id),
            5 => KObject::IoPorts,
            16 => KObject::Memory(tag.id),
            _ => return None,
        })
    }

    /// What the host-privilege calls report it as (`baton_abi::host::OBJECT_*`).
    pub fn report_kind(self) -> u64 {
        use baton_abi::host::*;
        match self {
            KObject::Task(_) => OBJECT_TASK,
            KObject::Thread(_) => OBJECT_THREAD,
            KObject::Activation(_) => OBJECT_ACTIVATION,
            KObject::HostPriv => OBJECT_HOST_PRIV,
            KObject::Interrupt(_) => OBJECT_INTERRUPT,
            KObject::IoPorts => OBJECT_IO_PORTS,
            KObject::Memory(_) => OBJECT_MEMORY,
        }
    }
}

/// Makes the port of a new object `obj` that a task asked for (an interrupt or I/O-ports
/// object: `crate::device`), charged to that task's account with `charge` (given back when
/// the port is destroyed).
pub fn make_object(
    k: &mut Kernel,
    obj: KObject,
    charge: kern::quota::Charge,
) -> Result<PortId, Error> {
    let port = k.ipc.allocate_kernel()?;
    if let Some(p) = k.ipc.port_mut(port) {
        p.charge = Some(charge);
    }
    tag(k, port, obj);
    Ok(port)
}

/// Records that `port` (a kernel-held port) stands for `obj`.
pub fn tag(k: &mut Kernel, port: PortId, obj: KObject) {
    k.ipc.set_object(port, Some(obj.tag()));
}

/// Makes the host-privilege port (once, at boot).
pub fn make_host_priv(k: &mut Kernel) -> Result<PortId, Error> {
    if let Some(p) = k.host_priv {
        return Ok(p);
    }
    let port = k.ipc.allocate_kernel()?;
    tag(k, port, KObject::HostPriv);
    k.host_priv = Some(port);
    Ok(port)
}

/// Gives `task` a send right to the host-privilege port: only for the boot tasks the
/// command line marks privileged. Its name in the task's space.
pub fn grant_host_priv(k: &mut Kernel, task: TaskId) -> Result<u64, Error> {
    let port = make_host_priv(k)?;
    let t = k.tasks.get_mut(&task).ok_or(Error::NotFound)?;
    k.ipc.grant_send(&mut t.names, port)
}

/// Checks that `name` is a send right to the host-privilege port in the name space of the
/// task thread `cur` runs in: the authority a debugging or benchmark call needs.
/// [`Error::Denied`] for anything else (0, a name that denotes nothing, a right to another
/// port, a dead name). Two slab lookups (the task by the thread's cached key, the name),
/// so that the calls it guards stay near the floors they measure.
pub fn check_host_priv(k: &Kernel, cur: ThreadId, name: u64) -> Result<(), Error> {
    let Some(host) = k.host_priv else {
        return Err(Error::Denied);
    };
    let key = k.threads.get(cur).ok_or(Error::Denied)?.ctx.task_key;
    let t = k.tasks.by_key(key).ok_or(Error::Denied)?;
    match k.ipc.sendable_port(&t.names, name) {
        Ok(port) if port == host => Ok(()),
        _ => Err(Error::Denied),
    }
}

/// The port of `obj`, made on first use.
pub fn port_of(k: &mut Kernel, obj: KObject) -> Result<PortId, Error> {
    let existing = match obj {
        KObject::Task(id) => k.tasks.get(&id).ok_or(Error::NotFound)?.kport,
        KObject::Thread(t) => k.threads.get(t).ok_or(Error::NotFound)?.kport,
        KObject::Activation(a) => {
            k.acts.get(a).ok_or(Error::NotFound)?;
            k.act_ports.iter().find(|(x, _)| *x == a).map(|(_, p)| *p)
        }
        KObject::HostPriv => return k.host_priv.ok_or(Error::NotFound),
        // Made by `crate::device` only, with the object.
        KObject::Interrupt(_) | KObject::IoPorts | KObject::Memory(_) => {
            return Err(Error::NotFound)
        }
    };
    if let Some(p) = existing {
        return Ok(p);
    }
    if let KObject::Activation(_) = obj {
        k.act_ports.try_reserve(1).map_err(|_| Error::NoMemory)?;
    }
    let port = k.ipc.allocate_kernel()?;
    match obj {
        KObject::Task(id) => {
            if let Some(t) = k.tasks.get_mut(&id) {
                t.kport = Some(port);
            }
        }
        KObject::Thread(t) => {
            if let Some(th) = k.threads.get_mut(t) {
                th.kport = Some(port);
            }
        }
        KObject::Activation(a) => {
            // Room reserved above.
            k.act_ports.push((a, port));
        }
        KObject::HostPriv | KObject::Interrupt(_) | KObject::IoPorts | KObject::Memory(_) => {}
    }
    tag(k, port, obj);
    Ok(port)
}

/// Destroys an object's port as the object goes away.
pub fn destroy(k: &mut Kernel, port: Option<PortId>) {
    let Some(port) = port else {
        return;
    };
    k.ipc.set_object(port, None);
    let mut fx = crate::ipc::effects(k);
    k.ipc.destroy_kernel(port, &mut fx);
    crate::ipc::apply(k, fx);
}

/// Destroys the ports of activations that are gone or whose task is ending (called as a
/// task ends, and before a new activation port is made, so that at most one port per live
/// activation of a live task exists, and none outlives its task).
pub fn reap_act_ports(k: &mut Kernel) {
    if k.act_ports.is_empty() {
        return;
    }
    // Allocates nothing (it runs as a task ends).
    let mut i = 0;
    while let Some(&(a, _)) = k.act_ports.get(i) {
        let dead = k
            .acts
            .get(a)
            .is_none_or(|act| k.tasks.get(&act.task).is_none_or(|t| t.ending.is_some()));
        if dead {
            let (_, port) = k.act_ports.swap_remove(i);
            destroy(k, Some(port));
        } else {
            i += 1;
        }
    }
}

/// `task_self()`, `task_port(id)`, `thread_port(id)`, `act_port(id)` by task `caller`: a send right to the
/// object's port, in the caller's name space. A task may name itself and the tasks it
/// created; a thread or an activation, only its own task's.
pub fn sys_object_port(k: &mut Kernel, caller: TaskId, obj: KObject) -> Result<u64, Error> {
    if let KObject::Activation(_) = obj {
        reap_act_ports(k);
    }
    let allowed = match obj {
        KObject::Activation(a) => k.acts.get(a).is_some_and(|act| act.task == caller),
        KObject::Task(id) => {
            id == caller || k.tasks.get(&id).is_some_and(|t| t.creator == Some(caller))
        }
        KObject::Thread(t) => k
            .threads
            .get(t)
            .is_some_and(|th| th.home_task() == Some(caller)),
        // Only the kernel hands it out, at boot; the device objects, at their making.
        KObject::HostPriv | KObject::Interrupt(_) | KObject::IoPorts | KObject::Memory(_) => false,
    };
    if !allowed {
        return Err(Error::NotFound);
    }
    let port = port_of(k, obj)?;
    let task = k.tasks.get_mut(&caller).ok_or(Error::InvalidArgument)?;
    k.ipc.grant_send(&mut task.names, port)
}

/// The object of port `dest`, if it is a kernel object's.
pub fn object(k: &Kernel, dest: PortId) -> Option<KObject> {
    k.ipc.object(dest).and_then(KObject::of_tag)
}

/// The kernel object a port's tag (`kern::ipc::Port::object`) stands for.
pub fn object_of(tag: Option<kern::ipc::ObjectTag>) -> Option<KObject> {
    tag.and_then(KObject::of_tag)
}

/// Most argument words an operation takes (a `*_SET_STATE`'s registers).
const ARGS_MAX: usize = USER_REGS_WORDS;

/// Performs the operation in `header` (with `descriptors` and in-line `data` words read
/// from the sender's buffer) on `obj`, for task `task`; answers through the request's reply
/// right. Returns only if the caller goes on (it did not end itself).
pub fn invoke(
    k: &mut Kernel,
    task: TaskId,
    header: &MsgHeader,
    descriptors: &[Descriptor],
    data: Vec<u8>,
    obj: KObject,
) -> Result<(), Error> {
    if let Some((owner, target)) = state_target(k, obj, header.id) {
        // A state request waits for the thread to stop in the activation before anything
        // of the message is taken: the sender then sends it again (see
        // `control::await_arrival`). Its errors are answered below.
        let cur = k.current_thread();
        if let Ok(p) = crate::control::state_place(k, owner, cur, target) {
            crate::control::await_arrival(k, cur, &p);
        }
    }
    // The reply's bytes get their room before anything of the request is taken, so that
    // neither the request nor its reply is lost to an allocation that fails later.
    let mut out = Vec::new();
    out.try_reserve_exact(8 * (1 + WORDS_MAX))
        .map_err(|_| Error::NoMemory)?;
    let mut fx = crate::ipc::effects(k);
    let t = k.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
    let (_, msg) = k
        .ipc
        .copyin(&mut t.names, header, descriptors, data, &mut fx)?;
    // One word more than any operation takes, so that one which needs an exact count (a
    // `*_SET_STATE`) sees that there were more.
    let mut args = [0u64; ARGS_MAX + 1];
    let given = msg.data.len() / 8;
    for (slot, word) in args.iter_mut().zip(msg.data.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(word);
        *slot = u64::from_le_bytes(b);
    }
    let args = args.get(..given.min(ARGS_MAX + 1)).unwrap_or(&[]);
    let id = msg.id;
    let ends_caller = match (obj, id) {
        (KObject::Task(t), TASK_TERMINATE) => t == task,
        (KObject::Thread(t), THREAD_TERMINATE) => t == k.current_thread(),
        (KObject::Activation(a), ACT_TERMINATE) => {
            // The caller terminates the activation it runs in: it unwinds out of it.
            let cur = k.current_thread();
            k.acts
                .get(a)
                .is_some_and(|act| act.occupied && act.occupant == cur)
                && k.threads
                    .get(cur)
                    .and_then(|th| th.below.last())
                    .is_some_and(|rec| rec.act == a)
        }
        _ => false,
    };
    if ends_caller {
        // The caller will not see a reply: give back every right the request carried
        // (the reply right's holder gets its send-once notification), then end it.
        k.ipc.destroy_message(msg, &mut fx);
        crate::ipc::apply(k, fx);
        return operate(k, task, obj, id, args).map(|_| ());
    }
    let result = operate(k, task, obj, id, args);
    k.ipc.release_message_rights(msg.rights, &mut fx);
    if let Some(reply) = msg.reply {
        match &result {
            Ok(words) => {
                out.extend_from_slice(&0u64.to_le_bytes());
                for w in words.as_slice() {
                    out.extend_from_slice(&w.to_le_bytes());
                }
            }
            Err(e) => out.extend_from_slice(&(*e as i64 as u64).to_le_bytes()),
        }
        let id = msg.id.wrapping_add(KOBJECT_REPLY_OFFSET);
        k.ipc.reply_kernel(reply, id, out, &mut fx);
    }
    crate::ipc::apply(k, fx);
    Ok(())
}

/// For a `*_GET_STATE` or `*_SET_STATE` request `id` on `obj`: the task it acts for (the
/// object's owner: holding the port is the permission) and the activation it names.
fn state_target(k: &Kernel, obj: KObject, id: u64) -> Option<(TaskId, crate::control::Target)> {
    use crate::control::Target;
    match (obj, id) {
        (KObject::Thread(t), THREAD_GET_STATE | THREAD_SET_STATE) => {
            let home = k.threads.get(t)?.home_task()?;
            Some((home, Target::Thread(t.0)))
        }
        (KObject::Activation(a), ACT_GET_STATE | ACT_SET_STATE) => {
            Some((k.acts.get(a)?.task, Target::Activation(a)))
        }
        _ => None,
    }
}

/// The most result words an operation returns (a `*_GET_STATE`'s registers).
const WORDS_MAX: usize = USER_REGS_WORDS;

/// An operation's result words, in place (no allocation).
#[derive(Clone, Copy, Debug, Default)]
struct Words {
    words: [u64; WORDS_MAX],
    len: usize,
}

impl Words {
    /// The words of `w` (at most [`WORDS_MAX`]; more are cut off, which no operation
    /// returns).
    fn of(w: &[u64]) -> Words {
        let mut out = Words::default();
        for (slot, &x) in out.words.iter_mut().zip(w) {
            *slot = x;
        }
        out.len = w.len().min(WORDS_MAX);
        out
    }

    fn as_slice(&self) -> &[u64] {
        self.words.get(..self.len).unwrap_or(&[])
    }
}

/// One operation; its result words.
fn operate(
    k: &mut Kernel,
    caller: TaskId,
    obj: KObject,
    id: u64,
    args: &[u64],
) -> Result<Words, Error> {
    let arg = |i: usize| args.get(i).copied().ok_or(Error::InvalidArgument);
    match (obj, id) {
        (KObject::Task(t), TASK_TERMINATE) => {
            k.close_line();
            kprintln!("[kernel] task {t} terminated through its task port by task {caller}");
            k.end_task(t, Ending::Killed);
            if t == caller {
                thread::thread_terminate_current(k);
            }
            Ok(Words::default())
        }
        (KObject::Task(t), TASK_THREAD_CREATE) => {
            let (entry, stack, a) = (arg(0)?, arg(1)?, arg(2)?);
            if k.tasks.get(&t).is_none_or(|task| task.ending.is_some()) {
                return Err(Error::NotFound);
            }
            // A task being made gets its first thread with `task_init_thread`.
            if crate::taskmake::being_made(t) {
                return Err(Error::Busy);
            }
            k.thread_create_in(t, entry, stack, a)
                .map(|id| Words::of(&[id]))
        }
        (KObject::Task(t), TASK_PORT_ALLOCATE) => {
            let limit = arg(0)?;
            let task = k.tasks.get_mut(&t).ok_or(Error::NotFound)?;
            k.ipc
                .allocate(&mut task.names, t, limit)
                .map(|name| Words::of(&[name]))
        }
        (KObject::Task(t), TASK_INFO) => {
            let task = k.tasks.get(&t).ok_or(Error::NotFound)?;
            Ok(Words::of(&[t, task.threads]))
        }
        (KObject::Thread(t), THREAD_TERMINATE) => {
            if t == k.current_thread() {
                thread::thread_terminate_current(k);
            }
            // Its home activation ends; a thread deep in a server splits (seed 001).
            crate::control::terminate_home(k, t);
            Ok(Words::default())
        }
        (KObject::Thread(t), THREAD_INFO) => {
            let th = k.threads.get(t).ok_or(Error::NotFound)?;
            let state = match th.state {
                ThreadState::Running { .. } => THREAD_RUNNING,
                ThreadState::Ready => THREAD_READY,
                _ => THREAD_BLOCKED,
            };
            // Its home activation's task and registers: in a server its call migrated
            // into, the running context is the server's, not the caller's to read.
            let home = th.home_ctx();
            Ok(Words::of(&[
                t.0,
                home.task.unwrap_or(0),
                state,
                home.frame.rip,
                home.frame.rsp,
            ]))
        }
        (KObject::Thread(t), THREAD_ALERT | THREAD_SUSPEND | THREAD_RESUME) => {
            let home = k
                .threads
                .get(t)
                .and_then(|th| th.home_task())
                .ok_or(Error::NotFound)?;
            let cur = k.current_thread();
            let p = crate::control::place(k, home, cur, crate::control::Target::Thread(t.0))?;
            control(k, p, id).map(|()| Words::default())
        }
        (KObject::Activation(a), ACT_INFO) => {
            let act = k.acts.get(a).ok_or(Error::NotFound)?;
            let occupant = if act.occupied { act.occupant.0 } else { 0 };
            Ok(Words::of(&[
                a.0,
                act.task,
                u64::from(act.occupied),
                occupant,
            ]))
        }
        (KObject::Activation(a), ACT_ALERT | ACT_SUSPEND | ACT_RESUME | ACT_TERMINATE) => {
            let owner = k.acts.get(a).ok_or(Error::NotFound)?.task;
            let cur = k.current_thread();
            let p = crate::control::place(k, owner, cur, crate::control::Target::Activation(a))?;
            control(k, p, id).map(|()| Words::default())
        }
        (KObject::Thread(_), THREAD_GET_STATE | THREAD_SET_STATE)
        | (KObject::Activation(_), ACT_GET_STATE | ACT_SET_STATE) => {
            let (owner, target) = state_target(k, obj, id).ok_or(Error::NotFound)?;
            let cur = k.current_thread();
            let p = crate::control::state_place(k, owner, cur, target)?;
            if matches!(id, THREAD_GET_STATE | ACT_GET_STATE) {
                return crate::control::get_state(k, &p).map(|w| Words::of(&w));
            }
            let words: &[u64; USER_REGS_WORDS] =
                args.try_into().map_err(|_| Error::InvalidArgument)?;
            crate::control::set_state(k, &p, words).map(|()| Words::default())
        }
        _ => Err(Error::NotSupported),
    }
}

/// A control operation (`THREAD_ALERT` … `ACT_TERMINATE`) on the activation at `p`.
fn control(k: &mut Kernel, p: crate::control::Place, id: u64) -> Result<(), Error> {
    match id {
        THREAD_ALERT | ACT_ALERT => crate::control::alert_at(k, p),
        THREAD_SUSPEND | ACT_SUSPEND => {
            crate::control::suspend_at(k, p, 1)?;
        }
        THREAD_RESUME | ACT_RESUME => {
            crate::control::suspend_at(k, p, 0)?;
        }
        ACT_TERMINATE => {
            if crate::control::terminate_at(k, p) {
                // The caller's own top activation: it unwinds out of it (no reply; the
                // request's rights were given back by `invoke`).
                thread::thread_terminate_current(k);
            }
        }
        _ => return Err(Error::NotSupported),
    }
    Ok(())
}
