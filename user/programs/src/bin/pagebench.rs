//! `pagebench <pages> <frames>`: the working set of the paging rows of `bench` (`docs/benchmarks.md`:
//! `vm.pageout`, `vm.thrash`, `vm.pagein`), in a task of its own so that the benchmark program's own memory
//! is not what gets paged. Started by `bench` with the host-privilege right as its
//! bootstrap right (for `halted_ticks`), after it has started the disk driver and the
//! default pager on the swap partition. It lowers the pageable limit to `<frames>` itself
//! (once it exists: making a task needs memory, which a limit already lowered would refuse)
//! and puts the old limit back at its end:
//!
//! 1. every page of a region of `<pages>` pages is written (its number in its first word),
//!    then touched at random until replacement has settled (the idle memory of other
//!    tasks goes out first: it is never touched again);
//! 2. `vm.pageout`: fresh pages written one after another, each needing one page paged
//!    out (and its own zero fill): instructions per page-out;
//! 3. `vm.thrash`: random pages of the region read and written: pages touched per million
//!    instructions executed, and the page-outs per page-in (printed);
//! 4. `vm.pagein`: random loads, each timed alone, kept when it paged exactly one page in
//!    and nothing out: fault to resume.
//!
//! Every window is the TSC delta (instructions under QEMU's `-icount`) minus the ticks the
//! CPUs spent halted meanwhile (`halted_ticks`): while the disk works every CPU halts and
//! QEMU jumps virtual time forward, and that is the disk's time, not Baton's. Every page
//! read must hold what was written; the program prints `BENCH` lines and exits 0, or
//! prints `BENCH FAIL` and exits 1.
#![no_std]
#![no_main]

use baton_rt::paging::{self, PagingStats};
use baton_rt::vm::{self, PROT_RW};
use baton_rt::{env, println, rdtsc_ordered, Error};

baton_rt::entry!(main);

const PAGE: u64 = 4096;
/// `vm.pagein` samples.
const SAMPLES: usize = 200;

