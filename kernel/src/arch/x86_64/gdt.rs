//! Segments, the task-state segment, the per-CPU area and the kernel trap stack, one set
//! per CPU.
//!
//! The GDT order is fixed by `syscall`/`sysret`: kernel code, kernel data, user data, user
//! code (see [`KERNEL_CS`] … [`USER_CS`]). Every entry from user mode lands at the top of
//! this CPU's trap stack: the CPU switches to `TSS.rsp0` on interrupts and exceptions, and
//! the `syscall` entry loads the same address from the per-CPU area at `gs:0`;
//! [`set_kernel_stack`] moves both.
//!
//! Each CPU's GDT, TSS, per-CPU area and stacks are allocated from the kernel heap by
//! [`init`] on that CPU and never freed. `gs` points at the per-CPU area in kernel mode.

use alloc::alloc::Layout;
use alloc::boxed::Box;
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

/// Most CPUs the kernel runs on.
pub const MAX_CPUS: usize = 16;
/// Size of each CPU's initial trap stack.
pub const TRAP_STACK_SIZE: usize = 64 * 1024;
const IST_STACK_SIZE: usize = 16 * 1024;

/// Per-CPU data, reached through `gs` in kernel mode.
///
/// # Invariants
/// The offsets of `trap_stack_top` (0), `user_rsp` (8), `cpu` (16), `user_frame` (24),
/// `floor_fault` (32), `floor_call` (40) and `thread` (48) are used by assembly (the `syscall` entry, the
/// page-fault entry, `trap_exit`, [`this_cpu`], [`trap_stack_top`], [`set_kernel_stack`],
/// [`set_user_frame`], [`in_floor_call`], [`current_thread`]); do not reorder them. New
/// fields go after `thread`.
#[repr(C)]
pub struct PerCpu {
    /// Top of this CPU's current trap stack (`gs:0`).
    pub trap_stack_top: u64,
    /// Scratch slot for the user `rsp` during `syscall` entry (`gs:8`).
    pub user_rsp: u64,
    /// This CPU's number, 0 for the boot CPU (`gs:16`).
    pub cpu: u64,
    /// Address of the running thread's saved user registers (`gs:24`): `syscall` pushes
    /// them straight there, and every return to user mode pops them from there.
    pub user_frame: u64,
    /// Non-zero while the running thread has armed the floor page-fault window (`gs:32`;
    /// set by the `floor_fault_arm` call, cleared by [`set_user_frame`]).
    pub floor_fault: u64,
    /// Non-zero while the running thread is in a floor cross-address-space call (`gs:40`;
    /// written by the kernel's `floor` module under the kernel lock).
    pub floor_call: u64,
    /// Address of the running thread's object (`gs:48`; set with `user_frame` by
    /// [`set_user_frame`]): the system call paths reach the caller in one load instead of a
    /// per-CPU table and a slab lookup.
    pub thread: u64,
}

const _: () = assert!(core::mem::offset_of!(PerCpu, trap_stack_top) == 0);
const _: () = assert!(core::mem::offset_of!(PerCpu, user_rsp) == 8);
const _: () = assert!(core::mem::offset_of!(PerCpu, cpu) == 16);
const _: () = assert!(core::mem::offset_of!(PerCpu, user_frame) == 24);
const _: () = assert!(core::mem::offset_of!(PerCpu, floor_fault) == 32);
const _: () = assert!(core::mem::offset_of!(PerCpu, floor_call) == 40);
const _: () = assert!(core::mem::offset_of!(PerCpu, thread) == 48);

/// Everything one CPU owns here. `gs` points at `percpu`, the first field, so the TSS is at
/// a fixed distance from the `gs` base.
#[repr(C)]
struct Cpu {
    percpu: PerCpu,
    tss: TaskStateSegment,
    gdt: GlobalDescriptorTable,
}

/// Offset from the `gs` base of this CPU's `TSS.rsp0`.
const GS_TSS_RSP0: usize = core::mem::offset_of!(Cpu, tss)
    + core::mem::offset_of!(TaskStateSegment, privilege_stack_table);

/// Allocates a never-freed kernel stack of `size` bytes from the heap and returns its top
/// (page aligned). Panics when the heap is exhausted.
pub fn alloc_stack(size: usize) -> u64 {
    let Ok(layout) = Layout::from_size_align(size, 4096) else {
        panic!("bad stack layout");
    };
    // SAFETY: the layout has a non-zero size. The memory is never freed; a stack needs no
    // initial contents.
    let base = unsafe { alloc::alloc::alloc(layout) };
    if base.is_null() {
        panic!("out of memory for a {size}-byte CPU stack");
    }
    base as u64 + size as u64
}

