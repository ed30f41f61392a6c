//! Memory objects as capabilities (Accent's memory objects; `docs/vm.md`, "Memory objects
//! as capabilities"): calls 110–119.
//!
//! A memory object (`kern::vm::object`, kept by the virtual-memory family, `crate::vm`)
//! is named in a task's name space by a send right to a kernel-object port
//! (`crate::kobject`, [`KObject::Memory`]). Each port has a record here: the object it
//! holds a reference to, and the most a mapping through it may allow (its maximum
//! protection; `memobj_restrict` makes another port with less). Ports are reaped when
//! their last send right goes (`kern::ipc::Ipc::reap_on_no_senders`): [`reap`], run after
//! every IPC operation's effects, destroys the port and drops its reference, so an object
//! lives while a right or a mapping names it.
//!
//! - `memobj_create`: an anonymous object, its frames committed to the caller.
//! - `memobj_physical`, `memobj_dma`: physical ranges (device registers) and contiguous
//!   DMA buffers, only with the host-privilege right; a physical range touching RAM or the
//!   kernel's own devices is refused (`kern::vm::phys`).
//! - `vm_map`: a window of an object, shared or copy-on-write, within the right's maximum.
//! - `vm_read`, `vm_write`: another task's memory through its task port, faults resolved
//!   as the kernel's own copies resolve them (`crate::vm::make_resident`).
//! - `wait_shared`, `wake_shared`: `wait`/`wake` keyed by (object, offset).
//! - `dma_quarantine_release`, `dma_quarantined`: the DMA quarantine (below).
//!
//! **DMA quarantine** (`docs/drivers.md`). With no IOMMU a device writes wherever its
//! driver pointed it, and it goes on doing so after the driver has died. So the frames of
//! a DMA buffer whose maker has ended are not reused until someone with the
//! host-privilege right declares the devices reset (`dma_quarantine_release`; the virtio
//! block driver does so after resetting its device at start). [`DMA`] remembers each DMA
//! object with its maker; when a task ends ([`task_released`], before its rights and
//! mappings go) each of its DMA objects that is still alive gets one more reference, held
//! by the quarantine, so its frames stay allocated however the other references go
//! (`kern::dma` keeps the table and its rules). A
//! DMA object whose rights and mappings all went while its maker lived is freed as any
//! object (the driver let go of it, so it is done with it).
//!
//! # Invariants
//! - Every live memory-object port carries the tag `KObject::Memory(key)` of exactly one
//!   record, which holds one reference to its object; the record goes, and the reference
//!   with it, when the port is reaped.
//! - A record's `max_prot` never exceeds the one of the right it was derived from.
//! - Every port's record and port are charged to the account of the task that made it
//!   (the port's charge); the object, to the same account (`kern::vm::object`).

use crate::kernel::{Kernel, TaskId};
use crate::kobject::{self, KObject};
use crate::locked::Locked;
use crate::thread::ThreadId;
use baton_abi::memobj::{
    MapRequest, MemobjInfo, DMA_MAX, KIND_ANONYMOUS, KIND_DMA, KIND_PHYSICAL, PHYS_LIMIT,
    PHYS_SIZE_MAX, PHYS_UNCACHED, RW_MAX, SIZE_MAX,
};
use baton_abi::vm::{INHERIT_COPY, INHERIT_SHARE, VM_ANYWHERE};
use baton_abi::Error;
use core::ops::Range;
use kern::dma::{DmaTable, DMA_OBJECTS_MAX};
use kern::slab::{Key, Slab};
use kern::vm::map::Placement;
use kern::vm::object::ObjectId;
use kern::vm::{Inherit, Prot, PAGE_SIZE};

/// What one memory-object port stands for.
#[derive(Clone, Copy, Debug)]
struct Record {
    object: ObjectId,
    max_prot: Prot,
    /// `KIND_*` of `baton_abi::memobj`.
    kind: u64,
    /// Physical address (physical objects, DMA buffers).
    phys: u64,
    /// `PHYS_UNCACHED` or 0.
    flags: u64,
}

/// Heap charged for a port and its record.
const PORT_CHARGE: usize = crate::quota::PORT_BYTES + core::mem::size_of::<Record>();

/// Most usable RAM ranges remembered from the boot memory map (more: everything below the
/// top of RAM counts as RAM).
const RAM_RANGES: usize = 32;

