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
//!
//! The file-system partition is formatted FAT (with the `fatfs` crate) and holds the boot
//! image's programs as `/bin/<name>` and a sample file (`baton_disk::SAMPLE_PATH`), so that
//! the file server on Baton has files to serve and programs can be started from files
//! (`docs/files.md`). `cargo xtask run` copies the programs of the current build onto its
//! kept image again at each run, leaving every other file as it is.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Size of a new image: 64 MiB (131072 sectors of 512 bytes).
pub const DISK_SIZE: u64 = 64 << 20;

/// `cargo xtask run`'s image, `target/disk.img`, made if it does not exist.
pub fn run_image() -> Result<PathBuf, String> {
    let path = crate::workspace::target_dir().join("disk.img");
    if !path.exists() {
        make(&path)?;
    } else if let Err(e) = refresh_programs(&path) {
        eprintln!(
            "xtask: the programs on {} were not updated: {e}",
            path.display()
        );
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
        .read(true)
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
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let files = parts[0];
    let mut part = Partition::new(file, files)?;
    fatfs::format_volume(
        &mut part,
        fatfs::FormatVolumeOptions::new().volume_label(*b"BATON      "),
    )
    .map_err(|e| format!("cannot format the file system of {}: {e}", path.display()))?;
    let fs = fatfs::FileSystem::new(part, fatfs::FsOptions::new()).map_err(|e| {
        format!(
            "cannot mount the new file system of {}: {e}",
            path.display()
        )
    })?;
    let sample: Vec<u8> = (0..baton_disk::SAMPLE_LEN)
        .map(baton_disk::sample_byte)
        .collect();
    put(&fs, baton_disk::SAMPLE_PATH, &sample)?;
    copy_programs(&fs)?;
    fs.unmount()
        .map_err(|e| format!("cannot finish the file system of {}: {e}", path.display()))
}

/// The file-system partition of the image at `path`, mounted.
fn mount(path: &Path) -> Result<fatfs::FileSystem<Partition>, String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut sector0 = [0u8; 512];
    (&file)
        .read_exact(&mut sector0)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let size = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let files = baton_disk::find(&sector0, size / baton_disk::SECTOR, baton_disk::TYPE_FILES)
        .map_err(|e| format!("no file system partition on {}: {e:?}", path.display()))?;
    fatfs::FileSystem::new(Partition::new(file, files)?, fatfs::FsOptions::new())
        .map_err(|e| format!("the file system of {} does not mount: {e}", path.display()))
}

/// Copies the programs of the last build onto the kept image at `path` again.
fn refresh_programs(path: &Path) -> Result<(), String> {
    let fs = mount(path)?;
    copy_programs(&fs)?;
    fs.unmount().map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `bytes` as the file `path` (absolute, one folder deep at most), making its
/// folder and replacing a file of that name.
fn put<T: fatfs::ReadWriteSeek>(
    fs: &fatfs::FileSystem<T>,
    path: &str,
    bytes: &[u8],
) -> Result<(), String> {
    let rel = path.trim_start_matches('/');
    let dir = match rel.rsplit_once('/') {
        Some((folder, _)) => match fs.root_dir().open_dir(folder) {
            Ok(d) => d,
            Err(_) => fs
                .root_dir()
                .create_dir(folder)
                .map_err(|e| format!("cannot make {folder}: {e}"))?,
        },
        None => fs.root_dir(),
    };
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let mut f = dir
        .create_file(name)
        .map_err(|e| format!("cannot create {path}: {e}"))?;
    f.truncate().map_err(|e| format!("{path}: {e}"))?;
    f.write_all(bytes)
        .map_err(|e| format!("cannot write {path}: {e}"))?;
    f.flush().map_err(|e| format!("cannot write {path}: {e}"))
}

/// Copies every program of the boot image (`target/initrd-programs`, what the last build
/// put in it) to `/bin/<name>`; none when nothing is built yet.
fn copy_programs<T: fatfs::ReadWriteSeek>(fs: &fatfs::FileSystem<T>) -> Result<(), String> {
    let dir = crate::workspace::target_dir().join("initrd-programs");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(());
    };
    let mut names: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    names.sort();
    for p in names.iter().filter(|p| p.is_file()) {
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let bytes = fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        put(fs, &format!("{}/{name}", baton_disk::PROGRAM_DIR), &bytes)?;
    }
    Ok(())
}

/// The file-system partition of an image file, as the byte stream `fatfs` formats and
/// mounts (reads and writes are kept inside it; the file stays sparse where nothing is
/// written).
struct Partition {
    file: File,
    start: u64,
    len: u64,
    pos: u64,
}

impl Partition {
    fn new(file: File, part: baton_disk::Partition) -> Result<Partition, String> {
        Ok(Partition {
            file,
            start: part.start * baton_disk::SECTOR,
            len: part.sectors * baton_disk::SECTOR,
            pos: 0,
        })
    }

    /// How many of `want` bytes from the position are inside the partition.
    fn room(&self, want: usize) -> usize {
        (self.len.saturating_sub(self.pos)).min(want as u64) as usize
    }
}

impl Read for Partition {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.room(buf.len());
        self.file.seek(SeekFrom::Start(self.start + self.pos))?;
        let got = self.file.read(&mut buf[..n])?;
        self.pos += got as u64;
        Ok(got)
    }
}

impl Write for Partition {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.room(buf.len());
        if n == 0 && !buf.is_empty() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "end of partition"));
        }
        self.file.seek(SeekFrom::Start(self.start + self.pos))?;
        let put = self.file.write(&buf[..n])?;
        self.pos += put as u64;
        Ok(put)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Seek for Partition {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        match pos {
            Some(p) if p <= self.len => {
                self.pos = p;
                Ok(p)
            }
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek outside the partition",
            )),
        }
    }
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
        // The file system holds the sample file, byte for byte.
        let fs = mount(&a2).unwrap();
        let mut f = fs
            .root_dir()
            .open_file(baton_disk::SAMPLE_PATH.trim_start_matches('/'))
            .unwrap();
        let mut got = Vec::new();
        f.read_to_end(&mut got).unwrap();
        assert_eq!(got.len() as u64, baton_disk::SAMPLE_LEN);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &b)| b == baton_disk::sample_byte(i as u64)));
        drop(f);
        drop(fs);
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
