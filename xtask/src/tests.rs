//! The integration tests: each boots the kernel in QEMU with some user programs and judges
//! the serial log.
//!
//! A test's programs are started by the kernel from the initrd, named on the command line as
//! `init=<a>,<b>,...`; the `shutdown` word is always added, so the kernel powers off when all
//! tasks have ended. Every test must pass the common rules of [`crate::judge`]: QEMU exit
//! status 33, `[kernel] all tasks finished` in the log, no `PANIC`, `KERNEL EXCEPTION`,
//! `TEST FAIL` or user-level `panic: ` line, and every task the kernel started ended with exit
//! code 0 unless the test's `exits` declares otherwise (killed, or another code). Then each
//! string in `require` must appear, and `check`, if any, must accept the log. A boot whose
//! log shows a `TEST FAIL` line is stopped a second later rather than waited for until its
//! timeout (a failed test program often leaves servers running).
//!
//! # Adding a test
//! Write the program(s) as `user/programs/src/bin/<name>.rs` (printing `TEST PASS <what>` or
//! `TEST FAIL <what>`), then add an entry to [`ALL`], starting from [`BASE`] for the
//! defaults (declare in `exits` any task that is meant to be killed or to exit non-zero).
//! `cargo xtask test --no-host --filter <name>` runs just that test.

use crate::judge::{each_task_ends_once, expect_interleaved, expect_order};
use std::time::Duration;

/// A check of the whole serial log, beyond required substrings.
pub type Check = fn(&str) -> Result<(), String>;

/// One integration test.
pub struct IntegrationTest {
    /// Unique name; also the log file's name, `target/test-logs/<name>.log`.
    pub name: &'static str,
    /// The programs the kernel starts, in order (`init=a,b`).
    pub init: &'static [&'static str],
    /// Number of CPUs.
    pub smp: u32,
    /// QEMU is killed, and the test fails, after this long (long enough for TCG).
    pub timeout: Duration,
    /// Substrings that must each appear in the log.
    pub require: &'static [&'static str],
    /// A further check of the log, run once everything above holds.
    pub check: Option<Check>,
    /// Extra kernel command-line words.
    pub extra: &'static [&'static str],
    /// How the boot must end.
    pub outcome: Outcome,
    /// How tasks of a program may end, by program name: each task's ending must be one
    /// declared for its name (tasks of a name not listed must exit with code 0), and each
    /// entry must be seen at least once. See [`crate::judge::expect_exits`].
    pub exits: &'static [(&'static str, Exit)],
    /// What is typed on the serial console (QEMU's standard input), for a test that drives
    /// a program through the console, a character every [`crate::test::TYPE_DELAY`]
    /// (slowly enough for the UART's receive FIFO); see [`Typed`]. Empty: standard input
    /// is empty.
    pub input: &'static [Typed],
    /// What the program prints when it is ready for the next line of `input`.
    pub prompt: &'static str,
    /// Whether the machine gets a virtio block device on a fresh disk image of its own
    /// (`crate::disk`).
    pub disk: bool,
    /// Programs booted first on the same disk image (`init=` these, the test's `extra`
    /// words too), in a boot of their own logged to `<name>.prepare.log` that must end
    /// cleanly with a `TEST PASS` line: for a test of data surviving a reboot.
    pub disk_prepare: &'static [&'static str],
    /// The machine's memory in MiB (QEMU's `-m`; [`crate::qemu::DEFAULT_MEMORY_MIB`] in
    /// [`BASE`]): a test of paging short of memory lowers it, so that the kernel sizes its
    /// heap and user memory from a small machine rather than a `pageable=` limit.
    pub memory_mib: u32,
    /// Whether the machine runs under `-icount` (TCG, whatever accelerator the other tests
    /// use): its clock then advances with the instructions run, not the host's time, so a
    /// test of timing (the order in which sleepers wake) does not depend on how the host
    /// schedules QEMU's threads. A virtual CPU the host leaves waiting for tens of
    /// milliseconds otherwise wakes its sleepers that late, in any order.
    pub icount: bool,
}

/// `shell_swap_files`: the shell's file server used the driver `swapon` started; no second
/// driver was started for the same device.
fn one_disk_driver(log: &str) -> Result<(), String> {
    if log.contains("starting the disk driver and the file server") {
        return Err("the shell started a second disk driver for the system's disk".into());
    }
    Ok(())
}

/// `shell_session`: the session paged both ways: pages came from the file server (pager
/// fills), went out to the swap area and came back, and clean file pages were dropped.
fn session_paged(log: &str) -> Result<(), String> {
    let vm = crate::accent::vmstat_counters(log)?;
    for name in [
        "pager_fills",
        "paging_pageouts",
        "paging_pageins",
        "paging_reclaimed_mapped",
    ] {
        let n = vm.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
        if n == 0 {
            return Err(format!("the session's `vmstat` shows no {name}"));
        }
    }
    Ok(())
}

/// `pagewait`: a kernel copy that waited for a page paged out is no error, and the kernel
/// says nothing about it.
fn no_bad_address_lines(log: &str) -> Result<(), String> {
    match log.lines().find(|l| l.contains("bad user address")) {
        Some(l) => Err(format!("a copy that waited for a page was reported: {l}")),
        None => Ok(()),
    }
}

/// `wakestorm`: the kernel refused no wake (of a thread already ready, running or ended)
/// and skipped no timer entry a thread no longer held; each such line is a kernel path
/// that woke a thread it did not hold.
fn no_refused_wakes(log: &str) -> Result<(), String> {
    match log
        .lines()
        .find(|l| l.contains("[kernel] wake refused") || l.contains("[kernel] stale timer"))
    {
        Some(l) => Err(format!("a wake of a thread that was not waiting: {l}")),
        None => Ok(()),
    }
}

/// One step of a test's [`IntegrationTest::input`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Typed {
    /// A line, typed once [`IntegrationTest::prompt`] has appeared once more than the
    /// lines typed before it, and ended with a carriage return (a terminal's Enter key).
    Line(&'static str),
    /// Keys typed as they are (no carriage return) once the log contains the first
    /// string: for a program that is busy and shows no prompt.
    After(&'static str, &'static str),
}

/// How one task ended, as the kernel reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// `[kernel] task <id> (<name>) exited with code <n>`.
    Code(i64),
    /// `[kernel] task <id> (<name>) killed: <reason>`, or `[kernel] task <id> terminated
    /// through its task port by task <m>`.
    Killed,
    /// Either of the above with code `n`: for a task whose end races with its killer's
    /// (declared, it need not happen).
    KilledOrCode(i64),
    /// As [`Exit::KilledOrCode`], for a task that may not appear at all: whether a run
    /// makes one depends on how its threads interleave (the fuzzer's tasks with no
    /// program), so the entry is not required to describe a task's end.
    MaybeKilledOrCode(i64),
}

impl Exit {
    /// Whether a task that ended as `seen` (a [`Exit::Code`] or [`Exit::Killed`]) ended as
    /// this allows.
    pub fn allows(self, seen: Exit) -> bool {
        match self {
            Exit::KilledOrCode(n) | Exit::MaybeKilledOrCode(n) => {
                seen == Exit::Killed || seen == Exit::Code(n)
            }
            e => e == seen,
        }
    }
}

/// How a test's boot must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Clean shutdown after all tasks finished (QEMU status 33), no kernel failure.
    Clean,
    /// The kernel reports a fatal error and stops with QEMU status 35 (tests of the
    /// failure path itself).
    KernelFailure,
}

/// The defaults: one CPU, a timeout that suits TCG, no requirements.
pub const BASE: IntegrationTest = IntegrationTest {
    name: "",
    init: &[],
    smp: 1,
    timeout: Duration::from_secs(60),
    require: &[],
    check: None,
    extra: &[],
    outcome: Outcome::Clean,
    exits: &[],
    input: &[],
    prompt: "",
    disk: false,
    disk_prepare: &[],
    memory_mib: crate::qemu::DEFAULT_MEMORY_MIB,
    icount: false,
};

/// What the shell tests type (the tasks are numbered in boot order: names 1, console 2,
/// shell 3, then each program `run` starts).
const SHELL_INPUT: &[Typed] = &[
    Typed::Line("help"),
    Typed::Line("ps"),
    Typed::Line("ports 3"),
    Typed::Line("ports"),
    Typed::Line("ports 99"),
    Typed::Line("ports x"),
    Typed::Line("stats"),
    Typed::Line("stats now"),
    // Paging's counters (no default pager in this boot).
    Typed::Line("paging"),
    Typed::Line("programs"),
    Typed::Line("programs all"),
    Typed::Line("run init"),
    Typed::Line("run fault_null"),
    Typed::Line("run nosuch"),
    Typed::Line("run"),
    Typed::Line("run idle &"),
    Typed::Line("ps"),
    Typed::Line("kill 6"),
    Typed::Line("kill 6"),
    // A foreground program stopped with Ctrl-C.
    Typed::Line("run idle"),
    Typed::After("idle#7| task 7 sleeps", "\x03"),
    Typed::Line("kill x"),
    Typed::Line("kill"),
    Typed::Line("kill 3"),
    Typed::Line("frobnicate --now"),
    // Line editing: a typo rubbed out, a letter put in with the left arrow ("help"), and
    // the history's last line again ("help" once more).
    Typed::Line("hepx\x7f\x1b[Dl"),
    Typed::Line("\x1b[A"),
    Typed::Line("ports 1"),
    // A task's address map and faults.
    Typed::Line("vm 3"),
    Typed::Line("vm 99"),
    Typed::Line("vm x"),
    Typed::Line("vm"),
    // The timeline trace, on and off: the records are printed to the console.
    Typed::Line("trace start 64"),
    Typed::Line("trace start 64"),
    Typed::Line("trace start x"),
    Typed::Line("ps"),
    Typed::Line("trace stop"),
    Typed::Line("trace start 70000"),
    // Arguments reach the program (`echo` prints them).
    Typed::Line("run echo hello from  the shell"),
    // The benchmark program, its table labelled as TSC ticks.
    Typed::Line("bench"),
    Typed::Line("shutdown"),
];

/// What the shell tests require, in this order.
const SHELL_REQUIRE: &[&str] = &[
    "Baton: a capability microkernel for x86-64",
    "Type `help` for the commands.",
    "commands:",
    "run PROGRAM [ARGUMENT...] [&]",
    "     1 names",
    "in receive on 0x",
    "     2 console",
    "     3 shell",
    "task 3: 6 rights",
    "host-priv",
    "ports: usage: ports TASK",
    "ports: no task 99 (see `ps`)",
    "ports: `x` is not a task id",
    "stack_handoffs",
    "thread_bytes",
    "stats: takes no arguments",
    "swap area: no default pager registered",
    "programs (`run NAME`):",
    " test programs (`programs all` lists them)",
    "test programs (what `cargo xtask test` boots):",
    "init#4| TEST PASS greeting",
    "[4] init ended",
    "[kernel] task 5 (fault_null) killed: page fault",
    "[5] fault_null ended",
    "run: no program `nosuch` (see `programs`)",
    "run: usage: run PROGRAM [ARGUMENT...] [&]",
    "[6] idle started in the background",
    "in sleep",
    "[kernel] task 6 terminated through its task port by task 3",
    "killed task 6",
    "kill: no task 6 (see `ps`)",
    "[kernel] task 7 terminated through its task port by task 3",
    "[7] idle stopped by Ctrl-C",
    "kill: `x` is not a task id",
    "kill: usage: kill TASK",
    "kill: that is this shell; use `shutdown`",
    "unknown command `frobnicate`; type `help` for the commands",
    "task 1: ",
    " regions, ",
    " pages resident",
    "PROT MAX INHERIT",
    " rw-  rwx copy      anonymous",
    "faults: ",
    " zero fills",
    "vm: no task 99 (see `ps`)",
    "vm: `x` is not a task id",
    "vm: usage: vm TASK",
    "trace: on, 64 records per CPU",
    "trace: on already",
    "trace: `x` is not a number of records",
    "[kernel] trace: end",
    " records printed",
    "trace: at most 65536 records per CPU",
    "| hello from the shell",
    "[8] echo ended",
    "Figures are TSC ticks",
    "benchmark                             median       min       max",
    "bench: done",
    "[9] bench ended",
    "shutting down",
    "[kernel] shutdown requested by task 3",
    "[kernel] task 3 (shell) killed: shutdown",
];

/// The shell tests' tasks: the three boot tasks end by `shutdown`, `fault_null` by its
/// fault, `idle` by `kill` and by Ctrl-C, `floor_partner` when `bench` is done with it.
const SHELL_EXITS: &[(&str, Exit)] = &[
    ("names", Exit::Killed),
    ("console", Exit::Killed),
    ("shell", Exit::Killed),
    ("fault_null", Exit::Killed),
    ("idle", Exit::Killed),
    // `bench` ends the partner of its floor cross-address-space call (booted with one CPU;
    // with two it runs only its cross-CPU benchmark: `SHELL_EXITS_SMP`).
    ("floor_partner", Exit::Killed),
];

/// [`SHELL_EXITS`] with two CPUs, where `bench` starts no partner.
const SHELL_EXITS_SMP: &[(&str, Exit)] = &[
    ("names", Exit::Killed),
    ("console", Exit::Killed),
    ("shell", Exit::Killed),
    ("fault_null", Exit::Killed),
    ("idle", Exit::Killed),
];

/// The shell test's requirements come in order, and the edited lines did what they say:
/// `help` ran three times (typed, edited into shape, and from the history).
fn shell_check(log: &str) -> Result<(), String> {
    let mut at = 0;
    for want in SHELL_REQUIRE {
        match log.get(at..).and_then(|rest| rest.find(want)) {
            Some(i) => at += i + want.len(),
            None => {
                return Err(format!(
                    "`{want}` missing, or not after what comes before it"
                ))
            }
        }
    }
    // The trace printed at `trace stop` is one `cargo xtask trace --log` reads.
    let traced = crate::trace::parse(log)?;
    if traced.records.is_empty() {
        return Err("`trace stop` printed no records".to_string());
    }
    let helps = log.matches("commands:\n").count() + log.matches("commands:\r\n").count();
    if helps != 3 {
        return Err(format!(
            "`help` ran {helps} times, not 3 (typed, edited with backspace and the left arrow, from the history)"
        ));
    }
    Ok(())
}

