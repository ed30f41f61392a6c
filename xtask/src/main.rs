//! `cargo xtask`: Baton's build, run and test driver. It runs on the host.
//!
//! One command per job (see [`Cmd`]; `cargo xtask help` lists them); the alias `cargo xtask` is
//! defined in `.cargo/config.toml`. Every command first installs what it needs and is missing
//! ([`deps`]). The kernel and the user programs are cross-built (the kernel for `x86_64-unknown-none`, the programs hard-float for `x86_64-unknown-linux-gnu` as `no_std`), each
//! in its own target directory, and the programs are packed into the initrd ([`build`],
//! [`initrd`]); QEMU boots the kernel ELF directly through PVH ([`qemu`], [`run`]); `test` runs
//! the host unit tests and then the integration tests listed in [`tests`], judging each serial
//! log ([`judge`], [`test`]); `bench` boots the `bench` program under `-icount`, measures the
//! same operations in a Linux guest ([`linux`]) and writes the results, the report and its
//! plots to `results/` ([`bench`], [`report`], [`plot`]); `profile` traces the null RPC's
//! kernel passes with gdb and breaks them down by stage and instruction mix ([`profile`],
//! [`stages`], [`mix`]).
//!
//! Messages from xtask itself go to standard error, prefixed `xtask: `; standard output
//! carries the serial console (`run`), the paths (`build`) and the results (`test`, `bench`).
#![forbid(unsafe_code)]

mod accent;
mod bench;
mod build;
mod clippy;
mod cycles;
mod deps;
mod disk;
mod fuzz;
mod generated;
mod initrd;
mod json;
mod judge;
mod linux;
mod mix;
mod mutants;
mod new;
mod plot;
mod profile;
mod qemu;
mod report;
mod run;
mod spin;
mod stages;
mod symbolize;
mod test;
mod tests;
mod trace;
mod workspace;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::num::NonZeroUsize;
use std::process::ExitCode;

