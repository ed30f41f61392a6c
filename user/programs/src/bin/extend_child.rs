//! `extend_child`: spawned by `extend`. Installs extensions and ends without removing or
//! releasing anything: the kernel must take them all back at its end (its handlers, its
//! domains, its module and the module's charge).
#![no_std]
#![no_main]

use baton_abi::spin::EVENT_SYSCALL;
use baton_rt::println;
use baton_rt::spin;

baton_rt::entry!(main);

static NULL_SYSCALL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/extensions/wasm32-unknown-unknown/release/null_syscall.wasm"
));

fn main(_task_id: u64) -> i32 {
    let run = || -> Result<u64, baton_rt::Error> {
        let m = spin::create(NULL_SYSCALL)?;
        let task = spin::import("baton.task")?;
        let console = spin::import("baton.console")?;
        spin::resolve(task, m)?;
        spin::resolve(console, m)?;
        spin::install(m, "sum", EVENT_SYSCALL, 0, 0x1000, 0)?;
        let b = spin::import("builtin.null_syscall")?;
        spin::install(b, "null", EVENT_SYSCALL, 0, 0x1001, 0)?;
        Ok(spin::call(0x1000, [2, 3, 4, 0]) + spin::call(0x1001, [0; 4]))
    };
    match run() {
        Ok(9) => {
            println!("extensions installed; ending with them");
            0
        }
        other => {
            println!("extend_child: unexpected {other:?}");
            1
        }
    }
}
