//! Task creation in Accent's steps (`docs/vm.md`, "Task creation"): an empty task, its
//! program mapped copy-on-write, its first thread, its start with arguments and
//! environment; and fork by inheritance. Each step takes the new task's port, a send
//! right the first step returns.
//!
//! [`run`] takes the four steps at once (what `spawn` does inside the kernel); a task
//! made so can be waited for by a dead-name notification on its port, which its end
//! destroys (the shell's `run` does that).

use baton_abi::start::{encode, StartError, START_DATA_MAX, START_LEN_BYTES};
use baton_abi::task::{PROGRAM_MODULE, PROGRAM_OBJECT};
use baton_abi::{decode_result, Error, Sys};

use crate::raw::{syscall2, syscall3, syscall6};

/// `task_create`: a new empty task, at most `heap` bytes of kernel memory and `frames`
/// frames (0: the default, as `spawn`); a send right to its task port.
pub fn create(heap: u64, frames: u64) -> Result<u64, Error> {
    // SAFETY: `task_create` touches no user memory.
    decode_result(unsafe { syscall2(Sys::TaskCreate as u64, heap, frames) })
}

/// `task_map_program` of boot module `name` into the new task `task`: its entry point.
pub fn map_program(task: u64, name: &str) -> Result<u64, Error> {
    map_program_raw(
        task,
        PROGRAM_MODULE,
        name.as_ptr() as u64,
        name.len() as u64,
    )
}

/// `task_map_program` of the program file this task maps, shared, at `[addr, addr + len)`
/// (a window of one memory object: a file of the file server, `docs/files.md`), with the
/// task named `name`: its entry point. The kernel reads the headers and the partial pages
/// through that mapping and maps the rest of the file copy-on-write from the object; the
/// mapping may go once the call returns.
pub fn map_object(task: u64, addr: u64, len: u64, name: &str) -> Result<u64, Error> {
    // SAFETY: the call only reads user memory, which the kernel validates.
    decode_result(unsafe {
        syscall6(
            Sys::TaskMapProgram as u64,
            task,
            PROGRAM_OBJECT,
            addr,
            len,
            name.as_ptr() as u64,
            name.len() as u64,
        )
    })
}

/// `task_map_program` with raw arguments, for tests of bad ones. Safe whatever they are:
/// the kernel only reads the name, and validates its range.
pub fn map_program_raw(task: u64, kind: u64, ptr: u64, len: u64) -> Result<u64, Error> {
    // SAFETY: the call only reads user memory, which the kernel validates.
    decode_result(unsafe { syscall6(Sys::TaskMapProgram as u64, task, kind, ptr, len, 0, 0) })
}

/// `task_init_thread`: the new task's first thread at `entry` with stack `stack_top` (0
/// and 0: the program's entry and initial stack), not running until [`start`]; its id.
pub fn init_thread(task: u64, entry: u64, stack_top: u64) -> Result<u64, Error> {
    // SAFETY: the call touches no memory of the caller's.
    decode_result(unsafe { syscall3(Sys::TaskInitThread as u64, task, entry, stack_top) })
}

/// `task_start`: the new task runs, with a send right to `bootstrap`'s port (0: none) and
/// `args` and `env` in its start message (`crate::env` reads them).
pub fn start(task: u64, bootstrap: u64, args: &[&str], env: &[(&str, &str)]) -> Result<(), Error> {
    let mut block = [0u8; START_LEN_BYTES + START_DATA_MAX];
    let (len, data) = block.split_at_mut(START_LEN_BYTES);
    let n = encode(args, env, data).map_err(|e| match e {
        StartError::TooLarge => Error::TooLarge,
        StartError::Malformed => Error::InvalidArgument,
    })?;
    len.copy_from_slice(&(n as u64).to_le_bytes());
    start_raw(task, bootstrap, block.as_ptr() as u64)
}

/// `task_start` with the start block at address `start` (0: no start message), for tests
/// of bad ones. Safe whatever `start` is: the kernel only reads it, and validates it.
pub fn start_raw(task: u64, bootstrap: u64, start: u64) -> Result<(), Error> {
    // SAFETY: the call only reads user memory, which the kernel validates.
    decode_result(unsafe { syscall3(Sys::TaskStart as u64, task, bootstrap, start) }).map(|_| ())
}

/// The four steps: boot module `name` as a new task with `args` and `env`; its task port.
/// On an error after the task exists, the task is ended through its port and the right
/// released.
pub fn run(name: &str, bootstrap: u64, args: &[&str], env: &[(&str, &str)]) -> Result<u64, Error> {
    let task = create(0, 0)?;
    let made = map_program(task, name)
        .and_then(|_| init_thread(task, 0, 0))
        .and_then(|_| start(task, bootstrap, args, env));
    if let Err(e) = made {
        let _ = terminate(task);
        let _ = crate::ipc::cap_drop(task);
        return Err(e);
    }
    Ok(task)
}

/// Ends the task whose port is `task` (`TASK_TERMINATE`, one way: no reply is asked for,
/// so it needs no IPC buffer).
pub fn terminate(task: u64) -> Result<(), Error> {
    use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE};
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: HEADER_SIZE as u32,
        dest: task,
        reply: 0,
        id: baton_abi::kobject::TASK_TERMINATE,
    };
    let mut buf = h.to_bytes();
    crate::ipc::msg_buf(&mut buf, crate::ipc::MSG_SEND, 0, 0)
}

/// What [`fork`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forked {
    /// In the parent: a send right to the child's task port.
    Parent(u64),
    /// In the child.
    Child,
}

/// `task_fork`: a new task whose memory is a copy-on-write copy of this one's (by each
/// range's inheritance; wired ranges are not inherited), with one thread continuing from
/// here. The child has no rights at all (its names are empty: the runtime's bootstrap,
/// host-privilege and start names mean nothing there) and no other thread; the calling
/// thread's IPC buffer is copied. Fork from a program whose other threads may hold a lock
/// the child needs (the heap's) is the caller's risk, as with POSIX `fork`.
pub fn fork(heap: u64, frames: u64) -> Result<Forked, Error> {
    // SAFETY: `task_fork` touches no user memory; the child resumes here with the same
    // registers and a copy of this stack, and returns 0.
    let r = decode_result(unsafe { syscall2(Sys::TaskFork as u64, heap, frames) })?;
    Ok(match r {
        0 => Forked::Child,
        port => Forked::Parent(port),
    })
}
