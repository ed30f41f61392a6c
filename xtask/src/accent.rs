//! Accent's measurements (Fitzgerald & Rashid, *The Integration of Virtual Memory
//! Management and Interprocess Communication in Accent*, TOCS 1986, section 3) set beside
//! Baton's rows: Table 3-2 (IPC), Table 3-3 (faults by type), Table 3-4 (reading a 56 KiB
//! file by mapping it), Figures 3-1 and 3-3 (cost against pages), Table 3-8 (where the
//! physical pages came from: the free list or page replacement, paging to the disk) and
//! Table 3-10 (fault statistics of a whole run).
//!
//! Accent's figures are milliseconds on a PERQ, Baton's instructions under QEMU icount, so
//! no figure is compared with another across systems: each system's operations are set
//! against one of its own (a ratio, a slope's ratio, a share of all faults), and those are
//! compared.

use std::fmt::Write as _;

use crate::bench::Row;
use crate::plot::{self, Series};

/// The file of Figure 3-1's plot.
pub const FIG_3_1_SVG: &str = "accent-fig3-1.svg";
/// The file of Figure 3-2's plot.
pub const FIG_3_2_SVG: &str = "accent-fig3-2.svg";
/// The file of Figure 3-3's plot.
pub const FIG_3_3_SVG: &str = "accent-fig3-3.svg";

/// Table 3-3: Accent's fault type, its total in milliseconds, and the Baton row that takes
/// the same fault (empty: none).
pub const TABLE_3_3: &[(&str, f64, &str)] = &[
    ("Null fault", 0.623, "floor.fault.roundtrip"),
    ("Read fault, zero fill", 3.355, "vm.fault.zero.read"),
    ("Write fault, zero fill", 3.704, "vm.fault.zero"),
    (
        "Read fault, memory fill, small file",
        3.760,
        "vm.fault.fill",
    ),
    ("Read fault, memory fill, large file", 4.504, ""),
    ("Write fault, CopyOnWrite copy", 3.833, "vm.fault.cow"),
];

/// The fault Table 3-3's ratios are taken against.
const TABLE_3_3_BASE: usize = 1;

/// Table 3-2: simple and complex (one pointer to 1,024 bytes) message send and receive,
/// in milliseconds.
const SIMPLE_MS: f64 = 1.35 + 1.35;
const COMPLEX_MS: f64 = 10.0 + 10.0;

/// Table 3-4: Accent's "request file from server" and its read of one 512-byte page, and
/// UNIX 4.1bsd's open/close and its read of one 1,024-byte page, in milliseconds (ranges).
const T34_ACCENT_OPEN: (f64, f64) = (66.0, 66.0);
const T34_ACCENT_PAGE: (f64, f64) = (5.0, 10.0);
const T34_UNIX_OPEN: (f64, f64) = (5.0, 10.0);
const T34_UNIX_PAGE: (f64, f64) = (16.0, 18.0);
/// The file's size and each system's pages of it.
const T34_FILE: u64 = 56 << 10;

/// Figure 3-1's page counts (Baton's `vm.allocate.<n>` and `vm.deallocate.<n>`).
pub const FIG_3_1_PAGES: [u64; 4] = [1, 16, 256, 1024];

/// Figure 3-2's page counts (Baton's `vm.copy.<n>` and `vm.copy.<n>.move`).
pub const FIG_3_2_PAGES: [u64; 4] = [1, 16, 256, 1024];

/// Figure 3-3's sizes: the `ipc.ool.<size>` rows and their pages.
pub const FIG_3_3_SIZES: [(&str, u64); 3] = [("4k", 1), ("64k", 16), ("1m", 256)];

/// Figure 3-3's slopes in milliseconds per page: MoveWords without and with DeleteSource.
const SLOPE_COPY_MS: f64 = 1.05;
const SLOPE_MOVE_MS: f64 = 1.75;

/// Table 3-10, the system generation task's fault statistics: Accent's counter, its
/// count, Baton's counter (`BENCHVM`; empty: none that counts the same thing), and whether
/// it counts faults (its share of all faults is shown) or pages.
pub const TABLE_3_10: &[(&str, u64, &str, bool)] = &[
    ("faults", 201_614, "faults", true),
    ("read faults", 116_350, "read_faults", true),
    ("write faults", 85_264, "write_faults", true),
    ("CopyOnWrite faults (reclaims + copies)", 837, "", true),
    ("CopyOnWrite reclaims", 686, "cow_reclaims", true),
    ("CopyOnWrite copies", 151, "cow_copies", true),
    (
        "pages reclaimed by CopyOnWrite reclaims",
        917,
        "cow_reclaimed_pages",
        false,
    ),
    ("pages filled with zeros", 83_702, "zero_fills", false),
    (
        "pages filled from disk (a pager)",
        40_509,
        "pager_fills",
        false,
    ),
    (
        "disk pages found in physical memory (Baton: pages filled from a resident page)",
        110_326,
        "memory_fills",
        false,
    ),
    (
        "Paging partition disk pages allocated (Baton: a swap slot at every page-out)",
        698,
        "paging_pageouts",
        false,
    ),
    (
        "read from disk (Baton: page-ins from the swap area only)",
        40_509,
        "paging_pageins",
        false,
    ),
];

