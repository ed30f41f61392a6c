//! Out-of-line data: memory regions carried by messages, and the `vm_copy` call — Accent's
//! MoveWords (Fitzgerald & Rashid, section 2.1), on the virtual-memory family's maps.
//!
//! A message's `DESC_OOL` descriptor names a range of the sender's memory. When the
//! message is sent, the range is taken into a *region in transit*
//! (`kern::vm::copy::Carried`: references to the objects, copy-on-write, no page copied)
//! kept in this module's table; the queued message holds only the region's handle
//! (`kern::ipc::Attached`), so the machine-independent message queues never see the
//! virtual-memory family. When the message is received, the region goes into the
//! receiver's map wherever there is room, and the descriptor is rewritten with its
//! address and size. A message destroyed undelivered (its port died, its receiver's task
//! ended) hands its handles back through `kern::ipc::Effects::dropped`, and
//! [`release_dropped`] releases the regions.
//!
//! - **By value.** The region is copy-on-write on both sides from the moment of the send:
//!   whatever either side writes afterwards the other never sees.
//! - **Move** (`OOL_DEALLOCATE`, Accent's DeleteSource): the whole pages of the range leave
//!   the sender's map once the message is queued. A partial end page stays with the sender
//!   (its bytes outside the range are the sender's, not the message's).
//! - **Partial end pages never leak** (Accent's "minor security leak" is a bug here): the
//!   region carries whole pages, and before the receiver can touch it the kernel zeroes
//!   the bytes of its first and last page that lie outside what was sent. That write is
//!   the receiver's first write to those pages, so it gives the receiver its own copies
//!   (a copy-on-write copy each, at most two pages), and the sender's pages are never
//!   changed. (The alternative, copying just the range's bytes into fresh zeroed pages,
//!   costs the same two page copies; zeroing through the fault path keeps one mechanism.)
//! - **Decode, then invoke.** Every descriptor is checked (flags, size, addresses, overlaps,
//!   mapped throughout, not physical, nothing wired) and so is the rest of the
//!   message (`kern::ipc::Ipc::check_copyin`) before any region is taken; the regions are
//!   then taken without deleting anything, so a later failure only releases them; the
//!   moves' deletions come last, once the message is queued.
//!
//! # Invariants
//! - Every region in the table is named by exactly one queued message (or is being
//!   delivered or released under the big kernel lock), and is charged to its sender's
//!   account (the table slot here, its pieces by `kern::vm::copy`) until it is received or
//!   released.
//! - The dropped list the kernel lends to every `Effects` ([`take_dropped_list`]) has room
//!   for a handle of every region in the table, so a teardown never allocates for it.

use crate::kernel::{Kernel, TaskId};
use crate::locked::Locked;
use alloc::vec::Vec;
use baton_abi::ipc::{Descriptor, MsgHeader, DESC_OOL, OOL_DEALLOCATE};
use baton_abi::layout::{USER_END, USER_MIN};
use baton_abi::vm::{VM_COPY_CREATE, VM_COPY_DELETE};
use baton_abi::Error;
use kern::frame::PAGE_SIZE;
use kern::ipc::{Attached, PortId};
use kern::slab::{Key, Slab};
use kern::vm::copy::Carried;
use kern::vm::map::Placement;
use kern::vm::Prot;

/// Heap charged for one region's slot in the table.
const REGION_BYTES: usize = core::mem::size_of::<Region>();

/// A region in transit.
struct Region {
    /// The whole pages.
    carried: Carried,
    /// Where the data starts in the first page.
    off: u64,
    /// The bytes sent.
    size: u64,
    /// Sent with `OOL_DEALLOCATE`: its resident pages are translated when it is received
    /// (see [`deliver`]).
    moved: bool,
    /// The slot's charge to the sender.
    _charge: kern::quota::Charge,
}

/// The family's state.
struct Ool {
    regions: Slab<Region>,
    /// The dropped list lent to `Effects` (see the module invariants).
    spare: Vec<u64>,
}

static OOL: Locked<Ool> = Locked::new();

/// The family's state (made on first use).
///
/// # Safety
/// The caller holds the big kernel lock and keeps no other reference from this function
/// alive while it uses this one.
unsafe fn state() -> &'static mut Ool {
    // SAFETY: the caller holds the lock and no other reference to the cell is live.
    unsafe {
        OOL.get_or_make(|| Ool {
            regions: Slab::new(),
            spare: Vec::new(),
        })
    }
}

