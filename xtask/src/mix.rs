//! The instruction mix of seed 001's Table 2 (Ford & Lepreau, section 8.3): which traced
//! instructions are loads/stores and which are branches, decided from the instruction's
//! text as `objdump -d --no-show-raw-insn` prints it (AT&T syntax). Pure and host-tested;
//! `cargo xtask profile` runs objdump once on the kernel ELF ([`parse_objdump`]) and
//! classifies every traced instruction ([`classify`]).
//!
//! The paper's PA-RISC is a load/store machine: a load/store is an instruction. On x86-64
//! a load/store is an instruction that reads or writes data memory, counted once whatever
//! it does (`add %rax,(%rdx)` reads and writes; `push` writes the stack).

use std::collections::BTreeMap;

/// What one instruction is, for Table 2. Both can hold (`call`, `ret`, `iretq`, `jmp
/// *0x8(%rax)`); an instruction can be neither (`add %rax,%rbx`, `syscall` is a branch only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mix {
    /// It reads or writes data memory (a load/store).
    pub memory: bool,
    /// It transfers control (a branch).
    pub branch: bool,
}

/// Prefixes objdump prints in front of the mnemonic.
const PREFIXES: &[&str] = &[
    "lock", "rep", "repz", "repe", "repnz", "repne", "data16", "data32", "addr32", "cs", "ds",
    "es", "ss", "fs", "gs", "notrack", "bnd", "xacquire", "xrelease",
];

/// Control transfers besides the jumps (every x86 mnemonic that starts with `j` is a jump:
/// `jmp` and the conditional `jcc`).
const BRANCHES: &[&str] = &[
    "call", "callq", "lcall", "ret", "retq", "lret", "lretq", "iret", "iretl", "iretq", "iretw",
    "syscall", "sysret", "sysretl", "sysretq", "sysenter", "sysexit", "loop", "loope", "loopne",
    "loopz", "loopnz",
];

/// Instructions that touch the stack (or read the interrupt frame) whatever their operands.
const STACK: &[&str] = &[
    "push", "pushq", "pushw", "pushl", "pushf", "pushfq", "pushfw", "pop", "popq", "popw", "popl",
    "popf", "popfq", "popfw", "call", "callq", "lcall", "ret", "retq", "lret", "lretq", "iret",
    "iretl", "iretq", "iretw", "leave", "leaveq", "enter", "enterq",
];

/// String instructions: they read `(%rsi)` and/or write `(%rdi)`.
const STRINGS: &[&str] = &["movs", "stos", "lods", "cmps", "scas", "ins", "outs"];

/// Instructions whose parenthesized operand is an address, not an access: `lea` computes
/// it, `nop` ignores it, `prefetch` and `invlpg` are hints to the caches and the TLB,
/// `in`/`out` name a port (`(%dx)`).
const NO_ACCESS: &[&str] = &["lea", "nop", "prefetch", "invlpg", "in", "out"];

/// Whether mnemonic `m` is `base` or `base` with an operand-size suffix (`b`, `w`, `l`,
/// `q`).
fn is_sized(m: &str, base: &str) -> bool {
    m.strip_prefix(base)
        .is_some_and(|rest| matches!(rest, "" | "b" | "w" | "l" | "q"))
}

/// Classifies one instruction from objdump's AT&T text (`mov 0x8(%rdi),%rax`, `lock cmpxchg
/// %rcx,(%rdx)`, `jne ffffffff80101234 <foo+0x12>`, with or without a `# ...` comment).
///
/// **Load/store** (memory) when any of:
/// - it touches the stack: `push`, `pop`, `call`, `ret`, `iretq` (it pops the interrupt
///   frame), `leave`, `enter`;
/// - it is a string instruction (`movs`, `stos`, `lods`, `cmps`, `scas`, `ins`, `outs`,
///   with or without a size suffix; not `movsbl`/`movslq`, which sign-extend);
/// - it is `lock`-prefixed (a locked operation always has a memory destination);
/// - an operand is in memory: it has a parenthesized address (`0x8(%rdi)`,
///   `0x10(%rip)`), a segment override (`%gs:0x10`), or, outside branches, a bare absolute
///   address (`movabs 0xffff8000...,%eax`);
///
/// except `lea`, `nop*` (`nopw 0x0(%rax,%rax,1)`), `prefetch*`, `invlpg`, `in` and `out`,
/// which never are. `syscall`, `sysretq`, `swapgs`, `rdmsr`/`wrmsr`, moves to and from
/// control registers do not access data memory.
///
/// **Branch** (a control transfer) when the mnemonic is a jump (`jmp`, every `jcc`, which
/// all start with `j`), `call`, `ret`, `iretq`, `syscall`, `sysretq`, `sysenter`,
/// `sysexit` or `loop*`. A direct branch's target (`jne ffffffff80101234 <f>`) is not a
/// memory operand; an indirect one through memory (`jmp *0x8(%rax)`) is a load too.
pub fn classify(text: &str) -> Mix {
    let text = text.split('#').next().unwrap_or("");
    let text = strip_symbols(text);
    let mut words = text.split_whitespace();
    let mut locked = false;
    let mnemonic = loop {
        match words.next() {
            Some(w) if PREFIXES.contains(&w) || w.starts_with("rex") => locked |= w == "lock",
            Some(w) => break w,
            None => return Mix::default(),
        }
    };
    let operands: String = words.collect();
    let branch = mnemonic.starts_with('j') || BRANCHES.contains(&mnemonic);
    let memory = if NO_ACCESS.iter().any(|p| {
        mnemonic.starts_with(p) && (*p == "nop" || *p == "prefetch" || is_sized(mnemonic, p))
    }) {
        false
    } else {
        STACK.contains(&mnemonic)
            || STRINGS.iter().any(|s| is_sized(mnemonic, s))
            || locked
            || split_operands(&operands)
                .iter()
                .any(|op| is_memory_operand(op, branch))
    };
    Mix { memory, branch }
}

