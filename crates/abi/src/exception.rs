//! Exceptions as messages (the continuations paper, section 2.5; Mach's
//! `exception_raise`).
//!
//! When a user thread takes a CPU exception (a fault, a breakpoint, an invalid opcode...)
//! or makes a system call with an unknown number, the kernel sends an [`EXC_RAISE`]
//! message to the thread's exception port, or, if it has none, its task's (set with
//! `exception_port_set`). The message's in-line data is an [`ExceptionInfo`]; its reply
//! right is a send-once right to a port the kernel receives on for that thread. The
//! thread waits until the handler replies through that right:
//!
//! - [`EXC_REPLY_RETRY`] (data: one `u64`): resume with the registers as they were (a
//!   fault retries the instruction, e.g. after the handler mapped the page);
//! - [`EXC_REPLY_SET`] (data: the `u64` action, then a [`UserRegs`]): resume with these
//!   registers. `rip` and `rsp` must be user addresses; of `rflags` only the arithmetic
//!   flags, `TF` and `DF` are taken, interrupts stay enabled;
//! - [`EXC_REPLY_KILL`], any malformed reply, or no reply at all (the handler dropped the
//!   right or ended): the task ends, with a report on the console.
//!
//! Without an exception port, or with a dead one, the task ends with a report at once.

use crate::ipc::KERNEL_ID_BASE;

/// Message id of an exception raised by the kernel.
pub const EXC_RAISE: u64 = KERNEL_ID_BASE + 0x100;

/// `ExceptionInfo::kind` of a system call with an unknown number (CPU exceptions use their
/// vector, 0 to 31).
pub const EXC_BAD_SYSCALL: u64 = 256;

/// Reply action: resume with the registers of the reply.
pub const EXC_REPLY_SET: u64 = 0;
/// Reply action: resume with the registers unchanged.
pub const EXC_REPLY_RETRY: u64 = 1;
/// Reply action: end the task.
pub const EXC_REPLY_KILL: u64 = 2;

/// The user registers of a thread, as an exception message carries them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct UserRegs {
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rbp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rip: u64,
    pub rsp: u64,
    pub rflags: u64,
}

/// Words in a [`UserRegs`].
pub const USER_REGS_WORDS: usize = 18;

impl UserRegs {
    /// The registers as words, in field order.
    pub const fn to_words(&self) -> [u64; USER_REGS_WORDS] {
        [
            self.rax,
            self.rbx,
            self.rcx,
            self.rdx,
            self.rsi,
            self.rdi,
            self.rbp,
            self.r8,
            self.r9,
            self.r10,
            self.r11,
            self.r12,
            self.r13,
            self.r14,
            self.r15,
            self.rip,
            self.rsp,
            self.rflags,
        ]
    }

    /// The registers from words in field order.
    pub const fn from_words(w: &[u64; USER_REGS_WORDS]) -> UserRegs {
        UserRegs {
            rax: w[0],
            rbx: w[1],
            rcx: w[2],
            rdx: w[3],
            rsi: w[4],
            rdi: w[5],
            rbp: w[6],
            r8: w[7],
            r9: w[8],
            r10: w[9],
            r11: w[10],
            r12: w[11],
            r13: w[12],
            r14: w[13],
            r15: w[14],
            rip: w[15],
            rsp: w[16],
            rflags: w[17],
        }
    }
}

/// The in-line data of an [`EXC_RAISE`] message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExceptionInfo {
    /// The CPU exception vector (0–31), or [`EXC_BAD_SYSCALL`].
    pub kind: u64,
    /// The CPU's error code (0 when the exception has none), or the system call number.
    pub error: u64,
    /// The faulting address of a page fault (vector 14), else 0.
    pub addr: u64,
    /// The thread that took the exception.
    pub thread: u64,
    /// Its task.
    pub task: u64,
    /// Its registers; `rip` is the faulting instruction (after it for a breakpoint or a
    /// system call).
    pub regs: UserRegs,
}

/// Words of an [`ExceptionInfo`] on the wire.
pub const EXCEPTION_INFO_WORDS: usize = 5 + USER_REGS_WORDS;
/// Bytes of an [`ExceptionInfo`] on the wire.
pub const EXCEPTION_INFO_SIZE: usize = 8 * EXCEPTION_INFO_WORDS;
/// Bytes of an [`EXC_REPLY_SET`] reply's data.
pub const EXC_REPLY_SET_SIZE: usize = 8 * (1 + USER_REGS_WORDS);

