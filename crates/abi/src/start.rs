//! A program's arguments and environment: the *start message* its creator hands the
//! kernel with the task-creation call, and which the new task finds queued on its *start
//! port* (a receive right the kernel makes in it), as Accent hands a new process its
//! initial message (Fitzgerald & Rashid, section 3.7.2).
//!
//! The creator passes `spawn` a pointer to a [`START_LEN_BYTES`]-byte little-endian length
//! followed by that many bytes of message data (at most [`START_DATA_MAX`]); the kernel
//! makes the start port in the new task, queues one message with id [`START_MESSAGE`] and
//! that data on it, and gives the task's first thread the port's name in `rcx` (the fourth
//! argument of its entry, after the task id, the bootstrap right and the host-privilege
//! right). The data is [`encode`]d: two little-endian `u32` counts, the arguments and the
//! environment's entries, then each string followed by a zero byte, arguments first
//! (`NAME=VALUE` for an environment entry). [`Start::decode`] reads it back and refuses
//! anything malformed.

use crate::ipc::{HEADER_SIZE, IPC_BUFFER_SIZE, KERNEL_ID_BASE};

/// The start message's id (a kernel message: only the kernel sends it).
pub const START_MESSAGE: u64 = KERNEL_ID_BASE + 16;
/// Bytes of the length word before the data.
pub const START_LEN_BYTES: usize = 8;
/// Most bytes of start-message data: what fits a message in an IPC buffer.
pub const START_DATA_MAX: usize = IPC_BUFFER_SIZE - HEADER_SIZE;

/// Why start-message data could not be made or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartError {
    /// Longer than [`START_DATA_MAX`].
    TooLarge,
    /// A string holds a zero byte, or is not UTF-8; or the counts do not match the strings.
    Malformed,
}

/// Encodes `args` and `env` (`(name, value)` pairs) into `out`, returning the length used.
pub fn encode(args: &[&str], env: &[(&str, &str)], out: &mut [u8]) -> Result<usize, StartError> {
    let out = out
        .get_mut(..out.len().min(START_DATA_MAX))
        .ok_or(StartError::TooLarge)?;
    let (argc, envc) = (
        u32::try_from(args.len()).map_err(|_| StartError::TooLarge)?,
        u32::try_from(env.len()).map_err(|_| StartError::TooLarge)?,
    );
    let mut at = 0;
    let mut put = |bytes: &[u8]| -> Result<(), StartError> {
        let end = at + bytes.len();
        out.get_mut(at..end)
            .ok_or(StartError::TooLarge)?
            .copy_from_slice(bytes);
        at = end;
        Ok(())
    };
    put(&argc.to_le_bytes())?;
    put(&envc.to_le_bytes())?;
    for a in args {
        if a.as_bytes().contains(&0) {
            return Err(StartError::Malformed);
        }
        put(a.as_bytes())?;
        put(&[0])?;
    }
    for (name, value) in env {
        if name.as_bytes().contains(&0) || name.contains('=') || value.as_bytes().contains(&0) {
            return Err(StartError::Malformed);
        }
        put(name.as_bytes())?;
        put(b"=")?;
        put(value.as_bytes())?;
        put(&[0])?;
    }
    Ok(at)
}

/// Decoded start-message data: the arguments and environment, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start<'a> {
    argc: usize,
    envc: usize,
    strings: &'a [u8],
}

