//! Every way into the kernel — exceptions, interrupts, `syscall` — and the one way back.
//!
//! A thread's user registers live in its thread object (a [`TrapFrame`]), whose address
//! the per-CPU area holds at `gs:24` while the thread runs. The `syscall` entry stores the
//! registers straight into that frame and then moves to the kernel stack; so do interrupts
//! and exceptions from user mode, because `TSS.rsp0` is the frame's end (the CPU pushes
//! its part of the frame there, the stub the rest, and only then moves to the kernel
//! stack: no copy of the frame is made). Those from kernel mode stay on the kernel stack.
//! Every return to user mode — [`resume_current`], which is
//! `thread_syscall_return` and `thread_exception_return` of the continuations paper —
//! points `rsp` at the running thread's frame and runs `trap_exit`, which restores it with
//! `sysretq` when the frame was made by `syscall` and `iretq` otherwise. So the kernel
//! stack holds no user state at all: it is abandoned on every exit, which is what lets a
//! thread that blocks with a continuation give its stack away, and a switch costs no copy
//! of the frame.
//!
//! The floor calls (`baton_abi::floor`) are recognised in the first instructions of the
//! `syscall` entry, and the floor page-fault window in the first instructions of the
//! page-fault entry: they are the minimal paths the `floor.*` benchmarks measure
//! (`docs/benchmarks.md`); `crate::floor` holds the cross-address-space call.
//!
//! # Invariants
//! - The field order of [`TrapFrame`] is the push order in the assembly below.
//! - The kernel runs with interrupts off; the only place they are enabled is the idle
//!   loop's `sti; hlt`.
//! - `gs` holds the per-CPU base in kernel mode: entries from user mode `swapgs`, exits to
//!   user mode `swapgs` back.

use super::gdt::{self, USER_CS, USER_DS};
use crate::arch::serial::kprintln;
use baton_abi::floor;
use core::arch::global_asm;
use core::mem::size_of;
use core::sync::atomic::{AtomicU64, Ordering};
use x86_64::structures::idt::InterruptDescriptorTable;
use x86_64::{PrivilegeLevel, VirtAddr};

/// Vector recorded in frames made by the `syscall` entry (not a hardware vector).
pub const SYSCALL_VECTOR: u64 = 0x100;

/// The flags user mode starts with: interrupts on (IF) and the always-one bit 1.
pub const USER_RFLAGS: u64 = 0x202;
/// The `vector` of a frame whose registers were rewritten (an exception handler's reply):
/// anything but [`SYSCALL_VECTOR`] makes `trap_exit` leave by `iretq`, which restores
/// every register.
pub const RESUME_VECTOR: u64 = 0x101;
/// The LAPIC timer's vector.
pub const TIMER_VECTOR: u64 = 0x40;
/// The LAPIC spurious-interrupt vector.
pub const SPURIOUS_VECTOR: u64 = 0xff;
/// First vector of the (masked) legacy PIC.
pub const PIC_BASE: u64 = 0x20;

/// A thread's user register state as saved on entry to the kernel.
///
/// 16-byte aligned, as its size is a multiple of 16: its end is `TSS.rsp0` while its
/// thread runs, and the CPU aligns the stack it switches to on 16 bytes before it pushes.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default)]
#[allow(missing_docs)]
pub struct TrapFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    /// The vector that entered the kernel ([`SYSCALL_VECTOR`] for `syscall`).
    pub vector: u64,
    /// The exception's error code, or 0.
    pub error: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

const _: () =
    assert!(size_of::<TrapFrame>() == 22 * 8 && size_of::<TrapFrame>().is_multiple_of(16));
const _: () = assert!(core::mem::align_of::<TrapFrame>() == 16);

impl TrapFrame {
    /// The frame of a thread that has never run: it starts at `entry` with stack `rsp`,
    /// interrupts on and `rdi` = `arg`.
    pub fn new_user(entry: u64, rsp: u64, arg: u64) -> TrapFrame {
        TrapFrame {
            rip: entry,
            rsp,
            rdi: arg,
            cs: u64::from(USER_CS),
            ss: u64::from(USER_DS),
            rflags: USER_RFLAGS,
            ..TrapFrame::default()
        }
    }

