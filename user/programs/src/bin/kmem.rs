//! `kmem`: kernel memory is accounted per task, and one task at its limit leaves the others
//! working. Booted as `init=names,kmem,kmem_hog`: `kmem` registers its port as
//! [`kmem_proto::SERVICE`]; the sibling `kmem_hog` (default limits) drives each kind of
//! kernel memory to its limit and, at each, calls here; `kmem` then allocates a port,
//! sends and receives a 64 KiB message, runs a thread and maps memory, all of which must
//! work, and lets the hog go on. Then `kmem` spawns a second `kmem_hog` as its own child
//! with a quarter of a default limit: each of its counts must be smaller than the
//! sibling's, since the child's limit is smaller, and everything here must still work,
//! although the child's use is counted against this task's limit too.
#![no_std]
#![no_main]

#[path = "../kmem_proto.rs"]
#[allow(dead_code, reason = "the hog's half of the protocol")]
mod kmem_proto;

use baton_rt::idl_rt::SendRight;
use baton_rt::ipc::{
    cap_drop, data_word, msg_buf, port_allocate, port_make_send, Disposition, IpcBuffer, MsgHeader,
    HEADER_SIZE, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::names::NamesClient;
use baton_rt::rpc::Rpc;
use baton_rt::start::bootstrap;
use baton_rt::sync::Counter;
use baton_rt::sys::{mem_map, mem_unmap, spawn_limited};
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{println, stats, FOREVER};
use kmem_proto::*;

baton_rt::entry!(main);

const BIG: usize = 64 * 1024;
static mut BIG_BUF: [u8; BIG] = [0; BIG];
static STACKS: StackPool<16, 8192> = StackPool::new();
static RAN: Counter = Counter::new(0);
/// The child hog's limits: far below the default (half the kernel's budget).
const CHILD_HEAP: u64 = 1 << 20;
const CHILD_FRAMES: u64 = 1024;
/// What may stay charged once the hogs are gone: this task's and the name server's own
/// threads, ports, names and memory.
const LEFT_CHARGED: u64 = 256 << 10;
const LEFT_FRAMES: u64 = 1024;
/// Where it maps its own test memory.
const MAP_AT: u64 = 0x20_0000_0000;

fn main(_task: u64) -> i32 {
    match run() {
        Ok(()) => {
            println!("TEST PASS kmem");
            0
        }
        Err(e) => {
            println!("TEST FAIL kmem: {e}");
            1
        }
    }
}

/// Everything a task does with kernel memory, which must work while another task is at
/// its limit.
fn still_works() -> Result<(), &'static str> {
    // A port and a 64 KiB message through it.
    let port = port_allocate(0).map_err(|_| "port_allocate failed")?;
    let send = port_make_send(port, false).map_err(|_| "port_make_send failed")?;
    // SAFETY: only this thread uses `BIG_BUF`.
    let big = unsafe { &mut *core::ptr::addr_of_mut!(BIG_BUF) };
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: send,
        id: 5,
        size: BIG as u32,
        ..MsgHeader::default()
    };
    big[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    for (i, b) in big[HEADER_SIZE..].iter_mut().enumerate() {
        *b = i as u8;
    }
    msg_buf(big, MSG_SEND, 0, 0).map_err(|_| "a 64 KiB message could not be queued")?;
    big[HEADER_SIZE..].fill(0);
    msg_buf(big, MSG_RECEIVE, port, 0).map_err(|_| "the 64 KiB message was not received")?;
    if big[HEADER_SIZE..]
        .iter()
        .enumerate()
        .any(|(i, &b)| b != i as u8)
    {
        return Err("the 64 KiB message arrived damaged");
    }
    cap_drop(send).map_err(|_| "cap_drop failed")?;
    cap_drop(port).map_err(|_| "cap_drop failed")?;
    // A thread.
    let stack = STACKS.take().ok_or("out of test stacks")?;
    let before = RAN.get();
    spawn(
        stack,
        |_| {
            RAN.increment();
        },
        0,
    )
    .map_err(|_| "a thread could not be created")?;
    RAN.wait_for(before + 1, 10_000_000_000)
        .map_err(|_| "the thread did not run")?;
    // Memory.
    mem_map(MAP_AT, 1 << 20, true).map_err(|_| "1 MiB could not be mapped")?;
    // SAFETY: just mapped, writable, ours alone.
    unsafe { core::ptr::write_volatile((MAP_AT + 4096) as *mut u64, 42) };
    // SAFETY: nothing refers to it.
    unsafe { mem_unmap(MAP_AT, 1 << 20) }.map_err(|_| "unmap failed")?;
    Ok(())
}