fn main(_task_id: u64) -> i32 {
    let arg = |i| {
        env::args()
            .nth(i)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (pages, frames) = (arg(1), arg(2));
    let host = baton_rt::start::bootstrap();
    let old = match paging::set_limit(frames, host) {
        Ok(old) => old,
        Err(e) => {
            println!("BENCH FAIL vm.paging: paging_limit {frames}: {}", e.name());
            return 1;
        }
    };
    let done = run(pages, host);
    let _ = paging::set_limit(old, host);
    match done {
        Ok(()) => 0,
        Err((what, e)) => {
            println!("BENCH FAIL vm.paging: {what}: {}", e.name());
            1
        }
    }
}

type R<T> = Result<T, (&'static str, Error)>;

fn sys() -> R<PagingStats> {
    paging::system_stats().map_err(|e| ("paging_stats", e))
}

/// Instructions executed since (`tsc`, `halted`): the TSC's advance minus the halted ticks'.
fn since(host: u64, tsc: u64, halted: u64) -> R<u64> {
    let t = rdtsc_ordered();
    let h = baton_rt::host::halted_ticks(host).map_err(|e| ("halted_ticks", e))?;
    Ok(t.wrapping_sub(tsc).saturating_sub(h.wrapping_sub(halted)))
}

/// Now: (TSC, halted ticks).
fn now(host: u64) -> R<(u64, u64)> {
    let h = baton_rt::host::halted_ticks(host).map_err(|e| ("halted_ticks", e))?;
    Ok((rdtsc_ordered(), h))
}

fn bench(name: &str, unit: &str, median: u64, min: u64, max: u64, n: usize) {
    println!("BENCH name={name} unit={unit} iterations={n} median={median} min={min} max={max}");
}

fn run(n: u64, host: u64) -> R<()> {
    if n < 64 {
        return Err(("too few pages", Error::InvalidArgument));
    }
    let a = vm::allocate(None, n * PAGE, PROT_RW).map_err(|e| ("vm_allocate", e))?;
    let page = |i: u64| (a + i * PAGE) as *mut u64;
    let mut wrong = 0u64;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut touch = |i: u64| {
        // SAFETY: page `i` < `n` of the region allocated above, which nothing else uses.
        let v = unsafe { page(i).read_volatile() };
        // SAFETY: as above.
        unsafe { page(i).write_volatile(v) };
        wrong += u64::from(v != i);
    };

    // 1. Fill, then settle.
    for i in 0..n {
        // SAFETY: as above.
        unsafe { page(i).write_volatile(i) };
    }
    for _ in 0..2 * n {
        touch(next());
    }

    // 2. vm.pageout: fresh pages, each written once; every one needs a page out.
    let fresh = n / 4;
    let b = vm::allocate(None, fresh * PAGE, PROT_RW).map_err(|e| ("vm_allocate", e))?;
    let s0 = sys()?;
    let (t0, h0) = now(host)?;
    for i in 0..fresh {
        // SAFETY: page `i` of the second region, allocated above and used by nothing else.
        unsafe { ((b + i * PAGE) as *mut u64).write_volatile(i) };
    }
    let spent = since(host, t0, h0)?;
    let s1 = sys()?;
    let outs = s1.pageouts - s0.pageouts;
    // SAFETY: nothing refers to the second region any more.
    unsafe { vm::deallocate(b, fresh * PAGE) }.map_err(|e| ("vm_deallocate", e))?;
    if outs == 0 {
        return Err(("nothing was paged out", Error::NoMemory));
    }
    let v = spent / outs;
    bench("vm.pageout", "instructions", v, v, v, 1);
    println!("vm.pageout: {fresh} fresh pages written: {outs} page-outs, {spent} instructions");

    // 3. vm.thrash.
    let touches = 2 * n;
    let s2 = sys()?;
    let (t0, h0) = now(host)?;
    for _ in 0..touches {
        touch(next());
    }
    let spent = since(host, t0, h0)?.max(1);
    let s3 = sys()?;
    let (outs, ins) = (s3.pageouts - s2.pageouts, s3.pageins - s2.pageins);
    if ins == 0 {
        return Err(("the working set stayed resident", Error::NoMemory));
    }
    let v = touches * 1_000_000 / spent;
    bench("vm.thrash", "pages-per-million-instructions", v, v, v, 1);
    let resident = vm::query(a).map(|r| r.resident).unwrap_or(0);
    println!(
        "vm.thrash: {touches} touches of {n} pages ({resident} resident) in {spent} instructions: {outs} page-outs, {ins} page-ins ({}.{:02} page-outs per page-in)",
        outs / ins,
        outs * 100 / ins % 100
    );
    println!(
        "BENCHVM thrash_touches={touches} thrash_pages={n} thrash_resident={resident} thrash_instructions={spent} thrash_pageouts={outs} thrash_pageins={ins}"
    );

    // 4. vm.pagein.
    let mut samples = [0u64; SAMPLES];
    let mut taken = 0;
    for _ in 0..16 * n {
        if taken == SAMPLES {
            break;
        }
        let i = next();
        let before = sys()?;
        let (t0, h0) = now(host)?;
        // SAFETY: as in `touch`.
        let v = unsafe { page(i).read_volatile() };
        let spent = since(host, t0, h0)?;
        wrong += u64::from(v != i);
        let after = sys()?;
        if after.pageins == before.pageins + 1 && after.pageouts == before.pageouts {
            if let Some(s) = samples.get_mut(taken) {
                *s = spent;
            }
            taken += 1;
        }
    }
    if wrong != 0 {
        return Err(("pages read wrong", Error::BadFormat));
    }
    if taken == 0 {
        return Err(("no page-in alone", Error::NoMemory));
    }
    let s = &mut samples[..taken];
    s.sort_unstable();
    bench(
        "vm.pagein",
        "instructions",
        s[(taken - 1) / 2],
        s[0],
        s[taken - 1],
        taken,
    );
    // SAFETY: nothing refers to the region any more.
    unsafe { vm::deallocate(a, n * PAGE) }.map_err(|e| ("vm_deallocate", e))?;
    Ok(())
}
