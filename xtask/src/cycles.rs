//! The cycles pass of `cargo xtask bench`: the same benchmark image under hardware KVM.
//!
//! Under `-enable-kvm -cpu host`, without `-icount`, the guest's `rdtsc` reads the host
//! CPU's time-stamp counter, so the `bench` program's deltas are **TSC cycles** (ticks of
//! the constant-rate TSC, not core clock cycles) of a real CPU. The program is unchanged: it
//! still runs 100 warm-up and 1,000 recorded iterations per benchmark and prints the lower
//! median, min and max (its lines say `unit=instructions`, which under KVM is wrong; the
//! rows are relabelled `cycles` here). Unlike instruction counts these figures vary from
//! boot to boot, so the image is booted [`WARMUP_BOOTS`] time(s) without keeping the
//! figures (the host's caches, QEMU's and KVM's first-use paths), then [`BATCHES`] times,
//! and each row reports the median of the batches' medians and their spread.
//!
//! Only real hardware virtualization is used ([`decide`]): the `kvm_intel` or `kvm_amd`
//! module must be loaded. `/dev/kvm` alone proves nothing: on the project's development and
//! CI machines it is `kvm_pvm`, a software hypervisor that cannot run Baton and whose
//! "cycles" would not be a CPU's. Everything that decides and builds here is a pure
//! function, tested on hosts without KVM.

use crate::bench::{self, Results};
use crate::build::Images;
use crate::qemu::{self, Accel, Machine};
use std::path::Path;

/// Boots whose figures are not kept, before the measured ones.
pub const WARMUP_BOOTS: usize = 1;
/// Measured boots (batches) of each CPU count.
pub const BATCHES: usize = 5;

/// What `/dev/kvm` is like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DevKvm {
    /// It does not exist.
    Missing,
    /// It exists but cannot be opened for reading and writing (the reason).
    Unusable(String),
    /// It opens.
    Usable,
}

/// The facts about the host that decide whether the cycles pass runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// `BATON_TCG` is set (to anything but empty or `0`): TCG only.
    pub tcg_forced: bool,
    /// The kernel modules among `kvm_intel`, `kvm_amd` and `kvm_pvm` that are loaded
    /// (`/sys/module/<name>` exists).
    pub modules: Vec<&'static str>,
    /// `/dev/kvm`.
    pub dev_kvm: DevKvm,
}

/// The modules [`Host::probe`] looks for.
const MODULES: [&str; 3] = ["kvm_intel", "kvm_amd", "kvm_pvm"];

impl Host {
    /// Looks at this host.
    pub fn probe() -> Host {
        let dev = Path::new("/dev/kvm");
        let dev_kvm = if !dev.exists() {
            DevKvm::Missing
        } else {
            match std::fs::OpenOptions::new().read(true).write(true).open(dev) {
                Ok(_) => DevKvm::Usable,
                Err(e) => DevKvm::Unusable(e.to_string()),
            }
        };
        Host {
            tcg_forced: qemu::tcg_forced_by_env(),
            modules: MODULES
                .into_iter()
                .filter(|m| Path::new("/sys/module").join(m).exists())
                .collect(),
            dev_kvm,
        }
    }
}

/// Whether to measure cycles: the hardware KVM module to use, or why not.
pub fn decide(host: &Host) -> Result<&'static str, String> {
    if host.tcg_forced {
        return Err("BATON_TCG is set, which asks for TCG only".into());
    }
    let Some(module) = host
        .modules
        .iter()
        .copied()
        .find(|m| *m == "kvm_intel" || *m == "kvm_amd")
    else {
        return Err(if host.modules.contains(&"kvm_pvm") {
            "no hardware KVM on this host: neither kvm_intel nor kvm_amd is loaded; \
             /dev/kvm is kvm_pvm, a software hypervisor that cannot run Baton and whose TSC \
             is not a CPU's"
                .into()
        } else {
            "no hardware KVM on this host: neither the kvm_intel nor the kvm_amd module is \
             loaded"
                .into()
        });
    };
    match &host.dev_kvm {
        DevKvm::Usable => Ok(module),
        DevKvm::Missing => Err(format!("{module} is loaded but /dev/kvm does not exist")),
        DevKvm::Unusable(e) => Err(format!(
            "{module} is loaded but /dev/kvm cannot be opened: {e}"
        )),
    }
}

/// The machine of one cycles boot: the benchmark image with `smp` CPUs under
/// `-enable-kvm -cpu host`, without `-icount`.
pub fn machine(images: &Images, smp: u32) -> Machine<'_> {
    Machine {
        images,
        accel: Accel::Kvm,
        smp,
        cmdline: qemu::cmdline("bench", true, &[crate::bench::PRIV.to_string()]),
        icount: false,
        gdb: None,
        disk: None,
    }
}

