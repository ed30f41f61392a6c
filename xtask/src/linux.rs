//! The Linux side of `cargo xtask bench`: the same kind of micro-operations as Baton's
//! `bench` program, measured in a Linux guest under the same QEMU settings and counted in
//! instructions (`cargo xtask bench-linux` runs it on its own and writes
//! `results/linux.json`; `cargo xtask bench` runs it after Baton's boots, and
//! [`crate::report`] pairs its rows with Baton's).
//!
//! 1. A Debian kernel and BusyBox are fetched into `target/linux-guest/` without root and
//!    without installing anything: `apt-cache depends linux-image-amd64` names the kernel
//!    package (`linux-image-<abi>-amd64`), `apt-get download` fetches it and
//!    `busybox-static`, and `dpkg-deb --fsys-tarfile` unpacks just `boot/vmlinuz-*` and
//!    `bin/busybox` (not the kernel's hundreds of megabytes of modules, which the guest does
//!    not load). The cache is reused as it is on later runs, so the kernel does not change
//!    under the figures when Debian publishes a new one: delete `target/linux-guest/kernel`
//!    to move to the current kernel. When the package lists are missing or stale, `apt-get
//!    update` is run if xtask is root or `sudo -n` works, and otherwise the error says so.
//! 2. The C benchmarks in `bench/linux/` are compiled with the host's `gcc -O2 -static`.
//! 3. A newc cpio initramfs is written (by [`Cpio`], no `cpio` program needed): BusyBox with
//!    a few applet links, the benchmark programs, `/dev/console`, and an `/init` script that
//!    prints a few facts about the guest, runs `linuxbench` and ends QEMU through the
//!    `isa-debug-exit` device as Baton does (status 33 when every benchmark ran).
//! 4. QEMU boots it as `cargo xtask bench` boots Baton: q35, TCG, one CPU,
//!    `-icount shift=0,align=off,sleep=off` (the guest TSC advances once per instruction, so
//!    `lfence; rdtsc; lfence` deltas are exact instruction counts), the serial console to a
//!    file (`results/linux.log`). For a repeatable Linux it adds a fixed random seed
//!    (`-seed`), which makes RDRAND and so KASLR and the kernel's random numbers the same in
//!    every boot, and a fixed virtual real-time clock (`-rtc base=...,clock=vm`); it leaves
//!    out the network card and the VGA device that Baton does not use either.
//! 5. The `BENCH` lines are parsed into [`Row`]s. Without `quick` the same image is booted
//!    twice at once (`results/linux.2.log`; each QEMU is one host thread; the second starts
//!    1.5 s later, in another second of the host's clock) and the two runs must agree to the
//!    instruction.
//!
//! `docs/benchmarks.md` ("The Linux side") defines every benchmark.

use crate::bench::Row;
use crate::deps;
use crate::workspace::{command, find_in_path, note, root, shell_line, target_dir, Step};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The Debian package that depends on the current kernel image package.
const KERNEL_META: &str = "linux-image-amd64";
/// The Debian package with a statically linked BusyBox.
const BUSYBOX_DEB: &str = "busybox-static";
/// The kernel command line: the console on the first serial port, kernel messages below
/// warnings not printed (every character on the console costs instructions and TCG time),
/// and an immediate reboot, which ends QEMU, on a panic. Everything else, mitigations
/// included, is Debian's default.
pub const CMDLINE: &str = "console=ttyS0 quiet panic=-1";
/// QEMU's `-seed`: the guest's RDRAND sequence, and so KASLR and the kernel's random pool,
/// is the same in every boot.
const SEED: &str = "1";
/// QEMU's `-rtc`: the guest's real-time clock starts at a fixed date and follows virtual
/// time, so nothing the guest computes depends on the host's date.
const RTC: &str = "base=2024-01-01T00:00:00,clock=vm";
/// QEMU is killed, and the run fails, after this long.
const TIMEOUT: Duration = Duration::from_secs(600);
/// How long after the first boot the second one starts: in another second of the host's
/// clock, so that the repeatability check would catch anything of the host's time reaching
/// the guest.
const STAGGER: Duration = Duration::from_millis(1500);
/// QEMU's exit status when `/init` wrote 0x10 to the exit port: every benchmark ran.
const EXIT_CLEAN: i32 = 33;
/// The benchmark program's last line when every benchmark ran.
const DONE: &str = "BENCH done";
/// Log text that fails a run.
const FORBIDDEN: &[&str] = &["TEST FAIL", "Kernel panic", "BUG:", "Oops:"];
/// How many lines of a failed run's log are shown.
const LOG_TAIL_LINES: usize = 25;
/// BusyBox applets `/init` uses, linked in `/bin`.
const APPLETS: &[&str] = &[
    "sh", "mount", "cat", "cut", "dmesg", "grep", "uname", "reboot", "insmod",
];
/// The kernel modules the guest loads for the file rows (the Debian kernel has neither
/// virtio's PCI transport and block driver nor FAT built in), in an order that loads each
/// after what it depends on: paths under `lib/modules/<version>/` of the kernel's package,
/// unpacked into `target/linux-guest/modules/` and put into the initramfs as
/// `/lib/modules/<name>.ko`. Debian's modules are not compressed.
const MODULES: &[&str] = &[
    "kernel/drivers/virtio/virtio_ring.ko",
    "kernel/drivers/virtio/virtio.ko",
    "kernel/drivers/virtio/virtio_pci_modern_dev.ko",
    "kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
    "kernel/drivers/virtio/virtio_pci.ko",
    "kernel/drivers/block/virtio_blk.ko",
    "kernel/fs/fat/fat.ko",
    "kernel/fs/fat/vfat.ko",
    "kernel/fs/nls/nls_cp437.ko",
    "kernel/fs/nls/nls_ascii.ko",
    "kernel/fs/nls/nls_utf8.ko",
];
/// The benchmark programs: source in `bench/linux/`, extra `gcc` flags.
const PROGRAMS: &[(&str, &[&str])] = &[
    ("linuxbench", &["-pthread"]),
    // No C library start-up: see null.c.
    ("null", &["-nostdlib"]),
    ("qemu-exit", &[]),
];
/// The initramfs's `/init`.
const INIT: &str = r#"#!/bin/sh
# /init of the Linux benchmark guest, written by xtask/src/linux.rs.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
# Virtual seconds since boot: instructions / 10^9, plus any idle time QEMU skipped.
echo "LINUX uptime_at_init=$(cut -d' ' -f1 /proc/uptime)s"
echo "LINUX kernel=$(uname -r) $(uname -v)"
echo "LINUX cmdline=$(cat /proc/cmdline)"
echo "LINUX clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
echo "LINUX thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled)"
echo "LINUX cpu=$(grep -m1 '^vendor_id' /proc/cpuinfo | cut -d: -f2- | cut -c2-), $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | cut -c2-)"
# Debian's kernel zeroes the memory it allocates (init_on_alloc) unless told otherwise.
echo "LINUX mem_auto_init=$(dmesg | grep -o 'mem auto-init: .*')"
# Features that choose the kernel's code paths: erms/fsrm pick `rep stosb`/`rep movsb`
# page clearing and copying (QEMU counts every iteration), la57 five-level paging.
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2-) "
have=""
for f in erms fsrm rep_good la57 pcid invpcid smep smap rdrand; do
    case "$flags" in *" $f "*) have="$have $f" ;; esac
done
echo "LINUX cpu_flags=${have# }"
for f in /sys/devices/system/cpu/vulnerabilities/*; do
    echo "LINUX vulnerability ${f##*/}=$(cat "$f")"
