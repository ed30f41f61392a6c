//! The virtual-memory family: Accent's memory objects and address maps (`kern::vm`)
//! wired into the kernel. Each task has an address map; its page tables are only a cache
//! of it, filled when a page fault (or the kernel's own access to user memory) finds a
//! page missing, and emptied of whatever a map operation takes away. `docs/vm.md`
//! describes the design; this module is the machine's side of it:
//!
//! - [`Mach`] is `kern::vm::Machine` over the x86-64 page tables and the frame allocator;
//! - [`page_fault`] carries out `kern::vm::fault::resolve`'s decisions for a user-mode
//!   page fault (zero fill, copy-on-write copy, map), and says which Table 3-10 class an
//!   unsatisfiable one is, for the exception path;
//! - [`make_resident`] does the same for the kernel's copies to and from user memory
//!   (`kern::usercopy` walks page tables and never faults: a copy that fails with
//!   `BadAddress` asks here first and is tried once more);
//! - wirings keep the pages whose frames the kernel caches (a thread's IPC buffer, an
//!   activation's buffer) resident and undeallocatable;
//! - the system calls: `mem_map`/`mem_unmap` (allocate and deallocate, lazily) and the
//!   `vm_*` calls (`docs/abi.md`);
//! - SPIN's memory interfaces for the extension family (`crate::extension::translation`):
//!   [`translation_fault`] raises the `Translation` events before [`page_fault`] (through
//!   the raise it registers), and the `spin_*` functions are `Translation`, `VirtAddr`
//!   and `PhysAddr` on the map;
//! - a small object interface for memory objects as capabilities (`crate::memobj`): make
//!   anonymous, physical and DMA objects, add and drop references, map a window (entering
//!   the translations of its resident pages at once), the key of a shared wait.
//!
//! The family's state ([`Vm`]: every object, each task's map, fault counters) is its own,
//! kept beside the kernel's under the same big kernel lock. The core reaches it through
//! the hooks `space_made`, `space_freed` and `page_fault` (`family.rs`).
//!
//! # Invariants
//! - Every user translation of a task is of a page its map maps, to the frame the map's
//!   objects hold there (or would, for a copy-on-write read), writable only as
//!   `kern::vm::fault` decided; it is never [`kern::pmap::OWNED`]: frames belong to
//!   objects, and go back to the frame allocator only through [`Mach::free_frame`].
//! - A translation removed or write-protected is shot down from every CPU's TLB before the
//!   big kernel lock is released (so before any freed frame can be handed out again).
//! - Every frame the kernel caches from user memory lies in a range wired for it (a
//!   [`Wiring`]); a wiring whose owner forgot its frames is dropped when found
//!   ([`purge_stale`]), at the latest with the task.
//! - Every task with a thread has a map (`space_made` before its first thread).

use crate::arch::paging::KernelMem;
use crate::kernel::{Kernel, TaskId};
use crate::locked::Locked;
use crate::thread::ThreadId;
use alloc::vec::Vec;
use baton_abi::layout::{USER_END, USER_MIN};
use baton_abi::vm::{self as abi, VmRegion, VmStats};
use baton_abi::Error;
use kern::frame::{FrameAllocator, PhysAddr, PAGE_SIZE};
use kern::idslab::IdSlab;
use kern::pmap::{
    AddressSpace, MapFlags, PhysMem, ADDR_MASK, DIRTY, NO_CACHE, OWNED, WRITABLE, WRITE_THROUGH,
};
use kern::quota::Resource;
use kern::vm::copy::Carried;
use kern::vm::fault::{resolve, Decision, FaultClass, FaultStats};
use kern::vm::map::{Map, Placement, ENTRIES_MAX};
use kern::vm::object::{Kind, ObjectId, Objects, Page};
use kern::vm::rmap::{Known, Rmap};
use kern::vm::{Access, Inherit, Machine, Prot};

pub mod replace;

/// Most objects in the system (each charged to the task that made it).
const OBJECTS_MAX: u32 = 1 << 20;
/// Most entries in one task's map.
const TASK_ENTRIES_MAX: usize = ENTRIES_MAX;
/// Most wirings one task may hold (its own `vm_wire`s and the kernel's for it).
const WIRINGS_MAX: usize = 1024;
/// Heap charged for a wiring record.
const WIRING_BYTES: u64 = core::mem::size_of::<Wiring>() as u64;
/// Where `vm_allocate` anywhere starts looking: 16 TiB, clear of the program, of small
/// stray pointers, and below `baton-rt`'s heap (`docs/abi.md`).
pub const ANYWHERE_FLOOR: u64 = 0x1000_0000_0000;

/// Who a wired range is wired for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The task itself (`vm_wire`).
    User,
    /// The kernel, for thread `t`'s IPC buffer.
    Thread(ThreadId),
    /// The kernel, for activation `a`'s buffer.
    Act(kern::activation::ActId),
    /// The kernel, for an activation being made (renamed once it exists).
    NewAct,
    /// The kernel, for a virtual processor's upcall event and mailbox (`crate::vproc`,
    /// which unwires them when the processor ends).
    Vp,
}

/// A range wired once, for `owner`.
#[derive(Clone, Copy, Debug)]
struct Wiring {
    start: u64,
    len: u64,
    owner: Owner,
    /// Whether the range mapped a pager-backed object when it was wired (counted in
    /// [`Vm::pager_wirings`]; a wired range's entries keep their objects).
    pager: bool,
}

/// One task's memory: its map, counters and wirings.
struct TaskVm {
    map: Map,
    stats: FaultStats,
    wirings: Vec<Wiring>,
    /// Its pages paged out and in (`replace`).
    paging: baton_abi::paging::PagingStats,
}

/// The family's state.
pub struct Vm {
    objects: Objects<PhysAddr>,
    /// Wirings, of every task, whose range maps a pager-backed object ([`Wiring::pager`]):
    /// while there are none, a flush's [`harvest_dirty`] needs no look at any task's
    /// wirings, so its cost does not grow with the number of tasks.
    pager_wirings: usize,
    tasks: IdSlab<TaskVm>,
    stats: FaultStats,
    /// A kernel copy of this thread's call met a page being paged in (see
    /// [`take_page_wait`]).
    page_wait: Option<(ThreadId, PageWait)>,
    /// Which translations map each frame (`kern::vm::rmap`), so that taking a page away
    /// from everyone visits its translations only.
    rmap: Rmap,
}

static VM: Locked<Vm> = Locked::new();

/// The family's state (made on first use).
///
/// # Safety
/// The caller holds the big kernel lock and keeps no other reference from this function
/// alive while it uses this one (each entry point of the family takes it once and passes
/// it down).
unsafe fn state() -> &'static mut Vm {
    // SAFETY: the caller holds the lock and no other reference to the cell is live.
    unsafe {
        VM.get_or_make(|| Vm {
            objects: Objects::new(OBJECTS_MAX),
            pager_wirings: 0,
            tasks: IdSlab::new(),
            stats: FaultStats::default(),
            page_wait: None,
            rmap: Rmap::default(),
        })
    }
}

/// Makes the reverse map over the frame allocator's span (once, at boot). Without it
/// (no memory) every frame is unknown to it, and taking a page away sweeps every task.
pub fn init_rmap(frames: &FrameAllocator) {
    let (first, count) = frames.span();
    // SAFETY: the lock is held (boot); the family's entry.
    let vm = unsafe { state() };
    match Rmap::new(first, count) {
        Ok(r) => vm.rmap = r,
        Err(_) => crate::arch::serial::kprintln!("[kernel] no memory for the reverse map"),
    }
}

/// The machine as `kern::vm` needs it: frames from the frame allocator, the page tables of
/// the task whose map is operated on (`None` when that space is about to be destroyed:
/// nothing to unmap), the reverse map (told of every translation removed here), and a
/// note of what must be done afterwards ([`settle`]): shoot this task's changes down, and
/// take the pages taken from everyone out of every other space through the reverse map.
struct Mach<'a> {
    frames: &'a mut FrameAllocator,
    space: Option<&'a mut AddressSpace>,
    rmap: &'a mut Rmap,
    /// The task whose page tables `space` is (0: none).
    task: TaskId,
    /// Translations of this space removed or made read-only: shoot down before unlocking.
    changed: u64,
    /// Pages taken from every space, done once the operation is over.
    pending: Pending,
    /// More pages were taken from everyone than [`Pending`] holds: every space's
    /// translations are thrown away (they are only a cache) and refilled by faults.
    everywhere: bool,
}

/// The translations of this frame lose write permission everywhere.
const PROTECT: u8 = 1;
/// The translations of this frame go everywhere.
const UNMAP: u8 = 2;
/// The frame goes back to the allocator once its translations are gone.
const FREE: u8 = 4;
/// How many frames one operation may take from everyone before it flushes everything.
const PENDING_MAX: usize = 64;

/// The frames an operation took from everyone (see [`Mach`]); allocated only when an
/// operation takes one (an empty list costs nothing to make or move).
struct Pending {
    items: Vec<(PhysAddr, u8)>,
}

impl Pending {
    const fn new() -> Pending {
        Pending { items: Vec::new() }
    }

    fn slot(&mut self, frame: PhysAddr) -> Option<&mut u8> {
        self.items
            .iter_mut()
            .find(|(f, _)| *f == frame)
            .map(|(_, k)| k)
    }

    /// Notes `what` for `frame`; `false` when there is no room.
    fn add(&mut self, frame: PhysAddr, what: u8) -> bool {
        if let Some(k) = self.slot(frame) {
            *k |= what;
            return true;
        }
        if self.items.len() >= PENDING_MAX || self.items.try_reserve(1).is_err() {
            return false;
        }
        self.items.push((frame, what));
        true
    }
}

/// Tasks to shoot down (a few, then all).
#[derive(Clone, Copy, Default)]
pub(crate) struct Shoot {
    ids: [TaskId; 8],
    n: usize,
    all: bool,
}

impl Shoot {
    pub(crate) fn add(&mut self, id: TaskId) {
        if self.all || self.ids.get(..self.n).is_some_and(|s| s.contains(&id)) {
            return;
        }
        match self.ids.get_mut(self.n) {
            Some(slot) => {
                *slot = id;
                self.n += 1;
            }
            None => self.all = true,
        }
    }

    /// Shoots every noted task down.
    pub(crate) fn fire(&self, k: &mut Kernel) {
        if self.all {
            let mut next = k.tasks.next_id(None);
            while let Some(id) = next {
                next = k.tasks.next_id(Some(id));
                shootdown(k, id);
            }
            return;
        }
        for &id in self.ids.get(..self.n).unwrap_or(&[]) {
            shootdown(k, id);
        }
    }
}

impl<'a> Mach<'a> {
    /// A machine over `space`, task `task`'s page tables (or none, task 0).
    fn new(
        frames: &'a mut FrameAllocator,
        space: Option<&'a mut AddressSpace>,
        rmap: &'a mut Rmap,
        task: TaskId,
    ) -> Mach<'a> {
        Mach {
            frames,
            space,
            rmap,
            task,
            changed: 0,
            pending: Pending::new(),
            everywhere: false,
        }
    }

    /// What is left to do once the operation is over (see [`settle`]).
    fn finish(self) -> (u64, Pending, bool) {
        (self.changed, self.pending, self.everywhere)
    }

    fn take_everywhere(&mut self, frame: PhysAddr, what: u8) {
        if !self.everywhere && !self.pending.add(frame, what) {
            self.everywhere = true;
        }
    }

    /// Gives `frame` back to the allocator now.
    fn free_now(&mut self, frame: PhysAddr) {
        self.rmap.frame_freed(frame.0);
        // A frame the allocator does not manage is one of the boot image's, which an
        // image object holds (`make_image`): it is never handed out, so never given back.
        match self.frames.free(frame) {
            Ok(()) => replace::uncount(frame),
            Err(kern::frame::FrameError::OutOfRange) => {}
            Err(e) => crate::arch::serial::kprintln!(
                "[kernel] warning: bad frame free {:#x}: {e:?}",
                frame.0
            ),
        }
    }
}

/// Finishes an operation made with a [`Mach`] over task `task`'s page tables (or none):
/// the pages it took from everyone lose their translations in every space, found
/// through the reverse map (or every translation goes, where the map does not know them
/// all or there were too many), the frames it freed meanwhile go back to the allocator,
/// and what changed is shot down.
#[inline(always)]
fn settle(
    k: &mut Kernel,
    vm: &mut Vm,
    (changed, pending, everywhere): (u64, Pending, bool),
    task: Option<TaskId>,
) {
    if pending.items.is_empty() && !everywhere {
        // The common case: nothing was taken from other spaces.
        if let Some(task) = task.filter(|_| changed > 0) {
            shootdown(k, task);
        }
        return;
    }
    settle_others(k, vm, changed, pending, everywhere, task);
}

