//! Page replacement (Accent section 2.2.6): a limit on the frames user memory may hold,
//! a global clock over every object's resident pages (`kern::vm::clock`), and page-out of
//! its victims, the machine's side. `docs/vm.md`, "Paging", describes the whole; the
//! default pager's protocol is `crate::pageout`'s.
//!
//! - Every frame the kernel puts into an object as a page of user memory is *counted*
//!   ([`count`]) and uncounted when it goes back to the allocator ([`uncount`], from
//!   `Mach::free_frame`); the count may not pass the *pageable limit* (the boot parameter
//!   `pageable=`, else every frame the allocator manages). DMA buffers and program images
//!   are not user memory in this sense: they are pinned, never counted, never taken.
//! - At the *low-water mark* (the reserve and half a batch) a user fault first reclaims a
//!   batch ([`reclaim`]):
//!   reference bits are gathered from every task's page tables (their accessed bits,
//!   cleared as they are read, so the clock's hand sees what was used since its last
//!   sweep), the clock picks pages whose bit is clear, every translation of them is
//!   removed, and then each leaves: an anonymous page is copied into a page-out message
//!   for the default pager (a backing-store slot allocated now: lazy backing store) and
//!   its frame freed; a page of a pager-backed object no mapping can have written is
//!   simply dropped (its pager supplies it again), and one of an object a mapping could
//!   have written is first given back to its pager in a data return ([`set_returner`]).
//! - The *reserve*: the last frames below the limit are the default pager's alone (its
//!   own faults, its supplies), so the path that frees memory never waits for memory.
//! - SPIN's `PhysAddr.Reclaim` (`docs/extensions.md`): before the batch is unmapped, each
//!   victim that is the page of a task with a `Reclaim` handler is offered to that task's
//!   handlers, which may nominate another of its pages instead ([`Nominator`], registered
//!   by the extension family; `kern::spin::reclaim` judges the nomination).
//!
//! # Invariants
//! - `used` is the number of frames in `counted`; every counted frame is a page of an
//!   object (or between [`reclaim`] and [`finish`], a page-out's frame).
//! - Never taken: pages of pinned or physical objects, pages in the window a wired range
//!   or an entry of the default pager's map maps (down its chain), of pager-backed objects with a copy
//!   object or shadows; of written pager-backed objects until a returner is registered.

use super::{rewrite_translations, shootdown, state, Shoot, Vm};
use crate::arch::paging::KernelMem;
use crate::kernel::{Kernel, TaskId};
use crate::locked::Locked;
use alloc::vec::Vec;
use baton_abi::paging::{PagingStats, Transfer, PAGE_OUT_SIZE, TRANSFER_SIZE};
use baton_abi::Error;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kern::frame::{PhysAddr, PAGE_SIZE};
use kern::pmap::{PhysMem, ACCESSED, ADDR_MASK, DIRTY, OWNED};
use kern::spin::reclaim::{self, Ignored};
use kern::vm::clock::{Clock, FrameSet, Slots, Victim};
use kern::vm::object::{Kind, Object, ObjectId};

/// Pages one reclaim takes at most.
pub const BATCH: usize = 32;

/// Most frames kept fresh at once ([`count_wanted`]).
const FRESH_MAX: usize = 64;

/// Page replacement's state.
pub struct Replace {
    /// Frames user memory may hold.
    pub limit: u64,
    /// Frames it holds.
    pub used: u64,
    /// Frames reserved for the default pager.
    pub reserve: u64,
    /// Frames free at boot: the most the limit may be.
    counted_span_total: u64,
    counted: FrameSet,
    referenced: FrameSet,
    /// Frames written since their page last went back to its pager: each page's sticky
    /// dirty bit, gathered from its translations' dirty bits whenever a translation is
    /// removed or write-protected, when replacement looks at its translations, and when a
    /// pager's flush asks; cleared when the frame is freed or its bytes are returned.
    dirty: FrameSet,
    /// Frames just put into objects for a thread that waits for them (a supply, a
    /// page-in), not yet passed by a reclaim: the next reclaim spares them (the waiting
    /// thread's own fault may reclaim before it maps the page it came for), then forgets
    /// them. At most [`FRESH_MAX`].
    fresh: FrameSet,
    fresh_list: [u64; FRESH_MAX],
    fresh_len: usize,
    clock: Clock,
    /// The default pager's store.
    pub slots: Slots,
    /// System-wide counters.
    pub stats: PagingStats,
    /// The default pager's task (its memory is never taken).
    pub pager: Option<TaskId>,
    /// Other tasks on the path that frees memory (`paging_exempt`: a file server and its
    /// disk driver), treated as the default pager is; 0 marks a free place. Task ids are
    /// never reused, so the id of a task that ended names nothing.
    exempt: [TaskId; baton_abi::paging::EXEMPT_MAX],
    ready: bool,
}

