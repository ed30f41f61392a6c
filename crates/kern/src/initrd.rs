//! The initial ramdisk: a POSIX ustar archive of boot modules.
//!
//! Each regular file in the archive is one boot module (an ELF user program); its path in
//! the archive, without a leading `./`, is the module's name. Directories and every other
//! entry type (links, devices, pax and GNU extension headers) are skipped.
//!
//! The archive comes from the boot loader and is parsed once, completely, by [`parse`]:
//! every header is checked (checksum, octal fields, name, size against the end of the input)
//! and any malformation is an [`InitrdError`] naming the offending header, never a panic.
//!
//! # Invariants
//! - Every returned [`Module`]'s `data` is a sub-slice of the archive that lies entirely
//!   within it, and its `name` is non-empty UTF-8, at most [`MODULE_NAME_MAX`] bytes, with no
//!   leading `./` — so it always fits a [`baton_abi::ModuleInfo`].
//! - Modules are returned in archive order; [`find`] returns the first of equal names.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use baton_abi::MODULE_NAME_MAX;
use core::fmt;

/// Size of a tar block (headers and data padding).
pub const BLOCK: usize = 512;

/// One boot module: a regular file of the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module<'a> {
    /// The file's path in the archive (the ustar prefix joined with the name, no leading
    /// `./`). Borrowed from the archive unless a prefix had to be joined.
    pub name: Cow<'a, str>,
    /// The file's contents.
    pub data: &'a [u8],
}

/// What is wrong with an archive. `offset` is the byte offset of the offending header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitrdError {
    /// The input ends inside a header block.
    TruncatedHeader {
        /// Offset of the header.
        offset: usize,
    },
    /// The header's checksum does not match its contents.
    BadChecksum {
        /// Offset of the header.
        offset: usize,
    },
    /// A numeric field (size, checksum) is not octal.
    BadOctal {
        /// Offset of the header.
        offset: usize,
    },
    /// The file's data runs past the end of the input.
    SizeBeyondEnd {
        /// Offset of the header.
        offset: usize,
    },
    /// A regular file's name is not UTF-8 or is empty.
    BadName {
        /// Offset of the header.
        offset: usize,
    },
    /// A regular file's name is longer than [`MODULE_NAME_MAX`] bytes.
    NameTooLong {
        /// Offset of the header.
        offset: usize,
    },
}

impl InitrdError {
    /// A short lower-case description for reports.
    pub const fn describe(&self) -> &'static str {
        match self {
            InitrdError::TruncatedHeader { .. } => "truncated tar header",
            InitrdError::BadChecksum { .. } => "bad tar header checksum",
            InitrdError::BadOctal { .. } => "bad octal number in tar header",
            InitrdError::SizeBeyondEnd { .. } => "tar entry runs past the end of the archive",
            InitrdError::BadName { .. } => "bad module name (empty or not UTF-8)",
            InitrdError::NameTooLong { .. } => "module name too long",
        }
    }

    /// Byte offset of the offending header in the archive.
    pub const fn offset(&self) -> usize {
        match *self {
            InitrdError::TruncatedHeader { offset }
            | InitrdError::BadChecksum { offset }
            | InitrdError::BadOctal { offset }
            | InitrdError::SizeBeyondEnd { offset }
            | InitrdError::BadName { offset }
            | InitrdError::NameTooLong { offset } => offset,
        }
    }
}

impl fmt::Display for InitrdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (header at {:#x})", self.describe(), self.offset())
    }
}

impl From<InitrdError> for baton_abi::Error {
    fn from(_: InitrdError) -> baton_abi::Error {
        baton_abi::Error::BadFormat
    }
}

// Field positions in a ustar header.
const NAME: core::ops::Range<usize> = 0..100;
const SIZE: core::ops::Range<usize> = 124..136;
const CHKSUM: core::ops::Range<usize> = 148..156;
const TYPEFLAG: usize = 156;
const MAGIC: core::ops::Range<usize> = 257..263;
const PREFIX: core::ops::Range<usize> = 345..500;
const USTAR_MAGIC: &[u8] = b"ustar\0";

