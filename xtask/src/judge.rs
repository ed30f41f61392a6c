//! Judging an integration test from QEMU's exit status and the serial log: the rules every
//! test shares, and helpers for the per-test checks in [`crate::tests`].
//!
//! Output conventions the rules rely on: kernel lines start with `[kernel] `; user debug
//! output is prefixed `<task name>#<task id>| ` on each line; tasks end with
//! `[kernel] task <id> (<name>) exited with code <n>` or
//! `[kernel] task <id> (<name>) killed: <reason>`; test programs print `TEST PASS <what>` or
//! `TEST FAIL <what>`; a user program that panics prints `panic: <message> at <place>`
//! (`baton_rt`'s panic handler) and exits with code 101.
//!
//! Beyond a clean shutdown, every task must end as the test declares ([`expect_exits`]):
//! with code 0 unless its `exits` entry says otherwise. A helper task that fails quietly
//! (exits non-zero, panics, is killed) fails the test even when the main program passed.

use std::collections::BTreeMap;

use crate::qemu::{self, EXIT_CLEAN, EXIT_KERNEL_FAILED};
use crate::tests::{Exit, IntegrationTest, Outcome};

/// The kernel's last line before a clean shutdown.
pub const ALL_FINISHED: &str = "[kernel] all tasks finished";
/// A user program's panic (after its `<name>#<id>| ` prefix).
pub const USER_PANIC: &str = "| panic: ";
/// Text that fails every test wherever it appears.
pub const FORBIDDEN: &[&str] = &[
    "PANIC",
    "KERNEL EXCEPTION",
    "TEST FAIL",
    USER_PANIC,
    KERNEL_LEAK,
];
/// What the kernel reports at shutdown for a port, thread or activation that outlived
/// every task (`kernel::report_leaks`).
pub const KERNEL_LEAK: &str = "KERNEL LEAK";

