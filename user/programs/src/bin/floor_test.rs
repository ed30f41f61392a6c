//! `floor_test`: the floor calls (`baton_abi::floor`) from user space, with their error
//! cases: the minimal system calls return 0; the cross-address-space call refuses a task
//! that does not exist or did not register, a caller the partner did not name, a return
//! with no call, bad registrations and registrations without the host-privilege right
//! (booted with `priv=floor_test`);
//! it runs the partner's code in the partner's space (`floor_partner`) and comes back;
//! a fault, a system call or an interrupt in the partner ends the call with
//! `Interrupted` and leaves the partner usable; the partner's end unregisters it; the
//! page-fault window resumes only an armed thread, and any other access there is an
//! ordinary fault, which this task's exception handler sees.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};

use baton_abi::floor::FLOOR_XAS_RETURN;
use baton_abi::layout::USER_END;
use baton_rt::check::Failed;
use baton_rt::exception::{self, ExcReply};
use baton_rt::floor::{
    fault_arm, fault_load, full, minimal, space, xas_call, xas_register, xas_return_outside,
    xas_unregister, FAULT_LOAD_ADDRESS,
};
use baton_rt::ipc::{cap_drop, port_allocate, IpcBuffer, MSG_RECEIVE, MSG_SEND};
use baton_rt::kobject::{call, task_port, TASK_TERMINATE};
use baton_rt::start::host_priv;
use baton_rt::sync::Counter;
use baton_rt::thread::{spawn, StackPool};
use baton_rt::{sleep_ns, spawn_with, yield_now, Error, FOREVER};

baton_rt::entry!(main);

const TEST: &str = "floor";
macro_rules! check { ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) } }
fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// `floor_partner`'s `PARTNER_SECRET`, which its entry adds to the argument.
const SECRET: u64 = 0x5ec2_e700_0000_0000;
/// `floor_partner`'s entry executes `ud2`.
const MODE_UD2: u64 = u64::MAX;
/// `floor_partner`'s entry makes a system call.
const MODE_SYSCALL: u64 = u64::MAX - 1;
/// `floor_partner`'s entry spins until an interrupt.
const MODE_SPIN: u64 = u64::MAX - 2;
/// `floor_partner`'s `PARTNER_MARK`, which its special modes fill its registers with.
const PARTNER_MARK: u64 = 0x6d61_726b_6d61_726b;
/// Kernel replies come well within this.
const SOON: u64 = 1_000_000_000;

core::arch::global_asm!(
    r#"
    .global floor_test_entry
floor_test_entry:
    movl ${ret}, %eax
    syscall
    ud2
    "#,
    ret = const FLOOR_XAS_RETURN,
    options(att_syntax)
);

extern "C" {
    /// An entry that returns its argument: this task as its own partner.
    fn floor_test_entry();
}

static HANDLER_STACK: StackPool<1, 16384> = StackPool::new();
/// The exception port the handler receives on.
static EXC_PORT: AtomicU64 = AtomicU64::new(0);
/// Page faults at [`FAULT_LOAD_ADDRESS`] the handler resumed.
static WINDOW_FAULTS: Counter = Counter::new(0);

/// This task's exception handler: resumes page faults at the floor window's load (2
/// bytes), ends the task on anything else.
fn handler(_arg: u64) {
    let port = EXC_PORT.load(Ordering::Relaxed);
    let Ok(mut buf) = IpcBuffer::new() else {
        return;
    };
    let mut r = buf.msg(MSG_RECEIVE, port, FOREVER);
    while r.is_ok() {
        let reply = match exception::info(&buf) {
            Some(e) if e.kind == 14 && e.addr == FAULT_LOAD_ADDRESS => {
                let mut regs = e.regs;
                regs.rip += 2;
                WINDOW_FAULTS.increment();
                ExcReply::Set(regs)
            }
            _ => ExcReply::Kill,
        };
        r = exception::set_reply(&mut buf, reply)
            .and_then(|()| buf.msg(MSG_SEND | MSG_RECEIVE, port, FOREVER));
    }
}

