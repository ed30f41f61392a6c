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
use crate::workspace::{cargo, note, shell_line, target_dir};
use std::process::ExitCode;

/// The crates mutated, as `cargo -p` names: the kernel's machine-independent logic, the
/// system-call ABI and the IDL runtime (the code every server and client links).
pub const PACKAGES: [&str; 3] = ["kern", "baton-abi", "baton-idl-rt"];

/// Options of `mutants`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MutantsOpts {
    /// `--package P` (repeatable): only these crates; all of [`PACKAGES`] when empty.
    pub packages: Vec<String>,
    /// `--file GLOB` (repeatable): only mutants in these files.
    pub files: Vec<String>,
    /// `--shard K/N`: only the K-th of N equal parts of each crate's mutants.
    pub shard: Option<String>,
    /// `-j N`: mutants built and tested at once (default 1: each needs a build of its own).
    pub jobs: Option<usize>,
    /// `--timeout S`: seconds a mutant's tests may take (default: cargo-mutants' own,
    /// derived from the unmutated run).
    pub timeout: Option<u32>,
    /// `--list`: only list the mutants.
    pub list: bool,
    /// `--iterate`: skip the mutants the previous run (in the same output directory)
    /// caught, testing again only those that survived (e.g. after adding tests).
    pub iterate: bool,
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
        note(format!("mutants, {package}: {}", shell_line(&cmd)));
        let status = cmd
            .status()
            .map_err(|e| format!("could not start cargo mutants: {e}"))?;
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
