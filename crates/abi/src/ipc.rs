//! The IPC ABI: ports, rights, names and messages (see `docs/ipc.md`).
//!
//! # Names and rights
//! Each task has a **name space**: `u64` names, each denoting one right the task holds. A
//! name is a slot index plus a generation, so a name that has been released never denotes
//! a later right (a stale name gets [`crate::Error::InvalidName`]). Name 0 is never valid
//! and means "none". The rights ([`RightKind`]):
//! - **receive**: the right to take messages from a port; exactly one exists per port;
//!   releasing it destroys the port.
//! - **send**: the right to put messages on a port; any number exist.
//! - **send-once**: a send right that is used up by one message (replies); if it is
//!   released unused, the port receives a [`NOTIFY_SEND_ONCE`] message instead.
//! - **dead name**: what a send or send-once right becomes when its port is destroyed.
//!
//! Rights move only inside messages (port descriptors and the header's reply field, each
//! with a [`Disposition`]) or by the explicit kernel calls `port_allocate`,
//! `port_make_send` and `cap_drop`.
//!
//! # Messages
//! A message is a [`MsgHeader`], then `descriptors` [`Descriptor`]s, then in-line data, in
//! one buffer: the thread's **IPC buffer** (one page registered with `ipc_buffer_set`,
//! which the kernel reaches without walking page tables: the fast path), or any user
//! buffer given with [`MSG_BUF`]. `header.size` counts all three parts.
//!
//! On receipt the kernel rewrites the header: `dest` is the receiver's name for the port
//! it received on; `reply` is the receiver's new name for the reply right (or 0), whose
//! kind is given by the reply disposition field ([`Disposition::MoveSend`] or
//! [`Disposition::MoveSendOnce`]); each port descriptor's `value` becomes the receiver's
//! new name and its `disposition` the kind of right it now holds (`MoveReceive`,
//! `MoveSend` or `MoveSendOnce`).

/// `ipc_msg` option: send the message in the buffer.
pub const MSG_SEND: u64 = 1;
/// `ipc_msg` option: then receive a message into the buffer (from `rcv_name`).
pub const MSG_RECEIVE: u64 = 2;
/// `ipc_msg` option: use the buffer `buf`/`buf_size` instead of the IPC buffer.
pub const MSG_BUF: u64 = 4;
/// `ipc_msg` option, for benchmarks and tests: never take the fast path, neither as the
/// sender nor as the receiver. The message takes the general path (copied into the
/// kernel, its rights taken into a kernel message, counted as queued); a receiver
/// already waiting gets it as a receive from the queue would.
pub const MSG_SLOW: u64 = 8;
/// Every option bit `ipc_msg` knows.
pub const MSG_OPTIONS: u64 = MSG_SEND | MSG_RECEIVE | MSG_BUF | MSG_SLOW;

/// Size of the IPC buffer (one page).
pub const IPC_BUFFER_SIZE: usize = 4096;
/// Largest message, header included.
pub const MSG_SIZE_MAX: usize = 64 * 1024;
/// Most descriptors in one message.
pub const DESCRIPTORS_MAX: usize = 64;
/// Default queue limit of a new port (messages).
pub const QUEUE_LIMIT_DEFAULT: u64 = 16;
/// Largest queue limit.
pub const QUEUE_LIMIT_MAX: u64 = 1024;
/// Most rights (names) one task may hold.
pub const NAMES_MAX: u64 = 65_536;

/// Message ids at or above this are reserved for the kernel's own messages.
pub const KERNEL_ID_BASE: u64 = 0xffff_0000_0000_0000;
/// Notification: the port a name denoted was destroyed; the name is now a dead name.
/// Data: the dead name (one `u64`).
pub const NOTIFY_DEAD_NAME: u64 = KERNEL_ID_BASE + 1;
/// Notification: the port has no send or send-once rights left anywhere.
/// Data: the receiver's name for the port (one `u64`).
pub const NOTIFY_NO_SENDERS: u64 = KERNEL_ID_BASE + 2;
/// Notification: a send-once right to this port was released without being used (e.g.
/// the server holding a reply right ended). Sent to the port itself; no data.
pub const NOTIFY_SEND_ONCE: u64 = KERNEL_ID_BASE + 3;
/// Notification: an interrupt line bound with `irq_attach` fired. Data: the line's number
/// (one `u64`). At most one is outstanding per line until `irq_ack`.
pub const NOTIFY_INTERRUPT: u64 = KERNEL_ID_BASE + 4;

