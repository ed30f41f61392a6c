//! `cargo xtask fuzz`: the system-call fuzzer's soak (see `docs/fuzzing.md`).
//!
//! Each seed gets its own boot of the `fuzz` program, with its parameters passed as the
//! name of an empty boot module added to a copy of the initrd:
//! `fuzz=SEED:1:CALLS:tTHREADS[:xCLASSES][:v]` (the kernel has no argument mechanism; the
//! program finds the module with `module_info`). The serial log of each boot goes to
//! `target/fuzz-logs/seed-<S>.log`; the summary line of each seed gives its calls, the share
//! that succeeded, the kernel's counts before and after, and, when the kernel panicked or
//! the boot failed, the failure line and each fuzzing thread's last progress mark (`tT call
//! N`: the panic came after call N of thread T; `:v` prints every call).
//!
//! With more than one CPU, TCG runs multi-threaded (`-accel tcg,thread=multi`): one host
//! thread per guest CPU, so two CPUs really run at once (under `-icount` they take turns).
//!
//! A boot that prints nothing for 30 s, or outlives its time, is hung: each CPU's
//! registers and kernel backtrace are read through QEMU's gdb stub and appended to its log
//! before it is killed.

use crate::build::{self, Images};
use crate::deps;
use crate::initrd;
use crate::qemu::{self, Accel, Machine};
use crate::test::wait_with_timeout;
use crate::workspace::{note, target_dir};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Options of `fuzz`.
#[derive(clap::Args, Debug, PartialEq, Eq)]
pub struct FuzzOpts {
    /// Seeds to run.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = crate::positive::<u64>)]
    pub seeds: u64,
    /// Calls per seed.
    #[arg(long, value_name = "M", default_value_t = 100_000, value_parser = crate::positive::<u64>)]
    pub calls: u64,
    /// Number of CPUs.
    #[arg(long, value_name = "K", default_value_t = 2, value_parser = crate::positive::<u32>)]
    pub smp: u32,
    /// First seed.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub first_seed: u64,
    /// Fuzzing threads.
    #[arg(long, value_name = "T", default_value_t = 3, value_parser = crate::positive::<u64>)]
    pub threads: u64,
    /// Call classes to leave out (docs/fuzzing.md).
    #[arg(
        long,
        value_name = "LETTERS",
        default_value = "",
        hide_default_value = true
    )]
    pub exclude: String,
    /// The program prints every call (to place a panic exactly).
    #[arg(long)]
    pub verbose: bool,
}

impl Default for FuzzOpts {
    fn default() -> FuzzOpts {
        FuzzOpts {
            seeds: 10,
            calls: 100_000,
            smp: 2,
            first_seed: 1,
            threads: 3,
            exclude: String::new(),
            verbose: false,
        }
    }
}

/// The boot-module name that carries one seed's parameters.
pub fn module_name(opts: &FuzzOpts, seed: u64) -> String {
    let mut name = format!("fuzz={seed}:1:{}:t{}", opts.calls, opts.threads);
    if !opts.exclude.is_empty() {
        name.push_str(&format!(":x{}", opts.exclude));
    }
    if opts.verbose {
        name.push_str(":v");
    }
    name
}

/// What one seed's log says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// `fuzz: seed S: N calls, K succeeded (P%)`, if it got that far.
    pub calls: Option<String>,
    /// The before and after count lines.
    pub before: Option<String>,
    pub after: Option<String>,
    /// The first line with `PANIC`, `KERNEL EXCEPTION`, `TEST FAIL`, `KERNEL LEAK`, or a
    /// wake the kernel refused or a stale timer it skipped.
    pub failure: Option<String>,
    /// Each fuzzing thread's last progress mark (`tT call N`).
    pub last_calls: Vec<String>,
    /// `TEST PASS` seen.
    pub passed: bool,
}

/// Reads a seed's serial log.
pub fn read_log(log: &str, seed: u64) -> SeedReport {
    let mut r = SeedReport::default();
    let mark = format!("fuzz: seed {seed} t");
    for line in log.lines() {
        if r.failure.is_none()
            && [
                "PANIC",
                "KERNEL EXCEPTION",
                "TEST FAIL",
                crate::judge::KERNEL_LEAK,
                // A wake the kernel refused (of a thread not blocked) or a timer entry it
                // skipped (one its thread no longer held): a kernel path woke a thread it
                // did not hold, which, unrefused, runs a thread on two CPUs at once.
                "[kernel] wake refused",
                "[kernel] stale timer",
            ]
            .iter()
            .any(|bad| line.contains(bad))
        {
            r.failure = Some(line.trim().to_string());
        }
        if let Some(at) = line.find(&mark) {
            let rest = &line[at + mark.len() - 1..];
            let thread = rest.split_whitespace().next().unwrap_or("");
            let short: String = rest
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ");
            match r
                .last_calls
                .iter_mut()
                .find(|c| c.split_whitespace().next() == Some(thread))
            {
                Some(c) => *c = short,
                None => r.last_calls.push(short),
            }
        }
        let after_prefix = |what: &str| {
            line.find(&format!("fuzz: seed {seed}: {what}"))
                .map(|at| line[at..].to_string())
        };
        if let Some(l) = after_prefix("before:") {
            r.before = Some(l);
        }
        if let Some(l) = after_prefix("after:") {
            r.after = Some(l);
        }
        if line.contains(&format!("fuzz: seed {seed}: ")) && line.contains(" calls, ") {
            r.calls = after_prefix("").or(r.calls.take());
        }
        if line.contains("TEST PASS fuzz") {
            r.passed = true;
        }
    }
    r.last_calls.sort();
    r
}

