//! The runtime's side of the kernel's virtual-processor upcalls (`docs/sting.md`, "The
//! kernel half"): each virtual processor registers with the kernel when it starts, takes
//! Block and Unblock upcalls on a stack of its own, and parks with `vp_wait` when idle.
//!
//! - **Block**: the thread running on the virtual processor blocked in the kernel; the
//!   kernel goes on with a spare kernel thread, which enters [`upcall_entry`]. The blocked
//!   thread's TCB stays as it is (its thread is still "running", in the kernel), and the
//!   upcall resumes the scheduler loop's context, which runs the next thread. A wait for
//!   the heap lock is the runtime's own: the processor waits with the thread instead.
//! - **Unblock**: the call completed: the thread's registers (the result in `rax`) come
//!   back, and a frame laid on its stack lets the scheduler resume it like any other TCB,
//!   before the queued threads. An upcall delivered while the processor waited in
//!   `vp_wait` then resumes that wait (it returns 0); events queued while the processor was
//!   busy are taken at its next scheduling decision (`kpending`, the mailbox).
//!
//! On the host there is no kernel below: everything here does nothing.

use crate::rt::Vp;
use core::sync::atomic::AtomicU32;

#[cfg(baton)]
mod imp {
    use super::*;
    use crate::arch::{self, UserRegs};
    use crate::rt::runtime;
    use baton_abi::vproc::{VpConfig, VpEvent, VP_BLOCK, VP_CHECKPOINT, VP_UNBLOCK};
    use baton_rt::vproc as sys;
    use core::sync::atomic::Ordering::Relaxed;

    const _: () = assert!(baton_abi::Sys::VpResume as u32 == arch::VP_RESUME);

    /// Upcall stacks whose processors the kernel has destroyed (their bases), for reuse.
    static STACKS: crate::spin::SpinLock<alloc::vec::Vec<usize>> =
        crate::spin::SpinLock::new(alloc::vec::Vec::new());

    /// Bytes of each virtual processor's upcall stack.
    const UPCALL_STACK: usize = 16 * 1024;

    /// Makes the calling kernel thread the carrier of `vp` in the kernel, with its spares.
    /// Without the kernel's support (an error) the processor runs as before: a blocking
    /// call then blocks it.
    pub(crate) fn register(vp: &Vp) {
        // Never freed, like a virtual processor's own stack (baton-rt's rule for kernel
        // threads' stacks): a late upcall must still find it. Once its processor is
        // destroyed in the kernel no upcall comes, and a later runtime's processor reuses
        // it (so that runs one after another do not grow the heap).
        let base = STACKS.lock().pop().unwrap_or_else(|| {
            alloc::boxed::Box::leak(alloc::vec![0u8; UPCALL_STACK].into_boxed_slice()).as_ptr()
                as usize
        });
        let lo = (base as u64 + 15) & !15;
        let hi = (base as u64 + UPCALL_STACK as u64) & !15;
        let (quiet_lo, quiet_hi) = match (
            vp.sched_stack.0.load(Relaxed),
            vp.sched_stack.1.load(Relaxed),
        ) {
            (0, 0) => {
                // The first processor's scheduler runs on the program's initial stack.
                use baton_abi::layout::{USER_STACK_SIZE, USER_STACK_TOP};
                (USER_STACK_TOP - USER_STACK_SIZE, USER_STACK_TOP)
            }
            (l, h) => (l as u64, h as u64),
        };
        let cfg = VpConfig {
            entry: upcall_entry as *const () as u64,
            upcall_lo: lo,
            upcall_hi: hi,
            quiet_lo,
            quiet_hi,
            mailbox: vp.kpending.as_ptr() as u64,
            cookie: vp.id as u64,
        };
        if let Ok(id) = sys::vp_create(&cfg) {
            vp.kvp.store(id, Relaxed);
            vp.upcall_stack.store(base, Relaxed);
            let _ = sys::vp_spares(id, vp.spares);
            if vp.quantum_ns != 0 {
                let _ = sys::vp_preempt(id, vp.quantum_ns);
            }
        }
    }

    /// Ends `vp`'s kernel side (its scheduler loop has returned).
    pub(crate) fn unregister(vp: &Vp) {
        let id = vp.kvp.swap(0, Relaxed);
        if id != 0 && sys::vp_destroy(id).is_ok() {
            let mut stacks = STACKS.lock();
            if stacks.try_reserve(1).is_ok() {
                stacks.push(vp.upcall_stack.swap(0, Relaxed));
            }
        }
    }

