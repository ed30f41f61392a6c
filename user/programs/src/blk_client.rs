//! The client side of the block-device protocol (`blk_proto`): requests to the driver
//! `blk` over plain messages, and starting the driver as the boot task does
//! (`docs/drivers.md`). Used by the `blk` test and the `blk.*` benchmarks.
#![allow(dead_code)] // each program uses part of it

use crate::blk_proto::*;
use baton_abi::ipc::{Descriptor, Disposition, MsgHeader, DESC_OOL, DESC_PORT, NOTIFY_SEND_ONCE};
use baton_rt::ipc::{cap_drop, data_word, port_allocate, IpcBuffer, MSG_RECEIVE, MSG_SEND};
use baton_rt::Error;

const SECONDS: u64 = 1_000_000_000;

/// How long a request and its reply may take: for ever. A driver that dies fails its
/// clients' requests at once (the reply right dies: `DeadName`), so no timeout is needed
/// for that; and a timeout would be wrong. Under `-icount` (the benchmarks) the guest's
/// clock jumps ahead whenever every CPU halts, so on a loaded host a disk request can
/// outlast any number of guest seconds, and a reply that came after a timeout would be
/// taken for the next request's. A timed-out page-out ends the default pager (a store
/// that fails ends it), and the pages it held are lost: the bench task then dies of a
/// pager fault when it pages itself in at the end of the paging rows, as it did once on a
/// loaded host (the same end follows at once when the default pager's timeout is cut to
/// 5 ms: a 4 KiB request takes up to 6 ms of guest time on an idle host).
const REQUEST_TIMEOUT: u64 = baton_rt::FOREVER;

/// The client's side: its IPC buffer and reply port, the driver's port.
pub struct Client {
    pub buf: IpcBuffer,
    pub reply: u64,
    pub driver: u64,
}

/// A reply: the result, the words after it, and the data (in-line copy or out-of-line
/// region).
pub struct Reply {
    pub result: Result<(), Error>,
    pub words: [u64; 3],
    pub data: Option<(u64, u64)>,
    pub inline: [u8; INLINE_MAX as usize],
    pub inline_len: usize,
}

impl Client {
    /// Sends request `id` (`sector`, `len`, `flags`, then `payload` in-line or `ool` out of
    /// line) and waits for its reply.
    pub fn call(
        &mut self,
        id: u64,
        sector: u64,
        len: u64,
        flags: u64,
        payload: &[u8],
        ool: Option<(u64, u64)>,
    ) -> Result<Reply, Error> {
        self.send(id, sector, len, flags, payload, ool)?;
        self.buf.msg(MSG_RECEIVE, self.reply, REQUEST_TIMEOUT)?;
        self.take_reply(id)
    }

