//! Ports, rights and messages from user space (see `baton_abi::ipc` for the ABI and
//! `docs/ipc.md` for the semantics).
//!
//! Each thread that sends or receives through its IPC buffer makes one with
//! [`IpcBuffer::new`]: a page of its own, registered with the kernel, which the kernel
//! reaches without walking page tables (the fast path). [`msg_buf`] uses any buffer
//! instead.
//!
//! # Invariants
//! - An [`IpcBuffer`] is registered for the thread that created it and is neither `Send`
//!   nor `Sync`: the kernel writes into it only during that thread's `ipc_msg`, while the
//!   buffer is borrowed mutably.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicU64, Ordering};

pub use baton_abi::ipc::*;
use baton_abi::{decode_result, Error, Sys};

use crate::raw::{syscall1, syscall2, syscall3, syscall6};

/// Where IPC buffer pages are placed: one page each, upwards from here.
const IPC_REGION: u64 = 0x6000_0000_0000;
/// The next free IPC buffer page.
static NEXT_PAGE: AtomicU64 = AtomicU64::new(IPC_REGION);

/// `port_allocate(queue_limit)`: a new port; returns the name of its receive right.
pub fn port_allocate(queue_limit: u64) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall1(Sys::PortAllocate as u64, queue_limit) })
}

/// `port_make_send(name, once)`: a new send (or send-once) right from a receive right.
pub fn port_make_send(name: u64, once: bool) -> Result<u64, Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall2(Sys::PortMakeSend as u64, name, u64::from(once)) })
}

/// `cap_drop(name)`: releases a right (a receive right destroys its port).
pub fn cap_drop(name: u64) -> Result<(), Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall1(Sys::CapDrop as u64, name) }).map(|_| ())
}

/// `cap_info(name)`: the kind of right `name` is.
pub fn cap_info(name: u64) -> Result<RightKind, Error> {
    // SAFETY: touches no user memory.
    let raw = decode_result(unsafe { syscall1(Sys::CapInfo as u64, name) })?;
    RightKind::from_raw(raw).ok_or(Error::InvalidArgument)
}

/// `port_notify(name, kind, notify)`: asks for a notification on the port whose receive
/// right `notify` is (0 cancels).
pub fn port_notify(name: u64, kind: u64, notify: u64) -> Result<(), Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall3(Sys::PortNotify as u64, name, kind, notify) }).map(|_| ())
}

/// `port_set_limit(name, limit)`: the queue limit of the port of a receive right.
pub fn port_set_limit(name: u64, limit: u64) -> Result<(), Error> {
    // SAFETY: touches no user memory.
    decode_result(unsafe { syscall2(Sys::PortSetLimit as u64, name, limit) }).map(|_| ())
}

/// `ipc_msg` with a caller-chosen buffer ([`MSG_BUF`] is added to `options`): sends the
/// message at the start of `buf` and/or receives one into it.
pub fn msg_buf(buf: &mut [u8], options: u64, rcv_name: u64, timeout_ns: u64) -> Result<(), Error> {
    // SAFETY: the kernel reads and writes only `buf`, which we borrow mutably.
    decode_result(unsafe {
        syscall6(
            Sys::IpcMsg as u64,
            options | MSG_BUF,
            rcv_name,
            timeout_ns,
            buf.as_mut_ptr() as u64,
            buf.len() as u64,
            0,
        )
    })
    .map(|_| ())
}

/// `ipc_msg` with raw arguments, for tests that pass what no typed wrapper would.
///
/// # Safety
/// Any memory the kernel may write (the calling thread's IPC buffer, or `buf` with
/// [`MSG_BUF`]) must be the caller's to overwrite.
pub unsafe fn msg_raw(options: u64, rcv_name: u64, timeout_ns: u64, buf: u64, size: u64) -> u64 {
    // SAFETY: forwarded to the caller.
    unsafe {
        syscall6(
            Sys::IpcMsg as u64,
            options,
            rcv_name,
            timeout_ns,
            buf,
            size,
            0,
        )
    }
}

/// The calling thread's IPC buffer: a page of its own, registered with the kernel. See
/// the module invariants.
pub struct IpcBuffer {
    page: *mut [u8; IPC_BUFFER_SIZE],
    /// Not `Send`/`Sync`: the registration belongs to the creating thread.
    _thread: PhantomData<*mut u8>,
}