/// Parses an octal field: optional leading spaces, at least one octal digit, then only
/// NULs or spaces to the end of the field.
fn parse_octal(field: &[u8]) -> Option<u64> {
    let mut bytes = field.iter().skip_while(|&&b| b == b' ').peekable();
    let mut value: u64 = 0;
    let mut digits = 0;
    while let Some(&&b) = bytes.peek() {
        if !(b'0'..=b'7').contains(&b) {
            break;
        }
        value = value.checked_mul(8)?.checked_add(u64::from(b - b'0'))?;
        digits += 1;
        bytes.next();
    }
    if digits == 0 || !bytes.all(|&b| b == 0 || b == b' ') {
        return None;
    }
    Some(value)
}

/// The bytes of a NUL-terminated (or full-width) string field.
fn cstr(field: &[u8]) -> &[u8] {
    match field.iter().position(|&b| b == 0) {
        Some(n) => field.get(..n).unwrap_or(field),
        None => field,
    }
}

/// Whether the checksum stored in `header` matches its contents (the unsigned sum of its
/// bytes with the checksum field counted as spaces; the historical signed sum is accepted
/// too).
fn checksum_ok(header: &[u8], offset: usize) -> Result<bool, InitrdError> {
    let stored = header
        .get(CHKSUM)
        .and_then(parse_octal)
        .ok_or(InitrdError::BadOctal { offset })?;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in header.iter().enumerate() {
        let b = if CHKSUM.contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    Ok(stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed))
}

/// The module name of a regular-file header: prefix (if the header is POSIX ustar and the
/// prefix is non-empty) + "/" + name, without leading `./`.
fn entry_name(header: &[u8], offset: usize) -> Result<Cow<'_, str>, InitrdError> {
    let bad = InitrdError::BadName { offset };
    let name = header.get(NAME).map(cstr).ok_or(bad)?;
    let name = core::str::from_utf8(name).map_err(|_| bad)?;
    let prefix = if header.get(MAGIC) == Some(USTAR_MAGIC) {
        header.get(PREFIX).map(cstr).unwrap_or(&[])
    } else {
        &[]
    };
    let mut full: Cow<'_, str> = if prefix.is_empty() {
        Cow::Borrowed(name)
    } else {
        let prefix = core::str::from_utf8(prefix).map_err(|_| bad)?;
        let mut s = String::with_capacity(prefix.len() + 1 + name.len());
        s.push_str(prefix);
        s.push('/');
        s.push_str(name);
        Cow::Owned(s)
    };
    while full.starts_with("./") {
        full = match full {
            Cow::Borrowed(s) => Cow::Borrowed(s.get(2..).unwrap_or("")),
            Cow::Owned(mut s) => {
                s.drain(..2);
                Cow::Owned(s)
            }
        };
    }
    if full.is_empty() {
        return Err(bad);
    }
    if full.len() > MODULE_NAME_MAX {
        return Err(InitrdError::NameTooLong { offset });
    }
    Ok(full)
}

/// Parses a ustar archive into its regular files, in archive order.
///
/// The archive ends at the first all-zero block or at the end of the input (a trailing
/// fragment shorter than a block is accepted only if it is all zeros). Data may end at the
/// end of the input without its padding.
pub fn parse(archive: &[u8]) -> Result<Vec<Module<'_>>, InitrdError> {
    let mut modules = Vec::new();
    let mut offset = 0usize;
    while offset < archive.len() {
        let rest = archive.get(offset..).unwrap_or(&[]);
        let Some(header) = rest.get(..BLOCK) else {
            if rest.iter().all(|&b| b == 0) {
                break;
            }
            return Err(InitrdError::TruncatedHeader { offset });
        };
        if header.iter().all(|&b| b == 0) {
            break;
        }
        if !checksum_ok(header, offset)? {
            return Err(InitrdError::BadChecksum { offset });
        }
        let size = header
            .get(SIZE)
            .and_then(parse_octal)
            .ok_or(InitrdError::BadOctal { offset })?;
        let beyond = InitrdError::SizeBeyondEnd { offset };
        let size = usize::try_from(size).map_err(|_| beyond)?;
        let data_start = offset + BLOCK;
        let data_end = data_start.checked_add(size).ok_or(beyond)?;
        let data = archive.get(data_start..data_end).ok_or(beyond)?;
        let typeflag = header.get(TYPEFLAG).copied().unwrap_or(0);
        if typeflag == b'0' || typeflag == 0 {
            let name = entry_name(header, offset)?;
            modules.push(Module { name, data });
        }
        // Next header: after the data rounded up to a whole block.
        offset = match size.div_ceil(BLOCK).checked_mul(BLOCK) {
            Some(padded) => match data_start.checked_add(padded) {
                Some(next) => next,
                None => break,
            },
            None => break,
        };
    }
    Ok(modules)
}

