//! The fuzzing threads of a `fuzz` worker: call generation, the pools of objects calls
//! returned, the victim threads and activation code, and the cleanup.
//!
//! # What may and may not be fuzzed here
//!
//! Everything runs in the worker task, so nothing may end that task or stop a fuzzing
//! thread for good: no `exit`, no `thread_exit` on a fuzzing thread, no unknown system-call
//! number or fault (with no exception handler the task would end), no `TASK_TERMINATE` to
//! this task's own port, no terminate, suspend or set-state on a fuzzing thread, and no
//! thread or activation whose code is not one of the entry points below. New threads run
//! [victim](#victims) loops that touch no memory but a flag, so they can be created,
//! suspended, given new registers and killed at any time. Faults and deaths happen in
//! child tasks (`fuzz_child`): killed by message, made to fault, or given a thread at a
//! random address through their task port.
//!
//! Addresses given to the kernel are the *arena* (pages of this task that nothing in Rust
//! touches, mapped and unmapped by fuzzed calls), the fuzzing thread's own private pages
//! (its IPC buffer and a large message buffer, which the kernel writes only during that
//! thread's own calls), read-only program memory, and addresses that must be refused
//! (null, the kernel half, non-canonical, the top of user space): never other memory the
//! program uses.
//!
//! # Victims
//! Victim threads and activation entries are assembly that uses no stack: a sleep loop, a
//! receive loop (1 ms timeout, or none), a `wait` loop, each ending with `thread_exit`
//! when [`STOP`] is set; activations optionally enable alerts and sleep, then `act_return`.

use core::arch::global_asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use baton_abi::exception::UserRegs;
use baton_abi::ipc::{
    Descriptor, MsgHeader, DESCRIPTOR_SIZE, DESC_OOL, DESC_PORT, HEADER_SIZE, IPC_BUFFER_SIZE,
    KERNEL_ID_BASE, MSG_BUF, MSG_RECEIVE, MSG_SEND, MSG_SIZE_MAX, MSG_SLOW, NAMES_MAX,
    OOL_DEALLOCATE, QUEUE_LIMIT_MAX,
};
use baton_abi::kobject::*;
use baton_abi::layout::USER_END;
use baton_abi::{
    process_model_check, Sys, ACTIVATIONS_PER_TASK_MAX, CPU_ANY, DEBUG_WRITE_MAX, MEM_MAP_MAX,
    MODULE_NAME_MAX, PRIORITY_MAX,
};
use baton_rt::raw::raw_syscall;
use baton_rt::sync::Counter;
use baton_rt::{println, sleep_ns};

/// A progress line every this many calls of a fuzzing thread.
pub const PROGRESS: u64 = 2000;

/// A class of calls, which `x<letters>` excludes.
pub struct Class {
    /// Its letter in the parameters.
    pub letter: char,
    /// What it covers.
    pub what: &'static str,
    /// Relative weight.
    weight: u32,
}

/// The call classes, in the order of their exclusion bits.
pub const CLASSES: [Class; 13] = [
    Class { letter: 'b', what: "basic calls: null, yield, clock, stats, module_info, debug_write, sleep, wait, wake, process-model block, cpu time, priority, affinity, sched lock", weight: 12 },
    Class { letter: 'm', what: "memory: mem_map, mem_unmap, ipc_buffer_set", weight: 6 },
    Class { letter: 'p', what: "port calls: allocate, make_send, cap_drop, cap_info, notify, set_limit, exception_port_set", weight: 16 },
    Class { letter: 'i', what: "ipc_msg with generated messages", weight: 26 },
    Class { letter: 't', what: "threads: thread_create of victims, thread_port", weight: 7 },
    Class { letter: 'a', what: "activations: act_create, act_port, alert, suspend, get/set state, sidetrack, act_return, migrating calls", weight: 14 },
    Class { letter: 'k', what: "kernel-object messages to task, thread and activation ports", weight: 15 },
    Class { letter: 'c', what: "child tasks: spawn, task_port, task_create, task_map_program, task_init_thread, task_start", weight: 4 },
    Class { letter: 'v', what: "virtual memory (vm_allocate, deallocate, protect, inherit, query, wire, unwire, stats on the arena and bad ranges), driver and host-privilege calls without the right, spawn with start blocks", weight: 8 },
    Class { letter: 'x', what: "extensions: spin_create of random and nearly valid WebAssembly modules (the kernel's interpreter validates them), spin_import, resolve, combine, install, remove, release, raise, ", weight: 4 },
    Class { letter: 'o', what: "memory objects: memobj_create, vm_map (anywhere, the arena, bad places), restrict, info, physical and DMA objects without the right, vm_read/vm_write through task ports, wait_shared/wake_shared", weight: 5 },
    Class { letter: 'g', what: "external pagers: memobj_pager on the thread's own port (every page supplied at once, so no access waits), pager_supply, unavailable, error, flush and lock with bad names, ranges, buffers and flags, data returns drained", weight: 4 },
    Class { letter: 'u', what: "virtual processors: vp_create from random and nearly valid configurations, vp_spares, vp_take, vp_wait, vp_destroy, vp_preempt (never on), vp_resume (refused blocks only), vp_interrupt (of no processor of the task), strand_count (a processor made is destroyed before the class returns, so no upcall comes)", weight: 4 },
];

// ---------------------------------------------------------------------------------------
// Memory

/// The arena: pages only the kernel touches.
const ARENA: u64 = 0x4000_0000_0000;
const ARENA_PAGES: u64 = 64;
/// The arena's last pages are mapped read-only.
const ARENA_RO_PAGES: u64 = 4;
/// Where receive victims receive (arena page 0).
const ARENA_RECV: u64 = ARENA;
/// The word wait victims wait on.
const ARENA_WORD: u64 = ARENA + 2 * 4096;
const PAGE: u64 = 4096;

/// A fuzzing thread's own pages: its IPC buffer and a buffer for `MSG_BUF` messages.
#[repr(C, align(4096))]
struct Private {
    ipc: [u8; IPC_BUFFER_SIZE],
    big: [u8; MSG_SIZE_MAX + IPC_BUFFER_SIZE],
}

struct Privates(UnsafeCell<[Private; super::MAX_THREADS]>);
// SAFETY: fuzzing thread `i` is the only one that reaches `Private` `i` (through
// [`private`]), and the kernel writes it only during that thread's own calls.
unsafe impl Sync for Privates {}
static PRIVATE: Privates = Privates(UnsafeCell::new(
    [const {
        Private {
            ipc: [0; IPC_BUFFER_SIZE],
            big: [0; MSG_SIZE_MAX + IPC_BUFFER_SIZE],
        }
    }; super::MAX_THREADS],
));

/// Fuzzing thread `i`'s private pages (`i` < `MAX_THREADS`).
fn private(i: usize) -> *mut Private {
    let i = i.min(super::MAX_THREADS - 1);
    // SAFETY: in bounds; no reference to the whole array is formed.
    unsafe { PRIVATE.0.get().cast::<Private>().add(i) }
}

// ---------------------------------------------------------------------------------------
// Pools

/// A fixed-size pool of values calls returned (0 = empty), shared by the fuzzing threads.
struct Pool<const N: usize>([AtomicU64; N]);

impl<const N: usize> Pool<N> {
    const fn new() -> Pool<N> {
        Pool([const { AtomicU64::new(0) }; N])
    }
    /// A value from a random slot (perhaps 0, perhaps stale).
    fn pick(&self, r: &mut Rng) -> u64 {
        self.0
            .get(r.below(N as u64) as usize)
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }
    /// Puts `v` in a random slot; returns the value it replaces.
    fn put(&self, r: &mut Rng, v: u64) -> u64 {
        self.0
            .get(r.below(N as u64) as usize)
            .map_or(0, |s| s.swap(v, Ordering::Relaxed))
    }
    /// Takes every value out.
    fn drain(&self, mut f: impl FnMut(u64)) {
        for s in &self.0 {
            let v = s.swap(0, Ordering::Relaxed);
            if v != 0 {
                f(v);
            }
        }
    }
}

/// Receive rights (and names that were receive rights).
static RECV: Pool<24> = Pool::new();
/// Other names: send, send-once, dead names.
static SEND: Pool<48> = Pool::new();
/// Victim thread ids, their ports.
static VICTIMS: Pool<12> = Pool::new();
static VICTIM_PORTS: Pool<12> = Pool::new();
/// Activation ids, their ports.
static ACTS: Pool<48> = Pool::new();
static ACT_PORTS: Pool<16> = Pool::new();
/// Receive rights activations were attached to (names only: the rights are in `RECV`).
static ATTACHED: Pool<8> = Pool::new();
/// Child task ids, their task ports.
static CHILDREN: Pool<3> = Pool::new();
static CHILD_PORTS: Pool<4> = Pool::new();
/// Task ports of tasks being made (`task_create`), ended through the port when evicted
/// (and with this task otherwise).
static MAKING: Pool<3> = Pool::new();
/// Fuzzing threads' ids and ports (only harmless calls target them).
static WORKERS: Pool<{ super::MAX_THREADS }> = Pool::new();
static WORKER_PORTS: Pool<{ super::MAX_THREADS }> = Pool::new();
/// This task's own task port (only harmless operations).
static SELF_PORT: AtomicU64 = AtomicU64::new(0);
/// Set at the end: victims leave their loops.
#[no_mangle]
static FUZZ_STOP: AtomicU32 = AtomicU32::new(0);
use FUZZ_STOP as STOP;

/// Parameters shared by the fuzzing threads.
static SEED: AtomicU64 = AtomicU64::new(0);
static EXCLUDE: AtomicU64 = AtomicU64::new(0);
static VERBOSE: AtomicU32 = AtomicU32::new(0);
/// Each fuzzing thread's call index and last system call, for a report when stuck.
static PROGRESS_AT: [AtomicU64; super::MAX_THREADS] =
    [const { AtomicU64::new(0) }; super::MAX_THREADS];
static LAST_SYS: [AtomicU64; super::MAX_THREADS] =
    [const { AtomicU64::new(0) }; super::MAX_THREADS];

// ---------------------------------------------------------------------------------------
// Victims and activation code

global_asm!(
    ".globl fuzz_victim_sleep",
    "fuzz_victim_sleep:",
    "2:",
    "mov eax, {sleep}",
    "mov edi, 1000000",
    "syscall",
    "cmp dword ptr [rip + {stop}], 0",
    "je 2b",
    "mov eax, {exit}",
    "syscall",
    "ud2",
    ".globl fuzz_victim_recv",
    "fuzz_victim_recv:",
    "mov r12, rdi",
    "2:",
    "mov eax, {ipc}",
    "mov edi, {recv_buf}",
    "mov rsi, r12",
    "mov edx, 1000000",
    "movabs r10, {arena_recv}",
    "mov r8d, 4096",
    "syscall",
    "test rax, rax",
    "jz 3f",
    "mov eax, {sleep}",
    "mov edi, 1000000",
    "syscall",
    "3:",
    "cmp dword ptr [rip + {stop}], 0",
    "je 2b",
    "mov eax, {exit}",
    "syscall",
    "ud2",
    ".globl fuzz_victim_forever",
    "fuzz_victim_forever:",
    "mov r12, rdi",
    "2:",
    "mov eax, {ipc}",
    "mov edi, {recv_buf}",
    "mov rsi, r12",
    "mov rdx, -1",
    "movabs r10, {arena_recv}",
    "mov r8d, 4096",
    "syscall",
    "test rax, rax",
    "jz 3f",
    "mov eax, {sleep}",
    "mov edi, 1000000",
    "syscall",
    "3:",
    "cmp dword ptr [rip + {stop}], 0",
    "je 2b",
    "mov eax, {exit}",
    "syscall",
    "ud2",
    ".globl fuzz_victim_wait",
    "fuzz_victim_wait:",
    "2:",
    "mov eax, {wait}",
    "movabs rdi, {arena_word}",
    "xor esi, esi",
    "mov edx, 1000000",
    "syscall",
    "mov eax, {sleep}",
    "mov edi, 100000",
    "syscall",
    "cmp dword ptr [rip + {stop}], 0",
    "je 2b",
    "mov eax, {exit}",
    "syscall",
    "ud2",
    ".globl fuzz_act_entry",
    "fuzz_act_entry:",
    "test r8b, 1",
    "jz 4f",
    "mov eax, {alert_enable}",
    "mov edi, 1",
    "syscall",
    "4:",
    "test r8b, 2",
    "jz 5f",
    "mov eax, {sleep}",
    "mov edi, 1000000",
    "syscall",
    "5:",
    "mov eax, {act_return}",
    "syscall",
    "ud2",
    sleep = const Sys::Sleep as u64,
    exit = const Sys::ThreadExit as u64,
    ipc = const Sys::IpcMsg as u64,
    wait = const Sys::Wait as u64,
    alert_enable = const Sys::AlertEnable as u64,
    act_return = const Sys::ActReturn as u64,
    recv_buf = const MSG_RECEIVE | MSG_BUF,
    arena_recv = const ARENA_RECV,
    arena_word = const ARENA_WORD,
    stop = sym FUZZ_STOP,
);