/// [`settle`] when pages were taken from everyone.
#[cold]
#[inline(never)]
fn settle_others(
    k: &mut Kernel,
    vm: &mut Vm,
    changed: u64,
    pending: Pending,
    mut everywhere: bool,
    task: Option<TaskId>,
) {
    let mut shoot = Shoot::default();
    if let Some(task) = task.filter(|_| changed > 0) {
        shoot.add(task);
    }
    let items = &pending.items[..];
    if !everywhere {
        for &(frame, what) in items {
            everywhere |= !rewrite_translations(k, &vm.rmap, frame, &mut shoot, |_, pte| {
                harvest(pte);
                if what & UNMAP != 0 {
                    0
                } else {
                    pte & !WRITABLE
                }
            });
        }
    }
    if everywhere {
        flush_everything(k, vm);
    } else {
        shoot.fire(k);
    }
    let freed = items.iter().filter(|(_, what)| what & FREE != 0);
    for &(frame, _) in freed {
        let mut m = Mach::new(&mut k.frames, None, &mut vm.rmap, 0);
        m.free_now(frame);
    }
}

impl Machine<PhysAddr> for Mach<'_> {
    fn free_frame(&mut self, frame: PhysAddr) {
        // A frame whose translations elsewhere are still to go waits for them.
        if !self.everywhere {
            if let Some(what) = self.pending.slot(frame) {
                *what |= FREE;
                return;
            }
        }
        self.free_now(frame);
    }

    fn unmap(&mut self, start: u64, end: u64) {
        let Some(space) = self.space.as_deref_mut() else {
            return;
        };
        let mut mem = KernelMem {
            frames: self.frames,
        };
        let (rmap, task) = (&mut *self.rmap, self.task);
        self.changed += space.update_leaves(&mut mem, start, end, |va, e| {
            if e & OWNED != 0 {
                e
            } else {
                harvest(e);
                // The reverse map is told, so the frame's record is free again.
                rmap.forget(e & ADDR_MASK, task, va);
                0
            }
        });
    }

    fn write_protect(&mut self, start: u64, end: u64) {
        let Some(space) = self.space.as_deref_mut() else {
            return;
        };
        let mut mem = KernelMem {
            frames: self.frames,
        };
        self.changed += space.update_leaves(&mut mem, start, end, |_, e| {
            harvest(e);
            e & !WRITABLE
        });
    }

    fn write_protect_everywhere(&mut self, frame: PhysAddr) {
        // Memory objects mapped by several tasks (`crate::memobj`) reach this (a
        // copy-on-write map of an object written in place, a push into its copy object),
        // as do copies of shared memory and forks: the reverse map finds the translations.
        self.take_everywhere(frame, PROTECT);
    }

    fn unmap_everywhere(&mut self, frame: PhysAddr) {
        self.take_everywhere(frame, UNMAP);
    }

    fn free_slot(&mut self, slot: u32) {
        replace::free_slot(slot);
    }
}

/// For page replacement: rewrites each translation of `frame` with `f(task, pte)` where
/// the reverse map records one (a stale record is skipped), noting in `shoot` the tasks
/// whose translations changed; whether the map knew every translation of the frame.
/// Dirty bits are `f`'s to keep (this does not [`harvest`]).
pub(crate) fn rewrite_translations(
    k: &mut Kernel,
    rmap: &Rmap,
    frame: PhysAddr,
    shoot: &mut Shoot,
    mut f: impl FnMut(TaskId, u64) -> u64,
) -> bool {
    let Kernel { tasks, frames, .. } = k;
    let known = rmap.each(frame.0, |id, va| {
        let Some(t) = tasks.get_mut(&id) else {
            return;
        };
        let mut mem = KernelMem { frames };
        let n = t
            .space
            .update_leaves(&mut mem, va, va + PAGE_SIZE, |_, pte| {
                if pte & OWNED == 0 && pte & ADDR_MASK == frame.0 {
                    f(id, pte)
                } else {
                    pte
                }
            });
        if n > 0 {
            shoot.add(id);
        }
    });
    known == Known::All
}

/// The end of a copy-on-write copy whose source `from` other mappings must stop seeing:
/// its translations go everywhere (every translation, with `all`), and what changed is
/// shot down (this task's too, if `changed`).
#[cold]
#[inline(never)]
fn unmap_source(
    k: &mut Kernel,
    vm: &mut Vm,
    task: TaskId,
    from: PhysAddr,
    all: bool,
    changed: bool,
) {
    let mut m = Mach::new(&mut k.frames, None, &mut vm.rmap, 0);
    m.everywhere = all;
    m.unmap_everywhere(from);
    let (more, others, everywhere) = m.finish();
    settle(
        k,
        vm,
        (more + u64::from(changed), others, everywhere),
        Some(task),
    );
}

/// Records that task `task` now translates `va` to `frame` (`kern::vm::rmap`), charged
/// to the task; a stale record it finds is checked against the page tables.
#[cold]
#[inline(never)]
fn note_translation(k: &mut Kernel, vm: &mut Vm, task: TaskId, va: u64, frame: PhysAddr) {
    let Kernel { tasks, frames, .. } = k;
    let Some(t) = tasks.get(&task) else {
        return;
    };
    let mem = KernelMem { frames };
    vm.rmap.record(frame.0, task, va, &t.account, |id, v| {
        tasks
            .get(&id)
            .and_then(|x| x.space.translate(&mem, v))
            .is_some_and(|(pa, _)| pa.0 == frame.0)
    });
}

/// A translation `pte` is removed or write-protected: if the processor wrote through it,
/// its page's sticky dirty bit is set (`replace`), so that page replacement and a pager's
/// flush return the page to its pager, and only such pages.
#[inline(always)]
fn harvest(pte: u64) {
    if pte & DIRTY != 0 && pte & OWNED == 0 {
        replace::mark_dirty(PhysAddr(pte & ADDR_MASK));
    }
}

/// The kernel stores into the buffers it wires for (a thread's IPC buffer, an
/// activation's) through the direct map, where no translation's dirty bit sees the store
/// (the RPC and exception fast paths, a migrating call's copies): such a page counts as
/// written for as long as it is a buffer. So its sticky dirty bit is set when its wiring
/// ends ([`unwire_in`], [`purge_stale`], the task's end) and at every pager flush that
/// looks at it ([`harvest_dirty`]); while it is wired, replacement never takes it. The
/// fast paths pay nothing for this.
fn kernel_stores(w: &Wiring) -> bool {
    w.owner != Owner::User
}

/// Sets the sticky dirty bit of each resident page that `[start, end)` of `map` maps (a
/// buffer the kernel wrote, [`kernel_stores`]).
fn mark_written(map: &Map, objects: &Objects<PhysAddr>, start: u64, end: u64) {
    let mut va = start & !(PAGE_SIZE - 1);
    while va < end {
        if let Some((s, e)) = map.entry(va) {
            if let Ok(kern::vm::object::Found::Resident { frame, .. }) =
                objects.find(e.object, e.offset + (va - s))
            {
                replace::mark_dirty(frame);
            }
        }
        va += PAGE_SIZE;
    }
}

/// The kernel stored `len` bytes at `ptr` of the space `space` through the direct map (a
/// copy to user memory): each page's sticky dirty bit is set, as the processor's store
/// would set its translation's (the translations are left as they are).
pub fn mark_stored(space: &AddressSpace, mem: &KernelMem, ptr: u64, len: usize) {
    let end = ptr.saturating_add(len as u64);
    let mut page = ptr & !(PAGE_SIZE - 1);
    while page < end {
        if let Some((pa, _)) = space.translate(mem, page) {
            replace::mark_dirty(pa);
        }
        page += PAGE_SIZE;
    }
}

/// Why a fault could not be satisfied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No range maps the address.
    Address,
    /// The range's protection forbids the access.
    Protection,
    /// The page's pager is gone, or failed the page.
    Pager,
    /// No frame, page table or bookkeeping could be had.
    NoMemory,
    /// The page must come from a pager (`crate::pager`), asked now: the access waits for
    /// it (a user fault blocks; a kernel copy restarts its call once the page is there).
    PageIn(PageWait),
    /// The page is paged out: it must come from the default pager (`crate::pageout`),
    /// which is to be asked ([`PageWait::ask`] is the slot) or was asked already.
    SwapIn(PageWait),
}

/// A page being paged in that an access must wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageWait {
    /// The pager-backed object.
    pub object: ObjectId,
    /// The page's offset in it.
    pub offset: u64,
    /// The pager to ask (`Kind::Pager::pager`), when the page is not asked for yet.
    pub ask: Option<u64>,
    /// The access that faulted.
    pub access: Access,
    /// The page is resident and its pager's lock forbids the access: the pager is asked
    /// to unlock it (`DATA_UNLOCK`) rather than for its data.
    pub unlock: bool,
}

impl Failure {
    /// The fault class code of the exception message (`baton_abi::vm`).
    pub fn code(self) -> u64 {
        match self {
            Failure::Address => abi::FAULT_ADDRESS_ERROR,
            Failure::Protection => abi::FAULT_WRITE_ERROR,
            Failure::Pager => abi::FAULT_PAGER_ERROR,
            Failure::NoMemory => abi::FAULT_NO_MEMORY,
            Failure::PageIn(_) | Failure::SwapIn(_) => abi::FAULT_PAGER_ERROR,
        }
    }
}

/// Shoots down task `task`'s translations: flushes this CPU, makes every CPU running a
/// thread of it (or a floor call into it) flush and waits for them, and makes every CPU
/// flush its PCID on its next load (`mem_unmap`'s shootdown).
pub fn shootdown(k: &mut Kernel, task: TaskId) {
    let Some(pcid) = k.tasks.get(&task).map(|t| usize::from(t.pcid)) else {
        return;
    };
    crate::arch::tlb::flush_local();
    // The CPUs to shoot down, as a bit mask (no allocation: at most 64 CPUs).
    let targets: u64 = (0..k.cpus.len().min(64))
        .filter(|&c| {
            k.threads
                .get(k.cpu(c).current)
                .is_some_and(|th| th.ctx.task == Some(task))
                || k.floor.in_call_to(c, task)
        })
        .fold(0, |mask, c| mask | 1 << c);
    for c in k.cpus.iter_mut() {
        if let Some(owner) = c.pcid_owner.get_mut(pcid) {
            *owner = 0;
        }
    }
    k.stats.tlb_shootdowns += u64::from(targets.count_ones());
    // The set bits only (a walk of all 64 cost some 400 instructions on every
    // protection change).
    let mut left = targets;
    crate::arch::tlb::shootdown(core::iter::from_fn(move || {
        (left != 0).then(|| {
            let c = left.trailing_zeros() as usize;
            left &= left - 1;
            c
        })
    }));
}

/// Throws every task's cached translations away (see [`Mach::unmap_everywhere`]).
#[cold]
fn flush_everything(k: &mut Kernel, vm: &mut Vm) {
    // A walk by id, allocating nothing: this runs where memory may be short.
    let mut next = k.tasks.next_id(None);
    while let Some(id) = next {
        next = k.tasks.next_id(Some(id));
        let Some(tv) = vm.tasks.get(&id) else {
            continue;
        };
        let Some(t) = k.tasks.get_mut(&id) else {
            continue;
        };
        let mut mem = KernelMem {
            frames: &mut k.frames,
        };
        for (s, e) in tv.map.entries() {
            t.space.update_leaves(&mut mem, s, e.end, |_, e| {
                if e & OWNED != 0 {
                    e
                } else {
                    harvest(e);
                    0
                }
            });
        }
        shootdown(k, id);
    }
}

/// Runs `op` on task `task`'s map with a [`Mach`] over its page tables, then shoots
/// down what it took away.
fn with_map<T>(
    k: &mut Kernel,
    vm: &mut Vm,
    task: TaskId,
    op: impl FnOnce(&mut TaskVm, &mut Objects<PhysAddr>, &mut Mach<'_>) -> T,
) -> Result<T, Error> {
    let tv = vm.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
    let t = k.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
    let mut m = Mach::new(&mut k.frames, Some(&mut t.space), &mut vm.rmap, task);
    let out = op(tv, &mut vm.objects, &mut m);
    let fin = m.finish();
    settle(k, vm, fin, Some(task));
    Ok(out)
}

// ---- the core's hooks ------------------------------------------------------------------

/// Hook `space_made`: task `id` (just made, no thread yet, nothing in its space) gets
/// its map, empty. Its program and stack come with `crate::taskmake`.
pub fn space_made(k: &mut Kernel, id: TaskId) -> Result<(), Error> {
    // SAFETY: the lock is held (every hook runs under it); this is the family's entry.
    let vm = unsafe { state() };
    let account = k
        .tasks
        .get(&id)
        .ok_or(Error::InvalidArgument)?
        .account
        .clone();
    let mut map = Map::new(account, USER_MIN, USER_END, TASK_ENTRIES_MAX)?;
    map.set_anywhere_floor(ANYWHERE_FLOOR);
    let tv = TaskVm {
        map,
        stats: FaultStats::default(),
        wirings: Vec::new(),
        paging: Default::default(),
    };
    vm.tasks.insert(id, tv).map_err(|_| Error::NoMemory)?;
    Ok(())
}

// ---- task creation (`crate::taskmake`) -------------------------------------------------

/// An *image object* of the whole pages of `data`, the bytes of a program the kernel
/// never writes (a boot module), charged to `account`, with one reference that the caller
/// keeps for the kernel's life (`kern::vm::object::Objects::image`). Its pages are the
/// frames `data` lies in when it starts on a page (the boot image is padded so that every
/// program does), otherwise frames filled with copies now. `None` when `data` holds no
/// whole page.
pub fn make_image(
    k: &mut Kernel,
    data: &'static [u8],
    account: &kern::quota::AccountRef,
) -> Result<Option<kern::vm::object::ObjectId>, Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let pages = data.len() as u64 / PAGE_SIZE;
    if pages == 0 {
        return Ok(None);
    }
    let object = vm.objects.image(pages * PAGE_SIZE, account)?;
    // The boot image lies in the direct map: its physical address.
    let phys = (data.as_ptr() as u64).wrapping_sub(crate::arch::paging::phys_to_virt(0));
    let direct = phys.is_multiple_of(PAGE_SIZE);
    let mut m = Mach::new(&mut k.frames, None, &mut vm.rmap, 0);
    for i in 0..pages {
        let at = i * PAGE_SIZE;
        let frame = if direct {
            PhysAddr(phys + at)
        } else {
            let mut mem = KernelMem {
                frames: &mut *m.frames,
            };
            let Some(f) = mem.alloc_frame() else {
                vm.objects.release(object, &mut m);
                return Err(Error::NoMemory);
            };
            let src = data
                .get(at as usize..(at + PAGE_SIZE) as usize)
                .unwrap_or(&[]);
            mem.write_bytes(f, src);
            f
        };
        if let Err((e, f)) = vm.objects.insert_page(object, at, frame) {
            // A frame of the boot image is never given to the allocator (`free_frame`).
            m.free_frame(f);
            vm.objects.release(object, &mut m);
            return Err(e);
        }
    }
    Ok(Some(object))
}

