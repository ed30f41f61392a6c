//! x86-64: a context is a saved stack pointer. [`switch`] is inline assembly in its caller:
//! it leaves, at the saved stack pointer, a frame of four words — the address to resume
//! at, the floating-point control words, `rbp` and `rbx` — and declares every other
//! register clobbered, so the compiler saves around it only the registers its caller has
//! live (and the callee-saved ones its own caller expects back, once, in its prologue),
//! instead of a switch routine pushing all six callee-saved registers every time.
//! Resuming a context is `mov rsp, saved; ret`: the resume address then restores the
//! rest of its frame. A prepared context (a new thread's first frame, a resumption laid by
//! the runtime) is the same four words, with its arguments in the words above them.
//!
//! The x87 control word and `mxcsr`, which the ABI makes callee-saved, are saved too:
//! user programs are built hard-float, so a thread may change its rounding mode or
//! exception masks, and the thread switched to must not run with them. The vector and x87
//! data registers are caller-saved: the asm's clobbers make the compiler keep what it
//! needs of them.

// The kernel-upcall resumption below is used only on Baton.
#![cfg_attr(not(baton), allow(dead_code))]

use core::arch::naked_asm;

/// Words of a saved context's frame: the resume address, the control words, `rbp`, `rbx`.
/// A prepared context's arguments follow them.
const FRAME_WORDS: usize = 4;

/// Saves the running context into `*from` (its frame on its own stack) and resumes the
/// context whose stack pointer is `to`.
///
/// Returns (in the saved context) when some later `switch` resumes `*from`. Inlined into
/// its caller: the compiler keeps what its caller has live in the registers it saves
/// itself (every register but `rbp`, `rbx` and the stack pointer is declared clobbered).
///
/// # Safety
///
/// `from` must be valid for a write. `to` must be a stack pointer saved by `switch` (or
/// laid by one of this module's `prepare` functions) of a context that is not running and
/// will not be resumed by anyone else; its stack must stay valid while it runs.
#[inline(always)]
pub unsafe fn switch(from: *mut usize, to: usize) {
    // SAFETY: the caller's promise. The frame goes below the stack pointer (the asm may use
    // the stack: no `nostack`), and `ret` into it from any other context comes back here
    // with the stack pointer at its second word; the `add` leaves it as it was.
    unsafe {
        core::arch::asm!(
            "sub rsp, 32",
            "stmxcsr [rsp + 8]",
            "fnstcw [rsp + 12]",
            "mov [rsp + 16], rbp",
            "mov [rsp + 24], rbx",
            "lea rax, [rip + 2f]",
            "mov [rsp], rax",
            "mov [rdi], rsp",
            "mov rsp, rsi",
            "ret",
            "2:",
            "ldmxcsr [rsp]",
            "fldcw [rsp + 4]",
            "mov rbp, [rsp + 8]",
            "mov rbx, [rsp + 16]",
            "add rsp, 24",
            inout("rdi") from => _,
            inout("rsi") to => _,
            out("r12") _,
            out("r13") _,
            out("r14") _,
            out("r15") _,
            clobber_abi("C"),
        )
    };
}

/// Writes a prepared context's frame at `sp`: resumed by [`switch`], it `ret`s to `entry`
/// with the stack pointer at the control words (`INITIAL_CONTROL`), `rbp` and `rbx` zero
/// above them, then `args`.
///
/// # Safety
///
/// The `(FRAME_WORDS + args.len()) * 8` bytes at `sp` must be writable memory of a stack
/// nothing else uses; `sp` is 8-byte aligned.
#[inline(always)]
unsafe fn write_frame<const N: usize>(sp: usize, entry: usize, args: [usize; N]) {
    let frame = sp as *mut usize;
    // SAFETY: within the bytes the caller gives us.
    unsafe {
        frame.write(entry);
        frame.add(1).write(INITIAL_CONTROL);
        frame.add(2).write(0);
        frame.add(3).write(0);
        for (i, w) in args.into_iter().enumerate() {
            frame.add(FRAME_WORDS + i).write(w);
        }
    }
}