impl ExceptionInfo {
    /// The message data (little-endian words in field order). Always inlined: the kernel's
    /// exception fast path builds it straight into the handler's buffer.
    #[inline(always)]
    pub fn to_bytes(&self) -> [u8; EXCEPTION_INFO_SIZE] {
        let mut b = [0u8; EXCEPTION_INFO_SIZE];
        for (dst, w) in b.chunks_exact_mut(8).zip(self.to_words().iter()) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// The message data as words (in field order; on the wire each is little-endian).
    /// Always inlined: the kernel's exception fast path writes them straight into the
    /// handler's buffer.
    #[inline(always)]
    pub const fn to_words(&self) -> [u64; EXCEPTION_INFO_WORDS] {
        let r = &self.regs;
        [
            self.kind,
            self.error,
            self.addr,
            self.thread,
            self.task,
            r.rax,
            r.rbx,
            r.rcx,
            r.rdx,
            r.rsi,
            r.rdi,
            r.rbp,
            r.r8,
            r.r9,
            r.r10,
            r.r11,
            r.r12,
            r.r13,
            r.r14,
            r.r15,
            r.rip,
            r.rsp,
            r.rflags,
        ]
    }

    /// Parses message data; `None` if it is too short.
    pub fn from_bytes(b: &[u8]) -> Option<ExceptionInfo> {
        let w = words::<{ 5 + USER_REGS_WORDS }>(b)?;
        let mut regs = [0u64; USER_REGS_WORDS];
        regs.copy_from_slice(w.get(5..)?);
        Some(ExceptionInfo {
            kind: w[0],
            error: w[1],
            addr: w[2],
            thread: w[3],
            task: w[4],
            regs: UserRegs::from_words(&regs),
        })
    }
}

/// What a handler's reply asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExcReply {
    /// Resume with these registers.
    Set(UserRegs),
    /// Resume unchanged.
    Retry,
    /// End the task.
    Kill,
}

/// What an exception reply asks for, as [`ExcReply::action_of`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExcAction {
    /// Resume with the reply's registers: these three as given, the others as the reply's
    /// words hold them.
    Set {
        /// The new `rip`.
        rip: u64,
        /// The new `rsp`.
        rsp: u64,
        /// The new `rflags`.
        rflags: u64,
    },
    /// Resume unchanged.
    Retry,
    /// End the task.
    Kill,
}

/// The index of `rip` among [`UserRegs`]' words.
pub const RIP_INDEX: usize = 15;
/// The index of `rsp` among [`UserRegs`]' words.
pub const RSP_INDEX: usize = 16;
/// The index of `rflags` among [`UserRegs`]' words.
pub const RFLAGS_INDEX: usize = 17;

impl ExcReply {
    /// The reply's data.
    pub fn to_bytes(&self, out: &mut [u8; EXC_REPLY_SET_SIZE]) -> usize {
        let (action, regs) = match self {
            ExcReply::Set(r) => (EXC_REPLY_SET, Some(r)),
            ExcReply::Retry => (EXC_REPLY_RETRY, None),
            ExcReply::Kill => (EXC_REPLY_KILL, None),
        };
        out[..8].copy_from_slice(&action.to_le_bytes());
        match regs {
            Some(r) => {
                for (dst, w) in out[8..].chunks_exact_mut(8).zip(r.to_words().iter()) {
                    dst.copy_from_slice(&w.to_le_bytes());
                }
                EXC_REPLY_SET_SIZE
            }
            None => 8,
        }
    }

