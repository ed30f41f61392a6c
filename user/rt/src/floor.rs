//! The floor calls (`baton_abi::floor`): the kernel's minimal paths, for the `floor.*`
//! benchmarks and their tests. Not services; `docs/abi.md` ("Floor calls") defines them.

use core::arch::asm;

use baton_abi::floor::{
    FLOOR_FAULT_ARM, FLOOR_FAULT_BASE, FLOOR_FULL, FLOOR_MINIMAL, FLOOR_SPACE, FLOOR_XAS_CALL,
    FLOOR_XAS_REGISTER, FLOOR_XAS_RETURN,
};
use baton_abi::{decode_result, Error};

use crate::raw::{syscall0, syscall1, syscall6};

/// `floor_minimal`: `syscall` and `sysretq`, nothing saved. Returns 0.
#[inline(always)]
pub fn minimal() -> u64 {
    // SAFETY: the call touches no memory and no register but `rax`, `rcx`, `r11`.
    unsafe { syscall0(FLOOR_MINIMAL) }
}

/// `floor_full`: the general entry's register save and restore, nothing else. Returns 0.
#[inline(always)]
pub fn full() -> u64 {
    // SAFETY: as `minimal`.
    unsafe { syscall0(FLOOR_FULL) }
}

/// `floor_space`: two address-space switches (to the kernel's root and back) in a
/// minimal call. Returns 0.
#[inline(always)]
pub fn space() -> u64 {
    let ret: u64;
    // SAFETY: the call touches no user memory; it clobbers `rdx` besides the usual.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") FLOOR_SPACE => ret,
            lateout("rdx") _,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// `floor_fault_arm(on)`: arms (or disarms) the floor page-fault window for this thread
/// until the CPU next changes its running thread.
#[inline(always)]
pub fn fault_arm(on: bool) {
    // SAFETY: the call touches no user memory.
    unsafe { syscall1(FLOOR_FAULT_ARM, u64::from(on)) };
}

/// The address [`fault_load`] reads: its instruction is 2 bytes long.
pub const FAULT_LOAD_ADDRESS: u64 = FLOOR_FAULT_BASE + 2;

/// A 2-byte load (`mov al, [rdi]`, bytes `8a 07`) from [`FAULT_LOAD_ADDRESS`]: with the
/// window armed, a page fault the kernel resumes behind the instruction (`al` unchanged);
/// otherwise an ordinary page fault of this thread.
#[inline(always)]
pub fn fault_load() {
    // SAFETY: the address is in the kernel half, which user mode can never read: the
    // instruction faults and, armed, is skipped (nothing is loaded, `al` is declared
    // clobbered anyway); unarmed, the fault goes to the exception path as any other.
    unsafe {
        asm!(
            ".byte 0x8a, 0x07",
            in("rdi") FAULT_LOAD_ADDRESS,
            lateout("al") _,
            options(nostack, readonly),
        );
    }
}

/// `floor_xas_register(entry, stack_top, caller, host_priv)`: makes this task a
/// cross-address-space partner of task `caller` (0: the task that spawned this one), with
/// the authority of `host_priv` (this task's name for a send right to the host-privilege
/// port; see [`crate::start::host_priv`]); [`xas_unregister`] undoes it.
pub fn xas_register(entry: u64, stack_top: u64, caller: u64, host_priv: u64) -> Result<(), Error> {
    // SAFETY: the kernel only records the addresses and the caller.
    decode_result(unsafe {
        syscall6(
            FLOOR_XAS_REGISTER,
            entry,
            stack_top,
            caller,
            host_priv,
            0,
            0,
        )
    })
    .map(|_| ())
}

/// `floor_xas_register(0, 0)`: this task is no longer a partner.
pub fn xas_unregister() -> Result<(), Error> {
    xas_register(0, 0, 0, 0)
}

/// `floor_xas_call(partner, arg)`: runs the partner's entry in its address space with
/// `rdi = arg`, and returns the value it passed to `floor_xas_return`.
///
/// The partner's code runs on this thread and may leave any register changed, so the
/// callee-saved ones are saved on this stack around the call (the kernel gives `rsp`
/// back).
#[inline(always)]
pub fn xas_call(partner: u64, arg: u64) -> Result<u64, Error> {
    let ret: u64;
    // SAFETY: the partner's code runs in its own address space and can touch none of this
    // task's memory; it can change any register, so every one the asm may not clobber is
    // pushed before and popped after (rsp comes back from the kernel), and the rest are
    // declared clobbered.
    unsafe {
        asm!(
            "push rbx",
            "push rbp",
            "push r12",
            "push r13",
            "push r14",
            "push r15",
            "syscall",
            "pop r15",
            "pop r14",
            "pop r13",
            "pop r12",
            "pop rbp",
            "pop rbx",
            inlateout("rax") FLOOR_XAS_CALL => ret,
            inlateout("rdi") partner => _,
            inlateout("rsi") arg => _,
            clobber_abi("C"),
        );
    }
    decode_result(ret)
}

/// `floor_xas_return(value)` outside a partner's entry: there is no call to return from,
/// so it returns the error (`InvalidArgument`). A partner's entry makes the call in its
/// own assembly.
pub fn xas_return_outside(value: u64) -> Result<u64, Error> {
    // SAFETY: without a call in progress the kernel only answers with an error.
    decode_result(unsafe { syscall1(FLOOR_XAS_RETURN, value) })
}
