//! WebAssembly extensions, run in the kernel by the `wasmi` interpreter.
//!
//! `spin_create` copies a module (at most [`MODULE_MAX`] bytes) from the caller, charges
//! the caller's task for it ([`charge_bytes`]), validates and compiles it eagerly (a
//! bounded amount of work: the size cap, and `wasmi`'s strict limits on functions,
//! globals, tables and segments), and makes a domain whose imports are the module's
//! function imports and whose one exported interface, `ext`, holds its exported functions.
//! The first installation of one of its procedures instantiates it: every import must be
//! bound by a `Resolve` to one of the kernel's public interfaces (an import nothing bound
//! is refused, `NotFound`), and only those bindings are linked. Its store limits its
//! linear memory to [`MEMORY_PAGES_MAX`] pages, one memory, one table of 1,024 elements.
//!
//! Every invocation runs with the fuel its installation was given (the event's owner's
//! bound, [`FUEL`] by default): running out, a trap (an access outside its linear memory,
//! an unreachable, a division by zero, a stack overflow of its bounded stack) ends the
//! invocation with `None`, which the dispatcher reports as an abort.
//!
//! # Memory
//! `wasmi` allocates from the kernel heap and treats a failed allocation as fatal (the
//! kernel's allocation-error handler panics). So its allocations are bounded instead:
//! the module's size, the memory limit, a value stack of at most [`STACK_VALUES`] values
//! and a recursion depth of [`RECURSION`], all charged to the task up front
//! ([`charge_bytes`]), which keeps them inside the kernel's reserve like any other charge.
//! Every call into `wasmi` runs inside `crate::heap::bounded`, so a kernel built with
//! allocation fault injection does not fail allocations there (it fails the charge and
//! every fallible allocation around them instead).

use super::{Call, K_CONSOLE_WRITE, K_SECRET, K_TASK_ID};
use crate::kernel::{Kernel, TaskId};
use crate::locked::Locked;
use alloc::vec::Vec;
use baton_abi::spin::{FUEL, MEMORY_PAGES_MAX, MODULE_MAX};
use baton_abi::Error;
use kern::quota::Charge;
use kern::spin::domain::{DomainId, Domains, Holder, Image, Import, Interface, Name, Sig, Symbol};
use kern::spin::event::Binding;
use kern::spin::tier;
use wasmi::{
    Caller, CompilationMode, Config, EnforcedLimits, Engine, ExternType, FuncType, Instance,
    Linker, Module, Store, StoreLimits, StoreLimitsBuilder, TypedFunc, ValType,
};

/// Most values on an invocation's stack.
pub const STACK_VALUES: usize = 16 * 1024;
/// Deepest call nesting inside an invocation.
pub const RECURSION: usize = 128;
/// Longest text `baton.console.write` prints.
const WRITE_MAX: usize = 256;

/// Bytes a module of `len` bytes is charged: its compiled form (at most 16 times its
/// size), its linear memory at the limit, its value stack, and the store.
pub fn charge_bytes(len: usize) -> usize {
    len * 16 + MEMORY_PAGES_MAX as usize * 65536 + STACK_VALUES * 16 + 16 * 1024 + tier_bytes(len)
}

/// Bytes the register-form tier's translation of a module of `len` bytes may take: its
/// operations ([`tier::ops_bound`]), export names and import table (each at most the
/// module's size).
fn tier_bytes(len: usize) -> usize {
    tier::ops_bound(len) * core::mem::size_of::<tier::Op>() + len * 4
}

/// Handler invocations the register-form tier ran, and `wasmi` ran (`spin_tier`).
static RUNS: [core::sync::atomic::AtomicU64; 2] =
    [const { core::sync::atomic::AtomicU64::new(0) }; 2];

fn count(which: usize) {
    if let Some(c) = RUNS.get(which) {
        c.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    }
}

/// `spin_tier(which)`.
pub fn runs(which: u64) -> Result<u64, Error> {
    match which {
        baton_abi::spin::TIER_FAST => Ok(RUNS[0].load(core::sync::atomic::Ordering::Relaxed)),
        baton_abi::spin::TIER_WASMI => Ok(RUNS[1].load(core::sync::atomic::Ordering::Relaxed)),
        _ => Err(Error::InvalidArgument),
    }
}

/// What a store carries: the task whose event it is running for.
struct Host {
    task: u64,
    limits: StoreLimits,
    /// The kernel, while an invocation runs (null otherwise): for the memory interfaces
    /// (`super::translation`), which act on `task`'s own address space.
    kernel: *mut Kernel,
}

type SysFn = TypedFunc<(i64, i64, i64, i64), i64>;
type TestFn = TypedFunc<i64, i64>;
type FaultFn = TypedFunc<(i64, i64), i64>;
type StrandFn = TypedFunc<(i64, i64), i64>;

