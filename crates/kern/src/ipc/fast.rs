//! The rights half of the IPC fast path: which messages it may carry, and the right moves
//! it makes, split so that the kernel can decide everything before it changes anything.
//!
//! The fast path (the continuations paper's Figure 2, seL4's `fastpath_call` and
//! `fastpath_reply_recv`) carries the two messages of an RPC: the request, whose
//! destination is a send right used with `CopySend` and whose reply right is a
//! `MakeSendOnce` of a receive right the sender holds; and the reply, whose destination is
//! that send-once right used with `MoveSendOnce` and which carries no reply right. Neither
//! has descriptors. Anything else, including every malformed message, takes the general
//! path, which also produces the errors: [`Ipc::fast_decode`] never fails, it only declines.
//!
//! The moves are exactly those of [`Ipc::copyin`] followed by [`Ipc::copyout`] for such a
//! message, with no [`Message`](super::Message) in between: a moved send-once destination
//! is used up (no notification), a copied send right changes no count, and a
//! `MakeSendOnce` reply becomes one new send-once right in the receiver's space.
//!
//! # Invariants
//! - [`Ipc::fast_decode`] has no side effects; [`Ipc::fast_take`] and [`Ipc::fast_give`]
//!   are called only with a [`FastMsg`] it returned for the same spaces, with nothing
//!   changed in between, and `fast_give` only when the receiver's space has room for the
//!   reply right.

use super::{Held, Ipc, PortId, Space};
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, KERNEL_ID_BASE};

/// A message the fast path can carry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastMsg {
    /// The destination port (alive).
    pub dest: PortId,
    /// The sender's name of the send-once destination right the message uses up, if the
    /// destination is moved (`MoveSendOnce`).
    pub consumed: Option<u64>,
    /// The port a `MakeSendOnce` reply right names (alive, its receive right held by the
    /// sender).
    pub reply: Option<PortId>,
    /// The message id.
    pub id: u64,
    /// Its size in bytes (header and in-line data).
    pub size: usize,
}

/// The two destination forms the fast path carries.
const CALL: u8 = Disposition::CopySend as u8;
/// See [`CALL`].
const REPLY: u8 = Disposition::MoveSendOnce as u8;

impl<T: Copy + Default + PartialEq> Ipc<T> {
    /// Decides whether the fast path may carry `header`, sent from `space` through a
    /// buffer of `limit` bytes: `None` sends it down the general path.
    #[inline]
    pub fn fast_decode(&self, space: &Space, header: &MsgHeader, limit: usize) -> Option<FastMsg> {
        // One test covers the descriptor count (0) and the reserved bits (clear).
        if header.bits >> 16 != 0 || header.id >= KERNEL_ID_BASE {
            return None;
        }
        let size = header.size as usize;
        if !(HEADER_SIZE..=limit).contains(&size) {
            return None;
        }
        let dest = space.lookup(header.dest).ok()?;
        let consumed = match (header.dest_disposition(), dest.kind) {
            (CALL, Held::Send) => None,
            (REPLY, Held::SendOnce) => Some(header.dest),
            _ => return None,
        };
        let reply = match (header.reply_disposition(), header.reply) {
            (0, 0) => None,
            (r, name) if r == Disposition::MakeSendOnce as u8 => {
                let e = space.lookup(name).ok()?;
                if e.kind != Held::Receive || !self.ports.contains(e.port) {
                    return None;
                }
                Some(e.port)
            }
            _ => return None,
        };
        if !self.ports.contains(dest.port) {
            return None;
        }
        Some(FastMsg {
            dest: dest.port,
            consumed,
            reply,
            id: header.id,
            size,
        })
    }

    /// The sender's half of the moves: a moved send-once destination is used up.
    #[inline]
    pub fn fast_take(&mut self, space: &mut Space, m: &FastMsg) {
        if let Some(name) = m.consumed {
            if let Some(e) = space.remove(name) {
                if let Some(p) = self.ports.get_mut(m.dest) {
                    p.send_onces = p.send_onces.saturating_sub(1);
                }
                self.name_gone(e, name, space.id());
            }
        }
    }

    /// The receiver's half: the reply right goes into `space`, which receives on the port
    /// it calls `rcv_name`. Returns the header the receiver gets.
    #[inline]
    pub fn fast_give(&mut self, space: &mut Space, m: &FastMsg, rcv_name: u64) -> MsgHeader {
        let reply = m.reply.and_then(|port| {
            let name = space
                .insert(super::Entry {
                    kind: Held::SendOnce,
                    port,
                })
                .ok()?;
            if let Some(p) = self.ports.get_mut(port) {
                p.send_onces += 1;
            }
            Some(name)
        });
        let reply_disp = match reply {
            Some(_) => Disposition::MoveSendOnce,
            None => Disposition::None,
        };
        MsgHeader {
            bits: MsgHeader::make_bits(Disposition::None, reply_disp, 0),
            size: m.size as u32,
            dest: rcv_name,
            reply: reply.unwrap_or(0),
            id: m.id,
        }
    }
}
