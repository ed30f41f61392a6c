//! The WebAssembly tier against `wasmi` on the same modules: same results, same traps,
//! the same abort when fuel runs out; and what it refuses to translate.

use super::tier::{self, Host, Module, Op, Trap, Un, CALL_ARGS};
use proptest::prelude::*;
use std::vec;
use std::vec::Vec;

const I32: u8 = 0x7f;
const I64: u8 = 0x7e;

fn leb(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn sleb(mut v: i64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        let done = (v == 0 && b & 0x40 == 0) || (v == -1 && b & 0x40 != 0);
        out.push(if done { b } else { b | 0x80 });
        if done {
            return;
        }
    }
}

fn section(id: u8, body: Vec<u8>, out: &mut Vec<u8>) {
    out.push(id);
    leb(body.len() as u64, out);
    out.extend(body);
}

fn name(s: &str, out: &mut Vec<u8>) {
    leb(s.len() as u64, out);
    out.extend(s.as_bytes());
}

/// A function: its type index, its locals (count, type), its code (without the final
/// `end`).
struct F {
    ty: u32,
    locals: Vec<(u32, u8)>,
    code: Vec<u8>,
}

/// A module with types `types`, function imports `host.<i>` of `imports`' types, the
/// functions `funcs` (exported as `f0`, `f1`, ...), and a memory of one page (exported as
/// `memory`) with `data` at 0.
fn module(types: &[(&[u8], &[u8])], imports: &[u32], funcs: &[F], data: &[u8]) -> Vec<u8> {
    let mut m = vec![0, b'a', b's', b'm', 1, 0, 0, 0];
    let mut b = Vec::new();
    leb(types.len() as u64, &mut b);
    for (p, r) in types {
        b.push(0x60);
        leb(p.len() as u64, &mut b);
        b.extend(*p);
        leb(r.len() as u64, &mut b);
        b.extend(*r);
    }
    section(1, b, &mut m);
    let mut b = Vec::new();
    leb(imports.len() as u64, &mut b);
    for (i, t) in imports.iter().enumerate() {
        name("host", &mut b);
        name(&std::format!("{i}"), &mut b);
        b.push(0);
        leb(u64::from(*t), &mut b);
    }
    section(2, b, &mut m);
    let mut b = Vec::new();
    leb(funcs.len() as u64, &mut b);
    for f in funcs {
        leb(u64::from(f.ty), &mut b);
    }
    section(3, b, &mut m);
    section(5, vec![1, 0, 1], &mut m);
    let mut b = Vec::new();
    leb(funcs.len() as u64 + 1, &mut b);
    for i in 0..funcs.len() {
        name(&std::format!("f{i}"), &mut b);
        b.push(0);
        leb((imports.len() + i) as u64, &mut b);
    }
    name("memory", &mut b);
    b.extend([2, 0]);
    section(7, b, &mut m);
    let mut b = Vec::new();
    leb(funcs.len() as u64, &mut b);
    for f in funcs {
        let mut body = Vec::new();
        leb(f.locals.len() as u64, &mut body);
        for (n, t) in &f.locals {
            leb(u64::from(*n), &mut body);
            body.push(*t);
        }
        body.extend(&f.code);
        body.push(0x0b);
        leb(body.len() as u64, &mut b);
        b.extend(body);
    }
    section(10, b, &mut m);
    let mut b = vec![1, 0, 0x41, 0, 0x0b];
    leb(data.len() as u64, &mut b);
    b.extend(data);
    section(11, b, &mut m);
    m
}

/// The host both sides call: import 0 is `(a, b) -> a * 3 + b`, refusing `a` = 999;
/// import 1 counts its calls; import 2 (in the modules that import it) is `(a, b, c) ->
/// a * 5 + b * 7 + c`.
#[derive(Default)]
struct Counting {
    calls: u64,
}

impl Host for Counting {
    fn call(&mut self, import: u32, args: &[u64]) -> Result<u64, Trap> {
        self.calls += 1;
        match (import, args) {
            (0, [a, b]) if *a != 999 => Ok(a.wrapping_mul(3).wrapping_add(*b)),
            (1, []) => Ok(self.calls),
            (2, [a, b, c]) => Ok(a
                .wrapping_mul(5)
                .wrapping_add(b.wrapping_mul(7))
                .wrapping_add(*c)),
            _ => Err(Trap::Host),
        }
    }

