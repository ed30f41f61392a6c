//! The thread controller and the virtual processors: thread objects, thread control blocks
//! (TCBs), the ready queues behind each virtual processor's policy manager, the TCB pools,
//! blocking and waking, and [`run`], which starts it all.
//!
//! # Structure
//!
//! - A *thread* ([`Core`], behind [`ThreadRef`] and the typed handle
//!   [`Thread`](crate::Thread)) is a first-class object: a thunk, its value once determined,
//!   its state word (`crate::word`), and a wait list. It exists from `fork`/`delay` on and gets storage to run
//!   on only when it starts.
//! - A *TCB* ([`Tcb`]) is control state and a stack in one block of [`STACK_SIZE`] bytes
//!   aligned to its size, the TCB at the bottom. The running code finds its TCB by masking
//!   its stack pointer, and its thread and virtual processor through the TCB. An absorbed
//!   thread runs on its demander's TCB, which then names the absorbed thread as running.
//! - A *virtual processor* ([`Vp`]) is a kernel thread running a scheduler loop on its
//!   own stack, with a policy manager over its ready queue, a LIFO pool of free TCBs and
//!   counters. The threads its own kernel thread queues go on a queue it works on without a
//!   lock (`crate::deque`: a ring only it touches for the built-in FIFO and LIFO policies, a
//!   Chase–Lev deque that thieves steal from for the built-in work-stealing policy); what
//!   others queue, what does not fit, and everything for a policy of the program's own goes
//!   on its shared queue, under a lock. Threads switch directly to the next thread; the scheduler loop's context is
//!   used only when a virtual processor has nothing to run, and it then parks the kernel
//!   thread until work arrives (or steals, if its policy says so).
//!
//! # Locks
//!
//! Three kinds of spin lock, never two held at once: a shared ready queue's, a thread's
//! (`Core::ctl`: its wait list, signals and terminate request; its state is the word,
//! changed by compare-and-swap, under the lock or not) and a synchronisation object's (in
//! [`crate::sync`], [`crate::port`], [`crate::group`]). The global TCB pool's lock is taken
//! alone too.
//!
//! # Switching safely between virtual processors
//!
//! A thread that gives up its processor (blocks, yields, migrates, suspends) may be made
//! runnable and taken by another virtual processor before it has finished switching away.
//! Every TCB has a `running` flag: set by the virtual processor that switches to it, and
//! cleared only by the context that runs next on the same virtual processor, after the
//! switch ([`Vp::finish_switch`]). A virtual processor about to resume a TCB waits until
//! its flag is clear. A finished thread's TCB goes back to the pool the same way, after the
//! switch, so no one can take it while it is still the stack in use.
//!
//! # Invariants
//!
//! - A thread's state word changes only by compare-and-swap, through `crate::word`'s
//!   transitions (which follow [`State::on`]'s table); only a holder of its `ctl` lock, or
//!   the thread's own end, makes it determined.
//! - A thread has at most one live ready-queue entry: the word's queued bit and ticket are
//!   set by whoever queues it and cleared by the claim that wins; stale entries (absorbed,
//!   terminated or suspended threads, or ones queued again since) are dropped when popped.
//!   The exception is an owned entry ([`Own`]) on a FIFO or LIFO processor's ring: a thread
//!   that yielded there keeps its running word (no queued bit, no ticket), its TCB is the
//!   entry, and only that processor resumes it; it is on the ring at most once, because
//!   only the thread itself puts it there, as it yields.
//! - An owned entry's TCB keeps its `running` flag set while it waits (no other processor
//!   can take it, so there is no switch-away to wait for), and is resumed without the
//!   handshake; every other TCB resumed on the processor it last ran on has its flag
//!   clear.
//! - A TCB is in exactly one of: a pool, in use by a started thread, or being switched away
//!   from (until its virtual processor's next `finish_switch`).
//! - `Vp::local` is touched only by the kernel thread of that virtual processor.

use alloc::alloc::{alloc, dealloc, handle_alloc_error};
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::cell::{Cell, UnsafeCell};
use core::marker::PhantomData;
use core::ptr::{self, NonNull};
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use core::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};

use crate::arch;
use crate::area::{Bump, Mark};
use crate::deque::{ChaseLev, Ring, Steal, CAPACITY};
use crate::exception::{AbsorbLink, HandlerFrame, Priority};
use crate::group::GroupInner;
use crate::platform;
use crate::policy::{Kind, Policy, Queue};
use crate::pool::{self, Thresholds};
use crate::spin::SpinLock;
use crate::state::{End, Paper, State};
use crate::word::{self, Claim, Word};

/// Bytes of one TCB and its stack, and their alignment.
pub const STACK_SIZE: usize = 16 * 1024;
/// The first word of every TCB; a stack that overflowed into its TCB changes it. 32 bits,
/// so that its test is one compare with an immediate (a 64-bit constant needs a register
/// loaded first), on every runtime call.
const MAGIC: u32 = 0x5354_4342;
/// How long an idle virtual processor parks before looking again (a backstop: work for
/// it wakes it at once).
const IDLE_PARK_NS: u64 = 1_000_000;

// ---------------------------------------------------------------------------------------
// Thread control blocks

/// A thread control block: the bottom of a [`STACK_SIZE`] block whose rest is its stack.
#[repr(C)]
pub(crate) struct Tcb {
    /// [`MAGIC`].
    magic: u32,
    /// The saved stack pointer while the TCB is not running.
    sp: UnsafeCell<usize>,
    /// Set while a virtual processor runs on this TCB or is switching away from it.
    running: AtomicBool,
    /// The thread running on this TCB: its owner, or a thread it absorbed. Owns one
    /// reference to the owner (the absorbed thread's is held by the absorbing frame).
    thread: Cell<*const Core>,
    /// The virtual processor running this TCB (set by whoever switches to it).
    vp: Cell<*const Vp>,
    /// The next TCB on its virtual processor's list of TCBs whose kernel call completed
    /// (`VpLocal::kfirst`).
    link: Cell<*mut Tcb>,
    /// Set while its thread runs its own code inside [`preemptible`]: a Checkpoint upcall
    /// may then switch away from it. Cleared by every runtime call ([`current_tcb`]).
    /// (Atomic so that no store to it is optimised away: the kernel's interrupt reads it
    /// asynchronously, through the upcall, as a signal handler would.)
    preempt: AtomicBool,
    /// The private area of the thread running on it (`crate::area`), kept with the TCB
    /// through the pools and reset when a thread ends.
    area: UnsafeCell<Bump>,
    /// The exception handlers installed on its stack, innermost first
    /// (`crate::exception`).
    handlers: Cell<*const HandlerFrame>,
    /// The absorptions running on its stack, innermost first.
    absorb: Cell<*const AbsorbLink>,
}

/// A TCB pointer that may sit in the pools (which the runtime shares between threads).
pub(crate) struct TcbPtr(*mut Tcb);
// SAFETY: a pooled TCB is owned by the pool that holds it; the pointer is only handed
// from pool to pool or to the one virtual processor that takes it out.
unsafe impl Send for TcbPtr {}

/// The layout of one TCB block.
fn tcb_layout() -> Layout {
    // STACK_SIZE is a power of two, so this cannot fail.
    Layout::from_size_align(STACK_SIZE, STACK_SIZE).unwrap_or(Layout::new::<Tcb>())
}

impl Tcb {
    /// A new TCB and stack from the heap.
    fn create() -> *mut Tcb {
        let layout = tcb_layout();
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc(layout) }.cast::<Tcb>();
        if p.is_null() {
            handle_alloc_error(layout);
        }
        // SAFETY: `p` is a fresh block of STACK_SIZE bytes, aligned to STACK_SIZE, more
        // than a Tcb needs.
        unsafe {
            p.write(Tcb {
                magic: MAGIC,
                sp: UnsafeCell::new(0),
                running: AtomicBool::new(false),
                thread: Cell::new(ptr::null()),
                vp: Cell::new(ptr::null()),
                link: Cell::new(ptr::null_mut()),
                preempt: AtomicBool::new(false),
                area: UnsafeCell::new(Bump::new()),
                handlers: Cell::new(ptr::null()),
                absorb: Cell::new(ptr::null()),
            })
        };
        crate::exception::register_tcb(p as usize);
        p
    }

    /// Frees a TCB made by [`create`](Self::create).
    ///
    /// # Safety
    ///
    /// Nothing runs on it, and nothing refers to it any more.
    unsafe fn destroy(tcb: *mut Tcb) {
        // SAFETY: the caller's promise: nothing runs on the TCB, so no handle into its
        // area is alive.
        unsafe { (*(*tcb).area.get()).free_all() };
        crate::exception::unregister_tcb(tcb as usize);
        // SAFETY: the caller's promise; the block was allocated with this layout.
        unsafe { dealloc(tcb.cast(), tcb_layout()) };
    }
}

/// The TCB the calling code runs on.
///
/// Panics if the code is not on a sting thread's stack (or overflowed into its TCB).
#[inline]
fn current_tcb() -> *mut Tcb {
    let tcb = (arch::stack_pointer() & !(STACK_SIZE - 1)) as *mut Tcb;
    // SAFETY: on a sting thread, the stack pointer lies inside a TCB block, whose first
    // word is the magic. The runtime's API is for sting threads only (documented at the
    // crate root); this check catches a misuse that has not already faulted.
    if unsafe { (*tcb).magic } != MAGIC {
        not_a_sting_thread();
    }
    // A runtime call: the thread is not preemptible any more (see `preemptible`). An atomic
    // store, which the compiler keeps even where it sees no reader, and a compiler fence
    // (no instruction) so that none of the runtime's work moves above it: a Checkpoint
    // upcall reads the flag as a signal handler would.
    // SAFETY: as above, a live TCB.
    unsafe { (*tcb).preempt.store(false, Relaxed) };
    compiler_fence(SeqCst);
    tcb
}

#[cold]
fn not_a_sting_thread() -> ! {
    panic!("sting: called outside a sting thread, or a thread overflowed its stack")
}

/// The virtual processor and TCB the calling code runs on.
#[inline]
fn here() -> (&'static Vp, *mut Tcb) {
    let tcb = current_tcb();
    // SAFETY: a running TCB's `vp` was set, by whoever switched to it, to a virtual
    // processor of the live runtime (which outlives every thread that runs).
    (unsafe { &*(*tcb).vp.get() }, tcb)
}

// ---------------------------------------------------------------------------------------
// Threads

/// What a thread's type-erased operations are.
struct VTable {
    /// Runs the thunk and stores its value (once).
    run: unsafe fn(*const Core),
    /// Frees the whole thread object.
    drop: unsafe fn(*const Core),
}

/// The type-independent part of a thread, at the start of every thread object.
#[repr(C)]
pub(crate) struct Core {
    /// References: handles, ready-queue entries, the owning TCB, wait-list wakers.
    refs: AtomicUsize,
    /// Its type's operations.
    vtable: &'static VTable,
    /// Its number, unique in the run.
    id: u64,
    /// Its thread group, fixed at creation.
    pub(crate) group: Option<Arc<GroupInner>>,
    /// Its state word (`crate::word`): state, queue membership and ticket, suspension,
    /// pending wake-up, virtual processor; changed only by compare-and-swap.
    pub(crate) word: AtomicU64,
    /// The TCB it runs on, once started (its demander's while absorbed): written by whoever
    /// starts or absorbs it, before it runs.
    tcb: AtomicPtr<Tcb>,
    /// Set (under `ctl`) whenever `suspended` or `terminate` is set, so that a checkpoint
    /// with nothing to do costs one load; cleared by a checkpoint that finds neither.
    attention: AtomicBool,
    /// Set while the thread waits on its processor's ring as an owned entry (it yielded
    /// there as a thread that processor owns: its word still says running, see
    /// [`Own`]); written by that processor's kernel thread alone, read by others only to
    /// report the thread as ready.
    own_ready: AtomicBool,
    /// Everything that changes.
    pub(crate) ctl: SpinLock<Ctl>,
}

/// A thread's changing state beside its word, under `Core::ctl`.
pub(crate) struct Ctl {
    /// It must end at its next checkpoint.
    terminate: bool,
    /// Threads waiting for it to be determined.
    waiters: WaitList,
    /// Signals pushed onto it, run in its context before it next runs its own code
    /// (`crate::exception`); boxed so that a thread never signalled pays one word.
    #[allow(clippy::box_collection)] // one word in every thread object, not three
    signals: Option<Box<Vec<Signal>>>,
    /// A signal's continuation is on its saved context (`arch::push_signal_frame`).
    signal_frame: bool,
}

/// A signal's handler.
pub(crate) type Signal = Box<dyn FnOnce() + Send>;

/// A thread object with its thunk and value. `repr(C)` so that [`Head`] is a prefix of it
/// whatever `F` is.
#[repr(C)]
struct Inner<T, F> {
    core: Core,
    /// Written once, by whoever runs the thunk, before the state becomes determined.
    value: UnsafeCell<Option<T>>,
    /// Taken once, by whoever runs it.
    thunk: UnsafeCell<Option<F>>,
}

/// The part of [`Inner`] that a handle, which does not know `F`, reads.
#[repr(C)]
struct Head<T> {
    core: Core,
    value: UnsafeCell<Option<T>>,
}

/// Runs the thunk of an `Inner<T, F>` and stores its value.
///
/// # Safety
///
/// `core` is the `core` of a live `Inner<T, F>` whose thunk has not been taken, and the
/// caller is the one thread that runs it (it won the Start or Absorb transition).
unsafe fn run_inner<T, F: FnOnce() -> T>(core: *const Core) {
    let inner = core.cast::<Inner<T, F>>();
    // SAFETY: the caller's promise: only we touch the thunk and the value now.
    let thunk = unsafe { (*(*inner).thunk.get()).take() };
    if let Some(f) = thunk {
        let v = f();
        // SAFETY: as above; readers read the value only after the state is determined,
        // which `complete` publishes under the lock after this write.
        unsafe { *(*inner).value.get() = Some(v) };
    }
}

/// Frees an `Inner<T, F>`.
///
/// # Safety
///
/// The last reference to a thread made by [`new_thread`] with these `T`, `F`.
unsafe fn drop_inner<T, F>(core: *const Core) {
    // SAFETY: it was allocated as a `Box<Inner<T, F>>`.
    drop(unsafe { Box::from_raw(core.cast::<Inner<T, F>>().cast_mut()) });
}

/// An owned, counted reference to a thread of any type: what ready queues, TCBs and
/// policy managers hold.
pub struct ThreadRef(NonNull<Core>);

// SAFETY: the thread object is shared between virtual processors by design: its mutable
// parts are behind its lock, the thunk and value are touched as `run_inner` describes,
// and `new_thread` requires `T: Send + Sync` and `F: Send`.
unsafe impl Send for ThreadRef {}
// SAFETY: as above.
unsafe impl Sync for ThreadRef {}

impl ThreadRef {
    /// The thread object.
    pub(crate) fn core(&self) -> &Core {
        // SAFETY: we hold a reference, so the object is alive.
        unsafe { self.0.as_ref() }
    }

    /// Gives up this reference as a raw pointer (for a TCB's `thread`).
    fn into_raw(self) -> *const Core {
        let p = self.0.as_ptr().cast_const();
        core::mem::forget(self);
        p
    }

    /// Takes back a reference given up by [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    ///
    /// `p` came from `into_raw` and that reference is not used elsewhere.
    unsafe fn from_raw(p: *const Core) -> ThreadRef {
        // SAFETY: `into_raw` gave a non-null pointer.
        ThreadRef(unsafe { NonNull::new_unchecked(p.cast_mut()) })
    }

    /// A new reference to the thread at `p`.
    ///
    /// # Safety
    ///
    /// `p` points to a live thread (someone holds a reference for the duration).
    pub(crate) unsafe fn clone_raw(p: *const Core) -> ThreadRef {
        // SAFETY: the caller's promise.
        unsafe { (*p).refs.fetch_add(1, Relaxed) };
        // SAFETY: the caller's promise: non-null.
        ThreadRef(unsafe { NonNull::new_unchecked(p.cast_mut()) })
    }

