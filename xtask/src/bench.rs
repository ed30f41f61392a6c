//! `cargo xtask bench`: boots the `bench` program under QEMU with `-icount` and writes the
//! results.
//!
//! 1. The images are built as for `run`.
//! 2. QEMU boots `init=bench shutdown` with TCG, `-icount shift=0,align=off,sleep=off` and
//!    one CPU: the guest's time-stamp counter then advances exactly once per instruction,
//!    so the program's `rdtsc` deltas are exact instruction counts. The serial log goes to
//!    `results/bench.log` (a file, never a pipe, so that a slow reader cannot change the
//!    guest's timing). A second boot with two CPUs (`results/bench.smp2.log`) runs the
//!    cross-CPU benchmarks; there the TSC counts the instructions of both CPUs, which
//!    QEMU runs in turn on one host thread.
//! 3. The log must show a clean shutdown (QEMU status 33), `BENCH done`, and no
//!    `TEST FAIL`, `PANIC` or `KERNEL EXCEPTION`; its `BENCH` and `BENCHSTAT` lines are
//!    parsed.
//! 4. Without `--quick` the image is booted a second time (`results/bench.2.log`) and every
//!    figure must be the same to the instruction.
//! 5. `results/baton.json` (the machine-readable results) and `results/report.md` (the
//!    table, with reference figures) are written, and the table is printed.
//!
//! Cycles under hardware KVM are not measured yet; where KVM is available this says so.
//! The schema and the benchmarks are documented in `docs/benchmarks.md`.

use crate::build::{self, Images};
use crate::deps;
use crate::judge::FORBIDDEN;
use crate::qemu::{self, Accel, Machine, EXIT_CLEAN};
use crate::workspace::{command, note, root, shell_line};
use crate::BenchOpts;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

/// QEMU is killed, and the benchmark fails, after this long.
const TIMEOUT: Duration = Duration::from_secs(300);
/// The program's last line when every benchmark ran.
const DONE: &str = "BENCH done";
/// What `cpu` says in the JSON: the metric's machine.
const CPU: &str = "QEMU TCG -icount shift=0";
/// How many lines of a failed run's log are shown.
const LOG_TAIL_LINES: usize = 20;

/// seL4's thread yield to another thread, measured in instructions the same way
/// (sel4bench's scheduler benchmark): the target for `sched.yield.switch`.
const SEL4_YIELD: u64 = 272;
/// The continuations paper, Table 4 (MK40 and MK32 on the DS3100): instructions of a
/// stack handoff and of a full context switch.
const PAPER_HANDOFF: u64 = 83;
/// See [`PAPER_HANDOFF`].
const PAPER_SWITCH: u64 = 250;

/// One `BENCH` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Dotted name, e.g. `sched.yield.switch`.
    pub name: String,
    /// Unit of the figures (`instructions`).
    pub unit: String,
    /// Recorded iterations.
    pub iterations: u64,
    /// Lower median of the per-iteration figures.
    pub median: u64,
    /// Smallest per-iteration figure.
    pub min: u64,
    /// Largest per-iteration figure.
    pub max: u64,
}

/// One `BENCHSTAT` line: how the kernel's counters changed over the recorded iterations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Dotted name of the benchmark.
    pub name: String,
    /// Stack handoffs.
    pub handoffs: u64,
    /// Full context switches (`switch_context`).
    pub switches: u64,
    /// Stacks discarded.
    pub discards: u64,
    /// Continuations recognised.
    pub recognitions: u64,
}

/// Everything one run printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Results {
    /// The `BENCH` lines, in order.
    pub rows: Vec<Row>,
    /// The `BENCHSTAT` lines, in order.
    pub paths: Vec<Paths>,
    /// Whether `BENCH done` appeared.
    pub done: bool,
}

/// What the results were measured with.
struct Meta {
    /// First line of `qemu-system-x86_64 --version`.
    qemu: String,
    /// `git rev-parse --short HEAD`, `-dirty` if the tree has changes.
    commit: String,
}