/// Zeros for clearing partial pages.
static ZEROS: [u8; PAGE_SIZE as usize] = [0; PAGE_SIZE as usize];

/// The page-aligned range around `[addr, addr + size)`, checked: [`Error::InvalidArgument`]
/// for size 0, [`Error::BadAddress`] outside user space or wrapping.
fn pages_of(addr: u64, size: u64) -> Result<(u64, u64), Error> {
    if size == 0 {
        return Err(Error::InvalidArgument);
    }
    let end = addr.checked_add(size).ok_or(Error::BadAddress)?;
    if addr < USER_MIN || end > USER_END {
        return Err(Error::BadAddress);
    }
    let lo = addr & !(PAGE_SIZE - 1);
    let hi = end
        .checked_next_multiple_of(PAGE_SIZE)
        .ok_or(Error::BadAddress)?;
    Ok((lo, hi))
}

/// The whole pages inside `[addr, addr + size)` (possibly empty), for a move.
fn inner_pages(addr: u64, size: u64) -> (u64, u64) {
    let lo = addr.next_multiple_of(PAGE_SIZE);
    let hi = (addr + size) & !(PAGE_SIZE - 1);
    (lo, hi.max(lo))
}

/// Whether a message's descriptors include out-of-line regions.
pub fn has_ool(descriptors: &[Descriptor]) -> bool {
    descriptors.iter().any(|d| d.kind == DESC_OOL)
}

/// The out-of-line regions taken for a message, and the moves to finish once it is queued.
pub struct Taken {
    /// The handles, for the message.
    pub attached: Vec<Attached>,
    /// `(task, start, len)` of whole pages to remove from the sender once queued.
    moves: Vec<(u64, u64)>,
    task: TaskId,
}

/// Checks a message of task `task` to `dest` with out-of-line descriptors and takes its
/// regions (nothing deleted yet). Nothing changes on an error.
pub fn take(
    k: &mut Kernel,
    task: TaskId,
    header: &MsgHeader,
    descriptors: &[Descriptor],
    dest: PortId,
) -> Result<Taken, Error> {
    // A migrating call carries in-line data only (its request goes straight into an
    // activation's buffer): a message with regions to a port served by activations is
    // refused rather than queued where no thread receives.
    if k.ipc.port(dest).is_some_and(|p| p.pool.is_migrating()) {
        return Err(Error::NotSupported);
    }
    let n = check_regions(task, descriptors)?;
    // And the rest of the message, as `copyin` will see it.
    let names = &k.tasks.get(&task).ok_or(Error::InvalidArgument)?.names;
    k.ipc.check_copyin(names, header, descriptors, |i| {
        descriptors.get(i).is_some_and(|d| d.kind == DESC_OOL)
    })?;
    // Room for the handles, the moves, the table and the dropped list, first.
    let account = k
        .tasks
        .get(&task)
        .ok_or(Error::InvalidArgument)?
        .account
        .clone();
    let mut taken = Taken {
        attached: Vec::new(),
        moves: Vec::new(),
        task,
    };
    taken
        .attached
        .try_reserve_exact(n)
        .map_err(|_| Error::NoMemory)?;
    taken
        .moves
        .try_reserve_exact(n)
        .map_err(|_| Error::NoMemory)?;
    {
        // SAFETY: the lock is held (a system call); this reference ends with the block.
        let st = unsafe { state() };
        let want = st.regions.len().saturating_add(n);
        if st.spare.capacity() < want {
            st.spare
                .try_reserve(want - st.spare.len())
                .map_err(|_| Error::NoMemory)?;
        }
    }
    // Invoke: take each region (copy-on-write, nothing deleted).
    for (i, d) in descriptors.iter().enumerate() {
        if d.kind != DESC_OOL {
            continue;
        }
        let (lo, hi) = pages_of(d.value, d.size)?;
        let got = crate::quota::heap(&account, REGION_BYTES).and_then(|charge| {
            let carried = crate::vm::carry_out(k, task, lo, hi - lo, false)?;
            // SAFETY: the lock is held; this reference ends with the closure.
            let st = unsafe { state() };
            st.regions
                .insert(Region {
                    carried,
                    off: d.value - lo,
                    size: d.size,
                    moved: d.disposition & OOL_DEALLOCATE != 0,
                    _charge: charge,
                })
                .map_err(|r| {
                    crate::vm::release_carried(k, r.carried);
                    Error::NoMemory
                })
        });
        match got {
            Ok(key) => {
                taken.attached.push(Attached {
                    index: i as u8,
                    handle: key.0,
                    size: d.size,
                });
                if d.disposition & OOL_DEALLOCATE != 0 {
                    let (a, b) = inner_pages(d.value, d.size);
                    if b > a {
                        taken.moves.push((a, b - a));
                    }
                }
            }
            Err(e) => {
                release_all(k, taken.attached.iter().map(|a| a.handle));
                return Err(e);
            }
        }
    }
    Ok(taken)
}

