//! A faster tier for WebAssembly extensions: the functions of a module that use only a
//! small subset of WebAssembly, translated once into a compact register form and run by
//! the small interpreter here.
//!
//! SPIN (Bershad et al., section 3) ran extensions as native code its compiler had
//! certified safe; Baton validates a WebAssembly module with `wasmi` when it is loaded and
//! runs it on `wasmi`'s interpreter. An invocation of `wasmi` and each call it makes into
//! the kernel cost hundreds of instructions of call protocol (a handler of about fifteen
//! WebAssembly instructions pays some 1,000 over a built-in one). This tier removes the
//! protocol for the functions it can take: the module is translated after `wasmi` has
//! validated it ([`Module::translate`]), and the interpreter ([`run`]) keeps no state
//! between invocations but a frame of [`REGS`] words on the stack.
//!
//! # The subset
//! Integer operations on `i32` and `i64`, locals, constants, `select`, `drop`, loads and
//! stores into the linear memory (every access bounds-checked against its size),
//! `memory.size`, `block`, `loop`, `if`/`else` with no or one result, `br`, `br_if`,
//! `br_table` (to labels without a result), `return`, `unreachable`, and direct calls of
//! imported functions (the kernel's procedures, through a table: [`Host`]). A function
//! that uses anything else (floats, globals, calls of its own module's functions,
//! indirect calls, `memory.grow`, block types with parameters), or needs more than
//! [`REGS`] locals and stack slots, or more than [`OPS_MAX`] operations, is not
//! translated and keeps running on `wasmi`.
//!
//! # Bounds
//! Fuel is charged per basic block, before the block runs: one unit for every WebAssembly
//! instruction in it. So an invocation given `fuel` runs at most `fuel` WebAssembly
//! instructions (and may abort before running the last block it could not pay for
//! whole). No allocation happens while a function runs; there is no recursion (calls go
//! only to the host); the frame is [`REGS`] words. Out of fuel, an access outside the
//! linear memory, `unreachable`, a division by zero or an overflowing signed division,
//! or a host procedure's refusal end the invocation with a [`Trap`], as `wasmi`'s traps
//! do.

use alloc::vec::Vec;
use wasmparser::{BlockType, ExternalKind, Operator, Parser, Payload, TypeRef, ValType};

/// Locals and operand stack slots of one function's frame.
pub const REGS: usize = 32;
/// Most operations of one translated function.
pub const OPS_MAX: usize = 4096;
/// Most arguments of an import call whose arguments are read in place ([`Op::CallA`]).
pub const CALL_ARGS: usize = 3;
const _: () = assert!(core::mem::size_of::<Op>() == 16);
/// Most imported functions a module may have for its functions to be translated (a
/// function's imports are kept as a bit mask).
pub const IMPORTS_MAX: usize = 64;

/// Why an invocation ended early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trap {
    /// Its fuel ran out.
    OutOfFuel,
    /// A load or store outside the linear memory.
    OutOfBounds,
    /// `unreachable`.
    Unreachable,
    /// An integer division or remainder by zero.
    DivideByZero,
    /// A signed division of the least value by -1.
    Overflow,
    /// A host procedure refused the call.
    Host,
}

/// Binary integer operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Bin {
    Add32,
    Sub32,
    Mul32,
    DivS32,
    DivU32,
    RemS32,
    RemU32,
    And32,
    Or32,
    Xor32,
    Shl32,
    ShrS32,
    ShrU32,
    Rotl32,
    Rotr32,
    Eq32,
    Ne32,
    LtS32,
    LtU32,
    GtS32,
    GtU32,
    LeS32,
    LeU32,
    GeS32,
    GeU32,
    Add64,
    Sub64,
    Mul64,
    DivS64,
    DivU64,
    RemS64,
    RemU64,
    And64,
    Or64,
    Xor64,
    Shl64,
    ShrS64,
    ShrU64,
    Rotl64,
    Rotr64,
    Eq64,
    Ne64,
    LtS64,
    LtU64,
    GtS64,
    GtU64,
    LeS64,
    LeU64,
    GeS64,
    GeU64,
}

/// Unary integer operations and conversions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Un {
    Eqz32,
    Clz32,
    Ctz32,
    Popcnt32,
    Eqz64,
    Clz64,
    Ctz64,
    Popcnt64,
    Wrap,
    ExtendS32,
    ExtendU32,
    Ext8S32,
    Ext16S32,
    Ext8S64,
    Ext16S64,
    Ext32S64,
}

/// Loads: the width and how the value is extended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Load {
    I32,
    I64,
    U8to32,
    S8to32,
    U16to32,
    S16to32,
    U8to64,
    S8to64,
    U16to64,
    S16to64,
    U32to64,
    S32to64,
}

/// Stores: the width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Store {
    W8,
    W16,
    W32,
    W64,
}

/// One operation of the register form. Registers are frame slots (`0..REGS`): the
/// function's parameters and locals first, then its operand stack; branch targets are
/// operation indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op {
    /// The start of a basic block: charge this many units of fuel.
    Fuel(u32),
    Const {
        d: u8,
        v: u64,
    },
    Copy {
        d: u8,
        s: u8,
    },
    Bin {
        op: Bin,
        d: u8,
        a: u8,
        b: u8,
    },
    /// A binary operation whose second operand is a constant (a `Const` that fed only it,
    /// folded in at translation: one dispatch instead of two).
    BinI {
        op: Bin,
        d: u8,
        a: u8,
        imm: u64,
    },
    Un {
        op: Un,
        d: u8,
        a: u8,
    },
    Load {
        op: Load,
        d: u8,
        a: u8,
        off: u32,
    },
    Store {
        op: Store,
        a: u8,
        v: u8,
        off: u32,
    },
    MemSize {
        d: u8,
    },
    Select {
        d: u8,
        a: u8,
        b: u8,
        c: u8,
    },
    Br(u32),
    /// To `t` if `c` is not zero.
    BrIf {
        c: u8,
        t: u32,
    },
    /// To `t` if `c` is zero.
    BrIfNot {
        c: u8,
        t: u32,
    },
    /// To `table[start + min(c, len)]` (the last entry is the default).
    BrTable {
        c: u8,
        start: u32,
        len: u32,
    },
    /// Import `import` with the `n` arguments in `base..`; its result (if `res` is not
    /// 0: 1 an `i32`, 2 an `i64`) into `base`.
    Call {
        import: u16,
        base: u8,
        n: u8,
        res: u8,
    },
    /// Import `import` with `n` (at most [`CALL_ARGS`]) arguments, each read where it
    /// is (`src[i]` below [`REGS`]: a register; `REGS + j`: the constant `imm[j]`,
    /// sign-extended); its result (`res` as for `Call`) into `d`. A call's arguments
    /// that are locals are not copied into a window first, and constant arguments are
    /// not operations of their own (a superinstruction of `local.get`/`const`... `call`).
    CallA {
        import: u8,
        n: u8,
        res: u8,
        d: u8,
        src: [u8; CALL_ARGS],
        imm: [i32; 2],
    },
    /// Returns `s` (`n` = 1) or nothing.
    Return {
        s: u8,
        n: u8,
    },
    /// Returns `un(op, a)` (a unary operation whose result the function returns, fused
    /// with the return: handlers end with `x == 0` and the like).
    RetUn {
        op: Un,
        a: u8,
    },
    Unreachable,
}

