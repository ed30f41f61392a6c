//! `fs`: the file server (`docs/files.md`). Its files are memory objects: Accent's file
//! system (Fitzgerald & Rashid, sections 2.1.4 and 3.4–3.7), where a file is read by
//! mapping it and touching its pages, and written back by the pager's data return.
//!
//! The server is a client of the block driver (`blk`, `docs/drivers.md`) and serves the
//! FAT file system of the disk's first partition (`baton_disk::TYPE_FILES`) with the
//! `embedded-sdmmc` crate. Opening a file makes a pager-backed memory object
//! (`memobj_pager`) whose pager is this server: each `DATA_REQUEST` the kernel sends when
//! a page of it is first touched is answered with the file's bytes (`pager_supply`), and
//! each `DATA_RETURN` (a `pager_flush` of `FS_SYNC`, or the kernel's page replacement
//! giving back a written page) is written into the file. Everything else — open, create,
//! list a folder, size, delete, sync — is a plain request on the same port
//! (`fs_proto`).
//!
//! It is started as the block driver is: spawned with a port of the starter's as its
//! bootstrap right, it answers with `FS_HELLO` carrying a send right to its port, and takes
//! `FS_SETUP` with the driver's send right. It reads the partition table and the file
//! system's boot sector then, and refuses a disk whose table or file system does not parse
//! (the setup's reply is `BadFormat`, and the server ends), never trusting it.
//!
//! The only cache is the disk blocks the crate asks for, read ahead a chunk of 16 KiB at a
//! time (eight chunks): file pages live in the objects, where the kernel keeps them.
//!
//! # Invariants
//! - Each file the server holds has one open crate file and one object (its right is the
//!   server's; clients get copies). The cookie of the object names the file.
//! - The server never maps its own objects (a fault on one would wait for itself).
#![no_std]
#![no_main]

extern crate alloc;

#[path = "../blk_client.rs"]
mod blk_client;
#[path = "../blk_proto.rs"]
mod blk_proto;
#[path = "../fs_proto.rs"]
mod fs_proto;

use alloc::vec::Vec;
use baton_abi::ipc::{
    Descriptor, Disposition, MsgHeader, DESCRIPTOR_SIZE, DESC_OOL, DESC_PORT, HEADER_SIZE,
    NOTIFY_KIND_NO_SENDERS, OOL_DEALLOCATE,
};
use baton_abi::FOREVER;
use baton_rt::ipc::{
    cap_drop, msg_buf, port_allocate, port_make_send, port_notify, IpcBuffer, MSG_RECEIVE, MSG_SEND,
};
use baton_rt::pager::{
    self, Request, DATA_REQUEST, DATA_RETURN, FLUSH_DROP, FLUSH_RETURN, PAGE_SIZE,
};
use baton_rt::rpc::Notification;
use baton_rt::start::bootstrap;
use baton_rt::{println, Error};
use blk_client::{free_region, Client};
use blk_proto::{BLK_INFO, BLK_READ, SECTOR};
use core::cell::{Cell, RefCell};
use core::ops::ControlFlow;
use embedded_sdmmc::{
    Block, BlockCount, BlockDevice, BlockIdx, DirEntry, LfnBuffer, Mode, RawDirectory, RawFile,
    RawVolume, ShortFileName, TimeSource, Timestamp, VolumeIdx, VolumeManager,
};
use fs_proto::*;

baton_rt::entry!(main);

const P: u64 = PAGE_SIZE;
/// Bytes the disk is read in (a chunk of the read-ahead cache).
const CHUNK: u64 = 16 << 10;
/// Chunks kept.
const CHUNKS: usize = 8;

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("fs: {}", e.name());
            1
        }
    }
}

/// The disk as the crate sees it: the driver's blocks, through the read-ahead cache.
struct Disk {
    client: RefCell<Client>,
    cache: RefCell<Cache>,
    capacity: u64,
    reads: Cell<u64>,
}

struct Cache {
    /// Which chunk each slot holds, and when it was last used.
    tags: [Option<u64>; CHUNKS],
    used: [u64; CHUNKS],
    clock: u64,
    data: Vec<u8>,
}

/// A driver error, as the crate wants it.
#[derive(Debug)]
struct DiskError(Error);

impl core::fmt::Display for DiskError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.0.name())
    }
}

impl core::error::Error for DiskError {}

