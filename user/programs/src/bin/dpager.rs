//! `dpager`: the default pager (`docs/vm.md`, "Paging"). Started with the host-privilege
//! right as its bootstrap right and its store's size in pages as its argument
//! (`dpager <slots>`), it registers itself with the kernel as the default pager and then
//! keeps every page the kernel pages out (`PAGE_OUT`) in that page's slot of its store,
//! and gives it back when asked (`PAGE_IN`, answered with `default_pager_supply`).
//!
//! Its backing store is a stand-in: physically contiguous memory the kernel set aside
//! (DMA memory objects, outside the frames user memory may use), until the user-level
//! disk driver is there to hold a swap area. It sits behind the [`Store`] trait so that
//! a disk can take its place. `dpager <slots> once` registers and ends at once (a test's
//! warm-up).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use baton_abi::ipc::{MsgHeader, HEADER_SIZE};
use baton_abi::memobj::{map_flags, DMA_MAX};
use baton_abi::vm::INHERIT_COPY;
use baton_rt::ipc::{msg_buf, port_allocate, MSG_RECEIVE};
use baton_rt::paging::{self, Transfer, PAGE_IN, PAGE_OUT, PAGE_SIZE, TRANSFER_SIZE};
use baton_rt::vm::PROT_RW;
use baton_rt::{env, memobj, println, Error, FOREVER};

baton_rt::entry!(main);

/// Where the default pager keeps pages: a slot per page.
trait Store {
    /// Slots it holds.
    fn slots(&self) -> u64;
    /// Keeps `page` in `slot`.
    fn write(&mut self, slot: u64, page: &[u8]) -> Result<(), Error>;
    /// The page kept in `slot`.
    fn read(&self, slot: u64, page: &mut [u8]) -> Result<(), Error>;
}

/// The stand-in store: DMA memory objects of at most [`DMA_MAX`] bytes each, mapped.
struct MemoryStore {
    chunks: Vec<u64>,
    slots: u64,
}

/// Slots of one chunk.
const CHUNK_SLOTS: u64 = DMA_MAX / PAGE_SIZE;

impl MemoryStore {
    fn new(slots: u64, host_priv: u64) -> Result<MemoryStore, Error> {
        let mut chunks = Vec::new();
        let mut left = slots;
        while left > 0 {
            let n = left.min(CHUNK_SLOTS);
            let obj = memobj::dma(n * PAGE_SIZE, host_priv)?;
            let at = memobj::map(
                obj,
                n * PAGE_SIZE,
                0,
                map_flags(PROT_RW, PROT_RW, false, INHERIT_COPY),
            )?;
            chunks.push(at);
            left -= n;
        }
        Ok(MemoryStore { chunks, slots })
    }

    /// The address of `slot`'s page.
    fn at(&self, slot: u64) -> Result<*mut u8, Error> {
        if slot >= self.slots {
            return Err(Error::InvalidArgument);
        }
        let base = self
            .chunks
            .get((slot / CHUNK_SLOTS) as usize)
            .ok_or(Error::InvalidArgument)?;
        Ok((base + (slot % CHUNK_SLOTS) * PAGE_SIZE) as *mut u8)
    }
}

impl Store for MemoryStore {
    fn slots(&self) -> u64 {
        self.slots
    }
    fn write(&mut self, slot: u64, page: &[u8]) -> Result<(), Error> {
        let p = self.at(slot)?;
        let n = page.len().min(PAGE_SIZE as usize);
        // SAFETY: `p` is the start of a page of a mapping this store owns (a DMA object it
        // mapped read-write and never unmaps), and `n` ≤ one page.
        unsafe { core::ptr::copy_nonoverlapping(page.as_ptr(), p, n) };
        Ok(())
    }
    fn read(&self, slot: u64, page: &mut [u8]) -> Result<(), Error> {
        let p = self.at(slot)?;
        let n = page.len().min(PAGE_SIZE as usize);
        // SAFETY: as in `write`; the copy reads one page at most.
        unsafe { core::ptr::copy_nonoverlapping(p, page.as_mut_ptr(), n) };
        Ok(())
    }
}

fn main(_task_id: u64) -> i32 {
    let mut args = env::args().skip(1);
    let slots = args
        .next()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1024);
    let once = args.next() == Some("once");
    let host = baton_rt::start::bootstrap();
    match serve(slots, host, once) {
        Ok(()) => 0,
        Err(e) => {
            println!("dpager: {e:?}");
            1
        }
    }
}

fn serve(slots: u64, host: u64, once: bool) -> Result<(), Error> {
    // Ahead of the tasks whose memory it takes in: page-outs do not pile up.
    let _ = baton_rt::sys::set_priority(0, baton_abi::PRIORITY_DEFAULT + 8);
    let mut store = MemoryStore::new(slots, host)?;
    let port = port_allocate(0)?;
    paging::register(port, store.slots(), host)?;
    println!("dpager: serving {} pages", store.slots());
    if once {
        return Ok(());
    }
    let mut msg = alloc::vec![0u8; HEADER_SIZE + paging::PAGE_OUT_SIZE];
    let mut page = alloc::vec![0u8; PAGE_SIZE as usize];
    let (mut outs, mut ins, mut bad) = (0u64, 0u64, 0u64);
    loop {
        msg_buf(&mut msg, MSG_RECEIVE, port, FOREVER)?;
        let Some(h) = MsgHeader::from_bytes(&msg) else {
            bad += 1;
            continue;
        };
        let data = msg.get(HEADER_SIZE..h.size as usize).unwrap_or(&[]);
        let (Some(t), Some(rec)) = (
            Transfer::from_bytes(data),
            data.get(..TRANSFER_SIZE)
                .and_then(|r| <&[u8; TRANSFER_SIZE]>::try_from(r).ok()),
        ) else {
            bad += 1;
            continue;
        };
        let done = match h.id {
            PAGE_OUT => {
                outs += 1;
                store.write(t.slot, data.get(TRANSFER_SIZE..).unwrap_or(&[]))
            }
            PAGE_IN => {
                ins += 1;
                store
                    .read(t.slot, &mut page)
                    .and_then(|()| paging::supply(rec, &page).map(|_| ()))
            }
            _ => Err(Error::InvalidArgument),
        };
        if done.is_err() {
            bad += 1;
            println!("dpager: {outs} out, {ins} in, {bad} refused ({done:?})");
        }
    }
}
