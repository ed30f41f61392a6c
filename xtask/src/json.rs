//! The results files `results/baton.json`, `results/baton-cycles.json` and
//! `results/linux.json` as types, read and written with serde (`docs/benchmarks.md`
//! describes them).
//!
//! The fields are in the files' order. The files are written in one layout, the one the
//! documentation shows: the top object and its arrays and objects one member per line, and
//! anything deeper (one benchmark's object and what it holds) on one line, so that a
//! benchmark is one line of a diff ([`document`]).

use serde::{Deserialize, Serialize};
use std::io;

/// The fields every results file starts with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// What the figures count: `instructions` or `cycles`.
    pub metric: String,
    /// First line of `qemu-system-x86_64 --version`.
    pub qemu: String,
    /// `git rev-parse --short HEAD`, `-dirty` if the tree had changes.
    pub commit: String,
    /// The machine that ran the figures.
    pub cpu: String,
    /// The host's CPU and its number of CPUs.
    pub host_cpu: String,
    pub host_cpus: u64,
}

/// `results/baton.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatonFile {
    #[serde(flatten)]
    pub header: Header,
    /// Fingerprint of the kernel ELF and the initrd.
    pub image: String,
    /// A second run gave the same figures for every row.
    pub repeat_checked: bool,
    /// Whether the cycles pass ran.
    pub cycles: CyclesMeasured,
    pub benchmarks: Vec<BatonRow>,
}

/// `baton.json`'s `cycles`: `{"measured": true, "file": ...}` or
/// `{"measured": false, "why": ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CyclesMeasured {
    pub measured: bool,
    /// The cycles file, when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Why not, when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// One row of `baton.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatonRow {
    pub name: String,
    pub unit: String,
    pub iterations: u64,
    pub median: u64,
    pub min: u64,
    pub max: u64,
    /// CPUs of the boot that measured the row.
    pub cpus: u32,
    /// The row's `BENCHSTAT` line, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<PathCounts>,
}

/// How the kernel's counters changed over a row's recorded iterations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathCounts {
    pub handoffs: u64,
    pub switches: u64,
    pub discards: u64,
    pub recognitions: u64,
}

/// `results/baton-cycles.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CyclesFile {
    #[serde(flatten)]
    pub header: Header,
    pub image: String,
    /// The TSC rate the kernel calibrated (`null` if no log said).
    pub tsc_mhz: Option<u64>,
    pub warmup_boots: u64,
    pub batches: u64,
    pub benchmarks: Vec<CyclesRow>,
}

/// One row of `baton-cycles.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CyclesRow {
    pub name: String,
    pub unit: String,
    pub iterations: u64,
    pub median: u64,
    pub batch_min: u64,
    pub batch_max: u64,
    pub min: u64,
    pub max: u64,
    pub cpus: u32,
    pub batch_medians: Vec<u64>,
}

/// `results/linux.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinuxFile {
    #[serde(flatten)]
    pub header: Header,
    pub repeat_checked: bool,
    /// Debian package and version of the guest kernel.
    pub kernel: String,
    pub cmdline: String,
    pub busybox: String,
    pub gcc: String,
    pub qemu_command: String,
    /// The guest's `LINUX key=value` facts.
    pub guest: Vec<String>,
    /// Its `LINUXINFO` lines.
    pub remarks: Vec<String>,
    pub benchmarks: Vec<LinuxRow>,
}

/// One row of `linux.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinuxRow {
    pub name: String,
    pub unit: String,
    pub iterations: u64,
    pub median: u64,
    pub min: u64,
    pub max: u64,
}

/// `value` as a results file: see the module's documentation for the layout; a final
/// newline.
pub fn document(value: &impl Serialize) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Layout::default());
    // The types above hold only strings, numbers, options and sequences: always
    // serializable.
    value
        .serialize(&mut ser)
        .expect("a results file serializes");
    out.push(b'\n');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Reads a results file of type `T`.
#[cfg_attr(not(test), allow(dead_code))]
pub fn parse<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| format!("not a results file: {e}"))
}

/// Arrays and objects nested less deeply than this are written one member per line.
const MULTILINE_DEPTH: usize = 2;

/// The results files' layout, as a serde_json formatter: containers at depth 0 and 1 one
/// member per line, indented by two spaces a level; deeper ones on one line with `, `
/// between members; `": "` after keys. Control characters are escaped as `\n`, `\r`,
/// `\t` or `\u00XX`.
#[derive(Default)]
struct Layout {
    /// Containers open around the current value.
    depth: usize,
    /// Whether the innermost open container has a member yet.
    has_value: bool,
}

impl Layout {
    /// Whether the innermost open container is written one member per line.
    fn multiline(&self) -> bool {
        self.depth <= MULTILINE_DEPTH
    }

    fn indent<W: ?Sized + io::Write>(w: &mut W, depth: usize) -> io::Result<()> {
        (0..depth).try_for_each(|_| w.write_all(b"  "))
    }

    fn open<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        let multiline = self.multiline();
        self.depth -= 1;
        if multiline && self.has_value {
            w.write_all(b"\n")?;
            Self::indent(w, self.depth)?;
        }
        w.write_all(bracket)
    }

    fn member<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        if self.multiline() {
            w.write_all(b"\n")?;
            Self::indent(w, self.depth)
        } else if first {
            Ok(())
        } else {
            w.write_all(b" ")
        }
    }
}

