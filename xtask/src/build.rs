//! Building what QEMU boots: the kernel ELF, the user programs and the initrd.
//!
//! The kernel is cross-built for [`TARGET`] (soft-float) and the user programs for
//! [`USER_TARGET`] (hard-float), in release mode, each in its own target directory
//! (`target/kernel`, `target/user`) because they need different code-generation flags, which are set through `CARGO_ENCODED_RUSTFLAGS` (this overrides any
//! `RUSTFLAGS` or configured flags). The kernel crate's own build script passes its linker
//! script. Every `user/programs/src/bin/<name>.rs` is one program; the initrd holds them all.

use crate::deps::{self, TARGET, USER_TARGET};
use crate::initrd;
use crate::workspace::{cargo, command, root, run_checked, target_dir, Step};
use std::fs;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// One of the two cross builds.
pub struct CrossBuild {
    /// The package to build.
    pub package: &'static str,
    /// The Rust target it is built for.
    pub target: &'static str,
    /// Its target directory, under `target/`.
    pub dir: &'static str,
    /// Code-generation flags, joined with 0x1f into `CARGO_ENCODED_RUSTFLAGS`.
    pub rustflags: &'static [&'static str],
    /// Cargo features of the package.
    pub features: &'static [&'static str],
}

/// The kernel: static, in the top 2 GiB (`code-model=kernel`). Without forced frame
/// pointers (no panic walks the stack, and gdb unwinds with the debug information): `rbp`
/// is one more register for the hot paths, which spill less (a few instructions on every
/// system call).
pub const KERNEL: CrossBuild = CrossBuild {
    package: "baton-kernel",
    target: TARGET,
    dir: "kernel",
    rustflags: &["-Crelocation-model=static", "-Ccode-model=kernel"],
    features: &[],
};

/// The kernel with allocation fault injection (`kern::fault`; honours `failalloc=N`), in
/// a target directory of its own so that switching builds rebuilds neither.
pub const KERNEL_FAULT_INJECT: CrossBuild = CrossBuild {
    dir: "kernel-fault-inject",
    features: &["fault-inject"],
    ..KERNEL
};

/// The user programs: static executables, hard-float. Built for the host's Linux target
/// (always installed with a Rust toolchain on x86-64 Linux, and its `core` is built with
/// SSE2) as `no_std`, `no_main` programs, linked by rust-lld rather than the C compiler,
/// statically and with `user.ld`, so nothing of Linux but its calling convention is used;
/// `--cfg baton` tells the crates that are also built for the host (`sting`) that they run
/// on Baton. `baton_rt::mem` provides the memory functions that target's `core` expects
/// from a C library.
pub const USER: CrossBuild = CrossBuild {
    package: "baton-programs",
    target: USER_TARGET,
    dir: "user",
    rustflags: &[
        "-Crelocation-model=static",
        "-Ctarget-feature=+crt-static",
        "-Clinker=rust-lld",
        "-Clinker-flavor=ld.lld",
        "--cfg",
        "baton",
    ],
    features: &[],
};

impl CrossBuild {
    /// `cargo <subcommand> --release -p <package> --target <target>` with this build's
    /// target directory and flags.
    pub fn cargo(&self, subcommand: &str) -> Command {
        let mut cmd = cargo();
        cmd.args([
            subcommand,
            "--release",
            "-p",
            self.package,
            "--target",
            self.target,
        ])
        .env("CARGO_TARGET_DIR", target_dir().join(self.dir))
        .env("CARGO_ENCODED_RUSTFLAGS", self.rustflags.join("\x1f"));
        if !self.features.is_empty() {
            cmd.args(["--features", &self.features.join(",")]);
        }
        cmd
    }

    /// Where the release binaries land.
    pub fn out_dir(&self) -> PathBuf {
        target_dir()
            .join(self.dir)
            .join(self.target)
            .join("release")
    }
}

/// The built images.
pub struct Images {
    /// The kernel ELF (with debug info).
    pub kernel: PathBuf,
    /// The initrd archive.
    pub initrd: PathBuf,
    /// The program names in the initrd, sorted.
    pub programs: Vec<String>,
}

