//! The Baton kernel binary: boots the machine, then runs user tasks.
//!
//! Machine-dependent code is under [`arch`]; the machine-independent logic (frame
//! allocation, page-table bookkeeping, the ELF loader, user-memory checks, run queues) is
//! the host-tested `kern` crate; [`kernel`] glues them into tasks, scheduling and system
//! calls. `docs/architecture.md` describes the whole design.
//!
//! No system-call argument or word of user memory may panic the kernel: `unwrap`,
//! `expect` and indexing or slicing that can panic are refused by the compiler here
//! (`cargo xtask clippy`), as in `kern`; use `get`, `?` and `ok_or` (`docs/testing.md`,
//! "Hostile input").
#![no_std]
#![no_main]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

extern crate alloc;

mod activation;
pub mod arch;
mod control;
mod debugger;
mod device;
mod exception;
mod extension;
mod family;
mod fastpath;
mod floor;
mod fpu;
mod heap;
mod host;
mod ipc;
mod kernel;
mod klog;
mod kobject;
mod locked;
mod memobj;
mod ool;
mod pageout;
mod pager;
mod quota;
mod syscall;
mod taskmake;
mod thread;
mod trace;
mod vm;
mod vproc;

use crate::arch::serial::kprintln;
use arch::paging::{self, phys_to_virt};
use arch::{boot, cpu, serial};
use core::ops::Range;
use kern::frame::{FrameAllocator, PAGE_SIZE};

/// The kernel heap lives in the first GiB, which the boot page tables already map.
const EARLY_MAP_LIMIT: u64 = 1 << 30;

/// The smallest kernel heap the kernel boots with (`kern::frame::place_heap`).
const HEAP_MIN: u64 = 1 << 20;

/// Entered from the boot assembly on the boot stack, in long mode, interrupts off, with the
/// physical address of the PVH start info.
#[no_mangle]
extern "C" fn kmain(start_info: u64) -> ! {
    let entry_tsc = cpu::rdtsc();
    serial::init();
    let boot = boot::parse(start_info);
    kprintln!(
        "[kernel] Baton {} booting (entered at TSC {entry_tsc})",
        env!("CARGO_PKG_VERSION")
    );
    kprintln!("[kernel] command line: {}", boot.cmdline());

    let usable = boot.usable();
    let phys_top = usable.iter().map(|r| r.end).max().unwrap_or(0);
    let ram: u64 = usable.iter().map(|r| r.end.saturating_sub(r.start)).sum();
    let mut reserved: [Range<u64>; 5] = [
        0..0x10_0000,
        0x10_0000..paging::kernel_phys_end(),
        boot.initrd.clone(),
        boot.start_info & !(PAGE_SIZE - 1)..(boot.start_info & !(PAGE_SIZE - 1)) + PAGE_SIZE,
        0..0,
    ];
    // An eighth of RAM, 4 to 64 MiB; smaller (down to HEAP_MIN) where the kernel's image
    // and the boot modules leave less than that free (a machine of a dozen MiB).
    let wanted = (ram / 8).clamp(4 << 20, 64 << 20);
    let Some((heap_start, heap_size)) =
        kern::frame::place_heap(usable, &reserved, wanted, HEAP_MIN, EARLY_MAP_LIMIT)
    else {
        panic!("no room for a kernel heap of even {HEAP_MIN} bytes below 1 GiB");
    };
    // SAFETY: `heap_start..heap_start + heap_size` is usable RAM below 1 GiB (mapped by the
    // boot tables and later by the direct map), outside the kernel image, the initrd and
    // the boot information, and is reserved from the frame allocator below, so nothing
    // else ever uses it.
    unsafe { heap::init(phys_to_virt(heap_start) as *mut u8, heap_size as usize) };
    reserved[4] = heap_start..heap_start + heap_size;

    memobj::set_ram(usable);
    let mut frames = FrameAllocator::new(usable, &reserved);
    let kernel_root = paging::init(&mut frames, phys_top);
    quota::init(heap_size, frames.free_frames() as u64);
    let (features, fpu) = arch::init_cpu();
    arch::trap::set_floor_roots(kernel_root.0);
    kprintln!(
        "[kernel] memory: {} MiB RAM, {} MiB heap, {} free frames; SMEP {}, SMAP {}, PCID {}",
        ram >> 20,
        heap_size >> 20,
        frames.free_frames(),
        on_off(features.smep),
        on_off(features.smap),
        on_off(features.pcid),
    );
    kprintln!(
        "[kernel] floating point: {:?}, AVX {}, save area {} bytes",
        fpu.mode,
        on_off(fpu.avx),
        fpu.size
    );
    kprintln!(
        "[kernel] TSC {} MHz, timer {} Hz ({} calibration windows)",
        arch::apic::tsc_hz() / 1_000_000,
        arch::apic::TICK_HZ,
        arch::apic::calibration_windows()
    );
    let cpus = start_other_cpus(&boot, kernel_root);
    arch::ioapic::init(boot.rsdp, arch::acpi::bsp_apic_id());

    let initrd: &'static [u8] = if boot.initrd.is_empty() {
        &[]
    } else {
        // SAFETY: the loader placed the initrd at this physical range, which is RAM covered
        // by the direct map and reserved from the frame allocator for the kernel's whole
        // life, and nothing writes to it.
        unsafe {
            core::slice::from_raw_parts(
                phys_to_virt(boot.initrd.start) as *const u8,
                (boot.initrd.end - boot.initrd.start) as usize,
            )
        }
    };
    install_families();
    let config = kern::cmdline::BootConfig::parse(boot.cmdline());
    heap::set_fail_every(config.fail_every);
    vm::replace::init(&frames, config.pageable);
    vm::init_rmap(&frames);
    extern "C" {
        static boot_stack_top: u8;
    }
    let Some(boot_stack) =
        arch::context::KernelStack::new(core::ptr::addr_of!(boot_stack_top) as u64)
    else {
        panic!("the boot stack's top is 0");
    };
    kernel::start(frames, kernel_root, initrd, config, boot_stack, cpus)
}

