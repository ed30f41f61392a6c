//! Starting the other CPUs (application processors, APs).
//!
//! An AP wakes from INIT + start-up IPI in 16-bit real mode at `CS:IP = 0x0800:0000`, i.e.
//! at [`TRAMPOLINE_PA`]. [`start_aps`] copies the trampoline there, builds a temporary PML4
//! next to it, sends INIT to every AP, waits [`apic::INIT_DELAY_US`] once, then starts the
//! APs one at a time (two start-up IPIs each, then a wait for the AP to report in):
//!
//! 1. **16-bit**: computes its own physical base from `cs` (the code is position
//!    independent: every address is an offset from its start), patches its GDT pointer and
//!    far-jump targets, loads the GDT and sets CR0.PE (clearing CD/NW, which INIT sets);
//! 2. **32-bit**: enables PAE, loads the temporary PML4 (identity map of the low 2 MiB +
//!    the kernel half of the kernel's PML4), sets EFER.LME/NXE/SCE and CR0.PG/WP;
//! 3. **64-bit**: loads its stack, claims its parameters (the `started` word, compare and
//!    exchange 0 → 1, so a BSP that gave up cannot race it) and calls [`ap_start`] in the
//!    kernel's high half, which switches to the kernel's own page tables and sets the CPU
//!    up like the boot CPU (GDT/TSS/per-CPU area, the shared IDT, the `syscall` MSRs, CR0 and
//!    CR4 features, the LAPIC) and reports in;
//! 4. **released**: the AP halts (interrupts on, its timer still off, so only [`wake_cpu`]'s
//!    IPI reaches it) until the kernel state exists and the kernel calls [`release_aps`];
//!    then it starts its LAPIC timer and calls the caller's entry.
//!
//! The BSP waits up to [`START_TIMEOUT_MS`] for each AP; one that does not report is given
//! up (and stopped with INIT if it never reached long mode) with a warning line, and
//! bring-up goes on with the next.
//!
//! The pages used, [`LOW_PAGES`], lie in the low 1 MiB, which the frame allocator never
//! hands out; the caller checks that they are RAM.

use super::paging::phys_to_virt;
use super::{apic, cpu, gdt};
use crate::arch::serial::kprintln;
use core::arch::global_asm;
use core::ops::Range;
use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use x86_64::instructions::tables::{lidt, sidt};
use x86_64::registers::control::{Cr0, Cr4};
use x86_64::structures::DescriptorTablePointer;

/// Physical address where APs start (start-up IPI vector `TRAMPOLINE_PA >> 12`).
pub const TRAMPOLINE_PA: u64 = 0x8000;
/// The temporary page tables: PML4, PDPT (slot 0), PD (slot 0, one 2 MiB identity page).
const PML4_PA: u64 = 0x9000;
const PDPT_PA: u64 = 0xa000;
const PD_PA: u64 = 0xb000;
/// Every physical page this module writes: the trampoline and the temporary page tables.
pub const LOW_PAGES: Range<u64> = TRAMPOLINE_PA..0xc000;
/// Size of each AP's initial stack (the one `entry` runs on).
pub const AP_STACK_SIZE: usize = 64 * 1024;
/// How long the BSP waits for each AP to report in. An AP needs well under a millisecond,
/// but under TCG on a busy host its thread may not run for tens of milliseconds; the wait
/// ends as soon as the AP reports, so only a real failure costs the whole timeout.
pub const START_TIMEOUT_MS: u64 = 1000;

