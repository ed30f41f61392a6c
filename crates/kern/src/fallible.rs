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

/// `Box::new(f())`, or `None` (and `f` not called) when the heap has no room: the value is
/// made after the allocation, so that a large one can be written in place rather than
/// built elsewhere and copied in.
#[inline(always)]
pub fn try_box_with<T>(f: impl FnOnce() -> T) -> Option<Box<T>> {
    let layout = Layout::new::<T>();
    if layout.size() == 0 {
        return Some(Box::new(f()));
    }
    // SAFETY: `layout` has a non-zero size, as `alloc` requires.
    let ptr = unsafe { alloc(layout) } as *mut T;
    if ptr.is_null() {
        return None;
    }
    // SAFETY: as in `try_box`: a fresh block of `T`'s layout from the global allocator,
    // written once and then owned by the `Box`.
    unsafe {
        ptr.write(f());
        Some(Box::from_raw(ptr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes() {
        let b = try_box([7u64; 40]).unwrap();
        assert_eq!(b[39], 7);
        assert_eq!(*try_box(()).unwrap(), ());
    }

    #[test]
    fn boxes_a_value_made_after_the_allocation() {
        let b = try_box_with(|| [9u64; 40]).unwrap();
        assert!(b.iter().all(|&x| x == 9));
        let mut called = false;
        assert_eq!(*try_box_with(|| called = true).unwrap(), ());
        assert!(called);
    }
}
