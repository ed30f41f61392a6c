//! Virtual processors with Block and Unblock upcalls (Sting's kernel support, in the shape of
//! scheduler activations; `docs/sting.md`, "The kernel half", and `docs/abi.md`).
//!
//! A task makes the calling thread the *carrier* of a virtual processor
//! ([`crate::Sys::VpCreate`]) and gives it spare kernel threads ([`crate::Sys::VpSpares`]).
//! When the carrier blocks in the kernel (`ipc_msg` waiting to receive or to send, on the
//! general path or the RPC fast path's, in its own task or a server's its call migrated
//! into; `wait`, `sleep`; `act_get_state` waiting for a thread to stop; a fault waiting for
//! its exception handler's reply or for a pager's page), a spare takes the processor over and enters the runtime at the upcall entry
//! with a [`VP_BLOCK`] [`VpEvent`]; when the blocked call completes, its registers (the
//! call's result in `rax`) come back in a [`VP_UNBLOCK`] event: as an upcall when the
//! processor is idle in [`crate::Sys::VpWait`], else queued for [`crate::Sys::VpTake`].
//!
//! # The upcall
//! The kernel writes a [`VpEvent`] at the top of the upcall stack (`upcall_hi` rounded
//! down to 16, less the event), a zero return address below it, and enters `entry` with
//! `rsp` pointing at that return address (so the event is 16-byte aligned, as after a
//! call), `rdi` = the event's address, `rsi` = its kind, `rdx` = the cookie, `rflags` =
//! interrupts on, every other register zero.

use crate::exception::UserRegs;

/// Upcall kind: the virtual processor's carrier blocked in the kernel; `token` names it,
/// `regs` are its user registers at the call (`rax` the call number, `rsp` its stack).
pub const VP_BLOCK: u64 = 1;
/// Upcall kind (and [`crate::Sys::VpTake`] record): the call of thread `token` completed;
/// `regs` are its user registers to resume with (`rax` the call's result, `rip` after the
/// `syscall`; `rcx` and `r11` are the ones the instruction clobbered). With `interrupted`
/// set (an upcall), `stopped` is the context the upcall displaced: the carrier's
/// [`crate::Sys::VpWait`] returning 0. With `fault` set the thread blocked at a fault, not
/// in a call (see [`VpEvent::fault`]).
pub const VP_UNBLOCK: u64 = 2;
/// Upcall kind: the kernel preempted the carrier while a user-level thread ran (Sting's
/// Checkpoint; on only after [`crate::Sys::VpPreempt`]); `token` is the carrier, `regs`
/// every register of the preempted thread (`rcx`, `r11` and `rflags` included: it was
/// stopped by an interrupt, not a call). The runtime runs what its policy picks, and the
/// preempted thread later with [`crate::Sys::VpResume`]. A carrier stopped with `rsp` in
/// the upcall stack or the quiet range gets no Checkpoint.
pub const VP_CHECKPOINT: u64 = 3;
/// Shortest preemption quantum [`crate::Sys::VpPreempt`] takes (the timer ticks every
/// 10 ms, so a quantum is in effect rounded up to whole ticks).
pub const QUANTUM_MIN_NS: u64 = 1_000_000;

/// Most virtual processors one task may have.
pub const VPS_PER_TASK_MAX: usize = 16;
/// Most spare kernel threads of one virtual processor (also the most of its threads that
/// may be blocked with an upcall given, and of its queued events, at once).
pub const SPARES_MAX: u64 = 8;
/// Most events one [`crate::Sys::VpTake`] returns.
pub const TAKE_MAX: u64 = 16;
/// Bytes of [`VpEvent::fp`]: an `fxsave` image (the x87, `mxcsr` and XMM registers).
pub const FP_IMAGE_SIZE: usize = 512;

