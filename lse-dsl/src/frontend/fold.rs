//! Constant evaluation: `const` items, shared-array lengths, and folding of operators whose
//! operands are constants. Results follow the IR semantics exactly (wrapping integer
//! arithmetic, shifts modulo 32, saturating float-to-int casts, NaN-ignoring max/min), and
//! only exactly-rounded float operations are folded, so folding never changes a result.

use crate::ir::{BinOp, Builtin, Expr, ExprKind, MathFn, Ty, UnOp};

/// Why an expression is not a compile-time constant.
pub(super) type NotConst = String;

/// Evaluates `e` to its constant bits, with `group_size()` = `workgroup`.
pub(super) fn eval(e: &Expr, workgroup: u32) -> Result<u32, NotConst> {
    match &e.kind {
        ExprKind::Const(v) => Ok(*v),
        ExprKind::Builtin(Builtin::GroupSize) => Ok(workgroup),
        ExprKind::Builtin(_) => Err("it uses a work-item or grid id".into()),
        ExprKind::Var(_) => Err("it reads a variable".into()),
        ExprKind::Param(_) => Err("it reads a kernel parameter".into()),
        ExprKind::Load { .. } | ExprKind::SharedLoad { .. } => Err("it reads memory".into()),
        ExprKind::Unary(op, a) => unary(*op, a.ty, eval(a, workgroup)?),
        ExprKind::Binary(op, a, b) => {
            let x = eval(a, workgroup)?;
            if matches!(op, BinOp::And | BinOp::Or) {
                // Lazy: the right side only matters when the left does not decide.
                let decided = (*op == BinOp::And && x == 0) || (*op == BinOp::Or && x == 1);
                return if decided { Ok(x) } else { eval(b, workgroup) };
            }
            binary(*op, a.ty, x, eval(b, workgroup)?)
        }
        ExprKind::Cast(a) => Ok(cast(a.ty, e.ty, eval(a, workgroup)?)),
        ExprKind::Select(c, a, b) => {
            if eval(c, workgroup)? != 0 {
                eval(a, workgroup)
            } else {
                eval(b, workgroup)
            }
        }
        ExprKind::Math(f, args) => {
            let vals = args
                .iter()
                .map(|a| eval(a, workgroup))
                .collect::<Result<Vec<_>, _>>()?;
            math(*f, e.ty, &vals)
        }
    }
}

/// `e` itself, a constant when all its operands are constants and folding is exact, or the
/// other operand of an integer `x + 0`, `0 + x`, `x - 0`, `x * 1` or `1 * x` (what a
/// constant instance's `t + (WORDS - 5)` becomes where `WORDS` is 5: the expression written
/// without it).
pub(super) fn fold(e: Expr, workgroup: u32) -> Expr {
    let e = match e.kind {
        ExprKind::Binary(op, a, b) if e.ty.is_int() => match (op, const_of(&a), const_of(&b)) {
            (BinOp::Add | BinOp::Sub, _, Some(0)) | (BinOp::Mul, _, Some(1)) => return *a,
            (BinOp::Add, Some(0), _) | (BinOp::Mul, Some(1), _) => return *b,
            _ => Expr::new(ExprKind::Binary(op, a, b), e.ty),
        },
        kind => Expr::new(kind, e.ty),
    };
    let operands_const = match &e.kind {
        ExprKind::Unary(_, a) | ExprKind::Cast(a) => is_const(a),
        ExprKind::Binary(_, a, b) => is_const(a) && is_const(b),
        ExprKind::Math(_, args) => args.iter().all(is_const),
        _ => false,
    };
    if !operands_const {
        return e;
    }
    match eval(&e, workgroup) {
        Ok(bits) => Expr::new(ExprKind::Const(bits), e.ty),
        Err(_) => e,
    }
}

fn is_const(e: &Expr) -> bool {
    const_of(e).is_some()
}

/// The bits of a constant.
fn const_of(e: &Expr) -> Option<u32> {
    match e.kind {
        ExprKind::Const(bits) => Some(bits),
        _ => None,
    }
}

/// Why bf16 and f16 arithmetic is left to run time: the targets define it (f32, then one
/// rounding), not the folder.
const SIXTEEN_BIT: &str = "bf16 and f16 operations are not evaluated at compile time";

fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

