//! `cargo xtask profile`: the null RPC kernel path by stage, as seed 001 (Ford & Lepreau,
//! section 8.3, Table 1) counted it, for Baton's two RPC paths, exactly, in instructions.
//!
//! 1. The images are built as for `bench`, and the same benchmark image (`init=bench
//!    shutdown`) is booted once per path ([`PATHS`], both at once) under TCG with `-icount
//!    shift=0,align=off,sleep=off`, one CPU, and QEMU's gdb stub on a free local port with
//!    the CPU paused (`-gdb tcp:127.0.0.1:<port> -S`: as `-s -S`, on a port of its own).
//!    The serial logs go to `results/profile.<path>.log`.
//! 2. gdb, in batch mode, runs a Python script that xtask writes to a temporary file
//!    ([`gdb_script`]): a hardware breakpoint on `syscall_entry` (or, for a path that
//!    starts with a fault, on that vector's trap stub: [`Entry`]) whose Python `stop`
//!    method counts the entries with the path's trigger (`rax` = system call number,
//!    optionally `rdi`) and stops at the one after the first [`PathSpec::skip`]. Then it `stepi`s
//!    through the kernel recording every `pc` until the next return to user mode (the `pc`
//!    drops below the kernel half), runs the user code to the next `syscall_entry`
//!    untraced, and traces that kernel pass too: two passes, one RPC round trip. Then it
//!    kills QEMU. The trace goes to `results/profile.<path>.trace`, gdb's output to
//!    `results/profile.<path>.gdb.log`.
//! 3. Every traced `pc` is symbolized with one `addr2line -a -f -i -C` run (inline chains,
//!    innermost first) and each instruction is sorted into a stage by
//!    [`crate::stages::RULES`]. The `iced-x86` decoder reads every traced instruction from
//!    the kernel ELF ([`crate::mix::decode`]): its text, and whether it is a
//!    load/store and whether a branch (Table 2). `results/profile.md` is written and
//!    printed ([`crate::stages::report`]), and each traced pass, annotated instruction by
//!    instruction, goes to `results/profile.<path>.insns` ([`listing`]).
//!
//! Single-stepping under `-icount` is deterministic, and nothing the host does reaches the
//! guest, so two runs give the same tables.

use crate::build::{self, Images};
use crate::deps;
use crate::mix::{self, Mix};
use crate::qemu::{self, Accel, Machine};
use crate::report::Meta;
use crate::stages::{self, Header, Pass, PathProfile, Side};
use crate::test::wait_with_timeout;
use crate::workspace::{command, note, root, shell_line, Step};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::path::Path;
use std::process::{Child, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// gdb (and QEMU with it) is killed, and the profile fails, after this long.
const TIMEOUT: Duration = Duration::from_secs(900);
/// A traced pass longer than this is an error (no return to user mode). (`vm_map` of 100
/// resident pages, the `vm_map` path, is about 30,000.)
const PASS_LIMIT: u64 = 50_000;

/// One traced kernel pass: what the gdb script wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawPass {
    /// `rax` at `syscall_entry`: the system call number.
    pub rax: u64,
    /// `rdi` at `syscall_entry`: its first argument.
    pub rdi: u64,
    /// Every instruction's address, in order, up to and including the `sysretq`.
    pub pcs: Vec<u64>,
}

/// What a traced pass must be, and how it is reported.
pub struct PassSpec {
    /// Its label in the report.
    pub label: &'static str,
    /// Who makes the system call.
    pub side: Side,
    /// The system call number it must start with; `None` for a pass that starts with a
    /// trap (the path's [`Entry::Trap`]).
    pub rax: Option<u64>,
    /// A function only this pass runs (found in its inline chains): which traced pass is
    /// which is decided by it, not by the order they came in (both passes of the switching
    /// path start with the same system call and arguments).
    pub marker: &'static str,
}

/// One RPC path to trace.
pub struct PathSpec {
    /// Short name, for files (`results/profile.<name>.*`).
    pub name: &'static str,
    /// The column's name in the report.
    pub column: &'static str,
    /// The benchmark row whose RPCs are traced.
    pub bench: &'static str,
    /// Where the first traced pass enters the kernel.
    pub entry: Entry,
    /// The trigger: the system call number in `rax` (at [`Entry::Syscall`]).
    pub rax: u64,
    /// The trigger's `rdi`, if it matters.
    pub rdi: Option<u64>,
    /// How many triggering entries are let through first (warm-up: the caches of the
    /// kernel's tables are in their steady state).
    pub skip: u64,
    /// The two passes in the order traced.
    pub traced: [PassSpec; 2],
    /// The order of the report: indices into `traced`, call first.
    pub order: [usize; 2],
    /// For the paths reported on their own (after the two of the paper's tables): what the
    /// path is, for the report's section.
    pub about: &'static str,
    /// A kernel function (its path, as `["taskmake", "sys_create"]`) that only the
    /// trigger's calls run: when given, its entries are counted for the skip instead of
    /// the trigger's (a breakpoint on every system call would take too long to reach a
    /// benchmark late in the run), and the trace starts at the trigger after that.
    pub arm: Option<&'static [&'static str]>,
    /// A whole iteration instead of two passes: every kernel pass (system calls and traps,
    /// faults and interrupts included) from the trigger up to the next entry with the
    /// trigger's `rax` (`traced` and `order` are not used).
    pub cycle: bool,
}

/// Marks a trap in a traced pass's `rax` field (the vector is added): a cycle's passes
/// begin with a system call or a trap.
pub const TRAP_MARK: u64 = 0x1_0000;
/// The timer's vector, whose interrupts a cycle does not trace: under the debugger the
/// virtual clock runs on while gdb holds the processor, so the timer fires every few
/// hundred instructions traced, where the benchmark run sees one every ten million.
const TIMER_VECTOR: u64 = 0x40;
/// Most passes one cycle may have.
const CYCLE_PASSES: u64 = 400;

/// Where a traced path's first pass enters the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `syscall_entry`, with the path's `rax` (and `rdi`).
    Syscall,
    /// The trap stub of this vector (`trap_stubs`, 16 bytes a stub): a fault the benchmark
    /// makes on purpose, counted whatever the registers hold.
    Trap(u8),
    /// The page fault's entry (`floor_page_fault`), counted only when the faulting address (`cr2`) is
    /// in `[from, to)`: the benchmark's own memory, not every fault of the boot.
    PageFault { from: u64, to: u64 },
}

/// `ipc_msg`'s system call number.
const IPC_MSG: u64 = 18;
/// `act_return`'s system call number.
const ACT_RETURN: u64 = 41;
/// `MSG_SEND | MSG_RECEIVE`.
const SEND_RECEIVE: u64 = 3;
/// `wait`'s and `wake`'s system call numbers.
const WAIT: u64 = 8;
const WAKE: u64 = 9;
/// `task_create`'s system call number.
const TASK_CREATE: u64 = 120;
/// `vm_deallocate`'s and `vm_protect`'s system call numbers.
const VM_DEALLOCATE: u64 = 71;
const VM_PROTECT: u64 = 72;
/// `vm_map`'s system call number.
const VM_MAP: u64 = 111;
/// `spin_raise`'s system call number.
const SPIN_RAISE: u64 = 107;
/// The number `spin.syscall.event` installs the built-in `null` on.
const SPIN_NULL: u64 = 0x1000;
/// The number the `spin.vm.*.builtin` rows install the built-in `protect` on.
const SPIN_PROTECT: u64 = 0x1201;
/// The number the `spin.vm.*` rows install the WebAssembly `prot` on.
const SPIN_PROTECT_WASM: u64 = 0x1200;
/// `MSG_SEND | MSG_RECEIVE | MSG_SLOW`: the general path, asked for.
const SEND_RECEIVE_SLOW: u64 = 11;

