//! `mig_server`: a migrating-RPC server for the `migrate` test and the `rpc.*.migrating`
//! benchmarks (spawned by them, never alone).
//!
//! It sends a send right to its port to its bootstrap port ([`HELLO`]), reads a one-way
//! [`CONFIG`] message (activations to attach, sidetrack on or off, whether a sidetrack
//! upcall adds an activation, and their buffer size), attaches the activations, and says
//! [`READY`]. From then on
//! every RPC to the port migrates into one of its activations ([`dispatch`]); its own
//! thread only receives one-way messages: [`PEER`] (a send right to the server that
//! [`NEST`] calls) and [`EXIT`].
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use baton_rt::ipc::{
    msg_raw, Descriptor, Disposition, IpcBuffer, MsgHeader, HEADER_SIZE, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::kobject;
use baton_rt::migrate::{self, Request};
use baton_rt::{println, start::bootstrap, Error, FOREVER};

#[path = "../mig_proto.rs"]
mod mig_proto;

use mig_proto::*;

baton_rt::entry!(main);

/// The activation [`SPIN_ACT`] runs in.
static SPIN_ACT_ID: AtomicU64 = AtomicU64::new(0);
/// The `rip` read from it while suspended.
static GOT_RIP: AtomicU64 = AtomicU64::new(0);
/// Alerts [`WAIT_ALERT`] saw.
static ALERTS_SEEN: AtomicU64 = AtomicU64::new(0);
/// What [`PORT_ACT`] found, and [`KILL_ACT`].
static PORT_RESULT: AtomicU64 = AtomicU64::new(0);
/// See [`PORT_RESULT`].
static KILL_RESULT: AtomicU64 = AtomicU64::new(0);
/// [`SLEEP`] calls asleep now.
static SLEEPING: AtomicU64 = AtomicU64::new(0);
/// [`SPIN_ACT`] calls spinning now.
static SPINNING: AtomicU64 = AtomicU64::new(0);
/// [`WAIT_ALERT`] calls waiting for an alert now.
static AWAITING_ALERT: AtomicU64 = AtomicU64::new(0);

/// The server's own thread's CPU time at its last [`CPU`].
static MAIN_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// RPC (the benchmarks, as `rpc_server`): a timed echo; its arrival and reply timestamps
/// are kept.
pub const TIMED: u64 = 1;
/// RPC (the benchmarks): the next timed request is number 0.
pub const RESET: u64 = 2;
/// RPC (the benchmarks): `(arrived, replied)` pairs from the `u64` index in the request.
pub const DUMP: u64 = 3;
/// Most timed requests kept.
pub const KEPT: usize = 1100;
/// Most timestamp pairs one `DUMP` reply carries.
pub const DUMP_MAX: usize = 250;

/// When each timed request arrived, and when it was replied to.
static ARRIVED: [AtomicU64; KEPT] = [const { AtomicU64::new(0) }; KEPT];
/// See [`ARRIVED`].
static REPLIED: [AtomicU64; KEPT] = [const { AtomicU64::new(0) }; KEPT];
/// The next timed request's number.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The server's own port (its name for the receive right).
static PORT: AtomicU64 = AtomicU64::new(0);
/// The peer's send right, once [`PEER`] came.
static PEER_RIGHT: AtomicU64 = AtomicU64::new(0);
/// Sidetrack upcalls so far.
static SIDETRACKS: AtomicU64 = AtomicU64::new(0);
/// Whether a sidetrack upcall attaches one more activation.
static ADD_ON_SIDETRACK: AtomicBool = AtomicBool::new(false);
/// The activations' buffer size in bytes (0: one page).
static BUFFER_SIZE: AtomicU64 = AtomicU64::new(0);

/// Attaches `count` activations running [`dispatch`] to `port`, with buffers of
/// [`BUFFER_SIZE`].
fn attach(port: u64, count: usize) -> Result<u64, Error> {
    match BUFFER_SIZE.load(Ordering::Relaxed) {
        0 => migrate::attach(port, count, dispatch),
        size => migrate::attach_sized(port, count, size as usize, dispatch),
    }
}

fn main(_task_id: u64) -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL mig_server: {}", e.name());
            1
        }
    }
}