    /// Drops this reference when another is known to be held for as long as the caller
    /// uses the thread (its TCB's, or an absorbing frame's): one decrement, no test for
    /// the last reference.
    #[inline]
    fn release_held(self) {
        self.core().refs.fetch_sub(1, Release);
        core::mem::forget(self);
    }

    /// Whether this is the only reference to the thread.
    pub(crate) fn unique(&self) -> bool {
        self.core().refs.load(Acquire) == 1
    }

    /// Whether two references name the same thread.
    pub(crate) fn same(&self, other: *const Core) -> bool {
        ptr::eq(self.0.as_ptr(), other)
    }
}

impl Clone for ThreadRef {
    fn clone(&self) -> ThreadRef {
        self.core().refs.fetch_add(1, Relaxed);
        ThreadRef(self.0)
    }
}

impl Drop for ThreadRef {
    fn drop(&mut self) {
        if self.core().refs.fetch_sub(1, Release) == 1 {
            fence(Acquire);
            let vtable = self.core().vtable;
            // SAFETY: that was the last reference.
            unsafe { (vtable.drop)(self.0.as_ptr()) };
        }
    }
}

/// A ready-queue entry: a thread and the ticket it was queued with. An entry whose ticket
/// is not the thread's current one (the thread was absorbed, terminated or suspended, and
/// perhaps queued again since) is stale and dropped when popped.
pub struct Runnable {
    /// The thread.
    t: ThreadRef,
    /// `Ctl::ticket` when it was queued.
    ticket: u32,
}

/// An entry of a FIFO or LIFO owner's ring (`VpLocal::own`): either a ready-queue entry
/// like any other ([`Runnable`]: a counted reference and a ticket, claimed by
/// compare-and-swap) or, tagged by the low bit, the TCB of a started thread that yielded
/// on this processor as one it *owns*: its state word still says running here (nothing
/// was written to it), it holds no reference (its TCB's keeps it alive) and no ticket
/// (no other processor can claim it: the ring is this processor's alone, and a running
/// word offers no claim). Such an entry is resumed with plain loads and stores; what
/// others ask of the thread meanwhile (a suspension, a termination, a signal) goes to its
/// word and its attention flag as for a running thread, and it attends to them as it
/// resumes, before its own code (`docs/sting.md`, "The owned yield").
pub(crate) struct Own {
    /// A [`Runnable`]'s thread (its reference given up, `ThreadRef::into_raw`), or a TCB's
    /// address with the low bit set.
    p: usize,
    /// The [`Runnable`]'s ticket; left unwritten for an owned TCB (so that the owned
    /// yield stores one word), and read only when `p` is untagged.
    ticket: core::mem::MaybeUninit<u32>,
}

/// What an [`Own`] entry is, taken out of the ring.
enum Taken {
    /// A ready-queue entry, to be claimed.
    Entry(Runnable),
    /// An owned TCB, to be resumed as it is.
    Owned(*mut Tcb),
}

impl Own {
    /// A ready-queue entry for the ring.
    #[inline(always)]
    fn entry(r: Runnable) -> Own {
        Own {
            p: r.t.into_raw() as usize,
            ticket: core::mem::MaybeUninit::new(r.ticket),
        }
    }

    /// The owned entry of TCB `tcb`.
    #[inline(always)]
    fn owned(tcb: *mut Tcb) -> Own {
        Own {
            p: tcb as usize | 1,
            ticket: core::mem::MaybeUninit::uninit(),
        }
    }

    /// The TCB if this is an owned entry.
    #[inline(always)]
    fn owned_tcb(&self) -> Option<*mut Tcb> {
        (self.p & 1 != 0).then_some((self.p & !1) as *mut Tcb)
    }

    /// The entry's content, given up by the ring.
    #[inline(always)]
    fn take(self) -> Taken {
        let this = core::mem::ManuallyDrop::new(self);
        if this.p & 1 != 0 {
            return Taken::Owned((this.p & !1) as *mut Tcb);
        }
        Taken::Entry(Runnable {
            // SAFETY: an untagged entry holds a reference given up by `into_raw`.
            t: unsafe { ThreadRef::from_raw(this.p as *const Core) },
            // SAFETY: an untagged entry's ticket was written (`entry`).
            ticket: unsafe { this.ticket.assume_init() },
        })
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        if self.p & 1 == 0 {
            // SAFETY: an untagged entry holds a reference given up by `into_raw`.
            drop(unsafe { ThreadRef::from_raw(self.p as *const Core) });
        }
    }
}

impl Core {
    /// The state word now.
    #[inline]
    pub(crate) fn word(&self) -> Word {
        Word(self.word.load(Acquire))
    }

    /// Applies a transition to the state word (`word::update`): the old word, or the
    /// transition's refusal.
    #[inline]
    fn update<E>(&self, f: impl FnMut(Word) -> Result<Word, E>) -> Result<Word, E> {
        word::update(&self.word, f)
    }

    /// Applies a transition that always applies; gives the old word.
    #[inline]
    fn apply(&self, mut f: impl FnMut(Word) -> Word) -> Word {
        match word::update(&self.word, |w| Ok::<_, core::convert::Infallible>(f(w))) {
            Ok(old) => old,
            Err(never) => match never {},
        }
    }

    /// Marks the thread queued with a new entry, whatever else its word says; gives the
    /// entry's ticket.
    #[inline]
    fn enqueue(&self) -> u32 {
        self.apply(Word::enqueue).enqueue().ticket()
    }
}

/// Makes a thread object running `f`, in `state`, placed on virtual processor `vp`.
/// Returns the reference for the handle.
fn new_thread<T, F>(f: F, state: State, vp: usize, group: Option<Arc<GroupInner>>) -> ThreadRef
where
    T: Send + Sync + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    /// The operations of `Inner<T, F>`.
    struct Ops<T, F>(PhantomData<(T, F)>);
    impl<T, F: FnOnce() -> T> Ops<T, F> {
        const VTABLE: VTable = VTable {
            run: run_inner::<T, F>,
            drop: drop_inner::<T, F>,
        };
    }
    let rt = runtime();
    let inner = Box::new(Inner::<T, F> {
        core: Core {
            refs: AtomicUsize::new(1),
            vtable: &Ops::<T, F>::VTABLE,
            id: rt.next_id.fetch_add(1, Relaxed),
            group,
            word: AtomicU64::new(Word::new(state, vp).0),
            tcb: AtomicPtr::new(ptr::null_mut()),
            attention: AtomicBool::new(false),
            own_ready: AtomicBool::new(false),
            ctl: SpinLock::new(Ctl {
                terminate: false,
                waiters: WaitList::new(),
                signals: None,
                signal_frame: false,
            }),
        },
        value: UnsafeCell::new(None),
        thunk: UnsafeCell::new(Some(f)),
    });
    // SAFETY: `Box::into_raw` is non-null; `core` is the first field (`repr(C)`).
    ThreadRef(unsafe { NonNull::new_unchecked(Box::into_raw(inner).cast::<Core>()) })
}

/// The value of a determined thread of value type `T`.
///
/// # Safety
///
/// `core` is a live thread made with value type `T`, already determined.
pub(crate) unsafe fn value_of<T>(core: &Core) -> Option<&T> {
    let head = ptr::from_ref(core).cast::<Head<T>>();
    // SAFETY: `Head<T>` is a prefix of the thread's `Inner<T, F>`; the value was written
    // before the thread became determined (a release compare-and-swap of its word, seen by
    // the caller's acquire load of it, or through its waiter's wake-up) and is never
    // written again.
    unsafe { (*(*head).value.get()).as_ref() }
}

/// Takes the value out of a determined thread of value type `T`.
///
/// # Safety
///
/// As [`value_of`], and no other reference to the thread exists.
pub(crate) unsafe fn take_value<T>(core: &Core) -> Option<T> {
    let head = ptr::from_ref(core).cast::<Head<T>>();
    // SAFETY: as in `value_of`; we hold the only reference, so nothing else reads it.
    unsafe { (*(*head).value.get()).take() }
}

// ---------------------------------------------------------------------------------------
// Wait lists

/// A thread waiting in a [`WaitList`]: lives on the waiter's stack until `done`.
pub(crate) struct Waiter {
    /// The waiting thread.
    thread: *const Core,
    /// Set (release) by the waker; the waiter leaves only once it sees it (acquire).
    done: AtomicBool,
    /// The next waiter in the list.
    next: Cell<*const Waiter>,
}

impl Waiter {
    /// A node for the calling thread.
    pub(crate) fn current() -> Waiter {
        Waiter {
            thread: current_tcb_thread(),
            done: AtomicBool::new(false),
            next: Cell::new(ptr::null()),
        }
    }

    /// Parks until a waker has taken this node off its list. (Out of line: inlined, the
    /// switch in `park` makes its callers, `demand` among them, save every callee-saved
    /// register on paths that never wait, such as an absorption.)
    #[inline(never)]
    pub(crate) fn wait(&self) {
        while !self.done.load(Acquire) {
            park();
        }
    }
}

/// A FIFO list of [`Waiter`]s, guarded by the lock of whatever holds it.
pub(crate) struct WaitList {
    /// The oldest waiter.
    head: *const Waiter,
    /// The newest waiter.
    tail: *const Waiter,
}

// SAFETY: the nodes are touched only under the lock of the list's owner, and each node
// stays alive until a waker sets its `done` after unlinking it.
unsafe impl Send for WaitList {}

impl WaitList {
    /// An empty list.
    pub(crate) const fn new() -> WaitList {
        WaitList {
            head: ptr::null(),
            tail: ptr::null(),
        }
    }

    /// Appends `w`, which must stay alive and unmoved until it is woken.
    pub(crate) fn push(&mut self, w: &Waiter) {
        w.next.set(ptr::null());
        if self.tail.is_null() {
            self.head = w;
        } else {
            // SAFETY: `tail` is a waiting node (alive until woken, and it is not woken
            // while on the list).
            unsafe { (*self.tail).next.set(w) };
        }
        self.tail = w;
    }

    /// Unlinks the oldest waiter; wake it with [`wake`] after dropping the lock.
    pub(crate) fn pop(&mut self) -> Option<Woken> {
        if self.head.is_null() {
            return None;
        }
        let w = self.head;
        // SAFETY: a node on the list is alive.
        self.head = unsafe { (*w).next.get() };
        if self.head.is_null() {
            self.tail = ptr::null();
        }
        Some(Woken(w))
    }

    /// Unlinks every waiter.
    pub(crate) fn take(&mut self) -> WaitList {
        core::mem::replace(self, WaitList::new())
    }

    /// Wakes every waiter of a list already unlinked from its owner.
    pub(crate) fn wake_all(mut self) {
        while let Some(w) = self.pop() {
            w.wake();
        }
    }
}

/// A waiter unlinked from its list, to be woken.
pub(crate) struct Woken(*const Waiter);

impl Woken {
    /// Marks the waiter done and unparks its thread.
    pub(crate) fn wake(self) {
        // SAFETY: the node is alive until `done` is set below, and its thread is alive
        // while it waits; we take our own reference to the thread first, because the node
        // (and the waiter's interest in it) may vanish as soon as `done` is set.
        let t = unsafe { ThreadRef::clone_raw((*self.0).thread) };
        // SAFETY: as above.
        unsafe { (*self.0).done.store(true, Release) };
        unpark(&t);
    }
}

// ---------------------------------------------------------------------------------------
// Virtual processors

/// Counters of one virtual processor (written by it alone, read by anyone).
#[derive(Default)]
struct Counters {
    created: AtomicU64,
    started: AtomicU64,
    finished: AtomicU64,
    absorbed: AtomicU64,
    tcbs_created: AtomicU64,
    reused_local: AtomicU64,
    reused_global: AtomicU64,
    handovers: AtomicU64,
    switches: AtomicU64,
    stolen: AtomicU64,
    migrations: AtomicU64,
    spilled: AtomicU64,
    refills: AtomicU64,
    kernel_blocks: AtomicU64,
    kernel_unblocks: AtomicU64,
    checkpoints: AtomicU64,
    declined: AtomicU64,
    area_resets: AtomicU64,
    area_reclaimed: AtomicU64,
    area_chunks: AtomicU64,
    exceptions: AtomicU64,
    signals: AtomicU64,
    interrupts: AtomicU64,
}

/// Adds one to a counter only its virtual processor writes (a plain load and store).
#[inline]
fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
}

/// What a virtual processor's kernel thread alone touches.
struct VpLocal {
    /// The scheduler loop's saved stack pointer.
    sched_sp: usize,
    /// The TCB switched away from, to release after the switch.
    prev: *mut Tcb,
    /// Whether `prev` is finished (back to the pool) rather than just switched away from.
    recycle: bool,
    /// Free TCBs, LIFO.
    pool: pool::Local<TcbPtr>,
    /// TCBs whose kernel call completed, oldest first (linked through `Tcb::link`): each
    /// resumes, from a frame the Unblock laid on its stack, before any queued thread.
    kfirst: *mut Tcb,
    /// The newest of them.
    klast: *mut Tcb,
    /// The ready queue of a processor whose built-in policy keeps its threads (`Vp::fast`
    /// FIFO or LIFO): the threads it queued itself, and those others queued (moved here
    /// from `Vp::ready`), in the order they were queued; touched without a lock.
    own: Ring<Own>,
}

/// Which queue a virtual processor's own kernel thread uses for the threads it queues
/// itself (the built-in policies' fast path; `docs/sting.md`, "Ready queues").
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fast {
    /// The built-in FIFO policy: `VpLocal::own`, oldest first.
    Fifo,
    /// The built-in LIFO policy: `VpLocal::own`, newest first.
    Lifo,
    /// The built-in work-stealing policy: `Vp::deque`, newest first for the owner,
    /// oldest first for thieves.
    Steal,
    /// A policy of the program's own: every thread goes through it, on `Vp::ready`.
    Shared,
}

impl Fast {
    /// The fast path of a policy.
    fn of(policy: &Queue<Runnable>) -> Fast {
        match policy {
            Queue::Fifo(_) => Fast::Fifo,
            Queue::Lifo(_) => Fast::Lifo,
            Queue::WorkStealing(_) => Fast::Steal,
            Queue::Custom(_) => Fast::Shared,
        }
    }
}

/// Added to `Vp::shared` on a processor whose owner does not queue on its ring.
const NOT_OWN: usize = 1 << (usize::BITS - 1);

