//! Kernel objects through capabilities: send rights to task, thread and activation ports,
//! and calls on them (see [`baton_abi::kobject`] and `docs/ipc.md`).

use baton_abi::exception::{UserRegs, USER_REGS_WORDS};
use baton_abi::ipc::{Disposition, MsgHeader, MSG_RECEIVE, MSG_SEND};
pub use baton_abi::kobject::*;
use baton_abi::{decode_result, Error, Sys};

use crate::ipc::IpcBuffer;
use crate::raw::{syscall0, syscall1};

/// Most argument words a request carries, and result words a reply carries (a
/// `*_SET_STATE`'s and a `*_GET_STATE`'s registers).
pub const RESULTS_MAX: usize = USER_REGS_WORDS;

/// `task_self()`: a send right to this task's port.
pub fn task_self() -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall0(Sys::TaskSelf as u64) })
}

/// `task_port(id)`: a send right to the port of a task this task created.
pub fn task_port(id: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall1(Sys::TaskPort as u64, id) })
}

/// `thread_port(id)`: a send right to the port of a thread of this task.
pub fn thread_port(id: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall1(Sys::ThreadPort as u64, id) })
}

/// `act_port(id)`: a send right to the port of a pool activation of this task (its control
/// capability: `ACT_INFO`, `ACT_ALERT`, `ACT_SUSPEND`, `ACT_RESUME`, `ACT_TERMINATE`).
pub fn act_port(id: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall1(Sys::ActPort as u64, id) })
}

/// Calls operation `id` with `args` on the object whose port `port` names (a send right,
/// kept), waiting for the reply on `reply` (a receive right). Returns the result words
/// and how many there are, or the operation's error.
pub fn call(
    buf: &mut IpcBuffer,
    port: u64,
    reply: u64,
    id: u64,
    args: &[u64],
    timeout_ns: u64,
) -> Result<([u64; RESULTS_MAX], usize), Error> {
    let mut data = [0u8; 8 * RESULTS_MAX];
    let n = args.len().min(RESULTS_MAX);
    for (dst, a) in data.chunks_exact_mut(8).zip(args.iter().take(n)) {
        dst.copy_from_slice(&a.to_le_bytes());
    }
    let header = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: port,
        reply,
        id,
        ..MsgHeader::default()
    };
    buf.set(header, &[], data.get(..8 * n).unwrap_or(&[]))?;
    buf.msg(MSG_SEND | MSG_RECEIVE, reply, timeout_ns)?;
    if buf.header().id != id.wrapping_add(KOBJECT_REPLY_OFFSET) {
        return Err(Error::BadFormat);
    }
    let mut words = [0u64; RESULTS_MAX + 1];
    let got = buf.data();
    let count = (got.len() / 8).min(RESULTS_MAX + 1);
    for (w, b) in words.iter_mut().zip(got.chunks_exact(8)) {
        let mut x = [0u8; 8];
        x.copy_from_slice(b);
        *w = u64::from_le_bytes(x);
    }
    match words[0] {
        0 if count >= 1 => {
            let mut out = [0u64; RESULTS_MAX];
            out.copy_from_slice(&words[1..]);
            Ok((out, count - 1))
        }
        code => Err(baton_abi::Error::from_code(code as i64).unwrap_or(Error::BadFormat)),
    }
}

/// Which object a state request names: the port's thread (its home activation:
/// `THREAD_GET_STATE`/`THREAD_SET_STATE`) or the port's pool activation
/// (`ACT_GET_STATE`/`ACT_SET_STATE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateOf {
    /// A thread port.
    Thread,
    /// An activation port (`act_port`).
    Activation,
}

impl StateOf {
    /// Its get and set operations.
    const fn ops(self) -> (u64, u64) {
        match self {
            StateOf::Thread => (THREAD_GET_STATE, THREAD_SET_STATE),
            StateOf::Activation => (ACT_GET_STATE, ACT_SET_STATE),
        }
    }
}

/// The registers of the suspended activation behind `port` (a thread or activation port,
/// as `of` says), through the port: the kernel answers once the thread has stopped there
/// (until then this call waits), as `act_get_state` does. The reply comes to `reply`.
pub fn get_state(
    buf: &mut IpcBuffer,
    port: u64,
    reply: u64,
    of: StateOf,
) -> Result<UserRegs, Error> {
    let (words, n) = call(buf, port, reply, of.ops().0, &[], baton_abi::FOREVER)?;
    let words: &[u64; USER_REGS_WORDS] = words
        .get(..n)
        .and_then(|w| w.try_into().ok())
        .ok_or(Error::BadFormat)?;
    Ok(UserRegs::from_words(words))
}

/// Sets the registers of the suspended activation behind `port` to `regs`, through the
/// port, as [`get_state`] reads them.
pub fn set_state(
    buf: &mut IpcBuffer,
    port: u64,
    reply: u64,
    of: StateOf,
    regs: &UserRegs,
) -> Result<(), Error> {
    call(
        buf,
        port,
        reply,
        of.ops().1,
        &regs.to_words(),
        baton_abi::FOREVER,
    )
    .map(|_| ())
}