static REPLACE: Locked<Replace> = Locked::new();

/// The state (made on first use; not ready until [`init`]).
///
/// # Safety
/// The caller holds the big kernel lock and keeps no other reference from this function
/// alive while it uses this one.
pub unsafe fn replace() -> &'static mut Replace {
    // SAFETY: the caller holds the lock and no other reference to the cell is live.
    unsafe {
        REPLACE.get_or_make(|| Replace {
            limit: u64::MAX,
            used: 0,
            reserve: 0,
            counted_span_total: 0,
            counted: FrameSet::default(),
            referenced: FrameSet::default(),
            dirty: FrameSet::default(),
            fresh: FrameSet::default(),
            fresh_list: [0; FRESH_MAX],
            fresh_len: 0,
            clock: Clock::new(),
            slots: Slots::new(),
            stats: PagingStats::default(),
            pager: None,
            exempt: [0; baton_abi::paging::EXEMPT_MAX],
            ready: false,
        })
    }
}

/// Sets page replacement up over the frame allocator (once, at boot): `limit` frames of
/// user memory at most (`pageable=`), else as many as the allocator manages.
pub fn init(frames: &kern::frame::FrameAllocator, limit: Option<u64>) {
    let (first, count) = frames.span();
    let total = frames.free_frames() as u64;
    // SAFETY: the lock is held (boot); the reference ends in this function.
    let r = unsafe { replace() };
    let (Ok(counted), Ok(referenced), Ok(dirty), Ok(fresh)) = (
        FrameSet::new(first, count),
        FrameSet::new(first, count),
        FrameSet::new(first, count),
        FrameSet::new(first, count),
    ) else {
        crate::arch::serial::kprintln!("[kernel] no memory for page replacement: off");
        return;
    };
    r.counted = counted;
    r.referenced = referenced;
    r.dirty = dirty;
    r.fresh = fresh;
    r.counted_span_total = total;
    set_limit_in(r, limit.unwrap_or(total).min(total));
    r.ready = true;
    if limit.is_some() {
        crate::arch::serial::kprintln!(
            "[kernel] user memory limited to {} frames ({} reserved for the default pager)",
            r.limit,
            r.reserve
        );
    }
}

/// `paging_limit`: user memory may hold at most `frames` frames from now on (at least
/// `LIMIT_MIN`, at most what the allocator has); the limit it replaces.
pub fn set_limit(k: &Kernel, frames: u64) -> Result<u64, Error> {
    // SAFETY: the lock is held; the reference ends in this function.
    let r = unsafe { replace() };
    if !r.ready {
        return Err(Error::NotSupported);
    }
    let total = r.counted_span_total.min(k.frames.total_frames() as u64);
    if frames < baton_abi::paging::LIMIT_MIN || frames > total {
        return Err(Error::InvalidArgument);
    }
    let old = r.limit;
    set_limit_in(r, frames);
    Ok(old)
}

fn set_limit_in(r: &mut Replace, frames: u64) {
    r.limit = frames;
    // A sixteenth of the limit, from 16 to 64 frames, is the default pager's alone.
    r.reserve = (frames / 16).clamp(16, 64).min(frames / 2);
    r.stats.pageable_limit = frames;
}

/// `paging_exempt`: task `task` is on the path that frees memory, as the default pager is:
/// its pages are never victims and it may use the reserve. [`Error::NoSpace`] when every
/// place is taken by a live task.
pub fn exempt(k: &Kernel, task: TaskId) -> Result<(), Error> {
    // SAFETY: the lock is held; the reference ends in this function.
    let r = unsafe { replace() };
    if r.exempt.contains(&task) {
        return Ok(());
    }
    let free = r
        .exempt
        .iter_mut()
        .find(|t| **t == 0 || k.tasks.get(t).is_none())
        .ok_or(Error::NoSpace)?;
    *free = task;
    Ok(())
}

/// Whether `task` is the default pager or exempt like it (`task` 0: no).
fn on_pageout_path(r: &Replace, task: TaskId) -> bool {
    task != 0 && (Some(task) == r.pager || r.exempt.contains(&task))
}

/// Frames free for user memory now: under the limit and in the allocator.
fn free_now(r: &Replace, k: &Kernel) -> u64 {
    r.limit
        .saturating_sub(r.used)
        .min(k.frames.free_frames() as u64)
}

/// Whether task `task` may take one more frame of user memory (the reserve is the
/// default pager's), for a caller that has the allocator's free count (`alloc_free`) but not the
/// kernel at hand; `task` 0 for no task in particular.
pub fn room_for(alloc_free: u64, task: TaskId) -> bool {
    // SAFETY: the lock is held; the reference ends in this function.
    let r = unsafe { replace() };
    let free = r.limit.saturating_sub(r.used).min(alloc_free);
    if on_pageout_path(r, task) {
        free > 0
    } else {
        free > r.reserve
    }
}