/// `port_notify` kinds.
pub const NOTIFY_KIND_DEAD_NAME: u64 = 1;
/// See [`NOTIFY_KIND_DEAD_NAME`].
pub const NOTIFY_KIND_NO_SENDERS: u64 = 2;

/// A kind of right, as `cap_info` returns it.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RightKind {
    /// Receive right.
    Receive = 1,
    /// Send right.
    Send = 2,
    /// Send-once right.
    SendOnce = 3,
    /// A send or send-once right whose port was destroyed.
    DeadName = 4,
}

impl RightKind {
    /// Decodes a raw kind.
    pub const fn from_raw(n: u64) -> Option<RightKind> {
        Some(match n {
            1 => RightKind::Receive,
            2 => RightKind::Send,
            3 => RightKind::SendOnce,
            4 => RightKind::DeadName,
            _ => return None,
        })
    }
}

/// What happens to a right named in a message (header `dest`/`reply`, port descriptors).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// No right (the field is unused; `reply` must then be 0).
    None = 0,
    /// The receive right moves to the receiver.
    MoveReceive = 1,
    /// A send right moves (the sender loses its name).
    MoveSend = 2,
    /// A copy of a send right (the sender keeps its own).
    CopySend = 3,
    /// A new send right is made from a receive right the sender holds.
    MakeSend = 4,
    /// A new send-once right is made from a receive right the sender holds.
    MakeSendOnce = 5,
    /// A send-once right moves.
    MoveSendOnce = 6,
}

impl Disposition {
    /// Decodes a raw disposition.
    pub const fn from_raw(n: u8) -> Option<Disposition> {
        Some(match n {
            0 => Disposition::None,
            1 => Disposition::MoveReceive,
            2 => Disposition::MoveSend,
            3 => Disposition::CopySend,
            4 => Disposition::MakeSend,
            5 => Disposition::MakeSendOnce,
            6 => Disposition::MoveSendOnce,
            _ => return None,
        })
    }

    /// The kind of right the receiver gets.
    pub const fn received_kind(self) -> Option<RightKind> {
        match self {
            Disposition::None => None,
            Disposition::MoveReceive => Some(RightKind::Receive),
            Disposition::MoveSend | Disposition::CopySend | Disposition::MakeSend => {
                Some(RightKind::Send)
            }
            Disposition::MakeSendOnce | Disposition::MoveSendOnce => Some(RightKind::SendOnce),
        }
    }
}

/// The fixed start of every message (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsgHeader {
    /// Bits 0–7: the destination's [`Disposition`] (`CopySend` or `MoveSendOnce` to
    /// send; 0 on receipt). Bits 8–15: the reply right's disposition (on receipt: the kind
    /// received, as `MoveSend`/`MoveSendOnce`). Bits 16–23: number of descriptors. Bits
    /// 24–31: zero.
    pub bits: u32,
    /// Bytes of header, descriptors and data together.
    pub size: u32,
    /// Destination: the sender's name for a send or send-once right; on receipt, the
    /// receiver's name for the port it received on.
    pub dest: u64,
    /// Reply right (0 for none): the sender's name; on receipt, the receiver's new name.
    pub reply: u64,
    /// Operation id, chosen by the sender (below [`KERNEL_ID_BASE`]).
    pub id: u64,
}

/// Bytes of a [`MsgHeader`].
pub const HEADER_SIZE: usize = core::mem::size_of::<MsgHeader>();

impl MsgHeader {
    /// The `bits` of a header with these dispositions and descriptor count.
    pub const fn make_bits(dest: Disposition, reply: Disposition, descriptors: u8) -> u32 {
        (dest as u32) | ((reply as u32) << 8) | ((descriptors as u32) << 16)
    }

    /// The raw destination disposition.
    pub const fn dest_disposition(&self) -> u8 {
        self.bits as u8
    }

    /// The raw reply disposition.
    pub const fn reply_disposition(&self) -> u8 {
        (self.bits >> 8) as u8
    }

    /// The number of descriptors.
    pub const fn descriptors(&self) -> usize {
        ((self.bits >> 16) & 0xff) as usize
    }

    /// Whether the reserved bits are zero.
    pub const fn reserved_clear(&self) -> bool {
        self.bits >> 24 == 0
    }

