//! `cargo xtask trace`: boot with the kernel's timeline trace on, and turn it into a Chrome
//! trace-event file (`results/trace.json`) that Perfetto's UI (<https://ui.perfetto.dev>)
//! and `chrome://tracing` open.
//!
//! The kernel (`kernel/src/trace.rs`) records one line per kernel entry from user mode and
//! prints them at shutdown:
//!
//! ```text
//! [kernel] trace: TSC <kHz> kHz, <n> CPUs
//! TRACE cpu t0 t1 kind num thread_in task_in thread_out task_out arg id_in id_out
//!       handoffs recognitions blocks discards switches migrations fast queued
//! ```
//!
//! (one line; thread ids, the argument and the message ids in hex). [`parse`] reads them,
//! [`chrome`] writes the events: each entry as a complete event on its CPU's track and on
//! the entering thread's, named after the system call or the vector, with the counters as
//! arguments; and a flow arrow from each message sent (an `ipc_msg` with a message id) to
//! the first later entry that leaves into another thread, or the same thread in another
//! task (a migrating call), holding that id: an RPC's request and its reply.

use crate::build;
use crate::deps;
use crate::qemu::{self, Machine};
use crate::test::wait_with_timeout;
use crate::workspace::{note, root, shell_line};
use serde_json::{json, Value};
use std::fs;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

/// Options of `trace`.
#[derive(clap::Args, Debug, PartialEq, Eq)]
pub struct TraceOpts {
    /// Number of CPUs.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub smp: u32,
    /// -icount shift=0: the TSC counts instructions, so the timeline is in instructions
    /// (shown as if one instruction took a nanosecond at the TSC rate the kernel reports).
    #[arg(long)]
    pub icount: bool,
    /// Records kept per CPU (the newest; the kernel's ring overwrites the oldest).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub records: usize,
    /// Boot nothing: turn the `TRACE` lines of this saved console log into the trace file
    /// (e.g. results/console.log, which `cargo xtask run` writes, after the shell's
    /// `trace start` and `trace stop`).
    #[arg(long, value_name = "FILE")]
    pub log: Option<std::path::PathBuf>,
    /// Kernel command-line words after `--`, e.g. `init=pingpong` (the default boots `init`).
    #[arg(last = true, value_name = "WORD")]
    pub extra: Vec<String>,
}

/// The counters of a record, in the kernel's order.
pub const COUNTERS: [&str; 8] = [
    "stack handoffs",
    "recognitions",
    "blocks",
    "stack discards",
    "context switches",
    "migrating calls",
    "fast-path messages",
    "queued messages",
];

/// One kernel entry, as the kernel printed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The CPU.
    pub cpu: u32,
    /// TSC at entry and at the next exit to user mode (or idle).
    pub t0: u64,
    pub t1: u64,
    /// 0: a system call (`num` its number); 1: an exception or interrupt (`num` the vector).
    pub kind: u8,
    pub num: u64,
    /// The thread and task that entered, and those that left (0: the CPU went idle).
    pub thread_in: u64,
    pub task_in: u64,
    pub thread_out: u64,
    pub task_out: u64,
    /// The first argument.
    pub arg: u64,
    /// The id of the message sent (0: none), and the id in the leaving thread's buffer.
    pub id_in: u64,
    pub id_out: u64,
    /// [`COUNTERS`]: how many of each happened during the entry.
    pub counts: [u64; 8],
}

/// A parsed trace.
#[derive(Debug, PartialEq, Eq)]
pub struct Trace {
    /// The TSC rate, in kHz.
    pub tsc_khz: u64,
    /// Every record, sorted by entry time.
    pub records: Vec<Record>,
}

/// Reads the trace out of a serial log.
pub fn parse(log: &str) -> Result<Trace, String> {
    let mut tsc_khz = None;
    let mut records = Vec::new();
    for (n, line) in log.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix("[kernel] trace: TSC ") {
            tsc_khz = rest
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok());
        } else if let Some(rest) = line.strip_prefix("TRACE ") {
            records.push(record(rest).ok_or(format!("line {}: bad record: {line}", n + 1))?);
        }
    }
    let tsc_khz = tsc_khz
        .filter(|&k| k > 0)
        .ok_or("no `[kernel] trace: TSC` line: was the kernel booted with `trace` and `shutdown`, and did it shut down?")?;
    records.sort_by_key(|r| (r.t0, r.cpu));
    Ok(Trace { tsc_khz, records })
}

/// One `TRACE` line's fields (after the word).
fn record(rest: &str) -> Option<Record> {
    let f: Vec<&str> = rest.split_whitespace().collect();
    if f.len() != 20 {
        return None;
    }
    let dec = |i: usize| f.get(i)?.parse::<u64>().ok();
    let hex = |i: usize| u64::from_str_radix(f.get(i)?, 16).ok();
    let mut counts = [0; 8];
    for (j, c) in counts.iter_mut().enumerate() {
        *c = dec(12 + j)?;
    }
    Some(Record {
        cpu: u32::try_from(dec(0)?).ok()?,
        t0: dec(1)?,
        t1: dec(2)?,
        kind: u8::try_from(dec(3)?).ok()?,
        num: dec(4)?,
        thread_in: hex(5)?,
        task_in: dec(6)?,
        thread_out: hex(7)?,
        task_out: dec(8)?,
        arg: hex(9)?,
        id_in: hex(10)?,
        id_out: hex(11)?,
        counts,
    })
}