    /// Whether the kernel was entered from user mode.
    pub fn from_user(&self) -> bool {
        self.cs & 3 == 3
    }

    /// The general registers, `rip`, `rsp` and `rflags`, as an exception message carries
    /// them.
    pub fn user_regs(&self) -> baton_abi::exception::UserRegs {
        baton_abi::exception::UserRegs {
            rax: self.rax,
            rbx: self.rbx,
            rcx: self.rcx,
            rdx: self.rdx,
            rsi: self.rsi,
            rdi: self.rdi,
            rbp: self.rbp,
            r8: self.r8,
            r9: self.r9,
            r10: self.r10,
            r11: self.r11,
            r12: self.r12,
            r13: self.r13,
            r14: self.r14,
            r15: self.r15,
            rip: self.rip,
            rsp: self.rsp,
            rflags: self.rflags,
        }
    }

    /// Takes the general registers, `rip`, `rsp` and `rflags` from `r`, as they are: the
    /// caller has checked them (user addresses, user flags). The frame then leaves by
    /// `iretq` ([`RESUME_VECTOR`]), which restores every register (`sysretq` would take
    /// `rcx` and `r11`).
    pub fn set_user_regs(&mut self, r: &baton_abi::exception::UserRegs) {
        *self = TrapFrame {
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
            vector: RESUME_VECTOR,
            ..*self
        };
    }

    /// Gives `put` each register of [`TrapFrame::user_regs`] with its index in
    /// `UserRegs`' field order (`rax` 0 ... `rflags` 17), in straight-line code: the
    /// exception fast path writes them into a handler's buffer without a copy between.
    #[inline(always)]
    pub fn for_each_user_reg(&self, mut put: impl FnMut(usize, u64)) {
        put(0, self.rax);
        put(1, self.rbx);
        put(2, self.rcx);
        put(3, self.rdx);
        put(4, self.rsi);
        put(5, self.rdi);
        put(6, self.rbp);
        put(7, self.r8);
        put(8, self.r9);
        put(9, self.r10);
        put(10, self.r11);
        put(11, self.r12);
        put(12, self.r13);
        put(13, self.r14);
        put(14, self.r15);
        put(15, self.rip);
        put(16, self.rsp);
        put(17, self.rflags);
    }

    /// [`TrapFrame::set_user_regs`] from the registers' words as `word(i)` gives them
    /// (index `i` in `UserRegs`' field order), except `rip`, `rsp` and `rflags`, which the
    /// caller has read and checked once and gives as they are.
    #[inline(always)]
    pub fn set_user_regs_with(
        &mut self,
        word: impl Fn(usize) -> u64,
        rip: u64,
        rsp: u64,
        rflags: u64,
    ) {
        (self.rax, self.rbx, self.rcx, self.rdx) = (word(0), word(1), word(2), word(3));
        (self.rsi, self.rdi, self.rbp, self.r8) = (word(4), word(5), word(6), word(7));
        (self.r9, self.r10, self.r11, self.r12) = (word(8), word(9), word(10), word(11));
        (self.r13, self.r14, self.r15) = (word(12), word(13), word(14));
        (self.rip, self.rsp, self.rflags) = (rip, rsp, rflags);
        self.vector = RESUME_VECTOR;
    }

    /// The system-call number and arguments (`rax`; `rdi`, `rsi`, `rdx`, `r10`, `r8`, `r9`).
    pub fn syscall_args(&self) -> (u64, [u64; 6]) {
        (
            self.rax,
            [self.rdi, self.rsi, self.rdx, self.r10, self.r8, self.r9],
        )
    }
}

/// RFLAGS bits a user trap's entry clears (`CLEAR_USER_FLAGS`, in `trap_common` and
/// `trap_exception`): DF (the ABI's direction) and AC
/// (SMAP), as the `syscall` entry's flag mask does.
const TRAP_CLEARED_FLAGS: u64 = super::cpu::RFLAGS_AC | (1 << 10);

