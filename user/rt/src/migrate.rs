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
//! A server written against the interface macro (a [`Service`], usually a generated
//! `*_dispatch` call) runs the same way with [`serve`], the migrating twin of
//! [`crate::rpc::serve`]: the service lives in a `static` [`Shared`] (its activations run on
//! several client threads at once, so it is behind a lock), and the calling thread serves
//! what does not migrate (one-way messages, kernel notifications):
//!
//! ```ignore
//! static SERVER: Shared<EchoServer> = Shared::new(EchoServer::new());
//! let mut rpc = Rpc::new()?;
//! let port = port_allocate(0)?;
//! baton_rt::migrate::serve(rpc.ipc(), port, 4, &SERVER)?; // was: rpc::serve(rpc.ipc(), port, &mut server)
//! ```
//!
//! Each activation gets its own stack ([`STACK_SIZE`]) and buffer page from a region of the
//! address space reserved here ([`attach_sized`]: a buffer of several pages, for requests
//! that callers send from buffers of their own with `MSG_BUF`, up to 64 KiB); the kernel enters [`migrate_entry`] with `rdi` = the
//! buffer, `rsi` = the request size (0 for a sidetrack upcall), `rdx` = the activation id
//! and `r8` = the dispatch function, which returns through `act_return`.

use crate::ipc::{
    msg_buf, Disposition, IpcBuffer, MsgHeader, HEADER_SIZE, IPC_BUFFER_SIZE, MSG_SEND,
};
use crate::raw::{syscall1, syscall2, syscall6};
use crate::rpc::{Service, HANDLED};
use crate::sys::{mem_map, wait, wake};
use baton_abi::ipc::NOTIFY_SEND_ONCE;
use baton_abi::{Error, Sys, FOREVER};
use baton_idl_rt::{migrated_request, Answered, Dispatched, MsgReader, ReplyTo};
use core::arch::global_asm;
use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Bytes of user stack per activation.
pub const STACK_SIZE: u64 = 16 * 1024;
/// Where activation stacks and buffers are mapped.
const ACT_REGION: u64 = 0x6800_0000_0000;
static NEXT: AtomicU64 = AtomicU64::new(ACT_REGION);

