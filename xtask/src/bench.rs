//! `cargo xtask bench`: boots the `bench` program under QEMU with `-icount`, measures the
//! same operations in a Linux guest, and writes the results and the report.
//!
//! 1. The images are built as for `run`.
//! 2. QEMU boots `init=bench shutdown priv=bench` ([`PRIV`]) with TCG,
//!    `-icount shift=0,align=off,sleep=off` and
//!    one CPU: the guest's time-stamp counter then advances exactly once per instruction,
//!    so the program's `rdtsc` deltas are exact instruction counts. The serial log goes to
//!    `results/bench.log` (a file, never a pipe, so that a slow reader cannot change the
//!    guest's timing). A second boot with two CPUs (`results/bench.smp2.log`) runs the
//!    cross-CPU benchmarks; there the TSC counts the instructions of both CPUs, which
//!    QEMU runs in turn on one host thread.
//! 3. The log must show a clean shutdown (QEMU status 33), `BENCH done`, and no
//!    `TEST FAIL`, `PANIC` or `KERNEL EXCEPTION`; its `BENCH` and `BENCHSTAT` lines are
//!    parsed, and the rows must keep their [`BOUNDS`] (checked after the files are
//!    written, as the repeatability check is).
//! 4. Without `--quick`: both boots are made a second time (`results/bench.2.log`,
//!    `results/bench.2.smp2.log`) and every figure must be the same to the instruction.
//! 5. Without `--quick`, where the host has hardware KVM (the `kvm_intel` or `kvm_amd`
//!    module; [`crate::cycles`]): the **cycles** pass, the same image under `-enable-kvm
//!    -cpu host` without `-icount`, one warm-up boot and several measured ones
//!    (`results/kvm.*.log`). Elsewhere the report says why cycles were not measured.
//! 6. Without `--quick`: the Linux guest is measured ([`crate::linux::measure`], two boots
//!    that must agree too).
//! 7. [`crate::report`] writes `results/baton.json`, `results/baton-cycles.json` (when
//!    cycles were measured), `results/linux.json` (without `--quick`), the SVG plots and
//!    `results/report.md`, and the headline table is printed. A failed repeatability
//!    check, cycles pass or Linux measurement fails the command, after the files are
//!    written.
//!
//! The schema and the benchmarks are documented in `docs/benchmarks.md`.

use crate::build::{self, Images};
use crate::cycles;
use crate::deps;
use crate::judge::FORBIDDEN;
use crate::linux;
use crate::qemu::{self, Accel, Machine, EXIT_CLEAN};
use crate::report::{self, Inputs, Meta, Repeat};
use crate::workspace::{note, root, shell_line, Step};
use crate::BenchOpts;
use std::fs::{self, File};

/// The command-line word that gives the `bench` task the host-privilege right: the
/// benchmarks make the debugging and benchmark calls (`debug_block_process_model`,
/// `floor_xas_register`), which need it.
pub const PRIV: &str = "priv=bench";
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

/// QEMU is killed, and the benchmark fails, after this long.
const TIMEOUT: Duration = Duration::from_secs(300);
/// The program's last line when every benchmark ran.
const DONE: &str = "BENCH done";
/// How many lines of a failed run's log are shown.
const LOG_TAIL_LINES: usize = 20;

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
    /// CPUs of the boot that measured it (the log does not say: 1 until the caller knows).
    pub cpus: u32,
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
    /// The kernel's system-wide virtual-memory counters when the benchmarks ended (the
    /// `BENCHVM` line: fault counts by Accent's classes), in the line's order.
    pub vm: Vec<(String, u64)>,
}