/// Table 3-8, the system generation task's page replacement: Accent's line, its count, and
/// Baton's counter (`BENCHVM` `paging_*`; empty: Baton has no such pages).
pub const TABLE_3_8: &[(&str, u64, &str)] = &[
    ("Allocated from free page list", 84_393, "paging_from_free"),
    (
        "Reclaimed permanent file disk pages without process mapping (Baton: clean pages of pager-backed objects, dropped)",
        36_526,
        "paging_reclaimed_pager",
    ),
    ("Reclaimed dirty process pages with disk backing", 1_876, ""),
    ("Reclaimed clean process pages with disk backing", 1_625, ""),
    (
        "Reclaimed process pages without disk backing (Baton: anonymous pages with a mapping, paged out)",
        742,
        "paging_reclaimed_mapped",
    ),
    (
        "Reclaimed paging disk pages without process mapping (Baton: anonymous pages without a mapping, paged out)",
        284,
        "paging_reclaimed_unmapped",
    ),
];

fn median(rows: &[Row], name: &str) -> Option<u64> {
    rows.iter().find(|r| r.name == name).map(|r| r.median)
}

fn counter(vm: &[(String, u64)], name: &str) -> Option<u64> {
    vm.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

fn fixed(x: f64, places: usize) -> String {
    format!("{x:.places$}")
}

fn share(part: u64, whole: u64) -> String {
    if whole == 0 {
        return String::new();
    }
    format!("{:.3}%", part as f64 * 100.0 / whole as f64)
}

/// Per-page slope between the 16- and 256-page points of `rows` `ipc.ool.<size><suffix>`.
fn slope(rows: &[Row], suffix: &str) -> Option<f64> {
    let (a, pa) = FIG_3_3_SIZES[1];
    let (b, pb) = FIG_3_3_SIZES[2];
    let ya = median(rows, &format!("ipc.ool.{a}{suffix}"))?;
    let yb = median(rows, &format!("ipc.ool.{b}{suffix}"))?;
    Some((yb as f64 - ya as f64) / (pb - pa) as f64)
}

/// The report's Accent section (Markdown), or an empty string when the run has none of
/// its rows.
pub fn section(rows: &[Row], vm: &[(String, u64)], plots: &[&str]) -> String {
    let mut out = String::new();
    let tables = [
        table_3_2(rows),
        table_3_3(rows),
        table_3_4(rows),
        figure_3_1(rows, plots.contains(&FIG_3_1_SVG)),
        figure_3_2(rows, plots.contains(&FIG_3_2_SVG)),
        figure_3_3(rows, plots.contains(&FIG_3_3_SVG)),
        table_3_8(vm, &BENCH_RUN),
        table_3_10(vm, &BENCH_RUN),
    ];
    if tables.iter().all(String::is_empty) {
        return out;
    }
    out.push_str(
        "\n## Accent (Fitzgerald & Rashid, TOCS 1986)\n\n\
         Accent's figures are milliseconds on a PERQ with 512-byte pages; Baton's are \
         instructions with 4 KiB pages. Neither is set against the other: each system's \
         operations are compared with one of its own (ratios, slopes, shares), and those \
         are compared.\n",
    );
    for t in tables {
        out.push_str(&t);
    }
    out
}

fn table_3_2(rows: &[Row]) -> String {
    let (Some(simple), Some(complex)) = (
        median(rows, "rpc.null.slow.roundtrip"),
        median(rows, "ipc.ool.4k"),
    ) else {
        return String::new();
    };
    let mut t = String::from(
        "\n### Table 3-2: IPC operations\n\n\
         | operation | Accent (ms) | Baton row | Baton (instructions) |\n\
         |---|---:|---|---:|\n",
    );
    let _ = writeln!(
        t,
        "| simple message, send + receive, both ways | {} | `rpc.null.slow.roundtrip` | {simple} |",
        fixed(2.0 * SIMPLE_MS, 2)
    );
    let _ = writeln!(
        t,
        "| complex message (data out of line), send + receive, both ways | {} | `ipc.ool.4k` | {complex} |",
        fixed(2.0 * COMPLEX_MS, 2)
    );
    let _ = writeln!(
        t,
        "| **complex ÷ simple** | **{}** | | **{}** |",
        fixed(COMPLEX_MS / SIMPLE_MS, 2),
        fixed(complex as f64 / simple as f64, 2)
    );
    t.push_str(
        "\nAccent's complex message carried one pointer to 1,024 bytes, in one direction; \
         Baton's `ipc.ool.4k` carries a 4 KiB page out of line in the request and the reply \
         and the receiver reads it (one fault). Both are queued messages through the \
         general path (Accent's simple messages had a path of their own, like Baton's fast \
         path, which `rpc.null.slow` does not take).\n",
    );
    t
}

fn table_3_3(rows: &[Row]) -> String {
    let base = median(rows, TABLE_3_3[TABLE_3_3_BASE].2);
    if base.is_none() {
        return String::new();
    }
    let base_ms = TABLE_3_3[TABLE_3_3_BASE].1;
    let mut t = String::from(
        "\n### Table 3-3: fault handling by type\n\n\
         | fault | Accent (ms) | ÷ read zero fill | Baton row | Baton (instructions) | ÷ read zero fill |\n\
         |---|---:|---:|---|---:|---:|\n",
    );
    for (what, ms, row) in TABLE_3_3 {
        let baton = median(rows, row);
        let _ = writeln!(
            t,
            "| {what} | {} | {} | {} | {} | {} |",
            fixed(*ms, 3),
            fixed(ms / base_ms, 2),
            if row.is_empty() {
                "—".to_string()
            } else {
                format!("`{row}`")
            },
            baton.map_or(String::new(), |b| b.to_string()),
            match (baton, base) {
                (Some(b), Some(d)) if d > 0 => fixed(b as f64 / d as f64, 2),
                _ => String::new(),
            }
        );
    }
    t.push_str(
        "\nBaton's rows are whole user-to-user paths (fault, resolution, return), as \
         Accent's totals are. The null fault is Baton's floor fault (the CPU's fault and \
         return with no lookup); the large-file fill has no row of its own (Table \
         3-4's page of a file is one, served by the file server, from the disk), and the small-file fill is a first read of a resident page of another \
         memory object.\n",
    );
    t
}

fn range(r: (f64, f64)) -> String {
    if r.0 == r.1 {
        fixed(r.0, 0)
    } else {
        format!("{}–{}", fixed(r.0, 0), fixed(r.1, 0))
    }
}

fn table_3_4(rows: &[Row]) -> String {
    let Some(cold) = median(rows, "file.read.56k") else {
        return String::new();
    };
    let open = median(rows, "file.open");
    let warm = median(rows, "file.read.56k.warm");
    let pages = T34_FILE / 4096;
    let (ap, up) = (T34_FILE / 512, T34_FILE / 1024);
    let scale = |r: (f64, f64), n: u64| (r.0 * n as f64, r.1 * n as f64);
    let (a_file, u_file) = (scale(T34_ACCENT_PAGE, ap), scale(T34_UNIX_PAGE, up));
    let ratio = |file: (f64, f64), open: (f64, f64)| {
        format!(
            "{}–{}",
            fixed(file.0 / open.1, 1),
            fixed(file.1 / open.0, 1)
        )
    };
    let mut t = String::from(
        "\n### Table 3-4: reading a 56 KiB file\n\n\
         | operation | Accent (ms) | UNIX 4.1bsd (ms) | Baton row | Baton (instructions) |\n\
         |---|---:|---:|---|---:|\n",
    );
    let _ = writeln!(
        t,
        "| request the file from the server (UNIX: open/close) | {} | {} | `file.open` | {} |",
        range(T34_ACCENT_OPEN),
        range(T34_UNIX_OPEN),
        open.map_or(String::new(), |o| o.to_string())
    );
    let _ = writeln!(
        t,
        "| read a page (Accent 512 B, UNIX 1 KiB, Baton 4 KiB) | {} | {} | `file.read.56k` ÷ {pages} | {} |",
        range(T34_ACCENT_PAGE),
        range(T34_UNIX_PAGE),
        cold / pages
    );
    let _ = writeln!(
        t,
        "| read the whole file (Accent {ap} pages, UNIX {up}, Baton {pages}) | {} | {} | `file.read.56k` | {cold} |",
        range(a_file),
        range(u_file)
    );
    if let Some(w) = warm {
        let _ = writeln!(
            t,
            "| read it again, its pages resident | | | `file.read.56k.warm` | {w} |"
        );
    }
    let linux = median(rows, "linux.file.read.56k");
    let linux_warm = median(rows, "linux.file.read.56k.warm");
    if let Some(l) = linux {
        let _ = writeln!(
            t,
            "| Linux guest, the same file from a virtio disk, cold | | | `linux.file.read.56k` | {l} |"
        );
    }
    if let Some(l) = linux_warm {
        let _ = writeln!(
            t,
            "| Linux guest, again, from its page cache | | | `linux.file.read.56k.warm` | {l} |"
        );
    }
    if let Some(o) = open.filter(|&o| o > 0) {
        let _ = writeln!(
            t,
            "| **reading the file ÷ requesting it** | **{}** | **{}** | | **{}** |",
            ratio(a_file, T34_ACCENT_OPEN),
            ratio(u_file, T34_UNIX_OPEN),
            fixed(cold as f64 / o as f64, 1)
        );
    }
    t.push_str(
        "\nBaton's figures leave the disk's own time out (the kernel's halted ticks are \
         subtracted), Accent's and UNIX's include it, so only the shape compares: in Accent \
         a page cost about a tenth of the file request, and the file's read was dominated by \
         its 112 page faults. The Linux rows read the same file (the same disk image's FAT \
         partition, through virtio-blk) by mapping it, and count the reading process's CPU \
         time, which leaves the disk's time out too (and the block layer's completion work \
         when it runs while the CPU is idle); Linux reads the whole file ahead at its first \
         fault.\n",
    );
    t
}

fn figure_3_1(rows: &[Row], plotted: bool) -> String {
    let have = |op: &str| {
        FIG_3_1_PAGES
            .iter()
            .all(|n| median(rows, &format!("vm.{op}.{n}")).is_some())
    };
    if !have("allocate") || !have("deallocate") {
        return String::new();
    }
    let mut t = String::from(
        "\n### Figure 3-1: validate and invalidate unbacked memory, against pages\n\n\
         | pages | `vm.allocate.<n>` | ÷ 1 page | `vm.deallocate.<n>` | ÷ 1 page |\n\
         |---:|---:|---:|---:|---:|\n",
    );
    let one = |op: &str| median(rows, &format!("vm.{op}.1")).unwrap_or(1).max(1);
    for n in FIG_3_1_PAGES {
        let a = median(rows, &format!("vm.allocate.{n}")).unwrap_or(0);
        let d = median(rows, &format!("vm.deallocate.{n}")).unwrap_or(0);
        let _ = writeln!(
            t,
            "| {n} | {a} | {} | {d} | {} |",
            fixed(a as f64 / one("allocate") as f64, 2),
            fixed(d as f64 / one("deallocate") as f64, 2)
        );
    }
    t.push_str(
        "\nAccent: ValidateMemory is nearly constant at 6.2 ms from 1 to 1,024 pages (lazy \
         allocation: no page and no backing store until touched); InvalidateMemory costs \
         more, with a ramp of about 3.5 µs a page below 128 pages (its search for \
         resources to reclaim). Baton's maps are the same lazy kind: neither row touches a \
         page.\n",
    );
    if plotted {
        let _ = writeln!(
            t,
            "\n![Figure 3-1: allocate and deallocate against pages]({FIG_3_1_SVG})"
        );
    }
    t
}

fn figure_3_2(rows: &[Row], plotted: bool) -> String {
    let name = |n: u64, suffix: &str| format!("vm.copy.{n}{suffix}");
    let complete = FIG_3_2_PAGES.iter().all(|&n| {
        median(rows, &name(n, "")).is_some() && median(rows, &name(n, ".move")).is_some()
    });
    if !complete {
        return String::new();
    }
    let one = |suffix: &str| median(rows, &name(1, suffix)).unwrap_or(1).max(1);
    let mut t = String::from(
        "\n### Figure 3-2: MoveWords of unbacked memory, against pages\n\n\
         | pages | `vm.copy.<n>` | ÷ 1 page | `vm.copy.<n>.move` | ÷ 1 page |\n\
         |---:|---:|---:|---:|---:|\n",
    );
    for n in FIG_3_2_PAGES {
        let c = median(rows, &name(n, "")).unwrap_or(0);
        let m = median(rows, &name(n, ".move")).unwrap_or(0);
        let _ = writeln!(
            t,
            "| {n} | {c} | {} | {m} | {} |",
            fixed(c as f64 / one("") as f64, 2),
            fixed(m as f64 / one(".move") as f64, 2)
        );
    }
    t.push_str(
        "\nAccent: MoveWords of unbacked memory into new memory costs 4.5 to 7.5 ms from 1 \
         to 1,024 pages, about 700 µs more for each further 256 pages (another map entry at \
         two levels), with DeleteSource about 200 µs more (done in the same scan): nearly \
         flat, since no page exists to map. Baton's rows are `vm_copy` into new memory of \
         the same task (`VM_COPY_CREATE`, and with `VM_COPY_DELETE`) of untouched pages.\n",
    );
    if plotted {
        let _ = writeln!(
            t,
            "\n![Figure 3-2: vm_copy of untouched memory against pages]({FIG_3_2_SVG})"
        );
    }
    t
}

fn figure_3_3(rows: &[Row], plotted: bool) -> String {
    let (Some(copy), Some(moved)) = (slope(rows, ""), slope(rows, ".move")) else {
        return String::new();
    };
    let mut t = String::from(
        "\n### Figure 3-3: MoveWords of resident memory, against pages\n\n\
         | pages | `ipc.ool.<size>` (copy) | `ipc.ool.<size>.move` |\n\
         |---:|---:|---:|\n",
    );
    for (size, pages) in FIG_3_3_SIZES {
        let c = median(rows, &format!("ipc.ool.{size}")).unwrap_or(0);
        let m = median(rows, &format!("ipc.ool.{size}.move")).unwrap_or(0);
        let _ = writeln!(t, "| {pages} | {c} | {m} |");
    }
    let _ = writeln!(
        t,
        "\n| slope per page | Accent (ms) | Baton (instructions, 16 to 256 pages) |\n\
         |---|---:|---:|\n\
         | without DeleteSource (copy) | {} | {} |\n\
         | with DeleteSource (move) | {} | {} |\n\
         | **move ÷ copy** | **{}** | **{}** |",
        fixed(SLOPE_COPY_MS, 2),
        fixed(copy, 0),
        fixed(SLOPE_MOVE_MS, 2),
        fixed(moved, 0),
        fixed(SLOPE_MOVE_MS / SLOPE_COPY_MS, 2),
        fixed(moved / copy.max(1.0), 2)
    );
    t.push_str(
        "\nAccent's curves are linear in pages (entering and removing VP-table entries for \
         each resident page); Baton's rows are an RPC carrying the region out of line whose \
         receiver reads one word of every page, so each page also costs its fault. \
         Figure 3-2 is the same operation on untouched memory.\n",
    );
    if plotted {
        let _ = writeln!(
            t,
            "\n![Figure 3-3: out-of-line copy and move against pages]({FIG_3_3_SVG})"
        );
    }
    t
}

/// Which run Baton's column of Tables 3-8 and 3-10 comes from: its column's label and the
/// paragraph under each table.
pub struct Run {
    pub label: &'static str,
    pub note_3_8: &'static str,
    pub note_3_10: &'static str,
}

/// The benchmark program's run (the report's section).
const BENCH_RUN: Run = Run {
    label: "this benchmark run",
    note_3_8: "\nBaton's counts are the kernel's since boot at the end of the benchmark program, \
         whose paging rows run a working set twice the memory left to it, paged to the \
         default pager's swap partition on the virtio disk. Baton has no *process pages with \
         disk backing* to reclaim: a page paged in gives its swap slot back, so every page \
         paged out gets a slot anew (lazily). Accent's task was not short of memory (67% \
         of its pages came from the free list); Baton's run is made to be.\n",
    note_3_10: "\nAccent's figures are a system generation (compiling and linking the system, \
         8,043 s); Baton's are the kernel's counters since boot at the end of the benchmark \
         program, a synthetic load (every row's iterations, out-of-line messages, forks, \
         task creation and the pager rows), not a realistic one: its mix follows the \
         benchmark list (a thousand iterations of each row), not a workload.\n",
};

/// The shell session of the `shell_session` test: programs started from files on the disk
/// in a small machine.
const SESSION_RUN: Run = Run {
    label: "a shell session",
    note_3_8: "\nBaton's counts are the kernel's since boot at the end of the `shell_session` \
         test: the system `cargo xtask run` boots (the shell, the disk driver, the default \
         pager on the swap partition) in a machine with little memory (above), and a session \
         typed at the shell that lists the disk, starts programs from their files on it \
         (their text and data paged in from the file server), among them one whose working \
         set is several times the memory (its pages paged out to the swap area and back).\n",
    note_3_10: "\nAccent's figures are a system generation (compiling and linking the system, \
         8,043 s); Baton's are the kernel's counters since boot at the end of the shell \
         session above (boot included).\n",
};

/// The `shell_session` test's log.
const SESSION_LOG: &str = "target/test-logs/shell_session.log";

/// The page `cargo xtask accent-tables` writes its tables into, between its markers
/// (`crate::generated`).
const SESSION_DOC: &str = "docs/files.md";

/// `cargo xtask accent-tables`: Tables 3-8 and 3-10 from the `vmstat` lines of the
/// `shell_session` test's log, with what the run was, printed and written into
/// `docs/files.md` between its markers.
pub fn session_tables() -> Result<std::process::ExitCode, String> {
    let root = crate::workspace::root();
    let path = root.join(SESSION_LOG);
    let log = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "{}: {e} (run `cargo xtask test --filter shell_session` first)",
            path.display()
        )
    })?;
    let body = session_body(&log)?;
    print!("{body}");
    let doc = root.join(SESSION_DOC);
    let changed = crate::generated::write_into(&doc, "accent-tables", &body)?;
    eprintln!(
        "xtask: {} {}",
        if changed {
            "wrote the tables into"
        } else {
            "the tables are already in"
        },
        doc.display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// What `accent-tables` writes: the run (from `log`), Tables 3-8 and 3-10, and the
/// shares the docs' reading of them rests on.
pub fn session_body(log: &str) -> Result<String, String> {
    let vm = vmstat_counters(log)?;
    let mut out = String::new();
    let _ = writeln!(out, "{}", session_run(log)?);
    out.push_str(&tables(&vm, &SESSION_RUN));
    let get = |name: &str| counter(&vm, name).unwrap_or(0);
    let allocations: u64 = TABLE_3_8
        .iter()
        .filter_map(|l| counter(&vm, l.2))
        .sum::<u64>()
        .max(get("paging_from_free"));
    let anonymous = get("paging_reclaimed_mapped") + get("paging_reclaimed_unmapped");
    let _ = writeln!(
        out,
        "\nIn short: {} of the page allocations came from paging anonymous pages out \
         (Accent: {}), {} clean pages of files were dropped, {} page-ins came from the swap \
         area and {} pages from pagers (the file server's supplies and those page-ins).",
        share(anonymous, allocations),
        share(742 + 284, TABLE_3_8.iter().map(|l| l.1).sum()),
        get("paging_reclaimed_pager"),
        get("paging_pageins"),
        get("pager_fills"),
    );
    Ok(out)
}

/// The run `log` shows, in a sentence: the machine's memory (QEMU's `-m`, from the
/// command line the test's log ends with, and the kernel's boot line), the swap area, and
/// what the working program did.
fn session_run(log: &str) -> Result<String, String> {
    let after = |marker: &str| -> Option<&str> {
        log.lines()
            .find_map(|l| l.split_once(marker).map(|(_, rest)| rest))
    };
    let number = |text: &str| -> Option<u64> {
        text.split(|c: char| !c.is_ascii_digit())
            .find(|w| !w.is_empty())
            .and_then(|w| w.parse().ok())
    };
    let machine = after(" -m ")
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or("the log has no QEMU command line with `-m`")?;
    let memory = after("[kernel] memory: ").ok_or("the log has no `[kernel] memory:` line")?;
    let memory = memory.split("; ").next().unwrap_or(memory);
    let swap = after("swapon: paging to the disk's swap area: ")
        .and_then(number)
        .ok_or("the log has no `swapon: paging` line")?;
    let limit = log
        .lines()
        .find_map(|l| l.split_once("user memory limited to ").map(|(_, r)| r))
        .and_then(number);
    let work = log
        .lines()
        .find_map(|l| l.split_once("| paging_child: ").map(|(_, r)| r))
        .ok_or("the log has no `paging_child:` summary (did the session's program run?)")?;
    Ok(format!(
        "The run: `cargo xtask test --filter shell_session` in a machine of QEMU `-m {machine}` \
         (the kernel's boot line: {memory}), user memory {}, a swap area of {swap} pages; \
         the program working several times the memory: {}.",
        limit.map_or("not limited".to_string(), |n| format!("{n} frames")),
        work.trim()
    ))
}

/// The counters of the last `vmstat` in `log`: its `BENCHVM` lines' `name=value` words.
pub fn vmstat_counters(log: &str) -> Result<Vec<(String, u64)>, String> {
    let lines: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("BENCHVM ").map(|(_, rest)| rest))
        .collect();
    // The last `vmstat`'s lines: it prints its counters in a fixed number of lines.
    let per = VMSTAT_LINES;
    let last = lines
        .len()
        .checked_sub(per)
        .map(|at| &lines[at..])
        .ok_or("the log has no complete `vmstat` output")?;
    let mut vm = Vec::new();
    for word in last.iter().flat_map(|l| l.split_whitespace()) {
        let (k, v) = word
            .split_once('=')
            .ok_or_else(|| format!("`{word}` is not name=value"))?;
        let v = v.parse().map_err(|_| format!("`{word}`: not a number"))?;
        vm.push((k.to_string(), v));
    }
    Ok(vm)
}

