//! `shell`: a command shell on the console server (`console`), with the host-privilege
//! right to look at and steer the whole system. `docs/shell.md` is its manual.
//!
//! Booted as `init=names,console,shell priv=console,shell` (`cargo xtask run`'s default):
//! it finds the console through the name server, prints a banner, and reads commands.
//! `help` lists them. Programs it runs are boot modules, started with `spawn` (their
//! bootstrap right is the shell's, the name service); a foreground program is waited for
//! through a dead-name notification on its task port, so the shell goes on whether the
//! program exits, faults or is killed.
#![no_std]
#![no_main]

extern crate alloc;

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../console_idl.rs"]
mod console_idl;
#[path = "../fs_client.rs"]
mod fs_client;
#[path = "../fs_proto.rs"]
mod fs_proto;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use baton_abi::host::{blocked_name, object_name, TaskRecord, TASK_ENDING, TASK_LINGERING};
use baton_abi::ipc::{
    MsgHeader, HEADER_SIZE, MSG_RECEIVE, NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME,
};
use baton_abi::kobject::TASK_TERMINATE;
use baton_abi::{Stats, FOREVER};
use baton_rt::idl_rt::SendRight;
use baton_rt::ipc::{cap_drop, msg_buf, port_allocate, port_make_send, port_notify};
use baton_rt::names::NamesClient;
use baton_rt::rpc::Rpc;
use baton_rt::{host, kobject, start, Error};
use console_idl::{ConsoleClient, CONSOLE_INTERRUPT_ID, CONSOLE_NAME};

baton_rt::entry!(main);

/// The prompt.
const PROMPT: &[u8] = b"baton> ";

/// What `help` prints.
const HELP: &str = "\
commands:
  help              this list
  ps                tasks and their threads: state, priority, CPU time, what they wait on
  ports TASK        a task's rights: name, kind, port, queued messages, kernel object
  stats             the kernel's counters (handoffs, recognitions, stacks, bytes per thread)
  paging            paging to the disk: user memory's limit and use, the swap area,
                    page-outs and page-ins, where frames came from (Accent Table 3-8)
  vmstat            the kernel's fault and paging counters since boot as `BENCHVM`
                    lines (Accent Tables 3-8 and 3-10; `cargo xtask accent-tables`)
  programs [all]    the programs `run` can start (with `all`, the test programs too)
  run PROGRAM [ARGUMENT...] [&]
                    start a boot module with these arguments; wait for it to end,
                    or not with `&`
  run /PATH [ARGUMENT...] [&]
                    start the program in that file of the disk (e.g. run /bin/echo hi)
  ls [PATH]         the files of a folder of the disk (default /)
  cat PATH          a file of the disk, read by mapping it
  kill TASK         end a task through its task port
  bench             run the benchmark program; its table is in TSC ticks
                    (instructions only under QEMU -icount: `cargo xtask bench`)
  vm TASK           a task's address map (regions, protections, resident pages)
                    and its page faults by kind
  trace start [N]   record every kernel entry (N records per CPU, default 4096)
  trace stop        print the records (`cargo xtask trace --log FILE` makes a
                    trace file of a saved console log: results/console.log)
  shutdown          end every task and power off
keys: backspace, left/right arrows, up/down for the history; Ctrl-C drops the line, or
stops the program running in the foreground
";

fn main(task_id: u64) -> i32 {
    match Shell::new(task_id) {
        Ok(mut shell) => shell.run(),
        Err(e) => {
            baton_rt::println!("shell: cannot reach the console: {}", e.name());
            1
        }
    }
}

/// The shell's state.
struct Shell {
    id: u64,
    host_priv: u64,
    rpc: Rpc,
    console: u64,
    /// Receive right where a foreground program's end is reported.
    wait_port: u64,
    /// Receive right for the replies of task-port operations.
    reply_port: u64,
    /// The file server, once the first command that needs it has started it.
    fs: Option<fs_client::Fs>,
}

