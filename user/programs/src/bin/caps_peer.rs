//! `caps_peer`: spawned by `caps` with no rights. Every debugging or benchmark call that
//! needs the host-privilege right is `Denied`, and so is a floor cross-address-space call
//! to the partner `caps` registered (`floor_partner`, which named `caps` as its caller):
//! this task tries every task id below its own, and exactly one must answer `Denied`,
//! none `Ok`.
#![no_std]
#![no_main]

use baton_rt::check::Failed;
use baton_rt::floor::{xas_call, xas_register};
use baton_rt::start::{bootstrap, host_priv};
use baton_rt::{debug_block_process_model, Error};

baton_rt::entry!(main);

const TEST: &str = "caps_peer";
macro_rules! check { ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) } }

fn main(me: u64) -> i32 {
    baton_rt::check::finish(TEST, run(me))
}

fn run(me: u64) -> Result<(), Failed> {
    check!(
        host_priv() == 0 && bootstrap() == 0,
        "a spawned task has no host-privilege right"
    );
    // Names a right could have in a fresh name space: none is the host-privilege right.
    for name in [0u64, 1, 2, 3, 0x1_0000_0001] {
        check!(
            debug_block_process_model(0, 7, name) == Err(Error::Denied),
            "debug_block_process_model with name {name:#x}: Denied"
        );
    }
    check!(
        xas_register(0x40_1000, 0x8000, 0, 0) == Err(Error::Denied),
        "floor_xas_register without the right: Denied"
    );
    let mut denied = 0;
    for t in 1..me {
        match xas_call(t, 1) {
            Err(Error::Denied) => denied += 1,
            Err(Error::NotFound) | Err(Error::Interrupted) => {}
            other => {
                check!(false, "a floor call to task {t}: {other:?}");
            }
        }
    }
    check!(
        denied == 1,
        "a floor call to a partner that named another caller: Denied ({denied} of {} tasks)",
        me - 1
    );
    Ok(())
}
