//! Out-of-line data in messages and `vm_copy` — Accent's MoveWords (`docs/vm.md`,
//! "Out-of-line data"), booted, against a peer task (`ool_peer`):
//!
//! - by value: a write by the sender after the send, and the receiver's write to what it
//!   received, are each invisible to the other side;
//! - move (`OOL_DEALLOCATE`): the sender's whole pages are gone after the send, and the
//!   data arrives; the reply carries the regions back (out-of-line data in a reply);
//! - unaligned regions: the receiver finds zeros, never the sender's bytes, in the parts of
//!   the first and last page outside the range; an unaligned move leaves the partial pages
//!   with the sender, intact;
//! - hostile descriptors (empty, overlapping, kernel addresses, unmapped, huge, unknown
//!   flags, wired, too many, to a kernel object) get their errors and change nothing: the
//!   region is still there, a right moved in the same message is still held, nothing
//!   arrives at the peer;
//! - a peer killed with out-of-line messages queued: the sender's own memory is intact, and
//!   the kernel's heap, objects and free frames come back to the same baseline every round;
//! - out-of-line data in migrating calls: in requests through the IPC buffer and through
//!   a `MSG_BUF` buffer, and in their replies (by value, moved, unaligned, unmapped);
//! - `vm_copy`'s four forms (new memory or over a destination, with or without deleting
//!   the source), within the task and to and from the peer through its task port, and its
//!   errors.
#![no_std]
#![no_main]