/// What the out-of-line data test must print.
const OOL_REQUIRE: &[&str] = &[
    "ok: the receiver sees the data as it was sent, not the sender's later write",
    "ok: the data comes back by a reply carrying it out of line, with the receiver's write",
    "ok: the sender never sees the receiver's write",
    "ok: a move takes the region out of the sender's address space",
    "ok: the moved region arrives whole",
    "ok: the receiver of an unaligned region finds zeros outside it in its end pages",
    "ok: an unaligned region keeps its offset in the page and its data, and nothing around it",
    "ok: an unaligned move removes the whole pages inside and leaves the partial end pages",
    "ok: refused messages change nothing: the right is held, the region mapped and intact",
    "ok: and nothing reached the peer",
    "ok: vm_copy into new memory copies the data",
    "ok: vm_copy over a destination replaces exactly the range",
    "ok: vm_copy to another task and back through its task port",
    "ok: the sender's memory is intact after the receiver died with its messages queued",
    "ok: a round leaves the kernel heap, objects and free frames as the round before did",
    "ool#1| TEST PASS ool",
];

/// What the `memobj` tests require: sharing across tasks at different addresses with
/// cross-task wait/wake, copy-on-write snapshots, read-only rights, objects outliving
/// their rights, another task's memory through its task port, DMA and physical objects,
/// errors, exhaustion and recovery, and rounds that leave nothing behind.
const MEMOBJ_REQUIRE: &[&str] = &[
    "ok: booted with the host-privilege right (priv=memobj)",
    "ok: two tasks share an object: the peer's write",
    "ok: vm_read through the task port reads the other task's variable",
    "ok: vm_write through the task port lands",
    "ok: wake_shared here wakes the peer's wait_shared at its own address",
    "ok: the peer was woken (not timed out) and saw this task's write",
    "ok: the peer sees the value vm_write put in its variable",
    "ok: with the peer gone, its writes stay in the object",
    "ok: after writes on both sides each keeps its own: the copy is a snapshot",
    "ok: mapping writable through a read-only right: Denied",
    "ok: with every right dropped, both mappings still share the object",
    "ok: an unmapped object goes with its last right",
    "ok: DMA and physical objects without the host-privilege right: Denied",
    "ok: a DMA buffer: 3 resident pages from physical",
    "ok: a physical object over RAM (the DMA buffer's own frame): Denied",
    "ok: mapped uncached, device memory is read in place",
    "ok: a physical object shows those frames: the firmware's reset vector is a jump",
    "ok: the DMA buffer's frames are back with the frame allocator",
    "ok: a message to a memory object's port is answered NotSupported",
    "ok: after every refusal the map, kernel heap, objects, ports and frames are as before",
    "ok: 16 MiB objects: the task's frame limit after",
    "ok: after dropping them, an object is made and mapped again",
    "ok: a task at its kernel-memory limit gets NoMemory from memobj_create",
    "ok: meanwhile another task still makes objects",
    "ok: having dropped its objects, the task makes one again",
    "ok: another round leaves the kernel heap, objects, ports and free frames as the last did",
    "TEST PASS memobj",
];

/// What the `vm` tests require: lazy memory, faults by class, the victim's report.
const VM_REQUIRE: &[&str] = &[
    "ok: it costs no frame",
    "ok: the first read of a page zero-fills it",
    "ok: the first write zero-fills its page and lands",
    "ok: deallocate gives every frame back",
    "ok: the kernel writes a query's answer into an untouched page",
    "ok: a registered IPC buffer is resident and wired",
    "ok: a store to read-only memory reaches the exception port as a write error",
    "ok: an access where nothing is allocated is an address error",
    "ok: wiring 4 of 8 pages makes those 4 resident at once",
    "ok: 16 MiB at a time, the task reaches its frame limit",
    "ok: after deallocating, allocation works again",
    "ok: a second round leaves the kernel heap, objects and free frames as the first did",
    "vm#1| TEST PASS vm",
    "(vm_victim) killed: page fault at address",
    "(protection violation, write, user): write error",
];

/// How the `reclaim` test's helpers end: the default pager is stopped through its task
/// port (before any line named it), the disk driver ends when its last client goes.
const RECLAIM_EXITS: &[(&str, Exit)] = &[("blk", Exit::Code(0)), ("?", Exit::Killed)];

/// What the `paging` test must print: the default pager's refusals of a disk without a
/// partition table and of one without a swap partition, then the verdict.
const PAGING_REQUIRE: &[&str] = &[
    "dpager: refusing to start: sector 0 holds no partition table",
    "dpager: refusing to start: the disk has no swap partition (type 0x82) in a valid table",
    "paging#1| TEST PASS paging",
];

/// How the `paging` test's tasks end: its children work (0), or are stopped on purpose
/// (no memory, a lost page); its default pagers are killed, exit after a warm-up, or end
/// (1) when their disk driver is killed; the driver is killed once a round and ends (0)
/// when the test lets go of it.
const PAGING_EXITS: &[(&str, Exit)] = &[
    ("paging_child", Exit::Code(0)),
    ("paging_child", Exit::Killed),
    ("dpager", Exit::Code(0)),
    ("dpager", Exit::Code(1)),
    ("blk", Exit::Killed),
    ("blk", Exit::Code(0)),
    // The default pagers, ended through their task ports before any line named them.
    ("?", Exit::Killed),
];

/// What the `pagewait` test must print (`pagewait_smp1`, `pagewait_smp2`).
const PAGEWAIT_REQUIRE: &[&str] = &[
    "ok: pagewait_child: the reply arrived intact in a buffer that was paged out",
    "ok: a message sent from a buffer paged out while the send waited for room arrived intact",
    "ok: the child saw its buffers paged out while its calls waited (receive 1, send 1)",
    "pagewait#1| TEST PASS pagewait",
];

/// How the `pagewait` test's tasks end: its children exit 0, the default pager is ended
/// through its task port, the driver exits when the test lets go of it.
const PAGEWAIT_EXITS: &[(&str, Exit)] = &[
    ("pagewait_child", Exit::Code(0)),
    ("paging_child", Exit::Code(0)),
    ("dpager", Exit::MaybeKilledOrCode(0)),
    ("?", Exit::MaybeKilledOrCode(0)),
    ("blk", Exit::Code(0)),
];

/// What `taskmake` must print (`task_smp1`, `task_smp2`).
const TASK_REQUIRE: &[&str] = &[
    "ok: the null program made in four steps ran and ended",
    "task_null: args task_null|args|a b|KEY=value|",
    "task_null: data 1 ok",
    "task_null: data 2 ok",
    "task_null: data 3 ok",
    "ok: start twice: Busy",
    "ok: a memory object as the source with no bytes: InvalidArgument",
    "ok: no name, port or message left behind",
    "ok: a half-made task killed through its port is gone",
    "ok: a half-made task ended by a one-way request is gone",
    "ok: its memory, objects and heap are back",
    "ok: a half-made task ends with its creator",
    "ended half made: its creator, task",
    "ok: the fork child sees the parent's memory as it was, keeps its own writes, and has its own IPC buffer",
    "ok: the parent's write stays the parent's",
    "ok: a fork of a task with 256 resident pages took",
    "ok: after the child's end no page is copied",
    "ok: a second round leaves the kernel heap, objects and free frames as the first did",
    "taskmake#1| TEST PASS taskmake",
];

/// What the `exc` tests require.
const EXC_REQUIRE: &[&str] = &[
    "exc#1| ok: a page fault is repaired by the handler and the store retried",
    "exc#1| ok: an invalid opcode resumes with new registers",
    "exc#1| ok: a breakpoint goes to the handler",
    "exc#1| ok: an unknown system call goes to the handler",
    "exc#1| ok: a thread's exception port takes precedence over its task's",
    "exc#1| ok: a dead thread exception port falls back to the task's",
    "exc#1| ok: with the handler waiting, each exception and its reply take the fast path: 6 legs for 3 round trips",
    "exc_victim#2| ok: resumed by a handler in another task with rax 42",
    "killed: no reply from the exception handler",
    "exc#1| ok: the victim ended when its exception went unanswered",
    "killed: the exception handler's registers are invalid",
    "exc#1| ok: a reply with registers outside user space ends the victim, through the general path",
    "killed: the exception handler ended the task",
    "exc#1| ok: a reply that asks to end the victim ends it, through the general path",
    "exc#1| ok: ports, names and queued messages back to the baseline",
    "exc#1| TEST PASS exc",
];

/// The fuzzer's children are killed by it (through their task ports, or by faults it
/// makes them take), or exit with code 0 when their parent's end comes first; its worker
/// tasks exit with code 0.
/// Tasks the fuzzer makes with the task-creation calls and ends through their ports are
/// known by id only ("?"), or by the name of a task with no program yet ("-") when one it
/// started without a program faults.
/// Whether a run makes the last two at all depends on how the fuzzing threads interleave.
const FUZZ_EXITS: &[(&str, Exit)] = &[
    ("fuzz_child", Exit::KilledOrCode(0)),
    ("?", Exit::MaybeKilledOrCode(0)),
    ("-", Exit::MaybeKilledOrCode(0)),
];

/// The `exc` test's victims are all killed: one by an unanswered exception, one by
/// registers outside user space, one by an explicit kill.
const EXC_EXITS: &[(&str, Exit)] = &[("exc_victim", Exit::Killed)];

/// The `migrate` test's servers exit with code 0, but the one told to exit inside a call
/// (`DIE`) exits with code 3.
const MIGRATE_EXITS: &[(&str, Exit)] =
    &[("mig_server", Exit::Code(0)), ("mig_server", Exit::Code(3))];

/// What the `wake_preempt` tests require.
const WAKE_PREEMPT_REQUIRE: &[&str] = &[
    "ok: a waiter of higher priority woken by `wake` runs before the waker's next instruction (0 of 20 rounds late)",
    "ok: a receiver of higher priority sent a message runs before the sender's next instruction (0 of 20 rounds late)",
    "wake_preempt#1| TEST PASS wake_preempt",
];

/// What the `regs_sane` tests require: every path that sets user registers keeps them a
/// user thread's.
const REGS_SANE_REQUIRE: &[&str] = &[
    "ok: exception reply (general path): the thread runs with rflags 0xed7",
    "ok: exception reply (fast path): the thread runs with rflags 0xed7",
    "ok: the fast-path handler's exceptions and replies took the fast path",
    "ok: an exception reply with rsp 0x800000000000 ends the task instead of resuming it (general path)",
    "ok: an exception reply with rsp 0xffff800000000000 ends the task instead of resuming it (general path)",
    "ok: an exception reply with rsp 0x800000000000 ends the task instead of resuming it (fast path)",
    "ok: an exception reply with rsp 0xffff800000000000 ends the task instead of resuming it (fast path)",
    "ok: act_set_state (thread) refuses rsp 0x800000000000",
    "ok: act_get_state reads back rflags 0xed7",
    "ok: act_set_state (thread): the thread runs with rflags 0xed7",
    "ok: THREAD_SET_STATE refuses rsp 0xffff800000000000",
    "ok: THREAD_SET_STATE: the thread runs with rflags 0xed7",
    "ok: act_set_state (pool activation) refuses rsp 0x800000000000",
    "ok: act_set_state (pool activation): the thread runs with rflags 0xed7",
    "ok: ACT_SET_STATE refuses rsp 0xffff800000000000",
    "ok: ACT_SET_STATE: the thread runs with rflags 0xed7",
    "ok: thread_create and TASK_THREAD_CREATE refuse a stack or entry at 0xffff800000000000",
    "ok: thread_create: the thread runs with rflags 0x202",
    "ok: every landing's `in` raised a general-protection fault (7 of 7)",
    "regs_sane#1| TEST PASS regs_sane",
];

/// What the `migrate` tests require.
const MIGRATE_REQUIRE: &[&str] = &[
    "ok: an echo RPC with 32 bytes comes back",
    "ok: it migrated: no message was queued or handed to a server thread",
    "ok: the caller's own thread ran the server: no context switch, no stack handoff",
    "ok: a nested call across three tasks migrates twice on one thread",
    "ok: a reply claiming descriptors gives the caller BadFormat",
    "ok: a server that unmaps its activation's buffer during a call gives the caller BadAddress",
    "ok: and that activation is retired",
    "ok: with every activation busy, a call waits until one comes back",
    "ok: the last activation went to a sidetrack upcall, which added one, and the call went on",
    "ok: when the server declines on the sidetrack, the call waits for an activation",
    "ok: the server's work is charged to the calling thread",
    "ok: a high-priority client is served at its own priority while low-priority clients load the server",
    "ok: act_return outside a migrating call is refused",
    "ok: a call whose server exits inside it returns Aborted",
    "ok: activations, ports, names and queued messages back to the baseline",
    "ok: the kernel heap does not grow round after round",
    "TEST PASS migrate",
];

/// What the `migrate_idl` tests require.
const MIGRATE_IDL_REQUIRE: &[&str] = &[
    "ok: migrating: calls return their results, in-line data arrives whole, errors come back",
    "ok: migrating: an unknown id is NotSupported, truncated arguments and bytes left over are BadFormat",
    "ok: migrating: every call migrated (15 of 15), none was queued (0)",
    "ok: migrating: a one-way message is served by the server's own thread, on the same service",
    "ok: migrating: a call carrying a right does not migrate; the server's own thread refuses the unexpected right",
    "ok: migrating: a call made while another caller holds the service waits for it",
    "ok: migrating: quit is answered",
    "ok: migrating: a call after quit fails",
    "ok: migrating: it fails as a call to a dead server does",
    "idl_server: done (2 activations)",
    "ok: message-loop: calls return their results, in-line data arrives whole, errors come back",
    "ok: message-loop: an unknown id is NotSupported, truncated arguments and bytes left over are BadFormat",
    "ok: message-loop: no call migrated",
    "ok: message-loop: a call made while another caller holds the service waits for it",
    "ok: message-loop: a call after quit fails",
    "idl_server: done (0 activations)",
    "ok: activations, ports, names and queued messages back to the baseline",
    "TEST PASS migrate_idl",
];