/// Tells the core what each object family does at its events (`family::Hooks`): the one
/// place that names the families for the core, which imports none of them.
fn install_families() {
    use kern::continuation::Resume;
    use thread::Blocked;
    family::install(family::Hooks {
        thread_leaving: |k, t| {
            control::release_waiters(k, t);
            extension::cthreads::thread_leaving(k, t);
        },
        thread_freed: |k, th| {
            let suspended = usize::from(th.ctx.ctl.suspend > 0)
                + th.below.iter().filter(|s| s.ctl.suspend > 0).count();
            control::suspended_sub(suspended);
            exception::release(k, th.ctx.exc_port, th.exc_reply);
            // The activations it was still running below its top (a thread freed in the
            // middle of a migrating call): each one's exception port goes with it.
            for below in &th.below {
                exception::release(k, below.exc_port, None);
            }
            kobject::destroy(k, th.kport);
            vproc::thread_freed(k, th);
        },
        task_ending: |k, id, kport| {
            // No call migrates into the task any more, and its activations' ports die; so
            // does its task port at once (a thread of it running on another CPU ends only
            // at its next kernel entry, and the task goes with its last thread: who
            // terminated it must already see a dead name).
            activation::retire(k, |a| a.task == id);
            kobject::reap_act_ports(k);
            kobject::destroy(k, kport);
            floor::task_ending(k, id);
            activation::task_ending(k, id);
        },
        home_ending: control::terminate_home,
        task_released: |k, id, exc, kport| {
            floor::unregister(k, id);
            exception::release(k, exc, None);
            kobject::destroy(k, kport);
            // Before the task's rights and mappings go: its DMA buffers stay quarantined.
            memobj::task_released(k, id);
            ipc::release_task_names(k, id);
            activation::retire_orphans(k);
            device::task_released(k, id);
            extension::task_released(k, id);
            taskmake::task_released(k, id);
            vproc::task_released(k, id);
            pageout::task_released(k, id);
        },
        names_released: ipc::release_names,
        unwind_other: activation::unwind_other,
        unwind_current: activation::unwind_current,
        forget_waiter: |k, t, b| match b {
            Blocked::StateWait { target } => control::forget_state_waiter(k, t, target),
            Blocked::PageIn { .. } => pager::forget_waiter(k, t, b),
            _ => ipc::forget_waiter(k, t, b),
        },
        resume: |k, t, point| match point {
            Resume::Receive => ipc::continue_receive(k, t),
            Resume::SendRetry => ipc::continue_send(k, t),
            Resume::ExceptionReply => exception::continue_reply(k, t),
            _ => kernel::leave_to_user(),
        },
        exception: exception::raise,
        floor_interrupted: floor::interrupt,
        before_user: |k| {
            control::stop_if_suspended(k);
            vproc::before_user(k);
        },
        grant_host_priv: kobject::grant_host_priv,
        interrupt: device::on_interrupt,
        space_made: vm::space_made,
        map_program: taskmake::map_program,
        space_freed: |k, id| {
            vm::space_freed(k, id);
            // Pager-backed objects the map held may have ended: their pagers' rights go.
            pager::tidy(k);
        },
        // SPIN's `Translation` events first, while any handler is installed (one load
        // and one branch otherwise); then the default: page replacement's reclaim and
        // the virtual-memory system's own resolution (`pageout::page_fault`), which
        // enters whatever translation the map now allows.
        page_fault: |k, t, addr, error| {
            // A handler's resolution that left nothing for the default to do ends here.
            if vm::translation_watched() && vm::translation_fault(k, t, addr, error) {
                return Ok(());
            }
            pageout::page_fault(k, t, addr, error)
        },
        vp_blocking: vproc::on_block,
        vp_preempting: vproc::on_preempt,
        idle_work: extension::run_async,
    });
    pager::init();
    extension::translation::init();
    extension::reclaim::init();
    pageout::init();
}

