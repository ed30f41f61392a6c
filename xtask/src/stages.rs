//! The pure half of `cargo xtask profile`: reading `addr2line`'s inline chains, sorting each
//! traced instruction into a stage of seed 001's Table 1 ([`RULES`]), counting each stage's
//! loads/stores and branches (Table 2, by [`crate::mix::classify`]), and rendering
//! `results/profile.md`. Everything here is a function of its inputs and host-tested; the
//! tracing itself (QEMU, gdb) is in [`crate::profile`].

use crate::mix::Mix;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One frame of an instruction's inline chain, as `addr2line -f -i -C` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The demangled function name (`??` when unknown).
    pub function: String,
    /// The source file (`??` when unknown), without the line.
    pub file: String,
    /// The source line (0 when unknown).
    pub line: u32,
}

/// Parses the output of `addr2line -a -f -i -C -e <elf> <addr>...`: for each address, a
/// line `0x<address>`, then a function line and a `file:line` line per frame of the inline
/// chain, innermost first. Returns each address's chain.
pub fn parse_addr2line(text: &str) -> Result<BTreeMap<u64, Vec<Frame>>, String> {
    let mut chains = BTreeMap::new();
    let mut current: Option<(u64, Vec<Frame>)> = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        if let Some(hex) = line.strip_prefix("0x") {
            let addr = u64::from_str_radix(hex.trim(), 16)
                .map_err(|_| format!("addr2line: bad address line `{line}`"))?;
            if let Some((a, chain)) = current.replace((addr, Vec::new())) {
                chains.insert(a, chain);
            }
            continue;
        }
        let Some((_, chain)) = current.as_mut() else {
            return Err(format!("addr2line: `{line}` before any address"));
        };
        let location = lines
            .next()
            .ok_or_else(|| format!("addr2line: function `{line}` without a location"))?;
        chain.push(frame(line, location));
    }
    if let Some((a, chain)) = current {
        chains.insert(a, chain);
    }
    Ok(chains)
}

/// A frame from a function line and a location line (`file:line`, `file:line
/// (discriminator n)`, `file:?` or `??:0`).
fn frame(function: &str, location: &str) -> Frame {
    let location = location.split(" (discriminator").next().unwrap_or(location);
    let (file, line) = match location.rsplit_once(':') {
        Some((file, line)) => (file, line.trim().parse().unwrap_or(0)),
        None => (location, 0),
    };
    Frame {
        function: function.trim().to_string(),
        file: file.to_string(),
        line,
    }
}

/// The stages of seed 001's Table 1 (the null RPC kernel path, section 8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Kernel entry and exit on the client's side: the client's call coming in, the exit
    /// back into the client.
    EntryClient,
    /// Kernel entry and exit on the server's side: the exit into the server, the server's
    /// reply (or return) coming in.
    EntryServer,
    /// Port translation: names to ports, reply rights, the objects a call reaches.
    Lookup,
    /// Thread (switching) or activation (migrating) switch.
    Switch,
    /// Message copy.
    Copy,
    /// Matched by no rule.
    Other,
}

impl Stage {
    /// Every stage, in Table 1's order.
    pub const ALL: [Stage; 6] = [
        Stage::EntryClient,
        Stage::EntryServer,
        Stage::Lookup,
        Stage::Switch,
        Stage::Copy,
        Stage::Other,
    ];

    /// The row's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Stage::EntryClient => "Kernel entry/exit: client side",
            Stage::EntryServer => "Kernel entry/exit: server side",
            Stage::Lookup => "Port translation / capability lookup",
            Stage::Switch => "Thread/activation switch",
            Stage::Copy => "Message copy",
            Stage::Other => "Other (no rule)",
        }
    }

    /// The stage's short name (the per-function lists, the listings).
    pub fn short(self) -> &'static str {
        match self {
            Stage::EntryClient => "entry/exit (client)",
            Stage::EntryServer => "entry/exit (server)",
            Stage::Lookup => "lookup",
            Stage::Switch => "switch",
            Stage::Copy => "copy",
            Stage::Other => "other",
        }
    }

    /// The paper's instruction mix for the stage: [switching, migrating] ([001] Table 2;
    /// its "all" column is Table 1's instruction count).
    pub fn paper_mix(self) -> Option<[Counts; 2]> {
        let c = Counts::new;
        match self {
            Stage::EntryClient => Some([c(146, 66, 12), c(99, 62, 10)]),
            Stage::EntryServer => Some([c(146, 66, 12), c(33, 8, 3)]),
            Stage::Lookup => Some([c(206, 90, 45), c(12, 8, 1)]),
            Stage::Switch => Some([c(408, 174, 78), c(30, 22, 3)]),
            Stage::Copy => Some([c(222, 86, 46), c(39, 20, 5)]),
            Stage::Other => None,
        }
    }

    /// The paper's figures for the stage: (switching, migrating) instructions ([001] Table 1).
    pub fn paper(self) -> Option<(u64, u64)> {
        match self {
            Stage::EntryClient => Some((146, 99)),
            Stage::EntryServer => Some((146, 33)),
            Stage::Lookup => Some((206, 12)),
            Stage::Switch => Some((408, 30)),
            Stage::Copy => Some((222, 39)),
            Stage::Other => None,
        }
    }
}