struct Ext {
    domain: DomainId,
    /// Its own engine: `wasmi` keeps compiled code in the engine until the engine goes, so
    /// a shared one would keep every released module's code (uncharged) for ever.
    engine: Engine,
    module: Module,
    /// Its store and instance once instantiated, boxed so that an invocation can take
    /// them out of the list while it runs ([`take_store`]): a call into another module
    /// then borrows the list afresh, and a call back into a module already running finds
    /// its store gone (refused) instead of aliasing it.
    store: Option<alloc::boxed::Box<(Store<Host>, Instance)>>,
    sys_funcs: Vec<SysFn>,
    test_funcs: Vec<TestFn>,
    fault_funcs: Vec<FaultFn>,
    strand_funcs: Vec<StrandFn>,
    /// The register-form tier's translation and the kernel procedure each import is
    /// bound to (once instantiated); taken out of the list while one of its functions
    /// runs, as the store is.
    fast: Option<alloc::boxed::Box<Fast>>,
    /// The linear memory, for the tier's functions that use it.
    memory: Option<wasmi::Memory>,
    _charge: Charge,
}

/// A module's register-form tier.
struct Fast {
    module: tier::Module,
    /// The registers its functions run in (taken out of the list with them).
    frame: tier::Regs,
    /// The task that instantiated it: the task of an invocation that names none (a
    /// `Test.Raise` handler's).
    task: u64,
    /// Each import's kernel procedure (`K_*`), or `NOT_HOST` for an import bound to
    /// another module's export (its callers stay on `wasmi`).
    hosts: Vec<u64>,
}

const NOT_HOST: u64 = u64::MAX;

/// A closure's bit for a handler the tier runs: its low 31 bits are then the function's
/// index among the module's defined functions.
const FAST_BIT: u64 = 1 << 31;

#[derive(Default)]
struct Exts {
    list: Vec<Option<Ext>>,
}

static EXTS: Locked<Exts> = Locked::new();

/// The modules.
///
/// # Safety
/// The caller holds the big kernel lock and no other reference from an earlier call.
unsafe fn exts() -> &'static mut Exts {
    // SAFETY: by the caller's contract this is the only reference, under the lock.
    unsafe { EXTS.get_or_make(Exts::default) }
}

/// A new engine: fuel metering, no floats, eager compilation, a bounded stack.
///
/// Not `EnforcedLimits::strict()`: its average-bytes-per-function check divides by the
/// code section's function count, and a module whose code section declares no function
/// but is large enough made the kernel panic (found by the system-call fuzzer). What that
/// check guards against, compilation work out of proportion to a module's size, the size
/// cap (`MODULE_MAX`) bounds: every count a module declares is at most its size.
fn engine() -> Engine {
    let mut c = Config::default();
    c.consume_fuel(true)
        .floats(false)
        .compilation_mode(CompilationMode::Eager)
        .enforced_limits(EnforcedLimits::default())
        .set_max_recursion_depth(RECURSION)
        .set_max_stack_height(STACK_VALUES)
        .set_max_cached_stacks(1);
    Engine::new(&c)
}

fn sig_of(ft: &FuncType) -> Option<Sig> {
    let (p, r) = (ft.params(), ft.results());
    if p.len() + r.len() > Sig::MAX {
        return None;
    }
    let mut wide = 0u16;
    for (i, t) in p.iter().chain(r.iter()).enumerate() {
        match t {
            ValType::I32 => {}
            ValType::I64 => wide |= 1 << i,
            _ => return None,
        }
    }
    Some(Sig {
        params: p.len() as u8,
        results: r.len() as u8,
        wide,
    })
}

/// `spin_create(ptr, len)` by task `task`: the new domain.
pub fn create(
    k: &mut Kernel,
    domains: &mut Domains,
    task: TaskId,
    ptr: u64,
    len: u64,
) -> Result<DomainId, Error> {
    let len = usize::try_from(len).map_err(|_| Error::TooLarge)?;
    if len > MODULE_MAX {
        return Err(Error::TooLarge);
    }
    let account = &k.tasks.get(&task).ok_or(Error::InvalidArgument)?.account;
    let charge = crate::quota::heap(account, charge_bytes(len))?;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(len).map_err(|_| Error::NoMemory)?;
    bytes.resize(len, 0);
    k.copy_in(task, ptr, &mut bytes)?;
    // SAFETY: the lock is held (we have `k`); no other reference to the modules is live.
    let e = unsafe { exts() };
    let (engine, module) = crate::heap::bounded(|| {
        let engine = engine();
        let module = Module::new(&engine, &bytes[..]);
        (engine, module)
    });
    let module = module.map_err(|_| Error::BadFormat)?;
    // The tier's translation of what it can take (the module is valid: `wasmi` said so).
    let fast = match tier::Module::translate(&bytes) {
        Ok(m) => Some(
            kern::fallible::try_box(Fast {
                module: m,
                frame: [0; tier::REGS],
                task,
                hosts: Vec::new(),
            })
            .ok_or(Error::NoMemory)?,
        ),
        Err(tier::Error::NoMemory) => return Err(Error::NoMemory),
        Err(tier::Error::Format) => None,
    };
    drop(bytes);
    let mut imports = Vec::new();
    for imp in module.imports() {
        let ExternType::Func(ft) = imp.ty() else {
            return Err(Error::BadFormat);
        };
        let sig = sig_of(ft).ok_or(Error::BadFormat)?;
        imports.try_reserve(1).map_err(|_| Error::NoMemory)?;
        imports.push(Import {
            interface: Name::new(imp.module().as_bytes())?,
            name: Name::new(imp.name().as_bytes())?,
            sig,
        });
    }
    let mut symbols = Vec::new();
    for (i, ex) in module.exports().enumerate() {
        let ExternType::Func(ft) = ex.ty() else {
            continue;
        };
        let Some(sig) = sig_of(ft) else { continue };
        symbols.try_reserve(1).map_err(|_| Error::NoMemory)?;
        symbols.push(Symbol {
            name: Name::new(ex.name().as_bytes())?,
            sig,
            target: i as u64,
        });
    }
    let mut exports = Vec::new();
    exports.try_reserve_exact(1).map_err(|_| Error::NoMemory)?;
    exports.push(Interface {
        name: Name::new(b"ext")?,
        symbols,
    });
    e.list.try_reserve(1).map_err(|_| Error::NoMemory)?;
    let domain = domains.create(Holder::Task(task), Image { exports, imports })?;
    let ext = Ext {
        domain,
        engine,
        module,
        store: None,
        sys_funcs: Vec::new(),
        test_funcs: Vec::new(),
        fault_funcs: Vec::new(),
        strand_funcs: Vec::new(),
        fast,
        memory: None,
        _charge: charge,
    };
    match e.list.iter_mut().find(|s| s.is_none()) {
        Some(slot) => *slot = Some(ext),
        None => e.list.push(Some(ext)),
    }
    Ok(domain)
}