fn unary(op: UnOp, ty: Ty, x: u32) -> Result<u32, NotConst> {
    Ok(match (op, ty) {
        (_, Ty::Bf16 | Ty::F16) => return Err(SIXTEEN_BIT.into()),
        (UnOp::Neg, Ty::F32) => (-f(x)).to_bits(),
        (UnOp::Neg, _) => (x as i32).wrapping_neg() as u32,
        (UnOp::Not, Ty::Bool) => x ^ 1,
        (UnOp::Not, _) => !x,
    })
}

fn binary(op: BinOp, ty: Ty, x: u32, y: u32) -> Result<u32, NotConst> {
    use BinOp::*;
    let b = |v: bool| v as u32;
    let r = match ty {
        Ty::Bf16 | Ty::F16 => return Err(SIXTEEN_BIT.into()),
        Ty::F32 => {
            let (a, c) = (f(x), f(y));
            match op {
                Add => (a + c).to_bits(),
                Sub => (a - c).to_bits(),
                Mul => (a * c).to_bits(),
                Div => (a / c).to_bits(),
                Rem => (a % c).to_bits(),
                Lt => b(a < c),
                Le => b(a <= c),
                Gt => b(a > c),
                Ge => b(a >= c),
                Eq => b(a == c),
                Ne => b(a != c),
                _ => return Err(format!("`{op:?}` is not defined for f32")),
            }
        }
        Ty::I32 => {
            let (a, c) = (x as i32, y as i32);
            if matches!(op, Div | Rem) && (c == 0 || (a == i32::MIN && c == -1)) {
                return Err("it divides by zero or overflows".into());
            }
            match op {
                Add => a.wrapping_add(c) as u32,
                Sub => a.wrapping_sub(c) as u32,
                Mul => a.wrapping_mul(c) as u32,
                Div => (a / c) as u32,
                Rem => (a % c) as u32,
                BitAnd => x & y,
                BitOr => x | y,
                BitXor => x ^ y,
                Shl => a.wrapping_shl(y) as u32,
                Shr => a.wrapping_shr(y) as u32,
                Lt => b(a < c),
                Le => b(a <= c),
                Gt => b(a > c),
                Ge => b(a >= c),
                Eq => b(a == c),
                Ne => b(a != c),
                And | Or => return Err("logical operator on i32".into()),
            }
        }
        _ => {
            // u32 and bool (bool only reaches here for == and !=).
            if matches!(op, Div | Rem) && y == 0 {
                return Err("it divides by zero".into());
            }
            match op {
                Add => x.wrapping_add(y),
                Sub => x.wrapping_sub(y),
                Mul => x.wrapping_mul(y),
                Div => x / y,
                Rem => x % y,
                BitAnd => x & y,
                BitOr => x | y,
                BitXor => x ^ y,
                Shl => x.wrapping_shl(y),
                Shr => x.wrapping_shr(y),
                Lt => b(x < y),
                Le => b(x <= y),
                Gt => b(x > y),
                Ge => b(x >= y),
                Eq => b(x == y),
                Ne => b(x != y),
                And => b(x != 0 && y != 0),
                Or => b(x != 0 || y != 0),
            }
        }
    };
    Ok(r)
}

fn cast(from: Ty, to: Ty, x: u32) -> u32 {
    match (from, to) {
        (Ty::F32, Ty::I32) => f(x) as i32 as u32,
        (Ty::F32, Ty::U32) => f(x) as u32,
        (Ty::I32, Ty::F32) => (x as i32 as f32).to_bits(),
        (Ty::U32, Ty::F32) => (x as f32).to_bits(),
        // i32 <-> u32 reinterpret, bool -> int is 0/1 already, same type is the identity.
        _ => x,
    }
}

