//! `appel`: a Baton extension of SPIN's memory interfaces, built for
//! `wasm32-unknown-unknown` by `cargo xtask build` and loaded into the kernel at run time
//! (`docs/extensions.md`, "Memory interfaces").
//!
//! `Translation` handlers have the type `(addr, access: i64) -> i64` (not 0: the fault is
//! resolved, the faulting thread resumes); `Trap.SystemCall` handlers `(number, a0, a1,
//! a2: i64) -> i64`. It imports `baton.translation`, `baton.virtaddr`, `baton.physaddr`
//! and `baton.clock`, which act on its installer's own address space only.
//!
//! - The Appel–Li handlers: `unprotect`, `trap` (marks the clock first), `appel1`
//!   (unprotects the page and protects its partner), and the system calls `prot`
//!   (`Translation.Protect`) and `dirty` (SPIN's `Dirty`).
//! - A garbage collector's write barrier: `gc` records the written page in a card table in
//!   this module's memory and unprotects it; the system call `cards` reads the table.
//! - Demand paging from physical pages: `demand` allocates a physical page and maps it at
//!   the faulting address; `pages` frees those pages; `valloc` allocates a range;
//!   `exhaust` takes physical pages until the kernel refuses, and gives them back.
//! - `PhysAddr.Reclaim` handlers, `(candidate: i64) -> i64` (the page to take instead, or
//!   the candidate itself): `mru` protects the range the system call `keep` named by
//!   nominating, in its place, the page of the scanned region the application wrote last
//!   (told with the system call `scanned`); `reclaim_spin` never returns, `reclaim_wild`
//!   traps, `reclaim_garbage` nominates addresses that are no page of the installer's,
//!   and `reclaim_change` tries to change a protection while replacement runs (the kernel
//!   answers `Denied`; the system call `last` reads what it answered).
//! - Misbehaviour, for the tests: `spin` never returns (out of fuel), `wild` reads
//!   outside its linear memory (a trap), `liar` says it resolved a fault it did not touch,
//!   `foreign` protects a page of the kernel's half, `badpage` maps a page it does not
//!   hold; the kernel aborts the first two and refuses the others. `spin_fast` and
//!   `wild_fast` do what `spin` and `wild` do in code the kernel's register-form tier
//!   runs (`spin` and `wild` stay on `wasmi`: `black_box` uses the stack pointer global).
#![no_std]
#![deny(unsafe_code)]

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// The kernel interfaces it imports (bound by the installer's `Resolve`).
#[allow(unsafe_code)]
mod baton {
    #[link(wasm_import_module = "baton.translation")]
    unsafe extern "C" {
        pub safe fn protect(va: i64, len: i64, prot: i64) -> i64;
        pub safe fn query(va: i64) -> i64;
        pub safe fn add(va: i64, page: i64, prot: i64) -> i64;
    }
    #[link(wasm_import_module = "baton.virtaddr")]
    unsafe extern "C" {
        pub safe fn allocate(len: i64) -> i64;
    }
    #[link(wasm_import_module = "baton.physaddr")]
    unsafe extern "C" {
        #[link_name = "allocate"]
        pub safe fn phys_allocate() -> i64;
        #[link_name = "deallocate"]
        pub safe fn phys_deallocate(page: i64) -> i64;
    }
    #[link(wasm_import_module = "baton.clock")]
    unsafe extern "C" {
        pub safe fn mark();
    }
}

const PAGE: i64 = 4096;
const READ: i64 = 1;
const RW: i64 = 3;
/// `baton_abi::translation::STATE_DIRTY`.
const STATE_DIRTY: i64 = 1 << 3;
/// `baton_abi::translation::STATE_RESIDENT`.
const STATE_RESIDENT: i64 = 1 << 1;
/// `baton_abi::translation::STATE_CHOSEN`.
const STATE_CHOSEN: i64 = 1 << 5;

/// The card table: pages written since the collector last read it.
static CARDS: [AtomicU64; 256] = [const { AtomicU64::new(0) }; 256];
static CARD_COUNT: AtomicU64 = AtomicU64::new(0);
/// Physical pages `demand` mapped.
static PAGES: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
static PAGE_COUNT: AtomicU64 = AtomicU64::new(0);
/// The pages `exhaust` holds for a moment.
static MANY: [AtomicU64; 300] = [const { AtomicU64::new(0) }; 300];
/// The range `demand` serves: base, length.
static RANGE: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// `mru`'s ranges: the protected range (base, length), the scanned region (base, length)
/// and the index of its page written last.
static KEEP: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
/// What `reclaim_change`'s protection change last returned; how often `reclaim_garbage` ran.
static LAST: AtomicU64 = AtomicU64::new(0);
static GARBAGE: AtomicU64 = AtomicU64::new(0);

/// The handlers, safe Rust.
mod handlers {
    use super::*;

    fn page(addr: i64) -> i64 {
        addr & !(PAGE - 1)
    }

    pub fn unprotect(addr: i64, _access: i64) -> i64 {
        i64::from(baton::protect(page(addr), PAGE, RW) == 0)
    }

