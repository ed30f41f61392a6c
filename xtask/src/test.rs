//! `cargo xtask test`: every test, ending with the line `N passed, N failed`.
//!
//! 1. Host unit tests: `cargo test -p kern -p baton-abi -p xtask`, then `kern`'s tests
//!    of allocation fault injection (`--features fault-inject --test fault_inject`),
//!    streamed, each `test result: ... X passed; Y failed; ...` line counted. All of them,
//!    whatever `--filter` says (it selects integration tests only); `--no-host` skips them.
//! 2. The images are built; a failed build counts as one failure and skips step 3.
//! 3. The integration tests of [`crate::tests`], up to `-j` at once, each in its own QEMU with
//!    its serial log in `target/test-logs/<name>.log`, judged by [`crate::judge`].
//!
//! Setup problems (missing Rust target or QEMU) and a host-test run that fails without a
//! counted test failure (a compile error) each count as one failure too, so the final line
//! always reflects everything that went wrong, and the exit status is non-zero when anything
//! failed.

use crate::build::{self, Images};
use crate::deps;
use crate::judge;
use crate::qemu::{self, Accel, Machine};
use crate::tests::{IntegrationTest, Typed, ALL};
use crate::workspace::{cargo, note, seconds, shell_line, target_dir};
use crate::TestOpts;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How many lines of a failed test's log are shown.
const LOG_TAIL_LINES: usize = 30;

/// Counts of passed and failed tests.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
}

impl Tally {
    /// Prints a failure that is not a single test's (setup, build) and counts it.
    fn fail(&mut self, what: &str, why: &str) {
        println!("FAIL {what}: {why}");
        self.failed += 1;
    }
}

/// Runs `cargo xtask test`.
pub fn test(opts: &TestOpts) -> Result<ExitCode, String> {
    let mut tally = Tally::default();
    let setup = deps::ensure_target().and_then(|()| deps::ensure_qemu());
    if let Err(e) = &setup {
        tally.fail("setup", e);
    }

    if opts.no_host {
        note("host unit tests skipped (--no-host)");
    } else {
        host_tests(&mut tally);
    }

    let selected = select(opts);
    let Ok(qemu) = setup else {
        println!(
            "skipped {} integration test(s) because of the setup failure",
            selected.len()
        );
        return Ok(finish(&tally));
    };
    let built = match opts.fault_inject {
        Some(_) => build::build_with(&build::KERNEL_FAULT_INJECT),
        None => build::build(),
    };
    match built {
        Ok(images) => {
            let jobs = opts.jobs.map_or_else(default_jobs, |n| n.get());
            let accel = qemu::choose_accel(opts.tcg, false);
            let run = Run {
                images: &images,
                qemu: &qemu,
                accel,
                fault_inject: opts.fault_inject,
            };
            integration_tests(&selected, &run, jobs, &mut tally);
        }
        Err(e) => {
            tally.fail("build", &e);
            println!(
                "skipped {} integration test(s) because the images did not build",
                selected.len()
            );
        }
    }
    Ok(finish(&tally))
}

/// Prints the final line and gives the exit status.
fn finish(tally: &Tally) -> ExitCode {
    println!("{} passed, {} failed", tally.passed, tally.failed);
    if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One test per CPU.
fn default_jobs() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// The integration tests that `--filter` and `--fault-inject` select, in [`ALL`]'s order.
fn select(opts: &TestOpts) -> Vec<&'static IntegrationTest> {
    ALL.iter()
        .filter(|t| {
            opts.filter.is_empty() || opts.filter.iter().any(|f| t.name.contains(f.as_str()))
        })
        // A test of the kernel's own failure path fails on purpose: not under injection.
        .filter(|t| opts.fault_inject.is_none() || t.outcome == crate::tests::Outcome::Clean)
        .collect()
}

/// `cargo xtask test --list`: the host test groups and the selected integration tests,
/// each with its CPUs and what it boots; nothing is built or run.
pub fn list(opts: &TestOpts) -> Result<ExitCode, String> {
    if opts.no_host {
        println!("host unit tests: skipped (--no-host)");
    } else {
        println!("host unit tests (all of them, whatever --filter says):");
        for cmd in host_test_commands() {
            println!("  {}", shell_line(&cmd));
        }
    }
    let selected = select(opts);
    let kernel = match opts.fault_inject {
        Some(n) => format!(" on the kernel with fault injection (failalloc={n})"),
        None => String::new(),
    };
    println!("integration tests ({}){kernel}:", selected.len());
    let width = selected.iter().map(|t| t.name.len()).max().unwrap_or(0);
    println!("  {:width$}  CPUS  BOOTS", "NAME");
    for t in selected {
        println!("  {:width$}  {:>4}  {}", t.name, t.smp, describe(t));
    }
    Ok(ExitCode::SUCCESS)
}