/// Runs `cargo xtask fuzz`.
pub fn fuzz(opts: &FuzzOpts) -> Result<ExitCode, String> {
    deps::ensure_target()?;
    let qemu_path = deps::ensure_qemu()?;
    let images = build::build()?;
    let dir = target_dir().join("fuzz-logs");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let files: Vec<(String, PathBuf)> = images
        .programs
        .iter()
        .map(|p| (p.clone(), build::USER.out_dir().join(p)))
        .collect();
    let empty = dir.join("empty");
    fs::write(&empty, b"").map_err(|e| format!("cannot write {}: {e}", empty.display()))?;
    // Generous: TCG runs about 5,000 calls a second on one CPU.
    let timeout = Duration::from_secs(60 + opts.calls / 1000);
    let mut failed = Vec::new();
    let (mut total_calls, started) = (0u64, Instant::now());
    for (k, seed) in (opts.first_seed..opts.first_seed.saturating_add(opts.seeds)).enumerate() {
        let mut with_args = files.clone();
        with_args.push((module_name(opts, seed), empty.clone()));
        let initrd_path = dir.join("initrd.tar");
        initrd::write(&initrd_path, &with_args)?;
        let boot = Images {
            kernel: images.kernel.clone(),
            initrd: initrd_path,
            programs: images.programs.clone(),
        };
        let log = dir.join(format!("seed-{seed}.log"));
        // The line that ends the seed (`PASS seed S (12.3s): ...`) says how long it took.
        note(format!(
            "fuzz: seed {seed} ({} of {}): booting, log {}",
            k + 1,
            opts.seeds,
            log.display()
        ));
        let (exit, elapsed) = boot_one(&boot, &qemu_path, opts.smp, &log, timeout)?;
        let text = String::from_utf8_lossy(&fs::read(&log).unwrap_or_default()).into_owned();
        let r = read_log(&text, seed);
        let ok = r.passed && r.failure.is_none() && exit == Some(qemu::EXIT_CLEAN);
        if let Some(calls) = r.calls.as_deref() {
            total_calls += calls
                .split(": ")
                .nth(2)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
        println!(
            "{} seed {seed} ({:.1}s): {}",
            if ok { "PASS" } else { "FAIL" },
            elapsed.as_secs_f64(),
            r.calls.as_deref().unwrap_or("no call count")
        );
        for l in [&r.before, &r.after].into_iter().flatten() {
            println!("    {l}");
        }
        if !ok {
            println!(
                "    {}",
                r.failure.as_deref().unwrap_or(&qemu::explain_exit(exit))
            );
            println!("    last progress marks: {}", r.last_calls.join(", "));
            println!("    log: {}", log.display());
            failed.push(seed);
        }
    }
    println!(
        "{} seeds, {} failed{}; {total_calls} calls in {:.0}s",
        opts.seeds,
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                failed
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        started.elapsed().as_secs_f64()
    );
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Boots one seed under TCG (multi-threaded with more than one CPU); returns QEMU's exit
/// status (`None` when killed at the timeout) and how long it took.
fn boot_one(
    images: &Images,
    qemu_path: &Path,
    smp: u32,
    log: &Path,
    timeout: Duration,
) -> Result<(Option<i32>, Duration), String> {
    let machine = Machine {
        images,
        accel: Accel::Tcg,
        smp,
        cmdline: qemu::cmdline("fuzz", true, &[]),
        icount: false,
        gdb: None,
        disk: None,
    };
    let base = machine.command(qemu_path);
    let mut cmd = Command::new(base.get_program());
    cmd.current_dir(crate::workspace::root());
    let mut after_accel = false;
    for arg in base.get_args() {
        if after_accel && arg == "tcg" && smp > 1 {
            cmd.arg("tcg,thread=multi");
        } else {
            cmd.arg(arg);
        }
        after_accel = arg == "-accel";
    }
    let file = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let stderr = file
        .try_clone()
        .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
    // A gdb stub (the CPUs run at once, unlike `cargo xtask run --gdb`): if the boot hangs,
    // every CPU's kernel stack goes into the log before QEMU is killed.
    let port = gdb_port(log);
    cmd.arg("-gdb").arg(format!("tcp:127.0.0.1:{port}"));
    cmd.stdin(Stdio::null()).stdout(file).stderr(stderr);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", qemu_path.display()))?;
    let status = wait_watching(&mut child, log, timeout, images, port)?;
    Ok((status.and_then(|s| s.code()), start.elapsed()))
}

/// How long a boot may print nothing before it counts as hung (the program marks its
/// progress every 2,000 calls, many times a second).
const STALL: Duration = Duration::from_secs(30);

/// A TCP port for one boot's gdb stub, chosen from the log's name and the process id so
/// that two soaks at once do not collide.
fn gdb_port(log: &Path) -> u16 {
    let h = log
        .to_string_lossy()
        .bytes()
        .fold(u32::from(std::process::id() as u16), |h, b| {
            h.wrapping_mul(31).wrapping_add(u32::from(b))
        });
    20_000 + (h % 20_000) as u16
}

/// Waits for `child` (writing `log`) to end, for at most `timeout`; a boot that prints
/// nothing for [`STALL`] is hung. A hung boot or one past its time gets every CPU's
/// backtrace appended to its log (through its gdb stub on `port`, when gdb is installed)
/// and is killed (`None`).
fn wait_watching(
    child: &mut std::process::Child,
    log: &Path,
    timeout: Duration,
    images: &Images,
    port: u16,
) -> Result<Option<std::process::ExitStatus>, String> {
    let deadline = Instant::now() + timeout;
    let (mut size, mut since) = (0u64, Instant::now());
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("waiting for qemu: {e}"))?
        {
            return Ok(Some(status));
        }
        let now_size = fs::metadata(log).map(|m| m.len()).unwrap_or(0);
        if now_size != size {
            (size, since) = (now_size, Instant::now());
        }
        if Instant::now() >= deadline || since.elapsed() >= STALL {
            let why = if since.elapsed() >= STALL {
                format!("no output for {} s", STALL.as_secs())
            } else {
                format!("still running after {} s", timeout.as_secs())
            };
            dump_stacks(log, images, port, &why);
            // A second look: the first may catch a CPU holding the kernel lock for a
            // moment (then the kernel prints no thread report); a CPU found holding it in
            // the same place twice holds it for good.
            std::thread::sleep(Duration::from_secs(2));
            dump_stacks(log, images, port, "the same, 2 s later");
            return wait_with_timeout(child, Duration::ZERO);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Appends to `log` the hang's reason and, through the gdb stub on `port`, each CPU's
/// registers and backtrace (symbols from the kernel image), then has the kernel print its
/// threads (what each waits on). Best effort: without gdb it says so.
fn dump_stacks(log: &Path, images: &Images, port: u16, why: &str) {
    use std::io::Write;
    let mut text = format!("\n---- xtask fuzz: hang ({why}); each CPU's stack ----\n");
    let out = Command::new("timeout")
        .arg("60")
        .arg("gdb")
        .args(["-q", "-batch", "-nx"])
        .arg("-ex")
        .arg(format!("file {}", images.kernel.display()))
        .arg("-ex")
        .arg(format!("target remote 127.0.0.1:{port}"))
        .args(["-ex", "info threads"])
        .args(["-ex", "thread apply all info registers rip rsp cr3"])
        .args(["-ex", "thread apply all bt 40"])
        // The kernel's own report of its threads (`kernel/src/debugger.rs`), on the serial
        // line and so in this log, after the stacks.
        .args(["-ex", "set language c"])
        .args(["-ex", "call (void)baton_debug_threads()"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) => {
            text.push_str(&String::from_utf8_lossy(&o.stdout));
            text.push_str(&String::from_utf8_lossy(&o.stderr));
        }
        Err(e) => text.push_str(&format!("(gdb could not run: {e})\n")),
    }
    if let Ok(mut f) = fs::OpenOptions::new().append(true).open(log) {
        let _ = f.write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn module_names() {
        let mut o = FuzzOpts {
            calls: 5000,
            threads: 2,
            ..FuzzOpts::default()
        };
        assert_eq!(module_name(&o, 7), "fuzz=7:1:5000:t2");
        o.exclude = "ak".into();
        o.verbose = true;
        assert_eq!(module_name(&o, 7), "fuzz=7:1:5000:t2:xak:v");
    }

    #[test]
    fn reads_a_log_with_a_panic() {
        let log = "fuzz#1| fuzz: seed 3: before: threads=1\n\
                   fuzz#2| fuzz: seed 3 t0 call 0\n\
                   fuzz#2| fuzz: seed 3 t1 call 0\n\
                   fuzz#2| fuzz: seed 3 t0 call 2000\n\
                   [kernel] PANIC at kernel/src/x.rs:1: boom\n";
        let r = read_log(log, 3);
        assert_eq!(r.before.as_deref(), Some("fuzz: seed 3: before: threads=1"));
        assert_eq!(
            r.failure.as_deref(),
            Some("[kernel] PANIC at kernel/src/x.rs:1: boom")
        );
        assert_eq!(r.last_calls, ["t0 call 2000", "t1 call 0"]);
        assert!(!r.passed);
        let good = "fuzz#1| fuzz: seed 3: 100 calls, 50 succeeded (50%)\nfuzz#1| TEST PASS fuzz: 1 seeds, 100 calls\n";
        let r = read_log(good, 3);
        assert!(r.passed && r.failure.is_none());
        assert_eq!(
            r.calls.as_deref(),
            Some("fuzz: seed 3: 100 calls, 50 succeeded (50%)")
        );
    }
}