/// Where `vm.fault.zero` puts its memory (`VM_BENCH` in the bench program), and its size
/// (1,100 pages).
const VM_BENCH: u64 = 0x5200_0000_0000;
const VM_BENCH_END: u64 = VM_BENCH + 1100 * 4096;

/// The paths: the switching fast path (`rpc.null.fast`) and migrating RPC
/// (`rpc.null.migrating`), set side by side with the paper's Table 1, and the general path
/// (`rpc.null.slow`), reported on its own: the client's call with `MSG_SLOW` and the
/// next kernel entry (the server's reply), in the order traced (no markers).
pub const PATHS: [PathSpec; 14] = [
    PathSpec {
        name: "fast",
        column: "switching (fast path)",
        bench: "rpc.null.fast",
        entry: Entry::Syscall,
        rax: IPC_MSG,
        rdi: Some(SEND_RECEIVE),
        skip: 400,
        traced: [
            PassSpec {
                label: "call: client's ipc_msg(SEND|RECEIVE)",
                side: Side::Client,
                rax: Some(IPC_MSG),
                marker: "fast_commit_call",
            },
            PassSpec {
                label: "reply: server's ipc_msg(SEND|RECEIVE)",
                side: Side::Server,
                rax: Some(IPC_MSG),
                marker: "fast_commit_reply",
            },
        ],
        order: [0, 1],
        about: "",
        arm: None,
        cycle: false,
    },
    PathSpec {
        name: "migrating",
        column: "migrating",
        bench: "rpc.null.migrating",
        entry: Entry::Syscall,
        rax: ACT_RETURN,
        rdi: None,
        skip: 300,
        traced: [
            PassSpec {
                label: "return: server's act_return",
                side: Side::Server,
                rax: Some(ACT_RETURN),
                marker: "sys_act_return",
            },
            PassSpec {
                label: "call: client's ipc_msg(SEND|RECEIVE)",
                side: Side::Client,
                rax: Some(IPC_MSG),
                marker: "migrate",
            },
        ],
        order: [1, 0],
        about: "",
        arm: None,
        cycle: false,
    },
    PathSpec {
        name: "general",
        column: "switching (general path)",
        bench: "rpc.null.slow",
        entry: Entry::Syscall,
        rax: IPC_MSG,
        rdi: Some(SEND_RECEIVE_SLOW),
        skip: 400,
        traced: [
            PassSpec {
                label: "call: client's ipc_msg(SEND|RECEIVE|SLOW)",
                side: Side::Client,
                rax: Some(IPC_MSG),
                marker: "",
            },
            PassSpec {
                label: "reply: server's ipc_msg(SEND|RECEIVE)",
                side: Side::Server,
                rax: Some(IPC_MSG),
                marker: "",
            },
        ],
        order: [0, 1],
        about: "The path every queued, rights-carrying or timed message takes, not in the \
                paper's tables",
        arm: None,
        cycle: false,
    },
    PathSpec {
        name: "exc",
        column: "exception",
        bench: "exc.roundtrip",
        entry: Entry::Trap(6),
        rax: 0,
        rdi: None,
        skip: 400,
        traced: [
            PassSpec {
                label: "fault: the faulting thread's ud2, to the handler",
                side: Side::Client,
                rax: None,
                marker: "",
            },
            PassSpec {
                label: "reply: the handler's ipc_msg(SEND|RECEIVE), to the faulting thread",
                side: Side::Server,
                rax: Some(IPC_MSG),
                marker: "",
            },
        ],
        order: [0, 1],
        about: "An exception handled by a user-level handler (seed 000 section 2.5): the \
                fault sent as a message to the handler, and the handler's reply setting the \
                faulting thread's registers",
        arm: None,
        cycle: false,
    },
    PathSpec {
        name: "waitwake",
        column: "wait and wake",
        bench: "sync.waitwake.pingpong",
        entry: Entry::Syscall,
        rax: WAIT,
        rdi: None,
        skip: 400,
        traced: [
            PassSpec {
                label: "wait: A's wait, blocking, to B",
                side: Side::Client,
                rax: Some(WAIT),
                marker: "",
            },
            PassSpec {
                label: "wake: B's wake of A",
                side: Side::Server,
                rax: Some(WAKE),
                marker: "",
            },
        ],
        order: [0, 1],
        about: "Half a round trip of two threads waking each other through a shared word: \
                A's wait, which blocks and switches to B (just woken, returning from its own \
                wait), and B's wake of A",
        arm: None,
        cycle: false,
    },
    PathSpec {
        name: "task_null",
        column: "task.null",
        bench: "task.null",
        entry: Entry::Syscall,
        rax: TASK_CREATE,
        rdi: None,
        skip: 400,
        traced: [
            PassSpec {
                label: "",
                side: Side::Client,
                rax: None,
                marker: "",
            },
            PassSpec {
                label: "",
                side: Side::Client,
                rax: None,
                marker: "",
            },
        ],
        order: [0, 1],
        about: "One iteration of Accent's null program (Table 3-12): the task made, its \
                program mapped, its thread made and started, the program running to its \
                exit (its faults included), and the creator's wait for its end",
        arm: Some(&["taskmake", "sys_create"]),
        cycle: true,
    },
    PathSpec {
        name: "fault_zero",
        column: "zero-fill fault",
        bench: "vm.fault.zero",
        entry: Entry::PageFault {
            from: VM_BENCH,
            to: VM_BENCH_END,
        },
        rax: 0,
        rdi: None,
        skip: 400,
        traced: [
            PassSpec {
                label: "fault: a store to an untouched anonymous page, to its return",
                side: Side::Client,
                rax: None,
                marker: "",
            },
            PassSpec {
                label: "fault: the next page's store (the same path again)",
                // The same thread; `Server` only so the report's stage columns keep the
                // two passes apart.
                side: Side::Server,
                rax: None,
                marker: "",
            },
        ],
        order: [0, 1],
        about: "Accent's zero-fill fault (Table 3-3): the first store to an untouched page of \
                anonymous memory, from the trap to the return to user mode, the frame zeroed \
                inside; the next kernel entry is the next page's fault",
        arm: None,
        cycle: false,
    },
    PathSpec {
        name: "vm_protect",
        column: "vm_protect of one page",
        bench: "vm.protect.1",
        entry: Entry::Syscall,
        rax: VM_PROTECT,
        rdi: Some(VM_BENCH),
        // `vm_protect` is called by no row before `vm.protect.1`, whose iterations make
        // two calls each (read-only, then read-write again): armed at the 400th (a
        // read-write one), the trace starts at the next, read-only.
        skip: 399,
        traced: [
            PassSpec {
                label: "protect: one resident, written page made read-only",
                side: Side::Client,
                rax: Some(VM_PROTECT),
                marker: "",
            },
            PassSpec {
                label: "unprotect: the same page made writable again (`vm.unprotect.1`)",
                // The same thread; `Server` only so the report keeps the passes apart.
                side: Side::Server,
                rax: Some(VM_PROTECT),
                marker: "",
            },
        ],
        order: [0, 1],
        about: "Accent's protection change of one resident page (`vm.protect.1`): the map's \
                entry changed, the translation write-protected and the TLB flushed; then the \
                call that gives write access back (`vm.unprotect.1`)",
        arm: Some(&["vm", "vm_protect"]),
        cycle: false,
    },
    PathSpec {
        name: "ool_move",
        column: "ipc.ool.64k.move",
        bench: "ipc.ool.64k.move",
        entry: Entry::Syscall,
        rax: VM_DEALLOCATE,
        rdi: None,
        // `ool::check_regions` runs once per out-of-line send: 110 sends each of `ipc.ool.4k`,
        // `.4k.move` and `.64k` come first, then the warm-up of `.64k.move`.
        skip: 345,
        traced: [
            PassSpec {
                label: "",
                side: Side::Client,
                rax: None,
                marker: "",
            },
            PassSpec {
                label: "",
                side: Side::Client,
                rax: None,
                marker: "",
            },
        ],
        order: [0, 1],
        about: "One iteration of `ipc.ool.64k.move` (Accent's MoveWords through a message, \
                16 pages), from the server's `vm_deallocate` of the region it received to \
                the next one: the deallocation (its pages freed), the server's reply, the \
                client's allocation and first stores to a new region (outside the row's \
                window), the client's call moving it (`OOL_DEALLOCATE`), its delivery and \
                the server's first read of each page (memory fills)",
        arm: Some(&["ool", "check_regions"]),
        cycle: true,
    },
    PathSpec {
        name: "vm_map",
        column: "vm_map of 100 resident pages",
        bench: "vm.map.100",
        entry: Entry::Syscall,
        rax: VM_MAP,
        rdi: None,
        // `vm::map_object` runs for every `vm_map` and for each segment of a program a
        // task is made with. `vm.map.1` makes 1,101 calls (its object's first mapping and
        // 1,100 iterations), then `vm.map.100` 111: armed at the 1,161st, the trace lands
        // in `vm.map.100`'s iterations as long as fewer than 58 calls came before.
        skip: 1160,
        traced: [
            PassSpec {
                label: "vm_map: 100 resident pages of an object mapped, each translation entered",
                side: Side::Client,
                rax: Some(VM_MAP),
                marker: "",
            },
            PassSpec {
                label: "the next kernel entry (the mapping's deallocation, outside the row)",
                // The same thread; `Server` only so the report keeps the passes apart.
                side: Side::Server,
                rax: None,
                marker: "",
            },
        ],
        order: [0, 1],
        about: "Mapping 100 resident pages of a memory object (`vm.map.100`): the map's new \
                entry and a read-only translation entered and recorded in the reverse map for \
                each resident page, so that the row's loads take no fault",
        arm: Some(&["vm", "map_object"]),
        cycle: false,
    },
    PathSpec {
        name: "spin_syscall",
        column: "extension's system call",
        bench: "spin.syscall.event",
        entry: Entry::Syscall,
        rax: SPIN_NULL,
        rdi: None,
        skip: 400,
        traced: [
            PassSpec {
                label: "a system call a built-in extension added (`Trap.SystemCall`)",
                side: Side::Client,
                rax: Some(SPIN_NULL),
                marker: "",
            },
            PassSpec {
                label: "the next one (the same path again)",
                // The same thread; `Server` only so the report keeps the passes apart.
                side: Side::Server,
                rax: Some(SPIN_NULL),
                marker: "",
            },
        ],
        order: [0, 1],
        about: "SPIN's Table 2, line 2: a null system call a built-in extension added, from \
                the `syscall` to the `sysretq`: the decode, the raise of `Trap.SystemCall` \
                and its one keyed handler",
        // The handler (the built-in null call, which the linker folds into `count`, of the
        // same body): the key is compared inline on the entry's lean way.
        arm: Some(&["extension", "strand", "h_count"]),
        cycle: false,
    },
    PathSpec {
        name: "spin_wasm",
        column: "a WebAssembly handler",
        bench: "spin.dispatch.1.wasm",
        entry: Entry::Syscall,
        rax: SPIN_RAISE,
        rdi: Some(0),
        skip: 400,
        traced: [
            PassSpec {
                label: "`spin_raise(0)` with one WebAssembly handler (`wasmi`)",
                side: Side::Client,
                rax: Some(SPIN_RAISE),
                marker: "",
            },
            PassSpec {
                label: "the next one (the same path again)",
                side: Side::Server,
                rax: Some(SPIN_RAISE),
                marker: "",
            },
        ],
        order: [0, 1],
        about: "A null WebAssembly invocation: `Test.Raise` raised by a system call, its one \
                handler a module's `one` run by `wasmi` under its fuel (the store taken out \
                and put back, the fuel set, the typed call)",
        arm: Some(&["extension", "wasm", "test_handler"]),
        cycle: false,
    },
    PathSpec {
        name: "spin_fault",
        column: "a built-in fault handler",
        bench: "spin.vm.fault.builtin",
        // Anywhere in user space: the benchmark's pages are allocated anywhere; the arm
        // makes it the row's own faults.
        entry: Entry::PageFault {
            from: 0x1000,
            to: 0x8000_0000_0000,
        },
        rax: 0,
        rdi: None,
        // `h_unprotect` runs once per iteration of `spin.vm.fault.builtin` (the first
        // row that installs it): armed after the warm-up.
        skip: 200,
        traced: [
            PassSpec {
                label: "a write to a read-only page, resolved by the built-in `unprotect` \
                        (`Translation.ProtectionFault`)",
                side: Side::Client,
                rax: None,
                marker: "",
            },
            PassSpec {
                label: "the next kernel entry: the built-in system call that protects the \
                        page again",
                // The same thread; `Server` only so the report keeps the passes apart.
                side: Side::Server,
                rax: Some(SPIN_PROTECT),
                marker: "",
            },
        ],
        order: [0, 1],
        about: "SPIN's Table 4 Fault line with a built-in handler (`spin.vm.fault.builtin`): \
                the page fault, the raise of `Translation.ProtectionFault`, the handler's \
                `Translation.Protect`, the check that the map now allows the write, the \
                translation made writable in place, and the return from the trap",
        arm: Some(&["extension", "translation", "h_unprotect"]),
        cycle: false,
    },
    PathSpec {
        name: "spin_fault_wasm",
        column: "a WebAssembly fault handler",
        bench: "spin.vm.fault",
        entry: Entry::PageFault {
            from: 0x1000,
            to: 0x8000_0000_0000,
        },
        rax: 0,
        rdi: None,
        // `wasm::fault_tier` runs once per iteration of `spin.vm.trap` (1,100, the
        // WebAssembly `trap`), then of `spin.vm.fault` (the WebAssembly `unprotect`):
        // armed after the fault row's warm-up.
        skip: 1300,
        traced: [
            PassSpec {
                label: "a write to a read-only page, resolved by the WebAssembly `unprotect` \
                        on the register-form tier (`Translation.ProtectionFault`)",
                side: Side::Client,
                rax: None,
                marker: "",
            },
            PassSpec {
                label: "the next kernel entry: the WebAssembly system call that protects \
                        the page again",
                // The same thread; `Server` only so the report keeps the passes apart.
                side: Side::Server,
                rax: Some(SPIN_PROTECT_WASM),
                marker: "",
            },
        ],
        order: [0, 1],
        about: "SPIN's Table 4 Fault line with the handler as a WebAssembly extension \
                (`spin.vm.fault`): as `spin.vm.fault.builtin`, with `appel`'s `unprotect` \
                run by the register-form tier and its `baton.translation.protect` import",
        arm: Some(&["extension", "wasm", "fault_tier"]),
        cycle: false,
    },
];

