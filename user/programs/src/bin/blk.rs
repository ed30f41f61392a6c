//! `blk`: the virtio block driver, a user-level server (`docs/drivers.md`).
//!
//! Started with a send right to its creator's port as its bootstrap right. It makes its
//! service port, sends [`BLK_HELLO`] with a send right to it to the bootstrap port, and
//! takes as its first request [`BLK_SETUP`], which brings the host-privilege right. With
//! it the driver gets what a driver needs from the kernel, each as a capability:
//!
//! - the PCI configuration ports 0xcf8–0xcff (an I/O-ports object), to find the device
//!   and program its BARs and command register;
//! - the device's registers (physical memory objects over its BAR, mapped uncached);
//! - DMA memory (DMA objects, whose physical address `memobj_info` reports): the
//!   virtqueue, a 64 KiB data buffer and a page of small bounce slots;
//! - an MSI vector (`msi_attach`): the device's completion interrupt, written into its
//!   MSI-X table, arrives as a notification on a port of the driver's ([`setup_msix`]).
//!
//! The virtio protocol itself is the `virtio-drivers` crate's: [`BatonHal`] is its
//! `Hal` on those objects. Setting up the device resets it (`VirtIOBlk::new`), after
//! which no DMA of an earlier driver instance can land any more: the driver then releases
//! the kernel's quarantine of dead drivers' DMA frames (`dma_quarantine_release`).
//!
//! The driver waits for the interrupt's notification after handing a request to the
//! device; without MSI-X it polls the used ring with a sleep between looks.
//!
//! Requests ([`blk_proto`]) are served one at a time. When no send right to the service
//! port is left, the driver resets the device and exits.
#![no_std]
#![no_main]

#[path = "../blk_proto.rs"]
mod blk_proto;

use baton_abi::ipc::{
    Descriptor, Disposition, MsgHeader, DESC_OOL, DESC_PORT, MSG_RECEIVE, MSG_SEND, OOL_DEALLOCATE,
};
use baton_rt::host::{io_in, io_out, ioport_create, irq_ack, msi_attach, msi_message};
use baton_rt::ipc::NOTIFY_KIND_NO_SENDERS;
use baton_rt::ipc::{cap_drop, data_word, msg_buf, port_allocate, port_notify, IpcBuffer};
use baton_rt::memobj::{self, map_flags, PHYS_UNCACHED};
use baton_rt::rpc::Notification;
use baton_rt::vm::{INHERIT_SHARE, PROT_RW};
use baton_rt::{println, sleep_ns, start::bootstrap, Error, FOREVER};
use blk_proto::*;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use virtio_drivers::device::blk::{BlkReq, BlkResp, VirtIOBlk};
use virtio_drivers::transport::pci::bus::{
    BarInfo, Command, ConfigurationAccess, DeviceFunction, PciRoot,
};
use virtio_drivers::transport::pci::{virtio_device_type, PciTransport};
use virtio_drivers::transport::DeviceType;
use virtio_drivers::{BufferDirection, Hal, PhysAddr, PAGE_SIZE};

baton_rt::entry!(main);

/// The host-privilege right (set once, from [`BLK_SETUP`]).
static HOST: AtomicU64 = AtomicU64::new(0);
/// Whether the starter allowed [`FLAG_HOLD`] (`SETUP_ALLOW_HOLD`).
static ALLOW_HOLD: AtomicBool = AtomicBool::new(false);

/// PCI configuration mechanism #1: the address port and the data port.
const PCI_ADDR: u64 = 0xcf8;
const PCI_DATA: u64 = 0xcfc;

/// Where the driver puts a memory BAR the firmware left unassigned (or above 4 GiB): the
/// q35 machine's 32-bit PCI window, above its configuration-space (ECAM) window.
const BAR_WINDOW: u64 = 0xc000_0000;

/// How long the driver sleeps between looks at the used ring, without an interrupt.
const POLL_NS: u64 = 20_000;
/// With an interrupt: the longest wait for it before the driver looks at the used ring
/// anyway (a lost interrupt costs this, not a hang).
const IRQ_WAIT_NS: u64 = 100_000_000;

/// The MSI-X interrupt: the interrupt object's name and the port its notifications come
/// to (0 and 0: none, the driver polls).
static IRQ: AtomicU64 = AtomicU64::new(0);
static IRQ_PORT: AtomicU64 = AtomicU64::new(0);
/// Interrupts taken (notifications received and acknowledged).
static INTERRUPTS: AtomicU64 = AtomicU64::new(0);