/// `floor_xas_call(partner, arg)` that returns the raw result and what the general
/// registers (all but `rax`, `rsp`, and `rcx` and `r11`, which `sysretq` uses) and `xmm0`
/// and `xmm15` held right after the system call, before any code of this task ran.
fn xas_call_registers(partner: u64, arg: u64) -> (u64, [u64; 14]) {
    let mut regs = [0u64; 14];
    let ret: u64;
    // SAFETY: as `baton_rt::floor::xas_call`: the callee-saved registers are pushed before
    // and popped after, the rest declared clobbered; the buffer's address is kept on the
    // stack (which the kernel gives back) and the registers stored into it, within its 14
    // words, before anything else runs.
    unsafe {
        core::arch::asm!(
            "push rbx",
            "push rbp",
            "push r12",
            "push r13",
            "push r14",
            "push r15",
            "push rdx",
            "syscall",
            "push rax",
            "mov rax, [rsp + 8]",
            "mov [rax], rbx",
            "mov [rax + 8], rbp",
            "mov [rax + 16], rdx",
            "mov [rax + 24], rsi",
            "mov [rax + 32], rdi",
            "mov [rax + 40], r8",
            "mov [rax + 48], r9",
            "mov [rax + 56], r10",
            "mov [rax + 64], r12",
            "mov [rax + 72], r13",
            "mov [rax + 80], r14",
            "mov [rax + 88], r15",
            "movq [rax + 96], xmm0",
            "movq [rax + 104], xmm15",
            "pop rax",
            "add rsp, 8",
            "pop r15",
            "pop r14",
            "pop r13",
            "pop r12",
            "pop rbp",
            "pop rbx",
            inlateout("rax") baton_abi::floor::FLOOR_XAS_CALL => ret,
            inlateout("rdi") partner => _,
            inlateout("rsi") arg => _,
            inlateout("rdx") regs.as_mut_ptr() => _,
            clobber_abi("C"),
        );
    }
    (ret, regs)
}

fn main(task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run(task_id))
}