impl PathSpec {
    /// How the traced RPC was found, for the report.
    fn trigger(&self) -> String {
        if let Entry::PageFault { from, to } = self.entry {
            return format!(
                "the {} page fault at an address in [{from:#x}, {to:#x}) traced, then the \
                 next kernel entry",
                ordinal(self.skip + 1)
            );
        }
        if let Entry::Trap(v) = self.entry {
            return format!(
                "the {} trap of vector {v} traced, then the next kernel entry",
                ordinal(self.skip + 1)
            );
        }
        let what = match (self.rax, self.rdi) {
            (IPC_MSG, Some(SEND_RECEIVE)) => "ipc_msg(SEND|RECEIVE)".to_string(),
            (ACT_RETURN, None) => "act_return".to_string(),
            (rax, Some(rdi)) => format!("system call {rax} with rdi = {rdi}"),
            (rax, None) => format!("system call {rax}"),
        };
        format!(
            "the {} {what} traced, then the next kernel entry",
            ordinal(self.skip + 1)
        )
    }
}

/// `1st`, `2nd`, `401st`, ...
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Runs `cargo xtask profile`.
pub fn profile() -> Result<ExitCode, String> {
    let start = Instant::now();
    deps::ensure_target()?;
    let qemu = deps::ensure_qemu()?;
    let gdb = deps::ensure_tool(&deps::GDB)?;
    let addr2line = deps::ensure_tool(&deps::ADDR2LINE)?;
    let images = build::build()?;
    if !images.programs.iter().any(|p| p == "bench") {
        return Err("the initrd has no `bench` program (user/programs/src/bin/bench.rs)".into());
    }
    let dir = root().join("results");
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if let Ok(name) = std::env::var("BATON_PROFILE_ONLY") {
        return profile_one(&name, &images, &qemu, &gdb, &addr2line, &dir);
    }

    note(format!(
        "tracing {} under QEMU TCG -icount with gdb, all at once (about two minutes)",
        PATHS.map(|p| p.bench).join(" and ")
    ));
    let traces: Vec<Result<Vec<RawPass>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = PATHS
            .iter()
            .map(|spec| {
                let (images, qemu, gdb, dir) = (&images, &qemu, &gdb, &dir);
                s.spawn(move || {
                    let step = Step::start(format!("tracing {}", spec.bench));
                    step.finish(trace(spec, images, qemu, gdb, dir))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the tracing thread panicked".into()))
            })
            .collect()
    });
    let mut raw = Vec::new();
    for (spec, t) in PATHS.iter().zip(traces) {
        raw.push(t.map_err(|e| format!("tracing {}: {e}", spec.bench))?);
    }

    let pcs: Vec<u64> = {
        let mut all: Vec<u64> = raw.iter().flatten().flat_map(|p| p.pcs.clone()).collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    let chains = symbolize(&addr2line, &images.kernel, &pcs)?;
    let raw: Vec<Vec<RawPass>> = PATHS
        .iter()
        .zip(raw)
        .map(|(spec, passes)| {
            if spec.cycle {
                return check_cycle(spec, passes);
            }
            let passes = identify(spec, passes, &chains)?;
            check_passes(spec, &passes)?;
            Ok(passes)
        })
        .collect::<Result<_, String>>()?;
    let elf = fs::read(&images.kernel)
        .map_err(|e| format!("cannot read {}: {e}", images.kernel.display()))?;
    let decoded = mix::decode(&elf, &pcs)?;
    let mixes: BTreeMap<u64, Mix> = decoded.iter().map(|(pc, (_, m))| (*pc, *m)).collect();
    let insns: BTreeMap<u64, String> = decoded.into_iter().map(|(pc, (t, _))| (pc, t)).collect();
    for (spec, passes) in PATHS.iter().zip(&raw) {
        let out = dir.join(format!("profile.{}.insns", spec.name));
        let text = listing(spec, passes, &chains, &insns, &mixes);
        fs::write(&out, text).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    let cycles: Vec<String> = PATHS
        .iter()
        .zip(&raw)
        .filter(|(spec, _)| spec.cycle)
        .map(|(spec, passes)| cycle_report(spec, passes, &chains, &mixes))
        .collect();
    let profiles: Vec<PathProfile> = PATHS
        .iter()
        .zip(&raw)
        .filter(|(spec, _)| !spec.cycle)
        .map(|(spec, passes)| {
            let pass = |i: usize| {
                let t = &spec.traced[i];
                Pass::classify(t.label.to_string(), t.side, &passes[i].pcs, &chains, &mixes)
            };
            PathProfile {
                column: spec.column.to_string(),
                bench: spec.bench.to_string(),
                trigger: spec.trigger(),
                passes: [pass(spec.order[0]), pass(spec.order[1])],
            }
        })
        .collect();

    let meta = Meta::collect(&qemu);
    let header = Header {
        commit: &meta.commit,
        qemu: &meta.qemu,
    };
    let others: Vec<(&PathProfile, &str)> = profiles[2..]
        .iter()
        .zip(PATHS[2..].iter().filter(|s| !s.cycle))
        .map(|(p, spec)| (p, spec.about))
        .collect();
    let mut text = stages::report(&header, &profiles[0], &profiles[1], &others);
    for c in &cycles {
        text.push_str(c);
    }
    let out = dir.join("profile.md");
    fs::write(&out, &text).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    println!("{text}");
    note(format!(
        "wrote {}; traces, gdb output and serial logs are results/profile.*",
        out.display()
    ));
    note(format!(
        "cargo xtask profile took {:.0}s",
        start.elapsed().as_secs_f64()
    ));
    Ok(ExitCode::SUCCESS)
}

/// `BATON_PROFILE_ONLY=<name> cargo xtask profile`: traces the one path `name` (a
/// [`PathSpec::name`]) and prints each pass's top functions, without the tables of the
/// full report (which need every path); the listing goes to
/// `results/profile.<name>.insns` as in a full run. For working on one path.
fn profile_one(
    name: &str,
    images: &Images,
    qemu: &Path,
    gdb: &Path,
    addr2line: &Path,
    dir: &Path,
) -> Result<ExitCode, String> {
    let spec = PATHS.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = PATHS.iter().map(|p| p.name).collect();
        format!("no path `{name}` (paths: {})", names.join(", "))
    })?;
    let step = Step::start(format!("tracing {}", spec.bench));
    let passes = step.finish(trace(spec, images, qemu, gdb, dir))?;
    let mut pcs: Vec<u64> = passes.iter().flat_map(|p| p.pcs.clone()).collect();
    pcs.sort_unstable();
    pcs.dedup();
    let chains = symbolize(addr2line, &images.kernel, &pcs)?;
    // The passes in the order of the spec's labels, found by their markers as in the full
    // report: the order traced depends on where the trigger lands in the cycle.
    let passes = if spec.cycle {
        passes
    } else {
        identify(spec, passes, &chains)?
    };
    let elf = fs::read(&images.kernel)
        .map_err(|e| format!("cannot read {}: {e}", images.kernel.display()))?;
    let decoded = mix::decode(&elf, &pcs)?;
    let mixes: BTreeMap<u64, Mix> = decoded.iter().map(|(pc, (_, m))| (*pc, *m)).collect();
    let insns: BTreeMap<u64, String> = decoded.into_iter().map(|(pc, (t, _))| (pc, t)).collect();
    let out = dir.join(format!("profile.{}.insns", spec.name));
    fs::write(&out, listing(spec, &passes, &chains, &insns, &mixes))
        .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    for (i, p) in passes.iter().enumerate() {
        let label = if spec.cycle {
            entry_label(p)
        } else {
            spec.traced.get(i).map_or("", |t| t.label).to_string()
        };
        let side = spec.traced.get(i).map_or(Side::Client, |t| t.side);
        let pass = Pass::classify(label.clone(), side, &p.pcs, &chains, &mixes);
        println!("\n## pass {i}: {label}: {} instructions\n", pass.total.all);
        println!("{}", stages::top_functions(&pass, 3 * TOP_FUNCTIONS));
    }
    note(format!("wrote {}", out.display()));
    Ok(ExitCode::SUCCESS)
}