/// Whether a fault of `task` should reclaim first (free frames at the low-water mark,
/// and a default pager or pager-backed pages to reclaim into).
pub fn wanted(k: &Kernel, task: TaskId) -> bool {
    // SAFETY: the lock is held; the reference ends in this function.
    let r = unsafe { replace() };
    // Half a batch above the reserve: a batch reclaimed then lasts for a batch of faults.
    // (An exempt task reclaims as any: a file server's own fault may free the pages of its
    // files. The default pager does not: its reclaim would only queue page-outs to itself.)
    r.ready && Some(task) != r.pager && free_now(r, k) <= r.reserve + BATCH as u64 / 2
}

/// Counts `frame`, just put into an object as a page of user memory.
pub fn count(frame: PhysAddr) {
    // SAFETY: the lock is held; the reference ends in this function.
    count_in(unsafe { replace() }, frame);
}

/// Counts `frame`, just put into an object as a page a thread waits for (a pager's
/// supply, a page-in): it is also marked referenced, so that the clock does not take it
/// before the waiting thread has touched it (with memory at the low-water mark, that
/// thread's next fault reclaims first, and would otherwise drop the page it came for).
pub fn count_wanted(frame: PhysAddr) {
    // SAFETY: the lock is held; the reference ends in this function.
    let r = unsafe { replace() };
    count_in(r, frame);
    mark_fresh(r, frame);
}

fn mark_fresh(r: &mut Replace, frame: PhysAddr) {
    if let Some(slot) = r.fresh_list.get_mut(r.fresh_len) {
        if r.fresh.insert(frame.0) {
            *slot = frame.0;
            r.fresh_len += 1;
        }
    }
}

/// `frame` goes back to the allocator: uncounted if it was counted.
pub fn uncount(frame: PhysAddr) {
    // SAFETY: the lock is held; the reference ends in this function.
    uncount_in(unsafe { replace() }, frame);
}

fn uncount_in(r: &mut Replace, frame: PhysAddr) {
    r.dirty.remove(frame.0);
    if r.counted.remove(frame.0) {
        r.used -= 1;
        r.stats.pageable_used = r.used;
        r.referenced.remove(frame.0);
    }
}

fn count_in(r: &mut Replace, frame: PhysAddr) {
    if r.counted.insert(frame.0) {
        r.used += 1;
        r.stats.pageable_used = r.used;
        r.stats.from_free += 1;
    }
}

/// The page in `frame` was written: its sticky dirty bit is set (a translation with the
/// processor's dirty bit is going, or the kernel wrote it).
#[inline]
pub fn mark_dirty(frame: PhysAddr) {
    // SAFETY: the lock is held; the reference ends in this function.
    unsafe { replace() }.dirty.insert(frame.0 & ADDR_MASK);
}

/// Whether the page in `frame` was written since its bytes last went to its pager.
pub fn is_dirty(frame: PhysAddr) -> bool {
    // SAFETY: the lock is held; the reference ends in this function.
    unsafe { replace() }.dirty.contains(frame.0 & ADDR_MASK)
}

/// The page in `frame` went back to its pager: it is clean.
pub fn clear_dirty(frame: PhysAddr) {
    // SAFETY: the lock is held; the reference ends in this function.
    unsafe { replace() }.dirty.remove(frame.0 & ADDR_MASK);
}

/// Gives a page's frame back to the allocator, uncounted.
fn release(r: &mut Replace, vm: &mut Vm, k: &mut Kernel, frame: PhysAddr) {
    uncount_in(r, frame);
    vm.rmap.frame_freed(frame.0);
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    mem.free_frame(frame);
}

/// A page on its way out: marked paged out in its object, its translations gone, its
/// frame still held until the message carrying its bytes is sent ([`finish`]).
pub struct Outgoing {
    /// The object and offset.
    pub object: ObjectId,
    /// Offset in it.
    pub offset: u64,
    /// Its slot.
    pub slot: u32,
    /// Its frame.
    pub frame: PhysAddr,
    /// The page-out message's data: a [`Transfer`] and the page.
    pub data: Vec<u8>,
    /// The task whose map translated it (0: none).
    pub task: TaskId,
}