/// PCI configuration space through the 0xcf8/0xcfc ports of an I/O-ports object.
struct PortCam(u64);

impl PortCam {
    fn address(df: DeviceFunction, offset: u8) -> u64 {
        0x8000_0000
            | (u64::from(df.bus) << 16)
            | (u64::from(df.device) << 11)
            | (u64::from(df.function) << 8)
            | u64::from(offset & 0xfc)
    }
}

impl ConfigurationAccess for PortCam {
    fn read_word(&self, df: DeviceFunction, offset: u8) -> u32 {
        if io_out(self.0, PCI_ADDR, 4, Self::address(df, offset)).is_err() {
            return u32::MAX;
        }
        io_in(self.0, PCI_DATA, 4).map_or(u32::MAX, |v| v as u32)
    }

    fn write_word(&mut self, df: DeviceFunction, offset: u8, data: u32) {
        if io_out(self.0, PCI_ADDR, 4, Self::address(df, offset)).is_ok() {
            let _ = io_out(self.0, PCI_DATA, 4, u64::from(data));
        }
    }

    unsafe fn unsafe_clone(&self) -> Self {
        PortCam(self.0)
    }
}

/// The data buffer (DMA memory of [`MAX_BYTES`]): its address here and its physical one.
static DATA_VA: AtomicU64 = AtomicU64::new(0);
static DATA_PA: AtomicU64 = AtomicU64::new(0);
/// The bounce page: 64 slots of 64 bytes for the small buffers (request headers, status
/// bytes) the crate shares from the stack; `BOUNCE_USED` has a bit per slot in use.
static BOUNCE_VA: AtomicU64 = AtomicU64::new(0);
static BOUNCE_PA: AtomicU64 = AtomicU64::new(0);
static BOUNCE_USED: AtomicU64 = AtomicU64::new(0);
const SLOT: u64 = 64;

/// DMA buffers the crate allocated: (address, right) pairs, 0 when free.
static DMA: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];

/// A DMA object of `len` bytes mapped here: (address, physical address, right).
fn dma_buffer(len: u64) -> Result<(u64, u64, u64), Error> {
    let name = memobj::dma(len, HOST.load(Ordering::Relaxed))?;
    let info = memobj::info(name)?;
    let va = memobj::map(
        name,
        len,
        0,
        map_flags(PROT_RW, PROT_RW, false, INHERIT_SHARE),
    )?;
    Ok((va, info.phys, name))
}

/// `virtio-drivers`' hardware abstraction on Baton's memory objects.
struct BatonHal;