/// The domain went: its module, store and charge go.
pub fn forget(d: DomainId) {
    // SAFETY: called under the lock (from the family's release paths), no other reference.
    let e = unsafe { exts() };
    for slot in e.list.iter_mut() {
        if slot.as_ref().is_some_and(|x| x.domain == d) {
            *slot = None;
        }
    }
}

/// Which event a closure is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Syscall,
    Test,
    /// A `Translation` event's handler (`super::translation`).
    Fault,
    /// The `Strand` events (`strand.rs`): `(vp, thread: i64) -> verdict`.
    Strand,
    /// `PhysAddr.Reclaim` (`reclaim.rs`): `(candidate: i64) -> nominee`, kept with the
    /// `Test.Raise` functions (the same type).
    Reclaim,
}

/// The closure of a handler that runs `symbol` of domain `owner` (a module of task
/// `task`'s) for an event of kind `kind`: the module's slot and the function's index.
/// Instantiates the module first if it is not yet.
pub fn closure(
    k: &mut Kernel,
    domains: &Domains,
    task: TaskId,
    owner: DomainId,
    symbol: &Symbol,
    kind: Kind,
) -> Result<u64, Error> {
    let _ = k;
    // SAFETY: the lock is held (we have `k`); no other reference to the modules is live.
    let e = unsafe { exts() };
    let slot = e
        .list
        .iter()
        .position(|s| s.as_ref().is_some_and(|x| x.domain == owner))
        .ok_or(Error::NotFound)?;
    crate::heap::bounded(|| instantiate(&mut e.list, slot, domains, task, 0))?;
    let ext = e
        .list
        .get_mut(slot)
        .and_then(Option::as_mut)
        .ok_or(Error::NotFound)?;
    let Some((store, instance)) = ext.store.as_deref() else {
        return Err(Error::NotFound);
    };
    let fname = core::str::from_utf8(symbol.name.as_bytes()).map_err(|_| Error::BadFormat)?;
    if let Some(i) = fast_index(ext, symbol, kind) {
        return Ok((slot as u64) << 32 | FAST_BIT | i as u64);
    }
    let index = crate::heap::bounded(|| -> Result<usize, Error> {
        Ok(match kind {
            Kind::Syscall => {
                let f = instance
                    .get_typed_func::<(i64, i64, i64, i64), i64>(store, fname)
                    .map_err(|_| Error::InvalidArgument)?;
                ext.sys_funcs.try_reserve(1).map_err(|_| Error::NoMemory)?;
                ext.sys_funcs.push(f);
                ext.sys_funcs.len() - 1
            }
            Kind::Test | Kind::Reclaim => {
                let f = instance
                    .get_typed_func::<i64, i64>(store, fname)
                    .map_err(|_| Error::InvalidArgument)?;
                ext.test_funcs.try_reserve(1).map_err(|_| Error::NoMemory)?;
                ext.test_funcs.push(f);
                ext.test_funcs.len() - 1
            }
            Kind::Fault => {
                let f = instance
                    .get_typed_func::<(i64, i64), i64>(store, fname)
                    .map_err(|_| Error::InvalidArgument)?;
                ext.fault_funcs
                    .try_reserve(1)
                    .map_err(|_| Error::NoMemory)?;
                ext.fault_funcs.push(f);
                ext.fault_funcs.len() - 1
            }
            Kind::Strand => {
                let f = instance
                    .get_typed_func::<(i64, i64), i64>(store, fname)
                    .map_err(|_| Error::InvalidArgument)?;
                ext.strand_funcs
                    .try_reserve(1)
                    .map_err(|_| Error::NoMemory)?;
                ext.strand_funcs.push(f);
                ext.strand_funcs.len() - 1
            }
        })
    })?;
    Ok((slot as u64) << 32 | index as u64)
}

