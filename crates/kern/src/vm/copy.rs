//! Copy-on-write copies of address ranges: a task's fork by inheritance, and Accent's
//! MoveWords transfer of a region, the way out-of-line data travels in a message.
//!
//! A region copy has two halves, as Accent's message transfer does (section 2.1.2): the
//! sender's range is *copied out* into a [`Carried`] region, which holds references to
//! the objects (a message in transit holds it, charged to the sender), and it is later
//! *copied in* to the receiver's map at an address of its choosing or a fixed one. With
//! `delete` the sender's range is removed as it is carried (a move: no new sharing, so
//! nothing becomes copy-on-write). Both halves cost O(log n) per entry of the range,
//! whatever its size; only a range written in place by several sharers costs one
//! write-protection per resident page (its copy object, see [`super::object`]).
//!
//! How one entry is copied (the copy gets a reference to the object it names, always
//! copy-on-write):
//! - an entry already copy-on-write: its object is frozen, the copy shares it;
//! - an entry that alone names its object: both become copy-on-write (the source's
//!   translations in the range are write-protected); the first writer on either side
//!   gets a shadow, or reclaims the object once the other side is gone;
//! - an entry whose object others write in place (shared memory): the copy gets the
//!   object's copy object, and the sharers go on writing.
//!
//! Fork (Mach's inheritance): `Share` gives the child the same object (a copy-on-write
//! entry first gets its own shadow, so that both share what the parent sees), `Copy`
//! copies as above, `None` leaves a hole. Wired entries (the kernel's cached frames)
//! are never inherited, and physical ranges are never copied (`Copy` on one is a hole).
//!
//! # Invariants
//! - A [`Carried`] region's pieces tile `[0, len)` in order, each holding one reference
//!   to its object; the region is charged to the sender's account until it is copied in
//!   or released.
//! - A failed copy changes nothing a task can see (at most: splits, copy-on-write flags,
//!   shadows and copy objects, which are invisible).

use super::map::{Entry, Map, Placement};
use super::object::{Kind, ObjectId, Objects};
use super::{Inherit, Machine, Prot};
use crate::quota::{AccountRef, Resource};
use alloc::vec::Vec;
use baton_abi::Error;

/// One entry's part of a carried region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Offset of the piece in the region.
    pub rel: u64,
    /// Its length.
    pub len: u64,
    /// The object (one reference held).
    pub object: ObjectId,
    /// Offset in the object.
    pub offset: u64,
    /// Protection.
    pub prot: Prot,
    /// Maximum protection.
    pub max_prot: Prot,
    /// Copy-on-write.
    pub cow: bool,
}

/// Heap bytes a piece is charged.
pub const PIECE_BYTES: u64 = core::mem::size_of::<Piece>() as u64;

/// A region in transit. See the module documentation. It must end in [`copy_in`] or
/// [`Carried::release`]; dropped otherwise, its charge comes back but its object
/// references are never released.
#[derive(Debug)]
pub struct Carried {
    pieces: Vec<Piece>,
    len: u64,
    account: AccountRef,
    charged: u64,
}

impl Drop for Carried {
    fn drop(&mut self) {
        self.account.give(Resource::Heap, self.charged);
    }
}

impl Carried {
    /// The region's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it is empty (never: a region is at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Gives every piece the protection `prot` and the maximum protection `max` (which
    /// must contain `prot`): what the receiver of out-of-line data gets, whatever the
    /// sender's range allowed (the pieces are copy-on-write or the receiver's alone, so
    /// this never lets anyone write what another task sees).
    pub fn set_prot(&mut self, prot: Prot, max: Prot) {
        let max = Prot::from_bits(u64::from(max.bits() | prot.bits())).unwrap_or(Prot::ALL);
        for p in &mut self.pieces {
            p.prot = prot;
            p.max_prot = max;
        }
    }

    /// Gives the region up (the message was destroyed).
    pub fn release<F: Copy>(mut self, objs: &mut Objects<F>, m: &mut impl Machine<F>) {
        for p in self.pieces.drain(..) {
            objs.release(p.object, m);
        }
    }
}