/// Puts the traced passes in the order of `spec.traced`, each found by its marker
/// function in its instructions' inline chains (an empty marker takes the first pass
/// left, in the order traced). An error when the markers do not tell the passes apart
/// (each must be in exactly one pass).
fn identify(
    spec: &PathSpec,
    passes: Vec<RawPass>,
    chains: &BTreeMap<u64, Vec<stages::Frame>>,
) -> Result<Vec<RawPass>, String> {
    let runs = |p: &RawPass, marker: &str| {
        p.pcs.iter().any(|pc| {
            chains.get(pc).is_some_and(|c| {
                c.iter()
                    .any(|f| f.function.rsplit("::").next() == Some(marker))
            })
        })
    };
    let mut left: Vec<Option<RawPass>> = passes.into_iter().map(Some).collect();
    let mut out = Vec::new();
    for want in &spec.traced {
        if want.marker.is_empty() {
            if let Some(p) = left.iter_mut().find_map(Option::take) {
                out.push(p);
            }
            continue;
        }
        let found: Vec<usize> = left
            .iter()
            .enumerate()
            .filter(|(_, p)| p.as_ref().is_some_and(|p| runs(p, want.marker)))
            .map(|(i, _)| i)
            .collect();
        let [i] = found[..] else {
            return Err(format!(
                "{}: {} traced passes run `{}`, which marks the pass \"{}\" (one expected; \
                 has the kernel changed? results/profile.{}.trace)",
                spec.bench,
                found.len(),
                want.marker,
                want.label,
                spec.name
            ));
        };
        out.extend(left[i].take());
    }
    Ok(out)
}