impl Disk {
    /// The cache slot holding sector `s`, read from the disk if it is not there.
    fn slot_of(&self, s: u64) -> Result<(usize, usize), DiskError> {
        let per = CHUNK / SECTOR;
        let chunk = s / per;
        let at = ((s % per) * SECTOR) as usize;
        let mut cache = self.cache.borrow_mut();
        cache.clock += 1;
        let now = cache.clock;
        if let Some(i) = cache.tags.iter().position(|t| *t == Some(chunk)) {
            cache.used[i] = now;
            return Ok((i, at));
        }
        let i = (0..CHUNKS).min_by_key(|&i| cache.used[i]).unwrap_or(0);
        cache.tags[i] = None;
        let first = chunk * per;
        let len = (self.capacity.saturating_sub(first) * SECTOR).min(CHUNK);
        if len == 0 {
            return Err(DiskError(Error::NoSpace));
        }
        let r = self
            .client
            .borrow_mut()
            .call(BLK_READ, first, len, 0, &[], None)
            .map_err(DiskError)?;
        self.reads.set(self.reads.get() + 1);
        let dst = cache
            .data
            .get_mut(i * CHUNK as usize..i * CHUNK as usize + len as usize)
            .ok_or(DiskError(Error::BadFormat))?;
        let got = match (r.result, r.data) {
            (Err(e), Some((va, size))) => {
                free_region(va, size);
                Err(e)
            }
            (Err(e), None) => Err(e),
            (Ok(()), Some((va, size))) if size == len => {
                // SAFETY: the kernel mapped the reply's region here, `size` bytes.
                let src = unsafe { core::slice::from_raw_parts(va as *const u8, size as usize) };
                dst.copy_from_slice(src);
                free_region(va, size);
                Ok(())
            }
            (Ok(()), Some((va, size))) => {
                free_region(va, size);
                Err(Error::BadFormat)
            }
            (Ok(()), None) if r.inline_len as u64 == len => {
                dst.copy_from_slice(&r.inline[..r.inline_len]);
                Ok(())
            }
            (Ok(()), None) => Err(Error::BadFormat),
        };
        got.map_err(DiskError)?;
        cache.tags[i] = Some(chunk);
        cache.used[i] = now;
        Ok((i, at))
    }
}

impl BlockDevice for Disk {
    type Error = DiskError;

    fn read(&self, blocks: &mut [Block], start: BlockIdx) -> Result<(), DiskError> {
        for (n, b) in blocks.iter_mut().enumerate() {
            let (i, at) = self.slot_of(u64::from(start.0) + n as u64)?;
            let cache = self.cache.borrow();
            let src = cache
                .data
                .get(i * CHUNK as usize + at..i * CHUNK as usize + at + SECTOR as usize)
                .ok_or(DiskError(Error::BadFormat))?;
            b.contents.copy_from_slice(src);
        }
        Ok(())
    }

    fn write(&self, blocks: &[Block], start: BlockIdx) -> Result<(), DiskError> {
        for (n, b) in blocks.iter().enumerate() {
            let s = u64::from(start.0) + n as u64;
            self.client
                .borrow_mut()
                .write(s, &b.contents)
                .map_err(DiskError)?;
            // Written through: a cached copy of the sector is updated in place.
            let per = CHUNK / SECTOR;
            let mut cache = self.cache.borrow_mut();
            if let Some(i) = cache.tags.iter().position(|t| *t == Some(s / per)) {
                let at = i * CHUNK as usize + ((s % per) * SECTOR) as usize;
                if let Some(dst) = cache.data.get_mut(at..at + SECTOR as usize) {
                    dst.copy_from_slice(&b.contents);
                }
            }
        }
        Ok(())
    }

    fn num_blocks(&self) -> Result<BlockCount, DiskError> {
        Ok(BlockCount(self.capacity.min(u64::from(u32::MAX)) as u32))
    }
}

/// Files get one fixed time (Baton has no calendar).
struct Clock;

impl TimeSource for Clock {
    fn get_timestamp(&self) -> Timestamp {
        Timestamp {
            year_since_1970: 56,
            zero_indexed_month: 0,
            zero_indexed_day: 0,
            hours: 0,
            minutes: 0,
            seconds: 0,
        }
    }
}

type Volumes = VolumeManager<Disk, Clock, 4, { FILES_MAX + 2 }, 1>;

/// A file the server holds: its open crate file and its memory object.
struct Held {
    path: Vec<u8>,
    file: RawFile,
    size: u64,
    object: u64,
    cookie: u64,
}

struct Server {
    vols: Volumes,
    volume: RawVolume,
    port: u64,
    files: Vec<Held>,
    next_cookie: u64,
    requests: u64,
    returns: u64,
    /// Requests that came while a sync waited for its pages: served after it.
    deferred: Vec<Vec<u8>>,
    /// Pages the server could not supply and failed instead (cookie, offset): forgotten
    /// (flushed, so that they are asked again) at the file's next open. At most
    /// [`FAILED_MAX`]; past that a failed page stays failed.
    failed: Vec<(u64, u64)>,
    /// Supplies that failed, for the console (the first few are reported).
    supply_failures: u64,
    /// An `FS_STOP` came.
    stopping: bool,
}

