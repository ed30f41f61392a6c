//! The integration tests: each boots the kernel in QEMU with some user programs and judges
//! the serial log.
//!
//! A test's programs are started by the kernel from the initrd, named on the command line as
//! `init=<a>,<b>,...`; the `shutdown` word is always added, so the kernel powers off when all
//! tasks have ended. Every test must pass the common rules of [`crate::judge`]: QEMU exit
//! status 33, `[kernel] all tasks finished` in the log, and no `PANIC`, `KERNEL EXCEPTION` or
//! `TEST FAIL`. Then each string in `require` must appear, and `check`, if any, must accept
//! the log.
//!
//! # Adding a test
//! Write the program(s) as `user/programs/src/bin/<name>.rs` (printing `TEST PASS <what>` or
//! `TEST FAIL <what>`), then add an entry to [`ALL`], starting from [`BASE`] for the
//! defaults. `cargo xtask test --filter <name>` runs just that test.

use crate::judge::{expect_interleaved, expect_order};
use std::time::Duration;

/// A check of the whole serial log, beyond required substrings.
pub type Check = fn(&str) -> Result<(), String>;

/// One integration test.
pub struct IntegrationTest {
    /// Unique name; also the log file's name, `target/test-logs/<name>.log`.
    pub name: &'static str,
    /// The programs the kernel starts, in order (`init=a,b`).
    pub init: &'static [&'static str],
    /// Number of CPUs.
    pub smp: u32,
    /// QEMU is killed, and the test fails, after this long (long enough for TCG).
    pub timeout: Duration,
    /// Substrings that must each appear in the log.
    pub require: &'static [&'static str],
    /// A further check of the log, run once everything above holds.
    pub check: Option<Check>,
    /// Extra kernel command-line words.
    pub extra: &'static [&'static str],
    /// How the boot must end.
    pub outcome: Outcome,
}

/// How a test's boot must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Clean shutdown after all tasks finished (QEMU status 33), no kernel failure.
    Clean,
    /// The kernel reports a fatal error and stops with QEMU status 35 (tests of the
    /// failure path itself).
    KernelFailure,
}

/// The defaults: one CPU, a timeout that suits TCG, no requirements.
pub const BASE: IntegrationTest = IntegrationTest {
    name: "",
    init: &[],
    smp: 1,
    timeout: Duration::from_secs(60),
    require: &[],
    check: None,
    extra: &[],
    outcome: Outcome::Clean,
};

/// Every integration test, in the order they are started.
pub const ALL: &[IntegrationTest] = &[
    IntegrationTest {
        name: "boot_hello",
        init: &["init"],
        require: &[
            "init#1| Hello from Baton",
            "init#1| time since reset: ",
            "init#1| boot modules:",
            "init#1|   init (",
            "init#1|   survivor (",
            "init#1| TEST PASS greeting",
            "[kernel] task 1 (init) exited with code 0",
        ],
        ..BASE
    },
    IntegrationTest {
        // Two tasks of one program: same virtual addresses, different memory, each checking
        // its own pattern across 200 yields to the other.
        name: "isolation",
        init: &["iso", "iso"],
        require: &[
            "iso#1| TEST PASS isolation (task 1)",
            "iso#2| TEST PASS isolation (task 2)",
        ],
        // Both print their first line before either finishes: they ran side by side.
        check: Some(|log| {
            expect_order(log, "iso#2| task 2: array at", "(iso) exited with code 0")
        }),
        ..BASE
    },
    IntegrationTest {
        name: "fault_null",
        init: &["fault_null", "survivor"],
        require: &[
            "[kernel] task 1 (fault_null) killed: page fault at address 0x0 (not present, read, user)",
            "  rip=",
            "survivor#2| TEST PASS survivor",
            "[kernel] task 2 (survivor) exited with code 0",
        ],
        check: Some(|log| {
            expect_order(
                log,
                "(fault_null) killed: page fault",
                "(survivor) exited with code 0",
            )
        }),
        ..BASE
    },
    IntegrationTest {
        name: "fault_privileged",
        init: &["fault_priv", "survivor"],
        require: &[
            "[kernel] task 1 (fault_priv) killed: general protection fault",
            "survivor#2| TEST PASS survivor",
            "[kernel] task 2 (survivor) exited with code 0",
        ],
        check: Some(|log| {
            expect_order(
                log,
                "(fault_priv) killed: general protection",
                "(survivor) exited with code 0",
            )
        }),
        ..BASE
    },
    IntegrationTest {
        name: "bad_syscall_args",
        init: &["bad_args", "survivor"],
        require: &[
            "TEST PASS kernel address rejected",
            "TEST PASS unmapped address rejected",
            "TEST PASS non-canonical address rejected",
            "TEST PASS wrapping range rejected",
            "TEST PASS range crossing into unmapped rejected",
            "TEST PASS oversized write rejected",
            "TEST PASS module_info to kernel address rejected",
            "TEST PASS module_info to user record accepted",
            "TEST PASS spawn of missing module rejected",
            "TEST PASS spawn name at kernel address rejected",
            "[kernel] task 1 (bad_args) killed: bad system call 9999",
            "survivor#2| TEST PASS survivor",
            "[kernel] task 2 (survivor) exited with code 0",
        ],
        check: Some(|log| {
            expect_order(
                log,
                "(bad_args) killed: bad system call",
                "(survivor) exited with code 0",
            )
        }),
        ..BASE
    },
    IntegrationTest {
        // Two CPU-bound tasks that never yield: only the timer can interleave them.
        name: "preemption",
        init: &["spin", "spin"],
        require: &["spin#1| TEST PASS spin", "spin#2| TEST PASS spin"],
        check: Some(|log| expect_interleaved(log, "spin#1| progress", "spin#2| progress")),
        ..BASE
    },
    IntegrationTest {
        // The kernel's own fatal path: a page fault in kernel mode is reported and stops
        // QEMU with the failure status.
        name: "kernel_fault_report",
        init: &["init"],
        extra: &["crash=kernel-page-fault"],
        outcome: Outcome::KernelFailure,
        require: &[
            "[kernel] KERNEL EXCEPTION: page fault (vector 14) in kernel mode",
            "address 0xdead0000: not present, read, kernel",
            "  rip=0xffffffff8",
        ],
        ..BASE
    },
];

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn names_are_unique_and_tests_are_complete() {
        let mut names: Vec<_> = ALL.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for t in ALL {
            assert!(
                !t.name.is_empty() && !t.init.is_empty() && t.smp >= 1,
                "{}",
                t.name
            );
            assert!(
                t.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{}",
                t.name
            );
        }
    }
}