/// The address of the kernel function `baton_kernel::<path>` in the kernel ELF at `elf`,
/// found by its mangled name (each component as its length and text, as Rust's symbol
/// mangling writes them).
fn symbol_address(elf: &Path, path: &[&str]) -> Result<u64, String> {
    use object::{Object, ObjectSymbol};
    let bytes = fs::read(elf).map_err(|e| format!("cannot read {}: {e}", elf.display()))?;
    let file = object::File::parse(&*bytes).map_err(|e| format!("the kernel ELF: {e}"))?;
    let want: String = core::iter::once("baton_kernel")
        .chain(path.iter().copied())
        .map(|c| format!("{}{c}", c.len()))
        .collect();
    file.symbols()
        .find(|sym| {
            sym.name()
                .is_ok_and(|n| n.starts_with("_ZN") && n[3..].starts_with(&want))
        })
        .map(|sym| sym.address())
        .ok_or_else(|| {
            format!(
                "no function baton_kernel::{} in the kernel ELF (inlined or renamed?)",
                path.join("::")
            )
        })
}

/// What a cycle's pass began with: `system call N` or `trap V` (see [`TRAP_MARK`]).
fn entry_label(p: &RawPass) -> String {
    match p.rax.checked_sub(TRAP_MARK) {
        Some(v) if v < 256 => format!("trap {v}"),
        _ => format!("system call {}", p.rax),
    }
}

/// Checks a cycle's passes: at least one, the first with the trigger, none empty.
fn check_cycle(spec: &PathSpec, passes: Vec<RawPass>) -> Result<Vec<RawPass>, String> {
    match passes.first() {
        None => return Err(format!("{}: no pass traced", spec.bench)),
        Some(p) if p.rax != spec.rax => {
            return Err(format!(
                "{}: the cycle began with system call {}, not {} (results/profile.{}.trace)",
                spec.bench, p.rax, spec.rax, spec.name
            ))
        }
        Some(_) => {}
    }
    if let Some(n) = passes.iter().position(|p| p.pcs.is_empty()) {
        return Err(format!("{}: pass {n} is empty", spec.bench));
    }
    Ok(passes)
}

/// The report's section for a cycle: its passes by what began them, and the whole
/// iteration's instructions by function.
fn cycle_report(
    spec: &PathSpec,
    passes: &[RawPass],
    chains: &BTreeMap<u64, Vec<stages::Frame>>,
    mixes: &BTreeMap<u64, Mix>,
) -> String {
    let mut by_entry: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for p in passes {
        let e = by_entry.entry(entry_label(p)).or_default();
        e.0 += 1;
        e.1 += p.pcs.len() as u64;
    }
    let all: Vec<u64> = passes.iter().flat_map(|p| p.pcs.iter().copied()).collect();
    let whole = stages::Pass::classify(spec.column.into(), Side::Client, &all, chains, mixes);
    let mut r = String::new();
    let _ = writeln!(
        r,
        "\n## {} (`{}`), one whole iteration\n\n{} (from the {} system call {} traced to \
         the next one: {} kernel passes, {} kernel instructions; the row also counts the \
         user side). A trap's pass is counted from `trap_common` (the stub's two pushes and \
         jump are not traced); the timer's interrupts are not traced (under the debugger the \
         clock runs on while gdb holds the processor, so they come every few hundred \
         instructions instead of every ten million).\n",
        spec.column,
        spec.bench,
        spec.about,
        ordinal(spec.skip + 1),
        spec.rax,
        passes.len(),
        whole.total.all
    );
    r.push_str("| kernel entry | passes | instructions |\n|---|---:|---:|\n");
    let mut rows: Vec<_> = by_entry.into_iter().collect();
    rows.sort_by_key(|r| core::cmp::Reverse(r.1 .1));
    for (what, (n, insns)) in rows {
        let _ = writeln!(r, "| {what} | {n} | {insns} |");
    }
    let _ = writeln!(r, "\n### {}: top functions\n", spec.column);
    r.push_str(&stages::top_functions(&whole, 3 * TOP_FUNCTIONS));
    r
}

/// Functions listed in a cycle's section.
const TOP_FUNCTIONS: usize = 20;

/// Checks that the traced passes are the ones `spec` expects.
fn check_passes(spec: &PathSpec, passes: &[RawPass]) -> Result<(), String> {
    if passes.len() != spec.traced.len() {
        return Err(format!(
            "{}: {} passes traced, {} expected",
            spec.bench,
            passes.len(),
            spec.traced.len()
        ));
    }
    for (n, (p, want)) in passes.iter().zip(&spec.traced).enumerate() {
        if want.rax.is_some_and(|r| r != p.rax) {
            return Err(format!(
                "{}: pass {n} ({}) started with system call {}, not {}; has the benchmark \
                 program changed? (results/profile.{}.trace)",
                spec.bench,
                want.label,
                p.rax,
                want.rax.unwrap_or_default(),
                spec.name
            ));
        }
        if p.pcs.is_empty() {
            return Err(format!("{}: pass {n} is empty", spec.bench));
        }
    }
    Ok(())
}

