//! Extensions (`docs/extensions.md`): import kernel and built-in interfaces, create a
//! domain from a WebAssembly module, resolve and combine domains, install handlers on
//! events, and call the system calls extensions add.

use crate::raw::{syscall1, syscall2, syscall6};
use baton_abi::{decode_result, Error, Sys};

/// A capability for a domain (its id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Domain(pub u64);

/// An installed handler: its event and id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handler {
    pub event: u64,
    pub id: u64,
}

/// A capability for the domain the name server exports under `name`.
pub fn import(name: &str) -> Result<Domain, Error> {
    // SAFETY: the kernel only reads `name`'s bytes.
    let r = unsafe {
        syscall2(
            Sys::SpinImport as u64,
            name.as_ptr() as u64,
            name.len() as u64,
        )
    };
    decode_result(r).map(Domain)
}

/// A domain from the WebAssembly module `wasm` (validated and compiled by the kernel).
pub fn create(wasm: &[u8]) -> Result<Domain, Error> {
    // SAFETY: the kernel only reads `wasm`'s bytes.
    let r = unsafe {
        syscall2(
            Sys::SpinCreate as u64,
            wasm.as_ptr() as u64,
            wasm.len() as u64,
        )
    };
    decode_result(r).map(Domain)
}

/// `Resolve(source, target)`: how many of the target's imports it bound.
pub fn resolve(source: Domain, target: Domain) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall2(Sys::SpinResolve as u64, source.0, target.0) })
}

/// `Combine(a, b)`.
pub fn combine(a: Domain, b: Domain) -> Result<Domain, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall2(Sys::SpinCombine as u64, a.0, b.0) }).map(Domain)
}

/// Installs `domain`'s exported procedure `symbol` on `event` (`baton_abi::spin::EVENT_*`)
/// at `rank` (lower runs first), asking the event's owner for `claim` (for
/// `Trap.SystemCall`, the number); an abort is reported to port `notify` (0 = none).
pub fn install(
    domain: Domain,
    symbol: &str,
    event: u64,
    rank: i32,
    claim: u64,
    notify: u64,
) -> Result<Handler, Error> {
    let ev = event | (u64::from(rank as u32) << 32);
    // SAFETY: the kernel only reads `symbol`'s bytes.
    let r = unsafe {
        syscall6(
            Sys::SpinInstall as u64,
            domain.0,
            symbol.as_ptr() as u64,
            symbol.len() as u64,
            ev,
            claim,
            notify,
        )
    };
    decode_result(r).map(|id| Handler {
        event: event & !baton_abi::spin::INSTALL_ASYNC,
        id,
    })
}

/// [`install`] as an asynchronous handler (`baton_abi::spin::INSTALL_ASYNC`): a raise
/// queues it, a kernel worker runs it later.
pub fn install_async(
    domain: Domain,
    symbol: &str,
    event: u64,
    rank: i32,
    claim: u64,
    notify: u64,
) -> Result<Handler, Error> {
    install(
        domain,
        symbol,
        event | baton_abi::spin::INSTALL_ASYNC,
        rank,
        claim,
        notify,
    )
}

/// `spin_async(which)`: the calling task's asynchronous handlers' raises waiting
/// (`ASYNC_PENDING`), run (`ASYNC_RAN`) or dropped (`ASYNC_DROPPED`).
pub fn async_count(which: u64) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinAsync as u64, which) })
}

/// `spin_tier(which)`: WebAssembly handler invocations since boot the kernel's
/// register-form tier ran (`TIER_FAST`) or `wasmi` ran (`TIER_WASMI`).
pub fn tier_count(which: u64) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinTier as u64, which) })
}

/// `spin_reclaim(which)`: what the calling task's `PhysAddr.Reclaim` handlers did: asked
/// (`RECLAIM_ASKED`), nominations taken (`RECLAIM_TAKEN`) or ignored (`RECLAIM_IGNORED`).
pub fn reclaim_count(which: u64) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinReclaim as u64, which) })
}

