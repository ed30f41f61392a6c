//! [`MsgReader`]: takes a received message apart, safely whatever its bytes.
//!
//! [`MsgReader::new`] checks the header against the bytes received; afterwards the reader
//! has two independent cursors, one over the port descriptors
//! ([`MsgReader::next_port`]) and one over the in-line data ([`MsgReader::bytes`]), so
//! values are taken out in the order they were marshaled whatever mix of rights and data
//! they hold. [`MsgReader::finish`] checks that nothing was left over.
//!
//! A server reads messages that any holder of a send right can write, so every read is
//! bounds-checked and a malformed message is [`Error::BadFormat`], never a panic.
//!
//! # Invariants
//! - `msg` is exactly the message: `msg.len() == header.size`, and
//!   `HEADER_SIZE + descriptors * DESCRIPTOR_SIZE <= msg.len()` (checked by `new`).
//! - `descriptors <= DESCRIPTORS_MAX`; `next_descriptor <= descriptors`.
//! - `data_start <= data <= msg.len()`, where `data_start` is the end of the descriptors.

use baton_abi::ipc::{
    Descriptor, Disposition, MsgHeader, DESCRIPTORS_MAX, DESCRIPTOR_SIZE, DESC_PORT, HEADER_SIZE,
};
use baton_abi::Error;

/// Reads one received message. See the module documentation.
#[derive(Clone, Debug)]
pub struct MsgReader<'a> {
    /// The message, cut to `header.size`.
    msg: &'a [u8],
    header: MsgHeader,
    /// Number of descriptors.
    descriptors: usize,
    /// Index of the next descriptor [`MsgReader::next_port`] takes.
    next_descriptor: usize,
    /// Offset of the first in-line byte (the end of the descriptors).
    data_start: usize,
    /// Offset of the next in-line byte to read.
    data: usize,
}

impl<'a> MsgReader<'a> {
    /// A reader for the message at the start of `msg` (bytes past `header.size` are
    /// ignored).
    ///
    /// Error [`Error::BadFormat`] when `msg` is shorter than a header or than
    /// `header.size`, the header's reserved bits are set, or `header.size` cannot hold the
    /// header and its descriptors (or there are more than [`DESCRIPTORS_MAX`]).
    #[inline]
    pub fn new(msg: &'a [u8]) -> Result<MsgReader<'a>, Error> {
        let header = read_header(msg).ok_or(Error::BadFormat)?;
        let descriptors = header.descriptors();
        // The bits above the descriptor count are reserved (zero).
        if header.bits >> 16 > DESCRIPTORS_MAX as u32 {
            return Err(Error::BadFormat);
        }
        // Cannot overflow: at most `DESCRIPTORS_MAX` descriptors.
        let data_start = HEADER_SIZE + descriptors * DESCRIPTOR_SIZE;
        let size = header.size as usize;
        if size < data_start {
            return Err(Error::BadFormat);
        }
        let msg = msg.get(..size).ok_or(Error::BadFormat)?;
        Ok(MsgReader {
            msg,
            header,
            descriptors,
            next_descriptor: 0,
            data_start,
            data: data_start,
        })
    }

    /// A reader for `msg`, a message already checked to be exactly `header.size` bytes
    /// with no descriptors, whose data cursor starts at `data` (past anything the caller
    /// has read itself, such as a reply's result code). The caller ([`crate::fixed`])
    /// upholds the invariants: `msg.len() == header.size`, no descriptors,
    /// `HEADER_SIZE <= data <= msg.len()`.
    #[inline(always)]
    pub(crate) fn without_descriptors(
        msg: &'a [u8],
        header: MsgHeader,
        data: usize,
    ) -> MsgReader<'a> {
        MsgReader {
            msg,
            header,
            descriptors: 0,
            next_descriptor: 0,
            data_start: HEADER_SIZE,
            data,
        }
    }

    /// The message's header.
    #[inline]
    pub fn header(&self) -> MsgHeader {
        self.header
    }

    /// The message's id.
    #[inline]
    pub fn id(&self) -> u64 {
        self.header.id
    }

    /// The message's length (`header.size`).
    #[inline]
    pub fn len(&self) -> usize {
        self.msg.len()
    }

