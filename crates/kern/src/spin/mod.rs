//! SPIN's extension machinery, machine-independent (Bershad et al., "Extensibility, Safety
//! and Performance in the SPIN Operating System", sections 3.1 and 3.2).
//!
//! - [`event`]: events as typed procedures with an owner (the default implementation)
//!   that authorises every handler installation and may attach a guard; handlers with
//!   their closure, guards, ordering, result combiners, a primary handler the owner may
//!   let be removed or replaced, and the fall-back to the default when a handler aborts.
//!   One handler and no guard is one indirect call ([`event::Event::raise`]).
//! - [`domain`]: logical protection domains (`Create`, `Resolve`, `Combine`) over
//!   extension images the kernel has validated, capabilities for them held per task, and
//!   the in-kernel name server with per-interface authorisation.
//! - [`translation`]: the `Translation` events' classes, the page state word, when a
//!   handler's resolution holds, and the physical pages extensions hold (section 4.1).
//! - [`reclaim`]: `PhysAddr.Reclaim`: which pages a task's handler is asked about and
//!   whether the page it nominates instead is taken (section 4.1).
//!
//! - [`tier`]: a register-form tier for WebAssembly extensions: the functions of a
//!   validated module that fit a small subset, translated and interpreted with fuel per
//!   basic block and bounds-checked memory.
//!
//! Nothing here knows the machine: the kernel (`kernel/src/extension/`) turns a
//! validated module into an [`domain::Image`] and runs the handlers.

pub mod domain;
pub mod event;
pub mod reclaim;
pub mod tier;
pub mod translation;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tier_tests;