/// A request in an activation's buffer, answered in place.
pub struct Request {
    buf: *mut [u8; IPC_BUFFER_SIZE],
    /// The request's size in bytes in the low 32 bits (0: a sidetrack upcall), and above
    /// them the bytes of the activation's buffer past its first page (0 for [`attach`]'s
    /// one-page buffers: so the one-page entry passes the kernel's `rsi` as it is).
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
        self.size as u32 == 0
    }

    /// The size of this activation's buffer in bytes: one page for [`attach`]'s, the size
    /// given to [`attach_sized`] for its (the most a request or reply may be).
    pub fn capacity(&self) -> usize {
        IPC_BUFFER_SIZE + (self.size >> 32)
    }

    fn bytes(&mut self) -> &mut [u8; IPC_BUFFER_SIZE] {
        // SAFETY: the kernel passed a buffer page of this activation, mapped writable for
        // the activation's lifetime; only this call uses it until it returns.
        unsafe { &mut *self.buf }
    }

    /// The whole buffer ([`Request::capacity`] bytes: the first page and the pages after).
    pub fn buffer(&mut self) -> &mut [u8] {
        // SAFETY: `attach_sized` mapped `capacity()` bytes writable from the buffer's
        // address for the activation's lifetime (the kernel checked every page at
        // `act_create`); `attach`'s buffers are one page, and then `capacity()` is one page.
        unsafe { core::slice::from_raw_parts_mut(self.buf as *mut u8, self.capacity()) }
    }

    /// The request's header (id and size).
    pub fn header(&mut self) -> MsgHeader {
        let b = self.bytes();
        let mut h = [0u8; HEADER_SIZE];
        h.copy_from_slice(&b[..HEADER_SIZE]);
        MsgHeader::from_bytes(&h).unwrap_or_default()
    }

    /// The request's `i`th descriptor, if it has that many: a call may carry out-of-line
    /// regions (`DESC_OOL`), which the kernel has put into this task's memory by value,
    /// each descriptor giving the region's address here and its size (address and size 0
    /// for one there was no room for). The region is this task's to keep or deallocate.
    /// The in-line data ([`Request::data`]) starts with the descriptors.
    pub fn descriptor(&mut self, i: usize) -> Option<baton_abi::ipc::Descriptor> {
        let n = ((self.header().bits >> 16) & 0xff) as usize;
        if i >= n {
            return None;
        }
        let at = HEADER_SIZE + i * baton_abi::ipc::DESCRIPTOR_SIZE;
        let end = at + baton_abi::ipc::DESCRIPTOR_SIZE;
        let size = (self.size as u32 as usize).min(self.capacity());
        if end > size {
            return None;
        }
        baton_abi::ipc::Descriptor::from_bytes(self.buffer().get(at..end)?)
    }

    /// The request's in-line data.
    pub fn data(&mut self) -> &[u8] {
        let size = (self.size as u32 as usize).clamp(HEADER_SIZE, self.capacity());
        &self.buffer()[HEADER_SIZE..size]
    }

    /// Overwrites the buffer's header (for a nested call made through this buffer).
    pub fn write_header(&mut self, h: MsgHeader) {
        self.bytes()[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    }

    /// Writes the reply: message id `id` and in-line `data` (truncated to the buffer).
    pub fn reply(&mut self, id: u64, data: &[u8]) {
        let n = data.len().min(self.capacity() - HEADER_SIZE);
        let b = self.buffer();
        b[HEADER_SIZE..HEADER_SIZE + n].copy_from_slice(&data[..n]);
        self.reply_in_place(id, n);
    }

    /// Writes a reply carrying out-of-line regions of this task (`descs`, `DESC_OOL`
    /// descriptors, at most 8) and in-line `data` after them: the kernel carries the
    /// regions into the caller's memory by value (with `OOL_DEALLOCATE`, this task's whole
    /// pages of a region go) and gives the caller their addresses there. A reply that does
    /// not fit the buffer is not written (`false`).
    pub fn reply_regions(
        &mut self,
        id: u64,
        descs: &[baton_abi::ipc::Descriptor],
        data: &[u8],
    ) -> bool {
        let d = baton_abi::ipc::DESCRIPTOR_SIZE;
        let at = HEADER_SIZE + descs.len() * d;
        let size = at + data.len();
        if descs.len() > 0xff || size > self.capacity() {
            return false;
        }
        let b = self.buffer();
        for (i, desc) in descs.iter().enumerate() {
            b[HEADER_SIZE + i * d..HEADER_SIZE + (i + 1) * d].copy_from_slice(&desc.to_bytes());
        }
        b[at..size].copy_from_slice(data);
        let h = MsgHeader {
            bits: (descs.len() as u32) << 16,
            size: size as u32,
            dest: 0,
            reply: 0,
            id,
        };
        self.bytes()[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
        true
    }

    /// Writes a reply header with id `id` over `len` bytes of data already in place (an
    /// echo leaves the request's data where it is).
    pub fn reply_in_place(&mut self, id: u64, mut len: usize) {
        // Truncated to the buffer; a one-page reply needs no look at the capacity.
        if len > IPC_BUFFER_SIZE - HEADER_SIZE {
            len = len.min(self.capacity() - HEADER_SIZE);
        }
        let h = MsgHeader {
            bits: 0,
            size: (HEADER_SIZE + len) as u32,
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

    .global migrate_entry_shared
migrate_entry_shared:
    mov %r8, %rcx
    call *(%r8)
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
    /// Where the kernel enters an activation of [`serve`]: `r8` is the `Shared`.
    fn migrate_entry_shared();
}

/// Attaches `count` new activations running `dispatch` to the port whose receive right is
/// `port`; returns the id of the last one.
pub fn attach(port: u64, count: usize, dispatch: Dispatch) -> Result<u64, Error> {
    attach_entry(
        port,
        count,
        migrate_entry as *const () as usize as u64,
        dispatch as usize as u64,
        false,
        |_| {},
    )
}

/// Bits of an [`attach_sized`] activation's cookie that hold the dispatch function (user
/// code lies far below 2^48); the bits above hold the buffer's pages past the first.
const SIZED_FN_MASK: u64 = (1 << 48) - 1;

/// The Rust half of [`migrate_entry_sized`]: the cookie is the dispatch function with the
/// buffer's extra pages above [`SIZED_FN_MASK`].
extern "C" fn migrate_dispatch_sized(buf: u64, size: u64, act: u64, cookie: u64) {
    // SAFETY: the cookie's low bits are the `Dispatch` `attach_sized` gave `act_create`.
    let f: Dispatch = unsafe { core::mem::transmute::<u64, Dispatch>(cookie & SIZED_FN_MASK) };
    let extra = (cookie >> 48) * IPC_BUFFER_SIZE as u64;
    let mut req = Request {
        buf: buf as *mut [u8; IPC_BUFFER_SIZE],
        size: (size | extra << 32) as usize,
        activation: act,
    };
    f(&mut req);
}

global_asm!(
    r#"
    .global migrate_entry_sized
migrate_entry_sized:
    mov %r8, %rcx
    call {dispatch}
    mov ${act_return}, %eax
    syscall
    ud2
    "#,
    dispatch = sym migrate_dispatch_sized,
    act_return = const Sys::ActReturn as u64,
    options(att_syntax)
);

extern "C" {
    /// Where the kernel enters an activation of [`attach_sized`].
    fn migrate_entry_sized();
}

/// Attaches `count` new activations running `dispatch` to `port`, as [`attach`] does, each
/// with a buffer of `buffer_size` bytes (rounded up to whole pages; at most
/// [`crate::ipc::MSG_SIZE_MAX`]) instead of one page: a request sent with `MSG_BUF` from a
/// caller's own buffer may be that large, and so may the reply ([`Request::capacity`],
/// [`Request::buffer`]). Returns the id of the last one. [`Error::InvalidArgument`] for a
/// size of 0 or above the largest message, [`attach`]'s errors otherwise.
pub fn attach_sized(
    port: u64,
    count: usize,
    buffer_size: usize,
    dispatch: Dispatch,
) -> Result<u64, Error> {
    let page = IPC_BUFFER_SIZE as u64;
    let bytes = (buffer_size as u64).div_ceil(page) * page;
    let f = dispatch as usize as u64;
    if bytes == 0 || bytes > crate::ipc::MSG_SIZE_MAX as u64 || f & !SIZED_FN_MASK != 0 {
        return Err(Error::InvalidArgument);
    }
    let cookie = f | (bytes / page - 1) << 48;
    let entry = migrate_entry_sized as *const () as usize as u64;
    let mut last = 0;
    for _ in 0..count {
        // The stack, the buffer, and a guard page left unmapped above the buffer.
        let base = NEXT.fetch_add(STACK_SIZE + bytes + page, Ordering::Relaxed);
        mem_map(base, STACK_SIZE + bytes, true)?;
        let stack_top = base + STACK_SIZE;
        last = create_sized(port, entry, stack_top, stack_top, cookie, bytes)?;
    }
    Ok(last)
}

/// Attaches `count` activations entering at `entry` with `cookie` to `port`, each with a
/// stack, its buffer page and, with `scratch`, a page after the buffer for the reply
/// ([`Shared`]'s entry writes it there while the request is read from the buffer).
fn attach_entry(
    port: u64,
    count: usize,
    entry: u64,
    cookie: u64,
    scratch: bool,
    mut made: impl FnMut(u64),
) -> Result<u64, Error> {
    let pages = if scratch { 2 } else { 1 };
    let mut last = 0;
    for _ in 0..count {
        let base = NEXT.fetch_add(
            STACK_SIZE + (pages + 1) * IPC_BUFFER_SIZE as u64,
            Ordering::Relaxed,
        );
        // A guard page is left unmapped above the buffer (and scratch page).
        mem_map(base, STACK_SIZE + pages * IPC_BUFFER_SIZE as u64, true)?;
        let stack_top = base + STACK_SIZE;
        let buffer = stack_top;
        last = create_raw(port, entry, stack_top, buffer, cookie)?;
        made(last);
    }
    Ok(last)
}

/// The id of the one-way message a migrating call that ended [`serve`] sends to the
/// server's port, to wake the server's own thread (which then returns). It reaches no
/// [`Service`]; another sender's message with this id and nothing else only makes the loop
/// look whether the service is done.
pub const WAKE_ID: u64 = baton_abi::ipc::KERNEL_ID_BASE - 1;

/// What [`migrate_entry_shared`] calls through the cookie, whatever the service: the
/// cookie is the address of a `Shared<S>`, whose first word is this head, and the entry
/// calls `run` with the kernel's arguments and the cookie.
#[repr(C)]
struct SharedHead {
    /// Runs the request in the buffer `buf` (`size` bytes, 0 for a sidetrack upcall) of the
    /// activation `act` on the `Shared<S>` that `head` begins.
    ///
    /// # Safety
    /// `head` must be the head of the `Shared<S>` whose `run` this is, and `buf` an
    /// activation's buffer page (with its scratch page after it) that only this call uses.
    run: unsafe extern "C" fn(buf: u64, size: u64, act: u64, head: *const SharedHead),
}

/// A [`Service`] shared by a migrating server's activations (which run on their callers'
/// threads, several at once) and its own thread: the service behind a lock. Put it in a
/// `static` and hand it to [`serve`].
///
/// The lock is a futex mutex on [`wait`]/[`wake`]: uncontended it costs two atomic
/// instructions; a caller that finds it taken sleeps in the kernel until it is released
/// (inside the server, on its own thread and priority), as it would wait for a
/// single-threaded message-loop server.
#[repr(C)]
pub struct Shared<S> {
    head: SharedHead,
    /// 0 free, 1 held, 2 held with (perhaps) waiters.
    lock: AtomicU32,
    /// The service said it is done (or [`serve`] returned): later calls are refused.
    closed: AtomicBool,
    /// The port [`serve`] serves (0 before).
    port: AtomicU64,
    /// The activations [`attach_service`] made (the first [`TRACKED`]), whose calls in
    /// progress [`serve`] waits for before it returns.
    acts: [AtomicU64; TRACKED],
    /// How many activations [`attach_service`] made.
    made: AtomicUsize,
    service: UnsafeCell<S>,
}

/// Most activations of a [`Shared`] whose calls [`serve`] waits for.
pub const TRACKED: usize = 32;

/// How long [`serve`] waits for a call still in one of its activations, at most.
const DRAIN_NS: u64 = 5_000_000_000;

// SAFETY: the service is reached only through `lock`'s guard, by one thread at a time, so
// sharing a `Shared<S>` between threads moves `S` between them (hence `S: Send`).
unsafe impl<S: Send> Sync for Shared<S> {}

/// The locked service of a [`Shared`]; dropping it releases the lock.
pub struct Guard<'a, S> {
    shared: &'a Shared<S>,
}

impl<S> Deref for Guard<'_, S> {
    type Target = S;
    fn deref(&self) -> &S {
        // SAFETY: the guard holds the lock, so no other reference to the service exists.
        unsafe { &*self.shared.service.get() }
    }
}

impl<S> DerefMut for Guard<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        // SAFETY: as in `deref`; `&mut self` makes this the only one through the guard.
        unsafe { &mut *self.shared.service.get() }
    }
}