/// The index of the function the tier runs for `symbol` (an event of kind `kind`), if it
/// can: translated, its type the event's, and every import it calls bound to a kernel
/// procedure the tier calls directly ([`FastHost`]).
fn fast_index(ext: &Ext, symbol: &Symbol, kind: Kind) -> Option<usize> {
    let fast = ext.fast.as_deref()?;
    let m = &fast.module;
    // By name: `wasmi` lists a module's exports in an order of its own.
    let func = m.export_named(symbol.name.as_bytes())?;
    let f = m.func(func)?;
    let params = match kind {
        Kind::Syscall => 4,
        Kind::Test | Kind::Reclaim => 1,
        Kind::Fault | Kind::Strand => 2,
    };
    // Every parameter and the result an `i64` (as the typed functions are).
    if f.params != params || f.results != 1 || symbol.sig.wide != (1 << (params + 1)) - 1 {
        return None;
    }
    if f.memory && ext.memory.is_none() {
        return None;
    }
    for i in 0..tier::IMPORTS_MAX {
        if f.imports & (1 << i) != 0 && !direct(*fast.hosts.get(i)?) {
            return None;
        }
    }
    (func as usize).checked_sub(m.imports.len())
}

/// Whether the tier calls kernel procedure `target` directly.
fn direct(target: u64) -> bool {
    matches!(target, K_TASK_ID | K_SECRET) || super::translation::is_target(target)
}

/// Deepest chain of modules instantiated for one another (a module's imports bound to
/// another module's exports, and so on): a cycle of such bindings is refused at this depth.
pub const CALL_DEPTH_MAX: usize = 4;

/// An import bound to another module's export: the callee's slot and domain, and the
/// function.
#[derive(Clone, Copy)]
struct Callee {
    slot: usize,
    domain: DomainId,
    func: wasmi::Func,
}

/// Instantiates the module in `list[slot]` (task `task`'s) if it is not yet: links the
/// imports its domain resolved, and nothing else. An import bound to another module's
/// export (a `Resolve` with that module's domain as the source, which needs a capability
/// for it) is linked to a call into that module ([`cross_call`]), which is instantiated
/// first, at most [`CALL_DEPTH_MAX`] deep (`NotSupported` past it: a cycle).
fn instantiate(
    list: &mut [Option<Ext>],
    slot: usize,
    domains: &Domains,
    task: TaskId,
    depth: usize,
) -> Result<(), Error> {
    let ext = list
        .get(slot)
        .and_then(Option::as_ref)
        .ok_or(Error::NotFound)?;
    if ext.store.is_some() {
        return Ok(());
    }
    if depth >= CALL_DEPTH_MAX {
        return Err(Error::NotSupported);
    }
    let owner = ext.domain;
    let d = domains.get(Holder::Task(task), owner)?;
    // The modules it calls, first: their functions are what the imports link to.
    let mut callees: Vec<Option<Callee>> = Vec::new();
    callees
        .try_reserve_exact(d.imports().len())
        .map_err(|_| Error::NoMemory)?;
    for (imp, bound) in d.imports() {
        let bound = bound.ok_or(Error::NotFound)?;
        let Some(cs) = list
            .iter()
            .position(|x| x.as_ref().is_some_and(|x| x.domain == bound.domain))
        else {
            callees.push(None);
            continue;
        };
        instantiate(list, cs, domains, task, depth + 1)?;
        let callee = list
            .get(cs)
            .and_then(Option::as_ref)
            .ok_or(Error::NotFound)?;
        let (store, instance) = callee.store.as_deref().ok_or(Error::NotFound)?;
        let name = callee
            .module
            .exports()
            .nth(usize::try_from(bound.target).map_err(|_| Error::NotFound)?)
            .map(|x| x.name())
            .ok_or(Error::NotFound)?;
        if name.as_bytes() != imp.name.as_bytes() {
            return Err(Error::NotFound);
        }
        let func = instance.get_func(store, name).ok_or(Error::NotFound)?;
        callees.push(Some(Callee {
            slot: cs,
            domain: bound.domain,
            func,
        }));
    }
    let ext = list
        .get_mut(slot)
        .and_then(Option::as_mut)
        .ok_or(Error::NotFound)?;
    let engine = ext.engine.clone();
    let mut linker = Linker::<Host>::new(&engine);
    for (((imp, bound), callee), mi) in d
        .imports()
        .iter()
        .zip(callees.iter())
        .zip(ext.module.imports())
    {
        let bound = bound.ok_or(Error::NotFound)?;
        let module =
            core::str::from_utf8(imp.interface.as_bytes()).map_err(|_| Error::BadFormat)?;
        let name = core::str::from_utf8(imp.name.as_bytes()).map_err(|_| Error::BadFormat)?;
        let r = match (callee, bound.target) {
            (Some(c), _) => {
                let ExternType::Func(ft) = mi.ty() else {
                    return Err(Error::BadFormat);
                };
                let c = *c;
                linker
                    .func_new(module, name, ft.clone(), move |caller, params, results| {
                        cross_call(caller, c, params, results)
                    })
                    .map(|_| ())
            }
            (None, K_CONSOLE_WRITE) => linker.func_wrap(module, name, console_write).map(|_| ()),
            (None, K_TASK_ID) => linker
                .func_wrap(module, name, |c: Caller<'_, Host>| -> i64 {
                    c.data().task as i64
                })
                .map(|_| ()),
            (None, K_SECRET) => linker.func_wrap(module, name, || -> i64 { 42 }).map(|_| ()),
            (None, t) if super::translation::is_target(t) => {
                link_memory(&mut linker, module, name, t)
            }
            (None, _) => return Err(Error::NotSupported),
        };
        r.map_err(|_| Error::BadFormat)?;
    }
    let limits = StoreLimitsBuilder::new()
        .memory_size(MEMORY_PAGES_MAX as usize * 65536)
        .memories(1)
        .tables(1)
        .table_elements(1024)
        .instances(1)
        .build();
    let mut store = Store::new(
        &engine,
        Host {
            task,
            limits,
            kernel: core::ptr::null_mut(),
        },
    );
    store.limiter(|h| &mut h.limits);
    store.set_fuel(FUEL).map_err(|_| Error::BadFormat)?;
    let instance = linker
        .instantiate_and_start(&mut store, &ext.module)
        .map_err(|err| {
            crate::arch::serial::kprintln!(
                "[kernel] extension of task {task} not instantiated: {err}"
            );
            Error::NoMemory
        })?;
    ext.memory = instance.get_memory(&store, "memory");
    if let Some(fast) = ext.fast.as_deref_mut() {
        let mut hosts = Vec::new();
        hosts
            .try_reserve_exact(callees.len())
            .map_err(|_| Error::NoMemory)?;
        for ((_, bound), callee) in d.imports().iter().zip(callees.iter()) {
            hosts.push(match (callee, bound) {
                (None, Some(b)) => b.target,
                _ => NOT_HOST,
            });
        }
        fast.hosts = hosts;
        fast.task = task;
    }
    let boxed = kern::fallible::try_box((store, instance)).ok_or(Error::NoMemory)?;
    ext.store = Some(boxed);
    Ok(())
}