global_asm!(
    r#"
    .section .text.trap, "ax"
    .p2align 4
    .global trap_stubs
trap_stubs:
    .set vec, 0
    .rept 256
    .p2align 4
    .if (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
    .else
    pushq $0
    .endif
    pushq $vec
    // The exceptions a user thread's handler takes go straight to the exception family
    // (`trap_exception`); the first floating-point use (7), the page fault (14, whose
    // entry is `floor_page_fault`), the vectors with a stack of their own (2, 8, 18) and
    // every interrupt take the common way.
    .if (vec < 32) && (vec != 2) && (vec != 7) && (vec != 8) && (vec != 14) && (vec != 18)
    jmp trap_exception
    .else
    jmp trap_common
    .endif
    .set vec, vec + 1
    .endr

    // The general registers, in `TrapFrame`'s order (the frame's first fifteen words).
    // The user's DF and AC off, as the `syscall` entry's flag mask does: an interrupt or
    // exception gate keeps them, and AC set in ring 0 turns SMAP off (`clac` is not used:
    // it is an invalid opcode where there is no SMAP). The user's own flags are in the
    // frame and go back with it. Every entry from user mode takes it, on the kernel stack.
    .macro CLEAR_USER_FLAGS
    pushfq
    andq ${not_df_ac}, (%rsp)
    popfq
    .endm

    .macro PUSH_GPRS
    pushq %rax
    pushq %rbx
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %rbp
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    .endm

trap_common:
    testb $3, 24(%rsp)
    jz trap_kernel
    // From user mode: `rsp` is inside the running thread's frame (`TSS.rsp0` is its end,
    // `gs:24` its start), so the pushes below complete the frame in place; then the kernel
    // stack. (The vectors with a stack of their own push there; the dispatcher copies that
    // frame.) The way back is always through the thread's frame (`resume_current_frame`).
    swapgs
    PUSH_GPRS
    movq %rsp, %rdi
    movq %gs:0, %rsp
    CLEAR_USER_FLAGS
    callq trap_dispatch
    movq %gs:24, %rsp
    jmp trap_exit

    // A user thread's exception, from user mode: the frame completed in place as above,
    // then `exception_dispatch` (the exception family), which does not return: it leaves
    // to user mode itself, or ends the thread. From kernel mode, the common way.
trap_exception:
    testb $3, 24(%rsp)
    jz trap_kernel
    swapgs
    PUSH_GPRS
    movq %gs:0, %rsp
    CLEAR_USER_FLAGS
    callq exception_dispatch

    // From kernel mode: the frame is on the kernel stack, and so is the way back.
trap_kernel:
    PUSH_GPRS
    movq %rsp, %rdi
    cld
    callq trap_dispatch

    .global trap_exit
trap_exit:
    cmpq ${syscall_vector}, 120(%rsp)
    je 3f
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rbp
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rbx
    popq %rax
    addq $16, %rsp
    testb $3, 8(%rsp)
    jz 2f
    swapgs
2:
    iretq
    // The `syscall` frame's way back: loads at the frame's offsets rather than pops, so
    // the two slots `sysretq` does not take (`rcx`, `r11`) cost nothing to skip.
3:
    movq {o_r15}(%rsp), %r15
    movq {o_r14}(%rsp), %r14
    movq {o_r13}(%rsp), %r13
    movq {o_r12}(%rsp), %r12
    movq {o_r10}(%rsp), %r10
    movq {o_r9}(%rsp), %r9
    movq {o_r8}(%rsp), %r8
    movq {o_rbp}(%rsp), %rbp
    movq {o_rdi}(%rsp), %rdi
    movq {o_rsi}(%rsp), %rsi
    movq {o_rdx}(%rsp), %rdx
    movq {o_rbx}(%rsp), %rbx
    movq {o_rax}(%rsp), %rax
    movq {o_rip}(%rsp), %rcx
    movq {o_rflags}(%rsp), %r11
    movq {o_rsp}(%rsp), %rsp
    swapgs
    sysretq

    // The `syscall` entry saves the user registers straight into the running thread's
    // frame (`gs:24`, in the thread object), not on the kernel stack: the stack then holds
    // nothing a continuation needs, and no copy is made on a switch. Stores at the
    // frame's offsets, not pushes, so that the slots a `syscall` frame does not need are
    // skipped: `cs` and `ss` (a user thread's frame always holds its user selectors: every
    // frame is made by `TrapFrame::new_user` or an entry from user mode, and the way back
    // from a `syscall` frame is `sysretq`, which does not read them) and `error` (read only
    // for an exception's frame, whose entry writes it). `rcx` and `r11` get `rip` and
    // `rflags`, which is what the `syscall` left in them. Leaves `rsp` at the frame's start
    // and `rcx` holding the user `rsp`.
    .macro SYSCALL_SAVE
    swapgs
    movq %rsp, %gs:8
    movq %gs:24, %rsp
    movq %rcx, {o_rip}(%rsp)
    movq %rcx, {o_rcx}(%rsp)
    movq %r11, {o_rflags}(%rsp)
    movq %r11, {o_r11}(%rsp)
    movq %gs:8, %rcx
    movq %rcx, {o_rsp}(%rsp)
    movq ${syscall_vector}, {o_vector}(%rsp)
    movq %rax, {o_rax}(%rsp)
    movq %rbx, {o_rbx}(%rsp)
    movq %rdx, {o_rdx}(%rsp)
    movq %rsi, {o_rsi}(%rsp)
    movq %rdi, {o_rdi}(%rsp)
    movq %rbp, {o_rbp}(%rsp)
    movq %r8, {o_r8}(%rsp)
    movq %r9, {o_r9}(%rsp)
    movq %r10, {o_r10}(%rsp)
    movq %r12, {o_r12}(%rsp)
    movq %r13, {o_r13}(%rsp)
    movq %r14, {o_r14}(%rsp)
    movq %r15, {o_r15}(%rsp)
    .endm

    // Takes the extensions' lean entry's record off the kernel stack: the user's registers
    // as the `syscall` left them, its stack and `gs` back. Changes no flag (`lea`, not
    // `add`), so a compare made before it can be branched on after it.
    .macro EXT_POP_RECORD
    leaq 16(%rsp), %rsp
    popq %rdi
    popq %rsi
    popq %rdx
    popq %r10
    popq %r8
    popq %r9
    popq %r11
    popq %rcx
    movq %gs:8, %rsp
    swapgs
    .endm

    .global syscall_entry
syscall_entry:
    // The extensions' range (`baton_abi::spin`) and the floor calls (`baton_abi::floor`)
    // lie above every base call: one compare sends both off the base calls' way.
    cmpq ${ext_first}, %rax
    jae high_syscall
syscall_general:
    SYSCALL_SAVE
    movq %gs:0, %rsp
    // The entry hook (tracing), off: a compare and a branch not taken.
    cmpb $0, {entry_hook}(%rip)
    jne 6f
5:
    // A thread in a floor cross-address-space call: every system call but the partner's
    // return ends the call (`floor::on_syscall`).
    cmpq $0, %gs:40
    jne floor_dispatch_entry
    movq %rax, %rdi
    // `ipc_msg` tries the RPC fast paths first, in a function of their own (small, so
    // its registers stay in registers), which goes on to the general path itself when
    // they do not apply: it does not return (the call keeps the stack aligned).
    cmpq ${sys_ipc_msg}, %rax
    jne 1f
    callq ipc_fast_dispatch
    // `act_return` (the end of a migrating call) too, and it does not return.
1:  cmpq ${sys_act_return}, %rax
    je act_return_dispatch
    callq syscall_dispatch
    // Back to user mode from the running thread's frame (which may be another thread's
    // than the one that entered, after a process-model switch back).
    .global resume_current_frame
resume_current_frame:
    movq %gs:24, %rsp
    jmp trap_exit

    // The entry hook, on: `syscall_entry_hook(number)`, then the entry goes on. The user's
    // registers are in the frame already, so `rbx` may keep the number across the call.
6:  movq %rax, %rbx
    movq %rax, %rdi
    callq syscall_entry_hook
    movq %rbx, %rax
    jmp 5b

    // Above the base calls: the floor calls, or a call of the extensions' range, which
    // goes to `Trap.SystemCall` at once; numbers between the two ranges take the general
    // way.
    //
    // The extensions' range has a lean entry: the user `rsp` goes to `gs:8` as in the
    // general save, and only the registers a Rust call may change and the system call
    // must keep (`rcx`, `r11` and the six argument registers) are pushed on the kernel
    // stack, then the number and a slot for the task: `Trap.SystemCall`'s record
    // (`extension::Call`), which `extension_fast` raises in place; the callee-saved registers
    // stay in the CPU, kept by the compiler. Its answer is `rax` = value, `rdx` = what
    // next: 0, back to user space at once with the registers popped; otherwise the user's
    // registers are put back as the `syscall` left them and a full save into the
    // thread's frame follows: 1 (nothing ran: a thread to be killed, a handler that may
    // block...) the general entry's way for the range (`extension_dispatch`), 2 (a
    // handler answered `rax`, but the thread is to be preempted or stopped, the lock
    // still held) `extension_finish`, 3 (no handler took the number, the lock held)
    // `extension_unknown`; for 1 and 3 `rax` is the number again, from the record. With
    // the entry hook on or in a floor call, the general way at once.
high_syscall:
    cmpq ${floor_base}, %rax
    jae floor_syscall
    cmpq ${ext_end}, %rax
    jae syscall_general
    swapgs
    movq %rsp, %gs:8
    movq %gs:0, %rsp
    pushq %rcx
    pushq %r11
    pushq %r9
    pushq %r8
    pushq %r10
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %rax
    pushq %rax
    cmpb $0, {entry_hook}(%rip)
    jne ext_undo
    cmpq $0, %gs:40
    jne ext_undo
    // The big lock (`kernel::lock`'s word, by its symbol), taken here so that
    // `extension_fast` makes no call before its handler's (the record's pointer then needs
    // no register kept across one): bit 0 of its word set atomically, the carry saying it
    // was set already. Contended, `extension_lock_wait` spins for it.
    lock btsl $0, kernel_lock_word(%rip)
    jc ext_lock_wait
ext_locked:
    movq %rsp, %rdi
    callq extension_fast
    cmpq $1, %rdx
    jae ext_slow
    EXT_POP_RECORD
    sysretq
    // Not answered at once (the flags of the compare survive `EXT_POP_RECORD`).
ext_slow:
    je 1f
    cmpq $3, %rdx
    jne 2f
1:  movq 8(%rsp), %rax
2:  cmpq $2, %rdx
    EXT_POP_RECORD
    jb ext_general
    je ext_finish
    SYSCALL_SAVE
    movq %gs:0, %rsp
    movq %rax, %rdi
    callq extension_unknown
ext_finish:
    SYSCALL_SAVE
    movq %gs:0, %rsp
    movq %rax, %rdi
    callq extension_finish
    // The lock is held elsewhere: wait for it as `kernel::lock` does.
ext_lock_wait:
    callq extension_lock_wait
    jmp ext_locked
    // The entry hook is on or the thread is in a floor call: the general way.
ext_undo:
    EXT_POP_RECORD
    jmp syscall_general
    // The range's way with the full save (the semantic reference of the lean entry).
ext_general:
    SYSCALL_SAVE
    movq %gs:0, %rsp
    cmpb $0, {entry_hook}(%rip)
    jne 6b
    cmpq $0, %gs:40
    jne floor_dispatch_entry
    movq %rax, %rdi
    callq extension_dispatch

    // The floor calls. Interrupts are off (FMASK); `rcx` and `r11` hold the user `rip`
    // and `rflags` for `sysretq`.
floor_syscall:
    je floor_minimal
    cmpq ${floor_full}, %rax
    je floor_full
    cmpq ${floor_space}, %rax
    je floor_space
    cmpq ${floor_fault_arm}, %rax
    je floor_fault_arm
    cmpq ${floor_end}, %rax
    jae syscall_general
    // The cross-address-space calls: a full save, then the kernel's `floor` module.
    SYSCALL_SAVE
    movq %gs:0, %rsp
floor_dispatch_entry:
    movq %rax, %rdi
    callq floor_dispatch
    jmp resume_current_frame

    // `floor_minimal`: nothing saved, nothing touched.
floor_minimal:
    xorl %eax, %eax
    sysretq

    // `floor_full`: the general entry's save into the frame, then its restore.
floor_full:
    SYSCALL_SAVE
    movq $0, {o_rax}(%rsp)
    jmp trap_exit

    // `floor_space`: CR3 := the kernel's root (PCID 0), CR3 := the caller's root again,
    // both keeping the TLB when PCIDs are on. `rdx` is the scratch register (left 0); the
    // user `rsp` is never used.
floor_space:
    movq %cr3, %rdx
    movq {kernel_cr3}(%rip), %rax
    movq %rax, %cr3
    orq {noflush}(%rip), %rdx
    movq %rdx, %cr3
    xorl %edx, %edx
    xorl %eax, %eax
    sysretq

    // `floor_fault_arm(on)`: `gs:32` := on.
floor_fault_arm:
    swapgs
    movq %rdi, %gs:32
    swapgs
    xorl %eax, %eax
    sysretq

    // The page-fault entry. A user-mode data access at `FLOOR_FAULT_BASE + n`
    // (1 <= n <= 15) by a thread that armed the window resumes `n` bytes further
    // (`baton_abi::floor::floor_fault_skip`); anything else goes to the common stub.
    // On entry: error code at 0(%rsp), rip at 8, cs at 16.
    .global floor_page_fault
floor_page_fault:
    testb $3, 16(%rsp)
    jz 9f
    swapgs
    cmpq $0, %gs:32
    je 8f
    pushq %rax
    movq %cr2, %rax
    subq floor_fault_base(%rip), %rax
    testq %rax, %rax
    jz 7f
    cmpq ${fault_max}, %rax
    ja 7f
    testb $0x10, 8(%rsp)
    jnz 7f
    addq %rax, 16(%rsp)
    popq %rax
    swapgs
    addq $8, %rsp
    iretq
7:
    popq %rax
8:
    swapgs
9:
    pushq $14
    jmp trap_common

    .section .rodata
    .p2align 3
floor_fault_base:
    .quad {fault_base}
    .text
    "#,
    syscall_vector = const SYSCALL_VECTOR,
    not_df_ac = const !(TRAP_CLEARED_FLAGS as i64),
    o_r15 = const core::mem::offset_of!(TrapFrame, r15),
    o_r14 = const core::mem::offset_of!(TrapFrame, r14),
    o_r13 = const core::mem::offset_of!(TrapFrame, r13),
    o_r12 = const core::mem::offset_of!(TrapFrame, r12),
    o_r11 = const core::mem::offset_of!(TrapFrame, r11),
    o_r10 = const core::mem::offset_of!(TrapFrame, r10),
    o_r9 = const core::mem::offset_of!(TrapFrame, r9),
    o_r8 = const core::mem::offset_of!(TrapFrame, r8),
    o_rbp = const core::mem::offset_of!(TrapFrame, rbp),
    o_rdi = const core::mem::offset_of!(TrapFrame, rdi),
    o_rsi = const core::mem::offset_of!(TrapFrame, rsi),
    o_rdx = const core::mem::offset_of!(TrapFrame, rdx),
    o_rcx = const core::mem::offset_of!(TrapFrame, rcx),
    o_rbx = const core::mem::offset_of!(TrapFrame, rbx),
    o_rax = const core::mem::offset_of!(TrapFrame, rax),
    o_vector = const core::mem::offset_of!(TrapFrame, vector),
    o_rip = const core::mem::offset_of!(TrapFrame, rip),
    o_rflags = const core::mem::offset_of!(TrapFrame, rflags),
    o_rsp = const core::mem::offset_of!(TrapFrame, rsp),
    floor_base = const floor::FLOOR_BASE,
    ext_first = const baton_abi::spin::EXT_SYSCALL_FIRST,
    ext_end = const baton_abi::spin::EXT_SYSCALL_END,
    sys_ipc_msg = const baton_abi::Sys::IpcMsg as u64,
    sys_act_return = const baton_abi::Sys::ActReturn as u64,
    floor_full = const floor::FLOOR_FULL,
    floor_space = const floor::FLOOR_SPACE,
    floor_fault_arm = const floor::FLOOR_FAULT_ARM,
    floor_end = const floor::FLOOR_END,
    fault_max = const floor::FLOOR_FAULT_MAX_LEN,
    fault_base = const floor::FLOOR_FAULT_BASE,
    kernel_cr3 = sym FLOOR_KERNEL_CR3,
    noflush = sym FLOOR_NOFLUSH,
    entry_hook = sym ENTRY_HOOK,
    options(att_syntax)
);

/// Whether the `syscall` entry calls `syscall_entry_hook(number)` (defined by the core:
/// the timeline trace's entry record) before it goes on. Off, it costs the entry one
/// compare and one branch.
static ENTRY_HOOK: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Turns the `syscall` entry's hook on or off ([`ENTRY_HOOK`]).
pub fn set_entry_hook(on: bool) {
    ENTRY_HOOK.store(on, Ordering::Relaxed);
}

/// The CR3 value `floor_space` loads first: the kernel's root, PCID 0, with the no-flush
/// bit when PCIDs are on. Set once at boot ([`set_floor_roots`]).
static FLOOR_KERNEL_CR3: AtomicU64 = AtomicU64::new(0);
/// What `floor_space` ORs into the caller's CR3 to reload it: the no-flush bit (63) when
/// PCIDs are on, else 0 (the bit is reserved without PCIDs).
static FLOOR_NOFLUSH: AtomicU64 = AtomicU64::new(0);

/// Gives the `floor_space` call the kernel's root, before any user task runs.
pub fn set_floor_roots(kernel_root: u64) {
    let noflush = if super::cpu::pcid_enabled() {
        1 << 63
    } else {
        0
    };
    FLOOR_KERNEL_CR3.store(kernel_root | noflush, Ordering::Relaxed);
    FLOOR_NOFLUSH.store(noflush, Ordering::Relaxed);
}

extern "C" {
    static trap_stubs: u8;
    fn syscall_entry();
    fn floor_page_fault();
    fn resume_current_frame() -> !;
}

/// Bytes between two vectors' stubs in `trap_stubs`.
const STUB_STRIDE: u64 = 16;

static IDT: spin::Once<InterruptDescriptorTable> = spin::Once::new();

/// Loads the IDT (every vector goes to its stub) and programs the `syscall` MSRs.
pub fn init() {
    let base = core::ptr::addr_of!(trap_stubs) as u64;
    let idt = IDT.call_once(|| {
        let mut idt = InterruptDescriptorTable::new();
        let stub = |v: u64| VirtAddr::new(base + v * STUB_STRIDE);
        // SAFETY: (for every `set_handler_addr` below) each stub address is the entry of
        // the assembly stub for that vector, which saves a full frame and never returns
        // to the vector's caller except through `trap_exit`; the page fault's entry,
        // `floor_page_fault`, either resumes a user-mode floor fault with `iretq` (having
        // changed only the saved user `rip`, on the trap stack) or continues into vector
        // 14's stub code with the stack as the CPU left it.
        unsafe {
            idt.divide_error.set_handler_addr(stub(0));
            idt.debug.set_handler_addr(stub(1));
            idt.non_maskable_interrupt
                .set_handler_addr(stub(2))
                .set_stack_index(gdt::IST_FATAL);
            idt.breakpoint
                .set_handler_addr(stub(3))
                .set_privilege_level(PrivilegeLevel::Ring3);
            idt.overflow.set_handler_addr(stub(4));
            idt.bound_range_exceeded.set_handler_addr(stub(5));
            idt.invalid_opcode.set_handler_addr(stub(6));
            idt.device_not_available.set_handler_addr(stub(7));
            idt.double_fault
                .set_handler_addr(stub(8))
                .set_stack_index(gdt::IST_FATAL);
            idt.invalid_tss.set_handler_addr(stub(10));
            idt.segment_not_present.set_handler_addr(stub(11));
            idt.stack_segment_fault.set_handler_addr(stub(12));
            idt.general_protection_fault.set_handler_addr(stub(13));
            idt.page_fault
                .set_handler_addr(VirtAddr::new(floor_page_fault as *const () as u64));
            idt.x87_floating_point.set_handler_addr(stub(16));
            idt.alignment_check.set_handler_addr(stub(17));
            idt.machine_check
                .set_handler_addr(stub(18))
                .set_stack_index(gdt::IST_FATAL);
            idt.simd_floating_point.set_handler_addr(stub(19));
            idt.virtualization.set_handler_addr(stub(20));
            idt.cp_protection_exception.set_handler_addr(stub(21));
            idt.hv_injection_exception.set_handler_addr(stub(28));
            idt.vmm_communication_exception.set_handler_addr(stub(29));
            idt.security_exception.set_handler_addr(stub(30));
            for (i, entry) in idt.slice_mut(32..).iter_mut().enumerate() {
                entry.set_handler_addr(stub(32 + i as u64));
            }
        }
        idt
    });
    idt.load();

    // SAFETY: IA32_STAR/LSTAR/FMASK exist on x86-64 and EFER.SCE was set at boot. STAR
    // names the GDT layout of `gdt` (kernel CS 0x08, SS 0x10; sysret bases at 0x10 so user
    // SS = 0x18|3, CS = 0x20|3). FMASK clears IF, TF, DF, AC and NT on entry.
    unsafe {
        let star = (u64::from(gdt::KERNEL_DS | 3) << 48) | (u64::from(gdt::KERNEL_CS) << 32);
        super::cpu::wrmsr(0xc000_0081, star);
        super::cpu::wrmsr(0xc000_0082, syscall_entry as *const () as u64);
        super::cpu::wrmsr(0xc000_0084, 0x4_7700);
    }
}

/// Enters user mode with the running thread's saved frame (the one [`gdt::set_user_frame`]
/// names), discarding everything on the kernel stack: `thread_syscall_return` and
/// `thread_exception_return` of the paper. The caller has released the kernel lock.
#[inline(always)]
pub fn resume_current() -> ! {
    // SAFETY: `gs:24` names the running thread's frame, which stays put while it runs here
    // (see `set_user_frame`); no other CPU writes the frame of a running thread. Every
    // constructor of user frames sets CPL 3 selectors, so `trap_exit` enters user mode, and
    // the kernel state on this stack is abandoned for good.
    unsafe { resume_current_frame() }
}

// The assembly above calls up into the kernel through these symbols, each defined (with
// `#[no_mangle]`) by the layer it belongs to, so that this layer imports nothing above it:
// `trap_dispatch` (every interrupt and exception: the core, `kernel.rs`),
// `exception_dispatch` (the user-mode exceptions a handler takes: `exception.rs`),
// `syscall_dispatch`, `ipc_fast_dispatch` and `act_return_dispatch` (system-call decode,
// `syscall.rs`), and `floor_dispatch` (the floor calls, `floor.rs`).

/// The name of an exception vector.
pub fn exception_name(vector: u64) -> &'static str {
    match vector {
        0 => "divide error",
        1 => "debug",
        2 => "non-maskable interrupt",
        3 => "breakpoint",
        4 => "overflow",
        5 => "bound range exceeded",
        6 => "invalid opcode",
        7 => "device not available",
        8 => "double fault",
        10 => "invalid TSS",
        11 => "segment not present",
        12 => "stack-segment fault",
        13 => "general protection fault",
        14 => "page fault",
        16 => "x87 floating-point error",
        17 => "alignment check",
        18 => "machine check",
        19 => "SIMD floating-point error",
        20 => "virtualization exception",
        21 => "control protection",
        _ => "reserved exception",
    }
}