/// What [`crate::Sys::VpCreate`] reads: where the runtime is entered and with what.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VpConfig {
    /// The upcall entry point (a user address).
    pub entry: u64,
    /// The upcall stack: `[upcall_lo, upcall_hi)`, at least [`UPCALL_STACK_MIN`] bytes;
    /// its top page must be mapped writable when the upcall comes.
    pub upcall_lo: u64,
    /// One past its top.
    pub upcall_hi: u64,
    /// Another stack range (the runtime's scheduler's, `[quiet_lo, quiet_hi)`; empty for
    /// none): a blocking call made with `rsp` in it, or in the upcall stack, gets no Block
    /// upcall (the runtime's own waits block the processor, as without upcalls).
    pub quiet_lo: u64,
    /// One past its top.
    pub quiet_hi: u64,
    /// A user word (8-byte aligned, writable; 0 for none) where the kernel writes how many
    /// Unblock events are queued whenever that changes.
    pub mailbox: u64,
    /// Passed back in `rdx` on every upcall.
    pub cookie: u64,
}

/// Bytes of a [`VpConfig`].
pub const VP_CONFIG_SIZE: usize = 7 * 8;
/// Smallest upcall stack.
pub const UPCALL_STACK_MIN: u64 = 4096;

impl VpConfig {
    /// From its words (as read from user memory).
    pub fn from_bytes(b: &[u8; VP_CONFIG_SIZE]) -> VpConfig {
        let w = |i: usize| {
            let mut x = [0u8; 8];
            if let Some(s) = b.get(i * 8..i * 8 + 8) {
                x.copy_from_slice(s);
            }
            u64::from_le_bytes(x)
        };
        VpConfig {
            entry: w(0),
            upcall_lo: w(1),
            upcall_hi: w(2),
            quiet_lo: w(3),
            quiet_hi: w(4),
            mailbox: w(5),
            cookie: w(6),
        }
    }
}

/// An upcall's event, and a [`crate::Sys::VpTake`] record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VpEvent {
    /// [`VP_BLOCK`] or [`VP_UNBLOCK`].
    pub kind: u64,
    /// The kernel thread that blocked (its id).
    pub token: u64,
    /// The virtual processor.
    pub vp: u64,
    /// Unblock events still queued after this one.
    pub pending: u64,
    /// 1 when `stopped` holds the context this upcall displaced (to resume after it).
    pub interrupted: u64,
    /// The blocked (or unblocked) thread's user registers.
    pub regs: UserRegs,
    /// The displaced context (see `interrupted`).
    pub stopped: UserRegs,
    /// 1 for an Unblock of a thread that blocked at a fault (waiting for its exception
    /// handler's reply, or for a page its pager or the default pager brings back), not in
    /// a system call: `regs` are then every register (`rcx`, `r11` and the flags too, as
    /// the handler's reply or the fault left them) and `fp` its floating-point and vector
    /// registers, all of which the fault found live, so the runtime resumes it with
    /// [`crate::Sys::VpResume`] after loading `fp`. 0 otherwise (`fp` is then not
    /// written).
    pub fault: u64,
    /// With `fault`: the thread's `fxsave` image.
    pub fp: [u8; FP_IMAGE_SIZE],
}

impl Default for VpEvent {
    fn default() -> VpEvent {
        VpEvent {
            kind: 0,
            token: 0,
            vp: 0,
            pending: 0,
            interrupted: 0,
            regs: UserRegs::default(),
            stopped: UserRegs::default(),
            fault: 0,
            fp: [0; FP_IMAGE_SIZE],
        }
    }
}

/// Bytes of a [`VpEvent`].
pub const VP_EVENT_SIZE: usize = core::mem::size_of::<VpEvent>();
/// Bytes of a [`VpEvent`] up to `fp`: all the kernel writes of an event whose `fault` is 0.
pub const VP_EVENT_HEAD: usize = VP_EVENT_SIZE - FP_IMAGE_SIZE;
const _: () = assert!(VP_EVENT_HEAD == (6 + 2 * crate::exception::USER_REGS_WORDS) * 8);