/// Boots the benchmark image paused with a gdb stub and traces `spec`'s two kernel passes.
fn trace(
    spec: &PathSpec,
    images: &Images,
    qemu: &Path,
    gdb: &Path,
    dir: &Path,
) -> Result<Vec<RawPass>, String> {
    let port = free_port()?;
    let serial = dir.join(format!("profile.{}.log", spec.name));
    let trace_file = dir.join(format!("profile.{}.trace", spec.name));
    let gdb_log = dir.join(format!("profile.{}.gdb.log", spec.name));
    let script = std::env::temp_dir().join(format!(
        "baton-profile-{}-{}.py",
        std::process::id(),
        spec.name
    ));
    let _ = fs::remove_file(&trace_file);
    let remote = format!("127.0.0.1:{port}");
    let arm = match spec.arm {
        Some(path) => Some(symbol_address(&images.kernel, path)?),
        None => None,
    };
    fs::write(&script, gdb_script(spec, &remote, &trace_file, arm))
        .map_err(|e| format!("cannot write {}: {e}", script.display()))?;

    let machine = Machine {
        images,
        accel: Accel::Tcg,
        smp: 1,
        cmdline: qemu::cmdline("bench", true, &[crate::bench::PRIV.to_string()]),
        icount: true,
        gdb: None,
        disk: None,
    };
    // The serial console (QEMU's standard output) to a file, never a pipe, as `bench`
    // does; the stub on a port of our own, so that the two paths and a `cargo xtask gdb`
    // elsewhere do not collide.
    let mut q = machine.command(qemu);
    q.args(["-gdb", &format!("tcp:{remote}"), "-S"]);
    note(format!("$ {}", shell_line(&q)));
    let log =
        File::create(&serial).map_err(|e| format!("cannot create {}: {e}", serial.display()))?;
    q.stdin(Stdio::null()).stdout(log).stderr(Stdio::null());
    let mut qemu_child = q
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", qemu.display()))?;

    let result = run_gdb(gdb, images, &script, &gdb_log);
    let _ = fs::remove_file(&script);
    // gdb killed QEMU; make sure of it whatever happened.
    stop(&mut qemu_child);
    result?;
    let text = fs::read_to_string(&trace_file)
        .map_err(|e| format!("cannot read {}: {e}", trace_file.display()))?;
    parse_trace(&text).map_err(|e| format!("{}: {e}", trace_file.display()))
}

/// Runs gdb on `script`, its output to `log`.
fn run_gdb(gdb: &Path, images: &Images, script: &Path, log: &Path) -> Result<(), String> {
    let mut cmd = command(gdb);
    cmd.args(["-batch", "-nx", "-x"])
        .arg(script)
        .arg(&images.kernel);
    note(format!("$ {}", shell_line(&cmd)));
    let file = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(file).stderr(err);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", gdb.display()))?;
    let status = wait_with_timeout(&mut child, TIMEOUT)?;
    let tail = || {
        let text = fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let mut t = String::new();
        for l in &lines[lines.len().saturating_sub(15)..] {
            let _ = write!(t, "\n    | {l}");
        }
        t
    };
    match status {
        None => Err(format!(
            "gdb did not finish within {}s (log {}){}",
            TIMEOUT.as_secs(),
            log.display(),
            tail()
        )),
        Some(s) if !s.success() => {
            Err(format!("gdb failed ({s}; log {}){}", log.display(), tail()))
        }
        Some(_) => Ok(()),
    }
}

/// Kills and reaps a child of ours if it is still running.
fn stop(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("cannot find a free local port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free local port: {e}"))
}

/// The gdb script's logic; [`gdb_script`] puts the settings in front.
const GDB_SCRIPT: &str = r#"
import gdb, time

KERNEL_HALF = 0xFFFF800000000000
MASK = (1 << 64) - 1

def reg(name):
    return int(gdb.selected_frame().read_register(name)) & MASK

gdb.execute("set pagination off")
gdb.execute("set confirm off")
ENTRY = int(gdb.parse_and_eval("(unsigned long)&syscall_entry")) & MASK
FIRST = int(gdb.parse_and_eval(FIRST_ENTRY)) & MASK
TRAPS = int(gdb.parse_and_eval("(unsigned long)&trap_common")) & MASK
for attempt in range(200):
    try:
        gdb.execute("target remote " + REMOTE, to_string=True)
        break
    except gdb.error:
        time.sleep(0.05)
else:
    raise gdb.GdbError("cannot connect to QEMU's gdb stub at " + REMOTE)

class Trigger(gdb.Breakpoint):
    # Stops at the entry after the first SKIP whose rax (and rdi) match (none to skip
    # when ARM counted them).
    def __init__(self, skip):
        super().__init__("*0x%x" % FIRST, type=gdb.BP_HARDWARE_BREAKPOINT, internal=True)
        self.seen = 0
        self.skip = skip
    def stop(self):
        if TRIGGER_RAX is not None and reg("rax") != TRIGGER_RAX:
            return False
        if TRIGGER_RDI is not None and reg("rdi") != TRIGGER_RDI:
            return False
        if TRIGGER_CR2 is not None and not (TRIGGER_CR2[0] <= reg("cr2") < TRIGGER_CR2[1]):
            return False
        self.seen += 1
        return self.seen > self.skip

class Arm(gdb.Breakpoint):
    # Counts the entries of the function ARM and stops at the one after the first SKIP.
    def __init__(self):
        super().__init__("*0x%x" % ARM, type=gdb.BP_HARDWARE_BREAKPOINT, internal=True)
        self.seen = 0
    def stop(self):
        self.seen += 1
        return self.seen > SKIP

def run_to(bp, at):
    gdb.execute("continue", to_string=True)
    if reg("pc") != at:
        raise gdb.GdbError("stopped at 0x%x, not at 0x%x" % (reg("pc"), at))
    bp.delete()

def trace_pass(n, rax, rdi):
    out.write("pass %d rax=%x rdi=%x\n" % (n, rax, rdi))
    count = 0
    limit = LIMIT * 10 if CYCLE else LIMIT
    while True:
        pc = reg("pc")
        out.write("%x\n" % pc)
        count += 1
        if count > limit:
            raise gdb.GdbError("pass %d: no return to user mode in %d instructions" % (n, LIMIT))
        gdb.execute("stepi", to_string=True)
        if pc >= KERNEL_HALF and reg("pc") < KERNEL_HALF:
            break

out = open(OUT, "w")
if ARM is not None:
    run_to(Arm(), ARM)
    run_to(Trigger(0), FIRST)
else:
    run_to(Trigger(SKIP), FIRST)
if not CYCLE:
    for n in range(PASSES):
        if n > 0:
            # The next kernel entry: a system call, or for a page-fault path the next page
            # fault (the benchmark's loop makes no system call between two).
            nxt = FIRST if TRIGGER_CR2 is not None else ENTRY
            run_to(gdb.Breakpoint("*0x%x" % nxt, type=gdb.BP_HARDWARE_BREAKPOINT, internal=True), nxt)
        trace_pass(n, reg("rax"), reg("rdi"))