/// A translated function.
#[derive(Debug)]
pub struct Func {
    /// Its parameters (`i32` or `i64`, in the first registers).
    pub params: u8,
    /// Its results (0 or 1).
    pub results: u8,
    /// Registers past the parameters it zeroes on entry (its declared locals).
    pub locals: u8,
    /// The fuel of its first basic block (`code[0]`, a `Fuel`), charged on entry: the
    /// interpreter starts at `code[1]`.
    pub entry: u32,
    /// The imports it calls, a bit each.
    pub imports: u64,
    /// Whether it touches the linear memory.
    pub memory: bool,
    /// The code.
    pub code: Vec<Op>,
    /// `br_table`'s targets.
    pub table: Vec<u32>,
}

/// A module's translation.
#[derive(Debug, Default)]
pub struct Module {
    /// Each imported function's parameters and result (0: none, 1: an `i32`, 2: an
    /// `i64`).
    pub imports: Vec<(u8, u8)>,
    /// Each function the module defines (in the order of its code section): its
    /// translation, or `None` if it is outside the subset.
    pub funcs: Vec<Option<Func>>,
    /// Each export's function index (`u32::MAX` for exports that are not functions), in
    /// the order of the export section.
    pub exports: Vec<u32>,
    /// Each export's name: its bytes' range in `names`.
    pub export_names: Vec<(u32, u32)>,
    /// The export names' bytes.
    pub names: Vec<u8>,
}

/// Why a module could not be translated at all (a function outside the subset is not an
/// error: it is left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Malformed (a module `wasmi` validated is not).
    Format,
    /// An allocation failed.
    NoMemory,
}

impl From<wasmparser::BinaryReaderError> for Error {
    fn from(_: wasmparser::BinaryReaderError) -> Self {
        Error::Format
    }
}

fn push<T>(v: &mut Vec<T>, x: T) -> Result<(), Error> {
    v.try_reserve(1).map_err(|_| Error::NoMemory)?;
    v.push(x);
    Ok(())
}

/// Most operations a module of `len` bytes is translated into, all its functions
/// together: what the kernel charges for ([`Module::translate`] stops there).
pub fn ops_bound(len: usize) -> usize {
    2 * len + 64
}

fn sig(ft: &wasmparser::FuncType) -> Option<(u8, u8, u32)> {
    let (p, r) = (ft.params(), ft.results());
    if r.len() > 1 || p.len() >= REGS {
        return None;
    }
    for t in p.iter().chain(r.iter()) {
        if !matches!(t, ValType::I32 | ValType::I64) {
            return None;
        }
    }
    let wide = u32::from(matches!(r.first(), Some(ValType::I64)));
    Some((p.len() as u8, r.len() as u8, wide))
}

impl Module {
    /// Translates the functions of `bytes` (a module `wasmi` has validated) that are in
    /// the subset, at most [`ops_bound`] operations in all.
    pub fn translate(bytes: &[u8]) -> Result<Module, Error> {
        let mut m = Module::default();
        // Each type: (params, results, result is i64), or None outside the subset.
        let mut types: Vec<Option<(u8, u8, u32)>> = Vec::new();
        let mut func_types: Vec<u32> = Vec::new();
        let mut import_ok = true;
        let mut budget = ops_bound(bytes.len());
        let mut next = 0usize;
        for payload in Parser::new(0).parse_all(bytes) {
            match payload? {
                Payload::TypeSection(r) => {
                    for ft in r.into_iter_err_on_gc_types() {
                        let ft = ft.ok();
                        push(&mut types, ft.as_ref().and_then(sig))?;
                    }
                }
                Payload::ImportSection(r) => {
                    for imp in r {
                        if let TypeRef::Func(t) = imp?.ty {
                            match types.get(t as usize).copied().flatten() {
                                Some((p, r, w)) => push(&mut m.imports, (p, r + w as u8))?,
                                None => {
                                    import_ok = false;
                                    push(&mut m.imports, (0, 0))?;
                                }
                            }
                        }
                    }
                }
                Payload::FunctionSection(r) => {
                    for t in r {
                        push(&mut func_types, t?)?;
                    }
                }
                Payload::ExportSection(r) => {
                    for e in r {
                        let e = e?;
                        let f = if e.kind == ExternalKind::Func {
                            e.index
                        } else {
                            u32::MAX
                        };
                        push(&mut m.exports, f)?;
                        let at = m.names.len();
                        m.names
                            .try_reserve(e.name.len())
                            .map_err(|_| Error::NoMemory)?;
                        m.names.extend_from_slice(e.name.as_bytes());
                        push(&mut m.export_names, (at as u32, e.name.len() as u32))?;
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let ty = func_types.get(next).copied().ok_or(Error::Format)?;
                    next += 1;
                    let ty = types.get(ty as usize).copied().ok_or(Error::Format)?;
                    let f = match (ty, import_ok && m.imports.len() <= IMPORTS_MAX) {
                        (Some(ty), true) => {
                            match translate(&body, ty, &m.imports, &types, budget) {
                                Ok(f) => {
                                    budget -= f.code.len() + f.table.len();
                                    Some(f)
                                }
                                Err(Some(e)) => return Err(e),
                                Err(None) => None,
                            }
                        }
                        _ => None,
                    };
                    push(&mut m.funcs, f)?;
                }
                _ => {}
            }
        }
        Ok(m)
    }

    /// The translation of function `index` (imports first, as WebAssembly counts), if it
    /// was translated.
    pub fn func(&self, index: u32) -> Option<&Func> {
        let i = (index as usize).checked_sub(self.imports.len())?;
        self.funcs.get(i)?.as_ref()
    }

    /// The translation of the function export `export` (its place in the export section)
    /// names, if it was translated.
    pub fn export(&self, export: usize) -> Option<&Func> {
        self.func(*self.exports.get(export)?)
    }

    /// The index of the function exported as `name`.
    pub fn export_named(&self, name: &[u8]) -> Option<u32> {
        let i = self.export_names.iter().position(|&(at, len)| {
            self.names
                .get(at as usize..(at as usize).saturating_add(len as usize))
                == Some(name)
        })?;
        self.exports.get(i).copied().filter(|&f| f != u32::MAX)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Block,
    Loop,
    If,
    Else,
}

struct Frame {
    kind: Kind,
    /// The operand stack's height at its start.
    height: usize,
    /// Its results (0 or 1).
    arity: usize,
    /// A loop's head (the operation branches go to).
    head: u32,
    /// Branches to its end, to patch.
    patches: Vec<usize>,
    /// An `if`'s branch to its `else` (or end), to patch.
    else_patch: Option<usize>,
}

/// The translator's state for one function.
struct T<'m> {
    code: Vec<Op>,
    table: Vec<u32>,
    /// The operand stack: `Some(r)` a value still in register `r` (a local not yet
    /// copied), `None` a value in its own slot (`base + position`).
    stack: Vec<Option<u8>>,
    base: usize,
    frames: Vec<Frame>,
    /// The current basic block's `Fuel` operation and the instructions counted into it.
    fuel_at: usize,
    fuel: u32,
    /// The operation that last wrote the stack's top slot, if nothing came since.
    last_def: Option<usize>,
    imports_used: u64,
    memory: bool,
    /// After an unconditional transfer: how many blocks deep into the unreachable code
    /// that follows it (nothing is emitted for it).
    dead: Option<usize>,
    imports: &'m [(u8, u8)],
    types: &'m [Option<(u8, u8, u32)>],
    budget: usize,
}

type R<T> = Result<T, Option<Error>>;

fn outside<T>() -> R<T> {
    Err(None)
}

impl T<'_> {
    fn emit(&mut self, op: Op) -> R<usize> {
        if self.code.len() + self.table.len() >= OPS_MAX.min(self.budget) {
            return outside();
        }
        push(&mut self.code, op)?;
        self.last_def = None;
        Ok(self.code.len() - 1)
    }

