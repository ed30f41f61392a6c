//! The results of `cargo xtask bench` as files: `results/report.md`, `results/baton.json`,
//! `results/baton-cycles.json` (cycles under hardware KVM), `results/linux.json` and the
//! SVG plots, and the headline table printed at the end.
//!
//! Everything here is a pure function of the parsed runs ([`Inputs`]), except
//! [`Meta::collect`], which asks git, QEMU and `/proc/cpuinfo`. Four explicit tables say
//! how the figures are set side by side, each entry with its reason:
//!
//! - [`FLOORS`]: which `floor.*` row each Baton row is a multiple of;
//! - [`LINUX_PAIRS`]: which Linux row measures the same operation as a Baton row;
//! - [`RPC_SIZES`]: which Linux UNIX-socket row carries the same data as each Baton RPC
//!   size;
//! - [`REFERENCES`]: the papers' (and seL4's) figures for a Baton row.
//!
//! The instruction tables and the cycles table are kept apart, and every heading of the
//! report names its metric.
//!
//! A row, pair or reference whose rows a run does not have is left out: nothing here
//! holds a Baton figure. `docs/benchmarks.md` describes the files.

use crate::bench::{Paths, Results, Row};
use crate::cycles::{self, Cycles};
use crate::json;
use crate::linux::LinuxRun;
use crate::plot::{self, Group, Series};
use crate::workspace::command;
use std::fmt::Write as _;
use std::path::Path;

/// The machine the figures come from: QEMU's TCG CPU, counting instructions.
pub const GUEST_CPU: &str = "QEMU TCG -icount shift=0";
/// The machine of the cycles pass: the host's CPU under hardware KVM.
pub const KVM_CPU: &str = "QEMU KVM -cpu host";
/// File name of the Baton-versus-Linux bar chart.
pub const BARS_SVG: &str = "baton-vs-linux.svg";
/// File name of the RPC-cost-against-size plot.
pub const RPC_SVG: &str = "rpc-size.svg";
/// File name of the cycles results (written only when cycles were measured).
pub const CYCLES_JSON: &str = "baton-cycles.json";
/// Every plot file the report may write (stale ones are removed).
pub const PLOTS: [&str; 5] = [
    BARS_SVG,
    RPC_SVG,
    crate::accent::FIG_3_1_SVG,
    crate::accent::FIG_3_2_SVG,
    crate::accent::FIG_3_3_SVG,
];

/// What the figures were measured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// What the main figures count: `instructions` (cycles are a separate pass, [`Cycles`]).
    pub metric: String,
    /// First line of `qemu-system-x86_64 --version`.
    pub qemu: String,
    /// `git rev-parse --short HEAD`, `-dirty` if the tree has changes.
    pub commit: String,
    /// The host's CPU: the first `model name` of `/proc/cpuinfo`.
    pub host_cpu: String,
    /// The host's number of CPUs (`processor` lines of `/proc/cpuinfo`).
    pub host_cpus: u64,
}

impl Meta {
    /// Asks QEMU (`qemu`), git and `/proc/cpuinfo`.
    pub fn collect(qemu: &Path) -> Meta {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let (host_cpu, host_cpus) = cpu_model(&cpuinfo);
        Meta {
            metric: "instructions".to_string(),
            qemu: qemu_version(qemu),
            commit: git_commit(),
            host_cpu,
            host_cpus,
        }
    }
}

/// The first `model name` in `/proc/cpuinfo` text (`unknown` if none) and the number of
/// `processor` entries.
pub fn cpu_model(cpuinfo: &str) -> (String, u64) {
    let field = |line: &str, key: &str| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    };
    let model = cpuinfo
        .lines()
        .find_map(|l| field(l, "model name"))
        .unwrap_or_else(|| "unknown".to_string());
    let count = cpuinfo
        .lines()
        .filter(|l| field(l, "processor").is_some())
        .count() as u64;
    (model, count)
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

/// A fingerprint of the bytes of `files`, in order: FNV-1a, 64 bits, in hexadecimal. The
/// same kernel and initrd give the same figures; a different fingerprint may or may not
/// (the kernel's debug information holds the checkout's path).
pub fn fingerprint(files: &[&[u8]]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in files.iter().flat_map(|f| f.iter()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Whether Baton's figures were checked by a second run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// A second run gave the same figure for every row.
    Agreed,
    /// A second run gave different figures (the command fails).
    Differed,
    /// One run only (`--quick`).
    NotChecked,
}

/// Everything a report is made of.
pub struct Inputs<'a> {
    /// What the figures were measured with.
    pub meta: &'a Meta,
    /// Baton's rows (every boot's, in order) and kernel paths.
    pub baton: &'a Results,
    /// The [`fingerprint`] of the kernel and the initrd that gave them.
    pub image: &'a str,
    /// Whether Baton's figures were checked by a second run.
    pub repeat: Repeat,
    /// The Linux guest's figures, or why there are none.
    pub linux: Result<&'a LinuxRun, String>,
    /// Baton's figures in TSC cycles under hardware KVM, or why there are none.
    pub cycles: Result<&'a Cycles, String>,
}

// ---- The tables that set figures side by side -------------------------------------------

/// Each Baton row's floor: the cheapest measured operation that every iteration of the row
/// contains, so that the row's figure as a multiple of it says how much the operation adds.
/// The first entry whose prefix the row's name starts with applies; an empty floor means
/// none. A floor the run does not have leaves the multiple blank. A new `floor.*` row in
/// `user/programs/src/bin/bench.rs` becomes some rows' floor by an entry here.
pub const FLOORS: &[(&str, &str)] = &[
    // The floors themselves are not multiples of anything (`floor.syscall.null`, the
    // cheapest dispatched call, included: it is the floor of no row now, kept as it was).
    ("floor.", ""),
    // Sizes are not operations.
    ("mem.", ""),
    // The Sting runtime's operations stay in user space (no system call): no floor row
    // is contained in them.
    ("sting.", ""),
    // A yield, a switch (by handoff or switch_context), a wait or a wake is at least one
    // system call that saves and restores every register in the thread's frame, as
    // `floor_full` does with nothing else (the same entry and exit code).
    ("sched.", "floor.syscall.full"),
    ("sync.", "floor.syscall.full"),
    // Creating a thread, running it and waiting for its end: at least one such call.
    ("thread.", "floor.syscall.full"),
    // An RPC goes into another address space and back: at least the floor
    // cross-address-space call (two system calls, two address-space switches, no message).
    ("rpc.", "floor.xas.call"),
    // An exception starts with a CPU fault from user mode and ends by resuming the thread
    // behind it: at least the floor page-fault round trip.
    ("exc.", "floor.fault.roundtrip"),
    // One call between extension domains, inside a handler: per call, no kernel entry.
    ("spin.call.", ""),
    // Anything else enters the kernel through a full save at least once.
    ("", "floor.syscall.full"),
];

/// The floor row of the Baton row `name` ([`FLOORS`]), if it has one.
pub fn floor_of(name: &str) -> Option<&'static str> {
    FLOORS
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, floor)| *floor)
        .filter(|floor| !floor.is_empty())
}

/// A Baton row and the Linux row that measures the same operation.
#[derive(Clone, Copy, Debug)]
pub struct Pair {
    /// The Baton row.
    pub baton: &'static str,
    /// The Linux row (`bench/linux/linuxbench.c`).
    pub linux: &'static str,
    /// Why the two are the same operation (printed in the report).
    pub why: &'static str,
}

