//! Expression lowering: every LOOM expression becomes straight-line LLVM IR, except the
//! lazy operators (`&&`, `||`, `Select`), which branch and join with a `phi`.

use super::{align_of, constant, lty, Emitter, Lowered};
use lse_dsl::ir::{BinOp, Builtin, Expr, ExprKind, MathFn, Ty, UnOp};

impl Emitter<'_> {
    /// Lowers `e`, returning the LLVM operand holding its value.
    pub fn expr(&mut self, e: &Expr) -> Lowered<String> {
        Ok(match &e.kind {
            ExprKind::Const(bits) => constant(&mut self.b, *bits, e.ty),
            ExprKind::Var(v) => self.read_var(*v)?,
            ExprKind::Param(p) => match self.scalars.get(*p as usize).cloned().flatten() {
                Some(v) => v,
                None => return Err(format!("parameter {p} is used as a scalar but is not one")),
            },
            ExprKind::Load { buf, index } => {
                let p = self.buf_elem_ptr(*buf, index, e.ty)?;
                let md = self.mem_md.clone();
                self.b.op(format!(
                    "load {}, {} {p}, align {}{md}",
                    lty(e.ty),
                    self.buf_ptr,
                    align_of(e.ty)
                ))
            }
            ExprKind::SharedLoad { array, index } => {
                let p = self.shared_elem_ptr(*array, index, e.ty)?;
                let md = self.mem_md.clone();
                self.b.op(format!(
                    "load {}, {} {p}, align {}{md}",
                    lty(e.ty),
                    self.shared_ptr,
                    align_of(e.ty)
                ))
            }
            ExprKind::Builtin(b) => match b {
                Builtin::LocalId => self.lid.clone(),
                Builtin::GroupId(d) => self.group_id[(*d as usize).min(2)].clone(),
                Builtin::NumGroups(d) => self.num_groups[(*d as usize).min(2)].clone(),
                Builtin::GroupSize => self.k.workgroup_size.to_string(),
            },
            ExprKind::Unary(op, a) => {
                let v = self.expr(a)?;
                match (op, a.ty) {
                    (UnOp::Neg, Ty::F32) => self.b.op(format!("fneg float {v}")),
                    (UnOp::Neg, Ty::I32 | Ty::U32) => self.b.op(format!("sub i32 0, {v}")),
                    // The sign bit, as `half`'s `Neg`.
                    (UnOp::Neg, Ty::Bf16 | Ty::F16) => self.b.op(format!("xor i16 {v}, -32768")),
                    (UnOp::Not, Ty::Bool) => self.b.op(format!("xor i1 {v}, true")),
                    (UnOp::Not, Ty::I32 | Ty::U32) => self.b.op(format!("xor i32 {v}, -1")),
                    (op, t) => return Err(format!("unary {op:?} on {}", t.rust_name())),
                }
            }
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b)?,
            ExprKind::Cast(a) => self.cast(a, e.ty)?,
            ExprKind::Math(f, args) => self.math(*f, args, e.ty)?,
            ExprKind::Select(c, a, b) => {
                let cv = self.expr(c)?;
                let (lt, lf, end) = (
                    self.b.label("sel.t"),
                    self.b.label("sel.f"),
                    self.b.label("sel.end"),
                );
                self.b.cbr(&cv, &lt, &lf);
                self.b.start(&lt);
                let av = self.expr(a)?;
                let from_a = self.b.cur.clone();
                self.b.br(&end);
                self.b.start(&lf);
                let bv = self.expr(b)?;
                let from_b = self.b.cur.clone();
                self.b.br(&end);
                self.b.start(&end);
                self.b.op(format!(
                    "phi {} [ {av}, %{from_a} ], [ {bv}, %{from_b} ]",
                    lty(e.ty)
                ))
            }
        })
    }

    /// `zext` of a u32 index to i64.
    fn index64(&mut self, index: &Expr) -> Lowered<String> {
        let i = self.index(index)?;
        Ok(self.b.op(format!("zext i32 {i} to i64")))
    }

    /// Lowers an index expression. The `+`/`*` spine of a `u32` index (the sum of products
    /// at its top, not operands of other operators) is evaluated without wrap-around (LOOM
    /// semantics: an index whose arithmetic would wrap is out of bounds, hence undefined),
    /// so it gets `nuw`: LLVM can then distribute the zero-extension to i64 over the terms
    /// and see consecutive or uniform addresses across work-items.
    fn index(&mut self, e: &Expr) -> Lowered<String> {
        match &e.kind {
            ExprKind::Binary(op @ (BinOp::Add | BinOp::Mul), a, b)
                if e.ty == Ty::U32 && a.ty == Ty::U32 && b.ty == Ty::U32 =>
            {
                let av = self.index(a)?;
                let bv = self.index(b)?;
                let inst = if *op == BinOp::Add { "add" } else { "mul" };
                Ok(self.b.op(format!("{inst} nuw i32 {av}, {bv}")))
            }
            _ => self.expr(e),
        }
    }

    /// Address of `buf[index]`.
    pub fn buf_elem_ptr(&mut self, buf: u32, index: &Expr, ty: Ty) -> Lowered<String> {
        let Some(base) = self.bufs.get(buf as usize).cloned().flatten() else {
            return Err(format!("parameter {buf} is indexed but is not a buffer"));
        };
        let i = self.index64(index)?;
        Ok(self.b.op(format!(
            "getelementptr inbounds {}, {} {base}, i64 {i}",
            lty(ty),
            self.buf_ptr
        )))
    }

    /// Address of `arr[index]` on a shared array.
    pub fn shared_elem_ptr(&mut self, array: u32, index: &Expr, ty: Ty) -> Lowered<String> {
        let Some(base) = self.shared.get(array as usize).cloned() else {
            return Err(format!("shared array {array} is not declared"));
        };
        let i = self.index(index)?;
        if self.shared_ptr == "ptr" {
            // 64-bit host pointers: a zero-extended index keeps the `nuw` terms visible.
            let i = self.b.op(format!("zext i32 {i} to i64"));
            return Ok(self.b.op(format!(
                "getelementptr inbounds {}, {} {base}, i64 {i}",
                lty(ty),
                self.shared_ptr
            )));
        }
        Ok(self.b.op(format!(
            "getelementptr inbounds {}, {} {base}, i32 {i}",
            lty(ty),
            self.shared_ptr
        )))
    }

    fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr) -> Lowered<String> {
        if matches!(op, BinOp::And | BinOp::Or) {
            return self.lazy_logic(op == BinOp::And, a, b);
        }
        let t = a.ty;
        let av = self.expr(a)?;
        let bv = self.expr(b)?;
        if matches!(t, Ty::Bf16 | Ty::F16) {
            return self.half_binary(op, t, &av, &bv);
        }
        let ty = lty(t);
        let signed = t == Ty::I32;
        let inst: String = match (op, t) {
            (BinOp::Add, Ty::F32) => "fadd".into(),
            (BinOp::Sub, Ty::F32) => "fsub".into(),
            (BinOp::Mul, Ty::F32) => "fmul".into(),
            (BinOp::Div, Ty::F32) => "fdiv".into(),
            (BinOp::Rem, Ty::F32) => "frem".into(),
            (BinOp::Add, Ty::I32 | Ty::U32) => "add".into(),
            (BinOp::Sub, Ty::I32 | Ty::U32) => "sub".into(),
            (BinOp::Mul, Ty::I32 | Ty::U32) => "mul".into(),
            (BinOp::Div, Ty::I32 | Ty::U32) => if signed { "sdiv" } else { "udiv" }.into(),
            (BinOp::Rem, Ty::I32 | Ty::U32) => if signed { "srem" } else { "urem" }.into(),
            (BinOp::BitAnd, Ty::I32 | Ty::U32 | Ty::Bool) => "and".into(),
            (BinOp::BitOr, Ty::I32 | Ty::U32 | Ty::Bool) => "or".into(),
            (BinOp::BitXor, Ty::I32 | Ty::U32 | Ty::Bool) => "xor".into(),
            (BinOp::Shl | BinOp::Shr, Ty::I32 | Ty::U32) => {
                let amt = self.b.op(format!("and i32 {bv}, 31"));
                let i = match op {
                    BinOp::Shl => "shl",
                    _ if signed => "ashr",
                    _ => "lshr",
                };
                return Ok(self.b.op(format!("{i} i32 {av}, {amt}")));
            }
            (op, Ty::F32) if op.is_comparison() => {
                return Ok(self
                    .b
                    .op(format!("fcmp {} float {av}, {bv}", fcmp_pred(op))));
            }
            (op, Ty::I32 | Ty::U32 | Ty::Bool) if op.is_comparison() => {
                let s = if signed { "s" } else { "u" };
                let p = match op {
                    BinOp::Lt => format!("{s}lt"),
                    BinOp::Le => format!("{s}le"),
                    BinOp::Gt => format!("{s}gt"),
                    BinOp::Ge => format!("{s}ge"),
                    BinOp::Eq => "eq".into(),
                    _ => "ne".into(),
                };
                return Ok(self.b.op(format!("icmp {p} {ty} {av}, {bv}")));
            }
            (op, t) => return Err(format!("binary {op:?} on {}", t.rust_name())),
        };
        Ok(self.b.op(format!("{inst} {ty} {av}, {bv}")))
    }

    /// `op` on two bf16 or f16 values `t`: both widened to f32 (exactly), the f32 operation,
    /// and an arithmetic result rounded once to `t` (round to nearest even), as the `half`
    /// crate's operators compute it; comparisons compare the widened values.
    fn half_binary(&mut self, op: BinOp, t: Ty, av: &str, bv: &str) -> Lowered<String> {
        let x = convert(&mut self.b, av, t, Ty::F32);
        let y = convert(&mut self.b, bv, t, Ty::F32);
        let inst = match op {
            BinOp::Add => "fadd",
            BinOp::Sub => "fsub",
            BinOp::Mul => "fmul",
            BinOp::Div => "fdiv",
            op if op.is_comparison() => {
                return Ok(self.b.op(format!("fcmp {} float {x}, {y}", fcmp_pred(op))));
            }
            op => return Err(format!("binary {op:?} on {}", t.rust_name())),
        };
        let r = self.b.op(format!("{inst} float {x}, {y}"));
        Ok(convert(&mut self.b, &r, Ty::F32, t))
    }

    /// `a && b` / `a || b`, evaluating `b` only when needed.
    fn lazy_logic(&mut self, is_and: bool, a: &Expr, b: &Expr) -> Lowered<String> {
        let av = self.expr(a)?;
        let from_a = self.b.cur.clone();
        let (rhs, end) = (self.b.label("logic.rhs"), self.b.label("logic.end"));
        if is_and {
            self.b.cbr(&av, &rhs, &end);
        } else {
            self.b.cbr(&av, &end, &rhs);
        }
        self.b.start(&rhs);
        let bv = self.expr(b)?;
        let from_b = self.b.cur.clone();
        self.b.br(&end);
        self.b.start(&end);
        let short = if is_and { "false" } else { "true" };
        Ok(self.b.op(format!(
            "phi i1 [ {short}, %{from_a} ], [ {bv}, %{from_b} ]"
        )))
    }

    /// Rust's `as` from f32 to i32 (`signed`) or u32: toward zero, NaN to 0, out of range to
    /// the nearest end. Written with compares and selects around an in-range `fptosi` /
    /// `fptoui`, which vectorise; the backend scalarised the vector forms of
    /// `llvm.fpto*i.sat` lane by lane with branches.
    fn saturating_to_int(&mut self, v: &str, signed: bool) -> String {
        // The smallest value that saturates at the top, and the bottom end (as f32, exact).
        let (top, bottom, max, conv) = if signed {
            (
                "0x41E0000000000000",
                "0xC1E0000000000000",
                "2147483647",
                "fptosi",
            )
        } else {
            ("0x41F0000000000000", "0.0", "-1", "fptoui")
        };
        let below = self.b.op(format!("fcmp olt float {v}, {bottom}"));
        let floored = self
            .b
            .op(format!("select i1 {below}, float {bottom}, float {v}"));
        let above = self.b.op(format!("fcmp oge float {v}, {top}"));
        let nan = self.b.op(format!("fcmp uno float {v}, 0.0"));
        let out = self.b.op(format!("or i1 {above}, {nan}"));
        let in_range = self
            .b
            .op(format!("select i1 {out}, float 0.0, float {floored}"));
        let int = self.b.op(format!("{conv} float {in_range} to i32"));
        self.b
            .op(format!("select i1 {above}, i32 {max}, i32 {int}"))
    }

    fn cast(&mut self, a: &Expr, to: Ty) -> Lowered<String> {
        let v = self.expr(a)?;
        Ok(match (a.ty, to) {
            (x, y) if x == y => v,
            (Ty::I32 | Ty::U32, Ty::I32 | Ty::U32) => v,
            (Ty::F32, Ty::I32) => self.saturating_to_int(&v, true),
            (Ty::F32, Ty::U32) => self.saturating_to_int(&v, false),
            (Ty::I32, Ty::F32) => self.b.op(format!("sitofp i32 {v} to float")),
            (Ty::U32, Ty::F32) => self.b.op(format!("uitofp i32 {v} to float")),
            (Ty::Bool, Ty::I32 | Ty::U32) => self.b.op(format!("zext i1 {v} to i32")),
            (Ty::Bool, Ty::F32) => self.b.op(format!("uitofp i1 {v} to float")),
            (from, to) => {
                return Err(format!(
                    "cast from {} to {}",
                    from.rust_name(),
                    to.rust_name()
                ))
            }
        })
    }

    fn math(&mut self, f: MathFn, args: &[Expr], ty: Ty) -> Lowered<String> {
        let vals = args
            .iter()
            .map(|a| self.expr(a))
            .collect::<Lowered<Vec<String>>>()?;
        let arg_ty = args.first().map(|a| a.ty).unwrap_or(ty);
        let want = match f {
            MathFn::Fma => 3,
            MathFn::Max | MathFn::Min => 2,
            _ => 1,
        };
        if vals.len() != want {
            return Err(format!("{f:?} takes {want} arguments, got {}", vals.len()));
        }
        let x = vals[0].as_str();
        let b = &mut self.b;
        let loom_fn = match f {
            MathFn::Exp => Some(crate::math::EXP_FN),
            MathFn::Log => Some(crate::math::LOG_FN),
            MathFn::Sigmoid => Some(crate::math::SIGMOID_FN),
            MathFn::Silu => Some(crate::math::SILU_FN),
            MathFn::Tanh => Some(crate::math::TANH_FN),
            _ => None,
        };
        if let (Some(name), Ty::F32) = (loom_fn, arg_ty) {
            return Ok(crate::math::call(b, name, x));
        }
        Ok(match (f, arg_ty) {
            (MathFn::Sqrt, Ty::F32) => b.call("float", "llvm.sqrt.f32", &[("float", x)]),
            (MathFn::Rsqrt, Ty::F32) => {
                let s = b.call("float", "llvm.sqrt.f32", &[("float", x)]);
                b.op(format!("fdiv float 1.0, {s}"))
            }
            (MathFn::Fma, Ty::F32) => b.call(
                "float",
                "llvm.fma.f32",
                &[("float", x), ("float", &vals[1]), ("float", &vals[2])],
            ),
            (MathFn::Max, Ty::F32) => b.call(
                "float",
                "llvm.maxnum.f32",
                &[("float", x), ("float", &vals[1])],
            ),
            (MathFn::Min, Ty::F32) => b.call(
                "float",
                "llvm.minnum.f32",
                &[("float", x), ("float", &vals[1])],
            ),
            (MathFn::Max, Ty::I32) => {
                b.call("i32", "llvm.smax.i32", &[("i32", x), ("i32", &vals[1])])
            }
            (MathFn::Min, Ty::I32) => {
                b.call("i32", "llvm.smin.i32", &[("i32", x), ("i32", &vals[1])])
            }
            (MathFn::Max, Ty::U32) => {
                b.call("i32", "llvm.umax.i32", &[("i32", x), ("i32", &vals[1])])
            }
            (MathFn::Min, Ty::U32) => {
                b.call("i32", "llvm.umin.i32", &[("i32", x), ("i32", &vals[1])])
            }
            (MathFn::Abs, Ty::F32) => b.call("float", "llvm.fabs.f32", &[("float", x)]),
            (MathFn::Abs, Ty::I32) => b.call("i32", "llvm.abs.i32", &[("i32", x), ("i1", "false")]),
            (MathFn::Abs, Ty::U32) => x.to_string(),
            (MathFn::Bf16ToF32, Ty::Bf16) => bf16_to_f32(b, x),
            (MathFn::F32ToBf16, Ty::F32) => f32_to_bf16(b, x),
            (MathFn::F16ToF32, Ty::F16) => {
                let h = b.op(format!("bitcast i16 {x} to half"));
                b.op(format!("fpext half {h} to float"))
            }
            (MathFn::F32ToF16, Ty::F32) => {
                let h = b.op(format!("fptrunc float {x} to half"));
                b.op(format!("bitcast half {h} to i16"))
            }
            (MathFn::F32FromBits, Ty::U32) => b.op(format!("bitcast i32 {x} to float")),
            (MathFn::F16FromBits | MathFn::Bf16FromBits, Ty::U32) => {
                b.op(format!("trunc i32 {x} to i16"))
            }
            (f, t) => return Err(format!("{f:?} on {}", t.rust_name())),
        })
    }
}