/// The log file stem of boot `index` (0-based, the warm-up boots first): `kvm.warmup<n>`
/// or `kvm.<batch>`, batches counted from 1.
pub fn log_stem(index: usize) -> String {
    if index < WARMUP_BOOTS {
        format!("kvm.warmup{}", index + 1)
    } else {
        format!("kvm.{}", index - WARMUP_BOOTS + 1)
    }
}

/// One benchmark in cycles, over the batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleRow {
    /// Dotted name (as in the instruction rows).
    pub name: String,
    /// Recorded iterations per batch.
    pub iterations: u64,
    /// CPUs of the boots that measured it.
    pub cpus: u32,
    /// Each batch's median, in the order run.
    pub medians: Vec<u64>,
    /// The lower median of [`CycleRow::medians`].
    pub median: u64,
    /// The smallest per-iteration figure of any batch.
    pub min: u64,
    /// The largest per-iteration figure of any batch.
    pub max: u64,
}

impl CycleRow {
    /// The smallest batch median.
    pub fn batch_min(&self) -> u64 {
        self.medians.iter().copied().min().unwrap_or(0)
    }

    /// The largest batch median.
    pub fn batch_max(&self) -> u64 {
        self.medians.iter().copied().max().unwrap_or(0)
    }
}

/// The result of the cycles pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cycles {
    /// The hardware KVM module.
    pub module: String,
    /// The TSC frequency the kernel calibrated, in MHz: the lower median over the measured
    /// one-CPU boots (`None` if no log said).
    pub tsc_mhz: Option<u64>,
    /// Every benchmark, in the order of the first batch.
    pub rows: Vec<CycleRow>,
}

/// The lower median of `values` (0 if empty).
fn lower_median(values: &[u64]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0)
}

/// Joins the batches' rows: every batch must have the same benchmarks.
pub fn aggregate(batches: &[Results]) -> Result<Vec<CycleRow>, String> {
    let Some(first) = batches.first() else {
        return Err("no batch".into());
    };
    let mut rows = Vec::new();
    for r in &first.rows {
        let mut medians = Vec::new();
        let (mut min, mut max) = (u64::MAX, 0);
        for (i, batch) in batches.iter().enumerate() {
            let b = batch
                .rows
                .iter()
                .find(|b| b.name == r.name)
                .ok_or_else(|| format!("{}: missing from batch {}", r.name, i + 1))?;
            medians.push(b.median);
            min = min.min(b.min);
            max = max.max(b.max);
        }
        rows.push(CycleRow {
            name: r.name.clone(),
            iterations: r.iterations,
            cpus: r.cpus,
            median: lower_median(&medians),
            medians,
            min,
            max,
        });
    }
    for (i, batch) in batches.iter().enumerate() {
        if let Some(extra) = batch
            .rows
            .iter()
            .find(|b| !first.rows.iter().any(|r| r.name == b.name))
        {
            return Err(format!(
                "{}: missing from batch 1 but in batch {}",
                extra.name,
                i + 1
            ));
        }
    }
    Ok(rows)
}

/// The TSC frequency in the kernel's boot line `[kernel] TSC <n> MHz, ...`.
pub fn tsc_mhz(log: &str) -> Option<u64> {
    log.lines().find_map(|l| {
        let rest = l.strip_prefix("[kernel] TSC ")?;
        rest.split_once(" MHz")?.0.trim().parse().ok()
    })
}

/// Boots the image [`WARMUP_BOOTS`] + [`BATCHES`] times with each CPU count of
/// [`bench::SMP`] under hardware KVM (`module`), logging to `results/kvm.*.log`, and joins
/// the measured boots.
pub fn measure(
    images: &Images,
    qemu_bin: &Path,
    dir: &Path,
    module: &str,
) -> Result<Cycles, String> {
    let mut batches = Vec::new();
    let mut mhz = Vec::new();
    for index in 0..WARMUP_BOOTS + BATCHES {
        let stem = log_stem(index);
        let r = bench::boot_all(qemu_bin, dir, &stem, |smp| machine(images, smp))?;
        if index >= WARMUP_BOOTS {
            let log = std::fs::read_to_string(dir.join(format!("{stem}.log"))).unwrap_or_default();
            mhz.extend(tsc_mhz(&log));
            batches.push(r);
        }
    }
    Ok(Cycles {
        module: module.to_string(),
        tsc_mhz: (!mhz.is_empty()).then(|| lower_median(&mhz)),
        rows: aggregate(&batches)?,
    })
}

#[cfg(test)]
mod unit_tests {
    use super::*;
    use crate::bench::Row;
    use std::path::PathBuf;