    pub fn trap(addr: i64, access: i64) -> i64 {
        baton::mark();
        unprotect(addr, access)
    }

    pub fn appel1(addr: i64, _access: i64) -> i64 {
        let p = page(addr);
        i64::from(baton::protect(p, PAGE, RW) == 0 && baton::protect(p ^ PAGE, PAGE, READ) == 0)
    }

    pub fn gc(addr: i64, access: i64) -> i64 {
        let n = CARD_COUNT.load(Relaxed) as usize;
        if let Some(c) = CARDS.get(n) {
            c.store(page(addr) as u64, Relaxed);
            CARD_COUNT.store(n as u64 + 1, Relaxed);
        }
        unprotect(addr, access)
    }

    /// `cards(_, i)`: the `i`th page recorded; `i` = -1: how many; -2: clears the table.
    pub fn cards(_n: i64, i: i64, _a1: i64, _a2: i64) -> i64 {
        match i {
            -1 => CARD_COUNT.load(Relaxed) as i64,
            -2 => {
                CARD_COUNT.store(0, Relaxed);
                0
            }
            i => CARDS.get(i as usize).map_or(-1, |c| c.load(Relaxed) as i64),
        }
    }

    pub fn prot(_n: i64, va: i64, len: i64, prot: i64) -> i64 {
        baton::protect(va, len, prot)
    }

    pub fn dirty(_n: i64, va: i64, _a1: i64, _a2: i64) -> i64 {
        let s = baton::query(va);
        if s < 0 {
            s
        } else {
            i64::from(s & STATE_DIRTY != 0)
        }
    }

    pub fn demand(addr: i64, _access: i64) -> i64 {
        // Only the range `valloc` made: the task's other pages keep their own memory.
        let (base, len) = (RANGE[0].load(Relaxed) as i64, RANGE[1].load(Relaxed) as i64);
        if addr < base || addr >= base.wrapping_add(len) {
            return 0;
        }
        let p = baton::phys_allocate();
        if p <= 0 {
            return 0;
        }
        let n = PAGE_COUNT.load(Relaxed) as usize;
        match PAGES.get(n) {
            Some(slot) => {
                slot.store(p as u64, Relaxed);
                PAGE_COUNT.store(n as u64 + 1, Relaxed);
            }
            None => {
                baton::phys_deallocate(p);
                return 0;
            }
        }
        i64::from(baton::add(page(addr), p, RW) == 0)
    }

    /// `pages(_)`: gives back every physical page `demand` took (their mappings keep
    /// them); how many.
    pub fn pages(_n: i64, _a0: i64, _a1: i64, _a2: i64) -> i64 {
        let n = PAGE_COUNT.swap(0, Relaxed) as usize;
        let mut freed = 0;
        for slot in PAGES.iter().take(n) {
            if baton::phys_deallocate(slot.load(Relaxed) as i64) == 0 {
                freed += 1;
            }
        }
        freed
    }

    /// `valloc(_, len)`: `VirtAddr.Allocate(len)`; the range `demand` serves.
    pub fn valloc(_n: i64, len: i64, _a1: i64, _a2: i64) -> i64 {
        let a = baton::allocate(len);
        if a > 0 {
            RANGE[0].store(a as u64, Relaxed);
            RANGE[1].store(len as u64, Relaxed);
        }
        a
    }

    /// `exhaust(_)`: allocates physical pages until `PhysAddr.Allocate` fails, then frees
    /// them all: how many it got, shifted left by 8, or'ed with the failure's error code
    /// (negated).
    pub fn exhaust(_n: i64, _a0: i64, _a1: i64, _a2: i64) -> i64 {
        let mut n = 0usize;
        let mut err = 0;
        for slot in MANY.iter() {
            let p = baton::phys_allocate();
            if p <= 0 {
                err = p;
                break;
            }
            slot.store(p as u64, Relaxed);
            n += 1;
        }
        for slot in MANY.iter().take(n) {
            baton::phys_deallocate(slot.load(Relaxed) as i64);
        }
        (n as i64) << 8 | (err.wrapping_neg() & 0xff)
    }

    /// `keep(_, base, len)`: the range `mru` protects.
    pub fn keep(_n: i64, base: i64, len: i64, _a2: i64) -> i64 {
        KEEP[0].store(base as u64, Relaxed);
        KEEP[1].store(len as u64, Relaxed);
        0
    }

    /// `scanned(_, base, len, pos)`: the scanned region, and the index of its page the
    /// application wrote last.
    pub fn scanned(_n: i64, base: i64, len: i64, pos: i64) -> i64 {
        KEEP[2].store(base as u64, Relaxed);
        KEEP[3].store(len as u64, Relaxed);
        KEEP[4].store(pos as u64, Relaxed);
        0
    }

