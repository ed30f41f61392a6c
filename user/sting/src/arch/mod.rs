//! The machine-dependent part of the runtime: the user-level context switch and the first
//! frame of a new thread control block. One module per architecture behind the same small
//! interface; today only x86-64.

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use x86_64::*;

#[cfg(not(target_arch = "x86_64"))]
compile_error!("sting's context switch exists only for x86-64");
