//! `args_test`: a program's arguments and environment through its start message
//! (`baton_abi::start`, `baton_rt::env`). Starts `echo` with arguments and an environment
//! (the test checks what it prints), and checks that bad start blocks are refused with an
//! error and start nothing: unreadable, malformed, too large, strings with zero bytes.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec;
use baton_abi::start::{START_DATA_MAX, START_LEN_BYTES};
use baton_rt::sys::{spawn_args, spawn_start_raw};
use baton_rt::{env, println, Error};

baton_rt::entry!(main);

fn check(what: &str, ok: bool) -> bool {
    if ok {
        println!("ok: {what}");
    } else {
        println!("TEST FAIL {what}");
    }
    ok
}

fn main(_task_id: u64) -> i32 {
    let mut good = true;
    good &= check(
        "a boot task has no arguments and no environment",
        env::args().count() == 0 && env::vars().count() == 0,
    );
    good &= check(
        "echo starts with arguments and an environment",
        spawn_args(
            "echo",
            0,
            &["echo", "-e", "hello", "wide world"],
            &[("LANG", "C"), ("EMPTY", "")],
        )
        .is_ok(),
    );
    good &= check(
        "a zero byte in an argument is refused",
        spawn_args("echo", 0, &["echo", "a\0b"], &[]) == Err(Error::InvalidArgument),
    );
    let long = vec![b'x'; START_DATA_MAX];
    let long = core::str::from_utf8(&long).unwrap_or("");
    good &= check(
        "arguments larger than a message are refused",
        spawn_args("echo", 0, &["echo", long], &[]) == Err(Error::TooLarge),
    );
    good &= check(
        "an unreadable start block is refused",
        spawn_start_raw("echo", 0, 0x10) == Err(Error::BadAddress)
            && spawn_start_raw("echo", 0, 0xffff_8000_0000_0000) == Err(Error::BadAddress),
    );
    let mut block = [0u8; START_LEN_BYTES + 16];
    block[..START_LEN_BYTES].copy_from_slice(&11u64.to_le_bytes());
    block[START_LEN_BYTES..START_LEN_BYTES + 11].copy_from_slice(b"\x01\0\0\0\0\0\0\0abc");
    good &= check(
        "a malformed start message is refused",
        spawn_start_raw("echo", 0, block.as_ptr() as u64) == Err(Error::BadFormat),
    );
    block[..START_LEN_BYTES].copy_from_slice(&(START_DATA_MAX as u64 + 1).to_le_bytes());
    good &= check(
        "a start message longer than the limit is refused",
        spawn_start_raw("echo", 0, block.as_ptr() as u64) == Err(Error::TooLarge),
    );
    if good {
        println!("TEST PASS args_test");
        0
    } else {
        1
    }
}