fn serve() -> Result<(), Error> {
    let boot = bootstrap();
    let mut buf = IpcBuffer::new()?;
    let port = baton_rt::ipc::port_allocate(0)?;
    PORT.store(port, Ordering::Relaxed);
    send(
        &mut buf,
        boot,
        HELLO,
        &[Descriptor::port(port, Disposition::MakeSend)],
        &[],
    )?;
    buf.msg(MSG_RECEIVE, port, FOREVER)?;
    if buf.header().id != CONFIG {
        return Err(Error::InvalidArgument);
    }
    let cfg = buf.data();
    let (count, sidetrack, add) = (word(cfg, 0), word(cfg, 1), word(cfg, 2));
    let size = word(cfg, 3);
    ADD_ON_SIDETRACK.store(add != 0, Ordering::Relaxed);
    BUFFER_SIZE.store(size, Ordering::Relaxed);
    attach(port, count as usize)?;
    migrate::sidetrack(port, sidetrack != 0)?;
    send(&mut buf, boot, READY, &[], &[])?;
    loop {
        buf.msg(MSG_RECEIVE, port, FOREVER)?;
        match buf.header().id {
            PEER => {
                let right = buf.descriptor(0).map_or(0, |d| d.value);
                PEER_RIGHT.store(right, Ordering::Relaxed);
            }
            EXIT => return Ok(()),
            QUIT => baton_rt::sys::thread_exit(),
            CPU => MAIN_CPU_NS.store(baton_rt::sys::thread_cpu_ns(0)?, Ordering::Relaxed),
            SUSPEND_ACT => {
                // Failures are reported through GOT_RIP (a value no user rip has).
                let act = migrate::Act::Pool(SPIN_ACT_ID.load(Ordering::SeqCst));
                let got = migrate::suspend(act, true).and_then(|()| {
                    let regs = migrate::get_state(act);
                    baton_rt::sleep_ns(20_000_000)?;
                    migrate::suspend(act, false)?;
                    regs
                });
                let v = got.map_or_else(|e| (1 << 62) | e as u64, |r| r.rip);
                GOT_RIP.store(v, Ordering::SeqCst);
            }
            PORT_ACT => {
                let v = with_act_port(&mut buf, port_act);
                PORT_RESULT.store(v.unwrap_or_else(|e| (1 << 62) | e as u64), Ordering::SeqCst);
            }
            KILL_ACT => {
                let v = with_act_port(&mut buf, kill_act);
                KILL_RESULT.store(v.unwrap_or_else(|e| (1 << 62) | e as u64), Ordering::SeqCst);
            }
            SYNC => {
                let h = MsgHeader {
                    bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
                    dest: buf.header().reply,
                    id: SYNC,
                    ..MsgHeader::default()
                };
                // A caller that gave up waiting is no concern of the server's.
                let _ = buf
                    .set(h, &[], &[])
                    .and_then(|()| buf.msg(MSG_SEND, 0, FOREVER));
            }
            _ => {}
        }
    }
}

/// Runs `f(buf, port, reply)` with a send right to the port of the activation [`SPIN_ACT`]
/// runs in and a fresh reply port; both are dropped afterwards.
fn with_act_port(
    buf: &mut IpcBuffer,
    f: fn(&mut IpcBuffer, u64, u64) -> Result<u64, Error>,
) -> Result<u64, Error> {
    let port = kobject::act_port(SPIN_ACT_ID.load(Ordering::SeqCst))?;
    let reply = match baton_rt::ipc::port_allocate(0) {
        Ok(r) => r,
        Err(e) => {
            let _ = baton_rt::ipc::cap_drop(port);
            return Err(e);
        }
    };
    let r = f(buf, port, reply);
    let _ = baton_rt::ipc::cap_drop(reply);
    let _ = baton_rt::ipc::cap_drop(port);
    r
}