/// What a rule gives a frame: a stage, or the kernel's entry or exit (whose side depends on
/// the pass: see [`Pass`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// The way in: the system-call entry, the lock, the dispatch.
    Entry,
    /// The way out: the unlock, the register restore, `sysretq`.
    Exit,
    /// One of the other stages.
    Stage(Stage),
}

/// What a rule matches in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    /// The function, or anything inside it: the demangled name is this path, or starts with
    /// it followed by `::` or `<` (`kern::ipc::space` matches `kern::ipc::space::Space::lookup`).
    Function(&'static str),
    /// The source file of the frame's line ends with this path.
    File(&'static str),
}

impl Match {
    fn matches(self, frame: &Frame) -> bool {
        match self {
            Match::Function(path) => {
                let name = base_name(&frame.function);
                name.strip_prefix(path).is_some_and(|rest| {
                    rest.is_empty() || rest.starts_with("::") || rest.starts_with('<')
                })
            }
            Match::File(suffix) => frame.file.ends_with(suffix),
        }
    }
}

/// A demangled name without its generic arguments (`kern::ipc::Ipc<T>::port_mut` becomes
/// `kern::ipc::Ipc::port_mut`): a `<...>` right after a name is dropped, a `<...>` that
/// starts a path segment (`<impl X>`, `<T as Trait>`) is kept.
pub fn base_name(function: &str) -> String {
    let mut out = String::with_capacity(function.len());
    let mut depth = 0usize;
    for c in function.chars() {
        if depth > 0 {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                _ => {}
            }
        } else if c == '<' && out.ends_with(|p: char| p.is_alphanumeric() || p == '_') {
            depth = 1;
        } else {
            out.push(c);
        }
    }
    out
}

/// One classification rule.
pub struct Rule {
    /// What it matches.
    pub what: Match,
    /// What a matched frame is.
    pub class: Class,
}

const fn rule(what: Match, class: Class) -> Rule {
    Rule { what, class }
}

use Class::{Entry, Exit};
use Match::{File, Function};
const LOOKUP: Class = Class::Stage(Stage::Lookup);
const SWITCH: Class = Class::Stage(Stage::Switch);
const COPY: Class = Class::Stage(Stage::Copy);

/// The classification rules. An instruction's inline chain is walked from the innermost
/// frame outwards; at each frame the rules are tried in this order; the first rule that
/// matches a frame decides. Frames that no rule matches (`core::ptr::read`, `Option::map`,
/// `Vec::len`, ...) are skipped, so a library helper counts for whatever inlined it. An
/// instruction none of whose frames match is [`Stage::Other`].
///
/// Kernel entry and exit (the paper's "kernel entry/exit" rows) are the assembly entry and
/// exit, the big kernel lock, the dispatch and `on_syscall`'s own lines; the entry of a
/// pass belongs to the side that made the system call, the exit to the side it returns to.
pub const RULES: &[Rule] = &[
    // Message copy: the IPC-buffer header reads and writes, in-line data, memcpy.
    rule(
        Function("baton_kernel::arch::x86_64::paging::read_header"),
        COPY,
    ),
    rule(
        Function("baton_kernel::arch::x86_64::paging::write_header"),
        COPY,
    ),
    rule(
        Function("baton_kernel::arch::x86_64::paging::copy_phys"),
        COPY,
    ),
    rule(Function("baton_kernel::activation::copy"), COPY),
    rule(Function("memcpy"), COPY),
    rule(Function("memmove"), COPY),
    rule(Function("compiler_builtins::mem"), COPY),
    // Port translation and capability lookup: name spaces, the fast path's plan and commit
    // (name to port, reply right made and consumed), the port, task and thread tables.
    rule(Function("kern::ipc::space"), LOOKUP),
    rule(File("crates/kern/src/ipc/space.rs"), LOOKUP),
    rule(Function("kern::ipc::fast"), LOOKUP),
    rule(File("crates/kern/src/ipc/fast.rs"), LOOKUP),
    rule(Function("kern::ipc::Ipc::port"), LOOKUP),
    rule(Function("kern::ipc::Ipc::port_mut"), LOOKUP),
    rule(Function("kern::slab"), LOOKUP),
    rule(File("crates/kern/src/slab.rs"), LOOKUP),
    rule(Function("kern::idslab"), LOOKUP),
    rule(File("crates/kern/src/idslab.rs"), LOOKUP),
    // Thread and activation switch: the fast path's state changes, the activation
    // machinery, CPU accounting, the switch itself (address space, per-CPU kernel stack and
    // user frame), run queues and rings.
    rule(Function("baton_kernel::kernel::switch_in"), SWITCH),
    rule(Function("baton_kernel::kernel::charge"), SWITCH),
    rule(
        Function("baton_kernel::arch::x86_64::cpu::switch_space"),
        SWITCH,
    ),
    rule(
        Function("baton_kernel::arch::x86_64::gdt::set_kernel_stack"),
        SWITCH,
    ),
    rule(
        Function("baton_kernel::arch::x86_64::gdt::set_user_frame"),
        SWITCH,
    ),
    rule(Function("baton_kernel::fastpath"), SWITCH),
    rule(Function("baton_kernel::activation"), SWITCH),
    rule(File("kernel/src/activation.rs"), SWITCH),
    rule(Function("baton_kernel::thread"), SWITCH),
    rule(File("kernel/src/thread.rs"), SWITCH),
    rule(Function("kern::activation"), SWITCH),
    rule(Function("kern::ring"), SWITCH),
    rule(Function("kern::sched"), SWITCH),
    rule(Function("kern::timer"), SWITCH),
    // Kernel entry: assembly, dispatch, lock, on_syscall's own lines.
    rule(Function("syscall_entry"), Entry),
    rule(Function("syscall_general"), Entry),
    rule(Function("syscall_dispatch"), Entry),
    // The RPC paths' own entries (the prologue of the function the stub calls).
    rule(Function("ipc_fast_dispatch"), Entry),
    rule(Function("act_return_dispatch"), Entry),
    rule(Function("baton_kernel::kernel::lock"), Entry),
    rule(Function("baton_kernel::syscall::on_syscall"), Entry),
    rule(File("kernel/src/syscall.rs"), Entry),
    // Kernel exit: unlock, the way back to user mode, `sysretq`.
    rule(Function("baton_kernel::kernel::unlock"), Exit),
    rule(Function("baton_kernel::kernel::leave_to_user"), Exit),
    rule(
        Function("baton_kernel::arch::x86_64::trap::resume_current"),
        Exit,
    ),
    rule(Function("resume_current_frame"), Exit),
    rule(Function("trap_exit"), Exit),
];