extern "C" {
    fn fuzz_victim_sleep();
    fn fuzz_victim_recv();
    fn fuzz_victim_forever();
    fn fuzz_victim_wait();
    fn fuzz_act_entry();
}

fn victim_entries() -> [u64; 4] {
    [
        fuzz_victim_sleep as *const () as u64,
        fuzz_victim_recv as *const () as u64,
        fuzz_victim_forever as *const () as u64,
        fuzz_victim_wait as *const () as u64,
    ]
}

fn act_entry() -> u64 {
    fuzz_act_entry as *const () as u64
}

// ---------------------------------------------------------------------------------------
// Random numbers and edge values

/// splitmix64.
pub struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0; 0 for n = 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    /// True with probability `p` percent.
    fn chance(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
    fn of<T: Copy>(&mut self, xs: &[T], default: T) -> T {
        xs.get(self.below(xs.len() as u64) as usize)
            .copied()
            .unwrap_or(default)
    }
}

/// Edge values for numbers.
const EDGES: [u64; 26] = [
    0,
    1,
    2,
    3,
    0xfff,
    0x1000,
    0x1001,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    1 << 63,
    u64::MAX,
    u64::MAX - 1,
    MSG_SIZE_MAX as u64,
    MSG_SIZE_MAX as u64 + 1,
    MEM_MAP_MAX,
    MEM_MAP_MAX + 4096,
    NAMES_MAX,
    QUEUE_LIMIT_MAX,
    QUEUE_LIMIT_MAX + 1,
    ACTIVATIONS_PER_TASK_MAX as u64,
    PRIORITY_MAX,
    PRIORITY_MAX + 1,
    DEBUG_WRITE_MAX,
    DEBUG_WRITE_MAX + 1,
    MODULE_NAME_MAX as u64 + 1,
];

/// Addresses the kernel must refuse.
const BAD_ADDRESSES: [u64; 9] = [
    0,
    8,
    USER_END - 8,
    USER_END,
    0x0000_8000_0000_0000,
    0x8000_0000_0000_0000,
    0xffff_8000_0000_0000,
    0xffff_ffff_ffff_f000,
    u64::MAX - 7,
];

/// Instruction pointers `thread_create`, `act_create` and a set-state must refuse (outside
/// user space: a user address nothing is mapped at would be accepted, and fault).
const REFUSED_ENTRIES: [u64; 7] = [
    0,
    8,
    USER_END,
    0x0000_8000_0000_0000,
    0xffff_8000_0000_0000,
    0xffff_ffff_ffff_f000,
    u64::MAX - 7,
];

/// Instruction pointers a set-state must refuse: outside the lower canonical half (a set
/// state, like an exception handler's reply, may send a thread to any user address, even
/// an unmapped one such as 0, where it faults).
const REFUSED_RIPS: [u64; 5] = [
    0x0000_8000_0000_0000,
    0x8000_0000_0000_0000,
    0xffff_8000_0000_0000,
    0xffff_ffff_ffff_f000,
    u64::MAX - 7,
];

/// Names that are never a right of this task (or only by a far-off chance).
const BAD_NAMES: [u64; 6] = [
    0,
    1,
    u64::MAX,
    0xffff_ffff,
    0x8000_0000_0000_0000,
    0xdead_0000_0001,
];

static RODATA: [u8; 64] = *b"fuzz: read-only bytes the kernel may read but must not write....";

// ---------------------------------------------------------------------------------------
// A fuzzing thread

struct Fuzzer {
    r: Rng,
    index: usize,
    seed: u64,
    calls: u64,
    ok: u64,
    wrong: u32,
    verbose: bool,
    /// A receive right of this thread's own for kernel-object replies.
    reply: u64,
    /// A receive right of this thread's own that its pagers' requests and data returns
    /// go to (made at the first pager call).
    pager_port: u64,
    p: *mut Private,
}

/// Runs fuzzing thread `index` for `quota` calls; returns calls, successes and wrong results.
pub fn run(index: usize, quota: u64) -> (u64, u64, u32) {
    let seed = SEED.load(Ordering::Relaxed);
    let mut f = Fuzzer {
        r: Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03)),
        index,
        seed,
        calls: 0,
        ok: 0,
        wrong: 0,
        verbose: VERBOSE.load(Ordering::Relaxed) != 0,
        reply: 0,
        pager_port: 0,
        p: private(index),
    };
    let ipc = f.ipc_page();
    f.sys(Sys::IpcBufferSet, [ipc, 0, 0, 0, 0, 0]);
    let reply = f.sys(Sys::PortAllocate, [0, 0, 0, 0, 0, 0]);
    f.reply = if (reply as i64) > 0 { reply } else { 0 };
    let exclude = EXCLUDE.load(Ordering::Relaxed);
    let total: u32 = CLASSES
        .iter()
        .enumerate()
        .filter(|(i, _)| exclude & (1 << i) == 0)
        .map(|(_, c)| c.weight)
        .sum();
    while f.calls < quota && total > 0 {
        let mut pick = f.r.below(u64::from(total)) as u32;
        let mut class = 0;
        for (i, c) in CLASSES.iter().enumerate() {
            if exclude & (1 << i) != 0 {
                continue;
            }
            if pick < c.weight {
                class = i;
                break;
            }
            pick -= c.weight;
        }
        match class {
            0 => f.basic(),
            1 => f.memory(),
            2 => f.ports(),
            3 => f.ipc(),
            4 => f.threads(),
            5 => f.activations(),
            6 => f.kobject(),
            7 => f.children(),
            8 => f.newer(),
            9 => f.extensions(),
            10 => f.memobjs(),
            11 => f.pagers(),
            _ => f.vprocs(),
        }
    }
    if f.reply != 0 {
        f.sys(Sys::CapDrop, [f.reply, 0, 0, 0, 0, 0]);
    }
    if f.pager_port != 0 {
        f.sys(Sys::CapDrop, [f.pager_port, 0, 0, 0, 0, 0]);
    }
    (f.calls, f.ok, f.wrong)
}

impl Fuzzer {
    fn ipc_page(&self) -> u64 {
        // SAFETY: `p` points to this thread's `Private`; only the address is taken.
        unsafe { core::ptr::addr_of_mut!((*self.p).ipc) as u64 }
    }
    fn big(&self) -> u64 {
        // SAFETY: as in `ipc_page`.
        unsafe { core::ptr::addr_of_mut!((*self.p).big) as u64 }
    }

    /// Makes one system call and counts it. Never `exit`, `thread_exit` or an unknown
    /// number (see the module documentation).
    fn sys(&mut self, n: Sys, a: [u64; 6]) -> u64 {
        debug_assert!(!matches!(n, Sys::Exit | Sys::ThreadExit));
        let at = self.calls;
        if let Some(slot) = PROGRESS_AT.get(self.index) {
            slot.store(at, Ordering::Relaxed);
        }
        if let Some(slot) = LAST_SYS.get(self.index) {
            slot.store(n as u64, Ordering::Relaxed);
        }
        if self.verbose {
            println!(
                "fuzz: seed {} t{} call {at} {n:?} {:#x} {:#x} {:#x} {:#x} {:#x} {:#x}",
                self.seed, self.index, a[0], a[1], a[2], a[3], a[4], a[5]
            );
        } else if at.is_multiple_of(PROGRESS) {
            println!("fuzz: seed {} t{} call {at}", self.seed, self.index);
        }
        // SAFETY: every address in `a` is one the module documentation allows: arena pages
        // (never touched from Rust), this thread's private pages (written by the kernel
        // only during this thread's calls, read by it only between them), read-only
        // program memory, or addresses the kernel must refuse. The call number is a known
        // one other than `exit` and `thread_exit`.
        let r = unsafe { raw_syscall(n as u64, a) };
        self.calls += 1;
        if (r as i64) >= 0 {
            self.ok += 1;
        }
        r
    }

    fn wrong(&mut self, what: core::fmt::Arguments<'_>) {
        self.wrong += 1;
        println!(
            "fuzz: seed {} t{} call {}: WRONG: {what}",
            self.seed, self.index, self.calls
        );
    }

    // --- argument generators ---

    fn edge(&mut self) -> u64 {
        match self.r.below(4) {
            0 => self.r.next(),
            1 => self.r.below(64),
            _ => self.r.of(&EDGES, 0),
        }
    }

    /// An address the kernel may write: arena, private, read-only or bad.
    fn addr(&mut self) -> u64 {
        // Refused addresses are rarer than the others: the kernel logs each one.
        match self.r.below(20) {
            0..=8 => {
                ARENA
                    + self.r.below(ARENA_PAGES + 4) * PAGE
                    + self.r.of(&[0, 0, 8, 4088, 4095, 1], 0)
            }
            9..=15 => self.big() + self.r.of(&[0, 0, 8, 4096, MSG_SIZE_MAX as u64 - 8], 0),
            16 => RODATA.as_ptr() as u64 + self.r.of(&[0, 8, 63], 0),
            17 => fuzz_act_entry as *const () as u64,
            _ => self.r.of(&BAD_ADDRESSES, 0),
        }
    }

    /// A page address for `mem_map`/`mem_unmap`/`ipc_buffer_set`: the arena or bad.
    fn arena_addr(&mut self) -> u64 {
        match self.r.below(20) {
            0..=16 => ARENA + self.r.below(ARENA_PAGES + 8) * PAGE,
            17 | 18 => ARENA + self.r.of(&[1, 8, 0x800, 4095], 1),
            _ => self.r.of(&BAD_ADDRESSES, 0),
        }
    }

    fn small_ns(&mut self) -> u64 {
        self.r.of(&[0, 0, 1, 1000, 50_000, 200_000], 0)
    }

    /// A name: mostly from the pools, sometimes stale-looking or bad.
    fn name(&mut self) -> u64 {
        match self.r.below(12) {
            0..=3 => RECV.pick(&mut self.r),
            4..=8 => SEND.pick(&mut self.r),
            9 => RECV.pick(&mut self.r) ^ 0x8000_0000_0000_0000,
            _ => self.r.of(&BAD_NAMES, 0),
        }
    }

    fn recv_name(&mut self) -> u64 {
        if self.r.chance(85) {
            RECV.pick(&mut self.r)
        } else {
            self.name()
        }
    }

    /// A thread id for calls that only read or adjust a thread: self, victims, fuzzing
    /// threads, bad ones.
    fn any_thread(&mut self) -> u64 {
        match self.r.below(8) {
            0 | 1 => 0,
            2..=4 => VICTIMS.pick(&mut self.r),
            5 => WORKERS.pick(&mut self.r),
            _ => self.r.of(&BAD_NAMES, 0),
        }
    }

    /// A victim thread id (or 0 or a bad id), for calls that may stop or kill it; never the
    /// calling thread (0 with kind 0 would be) or a fuzzing thread.
    fn victim(&mut self) -> u64 {
        match self.r.below(8) {
            0..=5 => VICTIMS.pick(&mut self.r).max(1),
            _ => self.r.of(&BAD_NAMES[1..], 1),
        }
    }

    // --- bookkeeping ---

    fn drop_name(&mut self, name: u64) {
        if name != 0 {
            self.sys(Sys::CapDrop, [name, 0, 0, 0, 0, 0]);
        }
    }

    fn keep_recv(&mut self, name: u64) {
        let old = RECV.put(&mut self.r, name);
        // Most evicted rights are released (bounding live ports); some stay, leaked
        // until the task ends.
        if self.r.chance(95) {
            self.drop_name(old);
        }
    }

    fn keep_send(&mut self, name: u64) {
        let old = SEND.put(&mut self.r, name);
        if self.r.chance(95) {
            self.drop_name(old);
        }
    }

    fn keep_victim(&mut self, id: u64) {
        let old = VICTIMS.put(&mut self.r, id);
        if old != 0 {
            self.terminate_thread(old);
        }
    }