/// Decodes the out-of-line descriptors among `descriptors` of a message of task `task`:
/// flags, sizes, addresses, overlaps, mapped, not wired (changing nothing). How many.
fn check_regions(task: TaskId, descriptors: &[Descriptor]) -> Result<usize, Error> {
    let mut n = 0usize;
    for (i, d) in descriptors.iter().enumerate() {
        if d.kind != DESC_OOL {
            continue;
        }
        n += 1;
        if d.disposition & !OOL_DEALLOCATE != 0 {
            return Err(Error::InvalidArgument);
        }
        let (lo, hi) = pages_of(d.value, d.size)?;
        // No two regions of one message overlap (a move must not take what another
        // descriptor sends).
        let end = d.value + d.size;
        let overlaps = descriptors.iter().take(i).any(|o| {
            o.kind == DESC_OOL && o.value < end && d.value < o.value.saturating_add(o.size)
        });
        if overlaps {
            return Err(Error::InvalidArgument);
        }
        crate::vm::check_carry(task, lo, hi - lo, false)?;
    }
    Ok(n)
}

// ---- migrating calls ------------------------------------------------------------------

/// Checks the out-of-line descriptors of a migrating call by task `task` as a message's
/// are checked ([`take`]), changing nothing.
pub fn check_migrating(task: TaskId, descriptors: &[Descriptor]) -> Result<(), Error> {
    check_regions(task, descriptors).map(|_| ())
}

/// Carries the regions of a migrating call (checked by [`check_migrating`]) from task
/// `from` straight into task `to`, the server's, as a message's regions are delivered
/// ([`place`]: by value, copy-on-write, anywhere, the bytes outside each range zeroed),
/// and rewrites each descriptor with the server's address and size (0 and 0 for a region
/// the server's map has no room for, as for a receiver's). Then the whole pages of a move
/// (`OOL_DEALLOCATE`) leave `from`. Every region is taken before any is placed, so an
/// error ([`Error::NoMemory`]: the kernel's own memory) changes nothing.
pub fn carry_migrating(
    k: &mut Kernel,
    from: TaskId,
    to: TaskId,
    descriptors: &mut [Descriptor],
) -> Result<(), Error> {
    let n = descriptors.iter().filter(|d| d.kind == DESC_OOL).count();
    let mut taken: Vec<(usize, Carried)> = Vec::new();
    taken.try_reserve_exact(n).map_err(|_| Error::NoMemory)?;
    for (i, d) in descriptors.iter().enumerate() {
        if d.kind != DESC_OOL {
            continue;
        }
        let got = pages_of(d.value, d.size)
            .and_then(|(lo, hi)| crate::vm::carry_out(k, from, lo, hi - lo, false));
        match got {
            Ok(c) => taken.push((i, c)),
            Err(e) => {
                for (_, c) in taken {
                    crate::vm::release_carried(k, c);
                }
                return Err(e);
            }
        }
    }
    for (i, carried) in taken {
        let Some(d) = descriptors.get_mut(i) else {
            crate::vm::release_carried(k, carried);
            continue;
        };
        let (value, size) = (d.value, d.size);
        let lo = value & !(PAGE_SIZE - 1);
        match place(k, to, carried, value - lo, size, Placement::Anywhere) {
            Ok(addr) => d.value = addr,
            Err(_) => (d.value, d.size) = (0, 0),
        }
        if d.disposition & OOL_DEALLOCATE != 0 {
            let (a, b) = inner_pages(value, size);
            if b > a {
                // Checked (mapped, not wired); as for a message, a split that cannot be
                // made leaves the sender its pages, and the receiver still has a value.
                let _ = crate::vm::deallocate_moved(k, from, a, b - a);
            }
        }
    }
    Ok(())
}