/// The windows of objects page replacement must not take pages of: what the default
/// pager's map and every wired range map, down each chain (object, first offset, end
/// offset). Sorted by object. `None` if there is no memory for it.
fn pinned_windows(vm: &Vm, r: &Replace) -> Option<Vec<(ObjectId, u64, u64)>> {
    let mut out: Vec<(ObjectId, u64, u64)> = Vec::new();
    for (id, tv) in vm.tasks.iter() {
        let all = on_pageout_path(r, id);
        for (s, e) in tv.map.entries() {
            if !all && e.wired == 0 {
                continue;
            }
            let len = e.end.saturating_sub(s);
            let mut cur = Some((e.object, e.offset));
            let mut depth = 0;
            while let Some((o, off)) = cur {
                out.try_reserve(1).ok()?;
                out.push((o, off, off.saturating_add(len)));
                depth += 1;
                cur = vm
                    .objects
                    .get(o)
                    .and_then(|ob| ob.backing())
                    .map(|(b, boff)| (b, off.saturating_add(boff)))
                    .filter(|_| depth <= vm.objects.len());
            }
        }
    }
    out.sort_unstable();
    Some(out)
}

/// Whether `offset` of `object` lies in one of the `pinned` windows.
fn pinned(pinned: &[(ObjectId, u64, u64)], object: ObjectId, offset: u64) -> bool {
    let from = pinned.partition_point(|&(o, _, _)| o < object);
    pinned
        .get(from..)
        .unwrap_or(&[])
        .iter()
        .take_while(|&&(o, _, _)| o == object)
        .any(|&(_, a, b)| (a..b).contains(&offset))
}

/// Reads and clears the accessed bits of every task's user translations into the
/// reference set, shooting down the translations whose bit was cleared (so the processor
/// sets it again at the next use).
fn gather_referenced(k: &mut Kernel, vm: &Vm, referenced: &mut FrameSet, dirty: &mut FrameSet) {
    let mut next = k.tasks.next_id(None);
    while let Some(id) = next {
        next = k.tasks.next_id(Some(id));
        let (Some(tv), Some(t)) = (vm.tasks.get(&id), k.tasks.get_mut(&id)) else {
            continue;
        };
        let mut mem = KernelMem {
            frames: &mut k.frames,
        };
        let mut changed = 0;
        for (s, e) in tv.map.entries() {
            changed += t.space.update_leaves(&mut mem, s, e.end, |_, pte| {
                if pte & OWNED == 0 && pte & DIRTY != 0 {
                    // Sticky: the translation keeps its bit too.
                    dirty.insert(pte & ADDR_MASK);
                }
                if pte & OWNED == 0 && pte & ACCESSED != 0 {
                    referenced.insert(pte & ADDR_MASK);
                    pte & !ACCESSED
                } else {
                    pte
                }
            });
        }
        if changed > 0 {
            shootdown(k, id);
        }
    }
}

/// Whether a translation of `frame` was used since the hand last passed it: reads and
/// clears the accessed bits of its translations (through the reverse map), keeping their
/// dirty bits in `dirty`; the tasks whose bits were cleared are noted in `shoot` (so that
/// the processor sets the bit again at the next use).
fn used_since(
    k: &mut Kernel,
    rmap: &kern::vm::rmap::Rmap,
    frame: PhysAddr,
    shoot: &mut Shoot,
    dirty: &mut FrameSet,
) -> bool {
    let mut used = false;
    rewrite_translations(k, rmap, frame, shoot, |_, pte| {
        if pte & DIRTY != 0 {
            // Sticky: the translation keeps its bit too.
            dirty.insert(pte & ADDR_MASK);
        }
        if pte & ACCESSED != 0 {
            used = true;
            pte & !ACCESSED
        } else {
            pte
        }
    });
    used
}

/// Removes every translation of the `victims` through the reverse map, noting in `mapped`
/// (by victim) the task that had one; whether the map knew every translation of each
/// (otherwise the caller sweeps every task as well).
fn unmap_by_rmap(
    k: &mut Kernel,
    vm: &Vm,
    victims: &[Victim<PhysAddr>],
    mapped: &mut [TaskId],
    dirty: &mut FrameSet,
) -> bool {
    let mut shoot = Shoot::default();
    let mut all = true;
    for (v, m) in victims.iter().zip(mapped.iter_mut()) {
        all &= rewrite_translations(k, &vm.rmap, v.frame, &mut shoot, |task, pte| {
            *m = task;
            if pte & DIRTY != 0 {
                dirty.insert(pte & ADDR_MASK);
            }
            0
        });
    }
    shoot.fire(k);
    all
}