/// What an inline chain (innermost frame first) is, by [`RULES`]; `None` if no rule
/// matches any frame.
pub fn classify(chain: &[Frame]) -> Option<Class> {
    chain
        .iter()
        .find_map(|f| RULES.iter().find(|r| r.what.matches(f)).map(|r| r.class))
}

/// Which side of the RPC made the system call a traced pass starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The client: its entry is client side, the exit (into the server) server side.
    Client,
    /// The server: its entry is server side, the exit (back into the client) client side.
    Server,
}

/// The stage of one instruction of a pass made by `side`.
pub fn stage(chain: &[Frame], side: Side) -> Stage {
    match (classify(chain), side) {
        (Some(Class::Stage(s)), _) => s,
        (Some(Class::Entry), Side::Client) | (Some(Class::Exit), Side::Server) => {
            Stage::EntryClient
        }
        (Some(Class::Entry), Side::Server) | (Some(Class::Exit), Side::Client) => {
            Stage::EntryServer
        }
        (None, _) => Stage::Other,
    }
}

/// The name of a function for the per-function lists: the innermost frame that a rule
/// matches (the code that decided its stage), else the innermost frame; hashes removed.
pub fn function_of(chain: &[Frame]) -> String {
    let frame = chain
        .iter()
        .find(|f| RULES.iter().any(|r| r.what.matches(f)))
        .or(chain.first());
    frame.map_or_else(|| "??".to_string(), |f| base_name(&f.function))
}

/// Instructions, and how many of them are loads/stores and branches ([`crate::mix`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Every instruction.
    pub all: u64,
    /// Loads/stores: the instructions that read or write data memory.
    pub memory: u64,
    /// Branches: the control transfers.
    pub branches: u64,
}

impl Counts {
    /// `all` instructions, `memory` loads/stores, `branches` branches.
    pub const fn new(all: u64, memory: u64, branches: u64) -> Counts {
        Counts {
            all,
            memory,
            branches,
        }
    }

    /// Counts one instruction of mix `m`.
    fn count(&mut self, m: Mix) {
        self.all += 1;
        self.memory += u64::from(m.memory);
        self.branches += u64::from(m.branch);
    }
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts::new(
            self.all + o.all,
            self.memory + o.memory,
            self.branches + o.branches,
        )
    }
}

impl std::iter::Sum for Counts {
    fn sum<I: Iterator<Item = Counts>>(iter: I) -> Counts {
        iter.fold(Counts::default(), |a, b| a + b)
    }
}

/// One traced kernel pass, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pass {
    /// What it is (`client's call (ipc_msg SEND|RECEIVE)`).
    pub label: String,
    /// Who made the system call.
    pub side: Side,
    /// Instructions per stage.
    pub stages: BTreeMap<Stage, Counts>,
    /// Instructions per function ([`function_of`]), with their stage.
    pub functions: BTreeMap<(String, Stage), Counts>,
    /// Every instruction of the pass.
    pub total: Counts,
}

impl Pass {
    /// Classifies the instructions `pcs` of a pass made by `side`, with the chains of
    /// `chains` (an address without a chain is [`Stage::Other`], function `??`) and the
    /// instruction mix of `mixes` (an address without one is neither a load/store nor a
    /// branch).
    pub fn classify(
        label: String,
        side: Side,
        pcs: &[u64],
        chains: &BTreeMap<u64, Vec<Frame>>,
        mixes: &BTreeMap<u64, Mix>,
    ) -> Pass {
        let mut pass = Pass {
            label,
            side,
            stages: BTreeMap::new(),
            functions: BTreeMap::new(),
            total: Counts::default(),
        };
        for pc in pcs {
            let chain = chains.get(pc).map_or(&[][..], Vec::as_slice);
            let m = mixes.get(pc).copied().unwrap_or_default();
            let s = stage(chain, side);
            pass.stages.entry(s).or_default().count(m);
            pass.functions
                .entry((function_of(chain), s))
                .or_default()
                .count(m);
            pass.total.count(m);
        }
        pass
    }

    /// Instructions, loads/stores and branches in stage `s`.
    pub fn counts(&self, s: Stage) -> Counts {
        self.stages.get(&s).copied().unwrap_or_default()
    }
}