fn fs_error(e: embedded_sdmmc::Error<DiskError>) -> Error {
    use embedded_sdmmc::Error as E;
    match e {
        E::NotFound => Error::NotFound,
        E::FilenameError(_) => Error::InvalidArgument,
        E::DiskFull | E::NotEnoughSpace => Error::NoSpace,
        E::TooManyOpenFiles | E::TooManyOpenDirs => Error::NoSpace,
        E::FileAlreadyExists | E::FileAlreadyOpen | E::DirAlreadyOpen | E::DirAlreadyExists => {
            Error::Busy
        }
        E::OpenedDirAsFile | E::OpenedFileAsDir | E::DeleteNonEmptyDir => Error::InvalidArgument,
        E::DeviceError(DiskError(e)) => e,
        E::FormatError(_) | E::BadCluster | E::BadHandle => Error::BadFormat,
        _ => Error::Aborted,
    }
}

fn run() -> Result<(), Error> {
    let mut buf = IpcBuffer::new()?;
    // A queue long enough for a flush's data returns (at most 64 a call) and clients.
    let port = port_allocate(128)?;
    buf.send(
        bootstrap(),
        FS_HELLO,
        &[Descriptor::port(port, Disposition::MakeSend)],
        &[],
    )?;
    cap_drop(bootstrap())?;
    buf.msg(MSG_RECEIVE, port, FOREVER)?;
    let h = buf.header();
    let driver = match buf.descriptor(0) {
        Some(d) if h.id == FS_SETUP && d.kind == DESC_PORT => d.value,
        _ => return Err(Error::BadFormat),
    };
    let setup_reply = h.reply;
    let client = Client {
        buf,
        reply: port_allocate(0)?,
        driver,
    };
    let (vols, volume) = match mount(client) {
        Ok((vols, volume)) => {
            vols.device(|d| {
                reply_words(
                    &mut d.client.borrow_mut().buf,
                    setup_reply,
                    FS_SETUP,
                    &[0],
                    None,
                    None,
                )
            });
            (vols, volume)
        }
        Err((e, why, mut client)) => {
            println!("fs: the disk is refused: {why}");
            reply_words(
                &mut client.buf,
                setup_reply,
                FS_SETUP,
                &[e as u64],
                None,
                None,
            );
            let _ = cap_drop(client.driver);
            return Err(e);
        }
    };
    port_notify(port, NOTIFY_KIND_NO_SENDERS, port)?;
    let mut s = Server {
        vols,
        volume,
        port,
        files: Vec::new(),
        next_cookie: 1,
        requests: 0,
        returns: 0,
        deferred: Vec::new(),
        failed: Vec::new(),
        supply_failures: 0,
        stopping: false,
    };
    s.files
        .try_reserve(FILES_MAX)
        .map_err(|_| Error::NoMemory)?;
    let mut msg = alloc::vec![0u8; pager::RECEIVE_SIZE.max(baton_abi::ipc::IPC_BUFFER_SIZE)];
    loop {
        let m = match s.deferred.pop() {
            Some(m) => m,
            None => {
                msg_buf(&mut msg, MSG_RECEIVE, port, FOREVER)?;
                msg.clone()
            }
        };
        if let Some(Notification::NoSenders(_)) = Notification::of(&m) {
            break;
        }
        s.handle(&m);
        if s.stopping {
            break;
        }
    }
    // Nobody can reach the server any more: write everything back and end.
    for i in 0..s.files.len() {
        let _ = s.sync_file(i);
    }
    for h in s.files.drain(..) {
        let _ = s.vols.close_file(h.file);
        let _ = cap_drop(h.object);
    }
    let _ = s.vols.close_volume(s.volume);
    let (disk, _) = s.vols.free();
    let client = disk.client.into_inner();
    let _ = cap_drop(client.driver);
    let _ = cap_drop(client.reply);
    Ok(())
}

/// What refuses a disk: the error, why, and the client back.
type Refusal = (Error, &'static str, Client);

/// Reads the partition table and mounts the file system: the volume manager (which owns
/// `client` from then on) and the volume; or why the disk is refused.
fn mount(mut client: Client) -> Result<(Volumes, RawVolume), Refusal> {
    let (capacity, table) = match check_table(&mut client) {
        Ok(t) => t,
        Err((e, why)) => return Err((e, why, client)),
    };
    let _ = table;
    let mut data = Vec::new();
    if data.try_reserve_exact(CHUNK as usize * CHUNKS).is_err() {
        return Err((Error::NoMemory, "no memory for the cache", client));
    }
    data.resize(CHUNK as usize * CHUNKS, 0);
    let disk = Disk {
        client: RefCell::new(client),
        cache: RefCell::new(Cache {
            tags: [None; CHUNKS],
            used: [0; CHUNKS],
            clock: 0,
            data,
        }),
        capacity,
        reads: Cell::new(0),
    };
    let vols = Volumes::new_with_limits(disk, Clock, 0);
    let refuse = |vols: Volumes, why: &'static str| -> Refusal {
        let (disk, _) = vols.free();
        (Error::BadFormat, why, disk.client.into_inner())
    };
    let volume = match vols.open_raw_volume(VolumeIdx(0)) {
        Ok(v) => v,
        Err(embedded_sdmmc::Error::FormatError(why)) => return Err(refuse(vols, why)),
        Err(_) => return Err(refuse(vols, "the file system's boot sector does not parse")),
    };
    // Its root folder must be readable too.
    let root = match vols.open_root_dir(volume) {
        Ok(r) => r,
        Err(_) => return Err(refuse(vols, "the root folder cannot be opened")),
    };
    let listed = vols.iterate_dir(root, |_| ControlFlow::Continue(()));
    let _ = vols.close_dir(root);
    if listed.is_err() {
        return Err(refuse(vols, "the root folder does not parse"));
    }
    Ok((vols, volume))
}

