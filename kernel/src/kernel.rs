//! Tasks, the round-robin scheduler, exceptions of user code and the system calls.
//!
//! One big lock ([`KERNEL`]) guards all kernel state; the kernel runs with interrupts off
//! and never sleeps while holding it, so on one CPU it is never contended. Each task has
//! one thread for now (its saved [`TrapFrame`]); threads become their own objects with the
//! continuation scheduler.
//!
//! Every entry (`on_syscall`, `on_trap`) works on the frame at the top of the trap stack:
//! it either edits it in place (results, or a different thread's saved frame when it
//! switches) and returns, or, when nothing is runnable, abandons it and goes to [`idle`].
//!
//! # Invariants
//! - `current` is `Some` exactly while a task's frame is live on the trap stack or in user
//!   mode; its saved `frame` field is stale until it is switched out.
//! - A task id is in the run queue only if the task exists and is not `current`.
//! - The loaded CR3 is `loaded_root`, which is the kernel root or the root of an existing
//!   task: a task's space is unloaded before it is destroyed.

use crate::arch::cpu;
use crate::arch::paging::KernelMem;
use crate::arch::trap::{self, TrapFrame, SPURIOUS_VECTOR, TIMER_VECTOR};
use crate::arch::{apic, serial};
use crate::kprintln;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use baton_abi::{Error, ModuleInfo, Sys, DEBUG_WRITE_MAX, MODULE_NAME_MAX};
use core::fmt::Write as _;
use kern::cmdline::BootConfig;
use kern::frame::{FrameAllocator, PhysAddr};
use kern::pmap::AddressSpace;
use kern::sched::RunQueue;
use kern::{initrd, loader, usercopy};
use spin::Mutex;

/// Task identifier; never reused.
pub type TaskId = u64;

/// A user task: an address space with one thread.
struct Task {
    name: String,
    space: AddressSpace,
    pcid: u16,
    /// The thread's user registers while it is not running.
    frame: TrapFrame,
}

/// A boot module: a named ELF image inside the initrd.
struct Module {
    name: String,
    data: &'static [u8],
}

struct Kernel {
    frames: FrameAllocator,
    kernel_root: PhysAddr,
    loaded_root: PhysAddr,
    /// For each PCID, the task whose entries the TLB may hold under it.
    pcid_owner: Vec<TaskId>,
    tasks: BTreeMap<TaskId, Task>,
    runq: RunQueue<TaskId>,
    current: Option<TaskId>,
    next_id: TaskId,
    modules: Vec<Module>,
    shutdown_when_idle: bool,
    ticks: u64,
    /// The task whose console line is still open (its last write did not end in `\n`).
    open_line: Option<TaskId>,
}

static KERNEL: Mutex<Option<Kernel>> = Mutex::new(None);

const PCIDS: usize = 4096;

/// Sets up the kernel state, starts the boot tasks and runs them.
pub fn start(
    frames: FrameAllocator,
    kernel_root: PhysAddr,
    initrd: &'static [u8],
    config: BootConfig,
) -> ! {
    let modules = match initrd::parse(initrd) {
        Ok(list) => list
            .into_iter()
            .map(|m| Module {
                name: String::from(m.name),
                data: m.data,
            })
            .collect(),
        Err(e) => {
            kprintln!("[kernel] initrd unreadable: {e:?}");
            Vec::new()
        }
    };
    let mut k = Kernel {
        frames,
        kernel_root,
        loaded_root: kernel_root,
        pcid_owner: alloc::vec![0; PCIDS],
        tasks: BTreeMap::new(),
        runq: RunQueue::new(),
        current: None,
        next_id: 1,
        modules,
        shutdown_when_idle: config.shutdown_when_idle,
        ticks: 0,
        open_line: None,
    };
    kprintln!("[kernel] {} boot modules", k.modules.len());
    for word in &config.unknown {
        kprintln!("[kernel] ignoring unknown command-line word `{word}`");
    }
    for name in &config.init {
        match k.spawn(name) {
            Ok(id) => kprintln!("[kernel] task {id} ({name}) started"),
            Err(e) => kprintln!("[kernel] cannot start {name}: {}", e.name()),
        }
    }
    let tsc = cpu::rdtsc();
    kprintln!(
        "[kernel] boot done after {} us ({} TSC ticks since reset)",
        apic::now_ns() / 1000,
        tsc
    );
    *KERNEL.lock() = Some(k);
    if config.crash {
        kprintln!("[kernel] crashing on purpose (crash=kernel-page-fault)");
        let v: u64;
        // SAFETY: deliberately loads from an unmapped address (nothing is mapped in the user
        // half of the kernel's tables); the page-fault handler reports it and stops the
        // machine, so no Rust value is ever formed from the access.
        unsafe {
            core::arch::asm!("mov {}, [{}]", out(reg) v, in(reg) 0xdead_0000u64, options(nostack, readonly));
        }
        kprintln!("[kernel] unexpectedly read {v:#x}");
    }
    idle()
}

