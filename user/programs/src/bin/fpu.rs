//! `fpu`: user threads own their floating-point and vector registers. Each thread's values
//! survive preemption by the timer and switches to other threads and tasks; a thread that
//! never uses the registers has no save area; a task without kernel memory for one gets
//! an exception at its first use, not a kernel panic.
//!
//! Booted alone (`init=fpu`); it spawns a copy of itself (a *child*, told apart by its
//! bootstrap port) and `fpu_nomem` tasks. Checks, printing `ok: <what>` for each:
//!
//! - a thread made of assembly that never touches the registers runs, yields and ends
//!   without a save area being made (`Stats::fpu_first_uses`, `fpu_states`), while one
//!   that executes one vector instruction gets one, which goes with it;
//! - a new thread starts with MXCSR and the x87 control word at their defaults, though its
//!   creator's are not;
//! - isolation: in this task and in the child, [`WORKERS`] threads and the main thread
//!   each load values of their own into every vector register (YMM with AVX, else XMM),
//!   the x87 stack's top and control word and MXCSR, then, inside one assembly block, spin
//!   long enough to be preempted by the timer and yield to the others, round after round,
//!   and check afterwards that every one of those registers still holds its values;
//!   preemptions are counted, so the test shows they happened;
//! - `fpu_nomem`, spawned with kernel-memory limits from the smallest that lets it start
//!   upwards, is stopped by an exception ("device not available") at its first use of the
//!   registers while its limit leaves no room for the save area, and ends normally with
//!   one once there is room;
//! - the save areas are back to the baseline at the end.
//!
//! Verdict: `TEST PASS fpu` (and `TEST PASS fpu child` from the child) or `TEST FAIL ...`.
#![no_std]
#![no_main]

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicU32, Ordering};

use baton_abi::Sys;
use baton_rt::check::Failed;
use baton_rt::ipc::{port_allocate, IpcBuffer, MSG_RECEIVE};
use baton_rt::sync::Counter;
use baton_rt::thread::{create_raw, spawn, StackPool};
use baton_rt::{println, stats, Error, FOREVER};

baton_rt::entry!(main);

const TEST: &str = "fpu";

/// Worker threads per task, besides the main thread.
const WORKERS: usize = 3;
/// Rounds of load, spin and yield, check, per thread.
const ROUNDS: u64 = 4;
/// Iterations of the spin loop inside one round (two instructions each): enough for
/// several timer ticks under QEMU's emulation.
const SPINS: u64 = 3_000_000;
/// Yields inside one round (between spins).
const YIELDS: u64 = 4;
/// Bytes of the vector registers: 16 registers of 32.
const VBYTES: usize = 512;

static STACKS: StackPool<{ WORKERS + 2 }, 16384> = StackPool::new();
/// Workers that finished, and those that failed.
static DONE: Counter = Counter::new(0);
static FAILED: AtomicU32 = AtomicU32::new(0);
/// 1 when the YMM registers are used (AVX), 0 for XMM only.
static AVX: AtomicU32 = AtomicU32::new(0);

macro_rules! check {
    ($($t:tt)*) => { baton_rt::check!(TEST, $($t)*) };
}

fn must<T>(what: &str, r: Result<T, Error>) -> Result<T, Failed> {
    baton_rt::check::must(TEST, what, r)
}

global_asm!(
    r#"
    // A thread that never touches a floating-point or vector register: `rdi` yields,
    // then `thread_exit`.
    .global fpu_plain_entry
fpu_plain_entry:
    movq %rdi, %rbx
1:
    movl ${yield_}, %eax
    syscall
    decq %rbx
    jnz 1b
    movl ${exit}, %eax
    syscall
    ud2

    // A thread that executes one vector instruction, then waits for the word at `rdi` to
    // become non-zero (yielding), then `thread_exit`.
    .global fpu_touch_entry
fpu_touch_entry:
    movq %rdi, %rbx
    xorps %xmm0, %xmm0
1:
    movl ${yield_}, %eax
    syscall
    cmpl $0, (%rbx)
    je 1b
    movl ${exit}, %eax
    syscall
    ud2
    "#,
    yield_ = const Sys::Yield as u64,
    exit = const Sys::ThreadExit as u64,
    options(att_syntax)
);

extern "C" {
    fn fpu_plain_entry();
    fn fpu_touch_entry();
}