/// The `fcmp` predicate of a float comparison: ordered, except `!=` (true on NaN), as Rust's
/// operators on `f32`, `bf16` and `f16`.
fn fcmp_pred(op: BinOp) -> &'static str {
    match op {
        BinOp::Lt => "olt",
        BinOp::Le => "ole",
        BinOp::Gt => "ogt",
        BinOp::Ge => "oge",
        BinOp::Eq => "oeq",
        _ => "une",
    }
}

/// Calls `float name(float)`: an intrinsic (declared here) or a function the module defines.
/// `x` of LOOM type `from` as type `to`, among f32, bf16 and f16 (16-bit values as `i16`
/// bits): widening is exact, narrowing rounds to nearest even like the generated Rust, and
/// 16-bit to 16-bit goes through f32. Between the integer tile types, i32 to i16, i8 or u8
/// wraps and back is exact (sign- or zero-extended); i32 to f32 rounds to nearest even
/// (Rust's `as f32`).
pub(crate) fn convert(b: &mut super::Builder, x: &str, from: Ty, to: Ty) -> String {
    match (from, to) {
        _ if from == to => return x.to_string(),
        (Ty::I32, Ty::I16) => return b.op(format!("trunc i32 {x} to i16")),
        (Ty::I16, Ty::I32) => return b.op(format!("sext i16 {x} to i32")),
        (Ty::I32, Ty::I8 | Ty::U8) => return b.op(format!("trunc i32 {x} to i8")),
        (Ty::I8, Ty::I32) => return b.op(format!("sext i8 {x} to i32")),
        (Ty::U8, Ty::I32) => return b.op(format!("zext i8 {x} to i32")),
        (Ty::I32, Ty::F32) => return b.op(format!("sitofp i32 {x} to float")),
        _ => {}
    }
    let wide = match from {
        Ty::Bf16 => bf16_to_f32(b, x),
        Ty::F16 => {
            let h = b.op(format!("bitcast i16 {x} to half"));
            b.op(format!("fpext half {h} to float"))
        }
        _ => x.to_string(),
    };
    match to {
        Ty::Bf16 => f32_to_bf16(b, &wide),
        Ty::F16 => {
            let h = b.op(format!("fptrunc float {wide} to half"));
            b.op(format!("bitcast half {h} to i16"))
        }
        _ => wide,
    }
}

