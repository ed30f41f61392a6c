//! `dpager`: the default pager (`docs/vm.md`, "Paging"). It registers itself with the
//! kernel as the default pager and then keeps every page the kernel pages out
//! (`PAGE_OUT`) in that page's slot of its store, and gives it back when asked
//! (`PAGE_IN`, answered with `default_pager_supply`). The kernel hands out the slots
//! (lazily, at a page's first page-out) and takes them back (at its page-in, or when its
//! object goes); the pager only keeps bytes where it is told.
//!
//! `dpager [SLOTS] [once] [hold] [stall]`:
//! - its store is the disk's swap area: partition 2 (type 0x82) of the
//!   partition table in sector 0 (`baton_disk`), reached through the block driver `blk`
//!   (`docs/drivers.md`), one slot of eight sectors per page, `SLOTS` at most (default:
//!   the whole partition). It is started with `swap_proto::start_pager`, which gives it
//!   the host-privilege right and the driver's port; it refuses to start, saying why,
//!   when sector 0 holds no table that parses or no swap partition. A page goes to the
//!   driver as two requests of 2 KiB carried in-line, so that neither the pager nor the
//!   driver needs a new page of memory to move it (a pageout never waits for memory);
//! - `once`: register and end at once (a test's warm-up);
//! - `hold`: every page-in's disk reads ask the driver to hold them two seconds
//!   (`FLAG_HOLD`, which only a driver started for tests honours): a test kills the pager
//!   or the driver while a page-in is under way;
//! - `stall`: register and then take no message: a default pager busy for good, whose
//!   queue the kernel's page-outs fill (a test's; it is killed at the end).
//!
//! A store that fails (the driver gone, the device reporting an error) ends the pager:
//! the kernel then counts every page it held as lost, and a task touching one gets a
//! pager fault (there is no call yet to report one page lost and go on).
#![no_std]
#![no_main]

extern crate alloc;

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../swap_proto.rs"]
mod swap_proto;

use baton_abi::ipc::{Descriptor, Disposition, MsgHeader, DESC_PORT, HEADER_SIZE};
use baton_disk::{LayoutError, Partition, SECTOR, TYPE_SWAP};
use baton_rt::ipc::{cap_drop, msg_buf, port_allocate, IpcBuffer, MSG_RECEIVE};
use baton_rt::paging::{self, Transfer, PAGE_IN, PAGE_OUT, PAGE_SIZE, TRANSFER_SIZE};
use baton_rt::{env, println, Error, FOREVER};
use blk_client::Client;
use blk_proto::{BLK_INFO, BLK_READ, BLK_WRITE, FLAG_HOLD, INLINE_MAX};

baton_rt::entry!(main);

/// Where the default pager keeps pages: a slot per page.
trait Store {
    /// Slots it holds.
    fn slots(&self) -> u64;
    /// Keeps `page` in `slot`.
    fn write(&mut self, slot: u64, page: &[u8]) -> Result<(), Error>;
    /// The page kept in `slot`.
    fn read(&mut self, slot: u64, page: &mut [u8]) -> Result<(), Error>;
}

/// The swap area on the disk: slot `s` is the eight sectors from `start + 8 s`.
struct DiskStore {
    client: Client,
    start: u64,
    slots: u64,
    /// `FLAG_HOLD` or 0, for page-ins' reads.
    flags: u64,
}

/// Sectors per slot.
const SLOT_SECTORS: u64 = PAGE_SIZE / SECTOR;
/// Bytes per request: a page goes as two, each in-line.
const PIECE: u64 = INLINE_MAX;

impl DiskStore {
    /// Finds the swap partition on the disk `driver` serves and offers at most `limit`
    /// of its slots.
    fn open(driver: u64, limit: Option<u64>, hold: bool) -> Result<DiskStore, Error> {
        let mut client = Client {
            buf: IpcBuffer::new()?,
            reply: port_allocate(0)?,
            driver,
        };
        let info = client.call(BLK_INFO, 0, 0, 0, &[], None)?;
        info.result?;
        let capacity = info.words[0];
        let r = client.call(BLK_READ, 0, SECTOR, 0, &[], None)?;
        r.result?;
        let sector0: &[u8; 512] = r
            .inline
            .get(..SECTOR as usize)
            .and_then(|b| b.try_into().ok())
            .ok_or(Error::BadFormat)?;
        let part: Partition = baton_disk::find(sector0, capacity, TYPE_SWAP).map_err(|e| {
            println!(
                "dpager: refusing to start: {}",
                match e {
                    LayoutError::NoSignature => "sector 0 holds no partition table",
                    _ => "the disk has no swap partition (type 0x82) in a valid table",
                }
            );
            println!("dpager: (the table: {e:?})");
            Error::NotFound
        })?;
        let slots = (part.sectors / SLOT_SECTORS)
            .min(paging::SLOTS_MAX)
            .min(limit.unwrap_or(u64::MAX));
        println!(
            "dpager: swap area: partition 2, sectors {}-{}, {} slots of a page",
            part.start,
            part.end() - 1,
            slots
        );
        Ok(DiskStore {
            client,
            start: part.start,
            slots,
            flags: if hold { FLAG_HOLD } else { 0 },
        })
    }