/// What one thread loads and must find again.
#[repr(C, align(32))]
struct Values {
    v: [u8; VBYTES],
    /// The x87 stack's top, loaded as an integer (`fild`) and stored back (`fistp`).
    x87: i64,
    mxcsr: u32,
    fcw: u16,
}

impl Values {
    /// The values of thread `seed` (distinct per task and thread; no vector byte zero).
    fn of(seed: u64) -> Values {
        let mix = (seed ^ (seed >> 8).wrapping_mul(0x9d)) as u8;
        let mut v = [0u8; VBYTES];
        for (i, b) in v.iter_mut().enumerate() {
            *b = mix.wrapping_mul(37).wrapping_add(i as u8) | 1;
        }
        // Rounding control (bits 13-14) and flush-to-zero (15) differ by seed; every
        // exception stays masked.
        let mxcsr = 0x1f80 | ((seed as u32 & 3) << 13) | ((seed as u32 >> 2 & 1) << 15);
        // Precision (bits 8-9) and rounding (10-11) control differ by seed.
        let fcw = 0x007f | (((seed as u16) & 0xf) << 8);
        Values {
            v,
            x87: 0x5eed_0000_0000 + seed as i64,
            mxcsr,
            fcw,
        }
    }
}

/// Loads `want` into the registers, spins and yields with them loaded, then stores what
/// the registers hold into `got`: all in one assembly block, so no compiled code touches
/// them in between.
fn hold(want: &Values, got: &mut Values) {
    let avx = AVX.load(Ordering::Relaxed);
    // SAFETY: reads `want` and writes `got` (both ours, 32-byte aligned, of the layout the
    // offsets name); every vector register is declared clobbered; the x87 stack is left
    // empty (one push, one pop) and the control words as they were; `syscall` clobbers
    // only rax, rcx and r11.
    unsafe {
        asm!(
            // Save the control words the compiled code expects.
            "sub rsp, 16",
            "stmxcsr [rsp]",
            "fnstcw [rsp + 4]",
            "test {avx:e}, {avx:e}",
            "jz 2f",
            "vmovdqu ymm0, [{w}]", "vmovdqu ymm1, [{w} + 32]", "vmovdqu ymm2, [{w} + 64]",
            "vmovdqu ymm3, [{w} + 96]", "vmovdqu ymm4, [{w} + 128]", "vmovdqu ymm5, [{w} + 160]",
            "vmovdqu ymm6, [{w} + 192]", "vmovdqu ymm7, [{w} + 224]", "vmovdqu ymm8, [{w} + 256]",
            "vmovdqu ymm9, [{w} + 288]", "vmovdqu ymm10, [{w} + 320]", "vmovdqu ymm11, [{w} + 352]",
            "vmovdqu ymm12, [{w} + 384]", "vmovdqu ymm13, [{w} + 416]", "vmovdqu ymm14, [{w} + 448]",
            "vmovdqu ymm15, [{w} + 480]",
            "jmp 3f",
            "2:",
            "movdqu xmm0, [{w}]", "movdqu xmm1, [{w} + 32]", "movdqu xmm2, [{w} + 64]",
            "movdqu xmm3, [{w} + 96]", "movdqu xmm4, [{w} + 128]", "movdqu xmm5, [{w} + 160]",
            "movdqu xmm6, [{w} + 192]", "movdqu xmm7, [{w} + 224]", "movdqu xmm8, [{w} + 256]",
            "movdqu xmm9, [{w} + 288]", "movdqu xmm10, [{w} + 320]", "movdqu xmm11, [{w} + 352]",
            "movdqu xmm12, [{w} + 384]", "movdqu xmm13, [{w} + 416]", "movdqu xmm14, [{w} + 448]",
            "movdqu xmm15, [{w} + 480]",
            "3:",
            "fild qword ptr [{w} + 512]",
            "ldmxcsr [{w} + 520]",
            "fldcw [{w} + 524]",
            // Rounds of spinning (preempted by the timer) and yielding.
            "mov {y}, {yields}",
            "4:",
            "mov {s}, {spins}",
            "5:",
            "dec {s}",
            "jnz 5b",
            "mov eax, {yield_}",
            "syscall",
            "dec {y}",
            "jnz 4b",
            // What the registers hold now.
            "fnstcw [{g} + 524]",
            "stmxcsr [{g} + 520]",
            "fistp qword ptr [{g} + 512]",
            "test {avx:e}, {avx:e}",
            "jz 6f",
            "vmovdqu [{g}], ymm0", "vmovdqu [{g} + 32], ymm1", "vmovdqu [{g} + 64], ymm2",
            "vmovdqu [{g} + 96], ymm3", "vmovdqu [{g} + 128], ymm4", "vmovdqu [{g} + 160], ymm5",
            "vmovdqu [{g} + 192], ymm6", "vmovdqu [{g} + 224], ymm7", "vmovdqu [{g} + 256], ymm8",
            "vmovdqu [{g} + 288], ymm9", "vmovdqu [{g} + 320], ymm10", "vmovdqu [{g} + 352], ymm11",
            "vmovdqu [{g} + 384], ymm12", "vmovdqu [{g} + 416], ymm13", "vmovdqu [{g} + 448], ymm14",
            "vmovdqu [{g} + 480], ymm15",
            "vzeroupper",
            "jmp 7f",
            "6:",
            "movdqu [{g}], xmm0", "movdqu [{g} + 32], xmm1", "movdqu [{g} + 64], xmm2",
            "movdqu [{g} + 96], xmm3", "movdqu [{g} + 128], xmm4", "movdqu [{g} + 160], xmm5",
            "movdqu [{g} + 192], xmm6", "movdqu [{g} + 224], xmm7", "movdqu [{g} + 256], xmm8",
            "movdqu [{g} + 288], xmm9", "movdqu [{g} + 320], xmm10", "movdqu [{g} + 352], xmm11",
            "movdqu [{g} + 384], xmm12", "movdqu [{g} + 416], xmm13", "movdqu [{g} + 448], xmm14",
            "movdqu [{g} + 480], xmm15",
            "7:",
            "ldmxcsr [rsp]",
            "fldcw [rsp + 4]",
            "add rsp, 16",
            w = in(reg) want as *const Values,
            g = in(reg) got as *mut Values,
            avx = in(reg) avx,
            y = out(reg) _,
            s = out(reg) _,
            yields = const YIELDS,
            spins = const SPINS,
            yield_ = const Sys::Yield as u64,
            out("rax") _, out("rcx") _, out("r11") _,
            out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
            out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
            out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
            out("xmm12") _, out("xmm13") _, out("xmm14") _, out("xmm15") _,
        );
    }
    // Without AVX only each slot's low 16 bytes were stored.
    if avx == 0 {
        for slot in got.v.chunks_exact_mut(32) {
            slot[16..].fill(0);
        }
    }
}