/// A virtual processor.
pub(crate) struct Vp {
    /// Its index in the runtime.
    pub(crate) id: usize,
    /// `Word::ready_on(id)`: what a thread's word is, masked, when it has a live entry
    /// here that this processor can resume at once (`Word::claim_ready_on`).
    ready_on: u64,
    /// Its policy manager over its shared ready queue: every thread queued here by
    /// another virtual processor, and, unless it `keeps` its threads, every thread queued
    /// here at all (thieves take from it).
    ready: SpinLock<Queue<Runnable>>,
    /// Entries in `ready`, written under its lock and read without it (a hint), plus
    /// [`NOT_OWN`] when the owner does not queue on the ring (`fast` neither FIFO nor
    /// LIFO): zero exactly when the owner's ring is the whole ready queue, so the owner's
    /// push, pop and yield test one word for both the policy and the shared queue.
    shared: AtomicUsize,
    /// [`NOT_OWN`] if `fast` is neither FIFO nor LIFO, else 0: what `shared` holds with
    /// the shared queue empty.
    shared_base: usize,
    /// Where its own kernel thread queues threads: with no lock on `VpLocal::own` for the
    /// built-in FIFO and LIFO policies, which keep their threads from thieves, on `deque`
    /// for the built-in work-stealing policy, on `ready` for a policy of the program's own.
    fast: Fast,
    /// The work-stealing policy's deque (`Fast::Steal`): the owner pushes and pops its
    /// newest entries with no lock, thieves steal the oldest. What does not fit goes on
    /// `ready`.
    deque: ChaseLev,
    /// Whether its policy steals when idle (fixed when it starts).
    steals: bool,
    /// 1 while it is idle (parked or about to park); its kernel thread waits on it.
    idle: AtomicU32,
    /// Its kernel thread's own state.
    local: UnsafeCell<VpLocal>,
    /// Its counters.
    counters: Counters,
    /// Whether it runs with the kernel's Block and Unblock upcalls.
    pub(crate) upcalls: bool,
    /// Unblock events queued in the kernel (the mailbox the kernel writes).
    pub(crate) kpending: AtomicU64,
    #[cfg_attr(not(baton), allow(dead_code))]
    /// The kernel's id of this virtual processor (0 until made).
    pub(crate) kvp: AtomicU64,
    #[cfg_attr(not(baton), allow(dead_code))]
    /// The base of its upcall stack (0 until made).
    pub(crate) upcall_stack: AtomicUsize,
    #[cfg_attr(not(baton), allow(dead_code))]
    /// How many spare kernel threads it asks for.
    pub(crate) spares: u64,
    /// Its scheduler's stack (`[lo, hi)`; both 0 for the first processor's, which is the
    /// program's initial stack).
    pub(crate) sched_stack: (AtomicUsize, AtomicUsize),
    #[cfg_attr(not(baton), allow(dead_code))]
    /// The preemption quantum it asks the kernel for (0: no Checkpoint upcalls).
    pub(crate) quantum_ns: u64,
    /// The TCB its kernel thread runs on (null in its scheduler or an upcall): written by
    /// that kernel thread alone when it switches, read by anyone to learn, with no access
    /// to memory it may not own, whether the calling code runs on this processor
    /// ([`unpark`]).
    on: AtomicPtr<Tcb>,
}

// SAFETY: `local` is touched only by the virtual processor's own kernel thread (the
// module's invariant); everything else is atomics or behind locks.
unsafe impl Sync for Vp {}
// SAFETY: as above.
unsafe impl Send for Vp {}

/// What a virtual processor runs next.
enum Next {
    /// A scheduled thread: give it a TCB and start it.
    Start(ThreadRef),
    /// A ready thread: resume its TCB.
    Resume(*mut Tcb),
    /// An owned entry's TCB ([`Own`]): it last ran here and its `running` flag is still
    /// set (it was never claimable elsewhere); resume it as it is.
    Owned(*mut Tcb),
}

/// The TCB of `t`, just claimed to resume, with the entry's reference `t` given up: a
/// ready thread is kept alive by its TCB (or, absorbed, by the frame that absorbed it,
/// suspended on a stack of its own), and, running on this processor from the claim on,
/// cannot end before it is resumed.
#[inline(always)]
fn resume_of(t: ThreadRef) -> *mut Tcb {
    let tcb = t.core().tcb.load(Relaxed);
    t.release_held();
    tcb
}

impl Vp {
    /// This virtual processor's local state.
    ///
    /// # Safety
    ///
    /// Called on this virtual processor's kernel thread, with no other reference from this
    /// function alive.
    #[allow(clippy::mut_from_ref)] // the module's invariant: one kernel thread uses it
    unsafe fn local(&self) -> &mut VpLocal {
        // SAFETY: the caller's promise.
        unsafe { &mut *self.local.get() }
    }

    /// Puts `t` (already marked queued) on this virtual processor's shared ready queue and
    /// wakes the processor, or an idle thief, if it sleeps. From anywhere.
    pub(crate) fn push(&self, t: ThreadRef, ticket: u32) {
        {
            let mut q = self.ready.lock();
            q.enqueue(Runnable { t, ticket });
            self.shared.store(q.len() | self.shared_base, Relaxed);
        }
        fence(SeqCst);
        if self.idle.load(Relaxed) != 0 {
            self.idle.store(0, Relaxed);
            platform::unpark(&self.idle);
        } else {
            let rt = runtime();
            if rt.idle_thieves.load(Relaxed) != 0 {
                rt.wake_thief();
            }
        }
    }

    /// Puts `t` (already marked queued) on this virtual processor's ready queue, from its
    /// own kernel thread (which is running, so wakes no one): with no lock if its policy
    /// keeps its threads.
    #[inline(always)]
    fn push_own(&self, t: ThreadRef, ticket: u32) {
        // Zero: FIFO or LIFO, with nothing on the shared queue. While others' entries
        // wait on the shared queue, the owner's go after them there, so that the order of
        // queueing is kept.
        if self.shared.load(Relaxed) == 0 {
            // SAFETY: the caller runs on this virtual processor's kernel thread.
            let own = &mut unsafe { self.local() }.own;
            if let Err(r) = own.push(Own::entry(Runnable { t, ticket })) {
                if let Taken::Entry(r) = r.take() {
                    self.push(r.t, r.ticket);
                }
            }
        } else if self.fast == Fast::Steal {
            self.push_deque(t, ticket);
        } else {
            self.push(t, ticket);
        }
    }

    /// [`push_own`](Self::push_own) for the work-stealing policy: onto the deque, or the
    /// shared queue if it is full; an idle thief is woken.
    #[inline(never)]
    fn push_deque(&self, t: ThreadRef, ticket: u32) {
        if let Err((p, ticket)) = self.deque.push((t.into_raw() as usize, ticket as usize)) {
            // SAFETY: `p` came from `into_raw` just above.
            let t = unsafe { ThreadRef::from_raw(p as *const Core) };
            self.push(t, ticket as u32);
            return;
        }
        // Work for an idle thief (as `push` does).
        fence(SeqCst);
        let rt = runtime();
        if rt.idle_thieves.load(Relaxed) != 0 {
            rt.wake_thief();
        }
    }

    /// Puts `t` (already marked queued) on this virtual processor's ready queue, from a
    /// thread running on `from`.
    #[inline]
    fn push_from(&self, from: &Vp, t: ThreadRef, ticket: u32) {
        if ptr::eq(self, from) {
            self.push_own(t, ticket);
        } else {
            self.push(t, ticket);
        }
    }

    /// The next entry of the policy's queue, on this virtual processor's kernel thread:
    /// from the owner's queue (after moving there what others queued) if the policy keeps
    /// its threads, else from the shared queue.
    #[inline(always)]
    fn pop_queue(&self) -> Option<Taken> {
        match self.fast {
            Fast::Lifo => {
                // Every entry on the shared queue is newer than every entry on the ring
                // (while the shared queue holds any, the owner queues there too): the
                // shared queue's newest first, then the ring's.
                if self.shared.load(Relaxed) != 0 {
                    if let Some(r) = self.pop_shared() {
                        return Some(Taken::Entry(r));
                    }
                }
                // SAFETY: the caller runs on this virtual processor's kernel thread.
                unsafe { self.local() }.own.pop_newest().map(Own::take)
            }
            Fast::Fifo => {
                // SAFETY: the caller runs on this virtual processor's kernel thread.
                let local = unsafe { self.local() };
                // Every entry on the shared queue is newer than every entry on the ring:
                // they go after it, as many as fit, in the order they came.
                if self.shared.load(Relaxed) != 0 {
                    self.take_shared(&mut local.own);
                }
                local.own.pop_oldest().map(Own::take)
            }
            Fast::Steal => match self.deque.pop() {
                Some((p, ticket)) => Some(Taken::Entry(Runnable {
                    // SAFETY: the deque's entries are references given up by `into_raw`.
                    t: unsafe { ThreadRef::from_raw(p as *const Core) },
                    ticket: ticket as u32,
                })),
                None if self.shared.load(Relaxed) & !NOT_OWN != 0 => {
                    self.pop_shared().map(Taken::Entry)
                }
                None => None,
            },
            Fast::Shared => self.pop_shared().map(Taken::Entry),
        }
    }

    /// The next entry of the shared queue, under its lock.
    fn pop_shared(&self) -> Option<Runnable> {
        let mut q = self.ready.lock();
        let r = q.next();
        self.shared.store(q.len() | self.shared_base, Relaxed);
        r
    }

    /// Moves what other virtual processors queued here onto the owner's queue `own`, in the
    /// order they were queued, as many as it has room for.
    #[cold]
    #[inline(never)]
    fn take_shared(&self, own: &mut Ring<Own>) {
        let mut q = self.ready.lock();
        while own.room() > 0 {
            let Some(r) = q.take_oldest() else {
                break;
            };
            if let Err(r) = own.push(Own::entry(r)) {
                if let Taken::Entry(r) = r.take() {
                    q.enqueue(r);
                }
                break;
            }
        }
        self.shared.store(q.len() | self.shared_base, Relaxed);
    }

    /// The next thread to run: a thread whose kernel call completed, else from the
    /// policy, else stolen if the policy steals.
    #[inline(always)]
    fn next_runnable(&self) -> Option<Next> {
        if self.upcalls {
            if let Some(tcb) = self.kernel_next() {
                return Some(Next::Resume(tcb));
            }
        }
        while let Some(r) = self.pop_queue() {
            match r {
                Taken::Owned(tcb) => return Some(Next::Owned(tcb)),
                Taken::Entry(r) => {
                    if let Some(next) = self.claim(r) {
                        return Some(next);
                    }
                }
            }
        }
        self.next_stolen()
    }

    /// [`next_runnable`](Self::next_runnable) when the queue is empty: a thread stolen, if
    /// the policy steals.
    #[cold]
    #[inline(never)]
    fn next_stolen(&self) -> Option<Next> {
        loop {
            let t = self.steal()?;
            if let Some(next) = self.claim(t) {
                return Some(next);
            }
        }
    }

    /// A thread another virtual processor's policy gives up, if this one's steals.
    fn steal(&self) -> Option<Runnable> {
        if !self.steals {
            return None;
        }
        let vps = &runtime().vps;
        let n = vps.len();
        for k in 1..n {
            let victim = vps.get((self.id + k) % n)?;
            if victim.fast == Fast::Steal {
                // The victim's deque first: its oldest entry.
                let mut tries = 0;
                loop {
                    match victim.deque.steal() {
                        Steal::Took((p, ticket)) => {
                            bump(&self.counters.stolen);
                            return Some(Runnable {
                                // SAFETY: the deque's entries are references given up by
                                // `into_raw`; the compare-and-swap made this one ours.
                                t: unsafe { ThreadRef::from_raw(p as *const Core) },
                                ticket: ticket as u32,
                            });
                        }
                        Steal::Lost if tries < 4 => tries += 1,
                        _ => break,
                    }
                }
            }
            let given = {
                let mut q = victim.ready.lock();
                let t = q.give();
                victim.shared.store(q.len() | victim.shared_base, Relaxed);
                t
            };
            if let Some(t) = given {
                bump(&self.counters.stolen);
                return Some(t);
            }
        }
        None
    }

    /// Takes a thread popped from a ready queue for this virtual processor, or drops a
    /// stale entry.
    #[inline]
    fn claim(&self, r: Runnable) -> Option<Next> {
        let Runnable { t, ticket } = r;
        match word::claim(&t.core().word, ticket, self.id, core::hint::spin_loop) {
            Claim::Start => Some(Next::Start(t)),
            Claim::Resume => Some(Next::Resume(resume_of(t))),
            Claim::Stale => None,
        }
    }

    /// The yield of the running thread `core`, on TCB `tcb`, when its processor's policy
    /// is the built-in FIFO or LIFO and every ready thread is on the owner's ring (nothing
    /// on the shared queue, no kernel call completed): the owned yield (`docs/sting.md`,
    /// "The owned yield"). The yielder, running here with no live entry, goes on the ring
    /// as an owned entry ([`Own`]: its TCB, no reference, no ticket, its word left as it
    /// is, running here), and the entry that the policy would take next is taken where it
    /// lies in the same step (`Ring::rotate_oldest` for FIFO, `Ring::replace_newest` for
    /// LIFO, one slot rewritten): an owned entry is resumed as it is, any other claimed
    /// by compare-and-swap. The order of the queue is the one a pop then a push leaves.
    /// `false` (nothing done) when it does not apply, or the next entry is stale: the
    /// caller takes the general path, which drops it. `true` once the caller has been
    /// switched away from and resumed (by this processor: an owned entry is resumed by its
    /// own processor alone); the caller then attends to what was asked of it meanwhile.
    #[inline(always)]
    fn yield_own(&self, tcb: *mut Tcb, core: &Core) -> bool {
        let Some(local) = self.own_ring() else {
            return false;
        };
        // One test of the policy, each way specialised.
        if self.fast == Fast::Lifo {
            self.yield_in::<true>(local, tcb, core)
        } else {
            self.yield_in::<false>(local, tcb, core)
        }
    }

    /// This processor's local state, when its owner's ring is the whole ready queue (FIFO
    /// or LIFO, nothing on the shared queue) and no kernel event waits (no Unblock to
    /// run first): the condition of both yields that rotate the ring.
    ///
    /// Called on this virtual processor's kernel thread.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)] // the module's invariant: one kernel thread uses it
    fn own_ring(&self) -> Option<&mut VpLocal> {
        // Zero: FIFO or LIFO, with nothing on the shared queue.
        if self.shared.load(Relaxed) != 0 {
            return None;
        }
        // SAFETY: the caller runs on this virtual processor's kernel thread.
        let local = unsafe { self.local() };
        if self.upcalls && (!local.kfirst.is_null() || self.kpending.load(Relaxed) != 0) {
            return None;
        }
        Some(local)
    }

    /// The case of [`yield_own`](Self::yield_own) that [`yield_now`] inlines into its
    /// caller: the next entry is an owned one (a thread that yielded here), so the yield is
    /// a rotation of the ring and a switch, with no claim. `false` (nothing done) in every
    /// other case, which [`yield_general`] takes. `true` once the caller has been
    /// switched away from and resumed, and has attended to what was asked of it
    /// meanwhile.
    #[inline(always)]
    fn yield_owned(&self, tcb: *mut Tcb, core: &Core) -> bool {
        let Some(local) = self.own_ring() else {
            return false;
        };
        // One test of the policy, each way specialised.
        if self.fast == Fast::Lifo {
            self.owned_in::<true>(local, tcb, core)
        } else {
            self.owned_in::<false>(local, tcb, core)
        }
    }

    /// [`yield_owned`](Self::yield_owned) on a LIFO (`LIFO`) or FIFO ring.
    #[inline(always)]
    fn owned_in<const LIFO: bool>(&self, local: &mut VpLocal, tcb: *mut Tcb, core: &Core) -> bool {
        let lifo = LIFO;
        let (h, t) = local.own.ends();
        if h == t {
            return false;
        }
        let at = if lifo { t.wrapping_sub(1) } else { h };
        // SAFETY: `at` is in `h..t`.
        let p = unsafe { local.own.at(at) }.p;
        // An owned entry, and the yielder running here with no live entry (as in
        // `yield_in`).
        if p & 1 == 0 || !Word(core.word.load(Relaxed)).running_unqueued() {
            return false;
        }
        let me = Own::owned(tcb);
        // SAFETY: `(h, t)` are the ring's ends, read above, and `h != t`; nothing has
        // touched the ring since (only this kernel thread does).
        let out = unsafe {
            if lifo {
                local.own.replace_newest_at(t, me)
            } else {
                local.own.rotate_oldest_at(h, t, me)
            }
        };
        core::mem::forget(out);
        core.own_ready.store(true, Relaxed);
        // SAFETY: our TCB, an owned entry on this processor's ring now, which only this
        // kernel thread reads; `next` an owned entry taken off it.
        unsafe { switch_owned(self, tcb, (p & !1) as *mut Tcb) };
        // Resumed from the owned entry (by this processor): no longer on its ring, and
        // what was asked of it while it waited there is done now, before its own code.
        // SAFETY: the running thread is alive (read again from the TCB, whose register
        // the switch keeps).
        let core = unsafe { &*(*tcb).thread.get() };
        core.own_ready.store(false, Relaxed);
        if core.attention.load(Relaxed) {
            attend_resumed(self, tcb);
        }
        true
    }