/// The message failed after [`take`]: its regions go, nothing else changed.
pub fn undo(k: &mut Kernel, attached: &[Attached]) {
    release_all(k, attached.iter().map(|a| a.handle));
}

/// The message is queued: the moves' whole pages leave the sender.
pub fn finish(k: &mut Kernel, moves: Vec<(u64, u64)>, task: TaskId) {
    for (start, len) in moves {
        // Checked before (mapped, not wired); only a split's allocation could fail, and
        // then the sender keeps its pages: the receiver still gets a value.
        let _ = crate::vm::deallocate(k, task, start, len);
    }
}

impl Taken {
    /// Splits into the handles (for the message) and what [`finish`] needs.
    pub fn split(self) -> (Vec<Attached>, Vec<(u64, u64)>, TaskId) {
        (self.attached, self.moves, self.task)
    }
}

/// Releases the regions `handles` name.
fn release_all(k: &mut Kernel, handles: impl Iterator<Item = u64>) {
    for h in handles {
        // SAFETY: the lock is held; this reference ends before the release.
        let region = unsafe { state() }.regions.remove(Key(h));
        if let Some(r) = region {
            crate::vm::release_carried(k, r.carried);
        }
    }
}

/// The dropped list for a new `Effects` (see the module invariants).
pub fn take_dropped_list() -> Vec<u64> {
    // SAFETY: the lock is held (every IPC operation runs under it); this reference ends
    // here.
    core::mem::take(&mut unsafe { state() }.spare)
}

/// Releases the regions of messages destroyed undelivered, and keeps the list.
pub fn release_dropped(k: &mut Kernel, mut dropped: Vec<u64>) {
    if !dropped.is_empty() {
        release_all(k, dropped.drain(..));
    }
    // SAFETY: the lock is held; this reference ends here.
    let st = unsafe { state() };
    if dropped.capacity() > st.spare.capacity() {
        st.spare = dropped;
    }
}

/// Delivers the out-of-line descriptors of a received message (as `copyout` wrote them:
/// `value` the region's handle) into task `task`: each region goes into its map wherever
/// there is room, and the descriptor gets the data's address and size. A region that
/// cannot be placed (no room, no memory) is released and its descriptor reads address 0
/// and size 0.
pub fn deliver(k: &mut Kernel, task: TaskId, out: &mut [Descriptor]) {
    for d in out.iter_mut().filter(|d| d.kind == DESC_OOL) {
        // SAFETY: the lock is held; this reference ends before the calls below.
        let region = unsafe { state() }.regions.remove(Key(d.value));
        d.value = 0;
        let Some(r) = region else {
            d.size = 0;
            continue;
        };
        let (off, len, moved) = (r.off, r.carried.len(), r.moved);
        match place(k, task, r.carried, r.off, r.size, Placement::Anywhere) {
            Ok(addr) => {
                d.value = addr;
                if moved {
                    // A moved region's resident pages are translated now, as Accent's
                    // IPC mapped them into the receiver, not one memory fill at a time
                    // (a copied region's pages are still the sender's too: its entries
                    // are offered none, `Map::resident_reads`).
                    crate::vm::prefault_region(k, task, addr - off, len);
                }
            }
            Err(_) => d.size = 0,
        }
    }
}

/// Puts the whole pages `carried` into task `task`'s map at `at`, readable and writable,
/// and zeroes what lies outside the `size` bytes at `off` in its first and last page:
/// the data's address.
fn place(
    k: &mut Kernel,
    task: TaskId,
    mut carried: Carried,
    off: u64,
    size: u64,
    at: Placement,
) -> Result<u64, Error> {
    let len = carried.len();
    carried.set_prot(Prot::RW, Prot::ALL);
    let start = match crate::vm::carry_in(task, carried, at) {
        Ok(s) => s,
        Err((e, c)) => {
            crate::vm::release_carried(k, c);
            return Err(e);
        }
    };
    let tail = start + off + size;
    let cleared = zero(k, task, start, off).and_then(|()| zero(k, task, tail, start + len - tail));
    if let Err(e) = cleared {
        // The receiver must never see the sender's bytes outside the range.
        let _ = crate::vm::deallocate(k, task, start, len);
        return Err(e);
    }
    Ok(start + off)
}

