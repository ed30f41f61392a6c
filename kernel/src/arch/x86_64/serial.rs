//! The kernel console: a 16550 UART at COM1 (QEMU's `-serial stdio`), driven with the
//! `uart_16550` crate. (The console server in user space drives the same port by hand
//! through the kernel's checked port calls, which the crate's direct `in`/`out` cannot
//! go through.)
//!
//! `kprint!`/`kprintln!` write through one lock; the panic and fatal-exception paths
//! take the console with [`force_unlock`] first so a report is never lost to a lock the
//! failing code held.

use core::fmt;
use spin::Mutex;
use uart_16550::backend::PioBackend;
use uart_16550::{BaudRate, Config, Uart16550};

const COM1: u16 = 0x3f8;

/// The console port: COM1 driven by the `uart_16550` crate, once [`init`] found it.
pub struct Serial {
    port: Option<Uart16550<PioBackend>>,
}

/// The one console.
pub static CONSOLE: Mutex<Serial> = Mutex::new(Serial { port: None });

/// Programs COM1 for 115200 baud, 8N1, FIFOs on, interrupts off (the console server
/// turns its receive interrupt on when it takes the port). Without a UART there the
/// kernel stays silent.
pub fn init() {
    // SAFETY: COM1's eight registers are standard PC I/O ports, valid for the kernel's
    // whole life; programming them affects only the UART, and the kernel is the only user
    // of the port until the console server (through the kernel's checked port calls).
    let Ok(mut port) = (unsafe { Uart16550::new_port(COM1) }) else {
        return;
    };
    let config = Config {
        baud_rate: BaudRate::Baud115200,
        ..Config::DEFAULT
    };
    if port.init(config).is_ok() {
        CONSOLE.lock().port = Some(port);
    }
}

impl Serial {
    /// Writes raw bytes, translating `\n` to `\r\n`.
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        let Some(port) = self.port.as_mut() else {
            return;
        };
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            match line.split_last() {
                Some((b'\n', text)) => {
                    port.send_bytes_exact(text);
                    port.send_bytes_exact(b"\r\n");
                }
                _ => port.send_bytes_exact(line),
            }
        }
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
