//! The disk image of the virtio block device (`docs/drivers.md`).
//!
//! QEMU gets a modern-only virtio block device (`virtio-blk-pci,disable-legacy=on`: its
//! registers are memory-mapped, found through PCI capabilities) backed by a raw image file.
//! The image is made here, in Rust, as a sparse file of [`DISK_SIZE`] bytes of zeros, so
//! nothing beyond QEMU itself is needed. `cargo xtask run` attaches `target/disk.img`
//! (made once, then kept: what a person writes there is there at the next run); each
//! integration test that asks for a disk, and each benchmark boot, gets a fresh image of
//! its own under `target/disks/`, so boots running side by side never share one.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

/// Size of a new image: 64 MiB (131072 sectors of 512 bytes).
pub const DISK_SIZE: u64 = 64 << 20;

/// `cargo xtask run`'s image, `target/disk.img`, made if it does not exist.
pub fn run_image() -> Result<PathBuf, String> {
    let path = crate::workspace::target_dir().join("disk.img");
    if !path.exists() {
        make(&path)?;
    }
    Ok(path)
}

/// A fresh image (all zeros) for the boot `name`: `target/disks/<name>.img`, replacing
/// any image a previous boot of that name left.
pub fn fresh(name: &str) -> Result<PathBuf, String> {
    let path = crate::workspace::target_dir()
        .join("disks")
        .join(format!("{name}.img"));
    if path.exists() {
        fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    }
    make(&path)?;
    Ok(path)
}

/// Makes a sparse image of [`DISK_SIZE`] zero bytes at `path` (its folder too).
fn make(path: &Path) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    file.set_len(DISK_SIZE)
        .map_err(|e| format!("cannot size {}: {e}", path.display()))
}

/// QEMU's arguments attaching the image at `path` as a modern-only virtio block device.
pub fn qemu_args(path: &Path) -> Vec<String> {
    vec![
        "-drive".to_string(),
        format!(
            "file={},if=none,id=disk0,format=raw,cache=unsafe",
            path.display()
        ),
        "-device".to_string(),
        "virtio-blk-pci,drive=disk0,disable-legacy=on".to_string(),
    ]
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn fresh_images_are_zero_and_separate() {
        let a = fresh("unit_a").unwrap();
        let b = fresh("unit_b").unwrap();
        assert_ne!(a, b);
        assert_eq!(fs::metadata(&a).unwrap().len(), DISK_SIZE);
        fs::write(&a, b"dirty").unwrap();
        // A new boot of the same name starts from zeros again.
        let a2 = fresh("unit_a").unwrap();
        assert_eq!(a, a2);
        assert_eq!(fs::metadata(&a2).unwrap().len(), DISK_SIZE);
        let head = fs::read(&a2).unwrap();
        assert!(head.iter().take(4096).all(|&x| x == 0));
        fs::remove_file(a2).unwrap();
        fs::remove_file(b).unwrap();
    }

    #[test]
    fn the_device_is_modern_only() {
        let args = qemu_args(Path::new("/x/d.img")).join(" ");
        assert!(args.contains("disable-legacy=on"));
        assert!(args.contains("file=/x/d.img"));
    }
}