/// Lines of the shell's `vmstat`: sixteen fault counters and nine paging counters, eight a
/// line.
const VMSTAT_LINES: usize = 4;

/// Tables 3-8 and 3-10 with Baton's column from `vm` (`BENCHVM` counters) of `run`.
pub fn tables(vm: &[(String, u64)], run: &Run) -> String {
    let mut t = table_3_8(vm, run);
    t.push_str(&table_3_10(vm, run));
    t
}

fn table_3_8(vm: &[(String, u64)], run: &Run) -> String {
    let Some(from_free) = counter(vm, "paging_from_free") else {
        return String::new();
    };
    let accent_total: u64 = TABLE_3_8.iter().map(|l| l.1).sum();
    let baton_total: u64 = TABLE_3_8
        .iter()
        .filter_map(|l| counter(vm, l.2))
        .sum::<u64>()
        .max(from_free);
    let mut t = String::from(
        "\n### Table 3-8: where physical pages came from (page replacement)\n\n\
         | | Accent (system generation task, 512-byte pages) | % | Baton ({}, 4 KiB pages) | % |\n\
         |---|---:|---:|---:|---:|\n",
    )
    .replace("{}", run.label);
    for (what, accent, ours) in TABLE_3_8 {
        let baton = counter(vm, ours);
        let _ = writeln!(
            t,
            "| {what} | {accent} | {} | {} | {} |",
            share(*accent, accent_total),
            baton.map_or("—".to_string(), |b| b.to_string()),
            baton.map_or(String::new(), |b| share(b, baton_total))
        );
    }
    let _ = writeln!(
        t,
        "| **Total physical page allocations** | **{accent_total}** | | **{baton_total}** | |"
    );
    if let (Some(scanned), Some(spared), Some(short)) = (
        counter(vm, "paging_scanned"),
        counter(vm, "paging_spared"),
        counter(vm, "paging_no_store"),
    ) {
        let _ = writeln!(
            t,
            "\nThe clock scanned {scanned} pages and spared {spared} (referenced since the last \
             sweep); {short} reclaims found no free swap slot. Accent's scan examined 298,028 \
             pages and could not allocate disk backing on 16,295 of 41,053 scans."
        );
    }
    if let (Some(ins), Some(outs), Some(touches), Some(pages), Some(resident)) = (
        counter(vm, "thrash_pageins"),
        counter(vm, "thrash_pageouts"),
        counter(vm, "thrash_touches"),
        counter(vm, "thrash_pages"),
        counter(vm, "thrash_resident"),
    ) {
        let _ = writeln!(
            t,
            "\n`vm.thrash`'s window: {touches} random touches of {pages} pages with {resident} \
             resident at its end: {outs} page-outs, {ins} page-ins ({} page-outs per page-in).",
            fixed(outs as f64 / ins.max(1) as f64, 2)
        );
    }
    t.push_str(run.note_3_8);
    t
}