/// The name of a record's entry: the system call (`ipc_msg`) or the vector.
pub fn entry_name(r: &Record) -> String {
    if r.kind == 1 {
        return match r.num {
            14 => "page fault".to_string(),
            0x40 => "timer interrupt".to_string(),
            v if v < 32 => format!("exception {v}"),
            v => format!("interrupt {v:#x}"),
        };
    }
    match baton_abi::Sys::from_raw(r.num) {
        Some(call) => snake(&format!("{call:?}")),
        None => format!("system call {}", r.num),
    }
}

/// `IpcMsg` → `ipc_msg`.
fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The flows of `t`: for each record that sent a message, the index of the record that
/// delivered it (see the module documentation), looked for among the next 256 records.
pub fn flows(t: &Trace) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, r) in t.records.iter().enumerate() {
        if r.id_in == 0 {
            continue;
        }
        let delivered = t
            .records
            .iter()
            .enumerate()
            .skip(i)
            .take(256)
            .find(|(_, d)| {
                d.t1 >= r.t0
                    && d.id_out == r.id_in
                    && d.thread_out != 0
                    && (d.thread_out != r.thread_in || d.task_out != r.task_in)
            });
        if let Some((j, _)) = delivered {
            out.push((i, j));
        }
    }
    out
}

/// The Chrome trace-event document of `t`: process 1 holds one track per CPU, process 2
/// one per thread (named with its task); times in microseconds from the first entry.
pub fn chrome(t: &Trace) -> Value {
    let start = t.records.first().map_or(0, |r| r.t0);
    let us = |tsc: u64| (tsc.saturating_sub(start)) as f64 * 1000.0 / t.tsc_khz as f64;
    let mut events = vec![
        json!({"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "CPUs"}}),
        json!({"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "threads"}}),
    ];
    let mut named = std::collections::BTreeSet::new();
    for r in &t.records {
        if named.insert(("cpu", u64::from(r.cpu))) {
            events.push(
                json!({"ph": "M", "pid": 1, "tid": r.cpu, "name": "thread_name",
                "args": {"name": format!("CPU {}", r.cpu)}}),
            );
        }
        if r.thread_in != 0 && named.insert(("thread", r.thread_in)) {
            events.push(
                json!({"ph": "M", "pid": 2, "tid": r.thread_in, "name": "thread_name",
                "args": {"name": format!("thread {:#x} (task {})", r.thread_in, r.task_in)}}),
            );
        }
        let mut args = json!({
            "thread in": format!("{:#x}", r.thread_in),
            "task in": r.task_in,
            "thread out": format!("{:#x}", r.thread_out),
            "task out": r.task_out,
            "rdi": format!("{:#x}", r.arg),
        });
        if r.id_in != 0 {
            args["message sent"] = json!(format!("{:#x}", r.id_in));
        }
        for (name, &n) in COUNTERS.iter().zip(&r.counts) {
            if n != 0 {
                args[*name] = json!(n);
            }
        }
        let cat = if r.kind == 1 { "trap" } else { "syscall" };
        let (ts, dur) = (us(r.t0), us(r.t1) - us(r.t0));
        let name = entry_name(r);
        events.push(
            json!({"ph": "X", "pid": 1, "tid": r.cpu, "name": name, "cat": cat,
            "ts": ts, "dur": dur, "args": args.clone()}),
        );
        if r.thread_in != 0 {
            events.push(
                json!({"ph": "X", "pid": 2, "tid": r.thread_in, "name": name,
                "cat": cat, "ts": ts, "dur": dur, "args": args}),
            );
        }
    }
    for (id, (i, j)) in flows(t).into_iter().enumerate() {
        let (Some(s), Some(d)) = (t.records.get(i), t.records.get(j)) else {
            continue;
        };
        events.push(
            json!({"ph": "s", "pid": 2, "tid": s.thread_in, "id": id, "name": "message",
            "cat": "ipc", "ts": us(s.t0)}),
        );
        // Bound to the delivering entry's slice on the receiving thread's CPU track.
        events.push(
            json!({"ph": "f", "bp": "e", "pid": 1, "tid": d.cpu, "id": id,
            "name": "message", "cat": "ipc", "ts": us(d.t0)}),
        );
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"})
}

/// Writes `results/trace.json` from the serial log `text` (read from `source`) and says
/// what it holds.
fn convert(text: &str, source: &std::path::Path) -> Result<ExitCode, String> {
    let trace = parse(text).map_err(|e| format!("{e} (log: {})", source.display()))?;
    let dir = root().join("results");
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json_path = dir.join("trace.json");
    let doc = serde_json::to_string(&chrome(&trace)).map_err(|e| e.to_string())?;
    fs::write(&json_path, doc).map_err(|e| format!("{}: {e}", json_path.display()))?;
    let cpus: std::collections::BTreeSet<u32> = trace.records.iter().map(|r| r.cpu).collect();
    note(format!(
        "{} kernel entries on {} CPU(s), {} messages followed; wrote {} (open it in https://ui.perfetto.dev) from {}",
        trace.records.len(),
        cpus.len(),
        flows(&trace).len(),
        json_path.display(),
        source.display()
    ));
    Ok(ExitCode::SUCCESS)
}

/// Runs `trace`.
pub fn run(opts: &TraceOpts) -> Result<ExitCode, String> {
    if let Some(log) = &opts.log {
        let text = fs::read(log).map_err(|e| format!("{}: {e}", log.display()))?;
        // A terminal's log may hold bytes that are not UTF-8 (keys typed); they are not
        // in the trace's lines.
        return convert(&String::from_utf8_lossy(&text), log);
    }
    deps::ensure_target()?;
    let qemu = deps::ensure_qemu()?;
    let images = build::build()?;
    let mut extra = opts.extra.clone();
    extra.retain(|w| w != "trace" && !w.starts_with("trace="));
    extra.push(format!("trace={}", opts.records.clamp(1, 65536)));
    let machine = Machine {
        images: &images,
        accel: qemu::choose_accel(true, opts.icount),
        smp: opts.smp.max(1),
        cmdline: qemu::cmdline("init", true, &extra),
        icount: opts.icount,
        gdb: None,
        disk: None,
    };
    let mut cmd = machine.command(&qemu);
    note(format!("$ {}", shell_line(&cmd)));
    let dir = root().join("results");
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let log_path = dir.join("trace.log");
    let log = fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", qemu.display()))?;
    if wait_with_timeout(&mut child, Duration::from_secs(300))?.is_none() {
        return Err(format!(
            "the traced boot did not shut down within 5 minutes (log: {}); the programs must end for the trace to be printed",
            log_path.display()
        ));
    }
    let text = fs::read(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    convert(&String::from_utf8_lossy(&text), &log_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client (thread 1, task 1) calls a server (thread 2, task 2) with message 0x2a;
    /// the server's reply (0x2b) goes back. A timer interrupt in between.
    const LOG: &str = "\
[kernel] trace: TSC 1000 kHz, 1 CPUs
[kernel] trace: CPU 0: 3 records (0 overwritten)
TRACE 0 1000 1500 0 18 1 1 2 2 3 2a 2a 1 1 1 0 0 0 1 0
TRACE 0 2000 2100 1 64 2 2 2 2 0 0 2a 0 0 0 0 0 0 0 0
TRACE 0 3000 3600 0 18 2 2 1 1 3 2b 2b 1 1 1 0 0 0 1 0
[kernel] trace: end
";

    #[test]
    fn parses_records_and_names_entries() {
        let t = parse(LOG).unwrap();
        assert_eq!(t.tsc_khz, 1000);
        assert_eq!(t.records.len(), 3);
        let r = &t.records[0];
        assert_eq!(
            (r.thread_in, r.thread_out, r.id_in, r.id_out),
            (1, 2, 0x2a, 0x2a)
        );
        assert_eq!(r.counts, [1, 1, 1, 0, 0, 0, 1, 0]);
        assert_eq!(entry_name(r), "ipc_msg");
        assert_eq!(entry_name(&t.records[1]), "timer interrupt");
    }

    #[test]
    fn a_request_and_its_reply_are_flows_in_order() {
        let t = parse(LOG).unwrap();
        assert_eq!(flows(&t), [(0, 0), (2, 2)]);
        let doc = chrome(&t);
        // It is JSON a trace viewer reads: re-parse the text.
        let text = serde_json::to_string(&doc).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        let events = back["traceEvents"].as_array().unwrap();
        let slices: Vec<&str> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 1)
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(slices, ["ipc_msg", "timer interrupt", "ipc_msg"]);
        assert_eq!(events.iter().filter(|e| e["ph"] == "s").count(), 2);
        assert_eq!(events.iter().filter(|e| e["ph"] == "f").count(), 2);
        // Microseconds from the first entry at 1 MHz: the reply starts at 2000 us.
        let reply = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 1)
            .nth(2)
            .unwrap();
        assert_eq!(reply["ts"].as_f64(), Some(2000.0));
        assert_eq!(reply["args"]["stack handoffs"], 1);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(parse("").is_err(), "no TSC line");
        assert!(parse("[kernel] trace: TSC 1000 kHz, 1 CPUs\nTRACE 0 1 2\n").is_err());
        assert!(parse("[kernel] trace: TSC 0 kHz, 1 CPUs\n").is_err());
        let t = parse("[kernel] trace: TSC 5 kHz, 1 CPUs\n").unwrap();
        assert!(t.records.is_empty());
        assert!(chrome(&t)["traceEvents"].is_array());
    }
}
