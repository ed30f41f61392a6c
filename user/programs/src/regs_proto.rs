//! The protocol of `regs_server`, the two migrating-RPC servers of the `migrate_regs` test
//! (which registers a server finds at the entry of its activation): the message ids, the
//! register patterns, the layout of a register report, and the client's side of starting
//! a server. Both programs include this file with
//! `#[path = "../regs_proto.rs"] mod regs_proto;`.
//!
//! `regs_server` is one program started twice: as the *dirty* server, whose activation
//! fills every register with [`dirty`] values before `act_return`, and as the *reporting*
//! server, whose activation replies with every register as it found it at entry
//! ([`REGS`] words, in [`NAMES`]' order, then the vector registers, [`VBYTES`]) and then
//! fills them with [`own`] values before `act_return`; each fills the vector registers too. Both activations are raw `global_asm!`: no compiled code runs between the
//! kernel's entry and the report.

// Each program uses part of the protocol.
#![allow(dead_code)]

use baton_rt::ipc::{port_allocate, IpcBuffer, MSG_RECEIVE};
use baton_rt::{spawn_with, Error, FOREVER};

/// One-way, server → bootstrap: carries a send right to the server's port.
pub const HELLO: u64 = 1;
/// One-way, client → server: data = the mode (u64: [`DIRTY`] or [`REPORT`]).
pub const CONFIG: u64 = 2;
/// One-way, server → bootstrap: the activation is attached; data = [`Info`]'s words.
pub const READY: u64 = 3;
/// One-way, client → server: exit.
pub const EXIT: u64 = 5;

/// Mode, and the id of its replies: the dirty server (its reply is a header alone).
pub const DIRTY: u64 = 40;
/// Mode, and the id of its replies: the reporting server (its reply carries [`REGS`]
/// words).
pub const REPORT: u64 = 41;

/// Registers in a report, in this order (`rflags` last).
pub const NAMES: [&str; REGS] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rflags",
];
/// Words in a register report.
pub const REGS: usize = 17;
/// Indices into a report.
pub const RAX: usize = 0;
/// See [`RAX`].
pub const RCX: usize = 2;
/// See [`RAX`].
pub const RDX: usize = 3;
/// See [`RAX`].
pub const RSI: usize = 4;
/// See [`RAX`].
pub const RDI: usize = 5;
/// See [`RAX`].
pub const RSP: usize = 7;
/// See [`RAX`].
pub const R8: usize = 8;
/// See [`RAX`].
pub const R9: usize = 9;
/// See [`RAX`].
pub const R10: usize = 10;
/// See [`RAX`].
pub const R11: usize = 11;
/// See [`RAX`].
pub const RFLAGS: usize = 16;

/// The high bits of the dirty server's register values.
pub const DIRTY_BASE: u64 = 0x005E_C2E7_0000_0000;
/// The high bits of the reporting server's own values (what it leaves behind).
pub const OWN_BASE: u64 = 0x002E_9027_0000_0000;
/// The high bits of the client's values around its calls.
pub const CLIENT_BASE: u64 = 0x00C1_1E27_0000_0000;

/// The value the dirty server puts in register `i` (of [`NAMES`]).
pub const fn dirty(i: usize) -> u64 {
    DIRTY_BASE | i as u64
}

/// The value the reporting server leaves in register `i` (of [`NAMES`]).
pub const fn own(i: usize) -> u64 {
    OWN_BASE | i as u64
}

/// The value the client keeps in register `i` (of [`NAMES`]) across a call.
pub const fn client(i: usize) -> u64 {
    CLIENT_BASE | i as u64
}

/// The flags the dirty server sets before `act_return`: CF, PF, AF, ZF, SF, DF and OF
/// (with IF and the always-one bit 1).
pub const DIRTY_FLAGS: u64 = 0xed7;
/// The status flags and DF among them: none may reach another task.
pub const DIRTY_STATUS: u64 = 0xcd5;
/// The flags user mode runs with after the kernel enters it: IF and bit 1.
pub const USER_FLAGS: u64 = 0x202;

