//! `pagewait_child`: the side of the `pagewait` test whose message buffers are paged out
//! while it waits in the kernel (`docs/vm.md`, "Paging", "A kernel copy that meets a page
//! that is out").
//!
//! Its bootstrap right is the parent's port, whose queue holds one message. Each buffer
//! is 256 bytes astride the boundary of a two-page region of its own, written just before
//! the call, so that both pages are resident when the call starts and are paged out only
//! while the thread waits. A watcher thread asks `vm_query` every few milliseconds how many
//! pages of the region are resident and notes when one is not.
//!
//! 1. `SEND | RECEIVE` from the buffer: a request (id [`REQUEST`]) with a send-once reply
//!    right; the reply (id [`REPLY`], [`LEN`] bytes of [`byte`]) comes into the same
//!    buffer once its pages are out. It must arrive intact, and the request must have
//!    been sent once (the parent checks).
//! 2. `SEND` from a second buffer to the parent's port while its queue is full: the call
//!    waits for room, its buffer is paged out meanwhile, and the message (id [`LATE`])
//!    must arrive intact when room is made.
//! 3. A `vm_query` whose result lands in the first buffer's region, paged out again by
//!    then: the call waits for the page and succeeds.
//! 4. A report (id [`REPORT`]): whether all of that went well, and for steps 1 and 2
//!    whether the watcher saw a page of the buffer out while the call waited.
#![no_std]
#![no_main]

use baton_abi::ipc::{Descriptor, Disposition, MsgHeader, DESCRIPTOR_SIZE, HEADER_SIZE};
use baton_rt::ipc::{msg_buf, port_allocate, MSG_RECEIVE, MSG_SEND};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::vm::{self, PROT_RW};
use baton_rt::{println, FOREVER};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

baton_rt::entry!(main);

const P: u64 = 4096;
/// The buffers' size, and where they start: 64 bytes before their region's second page.
const BUF: usize = 256;
const AT: u64 = P - 64;
/// Bytes of data in the reply and in the late message.
pub const LEN: usize = 200;
/// Message ids.
pub const REQUEST: u64 = 10;
pub const REPLY: u64 = 20;
pub const LATE: u64 = 30;
pub const REPORT: u64 = 40;

/// Byte `i` of the data of step `step`.
pub const fn byte(step: u64, i: usize) -> u8 {
    ((i as u64).wrapping_mul(7) ^ step.wrapping_mul(0x5b)).wrapping_add(3) as u8
}

/// The region the watcher looks at (0: none; `u64::MAX`: stop).
static WATCH: AtomicU64 = AtomicU64::new(0);
/// Which step the watched region belongs to.
static STEP: AtomicU64 = AtomicU64::new(0);
/// For each step: the watcher saw a page of its region out.
static OUT: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
/// The parent's signal port (a send right from the reply), told [`OUT_SEEN`] when the
/// watcher first sees the second buffer out (the parent's own port is full then).
static SIGNAL: AtomicU64 = AtomicU64::new(0);
/// The parent's port (the bootstrap right).
static PARENT: AtomicU64 = AtomicU64::new(0);
pub const OUT_SEEN: u64 = 35;

static STACKS: StackPool<1, 8192> = StackPool::new();

fn watcher(_: u64) {
    loop {
        let region = WATCH.load(Ordering::SeqCst);
        if region == u64::MAX {
            return;
        }
        if region != 0 {
            let step = STEP.load(Ordering::SeqCst) as usize;
            // A page of the buffer out is enough: the message covers both pages.
            if vm::query(region).is_ok_and(|r| r.resident < 2) {
                if let Some(o) = OUT.get(step) {
                    if !o.swap(true, Ordering::SeqCst) {
                        // Step 1: the parent's own port (empty while it holds the
                        // request); step 2: its signal port (its own is full).
                        let to = if step == 0 { &PARENT } else { &SIGNAL };
                        tell(to.load(Ordering::SeqCst), OUT_SEEN);
                    }
                }
            }
        }
        let _ = baton_rt::sleep_ns(5_000_000);
    }
}

/// Sends an empty message `id` to `to` (a send right), if any.
fn tell(to: u64, id: u64) {
    if to == 0 {
        return;
    }
    let mut m = [0u8; HEADER_SIZE];
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: HEADER_SIZE as u32,
        dest: to,
        reply: 0,
        id,
    };
    m.copy_from_slice(&h.to_bytes());
    let _ = msg_buf(&mut m, MSG_SEND, 0, FOREVER);
}