/// Maps `[start, start + len)` of task `task` to the window from `offset` of the image
/// object `image`, copy-on-write, with protection `prot` (maximum: everything).
pub fn map_image(
    k: &mut Kernel,
    task: TaskId,
    start: u64,
    len: u64,
    image: kern::vm::object::ObjectId,
    offset: u64,
    prot: Prot,
) -> Result<(), Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    with_map(k, vm, task, |tv, objs, m| {
        tv.map.map_frozen(
            objs,
            Placement::Fixed(start),
            len,
            image,
            offset,
            prot,
            Prot::ALL,
            m,
        )
    })?
    .map(|_| ())
}

/// What [`allocate_filled`] puts in a page.
pub enum Fill<'a> {
    /// These bytes at this offset in the page (the rest zero).
    Bytes(usize, &'a [u8]),
    /// A copy of this frame.
    Frame(PhysAddr),
}

/// Allocates `[start, start + len)` of task `task` with protection `prot` (committed, as
/// `mem_map`: its frames charged now), and puts in now the pages `fill` gives contents
/// for (by address; the others come zero-filled at first touch).
pub fn allocate_filled<'a>(
    k: &mut Kernel,
    task: TaskId,
    start: u64,
    len: u64,
    prot: Prot,
    fill: &mut dyn FnMut(u64) -> Option<Fill<'a>>,
) -> Result<(), Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let (_, object) = with_map(k, vm, task, |tv, objs, m| {
        tv.map
            .allocate_with(objs, Placement::Fixed(start), len, prot, true, m)
    })??;
    let mut page = start;
    while page < start + len {
        if let Some(what) = fill(page) {
            let mut mem = KernelMem {
                frames: &mut k.frames,
            };
            if !replace::room_for(mem.frames.free_frames() as u64, task) {
                return Err(Error::NoMemory);
            }
            // `alloc_frame` hands the frame out zeroed.
            let f = mem.alloc_frame().ok_or(Error::NoMemory)?;
            match what {
                Fill::Bytes(at, bytes) => mem.write_bytes(f.add(at as u64), bytes),
                Fill::Frame(src) => mem.copy_bytes(f, src, PAGE_SIZE as usize),
            }
            if let Err((e, f)) = vm.objects.insert_page(object, page - start, f) {
                mem.free_frame(f);
                return Err(e);
            }
            replace::count(f);
        }
        page += PAGE_SIZE;
    }
    Ok(())
}

/// Gives the new task `child` (an empty map) a copy of task `parent`'s map by
/// inheritance (`kern::vm::copy::fork`: copy-on-write, nothing copied now; wired ranges
/// are not inherited). The parent's translations of what became copy-on-write are
/// write-protected and shot down before this returns.
pub fn fork_map(k: &mut Kernel, parent: TaskId, child: TaskId) -> Result<(), Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let account = vm
        .tasks
        .get(&child)
        .ok_or(Error::InvalidArgument)?
        .map
        .account()
        .clone();
    let mut map = with_map(k, vm, parent, |tv, objs, m| {
        kern::vm::copy::fork(&mut tv.map, objs, account, TASK_ENTRIES_MAX, m)
    })??;
    map.set_anywhere_floor(ANYWHERE_FLOOR);
    match vm.tasks.get_mut(&child) {
        Some(tv) => {
            // The child's map was empty: nothing to release.
            tv.map = map;
            Ok(())
        }
        None => {
            let mut m = Mach::new(&mut k.frames, None, &mut vm.rmap, 0);
            map.clear(&mut vm.objects, &mut m);
            let fin = m.finish();
            settle(k, vm, fin, None);
            Err(Error::InvalidArgument)
        }
    }
}

/// Removes everything task `task`'s map maps (a program mapped in part, in a task that
/// has not run).
pub fn clear_map(k: &mut Kernel, task: TaskId) {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let _ = with_map(k, vm, task, |tv, objs, m| tv.map.clear(objs, m));
}

/// Hook `space_freed`: task `id`'s space is about to be destroyed (no CPU has it
/// loaded): its map goes, and with it every page only it held.
pub fn space_freed(k: &mut Kernel, id: TaskId) {
    // SAFETY: the lock is held (every hook runs under it); this is the family's entry.
    let vm = unsafe { state() };
    free_map(k, vm, id);
}

fn free_map(k: &mut Kernel, vm: &mut Vm, id: TaskId) {
    // Emptied where it lies and dropped there: taking the task's record out by value
    // would copy it whole (a `memcpy` on every task's end).
    let Some(tv) = vm.tasks.get_mut(&id) else {
        return;
    };
    // The space goes without its translations being removed one by one: the pages of
    // pager-backed objects this task could write in place keep what its translations say
    // they were written (the task's end must not lose a write to a file).
    if let Some(t) = k.tasks.get_mut(&id) {
        let mut mem = KernelMem {
            frames: &mut k.frames,
        };
        for (s, e) in tv.map.entries() {
            let pager = vm
                .objects
                .get(e.object)
                .is_some_and(|o| matches!(o.kind(), Kind::Pager { .. }));
            if pager && !e.cow && e.max_prot.contains(Prot::WRITE) {
                t.space.update_leaves(&mut mem, s, e.end, |_, pte| {
                    harvest(pte);
                    pte
                });
            }
        }
    }
    // The buffers the kernel wrote, as their wirings go with the map.
    for w in tv.wirings.iter().filter(|w| kernel_stores(w)) {
        mark_written(&tv.map, &vm.objects, w.start, w.start + w.len);
    }
    let mut m = Mach::new(&mut k.frames, None, &mut vm.rmap, 0);
    tv.map.clear(&mut vm.objects, &mut m);
    let fin = m.finish();
    vm.rmap.task_gone(id);
    let heap = tv.wirings.len() as u64 * WIRING_BYTES;
    let pagers = tv.wirings.iter().filter(|w| w.pager).count();
    vm.pager_wirings = vm.pager_wirings.saturating_sub(pagers);
    tv.map.account().give(Resource::Heap, heap);
    vm.tasks.discard(&id);
    settle(k, vm, fin, None);
}

/// Hook `page_fault`: a user-mode page fault of thread `t` at `addr` with the CPU's
/// error code `error`. `Ok` when the page is now mapped (the thread resumes); otherwise
/// the class code for the exception (`baton_abi::vm::FAULT_*`).
pub fn page_fault(k: &mut Kernel, t: ThreadId, addr: u64, error: u64) -> Result<(), Failure> {
    // SAFETY: the lock is held (every hook runs under it); this is the family's entry.
    let vm = unsafe { state() };
    let task = k
        .threads
        .get(t)
        .and_then(|th| th.ctx.task)
        .ok_or(Failure::Address)?;
    let access = if error & (1 << 4) != 0 {
        Access::Execute
    } else if error & (1 << 1) != 0 {
        Access::Write
    } else {
        Access::Read
    };
    if !(USER_MIN..USER_END).contains(&addr) {
        count_failure(vm, task, access);
        return Err(Failure::Address);
    }
    fault_in(k, vm, task, addr, access).map(|_| ())
}

/// Counts a fault outside the map's range as an address error.
fn count_failure(vm: &mut Vm, task: TaskId, access: Access) {
    let f: kern::vm::fault::Fault<PhysAddr> = kern::vm::fault::Fault {
        decision: Decision::AddressError,
        class: Some(FaultClass::AddressError),
        reclaimed: None,
        executable: false,
    };
    vm.stats.record(access, &f);
    if let Some(tv) = vm.tasks.get_mut(&task) {
        tv.stats.record(access, &f);
    }
}

/// Resolves an `access` at `addr` in task `task`'s map and enters the translation, as a
/// user access would (the rounds of `kern::vm::fault::resolve`). Returns the frame.
fn fault_in(
    k: &mut Kernel,
    vm: &mut Vm,
    task: TaskId,
    addr: u64,
    access: Access,
) -> Result<PhysAddr, Failure> {
    let page = addr & !(PAGE_SIZE - 1);
    // A frame every other translation of which must go (a copy-on-write copy's source
    // that other mappings must stop seeing); a second such frame in one fault (not seen in
    // practice) makes every translation go instead.
    let mut unmap_from: Option<PhysAddr> = None;
    let mut unmap_more = false;
    let mut changed = false;
    // Whether the first round reclaimed the entry (its translations follow: `write_ahead`).
    let mut reclaimed = false;
    let result = (|| {
        let tv = vm.tasks.get_mut(&task).ok_or(Failure::Address)?;
        let t = k.tasks.get_mut(&task).ok_or(Failure::Address)?;
        let mut mem = KernelMem {
            frames: &mut k.frames,
        };
        for round in 0..6 {
            let fault = match resolve(&mut tv.map, &mut vm.objects, page, access) {
                Ok(f) => f,
                Err(Error::NoMemory) => return Err(Failure::NoMemory),
                Err(_) => return Err(Failure::Address),
            };
            if round == 0 {
                tv.stats.record(access, &fault);
                vm.stats.record(access, &fault);
                reclaimed = fault.reclaimed.is_some();
            }
            match fault.decision {
                Decision::Map { frame, writable } => {
                    let flags = MapFlags::user_shared(writable, fault.executable);
                    changed |= enter(t, &mut mem, page, frame, flags)?;
                    if reclaimed {
                        let raised = write_ahead(&tv.map, &mut vm.objects, t, &mut mem, page);
                        tv.stats.reclaimed_ahead(raised);
                        vm.stats.reclaimed_ahead(raised);
                    }
                    return Ok(frame);
                }
                Decision::ZeroFill {
                    object,
                    offset,
                    then_map,
                } => {
                    if !replace::room_for(mem.frames.free_frames() as u64, task) {
                        return Err(Failure::NoMemory);
                    }
                    // `alloc_frame` hands the frame out zeroed.
                    let f = mem.alloc_frame().ok_or(Failure::NoMemory)?;
                    if let Err((_, f)) = vm.objects.insert_page(object, offset, f) {
                        mem.free_frame(f);
                        return Err(Failure::NoMemory);
                    }
                    replace::count(f);
                    // The next round would only decide this translation (host-tested
                    // against it): enter it now.
                    if let Some(writable) = then_map {
                        let flags = MapFlags::user_shared(writable, fault.executable);
                        changed |= enter(t, &mut mem, page, f, flags)?;
                        if reclaimed {
                            let raised = write_ahead(&tv.map, &mut vm.objects, t, &mut mem, page);
                            tv.stats.reclaimed_ahead(raised);
                            vm.stats.reclaimed_ahead(raised);
                        }
                        return Ok(f);
                    }
                }
                Decision::CopyOnWrite {
                    from,
                    to,
                    offset,
                    unmap_from: unmap_from_this,
                } => {
                    if !replace::room_for(mem.frames.free_frames() as u64, task) {
                        return Err(Failure::NoMemory);
                    }
                    // Every byte is copied over: the frame is not zeroed first.
                    let f = mem.frames.alloc().ok_or(Failure::NoMemory)?;
                    mem.copy_bytes(f, from, PAGE_SIZE as usize);
                    if let Err((_, f)) = vm.objects.insert_page(to, offset, f) {
                        mem.free_frame(f);
                        return Err(Failure::NoMemory);
                    }
                    replace::count(f);
                    if unmap_from_this {
                        unmap_more |= unmap_from.is_some();
                        unmap_from = Some(from);
                    }
                }
                Decision::AddressError => return Err(Failure::Address),
                Decision::ProtectionError => return Err(Failure::Protection),
                Decision::MapPhysical {
                    addr,
                    writable,
                    uncached,
                } => {
                    // A physical object's frame (device registers: `crate::memobj`). Never
                    // `OWNED`, so no unmap frees it; uncached as the object says.
                    let frame = PhysAddr(addr);
                    let flags = MapFlags::user_shared(writable, false);
                    changed |= enter(t, &mut mem, page, frame, flags)?;
                    if uncached {
                        t.space
                            .update_leaves(&mut mem, page, page + PAGE_SIZE, |_, e| {
                                e | NO_CACHE | WRITE_THROUGH
                            });
                        changed = true;
                    }
                    return Ok(frame);
                }
                Decision::PageIn {
                    pager,
                    object,
                    offset,
                } => {
                    return Err(Failure::PageIn(PageWait {
                        object,
                        offset,
                        ask: Some(pager),
                        access,
                        unlock: false,
                    }))
                }
                Decision::Wait { object, offset } => {
                    let w = PageWait {
                        object,
                        offset,
                        ask: None,
                        access,
                        unlock: false,
                    };
                    // A paged-out page waits for the default pager, a pager-backed one
                    // for its pager.
                    let anonymous = vm
                        .objects
                        .get(object)
                        .is_some_and(|o| o.kind() == Kind::Anonymous);
                    return Err(if anonymous {
                        Failure::SwapIn(w)
                    } else {
                        Failure::PageIn(w)
                    });
                }
                Decision::SwapIn {
                    object,
                    offset,
                    slot,
                } => {
                    if replace::slot_lost(slot) {
                        // Its contents died with a default pager: an error, for good.
                        vm.objects.swap_in_failed(object, offset);
                        replace::count_lost();
                        return Err(Failure::Pager);
                    }
                    return Err(Failure::SwapIn(PageWait {
                        object,
                        offset,
                        ask: Some(u64::from(slot)),
                        access,
                        unlock: false,
                    }));
                }
                Decision::Unlock {
                    pager,
                    object,
                    offset,
                } => {
                    return Err(Failure::PageIn(PageWait {
                        object,
                        offset,
                        ask: Some(pager),
                        access,
                        unlock: true,
                    }))
                }
                Decision::PagerError { .. } => return Err(Failure::Pager),
            }
        }
        Err(Failure::NoMemory)
    })();
    if let Ok(frame) = result {
        // Most often one store (`Rmap::record_fast`); otherwise the page tables are asked
        // which recorded translations are stale.
        if !vm.rmap.record_fast(frame.0, task, page) {
            note_translation(k, vm, task, page, frame);
        }
    }
    if let Some(from) = unmap_from {
        unmap_source(k, vm, task, from, unmap_more, changed);
    } else if changed {
        shootdown(k, task);
    }
    result
}