    /// [`yield_own`](Self::yield_own) on a LIFO (`LIFO`) or FIFO ring.
    #[inline(always)]
    fn yield_in<const LIFO: bool>(&self, local: &mut VpLocal, tcb: *mut Tcb, core: &Core) -> bool {
        let (h, t) = local.own.ends();
        if h == t {
            return false;
        }
        let at = if LIFO { t.wrapping_sub(1) } else { h };
        // SAFETY: `at` is in `h..t`.
        let entry = unsafe { local.own.at(at) };
        let p = entry.p;
        // The yielder must be running here with no live entry (not absorbed): its word
        // then stays as it is. (Only this thread changes those fields of a running word,
        // so no ordering is needed.)
        if !Word(core.word.load(Relaxed)).running_unqueued() {
            return false;
        }
        let me = Own::owned(tcb);
        if p & 1 != 0 {
            // An owned entry: resumed as it is, with no claim and no reference.
            // SAFETY: `(h, t)` are the ring's ends, read above; nothing has touched the
            // ring since (only this kernel thread does), and `h != t`.
            let out = unsafe {
                if LIFO {
                    local.own.replace_newest_at(t, me)
                } else {
                    local.own.rotate_oldest_at(h, t, me)
                }
            };
            core::mem::forget(out);
            core.own_ready.store(true, Relaxed);
            let next = (p & !1) as *mut Tcb;
            // SAFETY: our TCB, an owned entry on this processor's ring now, which only
            // this kernel thread reads; `next` an owned entry taken off it.
            unsafe { switch_owned(self, tcb, next) };
            return true;
        }
        let next = p as *const Core;
        // SAFETY: an untagged entry's ticket was written (`Own::entry`).
        let ticket = unsafe { entry.ticket.assume_init() };
        // SAFETY: the ring's entry holds a reference to `next`.
        let cell = unsafe { &(*next).word };
        // A ready thread's live entry on this processor (the common case) is claimed with
        // one comparison and one compare-and-swap; anything else by the general claim.
        let cur = cell.load(Acquire);
        let what = match Word(cur).claim_ready_on(ticket, self.ready_on) {
            Some(new) if cell.compare_exchange(cur, new.0, AcqRel, Acquire).is_ok() => {
                Claim::Resume
            }
            _ => word::claim(cell, ticket, self.id, core::hint::spin_loop),
        };
        if what == Claim::Stale {
            return false;
        }
        // SAFETY: as above (the claim touched the thread's word, not the ring).
        let out = unsafe {
            if LIFO {
                local.own.replace_newest_at(t, me)
            } else {
                local.own.rotate_oldest_at(h, t, me)
            }
        };
        core.own_ready.store(true, Relaxed);
        let Taken::Entry(r) = out.take() else {
            // SAFETY: the entry read above is untagged.
            unsafe { core::hint::unreachable_unchecked() }
        };
        let next = match what {
            Claim::Start => Next::Start(r.t),
            _ => Next::Resume(resume_of(r.t)),
        };
        // SAFETY: our TCB, an owned entry on this processor's ring now, which only this
        // kernel thread reads, so it is safe to leave it (and `prev` stays null: its
        // `running` flag stays set, as no other processor may take it); `next` was
        // claimed by this virtual processor above.
        unsafe { switch_to(self, (*tcb).sp.get(), ptr::null_mut(), false, Some(next)) };
        true
    }

    /// A TCB for a thread about to start: from the local pool, else the global pool,
    /// else new.
    fn take_tcb(&self) -> *mut Tcb {
        // SAFETY: we are on this virtual processor's kernel thread.
        let local = unsafe { self.local() };
        if let Some(TcbPtr(tcb)) = local.pool.take() {
            bump(&self.counters.reused_local);
            return tcb;
        }
        let rt = runtime();
        let refilled = local.pool.refill(&mut rt.global.lock());
        if let Some(TcbPtr(tcb)) = refilled {
            bump(&self.counters.refills);
            bump(&self.counters.reused_global);
            return tcb;
        }
        bump(&self.counters.tcbs_created);
        Tcb::create()
    }

    /// Puts a finished thread's TCB (no longer in use) on the local pool.
    #[inline(never)]
    fn release_tcb(&self, tcb: *mut Tcb) {
        // SAFETY: we are on this virtual processor's kernel thread.
        let local = unsafe { self.local() };
        if local.pool.put(TcbPtr(tcb)) {
            let moved = local.pool.spill(&mut runtime().global.lock());
            let c = &self.counters.spilled;
            c.store(c.load(Relaxed).wrapping_add(moved as u64), Relaxed);
        }
    }

    /// Completes a switch on this virtual processor: releases the context switched away
    /// from. Called first thing by every context that resumes after [`switch_to`].
    #[inline]
    fn finish_switch(&self) {
        // SAFETY: we are on this virtual processor's kernel thread.
        let local = unsafe { self.local() };
        let prev = local.prev;
        if prev.is_null() {
            return;
        }
        local.prev = ptr::null_mut();
        // SAFETY: `prev` is a TCB this virtual processor has just switched away from; it
        // is not running and, until its flag is cleared, no one else resumes it.
        unsafe { (*prev).running.store(false, Release) };
        if local.recycle {
            self.release_tcb(prev);
        }
    }

    /// The scheduler loop, on the virtual processor's own kernel thread, until shutdown.
    fn schedule_loop(&self) {
        let rt = runtime();
        if self.upcalls {
            crate::upcall::register(self);
        }
        while !rt.shutdown.load(Acquire) {
            match self.next_runnable() {
                Some(next) => {
                    // SAFETY: we are this virtual processor's kernel thread, in the
                    // scheduler's context (no TCB).
                    let sp = unsafe { &raw mut self.local().sched_sp };
                    // SAFETY: as above; `next` was claimed by this virtual processor.
                    unsafe { switch_to(self, sp, ptr::null_mut(), false, Some(next)) };
                }
                None => self.idle_wait(),
            }
        }
    }

    /// The oldest TCB whose kernel call completed, after taking the events the kernel
    /// queued (the mailbox says how many).
    #[cold]
    fn kernel_next(&self) -> Option<*mut Tcb> {
        if self.kpending.load(Relaxed) != 0 {
            crate::upcall::take_events(self);
        }
        // SAFETY: we are on this virtual processor's carrier.
        let local = unsafe { self.local() };
        let tcb = local.kfirst;
        if tcb.is_null() {
            return None;
        }
        // SAFETY: a listed TCB is alive and ours until resumed.
        local.kfirst = unsafe { (*tcb).link.replace(ptr::null_mut()) };
        if local.kfirst.is_null() {
            local.klast = ptr::null_mut();
        }
        Some(tcb)
    }

    /// Says that this virtual processor's kernel thread leaves the TCB it ran for its
    /// scheduler's context (an upcall about to resume the scheduler loop).
    #[cfg_attr(not(baton), allow(dead_code))]
    pub(crate) fn off(&self) {
        self.on.store(ptr::null_mut(), Relaxed);
    }

    #[cfg_attr(not(baton), allow(dead_code))]
    /// A thread of this virtual processor that blocked in the kernel (on the TCB whose
    /// stack `regs.rsp` is in) may go on with `regs` (its call's result in `rax`): a frame
    /// on its stack makes [`switch_to`] resume it with those registers, and it is listed
    /// to run before the queued threads. With `fp` (the thread blocked at a fault, not in
    /// a call: `regs` are every register and `fp` its `fxsave` image) it resumes with all
    /// of them, through the kernel's `vp_resume`.
    ///
    /// # Safety
    /// On this virtual processor's carrier; `regs` are the registers the kernel gave back
    /// for a thread that blocked here, and `fp`, if given, its readable `fxsave` image.
    pub(crate) unsafe fn kernel_unblocked(
        &self,
        regs: &crate::arch::UserRegs,
        fp: Option<*const u8>,
    ) {
        let tcb = (regs.rsp as usize & !(STACK_SIZE - 1)) as *mut Tcb;
        // SAFETY: the stack pointer of a blocked sting thread lies in its TCB block.
        if unsafe { (*tcb).magic } != MAGIC {
            not_a_sting_thread();
        }
        // SAFETY: the TCB is blocked in the kernel: nothing runs on it, and the stack
        // below its saved `rsp` is free; `fp` is readable (the caller's promise).
        unsafe {
            *(*tcb).sp.get() = match fp {
                None => crate::arch::prepare_resume(regs),
                Some(fp) => crate::arch::prepare_fault_resume(regs, fp),
            };
            (*tcb).running.store(false, Release);
        }
        bump(&self.counters.kernel_unblocks);
        // SAFETY: our carrier.
        let local = unsafe { self.local() };
        if local.klast.is_null() {
            local.kfirst = tcb;
        } else {
            // SAFETY: a listed TCB is alive.
            unsafe { (*local.klast).link.set(tcb) };
        }
        local.klast = tcb;
    }

    #[cfg_attr(not(baton), allow(dead_code))]
    /// A Checkpoint upcall: the kernel stopped this virtual processor's running thread
    /// with registers `regs` (all of them). If the thread is preemptible (in
    /// [`preemptible`], no runtime call since, and the heap lock free), it is put back on
    /// the ready queue as if it had yielded, with a frame on its stack that resumes it
    /// through `vp_resume`, and `true` is returned: the caller resumes the scheduler.
    /// Otherwise `false`: the caller resumes the thread at once.
    ///
    /// # Safety
    /// On this virtual processor's carrier, in the upcall; `regs` are the registers the
    /// kernel gave for the thread it stopped, `fp` its `fxsave` area.
    pub(crate) unsafe fn kernel_preempted(
        &self,
        regs: &crate::arch::UserRegs,
        fp: *const u8,
    ) -> bool {
        let tcb = (regs.rsp as usize & !(STACK_SIZE - 1)) as *mut Tcb;
        // SAFETY: the stopped context ran on this processor; if its stack is a TCB's, the
        // block is a live TCB (checked by the magic word; a stack elsewhere is mapped too,
        // being a stack the program ran on, but only a TCB's preempt flag is ever set).
        let armed = unsafe {
            (*tcb).magic == MAGIC && (*tcb).preempt.load(Relaxed) && ptr::eq((*tcb).vp.get(), self)
        };
        if !armed || !platform::heap_free() {
            bump(&self.counters.declined);
            return false;
        }
        // SAFETY: an armed TCB runs its own thread (absorbed code disarms it first).
        let core = unsafe { &*(*tcb).thread.get() };
        let me = {
            let c = core.ctl.lock();
            if core.word().absorbed() || core.tcb.load(Relaxed) != tcb {
                drop(c);
                bump(&self.counters.declined);
                return false;
            }
            // What `on(Preempt)` gives, or its fallback: `Ready` from every state (written
            // out, so that no build has to see through the table).
            let ticket = core.apply(Word::yielded).yielded().ticket();
            drop(c);
            // SAFETY: the thread is alive (its TCB runs it).
            (unsafe { ThreadRef::clone_raw(core) }, ticket)
        };
        // SAFETY: the thread is stopped (we are its processor, in the upcall); the stack
        // below its saved `rsp`, past the red zone, is free. It stays disarmed until its
        // resume has finished the switch.
        unsafe {
            (*tcb).preempt.store(false, Relaxed);
            *(*tcb).sp.get() = crate::arch::prepare_preempted(regs, fp);
            (*tcb).running.store(false, Release);
        }
        bump(&self.counters.checkpoints);
        self.push_own(me.0, me.1);
        true
    }

    #[cfg_attr(not(baton), allow(dead_code))]
    /// Counts a Block upcall.
    pub(crate) fn kernel_blocked(&self) {
        bump(&self.counters.kernel_blocks);
    }

    #[cfg_attr(not(baton), allow(dead_code))]
    /// The scheduler loop's saved context (valid while a thread runs).
    ///
    /// # Safety
    /// On this virtual processor's carrier.
    pub(crate) unsafe fn sched_sp(&self) -> usize {
        // SAFETY: the caller's promise.
        unsafe { self.local().sched_sp }
    }

    /// Parks until there may be work.
    fn idle_wait(&self) {
        let rt = runtime();
        if self.steals {
            rt.idle_thieves.fetch_add(1, SeqCst);
        }
        self.idle.store(1, Relaxed);
        fence(SeqCst);
        // SAFETY: our own kernel thread.
        let empty = self.ready.lock().is_empty()
            && unsafe { self.local() }.own.is_empty()
            && self.deque.is_empty();
        if empty && !rt.shutdown.load(Acquire) && !(self.steals && rt.work_elsewhere(self.id)) {
            if self.upcalls {
                crate::upcall::park(self, &self.idle, 1, IDLE_PARK_NS);
            } else {
                platform::park(&self.idle, 1, IDLE_PARK_NS);
            }
        }
        self.idle.store(0, Relaxed);
        if self.steals {
            rt.idle_thieves.fetch_sub(1, SeqCst);
        }
    }
}

/// Switches the calling context (saving its stack pointer in `*from_sp`) to `next`, or to
/// the virtual processor's scheduler loop if `None`. `prev` is the calling TCB (null for
/// the scheduler loop); `recycle` says it is finished and goes back to the pool once
/// switched away from. Returns when the calling context is resumed.
///
/// # Safety
///
/// Called on `vp`'s kernel thread; `from_sp` is the calling context's save slot; `next`
/// was claimed by `vp`. If `prev` is a TCB, its thread's state already says it is not
/// running (or it is finished).
unsafe fn switch_to(
    vp: &Vp,
    from_sp: *mut usize,
    prev: *mut Tcb,
    recycle: bool,
    next: Option<Next>,
) {
    let (to_tcb, to_sp) = match next {
        None => {
            // SAFETY: our kernel thread (the caller's promise).
            (ptr::null_mut(), unsafe { vp.local().sched_sp })
        }
        Some(Next::Resume(tcb)) if tcb == prev => {
            // Woken (or resumed) before we got away: keep running.
            return;
        }
        Some(Next::Resume(tcb)) => {
            // SAFETY: a ready thread's TCB is alive; the `running` flag tells us when the
            // virtual processor that last ran it has switched away from it. If that is
            // this one, it has (we run here, on another context, and every context
            // resumed here cleared the flag of the one switched away from first; the
            // kernel's upcalls clear it before they queue a thread), so there is nothing
            // to wait for and `vp` stays.
            let sp = unsafe {
                if !ptr::eq((*tcb).vp.get(), vp) {
                    take_from_elsewhere(vp, tcb);
                }
                // The invariant the skip rests on, checked by every host test.
                debug_assert!(
                    !(*tcb).running.load(Acquire),
                    "a TCB of this processor still running"
                );
                (*tcb).running.store(true, Relaxed);
                *(*tcb).sp.get()
            };
            (tcb, sp)
        }
        Some(Next::Owned(tcb)) => {
            // SAFETY: an owned entry's TCB is alive and last ran here (its `vp` is this
            // processor, its `running` flag still set): nothing to wait for.
            (tcb, unsafe { *(*tcb).sp.get() })
        }
        Some(Next::Start(t)) => start_context(vp, t),
    };
    // After the wait above: whoever ran on `to_tcb` before has switched away from it.
    vp.on.store(to_tcb, Relaxed);
    // SAFETY: our kernel thread.
    let local = unsafe { vp.local() };
    local.prev = prev;
    local.recycle = recycle;
    bump(&vp.counters.switches);
    // SAFETY: `from_sp` is the caller's save slot; `to_sp` is a context that is not
    // running and that we alone resume (claimed, or our own scheduler loop).
    unsafe { arch::switch(from_sp, to_sp) };
    // Resumed, perhaps on another virtual processor.
    let vp_now: &Vp = if prev.is_null() {
        vp
    } else {
        // SAFETY: whoever resumed this TCB set its `vp`.
        unsafe { &*(*prev).vp.get() }
    };
    vp_now.finish_switch();
}

