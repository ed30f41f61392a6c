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
use kern::spin::event::{Binding, HandlerFn};
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
    /// bound to (once instantiated). The closures of the handlers it runs point at it.
    fast: Option<FastBox>,
    /// The linear memory, for the tier's functions that use it.
    memory: Option<wasmi::Memory>,
    _charge: Charge,
}

/// A module's register-form tier.
///
/// The closure of a handler the tier runs points at it ([`tier_closure`]): an
/// invocation reaches its translation, frame and import table with no look-up in the
/// module list. It lives as long as its module's [`Ext`], and no handler outlives its
/// module: a domain's handlers are removed, in every family, before its module
/// ([`forget`], called last by the family's release of a domain).
struct Fast {
    module: tier::Module,
    /// Set while one of its functions runs: a call into the module from under one of
    /// its own invocations (a `PhysAddr.Reclaim` raised under a handler of the same
    /// module) is refused, as `wasmi`'s is by the store being out of the list.
    busy: core::cell::Cell<bool>,
    /// What an invocation uses: reached only by the invocation that set `busy`, or by
    /// the installation paths (system calls, never under a handler) while none runs.
    run: core::cell::UnsafeCell<FastRun>,
}

struct FastRun {
    /// The registers its functions run in.
    frame: tier::Regs,
    /// The task that instantiated it: the task of an invocation that names none (a
    /// `Test.Raise` handler's).
    task: u64,
    /// Each import's kernel procedure (`K_*`), or `NOT_HOST` for an import bound to
    /// another module's export (its callers stay on `wasmi`).
    hosts: Vec<u64>,
    /// The linear memory, for the functions that use it (their store is taken out of
    /// the list while they run), and where the module is in the list.
    memory: Option<wasmi::Memory>,
    slot: usize,
    domain: DomainId,
}

/// The owner of a module's [`Fast`], which handlers' closures point at (so it is not a
/// `Box`, whose uniqueness those pointers would break).
struct FastBox(core::ptr::NonNull<Fast>);

impl FastBox {
    fn new(module: tier::Module, task: u64) -> Option<FastBox> {
        let b = kern::fallible::try_box(Fast {
            module,
            busy: core::cell::Cell::new(false),
            run: core::cell::UnsafeCell::new(FastRun {
                frame: [0; tier::REGS],
                task,
                hosts: Vec::new(),
                memory: None,
                slot: 0,
                domain: DomainId(0),
            }),
        })?;
        Some(FastBox(core::ptr::NonNull::from(alloc::boxed::Box::leak(
            b,
        ))))
    }

    fn get(&self) -> &Fast {
        // SAFETY: the pointer is a leaked box's, freed only by `drop` below.
        unsafe { self.0.as_ref() }
    }

    /// What its invocations use, for the installation paths.
    fn run_mut(&mut self) -> &mut FastRun {
        // SAFETY: only a system call changes it (no invocation runs: a handler makes no
        // system call, and none of the module's runs under the big lock meanwhile).
        unsafe { &mut *self.get().run.get() }
    }
}

impl Drop for FastBox {
    fn drop(&mut self) {
        // SAFETY: made by `Box::leak` in `new`; no handler names it any more (see
        // [`Fast`]), so this is the last use.
        drop(unsafe { alloc::boxed::Box::from_raw(self.0.as_ptr()) });
    }
}

const NOT_HOST: u64 = u64::MAX;

/// A handler's closure that names a module's [`Fast`] and its defined function `index`:
/// the pointer's low 48 bits (a kernel address, which its upper bits sign-extend) and
/// the index above them. `None` when the index does not fit (such a function stays on
/// `wasmi`).
fn tier_closure(fast: &Fast, index: usize) -> Option<u64> {
    let ptr = fast as *const Fast as u64;
    let c = (u64::try_from(index).ok().filter(|&i| i < 1 << 16)? << 48) | (ptr & ((1 << 48) - 1));
    (tier_of(c) == (ptr as *const Fast, index)).then_some(c)
}