/// Serves one hog's run: at each of its limits, checks that this task still works.
/// Returns the count of each step.
fn serve_hog(ipc: &mut IpcBuffer, port: u64, who: &str) -> Result<[u64; 6], &'static str> {
    let mut counts = [0u64; 6];
    loop {
        ipc.msg(MSG_RECEIVE, port, FOREVER)
            .map_err(|_| "receive from the hog")?;
        let h = ipc.header();
        let count = data_word(ipc.data(), 0);
        if h.id != DONE {
            let slot = counts.get_mut(h.id as usize).ok_or("unknown step")?;
            *slot = count;
            still_works()?;
            if let Ok(st) = stats() {
                println!(
                    "charged now: {} of {} heap bytes, {} of {} frames",
                    st.kmem_charged, st.kmem_limit, st.frames_charged, st.frames_limit
                );
            }
            println!(
                "ok: with {who} at its limit of {} ({count}), this task still gets ports, messages, threads and memory",
                step_name(h.id)
            );
        }
        let reply = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
            dest: h.reply,
            id: h.id,
            ..MsgHeader::default()
        };
        ipc.set(reply, &[], &[]).map_err(|_| "reply")?;
        ipc.msg(MSG_SEND, 0, FOREVER)
            .map_err(|_| "reply to the hog")?;
        if h.id == DONE {
            return Ok(counts);
        }
    }
}

fn run() -> Result<(), &'static str> {
    let mut rpc = Rpc::new().map_err(|_| "rpc transport")?;
    let port = port_allocate(0).map_err(|_| "port")?;
    let send = port_make_send(port, false).map_err(|_| "send right")?;
    NamesClient::new(&mut rpc, bootstrap())
        .register(SERVICE, SendRight(send))
        .map_err(|_| "register")?;

    let sibling = serve_hog(rpc.ipc(), port, "a sibling")?;
    println!(
        "ok: the sibling hog met every limit with NoMemory: {:?}",
        &sibling[1..]
    );

    // The same as a child of this task, with a smaller limit.
    spawn_limited("kmem_hog", bootstrap(), CHILD_HEAP, CHILD_FRAMES)
        .map_err(|_| "spawn the child hog")?;
    let child = serve_hog(rpc.ipc(), port, "a child")?;
    println!(
        "ok: the child hog met every limit with NoMemory: {:?}",
        &child[1..]
    );
    // (The child has no host-privilege right, so its process-model count stays 0.)
    if child[1..].iter().zip(&sibling[1..]).any(|(c, s)| c >= s) {
        return Err("the child's smaller limit did not bound it below the sibling");
    }
    println!("ok: the child's smaller limit bounds every count below the sibling's");

    // Everything the hogs were charged is given back once they are gone: what is left
    // charged is only this task's and the name server's (give the kernel a moment to
    // reap the hogs' last threads).
    let mut last = stats().map_err(|_| "stats")?;
    for _ in 0..1000 {
        last = stats().map_err(|_| "stats")?;
        if last.kmem_charged <= LEFT_CHARGED && last.frames_charged <= LEFT_FRAMES {
            break;
        }
        baton_rt::sleep_ns(10_000_000).map_err(|_| "sleep")?;
    }
    println!(
        "charged after the hogs: {} of {} heap bytes, {} of {} frames; heap in use {} bytes",
        last.kmem_charged, last.kmem_limit, last.frames_charged, last.frames_limit, last.heap_used
    );
    if last.kmem_charged > LEFT_CHARGED || last.frames_charged > LEFT_FRAMES {
        return Err("the hogs' charges did not all come back");
    }
    if last.heap_used > last.kmem_limit {
        return Err("the kernel heap kept more than the whole budget after the hogs");
    }
    println!("ok: the kernel memory charged came back after the hogs");
    Ok(())
}