    fn slot(&self, pos: usize) -> R<u8> {
        let r = self.base + pos;
        if r >= REGS {
            return outside();
        }
        Ok(r as u8)
    }

    /// The register holding the value at stack position `pos`.
    fn reg(&self, pos: usize) -> R<u8> {
        match self.stack.get(pos) {
            Some(Some(r)) => Ok(*r),
            Some(None) => self.slot(pos),
            None => Err(Some(Error::Format)),
        }
    }

    /// Pops a value: its register.
    fn pop(&mut self) -> R<u8> {
        let pos = self.stack.len().checked_sub(1).ok_or(Error::Format)?;
        let r = self.reg(pos)?;
        self.stack.pop();
        Ok(r)
    }

    /// Pushes a value into its own slot: the slot (for the operation that writes it).
    fn push_slot(&mut self) -> R<u8> {
        let r = self.slot(self.stack.len())?;
        push(&mut self.stack, None)?;
        Ok(r)
    }

    /// Emits `op`, which writes the new top slot.
    fn def(&mut self, op: Op) -> R<()> {
        let at = self.emit(op)?;
        self.last_def = Some(at);
        Ok(())
    }

    /// Copies every value still in a local's register (or only those in `only`) into its
    /// own slot.
    fn materialize(&mut self, only: Option<u8>) -> R<()> {
        for pos in 0..self.stack.len() {
            if let Some(Some(r)) = self.stack.get(pos).copied() {
                if only.is_none_or(|o| o == r) {
                    let d = self.slot(pos)?;
                    self.emit(Op::Copy { d, s: r })?;
                    if let Some(e) = self.stack.get_mut(pos) {
                        *e = None;
                    }
                }
            }
        }
        Ok(())
    }

    /// Starts a basic block here.
    fn block_start(&mut self) -> R<u32> {
        self.close_fuel();
        let at = self.emit(Op::Fuel(0))?;
        self.fuel_at = at;
        Ok(at as u32)
    }

    fn close_fuel(&mut self) {
        let n = self.fuel;
        if let Some(Op::Fuel(f)) = self.code.get_mut(self.fuel_at) {
            *f = n;
        }
        self.fuel = 0;
    }

    /// Sets the target of the branch at `at` (a `br_table` entry: `usize::MAX - index`).
    fn patch(&mut self, at: usize, to: u32) {
        if at > usize::MAX / 2 {
            if let Some(x) = self.table.get_mut(usize::MAX - at) {
                *x = to;
            }
        } else if let Some(Op::Br(t) | Op::BrIf { t, .. } | Op::BrIfNot { t, .. }) =
            self.code.get_mut(at)
        {
            *t = to;
        }
    }

    /// Moves the result of a branch to frame `depth` into place: what it carries.
    fn branch_values(&mut self, depth: u32) -> R<usize> {
        let i = self
            .frames
            .len()
            .checked_sub(1 + depth as usize)
            .ok_or(Error::Format)?;
        let f = self.frames.get(i).ok_or(Error::Format)?;
        let (arity, height) = if f.kind == Kind::Loop {
            (0, f.height)
        } else {
            (f.arity, f.height)
        };
        if arity == 1 {
            let top = self.stack.len().checked_sub(1).ok_or(Error::Format)?;
            let s = self.reg(top)?;
            let d = self.slot(height)?;
            if s != d {
                self.emit(Op::Copy { d, s })?;
            }
        }
        Ok(i)
    }

    /// A branch to frame index `i` at operation `at`: patched later, or now for a loop.
    fn target(&mut self, i: usize, at: usize) -> R<()> {
        let f = self.frames.get_mut(i).ok_or(Error::Format)?;
        if f.kind == Kind::Loop {
            let h = f.head;
            self.patch(at, h);
        } else {
            push(&mut f.patches, at)?;
        }
        Ok(())
    }

    fn br(&mut self, depth: u32) -> R<()> {
        self.materialize(None)?;
        if self.frames.len() == 1 + depth as usize {
            return self.ret();
        }
        let i = self.branch_values(depth)?;
        let at = self.emit(Op::Br(0))?;
        self.target(i, at)
    }

    fn ret(&mut self) -> R<()> {
        let arity = self.frames.first().map_or(0, |f| f.arity);
        if arity == 1 {
            let s = self.reg(self.stack.len().checked_sub(1).ok_or(Error::Format)?)?;
            // A unary operation that just made the value returned: fused with the return
            // (its slot is never read again).
            if let (Some(at), Some(&Op::Un { op, d, a })) = (self.last_def, self.code.last()) {
                if at + 1 == self.code.len() && d == s && self.stack.last() == Some(&None) {
                    self.code.pop();
                    self.emit(Op::RetUn { op, a })?;
                    return Ok(());
                }
            }
            self.emit(Op::Return { s, n: 1 })?;
        } else {
            self.emit(Op::Return { s: 0, n: 0 })?;
        }
        Ok(())
    }

    fn blocktype(&self, bt: BlockType) -> R<usize> {
        match bt {
            BlockType::Empty => Ok(0),
            BlockType::Type(ValType::I32 | ValType::I64) => Ok(1),
            BlockType::FuncType(t) => match self.types.get(t as usize).copied().flatten() {
                Some((0, r, _)) => Ok(r as usize),
                _ => outside(),
            },
            _ => outside(),
        }
    }