/// One call from a module into another module's exported function (SPIN's protected
/// in-kernel call between domains): the callee runs in its own store and linear memory,
/// for the same task and kernel as its caller, on the fuel the caller has left (what it
/// burns is the caller's). A callee that is gone, or already running (a call back into a
/// module on the way), or that traps or runs out of fuel, makes the call trap, which
/// aborts the caller's handler as any trap does.
fn cross_call(
    mut caller: Caller<'_, Host>,
    c: Callee,
    params: &[wasmi::Val],
    results: &mut [wasmi::Val],
) -> Result<(), wasmi::Error> {
    let (task, kernel) = (caller.data().task, caller.data().kernel);
    let fuel = caller.get_fuel()?;
    let mut st = take_store(c.slot, c.domain).ok_or_else(|| wasmi::Error::new("callee busy"))?;
    let (store, _) = &mut *st;
    store.data_mut().task = task;
    store.data_mut().kernel = kernel;
    let r = store
        .set_fuel(fuel)
        .and_then(|()| c.func.call(&mut *store, params, results));
    let left = store.get_fuel().unwrap_or(0);
    store.data_mut().kernel = core::ptr::null_mut();
    put_store(c.slot, c.domain, st);
    caller.set_fuel(left)?;
    r.map_err(|_| wasmi::Error::new("callee aborted"))
}

/// The module in `slot` if it is still the one of domain `domain` (a slot is reused by a
/// later module once its own goes).
fn module_at(e: &mut Exts, slot: usize, domain: DomainId) -> Option<&mut Ext> {
    e.list
        .get_mut(slot)?
        .as_mut()
        .filter(|x| x.domain == domain)
}

/// Takes the store of the module in `slot` (of domain `domain`) out of the list for an
/// invocation; `None` when it is gone, not instantiated, or already running.
fn take_store(slot: usize, domain: DomainId) -> Option<alloc::boxed::Box<(Store<Host>, Instance)>> {
    // SAFETY: under the lock (every invocation is), and no reference into the list is
    // live across an invocation: each takes its store out first ([`Ext::store`]).
    let e = unsafe { exts() };
    module_at(e, slot, domain)?.store.take()
}

/// Puts back what [`take_store`] took (dropped if the module went meanwhile).
fn put_store(slot: usize, domain: DomainId, st: alloc::boxed::Box<(Store<Host>, Instance)>) {
    // SAFETY: as in [`take_store`].
    let e = unsafe { exts() };
    if let Some(x) = module_at(e, slot, domain) {
        x.store = Some(st);
    }
}

/// `baton.console.write(ptr, len)`: prints bytes of the module's own linear memory.
fn console_write(c: Caller<'_, Host>, ptr: i32, len: i32) -> Result<(), wasmi::Error> {
    let len = usize::try_from(len).map_err(|_| wasmi::Error::new("bad length"))?;
    let mut buf = [0u8; WRITE_MAX];
    let out = buf
        .get_mut(..len)
        .ok_or_else(|| wasmi::Error::new("too long"))?;
    let mem = c
        .get_export("memory")
        .and_then(|x| x.into_memory())
        .ok_or_else(|| wasmi::Error::new("no memory"))?;
    mem.read(&c, ptr as u32 as usize, out)
        .map_err(|_| wasmi::Error::new("out of bounds"))?;
    let text = core::str::from_utf8(out).unwrap_or("(not UTF-8)");
    crate::arch::serial::kprintln!("[ext {}] {}", c.data().task, text);
    Ok(())
}

fn slot_of(b: Binding) -> (usize, usize) {
    (
        (b.closure >> 32) as usize,
        (b.closure & 0xffff_ffff) as usize,
    )
}

fn fuel(b: Binding) -> u64 {
    if b.budget == 0 {
        FUEL
    } else {
        b.budget
    }
}