    /// The header as bytes (little-endian, as in memory).
    pub fn to_bytes(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..4].copy_from_slice(&self.bits.to_le_bytes());
        b[4..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..16].copy_from_slice(&self.dest.to_le_bytes());
        b[16..24].copy_from_slice(&self.reply.to_le_bytes());
        b[24..32].copy_from_slice(&self.id.to_le_bytes());
        b
    }

    /// Reads a header from the first [`HEADER_SIZE`] bytes of `b`.
    pub fn from_bytes(b: &[u8]) -> Option<MsgHeader> {
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
        };
        let half = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
        };
        Some(MsgHeader {
            bits: half(0)?,
            size: half(4)?,
            dest: word(8)?,
            reply: word(16)?,
            id: word(24)?,
        })
    }
}

/// Descriptor kind: a port right.
pub const DESC_PORT: u32 = 1;
/// Descriptor kind: an out-of-line memory region (reserved for the virtual-memory issue;
/// refused with [`crate::Error::NotSupported`] until then). `value` is the address,
/// `size` the length, `disposition` the flags ([`OOL_DEALLOCATE`]).
pub const DESC_OOL: u32 = 2;
/// Out-of-line flag: the region leaves the sender's address space (Accent's
/// DeleteSource).
pub const OOL_DEALLOCATE: u32 = 1;

/// A typed descriptor (24 bytes), after the header.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// [`DESC_PORT`] or [`DESC_OOL`].
    pub kind: u32,
    /// For a port: its [`Disposition`]; on receipt, the kind received.
    pub disposition: u32,
    /// For a port: the sender's name; on receipt, the receiver's name.
    pub value: u64,
    /// For a port: 0. For out-of-line memory: the length.
    pub size: u64,
}

/// Bytes of a [`Descriptor`].
pub const DESCRIPTOR_SIZE: usize = core::mem::size_of::<Descriptor>();

impl Descriptor {
    /// A port descriptor.
    pub const fn port(name: u64, disposition: Disposition) -> Descriptor {
        Descriptor {
            kind: DESC_PORT,
            disposition: disposition as u32,
            value: name,
            size: 0,
        }
    }

    /// The descriptor as bytes (little-endian, as in memory).
    pub fn to_bytes(&self) -> [u8; DESCRIPTOR_SIZE] {
        let mut b = [0u8; DESCRIPTOR_SIZE];
        b[0..4].copy_from_slice(&self.kind.to_le_bytes());
        b[4..8].copy_from_slice(&self.disposition.to_le_bytes());
        b[8..16].copy_from_slice(&self.value.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b
    }

    /// Reads a descriptor from the first [`DESCRIPTOR_SIZE`] bytes of `b`.
    pub fn from_bytes(b: &[u8]) -> Option<Descriptor> {
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
        };
        let half = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
        };
        Some(Descriptor {
            kind: half(0)?,
            disposition: half(4)?,
            value: word(8)?,
            size: word(16)?,
        })
    }
}

const _: () = assert!(HEADER_SIZE == 32);
const _: () = assert!(DESCRIPTOR_SIZE == 24);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bits_and_bytes() {
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 3),
            size: 200,
            dest: 0x1_0000_0002,
            reply: 7,
            id: 42,
        };
        assert_eq!(h.dest_disposition(), Disposition::CopySend as u8);
        assert_eq!(h.reply_disposition(), Disposition::MakeSendOnce as u8);
        assert_eq!(h.descriptors(), 3);
        assert!(h.reserved_clear());
        assert_eq!(MsgHeader::from_bytes(&h.to_bytes()), Some(h));
        assert_eq!(MsgHeader::from_bytes(&[0; 31]), None);
        let d = Descriptor::port(9, Disposition::MoveSend);
        assert_eq!(Descriptor::from_bytes(&d.to_bytes()), Some(d));
    }

    #[test]
    fn dispositions_decode() {
        for n in 0..=6u8 {
            assert_eq!(Disposition::from_raw(n).map(|d| d as u8), Some(n));
        }
        assert_eq!(Disposition::from_raw(7), None);
        assert_eq!(
            Disposition::MakeSendOnce.received_kind(),
            Some(RightKind::SendOnce)
        );
        for n in 1..=4 {
            assert_eq!(RightKind::from_raw(n).map(|k| k as u64), Some(n));
        }
        assert_eq!(RightKind::from_raw(0), None);
    }
}