/// What the `actctl` tests require.
const ACTCTL_REQUIRE: &[&str] = &[
    "ok: an alert on a client thread deep in A -> B propagates up the chain",
    "ok: the alerted activation itself, the client's home below A and B, sees the alert once its call is back (1)",
    "ok: with alerts on, an alert ends a 5 s sleep at once (Interrupted)",
    "ok: alerts are off by default: the sleep runs its course, and the alert is seen once turned on",
    "ok: the call in the suspended server activation completes after its resume",
    "ok: a server suspends its activation while a client is inside and reads its registers",
    "ok: THREAD_GET_STATE on a thread that is not suspended is refused",
    "ok: suspending a client's home activation lets the server finish; THREAD_GET_STATE waited",
    "ok: act_get_state reads the registers THREAD_GET_STATE read",
    "ok: THREAD_SET_STATE with fewer words than the registers is refused",
    "ok: act_get_state sees what THREAD_SET_STATE set",
    "ok: through an activation port the server sees its activation occupied by the client's own thread",
    "ok: set_state on the stopped activation changed what its call returned",
    "ok: resuming the activation wakes a thread waiting for its state; its act_get_state fails (InvalidArgument) while the thread is still in the server",
    "ok: terminating a client thread deep in A -> B answers at once",
    "ok: after act_sched_lock, a server's set_priority on its caller's thread is Denied",
    "ok: threads, activations, ports, names and queued messages back to the baseline",
    "ok: the kernel heap does not grow round after round",
    "ok: 3000 activation calls with random arguments return",
    "TEST PASS actctl",
];

/// The `teardown` tests spin and sleep for seconds in servers; TCG on a loaded host is slow.
const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(120);

/// The `migrate` and `actctl` tests: 3-9 s alone, mostly their own sleeps and spins (host
/// time under TCG); the rest is emulated work that other QEMU runs on the host slow down
/// many times over, and each once ran past the default 60 s limit on a loaded host. Every
/// wait of the programs for their own threads fails by itself, naming what it waited for,
/// within 10 s; this limit only has to end a call that never returns.
const ACTIVATION_TIMEOUT: Duration = Duration::from_secs(120);

/// What the `teardown` tests require.
const TEARDOWN_REQUIRE: &[&str] = &[
    "ok: a task returning from main while another of its threads yields inside its own activation ends, and all it had is freed",
    "ok: a client task ended while its thread spins in a server",
    "ok: then the server exits: the thread that spins in it ends with both tasks, nothing is left",
    "ok: a client task ended while its thread sleeps in a server",
    "ok: then the server exits: the thread that sleeps in it ends with both tasks, nothing is left",
    "ok: round 2: terminating the first client's activation while its call is nested in B aborts that call",
    "ok: round 2: the second client, served in the same activation meanwhile, gets its own reply",
    "ok: round 2: nothing is left",
    "ok: a server that exits inside a call lingers until the call has left it (Aborted",
    "(mig_server) exited with code 3",
    "ok: a server exiting with one call inside and one waiting for its activation: the first is aborted",
    "teardown#1| TEST PASS teardown",
];

/// What the `fpu` tests require: user threads' floating-point and vector registers.
const FPU_REQUIRE: &[&str] = &[
    "ok: a thread that never uses a floating-point or vector register gets no save area",
    "ok: a thread's first vector instruction makes its save area, which goes with the thread",
    "fpu#1| ok: a new thread starts with MXCSR 0x1f80 and the x87 control word 0x037f, whatever its creator's",
    "fpu#2| TEST PASS fpu child",
    "ok: every thread of two tasks finds its vector registers, x87 stack and control words as it left them across yields and preemptions",
    "ok: the threads were preempted while holding their values",
    "(fpu_nomem) killed: device not available",
    "ok: a task with no kernel memory left for a save area is stopped by an exception at its first floating-point use",
    "ok: the save areas are back to the baseline",
    "fpu#1| TEST PASS fpu",
];

/// What the `migrate_regs` tests require.
const MIGRATE_REGS_REQUIRE: &[&str] = &[
    "ok: the first call of a thread into a server finds its arguments, every other register 0",
    "ok: around every migrating call the client's registers come back as they were, none of a server's",
    "ok: every migrating call and return clears the vector registers: the server finds them 0 at entry, the client after the return",
    "ok: after a call into another task, the next call into the reporting server finds its arguments, every other register 0",
    "ok: a repeated call into the same server finds no other task's registers",
    "ok: the same through the IPC buffer and through a buffer of the caller's own (MSG_BUF)",
    "ok: every call migrated",
    "ok: a server started after the dirty server ended finds its arguments, every other register 0",
    "ok: activations, ports, names and queued messages back to the baseline",
    "TEST PASS migrate_regs",
];

/// What the `vp_migrate` tests require.
const VP_MIGRATE_REQUIRE: &[&str] = &[
    "ok: vp_create by a client's thread migrated into this task is InvalidArgument",
    "ok: vp_take, vp_wait and vp_resume by a client's carrier migrated into this task are InvalidArgument",
    "ok: a thread's port reads its own task and registers while it waits in a server",
    "ok: an exception port set for a thread while it waits in a server gets its fault once back",
    "(vp_migrate_peer) exited with code 0",
    "TEST PASS vp_migrate",
];

/// What the `kobj` tests require.
const KOBJ_REQUIRE: &[&str] = &[
    "kobj#1| ok: a thread created through the task port runs",
    "kobj#1| ok: the child's task port reads the child",
    "kobj#1| ok: a port is allocated in the child through its task port",
    "kobj#1| ok: a debugger interposes on a task port and forwards the request",
    "kobj#1| ok: a thread terminated through its port is gone",
    "kobj#1| ok: a thread ending itself through its port gives back its request's reply right",
    "terminated through its task port by task 1",
    "kobj#1| ok: a task terminated through its port is gone",
    "kobj#1| ok: ports, names and queued messages back to the baseline",
    "kobj#1| TEST PASS kobj",
];

/// What the `ipc` tests require.
const IPC_REQUIRE: &[&str] = &[
    "ipc#1| ok: RPCs take the fast path",
    "ipc#1| ok: a send-once right works once",
    "ipc#1| ok: the server's end brings a dead-name notification",
    "ipc#1| ok: a waiting receiver's receive of a message larger than its IPC buffer fails with TooLarge",
    "ipc#1| ok: and the message stays queued, intact",
    "ipc#1| ok: a waiting receiver gets a MSG_SLOW message intact, its receive finished by the send",
    "ipc#1| ok: the first receive's timeout does not cut the next one short",
    "ipc#1| ok: ports, names and queued messages back to the baseline",
    "ipc#1| TEST PASS ipc",
];

/// What the `heap` tests require.
const HEAP_REQUIRE: &[&str] = &[
    "heap#1| ok: nothing is mapped before the first allocation",
    "heap#1| ok: Vec: 100,000 u64s pushed, sum 4999950000",
    "heap#1| ok: String: format! and push give",
    "heap#1| ok: Box: a value, a closure, and a 3 MiB zeroed slice",
    "heap#1| ok: freeing the 3 MiB block gives its pages back",
    "heap#1| ok: BTreeMap: 5,000 keys in order, lookups, retain",
    "heap#1| ok: 30 rounds of allocating and freeing: the heap stays at",
    "heap#1| ok: 2 threads allocating at once",
    "heap#1| ok: Vec::try_reserve of 1 TiB (past the heap's range) and 16 GiB (more than the kernel grants) fail",
    "heap#1| ok: the global allocator returns null for 1 TiB",
    "heap#1| ok: the failed allocations left nothing mapped",
    "heap#1| ok: the heap still allocates afterwards",
    "heap#1| TEST PASS heap",
];

/// What the `ipc_diff` tests require.
const IPC_DIFF_REQUIRE: &[&str] = &[
    "ipc_diff#1| ok: request and reply with 32 bytes: both paths give the same result and state",
    "ipc_diff#1| ok: request and reply filling the IPC buffer (4064 bytes): the plain run takes the paths expected",
    "ipc_diff#1| ok: a request whose reply port has a message queued: both paths give the same result and state",
    "ipc_diff#1| ok: a request to a server waiting with a timeout: the outcome is the one the ABI describes",
    "ipc_diff#1| ok: ports, names and queued messages back to the baseline",
    "(ipc_diff_server) exited with code 0",
    "ipc_diff#1| TEST PASS ipc_diff",
];

/// The fuzzer's default schedule (4 seeds of 25,000 calls per boot) under TCG.
const FUZZ_TIMEOUT: Duration = Duration::from_secs(120);

/// What the `fuzz` tests require: every seed ran and the kernel's counts came back (the
/// program prints `TEST FAIL` otherwise).
const FUZZ_REQUIRE: &[&str] = &["TEST PASS fuzz: 4 seeds, ", "(fuzz) exited with code 0"];

/// What the `hostile` tests require.
const HOSTILE_REQUIRE: &[&str] = &[
    "hostile#1| ok: wait on words that cannot be read",
    "hostile#1| ok: ports, names, queued messages and threads back to the baseline after",
    "hostile#1| ok: the peer answers a normal RPC after all the hostile messages",
    "hostile#1| ok: the peer exits when told to",
    "(hostile_peer) exited with code 0",
    "hostile#1| TEST PASS hostile",
];

/// What the `names` tests require.
const NAMES_REQUIRE: &[&str] = &[
    "names_test#2| ok: \"echo\" registered by the server is found: a send right",
    "names_test#2| ok: the calls take the fast path",
    "names_test#2| ok: a destroyed port's name goes away (dead-name notification;",
    "names_test#2| ok: the right a rejected request carried is released (no-senders)",
    "names_test#2| ok: ports, names and queued messages back to the baseline",
    "names_test#2| TEST PASS names",
    "names#1| names: no clients left, exiting",
    "[kernel] task 1 (names) exited with code 0",
];

/// What the `kmem` tests require: each of a task's kinds of kernel memory meets its limit
/// with an error, and the other tasks work on.
const KMEM_REQUIRE: &[&str] = &[
    "ok: with a sibling at its limit of queued 64 KiB messages",
    "ok: with a sibling at its limit of ports",
    "ok: with a sibling at its limit of sleeping threads",
    "ok: with a sibling at its limit of mapped memory",
    "ok: with a sibling at its limit of threads blocked in the process model",
    "ok: the sibling hog met every limit with NoMemory",
    "ok: at its heap limit, a message to a waiting receiver goes through",
    "ok: with a child at its limit of queued 64 KiB messages",
    "ok: the child's smaller limit bounds every count below the sibling's",
    "ok: the kernel memory charged came back after the hogs",
    "kmem#2| TEST PASS kmem",
    "kmem_hog#3| TEST PASS kmem_hog",
];

/// What the `sting` tests require (the same at every CPU count): each scenario of
/// `sting::selftest`, then the verdict.
const STING_REQUIRE: &[&str] = &[
    "sting#1| ok: states: delayed, scheduled, evaluating (ready, blocked), absorbed, determined (value, terminated)",
    "sting#1| ok: absorb: 100 delayed threads absorbed with 0 switches",
    "sting#1| ok: pool_reuse: ",
    "sting#1| ok: policies: Fifo [0, 1, 2, 3, 4]; Lifo [4, 3, 2, 1, 0]; WorkStealing [4, 3, 2, 1, 0]",
    "sting#1| ok: stealing: ",
    "sting#1| ok: migrate: ",
    "sting#1| ok: mutex: ",
    "sting#1| ok: condvar: ",
    "sting#1| ok: barrier: ",
    "sting#1| ok: suspend: ",
    "sting#1| ok: terminate: ",
    "sting#1| ok: groups: ",
    "sting#1| ok: ports: ",
    "sting#1| ok: areas: ",
    "sting#1| ok: foreign_unpark: 4 threads woken from another kernel thread",
    "sting#1| ok: hand_off: woken ahead of the queue",
    "sting#1| ok: owned_entries: Fifo ok, Lifo ok",
    "sting#1| ok: primes: ",
    "sting#1| ok: mst: ",
    "sting#1| ok: alphabeta: ",
    "sting#1| ok: nbody: ",
    "sting#1| TEST PASS sting",
];

/// What the `sting_block` tests require (the same at every CPU count): the verdict, and
/// that the `act_get_state` case ran (its wait for another thread to stop).
const STING_BLOCK_REQUIRE: &[&str] = &[
    "sting_block#1| ok: act_get_state: the other thread of its virtual processor ran while it waited",
    "sting_block#1| TEST PASS sting_block",
];

/// `threads10k` creates 10,000 threads, which takes a while under TCG.
const THREADS10K_TIMEOUT: Duration = Duration::from_secs(120);

/// What the `threads10k` tests require (the same at every CPU count).
const THREADS10K_REQUIRE: &[&str] = &[
    "threads10k#1| TEST PASS 10000 threads blocked with at most cpus+2 kernel stacks (",
    "threads10k#1| TEST PASS all 10000 threads finished and were reclaimed",
    "threads10k#1| stats: blocks ",
    "[kernel] task 1 (threads10k) exited with code 0",
];

/// What the `pingpong` tests require (the same at every CPU count).
const PINGPONG_REQUIRE: &[&str] = &[
    "pingpong#1| TEST PASS pingpong threads",
    "[kernel] task 1 (pingpong) exited with code 0",
];