/// [`switch_to`] from `from` to `to`, both owned entries of `vp` ([`Own`]): `to` last ran
/// here and its `running` flag is still set, and `from`, on the ring, keeps its own set
/// and needs no release after the switch (`prev` stays null), so the switch is the
/// published TCB, the counter and the registers. Returns when `from` is resumed, by `vp`.
///
/// # Safety
///
/// Called on `vp`'s kernel thread, running on `from`, an owned entry of its ring now;
/// `to` an owned entry taken off it.
#[inline(always)]
unsafe fn switch_owned(vp: &Vp, from: *mut Tcb, to: *mut Tcb) {
    vp.on.store(to, Relaxed);
    bump(&vp.counters.switches);
    // SAFETY: the caller's promise: `to` is not running and this processor alone resumes
    // it; `from`'s save slot is its own.
    unsafe { arch::switch((*from).sp.get(), *(*to).sp.get()) };
    // Resumed by this processor (an owned entry is resumed by no other).
    vp.finish_switch();
}

/// Makes `tcb`, which last ran on another virtual processor, `vp`'s, once that processor
/// has switched away from it (its `running` flag cleared).
///
/// # Safety
///
/// `tcb` is the live TCB of a thread `vp` has claimed.
#[cold]
#[inline(never)]
unsafe fn take_from_elsewhere(vp: &Vp, tcb: *mut Tcb) {
    // SAFETY: the caller's promise.
    unsafe {
        while (*tcb).running.load(Acquire) {
            core::hint::spin_loop();
        }
        (*tcb).vp.set(vp);
    }
}

/// A TCB for the new thread `t`, claimed by `vp`, with the frame that starts it there;
/// returns the stack pointer to switch to.
#[inline(never)]
fn start_context(vp: &Vp, t: ThreadRef) -> (*mut Tcb, usize) {
    let tcb = vp.take_tcb();
    bump(&vp.counters.started);
    t.core().tcb.store(tcb, Relaxed);
    // SAFETY: a pooled or new TCB is ours alone; its stack is unused, so the first frame
    // can go at its top.
    let sp = unsafe {
        (*tcb).running.store(true, Relaxed);
        (*tcb).vp.set(vp);
        (*tcb).thread.set(t.into_raw());
        arch::prepare(tcb as usize + STACK_SIZE, tcb as usize)
    };
    (tcb, sp)
}

/// Where every TCB starts (called by the architecture's trampoline with the TCB): runs
/// its thread, then, while the next thread of its virtual processor is a new one, runs
/// that too on the same TCB (the paper's context sharing); otherwise switches away and
/// lets the TCB go back to the pool.
pub(crate) extern "C" fn tcb_entry(tcb: usize) -> ! {
    let tcb = tcb as *mut Tcb;
    // SAFETY: the switch that started us set the TCB's `vp`.
    unsafe { (*(*tcb).vp.get()).finish_switch() };
    loop {
        // A signal pushed before the thread started runs first.
        signals_check(tcb);
        // SAFETY: `thread` owns a reference to the thread this TCB was started for.
        let t = unsafe { ThreadRef::from_raw((*tcb).thread.get()) };
        // SAFETY: we won its Start transition (in `claim`), so we alone run it.
        unsafe { (t.core().vtable.run)(t.core()) };
        complete(&t, End::Value);
        drop(t);
        // SAFETY: as at the top; the thread may have migrated, so read it again.
        let vp = unsafe { &*(*tcb).vp.get() };
        bump(&vp.counters.finished);
        // SAFETY: the thread has ended; the TCB is ours.
        unsafe { reclaim_area(vp, tcb) };
        match vp.next_runnable() {
            Some(Next::Start(next)) => {
                // Context sharing: the next thread is new, so it takes this TCB as it
                // stands, with no pool operation and no switch.
                bump(&vp.counters.handovers);
                bump(&vp.counters.started);
                next.core().tcb.store(tcb, Relaxed);
                // SAFETY: the TCB is ours; it now runs `next`.
                unsafe { (*tcb).thread.set(next.into_raw()) };
            }
            other => {
                // SAFETY: our TCB, finished; `other` was claimed by `vp`.
                unsafe { switch_to(vp, (*tcb).sp.get(), tcb, true, other) };
                unreachable!("a finished TCB was resumed");
            }
        }
    }
}

/// Empties the private area of a TCB whose thread has ended, counting what it reclaims.
///
/// # Safety
///
/// `tcb` is the calling TCB, its thread has ended, and no handle into its area is used
/// again (the handles are not `Send`, so none left the thread).
#[inline]
unsafe fn reclaim_area(vp: &Vp, tcb: *mut Tcb) {
    // SAFETY: the caller's promise; the area is the running TCB's own.
    let area = unsafe { &mut *(*tcb).area.get() };
    if area.in_use() {
        reset_area(vp, area);
    }
}

/// Resets an area in use and counts what it reclaimed.
#[cold]
#[inline(never)]
fn reset_area(vp: &Vp, area: &mut Bump) {
    {
        let r = area.reset();
        let c = &vp.counters;
        bump(&c.area_resets);
        c.area_reclaimed
            .store(c.area_reclaimed.load(Relaxed) + r.bytes as u64, Relaxed);
        c.area_chunks
            .store(c.area_chunks.load(Relaxed) + r.chunks_made, Relaxed);
    }
}

/// Runs `f` on the calling thread's private area.
///
/// Panics outside a sting thread.
#[inline]
pub(crate) fn with_area<R>(f: impl FnOnce(&mut Bump) -> R) -> R {
    let tcb = current_tcb();
    // SAFETY: the area of the running TCB is touched only by the thread running on it
    // (this one), and `f` cannot reach it again (it is not given out).
    f(unsafe { &mut *(*tcb).area.get() })
}

/// Marks `t` determined (`end`), wakes its waiters and leaves its group.
fn complete(t: &ThreadRef, end: End) {
    // What `on(Finish)` or `on(Terminate)` gives from every state a thread ends in (a
    // terminate that came while it ran absorbed is overridden by its value: an absorbed
    // thread is never cut short), without the table's lookup.
    let old = t.core().apply(|w| w.finish(end));
    if old.waited_for() {
        // Someone joined the wait list (under the lock, having marked the word): take it
        // under the lock, so that a waiter still pushing its node is waited for.
        let waiters = t.core().ctl.lock().waiters.take();
        waiters.wake_all();
    }
    if let Some(g) = &t.core().group {
        g.remove(t.core());
    }
}

/// Ends the calling thread at a checkpoint, as terminated: its frames are abandoned.
fn exit_terminated(vp: &Vp, tcb: *mut Tcb) -> ! {
    // Its handlers' frames are abandoned with the rest.
    // SAFETY: our own TCB.
    unsafe { (*tcb).handlers.set(ptr::null()) };
    // SAFETY: `thread` owns a reference to the TCB's own thread (not absorbed: checked by
    // the caller).
    let t = unsafe { ThreadRef::from_raw((*tcb).thread.get()) };
    complete(&t, End::Terminated);
    drop(t);
    bump(&vp.counters.finished);
    // SAFETY: the thread has ended (its frames are abandoned); the TCB is ours.
    unsafe { reclaim_area(vp, tcb) };
    let next = vp.next_runnable();
    // SAFETY: our TCB, finished; `next` was claimed by `vp`. A new thread gets a TCB from
    // the pool here (this one is still the stack in use).
    unsafe { switch_to(vp, (*tcb).sp.get(), tcb, true, next) };
    unreachable!("a terminated TCB was resumed");
}

// ---------------------------------------------------------------------------------------
// The runtime

/// The runtime of a [`run`].
pub(crate) struct Runtime {
    /// The virtual processors.
    pub(crate) vps: Box<[Vp]>,
    /// The global TCB pool.
    global: SpinLock<pool::Global<TcbPtr>>,
    /// Set when the main thread ends.
    shutdown: AtomicBool,
    /// Idle virtual processors whose policy steals.
    idle_thieves: AtomicUsize,
    /// The next thread number.
    next_id: AtomicU64,
    /// Virtual processors (other than the first) that have left their loops.
    exited: AtomicU32,
}

impl Runtime {
    /// Wakes one idle virtual processor that steals.
    fn wake_thief(&self) {
        for vp in self.vps.iter() {
            if vp.steals && vp.idle.load(Relaxed) != 0 {
                vp.idle.store(0, Relaxed);
                platform::unpark(&vp.idle);
                return;
            }
        }
    }

    /// Whether a virtual processor other than `me` has threads queued.
    fn work_elsewhere(&self, me: usize) -> bool {
        self.vps
            .iter()
            .any(|vp| vp.id != me && (!vp.deque.is_empty() || !vp.ready.lock().is_empty()))
    }
}

/// The running runtime (one per program at a time).
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(ptr::null_mut());

/// The running runtime.
pub(crate) fn runtime() -> &'static Runtime {
    let p = RUNTIME.load(Acquire);
    if p.is_null() {
        no_runtime();
    }
    // SAFETY: set by `run` to a runtime that lives until every thread that could see it
    // has finished and `run` clears the pointer.
    unsafe { &*p }
}

#[cold]
fn no_runtime() -> ! {
    panic!("sting: no runtime (call sting::run first)")
}

/// How to start the runtime: one policy manager per virtual processor, and the TCB pools'
/// thresholds.
pub struct Config {
    /// One per virtual processor; the first runs on the calling kernel thread.
    policies: Vec<Queue<Runnable>>,
    /// Every local pool's thresholds.
    thresholds: Thresholds,
    /// Spare kernel threads per virtual processor for the kernel's upcalls (0: none).
    upcalls: u64,
    /// The preemption quantum (0: none).
    quantum_ns: u64,
    /// Whether CPU faults of sting threads go to their handlers.
    exceptions: bool,
}

impl Config {
    /// `vps` virtual processors (at least one), each with a policy of `kind`.
    pub fn new(vps: usize, kind: Kind) -> Config {
        Config::mixed(&alloc::vec![kind; vps.max(1)])
    }

    /// One virtual processor per CPU of the machine (the default the paper's virtual
    /// machines use: one per physical processor), each with a policy of `kind`.
    pub fn per_cpu(kind: Kind) -> Config {
        Config::new(platform::cpus(), kind)
    }

    /// One virtual processor per entry, with that policy.
    pub fn mixed(kinds: &[Kind]) -> Config {
        // At most as many as a thread's state word can name.
        let mut policies: Vec<Queue<Runnable>> = kinds
            .iter()
            .take(crate::word::MAX_VPS)
            .map(|&k| Queue::of(k))
            .collect();
        if policies.is_empty() {
            policies.push(Queue::of(Kind::Fifo));
        }
        Config {
            policies,
            thresholds: Thresholds::DEFAULT,
            upcalls: 0,
            quantum_ns: 0,
            exceptions: false,
        }
    }

    /// Replaces virtual processor `vp`'s policy with one of the caller's own.
    pub fn policy(mut self, vp: usize, policy: Box<dyn Policy<Runnable>>) -> Config {
        if let Some(slot) = self.policies.get_mut(vp) {
            *slot = Queue::Custom(policy);
        }
        self
    }

    /// Runs every virtual processor with the kernel's Block and Unblock upcalls and
    /// `spares` spare kernel threads (at most 8; 0 turns them off): a thread that blocks in
    /// the kernel then leaves its virtual processor to the others (`docs/sting.md`, "The
    /// kernel half"). Only on Baton, and only for a runtime started from the program's
    /// first thread; on the host it changes nothing.
    pub fn kernel_upcalls(mut self, spares: u64) -> Config {
        self.upcalls = spares;
        self
    }

    /// Lets the kernel preempt threads running inside [`preemptible`]: with the kernel's
    /// upcalls on (`kernel_upcalls`, which this needs), a thread that has run `quantum_ns`
    /// (or whose virtual processor the kernel preempts) re-enters the runtime through a
    /// Checkpoint upcall, goes back on its processor's ready queue as if it had yielded,
    /// and is resumed later by `vp_resume` (Sting's Checkpoint and Resume). Only on Baton.
    pub fn preempt(mut self, quantum_ns: u64) -> Config {
        self.quantum_ns = quantum_ns;
        self
    }

    /// Delivers the CPU faults of sting threads (a divide error, a breakpoint, a bad
    /// access) to the faulting thread's handlers (`crate::exception`): the runtime serves
    /// the task's exception port while it runs, and clears it when it stops. Only on Baton.
    pub fn exceptions(mut self) -> Config {
        self.exceptions = true;
        self
    }

    /// Sets the TCB pools' thresholds.
    pub fn thresholds(mut self, thresholds: Thresholds) -> Config {
        self.thresholds = thresholds;
        self
    }
}

/// What the runtime counted (summed over virtual processors by [`stats`], or of one by
/// [`vp_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Threads created (`fork`, `delay`).
    pub created: u64,
    /// Threads that started on a TCB (not absorbed).
    pub started: u64,
    /// Threads that finished on their own TCB (absorbed ones are not counted here).
    pub finished: u64,
    /// Threads run by absorption.
    pub absorbed: u64,
    /// TCBs (with stacks) ever allocated.
    pub tcbs_created: u64,
    /// Starts that took a TCB from the local pool.
    pub reused_local: u64,
    /// Starts that took a TCB from the global pool.
    pub reused_global: u64,
    /// Starts that took the TCB of the thread that had just finished (no pool at all).
    pub handovers: u64,
    /// User-level context switches.
    pub switches: u64,
    /// Threads taken from other virtual processors.
    pub stolen: u64,
    /// Threads that moved themselves to another virtual processor.
    pub migrations: u64,
    /// TCBs moved to the global pool on overflow.
    pub spilled: u64,
    /// Refills of an empty local pool from the global pool.
    pub refills: u64,
    /// Threads that blocked in the kernel while their virtual processor went on (Block
    /// upcalls; [`Config::kernel_upcalls`]).
    pub kernel_blocks: u64,
    /// Their kernel calls that completed and came back (Unblock upcalls and events).
    pub kernel_unblocks: u64,
    /// Threads preempted by the kernel and put back on their ready queue (Checkpoint
    /// upcalls taken; [`Config::preempt`]).
    pub checkpoints: u64,
    /// Checkpoint upcalls that found the thread not preemptible (outside [`preemptible`],
    /// in a runtime call, or the heap lock taken) and resumed it at once.
    pub declined: u64,
    /// Threads that ended (returned or were terminated) with something in their private
    /// area, reclaimed wholesale (`crate::area`).
    pub area_resets: u64,
    /// Bytes so reclaimed.
    pub area_reclaimed: u64,
    /// Private-area chunks taken from the program's heap (the rest of the allocations
    /// took no lock at all).
    pub area_chunks: u64,
    /// Exceptions dispatched to a thread's handlers (CPU faults and `raise`).
    pub exceptions: u64,
    /// Signal handlers run in their target's context.
    pub signals: u64,
    /// Immediate signals whose target ran on another virtual processor, which the kernel
    /// was asked to stop at once (`vp_interrupt`; with [`Config::preempt`]).
    pub interrupts: u64,
}

impl Stats {
    /// The counters of one virtual processor.
    fn of(vp: &Vp) -> Stats {
        let c = &vp.counters;
        Stats {
            created: c.created.load(Relaxed),
            started: c.started.load(Relaxed),
            finished: c.finished.load(Relaxed),
            absorbed: c.absorbed.load(Relaxed),
            tcbs_created: c.tcbs_created.load(Relaxed),
            reused_local: c.reused_local.load(Relaxed),
            reused_global: c.reused_global.load(Relaxed),
            handovers: c.handovers.load(Relaxed),
            switches: c.switches.load(Relaxed),
            stolen: c.stolen.load(Relaxed),
            migrations: c.migrations.load(Relaxed),
            spilled: c.spilled.load(Relaxed),
            refills: c.refills.load(Relaxed),
            kernel_blocks: c.kernel_blocks.load(Relaxed),
            kernel_unblocks: c.kernel_unblocks.load(Relaxed),
            checkpoints: c.checkpoints.load(Relaxed),
            declined: c.declined.load(Relaxed),
            area_resets: c.area_resets.load(Relaxed),
            area_reclaimed: c.area_reclaimed.load(Relaxed),
            area_chunks: c.area_chunks.load(Relaxed),
            exceptions: c.exceptions.load(Relaxed),
            signals: c.signals.load(Relaxed),
            interrupts: c.interrupts.load(Relaxed),
        }
    }