impl<S> Drop for Guard<'_, S> {
    fn drop(&mut self) {
        if self.shared.lock.swap(0, Ordering::Release) == 2 {
            wake_waiter(&self.shared.lock);
        }
    }
}

/// Wakes one thread waiting for a [`Shared`]'s lock. Out of line (as the wait in
/// [`Shared::lock`]), so that the uncontended lock and unlock keep few registers live.
#[cold]
#[inline(never)]
fn wake_waiter(lock: &AtomicU32) {
    let _ = wake(lock, 1);
}

impl<S: Service + Send> Shared<S> {
    /// `service`, ready to [`serve`].
    pub const fn new(service: S) -> Shared<S> {
        Shared {
            head: SharedHead { run: Self::run },
            lock: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            port: AtomicU64::new(0),
            acts: [const { AtomicU64::new(0) }; TRACKED],
            made: AtomicUsize::new(0),
            service: UnsafeCell::new(service),
        }
    }

    /// Records activation `id`, made to serve this service.
    fn track(&self, id: u64) {
        let i = self.made.fetch_add(1, Ordering::AcqRel);
        if let Some(slot) = self.acts.get(i) {
            slot.store(id, Ordering::Release);
        }
    }

    /// Waits (at most [`DRAIN_NS`] in all) until no call is in any of the tracked
    /// activations: a call whose reply is on its way out (the one that ended the service
    /// among them) has left the task when this returns, so the server may end without
    /// aborting it. Through each activation's control port (`ACT_INFO`'s occupied word);
    /// gives up quietly on any error (the activation is gone, or no port could be made).
    fn drain(&self, ipc: &mut IpcBuffer) {
        let Ok(reply) = crate::ipc::port_allocate(0) else {
            return;
        };
        let deadline = crate::clock_ns().saturating_add(DRAIN_NS);
        let n = self.made.load(Ordering::Acquire).min(TRACKED);
        for slot in self.acts.iter().take(n) {
            let Ok(control) = crate::kobject::act_port(slot.load(Ordering::Acquire)) else {
                continue;
            };
            loop {
                let info = crate::kobject::call(
                    ipc,
                    control,
                    reply,
                    baton_abi::kobject::ACT_INFO,
                    &[],
                    FOREVER,
                );
                match info {
                    Ok((words, 4..)) if words[2] != 0 && crate::clock_ns() < deadline => {
                        let _ = crate::sleep_ns(1_000_000);
                    }
                    _ => break,
                }
            }
            let _ = crate::ipc::cap_drop(control);
        }
        let _ = crate::ipc::cap_drop(reply);
    }