    fn open(&mut self, kind: Kind, arity: usize, head: u32) -> R<()> {
        self.frames.try_reserve(1).map_err(|_| Error::NoMemory)?;
        self.frames.push(Frame {
            kind,
            height: self.stack.len(),
            arity,
            head,
            patches: Vec::new(),
            else_patch: None,
        });
        Ok(())
    }

    fn bin(&mut self, op: Bin) -> R<()> {
        // A constant just pushed into its own slot, read by nothing but this operation:
        // folded into it.
        let folded = match (self.last_def, self.code.last()) {
            (Some(at), Some(&Op::Const { d, v }))
                if at + 1 == self.code.len()
                    && self.stack.last() == Some(&None)
                    && Ok(d) == self.slot(self.stack.len().saturating_sub(1)) =>
            {
                Some(v)
            }
            _ => None,
        };
        let b = self.pop()?;
        let a = self.pop()?;
        let d = self.push_slot()?;
        match folded {
            Some(imm) => {
                self.code.pop();
                self.def(Op::BinI { op, d, a, imm })
            }
            None => self.def(Op::Bin { op, d, a, b }),
        }
    }

    /// An import call of at most [`CALL_ARGS`] arguments ([`Op::CallA`]): each argument
    /// read where it is (a local's register, or its own slot), and the constants the
    /// last operations put into the last arguments' slots folded into the call (at most
    /// two, each fitting an `i32` sign-extended). The call writes no local, so the values
    /// below its arguments stay where they are.
    fn call_in_place(&mut self, function_index: u32, n: u8, res: u8) -> R<()> {
        let h = self
            .stack
            .len()
            .checked_sub(n as usize)
            .ok_or(Error::Format)?;
        let mut src = [0u8; CALL_ARGS];
        let mut imm = [0i32; 2];
        let mut k = 0usize;
        let mut folding = true;
        for i in (0..n as usize).rev() {
            let pos = h + i;
            let s = match self.stack.get(pos).copied() {
                Some(Some(r)) => {
                    folding = false;
                    r
                }
                Some(None) => {
                    let slot = self.slot(pos)?;
                    // The last operation emitted wrote this argument's own slot with a
                    // constant: nothing emitted since, so nothing read it, and no other
                    // value was put there since (every other way a value gets into a
                    // slot emits an operation).
                    match self.code.last().copied() {
                        Some(Op::Const { d, v })
                            if folding
                                && k < imm.len()
                                && d == slot
                                && v as i32 as i64 as u64 == v =>
                        {
                            self.code.pop();
                            if let Some(x) = imm.get_mut(k) {
                                *x = v as i32;
                            }
                            k += 1;
                            (REGS + k - 1) as u8
                        }
                        _ => {
                            folding = false;
                            slot
                        }
                    }
                }
                None => return Err(Some(Error::Format)),
            };
            if let Some(x) = src.get_mut(i) {
                *x = s;
            }
        }
        self.stack.truncate(h);
        self.imports_used |= 1 << function_index;
        let d = if res != 0 { self.push_slot()? } else { 0 };
        let at = self.emit(Op::CallA {
            import: function_index as u8,
            n,
            res,
            d,
            src,
            imm,
        })?;
        if res != 0 {
            self.last_def = Some(at);
        }
        Ok(())
    }

    fn un(&mut self, op: Un) -> R<()> {
        let a = self.pop()?;
        let d = self.push_slot()?;
        self.def(Op::Un { op, d, a })
    }

    fn load(&mut self, op: Load, off: u64) -> R<()> {
        let off = u32::try_from(off).or(outside())?;
        self.memory = true;
        let a = self.pop()?;
        let d = self.push_slot()?;
        self.def(Op::Load { op, d, a, off })
    }

    fn store(&mut self, op: Store, off: u64) -> R<()> {
        let off = u32::try_from(off).or(outside())?;
        self.memory = true;
        let v = self.pop()?;
        let a = self.pop()?;
        self.emit(Op::Store { op, a, v, off })?;
        Ok(())
    }

    fn konst(&mut self, v: u64) -> R<()> {
        let d = self.push_slot()?;
        self.def(Op::Const { d, v })
    }

    /// `local.set` (`tee`: the value stays).
    fn set_local(&mut self, l: u32, tee: bool) -> R<()> {
        let x = u8::try_from(l).or(outside())?;
        if x as usize >= self.base {
            return Err(Some(Error::Format));
        }
        let top = self.stack.len().checked_sub(1).ok_or(Error::Format)?;
        // Values on the stack still read from the local must keep its old value.
        let before = self.code.len();
        let last = self.last_def;
        self.materialize(Some(x))?;
        let s = self.reg(top)?;
        let own = self.stack.get(top).copied().flatten().is_none();
        let retarget = !tee && own && self.code.len() == before && last.is_some();
        match (retarget, last.and_then(|at| self.code.get_mut(at))) {
            (
                true,
                Some(
                    Op::Const { d, .. }
                    | Op::Bin { d, .. }
                    | Op::BinI { d, .. }
                    | Op::Un { d, .. }
                    | Op::Load { d, .. }
                    | Op::Select { d, .. }
                    | Op::CallA { d, .. }
                    | Op::Copy { d, .. },
                ),
            ) if *d == s => *d = x,
            _ => {
                self.emit(Op::Copy { d: x, s })?;
            }
        }
        if !tee {
            self.stack.pop();
        }
        self.last_def = None;
        Ok(())
    }

