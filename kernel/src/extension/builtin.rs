//! Built-in extensions: Rust procedures compiled into the kernel, installed by tasks like
//! any extension (imported through the name server, installed on an event whose owner
//! allows it), trusted to terminate as SPIN trusted its compiler.
//!
//! The procedures themselves are in [`ext`], which forbids `unsafe` and sees only
//! [`Iface`]: the same kernel interfaces a WebAssembly extension may import
//! (`baton.console`, `baton.task`), nothing of the kernel's state.
//!
//! Exported under the name server's `builtin.null_syscall` (any task may import it):
//!
//! | symbol | event | what |
//! |---|---|---|
//! | `null` | `Trap.SystemCall` | returns 0: the null system call an extension adds |
//! | `sum` | `Trap.SystemCall` | returns `a0 + a1 + a2` (wrapping) |
//! | `task` | `Trap.SystemCall` | returns the calling task's id |
//! | `hello` | `Trap.SystemCall` | writes a line with `baton.console.write`, returns the task's id |
//! | `one` | `Test.Raise` | returns 1 |
//! | `closure` | `Test.Raise` | returns the closure word it was installed with |
//!
//! And two domains for SPIN's protected in-kernel call (its Table 2, line 1), a call from
//! one extension domain into another that a `Resolve` linked:
//!
//! | domain | symbol | what |
//! |---|---|---|
//! | `builtin.callee` | `null` | `() -> i64`, returns 0: the null procedure |
//! | `builtin.caller` | `call_n` | a `Test.Raise` handler that calls the procedure its import `builtin.callee.null` was bound to `arg` times; returns `arg` |
//! | | `local_n` | the same loop calling a procedure of its own domain directly: the direct Rust call `call_n` is set beside |
//!
//! Both make at most 1,000 calls a raise (`ext::CALLS_MAX`): the count comes from user space.
//!
//! `builtin.caller` imports `builtin.callee.null`; the kernel resolves that import when it
//! makes the two domains, as SPIN's kernel linked an extension when it was loaded. A task
//! that installs `call_n` gets, as the handler's closure, the procedure the import is bound
//! to (`NotFound` while it is unbound), and each call goes through it: an indirect call of
//! the linked procedure, which is all a call between two domains of safe code costs.

use super::{Call, SYSCALL_SIG, TEST_SIG};
use crate::kernel::Kernel;
use alloc::vec::Vec;
use baton_abi::Error;
use kern::spin::domain::DomainId;
use kern::spin::domain::{Domains, Holder, Image, Import, NameServer, Sig};
use kern::spin::event::{Binding, HandlerFn};

/// What a built-in extension may use: the kernel's public interfaces, as methods.
pub struct Iface<'a> {
    /// The kernel, for the interfaces that need it; private, so the extension's code
    /// cannot reach it.
    _k: &'a mut Kernel,
    task: u64,
}

impl Iface<'_> {
    /// `baton.task.id`: the task whose call or raise this is.
    pub fn task_id(&self) -> u64 {
        self.task
    }

    /// `baton.console.write`.
    pub fn console_write(&mut self, text: &str) {
        crate::arch::serial::kprintln!("[ext {}] {}", self.task, text);
    }
}

/// The extensions' own code.
mod ext {
    #![forbid(unsafe_code)]
    use super::Iface;
    use crate::extension::Call;

    pub fn null(_: &mut Iface<'_>, _closure: u64, _c: &Call) -> u64 {
        0
    }

    pub fn sum(_: &mut Iface<'_>, _closure: u64, c: &Call) -> u64 {
        c.args[0].wrapping_add(c.args[1]).wrapping_add(c.args[2])
    }

    pub fn task(io: &mut Iface<'_>, _closure: u64, _c: &Call) -> u64 {
        io.task_id()
    }

    pub fn hello(io: &mut Iface<'_>, _closure: u64, _c: &Call) -> u64 {
        io.console_write("hello from a built-in extension");
        io.task_id()
    }

    pub fn one(_: &mut Iface<'_>, _closure: u64, _arg: u64) -> u64 {
        1
    }

    pub fn closure(_: &mut Iface<'_>, closure: u64, _arg: u64) -> u64 {
        closure
    }

