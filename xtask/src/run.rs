//! `cargo xtask run` and `cargo xtask gdb`: build, then boot Baton in QEMU with the serial
//! console on this terminal.
//!
//! When standard input is not a terminal nobody can interact, so the kernel command line
//! gets `shutdown` and the kernel powers the machine off after the demo.
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
    let machine = Machine {
        images: &images,
        accel,
        smp: opts.smp,
        cmdline: qemu::cmdline("init", shutdown, &extra),
        icount: opts.icount,
        gdb: opts.gdb_stub(),
    };
    let mut cmd = machine.command(&qemu);
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
        note("the serial console is on this terminal; Ctrl-C stops QEMU");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("could not start {}: {e}", qemu.display()))?;
    match status.code() {
        Some(EXIT_CLEAN) => Ok(ExitCode::SUCCESS),
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