/// A new two-page region and the 256-byte buffer astride its page boundary.
fn buffer() -> Option<(u64, &'static mut [u8])> {
    let region = vm::allocate(None, 2 * P, PROT_RW).ok()?;
    // SAFETY: `[region + AT, region + AT + BUF)` lies in the two pages just allocated
    // read-write, which nothing else in this program refers to; it is never deallocated.
    let buf = unsafe { core::slice::from_raw_parts_mut((region + AT) as *mut u8, BUF) };
    Some((region, buf))
}

fn main(_task_id: u64) -> i32 {
    let parent = baton_rt::start::bootstrap();
    PARENT.store(parent, Ordering::SeqCst);
    let (Some((r1, b1)), Some((r2, b2)), Ok(reply)) = (buffer(), buffer(), port_allocate(0)) else {
        println!("TEST FAIL pagewait_child: no memory for its buffers");
        return 1;
    };
    let Some(stack) = STACKS.take() else {
        return 1;
    };
    if spawn(stack, watcher, 0).is_err() {
        println!("TEST FAIL pagewait_child: could not start its watcher");
        return 1;
    }

    // 1. A request and its reply through a buffer paged out while the call waits.
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        size: HEADER_SIZE as u32,
        dest: parent,
        reply,
        id: REQUEST,
    };
    b1.fill(0);
    b1[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    STEP.store(0, Ordering::SeqCst);
    WATCH.store(r1, Ordering::SeqCst);
    let r = msg_buf(b1, MSG_SEND | MSG_RECEIVE, reply, FOREVER);
    WATCH.store(0, Ordering::SeqCst);
    let got = MsgHeader::from_bytes(b1);
    // The reply carries a send right to the parent's signal port, then the data.
    let at = HEADER_SIZE + DESCRIPTOR_SIZE;
    let signal = Descriptor::from_bytes(&b1[HEADER_SIZE..]).map_or(0, |d| d.value);
    SIGNAL.store(signal, Ordering::SeqCst);
    let intact = r.is_ok()
        && signal != 0
        && got.is_some_and(|g| g.id == REPLY && g.size as usize == at + LEN)
        && b1[at..][..LEN]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(1, i));
    if intact {
        println!("ok: pagewait_child: the reply arrived intact in a buffer that was paged out");
    } else {
        println!("TEST FAIL pagewait_child: the reply into a paged-out buffer: {r:?}, {got:?}");
    }

    // 2. A message sent from a buffer paged out while the send waits for room.
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: (HEADER_SIZE + LEN) as u32,
        dest: parent,
        reply: 0,
        id: LATE,
    };
    b2.fill(0);
    b2[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    for (i, b) in b2[HEADER_SIZE..][..LEN].iter_mut().enumerate() {
        *b = byte(2, i);
    }
    STEP.store(1, Ordering::SeqCst);
    WATCH.store(r2, Ordering::SeqCst);
    let sent = msg_buf(b2, MSG_SEND, 0, FOREVER);
    WATCH.store(u64::MAX, Ordering::SeqCst);
    if let Err(e) = sent {
        println!("TEST FAIL pagewait_child: a send from a paged-out buffer: {e:?}");
    }

    // A system call's own copy into the first buffer's region, out again by now: the
    // call waits for the page and is made again, with no error (and the kernel prints
    // nothing about it).
    let q = vm::query_raw(r1, r1 + AT);
    // SAFETY: the word at `r1 + AT`, in the region allocated read-write above, which the
    // kernel just wrote (a `VmRegion`, whose first word is the region's start).
    let start = unsafe { ((r1 + AT) as *const u64).read_volatile() };
    let queried = q.is_ok() && start == r1;
    if !queried {
        println!("TEST FAIL pagewait_child: vm_query into a paged-out page: {q:?}, {start:#x}");
    }

    // 4. The report.
    let mut m = [0u8; HEADER_SIZE + 24];
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: m.len() as u32,
        dest: parent,
        reply: 0,
        id: REPORT,
    };
    m[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    let words = [
        u64::from(intact && sent.is_ok() && queried),
        u64::from(OUT[0].load(Ordering::SeqCst)),
        u64::from(OUT[1].load(Ordering::SeqCst)),
    ];
    for (c, w) in m[HEADER_SIZE..].chunks_exact_mut(8).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    if msg_buf(&mut m, MSG_SEND, 0, FOREVER).is_err() {
        println!("TEST FAIL pagewait_child: could not report");
        return 1;
    }
    i32::from(!(intact && sent.is_ok() && queried))
}
