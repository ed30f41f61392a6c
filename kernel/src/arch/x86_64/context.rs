//! The machine-dependent control-transfer interface of the continuations paper (Figure 3):
//! kernel stacks that are attached to threads, handed off between them and discarded, and
//! the two ways to run a thread on a stack — calling its continuation on a fresh stack, or
//! switching to the registers it saved when it blocked in the process model.
//!
//! | paper | here |
//! |---|---|
//! | `stack_attach(thread, stack, cont)` | [`stack_attach`]: prepares a stack so that [`switch_context`] to it runs `thread_continue` |
//! | `stack_detach(thread)` | the caller takes the [`KernelStack`] out of the thread object |
//! | `stack_handoff(new)` | [`stack_handoff`]: the running stack becomes the new thread's (address space and `rsp0` follow) |
//! | `call_continuation(cont)` | [`call_continuation`]: resets `rsp` to the stack's base and calls the continuation |
//! | `switch_context(cont, new)` | [`switch_context`]: saves callee-saved registers only when the old thread keeps its stack |
//! | `thread_syscall_return` / `thread_exception_return` | [`super::trap::resume_current`]: points `rsp` at the running thread's saved user frame (in the thread object) and leaves through `trap_exit` (`sysretq` for frames made by `syscall`, `iretq` otherwise) |
//!
//! # Invariants
//! - The top [`FRAME_SLOT`] bytes of every kernel stack are reserved for the frame the CPU
//!   and the stub push on an interrupt or exception from user mode; kernel code runs below
//!   them.
//! - A stack's saved `rsp` (in [`SavedContext`]) is meaningful only while its thread is
//!   blocked in the process model.

use super::trap::TrapFrame;
use core::arch::global_asm;
use core::mem::size_of;

/// Bytes at the top of every kernel stack reserved for the user frame.
pub const FRAME_SLOT: u64 = size_of::<TrapFrame>() as u64;

/// A kernel stack, known by its top (one past its highest address, 16-byte aligned; its
/// size is its allocator's business). One word, and `Option<KernelStack>` too: the RPC fast
/// path moves a stack from thread to thread on every transfer.
#[derive(Debug, PartialEq, Eq)]
pub struct KernelStack {
    top: core::num::NonZeroU64,
}

impl KernelStack {
    /// The stack whose top is `top`; `None` for 0.
    pub fn new(top: u64) -> Option<KernelStack> {
        core::num::NonZeroU64::new(top).map(|top| KernelStack { top })
    }

    /// One past its highest address.
    #[inline]
    pub fn top(&self) -> u64 {
        self.top.get()
    }

    /// Where kernel code starts on this stack (below the user-frame slot).
    pub fn start(&self) -> u64 {
        self.top() - FRAME_SLOT
    }
}

/// What `switch_context` saves for a thread that keeps its stack: the stack pointer (the
/// callee-saved registers are pushed on the stack itself).
#[derive(Clone, Copy, Debug, Default)]
pub struct SavedContext {
    /// The saved `rsp`, 0 when nothing is saved.
    pub rsp: u64,
}

global_asm!(
    r#"
    .section .text.context, "ax"
    // switch_stacks(save: *mut u64, new_rsp: u64, prev: u64) -> u64
    // Pushes the callee-saved registers, stores rsp through `save` (if non-null), loads
    // `new_rsp`, pops the registers saved there and returns `prev` on the new stack.
    .global baton_switch_stacks
baton_switch_stacks:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    testq %rdi, %rdi
    jz 1f
    movq %rsp, (%rdi)
1:
    movq %rsi, %rsp
    movq %rdx, %rax
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    retq

    // First code run on a freshly attached stack: the previous thread arrives in rax.
    .global baton_continue_trampoline
baton_continue_trampoline:
    movq %rax, %rdi
    andq $-16, %rsp
    callq baton_thread_continue
    ud2

    // call_on_stack(rsp, f, arg): runs f(arg) with the given stack; f never returns.
    .global baton_call_on_stack
baton_call_on_stack:
    movq %rdi, %rsp
    movq %rdx, %rdi
    callq *%rsi
    ud2
    "#,
    options(att_syntax)
);

extern "C" {
    fn baton_switch_stacks(save: *mut u64, new_rsp: u64, prev: u64) -> u64;
    fn baton_call_on_stack(rsp: u64, f: extern "C" fn(u64) -> !, arg: u64) -> !;
    static baton_continue_trampoline: u8;
}

/// Prepares `stack` so that the first [`switch_context`] to it runs
/// `baton_thread_continue(previous thread)` (the kernel's `thread_continue`), and returns the
/// `rsp` to switch to.
pub fn stack_attach(stack: &KernelStack) -> SavedContext {
    let start = stack.start();
    // Six callee-saved registers (zero), then the return address of `baton_switch_stacks`.
    let rsp = start - 8 * 8;
    let words: [u64; 8] = [
        0,
        0,
        0,
        0,
        0,
        0,
        core::ptr::addr_of!(baton_continue_trampoline) as u64,
        0,
    ];
    // SAFETY: `[rsp, start)` lies inside the stack's mapped range below the frame slot, and
    // the stack is not in use by anyone (it is being attached to a thread that has none).
    unsafe { core::ptr::copy_nonoverlapping(words.as_ptr(), rsp as *mut u64, words.len()) };
    SavedContext { rsp }
}

/// Switches to the stack saved in `new`. With `save = Some(ctx)` the current thread keeps its
/// stack (process model): its registers are pushed and its `rsp` stored in `ctx`, and the
/// call returns when some thread switches back to it, giving that thread's `prev` value.
/// With `save = None` the current stack is abandoned (the caller blocked with a
/// continuation) and the call never returns.
///
/// # Safety
/// `new.rsp` must come from [`stack_attach`] or from an earlier `switch_context` that saved
/// it, on a stack that no one else runs on; `ctx` must stay valid until the switch back.
pub unsafe fn switch_context(save: Option<&mut SavedContext>, new: SavedContext, prev: u64) -> u64 {
    let save_ptr = match save {
        Some(ctx) => core::ptr::addr_of_mut!(ctx.rsp),
        None => core::ptr::null_mut(),
    };
    // SAFETY: forwarded to the caller; `baton_switch_stacks` follows the C ABI and preserves
    // every callee-saved register across the switch back.
    unsafe { baton_switch_stacks(save_ptr, new.rsp, prev) }
}

/// Calls the continuation `f(arg)` on `stack`, resetting the stack pointer to its start:
/// whatever the kernel had on the stack is discarded.
///
/// # Safety
/// The caller must be running on `stack` (or on a stack it abandons for good), and nothing
/// may refer to data on it afterwards.
pub unsafe fn call_continuation(stack_start: u64, f: extern "C" fn(u64) -> !, arg: u64) -> ! {
    // SAFETY: forwarded to the caller; the new rsp is 16-byte aligned (stack tops are, and
    // FRAME_SLOT is a multiple of 16), so `f` sees the alignment the ABI expects.
    unsafe { baton_call_on_stack(stack_start, f, arg) }
}

/// Makes `stack` this CPU's current kernel stack (where the next entry from user mode lands)
/// and loads the address space `root`/`pcid` if it differs from what is loaded. This is the
/// machine part of `stack_handoff`: the machine-independent part moves the stack object.
pub fn stack_handoff(stack: &KernelStack) {
    super::gdt::set_kernel_stack(stack.top());
}

const _: () = assert!(FRAME_SLOT.is_multiple_of(16));
