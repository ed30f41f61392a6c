//! The QEMU machine Baton runs on, and the choice of accelerator.
//!
//! QEMU loads the kernel ELF itself and enters it through PVH (no bootloader), with the
//! initrd as the one boot module and the kernel command line from `-append`. The serial port
//! is QEMU's standard output. The kernel reports how it ended by writing to the
//! `isa-debug-exit` port 0xf4, which makes QEMU exit with status `(value << 1) | 1`.
//!
//! Hardware KVM is used only where it is real: `/dev/kvm` opens and the `kvm_intel` or
//! `kvm_amd` module is loaded. Our development and CI machines have only `kvm_pvm`, a
//! software hypervisor that cannot run a kernel correctly; there, and when `--tcg`,
//! `BATON_TCG=1` or `--icount` asks for it, QEMU's TCG emulator is used.

use crate::build::Images;
use std::fmt;
use std::path::Path;
use std::process::Command;

/// The default TCP port of the gdb stub of `run --gdb` (QEMU's own default, as `-s`).
pub const GDB_PORT: u16 = 1234;

/// QEMU's exit status after the kernel wrote 0x10 to the exit port: a clean shutdown.
pub const EXIT_CLEAN: i32 = 33;
/// QEMU's exit status after the kernel wrote 0x11: a kernel panic or kernel exception.
pub const EXIT_KERNEL_FAILED: i32 = 35;

/// How QEMU runs the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualization (`-enable-kvm -cpu host`).
    Kvm,
    /// QEMU's emulator (`-accel tcg -cpu max`).
    Tcg,
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Accel::Kvm => "KVM",
            Accel::Tcg => "TCG",
        })
    }
}

/// Whether `BATON_TCG` is set to anything but empty or `0`.
pub fn tcg_forced_by_env() -> bool {
    std::env::var_os("BATON_TCG").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Chooses the accelerator and says which on standard error. `force_tcg` is `--tcg`;
/// `BATON_TCG` and `icount` (which needs TCG) are taken into account here.
pub fn choose_accel(force_tcg: bool, icount: bool) -> Accel {
    let (accel, why) = if force_tcg {
        (Accel::Tcg, "requested with --tcg".to_string())
    } else if tcg_forced_by_env() {
        (Accel::Tcg, "requested with BATON_TCG".to_string())
    } else if icount {
        (Accel::Tcg, "-icount needs it".to_string())
    } else {
        match hardware_kvm() {
            Ok(module) => (Accel::Kvm, format!("hardware virtualization, {module}")),
            Err(why) => (Accel::Tcg, format!("no hardware KVM: {why}")),
        }
    };
    eprintln!("xtask: accelerator: {accel} ({why})");
    accel
}

/// The loaded hardware KVM module, or why there is none.
fn hardware_kvm() -> Result<&'static str, String> {
    if !Path::new("/dev/kvm").exists() {
        return Err("/dev/kvm does not exist".into());
    }
    let module = ["kvm_intel", "kvm_amd"]
        .into_iter()
        .find(|m| Path::new("/sys/module").join(m).exists())
        .ok_or(if Path::new("/sys/module/kvm_pvm").exists() {
            "/dev/kvm is kvm_pvm, which cannot run Baton"
        } else {
            "neither kvm_intel nor kvm_amd is loaded"
        })?;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map_err(|e| format!("cannot open /dev/kvm: {e}"))?;
    Ok(module)
}

/// The kernel command line: `init=<init>`, then `shutdown` if asked, then `extra`. An
/// `init=` word in `extra` replaces the default one.
pub fn cmdline(init: &str, shutdown: bool, extra: &[String]) -> String {
    let mut words = Vec::new();
    if !extra.iter().any(|w| w.starts_with("init=")) {
        words.push(format!("init={init}"));
    }
    if shutdown {
        words.push("shutdown".to_string());
    }
    words.extend(extra.iter().cloned());
    words.join(" ")
}

/// The machine's memory, QEMU's `-m`, in MiB, unless a boot asks for another size
/// ([`Machine::sized_command`]; a test's [`crate::tests::IntegrationTest::memory_mib`]).
pub const DEFAULT_MEMORY_MIB: u32 = 256;

/// One boot of the kernel, with [`DEFAULT_MEMORY_MIB`] of memory unless
/// [`Machine::sized_command`] or [`Machine::console_command`] gives it another size.
pub struct Machine<'a> {
    /// What to boot.
    pub images: &'a Images,
    /// How to run it.
    pub accel: Accel,
    /// Number of CPUs.
    pub smp: u32,
    /// The kernel command line.
    pub cmdline: String,
    /// `-icount shift=0,align=off,sleep=off`: the TSC advances once per instruction.
    pub icount: bool,
    /// `-gdb tcp::<port> -S`: a gdb stub on this TCP port, and the CPUs paused until gdb
    /// continues them.
    pub gdb: Option<u16>,
    /// A disk image attached as a virtio block device (`crate::disk`), if any.
    pub disk: Option<std::path::PathBuf>,
}

/// QEMU's minimal firmware `qboot`, when installed (Debian ships it in `qemu-system-data`):
/// it reaches the kernel's PVH entry in about 80 thousand instructions where SeaBIOS takes
/// about 17 million. Without it QEMU's default firmware is used.
fn fast_firmware() -> Option<&'static Path> {
    let qboot = Path::new("/usr/share/qemu/qboot.rom");
    qboot.is_file().then_some(qboot)
}

