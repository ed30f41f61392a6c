//! `echo`: prints its arguments, separated by spaces, as a command of a shell does. With
//! `-e` first it also prints its environment, one `NAME=VALUE` per line.
//!
//! A program a person can run from the shell (`run echo hello world`), and the example of
//! reading arguments and the environment (`baton_rt::env`, `docs/programs.md`).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;
use baton_rt::{env, println};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    // The first argument is the program's name.
    let mut args: Vec<&str> = env::args().skip(1).collect();
    let show_env = args.first() == Some(&"-e");
    if show_env {
        args.remove(0);
    }
    let mut line = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            line.push(' ');
        }
        line.push_str(a);
    }
    println!("{line}");
    if show_env {
        for (name, value) in env::vars() {
            println!("{name}={value}");
        }
    }
    0
}