use baton_abi::ipc::{
    Descriptor, Disposition, MsgHeader, RightKind, DESCRIPTORS_MAX, DESC_OOL, OOL_DEALLOCATE,
};
use baton_rt::check::Failed;
use baton_rt::ipc::{
    cap_drop, cap_info, port_allocate, port_make_send, IpcBuffer, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::kobject::{call, task_port, task_self, TASK_TERMINATE};
use baton_rt::vm::{self, PROT_READ, PROT_RW, VM_COPY_CREATE, VM_COPY_DELETE};
use baton_rt::{println, Error};
use core::sync::atomic::{AtomicU64, Ordering};

baton_rt::entry!(main);

const TEST: &str = "ool";
const P: u64 = 4096;
const HELLO: u64 = 0x001_0001;
const DRAIN: u64 = 0x001_0002;
/// What the peer writes into the first word of each region it receives.
const MARK: u64 = 0x5eed_0f9e_e4e4;
const SECOND: u64 = 10_000_000_000;

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// The peer: its task, a send right to its service port and to its sink, and the port
/// its replies come to.
struct Peer {
    id: u64,
    svc: u64,
    sink: u64,
    reply: u64,
    boot: u64,
}

fn read(addr: u64) -> u64 {
    // SAFETY: the callers pass memory of this test that no reference covers.
    unsafe { (addr as *const u64).read_unaligned() }
}

fn write(addr: u64, v: u64) {
    // SAFETY: as in `read`, writable.
    unsafe { (addr as *mut u64).write_unaligned(v) }
}

fn byte(addr: u64) -> u8 {
    // SAFETY: as in `read`.
    unsafe { (addr as *const u8).read_volatile() }
}

/// The pattern word at byte offset `off` of a region filled by [`fill`] with `seed`.
fn pattern(seed: u64, off: u64) -> u64 {
    seed.wrapping_mul(0x9e37_79b9).wrapping_add(off / 8)
}

/// Fills `[addr, addr + len)` (words) with the pattern of `seed`.
fn fill(addr: u64, len: u64, seed: u64) {
    let mut off = 0;
    while off < len {
        write(addr + off, pattern(seed, off));
        off += 8;
    }
}

/// The byte at offset `off` of a region filled by [`fill`] with `seed`.
fn pattern_byte(seed: u64, off: u64) -> u8 {
    pattern(seed, off & !7).to_le_bytes()[(off & 7) as usize]
}

/// Whether `[addr, addr + len)` holds the pattern of `seed` from byte offset `base` on,
/// the first word apart (checked by the callers).
fn holds(addr: u64, len: u64, seed: u64, base: u64) -> bool {
    (8..len).all(|off| byte(addr + off) == pattern_byte(seed, base + off))
}

fn ool(addr: u64, size: u64, flags: u32) -> Descriptor {
    Descriptor {
        kind: DESC_OOL,
        disposition: flags,
        value: addr,
        size,
    }
}

fn run() -> Result<(), Failed> {
    let mut buf = must("IPC buffer", IpcBuffer::new())?;
    // Activations for the migrating calls, made once: every round uses them.
    let mig = must("port", port_allocate(0))?;
    must("attach", baton_rt::migrate::attach(mig, 1, mig_handler))?;
    let mig_send = must("send right", port_make_send(mig, false))?;
    let mig_reply = must("port", port_allocate(0))?;
    let mut after = [(0u64, 0u64, 0u64); 3];
    for (round, slot) in after.iter_mut().enumerate() {
        println!("ool: round {round}");
        migrating(&mut buf, mig_send, mig_reply)?;
        migrating_replies(&mut buf, mig_send, mig_reply)?;
        one_round(&mut buf)?;
        *slot = settled()?;
    }
    check!(
        after[1] == after[2],
        "a round leaves the kernel heap, objects and free frames as the round before did ({:?})",
        after
    );
    Ok(())
}

/// The kernel's heap, objects and free frames once a killed peer is fully gone (its
/// space is freed when no CPU has it loaded any more): sampled until two samples agree.
fn settled() -> Result<(u64, u64, u64), Failed> {
    let sample = || -> Result<(u64, u64, u64), Failed> {
        let s = must("stats", baton_rt::stats())?;
        let v = must("vm stats", vm::system_stats())?;
        Ok((s.heap_used, v.objects, v.frames_free))
    };
    let mut last = sample()?;
    for _ in 0..50 {
        let _ = baton_rt::sleep_ns(10_000_000);
        let now = sample()?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

fn start_peer(buf: &mut IpcBuffer) -> Result<Peer, Failed> {
    let boot = must("boot port", port_allocate(0))?;
    let id = must("spawn ool_peer", baton_rt::spawn_with("ool_peer", boot))?;
    must("hello", buf.msg(MSG_RECEIVE, boot, SECOND))?;
    let h = buf.header();
    let (Some(svc), Some(sink)) = (buf.descriptor(0), buf.descriptor(1)) else {
        check!(false, "the peer's hello carries two rights ({h:?})");
        return Err(Failed);
    };
    check!(h.id == HELLO, "the peer says hello");
    let reply = must("reply port", port_allocate(0))?;
    Ok(Peer {
        id,
        svc: svc.value,
        sink: sink.value,
        reply,
        boot,
    })
}

/// Sends a message with `descs` to the peer's sink (one way, queued there).
fn send_to_sink(buf: &mut IpcBuffer, peer: &Peer, descs: &[Descriptor]) -> Result<(), Error> {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: peer.sink,
        id: 1,
        ..MsgHeader::default()
    };
    buf.set(h, descs, &[])?;
    buf.msg(MSG_SEND, 0, 0)
}

/// What the peer answered a `DRAIN`: its words, and the regions it sent back.
struct Drained {
    zero: u64,
    regions: u64,
    first: u64,
    back: [Descriptor; 8],
}

/// Asks the peer to take the oldest message of its sink (an RPC whose reply carries the
/// regions back, moved).
fn drain(buf: &mut IpcBuffer, peer: &Peer) -> Result<Drained, Failed> {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: peer.svc,
        reply: peer.reply,
        id: DRAIN,
        ..MsgHeader::default()
    };
    must("drain request", buf.set(h, &[], &[]))?;
    must("drain", buf.msg(MSG_SEND | MSG_RECEIVE, peer.reply, SECOND))?;
    let d = buf.data();
    let word = |i: usize| baton_rt::ipc::data_word(d, i);
    let mut out = Drained {
        zero: word(0),
        regions: word(1),
        first: word(2),
        back: [Descriptor::default(); 8],
    };
    for (i, slot) in out.back.iter_mut().enumerate() {
        if let Some(x) = buf.descriptor(i) {
            *slot = x;
        }
    }
    Ok(out)
}

/// Deallocates the whole pages around `[addr, addr + len)`.
fn free(addr: u64, len: u64) -> Result<(), Failed> {
    let lo = addr & !(P - 1);
    let hi = (addr + len).next_multiple_of(P);
    // SAFETY: the test's own region, no reference into it.
    must("deallocate", unsafe { vm::deallocate(lo, hi - lo) })
}

fn one_round(buf: &mut IpcBuffer) -> Result<(), Failed> {
    let peer = start_peer(buf)?;
    by_value(buf, &peer)?;
    moved(buf, &peer)?;
    unaligned(buf, &peer)?;
    hostile(buf, &peer)?;
    movewords(buf, &peer)?;
    killed_with_messages_queued(buf, peer)?;
    Ok(())
}

/// Writes after the send on either side are invisible to the other.
fn by_value(buf: &mut IpcBuffer, peer: &Peer) -> Result<(), Failed> {
    let len = 4 * P;
    let r = must("allocate", vm::allocate(None, len, PROT_RW))?;
    fill(r, len, 1);
    must("send", send_to_sink(buf, peer, &[ool(r, len, 0)]))?;
    // The sender writes after the send, before the receiver looks.
    write(r, 0xdead);
    write(r + 2 * P, 0xbeef);
    let d = drain(buf, peer)?;
    let back = d.back[0];
    check!(
        d.regions == 1 && d.first == pattern(1, 0) && back.size == len,
        "the receiver sees the data as it was sent, not the sender's later write ({:#x})",
        d.first
    );
    check!(
        back.value != 0
            && read(back.value) == MARK
            && read(back.value + 2 * P) == pattern(1, 2 * P)
            && holds(back.value, len, 1, 0),
        "the data comes back by a reply carrying it out of line, with the receiver's write"
    );
    check!(
        read(r) == 0xdead && read(r + 2 * P) == 0xbeef && holds(r + 2 * P, 2 * P, 1, 2 * P),
        "the sender never sees the receiver's write"
    );
    free(r, len)?;
    free(back.value, back.size)?;
    Ok(())
}

/// An address nothing in this test maps.
const UNMAPPED: u64 = 0x6fff_0000_0000;

/// What the activation saw of the last migrating call: its descriptors' addresses and
/// sizes (in this task, where the kernel put the regions), the first word of each, and
/// whether every byte outside each range in its first and last page was zero.
struct Seen {
    n: AtomicU64,
    at: [AtomicU64; 2],
    size: [AtomicU64; 2],
    first: [AtomicU64; 2],
    outside_zero: [AtomicU64; 2],
}

static SEEN: Seen = Seen {
    n: AtomicU64::new(0),
    at: [AtomicU64::new(0), AtomicU64::new(0)],
    size: [AtomicU64::new(0), AtomicU64::new(0)],
    first: [AtomicU64::new(0), AtomicU64::new(0)],
    outside_zero: [AtomicU64::new(0), AtomicU64::new(0)],
};

/// The activation's dispatch: records what each region holds (see [`Seen`]), then writes
/// [`MARK`] over its first word, a write the caller must never see.
fn mig_handler(req: &mut baton_rt::migrate::Request) {
    let mut n = 0;
    while let Some(d) = req.descriptor(n) {
        if let (Some(at), Some(size), Some(first), Some(zero)) = (
            SEEN.at.get(n),
            SEEN.size.get(n),
            SEEN.first.get(n),
            SEEN.outside_zero.get(n),
        ) {
            at.store(d.value, Ordering::Relaxed);
            size.store(d.size, Ordering::Relaxed);
            if d.value != 0 && d.size >= 8 {
                first.store(read(d.value), Ordering::Relaxed);
                let lo = d.value & !(P - 1);
                let hi = (d.value + d.size).next_multiple_of(P);
                let clean = (lo..d.value)
                    .chain(d.value + d.size..hi)
                    .all(|a| byte(a) == 0);
                zero.store(u64::from(clean), Ordering::Relaxed);
                write(d.value, MARK);
            }
        }
        n += 1;
    }
    SEEN.n.store(n as u64, Ordering::Relaxed);
    let mode = REPLY_MODE.load(Ordering::Relaxed);
    if mode == REPLY_PLAIN {
        req.reply(0, &[]);
        return;
    }
    // A reply carrying a region of this side's: two pages filled with seed 11 (or an
    // unaligned part of them, or an unmapped range for the hostile case).
    let Ok(a) = vm::allocate(None, 2 * P, PROT_RW) else {
        req.reply(1, &[]);
        return;
    };
    fill(a, 2 * P, 11);
    REPLIED_AT.store(a, Ordering::Relaxed);
    let d = match mode {
        REPLY_MOVE => ool(a, 2 * P, OOL_DEALLOCATE),
        REPLY_UNALIGNED => ool(a + 104, P + 200, 0),
        REPLY_UNMAPPED => ool(UNMAPPED, P, 0),
        _ => ool(a, 2 * P, 0),
    };
    req.reply_regions(REPLY_ID, &[d], &REPLY_TAIL.to_le_bytes());
}

/// How the activation replies: in-line only, or with a region (copied, moved, unaligned,
/// or unmapped).
static REPLY_MODE: AtomicU64 = AtomicU64::new(REPLY_PLAIN);
const REPLY_PLAIN: u64 = 0;
const REPLY_COPY: u64 = 1;
const REPLY_MOVE: u64 = 2;
const REPLY_UNALIGNED: u64 = 3;
const REPLY_UNMAPPED: u64 = 4;
/// The region the activation allocated for its last reply.
static REPLIED_AT: AtomicU64 = AtomicU64::new(0);
const REPLY_ID: u64 = 0x001_0003;
/// The in-line word after a reply's descriptor.
const REPLY_TAIL: u64 = 0x7a11_7a11_7a11;

/// A migrating call through a buffer of the caller's own (`MSG_BUF`) carrying `descs` and
/// one in-line word; the reply comes back into `out`.
fn mig_call_buf(out: &mut [u8], send: u64, reply: u64, descs: &[Descriptor]) -> Result<(), Error> {
    let d = baton_abi::ipc::DESCRIPTOR_SIZE;
    let at = baton_abi::ipc::HEADER_SIZE + descs.len() * d;
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0)
            | (descs.len() as u32) << 16,
        dest: send,
        reply,
        id: HELLO,
        size: (at + 8) as u32,
    };
    out[..baton_abi::ipc::HEADER_SIZE].copy_from_slice(&h.to_bytes());
    for (i, desc) in descs.iter().enumerate() {
        let o = baton_abi::ipc::HEADER_SIZE + i * d;
        out[o..o + d].copy_from_slice(&desc.to_bytes());
    }
    out[at..at + 8].copy_from_slice(&HELLO.to_le_bytes());
    baton_rt::ipc::msg_buf(out, MSG_SEND | MSG_RECEIVE, reply, 10 * SECOND)
}