    /// Ends victim `id` through its thread port.
    fn terminate_thread(&mut self, id: u64) {
        let port = self.sys(Sys::ThreadPort, [id, 0, 0, 0, 0, 0]);
        if (port as i64) > 0 {
            self.oneway(port, THREAD_TERMINATE);
            self.drop_name(port);
        }
    }

    /// A one-way message with `id` and no data to `port` through the IPC buffer.
    fn oneway(&mut self, port: u64, id: u64) {
        let h = MsgHeader {
            bits: MsgHeader::make_bits(
                baton_abi::ipc::Disposition::CopySend,
                baton_abi::ipc::Disposition::None,
                0,
            ),
            size: HEADER_SIZE as u32,
            dest: port,
            reply: 0,
            id,
        };
        let buf = self.big();
        self.write(buf, &h.to_bytes());
        self.sys(
            Sys::IpcMsg,
            [MSG_SEND | MSG_BUF, 0, 0, buf, HEADER_SIZE as u64, 0],
        );
    }

    /// Writes `bytes` at `at` in this thread's private pages.
    fn write(&mut self, at: u64, bytes: &[u8]) {
        let base = self.p as u64;
        let size = core::mem::size_of::<Private>() as u64;
        if at >= base && at + bytes.len() as u64 <= base + size {
            // SAFETY: the range lies inside this thread's `Private` (checked), which only
            // this thread reaches, and no kernel call of this thread is in progress.
            unsafe {
                core::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len());
            }
        }
    }

    /// Reads `N` bytes at `at` in this thread's private pages (zeros outside them).
    fn read<const N: usize>(&self, at: u64) -> [u8; N] {
        let mut out = [0u8; N];
        let base = self.p as u64;
        let size = core::mem::size_of::<Private>() as u64;
        if at >= base && at + N as u64 <= base + size {
            // SAFETY: as in `write`.
            unsafe { core::ptr::copy_nonoverlapping(at as *const u8, out.as_mut_ptr(), N) };
        }
        out
    }

    fn word_at(&self, at: u64) -> u64 {
        u64::from_le_bytes(self.read::<8>(at))
    }

    /// Takes the rights a message received at `buf` (in private pages) brought.
    fn harvest(&mut self, buf: u64) {
        let Some(h) = MsgHeader::from_bytes(&self.read::<HEADER_SIZE>(buf)) else {
            return;
        };
        if h.reply != 0 {
            self.keep_send(h.reply);
        }
        for i in 0..h.descriptors().min(baton_abi::ipc::DESCRIPTORS_MAX) {
            let at = buf + (HEADER_SIZE + i * DESCRIPTOR_SIZE) as u64;
            let Some(d) = Descriptor::from_bytes(&self.read::<DESCRIPTOR_SIZE>(at)) else {
                break;
            };
            // A region received is given back, so the space does not fill up. The kernel
            // places regions from 16 TiB up, below the runtime's heap; a descriptor
            // elsewhere is this thread's own message read back (the kernel received into
            // another buffer than `buf`), and its range must not be touched.
            let placed = (0x1000_0000_0000..0x3000_0000_0000).contains(&d.value);
            if d.kind == DESC_OOL && placed {
                let lo = d.value & !(PAGE - 1);
                let hi = d.value.saturating_add(d.size).next_multiple_of(PAGE);
                self.sys(Sys::VmDeallocate, [lo, hi.saturating_sub(lo), 0, 0, 0, 0]);
            }
            if d.kind == DESC_PORT && d.value != 0 {
                if d.disposition == baton_abi::ipc::Disposition::MoveReceive as u32 {
                    self.keep_recv(d.value);
                } else {
                    self.keep_send(d.value);
                }
            }
        }
    }

    // --- the classes ---

    fn basic(&mut self) {
        match self.r.below(15) {
            0 => {
                self.sys(Sys::Null, [0; 6]);
            }
            1 => {
                self.sys(Sys::Yield, [0; 6]);
            }
            2 => {
                self.sys(Sys::Clock, [0; 6]);
            }
            3 => {
                let a = self.addr();
                self.sys(Sys::Stats, [a, 0, 0, 0, 0, 0]);
            }
            4 => {
                let (i, a) = (self.edge(), self.addr());
                self.sys(Sys::ModuleInfo, [i, a, 0, 0, 0, 0]);
            }
            5 => {
                // Nothing printable is ever written: length 0, or addresses and lengths
                // that must be refused.
                let (a, len) = match self.r.below(3) {
                    0 => (self.addr(), 0),
                    1 => (self.r.of(&BAD_ADDRESSES, 0), self.edge().max(1)),
                    _ => (
                        RODATA.as_ptr() as u64,
                        DEBUG_WRITE_MAX + 1 + self.r.below(2),
                    ),
                };
                self.sys(Sys::DebugWrite, [a, len, 0, 0, 0, 0]);
            }
            6 => {
                let ns = self.small_ns();
                self.sys(Sys::Sleep, [ns, 0, 0, 0, 0, 0]);
            }
            7 => {
                let a = if self.r.chance(70) {
                    ARENA_WORD + self.r.of(&[0, 0, 4, 2], 0)
                } else {
                    self.addr()
                };
                let (v, ns) = (self.r.of(&[0, 0, 1, u64::MAX, 1 << 32], 0), self.small_ns());
                self.sys(Sys::Wait, [a, v, ns, 0, 0, 0]);
            }
            8 => {
                let a = if self.r.chance(70) {
                    ARENA_WORD
                } else {
                    self.addr()
                };
                let n = self.edge();
                self.sys(Sys::Wake, [a, n, 0, 0, 0, 0]);
            }
            9 => {
                let (ns, seed) = (self.r.of(&[0, 1, 1000, 100_000], 0), self.r.next());
                let got = self.sys(Sys::DebugBlockProcessModel, [ns, seed, 0, 0, 0, 0]);
                if (got as i64) >= 0 && got != process_model_check(seed) {
                    self.wrong(format_args!(
                        "process-model block returned {got:#x} for seed {seed:#x}"
                    ));
                }
            }
            10 => {
                let t = self.any_thread();
                self.sys(Sys::ThreadCpuNs, [t, 0, 0, 0, 0, 0]);
            }
            11 => {
                let t = self.any_thread();
                let p = self.r.of(&[0, 1, 16, 31, 32, 32, 33, 63, 64, u64::MAX], 32);
                self.sys(Sys::SetPriority, [t, p, 0, 0, 0, 0]);
            }
            12 => {
                let t = self.any_thread();
                let c = self
                    .r
                    .of(&[0, 1, 2, 3, 64, CPU_ANY, CPU_ANY, u64::MAX - 1], CPU_ANY);
                self.sys(Sys::SetAffinity, [t, c, 0, 0, 0, 0]);
            }
            13 => {
                self.sys(Sys::ActSchedLock, [0; 6]);
            }
            _ => {
                self.sys(Sys::AlertTest, [0; 6]);
            }
        }
    }

    fn memory(&mut self) {
        match self.r.below(3) {
            0 => {
                let a = self.arena_addr();
                let len = match self.r.below(6) {
                    0..=2 => (1 + self.r.below(8)) * PAGE,
                    3 => self.r.of(
                        &[0, 1, 4095, PAGE + 1, !0xfff_u64, MEM_MAP_MAX + PAGE],
                        PAGE,
                    ),
                    4 => (1 + self.r.below(256)) * PAGE,
                    // The largest map only where it must be refused before it allocates.
                    _ => {
                        if self.r.chance(50) {
                            MEM_MAP_MAX
                        } else {
                            PAGE
                        }
                    }
                };
                let a = if len == MEM_MAP_MAX { a | 1 } else { a };
                let flags = self.r.of(&[1, 1, 0, 2, 3, u64::MAX], 1);
                self.sys(Sys::MemMap, [a, len, flags, 0, 0, 0]);
            }
            1 => {
                let a = self.arena_addr();
                // Unmapping the whole arena is rare, and a large unmap is followed by
                // mapping the arena back (skipping what is still mapped would fail, so
                // page by page in a few calls): otherwise most arena addresses would
                // stay unmapped and the calls that use them would only fail.
                let len = match self.r.below(20) {
                    0..=13 => (1 + self.r.below(4)) * PAGE,
                    14..=18 => self.r.of(
                        &[0, 1, PAGE + 1, MEM_MAP_MAX, MEM_MAP_MAX + PAGE, !0xfff_u64],
                        PAGE,
                    ),
                    _ => ARENA_PAGES * PAGE,
                };
                self.sys(Sys::MemUnmap, [a, len, 0, 0, 0, 0]);
                if len == ARENA_PAGES * PAGE || self.r.chance(30) {
                    for _ in 0..4 {
                        let page = ARENA + self.r.below(ARENA_PAGES - ARENA_RO_PAGES) * PAGE;
                        self.sys(Sys::MemMap, [page, 4 * PAGE, 1, 0, 0, 0]);
                    }
                }
            }
            _ => {
                let a = match self.r.below(4) {
                    0 | 1 => self.ipc_page(),
                    2 => self.arena_addr(),
                    _ => self.r.of(
                        &[
                            0,
                            0,
                            self.ipc_page() + 8,
                            self.big(),
                            RODATA.as_ptr() as u64 & !0xfff,
                        ],
                        0,
                    ),
                };
                self.sys(Sys::IpcBufferSet, [a, 0, 0, 0, 0, 0]);
            }
        }
    }

    fn ports(&mut self) {
        match self.r.below(14) {
            0..=2 => {
                let limit = self.r.of(
                    &[
                        0,
                        0,
                        1,
                        2,
                        16,
                        QUEUE_LIMIT_MAX,
                        QUEUE_LIMIT_MAX + 1,
                        u64::MAX,
                    ],
                    0,
                );
                let n = self.sys(Sys::PortAllocate, [limit, 0, 0, 0, 0, 0]);
                if (n as i64) > 0 {
                    self.keep_recv(n);
                }
            }
            3..=5 => {
                let (n, once) = (self.recv_name(), self.r.of(&[0, 0, 1, 2, u64::MAX], 0));
                let s = self.sys(Sys::PortMakeSend, [n, once, 0, 0, 0, 0]);
                if (s as i64) > 0 {
                    self.keep_send(s);
                }
            }
            6..=8 => {
                let n = self.name();
                self.sys(Sys::CapDrop, [n, 0, 0, 0, 0, 0]);
            }
            9 => {
                let n = self.name();
                self.sys(Sys::CapInfo, [n, 0, 0, 0, 0, 0]);
            }
            10 | 11 => {
                let (n, kind) = (self.name(), self.r.of(&[1, 2, 1, 2, 0, 3], 1));
                let notify = if self.r.chance(85) {
                    self.recv_name()
                } else {
                    0
                };
                self.sys(Sys::PortNotify, [n, kind, notify, 0, 0, 0]);
            }
            12 => {
                let (n, l) = (
                    self.recv_name(),
                    self.r.of(
                        &[0, 1, 2, 16, QUEUE_LIMIT_MAX, QUEUE_LIMIT_MAX + 1, u64::MAX],
                        1,
                    ),
                );
                self.sys(Sys::PortSetLimit, [n, l, 0, 0, 0, 0]);
            }
            _ => {
                let target = match self.r.below(4) {
                    0 => 0,
                    1 => VICTIMS.pick(&mut self.r),
                    2 => WORKERS.pick(&mut self.r),
                    _ => self.r.of(&BAD_NAMES, 0),
                };
                let n = if self.r.chance(30) { 0 } else { self.name() };
                self.sys(Sys::ExceptionPortSet, [target, n, 0, 0, 0, 0]);
            }
        }
    }

    /// A generated message at `buf` (in private pages, room for `room` bytes); returns its
    /// size as written in the header.
    fn message(&mut self, buf: u64, room: usize, dest: u64) -> u64 {
        let dest_d = self.r.of(&[3, 3, 3, 3, 6, 2, 4, 5, 1, 0, 7], 3) as u32;
        let reply_d = self.r.of(&[0, 0, 0, 5, 5, 4, 3, 2, 6, 1, 9], 0) as u32;
        let ndesc = match self.r.below(10) {
            0..=5 => 0,
            6..=8 => 1 + self.r.below(3) as usize,
            _ => self.r.of(&[4, 63, 64, 65, 255], 4),
        };
        let ndata = match self.r.below(10) {
            0..=6 => self.r.below(USER_REGS_WORDS_PLUS) as usize,
            7 | 8 => self.r.below(512) as usize,
            _ => self.r.below(MSG_SIZE_MAX as u64 / 8) as usize,
        };
        let mut bits = dest_d | reply_d << 8 | ((ndesc as u32 & 0xff) << 16);
        if self.r.chance(2) {
            bits |= 1 << (24 + self.r.below(8));
        }
        let reply = match reply_d {
            0 => 0,
            4 | 5 => {
                if self.r.chance(70) && self.reply != 0 {
                    self.reply
                } else {
                    self.recv_name()
                }
            }
            _ => self.name(),
        };
        let id = match self.r.below(10) {
            0..=2 => self.r.below(32),
            3 => KERNEL_ID_BASE + self.r.below(0x200),
            4 => self.r.next(),
            5 => self.r.of(&[0xfa17, 0xe817, 0xc41d], 0),
            _ => self.r.of(&SAFE_OPS, TASK_INFO),
        };
        let exact = HEADER_SIZE + ndesc.min(DESCRIPTORS_MAX_PLUS) * DESCRIPTOR_SIZE + ndata * 8;
        let size = match self.r.below(12) {
            0 => self
                .r
                .of(&[0, 31, 33, u32::MAX as u64, MSG_SIZE_MAX as u64 + 8], 0),
            1 => exact as u64 + 8,
            _ => exact as u64,
        };
        let h = MsgHeader {
            bits,
            size: size as u32,
            dest,
            reply,
            id,
        };
        let mut at = buf;
        let end = buf + room as u64;
        self.write(at, &h.to_bytes());
        at += HEADER_SIZE as u64;
        for _ in 0..ndesc.min(DESCRIPTORS_MAX_PLUS) {
            if at + DESCRIPTOR_SIZE as u64 > end {
                break;
            }
            let d = if self.r.chance(90) {
                let disp = self.r.of(&[1, 2, 3, 3, 4, 5, 6, 0, 8], 3);
                let value = if disp == 1 || disp == 4 || disp == 5 {
                    self.recv_name()
                } else {
                    self.name()
                };
                Descriptor {
                    kind: DESC_PORT,
                    disposition: disp,
                    value,
                    size: self.r.of(&[0, 0, 0, 1], 0),
                }
            } else {
                self.ool_descriptor()
            };
            self.write(at, &d.to_bytes());
            at += DESCRIPTOR_SIZE as u64;
        }
        for _ in 0..ndata {
            if at + 8 > end {
                break;
            }
            let w = self.edge();
            self.write(at, &w.to_le_bytes());
            at += 8;
        }
        size
    }

    /// An out-of-line region's descriptor: arena ranges (whole pages or not, moved or
    /// copied, overlapping now and then) and bad ones; unknown flags and kinds.
    fn ool_descriptor(&mut self) -> Descriptor {
        let size = match self.r.below(4) {
            0 => self.edge(),
            1 => self.r.of(&[0, 1, 8, 4095, 4097], 8),
            _ => (1 + self.r.below(4)) * PAGE - self.r.of(&[0, 0, 100], 0),
        };
        let flags = self.r.of(&[0, 0, 1, 2, 0x80], 0) as u32;
        // A move takes the pages away: only from the arena (which the memory
        // class maps back) or bad addresses, never the fuzzer's own code, data or
        // stacks.
        let value = if flags & OOL_DEALLOCATE != 0 {
            self.arena_addr()
        } else {
            self.addr()
        };
        Descriptor {
            kind: self
                .r
                .of(&[DESC_OOL, DESC_OOL, DESC_OOL, 0, 3, u32::MAX], DESC_OOL),
            disposition: flags,
            value,
            size,
        }
    }

    fn ipc(&mut self) {
        let dest = if self.r.chance(80) {
            SEND.pick(&mut self.r)
        } else {
            self.name()
        };
        let big = self.big();
        let ipc_page = self.ipc_page();
        // Where the message is, and the options that say so.
        let (buf, room, mut options, size_arg) = match self.r.below(20) {
            0..=8 => (ipc_page, IPC_BUFFER_SIZE, 0, 0),
            9..=16 => {
                let room = MSG_SIZE_MAX + IPC_BUFFER_SIZE;
                (big, room, MSG_BUF, 0)
            }
            _ => (self.addr(), 0, MSG_BUF, self.edge()),
        };
        let size = if room > 0 {
            self.message(buf, room, dest)
        } else {
            0
        };
        let size_arg = if options & MSG_BUF != 0 && room > 0 {
            match self.r.below(8) {
                0 => self.edge(),
                1 => MSG_SIZE_MAX as u64,
                _ => size.max(HEADER_SIZE as u64).min(MSG_SIZE_MAX as u64),
            }
        } else {
            size_arg
        };
        options |= match self.r.below(12) {
            0..=4 => MSG_SEND,
            5 | 6 => MSG_RECEIVE,
            7..=9 => MSG_SEND | MSG_RECEIVE,
            10 => MSG_SLOW | self.r.of(&[MSG_SEND, MSG_SEND | MSG_RECEIVE], MSG_SEND),
            _ => self.r.next() & 0x1f,
        };
        let rcv = if options & MSG_RECEIVE != 0 && self.r.chance(50) && self.reply != 0 {
            self.reply
        } else {
            self.recv_name()
        };
        let timeout = self.r.of(&[0, 0, 0, 1000, 200_000, 1_000_000], 0);
        let r = self.sys(Sys::IpcMsg, [options, rcv, timeout, buf, size_arg, 0]);
        if r == 0 && options & MSG_RECEIVE != 0 && room > 0 {
            self.harvest(buf);
        }
    }

    fn threads(&mut self) {
        if self.r.chance(60) {
            let entry = if self.r.chance(95) {
                let e = victim_entries();
                self.r.of(&e, e[0])
            } else {
                self.r.of(&REFUSED_ENTRIES, 0)
            };
            let stack = self.r.of(
                &[ARENA + PAGE, ARENA + PAGE, USER_END, 0x1000, 0, u64::MAX],
                0,
            );
            let arg = self.recv_name();
            let id = self.sys(Sys::ThreadCreate, [entry, stack, arg, 0, 0, 0]);
            if (id as i64) > 0 {
                self.keep_victim(id);
            }
        } else {
            let from_victims = self.r.chance(80);
            let id = if from_victims {
                VICTIMS.pick(&mut self.r)
            } else {
                self.any_thread()
            };
            let port = self.sys(Sys::ThreadPort, [id, 0, 0, 0, 0, 0]);
            if (port as i64) > 0 {
                if from_victims && id != 0 {
                    let old = VICTIM_PORTS.put(&mut self.r, port);
                    self.drop_name(old);
                } else {
                    self.drop_name(port);
                }
            }
        }
    }

    /// Registers for a set-state: random, with an instruction pointer the thread may run
    /// (one of `entries`) or one the kernel must refuse.
    fn regs(&mut self, entries: &[u64]) -> UserRegs {
        let mut w = [0u64; baton_abi::exception::USER_REGS_WORDS];
        for x in w.iter_mut() {
            *x = self.edge();
        }
        let mut regs = UserRegs::from_words(&w);
        regs.rip = if self.r.chance(75) {
            self.r.of(entries, act_entry())
        } else {
            self.r.of(&REFUSED_RIPS, 1 << 63)
        };
        regs.rflags = self.r.of(&[0x202, 0x202, 0x2, 0x3202, 0x200202], 0x202);
        regs
    }

    fn activations(&mut self) {
        match self.r.below(13) {
            0 | 1 => {
                let port = self.recv_name();
                let entry = if self.r.chance(85) {
                    act_entry()
                } else {
                    self.r.of(&REFUSED_ENTRIES, 0)
                };
                let stack = self.r.of(
                    &[
                        ARENA + 8 * PAGE,
                        ARENA + 8 * PAGE,
                        ARENA + 8 * PAGE,
                        0,
                        8,
                        USER_END,
                    ],
                    0,
                );
                let buffer = match self.r.below(5) {
                    0..=2 => ARENA + (4 + self.r.below(ARENA_PAGES)) * PAGE,
                    3 => ARENA + 4 * PAGE + 8,
                    _ => self.r.of(&BAD_ADDRESSES, 0),
                };
                let cookie = self.r.below(4);
                let size = self.r.of(
                    &[
                        0,
                        0,
                        0,
                        PAGE,
                        2 * PAGE,
                        3,
                        MSG_SIZE_MAX as u64,
                        MSG_SIZE_MAX as u64 + PAGE,
                        !0xfff_u64,
                    ],
                    0,
                );
                let id = self.sys(Sys::ActCreate, [port, entry, stack, buffer, cookie, size]);
                if (id as i64) > 0 {
                    ACTS.put(&mut self.r, id);
                    ATTACHED.put(&mut self.r, port);
                }
            }
            2 => {
                let id = ACTS.pick(&mut self.r);
                let p = self.sys(Sys::ActPort, [id, 0, 0, 0, 0, 0]);
                if (p as i64) > 0 {
                    let old = ACT_PORTS.put(&mut self.r, p);
                    self.drop_name(old);
                }
            }
            3 => {
                let (kind, id) = match self.r.below(3) {
                    0 => (0, self.any_thread()),
                    1 => (1, ACTS.pick(&mut self.r)),
                    _ => (self.r.of(&[2, u64::MAX], 2), self.edge()),
                };
                self.sys(Sys::ActAlert, [kind, id, 0, 0, 0, 0]);
            }
            4 => {
                let on = self.r.of(&[0, 1, 1, 2], 0);
                self.sys(Sys::AlertEnable, [on, 0, 0, 0, 0, 0]);
            }
            5 | 6 => {
                let (kind, id) = self.stoppable();
                let on = self.r.of(&[1, 0, 0, 2], 0);
                self.sys(Sys::ActSuspend, [kind, id, on, 0, 0, 0]);
            }
            7 => {
                let (kind, id) = if self.r.chance(80) {
                    self.stoppable()
                } else {
                    (0, self.any_thread())
                };
                let a = self.addr();
                self.sys(Sys::ActGetState, [kind, id, a, 0, 0, 0]);
            }
            8 => {
                let (kind, id) = self.stoppable();
                let regs = if kind == 1 {
                    self.regs(&[act_entry()])
                } else {
                    self.regs(&victim_entries())
                };
                let at = self.big();
                let mut bytes = [0u8; 8 * baton_abi::exception::USER_REGS_WORDS];
                for (b, w) in bytes.chunks_exact_mut(8).zip(regs.to_words()) {
                    b.copy_from_slice(&w.to_le_bytes());
                }
                self.write(at, &bytes);
                let ptr = if self.r.chance(85) {
                    at
                } else {
                    self.r.of(&BAD_ADDRESSES, 0)
                };
                self.sys(Sys::ActSetState, [kind, id, ptr, 0, 0, 0]);
            }
            9 => {
                let (port, on) = (self.recv_name(), self.r.of(&[0, 1, 1, 2], 1));
                self.sys(Sys::PortSidetrack, [port, on, 0, 0, 0, 0]);
            }
            10 => {
                // Outside a migrating call: refused.
                let r = self.sys(Sys::ActReturn, [0; 6]);
                if r != baton_abi::Error::InvalidArgument.to_raw() {
                    self.wrong(format_args!("act_return outside a call returned {:#x}", r));
                }
            }
            _ => {
                // A migrating call: an RPC without descriptors through the IPC buffer to
                // a send right made from a receive right (activations may be attached).
                let port = if self.r.chance(75) {
                    ATTACHED.pick(&mut self.r)
                } else {
                    self.recv_name()
                };
                let s = self.sys(Sys::PortMakeSend, [port, 0, 0, 0, 0, 0]);
                if (s as i64) <= 0 {
                    return;
                }
                let words = self.r.below(8) as usize;
                // Now and then with out-of-line regions (carried into the server's task).
                let ndesc = if self.r.chance(20) {
                    self.r.of(&[1, 1, 2, 8, 9], 1) as usize
                } else {
                    0
                };
                let h = MsgHeader {
                    bits: MsgHeader::make_bits(
                        baton_abi::ipc::Disposition::CopySend,
                        baton_abi::ipc::Disposition::MakeSendOnce,
                        ndesc as u8,
                    ),
                    size: (HEADER_SIZE + ndesc * DESCRIPTOR_SIZE + 8 * words) as u32,
                    dest: s,
                    reply: self.reply,
                    id: self.r.below(16),
                };
                let page = self.ipc_page();
                let (options, buf, len) = if self.r.chance(50) {
                    self.sys(Sys::IpcBufferSet, [page, 0, 0, 0, 0, 0]);
                    (MSG_SEND | MSG_RECEIVE, 0, 0)
                } else {
                    (
                        MSG_SEND | MSG_RECEIVE | MSG_BUF,
                        self.big(),
                        self.r.of(&[PAGE, 2 * PAGE, MSG_SIZE_MAX as u64], PAGE),
                    )
                };
                let at = if buf == 0 { page } else { buf };
                self.write(at, &h.to_bytes());
                for i in 0..ndesc {
                    let d = self.ool_descriptor();
                    self.write(
                        at + (HEADER_SIZE + i * DESCRIPTOR_SIZE) as u64,
                        &d.to_bytes(),
                    );
                }
                let timeout = self.r.of(&[0, 1_000_000, 5_000_000], 0);
                self.sys(Sys::IpcMsg, [options, self.reply, timeout, buf, len, 0]);
                self.keep_send(s);
            }
        }
    }

    /// An activation that may be suspended or given registers: a victim's home activation
    /// (kind 0) or a pool activation (kind 1), or a bad kind.
    fn stoppable(&mut self) -> (u64, u64) {
        match self.r.below(10) {
            0..=3 => (0, self.victim()),
            4..=8 => (1, ACTS.pick(&mut self.r)),
            _ => (self.r.of(&[2, u64::MAX], 2), self.edge()),
        }
    }

    fn kobject(&mut self) {
        // The target and the operations it may be sent.
        let (dest, ops, entries): (u64, &[u64], [u64; 4]) = match self.r.below(10) {
            0..=2 => (
                VICTIM_PORTS.pick(&mut self.r),
                &THREAD_OPS,
                victim_entries(),
            ),
            3..=5 => (ACT_PORTS.pick(&mut self.r), &ACT_OPS, [act_entry(); 4]),
            6 | 7 => (CHILD_PORTS.pick(&mut self.r), &TASK_OPS, [0; 4]),
            8 => (
                SELF_PORT.load(Ordering::Relaxed),
                &SELF_OPS,
                victim_entries(),
            ),
            _ => (WORKER_PORTS.pick(&mut self.r), &WORKER_OPS, [0; 4]),
        };
        let id = self.r.of(ops, TASK_INFO);
        let nargs = match id {
            TASK_THREAD_CREATE => 3,
            TASK_PORT_ALLOCATE => 1,
            THREAD_SET_STATE | ACT_SET_STATE => baton_abi::exception::USER_REGS_WORDS,
            _ => 0,
        };
        let nargs = if self.r.chance(85) {
            nargs
        } else {
            self.r.below(24) as usize
        };
        let mut words = [0u64; 24];
        if id == THREAD_SET_STATE || id == ACT_SET_STATE {
            let regs = self.regs(&entries);
            for (w, v) in words.iter_mut().zip(regs.to_words()) {
                *w = v;
            }
        } else {
            for w in words.iter_mut() {
                *w = self.edge();
            }
            if id == TASK_THREAD_CREATE {
                // In this task only code it may run, or an address that must be refused;
                // in a child anything (it dies of a bad one).
                words[0] = if ops == &SELF_OPS[..] {
                    if self.r.chance(80) {
                        self.r.of(&entries, entries[0])
                    } else {
                        self.r.of(&REFUSED_ENTRIES, 0)
                    }
                } else if self.r.chance(50) {
                    0x40_0000 + self.r.below(0x10000)
                } else {
                    self.edge()
                };
            }
        }
        let with_reply = self.r.chance(85) && self.reply != 0;
        let h = MsgHeader {
            bits: MsgHeader::make_bits(
                baton_abi::ipc::Disposition::CopySend,
                if with_reply {
                    baton_abi::ipc::Disposition::MakeSendOnce
                } else {
                    baton_abi::ipc::Disposition::None
                },
                0,
            ),
            size: (HEADER_SIZE + 8 * nargs) as u32,
            dest,
            reply: if with_reply { self.reply } else { 0 },
            id,
        };
        let buf = self.big();
        self.write(buf, &h.to_bytes());
        for (i, w) in words.iter().take(nargs).enumerate() {
            self.write(buf + (HEADER_SIZE + 8 * i) as u64, &w.to_le_bytes());
        }
        let timeout = self.r.of(&[0, 1_000_000, 10_000_000], 1_000_000);
        let options = MSG_SEND | MSG_BUF | if with_reply { MSG_RECEIVE } else { 0 };
        let r = self.sys(
            Sys::IpcMsg,
            [options, self.reply, timeout, buf, MSG_SIZE_MAX as u64, 0],
        );
        if r != 0 || !with_reply {
            return;
        }
        let got = MsgHeader::from_bytes(&self.read::<HEADER_SIZE>(buf)).unwrap_or_default();
        let code = self.word_at(buf + HEADER_SIZE as u64);
        let result = self.word_at(buf + HEADER_SIZE as u64 + 8);
        if got.id == id + KOBJECT_REPLY_OFFSET && code == 0 && ops == &SELF_OPS[..] {
            match id {
                TASK_PORT_ALLOCATE => self.keep_recv(result),
                TASK_THREAD_CREATE => self.keep_victim(result),
                _ => {}
            }
        }
        self.harvest(buf);
    }

    /// A range of the arena (or a bad one) for the `vm_*` calls: whole pages, some
    /// misaligned, some outside the user half. Never the fuzzer's own code, stack or
    /// private pages.
    fn vm_range(&mut self) -> (u64, u64) {
        let a = match self.r.below(8) {
            0..=5 => ARENA + self.r.below(ARENA_PAGES) * PAGE,
            6 => self.r.of(&BAD_ADDRESSES, 0),
            _ => ARENA + 1,
        };
        let len = match self.r.below(8) {
            0..=5 => (1 + self.r.below(8)) * PAGE,
            6 => self
                .r
                .of(&[0, 1, PAGE + 1, !0xfff_u64, ARENA_PAGES * PAGE], PAGE),
            _ => self.edge(),
        };
        (a, len)
    }

    /// The calls newer than the classes above: virtual memory, the driver and
    /// host-privilege calls (this task holds no host-privilege right, so they must all be
    /// refused), and `spawn`'s start block.
    fn newer(&mut self) {
        match self.r.below(18) {
            0 => {
                // Anywhere (then given back at once, so the space does not fill up), or
                // into the arena (mostly refused: taken), or a bad place.
                let (a, len) = self.vm_range();
                let at = if self.r.chance(50) { 0 } else { a };
                let prot = self.r.of(&[3, 1, 0, 7, 8, u64::MAX], 3);
                let got = self.sys(Sys::VmAllocate, [at, len, prot, 0, 0, 0]);
                if at == 0 && (got as i64) > 0 {
                    self.sys(Sys::VmDeallocate, [got, len, 0, 0, 0, 0]);
                }
            }
            1 => {
                // Deallocating arena pages: the memory class maps them back.
                let (a, len) = self.vm_range();
                self.sys(Sys::VmDeallocate, [a, len, 0, 0, 0, 0]);
            }
            2 | 3 => {
                let (a, len) = self.vm_range();
                let prot = self.r.of(&[1, 3, 0, 7, 5, 16, u64::MAX], 1);
                let set_max = self.r.of(&[0, 0, 1, 2], 0);
                self.sys(Sys::VmProtect, [a, len, prot, set_max, 0, 0]);
                if self.r.chance(70) {
                    // Writable again, mostly: the other classes use the arena.
                    self.sys(Sys::VmProtect, [a, len, 3, 0, 0, 0]);
                }
            }
            4 => {
                let (a, len) = self.vm_range();
                let how = self.r.of(&[0, 1, 2, 3, u64::MAX], 1);
                self.sys(Sys::VmInherit, [a, len, how, 0, 0, 0]);
            }
            5 => {
                let (a, out) = (self.edge(), self.addr());
                let a = if self.r.chance(60) {
                    ARENA + self.r.below(ARENA_PAGES) * PAGE
                } else {
                    a
                };
                self.sys(Sys::VmQuery, [a, out, 0, 0, 0, 0]);
            }
            6 | 7 => {
                let (a, len) = self.vm_range();
                let call = if self.r.chance(50) {
                    Sys::VmWire
                } else {
                    Sys::VmUnwire
                };
                self.sys(call, [a, len, 0, 0, 0, 0]);
                if call == Sys::VmWire && self.r.chance(80) {
                    self.sys(Sys::VmUnwire, [a, len, 0, 0, 0, 0]);
                }
            }
            8 => {
                let (scope, out) = (self.r.of(&[0, 1, 2, u64::MAX], 0), self.addr());
                self.sys(Sys::VmStats, [scope, out, 0, 0, 0, 0]);
            }
            9 => {
                let (irq, port, right) = (self.edge(), self.name(), self.name());
                self.sys(Sys::IrqAttach, [irq, port, right, 0, 0, 0]);
            }
            10 => {
                let n = self.name();
                self.sys(Sys::IrqAck, [n, 0, 0, 0, 0, 0]);
            }
            11 => {
                let (base, count, right) = (self.edge(), self.edge(), self.name());
                self.sys(Sys::IoPortCreate, [base, count, right, 0, 0, 0]);
            }
            12 => {
                let (n, port, width) = (self.name(), self.edge(), self.r.of(&[1, 2, 4, 3, 8], 1));
                let call = if self.r.chance(50) {
                    Sys::IoIn
                } else {
                    Sys::IoOut
                };
                let value = self.edge();
                self.sys(call, [n, port, width, value, 0, 0]);
            }
            13 => {
                let call = self.r.of(
                    &[
                        Sys::HostTasks as u64,
                        Sys::HostThreads as u64,
                        Sys::HostNames as u64,
                        Sys::HostTaskPort as u64,
                        Sys::HostShutdown as u64,
                        Sys::HostTrace as u64,
                        Sys::HostVm as u64,
                    ],
                    Sys::HostTasks as u64,
                );
                let call = Sys::from_raw(call).unwrap_or(Sys::HostTasks);
                let (right, a, b, c) = (self.name(), self.edge(), self.addr(), self.edge());
                self.sys(call, [right, a, b, c, 0, 0]);
            }
            16 | 17 => {
                // `vm_copy` (MoveWords): arena ranges, misaligned or bad, into new memory
                // (given back at once) or over the arena, the caller or a random name as
                // either task, known and unknown flags.
                let (a, len) = self.vm_range();
                let (d, _) = self.vm_range();
                let a = a + self.r.of(&[0, 0, 8, 100, 4095], 0);
                let len = len.saturating_sub(self.r.of(&[0, 0, 8, 100], 0));
                let d = d + (a % PAGE) * u64::from(self.r.chance(80));
                let src_task = if self.r.chance(80) { 0 } else { self.name() };
                let dst_task = if self.r.chance(80) { 0 } else { self.name() };
                let flags = self.r.of(&[2, 2, 0, 1, 3, 4, u64::MAX], 2);
                let got = self.sys(Sys::VmCopy, [src_task, a, len, dst_task, d, flags]);
                if flags & 2 != 0 && dst_task == 0 && (got as i64) > 0 {
                    let lo = got & !(PAGE - 1);
                    let hi = (got + len).next_multiple_of(PAGE);
                    self.sys(Sys::VmDeallocate, [lo, hi - lo, 0, 0, 0, 0]);
                }
            }
            _ => {
                // `spawn` with a start block (on this thread's stack: made well or badly), or
                // a bad address; for a module that does not exist (the block is checked
                // first), or now and then for a real child.
                let len = self.r.of(&[0, 8, 12, 56, 4064, 4065, u64::MAX], 8);
                let mut block = [0u8; 64];
                block[..8].copy_from_slice(&len.to_le_bytes());
                let counts = self.r.of(&[0, 1, 2, 0x1_0000_0001, u64::MAX], 0);
                block[8..16].copy_from_slice(&counts.to_le_bytes());
                for b in block.iter_mut().skip(16) {
                    *b = self.r.of(&[0, b'a', b'=', 0xff], b'a');
                }
                let start = if self.r.chance(80) {
                    block.as_ptr() as u64
                } else {
                    self.r.of(&BAD_ADDRESSES, 0)
                };
                let real = self.r.chance(5);
                let name: &str = if real { "fuzz_child" } else { "no_such_module" };
                let id = self.sys(
                    Sys::Spawn,
                    [name.as_ptr() as u64, name.len() as u64, 0, 0, 0, start],
                );
                if real && (id as i64) > 0 {
                    let old = CHILDREN.put(&mut self.r, id);
                    if old != 0 {
                        self.terminate_task(old);
                    }
                }
            }
        }
    }

    /// The memory-object calls (110-119): objects made and kept in the send pool (so other
    /// calls meet them too, and their evictions drop them), mapped anywhere (unmapped at
    /// once), into the arena or at bad places, with any flags; DMA and physical objects,
    /// which must be refused (this task has no host-privilege right); another task's
    /// memory through whatever task port the pools hold, written only in the arena.
    fn memobjs(&mut self) {
        const P: u64 = PAGE;
        match self.r.below(12) {
            0 | 1 => {
                let size = self
                    .r
                    .of(&[P, 2 * P, 16 * P, 0, P + 1, (1 << 30) + P, 64 << 20], P);
                let size = if self.r.chance(10) { self.edge() } else { size };
                let got = self.sys(Sys::MemobjCreate, [size, 0, 0, 0, 0, 0]);
                if (got as i64) > 0 {
                    self.keep_send(got);
                }
            }
            2..=4 => {
                let name = self.name();
                let anywhere = self.r.chance(60);
                let at = if anywhere { 0 } else { self.arena_addr() };
                let len = self.r.of(&[P, 2 * P, 16 * P, 0, P + 1, !0xfff], P);
                let offset = self.r.of(&[0, 0, P, 8, !0xfff, 15 * P], 0);
                let prot = self.r.below(8);
                let max = prot | self.r.below(8);
                let flags = if self.r.chance(85) {
                    baton_abi::memobj::map_flags(prot, max, self.r.chance(30), self.r.below(4))
                } else {
                    self.edge()
                };
                let got = self.sys(Sys::VmMap, [name, at, len, offset, flags, 0]);
                if anywhere && (got as i64) > 0 {
                    self.sys(Sys::VmDeallocate, [got, len, 0, 0, 0, 0]);
                } else if !anywhere && (got as i64) > 0 && self.r.chance(50) {
                    // The arena back to plain memory, mostly (the memory class maps it).
                    self.sys(Sys::VmDeallocate, [got, len, 0, 0, 0, 0]);
                }
            }
            5 => {
                let (name, prot) = (self.name(), self.r.of(&[1, 3, 7, 0, 8, u64::MAX], 1));
                let got = self.sys(Sys::MemobjRestrict, [name, prot, 0, 0, 0, 0]);
                if (got as i64) > 0 {
                    self.keep_send(got);
                }
            }
            6 => {
                let (name, out) = (self.name(), self.addr());
                self.sys(Sys::MemobjInfo, [name, out, 0, 0, 0, 0]);
            }
            7 => {
                let base = self.r.of(&[0xb8000, 0xfee0_0000, 0, 0x10_0000, 0xff000], 0);
                let (size, flags, right) =
                    (self.r.of(&[P, 0, 1 << 40], P), self.r.below(3), self.name());
                let r = self.sys(Sys::MemobjPhysical, [base, size, flags, right, 0, 0]);
                if (r as i64) > 0 {
                    self.wrong(format_args!(
                        "memobj_physical without the right gave {r:#x}"
                    ));
                }
                let r = self.sys(Sys::MemobjDma, [size, right, 0, 0, 0, 0]);
                if (r as i64) > 0 {
                    self.wrong(format_args!("memobj_dma without the right gave {r:#x}"));
                }
            }
            8 | 9 => {
                // Read from anywhere into memory the kernel may write here, or write from
                // anywhere into the other task's arena (the same addresses in a child).
                let task = if self.r.chance(70) {
                    CHILD_PORTS.pick(&mut self.r)
                } else {
                    self.name()
                };
                let len = self.r.of(&[8, P, 2 * P, 0, (64 << 10) + 1], 8);
                if self.r.chance(50) {
                    let (at, buf) = (self.edge(), self.addr());
                    let at = if self.r.chance(60) {
                        self.arena_addr()
                    } else {
                        at
                    };
                    self.sys(Sys::VmRead, [task, at, buf, len, 0, 0]);
                } else {
                    let (at, buf) = (self.arena_addr(), self.addr());
                    self.sys(Sys::VmWrite, [task, at, buf, len, 0, 0]);
                }
            }
            10 => {
                let (a, v, t) = (self.addr(), self.edge(), self.small_ns());
                self.sys(Sys::WaitShared, [a, v, t, 0, 0, 0]);
            }
            _ => {
                let (a, n) = (self.addr(), self.r.of(&[1, 0, u64::MAX], 1));
                self.sys(Sys::WakeShared, [a, n, 0, 0, 0, 0]);
            }
        }
    }

    /// The extension calls (SPIN's domains and events). Modules are random bytes, or a
    /// WebAssembly header followed by random sections, or a real module with bytes changed:
    /// the kernel's interpreter must refuse every bad one with an error. Domains made are
    /// released again, so the task's domain limit is not the only thing reached.
    /// External pagers. Objects are made on this thread's own port and every page is
    /// supplied (or zero-filled) at once, before the right goes, so that no access of any
    /// thread ever waits for a pager that will not answer; nothing drops pages.
    fn pagers(&mut self) {
        use baton_abi::pager::{FLUSH_RETURN, PAGE_SIZE as PG, SUPPLY_MAX};
        if self.pager_port == 0 {
            let p = self.sys(Sys::PortAllocate, [0, 0, 0, 0, 0, 0]);
            self.pager_port = if (p as i64) > 0 { p } else { 0 };
        }
        let port = self.pager_port;
        let big = self.big();
        match self.r.below(11) {
            9 => {
                // The default pager's calls (`paging`): this task holds no host-privilege
                // right and is not the default pager, so each must be refused.
                let host = if self.r.chance(50) {
                    self.name()
                } else {
                    self.edge()
                };
                let a = [self.name(), self.edge(), host, 0, 0, 0];
                self.sys(Sys::DefaultPagerRegister, a);
                let (t, b) = (self.addr(), self.addr());
                self.sys(Sys::DefaultPagerSupply, [t, b, 0, 0, 0, 0]);
            }
            10 => {
                let scope = if self.r.chance(70) {
                    self.r.below(3)
                } else {
                    self.edge()
                };
                let out = self.addr();
                self.sys(Sys::PagingStats, [scope, out, 0, 0, 0, 0]);
                let (frames, host) = (self.edge(), self.name());
                self.sys(Sys::PagingLimit, [frames, host, 0, 0, 0, 0]);
                let (task, host) = (self.name(), self.name());
                self.sys(Sys::PagingExempt, [task, host, 0, 0, 0, 0]);
            }
            0..=4 => {
                let pages = 1 + self.r.below(16);
                let size = if self.r.chance(10) {
                    self.edge()
                } else {
                    pages * PG
                };
                let on = if self.r.chance(10) { self.name() } else { port };
                let cookie = self.r.next();
                let o = self.sys(Sys::MemobjPager, [on, size, cookie, 0, 0, 0]);
                if (o as i64) <= 0 {
                    return;
                }
                if size > 16 * PG {
                    // Too big to fill in one go (an edge size that was valid): no one has
                    // mapped it yet; it goes at once.
                    self.sys(Sys::CapDrop, [o, 0, 0, 0, 0, 0]);
                    return;
                }
                let zeros = self.r.chance(50);
                let mut off = 0;
                while off < size {
                    let len = (size - off).min(SUPPLY_MAX);
                    if zeros {
                        self.sys(Sys::PagerUnavailable, [o, off, len, 0, 0, 0]);
                    } else {
                        self.sys(Sys::PagerSupply, [o, off, big, len, 0, 0]);
                    }
                    off += len;
                }
                if self.r.chance(10) {
                    self.sys(Sys::PagerFlush, [o, 0, size, FLUSH_RETURN, 0, 0]);
                }
                if self.r.chance(10) {
                    // Locks (with unknown rights now and then), left for the object's end.
                    let prot = self.r.of(&[0, 1, 3, 5, 7, 8], 1);
                    self.sys(Sys::PagerLock, [o, 0, size, prot, 0, 0]);
                }
                self.sys(Sys::CapDrop, [o, 0, 0, 0, 0, 0]);
            }
            5 => {
                let buf = if self.r.chance(20) { self.addr() } else { big };
                let a = [self.name(), self.edge() & !0xfff, buf, self.edge(), 0, 0];
                self.sys(Sys::PagerSupply, a);
            }
            6 => {
                let call = if self.r.chance(50) {
                    Sys::PagerUnavailable
                } else {
                    Sys::PagerError
                };
                let a = [self.name(), self.edge(), self.edge(), 0, 0, 0];
                self.sys(call, a);
            }
            7 => {
                let a = [self.name(), self.edge(), self.edge(), self.r.below(9), 0, 0];
                let call = if self.r.chance(50) {
                    Sys::PagerFlush
                } else {
                    Sys::PagerLock
                };
                self.sys(call, a);
            }
            _ => {
                // Drain data returns (and whatever else came) from the own port.
                // (A flush queues a page for each resident page, charged to this task
                // until received: without draining, its heap runs out.)
                let room = (MSG_SIZE_MAX + IPC_BUFFER_SIZE) as u64;
                for _ in 0..64 {
                    let r = self.sys(Sys::IpcMsg, [MSG_RECEIVE | MSG_BUF, port, 0, big, room, 0]);
                    if r != 0 {
                        break;
                    }
                }
            }
        }
    }

    fn extensions(&mut self) {
        const WASM: &[u8] = b"\0asm\x01\0\0\0";
        const NULL_MODULE: &[u8] = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/extensions/wasm32-unknown-unknown/release/null_syscall.wasm"
        ));
        match self.r.below(12) {
            0..=2 => {
                let mut module = [0u8; 1024];
                let len = match self.r.below(4) {
                    0 => {
                        for b in module.iter_mut() {
                            *b = self.r.next() as u8;
                        }
                        1 + self.r.below(module.len() as u64) as usize
                    }
                    1 => {
                        module[..WASM.len()].copy_from_slice(WASM);
                        for b in module.iter_mut().skip(WASM.len()) {
                            *b = self.r.of(&[0, 1, 2, 3, 7, 10, 0x7f, 0x60, 0x80, 0xff], 1) as u8;
                        }
                        WASM.len() + self.r.below((module.len() - WASM.len()) as u64) as usize
                    }
                    _ => {
                        let n = NULL_MODULE.len().min(module.len());
                        module[..n].copy_from_slice(&NULL_MODULE[..n]);
                        for _ in 0..1 + self.r.below(4) {
                            let at = self.r.below(n.max(1) as u64) as usize;
                            module[at] = self.r.next() as u8;
                        }
                        n
                    }
                };
                let (ptr, len) = if self.r.chance(10) {
                    (self.r.of(&BAD_ADDRESSES, 0), self.edge())
                } else {
                    (module.as_ptr() as u64, len as u64)
                };
                let d = self.sys(Sys::SpinCreate, [ptr, len, 0, 0, 0, 0]);
                if (d as i64) > 0 && self.r.chance(90) {
                    self.sys(Sys::SpinRelease, [d, 0, 0, 0, 0, 0]);
                }
            }
            3 => {
                let names: [&[u8]; 5] = [
                    b"baton.console",
                    b"baton.task",
                    b"baton.kernel",
                    b"nosuch",
                    b"",
                ];
                let name = self.r.of(&names, b"nosuch");
                let (ptr, len) = if self.r.chance(10) {
                    (self.r.of(&BAD_ADDRESSES, 0), self.edge())
                } else {
                    (name.as_ptr() as u64, name.len() as u64)
                };
                let d = self.sys(Sys::SpinImport, [ptr, len, 0, 0, 0, 0]);
                if (d as i64) > 0 {
                    self.sys(Sys::SpinRelease, [d, 0, 0, 0, 0, 0]);
                }
            }
            4 => {
                let call = self.r.of(
                    &[
                        Sys::SpinResolve as u64,
                        Sys::SpinCombine as u64,
                        Sys::SpinRemove as u64,
                        Sys::SpinRelease as u64,
                    ],
                    Sys::SpinResolve as u64,
                );
                let call = Sys::from_raw(call).unwrap_or(Sys::SpinResolve);
                let (a, b) = (self.edge(), self.edge());
                self.sys(call, [a, b, 0, 0, 0, 0]);
            }
            5 => {
                let sym = b"null";
                let (d, mut ev, claim, notify) =
                    (self.edge(), self.edge(), self.edge(), self.name());
                if self.r.chance(30) {
                    ev |= baton_abi::spin::INSTALL_ASYNC;
                }
                let which = self.edge();
                self.sys(Sys::SpinAsync, [which, 0, 0, 0, 0, 0]);
                self.sys(
                    Sys::SpinInstall,
                    [d, sym.as_ptr() as u64, sym.len() as u64, ev, claim, notify],
                );
            }
            8 => {
                // SPIN's memory interfaces: a page's state anywhere, the clock mark.
                let a = if self.r.chance(50) {
                    self.edge()
                } else {
                    self.addr()
                };
                self.sys(Sys::SpinvmQuery, [a, 0, 0, 0, 0, 0]);
                self.sys(Sys::SpinvmMark, [0; 6]);
            }
            9 => {
                // A `Translation` handler (built in) with random claims and symbols,
                // removed at once. Not on `PageNotPresent`: the fuzzer's other threads take
                // such faults (a handler changing their protections could end the task);
                // they never take the others and live.
                let name = b"builtin.appel";
                let d = self.sys(
                    Sys::SpinImport,
                    [name.as_ptr() as u64, name.len() as u64, 0, 0, 0, 0],
                );
                let syms: [&[u8]; 5] = [b"gc", b"unprotect", b"protect", b"load", b"nosuch"];
                let sym = self.r.of(&syms, b"gc");
                let ev = self.r.of(&[0x11, 0x12, 0x13], 0x12);
                let (claim, notify) = (self.edge(), self.name());
                let h = self.sys(
                    Sys::SpinInstall,
                    [d, sym.as_ptr() as u64, sym.len() as u64, ev, claim, notify],
                );
                if (h as i64) > 0 {
                    self.sys(Sys::SpinRemove, [ev, h, 0, 0, 0, 0]);
                }
                if (d as i64) > 0 {
                    self.sys(Sys::SpinRelease, [d, 0, 0, 0, 0, 0]);
                }
            }
            10 => {
                // Calls between domains: a module whose imports another module exports,
                // resolved against that module (or against anything), one of its
                // procedures installed and raised, the domains released in either order
                // (a callee released under an installed caller).
                const CALLER_MODULE: &[u8] = include_bytes!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../../target/extensions/wasm32-unknown-unknown/release/caller.wasm"
                ));
                let create = |f: &mut Self, m: &[u8]| {
                    f.sys(
                        Sys::SpinCreate,
                        [m.as_ptr() as u64, m.len() as u64, 0, 0, 0, 0],
                    )
                };
                let callee = create(self, NULL_MODULE);
                let caller = create(self, CALLER_MODULE);
                if self.r.chance(70) {
                    // The callee's own imports, from the kernel's interfaces.
                    for name in [&b"baton.console"[..], b"baton.task"] {
                        let d = self.sys(
                            Sys::SpinImport,
                            [name.as_ptr() as u64, name.len() as u64, 0, 0, 0, 0],
                        );
                        self.sys(Sys::SpinResolve, [d, callee, 0, 0, 0, 0]);
                        self.sys(Sys::SpinRelease, [d, 0, 0, 0, 0, 0]);
                    }
                }
                let source = if self.r.chance(70) {
                    callee
                } else {
                    self.edge()
                };
                let target = if self.r.chance(80) {
                    caller
                } else {
                    self.edge()
                };
                self.sys(Sys::SpinResolve, [source, target, 0, 0, 0, 0]);
                let syms: [&[u8]; 5] = [
                    b"call_twice",
                    b"call_n",
                    b"call_wild",
                    b"local_n",
                    b"nosuch",
                ];
                let sym = self.r.of(&syms, b"call_n");
                let notify = self.name();
                let asynchronous = if self.r.chance(30) {
                    baton_abi::spin::INSTALL_ASYNC
                } else {
                    0
                };
                let h = self.sys(
                    Sys::SpinInstall,
                    [
                        caller,
                        sym.as_ptr() as u64,
                        sym.len() as u64,
                        baton_abi::spin::EVENT_TEST | asynchronous,
                        0,
                        notify,
                    ],
                );
                if self.r.chance(50) {
                    self.sys(Sys::SpinRelease, [callee, 0, 0, 0, 0, 0]);
                }
                let arg = self.r.below(64);
                self.sys(Sys::SpinRaise, [arg, 0, 0, 0, 0, 0]);
                if (h as i64) > 0 {
                    self.sys(
                        Sys::SpinRemove,
                        [baton_abi::spin::EVENT_TEST, h, 0, 0, 0, 0],
                    );
                }
                for d in [caller, callee] {
                    self.sys(Sys::SpinRelease, [d, 0, 0, 0, 0, 0]);
                }
            }
            11 => {
                // `PhysAddr.Reclaim`: a built-in handler with a random closure (its table
                // is read resident only, and checked) installed and removed; the counts.
                let name = b"builtin.physaddr";
                let d = self.sys(
                    Sys::SpinImport,
                    [name.as_ptr() as u64, name.len() as u64, 0, 0, 0, 0],
                );
                let syms: [&[u8]; 3] = [b"mru", b"table", b"nosuch"];
                let sym = self.r.of(&syms, b"table");
                let ev = self.r.of(
                    &[
                        baton_abi::translation::EVENT_RECLAIM,
                        baton_abi::spin::EVENT_TEST,
                    ],
                    baton_abi::translation::EVENT_RECLAIM,
                );
                let (claim, notify) = (self.edge(), self.name());
                let h = self.sys(
                    Sys::SpinInstall,
                    [d, sym.as_ptr() as u64, sym.len() as u64, ev, claim, notify],
                );
                let which = self.edge();
                self.sys(Sys::SpinReclaim, [which, 0, 0, 0, 0, 0]);
                let which = self.edge();
                self.sys(Sys::SpinTier, [which, 0, 0, 0, 0, 0]);
                if (h as i64) > 0 {
                    self.sys(Sys::SpinRemove, [ev, h, 0, 0, 0, 0]);
                }
                if (d as i64) > 0 {
                    self.sys(Sys::SpinRelease, [d, 0, 0, 0, 0, 0]);
                }
            }
            _ => {
                // (A number in the extension range with no handler of this task's is a bad
                // system call: the task would end. Only raises, then.)
                let arg = self.edge();
                self.sys(Sys::SpinRaise, [arg, 0, 0, 0, 0, 0]);
            }
        }
    }

    /// Virtual processors. A processor made here is destroyed before this returns, and in
    /// between its carrier (this thread) blocks only in `vp_wait`, which never gives a Block
    /// upcall: so no upcall ever enters `fuzz_act_entry` through one.
    fn vprocs(&mut self) {
        use baton_abi::vproc::VpConfig;
        let big = self.big();
        let mut cfg = VpConfig {
            entry: fuzz_act_entry as *const () as u64,
            upcall_lo: big,
            upcall_hi: big + 4 * PAGE,
            quiet_lo: 0,
            quiet_hi: 0,
            mailbox: big + 4 * PAGE + 64,
            cookie: self.r.next(),
        };
        for _ in 0..self.r.below(3) {
            let v = if self.r.chance(50) {
                self.edge()
            } else {
                self.addr()
            };
            match self.r.below(6) {
                0 => cfg.entry = v,
                1 => cfg.upcall_lo = v,
                2 => cfg.upcall_hi = v,
                3 => cfg.quiet_lo = v,
                4 => cfg.quiet_hi = v,
                _ => cfg.mailbox = v,
            }
        }
        let at = if self.r.chance(10) {
            self.addr()
        } else {
            core::ptr::addr_of!(cfg) as u64
        };
        let vp = self.sys(Sys::VpCreate, [at, 0, 0, 0, 0, 0]);
        let made = (vp as i64) > 0;
        for _ in 0..self.r.below(6) {
            let id = if made && self.r.chance(80) {
                vp
            } else {
                self.edge()
            };
            match self.r.below(7) {
                0 => {
                    let n = self.r.of(&[0, 1, 2, 8, 9, u64::MAX], 0);
                    self.sys(Sys::VpSpares, [id, n, 0, 0, 0, 0]);
                }
                // Checkpoints are never turned on (a quantum of 0 or under the minimum):
                // no Checkpoint upcall may enter `fuzz_act_entry`.
                4 => {
                    let q = self.r.of(&[0, 1, 999_999], 0);
                    self.sys(Sys::VpPreempt, [id, q, 0, 0, 0, 0]);
                }
                // Only blocks that are refused: a kernel, non-canonical or unmapped address,
                // or registers whose `rip` is in the kernel half.
                5 => {
                    let regs = baton_abi::exception::UserRegs {
                        rip: self
                            .r
                            .of(&[0xffff_8000_0000_0000, 0x8000_0000_0000, u64::MAX], 0),
                        rsp: self.r.next(),
                        rflags: self.r.next(),
                        ..Default::default()
                    };
                    let at = self.r.of(
                        &[
                            0,
                            0xffff_8000_0000_0000,
                            0x8000_0000_0000,
                            u64::MAX - 8,
                            core::ptr::addr_of!(regs) as u64,
                        ],
                        0,
                    );
                    self.sys(Sys::VpResume, [at, 0, 0, 0, 0, 0]);
                }
                6 if self.r.chance(50) => {
                    let ev = self.r.of(&[0x5354_0001, 0x5354_0004, 0x5354_0005, 0], 0);
                    self.sys(Sys::StrandCount, [ev, 0, 0, 0, 0, 0]);
                }
                // Never the processor made here (a Checkpoint would enter
                // `fuzz_act_entry`): garbage ids only.
                6 => {
                    let bad = self.edge();
                    if bad != vp {
                        self.sys(Sys::VpInterrupt, [bad, 0, 0, 0, 0, 0]);
                    }
                }
                1 => {
                    let (buf, max) = (self.addr(), self.r.of(&[0, 1, 4, 16, 17, u64::MAX], 0));
                    self.sys(Sys::VpTake, [buf, max, 0, 0, 0, 0]);
                }
                2 => {
                    let word = if self.r.chance(80) {
                        ARENA_WORD
                    } else {
                        self.addr()
                    };
                    let (expected, ns) = (self.r.below(3), self.small_ns());
                    self.sys(Sys::VpWait, [word, expected, ns, 0, 0, 0]);
                }
                _ => {
                    self.sys(Sys::VpDestroy, [id, 0, 0, 0, 0, 0]);
                }
            }
        }
        if made {
            self.sys(Sys::VpDestroy, [vp, 0, 0, 0, 0, 0]);
        }
    }

    fn children(&mut self) {
        match self.r.below(4) {
            3 => self.task_making(),
            0 => {
                const CHILD: &str = "fuzz_child";
                let (ptr, len) = match self.r.below(6) {
                    0..=2 => (CHILD.as_ptr() as u64, CHILD.len() as u64),
                    // Never a prefix that names another program ("fuzz" would be a second worker).
                    3 => (
                        CHILD.as_ptr() as u64,
                        self.r.of(&[0, 9, MODULE_NAME_MAX as u64 + 1, u64::MAX], 0),
                    ),
                    4 => ("no_such_module".as_ptr() as u64, 14),
                    _ => (
                        self.r.of(&BAD_ADDRESSES, 0),
                        self.r.of(&[1, 10, u64::MAX], 10),
                    ),
                };
                let bootstrap = match self.r.below(4) {
                    0 => 0,
                    1 => self.recv_name(),
                    2 => SEND.pick(&mut self.r),
                    _ => self.r.of(&BAD_NAMES, 0),
                };
                let id = self.sys(Sys::Spawn, [ptr, len, bootstrap, 0, 0, 0]);
                if (id as i64) > 0 {
                    let old = CHILDREN.put(&mut self.r, id);
                    if old != 0 {
                        self.terminate_task(old);
                    }
                }
            }
            _ => {
                let child = self.r.chance(85);
                let id = if child {
                    CHILDREN.pick(&mut self.r)
                } else {
                    self.edge()
                };
                let port = self.sys(Sys::TaskPort, [id, 0, 0, 0, 0, 0]);
                if (port as i64) > 0 {
                    if child && id != 0 {
                        let old = CHILD_PORTS.put(&mut self.r, port);
                        self.drop_name(old);
                    } else {
                        // Not a child: this task's own port would be harmful in a pool.
                        self.drop_name(port);
                    }
                }
            }
        }
    }

    /// The task-creation calls, on tasks being made, children's and other names, with
    /// arguments good and bad; a task started runs `fuzz_child` (never another worker).
    fn task_making(&mut self) {
        const CHILD: &str = "fuzz_child";
        let task = match self.r.below(6) {
            0 => {
                let (heap, frames) = (self.edge(), self.edge());
                let port = self.sys(Sys::TaskCreate, [heap, frames, 0, 0, 0, 0]);
                if (port as i64) > 0 {
                    let old = MAKING.put(&mut self.r, port);
                    if old != 0 {
                        self.oneway(old, TASK_TERMINATE);
                        self.drop_name(old);
                    }
                }
                return;
            }
            1 => CHILD_PORTS.pick(&mut self.r),
            2 => self.name(),
            _ => MAKING.pick(&mut self.r),
        };
        match self.r.below(3) {
            0 => {
                let kind = self.r.of(&[0, 1, 2, u64::MAX], 0);
                let (ptr, len) = match self.r.below(4) {
                    0 | 1 => (CHILD.as_ptr() as u64, CHILD.len() as u64),
                    // Never a prefix that names another program: "fuzz" would start a
                    // second worker, which takes whatever its bootstrap brings as
                    // parameters and fails when it cannot report.
                    2 => (
                        CHILD.as_ptr() as u64,
                        self.r.of(&[0, 9, MODULE_NAME_MAX as u64 + 1, u64::MAX], 0),
                    ),
                    _ => (self.r.of(&BAD_ADDRESSES, 0), 10),
                };
                // With kind 1 (a program file in a memory object) `ptr` and `len` are the
                // caller's mapping of it, and the last two words the task's name.
                let name_len = self.r.of(&[0, 5, MODULE_NAME_MAX as u64 + 1, u64::MAX], 0);
                let name_ptr = if self.r.chance(70) {
                    CHILD.as_ptr() as u64
                } else {
                    self.r.of(&BAD_ADDRESSES, 0)
                };
                self.sys(
                    Sys::TaskMapProgram,
                    [task, kind, ptr, len, name_ptr, name_len],
                );
            }
            1 => {
                let (entry, stack) = if self.r.chance(60) {
                    (0, 0)
                } else {
                    (self.addr(), self.addr())
                };
                self.sys(Sys::TaskInitThread, [task, entry, stack, 0, 0, 0]);
            }
            _ => {
                let bootstrap = match self.r.below(3) {
                    0 => 0,
                    1 => self.recv_name(),
                    _ => self.r.of(&BAD_NAMES, 0),
                };
                let start = if self.r.chance(70) {
                    0
                } else {
                    self.r.of(&BAD_ADDRESSES, 0)
                };
                self.sys(Sys::TaskStart, [task, bootstrap, start, 0, 0, 0]);
            }
        }
    }

    fn terminate_task(&mut self, id: u64) {
        let port = self.sys(Sys::TaskPort, [id, 0, 0, 0, 0, 0]);
        if (port as i64) > 0 {
            self.oneway(port, TASK_TERMINATE);
            self.drop_name(port);
        }
    }
}