    /// As the kernel's host takes `Translation.Protect`: the three-argument import
    /// straight from the array, every other call through `call` (so the tier's
    /// results against `wasmi` check that a call's arguments reach the array in order).
    fn call3(&mut self, import: u32, args: [u64; CALL_ARGS], n: u8) -> Result<u64, Trap> {
        if import == 2 && n == 3 {
            self.calls += 1;
            let [a, b, c] = args;
            return Ok(a
                .wrapping_mul(5)
                .wrapping_add(b.wrapping_mul(7))
                .wrapping_add(c));
        }
        self.call(import, args.get(..n as usize).ok_or(Trap::Host)?)
    }
}

/// What an invocation gave: a value, nothing, or a trap (`wasmi`'s traps are not told
/// apart beyond "trapped" and "out of fuel").
#[derive(Debug, PartialEq, Eq)]
enum Out {
    Value(Option<u64>),
    NoFuel,
    Trap,
}

const TYPES: &[(&[u8], &[u8])] = &[
    (&[I64, I64], &[I64]),      // 0: the functions under test, import 0
    (&[], &[I64]),              // 1: import 1
    (&[I32, I32], &[I32]),      // 2
    (&[I64, I64, I64], &[I64]), // 3: import 2
];

fn by_wasmi(bytes: &[u8], func: usize, args: &[u64], fuel: u64) -> (Out, u64) {
    use wasmi::{Caller, Config, Engine, Linker, Module, Store, Val};
    let mut c = Config::default();
    c.consume_fuel(true).floats(false);
    let engine = Engine::new(&c);
    let module = Module::new(&engine, bytes).expect("valid module");
    let mut linker = Linker::<Counting>::new(&engine);
    linker
        .func_wrap(
            "host",
            "0",
            |mut c: Caller<'_, Counting>, a: i64, b: i64| -> Result<i64, wasmi::Error> {
                c.data_mut()
                    .call(0, &[a as u64, b as u64])
                    .map(|v| v as i64)
                    .map_err(|_| wasmi::Error::new("refused"))
            },
        )
        .expect("link");
    linker
        .func_wrap("host", "1", |mut c: Caller<'_, Counting>| -> i64 {
            c.data_mut().call(1, &[]).unwrap_or(0) as i64
        })
        .expect("link");
    linker
        .func_wrap(
            "host",
            "2",
            |mut c: Caller<'_, Counting>, a: i64, b: i64, d: i64| -> i64 {
                c.data_mut()
                    .call(2, &[a as u64, b as u64, d as u64])
                    .unwrap_or(0) as i64
            },
        )
        .expect("link");
    let mut store = Store::new(&engine, Counting::default());
    store.set_fuel(u64::MAX / 2).expect("fuel");
    let inst = linker
        .instantiate_and_start(&mut store, &module)
        .expect("instance");
    store.set_fuel(fuel).expect("fuel");
    let f = inst
        .get_func(&store, &std::format!("f{func}"))
        .expect("export");
    let ty = f.ty(&store);
    let params: Vec<Val> = ty
        .params()
        .iter()
        .zip(args)
        .map(|(t, a)| match t {
            wasmi::ValType::I32 => Val::I32(*a as i32),
            _ => Val::I64(*a as i64),
        })
        .collect();
    let mut results = vec![Val::I64(0); ty.results().len()];
    let out = match f.call(&mut store, &params, &mut results) {
        Ok(()) => Out::Value(results.first().map(|v| match v {
            Val::I32(x) => *x as u32 as u64,
            Val::I64(x) => *x as u64,
            _ => unreachable!(),
        })),
        Err(e) if e.as_trap_code() == Some(wasmi::TrapCode::OutOfFuel) => Out::NoFuel,
        Err(_) => Out::Trap,
    };
    (out, store.data().calls)
}

