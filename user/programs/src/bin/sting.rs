//! `sting`: the Sting runtime's behaviour on Baton (`sting::selftest`, the same scenarios
//! the host's `cargo test -p sting` runs on `std` threads), with one virtual processor per
//! CPU, each a kernel thread of this task.
//!
//! For each scenario it prints `ok: <name>: <what it saw>`, or `TEST FAIL sting: <name>:
//! <why>` and stops; at the end `TEST PASS sting`. The scenarios: every thread state and
//! transition, absorption (no switch), TCB pool reuse counted (20,000 threads), each policy's
//! order, work stealing under imbalance, migration, mutex, condition variable, barrier,
//! suspension, termination, groups, ports (shallow and deep copy, active messages), private
//! and shared areas, and the four applications checked against sequential runs.
#![no_std]
#![no_main]

use baton_rt::{println, stats};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    let cpus = match stats() {
        Ok(s) => s.cpus as usize,
        Err(e) => {
            println!("TEST FAIL sting: stats: {}", e.name());
            return 1;
        }
    };
    let vps = cpus.max(1);
    println!("sting: {vps} virtual processors on {cpus} CPUs");
    for (name, scenario) in sting::selftest::ALL {
        match scenario(vps) {
            Ok(what) => println!("ok: {name}: {what}"),
            Err(why) => {
                println!("TEST FAIL sting: {name}: {why}");
                return 1;
            }
        }
    }
    println!("TEST PASS sting");
    0
}
