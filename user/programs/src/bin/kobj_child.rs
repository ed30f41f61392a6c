//! `kobj_child`: the task the `kobj` test acts on (spawned by it, never alone). It makes a
//! port of its own, says hello to its bootstrap port (the test's), and waits on its port
//! until it is terminated through its task port.
#![no_std]
#![no_main]

use baton_rt::ipc::{port_allocate, Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND};
use baton_rt::{println, start::bootstrap, FOREVER};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    let hello = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: bootstrap(),
        id: 1,
        ..MsgHeader::default()
    };
    let waited = IpcBuffer::new().and_then(|mut buf| {
        let port = port_allocate(0)?;
        buf.set(hello, &[], &[])?;
        buf.msg(MSG_SEND, 0, FOREVER)?;
        buf.msg(MSG_RECEIVE, port, FOREVER)
    });
    println!("TEST FAIL kobj_child: woke up: {waited:?}");
    1
}
