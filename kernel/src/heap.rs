//! The kernel heap: the `#[global_allocator]` every `Box`, `Vec` and `BTreeMap` of the
//! kernel allocates from.
//!
//! `kmain` gives it one region of RAM below 1 GiB (RAM/8, 4–64 MiB; down to 1 MiB in a
//! small machine, `kern::frame::place_heap`) before anything
//! allocates. Blocks of up to 2 KiB come from the size classes of [`kern::kheap::Heap`]
//! (O(1) however many holes other tasks left: thread objects, queued messages, port and
//! capability tables); larger blocks and the classes' 16 KiB chunks come from `talc`, a
//! binned (TLSF-like) general allocator that does not walk the free blocks either. Empty
//! chunks go back to `talc` but one spare per class (see `kern::kheap`).
//!
//! [`heap_used`] (`Stats::heap_used`) is the sum of the sizes asked for of the blocks
//! live now: it returns to the same figure when what a task made is gone, whatever the
//! rounding and caching below.
//!
//! # Locking
//! One spin lock guards the whole heap. It is taken with or without the big kernel lock
//! held, on any CPU, always with interrupts off (they are off in the kernel), so no
//! interrupt handler can re-enter it; nothing allocates while holding it.
//!
//! # Fault injection
//! In kernels built with the `fault-inject` feature, the command-line word `failalloc=N`
//! makes every Nth heap allocation (`alloc` and `realloc`), kernel-stack allocation and
//! frame allocation fail once boot is done ([`boot_done`]; `kern::fault`), and the counts
//! are printed at shutdown and on a panic:
//! `[kernel] fault injection: failed K of N allocations (heap ..., stack ..., frame ...)`.
//! Other kernels say that they ignore the word.

use crate::arch::serial::kprintln;
use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};
use kern::fault::Site;
use kern::kheap::{Backing, Heap};
use spin::Mutex;
use talc::base::Talc;
use talc::source::Manual;
use talc::DefaultBinning;

/// The general allocator under the size classes: `talc` over the heap region, which it
/// never grows (`Manual`: out of room is an allocation failure).
struct General(Talc<Manual, DefaultBinning>);

impl Backing for General {
    #[inline]
    fn alloc(&mut self, layout: Layout) -> Option<NonNull<u8>> {
        // SAFETY: `Backing::alloc` is never asked for 0 bytes.
        unsafe { self.0.allocate(layout) }
    }

    #[inline]
    unsafe fn free(&mut self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise: `ptr` came from `alloc` with `layout`.
        unsafe { self.0.deallocate(ptr.as_ptr(), layout) }
    }
}

/// The heap behind its lock.
struct KernelHeap(Mutex<Heap<General>>);

#[global_allocator]
static HEAP: KernelHeap = KernelHeap(Mutex::new(Heap::new(General(Talc::new(Manual)))));

// SAFETY: every block comes from `kern::kheap::Heap`, which hands out blocks of at least
// the layout's size and alignment that overlap no live block, and takes back only what it
// handed out (the callers' `GlobalAlloc` contract is passed on as `Heap::free`'s); the
// lock makes every call exclusive.
unsafe impl GlobalAlloc for KernelHeap {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !injection_paused() && kern::fault::should_fail(Site::Heap) {
            #[cfg(feature = "fault-inject")]
            record_fail_trace();
            return ptr::null_mut();
        }
        self.0
            .lock()
            .alloc(layout)
            .map_or(ptr::null_mut(), NonNull::as_ptr)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: `GlobalAlloc`'s contract: `ptr` came from this allocator with
            // `layout` and is released once.
            unsafe { self.0.lock().free(p, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(p) = NonNull::new(ptr) else {
            return ptr::null_mut();
        };
        if !injection_paused() && kern::fault::should_fail(Site::Heap) {
            return ptr::null_mut();
        }
        // SAFETY: `GlobalAlloc`'s contract: `ptr` is live with `layout`, and `new_size`
        // with its alignment is a valid layout.
        unsafe { self.0.lock().realloc(p, layout, new_size) }
            .map_or(ptr::null_mut(), NonNull::as_ptr)
    }
}

/// Gives the heap its region: called once, before the first allocation.
///
/// # Safety
/// `start..start + size` is writable memory that nothing else uses, ever.
pub unsafe fn init(start: *mut u8, size: usize) {
    let mut heap = HEAP.0.lock();
    // SAFETY: the caller's promise; `Manual` allows claiming.
    let claimed = unsafe { heap.backing().0.claim(start, size) };
    if claimed.is_none() {
        panic!("the kernel heap region ({size} bytes at {start:p}) is too small");
    }
}

/// Bytes of kernel heap in use: the sum of the sizes asked for of the live blocks.
pub fn heap_used() -> usize {
    HEAP.0.lock().used()
}

// ---- Fault injection --------------------------------------------------------------------

/// How many [`bounded`] sections are running (`fault-inject` builds).
#[cfg(feature = "fault-inject")]
static PAUSED: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// Whether injection is paused by a [`bounded`] section (a constant `false` without the
/// `fault-inject` feature, so the allocator's test costs nothing there).
#[inline(always)]
fn injection_paused() -> bool {
    #[cfg(feature = "fault-inject")]
    {
        PAUSED.load(core::sync::atomic::Ordering::Relaxed) > 0
    }
    #[cfg(not(feature = "fault-inject"))]
    {
        false
    }
}

/// Runs `f`, whose heap allocations are made by code that cannot take a failed one (a
/// library whose allocations are infallible: the WebAssembly interpreter) and were bounded
/// and charged beforehand, at a point that could fail (`kernel/src/extension/wasm.rs`).
/// Fault injection leaves them alone, as it leaves the room made ahead elsewhere alone;
/// a real failure there would be the allocation-error panic. Under the big kernel lock
/// (so the pause may also spare another CPU's allocation meanwhile).
pub fn bounded<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(feature = "fault-inject")]
    PAUSED.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    let r = f();
    #[cfg(feature = "fault-inject")]
    PAUSED.fetch_sub(1, core::sync::atomic::Ordering::Relaxed);
    r
}