    /// Takes the Unblock events the kernel queued for `vp` (its carrier calls).
    pub(crate) fn take_events(vp: &Vp) {
        let mut buf = [VpEvent::default(); 4];
        loop {
            let n = sys::vp_take(&mut buf).unwrap_or(0);
            for ev in buf.iter().take(n) {
                // SAFETY: we are `vp`'s carrier; the kernel gave these registers (and
                // state) back for threads that blocked on it.
                unsafe { vp.kernel_unblocked(&UserRegs::from(&ev.regs), fp_of(ev)) };
            }
            if n < buf.len() {
                return;
            }
        }
    }

    /// Asks the kernel to stop `vp`'s running thread now with a Checkpoint upcall.
    pub(crate) fn interrupt(vp: &Vp) {
        let id = vp.kvp.load(Relaxed);
        if id != 0 {
            let _ = sys::vp_interrupt(id);
        }
    }

    /// Parks `vp`'s carrier while `word` holds `expected`: an Unblock comes as an upcall
    /// meanwhile, after which this returns.
    pub(crate) fn park(vp: &Vp, word: &AtomicU32, expected: u32, timeout_ns: u64) {
        if vp.kvp.load(Relaxed) == 0 {
            crate::platform::park(word, expected, timeout_ns);
        } else {
            let _ = sys::vp_wait(word, expected, timeout_ns);
        }
    }

    /// Where the kernel enters the runtime (on the virtual processor's upcall stack, with
    /// the event at `ev`, its kind, and the processor's index as the cookie). A Checkpoint
    /// stopped a thread at any instruction, so its floating-point and vector registers
    /// are live: they are saved (`fxsave`) before any compiled code can change them, and
    /// [`upcall_main`] gets the area; other upcalls come at a system call, where those
    /// registers are the caller's to save, and get none.
    #[unsafe(naked)]
    extern "C" fn upcall_entry(ev: *const VpEvent, kind: u64, cookie: u64) -> ! {
        core::arch::naked_asm!(
            "xor ecx, ecx",
            "cmp rsi, {checkpoint}",
            "jne {main}",
            // `rsp` is 8 below the 16-aligned event: 520 more leaves it 16-aligned.
            "sub rsp, 520",
            "fxsave64 [rsp]",
            "mov rcx, rsp",
            "call {main}",
            "ud2",
            checkpoint = const VP_CHECKPOINT,
            main = sym upcall_main,
        )
    }

    /// The upcall, in Rust: `fp` is the stopped thread's `fxsave` area for a Checkpoint.
    extern "C" fn upcall_main(ev: *const VpEvent, _kind: u64, cookie: u64, fp: *const u8) -> ! {
        // SAFETY: the kernel wrote the event at the top of the upcall stack, which this
        // upcall alone uses until it leaves.
        let ev = unsafe { &*ev };
        let Some(vp) = runtime().vps.get(cookie as usize) else {
            panic!("sting: an upcall for an unknown virtual processor");
        };
        match ev.kind {
            VP_BLOCK => {
                if waits_for_the_heap(&ev.regs) {
                    wait_with(vp, ev.token)
                }
                vp.kernel_blocked();
                resume_scheduler(vp)
            }
            VP_UNBLOCK => {
                // SAFETY: we are the carrier now; the registers (and state) are those of
                // a thread of this processor that blocked in the kernel.
                unsafe { vp.kernel_unblocked(&UserRegs::from(&ev.regs), fp_of(ev)) };
                if ev.interrupted == 0 {
                    resume_scheduler(vp)
                }
                let stopped = UserRegs::from(&ev.stopped);
                // SAFETY: `stopped` is the carrier's `vp_wait`, stopped by this upcall.
                unsafe { arch::resume_regs(&stopped) }
            }
            VP_CHECKPOINT => {
                let regs = UserRegs::from(&ev.regs);
                // SAFETY: we are the carrier, in the upcall; the registers are those of
                // the thread the kernel stopped on this processor.
                if unsafe { vp.kernel_preempted(&regs, fp) } {
                    resume_scheduler(vp)
                }
                // Not preemptible now: it goes on at once, its state as it was.
                // SAFETY: the stopped context, which nothing else resumes, and its state.
                let raw = unsafe { arch::resume_kernel(&regs, fp) };
                panic!("sting: vp_resume failed: {raw:#x}")
            }
            _ => panic!("sting: an upcall of unknown kind {}", ev.kind),
        }
    }

