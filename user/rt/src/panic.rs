//! The panic handler: report the panic on the console and end the task.
//!
//! Not compiled into host test builds, where `std` provides its own.

#[cfg(not(test))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    match info.location() {
        Some(loc) => crate::println!(
            "panic: {} at {}:{}:{}",
            info.message(),
            loc.file(),
            loc.line(),
            loc.column()
        ),
        None => crate::println!("panic: {}", info.message()),
    }
    crate::sys::exit(crate::PANIC_EXIT_CODE)
}

/// The unwinder's resume entry, which the precompiled `alloc` of the programs' hard-float
/// target names in its landing pads (that library is built to unwind). Programs abort on a
/// panic instead (`panic = "abort"`, and the handler above ends the task), so nothing ever
/// unwinds and this is never reached; if it were, the task ends as after a panic.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn _Unwind_Resume(_exception: *mut u8) -> ! {
    crate::println!("panic: unwinding is not supported");
    crate::sys::exit(crate::PANIC_EXIT_CODE)
}