/// One RPC path: its two passes, in the order call, reply (or return).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathProfile {
    /// The column's name (`switching (fast path)`).
    pub column: String,
    /// The benchmark row whose RPCs were traced (`rpc.null.fast`).
    pub bench: String,
    /// How the traced RPC was found.
    pub trigger: String,
    /// The call and the reply.
    pub passes: [Pass; 2],
}

impl PathProfile {
    /// Instructions, loads/stores and branches of both passes in stage `s`.
    pub fn counts(&self, s: Stage) -> Counts {
        self.passes.iter().map(|p| p.counts(s)).sum()
    }

    /// Every instruction of both passes.
    pub fn total(&self) -> u64 {
        self.total_counts().all
    }

    /// Instructions, loads/stores and branches of both passes.
    pub fn total_counts(&self) -> Counts {
        self.passes.iter().map(|p| p.total).sum()
    }
}

/// How many functions the per-pass lists show.
pub const TOP_FUNCTIONS: usize = 25;

/// What the report's header says about the run.
pub struct Header<'a> {
    /// `git rev-parse --short HEAD` (`-dirty` if the tree has changes).
    pub commit: &'a str,
    /// QEMU's version line.
    pub qemu: &'a str,
}

/// `a ÷ b` with one decimal, or an empty cell.
fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        String::new()
    } else {
        format!("{:.1}", a as f64 / b as f64)
    }
}

/// `part` as a whole percentage of `total`.
fn percent(part: u64, total: u64) -> String {
    if total == 0 {
        String::new()
    } else {
        format!("{:.0}%", 100.0 * part as f64 / total as f64)
    }
}

/// A signed `part` as a whole percentage of a positive `total` (an empty cell otherwise:
/// a share of no improvement is meaningless).
fn percent_signed(part: i64, total: i64) -> String {
    if total <= 0 {
        return String::new();
    }
    let p = (100.0 * part as f64 / total as f64).round();
    // No `-0%`.
    format!("{:.0}%", if p == 0.0 { 0.0 } else { p })
}

/// `a - b`, signed.
fn diff(a: u64, b: u64) -> i64 {
    a as i64 - b as i64
}

/// One table row from its cells.
fn row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

/// A table cell's text with its `|` escaped (`ipc_msg(SEND|RECEIVE)`).
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The paper's switching and migrating totals.
fn paper_totals() -> (u64, u64) {
    Stage::ALL
        .iter()
        .filter_map(|s| s.paper())
        .fold((0, 0), |(a, b), (x, y)| (a + x, b + y))
}

/// The paper's switching and migrating instruction mix, in total.
fn paper_mix_totals() -> [Counts; 2] {
    Stage::ALL
        .iter()
        .filter_map(|s| s.paper_mix())
        .fold([Counts::default(); 2], |[a, b], [x, y]| [a + x, b + y])
}

/// The breakdown table (Table 1): one row per stage (`Other` only when some instruction is
/// in it), then the total; columns Baton switching and migrating, their ratio, their
/// difference in loads/stores and its share of the total difference, then the same from
/// the paper.
pub fn table(sw: &PathProfile, mg: &PathProfile) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| stage | Baton switching ({}) | % | Baton migrating ({}) | % | Baton Sw/Mg | Baton Sw−Mg loads/stores | % | paper Switch | % | paper Migrate | % | paper Sw/Mg | paper Sw−Mg loads/stores | % |",
        sw.bench, mg.bench
    );
    t.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let (psw, pmg) = paper_totals();
    let [pmsw, pmmg] = paper_mix_totals();
    let pmem = diff(pmsw.memory, pmmg.memory);
    let (tsw, tmg) = (sw.total_counts(), mg.total_counts());
    let tmem = diff(tsw.memory, tmg.memory);
    for s in Stage::ALL {
        let (a, b) = (sw.counts(s), mg.counts(s));
        if s == Stage::Other && a.all == 0 && b.all == 0 {
            continue;
        }
        let mem = diff(a.memory, b.memory);
        let mut cells = vec![
            s.name().to_string(),
            a.all.to_string(),
            percent(a.all, tsw.all),
            b.all.to_string(),
            percent(b.all, tmg.all),
            ratio(a.all, b.all),
            mem.to_string(),
            percent_signed(mem, tmem),
        ];
        match (s.paper(), s.paper_mix()) {
            (Some((x, y)), Some([mx, my])) => {
                let pm = diff(mx.memory, my.memory);
                cells.extend([
                    x.to_string(),
                    percent(x, psw),
                    y.to_string(),
                    percent(y, pmg),
                    ratio(x, y),
                    pm.to_string(),
                    percent_signed(pm, pmem),
                ]);
            }
            _ => cells.extend(vec![String::new(); 7]),
        }
        t.push_str(&row(&cells));
    }
    let _ = writeln!(
        t,
        "| **Entire kernel path** | **{}** | 100% | **{}** | 100% | **{}** | **{tmem}** | {} | **{psw}** | 100% | **{pmg}** | 100% | **{}** | **{pmem}** | 100% |",
        tsw.all,
        tmg.all,
        ratio(tsw.all, tmg.all),
        percent_signed(tmem, tmem),
        ratio(psw, pmg)
    );
    t
}

/// The cells of one instruction mix: all, loads/stores, %, branches, %.
fn mix_cells(c: Counts) -> [String; 5] {
    [
        c.all.to_string(),
        c.memory.to_string(),
        percent(c.memory, c.all),
        c.branches.to_string(),
        percent(c.branches, c.all),
    ]
}