fn run(me: u64) -> Result<(), Failed> {
    check!(minimal() == 0, "floor_minimal returns 0");
    check!(full() == 0, "floor_full returns 0");
    check!(space() == 0, "floor_space returns 0");

    // The cross-address-space call's refusals.
    check!(
        xas_call(0x7777_7777, 1) == Err(Error::NotFound),
        "a call to a task that does not exist: NotFound"
    );
    check!(
        xas_call(me, 1) == Err(Error::NotFound),
        "a call to a task that did not register: NotFound"
    );
    check!(
        xas_return_outside(5) == Err(Error::InvalidArgument),
        "a return with no call in progress: InvalidArgument"
    );
    let entry = floor_test_entry as *const () as u64;
    let hp = host_priv();
    check!(
        hp != 0,
        "booted with the host-privilege right (priv=floor_test)"
    );
    check!(
        xas_register(entry, 0x8000, me, 0) == Err(Error::Denied),
        "a registration without the host-privilege right: Denied"
    );
    let other = must("port", port_allocate(0))?;
    check!(
        xas_register(entry, 0x8000, me, other) == Err(Error::Denied),
        "a registration naming another right: Denied"
    );
    let _ = cap_drop(other);
    check!(
        xas_register(entry, 0x8000, 0, hp) == Err(Error::NotFound),
        "a boot task cannot register for its creator: NotFound"
    );
    check!(
        xas_register(0xffff_8000_0000_0000, 0x8000, me, hp) == Err(Error::BadAddress),
        "a kernel-half entry is refused"
    );
    check!(
        xas_register(entry, USER_END + 16, me, hp) == Err(Error::BadAddress),
        "a stack beyond user space is refused"
    );
    check!(
        xas_register(0, 0x8000, me, hp) == Err(Error::BadAddress),
        "a null entry is refused"
    );
    // Registered for another caller: this task is refused.
    must(
        "register for another",
        xas_register(entry, 0x8000, me + 1000, hp),
    )?;
    check!(
        xas_call(me, 1) == Err(Error::Denied),
        "a call from a task the partner did not name: Denied"
    );
    // This task as its own partner: no switch of address space, but the whole protocol.
    must("register self", xas_register(entry, 0x8000, me, hp))?;
    // An interrupt (a timer tick, another CPU's IPI) may end any one call: retry those.
    let mut own = xas_call(me, 42);
    for _ in 0..100 {
        if own != Err(Error::Interrupted) {
            break;
        }
        own = xas_call(me, 42);
    }
    check!(own == Ok(42), "a call to this task itself");
    must("unregister self", xas_unregister())?;
    check!(
        xas_call(me, 1) == Err(Error::NotFound),
        "after unregistering: NotFound"
    );

    // The partner task.
    // It registers for this task with the right passed as its bootstrap right.
    let partner = must("spawn floor_partner", spawn_with("floor_partner", hp))?;
    // Until the partner has registered (NotFound), and again when a timer interrupt came
    // while its code ran (Interrupted: the call ends there, as the ABI says, and is made
    // again; under a loaded host a tick can land in the partner's few instructions).
    let mut first = xas_call(partner, 1);
    let mut tries = 0;
    while matches!(first, Err(Error::NotFound | Error::Interrupted)) && tries < 1000 {
        yield_now();
        let _ = sleep_ns(1_000_000);
        first = xas_call(partner, 1);
        tries += 1;
    }
    check!(
        first == Ok(1 + SECRET),
        "the partner's code ran in its own address space ({first:?})"
    );
    let mut interrupted = 0;
    for i in 0..1000u64 {
        match xas_call(partner, i) {
            Ok(v) if v == i + SECRET => {}
            Err(Error::Interrupted) => interrupted += 1,
            other => {
                check!(false, "call {i} returned {other:?}");
            }
        }
    }
    check!(
        interrupted < 10,
        "1,000 calls and returns ({interrupted} interrupted by the timer)"
    );
    // Each special mode fills the partner's registers with its mark first; the call that
    // ends without the partner's return shows none of them (the registers are read right
    // after the system call). This thread uses the vector registers before, so that the
    // partner's writes to them land in live registers rather than fault.
    // SAFETY: clears one vector register, which no Rust code here keeps a value in.
    unsafe { core::arch::asm!("xorps xmm0, xmm0", out("xmm0") _) };
    for (mode, what) in [
        (MODE_UD2, "a fault"),
        (MODE_SYSCALL, "a system call"),
        (MODE_SPIN, "an interrupt"),
    ] {
        let (ret, regs) = xas_call_registers(partner, mode);
        check!(
            baton_abi::decode_result(ret) == Err(Error::Interrupted),
            "{what} in the partner's code ends the call: Interrupted"
        );
        let seen = regs.iter().filter(|&&r| r == PARTNER_MARK).count();
        check!(
            seen == 0,
            "after {what} in the partner, {seen} of the caller's registers hold the partner's \
             values ({regs:x?})"
        );
    }
    check!(
        xas_call(partner, 7) == Ok(7 + SECRET),
        "the partner answers again after the interrupted calls"
    );

    // The partner's end unregisters it.
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    let reply = must("port", port_allocate(0))?;
    let pport = must("task_port", task_port(partner))?;
    must(
        "TASK_TERMINATE",
        call(&mut buf, pport, reply, TASK_TERMINATE, &[], SOON),
    )?;
    check!(
        xas_call(partner, 1) == Err(Error::NotFound),
        "after the partner's end: NotFound"
    );
    let _ = cap_drop(pport);

    // The page-fault window, with a handler for the faults that are not the floor's.
    let port = must("port", port_allocate(0))?;
    EXC_PORT.store(port, Ordering::Relaxed);
    let stack = HANDLER_STACK.take().ok_or(Failed)?;
    must("handler thread", spawn(stack, handler, 0))?;
    must("exception_port_set", exception::exception_port_set(0, port))?;
    fault_load();
    check!(
        WINDOW_FAULTS.get() == 1,
        "an unarmed access to the window is an ordinary fault"
    );
    fault_arm(true);
    for _ in 0..100 {
        fault_load();
    }
    check!(
        WINDOW_FAULTS.get() == 1,
        "armed: 100 accesses resumed by the kernel's trap path, no exception"
    );
    fault_arm(true);
    let _ = sleep_ns(1_000_000);
    fault_load();
    check!(
        WINDOW_FAULTS.get() == 2,
        "a block disarms: then it is an ordinary fault"
    );
    fault_arm(true);
    fault_arm(false);
    fault_load();
    check!(WINDOW_FAULTS.get() == 3, "disarmed: an ordinary fault");
    must("exception_port_set", exception::exception_port_set(0, 0))?;
    let _ = cap_drop(port);
    let _ = cap_drop(reply);
    Ok(())
}