    /// Locks the service (waiting while another thread holds it).
    pub fn lock(&self) -> Guard<'_, S> {
        if self
            .lock
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            Self::lock_contended(&self.lock);
        }
        Guard { shared: self }
    }

    /// The rest of [`Shared::lock`] when the lock is held: marks it contended and sleeps
    /// until it is free. Out of line, as [`wake_waiter`].
    #[cold]
    #[inline(never)]
    fn lock_contended(lock: &AtomicU32) {
        while lock.swap(2, Ordering::Acquire) != 0 {
            // `WouldBlock` (released meanwhile) and `Interrupted` (an alert) only mean
            // trying again.
            let _ = wait(lock, 2, FOREVER);
        }
    }

    /// Makes `port` the port this serves (Error [`Error::InvalidArgument`] if it serves
    /// another, or `port` is 0).
    fn bind(&self, port: u64) -> Result<(), Error> {
        match self
            .port
            .compare_exchange(0, port, Ordering::AcqRel, Ordering::Acquire)
        {
            _ if port == 0 => Err(Error::InvalidArgument),
            Ok(_) => Ok(()),
            Err(p) if p == port => Ok(()),
            Err(_) => Err(Error::InvalidArgument),
        }
    }

    /// Whether [`serve`] has finished (the service said it is done): calls are refused.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Runs one migrated request (in an activation, on the caller's thread): called by
    /// [`migrate_entry_shared`] with the kernel's arguments.
    ///
    /// # Safety
    /// `head` must be the head of a `Shared<S>` (this `S`) that lives for good, and `buf`
    /// an activation buffer page of [`attach_service`]'s (see [`SharedHead::run`]).
    unsafe extern "C" fn run(buf: u64, size: u64, act: u64, head: *const SharedHead) {
        // SAFETY: by the contract, `head` begins a `'static` `Shared<S>` (`repr(C)`, the
        // head first).
        let shared = unsafe { &*(head as *const Shared<S>) };
        let req = &mut Request {
            buf: buf as *mut [u8; IPC_BUFFER_SIZE],
            size: size as usize,
            activation: act,
        };
        if req.is_sidetrack() {
            return;
        }
        // SAFETY: `attach_service` mapped a scratch page, writable, right after each of
        // these activations' buffer pages, and only the call in this activation uses it
        // (a fresh array on the stack would cost zeroing a page on every call).
        let reply = unsafe {
            &mut *((req.buffer_address() + IPC_BUFFER_SIZE as u64) as *mut [u8; IPC_BUFFER_SIZE])
        };
        let buf = req.bytes();
        shared.handle_migrated(buf, reply);
    }

    /// Hands the migrated request at the start of `buf` to the service, the reply over
    /// the request or into `reply` ([`Service::handle_migrated`]), and leaves the reply
    /// in `buf`, where the caller gets it; closes the server (and wakes its thread) when
    /// the service is done. The reply is in place before the lock is released, so that
    /// nothing of the call is live across the release.
    #[inline(always)]
    fn handle_migrated(&self, buf: &mut [u8; IPC_BUFFER_SIZE], reply: &mut [u8; IPC_BUFFER_SIZE]) {
        const NOTHING: Answered = Answered {
            dispatched: Dispatched {
                reply_len: 0,
                delivered: false,
            },
            in_place: false,
        };
        let mut service = self.lock();
        if self.is_closed() {
            // The server has stopped serving: refused as by a dead server.
            let a = Self::refuse(buf, reply);
            reply_from_scratch(buf, reply, a.dispatched.reply_len);
        } else {
            match service.handle_migrated(buf, reply) {
                // A reply written in place (always one: `Answered::in_place`) is where
                // the caller gets it.
                Ok(Answered { in_place: true, .. }) => {}
                a => reply_from_scratch(buf, reply, a.unwrap_or(NOTHING).dispatched.reply_len),
            }
        }
        if service.done() {
            Self::close(service);
        }
    }

    /// Closes the server once its service is done (the guard is the service's lock,
    /// released here) and wakes its thread. Out of line: once per server.
    #[cold]
    #[inline(never)]
    fn close(service: Guard<'_, S>) {
        let shared = service.shared;
        shared.closed.store(true, Ordering::Release);
        drop(service);
        shared.wake_server();
    }

    /// The answer to a migrated request once the server is closed: `DeadName`, as from a
    /// dead server (nothing for a request that is not what the kernel delivers). Out of
    /// line: the entry keeps fewer registers live for it.
    #[cold]
    #[inline(never)]
    fn refuse(buf: &mut [u8; IPC_BUFFER_SIZE], reply: &mut [u8; IPC_BUFFER_SIZE]) -> Answered {
        const NOTHING: Answered = Answered {
            dispatched: Dispatched {
                reply_len: 0,
                delivered: false,
            },
            in_place: false,
        };
        let Ok(len) = migrated_request(buf) else {
            return NOTHING;
        };
        let request = buf.get(..len).unwrap_or(&[]);
        MsgReader::new(request)
            .and_then(|r| ReplyTo::of(&r))
            .and_then(|to| to.reject(reply, Error::DeadName))
            .map(Answered::in_scratch)
            .unwrap_or(NOTHING)
    }

    /// Sends [`WAKE_ID`] to the served port (with a send right made for the message) so
    /// the server's own thread sees that it is closed. Out of line: called once.
    #[cold]
    #[inline(never)]
    fn wake_server(&self) {
        let port = self.port.load(Ordering::Acquire);
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::MakeSend, Disposition::None, 0),
            size: HEADER_SIZE as u32,
            dest: port,
            reply: 0,
            id: WAKE_ID,
        };
        let mut msg = h.to_bytes();
        // Timeout 0: with the queue full the thread has messages to wake it anyway.
        let _ = msg_buf(&mut msg, MSG_SEND, 0, 0);
    }
}