/// The header, first descriptor and the in-line word after it of a reply in `b`.
fn reply_in(b: &[u8]) -> (MsgHeader, Option<Descriptor>, u64) {
    let hs = baton_abi::ipc::HEADER_SIZE;
    let d = baton_abi::ipc::DESCRIPTOR_SIZE;
    let h = MsgHeader::from_bytes(&b[..hs]).unwrap_or_default();
    let desc = Descriptor::from_bytes(&b[hs..hs + d]);
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[hs + d..hs + d + 8]);
    (h, desc, u64::from_le_bytes(w))
}

/// Out-of-line data in the replies of migrating calls (through the IPC buffer and through
/// a `MSG_BUF` buffer), and in `MSG_BUF` requests: the reply's region arrives in the
/// caller's memory by value (a later write to either copy is invisible to the other), a
/// moved one leaves the server's memory, an unaligned one comes with zeros around it, an
/// unmapped one fails the call with nothing received; a `MSG_BUF` request's regions reach
/// the server as the IPC buffer's do.
fn migrating_replies(buf: &mut IpcBuffer, send: u64, reply: u64) -> Result<(), Failed> {
    // Through the IPC buffer: a copy.
    REPLY_MODE.store(REPLY_COPY, Ordering::Relaxed);
    must("migrating call", mig_call(buf, send, reply, &[]))?;
    let (h, d) = (buf.header(), buf.descriptor(0));
    let server = REPLIED_AT.load(Ordering::Relaxed);
    let tail = buf.data().get(..8).map(|w| {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        u64::from_le_bytes(b)
    });
    let got = d.map_or(0, |d| d.value);
    check!(
        h.id == REPLY_ID
            && h.bits >> 16 == 1
            && d.is_some_and(|d| d.kind == DESC_OOL && d.size == 2 * P)
            && got != 0
            && got != server
            && read(got) == pattern(11, 0)
            && holds(got, 2 * P, 11, 0)
            && tail == Some(REPLY_TAIL),
        "a migrating call's reply region arrives in the caller's memory, with the in-line data after it ({h:?} {d:?})"
    );
    write(server, 0xbad);
    write(got + P, 0xbad);
    check!(
        read(got) == pattern(11, 0) && read(server + P) == pattern(11, P),
        "the reply's region is a value: neither copy sees the other's later writes"
    );
    free(got, 2 * P)?;
    free(server, 2 * P)?;
    // A move: the server's pages go.
    REPLY_MODE.store(REPLY_MOVE, Ordering::Relaxed);
    must("migrating call", mig_call(buf, send, reply, &[]))?;
    let server = REPLIED_AT.load(Ordering::Relaxed);
    let got = buf.descriptor(0).map_or(0, |d| d.value);
    let gone = match vm::query(server) {
        Err(Error::NotFound) => true,
        Ok(q) => q.start >= server + 2 * P,
        Err(_) => false,
    };
    check!(
        gone && got != 0 && read(got) == pattern(11, 0) && holds(got, 2 * P, 11, 0),
        "a moved reply region leaves the server's memory and arrives whole"
    );
    free(got, 2 * P)?;
    // Unaligned: zeros around it.
    REPLY_MODE.store(REPLY_UNALIGNED, Ordering::Relaxed);
    must("migrating call", mig_call(buf, send, reply, &[]))?;
    let server = REPLIED_AT.load(Ordering::Relaxed);
    let d = buf.descriptor(0);
    let got = d.map_or(0, |d| d.value);
    let clean = got != 0
        && ((got & !(P - 1))..got)
            .chain(got + P + 200..(got + P + 200).next_multiple_of(P))
            .all(|a| byte(a) == 0);
    check!(
        got % P == 104
            && d.is_some_and(|d| d.size == P + 200)
            && clean
            && read(got) == pattern(11, 104),
        "an unaligned reply region arrives at its offset, the bytes around it zeros"
    );
    if got != 0 {
        free(got & !(P - 1), 2 * P)?;
    }
    free(server, 2 * P)?;
    // Unmapped: the call fails, nothing arrives.
    REPLY_MODE.store(REPLY_UNMAPPED, Ordering::Relaxed);
    let r = mig_call(buf, send, reply, &[]);
    check!(
        r == Err(Error::BadAddress),
        "a reply naming unmapped memory fails the call ({r:?})"
    );
    free(REPLIED_AT.load(Ordering::Relaxed), 2 * P)?;
    // Through a buffer of the caller's own (`MSG_BUF`): a region each way.
    let q = must("allocate", vm::allocate(None, 2 * P, PROT_RW))?;
    fill(q, 2 * P, 12);
    let mut out = [0u8; 512];
    REPLY_MODE.store(REPLY_COPY, Ordering::Relaxed);
    SEEN.n.store(99, Ordering::Relaxed);
    must(
        "MSG_BUF migrating call",
        mig_call_buf(&mut out, send, reply, &[ool(q, 2 * P, 0)]),
    )?;
    let at = SEEN.at[0].load(Ordering::Relaxed);
    check!(
        SEEN.n.load(Ordering::Relaxed) == 1
            && at != 0
            && at != q
            && SEEN.first[0].load(Ordering::Relaxed) == pattern(12, 0)
            && read(q) == pattern(12, 0)
            && holds(at + 8, 2 * P - 8, 12, 8),
        "a MSG_BUF migrating call's region arrives in the server's memory by value"
    );
    let (h, d, tail) = reply_in(&out);
    let server = REPLIED_AT.load(Ordering::Relaxed);
    let got = d.map_or(0, |d| d.value);
    check!(
        h.id == REPLY_ID
            && h.bits >> 16 == 1
            && got != 0
            && got != server
            && holds(got, 2 * P, 11, 0)
            && read(got) == pattern(11, 0)
            && tail == REPLY_TAIL,
        "a MSG_BUF migrating call's reply region arrives in the caller's memory ({h:?} {d:?})"
    );
    write(got, 0xbad);
    check!(read(server) == pattern(11, 0), "and is a value");
    free(got, 2 * P)?;
    free(server, 2 * P)?;
    free(at, 2 * P)?;
    // A MSG_BUF request moving its region, with an unmapped reply: the move happened
    // (the request was carried), the reply fails.
    REPLY_MODE.store(REPLY_UNMAPPED, Ordering::Relaxed);
    let r = mig_call_buf(&mut out, send, reply, &[ool(q, 2 * P, OOL_DEALLOCATE)]);
    let gone = match vm::query(q) {
        Err(Error::NotFound) => true,
        Ok(x) => x.start >= q + 2 * P,
        Err(_) => false,
    };
    check!(
        r == Err(Error::BadAddress) && gone,
        "a MSG_BUF request's move takes the caller's pages; a bad reply region fails the call ({r:?})"
    );
    free(SEEN.at[0].load(Ordering::Relaxed), 2 * P)?;
    free(REPLIED_AT.load(Ordering::Relaxed), 2 * P)?;
    REPLY_MODE.store(REPLY_PLAIN, Ordering::Relaxed);
    Ok(())
}