/// What [`tier_closure`] encoded.
#[inline(always)]
fn tier_of(c: u64) -> (*const Fast, usize) {
    (
        (((c << 16) as i64) >> 16) as u64 as *const Fast,
        (c >> 48) as usize,
    )
}

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
    let translated = match tier::Module::translate(&bytes) {
        Ok(m) => Some(m),
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
    let mut fast = match translated {
        Some(m) => Some(FastBox::new(m, task).ok_or(Error::NoMemory)?),
        None => None,
    };
    let domain = domains.create(Holder::Task(task), Image { exports, imports })?;
    let at = e
        .list
        .iter()
        .position(Option::is_none)
        .unwrap_or(e.list.len());
    if let Some(f) = fast.as_mut() {
        let run = f.run_mut();
        run.slot = at;
        run.domain = domain;
    }
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
    match e.list.get_mut(at) {
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

/// A handler's closure: one the register-form tier runs (its module's [`Fast`] and
/// function), or one `wasmi` runs (the module's slot and the typed function's index).
#[derive(Clone, Copy)]
pub enum Closure {
    Tier(u64),
    Wasmi(u64),
}

impl Closure {
    /// The procedure to install with its word: `tier` (one of this module's `*_tier`) for
    /// the tier's closures, `interp` (the matching `*_handler`) for `wasmi`'s.
    pub fn pick<A, R>(
        self,
        tier: HandlerFn<Kernel, A, R>,
        interp: HandlerFn<Kernel, A, R>,
    ) -> (HandlerFn<Kernel, A, R>, u64) {
        match self {
            Closure::Tier(c) => (tier, c),
            Closure::Wasmi(c) => (interp, c),
        }
    }
}

/// The closure of a handler that runs `symbol` of domain `owner` (a module of task
/// `task`'s) for an event of kind `kind`. Instantiates the module first if it is not yet.
pub fn closure(
    k: &mut Kernel,
    domains: &Domains,
    task: TaskId,
    owner: DomainId,
    symbol: &Symbol,
    kind: Kind,
) -> Result<Closure, Error> {
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
    if let Some(c) = fast_index(ext, symbol, kind)
        .and_then(|i| ext.fast.as_ref().and_then(|f| tier_closure(f.get(), i)))
    {
        return Ok(Closure::Tier(c));
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
    Ok(Closure::Wasmi((slot as u64) << 32 | index as u64))
}

/// The index of the function the tier runs for `symbol` (an event of kind `kind`), if it
/// can: translated, its type the event's, and every import it calls bound to a kernel
/// procedure the tier calls directly ([`FastHost`]).
fn fast_index(ext: &Ext, symbol: &Symbol, kind: Kind) -> Option<usize> {
    let fast = ext.fast.as_ref()?.get();
    let m = &fast.module;
    // SAFETY: an installation (a system call): no invocation of the module runs.
    let hosts = unsafe { &(*fast.run.get()).hosts };
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
        if f.imports & (1 << i) != 0 && !direct(*hosts.get(i)?) {
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
    if let Some(fast) = ext.fast.as_mut() {
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
        let run = fast.run_mut();
        run.hosts = hosts;
        run.task = task;
        run.memory = ext.memory;
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

impl FastHost<'_> {
    /// Import `import` with its arguments (those past its arity 0). `Translation.Protect`,
    /// the one import on the protection fault's path (an Appel–Li handler's whole work), is
    /// tested first.
    #[inline(never)]
    fn dispatch(&mut self, import: u32, a0: u64, a1: u64, a2: u64) -> Result<u64, tier::Trap> {
        use super::translation as tr;
        let target = *self.hosts.get(import as usize).ok_or(tier::Trap::Host)?;
        let task = self.task;
        match target {
            tr::K_PROTECT => {
                let k = self.k.as_deref_mut().ok_or(tier::Trap::Host)?;
                return Ok(tr::word(tr::op_protect(k, task, a0, a1, a2)) as u64);
            }
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
            tr::K_QUERY => tr::op_query(k, task, a0),
            tr::K_ADD => tr::op_add(k, task, a0, a1, a2),
            tr::K_REMOVE => tr::op_remove(k, task, a0, a1),
            tr::K_VFREE => tr::op_vfree(k, task, a0, a1),
            tr::K_VALLOC => tr::op_valloc(k, task, a0),
            tr::K_PALLOC => tr::op_palloc(k, task),
            tr::K_PFREE => tr::op_pfree(k, task, a0),
            _ => return Err(tier::Trap::Host),
        };
        Ok(tr::word(r) as u64)
    }
}

impl tier::Host for FastHost<'_> {
    fn call(&mut self, import: u32, a: &[u64]) -> Result<u64, tier::Trap> {
        let arg = |i: usize| a.get(i).copied().unwrap_or(0);
        self.dispatch(import, arg(0), arg(1), arg(2))
    }

    /// The arguments straight from the interpreter's array, no slice made. The slots past
    /// `n` hold whatever the frame had, and no procedure reads them: `n` is the import's
    /// arity, which linking checked against the kernel procedure's type (a module that
    /// declares an import with another type is refused when it is installed).
    #[inline]
    fn call3(&mut self, import: u32, a: [u64; tier::CALL_ARGS], _n: u8) -> Result<u64, tier::Trap> {
        let [a0, a1, a2] = a;
        self.dispatch(import, a0, a1, a2)
    }
}

/// Runs the function a tier closure names (`b.closure`, [`tier_closure`]) for task
/// `task` (the module's instantiating task if `None`) on the binding's fuel. The store is
/// taken out of the list while a function that uses the linear memory runs (as for
/// `wasmi`). `None` when the module is already running (a call from under one of its own
/// invocations) or its store is out.
#[inline(always)]
fn run_tier(
    b: Binding,
    task: Option<u64>,
    k: Option<&mut Kernel>,
    args: &[u64],
) -> Option<Result<u64, tier::Trap>> {
    let (fast, index) = tier_of(b.closure);
    // SAFETY: a tier closure points at its module's `Fast`, which outlives the handler
    // (see [`Fast`]); the reference is shared, and every change goes through its cells.
    let fast = unsafe { &*fast };
    if fast.busy.replace(true) {
        return None;
    }
    count(0);
    // SAFETY: `busy` was clear and this invocation set it: no other reference to `run`
    // is live (an installation path runs only from a system call, never under a handler).
    let run = unsafe { &mut *fast.run.get() };
    let r = run_tier_in(&fast.module, run, index, task, k, fuel(b), args);
    fast.busy.set(false);
    r
}

#[inline(always)]
fn run_tier_in(
    module: &tier::Module,
    run: &mut FastRun,
    index: usize,
    task: Option<u64>,
    k: Option<&mut Kernel>,
    fuel: u64,
    args: &[u64],
) -> Option<Result<u64, tier::Trap>> {
    let f = module.funcs.get(index)?.as_ref()?;
    let FastRun {
        frame,
        task: owner,
        hosts,
        memory,
        slot,
        domain,
    } = run;
    let mut host = FastHost {
        k,
        task: task.unwrap_or(*owner),
        hosts,
    };
    let mut fuel = fuel;
    // The parameters straight into the frame (`args` is the tier procedure's array: the
    // copy is a store each).
    for (d, a) in frame.iter_mut().zip(args.iter()) {
        *d = *a;
    }
    let r = if f.memory {
        let mut st = take_store(*slot, *domain)?;
        let (store, _) = &mut *st;
        let r = match memory {
            Some(m) => tier::exec(f, frame, m.data_mut(&mut *store), &mut fuel, &mut host),
            None => Err(tier::Trap::OutOfBounds),
        };
        put_store(*slot, *domain, st);
        r
    } else {
        tier::exec(f, frame, &mut [], &mut fuel, &mut host)
    };
    Some(r)
}

/// A tier handler's invocation that trapped: said on the console (the dispatcher removes
/// the handler and tells its installer).
#[cold]
#[inline(never)]
fn tier_aborted(what: &str, task: Option<u64>, t: tier::Trap) {
    match task {
        Some(task) => {
            crate::arch::serial::kprintln!("[kernel] {what} handler of task {task} aborted: {t:?}")
        }
        None => crate::arch::serial::kprintln!("[kernel] {what} handler aborted: {t:?}"),
    }
}

/// A module's `Trap.SystemCall` handler on the register-form tier.
pub fn syscall_tier(k: &mut Kernel, b: Binding, c: &Call) -> Option<Option<u64>> {
    let a = [c.number, c.args[0], c.args[1], c.args[2]];
    match run_tier(b, Some(c.task), Some(k), &a)? {
        Ok(v) => Some(Some(v)),
        Err(t) => {
            tier_aborted("extension", Some(c.task), t);
            None
        }
    }
}

/// A module's `Test.Raise` handler on the register-form tier.
pub fn test_tier(k: &mut Kernel, b: Binding, a: &u64) -> Option<u64> {
    match run_tier(b, None, Some(k), &[*a])? {
        Ok(v) => Some(v),
        Err(t) => {
            tier_aborted("extension", None, t);
            None
        }
    }
}

/// A module's `PhysAddr.Reclaim` handler on the register-form tier (see
/// [`reclaim_handler`]).
pub fn reclaim_tier(
    k: &mut Kernel,
    b: Binding,
    c: &super::reclaim::Candidate,
) -> Option<Option<u64>> {
    let v = test_tier(k, b, &c.va)?;
    Some((v != c.va).then_some(v))
}

/// A module's `Translation` handler on the register-form tier.
pub fn fault_tier(k: &mut Kernel, b: Binding, f: &kern::spin::translation::Fault) -> Option<bool> {
    let a = [f.addr, kern::spin::translation::access_code(f.access)];
    match run_tier(b, Some(f.task), Some(k), &a)? {
        Ok(v) => Some(v != 0),
        Err(t) => {
            tier_aborted("extension", Some(f.task), t);
            None
        }
    }
}

/// A module's `Strand` handler on the register-form tier (no kernel: the memory
/// interfaces trap).
pub fn strand_tier(_k: &mut Kernel, b: Binding, s: &super::strand::Strand) -> Option<u64> {
    match run_tier(b, Some(s.task), None, &[s.vp, s.thread])? {
        Ok(v) => Some(u64::from(v == baton_abi::spin::STRAND_VETO)),
        Err(t) => {
            tier_aborted("Strand", Some(s.task), t);
            None
        }
    }
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
