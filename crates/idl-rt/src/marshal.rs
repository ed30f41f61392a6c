//! [`Marshal`] and [`Unmarshal`]: how values travel in messages.
//!
//! A value has two parts: the port rights it carries, written as descriptors, and its
//! in-line data. Because every descriptor of a message precedes its data, a message with
//! several values is written in two passes — [`Marshal::marshal_ports`] for every value,
//! then [`Marshal::marshal_data`] for every value — and read in one, each value taking its
//! descriptors and its data from the reader's two cursors. Both passes visit values, and
//! the parts of compound values, in the same order, so the `k`-th right written is the
//! `k`-th right read.
//!
//! | type | in-line data | descriptors |
//! |---|---|---|
//! | `u8`, `u16`, `u32`, `u64`, `i8`, `i16`, `i32`, `i64` | the value, little-endian, 1/2/4/8 bytes | — |
//! | `bool` | one byte, 0 or 1 (anything else is `BadFormat`) | — |
//! | `[u8; N]` | the `N` bytes | — |
//! | `()` | nothing | — |
//! | `(A,)` to `(A, B, C, D)` | the fields in order | the fields' in order |
//! | `&[u8]` / `[u8]`, [`FixedBytes<N>`] | `u32` length, then the bytes | — |
//! | `&str` / `str` | as `&[u8]` (UTF-8, checked when read) | — |
//! | `Option<T>` | one byte 0 (`None`) or 1 (`Some`), then `T`'s data | `T`'s, if `Some` |
//! | `&T` (writing only) | as `T` | as `T` |
//! | rights ([`crate::rights`]) | nothing | one port descriptor |
//!
//! Fixed-width integers only: `usize`/`isize` are deliberately not marshaled, so the wire
//! format never depends on the machine. Nothing is aligned: fields follow each other
//! byte by byte.
//!
//! # Invariants
//! - `marshal_ports` writes exactly the descriptors `unmarshal` takes, in the same order,
//!   and `marshal_data` exactly the in-line bytes it takes.
//! - `unmarshal` never panics: malformed input is [`Error::BadFormat`].

use crate::reader::MsgReader;
use crate::writer::MsgWriter;
use baton_abi::Error;

/// A value that can be written into a message. See the module documentation.
pub trait Marshal {
    /// Writes the port rights this value carries, as descriptors (default: none).
    fn marshal_ports(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        let _ = w;
        Ok(())
    }

    /// Writes this value's in-line data.
    fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error>;
}

/// A value that can be read from a message received into a buffer that lives for `'a`
/// (borrowed values, such as `&'a [u8]`, point into it).
pub trait Unmarshal<'a>: Sized {
    /// `Some(n)` when every value of this type is exactly `n` bytes of in-line data and
    /// carries no port rights (integers, `bool`, `[u8; N]`, `()`, tuples of these): a
    /// message of such values has a size known in advance, so the generated code checks
    /// its header with one compare ([`crate::fixed`]). `None` (the default) for anything
    /// else. A type must never claim a size its `unmarshal` does not take exactly.
    const FIXED: Option<usize> = None;

    /// Reads the value: its descriptors from the reader's descriptor cursor, its data
    /// from the data cursor. Malformed input is [`Error::BadFormat`].
    fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error>;
}

impl<T: Marshal + ?Sized> Marshal for &T {
    fn marshal_ports(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        (**self).marshal_ports(w)
    }

    fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        (**self).marshal_data(w)
    }
}

impl<T: Marshal + ?Sized> Marshal for &mut T {
    fn marshal_ports(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        (**self).marshal_ports(w)
    }

    fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        (**self).marshal_data(w)
    }
}

/// Integers: little-endian, their natural width.
macro_rules! integers {
    ($($t:ty),*) => {$(
        impl Marshal for $t {
            fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
                w.bytes(&self.to_le_bytes())
            }
        }

        impl<'a> Unmarshal<'a> for $t {
            const FIXED: Option<usize> = Some(core::mem::size_of::<$t>());

            fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
                Ok(<$t>::from_le_bytes(r.array()?))
            }
        }
    )*};
}

integers!(u8, u16, u32, u64, i8, i16, i32, i64);

impl Marshal for bool {
    fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        w.bytes(&[u8::from(*self)])
    }
}

impl<'a> Unmarshal<'a> for bool {
    const FIXED: Option<usize> = Some(1);

    fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
        match r.array::<1>()? {
            [0] => Ok(false),
            [1] => Ok(true),
            _ => Err(Error::BadFormat),
        }
    }
}

impl<const N: usize> Marshal for [u8; N] {
    fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        w.bytes(self)
    }
}

impl<'a, const N: usize> Unmarshal<'a> for [u8; N] {
    const FIXED: Option<usize> = Some(N);

    fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
        r.array()
    }
}