done
# /tmp/disk.sh, run by linuxbench after every other benchmark (the disk's interrupts
# come at host-dependent times, so nothing else may run once it is in use): loads the disk
# with Baton's layout (`cargo xtask` makes it as for Baton's boots), whose first partition
# is the FAT file system holding the 56 KiB sample file of the file rows.
cat > /tmp/disk.sh <<'SCRIPT'
if [ -d /lib/modules ]; then
    for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci \
             virtio_blk fat vfat nls_cp437 nls_ascii nls_utf8; do
        insmod /lib/modules/$m.ko || echo "LINUXINFO insmod $m failed"
    done
    # The disk's device nodes (/dev/vda1).
    mount -t devtmpfs devtmpfs /dev
    mount -t vfat -o ro /dev/vda1 /mnt || echo "LINUXINFO the disk did not mount: no file rows"
fi
SCRIPT
if /bench/linuxbench /bench/null /tmp/disk.sh /mnt/data/f56k.bin; then
    /bench/qemu-exit 0x10
else
    /bench/qemu-exit 0x11
fi
echo "LINUXINFO qemu-exit did not end QEMU; rebooting"
reboot -f
"#;

/// What one measurement of Linux gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinuxRun {
    /// The `BENCH` lines of the (first) run, in order (names `linux.*`).
    pub rows: Vec<Row>,
    /// The kernel: Debian package and version, e.g. `linux-image-6.1.0-56-amd64 6.1.192-2`.
    pub kernel: String,
    /// BusyBox's Debian package and version.
    pub busybox: String,
    /// The first line of `gcc --version`, which compiled the benchmarks.
    pub gcc: String,
    /// The kernel command line ([`CMDLINE`]).
    pub cmdline: String,
    /// The QEMU command line, as a shell line.
    pub qemu_command: String,
    /// Facts the guest printed (`LINUX key=value` lines: virtual uptime at `/init`, `uname`,
    /// command line, clocksource, transparent huge pages, CPU vendor, model and flags,
    /// memory auto-initialisation, each CPU vulnerability and its mitigation), as
    /// `key=value`.
    pub guest: Vec<String>,
    /// Remarks of the benchmark program (`LINUXINFO` lines).
    pub remarks: Vec<String>,
    /// Whether a second boot was checked to give the same figures.
    pub repeated: bool,
    /// The serial logs, first run first.
    pub logs: Vec<PathBuf>,
}

/// Measures the Linux benchmarks: obtains the guest, builds the initramfs, boots it under
/// QEMU (see the module documentation) and returns the parsed results.
///
/// With `quick` the image is booted once. Otherwise it is booted twice, both at once, and
/// the two runs must give the same figures to the instruction. `quick` changes nothing in
/// the guest: the benchmarks, their iterations and so the figures are the same.
pub fn measure(quick: bool) -> Result<LinuxRun, String> {
    let qemu = deps::ensure_qemu()?;
    let cache = target_dir().join("linux-guest");
    fs::create_dir_all(&cache).map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
    let kernel = kernel(&cache)?;
    let busybox = busybox(&cache)?;
    let step = Step::start("compiling the Linux benchmarks (bench/linux/*.c) with gcc");
    let (programs, gcc) = step.finish(compile(&cache.join("bin")))?;
    let modules = match modules(&cache, &kernel) {
        Ok(m) => m,
        Err(e) => {
            note(format!(
                "the guest kernel's modules could not be had, so the file rows are left out: {e}"
            ));
            Vec::new()
        }
    };
    let initramfs = cache.join("initramfs.cpio");
    write_initramfs(&initramfs, &busybox.file, &programs, &modules)?;

    let results = root().join("results");
    fs::create_dir_all(&results)
        .map_err(|e| format!("cannot create {}: {e}", results.display()))?;
    let logs: Vec<PathBuf> = if quick {
        vec![results.join("linux.log")]
    } else {
        vec![results.join("linux.log"), results.join("linux.2.log")]
    };
    // A disk of Baton's layout for each boot (the file rows read its sample file).
    let disks: Vec<Option<PathBuf>> = (0..logs.len())
        .map(|i| {
            if modules.is_empty() {
                return None;
            }
            crate::disk::fresh(&format!("linux-{i}"))
                .map_err(|e| note(format!("no disk for the Linux guest: {e}")))
                .ok()
        })
        .collect();
    let cmd = qemu_command(
        &qemu,
        &kernel.file,
        &initramfs,
        disks.first().and_then(|d| d.as_deref()),
    );
    note(format!("$ {}", shell_line(&cmd)));
    let runs = boot(&qemu, &kernel.file, &initramfs, &logs, &disks)?;
    if let [first, second] = runs.as_slice() {
        compare(first, second)?;
        note("the two Linux runs gave identical instruction counts for every benchmark");
    }
    let first = runs
        .into_iter()
        .next()
        .ok_or("no Linux run was made (internal error)")?;
    Ok(LinuxRun {
        rows: first.rows,
        kernel: kernel.describe(),
        busybox: busybox.describe(),
        gcc,
        cmdline: CMDLINE.to_string(),
        qemu_command: shell_line(&cmd),
        guest: first.guest,
        remarks: first.remarks,
        repeated: !quick,
        logs,
    })
}

/// `cargo xtask bench-linux`: [`measure`] with the repeatability check, the results in
/// `results/linux.json`, and as a table on standard output.
pub fn bench_linux() -> Result<ExitCode, String> {
    let start = Instant::now();
    let run = measure(false)?;
    let meta = crate::report::Meta::collect(&deps::ensure_qemu()?);
    let json = root().join("results").join("linux.json");
    fs::write(&json, crate::report::linux_json(&meta, &run))
        .map_err(|e| format!("cannot write {}: {e}", json.display()))?;
    println!("{}", table(&run.rows));
    println!("- kernel: {} (Debian)", run.kernel);
    println!("- kernel command line: `{}`", run.cmdline);
    println!("- busybox: {}", run.busybox);
    println!("- benchmarks compiled by: {}", run.gcc);
    println!("- qemu: `{}`", run.qemu_command);
    for fact in &run.guest {
        println!("- guest: {fact}");
    }
    for remark in &run.remarks {
        println!("- remark: {remark}");
    }
    println!(
        "- repeatability: {}",
        if run.repeated {
            "checked: a second boot gave the same count for every benchmark but the file rows, \
             which wait for the disk"
        } else {
            "not checked (one boot)"
        }
    );
    let logs: Vec<String> = run.logs.iter().map(|l| l.display().to_string()).collect();
    note(format!(
        "Linux benchmarks done in {:.0}s; wrote {}; serial logs: {}",
        start.elapsed().as_secs_f64(),
        json.display(),
        logs.join(", ")
    ));
    Ok(ExitCode::SUCCESS)
}

/// The results as a Markdown table, with every figure also as a multiple of
/// `linux.syscall.null`.
fn table(rows: &[Row]) -> String {
    let null = rows
        .iter()
        .find(|r| r.name == "linux.syscall.null")
        .map(|r| r.median);
    let mut out = String::from(
        "| benchmark | median | min | max | x null syscall |\n|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let multiple = match null {
            Some(n) if n > 0 && r.name != "linux.rdtsc.overhead" => {
                format!("{:.2}", r.median as f64 / n as f64)
            }
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {multiple} |",
            r.name, r.median, r.min, r.max
        );
    }
    out
}

// ---- The guest's kernel and BusyBox --------------------------------------------------------

/// A file unpacked from a Debian package into the cache.
struct Unpacked {
    /// The file.
    file: PathBuf,
    /// The package's name.
    package: String,
    /// The package's version.
    version: String,
}

