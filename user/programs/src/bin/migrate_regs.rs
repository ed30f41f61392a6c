//! `migrate_regs`: no task's registers reach another task through a migrating call (seed
//! 001), against two `regs_server` tasks: a *dirty* server, whose activation fills every
//! register with its own pattern before `act_return`, and a *reporting* server, whose
//! activation replies with every register as it found it at entry (both raw assembly).
//!
//! The kernel keeps an activation's user registers in a frame box it recycles between the
//! calls of a thread. When the box last held registers of the server's own task it may
//! leave them (only the upcall's arguments are written); otherwise it must clear every
//! register. Checks, printing `ok: <what>` for each:
//!
//! - the first migrating call of this thread, into the reporting server, finds the
//!   documented arguments (`rdi` buffer, `rsi` request size, `rdx` activation id, `r8`
//!   cookie, `rsp` stack top, `rflags` 0x202) and every other register 0 (`rcx` and `r11`
//!   may instead hold the entry and the flags: `sysretq` loads them);
//! - after a call into the dirty server, the next call into the reporting server finds the
//!   same: no dirty value (nor the dirty server's flags or return address), every other
//!   register 0;
//! - a repeated call into the reporting server finds no other task's value: each register
//!   is the argument, 0, or what the reporting server itself left there;
//! - around every call, the client's own registers come back as they were (the result in
//!   `rax`, `rcx`/`r11` loaded by `sysretq`), none of a server's;
//! - every vector register (YMM with AVX, else XMM; all caller-saved) is 0 when the
//!   reporting server's activation is entered and when the client's call returns, though
//!   the client, the dirty server and the reporting server each fill them with a pattern of
//!   their own before `syscall`: a migrating call and its return clear them;
//! - all of it through the IPC buffer and through a buffer of the client's own (`MSG_BUF`),
//!   round after round, and every call migrated;
//! - once the dirty server has ended (its registers still in this thread's spare box), a
//!   reporting server started after it (most likely in its slot of the kernel's task table)
//!   finds its arguments and every other register 0;
//! - activations, ports, names and queued messages return to their baseline.
//!
//! Verdict: `TEST PASS migrate_regs` or `TEST FAIL migrate_regs: ...`.
#![no_std]
#![no_main]

use core::arch::global_asm;