/// bf16 bits -> f32, exactly as `half::bf16::to_f32` (a NaN gets its quiet bit set).
fn bf16_to_f32(b: &mut super::Builder, x: &str) -> String {
    let w = b.op(format!("zext i16 {x} to i32"));
    let mag = b.op(format!("and i32 {w}, 32767"));
    let nan = b.op(format!("icmp ugt i32 {mag}, 32640"));
    let quiet = b.op(format!("or i32 {w}, 64"));
    let sel = b.op(format!("select i1 {nan}, i32 {quiet}, i32 {w}"));
    let bits = b.op(format!("shl i32 {sel}, 16"));
    b.op(format!("bitcast i32 {bits} to float"))
}

/// f32 -> bf16 bits, exactly as `half::bf16::from_f32`: round to nearest even; a NaN keeps
/// its high payload and gets the quiet bit.
fn f32_to_bf16(b: &mut super::Builder, x: &str) -> String {
    let bits = b.op(format!("bitcast float {x} to i32"));
    let hi = b.op(format!("lshr i32 {bits}, 16"));
    let nan_bits = b.op(format!("or i32 {hi}, 64"));
    let lsb = b.op(format!("and i32 {hi}, 1"));
    let bias = b.op(format!("add i32 {lsb}, 32767"));
    let sum = b.op(format!("add i32 {bits}, {bias}"));
    let rounded = b.op(format!("lshr i32 {sum}, 16"));
    let mag = b.op(format!("and i32 {bits}, 2147483647"));
    let nan = b.op(format!("icmp ugt i32 {mag}, 2139095040"));
    let r = b.op(format!("select i1 {nan}, i32 {nan_bits}, i32 {rounded}"));
    b.op(format!("trunc i32 {r} to i16"))
}