/// Physical ranges a physical object must never touch: RAM, and the local and I/O APICs,
/// which the kernel drives itself.
struct Owned {
    ranges: [Range<u64>; RAM_RANGES + 2],
    len: usize,
}

static OWNED: spin::Once<Owned> = spin::Once::new();

/// Records the usable RAM of the boot memory map (once, at boot, before any task).
pub fn set_ram(usable: &[Range<u64>]) {
    OWNED.call_once(|| {
        let mut o = Owned {
            ranges: core::array::from_fn(|_| 0..0),
            len: 0,
        };
        let devices = [0xfec0_0000..0xfed0_0000, 0xfee0_0000..0xfef0_0000];
        if usable.len() > RAM_RANGES {
            let top = usable.iter().map(|r| r.end).max().unwrap_or(0);
            o.ranges[0] = 0..top;
            o.len = 1;
        } else {
            for (slot, r) in o.ranges.iter_mut().zip(usable) {
                *slot = r.clone();
            }
            o.len = usable.len();
        }
        for d in devices {
            if let Some(slot) = o.ranges.get_mut(o.len) {
                *slot = d;
                o.len += 1;
            }
        }
        o
    });
}

/// Refused when the boot memory map was never recorded: everything.
#[allow(clippy::single_range_in_vec_init)] // one range on purpose: all of it
static ALL: [Range<u64>; 1] = [0..u64::MAX];

fn owned() -> &'static [Range<u64>] {
    match OWNED.get() {
        Some(o) => o.ranges.get(..o.len).unwrap_or(&[]),
        None => &ALL,
    }
}

static RECORDS: Locked<Slab<Record>> = Locked::new();

/// The records (made on first use).
///
/// # Safety
/// The caller holds the big kernel lock and keeps the reference only while it calls
/// nothing that could take it again (no IPC effects, nothing of `crate::vm`).
unsafe fn records() -> &'static mut Slab<Record> {
    // SAFETY: the lock is held and no other reference to the cell is live.
    unsafe { RECORDS.get_or_make(Slab::new) }
}

/// The system calls of this family (`Sys::MemobjCreate` … `Sys::WakeShared`, but
/// `WaitShared`, which blocks: `crate::syscall`).
pub fn sys(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    call: baton_abi::Sys,
    a: [u64; 6],
) -> Result<u64, Error> {
    use baton_abi::Sys;
    match call {
        Sys::MemobjCreate => create(k, task, a[0]),
        Sys::VmMap => vm_map(k, task, a[0], a[1], a[2], a[3], a[4]),
        Sys::MemobjRestrict => restrict(k, task, a[0], a[1]),
        Sys::MemobjPhysical => physical(k, task, cur, a[0], a[1], a[2], a[3]),
        Sys::MemobjDma => dma(k, task, cur, a[0], a[1]),
        Sys::MemobjInfo => info(k, task, a[0], a[1]),
        Sys::VmRead => read_write(k, task, a[0], a[1], a[2], a[3], false),
        Sys::VmWrite => read_write(k, task, a[0], a[1], a[2], a[3], true),
        Sys::WakeShared => {
            let key = wait_key(k, task, a[0])?;
            Ok(k.wake_key(key, a[1]))
        }
        Sys::DmaQuarantineRelease => dma_quarantine_release(k, cur, a[0]),
        Sys::DmaQuarantined => dma_quarantined(k, cur, a[0]),
        _ => Err(Error::InvalidArgument),
    }
}

/// Checks an object size: page multiple, non-empty ([`Error::InvalidArgument`]), at most
/// `max` ([`Error::TooLarge`]).
fn check_size(size: u64, max: u64) -> Result<(), Error> {
    if size > max {
        return Err(Error::TooLarge);
    }
    if size == 0 || !size.is_multiple_of(PAGE_SIZE) {
        return Err(Error::InvalidArgument);
    }
    Ok(())
}

