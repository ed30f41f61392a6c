//! SPIN-style extensions: events, domains and the extension system calls
//! (`docs/extensions.md`).

/// `Trap.SystemCall`: raised for a system-call number outside the base ABI. Arguments: the
/// calling task, the number and the six argument registers; result: the call's `rax`.
pub const EVENT_SYSCALL: u64 = 1;
/// `Test.Raise`: raised by [`crate::Sys::SpinRaise`] with its argument; its result is the
/// wrapping sum of its handlers' results (the combiner). For tests and benchmarks of the
/// dispatcher.
pub const EVENT_TEST: u64 = 2;

/// The system-call numbers an extension may claim for `Trap.SystemCall`
/// (`0x1000..0x2000`): outside the base ABI and the floor calls, now and later.
pub const EXT_SYSCALL_FIRST: u64 = 0x1000;
/// One past the last.
pub const EXT_SYSCALL_END: u64 = 0x2000;

/// Largest WebAssembly module the kernel takes.
pub const MODULE_MAX: usize = 64 * 1024;
/// Largest linear memory a module may have (pages of 64 KiB): 1 MiB.
pub const MEMORY_PAGES_MAX: u64 = 16;
/// Fuel of one handler invocation (about one wasm instruction per unit).
pub const FUEL: u64 = 100_000;

/// The notification a handler's installer gets when the handler was aborted (out of
/// fuel, a trap, an access outside its linear memory) and removed: a message with this
/// id whose word is the handler id.
pub const NOTIFY_ABORTED: u64 = 0x5350_0001;

/// Most domains one task may hold.
pub const DOMAINS_MAX: usize = 32;