    fn op(&mut self, op: Operator<'_>) -> R<()> {
        use Operator as O;
        match op {
            O::Nop => {}
            O::Unreachable => {
                self.emit(Op::Unreachable)?;
                return self.dead();
            }
            O::I32Const { value } => self.konst(value as u32 as u64)?,
            O::I64Const { value } => self.konst(value as u64)?,
            O::LocalGet { local_index } => {
                let r = u8::try_from(local_index).or(outside())?;
                if r as usize >= self.base {
                    return Err(Some(Error::Format));
                }
                push(&mut self.stack, Some(r))?;
            }
            O::LocalSet { local_index } => self.set_local(local_index, false)?,
            O::LocalTee { local_index } => self.set_local(local_index, true)?,
            O::Drop => {
                self.pop()?;
            }
            O::Select => {
                let c = self.pop()?;
                let b = self.pop()?;
                let a = self.pop()?;
                let d = self.push_slot()?;
                self.def(Op::Select { d, a, b, c })?;
            }
            O::MemorySize { mem: 0 } => {
                self.memory = true;
                let d = self.push_slot()?;
                self.def(Op::MemSize { d })?;
            }
            O::Call { function_index } => {
                let (n, res) = match self.imports.get(function_index as usize) {
                    Some(&(n, r)) => (n, r),
                    None => return outside(),
                };
                if n as usize <= CALL_ARGS {
                    return self.call_in_place(function_index, n, res);
                }
                self.materialize(None)?;
                let h = self
                    .stack
                    .len()
                    .checked_sub(n as usize)
                    .ok_or(Error::Format)?;
                let base = self.slot(h)?;
                self.stack.truncate(h);
                self.imports_used |= 1 << function_index;
                self.emit(Op::Call {
                    import: function_index as u16,
                    base,
                    n,
                    res,
                })?;
                if res != 0 {
                    self.push_slot()?;
                }
            }
            O::Block { blockty } => {
                let a = self.blocktype(blockty)?;
                self.materialize(None)?;
                self.open(Kind::Block, a, 0)?;
            }
            O::Loop { blockty } => {
                let a = self.blocktype(blockty)?;
                self.materialize(None)?;
                let head = self.block_start()?;
                self.open(Kind::Loop, a, head)?;
            }
            O::If { blockty } => {
                let a = self.blocktype(blockty)?;
                let c = self.pop()?;
                self.materialize(None)?;
                let at = self.emit(Op::BrIfNot { c, t: 0 })?;
                self.open(Kind::If, a, 0)?;
                if let Some(f) = self.frames.last_mut() {
                    f.else_patch = Some(at);
                }
                self.block_start()?;
            }
            O::Else => {
                // The `then` arm's end: its result into place, and on to the end.
                self.materialize(None)?;
                let f = self.frames.last().ok_or(Error::Format)?;
                let (height, arity) = (f.height, f.arity);
                if arity == 1 {
                    let top = self.stack.len().checked_sub(1).ok_or(Error::Format)?;
                    let s = self.reg(top)?;
                    let d = self.slot(height)?;
                    if s != d {
                        self.emit(Op::Copy { d, s })?;
                    }
                }
                let at = self.emit(Op::Br(0))?;
                self.stack.truncate(height);
                let here = self.block_start()?;
                let f = self.frames.last_mut().ok_or(Error::Format)?;
                push(&mut f.patches, at)?;
                f.kind = Kind::Else;
                if let Some(e) = f.else_patch.take() {
                    self.patch(e, here);
                }
            }
            O::End => {
                self.materialize(None)?;
                let f = self.frames.last().ok_or(Error::Format)?;
                let (height, arity) = (f.height, f.arity);
                if self.frames.len() == 1 {
                    return self.ret();
                }
                if arity == 1 {
                    let top = self.stack.len().checked_sub(1).ok_or(Error::Format)?;
                    let s = self.reg(top)?;
                    let d = self.slot(height)?;
                    if s != d {
                        self.emit(Op::Copy { d, s })?;
                    }
                }
                let f = self.frames.pop().ok_or(Error::Format)?;
                let here = self.block_start()?;
                for at in f.patches {
                    self.patch(at, here);
                }
                if let Some(e) = f.else_patch {
                    self.patch(e, here);
                }
                self.stack.truncate(height);
                if arity == 1 {
                    self.push_slot()?;
                }
            }
            O::Br { relative_depth } => {
                self.br(relative_depth)?;
                return self.dead();
            }
            O::BrIf { relative_depth } => {
                let c = self.pop()?;
                self.materialize(None)?;
                if self.frames.len() == 1 + relative_depth as usize {
                    let skip = self.emit(Op::BrIfNot { c, t: 0 })?;
                    self.ret()?;
                    let here = self.block_start()?;
                    self.patch(skip, here);
                    return Ok(());
                }
                let i = self
                    .frames
                    .len()
                    .checked_sub(1 + relative_depth as usize)
                    .ok_or(Error::Format)?;
                let f = self.frames.get(i).ok_or(Error::Format)?;
                let moves = f.kind != Kind::Loop && f.arity == 1 && {
                    let top = self.stack.len().checked_sub(1).ok_or(Error::Format)?;
                    self.reg(top)? != self.slot(f.height)?
                };
                if moves {
                    let skip = self.emit(Op::BrIfNot { c, t: 0 })?;
                    self.branch_values(relative_depth)?;
                    let at = self.emit(Op::Br(0))?;
                    self.target(i, at)?;
                    let here = self.block_start()?;
                    self.patch(skip, here);
                } else {
                    let at = self.emit(Op::BrIf { c, t: 0 })?;
                    self.target(i, at)?;
                }
            }
            O::BrTable { targets } => {
                let c = self.pop()?;
                self.materialize(None)?;
                let start = self.table.len() as u32;
                let mut all: Vec<u32> = Vec::new();
                for t in targets.targets() {
                    push(&mut all, t.map_err(Error::from)?)?;
                }
                push(&mut all, targets.default())?;
                let len = all.len() as u32 - 1;
                for depth in all {
                    let i = self
                        .frames
                        .len()
                        .checked_sub(1 + depth as usize)
                        .ok_or(Error::Format)?;
                    let f = self.frames.get(i).ok_or(Error::Format)?;
                    if i == 0 || (f.kind != Kind::Loop && f.arity != 0) {
                        return outside();
                    }
                    if self.code.len() + self.table.len() >= OPS_MAX.min(self.budget) {
                        return outside();
                    }
                    push(&mut self.table, 0)?;
                    let at = self.table.len() - 1;
                    let f = self.frames.get_mut(i).ok_or(Error::Format)?;
                    if f.kind == Kind::Loop {
                        let h = f.head;
                        if let Some(x) = self.table.get_mut(at) {
                            *x = h;
                        }
                    } else {
                        push(&mut f.patches, usize::MAX - at)?;
                    }
                }
                self.emit(Op::BrTable { c, start, len })?;
                return self.dead();
            }
            O::Return => {
                self.materialize(None)?;
                self.ret()?;
                return self.dead();
            }
            O::I32Load { memarg } => self.load(Load::I32, memarg.offset)?,
            O::I64Load { memarg } => self.load(Load::I64, memarg.offset)?,
            O::I32Load8U { memarg } => self.load(Load::U8to32, memarg.offset)?,
            O::I32Load8S { memarg } => self.load(Load::S8to32, memarg.offset)?,
            O::I32Load16U { memarg } => self.load(Load::U16to32, memarg.offset)?,
            O::I32Load16S { memarg } => self.load(Load::S16to32, memarg.offset)?,
            O::I64Load8U { memarg } => self.load(Load::U8to64, memarg.offset)?,
            O::I64Load8S { memarg } => self.load(Load::S8to64, memarg.offset)?,
            O::I64Load16U { memarg } => self.load(Load::U16to64, memarg.offset)?,
            O::I64Load16S { memarg } => self.load(Load::S16to64, memarg.offset)?,
            O::I64Load32U { memarg } => self.load(Load::U32to64, memarg.offset)?,
            O::I64Load32S { memarg } => self.load(Load::S32to64, memarg.offset)?,
            O::I32Store { memarg } | O::I64Store32 { memarg } => {
                self.store(Store::W32, memarg.offset)?
            }
            O::I64Store { memarg } => self.store(Store::W64, memarg.offset)?,
            O::I32Store8 { memarg } | O::I64Store8 { memarg } => {
                self.store(Store::W8, memarg.offset)?
            }
            O::I32Store16 { memarg } | O::I64Store16 { memarg } => {
                self.store(Store::W16, memarg.offset)?
            }
            O::I32Eqz => self.un(Un::Eqz32)?,
            O::I32Clz => self.un(Un::Clz32)?,
            O::I32Ctz => self.un(Un::Ctz32)?,
            O::I32Popcnt => self.un(Un::Popcnt32)?,
            O::I64Eqz => self.un(Un::Eqz64)?,
            O::I64Clz => self.un(Un::Clz64)?,
            O::I64Ctz => self.un(Un::Ctz64)?,
            O::I64Popcnt => self.un(Un::Popcnt64)?,
            O::I32WrapI64 => self.un(Un::Wrap)?,
            O::I64ExtendI32S => self.un(Un::ExtendS32)?,
            // An `i32` is kept zero-extended in its register (every operation that makes
            // one writes it so, and arguments come so): the widening is no operation.
            O::I64ExtendI32U => {}
            O::I32Extend8S => self.un(Un::Ext8S32)?,
            O::I32Extend16S => self.un(Un::Ext16S32)?,
            O::I64Extend8S => self.un(Un::Ext8S64)?,
            O::I64Extend16S => self.un(Un::Ext16S64)?,
            O::I64Extend32S => self.un(Un::Ext32S64)?,
            O::I32Add => self.bin(Bin::Add32)?,
            O::I32Sub => self.bin(Bin::Sub32)?,
            O::I32Mul => self.bin(Bin::Mul32)?,
            O::I32DivS => self.bin(Bin::DivS32)?,
            O::I32DivU => self.bin(Bin::DivU32)?,
            O::I32RemS => self.bin(Bin::RemS32)?,
            O::I32RemU => self.bin(Bin::RemU32)?,
            O::I32And => self.bin(Bin::And32)?,
            O::I32Or => self.bin(Bin::Or32)?,
            O::I32Xor => self.bin(Bin::Xor32)?,
            O::I32Shl => self.bin(Bin::Shl32)?,
            O::I32ShrS => self.bin(Bin::ShrS32)?,
            O::I32ShrU => self.bin(Bin::ShrU32)?,
            O::I32Rotl => self.bin(Bin::Rotl32)?,
            O::I32Rotr => self.bin(Bin::Rotr32)?,
            O::I32Eq => self.bin(Bin::Eq32)?,
            O::I32Ne => self.bin(Bin::Ne32)?,
            O::I32LtS => self.bin(Bin::LtS32)?,
            O::I32LtU => self.bin(Bin::LtU32)?,
            O::I32GtS => self.bin(Bin::GtS32)?,
            O::I32GtU => self.bin(Bin::GtU32)?,
            O::I32LeS => self.bin(Bin::LeS32)?,
            O::I32LeU => self.bin(Bin::LeU32)?,
            O::I32GeS => self.bin(Bin::GeS32)?,
            O::I32GeU => self.bin(Bin::GeU32)?,
            O::I64Add => self.bin(Bin::Add64)?,
            O::I64Sub => self.bin(Bin::Sub64)?,
            O::I64Mul => self.bin(Bin::Mul64)?,
            O::I64DivS => self.bin(Bin::DivS64)?,
            O::I64DivU => self.bin(Bin::DivU64)?,
            O::I64RemS => self.bin(Bin::RemS64)?,
            O::I64RemU => self.bin(Bin::RemU64)?,
            O::I64And => self.bin(Bin::And64)?,
            O::I64Or => self.bin(Bin::Or64)?,
            O::I64Xor => self.bin(Bin::Xor64)?,
            O::I64Shl => self.bin(Bin::Shl64)?,
            O::I64ShrS => self.bin(Bin::ShrS64)?,
            O::I64ShrU => self.bin(Bin::ShrU64)?,
            O::I64Rotl => self.bin(Bin::Rotl64)?,
            O::I64Rotr => self.bin(Bin::Rotr64)?,
            O::I64Eq => self.bin(Bin::Eq64)?,
            O::I64Ne => self.bin(Bin::Ne64)?,
            O::I64LtS => self.bin(Bin::LtS64)?,
            O::I64LtU => self.bin(Bin::LtU64)?,
            O::I64GtS => self.bin(Bin::GtS64)?,
            O::I64GtU => self.bin(Bin::GtU64)?,
            O::I64LeS => self.bin(Bin::LeS64)?,
            O::I64LeU => self.bin(Bin::LeU64)?,
            O::I64GeS => self.bin(Bin::GeS64)?,
            O::I64GeU => self.bin(Bin::GeU64)?,
            _ => return outside(),
        }
        Ok(())
    }
}