    /// The first sector of `slot`.
    fn sector(&self, slot: u64) -> Result<u64, Error> {
        if slot >= self.slots {
            return Err(Error::InvalidArgument);
        }
        Ok(self.start + slot * SLOT_SECTORS)
    }
}

impl Store for DiskStore {
    fn slots(&self) -> u64 {
        self.slots
    }
    fn write(&mut self, slot: u64, page: &[u8]) -> Result<(), Error> {
        let sector = self.sector(slot)?;
        let page = page.get(..PAGE_SIZE as usize).ok_or(Error::BadFormat)?;
        for (i, piece) in page.chunks_exact(PIECE as usize).enumerate() {
            let at = sector + i as u64 * (PIECE / SECTOR);
            self.client
                .call(BLK_WRITE, at, PIECE, 0, piece, None)?
                .result?;
        }
        Ok(())
    }
    fn read(&mut self, slot: u64, page: &mut [u8]) -> Result<(), Error> {
        let sector = self.sector(slot)?;
        let page = page.get_mut(..PAGE_SIZE as usize).ok_or(Error::BadFormat)?;
        for (i, piece) in page.chunks_exact_mut(PIECE as usize).enumerate() {
            let at = sector + i as u64 * (PIECE / SECTOR);
            let r = self
                .client
                .call(BLK_READ, at, PIECE, self.flags, &[], None)?;
            r.result?;
            if r.data.is_some() || r.inline_len < PIECE as usize {
                return Err(Error::BadFormat);
            }
            piece.copy_from_slice(r.inline.get(..PIECE as usize).ok_or(Error::BadFormat)?);
        }
        Ok(())
    }
}
fn main(_task_id: u64) -> i32 {
    let (mut slots, mut once, mut hold, mut stall) = (None, false, false, false);
    for a in env::args().skip(1) {
        match a {
            "once" => once = true,
            "hold" => hold = true,
            "stall" => stall = true,
            n => slots = n.parse::<u64>().ok().or(slots),
        }
    }
    let result = setup().and_then(|(host, driver)| {
        let mut store = DiskStore::open(driver, slots, hold)?;
        serve(&mut store, host, once, stall)
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            println!("dpager: ending: {}", e.name());
            1
        }
    }
}

/// The handshake with the starter (`swap_proto`): the host-privilege right and the
/// block driver's port.
fn setup() -> Result<(u64, u64), Error> {
    let boot = baton_rt::start::bootstrap();
    let port = port_allocate(0)?;
    let mut buf = IpcBuffer::new()?;
    buf.send(
        boot,
        swap_proto::DPAGER_HELLO,
        &[Descriptor::port(port, Disposition::MakeSend)],
        &[],
    )?;
    let _ = cap_drop(boot);
    buf.msg(MSG_RECEIVE, port, 10_000_000_000)?;
    let h = buf.header();
    let rights = match (buf.descriptor(0), buf.descriptor(1)) {
        (Some(a), Some(b))
            if h.id == swap_proto::DPAGER_SETUP && a.kind == DESC_PORT && b.kind == DESC_PORT =>
        {
            Ok((a.value, b.value))
        }
        _ => Err(Error::BadFormat),
    };
    let _ = cap_drop(port);
    rights
}

fn serve(store: &mut dyn Store, host: u64, once: bool, stall: bool) -> Result<(), Error> {
    // Ahead of the tasks whose memory it takes in: page-outs do not pile up.
    let _ = baton_rt::sys::set_priority(0, baton_abi::PRIORITY_DEFAULT + 8);
    let port = port_allocate(0)?;
    paging::register(port, store.slots(), host)?;
    println!("dpager: serving {} pages", store.slots());
    if once {
        return Ok(());
    }
    if stall {
        loop {
            baton_rt::sleep_ns(1_000_000_000)?;
        }
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
        match h.id {
            PAGE_OUT => {
                outs += 1;
                store.write(t.slot, data.get(TRANSFER_SIZE..).unwrap_or(&[]))?;
            }
            PAGE_IN => {
                ins += 1;
                store.read(t.slot, &mut page)?;
                // A supply the kernel refuses (the page's task ended meanwhile, no frame
                // even in the reserve) is the kernel's to sort out: its waiters fault
                // again and ask again.
                if let Err(e) = paging::supply(rec, &page) {
                    bad += 1;
                    println!("dpager: {outs} out, {ins} in, {bad} refused ({})", e.name());
                }
            }
            _ => bad += 1,
        }
    }
}