impl Shell {
    fn new(id: u64) -> Result<Shell, Error> {
        let mut rpc = Rpc::new()?;
        let names = start::bootstrap();
        // The console registers itself; it may not have done so yet.
        let mut console = Err(Error::NotFound);
        for _ in 0..200 {
            console = NamesClient::new(&mut rpc, names).lookup(CONSOLE_NAME);
            if console.is_ok() {
                break;
            }
            baton_rt::sleep_ns(10_000_000)?;
        }
        let console = console?.0;
        // Ctrl-C while a program runs in the foreground comes to `wait_port`.
        let wait_port = port_allocate(0)?;
        let send = port_make_send(wait_port, false)?;
        ConsoleClient::new(&mut rpc, console).interrupts_to(SendRight(send))?;
        cap_drop(send)?;
        Ok(Shell {
            id,
            host_priv: start::host_priv(),
            rpc,
            console,
            wait_port,
            reply_port: port_allocate(0)?,
            fs: None,
        })
    }

    /// Writes `text` to the console.
    fn say(&mut self, text: &str) {
        let mut con = ConsoleClient::new(&mut self.rpc, self.console);
        for chunk in text.as_bytes().chunks(2048) {
            let _ = con.write(chunk);
        }
    }

    fn run(&mut self) -> i32 {
        self.say(
            "\nBaton: a capability microkernel for x86-64, written in Rust (threads with \
             continuations,\nmigrating-thread RPC, ports and messages). This is its shell. \
             Type `help` for the commands.\n\n",
        );
        loop {
            let mut con = ConsoleClient::new(&mut self.rpc, self.console);
            let line = match con.read_line(PROMPT) {
                Ok(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                Err(e) => {
                    baton_rt::println!("shell: the console failed: {}", e.name());
                    return 1;
                }
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            let out = match words.as_slice() {
                [] => String::new(),
                ["help", ..] => String::from(HELP),
                ["ps"] => self.ps(),
                ["ports", task] => match parse_task(task) {
                    Ok(t) => self.ports(t),
                    Err(why) => format!("ports: {why}\n"),
                },
                ["ports", ..] => String::from("ports: usage: ports TASK (a task id, see `ps`)\n"),
                ["stats"] => stats(),
                ["paging"] => paging(),
                ["vmstat"] => vmstat(),
                ["programs"] => programs(false),
                ["programs", "all"] => programs(true),
                ["ls"] => self.ls("/"),
                ["ls", path] => self.ls(path),
                ["ls", ..] => String::from("ls: usage: ls [PATH]\n"),
                ["cat", path] => self.cat(path),
                ["cat", ..] => String::from("cat: usage: cat PATH\n"),
                ["run", program, rest @ ..] => match rest {
                    [args @ .., "&"] => self.run_program(program, args, true, start::bootstrap()),
                    args => self.run_program(program, args, false, start::bootstrap()),
                },
                // The benchmark program, with this shell's host-privilege right (as its
                // bootstrap right: its process-model and floor benchmarks need it), printing
                // a table in TSC ticks labelled as such.
                ["bench"] => self.run_program("bench", &["--table"], false, self.host_priv),
                ["run", ..] => {
                    String::from("run: usage: run PROGRAM [ARGUMENT...] [&] (see `programs`)\n")
                }
                ["kill", task] => match parse_task(task) {
                    Ok(t) => self.kill(t),
                    Err(why) => format!("kill: {why}\n"),
                },
                ["kill", ..] => String::from("kill: usage: kill TASK (a task id, see `ps`)\n"),
                ["vm", task] => match parse_task(task) {
                    Ok(t) => self.vm(t),
                    Err(why) => format!("vm: {why}\n"),
                },
                ["vm", ..] => String::from("vm: usage: vm TASK (a task id, see `ps`)\n"),
                ["trace", "start"] => self.trace_start("0"),
                ["trace", "start", n] => self.trace_start(n),
                ["trace", "stop"] => match host::trace_stop(self.host_priv) {
                    Ok(n) => format!("trace: {n} records printed\n"),
                    Err(e) => format!("trace: {}\n", e.name()),
                },
                ["trace", ..] => String::from("trace: usage: trace start [N] | trace stop\n"),
                ["shutdown"] => {
                    self.say("shutting down\n");
                    let e = host::shutdown(self.host_priv);
                    format!("shutdown: {}\n", e.name())
                }
                ["ps" | "stats" | "paging" | "vmstat" | "programs" | "shutdown" | "bench", ..] => {
                    format!("{}: takes no arguments\n", words[0])
                }
                [other, ..] => format!("unknown command `{other}`; type `help` for the commands\n"),
            };
            self.say(&out);
        }
    }

    /// `vm TASK`.
    fn vm(&mut self, task: u64) -> String {
        use baton_abi::vm::*;
        let (stats, regions) = match host::vm(self.host_priv, task) {
            Ok(v) => v,
            Err(Error::NotFound) => return format!("vm: no task {task} (see `ps`)\n"),
            Err(e) => return format!("vm: {}\n", e.name()),
        };
        let prot = |p: u64| {
            let mut s = String::new();
            s.push(if p & 1 != 0 { 'r' } else { '-' });
            s.push(if p & 2 != 0 { 'w' } else { '-' });
            s.push(if p & 4 != 0 { 'x' } else { '-' });
            s
        };
        let mut out = format!(
            "task {task}: {} regions, {} pages resident\n{:>14} {:>14} {:>8} PROT MAX INHERIT   OBJECT    WIRED\n",
            regions.len(),
            stats.resident,
            "START",
            "END",
            "RESIDENT"
        );
        for r in &regions {
            let inherit = match r.inherit {
                INHERIT_SHARE => "share",
                INHERIT_COPY => "copy",
                _ => "none",
            };
            let object = match r.object {
                OBJECT_ANONYMOUS => "anonymous",
                OBJECT_SHADOW => "shadow",
                OBJECT_PHYSICAL => "physical",
                _ => "pager",
            };
            out.push_str(&format!(
                "{:>#14x} {:>#14x} {:>8} {}  {} {:<9} {:<9} {}\n",
                r.start,
                r.end,
                r.resident,
                prot(r.prot),
                prot(r.max_prot),
                inherit,
                object,
                r.wired
            ));
        }
        out.push_str(&format!(
            "faults: {} ({} read, {} write, {} execute): {} zero fills, {} memory fills, {} copy-on-write copies, {} address errors, {} write errors\n",
            stats.faults,
            stats.read_faults,
            stats.write_faults,
            stats.execute_faults,
            stats.zero_fills,
            stats.memory_fills,
            stats.cow_copies,
            stats.address_errors,
            stats.write_errors
        ));
        out
    }

    /// `trace start [N]`.
    fn trace_start(&mut self, n: &str) -> String {
        let Ok(n) = n.parse::<u64>() else {
            return format!("trace: `{n}` is not a number of records\n");
        };
        match host::trace_start(self.host_priv, n) {
            Ok(n) => format!("trace: on, {n} records per CPU; `trace stop` prints them\n"),
            Err(Error::Busy) => String::from("trace: on already\n"),
            Err(Error::InvalidArgument) => format!(
                "trace: at most {} records per CPU\n",
                baton_abi::host::TRACE_RECORDS_MAX
            ),
            Err(e) => format!("trace: {}\n", e.name()),
        }
    }

    /// `ps`.
    fn ps(&mut self) -> String {
        let tasks = match host::tasks(self.host_priv) {
            Ok(t) => t,
            Err(e) => return format!("ps: {}\n", e.name()),
        };
        let mut out = String::from(
            "  TASK NAME             THREADS STATE      CPU ms  (threads: id, state, priority, CPU ms, waits on, activations)\n",
        );
        for t in &tasks {
            out.push_str(&format!(
                "{:>6} {:<16} {:>7} {:<10} {:>6}\n",
                t.id,
                t.name(),
                t.threads,
                task_state(t),
                t.cpu_ns / 1_000_000
            ));
            let Ok(threads) = host::threads(self.host_priv, t.id) else {
                continue;
            };
            for th in threads {
                let state = match th.state {
                    0 => "running",
                    1 => "ready",
                    2 => "blocked",
                    _ => "ending",
                };
                let on = match (th.blocked, th.on) {
                    (0, _) => String::new(),
                    (b, 0) => format!(" in {}", blocked_name(b)),
                    (b, on) => format!(" in {} on {on:#x}", blocked_name(b)),
                };
                let migrated = if th.depth > 0 {
                    format!(", in task {} ({} calls deep)", th.task, th.depth)
                } else {
                    String::new()
                };
                out.push_str(&format!(
                    "         thread {:#x} {state}, prio {}, cpu {} ms{on}, activations {}{migrated}\n",
                    th.id,
                    th.priority,
                    th.cpu_ns / 1_000_000,
                    th.activations
                ));
            }
        }
        out
    }

    /// `ports TASK`.
    fn ports(&mut self, task: u64) -> String {
        let names = match host::names(self.host_priv, task) {
            Ok(n) => n,
            Err(Error::NotFound) => return format!("ports: no task {task} (see `ps`)\n"),
            Err(e) => return format!("ports: {}\n", e.name()),
        };
        let mut out = format!(
            "task {task}: {} rights\n{:>12} {:<9} {:>12} {:>6} OBJECT\n",
            names.len(),
            "NAME",
            "KIND",
            "PORT",
            "QUEUED"
        );
        for n in names {
            let kind = match n.kind {
                1 => "receive",
                2 => "send",
                3 => "send-once",
                4 => "dead name",
                _ => "?",
            };
            out.push_str(&format!(
                "{:>#12x} {:<9} {:>#12x} {:>6} {}\n",
                n.name,
                kind,
                n.port,
                n.queued,
                object_name(n.object)
            ));
        }
        out
    }

    /// `run PROGRAM [ARGUMENT...] [&]`: the program gets its name and the arguments
    /// (`baton_rt::env::args`).
    fn run_program(
        &mut self,
        program: &str,
        args: &[&str],
        background: bool,
        bootstrap: u64,
    ) -> String {
        // A Ctrl-C typed since the last program is not for the next one.
        let mut stale = [0u8; 64];
        while msg_buf(&mut stale, MSG_RECEIVE, self.wait_port, 0).is_ok() {}
        let mut argv = Vec::with_capacity(args.len() + 1);
        argv.push(program);
        argv.extend_from_slice(args);
        let env = [("SHELL", "shell")];
        if program.starts_with('/') {
            return match self.start_file(program, bootstrap, &argv, &env) {
                Ok(tp) if background => {
                    let _ = cap_drop(tp);
                    format!("{program} started in the background\n")
                }
                Ok(tp) => self.wait_for(tp, program),
                Err(why) => format!("run: {program}: {why}\n"),
            };
        }
        let child = match baton_rt::sys::spawn_args(program, bootstrap, &argv, &env) {
            Ok(id) => id,
            Err(Error::NotFound) => {
                return format!("run: no program `{program}` (see `programs`)\n")
            }
            Err(Error::BadFormat) => return format!("run: `{program}` is not a program\n"),
            Err(Error::TooLarge) => {
                return String::from("run: the name or the arguments are too long\n")
            }
            Err(e) => return format!("run: cannot start `{program}`: {}\n", e.name()),
        };
        if background {
            return format!("[{child}] {program} started in the background\n");
        }
        // Its end destroys its task port: a dead-name notification comes to `wait_port`.
        let watched = kobject::task_port(child)
            .and_then(|tp| port_notify(tp, NOTIFY_KIND_DEAD_NAME, self.wait_port).map(|()| tp));
        let Ok(tp) = watched else {
            // It has ended already.
            return format!("[{child}] {program} ended\n");
        };
        self.wait_for(tp, &format!("[{child}] {program}"))
    }

    /// Waits for the end of the task whose port is `tp` (its dead-name notification
    /// requested for `wait_port`); Ctrl-C ends it. What to print, about `label`.
    fn wait_for(&mut self, tp: u64, label: &str) -> String {
        let mut interrupted = false;
        loop {
            let mut buf = [0u8; 64];
            if msg_buf(&mut buf, MSG_RECEIVE, self.wait_port, FOREVER).is_err() {
                break;
            }
            let Some(h) = MsgHeader::from_bytes(&buf) else {
                continue;
            };
            let word = buf
                .get(HEADER_SIZE..HEADER_SIZE + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes);
            if h.id == NOTIFY_DEAD_NAME && word == tp {
                break;
            }
            if h.id == CONSOLE_INTERRUPT_ID && !interrupted {
                // Ctrl-C: end it; its end then comes as above.
                interrupted = true;
                let _ = kobject::call(
                    self.rpc.ipc(),
                    tp,
                    self.reply_port,
                    TASK_TERMINATE,
                    &[],
                    1_000_000_000,
                );
            }
        }
        let _ = cap_drop(tp);
        if interrupted {
            return format!("{label} stopped by Ctrl-C\n");
        }
        format!("{label} ended\n")
    }

    /// The file server, started (with the disk driver) at the first command that needs it
    /// (`self.fs` is its client then).
    fn files(&mut self) -> Result<&fs_client::Fs, String> {
        if self.fs.is_none() {
            self.start_files()?;
        }
        self.fs
            .as_ref()
            .ok_or_else(|| String::from("no file server"))
    }

    fn start_files(&mut self) -> Result<(), String> {
        // The system's disk driver (`swapon` registers it), or one of its own when the
        // system has none: never a second driver for a device one already drives.
        let registered = NamesClient::new(&mut self.rpc, start::bootstrap())
            .lookup(blk_proto::DISK_NAME)
            .map(|r| r.0);
        let driver = match registered {
            Ok(driver) => {
                self.say("starting the file server on the system's disk driver\n");
                driver
            }
            Err(_) => {
                self.say("starting the disk driver and the file server\n");
                blk_client::start_driver(self.rpc.ipc(), self.host_priv)
                    .map_err(|e| format!("no disk driver ({})", e.name()))?
                    .1
            }
        };
        let started = fs_client::start_server(self.rpc.ipc(), driver);
        // The server holds its own right to the driver.
        let _ = cap_drop(driver);
        let (_, server) = started
            .map_err(|e| format!("no file server: the disk was not accepted ({})", e.name()))?;
        let fs = fs_client::Fs::new(server).map_err(|e| String::from(e.name()))?;
        self.fs = Some(fs);
        Ok(())
    }

    /// A request to the file server failed with `e`: a dead server is forgotten (the next
    /// command starts a new one).
    fn fs_failed(&mut self, e: Error) -> String {
        if matches!(e, Error::DeadName | Error::InvalidName) {
            // The client's reply port goes with it.
            if let Some(fs) = self.fs.take() {
                let _ = cap_drop(fs.server);
            }
            return String::from("the file server is gone (the next command starts it again)");
        }
        String::from(e.name())
    }

    /// `ls [PATH]`.
    fn ls(&mut self, path: &str) -> String {
        if let Err(why) = self.files() {
            return format!("ls: {why}\n");
        }
        let listed = match &self.fs {
            Some(fs) => fs.list(self.rpc.ipc(), path),
            None => Err(Error::DeadName),
        };
        match listed {
            Ok(mut r) => {
                let out = String::from_utf8_lossy(r.text()).into_owned();
                r.release();
                out
            }
            Err(e) => format!("ls: {path}: {}\n", self.fs_failed(e)),
        }
    }

    /// `cat PATH`: the file mapped copy-on-write and its pages touched (at most 64 KiB
    /// shown).
    fn cat(&mut self, path: &str) -> String {
        if let Err(why) = self.files() {
            return format!("cat: {why}\n");
        }
        let opened = match &self.fs {
            Some(fs) => fs.open(self.rpc.ipc(), path),
            None => Err(Error::DeadName),
        };
        let (obj, size) = match opened {
            Ok(o) => o,
            Err(e) => return format!("cat: {path}: {}\n", self.fs_failed(e)),
        };
        let mut out = String::new();
        if size > 0 {
            let len = size.next_multiple_of(4096);
            let flags = baton_rt::memobj::map_flags(1, 1, true, 0);
            match baton_rt::memobj::map(obj, len, 0, flags) {
                Ok(va) => {
                    let shown = size.min(64 << 10) as usize;
                    // SAFETY: `va` maps `len` ≥ `shown` readable bytes of the file,
                    // copy-on-write; nothing writes them while the slice lives.
                    let bytes = unsafe { core::slice::from_raw_parts(va as *const u8, shown) };
                    out = String::from_utf8_lossy(bytes).into_owned();
                    // SAFETY: our mapping; `bytes` is not used past here.
                    let _ = unsafe { baton_rt::vm::deallocate(va, len) };
                    if shown as u64 != size {
                        out.push_str(&format!("\n[cat: {size} bytes, the first {shown} shown]"));
                    }
                }
                Err(e) => out = format!("cat: {path}: cannot map it: {}", e.name()),
            }
        }
        let _ = cap_drop(obj);
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out
    }

    /// Starts the program in the file `path` (Accent's way: the file's object mapped
    /// copy-on-write into the new task, `task_map_program` from a memory object): its task
    /// port.
    fn start_file(
        &mut self,
        path: &str,
        bootstrap: u64,
        argv: &[&str],
        env: &[(&str, &str)],
    ) -> Result<u64, String> {
        self.files()?;
        let opened = match &self.fs {
            Some(fs) => fs.open(self.rpc.ipc(), path),
            None => Err(Error::DeadName),
        };
        let (obj, size) = match opened {
            Ok(o) => o,
            Err(e) => return Err(self.fs_failed(e)),
        };
        let len = size.next_multiple_of(4096).max(4096);
        let flags = baton_rt::memobj::map_flags(1, 1, false, 0);
        let va = baton_rt::memobj::map(obj, len, 0, flags);
        let _ = cap_drop(obj);
        let va = va.map_err(|e| format!("cannot map it: {}", e.name()))?;
        let name = path.rsplit('/').next().unwrap_or(path);
        let made = baton_rt::task::create(0, 0).and_then(|t| {
            let r = baton_rt::task::map_object(t, va, size, name)
                .and_then(|_| baton_rt::task::init_thread(t, 0, 0))
                .and_then(|_| port_notify(t, NOTIFY_KIND_DEAD_NAME, self.wait_port))
                .and_then(|_| baton_rt::task::start(t, bootstrap, argv, env));
            if let Err(e) = r {
                let _ = baton_rt::task::terminate(t);
                let _ = cap_drop(t);
                return Err(e);
            }
            Ok(t)
        });
        // SAFETY: our mapping of the file; nothing refers to it (the new task has its own).
        let _ = unsafe { baton_rt::vm::deallocate(va, len) };
        made.map_err(|e| match e {
            Error::BadFormat => String::from("not a program"),
            e => String::from(e.name()),
        })
    }

    /// `kill TASK`.
    fn kill(&mut self, task: u64) -> String {
        if task == self.id {
            return String::from("kill: that is this shell; use `shutdown`\n");
        }
        let tp = match host::task_port(self.host_priv, task) {
            Ok(tp) => tp,
            Err(Error::NotFound) => return format!("kill: no task {task} (see `ps`)\n"),
            Err(e) => return format!("kill: {}\n", e.name()),
        };
        let r = kobject::call(
            self.rpc.ipc(),
            tp,
            self.reply_port,
            TASK_TERMINATE,
            &[],
            1_000_000_000,
        );
        let _ = cap_drop(tp);
        match r {
            Ok(_) => format!("killed task {task}\n"),
            Err(e) => format!("kill: task {task}: {}\n", e.name()),
        }
    }
}

/// A task id argument.
fn parse_task(word: &str) -> Result<u64, String> {
    word.parse::<u64>()
        .map_err(|_| format!("`{word}` is not a task id (a number, see `ps`)"))
}

/// A task's state for `ps`.
fn task_state(t: &TaskRecord) -> &'static str {
    match t.state {
        TASK_ENDING => "ending",
        TASK_LINGERING => "lingering",
        _ => "live",
    }
}

/// `stats`.
fn stats() -> String {
    let s: Stats = match baton_rt::stats() {
        Ok(s) => s,
        Err(e) => return format!("stats: {}\n", e.name()),
    };
    let mut out = String::from("the kernel's counters since boot (all CPUs):\n");
    let words = s.to_words();
    for (i, (name, value)) in Stats::FIELD_NAMES.iter().zip(words.iter()).enumerate() {
        out.push_str(&format!("  {name:<22}{value:>12}"));
        if i % 2 == 1 {
            out.push('\n');
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// `paging`.
fn paging() -> String {
    let s = match baton_rt::paging::system_stats() {
        Ok(s) => s,
        Err(e) => return format!("paging: {}\n", e.name()),
    };
    let store = if s.store_slots == 0 {
        String::from("no default pager registered (boot with swapon, or run it)")
    } else {
        format!("{} of {} pages in use", s.store_used, s.store_slots)
    };
    format!(
        "user memory: {} of {} frames; swap area: {store}\n\
         page-outs {}, page-ins {}; frames from the free list {}, reclaimed with a process \
         mapping {}, without one {}, clean pager pages dropped {}\n\
         clock: {} pages scanned, {} spared; {} reclaims short of swap, {} no-memory faults, \
         {} faults on lost pages; default pagers registered {}\n",
        s.pageable_used,
        s.pageable_limit,
        s.pageouts,
        s.pageins,
        s.from_free,
        s.reclaimed_mapped,
        s.reclaimed_unmapped,
        s.reclaimed_pager,
        s.scanned,
        s.spared,
        s.no_store,
        s.no_memory,
        s.lost,
        s.pagers_registered
    )
}

/// `vmstat`: the system's fault counters (`vm_stats`, Accent's Table 3-10 classes) and
/// paging counters (`paging_stats`, Table 3-8's breakdown), as the benchmark program's
/// `BENCHVM` lines (`name=value` words, eight a line), which `cargo xtask accent-tables`
/// sets beside Accent's tables.
fn vmstat() -> String {
    let (v, p) = match (
        baton_rt::vm::system_stats(),
        baton_rt::paging::system_stats(),
    ) {
        (Ok(v), Ok(p)) => (v, p),
        (Err(e), _) | (_, Err(e)) => return format!("vmstat: {}\n", e.name()),
    };
    let mut pairs: Vec<(&str, u64)> = baton_abi::vm::VmStats::FIELD_NAMES
        .iter()
        .copied()
        .zip(v.to_words())
        .collect();
    pairs.extend([
        ("paging_from_free", p.from_free),
        ("paging_reclaimed_mapped", p.reclaimed_mapped),
        ("paging_reclaimed_unmapped", p.reclaimed_unmapped),
        ("paging_reclaimed_pager", p.reclaimed_pager),
        ("paging_pageouts", p.pageouts),
        ("paging_pageins", p.pageins),
        ("paging_scanned", p.scanned),
        ("paging_spared", p.spared),
        ("paging_no_store", p.no_store),
    ]);
    let mut out = String::new();
    for chunk in pairs.chunks(8) {
        out.push_str("BENCHVM");
        for (name, value) in chunk {
            out.push_str(&format!(" {name}={value}"));
        }
        out.push('\n');
    }
    out
}

/// `programs`.
fn programs(all: bool) -> String {
    let mut out = String::from("programs (`run NAME`):\n");
    let mut tests = Vec::new();
    let mut line = String::from(" ");
    let add = |out: &mut String, line: &mut String, name: &str| {
        if line.len() + name.len() > 76 {
            out.push_str(line);
            out.push('\n');
            *line = String::from(" ");
        }
        line.push(' ');
        line.push_str(name);
    };
    for i in 0..256 {
        let Ok((m, test)) = baton_rt::sys::module_info_kind(i) else {
            break;
        };
        if test {
            tests.push(m);
        } else {
            add(&mut out, &mut line, m.name());
        }
    }
    out.push_str(&line);
    out.push('\n');
    if all {
        out.push_str("test programs (what `cargo xtask test` boots):\n");
        line = String::from(" ");
        for m in &tests {
            add(&mut out, &mut line, m.name());
        }
        out.push_str(&line);
        out.push('\n');
    } else {
        out.push_str(&format!(
            "and {} test programs (`programs all` lists them)\n",
            tests.len()
        ));
    }
    out
}