/// A copy-on-write copy of the entry `e` at `start` of a map charged to `account`: the
/// object and offset the copy maps, with a new reference. May make `e` copy-on-write
/// (the caller stores it back).
fn copy_entry<F: Copy>(
    objs: &mut Objects<F>,
    account: &AccountRef,
    start: u64,
    e: &mut Entry,
    m: &mut impl Machine<F>,
) -> Result<(ObjectId, u64), Error> {
    let o = objs.get(e.object).ok_or(Error::NotFound)?;
    if matches!(o.kind(), Kind::Physical { .. }) {
        return Err(Error::InvalidArgument);
    }
    if e.cow {
        objs.add_ref(e.object)?;
        return Ok((e.object, e.offset));
    }
    if o.refs() == 1 {
        objs.add_ref(e.object)?;
        e.cow = true;
        m.write_protect(start, e.end);
        return Ok((e.object, e.offset));
    }
    let c = objs.copy_object(e.object, account, m)?;
    Ok((c, e.offset))
}

/// Copies `[start, start + len)` of `src` out into a carried region (Accent's MoveWords
/// into the kernel); with `delete` the range is removed from `src` (a move). The range
/// must be mapped throughout ([`Error::BadAddress`]) and hold no physical object
/// ([`Error::InvalidArgument`]); a move of a wired range is [`Error::Denied`].
pub fn copy_out<F: Copy>(
    src: &mut Map,
    objs: &mut Objects<F>,
    start: u64,
    len: u64,
    delete: bool,
    m: &mut impl Machine<F>,
) -> Result<Carried, Error> {
    let end = src.check_range(start, len)?;
    // Decode: count the entries, check each.
    let mut n = 0usize;
    let mut cur = start;
    while cur < end {
        let (_, e) = src.entry(cur).ok_or(Error::BadAddress)?;
        let o = objs.get(e.object).ok_or(Error::NotFound)?;
        if matches!(o.kind(), Kind::Physical { .. }) {
            return Err(Error::InvalidArgument);
        }
        if delete && e.wired > 0 {
            return Err(Error::Denied);
        }
        n += 1;
        cur = e.end;
    }
    let account = src.account().clone();
    let bytes = PIECE_BYTES.saturating_mul(n as u64);
    account.take(Resource::Heap, bytes)?;
    let mut carried = Carried {
        pieces: Vec::new(),
        len,
        account: account.clone(),
        charged: bytes,
    };
    if carried.pieces.try_reserve_exact(n).is_err() {
        return Err(Error::NoMemory);
    }
    let mut cur = start;
    while cur < end {
        let Some((s, mut e)) = src.entry(cur) else {
            carried.release(objs, m);
            return Err(Error::BadAddress);
        };
        let a = s.max(start);
        let b = e.end.min(end);
        // A move hands the object over only when no one else can see it (a frozen
        // object, or one only this map names); shared memory is copied even by a move:
        // out-of-line data is by value.
        let alone =
            e.cow || objs.is_private(e.object) || objs.get(e.object).is_some_and(|o| o.refs() == 1);
        let got = if delete && alone {
            objs.add_ref(e.object).map(|()| (e.object, e.offset, e.cow))
        } else {
            copy_entry(objs, &account, s, &mut e, m).map(|(o, off)| (o, off, true))
        };
        let (object, offset, cow) = match got {
            Ok(x) => x,
            Err(err) => {
                carried.release(objs, m);
                return Err(err);
            }
        };
        if let Some(me) = src.get_mut(s) {
            *me = e;
        }
        let piece = Piece {
            rel: a - start,
            len: b - a,
            object,
            offset: offset + (a - s),
            prot: e.prot,
            max_prot: e.max_prot,
            cow,
        };
        if carried.pieces.len() < carried.pieces.capacity() {
            carried.pieces.push(piece);
        } else {
            objs.release(object, m);
            carried.release(objs, m);
            return Err(Error::NoMemory);
        }
        cur = e.end;
    }
    if delete {
        if let Err(err) = src.deallocate(objs, start, len, m) {
            carried.release(objs, m);
            return Err(err);
        }
    }
    Ok(carried)
}