else:
    # Every kernel entry until the trigger's system call comes again: system calls at
    # syscall_entry, traps (faults, interrupts) at trap_common, whose stack holds the
    # vector the stub pushed.
    trace_pass(0, reg("rax"), reg("rdi"))
    gdb.Breakpoint("*0x%x" % ENTRY, type=gdb.BP_HARDWARE_BREAKPOINT, internal=True)
    gdb.Breakpoint("*0x%x" % TRAPS, type=gdb.BP_HARDWARE_BREAKPOINT, internal=True)
    n = 1
    while True:
        gdb.execute("continue", to_string=True)
        pc = reg("pc")
        if pc == ENTRY:
            if reg("rax") == TRIGGER_RAX:
                break
            rax, rdi = reg("rax"), reg("rdi")
        elif pc == TRAPS:
            vec = int.from_bytes(bytes(gdb.selected_inferior().read_memory(reg("rsp"), 8)), "little")
            if vec == SKIP_VECTOR:
                continue
            rax, rdi = TRAP_MARK + vec, 0
        else:
            raise gdb.GdbError("stopped at 0x%x, not at a kernel entry" % pc)
        trace_pass(n, rax, rdi)
        n += 1
        if n > MAX_PASSES:
            raise gdb.GdbError("more than %d kernel passes in one cycle" % MAX_PASSES)
out.write("end\n")
out.close()
gdb.execute("kill")
"#;

/// The gdb Python script that traces `spec`'s passes through the stub at `remote`,
/// writing them to `out`.
pub fn gdb_script(spec: &PathSpec, remote: &str, out: &Path, arm: Option<u64>) -> String {
    let arm = arm.map_or("None".to_string(), |a| format!("{a:#x}"));
    let rdi = spec.rdi.map_or("None".to_string(), |r| r.to_string());
    let (first, rax) = match spec.entry {
        Entry::Syscall => (
            "(unsigned long)&syscall_entry".to_string(),
            spec.rax.to_string(),
        ),
        Entry::Trap(v) => (
            format!("(unsigned long)&trap_stubs + {}", 16 * u64::from(v)),
            "None".to_string(),
        ),
        // The page fault's own entry (the floor's fault window first, then vector 14's
        // stub code).
        Entry::PageFault { .. } => (
            "(unsigned long)&floor_page_fault".to_string(),
            "None".to_string(),
        ),
    };
    let cr2 = match spec.entry {
        Entry::PageFault { from, to } => format!("({from:#x}, {to:#x})"),
        _ => "None".to_string(),
    };
    format!(
        "# Written by `cargo xtask profile` (xtask/src/profile.rs) for {bench}.\n\
         REMOTE = {remote:?}\nFIRST_ENTRY = {first:?}\nTRIGGER_RAX = {rax}\n\
         TRIGGER_RDI = {rdi}\nTRIGGER_CR2 = {cr2}\nSKIP = {skip}\nARM = {arm}\nCYCLE = {cycle}\nSKIP_VECTOR = {TIMER_VECTOR}\nMAX_PASSES = {CYCLE_PASSES}\n\
         TRAP_MARK = {TRAP_MARK}\n\
         PASSES = {passes}\nLIMIT = {PASS_LIMIT}\nOUT = {out:?}\n{GDB_SCRIPT}",
        bench = spec.bench,
        skip = spec.skip,
        cycle = if spec.cycle { "True" } else { "False" },
        passes = spec.traced.len(),
        out = out.display().to_string(),
    )
}

/// Parses the trace file the gdb script wrote: per pass, a line `pass <n> rax=<hex>
/// rdi=<hex>` and one hexadecimal `pc` per line; `end` after the last.
pub fn parse_trace(text: &str) -> Result<Vec<RawPass>, String> {
    let mut passes: Vec<RawPass> = Vec::new();
    let mut ended = false;
    for (n, line) in text.lines().enumerate() {
        let bad = || format!("line {}: unexpected `{line}`", n + 1);
        if ended {
            return Err(bad());
        }
        if line == "end" {
            ended = true;
        } else if let Some(rest) = line.strip_prefix("pass ") {
            let mut regs = BTreeMap::new();
            for word in rest.split_whitespace().skip(1) {
                let (k, v) = word.split_once('=').ok_or_else(bad)?;
                regs.insert(k, u64::from_str_radix(v, 16).map_err(|_| bad())?);
            }
            passes.push(RawPass {
                rax: *regs.get("rax").ok_or_else(bad)?,
                rdi: *regs.get("rdi").ok_or_else(bad)?,
                pcs: Vec::new(),
            });
        } else {
            let pc = u64::from_str_radix(line.trim(), 16).map_err(|_| bad())?;
            passes.last_mut().ok_or_else(bad)?.pcs.push(pc);
        }
    }
    if !ended {
        return Err("the trace is incomplete (no `end`): gdb stopped early".into());
    }
    Ok(passes)
}

