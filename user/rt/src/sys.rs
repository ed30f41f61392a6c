//! Safe wrappers around Baton's system calls, one per [`Sys`] number.
//!
//! Each returns a `Result` decoded with [`decode_result`], except where the call cannot
//! fail ([`yield_now`], [`clock_ns`], [`null`]) or does not return ([`exit`], [`thread_exit`]).
//! `thread_create` is not here: starting a thread on a caller-chosen stack is not safe in
//! general, so it lives in [`crate::thread`] as an `unsafe fn` and a safe
//! [`spawn`](crate::thread::spawn).
//!
//! # Invariants
//!
//! The kernel writes user memory only in [`module_info`] and [`stats`], and only into a
//! record this module owns. The `*_raw` functions take caller-chosen addresses but at most
//! let the kernel read them; the kernel validates every address, so they are safe whatever
//! the address.

use core::sync::atomic::AtomicU32;

use baton_abi::{decode_result, Error, ModuleInfo, Stats, Sys, DEBUG_WRITE_MAX};

use crate::raw::{syscall0, syscall1, syscall2, syscall3, syscall6};

/// Writes `bytes` to the kernel console (the kernel prefixes each line with the task's
/// name). Longer buffers are split into calls of at most [`DEBUG_WRITE_MAX`] bytes.
/// Returns the number of bytes written.
pub fn debug_write(bytes: &[u8]) -> Result<usize, Error> {
    let mut done = 0usize;
    while let Some(rest) = bytes.get(done..).filter(|rest| !rest.is_empty()) {
        let chunk_len = rest.len().min(DEBUG_WRITE_MAX as usize);
        let written = debug_write_raw(rest.as_ptr() as u64, chunk_len as u64)?;
        if written == 0 {
            break;
        }
        done = done.saturating_add((written as usize).min(chunk_len));
    }
    Ok(done)
}

/// `debug_write` with an arbitrary address and length, for tests that pass bad ones.
///
/// Safe whatever the arguments: the kernel only reads the range, and validates it first
/// (an address that is not mapped user memory gives [`Error::BadAddress`], more than
/// [`DEBUG_WRITE_MAX`] bytes [`Error::TooLarge`]).
pub fn debug_write_raw(ptr: u64, len: u64) -> Result<u64, Error> {
    // SAFETY: `debug_write` only reads user memory, and the kernel validates the range.
    decode_result(unsafe { syscall2(Sys::DebugWrite as u64, ptr, len) })
}

/// Gives up the processor to the next ready thread, if there is one.
pub fn yield_now() {
    // SAFETY: `yield` touches no user memory.
    let _ = unsafe { syscall0(Sys::Yield as u64) };
}

/// Ends the calling task with `code`, which the kernel reports.
pub fn exit(code: i32) -> ! {
    // SAFETY: `exit` touches no user memory. The code is sign-extended to 64 bits.
    unsafe { syscall1(Sys::Exit as u64, i64::from(code) as u64) };
    // The kernel never returns from `exit`; if it did, fault rather than run on.
    // SAFETY: `ud2` raises an invalid-opcode exception, which ends this task.
    unsafe { core::arch::asm!("ud2", options(noreturn, nomem, nostack)) }
}

/// Does nothing in the kernel and returns: the floor of a system call (for benchmarks).
pub fn null() {
    // SAFETY: `null` touches no user memory.
    let _ = unsafe { syscall0(Sys::Null as u64) };
}

/// Nanoseconds since the machine was reset (from the kernel's calibrated TSC).
pub fn clock_ns() -> u64 {
    // SAFETY: `clock` touches no user memory.
    unsafe { syscall0(Sys::Clock as u64) }
}

/// Starts the boot module called `name` as a new task; returns its task id.
///
/// [`Error::NotFound`] if there is no such module, [`Error::BadFormat`] if it is not a
/// valid executable.
pub fn spawn(name: &str) -> Result<u64, Error> {
    spawn_raw(name.as_ptr() as u64, name.len() as u64)
}

