//! The disk image of the virtio block device (`docs/drivers.md`).
//!
//! QEMU gets a modern-only virtio block device (`virtio-blk-pci,disable-legacy=on`: its
//! registers are memory-mapped, found through PCI capabilities) backed by a raw image file.
//! The image is made here, in Rust, as a sparse file of [`DISK_SIZE`] bytes of zeros with
//! Baton's partition table in sector 0 (`baton_disk`: a file-system partition and a swap
//! area), so nothing beyond QEMU itself is needed. `cargo xtask run` attaches `target/disk.img`
//! (made once, then kept: what a person writes there is there at the next run); each
//! integration test that asks for a disk, and each benchmark boot, gets a fresh image of
//! its own under `target/disks/`, so boots running side by side never share one.

use std::fs::{self, OpenOptions};
use std::io::Write;
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

/// Makes a sparse image of [`DISK_SIZE`] zero bytes at `path` (its folder too), with the
/// standard partition table (`baton_disk::standard`) in sector 0.
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
        .map_err(|e| format!("cannot size {}: {e}", path.display()))?;
    let mut sector0 = [0u8; 512];
    let parts = baton_disk::standard(DISK_SIZE / baton_disk::SECTOR)
        .map_err(|e| format!("no layout for a disk of {DISK_SIZE} bytes: {e:?}"))?;
    baton_disk::write_table(&mut sector0, &parts)
        .map_err(|e| format!("cannot write the partition table: {e:?}"))?;
    (&file)
        .write_all(&sector0)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
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
    fn fresh_images_are_blank_and_separate() {
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
        // Sector 0 is the partition table, the rest of the first 4 KiB zeros.
        let sector0: [u8; 512] = head[..512].try_into().unwrap();
        let capacity = DISK_SIZE / baton_disk::SECTOR;
        let swap = baton_disk::find(&sector0, capacity, baton_disk::TYPE_SWAP).unwrap();
        assert_eq!(swap.end(), capacity);
        assert!(baton_disk::find(&sector0, capacity, baton_disk::TYPE_FILES).is_ok());
        assert!(head[512..4096].iter().all(|&x| x == 0));
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