/// Which Linux row each Baton row is compared with. A Baton row has at most one; a Linux
/// row may serve several Baton rows (two paths of Baton for one operation).
pub const LINUX_PAIRS: &[Pair] = &[
    // The same instructions on both sides: the measurement's own cost.
    Pair {
        baton: "floor.rdtsc.overhead",
        linux: "linux.rdtsc.overhead",
        why: "two `lfence; rdtsc; lfence` timestamps back to back: the same instructions, \
              no kernel",
    },
    // The smallest round trip into each kernel and back.
    Pair {
        baton: "floor.syscall.null",
        linux: "linux.syscall.null",
        why: "the cheapest system call, issued inline with `syscall`: Baton's `null`, \
              Linux's `getppid` (entry, dispatch, a trivial body, exit)",
    },
    // What the program asks for is the same; Linux answers without entering its kernel.
    Pair {
        baton: "floor.syscall.clock",
        linux: "linux.clock.gettime",
        why: "the program reads the monotonic clock: Baton with a system call, Linux in the \
              vDSO without one",
    },
    // The switch the continuations paper is about, on both kernels.
    Pair {
        baton: "sched.yield.switch",
        linux: "linux.sched.yield.switch",
        why: "thread A yields to thread B of the same address space, blocked in its own \
              yield: from A's timestamp before the yield to B's after its yield returns",
    },
    // Linux always keeps a kernel stack per thread: its switch is a process-model switch.
    Pair {
        baton: "sched.pmodel.switch",
        linux: "linux.sched.yield.switch",
        why: "the same yield by Baton's process-model path, which keeps A's kernel stack \
              and switches stacks (`switch_context`), as Linux always does",
    },
    // Baton's wait/wake are futexes: a word, a compare, a sleep, a wake.
    Pair {
        baton: "sync.waitwake.pingpong",
        linux: "linux.futex.pingpong",
        why: "one round trip between two threads through two words: store, wake the other, \
              wait until it answers (`wait`/`wake`; `FUTEX_WAIT`/`FUTEX_WAKE`)",
    },
    // A message with nothing in it to another address space and one back. Linux's figures
    // are the client's whole round trip, server's work included: Baton's `.roundtrip` rows
    // (the rows without it are sel4bench's one-way sums, which leave the server's work out).
    Pair {
        baton: "rpc.null.fast.roundtrip",
        linux: "linux.pipe.pingpong",
        why: "an empty request to another process and an empty reply back, the client's \
              whole round trip (Linux's pipes carry one byte each way)",
    },
    Pair {
        baton: "rpc.null.migrating.roundtrip",
        linux: "linux.pipe.pingpong",
        why: "as `rpc.null.fast.roundtrip`, with the client's own thread running the server's \
              code (migrating RPC) where Linux wakes the server process",
    },
    Pair {
        baton: "rpc.1k.migrating.roundtrip",
        linux: "linux.unix.rpc1024",
        why: "as `rpc.1k.fast.roundtrip`, migrating",
    },
    Pair {
        baton: "rpc.null.slow.roundtrip",
        linux: "linux.pipe.pingpong",
        why: "as `rpc.null.fast.roundtrip`, with Baton's messages queued, as Linux's pipes \
              queue bytes",
    },
    // A request and an equal reply between client and server processes, with data: Linux's
    // UNIX stream socket carrying the same number of bytes each way as Baton's in-line
    // data (`linux.unix.rpc<bytes>`), the client's whole round trip on both sides.
    Pair {
        baton: "rpc.32b.fast.roundtrip",
        linux: "linux.unix.rpc32",
        why: "a 32-byte request and a 32-byte reply between a client and a server process, \
              the client's whole round trip (Baton: in-line data in the message; Linux: \
              `write` and `read` on a UNIX stream socket pair)",
    },
    Pair {
        baton: "rpc.32b.slow.roundtrip",
        linux: "linux.unix.rpc32",
        why: "as `rpc.32b.fast.roundtrip`, with Baton's messages queued, as Linux's socket \
              queues its bytes",
    },
    Pair {
        baton: "rpc.1k.fast.roundtrip",
        linux: "linux.unix.rpc1024",
        why: "as `rpc.32b.fast.roundtrip` with 1,024 bytes each way: both kernels copy the \
              data in from the sender and out to the receiver",
    },
    Pair {
        baton: "rpc.1k.slow.roundtrip",
        linux: "linux.unix.rpc1024",
        why: "as `rpc.1k.fast.roundtrip`, with Baton's messages queued",
    },
    // The kernel stops a thread, a user-level handler runs, and the thread resumes: Baton
    // by an exception RPC to a handler thread, Linux by a signal handler on the same
    // thread. (Linux's event is a `kill` system call, not a fault; no Linux row has a
    // fault whose handler resumes past the instruction without changing protections.)
    Pair {
        baton: "exc.roundtrip",
        linux: "linux.signal.roundtrip",
        why: "the kernel delivers an event to a user-level handler and resumes the thread \
              where the handler says: Baton's `ud2` exception RPC to a handler thread and \
              its reply with new registers; Linux's signal (from `kill`, not a fault) to a \
              handler and `rt_sigreturn`",
    },
    // Out-of-line data (Accent's MoveWords): Baton maps the region copy-on-write and the
    // receiver faults in the pages it reads; Linux copies the bytes through a pipe.
    Pair {
        baton: "ipc.ool.4k",
        linux: "linux.ipc.ool.4k",
        why: "an RPC carrying 4 KiB to another thread of control that reads one word of \
              every page, the client's whole round trip (Baton: an out-of-line region, \
              copy-on-write; Linux: the bytes written into a pipe to a server process)",
    },
    Pair {
        baton: "ipc.ool.4k.move",
        linux: "linux.ipc.ool.4k",
        why: "as `ipc.ool.4k`, the region moved out of the client (`OOL_DEALLOCATE`)",
    },
    Pair {
        baton: "ipc.ool.64k",
        linux: "linux.ipc.ool.64k",
        why: "as `ipc.ool.4k` with 64 KiB",
    },
    Pair {
        baton: "ipc.ool.64k.move",
        linux: "linux.ipc.ool.64k",
        why: "as `ipc.ool.64k`, moved",
    },
    Pair {
        baton: "ipc.ool.1m",
        linux: "linux.ipc.ool.1m",
        why: "as `ipc.ool.4k` with 1 MiB: Baton's cost grows with the pages touched, \
              Linux's with the bytes copied",
    },
    Pair {
        baton: "ipc.ool.1m.move",
        linux: "linux.ipc.ool.1m",
        why: "as `ipc.ool.1m`, moved",
    },
    // A thread's whole life, seen from its creator.
    Pair {
        baton: "thread.create_exit",
        linux: "linux.thread.create_join",
        why: "create a thread that ends at once and wait for its end (Baton: spawn, \
              `thread_exit`, a wait on a word; glibc: `pthread_create`, `pthread_join`)",
    },
    // A process's whole life, seen from its creator (Accent's null program).
    Pair {
        baton: "task.null",
        linux: "linux.fork.exit",
        why: "make a process that ends at once and wait for its end: Baton makes an empty \
              task, maps a program into it copy-on-write, makes its thread and starts it \
              (Accent's steps); Linux forks (`linux.spawn.null`, `posix_spawn` of a \
              program, is the closer operation and costs more)",
    },
    // Accent's Table 3-4: a 56 KiB file read by mapping it and touching its pages.
    Pair {
        baton: "file.read.56k",
        linux: "linux.file.read.56k",
        why: "map a 56 KiB file on a virtio disk's FAT file system copy-on-write, read a \
              word of each of its 14 pages, unmap it, the caches cold (Baton: a new file \
              server; Linux: the page cache dropped); the disk's time left out (Baton \
              subtracts its halted ticks, Linux counts the process's CPU time)",
    },
    Pair {
        baton: "file.read.56k.warm",
        linux: "linux.file.read.56k.warm",
        why: "the same with the file's pages in memory (Baton: resident in the file's \
              object; Linux: in the page cache)",
    },
    Pair {
        baton: "task.fork",
        linux: "linux.fork.1m",
        why: "a copy-on-write copy of a process with 1 MiB resident whose child exits at \
              once, until the parent has waited for it",
    }, // SPIN's Table 4, the Appel–Li suite: Baton with the handler as a WebAssembly
    // extension (in the kernel, no crossing), Linux with `mprotect` and a SIGSEGV handler.
    Pair {
        baton: "spin.vm.trap",
        linux: "linux.appel.trap",
        why: "from before a write to a read-only page to the fault handler's first \
              timestamp (Baton: a `Translation.ProtectionFault` extension; Linux: SIGSEGV)",
    },
    Pair {
        baton: "spin.vm.fault",
        linux: "linux.appel.fault",
        why: "a write to a read-only page whose handler makes it writable, as the faulting \
              thread sees it",
    },
    Pair {
        baton: "spin.vm.prot1",
        linux: "linux.appel.prot1",
        why: "making one written page read-only (Baton: a system call an extension added, \
              `Translation.Protect`; Linux: `mprotect`)",
    },
    Pair {
        baton: "spin.vm.prot100",
        linux: "linux.appel.prot100",
        why: "making 100 written pages read-only with one call",
    },
    Pair {
        baton: "spin.vm.unprot100",
        linux: "linux.appel.unprot100",
        why: "making 100 read-only resident pages writable with one call",
    },
    Pair {
        baton: "spin.vm.appel1",
        linux: "linux.appel.appel1",
        why: "a write to a protected page whose handler unprotects it and protects another",
    },
    Pair {
        baton: "spin.vm.appel2",
        linux: "linux.appel.appel2",
        why: "protecting 100 pages with one call, then a write to each, each handler \
              unprotecting its page; per page",
    },
    // SPIN's Table 3 through its integrated thread package, beside pthreads.
    Pair {
        baton: "spin.thread.forkjoin",
        linux: "linux.thread.create_join",
        why: "fork a thread that returns at once and join it (Baton: the built-in \
              `builtin.cthreads` package's system calls; glibc: `pthread_create`, \
              `pthread_join`)",
    },
    Pair {
        baton: "spin.thread.pingpong",
        linux: "linux.condvar.pingpong",
        why: "one round of two threads signalling each other and waiting (Baton: the \
              package's `handoff`; glibc: a mutex and two condition variables)",
    },
    // The Sting paper's Figure 3 beside a user-level thread package on Linux: the C
    // library's contexts (`makecontext`/`swapcontext`), one FIFO ready queue, one kernel
    // thread (`bench/linux/linuxbench.c`, "user-level threads").
    Pair {
        baton: "sting.create",
        linux: "linux.ult.create",
        why: "make a thread object that has not started (no stack): Sting's `delay`; a \
              heap-allocated record with its function",
    },
    Pair {
        baton: "sting.fork_value",
        linux: "linux.ult.fork_value",
        why: "fork a null user-level thread and take its value: a pooled stack, started, \
              ended, the forker woken and switched back to (Linux: `makecontext`, two \
              `swapcontext`-family switches)",
    },
    Pair {
        baton: "sting.enqueue_dequeue",
        linux: "linux.ult.enqueue_dequeue",
        why: "a thread put on the ready queue and taken off (Sting: through the policy \
              manager and the thread's state; Linux: a plain ring)",
    },
    Pair {
        baton: "sting.switch",
        linux: "linux.ult.switch",
        why: "user-level thread A yields to B, waiting in its own yield: A's stamp before \
              to B's after (Linux: `swapcontext`, whose `rt_sigprocmask` is a system call)",
    },
    Pair {
        baton: "sting.block_resume",
        linux: "linux.ult.block_resume",
        why: "A makes blocked user-level thread B ready and blocks; B resumes: A's stamp \
              before to B's after its block returned",
    },
    // Faults of Accent's Table 3-3, from the access to its resumption.
    Pair {
        baton: "vm.fault.zero",
        linux: "linux.fault.zero",
        why: "the first write to an untouched page of anonymous memory: a zeroed page \
              mapped and the write retried",
    },
    Pair {
        baton: "vm.fault.cow",
        linux: "linux.fault.cow",
        why: "the first write to a copy-on-write page while the other copy still exists: \
              the page copied",
    },
    Pair {
        baton: "vm.fault.fill",
        linux: "linux.fault.fill",
        why: "the first read of a resident page of shared memory through a new mapping \
              (Baton: another memory object's page; Linux: a memfd's page-cache page, with \
              its fault-around mapping 16 pages)",
    },
    Pair {
        baton: "vm.fault.pager",
        linux: "linux.uffd.fault",
        why: "the first read of a page whose contents a user-level pager supplies: the \
              fault reaches the pager (Baton: a data request message; Linux: a userfaultfd \
              event to another thread), which supplies the page, and the access resumes",
    },
    Pair {
        baton: "vm.fault.pager.migrating",
        linux: "linux.uffd.fault",
        why: "as `vm.fault.pager`, the faulting thread itself running the pager's handler \
              in an activation",
    },
    // The map's own work, against pages (Accent's Figure 3-1).
    Pair {
        baton: "vm.allocate.1",
        linux: "linux.mmap.1",
        why: "allocate untouched anonymous memory anywhere (one page)",
    },
    Pair {
        baton: "vm.allocate.16",
        linux: "linux.mmap.16",
        why: "as `vm.allocate.1`, 16 pages",
    },
    Pair {
        baton: "vm.allocate.256",
        linux: "linux.mmap.256",
        why: "as `vm.allocate.1`, 256 pages",
    },
    Pair {
        baton: "vm.allocate.1024",
        linux: "linux.mmap.1024",
        why: "as `vm.allocate.1`, 1,024 pages",
    },
    Pair {
        baton: "vm.deallocate.1",
        linux: "linux.munmap.1",
        why: "deallocate untouched anonymous memory (one page)",
    },
    Pair {
        baton: "vm.deallocate.16",
        linux: "linux.munmap.16",
        why: "as `vm.deallocate.1`, 16 pages",
    },
    Pair {
        baton: "vm.deallocate.256",
        linux: "linux.munmap.256",
        why: "as `vm.deallocate.1`, 256 pages",
    },
    Pair {
        baton: "vm.deallocate.1024",
        linux: "linux.munmap.1024",
        why: "as `vm.deallocate.1`, 1,024 pages",
    },
    // Protection of resident pages.
    Pair {
        baton: "vm.protect.1",
        linux: "linux.mprotect.1",
        why: "make resident, written pages read-only (one page): the map changed, the \
              translations write-protected and flushed",
    },
    Pair {
        baton: "vm.protect.100",
        linux: "linux.mprotect.100",
        why: "as `vm.protect.1`, 100 pages",
    },
    Pair {
        baton: "vm.protect.1024",
        linux: "linux.mprotect.1024",
        why: "as `vm.protect.1`, 1,024 pages",
    },
    Pair {
        baton: "vm.unprotect.1",
        linux: "linux.mprotect.rw.1",
        why: "give write access back to resident, read-only pages (one page): the map \
              changed (Baton leaves the translations to the next store's fault; Linux may \
              make them writable at once)",
    },
    Pair {
        baton: "vm.unprotect.100",
        linux: "linux.mprotect.rw.100",
        why: "as `vm.unprotect.1`, 100 pages",
    },
    Pair {
        baton: "vm.unprotect.1024",
        linux: "linux.mprotect.rw.1024",
        why: "as `vm.unprotect.1`, 1,024 pages",
    },
];

/// The Linux row paired with the Baton row `name` ([`LINUX_PAIRS`]).
pub fn linux_pair(name: &str) -> Option<&'static Pair> {
    LINUX_PAIRS.iter().find(|p| p.baton == name)
}