/// Sets up CPU `cpu` (0 = the boot CPU; each CPU calls this once, on itself): a GDT and TSS
/// of its own with a fresh trap stack and double-fault stack, reloads the segment
/// registers and points `gs` at its per-CPU area.
pub fn init(cpu: usize) {
    assert!(cpu < MAX_CPUS, "cpu {cpu} is beyond MAX_CPUS");
    let trap_top = alloc_stack(TRAP_STACK_SIZE);
    let mut tss = TaskStateSegment::new();
    // The TSS is packed: its stack tables are copied out, set and stored back whole.
    let mut rsp = tss.privilege_stack_table;
    if let Some(rsp0) = rsp.first_mut() {
        *rsp0 = VirtAddr::new(trap_top);
    }
    tss.privilege_stack_table = rsp;
    let mut ist = tss.interrupt_stack_table;
    if let Some(fatal) = ist.get_mut(usize::from(IST_FATAL)) {
        *fatal = VirtAddr::new(alloc_stack(IST_STACK_SIZE));
    }
    tss.interrupt_stack_table = ist;
    let this = Box::into_raw(Box::new(Cpu {
        percpu: PerCpu {
            trap_stack_top: trap_top,
            user_rsp: 0,
            cpu: cpu as u64,
            user_frame: 0,
            floor_fault: 0,
            floor_call: 0,
            thread: 0,
        },
        tss,
        gdt: GlobalDescriptorTable::new(),
    }));
    // SAFETY: `this` is a leaked heap allocation that this CPU alone uses from now on; the
    // GDT is filled before it is loaded and never changes afterwards, and both it and the
    // TSS live for ever. The selectors below index the descriptors appended here, in the
    // order that `KERNEL_CS` … `TSS_SEL` name.
    unsafe {
        let gdt = &mut (*this).gdt;
        gdt.append(Descriptor::kernel_code_segment());
        gdt.append(Descriptor::kernel_data_segment());
        gdt.append(Descriptor::user_data_segment());
        gdt.append(Descriptor::user_code_segment());
        gdt.append(Descriptor::tss_segment_unchecked(core::ptr::addr_of!(
            (*this).tss
        )));
        gdt.load_unsafe();
        CS::set_reg(SegmentSelector::new(KERNEL_CS >> 3, PrivilegeLevel::Ring0));
        SS::set_reg(SegmentSelector::new(KERNEL_DS >> 3, PrivilegeLevel::Ring0));
        DS::set_reg(SegmentSelector::new(0, PrivilegeLevel::Ring0));
        ES::set_reg(SegmentSelector::new(0, PrivilegeLevel::Ring0));
        load_tss(SegmentSelector::new(TSS_SEL >> 3, PrivilegeLevel::Ring0));
    }
    // SAFETY: IA32_GS_BASE (0xc000_0101) and IA32_KERNEL_GS_BASE (0xc000_0102) exist on
    // x86-64; in kernel mode `gs` points at this CPU's per-CPU area, and user mode starts
    // with 0.
    unsafe {
        super::cpu::wrmsr(0xc000_0101, this as u64);
        super::cpu::wrmsr(0xc000_0102, 0);
    }
}

/// This CPU's number (0 for the boot CPU). Only after [`init`] on this CPU.
#[inline]
pub fn this_cpu() -> usize {
    let cpu: u64;
    // SAFETY: in kernel mode `gs` is this CPU's `PerCpu` (set by `init`), whose `cpu`
    // field is at offset 16.
    unsafe {
        core::arch::asm!("mov {}, qword ptr gs:[16]", out(reg) cpu, options(nostack, readonly, preserves_flags))
    };
    cpu as usize
}

/// Top of this CPU's current trap stack (where entries from user mode land). Only after
/// [`init`] on this CPU.
#[inline]
pub fn trap_stack_top() -> u64 {
    let top: u64;
    // SAFETY: in kernel mode `gs` is this CPU's `PerCpu`, whose `trap_stack_top` is at 0.
    unsafe {
        core::arch::asm!("mov {}, qword ptr gs:[0]", out(reg) top, options(nostack, readonly, preserves_flags))
    };
    top
}