/// The `i`th little-endian 64-bit word of a message's `data` (0 past its end).
pub fn data_word(data: &[u8], i: usize) -> u64 {
    data.get(i * 8..i * 8 + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

impl IpcBuffer {
    /// Sends a one-way message `id` to `to` (a send right, copied) with `descriptors` and
    /// `data`, waiting while the port's queue is full.
    pub fn send(
        &mut self,
        to: u64,
        id: u64,
        descriptors: &[Descriptor],
        data: &[u8],
    ) -> Result<(), Error> {
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
            dest: to,
            id,
            ..MsgHeader::default()
        };
        self.set(h, descriptors, data)?;
        self.msg(MSG_SEND, 0, baton_abi::FOREVER)
    }

    /// Maps a fresh page and registers it as the calling thread's IPC buffer (replacing
    /// any earlier one).
    pub fn new() -> Result<IpcBuffer, Error> {
        let va = NEXT_PAGE.fetch_add(IPC_BUFFER_SIZE as u64, Ordering::Relaxed);
        crate::sys::mem_map(va, IPC_BUFFER_SIZE as u64, true)?;
        // SAFETY: touches no user memory (the kernel only translates `va`).
        let set = decode_result(unsafe { syscall1(Sys::IpcBufferSet as u64, va) });
        if let Err(e) = set {
            // SAFETY: we mapped the page just now and nothing refers to it.
            let _ = unsafe { crate::sys::mem_unmap(va, IPC_BUFFER_SIZE as u64) };
            return Err(e);
        }
        Ok(IpcBuffer {
            page: va as *mut [u8; IPC_BUFFER_SIZE],
            _thread: PhantomData,
        })
    }

    /// The buffer's bytes.
    pub fn bytes(&mut self) -> &mut [u8; IPC_BUFFER_SIZE] {
        // SAFETY: the page is mapped writable for as long as `self` lives, and only
        // reached through `self` (the kernel writes it only inside `msg`, which borrows
        // `self` mutably).
        unsafe { &mut *self.page }
    }

    /// The buffer's bytes, read-only.
    pub fn view(&self) -> &[u8; IPC_BUFFER_SIZE] {
        // SAFETY: as in `bytes`.
        unsafe { &*self.page }
    }

    /// `ipc_msg` on this buffer (an `MSG_BUF` in `options` is left out: the call is on the
    /// IPC buffer).
    pub fn msg(&mut self, options: u64, rcv_name: u64, timeout_ns: u64) -> Result<(), Error> {
        // Without `MSG_BUF` the kernel reads no buffer arguments (`docs/ipc.md`), so the
        // call passes none: three registers fewer to set on every call and reply.
        // SAFETY: the kernel writes only the IPC buffer, which `self` owns and we borrow
        // mutably for the call.
        let raw = unsafe { syscall3(Sys::IpcMsg as u64, options & !MSG_BUF, rcv_name, timeout_ns) };
        decode_result(raw).map(|_| ())
    }

    /// Writes a message: `header` (its `size` and descriptor count are filled in),
    /// `descriptors`, then `data`.
    pub fn set(
        &mut self,
        mut header: MsgHeader,
        descriptors: &[Descriptor],
        data: &[u8],
    ) -> Result<(), Error> {
        let d_end = HEADER_SIZE + descriptors.len() * DESCRIPTOR_SIZE;
        let size = d_end + data.len();
        if size > IPC_BUFFER_SIZE || descriptors.len() > DESCRIPTORS_MAX {
            return Err(Error::TooLarge);
        }
        header.size = size as u32;
        header.bits = (header.bits & !(0xff << 16)) | ((descriptors.len() as u32) << 16);
        let b = self.bytes();
        b[..HEADER_SIZE].copy_from_slice(&header.to_bytes());
        for (i, d) in descriptors.iter().enumerate() {
            let at = HEADER_SIZE + i * DESCRIPTOR_SIZE;
            b[at..at + DESCRIPTOR_SIZE].copy_from_slice(&d.to_bytes());
        }
        b[d_end..size].copy_from_slice(data);
        Ok(())
    }

    /// Overwrites only the header (as given, `size` included), leaving descriptors and
    /// data in place: a server replies with the request's data this way without copying.
    pub fn set_header(&mut self, header: MsgHeader) {
        self.bytes()[..HEADER_SIZE].copy_from_slice(&header.to_bytes());
    }

    /// The header of the message in the buffer.
    pub fn header(&self) -> MsgHeader {
        MsgHeader::from_bytes(self.view()).unwrap_or_default()
    }

    /// Descriptor `i` of the message in the buffer.
    pub fn descriptor(&self, i: usize) -> Option<Descriptor> {
        if i >= self.header().descriptors() {
            return None;
        }
        let at = HEADER_SIZE + i * DESCRIPTOR_SIZE;
        Descriptor::from_bytes(self.view().get(at..)?)
    }

    /// The in-line data of the message in the buffer.
    pub fn data(&self) -> &[u8] {
        let h = self.header();
        let start = HEADER_SIZE + h.descriptors() * DESCRIPTOR_SIZE;
        let end = (h.size as usize).min(IPC_BUFFER_SIZE);
        self.view().get(start..end).unwrap_or(&[])
    }
}

impl Drop for IpcBuffer {
    fn drop(&mut self) {
        // SAFETY: touches no user memory.
        let _ = unsafe { syscall1(Sys::IpcBufferSet as u64, 0) };
        // SAFETY: the page is ours, no longer registered, and `self` is its only user.
        let _ = unsafe { crate::sys::mem_unmap(self.page as u64, IPC_BUFFER_SIZE as u64) };
    }
}