/// Copies a carried region into `dst` (Accent's MoveWords out of the kernel, creating
/// the destination): its address. On an error the region comes back unchanged.
pub fn copy_in(dst: &mut Map, carried: Carried, at: Placement) -> Result<u64, (Error, Carried)> {
    let start = match dst.place(at, carried.len) {
        Ok(s) => s,
        Err(e) => return Err((e, carried)),
    };
    for (i, p) in carried.pieces.iter().enumerate() {
        let e = Entry {
            end: start + p.rel + p.len,
            object: p.object,
            offset: p.offset,
            prot: p.prot,
            max_prot: p.max_prot,
            cow: p.cow,
            inherit: Inherit::Copy,
            wired: 0,
        };
        if let Err(err) = dst.insert(start + p.rel, e) {
            // Take back what was inserted: the references stay with the region.
            for q in carried.pieces.iter().take(i) {
                dst.remove(start + q.rel);
            }
            return Err((err, carried));
        }
    }
    // The references now belong to the entries.
    drop(carried);
    Ok(start)
}

/// Copies `[start, start + len)` of `src` to a new range of `dst` in one step (both
/// halves; `src` and `dst` may not be the same map: for a copy within one map use
/// [`copy_out`] and [`copy_in`]).
#[allow(clippy::too_many_arguments)]
pub fn copy_region<F: Copy>(
    src: &mut Map,
    objs: &mut Objects<F>,
    start: u64,
    len: u64,
    delete: bool,
    dst: &mut Map,
    at: Placement,
    m: &mut impl Machine<F>,
) -> Result<u64, Error> {
    // Refuse a bad destination before anything moves.
    dst.place(at, len)?;
    let carried = copy_out(src, objs, start, len, delete, m)?;
    copy_in(dst, carried, at).map_err(|(e, carried)| {
        carried.release(objs, m);
        e
    })
}

/// A child map for a fork of `parent` by inheritance (see the module documentation),
/// charged to `account`. `m` acts on the parent's translations. On an error the child is
/// gone and the parent unchanged to any task's eyes.
pub fn fork<F: Copy>(
    parent: &mut Map,
    objs: &mut Objects<F>,
    account: AccountRef,
    limit: usize,
    m: &mut impl Machine<F>,
) -> Result<Map, Error> {
    let (lo, hi) = parent.bounds();
    let mut child = Map::new(account, lo, hi, limit)?;
    let pacct = parent.account().clone();
    let mut next = parent.entries().next().map(|(s, _)| s);
    while let Some(s) = next {
        let Some((_, e)) = parent.entry(s) else { break };
        next = parent.query(e.end).map(|(s, _)| s);
        if let Err(err) = fork_entry(parent, &pacct, objs, &mut child, s, e, m) {
            child.clear(objs, m);
            return Err(err);
        }
    }
    Ok(child)
}

fn fork_entry<F: Copy>(
    parent: &mut Map,
    pacct: &AccountRef,
    objs: &mut Objects<F>,
    child: &mut Map,
    s: u64,
    mut e: Entry,
    m: &mut impl Machine<F>,
) -> Result<(), Error> {
    let physical = objs
        .get(e.object)
        .is_some_and(|o| matches!(o.kind(), Kind::Physical { .. }));
    let (object, offset, cow) = match e.inherit {
        _ if e.wired > 0 => return Ok(()),
        Inherit::None => return Ok(()),
        Inherit::Copy if physical => return Ok(()),
        Inherit::Share => {
            if e.cow {
                let o = objs.get(e.object).ok_or(Error::NotFound)?;
                if o.refs() == 1 && o.kind() == Kind::Anonymous {
                    e.cow = false;
                } else {
                    let sh = objs.shadow(e.object, e.offset, e.end - s, pacct)?;
                    e.object = sh;
                    e.offset = 0;
                    e.cow = false;
                }
                if let Some(me) = parent.get_mut(s) {
                    *me = e;
                }
            }
            objs.add_ref(e.object)?;
            (e.object, e.offset, false)
        }
        Inherit::Copy => {
            let got = copy_entry(objs, pacct, s, &mut e, m)?;
            if let Some(me) = parent.get_mut(s) {
                *me = e;
            }
            (got.0, got.1, true)
        }
    };
    let ce = Entry {
        object,
        offset,
        cow,
        wired: 0,
        ..e
    };
    if let Err(err) = child.insert(s, ce) {
        objs.release(object, m);
        return Err(err);
    }
    Ok(())
}