/// Runs `cargo xtask bench`.
pub fn bench(opts: &BenchOpts) -> Result<ExitCode, String> {
    deps::ensure_target()?;
    let qemu = deps::ensure_qemu()?;
    if let Some(module) = hardware_kvm() {
        note(format!(
            "hardware KVM is available ({module}), but the cycles metric (this image under \
             -enable-kvm) is not implemented yet: measuring instructions under TCG -icount only"
        ));
    }
    let images = build::build()?;
    if !images.programs.iter().any(|p| p == "bench") {
        return Err("the initrd has no `bench` program (user/programs/src/bin/bench.rs)".into());
    }
    let dir = root().join("results");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;

    let first = boot_all(&images, &qemu, &dir, "")?;
    let second = if opts.quick {
        None
    } else {
        Some(boot_all(&images, &qemu, &dir, ".2")?)
    };

    let meta = Meta {
        qemu: qemu_version(&qemu),
        commit: git_commit(),
    };
    let json = dir.join("baton.json");
    fs::write(&json, to_json(&meta, &first.rows))
        .map_err(|e| format!("cannot write {}: {e}", json.display()))?;
    let table = table(&first);
    let report = dir.join("report.md");
    fs::write(&report, report_md(&meta, &first, &table, second.is_some()))
        .map_err(|e| format!("cannot write {}: {e}", report.display()))?;
    println!("{table}");
    note(format!(
        "wrote {}, {} and {}",
        dir.join("bench.log").display(),
        json.display(),
        report.display()
    ));

    if let Some(second) = second {
        compare(&first, &second)?;
        note("two runs gave identical instruction counts for every benchmark");
    }
    Ok(ExitCode::SUCCESS)
}

/// The loaded hardware KVM module, if `/dev/kvm` is real hardware virtualization.
fn hardware_kvm() -> Option<&'static str> {
    if qemu::tcg_forced_by_env() || !Path::new("/dev/kvm").exists() {
        return None;
    }
    ["kvm_intel", "kvm_amd"]
        .into_iter()
        .find(|m| Path::new("/sys/module").join(m).exists())
}

/// CPU counts the image is booted with: the program runs the one-CPU benchmarks on one
/// CPU and the cross-CPU ones (`*.cross`) on two.
const SMP: [u32; 2] = [1, 2];

/// Boots the benchmark image once per entry of [`SMP`], logging to `bench<tag>.log` and
/// `bench<tag>.smp2.log` in `dir`, and joins the results.
fn boot_all(images: &Images, qemu: &Path, dir: &Path, tag: &str) -> Result<Results, String> {
    let mut all = Results {
        done: true,
        ..Results::default()
    };
    for smp in SMP {
        let name = match smp {
            1 => format!("bench{tag}.log"),
            n => format!("bench{tag}.smp{n}.log"),
        };
        let r = boot(images, qemu, &dir.join(name), smp)?;
        all.rows.extend(r.rows);
        all.paths.extend(r.paths);
        all.done &= r.done;
    }
    Ok(all)
}