/// The command line: `cargo xtask <command> [options]`.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Baton's build, run and test driver",
    after_help = "Integration-test logs are written to target/test-logs/<name>.log. \
                  `cargo xtask help <command>` or `cargo xtask <command> --help` says more \
                  about one command.",
    arg_required_else_help = true,
    disable_version_flag = true,
    // A flag given twice is not an error: the last value counts (as with most tools).
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// A parsed command.
#[derive(Debug, PartialEq, Eq, Subcommand)]
enum Cmd {
    /// Build the kernel, the user programs and the initrd; print their paths.
    Build,
    /// Build, then boot Baton in QEMU into its console and shell, on this terminal.
    ///
    /// The default is `init=names,console,shell,swapon priv=console,shell,swapon`: the name
    /// server, the console server, the shell (type `help`) and `swapon` (the disk driver and
    /// the default pager on the disk's swap partition). When standard input is not a terminal
    /// nobody can type, so it boots the old demo instead (`init=init`), and the kernel
    /// powers off by itself after it.
    #[command(
        after_help = "Example: `cargo xtask run -- init=init` boots the greeting demo \
                      instead of the shell; `cargo xtask run -- init=pingpong` the `pingpong` \
                      program; `cargo xtask run -- init=init shutdown` powers off after the \
                      demo even on a terminal."
    )]
    Run(RunOpts),
    /// Build, start QEMU paused with a gdb stub, say how to attach (`run --gdb`).
    Gdb(RunOpts),
    /// Host unit tests, then integration tests that boot QEMU.
    ///
    /// Ends with the line `N passed, N failed`. Integration-test logs are written to
    /// target/test-logs/<name>.log.
    Test(TestOpts),
    /// Benchmark Baton (and Linux under the same QEMU); write results/.
    ///
    /// Builds, boots the `bench` program under TCG with -icount (the TSC counts
    /// instructions) twice and checks that both runs agree to the instruction; where
    /// kvm_intel or kvm_amd is loaded also boots it under -enable-kvm -cpu host (TSC cycles,
    /// several boots); measures the same operations in a Linux guest under the same QEMU;
    /// and writes results/ (report.md, baton.json, baton-cycles.json, linux.json, SVG
    /// plots). Prints the headline table (BATON_TCG=1: no cycles pass).
    Bench(BenchOpts),
    /// The Linux side of `bench` alone: a Debian guest, twice; writes results/linux.json.
    BenchLinux,
    /// Sting's Figures 4/5 in wall time: the four applications in a Linux guest on -smp 1,
    /// 2 and 4 beside Baton's; writes results/sting-speedup.md.
    ///
    /// Builds the applications (user/sting/examples/speedup_linux.rs, the programs Baton's
    /// sting_speedup runs) as a static Linux program, boots the Debian guest with it under
    /// multi-threaded TCG without -icount on -smp 1, 2 and 4, and tables its SPEEDUP
    /// lines beside those in the logs of `cargo xtask test --filter sting_speedup`.
    StingSpeedup,
    /// Accent's Tables 3-8 and 3-10 from a realistic run: the shell session of the
    /// `shell_session` test.
    ///
    /// Reads the `BENCHVM` lines the shell's `vmstat` printed at the end of that test's
    /// session (target/test-logs/shell_session.log: run `cargo xtask test --filter
    /// shell_session` first) and prints the two tables, Accent's system generation beside
    /// it, in Markdown, and writes them into docs/files.md between its markers.
    AccentTables,
    /// The null RPC's kernel path by stage and instruction mix; writes results/profile.md.
    ///
    /// Seed 001's Tables 1 and 2 for Baton: the null RPC kernel path by stage and
    /// instruction mix (loads/stores, branches), for the switching fast path and migrating
    /// RPC, counted instruction by instruction (gdb single-steps the bench image under TCG
    /// -icount); writes results/profile.md and prints it.
    Profile,
    /// A new user program, user/programs/src/bin/NAME.rs, from a template.
    ///
    /// The template prints its arguments; the next build packs it into the boot image, so
    /// `cargo xtask run -- init=NAME` boots it and the shell's `run NAME` starts it.
    /// docs/programs.md goes on from there (a server and a client with the interface macro).
    New(new::NewOpts),
    /// Boot with the kernel's timeline trace on; write results/trace.json for Perfetto.
    ///
    /// Every kernel entry from user mode (system call, exception, interrupt) on every CPU,
    /// with TSC timestamps, the threads that entered and left, and the continuations
    /// paper's events during it (handoffs, recognitions, blocks, discards, switches,
    /// migrating calls, messages); flows from each message to the entry that delivered it.
    /// The programs must end (the trace is printed at shutdown); results/trace.log keeps the
    /// serial log.
    #[command(
        after_help = "Example: `cargo xtask trace -- init=pingpong` traces the ping-pong \
                      RPC test; open results/trace.json in https://ui.perfetto.dev."
    )]
    Trace(trace::TraceOpts),
    /// The system-call fuzzer's soak: one boot per seed of the `fuzz` program.
    ///
    /// Multi-threaded TCG with several CPUs; per seed its calls, the share that succeeded,
    /// the kernel's counts before and after, and on a kernel panic the panic line and each
    /// fuzzing thread's last call index; logs in target/fuzz-logs/.
    Fuzz(fuzz::FuzzOpts),
    /// Clippy with -D warnings on the host crates, the kernel and the user programs.
    Clippy,
    /// Mutation testing of kern, baton-abi and baton-idl-rt (cargo-mutants).
    ///
    /// cargo-mutants is installed if missing. The crates are taken one after the other, each
    /// against its own tests; results in target/mutants/<crate>/mutants.out.
    Mutants(mutants::MutantsOpts),
}