use baton_abi::Sys;
use baton_rt::check::Failed;
use baton_rt::ipc::{
    port_allocate, Disposition, IpcBuffer, MsgHeader, HEADER_SIZE, MSG_BUF, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::{println, stats, Error, FOREVER};

#[path = "../regs_proto.rs"]
mod regs_proto;

use regs_proto::*;

baton_rt::entry!(main);

const TEST: &str = "migrate_regs";

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

/// Rounds of dirty call, reporting call, reporting call.
const ROUNDS: u64 = 12;
/// The flags the client's registers hold at its `syscall` (`xorl` is the last instruction
/// before it that writes flags: ZF and PF, with IF and bit 1).
const CLIENT_FLAGS: u64 = 0x246;

global_asm!(
    r#"
    // extern "C" fn regs_client_call(out: *mut [u64; REGS], options, rcv_name, timeout,
    //     buf, len): `ipc_msg(options, rcv_name, timeout, buf, len, 0)` with every other
    // register holding the client pattern; every register after it into `out` (the
    // result as rax).
    .global regs_client_call
regs_client_call:
    pushq %rbx
    pushq %rbp
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    pushq %rdi
    // The client's vector pattern in every vector register (before the flags are set).
    cmpb $0, {avx}(%rip)
    je 81f
    vmovdqu {cv}+0(%rip), %ymm0
    vmovdqu {cv}+32(%rip), %ymm1
    vmovdqu {cv}+64(%rip), %ymm2
    vmovdqu {cv}+96(%rip), %ymm3
    vmovdqu {cv}+128(%rip), %ymm4
    vmovdqu {cv}+160(%rip), %ymm5
    vmovdqu {cv}+192(%rip), %ymm6
    vmovdqu {cv}+224(%rip), %ymm7
    vmovdqu {cv}+256(%rip), %ymm8
    vmovdqu {cv}+288(%rip), %ymm9
    vmovdqu {cv}+320(%rip), %ymm10
    vmovdqu {cv}+352(%rip), %ymm11
    vmovdqu {cv}+384(%rip), %ymm12
    vmovdqu {cv}+416(%rip), %ymm13
    vmovdqu {cv}+448(%rip), %ymm14
    vmovdqu {cv}+480(%rip), %ymm15
    jmp 82f
81:
    movdqu {cv}+0(%rip), %xmm0
    movdqu {cv}+32(%rip), %xmm1
    movdqu {cv}+64(%rip), %xmm2
    movdqu {cv}+96(%rip), %xmm3
    movdqu {cv}+128(%rip), %xmm4
    movdqu {cv}+160(%rip), %xmm5
    movdqu {cv}+192(%rip), %xmm6
    movdqu {cv}+224(%rip), %xmm7
    movdqu {cv}+256(%rip), %xmm8
    movdqu {cv}+288(%rip), %xmm9
    movdqu {cv}+320(%rip), %xmm10
    movdqu {cv}+352(%rip), %xmm11
    movdqu {cv}+384(%rip), %xmm12
    movdqu {cv}+416(%rip), %xmm13
    movdqu {cv}+448(%rip), %xmm14
    movdqu {cv}+480(%rip), %xmm15
82:
    movq %rsi, %rdi
    movq %rdx, %rsi
    movq %rcx, %rdx
    movq %r8, %r10
    movq %r9, %r8
    movabs ${c1}, %rbx
    movabs ${c2}, %rcx
    movabs ${c6}, %rbp
    movabs ${c11}, %r11
    movabs ${c12}, %r12
    movabs ${c13}, %r13
    movabs ${c14}, %r14
    movabs ${c15}, %r15
    movl ${ipc_msg}, %eax
    xorl %r9d, %r9d
    syscall
    .global regs_client_return
regs_client_return:
    pushq %rax
    movq 8(%rsp), %rax
    movq %rbx, 8(%rax)
    movq %rcx, 16(%rax)
    movq %rdx, 24(%rax)
    movq %rsi, 32(%rax)
    movq %rdi, 40(%rax)
    movq %rbp, 48(%rax)
    leaq 16(%rsp), %rcx
    movq %rcx, 56(%rax)
    movq %r8, 64(%rax)
    movq %r9, 72(%rax)
    movq %r10, 80(%rax)
    movq %r11, 88(%rax)
    movq %r12, 96(%rax)
    movq %r13, 104(%rax)
    movq %r14, 112(%rax)
    movq %r15, 120(%rax)
    pushfq
    popq 128(%rax)
    // Every vector register after the call (they must come back cleared).
    cmpb $0, {avx}(%rip)
    je 71f
    vmovdqu %ymm0, 136(%rax)
    vmovdqu %ymm1, 168(%rax)
    vmovdqu %ymm2, 200(%rax)
    vmovdqu %ymm3, 232(%rax)
    vmovdqu %ymm4, 264(%rax)
    vmovdqu %ymm5, 296(%rax)
    vmovdqu %ymm6, 328(%rax)
    vmovdqu %ymm7, 360(%rax)
    vmovdqu %ymm8, 392(%rax)
    vmovdqu %ymm9, 424(%rax)
    vmovdqu %ymm10, 456(%rax)
    vmovdqu %ymm11, 488(%rax)
    vmovdqu %ymm12, 520(%rax)
    vmovdqu %ymm13, 552(%rax)
    vmovdqu %ymm14, 584(%rax)
    vmovdqu %ymm15, 616(%rax)
    jmp 72f
71:
    movdqu %xmm0, 136(%rax)
    movq $0, 152(%rax)
    movq $0, 160(%rax)
    movdqu %xmm1, 168(%rax)
    movq $0, 184(%rax)
    movq $0, 192(%rax)
    movdqu %xmm2, 200(%rax)
    movq $0, 216(%rax)
    movq $0, 224(%rax)
    movdqu %xmm3, 232(%rax)
    movq $0, 248(%rax)
    movq $0, 256(%rax)
    movdqu %xmm4, 264(%rax)
    movq $0, 280(%rax)
    movq $0, 288(%rax)
    movdqu %xmm5, 296(%rax)
    movq $0, 312(%rax)
    movq $0, 320(%rax)
    movdqu %xmm6, 328(%rax)
    movq $0, 344(%rax)
    movq $0, 352(%rax)
    movdqu %xmm7, 360(%rax)
    movq $0, 376(%rax)
    movq $0, 384(%rax)
    movdqu %xmm8, 392(%rax)
    movq $0, 408(%rax)
    movq $0, 416(%rax)
    movdqu %xmm9, 424(%rax)
    movq $0, 440(%rax)
    movq $0, 448(%rax)
    movdqu %xmm10, 456(%rax)
    movq $0, 472(%rax)
    movq $0, 480(%rax)
    movdqu %xmm11, 488(%rax)
    movq $0, 504(%rax)
    movq $0, 512(%rax)
    movdqu %xmm12, 520(%rax)
    movq $0, 536(%rax)
    movq $0, 544(%rax)
    movdqu %xmm13, 552(%rax)
    movq $0, 568(%rax)
    movq $0, 576(%rax)
    movdqu %xmm14, 584(%rax)
    movq $0, 600(%rax)
    movq $0, 608(%rax)
    movdqu %xmm15, 616(%rax)
    movq $0, 632(%rax)
    movq $0, 640(%rax)
72:
    popq %rcx
    movq %rcx, 0(%rax)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbp
    popq %rbx
    ret
    "#,
    ipc_msg = const Sys::IpcMsg as u64,
    c1 = const client(1),
    c2 = const client(2),
    c6 = const client(6),
    c11 = const client(11),
    c12 = const client(12),
    c13 = const client(13),
    c14 = const client(14),
    c15 = const client(15),
    cv = sym CLIENT_V,
    avx = sym REGS_AVX,
    options(att_syntax)
);

/// The client's vector registers around its calls.
static CLIENT_V: [u8; VBYTES] = vpattern(0xc1);
/// 1 when the client uses the YMM registers (AVX), 0 for XMM only.
static REGS_AVX: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

/// What [`regs_client_call`] writes: every register after the call, then every vector
/// register (the layout of a report).
#[repr(C)]
struct Out {
    regs: [u64; REGS],
    v: [u8; VBYTES],
}

extern "C" {
    /// `ipc_msg` with the client pattern in every register that is not an argument (see
    /// the assembly); every register after the call into `out` ([`NAMES`]' order).
    fn regs_client_call(
        out: *mut Out,
        options: u64,
        rcv_name: u64,
        timeout: u64,
        buf: u64,
        len: u64,
    );
    /// The instruction after [`regs_client_call`]'s `syscall`.
    fn regs_client_return();
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

/// A started server: the send right to its port, and its activation.
#[derive(Clone, Copy)]
struct Server {
    port: u64,
    info: Info,
}

/// How a call is made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// Through the thread's IPC buffer.
    IpcBuffer,
    /// Through a buffer of the caller's own (`MSG_BUF`).
    OwnBuffer,
}

/// Everything a call needs.
struct Client {
    ipc: IpcBuffer,
    /// Our receive right, the `rcv_name` of every call (a migrating call never uses it).
    reply: u64,
    /// Calls made.
    calls: u64,
}

impl Client {
    /// A call of `id` (no data) to `server` via `via`; the reply's header and in-line
    /// words (up to [`REGS`]). Fails the test when the client's own registers do not come
    /// back as they were.
    #[allow(
        clippy::type_complexity,
        reason = "a header, the registers, the vector words"
    )]
    fn call(
        &mut self,
        server: u64,
        id: u64,
        via: Via,
    ) -> Result<(MsgHeader, [u64; REGS], [u64; VWORDS]), Failed> {
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
            size: HEADER_SIZE as u32,
            dest: server,
            reply: self.reply,
            id,
        };
        let mut mine = [0u64; 128];
        let (options, buf, len) = match via {
            Via::IpcBuffer => {
                must("request", self.ipc.set(h, &[], &[]))?;
                (MSG_SEND | MSG_RECEIVE, 0, 0)
            }
            Via::OwnBuffer => {
                for (i, w) in h.to_bytes().chunks_exact(8).enumerate() {
                    mine[i] = u64::from_le_bytes(w.try_into().unwrap_or_default());
                }
                let len = core::mem::size_of_val(&mine) as u64;
                (
                    MSG_SEND | MSG_RECEIVE | MSG_BUF,
                    mine.as_mut_ptr() as u64,
                    len,
                )
            }
        };
        let mut outs = Out {
            regs: [0; REGS],
            v: [0xff; VBYTES],
        };
        // SAFETY: the kernel writes only this thread's IPC buffer (which `self.ipc` owns and
        // we borrow mutably) or, with `MSG_BUF`, `mine` (ours, `len` bytes); the assembly
        // writes `outs` and keeps the callee-saved registers and the stack as the C ABI
        // requires (every vector register is caller-saved).
        unsafe {
            regs_client_call(&mut outs, options, self.reply, FOREVER, buf, len);
        }
        let out = outs.regs;
        self.calls += 1;
        must("migrating call", baton_abi::decode_result(out[RAX]))?;
        let expected = |i: usize| -> u64 {
            match i {
                RAX => 0,
                RCX => regs_client_return as *const () as usize as u64,
                RDX => FOREVER,
                RSI => self.reply,
                RDI => options,
                R8 => len,
                R9 => 0,
                R10 => buf,
                R11 | RFLAGS => CLIENT_FLAGS,
                _ => client(i),
            }
        };
        let bad = (0..REGS).find(|&i| i != RSP && out[i] != expected(i));
        let (name, got, want) = bad.map_or(("", 0, 0), |i| (NAMES[i], out[i], expected(i)));
        check_quiet(
            bad.is_none(),
            format_args!(
                "the client's {name} comes back from a migrating call as {got:#x}, not {want:#x}"
            ),
        )?;
        let vbad = outs.v.iter().position(|&b| b != 0);
        check_quiet(
            vbad.is_none(),
            format_args!(
                "the client's vector register {} comes back from a migrating call holding {:#x} at byte {}, not cleared",
                vbad.unwrap_or(0) / 32,
                vbad.map_or(0, |i| outs.v[i]),
                vbad.unwrap_or(0) % 32
            ),
        )?;
        let mut vwords = [0u64; VWORDS];
        let (header, data) = match via {
            Via::IpcBuffer => {
                let mut words = [0u64; REGS];
                for (i, w) in words.iter_mut().enumerate() {
                    *w = word(self.ipc.data(), i);
                }
                for (i, w) in vwords.iter_mut().enumerate() {
                    *w = word(self.ipc.data(), REGS + i);
                }
                (self.ipc.header(), words)
            }
            Via::OwnBuffer => {
                let mut hb = [0u8; HEADER_SIZE];
                for (i, w) in mine[..HEADER_SIZE / 8].iter().enumerate() {
                    hb[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
                }
                let mut words = [0u64; REGS];
                let at = HEADER_SIZE / 8;
                words.copy_from_slice(&mine[at..at + REGS]);
                vwords.copy_from_slice(&mine[at + REGS..at + REGS + VWORDS]);
                (MsgHeader::from_bytes(&hb).unwrap_or_default(), words)
            }
        };
        Ok((header, data, vwords))
    }

    /// A call to the dirty server; fails the test unless its reply (a header alone) comes.
    fn dirty(&mut self, s: &Server, via: Via) -> Result<(), Failed> {
        let (h, _, _) = self.call(s.port, DIRTY, via)?;
        check_quiet(
            h.id == DIRTY && h.size as usize == HEADER_SIZE,
            format_args!("the dirty server replies (id {}, size {})", h.id, h.size),
        )
    }

    /// A call to the reporting server: the registers it found at entry.
    fn report(&mut self, s: &Server, via: Via) -> Result<[u64; REGS], Failed> {
        let (h, regs, v) = self.call(s.port, REPORT, via)?;
        check_quiet(
            h.id == REPORT && h.size as usize == HEADER_SIZE + 8 * REGS + VBYTES,
            format_args!(
                "the reporting server replies (id {}, size {})",
                h.id, h.size
            ),
        )?;
        let bad = v.iter().position(|&w| w != 0);
        check_quiet(
            bad.is_none(),
            format_args!(
                "the reporting server found vector register {} holding {:#x} at entry, not 0",
                bad.unwrap_or(0) / 4,
                bad.map_or(0, |i| v[i])
            ),
        )?;
        Ok(regs)
    }
}