impl Unpacked {
    /// `<package> <version>`.
    fn describe(&self) -> String {
        format!("{} {}", self.package, self.version)
    }
}

/// The name of the file in a cache directory that records which package its file came from
/// (`package=<name>` and `version=<version>` lines); written last, so a directory without
/// it is incomplete.
const STAMP: &str = "package";

/// The cached file `dir/name`, if a complete earlier fetch left it there.
fn cached(dir: &Path, name: &str) -> Option<Unpacked> {
    let stamp = fs::read_to_string(dir.join(STAMP)).ok()?;
    let field = |key: &str| {
        stamp
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    let file = dir.join(name);
    file.is_file().then_some(Unpacked {
        file,
        package: field("package")?,
        version: field("version")?,
    })
}

/// The guest kernel (`vmlinuz`), from the cache or fetched.
fn kernel(cache: &Path) -> Result<Unpacked, String> {
    let dir = cache.join("kernel");
    if let Some(found) = cached(&dir, "vmlinuz") {
        return Ok(found);
    }
    require_debian_tools()?;
    let package = with_package_lists(kernel_package)?;
    let step = Step::start(format!(
        "fetching the guest kernel: {package} (what {KERNEL_META} depends on)"
    ));
    step.finish(fetch(cache, &package, "boot/vmlinuz-", &dir, "vmlinuz"))
}

/// BusyBox, from the cache or fetched.
fn busybox(cache: &Path) -> Result<Unpacked, String> {
    let dir = cache.join("busybox");
    if let Some(found) = cached(&dir, "busybox") {
        return Ok(found);
    }
    require_debian_tools()?;
    let step = Step::start(format!("fetching BusyBox: {BUSYBOX_DEB}"));
    step.finish(fetch(cache, BUSYBOX_DEB, "bin/busybox", &dir, "busybox"))
}

/// The guest kernel's [`MODULES`], from the cache (when it holds those of the same package
/// and version) or fetched from the same package (`apt-get download <package>=<version>`):
/// each module's name and file, in [`MODULES`]' order.
fn modules(cache: &Path, kernel: &Unpacked) -> Result<Vec<(String, PathBuf)>, String> {
    let dir = cache.join("modules");
    let files: Vec<(String, PathBuf)> = MODULES
        .iter()
        .map(|m| {
            let name = m.rsplit('/').next().unwrap_or(m).to_string();
            let file = dir.join(&name);
            (name, file)
        })
        .collect();
    let stamp = format!("package={}\nversion={}\n", kernel.package, kernel.version);
    if fs::read_to_string(dir.join(STAMP)).is_ok_and(|s| s == stamp)
        && files.iter().all(|(_, f)| f.is_file())
    {
        return Ok(files);
    }
    require_debian_tools()?;
    let step = Step::start(format!(
        "fetching the guest kernel's modules for the file rows: {} {}",
        kernel.package, kernel.version
    ));
    let got = (|| {
        let debs = cache.join("debs");
        let _ = fs::remove_dir_all(&debs);
        fs::create_dir_all(&debs).map_err(|e| format!("cannot create {}: {e}", debs.display()))?;
        let wanted = format!("{}={}", kernel.package, kernel.version);
        with_package_lists(|| {
            let mut cmd = command("apt-get");
            cmd.current_dir(&debs).args(["download", &wanted]);
            output(&mut cmd, &format!("downloading {wanted}")).map(drop)
        })?;
        let deb = fs::read_dir(&debs)
            .map_err(|e| format!("cannot read {}: {e}", debs.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "deb"))
            .ok_or_else(|| format!("apt-get download {wanted} left no .deb"))?;
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let _ = fs::remove_file(dir.join(STAMP));
        let mut child = command("dpkg-deb")
            .arg("--fsys-tarfile")
            .arg(&deb)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("could not start dpkg-deb: {e}"))?;
        let stdout = child.stdout.take().ok_or("dpkg-deb: no standard output")?;
        let found = copy_modules(stdout, &files);
        let _ = child.kill();
        let _ = child.wait();
        let _ = fs::remove_dir_all(&debs);
        let missing: Vec<&str> = MODULES
            .iter()
            .zip(&files)
            .filter(|(_, (_, f))| !f.is_file())
            .map(|(m, _)| *m)
            .collect();
        found?;
        if !missing.is_empty() {
            return Err(format!("{} has no {}", deb.display(), missing.join(", ")));
        }
        fs::write(dir.join(STAMP), &stamp)
            .map_err(|e| format!("cannot write {}: {e}", dir.join(STAMP).display()))?;
        Ok(files)
    })();
    step.finish(got)
}

/// Copies every regular file of the tar stream `from` whose path ends in
/// `lib/modules/<version>/<one of MODULES>` to its place in `files`.
fn copy_modules(from: impl Read, files: &[(String, PathBuf)]) -> Result<(), String> {
    let mut archive = tar::Archive::new(from);
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = entry.path().map_err(|e| e.to_string())?.into_owned();
        let path = path.to_string_lossy().into_owned();
        let Some(i) = MODULES
            .iter()
            .position(|m| path.ends_with(&format!("/{m}")) && path.contains("lib/modules/"))
        else {
            continue;
        };
        let Some((_, dest)) = files.get(i) else {
            continue;
        };
        let mut out =
            File::create(dest).map_err(|e| format!("cannot create {}: {e}", dest.display()))?;
        std::io::copy(&mut entry, &mut out)
            .map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
    }
    Ok(())
}

/// Fails with directions unless `apt-get`, `apt-cache` and `dpkg-deb` are there.
fn require_debian_tools() -> Result<(), String> {
    let missing: Vec<&str> = ["apt-get", "apt-cache", "dpkg-deb"]
        .into_iter()
        .filter(|t| find_in_path(t).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the Linux benchmarks fetch a Debian kernel and BusyBox with apt-get and dpkg-deb, \
         and {} is missing (not a Debian-like host?).\nOn another system, put a bzImage at \
         target/linux-guest/kernel/vmlinuz and a static busybox at \
         target/linux-guest/busybox/busybox, each directory with a file `{STAMP}` holding the \
         lines `package=<name>` and `version=<version>`, then run this command again.",
        missing.join(", ")
    ))
}

/// The versioned kernel package `linux-image-amd64` depends on, from `apt-cache depends`.
fn kernel_package() -> Result<String, String> {
    let out = output(
        command("apt-cache").args(["depends", KERNEL_META]),
        "resolving the kernel package",
    )?;
    depends_on_kernel(&out).ok_or_else(|| {
        format!("`apt-cache depends {KERNEL_META}` names no linux-image-* package:\n{out}")
    })
}

/// The `Depends: linux-image-...` package in `apt-cache depends` output.
fn depends_on_kernel(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let dep = l.trim().strip_prefix("Depends:")?.trim();
        let dep = dep.trim_start_matches('<').trim_end_matches('>');
        (dep.starts_with("linux-image-") && dep != KERNEL_META).then(|| dep.to_string())
    })
}