/// What the `yield_storm` tests require (the same at every CPU count): all 18,000 yields
/// returned (and [`yield_storm_counts`]).
const YIELD_STORM_REQUIRE: &[&str] = &[
    "yield_storm#1| 18000 yields by 9 threads in ",
    "yield_storm#1| TEST PASS yield storm",
    "[kernel] task 1 (yield_storm) exited with code 0",
];

/// What the `sleepers` tests require (the same at every CPU count).
const SLEEPERS_REQUIRE: &[&str] = &[
    "sleepers#1| TEST PASS sleep ordering",
    "sleepers#1| TEST PASS wait timeout",
    "sleepers#1| TEST PASS wait value mismatch",
    "sleepers#1| TEST PASS wait bad address",
    "[kernel] task 1 (sleepers) exited with code 0",
];

/// What the `procmodel` tests require (the same at every CPU count).
const PROCMODEL_REQUIRE: &[&str] = &[
    "procmodel#1| TEST PASS process model block",
    "[kernel] task 1 (procmodel) exited with code 0",
];

/// What the `priority` tests require (the same at every CPU count).
const PRIORITY_REQUIRE: &[&str] = &[
    "priority#1| TEST PASS high priority runs over a spinner",
    "priority#1| TEST PASS priority out of range rejected",
    "[kernel] task 1 (priority) exited with code 0",
];

/// What the `pong` tests require (the same at every CPU count): each task's 500 yields
/// returned.
const PONG_REQUIRE: &[&str] = &[
    "pong#1| task 1: 500 yields in ",
    "pong#2| task 2: 500 yields in ",
    "pong#1| TEST PASS yield pingpong task 1",
    "pong#2| TEST PASS yield pingpong task 2",
    "[kernel] task 1 (pong) exited with code 0",
    "[kernel] task 2 (pong) exited with code 0",
];

/// Unmapping a page that reader threads use kills the task with a fault at the page.
const SHOOTDOWN_REQUIRE: &[&str] = &[
    "shootdown#1| TEST PASS mem_map argument checks",
    "shootdown#1| all 3 readers are reading; unmapping the page",
    "[kernel] task 1 (shootdown) killed: page fault at address 0x50000000 (not present, read, user)",
];

/// What the `floor` tests require (the same at every CPU count): every check of
/// `floor_test`, and the partner ended by its client (killed through its task port).
const FLOOR_REQUIRE: &[&str] = &[
    "ok: floor_minimal returns 0",
    "ok: a call to a task that does not exist: NotFound",
    "ok: a return with no call in progress: InvalidArgument",
    "ok: booted with the host-privilege right (priv=floor_test)",
    "ok: a registration without the host-privilege right: Denied",
    "ok: a registration naming another right: Denied",
    "ok: a call from a task the partner did not name: Denied",
    "ok: a call to this task itself",
    "ok: the partner's code ran in its own address space",
    "ok: a fault in the partner's code ends the call: Interrupted",
    "ok: an interrupt in the partner's code ends the call: Interrupted",
    "ok: after the partner's end: NotFound",
    "ok: armed: 100 accesses resumed by the kernel's trap path, no exception",
    "ok: disarmed: an ordinary fault",
    "floor_test#1| TEST PASS floor",
    "[kernel] task 1 (floor_test) exited with code 0",
];

/// The number just before `after` on the first line containing `after`.
fn number_before(log: &str, after: &str) -> Result<u64, String> {
    let line = log
        .lines()
        .find(|l| l.contains(after))
        .ok_or_else(|| format!("missing `{after}`"))?;
    let (before, _) = line.split_once(after).unwrap_or_default();
    before
        .split_whitespace()
        .last()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("no number before `{after}` in `{line}`"))
}

/// Checks the counts `yield_storm` prints: the kernel counted a switching yield for at
/// least half of the 18,000 yields, and at most 10% of the recorded yields were followed by
/// the same thread's. Every thread is pinned to one CPU (however many the machine has), so
/// with several ready there every yield hands the CPU over.
fn yield_storm_counts(log: &str) -> Result<(), String> {
    let switched = number_before(log, " yield blocks")?;
    let repeats = number_before(log, " repeats in 4000 recorded yields")?;
    if switched * 2 < 18000 || repeats > 400 {
        return Err(format!(
            "yields do not switch: the kernel counted {switched} switching yields of 18000, \
             and {repeats} of 4000 yields were followed by the same thread's"
        ));
    }
    Ok(())
}

/// Checks that the two `pong` tasks' `turn` lines alternate: of the 80 lines, at most 8
/// follow a line of the same task (a timer tick between a line and its yield makes one).
fn pong_alternates(log: &str) -> Result<(), String> {
    let turns: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("| turn ").map(|(who, _)| who.trim()))
        .collect();
    let repeats = turns.windows(2).filter(|w| w[0] == w[1]).count();
    if turns.len() == 80 && repeats <= 8 {
        Ok(())
    } else {
        Err(format!(
            "the tasks' turns do not alternate: {repeats} of {} `turn` lines follow one of \
             the same task",
            turns.len()
        ))
    }
}

/// What the `caps` tests require: the host-privilege right works for the boot task the
/// command line names, and every task without it (a spawned `caps_peer`, a spawned second
/// `caps`) is refused.
const CAPS_REQUIRE: &[&str] = &[
    "caps#1| ok: a boot task named by priv= gets the host-privilege right",
    "caps#1| ok: debug_block_process_model with the right blocks and returns",
    "caps#1| ok: debug_block_process_model without a right: Denied",
    "caps#1| ok: debug_block_process_model with a send right to another port: Denied",
    "caps#1| ok: a message to the host-privilege port: NotSupported",
    "caps#1| ok: a partner registered with a passed-on right answers its spawner",
    "caps#2| ok: a spawned caps gets no host-privilege right: Denied",
    "ok: a spawned task has no host-privilege right",
    "ok: floor_xas_register without the right: Denied",
    "ok: a floor call to a partner that named another caller: Denied (1 of",
    "caps_peer#4| TEST PASS caps_peer",
    "caps#1| TEST PASS caps",
];

/// Most kernel report lines the `flood` test's 100,000 bad-address calls may cause (the
/// kernel's rate limit allows fewer).
const FLOOD_LINES_MAX: usize = 64;

/// The `flood` test's log: at most [`FLOOD_LINES_MAX`] bad-address report lines, and a
/// note of how many were suppressed.
fn flood_is_bounded(log: &str) -> Result<(), String> {
    let lines = log
        .lines()
        .filter(|l| l.contains("returned BadAddress"))
        .count();
    if lines > FLOOD_LINES_MAX {
        return Err(format!(
            "{lines} bad-address report lines (at most {FLOOD_LINES_MAX})"
        ));
    }
    if !log
        .lines()
        .any(|l| l.starts_with("[kernel] ") && l.contains(" messages suppressed"))
    {
        return Err("no `[kernel] N messages suppressed` note".into());
    }
    Ok(())
}

/// The fields of `baton_abi::Stats`, as the `stats` program prints them.
const STATS_FIELDS: &[&str] = &baton_abi::Stats::FIELD_NAMES;

/// Checks that the `stats` program printed a `stats: <field> = <value>` line for every
/// field.
fn every_stats_field(log: &str) -> Result<(), String> {
    let missing: Vec<&str> = STATS_FIELDS
        .iter()
        .copied()
        .filter(|field| !log.contains(&format!("stats#1| stats: {field} = ")))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "no `stats: <field> = ` line for {}",
            missing.join(", ")
        ))
    }
}