    /// The floating-point state an Unblock gives back, for a thread that blocked at a fault.
    fn fp_of(ev: &VpEvent) -> Option<*const u8> {
        (ev.fault != 0).then_some(ev.fp.as_ptr())
    }

    /// Whether a blocked thread's call (its registers at the call) is a `wait` for the heap
    /// lock: the runtime's own wait, not the program's.
    fn waits_for_the_heap(r: &baton_abi::exception::UserRegs) -> bool {
        let (lo, hi) = baton_rt::heap::lock_range();
        r.rax == baton_abi::Sys::Wait as u64 && (lo..hi).contains(&r.rdi)
    }

    /// The thread of `vp` that blocked (`token`) waits for the heap lock: the processor
    /// waits with it, as it would without upcalls, rather than running another thread.
    /// The lock's holder may be a thread that only this processor runs, or this
    /// processor's own scheduler (which, allocating a TCB, waits for the lock without an
    /// upcall) and the unlock wakes the detached thread, whose Unblock the processor would
    /// then never take; or the thread may have been between queueing itself and
    /// switching away, and the scheduler would wait for it to finish the switch. So the
    /// processor takes its events until the thread's own comes, lists the others as
    /// usual, and resumes the thread at once.
    fn wait_with(vp: &Vp, token: u64) -> ! {
        let mut buf = [VpEvent::default(); 4];
        loop {
            let n = sys::vp_take(&mut buf).unwrap_or(0);
            let mut mine = None;
            for ev in buf.iter().take(n) {
                if ev.token == token {
                    mine = Some(UserRegs::from(&ev.regs));
                } else {
                    // SAFETY: we are `vp`'s carrier; the kernel gave these registers (and
                    // state) back for a thread that blocked on it.
                    unsafe { vp.kernel_unblocked(&UserRegs::from(&ev.regs), fp_of(ev)) };
                }
            }
            if let Some(regs) = mine {
                // SAFETY: the registers of the thread that blocked, its call completed;
                // nothing ran on its stack meanwhile (the processor waited here).
                unsafe { arch::resume_regs(&regs) }
            }
            if n == 0 {
                baton_rt::yield_now();
            }
        }
    }

    /// Resumes a thread a Checkpoint stopped, from the copy of its registers
    /// `arch::prepare_preempted` laid on its stack: through the kernel (`vp_resume`, which
    /// raises `Strand.Resume`), or, on a virtual processor the kernel does not know, in
    /// user mode alone.
    pub(crate) extern "C" fn resume_preempted(regs: *const UserRegs, fp: *const u8) -> ! {
        // SAFETY: the copies of a stopped context's registers and state, laid by
        // `prepare_preempted`; nothing else resumes that context.
        let raw = unsafe { arch::resume_kernel(regs, fp) };
        if baton_abi::decode_result(raw) != Err(baton_abi::Error::InvalidArgument) {
            panic!("sting: vp_resume failed: {raw:#x}");
        }
        // SAFETY: as above.
        unsafe { arch::resume_full(regs, fp) }
    }

    /// Resumes `vp`'s scheduler loop, saved while a thread ran; the upcall's stack is
    /// abandoned.
    fn resume_scheduler(vp: &Vp) -> ! {
        let mut abandoned = 0usize;
        vp.off();
        // SAFETY: we are the carrier; a thread was running (the one that blocked), so the
        // scheduler loop's context is saved and nothing else resumes it.
        unsafe { arch::switch(&mut abandoned, vp.sched_sp()) };
        unreachable!("an upcall's context was resumed")
    }
}

#[cfg(not(baton))]
mod imp {
    use super::*;

    pub(crate) fn register(_vp: &Vp) {}
    pub(crate) fn unregister(_vp: &Vp) {}
    /// Resumes a thread a Checkpoint stopped (on the host none is: in user mode alone).
    pub(crate) extern "C" fn resume_preempted(
        regs: *const crate::arch::UserRegs,
        fp: *const u8,
    ) -> ! {
        // SAFETY: copies laid by `prepare_preempted` (never on the host).
        unsafe { crate::arch::resume_full(regs, fp) }
    }
    pub(crate) fn take_events(_vp: &Vp) {}
    pub(crate) fn interrupt(_vp: &Vp) {}
    pub(crate) fn park(_vp: &Vp, word: &AtomicU32, expected: u32, timeout_ns: u64) {
        crate::platform::park(word, expected, timeout_ns);
    }
}

pub(crate) use imp::*;