/// [`ROUNDS`] rounds of [`hold`] with thread `seed`'s values; the first difference found.
fn isolate(seed: u64) -> Result<(), (u64, &'static str)> {
    let mut want = Values::of(seed);
    if AVX.load(Ordering::Relaxed) == 0 {
        for slot in want.v.chunks_exact_mut(32) {
            slot[16..].fill(0);
        }
    }
    for round in 0..ROUNDS {
        let mut got = Values {
            v: [0; VBYTES],
            x87: 0,
            mxcsr: 0,
            fcw: 0,
        };
        hold(&want, &mut got);
        let what = if got.v != want.v {
            "a vector register"
        } else if got.x87 != want.x87 {
            "the x87 stack's top"
        } else if got.mxcsr != want.mxcsr {
            "MXCSR"
        } else if got.fcw != want.fcw {
            "the x87 control word"
        } else {
            continue;
        };
        return Err((round, what));
    }
    Ok(())
}

/// MXCSR and the x87 control word now.
fn control_words() -> (u32, u16) {
    let (mut mxcsr, mut fcw) = (0u32, 0u16);
    // SAFETY: each instruction writes the bytes of its operand, ours.
    unsafe {
        asm!("stmxcsr [{}]", in(reg) &mut mxcsr, options(nostack));
        asm!("fnstcw [{}]", in(reg) &mut fcw, options(nostack));
    }
    (mxcsr, fcw)
}

/// Loads MXCSR and the x87 control word.
fn set_control_words(mxcsr: u32, fcw: u16) {
    // SAFETY: each instruction reads its operand, ours; the values used set no reserved
    // bit and keep every exception masked.
    unsafe {
        asm!("ldmxcsr [{}]", in(reg) &mxcsr, options(nostack));
        asm!("fldcw [{}]", in(reg) &fcw, options(nostack));
    }
}

/// Workers that started with control words other than the defaults.
static NOT_DEFAULT: AtomicU32 = AtomicU32::new(0);

