//! Raw system calls: the `syscall` instruction with Baton's register convention.
//!
//! `rax` holds the number on entry and the result on return; arguments go in `rdi`, `rsi`,
//! `rdx`, `r10`, `r8`, `r9`; the instruction itself clobbers `rcx` (return `rip`) and `r11`
//! (saved `rflags`). The kernel preserves every other register and runs on its own stack,
//! so the user stack is left untouched (`nostack`). The asm blocks do not claim `nomem`:
//! a call may read or write user memory, so the compiler must treat each one as a memory
//! barrier.
//!
//! Results are returned undecoded; [`baton_abi::decode_result`] turns them into
//! `Result`s, and [`crate::sys`] wraps each call safely.
//!
//! # Safety
//!
//! The kernel validates every user address it is given, so a bad pointer yields
//! [`baton_abi::Error::BadAddress`] rather than harm. What the kernel cannot know is
//! *Rust's* view of user memory: a call that writes to user memory (such as
//! `module_info`) may only be given memory the caller is allowed to overwrite. That is the
//! precondition of every `unsafe fn` here.

use core::arch::asm;

/// System call with no arguments; the unused argument registers are left as they are.
///
/// # Safety
///
/// Same contract as [`syscall6`].
#[inline(always)]
pub unsafe fn syscall0(n: u64) -> u64 {
    let ret: u64;
    // SAFETY: as in `syscall6`, under the caller's guarantee about the memory the call
    // accesses.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n => ret,
            lateout("rcx") _,
            lateout("r11") _,
            // A migrating call and its return put the vector registers in their initial
            // state (they are caller-saved): nothing may be kept in them across a call.
            clobber_abi("C"),
            options(nostack),
        );
    }
    ret
}

/// System call with one argument; the unused argument registers are left as they are.
///
/// # Safety
///
/// Same contract as [`syscall6`].
#[inline(always)]
pub unsafe fn syscall1(n: u64, a0: u64) -> u64 {
    let ret: u64;
    // SAFETY: as in `syscall6`, under the caller's guarantee about the memory the call
    // accesses.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a0,
            lateout("rcx") _,
            lateout("r11") _,
            // A migrating call and its return put the vector registers in their initial
            // state (they are caller-saved): nothing may be kept in them across a call.
            clobber_abi("C"),
            options(nostack),
        );
    }
    ret
}

/// System call with two arguments; the unused argument registers are left as they are.
///
/// # Safety
///
/// Same contract as [`syscall6`].
#[inline(always)]
pub unsafe fn syscall2(n: u64, a0: u64, a1: u64) -> u64 {
    let ret: u64;
    // SAFETY: as in `syscall6`, under the caller's guarantee about the memory the call
    // accesses.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a0,
            in("rsi") a1,
            lateout("rcx") _,
            lateout("r11") _,
            // A migrating call and its return put the vector registers in their initial
            // state (they are caller-saved): nothing may be kept in them across a call.
            clobber_abi("C"),
            options(nostack),
        );
    }
    ret
}

/// System call with three arguments; the unused argument registers are left as they are.
///
/// # Safety
///
/// Same contract as [`syscall6`].
#[inline(always)]
pub unsafe fn syscall3(n: u64, a0: u64, a1: u64, a2: u64) -> u64 {
    let ret: u64;
    // SAFETY: as in `syscall6`, under the caller's guarantee about the memory the call
    // accesses.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a0,
            in("rsi") a1,
            in("rdx") a2,
            lateout("rcx") _,
            lateout("r11") _,
            // A migrating call and its return put the vector registers in their initial
            // state (they are caller-saved): nothing may be kept in them across a call.
            clobber_abi("C"),
            options(nostack),
        );
    }
    ret
}

/// System call with six arguments: `rax` = `n`, `rdi, rsi, rdx, r10, r8, r9` = `a0..a5`.
/// Returns `rax` as the kernel left it (negative values are `-(error code)`).
///
/// # Safety
///
/// Any user memory the kernel writes on behalf of this call must be memory the caller may
/// overwrite (valid for writes, not borrowed elsewhere), and memory it reads must be
/// initialised. Calls that only read caller-chosen memory, touch no user memory, or end the
/// task are always sound, since the kernel checks every address.
#[inline(always)]
pub unsafe fn syscall6(n: u64, a0: u64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> u64 {
    let ret: u64;
    // SAFETY: the kernel follows the ABI of `baton_abi` (only rax, rcx and r11 change, the
    // user stack is not used); the memory the call accesses is the caller's responsibility,
    // and leaving out `nomem` makes this a compiler memory barrier.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a0,
            in("rsi") a1,
            in("rdx") a2,
            in("r10") a3,
            in("r8") a4,
            in("r9") a5,
            lateout("rcx") _,
            lateout("r11") _,
            // A migrating call and its return put the vector registers in their initial
            // state (they are caller-saved): nothing may be kept in them across a call.
            clobber_abi("C"),
            options(nostack),
        );
    }
    ret
}

/// Any system call, with any number and arguments, returning the raw `rax`.
///
/// For tests that issue invalid calls (an undefined number kills the calling task) or
/// pass arguments no typed wrapper would.
///
/// # Safety
///
/// Same contract as [`syscall6`]: if the call writes user memory (e.g.
/// [`baton_abi::Sys::ModuleInfo`] with a user pointer), that memory must be the caller's
/// to overwrite. Undefined numbers, and addresses outside user space, are always sound.
#[inline(never)]
pub unsafe fn raw_syscall(n: u64, args: [u64; 6]) -> u64 {
    let [a0, a1, a2, a3, a4, a5] = args;
    // SAFETY: forwarded to `syscall6` under the caller's guarantee.
    unsafe { syscall6(n, a0, a1, a2, a3, a4, a5) }
}