/// Makes a port for `rec` (whose reference to its object it takes over: released on any
/// failure) and gives task `task` a send right to it; the right's name.
fn new_port(k: &mut Kernel, task: TaskId, rec: Record) -> Result<u64, Error> {
    let made = (|| {
        let account = k
            .tasks
            .get(&task)
            .ok_or(Error::InvalidArgument)?
            .account
            .clone();
        let charge = crate::quota::heap(&account, PORT_CHARGE)?;
        let key = {
            // SAFETY: the lock is held; the reference ends in this block.
            // No system-wide count: each port is charged to its maker's account, which
            // bounds what one task (and the tasks it made) can hold without denying
            // another task its own.
            unsafe { records() }
                .insert(rec)
                .map_err(|_| Error::NoMemory)?
        };
        let forget = |k: &mut Kernel, port: Option<kern::ipc::PortId>| {
            // SAFETY: the lock is held; the reference ends in this statement.
            unsafe { records() }.remove(key);
            kobject::destroy(k, port);
        };
        let port = match kobject::make_object(k, KObject::Memory(key.0), charge) {
            Ok(p) => p,
            Err(e) => {
                forget(k, None);
                return Err(e);
            }
        };
        let granted = k.ipc.reap_on_no_senders(port).and_then(|()| {
            let t = k.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
            k.ipc.grant_send(&mut t.names, port)
        });
        granted.inspect_err(|_| forget(k, Some(port)))
    })();
    if made.is_err() {
        crate::vm::object_release(k, rec.object);
    }
    made
}

/// Names `object` (of kind `kind`, `KIND_*`; its reference is taken over, and dropped on
/// failure) by a new memory-object right of task `task`, mappable read, write and
/// execute: what another family's objects (a pager's) get.
pub fn name_object(
    k: &mut Kernel,
    task: TaskId,
    object: ObjectId,
    kind: u64,
) -> Result<u64, Error> {
    new_port(
        k,
        task,
        Record {
            object,
            max_prot: Prot::ALL,
            kind,
            phys: 0,
            flags: 0,
        },
    )
}

/// The object the memory-object right `name` of task `task` names.
pub fn object_of(k: &Kernel, task: TaskId, name: u64) -> Result<ObjectId, Error> {
    lookup(k, task, name).map(|r| r.object)
}

/// The record of the memory-object right `name` of task `task`.
fn lookup(k: &Kernel, task: TaskId, name: u64) -> Result<Record, Error> {
    let t = k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let port = k.ipc.sendable_port(&t.names, name)?;
    let Some(KObject::Memory(key)) = kobject::object(k, port) else {
        return Err(Error::InvalidRight);
    };
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { records() }
        .get(Key(key))
        .copied()
        .ok_or(Error::InvalidRight)
}

/// Destroys the memory-object ports whose last send right went, dropping their objects'
/// references (run after every IPC operation's effects: `crate::ipc::apply`). Allocates
/// nothing (it runs as tasks end).
pub fn reap(k: &mut Kernel) {
    // Destroying a port runs IPC effects, which call this again: the outermost call
    // drains the list, so the nesting stays one deep however many ports go at once (a
    // task holding thousands of rights ends on a small kernel stack).
    if REAPING.swap(true, core::sync::atomic::Ordering::Relaxed) {
        return;
    }
    while let Some(port) = k.ipc.take_orphan() {
        let rec = match kobject::object(k, port) {
            // SAFETY: the lock is held; the reference ends in this statement.
            Some(KObject::Memory(key)) => unsafe { records() }.remove(Key(key)),
            _ => None,
        };
        kobject::destroy(k, Some(port));
        if let Some(rec) = rec {
            crate::vm::object_release(k, rec.object);
        }
    }
    REAPING.store(false, core::sync::atomic::Ordering::Relaxed);
}

/// The DMA objects and the quarantine (module documentation; the rules are
/// `kern::dma`'s). Taken under the kernel lock, never across a call into another family.
static DMA: spin::Mutex<DmaTable<ObjectId, TaskId>> = spin::Mutex::new(DmaTable::new());

/// Task `id` has ended (its rights and mappings not yet released): each DMA object it made
/// that is still alive goes into quarantine with a reference of its own. Allocates nothing.
pub fn task_released(k: &mut Kernel, id: TaskId) {
    let mut taken = [None; DMA_OBJECTS_MAX];
    let n = DMA.lock().take_made_by(id, &mut taken);
    // By reference and only the `n` taken: a task that made no DMA buffer (nearly every
    // task) does not pay a copy of the whole array at its end.
    for &object in taken.iter().take(n).flatten() {
        let Some((_, size, _)) = crate::vm::object_info(object) else {
            continue;
        };
        if crate::vm::object_add_ref(k, object).is_err() {
            continue;
        }
        // Always room: the entry just left the live list (`kern::dma`'s invariant).
        if !DMA.lock().quarantine(object, kern::vm::object::pages(size)) {
            crate::vm::object_release(k, object);
        }
    }
}