/// Data words of most generated messages: up to a register set and a bit more.
const USER_REGS_WORDS_PLUS: u64 = baton_abi::exception::USER_REGS_WORDS as u64 + 3;
/// Descriptors written at most (a header may claim more).
const DESCRIPTORS_MAX_PLUS: usize = baton_abi::ipc::DESCRIPTORS_MAX + 2;

/// Operations generated messages may carry to any port: none ends or stops anything (a
/// generated message may reach this task's own task port or a fuzzing thread's port only
/// through a name the pools never hold, but the ids are kept harmless anyway).
const SAFE_OPS: [u64; 6] = [
    TASK_INFO,
    THREAD_INFO,
    ACT_INFO,
    THREAD_ALERT,
    ACT_BASE + 50,
    TASK_BASE + 50,
];
/// Operations on victims' thread ports.
const THREAD_OPS: [u64; 9] = [
    THREAD_TERMINATE,
    THREAD_INFO,
    THREAD_INFO,
    THREAD_ALERT,
    THREAD_SUSPEND,
    THREAD_RESUME,
    THREAD_RESUME,
    THREAD_GET_STATE,
    THREAD_SET_STATE,
];
/// Operations on activation ports.
const ACT_OPS: [u64; 9] = [
    ACT_INFO,
    ACT_INFO,
    ACT_ALERT,
    ACT_SUSPEND,
    ACT_RESUME,
    ACT_RESUME,
    ACT_TERMINATE,
    ACT_GET_STATE,
    ACT_SET_STATE,
];
/// Operations on children's task ports.
const TASK_OPS: [u64; 7] = [
    TASK_TERMINATE,
    TASK_THREAD_CREATE,
    TASK_PORT_ALLOCATE,
    TASK_INFO,
    TASK_INFO,
    THREAD_INFO,
    TASK_BASE + 9,
];
/// Operations on this task's own port.
const SELF_OPS: [u64; 5] = [
    TASK_INFO,
    TASK_PORT_ALLOCATE,
    TASK_THREAD_CREATE,
    THREAD_INFO,
    TASK_BASE + 9,
];
/// Operations on fuzzing threads' ports.
const WORKER_OPS: [u64; 4] = [THREAD_INFO, THREAD_ALERT, THREAD_GET_STATE, TASK_INFO];

