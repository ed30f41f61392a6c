//! Started by the `memobj` test with a right to a memory object as its bootstrap right:
//! maps the object at an address of its own choosing (not where the test maps it),
//! writes into it, and talks with the test through it with `wait_shared`/`wake_shared`.
//! The words of the shared page (`u32` slots, as the test's `W_*` constants say):
//! 0 the phase, 1 the magic the peer writes, 2–3 the peer's mapping address, 4 what the
//! test writes, 5 whether the peer saw it, 6 whether the peer's wait was woken, 7–8 the
//! address of the peer's `SECRET`, 9 whether the test's `vm_write` reached `SECRET`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_rt::memobj::{self, map_flags};
use baton_rt::vm::{INHERIT_COPY, PROT_RW};

baton_rt::entry!(main);

/// Where the peer maps the object (the test maps it elsewhere).
const PEER_AT: u64 = 0x5200_0000_0000;
/// The value the test reads with `vm_read` and replaces with `vm_write`.
static SECRET: AtomicU64 = AtomicU64::new(0x5ec7_e700);

fn word(base: u64, i: u64) -> &'static AtomicU32 {
    // SAFETY: `base` is this task's mapping of the shared object (at least a page),
    // which stays mapped until the task ends, and `i` < 1024; `AtomicU32` may alias
    // memory another task writes.
    unsafe { &*((base + 4 * i) as *const AtomicU32) }
}

fn main(_task_id: u64) -> i32 {
    let obj = baton_rt::start::bootstrap();
    // SAFETY: nothing of this task lives at `PEER_AT`.
    let Ok(at) = (unsafe {
        memobj::map_raw(
            obj,
            PEER_AT,
            4096,
            0,
            map_flags(PROT_RW, PROT_RW, false, INHERIT_COPY),
        )
    }) else {
        baton_rt::println!("TEST FAIL memobj_peer: map");
        return 1;
    };
    let w = |i| word(at, i);
    w(1).store(0x1111, Ordering::SeqCst);
    w(2).store(at as u32, Ordering::SeqCst);
    w(3).store((at >> 32) as u32, Ordering::SeqCst);
    let secret = SECRET.as_ptr() as u64;
    w(7).store(secret as u32, Ordering::SeqCst);
    w(8).store((secret >> 32) as u32, Ordering::SeqCst);
    w(0).store(1, Ordering::SeqCst);
    let _ = memobj::wake_shared(w(0), 1);
    // Blocks until the test's `wake_shared` (the word stays 1: only a wake ends it).
    let woken = memobj::wait_shared(w(0), 1, 20_000_000_000);
    w(6).store(u32::from(woken.is_ok()), Ordering::SeqCst);
    w(5).store(
        u32::from(w(4).load(Ordering::SeqCst) == 0x2222),
        Ordering::SeqCst,
    );
    w(9).store(
        u32::from(SECRET.load(Ordering::SeqCst) == 0x77),
        Ordering::SeqCst,
    );
    w(0).store(3, Ordering::SeqCst);
    let _ = memobj::wake_shared(w(0), 1);
    0
}