/// The disk's capacity and its partition table, checked to hold a file system.
fn check_table(client: &mut Client) -> Result<(u64, [u8; 512]), (Error, &'static str)> {
    let info = client
        .call(BLK_INFO, 0, 0, 0, &[], None)
        .map_err(|e| (e, "the driver does not answer"))?;
    info.result.map_err(|e| (e, "the driver does not answer"))?;
    let capacity = info.words[0];
    let sector0 = client
        .call(BLK_READ, 0, SECTOR, 0, &[], None)
        .map_err(|e| (e, "sector 0 cannot be read"))?;
    sector0.result.map_err(|e| (e, "sector 0 cannot be read"))?;
    let mut table = [0u8; 512];
    table.copy_from_slice(
        sector0
            .inline
            .get(..512)
            .ok_or((Error::BadFormat, "short read"))?,
    );
    baton_disk::find(&table, capacity, baton_disk::TYPE_FILES).map_err(|_| {
        (
            Error::BadFormat,
            "no valid partition table with a file system",
        )
    })?;
    Ok((capacity, table))
}

/// Sends the reply to request `id` on `reply`: `words` in-line, then `text` (in-line, or
/// out of line when longer than [`INLINE_MAX`]), and a right to `object` if any.
fn reply_words(
    buf: &mut IpcBuffer,
    reply: u64,
    id: u64,
    words: &[u64],
    text: Option<&[u8]>,
    object: Option<u64>,
) {
    if reply == 0 {
        return;
    }
    let mut data = [0u8; 64 + INLINE_MAX];
    let mut n = 0;
    for w in words.iter().take(8) {
        data[n..n + 8].copy_from_slice(&w.to_le_bytes());
        n += 8;
    }
    let mut descs = [Descriptor::default(); 2];
    let mut nd = 0;
    let mut region = None;
    if let Some(t) = text {
        if t.len() <= INLINE_MAX {
            data[n..n + t.len()].copy_from_slice(t);
            n += t.len();
        } else if let Ok(va) = baton_rt::vm::allocate(
            None,
            (t.len() as u64).next_multiple_of(P),
            baton_rt::vm::PROT_RW,
        ) {
            // SAFETY: fresh memory of ours, at least `t.len()` bytes.
            unsafe { core::ptr::copy_nonoverlapping(t.as_ptr(), va as *mut u8, t.len()) };
            descs[nd] = Descriptor {
                kind: DESC_OOL,
                disposition: OOL_DEALLOCATE,
                value: va,
                size: t.len() as u64,
            };
            nd += 1;
            region = Some((va, t.len() as u64));
        }
    }
    if let Some(o) = object {
        descs[nd] = Descriptor::port(o, Disposition::CopySend);
        nd += 1;
    }
    let header = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
        dest: reply,
        id: id + 100,
        ..MsgHeader::default()
    };
    if buf.set(header, &descs[..nd], &data[..n]).is_err() || buf.msg(MSG_SEND, 0, 0).is_err() {
        let _ = cap_drop(reply);
        if let Some((va, size)) = region {
            free_region(va, size);
        }
    }
}

/// The path of a request's data after `skip` bytes: checked, without its leading `/`.
fn path_of(data: &[u8], skip: usize) -> Result<&str, Error> {
    let p = data.get(skip..).ok_or(Error::InvalidArgument)?;
    if p.len() > PATH_MAX {
        return Err(Error::InvalidArgument);
    }
    let p = core::str::from_utf8(p).map_err(|_| Error::InvalidArgument)?;
    let rest = p.strip_prefix('/').ok_or(Error::InvalidArgument)?;
    if rest.split('/').any(|c| c.is_empty() && !rest.is_empty()) {
        return Err(Error::InvalidArgument);
    }
    Ok(rest.trim_end_matches('/'))
}

fn word(data: &[u8], i: usize) -> u64 {
    baton_rt::ipc::data_word(data, i)
}

