//! `vp_migrate`: a server cannot use the virtual-processor calls on a client thread whose
//! call migrated into it (Sting's virtual processors, `docs/abi.md`, against seed 001's
//! migrating RPC). The thread runs the server's code in the server's task, but it is the
//! client's: made a carrier there, its Block upcalls would hand the server the client's
//! registers and `vp_interrupt` would redirect it in the client's own task; as its own
//! processor's carrier, the server would take, wait for or resume the client's events.
//!
//! This task is the server (an activation on its port); `vp_migrate_peer`, the client,
//! calls it twice: first from a plain thread, then as the carrier of a processor of its
//! own. In each call the activation tries the calls on the thread it runs on. Checks,
//! printing `ok: <what>` for each:
//!
//! - `vp_create` by a client's thread migrated in is `InvalidArgument`, carrier or not;
//! - `vp_take`, `vp_wait` and `vp_resume` by a carrier migrated in are `InvalidArgument`
//!   (no processor of this task), and the client's processor is untouched;
//! - the client's checks of the next two (printed by it) hold: while one of its threads
//!   waits in this task in a third call, the thread's port reads (`THREAD_INFO`) the
//!   client's own task and registers, not this task's, and an exception port the client
//!   sets for that thread (`exception_port_set`) is its own home activation's: it gets the
//!   thread's fault after the call returns (before, it went to the activation running in
//!   this task, whose faults the client would then have handled, and was lost with it);
//! - the client exits normally.
//!
//! Verdict: `TEST PASS vp_migrate` or `TEST FAIL vp_migrate: ...`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_abi::exception::UserRegs;
use baton_abi::vproc::{VpConfig, VpEvent, UPCALL_STACK_MIN};
use baton_rt::check::Failed;
use baton_rt::ipc::port_allocate;
use baton_rt::migrate;
use baton_rt::vproc::{vp_create, vp_destroy, vp_resume, vp_take, vp_wait_raw};
use baton_rt::{spawn_with, wait, Error};

baton_rt::entry!(main);

const TEST: &str = "vp_migrate";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// The request ids the peer sends: its first call (a plain thread), its second (a carrier).
const PLAIN: u64 = 1;
const CARRIER: u64 = 2;
/// A call that waits in this task until [`RELEASE`] (the peer reads and sets its thread's
/// state meanwhile), and the call that ends that wait.
const HOLD: u64 = 3;
const RELEASE: u64 = 4;
/// [`HOLD`]'s wait word.
static HELD: AtomicU32 = AtomicU32::new(0);

/// Results of the activation's attempts, as raw results (`Error::to_raw`, or `OK`).
static CREATE_PLAIN: AtomicU64 = AtomicU64::new(NONE);
static CREATE_CARRIER: AtomicU64 = AtomicU64::new(NONE);
static TAKE: AtomicU64 = AtomicU64::new(NONE);
static WAIT: AtomicU64 = AtomicU64::new(NONE);
static RESUME: AtomicU64 = AtomicU64::new(NONE);
/// Calls served.
static SERVED: AtomicU32 = AtomicU32::new(0);
/// A word for `vp_wait` (never holding what it is told to expect).
static WORD: AtomicU32 = AtomicU32::new(0);

const NONE: u64 = u64::MAX;
const OK: u64 = 0;

fn raw<T>(r: Result<T, Error>) -> u64 {
    r.map_or_else(|e| e.to_raw(), |_| OK)
}

/// Never entered (no upcall can reach a processor made here: the check is that none is).
extern "C" fn never() {
    loop {
        core::hint::spin_loop();
    }
}

/// Tries `vp_create` on the thread this activation runs on; ends a processor made.
fn try_create() -> u64 {
    let stack = [0u8; 2 * UPCALL_STACK_MIN as usize + 16];
    let lo = (core::hint::black_box(&stack).as_ptr() as u64 + 15) & !15;
    let cfg = VpConfig {
        entry: never as *const () as u64,
        upcall_lo: lo,
        upcall_hi: lo + 2 * UPCALL_STACK_MIN,
        ..VpConfig::default()
    };
    let r = vp_create(&cfg);
    if let Ok(vp) = r {
        let _ = vp_destroy(vp);
    }
    raw(r)
}

fn dispatch(req: &mut migrate::Request) {
    let id = req.header().id;
    match id {
        PLAIN => CREATE_PLAIN.store(try_create(), Ordering::Relaxed),
        CARRIER => {
            CREATE_CARRIER.store(try_create(), Ordering::Relaxed);
            let mut events = [VpEvent::default(); 2];
            TAKE.store(raw(vp_take(&mut events)), Ordering::Relaxed);
            WAIT.store(
                raw(vp_wait_raw(WORD.as_ptr() as u64, 1, 0)),
                Ordering::Relaxed,
            );
            // A `rip` outside user space: refused either way, but first as a processor's.
            let regs = UserRegs {
                rip: u64::MAX,
                ..UserRegs::default()
            };
            // SAFETY: the kernel refuses these registers (the call returns an error).
            let e = unsafe { vp_resume(&regs) };
            RESUME.store(e.to_raw(), Ordering::Relaxed);
        }
        HOLD => {
            while HELD.load(Ordering::Acquire) == 0 {
                if wait(&HELD, 0, 10_000_000_000) == Err(Error::TimedOut) {
                    break;
                }
            }
        }
        RELEASE => {
            HELD.store(1, Ordering::Release);
            let _ = baton_rt::wake(&HELD, 1);
        }
        _ => {}
    }
    req.reply(id, &[]);
    SERVED.fetch_add(1, Ordering::Release);
    let _ = baton_rt::wake(&SERVED, 1);
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn run() -> Result<(), Failed> {
    let port = must("port_allocate", port_allocate(0))?;
    must("attach", migrate::attach(port, 2, dispatch))?;
    must("spawn vp_migrate_peer", spawn_with("vp_migrate_peer", port))?;
    loop {
        let n = SERVED.load(Ordering::Acquire);
        if n >= 4 {
            break;
        }
        let _ = wait(&SERVED, n, 5_000_000_000);
    }
    let bad = Error::InvalidArgument.to_raw();
    let name = |v: u64| baton_abi::decode_result(v).map_or_else(|e| e.name(), |_| "0");
    let (plain, carrier) = (
        CREATE_PLAIN.load(Ordering::Relaxed),
        CREATE_CARRIER.load(Ordering::Relaxed),
    );
    // Both checks run (each prints its line), whichever fails.
    let created = (|| -> Result<(), Failed> {
        check!(
        plain == bad && carrier == bad,
        "vp_create by a client's thread migrated into this task is InvalidArgument (got {} and, for a carrier, {})",
        name(plain),
        name(carrier)
    );
        Ok(())
    })();
    let (take, wait_r, resume) = (
        TAKE.load(Ordering::Relaxed),
        WAIT.load(Ordering::Relaxed),
        RESUME.load(Ordering::Relaxed),
    );
    check!(
        take == bad && wait_r == bad && resume == bad,
        "vp_take, vp_wait and vp_resume by a client's carrier migrated into this task are InvalidArgument (got {}, {}, {})",
        name(take),
        name(wait_r),
        name(resume)
    );
    created
}
