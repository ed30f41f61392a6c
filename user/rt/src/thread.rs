//! Threads: [`spawn`] starts a Rust function on a new thread of the calling task, and
//! [`StackPool`] hands out the stacks for it.
//!
//! # How a thread starts
//!
//! The kernel's `thread_create(entry, stack_top, arg)` starts a thread with only `rip`,
//! `rsp` and `rdi` chosen. [`spawn`] writes a two-word start record (`f`, `arg`) at the
//! 16-byte aligned top of the given stack, and creates the thread at `trampoline` with
//! `rsp` = `rdi` = the address of that record. The trampoline clears `rbp` (the end of the
//! frame-pointer chain), aligns `rsp` down to 16 bytes as the SysV ABI requires before a
//! `call`, and calls `thread_start(record)`, which reads the record, runs `f(arg)` and
//! ends the thread with [`thread_exit`]. The record lies at and above the initial `rsp`, so
//! the thread's own pushes never overwrite it before it is read.
//!
//! # Stacks
//!
//! A thread's stack is a `&'static mut [u8]` that [`spawn`] takes for good: the thread may
//! run on it until it exits, and nothing else may touch it afterwards, so it is never given
//! back (a stack is not reused after its thread exits). There is no guard page: a thread
//! that overflows its stack silently writes below it (into the neighbouring stack of a
//! [`StackPool`]). Threads on small stacks should avoid deep recursion and large locals;
//! one `println!` needs well under 1 KiB.
//!
//! [`StackPool`] is a static array of stacks in `.bss` (which the kernel's ELF loader maps
//! and zeroes when it loads the program) that hands out each stack once:
//!
//! ```ignore
//! static STACKS: StackPool<64, 4096> = StackPool::new();
//!
//! fn worker(arg: u64) { /* ... */ }
//!
//! let stack = STACKS.take().expect("out of stacks");
//! let id = baton_rt::thread::spawn(stack, worker, 7)?;
//! ```
//!
//! # Safety
//!
//! [`spawn`] is safe because the new thread runs a safe Rust function on memory nothing
//! else can reach (the `&'static mut` stack is moved into the thread and never handed back),
//! exactly as `std::thread::spawn` would. [`create_raw`] lets the caller choose any entry
//! point and stack, which is why it is `unsafe`.

use core::arch::naked_asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use baton_abi::{decode_result, Error, Sys};

use crate::raw::syscall3;
use crate::sys::thread_exit;

/// Smallest stack [`spawn`] accepts, in bytes (after aligning its top): enough for the start
/// record and a few frames.
pub const MIN_STACK: usize = 256;

/// What [`spawn`] leaves at the top of the new thread's stack for `thread_start`.
#[repr(C)]
struct StartRecord {
    /// The function the thread runs.
    f: fn(u64),
    /// Its argument.
    arg: u64,
}

/// Starts a new thread of the calling task that runs `f(arg)` on `stack` and then ends
/// with [`thread_exit`]. Returns the new thread's id (for
/// [`set_priority`](crate::sys::set_priority)).
///
/// The thread starts at the caller's priority. `stack` is taken for good, whatever the
/// outcome. A panic in `f` ends the whole task, as any panic does.
///
/// Errors: [`Error::InvalidArgument`] if `stack` is smaller than [`MIN_STACK`] once its
/// top is aligned; [`Error::NoMemory`] if the kernel cannot create another thread.
pub fn spawn(stack: &'static mut [u8], f: fn(u64), arg: u64) -> Result<u64, Error> {
    let base = stack.as_mut_ptr() as usize;
    let top = base.saturating_add(stack.len()) & !15;
    let record_size = core::mem::size_of::<StartRecord>();
    if top.saturating_sub(base) < MIN_STACK.max(record_size) {
        return Err(Error::InvalidArgument);
    }
    // The record's offset within `stack`: in bounds (checked above), 16-byte aligned.
    let offset = top - record_size - base;
    // SAFETY: `offset + size_of::<StartRecord>() <= stack.len()`, so the record lies inside
    // `stack`, which we own exclusively; `base + offset` is 16-byte aligned, more than the
    // record's alignment (8).
    let record = unsafe {
        let record = stack.as_mut_ptr().add(offset).cast::<StartRecord>();
        record.write(StartRecord { f, arg });
        record
    };
    // SAFETY: the thread starts at `trampoline` with `rsp` = `rdi` = the record we just
    // wrote, as `trampoline` expects. The stack is memory we own for `'static` and give up
    // here: `stack` is consumed, so nothing else can reach it while the thread runs or
    // afterwards. The `syscall` is a compiler barrier and the kernel orders the record's
    // write before the new thread's first instruction.
    unsafe { create_raw(trampoline as *const () as u64, record as u64, record as u64) }
}