/// One size of the RPC-against-size comparison: Baton's size word (`rpc.<size>.*`) and the
/// Linux UNIX-socket row that carries the same data.
#[derive(Clone, Copy, Debug)]
pub struct RpcSize {
    /// Baton's size word: `null`, `32b`, `1k`.
    pub baton: &'static str,
    /// The Linux row (`linux.unix.rpc<bytes>`).
    pub linux: &'static str,
    /// Why these are the same amount of data (printed in the report).
    pub why: &'static str,
}

/// The RPC sizes set side by side in the report's "RPC against size" table (and drawn in
/// `rpc-size.svg`). Every Linux figure is a UNIX stream socket round trip, so that Linux's
/// growth with size is one mechanism's; Linux's cheapest one-byte round trip (pipes) is
/// paired with the null RPC in [`LINUX_PAIRS`].
pub const RPC_SIZES: &[RpcSize] = &[
    RpcSize {
        baton: "null",
        linux: "linux.unix.rpc1",
        why: "no data on Baton (the header alone); one byte on Linux, the least a stream \
              socket carries (an empty write sends nothing)",
    },
    RpcSize {
        baton: "32b",
        linux: "linux.unix.rpc32",
        why: "32 bytes each way on both",
    },
    RpcSize {
        baton: "1k",
        linux: "linux.unix.rpc1024",
        why: "1,024 bytes each way on both",
    },
];

/// A figure from a paper or a peer system.
#[derive(Clone, Copy, Debug)]
pub enum Figure {
    /// A count of instructions: compared as Baton's figure ÷ this.
    Instructions(u64),
    /// A time in the source's machine cycles: set beside the row for scale only, with no
    /// ratio (a cycle of a 1990s RISC machine is not an instruction here).
    Cycles(u64),
    /// The ratio `num / den` of two of the source's figures (any unit), compared with
    /// Baton's figure ÷ Baton's row `base`.
    Ratio {
        /// The source's figure for the operation of this row.
        num: u64,
        /// The source's figure for the operation of `base`.
        den: u64,
        /// The Baton row that plays `den`'s part.
        base: &'static str,
    },
}

/// A published figure set beside a Baton row.
#[derive(Clone, Copy, Debug)]
pub struct Reference {
    /// The Baton row.
    pub row: &'static str,
    /// The figure.
    pub figure: Figure,
    /// What the source measured.
    pub what: &'static str,
    /// Where: a key of [`SOURCES`] and a table.
    pub source: &'static str,
}

/// The sources of [`REFERENCES`].
pub const SOURCES: &[(&str, &str)] = &[
    (
        "[000]",
        "Draves, Bershad, Rashid, Dean, *Using Continuations to Implement Thread Management \
         and Communication in Operating Systems*, SOSP 1991 (Mach 3.0; MK40 with \
         continuations, MK32 without, Mach 2.5; DECstation 3100)",
    ),
    (
        "[001]",
        "Ford, Lepreau, *Evolving Mach 3.0 to a Migrating Thread Model*, USENIX 1994 \
         (HP PA-RISC; \"switching\" is Mach 3.0's RPC with handoff, \"migrating\" theirs)",
    ),
    (
        "sel4bench",
        "seL4's benchmark suite, measured in instructions the same way, as the \
         continuations and IPC issues quote it",
    ),
];

/// The published figures set beside Baton's rows. The papers counted kernel paths alone on
/// 1990s RISC machines; Baton's rows are whole user-to-user paths with their timestamps, so
/// the ratios say how far apart the paths are, not who is faster.
pub const REFERENCES: &[Reference] = &[
    // [000] Table 4: MK40's system call entry (64) and exit (35), the kernel's part of a
    // null system call.
    Reference {
        row: "floor.syscall.null",
        figure: Figure::Instructions(99),
        what: "MK40 system call entry 64 + exit 35",
        source: "[000] Table 4",
    },
    // [000] Table 4: the stack handoff, the heart of a continuation switch.
    Reference {
        row: "sched.yield.switch",
        figure: Figure::Instructions(83),
        what: "MK40 stack handoff",
        source: "[000] Table 4",
    },
    Reference {
        row: "sched.yield.switch",
        figure: Figure::Instructions(272),
        what: "seL4 yield to another thread (target: fewer)",
        source: "sel4bench",
    },
    // [000] Table 4: the process model's full context switch, and how much dearer it is
    // than a handoff: Baton's process-model switch against its handoff.
    Reference {
        row: "sched.pmodel.switch",
        figure: Figure::Instructions(250),
        what: "MK32 context switch",
        source: "[000] Table 4",
    },
    Reference {
        row: "sched.pmodel.switch",
        figure: Figure::Ratio {
            num: 250,
            den: 83,
            base: "sched.yield.switch",
        },
        what: "context switch ÷ stack handoff",
        source: "[000] Table 4",
    },
    Reference {
        row: "sched.pmodel.roundtrip",
        figure: Figure::Ratio {
            num: 250,
            den: 83,
            base: "sched.yield.roundtrip",
        },
        what: "context switch ÷ stack handoff",
        source: "[000] Table 4",
    },
    // [001] Table 1: the kernel's instructions for a null RPC on Mach 3.0's switching path
    // (combined send/receive, handoff, recognition), the path Baton's fast path follows;
    // `rpc.null.fast` is, like seL4's figure, the two one-way trips without the server's
    // work.
    Reference {
        row: "rpc.null.fast",
        figure: Figure::Instructions(1128),
        what: "Mach 3.0 switching null RPC, kernel path",
        source: "[001] Table 1",
    },
    Reference {
        row: "rpc.null.fast",
        figure: Figure::Instructions(425),
        what: "seL4 fastpath Call + ReplyRecv",
        source: "sel4bench",
    },
    // [001] Table 3 (cycles, switching path): how the RPC grows with in-line data, kernel
    // time alone against the one-way sums, kernel and user marshaling against the round
    // trips.
    Reference {
        row: "rpc.32b.fast",
        figure: Figure::Ratio {
            num: 2379,
            den: 2318,
            base: "rpc.null.fast",
        },
        what: "switching RPC kernel time, 32 bytes in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.fast",
        figure: Figure::Ratio {
            num: 4753,
            den: 2318,
            base: "rpc.null.fast",
        },
        what: "switching RPC kernel time, 1 KiB in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32b.fast.roundtrip",
        figure: Figure::Ratio {
            num: 3050,
            den: 2986,
            base: "rpc.null.fast.roundtrip",
        },
        what: "switching RPC with marshaling, 32 bytes in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.fast.roundtrip",
        figure: Figure::Ratio {
            num: 6470,
            den: 2986,
            base: "rpc.null.fast.roundtrip",
        },
        what: "switching RPC with marshaling, 1 KiB in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    // [001] Table 1: the kernel's instructions for a null RPC on the migrating path; Baton's
    // `rpc.null.migrating` is the same one-way sum as `rpc.null.fast` (client timestamp to
    // the dispatch routine, and back). The target: below seL4's figure.
    Reference {
        row: "rpc.null.migrating",
        figure: Figure::Instructions(213),
        what: "Mach 3.0 migrating null RPC, kernel path",
        source: "[001] Table 1",
    },
    Reference {
        row: "rpc.null.migrating",
        figure: Figure::Instructions(425),
        what: "seL4 fastpath Call + ReplyRecv (target: fewer)",
        source: "sel4bench",
    },
    // [001] Tables 1 and 3: switching ÷ migrating. The paper's switching path is Mach's
    // optimised RPC path *without* continuations' handoff cleverness being the point: the
    // issue compares against Baton's queued path (`rpc.*.slow`, no continuation fast path;
    // target: at least 3x), and the fast path's ratio is shown beside it.
    Reference {
        row: "rpc.null.slow",
        figure: Figure::Ratio {
            num: 1128,
            den: 213,
            base: "rpc.null.migrating",
        },
        what: "switching ÷ migrating null RPC, kernel path (instructions)",
        source: "[001] Table 1",
    },
    Reference {
        row: "rpc.null.fast",
        figure: Figure::Ratio {
            num: 2318,
            den: 648,
            base: "rpc.null.migrating",
        },
        what: "switching ÷ migrating null RPC, kernel time (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32b.slow",
        figure: Figure::Ratio {
            num: 2379,
            den: 683,
            base: "rpc.32b.migrating",
        },
        what: "switching ÷ migrating, 32 bytes in, kernel time (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.slow",
        figure: Figure::Ratio {
            num: 4753,
            den: 1676,
            base: "rpc.1k.migrating",
        },
        what: "switching ÷ migrating, 1 KiB in, kernel time (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.null.slow.roundtrip",
        figure: Figure::Ratio {
            num: 2986,
            den: 880,
            base: "rpc.null.migrating.roundtrip",
        },
        what: "switching ÷ migrating null RPC with marshaling (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.slow.roundtrip",
        figure: Figure::Ratio {
            num: 6470,
            den: 3210,
            base: "rpc.1k.migrating.roundtrip",
        },
        what: "switching ÷ migrating, 1 KiB in, with marshaling (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.migrating",
        figure: Figure::Ratio {
            num: 1676,
            den: 648,
            base: "rpc.null.migrating",
        },
        what: "migrating RPC kernel time, 1 KiB in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    // [001] Table 3, 32K In (cycles): 32 KiB of in-line data, which Baton's one-page IPC
    // buffer cannot carry, so both rows send it from the client's own buffer (`MSG_BUF`):
    // `rpc.32k.switching` through the general path (copied into the kernel and out again,
    // as Mach's switching path copies it twice), `rpc.32k.migrating` straight from the
    // client's pages into the activation's and back (once each way). The paper's two
    // migrating figures are its original measurement and one with the buffers shifted so
    // that their cache lines conflict on the HP730's direct-mapped cache.
    Reference {
        row: "rpc.32k.switching",
        figure: Figure::Cycles(137808),
        what: "switching RPC, 32 KiB in, kernel time",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32k.switching",
        figure: Figure::Ratio {
            num: 137808,
            den: 34703,
            base: "rpc.32k.migrating",
        },
        what: "switching ÷ migrating, 32 KiB in, kernel time (cycles; original measurement)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32k.switching",
        figure: Figure::Ratio {
            num: 137808,
            den: 84527,
            base: "rpc.32k.migrating",
        },
        what: "switching ÷ migrating, 32 KiB in, kernel time (cycles; buffers' cache lines conflicting)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32k.switching",
        figure: Figure::Ratio {
            num: 137808,
            den: 2318,
            base: "rpc.null.slow",
        },
        what: "switching RPC kernel time, 32 KiB in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32k.migrating",
        figure: Figure::Cycles(34703),
        what: "migrating RPC, 32 KiB in, kernel time (original measurement)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32k.migrating",
        figure: Figure::Cycles(84527),
        what: "migrating RPC, 32 KiB in, kernel time (buffers' cache lines conflicting)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32k.migrating",
        figure: Figure::Ratio {
            num: 34703,
            den: 648,
            base: "rpc.null.migrating",
        },
        what: "migrating RPC kernel time, 32 KiB in ÷ null (cycles; original measurement)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32k.switching.roundtrip",
        figure: Figure::Ratio {
            num: 183164,
            den: 109857,
            base: "rpc.32k.migrating.roundtrip",
        },
        what: "switching ÷ migrating, 32 KiB in, with marshaling (cycles)",
        source: "[001] Table 3",
    },
    // [001] Table 3, "Kernel Time + User Marshaling" (cycles): the calls through MIG's
    // stubs and server loop as the client sees them. Baton's `rpc.*.marshal` rows are the
    // same calls through the interface macro's stubs and dispatch, switching (the message
    // loop `rpc::serve`) and migrating (`migrate::serve`): each row beside its cycles, the
    // switching ÷ migrating ratios beside the paper's 3.4 / 3.2 / 2.0, and the growth with
    // in-line data on each path.
    Reference {
        row: "rpc.null.switching.marshal",
        figure: Figure::Cycles(2986),
        what: "switching null RPC, kernel time + user marshaling",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.null.switching.marshal",
        figure: Figure::Ratio {
            num: 2986,
            den: 880,
            base: "rpc.null.migrating.marshal",
        },
        what: "switching ÷ migrating null RPC, kernel time + user marshaling (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32b.switching.marshal",
        figure: Figure::Cycles(3050),
        what: "switching RPC, 32 bytes in, kernel time + user marshaling",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32b.switching.marshal",
        figure: Figure::Ratio {
            num: 3050,
            den: 961,
            base: "rpc.32b.migrating.marshal",
        },
        what: "switching ÷ migrating, 32 bytes in, kernel time + user marshaling (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32b.switching.marshal",
        figure: Figure::Ratio {
            num: 3050,
            den: 2986,
            base: "rpc.null.switching.marshal",
        },
        what: "switching RPC with marshaling, 32 bytes in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.switching.marshal",
        figure: Figure::Cycles(6470),
        what: "switching RPC, 1 KiB in, kernel time + user marshaling",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.switching.marshal",
        figure: Figure::Ratio {
            num: 6470,
            den: 3210,
            base: "rpc.1k.migrating.marshal",
        },
        what: "switching ÷ migrating, 1 KiB in, kernel time + user marshaling (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.switching.marshal",
        figure: Figure::Ratio {
            num: 6470,
            den: 2986,
            base: "rpc.null.switching.marshal",
        },
        what: "switching RPC with marshaling, 1 KiB in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.null.migrating.marshal",
        figure: Figure::Cycles(880),
        what: "migrating null RPC, kernel time + user marshaling",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32b.migrating.marshal",
        figure: Figure::Cycles(961),
        what: "migrating RPC, 32 bytes in, kernel time + user marshaling",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.32b.migrating.marshal",
        figure: Figure::Ratio {
            num: 961,
            den: 880,
            base: "rpc.null.migrating.marshal",
        },
        what: "migrating RPC with marshaling, 32 bytes in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.migrating.marshal",
        figure: Figure::Cycles(3210),
        what: "migrating RPC, 1 KiB in, kernel time + user marshaling",
        source: "[001] Table 3",
    },
    Reference {
        row: "rpc.1k.migrating.marshal",
        figure: Figure::Ratio {
            num: 3210,
            den: 880,
            base: "rpc.null.migrating.marshal",
        },
        what: "migrating RPC with marshaling, 1 KiB in ÷ null (cycles)",
        source: "[001] Table 3",
    },
    // [000] Table 5: the kernel memory of a thread, MK40 with continuations (no stack of its
    // own) and MK32 (a 4 KiB kernel stack each, pageable).
    Reference {
        row: "mem.thread.bytes",
        figure: Figure::Instructions(690),
        what: "MK40 bytes per thread (MI 484 + MD 206, no stack)",
        source: "[000] Table 5",
    },
    Reference {
        row: "mem.thread.bytes",
        figure: Figure::Instructions(4664),
        what: "MK32 bytes per thread (with its 4 KiB stack)",
        source: "[000] Table 5",
    },
    // [000] Table 3 (µs, DS3100, as a user sees them): Mach 2.5 queues the message and lets
    // the scheduler find the receiver; MK40 hands its stack off. Baton's queued path
    // against its handoff.
    Reference {
        row: "rpc.null.slow.roundtrip",
        figure: Figure::Ratio {
            num: 185,
            den: 95,
            base: "rpc.null.fast.roundtrip",
        },
        what: "Mach 2.5 (queued) ÷ MK40 (handoff) null RPC (µs)",
        source: "[000] Table 3",
    },
    // [000] Table 3 (µs, DS3100): MK40's exception round trip against its null RPC, both
    // handed off to a waiting user-level receiver; Baton's against its RPC round trip.
    Reference {
        row: "exc.roundtrip",
        figure: Figure::Ratio {
            num: 135,
            den: 95,
            base: "rpc.null.fast.roundtrip",
        },
        what: "MK40 exception ÷ null RPC (µs)",
        source: "[000] Table 3",
    },
];

/// The rows of the headline table, in order (those the run has).
pub const HEADLINE: &[&str] = &[
    "floor.syscall.null",
    "sched.yield.switch",
    "sched.pmodel.switch",
    "sync.waitwake.pingpong",
    "rpc.null.fast",
    "rpc.null.fast.roundtrip",
    "rpc.1k.fast",
    "rpc.null.migrating",
    "rpc.1k.migrating",
    "rpc.null.slow.roundtrip",
    "rpc.null.switching.marshal",
    "rpc.null.migrating.marshal",
    "exc.roundtrip",
    "thread.create_exit",
    "mem.thread.bytes",
];

// ---- Cells -----------------------------------------------------------------------------------

/// `a / b` with two decimals; empty when `b` is 0.
pub fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        String::new()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

/// The row called `name`.
fn find<'r>(rows: &'r [Row], name: &str) -> Option<&'r Row> {
    rows.iter().find(|r| r.name == name)
}

