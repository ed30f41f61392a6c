//! Extensions (`docs/extensions.md`): import kernel and built-in interfaces, create a
//! domain from a WebAssembly module, resolve and combine domains, install handlers on
//! events, and call the system calls extensions add.

use crate::raw::{syscall1, syscall2, syscall6};
use baton_abi::{decode_result, Error, Sys};

/// A capability for a domain (its id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Domain(pub u64);

/// An installed handler: its event and id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handler {
    pub event: u64,
    pub id: u64,
}

/// A capability for the domain the name server exports under `name`.
pub fn import(name: &str) -> Result<Domain, Error> {
    // SAFETY: the kernel only reads `name`'s bytes.
    let r = unsafe {
        syscall2(
            Sys::SpinImport as u64,
            name.as_ptr() as u64,
            name.len() as u64,
        )
    };
    decode_result(r).map(Domain)
}

/// A domain from the WebAssembly module `wasm` (validated and compiled by the kernel).
pub fn create(wasm: &[u8]) -> Result<Domain, Error> {
    // SAFETY: the kernel only reads `wasm`'s bytes.
    let r = unsafe {
        syscall2(
            Sys::SpinCreate as u64,
            wasm.as_ptr() as u64,
            wasm.len() as u64,
        )
    };
    decode_result(r).map(Domain)
}

/// `Resolve(source, target)`: how many of the target's imports it bound.
pub fn resolve(source: Domain, target: Domain) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall2(Sys::SpinResolve as u64, source.0, target.0) })
}

/// `Combine(a, b)`.
pub fn combine(a: Domain, b: Domain) -> Result<Domain, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall2(Sys::SpinCombine as u64, a.0, b.0) }).map(Domain)
}

/// Installs `domain`'s exported procedure `symbol` on `event` (`baton_abi::spin::EVENT_*`)
/// at `rank` (lower runs first), asking the event's owner for `claim` (for
/// `Trap.SystemCall`, the number); an abort is reported to port `notify` (0 = none).
pub fn install(
    domain: Domain,
    symbol: &str,
    event: u64,
    rank: i32,
    claim: u64,
    notify: u64,
) -> Result<Handler, Error> {
    let ev = event | (u64::from(rank as u32) << 32);
    // SAFETY: the kernel only reads `symbol`'s bytes.
    let r = unsafe {
        syscall6(
            Sys::SpinInstall as u64,
            domain.0,
            symbol.as_ptr() as u64,
            symbol.len() as u64,
            ev,
            claim,
            notify,
        )
    };
    decode_result(r).map(|id| Handler {
        event: event & !baton_abi::spin::INSTALL_ASYNC,
        id,
    })
}

/// [`install`] as an asynchronous handler (`baton_abi::spin::INSTALL_ASYNC`): a raise
/// queues it, a kernel worker runs it later.
pub fn install_async(
    domain: Domain,
    symbol: &str,
    event: u64,
    rank: i32,
    claim: u64,
    notify: u64,
) -> Result<Handler, Error> {
    install(
        domain,
        symbol,
        event | baton_abi::spin::INSTALL_ASYNC,
        rank,
        claim,
        notify,
    )
}

/// `spin_async(which)`: the calling task's asynchronous handlers' raises waiting
/// (`ASYNC_PENDING`), run (`ASYNC_RAN`) or dropped (`ASYNC_DROPPED`).
pub fn async_count(which: u64) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinAsync as u64, which) })
}

/// `spin_reclaim(which)`: what the calling task's `PhysAddr.Reclaim` handlers did: asked
/// (`RECLAIM_ASKED`), nominations taken (`RECLAIM_TAKEN`) or ignored (`RECLAIM_IGNORED`).
pub fn reclaim_count(which: u64) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinReclaim as u64, which) })
}

/// Removes a handler.
pub fn remove(h: Handler) -> Result<(), Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall2(Sys::SpinRemove as u64, h.event, h.id) }).map(|_| ())
}

/// Lets go of a domain.
pub fn release(d: Domain) -> Result<(), Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinRelease as u64, d.0) }).map(|_| ())
}

/// Raises `Test.Raise(arg)`.
pub fn raise(arg: u64) -> Result<u64, Error> {
    // SAFETY: no user memory is involved.
    decode_result(unsafe { syscall1(Sys::SpinRaise as u64, arg) })
}

/// Calls system call `number` (one an extension added) with four arguments. A number no
/// handler takes is an unknown system call (an exception).
pub fn call(number: u64, a: [u64; 4]) -> u64 {
    // SAFETY: an extension's call reads no user memory of the caller's (handlers see only
    // their own linear memory and the argument words).
    unsafe { syscall6(number, a[0], a[1], a[2], a[3], 0, 0) }
}