/// Runs the next ready task, or waits for one; powers off when none is left and the
/// command line asked for it.
pub fn idle() -> ! {
    loop {
        {
            let mut guard = KERNEL.lock();
            let Some(k) = guard.as_mut() else {
                panic!("idle before the kernel state exists")
            };
            if let Some(next) = k.runq.pop() {
                let frame = k.activate(next);
                drop(guard);
                trap::resume_user(&frame);
            }
            if k.tasks.is_empty() && k.shutdown_when_idle {
                k.close_line();
                kprintln!("[kernel] all tasks finished; shutting down");
                cpu::qemu_exit(cpu::EXIT_SUCCESS);
            }
        }
        crate::arch::wait_for_interrupt();
    }
}

/// Entry for every interrupt and exception.
pub fn on_trap(frame: &mut TrapFrame) {
    if !frame.from_user() {
        kernel_mode_trap(frame);
        return;
    }
    let mut guard = KERNEL.lock();
    let Some(k) = guard.as_mut() else {
        panic!("user trap before the kernel state exists")
    };
    let runs = match frame.vector {
        TIMER_VECTOR => {
            apic::eoi();
            k.ticks += 1;
            if k.runq.is_empty() {
                true
            } else {
                k.switch(frame, true)
            }
        }
        v if v < 32 => {
            k.report_exception(frame);
            k.kill_current();
            k.switch(frame, false)
        }
        // Spurious LAPIC or PIC interrupts: nothing to do.
        _ => true,
    };
    if !runs {
        drop(guard);
        idle();
    }
}

/// Interrupts and exceptions taken in kernel mode: the timer while idle is expected;
/// anything else is a kernel bug and stops the machine with a report.
fn kernel_mode_trap(frame: &mut TrapFrame) {
    match frame.vector {
        TIMER_VECTOR => {
            apic::eoi();
            if let Some(k) = KERNEL.lock().as_mut() {
                k.ticks += 1;
            }
        }
        SPURIOUS_VECTOR => {}
        v if (trap::PIC_BASE..trap::PIC_BASE + 16).contains(&v) => {}
        v => {
            serial::force_unlock();
            kprintln!(
                "\n[kernel] KERNEL EXCEPTION: {} (vector {v}) in kernel mode",
                trap::exception_name(v)
            );
            if v == 14 {
                let (presence, access, mode) = trap::page_fault_detail(frame.error);
                kprintln!(
                    "  address {:#x}: {presence}, {access}, {mode}",
                    cpu::read_cr2()
                );
            }
            // SAFETY-free peek: try_lock so a fault inside a critical section still reports.
            if let Some(guard) = KERNEL.try_lock() {
                if let Some(k) = guard.as_ref() {
                    if let Some(id) = k.current {
                        let name = k.tasks.get(&id).map(|t| t.name.as_str()).unwrap_or("?");
                        kprintln!("  while serving task {id} ({name})");
                    }
                }
            }
            trap::dump_frame(frame);
            cpu::qemu_exit(cpu::EXIT_FAILURE);
        }
    }
}

/// Entry for the `syscall` instruction.
pub fn on_syscall(frame: &mut TrapFrame) {
    let mut guard = KERNEL.lock();
    let Some(k) = guard.as_mut() else {
        panic!("system call before the kernel state exists")
    };
    let (number, args) = frame.syscall_args();
    let runs = match Sys::from_raw(number) {
        None => {
            k.report(format_args!(
                "killed: bad system call {number} (no handler)"
            ));
            trap::dump_frame(frame);
            k.kill_current();
            k.switch(frame, false)
        }
        Some(Sys::Exit) => {
            let code = args[0] as i32;
            k.report(format_args!("exited with code {code}"));
            k.kill_current();
            k.switch(frame, false)
        }
        Some(Sys::Yield) => {
            frame.rax = 0;
            k.switch(frame, true)
        }
        Some(call) => {
            let result = k.syscall(call, args);
            frame.rax = match result {
                Ok(v) => v,
                Err(e) => e.to_raw(),
            };
            true
        }
    };
    if !runs {
        drop(guard);
        idle();
    }
}