/// Removes every translation of the `victims` (sorted by frame) from every task; notes
/// in `mapped` (by victim) the task that had one.
fn unmap_victims(
    k: &mut Kernel,
    vm: &Vm,
    frames: &[(u64, usize)],
    mapped: &mut [TaskId],
    dirty: &mut FrameSet,
) {
    let mut next = k.tasks.next_id(None);
    while let Some(id) = next {
        next = k.tasks.next_id(Some(id));
        let (Some(tv), Some(t)) = (vm.tasks.get(&id), k.tasks.get_mut(&id)) else {
            continue;
        };
        let mut mem = KernelMem {
            frames: &mut k.frames,
        };
        let mut changed = 0;
        for (s, e) in tv.map.entries() {
            changed += t.space.update_leaves(&mut mem, s, e.end, |_, pte| {
                if pte & OWNED != 0 {
                    return pte;
                }
                match frames.binary_search_by_key(&(pte & ADDR_MASK), |&(f, _)| f) {
                    Ok(i) => {
                        if let Some(&(_, v)) = frames.get(i) {
                            if let Some(m) = mapped.get_mut(v) {
                                *m = id;
                            }
                        }
                        if pte & DIRTY != 0 {
                            dirty.insert(pte & ADDR_MASK);
                        }
                        0
                    }
                    Err(_) => pte,
                }
            });
        }
        if changed > 0 {
            shootdown(k, id);
        }
    }
}

/// Reclaims up to [`BATCH`] pages: clean pager-backed pages are dropped (their frames
/// free now); anonymous pages (only with `anonymous`: the caller can queue their
/// page-outs) come back as [`Outgoing`] page-outs for the caller to send to the default
/// pager and then [`finish`]. Allocates only bounded bookkeeping; on any shortage it
/// reclaims less.
pub fn reclaim(k: &mut Kernel, anonymous: bool) -> Vec<Outgoing> {
    let mut outgoing: Vec<Outgoing> = Vec::new();
    // SAFETY: the lock is held; these two references are the only ones to their cells
    // until this function returns, and nothing below takes them again.
    let (vm, r) = unsafe { (state(), replace()) };
    if !r.ready {
        return outgoing;
    }
    let Some(windows) = pinned_windows(vm, r) else {
        return outgoing;
    };
    let mut victims: Vec<Victim<PhysAddr>> = Vec::new();
    if victims.try_reserve_exact(BATCH).is_err() || outgoing.try_reserve_exact(BATCH).is_err() {
        return outgoing;
    }
    // With the reverse map, the hand asks each page it passes whether a translation of
    // it was used (and clears the bits it reads); without it (or with a frame whose
    // translations it does not all know), every task's bits are gathered first.
    let by_rmap = vm.rmap.ready() && vm.rmap.unknown() == 0;
    if !by_rmap {
        gather_referenced(k, vm, &mut r.referenced, &mut r.dirty);
    }
    let have_store = anonymous && r.slots.capacity() > r.slots.in_use();
    if anonymous && !have_store {
        r.stats.no_store += 1;
    }
    let budget = (2 * r.used as usize).saturating_add(2 * BATCH);
    let Replace {
        clock,
        referenced,
        fresh,
        dirty,
        ..
    } = r;
    let before = (clock.scanned, clock.spared);
    let can_return = RETURN.get().is_some();
    let mut shoot = Shoot::default();
    let rmap = &vm.rmap;
    clock.select(
        &vm.objects,
        budget,
        |_, o| takeable(o, have_store, can_return),
        |id, off| pinned(&windows, id, off),
        |f| {
            if fresh.contains(f.0) || referenced.remove(f.0) {
                return true;
            }
            by_rmap && used_since(k, rmap, f, &mut shoot, dirty)
        },
        &mut victims,
    );
    shoot.fire(k);
    // Fresh frames are spared by this reclaim only.
    for &f in r.fresh_list.get(..r.fresh_len).unwrap_or(&[]) {
        r.fresh.remove(f);
    }
    r.fresh_len = 0;
    r.stats.scanned += r.clock.scanned - before.0;
    r.stats.spared += r.clock.spared - before.1;
    if victims.is_empty() {
        return outgoing;
    }
    if NOMINATOR.get().is_some_and(|n| (n.any)()) {
        nominate(k, &windows, &mut victims, have_store, can_return);
    }
    // SAFETY: the lock is held; the references taken above are not used past the
    // handlers `nominate` ran (which took their own), so these are the only ones again.
    let (vm, r) = unsafe { (state(), replace()) };
    let mut frames: Vec<(u64, usize)> = Vec::new();
    let mut mapped: Vec<TaskId> = Vec::new();
    if frames.try_reserve_exact(victims.len()).is_err()
        || mapped.try_reserve_exact(victims.len()).is_err()
    {
        return outgoing;
    }
    frames.extend(victims.iter().enumerate().map(|(i, v)| (v.frame.0, i)));
    frames.sort_unstable();
    mapped.resize(victims.len(), 0);
    if !(by_rmap && unmap_by_rmap(k, vm, &victims, &mut mapped, &mut r.dirty)) {
        unmap_victims(k, vm, &frames, &mut mapped, &mut r.dirty);
    }
    for (v, &task) in victims.iter().zip(mapped.iter()) {
        if v.pager_backed {
            // Only a page written since it last went to its pager goes back to it (its
            // sticky dirty bit); a clean one is dropped, and supplied again when touched.
            let written = match vm.objects.get(v.object) {
                Some(o) if o.written() && r.dirty.contains(v.frame.0) => match o.kind() {
                    Kind::Pager { pager, .. } => Some(pager),
                    _ => None,
                },
                _ => None,
            };
            if let Some(pager) = written {
                // Its bytes go to its pager first; a page that cannot be returned (no
                // kernel memory for the message, the pager's queue full or its port gone)
                // stays resident, unmapped, and its next touch finds it.
                let mut bytes: Vec<u8> = Vec::new();
                if bytes.try_reserve_exact(PAGE_SIZE as usize).is_err() {
                    continue;
                }
                bytes.resize(PAGE_SIZE as usize, 0);
                let mem = KernelMem {
                    frames: &mut k.frames,
                };
                mem.read_bytes(v.frame, &mut bytes);
                if !RETURN
                    .get()
                    .is_some_and(|ret| ret(k, pager, v.offset, bytes))
                {
                    continue;
                }
            }
            if let Ok(f) = vm.objects.drop_pager_page(v.object, v.offset) {
                release(r, vm, k, f);
                r.stats.reclaimed_pager += 1;
            }
            continue;
        }
        let mut data: Vec<u8> = Vec::new();
        if data.try_reserve_exact(PAGE_OUT_SIZE).is_err() {
            break;
        }
        let Some(slot) = r.slots.alloc() else {
            r.stats.no_store += 1;
            continue;
        };
        let Ok(frame) = vm.objects.page_out(v.object, v.offset, slot) else {
            r.slots.free(slot);
            continue;
        };
        let t = Transfer {
            object: v.object.0 .0,
            offset: v.offset,
            slot: u64::from(slot),
            task: 0,
        };
        data.extend_from_slice(&t.to_bytes());
        data.resize(PAGE_OUT_SIZE, 0);
        let mem = KernelMem {
            frames: &mut k.frames,
        };
        if let Some(page) = data.get_mut(TRANSFER_SIZE..) {
            mem.read_bytes(frame, page);
        }
        outgoing.push(Outgoing {
            object: v.object,
            offset: v.offset,
            slot,
            frame,
            data,
            task,
        });
    }
    outgoing
}

