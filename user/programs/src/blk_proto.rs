//! The block-device protocol between the user-level virtio block driver (`blk`) and its
//! clients (`docs/drivers.md`). Plain messages, not the interface macro, because a
//! transfer of more than [`INLINE_MAX`] bytes travels as out-of-line memory, which the
//! macro's wire format does not carry.
//!
//! Every request is a message to the driver's port with a reply right (normally a
//! send-once right); its in-line data starts with three little-endian words:
//! `sector`, `len` (bytes), `flags`. Every reply's in-line data starts with a result
//! word: 0 or an `Error` code.
//!
//! | request | data after the words | reply |
//! |---|---|---|
//! | [`BLK_INFO`] | — | result, capacity in sectors, [`MAX_BYTES`], interrupts the driver has taken |
//! | [`BLK_READ`] | — | result, then the `len` bytes in-line (`len` ≤ [`INLINE_MAX`]) or as one out-of-line region (moved to the client) |
//! | [`BLK_WRITE`] | the `len` bytes in-line, or one out-of-line region of `len` bytes | result |
//!
//! Errors: `len` 0 or not a multiple of [`SECTOR`] (`InvalidArgument`), more than
//! [`MAX_BYTES`] (`TooLarge`), `sector + len/512` past the disk's end (`NoSpace`), data
//! missing or of another length than `len` (`BadFormat`), the device reporting an error
//! (`Aborted`), an unknown id (`NotSupported`), [`FLAG_HOLD`] from a driver not set up to
//! allow it (`Denied`).
#![allow(dead_code)] // each program uses part of it

/// The disk's sector size.
pub const SECTOR: u64 = 512;
/// Most bytes one request moves (the driver's bounce buffer).
pub const MAX_BYTES: u64 = 64 << 10;
/// Most bytes a request or reply carries in-line; more go out of line.
pub const INLINE_MAX: u64 = 2048;

/// Request ids.
pub const BLK_INFO: u64 = 0x0b1c_0001;
pub const BLK_READ: u64 = 0x0b1c_0002;
pub const BLK_WRITE: u64 = 0x0b1c_0003;
/// The driver's first message to its bootstrap port: a send right to its service port.
pub const BLK_HELLO: u64 = 0x0b1c_0010;
/// The first message the driver takes on its service port: the host-privilege right
/// (a port descriptor) it drives the device with, and in-line one word of
/// `SETUP_*` options (none: no word, or 0).
pub const BLK_SETUP: u64 = 0x0b1c_0011;
/// `BLK_SETUP` option: requests may ask for [`FLAG_HOLD`] (tests only; without it a
/// request with the flag is refused with `Denied`, so that no client of a system's disk
/// can stall the driver, and with it the default pager, for seconds at a time).
pub const SETUP_ALLOW_HOLD: u64 = 1;

/// The name the system's disk driver is registered under with the name server (by
/// `swapon`, which starts it at boot): every program that serves the disk (the default
/// pager, the shell's file server) uses that one driver, never a second one for the same
/// device.
pub const DISK_NAME: &str = "disk";

/// `flags`: hold the request for [`HOLD_NS`] after handing it to the device and before
/// completing it (for tests of a driver killed while the device works on a request).
/// Honoured only by a driver its starter set up with [`SETUP_ALLOW_HOLD`].
pub const FLAG_HOLD: u64 = 1;
/// How long [`FLAG_HOLD`] holds a request.
pub const HOLD_NS: u64 = 2_000_000_000;