    /// Parses a reply's data; `None` if malformed (the kernel then ends the task).
    pub fn from_bytes(b: &[u8]) -> Option<ExcReply> {
        ExcReply::from_words_of(b.len(), |i| {
            let at = i * 8;
            b.get(at..at + 8)
                .and_then(|w| w.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        })
    }

    /// Parses message data of `len` bytes whose `i`th little-endian word `word(i)` gives
    /// (it is asked only for words inside `len`), as [`ExcReply::from_bytes`] parses them:
    /// the kernel reads a reply straight from the handler's buffer this way, without a copy.
    #[inline(always)]
    pub fn from_words_of(len: usize, word: impl Fn(usize) -> u64) -> Option<ExcReply> {
        if len < 8 {
            return None;
        }
        match word(0) {
            EXC_REPLY_SET if len >= EXC_REPLY_SET_SIZE => {
                let mut regs = [0u64; USER_REGS_WORDS];
                for (i, r) in regs.iter_mut().enumerate() {
                    *r = word(i + 1);
                }
                Some(ExcReply::Set(UserRegs::from_words(&regs)))
            }
            EXC_REPLY_RETRY => Some(ExcReply::Retry),
            EXC_REPLY_KILL => Some(ExcReply::Kill),
            _ => None,
        }
    }

    /// What a reply of `len` bytes whose `i`th word `word(i)` gives asks for, reading only
    /// its action word and, for [`ExcReply::Set`], the three registers a handler may not
    /// set freely (`rip`, `rsp`, `rflags`, which the kernel checks): the kernel then
    /// copies the other registers straight from the handler's buffer
    /// ([`ExcReply::set_word`] says where each is). Accepts and refuses exactly what
    /// [`ExcReply::from_words_of`] does.
    #[inline(always)]
    pub fn action_of(len: usize, word: impl Fn(usize) -> u64) -> Option<ExcAction> {
        if len < 8 {
            return None;
        }
        match word(0) {
            EXC_REPLY_SET if len >= EXC_REPLY_SET_SIZE => Some(ExcAction::Set {
                rip: word(ExcReply::set_word(RIP_INDEX)),
                rsp: word(ExcReply::set_word(RSP_INDEX)),
                rflags: word(ExcReply::set_word(RFLAGS_INDEX)),
            }),
            EXC_REPLY_RETRY => Some(ExcAction::Retry),
            EXC_REPLY_KILL => Some(ExcAction::Kill),
            _ => None,
        }
    }

    /// The word of a [`ExcReply::Set`] reply's data that holds register `i` of
    /// [`UserRegs`] (in field order: `rax` is 0, `rflags` is 17).
    #[inline(always)]
    pub const fn set_word(i: usize) -> usize {
        1 + i
    }

    /// The former byte parser, kept as the reference [`ExcReply::from_words_of`] is tested
    /// against.
    #[cfg(test)]
    fn from_bytes_reference(b: &[u8]) -> Option<ExcReply> {
        let [action] = words::<1>(b)?;
        match action {
            EXC_REPLY_SET => {
                let w = words::<{ 1 + USER_REGS_WORDS }>(b)?;
                let mut regs = [0u64; USER_REGS_WORDS];
                regs.copy_from_slice(w.get(1..)?);
                Some(ExcReply::Set(UserRegs::from_words(&regs)))
            }
            EXC_REPLY_RETRY => Some(ExcReply::Retry),
            EXC_REPLY_KILL => Some(ExcReply::Kill),
            _ => None,
        }
    }
}

/// The first `N` little-endian words of `b`, if it is long enough.
#[inline(always)]
fn words<const N: usize>(b: &[u8]) -> Option<[u64; N]> {
    // One length check, then words without further checks.
    let b = b.get(..N * 8)?;
    let mut w = [0u64; N];
    for (slot, chunk) in w.iter_mut().zip(b.chunks_exact(8)) {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        *slot = u64::from_le_bytes(bytes);
    }
    Some(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_and_replies_round_trip() {
        let info = ExceptionInfo {
            kind: 14,
            error: 6,
            addr: 0xdead_0000,
            thread: 7,
            task: 3,
            regs: UserRegs {
                rax: 1,
                rip: 0x40_1000,
                rsp: 0x7fff_0000,
                rflags: 0x202,
                r15: 15,
                ..UserRegs::default()
            },
        };
        let b = info.to_bytes();
        assert_eq!(ExceptionInfo::from_bytes(&b), Some(info));
        assert_eq!(ExceptionInfo::from_bytes(&b[..b.len() - 1]), None);
        let mut out = [0u8; EXC_REPLY_SET_SIZE];
        for r in [ExcReply::Set(info.regs), ExcReply::Retry, ExcReply::Kill] {
            let n = r.to_bytes(&mut out);
            assert_eq!(ExcReply::from_bytes(&out[..n]), Some(r));
        }
        let n = ExcReply::Set(info.regs).to_bytes(&mut out);
        assert_eq!(ExcReply::from_bytes(&out[..n - 8]), None);
        // The word reader parses as the byte parser did, at every length and action.
        for action in [EXC_REPLY_SET, EXC_REPLY_RETRY, EXC_REPLY_KILL, 3, u64::MAX] {
            ExcReply::Set(info.regs).to_bytes(&mut out);
            out[..8].copy_from_slice(&action.to_le_bytes());
            for len in 0..=out.len() {
                assert_eq!(
                    ExcReply::from_bytes(&out[..len]),
                    ExcReply::from_bytes_reference(&out[..len]),
                    "action {action}, {len} bytes"
                );
            }
        }
        // The action reader agrees with the word reader at every length and action.
        for action in [EXC_REPLY_SET, EXC_REPLY_RETRY, EXC_REPLY_KILL, 3, u64::MAX] {
            ExcReply::Set(info.regs).to_bytes(&mut out);
            out[..8].copy_from_slice(&action.to_le_bytes());
            for len in 0..=out.len() {
                let word = |i: usize| u64::from_le_bytes(out[i * 8..i * 8 + 8].try_into().unwrap());
                let want = ExcReply::from_words_of(len, word).map(|r| match r {
                    ExcReply::Set(r) => ExcAction::Set {
                        rip: r.rip,
                        rsp: r.rsp,
                        rflags: r.rflags,
                    },
                    ExcReply::Retry => ExcAction::Retry,
                    ExcReply::Kill => ExcAction::Kill,
                });
                assert_eq!(
                    ExcReply::action_of(len, word),
                    want,
                    "action {action}, {len} bytes"
                );
            }
        }
        let w = info.regs.to_words();
        assert_eq!(
            (w[RIP_INDEX], w[RSP_INDEX], w[RFLAGS_INDEX]),
            (info.regs.rip, info.regs.rsp, info.regs.rflags)
        );
        let mut words = [0u64; EXCEPTION_INFO_WORDS];
        for (w, b) in words.iter_mut().zip(info.to_bytes().chunks_exact(8)) {
            *w = u64::from_le_bytes(b.try_into().unwrap());
        }
        assert_eq!(words, info.to_words());
        assert_eq!(ExcReply::from_bytes(&[]), None);
        assert_eq!(ExcReply::from_bytes(&9u64.to_le_bytes()), None);
    }
}