impl serde_json::ser::Formatter for Layout {
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.member(w, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.member(w, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        escape: serde_json::ser::CharEscape,
    ) -> io::Result<()> {
        use serde_json::ser::CharEscape;
        let s: &[u8] = match escape {
            CharEscape::Quote => b"\\\"",
            CharEscape::ReverseSolidus => b"\\\\",
            CharEscape::LineFeed => b"\\n",
            CharEscape::CarriageReturn => b"\\r",
            CharEscape::Tab => b"\\t",
            // `\b` and `\f` as the other control characters.
            CharEscape::Backspace => b"\\u0008",
            CharEscape::FormFeed => b"\\u000c",
            CharEscape::Solidus => b"/",
            CharEscape::AsciiControl(byte) => {
                return write!(w, "\\u{:04x}", byte);
            }
        };
        w.write_all(s)
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    fn header() -> Header {
        Header {
            metric: "instructions".into(),
            qemu: "QEMU emulator version 7.2.0 \"x\"".into(),
            commit: "abc1234-dirty".into(),
            cpu: "QEMU TCG -icount shift=0".into(),
            host_cpu: "Intel(R) Xeon(R) Processor".into(),
            host_cpus: 2,
        }
    }

    #[test]
    fn layout() {
        let doc = BatonFile {
            header: header(),
            image: "0123456789abcdef".into(),
            repeat_checked: false,
            cycles: CyclesMeasured {
                measured: false,
                why: Some("tab\there, bell\u{7}, back\u{8}, é".into()),
                file: None,
            },
            benchmarks: vec![BatonRow {
                name: "a.b".into(),
                unit: "instructions".into(),
                iterations: 10,
                median: 5,
                min: 4,
                max: 6,
                cpus: 1,
                paths: Some(PathCounts {
                    handoffs: 1,
                    switches: 2,
                    discards: 3,
                    recognitions: 4,
                }),
            }],
        };
        assert_eq!(
            document(&doc),
            r#"{
  "metric": "instructions",
  "qemu": "QEMU emulator version 7.2.0 \"x\"",
  "commit": "abc1234-dirty",
  "cpu": "QEMU TCG -icount shift=0",
  "host_cpu": "Intel(R) Xeon(R) Processor",
  "host_cpus": 2,
  "image": "0123456789abcdef",
  "repeat_checked": false,
  "cycles": {
    "measured": false,
    "why": "tab\there, bell\u0007, back\u0008, é"
  },
  "benchmarks": [
    {"name": "a.b", "unit": "instructions", "iterations": 10, "median": 5, "min": 4, "max": 6, "cpus": 1, "paths": {"handoffs": 1, "switches": 2, "discards": 3, "recognitions": 4}}
  ]
}
"#
        );
        let empty = BatonFile {
            benchmarks: vec![],
            ..doc.clone()
        };
        assert!(document(&empty).ends_with("  },\n  \"benchmarks\": []\n}\n"));
        assert_eq!(parse::<BatonFile>(&document(&doc)), Ok(doc));
    }

    #[test]
    fn round_trips() {
        let cycles = CyclesFile {
            header: Header {
                metric: "cycles".into(),
                ..header()
            },
            image: "x".into(),
            tsc_mhz: None,
            warmup_boots: 1,
            batches: 5,
            benchmarks: vec![CyclesRow {
                name: "floor.syscall.null".into(),
                unit: "cycles".into(),
                iterations: 1000,
                median: 200,
                batch_min: 190,
                batch_max: 210,
                min: 50,
                max: 90000,
                cpus: 1,
                batch_medians: vec![200, 210, 190, 205, 200],
            }],
        };
        let text = document(&cycles);
        assert!(text.contains("  \"tsc_mhz\": null,\n"), "{text}");
        assert!(text.contains("\"batch_medians\": [200, 210, 190, 205, 200]}\n"));
        assert_eq!(parse::<CyclesFile>(&text), Ok(cycles));

        let linux = LinuxFile {
            header: header(),
            repeat_checked: true,
            kernel: "linux-image-6.1".into(),
            cmdline: "console=ttyS0".into(),
            busybox: "busybox 1.35".into(),
            gcc: "gcc 12".into(),
            qemu_command: "qemu-system-x86_64 -append 'a b'".into(),
            guest: vec!["clocksource=tsc".into()],
            remarks: vec![],
            benchmarks: vec![LinuxRow {
                name: "linux.fork.exit".into(),
                unit: "instructions".into(),
                iterations: 1000,
                median: 261081,
                min: 261081,
                max: 261088,
            }],
        };
        let text = document(&linux);
        assert!(text.contains("  \"guest\": [\n    \"clocksource=tsc\"\n  ],\n"));
        assert!(text.contains("  \"remarks\": [],\n"));
        assert_eq!(parse::<LinuxFile>(&text), Ok(linux));
    }

    #[test]
    fn reads_what_others_write() {
        // Any JSON layout reads, and fields the types do not know are ignored.
        let text = r#"{"metric":"instructions","qemu":"q","commit":"c","cpu":"u",
            "host_cpu":"h","host_cpus":1,"image":"i","repeat_checked":true,
            "cycles":{"measured":true,"file":"baton-cycles.json"},"later":1,
            "benchmarks":[{"name":"n","unit":"instructions","iterations":1,"median":2,
            "min":1,"max":3,"cpus":2}]}"#;
        let file: BatonFile = parse(text).unwrap();
        assert_eq!(file.cycles.file.as_deref(), Some("baton-cycles.json"));
        assert_eq!(file.benchmarks[0].paths, None);
        assert_eq!(file.benchmarks[0].cpus, 2);
        assert!(parse::<BatonFile>("{}").is_err());
    }
}
