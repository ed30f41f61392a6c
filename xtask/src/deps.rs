//! Installing what the commands need and is missing: the `x86_64-unknown-none` Rust target
//! (through rustup), clippy, and QEMU (through apt-get on Debian-like hosts).
//!
//! Each step says what it does. When something cannot be installed automatically, the
//! error names the exact command to run instead, and the xtask command fails.

use crate::workspace::{cargo, command, find_in_path, note, run_checked, shell_line};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Rust target of the kernel and the user programs.
pub const TARGET: &str = "x86_64-unknown-none";
/// The QEMU binary that boots Baton.
pub const QEMU: &str = "qemu-system-x86_64";
/// The Debian package that provides [`QEMU`].
const QEMU_DEB: &str = "qemu-system-x86";
/// How to install rustup itself.
const RUSTUP_INSTALL: &str = "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh";

/// Makes sure the active toolchain can build for [`TARGET`], adding it with rustup if needed.
pub fn ensure_target() -> Result<(), String> {
    let output = match command("rustup")
        .args(["target", "list", "--installed"])
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            // Without rustup, a toolchain that already ships the target is fine.
            if sysroot_has_target() {
                return Ok(());
            }
            return Err(format!(
                "rustup is not installed and the Rust toolchain has no `{TARGET}` target.\n\
                 Install rustup and the target, then run this command again:\n    \
                 {RUSTUP_INSTALL}\n    rustup target add {TARGET}"
            ));
        }
        Err(e) => return Err(format!("could not run `rustup`: {e}")),
    };
    if !output.status.success() {
        return Err(format!(
            "`rustup target list --installed` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    if String::from_utf8_lossy(&output.stdout)
        .lines()
        .any(|l| l.trim() == TARGET)
    {
        return Ok(());
    }
    note(format!(
        "the Rust target {TARGET} is missing; installing it: rustup target add {TARGET}"
    ));
    run_checked(
        command("rustup").args(["target", "add", TARGET]),
        "installing the Rust target",
    )
    .map_err(|e| format!("{e}\nRun it yourself:\n    rustup target add {TARGET}"))
}

/// Whether `rustc --print sysroot` contains the standard library for [`TARGET`].
fn sysroot_has_target() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(output) = command(rustc).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_string();
    output.status.success()
        && Path::new(&sysroot)
            .join("lib/rustlib")
            .join(TARGET)
            .is_dir()
}

/// Makes sure `cargo clippy` works, adding the clippy component with rustup if needed.
pub fn ensure_clippy() -> Result<(), String> {
    let works = |cmd: &mut Command| cmd.output().is_ok_and(|o| o.status.success());
    if works(cargo().args(["clippy", "--version"])) {
        return Ok(());
    }
    if find_in_path("rustup").is_none() {
        return Err(format!(
            "clippy is not installed, and neither is rustup. Run:\n    {RUSTUP_INSTALL}\n    \
             rustup component add clippy"
        ));
    }
    note("clippy is missing; installing it: rustup component add clippy");
    run_checked(
        command("rustup").args(["component", "add", "clippy"]),
        "installing clippy",
    )
    .map_err(|e| format!("{e}\nRun it yourself:\n    rustup component add clippy"))
}

/// Returns the path of [`QEMU`], installing it with apt-get first if it is missing.
pub fn ensure_qemu() -> Result<PathBuf, String> {
    if let Some(path) = find_in_path(QEMU) {
        return Ok(path);
    }
    let by_hand = format!("sudo apt-get update && sudo apt-get install -y {QEMU_DEB}");
    if find_in_path("apt-get").is_none() {
        return Err(format!(
            "`{QEMU}` is not installed, and this is not a Debian-like system (no apt-get).\n\
             Install QEMU's x86-64 system emulator with the system's package manager, e.g.\n    \
             sudo dnf install qemu-system-x86       # Fedora\n    \
             sudo pacman -S qemu-system-x86         # Arch\n    \
             brew install qemu                      # macOS\n\
             then run this command again."
        ));
    }
    let root = is_root();
    note(format!(
        "`{QEMU}` is not installed; installing the Debian package {QEMU_DEB}{}",
        if root { "" } else { " (with sudo -n)" }
    ));
    for args in [&["update"][..], &["install", "-y", QEMU_DEB]] {
        let mut cmd = if root {
            let mut cmd = command("apt-get");
            cmd.env("DEBIAN_FRONTEND", "noninteractive");
            cmd
        } else {
            let mut cmd = command("sudo");
            cmd.args(["-n", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
            cmd
        };
        cmd.args(args);
        note(format!("$ {}", shell_line(&cmd)));
        run_checked(&mut cmd, "installing QEMU").map_err(|e| {
            format!("{e}\nInstall QEMU yourself, then run this command again:\n    {by_hand}")
        })?;
    }
    find_in_path(QEMU).ok_or_else(|| {
        format!("`{QEMU}` is still not on PATH after installing {QEMU_DEB}.\nInstall it with:\n    {by_hand}")
    })
}

/// Whether xtask runs as root (`id -u` prints 0).
fn is_root() -> bool {
    command("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0")
}