/// The inline chains of `pcs` in `kernel`, from one `addr2line` run.
fn symbolize(
    addr2line: &Path,
    kernel: &Path,
    pcs: &[u64],
) -> Result<BTreeMap<u64, Vec<stages::Frame>>, String> {
    let mut cmd = command(addr2line);
    cmd.args(["-a", "-f", "-i", "-C", "-e"]).arg(kernel);
    cmd.args(pcs.iter().map(|pc| format!("0x{pc:x}")));
    let output = cmd
        .output()
        .map_err(|e| format!("could not run {}: {e}", addr2line.display()))?;
    if !output.status.success() {
        return Err(format!(
            "addr2line failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let chains = stages::parse_addr2line(&String::from_utf8_lossy(&output.stdout))?;
    if let Some(pc) = pcs.iter().find(|pc| !chains.contains_key(pc)) {
        return Err(format!("addr2line said nothing about 0x{pc:x}"));
    }
    Ok(chains)
}

/// The traced passes of `spec`, one instruction per line: the address, `M` for a
/// load/store and `B` for a branch (`-` otherwise), the stage, the instruction, the
/// innermost function; a `pass` line in front of each pass.
pub fn listing(
    spec: &PathSpec,
    passes: &[RawPass],
    chains: &BTreeMap<u64, Vec<stages::Frame>>,
    insns: &BTreeMap<u64, String>,
    mixes: &BTreeMap<u64, Mix>,
) -> String {
    let mut out = String::new();
    for (i, p) in passes.iter().enumerate() {
        let t = spec.traced.get(i).unwrap_or(&spec.traced[0]);
        let label = if spec.cycle {
            entry_label(p)
        } else {
            t.label.to_string()
        };
        let _ = writeln!(
            out,
            "pass {} (rax={:x} rdi={:x}, {} instructions)",
            label,
            p.rax,
            p.rdi,
            p.pcs.len()
        );
        for pc in &p.pcs {
            let chain = chains.get(pc).map_or(&[][..], Vec::as_slice);
            let text = insns.get(pc).map_or("?", String::as_str);
            let m = mixes.get(pc).copied().unwrap_or_default();
            let _ = writeln!(
                out,
                "{pc:x} {}{} {:<19} {:<40} {}",
                if m.memory { 'M' } else { '-' },
                if m.branch { 'B' } else { '-' },
                stages::stage(chain, t.side).short(),
                text,
                stages::function_of(chain)
            );
        }
    }
    out
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn parses_traces() {
        let t = "pass 0 rax=12 rdi=3\nffffffff80129ab6\nffffffff80129ab8\npass 1 rax=29 rdi=0\n\
                 ffffffff80129ab6\nend\n";
        let p = parse_trace(t).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].rax, p[0].rdi), (18, 3));
        assert_eq!(p[0].pcs, vec![0xffffffff80129ab6, 0xffffffff80129ab8]);
        assert_eq!((p[1].rax, p[1].pcs.len()), (41, 1));
        assert!(parse_trace("pass 0 rax=12 rdi=3\n10\n").is_err());
        assert!(parse_trace("10\nend\n").is_err());
        assert!(parse_trace("pass 0 rax=12\nend\n").is_err());
        assert!(parse_trace("pass 0 rax=12 rdi=3\nxyz\nend\n").is_err());
    }

    #[test]
    fn identifies_passes_by_their_marker() {
        let frame = |f: &str| stages::Frame {
            function: f.to_string(),
            file: "x.rs".into(),
            line: 1,
        };
        let chains = BTreeMap::from([
            (
                1,
                vec![frame(
                    "kern::ipc::fast::<impl kern::ipc::Ipc<T>>::fast_commit_reply",
                )],
            ),
            (
                2,
                vec![frame(
                    "kern::ipc::fast::<impl kern::ipc::Ipc<T>>::fast_commit_call",
                )],
            ),
            (3, vec![frame("baton_kernel::fastpath::try_ipc")]),
        ]);
        let pass = |pcs: Vec<u64>| RawPass {
            rax: 18,
            rdi: 3,
            pcs,
        };
        // Traced reply first: it is put second, as the spec lists it.
        let got = identify(&PATHS[0], vec![pass(vec![3, 1]), pass(vec![3, 2])], &chains).unwrap();
        assert_eq!(got[0].pcs, [3, 2]);
        assert_eq!(got[1].pcs, [3, 1]);
        let got = identify(&PATHS[0], vec![pass(vec![2]), pass(vec![1])], &chains).unwrap();
        assert_eq!(got[0].pcs, [2]);
        // Neither or both passes marked: an error, not a guess.
        assert!(identify(&PATHS[0], vec![pass(vec![3]), pass(vec![1])], &chains).is_err());
        assert!(identify(&PATHS[0], vec![pass(vec![2]), pass(vec![2, 1])], &chains).is_err());
        // No markers (the general path): the order traced.
        let got = identify(&PATHS[2], vec![pass(vec![1]), pass(vec![2])], &chains).unwrap();
        assert_eq!(got.iter().map(|p| p.pcs[0]).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn writes_the_gdb_settings() {
        let s = gdb_script(&PATHS[1], "127.0.0.1:4000", Path::new("/r/p.trace"), None);
        assert!(s.contains("REMOTE = \"127.0.0.1:4000\"\n"), "{s}");
        assert!(s.contains(
            "TRIGGER_RAX = 41\nTRIGGER_RDI = None\nTRIGGER_CR2 = None\nSKIP = 300\nARM = None\nCYCLE = False\n"
        ));
        assert!(s.contains("PASSES = 2\n"));
        assert!(s.contains("FIRST_ENTRY = \"(unsigned long)&syscall_entry\"\n"));
        assert!(s.contains("OUT = \"/r/p.trace\"\n"));
        // A path that starts with a fault: its trap stub, whatever `rax` holds.
        let exc = PATHS.iter().find(|p| p.name == "exc").unwrap();
        let s = gdb_script(exc, "x", Path::new("y"), None);
        assert!(
            s.contains("FIRST_ENTRY = \"(unsigned long)&trap_stubs + 96\"\n"),
            "{s}"
        );
        assert!(s.contains("TRIGGER_RAX = None\n"), "{s}");
        let cycle = PATHS.iter().find(|p| p.cycle).unwrap();
        assert!(gdb_script(cycle, "x", Path::new("y"), Some(0x10))
            .contains("ARM = 0x10\nCYCLE = True\n"));
        let s = gdb_script(&PATHS[0], "x", Path::new("y"), None);
        assert!(
            s.contains("TRIGGER_RAX = 18\nTRIGGER_RDI = 3\nTRIGGER_CR2 = None\nSKIP = 400\n"),
            "{s}"
        ); // The zero-fill fault: the page-fault stub, only for the benchmark's addresses.
        let zero = PATHS.iter().find(|p| p.bench == "vm.fault.zero").unwrap();
        let s = gdb_script(zero, "x", Path::new("y"), None);
        assert!(
            s.contains("FIRST_ENTRY = \"(unsigned long)&floor_page_fault\"\n"),
            "{s}"
        );
        assert!(
            s.contains("TRIGGER_CR2 = (0x520000000000, 0x52000044c000)\n"),
            "{s}"
        );
    }

    #[test]
    fn lists_instructions() {
        let passes = [RawPass {
            rax: 18,
            rdi: 3,
            pcs: vec![1, 2],
        }];
        let chains = BTreeMap::from([(
            1,
            vec![stages::Frame {
                function: "syscall_entry".into(),
                file: "??".into(),
                line: 0,
            }],
        )]);
        let insns = BTreeMap::from([(1, "push %rax".to_string()), (2, "jne 10".into())]);
        let mixes = BTreeMap::from([
            (
                1,
                Mix {
                    memory: true,
                    branch: false,
                },
            ),
            (
                2,
                Mix {
                    memory: false,
                    branch: true,
                },
            ),
        ]);
        let l = listing(&PATHS[0], &passes, &chains, &insns, &mixes);
        let lines: Vec<&str> = l.lines().collect();
        assert_eq!(
            lines[0],
            "pass call: client's ipc_msg(SEND|RECEIVE) (rax=12 rdi=3, 2 instructions)"
        );
        assert!(
            lines[1].starts_with("1 M- entry/exit (client) push %rax "),
            "{l}"
        );
        assert!(lines[1].ends_with(" syscall_entry"), "{l}");
        assert!(lines[2].starts_with("2 -B other "), "{l}");
        assert!(lines[2].ends_with(" ??"), "{l}");
    }

    #[test]
    fn reports_calls_first() {
        for spec in PATHS.iter().filter(|s| !s.cycle) {
            assert_eq!(spec.traced[spec.order[0]].side, Side::Client);
            assert_eq!(spec.traced[spec.order[1]].side, Side::Server);
        }
        assert_eq!(
            PATHS[0].trigger(),
            "the 401st ipc_msg(SEND|RECEIVE) traced, then the next kernel entry"
        );
        assert_eq!(ordinal(301), "301st");
        // A cycle's passes are named by what began them, and a cycle must begin with its
        // trigger and have no empty pass.
        let p = |rax: u64, pcs: Vec<u64>| RawPass { rax, rdi: 0, pcs };
        assert_eq!(entry_label(&p(TRAP_MARK + 14, vec![])), "trap 14");
        assert_eq!(entry_label(&p(120, vec![])), "system call 120");
        let cycle = PATHS.iter().find(|p| p.cycle).unwrap();
        assert!(check_cycle(cycle, vec![p(120, vec![1]), p(TRAP_MARK + 14, vec![2])]).is_ok());
        assert!(check_cycle(cycle, vec![p(121, vec![1])]).is_err());
        assert!(check_cycle(cycle, vec![p(120, vec![1]), p(9, vec![])]).is_err());
        assert!(check_cycle(cycle, vec![]).is_err());
        assert_eq!(ordinal(312), "312th");
        assert_eq!(ordinal(2), "2nd");
    }
}
