//! Segments, the task-state segment, the per-CPU area and the kernel trap stack.
//!
//! The GDT order is fixed by `syscall`/`sysret`: kernel code, kernel data, user data, user
//! code (see [`KERNEL_CS`] … [`USER_CS`]). Every entry from user mode lands at the top of
//! this CPU's trap stack: the CPU switches to `TSS.rsp0` on interrupts and exceptions, and
//! the `syscall` entry loads the same address from the per-CPU area at `gs:0`.

use spin::Once;
use x86_64::instructions::segmentation::{Segment, CS, DS, ES, SS};
use x86_64::instructions::tables::load_tss;
use x86_64::registers::segmentation::SegmentSelector;
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable};
use x86_64::structures::tss::TaskStateSegment;
use x86_64::{PrivilegeLevel, VirtAddr};

/// Kernel code selector.
pub const KERNEL_CS: u16 = 0x08;
/// Kernel data selector.
pub const KERNEL_DS: u16 = 0x10;
/// User data selector (RPL 3).
pub const USER_DS: u16 = 0x18 | 3;
/// User code selector (RPL 3).
pub const USER_CS: u16 = 0x20 | 3;
const TSS_SEL: u16 = 0x28;

/// Size of the per-CPU trap stack.
pub const TRAP_STACK_SIZE: usize = 64 * 1024;
const IST_STACK_SIZE: usize = 16 * 1024;

#[repr(C, align(4096))]
struct Stack<const N: usize>([u8; N]);

static mut TRAP_STACK: Stack<TRAP_STACK_SIZE> = Stack([0; TRAP_STACK_SIZE]);
static mut IST_STACK: Stack<IST_STACK_SIZE> = Stack([0; IST_STACK_SIZE]);

/// Per-CPU data, reached through `gs` in kernel mode.
///
/// # Invariants
/// The offsets of `trap_stack_top` (0) and `user_rsp` (8) are used by the `syscall` entry
/// assembly; do not reorder.
#[repr(C)]
pub struct PerCpu {
    /// Top of this CPU's trap stack (`gs:0`).
    pub trap_stack_top: u64,
    /// Scratch slot for the user `rsp` during `syscall` entry (`gs:8`).
    pub user_rsp: u64,
    /// This CPU's number.
    pub cpu: u64,
}

static mut PERCPU0: PerCpu = PerCpu {
    trap_stack_top: 0,
    user_rsp: 0,
    cpu: 0,
};

static TSS: Once<TaskStateSegment> = Once::new();
static GDT: Once<GlobalDescriptorTable> = Once::new();

/// Top of the boot CPU's trap stack.
pub fn trap_stack_top() -> u64 {
    // SAFETY: reads this CPU's per-CPU area, written only by this CPU.
    let top = unsafe { (*core::ptr::addr_of!(PERCPU0)).trap_stack_top };
    if top != 0 {
        return top;
    }
    let base = core::ptr::addr_of!(TRAP_STACK) as u64;
    base + TRAP_STACK_SIZE as u64
}

/// Loads the GDT and TSS, reloads the segment registers and points `gs` at the per-CPU area.
pub fn init() {
    let tss = TSS.call_once(|| {
        let mut tss = TaskStateSegment::new();
        tss.privilege_stack_table[0] = VirtAddr::new(trap_stack_top());
        let ist = core::ptr::addr_of!(IST_STACK) as u64 + IST_STACK_SIZE as u64;
        tss.interrupt_stack_table[0] = VirtAddr::new(ist);
        tss
    });
    let gdt = GDT.call_once(|| {
        let mut gdt = GlobalDescriptorTable::new();
        gdt.append(Descriptor::kernel_code_segment());
        gdt.append(Descriptor::kernel_data_segment());
        gdt.append(Descriptor::user_data_segment());
        gdt.append(Descriptor::user_code_segment());
        gdt.append(Descriptor::tss_segment(tss));
        gdt
    });
    gdt.load();
    // SAFETY: the selectors index the descriptors just loaded, in the order above.
    unsafe {
        CS::set_reg(SegmentSelector::new(KERNEL_CS >> 3, PrivilegeLevel::Ring0));
        SS::set_reg(SegmentSelector::new(KERNEL_DS >> 3, PrivilegeLevel::Ring0));
        DS::set_reg(SegmentSelector::new(0, PrivilegeLevel::Ring0));
        ES::set_reg(SegmentSelector::new(0, PrivilegeLevel::Ring0));
        load_tss(SegmentSelector::new(TSS_SEL >> 3, PrivilegeLevel::Ring0));
    }
    // SAFETY: PERCPU0 is written once here, before interrupts or user mode exist, and
    // afterwards only through `gs` by this CPU.
    let percpu = unsafe {
        let p = core::ptr::addr_of_mut!(PERCPU0);
        (*p).trap_stack_top = trap_stack_top();
        p as u64
    };
    // SAFETY: IA32_GS_BASE (0xc000_0101) and IA32_KERNEL_GS_BASE (0xc000_0102) exist on
    // x86-64; in kernel mode `gs` points at the per-CPU area, and user mode starts with 0.
    unsafe {
        super::cpu::wrmsr(0xc000_0101, percpu);
        super::cpu::wrmsr(0xc000_0102, 0);
    }
}

/// Most CPUs supported.
pub const MAX_CPUS: usize = 16;

/// This CPU's number (from the per-CPU area).
pub fn this_cpu() -> usize {
    let cpu: u64;
    // SAFETY: in kernel mode `gs` points at this CPU's `PerCpu`, whose `cpu` field is at
    // offset 16.
    unsafe {
        core::arch::asm!("mov {}, gs:[16]", out(reg) cpu, options(nostack, readonly, preserves_flags))
    };
    cpu as usize
}

/// Makes `top` the stack where this CPU's next entry from user mode lands (TSS `rsp0` and
/// the `syscall` entry's stack).
pub fn set_kernel_stack(top: u64) {
    // SAFETY: single CPU for now: the TSS and per-CPU area are this CPU's, and the kernel runs
    // with interrupts off, so nothing reads them while they change.
    unsafe {
        let p = core::ptr::addr_of_mut!(PERCPU0);
        (*p).trap_stack_top = top;
        if let Some(tss) = TSS.get() {
            let tss = tss as *const TaskStateSegment as *mut TaskStateSegment;
            (*tss).privilege_stack_table[0] = VirtAddr::new(top);
        }
    }
}

/// Index of the IST stack used for double faults, NMIs and machine checks (1-based in the
/// IDT, 0-based in the TSS).
pub const IST_FATAL: u16 = 0;
