//! `strand_peer`: the other task of the `strand` test. Its bootstrap right is a send right
//! to its parent's port. It runs a sting runtime with the kernel's upcalls in which one
//! thread sleeps in the kernel while another counts, and sends its parent how many Block
//! upcalls its runtime took: the parent has a `Strand.Block` handler that vetoes its own
//! processors' blocks installed meanwhile, which must not reach this task's.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_SEND};
use baton_rt::ipc::msg_buf;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicU64};
use sting::{Config, Kind};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    let to = baton_rt::start::bootstrap();
    let ((), st) = sting::run(Config::new(1, Kind::Fifo).kernel_upcalls(2), || {
        let count = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (c, d) = (count.clone(), done.clone());
        let busy = sting::fork(move || {
            while !d.load(Acquire) {
                c.fetch_add(1, Relaxed);
                sting::yield_now();
            }
        });
        let sleeper = sting::fork(|| {
            let _ = baton_rt::sys::sleep_ns(20_000_000);
        });
        let _ = sleeper.value();
        done.store(true, Release);
        let _ = busy.value();
    });
    let mut buf = [0u8; HEADER_SIZE + 8];
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size: (HEADER_SIZE + 8) as u32,
        dest: to,
        reply: 0,
        id: 0x5354_0100,
    };
    buf[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    buf[HEADER_SIZE..].copy_from_slice(&st.kernel_blocks.to_le_bytes());
    i32::from(msg_buf(&mut buf, MSG_SEND, 0, baton_abi::FOREVER).is_err())
}