// ---------------------------------------------------------------------------------------
// Setup, supervision, cleanup

/// Maps the arena and takes the task's own port.
pub fn setup(seed: u64, exclude: u64, verbose: bool) -> Result<(), &'static str> {
    SEED.store(seed, Ordering::Relaxed);
    EXCLUDE.store(exclude, Ordering::Relaxed);
    VERBOSE.store(u32::from(verbose), Ordering::Relaxed);
    let rw = (ARENA_PAGES - ARENA_RO_PAGES) * PAGE;
    baton_rt::mem_map(ARENA, rw, true).map_err(|_| "cannot map the arena")?;
    baton_rt::mem_map(ARENA + rw, ARENA_RO_PAGES * PAGE, false)
        .map_err(|_| "cannot map the arena")?;
    let me = baton_rt::kobject::task_self().map_err(|_| "no task port")?;
    SELF_PORT.store(me, Ordering::Relaxed);
    Ok(())
}

/// Records fuzzing thread `index` (its id and port).
pub fn add_worker(index: usize, id: u64) {
    if let Some(s) = WORKERS.0.get(index) {
        s.store(id, Ordering::Relaxed);
    }
    if let (Some(s), Ok(p)) = (
        WORKER_PORTS.0.get(index),
        baton_rt::kobject::thread_port(id),
    ) {
        s.store(p, Ordering::Relaxed);
    }
}