fn math(fun: MathFn, ty: Ty, v: &[u32]) -> Result<u32, NotConst> {
    Ok(match (fun, ty) {
        (MathFn::Max, Ty::F32) => f(v[0]).max(f(v[1])).to_bits(),
        (MathFn::Min, Ty::F32) => f(v[0]).min(f(v[1])).to_bits(),
        (MathFn::Max, Ty::I32) => (v[0] as i32).max(v[1] as i32) as u32,
        (MathFn::Min, Ty::I32) => (v[0] as i32).min(v[1] as i32) as u32,
        (MathFn::Max, _) => v[0].max(v[1]),
        (MathFn::Min, _) => v[0].min(v[1]),
        (MathFn::Abs, Ty::F32) => f(v[0]).abs().to_bits(),
        (MathFn::Sqrt, Ty::F32) => f(v[0]).sqrt().to_bits(),
        (MathFn::Fma, Ty::F32) => f(v[0]).mul_add(f(v[1]), f(v[2])).to_bits(),
        _ => return Err(format!("`{fun:?}` is not evaluated at compile time")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(op: BinOp, a: Expr, b: Expr, ty: Ty) -> Expr {
        Expr::new(ExprKind::Binary(op, Box::new(a), Box::new(b)), ty)
    }

    #[test]
    fn integer_arithmetic_wraps_and_shifts_mod_32() {
        let e = bin(
            BinOp::Add,
            Expr::const_u32(u32::MAX),
            Expr::const_u32(2),
            Ty::U32,
        );
        assert_eq!(eval(&e, 64), Ok(1));
        let e = bin(BinOp::Shl, Expr::const_u32(1), Expr::const_u32(33), Ty::U32);
        assert_eq!(eval(&e, 64), Ok(2));
        let e = bin(
            BinOp::Mul,
            Expr::const_i32(i32::MAX),
            Expr::const_i32(2),
            Ty::I32,
        );
        assert_eq!(eval(&e, 64), Ok(-2i32 as u32));
    }

    #[test]
    fn integer_identities_leave_the_other_operand() {
        let x = || Expr::new(ExprKind::Builtin(Builtin::GroupId(0)), Ty::U32);
        let zero = || Expr::const_u32(0);
        let one = || Expr::const_u32(1);
        for e in [
            bin(BinOp::Add, x(), zero(), Ty::U32),
            bin(BinOp::Add, zero(), x(), Ty::U32),
            bin(BinOp::Sub, x(), zero(), Ty::U32),
            bin(BinOp::Mul, x(), one(), Ty::U32),
            bin(BinOp::Mul, one(), x(), Ty::U32),
        ] {
            assert_eq!(fold(e, 64), x());
        }
        // Not identities: `0 - x`, and f32 `x + 0.0` (`-0.0 + 0.0` is `+0.0`).
        let e = bin(BinOp::Sub, zero(), x(), Ty::U32);
        assert_eq!(fold(e.clone(), 64), e);
        let y = Expr::new(ExprKind::Builtin(Builtin::GroupId(0)), Ty::U32);
        let yf = Expr::new(ExprKind::Cast(Box::new(y)), Ty::F32);
        let e = bin(BinOp::Add, yf, Expr::const_f32(0.0), Ty::F32);
        assert_eq!(fold(e.clone(), 64), e);
    }

    #[test]
    fn group_size_is_the_workgroup_constant() {
        let gs = Expr::new(ExprKind::Builtin(Builtin::GroupSize), Ty::U32);
        let e = bin(BinOp::Mul, gs, Expr::const_u32(4), Ty::U32);
        assert_eq!(eval(&e, 256), Ok(1024));
    }

    #[test]
    fn division_by_zero_is_not_constant_and_is_not_folded() {
        let e = bin(BinOp::Div, Expr::const_u32(1), Expr::const_u32(0), Ty::U32);
        assert!(eval(&e, 1).unwrap_err().contains("divides by zero"));
        assert_eq!(fold(e.clone(), 1), e);
        let e = bin(
            BinOp::Div,
            Expr::const_i32(i32::MIN),
            Expr::const_i32(-1),
            Ty::I32,
        );
        assert!(eval(&e, 1).is_err());
    }

    #[test]
    fn float_casts_saturate_and_nan_becomes_zero() {
        let c = |v: f32, to| Expr::new(ExprKind::Cast(Box::new(Expr::const_f32(v))), to);
        assert_eq!(eval(&c(1e20, Ty::I32), 1), Ok(i32::MAX as u32));
        assert_eq!(eval(&c(-5.0, Ty::U32), 1), Ok(0));
        assert_eq!(eval(&c(f32::NAN, Ty::I32), 1), Ok(0));
    }

    #[test]
    fn exp_is_left_to_the_backends() {
        let e = Expr::new(
            ExprKind::Math(MathFn::Exp, vec![Expr::const_f32(1.0)]),
            Ty::F32,
        );
        assert_eq!(fold(e.clone(), 1), e);
        let e = Expr::new(
            ExprKind::Math(
                MathFn::Max,
                vec![Expr::const_f32(f32::NAN), Expr::const_f32(2.0)],
            ),
            Ty::F32,
        );
        assert_eq!(fold(e, 1), Expr::const_f32(2.0));
    }

    #[test]
    fn runtime_values_are_not_constant() {
        let v = Expr::new(ExprKind::Var(0), Ty::U32);
        assert_eq!(eval(&v, 1), Err("it reads a variable".to_string()));
    }
}