/// Prints `TEST FAIL` with `what` unless `cond` holds (no `ok:` line: for checks made on
/// every call).
fn check_quiet(cond: bool, what: core::fmt::Arguments) -> Result<(), Failed> {
    if cond {
        Ok(())
    } else {
        println!("TEST FAIL {TEST}: {what}");
        Err(Failed)
    }
}

/// What a reporting server may find in its registers at entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The box last held another task's registers (or none): arguments, every other
    /// register 0.
    Clear,
    /// The box last held this server's own: arguments, every other register 0 or what the
    /// server left there itself.
    OwnOrClear,
}

/// Values no report may hold: the dirty server's registers and flags, the address its
/// `act_return` returns to, the client's register pattern.
fn foreign(dirty: &Server) -> [u64; 2 * REGS + 2] {
    let mut v = [0u64; 2 * REGS + 2];
    for i in 0..REGS {
        v[i] = regs_proto::dirty(i);
        v[REGS + i] = client(i);
    }
    v[2 * REGS] = DIRTY_FLAGS;
    v[2 * REGS + 1] = dirty.info.dirty_return;
    v
}

/// Why register `i` of a report is wrong, or `None`; a register holding the reporting
/// server's own value counts in `own_seen`.
fn judge(
    i: usize,
    v: u64,
    report: &Info,
    foreign: &[u64],
    expect: Expect,
    own_seen: &mut u32,
) -> Option<&'static str> {
    if foreign.contains(&v) {
        return Some("another task's value");
    }
    let argument = match i {
        RDI => Some(report.buffer),
        RSI => Some(HEADER_SIZE as u64),
        RDX => Some(report.act),
        R8 => Some(report.cookie),
        RSP => Some(report.stack_top),
        RFLAGS => Some(USER_FLAGS),
        _ => None,
    };
    if let Some(a) = argument {
        return (v != a).then_some("not the documented value");
    }
    // `sysretq` loads rcx with the entry and r11 with the flags.
    let loaded = match i {
        RCX => report.entry,
        R11 => USER_FLAGS,
        _ => 0,
    };
    if v == 0 || v == loaded {
        return None;
    }
    if expect == Expect::OwnOrClear {
        // What the reporting server left: its pattern, and the call number in rax.
        let left = if i == RAX {
            Sys::ActReturn as u64
        } else {
            own(i)
        };
        if v == left {
            *own_seen += 1;
            return None;
        }
        return Some("neither 0 nor the reporting server's own value");
    }
    Some("not 0")
}