/// The activation's cookie: this with the mode in the low bits.
pub const COOKIE_BASE: u64 = 0x00C0_0C1E_0000_0000;

/// What a server says in [`READY`]: its activation as the kernel enters it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Info {
    /// The entry point (`rip` at entry).
    pub entry: u64,
    /// The stack top (`rsp` at entry).
    pub stack_top: u64,
    /// The buffer (`rdi` at entry).
    pub buffer: u64,
    /// The activation's id (`rdx` at entry).
    pub act: u64,
    /// The cookie (`r8` at entry).
    pub cookie: u64,
    /// Where the dirty server's `act_return` would return to (its `rcx` at the
    /// `syscall`): a value of that task that no other may see.
    pub dirty_return: u64,
}

/// Words of [`Info`].
pub const INFO_WORDS: usize = 6;

impl Info {
    /// As words, for [`READY`].
    pub fn to_words(self) -> [u64; INFO_WORDS] {
        [
            self.entry,
            self.stack_top,
            self.buffer,
            self.act,
            self.cookie,
            self.dirty_return,
        ]
    }

    /// From [`READY`]'s data.
    pub fn from_bytes(data: &[u8]) -> Info {
        Info {
            entry: word(data, 0),
            stack_top: word(data, 1),
            buffer: word(data, 2),
            act: word(data, 3),
            cookie: word(data, 4),
            dirty_return: word(data, 5),
        }
    }
}

#[allow(unused_imports)]
pub use baton_rt::ipc::data_word as word;

/// Starts a `regs_server` in `mode` ([`DIRTY`] or [`REPORT`]), waits until its activation
/// is attached, and returns the send right to its port and what it said about the
/// activation. [`Error::BadFormat`] if the server does not follow the protocol.
pub fn start(buf: &mut IpcBuffer, mode: u64) -> Result<(u64, Info), Error> {
    let boot = port_allocate(0)?;
    spawn_with("regs_server", boot)?;
    buf.msg(MSG_RECEIVE, boot, FOREVER)?;
    let server = match (buf.header().id, buf.descriptor(0)) {
        (HELLO, Some(d)) => d.value,
        _ => return Err(Error::BadFormat),
    };
    buf.send(server, CONFIG, &[], &mode.to_le_bytes())?;
    buf.msg(MSG_RECEIVE, boot, FOREVER)?;
    if buf.header().id != READY {
        return Err(Error::BadFormat);
    }
    let info = Info::from_bytes(buf.data());
    baton_rt::ipc::cap_drop(boot)?;
    Ok((server, info))
}

/// Bytes of the vector part of a report, after its [`REGS`] words: the 16 vector registers
/// at 32 bytes each (YMM with AVX; without it XMM, in each slot's low 16 bytes, the upper
/// 16 zero).
pub const VBYTES: usize = 512;
/// Words of the vector part.
pub const VWORDS: usize = VBYTES / 8;

/// A vector-register pattern: 16 registers of 32 bytes, no byte zero (every register of a
/// report must be zero, so any of these bytes that shows through is a leak).
pub const fn vpattern(base: u8) -> [u8; VBYTES] {
    let mut p = [0u8; VBYTES];
    let mut i = 0;
    while i < VBYTES {
        p[i] = base.wrapping_add(i as u8) | 1;
        i += 1;
    }
    p
}

/// Whether the AVX registers (YMM) are usable here: the CPU has AVX and the kernel
/// enabled its state in `XCR0` (CPUID's OSXSAVE, then `xgetbv`).
pub fn avx() -> bool {
    // CPUID leaf 1 exists on every x86-64 processor and runs in user mode.
    let l1 = core::arch::x86_64::__cpuid(1);
    if l1.ecx & (1 << 27) == 0 || l1.ecx & (1 << 28) == 0 {
        return false;
    }
    let (lo, _hi): (u32, u32);
    // SAFETY: `xgetbv` with ECX 0 is valid when CPUID says OSXSAVE (checked above).
    unsafe {
        core::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") _hi,
            options(nomem, nostack, preserves_flags));
    }
    lo & 0b110 == 0b110
}