global_asm!(
    r#"
    .pushsection .rodata.baton_ap_trampoline, "a"
    .p2align 4
    .global baton_ap_trampoline
baton_ap_trampoline:
    .code16
    cli
    cld
    movw %cs, %ax
    movw %ax, %ds
    movzwl %ax, %ebx
    shll $4, %ebx
    leal (apt_gdt - baton_ap_trampoline)(%ebx), %eax
    movl %eax, apt_gdt_ptr + 2 - baton_ap_trampoline
    leal (apt_pm32 - baton_ap_trampoline)(%ebx), %eax
    movl %eax, apt_far32 - baton_ap_trampoline
    leal (apt_lm64 - baton_ap_trampoline)(%ebx), %eax
    movl %eax, apt_far64 - baton_ap_trampoline
    lgdtl apt_gdt_ptr - baton_ap_trampoline
    movl %cr0, %eax
    andl $0x9fffffff, %eax
    orl $1, %eax
    movl %eax, %cr0
    ljmpl *(apt_far32 - baton_ap_trampoline)

    .code32
apt_pm32:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movl %cr4, %eax
    orl $(1 << 5), %eax
    movl %eax, %cr4
    movl (baton_ap_params - baton_ap_trampoline)(%ebx), %eax
    movl %eax, %cr3
    movl $0xC0000080, %ecx
    rdmsr
    orl $((1 << 0) | (1 << 8) | (1 << 11)), %eax
    wrmsr
    movl %cr0, %eax
    orl $((1 << 31) | (1 << 16) | 1), %eax
    movl %eax, %cr0
    ljmpl *(apt_far64 - baton_ap_trampoline)(%ebx)

    .code64
apt_lm64:
    movl %ebx, %ebx
    xorl %eax, %eax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movw %ax, %fs
    movw %ax, %gs
    movq (baton_ap_params + 8 - baton_ap_trampoline)(%rbx), %rsp
    movq (baton_ap_params + 16 - baton_ap_trampoline)(%rbx), %rsi
    movq (baton_ap_params + 24 - baton_ap_trampoline)(%rbx), %rdi
    movl $1, %ecx
    xorl %eax, %eax
    lock cmpxchgq %rcx, (baton_ap_params + 32 - baton_ap_trampoline)(%rbx)
    jne 1f
    callq *%rsi
1:
    cli
    hlt
    jmp 1b

    .p2align 3
apt_gdt:
    .quad 0
    .quad 0x00CF9A000000FFFF
    .quad 0x00CF92000000FFFF
    .quad 0x00AF9A000000FFFF
apt_gdt_ptr:
    .word 4 * 8 - 1
    .long 0
    .p2align 2
apt_far32:
    .long 0
    .word 0x08
    .p2align 2
apt_far64:
    .long 0
    .word 0x18
    .p2align 3
    .global baton_ap_params
baton_ap_params:
    .skip 5 * 8
    .global baton_ap_trampoline_end
baton_ap_trampoline_end:
    .popsection
    "#,
    options(att_syntax)
);

extern "C" {
    static baton_ap_trampoline: u8;
    static baton_ap_params: u8;
    static baton_ap_trampoline_end: u8;
}

/// The trampoline's parameter block (`baton_ap_params`), written by the BSP before each
/// start-up IPI.
#[repr(C)]
struct Params {
    /// Temporary PML4 (read as 32 bits in protected mode).
    cr3: u64,
    /// Top of the AP's stack.
    stack_top: u64,
    /// Address of [`ap_start`].
    entry: u64,
    /// The AP's CPU number, `ap_start`'s argument.
    cpu: u64,
    /// 0 until the AP claims the parameters (→ 1) or the BSP gives up on it (→ 2).
    started: u64,
}

/// What every AP copies from the boot CPU.
struct BspState {
    kernel_root: u64,
    idt: DescriptorTablePointer,
    star: u64,
    lstar: u64,
    fmask: u64,
    cr0: u64,
    cr4: u64,
    entry: extern "C" fn(usize) -> !,
}

static BSP: spin::Once<BspState> = spin::Once::new();

/// The handshake for the AP being started: `apic_id << 32 | cpu << 2 | state`, where the
/// BSP writes `WAITING` and the AP, once set up, replaces it with `ONLINE` and the LAPIC id
/// it reads from its own LAPIC — unless the BSP gave up first (`ABANDONED`).
static HANDSHAKE: AtomicU64 = AtomicU64::new(0);
const WAITING: u64 = 0;
const ONLINE: u64 = 1;
const ABANDONED: u64 = 2;