/// What a test boots, for `--list`: its kernel command line without `shutdown` (always
/// added), and how the boot must end when that is not a clean shutdown.
fn describe(t: &IntegrationTest) -> String {
    let extra: Vec<String> = t.extra.iter().map(|w| w.to_string()).collect();
    let mut line = qemu::cmdline(&t.init.join(","), false, &extra);
    if t.memory_mib != qemu::DEFAULT_MEMORY_MIB {
        line.push_str(&format!("  (-m {}M)", t.memory_mib));
    }
    if t.outcome == crate::tests::Outcome::KernelFailure {
        line.push_str("  (must end in a kernel failure)");
    }
    line
}

/// The host unit-test runs: all the host crates' tests, then the tests of `kern` built
/// with allocation fault injection (a test binary of their own, as they arm the global
/// injector).
fn host_test_commands() -> [std::process::Command; 2] {
    let mut all = cargo();
    all.args(["test", "--no-fail-fast"])
        .args(crate::workspace::HOST_PACKAGES);
    let mut fault_inject = cargo();
    fault_inject.args([
        "test",
        "--no-fail-fast",
        "-p",
        "kern",
        "--features",
        "fault-inject",
        "--test",
        "fault_inject",
    ]);
    [all, fault_inject]
}

/// Runs the host unit tests ([`host_test_commands`]), streaming their output, and counts
/// their results.
fn host_tests(tally: &mut Tally) {
    for cmd in host_test_commands() {
        host_test_run(cmd, tally);
    }
}

/// Runs one `cargo test` command for [`host_tests`].
fn host_test_run(mut cmd: std::process::Command, tally: &mut Tally) {
    note(format!("host unit tests: {}", shell_line(&cmd)));
    let start = Instant::now();
    let mut child = match cmd.stdout(Stdio::piped()).spawn() {
        Ok(child) => child,
        Err(e) => return tally.fail("host unit tests", &format!("could not start cargo: {e}")),
    };
    let (mut passed, mut failed) = (0, 0);
    if let Some(stdout) = child.stdout.take() {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        while reader.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
            let line = String::from_utf8_lossy(&buf);
            print!("{line}");
            if let Some((p, f)) = parse_result_line(&line) {
                passed += p;
                failed += f;
            }
            buf.clear();
        }
    }
    tally.passed += passed;
    tally.failed += failed;
    match child.wait() {
        Ok(status) if status.success() || failed > 0 => {}
        Ok(status) => tally.fail(
            "host unit tests",
            &format!("`cargo test` failed ({status}) with no failing test: see its errors above"),
        ),
        Err(e) => tally.fail("host unit tests", &format!("waiting for cargo: {e}")),
    }
    note(format!(
        "host unit tests: {passed} passed, {failed} failed ({})",
        seconds(start.elapsed())
    ));
}

/// `(passed, failed)` from a libtest summary line such as
/// `test result: ok. 12 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; ...`.
fn parse_result_line(line: &str) -> Option<(usize, usize)> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let count = |what: &str| {
        rest.split(';').find_map(|part| {
            let number = part.trim().strip_suffix(what)?.split_whitespace().last()?;
            number.parse::<usize>().ok()
        })
    };
    Some((count(" passed")?, count(" failed")?))
}

/// The result of one integration test.
struct Outcome {
    name: &'static str,
    elapsed: Duration,
    log: PathBuf,
    result: Result<(), String>,
}

/// What every integration test of a run boots with.
struct Run<'a> {
    images: &'a Images,
    qemu: &'a Path,
    accel: Accel,
    /// `failalloc=N` on the fault-injecting kernel, judged by [`judge::survived`].
    fault_inject: Option<u64>,
}