/// A [`VpEvent`] but its `fp`: what the kernel builds of every event (the image, when
/// there is one, is written after it), so that an event without one moves no 512 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VpEventHead {
    /// As [`VpEvent::kind`].
    pub kind: u64,
    /// As [`VpEvent::token`].
    pub token: u64,
    /// As [`VpEvent::vp`].
    pub vp: u64,
    /// As [`VpEvent::pending`].
    pub pending: u64,
    /// As [`VpEvent::interrupted`].
    pub interrupted: u64,
    /// As [`VpEvent::regs`].
    pub regs: UserRegs,
    /// As [`VpEvent::stopped`].
    pub stopped: UserRegs,
    /// As [`VpEvent::fault`].
    pub fault: u64,
}

impl VpEventHead {
    /// The first [`VP_EVENT_HEAD`] bytes of the [`VpEvent`] it heads.
    pub fn to_bytes(&self) -> [u8; VP_EVENT_HEAD] {
        // The words laid out in one array first, then stored in one plain loop: a chain of
        // iterators here cost the kernel about 270 instructions an upcall.
        const R: usize = crate::exception::USER_REGS_WORDS;
        let mut words = [0u64; VP_EVENT_HEAD / 8];
        words[..5].copy_from_slice(&[
            self.kind,
            self.token,
            self.vp,
            self.pending,
            self.interrupted,
        ]);
        words[5..5 + R].copy_from_slice(&self.regs.to_words());
        words[5 + R..5 + 2 * R].copy_from_slice(&self.stopped.to_words());
        words[5 + 2 * R] = self.fault;
        let mut out = [0u8; VP_EVENT_HEAD];
        for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

impl VpEvent {
    /// All of it but `fp`.
    pub fn head(&self) -> VpEventHead {
        VpEventHead {
            kind: self.kind,
            token: self.token,
            vp: self.vp,
            pending: self.pending,
            interrupted: self.interrupted,
            regs: self.regs,
            stopped: self.stopped,
            fault: self.fault,
        }
    }

    /// Its bytes, as the kernel writes them.
    pub fn to_bytes(&self) -> [u8; VP_EVENT_SIZE] {
        let mut out = [0u8; VP_EVENT_SIZE];
        let (head, fp) = out.split_at_mut(VP_EVENT_HEAD);
        head.copy_from_slice(&self.head().to_bytes());
        fp.copy_from_slice(&self.fp);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn the_bytes_are_laid_as_the_struct() {
        let mut ev = VpEvent {
            kind: VP_UNBLOCK,
            token: 2,
            vp: 3,
            pending: 4,
            interrupted: 1,
            fault: 5,
            ..VpEvent::default()
        };
        ev.regs.rax = 0x11;
        ev.stopped.rax = 0x22;
        ev.fp[0] = 0x7f;
        ev.fp[FP_IMAGE_SIZE - 1] = 0x80;
        let bytes = ev.to_bytes();
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(w)
        };
        // The kernel writes these bytes; the runtime reads the `repr(C)` struct.
        assert_eq!(word(offset_of!(VpEvent, kind)), VP_UNBLOCK);
        assert_eq!(word(offset_of!(VpEvent, token)), 2);
        assert_eq!(word(offset_of!(VpEvent, vp)), 3);
        assert_eq!(word(offset_of!(VpEvent, pending)), 4);
        assert_eq!(word(offset_of!(VpEvent, interrupted)), 1);
        assert_eq!(
            word(offset_of!(VpEvent, regs) + offset_of!(UserRegs, rax)),
            0x11
        );
        assert_eq!(
            word(offset_of!(VpEvent, stopped) + offset_of!(UserRegs, rax)),
            0x22
        );
        assert_eq!(word(offset_of!(VpEvent, fault)), 5);
        assert_eq!(offset_of!(VpEvent, fp), VP_EVENT_HEAD);
        assert_eq!(bytes[VP_EVENT_HEAD], 0x7f);
        assert_eq!(bytes[VP_EVENT_SIZE - 1], 0x80);
        assert_eq!(&bytes[..VP_EVENT_HEAD], &ev.head().to_bytes()[..]);
    }
}
