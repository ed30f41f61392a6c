//! Links every program with `user.ld`, which lays it out as a static ELF executable at
//! 0x400000 with separate text (R+X), rodata (R) and data+bss (RW) segments.

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")
        .expect("cargo sets CARGO_MANIFEST_DIR for build scripts");
    println!("cargo:rustc-link-arg-bins=-T{manifest_dir}/user.ld");
    println!("cargo:rerun-if-changed=user.ld");
}