fn worker(seed: u64) {
    let (mxcsr, fcw) = control_words();
    if (mxcsr, fcw) != (0x1f80, 0x037f) {
        println!("TEST FAIL {TEST}: thread {seed:#x} started with MXCSR {mxcsr:#x} and x87 control word {fcw:#x}");
        NOT_DEFAULT.fetch_add(1, Ordering::Relaxed);
    }
    if let Err((round, what)) = isolate(seed) {
        println!("TEST FAIL {TEST}: thread {seed:#x} found {what} changed after round {round}");
        FAILED.fetch_add(1, Ordering::Relaxed);
    }
    DONE.increment();
}

fn main(task_id: u64) -> i32 {
    AVX.store(u32::from(avx()), Ordering::Relaxed);
    let boot = baton_rt::start::bootstrap();
    if boot != 0 {
        return child(task_id, boot);
    }
    baton_rt::check::finish(TEST, run(task_id))
}

/// The isolation check of task `task_id`: [`WORKERS`] threads and this one.
fn isolation(task_id: u64) -> Result<(), Failed> {
    let seed = |i: u64| task_id << 8 | i;
    // The workers are created while this thread's control words are not the defaults:
    // each must start with the defaults all the same.
    let saved = control_words();
    set_control_words(0x1f80 | 3 << 13, 0x0c7f);
    for i in 0..WORKERS as u64 {
        let Some(stack) = STACKS.take() else {
            check!(false, "a stack for worker {i}");
            return Err(Failed);
        };
        must("spawn a worker", spawn(stack, worker, seed(i + 1)))?;
    }
    set_control_words(saved.0, saved.1);
    let mine = isolate(seed(0));
    must(
        "wait for the workers",
        DONE.wait_for(WORKERS as u32, FOREVER),
    )?;
    if let Err((round, what)) = mine {
        println!("TEST FAIL {TEST}: the main thread found {what} changed after round {round}");
        return Err(Failed);
    }
    if FAILED.load(Ordering::Relaxed) != 0 {
        return Err(Failed);
    }
    check!(
        NOT_DEFAULT.load(Ordering::Relaxed) == 0,
        "a new thread starts with MXCSR 0x1f80 and the x87 control word 0x037f, whatever its creator's"
    );
    Ok(())
}

/// The child: the isolation check, then a word to the parent (1 passed, 0 failed).
fn child(task_id: u64, boot: u64) -> i32 {
    let ok = isolation(task_id).is_ok();
    if ok {
        println!("TEST PASS fpu child");
    }
    let Ok(mut buf) = IpcBuffer::new() else {
        return 1;
    };
    let _ = buf.send(boot, u64::from(ok), &[], &[]);
    i32::from(!ok)
}