    /// `PhysAddr.Reclaim`: a candidate in the kept range is exchanged for the scanned
    /// region's page written last, or the one before it, and so on (the whole region, 1,024
    /// pages at most, as the built-in `mru`: several batches may go while the scan waits):
    /// the first that is resident and not in replacement's batch already
    /// (most-recently-used replacement for a sequential scan, which will not need that
    /// page again until it comes round); any other candidate goes.
    pub fn mru(candidate: i64) -> i64 {
        let c = candidate as u64;
        let (base, len) = (KEEP[0].load(Relaxed), KEEP[1].load(Relaxed));
        if c.wrapping_sub(base) >= len {
            return candidate;
        }
        let pages = KEEP[3].load(Relaxed) / PAGE as u64;
        let (scan, pos) = (KEEP[2].load(Relaxed), KEEP[4].load(Relaxed));
        for back in 0..pages.min(1024) {
            let page = scan.wrapping_add(((pos % pages + pages - back) % pages) * PAGE as u64);
            let s = baton::query(page as i64);
            if s >= 0 && s & STATE_RESIDENT != 0 && s & STATE_CHOSEN == 0 {
                return page as i64;
            }
        }
        candidate
    }

    pub fn reclaim_spin(candidate: i64) -> i64 {
        spin(candidate, 0)
    }

    pub fn reclaim_wild(candidate: i64) -> i64 {
        wild(candidate, 0)
    }

    /// Cycles through addresses that are no page of the installer's to take: unaligned,
    /// the kernel's half, zero, all ones, far above anything mapped.
    pub fn reclaim_garbage(candidate: i64) -> i64 {
        let i = GARBAGE.fetch_add(1, Relaxed) % 5;
        match i {
            0 => candidate | 1,
            1 => 0xffff_8000_0000_0000u64 as i64,
            2 => 0,
            3 => -1,
            _ => 0x7ff0_0000_0000,
        }
    }

    /// Tries to make the candidate read-only while replacement runs; keeps the answer.
    pub fn reclaim_change(candidate: i64) -> i64 {
        LAST.store(baton::protect(page(candidate), PAGE, READ) as u64, Relaxed);
        candidate
    }

    /// `last(_)`: what `reclaim_change`'s protection change last returned.
    pub fn last(_n: i64, _a0: i64, _a1: i64, _a2: i64) -> i64 {
        LAST.load(Relaxed) as i64
    }

    pub fn spin(addr: i64, _access: i64) -> i64 {
        let mut x = addr;
        loop {
            x = core::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
        }
    }

    /// As `spin`, without `black_box` (whose stack slot is a global): a function the
    /// kernel's register-form tier runs, so that its own fuel bound is what stops it.
    pub fn spin_fast(addr: i64, _access: i64) -> i64 {
        let mut x = addr | 1;
        while x != 0 {
            x = x.wrapping_mul(3) | 1;
        }
        x
    }

    /// As `wild`, on the register-form tier: a read past the linear memory.
    pub fn wild_fast(addr: i64, _access: i64) -> i64 {
        let p = 0x7fff_fff0usize.wrapping_add(addr as usize & 0xf) as *const i64;
        #[allow(unsafe_code)]
        // SAFETY: none; the access is out of bounds on purpose, and WebAssembly traps.
        unsafe {
            core::ptr::read_volatile(p)
        }
    }

    pub fn wild(addr: i64, _access: i64) -> i64 {
        let p =
            core::hint::black_box(0x7fff_fff0usize.wrapping_add(addr as usize & 0xf)) as *const i64;
        #[allow(unsafe_code)]
        // SAFETY: none; the access is out of bounds on purpose, and WebAssembly traps.
        unsafe {
            core::ptr::read_volatile(p)
        }
    }

    pub fn liar(_addr: i64, _access: i64) -> i64 {
        1
    }

    pub fn foreign(_addr: i64, _access: i64) -> i64 {
        // The kernel's half: no address of another space can even be named.
        let _ = baton::protect(0xffff_8000_0000_0000u64 as i64, PAGE, RW);
        1
    }

    pub fn badpage(addr: i64, _access: i64) -> i64 {
        let _ = baton::add(page(addr), 0x7777, RW);
        1
    }
}

/// The exports.
#[allow(unsafe_code)]
mod exports {
    use super::handlers as h;
    macro_rules! fault {
        ($($name:ident),*) => {$(
            #[no_mangle]
            pub extern "C" fn $name(addr: i64, access: i64) -> i64 {
                h::$name(addr, access)
            }
        )*};
    }
    macro_rules! syscall {
        ($($name:ident),*) => {$(
            #[no_mangle]
            pub extern "C" fn $name(n: i64, a0: i64, a1: i64, a2: i64) -> i64 {
                h::$name(n, a0, a1, a2)
            }
        )*};
    }
    macro_rules! reclaim {
        ($($name:ident),*) => {$(
            #[no_mangle]
            pub extern "C" fn $name(candidate: i64) -> i64 {
                h::$name(candidate)
            }
        )*};
    }
    fault!(
        unprotect, trap, appel1, gc, demand, spin, wild, spin_fast, wild_fast, liar, foreign,
        badpage
    );
    syscall!(cards, prot, dirty, pages, valloc, exhaust, keep, scanned, last);
    reclaim!(
        mru,
        reclaim_spin,
        reclaim_wild,
        reclaim_garbage,
        reclaim_change
    );
}