// SAFETY: `dma_alloc` returns fresh, zeroed, page-aligned memory (a new DMA object mapped
// nowhere else) whose physical address is the object's; `mmio_phys_to_virt` maps a fresh
// physical object over exactly the range asked; `share` gives the device either the
// physical address of the buffer itself (inside the DMA data buffer) or of a bounce slot
// that nothing else uses until `unshare`.
unsafe impl Hal for BatonHal {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let len = (pages * PAGE_SIZE) as u64;
        let Ok((va, pa, name)) = dma_buffer(len) else {
            panic!("blk: no DMA memory for the virtqueue");
        };
        let Some(slot) = DMA.chunks(2).find(|s| s[0].load(Ordering::Relaxed) == 0) else {
            panic!("blk: too many DMA buffers");
        };
        slot[0].store(va, Ordering::Relaxed);
        slot[1].store(name, Ordering::Relaxed);
        let Some(ptr) = NonNull::new(va as *mut u8) else {
            panic!("blk: DMA buffer mapped at 0");
        };
        (pa, ptr)
    }

    unsafe fn dma_dealloc(_paddr: PhysAddr, vaddr: NonNull<u8>, pages: usize) -> i32 {
        let va = vaddr.as_ptr() as u64;
        for slot in DMA.chunks(2) {
            if slot[0].load(Ordering::Relaxed) == va {
                // SAFETY: the crate gives the buffer back and no longer uses it.
                let _ = unsafe { baton_rt::vm::deallocate(va, (pages * PAGE_SIZE) as u64) };
                let _ = cap_drop(slot[1].load(Ordering::Relaxed));
                slot[0].store(0, Ordering::Relaxed);
                return 0;
            }
        }
        -1
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, size: usize) -> NonNull<u8> {
        let base = paddr & !(PAGE_SIZE as u64 - 1);
        let end = (paddr + size as u64).next_multiple_of(PAGE_SIZE as u64);
        let host = HOST.load(Ordering::Relaxed);
        let mapped = memobj::physical(base, end - base, PHYS_UNCACHED, host).and_then(|name| {
            memobj::map(
                name,
                end - base,
                0,
                map_flags(PROT_RW, PROT_RW, false, INHERIT_SHARE),
            )
        });
        match mapped
            .ok()
            .and_then(|va| NonNull::new((va + paddr - base) as *mut u8))
        {
            Some(p) => p,
            None => panic!("blk: cannot map the device's registers at {paddr:#x}"),
        }
    }

    unsafe fn share(buffer: NonNull<[u8]>, direction: BufferDirection) -> PhysAddr {
        let va = buffer.as_ptr() as *mut u8 as u64;
        let len = buffer.len() as u64;
        let data = DATA_VA.load(Ordering::Relaxed);
        if va >= data && va + len <= data + MAX_BYTES {
            return DATA_PA.load(Ordering::Relaxed) + (va - data);
        }
        assert!(len <= SLOT, "blk: a large buffer outside the DMA buffer");
        let used = BOUNCE_USED.load(Ordering::Relaxed);
        let slot = u64::from((!used).trailing_zeros());
        assert!(slot < 64, "blk: out of bounce slots");
        BOUNCE_USED.store(used | (1 << slot), Ordering::Relaxed);
        let at = BOUNCE_VA.load(Ordering::Relaxed) + slot * SLOT;
        if !matches!(direction, BufferDirection::DeviceToDriver) {
            // SAFETY: the slot is ours until `unshare`, `len` ≤ its size; the caller
            // guarantees `buffer` is valid for reads.
            unsafe { core::ptr::copy_nonoverlapping(va as *const u8, at as *mut u8, len as usize) };
        }
        BOUNCE_PA.load(Ordering::Relaxed) + slot * SLOT
    }

    unsafe fn unshare(paddr: PhysAddr, buffer: NonNull<[u8]>, direction: BufferDirection) {
        let bounce = BOUNCE_PA.load(Ordering::Relaxed);
        if !(bounce..bounce + PAGE_SIZE as u64).contains(&paddr) {
            return;
        }
        let slot = (paddr - bounce) / SLOT;
        if !matches!(direction, BufferDirection::DriverToDevice) {
            let at = BOUNCE_VA.load(Ordering::Relaxed) + slot * SLOT;
            // SAFETY: as in `share`: the slot holds `buffer.len()` bytes the device wrote;
            // the caller guarantees `buffer` is valid for writes.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    at as *const u8,
                    buffer.as_ptr() as *mut u8,
                    buffer.len(),
                )
            };
        }
        BOUNCE_USED.fetch_and(!(1 << slot), Ordering::Relaxed);
    }
}

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("blk: {}", e.name());
            1
        }
    }
}

