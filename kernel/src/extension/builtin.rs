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

use super::{Call, SYSCALL_SIG, TEST_SIG};
use crate::kernel::Kernel;
use baton_abi::Error;
use kern::spin::domain::{Domains, NameServer};
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

/// Built-in symbol targets.
const T_NULL: u64 = 0x100;
const T_SUM: u64 = 0x101;
const T_TASK: u64 = 0x102;
const T_HELLO: u64 = 0x103;
const T_ONE: u64 = 0x200;
const T_CLOSURE: u64 = 0x201;

/// The `Trap.SystemCall` handler for built-in target `t` (`InvalidArgument`: not one).
pub fn syscall_handler(t: u64) -> Result<HandlerFn<Kernel, Call, Option<u64>>, Error> {
    Ok(match t {
        T_NULL => h_null,
        T_SUM => h_sum,
        T_TASK => h_task,
        T_HELLO => h_hello,
        t => return super::translation::syscall_handler(t).ok_or(Error::InvalidArgument),
    })
}

/// The `Test.Raise` handler for built-in target `t`.
pub fn test_handler(t: u64) -> Result<HandlerFn<Kernel, u64, u64>, Error> {
    Ok(match t {
        T_ONE => h_one,
        T_CLOSURE => h_closure,
        _ => return Err(Error::InvalidArgument),
    })
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
    )
    .map(|_| ())
}