/// `cargo xtask build`.
pub fn build_command() -> Result<ExitCode, String> {
    deps::ensure_target()?;
    deps::ensure_qemu()?;
    let images = build()?;
    println!("kernel: {}", images.kernel.display());
    for name in &images.programs {
        println!("program: {}", USER.out_dir().join(name).display());
    }
    println!(
        "initrd: {} ({})",
        images.initrd.display(),
        images.programs.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// Builds the kernel, the user programs and the initrd.
pub fn build() -> Result<Images, String> {
    build_with(&KERNEL)
}

/// Builds the kernel as `kernel_build` says ([`KERNEL`] or [`KERNEL_FAULT_INJECT`]), the
/// user programs and the initrd.
pub fn build_with(kernel_build: &CrossBuild) -> Result<Images, String> {
    let features = if kernel_build.features.is_empty() {
        String::new()
    } else {
        format!(", features {}", kernel_build.features.join(","))
    };
    let step = Step::start(format!(
        "building the kernel ({}{features})",
        kernel_build.package
    ));
    step.finish(run_checked(
        &mut kernel_build.cargo("build"),
        "the kernel build",
    ))
    .map_err(compiler_output)?;
    let kernel = kernel_build.out_dir().join(kernel_build.package);
    if !kernel.is_file() {
        return Err(format!(
            "the kernel build succeeded but {} does not exist",
            kernel.display()
        ));
    }

    build_extensions()?;
    let programs = program_names()?;
    let step = Step::start_with(
        format!("building the user programs ({})", USER.package),
        programs.join(", "),
    );
    step.finish(run_checked(
        &mut USER.cargo("build"),
        "the user-program build",
    ))
    .map_err(compiler_output)?;
    // The boot image gets each program without its line tables (they stay in the build
    // directory, where `crate::symbolize` reads them): several times smaller.
    let objcopy = crate::deps::ensure_tool(&crate::deps::OBJCOPY)?;
    let tools = tools()?;
    let lean = target_dir().join("initrd-programs");
    fs::create_dir_all(&lean).map_err(|e| format!("{}: {e}", lean.display()))?;
    let mut files = Vec::new();
    for name in &programs {
        let path = USER.out_dir().join(name);
        if !path.is_file() {
            return Err(format!(
                "the user-program build succeeded but {} does not exist",
                path.display()
            ));
        }
        let stripped = lean.join(name);
        let fresh = fs::metadata(&stripped)
            .and_then(|s| Ok((s.modified()?, fs::metadata(&path)?.modified()?)))
            .is_ok_and(|(s, p)| s >= p);
        if !fresh {
            run_checked(
                command(&objcopy)
                    .arg("--strip-debug")
                    .arg(&path)
                    .arg(&stripped),
                "objcopy --strip-debug",
            )?;
        }
        // A test program goes under `tests/` (the kernel names it without the folder and
        // marks it a test program): the top of the boot image is what a person runs.
        let archived = if tools.iter().any(|t| t == name) {
            name.clone()
        } else {
            format!("tests/{name}")
        };
        files.push((archived, stripped));
    }

    let initrd = target_dir().join("initrd.tar");
    initrd::write(&initrd, &files)?;
    Ok(Images {
        kernel,
        initrd,
        programs,
    })
}

/// Where the list of the programs a person runs is (the others are test programs).
pub const TOOLS: &str = "user/programs/tools.txt";

/// The programs a person runs ([`TOOLS`]: one name a line, `#` comments).
pub fn tools() -> Result<Vec<String>, String> {
    let path = root().join(TOOLS);
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(parse_tools(&text))
}

/// The names in a [`TOOLS`] file's text.
pub fn parse_tools(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// The WebAssembly target extensions are built for.
pub const WASM_TARGET: &str = "wasm32-unknown-unknown";

/// The extension crates (`extensions/*`), built for [`WASM_TARGET`].
pub const EXTENSIONS: &[&str] = &["null-syscall", "appel", "caller"];

/// Builds the extension crates for [`WASM_TARGET`] (installing the target with rustup
/// when missing) into `target/extensions/wasm32-unknown-unknown/release/<crate>.wasm`,
/// where the user programs that install them embed them from (`include_bytes!`): a small
/// stack and one 64 KiB page of initial memory, so that a module
/// fits the kernel's limit on linear memory (`baton_abi::spin::MEMORY_PAGES_MAX`).
pub fn build_extensions() -> Result<(), String> {
    crate::deps::ensure_target_named(WASM_TARGET)?;
    let step = Step::start_with("building the extensions".to_string(), EXTENSIONS.join(", "));
    let mut cmd = crate::workspace::cargo();
    cmd.args(["build", "--release", "--target", WASM_TARGET]);
    for p in EXTENSIONS {
        cmd.args(["-p", p]);
    }
    cmd.env("CARGO_TARGET_DIR", target_dir().join("extensions"))
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            [
                "-Clink-arg=-zstack-size=16384",
                "-Clink-arg=--initial-memory=65536",
                "-Clink-arg=--max-memory=131072",
            ]
            .join("\x1f"),
        );
    step.finish(run_checked(&mut cmd, "the extension build"))
        .map_err(compiler_output)
}

/// Points from a failed cargo build to its own messages.
fn compiler_output(e: String) -> String {
    format!("{e}; the compiler's messages are above")
}

/// The programs: one per `user/programs/src/bin/<name>.rs` (or `<name>/main.rs`), sorted.
fn program_names() -> Result<Vec<String>, String> {
    let dir = root().join("user/programs/src/bin");
    let entries =
        std::fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
            .path();
        let name = if path.extension().is_some_and(|ext| ext == "rs") && path.is_file() {
            path.file_stem()
        } else if path.join("main.rs").is_file() {
            path.file_name()
        } else {
            None
        };
        if let Some(name) = name {
            names.push(name.to_string_lossy().into_owned());
        }
    }
    if names.is_empty() {
        return Err(format!("no user programs in {}", dir.display()));
    }
    names.sort();
    Ok(names)
}
