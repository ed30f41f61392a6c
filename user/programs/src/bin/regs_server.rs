//! `regs_server`: the migrating-RPC servers of the `migrate_regs` test (spawned by it, twice,
//! never alone).
//!
//! It sends a send right to its port to its bootstrap port (`HELLO`), reads a one-way
//! `CONFIG` message with its mode, attaches one activation whose entry is raw assembly, and
//! says `READY` with the activation's entry, stack top, buffer, id and cookie (what the
//! kernel passes at entry). Then its own thread waits for `EXIT`.
//!
//! - Mode `DIRTY` ([`regs_dirty_entry`]): the activation writes a reply header, then fills
//!   every general register and the flags with the dirty pattern (`regs_proto::dirty`,
//!   `DIRTY_FLAGS`) and calls `act_return` with them: its registers are left in whatever
//!   the kernel keeps an activation's registers in.
//! - Mode `REPORT` ([`regs_report_entry`]): the activation stores every general register
//!   and the flags, as they are at entry, into its buffer after the reply header (before
//!   anything else runs), writes the header, fills the registers with its own pattern
//!   (`regs_proto::own`) and calls `act_return`.
#![no_std]
#![no_main]

use core::arch::global_asm;

use baton_abi::Sys;
use baton_rt::ipc::{port_allocate, Descriptor, Disposition, IpcBuffer, HEADER_SIZE, MSG_RECEIVE};
use baton_rt::{migrate, println, start::bootstrap, Error, FOREVER};

#[path = "../regs_proto.rs"]
mod regs_proto;

use regs_proto::*;

baton_rt::entry!(main);

/// Where the activation's stack and buffer are mapped (one region per mode, so the two
/// servers' addresses differ).
const REGION: u64 = 0x6a00_0000_0000;
/// Bytes of the activation's stack (the entries push at most one word).
const STACK: u64 = 16 * 1024;
/// Bytes of the buffer (one page).
const PAGE: u64 = 4096;

