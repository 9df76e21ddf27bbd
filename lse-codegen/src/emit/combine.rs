//! The combining step of the collectives' reduction tree, the scaled dots' epilogue and the
//! order of a bf16 dot's products, shared by both targets so they agree bit for bit with
//! each other and with the generated Rust.

use super::Builder;
use lse_dsl::ir::{CollectiveOp, DotScale, TileBinary, Ty};

/// `op(a, b)` for `ReduceSum`/`ReduceMax`/`ReduceMin` on `ty`; `None` if unsupported.
pub(crate) fn combine(
    b: &mut Builder,
    op: CollectiveOp,
    ty: Ty,
    a: &str,
    c: &str,
) -> Option<String> {
    Some(match (op, ty) {
        (CollectiveOp::ReduceSum, Ty::F32) => b.op(format!("fadd float {a}, {c}")),
        (CollectiveOp::ReduceSum, Ty::I32 | Ty::U32) => b.op(format!("add i32 {a}, {c}")),
        (CollectiveOp::ReduceMax, Ty::F32) => {
            b.call("float", "llvm.maxnum.f32", &[("float", a), ("float", c)])
        }
        (CollectiveOp::ReduceMin, Ty::F32) => {
            b.call("float", "llvm.minnum.f32", &[("float", a), ("float", c)])
        }
        (CollectiveOp::ReduceMax, Ty::I32) => {
            b.call("i32", "llvm.smax.i32", &[("i32", a), ("i32", c)])
        }
        (CollectiveOp::ReduceMin, Ty::I32) => {
            b.call("i32", "llvm.smin.i32", &[("i32", a), ("i32", c)])
        }
        (CollectiveOp::ReduceMax, Ty::U32) => {
            b.call("i32", "llvm.umax.i32", &[("i32", a), ("i32", c)])
        }
        (CollectiveOp::ReduceMin, Ty::U32) => {
            b.call("i32", "llvm.umin.i32", &[("i32", a), ("i32", c)])
        }
        _ => return None,
    })
}

/// Argmax step: returns the winning `(value, index)` of `(av, ai)` and `(bv, bi)`. `b` wins
/// if it is larger, equal with a lower index, or `a` is NaN and `b` is a number or has the
/// lower index; a NaN `b` never beats a number.
pub(crate) fn combine_argmax(
    b: &mut Builder,
    av: &str,
    ai: &str,
    bv: &str,
    bi: &str,
) -> (String, String) {
    let gt = b.op(format!("fcmp ogt float {bv}, {av}"));
    let eq = b.op(format!("fcmp oeq float {bv}, {av}"));
    let lower = b.op(format!("icmp ult i32 {bi}, {ai}"));
    let a_nan = b.op(format!("fcmp uno float {av}, 0.0"));
    let b_num = b.op(format!("fcmp ord float {bv}, 0.0"));
    let tie = b.op(format!("and i1 {eq}, {lower}"));
    let nan_case0 = b.op(format!("or i1 {b_num}, {lower}"));
    let nan_case = b.op(format!("and i1 {a_nan}, {nan_case0}"));
    let w0 = b.op(format!("or i1 {gt}, {tie}"));
    let take = b.op(format!("or i1 {w0}, {nan_case}"));
    let v = b.op(format!("select i1 {take}, float {bv}, float {av}"));
    let i = b.op(format!("select i1 {take}, i32 {bi}, i32 {ai}"));
    (v, i)
}

/// `op(a, c)` on f32 for the elementwise and row tile statements: one IEEE operation, `Max`
/// with `reduce_max`'s `maxnum`, so every target agrees with the generated Rust bit for bit.
pub(crate) fn tile_binary(b: &mut Builder, op: TileBinary, a: &str, c: &str) -> String {
    match op {
        TileBinary::Max => combine(b, CollectiveOp::ReduceMax, Ty::F32, a, c)
            .expect("reduce_max is defined on f32"),
        _ => arithmetic(b, op, "float", a, c),
    }
}