/// Options of `run` and `gdb`.
#[derive(Args, Debug, PartialEq, Eq)]
pub struct RunOpts {
    /// Use QEMU's TCG even where hardware KVM is available (or BATON_TCG=1).
    #[arg(long)]
    pub tcg: bool,
    /// Number of CPUs.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = positive::<u32>)]
    pub smp: u32,
    /// -icount shift=0,align=off,sleep=off: the TSC counts instructions (implies TCG).
    #[arg(long)]
    pub icount: bool,
    /// Start paused, waiting for gdb on tcp::1234 (or the port of --gdb-port), as the `gdb`
    /// command does.
    #[arg(long)]
    pub gdb: bool,
    /// The TCP port of the gdb stub (default 1234; implies --gdb).
    #[arg(long, value_name = "N", value_parser = positive::<u16>)]
    pub gdb_port: Option<u16>,
    /// Boot the kernel built with allocation fault injection, with `failalloc=N`: after
    /// boot, one in N kernel heap, kernel stack and frame allocations fails (the counts are
    /// printed at shutdown).
    #[arg(long, value_name = "N", value_parser = positive::<u64>)]
    pub fault_inject: Option<u64>,
    /// The machine's memory in MiB (QEMU's -m): a small machine pages for real, e.g.
    /// `--memory 14` (the kernel needs about 12 with the test programs' boot modules).
    #[arg(long, value_name = "MIB", default_value_t = qemu::DEFAULT_MEMORY_MIB,
          value_parser = positive::<u32>)]
    pub memory: u32,
    /// Extra kernel command-line words, after `--`; an `init=...` word replaces the default
    /// `init=names,console,shell,swapon priv=console,shell,swapon` (give `priv=` yourself
    /// then).
    #[arg(last = true, value_name = "WORD")]
    pub extra: Vec<String>,
}

impl Default for RunOpts {
    fn default() -> RunOpts {
        RunOpts {
            tcg: false,
            smp: 1,
            icount: false,
            gdb: false,
            gdb_port: None,
            fault_inject: None,
            memory: qemu::DEFAULT_MEMORY_MIB,
            extra: Vec::new(),
        }
    }
}

impl RunOpts {
    /// The port of the gdb stub to start QEMU with, if any: `--gdb-port`, else
    /// [`qemu::GDB_PORT`] with `--gdb`.
    pub fn gdb_stub(&self) -> Option<u16> {
        match (self.gdb, self.gdb_port) {
            (_, Some(port)) => Some(port),
            (true, None) => Some(qemu::GDB_PORT),
            (false, None) => None,
        }
    }
}

/// Options of `test`.
#[derive(Args, Debug, Default, PartialEq, Eq)]
pub struct TestOpts {
    /// Use QEMU's TCG even where hardware KVM is available (or BATON_TCG=1).
    #[arg(long)]
    pub tcg: bool,
    /// Only the integration tests whose name contains SUBSTR; given more than once, those
    /// whose name contains any of them (the host unit tests all run regardless).
    // It does not apply to the host unit tests, which all run (a libtest filter would
    // silently skip most of them); `--no-host` skips those.
    #[arg(long, value_name = "SUBSTR")]
    pub filter: Vec<String>,
    /// Skip the host unit tests.
    #[arg(long)]
    pub no_host: bool,
    /// Run up to N integration tests at once (default: number of CPUs).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = nonzero)]
    pub jobs: Option<NonZeroUsize>,
    /// Boot every integration test on the kernel built with allocation fault injection, one
    /// in N allocations failing after boot: a test passes when the kernel neither panics
    /// nor faults and the boot ends (a program's TEST FAIL on an injected error is
    /// expected).
    // The tests are judged only on the kernel's survival (`judge::survived`).
    #[arg(long, value_name = "N", value_parser = positive::<u64>)]
    pub fault_inject: Option<u64>,
    /// List the host test groups and the integration tests (name, CPUs, what each boots)
    /// that the other options select; build and run nothing.
    #[arg(long)]
    pub list: bool,
}

/// Options of `bench`.
#[derive(Args, Debug, Default, PartialEq, Eq)]
pub struct BenchOpts {
    /// Baton only, one run (no repeatability check, no cycles, no Linux).
    #[arg(long)]
    pub quick: bool,
}