/// A migrating call to the activations of `send` carrying `descs`.
fn mig_call(buf: &mut IpcBuffer, send: u64, reply: u64, descs: &[Descriptor]) -> Result<(), Error> {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: send,
        reply,
        id: HELLO,
        ..MsgHeader::default()
    };
    buf.set(h, descs, &[])?;
    buf.msg(MSG_SEND | MSG_RECEIVE, reply, 10 * SECOND)
}

/// Out-of-line data in migrating calls: the regions arrive in the server's memory by
/// value (writes on either side after the call are invisible to the other), a move takes
/// the caller's pages, bytes outside an unaligned range are zeros, and bad descriptors are
/// refused with nothing changed.
fn migrating(buf: &mut IpcBuffer, send: u64, reply: u64) -> Result<(), Failed> {
    let len = 4 * P;
    let r = must("allocate", vm::allocate(None, len, PROT_RW))?;
    fill(r, len, 7);
    must(
        "migrating call",
        mig_call(buf, send, reply, &[ool(r, len, 0)]),
    )?;
    let (got, got_len) = (
        SEEN.at[0].load(Ordering::Relaxed),
        SEEN.size[0].load(Ordering::Relaxed),
    );
    check!(
        SEEN.n.load(Ordering::Relaxed) == 1
            && got != 0
            && got != r
            && got_len == len
            && SEEN.first[0].load(Ordering::Relaxed) == pattern(7, 0),
        "a migrating call's region arrives in the server's memory, a region of its own"
    );
    check!(
        read(r) == pattern(7, 0) && holds(r, len, 7, 0),
        "the caller never sees the server's write"
    );
    write(r + P, 0xdead);
    check!(
        read(got) == MARK && read(got + P) == pattern(7, P) && holds(got + P, len - P, 7, P),
        "the server never sees the caller's later write"
    );
    free(got, got_len)?;
    // A move, and an unaligned region beside it.
    let m = must("allocate", vm::allocate(None, 2 * P, PROT_RW))?;
    fill(m, 2 * P, 8);
    let (ua, ulen) = (r + 2 * P + 104, P + 200);
    must(
        "migrating call",
        mig_call(
            buf,
            send,
            reply,
            &[ool(m, 2 * P, OOL_DEALLOCATE), ool(ua, ulen, 0)],
        ),
    )?;
    let gone = match vm::query(m) {
        Err(Error::NotFound) => true,
        Ok(q) => q.start >= m + 2 * P,
        Err(_) => false,
    };
    let (m2, u2) = (
        SEEN.at[0].load(Ordering::Relaxed),
        SEEN.at[1].load(Ordering::Relaxed),
    );
    check!(
        gone && SEEN.n.load(Ordering::Relaxed) == 2 && m2 != 0 && holds(m2, 2 * P, 8, 0),
        "a move in a migrating call takes the caller's pages, and the data arrives whole"
    );
    check!(
        u2 % P == ua % P
            && SEEN.size[1].load(Ordering::Relaxed) == ulen
            && SEEN.first[1].load(Ordering::Relaxed) == read(ua)
            && SEEN.outside_zero[1].load(Ordering::Relaxed) == 1,
        "an unaligned region arrives at its offset, the bytes around it zeros"
    );
    free(m2, 2 * P)?;
    free(u2, ulen)?;
    // Refused, nothing changed: overlapping regions, an unmapped one, a bad flag.
    SEEN.n.store(99, Ordering::Relaxed);
    let bad: [(&str, [Descriptor; 2], Error); 3] = [
        (
            "overlapping",
            [ool(r, 2 * P, 0), ool(r + P, P, 0)],
            Error::InvalidArgument,
        ),
        (
            "unmapped",
            [ool(r, P, 0), ool(UNMAPPED, P, 0)],
            Error::BadAddress,
        ),
        (
            "a bad flag",
            [ool(r, P, 0), ool(r + 2 * P, P, 0x80)],
            Error::InvalidArgument,
        ),
    ];
    for (what, descs, want) in bad {
        let got = mig_call(buf, send, reply, &descs);
        check!(
            got == Err(want),
            "a migrating call with {what} regions: {want:?} ({got:?})"
        );
    }
    check!(
        SEEN.n.load(Ordering::Relaxed) == 99 && holds(r + 2 * P, 2 * P, 7, 2 * P),
        "and the server was never entered, the caller's memory intact"
    );
    free(r, len)?;
    Ok(())
}

