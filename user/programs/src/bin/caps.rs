//! `caps`: the host-privilege right (`baton_abi::kobject::HOST_PRIV_BASE`) guards the
//! debugging and benchmark calls. Booted with `priv=caps`, it checks that the kernel gave
//! it the right, that `debug_block_process_model` works with it and is `Denied` without
//! it (0, another port's right, a receive right, a name that denotes nothing), that a
//! message to the port is answered `NotSupported`, and that the right passed as a
//! bootstrap right lets a spawned `floor_partner` register for this task, which then calls
//! it. It spawns `caps_peer` (no right), which must be refused everything, including a
//! call to that partner, and a second `caps`, which the kernel must not give the right
//! although its module is named on the command line (only boot tasks get it).
#![no_std]
#![no_main]

use baton_abi::process_model_check;
use baton_rt::check::Failed;
use baton_rt::floor::{xas_call, xas_register};
use baton_rt::ipc::{cap_drop, port_allocate, port_make_send, IpcBuffer};
use baton_rt::kobject::{call, task_port, HOST_PRIV_BASE, TASK_TERMINATE};
use baton_rt::start::{bootstrap, host_priv};
use baton_rt::{debug_block_process_model, sleep_ns, spawn, spawn_with, yield_now, Error};

baton_rt::entry!(main);

const TEST: &str = "caps";
macro_rules! check { ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) } }
fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// `floor_partner`'s `PARTNER_SECRET`, which its entry adds to the argument.
const SECRET: u64 = 0x5ec2_e700_0000_0000;
/// Seed of the process-model checks.
const SEED: u64 = 0x1357_9bdf_2468_ace0;
/// Kernel replies come well within this.
const SOON: u64 = 1_000_000_000;

fn main(me: u64) -> i32 {
    if host_priv() == 0 {
        return baton_rt::check::finish("caps child", spawned(me));
    }
    baton_rt::check::finish(TEST, run(me))
}

/// The `caps` this task spawned: no right from the kernel, whatever its module's name.
fn spawned(_me: u64) -> Result<(), Failed> {
    let test = "caps child";
    let r = debug_block_process_model(0, SEED, 0);
    if host_priv() != 0 || bootstrap() != 0 || r != Err(Error::Denied) {
        baton_rt::println!("TEST FAIL {test}: a spawned caps has a right ({r:?})");
        return Err(Failed);
    }
    baton_rt::println!("ok: a spawned caps gets no host-privilege right: Denied");
    Ok(())
}

/// Waits until task `id` has ended (`task_port` no longer finds it).
fn wait_ended(id: u64) -> Result<(), Failed> {
    for _ in 0..10_000 {
        match task_port(id) {
            Err(Error::NotFound) => return Ok(()),
            Ok(port) => {
                let _ = cap_drop(port);
            }
            Err(e) => {
                check!(false, "task_port({id}): {e:?}");
            }
        }
        let _ = sleep_ns(1_000_000);
    }
    check!(false, "task {id} ended");
    Ok(())
}

fn run(_me: u64) -> Result<(), Failed> {
    let hp = host_priv();
    check!(
        hp != 0,
        "a boot task named by priv= gets the host-privilege right"
    );
    let r = debug_block_process_model(1_000_000, SEED, hp);
    check!(
        r == Ok(process_model_check(SEED)),
        "debug_block_process_model with the right blocks and returns ({r:?})"
    );
    check!(
        debug_block_process_model(1_000_000, SEED, 0) == Err(Error::Denied),
        "debug_block_process_model without a right: Denied"
    );
    let port = must("port", port_allocate(0))?;
    let send = must("make_send", port_make_send(port, false))?;
    check!(
        debug_block_process_model(0, SEED, send) == Err(Error::Denied),
        "debug_block_process_model with a send right to another port: Denied"
    );
    check!(
        debug_block_process_model(0, SEED, port) == Err(Error::Denied),
        "debug_block_process_model with a receive right: Denied"
    );
    check!(
        debug_block_process_model(0, SEED, 0xdead_beef) == Err(Error::Denied),
        "debug_block_process_model with a name that denotes nothing: Denied"
    );
    let _ = cap_drop(send);

    // The port is a kernel object with no operations yet.
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let r = call(&mut buf, hp, port, HOST_PRIV_BASE, &[], SOON).map(|_| ());
    check!(
        r == Err(Error::NotSupported),
        "a message to the host-privilege port: NotSupported ({r:?})"
    );

    // A second `caps`, spawned: the kernel gives it nothing.
    let child = must("spawn caps", spawn("caps"))?;

    // The right, passed on, lets a partner register for this task.
    let partner = must("spawn floor_partner", spawn_with("floor_partner", hp))?;
    let mut first = xas_call(partner, 1);
    let mut tries = 0;
    while first == Err(Error::NotFound) && tries < 1000 {
        yield_now();
        let _ = sleep_ns(1_000_000);
        first = xas_call(partner, 1);
        tries += 1;
    }
    while first == Err(Error::Interrupted) {
        first = xas_call(partner, 1);
    }
    check!(
        first == Ok(1 + SECRET),
        "a partner registered with a passed-on right answers its spawner ({first:?})"
    );
    // An unprivileged task: refused everything, the partner included.
    let peer = must("spawn caps_peer", spawn("caps_peer"))?;
    wait_ended(peer)?;
    wait_ended(child)?;
    check!(
        xas_call(partner, 2) == Ok(2 + SECRET) || xas_call(partner, 2) == Ok(2 + SECRET),
        "the partner still answers its spawner"
    );
    let pport = must("task_port", task_port(partner))?;
    must(
        "TASK_TERMINATE",
        call(&mut buf, pport, port, TASK_TERMINATE, &[], SOON),
    )?;
    let _ = cap_drop(pport);
    let _ = cap_drop(port);
    // Unused, but a register with no right must still be refused here too.
    check!(
        xas_register(0x40_1000, 0x8000, 0, 0) == Err(Error::Denied),
        "floor_xas_register without a right: Denied"
    );
    Ok(())
}
