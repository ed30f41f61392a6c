//! `kern`: Baton's machine-independent kernel logic.
//!
//! This crate is `no_std + alloc` and never touches hardware, so all of it builds and is
//! unit-tested on the host with plain `cargo test -p kern`. The kernel binary
//! (`baton-kernel`) links it and supplies the machine through small traits (for example
//! [`pmap::PhysMem`], through which page-table frames are read and written).
//!
//! # Design principles
//! - Decode, then invoke: user input is validated completely, without side effects, and
//!   only then acted upon; every failure is an [`baton_abi::Error`], never a panic.
//! - User memory is an allegation until checked ([`usercopy`]).
//! - State machines are enums whose variants carry what they wait on.
#![no_std]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod activation;
pub mod calibrate;
pub mod cmdline;
pub mod continuation;
pub mod device;
pub mod dma;
pub mod fallible;
pub mod fault;
pub mod floor;
pub mod fpu;
pub mod frame;
pub mod gauge;
pub mod idslab;
pub mod ilist;
pub mod initrd;
pub mod ipc;
pub mod kheap;
pub mod loader;
pub mod pmap;
#[cfg(test)]
mod proptests;
pub mod quota;
pub mod ratelimit;
pub mod ring;
pub mod sched;
pub mod slab;
/// SPIN's events, guards, dispatcher and domains (`docs/extensions.md`).
pub mod spin;
pub mod symbols;
pub mod timer;
pub mod usercopy;
/// Accent's virtual memory, machine-independent: memory objects, address maps,
/// copy-on-write, fault decisions (`docs/vm.md`).
pub mod vm;
/// Virtual processors with Block and Unblock upcalls (Sting's kernel support,
/// `docs/sting.md`).
pub mod vproc;
pub mod waiters;
pub mod waitq;