/// Puts the reply of a migrated request that was not answered in place (`reply_len`
/// bytes of `reply`; 0 for none) into the activation's buffer `buf`, where the caller gets
/// it. No reply (a one-way message or an undecodable request): the caller learns it as a
/// client of a message-loop server would, from the kernel's send-once notification (the
/// stubs' `DeadName`). Out of line: the entry's way for a reply written in place keeps
/// fewer registers live.
#[inline(never)]
fn reply_from_scratch(
    buf: &mut [u8; IPC_BUFFER_SIZE],
    reply: &[u8; IPC_BUFFER_SIZE],
    reply_len: usize,
) {
    if reply_len > 0 && crate::rpc::copy_reply(buf, reply, reply_len) {
        return;
    }
    let h = MsgHeader {
        bits: 0,
        size: HEADER_SIZE as u32,
        dest: 0,
        reply: 0,
        id: NOTIFY_SEND_ONCE,
    };
    buf[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
}

/// The server's own thread's side of [`serve`]: what does not migrate.
struct Queued<S: 'static>(&'static Shared<S>);

impl<S: Service + Send> Service for Queued<S> {
    fn handle(&mut self, request: &[u8], reply: &mut [u8]) -> Result<Dispatched, Error> {
        let wake = MsgHeader::from_bytes(request).is_some_and(|h| {
            h.id == WAKE_ID && h.size as usize == HEADER_SIZE && h.bits >> 16 == 0
        });
        if wake {
            return Ok(HANDLED);
        }
        if self.0.is_closed() {
            return Ok(Dispatched {
                reply_len: 0,
                delivered: false,
            });
        }
        self.0.lock().handle(request, reply)
    }

