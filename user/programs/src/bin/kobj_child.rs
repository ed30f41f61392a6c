//! `kobj_child`: the task the `kobj` test acts on (spawned by it, never alone). It waits
//! on a port of its own until it is terminated through its task port.
#![no_std]
#![no_main]

use baton_rt::ipc::{port_allocate, IpcBuffer, MSG_RECEIVE};
use baton_rt::{println, FOREVER};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    let waited = IpcBuffer::new()
        .and_then(|mut buf| port_allocate(0).and_then(|p| buf.msg(MSG_RECEIVE, p, FOREVER)));
    println!("TEST FAIL kobj_child: woke up: {waited:?}");
    1
}
