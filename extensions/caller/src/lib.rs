//! `caller`: a Baton extension that calls another extension domain's procedures (SPIN's
//! protected in-kernel call between domains, `docs/extensions.md`).
//!
//! It imports the interface `ext` (what a WebAssembly extension exports): `twice`, `one`,
//! `forever` and `wild`, which `null_syscall` exports. Its installer binds them with a
//! `Resolve` whose source is a `null_syscall` domain it holds a capability for; each call
//! then runs in that module, in its own linear memory, on this handler's fuel. Its
//! exports are `Test.Raise` handlers, `(i64) -> i64`.
//!
//! As for every extension, safety does not rest on this code; `unsafe` is denied except
//! in the glue that names imports and exports.
#![no_std]
#![deny(unsafe_code)]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// The other domain's procedures (bound by the installer's `Resolve`).
#[allow(unsafe_code)]
mod other {
    #[link(wasm_import_module = "ext")]
    unsafe extern "C" {
        pub safe fn twice(a: i64) -> i64;
        pub safe fn one(a: i64) -> i64;
        pub safe fn forever(n: i64, a0: i64, a1: i64, a2: i64) -> i64;
        pub safe fn wild(n: i64, a0: i64, a1: i64, a2: i64) -> i64;
    }
}

/// The handlers, safe Rust.
mod handlers {
    use super::other;

    /// The other domain's `twice(a)`.
    pub fn call_twice(a: i64) -> i64 {
        other::twice(a)
    }

    /// `n` calls of the other domain's `one`: the sum of their results (`n`).
    pub fn call_n(n: i64) -> i64 {
        let mut s = 0i64;
        for i in 0..n {
            s = s.wrapping_add(other::one(core::hint::black_box(i)));
        }
        s
    }

    /// A procedure of this domain, never inlined: what `local_n` calls.
    #[inline(never)]
    fn one(a: i64) -> i64 {
        core::hint::black_box(a);
        1
    }

    /// `n` calls of a procedure of its own: `call_n`'s loop without the domain crossing.
    pub fn local_n(n: i64) -> i64 {
        let mut s = 0i64;
        for i in 0..n {
            s = s.wrapping_add(one(core::hint::black_box(i)));
        }
        s
    }

    /// Calls the other domain's `forever`, which burns this handler's fuel.
    pub fn call_forever(a: i64) -> i64 {
        other::forever(a, 0, 0, 0)
    }

    /// Calls the other domain's `wild`, which reads outside its own linear memory.
    pub fn call_wild(a: i64) -> i64 {
        other::wild(0, a, 0, 0)
    }
}

/// The exports.
#[allow(unsafe_code)]
mod exports {
    use super::handlers as h;
    #[no_mangle]
    pub extern "C" fn call_twice(a: i64) -> i64 {
        h::call_twice(a)
    }
    #[no_mangle]
    pub extern "C" fn call_n(n: i64) -> i64 {
        h::call_n(n)
    }
    #[no_mangle]
    pub extern "C" fn local_n(n: i64) -> i64 {
        h::local_n(n)
    }
    #[no_mangle]
    pub extern "C" fn call_forever(a: i64) -> i64 {
        h::call_forever(a)
    }
    #[no_mangle]
    pub extern "C" fn call_wild(a: i64) -> i64 {
        h::call_wild(a)
    }
}