/// Waits for `threads` fuzzing threads to finish, resuming every activation every 10 ms (a
/// fuzzing thread stops while in a suspended activation), and the victims too once no
/// fuzzing thread has made a call for [`QUIET_NS`] (a fuzzing thread can wait for a
/// victim's state for as long as the victim does not stop: a victim suspended while blocked
/// in a receive without a timeout never stops by itself). False if they do not finish
/// within [`STUCK_NS`].
pub fn supervise(done: &Counter, threads: u32) -> bool {
    let start = baton_rt::clock_ns();
    let progress = || -> u64 {
        PROGRESS_AT
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    };
    let (mut seen, mut since) = (progress(), start);
    loop {
        if done.wait_for(threads, 10_000_000).is_ok() && done.get() >= threads {
            return true;
        }
        let now = baton_rt::clock_ns();
        if now.saturating_sub(start) > STUCK_NS {
            return false;
        }
        for s in ACTS.0.iter() {
            let id = s.load(Ordering::Relaxed);
            if id != 0 {
                resume(1, id);
            }
        }
        let at = progress();
        if at != seen {
            (seen, since) = (at, now);
        } else if now.saturating_sub(since) > QUIET_NS {
            for s in VICTIMS.0.iter() {
                let id = s.load(Ordering::Relaxed);
                if id != 0 {
                    resume(0, id);
                }
            }
        }
    }
}