/// `thread_create(entry, stack_top, arg)`: starts a thread of the calling task at `entry`
/// with `rsp = stack_top` and `rdi = arg`, at the caller's priority; returns its id.
///
/// # Safety
///
/// The new thread runs arbitrary code on arbitrary memory: `entry` must be code that is
/// sound to run in a new thread with those registers (it must never return: there is no
/// return address), and the stack below `stack_top` must be memory that nothing else uses
/// for as long as the thread runs. An address that is not user memory only makes the new
/// thread fault (the kernel rejects kernel addresses with [`Error::BadAddress`]).
pub unsafe fn create_raw(entry: u64, stack_top: u64, arg: u64) -> Result<u64, Error> {
    // SAFETY: `thread_create` touches no user memory itself; what the new thread does is
    // the caller's responsibility.
    decode_result(unsafe { syscall3(Sys::ThreadCreate as u64, entry, stack_top, arg) })
}

/// Where every [`spawn`]ed thread starts: `rsp` = `rdi` = its start record.
#[unsafe(naked)]
extern "C" fn trampoline() -> ! {
    naked_asm!(
        "xor ebp, ebp",
        "and rsp, -16",
        "call {start}",
        "ud2",
        start = sym thread_start,
    )
}

/// Runs the start record's function and ends the thread. Called only by [`trampoline`].
extern "C" fn thread_start(record: *const StartRecord) -> ! {
    // SAFETY: `trampoline` passes the record `spawn` wrote at the top of this thread's
    // stack, which only this thread can reach and nothing has overwritten: it lies above
    // the initial `rsp`, and the stack grows down.
    let StartRecord { f, arg } = unsafe { record.read() };
    f(arg);
    thread_exit()
}

/// `N` stacks of `SIZE` bytes each, to be handed out once each by [`take`](Self::take).
///
/// Declare it as a `static`: all-zero, it lands in `.bss`, which costs nothing in the
/// program file. The pool is page-aligned, so with `SIZE` a multiple of 4096 every stack
/// is a whole number of pages.
#[repr(C, align(4096))]
pub struct StackPool<const N: usize, const SIZE: usize> {
    /// The stacks; stack `i` is handed out at most once.
    memory: UnsafeCell<[[u8; SIZE]; N]>,
    /// How many [`take`](Self::take) calls there have been (it can run past `N`).
    next: AtomicUsize,
}

// SAFETY: the only access to `memory` is through `take`, which hands out each stack at
// most once (the atomic counter gives every caller a distinct index), so no two threads
// ever reach the same bytes through the pool.
unsafe impl<const N: usize, const SIZE: usize> Sync for StackPool<N, SIZE> {}

impl<const N: usize, const SIZE: usize> StackPool<N, SIZE> {
    /// A pool with no stack handed out yet.
    #[allow(clippy::new_without_default)] // only useful as a `static` initialiser
    pub const fn new() -> StackPool<N, SIZE> {
        StackPool {
            memory: UnsafeCell::new([[0; SIZE]; N]),
            next: AtomicUsize::new(0),
        }
    }

    /// The next unused stack, or `None` once all `N` have been handed out.
    // Each stack is handed out once (see the SAFETY comment), which is what makes a `&mut`
    // from a shared `&self` sound here.
    #[allow(clippy::mut_from_ref)]
    pub fn take(&'static self) -> Option<&'static mut [u8]> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        if index >= N {
            // Keep the counter from ever wrapping back into range.
            self.next.store(N, Ordering::Relaxed);
            return None;
        }
        // SAFETY: `index < N`, so the pointer is to stack `index` inside `memory`, derived
        // without creating a reference to the whole array. The `fetch_add` gave this call
        // an index no other call gets (the counter only grows, and is reset only to `N`,
        // which is out of range), so this is the only reference to those bytes, ever.
        let stack = unsafe { &mut *self.memory.get().cast::<[u8; SIZE]>().add(index) };
        Some(stack)
    }

    /// How many stacks are still available.
    pub fn remaining(&self) -> usize {
        N.saturating_sub(self.next.load(Ordering::Relaxed))
    }
}