/// Accent's reclaim-ahead (section 2.2.5) carried to the translations: after a fault at
/// `page` reclaimed its entry, this task's translations of the resident pages that follow
/// it in the entry (`kern::vm::fault::reclaim_ahead`) are made writable where they still
/// map the frame it names, so that the stores that follow take no fault (without it each
/// took one, which found the entry writable and only upgraded the translation: the
/// `vm.reclaim.<n>` rows, `docs/vm.md`). Only permissions are raised: no shootdown is due
/// (a stale read-only entry in a TLB costs at most a spurious fault). How many
/// translations it made writable (Table 3-10's pages reclaimed, with the faulting one).
fn write_ahead(
    map: &Map,
    objects: &mut Objects<PhysAddr>,
    t: &mut crate::kernel::Task,
    mem: &mut KernelMem<'_>,
    page: u64,
) -> u64 {
    let mut raised = 0;
    kern::vm::fault::reclaim_ahead(map, objects, page, |va, frame| {
        raised += t.space.update_leaves(mem, va, va + PAGE_SIZE, |_, pte| {
            if pte & ADDR_MASK == frame.0 && pte & OWNED == 0 {
                pte | WRITABLE
            } else {
                pte
            }
        });
    });
    raised
}

/// Enters the translation of `page` to `frame` in task `t`'s page tables, each page-table
/// frame it needs charged to the task as it is made ([`Charged`]); whether it
/// replaced a translation to another frame (a shootdown is then due).
fn enter(
    t: &mut crate::kernel::Task,
    mem: &mut KernelMem<'_>,
    page: u64,
    frame: PhysAddr,
    flags: MapFlags,
) -> Result<bool, Failure> {
    // Each table frame is charged as it is made (most translations need none).
    let mut charged = Charged {
        mem,
        account: &t.account,
        took: 0,
    };
    let set = t.space.set(&mut charged, page, frame, flags);
    t.frames += charged.took;
    match set {
        Ok(Some(old)) => Ok(old != frame),
        Ok(None) => Ok(false),
        Err(_) => Err(Failure::NoMemory),
    }
}

/// The kernel's physical memory for one task's page tables: every frame a table takes is
/// charged to the task's account first (a frame the account cannot take is no memory),
/// and counted in `took`.
struct Charged<'m, 'a> {
    mem: &'m mut KernelMem<'a>,
    account: &'m kern::quota::AccountRef,
    took: u64,
}

impl PhysMem for Charged<'_, '_> {
    fn read_u64(&self, pa: PhysAddr) -> u64 {
        self.mem.read_u64(pa)
    }

    fn write_u64(&mut self, pa: PhysAddr, v: u64) {
        self.mem.write_u64(pa, v)
    }

    fn zero_frame(&mut self, frame: PhysAddr) {
        self.mem.zero_frame(frame)
    }

    fn write_bytes(&mut self, pa: PhysAddr, bytes: &[u8]) {
        self.mem.write_bytes(pa, bytes)
    }

    fn read_bytes(&self, pa: PhysAddr, out: &mut [u8]) {
        self.mem.read_bytes(pa, out)
    }

    fn alloc_frame(&mut self) -> Option<PhysAddr> {
        self.account.take(Resource::Frames, 1).ok()?;
        match self.mem.alloc_frame() {
            Some(f) => {
                self.took += 1;
                Some(f)
            }
            None => {
                self.account.give(Resource::Frames, 1);
                None
            }
        }
    }

    fn alloc_zeroed(&mut self) -> Option<PhysAddr> {
        // `KernelMem` hands its frames out zeroed.
        self.alloc_frame()
    }

    fn free_frame(&mut self, frame: PhysAddr) {
        self.mem.free_frame(frame);
        self.account.give(Resource::Frames, 1);
        self.took = self.took.saturating_sub(1);
    }
}

/// Makes `[va, va + len)` of task `task` resident and translated for the kernel's copy
/// (writable if `write`), resolving each missing page as a user access would.
/// [`Error::BadAddress`] when a page cannot be (no range, the protection, no memory).
pub fn make_resident(
    k: &mut Kernel,
    task: TaskId,
    va: u64,
    len: usize,
    write: bool,
) -> Result<(), Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    match resident_in(k, vm, task, va, len as u64, write) {
        Ok(()) => Ok(()),
        Err(Failure::PageIn(w)) => Err(page_wanted(k, w)),
        Err(Failure::SwapIn(w)) => Err(swap_wanted(k, task, w)),
        Err(_) => Err(Error::BadAddress),
    }
}

/// What the pager family registered: ask a pager for a page ([`PageWait::ask`]); on an
/// error the family has put the page back as it was (or marked the pager dead).
static ASK: spin::Once<AskPager> = spin::Once::new();

/// The pager family's way to ask a pager for a page ([`set_pager`]).
pub type AskPager = fn(&mut Kernel, PageWait) -> Result<(), Failure>;

/// Registers the pager family's way to ask a pager for a page (once, at boot).
pub fn set_pager(ask: AskPager) {
    ASK.call_once(|| ask);
}

/// Asks the pager for the page `w` (when it is not asked for yet), for an access that
/// must wait for it. Returns [`Error::BadAddress`] for the caller's copy, having noted
/// the wait for the current thread ([`take_page_wait`]: its call restarts once the page is
/// there) if the pager was asked.
fn page_wanted(k: &mut Kernel, w: PageWait) -> Error {
    let asked = match (w.ask, ASK.get()) {
        (None, _) => Ok(()),
        (Some(_), Some(ask)) => ask(k, w),
        (Some(_), None) => Err(Failure::Pager),
    };
    if asked.is_ok() {
        let t = k.current_thread();
        // SAFETY: the lock is held; the reference ends in this statement.
        unsafe { state() }.page_wait = Some((t, w));
    }
    Error::BadAddress
}

/// The paging family's way to ask the default pager for a paged-out page
/// ([`set_swapper`]): the task whose access wants it, the page.
pub type AskSwap = fn(&mut Kernel, TaskId, PageWait) -> Result<(), Failure>;

static ASK_SWAP: spin::Once<AskSwap> = spin::Once::new();

/// Registers the paging family's way to ask the default pager (once, at boot).
pub fn set_swapper(ask: AskSwap) {
    ASK_SWAP.call_once(|| ask);
}

/// [`page_wanted`] for a paged-out page: the default pager is asked (when the page is not
/// asked for yet) and the wait noted for the current thread.
fn swap_wanted(k: &mut Kernel, task: TaskId, w: PageWait) -> Error {
    let asked = match (w.ask, ASK_SWAP.get()) {
        (None, _) => Ok(()),
        (Some(_), Some(ask)) => ask(k, task, w),
        (Some(_), None) => Err(Failure::Pager),
    };
    let t = k.current_thread();
    let note = match asked {
        Ok(()) => Some(PageWait { ask: None, ..w }),
        // The pager's queue is full of page-outs: still to be asked (`ask` kept), after a
        // moment (`crate::pager`).
        Err(Failure::NoMemory) => Some(w),
        Err(_) => None,
    };
    if let Some(n) = note {
        // SAFETY: the lock is held; the reference ends in this statement.
        unsafe { state() }.page_wait = Some((t, n));
    }
    Error::BadAddress
}

/// The page thread `t`'s last kernel copy must wait for, if it met one since
/// [`clear_page_wait`] (taken: asked once).
pub fn take_page_wait(t: ThreadId) -> Option<PageWait> {
    // SAFETY: the lock is held (the caller is in a system call); the reference ends here.
    let vm = unsafe { state() };
    match vm.page_wait {
        Some((th, w)) if th == t => {
            vm.page_wait = None;
            Some(w)
        }
        _ => None,
    }
}

/// Whether thread `t`'s kernel copy noted a page to wait for (its `BadAddress` is then no
/// error: the call, or its step, goes on once the page is there).
pub fn page_wait_noted(t: ThreadId) -> bool {
    // SAFETY: the lock is held (the caller is in a system call); the reference ends here.
    unsafe { state() }.page_wait.is_some_and(|(th, _)| th == t)
}

/// Forgets a page wait a copy noted (at the start of a call: only that call's copies
/// count).
#[inline(always)]
pub fn clear_page_wait() {
    // SAFETY: the lock is held (the caller is in a system call); the reference ends here.
    unsafe { state() }.page_wait = None;
}

fn resident_in(
    k: &mut Kernel,
    vm: &mut Vm,
    task: TaskId,
    va: u64,
    len: u64,
    write: bool,
) -> Result<(), Failure> {
    if len == 0 {
        return Ok(());
    }
    let end = va.checked_add(len).ok_or(Failure::Address)?;
    if va < USER_MIN || end > USER_END {
        return Err(Failure::Address);
    }
    let access = if write { Access::Write } else { Access::Read };
    let mut page = va & !(PAGE_SIZE - 1);
    while page < end {
        let t = k.tasks.get(&task).ok_or(Failure::Address)?;
        let mem = KernelMem {
            frames: &mut k.frames,
        };
        let ok = matches!(t.space.translate(&mem, page),
            Some((_, f)) if f.user && (f.writable || !write));
        if !ok {
            fault_in(k, vm, task, page, access)?;
        }
        page += PAGE_SIZE;
    }
    Ok(())
}

/// The task whose slab key is `key` (a cold search: for the retry of a failed copy).
#[cold]
pub fn task_of_key(k: &Kernel, key: kern::slab::Key) -> Option<TaskId> {
    k.tasks
        .iter()
        .map(|(id, _)| id)
        .find(|&id| k.tasks.key_of(id) == Some(key))
}

/// [`make_resident`] for the task of slab key `key`.
#[cold]
pub fn make_resident_key(
    k: &mut Kernel,
    key: kern::slab::Key,
    va: u64,
    len: usize,
    write: bool,
) -> Result<(), Error> {
    let task = task_of_key(k, key).ok_or(Error::BadAddress)?;
    make_resident(k, task, va, len, write)
}

// ---- pager-backed objects (for `crate::pager`) ------------------------------------------

/// A new pager-backed object of `size` bytes whose pages pager `pager` supplies, charged
/// to task `task`, with one reference for the caller.
pub fn pager_object(
    k: &mut Kernel,
    task: TaskId,
    pager: u64,
    size: u64,
) -> Result<ObjectId, Error> {
    let _ = k;
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let account = vm
        .tasks
        .get(&task)
        .ok_or(Error::InvalidArgument)?
        .map
        .account()
        .clone();
    vm.objects.pager(pager, size, &account)
}

/// The pager of `object` and whether it is gone; `None` for an object without one.
pub fn pager_of(object: ObjectId) -> Option<(u64, bool, u64)> {
    // SAFETY: the lock is held; the reference ends in this statement.
    let o = unsafe { state() }.objects.get(object)?;
    match o.kind() {
        Kind::Pager { pager, dead } => Some((pager, dead, o.size())),
        _ => None,
    }
}