/// `text` without objdump's `<symbol+offset>` annotations.
fn strip_symbols(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The operands, split at the commas outside parentheses.
fn split_operands(operands: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in operands.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&operands[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < operands.len() {
        out.push(&operands[start..]);
    }
    out
}

/// Whether one AT&T operand is in memory. `$imm` is an immediate, `%reg` a register (and
/// `%st(1)` an x87 register), `disp(base,index,scale)` and `%seg:disp` are memory; a bare
/// number is an absolute address, in memory unless it is a branch's target.
fn is_memory_operand(op: &str, branch: bool) -> bool {
    let op = op.trim().trim_start_matches('*');
    if op.is_empty() || op.starts_with('$') || op.starts_with("%st") {
        return false;
    }
    if op.contains('(') {
        return true;
    }
    if let Some(reg) = op.strip_prefix('%') {
        // `%gs:0x10` is memory; `%rax` is not.
        return reg.contains(':');
    }
    !branch
}

/// Parses `objdump -d --no-show-raw-insn` output: each instruction line `  <hex address>:\t<text>`
/// gives the instruction at that address; everything else (headers, `<symbol>:` lines,
/// blank lines) is skipped.
pub fn parse_objdump(text: &str) -> BTreeMap<u64, String> {
    let mut insns = BTreeMap::new();
    for line in text.lines() {
        let Some((addr, insn)) = line.split_once(":\t") else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr.trim(), 16) else {
            continue;
        };
        let insn = insn.trim();
        if !insn.is_empty() {
            insns.insert(addr, insn.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    insns
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    fn mix(text: &str) -> (bool, bool) {
        let m = classify(text);
        (m.memory, m.branch)
    }

    const NEITHER: (bool, bool) = (false, false);
    const MEMORY: (bool, bool) = (true, false);
    const BRANCH: (bool, bool) = (false, true);
    const BOTH: (bool, bool) = (true, true);

    #[test]
    fn memory_operands() {
        assert_eq!(mix("mov    0x8(%rdi),%rax"), MEMORY);
        assert_eq!(mix("mov    %rax,(%rdx)"), MEMORY);
        assert_eq!(mix("movq   $0x0,0x10(%rsp)"), MEMORY);
        assert_eq!(mix("cmpb   $0x0,0x1a(%rbx,%rcx,8)"), MEMORY);
        assert_eq!(
            mix("mov    0x12345(%rip),%rax        # ffffffff80200000 <FOO>"),
            MEMORY
        );
        assert_eq!(mix("mov    %gs:0x10,%rax"), MEMORY);
        assert_eq!(mix("movabs 0xffff800000001000,%eax"), MEMORY);
        assert_eq!(mix("incq   (%rax)"), MEMORY);
        assert_eq!(mix("add    %rax,0x8(,%rcx,8)"), MEMORY);
        assert_eq!(mix("cmovne 0x8(%rdi),%rax"), MEMORY);
        assert_eq!(mix("xchg   %rax,(%rdi)"), MEMORY);
    }

    #[test]
    fn registers_and_immediates() {
        assert_eq!(mix("mov    %rsp,%rbp"), NEITHER);
        assert_eq!(mix("movabs $0xffff800000000000,%rax"), NEITHER);
        assert_eq!(mix("cmp    $0x200,%r9d"), NEITHER);
        assert_eq!(mix("imul   $0x38,%rcx,%rcx"), NEITHER);
        assert_eq!(mix("xor    %eax,%eax"), NEITHER);
        assert_eq!(mix("movsbl %al,%eax"), NEITHER);
        assert_eq!(mix("movslq %eax,%rcx"), NEITHER);
        assert_eq!(mix("popcnt %rax,%rcx"), NEITHER);
        assert_eq!(mix("setne  %al"), NEITHER);
        assert_eq!(mix("mov    %rax,%cr3"), NEITHER);
        assert_eq!(mix("swapgs"), NEITHER);
        assert_eq!(mix("wrmsr"), NEITHER);
        assert_eq!(mix("rdtsc"), NEITHER);
        assert_eq!(mix("fld    %st(1)"), NEITHER);
        assert_eq!(mix(""), NEITHER);
    }

    #[test]
    fn addresses_that_are_not_accesses() {
        assert_eq!(mix("lea    0x8(%rdi),%rax"), NEITHER);
        assert_eq!(
            mix("lea    0x10(%rip),%rax        # ffffffff80200000 <X>"),
            NEITHER
        );
        assert_eq!(mix("nopw   0x0(%rax,%rax,1)"), NEITHER);
        assert_eq!(mix("data16 cs nopw 0x0(%rax,%rax,1)"), NEITHER);
        assert_eq!(mix("nopl   0x0(%rax)"), NEITHER);
        assert_eq!(mix("nop"), NEITHER);
        assert_eq!(mix("prefetcht0 (%rax)"), NEITHER);
        assert_eq!(mix("invlpg (%rax)"), NEITHER);
        assert_eq!(mix("out    %al,(%dx)"), NEITHER);
        assert_eq!(mix("in     (%dx),%al"), NEITHER);
    }

    #[test]
    fn stack_strings_and_locks() {
        assert_eq!(mix("push   %rbp"), MEMORY);
        assert_eq!(mix("pop    %r15"), MEMORY);
        assert_eq!(mix("pushq  0x8(%rax)"), MEMORY);
        assert_eq!(mix("pushf"), MEMORY);
        assert_eq!(mix("leave"), MEMORY);
        assert_eq!(mix("rep stos %rax,%es:(%rdi)"), MEMORY);
        assert_eq!(mix("rep movsb %ds:(%rsi),%es:(%rdi)"), MEMORY);
        assert_eq!(mix("movsq"), MEMORY);
        assert_eq!(mix("lock cmpxchg %rcx,(%rdx)"), MEMORY);
        assert_eq!(mix("lock incq 0x8(%rax)"), MEMORY);
    }

    #[test]
    fn branches() {
        assert_eq!(mix("jne    ffffffff80101234 <foo+0x12>"), BRANCH);
        assert_eq!(mix("jmp    ffffffff80101234 <foo>"), BRANCH);
        assert_eq!(mix("jae    1000 <x>"), BRANCH);
        assert_eq!(mix("jmp    *%rax"), BRANCH);
        assert_eq!(mix("notrack jmp *%rax"), BRANCH);
        assert_eq!(mix("jmp    *0x8(%rax)"), BOTH);
        assert_eq!(
            mix("call   ffffffff80101234 <kern::slab::Slab<T>::get>"),
            BOTH
        );
        assert_eq!(mix("call   *%rax"), BOTH);
        assert_eq!(mix("ret"), BOTH);
        assert_eq!(mix("iretq"), BOTH);
        assert_eq!(mix("syscall"), BRANCH);
        assert_eq!(mix("sysretq"), BRANCH);
    }

    #[test]
    fn parses_objdump() {
        let text = "\n\
target/kernel/baton-kernel:     file format elf64-x86-64\n\
\n\
Disassembly of section .text:\n\
\n\
ffffffff80100000 <syscall_entry>:\n\
ffffffff80100000:\tswapgs\n\
ffffffff80100003:\tmov    %rsp,%gs:0x10\n\
ffffffff8010000c:\tjne    ffffffff80100000 <syscall_entry>\n\
\t...\n";
        let insns = parse_objdump(text);
        assert_eq!(insns.len(), 3);
        assert_eq!(insns[&0xffffffff80100000], "swapgs");
        assert_eq!(insns[&0xffffffff80100003], "mov %rsp,%gs:0x10");
        assert_eq!(
            insns[&0xffffffff8010000c],
            "jne ffffffff80100000 <syscall_entry>"
        );
        assert_eq!(mix(&insns[&0xffffffff80100003]), MEMORY);
    }
}
