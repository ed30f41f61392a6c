//! Kernel stacks: 16 KiB each, mapped in the kernel's reserved PML4 slot with an unmapped
//! guard page below every stack, recycled through a free pool.
//!
//! Stacks are a per-processor resource in the continuation model: a thread owns one only
//! while it runs or while it is blocked in the process model, so the pool stays small
//! however many threads exist.
//!
//! # Invariants
//! - Every stack in `free` is mapped and attached to no thread.
//! - Virtual ranges are never reused for anything else, so a stale pointer into a freed
//!   stack still points at a (pooled) stack, never at other data.

use super::context::KernelStack;
use super::paging::KernelMem;
use alloc::vec::Vec;
use kern::frame::{FrameAllocator, PhysAddr, PAGE_SIZE};
use kern::pmap::{AddressSpace, MapFlags};

/// Usable bytes of one kernel stack.
pub const STACK_SIZE: u64 = 16 * 1024;
/// Frames one kernel stack takes.
pub const STACK_FRAMES: u64 = STACK_SIZE / 4096;
/// Start of the virtual area for kernel stacks (PML4 slot 510).
const AREA_START: u64 = 0xffff_ff00_0000_0000;
/// Size of the area (512 GiB: one PML4 slot).
const AREA_SIZE: u64 = 1 << 39;

/// The pool of kernel stacks.
pub struct StackPool {
    free: Vec<KernelStack>,
    next: u64,
    /// Stacks created (mapped) since boot.
    pub created: u64,
}

impl Default for StackPool {
    fn default() -> Self {
        Self::new()
    }
}

impl StackPool {
    /// An empty pool.
    pub const fn new() -> StackPool {
        StackPool {
            free: Vec::new(),
            next: AREA_START,
            created: 0,
        }
    }

    /// Takes a stack from the pool, mapping a new one when the pool is empty. In
    /// `fault-inject` builds, `kern::fault` may make making a new one fail.
    pub fn alloc(
        &mut self,
        frames: &mut FrameAllocator,
        kernel_root: PhysAddr,
    ) -> Option<KernelStack> {
        // A pooled stack is always there to take; only making a new one can fail (and
        // fault injection fails only that).
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        if kern::fault::should_fail(kern::fault::Site::Stack) {
            return None;
        }
        // Room in the pool for this stack's return, made now (where failing is allowed),
        // so that [`StackPool::free`] never allocates: the pool has room for every stack
        // ever made.
        let room = usize::try_from(self.created).ok()?.checked_add(1)?;
        if self.free.capacity() < room && self.free.try_reserve(room).is_err() {
            return None;
        }
        let base = self.next.checked_add(PAGE_SIZE)?; // one guard page below
        let top = base.checked_add(STACK_SIZE)?;
        if top > AREA_START + AREA_SIZE {
            return None;
        }
        let mut mem = KernelMem { frames };
        let mut space = AddressSpace::from_root(kernel_root);
        let mut va = base;
        while va < top {
            let Some(frame) = kern::pmap::PhysMem::alloc_frame(&mut mem) else {
                // Undo this stack's pages; the range is skipped for good.
                let mut undo = base;
                while undo < va {
                    space.unmap(&mut mem, undo);
                    undo += PAGE_SIZE;
                }
                self.next = top;
                return None;
            };
            if space
                .map(
                    &mut mem,
                    va,
                    frame,
                    MapFlags::kernel(true, false).with_owned(),
                )
                .is_err()
            {
                kern::pmap::PhysMem::free_frame(&mut mem, frame);
                self.next = top;
                return None;
            }
            va += PAGE_SIZE;
        }
        self.next = top;
        self.created += 1;
        KernelStack::new(top)
    }

    /// Returns a stack to the pool (never allocates: see [`StackPool::alloc`]).
    pub fn free(&mut self, stack: KernelStack) {
        self.free.push(stack);
    }

    /// Stacks waiting in the pool.
    pub fn pooled(&self) -> usize {
        self.free.len()
    }
}
