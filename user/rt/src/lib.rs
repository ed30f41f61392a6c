//! `baton-rt`: the runtime every Baton user program links against.
//!
//! It provides
//!
//! - the program entry point: [`entry!`] emits `_start`, which aligns the stack, calls the
//!   program's `main(task_id) -> i32` and passes its result to [`exit`];
//! - the system calls of [`baton_abi`]: raw `syscall` instruction sequences in [`raw`]
//!   and safe wrappers around them in [`sys`] (re-exported here);
//! - console output: [`print!`] and [`println!`] format into a fixed stack buffer and write
//!   it with [`debug_write`], with no heap;
//! - a heap ([`heap`], cargo feature `heap`, on by default): a global allocator over pages
//!   mapped on demand, so programs can use `extern crate alloc` (`Vec`, `String`, `Box`,
//!   `BTreeMap`); [`heap::mapped_bytes`] is what it holds from the kernel;
//! - a panic handler that prints `panic: <message> at <file>:<line>:<column>` and exits
//!   with [`PANIC_EXIT_CODE`];
//! - [`rdtsc`], the time-stamp counter, which under QEMU's `-icount shift=0` counts
//!   instructions, and [`rdtsc_ordered`], its serialised form for benchmarks;
//! - threads: [`thread::spawn`] runs a `fn(u64)` on a new thread of the task, on a stack
//!   from a [`thread::StackPool`]; [`wait`]/[`wake`] block on and wake up a 32-bit word,
//!   and [`sync`] builds [`sync::wait_until`], [`sync::Counter`] and [`sync::RawMutex`] on
//!   them;
//! - the kernel's counters: [`stats`], printed field by field or as one line by
//!   [`report`];
//! - remote calls: [`rpc::Rpc`], the transport of the stubs the interface macro
//!   ([`interface`], runtime [`idl_rt`]) generates, and [`rpc::serve`], a server loop;
//!   [`names`], the name service's interface;
//! - the host-privilege calls and drivers' objects ([`host`]): interrupt lines as
//!   notifications, I/O ports, and the listings of tasks, threads and rights.
//!
//! A program looks like this:
//!
//! ```ignore
//! #![no_std]
//! #![no_main]
//!
//! baton_rt::entry!(main);
//!
//! fn main(task_id: u64) -> i32 {
//!     baton_rt::println!("hello from task {task_id}");
//!     0
//! }
//! ```
//!
//! # Invariants
//!
//! - Every system call goes through [`raw`], which follows the register convention of
//!   [`baton_abi`] exactly; nothing else in user space issues `syscall`.
//! - Safe functions never ask the kernel to write to memory they do not own; those that
//!   pass a caller-chosen address (the `*_raw` functions) only let the kernel *read* it, and
//!   the kernel validates every user address, so a bad one is an error return, not
//!   undefined behaviour.
//! - A new thread is started safely only by [`thread::spawn`], on a `&'static mut` stack it
//!   takes for good, running a safe function; the raw `thread_create`
//!   ([`thread::create_raw`]) is `unsafe`. (Not to be confused with [`spawn`], which starts
//!   a boot module as a new *task*.)
#![no_std]

#[cfg(feature = "heap")]
extern crate alloc;

pub mod check;
pub mod cpu;
#[cfg(feature = "heap")]
pub mod env;
pub mod exception;
pub mod floor;
#[cfg(feature = "heap")]
pub mod heap;
#[cfg(feature = "heap")]
pub mod host;
pub mod io;
pub mod ipc;
pub mod kobject;
pub mod mem;
pub mod memobj;
pub mod migrate;
pub mod names;
pub mod pager;
pub mod paging;
pub mod raw;
pub mod report;
pub mod rpc;
pub mod spin;
pub mod spinvm;
pub mod start;
pub mod sync;
pub mod sys;
pub mod task;
pub mod thread;
pub mod vm;
pub mod vproc;

mod panic;

pub use baton_abi::{Error, ModuleInfo, Stats, FOREVER};
/// The interface macro, for programs that depend only on `baton-rt`: they name the runtime
/// with `#[baton_rt::interface(base = N, rt = baton_rt::idl_rt)]`.
pub use baton_idl::interface;
/// The runtime of the interface macro's generated code.
pub use baton_idl_rt as idl_rt;
pub use cpu::{rdtsc, rdtsc_ordered};
pub use sys::{
    clock_ns, debug_block_process_model, debug_write, debug_write_raw, exit, mem_map, mem_unmap,
    module_info, null, set_affinity, set_priority, sleep_ns, spawn, spawn_raw, spawn_with, stats,
    thread_exit, wait, wait_raw, wake, wake_raw, yield_now,
};

/// Exit code of a task whose program panicked.
pub const PANIC_EXIT_CODE: i32 = 101;