fn run() -> Result<(), Error> {
    let mut buf = IpcBuffer::new()?;
    let port = port_allocate(0)?;
    buf.send(
        bootstrap(),
        BLK_HELLO,
        &[Descriptor::port(port, Disposition::MakeSend)],
        &[],
    )?;
    cap_drop(bootstrap())?;
    // The setup message: the host-privilege right.
    buf.msg(MSG_RECEIVE, port, FOREVER)?;
    let h = buf.header();
    let host = match buf.descriptor(0) {
        Some(d) if h.id == BLK_SETUP && d.kind == DESC_PORT => d.value,
        _ => return Err(Error::BadFormat),
    };
    HOST.store(host, Ordering::Relaxed);
    ALLOW_HOLD.store(
        data_word(buf.data(), 0) & SETUP_ALLOW_HOLD != 0,
        Ordering::Relaxed,
    );
    port_notify(port, NOTIFY_KIND_NO_SENDERS, port)?;
    // The default pager waits for this driver while memory is short: none of the
    // driver's own memory may be paged out (its code and DMA buffers are pinned anyway;
    // its stack, data, heap and IPC buffer are wired here), and it takes no new page
    // while serving (requests and replies of up to `INLINE_MAX` bytes live in the IPC
    // buffer and on the stack).
    wire_all()?;

    let (va, pa, _) = dma_buffer(MAX_BYTES)?;
    DATA_VA.store(va, Ordering::Relaxed);
    DATA_PA.store(pa, Ordering::Relaxed);
    let (va, pa, _) = dma_buffer(PAGE_SIZE as u64)?;
    BOUNCE_VA.store(va, Ordering::Relaxed);
    BOUNCE_PA.store(pa, Ordering::Relaxed);

    let io = ioport_create(PCI_ADDR, 8, host)?;
    let mut root = PciRoot::new(PortCam(io));
    let df = find_block(&mut root).ok_or(Error::NotFound)?;
    let transport = PciTransport::new::<BatonHal, _>(&mut root, df).map_err(|_| Error::NotFound)?;
    // Setting the device up resets it first: from here no DMA of a dead instance lands.
    let mut blk = VirtIOBlk::<BatonHal, _>::new(transport).map_err(|_| Error::Aborted)?;
    match setup_msix(io, &mut root, df, host) {
        Ok((irq, port)) => {
            IRQ.store(irq, Ordering::Relaxed);
            IRQ_PORT.store(port, Ordering::Relaxed);
        }
        Err(e) => println!("blk: no MSI-X interrupt ({}): polling", e.name()),
    }
    let released = memobj::dma_quarantine_release(host)?;
    println!(
        "blk: virtio block device at {:02x}:{:02x}.{}, {} sectors, {}; {} quarantined DMA pages released",
        df.bus,
        df.device,
        df.function,
        blk.capacity(),
        if IRQ.load(Ordering::Relaxed) != 0 {
            "completions by MSI-X interrupt"
        } else {
            "completions polled"
        },
        released
    );
    serve(&mut buf, port, &mut blk)?;
    // No sender left: `blk` is dropped, which resets the device.
    Ok(())
}

/// The first virtio block device of bus 0, its memory BARs placed below 4 GiB and its
/// memory decoding and bus mastering on.
fn find_block(root: &mut PciRoot<PortCam>) -> Option<DeviceFunction> {
    let df = root
        .enumerate_bus(0)
        .find(|(_, info)| virtio_device_type(info) == Some(DeviceType::Block))?
        .0;
    let mut next = BAR_WINDOW;
    let mut bar = 0u8;
    while bar < 6 {
        let info = root.bar_info(df, bar).ok()?;
        let mut step = 1;
        if let Some(BarInfo::Memory { address, size, .. }) = &info {
            let (address, size) = (*address, *size);
            let wide = info.as_ref().is_some_and(BarInfo::takes_two_entries);
            if wide {
                step = 2;
            }
            if size > 0 && (address == 0 || address + size > 1 << 32) {
                let at = next.next_multiple_of(size);
                if wide {
                    root.set_bar_64(df, bar, at);
                } else {
                    root.set_bar_32(df, bar, at as u32);
                }
                next = at + size;
            }
        }
        bar += step;
    }
    root.set_command(df, Command::MEMORY_SPACE | Command::BUS_MASTER);
    Some(df)
}