impl<'a> Start<'a> {
    /// No arguments and no environment.
    pub const EMPTY: Start<'static> = Start {
        argc: 0,
        envc: 0,
        strings: &[],
    };

    /// Reads start-message data, checking it whole.
    pub fn decode(data: &'a [u8]) -> Result<Start<'a>, StartError> {
        if data.len() > START_DATA_MAX {
            return Err(StartError::TooLarge);
        }
        let word = |i: usize| -> Result<usize, StartError> {
            let b = data.get(i..i + 4).ok_or(StartError::Malformed)?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        let (argc, envc) = (word(0)?, word(4)?);
        let strings = data.get(8..).ok_or(StartError::Malformed)?;
        let total = argc.checked_add(envc).ok_or(StartError::Malformed)?;
        // The strings without the zero byte that ends the last one.
        let body = match (total, strings.split_last()) {
            (0, None) => {
                return Ok(Start {
                    argc,
                    envc,
                    strings,
                })
            }
            (_, Some((0, body))) if total > 0 => body,
            _ => return Err(StartError::Malformed),
        };
        // Exactly `total` strings, all UTF-8, the environment's `NAME=VALUE`.
        let mut n = 0;
        for s in body.split(|&b| b == 0).take(total.saturating_add(1)) {
            let s = core::str::from_utf8(s).map_err(|_| StartError::Malformed)?;
            if n >= argc && !s.contains('=') {
                return Err(StartError::Malformed);
            }
            n += 1;
        }
        if n != total {
            return Err(StartError::Malformed);
        }
        Ok(Start {
            argc,
            envc,
            strings: body,
        })
    }

    /// The strings, in order (arguments, then environment entries).
    fn strings(&self) -> impl Iterator<Item = &'a str> + 'a {
        let strings = self.strings;
        strings
            .split(|&b| b == 0)
            .take(self.argc + self.envc)
            .map(|s| core::str::from_utf8(s).unwrap_or(""))
    }

    /// The arguments (by convention the first is the program's name).
    pub fn args(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.strings().take(self.argc)
    }

    /// The environment, as `(name, value)` pairs.
    pub fn env(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.strings()
            .skip(self.argc)
            .map(|s| s.split_once('=').unwrap_or((s, "")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    #[test]
    fn round_trip() {
        let mut buf = [0u8; 256];
        let n = encode(
            &["echo", "hello", ""],
            &[("HOME", "/"), ("X", "a=b")],
            &mut buf,
        )
        .unwrap();
        let s = Start::decode(&buf[..n]).unwrap();
        assert_eq!(s.args().collect::<Vec<_>>(), ["echo", "hello", ""]);
        assert_eq!(s.env().collect::<Vec<_>>(), [("HOME", "/"), ("X", "a=b")]);
        let n = encode(&[], &[], &mut buf).unwrap();
        assert_eq!(n, 8);
        let s = Start::decode(&buf[..n]).unwrap();
        assert_eq!(s.args().count() + s.env().count(), 0);
    }

    #[test]
    fn refuses_what_it_cannot_carry() {
        let mut buf = [0u8; 16];
        assert_eq!(
            encode(&["a\0b"], &[], &mut [0; 64]),
            Err(StartError::Malformed)
        );
        assert_eq!(
            encode(&[], &[("A=", "b")], &mut [0; 64]),
            Err(StartError::Malformed)
        );
        assert_eq!(
            encode(&["a long argument"], &[], &mut buf),
            Err(StartError::TooLarge)
        );
        let big = [b'x'; START_DATA_MAX];
        let big = core::str::from_utf8(&big).unwrap();
        let mut out = std::vec![0u8; START_DATA_MAX + 100];
        assert_eq!(encode(&[big], &[], &mut out), Err(StartError::TooLarge));
    }

    #[test]
    fn decode_refuses_malformed_data() {
        for bad in [
            &b""[..],
            b"\x01\0\0\0",
            b"\x01\0\0\0\0\0\0\0",           // one argument, no string
            b"\x01\0\0\0\0\0\0\0ab",         // not ended
            b"\x01\0\0\0\0\0\0\0a\0b\0",     // a string too many
            b"\0\0\0\0\x01\0\0\0noequals\0", // an environment entry without '='
            b"\x01\0\0\0\0\0\0\0\xff\0",     // not UTF-8
            b"\xff\xff\xff\xff\0\0\0\0a\0",  // a huge count
        ] {
            assert_eq!(Start::decode(bad), Err(StartError::Malformed), "{bad:?}");
        }
        assert_eq!(
            Start::decode(&std::vec![0u8; START_DATA_MAX + 1]),
            Err(StartError::TooLarge)
        );
    }
}
