//! Migrating RPC servers (seed 001): a server attaches activations to its port, and each
//! call runs a dispatch function on the *caller's* thread, in this task, on one of them.
//!
//! ```ignore
//! fn dispatch(req: &mut Request) {
//!     let id = req.header().id;
//!     req.reply(id, b"pong");
//! }
//! let port = port_allocate(0)?;
//! baton_rt::migrate::attach(port, 4, dispatch)?;
//! ```
//!
//! Clients need nothing new: any `ipc_msg(SEND | RECEIVE)` request without descriptors to
//! the port migrates (their reply port is never used), so an interface macro client or a
//! hand-written call works unchanged.
//!
//! Each activation gets its own stack ([`STACK_SIZE`]) and buffer page from a region of the
//! address space reserved here; the kernel enters [`migrate_entry`] with `rdi` = the
//! buffer, `rsi` = the request size (0 for a sidetrack upcall), `rdx` = the activation id
//! and `r8` = the dispatch function, which returns through `act_return`.

use crate::ipc::{MsgHeader, HEADER_SIZE, IPC_BUFFER_SIZE};
use crate::raw::{syscall1, syscall2, syscall6};
use crate::sys::mem_map;
use baton_abi::{Error, Sys};
use core::arch::global_asm;
use core::sync::atomic::{AtomicU64, Ordering};

/// Bytes of user stack per activation.
pub const STACK_SIZE: u64 = 16 * 1024;
/// Where activation stacks and buffers are mapped.
const ACT_REGION: u64 = 0x6800_0000_0000;
static NEXT: AtomicU64 = AtomicU64::new(ACT_REGION);

/// A request in an activation's buffer, answered in place.
pub struct Request {
    buf: *mut [u8; IPC_BUFFER_SIZE],
    size: usize,
    /// The activation running it.
    pub activation: u64,
}

impl Request {
    /// The user address of this activation's buffer page.
    pub fn buffer_address(&self) -> u64 {
        self.buf as u64
    }

    /// Whether this is a sidetrack upcall (no request: the pool is about to run dry, and
    /// the server may [`attach`] more activations before returning).
    pub fn is_sidetrack(&self) -> bool {
        self.size == 0
    }

    fn bytes(&mut self) -> &mut [u8; IPC_BUFFER_SIZE] {
        // SAFETY: the kernel passed a buffer page of this activation, mapped writable for
        // the activation's lifetime; only this call uses it until it returns.
        unsafe { &mut *self.buf }
    }

    /// The request's header (id and size).
    pub fn header(&mut self) -> MsgHeader {
        let b = self.bytes();
        let mut h = [0u8; HEADER_SIZE];
        h.copy_from_slice(&b[..HEADER_SIZE]);
        MsgHeader::from_bytes(&h).unwrap_or_default()
    }

    /// The request's in-line data.
    pub fn data(&mut self) -> &[u8] {
        let size = self.size.clamp(HEADER_SIZE, IPC_BUFFER_SIZE);
        &self.bytes()[HEADER_SIZE..size]
    }