impl T<'_> {
    /// After an unconditional transfer: the code up to the matching `else` or `end` is
    /// never reached.
    fn dead(&mut self) -> R<()> {
        self.dead = Some(0);
        Ok(())
    }

    /// An operator of unreachable code: skipped, up to the `else` or `end` that makes
    /// code reachable again (whose stack is then the frame's, its result in place).
    fn skip(&mut self, op: Operator<'_>) -> R<()> {
        let depth = self.dead.unwrap_or(0);
        match op {
            Operator::Block { .. } | Operator::Loop { .. } | Operator::If { .. } => {
                self.dead = Some(depth + 1);
            }
            Operator::Else | Operator::End if depth == 0 => {
                self.dead = None;
                let f = self.frames.last().ok_or(Error::Format)?;
                let (height, arity) = (f.height, f.arity);
                self.stack.truncate(height);
                if arity == 1 {
                    push(&mut self.stack, None)?;
                }
                self.fuel += 1;
                return self.op(op);
            }
            Operator::End => self.dead = Some(depth - 1),
            _ => {}
        }
        Ok(())
    }
}

fn fmt<X>(r: Result<X, wasmparser::BinaryReaderError>) -> R<X> {
    r.map_err(|_| Some(Error::Format))
}

/// Translates one function body of type `ty`, or tells why not: `Err(None)` outside the
/// subset or past a bound.
fn translate(
    body: &wasmparser::FunctionBody<'_>,
    ty: (u8, u8, u32),
    imports: &[(u8, u8)],
    types: &[Option<(u8, u8, u32)>],
    budget: usize,
) -> R<Func> {
    let (params, results, _) = ty;
    let mut n = params as usize;
    for l in fmt(body.get_locals_reader())? {
        let (count, t) = fmt(l)?;
        if !matches!(t, ValType::I32 | ValType::I64) {
            return outside();
        }
        n = n.saturating_add(count as usize);
        if n > REGS {
            return outside();
        }
    }
    let mut t = T {
        code: Vec::new(),
        table: Vec::new(),
        stack: Vec::new(),
        base: n,
        frames: Vec::new(),
        fuel_at: 0,
        fuel: 0,
        last_def: None,
        imports_used: 0,
        memory: false,
        dead: None,
        imports,
        types,
        budget,
    };
    t.open(Kind::Block, results as usize, 0)?;
    t.block_start()?;
    let mut ops = fmt(body.get_operators_reader())?;
    while !ops.eof() {
        let op = fmt(ops.read())?;
        if t.dead.is_some() {
            t.skip(op)?;
        } else {
            t.fuel += 1;
            t.op(op)?;
        }
    }
    t.close_fuel();
    let Some(&Op::Fuel(entry)) = t.code.first() else {
        return Err(Some(Error::Format));
    };
    Ok(Func {
        params,
        results,
        locals: (n - params as usize) as u8,
        entry,
        imports: t.imports_used,
        memory: t.memory,
        code: t.code,
        table: t.table,
    })
}

