//! Other processors. Until application processors are brought up, the kernel runs on the
//! boot CPU alone and these are no-ops.

/// Lets application processors enter the scheduler (they wait until the kernel state
/// exists).
pub fn release_aps() {}

/// Interrupts `cpu` so it notices new work (it may be halted or running something less
/// urgent).
pub fn wake_cpu(_cpu: usize) {}