/// Waits until the number of threads is `n` (or fewer) again (a task or thread ended).
fn threads_back_to(n: u64) -> Result<(), Failed> {
    for _ in 0..4000 {
        if must("stats", stats())?.threads <= n {
            return Ok(());
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
    }
    check!(false, "the threads are back to {n}");
    Err(Failed)
}

fn run(task_id: u64) -> Result<(), Failed> {
    println!(
        "registers checked: {}, x87, MXCSR",
        if AVX.load(Ordering::Relaxed) != 0 {
            "YMM (AVX)"
        } else {
            "XMM"
        }
    );
    // This thread's own first use, so that the baseline counts its save area.
    // SAFETY: zeroes xmm0, declared clobbered.
    unsafe { asm!("xorps xmm0, xmm0", out("xmm0") _, options(nomem, nostack)) };
    let base = must("stats", stats())?;

    // 1. A thread that never touches the registers gets no save area; one that does, does.
    let Some(stack) = STACKS.take() else {
        check!(false, "a stack for the plain thread");
        return Err(Failed);
    };
    let top = stack.as_ptr() as u64 + stack.len() as u64;
    // SAFETY: the entry is assembly that uses no memory (not even its stack) and ends with
    // `thread_exit`.
    must("plain thread", unsafe {
        create_raw(fpu_plain_entry as *const () as u64, top, 200)
    })?;
    // (On two CPUs the thread may have run its 200 yields and ended before this thread
    // looks: that it was made is the count of threads created, not the live count.)
    let mut most = 0;
    for _ in 0..100 {
        most = most.max(must("stats", stats())?.fpu_states);
        baton_rt::yield_now();
    }
    threads_back_to(base.threads)?;
    let after = must("stats", stats())?;
    check!(
        after.threads_created == base.threads_created + 1
            && after.fpu_first_uses == base.fpu_first_uses
            && most == base.fpu_states,
        "a thread that never uses a floating-point or vector register gets no save area ({} made, at most {} of {} while it ran)",
        after.fpu_first_uses - base.fpu_first_uses,
        most,
        base.fpu_states
    );
    let flag = AtomicU32::new(0);
    // SAFETY: the entry is assembly that reads only `flag` (which outlives the thread:
    // we wait below for the thread to end) and ends with `thread_exit`.
    must("touching thread", unsafe {
        create_raw(
            fpu_touch_entry as *const () as u64,
            top,
            &flag as *const AtomicU32 as u64,
        )
    })?;
    // It may run on another CPU, which may take a while to start it: wait up to seconds.
    let mut seen = 0;
    for _ in 0..4000 {
        seen = must("stats", stats())?.fpu_states;
        if seen > base.fpu_states {
            break;
        }
        must("sleep", baton_rt::sleep_ns(1_000_000))?;
    }
    flag.store(1, Ordering::Release);
    threads_back_to(base.threads)?;
    let after = must("stats", stats())?;
    check!(
        seen == base.fpu_states + 1
            && after.fpu_first_uses == base.fpu_first_uses + 1
            && after.fpu_states == base.fpu_states,
        "a thread's first vector instruction makes its save area, which goes with the thread ({} while it ran, {} after, baseline {})",
        seen,
        after.fpu_states,
        base.fpu_states
    );

    // 2. Isolation under preemption, in this task and in a child.
    let boot = must("bootstrap port", port_allocate(0))?;
    let before = must("stats", stats())?;
    must("spawn the child", baton_rt::spawn_with("fpu", boot))?;
    isolation(task_id)?;
    let mut buf = must("ipc buffer", IpcBuffer::new())?;
    must("the child's word", buf.msg(MSG_RECEIVE, boot, FOREVER))?;
    check!(
        buf.header().id == 1,
        "every thread of two tasks finds its vector registers, x87 stack and control words as it left them across yields and preemptions"
    );
    let after = must("stats", stats())?;
    let preempted = after.blocks_preempt - before.blocks_preempt;
    check!(
        preempted > 0,
        "the threads were preempted while holding their values ({preempted} preemptions)"
    );
    must("drop", baton_rt::ipc::cap_drop(boot))?;
    // The workers and the child (which may still be ending after its word) are gone.
    threads_back_to(base.threads)?;

    // 3. No kernel memory for the save area: an exception to the task, not a panic.
    nomem()?;

    // 4. Everything back: the workers, the child and its threads are gone, and their save
    //    areas with them.
    threads_back_to(base.threads)?;
    let now = must("stats", stats())?;
    check!(
        now.fpu_states == base.fpu_states,
        "the save areas are back to the baseline ({} now, {} at the start)",
        now.fpu_states,
        base.fpu_states
    );
    Ok(())
}

/// Spawns `fpu_nomem` with growing kernel-memory limits until it gets its save area.
fn nomem() -> Result<(), Failed> {
    let threads = must("stats", stats())?.threads;
    let (mut refused, mut stopped) = (0u32, 0u32);
    let mut limit = 1024u64;
    while limit < 64 * 1024 {
        let before = must("stats", stats())?;
        match baton_rt::sys::spawn_limited("fpu_nomem", 0, limit, 0) {
            Err(Error::NoMemory) => refused += 1,
            Err(e) => {
                must("spawn fpu_nomem", Err::<(), _>(e))?;
            }
            Ok(_) => {
                threads_back_to(threads)?;
                let after = must("stats", stats())?;
                if after.fpu_first_uses > before.fpu_first_uses {
                    break;
                }
                stopped += 1;
            }
        }
        limit += 128;
    }
    check!(
        stopped > 0 && limit < 64 * 1024,
        "a task with no kernel memory left for a save area is stopped by an exception at its first floating-point use ({stopped} limits, {refused} too small to start), and one with room ({limit} bytes) runs"
    );
    Ok(())
}

/// Whether the YMM registers are usable: CPUID's AVX and OSXSAVE, and `XCR0`'s SSE and
/// AVX state.
fn avx() -> bool {
    let l1 = core::arch::x86_64::__cpuid(1);
    if l1.ecx & (1 << 27) == 0 || l1.ecx & (1 << 28) == 0 {
        return false;
    }
    let lo: u32;
    // SAFETY: `xgetbv` with ECX 0 is valid when CPUID says OSXSAVE (checked above).
    unsafe {
        asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") _,
            options(nomem, nostack, preserves_flags));
    }
    lo & 0b110 == 0b110
}