    /// Field by field sum.
    fn add(self, o: Stats) -> Stats {
        Stats {
            created: self.created + o.created,
            started: self.started + o.started,
            finished: self.finished + o.finished,
            absorbed: self.absorbed + o.absorbed,
            tcbs_created: self.tcbs_created + o.tcbs_created,
            reused_local: self.reused_local + o.reused_local,
            reused_global: self.reused_global + o.reused_global,
            handovers: self.handovers + o.handovers,
            switches: self.switches + o.switches,
            stolen: self.stolen + o.stolen,
            migrations: self.migrations + o.migrations,
            spilled: self.spilled + o.spilled,
            refills: self.refills + o.refills,
            kernel_blocks: self.kernel_blocks + o.kernel_blocks,
            kernel_unblocks: self.kernel_unblocks + o.kernel_unblocks,
            checkpoints: self.checkpoints + o.checkpoints,
            declined: self.declined + o.declined,
            area_resets: self.area_resets + o.area_resets,
            area_reclaimed: self.area_reclaimed + o.area_reclaimed,
            area_chunks: self.area_chunks + o.area_chunks,
            exceptions: self.exceptions + o.exceptions,
            signals: self.signals + o.signals,
            interrupts: self.interrupts + o.interrupts,
        }
    }
}

/// The runtime's counters, summed over its virtual processors.
pub fn stats() -> Stats {
    runtime()
        .vps
        .iter()
        .fold(Stats::default(), |s, vp| s.add(Stats::of(vp)))
}

/// The counters of virtual processor `vp` (all zero if there is no such processor).
pub fn vp_stats(vp: usize) -> Stats {
    runtime().vps.get(vp).map(Stats::of).unwrap_or_default()
}

/// How many virtual processors the runtime has.
pub fn vp_count() -> usize {
    runtime().vps.len()
}

/// The name of virtual processor `vp`'s policy.
pub fn vp_policy(vp: usize) -> &'static str {
    runtime()
        .vps
        .get(vp)
        .map(|v| v.ready.lock().name())
        .unwrap_or("")
}

/// Entry of the kernel thread of virtual processor `arg` (not the first).
fn vp_main(arg: u64) {
    let rt = runtime();
    if let Some(vp) = rt.vps.get(arg as usize) {
        vp.schedule_loop();
        crate::upcall::unregister(vp);
    }
    rt.exited.fetch_add(1, Release);
}

/// Starts the runtime with `config`, runs `main` as its first thread on virtual processor
/// 0 (which is the calling kernel thread), and returns `main`'s value and the final
/// counters once `main` has finished and every virtual processor has gone back to its
/// scheduler loop and stopped.
///
/// Threads still queued or blocked when `main` ends are abandoned (their memory is not
/// freed). One runtime runs at a time; `run` panics if another is running or if a virtual
/// processor cannot be started.
pub fn run<T, F>(config: Config, main: F) -> (T, Stats)
where
    T: Send + Sync + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let vps: Box<[Vp]> = config
        .policies
        .into_iter()
        .enumerate()
        .map(|(id, policy)| {
            let shared_base = match Fast::of(&policy) {
                Fast::Fifo | Fast::Lifo => 0,
                Fast::Steal | Fast::Shared => NOT_OWN,
            };
            Vp {
                id,
                ready_on: Word::ready_on(id),
                steals: policy.steals(),
                fast: Fast::of(&policy),
                deque: ChaseLev::with_capacity(if Fast::of(&policy) == Fast::Steal {
                    CAPACITY
                } else {
                    1
                }),
                shared: AtomicUsize::new(shared_base),
                shared_base,
                idle: AtomicU32::new(0),
                local: UnsafeCell::new(VpLocal {
                    sched_sp: 0,
                    prev: ptr::null_mut(),
                    recycle: false,
                    pool: pool::Local::new(config.thresholds),
                    kfirst: ptr::null_mut(),
                    klast: ptr::null_mut(),
                    own: Ring::new(),
                }),
                ready: SpinLock::new(policy),
                counters: Counters::default(),
                upcalls: cfg!(baton) && config.upcalls > 0,
                kpending: AtomicU64::new(0),
                kvp: AtomicU64::new(0),
                upcall_stack: AtomicUsize::new(0),
                spares: config.upcalls,
                sched_stack: (AtomicUsize::new(0), AtomicUsize::new(0)),
                quantum_ns: config.quantum_ns,
                on: AtomicPtr::new(ptr::null_mut()),
            }
        })
        .collect();
    let n = vps.len();
    PREEMPTIVE.store(config.quantum_ns != 0, Relaxed);
    EXCEPTIONS.store(config.exceptions, Relaxed);
    #[cfg(baton)]
    if config.exceptions {
        crate::exception::start();
    }
    let rt = Box::into_raw(Box::new(Runtime {
        vps,
        global: SpinLock::new(pool::Global::new()),
        shutdown: AtomicBool::new(false),
        idle_thieves: AtomicUsize::new(0),
        next_id: AtomicU64::new(1),
        exited: AtomicU32::new(0),
    }));
    if RUNTIME
        .compare_exchange(ptr::null_mut(), rt, AcqRel, Acquire)
        .is_err()
    {
        panic!("sting: a runtime is already running");
    }
    let rtr = runtime();
    let vp0 = rtr.vps.first().unwrap_or_else(|| no_runtime());
    // The main thread; when it ends it stops every virtual processor.
    let handle = new_thread(
        move || {
            let v = main();
            let rt = runtime();
            rt.shutdown.store(true, Release);
            for vp in rt.vps.iter() {
                vp.idle.store(0, Relaxed);
                platform::unpark(&vp.idle);
            }
            v
        },
        State::Scheduled,
        0,
        None,
    );
    bump(&vp0.counters.created);
    let ticket = handle.core().enqueue();
    vp0.push(handle.clone(), ticket);
    for i in 1..n {
        let started = platform::spawn_vp(vp_main, i as u64, |lo, hi| {
            if let Some(vp) = rtr.vps.get(i) {
                vp.sched_stack.0.store(lo, Relaxed);
                vp.sched_stack.1.store(hi, Relaxed);
            }
        });
        if started.is_err() {
            panic!("sting: cannot start virtual processor {i}");
        }
    }
    vp0.schedule_loop();
    crate::upcall::unregister(vp0);
    while (rtr.exited.load(Acquire) as usize) < n - 1 {
        platform::park(&rtr.exited, rtr.exited.load(Acquire), IDLE_PARK_NS);
        platform::relax_hard();
    }
    #[cfg(baton)]
    if config.exceptions {
        crate::exception::stop();
    }
    let stats = stats();
    // SAFETY: the main thread is determined (shutdown is set only as its last act, and
    // every virtual processor has stopped, so its TCB has finished), and `handle` is now
    // its only reference (the TCB's was dropped when it completed).
    let value = unsafe { take_value::<T>(handle.core()) };
    drop(handle);
    // Free what the pools hold; abandoned threads and their TCBs stay allocated.
    for vp in rtr.vps.iter() {
        // SAFETY: every virtual processor has stopped: nothing else touches its state.
        let local = unsafe { vp.local() };
        for TcbPtr(tcb) in local.pool.drain() {
            // SAFETY: a pooled TCB is free.
            unsafe { Tcb::destroy(tcb) };
        }
        drop(core::mem::replace(
            &mut *vp.ready.lock(),
            Queue::of(Kind::Fifo),
        ));
        drop(core::mem::take(&mut local.own));
        while let Some((p, _)) = vp.deque.pop() {
            // SAFETY: the deque's entries are references given up by `into_raw`.
            drop(unsafe { ThreadRef::from_raw(p as *const Core) });
        }
    }
    for TcbPtr(tcb) in rtr.global.lock().drain() {
        // SAFETY: a pooled TCB is free.
        unsafe { Tcb::destroy(tcb) };
    }
    RUNTIME.store(ptr::null_mut(), Release);
    // SAFETY: made by `Box::into_raw` above; nothing refers to it any more.
    drop(unsafe { Box::from_raw(rt) });
    match value {
        Some(v) => (v, stats),
        None => panic!("sting: the main thread was terminated"),
    }
}

// ---------------------------------------------------------------------------------------
// Operations on threads (the thread controller)

/// The thread running the calling code (raw; alive while it runs).
fn current_tcb_thread() -> *const Core {
    // SAFETY: a running TCB names the thread running on it.
    unsafe { (*current_tcb()).thread.get() }
}

/// A new reference to the calling thread.
pub(crate) fn current_ref() -> ThreadRef {
    // SAFETY: the running thread is alive.
    unsafe { ThreadRef::clone_raw(current_tcb_thread()) }
}

/// The group of the calling thread.
pub(crate) fn current_group() -> Option<Arc<GroupInner>> {
    // SAFETY: the running thread is alive.
    unsafe { (*current_tcb_thread()).group.clone() }
}

/// The virtual processor the calling thread runs on.
pub fn current_vp() -> usize {
    here().0.id
}

/// Creates a thread running `f`: scheduled on virtual processor `vp` if `Some`, delayed
/// if `None`; in `group`.
pub(crate) fn create<T, F>(f: F, vp: Option<usize>, group: Option<Arc<GroupInner>>) -> ThreadRef
where
    T: Send + Sync + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (me, _) = here();
    bump(&me.counters.created);
    let rt = runtime();
    match vp {
        None => new_thread(f, State::Delayed, me.id, group),
        Some(target) => {
            let target = target.min(rt.vps.len() - 1);
            let t = new_thread(f, State::Scheduled, target, group.clone());
            let ticket = t.core().enqueue();
            if let Some(g) = &group {
                g.add(&t);
            }
            rt.vps[target].push_from(me, t.clone(), ticket);
            t
        }
    }
}

/// Puts a delayed thread on a ready queue (its placed virtual processor's); no effect on
/// any other.
pub(crate) fn schedule(t: &ThreadRef) {
    disarm();
    let vp = match t.core().update(Word::schedule) {
        Ok(old) => (old.vp(), old.enqueue().ticket()),
        Err(word::Refused) => return,
    };
    if let Some(g) = &t.core().group {
        g.add(t);
    }
    runtime().vps[vp.0].push(t.clone(), vp.1);
}

/// The thread is terminated without a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terminated;

/// Waits for `t` to be determined, absorbing it if it has not started (and `absorb`).
/// Returns whether it has a value.
pub(crate) fn demand(t: &ThreadRef, absorb: bool) -> bool {
    // A runtime call (ends a preemptible stretch before the lock is taken), and where an
    // absorption runs: found once, outside the lock.
    let (mut vp, mut tcb) = here();
    loop {
        // Absorbed: a queued entry of a scheduled thread is now stale. (A claim may get
        // there first: then it has started and is waited for.)
        if absorb && t.core().update(|w| w.absorb(vp.id)).is_ok() {
            t.core().tcb.store(tcb, Relaxed);
            return run_absorbed(t, vp, tcb);
        }
        let node;
        {
            let mut c = t.core().ctl.lock();
            // Marked waited for, unless determined already (its end then took or takes no
            // lock, and no waiter may join).
            if t.core().update(Word::wait).is_err() {
                drop(c);
                return t.core().word().state() == State::Determined(End::Value);
            }
            node = Waiter::current();
            c.waiters.push(&node);
        }
        node.wait();
        // It may go on on another processor.
        (vp, tcb) = here();
    }
}

/// Runs `t` on the calling TCB `tcb` of `vp` (absorption) and completes it. Returns false
/// if it ended terminated (an exception with no handler of its own, `crate::exception`).
fn run_absorbed(t: &ThreadRef, vp: &Vp, tcb: *mut Tcb) -> bool {
    // SAFETY: the running TCB's area, touched only by this thread.
    let area = unsafe { &mut *(*tcb).area.get() };
    if !EXCEPTIONS.load(Relaxed) && !t.core().attention.load(Relaxed) && !area.in_use() {
        // The common case: no exceptions delivered, no signal pending, nothing in the
        // area yet (so the absorbed thread's allocations, if any, are all there is).
        // Counted by the processor that absorbs it (the thread may block and go on on
        // another: the counter is written only by its own processor).
        bump(&vp.counters.absorbed);
        // SAFETY: `tcb` is the calling TCB; while `t` runs it is the thread running on it.
        let prev = unsafe { (*tcb).thread.replace(t.core()) };
        // SAFETY: we won its Absorb transition, so we alone run it.
        unsafe { (t.core().vtable.run)(t.core()) };
        // SAFETY: as above.
        unsafe { (*tcb).thread.set(prev) };
        // SAFETY: the running TCB's area. The absorbed thread's handles into it are gone
        // (not `Send`: none left its thunk).
        let area = unsafe { &mut *(*tcb).area.get() };
        if area.in_use() {
            area.release(Mark::EMPTY);
        }
        complete(t, End::Value);
        return true;
    }
    run_absorbed_recorded(t, tcb)
}

/// [`run_absorbed`] with an absorption record (and, with `Config::exceptions`, a catch
/// point of the absorbed thread's own), and its pending signals run first.
#[inline(never)]
fn run_absorbed_recorded(t: &ThreadRef, tcb: *mut Tcb) -> bool {
    /// Runs an absorbed thread's thunk under a catch point (`arch::catch_call`).
    unsafe extern "C" fn run_thunk(core: *mut u8) {
        let core = core.cast_const().cast::<Core>();
        // SAFETY: the absorbing frame won the Absorb transition and holds a reference.
        unsafe { ((*core).vtable.run)(core) };
    }
    // SAFETY: `tcb` is the calling TCB; while `t` runs it is the thread running on it.
    let prev = unsafe { (*tcb).thread.replace(t.core()) };
    // What the absorbed thread allocates in the area goes when it is determined; an
    // exception that unwinds past it ends it (`end_absorptions`).
    // SAFETY: the running TCB's area and lists, touched only by this thread.
    let (outer, mark, handlers) = unsafe {
        (
            (*tcb).absorb.get(),
            (*(*tcb).area.get()).mark(),
            (*tcb).handlers.get(),
        )
    };
    let mut link = AbsorbLink {
        prev: outer,
        demander: prev,
        absorbed: t.core(),
        mark,
        handlers,
        catch_sp: 0,
    };
    let lp: *mut AbsorbLink = &mut link;
    // SAFETY: as above; `link` outlives its place on the list.
    unsafe { (*tcb).absorb.set(lp) };
    // A signal pushed before it started runs first, in its context.
    if t.core().attention.load(Relaxed) {
        deliver_signals(t.core());
    }
    if EXCEPTIONS.load(Relaxed) {
        // With CPU faults delivered, an absorbed thread's own fault may end it alone: it
        // runs under a catch point that `exception::terminate_here` returns to (having
        // completed it as terminated and restored the TCB).
        // SAFETY: we won its Absorb transition, so we alone run it; `catch_sp` lives in
        // this frame while the thunk runs.
        let ended = unsafe {
            arch::catch_call(
                run_thunk,
                t.core() as *const Core as *mut u8,
                ptr::addr_of_mut!((*lp).catch_sp),
            )
        };
        if ended != 0 {
            return false;
        }
    } else {
        // SAFETY: we won its Absorb transition, so we alone run it.
        unsafe { (t.core().vtable.run)(t.core()) };
    }
    // SAFETY: as above (the TCB is still ours, whichever VP runs it now). The absorbed
    // thread's handles into the area are gone (not `Send`: none left its thunk).
    unsafe {
        (*tcb).absorb.set((*lp).prev);
        (*tcb).thread.set(prev);
        (*(*tcb).area.get()).release((*lp).mark);
    }
    complete(t, End::Value);
    let (vp, _) = here();
    bump(&vp.counters.absorbed);
    true
}

