//! The file server's protocol (`docs/files.md`): plain messages to the server's port, each
//! with a reply right, like the block driver's (`blk_proto`).
//!
//! A request's in-line data is its words and then, for the calls that name a file, the
//! path (UTF-8, absolute, `/` between names, at most [`PATH_MAX`] bytes). A reply (id:
//! the request's + 100) starts with a result word, 0 or an `Error` code, then the words
//! the table names.
//!
//! | request | words, then | reply |
//! |---|---|---|
//! | [`FS_OPEN`] | path | result, size in bytes; a memory-object right for the file (pager-backed: its pages come from the server) |
//! | [`FS_CREATE`] | size, path | result, size; the new file's right (its bytes zeros, `size` fixed) |
//! | [`FS_SIZE`] | path | result, size |
//! | [`FS_LIST`] | path of a folder | result, entries, text bytes; then the text, one `name size` line an entry (in-line up to [`INLINE_MAX`], else out of line) |
//! | [`FS_DELETE`] | path | result |
//! | [`FS_SYNC`] | path (empty: every file) | result, pages written back |
//! | [`FS_INFO`] | — | result, files held, data requests answered, pages written back, disk reads |
//! | [`FS_STOP`] | — | result; then the server writes every file back, lets go of the driver and ends |
//!
//! Errors: no such file or folder (`NotFound`), a path too long, empty or not absolute
//! (`InvalidArgument`), a name that exists already (`Busy`), the disk full (`NoSpace`),
//! more than [`FILES_MAX`] files held (`NoSpace`), a disk error (`Aborted`), an unknown id
//! (`NotSupported`).
#![allow(dead_code)] // each program uses part of it

/// Requests.
pub const FS_OPEN: u64 = 0x0f5e_0001;
pub const FS_CREATE: u64 = 0x0f5e_0002;
pub const FS_SIZE: u64 = 0x0f5e_0003;
pub const FS_LIST: u64 = 0x0f5e_0004;
pub const FS_DELETE: u64 = 0x0f5e_0005;
pub const FS_SYNC: u64 = 0x0f5e_0006;
pub const FS_INFO: u64 = 0x0f5e_0007;
/// Ends the server (after its reply). It also ends when no send right to its port is
/// left, but the kernel holds one for each file object it serves (the pager's port), so
/// while it serves files only this request ends it.
pub const FS_STOP: u64 = 0x0f5e_0008;
/// The server's first message to its bootstrap port: a send right to its service port.
pub const FS_HELLO: u64 = 0x0f5e_0010;
/// The first message it takes on its service port: the block driver's send right (a port
/// descriptor), with a reply right; the reply's result says whether the disk's file system
/// was accepted (`BadFormat`: refused, and the server ends).
pub const FS_SETUP: u64 = 0x0f5e_0011;
/// A message the server sends itself after a flush, to know when the pages it returned
/// have all been received (messages arrive in the order sent).
pub const FS_MARK: u64 = 0x0f5e_0012;

/// Longest path.
pub const PATH_MAX: usize = 200;
/// Most files the server holds objects for at once.
pub const FILES_MAX: usize = 48;
/// Most text bytes a reply carries in-line; a longer listing goes out of line.
pub const INLINE_MAX: usize = 1536;
/// Largest file [`FS_CREATE`] makes.
pub const CREATE_MAX: u64 = 16 << 20;