global_asm!(
    r#"
    .global regs_dirty_entry
regs_dirty_entry:
    // Every vector register dirty.
    cmpb $0, {avx}(%rip)
    je 81f
    vmovdqu {dv}+0(%rip), %ymm0
    vmovdqu {dv}+32(%rip), %ymm1
    vmovdqu {dv}+64(%rip), %ymm2
    vmovdqu {dv}+96(%rip), %ymm3
    vmovdqu {dv}+128(%rip), %ymm4
    vmovdqu {dv}+160(%rip), %ymm5
    vmovdqu {dv}+192(%rip), %ymm6
    vmovdqu {dv}+224(%rip), %ymm7
    vmovdqu {dv}+256(%rip), %ymm8
    vmovdqu {dv}+288(%rip), %ymm9
    vmovdqu {dv}+320(%rip), %ymm10
    vmovdqu {dv}+352(%rip), %ymm11
    vmovdqu {dv}+384(%rip), %ymm12
    vmovdqu {dv}+416(%rip), %ymm13
    vmovdqu {dv}+448(%rip), %ymm14
    vmovdqu {dv}+480(%rip), %ymm15
    jmp 82f
81:
    movdqu {dv}+0(%rip), %xmm0
    movdqu {dv}+32(%rip), %xmm1
    movdqu {dv}+64(%rip), %xmm2
    movdqu {dv}+96(%rip), %xmm3
    movdqu {dv}+128(%rip), %xmm4
    movdqu {dv}+160(%rip), %xmm5
    movdqu {dv}+192(%rip), %xmm6
    movdqu {dv}+224(%rip), %xmm7
    movdqu {dv}+256(%rip), %xmm8
    movdqu {dv}+288(%rip), %xmm9
    movdqu {dv}+320(%rip), %xmm10
    movdqu {dv}+352(%rip), %xmm11
    movdqu {dv}+384(%rip), %xmm12
    movdqu {dv}+416(%rip), %xmm13
    movdqu {dv}+448(%rip), %xmm14
    movdqu {dv}+480(%rip), %xmm15
82:
    // The reply, a header alone: bits 0, size, dest 0, reply 0, id.
    movl $0, 0(%rdi)
    movl ${header}, 4(%rdi)
    movq $0, 8(%rdi)
    movq $0, 16(%rdi)
    movq ${dirty_id}, 24(%rdi)
    // Every register but rax (the call number) dirty, the flags too (no flag changes
    // after the `popfq`: `movabs` and `movl` leave them).
    pushq ${dirty_flags}
    popfq
    movabs ${d1}, %rbx
    movabs ${d2}, %rcx
    movabs ${d3}, %rdx
    movabs ${d4}, %rsi
    movabs ${d5}, %rdi
    movabs ${d6}, %rbp
    movabs ${d7}, %rsp
    movabs ${d8}, %r8
    movabs ${d9}, %r9
    movabs ${d10}, %r10
    movabs ${d11}, %r11
    movabs ${d12}, %r12
    movabs ${d13}, %r13
    movabs ${d14}, %r14
    movabs ${d15}, %r15
    movl ${act_return}, %eax
    syscall
    .global regs_dirty_return
regs_dirty_return:
    ud2

    .global regs_report_entry
regs_report_entry:
    // Every register as it is at entry, first (rdi is the buffer, as documented).
    movq %rax, 32(%rdi)
    movq %rbx, 40(%rdi)
    movq %rcx, 48(%rdi)
    movq %rdx, 56(%rdi)
    movq %rsi, 64(%rdi)
    movq %rdi, 72(%rdi)
    movq %rbp, 80(%rdi)
    movq %rsp, 88(%rdi)
    movq %r8, 96(%rdi)
    movq %r9, 104(%rdi)
    movq %r10, 112(%rdi)
    movq %r11, 120(%rdi)
    movq %r12, 128(%rdi)
    movq %r13, 136(%rdi)
    movq %r14, 144(%rdi)
    movq %r15, 152(%rdi)
    pushfq
    popq 160(%rdi)
    // Every vector register as it is at entry, after the words.
    cmpb $0, {avx}(%rip)
    je 71f
    vmovdqu %ymm0, 168(%rdi)
    vmovdqu %ymm1, 200(%rdi)
    vmovdqu %ymm2, 232(%rdi)
    vmovdqu %ymm3, 264(%rdi)
    vmovdqu %ymm4, 296(%rdi)
    vmovdqu %ymm5, 328(%rdi)
    vmovdqu %ymm6, 360(%rdi)
    vmovdqu %ymm7, 392(%rdi)
    vmovdqu %ymm8, 424(%rdi)
    vmovdqu %ymm9, 456(%rdi)
    vmovdqu %ymm10, 488(%rdi)
    vmovdqu %ymm11, 520(%rdi)
    vmovdqu %ymm12, 552(%rdi)
    vmovdqu %ymm13, 584(%rdi)
    vmovdqu %ymm14, 616(%rdi)
    vmovdqu %ymm15, 648(%rdi)
    jmp 72f
71:
    movdqu %xmm0, 168(%rdi)
    movq $0, 184(%rdi)
    movq $0, 192(%rdi)
    movdqu %xmm1, 200(%rdi)
    movq $0, 216(%rdi)
    movq $0, 224(%rdi)
    movdqu %xmm2, 232(%rdi)
    movq $0, 248(%rdi)
    movq $0, 256(%rdi)
    movdqu %xmm3, 264(%rdi)
    movq $0, 280(%rdi)
    movq $0, 288(%rdi)
    movdqu %xmm4, 296(%rdi)
    movq $0, 312(%rdi)
    movq $0, 320(%rdi)
    movdqu %xmm5, 328(%rdi)
    movq $0, 344(%rdi)
    movq $0, 352(%rdi)
    movdqu %xmm6, 360(%rdi)
    movq $0, 376(%rdi)
    movq $0, 384(%rdi)
    movdqu %xmm7, 392(%rdi)
    movq $0, 408(%rdi)
    movq $0, 416(%rdi)
    movdqu %xmm8, 424(%rdi)
    movq $0, 440(%rdi)
    movq $0, 448(%rdi)
    movdqu %xmm9, 456(%rdi)
    movq $0, 472(%rdi)
    movq $0, 480(%rdi)
    movdqu %xmm10, 488(%rdi)
    movq $0, 504(%rdi)
    movq $0, 512(%rdi)
    movdqu %xmm11, 520(%rdi)
    movq $0, 536(%rdi)
    movq $0, 544(%rdi)
    movdqu %xmm12, 552(%rdi)
    movq $0, 568(%rdi)
    movq $0, 576(%rdi)
    movdqu %xmm13, 584(%rdi)
    movq $0, 600(%rdi)
    movq $0, 608(%rdi)
    movdqu %xmm14, 616(%rdi)
    movq $0, 632(%rdi)
    movq $0, 640(%rdi)
    movdqu %xmm15, 648(%rdi)
    movq $0, 664(%rdi)
    movq $0, 672(%rdi)
72:
    // The reply header: bits 0, size (header and the words), dest 0, reply 0, id.
    movl $0, 0(%rdi)
    movl ${report_size}, 4(%rdi)
    movq $0, 8(%rdi)
    movq $0, 16(%rdi)
    movq ${report_id}, 24(%rdi)
    // Its own values left behind (a later call into this task may see them).
    cmpb $0, {avx}(%rip)
    je 91f
    vmovdqu {ov}+0(%rip), %ymm0
    vmovdqu {ov}+32(%rip), %ymm1
    vmovdqu {ov}+64(%rip), %ymm2
    vmovdqu {ov}+96(%rip), %ymm3
    vmovdqu {ov}+128(%rip), %ymm4
    vmovdqu {ov}+160(%rip), %ymm5
    vmovdqu {ov}+192(%rip), %ymm6
    vmovdqu {ov}+224(%rip), %ymm7
    vmovdqu {ov}+256(%rip), %ymm8
    vmovdqu {ov}+288(%rip), %ymm9
    vmovdqu {ov}+320(%rip), %ymm10
    vmovdqu {ov}+352(%rip), %ymm11
    vmovdqu {ov}+384(%rip), %ymm12
    vmovdqu {ov}+416(%rip), %ymm13
    vmovdqu {ov}+448(%rip), %ymm14
    vmovdqu {ov}+480(%rip), %ymm15
    jmp 92f
91:
    movdqu {ov}+0(%rip), %xmm0
    movdqu {ov}+32(%rip), %xmm1
    movdqu {ov}+64(%rip), %xmm2
    movdqu {ov}+96(%rip), %xmm3
    movdqu {ov}+128(%rip), %xmm4
    movdqu {ov}+160(%rip), %xmm5
    movdqu {ov}+192(%rip), %xmm6
    movdqu {ov}+224(%rip), %xmm7
    movdqu {ov}+256(%rip), %xmm8
    movdqu {ov}+288(%rip), %xmm9
    movdqu {ov}+320(%rip), %xmm10
    movdqu {ov}+352(%rip), %xmm11
    movdqu {ov}+384(%rip), %xmm12
    movdqu {ov}+416(%rip), %xmm13
    movdqu {ov}+448(%rip), %xmm14
    movdqu {ov}+480(%rip), %xmm15
92:
    movabs ${o1}, %rbx
    movabs ${o2}, %rcx
    movabs ${o3}, %rdx
    movabs ${o4}, %rsi
    movabs ${o5}, %rdi
    movabs ${o6}, %rbp
    movabs ${o7}, %rsp
    movabs ${o8}, %r8
    movabs ${o9}, %r9
    movabs ${o10}, %r10
    movabs ${o11}, %r11
    movabs ${o12}, %r12
    movabs ${o13}, %r13
    movabs ${o14}, %r14
    movabs ${o15}, %r15
    movl ${act_return}, %eax
    syscall
    ud2
    "#,
    header = const HEADER_SIZE,
    report_size = const HEADER_SIZE + 8 * REGS + VBYTES,
    dirty_id = const DIRTY,
    report_id = const REPORT,
    dirty_flags = const DIRTY_FLAGS,
    act_return = const Sys::ActReturn as u64,
    d1 = const dirty(1),
    d2 = const dirty(2),
    d3 = const dirty(3),
    d4 = const dirty(4),
    d5 = const dirty(5),
    d6 = const dirty(6),
    d7 = const dirty(7),
    d8 = const dirty(8),
    d9 = const dirty(9),
    d10 = const dirty(10),
    d11 = const dirty(11),
    d12 = const dirty(12),
    d13 = const dirty(13),
    d14 = const dirty(14),
    d15 = const dirty(15),
    o1 = const own(1),
    o2 = const own(2),
    o3 = const own(3),
    o4 = const own(4),
    o5 = const own(5),
    o6 = const own(6),
    o7 = const own(7),
    o8 = const own(8),
    o9 = const own(9),
    o10 = const own(10),
    o11 = const own(11),
    o12 = const own(12),
    o13 = const own(13),
    o14 = const own(14),
    o15 = const own(15),
    dv = sym DIRTY_V,
    ov = sym OWN_V,
    avx = sym REGS_AVX,
    options(att_syntax)
);