/// Fails the test (naming the register) unless every register of `regs` passes
/// [`judge`]; the number of registers holding the reporting server's own values.
fn check_report(
    regs: &[u64; REGS],
    report: &Server,
    foreign: &[u64],
    expect: Expect,
    when: &str,
) -> Result<u32, Failed> {
    let mut own_seen = 0;
    // Another task's values first (the worst failure names one if there is one).
    let leaked = regs.iter().position(|v| foreign.contains(v));
    let order = leaked.into_iter().chain(0..REGS);
    for i in order {
        let v = regs[i];
        if let Some(why) = judge(i, v, &report.info, foreign, expect, &mut own_seen) {
            println!(
                "TEST FAIL {TEST}: {when}: the reporting server found {} = {v:#x} at entry: {why}",
                NAMES[i]
            );
            for (n, r) in NAMES.iter().zip(regs) {
                println!("  {n} = {r:#x}");
            }
            return Err(Failed);
        }
    }
    Ok(own_seen)
}

fn run() -> Result<(), Failed> {
    let avx = avx();
    REGS_AVX.store(u8::from(avx), core::sync::atomic::Ordering::Relaxed);
    println!(
        "vector registers checked: {}",
        if avx { "YMM (AVX)" } else { "XMM" }
    );
    let base = must("stats", stats())?;
    let mut c = Client {
        ipc: must("ipc buffer", IpcBuffer::new())?,
        reply: must("reply port", port_allocate(0))?,
        calls: 0,
    };
    let (dp, di) = must("start dirty regs_server", start(&mut c.ipc, DIRTY))?;
    let (rp, ri) = must("start reporting regs_server", start(&mut c.ipc, REPORT))?;
    let dirty = Server { port: dp, info: di };
    let report = Server { port: rp, info: ri };
    let foreign = foreign(&dirty);
    let before = must("stats", stats())?;

    // 1. This thread's first migrating call.
    let regs = c.report(&report, Via::IpcBuffer)?;
    check_report(&regs, &report, &foreign, Expect::Clear, "first call")?;
    println!(
        "ok: the first call of a thread into a server finds its arguments, every other register 0"
    );

    // 2. Dirty, then reporting (cleared), reporting again (its own may show), round after
    //    round, through both kinds of buffer.
    let mut own_seen = 0;
    for round in 0..ROUNDS {
        let via = if round % 2 == 0 {
            Via::IpcBuffer
        } else {
            Via::OwnBuffer
        };
        c.dirty(&dirty, via)?;
        let regs = c.report(&report, via)?;
        check_report(
            &regs,
            &report,
            &foreign,
            Expect::Clear,
            "after the dirty server",
        )?;
        let regs = c.report(&report, via)?;
        own_seen += check_report(&regs, &report, &foreign, Expect::OwnOrClear, "repeated")?;
    }
    // Every check above fails the test at once; what held, in order:
    println!("ok: around every migrating call the client's registers come back as they were, none of a server's");
    println!("ok: every migrating call and return clears the vector registers: the server finds them 0 at entry, the client after the return");
    println!("ok: after a call into another task, the next call into the reporting server finds its arguments, every other register 0");
    println!("ok: a repeated call into the same server finds no other task's registers ({own_seen} of its own values left over in {ROUNDS} calls)");
    println!(
        "ok: the same through the IPC buffer and through a buffer of the caller's own (MSG_BUF)"
    );
    let after = must("stats", stats())?;
    let migrated = after.migrations - before.migrations;
    check!(
        migrated == c.calls && after.ipc_queued == before.ipc_queued,
        "every call migrated ({migrated} of {}), none was queued",
        c.calls
    );

    // 3. The dirty server ends while this thread's spare frame box holds its registers; a
    //    server started after it (most likely in its slot of the kernel's task table, under
    //    a new generation) must not see them.
    c.dirty(&dirty, Via::IpcBuffer)?;
    let acts = must("stats", stats())?.activations;
    must("exit", c.ipc.send(dirty.port, EXIT, &[], &[]))?;
    must("drop", baton_rt::ipc::cap_drop(dirty.port))?;
    let mut gone = false;
    for _ in 0..200 {
        if must("stats", stats())?.activations < acts {
            gone = true;
            break;
        }
        must("wait", baton_rt::sleep_ns(1_000_000))?;
    }
    check!(gone, "the dirty server ended");
    // Two timer ticks: a task that lingered is removed at the next one, freeing its slot.
    must("wait", baton_rt::sleep_ns(20_000_000))?;
    let (rp2, ri2) = must("start reporting regs_server", start(&mut c.ipc, REPORT))?;
    let later = Server {
        port: rp2,
        info: ri2,
    };
    let before = must("stats", stats())?;
    let regs = c.report(&later, Via::IpcBuffer)?;
    let after = must("stats", stats())?;
    check_report(
        &regs,
        &later,
        &foreign,
        Expect::Clear,
        "after the dirty server ended",
    )?;
    check!(
        after.migrations == before.migrations + 1,
        "a server started after the dirty server ended finds its arguments, every other register 0"
    );

    // 4. Everything back.
    for s in [&report, &later] {
        must("exit", c.ipc.send(s.port, EXIT, &[], &[]))?;
        must("drop", baton_rt::ipc::cap_drop(s.port))?;
    }
    must("drop reply", baton_rt::ipc::cap_drop(c.reply))?;
    let now = baton_rt::check::settled(TEST, &base)?;
    check!(
        now.activations == base.activations
            && now.ports == base.ports
            && now.names == base.names
            && now.messages_queued == base.messages_queued,
        "activations, ports, names and queued messages back to the baseline ({} {} {} {})",
        now.activations,
        now.ports,
        now.names,
        now.messages_queued
    );
    Ok(())
}