/// Runs `cargo xtask bench`.
pub fn bench(opts: &BenchOpts) -> Result<ExitCode, String> {
    let start = Instant::now();
    deps::ensure_target()?;
    let qemu = deps::ensure_qemu()?;
    let kvm = match cycles::decide(&cycles::Host::probe()) {
        Ok(module) if opts.quick => Err(format!(
            "`--quick` measures instructions only (hardware KVM, {module}, is available)"
        )),
        decided => decided,
    };
    match &kvm {
        Ok(module) => note(format!(
            "hardware KVM ({module}): cycles will be measured too, after the instructions"
        )),
        Err(why) => note(format!("cycles will not be measured: {why}")),
    }
    let images = build::build()?;
    if !images.programs.iter().any(|p| p == "bench") {
        return Err("the initrd has no `bench` program (user/programs/src/bin/bench.rs)".into());
    }
    let read = |p: &Path| fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    let image = report::fingerprint(&[&read(&images.kernel)?, &read(&images.initrd)?]);
    let dir = root().join("results");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;

    let mut errors = Vec::new();
    let tcg = |smp| icount_machine(&images, smp);
    let first = boot_all(&qemu, &dir, "bench", tcg)?;
    if let Err(e) = check_bounds(&first.rows) {
        errors.push(e);
    }
    let repeat = if opts.quick {
        Repeat::NotChecked
    } else {
        let second = boot_all(&qemu, &dir, "bench.2", tcg)?;
        match compare(&first, &second) {
            Ok(()) => {
                note("two runs gave identical instruction counts for every Baton benchmark");
                Repeat::Agreed
            }
            Err(e) => {
                errors.push(e);
                Repeat::Differed
            }
        }
    };
    // The same image with the kernel's timeline trace on (`trace`), one CPU: what recording
    // every kernel entry costs, beside the figures above (with it compiled in and off).
    let traced = if opts.quick {
        None
    } else {
        let machine = Machine {
            cmdline: qemu::cmdline(
                "bench",
                true,
                &[crate::bench::PRIV.to_string(), "trace=4096".to_string()],
            ),
            ..icount_machine(&images, 1)
        };
        match boot(&machine, &qemu, &dir.join("bench.trace.log")) {
            Ok(r) => Some(r),
            Err(e) => {
                errors.push(format!("the traced boot failed: {e}"));
                None
            }
        }
    };
    // The logs of an earlier cycles pass would otherwise outlive it.
    if let Ok(entries) = fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("kvm.") && name.ends_with(".log") {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
    let cycles = match kvm {
        Ok(module) => {
            note(format!(
                "the cycles pass: the same image under -enable-kvm -cpu host, {} warm-up and \
                 {} measured boots",
                cycles::WARMUP_BOOTS,
                cycles::BATCHES
            ));
            cycles::measure(&images, &qemu, &dir, module).map_err(|e| {
                let first_line = e.lines().next().unwrap_or_default().to_string();
                errors.push(format!("the cycles measurement under KVM failed: {e}"));
                format!("the measurement under KVM ({module}) failed: {first_line}")
            })
        }
        Err(why) => Err(why),
    };
    let linux = if opts.quick {
        Err("`--quick`".to_string())
    } else {
        note("the Linux side: the same operations in a Linux guest under the same QEMU");
        linux::measure(false).map_err(|e| {
            let first_line = e.lines().next().unwrap_or_default().to_string();
            errors.push(format!("the Linux measurement failed: {e}"));
            format!("the measurement failed: {first_line}")
        })
    };

    let meta = Meta::collect(&qemu);
    let inputs = Inputs {
        meta: &meta,
        baton: &first,
        image: &image,
        repeat,
        linux: linux.as_ref().map_err(Clone::clone),
        cycles: cycles.as_ref().map_err(Clone::clone),
    };
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write("baton.json", &report::baton_json(&inputs))?;
    if let Ok(run) = &linux {
        write("linux.json", &report::linux_json(&meta, run))?;
    }
    match &cycles {
        Ok(c) => write(report::CYCLES_JSON, &report::cycles_json(&inputs, c))?,
        Err(_) => {
            let _ = fs::remove_file(dir.join(report::CYCLES_JSON));
        }
    }
    let plots = inputs.plots();
    for stale in report::PLOTS {
        if !plots.iter().any(|(name, _)| *name == stale) {
            let _ = fs::remove_file(dir.join(stale));
        }
    }
    for (name, svg) in &plots {
        write(name, svg)?;
    }
    let names: Vec<&str> = plots.iter().map(|(name, _)| *name).collect();
    let mut report = inputs.report_md(&names);
    if let Some(traced) = &traced {
        report.push_str(&tracing_section(&first, traced));
    }
    write("report.md", &report)?;

    println!(
        "Baton, in {} (QEMU TCG -icount; {}; kernel {}):\n",
        meta.metric, meta.qemu, meta.commit
    );
    println!("{}", inputs.headline());
    match &cycles {
        Ok(c) => {
            println!(
                "Baton, in TSC cycles (hardware KVM, -cpu host; median of {} boots, spread = \
                 smallest and largest boot's median):\n",
                cycles::BATCHES
            );
            println!("{}", inputs.cycles_table(c, Some(report::HEADLINE)));
        }
        Err(why) => println!("Cycles: not measured ({why}).\n"),
    }
    let mut files = vec!["baton.json"];
    if cycles.is_ok() {
        files.push(report::CYCLES_JSON);
    }
    if linux.is_ok() {
        files.push("linux.json");
    }
    files.extend(&names);
    note(format!(
        "wrote {}/report.md (every row, the pairs, the references) and {}; the serial logs \
         are there too",
        dir.display(),
        files.join(", ")
    ));
    note(format!(
        "cargo xtask bench{} took {:.0}s",
        if opts.quick { " --quick" } else { "" },
        start.elapsed().as_secs_f64()
    ));
    if errors.is_empty() {
        update_readme(opts, &inputs);
        Ok(ExitCode::SUCCESS)
    } else {
        Err(errors.join("\n"))
    }
}

/// The README's headline paragraph and table for the run `inputs`: the kernel's commit,
/// the QEMU version, what the columns mean, and the headline rows.
fn readme_headline(inputs: &Inputs<'_>) -> String {
    format!(
        "Latest headline (kernel {}, QEMU {}; × floor: the multiple of the row's floor, the \
         cheapest path its operation contains (`docs/benchmarks.md`, \"Floors\"); ratio:\n\
         Baton ÷ the paper's instructions, or Baton's same ratio for a ratio of the \
         paper's):\n\n{}",
        inputs.meta.commit,
        qemu_version(&inputs.meta.qemu),
        inputs.headline().trim_end()
    )
}

/// The version number in QEMU's `--version` line (`QEMU emulator version 7.2.22 (Debian
/// …)` gives `7.2.22`), or the line itself when it has none.
fn qemu_version(line: &str) -> &str {
    line.split_once("version ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or(line)
}

/// Why the run `inputs` may not stand in the README as its headline (`None`: it may): only
/// a full run (the Linux side measured, the Baton figures repeated to the instruction) of a
/// committed, clean checkout, whose commit names the figures.
fn readme_refusal(quick: bool, inputs: &Inputs<'_>) -> Option<&'static str> {
    if quick {
        Some("a `--quick` run has no Linux column and no repeat check")
    } else if inputs.repeat != Repeat::Agreed || inputs.linux.is_err() {
        Some("the run is not complete")
    } else if inputs.meta.commit.ends_with("-dirty") || inputs.meta.commit == "unknown" {
        Some("the checkout has uncommitted changes, so no commit names these figures")
    } else {
        None
    }
}

/// Writes the headline of a full run into README.md, and the file-reading table into
/// docs/files.md, between the `cargo xtask bench` markers ([`crate::generated`]), or says
/// why it does not.
fn update_readme(opts: &BenchOpts, inputs: &Inputs<'_>) {
    if let Some(why) = readme_refusal(opts.quick, inputs) {
        note(format!(
            "README.md's headline and the figures of docs/files.md and docs/sting.md left as they were: {why}"
        ));
        return;
    }
    let mut pages = vec![("README.md", readme_headline(inputs))];
    match files_measured(inputs) {
        Some(text) => pages.push(("docs/files.md", text)),
        None => note("docs/files.md's figures left as they were: the run lacks a file row"),
    }
    match sting_measured(inputs) {
        Some(text) => pages.push(("docs/sting.md", text)),
        None => note("docs/sting.md's figures left as they were: the run lacks a Sting row"),
    }
    for (page, text) in pages {
        match crate::generated::write_into(&root().join(page), "bench", &text) {
            Ok(true) => note(format!("{page} now shows this run")),
            Ok(false) => note(format!("{page} already showed this run")),
            Err(e) => note(format!("{page} not written: {e}")),
        }
    }
}

/// A number with thousands separators, as the docs write them.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// docs/files.md's "Measured" figures from the run `inputs`: Baton's file rows beside
/// Accent's Table 3-4, and the same reads on Linux. `None` when a Baton row is missing.
fn files_measured(inputs: &Inputs<'_>) -> Option<String> {
    let baton = |name: &str| {
        inputs
            .baton
            .rows
            .iter()
            .find(|r| r.name == name && r.cpus == 1)
            .map(|r| r.median)
    };
    let (open, cold, warm, blk) = (
        baton("file.open")?,
        baton("file.read.56k")?,
        baton("file.read.56k.warm")?,
        baton("blk.read.4k")?,
    );
    let page = cold / 14;
    let ratio = format!("{:.1}", cold as f64 / open.max(1) as f64);
    let mut text = format!(
        "Measured by `cargo xtask bench` on kernel {} (QEMU TCG with `-icount`, one CPU; \
         instructions executed, the disk's time left out by subtracting the kernel's halted \
         ticks; `docs/benchmarks.md`), beside Accent's Table 3-4 (milliseconds on a PERQ, the \
         disk's time included):\n\n\
         | operation | Accent (ms) | UNIX 4.1bsd (ms) | Baton row | Baton (instructions, median) |\n\
         |---|---:|---:|---|---:|\n\
         | request the file (UNIX: open/close) | 66 | 5–10 | `file.open` | {} |\n\
         | read a page (512 B, 1 KiB, 4 KiB) | 5–10 | 16–18 | `file.read.56k` ÷ 14 | {} |\n\
         | read the 56 KiB file, cold | 560–1,120 | 896–1,008 | `file.read.56k` | {} |\n\
         | read it again, pages resident | | | `file.read.56k.warm` | {} |\n\
         | reading the file ÷ requesting it | 8.5–17 | 90–202 | | {ratio} |\n\n\
         A 4 KiB block read from the driver (`blk.read.4k`) is {} in the same run: a cold page \
         is {:.1} of them.",
        inputs.meta.commit,
        grouped(open),
        grouped(page),
        grouped(cold),
        grouped(warm),
        grouped(blk),
        page as f64 / blk.max(1) as f64,
    );
    if let Ok(linux) = &inputs.linux {
        let row = |name: &str| linux.rows.iter().find(|r| r.name == name).map(|r| r.median);
        if let (Some(lc), Some(lw)) = (row("linux.file.read.56k"), row("linux.file.read.56k.warm"))
        {
            text.push_str(&format!(
                " Linux on the same machine and disk (below): {} cold, {} warm.",
                grouped(lc),
                grouped(lw)
            ));
        }
    }
    Some(text)
}

/// One row of the Sting paper's Figure 3 as docs/sting.md shows it: Baton's row, the
/// paper's case, its figure (µs), the target, and the Linux guest's rows for the same
/// operation with user-level threads and with kernel threads (pthreads), where there is one.
struct StingRow {
    baton: &'static str,
    case: &'static str,
    paper: &'static str,
    target: &'static str,
    ult: Option<&'static str>,
    pthreads: Option<&'static str>,
}

/// Figure 3's rows, and the runtime's rows measured beside them, in docs/sting.md's order.
const STING_ROWS: [StingRow; 10] = [
    StingRow {
        baton: "sting.create",
        case: "Thread Creation",
        paper: "40",
        target: "≤ 300",
        ult: Some("linux.ult.create"),
        pthreads: None,
    },
    StingRow {
        baton: "sting.fork_value",
        case: "Thread Fork and Value",
        paper: "86.9",
        target: "≤ 1,000",
        ult: Some("linux.ult.fork_value"),
        pthreads: Some("linux.thread.create_join"),
    },
    StingRow {
        baton: "sting.absorb",
        case: "(absorption)",
        paper: "",
        target: "≤ 100",
        ult: None,
        pthreads: None,
    },
    StingRow {
        baton: "sting.enqueue_dequeue",
        case: "Thread Enqueue/Dequeue",
        paper: "14.5",
        target: "≤ 40",
        ult: Some("linux.ult.enqueue_dequeue"),
        pthreads: None,
    },
    StingRow {
        baton: "sting.enqueue_dequeue.scheduled",
        case: "(the same, a thread not started)",
        paper: "",
        target: "",
        ult: None,
        pthreads: None,
    },
    StingRow {
        baton: "sting.switch",
        case: "Synchronous Context Switch",
        paper: "12.8",
        target: "≤ 60",
        ult: Some("linux.ult.switch"),
        pthreads: Some("linux.sched.yield.switch"),
    },
    StingRow {
        baton: "sting.block_resume",
        case: "Thread Block and Resume",
        paper: "27.9",
        target: "≤ 150",
        ult: Some("linux.ult.block_resume"),
        pthreads: Some("linux.pthread.block_resume"),
    },
    StingRow {
        baton: "sting.kernel_block",
        case: "(a thread blocked in the kernel)",
        paper: "",
        target: "report",
        ult: None,
        pthreads: None,
    },
    StingRow {
        baton: "sting.area.alloc",
        case: "(a private-area allocation)",
        paper: "",
        target: "report",
        ult: None,
        pthreads: None,
    },
    StingRow {
        baton: "sting.exception",
        case: "(an exception as a continuation)",
        paper: "",
        target: "report",
        ult: None,
        pthreads: None,
    },
];

/// docs/sting.md's Figure 3 table from the run `inputs`: each of [`STING_ROWS`] with
/// Baton's median and the Linux guest's. `None` when a Baton row is missing.
fn sting_measured(inputs: &Inputs<'_>) -> Option<String> {
    let mut text = format!(
        "Measured by `cargo xtask bench` on kernel {} (QEMU TCG with `-icount`, one CPU; \
         instructions executed, medians; `docs/benchmarks.md`). The Linux columns are the \
         same operations in the Linux guest on the same machine: a user-level thread \
         package on one kernel thread (the C library's `makecontext`/`swapcontext`, one \
         FIFO ring), and kernel threads (`pthread_create` and `pthread_join`; two threads \
         alternating with `sched_yield`; a futex-based block and resume).\n\n\
         | row | Figure 3 case | paper (µs) | target | Baton | Linux, user-level threads \
         | Linux, pthreads |\n|---|---|---:|---:|---:|---:|---:|\n",
        inputs.meta.commit,
    );
    let linux = |name: Option<&str>| -> String {
        let Some(name) = name else {
            return String::new();
        };
        match &inputs.linux {
            Ok(l) => l
                .rows
                .iter()
                .find(|r| r.name == name)
                .map_or_else(String::new, |r| format!("{} (`{name}`)", grouped(r.median))),
            Err(_) => String::new(),
        }
    };
    for row in &STING_ROWS {
        let baton = inputs
            .baton
            .rows
            .iter()
            .find(|r| r.name == row.baton && r.cpus == 1)?
            .median;
        text.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            row.baton,
            row.case,
            row.paper,
            row.target,
            grouped(baton),
            linux(row.ult),
            linux(row.pthreads),
        ));
    }
    Some(text)
}

/// The rows the report shows with the timeline trace on.
const TRACED_ROWS: [&str; 6] = [
    "floor.syscall.null",
    "sched.yield.switch",
    "rpc.null.fast",
    "rpc.null.migrating",
    "rpc.null.slow.roundtrip",
    "exc.roundtrip",
];

/// The report's section on the timeline trace: each of [`TRACED_ROWS`] with the trace
/// compiled in and off (`off`, the figures of the report) and on (`on`).
fn tracing_section(off: &Results, on: &Results) -> String {
    let median = |r: &Results, name: &str| {
        r.rows
            .iter()
            .find(|row| row.name == name && row.cpus == 1)
            .map(|row| row.median)
    };
    let mut out = String::from(
        "\n## The timeline trace\n\nEvery figure above is with the kernel's timeline \
         trace compiled in and off: it costs each system call one compare and one branch in \
         the `syscall` entry, each exception or interrupt from user mode one test, and the \
         way out nothing (`docs/testing.md`, \"Tracing\"). With it on (`trace=4096`, one \
         CPU; `results/bench.trace.log`), each entry and exit also records:\n\n\
         | benchmark | trace off | trace on | on − off |\n|---|---:|---:|---:|\n",
    );
    for name in TRACED_ROWS {
        if let (Some(a), Some(b)) = (median(off, name), median(on, name)) {
            out.push_str(&format!(
                "| `{name}` | {a} | {b} | {} |\n",
                b as i64 - a as i64
            ));
        }
    }
    out
}

/// CPU counts the image is booted with: the program runs the one-CPU benchmarks on one
/// CPU and the cross-CPU ones (`*.cross`) on two.
pub const SMP: [u32; 2] = [1, 2];

/// The TCG `-icount` machine of one instruction-counting boot with `smp` CPUs.
fn icount_machine(images: &Images, smp: u32) -> Machine<'_> {
    Machine {
        images,
        accel: Accel::Tcg,
        smp,
        cmdline: qemu::cmdline("bench", true, &[crate::bench::PRIV.to_string()]),
        icount: true,
        gdb: None,
        // The `blk.*` rows drive the disk (a fresh image for each boot).
        disk: crate::disk::fresh(&format!("bench.smp{smp}")).ok(),
    }
}