/// The cells of one line of the main table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Cells {
    /// Baton's median.
    baton: String,
    /// The median as a multiple of the row's floor.
    floor: String,
    /// Linux's median and row.
    linux: String,
    /// Baton ÷ Linux.
    vs_linux: String,
    /// The references.
    paper: String,
    /// Baton against each reference.
    paper_ratio: String,
}

impl Inputs<'_> {
    /// The Linux rows, if Linux was measured.
    fn linux_rows(&self) -> Option<&[Row]> {
        self.linux.as_ref().ok().map(|l| l.rows.as_slice())
    }

    /// The main table's cells for `row`.
    fn cells(&self, row: &Row) -> Cells {
        let rows = &self.baton.rows;
        let floor = floor_of(&row.name)
            .and_then(|f| find(rows, f))
            .map(|f| ratio(row.median, f.median))
            .unwrap_or_default();
        let linux = linux_pair(&row.name)
            .and_then(|p| find(self.linux_rows()?, p.linux))
            .map(|l| {
                (
                    format!(
                        "{} `{}`",
                        l.median,
                        l.name.strip_prefix("linux.").unwrap_or(&l.name)
                    ),
                    ratio(row.median, l.median),
                )
            })
            .unwrap_or_default();
        let mut paper = Vec::new();
        let mut paper_ratio = Vec::new();
        for r in REFERENCES.iter().filter(|r| r.row == row.name) {
            match r.figure {
                Figure::Instructions(n) => {
                    paper.push(format!("{n}: {} ({})", r.what, r.source));
                    paper_ratio.push(ratio(row.median, n));
                }
                Figure::Cycles(n) => {
                    paper.push(format!("{n} cycles: {} ({})", r.what, r.source));
                    paper_ratio.push("—".to_string());
                }
                Figure::Ratio { num, den, base } => {
                    let Some(b) = find(rows, base) else { continue };
                    paper.push(format!(
                        "{num}/{den} = {}: {} ({})",
                        ratio(num, den),
                        r.what,
                        r.source
                    ));
                    paper_ratio.push(format!("{} (÷ `{base}`)", ratio(row.median, b.median)));
                }
            }
        }
        Cells {
            baton: row.median.to_string(),
            floor,
            linux: linux.0,
            vs_linux: linux.1,
            paper: paper.join("<br>"),
            paper_ratio: paper_ratio.join("<br>"),
        }
    }

    /// A Markdown table of the Baton rows called `names` (all rows when `None`), with the
    /// Linux columns when Linux was measured.
    fn table(&self, names: Option<&[&str]>) -> String {
        let with_linux = self.linux.is_ok();
        let mut out = String::from("| benchmark | Baton | × floor |");
        if with_linux {
            out.push_str(" Linux | Baton/Linux |");
        }
        out.push_str(" paper / reference | ratio |\n|---|---:|---:|");
        if with_linux {
            out.push_str("---|---:|");
        }
        out.push_str("---|---|\n");
        let rows: Vec<&Row> = match names {
            None => self.baton.rows.iter().collect(),
            Some(names) => names
                .iter()
                .filter_map(|n| find(&self.baton.rows, n))
                .collect(),
        };
        for row in rows {
            let c = self.cells(row);
            let _ = write!(out, "| `{}` | {} | {} |", row.name, c.baton, c.floor);
            if with_linux {
                let _ = write!(out, " {} | {} |", c.linux, c.vs_linux);
            }
            let _ = writeln!(out, " {} | {} |", c.paper, c.paper_ratio);
        }
        out
    }

    /// The headline table (Markdown): a few key rows.
    pub fn headline(&self) -> String {
        self.table(Some(HEADLINE))
    }

    /// One line naming the metric, the machine and the commit.
    fn header_line(&self) -> String {
        format!(
            "{} under {}; {}; kernel {}",
            self.meta.metric, GUEST_CPU, self.meta.qemu, self.meta.commit
        )
    }

    /// `results/report.md`.
    pub fn report_md(&self, plots: &[&str]) -> String {
        let m = self.meta;
        let mut out = String::from("# Baton benchmarks\n\n");
        let _ = writeln!(
            out,
            "- metric: **{}** (QEMU TCG, `-cpu max`, `-icount shift=0,align=off,sleep=off`: \
             the guest's TSC advances once per instruction, so every figure is an exact \
             count, the same on any host)",
            m.metric
        );
        let _ = writeln!(
            out,
            "- CPU: {GUEST_CPU}; host {} ({} CPUs), which changes the time a run takes, \
             not its figures",
            m.host_cpu, m.host_cpus
        );
        let _ = writeln!(out, "- QEMU: {}", m.qemu);
        let _ = writeln!(
            out,
            "- kernel commit: {} (image fingerprint `{}`: kernel and initrd, FNV-1a)",
            m.commit, self.image
        );
        match &self.linux {
            Ok(l) => {
                let _ = writeln!(
                    out,
                    "- Linux: {} (Debian), command line `{}`, benchmarks compiled by {}, \
                     BusyBox {}",
                    l.kernel, l.cmdline, l.gcc, l.busybox
                );
            }
            Err(why) => {
                let _ = writeln!(out, "- Linux: not measured ({why})");
            }
        }
        let iterations = self.baton.rows.first().map_or(0, |r| r.iterations);
        let stamps = find(&self.baton.rows, "floor.rdtsc.overhead")
            .map(|r| format!(" ({} instructions, `floor.rdtsc.overhead`)", r.median))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "- figures: the lower median of the {iterations} recorded iterations of each \
             benchmark, the timestamps' own cost{stamps} included; min and max under Details"
        );
        let baton_repeat = match self.repeat {
            Repeat::Agreed => "a second run gave the same count for every row",
            Repeat::Differed => "**a second run gave different counts** (see the command's error)",
            Repeat::NotChecked => "not checked (`--quick`: one run)",
        };
        let linux_repeat = match &self.linux {
            Ok(l) if l.repeated => "; Linux: a second boot gave the same count for every row",
            Ok(_) => "; Linux: not checked (one boot)",
            Err(_) => "",
        };
        let _ = writeln!(out, "- repeatability: Baton: {baton_repeat}{linux_repeat}");
        match &self.cycles {
            Ok(c) => {
                let _ = writeln!(
                    out,
                    "- cycles: **measured** under hardware KVM ({}): the same image with \
                     `-enable-kvm -cpu host` and no icount, where `rdtsc` deltas are TSC \
                     cycles{}; {} warm-up and {} measured boots (section \"Cycles under \
                     hardware KVM\"). Every other table is in instructions",
                    c.module,
                    c.tsc_mhz
                        .map(|m| format!(" ({m} MHz, the kernel's calibration)"))
                        .unwrap_or_default(),
                    cycles::WARMUP_BOOTS,
                    cycles::BATCHES
                );
            }
            Err(why) => {
                let _ = writeln!(
                    out,
                    "- cycles: **not measured** ({why}). Every figure in this report is an \
                     instruction count; TCG's run time and its TSC are not a measure of speed \
                     and are never reported"
                );
            }
        }
        out.push_str(
            "\nReproduce with `cargo xtask bench`; every benchmark is defined in \
             `docs/benchmarks.md`.\n",
        );

        out.push_str("\n## Headline (instructions)\n\n");
        out.push_str(&self.headline());
        out.push_str("\n## Every Baton benchmark (instructions)\n\n");
        out.push_str(&self.table(None));
        out.push_str(&self.legend());
        out.push_str(&self.cycles_md());

        if !plots.is_empty() {
            out.push_str("\n## Plots\n\n");
            for p in plots {
                let alt = match *p {
                    BARS_SVG => "Baton and Linux, the same operations",
                    RPC_SVG => "RPC cost against message size",
                    crate::accent::FIG_3_1_SVG
                    | crate::accent::FIG_3_2_SVG
                    | crate::accent::FIG_3_3_SVG => continue,
                    other => other,
                };
                let _ = writeln!(out, "![{alt}]({p})\n");
            }
        }
        if let Some(rows) = self.linux_rows() {
            out.push_str(&self.rpc_sizes_md(rows));
            out.push_str(&self.pairs_md());
            out.push_str(&linux_only_md(rows));
        }
        out.push_str(&self.details_md());
        // Baton's rows, and the Linux guest's (Table 3-4 sets its file rows beside them).
        let mut rows = self.baton.rows.clone();
        if let Some(l) = self.linux_rows() {
            rows.extend(l.iter().cloned());
        }
        out.push_str(&crate::accent::section(&rows, &self.baton.vm, plots));
        out.push_str(&crate::spin::section(
            &self.baton.rows,
            &crate::workspace::root(),
        ));
        if let Ok(l) = &self.linux {
            out.push_str(&linux_guest_md(l));
        }
        out.push_str("\n## Sources\n\n");
        for (key, what) in SOURCES {
            let _ = writeln!(out, "- {key}: {what}");
        }
        out
    }

    /// What the columns mean, and which floor each row has.
    fn legend(&self) -> String {
        let mut out = String::from(
            "\n- **Baton**: the median, in instructions.\n\
             - **× floor**: Baton's median ÷ the median of the row's floor, the cheapest \
             operation each of its iterations contains",
        );
        let mut floors: Vec<(&str, Vec<&str>)> = Vec::new();
        for r in &self.baton.rows {
            let floor = floor_of(&r.name).filter(|f| find(&self.baton.rows, f).is_some());
            if let Some(f) = floor {
                match floors.iter_mut().find(|(g, _)| *g == f) {
                    Some((_, rows)) => rows.push(&r.name),
                    None => floors.push((f, vec![&r.name])),
                }
            }
        }
        let groups: Vec<String> = floors
            .iter()
            .map(|(f, rows)| {
                if rows.len()
                    == self
                        .baton
                        .rows
                        .iter()
                        .filter(|r| !r.name.starts_with("floor."))
                        .count()
                {
                    format!("`{f}` for every row but the floors")
                } else {
                    let names: Vec<String> = rows.iter().map(|r| format!("`{r}`")).collect();
                    format!("`{f}` for {}", names.join(", "))
                }
            })
            .collect();
        if !groups.is_empty() {
            let _ = write!(out, ": {}", groups.join("; "));
        }
        out.push_str(".\n");
        if self.linux.is_ok() {
            out.push_str(
                "- **Linux**: the median of the Linux row that measures the same operation \
                 (named after the figure; why each pair is the same operation: under Pairs), \
                 in the same QEMU, counted the same way. **Baton/Linux**: Baton's median ÷ \
                 Linux's.\n",
            );
        }
        out.push_str(
            "- **paper / reference**: a published figure (instructions unless marked), or the \
             ratio `a/b` of two of the source's figures. **ratio**: Baton's median ÷ an \
             instruction figure (none, `—`, for a figure in cycles, given for scale); for a \
             source's ratio, Baton's same ratio (the median ÷ the median of the row after \
             `÷`). The papers counted kernel paths alone on 1990s \
             machines, Baton's figures are whole user-to-user paths, so the ratios measure \
             distance, not speed.\n",
        );
        out
    }

    /// A Markdown table of the cycle rows called `names` (all when `None`): the median of
    /// the batches' medians, their spread, the extremes of every iteration, the row's floor
    /// multiple in cycles and, when the TSC frequency is known, the median in nanoseconds.
    pub fn cycles_table(&self, c: &Cycles, names: Option<&[&str]>) -> String {
        let mut out = String::from(
            "| benchmark | median | batch min | batch max | min | max | CPUs | × floor | ns |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        let rows: Vec<&cycles::CycleRow> = match names {
            None => c.rows.iter().collect(),
            Some(names) => names
                .iter()
                .filter_map(|n| c.rows.iter().find(|r| r.name == *n))
                .collect(),
        };
        for r in rows {
            let floor = floor_of(&r.name)
                .and_then(|f| c.rows.iter().find(|x| x.name == f))
                .map(|f| ratio(r.median, f.median))
                .unwrap_or_default();
            let ns = c
                .tsc_mhz
                .filter(|&m| m > 0)
                .map(|m| format!("{:.1}", r.median as f64 * 1000.0 / m as f64))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.name,
                r.median,
                r.batch_min(),
                r.batch_max(),
                r.min,
                r.max,
                r.cpus,
                floor,
                ns
            );
        }
        out
    }

    /// The section on cycles: the table, or why there is none.
    fn cycles_md(&self) -> String {
        let mut out = String::from("\n## Cycles under hardware KVM (TSC cycles)\n\n");
        match &self.cycles {
            Ok(c) => {
                let _ = writeln!(
                    out,
                    "The same kernel and initrd under QEMU with `-enable-kvm -cpu host` ({}) \
                     and no icount: the guest reads the host CPU's time-stamp counter, so \
                     every figure is in **TSC cycles**: ticks at the TSC's constant rate{}, \
                     not the core's clock cycles. Each boot runs each benchmark's 100 warm-up and {} \
                     recorded iterations; {} boot(s) are run first and not kept, then {} \
                     measured boots. **median**: the lower median of the {} boots' medians; \
                     **batch min**, **batch max**: the smallest and largest boot median (the \
                     spread); **min**, **max**: over every recorded iteration of every boot; \
                     **× floor**: the median ÷ the floor row's median in cycles; **ns**: the \
                     median at the calibrated TSC rate. Unlike the instruction counts these \
                     vary from run to run and host to host, and `-cpu host` may enable \
                     features (PCID, ...) that TCG's `-cpu max` lacks, so the kernel's paths \
                     can differ a little from the counted ones.\n",
                    c.module,
                    c.tsc_mhz
                        .map(|m| format!(" ({m} MHz by the kernel's calibration)"))
                        .unwrap_or_default(),
                    c.rows.first().map_or(0, |r| r.iterations),
                    cycles::WARMUP_BOOTS,
                    cycles::BATCHES,
                    cycles::BATCHES
                );
                out.push_str(&self.cycles_table(c, None));
            }
            Err(why) => {
                let _ = writeln!(
                    out,
                    "Not measured: {why}. Cycles are measured only under hardware KVM (the \
                     `kvm_intel` or `kvm_amd` module loaded): `cargo xtask bench` then boots \
                     the same image with `-enable-kvm -cpu host`. TCG's run time and its TSC \
                     readings without icount are not a measure of the kernel's speed and are \
                     never reported."
                );
            }
        }
        out
    }

    /// The RPC-against-size table ([`RPC_SIZES`]): Baton's round trips beside Linux's UNIX
    /// socket's, with each side's growth from its smallest message. Empty when no size has
    /// both a Baton and a Linux row.
    fn rpc_sizes_md(&self, linux: &[Row]) -> String {
        let baton = |size: &str, path: &str| {
            find(&self.baton.rows, &format!("rpc.{size}.{path}.roundtrip")).map(|r| r.median)
        };
        let cell = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let div = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => ratio(a, b),
            _ => String::new(),
        };
        let first = RPC_SIZES.first();
        let fast0 = first.and_then(|s| baton(s.baton, "fast"));
        let linux0 = first.and_then(|s| find(linux, s.linux)).map(|r| r.median);
        let mut lines = String::new();
        for s in RPC_SIZES {
            let (fast, slow) = (baton(s.baton, "fast"), baton(s.baton, "slow"));
            let Some(l) = find(linux, s.linux) else {
                continue;
            };
            if fast.is_none() && slow.is_none() {
                continue;
            }
            let _ = writeln!(
                lines,
                "| `{}` | {} | {} | {} `{}` | {} | {} | {} | {} | {} |",
                s.baton,
                cell(fast),
                cell(slow),
                l.median,
                l.name.strip_prefix("linux.").unwrap_or(&l.name),
                div(fast, Some(l.median)),
                div(slow, Some(l.median)),
                div(fast, fast0),
                div(Some(l.median), linux0),
                s.why
            );
        }
        if lines.is_empty() {
            return String::new();
        }
        let mut out = String::from(
            "\n## RPC against size (instructions)\n\nThe client's whole round trip with the \
             same data in the request and in the reply: Baton's `rpc.<size>.<path>.roundtrip` \
             (fast path and queued slow path) and Linux's UNIX stream socket \
             (`linux.unix.rpc<bytes>`: `write` the request, `read` the reply; the server \
             `read`s and `write`s), in the same QEMU, counted the same way (the table \
             `RPC_SIZES` in `xtask/src/report.rs`; `rpc-size.svg` draws it). **growth**: the \
             median ÷ the same side's figure for the first size.\n\n\
             | size | Baton fast | Baton slow | Linux socket | fast/Linux | slow/Linux | \
             Baton fast growth | Linux growth | the same data because |\n\
             |---|---:|---:|---|---:|---:|---:|---:|---|\n",
        );
        out.push_str(&lines);
        out
    }

    /// The pairs with Linux, with their reasons.
    fn pairs_md(&self) -> String {
        let mut out = String::from(
            "\n## Pairs\n\nWhy each Baton row is compared with its Linux row (the table \
             `LINUX_PAIRS` in `xtask/src/report.rs`).\n\n| Baton | Linux | the same operation \
             because |\n|---|---|---|\n",
        );
        for p in LINUX_PAIRS {
            if find(&self.baton.rows, p.baton).is_some() {
                let _ = writeln!(out, "| `{}` | `{}` | {} |", p.baton, p.linux, p.why);
            }
        }
        out
    }

    /// Min, max, CPUs and kernel paths of every Baton row.
    fn details_md(&self) -> String {
        let mut out = String::from(
            "\n## Details (instructions)\n\nEvery Baton row's median, min and max, the CPUs of its boot, \
             and the change of the kernel's counters per recorded iteration (from \
             `BENCHSTAT`: stack handoffs, `switch_context` switches, stacks discarded, \
             continuations recognised).\n\n\
             | benchmark | median | min | max | CPUs | handoffs | switches | discards | \
             recognitions |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.baton.rows {
            let p = self.baton.paths.iter().find(|p| p.name == r.name);
            let per = |f: fn(&Paths) -> u64| {
                p.map(|p| per_iteration(f(p), r.iterations))
                    .unwrap_or_default()
            };
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.name,
                r.median,
                r.min,
                r.max,
                r.cpus,
                per(|p| p.handoffs),
                per(|p| p.switches),
                per(|p| p.discards),
                per(|p| p.recognitions)
            );
        }
        out
    }

    /// The plots: file name and SVG text. The Baton-versus-Linux bars when Linux was
    /// measured and a pair has both rows; the RPC plot when there are `rpc.*` rows.
    pub fn plots(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(linux) = self.linux_rows() {
            let groups: Vec<Group> = LINUX_PAIRS
                .iter()
                .filter_map(|p| {
                    let b = find(&self.baton.rows, p.baton)?;
                    let l = find(linux, p.linux)?;
                    Some(Group {
                        label: format!(
                            "{} / {}",
                            p.baton,
                            p.linux.strip_prefix("linux.").unwrap_or(p.linux)
                        ),
                        values: vec![Some(b.median), Some(l.median)],
                    })
                })
                .collect();
            if !groups.is_empty() {
                let series = ["Baton".to_string(), "Linux".to_string()];
                out.push((
                    BARS_SVG,
                    plot::bars(
                        "The same operations on Baton and Linux (medians)",
                        &self.header_line(),
                        &self.meta.metric,
                        &series,
                        &groups,
                    ),
                ));
            }
        }
        let series = rpc_series(&self.baton.rows, self.linux_rows().unwrap_or_default());
        if !series.is_empty() {
            out.push((
                RPC_SVG,
                plot::lines(
                    "RPC against message size (medians)",
                    &self.header_line(),
                    "bytes of in-line data in the request and in the reply",
                    &format!("{} per RPC", self.meta.metric),
                    &series,
                ),
            ));
        }
        out.extend(crate::accent::plots(
            &self.baton.rows,
            &self.header_line(),
            &self.meta.metric,
        ));
        out
    }
}