/// Removes a handler.
pub fn remove(h: Handler) -> Result<(), Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall2(Sys::SpinRemove as u64, h.event, h.id) }).map(|_| ())
}

/// Lets go of a domain.
pub fn release(d: Domain) -> Result<(), Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinRelease as u64, d.0) }).map(|_| ())
}

/// Raises `Test.Raise(arg)`.
pub fn raise(arg: u64) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinRaise as u64, arg) })
}

/// Calls system call `number` (one an extension added) with four arguments. A number no
/// handler takes is an unknown system call (an exception).
pub fn call(number: u64, a: [u64; 4]) -> u64 {
    // SAFETY: an extension's call writes no user memory of the caller's (handlers see only
    // their own linear memory and the argument words; a built-in one may read a word of
    // the caller's, as the kernel's copies do).
    unsafe { syscall6(number, a[0], a[1], a[2], a[3], 0, 0) }
}

/// SPIN's "integrated" C-Threads from user space: the kernel's built-in thread package
/// `builtin.cthreads` (`docs/extensions.md`, "Threads as an extension"), whose procedures
/// the task installs as system calls on six numbers of the extensions' range.
pub mod cthreads {
    use super::{call, import, install, release, remove, Domain, Handler};
    use baton_abi::spin::EVENT_SYSCALL;
    use baton_abi::{decode_result, Error};
    use core::arch::naked_asm;

    /// The package's procedures, in the order of their numbers from [`Package::first`].
    pub const PROCEDURES: [&str; 6] = ["fork", "join", "exit", "signal", "wait", "handoff"];

    /// The package installed for this task on numbers `first .. first + 6`.
    pub struct Package {
        pub first: u64,
        domain: Option<Domain>,
        handlers: [Option<Handler>; 6],
    }

    /// What [`Package::fork`] leaves at the top of the new thread's stack.
    #[repr(C)]
    struct Start {
        f: fn(u64) -> u64,
        arg: u64,
        exit: u64,
    }

    impl Package {
        /// Imports `builtin.cthreads` and installs its procedures on `first ..
        /// first + 6` (in [`PROCEDURES`] order).
        pub fn install(first: u64) -> Result<Package, Error> {
            let domain = import("builtin.cthreads")?;
            let mut p = Package {
                first,
                domain: Some(domain),
                handlers: [None; 6],
            };
            for (i, name) in PROCEDURES.iter().enumerate() {
                match install(domain, name, EVENT_SYSCALL, 0, first + i as u64, 0) {
                    Ok(h) => {
                        if let Some(slot) = p.handlers.get_mut(i) {
                            *slot = Some(h);
                        }
                    }
                    Err(e) => {
                        p.uninstall();
                        return Err(e);
                    }
                }
            }
            Ok(p)
        }

        /// The package another thread of this task installed on `first ..`: for the
        /// calls only ([`Package::uninstall`] of it does nothing).
        pub fn attach(first: u64) -> Package {
            Package {
                first,
                domain: None,
                handlers: [None; 6],
            }
        }

        /// Removes the handlers and lets go of the domain.
        pub fn uninstall(self) {
            for h in self.handlers.into_iter().flatten() {
                let _ = remove(h);
            }
            if let Some(d) = self.domain {
                let _ = release(d);
            }
        }

        /// `cthread_fork`: a new thread runs `f(arg)` on `stack` and ends with the
        /// package's `exit` of its value. Its handle, for [`Package::join`]. `stack` is
        /// taken for good, as by [`crate::thread::spawn`].
        pub fn fork(
            &self,
            stack: &'static mut [u8],
            f: fn(u64) -> u64,
            arg: u64,
        ) -> Result<u64, Error> {
            let base = stack.as_mut_ptr() as usize;
            let top = base.saturating_add(stack.len()) & !15;
            let size = core::mem::size_of::<Start>();
            if top.saturating_sub(base) < crate::thread::MIN_STACK.max(size) {
                return Err(Error::InvalidArgument);
            }
            let offset = top - size - base;
            // SAFETY: the record lies inside `stack` (checked above), which we own and give
            // up to the new thread; 16-byte aligned, more than the record needs.
            let record = unsafe {
                let r = stack.as_mut_ptr().add(offset).cast::<Start>();
                r.write(Start {
                    f,
                    arg,
                    exit: self.first + 2,
                });
                r
            };
            decode_result(call(
                self.first,
                [
                    trampoline as *const () as u64,
                    record as u64,
                    record as u64,
                    0,
                ],
            ))
        }

