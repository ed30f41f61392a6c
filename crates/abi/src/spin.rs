//! SPIN-style extensions: events, domains and the extension system calls
//! (`docs/extensions.md`).

/// `Trap.SystemCall`: raised for a system-call number outside the base ABI. Arguments: the
/// calling task, the number and the six argument registers; result: the call's `rax`.
pub const EVENT_SYSCALL: u64 = 1;
/// `Test.Raise`: raised by [`crate::Sys::SpinRaise`] with its argument; its result is the
/// wrapping sum of its handlers' results (the combiner). For tests and benchmarks of the
/// dispatcher.
pub const EVENT_TEST: u64 = 2;

/// `Strand.Block`: raised where a virtual processor's carrier blocks in the kernel and
/// would get a Block upcall (SPIN's `Strand` events; Sting's upcalls are their default
/// handlers). A handler sees only its installer's virtual processors; it answers
/// [`STRAND_PROCEED`] (the upcall is delivered) or [`STRAND_VETO`] (no upcall: the thread
/// blocks as an ordinary thread, its processor with it).
pub const EVENT_STRAND_BLOCK: u64 = 0x5354_0001;
/// `Strand.Unblock`: a blocked thread's call completed; a veto makes its Unblock wait in
/// the queue (for `vp_take`) rather than interrupt an idle processor.
pub const EVENT_STRAND_UNBLOCK: u64 = 0x5354_0002;
/// `Strand.Checkpoint`: the kernel preempts a carrier running a user-level thread; a veto
/// leaves the thread running (no Checkpoint upcall this time). Any other answer but
/// [`STRAND_PROCEED`] chooses the thread that runs next: it is the user address of a
/// saved register record (`exception::UserRegs` in words, as `vp_resume` reads it), and
/// the kernel swaps it with the preempted thread's registers (the record then holds the
/// preempted thread) and resumes the chosen thread, with no upcall. A record it cannot
/// read or write, or whose `rip` or `rsp` is not a user address, is not taken: the upcall
/// is delivered.
pub const EVENT_STRAND_CHECKPOINT: u64 = 0x5354_0003;
/// `Strand.Resume`: a runtime resumes a saved user-level thread (`vp_resume`); a veto
/// fails the call with `Denied`.
pub const EVENT_STRAND_RESUME: u64 = 0x5354_0004;
/// A `Strand` handler's answer: go on with the default (the upcall, or the resume).
pub const STRAND_PROCEED: u64 = 0;
/// A `Strand` handler's answer: do not.
pub const STRAND_VETO: u64 = 1;

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

/// `spin_tier`'s `which`: invocations the register-form tier ran.
pub const TIER_FAST: u64 = 0;
/// `spin_tier`'s `which`: invocations `wasmi` ran.
pub const TIER_WASMI: u64 = 1;

/// The notification a handler's installer gets when the handler was aborted (out of
/// fuel, a trap, an access outside its linear memory) and removed: a message with this
/// id whose word is the handler id.
pub const NOTIFY_ABORTED: u64 = 0x5350_0001;

/// Or'ed into `spin_install`'s event word: the handler is asynchronous (SPIN's handler
/// constraint): a raise does not run it; a kernel worker (a processor's idle thread) runs
/// it afterwards, and its result is not the raise's. Only `Test.Raise` takes such
/// handlers (`NotSupported` elsewhere).
pub const INSTALL_ASYNC: u64 = 1 << 31;
/// Most raises of one installer's asynchronous handlers waiting to run; a raise past it
/// is counted ([`ASYNC_DROPPED`]) and dropped.
pub const ASYNC_PENDING_MAX: u64 = 16;
/// `spin_async`'s `which`: raises waiting to run.
pub const ASYNC_PENDING: u64 = 0;
/// `spin_async`'s `which`: asynchronous invocations that have run.
pub const ASYNC_RAN: u64 = 1;
/// `spin_async`'s `which`: raises dropped (past the bound, or no memory).
pub const ASYNC_DROPPED: u64 = 2;

/// Most domains one task may hold.
pub const DOMAINS_MAX: usize = 32;
