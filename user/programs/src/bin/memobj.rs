//! Memory objects as capabilities, booted (`docs/vm.md`, "Memory objects as
//! capabilities"): an object shared with another task (`memobj_peer`) that maps it at
//! another address, each seeing the other's writes, with `wait_shared`/`wake_shared`
//! across the two tasks; a copy-on-write mapping that keeps its snapshot; a read-only
//! right; an object outliving its last right while mapped; another task's memory read and
//! written through its task port; DMA buffers and physical objects, refused without the
//! host-privilege right and over RAM; every error with nothing changed; exhaustion and
//! recovery, for this task and for a child at its kernel-memory limit while this task
//! goes on making objects. Each round must leave the kernel heap, objects, ports and free
//! frames where the previous one did. Booted with `priv=memobj`.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, Ordering};

use baton_abi::memobj::{MAP_COPY, PHYS_LIMIT};
use baton_abi::vm::{OBJECT_PHYSICAL, PROT_EXECUTE, PROT_READ, PROT_WRITE};
use baton_rt::check::Failed;
use baton_rt::ipc::{cap_drop, port_allocate};
use baton_rt::kobject::{task_port, task_self};
use baton_rt::memobj::{self, map_flags, KIND_ANONYMOUS, KIND_DMA, KIND_PHYSICAL, PHYS_UNCACHED};
use baton_rt::vm::{self, INHERIT_COPY, INHERIT_SHARE, PROT_RW};
use baton_rt::{println, Error};

baton_rt::entry!(main);

const TEST: &str = "memobj";
const P: u64 = 4096;
/// Where fixed-address checks put memory.
const FIXED: u64 = 0x5300_0000_0000;
/// Shared or copy-on-write, read and write, inheritance copy.
const RW: u64 = map_flags(PROT_RW, PROT_RW, false, INHERIT_COPY);
const RW_COPY: u64 = RW | MAP_COPY;
const RO: u64 = map_flags(PROT_READ, PROT_READ, false, INHERIT_COPY);

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

fn main(_task_id: u64) -> i32 {
    baton_rt::check::finish(TEST, run())
}

fn read(addr: u64) -> u64 {
    // SAFETY: the callers pass mapped memory of this test that no reference covers.
    unsafe { (addr as *const u64).read_volatile() }
}

fn write(addr: u64, v: u64) {
    // SAFETY: as in `read`, writable.
    unsafe { (addr as *mut u64).write_volatile(v) }
}

fn word(base: u64, i: u64) -> &'static AtomicU32 {
    // SAFETY: `base` is a mapping of a shared object of at least a page that stays mapped
    // while the caller uses the word, `i` < 1024; `AtomicU32` may alias memory another
    // task writes.
    unsafe { &*((base + 4 * i) as *const AtomicU32) }
}

/// Kernel heap, objects, ports, free frames.
fn counts() -> Result<(u64, u64, u64, u64), Failed> {
    let s = must("stats", baton_rt::stats())?;
    let v = must("vm stats", vm::system_stats())?;
    Ok((s.heap_used, v.objects, s.ports, v.frames_free))
}

fn run() -> Result<(), Failed> {
    let host = baton_rt::start::host_priv();
    check!(
        host != 0,
        "booted with the host-privilege right (priv=memobj)"
    );
    // The objects the rounds share with the peer and the hog: one each for all, so that
    // the waits on them use the same keys and the wait queues' buckets (which keep the
    // room they grew to) are the same each round.
    let shared = must("create", memobj::create(4 * P))?;
    let hog = must("create", memobj::create(P))?;
    let mut after = [(0, 0, 0, 0); 3];
    for (round, slot) in after.iter_mut().enumerate() {
        println!("memobj: round {round}");
        sharing(shared)?;
        copy_on_write()?;
        rights_and_lifetime()?;
        physical(host)?;
        errors()?;
        exhaustion()?;
        child_exhaustion(hog)?;
        *slot = counts()?;
    }
    check!(
        after[1] == after[2],
        "another round leaves the kernel heap, objects, ports and free frames as the last did ({:?})",
        after
    );
    must("drop", cap_drop(shared))?;
    must("drop", cap_drop(hog))?;
    Ok(())
}

/// Waits until `w` holds `value` (the other side wakes it), for at most 20 s.
fn wait_for(w: &AtomicU32, value: u32) -> Result<(), Failed> {
    for _ in 0..2000 {
        let v = w.load(Ordering::SeqCst);
        if v == value {
            return Ok(());
        }
        match memobj::wait_shared(w, v, 10_000_000) {
            Ok(()) | Err(Error::WouldBlock) | Err(Error::TimedOut) => {}
            Err(e) => return must("wait_shared", Err(e)),
        }
    }
    check!(false, "the peer reached phase {value}");
    Ok(())
}