/// Boots the benchmark image once with `smp` CPUs, its serial output going to `log`, and
/// parses the log.
fn boot(images: &Images, qemu: &Path, log: &Path, smp: u32) -> Result<Results, String> {
    let machine = Machine {
        images,
        accel: Accel::Tcg,
        smp,
        cmdline: qemu::cmdline("bench", true, &[]),
        icount: true,
        gdb: false,
    };
    let mut cmd = machine.command(qemu);
    note(format!("$ {}", shell_line(&cmd)));
    let file = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let stderr = file
        .try_clone()
        .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(file).stderr(stderr);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", qemu.display()))?;
    let status = crate::test::wait_with_timeout(&mut child, TIMEOUT)?;
    let text = fs::read(log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
    let text = String::from_utf8_lossy(&text);
    let judged = match status {
        None => Err(format!("QEMU did not finish within {}s", TIMEOUT.as_secs())),
        Some(status) => judge(status.code(), &text),
    };
    match judged {
        Ok(results) => {
            note(format!(
                "{} benchmarks in {:.1}s ({})",
                results.rows.len(),
                start.elapsed().as_secs_f64(),
                log.display()
            ));
            Ok(results)
        }
        Err(why) => {
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines
                .get(lines.len().saturating_sub(LOG_TAIL_LINES)..)
                .unwrap_or_default();
            let mut msg = format!("the benchmark run failed: {why}\nlog: {}", log.display());
            for line in tail {
                msg.push_str("\n    | ");
                msg.push_str(line);
            }
            Err(msg)
        }
    }
}

/// Checks a finished run (QEMU's exit status and the serial log) and parses its results.
fn judge(exit: Option<i32>, log: &str) -> Result<Results, String> {
    let mut problems = Vec::new();
    if exit != Some(EXIT_CLEAN) {
        problems.push(format!(
            "the kernel did not shut down cleanly ({})",
            qemu::explain_exit(exit)
        ));
    }
    for bad in FORBIDDEN {
        if let Some((n, line)) = log.lines().enumerate().find(|(_, l)| l.contains(bad)) {
            problems.push(format!("line {} contains `{bad}`: {}", n + 1, line.trim()));
        }
    }
    let results = parse(log);
    let results = match results {
        Ok(r) => Some(r),
        Err(e) => {
            problems.push(e);
            None
        }
    };
    match results {
        Some(r) if !r.done => problems.push(format!("`{DONE}` is missing")),
        Some(r) if r.rows.is_empty() => problems.push("no `BENCH` result line".into()),
        Some(r) if problems.is_empty() => return Ok(r),
        _ => {}
    }
    Err(problems.join("; "))
}

/// The program's output on a serial line: what follows the `<task>#<id>| ` prefix.
fn user_text(line: &str) -> &str {
    line.split_once("| ").map_or(line, |(_, rest)| rest)
}

/// Parses the `BENCH` and `BENCHSTAT` lines of a serial log.
pub fn parse(log: &str) -> Result<Results, String> {
    let mut results = Results::default();
    for (n, line) in log.lines().enumerate() {
        let text = user_text(line).trim_end();
        let bad = |why: String| format!("line {}: {why}: {}", n + 1, line.trim());
        if text == DONE {
            results.done = true;
        } else if let Some(fields) = text.strip_prefix("BENCH ") {
            let f = Fields::new(fields).map_err(bad)?;
            let row = Row {
                name: f.text("name").map_err(bad)?,
                unit: f.text("unit").map_err(bad)?,
                iterations: f.number("iterations").map_err(bad)?,
                median: f.number("median").map_err(bad)?,
                min: f.number("min").map_err(bad)?,
                max: f.number("max").map_err(bad)?,
            };
            if results.rows.iter().any(|r| r.name == row.name) {
                return Err(bad(format!("benchmark `{}` reported twice", row.name)));
            }
            results.rows.push(row);
        } else if let Some(fields) = text.strip_prefix("BENCHSTAT ") {
            let f = Fields::new(fields).map_err(bad)?;
            results.paths.push(Paths {
                name: f.text("name").map_err(bad)?,
                handoffs: f.number("handoffs").map_err(bad)?,
                switches: f.number("switches").map_err(bad)?,
                discards: f.number("discards").map_err(bad)?,
                recognitions: f.number("recognitions").map_err(bad)?,
            });
        }
    }
    Ok(results)
}

/// The `key=value` words of a result line.
struct Fields<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Fields<'a> {
    fn new(text: &'a str) -> Result<Fields<'a>, String> {
        text.split_whitespace()
            .map(|word| {
                word.split_once('=')
                    .ok_or_else(|| format!("`{word}` is not key=value"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Fields)
    }

    fn text(&self, key: &str) -> Result<String, String> {
        self.0
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
            .ok_or_else(|| format!("no `{key}=`"))
    }

    fn number(&self, key: &str) -> Result<u64, String> {
        let value = self.text(key)?;
        value
            .parse()
            .map_err(|_| format!("`{key}={value}` is not a whole number"))
    }
}

/// Checks that two runs agree to the instruction.
fn compare(first: &Results, second: &Results) -> Result<(), String> {
    compare_rows(
        &first.rows,
        &second.rows,
        "two runs of the same image",
        "results/bench.log and results/bench.2.log",
    )
}

/// Checks that two runs (`what`, logged in `logs`) gave the same rows to the instruction.
pub fn compare_rows(first: &[Row], second: &[Row], what: &str, logs: &str) -> Result<(), String> {
    let mut diffs = Vec::new();
    for a in first {
        match second.iter().find(|b| b.name == a.name) {
            Some(b) if b == a => {}
            Some(b) => diffs.push(format!(
                "{}: median {} / {}, min {} / {}, max {} / {}",
                a.name, a.median, b.median, a.min, b.min, a.max, b.max
            )),
            None => diffs.push(format!("{}: missing from the second run", a.name)),
        }
    }
    for b in second {
        if !first.iter().any(|a| a.name == b.name) {
            diffs.push(format!("{}: missing from the first run", b.name));
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{what} gave different instruction counts (first / second; logs {logs}):\n    {}",
            diffs.join("\n    ")
        ))
    }
}

/// First line of `qemu --version`.
fn qemu_version(qemu: &Path) -> String {
    command(qemu)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// `git rev-parse --short HEAD`, with `-dirty` when `git status --porcelain` lists changes.
fn git_commit() -> String {
    let git = |args: &[&str]| {
        command("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".to_string();
    };
    match git(&["status", "--porcelain"]) {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head}-dirty"),
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `results/baton.json`.
fn to_json(meta: &Meta, rows: &[Row]) -> String {
    let mut out = String::from("{\n");
    let _ = writeln!(out, "  \"metric\": \"instructions\",");
    let _ = writeln!(out, "  \"qemu\": {},", json_string(&meta.qemu));
    let _ = writeln!(out, "  \"commit\": {},", json_string(&meta.commit));
    let _ = writeln!(out, "  \"cpu\": {},", json_string(CPU));
    out.push_str("  \"benchmarks\": [");
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(
            out,
            "{}\n    {{\"name\": {}, \"unit\": {}, \"iterations\": {}, \"median\": {}, \
             \"min\": {}, \"max\": {}}}",
            if i == 0 { "" } else { "," },
            json_string(&r.name),
            json_string(&r.unit),
            r.iterations,
            r.median,
            r.min,
            r.max
        );
    }
    out.push_str(if rows.is_empty() {
        "]\n}\n"
    } else {
        "\n  ]\n}\n"
    });
    out
}

/// The median of the row called `name`.
fn median_of(results: &Results, name: &str) -> Option<u64> {
    results
        .rows
        .iter()
        .find(|r| r.name == name)
        .map(|r| r.median)
}

/// `a / b` with two decimals.
fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "n/a".to_string()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

/// The reference column of `row`: the paper's or a peer's figure, where one applies.
fn reference(results: &Results, row: &Row) -> String {
    match row.name.as_str() {
        "sched.yield.switch" => format!(
            "seL4 thread yield {SEL4_YIELD} (target: fewer): {}x seL4",
            ratio(row.median, SEL4_YIELD)
        ),
        "sched.pmodel.switch" => match median_of(results, "sched.yield.switch") {
            Some(handoff) => format!(
                "handoff vs switch_context: switch_context = {}x `sched.yield.switch` \
                 (paper Table 4: context switch {PAPER_SWITCH} vs stack handoff \
                 {PAPER_HANDOFF} instructions, {}x)",
                ratio(row.median, handoff),
                ratio(PAPER_SWITCH, PAPER_HANDOFF)
            ),
            None => String::new(),
        },
        "sched.pmodel.roundtrip" => match median_of(results, "sched.yield.roundtrip") {
            Some(handoff) => format!("{}x `sched.yield.roundtrip`", ratio(row.median, handoff)),
            None => String::new(),
        },
        _ => String::new(),
    }
}

/// The headline table (Markdown): one row per benchmark.
fn table(results: &Results) -> String {
    let floor = median_of(results, "floor.syscall.null");
    let mut out = String::from(
        "| benchmark | median | min | max | x null syscall | reference |\n\
         |---|---:|---:|---:|---:|---|\n",
    );
    for r in &results.rows {
        let multiple = match floor {
            Some(f) if !r.name.starts_with("floor.") => ratio(r.median, f),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {multiple} | {} |",
            r.name,
            r.median,
            r.min,
            r.max,
            reference(results, r)
        );
    }
    out
}

/// `count / iterations`, as an integer when it divides, else with two decimals.
fn per_iteration(count: u64, iterations: u64) -> String {
    if iterations == 0 {
        count.to_string()
    } else if count.is_multiple_of(iterations) {
        (count / iterations).to_string()
    } else {
        format!("{:.2}", count as f64 / iterations as f64)
    }
}

/// `results/report.md`.
fn report_md(meta: &Meta, results: &Results, table: &str, repeated: bool) -> String {
    let mut out = String::from("# Baton benchmarks\n\n");
    let _ = writeln!(
        out,
        "- metric: **instructions** (QEMU TCG, `-icount shift=0,align=off,sleep=off`, 1 CPU: \
         the guest TSC advances once per instruction)"
    );
    let _ = writeln!(out, "- cpu: {CPU}");
    let _ = writeln!(out, "- qemu: {}", meta.qemu);
    let _ = writeln!(out, "- commit: {}", meta.commit);
    let _ = writeln!(
        out,
        "- figures: per operation, median (lower), min and max over the recorded iterations; \
         the timestamps' own cost (`floor.rdtsc.overhead`) is included"
    );
    let _ = writeln!(
        out,
        "- repeatability: {}\n",
        if repeated {
            "checked: a second run gave the same count for every benchmark"
        } else {
            "not checked (`--quick`: one run)"
        }
    );
    out.push_str(table);
    if !results.paths.is_empty() {
        out.push_str(
            "\n## Kernel paths taken\n\nChanges of the kernel's counters per recorded \
             iteration (from `BENCHSTAT`).\n\n\
             | benchmark | handoffs | switches | discards | recognitions |\n\
             |---|---:|---:|---:|---:|\n",
        );
        for p in &results.paths {
            let n = results
                .rows
                .iter()
                .find(|r| r.name == p.name)
                .map_or(0, |r| r.iterations);
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                p.name,
                per_iteration(p.handoffs, n),
                per_iteration(p.switches, n),
                per_iteration(p.discards, n),
                per_iteration(p.recognitions, n)
            );
        }
    }
    out.push_str(
        "\nReproduce with `cargo xtask bench`; definitions in `docs/benchmarks.md`. Cycles \
         under hardware KVM are not measured yet.\n",
    );
    out
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    const LOG: &str = "\
[kernel] task 1 (bench) started
bench#1| BENCH name=floor.syscall.null unit=instructions iterations=1000 median=223 min=223 max=230
bench#1| BENCHSTAT name=floor.syscall.null handoffs=0 switches=0 discards=0 recognitions=0
bench#1| BENCH name=sched.yield.switch unit=instructions iterations=1000 median=1099 min=1099 max=1099
bench#1| BENCHSTAT name=sched.yield.switch handoffs=2000 switches=0 discards=0 recognitions=0
bench#1| BENCH name=sched.pmodel.switch unit=instructions iterations=1000 median=1036 min=1036 max=1036
bench#1| BENCH done
[kernel] task 1 (bench) exited with code 0
[kernel] all tasks finished; shutting down
";

    #[test]
    fn parses_results() {
        let r = parse(LOG).unwrap();
        assert!(r.done);
        assert_eq!(r.rows.len(), 3);
        assert_eq!(
            r.rows[0],
            Row {
                name: "floor.syscall.null".into(),
                unit: "instructions".into(),
                iterations: 1000,
                median: 223,
                min: 223,
                max: 230,
            }
        );
        assert_eq!(r.paths.len(), 2);
        assert_eq!(r.paths[1].handoffs, 2000);
        assert!(parse("x| BENCH name=a unit=i iterations=1 median=x min=1 max=1").is_err());
        assert!(parse("x| BENCH name=a unit=i iterations=1 min=1 max=1").is_err());
        assert!(parse("x| BENCHSTAT name=a handoffs=1").is_err());
    }

    #[test]
    fn judges_runs() {
        assert!(judge(Some(EXIT_CLEAN), LOG).is_ok());
        let err = judge(Some(35), LOG).unwrap_err();
        assert!(err.contains("did not shut down cleanly"), "{err}");
        let undone = LOG.replace("BENCH done", "");
        assert!(judge(Some(EXIT_CLEAN), &undone)
            .unwrap_err()
            .contains("`BENCH done` is missing"));
        let failed = format!("{LOG}bench#1| TEST FAIL bench: x\n");
        assert!(judge(Some(EXIT_CLEAN), &failed)
            .unwrap_err()
            .contains("TEST FAIL"));
    }

    #[test]
    fn compares_runs() {
        let a = parse(LOG).unwrap();
        assert!(compare(&a, &a).is_ok());
        let b = parse(&LOG.replace("median=1099", "median=1100")).unwrap();
        let err = compare(&a, &b).unwrap_err();
        assert!(
            err.contains("sched.yield.switch: median 1099 / 1100"),
            "{err}"
        );
    }

    #[test]
    fn writes_json_and_table() {
        let r = parse(LOG).unwrap();
        let meta = Meta {
            qemu: "QEMU emulator version 7.2.0 \"x\"".into(),
            commit: "abc1234-dirty".into(),
        };
        let json = to_json(&meta, &r.rows);
        assert!(json.contains("\"qemu\": \"QEMU emulator version 7.2.0 \\\"x\\\"\","));
        assert!(json.contains(
            "{\"name\": \"sched.yield.switch\", \"unit\": \"instructions\", \
             \"iterations\": 1000, \"median\": 1099, \"min\": 1099, \"max\": 1099}"
        ));
        assert!(json.trim_end().ends_with("]\n}"));
        assert_eq!(to_json(&meta, &[]).matches('[').count(), 1);
        let t = table(&r);
        assert!(
            t.contains("seL4 thread yield 272 (target: fewer): 4.04x seL4"),
            "{t}"
        );
        assert!(
            t.contains("switch_context = 0.94x `sched.yield.switch`"),
            "{t}"
        );
        assert!(
            t.contains("| `sched.yield.switch` | 1099 | 1099 | 1099 | 4.93 |"),
            "{t}"
        );
        let md = report_md(&meta, &r, &t, true);
        assert!(
            md.contains("| `sched.yield.switch` | 2 | 0 | 0 | 0 |"),
            "{md}"
        );
    }
}
