//! The machine-dependent layer. Only x86-64 exists; everything that touches hardware
//! lives under it.

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use self::x86_64::*;

#[cfg(not(target_arch = "x86_64"))]
compile_error!("Baton runs on x86-64 only");
