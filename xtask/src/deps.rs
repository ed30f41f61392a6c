//! Installing what the commands need and is missing: the Rust targets (`x86_64-unknown-none`, `x86_64-unknown-linux-gnu`)
//! (through rustup), clippy, and host programs from Debian packages (QEMU; gdb and binutils'
//! `addr2line` for `profile`) through apt-get on Debian-like hosts ([`ensure_tool`]), and
//! `cargo-mutants` for `mutants` through `cargo install` ([`ensure_cargo_mutants`]).
//!
//! Each step says what it does. When something cannot be installed automatically, the
//! error names the exact command to run instead, and the xtask command fails.

use crate::workspace::{cargo, command, find_in_path, note, run_checked, shell_line};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Rust target of the kernel: soft-float (the kernel never touches the floating-point
/// or vector registers, which belong to user space).
pub const TARGET: &str = "x86_64-unknown-none";
/// The Rust target of the user programs: hard-float (SSE2), built `no_std`, `no_main` and
/// linked statically with rust-lld and Baton's own linker script, so nothing of Linux but
/// the instruction set and calling convention is used (`crate::build::USER`).
pub const USER_TARGET: &str = "x86_64-unknown-linux-gnu";
/// The QEMU binary that boots Baton.
pub const QEMU: &str = "qemu-system-x86_64";
/// The Debian package that provides [`QEMU`].
const QEMU_DEB: &str = "qemu-system-x86";
/// How to install rustup itself.
const RUSTUP_INSTALL: &str = "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh";

/// Makes sure the active toolchain can build for [`TARGET`] and [`USER_TARGET`], adding
/// them with rustup if needed.
pub fn ensure_target() -> Result<(), String> {
    ensure_target_named(TARGET)?;
    ensure_target_named(USER_TARGET)
}

/// Makes sure the active toolchain can build for `target` (also `wasm32-unknown-unknown`,
/// for the extensions), adding it with rustup if needed.
pub fn ensure_target_named(target: &str) -> Result<(), String> {
    let output = match command("rustup")
        .args(["target", "list", "--installed"])
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            // Without rustup, a toolchain that already ships the target is fine.
            if sysroot_has_target(target) {
                return Ok(());
            }
            return Err(format!(
                "rustup is not installed and the Rust toolchain has no `{target}` target.\n\
                 Install rustup and the target, then run this command again:\n    \
                 {RUSTUP_INSTALL}\n    rustup target add {target}"
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
        .any(|l| l.trim() == target)
    {
        return Ok(());
    }
    note(format!(
        "the Rust target {target} is missing; installing it: rustup target add {target}"
    ));
    run_checked(
        command("rustup").args(["target", "add", target]),
        "installing the Rust target",
    )
    .map_err(|e| format!("{e}\nRun it yourself:\n    rustup target add {target}"))
}

/// Whether `rustc --print sysroot` contains the standard library for `target`.
fn sysroot_has_target(target: &str) -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(output) = command(rustc).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_string();
    output.status.success()
        && Path::new(&sysroot)
            .join("lib/rustlib")
            .join(target)
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

/// Makes sure `cargo mutants` works, installing it with `cargo install --locked
/// cargo-mutants` if needed (a build of a few minutes, once).
pub fn ensure_cargo_mutants() -> Result<(), String> {
    let works = |cmd: &mut Command| cmd.output().is_ok_and(|o| o.status.success());
    if works(cargo().args(["mutants", "--version"])) {
        return Ok(());
    }
    let mut install = cargo();
    install.args(["install", "--locked", "cargo-mutants"]);
    note(format!(
        "cargo-mutants is missing; installing it: {}",
        shell_line(&install)
    ));
    run_checked(&mut install, "installing cargo-mutants")
        .map_err(|e| format!("{e}\nRun it yourself:\n    cargo install --locked cargo-mutants"))
}

/// Returns the path of [`QEMU`], installing it with apt-get first if it is missing.
pub fn ensure_qemu() -> Result<PathBuf, String> {
    ensure_tool(&Tool {
        program: QEMU,
        package: QEMU_DEB,
        what: "QEMU's x86-64 system emulator",
        elsewhere: "sudo dnf install qemu-system-x86       # Fedora\n    \
                    sudo pacman -S qemu-system-x86         # Arch\n    \
                    brew install qemu                      # macOS",
    })
}

/// The debugger `cargo xtask profile` drives (Debian package `gdb`).
pub const GDB: Tool = Tool {
    program: "gdb",
    package: "gdb",
    what: "the GNU debugger",
    elsewhere: "sudo dnf install gdb                    # Fedora\n    \
                sudo pacman -S gdb                      # Arch",
};

/// The symbolizer `cargo xtask profile` uses (GNU binutils, Debian package `binutils`).
pub const ADDR2LINE: Tool = Tool {
    program: "addr2line",
    package: "binutils",
    what: "GNU binutils' addr2line",
    elsewhere: "sudo dnf install binutils               # Fedora\n    \
                sudo pacman -S binutils                 # Arch",
};

/// What `cargo xtask build` strips the programs' line tables from their boot-image copies
/// with (GNU binutils, Debian package `binutils`).
pub const OBJCOPY: Tool = Tool {
    program: "objcopy",
    package: "binutils",
    what: "GNU binutils' objcopy",
    elsewhere: "sudo dnf install binutils               # Fedora\n    \
                sudo pacman -S binutils                 # Arch",
};

/// A host program that a Debian package provides.
pub struct Tool {
    /// The program looked up in `PATH`.
    pub program: &'static str,
    /// The Debian package that provides it.
    pub package: &'static str,
    /// What it is, for messages.
    pub what: &'static str,
    /// How to install it on other systems (lines of commands, for the error message).
    pub elsewhere: &'static str,
}

/// Returns the path of `tool`'s program, installing its Debian package with apt-get first
/// (as root, or with `sudo -n`) if it is missing. Where that is impossible, the error names
/// the commands to run.
pub fn ensure_tool(tool: &Tool) -> Result<PathBuf, String> {
    let Tool {
        program,
        package,
        what,
        elsewhere,
    } = tool;
    if let Some(path) = find_in_path(program) {
        return Ok(path);
    }
    let by_hand = format!("sudo apt-get update && sudo apt-get install -y {package}");
    if find_in_path("apt-get").is_none() {
        return Err(format!(
            "`{program}` is not installed, and this is not a Debian-like system (no apt-get).\n\
             Install {what} with the system's package manager, e.g.\n    {elsewhere}\n\
             then run this command again."
        ));
    }
    let root = is_root();
    note(format!(
        "`{program}` is not installed; installing the Debian package {package}{}",
        if root { "" } else { " (with sudo -n)" }
    ));
    for args in [&["update"][..], &["install", "-y", package]] {
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
        run_checked(&mut cmd, &format!("installing {package}")).map_err(|e| {
            format!("{e}\nInstall {package} yourself, then run this command again:\n    {by_hand}")
        })?;
    }
    find_in_path(program).ok_or_else(|| {
        format!(
            "`{program}` is still not on PATH after installing {package}.\nInstall it with:\n    \
             {by_hand}"
        )
    })
}

/// Whether xtask runs as root (`id -u` prints 0).
fn is_root() -> bool {
    command("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0")
}