fn by_tier(bytes: &[u8], func: usize, args: &[u64], fuel: u64) -> Option<(Out, u64, u64)> {
    let m = Module::translate(bytes).expect("translated");
    let f = m.export(func)?;
    let mut mem = vec![0u8; 65536];
    // The data segment, as instantiation writes it.
    if let Some(d) = data_of(bytes) {
        mem[..d.len()].copy_from_slice(d);
    }
    let mut host = Counting::default();
    let mut left = fuel;
    let args: Vec<u64> = args
        .iter()
        .map(|a| {
            if TYPE2.with(|t| t.get()) {
                *a as u32 as u64
            } else {
                *a
            }
        })
        .collect();
    // A frame left dirty, as by an earlier invocation.
    let mut frame = [0xdead_beef_u64; tier::REGS];
    let out = match tier::run(f, &mut frame, &args, &mut mem, &mut left, &mut host) {
        Ok(v) => Out::Value(v),
        Err(Trap::OutOfFuel) => Out::NoFuel,
        Err(_) => Out::Trap,
    };
    Some((out, host.calls, fuel - left))
}

/// The bytes of the module's one data segment (as [`module`] writes it: last).
fn data_of(bytes: &[u8]) -> Option<&[u8]> {
    for p in wasmparser::Parser::new(0).parse_all(bytes) {
        if let Ok(wasmparser::Payload::DataSection(r)) = p {
            return r.into_iter().next().and_then(|d| d.ok()).map(|d| d.data);
        }
    }
    None
}