/// Waits up to `timeout_ns` (0: not at all) for an interrupt notification on `port` and
/// acknowledges it; whether a message came.
fn take_interrupt(irq: u64, port: u64, timeout_ns: u64) -> Result<bool, Error> {
    let mut m = [0u8; 64];
    match msg_buf(&mut m, MSG_RECEIVE, port, timeout_ns) {
        Ok(()) => {
            if let Some(Notification::Interrupt(_)) = Notification::of(&m) {
                irq_ack(irq)?;
                INTERRUPTS.fetch_add(1, Ordering::Relaxed);
            }
            Ok(true)
        }
        Err(Error::TimedOut) | Err(Error::WouldBlock) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Maps the page around physical address `pa` (registers), uncached; the address of `pa`.
fn map_registers(pa: u64, host: u64) -> Result<u64, Error> {
    let page = pa & !(PAGE_SIZE as u64 - 1);
    let name = memobj::physical(page, PAGE_SIZE as u64, PHYS_UNCACHED, host)?;
    let va = memobj::map(
        name,
        PAGE_SIZE as u64,
        0,
        map_flags(PROT_RW, PROT_RW, false, INHERIT_SHARE),
    )?;
    Ok(va + (pa - page))
}

/// Gives the device's queue an MSI-X vector bound to a new port of the driver: a vector
/// from the kernel (`msi_attach`), its message written into entry 0 of the device's MSI-X
/// table, MSI-X turned on, and virtio's `queue_msix_vector` of queue 0 set to entry 0 (no
/// configuration-change vector). The interrupt object's name and the port.
fn setup_msix(
    io: u64,
    root: &mut PciRoot<PortCam>,
    df: DeviceFunction,
    host: u64,
) -> Result<(u64, u64), Error> {
    let mut cam = PortCam(io);
    // Walk the capability list for MSI-X (id 0x11) and virtio's common configuration
    // (vendor capability 0x09 of type 1: its BAR and offset).
    let mut msix = None;
    let mut common = None;
    let mut at = (cam.read_word(df, 0x34) & 0xfc) as u8;
    let mut steps = 0;
    while at != 0 && steps < 48 {
        let w = cam.read_word(df, at);
        match w & 0xff {
            0x11 => msix = Some(at),
            0x09 if (w >> 24) & 0xff == 1 && common.is_none() => {
                let bar = (cam.read_word(df, at + 4) & 0xff) as u8;
                common = Some((bar, u64::from(cam.read_word(df, at + 8))));
            }
            _ => {}
        }
        at = ((w >> 8) & 0xfc) as u8;
        steps += 1;
    }
    let (msix, (common_bar, common_off)) = match (msix, common) {
        (Some(m), Some(c)) => (m, c),
        _ => return Err(Error::NotSupported),
    };
    let bar_address = |root: &mut PciRoot<PortCam>, bar: u8| match root.bar_info(df, bar) {
        Ok(Some(BarInfo::Memory { address, .. })) if address != 0 => Ok(address),
        _ => Err(Error::NotSupported),
    };
    let table = cam.read_word(df, msix + 4);
    let table_pa = bar_address(root, (table & 7) as u8)? + u64::from(table & !7);
    let common_pa = bar_address(root, common_bar)? + common_off;

    let port = port_allocate(0)?;
    let irq = msi_attach(port, host)?;
    let (address, data) = msi_message(irq)?;
    let entry = map_registers(table_pa, host)?;
    // SAFETY: `entry` maps the device's MSI-X table (uncached), whose entry 0 is four
    // 32-bit registers: address low, address high, data, vector control.
    unsafe {
        let e = entry as *mut u32;
        e.write_volatile(address as u32);
        e.add(1).write_volatile((address >> 32) as u32);
        e.add(2).write_volatile(data);
        e.add(3).write_volatile(0);
    }
    // Message control: MSI-X enable (bit 15) on, function mask (bit 14) off.
    let w = cam.read_word(df, msix);
    let control = ((w >> 16) | 0x8000) & !0x4000;
    cam.write_word(df, msix, (w & 0xffff) | (control << 16));
    let cfg = map_registers(common_pa, host)?;
    // SAFETY: `cfg` maps virtio's common configuration structure (uncached): msix_config
    // at 0x10, queue_select at 0x16 and queue_msix_vector at 0x1a, 16 bits each.
    let vector = unsafe {
        let r = |off: u64| (cfg + off) as *mut u16;
        r(0x10).write_volatile(0xffff);
        r(0x16).write_volatile(0);
        r(0x1a).write_volatile(0);
        r(0x1a).read_volatile()
    };
    if vector != 0 {
        return Err(Error::NotSupported);
    }
    Ok((irq, port))
}

type Blk = VirtIOBlk<BatonHal, PciTransport>;

/// Serves requests on `port` until no sender is left.
fn serve(buf: &mut IpcBuffer, port: u64, blk: &mut Blk) -> Result<(), Error> {
    loop {
        buf.msg(MSG_RECEIVE, port, FOREVER)?;
        let h = buf.header();
        if let Some(n) = Notification::of(buf.view()) {
            if matches!(n, Notification::NoSenders(_)) {
                return Ok(());
            }
            continue;
        }
        let reply = h.reply;
        let once = h.reply_disposition() == Disposition::MoveSendOnce as u8;
        // What came with the request: its out-of-line region, if any; rights are dropped.
        let mut region = None;
        for i in 0..h.descriptors() {
            match buf.descriptor(i) {
                Some(d) if d.kind == DESC_OOL && d.value != 0 => {
                    if region.is_none() {
                        region = Some((d.value, d.size));
                    } else {
                        release_region(d.value, d.size);
                    }
                }
                Some(d) if d.kind == DESC_PORT && d.value != 0 => {
                    let _ = cap_drop(d.value);
                }
                _ => {}
            }
        }
        let data = buf.data();
        let (sector, len, flags) = (data_word(data, 0), data_word(data, 1), data_word(data, 2));
        let inline = data.get(24..).unwrap_or(&[]);
        let mut words = [0u64; 4];
        let mut nwords = 1;
        let mut out: Option<(u64, u64)> = None;
        let result = match h.id {
            BLK_INFO => {
                words[1] = blk.capacity();
                words[2] = MAX_BYTES;
                words[3] = INTERRUPTS.load(Ordering::Relaxed);
                nwords = 4;
                Ok(())
            }
            BLK_READ => check(blk, sector, len, flags).and_then(|()| {
                transfer(blk, sector, len, flags, false)?;
                if len > INLINE_MAX {
                    out = Some(copy_out(len)?);
                }
                Ok(())
            }),
            BLK_WRITE => check(blk, sector, len, flags).and_then(|()| {
                fill(inline, region, len)?;
                transfer(blk, sector, len, flags, true)
            }),
            _ => Err(Error::NotSupported),
        };
        if let Some((va, size)) = region {
            release_region(va, size);
        }
        if reply == 0 {
            if let Some((va, size)) = out {
                release_region(va, size);
            }
            continue;
        }
        words[0] = match result {
            Ok(()) => 0,
            Err(e) => e as u64,
        };
        let mut bytes = [0u8; 32 + INLINE_MAX as usize];
        for (i, w) in words.iter().enumerate().take(nwords) {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let mut n = nwords * 8;
        if h.id == BLK_READ && result.is_ok() && out.is_none() {
            let src = DATA_VA.load(Ordering::Relaxed) as *const u8;
            // SAFETY: the data buffer is mapped and at least `len` ≤ `INLINE_MAX` bytes long,
            // and the device is done with it (the request completed).
            let got = unsafe { core::slice::from_raw_parts(src, len as usize) };
            bytes[8..8 + len as usize].copy_from_slice(got);
            n = 8 + len as usize;
        }
        let mut descs = [Descriptor::default(); 1];
        let nd = match out {
            Some((va, size)) => {
                descs[0] = Descriptor {
                    kind: DESC_OOL,
                    disposition: OOL_DEALLOCATE,
                    value: va,
                    size,
                };
                1
            }
            None => 0,
        };
        let header = MsgHeader {
            bits: MsgHeader::make_bits(
                if once {
                    Disposition::MoveSendOnce
                } else {
                    Disposition::MoveSend
                },
                Disposition::None,
                0,
            ),
            dest: reply,
            id: h.id + 100,
            ..MsgHeader::default()
        };
        if buf.set(header, &descs[..nd], &bytes[..n]).is_err()
            || buf
                .msg(MSG_SEND, 0, if once { 0 } else { 10_000_000 })
                .is_err()
        {
            let _ = cap_drop(reply);
            if let Some((va, size)) = out {
                release_region(va, size);
            }
        }
    }
}

/// Wires every range of the task's address space (at most 16 MiB each; the heap's
/// reserved range is larger and unmapped until used, and is left as it is).
fn wire_all() -> Result<(), Error> {
    let mut addr = 0;
    while let Ok(r) = baton_rt::vm::query(addr) {
        if r.wired == 0 && r.end - r.start <= 16 << 20 {
            baton_rt::vm::wire(r.start, r.end - r.start)?;
        }
        addr = r.end;
    }
    Ok(())
}

/// Checks a transfer of `len` bytes at `sector` with `flags`.
fn check(blk: &Blk, sector: u64, len: u64, flags: u64) -> Result<(), Error> {
    if flags & FLAG_HOLD != 0 && !ALLOW_HOLD.load(Ordering::Relaxed) {
        return Err(Error::Denied);
    }
    if len > MAX_BYTES {
        return Err(Error::TooLarge);
    }
    if len == 0 || !len.is_multiple_of(SECTOR) {
        return Err(Error::InvalidArgument);
    }
    let end = sector.checked_add(len / SECTOR).ok_or(Error::NoSpace)?;
    if end > blk.capacity() {
        return Err(Error::NoSpace);
    }
    Ok(())
}

/// Puts the request's data (`inline`, or the out-of-line `region`) into the data buffer.
fn fill(inline: &[u8], region: Option<(u64, u64)>, len: u64) -> Result<(), Error> {
    let dst = DATA_VA.load(Ordering::Relaxed) as *mut u8;
    let src = match region {
        Some((va, size)) if size == len => va as *const u8,
        Some(_) => return Err(Error::BadFormat),
        None if inline.len() as u64 == len => inline.as_ptr(),
        None => return Err(Error::BadFormat),
    };
    // SAFETY: `src` is `len` readable bytes (the message's data or the region the kernel
    // mapped for it), `dst` the data buffer of `MAX_BYTES` ≥ `len` (checked); they do
    // not overlap.
    unsafe { core::ptr::copy_nonoverlapping(src, dst, len as usize) };
    Ok(())
}

/// Copies the data buffer's first `len` bytes into fresh memory, to be moved to the client
/// out of line (the data buffer itself is never lent: the device writes it).
fn copy_out(len: u64) -> Result<(u64, u64), Error> {
    let size = len.next_multiple_of(PAGE_SIZE as u64);
    let va = baton_rt::vm::allocate(None, size, PROT_RW)?;
    // SAFETY: `va` is `size` ≥ `len` fresh bytes of ours; the data buffer holds `len`.
    unsafe {
        core::ptr::copy_nonoverlapping(
            DATA_VA.load(Ordering::Relaxed) as *const u8,
            va as *mut u8,
            len as usize,
        )
    };
    Ok((va, len))
}

/// Unmaps an out-of-line region that arrived (or was to leave) with a message.
fn release_region(va: u64, size: u64) {
    let start = va & !(PAGE_SIZE as u64 - 1);
    let end = (va + size).next_multiple_of(PAGE_SIZE as u64);
    // SAFETY: the region is the message's, mapped for it alone; nothing refers to it.
    let _ = unsafe { baton_rt::vm::deallocate(start, end - start) };
}

/// Moves `len` bytes between the data buffer and the disk at `sector`, waiting for the
/// device by polling its used ring (a short sleep between looks).
fn transfer(blk: &mut Blk, sector: u64, len: u64, flags: u64, write: bool) -> Result<(), Error> {
    let data = DATA_VA.load(Ordering::Relaxed) as *mut u8;
    // SAFETY: the data buffer is mapped, `MAX_BYTES` ≥ `len` bytes (checked), and only
    // this function touches it until the request completes.
    let buffer = unsafe { core::slice::from_raw_parts_mut(data, len as usize) };
    let mut req = BlkReq::default();
    let mut resp = BlkResp::default();
    // SAFETY: `req`, `buffer` and `resp` are not touched until the request is completed
    // below, with the same buffers.
    let token = unsafe {
        if write {
            blk.write_blocks_nb(sector as usize, &mut req, buffer, &mut resp)
        } else {
            blk.read_blocks_nb(sector as usize, &mut req, buffer, &mut resp)
        }
    }
    .map_err(|_| Error::Aborted)?;
    if flags & FLAG_HOLD != 0 {
        sleep_ns(HOLD_NS)?;
    }
    let (irq, port) = (
        IRQ.load(Ordering::Relaxed),
        IRQ_PORT.load(Ordering::Relaxed),
    );
    while blk.peek_used() != Some(token) {
        if irq == 0 {
            sleep_ns(POLL_NS)?;
        } else {
            // Wait for the device's interrupt (acknowledged before the next look at the
            // ring, so that a completion after the look brings a new notification).
            take_interrupt(irq, port, IRQ_WAIT_NS)?;
        }
    }
    // The request's own interrupt may have come without a wait (the device finished at
    // once): take it now, so that it does not wake the next request's wait early.
    if irq != 0 {
        while take_interrupt(irq, port, 0)? {}
    }
    // SAFETY: the same buffers as were handed to the device with `token`.
    let done = unsafe {
        if write {
            blk.complete_write_blocks(token, &req, buffer, &mut resp)
        } else {
            blk.complete_read_blocks(token, &req, buffer, &mut resp)
        }
    };
    done.map_err(|_| Error::Aborted)
}