impl Kernel {
    fn mem(&mut self) -> KernelMem<'_> {
        KernelMem {
            frames: &mut self.frames,
        }
    }

    /// Calls that return to the caller: decode, check, act.
    fn syscall(&mut self, call: Sys, args: [u64; 6]) -> Result<u64, Error> {
        let Some(id) = self.current else {
            return Err(Error::InvalidArgument);
        };
        let result = match call {
            Sys::DebugWrite => self.sys_debug_write(id, args[0], args[1]),
            Sys::Clock => Ok(apic::now_ns()),
            Sys::Spawn => self.sys_spawn(id, args[0], args[1]),
            Sys::ModuleInfo => self.sys_module_info(id, args[0], args[1]),
            Sys::Yield | Sys::Exit => Err(Error::InvalidArgument),
        };
        if let Err(Error::BadAddress) = result {
            self.report(format_args!(
                "{call:?}: bad user address in ({:#x}, {:#x}): returned BadAddress",
                args[0], args[1]
            ));
        }
        result
    }

    fn sys_debug_write(&mut self, id: TaskId, ptr: u64, len: u64) -> Result<u64, Error> {
        if len > DEBUG_WRITE_MAX {
            return Err(Error::TooLarge);
        }
        let mut buf = [0u8; DEBUG_WRITE_MAX as usize];
        let out = buf.get_mut(..len as usize).ok_or(Error::TooLarge)?;
        self.copy_in(id, ptr, out)?;
        self.console_write(id, out);
        Ok(len)
    }

    fn sys_spawn(&mut self, id: TaskId, ptr: u64, len: u64) -> Result<u64, Error> {
        if len > MODULE_NAME_MAX as u64 {
            return Err(Error::TooLarge);
        }
        let mut buf = [0u8; MODULE_NAME_MAX];
        let out = buf.get_mut(..len as usize).ok_or(Error::TooLarge)?;
        self.copy_in(id, ptr, out)?;
        let name = core::str::from_utf8(out).map_err(|_| Error::InvalidArgument)?;
        let name = String::from(name);
        let child = self.spawn(&name)?;
        self.close_line();
        kprintln!("[kernel] task {child} ({name}) started by task {id}");
        Ok(child)
    }

    fn sys_module_info(&mut self, id: TaskId, index: u64, ptr: u64) -> Result<u64, Error> {
        let module = usize::try_from(index)
            .ok()
            .and_then(|i| self.modules.get(i))
            .ok_or(Error::NotFound)?;
        let name = module.name.as_bytes();
        let name_len = name.len().min(MODULE_NAME_MAX);
        // The wire form of `ModuleInfo` (repr(C): size, name_len, name).
        let mut bytes = [0u8; core::mem::size_of::<ModuleInfo>()];
        let (size_b, rest) = bytes.split_at_mut(8);
        let (len_b, name_b) = rest.split_at_mut(8);
        size_b.copy_from_slice(&(module.data.len() as u64).to_le_bytes());
        len_b.copy_from_slice(&(name_len as u64).to_le_bytes());
        for (dst, src) in name_b.iter_mut().zip(name.iter().take(name_len)) {
            *dst = *src;
        }
        let task = self.tasks.get(&id).ok_or(Error::InvalidArgument)?;
        let mut mem = KernelMem {
            frames: &mut self.frames,
        };
        usercopy::copy_to_user(&task.space, &mut mem, ptr, &bytes)?;
        Ok(0)
    }

    fn copy_in(&mut self, id: TaskId, ptr: u64, out: &mut [u8]) -> Result<(), Error> {
        let task = self.tasks.get(&id).ok_or(Error::InvalidArgument)?;
        let mem = KernelMem {
            frames: &mut self.frames,
        };
        usercopy::copy_from_user(&task.space, &mem, ptr, out)
    }

    /// Creates a task running boot module `name` and makes it ready.
    fn spawn(&mut self, name: &str) -> Result<TaskId, Error> {
        let data = self
            .modules
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.data)
            .ok_or(Error::NotFound)?;
        let kernel_root = self.kernel_root;
        let mut mem = self.mem();
        let mut space =
            AddressSpace::new(&mut mem, Some(kernel_root)).map_err(|_| Error::NoMemory)?;
        let loaded = loader::load_elf(&mut space, &mut mem, data)
            .and_then(|entry| Ok((entry, loader::map_user_stack(&mut space, &mut mem)?)));
        let (entry, rsp) = match loaded {
            Ok(v) => v,
            Err(e) => {
                space.destroy(&mut mem);
                return Err(e.into());
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        let task = Task {
            name: String::from(name),
            space,
            pcid: (id % (PCIDS as u64 - 1) + 1) as u16,
            frame: TrapFrame::new_user(entry, rsp, id),
        };
        self.tasks.insert(id, task);
        self.runq.push(id);
        Ok(id)
    }

    /// Makes `id` the current task, loading its address space, and returns its frame.
    fn activate(&mut self, id: TaskId) -> TrapFrame {
        self.current = Some(id);
        let Some(task) = self.tasks.get(&id) else {
            panic!("run queue named a task that does not exist");
        };
        let root = task.space.root();
        if root != self.loaded_root {
            let slot = usize::from(task.pcid);
            let keep = self.pcid_owner.get(slot) == Some(&id);
            // SAFETY: the root belongs to a live task whose kernel half is the kernel's.
            unsafe { cpu::switch_space(root.0, task.pcid, keep) };
            if let Some(owner) = self.pcid_owner.get_mut(slot) {
                *owner = id;
            }
            self.loaded_root = root;
        }
        task.frame
    }

    /// Stops running the current task (saving `frame` into it and queueing it again when
    /// `requeue`) and puts the next ready task's frame in `frame`. Returns `false` when
    /// nothing is ready (the caller goes idle).
    fn switch(&mut self, frame: &mut TrapFrame, requeue: bool) -> bool {
        if let Some(cur) = self.current {
            if requeue {
                if self.runq.is_empty() {
                    return true;
                }
                if let Some(task) = self.tasks.get_mut(&cur) {
                    task.frame = *frame;
                }
                self.runq.push(cur);
            }
        }
        self.current = None;
        match self.runq.pop() {
            Some(next) => {
                *frame = self.activate(next);
                true
            }
            None => false,
        }
    }

    /// Destroys the current task and frees its memory.
    fn kill_current(&mut self) {
        let Some(id) = self.current.take() else {
            return;
        };
        self.runq.remove(id);
        if self.open_line == Some(id) {
            self.close_line();
        }
        if let Some(task) = self.tasks.remove(&id) {
            if self.loaded_root == task.space.root() {
                // SAFETY: the kernel root maps the kernel; the dying space is not used again.
                unsafe { cpu::write_cr3(self.kernel_root.0) };
                self.loaded_root = self.kernel_root;
            }
            let mut mem = self.mem();
            task.space.destroy(&mut mem);
        }
    }

    fn report_exception(&mut self, frame: &TrapFrame) {
        let name = trap::exception_name(frame.vector);
        if frame.vector == 14 {
            let (presence, access, mode) = trap::page_fault_detail(frame.error);
            let addr = cpu::read_cr2();
            self.report(format_args!(
                "killed: {name} at address {addr:#x} ({presence}, {access}, {mode})"
            ));
        } else {
            self.report(format_args!("killed: {name} (vector {})", frame.vector));
        }
        trap::dump_frame(frame);
    }

    /// Prints `[kernel] task <id> (<name>) <what>` for the current task.
    fn report(&mut self, what: core::fmt::Arguments<'_>) {
        self.close_line();
        let id = self.current.unwrap_or(0);
        let name = self.tasks.get(&id).map(|t| t.name.as_str()).unwrap_or("?");
        kprintln!("[kernel] task {id} ({name}) {what}");
    }

    /// Ends a user line left open, so kernel lines start at the left margin.
    fn close_line(&mut self) {
        if self.open_line.take().is_some() {
            serial::CONSOLE.lock().write_bytes(b"\n");
        }
    }

    /// Writes user output, each line prefixed with `<task name>#<task id>| `.
    fn console_write(&mut self, id: TaskId, bytes: &[u8]) {
        if self.open_line.is_some_and(|o| o != id) {
            self.close_line();
        }
        let name = self.tasks.get(&id).map(|t| t.name.as_str()).unwrap_or("?");
        let mut out = serial::CONSOLE.lock();
        let mut open = self.open_line == Some(id);
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            if !open {
                let _ = write!(out, "{name}#{id}| ");
            }
            out.write_bytes(piece);
            open = piece.last() != Some(&b'\n');
        }
        self.open_line = if open { Some(id) } else { None };
    }
}
