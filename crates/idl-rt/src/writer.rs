//! [`MsgWriter`]: builds a message in a caller's buffer.
//!
//! A message is written in the order it is laid out: the header's routing fields are given
//! to [`MsgWriter::new`], then port descriptors ([`MsgWriter::port`]), then in-line data
//! ([`MsgWriter::bytes`]); [`MsgWriter::finish`] writes the header with the final size and
//! descriptor count and returns the message's length.
//!
//! # Invariants
//! - `len` (the bytes written so far, header included) never exceeds `cap`, which is the
//!   buffer's length capped at [`MSG_SIZE_MAX`]; `cap >= HEADER_SIZE`.
//! - `len == HEADER_SIZE + descriptors * DESCRIPTOR_SIZE + data bytes`, and
//!   `descriptors <= DESCRIPTORS_MAX`.
//! - Once any data has been written (`data_started`), no descriptor can be added, so the
//!   descriptors always sit directly after the header.
//! - No method panics: errors are returned and leave the writer as it was.

use baton_abi::ipc::{
    Descriptor, Disposition, MsgHeader, DESCRIPTORS_MAX, HEADER_SIZE, KERNEL_ID_BASE, MSG_SIZE_MAX,
};
use baton_abi::Error;

/// Builds one message in a borrowed buffer. See the module documentation.
#[derive(Debug)]
pub struct MsgWriter<'a> {
    buf: &'a mut [u8],
    /// Usable bytes of `buf`: its length, at most [`MSG_SIZE_MAX`].
    cap: usize,
    /// The header's fields except `size` and the descriptor count.
    header: MsgHeader,
    /// Descriptors written.
    descriptors: usize,
    /// Bytes written, header included.
    len: usize,
    /// Whether in-line data has been written (descriptors are then refused).
    data_started: bool,
}

impl<'a> MsgWriter<'a> {
    /// Starts a message with id `id` to `dest` (used with `dest_disposition`), carrying
    /// the reply right `reply` (used with `reply_disposition`; 0 with
    /// [`Disposition::None`] for none).
    ///
    /// Errors: [`Error::TooLarge`] if `buf` cannot hold a header;
    /// [`Error::InvalidArgument`] if `id` is a kernel id (at or above
    /// [`KERNEL_ID_BASE`]), or `reply` and `reply_disposition` disagree about whether
    /// there is a reply right.
    #[inline(always)]
    pub fn new(
        buf: &'a mut [u8],
        dest: u64,
        dest_disposition: Disposition,
        reply: u64,
        reply_disposition: Disposition,
        id: u64,
    ) -> Result<MsgWriter<'a>, Error> {
        let cap = buf.len().min(MSG_SIZE_MAX);
        if cap < HEADER_SIZE {
            return Err(Error::TooLarge);
        }
        if id >= KERNEL_ID_BASE || (reply == 0) != (reply_disposition == Disposition::None) {
            return Err(Error::InvalidArgument);
        }
        Ok(MsgWriter {
            buf,
            cap,
            header: MsgHeader {
                bits: MsgHeader::make_bits(dest_disposition, reply_disposition, 0),
                size: 0,
                dest,
                reply,
                id,
            },
            descriptors: 0,
            len: HEADER_SIZE,
            data_started: false,
        })
    }

    /// Adds a port descriptor: the right `name` with `disposition`.
    ///
    /// Errors: [`Error::InvalidArgument`] after in-line data was written, for name 0 or
    /// for [`Disposition::None`]; [`Error::TooLarge`] beyond [`DESCRIPTORS_MAX`]
    /// descriptors or when the buffer is full.
    #[inline]
    pub fn port(&mut self, name: u64, disposition: Disposition) -> Result<(), Error> {
        if self.data_started || name == 0 || disposition == Disposition::None {
            return Err(Error::InvalidArgument);
        }
        if self.descriptors >= DESCRIPTORS_MAX {
            return Err(Error::TooLarge);
        }
        self.put(&Descriptor::port(name, disposition).to_bytes())?;
        self.descriptors += 1;
        Ok(())
    }

    /// Appends in-line data. Error: [`Error::TooLarge`] when it does not fit.
    #[inline(always)]
    pub fn bytes(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.put(bytes)?;
        self.data_started = true;
        Ok(())
    }

    /// Appends raw bytes at `len`, or nothing if they do not fit.
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let end = self
            .len
            .checked_add(bytes.len())
            .filter(|&end| end <= self.cap)
            .ok_or(Error::TooLarge)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(Error::TooLarge)?;
        dst.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    /// Bytes written so far, header included.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing but the header has been written (never true of an empty buffer:
    /// the header is always counted).
    pub fn is_empty(&self) -> bool {
        self.len == HEADER_SIZE
    }

    /// Descriptors written so far.
    pub fn descriptors(&self) -> usize {
        self.descriptors
    }

    /// Bytes still free.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.cap.saturating_sub(self.len)
    }

    /// Writes the header (with the final size and descriptor count) and returns the
    /// message's length: the message is `buf[..len]`.
    #[inline(always)]
    pub fn finish(self) -> usize {
        let header = self.header;
        // Both fit: `len <= MSG_SIZE_MAX` and `descriptors <= DESCRIPTORS_MAX` (< 256).
        let size = u32::try_from(self.len).unwrap_or(u32::MAX);
        let bits = header.bits | (u8::try_from(self.descriptors).unwrap_or(u8::MAX) as u32) << 16;
        // Word by word, in the header's layout (`MsgHeader::to_bytes`), so that the
        // compiler stores constants where it knows them.
        if let Some(dst) = self.buf.first_chunk_mut::<HEADER_SIZE>() {
            let first = (u64::from(size) << 32) | u64::from(bits);
            for (at, word) in [
                (0, first),
                (8, header.dest),
                (16, header.reply),
                (24, header.id),
            ] {
                dst[at..at + 8].copy_from_slice(&word.to_le_bytes());
            }
        }
        self.len
    }
}