/// One row of the instruction-mix table: the stage (or an empty cell), whose figures,
/// switching's mix, migrating's, and the three Sw/Mg ratios.
fn mix_row(stage: &str, whose: &str, sw: Counts, mg: Counts) -> String {
    let mut cells = vec![stage.to_string(), whose.to_string()];
    cells.extend(mix_cells(sw));
    cells.extend(mix_cells(mg));
    cells.extend([
        ratio(sw.all, mg.all),
        ratio(sw.memory, mg.memory),
        ratio(sw.branches, mg.branches),
    ]);
    row(&cells)
}

/// The instruction-mix table (Table 2): per stage, and in total, a row for Baton and one
/// for the paper: all instructions, loads/stores and branches (with their share of the
/// stage's instructions) of the switching and the migrating path, and the Sw/Mg ratios.
pub fn mix_table(sw: &PathProfile, mg: &PathProfile) -> String {
    let mut t = String::new();
    t.push_str(
        "| stage | | Switch: all | loads/stores | % | branches | % | Migrate: all | loads/stores | % | branches | % | Sw/Mg: all | loads/stores | branches |\n",
    );
    t.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for s in Stage::ALL {
        let (a, b) = (sw.counts(s), mg.counts(s));
        if s == Stage::Other && a.all == 0 && b.all == 0 {
            continue;
        }
        t.push_str(&mix_row(s.name(), "Baton", a, b));
        if let Some([x, y]) = s.paper_mix() {
            t.push_str(&mix_row("", "paper", x, y));
        }
    }
    let [x, y] = paper_mix_totals();
    t.push_str(&mix_row(
        "**Entire kernel path**",
        "**Baton**",
        sw.total_counts(),
        mg.total_counts(),
    ));
    t.push_str(&mix_row("", "paper", x, y));
    t
}

/// The per-direction table of one path: each pass's stages and total, with their
/// loads/stores and branches.
pub fn directions(p: &PathProfile) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| stage | {} | loads/stores | branches | {} | loads/stores | branches | both | loads/stores | branches |",
        cell(&p.passes[0].label),
        cell(&p.passes[1].label)
    );
    t.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let cells = |name: String, c: [Counts; 2]| {
        let mut cells = vec![name];
        for x in [c[0], c[1], c[0] + c[1]] {
            cells.extend([x.all, x.memory, x.branches].map(|n| n.to_string()));
        }
        cells
    };
    for s in Stage::ALL {
        let c = [p.passes[0].counts(s), p.passes[1].counts(s)];
        if s == Stage::Other && c[0].all == 0 && c[1].all == 0 {
            continue;
        }
        t.push_str(&row(&cells(s.name().to_string(), c)));
    }
    let mut total = cells("total".to_string(), [p.passes[0].total, p.passes[1].total]);
    for c in &mut total {
        *c = format!("**{c}**");
    }
    t.push_str(&row(&total));
    t
}

/// The `n` functions with the most instructions in a pass, most first (ties by name).
pub fn top_functions(pass: &Pass, n: usize) -> String {
    let mut rows: Vec<(&(String, Stage), &Counts)> = pass.functions.iter().collect();
    rows.sort_by(|a, b| b.1.all.cmp(&a.1.all).then(a.0.cmp(b.0)));
    let mut t = String::from(
        "| instructions | loads/stores | branches | function | stage |\n|---:|---:|---:|---|---|\n",
    );
    for ((function, stage), c) in rows.iter().take(n) {
        let stage = match stage {
            Stage::Other => "**other**",
            s => s.short(),
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | `{function}` | {stage} |",
            c.all, c.memory, c.branches
        );
    }
    if rows.len() > n {
        let rest: Counts = rows.iter().skip(n).map(|(_, c)| **c).sum();
        let _ = writeln!(
            t,
            "| {} | {} | {} | ({} more functions) | |",
            rest.all,
            rest.memory,
            rest.branches,
            rows.len() - n
        );
    }
    t
}

