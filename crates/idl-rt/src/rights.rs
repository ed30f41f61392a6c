//! Port rights as arguments and results: each type is a name and the
//! [`Disposition`] it travels with.
//!
//! A right travels as a port descriptor; the kernel moves (or copies, or makes) the right
//! and the receiver finds its *own* new name for it in the descriptor, with the kind of
//! right it now holds. So each type below means one thing on the sending side (what to do
//! with the sender's name) and is read back on the receiving side as the receiver's new
//! name, checked to be of the kind the sending disposition yields:
//!
//! | type | sent with | sender's name denotes | receiver gets |
//! |---|---|---|---|
//! | [`SendRight`] | `CopySend` | a send right (kept) | a send right |
//! | [`MoveSend`] | `MoveSend` | a send right (given away) | a send right |
//! | [`MakeSend`] | `MakeSend` | a receive right (kept) | a send right |
//! | [`SendOnceRight`] | `MoveSendOnce` | a send-once right (given away) | a send-once right |
//! | [`MakeSendOnce`] | `MakeSendOnce` | a receive right (kept) | a send-once right |
//! | [`ReceiveRight`] | `MoveReceive` | a receive right (given away) | the receive right |
//! | [`Right`] | its `disposition` field | any | whatever arrives |
//!
//! Reading a descriptor of another kind than the type expects is [`Error::BadFormat`].
//! Rights carry no in-line data. None of these types releases anything when dropped: they
//! are plain names, and the program decides when to `cap_drop` them.
//!
//! # Invariants
//! - Each type writes exactly one port descriptor and no data, and reads exactly one.

use crate::marshal::{Marshal, Unmarshal};
use crate::reader::MsgReader;
use crate::writer::MsgWriter;
use baton_abi::ipc::Disposition;
use baton_abi::Error;

/// Defines a right type sent with `$sent` and received as `$received`.
macro_rules! right {
    ($(#[$doc:meta])* $name:ident, $sent:ident, $received:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u64);

        impl $name {
            /// The name (the sender's before sending, the receiver's after receiving).
            pub const fn name(self) -> u64 {
                self.0
            }
        }

        impl Marshal for $name {
            fn marshal_ports(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
                w.port(self.0, Disposition::$sent)
            }

            fn marshal_data(&self, _w: &mut MsgWriter<'_>) -> Result<(), Error> {
                Ok(())
            }
        }

        impl<'a> Unmarshal<'a> for $name {
            fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
                match r.next_port()? {
                    (name, Disposition::$received) => Ok($name(name)),
                    _ => Err(Error::BadFormat),
                }
            }
        }
    };
}

right!(
    /// A send right, copied: the sender keeps its own (`CopySend`); the receiver gets a
    /// new send right.
    SendRight,
    CopySend,
    MoveSend
);
right!(
    /// A send right, moved: the sender's name goes away (`MoveSend`); the receiver gets
    /// it. Read back, it is the receiver's name of the send right.
    MoveSend,
    MoveSend,
    MoveSend
);
right!(
    /// A new send right made from the sender's receive right (`MakeSend`): how a server
    /// hands out access to a port it just allocated. Read back, it is the receiver's name
    /// of the send right.
    MakeSend,
    MakeSend,
    MoveSend
);
right!(
    /// A send-once right, moved (`MoveSendOnce`); the receiver gets it.
    SendOnceRight,
    MoveSendOnce,
    MoveSendOnce
);
right!(
    /// A new send-once right made from the sender's receive right (`MakeSendOnce`). Read
    /// back, it is the receiver's name of the send-once right.
    MakeSendOnce,
    MakeSendOnce,
    MoveSendOnce
);
right!(
    /// A receive right, moved (`MoveReceive`): the port changes hands.
    ReceiveRight,
    MoveReceive,
    MoveReceive
);

/// Any right with a disposition chosen at run time. Sent with `disposition`; read back
/// as the receiver's name and the kind received (`MoveReceive`, `MoveSend` or
/// `MoveSendOnce`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Right {
    /// The name.
    pub name: u64,
    /// How it travels (sending) or what arrived (received).
    pub disposition: Disposition,
}

impl Marshal for Right {
    fn marshal_ports(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        w.port(self.name, self.disposition)
    }

    fn marshal_data(&self, _w: &mut MsgWriter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

impl<'a> Unmarshal<'a> for Right {
    fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
        let (name, disposition) = r.next_port()?;
        Ok(Right { name, disposition })
    }
}