    /// Overwrites the buffer's header (for a nested call made through this buffer).
    pub fn write_header(&mut self, h: MsgHeader) {
        self.bytes()[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    }

    /// Writes the reply: message id `id` and in-line `data` (truncated to the buffer).
    pub fn reply(&mut self, id: u64, data: &[u8]) {
        let n = data.len().min(IPC_BUFFER_SIZE - HEADER_SIZE);
        let b = self.bytes();
        b[HEADER_SIZE..HEADER_SIZE + n].copy_from_slice(&data[..n]);
        self.reply_in_place(id, n);
    }

    /// Writes a reply header with id `id` over `len` bytes of data already in place (an
    /// echo leaves the request's data where it is).
    pub fn reply_in_place(&mut self, id: u64, len: usize) {
        let h = MsgHeader {
            bits: 0,
            size: (HEADER_SIZE + len.min(IPC_BUFFER_SIZE - HEADER_SIZE)) as u32,
            dest: 0,
            reply: 0,
            id,
        };
        self.bytes()[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    }
}

/// A dispatch function: answers the request in place.
pub type Dispatch = fn(&mut Request);

/// The Rust half of the entry: builds the [`Request`] and calls the dispatch function
/// whose address the kernel passed as the cookie.
extern "C" fn migrate_dispatch(buf: u64, size: u64, act: u64, f: u64) {
    // SAFETY: `f` is the cookie given to `act_create` by `attach`, always a `Dispatch`.
    let f: Dispatch = unsafe { core::mem::transmute::<u64, Dispatch>(f) };
    let mut req = Request {
        buf: buf as *mut [u8; IPC_BUFFER_SIZE],
        size: size as usize,
        activation: act,
    };
    f(&mut req);
}

global_asm!(
    r#"
    .global migrate_entry
migrate_entry:
    mov %r8, %rcx
    call {dispatch}
    mov ${act_return}, %eax
    syscall
    ud2
    "#,
    dispatch = sym migrate_dispatch,
    act_return = const Sys::ActReturn as u64,
    options(att_syntax)
);

extern "C" {
    /// Where the kernel enters an activation (see the module documentation).
    fn migrate_entry();
}

/// Attaches `count` new activations running `dispatch` to the port whose receive right is
/// `port`; returns the id of the last one.
pub fn attach(port: u64, count: usize, dispatch: Dispatch) -> Result<u64, Error> {
    let mut last = 0;
    for _ in 0..count {
        let base = NEXT.fetch_add(STACK_SIZE + 2 * IPC_BUFFER_SIZE as u64, Ordering::Relaxed);
        // A guard page is left unmapped above the buffer.
        mem_map(base, STACK_SIZE + IPC_BUFFER_SIZE as u64, true)?;
        let stack_top = base + STACK_SIZE;
        let buffer = stack_top;
        last = create_raw(
            port,
            migrate_entry as *const () as usize as u64,
            stack_top,
            buffer,
            dispatch as usize as u64,
        )?;
    }
    Ok(last)
}

/// `act_create` with raw arguments (for tests that pass what [`attach`] would not).
pub fn create_raw(
    port: u64,
    entry: u64,
    stack_top: u64,
    buffer: u64,
    cookie: u64,
) -> Result<u64, Error> {
    // SAFETY: `act_create` reads no user memory (it translates `buffer`).
    baton_abi::decode_result(unsafe {
        syscall6(
            Sys::ActCreate as u64,
            port,
            entry,
            stack_top,
            buffer,
            cookie,
            0,
        )
    })
}

/// `port_sidetrack(port, on)`.
pub fn sidetrack(port: u64, on: bool) -> Result<(), Error> {
    // SAFETY: touches no user memory.
    baton_abi::decode_result(unsafe { syscall2(Sys::PortSidetrack as u64, port, u64::from(on)) })
        .map(|_| ())
}

/// `act_return()` from outside a migrating call: the kernel refuses it.
pub fn act_return_outside() -> Result<(), Error> {
    // SAFETY: touches no user memory; outside a migrating call it returns an error.
    baton_abi::decode_result(unsafe { syscall1(Sys::ActReturn as u64, 0) }).map(|_| ())
}

/// An activation a control call acts on (seed 001 section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// The home activation of a thread of this task (0: the calling thread's running one).
    Thread(u64),
    /// One of this task's pool activations, while a call occupies it (its id, as
    /// [`Request::activation`] gives it).
    Pool(u64),
}

impl Act {
    fn words(self) -> (u64, u64) {
        match self {
            Act::Thread(t) => (0, t),
            Act::Pool(a) => (1, a),
        }
    }
}

/// Alerts `act` and every activation above it on its thread.
pub fn alert(act: Act) -> Result<(), Error> {
    let (kind, id) = act.words();
    // SAFETY: touches no user memory.
    baton_abi::decode_result(unsafe { syscall2(Sys::ActAlert as u64, kind, id) }).map(|_| ())
}

/// Whether the calling activation has a pending alert it sees (alerts on); consumes it.
pub fn alert_test() -> bool {
    // SAFETY: touches no user memory.
    baton_abi::decode_result(unsafe { syscall1(Sys::AlertTest as u64, 0) }) == Ok(1)
}

/// Turns alerts on or off in the calling activation (off in every new one); returns
/// whether they were on.
pub fn alert_enable(on: bool) -> Result<bool, Error> {
    // SAFETY: touches no user memory.
    baton_abi::decode_result(unsafe { syscall1(Sys::AlertEnable as u64, u64::from(on)) })
        .map(|was| was == 1)
}

/// Suspends (`on`) or resumes `act`.
pub fn suspend(act: Act, on: bool) -> Result<(), Error> {
    let (kind, id) = act.words();
    // SAFETY: touches no user memory.
    baton_abi::decode_result(unsafe {
        crate::raw::syscall3(Sys::ActSuspend as u64, kind, id, u64::from(on))
    })
    .map(|_| ())
}

/// The user registers of the suspended `act`, once its thread has stopped in it.
pub fn get_state(act: Act) -> Result<baton_abi::exception::UserRegs, Error> {
    let (kind, id) = act.words();
    let mut regs = baton_abi::exception::UserRegs::default();
    // SAFETY: the kernel writes exactly one `UserRegs` (repr(C), words only) into `regs`,
    // which we own.
    baton_abi::decode_result(unsafe {
        crate::raw::syscall3(
            Sys::ActGetState as u64,
            kind,
            id,
            core::ptr::addr_of_mut!(regs) as u64,
        )
    })?;
    Ok(regs)
}

/// Sets the user registers of the suspended `act`, once its thread has stopped in it.
pub fn set_state(act: Act, regs: &baton_abi::exception::UserRegs) -> Result<(), Error> {
    let (kind, id) = act.words();
    // SAFETY: the kernel only reads `regs`.
    baton_abi::decode_result(unsafe {
        crate::raw::syscall3(
            Sys::ActSetState as u64,
            kind,
            id,
            core::ptr::addr_of!(*regs) as u64,
        )
    })
    .map(|_| ())
}

/// Forbids the activations above the calling one to change this thread's priority or
/// affinity.
pub fn sched_lock() -> Result<(), Error> {
    // SAFETY: touches no user memory.
    baton_abi::decode_result(unsafe { syscall1(Sys::ActSchedLock as u64, 0) }).map(|_| ())
}