// ---- SMP bring-up ------------------------------------------------------------------------

/// Finds the processors in ACPI's MADT and starts every one besides the boot CPU into
/// [`ap_entry`]; prints how many CPUs are online and returns that number.
fn start_other_cpus(boot: &boot::BootInfo, kernel_root: kern::frame::PhysAddr) -> usize {
    let apic_ids = arch::acpi::cpu_apic_ids(boot.rsdp);
    let mut aps = apic_ids.get(1..).unwrap_or(&[]);
    // The trampoline pages must be RAM that nothing still needs.
    let low = arch::smp::LOW_PAGES;
    let low_is_ram = boot
        .usable()
        .iter()
        .any(|r| r.start <= low.start && low.end <= r.end);
    let low_is_free = boot.initrd.end <= low.start || low.end <= boot.initrd.start;
    let low_usable = low_is_ram && low_is_free;
    if !aps.is_empty() && !low_usable {
        kprintln!(
            "[kernel] warning: {:#x}..{:#x} is not free RAM; the other {} CPUs stay off",
            low.start,
            low.end,
            aps.len()
        );
        aps = &[];
    }
    let n = arch::smp::start_aps(kernel_root.0, aps, ap_entry);
    kprintln!("[kernel] {n} CPU{} online", if n == 1 { "" } else { "s" });
    n
}

/// Where each other CPU goes once it is set up (its own GDT/TSS/per-CPU area, the shared
/// IDT, its LAPIC timer ticking) and the kernel has released it (`smp::release_aps`): the
/// scheduler, on the stack it runs on.
extern "C" fn ap_entry(cpu: usize) -> ! {
    let Some(stack) = arch::smp::ap_stack(cpu) else {
        cpu::halt_forever()
    };
    let Some(stack) = arch::context::KernelStack::new(stack.end) else {
        cpu::halt_forever()
    };
    kernel::ap_start(cpu, stack)
}

// ---- end of SMP bring-up -----------------------------------------------------------------

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    serial::force_unlock();
    kprintln!("\n[kernel] PANIC: {info}");
    heap::report_fault_injection();
    cpu::qemu_exit(cpu::EXIT_FAILURE)
}