/// Runs one invocation of the module in `slot` for task `task` (with the kernel, for the
/// memory interfaces, when `k` is given) on `fuel`: its store is taken out of the list
/// for the length of `run` ([`take_store`]). `None` when the module is gone or already
/// running; otherwise what `run` gave.
fn invoke<R>(
    slot: usize,
    task: Option<u64>,
    k: Option<&mut Kernel>,
    fuel: u64,
    pick: impl FnOnce(&Ext) -> Option<R::Func>,
    run: R,
) -> Option<Result<R::Out, wasmi::Error>>
where
    R: Run,
{
    let (func, domain) = {
        // SAFETY: under the lock (every raise is); this reference ends in this block.
        let e = unsafe { exts() };
        let ext = e.list.get(slot)?.as_ref()?;
        (pick(ext)?, ext.domain)
    };
    let mut st = take_store(slot, domain)?;
    count(1);
    let (store, _) = &mut *st;
    if let Some(task) = task {
        store.data_mut().task = task;
    }
    store.data_mut().kernel = k.map_or(core::ptr::null_mut(), |k| k as *mut Kernel);
    let r = match store.set_fuel(fuel) {
        Ok(()) => crate::heap::bounded(|| run.run(func, &mut *store)),
        Err(e) => Err(e),
    };
    store.data_mut().kernel = core::ptr::null_mut();
    put_store(slot, domain, st);
    Some(r)
}

/// The kernel procedures a function the tier runs calls, by import: a direct call, its
/// arguments from the frame, no `Caller`, no values boxed.
struct FastHost<'a> {
    k: Option<&'a mut Kernel>,
    task: TaskId,
    hosts: &'a [u64],
}

impl tier::Host for FastHost<'_> {
    fn call(&mut self, import: u32, a: &[u64]) -> Result<u64, tier::Trap> {
        use super::translation as tr;
        let target = *self.hosts.get(import as usize).ok_or(tier::Trap::Host)?;
        let arg = |i: usize| a.get(i).copied().unwrap_or(0);
        let task = self.task;
        match target {
            K_TASK_ID => return Ok(task),
            K_SECRET => return Ok(42),
            tr::K_MARK => {
                tr::op_mark(task);
                return Ok(0);
            }
            _ => {}
        }
        // The memory interfaces need the kernel (a `Strand` handler runs without it).
        let k = self.k.as_deref_mut().ok_or(tier::Trap::Host)?;
        let r = match target {
            tr::K_PROTECT => tr::op_protect(k, task, arg(0), arg(1), arg(2)),
            tr::K_QUERY => tr::op_query(k, task, arg(0)),
            tr::K_ADD => tr::op_add(k, task, arg(0), arg(1), arg(2)),
            tr::K_REMOVE => tr::op_remove(k, task, arg(0), arg(1)),
            tr::K_VFREE => tr::op_vfree(k, task, arg(0), arg(1)),
            tr::K_VALLOC => tr::op_valloc(k, task, arg(0)),
            tr::K_PALLOC => tr::op_palloc(k, task),
            tr::K_PFREE => tr::op_pfree(k, task, arg(0)),
            _ => return Err(tier::Trap::Host),
        };
        Ok(tr::word(r) as u64)
    }
}