/// What `object` holds at `offset`: `Some(Some(frame))` resident, `Some(None)` being
/// paged in or failed, `None` nothing.
pub fn pager_page(object: ObjectId, offset: u64) -> Option<Option<PhysAddr>> {
    // SAFETY: the lock is held; the reference ends in this statement.
    let vm = unsafe { state() };
    match vm.objects.next_page(object, offset, offset + 1)? {
        (_, Page::Resident(f)) => Some(Some(f)),
        _ => Some(None),
    }
}

/// Puts `frame` at `offset` of the pager-backed `object` (a supply): `Ok(true)` when it
/// went in, `Ok(false)` when the object has that page already (the frame is freed).
pub fn pager_put(
    k: &mut Kernel,
    object: ObjectId,
    offset: u64,
    frame: PhysAddr,
) -> Result<bool, Error> {
    // The supplier: a pager on the path that frees memory may use the reserve.
    let supplier = k.current_task().unwrap_or(0);
    // SAFETY: the lock is held; the family's entry.
    let vm = unsafe { state() };
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    if vm.objects.resident(object, offset).is_some() {
        mem.free_frame(frame);
        return Ok(false);
    }
    if !replace::room_for(mem.frames.free_frames() as u64, supplier) {
        mem.free_frame(frame);
        return Err(Error::NoMemory);
    }
    match vm.objects.insert_page(object, offset, frame) {
        Ok(()) => {
            replace::count_wanted(frame);
            Ok(true)
        }
        Err((e, f)) => {
            mem.free_frame(f);
            Err(e)
        }
    }
}

/// The pager failed `offset` of `object` (faults on it are errors until a supply or a
/// flush).
pub fn pager_fail(object: ObjectId, offset: u64) -> Result<(), Error> {
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.objects.page_in_error(object, offset)
}

/// The pager of `object` restricts the accesses to its page at `offset` to `allow`
/// (`Objects::set_lock`); translations that allowed more are gone when this returns.
pub fn pager_lock(k: &mut Kernel, object: ObjectId, offset: u64, allow: Prot) -> Result<(), Error> {
    // SAFETY: the lock is held (a system call); the family's entry.
    let vm = unsafe { state() };
    let mut m = Mach::new(&mut k.frames, None, &mut vm.rmap, 0);
    let r = vm.objects.set_lock(object, offset, allow, &mut m);
    let fin = m.finish();
    settle(k, vm, fin, None);
    r
}

/// The page being paged in at `offset` of `object` could not be asked for: absent again.
pub fn pager_not_asked(object: ObjectId, offset: u64) {
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.objects.page_in_failed(object, offset);
}

/// The paged-out page at `offset` of `object` could not be asked of the default pager:
/// not asked any more.
pub fn swap_not_asked(object: ObjectId, offset: u64) {
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.objects.swap_in_failed(object, offset);
}

/// Whether `offset` of `object` is a paged-out page asked of the default pager (a fault
/// may wait for it).
pub fn swap_asked(object: ObjectId, offset: u64) -> bool {
    // SAFETY: the lock is held; the reference ends in this statement.
    let vm = unsafe { state() };
    matches!(
        vm.objects.get(object).and_then(|o| o.page(offset)),
        Some(Page::Out { asked: true, .. })
    )
}

/// `object`'s pager is gone: its absent pages are errors from now on.
pub fn pager_dead(object: ObjectId) {
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.objects.pager_died(object);
}

/// Whether a pager-backed object was destroyed since [`take_freed_pager`] last said none.
#[inline(always)]
pub fn freed_pager_pending() -> bool {
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.objects.freed_pager_pending()
}

/// The pager of a pager-backed object destroyed since the last call.
pub fn take_freed_pager() -> Option<u64> {
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.objects.take_freed_pager()
}

/// The first page `object` holds in `[from, to)`: its offset and frame (`None` for a page
/// being paged in or failed).
pub fn pager_next(object: ObjectId, from: u64, to: u64) -> Option<(u64, Option<PhysAddr>)> {
    // SAFETY: the lock is held; the reference ends in this statement.
    let vm = unsafe { state() };
    vm.objects
        .next_page(object, from, to)
        .map(|(off, p)| match p {
            Page::Resident(f) => (off, Some(f)),
            _ => (off, None),
        })
}

/// Removes the page at `offset` of the pager-backed `object` from every translation and
/// from the object (a flush); its frame, for the caller to return and then free with
/// [`free_frame`].
pub fn pager_flush_page(
    k: &mut Kernel,
    object: ObjectId,
    offset: u64,
) -> Result<Option<PhysAddr>, Error> {
    // SAFETY: the lock is held; the family's entry.
    let vm = unsafe { state() };
    let mut m = Mach::new(&mut k.frames, None, &mut vm.rmap, 0);
    let r = vm.objects.flush_page(object, offset, &mut m);
    let fin = m.finish();
    settle(k, vm, fin, None);
    r
}

/// Gathers the dirty bits of every translation of `[from, to)` of the pager-backed object
/// `object` into the pages' sticky dirty bits, clearing them in the translations (a pager's
/// flush is about to return the written pages: a write after this sets the bit again, and
/// its page is returned by the next flush), and marks written the pages of buffers the
/// kernel writes there ([`kernel_stores`]). Only mappings of the object itself that may
/// write it are looked at: a copy-on-write mapping never writes the object's pages.
///
/// The translations are found through the reverse map, from the object's resident pages
/// in the range; where it does not know every translation of one of them, every task's
/// map is walked instead ([`harvest_dirty_by_walk`], the way before the reverse map).
pub fn harvest_dirty(k: &mut Kernel, object: ObjectId, from: u64, to: u64) {
    // SAFETY: the lock is held; the family's entry.
    let vm = unsafe { state() };
    if !harvest_dirty_by_rmap(k, vm, object, from, to) {
        harvest_dirty_by_walk(k, vm, object, from, to);
    }
}

/// [`harvest_dirty`] through the reverse map; `false` (nothing done) when it does not
/// know every translation of the object's resident pages in `[from, to)`.
fn harvest_dirty_by_rmap(
    k: &mut Kernel,
    vm: &mut Vm,
    object: ObjectId,
    from: u64,
    to: u64,
) -> bool {
    if !vm.rmap.ready()
        || object_resident(vm, object, from, to)
            .any(|(_, f)| vm.rmap.each(f.0, |_, _| {}) != Known::All)
    {
        return false;
    }
    let mut shoot = Shoot::default();
    {
        let Kernel { tasks, frames, .. } = &mut *k;
        for (off, frame) in object_resident(vm, object, from, to) {
            vm.rmap.each(frame.0, |id, va| {
                let Some(tv) = vm.tasks.get(&id) else {
                    return;
                };
                // Only a mapping of the object itself that may write it, at this page
                // (a stale record, or a copy-on-write mapping, is passed over).
                let writes = tv.map.entry(va).is_some_and(|(s, e)| {
                    e.object == object
                        && !e.cow
                        && e.max_prot.contains(Prot::WRITE)
                        && e.offset.checked_add(va - s) == Some(off)
                });
                let Some(t) = tasks.get_mut(&id).filter(|_| writes) else {
                    return;
                };
                let mut mem = KernelMem {
                    frames: &mut *frames,
                };
                let n = t
                    .space
                    .update_leaves(&mut mem, va, va + PAGE_SIZE, |_, pte| {
                        if pte & DIRTY != 0 && pte & OWNED == 0 && pte & ADDR_MASK == frame.0 {
                            replace::mark_dirty(frame);
                            pte & !DIRTY
                        } else {
                            pte
                        }
                    });
                if n > 0 {
                    shoot.add(id);
                }
            });
        }
    }
    shoot.fire(k);
    // The buffers the kernel writes there count as written (`kernel_stores`): a list of
    // a few wirings a task, looked at without its map's entries or page tables, and only
    // while some wiring maps a pager-backed object at all.
    if vm.pager_wirings == 0 {
        return true;
    }
    for tv in vm.tasks.values() {
        for w in tv.wirings.iter().filter(|w| kernel_stores(w)) {
            let mut va = w.start;
            while va < w.start + w.len {
                if let Some((s, e)) = tv.map.entry(va) {
                    let off = e.offset + (va - s);
                    if e.object == object
                        && !e.cow
                        && e.max_prot.contains(Prot::WRITE)
                        && (from..to).contains(&off)
                    {
                        mark_written(&tv.map, &vm.objects, va, va + PAGE_SIZE);
                    }
                }
                va += PAGE_SIZE;
            }
        }
    }
    true
}

/// The resident pages of `object` in `[from, to)`: offset and frame.
fn object_resident(
    vm: &Vm,
    object: ObjectId,
    from: u64,
    to: u64,
) -> impl Iterator<Item = (u64, PhysAddr)> + '_ {
    let mut at = from;
    core::iter::from_fn(move || {
        let (off, p) = vm.objects.next_page(object, at, to)?;
        at = off.saturating_add(PAGE_SIZE);
        Some((off, p))
    })
    .filter_map(|(off, p)| match p {
        Page::Resident(f) => Some((off, f)),
        _ => None,
    })
}

