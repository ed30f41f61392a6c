//! Writing the initrd: a POSIX ustar archive of the user programs.
//!
//! # Invariants
//! - Each program is a regular file named by its plain program name: at the top level for
//!   a program a person runs, in the folder `tests/` for a test program (the kernel names
//!   it without the folder and marks it a test program).
//! - The archive is deterministic: entries sorted by name, mode 0o755, mtime 0, uid and gid 0,
//!   no user or group names, so the same programs always give the same bytes.

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
        builder
            .append(&header, data.as_slice())
            .map_err(|e| format!("initrd entry `{name}`: {e}"))?;
    }
    builder.into_inner().map_err(|e| format!("initrd: {e}"))
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
    fn rejects_paths() {
        assert!(archive(&mut [("a/b", vec![])]).is_err());
    }
}
