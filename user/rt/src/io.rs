//! Console output without a heap: [`print!`](crate::print) and
//! [`println!`](crate::println) format into a [`ConsoleWriter`], a fixed buffer on the
//! stack that is written with [`debug_write`] when it fills and when the macro finishes.
//!
//! A short line therefore reaches the kernel in one call, which keeps lines from two tasks
//! from interleaving mid-line; a line longer than [`BUFFER_SIZE`] is split.

use core::fmt;

use crate::sys::debug_write;

/// Size of the stack buffer each `print!` formats into.
pub const BUFFER_SIZE: usize = 256;

/// A `fmt::Write` sink that batches output into a fixed buffer and writes it to the
/// console. Call [`flush`](ConsoleWriter::flush) when done (dropping it also flushes).
pub struct ConsoleWriter {
    buf: [u8; BUFFER_SIZE],
    len: usize,
}

impl ConsoleWriter {
    /// An empty writer.
    pub const fn new() -> ConsoleWriter {
        ConsoleWriter {
            buf: [0; BUFFER_SIZE],
            len: 0,
        }
    }

    /// Writes out whatever is buffered. Console errors are ignored: there is nowhere else
    /// to report them.
    pub fn flush(&mut self) {
        if let Some(pending) = self.buf.get(..self.len) {
            if !pending.is_empty() {
                let _ = debug_write(pending);
            }
        }
        self.len = 0;
    }
}

impl Default for ConsoleWriter {
    fn default() -> ConsoleWriter {
        ConsoleWriter::new()
    }
}

impl fmt::Write for ConsoleWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s.as_bytes();
        while !rest.is_empty() {
            if self.len == BUFFER_SIZE {
                self.flush();
            }
            let Some(space) = self.buf.get_mut(self.len..) else {
                // Unreachable: `len <= BUFFER_SIZE` always; start over rather than panic.
                self.len = 0;
                continue;
            };
            let n = space.len().min(rest.len());
            let (now, later) = rest.split_at(n);
            if let Some(dst) = space.get_mut(..n) {
                dst.copy_from_slice(now);
            }
            self.len += n;
            rest = later;
        }
        Ok(())
    }
}

impl Drop for ConsoleWriter {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Formats `args` to the console. The implementation of [`print!`](crate::print).
#[doc(hidden)]
pub fn _print(args: fmt::Arguments<'_>) {
    let mut writer = ConsoleWriter::new();
    let _ = fmt::Write::write_fmt(&mut writer, args);
    writer.flush();
}

/// Prints to the kernel console, like `std::print!`.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::io::_print(::core::format_args!($($arg)*))
    };
}

/// Prints a line to the kernel console, like `std::println!`.
#[macro_export]
macro_rules! println {
    () => {
        $crate::io::_print(::core::format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::io::_print(::core::format_args!("{}\n", ::core::format_args!($($arg)*)))
    };
}
