//! `cargo xtask clippy`: clippy with `-D warnings` on every crate, each built the way it is
//! really built: the host crates with their tests, and the kernel and the user programs for
//! their targets (`x86_64-unknown-none`, `x86_64-unknown-linux-gnu`) with the same target directories and flags as [`crate::build`].
//! (Workspace crates these depend on, such as the user runtime, are linted with them.)

use crate::build::{KERNEL, KERNEL_FAULT_INJECT, USER};
use crate::deps;
use crate::workspace::{cargo, note, shell_line};
use std::process::{Command, ExitCode};

/// Runs `cargo xtask clippy`.
pub fn clippy() -> Result<ExitCode, String> {
    deps::ensure_target()?;
    deps::ensure_clippy()?;
    // The user programs embed the extensions' modules.
    crate::build::build_extensions()?;
    let mut host = cargo();
    host.arg("clippy")
        .args(crate::workspace::HOST_PACKAGES)
        .arg("--all-targets");
    let runs: [(&str, Command); 4] = [
        ("host crates", host),
        ("kernel", KERNEL.cargo("clippy")),
        (
            "kernel with fault injection",
            KERNEL_FAULT_INJECT.cargo("clippy"),
        ),
        ("user programs", USER.cargo("clippy")),
    ];
    let mut failed = Vec::new();
    for (what, mut cmd) in runs {
        cmd.args(["--", "-D", "warnings"]);
        note(format!("clippy, {what}: {}", shell_line(&cmd)));
        match cmd.status() {
            Ok(status) if status.success() => {}
            Ok(_) => failed.push(what),
            Err(e) => return Err(format!("could not start cargo: {e}")),
        }
    }
    if failed.is_empty() {
        note("clippy: no warnings");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("clippy failed for: {}", failed.join(", "));
        Ok(ExitCode::FAILURE)
    }
}
