//! Accent's null program (Table 3-12): with no arguments it initialises itself and exits.
//! The task-creation test (`taskmake`) also runs it with a mode in its arguments:
//!
//! - `args ...`: prints its arguments and environment;
//! - `data N`: checks that its data segment (mapped copy-on-write from the boot image)
//!   holds what the program was built with, writes `N` over all of it, waits a little
//!   while another instance does the same, and checks that it still sees only its own
//!   writes; a mismatch is `TEST FAIL`;
//! - `sleep`: waits 300 ms, then exits (a task that is running while its creator tries
//!   the task-creation calls on it again);
//! - `make`: makes a task and leaves it half made, then exits (its creator's end must end
//!   it).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::string::String;
use core::sync::atomic::{AtomicU64, Ordering};

use baton_rt::{env, println};

baton_rt::entry!(main);

/// Words of the data segment that the `data` mode checks: 6 pages, so that whole pages
/// of it are mapped straight from the boot image.
const WORDS: usize = 3 * 1024;

/// What word `i` of [`DATA`] holds in the program's file.
const fn original(i: usize) -> u64 {
    0x5eed_0000_0000_0000 | (i as u64).wrapping_mul(0x9e37_79b9)
}

const fn initial() -> [AtomicU64; WORDS] {
    let mut a = [const { AtomicU64::new(0) }; WORDS];
    let mut i = 0;
    while i < WORDS {
        a[i] = AtomicU64::new(original(i));
        i += 1;
    }
    a
}

/// Initialised data (in `.data`, so in the program's file).
static DATA: [AtomicU64; WORDS] = initial();

fn main(_task_id: u64) -> i32 {
    let mut args = env::args();
    let _name = args.next();
    match args.next() {
        None => 0,
        Some("args") => {
            let mut line = String::new();
            for a in env::args() {
                line.push_str(a);
                line.push('|');
            }
            for (k, v) in env::vars() {
                line.push_str(k);
                line.push('=');
                line.push_str(v);
                line.push('|');
            }
            println!("task_null: args {line}");
            0
        }
        Some("data") => {
            let mark: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            data(mark)
        }
        Some("sleep") => {
            let _ = baton_rt::sleep_ns(300_000_000);
            0
        }
        Some("make") => match baton_rt::task::create(0, 0) {
            Ok(t) => {
                let _ = baton_rt::task::map_program(t, "task_null");
                let _ = baton_rt::task::init_thread(t, 0, 0);
                0
            }
            Err(e) => {
                println!("TEST FAIL task_null: make: {}", e.name());
                1
            }
        },
        Some(other) => {
            println!("TEST FAIL task_null: unknown mode {other}");
            1
        }
    }
}

fn data(mark: u64) -> i32 {
    let bad = (0..WORDS).find(|&i| DATA[i].load(Ordering::Relaxed) != original(i));
    if let Some(i) = bad {
        println!("TEST FAIL task_null: data {mark}: word {i} is not the program's");
        return 1;
    }
    for w in DATA.iter() {
        w.store(mark, Ordering::Relaxed);
    }
    let _ = baton_rt::sleep_ns(30_000_000);
    if DATA.iter().any(|w| w.load(Ordering::Relaxed) != mark) {
        println!("TEST FAIL task_null: data {mark}: another task's write is visible");
        return 1;
    }
    println!("task_null: data {mark} ok");
    0
}
