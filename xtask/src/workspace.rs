//! Where things are in the workspace, and small helpers for running programs.
//!
//! Every program xtask runs is started from the workspace root, so relative paths and
//! `.cargo/config.toml` mean the same as for a developer typing the command there.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The workspace root: the parent of this crate's directory.
pub fn root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// `<root>/target`.
pub fn target_dir() -> PathBuf {
    root().join("target")
}

/// A `cargo` command (the `CARGO` that runs xtask, else `cargo` from `PATH`), started from the
/// workspace root.
pub fn cargo() -> Command {
    let program = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(program);
    cmd.current_dir(root());
    cmd
}

/// A command for `program` started from the workspace root.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(root());
    cmd
}

/// Looks `name` up in `PATH`, as a shell would.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Prints a progress note from xtask itself (to standard error).
pub fn note(msg: impl std::fmt::Display) {
    eprintln!("xtask: {msg}");
}

/// A long step of a command (a build, a boot, a trace): [`Step::start`] notes that it
/// begins, [`Step::end`] or [`Step::finish`] that it ended and how long it took.
#[must_use = "a step notes its end when ended"]
pub struct Step {
    what: String,
    start: Instant,
}

impl Step {
    /// Notes `<what>...` and starts the clock.
    pub fn start(what: impl Into<String>) -> Step {
        let what = what.into();
        note(format!("{what}..."));
        Step {
            what,
            start: Instant::now(),
        }
    }

    /// Notes `<what>: <detail>` and starts the clock; the end is noted as for
    /// [`Step::start`], without the detail.
    pub fn start_with(what: impl Into<String>, detail: impl std::fmt::Display) -> Step {
        let what = what.into();
        note(format!("{what}: {detail}"));
        Step {
            what,
            start: Instant::now(),
        }
    }

    /// Notes `<what>: <how> (<seconds>s)`.
    pub fn end(self, how: impl std::fmt::Display) {
        note(format!(
            "{}: {how} ({})",
            self.what,
            seconds(self.start.elapsed())
        ));
    }

    /// Notes the end as `done` or `failed`, after `result`, and hands `result` back.
    pub fn finish<T, E>(self, result: Result<T, E>) -> Result<T, E> {
        self.end(if result.is_ok() { "done" } else { "failed" });
        result
    }
}

/// A duration for a person: `0.4s`, `12.3s`, `95s`, `4m05s`.
pub fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 600.0 {
        format!("{s:.0}s")
    } else {
        let s = d.as_secs();
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

/// The command as a shell line (program and arguments quoted where needed; environment
/// variables not shown; the `CARGO` that runs xtask shown as `cargo`).
pub fn shell_line(cmd: &Command) -> String {
    // The full path of the toolchain's cargo is noise: it is what `cargo` runs.
    let program = cmd.get_program();
    let program = match env::var_os("CARGO") {
        Some(cargo) if cargo == program => std::ffi::OsStr::new("cargo"),
        _ => program,
    };
    std::iter::once(program)
        .chain(cmd.get_args())
        .map(|word| shell_quote(&word.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Quotes `word` for a POSIX shell if it contains anything but plainly safe characters.
pub fn shell_quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Runs `cmd` to completion with inherited standard streams; `what` names it in errors.
pub fn run_checked(cmd: &mut Command, what: &str) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("{what}: could not start `{}`: {e}", shell_line(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed (`{}`: {status})", shell_line(cmd)))
    }
}

/// The crates built and tested on the host, as `cargo -p` arguments.
pub const HOST_PACKAGES: [&str; 12] = [
    "-p",
    "kern",
    "-p",
    "sting",
    "-p",
    "baton-abi",
    "-p",
    "baton-idl",
    "-p",
    "baton-idl-rt",
    "-p",
    "xtask",
];

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(seconds(Duration::from_millis(400)), "0.4s");
        assert_eq!(seconds(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(seconds(Duration::from_secs(95)), "95s");
        assert_eq!(seconds(Duration::from_secs(599)), "599s");
        assert_eq!(seconds(Duration::from_secs(605)), "10m05s");
    }

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(shell_quote("init=a,b"), "init=a,b");
        assert_eq!(shell_quote("/x/y.tar"), "/x/y.tar");
        assert_eq!(shell_quote("init=init shutdown"), "'init=init shutdown'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