/// Makes `top` this CPU's kernel stack: the `syscall` entry (`gs:0`) and the interrupts
/// and exceptions from user mode (after they have saved the registers into the thread's
/// frame, whose end is `TSS.rsp0`: see [`set_user_frame`]) run there from now on.
///
/// # Panics
/// Never; but `top` must be the top of a stack this CPU owns, or the next entry from user
/// mode overwrites foreign memory.
#[inline]
pub fn set_kernel_stack(top: u64) {
    // SAFETY: in kernel mode `gs` is this CPU's `Cpu` (set by `init`): offset 0 is
    // `PerCpu::trap_stack_top` and `GS_TSS_RSP0` is its TSS's `rsp0` (8 bytes, 4-aligned,
    // which x86 allows). Only this CPU writes either; the CPU reads `rsp0` only on the next
    // entry from user mode, which cannot happen in the middle of this function (the kernel
    // runs with interrupts off).
    unsafe {
        core::arch::asm!(
            "mov qword ptr gs:[0], {top}",
            top = in(reg) top,
            options(nostack, preserves_flags)
        )
    };
}

/// Index of the IST stack used for double faults, NMIs and machine checks (1-based in the
/// IDT, 0-based in the TSS).
pub const IST_FATAL: u16 = 0;

/// Makes `frame` the place of the running thread's user registers: the next `syscall`,
/// interrupt or exception from user mode saves them there (`TSS.rsp0` is the frame's end),
/// and [`super::trap::resume_current`] returns to user mode from there;
/// and `thread` the address [`current_thread`] returns. Disarms the floor page-fault window
/// (`floor_fault`), which belongs to the thread that armed it: every change of the running
/// thread passes here.
///
/// `frame` must be the address of a `TrapFrame` that stays put while this CPU runs the
/// thread (it lives in a box the thread owns, freed only when the thread is off every CPU),
/// and `thread` the address of the boxed thread object itself (likewise).
#[inline]
pub fn set_user_frame(frame: u64, thread: u64) {
    let end = frame + core::mem::size_of::<super::trap::TrapFrame>() as u64;
    // SAFETY: in kernel mode `gs` is this CPU's `PerCpu`, whose `user_frame` is at 24,
    // `floor_fault` at 32 and `thread` at 48, and `GS_TSS_RSP0` is its TSS's `rsp0`; only
    // this CPU writes them, with interrupts off. `end` is 16-byte aligned (the frame is,
    // and its size a multiple of 16), so the CPU pushes its part of a user-mode entry's
    // frame exactly into the frame's last words, which the thread's frame box owns.
    unsafe {
        core::arch::asm!(
            "mov qword ptr gs:[24], {frame}",
            "mov qword ptr gs:[32], 0",
            "mov qword ptr gs:[48], {thread}",
            "mov qword ptr gs:[{rsp0}], {end}",
            frame = in(reg) frame,
            thread = in(reg) thread,
            end = in(reg) end,
            rsp0 = const GS_TSS_RSP0,
            options(nostack, preserves_flags)
        )
    };
}

/// The address of the running thread's object, as [`set_user_frame`] last recorded it (0
/// before the first thread runs on this CPU). Reading it is safe; using it is not: see
/// `crate::thread::current_mut`.
#[inline(always)]
pub fn current_thread() -> u64 {
    let v: u64;
    // SAFETY: in kernel mode `gs` is this CPU's `PerCpu`, whose `thread` is at 48.
    unsafe {
        core::arch::asm!("mov {}, qword ptr gs:[48]", out(reg) v, options(nostack, readonly, preserves_flags))
    };
    v
}

/// Whether the running thread is in a floor cross-address-space call (`floor_call`).
#[inline]
pub fn in_floor_call() -> bool {
    let v: u64;
    // SAFETY: in kernel mode `gs` is this CPU's `PerCpu`, whose `floor_call` is at 40.
    unsafe {
        core::arch::asm!("mov {}, qword ptr gs:[40]", out(reg) v, options(nostack, readonly, preserves_flags))
    };
    v != 0
}

/// Records whether the running thread is in a floor cross-address-space call.
#[inline]
pub fn set_floor_call(on: bool) {
    // SAFETY: in kernel mode `gs` is this CPU's `PerCpu`, whose `floor_call` is at 40; only
    // this CPU writes it, with interrupts off.
    unsafe {
        core::arch::asm!(
            "mov qword ptr gs:[40], {v}",
            v = in(reg) u64::from(on),
            options(nostack, preserves_flags)
        )
    };
}
