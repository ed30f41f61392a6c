//! Program entry.
//!
//! The kernel starts a task's first thread at the ELF entry point with `rsp` =
//! [`USER_STACK_TOP`](baton_abi::layout::USER_STACK_TOP) (16-byte aligned, nothing
//! pushed), `rdi` = the task id and every other register zero. [`entry!`](crate::entry)
//! emits that entry point, `_start`, in the program's own crate (so the linker cannot
//! leave it out): a naked function that clears `rbp` (the end of the frame-pointer
//! chain), aligns `rsp` to 16 bytes as the SysV ABI requires before a `call`, and calls
//! [`__start`] through a small `extern "C"` shim with the task id still in `rdi`, the
//! bootstrap right's name (see [`bootstrap`]) in `rsi`, the host-privilege right's (see
//! [`host_priv`]) in `rdx` and the start port's (see [`start_port`]) in `rcx`.

use core::sync::atomic::{AtomicU64, Ordering};

/// The task's name for the send right its creator gave it, 0 for none.
static BOOTSTRAP: AtomicU64 = AtomicU64::new(0);

/// The task's name for its send right to the host-privilege port, 0 for none.
static HOST_PRIV: AtomicU64 = AtomicU64::new(0);
/// The task's name for its start port (the receive right on which its start message, its
/// arguments and environment, waits: `baton_abi::start`), 0 for none.
static START: AtomicU64 = AtomicU64::new(0);

/// The task's start port: a receive right on which its creator's start message (the
/// arguments and environment, `baton_abi::start`) is queued, or 0 when it was given none
/// (boot tasks). [`crate::env`] reads it.
pub fn start_port() -> u64 {
    START.load(Ordering::Relaxed)
}

/// The task's name for the send right to the host-privilege port the kernel gave it at
/// boot (`priv=` on the command line, `baton_abi::kobject::HOST_PRIV_BASE`), or 0: the
/// authority the debugging and benchmark calls take. A task that got the right another
/// way (as its bootstrap right, in a message) knows that name instead.
pub fn host_priv() -> u64 {
    HOST_PRIV.load(Ordering::Relaxed)
}

/// The task's bootstrap right: its name for a send right to the port its creator passed
/// to `spawn` ([`crate::sys::spawn_with`]), or 0 when it was given none.
pub fn bootstrap() -> u64 {
    BOOTSTRAP.load(Ordering::Relaxed)
}

/// Runs the program's `main` and exits with its result. Called only by the `_start` that
/// [`entry!`](crate::entry) emits.
#[doc(hidden)]
pub fn __start(
    task_id: u64,
    bootstrap: u64,
    host_priv: u64,
    start: u64,
    main: fn(u64) -> i32,
) -> ! {
    BOOTSTRAP.store(bootstrap, Ordering::Relaxed);
    HOST_PRIV.store(host_priv, Ordering::Relaxed);
    START.store(start, Ordering::Relaxed);
    let code = main(task_id);
    crate::sys::exit(code)
}

/// Declares the program's `main`, a `fn(task_id: u64) -> i32` whose result is the task's
/// exit code, and emits the entry point `_start` that calls it.
///
/// ```ignore
/// baton_rt::entry!(main);
///
/// fn main(task_id: u64) -> i32 {
///     0
/// }
/// ```
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        const _: () = {
            /// The ELF entry point: `rsp` = user stack top, `rdi` = task id, `rsi` =
            /// bootstrap right, `rdx` = host-privilege right, `rcx` = start port.
            #[unsafe(naked)]
            #[unsafe(no_mangle)]
            extern "C" fn _start() -> ! {
                ::core::arch::naked_asm!(
                    "xor ebp, ebp",
                    "and rsp, -16",
                    "call {entry}",
                    "ud2",
                    entry = sym __baton_entry,
                )
            }

            extern "C" fn __baton_entry(
                task_id: u64,
                bootstrap: u64,
                host_priv: u64,
                start: u64,
            ) -> ! {
                let main: fn(u64) -> i32 = $main;
                $crate::start::__start(task_id, bootstrap, host_priv, start, main)
            }
        };
    };
}