/// Runs `f` (which reads the package lists); if it fails, refreshes the lists with `apt-get
/// update` where that is possible without asking (root, or `sudo -n`) and runs `f` again.
fn with_package_lists<T>(f: impl Fn() -> Result<T, String>) -> Result<T, String> {
    let first = match f() {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let by_hand = "sudo apt-get update";
    let mut update = if is_root() {
        command("apt-get")
    } else if command("sudo")
        .args(["-n", "true"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let mut cmd = command("sudo");
        cmd.args(["-n", "apt-get"]);
        cmd
    } else {
        return Err(format!(
            "{first}\nThe package lists may be missing or out of date. Run\n    {by_hand}\n\
             then this command again."
        ));
    };
    update
        .arg("update")
        .env("DEBIAN_FRONTEND", "noninteractive");
    note(format!(
        "that failed; the package lists may be missing or out of date: $ {}",
        shell_line(&update)
    ));
    output(&mut update, "refreshing the package lists")
        .map_err(|e| format!("{first}\n{e}\nRun `{by_hand}` yourself, then this again."))?;
    f()
}

/// Whether xtask runs as root.
fn is_root() -> bool {
    command("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Downloads `package` with `apt-get download` and unpacks from it the one file whose path
/// starts with `prefix` to `dir/name`, then records the package in `dir/`[`STAMP`].
fn fetch(
    cache: &Path,
    package: &str,
    prefix: &str,
    dir: &Path,
    name: &str,
) -> Result<Unpacked, String> {
    let debs = cache.join("debs");
    let _ = fs::remove_dir_all(&debs);
    fs::create_dir_all(&debs).map_err(|e| format!("cannot create {}: {e}", debs.display()))?;
    with_package_lists(|| {
        let mut cmd = command("apt-get");
        cmd.current_dir(&debs).args(["download", package]);
        output(&mut cmd, &format!("downloading {package}")).map(drop)
    })?;
    let deb = fs::read_dir(&debs)
        .map_err(|e| format!("cannot read {}: {e}", debs.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
        })
        .ok_or_else(|| {
            format!(
                "apt-get download {package} left no .deb in {}",
                debs.display()
            )
        })?;
    let version = output(
        command("dpkg-deb")
            .args(["--field"])
            .arg(&deb)
            .arg("Version"),
        "reading the package version",
    )?
    .trim()
    .to_string();

    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let _ = fs::remove_file(dir.join(STAMP));
    let file = dir.join(name);
    extract_one(&deb, prefix, &file)?;
    fs::write(
        dir.join(STAMP),
        format!("package={package}\nversion={version}\n"),
    )
    .map_err(|e| format!("cannot write {}: {e}", dir.join(STAMP).display()))?;
    let _ = fs::remove_dir_all(&debs);
    Ok(Unpacked {
        file,
        package: package.to_string(),
        version,
    })
}

/// Unpacks the first regular file of `deb` whose path starts with `prefix` (`./` ignored)
/// to `dest`, reading `dpkg-deb --fsys-tarfile` and stopping as soon as it is found.
fn extract_one(deb: &Path, prefix: &str, dest: &Path) -> Result<(), String> {
    let mut child = command("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not start dpkg-deb: {e}"))?;
    let stdout = child.stdout.take().ok_or("dpkg-deb: no standard output")?;
    let found = copy_from_tar(stdout, prefix, dest);
    // Found or not, the rest of the archive is not needed.
    let _ = child.kill();
    let _ = child.wait();
    match found {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{} contains no file `{prefix}*`", deb.display())),
        Err(e) => Err(format!("unpacking {}: {e}", deb.display())),
    }
}

/// Copies the first regular file of the tar stream `from` whose path starts with `prefix`
/// (after any `./`) to `dest` (mode 0755). Returns whether there was one.
fn copy_from_tar(from: impl Read, prefix: &str, dest: &Path) -> Result<bool, String> {
    let mut archive = tar::Archive::new(from);
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let path = entry.path().map_err(|e| e.to_string())?.into_owned();
        let path = path.to_string_lossy();
        let path = path.trim_start_matches("./");
        if !path.starts_with(prefix) || entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let tmp = dest.with_extension("part");
        let mut out =
            File::create(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        std::io::copy(&mut entry, &mut out)
            .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        drop(out);
        set_executable(&tmp)?;
        fs::rename(&tmp, dest).map_err(|e| format!("cannot rename {}: {e}", tmp.display()))?;
        return Ok(true);
    }
    Ok(false)
}

/// Gives `path` mode 0755.
fn set_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot chmod {}: {e}", path.display()))
}

/// Runs `cmd` with its output captured; its standard output, or an error with its
/// standard error.
fn output(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: could not start `{}`: {e}", shell_line(cmd)))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{what} failed (`{}`: {}):\n{}",
            shell_line(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

// ---- The benchmark programs ------------------------------------------------------------------

/// Compiles [`PROGRAMS`] from `bench/linux/` into `out` with `gcc -O2 -static`. Returns each
/// program's name and path, and the first line of `gcc --version`.
fn compile(out: &Path) -> Result<(Vec<(String, PathBuf)>, String), String> {
    let install = "sudo apt-get install gcc libc6-dev";
    let Some(gcc) = find_in_path("gcc") else {
        return Err(format!(
            "the Linux benchmarks are C programs built with gcc, which is not installed. \
             On Debian:\n    {install}"
        ));
    };
    let version = output(command(&gcc).arg("--version"), "gcc --version")?
        .lines()
        .next()
        .unwrap_or("gcc")
        .trim()
        .to_string();
    fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let src = root().join("bench/linux");
    let mut programs = Vec::new();
    for (name, flags) in PROGRAMS {
        let exe = out.join(name);
        let mut cmd = command(&gcc);
        cmd.args(["-O2", "-static", "-Wall", "-Wextra"])
            .args(*flags)
            .arg("-o")
            .arg(&exe)
            .arg(src.join(format!("{name}.c")));
        let result = cmd
            .output()
            .map_err(|e| format!("could not run `{}`: {e}", shell_line(&cmd)))?;
        let stderr = String::from_utf8_lossy(&result.stderr);
        if !result.status.success() {
            let hint = if stderr.contains("cannot find -l")
                || stderr.contains("crt1.o")
                || stderr.contains("No such file or directory")
            {
                format!(
                    "\nThe C library headers or the static C library seem to be missing. \
                     On Debian:\n    {install}"
                )
            } else {
                String::new()
            };
            return Err(format!(
                "compiling bench/linux/{name}.c failed (`{}`):\n{}{hint}",
                shell_line(&cmd),
                stderr.trim()
            ));
        }
        if !stderr.trim().is_empty() {
            note(format!("gcc, bench/linux/{name}.c:\n{}", stderr.trim()));
        }
        programs.push((name.to_string(), exe));
    }
    Ok((programs, version))
}

// ---- The initramfs ---------------------------------------------------------------------------

/// Writes the guest's initramfs to `out`: BusyBox and its applet links in `/bin`, the
/// programs in `/bench`, `/dev/console` and `/dev/null`, and `/init` ([`INIT`]).
fn write_initramfs(
    out: &Path,
    busybox: &Path,
    programs: &[(String, PathBuf)],
    modules: &[(String, PathBuf)],
) -> Result<(), String> {
    let read = |p: &Path| fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    let mut cpio = Cpio::default();
    for dir in ["bin", "bench", "dev", "proc", "sys", "tmp", "mnt"] {
        cpio.dir(dir, 0o755);
    }
    if !modules.is_empty() {
        cpio.dir("lib", 0o755);
        cpio.dir("lib/modules", 0o755);
        for (name, path) in modules {
            cpio.file(&format!("lib/modules/{name}"), 0o644, &read(path)?)?;
        }
    }
    // The kernel opens /dev/console for /init before anything is mounted.
    cpio.char_device("dev/console", 0o600, 5, 1);
    cpio.char_device("dev/null", 0o666, 1, 3);
    cpio.file("bin/busybox", 0o755, &read(busybox)?)?;
    for applet in APPLETS {
        cpio.symlink(&format!("bin/{applet}"), "busybox");
    }
    for (name, path) in programs {
        cpio.file(&format!("bench/{name}"), 0o755, &read(path)?)?;
    }
    cpio.file("init", 0o755, INIT.as_bytes())?;
    fs::write(out, cpio.finish()).map_err(|e| format!("cannot write {}: {e}", out.display()))
}

/// A writer of the "new ASCII" (newc) cpio format, the one the Linux kernel unpacks as an
/// initramfs.
///
/// Every entry is a 110-byte header (the magic `070701`, then thirteen 8-digit hexadecimal
/// fields), the NUL-terminated name, padding to a multiple of four bytes, the data, and
/// padding again; the archive ends with the entry `TRAILER!!!`. Entries get inode numbers
/// 1, 2, ... in order; owner root, modification time 0: the same input gives the same
/// bytes.
#[derive(Default)]
struct Cpio {
    /// The archive so far.
    out: Vec<u8>,
    /// Inode number of the last entry.
    ino: u32,
}

/// File-type bits of a cpio mode: directory.
const S_IFDIR: u32 = 0o040_000;
/// File-type bits of a cpio mode: regular file.
const S_IFREG: u32 = 0o100_000;
/// File-type bits of a cpio mode: symbolic link.
const S_IFLNK: u32 = 0o120_000;
/// File-type bits of a cpio mode: character device.
const S_IFCHR: u32 = 0o020_000;

impl Cpio {
    /// Adds a directory.
    fn dir(&mut self, path: &str, perm: u32) {
        self.entry(path, S_IFDIR | perm, 2, (0, 0), b"");
    }

    /// Adds a regular file; fails if it is 4 GiB or larger.
    fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> Result<(), String> {
        if u32::try_from(data.len()).is_err() {
            return Err(format!("{path}: too large for a cpio archive"));
        }
        self.entry(path, S_IFREG | perm, 1, (0, 0), data);
        Ok(())
    }

    /// Adds a symbolic link to `target`.
    fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, S_IFLNK | 0o777, 1, (0, 0), target.as_bytes());
    }

    /// Adds a character device node.
    fn char_device(&mut self, path: &str, perm: u32, major: u32, minor: u32) {
        self.entry(path, S_IFCHR | perm, 1, (major, minor), b"");
    }

    /// Appends the trailer and returns the archive.
    fn finish(mut self) -> Vec<u8> {
        self.ino = 0;
        self.header("TRAILER!!!", 0, 1, (0, 0), 0);
        self.out
    }

    /// Appends one entry with the next inode number.
    fn entry(&mut self, path: &str, mode: u32, nlink: u32, rdev: (u32, u32), data: &[u8]) {
        self.ino += 1;
        // Lengths were checked by the callers (`file`), or are tiny.
        self.header(path, mode, nlink, rdev, data.len() as u32);
        self.out.extend_from_slice(data);
        self.pad();
    }

    /// Appends a header and its name (padded).
    fn header(&mut self, name: &str, mode: u32, nlink: u32, rdev: (u32, u32), size: u32) {
        let name_size = name.len() as u32 + 1;
        let fields = [
            self.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev.0, rdev.1, name_size, 0,
        ];
        self.out.extend_from_slice(b"070701");
        for field in fields {
            self.out
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
    }

    /// Pads the archive with NULs to a multiple of four bytes.
    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }
}

// ---- Booting and judging -----------------------------------------------------------------------

/// The QEMU command line of the Linux guest; standard streams are left to the caller.
fn qemu_command(qemu: &Path, kernel: &Path, initramfs: &Path, disk: Option<&Path>) -> Command {
    let mut cmd = command(qemu);
    cmd.args(["-machine", "q35", "-m", "512M", "-smp", "1"])
        .args(["-accel", "tcg", "-cpu", "max"])
        .args(["-icount", "shift=0,align=off,sleep=off"])
        .args(["-display", "none", "-vga", "none", "-nic", "none"])
        .args(["-serial", "stdio", "-monitor", "none", "-no-reboot"])
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        .args(["-seed", SEED, "-rtc", RTC]);
    // The same firmware as Baton's runs: qboot when installed (it loads the kernel and
    // jumps to it in a fraction of SeaBIOS's instructions).
    let qboot = Path::new("/usr/share/qemu/qboot.rom");
    if qboot.is_file() {
        cmd.arg("-bios").arg(qboot);
    }
    // The same virtio block device as Baton's boots (modern only).
    if let Some(d) = disk {
        cmd.args(crate::disk::qemu_args(d));
    }
    cmd.arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initramfs)
        .arg("-append")
        .arg(CMDLINE);
    cmd
}

/// What one boot printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Parsed {
    /// The `BENCH` lines.
    rows: Vec<Row>,
    /// `LINUX key=value` lines, as `key=value`.
    guest: Vec<String>,
    /// `LINUXINFO` lines, without the keyword.
    remarks: Vec<String>,
    /// Whether `BENCH done` appeared.
    done: bool,
}

