//! The floor calls: reserved system calls that measure the kernel's minimal paths (the
//! `floor.*` rows of `cargo xtask bench`), not services. `docs/abi.md` ("Floor calls") and
//! `docs/benchmarks.md` define them.
//!
//! Their numbers are at and above [`FLOOR_BASE`], far from [`crate::Sys`]'s, and the
//! `syscall` entry recognises them in its first instructions. A number at or above
//! [`FLOOR_BASE`] that is not one of them is an unknown system call, as any other.
//!
//! Authority: the cross-address-space call enters another task, so its partner's
//! registration needs the host-privilege right and names the one task allowed to call it.
//! The other floor calls need none: they act on the calling thread alone (an empty system
//! call, a save and restore of its own registers, two loads of its own or the kernel's
//! page-table root with no user access in between, a window that resumes only its own
//! faults), take no lock and hold nothing, so they give a task nothing it cannot do with
//! `null`; a check in their first instructions would only raise the floors they measure.

/// First floor-call number.
pub const FLOOR_BASE: u64 = 0xf100;
/// `floor_minimal() -> 0`: `syscall`, then `sysretq` at once; nothing is saved.
pub const FLOOR_MINIMAL: u64 = FLOOR_BASE;
/// `floor_full() -> 0`: the full register save into the thread's frame and the restore
/// every system call does, with no lock and no dispatch.
pub const FLOOR_FULL: u64 = FLOOR_BASE + 1;
/// `floor_space() -> 0`: two address-space switches in a minimal call: CR3 loaded with the
/// kernel's own root, then with the caller's again. Clobbers `rdx` (left 0).
pub const FLOOR_SPACE: u64 = FLOOR_BASE + 2;
/// `floor_fault_arm(on) -> 0`: `on` ≠ 0 arms the floor page-fault window
/// ([`FLOOR_FAULT_BASE`]) for the calling thread on this CPU, 0 disarms it. The arming
/// lasts until the CPU next changes (or re-installs) its running thread: any block,
/// preemption or exception reply disarms it.
pub const FLOOR_FAULT_ARM: u64 = FLOOR_BASE + 3;
/// `floor_xas_register(entry, stack_top, caller, host_priv) -> 0`: makes the calling task
/// a cross-address-space partner of the one task `caller` (a task id; 0 for the task that
/// spawned the caller, [`crate::Error::NotFound`] for a boot task): a [`FLOOR_XAS_CALL`]
/// from that task naming this one runs `entry` in this task's address space with
/// `rsp = stack_top`. Both must be user addresses ([`crate::Error::BadAddress`]);
/// `(0, 0)` unregisters. A task registers only itself; its end unregisters it. A benchmark
/// call: `host_priv` must name the caller's send right to the host-privilege port
/// ([`crate::kobject::HOST_PRIV_BASE`]), else [`crate::Error::Denied`] (unregistering
/// needs none). The authority is checked here, once: a call then checks only that its
/// caller is the task named.
pub const FLOOR_XAS_REGISTER: u64 = FLOOR_BASE + 4;
/// `floor_xas_call(partner_task, arg) -> value`: switches this thread into the registered
/// partner's address space and `sysretq`s to its entry with `rsp` = its stack, `rdi` =
/// `arg`, `rax` = 0 and every other register as the caller left it (`rcx`, `r11`
/// clobbered). The partner's [`FLOOR_XAS_RETURN`] comes back here with its `value`; every
/// register but `rax`, `rsp` and `rflags` is then as the partner left it. Errors:
/// [`crate::Error::NotFound`] (no such task, or it has not registered, or is ending),
/// [`crate::Error::Denied`] (the partner registered for another caller),
/// [`crate::Error::WouldBlock`] (the partner is in another call),
/// [`crate::Error::Interrupted`] (any other kernel entry — an interrupt, a fault, any other
/// system call — happened while in the partner: the call ends there).
pub const FLOOR_XAS_CALL: u64 = FLOOR_BASE + 5;
/// `floor_xas_return(value) -> !`: from a partner's entry, back to the caller of the call
/// in progress on this CPU, whose call returns `value`. Without a call in progress,
/// [`crate::Error::InvalidArgument`].
pub const FLOOR_XAS_RETURN: u64 = FLOOR_BASE + 6;
/// One past the last floor-call number.
pub const FLOOR_END: u64 = FLOOR_BASE + 7;

/// The floor page-fault window: a user-mode load or store at `FLOOR_FAULT_BASE + n`,
/// `1 <= n <=` [`FLOOR_FAULT_MAX_LEN`], by a thread that armed the window
/// ([`FLOOR_FAULT_ARM`]), page-faults and is resumed `n` bytes after the faulting
/// instruction's start, with no other effect: `n` is the instruction's length. The window
/// is in the kernel half (PML4 slot 508, which nothing maps), so no user mapping can ever
/// cover it; any other access there, or by a thread that did not arm it, is an ordinary
/// page fault.
pub const FLOOR_FAULT_BASE: u64 = 0xffff_fe00_0000_0000;
/// The longest instruction x86-64 has (15 bytes): the largest offset in the window.
pub const FLOOR_FAULT_MAX_LEN: u64 = 15;

/// The address whose access skips an instruction of `len` bytes (1 to 15), or `None`.
pub const fn floor_fault_address(len: u64) -> Option<u64> {
    if len >= 1 && len <= FLOOR_FAULT_MAX_LEN {
        Some(FLOOR_FAULT_BASE + len)
    } else {
        None
    }
}

/// The instruction length the kernel skips for a page fault at `cr2` with error code
/// `error` from an armed thread (the specification the trap path's assembly follows):
/// a data access (not an instruction fetch, error bit 4) in `FLOOR_FAULT_BASE + 1 ..=
/// FLOOR_FAULT_BASE + 15`.
pub const fn floor_fault_skip(cr2: u64, error: u64) -> Option<u64> {
    let n = cr2.wrapping_sub(FLOOR_FAULT_BASE);
    if error & 0x10 == 0 && n >= 1 && n <= FLOOR_FAULT_MAX_LEN {
        Some(n)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window() {
        assert_eq!(floor_fault_address(0), None);
        assert_eq!(floor_fault_address(16), None);
        for n in 1..=15 {
            let a = floor_fault_address(n).unwrap_or(0);
            assert_eq!(floor_fault_skip(a, 0), Some(n));
            assert_eq!(floor_fault_skip(a, 2 | 4), Some(n));
            assert_eq!(floor_fault_skip(a, 0x10 | 4), None);
        }
        assert_eq!(floor_fault_skip(FLOOR_FAULT_BASE, 4), None);
        assert_eq!(floor_fault_skip(FLOOR_FAULT_BASE + 16, 4), None);
        assert_eq!(floor_fault_skip(FLOOR_FAULT_BASE - 1, 4), None);
        assert_eq!(floor_fault_skip(0, 4), None);
        // PML4 slot 508.
        assert_eq!((FLOOR_FAULT_BASE >> 39) & 511, 508);
    }

    #[test]
    fn numbers_are_not_sys() {
        for n in FLOOR_BASE..FLOOR_END {
            assert!(crate::Sys::from_raw(n).is_none());
        }
    }
}
