//! `cargo xtask`: Baton's build, run and test driver. It runs on the host.
//!
//! One command per job (see [`USAGE`]); the alias `cargo xtask` is defined in
//! `.cargo/config.toml`. Every command first installs what it needs and is missing
//! ([`deps`]). The kernel and the user programs are cross-built for `x86_64-unknown-none`,
//! each in its own target directory, and the programs are packed into the initrd ([`build`],
//! [`initrd`]); QEMU boots the kernel ELF directly through PVH ([`qemu`], [`run`]); `test`
//! runs the host unit tests and then the integration tests listed in [`tests`], judging each
//! serial log ([`judge`], [`test`]); `bench` boots the `bench` program under `-icount`,
//! measures the same operations in a Linux guest ([`linux`]) and writes the results, the
//! report and its plots to `results/` ([`bench`], [`report`], [`plot`]); `profile` traces
//! the null RPC's kernel passes with gdb and breaks them down by stage and instruction mix
//! ([`profile`], [`stages`], [`mix`]).
//!
//! Messages from xtask itself go to standard error, prefixed `xtask: `; standard output
//! carries the serial console (`run`), the paths (`build`) and the results (`test`, `bench`).
#![forbid(unsafe_code)]

mod bench;
mod build;
mod clippy;
mod cycles;
mod deps;
mod fuzz;
mod initrd;
mod judge;
mod linux;
mod mix;
mod mutants;
mod plot;
mod profile;
mod qemu;
mod report;
mod run;
mod stages;
mod test;
mod tests;
mod workspace;

use std::num::NonZeroUsize;
use std::process::ExitCode;

/// The usage text, printed by `help` and on bad input.
const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  build                  build the kernel, the user programs and the initrd; print their paths
  run [options] [-- word...]
                         build, then boot Baton in QEMU with the serial console on this terminal
                         (when standard input is not a terminal, the kernel powers off by itself
                         after the demo)
      --tcg              use QEMU's TCG even where hardware KVM is available (or BATON_TCG=1)
      --smp N            number of CPUs (default 1)
      --icount           -icount shift=0,align=off,sleep=off: the TSC counts instructions
                         (implies TCG)
      --gdb              start paused, waiting for gdb on tcp::1234 (as `gdb`)
      --fault-inject N   boot the kernel built with allocation fault injection, with
                         `failalloc=N`: after boot, one in N kernel heap, kernel stack and
                         frame allocations fails (the counts are printed at shutdown)
      -- word...         extra kernel command-line words; an `init=...` word replaces the
                         default `init=init`
  gdb [run options]      build, start QEMU paused with a gdb stub on tcp::1234, say how to attach
  test [options]         host unit tests, then integration tests that boot QEMU; ends with the
                         line `N passed, N failed`
      --tcg              use QEMU's TCG even where hardware KVM is available (or BATON_TCG=1)
      --filter SUBSTR    only the integration tests whose name contains SUBSTR (the host
                         unit tests all run regardless)
      --no-host          skip the host unit tests
      -j N               run up to N integration tests at once (default: number of CPUs)
      --fault-inject N   boot every integration test on the kernel built with allocation fault
                         injection, one in N allocations failing after boot: a test passes
                         when the kernel neither panics nor faults and the boot ends (a
                         program's TEST FAIL on an injected error is expected)
  bench [--quick]        build, boot the `bench` program under TCG with -icount (the TSC counts
                         instructions) twice and check that both runs agree to the instruction,
                         where kvm_intel or kvm_amd is loaded also boot it under -enable-kvm
                         -cpu host (TSC cycles, several boots), measure the same operations in
                         a Linux guest under the same QEMU, and write results/ (report.md,
                         baton.json, baton-cycles.json, linux.json, SVG plots); print the
                         headline table (BATON_TCG=1: no cycles pass)
      --quick            Baton only, one run (no repeatability check, no cycles, no Linux)
  bench-linux            the Linux side of `bench` alone: a Debian guest, twice; writes
                         results/linux.json
  profile                seed 001's Tables 1 and 2 for Baton: the null RPC kernel path by
                         stage and instruction mix (loads/stores, branches), for the
                         switching fast path and migrating RPC, counted instruction by
                         instruction (gdb single-steps the bench image under TCG -icount);
                         writes results/profile.md and prints it
  fuzz [options]         the system-call fuzzer's soak: one boot per seed of the `fuzz` program
                         (multi-threaded TCG with several CPUs); per seed its calls, the share
                         that succeeded, the kernel's counts before and after, and on a kernel
                         panic the panic line and each fuzzing thread's last call index; logs
                         in target/fuzz-logs/
      --seeds N          seeds to run (default 10)
      --calls M          calls per seed (default 100000)
      --smp K            number of CPUs (default 2)
      --first-seed S     first seed (default 1)
      --threads T        fuzzing threads (default 3)
      --exclude LETTERS  call classes to leave out (docs/fuzzing.md)
      --verbose          the program prints every call (to place a panic exactly)
  clippy                 clippy -D warnings on the host crates, the kernel and the user programs
  mutants [options]      mutation testing (cargo-mutants, installed if missing) of kern,
                         baton-abi and baton-idl-rt, one crate after the other, each against
                         its own tests; results in target/mutants/<crate>/mutants.out
      --package NAME     only this crate (repeatable)
      --file GLOB        only mutants in these files (repeatable)
      --shard K/N        only the K-th of N parts of each crate's mutants
      -j N               mutants tested at once (default 1)
      --timeout SECS     per mutant's tests (default: cargo-mutants' own, from the clean run)
      --list             list the mutants, test nothing
      --iterate          test again only the mutants the previous run did not catch
  help                   print this text

