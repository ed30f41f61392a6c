//! Allocation that fails with an error instead of stopping the kernel.
//!
//! The standard `Box::new` and `Vec::push` call the allocation-error handler when the heap
//! is exhausted, which in a kernel is a panic. Paths that user input reaches box through
//! [`try_box`] instead (and grow vectors with `try_reserve`), and turn a failure into
//! [`baton_abi::Error::NoMemory`].

use alloc::alloc::{alloc, Layout};
use alloc::boxed::Box;

/// `Box::new(value)`, or `None` (and `value` dropped) when the heap has no room.
pub fn try_box<T>(value: T) -> Option<Box<T>> {
    let layout = Layout::new::<T>();
    if layout.size() == 0 {
        return Some(Box::new(value));
    }
    // SAFETY: `layout` has a non-zero size, as `alloc` requires.
    let ptr = unsafe { alloc(layout) } as *mut T;
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` is a fresh allocation of `T`'s layout from the global allocator, so it
    // is valid for a write of a `T`, and `Box::from_raw` takes ownership of exactly such a
    // block (the global allocator and this layout are what `Box` frees it with).
    unsafe {
        ptr.write(value);
        Some(Box::from_raw(ptr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn boxes() {
        let b = try_box([7u64; 40]).unwrap();
        assert_eq!(b[39], 7);
        assert_eq!(*try_box(()).unwrap(), ());
    }

    #[test]
    fn an_impossible_reservation_is_an_error_not_a_panic() {
        let mut v: Vec<u8> = Vec::new();
        assert!(v.try_reserve(usize::MAX / 2).is_err());
    }
}
