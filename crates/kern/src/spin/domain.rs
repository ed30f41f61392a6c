//! Logical protection domains and the in-kernel name server (SPIN, section 3.1).
//!
//! A [`Domain`] is a set of names: the interfaces it **exports** (each a named list of
//! typed symbols) and the symbols it **imports**, each unresolved until a `Resolve` binds
//! it. Domains are named by capabilities: a holder (a task, the kernel, or a combined
//! domain that contains it) may use a domain only while it holds it, and every operation
//! checks that first, so a domain id the holder was not given is as good as no id
//! (`NotFound`, the same answer as for an id that never existed).
//!
//! - [`Domains::create`] makes a domain from an [`Image`] the kernel has validated (for
//!   a WebAssembly module: its imports and exports, typed).
//! - [`Domains::resolve`] binds the target's unresolved imports to matching symbols
//!   (same interface name, symbol name and signature) of interfaces the source exports;
//!   it never adds exports. A symbol of the right name but another signature stays
//!   unresolved (a type error is a link error).
//! - [`Domains::combine`] makes a domain that exports what two domains export (it holds
//!   both, so they live as long as it does).
//! - [`NameServer`] maps an interface name to the domain that exports it and an
//!   authorisation procedure called with the importer's identity at each import.
//!
//! # Invariants
//! - A domain lives while it has a holder; a combined domain holds its members.
//! - Names are at most [`NAME_MAX`] bytes; a domain has at most [`MAX_SYMBOLS`] imports and
//!   [`MAX_SYMBOLS`] exported symbols, and every table grows fallibly (`NoMemory`).

use crate::slab::{Key, Slab};
use alloc::vec::Vec;
use baton_abi::Error;

/// Longest interface or symbol name.
pub const NAME_MAX: usize = 32;
/// Most imports, and most exported symbols, of one domain.
pub const MAX_SYMBOLS: usize = 64;
/// Most holders of one domain.
pub const MAX_HOLDERS: usize = 64;

/// A short name, held inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name {
    len: u8,
    bytes: [u8; NAME_MAX],
}

impl Name {
    /// `TooLarge` past [`NAME_MAX`] bytes, `InvalidArgument` when empty.
    pub fn new(s: &[u8]) -> Result<Name, Error> {
        if s.is_empty() {
            return Err(Error::InvalidArgument);
        }
        let mut bytes = [0; NAME_MAX];
        bytes
            .get_mut(..s.len())
            .ok_or(Error::TooLarge)?
            .copy_from_slice(s);
        Ok(Name {
            len: s.len() as u8,
            bytes,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

impl core::fmt::Debug for Name {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{:?}",
            core::str::from_utf8(self.as_bytes()).unwrap_or("?")
        )
    }
}

/// A procedure's type: parameter and result counts, and which of them (parameters
/// first, bit 0 up, then results) are 64-bit integers rather than 32-bit ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sig {
    pub params: u8,
    pub results: u8,
    pub wide: u16,
}

impl Sig {
    /// Most parameters and results together.
    pub const MAX: usize = 16;
}

/// An exported symbol: its name, type, and what it stands for (`target`, the exporter's
/// own number: for a built-in interface the kernel's function, for a module the index of
/// its exported function).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: Name,
    pub sig: Sig,
    pub target: u64,
}

/// An exported interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: Name,
    pub symbols: Vec<Symbol>,
}

/// An import: which interface, which symbol, of what type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Import {
    pub interface: Name,
    pub name: Name,
    pub sig: Sig,
}

/// What a validated extension image declares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    pub exports: Vec<Interface>,
    pub imports: Vec<Import>,
}

/// What an import was bound to: the exporting domain and the symbol's target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub domain: DomainId,
    pub target: u64,
}

/// A domain's capability name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DomainId(pub u64);

/// Who holds a domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    Kernel,
    Task(u64),
    Domain(DomainId),
}

/// A domain.
#[derive(Debug)]
pub struct Domain {
    exports: Vec<Interface>,
    imports: Vec<(Import, Option<Bound>)>,
    members: Vec<DomainId>,
    holders: Vec<Holder>,
    /// The task that created it (the one charged for it), if any.
    pub creator: Option<u64>,
}

impl Domain {
    /// The imports with what each is bound to.
    pub fn imports(&self) -> &[(Import, Option<Bound>)] {
        &self.imports
    }

    /// The interfaces it exports itself (a combined domain's come from its members).
    pub fn own_exports(&self) -> &[Interface] {
        &self.exports
    }

    /// Whether every import is bound.
    pub fn resolved(&self) -> bool {
        self.imports.iter().all(|(_, b)| b.is_some())
    }
}

/// Every domain.
#[derive(Default)]
pub struct Domains {
    slab: Slab<Domain>,
}

fn try_vec<T>(n: usize) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::NoMemory)?;
    Ok(v)
}