impl Server {
    /// One message: a pager's request or return, a client's request.
    fn handle(&mut self, m: &[u8]) {
        let Some(h) = MsgHeader::from_bytes(m) else {
            return;
        };
        let start = HEADER_SIZE + h.descriptors() * DESCRIPTOR_SIZE;
        let data = m.get(start..(h.size as usize).min(m.len())).unwrap_or(&[]);
        // Rights and regions a client sent along are not wanted.
        for i in 0..h.descriptors() {
            let at = HEADER_SIZE + i * DESCRIPTOR_SIZE;
            match m.get(at..).and_then(Descriptor::from_bytes) {
                Some(d) if d.kind == DESC_PORT && d.value != 0 => {
                    let _ = cap_drop(d.value);
                }
                Some(d) if d.kind == DESC_OOL && d.value != 0 => free_region(d.value, d.size),
                _ => {}
            }
        }
        match h.id {
            DATA_REQUEST => self.data_request(data),
            DATA_RETURN => self.data_return(data),
            FS_MARK => {}
            id => {
                let (words, text, object) = self.request(id, data);
                let reply = h.reply;
                self.with_buf(|buf| reply_words(buf, reply, id, &words, text.as_deref(), object));
            }
        }
    }

    /// Runs `f` on the IPC buffer (the block client's, which the crate's device holds).
    fn with_buf<T>(&self, f: impl FnOnce(&mut IpcBuffer) -> T) -> T {
        self.vols.device(|d| f(&mut d.client.borrow_mut().buf))
    }

    fn held(&self, cookie: u64) -> Option<usize> {
        self.files.iter().position(|f| f.cookie == cookie)
    }

    /// A page the kernel asks for: the file's bytes there (zeros past its end).
    fn data_request(&mut self, data: &[u8]) {
        let Some(r) = Request::from_bytes(data) else {
            return;
        };
        let Some(i) = self.held(r.cookie) else {
            return;
        };
        self.requests += 1;
        let (file, size, object) = (self.files[i].file, self.files[i].size, self.files[i].object);
        let mut page = [0u8; P as usize];
        let n = size.saturating_sub(r.offset).min(P) as usize;
        let read = if n == 0 {
            Ok(())
        } else {
            self.vols
                .file_seek_from_start(file, r.offset as u32)
                .and_then(|_| self.vols.read(file, &mut page[..n]))
                .map(|_| ())
        };
        let supplied = match read {
            Ok(()) => supply(object, r.offset, &page),
            Err(_) => Err(Error::Aborted),
        };
        if let Err(e) = supplied {
            self.fail_page(r.cookie, object, r.offset, e);
        }
    }

    /// Fails page `offset` of `object` (of the file with `cookie`), which could not be
    /// read or supplied (`why`): the client waiting for it takes a pager fault (a kernel
    /// copy an error) instead of waiting for good, and the page is asked again after the
    /// file's next open.
    fn fail_page(&mut self, cookie: u64, object: u64, offset: u64, why: Error) {
        self.supply_failures += 1;
        if self.supply_failures <= FAILURES_REPORTED {
            println!(
                "fs: page {offset:#x} of a file could not be supplied ({why:?}): the access fails"
            );
        }
        if pager::error(object, offset, P).is_ok()
            && self.failed.len() < FAILED_MAX
            && self.failed.try_reserve(1).is_ok()
        {
            self.failed.push((cookie, offset));
        }
    }

    /// The file `i` is opened again: its failed pages are flushed, so that the next touch
    /// of each asks for it again.
    fn retry_failed(&mut self, i: usize) {
        let (cookie, object) = (self.files[i].cookie, self.files[i].object);
        self.failed.retain(|&(c, offset)| {
            if c != cookie {
                return true;
            }
            // SAFETY: the server never maps its objects (no reference relies on their
            // contents), and a failed page has none.
            let _ = unsafe { pager::flush(object, offset, P, FLUSH_DROP) };
            false
        });
    }

    /// A page the kernel gives back: written into the file (up to its end).
    fn data_return(&mut self, data: &[u8]) {
        let Some(r) = Request::from_bytes(data) else {
            return;
        };
        let Some(i) = self.held(r.cookie) else {
            return;
        };
        let bytes = data.get(baton_rt::pager::REQUEST_SIZE..).unwrap_or(&[]);
        let (file, size) = (self.files[i].file, self.files[i].size);
        let n = size.saturating_sub(r.offset).min(P).min(bytes.len() as u64) as usize;
        if n == 0 {
            return;
        }
        if self
            .vols
            .file_seek_from_start(file, r.offset as u32)
            .and_then(|_| self.vols.write(file, &bytes[..n]))
            .is_ok()
        {
            self.returns += 1;
        }
    }