fn table_3_10(vm: &[(String, u64)], run: &Run) -> String {
    let Some(faults) = counter(vm, "faults") else {
        return String::new();
    };
    let accent_faults = TABLE_3_10[0].1;
    let mut t = String::from(
        "\n### Table 3-10: fault statistics of a whole run\n\n\
         | counter | Accent (system generation task) | % of faults | Baton ({}) | % of faults |\n\
         |---|---:|---:|---:|---:|\n",
    )
    .replace("{}", run.label);
    for (what, accent, ours, of_faults) in TABLE_3_10 {
        let baton = counter(vm, ours);
        let share_of = |n: u64, whole: u64| match of_faults {
            true => share(n, whole),
            false => String::new(),
        };
        let _ = writeln!(
            t,
            "| {what} | {accent} | {} | {} | {} |",
            share_of(*accent, accent_faults),
            baton.map_or("—".to_string(), |b| b.to_string()),
            baton.map_or(String::new(), |b| share_of(b, faults))
        );
    }
    let extra: Vec<String> = vm
        .iter()
        .filter(|(k, _)| {
            !TABLE_3_10.iter().any(|(_, _, ours, _)| ours == k)
                && matches!(
                    k.as_str(),
                    "execute_faults" | "address_errors" | "write_errors"
                )
        })
        .map(|(k, v)| format!("`{k}` {v}"))
        .collect();
    if !extra.is_empty() {
        let _ = writeln!(
            t,
            "\nBaton's counters with no column in Accent's table: {}.",
            extra.join(", ")
        );
    }
    t.push_str(run.note_3_10);
    t
}