        /// `cthread_join`: waits until thread `h` has ended; its value.
        pub fn join(&self, h: u64) -> Result<u64, Error> {
            decode_result(call(self.first + 1, [h, 0, 0, 0]))
        }

        /// `condition_signal` of condition `c` (remembered when nobody waits).
        pub fn signal(&self, c: u64) -> Result<u64, Error> {
            decode_result(call(self.first + 3, [c, 0, 0, 0]))
        }

        /// `condition_wait` on condition `c`.
        pub fn wait(&self, c: u64) -> Result<u64, Error> {
            decode_result(call(self.first + 4, [c, 0, 0, 0]))
        }

        /// Signals `s` and waits on `w`, in one call.
        pub fn handoff(&self, s: u64, w: u64) -> Result<u64, Error> {
            decode_result(call(self.first + 5, [s, w, 0, 0]))
        }
    }

    /// Where a forked thread starts: `rsp` = `rdi` = its start record.
    #[unsafe(naked)]
    extern "C" fn trampoline() -> ! {
        naked_asm!(
            "xor ebp, ebp",
            "and rsp, -16",
            "call {start}",
            "ud2",
            start = sym start,
        )
    }

    /// Runs the record's function and ends the thread with the package's `exit`.
    extern "C" fn start(record: *const Start) -> ! {
        // SAFETY: `trampoline` passes the record `fork` wrote above this thread's initial
        // `rsp`, on a stack only this thread reaches.
        let Start { f, arg, exit } = unsafe { record.read() };
        let v = f(arg);
        call(exit, [v, 0, 0, 0]);
        // `exit` returns only when this thread is not the package's.
        crate::sys::thread_exit()
    }
}

/// SPIN's "layered" C-Threads (Bershad et al., Table 3: "a user-level library layered on
/// a set of kernel extensions that implement Mach's kernel thread interface"): the same
/// C-Threads operations as [`cthreads`], but kept in user space — a forked thread's end
/// and value in a record of the caller's, a condition as a sequence word with a waiter
/// count under the caller's mutex — over the kernel's thread interface, the base calls
/// `thread_create`, `wait` and `wake` (Baton's kernel threads are the kernel's own, not
/// an extension's). Set beside the integrated package, whose join and conditions are the
/// kernel's.
pub mod layered {
    use crate::sync::{wait_until, RawMutex};
    use crate::sys::wake;
    use baton_abi::{Error, FOREVER};
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    /// A forked thread as its forker and joiner see it (`cthread_t`): one thread at a
    /// time, [`Thread::fork`] then [`Thread::join`].
    pub struct Thread {
        /// 1 from [`Thread::fork`] until [`Thread::join`] returns.
        forked: AtomicU32,
        /// 1 once the thread's function returned (the word its joiner waits on).
        done: AtomicU32,
        value: AtomicU64,
        /// The function and its argument, for the forked thread.
        start: UnsafeCell<Option<Start>>,
    }

    /// A forked thread's function and argument.
    type Start = (fn(u64) -> u64, u64);

    // SAFETY: `start` is written only by the `fork` that set `forked` from 0 to 1 (one
    // caller wins), before its `thread_create`, and read only by the thread that call made
    // (the system call orders the write before the new thread's first instruction); no
    // other `fork` writes it until `join` has seen that thread's end and cleared `forked`.
    unsafe impl Sync for Thread {}

