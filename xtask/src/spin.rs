//! SPIN's tables in the bench report (Bershad et al., SOSP 1995): Table 2 (protected
//! communication), Table 4 (the Appel–Li suite) and Table 7 (the size of extensions),
//! Baton's rows beside the paper's figures. SPIN's are microseconds on a 133 MHz Alpha,
//! Baton's instructions: each system's operations are also set against one of its own
//! (the system call), and those ratios compared. Table 7 is read from the extension
//! crates' sources and the WebAssembly modules `cargo xtask build` made.

use crate::bench::Row;
use crate::build::EXTENSIONS;
use std::fmt::Write as _;
use std::path::Path;

/// SPIN's Table 2 (µs): operation, SPIN's figure, Baton's row.
const TABLE_2: &[(&str, f64, &str)] = &[
    ("Protected in-kernel call", 0.13, "spin.call.protected"),
    (
        "Protected in-kernel call (WebAssembly)",
        0.13,
        "spin.call.protected.wasm",
    ),
    ("System call", 4.0, "spin.syscall.event"),
    ("Cross-address space call", 89.0, "rpc.null.migrating"),
];

/// SPIN's Table 3 (µs): operation, kernel, user (layered), user (integrated); Baton's
/// kernel threads, the layered C-Threads library, the integrated package, Sting's
/// user-level threads, Linux's pthreads.
const TABLE_3: &[(&str, [f64; 3], [&str; 5])] = &[
    (
        "Fork-Join",
        [22.0, 262.0, 111.0],
        [
            "thread.create_exit",
            "spin.thread.forkjoin.layered",
            "spin.thread.forkjoin",
            "sting.fork_value",
            "linux.thread.create_join",
        ],
    ),
    (
        "Ping-Pong",
        [17.0, 159.0, 85.0],
        [
            "sync.waitwake.pingpong",
            "spin.thread.pingpong.layered",
            "spin.thread.pingpong",
            "",
            "linux.condvar.pingpong",
        ],
    ),
];

/// SPIN's Table 4 (µs, SPIN's column): case, figure, Baton's row stem.
const TABLE_4: &[(&str, f64, &str)] = &[
    ("Dirty", 2.0, "spin.vm.dirty"),
    ("Fault", 29.0, "spin.vm.fault"),
    ("Trap", 7.0, "spin.vm.trap"),
    ("Prot1", 16.0, "spin.vm.prot1"),
    ("Prot100", 213.0, "spin.vm.prot100"),
    ("Unprot100", 214.0, "spin.vm.unprot100"),
    ("Appel1", 39.0, "spin.vm.appel1"),
    ("Appel2", 29.0, "spin.vm.appel2"),
];

/// SPIN's Table 7, the lines that have a Baton counterpart: component, source lines,
/// text bytes, data bytes.
const TABLE_7: &[(&str, u64, u64, u64)] = &[
    ("NULL syscall", 19, 96, 656),
    ("CThreads", 219, 2480, 1792),
    ("VM workload", 263, 5712, 1472),
];

/// The built-in extensions (Rust compiled into the kernel), for Table 7: the name they
/// are exported under, and the module of `kernel/src/extension/` whose `mod ext` holds
/// their code.
const BUILTIN: &[(&str, &str)] = &[
    (
        "builtin.null_syscall, builtin.caller, builtin.callee",
        "builtin",
    ),
    ("builtin.cthreads", "cthreads"),
    ("builtin.appel", "translation"),
    ("builtin.strand", "strand"),
    ("builtin.physaddr", "reclaim"),
];

/// Non-blank lines of the `mod ext { ... }` block of a built-in extension's module (the
/// extension's own code, which forbids `unsafe`): from its opening line to the first
/// closing brace at the start of a line.
fn ext_block_lines(text: &str) -> Option<u64> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("mod ext {"));
    lines.next()?;
    let mut n = 1;
    for l in lines {
        if !l.trim().is_empty() {
            n += 1;
        }
        if l.starts_with('}') {
            return Some(n);
        }
    }
    None
}

/// Bytes of a built-in extension's code and data in the kernel ELF: the function (text)
/// and object (data) symbols of `baton_kernel::extension::<module>::ext`, and the
/// module's handler wrappers (`h_*`, the procedures the dispatcher calls, into which the
/// compiler inlines most of `ext`). Symbols are matched by their mangled names (each
/// path component as its length and text).
fn builtin_sizes(elf: &[u8], module: &str) -> Option<(u64, u64)> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let file = object::File::parse(elf).ok()?;
    let stem = format!("_ZN12baton_kernel9extension{}{module}", module.len());
    let (mut text, mut data) = (0, 0);
    for sym in file.symbols() {
        let Ok(name) = sym.name() else { continue };
        let Some(rest) = name.strip_prefix(&stem) else {
            continue;
        };
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let item = &rest[digits..];
        if !(item.starts_with("ext") && digits == 1 || item.starts_with("h_")) {
            continue;
        }
        match sym.kind() {
            SymbolKind::Text => text += sym.size(),
            SymbolKind::Data => data += sym.size(),
            _ => {}
        }
    }
    Some((text, data))
}