/// [`harvest_dirty`] by walking every task's map entries and their page tables.
fn harvest_dirty_by_walk(k: &mut Kernel, vm: &mut Vm, object: ObjectId, from: u64, to: u64) {
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
            if e.object != object || e.cow || !e.max_prot.contains(Prot::WRITE) {
                continue;
            }
            // The entry's window of the object, cut to `[from, to)`, as addresses.
            let len = e.end - s;
            let (lo, hi) = (e.offset.max(from), e.offset.saturating_add(len).min(to));
            if lo >= hi {
                continue;
            }
            let (va, end) = (s + (lo - e.offset), s + (hi - e.offset));
            // The buffers the kernel writes there count as written (`kernel_stores`).
            for w in tv.wirings.iter().filter(|w| kernel_stores(w)) {
                let (a, b) = (w.start.max(va), (w.start + w.len).min(end));
                if a < b {
                    mark_written(&tv.map, &vm.objects, a, b);
                }
            }
            changed += t.space.update_leaves(&mut mem, va, end, |_, pte| {
                if pte & DIRTY != 0 && pte & OWNED == 0 {
                    replace::mark_dirty(PhysAddr(pte & ADDR_MASK));
                    pte & !DIRTY
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

/// A new frame holding `bytes` (zeros after them), not yet in any object or charged.
pub fn alloc_frame_with(k: &mut Kernel, bytes: &[u8]) -> Option<PhysAddr> {
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    let n = bytes.len().min(PAGE_SIZE as usize);
    // A whole page of bytes overwrites the frame: only a shorter one needs it zeroed
    // (`alloc_frame` hands its frames out zeroed).
    let f = if n == PAGE_SIZE as usize {
        mem.frames.alloc()?
    } else {
        mem.alloc_frame()?
    };
    mem.write_bytes(f, bytes.get(..n).unwrap_or(&[]));
    Some(f)
}

/// Reads the first `out.len()` bytes (at most a page) of `frame`.
pub fn read_frame(k: &mut Kernel, frame: PhysAddr, out: &mut [u8]) {
    let mem = KernelMem {
        frames: &mut k.frames,
    };
    let n = out.len().min(PAGE_SIZE as usize);
    if let Some(o) = out.get_mut(..n) {
        mem.read_bytes(frame, o);
    }
}

/// Gives a frame a flush took back to the allocator.
pub fn free_frame(k: &mut Kernel, frame: PhysAddr) {
    // SAFETY: the lock is held; the reference ends in this statement.
    unsafe { state() }.rmap.frame_freed(frame.0);
    replace::uncount(frame);
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    mem.free_frame(frame);
}

// ---- wirings -------------------------------------------------------------------------

/// Wires `[va, va + len)` of task `task` for `owner`: every page made resident (writable
/// when the range allows writes) and kept so until [`unwire`]. The kernel wires what it
/// caches frames of before it records them.
pub fn wire(k: &mut Kernel, task: TaskId, va: u64, len: u64, owner: Owner) -> Result<(), Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    wire_in(k, vm, task, va, len, owner)
}

fn wire_in(
    k: &mut Kernel,
    vm: &mut Vm,
    task: TaskId,
    va: u64,
    len: u64,
    owner: Owner,
) -> Result<(), Error> {
    let tv = vm.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
    let end = tv.map.check_range(va, len)?;
    if tv.wirings.len() >= WIRINGS_MAX {
        return Err(Error::NoSpace);
    }
    // Decode: the pages can be made resident (with write when every entry allows it).
    let mut write = true;
    let mut cur = va;
    while cur < end {
        let (_, e) = tv.map.entry(cur).ok_or(Error::BadAddress)?;
        write &= e.prot.contains(Prot::WRITE);
        cur = e.end;
    }
    tv.map.account().take(Resource::Heap, WIRING_BYTES)?;
    if tv.wirings.try_reserve(1).is_err() {
        tv.map.account().give(Resource::Heap, WIRING_BYTES);
        return Err(Error::NoMemory);
    }
    let wired = with_map(k, vm, task, |tv, objs, _| tv.map.wire(objs, va, len))?;
    let undo = |k: &mut Kernel, vm: &mut Vm| {
        let _ = with_map(k, vm, task, |tv, objs, _| {
            let _ = tv.map.unwire(objs, va, len);
            tv.map.account().give(Resource::Heap, WIRING_BYTES);
        });
    };
    if let Err(e) = wired {
        if let Some(tv) = vm.tasks.get_mut(&task) {
            tv.map.account().give(Resource::Heap, WIRING_BYTES);
        }
        return Err(e);
    }
    if let Err(e) = resident_in(k, vm, task, va, len, write) {
        undo(k, vm);
        return Err(match e {
            // The call restarts when the pager has answered.
            Failure::PageIn(w) => page_wanted(k, w),
            Failure::SwapIn(w) => swap_wanted(k, task, w),
            _ => Error::NoMemory,
        });
    }
    if let Some(tv) = vm.tasks.get_mut(&task) {
        let pager = maps_pager(&tv.map, &vm.objects, va, va + len);
        vm.pager_wirings += usize::from(pager);
        tv.wirings.push(Wiring {
            start: va,
            len,
            owner,
            pager,
        });
    }
    Ok(())
}

/// Whether an entry of `[start, end)` of `map` maps a pager-backed object.
fn maps_pager(map: &Map, objects: &Objects<PhysAddr>, start: u64, end: u64) -> bool {
    let mut cur = start;
    while cur < end {
        let Some((_, e)) = map.entry(cur) else {
            return false;
        };
        if objects
            .get(e.object)
            .is_some_and(|o| matches!(o.kind(), Kind::Pager { .. }))
        {
            return true;
        }
        cur = e.end;
    }
    false
}

/// Undoes one wiring of exactly `[va, va + len)` for `owner` ([`Error::InvalidArgument`]
/// when there is none).
pub fn unwire(k: &mut Kernel, task: TaskId, va: u64, len: u64, owner: Owner) -> Result<(), Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    unwire_in(
        k,
        vm,
        task,
        |w| w.start == va && w.len == len && w.owner == owner,
        true,
    )
    .and_then(|n| {
        if n == 0 {
            Err(Error::InvalidArgument)
        } else {
            Ok(())
        }
    })
}

/// Undoes the wirings of task `task` that `pick` selects (only the first, with `one`);
/// how many.
fn unwire_in(
    k: &mut Kernel,
    vm: &mut Vm,
    task: TaskId,
    mut pick: impl FnMut(&Wiring) -> bool,
    one: bool,
) -> Result<u64, Error> {
    let mut n = 0;
    loop {
        let tv = vm.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
        let Some(i) = tv.wirings.iter().position(&mut pick) else {
            return Ok(n);
        };
        let w = tv.wirings.swap_remove(i);
        vm.pager_wirings = vm.pager_wirings.saturating_sub(usize::from(w.pager));
        tv.map.account().give(Resource::Heap, WIRING_BYTES);
        if kernel_stores(&w) {
            mark_written(&tv.map, &vm.objects, w.start, w.start + w.len);
        }
        with_map(k, vm, task, |tv, objs, _| {
            tv.map.unwire(objs, w.start, w.len)
        })??;
        n += 1;
        if one {
            return Ok(n);
        }
    }
}

/// Renames the wiring of `[va, va + len)` made for `from` to `to` (an activation made
/// after its buffer was wired).
pub fn rename_wiring(task: TaskId, va: u64, len: u64, from: Owner, to: Owner) {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    if let Some(w) = vm.tasks.get_mut(&task).and_then(|tv| {
        tv.wirings
            .iter_mut()
            .find(|w| w.start == va && w.len == len && w.owner == from)
    }) {
        w.owner = to;
    }
}

/// Whether the kernel still caches the frames `w` was wired for.
fn live(k: &Kernel, task: TaskId, w: &Wiring) -> bool {
    let at = |b: Option<(u64, PhysAddr)>| b.is_some_and(|(va, _)| va == w.start);
    match w.owner {
        Owner::User | Owner::NewAct | Owner::Vp => true,
        Owner::Thread(t) => k.threads.get(t).is_some_and(|th| {
            (th.ctx.task == Some(task) && at(th.ctx.ipc_buffer))
                || th
                    .below
                    .iter()
                    .any(|s| s.task == Some(task) && at(s.ipc_buffer))
        }),
        Owner::Act(a) => k
            .acts
            .get(a)
            .is_some_and(|act| act.task == task && !act.retired && act.buffer.0 == w.start),
    }
}

/// Drops the kernel's wirings of task `task` whose owners forgot their frames (a thread
/// ended or set another buffer, an activation retired).
fn purge_stale(k: &mut Kernel, vm: &mut Vm, task: TaskId) -> Result<(), Error> {
    let stale: Vec<usize> = match vm.tasks.get(&task) {
        Some(tv) => {
            let mut v = Vec::new();
            v.try_reserve(tv.wirings.len())
                .map_err(|_| Error::NoMemory)?;
            v.extend(
                tv.wirings
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| !live(k, task, w))
                    .map(|(i, _)| i),
            );
            v
        }
        None => return Ok(()),
    };
    // Highest index first, so `swap_remove` leaves the lower ones in place.
    for i in stale.into_iter().rev() {
        let Some(tv) = vm.tasks.get_mut(&task) else {
            break;
        };
        let w = tv.wirings.swap_remove(i);
        vm.pager_wirings = vm.pager_wirings.saturating_sub(usize::from(w.pager));
        tv.map.account().give(Resource::Heap, WIRING_BYTES);
        if kernel_stores(&w) {
            mark_written(&tv.map, &vm.objects, w.start, w.start + w.len);
        }
        with_map(k, vm, task, |tv, objs, _| {
            tv.map.unwire(objs, w.start, w.len)
        })??;
    }
    Ok(())
}

// ---- system calls --------------------------------------------------------------------

/// Checks a page range for `mem_map`/`mem_unmap`: aligned, non-empty, inside user space.
fn page_range(addr: u64, len: u64) -> Result<(u64, u64), Error> {
    if len > baton_abi::MEM_MAP_MAX {
        return Err(Error::TooLarge);
    }
    if len == 0 || !addr.is_multiple_of(PAGE_SIZE) || !len.is_multiple_of(PAGE_SIZE) {
        return Err(Error::InvalidArgument);
    }
    let end = addr.checked_add(len).ok_or(Error::BadAddress)?;
    if addr < USER_MIN || end > USER_END {
        return Err(Error::BadAddress);
    }
    Ok((addr, end))
}

/// `mem_map(addr, len, flags)`: allocates `[addr, addr + len)` (committed: the frames are
/// charged now, taken at first touch), readable, writable with `MAP_WRITABLE`.
pub fn sys_mem_map(
    k: &mut Kernel,
    task: TaskId,
    addr: u64,
    len: u64,
    flags: u64,
) -> Result<u64, Error> {
    let (addr, _) = page_range(addr, len)?;
    if flags & !baton_abi::MAP_WRITABLE != 0 {
        return Err(Error::InvalidArgument);
    }
    let prot = if flags & baton_abi::MAP_WRITABLE != 0 {
        Prot::RW
    } else {
        Prot::READ
    };
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    with_map(k, vm, task, |tv, objs, m| {
        tv.map
            .allocate_with(objs, Placement::Fixed(addr), len, prot, true, m)
    })?
    .map(|_| 0)
    .map_err(|e| match e {
        // Something is mapped there already.
        Error::NoSpace => Error::InvalidArgument,
        e => e,
    })
}

/// `mem_unmap(addr, len)`: deallocates what is allocated in `[addr, addr + len)`; the
/// number of pages that were. The kernel forgets the buffers it cached there first.
pub fn sys_mem_unmap(k: &mut Kernel, task: TaskId, addr: u64, len: u64) -> Result<u64, Error> {
    let (start, end) = page_range(addr, len)?;
    let pages = {
        // SAFETY: the lock is held; this reference ends before the calls below.
        let vm = unsafe { state() };
        let tv = vm.tasks.get(&task).ok_or(Error::InvalidArgument)?;
        allocated_pages(&tv.map, start, end)
    };
    if pages > 0 {
        crate::ipc::unmap_buffers(k, task, start, end);
    }
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    // Buffers forgotten above: their wirings go too.
    unwire_in(
        k,
        vm,
        task,
        |w| w.owner != Owner::User && w.start < end && start < w.start + w.len,
        false,
    )?;
    purge_stale(k, vm, task)?;
    with_map(k, vm, task, |tv, objs, m| {
        tv.map.deallocate(objs, start, end - start, m)
    })??;
    Ok(pages)
}

/// Pages of `[start, end)` that `map` maps.
fn allocated_pages(map: &Map, start: u64, end: u64) -> u64 {
    let mut pages = 0;
    let mut cur = start;
    while let Some((s, e)) = map.query(cur).filter(|(s, _)| *s < end) {
        let from = s.max(start);
        let to = e.end.min(end);
        pages += to.saturating_sub(from) / PAGE_SIZE;
        cur = e.end;
    }
    pages
}

/// The `vm_*` calls (`baton_abi::Sys::VmAllocate` and on), for task `task`.
pub fn sys_vm(
    k: &mut Kernel,
    task: TaskId,
    call: baton_abi::Sys,
    a: [u64; 6],
) -> Result<u64, Error> {
    use baton_abi::Sys;
    match call {
        Sys::VmAllocate => vm_allocate(k, task, a[0], a[1], a[2]),
        Sys::VmDeallocate => vm_deallocate(k, task, a[0], a[1]),
        Sys::VmProtect => vm_protect(k, task, a[0], a[1], a[2], a[3]),
        Sys::VmInherit => vm_inherit(k, task, a[0], a[1], a[2]),
        Sys::VmQuery => vm_query(k, task, a[0], a[1]),
        Sys::VmWire => vm_wire(k, task, a[0], a[1]),
        Sys::VmUnwire => unwire(k, task, a[0], a[1], Owner::User).map(|()| 0),
        Sys::VmStats => vm_stats(k, task, a[0], a[1]),
        _ => Err(Error::InvalidArgument),
    }
}

fn prot_of(bits: u64) -> Result<Prot, Error> {
    Prot::from_bits(bits).ok_or(Error::InvalidArgument)
}

fn vm_allocate(k: &mut Kernel, task: TaskId, addr: u64, len: u64, prot: u64) -> Result<u64, Error> {
    let prot = prot_of(prot)?;
    let at = match addr {
        abi::VM_ANYWHERE => Placement::Anywhere,
        a => Placement::Fixed(a),
    };
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    with_map(k, vm, task, |tv, objs, m| {
        tv.map.allocate_with(objs, at, len, prot, true, m)
    })?
    .map(|(start, _)| start)
}

fn vm_deallocate(k: &mut Kernel, task: TaskId, addr: u64, len: u64) -> Result<u64, Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    purge_stale(k, vm, task)?;
    with_map(k, vm, task, |tv, objs, m| {
        tv.map.deallocate(objs, addr, len, m)
    })??;
    Ok(0)
}

fn vm_protect(
    k: &mut Kernel,
    task: TaskId,
    addr: u64,
    len: u64,
    prot: u64,
    set_max: u64,
) -> Result<u64, Error> {
    let prot = prot_of(prot)?;
    let set_max = match set_max {
        0 => false,
        1 => true,
        _ => return Err(Error::InvalidArgument),
    };
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    with_map(k, vm, task, |tv, objs, m| {
        if len == PAGE_SIZE && !set_max {
            // One page, as SPIN's fault handlers change it: no split and merge.
            tv.map.protect_page(objs, addr, prot, m)
        } else {
            tv.map.protect(objs, addr, len, prot, set_max, m)
        }
    })??;
    Ok(0)
}

fn vm_inherit(
    k: &mut Kernel,
    task: TaskId,
    addr: u64,
    len: u64,
    inherit: u64,
) -> Result<u64, Error> {
    let inherit = match inherit {
        abi::INHERIT_SHARE => Inherit::Share,
        abi::INHERIT_COPY => Inherit::Copy,
        abi::INHERIT_NONE => Inherit::None,
        _ => return Err(Error::InvalidArgument),
    };
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    with_map(k, vm, task, |tv, objs, _| {
        tv.map.inherit(objs, addr, len, inherit)
    })??;
    Ok(0)
}

fn vm_wire(k: &mut Kernel, task: TaskId, addr: u64, len: u64) -> Result<u64, Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    wire_in(k, vm, task, addr, len, Owner::User).map(|()| 0)
}

/// What `vm_query` reports of the map entry at `start`.
fn region_of(vm: &Vm, start: u64, e: &kern::vm::map::Entry) -> Option<VmRegion> {
    let o = vm.objects.get(e.object)?;
    let kind = match (o.kind(), o.backing()) {
        (Kind::Anonymous, None) => abi::OBJECT_ANONYMOUS,
        (Kind::Anonymous, Some(_)) => abi::OBJECT_SHADOW,
        (Kind::Physical { .. }, _) => abi::OBJECT_PHYSICAL,
        (Kind::Pager { .. }, _) => abi::OBJECT_PAGER,
    };
    Some(VmRegion {
        start,
        end: e.end,
        prot: u64::from(e.prot.bits()),
        max_prot: u64::from(e.max_prot.bits()),
        inherit: match e.inherit {
            Inherit::Share => abi::INHERIT_SHARE,
            Inherit::Copy => abi::INHERIT_COPY,
            Inherit::None => abi::INHERIT_NONE,
        },
        object: kind,
        resident: o.resident_in(e.offset, e.offset + (e.end - start)),
        wired: u64::from(e.wired),
        copy_on_write: u64::from(e.cow),
    })
}