/// Boots the machine `machine(smp)` once per entry of [`SMP`], logging to `<stem>.log` and
/// `<stem>.smp2.log` in `dir`, and joins the results.
pub fn boot_all<'a>(
    qemu: &Path,
    dir: &Path,
    stem: &str,
    machine: impl Fn(u32) -> Machine<'a>,
) -> Result<Results, String> {
    let mut all = Results {
        done: true,
        ..Results::default()
    };
    for smp in SMP {
        let name = match smp {
            1 => format!("{stem}.log"),
            n => format!("{stem}.smp{n}.log"),
        };
        let r = boot(&machine(smp), qemu, &dir.join(name))?;
        all.rows
            .extend(r.rows.into_iter().map(|row| Row { cpus: smp, ..row }));
        all.paths.extend(r.paths);
        all.done &= r.done;
        if all.vm.is_empty() {
            all.vm = r.vm;
        }
    }
    Ok(all)
}

/// Boots `machine` once, its serial output going to `log`, and parses the log.
fn boot(machine: &Machine, qemu: &Path, log: &Path) -> Result<Results, String> {
    let mut cmd = machine.command(qemu);
    let name = log.file_stem().unwrap_or_default().to_string_lossy();
    let how = match (machine.accel, machine.icount) {
        (Accel::Tcg, true) => "TCG -icount".to_string(),
        (accel, _) => accel.to_string(),
    };
    let cpus = if machine.smp == 1 { "CPU" } else { "CPUs" };
    let step = Step::start(format!("boot {name} ({} {cpus}, {how})", machine.smp));
    note(format!("$ {}", shell_line(&cmd)));
    let file = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let stderr = file
        .try_clone()
        .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(file).stderr(stderr);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", qemu.display()))?;
    let status = match crate::test::wait_with_timeout(&mut child, TIMEOUT) {
        Ok(status) => status,
        Err(e) => {
            step.end("failed");
            return Err(e);
        }
    };
    let text = fs::read(log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
    let text = String::from_utf8_lossy(&text);
    let judged = match status {
        None => Err(format!("QEMU did not finish within {}s", TIMEOUT.as_secs())),
        Some(status) => judge(status.code(), &text),
    };
    match judged {
        Ok(results) => {
            let n = results.rows.len();
            let s = if n == 1 { "" } else { "s" };
            step.end(format!("{n} benchmark{s}, log {}", log.display()));
            Ok(results)
        }
        Err(why) => {
            step.end("failed");
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

/// Parses the `BENCH`, `BENCHSTAT` and `BENCHVM` lines of a serial log.
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
                cpus: 1,
            };
            if results.rows.iter().any(|r| r.name == row.name) {
                return Err(bad(format!("benchmark `{}` reported twice", row.name)));
            }
            results.rows.push(row);
        } else if let Some(fields) = text.strip_prefix("BENCHVM ") {
            let f = Fields::new(fields).map_err(bad)?;
            for (key, _) in &f.0 {
                let value = f.number(key).map_err(bad)?;
                results.vm.push((key.to_string(), value));
            }
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

/// Rows whose instruction count must stay within a multiple of another row's:
/// `(row, base, num, den)` means `row`'s median ≤ `base`'s median × `num / den`. A run
/// without either row is not checked.
pub const BOUNDS: &[(&str, &str, u64, u64)] = &[
    // The kernel heap's cost must not grow with its free blocks: creating a thread after
    // 8,000 holes were left in the heap costs at most 1.2 times what it costs without.
    ("stress.frag.thread_create", "thread.create_exit", 6, 5),
];

/// Checks [`BOUNDS`] on one run's rows (instruction counts).
pub fn check_bounds(rows: &[Row]) -> Result<(), String> {
    let median = |name: &str| rows.iter().find(|r| r.name == name).map(|r| r.median);
    let mut broken = Vec::new();
    for &(row, base, num, den) in BOUNDS {
        let (Some(a), Some(b)) = (median(row), median(base)) else {
            continue;
        };
        if a.saturating_mul(den) > b.saturating_mul(num) {
            broken.push(format!(
                "{row}: {a} instructions, more than {num}/{den} × {base} ({b}): {:.2}×",
                a as f64 / b.max(1) as f64
            ));
        }
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "rows out of bounds:\n    {}",
            broken.join("\n    ")
        ))
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

/// Rows that wait for a device (the user-level block driver's disk, and the file rows,
/// whose cold runs read through the file server and the driver): QEMU completes a
/// request on a host thread, so the instruction at which its interrupt lands can differ
/// between two runs of the same image. Their medians must agree within
/// [`DEVICE_SLACK_PERCENT`]; their minimum and maximum are not compared.
pub const DEVICE_ROWS: &[&str] = &["blk.", "file."];
/// How far two runs' medians of a [`DEVICE_ROWS`] row may differ, in percent.
pub const DEVICE_SLACK_PERCENT: u64 = 2;
/// Rows of paging to the disk: besides waiting for the device, which pages the clock
/// takes, and so how many page-outs a window holds, follows when the disk's completions
/// land. Their medians must agree within [`PAGING_SLACK_PERCENT`].
pub const PAGING_ROWS: &[&str] = &["vm.pagein", "vm.thrash"];
/// Rows whose figure two runs of the same image do not reproduce even within a slack, so
/// the repeat check leaves them out (the report still shows the first run's): `vm.pageout`
/// is bimodal, about 185,000 or 410,000 instructions a run (measured over six runs of two
/// trees), depending on whether a batch of page-outs whose disk writes complete on a host
/// thread falls inside its timed window.
pub const UNREPEATABLE_ROWS: &[&str] = &["vm.pageout"];
/// How far two runs' medians of a [`PAGING_ROWS`] row may differ, in percent.
pub const PAGING_SLACK_PERCENT: u64 = 35;

/// Whether two runs' figures for one row agree: to the instruction, or for a row that
/// waits for a device ([`DEVICE_ROWS`], [`PAGING_ROWS`]) in the median within its slack.
fn agree(a: &Row, b: &Row) -> bool {
    if UNREPEATABLE_ROWS.contains(&a.name.as_str()) {
        return a.name == b.name && a.unit == b.unit;
    }
    let slack = if DEVICE_ROWS.iter().any(|p| a.name.starts_with(p)) {
        DEVICE_SLACK_PERCENT
    } else if PAGING_ROWS.iter().any(|p| a.name == *p) {
        PAGING_SLACK_PERCENT
    } else {
        return a == b;
    };
    let (lo, hi) = (a.median.min(b.median), a.median.max(b.median));
    a.name == b.name && a.unit == b.unit && (hi - lo) * 100 <= slack * lo.max(1)
}

/// Checks that two runs (`what`, logged in `logs`) gave the same rows to the instruction
/// (the rows that wait for a device: [`agree`]).
pub fn compare_rows(first: &[Row], second: &[Row], what: &str, logs: &str) -> Result<(), String> {
    let mut diffs = Vec::new();
    for a in first {
        match second.iter().find(|b| b.name == a.name) {
            Some(b) if agree(a, b) => {}
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

    /// Only a complete run of a clean checkout goes into the README, and what it writes
    /// names the commit and holds the headline rows.
    #[test]
    fn the_readme_takes_only_a_complete_clean_run() {
        let results = parse(LOG).unwrap();
        let linux = crate::linux::LinuxRun::default();
        let mut meta = report::Meta {
            metric: "instructions".into(),
            qemu: "QEMU emulator version 7.2.0".into(),
            commit: "abc1234".into(),
            host_cpu: "x".into(),
            host_cpus: 2,
        };
        let inputs = |meta: &report::Meta, repeat, linux| {
            readme_refusal(
                false,
                &Inputs {
                    meta: &meta.clone(),
                    baton: &results,
                    image: "0",
                    repeat,
                    linux,
                    cycles: Err("none".into()),
                },
            )
        };
        assert_eq!(inputs(&meta, Repeat::Agreed, Ok(&linux)), None);
        assert!(inputs(&meta, Repeat::Differed, Ok(&linux)).is_some());
        assert!(inputs(&meta, Repeat::Agreed, Err("failed".into())).is_some());
        meta.commit = "abc1234-dirty".into();
        assert!(inputs(&meta, Repeat::Agreed, Ok(&linux)).is_some());
        meta.commit = "abc1234".into();
        let full = Inputs {
            meta: &meta,
            baton: &results,
            image: "0",
            repeat: Repeat::Agreed,
            linux: Ok(&linux),
            cycles: Err("none".into()),
        };
        assert!(readme_refusal(true, &full).is_some(), "--quick");
        let text = readme_headline(&full);
        assert!(
            text.starts_with("Latest headline (kernel abc1234, QEMU 7.2.0;"),
            "{text}"
        );
        assert_eq!(
            qemu_version("QEMU emulator version 7.2.22 (Debian 1:7.2)"),
            "7.2.22"
        );
        assert_eq!(qemu_version("7.2.22"), "7.2.22");
        assert!(text.contains("| `floor.syscall.null` | 223 |"), "{text}");
        // The README has the one pair of markers the run writes between.
        let readme = std::fs::read_to_string(crate::workspace::root().join("README.md")).unwrap();
        assert!(crate::generated::splice(&readme, "bench", &text).is_ok());
        // The file rows are not in this log: nothing for docs/files.md.
        assert_eq!(files_measured(&full), None);
    }

    /// A run's meta data for the page tests (kernel `abc1234`).
    fn test_meta() -> report::Meta {
        report::Meta {
            metric: "instructions".into(),
            qemu: "7.2.22".into(),
            commit: "abc1234".into(),
            host_cpu: "x".into(),
            host_cpus: 2,
        }
    }

    /// The serial line of Baton's row `name` with median `m`.
    fn bench_line(name: &str, m: u64) -> String {
        format!("bench#1| BENCH name={name} unit=instructions iterations=9 median={m} min={m} max={m}\n")
    }

    /// docs/files.md's figures come from the run's rows, grouped as the docs write them,
    /// and the page has the markers they go between.
    #[test]
    fn the_files_page_takes_the_runs_file_rows() {
        let log = [
            bench_line("file.open", 110_901),
            bench_line("file.read.56k", 626_232),
            bench_line("file.read.56k.warm", 139_105),
            bench_line("blk.read.4k", 29_313),
            "bench#1| BENCH done\n".to_string(),
        ]
        .concat();
        let results = parse(&log).unwrap();
        let meta = test_meta();
        let inputs = Inputs {
            meta: &meta,
            baton: &results,
            image: "0",
            repeat: Repeat::Agreed,
            linux: Err("none".into()),
            cycles: Err("none".into()),
        };
        let text = files_measured(&inputs).unwrap();
        assert!(text.contains("kernel abc1234"));
        assert!(text.contains("| `file.open` | 110,901 |"), "{text}");
        assert!(text.contains("÷ 14 | 44,730 |"), "{text}");
        assert!(
            text.contains("| `file.read.56k.warm` | 139,105 |"),
            "{text}"
        );
        assert!(text.contains("| | 5.6 |"), "{text}");
        assert!(
            text.contains("is 29,313 in the same run: a cold page is 1.5 of them"),
            "{text}"
        );
        assert_eq!(grouped(7), "7");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(12_345_678), "12,345,678");
        let page = std::fs::read_to_string(crate::workspace::root().join("docs/files.md")).unwrap();
        assert!(crate::generated::splice(&page, "bench", &text).is_ok());
    }

    /// docs/sting.md's Figure 3 table takes Baton's rows of the run and the Linux guest's
    /// rows beside them, leaves a cell empty where Linux has no such row, gives nothing
    /// when a Baton row is missing, and the page has the markers it goes between.
    #[test]
    fn the_sting_page_takes_the_runs_figure_3_rows() {
        let mut log: Vec<String> = STING_ROWS
            .iter()
            .zip(1u64..)
            .map(|(r, i)| bench_line(r.baton, 1000 + i))
            .collect();
        log.push("bench#1| BENCH done\n".to_string());
        let results = parse(&log.concat()).unwrap();
        let meta = test_meta();
        let row = |name: &str, m: u64| Row {
            name: name.into(),
            unit: "instructions".into(),
            iterations: 9,
            median: m,
            min: m,
            max: m,
            cpus: 1,
        };
        let linux = crate::linux::LinuxRun {
            rows: vec![
                row("linux.ult.switch", 466),
                row("linux.sched.yield.switch", 2126),
                row("linux.thread.create_join", 65_450),
            ],
            ..crate::linux::LinuxRun::default()
        };
        let inputs = Inputs {
            meta: &meta,
            baton: &results,
            image: "0",
            repeat: Repeat::Agreed,
            linux: Ok(&linux),
            cycles: Err("none".into()),
        };
        let text = sting_measured(&inputs).unwrap();
        assert!(text.contains("kernel abc1234"), "{text}");
        assert!(
            text.contains("| `sting.switch` | Synchronous Context Switch | 12.8 | ≤ 60 | 1,006 | 466 (`linux.ult.switch`) | 2,126 (`linux.sched.yield.switch`) |"),
            "{text}"
        );
        assert!(
            text.contains("| `sting.fork_value` | Thread Fork and Value | 86.9 | ≤ 1,000 | 1,002 |  | 65,450 (`linux.thread.create_join`) |"),
            "{text}"
        );
        assert!(
            text.contains("| `sting.absorb` | (absorption) |  | ≤ 100 | 1,003 |  |  |"),
            "{text}"
        );
        let page = std::fs::read_to_string(crate::workspace::root().join("docs/sting.md")).unwrap();
        assert!(crate::generated::splice(&page, "bench", &text).is_ok());
        // Without one of its rows, the run writes nothing.
        let short = parse(&log[1..].concat()).unwrap();
        assert_eq!(
            sting_measured(&Inputs {
                baton: &short,
                ..inputs
            }),
            None
        );
    }

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
                cpus: 1,
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
    fn checks_bounds() {
        let rows = |frag: u64| {
            parse(&format!(
                "x| BENCH name=thread.create_exit unit=instructions iterations=1 median=1000 \
                 min=1 max=1\nx| BENCH name=stress.frag.thread_create unit=instructions \
                 iterations=1 median={frag} min=1 max=1\n"
            ))
            .unwrap()
            .rows
        };
        assert!(check_bounds(&rows(1200)).is_ok());
        let err = check_bounds(&rows(1201)).unwrap_err();
        assert!(err.contains("stress.frag.thread_create: 1201"), "{err}");
        assert!(check_bounds(&parse(LOG).unwrap().rows).is_ok());
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

    /// A row that waits for the disk may differ in its extremes, and in its median by up
    /// to the slack; any other row must agree to the instruction.
    #[test]
    fn device_rows_agree_within_the_slack() {
        let row = |name: &str, median, max| Row {
            name: name.into(),
            unit: "instructions".into(),
            iterations: 50,
            median,
            min: median,
            max,
            cpus: 1,
        };
        let same = |a: Row, b: Row| compare_rows(&[a], &[b], "x", "y").is_ok();
        assert!(same(
            row("blk.read.4k", 30639, 30639),
            row("blk.read.4k", 30639, 30706)
        ));
        assert!(same(
            row("blk.read.4k", 30000, 1),
            row("blk.read.4k", 30600, 1)
        ));
        assert!(!same(
            row("blk.read.4k", 30000, 1),
            row("blk.read.4k", 30601, 1)
        ));
        // The file rows read the disk through the file server: their extremes may move.
        assert!(same(
            row("file.read.56k", 645_314, 650_102),
            row("file.read.56k", 645_314, 662_417)
        ));
        assert!(same(
            row("file.open", 117_546, 117_900),
            row("file.open", 117_546, 121_003)
        ));
        assert!(!same(
            row("file.open", 117_546, 1),
            row("file.open", 125_000, 1)
        ));
        assert!(!same(
            row("vm.fault.zero", 2641, 2641),
            row("vm.fault.zero", 2641, 2642)
        ));
        // Paging to the disk: within 35% in the median.
        assert!(same(
            row("vm.pagein", 270_000, 1),
            row("vm.pagein", 364_500, 1)
        ));
        assert!(!same(
            row("vm.pagein", 270_000, 1),
            row("vm.pagein", 364_501, 1)
        ));
        // A row no two runs reproduce is not compared (its name and unit still are).
        assert!(same(
            row("vm.pageout", 185_616, 1),
            row("vm.pageout", 411_758, 1)
        ));
        assert!(!same(
            row("vm.pageout.other", 270_000, 1),
            row("vm.pageout.other", 270_001, 1)
        ));
    }
}
