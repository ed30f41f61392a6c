//! `init`, the first user program: greets, reports the time and the TSC at start, and
//! lists the boot modules.
//!
//! Verdict: `TEST PASS greeting` if at least one module was listed and one of them is
//! `init` itself.
#![no_std]
#![no_main]

use baton_abi::Error;
use baton_rt::{clock_ns, module_info, println, rdtsc};

baton_rt::entry!(main);

/// Stop listing after this many modules even if the kernel never says `NotFound`.
const MAX_MODULES: usize = 256;

fn main(_task_id: u64) -> i32 {
    println!("Hello from Baton");

    let ns = clock_ns();
    println!(
        "time since reset: {}.{:03} ms",
        ns / 1_000_000,
        (ns / 1_000) % 1_000
    );
    println!(
        "instructions since reset (TSC under -icount shift=0): {}",
        rdtsc()
    );

    println!("boot modules:");
    let mut listed = 0usize;
    let mut saw_init = false;
    let mut failure = None;
    for index in 0..MAX_MODULES {
        match module_info(index) {
            Ok(info) => {
                println!("  {} ({} bytes)", info.name(), info.size);
                listed += 1;
                saw_init |= info.name() == "init";
            }
            Err(Error::NotFound) => break,
            Err(e) => {
                failure = Some((index, e));
                break;
            }
        }
    }

    if let Some((index, e)) = failure {
        println!(
            "TEST FAIL greeting: module_info({index}) failed: {}",
            e.name()
        );
        1
    } else if listed == 0 {
        println!("TEST FAIL greeting: no boot modules listed");
        1
    } else if !saw_init {
        println!("TEST FAIL greeting: no boot module named init");
        1
    } else {
        println!("TEST PASS greeting");
        0
    }
}