/// Where `cargo xtask run` keeps a copy of the console's output, relative to the root.
pub const CONSOLE_LOG: &str = "results/console.log";

impl Machine<'_> {
    /// The QEMU command line; standard streams are left to the caller.
    pub fn command(&self, qemu: &Path) -> Command {
        self.sized_command(qemu, DEFAULT_MEMORY_MIB)
    }

    /// [`Machine::command`] with `memory_mib` MiB of memory (QEMU's `-m`) instead of
    /// [`DEFAULT_MEMORY_MIB`]: the kernel sizes its heap, its frame allocator and user
    /// memory from what the firmware reports, so this is how a boot is made short of memory.
    pub fn sized_command(&self, qemu: &Path, memory_mib: u32) -> Command {
        self.command_with(qemu, &["-serial", "stdio"], memory_mib)
    }

    /// [`Machine::command`] for a person at a terminal: the serial console on standard
    /// input and output with Ctrl-C passed to the guest (`signal=off`: the shell uses it)
    /// and QEMU's escape key on (`mux=on`: Ctrl-A X quits QEMU), its output also written to
    /// [`CONSOLE_LOG`] (what `cargo xtask trace --log` reads after the shell's `trace stop`).
    ///
    /// Not `interactive` (standard input is no terminal): the console on standard input and
    /// output as [`Machine::command`] has it, still copied to [`CONSOLE_LOG`].
    ///
    /// The machine has `memory_mib` MiB of memory (`cargo xtask run --memory`).
    pub fn console_command(&self, qemu: &Path, interactive: bool, memory_mib: u32) -> Command {
        let chardev = format!(
            "stdio,id=console{},logfile={}",
            if interactive {
                ",mux=on,signal=off"
            } else {
                ""
            },
            crate::workspace::root().join(CONSOLE_LOG).display()
        );
        if let Some(dir) = crate::workspace::root().join(CONSOLE_LOG).parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        self.command_with(
            qemu,
            &["-chardev", &chardev, "-serial", "chardev:console"],
            memory_mib,
        )
    }

    /// The QEMU command line with `serial` as the serial port's arguments and `memory_mib`
    /// MiB of memory.
    fn command_with(&self, qemu: &Path, serial: &[&str], memory_mib: u32) -> Command {
        let mut cmd = Command::new(qemu);
        cmd.current_dir(crate::workspace::root());
        cmd.args(["-machine", "q35", "-m"])
            .arg(format!("{memory_mib}M"))
            .arg("-smp")
            .arg(self.smp.to_string())
            .args(["-display", "none"])
            .args(serial)
            .args(["-monitor", "none", "-no-reboot"])
            .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"]);
        match self.accel {
            Accel::Kvm => cmd.args(["-enable-kvm", "-cpu", "host"]),
            Accel::Tcg => cmd.args(["-accel", "tcg", "-cpu", "max"]),
        };
        if self.icount {
            cmd.args(["-icount", "shift=0,align=off,sleep=off"]);
        }
        if let Some(port) = self.gdb {
            cmd.arg("-gdb").arg(format!("tcp::{port}")).arg("-S");
        }
        if let Some(bios) = fast_firmware() {
            cmd.arg("-bios").arg(bios);
        }
        if let Some(disk) = &self.disk {
            cmd.args(crate::disk::qemu_args(disk));
        }
        cmd.arg("-kernel")
            .arg(&self.images.kernel)
            .arg("-initrd")
            .arg(&self.images.initrd)
            .arg("-append")
            .arg(&self.cmdline);
        cmd
    }
}

/// Describes a QEMU exit status that is not [`EXIT_CLEAN`].
pub fn explain_exit(code: Option<i32>) -> String {
    match code {
        Some(EXIT_KERNEL_FAILED) => {
            format!("qemu exit status {EXIT_KERNEL_FAILED}: kernel panic or kernel exception")
        }
        Some(0) => "qemu exit status 0: the machine reset or powered off without reporting \
                   through the exit port (a triple fault?)"
            .to_string(),
        Some(n) => format!("qemu exit status {n}"),
        None => "qemu was killed by a signal".to_string(),
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    /// The words after `-m` in `cmd`.
    fn memory_of(cmd: &Command) -> Vec<String> {
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        args.windows(2)
            .filter(|w| w[0] == "-m")
            .map(|w| w[1].clone())
            .collect()
    }

    #[test]
    fn memory_is_the_default_unless_a_boot_sizes_it() {
        let images = Images {
            kernel: "k".into(),
            initrd: "i".into(),
            programs: Vec::new(),
        };
        let m = Machine {
            images: &images,
            accel: Accel::Tcg,
            smp: 1,
            cmdline: String::new(),
            icount: false,
            gdb: None,
            disk: None,
        };
        let qemu = Path::new("qemu");
        assert_eq!(memory_of(&m.command(qemu)), ["256M"]);
        assert_eq!(memory_of(&m.sized_command(qemu, 16)), ["16M"]);
    }

    #[test]
    fn command_lines() {
        assert_eq!(cmdline("init", false, &[]), "init=init");
        assert_eq!(
            cmdline("iso_a,iso_b", true, &[]),
            "init=iso_a,iso_b shutdown"
        );
        let extra = ["init=spin_a".to_string(), "verbose".to_string()];
        assert_eq!(
            cmdline("init", true, &extra),
            "shutdown init=spin_a verbose"
        );
    }
}