    fn handle_in_place(
        &mut self,
        buf: &mut [u8; IPC_BUFFER_SIZE],
        len: usize,
        scratch: &mut [u8; IPC_BUFFER_SIZE],
    ) -> Result<Answered, Error> {
        let wake = MsgHeader::from_bytes(buf).is_some_and(|h| {
            h.id == WAKE_ID && h.size as usize == HEADER_SIZE && h.bits >> 16 == 0
        });
        if wake || self.0.is_closed() {
            let request = buf.get(..len).unwrap_or(&[]);
            return self.handle(request, scratch).map(Answered::in_scratch);
        }
        self.0.lock().handle_in_place(buf, len, scratch)
    }

    fn done(&self) -> bool {
        if !self.0.is_closed() && self.0.lock().done() {
            self.0.closed.store(true, Ordering::Release);
        }
        self.0.is_closed()
    }
}

/// Attaches `count` new activations serving `shared`'s [`Service`] to `port` (a receive
/// right): every call to the port then runs the service on the caller's thread, in one of
/// them (the request is handed to [`Service::handle`] as a message-loop server gets it,
/// with a stand-in reply right, under `shared`'s lock, and the reply goes back to the
/// caller when the activation returns). Returns the id of the last one. [`serve`] does this
/// itself; call it first to have the activations in place before telling clients the
/// server is ready, or later to add some. Errors: [`Error::InvalidArgument`] when `shared`
/// serves another port (a `Shared` serves one), [`attach`]'s.
pub fn attach_service<S: Service + Send>(
    port: u64,
    count: usize,
    shared: &'static Shared<S>,
) -> Result<u64, Error> {
    shared.bind(port)?;
    attach_entry(
        port,
        count,
        migrate_entry_shared as *const () as usize as u64,
        shared as *const Shared<S> as u64,
        true,
        |id| shared.track(id),
    )
}

