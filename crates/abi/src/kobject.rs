//! Kernel objects through capabilities: tasks, threads and activations are ports.
//!
//! Every task and every thread has a port whose receive right the kernel keeps (made at
//! the first request for it): `task_self` gives a task a send right to its own task port,
//! `task_port(id)` to the task port of a task it created, `thread_port(id)` to the port of
//! one of its threads (which stands for the thread's home activation), `act_port(id)` to
//! the port of one of its pool activations (seed 001: the activation's control
//! capability). A message sent to such a port is an operation on the object, done
//! by the kernel in the sender's `ipc_msg`, and answered through the request's reply right
//! like any RPC — so a user server that holds the right can stand in for the object, and a
//! debugger can interpose by handing out a send right to a port of its own and forwarding.
//!
//! The wire form follows the interface macro's conventions (`docs/idl.md`): request data
//! is the arguments as little-endian `u64`s; the reply has id = request id +
//! [`KOBJECT_REPLY_OFFSET`] and data = a `u64` result code (0 for success, else the
//! [`crate::Error`] code as a positive number) followed by the results. A request without a
//! reply right is done and not answered. An unknown id is answered with
//! `Error::NotSupported`, short data with `Error::InvalidArgument`.

/// A reply's id is its request's id plus this.
pub const KOBJECT_REPLY_OFFSET: u64 = 100;

/// First id of the task operations.
pub const TASK_BASE: u64 = 0x4b0b_0000;
/// Task: end the task (its threads are terminated). No results. A task ending itself this
/// way gets no reply.
pub const TASK_TERMINATE: u64 = TASK_BASE;
/// Task: `[entry, stack_top, arg]` → `[thread id]`: a new thread in the task, starting at
/// `entry` with `rsp` = `stack_top` and `rdi` = `arg` (as `thread_create`).
pub const TASK_THREAD_CREATE: u64 = TASK_BASE + 1;
/// Task: `[queue_limit]` → `[name]`: a new port whose receive right goes into the task's
/// name space, under the name returned (as `port_allocate` in that task).
pub const TASK_PORT_ALLOCATE: u64 = TASK_BASE + 2;
/// Task: → `[task id, live threads]`.
pub const TASK_INFO: u64 = TASK_BASE + 3;

/// First id of the thread operations.
pub const THREAD_BASE: u64 = 0x4b0b_0100;
/// Thread: end the thread. No results. A thread ending itself this way gets no reply.
pub const THREAD_TERMINATE: u64 = THREAD_BASE;
/// Thread: → `[thread id, task id, state, rip, rsp]`: what the thread is doing (state 0
/// running, 1 ready, 2 blocked) and its saved user `rip` and `rsp` (those of its last
/// entry to the kernel; stale while it runs).
pub const THREAD_INFO: u64 = THREAD_BASE + 1;

/// Thread: alert the thread's home activation and every activation above it on the
/// thread (as `act_alert(0, id)`). No results.
pub const THREAD_ALERT: u64 = THREAD_BASE + 2;
/// Thread: suspend the thread's home activation (counted; as `act_suspend(0, id, 1)`: the
/// thread stops only when it would run user code at home). No results.
pub const THREAD_SUSPEND: u64 = THREAD_BASE + 3;
/// Thread: undo one [`THREAD_SUSPEND`] (`Error::InvalidArgument` if not suspended). No
/// results.
pub const THREAD_RESUME: u64 = THREAD_BASE + 4;
/// Thread: → the [`USER_REGS_WORDS`](crate::exception::USER_REGS_WORDS) words of
/// [`UserRegs`](crate::exception::UserRegs) (`to_words`) of the thread's suspended home
/// activation, as `act_get_state(0, id, ..)`: the request waits (the sender blocks before
/// its message is taken, and sends it again when woken) until the thread has stopped
/// there. `Error::InvalidArgument` when that activation is not suspended, or for the
/// sender's own thread.
pub const THREAD_GET_STATE: u64 = THREAD_BASE + 5;
/// Thread: `[the USER_REGS_WORDS words of UserRegs]` → no results: sets the registers of
/// the thread's suspended home activation (checked as an exception handler's reply is), as
/// `act_set_state(0, id, ..)`; waits as [`THREAD_GET_STATE`] does.
/// `Error::InvalidArgument` also for any other number of words.
pub const THREAD_SET_STATE: u64 = THREAD_BASE + 6;

/// First id of the activation operations (on the port `act_port` gives).
pub const ACT_BASE: u64 = 0x4b0b_0200;
/// Activation: → `[activation id, task id, occupied (0/1), occupant thread id (0 when
/// free)]`.
pub const ACT_INFO: u64 = ACT_BASE;
/// Activation: alert it and every activation above it (while a call occupies it;
/// `Error::NotFound` when free). No results.
pub const ACT_ALERT: u64 = ACT_BASE + 1;
/// Activation: suspend it (counted; while a call occupies it): the thread stops when it
/// would run user code in it. No results.
pub const ACT_SUSPEND: u64 = ACT_BASE + 2;
/// Activation: undo one [`ACT_SUSPEND`]. No results.
pub const ACT_RESUME: u64 = ACT_BASE + 3;
/// Activation: terminate the call occupying it, at once: the caller's `ipc_msg` fails
/// with `Error::Aborted`. When activations above it (nested calls) are running, the
/// thread splits (seed 001 section 5): the caller goes on as a new thread, and the part
/// above goes on with an alert and ends when it returns into the terminated activation.
/// The activation goes back to its pool. `Error::NotFound` when free. No results.
pub const ACT_TERMINATE: u64 = ACT_BASE + 4;
/// Activation: [`THREAD_GET_STATE`] for the activation (suspended, occupied by a call).
pub const ACT_GET_STATE: u64 = ACT_BASE + 5;
/// Activation: [`THREAD_SET_STATE`] for the activation (suspended, occupied by a call).
pub const ACT_SET_STATE: u64 = ACT_BASE + 6;

/// [`THREAD_INFO`] state: running on a CPU.
pub const THREAD_RUNNING: u64 = 0;
/// [`THREAD_INFO`] state: ready to run.
pub const THREAD_READY: u64 = 1;
/// [`THREAD_INFO`] state: blocked.
pub const THREAD_BLOCKED: u64 = 2;

/// First id of the host-privilege port's operations (none yet).
///
/// The *host-privilege port* (after Mach's privileged host port) is a kernel object that
/// stands for the authority to make the debugging and benchmark calls: the ones a program
/// should not rely on, which let a task pin kernel memory or enter another task's address
/// space (`debug_block_process_model`, `floor_xas_register`). Those calls take the
/// caller's name for a send right to it and fail with `Error::Denied` without one. The
/// kernel makes the port at boot and gives a send right only to the boot tasks the command
/// line marks privileged (`priv=a,b`: boot modules `a` and `b` of `init=`), in `rdx` of
/// their first thread; never to a task started with `spawn`, whatever its module. A
/// holder may pass the right on like any send right (as `spawn`'s bootstrap right, in a
/// message). A message to the port is answered `Error::NotSupported`.
pub const HOST_PRIV_BASE: u64 = 0x4b0b_0300;
