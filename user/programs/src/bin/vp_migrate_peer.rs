//! `vp_migrate_peer`: the client of the `vp_migrate` test (spawned by it, never started
//! alone). Its bootstrap right is a send right to the test's migrating server: it calls
//! it once from a plain thread, then makes itself the carrier of a virtual processor of
//! its own and calls it again, then checks its processor is still its own (`vp_take`
//! answers 0) and ends it.
#![no_std]
#![no_main]

use baton_abi::vproc::{VpConfig, VpEvent, UPCALL_STACK_MIN};
use baton_rt::ipc::{port_allocate, Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND};
use baton_rt::vproc::{vp_create, vp_destroy, vp_take};
use baton_rt::{println, start::bootstrap, Error, FOREVER};

baton_rt::entry!(main);

/// Never entered: this processor has no spares, so no upcall comes.
extern "C" fn never() {
    loop {
        core::hint::spin_loop();
    }
}

fn call(buf: &mut IpcBuffer, server: u64, reply: u64, id: u64) -> Result<(), Error> {
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: server,
        reply,
        id,
        ..MsgHeader::default()
    };
    buf.set(h, &[], &[])?;
    buf.msg(MSG_SEND | MSG_RECEIVE, reply, FOREVER)
}

fn run() -> Result<(), Error> {
    let server = bootstrap();
    let reply = port_allocate(0)?;
    let mut buf = IpcBuffer::new()?;
    call(&mut buf, server, reply, 1)?;
    let stack = [0u8; 2 * UPCALL_STACK_MIN as usize + 16];
    let lo = (core::hint::black_box(&stack).as_ptr() as u64 + 15) & !15;
    let vp = vp_create(&VpConfig {
        entry: never as *const () as u64,
        upcall_lo: lo,
        upcall_hi: lo + 2 * UPCALL_STACK_MIN,
        ..VpConfig::default()
    })?;
    call(&mut buf, server, reply, 2)?;
    let mut events = [VpEvent::default(); 2];
    let taken = vp_take(&mut events)?;
    vp_destroy(vp)?;
    if taken != 0 {
        return Err(Error::InvalidArgument);
    }
    Ok(())
}

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL vp_migrate_peer: {}", e.name());
            1
        }
    }
}