/// When no fuzzing thread has made a call for this long, the victims are resumed.
const QUIET_NS: u64 = 1_000_000_000;
/// A fuzzing run is given this long before it is declared stuck.
const STUCK_NS: u64 = 120_000_000_000;

/// Resumes activation `(kind, id)` until it is no longer suspended (at most 64 times).
fn resume(kind: u64, id: u64) {
    for _ in 0..64 {
        // SAFETY: `act_suspend` touches no user memory.
        let r = unsafe { raw_syscall(Sys::ActSuspend as u64, [kind, id, 0, 0, 0, 0]) };
        if (r as i64) < 0 {
            break;
        }
    }
}

/// Prints each fuzzing thread's call index and last call (when stuck).
pub fn show_progress(threads: usize) {
    for i in 0..threads {
        let at = PROGRESS_AT.get(i).map_or(0, |s| s.load(Ordering::Relaxed));
        let n = LAST_SYS.get(i).map_or(0, |s| s.load(Ordering::Relaxed));
        println!(
            "fuzz: t{i} at call {at}, system call {:?}",
            Sys::from_raw(n)
        );
    }
}

/// Ends victims and children, releases every name in the pools and unmaps the arena.
pub fn cleanup() {
    STOP.store(1, Ordering::Relaxed);
    let mut f = Fuzzer {
        r: Rng::new(1),
        index: super::MAX_THREADS - 1,
        seed: SEED.load(Ordering::Relaxed),
        // Not 0: the cleanup's calls print no progress mark.
        calls: 1,
        ok: 0,
        wrong: 0,
        verbose: false,
        reply: 0,
        pager_port: 0,
        p: private(super::MAX_THREADS - 1),
    };
    // Resume everything first, so that no victim is left stopped.
    ACTS.drain(|id| resume(1, id));
    VICTIMS.drain(|id| {
        resume(0, id);
        f.terminate_thread(id);
    });
    CHILDREN.drain(|id| f.terminate_task(id));
    MAKING.drain(|port| {
        f.oneway(port, TASK_TERMINATE);
        let _ = baton_rt::ipc::cap_drop(port);
    });
    for pool in [
        &VICTIM_PORTS as &dyn Drain,
        &ACT_PORTS,
        &CHILD_PORTS,
        &MAKING,
        &WORKER_PORTS,
        &RECV,
        &SEND,
    ] {
        pool.drain_names();
    }
    WORKERS.drain(|_| {});
    let me = SELF_PORT.swap(0, Ordering::Relaxed);
    if me != 0 {
        let _ = baton_rt::ipc::cap_drop(me);
    }
    // SAFETY: the arena is memory nothing in Rust refers to, and no fuzzing thread runs.
    let _ = unsafe { baton_rt::mem_unmap(ARENA, ARENA_PAGES * PAGE) };
    // Victims see `STOP` within a millisecond or two.
    let _ = sleep_ns(5_000_000);
}