    fn host(modules: &[&'static str], dev_kvm: DevKvm) -> Host {
        Host {
            tcg_forced: false,
            modules: modules.to_vec(),
            dev_kvm,
        }
    }

    #[test]
    fn decides_only_on_hardware_kvm() {
        assert_eq!(
            decide(&host(&["kvm_intel"], DevKvm::Usable)),
            Ok("kvm_intel")
        );
        assert_eq!(decide(&host(&["kvm_amd"], DevKvm::Usable)), Ok("kvm_amd"));
        // This project's machines: /dev/kvm opens, but it is kvm_pvm.
        let err = decide(&host(&["kvm_pvm"], DevKvm::Usable)).unwrap_err();
        assert!(err.contains("kvm_pvm"), "{err}");
        let err = decide(&host(&[], DevKvm::Missing)).unwrap_err();
        assert!(
            err.contains("neither the kvm_intel nor the kvm_amd"),
            "{err}"
        );
        let err = decide(&host(&["kvm_intel"], DevKvm::Missing)).unwrap_err();
        assert!(err.contains("/dev/kvm does not exist"), "{err}");
        let err = decide(&host(&["kvm_amd"], DevKvm::Unusable("denied".into()))).unwrap_err();
        assert!(err.contains("cannot be opened: denied"), "{err}");
        let forced = Host {
            tcg_forced: true,
            ..host(&["kvm_intel"], DevKvm::Usable)
        };
        assert!(decide(&forced).unwrap_err().contains("BATON_TCG"));
    }

    #[test]
    fn kvm_command_line() {
        let images = Images {
            kernel: PathBuf::from("/k/kernel"),
            initrd: PathBuf::from("/k/initrd.tar"),
            programs: vec!["bench".into()],
        };
        for smp in [1, 2] {
            let cmd = machine(&images, smp).command(Path::new("qemu-system-x86_64"));
            let args: Vec<String> = cmd
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let has = |pair: [&str; 2]| args.windows(2).any(|w| w == pair);
            assert!(has(["-enable-kvm", "-cpu"]), "{args:?}");
            assert!(has(["-cpu", "host"]), "{args:?}");
            assert!(has(["-smp", &smp.to_string()]), "{args:?}");
            assert!(
                has(["-append", "init=bench shutdown priv=bench"]),
                "{args:?}"
            );
            assert!(has(["-kernel", "/k/kernel"]), "{args:?}");
            for absent in ["-icount", "tcg", "max", "-s", "-S"] {
                assert!(!args.iter().any(|a| a == absent), "{absent} in {args:?}");
            }
        }
        assert_eq!(log_stem(0), "kvm.warmup1");
        assert_eq!(log_stem(WARMUP_BOOTS), "kvm.1");
        assert_eq!(
            log_stem(WARMUP_BOOTS + BATCHES - 1),
            format!("kvm.{BATCHES}")
        );
    }

    fn batch(figures: &[(&str, u64, u64, u64)]) -> Results {
        Results {
            rows: figures
                .iter()
                .map(|&(name, median, min, max)| Row {
                    name: name.into(),
                    unit: "instructions".into(),
                    iterations: 1000,
                    median,
                    min,
                    max,
                    cpus: 1,
                })
                .collect(),
            paths: Vec::new(),
            done: true,
            vm: Vec::new(),
        }
    }

    #[test]
    fn aggregates_batches() {
        let batches = [
            batch(&[("a", 100, 90, 500), ("b", 10, 9, 11)]),
            batch(&[("a", 120, 95, 900), ("b", 12, 8, 20)]),
            batch(&[("a", 110, 80, 300), ("b", 11, 10, 12)]),
            batch(&[("a", 105, 99, 400), ("b", 13, 12, 14)]),
        ];
        let rows = aggregate(&batches).unwrap();
        assert_eq!(rows.len(), 2);
        let a = &rows[0];
        assert_eq!(a.medians, [100, 120, 110, 105]);
        // The lower median of four: the second smallest.
        assert_eq!((a.median, a.batch_min(), a.batch_max()), (105, 100, 120));
        assert_eq!((a.min, a.max), (80, 900));
        assert_eq!(rows[1].median, 11);
        let missing = [batches[0].clone(), batch(&[("a", 1, 1, 1)])];
        assert!(aggregate(&missing)
            .unwrap_err()
            .contains("b: missing from batch 2"));
        let extra = [batch(&[("a", 1, 1, 1)]), batches[0].clone()];
        assert!(aggregate(&extra)
            .unwrap_err()
            .contains("b: missing from batch 1"));
        assert!(aggregate(&[]).is_err());
    }

    #[test]
    fn reads_tsc_frequency() {
        let log = "[kernel] Baton 0.1.0 booting\n[kernel] TSC 2994 MHz, timer 100 Hz\n";
        assert_eq!(tsc_mhz(log), Some(2994));
        assert_eq!(tsc_mhz("[kernel] TSC x MHz"), None);
        assert_eq!(tsc_mhz(""), None);
    }
}
