//! `iso`: address-space isolation. Two tasks run this same program, so their statics sit
//! at the same virtual addresses; each fills an array in `.bss` and a word in `.data` with a
//! pattern derived from its task id, then yields 200 times and checks after each yield that
//! its pattern is intact. If the two tasks shared memory, the other task's pattern would
//! show through. It also checks that the kernel's direct map is not readable through
//! `debug_write`.
//!
//! Verdict: `TEST PASS isolation (task N)`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use baton_abi::Error;
use baton_rt::{debug_write_raw, println, yield_now};

baton_rt::entry!(main);

const WORDS: usize = 1024;
const ROUNDS: usize = 200;
/// What `.data` holds before anybody writes it.
const DATA_INITIAL: u64 = 0x1234_5678_9abc_def0;
/// Start of the kernel's direct map: never user-accessible.
const KERNEL_ADDRESS: u64 = 0xffff_8000_0000_0000;

/// Zero-initialised, so in `.bss`.
static ARRAY: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];
/// Non-zero initialised, so in `.data`.
static DATA_WORD: AtomicU64 = AtomicU64::new(DATA_INITIAL);

/// The value word `index` holds in task `task_id`'s copy: different tasks differ in every
/// word (multiplying by an odd constant is a bijection), and no word is zero in practice.
fn pattern(task_id: u64, index: usize) -> u64 {
    task_id.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (index as u64).wrapping_mul(0x0000_0100_0000_01b3)
        ^ 0xa5a5_a5a5_a5a5_a5a5
}

/// Finds the first word that does not hold this task's pattern.
fn check(task_id: u64) -> Result<(), (usize, u64)> {
    for (index, word) in ARRAY.iter().enumerate() {
        let value = word.load(Relaxed);
        if value != pattern(task_id, index) {
            return Err((index, value));
        }
    }
    Ok(())
}

fn main(task_id: u64) -> i32 {
    println!(
        "task {task_id}: array at {:p}, data word at {:p}",
        ARRAY.as_ptr(),
        &DATA_WORD
    );

    let initial = DATA_WORD.load(Relaxed);
    if initial != DATA_INITIAL {
        println!(
            "TEST FAIL isolation: .data word starts as {initial:#x}, expected {DATA_INITIAL:#x}"
        );
        return 1;
    }
    if let Some(index) = ARRAY.iter().position(|w| w.load(Relaxed) != 0) {
        println!("TEST FAIL isolation: .bss word {index} is not zero at start");
        return 1;
    }

    let data_pattern = pattern(task_id, usize::MAX);
    DATA_WORD.store(data_pattern, Relaxed);
    for (index, word) in ARRAY.iter().enumerate() {
        word.store(pattern(task_id, index), Relaxed);
    }

    for round in 0..ROUNDS {
        yield_now();
        if let Err((index, value)) = check(task_id) {
            println!(
                "TEST FAIL isolation: task {task_id} round {round}: word {index} is {value:#x}, expected {:#x}",
                pattern(task_id, index)
            );
            return 1;
        }
        let data = DATA_WORD.load(Relaxed);
        if data != data_pattern {
            println!(
                "TEST FAIL isolation: task {task_id} round {round}: .data word is {data:#x}, expected {data_pattern:#x}"
            );
            return 1;
        }
    }

    match debug_write_raw(KERNEL_ADDRESS, 8) {
        Err(Error::BadAddress) => {}
        other => {
            println!(
                "TEST FAIL isolation: debug_write of kernel address {KERNEL_ADDRESS:#x} gave {other:?}, expected BadAddress"
            );
            return 1;
        }
    }

    println!("TEST PASS isolation (task {task_id})");
    0
}