/// `dma_quarantined(host_priv)`: pages in quarantine.
fn dma_quarantined(k: &Kernel, cur: ThreadId, host_priv: u64) -> Result<u64, Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    Ok(DMA.lock().quarantined_pages())
}

/// `dma_quarantine_release(host_priv)`: drops the quarantine's references; the pages
/// released.
fn dma_quarantine_release(k: &mut Kernel, cur: ThreadId, host_priv: u64) -> Result<u64, Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    let mut pages = 0;
    loop {
        let next = DMA.lock().release_one();
        let Some((object, n)) = next else {
            return Ok(pages);
        };
        crate::vm::object_release(k, object);
        pages += n;
    }
}

/// Set while [`reap`] runs (under the kernel lock).
static REAPING: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// `memobj_create(size)`.
fn create(k: &mut Kernel, task: TaskId, size: u64) -> Result<u64, Error> {
    check_size(size, SIZE_MAX)?;
    let account = k
        .tasks
        .get(&task)
        .ok_or(Error::InvalidArgument)?
        .account
        .clone();
    let object = crate::vm::object_anonymous(k, size, &account)?;
    new_port(
        k,
        task,
        Record {
            object,
            max_prot: Prot::ALL,
            kind: KIND_ANONYMOUS,
            phys: 0,
            flags: 0,
        },
    )
}

/// `memobj_restrict(name, max_prot)`: another right to the same object, for at most
/// `max_prot` (and the first right's maximum).
fn restrict(k: &mut Kernel, task: TaskId, name: u64, max_prot: u64) -> Result<u64, Error> {
    let max = Prot::from_bits(max_prot).ok_or(Error::InvalidArgument)?;
    let mut rec = lookup(k, task, name)?;
    rec.max_prot = rec.max_prot.and(max);
    crate::vm::object_add_ref(k, rec.object)?;
    new_port(k, task, rec)
}

/// `memobj_physical(base, size, flags, host_priv)`.
fn physical(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    base: u64,
    size: u64,
    flags: u64,
    host_priv: u64,
) -> Result<u64, Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    if flags & !PHYS_UNCACHED != 0 {
        return Err(Error::InvalidArgument);
    }
    kern::vm::phys::check_range(owned(), base, size, PHYS_SIZE_MAX, PHYS_LIMIT)?;
    let account = k
        .tasks
        .get(&task)
        .ok_or(Error::InvalidArgument)?
        .account
        .clone();
    let uncached = flags & PHYS_UNCACHED != 0;
    let object = crate::vm::object_physical(k, base, size, uncached, &account)?;
    new_port(
        k,
        task,
        Record {
            object,
            max_prot: Prot::RW,
            kind: KIND_PHYSICAL,
            phys: base,
            flags,
        },
    )
}

/// `memobj_dma(size, host_priv)`.
fn dma(
    k: &mut Kernel,
    task: TaskId,
    cur: ThreadId,
    size: u64,
    host_priv: u64,
) -> Result<u64, Error> {
    kobject::check_host_priv(k, cur, host_priv)?;
    check_size(size, DMA_MAX)?;
    DMA.lock()
        .make_room(|o| crate::vm::object_info(o).is_some())?;
    let account = k
        .tasks
        .get(&task)
        .ok_or(Error::InvalidArgument)?
        .account
        .clone();
    let (object, phys) = crate::vm::object_dma(k, size, &account)?;
    // Room was made above, under the same kernel lock.
    if let Err(e) = DMA.lock().add(object, task) {
        crate::vm::object_release(k, object);
        return Err(e);
    }
    new_port(
        k,
        task,
        Record {
            object,
            max_prot: Prot::RW,
            kind: KIND_DMA,
            phys,
            flags: 0,
        },
    )
}