fn handshake(cpu: usize, state: u64) -> u64 {
    (cpu as u64) << 2 | state
}

const NO_APIC: u32 = u32::MAX;
/// Each online CPU's LAPIC id, by CPU number.
static APIC_IDS: [AtomicU32; gdt::MAX_CPUS] = [const { AtomicU32::new(NO_APIC) }; gdt::MAX_CPUS];
/// CPUs online: numbers `0..CPU_COUNT`.
static CPU_COUNT: AtomicUsize = AtomicUsize::new(1);
/// Each AP's initial stack top (the stack `entry` runs on), by CPU number.
static AP_STACK_TOPS: [AtomicU64; gdt::MAX_CPUS] = [const { AtomicU64::new(0) }; gdt::MAX_CPUS];
/// Set by [`release_aps`]: APs may enter the kernel.
static RELEASED: AtomicBool = AtomicBool::new(false);

/// The LAPIC id of CPU `cpu` (the target for [`apic::send_ipi`]), if that CPU is online.
pub fn apic_id(cpu: usize) -> Option<u32> {
    let id = APIC_IDS.get(cpu)?.load(Ordering::Acquire);
    (id != NO_APIC).then_some(id)
}

/// How many CPUs are online; they are numbered `0..cpu_count()`.
pub fn cpu_count() -> usize {
    CPU_COUNT.load(Ordering::Acquire)
}

/// The initial stack of AP `cpu` (`AP_STACK_SIZE` bytes from the heap, never freed), on
/// which its `entry` was called.
pub fn ap_stack(cpu: usize) -> Option<Range<u64>> {
    let top = AP_STACK_TOPS.get(cpu)?.load(Ordering::Acquire);
    (top != 0).then(|| top - AP_STACK_SIZE as u64..top)
}

/// Lets the APs go on into their `entry` (call once the kernel state they use exists).
pub fn release_aps() {
    RELEASED.store(true, Ordering::Release);
    for cpu in 1..cpu_count() {
        wake_cpu(cpu);
    }
}

/// Interrupts `cpu` with [`apic::IPI_WAKE`] so it notices new work (it may be halted or
/// running something less urgent). Nothing for this CPU or one that is not online.
pub fn wake_cpu(cpu: usize) {
    if cpu == gdt::this_cpu() {
        return;
    }
    if let Some(id) = apic_id(cpu) {
        apic::send_ipi(id, apic::IPI_WAKE as u8);
    }
}

const IA32_STAR: u32 = 0xc000_0081;
const IA32_LSTAR: u32 = 0xc000_0082;
const IA32_FMASK: u32 = 0xc000_0084;

