//! A recoverable read of a user word through the running task's own mapping.
//!
//! The kernel reaches user memory through the physical-memory window after walking the
//! task's page tables (`kern::usercopy`): every access is checked before it is made. For
//! the one read on a hot path, `wait`'s word, that walk costs more than the call's other
//! work, so [`read_user_u32`] loads the word through the user address itself, in the
//! address space that is loaded (the caller's: the system call came from it), and lets
//! the hardware check it. A load that faults (the page is not there, or never was) does
//! not stop the kernel: the fault handler sees that the faulting instruction is this
//! module's one user load ([`fixup`], an exception table of one entry, as Linux's
//! `__ex_table`) and resumes at the recovery label, which answers "faulted"; the caller
//! then takes the general path, which walks the tables and waits for pagers as before.
//!
//! Every mapping in the user half is a user mapping (kernel-only mappings are made only
//! in the kernel half, `arch::stack`), so a load that succeeds reads a word the task may
//! read. With SMAP on, the load is bracketed by `stac`/`clac`.

use super::trap::TrapFrame;
use core::sync::atomic::{AtomicBool, Ordering};

/// SMAP is on on this machine (`cpu::init_features`): the load needs `stac`/`clac`.
static SMAP: AtomicBool = AtomicBool::new(false);

/// Records whether SMAP is on (every CPU is the same model).
pub fn set_smap(on: bool) {
    SMAP.store(on, Ordering::Relaxed);
}

core::arch::global_asm!(
    r#"
    .section .text.baton_user_read_u32,"ax",@progbits
    .global baton_user_read_u32
    .global baton_user_read_u32_load
    .global baton_user_read_u32_fixup
// rdi: the user address (aligned, in the user half); esi: nonzero when SMAP is on.
// Returns the word with bit 32 set, or 0 when the load faulted.
baton_user_read_u32:
    testl %esi, %esi
    jz 1f
    stac
1:
baton_user_read_u32_load:
    movl (%rdi), %eax
    testl %esi, %esi
    jz 2f
    clac
2:
    btsq $32, %rax
    ret
// The fault handler resumes here after a fault of the load (registers as they were).
baton_user_read_u32_fixup:
    testl %esi, %esi
    jz 3f
    clac
3:
    xorl %eax, %eax
    ret
    .text
"#,
    options(att_syntax)
);

extern "C" {
    fn baton_user_read_u32(addr: u64, smap: u32) -> u64;
    fn baton_user_read_u32_load();
    fn baton_user_read_u32_fixup();
}

/// The 32-bit word at user address `addr` of the address space loaded on this CPU, or
/// `None` when reading it faults (the page is not present, or the address not mapped).
///
/// The caller must have checked that `addr` is 4-aligned and in the user half (below
/// `baton_abi::layout::USER_END`), so the load is canonical and cannot straddle pages,
/// and that the address space loaded is the one the word is to be read in (the
/// caller's, in a system call).
#[inline(always)]
pub fn read_user_u32(addr: u64) -> Option<u32> {
    let smap = u32::from(SMAP.load(Ordering::Relaxed));
    // SAFETY: the function only loads 4 bytes at `addr` (a user-half address, checked by
    // the caller: canonical, so a bad one page-faults rather than raising #GP) and writes
    // nothing but `rax`; a fault of its load is recovered by `fixup` (the kernel-mode trap
    // handler calls it first), which resumes it at its recovery label with every register
    // restored. It follows the C calling convention.
    let v = unsafe { baton_user_read_u32(addr, smap) };
    (v >> 32 != 0).then_some(v as u32)
}

/// Called by the kernel-mode trap handler first: when the trap is a fault of
/// [`read_user_u32`]'s load, redirects the return to its recovery label and says so (the
/// trap is handled); otherwise leaves `frame` alone.
pub fn fixup(frame: &mut TrapFrame) -> bool {
    let load = baton_user_read_u32_load as *const () as u64;
    if (frame.vector == 14 || frame.vector == 13) && frame.rip == load {
        frame.rip = baton_user_read_u32_fixup as *const () as u64;
        return true;
    }
    false
}