/// Runs function `index` of the module in `slot` on the register-form tier, for task
/// `task` (the module's instantiating task if `None`) on `fuel`. Its translation is taken
/// out of the list while it runs, and so is the store when the function uses the linear
/// memory: `None` when the module is gone or already running (as [`invoke`]).
fn run_fast(
    slot: usize,
    index: u64,
    task: Option<u64>,
    k: Option<&mut Kernel>,
    fuel: u64,
    args: &[u64],
) -> Option<Result<u64, tier::Trap>> {
    let (mut fast, domain, memory) = {
        // SAFETY: under the lock (every raise is); this reference ends in this block.
        let e = unsafe { exts() };
        let ext = e.list.get_mut(slot)?.as_mut()?;
        (ext.fast.take()?, ext.domain, ext.memory)
    };
    count(0);
    let r = run_taken(&mut fast, slot, domain, memory, index, task, k, fuel, args);
    // SAFETY: as above; the invocation has ended.
    let e = unsafe { exts() };
    if let Some(x) = module_at(e, slot, domain) {
        x.fast = Some(fast);
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn run_taken(
    fast: &mut Fast,
    slot: usize,
    domain: DomainId,
    memory: Option<wasmi::Memory>,
    index: u64,
    task: Option<u64>,
    k: Option<&mut Kernel>,
    fuel: u64,
    args: &[u64],
) -> Option<Result<u64, tier::Trap>> {
    let Fast {
        module,
        frame,
        task: owner,
        hosts,
    } = fast;
    let f = module.funcs.get(usize::try_from(index).ok()?)?.as_ref()?;
    let mut host = FastHost {
        k,
        task: task.unwrap_or(*owner),
        hosts,
    };
    let mut fuel = fuel;
    let r = if f.memory {
        let mut st = take_store(slot, domain)?;
        let (store, _) = &mut *st;
        let r = match memory {
            Some(m) => tier::run(
                f,
                frame,
                args,
                m.data_mut(&mut *store),
                &mut fuel,
                &mut host,
            ),
            None => Err(tier::Trap::OutOfBounds),
        };
        put_store(slot, domain, st);
        r
    } else {
        tier::run(f, frame, args, &mut [], &mut fuel, &mut host)
    };
    Some(r.map(|v| v.unwrap_or(0)))
}

/// Whether a closure is the tier's: its function's index then.
fn fast_of(b: Binding) -> Option<(usize, u64)> {
    (b.closure & FAST_BIT != 0).then_some(((b.closure >> 32) as usize, b.closure & (FAST_BIT - 1)))
}

/// A kind of invocation: the typed function it calls and how.
trait Run {
    type Func;
    type Out;
    fn run(self, f: Self::Func, store: &mut Store<Host>) -> Result<Self::Out, wasmi::Error>;
}

/// A call of a typed function with these arguments.
struct With<A>(A);

impl<A: wasmi::WasmParams, Res: wasmi::WasmResults> Run
    for (With<A>, core::marker::PhantomData<Res>)
{
    type Func = TypedFunc<A, Res>;
    type Out = Res;
    fn run(self, f: TypedFunc<A, Res>, store: &mut Store<Host>) -> Result<Res, wasmi::Error> {
        f.call(store, self.0 .0)
    }
}

fn with<A, Res>(a: A) -> (With<A>, core::marker::PhantomData<Res>) {
    (With(a), core::marker::PhantomData)
}

/// Runs a module's `Trap.SystemCall` handler: `(number, a0, a1, a2) -> rax`.
pub fn syscall_handler(k: &mut Kernel, b: Binding, c: &Call) -> Option<Option<u64>> {
    if let Some((slot, i)) = fast_of(b) {
        let a = [c.number, c.args[0], c.args[1], c.args[2]];
        return match run_fast(slot, i, Some(c.task), Some(k), fuel(b), &a)? {
            Ok(v) => Some(Some(v)),
            Err(t) => {
                crate::arch::serial::kprintln!(
                    "[kernel] extension handler of task {} aborted: {t:?}",
                    c.task
                );
                None
            }
        };
    }
    let (slot, index) = slot_of(b);
    let args = (
        c.number as i64,
        c.args[0] as i64,
        c.args[1] as i64,
        c.args[2] as i64,
    );
    let r = invoke(
        slot,
        Some(c.task),
        Some(k),
        fuel(b),
        |x| x.sys_funcs.get(index).copied(),
        with::<_, i64>(args),
    )?;
    match r {
        Ok(v) => Some(Some(v as u64)),
        Err(err) => {
            crate::arch::serial::kprintln!(
                "[kernel] extension handler of task {} aborted: {err}",
                c.task
            );
            None
        }
    }
}

/// Runs a module's `Test.Raise` handler.
pub fn test_handler(k: &mut Kernel, b: Binding, a: &u64) -> Option<u64> {
    if let Some((slot, i)) = fast_of(b) {
        return match run_fast(slot, i, None, Some(k), fuel(b), &[*a])? {
            Ok(v) => Some(v),
            Err(t) => {
                crate::arch::serial::kprintln!("[kernel] extension handler aborted: {t:?}");
                None
            }
        };
    }
    let (slot, index) = slot_of(b);
    let r = invoke(
        slot,
        None,
        Some(k),
        fuel(b),
        |x| x.test_funcs.get(index).copied(),
        with::<_, i64>(*a as i64),
    )?;
    match r {
        Ok(v) => Some(v as u64),
        Err(err) => {
            crate::arch::serial::kprintln!("[kernel] extension handler aborted: {err}");
            None
        }
    }
}

/// Runs a module's `PhysAddr.Reclaim` handler for its installer's page: `(candidate) ->
/// nominee` (the candidate itself: no other page named). The same call as a `Test.Raise`
/// handler's (one `(i64) -> i64` function, of the installer's own module), made through
/// [`test_handler`] so that the interpreter's call is instantiated once (a second
/// instantiation cost `spin.dispatch.1.wasm` 22 instructions).
pub fn reclaim_handler(
    k: &mut Kernel,
    b: Binding,
    c: &super::reclaim::Candidate,
) -> Option<Option<u64>> {
    let v = test_handler(k, b, &c.va)?;
    Some((v != c.va).then_some(v))
}

/// Runs a module's `Translation` handler: `(addr, access) -> resolved`, for the task whose
/// fault it is (its installer's: the event's key).
pub fn fault_handler(
    k: &mut Kernel,
    b: Binding,
    f: &kern::spin::translation::Fault,
) -> Option<bool> {
    if let Some((slot, i)) = fast_of(b) {
        let a = [f.addr, kern::spin::translation::access_code(f.access)];
        return match run_fast(slot, i, Some(f.task), Some(k), fuel(b), &a)? {
            Ok(v) => Some(v != 0),
            Err(t) => {
                crate::arch::serial::kprintln!(
                    "[kernel] extension handler of task {} aborted: {t:?}",
                    f.task
                );
                None
            }
        };
    }
    let (slot, index) = slot_of(b);
    let args = (
        f.addr as i64,
        kern::spin::translation::access_code(f.access) as i64,
    );
    let r = invoke(
        slot,
        Some(f.task),
        Some(k),
        fuel(b),
        |x| x.fault_funcs.get(index).copied(),
        with::<_, i64>(args),
    )?;
    match r {
        Ok(v) => Some(v != 0),
        Err(err) => {
            crate::arch::serial::kprintln!(
                "[kernel] extension handler of task {} aborted: {err}",
                f.task
            );
            None
        }
    }
}

/// Runs a module's `Strand` handler for `s`: `(vp, thread) -> verdict` (any verdict but
/// `STRAND_VETO` proceeds).
pub fn strand_handler(_k: &mut Kernel, b: Binding, s: &super::strand::Strand) -> Option<u64> {
    if let Some((slot, i)) = fast_of(b) {
        return match run_fast(slot, i, Some(s.task), None, fuel(b), &[s.vp, s.thread])? {
            Ok(v) => Some(u64::from(v == baton_abi::spin::STRAND_VETO)),
            Err(t) => {
                crate::arch::serial::kprintln!(
                    "[kernel] Strand handler of task {} aborted: {t:?}",
                    s.task
                );
                None
            }
        };
    }
    let (slot, index) = slot_of(b);
    let r = invoke(
        slot,
        Some(s.task),
        None,
        fuel(b),
        |x| x.strand_funcs.get(index).copied(),
        with::<_, i64>((s.vp as i64, s.thread as i64)),
    )?;
    match r {
        Ok(v) => Some(u64::from(v as u64 == baton_abi::spin::STRAND_VETO)),
        Err(err) => {
            crate::arch::serial::kprintln!(
                "[kernel] Strand handler of task {} aborted: {err}",
                s.task
            );
            None
        }
    }
}

/// The kernel and task of an invocation, for a memory interface import.
fn invocation(c: &mut Caller<'_, Host>) -> Result<(&'static mut Kernel, TaskId), wasmi::Error> {
    let h = c.data();
    let task = h.task;
    let k = h.kernel;
    if k.is_null() {
        return Err(wasmi::Error::new("no invocation"));
    }
    // SAFETY: `kernel` is set only for the length of one invocation, from the `&mut
    // Kernel` its handler was called with, which is not used while the module runs (the
    // handler is inside `call`); the lock is held throughout. The reference is used only
    // inside this import's call.
    Ok((unsafe { &mut *k }, task))
}

/// Links import `module.name` to the memory interface procedure `target`
/// (`super::translation::K_*`); each acts on the invocation's task's own address space
/// and returns the value or a negative error code.
fn link_memory(
    linker: &mut Linker<Host>,
    module: &str,
    name: &str,
    target: u64,
) -> Result<(), wasmi::errors::LinkerError> {
    use super::translation as tr;
    match target {
        tr::K_PROTECT => linker
            .func_wrap(
                module,
                name,
                |mut c: Caller<'_, Host>,
                 va: i64,
                 len: i64,
                 prot: i64|
                 -> Result<i64, wasmi::Error> {
                    let (k, task) = invocation(&mut c)?;
                    Ok(tr::word(tr::op_protect(
                        k,
                        task,
                        va as u64,
                        len as u64,
                        prot as u64,
                    )))
                },
            )
            .map(|_| ()),
        tr::K_QUERY => linker
            .func_wrap(
                module,
                name,
                |mut c: Caller<'_, Host>, va: i64| -> Result<i64, wasmi::Error> {
                    let (k, task) = invocation(&mut c)?;
                    Ok(tr::word(tr::op_query(k, task, va as u64)))
                },
            )
            .map(|_| ()),
        tr::K_ADD => linker
            .func_wrap(
                module,
                name,
                |mut c: Caller<'_, Host>,
                 va: i64,
                 page: i64,
                 prot: i64|
                 -> Result<i64, wasmi::Error> {
                    let (k, task) = invocation(&mut c)?;
                    Ok(tr::word(tr::op_add(
                        k,
                        task,
                        va as u64,
                        page as u64,
                        prot as u64,
                    )))
                },
            )
            .map(|_| ()),
        tr::K_REMOVE | tr::K_VFREE => {
            let op = if target == tr::K_VFREE {
                tr::op_vfree
            } else {
                tr::op_remove
            };
            linker
                .func_wrap(
                    module,
                    name,
                    move |mut c: Caller<'_, Host>,
                          va: i64,
                          len: i64|
                          -> Result<i64, wasmi::Error> {
                        let (k, task) = invocation(&mut c)?;
                        Ok(tr::word(op(k, task, va as u64, len as u64)))
                    },
                )
                .map(|_| ())
        }
        tr::K_VALLOC => linker
            .func_wrap(
                module,
                name,
                |mut c: Caller<'_, Host>, len: i64| -> Result<i64, wasmi::Error> {
                    let (k, task) = invocation(&mut c)?;
                    Ok(tr::word(tr::op_valloc(k, task, len as u64)))
                },
            )
            .map(|_| ()),
        tr::K_PALLOC => linker
            .func_wrap(
                module,
                name,
                |mut c: Caller<'_, Host>| -> Result<i64, wasmi::Error> {
                    let (k, task) = invocation(&mut c)?;
                    Ok(tr::word(tr::op_palloc(k, task)))
                },
            )
            .map(|_| ()),
        tr::K_PFREE => linker
            .func_wrap(
                module,
                name,
                |mut c: Caller<'_, Host>, h: i64| -> Result<i64, wasmi::Error> {
                    let (k, task) = invocation(&mut c)?;
                    Ok(tr::word(tr::op_pfree(k, task, h as u64)))
                },
            )
            .map(|_| ()),
        _ => linker
            .func_wrap(module, name, |c: Caller<'_, Host>| {
                tr::op_mark(c.data().task);
            })
            .map(|_| ()),
    }
}