fn main() -> ExitCode {
    let cmd = match parse(std::env::args_os()) {
        Ok(cmd) => cmd,
        // Help, or bad input (exit status 2, as before the usage).
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let result = match cmd {
        Cmd::Build => build::build_command(),
        Cmd::Run(opts) | Cmd::Gdb(opts) => run::run(&opts),
        Cmd::Test(opts) if opts.list => test::list(&opts),
        Cmd::Test(opts) => test::test(&opts),
        Cmd::Bench(opts) => bench::bench(&opts),
        Cmd::BenchLinux => linux::bench_linux(),
        Cmd::StingSpeedup => linux::sting_speedup(),
        Cmd::AccentTables => accent::session_tables(),
        Cmd::Fuzz(opts) => fuzz::fuzz(&opts),
        Cmd::Profile => profile::profile(),
        Cmd::Trace(opts) => trace::run(&opts),
        Cmd::New(opts) => new::run(&opts),
        Cmd::Clippy => clippy::clippy(),
        Cmd::Mutants(opts) => mutants::mutants(&opts),
    };
    result.unwrap_or_else(|msg| {
        eprintln!("xtask: error: {msg}");
        ExitCode::FAILURE
    })
}

/// The command line's definition, with `help`'s full reference (every command and its
/// options) appended to the long help.
fn cli() -> clap::Command {
    let cmd = Cli::command();
    let reference = reference(&cmd);
    cmd.after_long_help(reference)
}

/// Every command with its options, as `cargo xtask help` (or `--help`) shows them below the
/// list of commands.
fn reference(cmd: &clap::Command) -> String {
    let mut out = String::from("Commands and their options:\n");
    for sub in cmd.get_subcommands() {
        let name = sub.get_name();
        out.push('\n');
        if name == "gdb" {
            // The same options as `run`, said once.
            out.push_str("gdb: takes the options of `run`, and starts paused as with --gdb\n");
            continue;
        }
        // The one-line description, usage and options (without `-h`, which all have).
        let help = sub
            .clone()
            .bin_name(format!("cargo xtask {name}"))
            .long_about(None)
            .after_help(None)
            .after_long_help(None)
            .disable_help_flag(true)
            .render_help()
            .to_string();
        out.push_str(&format!("{name}: {}\n", help.trim_end()));
    }
    out.push_str(
        "\nIntegration-test logs are written to target/test-logs/<name>.log. \
         `cargo xtask help <command>` or `cargo xtask <command> --help` says more about one \
         command.",
    );
    out
}

/// Parses the command line (the program's name first, then the arguments after
/// `cargo xtask`). `gdb` comes back as `run` with `--gdb`. The error of bad input, or the
/// help asked for, is clap's, ready to print.
fn parse<I, T>(args: I) -> Result<Cmd, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = cli().try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    Ok(match cli.cmd {
        Cmd::Gdb(opts) => Cmd::Run(RunOpts { gdb: true, ..opts }),
        cmd => cmd,
    })
}

/// Parses a number that must be at least 1 (a clap value parser).
fn positive<T: std::str::FromStr + PartialOrd + From<u8>>(s: &str) -> Result<T, String> {
    match s.parse::<T>() {
        Ok(n) if n >= T::from(1) => Ok(n),
        _ => Err(format!("needs a number of at least 1, got `{s}`")),
    }
}