    /// `builtin.callee.null`: the null procedure (its 0 goes through an opaque value, so
    /// that the compiler cannot drop a call whose result it could otherwise know).
    #[inline(never)]
    pub fn callee_null(_: &mut Iface<'_>) -> u64 {
        core::hint::black_box(0)
    }

    /// Most calls one raise of `call_n` or `local_n` makes (the argument comes from user
    /// space, and the kernel is not preemptible).
    pub const CALLS_MAX: u64 = 1000;

    /// `builtin.caller.call_n`: `n` calls (at most [`CALLS_MAX`]) of `linked`, the
    /// procedure another domain exports that a `Resolve` bound this domain's import to;
    /// how many it made.
    pub fn call_n(io: &mut Iface<'_>, linked: fn(&mut Iface<'_>) -> u64, n: u64) -> u64 {
        let mut made = 0u64;
        for _ in 0..n.min(CALLS_MAX) {
            made = made.wrapping_add(1).wrapping_add(linked(io));
        }
        made
    }

    /// `builtin.caller.local_n`: `n` direct calls (at most [`CALLS_MAX`]) of a procedure
    /// of this domain; how many it made.
    pub fn local_n(io: &mut Iface<'_>, n: u64) -> u64 {
        let mut made = 0u64;
        for _ in 0..n.min(CALLS_MAX) {
            made = made.wrapping_add(1).wrapping_add(local_null(io));
        }
        made
    }

    /// The null procedure of `builtin.caller`'s own (as `callee_null`).
    #[inline(never)]
    fn local_null(_: &mut Iface<'_>) -> u64 {
        core::hint::black_box(0)
    }
}

// The handlers the dispatcher calls: each wraps one procedure of `ext`, inlined.
fn h_null(k: &mut Kernel, b: Binding, c: &Call) -> Option<Option<u64>> {
    Some(Some(ext::null(
        &mut Iface {
            _k: k,
            task: c.task,
        },
        b.closure,
        c,
    )))
}
fn h_sum(k: &mut Kernel, b: Binding, c: &Call) -> Option<Option<u64>> {
    Some(Some(ext::sum(
        &mut Iface {
            _k: k,
            task: c.task,
        },
        b.closure,
        c,
    )))
}
fn h_task(k: &mut Kernel, b: Binding, c: &Call) -> Option<Option<u64>> {
    Some(Some(ext::task(
        &mut Iface {
            _k: k,
            task: c.task,
        },
        b.closure,
        c,
    )))
}
fn h_hello(k: &mut Kernel, b: Binding, c: &Call) -> Option<Option<u64>> {
    Some(Some(ext::hello(
        &mut Iface {
            _k: k,
            task: c.task,
        },
        b.closure,
        c,
    )))
}
fn h_one(k: &mut Kernel, b: Binding, a: &u64) -> Option<u64> {
    Some(ext::one(&mut Iface { _k: k, task: 0 }, b.closure, *a))
}
fn h_closure(k: &mut Kernel, b: Binding, a: &u64) -> Option<u64> {
    Some(ext::closure(&mut Iface { _k: k, task: 0 }, b.closure, *a))
}

fn h_call_n(k: &mut Kernel, b: Binding, a: &u64) -> Option<u64> {
    // The procedure the import was bound to, as an opaque pointer: the compiler must not
    // turn the linked call back into a direct one.
    let linked = core::hint::black_box(callee(b.closure)?);
    Some(ext::call_n(&mut Iface { _k: k, task: 0 }, linked, *a))
}
fn h_local_n(k: &mut Kernel, _b: Binding, a: &u64) -> Option<u64> {
    Some(ext::local_n(&mut Iface { _k: k, task: 0 }, *a))
}

/// A procedure `builtin.callee` exports, by its target (what a bound import names).
fn callee(target: u64) -> Option<fn(&mut Iface<'_>) -> u64> {
    match target {
        T_CALLEE_NULL => Some(ext::callee_null),
        _ => None,
    }
}

/// Built-in symbol targets.
const T_NULL: u64 = 0x100;
const T_SUM: u64 = 0x101;
const T_TASK: u64 = 0x102;
const T_HELLO: u64 = 0x103;
const T_ONE: u64 = 0x200;
const T_CLOSURE: u64 = 0x201;
const T_CALLEE_NULL: u64 = 0x210;
const T_CALL_N: u64 = 0x220;
const T_LOCAL_N: u64 = 0x221;