/// Whether page replacement may take pages of `o` now: anonymous ones when there is a
/// store to page them out to; a pager-backed object's when they are clean or a written
/// page can go back to its pager (a data return) before it is dropped.
fn takeable(o: &Object<PhysAddr>, have_store: bool, can_return: bool) -> bool {
    match o.kind() {
        Kind::Anonymous => have_store,
        Kind::Pager { .. } => !o.written() || can_return,
        Kind::Physical { .. } => false,
    }
}

/// SPIN's `PhysAddr.Reclaim` as page replacement sees it (the extension family registers
/// it at boot, [`set_nominator`]; this family never imports that one).
pub struct Nominator {
    /// Whether any task has a handler (one load).
    pub any: fn() -> bool,
    /// Whether `task` has a handler to ask.
    pub asks: fn(TaskId) -> bool,
    /// Asks `task`'s handlers about its page at `va`, which replacement is about to take:
    /// the address of the page to take instead (the candidate's own to let it go). The
    /// handlers may look at the task's map but change nothing.
    pub nominate: fn(&mut Kernel, TaskId, u64) -> u64,
    /// What became of `task`'s answer: `Ok(true)` taken, `Ok(false)` the candidate itself,
    /// or ignored and why.
    pub judged: fn(TaskId, Result<bool, Ignored>),
}

static NOMINATOR: spin::Once<Nominator> = spin::Once::new();

/// The frames of the batch whose pages `PhysAddr.Reclaim` handlers are being asked about
/// (the first [`CHOSEN_LEN`]; none otherwise): what `Translation.ExamineMapping` reports
/// as `STATE_CHOSEN`, so that a handler can nominate a page that is not going anyway.
static CHOSEN: [AtomicU64; BATCH] = [const { AtomicU64::new(0) }; BATCH];
static CHOSEN_LEN: AtomicUsize = AtomicUsize::new(0);

/// Whether `frame` is in the batch `PhysAddr.Reclaim` handlers are being asked about.
pub fn chosen(frame: u64) -> bool {
    let n = CHOSEN_LEN.load(Ordering::Relaxed);
    CHOSEN
        .get(..n)
        .is_some_and(|c| c.iter().any(|f| f.load(Ordering::Relaxed) == frame))
}

/// Registers the `PhysAddr.Reclaim` raise (once, at boot).
pub fn set_nominator(n: Nominator) {
    NOMINATOR.call_once(|| n);
}

