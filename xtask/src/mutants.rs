//! `cargo xtask mutants`: mutation testing of the host-tested crates with `cargo-mutants`.
//!
//! cargo-mutants changes one spot of the code at a time (a function body replaced by a
//! default value, an operator flipped, a condition negated, ...), builds the crate and runs
//! its tests. A *surviving* mutant is a change no test noticed: either a gap in the tests
//! or a change that cannot be observed (an equivalent mutant). `docs/testing.md` keeps the
//! list of the survivors and what was done about each.
//!
//! The crates are taken one at a time ([`PACKAGES`]), each tested by its own tests only,
//! in copies of the tree (never in place), and the results of each go to
//! `target/mutants/<package>/mutants.out` (cargo-mutants' own layout: `caught.txt`,
//! `missed.txt`, `timeout.txt`, `unviable.txt`, `outcomes.json`).

use crate::deps;
use crate::workspace::{cargo, note, shell_line, target_dir, Step};
use std::process::ExitCode;

/// The crates mutated, as `cargo -p` names: the kernel's machine-independent logic, the
/// system-call ABI and the IDL runtime (the code every server and client links).
pub const PACKAGES: [&str; 3] = ["kern", "baton-abi", "baton-idl-rt"];

/// Options of `mutants`.
#[derive(clap::Args, Debug, Default, PartialEq, Eq)]
pub struct MutantsOpts {
    /// Only this crate (repeatable); all of kern, baton-abi and baton-idl-rt by default.
    #[arg(short = 'p', long = "package", value_name = "NAME")]
    pub packages: Vec<String>,
    /// Only mutants in these files (repeatable).
    #[arg(short = 'f', long = "file", value_name = "GLOB")]
    pub files: Vec<String>,
    /// Only the K-th of N equal parts of each crate's mutants (K counts from 0).
    #[arg(long, value_name = "K/N", value_parser = shard)]
    pub shard: Option<String>,
    /// Mutants tested at once (default 1: each needs a build of its own).
    #[arg(short = 'j', long, value_name = "N", value_parser = crate::positive::<usize>)]
    pub jobs: Option<usize>,
    /// Seconds a mutant's tests may take (default: cargo-mutants' own, derived from the
    /// unmutated run).
    #[arg(long, value_name = "SECS", value_parser = crate::positive::<u32>)]
    pub timeout: Option<u32>,
    /// List the mutants, test nothing.
    #[arg(long)]
    pub list: bool,
    /// Test again only the mutants the previous run (in the same output directory) did not
    /// catch (e.g. after adding tests).
    #[arg(long)]
    pub iterate: bool,
}

/// Checks `--shard K/N`: K below N, counting from 0 (a clap value parser).
fn shard(s: &str) -> Result<String, String> {
    let ok = s.split_once('/').is_some_and(
        |(k, n)| matches!((k.parse::<u32>(), n.parse::<u32>()), (Ok(k), Ok(n)) if k < n),
    );
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "needs K/N with K below N (counting from 0), got `{s}`"
        ))
    }
}

/// Runs `cargo xtask mutants`.
pub fn mutants(opts: &MutantsOpts) -> Result<ExitCode, String> {
    deps::ensure_cargo_mutants()?;
    let packages: Vec<&str> = if opts.packages.is_empty() {
        PACKAGES.to_vec()
    } else {
        opts.packages.iter().map(String::as_str).collect()
    };
    for p in &packages {
        if !PACKAGES.contains(p) {
            return Err(format!(
                "`{p}` is not mutation-tested here; choose from {}",
                PACKAGES.join(", ")
            ));
        }
    }
    let mut failed = Vec::new();
    for package in packages {
        let out = target_dir().join("mutants").join(package);
        std::fs::create_dir_all(&out)
            .map_err(|e| format!("could not create {}: {e}", out.display()))?;
        let mut cmd = cargo();
        cmd.args(["mutants", "--package", package, "--no-shuffle"])
            // Each mutant is tested by its own crate's tests only.
            .arg("--test-workspace=false")
            .arg("--jobs")
            .arg(opts.jobs.unwrap_or(1).to_string())
            .arg("--output")
            .arg(&out);
        for f in &opts.files {
            cmd.args(["--file", f]);
        }
        if let Some(shard) = &opts.shard {
            cmd.args(["--shard", shard]);
        }
        if let Some(t) = opts.timeout {
            cmd.args(["--timeout", &t.to_string()]);
        }
        if opts.list {
            cmd.arg("--list");
        }
        if opts.iterate {
            cmd.arg("--iterate");
        }
        let step = Step::start_with(format!("mutants, {package}"), shell_line(&cmd));
        let status = step.finish(
            cmd.status()
                .map_err(|e| format!("could not start cargo mutants: {e}")),
        )?;
        // cargo-mutants exits 2 when some mutant survived, 3 on a timeout, 4 when the
        // unmutated tree already fails its tests: all of them are for the summary.
        if !status.success() {
            failed.push(format!("{package} ({status})"));
        }
        if !opts.list {
            note(format!(
                "mutants, {package}: surviving mutants in {}",
                out.join("mutants.out/missed.txt").display()
            ));
        }
    }
    if failed.is_empty() {
        note("mutants: every mutant was caught (or unviable)");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "mutants survived, timed out or the tests failed for: {}",
            failed.join(", ")
        );
        Ok(ExitCode::FAILURE)
    }
}