/// [`tile_binary`] lane by lane on `<16 x float>` vectors: each lane the same operation as
/// the scalar one (`maxnum` is elementwise), for host loops that hold 16 rows in a vector.
pub(crate) fn tile_binary_x16(b: &mut Builder, op: TileBinary, a: &str, c: &str) -> String {
    let ty = "<16 x float>";
    match op {
        TileBinary::Max => b.call(ty, "llvm.maxnum.v16f32", &[(ty, a), (ty, c)]),
        _ => arithmetic(b, op, ty, a, c),
    }
}

/// The arithmetic [`TileBinary`] operations on values of LLVM type `ty`.
fn arithmetic(b: &mut Builder, op: TileBinary, ty: &str, a: &str, c: &str) -> String {
    let inst = match op {
        TileBinary::Add => "fadd",
        TileBinary::Sub => "fsub",
        TileBinary::Mul => "fmul",
        TileBinary::Div => "fdiv",
        TileBinary::Max => unreachable!("max is maxnum, not an instruction"),
    };
    b.op(format!("{inst} {ty} {a}, {c}"))
}

/// `old` plus an integer dot's sum `sum` scaled by the factors `f` (`Columns`: the column's
/// scale; `Dequant`: the row's offset and scale, then the column's scale), on scalars or
/// (`lanes`) 16-lane vectors: `Columns`, `old + sum · s` in wrapping i32; `Dequant`,
/// `old + (f32(sum) + offset) · (row · col)` in f32, one rounding each, as the generated Rust
/// does, so the host and GPU lowerings agree with it bit for bit.
pub(crate) fn scaled_sum(
    b: &mut Builder,
    s: DotScale,
    f: &[String],
    sum: &str,
    old: &str,
    lanes: bool,
) -> String {
    let ty = |elem: &str| {
        if lanes {
            format!("<16 x {elem}>")
        } else {
            elem.to_string()
        }
    };
    let (int, float) = (ty("i32"), ty("float"));
    match s {
        DotScale::Columns { .. } => {
            let scaled = b.op(format!("mul {int} {sum}, {}", f[0]));
            b.op(format!("add {int} {old}, {scaled}"))
        }
        DotScale::Dequant { .. } => {
            let x = b.op(format!("sitofp {int} {sum} to {float}"));
            let x = b.op(format!("fadd {float} {x}, {}", f[0]));
            dequant_sum(b, &f[1..], &x, old, lanes)
        }
    }
}

/// `old + x · (f[0] · f[1])` in f32 (scalars, or with `lanes` 16-lane vectors), one rounding
/// per operation: the end of `tile_dot_dequant`'s element, and `tile_dequant`'s.
pub(crate) fn dequant_sum(
    b: &mut Builder,
    f: &[String],
    x: &str,
    old: &str,
    lanes: bool,
) -> String {
    let float = if lanes { "<16 x float>" } else { "float" };
    let d = b.op(format!("fmul {float} {}, {}", f[0], f[1]));
    let p = b.op(format!("fmul {float} {x}, {d}"));
    b.op(format!("fadd {float} {old}, {p}"))
}

/// The `k` index a float dot adds at step `step` (an `i32` value) of `k`: `step`, or when both
/// operands are bf16 (`pairs`) each pair `(2i, 2i + 1)` odd index first, a last unpaired one
/// last, as `lse_dsl::rt::tile::dot_step` orders the reference and `vdpbf16ps` adds a pair.
pub(crate) fn dot_step(b: &mut Builder, step: &str, k: u32, pairs: bool) -> String {
    if !pairs || k < 2 {
        return step.to_string();
    }
    let swapped = b.op(format!("xor i32 {step}, 1"));
    if k.is_multiple_of(2) {
        return swapped;
    }
    let paired = b.op(format!("icmp ult i32 {step}, {}", k - 1));
    b.op(format!("select i1 {paired}, i32 {swapped}, i32 {step}"))
}