    impl Thread {
        pub const fn new() -> Thread {
            Thread {
                forked: AtomicU32::new(0),
                done: AtomicU32::new(0),
                value: AtomicU64::new(0),
                start: UnsafeCell::new(None),
            }
        }

        /// `cthread_fork`: a new kernel thread runs `f(arg)` on `stack` (taken for good,
        /// as by [`crate::thread::spawn`]); its value is kept here for [`Thread::join`].
        /// The new thread's id.
        ///
        /// Errors: [`Error::Busy`] while this record's last thread is not joined; those of
        /// [`crate::thread::spawn`].
        pub fn fork(
            &'static self,
            stack: &'static mut [u8],
            f: fn(u64) -> u64,
            arg: u64,
        ) -> Result<u64, Error> {
            if self
                .forked
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return Err(Error::Busy);
            }
            self.done.store(0, Ordering::Relaxed);
            // SAFETY: this call won `forked` (see the `Sync` impl): nothing else reads or
            // writes `start` until the thread made below runs.
            unsafe { *self.start.get() = Some((f, arg)) };
            crate::thread::spawn(stack, body, self as *const Thread as u64).inspect_err(|_| {
                self.forked.store(0, Ordering::Release);
            })
        }

        /// `cthread_join`: waits (in the kernel's `wait`, when the thread has not ended)
        /// until the forked thread's function returned; its value.
        ///
        /// Errors: [`Error::InvalidArgument`] when no thread was forked on this record.
        pub fn join(&self) -> Result<u64, Error> {
            if self.forked.load(Ordering::Acquire) == 0 {
                return Err(Error::InvalidArgument);
            }
            wait_until(&self.done, |v| v != 0, FOREVER)?;
            let v = self.value.load(Ordering::Acquire);
            self.forked.store(0, Ordering::Release);
            Ok(v)
        }
    }

    impl Default for Thread {
        fn default() -> Thread {
            Thread::new()
        }
    }

    /// A forked thread's body: the record's function, its value, the joiner's wake-up.
    fn body(record: u64) {
        // SAFETY: `fork` passes the address of a `&'static Thread`.
        let t = unsafe { &*(record as *const Thread) };
        // SAFETY: this thread is the one reader of `start` (see the `Sync` impl).
        if let Some((f, arg)) = unsafe { *t.start.get() } {
            t.value.store(f(arg), Ordering::Release);
        }
        t.done.store(1, Ordering::Release);
        let _ = wake(&t.done, 1);
    }

    /// A C-Threads condition variable, used with a [`RawMutex`] the caller holds.
    pub struct Condition {
        /// Bumped by every signal: the word waiters wait on.
        seq: AtomicU32,
        /// Threads in [`Condition::wait`] (a signal with none makes no system call).
        waiters: AtomicU32,
    }

    impl Condition {
        pub const fn new() -> Condition {
            Condition {
                seq: AtomicU32::new(0),
                waiters: AtomicU32::new(0),
            }
        }

        /// `condition_wait`: releases `m` (which the caller holds), waits for a signal,
        /// takes `m` again. As C-Threads', it may return without a signal (a spurious
        /// wake): callers test their predicate in a loop.
        pub fn wait(&self, m: &RawMutex) -> Result<(), Error> {
            let seen = self.seq.load(Ordering::Acquire);
            self.waiters.fetch_add(1, Ordering::Relaxed);
            m.unlock();
            let r = wait_until(&self.seq, |v| v != seen, FOREVER);
            self.waiters.fetch_sub(1, Ordering::Relaxed);
            m.lock();
            r.map(|_| ())
        }

        /// `condition_signal`, with the condition's mutex held: wakes one waiter, if any.
        pub fn signal(&self) {
            self.seq.fetch_add(1, Ordering::Release);
            if self.waiters.load(Ordering::Acquire) != 0 {
                let _ = wake(&self.seq, 1);
            }
        }
    }

    impl Default for Condition {
        fn default() -> Condition {
            Condition::new()
        }
    }
}