Integration-test logs are written to target/test-logs/<name>.log.";

/// Options of `run` and `gdb`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RunOpts {
    /// `--tcg`: never use KVM.
    pub tcg: bool,
    /// `--smp N`: number of CPUs.
    pub smp: u32,
    /// `--icount`: deterministic instruction counting (TCG only).
    pub icount: bool,
    /// `--gdb`: start paused with the gdb stub.
    pub gdb: bool,
    /// `--fault-inject N`: the fault-injecting kernel, one in N allocations failing.
    pub fault_inject: Option<u64>,
    /// Words after `--`, appended to the kernel command line.
    pub extra: Vec<String>,
}

/// Options of `test`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TestOpts {
    /// `--tcg`: never use KVM.
    pub tcg: bool,
    /// `--filter SUBSTR`: only the integration tests whose name contains it. It does not
    /// apply to the host unit tests, which all run (a libtest filter would silently skip
    /// most of them); `--no-host` skips those.
    pub filter: Option<String>,
    /// `--no-host`: skip the host unit tests.
    pub no_host: bool,
    /// `-j N`: integration tests run at once; `None` means the number of CPUs.
    pub jobs: Option<NonZeroUsize>,
    /// `--fault-inject N`: the integration tests boot the fault-injecting kernel with
    /// `failalloc=N` and are judged only on the kernel's survival (`judge::survived`).
    pub fault_inject: Option<u64>,
}

/// Options of `bench`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BenchOpts {
    /// `--quick`: one run, no repeatability check.
    pub quick: bool,
}