/// `PhysAddr.Reclaim` over a batch the clock chose: each victim that a task with a
/// handler maps directly from a private object (`kern::spin::reclaim`) is its page; the
/// handlers are asked, and a nomination `kern::spin::reclaim::judge` accepts takes the
/// victim's place. Takes its own references to the state between the handlers' runs.
#[inline(never)]
fn nominate(
    k: &mut Kernel,
    windows: &[(ObjectId, u64, u64)],
    victims: &mut [Victim<PhysAddr>],
    have_store: bool,
    can_return: bool,
) {
    let Some(n) = NOMINATOR.get() else {
        return;
    };
    // (victim, task, address): found before any handler runs, as nothing may change
    // under them.
    let mut asks = [(0usize, 0 as TaskId, 0u64); BATCH];
    let mut len = 0;
    {
        // SAFETY: the lock is held; this reference ends in this block, before a handler
        // runs.
        let vm = unsafe { state() };
        // The owner of each victim, through the reverse map: a private object is mapped
        // by one task, and a translation of the victim's frame names it and the address
        // (checked against that task's map: a stale record names nothing). A victim none
        // of whose translations is recorded (resident but not translated now) is looked
        // for in every asking task's map, as before the reverse map; that is rare, and
        // the answer is the same either way (`reclaim::candidate_at`).
        let mut unplaced = false;
        for (i, v) in victims.iter().enumerate() {
            if len >= asks.len() {
                break;
            }
            if !vm.objects.is_private(v.object) {
                continue;
            }
            let mut owner = None;
            vm.rmap.each(v.frame.0, |task, va| {
                if owner.is_none()
                    && vm
                        .tasks
                        .get(&task)
                        .is_some_and(|tv| reclaim::candidate_at(&vm.objects, &tv.map, v, va))
                {
                    owner = Some((task, va));
                }
            });
            match owner {
                // Its one owner has no handler: nobody is asked.
                Some((task, _)) if !(n.asks)(task) => {}
                Some((task, va)) => {
                    if let Some(slot) = asks.get_mut(len) {
                        *slot = (i, task, va);
                        len += 1;
                    }
                }
                None => unplaced = true,
            }
        }
        if unplaced {
            for (id, tv) in vm.tasks.iter() {
                if !(n.asks)(id) {
                    continue;
                }
                for (i, v) in victims.iter().enumerate() {
                    if len >= asks.len()
                        || asks.get(..len).is_some_and(|a| a.iter().any(|x| x.0 == i))
                    {
                        continue;
                    }
                    if let Some(va) = reclaim::candidate_address(&vm.objects, &tv.map, v) {
                        if let Some(slot) = asks.get_mut(len) {
                            *slot = (i, id, va);
                            len += 1;
                        }
                    }
                }
            }
        }
        // The handlers are asked in the order the walk by task asked them (task, then
        // victim), so that which nomination is judged first does not change.
        if let Some(a) = asks.get_mut(..len) {
            a.sort_unstable_by_key(|&(i, task, _)| (task, i));
        }
    }
    for (slot, v) in CHOSEN.iter().zip(victims.iter()) {
        slot.store(v.frame.0, Ordering::Relaxed);
    }
    CHOSEN_LEN.store(victims.len().min(BATCH), Ordering::Relaxed);
    for &(i, task, va) in asks.get(..len).unwrap_or(&[]) {
        let nominee = (n.nominate)(k, task, va);
        // SAFETY: the lock is held; the handlers' references have ended, and this one
        // ends in this iteration.
        let vm = unsafe { state() };
        let (Some(tv), Some(&candidate)) = (vm.tasks.get(&task), victims.get(i)) else {
            continue;
        };
        let verdict = reclaim::judge(
            &vm.objects,
            &tv.map,
            nominee,
            &candidate,
            victims,
            |_, o| takeable(o, have_store, can_return),
            |id, off| pinned(windows, id, off),
        );
        if let (Ok(Some(page)), Some(slot)) = (verdict, victims.get_mut(i)) {
            *slot = page;
            if let Some(c) = CHOSEN.get(i) {
                c.store(page.frame.0, Ordering::Relaxed);
            }
        }
        (n.judged)(task, verdict.map(|v| v.is_some()));
    }
    CHOSEN_LEN.store(0, Ordering::Relaxed);
}

/// The pager family's way to give a written page of a pager-backed object back to its
/// pager ([`set_returner`]): the pager's key, the page's offset, its bytes; whether the
/// data return was queued.
pub type ReturnPage = fn(&mut Kernel, u64, u64, Vec<u8>) -> bool;

static RETURN: spin::Once<ReturnPage> = spin::Once::new();

/// Registers the pager family's data return for replacement (once, at boot). Until then a
/// written page of a pager-backed object is never a victim.
pub fn set_returner(ret: ReturnPage) {
    RETURN.call_once(|| ret);
}

