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