/// `OOL_DEALLOCATE`: the sender's pages go; the data arrives.
fn moved(buf: &mut IpcBuffer, peer: &Peer) -> Result<(), Failed> {
    let len = 8 * P;
    let r = must("allocate", vm::allocate(None, len, PROT_RW))?;
    fill(r, len, 2);
    must(
        "send",
        send_to_sink(buf, peer, &[ool(r, len, OOL_DEALLOCATE)]),
    )?;
    let gone = match vm::query(r) {
        Err(Error::NotFound) => true,
        Ok(q) => q.start >= r + len,
        Err(_) => false,
    };
    check!(
        gone,
        "a move takes the region out of the sender's address space"
    );
    let d = drain(buf, peer)?;
    let back = d.back[0];
    check!(
        d.first == pattern(2, 0) && back.size == len && holds(back.value, len, 2, 0),
        "the moved region arrives whole"
    );
    free(back.value, back.size)?;
    Ok(())
}

/// Unaligned regions: zeros outside the range, never the sender's bytes.
fn unaligned(buf: &mut IpcBuffer, peer: &Peer) -> Result<(), Failed> {
    let len = 4 * P;
    let r = must("allocate", vm::allocate(None, len, PROT_RW))?;
    fill(r, len, 3);
    let (at, size) = (r + 100, 2 * P + 200);
    must("send", send_to_sink(buf, peer, &[ool(at, size, 0)]))?;
    let d = drain(buf, peer)?;
    let back = d.back[0];
    check!(
        d.zero == 1 && d.first == read(at),
        "the receiver of an unaligned region finds zeros outside it in its end pages"
    );
    let lo = back.value & !(P - 1);
    let hi = (back.value + size).next_multiple_of(P);
    let outside_zero =
        (lo..back.value).all(|a| byte(a) == 0) && (back.value + size..hi).all(|a| byte(a) == 0);
    check!(
        back.value % P == 100
            && back.size == size
            && outside_zero
            && holds(back.value, size, 3, 100),
        "an unaligned region keeps its offset in the page and its data, and nothing around it"
    );
    free(back.value, back.size)?;
    // An unaligned move: the whole page inside goes, the partial end pages stay intact.
    must(
        "send",
        send_to_sink(buf, peer, &[ool(at, size, OOL_DEALLOCATE)]),
    )?;
    let q = vm::query(r + P);
    let inner_gone = match q {
        Ok(q) => q.start >= r + 2 * P,
        Err(e) => e == Error::NotFound,
    };
    check!(
        inner_gone
            && read(r + 8) == pattern(3, 8)
            && read(r + 2 * P + 400) == pattern(3, 2 * P + 400),
        "an unaligned move removes the whole pages inside and leaves the partial end pages"
    );
    let d = drain(buf, peer)?;
    let back = d.back[0];
    check!(
        d.zero == 1 && back.size == size && holds(back.value, size, 3, 100),
        "the unaligned move arrives whole, zeros around it"
    );
    free(back.value, back.size)?;
    free(r, P)?;
    free(r + 2 * P, 2 * P)?;
    Ok(())
}