    /// A client's request: the reply's words, its text, the object it hands out.
    fn request(&mut self, id: u64, data: &[u8]) -> (Vec<u64>, Option<Vec<u8>>, Option<u64>) {
        let r = match id {
            FS_OPEN => path_of(data, 0).and_then(|p| self.open(p)).map(|i| {
                self.retry_failed(i);
                let f = &self.files[i];
                (alloc::vec![f.size], None, Some(f.object))
            }),
            FS_CREATE => path_of(data, 8)
                .and_then(|p| self.create(p, word(data, 0)))
                .map(|i| {
                    let f = &self.files[i];
                    (alloc::vec![f.size], None, Some(f.object))
                }),
            FS_SIZE => path_of(data, 0).and_then(|p| self.find(p)).and_then(|e| {
                if e.attributes.is_directory() {
                    Err(Error::InvalidArgument)
                } else {
                    Ok((alloc::vec![u64::from(e.size)], None, None))
                }
            }),
            FS_LIST => path_of(data, 0)
                .and_then(|p| self.list(p))
                .map(|(n, text)| (alloc::vec![n, text.len() as u64], Some(text), None)),
            FS_DELETE => path_of(data, 0)
                .and_then(|p| self.delete(p))
                .map(|()| (Vec::new(), None, None)),
            FS_SYNC => {
                let all = data.is_empty();
                let r = if all {
                    let mut pages = 0;
                    let mut r = Ok(());
                    for i in 0..self.files.len() {
                        match self.sync_file(i) {
                            Ok(n) => pages += n,
                            // Mapped copy-on-write somewhere: not written through it.
                            Err(Error::Denied) => {}
                            Err(e) => r = Err(e),
                        }
                    }
                    r.map(|()| pages)
                } else {
                    path_of(data, 0)
                        .and_then(|p| self.index_of(p).ok_or(Error::NotFound))
                        .and_then(|i| self.sync_file(i))
                };
                r.map(|n| (alloc::vec![n], None, None))
            }
            FS_STOP => {
                // Every file is written back before the reply, so that a client that
                // starts another server on the disk once it has the reply reads what
                // was written (the loop's end writes back again what comes after).
                for i in 0..self.files.len() {
                    let _ = self.sync_file(i);
                }
                self.stopping = true;
                Ok((Vec::new(), None, None))
            }
            FS_INFO => {
                let reads = self.vols.device(|d| d.reads.get());
                Ok((
                    alloc::vec![self.files.len() as u64, self.requests, self.returns, reads],
                    None,
                    None,
                ))
            }
            _ => Err(Error::NotSupported),
        };
        match r {
            Ok((mut words, text, object)) => {
                words.insert(0, 0);
                (words, text, object)
            }
            Err(e) => (alloc::vec![e as u64], None, None),
        }
    }

    /// The held file of `path` (case as the disk has it, compared without case).
    fn index_of(&self, path: &str) -> Option<usize> {
        self.files
            .iter()
            .position(|f| f.path.eq_ignore_ascii_case(path.as_bytes()))
    }