/// Releasing a pool's names, whatever its size.
trait Drain {
    fn drain_names(&self);
}

impl<const N: usize> Drain for Pool<N> {
    fn drain_names(&self) {
        self.drain(|n| {
            let _ = baton_rt::ipc::cap_drop(n);
        });
    }
}

/// The privileged calls of the disk driver's part (`docs/drivers.md`): the DMA quarantine,
/// the halted-ticks counter and MSI vectors, with names this task holds and edge values,
/// each refused without the host-privilege right (`msi_message`, which takes no right,
/// on names that are no MSI object). Made once per worker before the seeded run, outside
/// its stream of calls, so that the run is the one it was before these calls existed.
pub fn privileged_refusals() -> Result<(), &'static str> {
    let names = [0, 1, 2, 3, 4, 0x1_0000_0001, u64::MAX, 1 << 63];
    for name in names {
        for (n, a) in [
            (Sys::DmaQuarantineRelease, [name, 0, 0, 0, 0, 0]),
            (Sys::DmaQuarantined, [name, u64::MAX, 0, 0, 0, 0]),
            (Sys::HaltedTicks, [name, 0, 0, 0, 0, 0]),
            (Sys::MsiAttach, [name, name, 0, 0, 0, 0]),
            (Sys::MsiAttach, [1, name, 0, 0, 0, 0]),
            (Sys::MsiMessage, [name, 0, 0, 0, 0, 0]),
        ] {
            // SAFETY: none of these calls takes a user address.
            let r = unsafe { raw_syscall(n as u64, a) };
            if (r as i64) >= 0 {
                return Err(
                    "a privileged call of the disk driver's part succeeded without the right",
                );
            }
        }
    }
    Ok(())
}