/// A parsed command line.
#[derive(Debug, PartialEq, Eq)]
enum Cmd {
    Build,
    Run(RunOpts),
    Test(TestOpts),
    Bench(BenchOpts),
    BenchLinux,
    Fuzz(fuzz::FuzzOpts),
    Profile,
    Clippy,
    Mutants(mutants::MutantsOpts),
    Help,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = match parse(&args) {
        Ok(cmd) => cmd,
        Err(msg) => {
            eprintln!("xtask: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match cmd {
        Cmd::Help => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Build => build::build_command(),
        Cmd::Run(opts) => run::run(&opts),
        Cmd::Test(opts) => test::test(&opts),
        Cmd::Bench(opts) => bench::bench(&opts),
        Cmd::BenchLinux => linux::bench_linux(),
        Cmd::Fuzz(opts) => fuzz::fuzz(&opts),
        Cmd::Profile => profile::profile(),
        Cmd::Clippy => clippy::clippy(),
        Cmd::Mutants(opts) => mutants::mutants(&opts),
    };
    result.unwrap_or_else(|msg| {
        eprintln!("xtask: error: {msg}");
        ExitCode::FAILURE
    })
}

/// Parses the arguments after `cargo xtask`.
fn parse(args: &[String]) -> Result<Cmd, String> {
    let Some((cmd, rest)) = args.split_first() else {
        return Err("missing command".into());
    };
    let mut rest = rest.iter().cloned();
    match cmd.as_str() {
        "build" | "clippy" => {
            if let Some(arg) = rest.next() {
                return Err(format!("`{cmd}` takes no arguments, got `{arg}`"));
            }
            Ok(if cmd == "build" {
                Cmd::Build
            } else {
                Cmd::Clippy
            })
        }
        "run" | "gdb" => {
            let mut opts = RunOpts {
                smp: 1,
                gdb: cmd == "gdb",
                ..RunOpts::default()
            };
            while let Some(arg) = rest.next() {
                let (flag, inline) = split_flag(&arg);
                match flag {
                    "--" => {
                        opts.extra = rest.by_ref().collect();
                        break;
                    }
                    "--tcg" if inline.is_none() => opts.tcg = true,
                    "--icount" if inline.is_none() => opts.icount = true,
                    "--gdb" if inline.is_none() => opts.gdb = true,
                    "--smp" => {
                        opts.smp = positive(flag, &value(flag, inline, &mut rest)?)?;
                    }
                    "--fault-inject" => {
                        opts.fault_inject = Some(positive(flag, &value(flag, inline, &mut rest)?)?);
                    }
                    _ => return Err(format!("unknown option `{arg}` for `{cmd}`")),
                }
            }
            Ok(Cmd::Run(opts))
        }
        "test" => {
            let mut opts = TestOpts::default();
            while let Some(arg) = rest.next() {
                let (flag, inline) = split_flag(&arg);
                match flag {
                    "--tcg" if inline.is_none() => opts.tcg = true,
                    "--filter" => opts.filter = Some(value(flag, inline, &mut rest)?),
                    "--no-host" if inline.is_none() => opts.no_host = true,
                    "--fault-inject" => {
                        opts.fault_inject = Some(positive(flag, &value(flag, inline, &mut rest)?)?);
                    }
                    "-j" | "--jobs" => {
                        let n: usize = positive(flag, &value(flag, inline, &mut rest)?)?;
                        opts.jobs = NonZeroUsize::new(n);
                    }
                    _ => return Err(format!("unknown option `{arg}` for `test`")),
                }
            }
            Ok(Cmd::Test(opts))
        }
        "bench" => {
            let mut opts = BenchOpts::default();
            for arg in rest {
                match arg.as_str() {
                    "--quick" => opts.quick = true,
                    _ => return Err(format!("unknown option `{arg}` for `bench`")),
                }
            }
            Ok(Cmd::Bench(opts))
        }
        "fuzz" => {
            let mut opts = fuzz::FuzzOpts::default();
            while let Some(arg) = rest.next() {
                let (flag, inline) = split_flag(&arg);
                match flag {
                    "--seeds" => opts.seeds = positive(flag, &value(flag, inline, &mut rest)?)?,
                    "--calls" => opts.calls = positive(flag, &value(flag, inline, &mut rest)?)?,
                    "--smp" => opts.smp = positive(flag, &value(flag, inline, &mut rest)?)?,
                    "--threads" => opts.threads = positive(flag, &value(flag, inline, &mut rest)?)?,
                    "--first-seed" => {
                        let v = value(flag, inline, &mut rest)?;
                        opts.first_seed = v
                            .parse()
                            .map_err(|_| format!("`{flag}` needs a number, got `{v}`"))?;
                    }
                    "--exclude" => opts.exclude = value(flag, inline, &mut rest)?,
                    "--verbose" if inline.is_none() => opts.verbose = true,
                    _ => return Err(format!("unknown option `{arg}` for `fuzz`")),
                }
            }
            Ok(Cmd::Fuzz(opts))
        }
        "mutants" => {
            let mut opts = mutants::MutantsOpts::default();
            while let Some(arg) = rest.next() {
                let (flag, inline) = split_flag(&arg);
                match flag {
                    "--package" | "-p" => {
                        opts.packages.push(value(flag, inline, &mut rest)?);
                    }
                    "--file" | "-f" => opts.files.push(value(flag, inline, &mut rest)?),
                    "--shard" => {
                        let shard = value(flag, inline, &mut rest)?;
                        let ok = shard.split_once('/').is_some_and(|(k, n)| {
                            matches!((k.parse::<u32>(), n.parse::<u32>()), (Ok(k), Ok(n)) if k < n)
                        });
                        if !ok {
                            return Err(format!(
                                "`--shard` needs K/N with K below N (counting from 0), got `{shard}`"
                            ));
                        }
                        opts.shard = Some(shard);
                    }
                    "-j" | "--jobs" => {
                        opts.jobs = Some(positive(flag, &value(flag, inline, &mut rest)?)?);
                    }
                    "--timeout" => {
                        opts.timeout = Some(positive(flag, &value(flag, inline, &mut rest)?)?);
                    }
                    "--list" if inline.is_none() => opts.list = true,
                    "--iterate" if inline.is_none() => opts.iterate = true,
                    _ => return Err(format!("unknown option `{arg}` for `mutants`")),
                }
            }
            Ok(Cmd::Mutants(opts))
        }
        "bench-linux" | "profile" => match rest.next() {
            Some(arg) => Err(format!("`{cmd}` takes no arguments, got `{arg}`")),
            None if cmd == "profile" => Ok(Cmd::Profile),
            None => Ok(Cmd::BenchLinux),
        },
        "help" | "-h" | "--help" => Ok(Cmd::Help),
        _ => Err(format!("unknown command `{cmd}`")),
    }
}

/// Splits `--flag=value` and `-jN` into the flag and its inline value.
fn split_flag(arg: &str) -> (&str, Option<&str>) {
    if arg.starts_with("--") {
        if let Some((flag, value)) = arg.split_once('=') {
            return (flag, Some(value));
        }
    } else if let Some(value) = arg.strip_prefix("-j").filter(|v| !v.is_empty()) {
        return ("-j", Some(value));
    }
    (arg, None)
}

/// The value of `flag`: inline (`--flag=value`) or the next argument.
fn value(
    flag: &str,
    inline: Option<&str>,
    rest: &mut impl Iterator<Item = String>,
) -> Result<String, String> {
    match inline {
        Some(v) => Ok(v.to_string()),
        None => rest.next().ok_or_else(|| format!("`{flag}` needs a value")),
    }
}

/// Parses a number that must be at least 1.
fn positive<T: std::str::FromStr + PartialOrd + From<u8>>(
    flag: &str,
    s: &str,
) -> Result<T, String> {
    match s.parse::<T>() {
        Ok(n) if n >= T::from(1) => Ok(n),
        _ => Err(format!("`{flag}` needs a number of at least 1, got `{s}`")),
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Cmd, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
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
            gdb: false,
            fault_inject: None,
            extra: vec!["init=a,b".into(), "x".into()],
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
    fn parses_test_flags() {
        let cmd = p(&["test", "--filter", "fault", "-j3", "--tcg", "--no-host"]).unwrap();
        let want = TestOpts {
            tcg: true,
            filter: Some("fault".into()),
            jobs: NonZeroUsize::new(3),
            no_host: true,
            fault_inject: None,
        };
        assert_eq!(cmd, Cmd::Test(want));
        assert_eq!(
            p(&["test", "-j", "1", "--filter=x"]).unwrap(),
            Cmd::Test(TestOpts {
                filter: Some("x".into()),
                jobs: NonZeroUsize::new(1),
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
    fn parses_profile() {
        assert_eq!(p(&["profile"]).unwrap(), Cmd::Profile);
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
            &["test", "-j0"],
            &["test", "--gdb"],
            &["clippy", "extra"],
            &["bench", "--tcg"],
            &["profile", "--quick"],
            &["mutants", "--shard", "4/4"],
            &["mutants", "--shard", "x"],
            &["mutants", "--timeout", "0"],
            &["mutants", "--tcg"],
        ] {
            assert!(p(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