/// Starts the CPUs with the LAPIC ids `ap_ids` (not the boot CPU), one at a time, and
/// returns how many CPUs are online, the boot CPU included. CPU numbers are handed out in
/// order from 1; each AP, once set up and released by [`release_aps`], calls `entry(cpu)` on
/// a 64 KiB stack of its own ([`ap_stack`]) with interrupts off and its timer running.
///
/// Call once, on the boot CPU, after `arch::init_cpu` (the IDT, the `syscall` MSRs and the
/// LAPIC must be set up: APs copy them) and with [`LOW_PAGES`] being RAM that nothing else
/// uses. `kernel_root` is the kernel's PML4.
pub fn start_aps(kernel_root: u64, ap_ids: &[u32], entry: extern "C" fn(cpu: usize) -> !) -> usize {
    if let Some(bsp) = APIC_IDS.first() {
        bsp.store(apic::id(), Ordering::Release);
    }
    if ap_ids.is_empty() {
        return 1;
    }
    let start = core::ptr::addr_of!(baton_ap_trampoline) as u64;
    let len = core::ptr::addr_of!(baton_ap_trampoline_end) as u64 - start;
    let params_offset = core::ptr::addr_of!(baton_ap_params) as u64 - start;
    if len > PML4_PA - TRAMPOLINE_PA {
        kprintln!("[kernel] warning: AP trampoline too large ({len} bytes); one CPU only");
        return 1;
    }
    // SAFETY: IA32_STAR/LSTAR/FMASK exist on x86-64 (programmed by `trap::init`); reading
    // them has no side effects.
    let (star, lstar, fmask) = unsafe {
        (
            cpu::rdmsr(IA32_STAR),
            cpu::rdmsr(IA32_LSTAR),
            cpu::rdmsr(IA32_FMASK),
        )
    };
    BSP.call_once(|| BspState {
        kernel_root,
        idt: sidt(),
        star,
        lstar,
        fmask,
        cr0: Cr0::read_raw(),
        cr4: Cr4::read_raw(),
        entry,
    });

    // SAFETY: LOW_PAGES is RAM in the low 1 MiB, which the frame allocator never hands out
    // and nothing else in the kernel uses (the caller checks it is RAM); the direct map
    // covers it. The trampoline symbols delimit `len` bytes of the kernel's rodata. The
    // kernel's PML4 is a live page table whose entries are read through the direct map.
    unsafe {
        let low = |pa: u64| phys_to_virt(pa) as *mut u64;
        core::ptr::copy_nonoverlapping(start as *const u8, low(TRAMPOLINE_PA).cast(), len as usize);
        core::ptr::write_bytes(
            low(PML4_PA).cast::<u8>(),
            0,
            (LOW_PAGES.end - PML4_PA) as usize,
        );
        low(PML4_PA).write(PDPT_PA | 0x3);
        low(PDPT_PA).write(PD_PA | 0x3);
        low(PD_PA).write(0x83); // present, writable, 2 MiB page at 0
        for slot in 256..512 {
            let e = (phys_to_virt(kernel_root) as *const u64)
                .add(slot)
                .read_volatile();
            low(PML4_PA).add(slot).write(e);
        }
    }
    let params = phys_to_virt(TRAMPOLINE_PA + params_offset) as *mut Params;

    // Which CPUs to start: at most MAX_CPUS in all, xAPIC ids only.
    let mut targets = alloc::vec::Vec::with_capacity(ap_ids.len());
    for &id in ap_ids {
        if id == apic::id() || targets.contains(&id) {
            kprintln!("[kernel] warning: APIC id {id} is the boot CPU or repeated; skipped");
        } else if id > 0xfe {
            kprintln!("[kernel] warning: APIC id {id} needs x2APIC mode; CPU left off");
        } else if targets.len() + 1 >= gdt::MAX_CPUS {
            kprintln!(
                "[kernel] warning: more than {} CPUs; APIC id {id} left off",
                gdt::MAX_CPUS
            );
        } else {
            targets.push(id);
        }
    }
    // INIT them all at once, wait once, then start-up IPIs one CPU at a time: the same
    // sequence as `apic::send_init_sipi` for each, with one INIT wait instead of one per CPU.
    for &id in &targets {
        apic::send_init(id);
    }
    apic::delay_us(apic::INIT_DELAY_US);

    let mut online = 1;
    for &id in &targets {
        let cpu = online;
        let stack_top = gdt::alloc_stack(AP_STACK_SIZE);
        if let Some(slot) = AP_STACK_TOPS.get(cpu) {
            slot.store(stack_top, Ordering::Release);
        }
        let waiting = handshake(cpu, WAITING);
        HANDSHAKE.store(waiting, Ordering::Relaxed);
        // SAFETY: `params` is the parameter block inside the trampoline copy in LOW_PAGES,
        // 8-byte aligned; no AP reads it now (the previous one claimed its copy, or was
        // stopped or parked without reading more).
        unsafe {
            params.write_volatile(Params {
                cr3: PML4_PA,
                stack_top,
                entry: ap_start as *const () as u64,
                cpu: cpu as u64,
                started: 0,
            });
        }
        fence(Ordering::SeqCst);
        for _ in 0..2 {
            apic::send_sipi(id, (TRAMPOLINE_PA >> 12) as u8);
            apic::delay_us(apic::SIPI_DELAY_US);
        }

        let deadline = cpu::rdtsc() + apic::tsc_hz() / 1000 * START_TIMEOUT_MS;
        while HANDSHAKE.load(Ordering::Acquire) == waiting && cpu::rdtsc() < deadline {
            core::hint::spin_loop();
        }
        let abandoned = handshake(cpu, ABANDONED);
        if let Err(reported) =
            HANDSHAKE.compare_exchange(waiting, abandoned, Ordering::AcqRel, Ordering::Acquire)
        {
            // Only the AP changes a `waiting` word: it is online.
            let apic_id = (reported >> 32) as u32;
            if let Some(slot) = APIC_IDS.get(cpu) {
                slot.store(apic_id, Ordering::Release);
            }
            online += 1;
            CPU_COUNT.store(online, Ordering::Release);
            kprintln!("[kernel] cpu {cpu} online (apic id {apic_id})");
            continue;
        }
        // Given up. If it has not claimed its parameters, make sure it never does.
        // SAFETY: `started` is an aligned u64 in the trampoline copy; the AP only touches it
        // with `lock cmpxchg`, as here.
        let started = unsafe {
            AtomicU64::from_ptr(core::ptr::addr_of_mut!((*params).started)).compare_exchange(
                0,
                2,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
        };
        let how = if started.is_ok() {
            apic::send_init(id);
            "it never reached long mode; stopped with INIT"
        } else {
            "it reached long mode but did not finish; it parks itself"
        };
        kprintln!(
            "[kernel] warning: cpu {cpu} (apic id {id}) did not come online in {START_TIMEOUT_MS} ms: {how}"
        );
    }
    online
}

/// First Rust code on an AP: on its own stack, interrupts off, still on the temporary page
/// tables.
extern "C" fn ap_start(cpu: usize) -> ! {
    let Some(bsp) = BSP.get() else {
        cpu::halt_forever()
    };
    // SAFETY: the kernel's PML4 maps the kernel half exactly as the temporary tables do
    // (they copy its entries), so this code and its stack stay mapped. CR0 and CR4 take
    // the boot CPU's values: the same paging mode (PE, PG, WP; PAE) plus its FPU, SMEP,
    // SMAP, PCID and global-page settings, which this CPU has too (same CPU model); PCIDE
    // may be set because CR3 was just loaded with PCID 0.
    unsafe {
        cpu::write_cr3(bsp.kernel_root);
        Cr0::write_raw(bsp.cr0);
        Cr4::write_raw(bsp.cr4);
    }
    gdt::init(cpu);
    // SAFETY: the pointer is the boot CPU's IDT, a static that lives for ever and whose
    // stubs work on any CPU. The MSR values are the boot CPU's `syscall` setup, valid here
    // because this CPU's GDT has the same layout and EFER.SCE was set by the trampoline.
    unsafe {
        lidt(&bsp.idt);
        cpu::wrmsr(IA32_STAR, bsp.star);
        cpu::wrmsr(IA32_LSTAR, bsp.lstar);
        cpu::wrmsr(IA32_FMASK, bsp.fmask);
    }
    cpu::init_features();
    super::fpu::init();
    apic::enable();
    let apic_id = apic::id();
    let online = u64::from(apic_id) << 32 | handshake(cpu, ONLINE);
    if HANDSHAKE
        .compare_exchange(
            handshake(cpu, WAITING),
            online,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // The boot CPU gave up on us: stay out of the way.
        cpu::halt_forever()
    }
    if let Some(slot) = APIC_IDS.get(cpu) {
        slot.store(apic_id, Ordering::Release);
    }
    // Wait for the kernel. A `wake_cpu` IPI sent between the check and the halt stays
    // pending and ends the halt at once (`sti; hlt`).
    while !RELEASED.load(Ordering::Acquire) {
        super::wait_for_interrupt();
    }
    apic::init_ap();
    (bsp.entry)(cpu)
}
