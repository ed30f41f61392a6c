//! `null_syscall`: a Baton extension, built for `wasm32-unknown-unknown` by `cargo xtask
//! build` and loaded into the kernel at run time (`docs/extensions.md`).
//!
//! Every exported function is a procedure the installing task may install as a handler:
//! `Trap.SystemCall` handlers have the type `(number, a0, a1, a2: i64) -> i64`,
//! `Test.Raise` handlers `(i64) -> i64`. It imports `baton.console.write` and
//! `baton.task.id`, which its installer resolves against the kernel's interfaces.
//!
//! Some procedures misbehave on purpose, for the tests: `forever` never returns (the
//! kernel stops it when its fuel runs out) and `wild` reads outside its linear memory
//! (a trap). The kernel aborts both, removes the handler and tells the installer.
//!
//! Safety does not rest on this code: the kernel validates the module and confines it to
//! its linear memory and fuel whatever it contains. The crate still denies `unsafe`
//! except in the glue that names imports and exports (`#[no_mangle]` and `extern` blocks
//! count as `unsafe_code`).
#![no_std]
#![deny(unsafe_code)]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// The kernel interfaces it imports (bound by the installer's `Resolve`).
#[allow(unsafe_code)]
mod baton {
    #[link(wasm_import_module = "baton.console")]
    unsafe extern "C" {
        #[link_name = "write"]
        pub safe fn console_write(ptr: *const u8, len: i32);
    }
    #[link(wasm_import_module = "baton.task")]
    unsafe extern "C" {
        #[link_name = "id"]
        pub safe fn task_id() -> i64;
    }
}

fn write(s: &str) {
    baton::console_write(s.as_ptr(), s.len() as i32);
}

/// The handlers, safe Rust.
mod handlers {
    /// The null system call.
    pub fn null(_n: i64, _a0: i64, _a1: i64, _a2: i64) -> i64 {
        0
    }

    /// `a0 + a1 + a2`.
    pub fn sum(_n: i64, a0: i64, a1: i64, a2: i64) -> i64 {
        a0.wrapping_add(a1).wrapping_add(a2)
    }

    /// Says hello on the console and returns the calling task's id.
    pub fn hello(_n: i64, _a0: i64, _a1: i64, _a2: i64) -> i64 {
        super::write("hello from a WebAssembly extension");
        super::baton::task_id()
    }

    /// Never returns: stopped by the fuel.
    pub fn forever(n: i64, _a0: i64, _a1: i64, _a2: i64) -> i64 {
        let mut x = n;
        loop {
            x = core::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
        }
    }

    /// Reads far outside the linear memory: a trap.
    pub fn wild(_n: i64, a0: i64, _a1: i64, _a2: i64) -> i64 {
        let p = core::hint::black_box(0x7fff_fff0usize.wrapping_add(a0 as usize)) as *const i64;
        // Dereferencing needs `unsafe` even here; the kernel is what stops it.
        #[allow(unsafe_code)]
        // SAFETY: none; the access is out of bounds on purpose, and WebAssembly traps.
        unsafe {
            core::ptr::read_volatile(p)
        }
    }

    /// `Test.Raise`: 2 × the argument.
    pub fn twice(a: i64) -> i64 {
        a.wrapping_mul(2)
    }

    /// `Test.Raise`: nothing, 1.
    pub fn one(_a: i64) -> i64 {
        1
    }

    /// A `Strand` handler (`(vp, thread) -> verdict`): vetoes (1) every event.
    pub fn strand_veto(_vp: i64, _thread: i64) -> i64 {
        1
    }

    /// A `Strand` handler that never returns: stopped by the fuel, and the event's
    /// default (the upcall) goes ahead.
    pub fn strand_forever(vp: i64, _thread: i64) -> i64 {
        let mut x = vp;
        loop {
            x = core::hint::black_box(x.wrapping_mul(5).wrapping_add(3));
        }
    }
}

/// The exports.
#[allow(unsafe_code)]
mod exports {
    use super::handlers as h;
    #[no_mangle]
    pub extern "C" fn null(n: i64, a0: i64, a1: i64, a2: i64) -> i64 {
        h::null(n, a0, a1, a2)
    }
    #[no_mangle]
    pub extern "C" fn sum(n: i64, a0: i64, a1: i64, a2: i64) -> i64 {
        h::sum(n, a0, a1, a2)
    }
    #[no_mangle]
    pub extern "C" fn hello(n: i64, a0: i64, a1: i64, a2: i64) -> i64 {
        h::hello(n, a0, a1, a2)
    }
    #[no_mangle]
    pub extern "C" fn forever(n: i64, a0: i64, a1: i64, a2: i64) -> i64 {
        h::forever(n, a0, a1, a2)
    }
    #[no_mangle]
    pub extern "C" fn wild(n: i64, a0: i64, a1: i64, a2: i64) -> i64 {
        h::wild(n, a0, a1, a2)
    }
    #[no_mangle]
    pub extern "C" fn twice(a: i64) -> i64 {
        h::twice(a)
    }
    #[no_mangle]
    pub extern "C" fn one(a: i64) -> i64 {
        h::one(a)
    }
    #[no_mangle]
    pub extern "C" fn strand_veto(vp: i64, thread: i64) -> i64 {
        h::strand_veto(vp, thread)
    }
    #[no_mangle]
    pub extern "C" fn strand_forever(vp: i64, thread: i64) -> i64 {
        h::strand_forever(vp, thread)
    }
}
