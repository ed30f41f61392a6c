//! Port I/O on behalf of a user driver (`crate::device`): one `in` or `out` of 1, 2 or 4
//! bytes, run by the kernel in the driver's system call.
//!
//! Decision: kernel calls, not IOPL 3 or a per-task I/O permission bitmap in the TSS, so
//! the context-switch path (measured to the instruction) is untouched, and every access is
//! checked against an I/O-ports capability.

use core::arch::asm;

/// Reads `width` bytes (1, 2 or 4; any other is read as 1) from I/O port `port`.
///
/// Safe to call only for ports the caller has been given (an I/O-ports capability whose
/// range holds every byte of the access; the kernel's own ports are never in one), which
/// is what makes it a safe function: the access can disturb only that device.
pub fn port_in(port: u16, width: u64) -> u32 {
    let v: u32;
    // SAFETY: an `in` touches no memory and changes no CPU state but the output register;
    // its effect on the device is the capability holder's business (see above).
    unsafe {
        match width {
            2 => {
                let w: u16;
                asm!("in ax, dx", out("ax") w, in("dx") port, options(nomem, nostack, preserves_flags));
                v = u32::from(w);
            }
            4 => {
                asm!("in eax, dx", out("eax") v, in("dx") port, options(nomem, nostack, preserves_flags))
            }
            _ => {
                let b: u8;
                asm!("in al, dx", out("al") b, in("dx") port, options(nomem, nostack, preserves_flags));
                v = u32::from(b);
            }
        }
    }
    v
}

/// Writes the low `width` bytes (1, 2 or 4; any other is written as 1) of `value` to I/O
/// port `port`; the same conditions as [`port_in`].
pub fn port_out(port: u16, width: u64, value: u32) {
    // SAFETY: as in `port_in`: an `out` touches no memory.
    unsafe {
        match width {
            2 => {
                asm!("out dx, ax", in("dx") port, in("ax") value as u16, options(nomem, nostack, preserves_flags))
            }
            4 => {
                asm!("out dx, eax", in("dx") port, in("eax") value, options(nomem, nostack, preserves_flags))
            }
            _ => {
                asm!("out dx, al", in("dx") port, in("al") value as u8, options(nomem, nostack, preserves_flags))
            }
        }
    }
}
