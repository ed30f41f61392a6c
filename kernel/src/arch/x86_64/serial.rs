//! The kernel console: a 16550 UART at COM1 (QEMU's `-serial stdio`).
//!
//! `kprint!`/`kprintln!` write through one lock; the panic and fatal-exception paths
//! take the console with [`force_unlock`] first so a report is never lost to a lock the
//! failing code held.

use super::cpu::{inb, outb};
use core::fmt;
use spin::Mutex;

const COM1: u16 = 0x3f8;

/// The console port.
pub struct Serial {
    ready: bool,
}

/// The one console.
pub static CONSOLE: Mutex<Serial> = Mutex::new(Serial { ready: false });

/// Programs COM1 for 115200 baud, 8N1, FIFOs on.
pub fn init() {
    // SAFETY: COM1's registers are standard PC I/O ports; programming them affects only
    // the UART.
    unsafe {
        outb(COM1 + 1, 0x00);
        outb(COM1 + 3, 0x80);
        outb(COM1, 0x01);
        outb(COM1 + 1, 0x00);
        outb(COM1 + 3, 0x03);
        outb(COM1 + 2, 0xc7);
        outb(COM1 + 4, 0x0b);
    }
    CONSOLE.lock().ready = true;
}

impl Serial {
    /// Writes raw bytes, translating `\n` to `\r\n`.
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        if !self.ready {
            return;
        }
        for &b in bytes {
            if b == b'\n' {
                put(b'\r');
            }
            put(b);
        }
    }
}

fn put(b: u8) {
    // SAFETY: reading the line-status register and writing the data register of COM1 only
    // drive the UART.
    unsafe {
        while inb(COM1 + 5) & 0x20 == 0 {}
        outb(COM1, b);
    }
}

impl fmt::Write for Serial {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.write_bytes(s.as_bytes());
        Ok(())
    }
}

/// Releases the console lock whoever holds it: only for paths that will never return to
/// the holder (panic, fatal exception).
pub fn force_unlock() {
    // SAFETY: called only on the way to stopping the machine, when the holder (this CPU,
    // interrupted or panicking) will never run its critical section again.
    unsafe { CONSOLE.force_unlock() };
}

#[doc(hidden)]
pub fn _print(args: fmt::Arguments<'_>) {
    use fmt::Write;
    let _ = CONSOLE.lock().write_fmt(args);
}

/// Prints to the kernel console (`use crate::arch::serial::kprint;`).
#[allow(unused_macros)]
macro_rules! kprint {
    ($($arg:tt)*) => { $crate::arch::serial::_print(format_args!($($arg)*)) };
}
#[allow(unused_imports)]
pub(crate) use kprint;

/// Prints a line to the kernel console (`use crate::arch::serial::kprintln;`).
macro_rules! kprintln {
    () => { $crate::arch::serial::_print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::arch::serial::_print(format_args!("{}\n", format_args!($($arg)*))) };
}
pub(crate) use kprintln;
