//! `ool_peer`: the receiving side of the `ool` test (out-of-line data in messages).
//!
//! It makes a service port and a *sink* port and sends `ool` send rights to both (a
//! `HELLO` on its bootstrap port). Messages sent to the sink wait there, untouched, until
//! `ool` asks (`DRAIN`, an RPC on the service port): the peer then receives the oldest
//! message of the sink and, for each out-of-line region in it, checks that the bytes of the
//! region's pages outside the range sent are zero, reads every page, writes a mark into
//! the first word of the data (its own copy: the sender must never see it), and replies
//! with the same regions, moved (`OOL_DEALLOCATE`), and in-line words: whether every
//! outside byte was zero, the number of regions, and the data's first word as received.
#![no_std]
#![no_main]

use baton_abi::ipc::{Descriptor, Disposition, MsgHeader, DESC_OOL, OOL_DEALLOCATE};
use baton_rt::ipc::{port_allocate, IpcBuffer, MSG_RECEIVE, MSG_SEND};
use baton_rt::start::bootstrap;
use baton_rt::FOREVER;

baton_rt::entry!(main);

/// Message ids of the `ool` protocol.
const HELLO: u64 = 0x001_0001;
const DRAIN: u64 = 0x001_0002;
/// What the peer writes into the first word of each region it receives.
const MARK: u64 = 0x5eed_0f9e_e4e4;
const P: u64 = 4096;

fn main(_: u64) -> i32 {
    let Ok(mut buf) = IpcBuffer::new() else {
        return 1;
    };
    let (Ok(svc), Ok(sink)) = (port_allocate(0), port_allocate(64)) else {
        return 1;
    };
    let hello = [
        Descriptor::port(svc, Disposition::MakeSend),
        Descriptor::port(sink, Disposition::MakeSend),
    ];
    if buf.send(bootstrap(), HELLO, &hello, &[]).is_err() {
        return 1;
    }
    loop {
        if buf.msg(MSG_RECEIVE, svc, FOREVER).is_err() {
            return 1;
        }
        let h = buf.header();
        if h.id != DRAIN || h.reply == 0 {
            return 0;
        }
        let reply = h.reply;
        let mut out = [Descriptor::default(); 8];
        let mut words = [0u64; 3];
        match buf.msg(MSG_RECEIVE, sink, 0) {
            Ok(()) => {
                let n = buf.header().descriptors().min(out.len());
                let mut zero = true;
                let mut first = 0;
                let mut k = 0;
                for i in 0..n {
                    let Some(d) = buf.descriptor(i) else { continue };
                    if d.kind != DESC_OOL || d.value == 0 {
                        continue;
                    }
                    zero &= outside_is_zero(d.value, d.size);
                    touch(d.value, d.size);
                    if k == 0 {
                        // SAFETY: the kernel just mapped the region here, readable and
                        // writable, at least `d.size` bytes; no reference covers it.
                        first = unsafe { (d.value as *const u64).read_unaligned() };
                    }
                    if d.size >= 8 {
                        // SAFETY: as above.
                        unsafe { (d.value as *mut u64).write_unaligned(MARK) };
                    }
                    out[k] = Descriptor {
                        kind: DESC_OOL,
                        disposition: OOL_DEALLOCATE,
                        value: d.value,
                        size: d.size,
                    };
                    k += 1;
                }
                words = [u64::from(zero), k as u64, first];
                let rh = MsgHeader {
                    bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
                    dest: reply,
                    id: DRAIN,
                    ..MsgHeader::default()
                };
                let mut data = [0u8; 24];
                for (c, w) in data.chunks_exact_mut(8).zip(words) {
                    c.copy_from_slice(&w.to_le_bytes());
                }
                if buf.set(rh, &out[..k], &data).is_err() || buf.msg(MSG_SEND, 0, 0).is_err() {
                    return 1;
                }
                continue;
            }
            Err(_) => words[0] = 2,
        }
        let rh = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
            dest: reply,
            id: DRAIN,
            ..MsgHeader::default()
        };
        let data = words[0].to_le_bytes();
        if buf.set(rh, &[], &data).is_err() || buf.msg(MSG_SEND, 0, 0).is_err() {
            return 1;
        }
    }
}

/// Whether every byte of the pages around `[addr, addr + size)` outside it is zero.
fn outside_is_zero(addr: u64, size: u64) -> bool {
    let lo = addr & !(P - 1);
    let hi = (addr + size).next_multiple_of(P);
    let read = |a: u64| {
        // SAFETY: the kernel mapped the whole pages of the region, readable.
        unsafe { (a as *const u8).read_volatile() }
    };
    (lo..addr).all(|a| read(a) == 0) && (addr + size..hi).all(|a| read(a) == 0)
}

/// Reads one word of every page of the region.
fn touch(addr: u64, size: u64) {
    let mut a = addr & !(P - 1);
    while a < addr + size {
        // SAFETY: as in `outside_is_zero`.
        unsafe { (a as *const u64).read_volatile() };
        a += P;
    }
}