/// [`PORT_ACT`]: the occupant `ACT_INFO` names, once suspend, get state, resume and alert
/// worked.
fn port_act(buf: &mut IpcBuffer, port: u64, reply: u64) -> Result<u64, Error> {
    let id = SPIN_ACT_ID.load(Ordering::SeqCst);
    let (info, n) = kobject::call(buf, port, reply, kobject::ACT_INFO, &[], FOREVER)?;
    if n != 4 || info[0] != id || info[2] != 1 {
        return Err(Error::BadFormat);
    }
    kobject::call(buf, port, reply, kobject::ACT_SUSPEND, &[], FOREVER)?;
    // ACT_GET_STATE waits until the spinning thread has stopped in the activation, and
    // reads what act_get_state reads then.
    let regs = kobject::get_state(buf, port, reply, kobject::StateOf::Activation)?;
    let by_id = migrate::get_state(migrate::Act::Pool(id))?;
    if regs.to_words() != by_id.to_words() || regs.rip == 0 || regs.rip >= 1 << 47 {
        return Err(Error::BadFormat);
    }
    baton_rt::sleep_ns(20_000_000)?;
    kobject::call(buf, port, reply, kobject::ACT_RESUME, &[], FOREVER)?;
    // A resume of what is no longer suspended is refused, asked while the client still
    // spins in the activation: once alerted, its call may leave the activation (on another
    // CPU, before the next call here), and a resume of a free activation is `NotFound`.
    if !matches!(
        kobject::call(buf, port, reply, kobject::ACT_RESUME, &[], FOREVER),
        Err(Error::InvalidArgument)
    ) {
        return Err(Error::BadFormat);
    }
    kobject::call(buf, port, reply, kobject::ACT_ALERT, &[], FOREVER)?;
    Ok(info[3])
}

/// [`KILL_ACT`]: 0 once the terminated activation is free and refuses an alert.
fn kill_act(buf: &mut IpcBuffer, port: u64, reply: u64) -> Result<u64, Error> {
    kobject::call(buf, port, reply, kobject::ACT_TERMINATE, &[], FOREVER)?;
    // A thread running on another CPU unwinds at its next kernel entry.
    for _ in 0..2000 {
        let (info, _) = kobject::call(buf, port, reply, kobject::ACT_INFO, &[], FOREVER)?;
        if info[2] == 0 {
            return match kobject::call(buf, port, reply, kobject::ACT_ALERT, &[], FOREVER) {
                Err(Error::NotFound) => Ok(0),
                _ => Err(Error::BadFormat),
            };
        }
        baton_rt::sleep_ns(1_000_000)?;
    }
    Err(Error::TimedOut)
}

/// Calls the peer with `id` through this activation's buffer (the thread's IPC buffer
/// while the call runs), the request's data left in place and the message `size` bytes
/// long; the raw result of the `ipc_msg`. The reply arrives in the same buffer.
fn call_peer(req: &mut Request, id: u64, size: u32) -> u64 {
    req.write_header(MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        size,
        dest: PEER_RIGHT.load(Ordering::Relaxed),
        reply: 0,
        id,
    });
    // SAFETY: the kernel writes only this thread's IPC buffer (the request's).
    unsafe {
        msg_raw(
            MSG_SEND | MSG_RECEIVE,
            PORT.load(Ordering::Relaxed),
            FOREVER,
            0,
            0,
        )
    }
}

/// Runs (reading the clock, a system call, over and over) for `ns` nanoseconds; how long
/// it ran.
fn spin(ns: u64) -> u64 {
    let t0 = baton_rt::clock_ns();
    let mut t1 = t0;
    while t1.wrapping_sub(t0) < ns {
        t1 = baton_rt::clock_ns();
    }
    t1 - t0
}

/// [`spin`] until the calling activation is alerted, at most `ns` nanoseconds; how long it
/// ran. Alerts are on while it spins, as they were before afterwards.
fn spin_until_alerted(ns: u64) -> u64 {
    let was = migrate::alert_enable(true).unwrap_or(false);
    let t0 = baton_rt::clock_ns();
    let mut t1 = t0;
    while t1.wrapping_sub(t0) < ns && !migrate::alert_test() {
        t1 = baton_rt::clock_ns();
    }
    let _ = migrate::alert_enable(was);
    t1.wrapping_sub(t0)
}

