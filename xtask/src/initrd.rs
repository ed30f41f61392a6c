//! Writing the initrd: a POSIX ustar archive of the user programs.
//!
//! # Invariants
//! - Each program is a regular file named by its plain program name: at the top level for
//!   a program a person runs, in the folder `tests/` for a test program (the kernel names
//!   it without the folder and marks it a test program).
//! - The archive is deterministic: entries sorted by name, mode 0o755, mtime 0, uid and gid 0,
//!   no user or group names, so the same programs always give the same bytes.
//! - Every program's bytes start on a 4 KiB boundary of the archive (a pax global header
//!   whose only record is a comment pads the space before its header, and readers skip
//!   it): the kernel maps a program's pages straight from the boot image's frames,
//!   copy-on-write, as Accent mapped a file's pages (`docs/vm.md`, "Task creation").

use std::path::{Path, PathBuf};
use tar::{Builder, EntryType, Header};

/// Writes the archive of `files` (program name, path of its ELF) to `out`.
pub fn write(out: &Path, files: &[(String, PathBuf)]) -> Result<(), String> {
    let mut entries = Vec::with_capacity(files.len());
    for (name, path) in files {
        let data =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        entries.push((name.as_str(), data));
    }
    let archive = archive(&mut entries)?;
    std::fs::write(out, archive).map_err(|e| format!("cannot write {}: {e}", out.display()))
}

/// The archive of `entries` (name, contents), which it sorts by name.
fn archive(entries: &mut [(&str, Vec<u8>)]) -> Result<Vec<u8>, String> {
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let mut builder = Builder::new(Vec::new());
    let mut at = 0u64;
    for (name, data) in entries.iter() {
        let plain = name.strip_prefix("tests/").unwrap_or(name);
        if plain.is_empty() || plain.contains('/') {
            return Err(format!("bad initrd entry name `{name}`"));
        }
        let mut header = Header::new_ustar();
        header
            .set_path(name)
            .map_err(|e| format!("initrd entry name `{name}`: {e}"))?;
        header.set_entry_type(EntryType::Regular);
        header.set_size(data.len() as u64);
        header.set_mode(0o755);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_cksum();
        // The data follows its 512-byte header: pad so that it starts on a page.
        let gap = (PAGE - (at + BLOCK) % PAGE) % PAGE;
        if gap > 0 {
            at += append_padding(&mut builder, gap)?;
        }
        builder
            .append(&header, data.as_slice())
            .map_err(|e| format!("initrd entry `{name}`: {e}"))?;
        at += BLOCK + (data.len() as u64).div_ceil(BLOCK) * BLOCK;
    }
    builder.into_inner().map_err(|e| format!("initrd: {e}"))
}

/// Bytes in a tar block.
const BLOCK: u64 = 512;
/// The alignment of every program's bytes.
const PAGE: u64 = 4096;

/// Appends a pax global header that takes `gap` bytes (a multiple of 512, at least one
/// block) with its data: one `comment` record, which readers ignore. Returns `gap`.
fn append_padding(builder: &mut Builder<Vec<u8>>, gap: u64) -> Result<u64, String> {
    let len = (gap - BLOCK) as usize;
    let mut data = Vec::with_capacity(len);
    if len > 0 {
        // "<len> comment=xxx...\n", where <len> counts the whole record.
        let prefix = format!("{len} comment=");
        data.extend_from_slice(prefix.as_bytes());
        data.resize(len - 1, b'x');
        data.push(b'\n');
    }
    let mut header = Header::new_ustar();
    header
        .set_path("pad")
        .map_err(|e| format!("initrd padding: {e}"))?;
    header.set_entry_type(EntryType::XGlobalHeader);
    header.set_size(len as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header.set_cksum();
    builder
        .append(&header, data.as_slice())
        .map_err(|e| format!("initrd padding: {e}"))?;
    Ok(gap)
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn sorted_deterministic_ustar() {
        let mut entries = vec![("survivor", vec![1u8; 700]), ("init", b"\x7fELF".to_vec())];
        let bytes = archive(&mut entries).unwrap();
        let mut reversed = vec![("init", b"\x7fELF".to_vec()), ("survivor", vec![1u8; 700])];
        assert_eq!(bytes, archive(&mut reversed).unwrap());
        assert_eq!(bytes.len() % 512, 0);

        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let header = entry.header();
            if header.entry_type() == EntryType::XGlobalHeader {
                continue;
            }
            assert_eq!(entry.raw_file_position() % PAGE, 0, "data page aligned");
            assert_eq!(&header.as_bytes()[257..265], b"ustar\x0000");
            assert_eq!(header.mode().unwrap(), 0o755);
            assert_eq!(header.mtime().unwrap(), 0);
            assert_eq!(header.entry_type(), EntryType::Regular);
            seen.push((
                entry.path().unwrap().to_string_lossy().into_owned(),
                header.size().unwrap(),
            ));
        }
        assert_eq!(
            seen,
            [("init".to_string(), 4), ("survivor".to_string(), 700)]
        );
    }

    #[test]
    fn every_program_starts_on_a_page() {
        let mut entries: Vec<(&str, Vec<u8>)> = (0..9)
            .map(|i| {
                (
                    ["a", "b", "c", "d", "e", "f", "g", "h", "i"][i],
                    vec![i as u8; i * 700],
                )
            })
            .collect();
        let bytes = archive(&mut entries).unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut n = 0;
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            if entry.header().entry_type() != EntryType::Regular {
                continue;
            }
            let at = entry.raw_file_position() as usize;
            assert_eq!(at % PAGE as usize, 0);
            let size = entry.header().size().unwrap() as usize;
            assert_eq!(&bytes[at..at + size], &vec![n as u8; n * 700][..]);
            n += 1;
        }
        assert_eq!(n, 9);
    }

    #[test]
    fn rejects_paths() {
        assert!(archive(&mut [("a/b", vec![])]).is_err());
    }
}