/// Parks (blocks) the calling thread until another unparks it
/// ([`AnyThread::unpark`](crate::AnyThread::unpark)); returns at once if a wake-up is
/// already pending. Its virtual processor runs other threads meanwhile. May return
/// spuriously: re-check what you wait for.
pub fn park() {
    let (vp, tcb) = here();
    // SAFETY: the running thread is alive.
    let core = unsafe { &*(*tcb).thread.get() };
    // What `on(Block)` gives, or its fallback: `Blocked` from every state; or a pending
    // wake-up consumed.
    if core.apply(Word::park).token() {
        return;
    }
    let next = vp.next_runnable();
    // SAFETY: our TCB; the thread is now blocked, so it is safe to leave it.
    unsafe { switch_to(vp, (*tcb).sp.get(), tcb, false, next) };
}

/// Wakes `t` and parks the calling thread, as [`unpark`] of `t` followed by [`park`] does,
/// but when `t` is parked on the caller's own virtual processor switches straight to it:
/// one compare-and-swap makes it running here, with no ready-queue entry, no policy
/// decision and no reference taken (the synchronous switch to a named thread). Otherwise
/// (`t` ready, running, suspended, pinned by a signal, or parked on another processor)
/// it is exactly `unpark` then `park`. A thread whose kernel call has completed waits
/// for the processor's next ordinary scheduling decision rather than being run first.
pub fn hand_off(t: &ThreadRef) {
    let (vp, tcb) = here();
    let target = t.core();
    if word::update(&target.word, |w| w.take_parked(vp.id)).is_err() {
        unpark(t);
        park();
        return;
    }
    // `t` is ours to run: running on this processor, with no live entry, so no claim
    // elsewhere can take it. Now the caller parks.
    // SAFETY: the running thread is alive.
    let core = unsafe { &*(*tcb).thread.get() };
    if core.apply(Word::park).token() {
        // A wake-up was pending, so the caller goes on, and `t` gets the entry that
        // `unpark` would have given it.
        let ticket = target.apply(Word::yielded).yielded().ticket();
        vp.push_own(t.clone(), ticket);
        return;
    }
    let next = Some(Next::Resume(target.tcb.load(Relaxed)));
    // SAFETY: our TCB; the thread is now blocked, so it is safe to leave it; `t` was
    // claimed for this processor by the compare-and-swap above.
    unsafe { switch_to(vp, (*tcb).sp.get(), tcb, false, next) };
}

/// Wakes `t` if it is parked, else leaves it a wake-up for its next park. From any thread
/// of the program: a sting thread, or another kernel thread (an exception handler, a
/// server's thread), which cannot use the owner's queue and so always queues `t` on the
/// shared one, waking its processor.
pub fn unpark(t: &ThreadRef) {
    let rt = runtime();
    let tcb = (arch::stack_pointer() & !(STACK_SIZE - 1)) as *mut Tcb;
    if PREEMPTIVE.load(Relaxed) {
        // A runtime call: a sting thread is not preemptible any more (before the lock).
        disarm_caller(rt, tcb);
    }
    let old = t.core().apply(Word::unpark);
    if old.state() != State::Blocked {
        return;
    }
    let (vp, ticket) = (old.vp(), old.unpark().ticket());
    let Some(target) = rt.vps.get(vp) else {
        return;
    };
    // The caller runs on `target` if `target` says it runs the caller's TCB: only code
    // running on a TCB has its stack pointer inside it, so this reads no memory at an
    // address that may not be a TCB (the caller may be any thread of the program).
    if target.on.load(Relaxed) == tcb {
        target.push_own(t.clone(), ticket);
    } else {
        target.push(t.clone(), ticket);
    }
}

/// Ends the preemptible stretch of the calling code if it is a sting thread running on
/// TCB `tcb` (the masked stack pointer) of one of `rt`'s virtual processors; does nothing
/// for any other thread. Reads nothing at `tcb` unless a processor says it runs it.
#[cold]
fn disarm_caller(rt: &Runtime, tcb: *mut Tcb) {
    if rt.vps.iter().any(|vp| vp.on.load(Relaxed) == tcb) {
        // SAFETY: a processor runs `tcb`, and we run on it: a live TCB.
        unsafe { (*tcb).preempt.store(false, Relaxed) };
        compiler_fence(SeqCst);
    }
}

/// Gives the processor to the next ready thread, if there is one; the caller stays
/// ready. Also a checkpoint: a pending suspension or termination takes effect here.
///
/// Its common case, a FIFO or LIFO processor whose next thread is one that yielded here
/// (an owned entry), is inlined into the caller, register switch included: the compiler
/// then keeps across the switch only what the caller has live, instead of a call saving
/// every callee-saved register for the caller. Everything else is
/// [`yield_general`], out of line.
#[inline(always)]
pub fn yield_now() {
    let (vp, tcb) = here();
    // The checkpoint, on the TCB just found.
    // SAFETY: the running thread is alive.
    let core = unsafe { &*(*tcb).thread.get() };
    if core.attention.load(Relaxed) || !vp.yield_owned(tcb, core) {
        yield_general(vp, tcb);
    }
}

/// [`yield_now`] in every case but an owned entry to an owned entry: on virtual
/// processor `vp`, TCB `tcb` (the caller's [`here`]).
#[inline(never)]
fn yield_general(mut vp: &'static Vp, mut tcb: *mut Tcb) {
    // The checkpoint, on the TCB just found.
    // SAFETY: the running thread is alive.
    let core = unsafe { &*(*tcb).thread.get() };
    if core.attention.load(Relaxed) {
        attend(vp, tcb, core);
        // It may have been suspended and resumed on another processor.
        (vp, tcb) = here();
    }
    // SAFETY: the running thread is alive (read again: `attend` may have changed it).
    let core = unsafe { &*(*tcb).thread.get() };
    if vp.yield_own(tcb, core) {
        // Resumed from the owned entry (by this processor): no longer on its ring, and
        // what was asked of it while it waited there (it looked running to the others)
        // is done now, before its own code. (The thread read again from the TCB, whose
        // register the switch keeps, rather than kept across the switch.)
        // SAFETY: the running thread is alive.
        let core = unsafe { &*(*tcb).thread.get() };
        core.own_ready.store(false, Relaxed);
        if core.attention.load(Relaxed) {
            attend(vp, tcb, core);
        }
        return;
    }
    let Some(next) = vp.next_runnable() else {
        return;
    };
    let me = {
        // SAFETY: the running thread is alive.
        let core = unsafe { &*(*tcb).thread.get() };
        // What `on(Preempt)` gives, or its fallback: `Ready` from every state (written
        // out, so that no build has to see through the table).
        let ticket = core.apply(Word::yielded).yielded().ticket();
        // SAFETY: as above.
        (unsafe { ThreadRef::clone_raw(core) }, ticket)
    };
    vp.push_own(me.0, me.1);
    // SAFETY: our TCB; the thread is ready and queued, so it is safe to leave it.
    unsafe { switch_to(vp, (*tcb).sp.get(), tcb, false, Some(next)) };
}

/// Moves the calling thread to virtual processor `target` (it continues there).
pub fn migrate(target: usize) {
    let (vp, tcb) = here();
    let rt = runtime();
    if target == vp.id || target >= rt.vps.len() {
        return;
    }
    let me = {
        // SAFETY: the running thread is alive.
        let core = unsafe { &*(*tcb).thread.get() };
        // What `on(Preempt)` gives, or its fallback: `Ready` from every state (written
        // out, so that no build has to see through the table).
        let ticket = core
            .apply(|w| w.with_vp(target).yielded())
            .with_vp(target)
            .yielded()
            .ticket();
        // SAFETY: as above.
        (unsafe { ThreadRef::clone_raw(core) }, ticket)
    };
    bump(&vp.counters.migrations);
    rt.vps[target].push(me.0, me.1);
    let next = vp.next_runnable();
    // SAFETY: our TCB; the thread is queued elsewhere; another VP resumes it.
    unsafe { switch_to(vp, (*tcb).sp.get(), tcb, false, next) };
}

/// A checkpoint: if the calling thread has been asked to suspend, it suspends here until
/// resumed; if it has been asked to terminate, it ends here (as terminated, without
/// running its frames' destructors). An absorbed thread is not ended here: it is
/// determined when its thunk returns.
#[inline]
pub fn checkpoint() {
    let (vp, tcb) = here();
    // SAFETY: the running thread is alive.
    let core = unsafe { &*(*tcb).thread.get() };
    if !core.attention.load(Relaxed) {
        return;
    }
    attend(vp, tcb, core);
}

/// [`attend`] for the thread on `tcb`, resumed on `vp` by an inlined yield (out of line:
/// a pending request is rare).
#[cold]
#[inline(never)]
fn attend_resumed(vp: &Vp, tcb: *mut Tcb) {
    // SAFETY: the running thread is alive.
    attend(vp, tcb, unsafe { &*(*tcb).thread.get() });
}

/// [`checkpoint`] when the thread has something pending: its signals, then a suspension
/// or termination.
#[cold]
#[inline(never)]
fn attend(vp: &Vp, tcb: *mut Tcb, core: &Core) {
    deliver_signals(core);
    let c = core.ctl.lock();
    let suspended = core.word().suspended();
    if !c.terminate && !suspended && c.signals.is_none() {
        core.attention.store(false, Relaxed);
    }
    if c.terminate && !core.word().absorbed() {
        drop(c);
        exit_terminated(vp, tcb);
    }
    if suspended {
        drop(c);
        suspend_self();
    }
}

/// Suspends the calling thread until another resumes it.
fn suspend_self() {
    let (vp, tcb) = here();
    {
        // SAFETY: the running thread is alive.
        let core = unsafe { &*(*tcb).thread.get() };
        let _c = core.ctl.lock();
        // What `on(Preempt)` gives, or its fallback: `Ready` from every state (written
        // out, so that no build has to see through the table).
        core.apply(|w| w.with_suspended(true).with_state(State::Ready).unqueue());
    }
    let next = vp.next_runnable();
    // SAFETY: our TCB; the thread is ready but suspended (on no queue): only a resume
    // queues it again.
    unsafe { switch_to(vp, (*tcb).sp.get(), tcb, false, next) };
    checkpoint();
}

/// Suspends `t`: at once if it is the calling thread, else it does not run again (a thread
/// running on another virtual processor stops at its next checkpoint) until resumed.
pub(crate) fn suspend(t: &ThreadRef) {
    if t.same(current_tcb_thread()) {
        suspend_self();
        return;
    }
    let _c = t.core().ctl.lock();
    let set = t.core().update(|w| {
        if w.state().determined() {
            return Err(());
        }
        Ok(w.with_suspended(true))
    });
    if set.is_ok() {
        t.core().attention.store(true, Relaxed);
    }
}

/// Resumes a suspended thread.
pub(crate) fn resume(t: &ThreadRef) {
    disarm();
    let vp = {
        let _c = t.core().ctl.lock();
        let Ok(old) = t.core().update(|w| w.resume().map(|(w, _)| w)) else {
            return;
        };
        let Ok((new, true)) = old.resume() else {
            return;
        };
        (new.vp(), new.ticket())
    };
    runtime().vps[vp.0].push(t.clone(), vp.1);
}

/// Terminates `t`: a thread that has not started is determined at once (without a value);
/// a started one ends at its next checkpoint (the calling thread: now, if not absorbed).
pub(crate) fn terminate(t: &ThreadRef) {
    if t.same(current_tcb_thread()) {
        t.core().ctl.lock().terminate = true;
        t.core().attention.store(true, Relaxed);
        checkpoint();
        return;
    }
    let waiters;
    {
        let mut c = t.core().ctl.lock();
        // Not started: determined at once (a claim may start it first).
        let unstarted = t.core().update(|w| match w.state() {
            State::Delayed | State::Scheduled => {
                Ok(w.with_state(State::Determined(End::Terminated)).unqueue())
            }
            _ => Err(()),
        });
        if unstarted.is_ok() {
            waiters = c.waiters.take();
        } else {
            if t.core().word().state().determined() {
                return;
            }
            c.terminate = true;
            t.core().attention.store(true, Relaxed);
            // A suspended thread must run to reach its checkpoint.
            let old = t.core().apply(|w| {
                let requeue = w.suspended() && w.state() == State::Ready && !w.queued();
                let w = w.with_suspended(false);
                if requeue {
                    w.enqueue()
                } else {
                    w
                }
            });
            if old.suspended() && old.state() == State::Ready && !old.queued() {
                let (vp, ticket) = (old.vp(), old.enqueue().ticket());
                drop(c);
                runtime().vps[vp].push(t.clone(), ticket);
            }
            return;
        }
    }
    waiters.wake_all();
    if let Some(g) = &t.core().group {
        g.remove(t.core());
    }
}

/// The state of `t` and whether it was absorbed.
pub(crate) fn state_of(t: &ThreadRef) -> (State, bool, bool) {
    disarm();
    let w = t.core().word();
    // An owned entry on its processor's ring keeps a running word ([`Own`]).
    let s = match w.state() {
        State::Running if t.core().own_ready.load(Relaxed) => State::Ready,
        s => s,
    };
    (s, w.absorbed(), w.suspended())
}

/// The paper's state of `t`.
pub(crate) fn paper_state_of(t: &ThreadRef) -> Paper {
    let (s, absorbed, _) = state_of(t);
    s.paper(absorbed)
}

/// The number of `t`.
pub(crate) fn id_of(t: &ThreadRef) -> u64 {
    t.core().id
}

/// For the benchmarks: puts the calling thread on its virtual processor's ready queue and
/// takes it off again, as the owner's scheduler queues a started thread of its own: the
/// test that it runs here with no live entry, its `own_ready` flag, the owned entry pushed
/// on the ring (after the one-word test that the ring is the whole ready queue), the
/// policy's pop with its dispatch, and the flag cleared; no atomic operation. Only with
/// nothing else queued (so that what comes off is the caller) on a built-in FIFO or LIFO
/// processor; returns whether the caller's entry came off (false, with nothing done, if
/// the queue was not empty or the policy is another).
pub fn probe_enqueue_dequeue() -> bool {
    let (vp, tcb) = here();
    // SAFETY: the running thread is alive.
    let core = unsafe { &*(*tcb).thread.get() };
    // SAFETY: on this virtual processor's kernel thread.
    let own = &mut unsafe { vp.local() }.own;
    // The owned yield's conditions (`Vp::yield_owned`), and an empty ring, so that what
    // comes off is what went on.
    let (h, t) = own.ends();
    if vp.shared.load(Relaxed) != 0 || h != t || !core.word().running_unqueued() {
        return false;
    }
    core.own_ready.store(true, Relaxed);
    // SAFETY: `t` is the tail just read, of an empty ring.
    unsafe { own.push_at(t, Own::owned(tcb)) };
    match vp.pop_queue() {
        Some(Taken::Owned(t)) => {
            // SAFETY: an owned entry's TCB runs its thread.
            unsafe { &*(*t).thread.get() }
                .own_ready
                .store(false, Relaxed);
            t == tcb
        }
        _ => false,
    }
}

/// For the benchmarks: puts the delayed thread `t` on the calling virtual processor's
/// ready queue and takes it off again, as the scheduler queues a thread that has not
/// started (a compare-and-swap of the thread's state word to mark it queued, the
/// processor's own queue both ways — the ring for the built-in FIFO and LIFO policies, the
/// deque for work stealing, the shared queue under its lock for a policy of the program's
/// own — and a compare-and-swap again to claim the entry). Returns whether the thread
/// that came off is `t`.
pub fn probe_enqueue_dequeue_scheduled<T>(t: &crate::Thread<T>) -> bool {
    let (vp, _) = here();
    let t = t.raw().clone();
    let ticket = t.core().enqueue();
    vp.push_own(t, ticket);
    let back = vp.pop_queue();
    match back {
        // A claim of the delayed thread's entry: it stays delayed, the entry consumed.
        Some(Taken::Entry(Runnable { t: b, ticket })) => b
            .core()
            .update(|w| {
                if w.is_live(ticket) {
                    Ok(w.unqueue())
                } else {
                    Err(())
                }
            })
            .is_ok(),
        _ => false,
    }
}

