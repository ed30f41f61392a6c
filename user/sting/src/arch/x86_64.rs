//! x86-64: a context is a saved stack pointer; the callee-saved registers of the SysV ABI
//! (`rbx`, `rbp`, `r12`-`r15`) are pushed on the stack being left, and `rip` is the return
//! address the `call` to [`switch`] pushed. Everything else is caller-saved, so the
//! compiler has already saved what it needs around the call.
//!
//! The x87 control word and `mxcsr`, which the ABI also makes callee-saved, are saved too
//! (one word below the registers): user programs are built hard-float, so a thread may
//! change its rounding mode or exception masks, and the thread switched to must not run
//! with them. The vector and x87 data registers are caller-saved: nothing to do.

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
        "sub rsp, 8",
        "stmxcsr [rsp]",
        "fnstcw [rsp + 4]",
        "mov [rdi], rsp",
        "mov rsp, rsi",
        "ldmxcsr [rsp]",
        "fldcw [rsp + 4]",
        "add rsp, 8",
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
/// The 72 bytes below `top` must be writable memory of a stack nothing else uses.
pub unsafe fn prepare(top: usize, arg: usize) -> usize {
    let top = top & !15;
    let sp = top - 72;
    let frame = sp as *mut usize;
    // Loaded by `switch` in this order: `mxcsr` and the x87 control word (their initial
    // values, as a new kernel thread gets them), r15, r14, r13, r12 (the argument), rbx,
    // rbp, then `ret` to the trampoline; the last word is a zero return address for the
    // trampoline.
    let words = [
        INITIAL_CONTROL,
        0,
        0,
        0,
        arg,
        0,
        0,
        trampoline as *const () as usize,
        0,
    ];
    for (i, w) in words.into_iter().enumerate() {
        // SAFETY: `frame + i` for i < 9 is within the 72 bytes below `top`, which the
        // caller gives us; `sp` is 8-byte aligned.
        unsafe { frame.add(i).write(w) };
    }
    sp
}

/// The control word [`switch`] loads for a new context: `mxcsr` 0x1f80 (every exception
/// masked, round to nearest) in the low half, the x87 control word 0x037f above it.
const INITIAL_CONTROL: usize = 0x037f << 32 | 0x1f80;

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
