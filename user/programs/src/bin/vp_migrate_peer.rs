//! `vp_migrate_peer`: the client of the `vp_migrate` test (spawned by it, never started
//! alone). Its bootstrap right is a send right to the test's migrating server: it calls
//! it once from a plain thread, then makes itself the carrier of a virtual processor of
//! its own and calls it again, then checks its processor is still its own (`vp_take`
//! answers 0) and ends it. Then a second thread makes a call that waits in the server;
//! while it is there, this thread reads it through its thread port (`THREAD_INFO`: this
//! task and its registers here, not the server's) and sets its exception port, releases
//! the call with a call of its own, and receives the exception of the fault the thread
//! makes once back (`ok:` lines for both), then exits.
#![no_std]
#![no_main]

use baton_abi::vproc::{VpConfig, VpEvent, UPCALL_STACK_MIN};
use baton_rt::exception::exception_port_set;
use baton_rt::ipc::{port_allocate, Disposition, IpcBuffer, MsgHeader, MSG_RECEIVE, MSG_SEND};
use baton_rt::kobject::{thread_port, THREAD_BLOCKED, THREAD_INFO};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::vproc::{vp_create, vp_destroy, vp_take};
use baton_rt::{println, start::bootstrap, Error, FOREVER};

static STACKS: StackPool<1, 16384> = StackPool::new();

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
    let stack = STACKS.take().ok_or(Error::NoMemory)?;
    // Where the holder's stack lies (its `rsp` at home is there).
    let lo = stack.as_ptr() as u64;
    let range = lo..lo + stack.len() as u64;
    let tid = spawn(stack, holder, server)?;
    let tport = thread_port(tid)?;
    let exc = port_allocate(0)?;
    // Until it blocks (in the server's wait: it blocks nowhere else), up to 10 s.
    let mut info = baton_rt::kobject::call(&mut buf, tport, reply, THREAD_INFO, &[], FOREVER);
    let mut spins = 0;
    while info.is_ok_and(|(r, _)| r[2] != THREAD_BLOCKED) && spins < 10_000 {
        let _ = baton_rt::sleep_ns(1_000_000);
        info = baton_rt::kobject::call(&mut buf, tport, reply, THREAD_INFO, &[], FOREVER);
        spins += 1;
    }
    let (r, _) = info?;
    let (sp, mine) = (r[4], range.contains(&r[4]));
    if r[1] == task_id() && mine {
        println!("ok: a thread's port reads its own task and registers while it waits in a server");
    } else {
        println!(
            "TEST FAIL vp_migrate_peer: THREAD_INFO of a thread in a server read task {} rsp {sp:#x} (this task is {})",
            r[1],
            task_id()
        );
    }
    exception_port_set(tid, exc)?;
    call(&mut buf, server, reply, 4)?;
    // The thread faults once back: its exception comes here.
    buf.msg(MSG_RECEIVE, exc, 10_000_000_000)?;
    let raised = baton_rt::exception::info(&buf);
    if raised.is_some_and(|e| e.thread == tid) {
        println!("ok: an exception port set for a thread while it waits in a server gets its fault once back");
    } else {
        println!("TEST FAIL vp_migrate_peer: no exception from the thread");
    }
    // Ends the faulting thread with the task.
    baton_rt::exit(0)
}

/// This task's id (from `main`).
static TASK: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
fn task_id() -> u64 {
    TASK.load(core::sync::atomic::Ordering::Relaxed)
}

/// The second thread: a call that waits in the server, then a fault.
fn holder(server: u64) {
    if let (Ok(reply), Ok(mut buf)) = (port_allocate(0), IpcBuffer::new()) {
        let _ = call(&mut buf, server, reply, 3);
    }
    // SAFETY: `ud2` raises an invalid-opcode exception, handled by the exception port.
    unsafe { core::arch::asm!("ud2") };
}

fn main(task_id: u64) -> i32 {
    TASK.store(task_id, core::sync::atomic::Ordering::Relaxed);
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL vp_migrate_peer: {}", e.name());
            1
        }
    }
}