/// Judges one finished boot: `exit` is QEMU's exit status (`None` if killed by a signal) and
/// `log` the serial output. The error lists every problem found.
pub fn judge(test: &IntegrationTest, exit: Option<i32>, log: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    // A test of the kernel's own failure path expects the failure exit and its report
    // instead of a clean shutdown.
    let (want_exit, finished, forbidden): (i32, &[&str], &[&str]) = match test.outcome {
        Outcome::Clean => (EXIT_CLEAN, &[ALL_FINISHED], FORBIDDEN),
        Outcome::KernelFailure => (
            EXIT_KERNEL_FAILED,
            &[],
            &["TEST FAIL", USER_PANIC, ALL_FINISHED],
        ),
    };
    if exit != Some(want_exit) {
        problems.push(qemu::explain_exit(exit));
    }
    for bad in forbidden {
        if let Some((n, line)) = find_line(log, |l| l.contains(bad)) {
            problems.push(format!("line {n} contains `{bad}`: {}", line.trim()));
        }
    }
    let missing: Vec<String> = finished
        .iter()
        .copied()
        .chain(test.require.iter().copied())
        .filter(|needle| !log.contains(needle))
        .map(|needle| format!("`{needle}`"))
        .collect();
    if !missing.is_empty() {
        problems.push(format!("missing {}", missing.join(", ")));
    }
    if test.outcome == Outcome::Clean {
        if let Err(e) = expect_exits(log, test.exits) {
            problems.push(e);
        }
    }
    // The custom check runs on a log that has everything it looks for.
    if let (true, Some(check)) = (problems.is_empty(), test.check) {
        check(log)?;
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// One task as the kernel's lines describe it: its program's name and how it ended.
#[derive(Debug, Default)]
struct TaskSeen {
    name: Option<String>,
    ended: Option<Exit>,
}

/// The tasks the kernel reported, by id: from `[kernel] task <id> (<name>) started[ by
/// task <m>]`, `... exited with code <n>`, `... killed: <reason>` and `[kernel] task <id>
/// terminated through its task port by task <m>` (a name-less line: the name comes from
/// the task's other lines).
fn tasks_seen(log: &str) -> BTreeMap<u64, TaskSeen> {
    let mut tasks: BTreeMap<u64, TaskSeen> = BTreeMap::new();
    for line in log.lines() {
        let Some((_, rest)) = line.split_once("[kernel] task ") else {
            continue;
        };
        let Some((id, rest)) = rest.split_once(' ') else {
            continue;
        };
        let Ok(id) = id.parse::<u64>() else {
            continue;
        };
        if rest.starts_with("terminated through its task port") {
            tasks.entry(id).or_default().ended = Some(Exit::Killed);
            continue;
        }
        let Some((name, what)) = rest.strip_prefix('(').and_then(|r| r.split_once(") ")) else {
            continue;
        };
        let ended = if let Some(code) = what.strip_prefix("exited with code ") {
            code.trim().parse::<i64>().ok().map(Exit::Code)
        } else if what.starts_with("killed: ") {
            Some(Exit::Killed)
        } else if what.starts_with("started") {
            None
        } else {
            // Another report about a running task (a refused argument, say).
            continue;
        };
        let task = tasks.entry(id).or_default();
        task.name.get_or_insert_with(|| name.to_string());
        if ended.is_some() && task.ended.is_none() {
            task.ended = ended;
        }
    }
    tasks
}

/// Checks that every task the kernel started ended, each as `exits` allows for its
/// program's name (a name with no entry: `Exit::Code(0)`), and that every entry of `exits`
/// describes at least one task's end.
pub fn expect_exits(log: &str, exits: &[(&str, Exit)]) -> Result<(), String> {
    let mut problems = Vec::new();
    let tasks = tasks_seen(log);
    for (id, task) in &tasks {
        let name = task.name.as_deref().unwrap_or("?");
        let allowed: Vec<Exit> = exits
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|&(_, e)| e)
            .collect();
        let allowed = if allowed.is_empty() {
            vec![Exit::Code(0)]
        } else {
            allowed
        };
        match task.ended {
            None => problems.push(format!("task {id} ({name}) never ended")),
            Some(e) if !allowed.iter().any(|a| a.allows(e)) => problems.push(format!(
                "task {id} ({name}) ended {} (expected {})",
                describe(e),
                allowed
                    .iter()
                    .map(|&e| describe(e))
                    .collect::<Vec<_>>()
                    .join(" or ")
            )),
            Some(_) => {}
        }
    }
    for &(name, exit) in exits {
        if matches!(exit, Exit::MaybeKilledOrCode(_)) {
            continue;
        }
        let seen = tasks
            .values()
            // A task known only by id (ended through its port before any line named it)
            // is "?", as above.
            .any(|t| {
                t.name.as_deref().unwrap_or("?") == name && t.ended.is_some_and(|e| exit.allows(e))
            });
        if !seen {
            problems.push(format!("no task {name} {}", describe(exit)));
        }
    }
    match problems.len() {
        0 => Ok(()),
        n if n > PROBLEMS_SHOWN => Err(format!(
            "{}; and {} more",
            problems[..PROBLEMS_SHOWN].join("; "),
            n - PROBLEMS_SHOWN
        )),
        _ => Err(problems.join("; ")),
    }
}

/// How many task endings a failed [`expect_exits`] lists before it counts the rest.
const PROBLEMS_SHOWN: usize = 5;

/// How an ending reads in a judge's message.
fn describe(e: Exit) -> String {
    match e {
        Exit::Code(n) => format!("exited with code {n}"),
        Exit::Killed => "killed".to_string(),
        Exit::KilledOrCode(n) | Exit::MaybeKilledOrCode(n) => {
            format!("killed or exited with code {n}")
        }
    }
}

/// Judges a boot on the fault-injecting kernel (`cargo xtask test --fault-inject N`): the
/// programs may fail (an injected allocation failure is an error they see), but the kernel
/// must neither panic nor fault, and the boot must end — by a clean shutdown, or stopped
/// after a program's `TEST FAIL` line (`exit` is then `None`). A boot killed at its
/// timeout is judged by the caller (a hang).
pub fn survived(exit: Option<i32>, log: &str) -> Result<(), String> {
    for bad in ["PANIC", "KERNEL EXCEPTION"] {
        if let Some((n, line)) = find_line(log, |l| l.contains(bad)) {
            return Err(format!("line {n} contains `{bad}`: {}", line.trim()));
        }
    }
    match exit {
        None | Some(EXIT_CLEAN) => Ok(()),
        Some(_) => Err(qemu::explain_exit(exit)),
    }
}

/// The first line (numbered from 1) that satisfies `pred`.
fn find_line(log: &str, pred: impl Fn(&str) -> bool) -> Option<(usize, &str)> {
    log.lines()
        .enumerate()
        .find(|(_, l)| pred(l))
        .map(|(i, l)| (i + 1, l))
}

/// Checks that the first line containing `later` comes after the first line containing
/// `earlier`.
pub fn expect_order(log: &str, earlier: &str, later: &str) -> Result<(), String> {
    let line_of = |needle: &str| {
        find_line(log, |l| l.contains(needle))
            .map(|(n, _)| n)
            .ok_or_else(|| format!("missing `{needle}`"))
    };
    let (a, b) = (line_of(earlier)?, line_of(later)?);
    if b > a {
        Ok(())
    } else {
        Err(format!(
            "`{later}` (line {b}) should come after `{earlier}` (line {a})"
        ))
    }
}

/// Checks that lines starting with `a` and lines starting with `b` interleave: some `b` line
/// lies between the first and the last `a` line, and some `a` line between the first and the
/// last `b` line.
pub fn expect_interleaved(log: &str, a: &str, b: &str) -> Result<(), String> {
    let numbers = |prefix: &str| -> Vec<usize> {
        log.lines()
            .enumerate()
            .filter(|(_, l)| l.trim_start().starts_with(prefix))
            .map(|(i, _)| i + 1)
            .collect()
    };
    let (lines_a, lines_b) = (numbers(a), numbers(b));
    let within = |outer: &[usize], inner: &[usize]| match (outer.first(), outer.last()) {
        (Some(first), Some(last)) => inner.iter().any(|n| first < n && n < last),
        _ => false,
    };
    let span = |lines: &[usize]| match (lines.first(), lines.last()) {
        (Some(first), Some(last)) => format!("{} lines, {first} to {last}", lines.len()),
        _ => "no lines".to_string(),
    };
    if within(&lines_a, &lines_b) && within(&lines_b, &lines_a) {
        Ok(())
    } else {
        Err(format!(
            "`{a}` ({}) and `{b}` ({}) do not interleave",
            span(&lines_a),
            span(&lines_b)
        ))
    }
}

/// Checks that every task the log says was started (`[kernel] task <id> (<name>) started`,
/// by the kernel or by another task) ended exactly once: one line `[kernel] task <id>
/// (<name>) exited with code <n>`, `... killed: <reason>` or `[kernel] task <id> terminated
/// through its task port` for it, never two (a task released twice reports its end twice).
pub fn each_task_ends_once(log: &str) -> Result<(), String> {
    use std::collections::BTreeMap;
    let mut started: Vec<u64> = Vec::new();
    let mut ends: BTreeMap<u64, usize> = BTreeMap::new();
    for line in log.lines() {
        let Some(rest) = line.trim_start().strip_prefix("[kernel] task ") else {
            continue;
        };
        let Some((id, tail)) = rest.split_once(' ') else {
            continue;
        };
        let Ok(id) = id.parse::<u64>() else {
            continue;
        };
        // After the task's name: `(<name>) <what>`; a name holds no `) `.
        let what = tail.split_once(") ").map_or(tail, |(_, w)| w);
        if what.starts_with("started") {
            started.push(id);
        } else if what.starts_with("exited with code ")
            || what.starts_with("killed: ")
            || tail.starts_with("terminated through its task port")
        {
            *ends.entry(id).or_default() += 1;
        }
    }
    let mut problems = Vec::new();
    for id in &started {
        match ends.get(id).copied().unwrap_or(0) {
            1 => {}
            0 => problems.push(format!("task {id} never ended")),
            n => problems.push(format!("task {id} ended {n} times")),
        }
    }
    for (id, n) in &ends {
        if *n > 1 && !started.contains(id) {
            problems.push(format!("task {id} ended {n} times"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn survival_under_fault_injection() {
        let ok = "[kernel] task 1 (x) started\nx#1| TEST FAIL x: out of memory\n";
        assert!(survived(None, ok).is_ok(), "a program's failure is allowed");
        assert!(survived(Some(EXIT_CLEAN), ok).is_ok());
        let panic = "[kernel] PANIC: panicked at alloc.rs\n";
        assert!(survived(Some(EXIT_KERNEL_FAILED), panic)
            .unwrap_err()
            .contains("PANIC"));
        assert!(survived(Some(EXIT_KERNEL_FAILED), "").is_err());
    }

    const T: IntegrationTest = IntegrationTest {
        name: "t",
        init: &["x"],
        smp: 1,
        timeout: Duration::from_secs(1),
        require: &["x| hi"],
        check: Some(|log| expect_order(log, "first", "second")),
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

    #[test]
    fn common_rules() {
        let good = "first\nx| hi\nsecond\n[kernel] all tasks finished\n";
        assert_eq!(judge(&T, Some(33), good), Ok(()));
        assert!(judge(&T, Some(35), good)
            .unwrap_err()
            .contains("kernel panic"));
        assert!(judge(&T, None, good).is_err());
        let failed = "first\nx| hi\nx| TEST FAIL y\nsecond\n[kernel] all tasks finished\n";
        assert!(judge(&T, Some(33), failed)
            .unwrap_err()
            .contains("line 3 contains `TEST FAIL`"));
        let unfinished = "first\nx| hi\nsecond\n";
        assert!(judge(&T, Some(33), unfinished)
            .unwrap_err()
            .contains(ALL_FINISHED));
        let missing = "first\nsecond\n[kernel] all tasks finished\n";
        assert_eq!(judge(&T, Some(33), missing).unwrap_err(), "missing `x| hi`");
        let misordered = "second\nx| hi\nfirst\n[kernel] all tasks finished\n";
        assert!(judge(&T, Some(33), misordered)
            .unwrap_err()
            .contains("should come after"));
    }

    #[test]
    fn user_panics_and_exits() {
        let start = "[kernel] task 1 (x) started\n[kernel] task 2 (h) started by task 1\n";
        let good = format!(
            "{start}first\nx| hi\nsecond\n[kernel] task 2 (h) exited with code 0\n\
             [kernel] task 1 (x) exited with code 0\n[kernel] all tasks finished\n"
        );
        assert_eq!(judge(&T, Some(33), &good), Ok(()));
        // A helper's panic fails the test, as does its non-zero exit.
        let panicked = good.replace("x| hi\n", "x| hi\nh#2| panic: oops at a.rs:1:2\n");
        assert!(judge(&T, Some(33), &panicked)
            .unwrap_err()
            .contains("contains `| panic: `"));
        let failed = good.replace("(h) exited with code 0", "(h) exited with code 1");
        assert_eq!(
            judge(&T, Some(33), &failed).unwrap_err(),
            "task 2 (h) ended exited with code 1 (expected exited with code 0)"
        );
        let killed = good.replace("(h) exited with code 0", "(h) killed: page fault");
        assert!(judge(&T, Some(33), &killed)
            .unwrap_err()
            .contains("ended killed"));
        let silent = good.replace("[kernel] task 2 (h) exited with code 0\n", "");
        assert_eq!(
            judge(&T, Some(33), &silent).unwrap_err(),
            "task 2 (h) never ended"
        );
        // Declared endings are allowed, and must each happen.
        let t = IntegrationTest {
            exits: &[("h", Exit::Killed), ("h", Exit::Code(3))],
            ..T
        };
        assert_eq!(
            judge(&t, Some(33), &killed).unwrap_err(),
            "no task h exited with code 3"
        );
        assert_eq!(
            judge(&t, Some(33), &good).unwrap_err(),
            "task 2 (h) ended exited with code 0 (expected killed or exited with code 3); \
             no task h killed; no task h exited with code 3"
        );
        let terminated = good.replace(
            "[kernel] task 2 (h) exited with code 0",
            "[kernel] task 2 terminated through its task port by task 1",
        );
        let t = IntegrationTest {
            exits: &[("h", Exit::Killed)],
            ..T
        };
        assert_eq!(judge(&t, Some(33), &terminated), Ok(()));
        assert_eq!(judge(&t, Some(33), &killed), Ok(()));
        // An entry for a task that may not appear: not required, still the rule when one
        // does.
        let t = IntegrationTest {
            exits: &[("h", Exit::Killed), ("g", Exit::MaybeKilledOrCode(0))],
            ..T
        };
        assert_eq!(judge(&t, Some(33), &killed), Ok(()));
        let with_g = |code: u8| {
            killed.replace(
                "[kernel] task 1 (x) exited",
                &format!(
                    "[kernel] task 3 (g) started by task 1\n\
                     [kernel] task 3 (g) exited with code {code}\n[kernel] task 1 (x) exited"
                ),
            )
        };
        assert_eq!(judge(&t, Some(33), &with_g(0)), Ok(()));
        assert_eq!(
            judge(&t, Some(33), &with_g(1)).unwrap_err(),
            "task 3 (g) ended exited with code 1 (expected killed or exited with code 0)"
        );
    }

    #[test]
    fn kernel_failure_outcome() {
        let t = IntegrationTest {
            outcome: Outcome::KernelFailure,
            require: &["KERNEL EXCEPTION"],
            check: None,
            ..T
        };
        let crashed = "boot\n[kernel] KERNEL EXCEPTION: page fault\n";
        assert_eq!(judge(&t, Some(EXIT_KERNEL_FAILED), crashed), Ok(()));
        assert!(judge(&t, Some(EXIT_CLEAN), crashed).is_err());
        assert!(judge(&t, Some(EXIT_KERNEL_FAILED), "boot\n").is_err());
    }

    #[test]
    fn interleaving() {
        let log = "a| progress 1\nb| progress 1\na| progress 2\nb| progress 2\n";
        assert_eq!(
            expect_interleaved(log, "a| progress", "b| progress"),
            Ok(())
        );
        let serial = "a| progress 1\na| progress 2\nb| progress 1\nb| progress 2\n";
        assert!(expect_interleaved(serial, "a| progress", "b| progress").is_err());
        let nested = "a| progress 1\nb| progress 1\nb| progress 2\na| progress 2\n";
        assert!(expect_interleaved(nested, "a| progress", "b| progress").is_err());
        assert!(expect_interleaved("", "a| progress", "b| progress").is_err());
    }

    #[test]
    fn task_ends() {
        let log = "[kernel] task 1 (a) started\n[kernel] task 2 (b) started by task 1\n\
                   [kernel] task 3 (c) started by task 1\n\
                   [kernel] task 2 (b) exited with code 3\n\
                   [kernel] task 3 (c) killed: page fault\n[kernel] task 1 (a) exited with code 0\n";
        assert_eq!(each_task_ends_once(log), Ok(()));
        let twice = format!("{log}[kernel] task 2 (b) exited with code 3\n");
        assert_eq!(
            each_task_ends_once(&twice).unwrap_err(),
            "task 2 ended 2 times"
        );
        let never = "[kernel] task 1 (a) started\n[kernel] task 1 (a) ActCreate: bad\n";
        assert_eq!(
            each_task_ends_once(never).unwrap_err(),
            "task 1 never ended"
        );
        let port = "[kernel] task 4 (k) started by task 1\n\
                    [kernel] task 4 terminated through its task port by task 1\n";
        assert_eq!(each_task_ends_once(port), Ok(()));
    }
}
