//! The allocation hooks of `kern::fault` in a build with the `fault-inject` feature
//! (`cargo test -p kern --features fault-inject --test fault_inject`). A test binary of its
//! own, since it arms the global injector.
#![cfg(feature = "fault-inject")]

use kern::fault::{Site, INJECTOR};
use kern::frame::{FrameAllocator, PAGE_SIZE};

#[test]
fn every_nth_frame_allocation_fails_once_armed() {
    let mut frames = FrameAllocator::new(&[0..64 * PAGE_SIZE], &[]);
    // Not armed: boot allocations never fail.
    let a = frames.alloc().expect("a frame before arming");
    INJECTOR.arm(2);
    let got: Vec<bool> = (0..6).map(|_| frames.alloc().is_some()).collect();
    assert_eq!(got, [true, false, true, false, true, false]);
    assert!(frames.alloc_contiguous(2).is_some());
    assert!(
        frames.alloc_contiguous(2).is_none(),
        "the 8th frame allocation"
    );
    assert_eq!(INJECTOR.counts(Site::Frame), (4, 8));
    assert_eq!(INJECTOR.counts(Site::Heap), (0, 0));
    INJECTOR.disarm();
    assert!(frames.alloc().is_some());
    assert!(frames.free(a).is_ok());
}