/// The kernel's procedures a translated function calls: its imports, by index.
pub trait Host {
    /// Calls import `import` with `args` (`i32` arguments zero-extended): its result (0
    /// for an import without one), or [`Trap::Host`].
    fn call(&mut self, import: u32, args: &[u64]) -> Result<u64, Trap>;

    /// Calls import `import` with the first `n` of `args` ([`Op::CallA`]'s form, the
    /// arguments in a fixed array of [`CALL_ARGS`], no slice made): by default
    /// [`call`](Host::call) on those `n`. A host may take its most frequent procedure
    /// here straight from the array, as long as it does what `call` does.
    #[inline]
    fn call3(&mut self, import: u32, args: [u64; CALL_ARGS], n: u8) -> Result<u64, Trap> {
        self.call(import, args.get(..n as usize).ok_or(Trap::Host)?)
    }
}

fn rd<const N: usize>(mem: &[u8], base: u64, off: u32) -> Result<[u8; N], Trap> {
    let a = (base as u32 as usize)
        .checked_add(off as usize)
        .ok_or(Trap::OutOfBounds)?;
    let end = a.checked_add(N).ok_or(Trap::OutOfBounds)?;
    mem.get(a..end)
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or(Trap::OutOfBounds)
}

fn wr(mem: &mut [u8], base: u64, off: u32, bytes: &[u8]) -> Result<(), Trap> {
    let a = (base as u32 as usize)
        .checked_add(off as usize)
        .ok_or(Trap::OutOfBounds)?;
    let end = a.checked_add(bytes.len()).ok_or(Trap::OutOfBounds)?;
    mem.get_mut(a..end)
        .ok_or(Trap::OutOfBounds)?
        .copy_from_slice(bytes);
    Ok(())
}

#[inline(always)]
fn bin(op: Bin, a: u64, b: u64) -> Result<u64, Trap> {
    let (x, y) = (a as u32, b as u32);
    let (xs, ys) = (x as i32, y as i32);
    let (ls, rs) = (a as i64, b as i64);
    let w = |v: u32| v as u64;
    let t = |c: bool| c as u64;
    Ok(match op {
        Bin::Add32 => w(x.wrapping_add(y)),
        Bin::Sub32 => w(x.wrapping_sub(y)),
        Bin::Mul32 => w(x.wrapping_mul(y)),
        Bin::DivS32 => {
            if y == 0 {
                return Err(Trap::DivideByZero);
            }
            w(xs.checked_div(ys).ok_or(Trap::Overflow)? as u32)
        }
        Bin::DivU32 => w(x.checked_div(y).ok_or(Trap::DivideByZero)?),
        Bin::RemS32 => {
            if y == 0 {
                return Err(Trap::DivideByZero);
            }
            w(xs.wrapping_rem(ys) as u32)
        }
        Bin::RemU32 => w(x.checked_rem(y).ok_or(Trap::DivideByZero)?),
        Bin::And32 => w(x & y),
        Bin::Or32 => w(x | y),
        Bin::Xor32 => w(x ^ y),
        Bin::Shl32 => w(x.wrapping_shl(y)),
        Bin::ShrS32 => w(xs.wrapping_shr(y) as u32),
        Bin::ShrU32 => w(x.wrapping_shr(y)),
        Bin::Rotl32 => w(x.rotate_left(y & 31)),
        Bin::Rotr32 => w(x.rotate_right(y & 31)),
        Bin::Eq32 => t(x == y),
        Bin::Ne32 => t(x != y),
        Bin::LtS32 => t(xs < ys),
        Bin::LtU32 => t(x < y),
        Bin::GtS32 => t(xs > ys),
        Bin::GtU32 => t(x > y),
        Bin::LeS32 => t(xs <= ys),
        Bin::LeU32 => t(x <= y),
        Bin::GeS32 => t(xs >= ys),
        Bin::GeU32 => t(x >= y),
        Bin::Add64 => a.wrapping_add(b),
        Bin::Sub64 => a.wrapping_sub(b),
        Bin::Mul64 => a.wrapping_mul(b),
        Bin::DivS64 => {
            if b == 0 {
                return Err(Trap::DivideByZero);
            }
            ls.checked_div(rs).ok_or(Trap::Overflow)? as u64
        }
        Bin::DivU64 => a.checked_div(b).ok_or(Trap::DivideByZero)?,
        Bin::RemS64 => {
            if b == 0 {
                return Err(Trap::DivideByZero);
            }
            ls.wrapping_rem(rs) as u64
        }
        Bin::RemU64 => a.checked_rem(b).ok_or(Trap::DivideByZero)?,
        Bin::And64 => a & b,
        Bin::Or64 => a | b,
        Bin::Xor64 => a ^ b,
        Bin::Shl64 => a.wrapping_shl(b as u32),
        Bin::ShrS64 => ls.wrapping_shr(b as u32) as u64,
        Bin::ShrU64 => a.wrapping_shr(b as u32),
        Bin::Rotl64 => a.rotate_left((b & 63) as u32),
        Bin::Rotr64 => a.rotate_right((b & 63) as u32),
        Bin::Eq64 => t(a == b),
        Bin::Ne64 => t(a != b),
        Bin::LtS64 => t(ls < rs),
        Bin::LtU64 => t(a < b),
        Bin::GtS64 => t(ls > rs),
        Bin::GtU64 => t(a > b),
        Bin::LeS64 => t(ls <= rs),
        Bin::LeU64 => t(a <= b),
        Bin::GeS64 => t(ls >= rs),
        Bin::GeU64 => t(a >= b),
    })
}