/// Hostile descriptors: errors, nothing changed.
fn hostile(buf: &mut IpcBuffer, peer: &Peer) -> Result<(), Failed> {
    let r = must("allocate", vm::allocate(None, 2 * P, PROT_RW))?;
    fill(r, 2 * P, 4);
    let freed = must("allocate", vm::allocate(None, P, PROT_RW))?;
    free(freed, P)?;
    // A send right moved in the same message: it must still be held after a refusal.
    let x = must("port", port_allocate(0))?;
    let s = must("send right", port_make_send(x, false))?;
    let right = Descriptor::port(s, Disposition::MoveSend);
    let own = buf.view().as_ptr() as u64;
    let kernel = 0xffff_8000_0000_0000u64;
    let cases: [(&str, [Descriptor; 2], Error); 10] = [
        (
            "an empty region",
            [right, ool(r, 0, 0)],
            Error::InvalidArgument,
        ),
        (
            "unknown flags",
            [right, ool(r, P, 0x80)],
            Error::InvalidArgument,
        ),
        (
            "a kernel address",
            [right, ool(kernel, P, 0)],
            Error::BadAddress,
        ),
        (
            "an unmapped range",
            [right, ool(freed, P, OOL_DEALLOCATE)],
            Error::BadAddress,
        ),
        (
            "a huge size",
            [right, ool(r, u64::MAX - r, 0)],
            Error::BadAddress,
        ),
        (
            "a size past user space",
            [right, ool(r, 1 << 47, 0)],
            Error::BadAddress,
        ),
        (
            "a range running into a hole",
            [right, ool(r, 3 * P, OOL_DEALLOCATE)],
            Error::BadAddress,
        ),
        (
            "a copy of the wired IPC buffer",
            [right, ool(own, P, 0)],
            Error::Denied,
        ),
        (
            "a move of the wired IPC buffer",
            [right, ool(own, P, OOL_DEALLOCATE)],
            Error::Denied,
        ),
        (
            "overlapping regions",
            [ool(r, 2 * P, OOL_DEALLOCATE), ool(r + P, 8, 0)],
            Error::InvalidArgument,
        ),
    ];
    for (what, descs, want) in cases {
        let got = send_to_sink(buf, peer, &descs);
        check!(got == Err(want), "{what}: {want:?} (got {got:?})");
    }
    // A bad right after a move of a region: refused before the region moves.
    let bad = [
        ool(r, P, OOL_DEALLOCATE),
        Descriptor::port(0x7777, Disposition::CopySend),
    ];
    let got = send_to_sink(buf, peer, &bad);
    check!(
        got == Err(Error::InvalidName),
        "a bad right beside a move: InvalidName ({got:?})"
    );
    // Too many descriptors.
    let many = [ool(r, 8, 0); DESCRIPTORS_MAX + 1];
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: peer.sink,
        id: 1,
        ..MsgHeader::default()
    };
    let got = buf.set(h, &many[..DESCRIPTORS_MAX], &[]).and_then(|()| {
        // The count field says one more than there are.
        let mut raw = buf.header();
        raw.bits = (raw.bits & !(0xff << 16)) | (((DESCRIPTORS_MAX + 1) as u32) << 16);
        raw.size += 24;
        buf.set_header(raw);
        buf.msg(MSG_SEND, 0, 0)
    });
    check!(
        got == Err(Error::TooLarge),
        "too many descriptors: TooLarge ({got:?})"
    );
    // To a kernel object's port: not supported.
    let me = must("task_self", task_self())?;
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: me,
        id: TASK_TERMINATE,
        ..MsgHeader::default()
    };
    must("set", buf.set(h, &[ool(r, P, OOL_DEALLOCATE)], &[]))?;
    let got = buf.msg(MSG_SEND, 0, 0);
    check!(
        got == Err(Error::NotSupported),
        "a region sent to a kernel object: NotSupported ({got:?})"
    );
    let q = must("query", vm::query(r))?;
    check!(
        cap_info(s) == Ok(RightKind::Send)
            && q.start <= r
            && q.end >= r + 2 * P
            && holds(r, 2 * P, 4, 0)
            && read(r) == pattern(4, 0),
        "refused messages change nothing: the right is held, the region mapped and intact"
    );
    let d = drain(buf, peer)?;
    check!(d.zero == 2, "and nothing reached the peer");
    must("drop", cap_drop(s))?;
    must("drop", cap_drop(x))?;
    must("drop", cap_drop(me))?;
    free(r, 2 * P)?;
    Ok(())
}

