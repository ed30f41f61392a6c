//! Fault reports with file and line: the kernel's report of a user fault names the function
//! (from the program's symbol table, `kern::symbols`); the programs also keep their line
//! tables (`debug = "line-tables-only"` in the workspace's `Cargo.toml`), so on the host
//! `addr2line` turns the report's `rip` into the source line. [`annotate`] finds the kill
//! reports in a serial log and says where each fault was; `cargo xtask test` appends that
//! to the test's log (before it is judged), `cargo xtask run` prints it when QEMU exits.

use crate::build::USER;
use crate::deps;
use crate::workspace::command;

/// One kill report of a user fault: the task, its program and the faulting `rip`.
#[derive(Debug, PartialEq, Eq)]
pub struct Fault {
    /// The `[kernel] task N (NAME) killed: ...` line.
    pub task: u64,
    /// The program (boot module) the task runs.
    pub program: String,
    /// The instruction that faulted.
    pub rip: u64,
}

/// The kill reports of `log` that carry registers: a `killed:` line of the kernel whose
/// indented lines (the next three at most) hold a `rip=`.
pub fn faults(log: &str) -> Vec<Fault> {
    let lines: Vec<&str> = log.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim_end_matches('\r').strip_prefix("[kernel] task ") else {
            continue;
        };
        let Some((task, rest)) = rest.split_once(" (") else {
            continue;
        };
        let Some((program, what)) = rest.split_once(") ") else {
            continue;
        };
        if !what.starts_with("killed:") {
            continue;
        }
        // The report's own indented lines only (up to three).
        let rip = lines
            .iter()
            .skip(i + 1)
            .take(3)
            .take_while(|l| l.starts_with("  "))
            .find_map(|l| l.trim().strip_prefix("rip=0x"))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|r| u64::from_str_radix(r, 16).ok());
        if let (Ok(task), Some(rip)) = (task.parse(), rip) {
            out.push(Fault {
                task,
                program: program.to_string(),
                rip,
            });
        }
    }
    out
}

/// `addr2line`'s answer for `rip` in `program`: the innermost function and its
/// `file:line`, or `None` when it knows nothing (no such program, no line table).
fn where_in(addr2line: &std::path::Path, program: &str, rip: u64) -> Option<(String, String)> {
    let elf = USER.out_dir().join(program);
    if !elf.is_file() {
        return None;
    }
    let out = command(addr2line.to_str()?)
        .args(["-f", "-C", "-e"])
        .arg(&elf)
        .arg(format!("{rip:#x}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let (function, place) = (lines.next()?.trim(), lines.next()?.trim());
    if place.starts_with("??") {
        return None;
    }
    // The line without its discriminator, relative to the workspace where it is in it.
    let place = place.split(" (").next().unwrap_or(place);
    let root = crate::workspace::root();
    let place = place
        .strip_prefix(&format!("{}/", root.display()))
        .unwrap_or(place);
    Some((function.to_string(), place.to_string()))
}

/// Lines saying where each user fault of `log` was, `xtask: task 5 (fault_null) faulted in
/// fault_null::main at user/programs/src/bin/fault_null.rs:21`; empty when there is none
/// or `addr2line` is not there (it is installed by the commands that need it).
pub fn annotate(log: &str) -> String {
    let found = faults(log);
    if found.is_empty() {
        return String::new();
    }
    let Some(addr2line) = crate::workspace::find_in_path(deps::ADDR2LINE.program) else {
        return String::new();
    };
    let mut out = String::new();
    for f in found {
        if let Some((function, place)) = where_in(&addr2line, &f.program, f.rip) {
            out.push_str(&format!(
                "xtask: task {} ({}) faulted in {function} at {place}\n",
                f.task, f.program
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_kill_reports_with_registers() {
        let log = "\
[kernel] task 1 (fault_null) killed: page fault at address 0x0 (not present, read, user)\r
  rip=0x0000000000400035 rsp=0x00007fffffefffc0 rflags=0x206 cs=0x23 ss=0x1b error=0x4\r
  rax=0x13\r
[kernel] task 2 (survivor) exited with code 0
[kernel] task 3 (x) killed: shutdown
[kernel] task 4 (y) killed: general protection fault (vector 13)
  rip=0x401000 rsp=0x0
";
        assert_eq!(
            faults(log),
            [
                Fault {
                    task: 1,
                    program: "fault_null".into(),
                    rip: 0x400035
                },
                Fault {
                    task: 4,
                    program: "y".into(),
                    rip: 0x401000
                }
            ]
        );
        assert!(faults("[kernel] task 1 (a) killed: x\n  nothing\n").is_empty());
    }
}