/// Runs `tests`, `jobs` at a time, printing each result as it comes.
fn integration_tests(tests: &[&IntegrationTest], run: &Run<'_>, jobs: usize, tally: &mut Tally) {
    if tests.is_empty() {
        note("no integration test matches the filter");
        return;
    }
    let logs = target_dir().join("test-logs");
    if let Err(e) = fs::create_dir_all(&logs) {
        return tally.fail(
            "integration tests",
            &format!("cannot create {}: {e}", logs.display()),
        );
    }
    let jobs = jobs.clamp(1, tests.len());
    note(format!(
        "running {} integration test(s), up to {jobs} at a time",
        tests.len()
    ));
    let next = AtomicUsize::new(0);
    let (sender, receiver) = mpsc::channel();
    thread::scope(|scope| {
        for _ in 0..jobs {
            let (sender, next, logs) = (sender.clone(), &next, &logs);
            scope.spawn(move || {
                while let Some(test) = tests.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let outcome = run_one(test, run, logs);
                    if sender.send(outcome).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);
        for outcome in receiver {
            report(&outcome, tally);
        }
    });
}

/// Prints one test's result; on failure also its log's path and tail.
fn report(outcome: &Outcome, tally: &mut Tally) {
    let secs = outcome.elapsed.as_secs_f64();
    match &outcome.result {
        Ok(()) => {
            println!("PASS {} ({secs:.1}s)", outcome.name);
            tally.passed += 1;
        }
        Err(why) => {
            println!("FAIL {}: {why}", outcome.name);
            println!("    log ({secs:.1}s): {}", outcome.log.display());
            let text = fs::read(&outcome.log).unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines
                .get(lines.len().saturating_sub(LOG_TAIL_LINES)..)
                .unwrap_or_default();
            for line in tail {
                println!("    | {line}");
            }
            tally.failed += 1;
        }
    }
}

/// Boots QEMU for `test`, its serial output (and QEMU's own messages) going to its log, and
/// judges the result. The log ends with a trailer giving the QEMU command and how it ended.
fn run_one(test: &IntegrationTest, run: &Run<'_>, logs: &Path) -> Outcome {
    let log = logs.join(format!("{}.log", test.name));
    let start = Instant::now();
    let mut trailer = String::new();
    let result = boot_and_judge(test, run, &log, &mut trailer);
    let elapsed = start.elapsed();
    let tail = format!(
        "\n---- xtask: {} after {:.1}s ----\n{trailer}",
        match &result {
            Ok(()) => "PASS".to_string(),
            Err(why) => format!("FAIL: {why}"),
        },
        elapsed.as_secs_f64()
    );
    if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(&log) {
        // The trailer is a convenience; the result does not depend on it.
        let _ = file.write_all(tail.as_bytes());
    }
    Outcome {
        name: test.name,
        elapsed,
        log,
        result,
    }
}

/// The part of [`run_one`] that can fail; `trailer` collects lines for the end of the log.
fn boot_and_judge(
    test: &IntegrationTest,
    run: &Run<'_>,
    log: &Path,
    trailer: &mut String,
) -> Result<(), String> {
    let (images, qemu, accel) = (run.images, run.qemu, run.accel);
    let file = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    if let Some(missing) = test
        .init
        .iter()
        .find(|p| !images.programs.iter().any(|q| q == *p))
    {
        return Err(format!(
            "program `{missing}` is not in the initrd (no user/programs/src/bin/{missing}.rs)"
        ));
    }
    let machine = Machine {
        images,
        accel: if test.icount { Accel::Tcg } else { accel },
        smp: test.smp,
        cmdline: qemu::cmdline(
            &test.init.join(","),
            true,
            &test
                .extra
                .iter()
                .map(|w| w.to_string())
                .chain(run.fault_inject.map(|n| format!("failalloc={n}")))
                .collect::<Vec<_>>(),
        ),
        icount: test.icount,
        gdb: None,
        disk: if test.disk {
            Some(crate::disk::fresh(test.name)?)
        } else {
            None
        },
    };
    if !test.disk_prepare.is_empty() {
        prepare_disk(test, run, &machine, log, trailer)?;
    }
    let mut cmd = machine.sized_command(qemu, test.memory_mib);
    trailer.push_str(&format!("qemu command: {}\n", shell_line(&cmd)));
    let stderr = file
        .try_clone()
        .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
    let typing = !test.input.is_empty();
    cmd.stdin(if typing {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(file)
    .stderr(stderr);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", qemu.display()))?;
    if let (true, Some(stdin)) = (typing, child.stdin.take()) {
        let (log, deadline) = (log.to_path_buf(), Instant::now() + test.timeout);
        let (prompt, input) = (test.prompt, test.input);
        // Detached: it stops at the last line, at the deadline, or when QEMU is gone.
        thread::spawn(move || type_input(stdin, &log, prompt, input, deadline));
    }
    let status = wait_or_fail_fast(&mut child, test.timeout, log)?;
    trailer.push_str(&format!(
        "qemu: {}\n",
        match status {
            Waited::Exited(s) => s.to_string(),
            Waited::Failed => format!("killed {}s after a `{FAILED}` line", GRACE.as_secs()),
            Waited::TimedOut => "killed at the timeout".to_string(),
        }
    ));
    let code = match status {
        Waited::Exited(s) => s.code(),
        // The judge reports the `TEST FAIL` line (and that QEMU did not exit by itself).
        Waited::Failed => None,
        Waited::TimedOut => return Err(format!("timeout after {}s", test.timeout.as_secs())),
    };
    let text = fs::read(log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
    let mut text = String::from_utf8_lossy(&text).into_owned();
    // Where each user fault was, from the programs' line tables; part of what is judged.
    let faults = crate::symbolize::annotate(&text);
    if !faults.is_empty() {
        if let Ok(mut file) = OpenOptions::new().append(true).open(log) {
            let _ = file.write_all(faults.as_bytes());
        }
        text.push_str(&faults);
    }
    match run.fault_inject {
        Some(_) => judge::survived(code, &text),
        None => judge::judge(test, code, &text),
    }
}

/// Boots `test.disk_prepare` on `machine`'s disk image (a boot of its own, logged to
/// `<name>.prepare.log` beside `log`), which must end cleanly with a `TEST PASS` line and
/// no `TEST FAIL`.
fn prepare_disk(
    test: &IntegrationTest,
    run: &Run<'_>,
    machine: &Machine<'_>,
    log: &Path,
    trailer: &mut String,
) -> Result<(), String> {
    let plog = log.with_extension("prepare.log");
    let file = File::create(&plog).map_err(|e| format!("cannot create {}: {e}", plog.display()))?;
    let words: Vec<String> = test.extra.iter().map(|w| w.to_string()).collect();
    let first = Machine {
        images: machine.images,
        accel: machine.accel,
        smp: machine.smp,
        cmdline: qemu::cmdline(&test.disk_prepare.join(","), true, &words),
        icount: false,
        gdb: None,
        disk: machine.disk.clone(),
    };
    let mut cmd = first.sized_command(run.qemu, test.memory_mib);
    trailer.push_str(&format!("first boot: {}\n", shell_line(&cmd)));
    let stderr = file
        .try_clone()
        .map_err(|e| format!("cannot share {}: {e}", plog.display()))?;
    cmd.stdin(Stdio::null()).stdout(file).stderr(stderr);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", run.qemu.display()))?;
    let status = wait_or_fail_fast(&mut child, test.timeout, &plog)?;
    let text = String::from_utf8_lossy(&fs::read(&plog).unwrap_or_default()).into_owned();
    match status {
        Waited::Exited(s) if s.code() == Some(qemu::EXIT_CLEAN) => {}
        _ => {
            return Err(format!(
                "the first boot did not end cleanly ({})",
                plog.display()
            ))
        }
    }
    if text.contains(FAILED) || !text.contains("TEST PASS") {
        return Err(format!("the first boot did not pass ({})", plog.display()));
    }
    Ok(())
}

/// The pause after each character [`type_input`] types: QEMU's 16550 takes input only
/// while its 16-byte receive FIFO has room, and a person types slower than this anyway.
pub const TYPE_DELAY: Duration = Duration::from_millis(8);

/// Types `input` into QEMU's standard input (the serial console): each [`Typed::Line`]
/// once the log holds `prompt` once more than the lines typed before, ended with a
/// carriage return, each [`Typed::After`] once the log holds its marker; gives up at
/// `deadline` or when QEMU no longer reads.
fn type_input(
    mut stdin: std::process::ChildStdin,
    log: &Path,
    prompt: &str,
    input: &[Typed],
    deadline: Instant,
) {
    let mut lines = 0;
    for step in input {
        // Wait until `marker` has appeared `needed` times, then type `keys`.
        let (marker, needed, keys): (&str, usize, Vec<u8>) = match *step {
            Typed::Line(line) => {
                lines += 1;
                (prompt, lines, line.bytes().chain([b'\r']).collect())
            }
            Typed::After(marker, keys) => (marker, 1, keys.bytes().collect()),
        };
        loop {
            if Instant::now() >= deadline {
                return;
            }
            if fs::read(log).is_ok_and(|text| count(&text, marker.as_bytes()) >= needed) {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        for b in keys {
            if stdin.write_all(&[b]).and_then(|()| stdin.flush()).is_err() {
                return;
            }
            thread::sleep(TYPE_DELAY);
        }
    }
}

/// How many times `what` (not empty) occurs in `text`.
fn count(text: &[u8], what: &[u8]) -> usize {
    if what.is_empty() {
        return 0;
    }
    text.windows(what.len()).filter(|w| *w == what).count()
}

/// A line that fails a test wherever it appears, after which a boot is not waited for to
/// its end: a test program that failed often leaves its servers running, and QEMU would
/// only stop at the test's timeout.
const FAILED: &str = "TEST FAIL";
/// How long output is still collected after a [`FAILED`] line.
const GRACE: Duration = Duration::from_secs(1);

/// How a test's boot ended.
#[derive(Clone, Copy, Debug)]
enum Waited {
    /// QEMU exited.
    Exited(ExitStatus),
    /// A [`FAILED`] line appeared in the log; QEMU was killed [`GRACE`] later.
    Failed,
    /// QEMU was killed at the timeout.
    TimedOut,
}

/// Waits for `child` (whose serial output goes to `log`) to exit, killing it at `timeout`,
/// or [`GRACE`] after a [`FAILED`] line shows up in the log.
fn wait_or_fail_fast(child: &mut Child, timeout: Duration, log: &Path) -> Result<Waited, String> {
    let deadline = Instant::now() + timeout;
    let mut failed_at: Option<Instant> = None;
    let mut next_look = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(Waited::Exited(status)),
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                return Err(format!("waiting for qemu: {e}"));
            }
        }
        let now = Instant::now();
        let give_up = match failed_at {
            Some(t) => (now >= t + GRACE).then_some(Waited::Failed),
            None => (now >= deadline).then_some(Waited::TimedOut),
        };
        if let Some(why) = give_up {
            // It may have exited just now; either way, reap it.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(why);
        }
        if failed_at.is_none() && now >= next_look {
            next_look = now + Duration::from_millis(250);
            if fs::read(log).is_ok_and(|text| contains_failure(&text)) {
                failed_at = Some(now);
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Whether serial output `text` has a [`FAILED`] line.
fn contains_failure(text: &[u8]) -> bool {
    text.windows(FAILED.len()).any(|w| w == FAILED.as_bytes())
}

/// Waits for `child` to exit, killing it at `timeout` (then `None`).
pub(crate) fn wait_with_timeout(
    child: &mut Child,
    timeout: Duration,
) -> Result<Option<ExitStatus>, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(Some(status)),
            Ok(None) if Instant::now() >= deadline => {
                // It may have exited just now; either way, reap it.
                let _ = child.kill();
                let _ = child.wait();
                return Ok(None);
            }
            Ok(None) => thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                let _ = child.kill();
                return Err(format!("waiting for qemu: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    /// `--filter` given twice selects the tests matching either, in the table's order.
    #[test]
    fn filters_combine_as_any() {
        let one = |f: &str| {
            select(&TestOpts {
                filter: vec![f.into()],
                ..TestOpts::default()
            })
            .len()
        };
        let both = select(&TestOpts {
            filter: vec!["hostile".into(), "names".into()],
            ..TestOpts::default()
        });
        assert!(one("hostile") > 0 && one("names") > 0);
        let overlap = ALL
            .iter()
            .filter(|t| t.name.contains("hostile") && t.name.contains("names"))
            .count();
        assert_eq!(both.len(), one("hostile") + one("names") - overlap);
        assert!(both
            .iter()
            .all(|t| t.name.contains("hostile") || t.name.contains("names")));
        assert_eq!(select(&TestOpts::default()).len(), ALL.len());
    }

    #[test]
    fn counts_prompts() {
        assert_eq!(count(b"baton> ps\nbaton> ", b"baton> "), 2);
        assert_eq!(count(b"", b"baton> "), 0);
        assert_eq!(count(b"abc", b""), 0);
    }

    #[test]
    fn sees_a_failure_line() {
        assert!(contains_failure(b"x\nprog#1| TEST FAIL prog: it broke\n"));
        assert!(!contains_failure(
            b"x\nprog#1| TEST PASS prog\n[kernel] all tasks finished\n"
        ));
        assert!(!contains_failure(b"TEST FAI"));
        assert!(!contains_failure(b""));
    }

    #[test]
    fn parses_libtest_summaries() {
        let ok = "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; \
                  finished in 0.01s";
        assert_eq!(parse_result_line(ok), Some((12, 0)));
        let failed =
            "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out";
        assert_eq!(parse_result_line(failed), Some((3, 2)));
        assert_eq!(parse_result_line("test foo ... ok"), None);
        assert_eq!(parse_result_line("running 3 tests"), None);
    }
}