/// Every integration test, in the order they are started.
pub const ALL: &[IntegrationTest] = &[
    IntegrationTest {
        name: "boot_hello",
        init: &["init"],
        require: &[
            "init#1| Hello from Baton",
            "init#1| time since reset: ",
            "init#1| boot modules:",
            "init#1|   init (",
            "init#1|   survivor (",
            "init#1| TEST PASS greeting",
            "[kernel] task 1 (init) exited with code 0",
        ],
        ..BASE
    },
    IntegrationTest {
        // Two tasks of one program: same virtual addresses, different memory, each checking
        // its own pattern across 200 yields to the other.
        name: "isolation",
        init: &["iso", "iso"],
        require: &[
            "iso#1| TEST PASS isolation (task 1)",
            "iso#2| TEST PASS isolation (task 2)",
        ],
        // Both print their first line before either finishes: they ran side by side.
        check: Some(|log| {
            expect_order(log, "iso#2| task 2: array at", "(iso) exited with code 0")
        }),
        ..BASE
    },
    IntegrationTest {
        name: "fault_null",
        init: &["fault_null", "survivor"],
        require: &[
            "[kernel] task 1 (fault_null) killed: page fault at address 0x0 (not present, read, user)",
            "  rip=",
            // The function the fault is in, from the program's symbol table, and (on the
            // host, from its line table) the line.
            "  in fault_null::main+0x",
            "xtask: task 1 (fault_null) faulted in fault_null::main at user/programs/src/bin/fault_null.rs:",
            "survivor#2| TEST PASS survivor",
            "[kernel] task 2 (survivor) exited with code 0",
        ],
        check: Some(|log| {
            expect_order(
                log,
                "(fault_null) killed: page fault",
                "(survivor) exited with code 0",
            )
        }),
        exits: &[("fault_null", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "fault_privileged",
        init: &["fault_priv", "survivor"],
        require: &[
            "[kernel] task 1 (fault_priv) killed: general protection fault",
            "survivor#2| TEST PASS survivor",
            "[kernel] task 2 (survivor) exited with code 0",
        ],
        check: Some(|log| {
            expect_order(
                log,
                "(fault_priv) killed: general protection",
                "(survivor) exited with code 0",
            )
        }),
        exits: &[("fault_priv", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "fpu_smp1",
        init: &["fpu"],
        smp: 1,
        timeout: Duration::from_secs(120),
        require: FPU_REQUIRE,
        exits: &[("fpu_nomem", Exit::KilledOrCode(0))],
        ..BASE
    },
    IntegrationTest {
        name: "fpu_smp2",
        init: &["fpu"],
        smp: 2,
        timeout: Duration::from_secs(120),
        require: FPU_REQUIRE,
        exits: &[("fpu_nomem", Exit::KilledOrCode(0))],
        ..BASE
    },
    IntegrationTest {
        name: "bad_syscall_args",
        init: &["bad_args", "survivor"],
        require: &[
            "TEST PASS null returns 0 and keeps its argument registers",
            "TEST PASS kernel address rejected",
            "TEST PASS unmapped address rejected",
            "TEST PASS non-canonical address rejected",
            "TEST PASS wrapping range rejected",
            "TEST PASS range crossing into unmapped rejected",
            "TEST PASS oversized write rejected",
            "TEST PASS module_info to kernel address rejected",
            "TEST PASS module_info to user record accepted",
            "TEST PASS spawn of missing module rejected",
            "TEST PASS spawn name at kernel address rejected",
            "[kernel] task 1 (bad_args) killed: bad system call 9999",
            "survivor#2| TEST PASS survivor",
            "[kernel] task 2 (survivor) exited with code 0",
        ],
        check: Some(|log| {
            expect_order(
                log,
                "(bad_args) killed: bad system call",
                "(survivor) exited with code 0",
            )
        }),
        exits: &[("bad_args", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Two CPU-bound tasks that never yield: only the timer can interleave them.
        name: "preemption",
        init: &["spin", "spin"],
        require: &["spin#1| TEST PASS spin", "spin#2| TEST PASS spin"],
        check: Some(|log| expect_interleaved(log, "spin#1| progress", "spin#2| progress")),
        ..BASE
    },
    IntegrationTest {
        // The kernel's own fatal path: a page fault in kernel mode is reported and stops
        // QEMU with the failure status.
        name: "kernel_fault_report",
        init: &["init"],
        extra: &["crash=kernel-page-fault"],
        outcome: Outcome::KernelFailure,
        require: &[
            "[kernel] KERNEL EXCEPTION: page fault (vector 14) in kernel mode",
            "address 0xdead0000: not present, read, kernel",
            "  rip=0xffffffff8",
        ],
        ..BASE
    },
    IntegrationTest {
        // Kernel memory is charged to tasks: a task that drives any kind to its limit
        // gets NoMemory (the kernel neither panics nor runs out), and the other tasks go
        // on; a child's smaller limit bounds it.
        name: "kmem_smp1",
        init: &["names", "kmem", "kmem_hog"],
        extra: &["priv=kmem_hog"],
        smp: 1,
        timeout: Duration::from_secs(180),
        require: KMEM_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "kmem_smp2",
        init: &["names", "kmem", "kmem_hog"],
        extra: &["priv=kmem_hog"],
        smp: 2,
        timeout: Duration::from_secs(180),
        require: KMEM_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // 10,000 blocked threads hold at most cpus+2 kernel stacks; all are reclaimed.
        name: "threads10k_smp1",
        init: &["threads10k"],
        smp: 1,
        timeout: THREADS10K_TIMEOUT,
        require: THREADS10K_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "threads10k_smp2",
        init: &["threads10k"],
        smp: 2,
        timeout: THREADS10K_TIMEOUT,
        require: THREADS10K_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "threads10k_smp4",
        init: &["threads10k"],
        smp: 4,
        timeout: THREADS10K_TIMEOUT,
        require: THREADS10K_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Two threads of one task alternate 1,000 rounds through wait/wake.
        name: "pingpong_smp1",
        init: &["pingpong"],
        smp: 1,
        require: PINGPONG_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "pingpong_smp2",
        init: &["pingpong"],
        smp: 2,
        require: PINGPONG_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "pingpong_smp4",
        init: &["pingpong"],
        smp: 4,
        require: PINGPONG_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Nine threads yield 2,000 times each; every yield returns exactly once, and
        // (more threads than CPUs) hands the processor to another thread.
        name: "yield_storm_smp1",
        init: &["yield_storm"],
        smp: 1,
        require: YIELD_STORM_REQUIRE,
        check: Some(yield_storm_counts),
        ..BASE
    },
    IntegrationTest {
        name: "yield_storm_smp2",
        init: &["yield_storm"],
        smp: 2,
        require: YIELD_STORM_REQUIRE,
        check: Some(yield_storm_counts),
        ..BASE
    },
    IntegrationTest {
        name: "yield_storm_smp4",
        init: &["yield_storm"],
        smp: 4,
        require: YIELD_STORM_REQUIRE,
        check: Some(yield_storm_counts),
        ..BASE
    },
    IntegrationTest {
        // Every way a thread is woken (timeouts, messages, wake, alerts, resumes, its
        // task's end, terminate) at once on two CPUs: each wait made ready exactly once.
        name: "wakestorm_smp2",
        init: &["wakestorm"],
        smp: 2,
        timeout: Duration::from_secs(180),
        require: &[
            "wakestorm#1| TEST PASS wakestorm",
            "[kernel] task 1 (wakestorm) exited with code 0",
        ],
        check: Some(no_refused_wakes),
        exits: &[("wakestorm_child", Exit::KilledOrCode(0))],
        ..BASE
    },
    IntegrationTest {
        // Sleep ordering, wait timeouts, and wait's error returns.
        name: "sleepers_smp1",
        init: &["sleepers"],
        smp: 1,
        require: SLEEPERS_REQUIRE,
        icount: true,
        ..BASE
    },
    IntegrationTest {
        name: "sleepers_smp2",
        init: &["sleepers"],
        smp: 2,
        require: SLEEPERS_REQUIRE,
        icount: true,
        ..BASE
    },
    IntegrationTest {
        name: "sleepers_smp4",
        init: &["sleepers"],
        smp: 4,
        require: SLEEPERS_REQUIRE,
        icount: true,
        ..BASE
    },
    IntegrationTest {
        // A blocking wait leaves the kernel's heap as it was, whichever address it waits
        // on: every wait-queue bucket has its room from boot.
        name: "waitroom_smp1",
        init: &["waitroom"],
        smp: 1,
        require: WAITROOM_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "waitroom_smp2",
        init: &["waitroom"],
        smp: 2,
        require: WAITROOM_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Ports, rights, messages, RPC fast and slow paths, notifications, between two
        // tasks.
        name: "ipc_smp1",
        init: &["ipc"],
        smp: 1,
        require: IPC_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "ipc_smp2",
        init: &["ipc"],
        smp: 2,
        require: IPC_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "ipc_smp4",
        init: &["ipc"],
        smp: 4,
        require: IPC_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // A program's arguments and environment through its start message: `echo` prints
        // what `args_test` starts it with; bad start blocks are refused.
        name: "args",
        init: &["args_test"],
        require: &[
            "args_test#1| ok: a boot task has no arguments and no environment",
            "args_test#1| ok: a zero byte in an argument is refused",
            "args_test#1| ok: arguments larger than a message are refused",
            "args_test#1| ok: an unreadable start block is refused",
            "args_test#1| ok: a malformed start message is refused",
            "args_test#1| ok: a start message longer than the limit is refused",
            "args_test#1| TEST PASS args_test",
            "echo#2| hello wide world",
            "echo#2| LANG=C",
            "echo#2| EMPTY=",
            "[kernel] task 2 (echo) exited with code 0",
        ],
        ..BASE
    },
    IntegrationTest {
        // The example of `docs/programs.md`: a server and a client written with the
        // interface macro, meeting through the name service; the client's arguments.
        name: "greet",
        init: &["names", "greet_server", "greet_client"],
        require: &[
            "greet_client#3| Hello, world!",
            "greet_client#3| the server has made 1 greetings",
            "[kernel] task 3 (greet_client) exited with code 0",
            "[kernel] task 2 (greet_server) exited with code 0",
        ],
        ..BASE
    },
    IntegrationTest {
        // The kernel's timeline trace (`cargo xtask trace`) of the IPC test: an RPC's
        // request goes by the fast path to the server's thread (a stack handoff) and its
        // reply comes back to the client's, in that order, and the trace is JSON a trace
        // viewer reads.
        name: "trace_rpc",
        init: &["ipc"],
        extra: &["trace=8192"],
        require: &["[kernel] trace: on, 8192 records per CPU", "[kernel] trace: end"],
        check: Some(check_trace_rpc),
        ..BASE
    },
    IntegrationTest {
        // The Sting user-level runtime (`user/sting`): threads, absorption, pools,
        // policies, stealing, migration, synchronisation, groups, ports, primes; one
        // virtual processor (kernel thread) per CPU.
        name: "sting_smp1",
        init: &["sting"],
        smp: 1,
        timeout: Duration::from_secs(180),
        require: STING_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "sting_smp2",
        init: &["sting"],
        smp: 2,
        timeout: Duration::from_secs(180),
        require: STING_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "sting_smp4",
        init: &["sting"],
        smp: 4,
        timeout: Duration::from_secs(240),
        require: STING_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Virtual processors with Block and Unblock upcalls (Sting's kernel half): bad
        // registrations, a sting thread blocked in a receive another task satisfies while
        // its processor runs the others, pool exhaustion, a child killed with threads
        // blocked and spares parked.
        name: "vproc_smp1",
        init: &["vproc"],
        smp: 1,
        timeout: Duration::from_secs(120),
        require: &["vproc#1| TEST PASS vproc"],
        exits: &[("vproc_child", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Virtual processors with Block and Unblock upcalls (Sting's kernel half): bad
        // registrations, a sting thread blocked in a receive another task satisfies while
        // its processor runs the others, pool exhaustion, a child killed with threads
        // blocked and spares parked.
        name: "vproc_smp2",
        init: &["vproc"],
        smp: 2,
        timeout: Duration::from_secs(120),
        require: &["vproc#1| TEST PASS vproc"],
        exits: &[("vproc_child", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Virtual processors with Block and Unblock upcalls (Sting's kernel half): bad
        // registrations, a sting thread blocked in a receive another task satisfies while
        // its processor runs the others, pool exhaustion, a child killed with threads
        // blocked and spares parked.
        name: "vproc_smp4",
        init: &["vproc"],
        smp: 4,
        timeout: Duration::from_secs(180),
        require: &["vproc#1| TEST PASS vproc"],
        exits: &[("vproc_child", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Sting threads that block in the kernel on every path give their virtual
        // processor back (Block and Unblock upcalls): an RPC of the fast path's kind, a
        // migrating call whose server sleeps, an exception's wait for its handler, a
        // page-in from a pager, act_get_state's wait for a thread to stop; and an immediate signal stops a thread spinning on another
        // virtual processor at once.
        name: "sting_block_smp1",
        init: &["sting_block"],
        smp: 1,
        timeout: Duration::from_secs(180),
        require: STING_BLOCK_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Sting threads that block in the kernel on every path give their virtual
        // processor back (Block and Unblock upcalls): an RPC of the fast path's kind, a
        // migrating call whose server sleeps, an exception's wait for its handler, a
        // page-in from a pager, act_get_state's wait for a thread to stop; and an immediate signal stops a thread spinning on another
        // virtual processor at once.
        name: "sting_block_smp2",
        init: &["sting_block"],
        smp: 2,
        timeout: Duration::from_secs(180),
        require: STING_BLOCK_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Sting threads that block in the kernel on every path give their virtual
        // processor back (Block and Unblock upcalls): an RPC of the fast path's kind, a
        // migrating call whose server sleeps, an exception's wait for its handler, a
        // page-in from a pager, act_get_state's wait for a thread to stop; and an immediate signal stops a thread spinning on another
        // virtual processor at once.
        name: "sting_block_smp4",
        init: &["sting_block"],
        smp: 4,
        timeout: Duration::from_secs(240),
        require: STING_BLOCK_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // The runtime's heap through `alloc`: Vec, String, Box, BTreeMap, reuse of freed
        // memory, pages given back, two threads at once, allocations that must fail.
        name: "heap_smp1",
        init: &["heap"],
        smp: 1,
        require: HEAP_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "heap_smp2",
        init: &["heap"],
        smp: 2,
        require: HEAP_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Differential: each RPC message shape run plain (fast path where it applies) and
        // with MSG_SLOW, compared in every observable (results, headers, data, rights,
        // kernel counts, the server's view).
        name: "ipc_diff_smp1",
        init: &["ipc_diff"],
        smp: 1,
        require: IPC_DIFF_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "ipc_diff_smp2",
        init: &["ipc_diff"],
        smp: 2,
        require: IPC_DIFF_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // The seeded system-call fuzzer: 100,000 calls per boot over 4 seeds; at least 30%
        // succeed, and the kernel's counts come back after each seed.
        name: "fuzz_smp1",
        init: &["fuzz"],
        smp: 1,
        timeout: FUZZ_TIMEOUT,
        require: FUZZ_REQUIRE,
        exits: FUZZ_EXITS,
        ..BASE
    },
    IntegrationTest {
        name: "fuzz_smp2",
        init: &["fuzz"],
        smp: 2,
        timeout: FUZZ_TIMEOUT,
        require: FUZZ_REQUIRE,
        exits: FUZZ_EXITS,
        ..BASE
    },
    IntegrationTest {
        // Hostile messages and port calls: exact error codes, the peer keeps serving,
        // kernel counts (heap bytes too) back to the baseline.
        name: "hostile_smp1",
        init: &["hostile"],
        smp: 1,
        require: HOSTILE_REQUIRE,
        // The half-made task it ends through its port has no name in the log yet.
        exits: &[("?", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "hostile_smp2",
        init: &["hostile"],
        smp: 2,
        require: HOSTILE_REQUIRE,
        // The half-made task it ends through its port has no name in the log yet.
        exits: &[("?", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Exceptions as messages: faults, breakpoints and bad system calls handled in user
        // space, thread and task exception ports, a debugger task, an unanswered exception.
        name: "exc_smp1",
        init: &["exc"],
        smp: 1,
        require: EXC_REQUIRE,
        exits: EXC_EXITS,
        ..BASE
    },
    IntegrationTest {
        // The console and the shell, driven through the serial console as a person
        // would: every command, wrong ones, bad arguments, a missing program, a foreground
        // program killed by a fault, a background one killed with `kill`, line editing
        // and the history, then `shutdown`.
        name: "shell_smp1",
        init: &["names", "console", "shell"],
        smp: 1,
        timeout: Duration::from_secs(120),
        extra: &["priv=console,shell"],
        input: SHELL_INPUT,
        prompt: "baton> ",
        require: SHELL_REQUIRE,
        check: Some(shell_check),
        exits: SHELL_EXITS,
        ..BASE
    },
    IntegrationTest {
        // The shell's file commands on a disk (`docs/shell.md`, `docs/files.md`): `ls`
        // starts the driver and the file server, `cat` reads a file by mapping it, `run`
        // starts a program from its file.
        name: "shell_files",
        init: &["names", "console", "shell"],
        smp: 1,
        timeout: Duration::from_secs(120),
        extra: &["priv=console,shell"],
        input: &[
            Typed::Line("ls /"),
            Typed::Line("ls /bin"),
            Typed::Line("cat /nothing/here"),
            Typed::Line("run /bin/echo hello from a file"),
            Typed::Line("run /data/f56k.bin"),
            Typed::Line("shutdown"),
        ],
        prompt: "baton> ",
        require: &[
            "starting the disk driver and the file server",
            "bin/ -",
            "data/ -",
            "echo ",
            "cat: /nothing/here: not found",
            "| hello from a file",
            "/bin/echo ended",
            "run: /data/f56k.bin: not a program",
        ],
        exits: &[
            ("names", Exit::Killed),
            ("console", Exit::Killed),
            ("shell", Exit::Killed),
            ("blk", Exit::Killed),
            ("fs", Exit::Killed),
            // The task made for a file that is no program, ended before it had a name.
            ("?", Exit::Killed),
        ],
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // The system `cargo xtask run` boots: `swapon` starts the disk driver and the
        // default pager and registers the driver with the name server; the shell's file
        // server then uses that driver instead of starting a second one for the device.
        name: "shell_swap_files",
        init: &["names", "console", "shell", "swapon"],
        smp: 1,
        timeout: Duration::from_secs(120),
        extra: &["priv=console,shell,swapon"],
        input: &[
            Typed::After("swapon: paging to the disk's swap area", "ls /\r"),
            Typed::After("data/ -", "shutdown\r"),
        ],
        prompt: "baton> ",
        require: &[
            "swapon: paging to the disk's swap area",
            "starting the file server on the system's disk driver",
            "bin/ -",
            "data/ -",
        ],
        check: Some(one_disk_driver),
        exits: &[
            ("names", Exit::Killed),
            ("console", Exit::Killed),
            ("shell", Exit::Killed),
            ("swapon", Exit::Code(0)),
            ("blk", Exit::Killed),
            ("dpager", Exit::Killed),
            ("fs", Exit::Killed),
        ],
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // A machine with little memory boots and runs a program: in 13 MiB the boot
        // modules and the kernel's image leave 5 MiB, and the kernel's heap of the usual
        // 4 MiB would leave too few frames to start a task (it did: `cannot start init`);
        // it takes 2 MiB instead (`kern::frame::place_heap`).
        name: "small_machine",
        init: &["init"],
        memory_mib: 13,
        require: &[
            "MiB RAM, 2 MiB heap",
            "init#1| Hello from Baton",
            "init#1| TEST PASS greeting",
            "[kernel] task 1 (init) exited with code 0",
        ],
        ..BASE
    },
    IntegrationTest {
        // A realistic run for Accent's Tables 3-8 and 3-10 (`cargo xtask accent-tables`
        // reads this log): the system `cargo xtask run` boots, in a machine of 14 MiB (969
        // frames of user memory), and a session that starts programs from their files on
        // the disk (text and data paged in from the file server), one of them working
        // about three times the memory (paged out to the swap area and back, every page
        // checked), then prints the counters (`vmstat`).
        name: "shell_session",
        init: &["names", "console", "shell", "swapon"],
        smp: 1,
        timeout: Duration::from_secs(300),
        extra: &["priv=console,shell,swapon"],
        memory_mib: 14,
        input: &[
            Typed::After("swapon: paging to the disk's swap area", "ls /bin\r"),
            Typed::Line("run /bin/echo a program started from its file"),
            Typed::Line("run /bin/paging_child work 3072"),
            Typed::Line("ls /data"),
            Typed::Line("run /bin/echo and another"),
            Typed::Line("paging"),
            Typed::Line("vmstat"),
            Typed::Line("shutdown"),
        ],
        prompt: "baton> ",
        require: &[
            "swapon: paging to the disk's swap area",
            "a program started from its file",
            "f56k.bin 57344",
            "and another",
            "BENCHVM paging_from_free=",
        ],
        check: Some(session_paged),
        exits: &[
            ("names", Exit::Killed),
            ("console", Exit::Killed),
            ("shell", Exit::Killed),
            ("swapon", Exit::Code(0)),
            ("blk", Exit::Killed),
            ("dpager", Exit::Killed),
            ("fs", Exit::Killed),
            ("echo", Exit::Code(0)),
            ("paging_child", Exit::Code(0)),
        ],
        disk: true,
        ..BASE
    },
    IntegrationTest {
        name: "shell_smp2",
        init: &["names", "console", "shell"],
        smp: 2,
        timeout: Duration::from_secs(120),
        extra: &["priv=console,shell"],
        input: SHELL_INPUT,
        prompt: "baton> ",
        require: SHELL_REQUIRE,
        check: Some(shell_check),
        exits: SHELL_EXITS_SMP,
        ..BASE
    },
    IntegrationTest {
        // The driver calls (interrupt lines, I/O ports) and the host-privilege listings:
        // every error case, and one real interrupt from COM1.
        name: "devcalls_smp1",
        init: &["devcalls"],
        smp: 1,
        extra: &["priv=devcalls"],
        require: &["devcalls#1| TEST PASS devcalls"],
        ..BASE
    },
    IntegrationTest {
        name: "devcalls_smp2",
        init: &["devcalls"],
        smp: 2,
        extra: &["priv=devcalls"],
        require: &["devcalls#1| TEST PASS devcalls"],
        ..BASE
    },
    IntegrationTest {
        // Paging to the default pager (`docs/vm.md`, "Paging"): user memory limited to
        // 256 frames, working sets three times that, data intact, counters moving; the
        // store (on the disk's swap partition) full; the default pager and the disk driver
        // killed, mid-request too, and restarted; back to baseline.
        name: "paging_smp1",
        init: &["paging"],
        extra: &["priv=paging", "pageable=256"],
        require: PAGING_REQUIRE,
        exits: PAGING_EXITS,
        // About a minute alone; under a loaded host (TCG runs in real time, the
        // driver's holds and the test's waits do not shrink) it has taken eight.
        timeout: Duration::from_secs(900),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        name: "paging_smp2",
        init: &["paging"],
        smp: 2,
        extra: &["priv=paging", "pageable=256"],
        require: PAGING_REQUIRE,
        exits: PAGING_EXITS,
        // About a minute alone; under a loaded host (TCG runs in real time, the
        // driver's holds and the test's waits do not shrink) it has taken eight.
        timeout: Duration::from_secs(900),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // A call's later step waits for its buffer's page: a reply received, and a send
        // resumed after a full queue, into and from buffers paged out while they waited.
        name: "pagewait_smp1",
        init: &["pagewait"],
        check: Some(no_bad_address_lines),
        extra: &["priv=pagewait", "pageable=256"],
        require: PAGEWAIT_REQUIRE,
        exits: PAGEWAIT_EXITS,
        timeout: Duration::from_secs(600),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        name: "pagewait_smp2",
        init: &["pagewait"],
        check: Some(no_bad_address_lines),
        smp: 2,
        extra: &["priv=pagewait", "pageable=256"],
        require: PAGEWAIT_REQUIRE,
        exits: PAGEWAIT_EXITS,
        timeout: Duration::from_secs(600),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // External pagers: data on demand, flush and clean with data returns, unavailable
        // and failed pages, the kernel's copies waiting for a pager, an alert out of a
        // never-answered wait, the pager's port dying (`docs/vm.md`).
        name: "pager_smp1",
        init: &["pager"],
        smp: 1,
        extra: &["priv=pager"],
        require: &["pager#1| TEST PASS pager"],
        ..BASE
    },
    IntegrationTest {
        name: "pager_smp2",
        init: &["pager"],
        smp: 2,
        extra: &["priv=pager"],
        require: &["pager#1| TEST PASS pager"],
        ..BASE
    },
    IntegrationTest {
        // SPIN-style extensions: built-in and WebAssembly system calls, guards, combiners,
        // authorisation, malicious modules, accounting (`docs/extensions.md`).
        name: "extend_smp1",
        init: &["extend"],
        smp: 1,
        require: &["extend#1| TEST PASS extend"],
        ..BASE
    },
    IntegrationTest {
        name: "extend_smp2",
        init: &["extend"],
        smp: 2,
        require: &["extend#1| TEST PASS extend"],
        ..BASE
    },
    IntegrationTest {
        // SPIN's memory interfaces and `Translation` events: write barriers, the Appel–Li
        // handlers, Dirty, demand paging from physical pages, malicious fault handlers
        // (`docs/extensions.md`, "Memory interfaces").
        name: "spinvm_smp1",
        init: &["spinvm"],
        smp: 1,
        require: &["spinvm#1| TEST PASS spinvm"],
        exits: &[("fault_null", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "spinvm_smp2",
        init: &["spinvm"],
        smp: 2,
        require: &["spinvm#1| TEST PASS spinvm"],
        exits: &[("fault_null", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // SPIN's `PhysAddr.Reclaim` under memory pressure: a hot page protected by a
        // handler that nominates another page of its installer's, built in and in
        // WebAssembly; hostile nominations ignored, hostile handlers aborted
        // (`docs/extensions.md`, "PhysAddr.Reclaim").
        name: "reclaim_smp1",
        init: &["reclaim"],
        require: &["reclaim#1| TEST PASS reclaim"],
        exits: RECLAIM_EXITS,
        extra: &["priv=reclaim", "pageable=256"],
        timeout: Duration::from_secs(600),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        name: "reclaim_smp2",
        init: &["reclaim"],
        smp: 2,
        require: &["reclaim#1| TEST PASS reclaim"],
        exits: RECLAIM_EXITS,
        extra: &["priv=reclaim", "pageable=256"],
        timeout: Duration::from_secs(600),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // SPIN's integrated thread package, a built-in extension's system calls: fork,
        // join, exit, conditions and the ping-pong handoff (`docs/extensions.md`).
        name: "cthreads_smp1",
        init: &["cthreads"],
        smp: 1,
        require: &["cthreads#1| TEST PASS cthreads"],
        ..BASE
    },
    IntegrationTest {
        name: "cthreads_smp2",
        init: &["cthreads"],
        smp: 2,
        require: &["cthreads#1| TEST PASS cthreads"],
        ..BASE
    },
    IntegrationTest {
        // Kernel objects through capabilities: task and thread ports, interposition.
        name: "kobj_smp1",
        init: &["kobj"],
        smp: 1,
        require: KOBJ_REQUIRE,
        exits: &[("kobj_child", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "kobj_smp2",
        init: &["kobj"],
        smp: 2,
        require: KOBJ_REQUIRE,
        exits: &[("kobj_child", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Migrating RPC: activations, pools, sidetrack, nested calls, aborts.
        name: "migrate_smp1",
        init: &["migrate"],
        smp: 1,
        require: MIGRATE_REQUIRE,
        check: Some(each_task_ends_once),
        exits: MIGRATE_EXITS,
        timeout: ACTIVATION_TIMEOUT,
        ..BASE
    },
    IntegrationTest {
        // An interface-macro server as a migrating server (`migrate::serve`) and as a
        // message-loop server, with the same checks.
        name: "migrate_idl_smp1",
        init: &["migrate_idl"],
        smp: 1,
        require: MIGRATE_IDL_REQUIRE,
        check: Some(each_task_ends_once),
        ..BASE
    },
    IntegrationTest {
        name: "migrate_idl_smp2",
        init: &["migrate_idl"],
        smp: 2,
        require: MIGRATE_IDL_REQUIRE,
        check: Some(each_task_ends_once),
        ..BASE
    },
    IntegrationTest {
        // Control of activations: alerts, suspension, state, the termination split.
        name: "actctl_smp1",
        init: &["actctl"],
        smp: 1,
        require: ACTCTL_REQUIRE,
        check: Some(each_task_ends_once),
        timeout: ACTIVATION_TIMEOUT,
        ..BASE
    },
    IntegrationTest {
        name: "actctl_smp2",
        init: &["actctl"],
        smp: 2,
        require: ACTCTL_REQUIRE,
        check: Some(each_task_ends_once),
        timeout: ACTIVATION_TIMEOUT,
        ..BASE
    },
    IntegrationTest {
        // Tasks, threads and activations ending while threads are inside activations:
        // a task ending with a thread in its own activation, a client and then its server
        // ending, a split's reply, a lingering server; every task's end reported once.
        name: "teardown_smp1",
        init: &["teardown"],
        timeout: TEARDOWN_TIMEOUT,
        smp: 1,
        require: TEARDOWN_REQUIRE,
        check: Some(each_task_ends_once),
        exits: MIGRATE_EXITS,
        ..BASE
    },
    IntegrationTest {
        name: "teardown_smp2",
        init: &["teardown"],
        timeout: TEARDOWN_TIMEOUT,
        smp: 2,
        require: TEARDOWN_REQUIRE,
        check: Some(each_task_ends_once),
        exits: MIGRATE_EXITS,
        ..BASE
    },
    IntegrationTest {
        // No task's registers reach another through a migrating call: a dirty server
        // and a server that reports the registers it finds at entry.
        name: "migrate_regs_smp1",
        init: &["migrate_regs"],
        smp: 1,
        require: MIGRATE_REGS_REQUIRE,
        check: Some(each_task_ends_once),
        ..BASE
    },
    IntegrationTest {
        // A server cannot make a client's thread that migrated into it a virtual
        // processor's carrier, nor use the client's processor through it; the client's
        // THREAD_INFO and exception_port_set of that thread reach its home activation.
        name: "vp_migrate_smp1",
        init: &["vp_migrate"],
        smp: 1,
        require: VP_MIGRATE_REQUIRE,
        check: Some(each_task_ends_once),
        ..BASE
    },
    IntegrationTest {
        name: "vp_migrate_smp2",
        init: &["vp_migrate"],
        smp: 2,
        require: VP_MIGRATE_REQUIRE,
        check: Some(each_task_ends_once),
        ..BASE
    },
    IntegrationTest {
        name: "migrate_regs_smp2",
        init: &["migrate_regs"],
        smp: 2,
        require: MIGRATE_REGS_REQUIRE,
        check: Some(each_task_ends_once),
        ..BASE
    },
    IntegrationTest {
        name: "migrate_smp2",
        init: &["migrate"],
        smp: 2,
        require: MIGRATE_REQUIRE,
        check: Some(each_task_ends_once),
        exits: MIGRATE_EXITS,
        timeout: ACTIVATION_TIMEOUT,
        ..BASE
    },
    IntegrationTest {
        name: "exc_smp2",
        init: &["exc"],
        smp: 2,
        require: EXC_REQUIRE,
        exits: EXC_EXITS,
        ..BASE
    },
    IntegrationTest {
        // The name server, and interface-macro stubs and servers over real IPC.
        name: "names_smp1",
        init: &["names", "names_test"],
        smp: 1,
        require: NAMES_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "names_smp2",
        init: &["names", "names_test"],
        smp: 2,
        require: NAMES_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Accent's virtual memory from user space (`docs/vm.md`): lazy allocation, zero
        // fill, kernel copies into untouched memory, faults by class to the exception
        // port and in the kill report, wiring, errors, exhaustion and recovery.
        name: "vm_smp1",
        init: &["vm"],
        require: VM_REQUIRE,
        exits: &[("vm_victim", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "vm_smp2",
        init: &["vm"],
        smp: 2,
        require: VM_REQUIRE,
        exits: &[("vm_victim", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Memory objects as capabilities: shared between tasks, copy-on-write, read-only
        // rights, remote read/write, DMA and physical objects, cross-task wait/wake.
        name: "memobj_smp1",
        init: &["memobj"],
        require: MEMOBJ_REQUIRE,
        extra: &["priv=memobj"],
        ..BASE
    },
    IntegrationTest {
        name: "memobj_smp2",
        init: &["memobj"],
        smp: 2,
        require: MEMOBJ_REQUIRE,
        extra: &["priv=memobj"],
        ..BASE
    },
    IntegrationTest {
        // Out-of-line data in messages and `vm_copy` (Accent's MoveWords, `docs/vm.md`):
        // by value, moves, unaligned regions, hostile descriptors, a receiver killed with
        // regions queued, and the four forms of `vm_copy`.
        name: "ool_smp1",
        init: &["ool"],
        require: OOL_REQUIRE,
        exits: &[("ool_peer", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "ool_smp2",
        init: &["ool"],
        smp: 2,
        require: OOL_REQUIRE,
        exits: &[("ool_peer", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Task creation in Accent's steps and fork (`docs/vm.md`, "Task creation"). The
        // half-made task it kills through its port is reported by id only (no name yet
        // in the log): "?".
        name: "task_smp1",
        init: &["taskmake"],
        require: TASK_REQUIRE,
        exits: &[("?", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "task_smp2",
        init: &["taskmake"],
        smp: 2,
        require: TASK_REQUIRE,
        exits: &[("?", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // A process-model block keeps its kernel stack (and its live variables) and
        // lets other threads run.
        name: "procmodel_smp1",
        init: &["procmodel"],
        smp: 1,
        require: PROCMODEL_REQUIRE,
        extra: &["priv=procmodel"],
        ..BASE
    },
    IntegrationTest {
        name: "procmodel_smp4",
        init: &["procmodel"],
        smp: 4,
        require: PROCMODEL_REQUIRE,
        extra: &["priv=procmodel"],
        ..BASE
    },
    IntegrationTest {
        // A priority-50 sleeper keeps getting the processor from a priority-10 spinner.
        // Both are pinned to CPU 0 by the program, so the four-CPU run tests the same
        // contention (with the other CPUs idle) rather than a CPU for each.
        name: "priority_smp1",
        init: &["priority"],
        smp: 1,
        require: PRIORITY_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "priority_smp4",
        init: &["priority"],
        smp: 4,
        require: PRIORITY_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Two tasks taking turns through yield, both pinned to CPU 0 (at every CPU count):
        // their `turn` lines alternate.
        name: "pong_smp1",
        init: &["pong", "pong"],
        smp: 1,
        require: PONG_REQUIRE,
        check: Some(pong_alternates),
        ..BASE
    },
    IntegrationTest {
        name: "pong_smp4",
        init: &["pong", "pong"],
        smp: 4,
        require: PONG_REQUIRE,
        check: Some(pong_alternates),
        ..BASE
    },
    IntegrationTest {
        // Every field of `stats` printed, and self-consistent.
        name: "stats_smp1",
        init: &["stats"],
        smp: 1,
        require: &["stats#1| stats: cpus = 1", "stats#1| TEST PASS stats"],
        check: Some(every_stats_field),
        ..BASE
    },
    IntegrationTest {
        name: "stats_smp4",
        init: &["stats"],
        smp: 4,
        require: &["stats#1| stats: cpus = 4", "stats#1| TEST PASS stats"],
        check: Some(every_stats_field),
        ..BASE
    },
    IntegrationTest {
        // A low-priority thread's `wake` or message send lets the higher-priority thread
        // it readies run before its own next instruction (everything pinned to CPU 0).
        name: "wake_preempt_smp1",
        init: &["wake_preempt"],
        require: WAKE_PREEMPT_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        name: "wake_preempt_smp2",
        init: &["wake_preempt"],
        smp: 2,
        require: WAKE_PREEMPT_REQUIRE,
        ..BASE
    },
    IntegrationTest {
        // Register sets from user space (exception replies, set_state in every form,
        // thread_create) cannot raise IOPL, clear IF, or put rip/rsp outside user space.
        name: "regs_sane_smp1",
        init: &["regs_sane"],
        require: REGS_SANE_REQUIRE,
        exits: &[("regs_victim", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "regs_sane_smp2",
        init: &["regs_sane"],
        smp: 2,
        require: REGS_SANE_REQUIRE,
        exits: &[("regs_victim", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Readers on other CPUs hold the page's translation when it is unmapped: a
        // shootdown to one other CPU, and (below) to three. There is no one-CPU run: with
        // no other CPU there is nothing to shoot down.
        name: "tlb_shootdown_smp2",
        init: &["shootdown"],
        smp: 2,
        require: SHOOTDOWN_REQUIRE,
        check: Some(each_task_ends_once),
        exits: &[("shootdown", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "tlb_shootdown_smp4",
        init: &["shootdown"],
        smp: 4,
        require: SHOOTDOWN_REQUIRE,
        check: Some(each_task_ends_once),
        exits: &[("shootdown", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // Debugging and benchmark calls need the host-privilege right.
        name: "caps",
        init: &["caps"],
        require: CAPS_REQUIRE,
        extra: &["priv=caps"],
        exits: &[("floor_partner", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "caps_smp2",
        init: &["caps"],
        smp: 2,
        require: CAPS_REQUIRE,
        extra: &["priv=caps"],
        exits: &[("floor_partner", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        // 100,000 bad-address calls: few report lines, a suppression note, and another
        // task's progress unhurt.
        name: "flood_smp2",
        init: &["flood"],
        smp: 2,
        require: &[
            "flood_spam#2| TEST PASS flood_spam: 100000 empty calls",
            "flood_spam#3| TEST PASS flood_spam: 100000 bad-address calls refused",
            "ok: another task's errors do not stall this one",
            "flood#1| TEST PASS flood",
        ],
        check: Some(flood_is_bounded),
        timeout: Duration::from_secs(120),
        ..BASE
    },
    IntegrationTest {
        name: "floor",
        init: &["floor_test"],
        require: FLOOR_REQUIRE,
        exits: &[("floor_partner", Exit::Killed)],
        extra: &["priv=floor_test"],
        ..BASE
    },
    IntegrationTest {
        name: "floor_smp2",
        init: &["floor_test"],
        smp: 2,
        require: FLOOR_REQUIRE,
        exits: &[("floor_partner", Exit::Killed)],
        extra: &["priv=floor_test"],
        ..BASE
    },
    // The virtio block disk driven from user space (`docs/drivers.md`).
    IntegrationTest {
        name: "blk_smp1",
        init: &["blk_test"],
        smp: 1,
        require: BLK_REQUIRE,
        exits: &[("blk", Exit::Killed), ("blk", Exit::Code(0))],
        extra: &["priv=blk_test"],
        timeout: Duration::from_secs(120),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        name: "blk_smp2",
        init: &["blk_test"],
        smp: 2,
        require: BLK_REQUIRE,
        exits: &[("blk", Exit::Killed), ("blk", Exit::Code(0))],
        extra: &["priv=blk_test"],
        timeout: Duration::from_secs(120),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // The disk keeps what a first boot wrote: that boot (`disk_prepare`) writes, this
        // one, on the same image, reads it back.
        name: "blk_persist",
        init: &["blk_persist"],
        disk_prepare: &["blk_persist"],
        require: &[
            "ok: the 64 KiB an earlier boot wrote read back with its checksum",
            "blk_persist#1| TEST PASS blk_persist: data persisted across a reboot",
        ],
        extra: &["priv=blk_persist"],
        timeout: Duration::from_secs(60),
        disk: true,
        ..BASE
    },
    // The file server: files as memory objects, programs started from files
    // (`docs/files.md`).
    IntegrationTest {
        name: "fs_smp1",
        init: &["fs_test"],
        smp: 1,
        require: FS_REQUIRE,
        exits: FS_EXITS,
        extra: &["priv=fs_test"],
        timeout: Duration::from_secs(300),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // Files survive a reboot: the first boot (`disk_prepare`) writes a file through a
        // mapping and syncs, this one, on the same image, reads it back.
        name: "fs_persist",
        init: &["fs_persist"],
        disk_prepare: &["fs_persist"],
        require: &[
            "ok: the file an earlier boot wrote through a mapping reads back, 8492 bytes",
            "fs_persist#1| TEST PASS fs_persist: files persisted across a reboot",
        ],
        exits: &[("fs", Exit::Code(0)), ("blk", Exit::Code(0))],
        extra: &["priv=fs_persist"],
        timeout: Duration::from_secs(60),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // Page replacement returns written pages of a file to the file server: a file three
        // times the pageable limit written and read back, then read from the disk.
        name: "fs_evict",
        init: &["fs_evict"],
        require: &[
            "ok: every page reads back what was written, the returned ones from the file (0 differ)",
            "ok: read through a new server, from the disk, every page is what was written (0 differ)",
            "ok: pages only read through a writable mapping are dropped, not returned",
            "ok: with user memory full, a file read through the server arrives intact (0 of 112 samples differ)",
            "fs: page 0xd000 of a file could not be supplied (NoMemory): the access fails",
            "ok: a page the server cannot supply under full memory is failed: a kernel copy from it returns Err(BadAddress)",
            "ok: once memory is back and the file opened again, the failed page is asked again and arrives intact",
            "a file of 768 pages reads intact (0 differ)",
            "ok: a round leaves the kernel's heap, objects, free frames, ports and names as the round before it did",
            "fs_evict#1| TEST PASS fs_evict",
        ],
        exits: &[
            ("fs", Exit::Code(0)),
            ("blk", Exit::Code(0)),
            // Ended through its task port, possibly before a line named it.
            ("paging_child", Exit::MaybeKilledOrCode(0)),
            ("?", Exit::MaybeKilledOrCode(0)),
        ],
        extra: &["priv=fs_evict", "pageable=256"],
        timeout: Duration::from_secs(180),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        name: "fs_evict_smp2",
        init: &["fs_evict"],
        smp: 2,
        require: &[
            "ok: every page reads back what was written, the returned ones from the file (0 differ)",
            "ok: read through a new server, from the disk, every page is what was written (0 differ)",
            "ok: pages only read through a writable mapping are dropped, not returned",
            "ok: with user memory full, a file read through the server arrives intact (0 of 112 samples differ)",
            "fs: page 0xd000 of a file could not be supplied (NoMemory): the access fails",
            "ok: a page the server cannot supply under full memory is failed: a kernel copy from it returns Err(BadAddress)",
            "ok: once memory is back and the file opened again, the failed page is asked again and arrives intact",
            "a file of 768 pages reads intact (0 differ)",
            "ok: a round leaves the kernel's heap, objects, free frames, ports and names as the round before it did",
            "fs_evict#1| TEST PASS fs_evict",
        ],
        exits: &[
            ("fs", Exit::Code(0)),
            ("blk", Exit::Code(0)),
            // Ended through its task port, possibly before a line named it.
            ("paging_child", Exit::MaybeKilledOrCode(0)),
            ("?", Exit::MaybeKilledOrCode(0)),
        ],
        extra: &["priv=fs_evict", "pageable=256"],
        timeout: Duration::from_secs(180),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // Sting's upcall pages under memory pressure: wired for the virtual processor's
        // life, they stay resident while the task's other pages go to the default pager,
        // and a Block/Unblock upcall then arrives intact.
        name: "vproc_paging_smp1",
        init: &["vproc_paging"],
        smp: 1,
        require: &[
            "ok: without a virtual processor, nothing of the task's heap is wired",
            "ok: with kernel upcalls on, the task has wired ranges (its upcall pages), wholly resident",
            "ok: meanwhile every wired range (the upcall stack's event pages, the mailbox) stayed wholly resident",
            "ok: the processor destroyed, its upcall pages are unwired",
            "ok: then a thread blocked in a kernel receive resumed with the peer's message",
            "ok: its Block upcall arrived and its Unblock came back",
            "ok: a third round leaves the kernel's heap, objects and free frames as the second did",
            "vproc_paging#1| TEST PASS vproc_paging",
        ],
        exits: &[
            ("blk", Exit::Code(0)),
            ("vproc_peer", Exit::Code(0)),
            // The default pager, ended through its task port (a line that names no task).
            ("?", Exit::MaybeKilledOrCode(0)),
        ],
        extra: &["priv=vproc_paging", "pageable=256"],
        timeout: Duration::from_secs(180),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // Sting's upcall pages under memory pressure: wired for the virtual processor's
        // life, they stay resident while the task's other pages go to the default pager,
        // and a Block/Unblock upcall then arrives intact.
        name: "vproc_paging_smp2",
        init: &["vproc_paging"],
        smp: 2,
        require: &[
            "ok: without a virtual processor, nothing of the task's heap is wired",
            "ok: with kernel upcalls on, the task has wired ranges (its upcall pages), wholly resident",
            "ok: meanwhile every wired range (the upcall stack's event pages, the mailbox) stayed wholly resident",
            "ok: the processor destroyed, its upcall pages are unwired",
            "ok: then a thread blocked in a kernel receive resumed with the peer's message",
            "ok: its Block upcall arrived and its Unblock came back",
            "ok: a third round leaves the kernel's heap, objects and free frames as the second did",
            "vproc_paging#1| TEST PASS vproc_paging",
        ],
        exits: &[
            ("blk", Exit::Code(0)),
            ("vproc_peer", Exit::Code(0)),
            // The default pager, ended through its task port (a line that names no task).
            ("?", Exit::MaybeKilledOrCode(0)),
        ],
        extra: &["priv=vproc_paging", "pageable=256"],
        timeout: Duration::from_secs(180),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        name: "fs_smp2",
        init: &["fs_test"],
        smp: 2,
        require: FS_REQUIRE,
        exits: FS_EXITS,
        extra: &["priv=fs_test"],
        timeout: Duration::from_secs(300),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // Sting's Checkpoint and Resume upcalls and SPIN's Strand events: a compute-bound
        // user-level thread preempted by the kernel while another of its virtual processor
        // runs, resumed with the right checksum; counting and vetoing Strand handlers,
        // keyed to their installer's task.
        name: "strand_smp1",
        init: &["strand"],
        smp: 1,
        timeout: Duration::from_secs(180),
        require: &["strand#1| TEST PASS strand"],
        ..BASE
    },
    IntegrationTest {
        // Sting's Checkpoint and Resume upcalls and SPIN's Strand events: a compute-bound
        // user-level thread preempted by the kernel while another of its virtual processor
        // runs, resumed with the right checksum; counting and vetoing Strand handlers,
        // keyed to their installer's task.
        name: "strand_smp2",
        init: &["strand"],
        smp: 2,
        timeout: Duration::from_secs(180),
        require: &["strand#1| TEST PASS strand"],
        ..BASE
    },
    IntegrationTest {
        // Sting's Checkpoint and Resume upcalls and SPIN's Strand events: a compute-bound
        // user-level thread preempted by the kernel while another of its virtual processor
        // runs, resumed with the right checksum; counting and vetoing Strand handlers,
        // keyed to their installer's task.
        name: "strand_smp4",
        init: &["strand"],
        smp: 4,
        timeout: Duration::from_secs(240),
        require: &["strand#1| TEST PASS strand"],
        ..BASE
    },
    IntegrationTest {
        // Sting: floating-point and vector isolation between user-level threads of one
        // virtual processor under Checkpoint preemption (XMM, x87 and control registers
        // each thread's own through every preemption, the preemptions counted).
        name: "sting_fp_smp1",
        init: &["sting_fp"],
        smp: 1,
        timeout: Duration::from_secs(180),
        require: &["sting_fp#1| TEST PASS sting_fp"],
        ..BASE
    },
    IntegrationTest {
        // Sting: floating-point and vector isolation between user-level threads of one
        // virtual processor under Checkpoint preemption (XMM, x87 and control registers
        // each thread's own through every preemption, the preemptions counted).
        name: "sting_fp_smp2",
        init: &["sting_fp"],
        smp: 2,
        timeout: Duration::from_secs(180),
        require: &["sting_fp#1| TEST PASS sting_fp"],
        ..BASE
    },
    IntegrationTest {
        // Sting: floating-point and vector isolation between user-level threads of one
        // virtual processor under Checkpoint preemption (XMM, x87 and control registers
        // each thread's own through every preemption, the preemptions counted).
        name: "sting_fp_smp4",
        init: &["sting_fp"],
        smp: 4,
        timeout: Duration::from_secs(240),
        require: &["sting_fp#1| TEST PASS sting_fp"],
        ..BASE
    },
    IntegrationTest {
        // Sting's exceptions as continuations: CPU faults of user-level threads (divide
        // error, breakpoint, bad access, invalid opcode) delivered to the faulting thread's
        // handler, which resumes, unwinds or ends it while the task goes on.
        name: "sting_exc_smp1",
        init: &["sting_exc"],
        smp: 1,
        timeout: Duration::from_secs(180),
        require: &["sting_exc#1| TEST PASS sting_exc"],
        ..BASE
    },
    IntegrationTest {
        // Sting's exceptions as continuations: CPU faults of user-level threads (divide
        // error, breakpoint, bad access, invalid opcode) delivered to the faulting thread's
        // handler, which resumes, unwinds or ends it while the task goes on.
        name: "sting_exc_smp2",
        init: &["sting_exc"],
        smp: 2,
        timeout: Duration::from_secs(180),
        require: &["sting_exc#1| TEST PASS sting_exc"],
        ..BASE
    },
    IntegrationTest {
        // Sting's exceptions as continuations: CPU faults of user-level threads (divide
        // error, breakpoint, bad access, invalid opcode) delivered to the faulting thread's
        // handler, which resumes, unwinds or ends it while the task goes on.
        name: "sting_exc_smp4",
        init: &["sting_exc"],
        smp: 4,
        timeout: Duration::from_secs(240),
        require: &["sting_exc#1| TEST PASS sting_exc"],
        ..BASE
    },
    IntegrationTest {
        // The Figure 4 applications at the paper's sizes (N-body's scaled) checked against
        // their sequential runs, and their wall time on one virtual processor and on one
        // per CPU (the speedup of the Sting paper's Figures 4 and 5; printed, not judged:
        // wall time under TCG on a shared host).
        name: "sting_speedup_smp1",
        init: &["sting_speedup"],
        smp: 1,
        timeout: Duration::from_secs(600),
        require: &["sting_speedup#1| TEST PASS sting_speedup"],
        ..BASE
    },
    IntegrationTest {
        // The Figure 4 applications at the paper's sizes (N-body's scaled) checked against
        // their sequential runs, and their wall time on one virtual processor and on one
        // per CPU (the speedup of the Sting paper's Figures 4 and 5; printed, not judged:
        // wall time under TCG on a shared host).
        name: "sting_speedup_smp2",
        init: &["sting_speedup"],
        smp: 2,
        timeout: Duration::from_secs(600),
        require: &["sting_speedup#1| TEST PASS sting_speedup"],
        ..BASE
    },
    IntegrationTest {
        // The same on four virtual CPUs: more than this machine's two host cores, so the
        // wall times show how the runtime behaves when its virtual processors' CPUs are
        // themselves time-shared (docs/benchmarks.md), not a speedup the host cannot give.
        name: "sting_speedup_smp4",
        init: &["sting_speedup"],
        smp: 4,
        timeout: Duration::from_secs(900),
        require: &["sting_speedup#1| TEST PASS sting_speedup"],
        ..BASE
    },
    // ---- Backing store and files ----
    IntegrationTest {
        // What the kernel stores into buffers through its direct map (a call delivered
        // into an IPC buffer, an exception into a handler's buffer) counts as a write of
        // the page: buffers in a file's pages survive a sync and eviction.
        name: "fs_kstore",
        init: &["fs_kstore"],
        require: FS_KSTORE_REQUIRE,
        exits: &[("fs", Exit::Code(0)), ("blk", Exit::Code(0))],
        extra: &["priv=fs_kstore", "pageable=256"],
        timeout: Duration::from_secs(180),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        name: "fs_kstore_smp2",
        init: &["fs_kstore"],
        smp: 2,
        require: FS_KSTORE_REQUIRE,
        exits: &[("fs", Exit::Code(0)), ("blk", Exit::Code(0))],
        extra: &["priv=fs_kstore", "pageable=256"],
        timeout: Duration::from_secs(180),
        disk: true,
        ..BASE
    },
    IntegrationTest {
        // Floating-point isolation between threads and tasks under preemption on four CPUs
        // too (Sting's tests ask for 1, 2 and 4): `fpu_smp1`'s program.
        name: "fpu_smp4",
        init: &["fpu"],
        smp: 4,
        timeout: Duration::from_secs(180),
        require: FPU_REQUIRE,
        exits: &[("fpu_nomem", Exit::KilledOrCode(0))],
        ..BASE
    },
    // ---- Hostile input: classes of bugs (docs/testing.md, "Hostile input") ----
    IntegrationTest {
        // A user thread that sets RFLAGS.AC does not switch SMAP off in the kernel: page
        // faults, timer interrupts and an exception taken with AC set.
        name: "smap_ac_smp1",
        init: &["smap_ac", "survivor"],
        require: SMAP_AC_REQUIRE,
        exits: &[("smap_ac", Exit::Killed)],
        ..BASE
    },
    IntegrationTest {
        name: "smap_ac_smp2",
        init: &["smap_ac", "survivor"],
        smp: 2,
        require: SMAP_AC_REQUIRE,
        exits: &[("smap_ac", Exit::Killed)],
        ..BASE
    },
];

/// What the `smap_ac` tests require: the program's checks, its kill reported, and another
/// task unharmed.
const SMAP_AC_REQUIRE: &[&str] = &[
    "ok: RFLAGS.AC kept across 16 page faults and timer interrupts",
    "(smap_ac) killed: invalid opcode",
    "survivor#2| TEST PASS survivor",
];

/// What the `waitroom` tests require.
const WAITROOM_REQUIRE: &[&str] = &[
    "ok: each of 256 waits on a different word blocked and timed out (256 timed out",
    "ok: waits on 256 different words leave the kernel's heap as it was (0 bytes more)",
    "waitroom#1| TEST PASS waitroom",
];

/// What the `fs_kstore` tests require.
const FS_KSTORE_REQUIRE: &[&str] = &[
    "ok: a sync while page 0 is still a buffer returns it (1 pages written back)",
    "ok: the worker's invalid opcode arrived in page 1 of the file, the handler's buffer",
    "ok: pages 0 and 1 were evicted: reading them again asked the server for 2 pages",
    "ok: after eviction, pages 0 and 1 hold what the kernel wrote there (call kept, exception kept)",
    "ok: read from the disk by a new server, the file holds what the kernel wrote in its buffers (0 and 0 bytes differ; 0 of the task's own pages differ)",
    "ok: a round leaves the kernel's heap, objects, free frames, ports and names as the round before it did",
    "fs_kstore#1| TEST PASS fs_kstore",
];

/// What the file tests must show (`fs_test`).
const FS_REQUIRE: &[&str] = &[
    "ok: every byte of the file read through its mapping is what xtask wrote (0 differ)",
    "ok: cold: each of the 14 pages was asked of the server once (14)",
    "ok: warm: mapped again, no page was asked of the server (0)",
    "ok: /bin lists the boot image's programs",
    "fs_child: started from a file, exiting with 7",
    "ok: the program started from /bin/fs_child ran and ended",
    "ok: sync wrote back the file's 4 pages by the pager's data return (4)",
    "ok: what was written through the mapping reads back from the disk through a new server",
    "ok: a request to the killed server fails with DeadName",
    "ok: a client touching a page of the dead server's file ended (by a pager fault)",
    "ok: the restarted server serves the disk again",
    "ok: a second round leaves the kernel heap, objects and free frames as the first did",
    "ok: a second file of 16 MiB on the 32 MiB file system: NoSpace",
    "ok: a broken partition table is refused: BadFormat, and the server ends",
    "ok: a broken file-system boot sector is refused: BadFormat, and the server ends",
    "fs: the disk is refused:",
    "ok: repaired, the disk is served again",
    "TEST PASS fs",
];

/// How the file tests' tasks end: the server stopped (0), refused a disk (1) or killed;
/// the program started from a file with its code (7) or by a pager fault.
const FS_EXITS: &[(&str, Exit)] = &[
    ("fs", Exit::Code(0)),
    ("fs", Exit::Code(1)),
    ("fs", Exit::Killed),
    ("fs_child", Exit::Code(7)),
    ("fs_child", Exit::Killed),
    ("blk", Exit::Code(0)),
    // The task whose program was refused, ended through its port before it had a name.
    ("?", Exit::Killed),
];

/// What the `blk` tests require: the driver finds the device, blocks of every size come
/// back as written, bad requests are refused, a driver killed mid-request fails its
/// client's request, its DMA frames stay quarantined until the restarted driver has reset
/// the device, the data survives, and nothing is left behind.
const BLK_REQUIRE: &[&str] = &[
    "ok: halted_ticks grows while this task sleeps",
    "blk: virtio block device at 00:",
    "ok: the driver reports 131072 sectors of 512 bytes",
    "ok: 512 bytes at sector 0 read back with the checksum written",
    "ok: 4096 bytes at sector 64 read back with the checksum written",
    "ok: 65536 bytes at sector 4096 read back with the checksum written",
    "ok: the device's MSI-X interrupt reached the driver as a notification",
    "ok: a sector never written reads as zeros",
    "ok: a read length 513 (not whole sectors): InvalidArgument",
    "ok: a read length 128 KiB: TooLarge",
    "ok: a read across the end of the disk: NoSpace",
    "ok: a read an unknown request: NotSupported",
    "ok: a write with 512 bytes of data for a length of 1024: BadFormat",
    "ok: the refused requests changed nothing on the disk",
    "ok: the driver killed mid-request: its client's request fails with DeadName",
    "ok: a request to the dead driver's port fails at once",
    "ok: the dead driver's DMA buffers are quarantined",
    "ok: the restarted driver reset the device and released the quarantine",
    "ok: after the restart every block written before reads back intact",
    "blk_peer: wrote and read back sector 30000 through the port it was given",
    "ok: a second client, handed the driver's port, wrote a block this task reads back",
    "ok: the quarantined pages were frames held until the release",
    "ok: the driver stopped and its",
    "ok: a second round leaves the kernel heap, objects and free frames as the first did",
    "blk_test#1| TEST PASS blk",
];

/// `trace_rpc`'s check: some request's flow ends in another task's thread with a stack
/// handoff, and a later flow from that thread's entry ends back in the requester; the
/// Chrome document of the trace parses as JSON.
fn check_trace_rpc(log: &str) -> Result<(), String> {
    let t = crate::trace::parse(log)?;
    let flows = crate::trace::flows(&t);
    let rpc = flows.iter().find_map(|&(i, j)| {
        let (req, got) = (t.records.get(i)?, t.records.get(j)?);
        let handoff = got.counts[0] > 0;
        let call =
            crate::trace::entry_name(req) == "ipc_msg" && got.task_out != req.task_in && handoff;
        // The reply: a later entry by the server's thread delivered back to the client.
        let reply = flows.iter().find(|&&(k, l)| {
            k > j
                && t.records
                    .get(k)
                    .is_some_and(|r| r.thread_in == got.thread_out)
                && t.records
                    .get(l)
                    .is_some_and(|r| r.thread_out == req.thread_in)
        });
        call.then_some(reply.is_some()).filter(|&r| r)
    });
    if rpc.is_none() {
        return Err(format!(
            "no request handed off to another task's thread and answered back in {} records \
             ({} flows)",
            t.records.len(),
            flows.len()
        ));
    }
    let text = serde_json::to_string(&crate::trace::chrome(&t)).map_err(|e| e.to_string())?;
    let back: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let events = back["traceEvents"].as_array().map_or(0, Vec::len);
    if events < t.records.len() {
        return Err(format!("{events} events for {} records", t.records.len()));
    }
    Ok(())
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn yield_storm_counts_catch_a_yield_that_never_switches() {
        let log = |switched: u64, cpus: u64, repeats: u64| {
            format!(
                "yield_storm#1| 18000 yields by 9 threads in 5 ms; the kernel counted \
                 {switched} yield blocks; {cpus} CPUs\nyield_storm#1| {repeats} repeats in \
                 4000 recorded yields\n"
            )
        };
        assert!(yield_storm_counts(&log(18000, 1, 0)).is_ok());
        assert!(yield_storm_counts(&log(17990, 4, 3)).is_ok());
        assert!(
            yield_storm_counts(&log(0, 4, 3998)).is_err(),
            "no yield switched"
        );
        assert!(
            yield_storm_counts(&log(8000, 2, 0)).is_err(),
            "fewer than half switched"
        );
        assert!(yield_storm_counts(&log(18000, 4, 500)).is_err(), "repeats");
    }

    #[test]
    fn names_are_unique_and_tests_are_complete() {
        let mut names: Vec<_> = ALL.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for t in ALL {
            assert!(
                !t.name.is_empty() && !t.init.is_empty() && t.smp >= 1,
                "{}",
                t.name
            );
            assert!(
                t.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{}",
                t.name
            );
        }
    }
}