/// The migrating twin of [`crate::rpc::serve`]: attaches `activations` activations serving
/// `shared` to `port` ([`attach_service`]; 0 to attach none here), and meanwhile serves,
/// on the calling thread with its IPC buffer `ipc`, what does not migrate (one-way
/// messages, messages with rights, kernel notifications) exactly as
/// [`crate::rpc::serve`] does, with `shared`'s lock held around each message.
///
/// Returns `Ok` when [`Service::done`] says so, after a call in an activation (whose reply
/// still goes out) or a message on this thread, once no call is left in the first
/// [`TRACKED`] activations (each asked through its control port; at most 5 s in all), so
/// that a server that ends when `serve` returns never aborts the reply of the call that
/// ended it, nor one still being answered. From then on the activations stay
/// attached to the port (until it is destroyed) but refuse calls: their callers get
/// [`Error::DeadName`]. Errors: [`attach_service`]'s, and a plain receive failed as for
/// [`crate::rpc::serve`]. Calls that carry rights do not migrate (the kernel queues them),
/// so a method that takes a port right runs on this thread; a migrated call whose reply
/// would carry one fails with [`Error::BadFormat`].
pub fn serve<S: Service + Send>(
    ipc: &mut IpcBuffer,
    port: u64,
    activations: usize,
    shared: &'static Shared<S>,
) -> Result<(), Error> {
    attach_service(port, activations, shared)?;
    let result = crate::rpc::serve(ipc, port, &mut Queued(shared));
    shared.closed.store(true, Ordering::Release);
    // The call that ended the service may still be on its way out of an activation.
    shared.drain(ipc);
    result
}

/// `act_create` with raw arguments (for tests that pass what [`attach`] would not).
pub fn create_raw(
    port: u64,
    entry: u64,
    stack_top: u64,
    buffer: u64,
    cookie: u64,
) -> Result<u64, Error> {
    create_sized(port, entry, stack_top, buffer, cookie, 0)
}

/// `act_create` with a buffer of `buffer_size` bytes (0: one page, as [`create_raw`];
/// else a multiple of the page size, at most [`crate::ipc::MSG_SIZE_MAX`], every page
/// mapped writable), raw arguments.
pub fn create_sized(
    port: u64,
    entry: u64,
    stack_top: u64,
    buffer: u64,
    cookie: u64,
    buffer_size: u64,
) -> Result<u64, Error> {
    // SAFETY: `act_create` reads no user memory (it translates the buffer's pages).
    baton_abi::decode_result(unsafe {
        syscall6(
            Sys::ActCreate as u64,
            port,
            entry,
            stack_top,
            buffer,
            cookie,
            buffer_size,
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