std::thread_local! {
    /// Whether the function under test takes `i32` arguments (zero-extended for the tier).
    static TYPE2: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Runs export `func` on both with `args` and `fuel`: both give the same, and the tier
/// translated it. What the tier burnt.
fn same(bytes: &[u8], func: usize, args: &[u64], fuel: u64) -> (Out, u64) {
    let (w, wc) = by_wasmi(bytes, func, args, fuel);
    let (t, tc, burnt) = by_tier(bytes, func, args, fuel).expect("in the subset");
    assert_eq!(w, t, "args {args:?} fuel {fuel}");
    if !matches!(w, Out::NoFuel) {
        assert_eq!(wc, tc, "host calls");
    }
    (t, burnt)
}

fn f(code: &[u8]) -> F {
    F {
        ty: 0,
        locals: vec![],
        code: code.to_vec(),
    }
}

fn i64c(v: i64) -> Vec<u8> {
    let mut b = vec![0x42];
    sleb(v, &mut b);
    b
}

fn i32c(v: i32) -> Vec<u8> {
    let mut b = vec![0x41];
    sleb(i64::from(v), &mut b);
    b
}

/// `(a, _) -> a <op> c` for each binary operation with the constant `c` as its second
/// operand (folded into the operation), and `c <op> a` (not folded: the constant is the
/// first operand), on i64 and i32.
fn constant_ops(c: u64) -> Vec<u8> {
    let mut funcs = Vec::new();
    for op in 0x7c..=0x8a_u8 {
        let mut code = vec![0x20, 0];
        code.extend(i64c(c as i64));
        code.push(op);
        funcs.push(f(&code));
        let mut code = i64c(c as i64);
        code.extend([0x20, 0, op]);
        funcs.push(f(&code));
    }
    for op in (0x46..=0x4f_u8).chain(0x6a..=0x78) {
        let mut code = vec![0x20, 0, 0xa7];
        code.extend(i32c(c as i32));
        code.extend([op, 0xad]);
        funcs.push(f(&code));
    }
    module(TYPES, &[0, 1], &funcs, &[])
}

/// `(a, b) -> a <op> b` for each binary i64 operation, and the same on i32 (wrapped
/// arguments, the result extended unsigned).
fn binops() -> Vec<u8> {
    let mut funcs = Vec::new();
    for op in 0x7c..=0x8a_u8 {
        funcs.push(f(&[0x20, 0, 0x20, 1, op]));
    }
    for op in 0x51..=0x5a_u8 {
        funcs.push(f(&[0x20, 0, 0x20, 1, op, 0xad]));
    }
    for op in (0x46..=0x4f_u8).chain(0x6a..=0x78) {
        funcs.push(f(&[0x20, 0, 0xa7, 0x20, 1, 0xa7, op, 0xad]));
    }
    for op in [0x45_u8, 0x67, 0x68, 0x69] {
        funcs.push(f(&[0x20, 0, 0xa7, op, 0xad]));
    }
    for op in [0x50_u8, 0x79, 0x7a, 0x7b] {
        funcs.push(f(&[0x20, 0, op, if op == 0x50 { 0xad } else { 0x01 }]));
    }
    for op in [0xc0_u8, 0xc1] {
        funcs.push(f(&[0x20, 0, 0xa7, op, 0xad]));
    }
    for op in [0xc2_u8, 0xc3, 0xc4, 0xac] {
        if op == 0xac {
            funcs.push(f(&[0x20, 0, 0xa7, 0xac]));
        } else {
            funcs.push(f(&[0x20, 0, op]));
        }
    }
    module(TYPES, &[0, 1], &funcs, &[])
}

fn edge() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        Just(0),
        Just(1),
        Just(u64::MAX),
        Just(i64::MIN as u64),
        Just(i32::MIN as u32 as u64),
        Just(u32::MAX as u64),
        Just(63),
        Just(64),
        Just(32),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Every integer operation of the subset gives what `wasmi` gives, traps included
    /// (division by zero, overflow).
    #[test]
    fn operations_agree(a in edge(), b in edge()) {
        let m = binops();
        let n = Module::translate(&m).unwrap().funcs.len();
        for i in 0..n {
            same(&m, i, &[a, b], 1000);
        }
    }

    /// A constant second operand, folded into its operation, gives what `wasmi` gives
    /// (traps included); a constant first operand is left as it is.
    #[test]
    fn constant_operands_agree(a in edge(), c in edge()) {
        let m = constant_ops(c);
        let t = Module::translate(&m).unwrap();
        for (i, fun) in t.funcs.iter().enumerate() {
            let fun = fun.as_ref().unwrap();
            let folded = fun.code.iter().any(|o| matches!(o, Op::BinI { .. }));
            // The i64 pairs alternate folded, not folded; the i32 ones all fold.
            prop_assert_eq!(folded, i >= 30 || i % 2 == 0, "function {}: {:?}", i, fun.code);
            prop_assert_eq!(
                fun.code.iter().any(|o| matches!(o, Op::Const { .. })),
                !folded
            );
            // The unsigned widening of an i32 is no operation.
            let widened = fun
                .code
                .iter()
                .any(|o| matches!(o, Op::Un { op: Un::ExtendU32, .. }));
            prop_assert!(!widened);
        }
        for i in 0..t.funcs.len() {
            same(&m, i, &[a, 0], 1000);
        }
    }

    /// Loads and stores at any address: in bounds the same bytes, out of bounds the same
    /// trap; the function stores `b` at `a` (8, 4, 2 and 1 bytes) and reads it back
    /// widened with each load.
    #[test]
    fn memory_agrees(a in prop_oneof![0u64..70_000, Just(65_528), Just(65_535), any::<u64>()], b in edge()) {
        let mut funcs = Vec::new();
        for (st, ld) in [(0x37u8, 0x29u8), (0x3e, 0x35), (0x3d, 0x33), (0x3c, 0x31), (0x3e, 0x34), (0x3d, 0x32), (0x3c, 0x30)] {
            // a as i32; b; store; a as i32; load offset 3
            funcs.push(f(&[0x20, 0, 0xa7, 0x20, 1, st, 0, 0, 0x20, 0, 0xa7, ld, 0, 3]));
        }
        // i32 loads and stores
        for (st, ld) in [(0x36u8, 0x28u8), (0x3b, 0x2f), (0x3a, 0x2d), (0x3a, 0x2c), (0x3b, 0x2e)] {
            funcs.push(f(&[0x20, 0, 0xa7, 0x20, 1, 0xa7, st, 0, 0, 0x20, 0, 0xa7, ld, 0, 0, 0xad]));
        }
        funcs.push(f(&[0x3f, 0, 0xad]));
        let m = module(TYPES, &[0, 1], &funcs, &[7, 7, 7]);
        for i in 0..funcs.len() {
            same(&m, i, &[a, b], 1000);
        }
    }

    /// A counted loop: the same sum, and the fuel burnt is what the bound says (every
    /// instruction of every block entered, once per entry).
    #[test]
    fn loops_agree(n in 0u64..300) {
        // local 2 = 0; loop: if a == 0 break; l2 += a * 3 + b (host 0); a -= 1; again.
        let mut code = vec![
            0x02, 0x40, // block
            0x03, 0x40, // loop
            0x20, 0, 0x50, 0x0d, 1, // a == 0: br 1
            0x20, 2, 0x20, 0, 0x20, 1, 0x10, 0, 0x7c, 0x21, 2,
            0x20, 0,
        ];
        code.extend(i64c(1));
        code.extend([0x7d, 0x21, 0, 0x0c, 0, 0x0b, 0x0b, 0x20, 2]);
        let m = module(TYPES, &[0, 1], &[F { ty: 0, locals: vec![(1, I64)], code }], &[]);
        let (out, burnt) = same(&m, 0, &[n, 5], 100_000);
        prop_assert!(matches!(out, Out::Value(Some(_))));
        // The entry block (`block`, `loop`: 2), the loop's body (14 instructions and
        // the loop's `end`) charged whole on each of its n + 1 entries, the exiting one
        // too, and the exit block (the block's `end`, `local.get`: 2).
        prop_assert_eq!(burnt, 2 + 15 * (n + 1) + 2);
    }

    /// Branches, `if`/`else` with results, `br_table`, `select`, `local.tee`, `return`
    /// from inside blocks: the same results.
    #[test]
    fn control_agrees(a in 0u64..8, b in edge()) {
        let mut sw = vec![0x02, 0x40, 0x02, 0x40, 0x02, 0x40, 0x20, 0, 0xa7, 0x0e, 2, 0, 1, 2, 0x0b];
        sw.extend(i64c(10));
        sw.extend([0x0f, 0x0b]);
        sw.extend(i64c(20));
        sw.extend([0x0f, 0x0b]);
        sw.extend(i64c(30));
        let mut ife = vec![0x20, 0, 0x50, 0x04, I64, 0x20, 1, 0x05, 0x20, 0, 0x20, 1, 0x7c, 0x0b];
        ife.extend(i64c(7));
        ife.push(0x7e);
        let sel = vec![0x20, 1, 0x22, 2, 0x20, 0, 0x20, 0, 0xa7, 0x1b, 0x20, 2, 0x7c];
        // block (result i64): a; b; br_if 0 on a != 0 carrying b; drop; 99 end
        let mut brv = vec![0x02, I64, 0x20, 1, 0x20, 0, 0xa7, 0x0d, 0, 0x1a];
        brv.extend(i64c(99));
        brv.push(0x0b);
        // if without else, unreachable after return
        let mut dead = vec![0x20, 0, 0xa7, 0x04, 0x40, 0x20, 1, 0x0f, 0x00, 0x1a, 0x0b];
        dead.extend(i64c(-1));
        let m = module(
            TYPES,
            &[0, 1],
            &[
                f(&sw),
                f(&ife),
                F { ty: 0, locals: vec![(1, I64)], code: sel },
                f(&brv),
                f(&dead),
                f(&[0x20, 0, 0x20, 1, 0x10, 0, 0x10, 1, 0x7c]),
                f(&[0x20, 0, 0xa7, 0x04, 0x40, 0x00, 0x0b, 0x20, 1]),
            ],
            &[],
        );
        for i in 0..7 {
            same(&m, i, &[a, b], 1000);
        }
    }
}

