//! `vproc_child`: the child the `vproc` test kills. One sting virtual processor with
//! upcalls and four spares; two threads block in receives that never complete (Block
//! upcalls), and the main thread tells the parent (its bootstrap right) how many blocks
//! the runtime counted, then spins until it is killed.
#![no_std]
#![no_main]

use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_rt::ipc::{msg_buf, port_allocate};
use sting::{Config, Kind};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    let to = baton_rt::start::bootstrap();
    let Ok(mine) = port_allocate(0) else {
        return 1;
    };
    sting::run(
        Config::new(1, Kind::Fifo).kernel_upcalls(4),
        move || -> () {
            for _ in 0..2 {
                sting::fork(move || {
                    let mut buf = [0u8; HEADER_SIZE + 8];
                    let _ = msg_buf(&mut buf, MSG_RECEIVE, mine, baton_abi::FOREVER);
                });
            }
            while sting::stats().kernel_blocks < 2 {
                sting::yield_now();
            }
            let mut buf = [0u8; HEADER_SIZE + 8];
            let h = MsgHeader {
                bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
                size: (HEADER_SIZE + 8) as u32,
                dest: to,
                id: 0x7670_0002,
                ..MsgHeader::default()
            };
            buf[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
            buf[HEADER_SIZE..].copy_from_slice(&sting::stats().kernel_blocks.to_le_bytes());
            let _ = msg_buf(&mut buf, MSG_SEND, 0, baton_abi::FOREVER);
            loop {
                sting::yield_now();
            }
        },
    );
    0
}