#[cfg_attr(not(baton), allow(dead_code))]
/// Called first by a thread resumed after its kernel call completed (from the frame
/// `prepare_resume` laid): finishes the switch that resumed it; returns `regs`.
pub(crate) extern "C" fn kernel_resumed(
    regs: *const crate::arch::UserRegs,
) -> *const crate::arch::UserRegs {
    let (vp, tcb) = here();
    vp.finish_switch();
    signals_check(tcb);
    regs
}

/// Runs `f` preemptibly: with [`Config::preempt`], the kernel may stop the calling thread
/// while it runs its own code in `f` (a Checkpoint upcall) and its virtual processor runs
/// other threads meanwhile; it is resumed later, with every register as it was. The first
/// call into the runtime inside `f` (any `sting` function, a `Mutex`, a `Port`) ends the
/// preemptible stretch for the rest of `f`, since the runtime's own state must not be left
/// half changed; an allocation is fine (a Checkpoint while the heap lock is held is
/// declined). Without `Config::preempt` it only calls `f`.
pub fn preemptible<R>(f: impl FnOnce() -> R) -> R {
    let tcb = current_tcb();
    // SAFETY: our own TCB; only this thread writes the flag while it runs.
    unsafe { (*tcb).preempt.store(true, Relaxed) };
    compiler_fence(SeqCst);
    let r = f();
    compiler_fence(SeqCst);
    let _ = current_tcb();
    r
}

/// Ends the calling thread's preemptible stretch, if it is in one (the runtime's objects
/// call this before touching their locks).
#[inline]
pub(crate) fn disarm() {
    if PREEMPTIVE.load(Relaxed) {
        let _ = current_tcb();
    }
}

/// Whether the running runtime lets the kernel preempt its threads ([`Config::preempt`]).
static PREEMPTIVE: AtomicBool = AtomicBool::new(false);

/// Whether the runtime delivers CPU faults to threads (`Config::exceptions`): absorbed
/// threads then run under a catch point of their own.
static EXCEPTIONS: AtomicBool = AtomicBool::new(false);

#[cfg_attr(not(baton), allow(dead_code))]
/// Called first by a thread resumed after a Checkpoint (from the frame
/// `prepare_preempted` laid): finishes the switch that resumed it and makes it
/// preemptible again; returns `regs` for the resume.
pub(crate) extern "C" fn preempted_resumed(
    regs: *const crate::arch::UserRegs,
) -> *const crate::arch::UserRegs {
    let tcb = (arch::stack_pointer() & !(STACK_SIZE - 1)) as *mut Tcb;
    // SAFETY: a resumed TCB, whose `vp` its resumer set.
    let vp = unsafe { &*(*tcb).vp.get() };
    vp.finish_switch();
    signals_check(tcb);
    // SAFETY: our own TCB; it was preemptible when stopped, and the rest of the way out
    // (the resume) touches nothing of the runtime's.
    unsafe { (*tcb).preempt.store(true, Relaxed) };
    compiler_fence(SeqCst);
    regs
}

// ---------------------------------------------------------------------------------------
// Exceptions and signals (`crate::exception`): the thread controller's half

/// The calling thread's TCB (a runtime call: ends a preemptible stretch).
pub(crate) fn tcb_here() -> *mut Tcb {
    current_tcb()
}

/// Bytes at the bottom of a TCB block that are not stack.
pub(crate) const fn tcb_size() -> usize {
    core::mem::size_of::<Tcb>()
}

/// The innermost handler frame installed on `tcb`.
pub(crate) fn handlers(tcb: *mut Tcb) -> *const HandlerFrame {
    // SAFETY: the calling thread's own TCB (`tcb_here`).
    unsafe { (*tcb).handlers.get() }
}

/// Makes `f` the innermost handler frame of `tcb`.
pub(crate) fn set_handlers(tcb: *mut Tcb, f: *const HandlerFrame) {
    // SAFETY: the calling thread's own TCB.
    unsafe { (*tcb).handlers.set(f) };
}

/// The innermost absorption running on `tcb`.
pub(crate) fn absorptions(tcb: *mut Tcb) -> *const AbsorbLink {
    // SAFETY: the calling thread's own TCB.
    unsafe { (*tcb).absorb.get() }
}

/// Ends, as terminated, every absorption on `tcb` newer than `upto` (an exception unwinds
/// past them): each absorbed thread is determined, the TCB names its demander again, and
/// what it allocated in the area is released.
pub(crate) fn end_absorptions(tcb: *mut Tcb, upto: *const AbsorbLink) {
    loop {
        // SAFETY: the calling thread's own TCB.
        let l = unsafe { (*tcb).absorb.get() };
        if l.is_null() || l == upto {
            return;
        }
        // SAFETY: a listed link is a live `run_absorbed` frame below us on this stack,
        // about to be abandoned.
        let link = unsafe { &*l };
        // SAFETY: the absorbing frame holds a reference to the absorbed thread.
        let t = unsafe { ThreadRef::clone_raw(link.absorbed) };
        complete(&t, End::Terminated);
        drop(t);
        // SAFETY: our own TCB; no handle into the area from the abandoned frames is used
        // again.
        unsafe {
            (*tcb).absorb.set(link.prev);
            (*tcb).thread.set(link.demander);
            (*(*tcb).area.get()).release(link.mark);
        }
    }
}

/// Ends the thread running on `tcb` (the caller's), as terminated, from an exception with
/// no handler of its own or whose handler said so. An absorbed thread under a catch point
/// (`Config::exceptions`) ends alone and its demander goes on (its `value` finds it
/// terminated); without one, its demander (and the absorptions between) end with it.
pub(crate) fn terminate_here(tcb: *mut Tcb) -> ! {
    if absorbed_unlinked(tcb) {
        unlinked_absorption();
    }
    // SAFETY: the calling thread's own TCB.
    let l = unsafe { (*tcb).absorb.get() };
    // SAFETY: a listed link is a live `run_absorbed` frame below us on this stack.
    if !l.is_null() && unsafe { (*l).catch_sp } != 0 {
        // SAFETY: as above.
        let link = unsafe { &*l };
        end_absorptions(tcb, link.prev);
        set_handlers(tcb, link.handlers);
        // SAFETY: stored by that frame's live `catch_call`, on this stack.
        unsafe { arch::catch_jump(link.catch_sp) }
    }
    end_absorptions(tcb, ptr::null());
    // SAFETY: a running TCB's `vp` is set.
    let vp = unsafe { &*(*tcb).vp.get() };
    exit_terminated(vp, tcb)
}

/// Whether the thread running on `tcb` was absorbed without an absorption record (the
/// common path of `run_absorbed`, without `Config::exceptions`): an exception cannot then
/// end it alone, nor unwind past it.
pub(crate) fn absorbed_unlinked(tcb: *mut Tcb) -> bool {
    // SAFETY: the calling thread's own TCB; the running thread is alive.
    let core = unsafe { (*tcb).thread.get() };
    // SAFETY: as above.
    if !unsafe { &*core }.word().absorbed() {
        return false;
    }
    // SAFETY: as above.
    let l = unsafe { (*tcb).absorb.get() };
    // SAFETY: a listed link is a live frame of this stack.
    l.is_null() || unsafe { (*l).absorbed } != core
}

/// An exception would end an absorbed thread, or unwind past it, with no record of the
/// absorption to do it with.
#[cold]
pub(crate) fn unlinked_absorption() -> ! {
    panic!("sting: an exception left an absorbed thread; that needs Config::exceptions")
}

/// The thread running on `tcb` (raw).
pub(crate) fn running_on(tcb: *mut Tcb) -> *const Core {
    // SAFETY: the calling thread's own TCB.
    unsafe { (*tcb).thread.get() }
}

/// Whether a thread's own handlers can take its exceptions: the innermost handler frame
/// `f` was installed by the thread running now (not by the demander of an absorbed
/// thread that runs under its own catch point).
pub(crate) fn handler_is_own(tcb: *mut Tcb, f: *const HandlerFrame) -> bool {
    // SAFETY: the calling thread's own TCB.
    let l = unsafe { (*tcb).absorb.get() };
    // SAFETY: a listed link is a live `run_absorbed` frame below us on this stack.
    l.is_null() || unsafe { (*l).catch_sp } == 0 || crate::exception::installed_under(f, l)
}

/// Counts one exception dispatched on the calling thread's processor.
pub(crate) fn count_exception() {
    let (vp, _) = here();
    bump(&vp.counters.exceptions);
}

/// Runs the signals pushed onto the calling thread, in its context, oldest first.
#[cold]
#[inline(never)]
fn deliver_signals(core: &Core) {
    loop {
        let Some(list) = core.ctl.lock().signals.take() else {
            return;
        };
        for s in *list {
            s();
            let (vp, _) = here();
            bump(&vp.counters.signals);
        }
        let c = core.ctl.lock();
        if c.signals.is_none() && !c.terminate && !core.word().suspended() {
            core.attention.store(false, Relaxed);
            return;
        }
    }
}

/// Runs the calling thread's pending signals if it has any (cheap when it has none).
#[inline]
fn signals_check(tcb: *mut Tcb) {
    // SAFETY: the calling thread's own TCB names the running thread, which is alive.
    let core = unsafe { &*(*tcb).thread.get() };
    if core.attention.load(Relaxed) {
        deliver_signals(core);
    }
}

/// Bytes of stack a thread must have left for a signal's continuation to be pushed onto it.
const SIGNAL_ROOM: usize = 4096;

/// Where a thread resumed at a signal's continuation enters the runtime
/// (`arch::push_signal_frame`): finishes the switch, then runs its signals.
pub(crate) extern "C" fn signalled(tcb: usize) {
    let tcb = tcb as *mut Tcb;
    // SAFETY: a resumed TCB, whose `vp` its resumer set; the running thread is alive.
    let (vp, core) = unsafe { (&*(*tcb).vp.get(), &*(*tcb).thread.get()) };
    vp.finish_switch();
    core.ctl.lock().signal_frame = false;
    deliver_signals(core);
}

/// Pushes `handler` onto `t` (see [`crate::exception`]), then goes on as `prio` says.
/// Returns false if `t` is determined (nothing is pushed).
pub(crate) fn signal(t: &ThreadRef, prio: Priority, handler: Signal) -> bool {
    let (vp, tcb) = here();
    // SAFETY: the running thread is alive.
    if t.same(unsafe { (*tcb).thread.get() }) {
        // The target is the current thread: apply the handler now (Figure 2, line 5).
        handler();
        bump(&vp.counters.signals);
        return true;
    }
    let ready_here = {
        let mut c = t.core().ctl.lock();
        let core = t.core();
        if core.word().state().determined() {
            return false;
        }
        let mut list = c.signals.take().unwrap_or_default();
        list.push(handler);
        c.signals = Some(list);
        t.core().attention.store(true, Relaxed);
        // A thread stopped in a switch (ready or blocked) gets the continuation pushed
        // onto its saved context, so the handler runs first when it is resumed.
        // The word is pinned while the context changes: no claim resumes it meanwhile.
        let pinned = !c.signal_frame
            && core
                .update(|w| {
                    if matches!(w.state(), State::Ready | State::Blocked) && !w.pinned() {
                        Ok(w.with_pinned(true))
                    } else {
                        Err(())
                    }
                })
                .is_ok();
        if pinned {
            let ttcb = core.tcb.load(Relaxed);
            // SAFETY: a ready or blocked thread's TCB is alive; while its `running` flag
            // is clear and its word is pinned, nothing resumes it (a claim waits for the
            // pin), so its saved stack pointer is ours to change. The flag still set means
            // it is still switching away: the handler then waits for its next checkpoint.
            unsafe {
                if !ttcb.is_null()
                    && !(*ttcb).running.load(Acquire)
                    && ptr::eq((*ttcb).thread.get(), t.core())
                {
                    let sp = *(*ttcb).sp.get();
                    if sp.saturating_sub(ttcb as usize) > tcb_size() + SIGNAL_ROOM {
                        *(*ttcb).sp.get() = arch::push_signal_frame(sp, ttcb as usize);
                        c.signal_frame = true;
                    }
                }
            }
            core.apply(|w| w.with_pinned(false));
        }
        let w = core.word();
        let ready_here =
            w.state() == State::Ready && w.queued() && !w.suspended() && w.vp() == vp.id;
        // An owned entry on this processor's ring (its word says running here; only this
        // processor's kernel thread, which runs the caller, writes `own_ready`).
        let owned_here = w.state() == State::Running
            && !w.suspended()
            && w.vp() == vp.id
            && core.own_ready.load(Relaxed);
        let elsewhere = (w.state() == State::Running && w.vp() != vp.id).then_some(w.vp());
        (ready_here, owned_here, elsewhere)
    };
    let (ready_here, owned_here, running_elsewhere) = ready_here;
    match prio {
        Priority::Continue => {}
        Priority::Immediate if ready_here => switch_to_target(t),
        Priority::Immediate if owned_here => switch_to_owned(t),
        Priority::Immediate => {
            // Running on another processor now: with preemption on, the kernel stops it
            // there (a Checkpoint upcall at once); preemptible, it runs the handler as it
            // is resumed, else at its next checkpoint.
            if let Some(other) = running_elsewhere.and_then(|i| runtime().vps.get(i)) {
                if PREEMPTIVE.load(Relaxed) {
                    crate::upcall::interrupt(other);
                    bump(&vp.counters.interrupts);
                }
            }
        }
        Priority::Reschedule => yield_now(),
    }
    true
}

/// Switches from the calling thread to `t`, an owned entry on this processor's ring
/// ([`Own`]): the entry is replaced by a stale ready-queue entry of `t` (the ticket its
/// word has now, with no live entry: the claim that pops it drops it), and the caller
/// goes back on the ready queue. `t` attends to the signal as it resumes, in its yield.
fn switch_to_owned(t: &ThreadRef) {
    let (vp, tcb) = here();
    let target = t.core().tcb.load(Relaxed);
    {
        // SAFETY: the caller runs on this virtual processor's kernel thread.
        let own = &mut unsafe { vp.local() }.own;
        let Some(slot) = own.find_mut(|e| e.owned_tcb() == Some(target)) else {
            return;
        };
        *slot = Own::entry(Runnable {
            t: t.clone(),
            ticket: t.core().word().ticket(),
        });
    }
    let me = {
        // SAFETY: the running thread is alive.
        let core = unsafe { &*(*tcb).thread.get() };
        let ticket = core.apply(Word::yielded).yielded().ticket();
        // SAFETY: as above.
        (unsafe { ThreadRef::clone_raw(core) }, ticket)
    };
    vp.push_own(me.0, me.1);
    // SAFETY: our TCB; the thread is ready and queued; `target` was an owned entry of
    // this processor, taken off its ring above.
    unsafe { switch_to(vp, (*tcb).sp.get(), tcb, false, Some(Next::Owned(target))) };
}

/// Switches from the calling thread to `t`, ready on this processor (its queue entry
/// goes stale); the caller goes back on the ready queue.
fn switch_to_target(t: &ThreadRef) {
    let (vp, tcb) = here();
    let target = {
        // Claimed here: the entry on the queue is now stale.
        if t.core().update(|w| w.take_ready(vp.id)).is_err() {
            return;
        }
        t.core().tcb.load(Relaxed)
    };
    let me = {
        // SAFETY: the running thread is alive.
        let core = unsafe { &*(*tcb).thread.get() };
        // What `on(Preempt)` gives, or its fallback: `Ready` from every state (written
        // out, so that no build has to see through the table).
        let ticket = core.apply(Word::yielded).yielded().ticket();
        // SAFETY: as above.
        (unsafe { ThreadRef::clone_raw(core) }, ticket)
    };
    vp.push_own(me.0, me.1);
    // SAFETY: our TCB; the thread is ready and queued; `target` was claimed above.
    unsafe { switch_to(vp, (*tcb).sp.get(), tcb, false, Some(Next::Resume(target))) };
}