    pub fn send(
        &mut self,
        id: u64,
        sector: u64,
        len: u64,
        flags: u64,
        payload: &[u8],
        ool: Option<(u64, u64)>,
    ) -> Result<(), Error> {
        let mut data = [0u8; 24 + INLINE_MAX as usize];
        for (i, w) in [sector, len, flags].iter().enumerate() {
            data[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let n = 24 + payload.len();
        data.get_mut(24..n)
            .ok_or(Error::TooLarge)?
            .copy_from_slice(payload);
        let descs = ool.map(|(va, size)| Descriptor {
            kind: DESC_OOL,
            disposition: 0,
            value: va,
            size,
        });
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
            dest: self.driver,
            reply: self.reply,
            id,
            ..MsgHeader::default()
        };
        self.buf.set(h, descs.as_slice(), &data[..n])?;
        self.buf.msg(MSG_SEND, 0, REQUEST_TIMEOUT)
    }

    pub fn take_reply(&mut self, id: u64) -> Result<Reply, Error> {
        let h = self.buf.header();
        if h.id == NOTIFY_SEND_ONCE {
            return Err(Error::DeadName);
        }
        if h.id != id + 100 {
            return Err(Error::BadFormat);
        }
        let data = self.buf.data();
        let code = data_word(data, 0);
        let mut r = Reply {
            result: if code == 0 {
                Ok(())
            } else {
                Err(Error::from_code(code as i64).unwrap_or(Error::BadFormat))
            },
            words: [data_word(data, 1), data_word(data, 2), data_word(data, 3)],
            data: None,
            inline: [0; INLINE_MAX as usize],
            inline_len: 0,
        };
        let rest = data.get(8..).unwrap_or(&[]);
        let k = rest.len().min(INLINE_MAX as usize);
        r.inline[..k].copy_from_slice(&rest[..k]);
        r.inline_len = k;
        if let Some(d) = self.buf.descriptor(0) {
            if d.kind == DESC_OOL && d.value != 0 {
                r.data = Some((d.value, d.size));
            }
        }
        Ok(r)
    }

    /// Writes `bytes` at `sector`.
    pub fn write(&mut self, sector: u64, bytes: &[u8]) -> Result<(), Error> {
        let len = bytes.len() as u64;
        let r = if len <= INLINE_MAX {
            self.call(BLK_WRITE, sector, len, 0, bytes, None)?
        } else {
            self.call(
                BLK_WRITE,
                sector,
                len,
                0,
                &[],
                Some((bytes.as_ptr() as u64, len)),
            )?
        };
        r.result
    }

    /// Reads `len` bytes at `sector`; their checksum.
    pub fn read_sum(&mut self, sector: u64, len: u64) -> Result<u64, Error> {
        let r = self.call(BLK_READ, sector, len, 0, &[], None)?;
        r.result?;
        match r.data {
            Some((va, size)) => {
                // SAFETY: the kernel mapped the reply's region here, `size` bytes.
                let got = unsafe { core::slice::from_raw_parts(va as *const u8, size as usize) };
                let sum = if size == len { checksum(got) } else { 0 };
                free_region(va, size);
                if size != len {
                    return Err(Error::BadFormat);
                }
                Ok(sum)
            }
            None if r.inline_len as u64 == len => Ok(checksum(&r.inline[..r.inline_len])),
            None => Err(Error::BadFormat),
        }
    }
}

pub fn free_region(va: u64, size: u64) {
    let start = va & !4095;
    let end = (va + size).next_multiple_of(4096);
    // SAFETY: the region arrived with a reply and nothing refers to it any more.
    let _ = unsafe { baton_rt::vm::deallocate(start, end - start) };
}

/// FNV-1a, 64 bits.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The pattern of the block written at `sector`: an xorshift sequence seeded by it.
pub fn pattern(out: &mut [u8], sector: u64) {
    let mut x = sector.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in out.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

/// Starts the driver as the boot task does: spawns `blk` with a port of its own as the
/// bootstrap, takes the driver's hello (a send right to its service port) and sends it
/// the host-privilege right `host`. The driver's task id and the send right.
pub fn start_driver(buf: &mut IpcBuffer, host: u64) -> Result<(u64, u64), Error> {
    start_driver_with(buf, host, 0)
}

/// [`start_driver`] with `BLK_SETUP` options (`SETUP_*`).
pub fn start_driver_with(
    buf: &mut IpcBuffer,
    host: u64,
    options: u64,
) -> Result<(u64, u64), Error> {
    let boot = port_allocate(0)?;
    let task = baton_rt::sys::spawn_with("blk", boot)?;
    // The driver carries the page-outs of the default pager and of file servers: it is put
    // on the path that frees memory, as the default pager is, before it makes its first
    // page.
    if let Ok(port) = baton_rt::host::task_port(host, task) {
        let _ = baton_rt::paging::exempt(port, host);
        let _ = cap_drop(port);
    }
    buf.msg(MSG_RECEIVE, boot, 10 * SECONDS)?;
    let h = buf.header();
    let driver = match buf.descriptor(0) {
        Some(d) if h.id == BLK_HELLO && d.kind == DESC_PORT => d.value,
        _ => return Err(Error::BadFormat),
    };
    cap_drop(boot)?;
    buf.send(
        driver,
        BLK_SETUP,
        &[Descriptor::port(host, Disposition::CopySend)],
        &options.to_le_bytes(),
    )?;
    Ok((task, driver))
}