fn vm_query(k: &mut Kernel, task: TaskId, addr: u64, out: u64) -> Result<u64, Error> {
    let region = {
        // SAFETY: the lock is held; this reference ends before the copy below.
        let vm = unsafe { state() };
        let tv = vm.tasks.get(&task).ok_or(Error::InvalidArgument)?;
        let (start, e) = tv.map.query(addr).ok_or(Error::NotFound)?;
        region_of(vm, start, &e).ok_or(Error::NotFound)?
    };
    k.copy_out(task, out, &region.to_bytes())?;
    Ok(0)
}

/// `host_vm(host_priv, task, buf, max)` by thread `cur` of task `caller`: writes task
/// `task`'s fault and memory counts (a `VmStats`) at `buf`, then a `VmRegion` for each of
/// its first `max` map entries; returns how many entries it has. The buffer is checked
/// writable whole first (nothing written on `BadAddress`); `TooLarge` past
/// `host::RECORDS_MAX`, `NotFound` for no such task, `Denied` without the right.
pub fn sys_host_vm(
    k: &mut Kernel,
    caller: TaskId,
    cur: crate::thread::ThreadId,
    args: [u64; 6],
) -> Result<u64, Error> {
    use baton_abi::host::RECORDS_MAX;
    use baton_abi::vm::{VM_REGION_SIZE, VM_STATS_SIZE};
    let [host_priv, task, buf, max, ..] = args;
    crate::kobject::check_host_priv(k, cur, host_priv)?;
    if max > RECORDS_MAX {
        return Err(Error::TooLarge);
    }
    if k.tasks.get(&task).is_none() {
        return Err(Error::NotFound);
    }
    k.check_writable(caller, buf, VM_STATS_SIZE + max as usize * VM_REGION_SIZE)?;
    let stats = task_stats(k, task)?;
    let mut regions = [VmRegion::default(); RECORDS_MAX as usize];
    let total = {
        // SAFETY: the lock is held; this reference ends before the copies below.
        let vm = unsafe { state() };
        let tv = vm.tasks.get(&task).ok_or(Error::NotFound)?;
        for (slot, (start, e)) in regions.iter_mut().zip(tv.map.entries()).take(max as usize) {
            *slot = region_of(vm, start, &e).unwrap_or_default();
        }
        tv.map.len() as u64
    };
    k.copy_out(caller, buf, &stats.to_bytes())?;
    for (i, r) in regions.iter().take(max.min(total) as usize).enumerate() {
        let at = buf + (VM_STATS_SIZE + i * VM_REGION_SIZE) as u64;
        k.copy_out(caller, at, &r.to_bytes())?;
    }
    Ok(total)
}

/// Task `task`'s fault and memory counts (`vm_stats` of scope task).
fn task_stats(k: &Kernel, task: TaskId) -> Result<VmStats, Error> {
    stats_of(k, task, abi::STATS_TASK)
}

fn vm_stats(k: &mut Kernel, task: TaskId, scope: u64, out: u64) -> Result<u64, Error> {
    let s = stats_of(k, task, scope)?;
    k.copy_out(task, out, &s.to_bytes())?;
    Ok(0)
}

/// The counts `vm_stats` reports for `scope` (of task `task`, or the system).
fn stats_of(k: &Kernel, task: TaskId, scope: u64) -> Result<VmStats, Error> {
    let s = {
        // SAFETY: the lock is held (every caller is in a system call); this reference ends
        // before the function returns.
        let vm = unsafe { state() };
        let (f, resident, entries) = match scope {
            abi::STATS_TASK => {
                let tv = vm.tasks.get(&task).ok_or(Error::InvalidArgument)?;
                let resident = tv
                    .map
                    .entries()
                    .filter_map(|(s, e)| {
                        let o = vm.objects.get(e.object)?;
                        Some(o.resident_in(e.offset, e.offset + (e.end - s)))
                    })
                    .sum();
                (tv.stats, resident, tv.map.len() as u64)
            }
            abi::STATS_SYSTEM => {
                let resident = vm
                    .objects
                    .iter()
                    .map(|(_, o)| o.resident_in(0, u64::MAX))
                    .sum();
                let entries = vm.tasks.values().map(|tv| tv.map.len() as u64).sum();
                (vm.stats, resident, entries)
            }
            _ => return Err(Error::InvalidArgument),
        };
        VmStats {
            faults: f.faults,
            read_faults: f.read_faults,
            write_faults: f.write_faults,
            execute_faults: f.execute_faults,
            address_errors: f.address_errors,
            write_errors: f.write_errors,
            zero_fills: f.zero_fills,
            memory_fills: f.memory_fills,
            pager_fills: f.pager_fills,
            cow_copies: f.cow_copies,
            cow_reclaims: f.cow_reclaims,
            cow_reclaimed_pages: f.cow_reclaimed_pages,
            resident,
            entries,
            objects: vm.objects.len() as u64,
            frames_free: k.frames.free_frames() as u64,
        }
    };
    Ok(s)
}

// ---- memory objects as capabilities (`crate::memobj`) ---------------------------------

/// Runs `op` on the objects with a [`Mach`] that has no space of its own (an object's
/// last reference going, which no map entry holds any more), then throws away every
/// cached translation if the operation asked for it.
fn with_objects<T>(
    k: &mut Kernel,
    op: impl FnOnce(&mut Objects<PhysAddr>, &mut Mach<'_>) -> T,
) -> T {
    // SAFETY: the lock is held (every caller is in a system call or a hook); the
    // family's entry, and the reference ends before `flush_everything` takes it again.
    let vm = unsafe { state() };
    let mut m = Mach::new(&mut k.frames, None, &mut vm.rmap, 0);
    let out = op(&mut vm.objects, &mut m);
    let fin = m.finish();
    settle(k, vm, fin, None);
    out
}

/// A new anonymous object of `size` bytes with one reference (the caller's), its frames
/// committed to `account` now.
pub fn object_anonymous(
    k: &mut Kernel,
    size: u64,
    account: &kern::quota::AccountRef,
) -> Result<ObjectId, Error> {
    with_objects(k, |objs, _| objs.committed(size, account))
}

/// A new object over the physical range `[base, base + size)` (checked by the caller).
pub fn object_physical(
    k: &mut Kernel,
    base: u64,
    size: u64,
    uncached: bool,
    account: &kern::quota::AccountRef,
) -> Result<ObjectId, Error> {
    with_objects(k, |objs, _| objs.physical(base, size, uncached, account))
}

/// A new anonymous object of `size` bytes whose pages are physically contiguous zeroed
/// frames, resident from the start (a DMA buffer); the object and the physical address
/// of its first byte. The frames are committed to `account` and go back to the frame
/// allocator with the object's pages.
pub fn object_dma(
    k: &mut Kernel,
    size: u64,
    account: &kern::quota::AccountRef,
) -> Result<(ObjectId, u64), Error> {
    let object = object_anonymous(k, size, account)?;
    let n = kern::vm::object::pages(size);
    let Some(base) = k.frames.alloc_contiguous(n as usize) else {
        object_release(k, object);
        return Err(Error::NoMemory);
    };
    let mut put = Ok(());
    with_objects(k, |objs, m| {
        for i in 0..n {
            let f = PhysAddr(base.0 + i * PAGE_SIZE);
            let mut mem = KernelMem {
                frames: &mut *m.frames,
            };
            if put.is_err() {
                // Those not handed to the object go back at once.
                mem.free_frame(f);
                continue;
            }
            mem.zero_frame(f);
            if let Err((e, f)) = objs.insert_page(object, i * PAGE_SIZE, f) {
                mem.free_frame(f);
                put = Err(e);
            }
        }
    });
    if let Err(e) = put {
        object_release(k, object);
        return Err(e);
    }
    // A device reaches these frames by their physical addresses: they never move.
    with_objects(k, |objs, _| objs.pin(object));
    Ok((object, base.0))
}

/// One more reference to `object` (another port naming it).
pub fn object_add_ref(k: &mut Kernel, object: ObjectId) -> Result<(), Error> {
    with_objects(k, |objs, _| objs.add_ref(object))
}

/// Gives up a reference to `object`: at the last, its pages go back.
pub fn object_release(k: &mut Kernel, object: ObjectId) {
    with_objects(k, |objs, m| objs.release(object, m));
}

/// What `memobj_info` reports of `object`: its kind, size and resident pages.
pub fn object_info(object: ObjectId) -> Option<(Kind, u64, u64)> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let o = vm.objects.get(object)?;
    Some((o.kind(), o.size(), o.resident_in(0, u64::MAX)))
}

/// Maps the window `[offset, offset + len)` of `object` into task `task`'s map
/// (`vm_map`, decoded by the caller); its address.
#[allow(clippy::too_many_arguments)]
pub fn map_object(
    k: &mut Kernel,
    task: TaskId,
    at: Placement,
    len: u64,
    object: ObjectId,
    offset: u64,
    prot: Prot,
    max_prot: Prot,
    cow: bool,
    inherit: Inherit,
) -> Result<u64, Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let start = with_map(k, vm, task, |tv, objs, m| {
        tv.map.map_object(
            objs, at, len, object, offset, prot, max_prot, cow, inherit, m,
        )
    })??;
    prefault(k, vm, task, start, PREFAULT_MAX);
    Ok(start)
}

/// Enters read-only translations for the resident pages of the entries that begin in
/// `[start, start + len)` of task `task`, at most [`PREFAULT_MAX`] in all, as [`prefault`]
/// does for a new mapping: a region received out of line whose object came over whole (a
/// move: `Map::resident_reads` offers a copy-on-write entry's pages only when it holds
/// the object's one reference) is translated when it is received, as Accent's IPC mapped
/// the pages into the receiver, instead of taking a memory-fill fault at each page's
/// first touch.
pub fn prefault_region(k: &mut Kernel, task: TaskId, start: u64, len: u64) {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let end = start.saturating_add(len);
    let (mut cur, mut left) = (start, PREFAULT_MAX);
    while cur < end && left > 0 {
        let Some((s, e)) = vm.tasks.get(&task).and_then(|tv| tv.map.entry(cur)) else {
            return;
        };
        if s >= start {
            left -= prefault(k, vm, task, s, left).min(left);
        }
        cur = e.end;
    }
}

/// Most resident pages a new mapping gets translations for at once (a bound on the
/// kernel's time in one call; the rest fault in as usual).
const PREFAULT_MAX: usize = 1024;

/// Enters read-only translations for at most `max` pages of the new mapping at `start`
/// of task `task` that its object holds resident (`Map::resident_reads`: what a read
/// fault would enter), so that touching them costs no fault; how many it entered. Page
/// tables are a cache: a translation that cannot be entered (no room for a page table)
/// is simply left to a fault.
fn prefault(k: &mut Kernel, vm: &mut Vm, task: TaskId, start: u64, max: usize) -> usize {
    let (Some(tv), Some(t)) = (vm.tasks.get(&task), k.tasks.get_mut(&task)) else {
        return 0;
    };
    let exec = tv
        .map
        .entry(start)
        .is_some_and(|(_, e)| e.prot.contains(Prot::EXECUTE));
    let flags = MapFlags::user_shared(false, exec);
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    let mut charged = Charged {
        mem: &mut mem,
        account: &t.account,
        took: 0,
    };
    let mut full = false;
    let mut entered = 0;
    let rmap = &mut vm.rmap;
    let account = t.account.clone();
    tv.map.resident_reads(&vm.objects, start, max, |va, frame| {
        if !full {
            entered += 1;
            full = t.space.set(&mut charged, va, frame, flags).is_err();
            if !full {
                // The page tables cannot be asked here (this task's are borrowed):
                // every record is taken as live, and a record the words have no
                // room for goes to the tree (never replacing a translation that
                // may still be there, such as this task's own mapping of the same
                // object elsewhere). Most often a free word takes it.
                if !rmap.record_fast(frame.0, task, va) {
                    rmap.record(frame.0, task, va, &account, |_, _| true);
                }
            }
        }
    });
    t.frames += charged.took;
    entered
}

/// The key a shared wait at `addr` of task `task` uses: the (object, offset) its map
/// maps there, when the mapping writes in place (so every task mapping that object
/// meets at the same key wherever it maps it); `None` for a copy-on-write snapshot,
/// whose object changes at its first write (the caller keys by the task's address then).
/// [`Error::BadAddress`] where nothing is mapped.
pub fn shared_key(task: TaskId, addr: u64) -> Result<Option<(ObjectId, u64)>, Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let tv = vm.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let (start, e) = tv.map.entry(addr).ok_or(Error::BadAddress)?;
    if e.cow {
        return Ok(None);
    }
    Ok(Some((e.object, e.offset + (addr - start))))
}

// ---- out-of-line transfer (Accent's MoveWords; `ool.rs` builds on these) ---------------