/// Writes `len` (< a page) zeros at `va` of task `task`.
fn zero(k: &mut Kernel, task: TaskId, va: u64, len: u64) -> Result<(), Error> {
    if len == 0 {
        return Ok(());
    }
    let z = ZEROS.get(..len as usize).ok_or(Error::InvalidArgument)?;
    k.copy_out(task, va, z)
}

// ---- vm_copy: MoveWords as a call -----------------------------------------------------

/// The task a `vm_copy` names: 0 for the caller, else a send right of the caller's to a
/// task's port.
fn task_named(k: &Kernel, caller: TaskId, name: u64) -> Result<TaskId, Error> {
    if name == 0 {
        return Ok(caller);
    }
    let names = &k.tasks.get(&caller).ok_or(Error::InvalidArgument)?.names;
    let port = k.ipc.sendable_port(names, name)?;
    match crate::kobject::object(k, port) {
        Some(crate::kobject::KObject::Task(t)) if crate::vm::has_map(t) => Ok(t),
        _ => Err(Error::InvalidRight),
    }
}

/// `vm_copy(src_task, src_addr, len, dst_task, dst_addr, flags)`: see `docs/abi.md`.
pub fn sys_vm_copy(k: &mut Kernel, caller: TaskId, a: [u64; 6]) -> Result<u64, Error> {
    let [src_name, src, len, dst_name, dst, flags] = a;
    if flags & !(VM_COPY_DELETE | VM_COPY_CREATE) != 0 {
        return Err(Error::InvalidArgument);
    }
    let delete = flags & VM_COPY_DELETE != 0;
    let create = flags & VM_COPY_CREATE != 0;
    let st = task_named(k, caller, src_name)?;
    let dt = task_named(k, caller, dst_name)?;
    let (lo, hi) = pages_of(src, len)?;
    let (ia, ib) = inner_pages(src, len);
    // Decode: the source, and for the overwrite form the destination.
    crate::vm::check_carry(st, lo, hi - lo, false)?;
    if create {
        let carried = crate::vm::carry_out(k, st, lo, hi - lo, false)?;
        let addr = place(k, dt, carried, src - lo, len, Placement::Anywhere)?;
        if delete && ib > ia {
            let _ = crate::vm::deallocate(k, st, ia, ib - ia);
        }
        return Ok(addr);
    }
    // Over a given destination: the same offset in the page, so whole pages map.
    if dst % PAGE_SIZE != src % PAGE_SIZE {
        return Err(Error::InvalidArgument);
    }
    let (dlo, dhi) = pages_of(dst, len)?;
    crate::vm::check_carry(dt, dlo, dhi - dlo, true)?;
    let (ja, jb) = inner_pages(dst, len);
    if delete && st == dt && ia < ib && ja < jb && ia < jb && ja < ib {
        // Deleting the source would delete part of the destination.
        return Err(Error::InvalidArgument);
    }
    // The partial end pages' bytes are copied (the destination's other bytes there
    // stay); read before anything changes, so an overlapping copy reads the source.
    let head_len = if ia >= ib { len } else { ia - src };
    let tail_len = if ia >= ib { 0 } else { src + len - ib };
    let head = k.copy_in_vec(st, src, head_len as usize)?;
    let tail = k.copy_in_vec(st, ib.max(src), tail_len as usize)?;
    if ib > ia {
        let mut carried = crate::vm::carry_out(k, st, ia, ib - ia, false)?;
        carried.set_prot(Prot::RW, Prot::ALL);
        if let Err(e) = crate::vm::deallocate(k, dt, ja, jb - ja) {
            crate::vm::release_carried(k, carried);
            return Err(e);
        }
        if let Err((e, c)) = crate::vm::carry_in(dt, carried, Placement::Fixed(ja)) {
            crate::vm::release_carried(k, c);
            return Err(e);
        }
    }
    k.copy_out(dt, dst, &head)?;
    if tail_len > 0 {
        k.copy_out(dt, jb.max(dst), &tail)?;
    }
    if delete && ib > ia {
        let _ = crate::vm::deallocate(k, st, ia, ib - ia);
    }
    Ok(dst)
}