/// A page-out [`reclaim`] made was sent (`sent`): its frame goes back to the allocator,
/// and it is counted; or it could not be: the page is resident again, as it was.
pub fn finish(k: &mut Kernel, out: &Outgoing, sent: bool) {
    // SAFETY: the lock is held; the references end in this function.
    let (vm, r) = unsafe { (state(), replace()) };
    if sent {
        release(r, vm, k, out.frame);
        r.stats.pageouts += 1;
        if out.task != 0 {
            r.stats.reclaimed_mapped += 1;
        } else {
            r.stats.reclaimed_unmapped += 1;
        }
        if let Some(tv) = vm.tasks.get_mut(&out.task) {
            tv.paging.pageouts += 1;
        }
    } else {
        r.stats.unsent += 1;
        if vm
            .objects
            .swap_in(out.object, out.offset, out.slot, out.frame)
            .is_ok()
        {
            r.slots.free(out.slot);
        }
    }
}

/// A paged-out page is gone with its object or window: its slot is free.
pub fn free_slot(slot: u32) {
    // SAFETY: the lock is held; the reference ends in this function.
    unsafe { replace() }.slots.free(slot);
}

/// Whether the paged-out page's slot lost its contents with a dead default pager.
pub fn slot_lost(slot: u32) -> bool {
    // SAFETY: the lock is held; the reference ends in this function.
    unsafe { replace() }.slots.is_lost(slot)
}

/// Puts `bytes` (a page the default pager kept in `slot`) back at `offset` of `object`,
/// for task `task`'s fault (or 0): `Ok(true)` when it went in, `Ok(false)` when the page
/// is no longer paged out there (its memory went meanwhile, or it came in already).
pub fn swap_in(
    k: &mut Kernel,
    object: ObjectId,
    offset: u64,
    slot: u32,
    bytes: &[u8],
    task: TaskId,
) -> Result<bool, Error> {
    // SAFETY: the lock is held; the references end in this function.
    let (vm, r) = unsafe { (state(), replace()) };
    let waiting = vm.objects.get(object).and_then(|o| o.page(offset));
    if !matches!(waiting, Some(kern::vm::object::Page::Out { slot: s, .. }) if s == slot) {
        return Ok(false);
    }
    if free_now(r, k) == 0 {
        return Err(Error::NoMemory);
    }
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    let f = mem.alloc_frame().ok_or(Error::NoMemory)?;
    mem.write_bytes(f, bytes.get(..PAGE_SIZE as usize).unwrap_or(bytes));
    if let Err((e, f)) = vm.objects.swap_in(object, offset, slot, f) {
        mem.free_frame(f);
        return Err(e);
    }
    count_in(r, f);
    mark_fresh(r, f);
    r.slots.free(slot);
    r.stats.pageins += 1;
    if let Some(tv) = vm.tasks.get_mut(&task) {
        tv.paging.pageins += 1;
    }
    Ok(true)
}

/// The default pager is gone: every slot it held is lost, pages asked of it are not
/// asked any more (a fault on them now finds their slot lost: an error), and no store is
/// offered until another registers.
pub fn pager_gone() {
    // SAFETY: the lock is held; the references end in this function.
    let (vm, r) = unsafe { (state(), replace()) };
    r.slots.lose_all();
    r.pager = None;
    let mut asked: Vec<(ObjectId, u64)> = Vec::new();
    for (id, o) in vm.objects.iter() {
        for (off, p) in o.iter_pages() {
            if matches!(p, kern::vm::object::Page::Out { asked: true, .. })
                && asked.try_reserve(1).is_ok()
            {
                asked.push((id, off));
            }
        }
    }
    for (id, off) in asked {
        vm.objects.swap_in_failed(id, off);
    }
}

/// A fault met a page whose slot was lost: counted.
pub fn count_lost() {
    // SAFETY: the lock is held; the reference ends in this function.
    unsafe { replace() }.stats.lost += 1;
}

/// A fault found no frame even after replacement: counted.
pub fn count_no_memory(task: TaskId) {
    // SAFETY: the lock is held; the references end in this function.
    let (vm, r) = unsafe { (state(), replace()) };
    r.stats.no_memory += 1;
    if let Some(tv) = vm.tasks.get_mut(&task) {
        tv.paging.no_memory += 1;
    }
}

/// The counters: the system's, or task `task`'s.
pub fn stats(task: Option<TaskId>) -> Option<PagingStats> {
    // SAFETY: the lock is held; the references end in this function.
    let (vm, r) = unsafe { (state(), replace()) };
    match task {
        None => {
            let mut s = r.stats;
            s.store_slots = u64::from(r.slots.capacity());
            s.store_used = u64::from(r.slots.in_use());
            Some(s)
        }
        Some(t) => vm.tasks.get(&t).map(|tv| tv.paging),
    }
}