/// Checks, changing nothing, that `[start, start + len)` (page aligned) of task `task` can
/// be carried: mapped throughout ([`Error::BadAddress`]), no physical memory
/// ([`Error::InvalidArgument`]), nothing wired ([`Error::Denied`]: a wired page's frame
/// may be cached by the kernel, which must never write a frame a copy shares; a move of
/// it, or a destination over it, would pull it from under the kernel); with `write`,
/// writable throughout ([`Error::BadAddress`]).
pub fn check_carry(task: TaskId, start: u64, len: u64, write: bool) -> Result<(), Error> {
    // SAFETY: the lock is held (the caller is in a system call); this reference ends here.
    let vm = unsafe { state() };
    let tv = vm.tasks.get(&task).ok_or(Error::InvalidArgument)?;
    let end = tv.map.check_range(start, len)?;
    let mut cur = start;
    while cur < end {
        let (_, e) = tv.map.entry(cur).ok_or(Error::BadAddress)?;
        let o = vm.objects.get(e.object).ok_or(Error::BadAddress)?;
        if matches!(o.kind(), Kind::Physical { .. }) {
            return Err(Error::InvalidArgument);
        }
        if e.wired > 0 {
            return Err(Error::Denied);
        }
        if write && !e.prot.contains(Prot::WRITE) {
            return Err(Error::BadAddress);
        }
        cur = e.end;
    }
    Ok(())
}

/// Takes `[start, start + len)` (page aligned) of task `task` into a region in transit,
/// copy-on-write, charged to the task; with `delete` the range leaves its map (a move).
pub fn carry_out(
    k: &mut Kernel,
    task: TaskId,
    start: u64,
    len: u64,
    delete: bool,
) -> Result<Carried, Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    if delete {
        purge_stale(k, vm, task)?;
    }
    with_map(k, vm, task, |tv, objs, m| {
        kern::vm::copy::copy_out(&mut tv.map, objs, start, len, delete, m)
    })?
}

/// Puts a region in transit into task `task`'s map at `at`: its address. On an error the
/// region comes back.
pub fn carry_in(task: TaskId, carried: Carried, at: Placement) -> Result<u64, (Error, Carried)> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    let Some(tv) = vm.tasks.get_mut(&task) else {
        return Err((Error::InvalidArgument, carried));
    };
    kern::vm::copy::copy_in(&mut tv.map, carried, at)
}

/// Releases a region in transit (its message was destroyed).
pub fn release_carried(k: &mut Kernel, carried: Carried) {
    // SAFETY: the lock is held (every caller is under it); the family's entry.
    let vm = unsafe { state() };
    let mut m = Mach::new(&mut k.frames, None, &mut vm.rmap, 0);
    carried.release(&mut vm.objects, &mut m);
    let fin = m.finish();
    settle(k, vm, fin, None);
}

/// Deallocates `[start, start + len)` of task `task` (page aligned), as `vm_deallocate`.
pub fn deallocate(k: &mut Kernel, task: TaskId, start: u64, len: u64) -> Result<(), Error> {
    vm_deallocate(k, task, start, len).map(|_| ())
}

/// Deallocates the whole pages of a region a move carried out of task `task` (checked
/// unwired when it was taken), without first dropping the task's stale wirings as
/// [`deallocate`] does: a migrating call's reply carries its regions while the returning
/// thread is between the server's activation and its caller's record, when the caller's
/// IPC buffer wiring would look stale (and be dropped) to that purge.
pub fn deallocate_moved(k: &mut Kernel, task: TaskId, start: u64, len: u64) -> Result<(), Error> {
    // SAFETY: the lock is held (the caller is in a system call); the family's entry.
    let vm = unsafe { state() };
    with_map(k, vm, task, |tv, objs, m| {
        tv.map.deallocate(objs, start, len, m)
    })?
}

/// Whether task `task` has a map (a task that is ending may not any more).
pub fn has_map(task: TaskId) -> bool {
    // SAFETY: the lock is held (every caller is under it); this reference ends here.
    let vm = unsafe { state() };
    vm.tasks.get(&task).is_some()
}

// ---- SPIN's memory interfaces and the `Translation` events ------------------------------
//
// The extension family (`crate::extension::translation`) raises SPIN's `Translation`
// events from the fault path and exports `Translation`, `VirtAddr` and `PhysAddr` to
// extensions. Its raise is registered here ([`set_translation`]) so that this family never
// names that one, and the fault path asks for it only while some handler is installed
// ([`translation_watch`]): with none, a fault costs a load, a test and a branch more.

/// The extension family's raise of a `Translation` event for a user fault of thread `t`
/// of task `task` at `addr` (the map's protection there `prot`): whether the fault is
/// over (a handler resolved it and [`grant_write`] made the page's translation writable
/// in place); otherwise the default follows.
pub type TranslationRaise = fn(&mut Kernel, ThreadId, TaskId, u64, Access, Option<Prot>) -> bool;

static TRANSLATION: spin::Once<TranslationRaise> = spin::Once::new();
/// How many `Translation` handlers are installed, system-wide.
static TRANSLATION_HANDLERS: core::sync::atomic::AtomicUsize =
    core::sync::atomic::AtomicUsize::new(0);

/// Registers the extension family's raise (once, at boot).
pub fn set_translation(raise: TranslationRaise) {
    TRANSLATION.call_once(|| raise);
}

/// One `Translation` handler more (`true`) or less.
pub fn translation_watch(more: bool) {
    use core::sync::atomic::Ordering::Relaxed;
    if more {
        TRANSLATION_HANDLERS.fetch_add(1, Relaxed);
    } else {
        TRANSLATION_HANDLERS.fetch_sub(1, Relaxed);
    }
}

/// Whether a `Translation` handler is installed anywhere: the page-fault hook's one test
/// (`main.rs`), before [`translation_fault`].
#[inline(always)]
pub fn translation_watched() -> bool {
    TRANSLATION_HANDLERS.load(core::sync::atomic::Ordering::Relaxed) != 0
}

/// SPIN's `Translation` event for a user page fault of thread `t` at `addr` (CPU error
/// code `error`), raised before [`page_fault`]: its handlers may change the map (a
/// protection, a mapping). Whatever they did, [`page_fault`] follows, the default: it
/// enters the translation the map now allows, or goes on as for any fault. Whether the
/// fault is over: a handler resolved a write fault and [`grant_write`] made the page's
/// translation writable, so the default has nothing left to do.
#[inline(never)]
pub fn translation_fault(k: &mut Kernel, t: ThreadId, addr: u64, error: u64) -> bool {
    let Some(raise) = TRANSLATION.get() else {
        return false;
    };
    let Some(task) = k.threads.get(t).and_then(|th| th.ctx.task) else {
        return false;
    };
    let access = if error & (1 << 4) != 0 {
        Access::Execute
    } else if error & (1 << 1) != 0 {
        Access::Write
    } else {
        Access::Read
    };
    let prot = prot_at(task, addr);
    let over = raise(k, t, task, addr, access, prot);
    // A built-in handler's copy to or from user memory that met a page being paged in
    // noted a wait for a system call to restart; there is none here.
    clear_page_wait();
    over
}

/// The end of a write fault a `Translation` handler resolved, without the default's
/// round: when the page's translation is present and read-only, and the map now lets the
/// write go to exactly that frame with nothing to do first
/// (`kern::vm::fault::write_in_place`: writable, not copy-on-write, its own object's
/// page, no copy object to push to), the translation is made writable in place. Whether
/// it was; when not, the default ([`page_fault`]) decides as for any fault. When it was,
/// the map allows the write (`write_in_place` found the entry writable): the extension
/// family's raise ([`TranslationRaise`]) calls this first for a resolved write fault and
/// needs no other look at the map to know the handler did what it said.
pub fn grant_write(k: &mut Kernel, task: TaskId, addr: u64) -> bool {
    use kern::pmap::ADDR_MASK;
    let page = addr & !(PAGE_SIZE - 1);
    // SAFETY: the lock is held (the page-fault hook); this reference ends here.
    let vm = unsafe { state() };
    let Some(tv) = vm.tasks.get(&task) else {
        return false;
    };
    let Some(frame) = kern::vm::fault::write_in_place(&tv.map, &mut vm.objects, page) else {
        return false;
    };
    let Some(t) = k.tasks.get_mut(&task) else {
        return false;
    };
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    // An upgrade from read-only to writable needs no TLB flush: the fault that brought
    // us here dropped this address's entry on this CPU, and another CPU's stale
    // read-only entry can at worst fault once more and find the translation writable.
    let changed = t
        .space
        .update_leaves(&mut mem, page, page + PAGE_SIZE, |_, pte| {
            if pte & ADDR_MASK == frame.0 && pte & WRITABLE == 0 {
                pte | WRITABLE
            } else {
                pte
            }
        });
    changed == 1
}

/// The protection of task `task`'s map at `addr` (`None`: no range covers it).
pub fn prot_at(task: TaskId, addr: u64) -> Option<Prot> {
    // SAFETY: the lock is held (every caller is under it); this reference ends here.
    let vm = unsafe { state() };
    let tv = vm.tasks.get(&task)?;
    tv.map.entry(addr).map(|(_, e)| e.prot)
}

/// `Translation.Protect`: sets the protection of `[va, va + len)` of task `task`'s map
/// (whole pages, mapped throughout; never above the maximum protection).
pub fn spin_protect(
    k: &mut Kernel,
    task: TaskId,
    va: u64,
    len: u64,
    prot: u64,
) -> Result<(), Error> {
    vm_protect(k, task, va, len, prot, 0).map(|_| ())
}

/// `Translation.ExamineMapping` and SPIN's `Dirty`: the state word of task `task`'s page
/// at `va` (`baton_abi::translation::STATE_*`): the map's protection, and what its
/// translation (if any) says, the hardware's dirty and accessed bits included.
pub fn spin_query(k: &mut Kernel, task: TaskId, va: u64) -> Result<u64, Error> {
    use kern::pmap::{ACCESSED, DIRTY};
    use kern::spin::translation::{page_state, Pte};
    if !(USER_MIN..USER_END).contains(&va) {
        return Err(Error::BadAddress);
    }
    let prot = prot_at(task, va);
    let page = va & !(PAGE_SIZE - 1);
    let t = k.tasks.get_mut(&task).ok_or(Error::InvalidArgument)?;
    let mut mem = KernelMem {
        frames: &mut k.frames,
    };
    let mut pte = None;
    let mut frame = None;
    t.space
        .update_leaves(&mut mem, page, page + PAGE_SIZE, |_, e| {
            pte = Some(Pte {
                writable: e & WRITABLE != 0,
                dirty: e & DIRTY != 0,
                accessed: e & ACCESSED != 0,
            });
            frame = Some(e & kern::pmap::ADDR_MASK);
            e
        });
    // Page replacement's batch, while `PhysAddr.Reclaim` handlers are asked about it.
    let chosen = frame.is_some_and(replace::chosen);
    let chosen = if chosen {
        baton_abi::translation::STATE_CHOSEN
    } else {
        0
    };
    Ok(page_state(prot, pte) | chosen)
}

/// `VirtAddr.Allocate`: `len` bytes (whole pages) of task `task`'s address space
/// anywhere, read-write, zero-filled lazily (an Accent allocation); its address.
pub fn spin_allocate(k: &mut Kernel, task: TaskId, len: u64) -> Result<u64, Error> {
    vm_allocate(k, task, abi::VM_ANYWHERE, len, u64::from(Prot::RW.bits()))
}

/// `PhysAddr.Allocate`: one zeroed page, resident now, as a one-page memory object with
/// one reference (the caller's), its frame committed to `account`.
pub fn spin_page(k: &mut Kernel, account: &kern::quota::AccountRef) -> Result<ObjectId, Error> {
    object_dma(k, PAGE_SIZE, account).map(|(o, _)| o)
}

/// `Translation.AddMapping`: maps the page `object` (from [`spin_page`]) at `va` of task
/// `task`'s map with protection `prot`, in place of whatever that page of the map held:
/// an entry of the map like any other (shared, never copy-on-write), its translation
/// entered at once.
pub fn spin_add(
    k: &mut Kernel,
    task: TaskId,
    va: u64,
    object: ObjectId,
    prot: u64,
) -> Result<(), Error> {
    let prot = prot_of(prot)?;
    if !va.is_multiple_of(PAGE_SIZE) || !(USER_MIN..USER_END).contains(&va) {
        return Err(Error::BadAddress);
    }
    // The page may be unmapped already (a hole is fine), but never wired. Should the new
    // mapping then fail (no memory), the page is left a hole.
    if let Some((_, e)) = {
        // SAFETY: the lock is held; this reference ends in this block.
        let vm = unsafe { state() };
        vm.tasks
            .get(&task)
            .ok_or(Error::InvalidArgument)?
            .map
            .entry(va)
    } {
        if e.wired > 0 {
            return Err(Error::Denied);
        }
        deallocate(k, task, va, PAGE_SIZE)?;
    }
    map_object(
        k,
        task,
        Placement::Fixed(va),
        PAGE_SIZE,
        object,
        0,
        prot,
        Prot::ALL,
        false,
        Inherit::None,
    )
    .map(|_| ())
}
