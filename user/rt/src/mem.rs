//! The C memory functions the compiler calls (`memcpy`, `memmove`, `memset`, `memcmp`,
//! `bcmp`).
//!
//! User programs are built for a hard-float Linux target as `no_std` executables (so that
//! they may use the SSE registers; `docs/programs.md`), and that target's
//! `compiler_builtins` leaves these functions to the C library, which a Baton program does
//! not have. Copies and fills are the string instructions (`rep movsb`/`rep stosb`, fast on
//! every CPU with ERMS) written as inline assembly, so the compiler cannot turn them back
//! into calls to themselves.
//!
//! # Invariants
//!
//! - No function here calls another memory function or any code that may (no loop the
//!   optimiser could recognise as a copy or a fill).

use core::arch::asm;

/// Copies `n` bytes from `src` to `dst`; returns `dst`.
///
/// # Safety
///
/// `src` is readable and `dst` writable for `n` bytes, and the two do not overlap.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees both ranges for `n` bytes; the direction flag is clear
    // (the ABI's rule at every call), so `rep movsb` copies forwards.
    unsafe {
        asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags)
        );
    }
    dst
}

/// Copies `n` bytes from `src` to `dst`, which may overlap; returns `dst`.
///
/// # Safety
///
/// `src` is readable and `dst` writable for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize).wrapping_sub(src as usize) >= n {
        // `dst` is below `src` or past its end: a forward copy never reads a byte it wrote.
        // SAFETY: as the caller guarantees; the ranges are ordered as above.
        return unsafe { memcpy(dst, src, n) };
    }
    // `dst` lies inside `src`'s range, above it: copy backwards from the last byte.
    // SAFETY: the caller guarantees both ranges; with the direction flag set `rep movsb`
    // walks from `src + n - 1` and `dst + n - 1` down, and the flag is cleared again before
    // the block ends, as the ABI requires. `n` is at least 1 here (a zero `n` took the
    // branch above).
    unsafe {
        asm!(
            "std",
            "rep movsb",
            "cld",
            inout("rcx") n => _,
            inout("rdi") dst.add(n - 1) => _,
            inout("rsi") src.add(n - 1) => _,
            options(nostack)
        );
    }
    dst
}

/// Fills `n` bytes at `dst` with the low byte of `c`; returns `dst`.
///
/// # Safety
///
/// `dst` is writable for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller guarantees the range; the direction flag is clear.
    unsafe {
        asm!(
            "rep stosb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            in("al") c as u8,
            options(nostack, preserves_flags)
        );
    }
    dst
}

/// Compares `n` bytes: negative, zero or positive as `a` is below, equal to or above `b`
/// at the first byte where they differ.
///
/// # Safety
///
/// `a` and `b` are readable for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: `i < n`, and the caller guarantees `n` readable bytes at each.
        let (x, y) = unsafe { (a.add(i).read(), b.add(i).read()) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// Compares `n` bytes: zero when they are equal, non-zero otherwise.
///
/// # Safety
///
/// `a` and `b` are readable for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: as the caller guarantees.
    unsafe { memcmp(a, b, n) }
}
