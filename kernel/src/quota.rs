//! Kernel-memory accounting in the kernel binary: the root account, the limits tasks get,
//! and what each kernel object costs (the model is `kern::quota`; `docs/architecture.md`,
//! "Kernel memory", describes it).
//!
//! The root account's limits are set at boot, below the kernel heap and the free frames,
//! so that what every task together can make the kernel hold leaves the kernel its
//! reserve: a charge that fails is an error to the caller, never an exhausted heap. The
//! frame limit grows by the default pager's backing store while one is registered
//! ([`set_backing`]): those frames are commitments of anonymous memory that page
//! replacement keeps on the pager's disk when memory is short.
//!
//! # Invariants
//! - [`root`] is set once, by [`init`], before the first task exists.
//! - Every account a task holds descends from [`root`].

use baton_abi::Error;
use core::sync::atomic::{AtomicU64, Ordering};
use kern::quota::{Account, AccountRef, Charge, Limit, Resource};
use spin::Once;

/// The root of every task's account.
static ROOT: Once<AccountRef> = Once::new();

/// Frames kept out of the root account for the kernel itself (kernel stacks of running
/// threads, the kernel's own page tables): at least this many, or an eighth of all.
const FRAMES_RESERVED_MIN: u64 = 256;

/// Sets the root account's limits from the heap's size and the free frames: three
/// quarters of the heap, and all frames but an eighth (at least
/// [`FRAMES_RESERVED_MIN`]).
pub fn init(heap_bytes: u64, free_frames: u64) {
    let reserve = (free_frames / 8).max(FRAMES_RESERVED_MIN);
    let frames = free_frames.saturating_sub(reserve);
    FRAMES_OF_MEMORY.store(frames, Ordering::Relaxed);
    ROOT.call_once(|| {
        let Ok(root) = Account::root(heap_bytes / 4 * 3, frames) else {
            panic!("no kernel heap for the root account at boot");
        };
        root
    });
}

/// The root account's frame limit from memory alone, as [`init`] set it.
static FRAMES_OF_MEMORY: AtomicU64 = AtomicU64::new(0);

/// The default pager offers `pages` pages of backing store (0: none, or it is gone): the
/// root's frame limit becomes the frames of memory plus those pages. Anonymous memory is
/// committed when it is allocated (`docs/vm.md`, "Commitment"), and with a default pager a
/// commitment may be kept on its disk, so a machine with little memory still runs a
/// program whose working set is several times it (Accent section 2.2.6). Tasks with the
/// default limits take a share of the root's and follow it (read again when a charge would
/// pass it); when the pager goes, the root's limit falls back and new commitments past it
/// fail (`NoMemory`) until enough is given back.
pub fn set_backing(pages: u64) {
    let frames = FRAMES_OF_MEMORY
        .load(Ordering::Relaxed)
        .saturating_add(pages);
    // The root's frame limit is fixed (never a share), so this cannot fail.
    let _ = root().set_limit(Resource::Frames, frames);
}

/// The root account. [`init`] made it at boot, before any task or system call.
pub fn root() -> &'static AccountRef {
    let Some(root) = ROOT.get() else {
        panic!("the root account is used before init");
    };
    root
}

/// The account of a new task: a child of `parent` (the root for tasks the kernel starts)
/// with at most `heap` bytes and `frames` frames; 0 means the default, half the root's
/// limits (`kern::quota::Limit::RootShare`: read again when a charge would pass it, so it
/// grows with the root's frames when a default pager offers backing store, [`set_backing`]), and every
/// charge is bounded by the parent's limits too. A limit given is clamped to the parent's.
pub fn task_account(parent: &AccountRef, heap: u64, frames: u64) -> Result<AccountRef, Error> {
    let limit = |n: u64| match n {
        0 => Limit::RootShare(2),
        n => Limit::Fixed(n),
    };
    Account::child_with(parent, limit(heap), limit(frames))
}

/// Charges `bytes` of kernel heap to `account`.
pub fn heap(account: &AccountRef, bytes: usize) -> Result<Charge, Error> {
    Account::charge(account, Resource::Heap, bytes as u64)
}

/// Room for the bookkeeping an object adds besides its own size (slab slot, queue or map
/// entry, allocator rounding).
const OVERHEAD: usize = 64;

/// What a thread costs: the thread object (its own context inside: registers, task, space,
/// buffer, exception port, control state), its slab slot and the run queue and timer
/// entries it may take.
pub const THREAD_BYTES: usize = core::mem::size_of::<crate::thread::Thread>() + 2 * OVERHEAD;

/// What a port costs: the port (twice: the global slab grows by doubling) and its first
/// queue growth.
pub const PORT_BYTES: usize =
    2 * core::mem::size_of::<kern::ipc::Port<crate::thread::ThreadId>>() + 2 * OVERHEAD;

/// What a queued message costs besides its data: the message and its queue slot.
pub const MESSAGE_BYTES: usize = 2 * core::mem::size_of::<kern::ipc::Message>() + OVERHEAD;

/// What one right carried by a queued message costs.
pub const RIGHT_BYTES: usize = core::mem::size_of::<kern::ipc::Right>();

/// What a task costs besides its threads, names and memory: the task object and its name.
pub const TASK_BYTES: usize =
    core::mem::size_of::<crate::kernel::Task>() + baton_abi::MODULE_NAME_MAX + 2 * OVERHEAD;

/// Brings what `account` is charged for a count kept elsewhere (`charged` bytes now) to
/// `want` bytes: takes the difference ([`Error::NoMemory`] and nothing changed when it
/// does not fit) or gives it back.
pub fn settle(account: &Account, charged: &mut u64, want: u64) -> Result<(), Error> {
    if want > *charged {
        account.take(Resource::Heap, want - *charged)?;
    } else {
        account.give(Resource::Heap, *charged - want);
    }
    *charged = want;
    Ok(())
}