/// The whole `results/profile.md`.
pub fn report(
    header: &Header,
    sw: &PathProfile,
    mg: &PathProfile,
    others: &[(&PathProfile, &str)],
) -> String {
    let mut r = String::new();
    r.push_str("# Null RPC kernel path by stage\n\n");
    let _ = writeln!(
        r,
        "Seed 001 (Ford & Lepreau), section 8.3, Tables 1 and 2, for Baton's two RPC paths. \
         Kernel {}, QEMU TCG `-icount shift=0` ({}), one CPU, traced instruction by \
         instruction with gdb (`cargo xtask profile`; method, stage rules and instruction \
         classes in `docs/benchmarks.md`, \"Profile\").\n",
        header.commit, header.qemu
    );
    let _ = writeln!(
        r,
        "Exact instruction counts of the **kernel passes only**: from `syscall_entry` to the \
         `sysretq` back to user mode, two passes per RPC (the call and the reply or return). \
         The `rpc.*` benchmark rows also count the user side (the `syscall` instructions, \
         the timestamps, the stubs), so they are larger.\n"
    );
    for p in [sw, mg] {
        let _ = writeln!(
            r,
            "- **{}** (`{}`): {}; {} + {} = {} instructions.",
            p.column,
            p.bench,
            p.trigger,
            p.passes[0].total.all,
            p.passes[1].total.all,
            p.total()
        );
    }
    r.push_str("\n## Breakdown (Table 1)\n\n");
    r.push_str(&table(sw, mg));
    r.push_str(
        "\nThe paper's figures are Mach 3.0's on a PA-RISC (HP 730), counted by hand along \
         the kernel's null RPC path; Sw/Mg is switching ÷ migrating, Sw−Mg loads/stores the \
         improvement in loads/stores (switching − migrating) and its share of the whole \
         path's.\n",
    );
    r.push_str("\n## Instruction mix (Table 2)\n\n");
    r.push_str(&mix_table(sw, mg));
    r.push_str(
        "\nA load/store is an instruction that reads or writes data memory (an explicit \
         memory operand, `push`/`pop`/`call`/`ret`/`iretq`, string instructions, \
         `lock`-prefixed ones; not `lea`, not `nop`), counted once however many accesses \
         it makes; a branch is a control transfer (`jmp`, every `jcc`, `call`, `ret`, \
         `syscall`, `sysretq`, `iretq`). Decoded from the kernel ELF with `iced-x86` by \
         `xtask/src/mix.rs`. The paper's PA-RISC is a load/store machine, where a load/store \
         is an instruction of its own; on x86-64 an `add` to memory is one instruction that \
         loads and stores. The paper prints 62% for the migrating client side's 62 of 99 \
         loads/stores (63% above).\n",
    );
    for p in [sw, mg] {
        let _ = writeln!(r, "\n## {} by direction\n", p.column);
        r.push_str(&directions(p));
    }
    for p in [sw, mg] {
        for pass in &p.passes {
            let _ = writeln!(
                r,
                "\n## {}: {} ({} instructions), top functions\n",
                p.column, pass.label, pass.total.all
            );
            r.push_str(&top_functions(pass, TOP_FUNCTIONS));
        }
    }
    for (p, about) in others {
        let _ = writeln!(
            r,
            "\n## {} (`{}`)\n\n{about} ({}; {} + {} = {} instructions): where its \
             instructions go, by stage and by function.\n",
            p.column,
            p.bench,
            p.trigger,
            p.passes[0].total.all,
            p.passes[1].total.all,
            p.total()
        );
        r.push_str(&directions(p));
        for pass in &p.passes {
            let _ = writeln!(
                r,
                "\n### {}: {} ({} instructions), top functions\n",
                p.column, pass.label, pass.total.all
            );
            r.push_str(&top_functions(pass, 2 * TOP_FUNCTIONS));
        }
    }
    r
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    fn f(function: &str, file: &str) -> Frame {
        Frame {
            function: function.into(),
            file: file.into(),
            line: 1,
        }
    }

    const A2L: &str = "\
0xffffffff8010e050
baton_kernel::kernel::leave_to_user
/work/fast/kernel/src/kernel.rs:886
0xffffffff8010e073
core::sync::atomic::atomic_store
/rustc/5980/library/core/src/sync/atomic.rs:3876
baton_kernel::kernel::unlock
/work/fast/kernel/src/kernel.rs:182 (discriminator 2)
0xffffffff80129ab6
syscall_entry
??:0
0xffffffff80129ac0
syscall_general
baton_kernel.1662d926241f96e2-cgu.08:?
";

    #[test]
    fn parses_addr2line() {
        let chains = parse_addr2line(A2L).unwrap();
        assert_eq!(chains.len(), 4);
        assert_eq!(
            chains[&0xffffffff8010e073],
            vec![
                Frame {
                    function: "core::sync::atomic::atomic_store".into(),
                    file: "/rustc/5980/library/core/src/sync/atomic.rs".into(),
                    line: 3876
                },
                Frame {
                    function: "baton_kernel::kernel::unlock".into(),
                    file: "/work/fast/kernel/src/kernel.rs".into(),
                    line: 182
                },
            ]
        );
        assert_eq!(chains[&0xffffffff80129ab6][0].file, "??");
        assert_eq!(chains[&0xffffffff80129ac0][0].line, 0);
        assert!(parse_addr2line("foo\n??:0\n").is_err());
        assert!(parse_addr2line("0x10\nfoo\n").is_err());
        assert!(parse_addr2line("0xzz\n").is_err());
    }

    #[test]
    fn classifies_by_the_innermost_matching_frame() {
        // A library helper counts for the kernel code that inlined it.
        let header = [
            f(
                "core::ptr::read_volatile",
                "/rustc/x/library/core/src/ptr/mod.rs",
            ),
            f(
                "baton_kernel::arch::x86_64::paging::read_header",
                "/w/kernel/src/arch/x86_64/paging.rs",
            ),
            f(
                "baton_kernel::fastpath::try_ipc",
                "/w/kernel/src/fastpath.rs",
            ),
            f(
                "baton_kernel::syscall::on_syscall",
                "/w/kernel/src/syscall.rs",
            ),
        ];
        assert_eq!(stage(&header, Side::Client), Stage::Copy);
        // A slab lookup inside the fast path's plan is a lookup; the plan's own lines too.
        let slab = [
            f("kern::slab::Slab<T>::get", "/w/crates/kern/src/slab.rs"),
            f(
                "kern::ipc::space::Space::lookup",
                "/w/crates/kern/src/ipc/space.rs",
            ),
        ];
        assert_eq!(stage(&slab, Side::Client), Stage::Lookup);
        let plan = [f(
            "kern::ipc::fast::<impl kern::ipc::Ipc<T>>::fast_plan",
            "/w/crates/kern/src/slab.rs",
        )];
        assert_eq!(stage(&plan, Side::Client), Stage::Lookup);
        let switch = [
            f("core::mem::replace", "/rustc/x/library/core/src/mem/mod.rs"),
            f(
                "baton_kernel::fastpath::try_ipc",
                "/w/kernel/src/fastpath.rs",
            ),
        ];
        assert_eq!(stage(&switch, Side::Server), Stage::Switch);
        assert_eq!(stage(&[f("??", "??")], Side::Client), Stage::Other);
        assert_eq!(stage(&[], Side::Client), Stage::Other);
        // A path prefix matches whole path segments only.
        assert!(!Function("baton_kernel::kernel::lock")
            .matches(&f("baton_kernel::kernel::lock_all", "x")));
        assert!(Function("kern::ring").matches(&f("kern::ring::Ring<T>::push_back", "x")));
    }

    #[test]
    fn drops_generic_arguments() {
        assert_eq!(
            base_name("kern::ipc::Ipc<T>::port_mut"),
            "kern::ipc::Ipc::port_mut"
        );
        assert_eq!(
            base_name("kern::ipc::fast::<impl kern::ipc::Ipc<T>>::fast_plan"),
            "kern::ipc::fast::<impl kern::ipc::Ipc>::fast_plan"
        );
        assert_eq!(
            base_name("<alloc::vec::Vec<T,A> as core::ops::deref::Deref>::deref"),
            "<alloc::vec::Vec as core::ops::deref::Deref>::deref"
        );
        assert_eq!(
            base_name("core::ptr::drop_in_place<Option<Box<X>>>"),
            "core::ptr::drop_in_place"
        );
        assert!(
            Function("kern::ipc::Ipc::port_mut").matches(&f("kern::ipc::Ipc<T>::port_mut", "x"))
        );
    }

    #[test]
    fn entry_and_exit_take_the_side_of_the_pass() {
        let entry = [f("syscall_entry", "??")];
        let exit = [
            f("core::sync::atomic::atomic_store", "/rustc/x/atomic.rs"),
            f("baton_kernel::kernel::unlock", "/w/kernel/src/kernel.rs"),
            f(
                "baton_kernel::kernel::leave_to_user",
                "/w/kernel/src/kernel.rs",
            ),
        ];
        assert_eq!(stage(&entry, Side::Client), Stage::EntryClient);
        assert_eq!(stage(&exit, Side::Client), Stage::EntryServer);
        assert_eq!(stage(&entry, Side::Server), Stage::EntryServer);
        assert_eq!(stage(&exit, Side::Server), Stage::EntryClient);
        // on_syscall's own lines are the entry; the per-CPU lookup it inlines too.
        let percpu = [
            f(
                "baton_kernel::arch::x86_64::gdt::this_cpu",
                "/w/kernel/src/arch/x86_64/gdt.rs",
            ),
            f(
                "baton_kernel::syscall::on_syscall",
                "/w/kernel/src/syscall.rs",
            ),
        ];
        assert_eq!(stage(&percpu, Side::Client), Stage::EntryClient);
    }

    /// A profile with `counts` instructions per stage and pass, half of them (rounded
    /// down) loads/stores and a fifth branches.
    fn profile(column: &str, bench: &str, counts: [[u64; 6]; 2]) -> PathProfile {
        let pass = |label: &str, side, c: [u64; 6]| {
            let stages: BTreeMap<Stage, Counts> = Stage::ALL
                .iter()
                .zip(c)
                .filter(|(_, n)| *n > 0)
                .map(|(s, n)| (*s, Counts::new(n, n / 2, n / 5)))
                .collect();
            let total = stages.values().copied().sum();
            let functions = stages
                .iter()
                .map(|(s, n)| ((format!("fn_{}", s.name().len()), *s), *n))
                .collect();
            Pass {
                label: label.into(),
                side,
                stages,
                functions,
                total,
            }
        };
        PathProfile {
            column: column.into(),
            bench: bench.into(),
            trigger: "a trigger".into(),
            passes: [
                pass("call", Side::Client, counts[0]),
                pass("reply", Side::Server, counts[1]),
            ],
        }
    }

    #[test]
    fn classifies_a_pass() {
        let mut chains = BTreeMap::new();
        chains.insert(1, vec![f("syscall_entry", "??")]);
        chains.insert(
            2,
            vec![f("kern::slab::Slab<T>::get", "/w/crates/kern/src/slab.rs")],
        );
        chains.insert(3, vec![f("trap_exit", "??")]);
        let mut mixes = BTreeMap::new();
        mixes.insert(
            1,
            Mix {
                memory: true,
                branch: false,
            },
        );
        mixes.insert(
            2,
            Mix {
                memory: true,
                branch: true,
            },
        );
        mixes.insert(
            3,
            Mix {
                memory: false,
                branch: true,
            },
        );
        let p = Pass::classify(
            "call".into(),
            Side::Client,
            &[1, 1, 2, 4, 3],
            &chains,
            &mixes,
        );
        assert_eq!(p.total, Counts::new(5, 3, 2));
        assert_eq!(p.counts(Stage::EntryClient), Counts::new(2, 2, 0));
        assert_eq!(p.counts(Stage::Lookup), Counts::new(1, 1, 1));
        assert_eq!(p.counts(Stage::Other), Counts::new(1, 0, 0));
        assert_eq!(p.counts(Stage::EntryServer), Counts::new(1, 0, 1));
        assert_eq!(
            p.functions[&("??".to_string(), Stage::Other)],
            Counts::new(1, 0, 0)
        );
    }

    #[test]
    fn has_the_papers_figures() {
        for s in Stage::ALL {
            assert_eq!(
                s.paper_mix().map(|[a, b]| (a.all, b.all)),
                s.paper(),
                "{s:?}"
            );
        }
        let [sw, mg] = paper_mix_totals();
        assert_eq!(sw, Counts::new(1128, 482, 193));
        assert_eq!(mg, Counts::new(213, 120, 22));
        // Table 1's load/store improvements: 4, 58, 82, 152, 66 = 362.
        let improvements: Vec<i64> = Stage::ALL
            .iter()
            .filter_map(|s| s.paper_mix())
            .map(|[a, b]| diff(a.memory, b.memory))
            .collect();
        assert_eq!(improvements, [4, 58, 82, 152, 66]);
        assert_eq!(cell("ipc_msg(SEND|RECEIVE)"), "ipc_msg(SEND\\|RECEIVE)");
    }

    #[test]
    fn renders_tables() {
        let sw = profile(
            "switching",
            "rpc.null.fast",
            [[100, 50, 200, 150, 22, 0], [60, 90, 210, 150, 22, 0]],
        );
        let mg = profile(
            "migrating",
            "rpc.null.migrating",
            [[80, 40, 50, 100, 10, 2], [40, 80, 40, 100, 10, 0]],
        );
        let t = table(&sw, &mg);
        assert!(t.contains("| Kernel entry/exit: client side | 160 | 15% | 120 | 22% | 1.3 | 20 | 8% | 146 | 13% | 99 | 46% | 1.5 | 4 | 1% |\n"), "{t}");
        assert!(
            t.contains("| Message copy | 44 | 4% | 20 | 4% | 2.2 | 12 | 5% | 222 | 20% | 39 | 18% | 5.7 | 66 | 18% |\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "| Other (no rule) | 0 | 0% | 2 | 0% | 0.0 | -1 | 0% |  |  |  |  |  |  |  |\n"
            ),
            "{t}"
        );
        assert!(t.contains("| **Entire kernel path** | **1054** | 100% | **552** | 100% | **1.9** | **251** | 100% | **1128** | 100% | **213** | 100% | **5.3** | **362** | 100% |\n"), "{t}");
        // Every row has the header's columns.
        let columns = |l: &str| l.matches('|').count();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines.iter().all(|l| columns(l) == columns(lines[0])), "{t}");
        let m = mix_table(&sw, &mg);
        assert!(m.contains("| Kernel entry/exit: client side | Baton | 160 | 80 | 50% | 32 | 20% | 120 | 60 | 50% | 24 | 20% | 1.3 | 1.3 | 1.3 |\n|  | paper | 146 | 66 | 45% | 12 | 8% | 99 | 62 | 63% | 10 | 10% | 1.5 | 1.1 | 1.2 |\n"), "{m}");
        assert!(m.contains("| **Entire kernel path** | **Baton** | 1054 | 527 | 50% | 210 | 20% | 552 | 276 | 50% | 110 | 20% | 1.9 | 1.9 | 1.9 |\n|  | paper | 1128 | 482 | 43% | 193 | 17% | 213 | 120 | 56% | 22 | 10% | 5.3 | 4.0 | 8.8 |\n"), "{m}");
        assert!(m.contains("| Other (no rule) | Baton | 0 | 0 |  | 0 |  | 2 | 1 | 50% | 0 | 0% | 0.0 | 0.0 |  |\n| **Entire"), "{m}");
        let lines: Vec<&str> = m.lines().collect();
        assert!(lines.iter().all(|l| columns(l) == columns(lines[0])), "{m}");
        let d = directions(&sw);
        assert!(d.contains("| stage | call | loads/stores | branches | reply | loads/stores | branches | both | loads/stores | branches |"), "{d}");
        assert!(
            d.contains("| **total** | **522** | **261** | **104** | **532** | **266** | **106** | **1054** | **527** | **210** |"),
            "{d}"
        );
        assert!(!d.contains("Other"), "{d}");
        let top = top_functions(&sw.passes[0], 2);
        assert!(
            top.starts_with("| instructions | loads/stores | branches | function | stage |"),
            "{top}"
        );
        assert!(
            top.contains("| 200 | 100 | 40 | `fn_36` | lookup |"),
            "{top}"
        );
        assert!(
            top.contains("| 172 | 86 | 34 | (3 more functions) | |"),
            "{top}"
        );
        let r = report(
            &Header {
                commit: "abc1234",
                qemu: "QEMU 7.2",
            },
            &sw,
            &mg,
            &[(&sw, "The general path")],
        );
        assert!(r.contains("Kernel abc1234"), "{r}");
        assert!(r.contains("The general path ("), "{r}");
        assert!(r.contains("522 + 532 = 1054 instructions"), "{r}");
        assert_eq!(
            r,
            report(
                &Header {
                    commit: "abc1234",
                    qemu: "QEMU 7.2"
                },
                &sw,
                &mg,
                &[(&sw, "The general path")]
            )
        );
    }
}