    /// Whether the message is only a header (no descriptors, no data).
    pub fn is_empty(&self) -> bool {
        self.msg.len() == HEADER_SIZE
    }

    /// Number of descriptors.
    #[inline]
    pub fn descriptors(&self) -> usize {
        self.descriptors
    }

    /// Descriptor `i`, as it is in the message (not checked beyond being there).
    #[inline]
    pub fn descriptor(&self, i: usize) -> Result<Descriptor, Error> {
        if i >= self.descriptors {
            return Err(Error::BadFormat);
        }
        let at = i
            .checked_mul(DESCRIPTOR_SIZE)
            .and_then(|o| o.checked_add(HEADER_SIZE))
            .ok_or(Error::BadFormat)?;
        Descriptor::from_bytes(self.msg.get(at..).ok_or(Error::BadFormat)?).ok_or(Error::BadFormat)
    }

    /// Takes the next descriptor, which must be a port descriptor: its name and its
    /// disposition (on receipt, the kind of right received: `MoveReceive`, `MoveSend` or
    /// `MoveSendOnce`).
    ///
    /// Error [`Error::BadFormat`] when no descriptor is left, or the descriptor is not a
    /// well-formed port descriptor (kind, size 0, a known non-`None` disposition, a
    /// nonzero name).
    #[inline]
    pub fn next_port(&mut self) -> Result<(u64, Disposition), Error> {
        let d = self.descriptor(self.next_descriptor)?;
        let port = port_of(&d).ok_or(Error::BadFormat)?;
        self.next_descriptor += 1;
        Ok(port)
    }

    /// The names of every well-formed port descriptor of the message, whether taken yet
    /// or not: the rights a receiver holds because of this message (besides the header's
    /// reply right), for releasing them when it rejects the message.
    pub fn port_names(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.descriptors).filter_map(move |i| {
            let d = self.descriptor(i).ok()?;
            port_of(&d).map(|(name, _)| name)
        })
    }

    /// Takes the next `n` bytes of in-line data. Error [`Error::BadFormat`] past the end.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self.data.checked_add(n).ok_or(Error::BadFormat)?;
        let bytes = self.msg.get(self.data..end).ok_or(Error::BadFormat)?;
        self.data = end;
        Ok(bytes)
    }

    /// Takes the next `N` bytes of in-line data as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let bytes = self.bytes(N)?;
        bytes.try_into().map_err(|_| Error::BadFormat)
    }

    /// In-line bytes not taken yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.msg.len().saturating_sub(self.data)
    }

    /// All in-line data of the message, whatever has been taken.
    pub fn data(&self) -> &'a [u8] {
        self.msg.get(self.data_start..).unwrap_or(&[])
    }

    /// Checks that every descriptor and every in-line byte has been taken: a message
    /// with anything left over is [`Error::BadFormat`].
    #[inline]
    pub fn finish(&self) -> Result<(), Error> {
        if self.next_descriptor == self.descriptors && self.remaining() == 0 {
            Ok(())
        } else {
            Err(Error::BadFormat)
        }
    }
}

/// The header at the start of `msg`, read with one bounds check (so that the compiler sees
/// a single one); `None` if `msg` is shorter than a header.
#[inline]
pub(crate) fn read_header(msg: &[u8]) -> Option<MsgHeader> {
    let b: &[u8; HEADER_SIZE] = msg.first_chunk()?;
    let half = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let word = |at: usize| {
        u64::from_le_bytes([
            b[at],
            b[at + 1],
            b[at + 2],
            b[at + 3],
            b[at + 4],
            b[at + 5],
            b[at + 6],
            b[at + 7],
        ])
    };
    Some(MsgHeader {
        bits: half(0),
        size: half(4),
        dest: word(8),
        reply: word(16),
        id: word(24),
    })
}

/// The name and disposition of a well-formed port descriptor.
fn port_of(d: &Descriptor) -> Option<(u64, Disposition)> {
    if d.kind != DESC_PORT || d.size != 0 || d.value == 0 {
        return None;
    }
    let disposition = Disposition::from_raw(u8::try_from(d.disposition).ok()?)?;
    if disposition == Disposition::None {
        return None;
    }
    Some((d.value, disposition))
}