/// The section's plots: (file name, SVG), for the figures the run has rows for.
pub fn plots(rows: &[Row], subtitle: &str, metric: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let series = |op: &str, name: &str| Series {
        name: name.to_string(),
        points: FIG_3_1_PAGES
            .iter()
            .filter_map(|n| Some((*n as f64, median(rows, &format!("vm.{op}.{n}"))? as f64)))
            .collect(),
    };
    let fig1 = [
        series("allocate", "Baton vm_allocate (Accent ValidateMemory)"),
        series(
            "deallocate",
            "Baton vm_deallocate (Accent InvalidateMemory)",
        ),
    ];
    if fig1.iter().all(|s| s.points.len() == FIG_3_1_PAGES.len()) {
        out.push((
            FIG_3_1_SVG,
            plot::lines(
                "Accent Figure 3-1: allocate and deallocate untouched memory",
                subtitle,
                "pages (4 KiB)",
                metric,
                &fig1,
            ),
        ));
    }
    let copy = |suffix: &str, name: &str| Series {
        name: name.to_string(),
        points: FIG_3_2_PAGES
            .iter()
            .filter_map(|n| {
                Some((
                    *n as f64,
                    median(rows, &format!("vm.copy.{n}{suffix}"))? as f64,
                ))
            })
            .collect(),
    };
    let fig2 = [
        copy("", "Baton vm_copy into new memory (MoveWords-Create)"),
        copy(
            ".move",
            "Baton vm_copy deleting the source (MoveWords-Create-Delete)",
        ),
    ];
    if fig2.iter().all(|s| s.points.len() == FIG_3_2_PAGES.len()) {
        out.push((
            FIG_3_2_SVG,
            plot::lines(
                "Accent Figure 3-2: vm_copy of untouched memory",
                subtitle,
                "pages (4 KiB)",
                metric,
                &fig2,
            ),
        ));
    }
    let ool = |suffix: &str, name: &str| Series {
        name: name.to_string(),
        points: FIG_3_3_SIZES
            .iter()
            .filter_map(|(size, pages)| {
                Some((
                    *pages as f64,
                    median(rows, &format!("ipc.ool.{size}{suffix}"))? as f64,
                ))
            })
            .collect(),
    };
    let fig3 = [
        ool("", "Baton out-of-line copy (MoveWords)"),
        ool(".move", "Baton out-of-line move (MoveWords, DeleteSource)"),
    ];
    if fig3.iter().all(|s| s.points.len() == FIG_3_3_SIZES.len()) {
        out.push((
            FIG_3_3_SVG,
            plot::lines(
                "Accent Figure 3-3: out-of-line data of resident memory, per RPC",
                subtitle,
                "pages (4 KiB)",
                metric,
                &fig3,
            ),
        ));
    }
    out
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    fn row(name: &str, median: u64) -> Row {
        Row {
            name: name.to_string(),
            unit: "instructions".to_string(),
            iterations: 10,
            median,
            min: median,
            max: median,
            cpus: 1,
        }
    }

    fn full() -> Vec<Row> {
        let mut rows = vec![
            row("rpc.null.slow.roundtrip", 5000),
            row("ipc.ool.4k", 12500),
            row("floor.fault.roundtrip", 25),
            row("vm.fault.zero.read", 2000),
            row("vm.fault.zero", 2200),
            row("vm.fault.fill", 1000),
            row("vm.fault.cow", 3000),
            row("file.read.56k", 700_000),
            row("file.read.56k.warm", 70_000),
            row("file.open", 50_000),
            row("ipc.ool.64k", 28000),
            row("ipc.ool.1m", 268000),
            row("ipc.ool.4k.move", 15000),
            row("ipc.ool.64k.move", 35000),
            row("ipc.ool.1m.move", 395000),
        ];
        for n in FIG_3_1_PAGES {
            rows.push(row(&format!("vm.allocate.{n}"), 900 + n));
            rows.push(row(&format!("vm.deallocate.{n}"), 1400 + 2 * n));
        }
        for n in FIG_3_2_PAGES {
            rows.push(row(&format!("vm.copy.{n}"), 2000 + n));
            rows.push(row(&format!("vm.copy.{n}.move"), 2500 + n));
        }
        rows
    }

    #[test]
    fn sets_each_system_against_itself() {
        let vm = vec![
            ("faults".to_string(), 1000),
            ("zero_fills".to_string(), 250),
            ("address_errors".to_string(), 3),
        ];
        let s = section(&full(), &vm, &[FIG_3_1_SVG]);
        // Table 3-2: 12,500 / 5,000; Accent 20 / 2.7.
        assert!(
            s.contains("| **complex ÷ simple** | **7.41** | | **2.50** |"),
            "{s}"
        );
        // Table 3-3: write zero fill 2,200 / 2,000; Accent 3.704 / 3.355.
        assert!(
            s.contains("| Write fault, zero fill | 3.704 | 1.10 | `vm.fault.zero` | 2200 | 1.10 |"),
            "{s}"
        );
        assert!(s.contains("| Read fault, memory fill, large file | 4.504 | 1.34 | — |  |  |"));
        // Table 3-4: 700,000 / 50,000 = 14; Accent 560..1,120 ms against 66 ms.
        assert!(
            s.contains("| **reading the file ÷ requesting it** | **8.5–17.0** | **89.6–201.6** | | **14.0** |"),
            "{s}"
        );
        assert!(s.contains("| `file.read.56k` ÷ 14 | 50000 |"), "{s}");
        // Figure 3-1: 1,024 pages against 1.
        assert!(s.contains("| 1024 | 1924 | 2.14 | 3448 | 2.46 |"), "{s}");
        assert!(s.contains(&format!("]({FIG_3_1_SVG})")));
        // Figure 3-2: 1,024 pages against 1 (3,024 / 2,001; 3,524 / 2,501).
        assert!(s.contains("| 1024 | 3024 | 1.51 | 3524 | 1.41 |"), "{s}");
        assert!(!s.contains(&format!("]({FIG_3_2_SVG})")));
        assert!(!s.contains(&format!("]({FIG_3_3_SVG})")));
        // Figure 3-3: (268,000 - 28,000) / 240 = 1,000 a page; (395,000 - 35,000) / 240 = 1,500.
        assert!(
            s.contains("| without DeleteSource (copy) | 1.05 | 1000 |"),
            "{s}"
        );
        assert!(
            s.contains("| **move ÷ copy** | **1.67** | **1.50** |"),
            "{s}"
        );
        // Table 3-10: shares of each system's own faults.
        assert!(
            s.contains("| faults | 201614 | 100.000% | 1000 | 100.000% |"),
            "{s}"
        );
        assert!(
            s.contains("| CopyOnWrite copies | 151 | 0.075% | — |  |"),
            "{s}"
        );
        // Page counts get no share of the faults.
        assert!(
            s.contains("| pages filled with zeros | 83702 |  | 250 |  |"),
            "{s}"
        );
        assert!(s.contains("`address_errors` 3"), "{s}");
    }

    #[test]
    fn table_3_8_sets_shares_of_each_total() {
        let vm: Vec<(String, u64)> = [
            ("paging_from_free", 600),
            ("paging_reclaimed_pager", 0),
            ("paging_reclaimed_mapped", 300),
            ("paging_reclaimed_unmapped", 100),
            ("paging_scanned", 5000),
            ("paging_spared", 700),
            ("paging_no_store", 0),
            ("thrash_pageins", 200),
            ("thrash_pageouts", 250),
            ("thrash_touches", 1024),
            ("thrash_pages", 512),
            ("thrash_resident", 240),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
        let s = section(&[], &vm, &[]);
        assert!(s.contains("### Table 3-8"), "{s}");
        assert!(
            s.contains("| Allocated from free page list | 84393 | 67.274% | 600 | 60.000% |"),
            "{s}"
        );
        assert!(
            s.contains(
                "| Reclaimed dirty process pages with disk backing | 1876 | 1.495% | — |  |"
            ),
            "{s}"
        );
        assert!(
            s.contains("| **Total physical page allocations** | **125446** | | **1000** | |"),
            "{s}"
        );
        assert!(s.contains("(1.25 page-outs per page-in)"), "{s}");
        assert!(!s.contains("### Table 3-10"));
    }

    #[test]
    fn leaves_out_what_the_run_lacks() {
        assert_eq!(section(&[], &[], &[]), "");
        let only = vec![row("vm.fault.zero.read", 2000)];
        let s = section(&only, &[], &[]);
        assert!(s.contains("### Table 3-3"));
        assert!(!s.contains("### Table 3-2"));
        assert!(!s.contains("### Table 3-4"));
        assert!(!s.contains("### Figure 3-1"));
        assert!(!s.contains("### Table 3-10"));
        assert!(!s.contains("### Table 3-8"));
    }

    #[test]
    fn plots_only_complete_figures() {
        let names: Vec<&str> = plots(&full(), "sub", "instructions")
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(names, [FIG_3_1_SVG, FIG_3_2_SVG, FIG_3_3_SVG]);
        let mut partial = full();
        partial.retain(|r| r.name != "ipc.ool.1m.move");
        let names: Vec<&str> = plots(&partial, "sub", "instructions")
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(names, [FIG_3_1_SVG, FIG_3_2_SVG]);
        for (_, svg) in plots(&full(), "sub", "instructions") {
            assert_eq!(
                plot::unit_tests::check_well_formed(&svg)
                    .first()
                    .map(String::as_str),
                Some("svg")
            );
        }
    }
}

#[cfg(test)]
mod session_tests {
    use super::*;

    #[test]
    fn vmstat_counters_take_the_last_output() {
        let one = |n: u64| {
            format!(
                "BENCHVM faults={n} read_faults=1\nnoise\nshell| BENCHVM zero_fills=2\n\
                 BENCHVM paging_from_free=3\nBENCHVM paging_pageins=4\n"
            )
        };
        let log = format!("{}{}", one(10), one(20));
        let vm = vmstat_counters(&log).unwrap();
        assert_eq!(counter(&vm, "faults"), Some(20));
        assert_eq!(counter(&vm, "zero_fills"), Some(2));
        assert_eq!(counter(&vm, "paging_pageins"), Some(4));
        assert!(vmstat_counters("BENCHVM faults=1\n").is_err());
        assert!(vmstat_counters(&one(1).replace("=3", "=x")).is_err());
    }

    #[test]
    fn tables_say_which_run() {
        let vm = vec![
            ("faults".to_string(), 10),
            ("paging_from_free".to_string(), 5),
        ];
        let t = tables(&vm, &SESSION_RUN);
        assert!(t.contains("Baton (a shell session, 4 KiB pages)"));
        assert!(t.contains("Baton (a shell session) | % of faults"));
        assert!(!t.contains("this benchmark run"));
    }

    /// A log of the shell session's shape: boot line, `swapon`, the working program, the
    /// counters, and the QEMU command the test's log ends with.
    const SESSION: &str = "[kernel] memory: 15 MiB RAM, 4 MiB heap, 971 free frames; SMEP on\n\
        swapon#4| swapon: paging to the disk's swap area: 7936 pages; user memory limited to \
        971 frames (shell: `paging`)\n\
        paging_child#9| paging_child: 3072 pages: 9000 page-outs, 8000 page-ins\n\
        BENCHVM faults=100 read_faults=60 write_faults=40\n\
        BENCHVM pager_fills=30 zero_fills=20\n\
        BENCHVM paging_from_free=300 paging_reclaimed_mapped=90 paging_reclaimed_unmapped=10 \
        paging_reclaimed_pager=100 paging_pageins=25\n\
        BENCHVM paging_no_store=0\n\
        qemu command: qemu-system-x86_64 -machine q35 -m 16M -smp 1\n";

    #[test]
    fn the_session_body_says_what_the_run_was() {
        let body = session_body(SESSION).unwrap();
        assert!(body.starts_with(
            "The run: `cargo xtask test --filter shell_session` in a machine of QEMU `-m 16M` \
             (the kernel's boot line: 15 MiB RAM, 4 MiB heap, 971 free frames), user memory \
             971 frames, a swap area of 7936 pages; the program working several times the \
             memory: 3072 pages: 9000 page-outs, 8000 page-ins."
        ));
        assert!(body.contains("### Table 3-8"));
        assert!(body.contains("### Table 3-10"));
        // 100 of 500 allocations were anonymous pages paged out; 100 file pages dropped.
        assert!(body.contains("In short: 20.000% of the page allocations"));
        assert!(body.contains("100 clean pages of files were dropped, 25 page-ins"));
        assert!(body.contains("and 30 pages from pagers"));
        // A log that lacks a part is an error that names it, not a table with holes.
        for missing in [
            "-m 16M",
            "[kernel] memory:",
            "swapon: paging",
            "| paging_child: ",
        ] {
            let log = SESSION.replace(missing, "something else");
            assert!(session_body(&log).is_err(), "{missing}");
        }
    }
}
