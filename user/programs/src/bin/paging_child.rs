//! `paging_child`: the memory-hungry side of the `paging` test (`docs/vm.md`, "Paging").
//!
//! - `paging_child work <pages>`: writes every word of a region of `<pages>` pages (a
//!   pattern of page, word and round), reads it all back, writes it again and reads it
//!   again, and has the kernel copy into a page that was paged out (a `vm_query` whose
//!   result lands there); every byte must be intact, and its own page-out and page-in
//!   counters must have moved. Exits 0, or prints `TEST FAIL`.
//! - `paging_child hog <pages>`: touches pages until the kernel has no memory left to
//!   give it: it is killed by the no-memory fault.
//! - `paging_child lose <pages>`: writes its pages, says so with a message to its
//!   bootstrap right, waits until the default pager is gone
//!   (its store is no longer offered), then reads them: the pages paged out died with the
//!   pager, and the first read of one kills it with a pager fault.
//! - `paging_child read <pages>`: as `lose`, but reads at once: its first page-in is
//!   under way when the parent kills the pager or the disk driver, and a pager fault
//!   kills it.
//! - `paging_child touch <pages>`: writes its pages once and exits 0 (memory pressure for
//!   the `pagewait` test).
//! - `paging_child wire <pages>`: wires its pages one by one until the kernel refuses
//!   (user memory is full but for the reserve), tells its bootstrap right how many, and
//!   waits to be killed (memory pressure nothing can relieve, for `fs_evict`).
//! - `paging_child nop`: exits at once (a warm-up).
#![no_std]
#![no_main]

use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE};
use baton_rt::ipc::{msg_buf, MSG_SEND};
use baton_rt::paging;
use baton_rt::vm::{self, PROT_RW};
use baton_rt::FOREVER;
use baton_rt::{env, println};

baton_rt::entry!(main);

const P: u64 = 4096;
const WORDS: u64 = P / 8;

/// The word `j` of page `i` in round `round`.
const fn pattern(i: u64, j: u64, round: u64) -> u64 {
    (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ j.wrapping_mul(0xc2b2_ae3d_27d4_eb4f))
        .wrapping_add(round)
        .rotate_left((i % 63) as u32)
}

fn word(base: u64, i: u64, j: u64) -> *mut u64 {
    (base + i * P + j * 8) as *mut u64
}

fn write_all(base: u64, pages: u64, round: u64) {
    for i in 0..pages {
        for j in 0..WORDS {
            // SAFETY: the word lies in the region this program allocated read-write.
            unsafe { word(base, i, j).write_volatile(pattern(i, j, round)) };
        }
    }
}

/// The pages whose contents are not what round `round` wrote.
fn bad_pages(base: u64, pages: u64, round: u64) -> u64 {
    let mut bad = 0;
    for i in 0..pages {
        let mut sum_seen = 0u64;
        let mut sum_want = 0u64;
        for j in 0..WORDS {
            // SAFETY: as in `write_all`.
            let v = unsafe { word(base, i, j).read_volatile() };
            let w = pattern(i, j, round);
            sum_seen = sum_seen.rotate_left(1) ^ v;
            sum_want = sum_want.rotate_left(1) ^ w;
            if v != w {
                sum_seen ^= 1 << 63;
            }
        }
        if sum_seen != sum_want {
            bad += 1;
        }
    }
    bad
}

fn main(_task_id: u64) -> i32 {
    let mut args = env::args().skip(1);
    let mode = args.next().unwrap_or("nop");
    let pages = args.next().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let Ok(base) = (if pages > 0 {
        vm::allocate(None, pages * P, PROT_RW)
    } else {
        Ok(0)
    }) else {
        println!("TEST FAIL paging_child: vm_allocate of {pages} pages");
        return 1;
    };
    match mode {
        "work" => work(base, pages),
        "wire" => {
            let mut n = 0;
            while n < pages && vm::wire(base + n * P, P).is_ok() {
                n += 1;
            }
            let mut msg = [0u8; HEADER_SIZE + 8];
            let h = MsgHeader {
                bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
                size: msg.len() as u32,
                dest: baton_rt::start::bootstrap(),
                id: 1,
                ..MsgHeader::default()
            };
            msg[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
            msg[HEADER_SIZE..].copy_from_slice(&n.to_le_bytes());
            if msg_buf(&mut msg, MSG_SEND, 0, FOREVER).is_err() {
                println!("TEST FAIL paging_child: could not tell its parent");
                return 1;
            }
            loop {
                let _ = baton_rt::sleep_ns(1_000_000_000);
            }
        }
        "touch" => {
            write_all(base, pages, 1);
            0
        }
        "hog" => {
            for i in 0..pages {
                // SAFETY: as in `write_all`.
                unsafe { word(base, i, 0).write_volatile(i) };
            }
            println!("TEST FAIL paging_child: touched {pages} pages and was not stopped");
            1
        }
        "lose" | "read" => {
            write_all(base, pages, 7);
            // Tell the parent (its bootstrap right) that the writing is done.
            let mut msg = [0u8; HEADER_SIZE];
            let h = MsgHeader {
                bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
                size: HEADER_SIZE as u32,
                dest: baton_rt::start::bootstrap(),
                id: 1,
                ..MsgHeader::default()
            };
            msg.copy_from_slice(&h.to_bytes());
            if msg_buf(&mut msg, MSG_SEND, 0, FOREVER).is_err() {
                println!("TEST FAIL paging_child: could not tell its parent");
                return 1;
            }
            while mode == "lose" && paging::system_stats().is_ok_and(|s| s.store_slots != 0) {
                let _ = baton_rt::sleep_ns(5_000_000);
            }
            let bad = bad_pages(base, pages, 7);
            println!("TEST FAIL paging_child: read {pages} pages ({bad} bad) after its pager died");
            1
        }
        _ => 0,
    }
}

fn work(base: u64, pages: u64) -> i32 {
    let mut ok = true;
    for round in 1..=2 {
        write_all(base, pages, round);
        let bad = bad_pages(base, pages, round);
        if bad == 0 {
            println!("ok: paging_child: round {round}: {pages} pages written and read back intact");
        } else {
            println!("TEST FAIL paging_child: round {round}: {bad} of {pages} pages wrong");
            ok = false;
        }
    }
    // The first page was paged out long ago: a kernel copy into it waits for its page-in.
    let out = base;
    let q = vm::query_raw(base, out);
    // SAFETY: `out` is the region's first word, which the kernel just wrote.
    let start = unsafe { (out as *const u64).read_volatile() };
    if q.is_ok() && start == base {
        println!("ok: paging_child: a system call wrote into a page that was paged out");
    } else {
        println!("TEST FAIL paging_child: vm_query into a paged-out page: {q:?}, {start:#x}");
        ok = false;
    }
    match paging::stats() {
        Ok(s) if s.pageouts > 0 && s.pageins > 0 => {
            println!("ok: paging_child: its own counters moved");
            println!(
                "paging_child: {} pages: {} page-outs, {} page-ins",
                pages, s.pageouts, s.pageins
            );
        }
        r => {
            println!("TEST FAIL paging_child: its counters: {r:?}");
            ok = false;
        }
    }
    if ok {
        0
    } else {
        1
    }
}