/// A host call that refuses (`a` = 999) traps both.
#[test]
fn host_refusal_traps() {
    let m = module(TYPES, &[0, 1], &[f(&[0x20, 0, 0x20, 1, 0x10, 0])], &[]);
    assert_eq!(same(&m, 0, &[999, 1], 100).0, Out::Trap);
    assert_eq!(same(&m, 0, &[998, 1], 100).0, Out::Value(Some(998 * 3 + 1)));
}

/// An endless loop runs out of fuel on both, and the tier burns no more than it had.
#[test]
fn endless_loop_runs_out() {
    let m = module(
        TYPES,
        &[0, 1],
        &[f(&[0x03, 0x40, 0x0c, 0, 0x0b, 0x00])],
        &[],
    );
    for fuel in [0, 1, 5, 1000, 100_000] {
        let (out, burnt) = same(&m, 0, &[0, 0], fuel);
        assert_eq!(out, Out::NoFuel);
        assert!(burnt <= fuel);
    }
}

/// What the tier does not take stays with `wasmi`: calls of the module's own functions
/// (recursion), more locals or stack than its frame, `memory.grow`.
#[test]
fn outside_the_subset_is_left_out() {
    let recurse = f(&[0x20, 0, 0x20, 1, 0x10, 2]); // calls itself (function 2)
    let huge = F {
        ty: 0,
        locals: vec![(40, I64)],
        code: vec![0x20, 0],
    };
    let deep_stack = {
        let mut c = Vec::new();
        for _ in 0..40 {
            c.extend([0x20, 0]);
        }
        c.extend([0x7c; 39]);
        f(&c)
    };
    let grow = f(&[0x41, 1, 0x40, 0, 0xad]);
    let ok = f(&[0x20, 0]);
    let m = module(TYPES, &[0, 1], &[recurse, huge, deep_stack, grow, ok], &[]);
    let t = Module::translate(&m).unwrap();
    assert_eq!(t.funcs.len(), 5);
    for i in 0..4 {
        assert!(t.funcs[i].is_none(), "function {i} translated");
    }
    assert!(t.funcs[4].is_some());
    // Exports by name: `f4` is function 2 + 4 (two imports first); `memory` is no function.
    assert_eq!(t.export_named(b"f4"), Some(6));
    assert_eq!(t.export_named(b"memory"), None);
    assert_eq!(t.export_named(b"f9"), None);
    assert_eq!(same(&m, 4, &[4, 0], 1000).0, Out::Value(Some(4)));
    // wasmi runs them (the deep stack one too) or traps (recursion, out of stack).
    assert_eq!(by_wasmi(&m, 2, &[1, 0], 1000).0, Out::Value(Some(40)));
}