#[inline(always)]
fn un(op: Un, a: u64) -> u64 {
    let x = a as u32;
    match op {
        Un::Eqz32 => (x == 0) as u64,
        Un::Clz32 => x.leading_zeros() as u64,
        Un::Ctz32 => x.trailing_zeros() as u64,
        Un::Popcnt32 => x.count_ones() as u64,
        Un::Eqz64 => (a == 0) as u64,
        Un::Clz64 => a.leading_zeros() as u64,
        Un::Ctz64 => a.trailing_zeros() as u64,
        Un::Popcnt64 => a.count_ones() as u64,
        Un::Wrap => x as u64,
        Un::ExtendS32 => x as i32 as i64 as u64,
        Un::ExtendU32 => x as u64,
        Un::Ext8S32 => x as i8 as i32 as u32 as u64,
        Un::Ext16S32 => x as i16 as i32 as u32 as u64,
        Un::Ext8S64 => a as i8 as i64 as u64,
        Un::Ext16S64 => a as i16 as i64 as u64,
        Un::Ext32S64 => a as i32 as i64 as u64,
    }
}

fn load(op: Load, mem: &[u8], a: u64, off: u32) -> Result<u64, Trap> {
    Ok(match op {
        Load::I32 | Load::U32to64 => u32::from_le_bytes(rd(mem, a, off)?) as u64,
        Load::I64 => u64::from_le_bytes(rd(mem, a, off)?),
        Load::U8to32 | Load::U8to64 => u8::from_le_bytes(rd(mem, a, off)?) as u64,
        Load::S8to32 => i8::from_le_bytes(rd(mem, a, off)?) as i32 as u32 as u64,
        Load::U16to32 | Load::U16to64 => u16::from_le_bytes(rd(mem, a, off)?) as u64,
        Load::S16to32 => i16::from_le_bytes(rd(mem, a, off)?) as i32 as u32 as u64,
        Load::S8to64 => i8::from_le_bytes(rd(mem, a, off)?) as i64 as u64,
        Load::S16to64 => i16::from_le_bytes(rd(mem, a, off)?) as i64 as u64,
        Load::S32to64 => i32::from_le_bytes(rd(mem, a, off)?) as i64 as u64,
    })
}

/// A function's registers. What a frame held before an invocation does not matter: the
/// parameters and locals are set on entry, and every stack slot is written before it is
/// read (WebAssembly's validation), so one frame serves every invocation.
pub type Regs = [u64; REGS];

/// Runs `f` in frame `r` with `args` (`i32` arguments zero-extended) over linear memory
/// `mem`, taking its fuel from `fuel` (what is left stays there): its result (`None` for
/// a function without one), or the trap that ended it.
pub fn run<H: Host>(
    f: &Func,
    r: &mut Regs,
    args: &[u64],
    mem: &mut [u8],
    fuel: &mut u64,
    host: &mut H,
) -> Result<Option<u64>, Trap> {
    for (d, a) in r.iter_mut().zip(args.iter().take(f.params as usize)) {
        *d = *a;
    }
    let v = exec(f, r, mem, fuel, host)?;
    Ok((f.results != 0).then_some(v))
}

/// Runs `f` as [`run`] does, with its parameters already in the first registers of `r`
/// (`i32` ones zero-extended): its result (0 for a function without one).
#[inline]
pub fn exec<H: Host>(
    f: &Func,
    r: &mut Regs,
    mem: &mut [u8],
    fuel: &mut u64,
    host: &mut H,
) -> Result<u64, Trap> {
    // Only the declared locals are zeroed (the frame is not: its stack slots need not be).
    let (p, l) = (f.params as usize, f.locals as usize);
    if l != 0 {
        for i in p..p + l {
            r[i & (REGS - 1)] = 0;
        }
    }
    macro_rules! g {
        ($x:expr) => {
            r[($x as usize) & (REGS - 1)]
        };
    }
    // The first block's fuel (its `Fuel` operation, `code[0]`, is never a branch target:
    // every target is a block start emitted after it).
    *fuel = fuel
        .checked_sub(u64::from(f.entry))
        .ok_or(Trap::OutOfFuel)?;
    let mut pc = 1usize;
    loop {
        let op = *f.code.get(pc).ok_or(Trap::Unreachable)?;
        pc += 1;
        match op {
            Op::Fuel(n) => {
                *fuel = fuel.checked_sub(u64::from(n)).ok_or(Trap::OutOfFuel)?;
            }
            Op::Const { d, v } => g!(d) = v,
            Op::Copy { d, s } => g!(d) = g!(s),
            Op::Bin { op, d, a, b } => g!(d) = bin(op, g!(a), g!(b))?,
            Op::BinI { op, d, a, imm } => g!(d) = bin(op, g!(a), imm)?,
            Op::Un { op, d, a } => g!(d) = un(op, g!(a)),
            Op::Load { op, d, a, off } => g!(d) = load(op, mem, g!(a), off)?,
            Op::Store { op, a, v, off } => {
                let (base, v) = (g!(a), g!(v));
                let b = v.to_le_bytes();
                let n = match op {
                    Store::W8 => 1,
                    Store::W16 => 2,
                    Store::W32 => 4,
                    Store::W64 => 8,
                };
                wr(mem, base, off, b.get(..n).ok_or(Trap::OutOfBounds)?)?;
            }
            Op::MemSize { d } => g!(d) = (mem.len() / 65536) as u64,
            Op::Select { d, a, b, c } => {
                g!(d) = if g!(c) as u32 != 0 { g!(a) } else { g!(b) };
            }
            Op::Br(t) => pc = t as usize,
            Op::BrIf { c, t } => {
                if g!(c) as u32 != 0 {
                    pc = t as usize;
                }
            }
            Op::BrIfNot { c, t } => {
                if g!(c) as u32 == 0 {
                    pc = t as usize;
                }
            }
            Op::BrTable { c, start, len } => {
                let i = (g!(c) as u32).min(len);
                let at = start.checked_add(i).ok_or(Trap::Unreachable)?;
                pc = *f.table.get(at as usize).ok_or(Trap::Unreachable)? as usize;
            }
            Op::Call {
                import,
                base,
                n,
                res,
            } => {
                let lo = base as usize;
                let args = r.get(lo..lo + n as usize).ok_or(Trap::Host)?;
                let v = host.call(u32::from(import), args)?;
                g!(base) = if res == 1 { v as u32 as u64 } else { v };
            }
            Op::CallA {
                import,
                n,
                res,
                d,
                src,
                imm,
            } => {
                let arg = |s: u8| {
                    if (s as usize) < REGS {
                        r[s as usize & (REGS - 1)]
                    } else {
                        imm[s as usize & 1] as i64 as u64
                    }
                };
                let a = [arg(src[0]), arg(src[1]), arg(src[2])];
                let v = host.call3(u32::from(import), a, n)?;
                if res != 0 {
                    g!(d) = if res == 1 { v as u32 as u64 } else { v };
                }
            }
            Op::Return { s, .. } => return Ok(g!(s)),
            Op::RetUn { op, a } => return Ok(un(op, g!(a))),
            Op::Unreachable => return Err(Trap::Unreachable),
        }
    }
}