fn median(rows: &[Row], name: &str) -> Option<u64> {
    rows.iter().find(|r| r.name == name).map(|r| r.median)
}

fn cell(v: Option<u64>) -> String {
    v.map_or_else(|| "—".to_string(), |v| v.to_string())
}

/// The sizes of a WebAssembly module's code section (its functions' bodies: SPIN's
/// "text") and data section (its initialised data), in bytes; `None` when `bytes` is not
/// a module.
pub fn wasm_sizes(bytes: &[u8]) -> Option<(u64, u64)> {
    let mut rest = bytes.strip_prefix(b"\0asm\x01\0\0\0")?;
    let (mut code, mut data) = (0, 0);
    while let Some((&id, after)) = rest.split_first() {
        let (len, after) = leb128(after)?;
        let body = after.get(..usize::try_from(len).ok()?)?;
        match id {
            10 => code += len,
            11 => data += len,
            _ => {}
        }
        rest = after.get(body.len()..)?;
    }
    Some((code, data))
}

/// An unsigned LEB128 number and what follows it.
fn leb128(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, bytes.get(i + 1..)?));
        }
    }
    None
}

/// Non-blank lines of `path`.
fn source_lines(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.lines().filter(|l| !l.trim().is_empty()).count() as u64)
}

/// The report's SPIN section (Markdown), or an empty string when the run has none of its
/// rows. `root` is the workspace (for Table 7).
pub fn section(rows: &[Row], root: &Path) -> String {
    if median(rows, "spin.syscall.event").is_none() {
        return String::new();
    }
    let mut out = String::from(
        "\n## SPIN (Bershad et al., SOSP 1995)\n\n\
         SPIN's figures are microseconds on a 133 MHz Alpha, Baton's instructions under \
         QEMU's `-icount`. Beside the figures, each operation divided by the same \
         system's system call added by an extension (SPIN's Table 2, line 2; Baton's \
         `spin.syscall.event`).\n",
    );
    let sys = median(rows, "spin.syscall.event").unwrap_or(1).max(1);
    out.push_str(
        "\n### Table 2: protected communication\n\n\
         | operation | SPIN (µs) | ÷ system call | Baton row | Baton (instructions) | ÷ system call |\n\
         |---|---:|---:|---|---:|---:|\n",
    );
    for (op, us, row) in TABLE_2 {
        let v = median(rows, row);
        let _ = writeln!(
            out,
            "| {op} | {us} | {:.3} | `{row}` | {} | {} |",
            us / 4.0,
            cell(v),
            v.map_or_else(
                || "—".to_string(),
                |v| format!("{:.3}", v as f64 / sys as f64)
            )
        );
    }
    out.push_str(
        "\nBaton's protected in-kernel call is a built-in extension's call into the \
         procedure another built-in domain exports, through the import a `Resolve` bound \
         (`spin.call.local`, the same loop with a direct Rust call, is the comparison); \
         `.wasm` is a WebAssembly extension's call into another module's export (`wasmi`, \
         each module in its own store). SPIN's was a Modula-3 procedure call. Baton's \
         cross-address-space call is the migrating RPC.\n",
    );
    out.push_str(
        "\n### Table 3: thread management\n\n\
         | operation | SPIN kernel (µs) | SPIN user, layered | SPIN user, integrated | \
         Baton kernel threads | C-Threads, layered | `builtin.cthreads` (integrated) | \
         Sting (user) | Linux pthreads |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (op, us, names) in TABLE_3 {
        let [k, l, i] = us;
        let cells: Vec<String> = names
            .iter()
            .map(|n| match median(rows, n) {
                Some(v) => format!("{v} (`{n}`)"),
                None => "—".to_string(),
            })
            .collect();
        let _ = writeln!(out, "| {op} | {k} | {l} | {i} | {} |", cells.join(" | "));
    }
    out.push_str(
        "\nBaton's columns are instructions: its kernel threads through the base system \
         calls (`thread_create`, `wait`/`wake`); SPIN's layered C-Threads, a user-level \
         library (`baton_rt::spin::layered`: join records and condition variables in user \
         memory, a mutex) over those calls; SPIN's integrated C-Threads as a built-in \
         extension whose procedures are system calls added on `Trap.SystemCall` \
         (`docs/extensions.md`); Sting's user-level threads. Ping-pong is one round \
         trip.\n",
    );
    out.push_str(
        "\n### Table 4: virtual memory (the Appel–Li suite)\n\n\
         | case | SPIN (µs) | Baton, WebAssembly handler | built-in handler | exception port |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for (case, us, row) in TABLE_4 {
        let _ = writeln!(
            out,
            "| {case} | {us} | {} | {} | {} |",
            cell(median(rows, row)),
            cell(median(rows, &format!("{row}.builtin"))),
            cell(median(rows, &format!("{row}.user"))),
        );
    }
    out.push_str(
        "\n### Table 7: the size of extensions\n\n\
         | extension | source lines | text (bytes) | data (bytes) |\n\
         |---|---:|---:|---:|\n",
    );
    for (name, lines, text, data) in TABLE_7 {
        let _ = writeln!(out, "| SPIN: {name} | {lines} | {text} | {data} |");
    }
    for crate_name in EXTENSIONS {
        let dir = crate_name.replace('-', "_");
        let lines = source_lines(&root.join("extensions").join(&dir).join("src/lib.rs"));
        let module = root
            .join("target/extensions/wasm32-unknown-unknown/release")
            .join(format!("{dir}.wasm"));
        let sizes = std::fs::read(&module).ok().and_then(|b| wasm_sizes(&b));
        let _ = writeln!(
            out,
            "| Baton: `{dir}` (WebAssembly) | {} | {} | {} |",
            cell(lines),
            cell(sizes.map(|s| s.0)),
            cell(sizes.map(|s| s.1)),
        );
    }
    let elf = std::fs::read(crate::build::KERNEL.out_dir().join("baton-kernel")).ok();
    for (name, module) in BUILTIN {
        let lines = std::fs::read_to_string(
            root.join("kernel/src/extension")
                .join(format!("{module}.rs")),
        )
        .ok()
        .and_then(|t| ext_block_lines(&t));
        let sizes = elf.as_deref().and_then(|e| builtin_sizes(e, module));
        let _ = writeln!(
            out,
            "| Baton: `{name}` (built in) | {} | {} | {} |",
            cell(lines),
            cell(sizes.map(|s| s.0)),
            cell(sizes.map(|s| s.1)),
        );
    }
    out.push_str(
        "\nBaton's text is the module's code section (WebAssembly, which `wasmi` compiles \
         to its own instructions when the module is created), its data the data section; \
         source lines are the crate's non-blank lines, comments included. `null_syscall` \
         is SPIN's NULL syscall extension and more (handlers of the other events and the \
         malicious ones the tests use), `appel` the VM workload's handlers with \
         `PhysAddr.Reclaim`'s and the malicious ones. A built-in extension's source lines \
         are its `mod ext` block (the code that forbids `unsafe`; the wrappers that hand it \
         the interface are not counted), its text the kernel's functions of that block and \
         its handler wrappers (`h_*`, into which the compiler inlines most of it), its data \
         its static objects: `builtin.cthreads` is SPIN's CThreads line, `builtin.appel` \
         the VM workload's.\n",
    );
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

    #[test]
    fn sections_of_a_module_are_measured() {
        // Header, a type section (3 bytes), a code section of 130 bytes (a two-byte
        // length), a data section of 5.
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        m.extend([1, 3, 0, 0, 0]);
        m.extend([10, 0x82, 0x01]);
        m.extend(std::iter::repeat_n(0u8, 130));
        m.extend([11, 5, 1, 2, 3, 4, 5]);
        assert_eq!(wasm_sizes(&m), Some((130, 5)));
        // Cut short, or not a module.
        assert_eq!(wasm_sizes(&m[..m.len() - 1]), None);
        assert_eq!(wasm_sizes(b"\0asn\x01\0\0\0"), None);
        assert_eq!(wasm_sizes(b"\0asm\x01\0\0\0"), Some((0, 0)));
    }

    #[test]
    fn a_builtin_extension_is_its_ext_block() {
        let text = "use x;\n\nmod ext {\n    #![forbid(unsafe_code)]\n\n    fn f() {\n    }\n}\nfn g() {}\n";
        assert_eq!(ext_block_lines(text), Some(5));
        assert_eq!(ext_block_lines("fn g() {}\n"), None);
        assert_eq!(ext_block_lines("mod ext {\n    fn f() {}\n"), None);
    }

    #[test]
    fn the_section_sets_rows_beside_the_paper() {
        let rows = vec![
            row("spin.syscall.event", 300),
            row("spin.call.protected", 1500),
            row("spin.thread.forkjoin", 4000),
            row("spin.thread.forkjoin.layered", 6000),
            row("spin.vm.fault", 2500),
            row("spin.vm.fault.builtin", 1500),
        ];
        let s = section(&rows, Path::new("/nonexistent"));
        assert!(
            s.contains("| System call | 4 | 1.000 | `spin.syscall.event` | 300 | 1.000 |"),
            "{s}"
        );
        assert!(s.contains("| Protected in-kernel call | 0.13 | 0.033 | `spin.call.protected` | 1500 | 5.000 |"), "{s}");
        assert!(s.contains("| Fault | 29 | 2500 | 1500 | — |"), "{s}");
        assert!(
            s.contains(
                "| Fork-Join | 22 | 262 | 111 | — | 6000 (`spin.thread.forkjoin.layered`) | 4000 (`spin.thread.forkjoin`) | — | — |"
            ),
            "{s}"
        );
        assert!(
            s.contains("| Baton: `null_syscall` (WebAssembly) | — | — | — |"),
            "{s}"
        );
        assert!(section(&[row("rpc.null.fast", 1)], Path::new("/")).is_empty());
    }
}