/// Every migrating call runs here, on the caller's thread.
fn dispatch(req: &mut Request) {
    if req.is_sidetrack() {
        SIDETRACKS.fetch_add(1, Ordering::Relaxed);
        if ADD_ON_SIDETRACK.load(Ordering::Relaxed) {
            // Failing to add one only means the call waits.
            let _ = attach(PORT.load(Ordering::Relaxed), 1);
        }
        return;
    }
    let arrived = baton_rt::rdtsc_ordered();
    let h = req.header();
    let len = h.size as usize - HEADER_SIZE;
    match h.id {
        TIMED => {
            req.reply_in_place(TIMED, len);
            let next = NEXT.fetch_add(1, Ordering::Relaxed) as usize;
            if let Some(slot) = ARRIVED.get(next) {
                slot.store(arrived, Ordering::Relaxed);
            }
            let replied = baton_rt::rdtsc_ordered();
            if let Some(slot) = REPLIED.get(next) {
                slot.store(replied, Ordering::Relaxed);
            }
        }
        RESET => {
            NEXT.store(0, Ordering::Relaxed);
            req.reply(RESET, &[]);
        }
        DUMP => {
            let first = req
                .data()
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes) as usize;
            let mut bytes = [0u8; 16 * DUMP_MAX];
            for (i, pair) in bytes.chunks_exact_mut(16).enumerate() {
                let at = first + i;
                let a = ARRIVED.get(at).map_or(0, |s| s.load(Ordering::Relaxed));
                let r = REPLIED.get(at).map_or(0, |s| s.load(Ordering::Relaxed));
                pair[..8].copy_from_slice(&a.to_le_bytes());
                pair[8..].copy_from_slice(&r.to_le_bytes());
            }
            req.reply(DUMP, &bytes);
        }
        ECHO => req.reply_in_place(ECHO, len),
        INC => {
            let end = (HEADER_SIZE + len).min(req.capacity());
            for b in req.buffer()[HEADER_SIZE..end].iter_mut() {
                *b = b.wrapping_add(1);
            }
            req.reply_in_place(INC, len);
        }
        FILL => {
            let n = (word(req.data(), 0) as usize).min(req.capacity() - HEADER_SIZE);
            for (i, b) in req.buffer()[HEADER_SIZE..HEADER_SIZE + n]
                .iter_mut()
                .enumerate()
            {
                *b = fill_byte(i);
            }
            req.reply_in_place(FILL, n);
        }
        SLEEP => {
            // The request's first word is how long (30 ms without one).
            let ns = match word(req.data(), 0) {
                0 => 30_000_000,
                ns => ns,
            };
            SLEEPING.fetch_add(1, Ordering::SeqCst);
            let _ = baton_rt::sleep_ns(ns);
            SLEEPING.fetch_sub(1, Ordering::SeqCst);
            req.reply_in_place(SLEEP, len);
        }
        COUNT => req.reply(COUNT, &SIDETRACKS.load(Ordering::Relaxed).to_le_bytes()),
        SPIN => {
            let spun = spin(word(req.data(), 0));
            req.reply(SPIN, &spun.to_le_bytes());
        }
        MAIN_CPU => req.reply(MAIN_CPU, &MAIN_CPU_NS.load(Ordering::Relaxed).to_le_bytes()),
        WAIT_ALERT => {
            let _ = migrate::alert_enable(true);
            AWAITING_ALERT.fetch_add(1, Ordering::SeqCst);
            let t0 = baton_rt::clock_ns();
            let mut how = 0u64;
            while baton_rt::clock_ns() - t0 < 5_000_000_000 {
                if migrate::alert_test() {
                    how = 1;
                    break;
                }
                if baton_rt::sleep_ns(1_000_000) == Err(Error::Interrupted) {
                    how = 2;
                    break;
                }
            }
            AWAITING_ALERT.fetch_sub(1, Ordering::SeqCst);
            if how != 0 {
                ALERTS_SEEN.fetch_add(1, Ordering::SeqCst);
            }
            req.reply(WAIT_ALERT, &how.to_le_bytes());
        }
        NEST_SLEEP => {
            SPIN_ACT_ID.store(req.activation, Ordering::SeqCst);
            // The request's first word (the nanoseconds) stays in place for the peer.
            let r = call_peer(req, SLEEP, (HEADER_SIZE + 8) as u32);
            req.reply(NEST_SLEEP, &r.to_le_bytes());
        }
        NEST2 => {
            let inner = word(req.data(), 0);
            let r = call_peer(req, inner, h.size);
            let _ = migrate::alert_enable(true);
            let saw = u64::from(migrate::alert_test());
            let got = req.header();
            if r != 0 {
                req.reply(u64::MAX, &r.to_le_bytes());
            } else {
                let n = got.size as usize - HEADER_SIZE;
                let mut out = [0u8; 64];
                let m = n.min(56);
                out[..m].copy_from_slice(&req.data()[..m]);
                out[m..m + 8].copy_from_slice(&saw.to_le_bytes());
                req.reply(NEST2, &out[..m + 8]);
            }
        }
        SPIN_ACT => {
            SPIN_ACT_ID.store(req.activation, Ordering::SeqCst);
            SPINNING.fetch_add(1, Ordering::SeqCst);
            let (ns, alertable) = (word(req.data(), 0), word(req.data(), 1) != 0);
            let spun = if alertable {
                spin_until_alerted(ns)
            } else {
                spin(ns)
            };
            SPINNING.fetch_sub(1, Ordering::SeqCst);
            req.reply(SPIN_ACT, &spun.to_le_bytes());
        }
        SETPRIO => {
            let r = baton_rt::set_priority(0, 1).err().map_or(0, |e| e as u64);
            req.reply(SETPRIO, &r.to_le_bytes());
        }
        INFO => {
            let mut out = [0u8; 56];
            out[..8].copy_from_slice(&ALERTS_SEEN.load(Ordering::SeqCst).to_le_bytes());
            out[8..16].copy_from_slice(&GOT_RIP.load(Ordering::SeqCst).to_le_bytes());
            out[16..24].copy_from_slice(&PORT_RESULT.load(Ordering::SeqCst).to_le_bytes());
            out[24..32].copy_from_slice(&KILL_RESULT.load(Ordering::SeqCst).to_le_bytes());
            out[32..40].copy_from_slice(&SLEEPING.load(Ordering::SeqCst).to_le_bytes());
            out[40..48].copy_from_slice(&SPINNING.load(Ordering::SeqCst).to_le_bytes());
            out[48..].copy_from_slice(&AWAITING_ALERT.load(Ordering::SeqCst).to_le_bytes());
            req.reply(INFO, &out);
        }
        DIE => baton_rt::exit(3),
        UNMAP => {
            let page = req.buffer_address();
            // SAFETY: nothing refers to the buffer page after this (`req` is not used
            // again: the function returns at once).
            let _ = unsafe { baton_rt::mem_unmap(page, 4096) };
        }
        BAD => {
            req.reply_in_place(BAD, 0);
            // Claim one descriptor: the kernel must refuse the reply.
            let mut h = req.header();
            h.bits = MsgHeader::make_bits(Disposition::None, Disposition::None, 1);
            req.write_header(h);
        }
        NEST => {
            // The request's data stays in place; the header becomes a call to the peer
            // (through this activation's buffer, which is the thread's IPC buffer here).
            let r = call_peer(req, ECHO, h.size);
            let got = req.header();
            if r != 0 || got.id != ECHO {
                req.reply(u64::MAX, &[]);
            } else {
                req.reply_in_place(NEST, got.size as usize - HEADER_SIZE);
            }
        }
        other => req.reply(other | 1 << 40, &[]),
    }
}