/// Describes a page-fault error code.
pub fn page_fault_detail(error: u64) -> (&'static str, &'static str, &'static str) {
    let presence = if error & 1 != 0 {
        "protection violation"
    } else {
        "not present"
    };
    let access = if error & 16 != 0 {
        "instruction fetch"
    } else if error & 2 != 0 {
        "write"
    } else {
        "read"
    };
    let mode = if error & 4 != 0 { "user" } else { "kernel" };
    (presence, access, mode)
}

/// Prints every register of `frame`.
pub fn dump_frame(frame: &TrapFrame) {
    let f = frame;
    kprintln!(
        "  rip={:#018x} rsp={:#018x} rflags={:#x} cs={:#x} ss={:#x} error={:#x}",
        f.rip,
        f.rsp,
        f.rflags,
        f.cs,
        f.ss,
        f.error
    );
    kprintln!(
        "  rax={:#018x} rbx={:#018x} rcx={:#018x} rdx={:#018x}",
        f.rax,
        f.rbx,
        f.rcx,
        f.rdx
    );
    kprintln!(
        "  rsi={:#018x} rdi={:#018x} rbp={:#018x} r8 ={:#018x}",
        f.rsi,
        f.rdi,
        f.rbp,
        f.r8
    );
    kprintln!(
        "  r9 ={:#018x} r10={:#018x} r11={:#018x} r12={:#018x}",
        f.r9,
        f.r10,
        f.r11,
        f.r12
    );
    kprintln!(
        "  r13={:#018x} r14={:#018x} r15={:#018x}",
        f.r13,
        f.r14,
        f.r15
    );
}