/// `vm_copy` on this test's own ranges.
fn mw(
    src_task: u64,
    src: u64,
    len: u64,
    dst_task: u64,
    dst: u64,
    flags: u64,
) -> Result<u64, Error> {
    // SAFETY: the ranges are this test's own (or the peer's), and no Rust reference
    // points into them.
    unsafe { vm::copy(src_task, src, len, dst_task, dst, flags) }
}

/// `vm_copy`: the four forms, between tasks, and errors.
fn movewords(_buf: &mut IpcBuffer, peer: &Peer) -> Result<(), Failed> {
    let len = 4 * P;
    let a = must("allocate", vm::allocate(None, len, PROT_RW))?;
    fill(a, len, 5);
    let b = must("copy create", mw(0, a, len, 0, 0, VM_COPY_CREATE))?;
    check!(
        b != a && read(b) == pattern(5, 0) && holds(b, len, 5, 0),
        "vm_copy into new memory copies the data"
    );
    write(b, 1);
    write(a + 8, 2);
    check!(
        read(a) == pattern(5, 0) && read(b + 8) == pattern(5, 8),
        "the copy is a value: writes on either side stay there"
    );
    let c = must(
        "copy create delete",
        mw(0, a, len, 0, 0, VM_COPY_CREATE | VM_COPY_DELETE),
    )?;
    check!(
        vm::query(a).map_or(true, |q| q.start >= a + len)
            && read(c) == pattern(5, 0)
            && read(c + 8) == 2,
        "vm_copy with delete moves the pages"
    );
    // Over a destination, unaligned: the bytes outside the range stay the destination's.
    let d = must("allocate", vm::allocate(None, len, PROT_RW))?;
    fill(d, len, 6);
    let got = must("copy over", mw(0, c + 104, 2 * P, 0, d + 104, 0))?;
    check!(
        got == d + 104
            && read(d + 96) == pattern(6, 96)
            && read(d + 104) == read(c + 104)
            && read(d + P + 8) == pattern(5, P + 8)
            && read(d + 2 * P + 96) == pattern(5, 2 * P + 96)
            && read(d + 2 * P + 104) == pattern(6, 2 * P + 104),
        "vm_copy over a destination replaces exactly the range"
    );
    // Over a destination, with delete: the source's whole pages go.
    let e = must("allocate", vm::allocate(None, len, PROT_RW))?;
    must("copy over delete", mw(0, d, len, 0, e, VM_COPY_DELETE))?;
    check!(
        vm::query(d).map_or(true, |q| q.start >= d + len)
            && read(e + 104) == read(c + 104)
            && read(e) == pattern(6, 0),
        "vm_copy over a destination with delete moves the pages"
    );
    // Between tasks, through the peer's task port.
    let tport = must("task port", task_port(peer.id))?;
    let x = must("copy to the peer", mw(0, e, len, tport, 0, VM_COPY_CREATE))?;
    let y = must(
        "copy from the peer",
        mw(tport, x, len, 0, 0, VM_COPY_CREATE),
    )?;
    check!(
        read(y) == read(e) && read(y + 3 * P + 8) == read(e + 3 * P + 8),
        "vm_copy to another task and back through its task port"
    );
    // Errors.
    let ro = must("allocate", vm::allocate(None, P, PROT_READ))?;
    let errors = [
        (
            "unknown flags",
            mw(0, e, P, 0, 0, 0x10),
            Error::InvalidArgument,
        ),
        (
            "an empty range",
            mw(0, e, 0, 0, 0, VM_COPY_CREATE),
            Error::InvalidArgument,
        ),
        (
            "a bad task name",
            mw(0x7777, e, P, 0, 0, VM_COPY_CREATE),
            Error::InvalidName,
        ),
        (
            "a port that is no task's",
            mw(0, e, P, peer.svc, 0, VM_COPY_CREATE),
            Error::InvalidRight,
        ),
        (
            "a kernel address",
            mw(0, 0xffff_8000_0000_0000, P, 0, 0, VM_COPY_CREATE),
            Error::BadAddress,
        ),
        (
            "an unmapped source",
            mw(0, a, P, 0, 0, VM_COPY_CREATE),
            Error::BadAddress,
        ),
        (
            "a read-only destination",
            mw(0, e, P, 0, ro, 0),
            Error::BadAddress,
        ),
        (
            "an unmapped destination",
            mw(0, e, P, 0, a, 0),
            Error::BadAddress,
        ),
        (
            "offsets that differ in the page",
            mw(0, e + 8, 8, 0, ro + 16, 0),
            Error::InvalidArgument,
        ),
    ];
    for (what, got, want) in errors {
        check!(
            got == Err(want),
            "vm_copy with {what}: {want:?} (got {got:?})"
        );
    }
    check!(read(e) == pattern(6, 0), "refused copies change nothing");
    for (addr, l) in [(b, len), (c, len), (e, len), (y, len), (ro, P)] {
        free(addr, l)?;
    }
    must("drop", cap_drop(tport))?;
    Ok(())
}