impl Domains {
    pub const fn new() -> Domains {
        Domains { slab: Slab::new() }
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// The domain `id` if `who` holds it.
    pub fn get(&self, who: Holder, id: DomainId) -> Result<&Domain, Error> {
        self.slab
            .get(Key(id.0))
            .filter(|d| d.holders.contains(&who))
            .ok_or(Error::NotFound)
    }

    /// `Create`: a domain from `image` (validated by the caller), held by `who`.
    /// `TooLarge` past [`MAX_SYMBOLS`]; `NoMemory`.
    pub fn create(&mut self, who: Holder, image: Image) -> Result<DomainId, Error> {
        let nsym: usize = image.exports.iter().map(|i| i.symbols.len()).sum();
        if nsym > MAX_SYMBOLS || image.imports.len() > MAX_SYMBOLS {
            return Err(Error::TooLarge);
        }
        let mut imports = try_vec(image.imports.len())?;
        imports.extend(image.imports.iter().map(|i| (*i, None)));
        let mut holders = try_vec(1)?;
        holders.push(who);
        let creator = match who {
            Holder::Task(t) => Some(t),
            _ => None,
        };
        self.insert(Domain {
            exports: image.exports,
            imports,
            members: Vec::new(),
            holders,
            creator,
        })
    }

    fn insert(&mut self, d: Domain) -> Result<DomainId, Error> {
        if !self.slab.reserve_one() {
            return Err(Error::NoMemory);
        }
        self.slab
            .insert(d)
            .map(|k| DomainId(k.0))
            .map_err(|_| Error::NoSpace)
    }

    /// Finds an exported symbol `interface.name` of domain `id` or its members.
    fn find(&self, id: DomainId, imp: &Import, depth: u32) -> Option<Symbol> {
        let d = self.slab.get(Key(id.0))?;
        for i in d.exports.iter().filter(|i| i.name == imp.interface) {
            if let Some(s) = i.symbols.iter().find(|s| s.name == imp.name) {
                return Some(*s);
            }
        }
        if depth == 0 {
            return None;
        }
        d.members.iter().find_map(|m| self.find(*m, imp, depth - 1))
    }

    /// The exported symbol `name` of domain `id` (which `who` holds) or of its members, and
    /// the domain that exports it itself. `NotFound` when there is none.
    pub fn find_export(
        &self,
        who: Holder,
        id: DomainId,
        name: &Name,
    ) -> Result<(DomainId, Symbol), Error> {
        self.get(who, id)?;
        self.find_owner(id, name, 8).ok_or(Error::NotFound)
    }

    fn find_owner(&self, id: DomainId, name: &Name, depth: u32) -> Option<(DomainId, Symbol)> {
        let d = self.slab.get(Key(id.0))?;
        for i in &d.exports {
            if let Some(s) = i.symbols.iter().find(|s| s.name == *name) {
                return Some((id, *s));
            }
        }
        if depth == 0 {
            return None;
        }
        d.members
            .iter()
            .find_map(|m| self.find_owner(*m, name, depth - 1))
    }

    /// `Resolve(source, target)`: binds the target's unresolved imports to the source's
    /// exported symbols of the same interface, name and signature; how many it bound.
    /// `who` must hold both (`NotFound`).
    pub fn resolve(
        &mut self,
        who: Holder,
        source: DomainId,
        target: DomainId,
    ) -> Result<usize, Error> {
        self.get(who, source)?;
        self.get(who, target)?;
        let n = self.slab.get(Key(target.0)).map_or(0, |d| d.imports.len());
        let mut bound = 0;
        for i in 0..n {
            let Some((imp, None)) = self
                .slab
                .get(Key(target.0))
                .and_then(|d| d.imports.get(i).copied())
            else {
                continue;
            };
            // Members nest at most as deep as domains were combined; 8 levels is plenty.
            let Some(sym) = self.find(source, &imp, 8) else {
                continue;
            };
            if sym.sig != imp.sig {
                continue;
            }
            if let Some(slot) = self
                .slab
                .get_mut(Key(target.0))
                .and_then(|d| d.imports.get_mut(i))
            {
                slot.1 = Some(Bound {
                    domain: source,
                    target: sym.target,
                });
                bound += 1;
            }
        }
        Ok(bound)
    }

    /// `Combine(a, b)`: a new domain, held by `who`, that exports what `a` and `b` export.
    pub fn combine(&mut self, who: Holder, a: DomainId, b: DomainId) -> Result<DomainId, Error> {
        self.get(who, a)?;
        self.get(who, b)?;
        for m in [a, b] {
            let d = self.slab.get_mut(Key(m.0)).ok_or(Error::NotFound)?;
            if d.holders.len() >= MAX_HOLDERS {
                return Err(Error::NoSpace);
            }
            d.holders.try_reserve(1).map_err(|_| Error::NoMemory)?;
        }
        let mut members = try_vec(2)?;
        members.extend([a, b]);
        let mut holders = try_vec(1)?;
        holders.push(who);
        let id = self.insert(Domain {
            exports: Vec::new(),
            imports: Vec::new(),
            members,
            holders,
            creator: None,
        })?;
        for m in [a, b] {
            if let Some(d) = self.slab.get_mut(Key(m.0)) {
                d.holders.push(Holder::Domain(id));
            }
        }
        Ok(id)
    }

    /// Gives `to` a capability for `id`, which `who` holds.
    pub fn grant(&mut self, who: Holder, id: DomainId, to: Holder) -> Result<(), Error> {
        self.get(who, id)?;
        self.add_holder(id, to)
    }

    fn add_holder(&mut self, id: DomainId, to: Holder) -> Result<(), Error> {
        let d = self.slab.get_mut(Key(id.0)).ok_or(Error::NotFound)?;
        if d.holders.contains(&to) {
            return Ok(());
        }
        if d.holders.len() >= MAX_HOLDERS {
            return Err(Error::NoSpace);
        }
        d.holders.try_reserve(1).map_err(|_| Error::NoMemory)?;
        d.holders.push(to);
        Ok(())
    }

    /// `who` lets go of `id`; the domains that went (their last holder gone), each once, in
    /// `gone` (combined domains let go of their members in turn).
    pub fn release(
        &mut self,
        who: Holder,
        id: DomainId,
        gone: &mut Vec<DomainId>,
    ) -> Result<(), Error> {
        self.get(who, id)?;
        let mut stack: Vec<(Holder, DomainId)> = Vec::new();
        self.release_one(who, id, gone, &mut stack);
        while let Some((w, i)) = stack.pop() {
            self.release_one(w, i, gone, &mut stack);
        }
        Ok(())
    }

    fn release_one(
        &mut self,
        who: Holder,
        id: DomainId,
        gone: &mut Vec<DomainId>,
        stack: &mut Vec<(Holder, DomainId)>,
    ) {
        let Some(d) = self.slab.get_mut(Key(id.0)) else {
            return;
        };
        d.holders.retain(|h| *h != who);
        if !d.holders.is_empty() {
            return;
        }
        if let Some(d) = self.slab.remove(Key(id.0)) {
            if gone.try_reserve(1).is_ok() {
                gone.push(id);
            }
            for m in d.members {
                if stack.try_reserve(1).is_ok() {
                    stack.push((Holder::Domain(id), m));
                }
            }
        }
    }

    /// Every domain task `task` holds (for its end).
    pub fn held_by(&self, task: u64) -> impl Iterator<Item = DomainId> + '_ {
        self.slab
            .iter()
            .filter(move |(_, d)| d.holders.contains(&Holder::Task(task)))
            .map(|(k, _)| DomainId(k.0))
    }
}