/// The first module named `name`.
pub fn find<'m, 'a>(modules: &'m [Module<'a>], name: &str) -> Option<&'m Module<'a>> {
    modules.iter().find(|m| m.name == name)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::vec;

    /// A header for `name` with optional `prefix`, type flag and size, with a correct
    /// checksum.
    pub(crate) fn header(name: &str, prefix: &str, typeflag: u8, size: usize) -> Vec<u8> {
        let mut h = vec![0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[108..115].copy_from_slice(b"0000000");
        h[116..123].copy_from_slice(b"0000000");
        let s = std::format!("{:011o}", size);
        h[124..135].copy_from_slice(s.as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = typeflag;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
        fix_checksum(&mut h);
        h
    }

    pub(crate) fn fix_checksum(h: &mut [u8]) {
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        let s = std::format!("{:06o}\0 ", sum);
        h[148..156].copy_from_slice(s.as_bytes());
    }

    /// Appends a file entry (header, data, padding).
    pub(crate) fn push_file(ar: &mut Vec<u8>, name: &str, prefix: &str, data: &[u8]) {
        ar.extend(header(name, prefix, b'0', data.len()));
        ar.extend_from_slice(data);
        ar.resize(ar.len().div_ceil(BLOCK) * BLOCK, 0);
    }

    /// Appends the two terminating zero blocks.
    pub(crate) fn finish(ar: &mut Vec<u8>) {
        ar.extend(vec![0u8; 2 * BLOCK]);
    }

    fn sample() -> Vec<u8> {
        let mut ar = Vec::new();
        ar.extend(header("./", "", b'5', 0));
        push_file(&mut ar, "./init", "", b"\x7fELF init program");
        ar.extend(header("bin/", "", b'5', 0));
        push_file(&mut ar, "bin/shell", "", &vec![0x42; 1000]);
        // A symlink and an empty file.
        ar.extend(header("link", "", b'2', 0));
        push_file(&mut ar, "empty", "", b"");
        // Exactly one block of data.
        push_file(&mut ar, "block", "", &vec![7; BLOCK]);
        finish(&mut ar);
        ar
    }

    #[test]
    fn several_files_directories_skipped() {
        let ar = sample();
        let m = parse(&ar).unwrap();
        let names: Vec<&str> = m.iter().map(|m| &*m.name).collect();
        assert_eq!(names, ["init", "bin/shell", "empty", "block"]);
        assert_eq!(m[0].data, b"\x7fELF init program");
        assert_eq!(m[1].data, &vec![0x42; 1000][..]);
        assert_eq!(m[2].data, b"");
        assert_eq!(m[3].data, &vec![7; BLOCK][..]);
        assert!(matches!(m[0].name, Cow::Borrowed(_)));
        assert_eq!(find(&m, "bin/shell").unwrap().data.len(), 1000);
        assert!(find(&m, "shell").is_none());
        assert!(find(&m, "./init").is_none());
        assert!(find(&m, "init").is_some());
    }

    #[test]
    fn end_of_input_without_terminator() {
        let mut ar = Vec::new();
        push_file(&mut ar, "a", "", b"hello");
        let m = parse(&ar).unwrap();
        assert_eq!(m.len(), 1);
        // Data ending at the end of input without padding.
        let mut ar = Vec::new();
        ar.extend(header("b", "", b'0', 5));
        ar.extend_from_slice(b"world");
        let m = parse(&ar).unwrap();
        assert_eq!(m[0].data, b"world");
        // Empty input and a short zero tail are empty archives.
        assert_eq!(parse(&[]).unwrap(), vec![]);
        assert_eq!(parse(&[0; 100]).unwrap(), vec![]);
    }

    #[test]
    fn stops_at_zero_block() {
        let mut ar = Vec::new();
        push_file(&mut ar, "a", "", b"1");
        finish(&mut ar);
        // Garbage after the end marker is ignored.
        ar.extend(vec![0x55; 700]);
        assert_eq!(parse(&ar).unwrap().len(), 1);
    }

    #[test]
    fn prefix_field() {
        let mut ar = Vec::new();
        push_file(&mut ar, "prog", "./sbin", b"x");
        push_file(&mut ar, "tool", "usr/bin", b"y");
        finish(&mut ar);
        let m = parse(&ar).unwrap();
        assert_eq!(m[0].name, "sbin/prog");
        assert_eq!(m[1].name, "usr/bin/tool");
        assert!(find(&m, "usr/bin/tool").is_some());
    }

    #[test]
    fn gnu_header_prefix_ignored() {
        // In GNU tar headers the prefix bytes hold other fields; only POSIX ustar has one.
        let mut h = header("gnu", "junk", b'0', 0);
        h[257..265].copy_from_slice(b"ustar  \0");
        fix_checksum(&mut h);
        assert_eq!(parse(&h).unwrap()[0].name, "gnu");
    }

    #[test]
    fn truncated_archives() {
        let ar = sample();
        // Cutting inside a header.
        assert_eq!(
            parse(&ar[..BLOCK + 100]),
            Err(InitrdError::TruncatedHeader { offset: BLOCK })
        );
        // Cutting inside the data of bin/shell (header at block 4).
        let shell = 4 * BLOCK;
        assert_eq!(
            parse(&ar[..shell + BLOCK + 999]),
            Err(InitrdError::SizeBeyondEnd { offset: shell })
        );
        // Every prefix of the archive parses or errors, never panics.
        for n in 0..ar.len() {
            let _ = parse(&ar[..n]);
        }
    }

    #[test]
    fn bad_checksum() {
        let mut ar = sample();
        ar[BLOCK + 10] ^= 1;
        assert_eq!(parse(&ar), Err(InitrdError::BadChecksum { offset: BLOCK }));
        let mut ar = sample();
        ar[148] = b'9';
        assert_eq!(parse(&ar), Err(InitrdError::BadOctal { offset: 0 }));
    }

    #[test]
    fn bad_octal_size() {
        for bad in [
            &b"0000000008\0\0"[..],
            b"           \0",
            b"12x45\0\0\0\0\0\0\0",
        ] {
            let mut h = header("f", "", b'0', 0);
            h[124..136].copy_from_slice(bad);
            fix_checksum(&mut h);
            assert_eq!(
                parse(&h),
                Err(InitrdError::BadOctal { offset: 0 }),
                "{bad:?}"
            );
        }
        // Overflowing octal.
        let mut h = header("f", "", b'0', 0);
        h[124..136].copy_from_slice(b"77777777777\0");
        fix_checksum(&mut h);
        assert_eq!(parse(&h), Err(InitrdError::SizeBeyondEnd { offset: 0 }));
        assert_eq!(parse_octal(b"7777777777777777777777777"), None);
        assert_eq!(parse_octal(b"  17 \0"), Some(15));
    }

    #[test]
    fn bad_names() {
        let mut h = header("x", "", b'0', 0);
        h[0] = 0xff;
        fix_checksum(&mut h);
        assert_eq!(parse(&h), Err(InitrdError::BadName { offset: 0 }));
        let h = header("./", "", b'0', 0);
        assert_eq!(parse(&h), Err(InitrdError::BadName { offset: 0 }));
        let long = "n".repeat(MODULE_NAME_MAX + 1);
        let h = header(&long, "", b'0', 0);
        assert_eq!(parse(&h), Err(InitrdError::NameTooLong { offset: 0 }));
        let ok = "n".repeat(MODULE_NAME_MAX);
        let h = header(&ok, "", b'0', 0);
        assert_eq!(parse(&h).unwrap()[0].name, ok);
        // A full 100-byte name with no NUL is accepted as 100 bytes (then too long here).
        let h = header(&"a".repeat(100), "", b'0', 0);
        assert_eq!(parse(&h), Err(InitrdError::NameTooLong { offset: 0 }));
        // Bad names of skipped entries do not matter.
        let mut h = header("d", "", b'5', 0);
        h[0] = 0xff;
        fix_checksum(&mut h);
        assert_eq!(parse(&h), Ok(vec![]));
    }

    #[test]
    fn errors_describe() {
        let e = InitrdError::BadChecksum { offset: 1024 };
        assert_eq!(e.offset(), 1024);
        assert_eq!(
            std::format!("{e}"),
            "bad tar header checksum (header at 0x400)"
        );
        assert_eq!(baton_abi::Error::from(e), baton_abi::Error::BadFormat);
    }
}