/// i32 functions: arguments and results as WebAssembly's `i32`.
#[test]
fn narrow_functions_agree() {
    TYPE2.with(|t| t.set(true));
    let m = module(
        TYPES,
        &[0, 1],
        &[F {
            ty: 2,
            locals: vec![],
            code: vec![0x20, 0, 0x20, 1, 0x6b],
        }],
        &[],
    );
    for (a, b) in [(1u64, 2u64), (0, 1), (u32::MAX as u64, 5)] {
        same(&m, 0, &[a, b], 100);
    }
    TYPE2.with(|t| t.set(false));
}

/// A module's functions translate into no more operations than the kernel charges for.
#[test]
fn translation_is_bounded_by_the_module_size() {
    let m = binops();
    let t = Module::translate(&m).unwrap();
    let ops: usize = t
        .funcs
        .iter()
        .flatten()
        .map(|f| f.code.len() + f.table.len())
        .sum();
    assert!(
        ops <= tier::ops_bound(m.len()),
        "{ops} > {}",
        tier::ops_bound(m.len())
    );
    assert!(Module::translate(&m[..m.len() - 3]).is_err());
}

/// A call's constant and local arguments are read in place (no constant or copy
/// operations before it), and a unary operation whose result is returned is fused with
/// the return: `unprotect`'s shape, `i64(host2(a & -4096, 4096, 3) == 0)`, is one
/// operation, a call, and a fused return; a constant that does not fit an `i32` stays an
/// operation; the results are `wasmi`'s.
#[test]
fn calls_read_arguments_in_place() {
    let mut unprotect = vec![0x20, 0];
    unprotect.extend(i64c(-4096));
    unprotect.push(0x83);
    unprotect.extend(i64c(4096));
    unprotect.extend(i64c(3));
    unprotect.extend([0x10, 2, 0x50, 0xad]);
    // host2(b, a, 1 << 40): a constant too wide to fold, locals in place
    let mut wide = vec![0x20, 1, 0x20, 0];
    wide.extend(i64c(1 << 40));
    wide.extend([0x10, 2]);
    // host2(7, a, -1): a constant first argument stays an operation (only the last ones
    // fold); host0(host1(), b) nested
    let mut first = i64c(7);
    first.extend([0x20, 0]);
    first.extend(i64c(-1));
    first.extend([0x10, 2, 0x10, 1, 0x20, 1, 0x10, 0, 0x7c]);
    // a call result set into a local, then the local returned eqz'd with `i32.eqz`
    let setres = vec![
        0x20, 0, 0x20, 1, 0x10, 0, 0x21, 2, 0x20, 2, 0xa7, 0x45, 0xad,
    ];
    let m = module(
        TYPES,
        &[0, 1, 3],
        &[
            f(&unprotect),
            f(&wide),
            f(&first),
            F {
                ty: 0,
                locals: vec![(1, I64)],
                code: setres,
            },
        ],
        &[],
    );
    let t = Module::translate(&m).unwrap();
    let code = |i: usize| &t.funcs[i].as_ref().unwrap().code;
    assert!(
        matches!(
            code(0)[..],
            [
                Op::Fuel(_),
                Op::BinI { .. },
                Op::CallA {
                    n: 3,
                    imm: [3, 4096],
                    ..
                },
                Op::RetUn { op: Un::Eqz64, .. }
            ]
        ),
        "{:?}",
        code(0)
    );
    assert!(
        matches!(
            code(1)[..],
            [
                Op::Fuel(_),
                Op::Const { .. },
                Op::CallA { src: [1, 0, _], .. },
                Op::Return { .. }
            ]
        ),
        "{:?}",
        code(1)
    );
    assert_eq!(
        code(3)
            .iter()
            .filter(|o| matches!(o, Op::Copy { .. }))
            .count(),
        0,
        "{:?}",
        code(3)
    );
    for args in [
        [0u64, 0],
        [5, 6],
        [999, 1],
        [u64::MAX, 1 << 63],
        [12_345, 4096],
    ] {
        for i in 0..4 {
            same(&m, i, &args, 1000);
        }
    }
}