/// Two tasks share an object at different addresses; wait/wake across them; the other
/// task's memory read and written through its task port.
fn sharing(obj: u64) -> Result<(), Failed> {
    let threads_before = must("stats", baton_rt::stats())?.threads;
    let info = must("info", memobj::info(obj))?;
    check!(
        info.size == 4 * P && info.kind == KIND_ANONYMOUS && info.max_prot == 7 && info.phys == 0,
        "memobj_info: 4 pages of anonymous memory, everything allowed, no physical address"
    );
    let at = must("map", memobj::map(obj, 4 * P, 0, RW))?;
    let w = |i| word(at, i);
    for i in 0..16 {
        w(i).store(0, Ordering::SeqCst);
    }
    let peer = must(
        "spawn memobj_peer",
        baton_rt::sys::spawn_with("memobj_peer", obj),
    )?;
    wait_for(w(0), 1)?;
    let peer_at =
        u64::from(w(2).load(Ordering::SeqCst)) | u64::from(w(3).load(Ordering::SeqCst)) << 32;
    check!(
        w(1).load(Ordering::SeqCst) == 0x1111 && peer_at != at && peer_at != 0,
        "two tasks share an object: the peer's write at {peer_at:#x} is seen at {at:#x}"
    );
    // The peer's memory through its task port.
    let port = must("task_port", task_port(peer))?;
    let secret =
        u64::from(w(7).load(Ordering::SeqCst)) | u64::from(w(8).load(Ordering::SeqCst)) << 32;
    let mut buf = [0u8; 8];
    must("vm_read", memobj::read(port, secret, &mut buf))?;
    check!(
        u64::from_le_bytes(buf) == 0x5ec7_e700,
        "vm_read through the task port reads the other task's variable"
    );
    // SAFETY: another task's memory; no reference of this task.
    must("vm_write", unsafe {
        memobj::write(port, secret, &0x77u64.to_le_bytes())
    })?;
    must("vm_read", memobj::read(port, secret, &mut buf))?;
    check!(
        u64::from_le_bytes(buf) == 0x77,
        "vm_write through the task port lands"
    );
    let mut code = [0u8; 16];
    check!(
        memobj::read(port, 0x40_1000, &mut code).is_ok()
            // SAFETY: refused (the page is not writable by the task); nothing changes.
            && unsafe { memobj::write(port, 0x40_1000, &code) } == Err(Error::BadAddress),
        "the other task's code reads, and refuses a write (its protection): BadAddress"
    );
    // Cross-task wake: the peer waits on word 0 where it maps it; wake where it is here.
    w(4).store(0x2222, Ordering::SeqCst);
    let mut woke = 0;
    for _ in 0..5000 {
        woke = must("wake_shared", memobj::wake_shared(w(0), 1))?;
        if woke == 1 {
            break;
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
    }
    check!(
        woke == 1,
        "wake_shared here wakes the peer's wait_shared at its own address"
    );
    wait_for(w(0), 3)?;
    check!(
        w(5).load(Ordering::SeqCst) == 1 && w(6).load(Ordering::SeqCst) == 1,
        "the peer was woken (not timed out) and saw this task's write; its wake woke this task's wait"
    );
    check!(
        w(9).load(Ordering::SeqCst) == 1,
        "the peer sees the value vm_write put in its variable"
    );
    must("drop the task port", cap_drop(port))?;
    // The peer's end: its mapping goes; ours keeps the object.
    for _ in 0..2000 {
        if must("stats", baton_rt::stats())?.threads <= threads_before {
            break;
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
    }
    check!(
        w(1).load(Ordering::SeqCst) == 0x1111,
        "with the peer gone, its writes stay in the object"
    );
    // SAFETY: nothing refers to the mapping.
    must("unmap", unsafe { vm::deallocate(at, 4 * P) })?;
    Ok(())
}

/// A copy-on-write mapping is a snapshot: writes on either side are not seen by the other.
fn copy_on_write() -> Result<(), Failed> {
    let obj = must("create", memobj::create(2 * P))?;
    let a = must("map", memobj::map(obj, 2 * P, 0, RW))?;
    write(a, 1);
    write(a + P, 2);
    let c = must("map copy", memobj::map(obj, 2 * P, 0, RW_COPY))?;
    let r = must("query", vm::query(c))?;
    check!(
        read(c) == 1 && read(c + P) == 2 && r.copy_on_write == 1,
        "a copy-on-write mapping reads the object's contents"
    );
    write(a, 10);
    write(c + P, 20);
    check!(
        read(c) == 1 && read(a + P) == 2 && read(a) == 10 && read(c + P) == 20,
        "after writes on both sides each keeps its own: the copy is a snapshot"
    );
    // A window: the second page alone, at a fixed address.
    // SAFETY: nothing of this task is at `FIXED`.
    let b = must("map window", unsafe {
        memobj::map_raw(obj, FIXED, P, P, RO)
    })?;
    check!(
        b == FIXED && read(b) == 2,
        "a one-page window at a fixed address shows the object's second page"
    );
    must("drop", cap_drop(obj))?;
    // SAFETY: nothing refers to these ranges.
    unsafe {
        must("unmap", vm::deallocate(a, 2 * P))?;
        must("unmap", vm::deallocate(c, 2 * P))?;
        must("unmap", vm::deallocate(b, P))?;
    }
    Ok(())
}

/// A read-only right; the object lives while a right or a mapping names it.
fn rights_and_lifetime() -> Result<(), Failed> {
    let before = must("vm stats", vm::system_stats())?.objects;
    let obj = must("create", memobj::create(P))?;
    check!(
        must("vm stats", vm::system_stats())?.objects == before + 1,
        "an object is made"
    );
    let ro = must("restrict", memobj::restrict(obj, PROT_READ))?;
    check!(
        must("info", memobj::info(ro))?.max_prot == PROT_READ,
        "a restricted right reports its maximum protection"
    );
    check!(
        memobj::map(ro, P, 0, RW) == Err(Error::Denied),
        "mapping writable through a read-only right: Denied"
    );
    check!(
        memobj::map(ro, P, 0, map_flags(PROT_READ, PROT_RW, false, INHERIT_COPY))
            == Err(Error::Denied),
        "a maximum above the right's, even read-only now: Denied"
    );
    let wr = must("map", memobj::map(obj, P, 0, RW))?;
    write(wr, 0xabc);
    let r = must("map read-only", memobj::map(ro, P, 0, RO))?;
    check!(read(r) == 0xabc, "the read-only mapping sees the object");
    check!(
        // SAFETY: refused; nothing changes.
        unsafe { vm::protect(r, P, PROT_RW, false) } == Err(Error::Denied),
        "and cannot be made writable: Denied"
    );
    let again = must("restrict again", memobj::restrict(ro, PROT_RW))?;
    let raised = memobj::info(again).map(|i| i.max_prot);
    must("drop", cap_drop(again))?;
    check!(
        raised == Ok(PROT_READ),
        "restricting a read-only right never raises it"
    );
    // Dropping every right keeps the memory for the mappings.
    must("drop", cap_drop(obj))?;
    must("drop", cap_drop(ro))?;
    check!(
        read(r) == 0xabc && {
            write(wr, 0xdef);
            read(r) == 0xdef
        },
        "with every right dropped, both mappings still share the object"
    );
    // SAFETY: nothing refers to the ranges.
    unsafe {
        must("unmap", vm::deallocate(wr, P))?;
        must("unmap", vm::deallocate(r, P))?;
    }
    let s = must("vm stats", vm::system_stats())?;
    check!(
        s.objects <= before + 1,
        "the last mapping gone, the object is gone ({} objects, {before} before)",
        s.objects
    );
    // An object nobody mapped goes with its last right.
    let o2 = must("create", memobj::create(P))?;
    must("drop", cap_drop(o2))?;
    let s2 = must("vm stats", vm::system_stats())?;
    check!(
        s2.objects == s.objects,
        "an unmapped object goes with its last right"
    );
    Ok(())
}

/// DMA buffers and physical objects.
fn physical(host: u64) -> Result<(), Failed> {
    let free = must("vm stats", vm::system_stats())?.frames_free;
    let obj = must("create", memobj::create(P))?;
    check!(
        memobj::dma(2 * P, 0) == Err(Error::Denied)
            && memobj::dma(2 * P, obj) == Err(Error::Denied)
            && memobj::physical(0xb8000, P, 0, 0) == Err(Error::Denied)
            && memobj::physical(0xb8000, P, 0, obj) == Err(Error::Denied),
        "DMA and physical objects without the host-privilege right: Denied"
    );
    let d = must("dma", memobj::dma(3 * P, host))?;
    let i = must("info", memobj::info(d))?;
    check!(
        i.kind == KIND_DMA && i.size == 3 * P && i.phys != 0 && i.phys % P == 0 && i.resident == 3,
        "a DMA buffer: 3 resident pages from physical {:#x}",
        i.phys
    );
    let a = must("map dma", memobj::map(d, 3 * P, 0, RW))?;
    check!(
        read(a) == 0 && read(a + 2 * P + 8) == 0,
        "a DMA buffer starts zeroed"
    );
    write(a + 2 * P, 0xd3a);
    let b = must("map dma again", memobj::map(d, P, 2 * P, RW))?;
    check!(
        read(b) == 0xd3a,
        "its pages are the same frames in every mapping"
    );
    check!(
        memobj::physical(i.phys, P, 0, host) == Err(Error::Denied),
        "a physical object over RAM (the DMA buffer's own frame): Denied"
    );
    check!(
        memobj::physical(0xfee0_0000, P, 0, host) == Err(Error::Denied),
        "a physical object over the local APIC: Denied"
    );
    check!(
        memobj::physical(0xb8001, P, 0, host) == Err(Error::InvalidArgument)
            && memobj::physical(0xb8000, 0, 0, host) == Err(Error::InvalidArgument)
            && memobj::physical(0xb8000, P, 2, host) == Err(Error::InvalidArgument)
            && memobj::physical(PHYS_LIMIT - P, 2 * P, 0, host) == Err(Error::InvalidArgument)
            && memobj::physical(0xb8000, 1 << 40, 0, host) == Err(Error::TooLarge)
            && memobj::dma(8 << 20, host) == Err(Error::TooLarge)
            && memobj::dma(P + 1, host) == Err(Error::InvalidArgument),
        "unaligned, empty, bad flags, past 4 GiB, too large: refused"
    );
    // The VGA text buffer: device memory below 1 MiB, not RAM.
    let v = must(
        "physical",
        memobj::physical(0xb8000, P, PHYS_UNCACHED, host),
    )?;
    let vi = must("info", memobj::info(v))?;
    check!(
        vi.kind == KIND_PHYSICAL && vi.phys == 0xb8000 && vi.flags == PHYS_UNCACHED,
        "a physical object over the VGA text buffer"
    );
    check!(
        memobj::map(v, P, 0, RW_COPY) == Err(Error::InvalidArgument),
        "a physical object cannot be mapped copy-on-write: InvalidArgument"
    );
    let m = must("map physical", memobj::map(v, P, 0, RW))?;
    let q = must("query", vm::query(m))?;
    let _ = read(m);
    check!(
        q.object == OBJECT_PHYSICAL && q.resident == 0,
        "mapped uncached, device memory is read in place (a physical region, no page of its own)"
    );
    // The firmware's ROM: its last 16 bytes hold the x86 reset vector, a jump.
    let rom = must("rom", memobj::physical(0xff000, P, 0, host))?;
    let rm = must("map rom", memobj::map(rom, P, 0, RO))?;
    let reset = read(rm + 0xff0) as u8;
    check!(
        reset == 0xe9 || reset == 0xea,
        "a physical object shows those frames: the firmware's reset vector is a jump ({reset:#x})"
    );
    must("drop", cap_drop(rom))?;
    // SAFETY: nothing refers to the range.
    must("unmap", unsafe { vm::deallocate(rm, P) })?;
    for n in [obj, d, v] {
        must("drop", cap_drop(n))?;
    }
    // SAFETY: nothing refers to the ranges.
    unsafe {
        must("unmap", vm::deallocate(a, 3 * P))?;
        must("unmap", vm::deallocate(b, P))?;
        must("unmap", vm::deallocate(m, P))?;
    }
    let now = must("vm stats", vm::system_stats())?.frames_free;
    check!(
        now == free,
        "the DMA buffer's frames are back with the frame allocator ({now} free, {free} before)"
    );
    Ok(())
}

/// Bad arguments: an error and nothing changed.
fn errors() -> Result<(), Failed> {
    let obj = must("create", memobj::create(2 * P))?;
    let port = must("port", port_allocate(0))?;
    let me = must("task_self", task_self())?;
    // A message to a memory object's port: an operation it does not have.
    let mut buf = must("ipc buffer", baton_rt::ipc::IpcBuffer::new())?;
    let answer = baton_rt::kobject::call(&mut buf, obj, port, 0x4b0b_0000, &[1, 2], 1_000_000_000);
    drop(buf);
    check!(
        answer.map(|_| ()) == Err(Error::NotSupported),
        "a message to a memory object's port is answered NotSupported"
    );
    let before = (must("stats", vm::stats())?.entries, counts()?);
    check!(
        memobj::create(0) == Err(Error::InvalidArgument)
            && memobj::create(P + 8) == Err(Error::InvalidArgument)
            && memobj::create((1 << 30) + P) == Err(Error::TooLarge)
            && memobj::create(!(P - 1)) == Err(Error::TooLarge),
        "memobj_create: empty, unaligned, too large: refused"
    );
    check!(
        memobj::map(0x7777, P, 0, RW) == Err(Error::InvalidName)
            && memobj::map(port, P, 0, RW) == Err(Error::InvalidRight)
            && memobj::map(me, P, 0, RW) == Err(Error::InvalidRight),
        "vm_map of no right, a receive right, a task's port: refused"
    );
    check!(
        memobj::map(obj, P, 0, 1 << 20) == Err(Error::InvalidArgument)
            && memobj::map(
                obj,
                P,
                0,
                map_flags(PROT_RW, PROT_READ, false, INHERIT_COPY)
            ) == Err(Error::InvalidArgument)
            && memobj::map(obj, P, 0, map_flags(PROT_READ, PROT_READ, false, 3))
                == Err(Error::InvalidArgument),
        "vm_map: unknown flags, protection above its maximum, bad inheritance: InvalidArgument"
    );
    check!(
        memobj::map(obj, 3 * P, 0, RW) == Err(Error::InvalidArgument)
            && memobj::map(obj, P, 2 * P, RW) == Err(Error::InvalidArgument)
            && memobj::map(obj, P, 8, RW) == Err(Error::InvalidArgument)
            && memobj::map(obj, P, !(P - 1), RW) == Err(Error::InvalidArgument)
            && memobj::map(obj, 0, 0, RW) == Err(Error::InvalidArgument)
            && memobj::map(obj, P + 1, 0, RW) == Err(Error::InvalidArgument)
            && memobj::map(obj, !(P - 1), 0, RW) == Err(Error::TooLarge),
        "vm_map: windows past the end, unaligned, wrapping, empty, huge: refused"
    );
    // SAFETY: each is refused; nothing is mapped.
    unsafe {
        let a = must("map", memobj::map_raw(obj, FIXED, P, 0, RW))?;
        check!(
            memobj::map_raw(obj, FIXED, P, 0, RW) == Err(Error::NoSpace)
                && memobj::map_raw(obj, FIXED + 8, P, 0, RW) == Err(Error::InvalidArgument)
                && memobj::map_raw(obj, 0xffff_8000_0000_0000, P, 0, RW).is_err()
                && memobj::map_raw(obj, 0x7fff_ffff_f000, 2 * P, 0, RW).is_err(),
            "vm_map at a taken, unaligned, kernel or past-the-end address: refused"
        );
        must("unmap", vm::deallocate(a, P))?;
    }
    check!(
        memobj::restrict(obj, 8) == Err(Error::InvalidArgument)
            && memobj::restrict(port, PROT_READ) == Err(Error::InvalidRight)
            && memobj::info_raw(obj, 0xffff_8000_0000_0000) == Err(Error::BadAddress)
            && memobj::info_raw(obj, 0) == Err(Error::BadAddress)
            && memobj::info_raw(port, 0x1000) == Err(Error::InvalidRight),
        "restrict with bad protection or right, info into kernel or null memory: refused"
    );
    let mut buf = [0x55u8; 16];
    let bp = buf.as_mut_ptr() as u64;
    // SAFETY: every call is refused before a byte moves; `buf` is checked after.
    unsafe {
        check!(
            memobj::read_write_raw(false, me, 0x10, bp, 16) == Err(Error::BadAddress)
                && memobj::read_write_raw(false, obj, bp, bp, 16) == Err(Error::InvalidRight)
                && memobj::read_write_raw(false, 0x7777, bp, bp, 16) == Err(Error::InvalidName)
                && memobj::read_write_raw(false, me, bp, bp, (64 << 10) + 1) == Err(Error::TooLarge)
                && memobj::read_write_raw(false, me, bp, 0xffff_8000_0000_0000, 16)
                    == Err(Error::BadAddress)
                && memobj::read_write_raw(true, me, 0x10, bp, 16) == Err(Error::BadAddress)
                && memobj::read_write_raw(true, me, bp, 0x10, 16) == Err(Error::BadAddress)
                && memobj::read_write_raw(false, me, u64::MAX - 4, bp, 16) == Err(Error::BadAddress)
                && buf == [0x55; 16],
            "vm_read/vm_write: unmapped, wrong right, no right, too large, kernel buffer, wrapping: refused, nothing written"
        );
        check!(
            memobj::read_write_raw(false, me, bp, bp + 8, 0) == Ok(0),
            "vm_read of nothing: 0"
        );
    }
    check!(
        memobj::wait_shared_raw(FIXED + 2, 0, 0) == Err(Error::InvalidArgument)
            && memobj::wait_shared_raw(FIXED, 0, 0) == Err(Error::BadAddress)
            && memobj::wake_shared_raw(FIXED, 1) == Err(Error::BadAddress)
            && memobj::wake_shared_raw(FIXED + 1, 1) == Err(Error::InvalidArgument),
        "wait_shared/wake_shared unaligned or where nothing is mapped: refused"
    );
    let after = (must("stats", vm::stats())?.entries, counts()?);
    check!(
        after == before,
        "after every refusal the map, kernel heap, objects, ports and frames are as before"
    );
    for n in [obj, port, me] {
        must("drop", cap_drop(n))?;
    }
    let _ = PROT_WRITE | PROT_EXECUTE | INHERIT_SHARE;
    Ok(())
}

/// A child with a small kernel-memory limit makes objects until `NoMemory`; meanwhile
/// this task still makes one (one task's exhaustion denies no other); the child recovers
/// after dropping them.
fn child_exhaustion(obj: u64) -> Result<(), Failed> {
    let before = counts()?;
    let at = must("map", memobj::map(obj, P, 0, RW))?;
    let w = |i| word(at, i);
    for i in 0..4 {
        w(i).store(0, Ordering::SeqCst);
    }
    must(
        "spawn the hog",
        baton_rt::sys::spawn_limited("memobj_peer", obj, 256 << 10, 8192),
    )?;
    wait_for(w(0), 1)?;
    let (n, e) = (w(1).load(Ordering::SeqCst), w(2).load(Ordering::SeqCst));
    check!(
        e == Error::NoMemory as u32 && n > 0,
        "a task at its kernel-memory limit gets NoMemory from memobj_create (after {n} objects)"
    );
    let mine = memobj::create(P);
    check!(mine.is_ok(), "meanwhile another task still makes objects");
    if let Ok(o) = mine {
        must("drop", cap_drop(o))?;
    }
    w(0).store(2, Ordering::SeqCst);
    must("wake", memobj::wake_shared(w(0), 1))?;
    wait_for(w(0), 3)?;
    check!(
        w(3).load(Ordering::SeqCst) == 1,
        "having dropped its objects, the task makes one again"
    );
    // SAFETY: nothing refers to the range.
    must("unmap", unsafe { vm::deallocate(at, P) })?;
    // The hog's end: its objects and ports go back. (Not the free frames: the first round
    // leaves one frame the kernel keeps for later rounds, so they are compared across
    // rounds at the end instead; waiting for them here waited out the whole loop.)
    for _ in 0..2000 {
        let now = counts()?;
        if (now.1, now.2) == (before.1, before.2) {
            break;
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
    }
    Ok(())
}

/// Objects up to the task's frame limit: NoMemory; dropped, room again.
fn exhaustion() -> Result<(), Failed> {
    const CHUNK: u64 = 16 << 20;
    let mut got = [0u64; 512];
    let mut n = 0;
    let e = loop {
        if n == got.len() {
            break Error::InvalidArgument;
        }
        match memobj::create(CHUNK) {
            Ok(o) => {
                got[n] = o;
                n += 1;
            }
            Err(e) => break e,
        }
    };
    check!(
        e == Error::NoMemory && n > 0,
        "16 MiB objects: the task's frame limit after {n}: NoMemory"
    );
    for &o in got.iter().take(n) {
        must("drop", cap_drop(o))?;
    }
    let o = must("create after", memobj::create(CHUNK))?;
    let a = must("map after", memobj::map(o, CHUNK, 0, RW))?;
    write(a + CHUNK - 8, 5);
    check!(
        read(a + CHUNK - 8) == 5,
        "after dropping them, an object is made and mapped again"
    );
    must("drop", cap_drop(o))?;
    // SAFETY: nothing refers to the range.
    must("unmap", unsafe { vm::deallocate(a, CHUNK) })?;
    Ok(())
}