/// Messages with regions queued at the peer when it is killed: released, nothing leaks,
/// the sender's memory is intact.
fn killed_with_messages_queued(buf: &mut IpcBuffer, peer: Peer) -> Result<(), Failed> {
    let len = 64 * P;
    let r = must("allocate", vm::allocate(None, len, PROT_RW))?;
    fill(r, len, 7);
    let m = must("allocate", vm::allocate(None, 4 * P, PROT_RW))?;
    fill(m, 4 * P, 8);
    must("send", send_to_sink(buf, &peer, &[ool(r, len, 0)]))?;
    must(
        "send",
        send_to_sink(buf, &peer, &[ool(r + 100, 3000, 0), ool(r + P, 2 * P, 0)]),
    )?;
    must(
        "send",
        send_to_sink(buf, &peer, &[ool(m, 4 * P, OOL_DEALLOCATE)]),
    )?;
    // The sender writes after sending (its pages are copy-on-write now).
    write(r + 8 * P, 9);
    let tport = must("task port", task_port(peer.id))?;
    let killed = call(buf, tport, peer.reply, TASK_TERMINATE, &[], SECOND);
    check!(
        killed.is_ok(),
        "the peer is terminated through its task port ({killed:?})"
    );
    let mut dead = false;
    for _ in 0..200 {
        if cap_info(peer.svc) == Ok(RightKind::DeadName) {
            dead = true;
            break;
        }
        let _ = baton_rt::sleep_ns(5_000_000);
    }
    check!(dead, "the peer's ports die with it");
    check!(
        read(r) == pattern(7, 0)
            && holds(r, 8 * P, 7, 0)
            && read(r + 8 * P) == 9
            && holds(r + 8 * P, len - 8 * P, 7, 8 * P),
        "the sender's memory is intact after the receiver died with its messages queued"
    );
    free(r, len)?;
    for name in [tport, peer.svc, peer.sink, peer.reply, peer.boot] {
        must("drop", cap_drop(name))?;
    }
    Ok(())
}