/// Starts boot module `name` as a new task that gets a send right to the port of
/// `bootstrap` (a send or receive right of the caller; the child finds its name with
/// [`crate::start::bootstrap`]). Returns the task id.
pub fn spawn_with(name: &str, bootstrap: u64) -> Result<u64, Error> {
    spawn_limited(name, bootstrap, 0, 0)
}

/// [`spawn_with`], giving the new task at most `heap` bytes of kernel memory and `frames`
/// physical frames (0: the default), each clamped to the caller's own limit: what the
/// child and the tasks it creates may make the kernel hold is counted against the
/// caller's limits too.
pub fn spawn_limited(name: &str, bootstrap: u64, heap: u64, frames: u64) -> Result<u64, Error> {
    // SAFETY: `spawn` only reads user memory, and the kernel validates the range.
    decode_result(unsafe {
        syscall6(
            Sys::Spawn as u64,
            name.as_ptr() as u64,
            name.len() as u64,
            bootstrap,
            heap,
            frames,
            0,
        )
    })
}

/// [`spawn_with`], handing the new task its arguments and environment in a start message
/// (`baton_abi::start`; it reads them with [`crate::env`]). [`Error::TooLarge`] when they
/// do not fit [`baton_abi::start::START_DATA_MAX`] bytes, [`Error::InvalidArgument`] for a
/// string with a zero byte or a variable name with `=`.
pub fn spawn_args(
    name: &str,
    bootstrap: u64,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<u64, Error> {
    use baton_abi::start::{encode, StartError, START_DATA_MAX, START_LEN_BYTES};
    let mut block = [0u8; START_LEN_BYTES + START_DATA_MAX];
    let (len, data) = block.split_at_mut(START_LEN_BYTES);
    let n = encode(args, env, data).map_err(|e| match e {
        StartError::TooLarge => Error::TooLarge,
        StartError::Malformed => Error::InvalidArgument,
    })?;
    len.copy_from_slice(&(n as u64).to_le_bytes());
    spawn_start_raw(name, bootstrap, block.as_ptr() as u64)
}

/// `spawn` of `name` with `bootstrap` and the start block at address `start` (a length
/// word and the data: `baton_abi::start`), for tests that pass bad ones. Safe whatever
/// `start` is: the kernel only reads it, and validates it.
pub fn spawn_start_raw(name: &str, bootstrap: u64, start: u64) -> Result<u64, Error> {
    // SAFETY: `spawn` only reads user memory (the name and the start block), and the
    // kernel validates both ranges.
    decode_result(unsafe {
        syscall6(
            Sys::Spawn as u64,
            name.as_ptr() as u64,
            name.len() as u64,
            bootstrap,
            0,
            0,
            start,
        )
    })
}

/// `spawn` with an arbitrary name address and length, for tests that pass bad ones.
///
/// Safe whatever the arguments: the kernel only reads the name, and validates the range
/// first ([`Error::BadAddress`] if it is not mapped user memory).
pub fn spawn_raw(name_ptr: u64, name_len: u64) -> Result<u64, Error> {
    // SAFETY: `spawn` only reads user memory, and the kernel validates the range.
    decode_result(unsafe { syscall6(Sys::Spawn as u64, name_ptr, name_len, 0, 0, 0, 0) })
}

/// Describes boot module `index`; [`Error::NotFound`] past the last one.
pub fn module_info(index: usize) -> Result<ModuleInfo, Error> {
    module_info_kind(index).map(|(info, _)| info)
}

/// [`module_info`], and whether the module is a test program (not one a person runs: the
/// boot image keeps those apart, `cargo xtask build`).
pub fn module_info_kind(index: usize) -> Result<(ModuleInfo, bool), Error> {
    let mut info = ModuleInfo::empty();
    let ptr = &raw mut info;
    // SAFETY: the kernel writes one `ModuleInfo` through `ptr`, which points to a local
    // record of exactly that type that nothing else borrows; every bit pattern is a valid
    // `ModuleInfo` (integers and bytes only).
    let raw = unsafe { crate::raw::syscall2(Sys::ModuleInfo as u64, index as u64, ptr as u64) };
    decode_result(raw).map(|flags| (info, flags & baton_abi::MODULE_TEST != 0))
}

/// Blocks the calling thread while the word at `word` holds `expected`: until a [`wake`] on
/// that word, or until `timeout_ns` nanoseconds have passed ([`FOREVER`](baton_abi::FOREVER) = no timeout).
///
/// The kernel compares the word with `expected` and queues the thread atomically with
/// respect to [`wake`], so the usual pattern is race-free: load the word, decide to sleep,
/// then `wait` with the value loaded. If another thread changed the word and called `wake`
/// in between, `wait` returns [`Error::WouldBlock`] at once instead of sleeping through the
/// wake-up.
///
/// `Ok(())` means a `wake` on this word happened, not that the word changed: a wake meant
/// for an earlier round can arrive late. Callers re-check the word in a loop, as
/// [`crate::sync::wait_until`] does.
///
/// Errors: [`Error::WouldBlock`] if the word does not hold `expected`;
/// [`Error::TimedOut`] if the timeout expired first.
pub fn wait(word: &AtomicU32, expected: u32, timeout_ns: u64) -> Result<(), Error> {
    wait_raw(word.as_ptr() as u64, expected, timeout_ns)
}

/// [`wait`] with an arbitrary address, for tests that pass bad ones.
///
/// Safe whatever the address: the kernel only reads the word, after checking that `addr`
/// is 4-byte aligned ([`Error::InvalidArgument`] if not) and mapped user memory
/// ([`Error::BadAddress`] if not).
pub fn wait_raw(addr: u64, expected: u32, timeout_ns: u64) -> Result<(), Error> {
    // SAFETY: `wait` only reads user memory, and the kernel validates the address.
    let raw = unsafe { syscall3(Sys::Wait as u64, addr, u64::from(expected), timeout_ns) };
    decode_result(raw).map(|_| ())
}

/// Wakes up to `n` threads blocked in [`wait`] on `word`, oldest first (`u64::MAX` wakes
/// them all). Returns how many were woken; zero is not an error.
///
/// Store the new value before waking (with `Release` or stronger ordering), so that the
/// woken threads see it.
pub fn wake(word: &AtomicU32, n: u64) -> Result<u64, Error> {
    wake_raw(word.as_ptr() as u64, n)
}

/// [`wake`] with an arbitrary address, for tests that pass bad ones.
///
/// Safe whatever the address: the kernel does not access the word at all, it only uses the
/// address to find the threads waiting on it.
pub fn wake_raw(addr: u64, n: u64) -> Result<u64, Error> {
    // SAFETY: `wake` touches no user memory.
    decode_result(unsafe { syscall2(Sys::Wake as u64, addr, n) })
}

/// Blocks the calling thread for at least `ns` nanoseconds.
pub fn sleep_ns(ns: u64) -> Result<(), Error> {
    // SAFETY: `sleep` touches no user memory.
    decode_result(unsafe { syscall1(Sys::Sleep as u64, ns) }).map(|_| ())
}

/// Maps fresh zero-filled pages at `[addr, addr + len)` (page aligned, user range, nothing
/// mapped there yet); writable when `writable`.
///
/// Mapping new pages where nothing was mapped cannot change memory Rust code already uses,
/// so this is safe; using the pages is up to the caller (through raw pointers).
pub fn mem_map(addr: u64, len: u64, writable: bool) -> Result<(), Error> {
    let flags = if writable { baton_abi::MAP_WRITABLE } else { 0 };
    // SAFETY: the kernel only adds mappings where there were none.
    decode_result(unsafe { syscall3(Sys::MemMap as u64, addr, len, flags) }).map(|_| ())
}

/// Unmaps the pages in `[addr, addr + len)`; returns how many were mapped. Every thread of
/// the task faults on them afterwards, on every CPU.
///
/// # Safety
/// No Rust reference may point into the range (its memory disappears).
pub unsafe fn mem_unmap(addr: u64, len: u64) -> Result<u64, Error> {
    // SAFETY: forwarded to the caller.
    decode_result(unsafe { syscall2(Sys::MemUnmap as u64, addr, len) })
}

/// The kernel's always-on counters (see [`Stats`] for each field).
pub fn stats() -> Result<Stats, Error> {
    let mut stats = Stats::default();
    let ptr = &raw mut stats;
    // SAFETY: the kernel writes one `Stats` through `ptr`, which points to a local record
    // of exactly that type that nothing else borrows; every bit pattern is a valid `Stats`
    // (`u64` fields only).
    let raw = unsafe { syscall1(Sys::Stats as u64, ptr as u64) };
    decode_result(raw).map(|_| stats)
}

/// Sets the priority of `thread` (a thread id of the calling task, or 0 for the calling
/// thread) to `priority`, from 0 (lowest) to [`PRIORITY_MAX`](baton_abi::PRIORITY_MAX); threads start at
/// [`PRIORITY_DEFAULT`](baton_abi::PRIORITY_DEFAULT) or, if created by
/// [`thread::spawn`](crate::thread::spawn), at their creator's priority.
///
/// [`Error::InvalidArgument`] for a priority above
/// [`PRIORITY_MAX`](baton_abi::PRIORITY_MAX).
pub fn set_priority(thread: u64, priority: u64) -> Result<(), Error> {
    // SAFETY: `set_priority` touches no user memory.
    decode_result(unsafe { syscall2(Sys::SetPriority as u64, thread, priority) }).map(|_| ())
}

/// Pins `thread` (0 = the calling thread) of this task to CPU `cpu`, or lets it run on
/// any CPU again with [`CPU_ANY`](baton_abi::CPU_ANY). A running thread moves when it
/// next blocks or is preempted.
///
/// [`Error::InvalidArgument`] for a CPU that is not online; [`Error::NotFound`] for a
/// thread that is not one of this task's.
pub fn set_affinity(thread: u64, cpu: u64) -> Result<(), Error> {
    // SAFETY: `set_affinity` touches no user memory.
    decode_result(unsafe { syscall2(Sys::SetAffinity as u64, thread, cpu) }).map(|_| ())
}

/// The CPU time `thread` (0 = the calling thread) of this task has used, in nanoseconds.
/// A migrating call's time in the server counts as the calling thread's.
pub fn thread_cpu_ns(thread: u64) -> Result<u64, Error> {
    // SAFETY: `thread_cpu_ns` touches no user memory.
    decode_result(unsafe { syscall1(Sys::ThreadCpuNs as u64, thread) })
}

/// Ends the calling thread. The task ends (with exit code 0) when its last thread has
/// ended; [`exit`] ends every thread of the task at once.
pub fn thread_exit() -> ! {
    // SAFETY: `thread_exit` touches no user memory.
    unsafe { syscall0(Sys::ThreadExit as u64) };
    // The kernel never returns from `thread_exit`; if it did, fault rather than run on.
    // SAFETY: `ud2` raises an invalid-opcode exception, which ends this task.
    unsafe { core::arch::asm!("ud2", options(noreturn, nomem, nostack)) }
}

/// Blocks the calling thread in the kernel's *process model* (keeping its kernel stack)
/// for `ns` nanoseconds and returns what the kernel computed from `seed` before blocking,
/// which must equal [`baton_abi::process_model_check`]`(seed)`.
///
/// The result travels in `rax` like any other, so a value with the top bit set cannot be
/// told from an error: tests pick seeds whose check value is below `2^63`.
///
/// `host_priv` names the caller's send right to the host-privilege port
/// ([`crate::start::host_priv`]); without it the call fails with [`Error::Denied`].
pub fn debug_block_process_model(ns: u64, seed: u64, host_priv: u64) -> Result<u64, Error> {
    // SAFETY: `debug_block_process_model` touches no user memory.
    decode_result(unsafe { syscall3(Sys::DebugBlockProcessModel as u64, ns, seed, host_priv) })
}