impl Marshal for () {
    fn marshal_data(&self, _w: &mut MsgWriter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

impl<'a> Unmarshal<'a> for () {
    const FIXED: Option<usize> = Some(0);

    fn unmarshal(_r: &mut MsgReader<'a>) -> Result<Self, Error> {
        Ok(())
    }
}

/// Writes a `u32` length prefix and the bytes.
fn put_counted(w: &mut MsgWriter<'_>, bytes: &[u8]) -> Result<(), Error> {
    let len = u32::try_from(bytes.len()).map_err(|_| Error::TooLarge)?;
    // Check the whole first, so a value that does not fit writes nothing.
    if bytes.len().checked_add(4).is_none_or(|n| n > w.remaining()) {
        return Err(Error::TooLarge);
    }
    w.bytes(&len.to_le_bytes())?;
    w.bytes(bytes)
}

/// Reads a `u32` length prefix and that many bytes.
fn take_counted<'a>(r: &mut MsgReader<'a>) -> Result<&'a [u8], Error> {
    let len = u32::from_le_bytes(r.array()?);
    let len = usize::try_from(len).map_err(|_| Error::BadFormat)?;
    r.bytes(len)
}

impl Marshal for [u8] {
    fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        put_counted(w, self)
    }
}

impl<'a> Unmarshal<'a> for &'a [u8] {
    fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
        take_counted(r)
    }
}

impl Marshal for str {
    fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        put_counted(w, self.as_bytes())
    }
}

impl<'a> Unmarshal<'a> for &'a str {
    fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
        core::str::from_utf8(take_counted(r)?).map_err(|_| Error::BadFormat)
    }
}

impl<T: Marshal> Marshal for Option<T> {
    fn marshal_ports(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        match self {
            Some(v) => v.marshal_ports(w),
            None => Ok(()),
        }
    }

    fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        match self {
            Some(v) => {
                w.bytes(&[1])?;
                v.marshal_data(w)
            }
            None => w.bytes(&[0]),
        }
    }
}

impl<'a, T: Unmarshal<'a>> Unmarshal<'a> for Option<T> {
    fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
        match r.array::<1>()? {
            [0] => Ok(None),
            [1] => T::unmarshal(r).map(Some),
            _ => Err(Error::BadFormat),
        }
    }
}

/// The fixed size of two values side by side (see [`Unmarshal::FIXED`]): `None` if
/// either has none (or the sum overflows).
pub const fn fixed_sum(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => a.checked_add(b),
        _ => None,
    }
}

/// Tuples: their fields in order.
macro_rules! tuples {
    ($(($($t:ident $i:tt),+)),*) => {$(
        impl<$($t: Marshal),+> Marshal for ($($t,)+) {
            fn marshal_ports(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
                $(self.$i.marshal_ports(w)?;)+
                Ok(())
            }

            fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
                $(self.$i.marshal_data(w)?;)+
                Ok(())
            }
        }

        impl<'a, $($t: Unmarshal<'a>),+> Unmarshal<'a> for ($($t,)+) {
            const FIXED: Option<usize> = {
                let mut sum = Some(0);
                $(sum = fixed_sum(sum, <$t as Unmarshal<'a>>::FIXED);)+
                sum
            };

            fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
                Ok(($($t::unmarshal(r)?,)+))
            }
        }
    )*};
}

tuples!((A 0), (A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3));

/// An owned byte string of at most `N` bytes, with no heap: for servers that keep what
/// they receive (a name to register, say). On the wire it is exactly a `&[u8]`; reading
/// one longer than `N` is [`Error::TooLarge`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedBytes<const N: usize> {
    len: usize,
    bytes: [u8; N],
}

impl<const N: usize> FixedBytes<N> {
    /// The empty string.
    pub const fn new() -> Self {
        FixedBytes {
            len: 0,
            bytes: [0; N],
        }
    }

    /// A copy of `bytes`; [`Error::TooLarge`] if longer than `N`.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, Error> {
        let mut s = Self::new();
        s.bytes
            .get_mut(..bytes.len())
            .ok_or(Error::TooLarge)?
            .copy_from_slice(bytes);
        s.len = bytes.len();
        Ok(s)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }

    /// Number of bytes.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bytes.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most bytes it can hold (`N`).
    pub const fn capacity(&self) -> usize {
        N
    }
}

impl<const N: usize> Default for FixedBytes<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> core::ops::Deref for FixedBytes<N> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl<const N: usize> core::fmt::Debug for FixedBytes<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "FixedBytes({:?})", self.as_slice())
    }
}

impl<const N: usize> Marshal for FixedBytes<N> {
    fn marshal_data(&self, w: &mut MsgWriter<'_>) -> Result<(), Error> {
        put_counted(w, self.as_slice())
    }
}

impl<'a, const N: usize> Unmarshal<'a> for FixedBytes<N> {
    fn unmarshal(r: &mut MsgReader<'a>) -> Result<Self, Error> {
        FixedBytes::from_slice(take_counted(r)?)
    }
}