/// The payload size an `rpc.*` size word stands for: `null` 0, `<n>b` n bytes, `<n>k` n
/// KiB.
pub fn rpc_size(word: &str) -> Option<u64> {
    if word == "null" {
        return Some(0);
    }
    if let Some(n) = word.strip_suffix('b') {
        return n.parse().ok();
    }
    word.strip_suffix('k')?
        .parse::<u64>()
        .ok()?
        .checked_mul(1024)
}

/// The series of the RPC plot: one per Baton path and kind of figure
/// (`rpc.<size>.<path>[.<kind>]`, e.g. `rpc.1k.fast.roundtrip`; in the order they first
/// appear, points by size), and Linux's pipe (1 byte) and UNIX-socket
/// (`linux.unix.rpc<bytes>`) round trips.
pub fn rpc_series(baton: &[Row], linux: &[Row]) -> Vec<Series> {
    let mut series: Vec<(String, Series)> = Vec::new();
    for r in baton {
        let Some((size, key)) = r
            .name
            .strip_prefix("rpc.")
            .and_then(|rest| rest.split_once('.'))
        else {
            continue;
        };
        let Some(size) = rpc_size(size) else { continue };
        // The plot's linear axis covers what an IPC buffer carries; the 32 KiB rows
        // (`MSG_BUF`) would squeeze every other point against the axis. They are in the
        // tables.
        if size > 4096 {
            continue;
        }
        let point = (size as f64, r.median as f64);
        match series.iter_mut().find(|(k, _)| k == key) {
            Some((_, s)) => s.points.push(point),
            None => {
                let name = format!(
                    "Baton {}",
                    key.replace('.', ", ").replace("roundtrip", "round trip")
                );
                series.push((
                    key.to_string(),
                    Series {
                        name,
                        points: vec![point],
                    },
                ));
            }
        }
    }
    let mut out: Vec<Series> = series.into_iter().map(|(_, s)| s).collect();
    let mut socket: Vec<(f64, f64)> = linux
        .iter()
        .filter_map(|r| {
            let bytes: u64 = r.name.strip_prefix("linux.unix.rpc")?.parse().ok()?;
            Some((bytes as f64, r.median as f64))
        })
        .collect();
    if let Some(pipe) = find(linux, "linux.pipe.pingpong") {
        out.push(Series {
            name: "Linux pipes (1 byte)".to_string(),
            points: vec![(1.0, pipe.median as f64)],
        });
    }
    if !socket.is_empty() {
        socket.sort_by(|a, b| a.0.total_cmp(&b.0));
        out.push(Series {
            name: "Linux UNIX socket".to_string(),
            points: socket,
        });
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// `count / iterations`, as an integer when it divides, else with two decimals.
pub fn per_iteration(count: u64, iterations: u64) -> String {
    if iterations == 0 {
        count.to_string()
    } else if count.is_multiple_of(iterations) {
        (count / iterations).to_string()
    } else {
        format!("{:.2}", count as f64 / iterations as f64)
    }
}

/// The Linux rows no Baton row is paired with.
fn linux_only_md(rows: &[Row]) -> String {
    let null = find(rows, "linux.syscall.null").map(|r| r.median);
    let mut out = String::from(
        "\n## Linux rows without a Baton counterpart yet (instructions)\n\nMeasured in the same guest \
         (definitions in `docs/benchmarks.md`, \"The Linux side\").\n\n\
         | benchmark | Linux | min | max | × `linux.syscall.null` |\n|---|---:|---:|---:|---:|\n",
    );
    for r in rows
        .iter()
        .filter(|r| !LINUX_PAIRS.iter().any(|p| p.linux == r.name))
    {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            r.name,
            r.median,
            r.min,
            r.max,
            null.map(|n| ratio(r.median, n)).unwrap_or_default()
        );
    }
    out
}

/// The Linux guest's facts and remarks.
fn linux_guest_md(l: &LinuxRun) -> String {
    let mut out = String::from("\n## The Linux guest\n\n");
    let _ = writeln!(out, "- kernel: {} (Debian)", l.kernel);
    let _ = writeln!(out, "- command line: `{}`", l.cmdline);
    let _ = writeln!(out, "- BusyBox: {}", l.busybox);
    let _ = writeln!(out, "- benchmarks compiled by: {}", l.gcc);
    let _ = writeln!(out, "- QEMU: `{}`", l.qemu_command);
    for fact in &l.guest {
        let _ = writeln!(out, "- guest: {fact}");
    }
    for remark in &l.remarks {
        let _ = writeln!(out, "- remark: {remark}");
    }
    out
}

// ---- JSON ----------------------------------------------------------------------------------

/// The fields every results file starts with.
fn header(meta: &Meta) -> json::Header {
    json::Header {
        metric: meta.metric.clone(),
        qemu: meta.qemu.clone(),
        commit: meta.commit.clone(),
        cpu: GUEST_CPU.to_string(),
        host_cpu: meta.host_cpu.clone(),
        host_cpus: meta.host_cpus,
    }
}

/// `results/baton.json`.
pub fn baton_json(inputs: &Inputs) -> String {
    let results = inputs.baton;
    let benchmarks = results
        .rows
        .iter()
        .map(|r| json::BatonRow {
            name: r.name.clone(),
            unit: r.unit.clone(),
            iterations: r.iterations,
            median: r.median,
            min: r.min,
            max: r.max,
            cpus: r.cpus,
            paths: results
                .paths
                .iter()
                .find(|p| p.name == r.name)
                .map(|p| json::PathCounts {
                    handoffs: p.handoffs,
                    switches: p.switches,
                    discards: p.discards,
                    recognitions: p.recognitions,
                }),
        })
        .collect();
    let cycles = match &inputs.cycles {
        Ok(_) => json::CyclesMeasured {
            measured: true,
            file: Some(CYCLES_JSON.to_string()),
            why: None,
        },
        Err(why) => json::CyclesMeasured {
            measured: false,
            file: None,
            why: Some(why.clone()),
        },
    };
    json::document(&json::BatonFile {
        header: header(inputs.meta),
        image: inputs.image.to_string(),
        repeat_checked: inputs.repeat == Repeat::Agreed,
        cycles,
        benchmarks,
    })
}

/// `results/baton-cycles.json`: the cycles pass, in the same shape as `baton.json`.
pub fn cycles_json(inputs: &Inputs, c: &Cycles) -> String {
    let benchmarks = c
        .rows
        .iter()
        .map(|r| json::CyclesRow {
            name: r.name.clone(),
            unit: "cycles".to_string(),
            iterations: r.iterations,
            median: r.median,
            batch_min: r.batch_min(),
            batch_max: r.batch_max(),
            min: r.min,
            max: r.max,
            cpus: r.cpus,
            batch_medians: r.medians.clone(),
        })
        .collect();
    json::document(&json::CyclesFile {
        header: json::Header {
            metric: "cycles".to_string(),
            cpu: format!("{KVM_CPU} ({})", c.module),
            ..header(inputs.meta)
        },
        image: inputs.image.to_string(),
        tsc_mhz: c.tsc_mhz,
        warmup_boots: cycles::WARMUP_BOOTS as u64,
        batches: cycles::BATCHES as u64,
        benchmarks,
    })
}

/// `results/linux.json`.
pub fn linux_json(meta: &Meta, run: &LinuxRun) -> String {
    let benchmarks = run
        .rows
        .iter()
        .map(|r| json::LinuxRow {
            name: r.name.clone(),
            unit: r.unit.clone(),
            iterations: r.iterations,
            median: r.median,
            min: r.min,
            max: r.max,
        })
        .collect();
    json::document(&json::LinuxFile {
        header: header(meta),
        repeat_checked: run.repeated,
        kernel: run.kernel.clone(),
        cmdline: run.cmdline.clone(),
        busybox: run.busybox.clone(),
        gcc: run.gcc.clone(),
        qemu_command: run.qemu_command.clone(),
        guest: run.guest.clone(),
        remarks: run.remarks.clone(),
        benchmarks,
    })
}

#[cfg(test)]
mod unit_tests {
    use super::*;
    use crate::plot::unit_tests::check_well_formed;

    fn row(name: &str, median: u64) -> Row {
        Row {
            name: name.into(),
            unit: "instructions".into(),
            iterations: 1000,
            median,
            min: median,
            max: median + 7,
            cpus: if name.ends_with(".cross") { 2 } else { 1 },
        }
    }

    fn baton() -> Results {
        let rows = [
            ("floor.rdtsc.overhead", 5),
            ("floor.syscall.null", 150),
            ("floor.syscall.full", 60),
            ("floor.xas.call", 200),
            ("sched.yield.switch", 300),
            ("sched.yield.roundtrip", 600),
            ("sched.pmodel.switch", 750),
            ("rpc.null.fast", 400),
            ("rpc.null.fast.roundtrip", 900),
            ("rpc.32b.fast", 410),
            ("rpc.32b.fast.roundtrip", 950),
            ("rpc.1k.fast", 500),
            ("rpc.1k.fast.roundtrip", 1100),
            ("rpc.null.slow", 1200),
            ("sync.waitwake.cross", 3000),
        ];
        Results {
            rows: rows.iter().map(|&(n, m)| row(n, m)).collect(),
            paths: vec![Paths {
                name: "sched.yield.switch".into(),
                handoffs: 2000,
                switches: 0,
                discards: 0,
                recognitions: 1500,
            }],
            done: true,
            vm: Vec::new(),
        }
    }

    fn linux() -> LinuxRun {
        let rows = [
            ("linux.rdtsc.overhead", 5),
            ("linux.syscall.null", 331),
            ("linux.sched.yield.switch", 2126),
            ("linux.pipe.pingpong", 10630),
            ("linux.unix.rpc1", 21000),
            ("linux.unix.rpc32", 21500),
            ("linux.unix.rpc64", 21754),
            ("linux.unix.rpc1024", 23100),
            ("linux.fork.exit", 261081),
        ];
        LinuxRun {
            rows: rows.iter().map(|&(n, m)| row(n, m)).collect(),
            kernel: "linux-image-6.1.0-56-amd64 6.1.192-2".into(),
            repeated: true,
            guest: vec!["clocksource=tsc".into()],
            ..LinuxRun::default()
        }
    }

    /// The inputs of a report from `b`, measured with `m`, agreed by a second run, with
    /// `linux` and no cycles (no hardware KVM).
    fn inputs<'a>(m: &'a Meta, b: &'a Results, linux: Result<&'a LinuxRun, String>) -> Inputs<'a> {
        Inputs {
            meta: m,
            baton: b,
            image: "0123456789abcdef",
            repeat: Repeat::Agreed,
            linux,
            cycles: Err("no hardware KVM on this host".into()),
        }
    }

    fn meta() -> Meta {
        Meta {
            metric: "instructions".into(),
            qemu: "QEMU emulator version 7.2.0 \"x\"".into(),
            commit: "abc1234-dirty".into(),
            host_cpu: "Intel(R) Xeon(R) Processor".into(),
            host_cpus: 2,
        }
    }

    #[test]
    fn tables_are_consistent() {
        // At most one Linux row per Baton row, every name well-formed.
        for (i, p) in LINUX_PAIRS.iter().enumerate() {
            assert!(p.linux.starts_with("linux."), "{}", p.linux);
            assert!(!p.baton.starts_with("linux."), "{}", p.baton);
            assert!(!p.why.is_empty());
            assert!(
                LINUX_PAIRS[..i].iter().all(|q| q.baton != p.baton),
                "{} paired twice",
                p.baton
            );
        }
        for r in REFERENCES {
            assert!(
                SOURCES.iter().any(|(k, _)| r.source.starts_with(k)),
                "{}",
                r.source
            );
            if let Figure::Ratio { den, base, .. } = r.figure {
                assert!(den > 0 && base != r.row);
            }
        }
        // The last floor entry catches every row.
        assert_eq!(FLOORS.last().map(|f| f.0), Some(""));
        assert_eq!(floor_of("floor.syscall.clock"), None);
        assert_eq!(floor_of("floor.syscall.null"), None);
        assert_eq!(floor_of("rpc.1k.slow"), Some("floor.xas.call"));
        assert_eq!(floor_of("exc.roundtrip"), Some("floor.fault.roundtrip"));
        assert_eq!(floor_of("sched.yield.switch"), Some("floor.syscall.full"));
        assert_eq!(floor_of("new.thing"), Some("floor.syscall.full"));
    }

    #[test]
    fn marshal_rows_set_beside_table_3() {
        let mut b = baton();
        for (name, median) in [
            ("rpc.null.switching.marshal", 4000),
            ("rpc.32b.switching.marshal", 4100),
            ("rpc.null.migrating.marshal", 2000),
            ("rpc.32b.migrating.marshal", 2050),
        ] {
            b.rows.push(row(name, median));
        }
        let m = meta();
        let inputs = inputs(&m, &b, Err("not measured".into()));
        // Cycles for scale (no ratio), then switching ÷ migrating against the paper's.
        let c = inputs.cells(find(&b.rows, "rpc.null.switching.marshal").unwrap());
        assert_eq!(
            c.paper,
            "2986 cycles: switching null RPC, kernel time + user marshaling ([001] Table 3)\
             <br>2986/880 = 3.39: switching ÷ migrating null RPC, kernel time + user \
             marshaling (cycles) ([001] Table 3)"
        );
        assert_eq!(c.paper_ratio, "—<br>2.00 (÷ `rpc.null.migrating.marshal`)");
        assert_eq!(c.floor, "20.00");
        let c = inputs.cells(find(&b.rows, "rpc.32b.switching.marshal").unwrap());
        assert_eq!(
            c.paper_ratio,
            "—<br>2.00 (÷ `rpc.32b.migrating.marshal`)<br>1.02 (÷ \
             `rpc.null.switching.marshal`)"
        );
        // A 1 KiB row the run lacks leaves its references out; its cycles stay.
        let c = inputs.cells(find(&b.rows, "rpc.null.migrating.marshal").unwrap());
        assert_eq!(c.paper_ratio, "—");
        // Each row is its own series in the RPC plot.
        let names: Vec<String> = rpc_series(&b.rows, &[])
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert!(
            names.contains(&"Baton switching, marshal".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"Baton migrating, marshal".to_string()),
            "{names:?}"
        );
    }

    #[test]
    fn rows_32k_set_beside_table_3() {
        let mut b = baton();
        for (name, median) in [
            ("rpc.32k.switching", 40000),
            ("rpc.32k.switching.roundtrip", 40100),
            ("rpc.32k.migrating", 16000),
            ("rpc.32k.migrating.roundtrip", 16100),
        ] {
            b.rows.push(row(name, median));
        }
        let m = meta();
        let inputs = inputs(&m, &b, Err("not measured".into()));
        // The switching row: its cycles, switching ÷ migrating against both of the paper's
        // migrating figures, and its growth from the null RPC of the same (queued) path.
        let c = inputs.cells(find(&b.rows, "rpc.32k.switching").unwrap());
        assert!(c.paper.starts_with(
            "137808 cycles: switching RPC, 32 KiB in, kernel time ([001] Table 3)\
             <br>137808/34703 = 3.97: switching ÷ migrating, 32 KiB in"
        ));
        assert!(c
            .paper
            .contains("<br>137808/84527 = 1.63: switching ÷ migrating"));
        assert_eq!(
            c.paper_ratio,
            "—<br>2.50 (÷ `rpc.32k.migrating`)<br>2.50 (÷ `rpc.32k.migrating`)<br>33.33 (÷ \
             `rpc.null.slow`)"
        );
        // The migrating row: both measurements of the paper, for scale.
        let c = inputs.cells(find(&b.rows, "rpc.32k.migrating").unwrap());
        assert!(c
            .paper
            .starts_with("34703 cycles: migrating RPC, 32 KiB in"));
        assert!(c
            .paper
            .contains("<br>84527 cycles: migrating RPC, 32 KiB in"));
        // With marshaling: the round trips' ratio beside the paper's 1.7.
        let c = inputs.cells(find(&b.rows, "rpc.32k.switching.roundtrip").unwrap());
        assert!(c
            .paper
            .starts_with("183164/109857 = 1.67: switching ÷ migrating, 32 KiB"));
        assert_eq!(c.paper_ratio, "2.49 (÷ `rpc.32k.migrating.roundtrip`)");
        // Not in the RPC plot: its linear axis covers one page.
        let series = rpc_series(&b.rows, &[]);
        assert!(!series.is_empty());
        assert!(series
            .iter()
            .all(|s| s.points.iter().all(|p| p.0 <= 4096.0)));
    }

    #[test]
    fn cells_pair_floor_and_papers() {
        let (b, l, m) = (baton(), linux(), meta());
        let inputs = inputs(&m, &b, Ok(&l));
        let c = inputs.cells(find(&b.rows, "sched.yield.switch").unwrap());
        assert_eq!(c.baton, "300");
        assert_eq!(c.floor, "5.00");
        assert_eq!(c.linux, "2126 `sched.yield.switch`");
        assert_eq!(c.vs_linux, "0.14");
        assert_eq!(
            c.paper,
            "83: MK40 stack handoff ([000] Table 4)<br>272: seL4 yield to another thread \
             (target: fewer) (sel4bench)"
        );
        assert_eq!(c.paper_ratio, "3.61<br>1.10");
        // A paper ratio against Baton's own ratio.
        let c = inputs.cells(find(&b.rows, "sched.pmodel.switch").unwrap());
        assert!(
            c.paper
                .ends_with("250/83 = 3.01: context switch ÷ stack handoff ([000] Table 4)"),
            "{}",
            c.paper
        );
        assert_eq!(c.paper_ratio, "3.00<br>2.50 (÷ `sched.yield.switch`)");
        // The same Linux row for two Baton paths.
        assert_eq!(c.linux, "2126 `sched.yield.switch`");
        // Floors have no floor; a row without a pair has no Linux cells.
        let c = inputs.cells(&b.rows[0]);
        assert_eq!((c.floor.as_str(), c.vs_linux.as_str()), ("", "1.00"));
        let c = inputs.cells(find(&b.rows, "sync.waitwake.cross").unwrap());
        assert_eq!((c.floor.as_str(), c.linux.as_str()), ("50.00", ""));
        // The round trips are paired and compared with the paper's growth with size.
        let c = inputs.cells(find(&b.rows, "rpc.32b.fast.roundtrip").unwrap());
        assert_eq!(c.linux, "21500 `unix.rpc32`");
        assert_eq!(c.vs_linux, "0.04");
        assert_eq!(c.paper_ratio, "1.06 (÷ `rpc.null.fast.roundtrip`)");
        // A reference whose base row is missing is left out.
        let mut partial = baton();
        partial.rows.retain(|r| r.name != "sched.yield.switch");
        let inputs = Inputs {
            baton: &partial,
            ..inputs
        };
        let pm = partial
            .rows
            .iter()
            .find(|r| r.name == "sched.pmodel.switch")
            .unwrap();
        assert_eq!(inputs.cells(pm).paper_ratio, "3.00");
    }

    #[test]
    fn report_with_and_without_linux() {
        let (b, l, m) = (baton(), linux(), meta());
        let full = Inputs {
            meta: &m,
            baton: &b,
            image: "0123456789abcdef",
            repeat: Repeat::Agreed,
            linux: Ok(&l),
            cycles: Err("no hardware KVM on this host".into()),
        };
        let plots = full.plots();
        let names: Vec<&str> = plots.iter().map(|p| p.0).collect();
        assert_eq!(names, [BARS_SVG, RPC_SVG]);
        let md = full.report_md(&names);
        for want in [
            "- metric: **instructions**",
            "host Intel(R) Xeon(R) Processor (2 CPUs)",
            "- QEMU: QEMU emulator version 7.2.0 \"x\"",
            "- kernel commit: abc1234-dirty (image fingerprint `0123456789abcdef`",
            "- Linux: linux-image-6.1.0-56-amd64 6.1.192-2 (Debian)",
            "Baton: a second run gave the same count for every row; Linux: a second boot",
            "| benchmark | Baton | × floor | Linux | Baton/Linux | paper / reference | ratio |",
            "| `rpc.null.fast` | 400 | 2.00 |  |  | 1128: Mach 3.0",
            "| `rpc.null.fast.roundtrip` | 900 | 4.50 | 10630 `pipe.pingpong` | 0.08 |  |  |",
            "`floor.syscall.full` for `sched.yield.switch`, `sched.yield.roundtrip`, \
             `sched.pmodel.switch`, `sync.waitwake.cross`; `floor.xas.call` for `rpc.null.fast`",
            "![RPC cost against message size](rpc-size.svg)",
            "| `rpc.32b.fast.roundtrip` | `linux.unix.rpc32` | a 32-byte request",
            "## RPC against size (instructions)",
            "| `null` | 900 |  | 21000 `unix.rpc1` | 0.04 |  | 1.00 | 1.00 | no data on Baton",
            "| `32b` | 950 |  | 21500 `unix.rpc32` | 0.04 |  | 1.06 | 1.02 | 32 bytes",
            "| `1k` | 1100 |  | 23100 `unix.rpc1024` | 0.05 |  | 1.22 | 1.10 | 1,024 bytes",
            "| `linux.unix.rpc64` | 21754 | 21754 | 21761 | 65.72 |",
            // (`linux.fork.exit` is paired with `task.null`: not listed as unpaired.)
            "| `sched.yield.switch` | 300 | 300 | 307 | 1 | 2 | 0 | 0 | 1.50 |",
            "| `sync.waitwake.cross` | 3000 | 3000 | 3007 | 2 |  |  |  |  |",
            "- guest: clocksource=tsc",
            "- [001]: Ford, Lepreau",
            "## Headline (instructions)",
            "## Every Baton benchmark (instructions)",
            "## Details (instructions)",
            "- cycles: **not measured** (no hardware KVM on this host). Every figure",
            "## Cycles under hardware KVM (TSC cycles)\n\nNot measured: no hardware KVM",
        ] {
            assert!(md.contains(want), "missing {want:?} in\n{md}");
        }
        // Paired Linux rows are not listed again as unpaired.
        assert!(!md.contains("| `linux.syscall.null` | 331 |"), "{md}");
        // The headline has only the headline rows, in order.
        let head = full.headline();
        assert_eq!(head.lines().count(), 2 + 6, "{head}");
        assert!(head
            .lines()
            .nth(2)
            .unwrap()
            .starts_with("| `floor.syscall.null` |"));
        for (_, svg) in &plots {
            check_well_formed(svg);
        }
        assert!(plots[0].1.contains("rpc.32b.fast.roundtrip / unix.rpc32"));
        assert!(plots[0].1.contains("rpc.1k.fast.roundtrip / unix.rpc1024"));

        let quick = Inputs {
            linux: Err("`--quick`".into()),
            repeat: Repeat::NotChecked,
            ..full
        };
        let md = quick.report_md(&[RPC_SVG]);
        assert!(md.contains("- Linux: not measured (`--quick`)"), "{md}");
        assert!(md.contains("| benchmark | Baton | × floor | paper / reference | ratio |"));
        assert!(md.contains("| `rpc.null.fast` | 400 | 2.00 | 1128: Mach 3.0"));
        assert!(md.contains("not checked (`--quick`: one run)"));
        assert!(
            !md.contains("## Pairs") && !md.contains("Baton/Linux"),
            "{md}"
        );
        assert!(!md.contains("## Linux rows without"));
        let names: Vec<&str> = quick.plots().iter().map(|p| p.0).collect();
        assert_eq!(names, [RPC_SVG]);
    }

    fn cycles() -> Cycles {
        let row = |name: &str, medians: &[u64], cpus| cycles::CycleRow {
            name: name.into(),
            iterations: 1000,
            cpus,
            medians: medians.to_vec(),
            median: {
                let mut m = medians.to_vec();
                m.sort_unstable();
                m[(m.len() - 1) / 2]
            },
            min: 50,
            max: 90000,
        };
        Cycles {
            module: "kvm_intel".into(),
            tsc_mhz: Some(2000),
            rows: vec![
                row("floor.syscall.null", &[200, 210, 190, 205, 200], 1),
                row("floor.syscall.full", &[100, 105, 95, 102, 100], 1),
                row("sched.yield.switch", &[400, 420, 380, 410, 390], 1),
                row("sync.waitwake.cross", &[5000, 5200, 4800, 5100, 4900], 2),
            ],
        }
    }

    #[test]
    fn cycles_section_and_json() {
        let (b, l, m, c) = (baton(), linux(), meta(), cycles());
        let inputs = Inputs {
            meta: &m,
            baton: &b,
            image: "0123456789abcdef",
            repeat: Repeat::Agreed,
            linux: Ok(&l),
            cycles: Ok(&c),
        };
        let md = inputs.report_md(&[]);
        for want in [
            "- cycles: **measured** under hardware KVM (kvm_intel): the same image with \
             `-enable-kvm -cpu host` and no icount, where `rdtsc` deltas are TSC cycles (2000 \
             MHz, the kernel's calibration); 1 warm-up and 5 measured boots",
            "## Cycles under hardware KVM (TSC cycles)",
            "| benchmark | median | batch min | batch max | min | max | CPUs | × floor | ns |",
            "| `floor.syscall.null` | 200 | 190 | 210 | 50 | 90000 | 1 |  | 100.0 |",
            "| `sched.yield.switch` | 400 | 380 | 420 | 50 | 90000 | 1 | 4.00 | 200.0 |",
            "| `sync.waitwake.cross` | 5000 | 4800 | 5200 | 50 | 90000 | 2 | 50.00 | 2500.0 |",
        ] {
            assert!(md.contains(want), "missing {want:?} in\n{md}");
        }
        // The instruction tables stay in instructions.
        assert!(md.contains("| `sched.yield.switch` | 300 | 5.00 |"), "{md}");
        let head = inputs.cycles_table(&c, Some(HEADLINE));
        assert_eq!(head.lines().count(), 2 + 2, "{head}");

        let json = cycles_json(&inputs, &c);
        assert!(json.starts_with("{\n  \"metric\": \"cycles\",\n"), "{json}");
        assert!(json.contains("  \"cpu\": \"QEMU KVM -cpu host (kvm_intel)\",\n"));
        assert!(json.contains("  \"tsc_mhz\": 2000,\n  \"warmup_boots\": 1,\n  \"batches\": 5,\n"));
        assert!(
            json.contains(
                "{\"name\": \"sched.yield.switch\", \"unit\": \"cycles\", \"iterations\": 1000, \
             \"median\": 400, \"batch_min\": 380, \"batch_max\": 420, \"min\": 50, \"max\": \
             90000, \"cpus\": 1, \"batch_medians\": [400, 420, 380, 410, 390]},\n"
            ),
            "{json}"
        );
        let baton = baton_json(&inputs);
        assert!(baton.contains(
            "  \"cycles\": {\n    \"measured\": true,\n    \"file\": \"baton-cycles.json\"\n  },\n"
        ), "{baton}");
        let without = Cycles {
            tsc_mhz: None,
            ..c.clone()
        };
        assert!(cycles_json(&inputs, &without).contains("\"tsc_mhz\": null,"));
        let file: json::CyclesFile = json::parse(&json).unwrap();
        assert_eq!(json::document(&file), json);
        assert_eq!(file.tsc_mhz, Some(2000));
        let none = baton_json(&Inputs {
            cycles: Err("no hardware KVM".into()),
            ..inputs
        });
        assert!(none.contains(
            "  \"cycles\": {\n    \"measured\": false,\n    \"why\": \"no hardware KVM\"\n  },\n"
        ), "{none}");
    }

    #[test]
    fn rpc_plot_series() {
        assert_eq!(rpc_size("null"), Some(0));
        assert_eq!(rpc_size("32b"), Some(32));
        assert_eq!(rpc_size("1k"), Some(1024));
        assert_eq!(rpc_size("32k"), Some(32768));
        assert_eq!(rpc_size("big"), None);
        let b = baton();
        let s = rpc_series(&b.rows, &linux().rows);
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Baton fast",
                "Baton fast, round trip",
                "Baton slow",
                "Linux pipes (1 byte)",
                "Linux UNIX socket"
            ]
        );
        assert_eq!(s[0].points, [(0.0, 400.0), (32.0, 410.0), (1024.0, 500.0)]);
        assert_eq!(s[1].points, [(0.0, 900.0), (32.0, 950.0), (1024.0, 1100.0)]);
        assert_eq!(
            s[4].points,
            [
                (1.0, 21000.0),
                (32.0, 21500.0),
                (64.0, 21754.0),
                (1024.0, 23100.0)
            ]
        );
        assert!(rpc_series(&[row("rpc.x.fast", 1), row("rpc.null", 1)], &[]).is_empty());
    }

    #[test]
    fn json_files() {
        let (b, l, m) = (baton(), linux(), meta());
        let inputs = inputs(&m, &b, Ok(&l));
        let json = baton_json(&inputs);
        assert!(
            json.starts_with("{\n  \"metric\": \"instructions\",\n"),
            "{json}"
        );
        assert!(json.contains("  \"qemu\": \"QEMU emulator version 7.2.0 \\\"x\\\"\",\n"));
        assert!(json.contains(
            "  \"host_cpus\": 2,\n  \"image\": \"0123456789abcdef\",\n  \
             \"repeat_checked\": true,\n"
        ));
        assert!(json.contains(
            "    {\"name\": \"sched.yield.switch\", \"unit\": \"instructions\", \
             \"iterations\": 1000, \"median\": 300, \"min\": 300, \"max\": 307, \"cpus\": 1, \
             \"paths\": {\"handoffs\": 2000, \"switches\": 0, \"discards\": 0, \
             \"recognitions\": 1500}},\n"
        ));
        assert!(json.contains("\"name\": \"sync.waitwake.cross\""));
        // What is written reads back as the same file.
        let file: json::BatonFile = json::parse(&json).unwrap();
        assert_eq!(json::document(&file), json);
        assert_eq!(file.benchmarks.len(), b.rows.len());
        let switch = file
            .benchmarks
            .iter()
            .find(|r| r.name == "sched.yield.switch");
        assert_eq!(
            switch.and_then(|r| r.paths.as_ref()).map(|p| p.handoffs),
            Some(2000)
        );
        assert!(
            json.contains("\"max\": 3007, \"cpus\": 2}\n  ]\n}\n"),
            "{json}"
        );
        let empty = baton_json(&Inputs {
            baton: &Results::default(),
            repeat: Repeat::NotChecked,
            ..inputs
        });
        assert!(
            empty.ends_with(
                "\"repeat_checked\": false,\n  \"cycles\": {\n    \"measured\": false,\n    \
                 \"why\": \"no hardware KVM on this host\"\n  },\n  \"benchmarks\": []\n}\n"
            ),
            "{empty}"
        );
        let json = linux_json(&m, &l);
        assert!(
            json.contains("  \"guest\": [\n    \"clocksource=tsc\"\n  ],\n"),
            "{json}"
        );
        assert!(json.contains("  \"remarks\": [],\n"));
        let file: json::LinuxFile = json::parse(&json).unwrap();
        assert_eq!(json::document(&file), json);
        assert_eq!(file.benchmarks.len(), l.rows.len());
        assert!(json.contains(
            "{\"name\": \"linux.fork.exit\", \"unit\": \"instructions\", \"iterations\": \
             1000, \"median\": 261081, \"min\": 261081, \"max\": 261088}\n  ]\n}\n"
        ));
        // FNV-1a test vectors.
        assert_eq!(fingerprint(&[]), "cbf29ce484222325");
        assert_eq!(fingerprint(&[b"a"]), "af63dc4c8601ec8c");
        assert_eq!(fingerprint(&[b"fo", b"obar"]), "85944171f73967e8");
    }

    #[test]
    fn reads_cpuinfo() {
        let text = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n\n\
                    processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\n";
        assert_eq!(
            cpu_model(text),
            ("Intel(R) Xeon(R) Processor".to_string(), 2)
        );
        assert_eq!(cpu_model(""), ("unknown".to_string(), 0));
    }
}