/// Boots the guest once per log in `logs`, all at once (each started [`STAGGER`] after the
/// one before), each QEMU's serial output going to its log, and judges and parses every
/// log.
fn boot(
    qemu: &Path,
    kernel: &Path,
    initramfs: &Path,
    logs: &[PathBuf],
    disks: &[Option<PathBuf>],
) -> Result<Vec<Parsed>, String> {
    // Every log file is created before any QEMU starts, so that no error leaves one running.
    let mut cmds = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        let disk = disks.get(i).and_then(|d| d.as_deref());
        let mut cmd = qemu_command(qemu, kernel, initramfs, disk);
        let file =
            File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let stderr = file
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
        cmd.stdin(Stdio::null()).stdout(file).stderr(stderr);
        cmds.push((cmd, log));
    }
    let step = Step::start(format!(
        "booting the Linux guest {}",
        if logs.len() == 1 {
            "once".to_string()
        } else {
            format!("{} times, at once", logs.len())
        }
    ));
    let start = Instant::now();
    let mut children: Vec<(Child, &PathBuf)> = Vec::new();
    for (i, (mut cmd, log)) in cmds.into_iter().enumerate() {
        if i > 0 {
            std::thread::sleep(STAGGER);
        }
        match cmd.spawn() {
            Ok(child) => children.push((child, log)),
            Err(e) => {
                for (mut child, _) in children {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                step.end("failed");
                return Err(format!("could not start {}: {e}", qemu.display()));
            }
        }
    }
    let mut statuses = Vec::new();
    for i in 0..children.len() {
        let left = TIMEOUT.saturating_sub(start.elapsed());
        match crate::test::wait_with_timeout(&mut children[i].0, left) {
            Ok(status) => statuses.push(status),
            Err(e) => {
                // Leave no QEMU behind.
                for (child, _) in &mut children[i + 1..] {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                step.end("failed");
                return Err(e);
            }
        }
    }
    step.end("finished");
    let mut runs = Vec::new();
    for ((_, log), status) in children.iter().zip(statuses) {
        let text = fs::read(log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
        let text = String::from_utf8_lossy(&text);
        let judged = match status {
            None => Err(format!(
                "QEMU did not finish within {}s and was killed",
                TIMEOUT.as_secs()
            )),
            Some(status) => judge(status.code(), &text),
        };
        runs.push(judged.map_err(|why| failure(&why, log, &text))?);
    }
    Ok(runs)
}

/// The error of a failed run: why, the log's path and its last lines.
fn failure(why: &str, log: &Path, text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines
        .get(lines.len().saturating_sub(LOG_TAIL_LINES)..)
        .unwrap_or_default();
    let mut msg = format!(
        "the Linux benchmark run failed: {why}\nlog: {}",
        log.display()
    );
    for line in tail {
        msg.push_str("\n    | ");
        msg.push_str(line.trim_end());
    }
    msg
}

/// Checks a finished boot (QEMU's exit status and the serial log) and parses its results.
fn judge(exit: Option<i32>, log: &str) -> Result<Parsed, String> {
    let mut problems = Vec::new();
    if exit != Some(EXIT_CLEAN) {
        problems.push(match exit {
            Some(35) => "the benchmark program failed (QEMU exit status 35)".to_string(),
            Some(0) => "the guest rebooted or powered off without reporting through the exit \
                        port (QEMU exit status 0: /init failed, or the kernel panicked)"
                .to_string(),
            Some(n) => format!("QEMU exit status {n}, not {EXIT_CLEAN}"),
            None => "QEMU was killed by a signal".to_string(),
        });
    }
    for bad in FORBIDDEN {
        if let Some((n, line)) = log.lines().enumerate().find(|(_, l)| l.contains(bad)) {
            problems.push(format!("line {} contains `{bad}`: {}", n + 1, line.trim()));
        }
    }
    match parse(log) {
        Ok(p) if !p.done => problems.push(format!("`{DONE}` is missing")),
        Ok(p) if p.rows.is_empty() => problems.push("no `BENCH` result line".into()),
        Ok(p) if problems.is_empty() => return Ok(p),
        Ok(_) => {}
        Err(e) => problems.push(e),
    }
    Err(problems.join("; "))
}

/// The text of a serial line: without the line end, and without a console prefix
/// `<task>#<id>| ` such as Baton's (Linux's lines have none).
fn line_text(line: &str) -> &str {
    let line = line.trim_end();
    match line.split_once("| ") {
        Some((prefix, rest)) if !prefix.contains(' ') => rest,
        _ => line,
    }
}

/// Parses the `BENCH`, `LINUX` and `LINUXINFO` lines of a serial log.
fn parse(log: &str) -> Result<Parsed, String> {
    let mut parsed = Parsed::default();
    for (n, line) in log.lines().enumerate() {
        let text = line_text(line);
        let bad = |why: String| format!("line {}: {why}: {}", n + 1, line.trim());
        if text == DONE {
            parsed.done = true;
        } else if let Some(fields) = text.strip_prefix("BENCH ") {
            let row = bench_row(fields).map_err(bad)?;
            if parsed.rows.iter().any(|r| r.name == row.name) {
                return Err(bad(format!("benchmark `{}` reported twice", row.name)));
            }
            parsed.rows.push(row);
        } else if let Some(fact) = text.strip_prefix("LINUX ") {
            parsed.guest.push(fact.to_string());
        } else if let Some(remark) = text.strip_prefix("LINUXINFO ") {
            parsed.remarks.push(remark.to_string());
        }
    }
    Ok(parsed)
}

/// The [`Row`] of the `key=value` words after `BENCH `.
fn bench_row(fields: &str) -> Result<Row, String> {
    let words: Vec<(&str, &str)> = fields
        .split_whitespace()
        .map(|w| {
            w.split_once('=')
                .ok_or_else(|| format!("`{w}` is not key=value"))
        })
        .collect::<Result<_, _>>()?;
    let text = |key: &str| {
        words
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
            .ok_or_else(|| format!("no `{key}=`"))
    };
    let number = |key: &str| {
        let v = text(key)?;
        v.parse::<u64>()
            .map_err(|_| format!("`{key}={v}` is not a whole number"))
    };
    Ok(Row {
        name: text("name")?,
        unit: text("unit")?,
        iterations: number("iterations")?,
        median: number("median")?,
        min: number("min")?,
        max: number("max")?,
        // The guest has one CPU (`-smp 1`).
        cpus: 1,
    })
}

/// Checks that two boots gave the same figures to the instruction.
fn compare(first: &Parsed, second: &Parsed) -> Result<(), String> {
    // The file rows wait for the disk, whose interrupts come when the host has done the
    // work: their counts may differ between boots by a little (they run last, so nothing
    // else is affected); every other row must be identical.
    let steady = |p: &Parsed| -> Vec<Row> {
        p.rows
            .iter()
            .filter(|r| !r.name.starts_with("linux.file."))
            .cloned()
            .collect()
    };
    crate::bench::compare_rows(
        &steady(first),
        &steady(second),
        "two boots of the same Linux image",
        "results/linux.log and results/linux.2.log",
    )
}

// ---- The Sting applications' speedup (wall time) -----------------------------------------------

/// `/init` of the speedup guest: runs the Sting applications' program and ends QEMU.
const SPEEDUP_INIT: &str = r#"#!/bin/sh
# /init of the Linux speedup guest, written by xtask/src/linux.rs.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
echo "LINUX kernel=$(uname -r) cpus=$(grep -c ^processor /proc/cpuinfo)"
if /bench/speedup_linux; then
    /bench/qemu-exit 0x10
else
    /bench/qemu-exit 0x11
fi
reboot -f
"#;

/// The virtual CPU counts the Sting applications' speedup is measured on, on Baton
/// (`sting_speedup_smpN`) and in the Linux guest: 4 is more virtual CPUs than this machine's
/// two host cores, which `docs/benchmarks.md` says what it can and cannot show.
pub const SPEEDUP_CPUS: [u32; 3] = [1, 2, 4];

/// The `SPEEDUP` lines of the Sting applications (`user/sting/examples/speedup_linux.rs`,
/// the same programs as Baton's `sting_speedup`) in the Linux guest on each of
/// [`SPEEDUP_CPUS`] virtual CPUs, in wall time: plain multi-threaded TCG, no `-icount`, otherwise the settings of
/// [`measure`]. Each boot's serial log goes to `results/linux-speedup.smpN.log`.
pub fn speedup() -> Result<Vec<(u32, Vec<String>)>, String> {
    let qemu = deps::ensure_qemu()?;
    let cache = target_dir().join("linux-guest");
    fs::create_dir_all(&cache).map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
    let kernel = kernel(&cache)?;
    let busybox = busybox(&cache)?;
    let step = Step::start("compiling qemu-exit (bench/linux/*.c) with gcc");
    let (programs, _) = step.finish(compile(&cache.join("bin")))?;
    let exit = programs
        .iter()
        .find(|(n, _)| n == "qemu-exit")
        .ok_or("qemu-exit was not built (internal error)")?;
    let step = Step::start("building the Sting applications for Linux (static)");
    let rust_target = cache.join("rust");
    let status = command(env!("CARGO"))
        .args(["build", "--release", "--quiet", "-p", "sting", "--example"])
        .arg("speedup_linux")
        .args(["--target", "x86_64-unknown-linux-gnu", "--target-dir"])
        .arg(&rust_target)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .current_dir(root())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    step.end(if status.success() { "done" } else { "failed" });
    if !status.success() {
        return Err("the Linux build of the Sting applications failed".into());
    }
    let program = rust_target.join("x86_64-unknown-linux-gnu/release/examples/speedup_linux");
    let read = |p: &Path| fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    let mut cpio = Cpio::default();
    for dir in ["bin", "bench", "dev", "proc", "sys", "tmp"] {
        cpio.dir(dir, 0o755);
    }
    cpio.char_device("dev/console", 0o600, 5, 1);
    cpio.char_device("dev/null", 0o666, 1, 3);
    cpio.file("bin/busybox", 0o755, &read(&busybox.file)?)?;
    for applet in APPLETS {
        cpio.symlink(&format!("bin/{applet}"), "busybox");
    }
    cpio.file("bench/qemu-exit", 0o755, &read(&exit.1)?)?;
    cpio.file("bench/speedup_linux", 0o755, &read(&program)?)?;
    cpio.file("init", 0o755, SPEEDUP_INIT.as_bytes())?;
    let initramfs = cache.join("speedup.cpio");
    fs::write(&initramfs, cpio.finish())
        .map_err(|e| format!("cannot write {}: {e}", initramfs.display()))?;
    let results = root().join("results");
    fs::create_dir_all(&results)
        .map_err(|e| format!("cannot create {}: {e}", results.display()))?;
    let mut out = Vec::new();
    for smp in SPEEDUP_CPUS {
        let mut cmd = command(&qemu);
        cmd.args(["-machine", "q35", "-m", "1G", "-smp", &smp.to_string()])
            .args(["-accel", "tcg,thread=multi", "-cpu", "max"])
            .args(["-display", "none", "-vga", "none", "-nic", "none"])
            .args(["-serial", "stdio", "-monitor", "none", "-no-reboot"])
            .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
            .args(["-seed", SEED, "-rtc", RTC]);
        let qboot = Path::new("/usr/share/qemu/qboot.rom");
        if qboot.is_file() {
            cmd.arg("-bios").arg(qboot);
        }
        cmd.arg("-kernel")
            .arg(&kernel.file)
            .arg("-initrd")
            .arg(&initramfs)
            .arg("-append")
            .arg(CMDLINE);
        let log = results.join(format!("linux-speedup.smp{smp}.log"));
        let file =
            File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let stderr = file
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
        cmd.stdin(Stdio::null()).stdout(file).stderr(stderr);
        note(format!("$ {}", shell_line(&cmd)));
        let step = Step::start(format!("booting the Linux speedup guest on -smp {smp}"));
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", qemu.display()))?;
        let status = crate::test::wait_with_timeout(&mut child, TIMEOUT)?;
        step.end("finished");
        let text = fs::read(&log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
        let text = String::from_utf8_lossy(&text);
        let clean = status.and_then(|s| s.code()) == Some(EXIT_CLEAN);
        if !clean || !text.contains("SPEEDUP done") {
            return Err(failure(
                "the Linux speedup guest did not finish cleanly",
                &log,
                &text,
            ));
        }
        out.push((smp, speedup_lines(&text)));
    }
    Ok(out)
}

/// The `SPEEDUP app=...` lines of a log (serial prefixes and carriage returns removed).
pub fn speedup_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| {
            let l = l.trim_end_matches('\r');
            l.find("SPEEDUP app=").map(|i| l[i..].to_string())
        })
        .collect()
}

/// The value of `key=` in a `SPEEDUP` line.
fn speedup_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// `cargo xtask sting-speedup`: the Sting applications' wall time in the Linux guest
/// ([`speedup`]) beside Baton's (the logs of `cargo xtask test --filter sting_speedup`, if
/// they are there), as a table on standard output and in `results/sting-speedup.md`, and,
/// when every column is there, in docs/sting.md between its `sting-speedup` markers.
pub fn sting_speedup() -> Result<ExitCode, String> {
    let linux = speedup()?;
    let baton: Vec<(u32, Vec<String>)> = SPEEDUP_CPUS
        .iter()
        .map(|&smp| {
            let log = target_dir().join(format!("test-logs/sting_speedup_smp{smp}.log"));
            let text = fs::read_to_string(&log).unwrap_or_default();
            (smp, speedup_lines(&text))
        })
        .collect();
    let mut out = String::from(
        "Wall time (ms, median of three runs) of each application's parallel program on one \
         virtual processor / on one per virtual CPU, and their ratio (the speedup), on 1, 2 \
         and 4 virtual CPUs; multi-threaded TCG, no -icount, on a host with two cores shared \
         with other work (4 virtual CPUs are more than the host's cores).\n\n\
         | application | size | Baton -smp 1 | Baton -smp 2 | Baton -smp 4 | Linux -smp 1 | Linux -smp 2 | Linux -smp 4 |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let find = |runs: &[(u32, Vec<String>)], smp: u32, app: &str| -> Option<String> {
        runs.iter().find(|(s, _)| *s == smp).and_then(|(_, lines)| {
            lines
                .iter()
                .find(|l| speedup_field(l, "app") == Some(app))
                .cloned()
        })
    };
    let cell = |l: Option<String>| match l {
        Some(l) => format!(
            "{} / {} ({})",
            speedup_field(&l, "one_vp_ms").unwrap_or("?"),
            speedup_field(&l, "per_cpu_ms").unwrap_or("?"),
            speedup_field(&l, "speedup").unwrap_or("?")
        ),
        None => "—".to_string(),
    };
    for app in ["primes", "mst", "alphabeta", "nbody"] {
        let size = SPEEDUP_CPUS
            .iter()
            .find_map(|&smp| find(&linux, smp, app).or_else(|| find(&baton, smp, app)))
            .and_then(|l| l.split('"').nth(1).map(str::to_string))
            .unwrap_or_default();
        let _ = write!(out, "| {app} | {size} |");
        for runs in [&baton, &linux] {
            for smp in SPEEDUP_CPUS {
                let _ = write!(out, " {} |", cell(find(runs, smp, app)));
            }
        }
        out.push('\n');
    }
    if baton.iter().all(|(_, l)| l.is_empty()) {
        out.push_str(
            "\nBaton's columns are empty: run `cargo xtask test --no-host --filter sting_speedup` \
             first (its `sting_speedup_smp1`, `_smp2` and `_smp4` logs).\n",
        );
    }
    print!("{out}");
    let path = root().join("results/sting-speedup.md");
    fs::write(&path, &out).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    note(format!("wrote {}", path.display()));
    // docs/sting.md shows the last complete run: both systems on every CPU count.
    let complete =
        baton.iter().all(|(_, l)| !l.is_empty()) && linux.iter().all(|(_, l)| !l.is_empty());
    if complete {
        let doc = root().join("docs/sting.md");
        match crate::generated::write_into(&doc, "sting-speedup", &out) {
            Ok(true) => note("docs/sting.md now shows this run"),
            Ok(false) => note("docs/sting.md already showed this run"),
            Err(e) => note(format!("docs/sting.md not written: {e}")),
        }
    } else {
        note("docs/sting.md left as it was: the run lacks a column");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn speedup_lines_and_fields() {
        let log = "noise\r\nsting_speedup#1| SPEEDUP app=mst size=\"5000 points\" cpus=2 one_vp_ms=10 per_cpu_ms=6 speedup=1.66 (wall time)\r\nSPEEDUP done\n";
        let lines = speedup_lines(log);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("SPEEDUP app=mst "));
        assert_eq!(speedup_field(&lines[0], "app"), Some("mst"));
        assert_eq!(speedup_field(&lines[0], "per_cpu_ms"), Some("6"));
        assert_eq!(speedup_field(&lines[0], "speedup"), Some("1.66"));
        assert_eq!(speedup_field(&lines[0], "cpu"), None);
    }

    /// One entry read back from a newc archive.
    #[derive(Debug, PartialEq, Eq)]
    struct Entry {
        name: String,
        ino: u32,
        mode: u32,
        nlink: u32,
        rdev: (u32, u32),
        data: Vec<u8>,
    }

    /// A minimal newc reader, checking magic, alignment and the trailer.
    fn read_newc(mut bytes: &[u8]) -> Vec<Entry> {
        let total = bytes.len();
        let mut entries = Vec::new();
        loop {
            let offset = total - bytes.len();
            assert_eq!(offset % 4, 0, "entry at {offset} not aligned");
            assert_eq!(&bytes[..6], b"070701");
            let field = |i: usize| {
                let s = std::str::from_utf8(&bytes[6 + 8 * i..14 + 8 * i]).unwrap();
                u32::from_str_radix(s, 16).unwrap()
            };
            let (ino, mode, nlink, size) = (field(0), field(1), field(4), field(6));
            let rdev = (field(9), field(10));
            let name_size = field(11) as usize;
            assert_eq!(field(12), 0, "check field");
            let name = &bytes[110..110 + name_size];
            assert_eq!(name.last(), Some(&0), "name not NUL-terminated");
            let name = String::from_utf8(name[..name_size - 1].to_vec()).unwrap();
            let data_start = (110 + name_size).next_multiple_of(4);
            assert!(bytes[110 + name_size..data_start].iter().all(|&b| b == 0));
            let data_end = data_start + size as usize;
            let data = bytes[data_start..data_end].to_vec();
            let next = data_end.next_multiple_of(4);
            assert!(bytes[data_end..next].iter().all(|&b| b == 0));
            bytes = &bytes[next..];
            if name == "TRAILER!!!" {
                assert!(bytes.is_empty(), "data after the trailer");
                return entries;
            }
            entries.push(Entry {
                name,
                ino,
                mode,
                nlink,
                rdev,
                data,
            });
        }
    }

    #[test]
    fn cpio_header_bytes() {
        let mut cpio = Cpio::default();
        cpio.file("ab", 0o644, b"xyz").unwrap();
        let bytes = cpio.finish();
        let want = "070701\
                    00000001000081a4000000000000000000000001000000000000000300000000\
                    00000000000000000000000000000003\
                    00000000ab\0";
        assert_eq!(&bytes[..want.len()], want.as_bytes());
        // 110 + 3 = 113 -> padded to 116, then 3 bytes of data padded to 4.
        assert_eq!(&bytes[113..120], b"\0\0\0xyz\0");
        assert_eq!(&bytes[120..126], b"070701");
        assert_eq!(bytes.len() % 4, 0);
    }

    #[test]
    fn cpio_round_trip() {
        let mut cpio = Cpio::default();
        cpio.dir("bin", 0o755);
        cpio.file("bin/busybox", 0o755, &[7u8; 5]).unwrap();
        cpio.symlink("bin/sh", "busybox");
        cpio.char_device("dev/console", 0o600, 5, 1);
        cpio.file("empty", 0o644, b"").unwrap();
        let bytes = cpio.finish();
        let entries = read_newc(&bytes);
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            ["bin", "bin/busybox", "bin/sh", "dev/console", "empty"]
        );
        assert_eq!(entries[0].mode, 0o040_755);
        assert_eq!(entries[0].nlink, 2);
        assert_eq!(entries[1].mode, 0o100_755);
        assert_eq!(entries[1].data, [7u8; 5]);
        assert_eq!(entries[2].mode, 0o120_777);
        assert_eq!(entries[2].data, b"busybox");
        assert_eq!(entries[3].mode, 0o020_600);
        assert_eq!(entries[3].rdev, (5, 1));
        assert!(entries[4].data.is_empty());
        let inos: Vec<u32> = entries.iter().map(|e| e.ino).collect();
        assert_eq!(inos, [1, 2, 3, 4, 5]);
        // Deterministic.
        let mut again = Cpio::default();
        again.dir("bin", 0o755);
        again.file("bin/busybox", 0o755, &[7u8; 5]).unwrap();
        again.symlink("bin/sh", "busybox");
        again.char_device("dev/console", 0o600, 5, 1);
        again.file("empty", 0o644, b"").unwrap();
        assert_eq!(again.finish(), bytes);
    }

    const LOG: &str = "\
[    0.000000] Linux version 6.1.0-56-amd64
LINUX kernel=6.1.0-56-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2\r
LINUX vulnerability spectre_v2=Mitigation: Retpolines; STIBP: disabled\r
BENCH name=linux.rdtsc.overhead unit=instructions iterations=1000 median=5 min=5 max=5\r
BENCH name=linux.syscall.null unit=instructions iterations=1000 median=250 min=250 max=900\r
LINUXINFO name=linux.sched.yield.switch a_yields=1101 b_yields_without_switch=0\r
x#1| BENCH name=linux.fork.exit unit=instructions iterations=1000 median=90000 min=1 max=2\r
BENCH done\r
";

    #[test]
    fn parses_logs() {
        let p = parse(LOG).unwrap();
        assert!(p.done);
        assert_eq!(p.rows.len(), 3);
        assert_eq!(
            p.rows[1],
            Row {
                name: "linux.syscall.null".into(),
                unit: "instructions".into(),
                iterations: 1000,
                median: 250,
                min: 250,
                max: 900,
                cpus: 1,
            }
        );
        assert_eq!(p.rows[2].name, "linux.fork.exit");
        assert_eq!(
            p.guest,
            [
                "kernel=6.1.0-56-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2",
                "vulnerability spectre_v2=Mitigation: Retpolines; STIBP: disabled"
            ]
        );
        assert_eq!(
            p.remarks,
            ["name=linux.sched.yield.switch a_yields=1101 b_yields_without_switch=0"]
        );
        assert!(parse("BENCH name=a unit=i iterations=1 median=x min=1 max=1").is_err());
        assert!(parse("BENCH name=a unit=i iterations=1 min=1 max=1").is_err());
        let twice = format!("{LOG}{LOG}");
        assert!(parse(&twice).unwrap_err().contains("reported twice"));
        assert!(!parse("x BENCH done\n").unwrap().done);
    }

    #[test]
    fn judges_and_compares() {
        assert!(judge(Some(EXIT_CLEAN), LOG).is_ok());
        assert!(judge(Some(35), LOG).unwrap_err().contains("program failed"));
        let undone = LOG.replace("BENCH done", "");
        assert!(judge(Some(EXIT_CLEAN), &undone)
            .unwrap_err()
            .contains("`BENCH done` is missing"));
        let panicked = format!("{LOG}[    9.1] Kernel panic - not syncing: x\n");
        assert!(judge(Some(EXIT_CLEAN), &panicked)
            .unwrap_err()
            .contains("Kernel panic"));
        let a = parse(LOG).unwrap();
        assert!(compare(&a, &a).is_ok());
        let b = parse(&LOG.replace("median=250", "median=251")).unwrap();
        assert!(compare(&a, &b)
            .unwrap_err()
            .contains("linux.syscall.null: median 250 / 251"));
    }

    #[test]
    fn finds_the_kernel_package() {
        let out = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(
            depends_on_kernel(out).as_deref(),
            Some("linux-image-6.1.0-56-amd64")
        );
        assert_eq!(depends_on_kernel("linux-image-amd64\n"), None);
    }

    #[test]
    fn qemu_matches_baton_settings() {
        let cmd = qemu_command(Path::new("qemu"), Path::new("k"), Path::new("i"), None);
        let line = shell_line(&cmd);
        for want in [
            "-machine q35",
            "-smp 1",
            "-accel tcg -cpu max",
            "-icount shift=0,align=off,sleep=off",
            "-no-reboot",
            "-kernel k -initrd i -append 'console=ttyS0 quiet panic=-1'",
        ] {
            assert!(line.contains(want), "{line} lacks {want}");
        }
    }

    #[test]
    fn tables() {
        let p = parse(LOG).unwrap();
        let t = table(&p.rows);
        assert!(
            t.contains("| `linux.rdtsc.overhead` | 5 | 5 | 5 |  |"),
            "{t}"
        );
        assert!(
            t.contains("| `linux.syscall.null` | 250 | 250 | 900 | 1.00 |"),
            "{t}"
        );
    }
}
