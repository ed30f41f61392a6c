//! x86-64: a context is a saved stack pointer; the callee-saved registers of the SysV ABI
//! (`rbx`, `rbp`, `r12`-`r15`) are pushed on the stack being left, and `rip` is the return
//! address the `call` to [`switch`] pushed. Everything else is caller-saved, so the
//! compiler has already saved what it needs around the call.
//!
//! Not saved: the x87 control word and `mxcsr`, which the ABI also makes callee-saved.
//! Baton's user programs are built soft-float today, so nothing changes them; when the
//! kernel gives user programs hardware floating point, [`switch`] must save and restore
//! both (two instructions each way).

use core::arch::naked_asm;

/// Saves the callee-saved registers and the stack pointer of the running context into
/// `*from`, and resumes the context whose stack pointer is `to`.
///
/// Returns (in the saved context) when some later `switch` resumes `*from`.
///
/// # Safety
///
/// `from` must be valid for a write. `to` must be a stack pointer saved by `switch` (or
/// prepared by [`prepare`]) of a context that is not running and will not be resumed by
/// anyone else; its stack must stay valid while it runs.
#[unsafe(naked)]
pub unsafe extern "C" fn switch(from: *mut usize, to: usize) {
    naked_asm!(
        "push rbp",
        "push rbx",
        "push r12",
        "push r13",
        "push r14",
        "push r15",
        "mov [rdi], rsp",
        "mov rsp, rsi",
        "pop r15",
        "pop r14",
        "pop r13",
        "pop r12",
        "pop rbx",
        "pop rbp",
        "ret",
    )
}

/// Lays out, below `top` (16-byte aligned), the frame that [`switch`] resumes as a call of
/// the runtime's `tcb_entry(arg)`; returns the stack pointer to pass to `switch`.
///
/// # Safety
///
/// The 64 bytes below `top` must be writable memory of a stack nothing else uses.
pub unsafe fn prepare(top: usize, arg: usize) -> usize {
    let top = top & !15;
    let sp = top - 64;
    let frame = sp as *mut usize;
    // Popped by `switch` in this order: r15, r14, r13, r12 (the argument), rbx, rbp, then
    // `ret` to the trampoline; the last word is a zero return address for the trampoline.
    let words = [0, 0, 0, arg, 0, 0, trampoline as *const () as usize, 0];
    for (i, w) in words.into_iter().enumerate() {
        // SAFETY: `frame + i` for i < 8 is within the 64 bytes below `top`, which the
        // caller gives us; `sp` is 8-byte aligned.
        unsafe { frame.add(i).write(w) };
    }
    sp
}

/// Where a prepared context starts: `r12` holds the argument.
#[unsafe(naked)]
extern "C" fn trampoline() -> ! {
    naked_asm!(
        "xor ebp, ebp",
        "mov rdi, r12",
        "and rsp, -16",
        "call {entry}",
        "ud2",
        entry = sym crate::rt::tcb_entry,
    )
}

/// The stack pointer now.
#[inline(always)]
pub fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads `rsp` into a register; no memory, no flags.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}