/// Lays out, below `top` (16-byte aligned), the frame that [`switch`] resumes as a call of
/// the runtime's `tcb_entry(arg)`; returns the stack pointer to pass to `switch`.
///
/// # Safety
///
/// The 64 bytes below `top` must be writable memory of a stack nothing else uses.
pub unsafe fn prepare(top: usize, arg: usize) -> usize {
    let sp = (top & !15) - 64;
    // The frame, the argument, and a word the trampoline aligns over.
    // SAFETY: the 48 bytes at `sp` are below `top`, the caller's; `sp` is aligned.
    unsafe { write_frame(sp, trampoline as *const () as usize, [arg]) };
    sp
}

/// The control word [`switch`] loads for a new context: `mxcsr` 0x1f80 (every exception
/// masked, round to nearest) in the low half, the x87 control word 0x037f above it.
const INITIAL_CONTROL: usize = 0x037f << 32 | 0x1f80;

/// Where a prepared context starts (the stack pointer at its frame's control words): loads
/// them and calls `tcb_entry` with the argument.
#[unsafe(naked)]
extern "C" fn trampoline() -> ! {
    naked_asm!(
        "ldmxcsr [rsp]",
        "fldcw [rsp + 4]",
        "xor ebp, ebp",
        "mov rdi, [rsp + 24]",
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

/// The user registers of a thread that blocked in a system call, as the kernel gives them
/// back with an Unblock (the layout of `baton_abi::exception::UserRegs`).
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

/// The kernel's register record (an Unblock upcall's, an exception message's) as the
/// runtime's.
impl From<&baton_abi::exception::UserRegs> for UserRegs {
    fn from(r: &baton_abi::exception::UserRegs) -> UserRegs {
        UserRegs {
            rax: r.rax,
            rbx: r.rbx,
            rcx: r.rcx,
            rdx: r.rdx,
            rsi: r.rsi,
            rdi: r.rdi,
            rbp: r.rbp,
            r8: r.r8,
            r9: r.r9,
            r10: r.r10,
            r11: r.r11,
            r12: r.r12,
            r13: r.r13,
            r14: r.r14,
            r15: r.r15,
            rip: r.rip,
            rsp: r.rsp,
            rflags: r.rflags,
        }
    }
}

/// The runtime's registers as the kernel's record (an exception reply's).
impl From<&UserRegs> for baton_abi::exception::UserRegs {
    fn from(r: &UserRegs) -> baton_abi::exception::UserRegs {
        baton_abi::exception::UserRegs {
            rax: r.rax,
            rbx: r.rbx,
            rcx: r.rcx,
            rdx: r.rdx,
            rsi: r.rsi,
            rdi: r.rdi,
            rbp: r.rbp,
            r8: r.r8,
            r9: r.r9,
            r10: r.r10,
            r11: r.r11,
            r12: r.r12,
            r13: r.r13,
            r14: r.r14,
            r15: r.r15,
            rip: r.rip,
            rsp: r.rsp,
            rflags: r.rflags,
        }
    }
}

/// Bytes left untouched below a blocked thread's stack pointer (the ABI's red zone,
/// although Baton's programs are built without one).
const RED_ZONE: usize = 128;

/// Lays out, below `regs.rsp` (less the red zone), a copy of `regs` and the frame that
/// [`switch`] resumes as a jump into [`resume_regs`] with that copy, after the runtime's
/// `kernel_resumed` has finished the switch; returns the stack pointer to pass to `switch`.
///
/// # Safety
///
/// `regs.rsp` must be the stack pointer of a context stopped in a system call, whose stack
/// below it (about 300 bytes) is free and writable.
pub unsafe fn prepare_resume(regs: &UserRegs) -> usize {
    let copy = (regs.rsp as usize - RED_ZONE - size_of::<UserRegs>()) & !15;
    // SAFETY: below the stopped context's stack pointer, free (the caller's promise).
    unsafe { (copy as *mut UserRegs).write(*regs) };
    let sp = copy - 48;
    // The control words are the defaults: the kernel gives the stopped context's integer
    // registers back, not these. The argument is the copy.
    // SAFETY: the 48 bytes below the copy, free as above.
    unsafe { write_frame(sp, resume_trampoline as *const () as usize, [copy]) };
    sp
}

/// Where a context prepared by [`prepare_resume`] starts: the registers' copy above its
/// frame.
#[unsafe(naked)]
extern "C" fn resume_trampoline() -> ! {
    naked_asm!(
        "ldmxcsr [rsp]",
        "fldcw [rsp + 4]",
        "mov rdi, [rsp + 24]",
        "and rsp, -16",
        "call {finish}",
        "mov rdi, rax",
        "jmp {resume}",
        finish = sym crate::rt::kernel_resumed,
        resume = sym resume_regs,
    )
}

/// Loads every register of `regs` but `rcx` and `r11` (which a system call clobbers) and
/// continues at `regs.rip` on `regs.rsp`: a context stopped in a system call goes on as if
/// the call had returned `regs.rax`.
///
/// # Safety
///
/// `regs` must be the registers the kernel gave back for a context stopped in a system
/// call that nothing else resumes; nothing on the calling stack is used again.
#[unsafe(naked)]
pub unsafe extern "C" fn resume_regs(regs: *const UserRegs) -> ! {
    naked_asm!(
        "mov rcx, rdi",
        "push qword ptr [rcx + 136]",
        "popfq",
        "mov rax, [rcx]",
        "mov rbx, [rcx + 8]",
        "mov rdx, [rcx + 24]",
        "mov rsi, [rcx + 32]",
        "mov rdi, [rcx + 40]",
        "mov rbp, [rcx + 48]",
        "mov r8, [rcx + 56]",
        "mov r9, [rcx + 64]",
        "mov r10, [rcx + 72]",
        "mov r12, [rcx + 88]",
        "mov r13, [rcx + 96]",
        "mov r14, [rcx + 104]",
        "mov r15, [rcx + 112]",
        "mov r11, [rcx + 120]",
        "mov rsp, [rcx + 128]",
        "jmp r11",
    )
}

/// Where [`prepare_preempted`] puts the copy of a preempted context's registers: this many
/// bytes below its stack pointer (past the red zone and the two words [`resume_full`]
/// returns through).
const PREEMPTED_COPY: usize = RED_ZONE + 16 + size_of::<UserRegs>() + 16;

/// Bytes of an `fxsave` area: the x87, `mxcsr` and XMM registers (user programs are built
/// for SSE2, so no wider vector state exists).
pub const FP_AREA: usize = 512;

/// Lays out, below `regs.rsp` (past the red zone), a copy of `regs` (every register: the
/// context was stopped by an interrupt), a copy of its floating-point and vector state
/// `fp` (an `fxsave` area taken before any other code ran), and the frame that [`switch`]
/// resumes as a jump into the runtime's `preempted_resumed` and then its resume of those
/// copies; returns the stack pointer to pass to `switch`.
///
/// # Safety
///
/// `regs.rsp` must be the stack pointer of a stopped context whose stack below it (about
/// 900 bytes) is free and writable; `fp` must be a readable `fxsave` area.
pub unsafe fn prepare_preempted(regs: &UserRegs, fp: *const u8) -> usize {
    // SAFETY: the caller's promise.
    unsafe { prepare_full(regs, fp, preempted_trampoline as *const () as usize) }
}

/// As [`prepare_preempted`], for a context the kernel stopped at a fault (a page-in, an
/// exception's reply) and gave back with an Unblock (`regs` every register, `fp` its
/// `fxsave` image): it resumes as a thread whose kernel call completed does, through
/// the runtime's `kernel_resumed`, then every register and its state are loaded.
///
/// # Safety
///
/// As for [`prepare_preempted`].
pub unsafe fn prepare_fault_resume(regs: &UserRegs, fp: *const u8) -> usize {
    // SAFETY: the caller's promise.
    unsafe { prepare_full(regs, fp, fault_trampoline as *const () as usize) }
}

/// [`prepare_preempted`]'s and [`prepare_fault_resume`]'s work: the frame's `ret` goes to
/// `trampoline`, with the registers' copy in `r12` and the state's in `r13`.
unsafe fn prepare_full(regs: &UserRegs, fp: *const u8, trampoline: usize) -> usize {
    let copy = regs.rsp as usize - PREEMPTED_COPY;
    // SAFETY: below the stopped context's stack pointer, free (the caller's promise); the
    // stopped `rsp` need not be aligned.
    unsafe { (copy as *mut UserRegs).write_unaligned(*regs) };
    let area = (copy - FP_AREA) & !15;
    // SAFETY: the area below the copy, free as above; `fp` is readable (the caller's
    // promise) and does not overlap it (it is on the upcall stack).
    unsafe { core::ptr::copy_nonoverlapping(fp, area as *mut u8, FP_AREA) };
    let sp = area - 48;
    // The frame, then the registers' copy and the state's, which the trampoline takes.
    // SAFETY: the 48 bytes below the area, free as above.
    unsafe { write_frame(sp, trampoline, [copy, area]) };
    sp
}

/// Where a context prepared by [`prepare_preempted`] starts: the registers' copy and the
/// floating-point state's above its frame (kept in `r12` and `r13` across the call).
#[unsafe(naked)]
extern "C" fn preempted_trampoline() -> ! {
    naked_asm!(
        "ldmxcsr [rsp]",
        "fldcw [rsp + 4]",
        "mov r12, [rsp + 24]",
        "mov r13, [rsp + 32]",
        "mov rdi, r12",
        "and rsp, -16",
        "call {finish}",
        "mov rdi, rax",
        "mov rsi, r13",
        "jmp {resume}",
        finish = sym crate::rt::preempted_resumed,
        resume = sym crate::upcall::resume_preempted,
    )
}

/// Where a context prepared by [`prepare_fault_resume`] starts: as
/// [`preempted_trampoline`].
#[unsafe(naked)]
extern "C" fn fault_trampoline() -> ! {
    naked_asm!(
        "ldmxcsr [rsp]",
        "fldcw [rsp + 4]",
        "mov r12, [rsp + 24]",
        "mov r13, [rsp + 32]",
        "mov rdi, r12",
        "and rsp, -16",
        "call {finish}",
        "mov rdi, rax",
        "mov rsi, r13",
        "jmp {resume}",
        finish = sym crate::rt::kernel_resumed,
        resume = sym crate::upcall::resume_preempted,
    )
}

/// The `vp_resume` system call's number (checked against `baton_abi` where it exists).
pub const VP_RESUME: u32 = 161;

/// Loads the floating-point and vector state `fp` and asks the kernel to continue at
/// `regs` (`vp_resume`); returns the call's error (raw) if it does not.
///
/// # Safety
///
/// `regs` and `fp` must be the registers and state of a stopped context of this program
/// that nothing else resumes.
#[unsafe(naked)]
pub unsafe extern "C" fn resume_kernel(regs: *const UserRegs, fp: *const u8) -> u64 {
    naked_asm!(
        "fxrstor64 [rsi]",
        "mov eax, {call}",
        "syscall",
        "ret",
        call = const VP_RESUME,
    )
}

/// Loads every register of `regs` — `rcx`, `r11` and the user flags too — and the
/// floating-point and vector state `fp`, and continues at `regs.rip` on `regs.rsp`, in
/// user mode alone: a context stopped by an interrupt goes on as if it had never stopped.
/// (The runtime resumes through the kernel's `vp_resume`, which raises `Strand.Resume`;
/// this is its fallback on a virtual processor the kernel does not know.)
///
/// # Safety
///
/// `regs` must be a copy laid by [`prepare_preempted`] for a stopped context of this
/// program that nothing else resumes (the two words above the copy are overwritten), `fp`
/// its state; nothing on the calling stack is used again.
#[unsafe(naked)]
pub unsafe extern "C" fn resume_full(regs: *const UserRegs, fp: *const u8) -> ! {
    naked_asm!(
        "fxrstor64 [rsi]",
        // The flags and `rip` go in the two words above the copy, below the red zone.
        "mov rax, [rdi + 136]",
        "mov [rdi + 160], rax",
        "mov rax, [rdi + 120]",
        "mov [rdi + 168], rax",
        // From here the stack pointer is at the copy, so that the copy is never below it.
        "mov rsp, rdi",
        "mov rax, [rdi]",
        "mov rbx, [rdi + 8]",
        "mov rcx, [rdi + 16]",
        "mov rdx, [rdi + 24]",
        "mov rsi, [rdi + 32]",
        "mov rbp, [rdi + 48]",
        "mov r8, [rdi + 56]",
        "mov r9, [rdi + 64]",
        "mov r10, [rdi + 72]",
        "mov r11, [rdi + 80]",
        "mov r12, [rdi + 88]",
        "mov r13, [rdi + 96]",
        "mov r14, [rdi + 104]",
        "mov r15, [rdi + 112]",
        "mov rdi, [rdi + 40]",
        "add rsp, 160",
        "popfq",
        "ret 128",
    )
}

// ---------------------------------------------------------------------------------------
// Exceptions as continuations (`crate::exception`)

/// What the exception dispatcher leaves on a faulting thread's stack for
/// [`exception_entry`]: the exception and where the copy of the thread's registers is.
#[repr(C)]
pub struct ExcInfo {
    /// The CPU vector.
    pub vector: u64,
    /// The CPU's error code.
    pub error: u64,
    /// The faulting address of a page fault.
    pub addr: u64,
    /// The copy of the registers, laid as [`resume_full`] wants it.
    pub regs: *mut UserRegs,
}

/// The bytes below a faulting thread's stack pointer that [`prepare_exception`] uses (the
/// red zone, the register copy, the [`ExcInfo`], the `fxsave` area and its alignment).
pub const EXC_FRAME: usize = PREEMPTED_COPY + size_of::<ExcInfo>() + FP_AREA + 32;

/// Lays the continuation of an exception handler on a stopped thread's stack: below its
/// stack pointer (past the red zone) a copy of its registers for [`resume_full`], the
/// exception, and room for its `fxsave` area. Returns the stack pointer and the argument
/// the thread must be resumed with at [`exception_entry`].
///
/// # Safety
///
/// `regs` are the registers of a stopped thread of this program whose stack has
/// [`EXC_FRAME`] writable bytes below `regs.rsp` that nothing uses.
pub unsafe fn prepare_exception(
    regs: &UserRegs,
    vector: u64,
    error: u64,
    addr: u64,
) -> (usize, usize) {
    let copy = regs.rsp as usize - PREEMPTED_COPY;
    // SAFETY: the caller's promise: these bytes of the stack are free.
    unsafe { (copy as *mut UserRegs).write_unaligned(*regs) };
    let info = (copy - size_of::<ExcInfo>()) & !7;
    // SAFETY: as above; aligned for an ExcInfo.
    unsafe {
        (info as *mut ExcInfo).write(ExcInfo {
            vector,
            error,
            addr,
            regs: copy as *mut UserRegs,
        })
    };
    let area = (info - FP_AREA) & !15;
    (area, info)
}

/// Where a thread stopped by an exception continues: saves its floating-point and vector
/// registers (live at the fault) in the area at `rsp` before any compiled code runs, and
/// calls the dispatcher's second half in the thread's own context with the [`ExcInfo`]
/// (`rdi`) and the area. The dispatcher never returns here (it resumes the thread with
/// [`resume_full`], unwinds it or ends it).
#[unsafe(naked)]
pub extern "C" fn exception_entry() -> ! {
    naked_asm!(
        "fxsave64 [rsp]",
        "mov rsi, rsp",
        // `rsp` is 16-byte aligned: the call leaves the callee the ABI's alignment.
        "call {dispatch}",
        "ud2",
        dispatch = sym crate::exception::in_thread,
    )
}

/// Calls `body(env)` with a catch point: returns 0 when `body` returns, or 1 when
/// [`catch_jump`] is called with the stack pointer this call stored at `slot`. The
/// callee-saved registers and the floating-point control words are restored either way.
///
/// # Safety
///
/// `slot` must stay writable while `body` runs; frames between this call and a
/// [`catch_jump`] are abandoned without running their destructors.
#[unsafe(naked)]
pub unsafe extern "C" fn catch_call(
    body: unsafe extern "C" fn(*mut u8),
    env: *mut u8,
    slot: *mut usize,
) -> u64 {
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
        "mov [rdx], rsp",
        "mov rax, rdi",
        "mov rdi, rsi",
        "call rax",
        "xor eax, eax",
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

/// Returns 1 from the [`catch_call`] that stored `sp`.
///
/// # Safety
///
/// `sp` was stored by a [`catch_call`] of the calling stack that has not returned; every
/// frame above it is abandoned.
#[unsafe(naked)]
pub unsafe extern "C" fn catch_jump(sp: usize) -> ! {
    naked_asm!(
        "mov rsp, rdi",
        "ldmxcsr [rsp]",
        "fldcw [rsp + 4]",
        "mov eax, 1",
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

/// Pushes a signal's continuation onto a context saved by [`switch`] at `sp`: below it, a
/// frame that [`switch`] resumes as a call of the runtime's `signalled(tcb)` (which runs
/// the thread's signal handlers, in its context) followed by the original frame. Returns
/// the new saved stack pointer.
///
/// # Safety
///
/// `sp` is the saved stack pointer of a context that is not running and that nothing else
/// changes meanwhile, with at least 48 free bytes below it.
pub unsafe fn push_signal_frame(sp: usize, tcb: usize) -> usize {
    let new = sp - 48;
    // The frame, then the original frame's stack pointer and the TCB, which the
    // trampoline takes.
    // SAFETY: the caller's promise: the 48 bytes below `sp` are free.
    unsafe { write_frame(new, signal_trampoline as *const () as usize, [sp, tcb]) };
    new
}

/// Where a context with a signal's continuation resumes: runs the handlers, then goes on
/// exactly as [`switch`] would have resumed the original frame (kept in `r12` across the
/// call).
#[unsafe(naked)]
extern "C" fn signal_trampoline() -> ! {
    naked_asm!(
        "ldmxcsr [rsp]",
        "fldcw [rsp + 4]",
        "mov r12, [rsp + 24]",
        "mov rdi, [rsp + 32]",
        "and rsp, -16",
        "call {signalled}",
        "mov rsp, r12",
        "ret",
        signalled = sym crate::rt::signalled,
    )
}

#[cfg(test)]
mod conversion_tests {
    use super::UserRegs;

    /// Every register survives the trip to the kernel's record and back, in its own place.
    #[test]
    fn registers_convert_field_for_field() {
        let words: [u64; 18] = core::array::from_fn(|i| 0x1000 + i as u64);
        let k = baton_abi::exception::UserRegs::from_words(&words);
        let ours = UserRegs::from(&k);
        let back = baton_abi::exception::UserRegs::from(&ours);
        assert_eq!(back.to_words(), words);
        assert_eq!((ours.rax, ours.rip, ours.rflags), (k.rax, k.rip, k.rflags));
        assert_eq!((ours.r15, ours.rsp), (k.r15, k.rsp));
    }
}