/// One operation of a random function ([`random_programs_agree`]).
#[derive(Clone, Debug)]
enum G {
    Local(u8),
    Const(i64),
    Set(u8),
    Tee(u8),
    Bin(u8),
    Un(u8),
    Call(u8),
    Drop,
}

fn g() -> impl Strategy<Value = G> {
    prop_oneof![
        4 => (0u8..4).prop_map(G::Local),
        4 => prop_oneof![any::<i64>(), -5000i64..5000, Just(i64::MIN), Just(1 << 31)].prop_map(G::Const),
        1 => (2u8..4).prop_map(G::Set),
        1 => (2u8..4).prop_map(G::Tee),
        3 => prop_oneof![0x7cu8..=0x7e, 0x83u8..=0x8a, 0x51u8..=0x5a].prop_map(G::Bin),
        2 => prop_oneof![Just(0x50u8), Just(0x79), Just(0x7a), Just(0x7b), Just(0xc4)].prop_map(G::Un),
        3 => (0u8..3).prop_map(G::Call),
        1 => Just(G::Drop),
    ]
}

/// The function's bytes: `ops` kept valid (an operation without its operands on the
/// stack is left out), the stack at most 20 deep, and what is left at the end summed into
/// one value, returned as it is or through `i64.eqz` (the fused return).
fn program(ops: &[G], eqz: bool) -> Vec<u8> {
    let mut c = Vec::new();
    let mut depth = 0usize;
    for o in ops {
        match *o {
            G::Local(l) if depth < 20 => {
                c.extend([0x20, l]);
                depth += 1;
            }
            G::Const(v) if depth < 20 => {
                c.extend(i64c(v));
                depth += 1;
            }
            G::Set(l) if depth >= 1 => {
                c.extend([0x21, l]);
                depth -= 1;
            }
            G::Tee(l) if depth >= 1 => c.extend([0x22, l]),
            G::Bin(op) if depth >= 2 => {
                c.push(op);
                if (0x51..=0x5a).contains(&op) {
                    c.push(0xad);
                }
                depth -= 1;
            }
            G::Un(op) if depth >= 1 => {
                c.push(op);
                if op == 0x50 {
                    c.push(0xad);
                }
            }
            G::Call(0) if depth >= 2 => {
                c.extend([0x10, 0]);
                depth -= 1;
            }
            G::Call(1) if depth < 20 => {
                c.extend([0x10, 1]);
                depth += 1;
            }
            G::Call(2) if depth >= 3 => {
                c.extend([0x10, 2]);
                depth -= 2;
            }
            G::Drop if depth >= 1 => {
                c.push(0x1a);
                depth -= 1;
            }
            _ => {}
        }
    }
    if depth == 0 {
        c.extend([0x20, 0]);
        depth = 1;
    }
    c.extend(core::iter::repeat_n(0x7c, depth - 1));
    if eqz {
        c.extend([0x50, 0xad]);
    }
    c
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random straight-line functions of locals, constants, integer operations and
    /// import calls of 0, 2 and 3 arguments (so calls whose arguments are read in place,
    /// constants folded into calls, results set into locals, fused returns): the same
    /// result, the same host calls, the same traps as `wasmi`.
    #[test]
    fn random_programs_agree(
        ops in proptest::collection::vec(g(), 0..40),
        eqz in any::<bool>(),
        a in edge(),
        b in edge(),
    ) {
        let code = program(&ops, eqz);
        let m = module(TYPES, &[0, 1, 3], &[F { ty: 0, locals: vec![(2, I64)], code }], &[]);
        same(&m, 0, &[a, b], 10_000);
    }
}