    /// Opens the folder of `path` and finds its last name there: the folder (to close)
    /// and the entry, if there is one.
    fn lookup<'p>(
        &self,
        path: &'p str,
    ) -> Result<(RawDirectory, Option<DirEntry>, &'p str), Error> {
        let mut names = path.split('/').filter(|c| !c.is_empty()).peekable();
        let mut dir = self.vols.open_root_dir(self.volume).map_err(fs_error)?;
        let mut last = "";
        while let Some(name) = names.next() {
            last = name;
            let found = self.entry_in(dir, name);
            if names.peek().is_none() {
                return match found {
                    Ok(e) => Ok((dir, e, last)),
                    Err(e) => {
                        let _ = self.vols.close_dir(dir);
                        Err(e)
                    }
                };
            }
            let next = match found {
                Ok(Some(e)) if e.attributes.is_directory() => {
                    self.vols.open_dir(dir, e.name).map_err(fs_error)
                }
                Ok(_) => Err(Error::NotFound),
                Err(e) => Err(e),
            };
            let _ = self.vols.close_dir(dir);
            dir = next?;
        }
        Ok((dir, None, last))
    }

    /// The entry named `name` in `dir`: by its long name or its short one, without case.
    fn entry_in(&self, dir: RawDirectory, name: &str) -> Result<Option<DirEntry>, Error> {
        let short = ShortFileName::create_from_str(name).ok();
        let mut storage = [0u8; 256];
        let mut lfn = LfnBuffer::new(&mut storage);
        let mut hit = None;
        self.vols
            .iterate_dir_lfn(dir, &mut lfn, |e, long| {
                let by_long = long.is_some_and(|l| l.eq_ignore_ascii_case(name));
                if by_long || short.as_ref() == Some(&e.name) {
                    hit = Some(e.clone());
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .map_err(fs_error)?;
        Ok(hit)
    }

    /// The entry of `path`.
    fn find(&self, path: &str) -> Result<DirEntry, Error> {
        let (dir, e, _) = self.lookup(path)?;
        let _ = self.vols.close_dir(dir);
        e.ok_or(Error::NotFound)
    }

    /// Holds the file of `path` (open, with its object): its index.
    fn open(&mut self, path: &str) -> Result<usize, Error> {
        if let Some(i) = self.index_of(path) {
            return Ok(i);
        }
        if path.is_empty() {
            return Err(Error::InvalidArgument);
        }
        if self.files.len() >= FILES_MAX {
            return Err(Error::NoSpace);
        }
        let (dir, e, _) = self.lookup(path)?;
        let r = match e {
            Some(e) if e.attributes.is_directory() => Err(Error::InvalidArgument),
            Some(e) => self
                .vols
                .open_file_in_dir(dir, e.name, Mode::ReadWriteAppend)
                .map_err(fs_error)
                .map(|f| (f, u64::from(e.size))),
            None => Err(Error::NotFound),
        };
        let _ = self.vols.close_dir(dir);
        let (file, size) = r?;
        self.hold(path, file, size)
    }

    fn hold(&mut self, path: &str, file: RawFile, size: u64) -> Result<usize, Error> {
        let cookie = self.next_cookie;
        let object = match pager::create(self.port, size.next_multiple_of(P).max(P), cookie) {
            Ok(o) => o,
            Err(e) => {
                let _ = self.vols.close_file(file);
                return Err(e);
            }
        };
        let mut p = Vec::new();
        if p.try_reserve_exact(path.len()).is_err() {
            let _ = self.vols.close_file(file);
            let _ = cap_drop(object);
            return Err(Error::NoMemory);
        }
        p.extend_from_slice(path.as_bytes());
        self.next_cookie += 1;
        self.files.push(Held {
            path: p,
            file,
            size,
            object,
            cookie,
        });
        Ok(self.files.len() - 1)
    }

    /// Makes the file `path` of `size` zero bytes (its folder must exist) and holds it.
    fn create(&mut self, path: &str, size: u64) -> Result<usize, Error> {
        if size > CREATE_MAX {
            return Err(Error::TooLarge);
        }
        if path.is_empty() {
            return Err(Error::InvalidArgument);
        }
        if self.files.len() >= FILES_MAX {
            return Err(Error::NoSpace);
        }
        let (dir, e, name) = self.lookup(path)?;
        if e.is_some() {
            let _ = self.vols.close_dir(dir);
            return Err(Error::Busy);
        }
        let made = self
            .vols
            .open_file_in_dir(dir, name, Mode::ReadWriteCreate)
            .map_err(fs_error);
        let file = match made {
            Ok(f) => f,
            Err(e) => {
                let _ = self.vols.close_dir(dir);
                return Err(e);
            }
        };
        let zeros = [0u8; P as usize];
        let mut left = size;
        let mut wrote = Ok(());
        while left > 0 && wrote.is_ok() {
            let n = left.min(P) as usize;
            wrote = self.vols.write(file, &zeros[..n]).map_err(fs_error);
            left -= n as u64;
        }
        if let Err(e) = wrote {
            // The disk is full (or failing): nothing of the file stays.
            let _ = self.vols.close_file(file);
            let _ = self.remove(dir, name);
            let _ = self.vols.close_dir(dir);
            return Err(e);
        }
        let flushed = self.vols.flush_file(file).map_err(fs_error);
        let _ = self.vols.close_dir(dir);
        if let Err(e) = flushed {
            let _ = self.vols.close_file(file);
            return Err(e);
        }
        self.hold(path, file, size)
    }

    /// Deletes the file `path`. A held file is let go of first: pages its objects' users
    /// have not touched yet become pager errors.
    fn delete(&mut self, path: &str) -> Result<(), Error> {
        if let Some(i) = self.index_of(path) {
            let h = self.files.swap_remove(i);
            let _ = self.vols.close_file(h.file);
            let _ = cap_drop(h.object);
        }
        let (dir, e, _) = self.lookup(path)?;
        let r = match e {
            Some(e) if e.attributes.is_directory() => Err(Error::InvalidArgument),
            Some(e) => self.remove(dir, e.name),
            None => Err(Error::NotFound),
        };
        let _ = self.vols.close_dir(dir);
        r
    }

    /// Removes the file `name` of `dir` (not open). The crate's delete only marks the entry
    /// free and leaves the file's clusters allocated; truncating it first gives back every
    /// cluster but its first, which stays lost until a check of the file system.
    fn remove<N: embedded_sdmmc::filesystem::ToShortFileName + Clone>(
        &self,
        dir: RawDirectory,
        name: N,
    ) -> Result<(), Error> {
        let f = self
            .vols
            .open_file_in_dir(dir, name.clone(), Mode::ReadWriteTruncate)
            .map_err(fs_error)?;
        self.vols.close_file(f).map_err(fs_error)?;
        self.vols.delete_entry_in_dir(dir, name).map_err(fs_error)
    }

    /// The folder `path`'s entries, one `name size` line each: their number and the text.
    fn list(&self, path: &str) -> Result<(u64, Vec<u8>), Error> {
        let (dir, opened) = if path.is_empty() {
            (
                self.vols.open_root_dir(self.volume).map_err(fs_error)?,
                None,
            )
        } else {
            let (parent, e, _) = self.lookup(path)?;
            let r = match e {
                Some(e) if e.attributes.is_directory() => {
                    self.vols.open_dir(parent, e.name).map_err(fs_error)
                }
                Some(_) => Err(Error::InvalidArgument),
                None => Err(Error::NotFound),
            };
            let _ = self.vols.close_dir(parent);
            (r?, Some(()))
        };
        let _ = opened;
        let mut text: Vec<u8> = Vec::new();
        let mut n = 0u64;
        let mut storage = [0u8; 256];
        let mut lfn = LfnBuffer::new(&mut storage);
        let mut oom = false;
        let r = self.vols.iterate_dir_lfn(dir, &mut lfn, |e, long| {
            if e.attributes.is_volume() {
                return ControlFlow::Continue(());
            }
            let mut line = heapless_line();
            use core::fmt::Write;
            let _ = match long {
                Some(l) => write!(line, "{l}"),
                None => write!(line, "{}", e.name),
            };
            if line.as_str() == "." || line.as_str() == ".." {
                return ControlFlow::Continue(());
            }
            let _ = if e.attributes.is_directory() {
                writeln!(line, "/ -")
            } else {
                writeln!(line, " {}", e.size)
            };
            if text.try_reserve(line.len()).is_err() {
                oom = true;
                return ControlFlow::Break(());
            }
            text.extend_from_slice(line.as_bytes());
            n += 1;
            ControlFlow::Continue(())
        });
        let _ = self.vols.close_dir(dir);
        r.map_err(fs_error)?;
        if oom {
            return Err(Error::NoMemory);
        }
        Ok((n, text))
    }

    /// Writes the file `i`'s written pages back: the kernel returns its resident pages
    /// (`pager_flush` with `FLUSH_RETURN`), the server writes each into the file as it
    /// receives it, and knows it has them all when the mark it sent itself after the flush
    /// comes. The pages written.
    fn sync_file(&mut self, i: usize) -> Result<u64, Error> {
        let (object, size) = (self.files[i].object, self.files[i].size);
        let len = size.next_multiple_of(P).max(P);
        let mut off = 0;
        while off < len {
            // SAFETY: the server never maps its objects (no reference relies on them),
            // and without FLUSH_DROP the pages stay.
            let done = unsafe { pager::flush(object, off, len - off, FLUSH_RETURN) }?;
            if done == 0 {
                break;
            }
            off += done;
        }
        let before = self.returns;
        let mark = port_make_send(self.port, true)?;
        let sent = self.with_buf(|buf| {
            let h = MsgHeader {
                bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
                dest: mark,
                id: FS_MARK,
                ..MsgHeader::default()
            };
            buf.set(h, &[], &[]).and_then(|_| buf.msg(MSG_SEND, 0, 0))
        });
        if let Err(e) = sent {
            let _ = cap_drop(mark);
            return Err(e);
        }
        let mut msg = alloc::vec![0u8; pager::RECEIVE_SIZE.max(baton_abi::ipc::IPC_BUFFER_SIZE)];
        loop {
            msg_buf(&mut msg, MSG_RECEIVE, self.port, 10_000_000_000)?;
            let Some(h) = MsgHeader::from_bytes(&msg) else {
                continue;
            };
            match h.id {
                FS_MARK => break,
                DATA_RETURN | DATA_REQUEST => self.handle(&msg.clone()),
                _ => {
                    // A client's request (or a notification): served after the sync.
                    let mut m = Vec::new();
                    if m.try_reserve_exact(msg.len()).is_ok() {
                        m.extend_from_slice(&msg);
                        if self.deferred.try_reserve(1).is_ok() {
                            self.deferred.insert(0, m);
                        }
                    }
                }
            }
        }
        let file = self.files.get(i).map(|f| f.file).ok_or(Error::NotFound)?;
        self.vols.flush_file(file).map_err(fs_error)?;
        Ok(self.returns - before)
    }
}

/// Most failed pages remembered for a retry ([`Server::fail_page`]).
const FAILED_MAX: usize = 64;
/// Supply failures reported on the console (the rest are only counted).
const FAILURES_REPORTED: u64 = 4;
/// Tries of a supply the kernel has no frame for, and the pause between them: page
/// replacement (another task's fault, the default pager) may free one meanwhile.
const SUPPLY_TRIES: u32 = 20;
const SUPPLY_PAUSE_NS: u64 = 5_000_000;

/// `pager_supply` of `page` at `offset` of `object`, tried again for a while when the
/// kernel has no frame for it.
fn supply(object: u64, offset: u64, page: &[u8]) -> Result<(), Error> {
    let mut tries = 0;
    loop {
        match pager::supply(object, offset, page) {
            Ok(_) => return Ok(()),
            Err(Error::NoMemory) if tries + 1 < SUPPLY_TRIES => {
                tries += 1;
                let _ = baton_rt::sleep_ns(SUPPLY_PAUSE_NS);
            }
            Err(e) => return Err(e),
        }
    }
}

/// A line of a listing, on the stack.
fn heapless_line() -> Line {
    Line {
        bytes: [0; 300],
        len: 0,
    }
}

struct Line {
    bytes: [u8; 300],
    len: usize,
}

impl Line {
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl core::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        let dst = self.bytes.get_mut(self.len..end).ok_or(core::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