/// An authorisation procedure: the importer's identity and the exporter's word.
pub type Authorizer = fn(importer: Holder, word: u64) -> bool;

struct Entry {
    name: Name,
    domain: DomainId,
    authorize: Authorizer,
    word: u64,
}

/// The in-kernel name server: interface names to exporting domains, each with its
/// authorisation procedure.
#[derive(Default)]
pub struct NameServer {
    entries: Vec<Entry>,
}

/// Most names the name server holds.
pub const NAMES_MAX: usize = 256;

impl NameServer {
    pub const fn new() -> NameServer {
        NameServer {
            entries: Vec::new(),
        }
    }

    /// Exports `domain` (which `who` must hold in `domains`) under `name`. `Busy` when
    /// the name is taken, `NoSpace` past [`NAMES_MAX`].
    pub fn export(
        &mut self,
        domains: &Domains,
        who: Holder,
        name: Name,
        domain: DomainId,
        authorize: Authorizer,
        word: u64,
    ) -> Result<(), Error> {
        domains.get(who, domain)?;
        if self.entries.iter().any(|e| e.name == name) {
            return Err(Error::Busy);
        }
        if self.entries.len() >= NAMES_MAX {
            return Err(Error::NoSpace);
        }
        self.entries.try_reserve(1).map_err(|_| Error::NoMemory)?;
        self.entries.push(Entry {
            name,
            domain,
            authorize,
            word,
        });
        Ok(())
    }

    /// Imports `name` for `importer`: its exporter's authoriser decides (`Denied`), then
    /// the importer gets a capability for the domain. `NotFound` for no such name.
    pub fn import(
        &self,
        domains: &mut Domains,
        importer: Holder,
        name: &Name,
    ) -> Result<DomainId, Error> {
        let e = self
            .entries
            .iter()
            .find(|e| e.name == *name)
            .ok_or(Error::NotFound)?;
        if !(e.authorize)(importer, e.word) {
            return Err(Error::Denied);
        }
        domains.add_holder(e.domain, importer)?;
        Ok(e.domain)
    }

    /// Withdraws every name that exports `domain` (it went).
    pub fn forget(&mut self, domain: DomainId) {
        self.entries.retain(|e| e.domain != domain);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