/// The type of `builtin.callee.null`: `() -> i64`.
pub const CALL_SIG: Sig = Sig {
    params: 0,
    results: 1,
    wide: 0b1,
};

/// The `Trap.SystemCall` handler for built-in target `t` (`InvalidArgument`: not one).
pub fn syscall_handler(t: u64) -> Result<HandlerFn<Kernel, Call, Option<u64>>, Error> {
    Ok(match t {
        T_NULL => h_null,
        T_SUM => h_sum,
        T_TASK => h_task,
        T_HELLO => h_hello,
        t => {
            return super::translation::syscall_handler(t)
                .or_else(|| super::cthreads::syscall_handler(t))
                .ok_or(Error::InvalidArgument)
        }
    })
}

/// The `Test.Raise` handler for built-in target `t`.
pub fn test_handler(t: u64) -> Result<HandlerFn<Kernel, u64, u64>, Error> {
    Ok(match t {
        T_ONE => h_one,
        T_CLOSURE => h_closure,
        T_CALL_N => h_call_n,
        T_LOCAL_N => h_local_n,
        _ => return Err(Error::InvalidArgument),
    })
}

/// The closure a `Test.Raise` handler of built-in target `t` of domain `owner` gets when
/// `task` installs it: `claim` (the word the installer gave), or, for
/// `builtin.caller.call_n`, the target its import was bound to. `NotFound` while the
/// import is unbound, or when `task` holds no capability for the domain it was bound to
/// (a task calls only into domains it may reach).
pub fn test_closure(
    domains: &Domains,
    task: u64,
    owner: DomainId,
    t: u64,
    claim: u64,
) -> Result<u64, Error> {
    if t != T_CALL_N {
        return Ok(claim);
    }
    let d = domains.get(Holder::Kernel, owner)?;
    match d.imports().first() {
        Some((_, Some(bound))) if callee(bound.target).is_some() => {
            domains.get(Holder::Task(task), bound.domain)?;
            Ok(bound.target)
        }
        _ => Err(Error::NotFound),
    }
}

/// Makes the built-in extensions' domain and exports it to the name server.
pub fn register(domains: &mut Domains, names: &mut NameServer) -> Result<(), Error> {
    super::export_kernel_interface(
        domains,
        names,
        "builtin.null_syscall",
        &[
            ("null", SYSCALL_SIG, T_NULL),
            ("sum", SYSCALL_SIG, T_SUM),
            ("task", SYSCALL_SIG, T_TASK),
            ("hello", SYSCALL_SIG, T_HELLO),
            ("one", TEST_SIG, T_ONE),
            ("closure", TEST_SIG, T_CLOSURE),
        ],
        |_, _| true,
    )?;
    // SPIN's protected in-kernel call: `builtin.caller` imports `builtin.callee.null`,
    // linked here by a `Resolve` of the kernel's.
    let callee = super::export_kernel_interface(
        domains,
        names,
        "builtin.callee",
        &[("null", CALL_SIG, T_CALLEE_NULL)],
        |_, _| true,
    )?;
    let mut exports = Vec::new();
    exports.try_reserve_exact(1).map_err(|_| Error::NoMemory)?;
    exports.push(super::iface(
        "builtin.caller",
        &[
            ("call_n", TEST_SIG, T_CALL_N),
            ("local_n", TEST_SIG, T_LOCAL_N),
        ],
    )?);
    let mut imports = Vec::new();
    imports.try_reserve_exact(1).map_err(|_| Error::NoMemory)?;
    imports.push(Import {
        interface: super::name("builtin.callee")?,
        name: super::name("null")?,
        sig: CALL_SIG,
    });
    let caller = domains.create(Holder::Kernel, Image { exports, imports })?;
    names.export(
        domains,
        Holder::Kernel,
        super::name("builtin.caller")?,
        caller,
        |_, _| true,
        0,
    )?;
    if domains.resolve(Holder::Kernel, callee, caller)? != 1 {
        return Err(Error::NotFound);
    }
    Ok(())
}