/// The `failalloc=N` period, kept from the command line until [`boot_done`].
#[cfg(feature = "fault-inject")]
static FAIL_EVERY: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Takes the command line's `failalloc=N` (if any): armed at [`boot_done`] in
/// `fault-inject` builds, reported as ignored in others.
pub fn set_fail_every(every: Option<u64>) {
    let Some(every) = every else { return };
    #[cfg(feature = "fault-inject")]
    FAIL_EVERY.store(every, core::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "fault-inject"))]
    kprintln!(
        "[kernel] ignoring failalloc={every}: this kernel was built without the \
         fault-inject feature"
    );
}

/// Boot is done and the first user tasks are about to run: from now on every Nth
/// allocation fails (`fault-inject` builds with `failalloc=N`).
#[inline]
pub fn boot_done() {
    #[cfg(feature = "fault-inject")]
    {
        let every = FAIL_EVERY.load(core::sync::atomic::Ordering::Relaxed);
        if every > 0 {
            kprintln!(
                "[kernel] fault injection: one in {every} heap, stack and frame allocations \
                 fails from now on"
            );
            kern::fault::INJECTOR.arm(every);
        }
    }
}

/// Kernel text addresses found on the stack when the last injected heap failure was
/// asked for, innermost first: a scan for return addresses (the kernel has no frame
/// pointers), so some are stale; `addr2line -e <kernel>` names them. `fault-inject` only.
#[cfg(feature = "fault-inject")]
static FAIL_TRACE: [core::sync::atomic::AtomicU64; 24] =
    [const { core::sync::atomic::AtomicU64::new(0) }; 24];

/// Fills [`FAIL_TRACE`] from the current kernel stack.
#[cfg(feature = "fault-inject")]
#[inline(never)]
fn record_fail_trace() {
    use core::sync::atomic::Ordering;
    extern "C" {
        static __text_start: u8;
        static __text_end: u8;
    }
    let (lo, hi) = (
        core::ptr::addr_of!(__text_start) as u64,
        core::ptr::addr_of!(__text_end) as u64,
    );
    let rsp: u64;
    // SAFETY: reads the stack pointer; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) rsp, options(nomem, nostack)) };
    // The scan stays between the stack pointer and the top of this CPU's kernel stack
    // (at most 16 KiB above), all of it mapped.
    let top = crate::arch::gdt::trap_stack_top();
    let end = if top > rsp && top - rsp <= 16 * 1024 {
        top
    } else {
        rsp
    };
    let mut found = 0;
    let mut at = rsp;
    while at + 8 <= end && found < FAIL_TRACE.len() {
        // SAFETY: `at` lies in `[rsp, end)`, the live part of this CPU's kernel stack,
        // which is mapped and 8-byte aligned (the stack pointer is).
        let word = unsafe { core::ptr::read_volatile(at as *const u64) };
        if (lo..hi).contains(&word) {
            if let Some(slot) = FAIL_TRACE.get(found) {
                slot.store(word, Ordering::Relaxed);
            }
            found += 1;
        }
        at += 8;
    }
    for slot in FAIL_TRACE.iter().skip(found) {
        slot.store(0, Ordering::Relaxed);
    }
}

/// Prints how many allocations were made to fail (`fault-inject` builds that armed it),
/// and stops failing them.
#[inline]
pub fn report_fault_injection() {
    #[cfg(feature = "fault-inject")]
    {
        use kern::fault::INJECTOR;
        if !INJECTOR.armed() {
            return;
        }
        INJECTOR.disarm();
        let [(hf, ha), (sf, sa), (ff, fa)] = Site::ALL.map(|s| INJECTOR.counts(s));
        kprintln!(
            "[kernel] fault injection: failed {} of {} allocations (one in {}; heap {hf} \
             of {ha}, stack {sf} of {sa}, frame {ff} of {fa})",
            hf + sf + ff,
            ha + sa + fa,
            INJECTOR.every(),
        );
        crate::arch::serial::kprint!(
            "[kernel] fault injection: last failed heap allocation from (stack scan):"
        );
        for slot in FAIL_TRACE.iter() {
            let a = slot.load(core::sync::atomic::Ordering::Relaxed);
            if a != 0 {
                crate::arch::serial::kprint!(" {a:#x}");
            }
        }
        kprintln!();
    }
}