/// The dirty server's vector registers.
static DIRTY_V: [u8; VBYTES] = vpattern(0xd1);
/// The vector registers the reporting server leaves behind.
static OWN_V: [u8; VBYTES] = vpattern(0x0e);
/// 1 when the entries use the YMM registers (AVX), 0 for XMM only: set before the
/// activation is attached.
static REGS_AVX: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

extern "C" {
    /// The dirty server's activation entry (see the module documentation).
    fn regs_dirty_entry();
    /// The instruction after the dirty entry's `act_return` (never reached).
    fn regs_dirty_return();
    /// The reporting server's activation entry (see the module documentation).
    fn regs_report_entry();
}

fn main(_task_id: u64) -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL regs_server: {}", e.name());
            1
        }
    }
}

fn serve() -> Result<(), Error> {
    REGS_AVX.store(u8::from(avx()), core::sync::atomic::Ordering::Relaxed);
    let boot = bootstrap();
    let mut buf = IpcBuffer::new()?;
    let port = port_allocate(0)?;
    buf.send(
        boot,
        HELLO,
        &[Descriptor::port(port, Disposition::MakeSend)],
        &[],
    )?;
    buf.msg(MSG_RECEIVE, port, FOREVER)?;
    if buf.header().id != CONFIG {
        return Err(Error::InvalidArgument);
    }
    let mode = word(buf.data(), 0);
    let entry = match mode {
        DIRTY => regs_dirty_entry as *const () as usize as u64,
        REPORT => regs_report_entry as *const () as usize as u64,
        _ => return Err(Error::InvalidArgument),
    };
    // The stack, then the buffer page, then an unmapped guard page.
    let base = REGION + (mode - DIRTY) * 0x100_0000;
    baton_rt::sys::mem_map(base, STACK + PAGE, true)?;
    let stack_top = base + STACK;
    let buffer = stack_top;
    let cookie = COOKIE_BASE | mode;
    let act = migrate::create_raw(port, entry, stack_top, buffer, cookie)?;
    let info = Info {
        entry,
        stack_top,
        buffer,
        act,
        cookie,
        dirty_return: regs_dirty_return as *const () as usize as u64,
    };
    let mut data = [0u8; 8 * INFO_WORDS];
    for (i, w) in info.to_words().iter().enumerate() {
        data[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    buf.send(boot, READY, &[], &data)?;
    loop {
        buf.msg(MSG_RECEIVE, port, FOREVER)?;
        let h = buf.header();
        if h.id == EXIT {
            return Ok(());
        }
        // Anything else (a call that did not migrate): dropping its reply right answers it
        // (the caller's stub sees a dead reply) rather than leaving the caller waiting.
        if h.reply != 0 {
            let _ = baton_rt::ipc::cap_drop(h.reply);
        }
    }
}