/// `memobj_info(name, out)`.
fn info(k: &mut Kernel, task: TaskId, name: u64, out: u64) -> Result<u64, Error> {
    let rec = lookup(k, task, name)?;
    let (_, size, resident) = crate::vm::object_info(rec.object).ok_or(Error::InvalidRight)?;
    let i = MemobjInfo {
        size,
        kind: rec.kind,
        max_prot: u64::from(rec.max_prot.bits()),
        phys: rec.phys,
        flags: rec.flags,
        resident,
    };
    k.copy_out(task, out, &i.to_bytes())?;
    Ok(0)
}

/// `vm_map(name, addr, len, offset, flags)`.
fn vm_map(
    k: &mut Kernel,
    task: TaskId,
    name: u64,
    addr: u64,
    len: u64,
    offset: u64,
    flags: u64,
) -> Result<u64, Error> {
    let req = MapRequest::decode(flags).ok_or(Error::InvalidArgument)?;
    let rec = lookup(k, task, name)?;
    let prot = Prot::from_bits(req.prot).ok_or(Error::InvalidArgument)?;
    let max_prot = Prot::from_bits(req.max_prot).ok_or(Error::InvalidArgument)?;
    if !rec.max_prot.contains(max_prot) {
        return Err(Error::Denied);
    }
    if len > SIZE_MAX.max(PHYS_SIZE_MAX) {
        return Err(Error::TooLarge);
    }
    let at = match addr {
        VM_ANYWHERE => Placement::Anywhere,
        a => Placement::Fixed(a),
    };
    let inherit = match req.inherit {
        INHERIT_SHARE => Inherit::Share,
        INHERIT_COPY => Inherit::Copy,
        _ => Inherit::None,
    };
    crate::vm::map_object(
        k, task, at, len, rec.object, offset, prot, max_prot, req.copy, inherit,
    )
}

/// `vm_read(task_port, addr, buf, len)` (`write` false) or `vm_write(task_port, addr, buf,
/// len)` by task `caller`: `len` bytes between the other task's `addr` and the caller's
/// `buf`. Both ranges are made resident (with the access each side needs, as that task's
/// own access would) before a byte moves, so an error changes nothing.
fn read_write(
    k: &mut Kernel,
    caller: TaskId,
    task_name: u64,
    addr: u64,
    buf: u64,
    len: u64,
    write: bool,
) -> Result<u64, Error> {
    let target = {
        let t = k.tasks.get(&caller).ok_or(Error::InvalidArgument)?;
        let port = k.ipc.sendable_port(&t.names, task_name)?;
        match kobject::object(k, port) {
            Some(KObject::Task(id)) => id,
            _ => return Err(Error::InvalidRight),
        }
    };
    if k.tasks.get(&target).is_none_or(|t| t.ending.is_some()) {
        return Err(Error::NotFound);
    }
    if len > RW_MAX {
        return Err(Error::TooLarge);
    }
    if len == 0 {
        return Ok(0);
    }
    let n = len as usize;
    let (from, from_va, to, to_va) = if write {
        (caller, buf, target, addr)
    } else {
        (target, addr, caller, buf)
    };
    crate::vm::make_resident(k, from, from_va, n, false)?;
    crate::vm::make_resident(k, to, to_va, n, true)?;
    let mut chunk = [0u8; 256];
    let mut done = 0u64;
    while done < len {
        let step = (len - done).min(chunk.len() as u64);
        let part = chunk
            .get_mut(..step as usize)
            .ok_or(Error::InvalidArgument)?;
        k.copy_in(from, from_va + done, part)?;
        k.copy_out(to, to_va + done, part)?;
        done += step;
    }
    Ok(len)
}

/// Marks a shared wait key's first half: task ids never have the top bit.
const SHARED_KEY: u64 = 1 << 63;

/// The wait-queue key of a shared wait at `addr` of task `task`: (object, offset) where a
/// mapping writes that object in place, else (task, address) as `wait` uses
/// (`crate::vm::shared_key`).
pub fn wait_key(k: &Kernel, task: TaskId, addr: u64) -> Result<(TaskId, u64), Error> {
    if !addr.is_multiple_of(4) {
        return Err(Error::InvalidArgument);
    }
    k.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    Ok(match crate::vm::shared_key(task, addr)? {
        Some((object, offset)) => (SHARED_KEY | object.0 .0, offset),
        None => (task, addr),
    })
}