/// Parses a number that must be at least 1, as a [`NonZeroUsize`].
fn nonzero(s: &str) -> Result<NonZeroUsize, String> {
    s.parse()
        .map_err(|_| format!("needs a number of at least 1, got `{s}`"))
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Cmd, clap::Error> {
        parse(std::iter::once("xtask").chain(args.iter().copied()))
    }

    #[test]
    fn parses_run_flags_and_extra_words() {
        let cmd = p(&[
            "run", "--tcg", "--smp", "2", "--icount", "--", "init=a,b", "x",
        ])
        .unwrap();
        let want = RunOpts {
            tcg: true,
            smp: 2,
            icount: true,
            extra: vec!["init=a,b".into(), "x".into()],
            ..RunOpts::default()
        };
        assert_eq!(cmd, Cmd::Run(want));
        assert_eq!(
            p(&["run", "--fault-inject", "50", "--", "shutdown"]).unwrap(),
            Cmd::Run(RunOpts {
                smp: 1,
                fault_inject: Some(50),
                extra: vec!["shutdown".into()],
                ..RunOpts::default()
            })
        );
        // Words after `--` are the kernel's, even when they look like options.
        assert_eq!(
            p(&["run", "--", "--tcg", "-j1"]).unwrap(),
            Cmd::Run(RunOpts {
                extra: vec!["--tcg".into(), "-j1".into()],
                ..RunOpts::default()
            })
        );
        assert_eq!(
            p(&["run", "--memory", "14"]).unwrap(),
            Cmd::Run(RunOpts {
                memory: 14,
                ..RunOpts::default()
            })
        );
        assert!(p(&["run", "--memory", "0"]).is_err());
        assert_eq!(
            p(&["gdb", "--smp=4"]).unwrap(),
            Cmd::Run(RunOpts {
                smp: 4,
                gdb: true,
                ..RunOpts::default()
            })
        );
    }

    #[test]
    fn gdb_port() {
        let Cmd::Run(opts) = p(&["run", "--gdb"]).unwrap() else {
            panic!("not run")
        };
        assert_eq!(opts.gdb_stub(), Some(1234));
        let Cmd::Run(opts) = p(&["run", "--gdb-port", "4321"]).unwrap() else {
            panic!("not run")
        };
        assert_eq!(opts.gdb_stub(), Some(4321));
        let Cmd::Run(opts) = p(&["gdb", "--gdb-port=2000"]).unwrap() else {
            panic!("not run")
        };
        assert_eq!(opts.gdb_stub(), Some(2000));
        let Cmd::Run(opts) = p(&["run"]).unwrap() else {
            panic!("not run")
        };
        assert_eq!(opts.gdb_stub(), None);
    }

    #[test]
    fn parses_test_flags() {
        let cmd = p(&["test", "--filter", "fault", "-j3", "--tcg", "--no-host"]).unwrap();
        let want = TestOpts {
            tcg: true,
            filter: vec!["fault".into()],
            jobs: NonZeroUsize::new(3),
            no_host: true,
            ..TestOpts::default()
        };
        assert_eq!(cmd, Cmd::Test(want));
        assert_eq!(
            p(&["test", "-j", "1", "--filter=x"]).unwrap(),
            Cmd::Test(TestOpts {
                filter: vec!["x".into()],
                jobs: NonZeroUsize::new(1),
                ..TestOpts::default()
            })
        );
        assert_eq!(
            p(&["test", "--filter", "ipc", "--filter=vm"]).unwrap(),
            Cmd::Test(TestOpts {
                filter: vec!["ipc".into(), "vm".into()],
                ..TestOpts::default()
            })
        );
        assert_eq!(
            p(&["test", "--list", "--jobs=2"]).unwrap(),
            Cmd::Test(TestOpts {
                list: true,
                jobs: NonZeroUsize::new(2),
                ..TestOpts::default()
            })
        );
    }

    #[test]
    fn parses_test_fault_injection() {
        assert_eq!(
            p(&["test", "--no-host", "--fault-inject", "7"]).unwrap(),
            Cmd::Test(TestOpts {
                no_host: true,
                fault_inject: Some(7),
                ..TestOpts::default()
            })
        );
        assert!(p(&["test", "--fault-inject", "0"]).is_err());
    }

    #[test]
    fn parses_bench_flags() {
        assert_eq!(
            p(&["bench"]).unwrap(),
            Cmd::Bench(BenchOpts { quick: false })
        );
        assert_eq!(
            p(&["bench", "--quick"]).unwrap(),
            Cmd::Bench(BenchOpts { quick: true })
        );
    }

    #[test]
    fn parses_commands_without_options() {
        assert_eq!(p(&["profile"]).unwrap(), Cmd::Profile);
        assert_eq!(p(&["build"]).unwrap(), Cmd::Build);
        assert_eq!(p(&["clippy"]).unwrap(), Cmd::Clippy);
        assert_eq!(p(&["bench-linux"]).unwrap(), Cmd::BenchLinux);
        assert_eq!(p(&["sting-speedup"]).unwrap(), Cmd::StingSpeedup);
    }

    #[test]
    fn parses_fuzz_flags() {
        assert_eq!(p(&["fuzz"]).unwrap(), Cmd::Fuzz(fuzz::FuzzOpts::default()));
        let cmd = p(&[
            "fuzz",
            "--seeds",
            "3",
            "--calls=500",
            "--smp",
            "4",
            "--first-seed",
            "0",
            "--threads",
            "2",
            "--exclude",
            "kp",
            "--verbose",
        ])
        .unwrap();
        let want = fuzz::FuzzOpts {
            seeds: 3,
            calls: 500,
            smp: 4,
            first_seed: 0,
            threads: 2,
            exclude: "kp".into(),
            verbose: true,
        };
        assert_eq!(cmd, Cmd::Fuzz(want));
    }

    #[test]
    fn parses_mutants_flags() {
        assert_eq!(
            p(&["mutants"]).unwrap(),
            Cmd::Mutants(mutants::MutantsOpts::default())
        );
        let cmd = p(&[
            "mutants",
            "--package",
            "kern",
            "--file=crates/kern/src/ring.rs",
            "--shard",
            "1/4",
            "-j2",
            "--timeout",
            "60",
            "--list",
            "--iterate",
        ])
        .unwrap();
        let want = mutants::MutantsOpts {
            packages: vec!["kern".into()],
            files: vec!["crates/kern/src/ring.rs".into()],
            shard: Some("1/4".into()),
            jobs: Some(2),
            timeout: Some(60),
            list: true,
            iterate: true,
        };
        assert_eq!(cmd, Cmd::Mutants(want));
        let Cmd::Mutants(opts) = p(&["mutants", "-p", "kern", "-p", "baton-abi"]).unwrap() else {
            panic!("not mutants")
        };
        assert_eq!(opts.packages, ["kern", "baton-abi"]);
    }

    #[test]
    fn last_value_counts() {
        assert_eq!(
            p(&["test", "--no-host", "--no-host", "-j1", "-j", "2"]).unwrap(),
            Cmd::Test(TestOpts {
                no_host: true,
                jobs: NonZeroUsize::new(2),
                ..TestOpts::default()
            })
        );
        let Cmd::Fuzz(opts) = p(&["fuzz", "--seeds", "1", "--seeds=3"]).unwrap() else {
            panic!("not fuzz")
        };
        assert_eq!(opts.seeds, 3);
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            &[][..],
            &["frobnicate"],
            &["build", "--tcg"],
            &["run", "--smp"],
            &["run", "--smp", "0"],
            &["run", "--smp", "x"],
            &["run", "--tcg=1"],
            &["run", "--fault-inject", "0"],
            &["run", "--fault-inject"],
            &["run", "--gdb-port", "0"],
            &["run", "--gdb-port", "65536"],
            &["run", "shutdown"],
            &["test", "-j0"],
            &["test", "--gdb"],
            &["clippy", "extra"],
            &["bench", "--tcg"],
            &["profile", "--quick"],
            &["fuzz", "--seeds", "0"],
            &["mutants", "--shard", "4/4"],
            &["mutants", "--shard", "x"],
            &["mutants", "--timeout", "0"],
            &["mutants", "--tcg"],
        ] {
            let err = p(bad).expect_err(&format!("{bad:?} should be rejected"));
            assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
        }
    }

    #[test]
    fn help_describes_every_command_and_option() {
        for args in [
            &["help"][..],
            &["--help"],
            &["-h"],
            &["help", "run"],
            &["test", "--help"],
            &["trace", "--help"],
            &["new", "--help"],
        ] {
            let err = p(args).expect_err("help is not a command to run");
            assert_eq!(err.exit_code(), 0, "{args:?}");
        }
        let help = cli().render_long_help().to_string();
        for word in [
            "build",
            "run",
            "gdb",
            "test",
            "bench",
            "bench-linux",
            "sting-speedup",
            "profile",
            "fuzz",
            "clippy",
            "mutants",
            "trace",
            "new",
            "--records",
            "--log",
            "--tcg",
            "--smp",
            "--icount",
            "--gdb",
            "--gdb-port",
            "--fault-inject",
            "--filter",
            "--no-host",
            "--jobs",
            "--list",
            "--quick",
            "--seeds",
            "--calls",
            "--first-seed",
            "--threads",
            "--exclude",
            "--verbose",
            "--package",
            "--file",
            "--shard",
            "--timeout",
            "--iterate",
            "[-- <WORD>...]",
        ] {
            assert!(help.contains(word), "help lacks {word}:\n{help}");
        }
        cli().debug_assert();
    }
}
