//! `cargo xtask run` and `cargo xtask gdb`: build, then boot Baton in QEMU with the serial
//! console on this terminal.
//!
//! The default boot is the console and the shell ([`SHELL_INIT`], [`SHELL_PRIV`]). When
//! standard input is not a terminal nobody can type, so the default is the demo
//! (`init=init`) instead, the kernel command line gets `shutdown` and the kernel powers the
//! machine off after it. An `init=` word among the extra words replaces either default.
//!
//! `--memory MIB` gives the machine that much memory (QEMU's `-m`; 256 by default): in a
//! small one, such as `--memory 14`, the default pager pages for real.
//!
//! `--fault-inject N` boots the kernel built with allocation fault injection
//! ([`build::KERNEL_FAULT_INJECT`]) with `failalloc=N` on its command line: once boot is
//! done, one in N kernel heap, kernel stack and frame allocations fails.

use crate::build;
use crate::deps;
use crate::qemu::{self, Machine, EXIT_CLEAN, EXIT_KERNEL_FAILED};
use crate::workspace::{note, shell_line, shell_quote};
use crate::RunOpts;
use std::io::IsTerminal;
use std::process::ExitCode;

/// The boot modules `run` starts by default: the name server, the console server, the
/// shell, which finds the console through the name server, and `swapon`, which starts the
/// disk driver and the default pager on the disk's swap partition.
pub const SHELL_INIT: &str = "names,console,shell,swapon";
/// The default boot's privileged tasks: the console makes its I/O-ports and interrupt
/// objects with the host-privilege right, the shell lists and kills tasks with it, and
/// `swapon` hands it to the disk driver and the default pager.
pub const SHELL_PRIV: &str = "priv=console,shell,swapon";

/// The default kernel command line's words for `extra` (the words after `--`) and whether
/// standard input is a terminal.
pub fn default_words(extra: &[String], interactive: bool) -> (&'static str, Vec<String>) {
    let mut extra = extra.to_vec();
    let chosen = extra.iter().any(|w| w.starts_with("init="));
    if !interactive || chosen {
        return ("init", extra);
    }
    extra.insert(0, SHELL_PRIV.to_string());
    (SHELL_INIT, extra)
}

/// Runs `run` (or `gdb`, which is `run --gdb`; `--gdb-port N` puts the stub on port N).
pub fn run(opts: &RunOpts) -> Result<ExitCode, String> {
    deps::ensure_target()?;
    let qemu = deps::ensure_qemu()?;
    let mut extra = opts.extra.clone();
    let images = match opts.fault_inject {
        Some(every) => {
            extra.push(format!("failalloc={every}"));
            build::build_with(&build::KERNEL_FAULT_INJECT)?
        }
        None => build::build()?,
    };
    let accel = qemu::choose_accel(opts.tcg, opts.icount);
    let shutdown = !std::io::stdin().is_terminal();
    let (init, extra) = default_words(&extra, !shutdown);
    let machine = Machine {
        images: &images,
        accel,
        smp: opts.smp,
        cmdline: qemu::cmdline(init, shutdown, &extra),
        icount: opts.icount,
        gdb: opts.gdb_stub(),
        disk: Some(crate::disk::run_image()?),
    };
    let mut cmd = machine.console_command(&qemu, !shutdown, opts.memory);
    note(format!("$ {}", shell_line(&cmd)));
    if let Some(port) = machine.gdb {
        let kernel = shell_quote(&images.kernel.to_string_lossy());
        eprintln!(
            "xtask: QEMU is paused with a gdb stub on tcp::{port}. To attach, run in another \
             terminal:\n\n    gdb {kernel} -ex 'target remote :{port}'\n\n\
             xtask: then e.g. `hbreak kmain` and `continue`. Use hardware breakpoints (hbreak) \
             for code that runs\nxtask: before the kernel has set up its page tables: software \
             breakpoints set there may not stick.\n"
        );
    } else if !shutdown {
        note("the serial console is on this terminal; Ctrl-C goes to Baton, Ctrl-A X stops QEMU");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("could not start {}: {e}", qemu.display()))?;
    // Where the programs that faulted were, from their line tables (the console's copy).
    if let Ok(log) = std::fs::read(crate::workspace::root().join(qemu::CONSOLE_LOG)) {
        eprint!(
            "{}",
            crate::symbolize::annotate(&String::from_utf8_lossy(&log))
        );
    }
    match status.code() {
        Some(EXIT_CLEAN) => Ok(ExitCode::SUCCESS),
        Some(0) if !shutdown => {
            note("qemu exited with status 0: Ctrl-A X, or a reset without the exit port (a triple fault?)");
            Ok(ExitCode::SUCCESS)
        }
        Some(n) => {
            eprintln!("kernel failed (qemu exit status {n})");
            if n == 0 || n == EXIT_KERNEL_FAILED {
                note(qemu::explain_exit(Some(n)));
            }
            Ok(ExitCode::FAILURE)
        }
        None => {
            eprintln!("kernel failed ({})", qemu::explain_exit(None));
            Ok(ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_words_boot_the_shell_on_a_terminal() {
        let (init, extra) = default_words(&[], true);
        assert_eq!(
            crate::qemu::cmdline(init, false, &extra),
            "init=names,console,shell,swapon priv=console,shell,swapon"
        );
        let (init, extra) = default_words(&["--".to_string()][..0], false);
        assert_eq!(
            crate::qemu::cmdline(init, true, &extra),
            "init=init shutdown"
        );
        let (init, extra) = default_words(&["init=iso,iso".to_string()], true);
        assert_eq!(crate::qemu::cmdline(init, false, &extra), "init=iso,iso");
        let (init, extra) = default_words(&["smp".to_string()], true);
        assert_eq!(
            crate::qemu::cmdline(init, false, &extra),
            "init=names,console,shell,swapon priv=console,shell,swapon smp"
        );
    }
}
