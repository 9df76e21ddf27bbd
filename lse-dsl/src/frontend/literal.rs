//! Literals and the named constants (`f32::INFINITY`, `u32::MAX`, ...). An unsuffixed
//! integer literal takes the integer type its context wants (`i32` when none does); float
//! literals are `f32`; `-lit` is folded here so that `-2147483648` is a valid `i32`.

use proc_macro2::Span;

use super::syntax::err;
use crate::ir::{Expr, Ty};

pub(super) fn path_constant(ty: &str, name: &str) -> Option<Expr> {
    Some(match (ty, name) {
        ("f32", "INFINITY") => Expr::const_f32(f32::INFINITY),
        ("f32", "NEG_INFINITY") => Expr::const_f32(f32::NEG_INFINITY),
        ("f32", "MAX") => Expr::const_f32(f32::MAX),
        ("f32", "MIN") => Expr::const_f32(f32::MIN),
        ("u32", "MAX") => Expr::const_u32(u32::MAX),
        ("i32", "MAX") => Expr::const_i32(i32::MAX),
        ("i32", "MIN") => Expr::const_i32(i32::MIN),
        _ => return None,
    })
}

/// A literal; `negate` for `-lit`.
pub(super) fn literal(lit: &syn::Lit, want: Option<Ty>, negate: bool) -> syn::Result<Expr> {
    let span = lit.span();
    match lit {
        syn::Lit::Int(i) => {
            let ty = match i.suffix() {
                "" => match want {
                    Some(t @ (Ty::I32 | Ty::U32)) => t,
                    Some(Ty::F32) => {
                        return err(
                            span,
                            format!(
                                "type mismatch: integer literal `{}` where f32 is expected; write `{}.0`",
                                i.base10_digits(),
                                i.base10_digits()
                            ),
                        )
                    }
                    Some(t) => {
                        return err(
                            span,
                            format!("type mismatch: integer literal where {} is expected", t.rust_name()),
                        )
                    }
                    None => Ty::I32,
                },
                "i32" => Ty::I32,
                "u32" => Ty::U32,
                "f32" => return float_const(i.base10_parse::<f32>(), span, negate),
                s => return err(span, format!("unsupported literal suffix `{s}`; LOOM has f32, i32 and u32")),
            };
            let v: u64 = i
                .base10_parse()
                .or_else(|_| err(span, "integer literal too large"))?;
            match (ty, negate) {
                (Ty::U32, true) => err(span, "cannot negate a u32 value; LOOM negates f32 and i32"),
                (Ty::U32, false) if v <= u32::MAX as u64 => Ok(Expr::const_u32(v as u32)),
                (Ty::I32, false) if v <= i32::MAX as u64 => Ok(Expr::const_i32(v as i32)),
                (Ty::I32, true) if v <= 1 << 31 => Ok(Expr::const_i32((-(v as i64)) as i32)),
                _ => err(
                    span,
                    format!(
                        "literal `{}` does not fit in {}",
                        i.base10_digits(),
                        ty.rust_name()
                    ),
                ),
            }
        }
        syn::Lit::Float(f) => {
            match f.suffix() {
                "" | "f32" => {}
                s => {
                    return err(
                        span,
                        format!("unsupported literal suffix `{s}`; LOOM floats are f32"),
                    )
                }
            }
            if let Some(t @ (Ty::I32 | Ty::U32 | Ty::Bool | Ty::Bf16 | Ty::F16)) = want {
                if f.suffix().is_empty() {
                    return err(
                        span,
                        format!(
                            "type mismatch: float literal where {} is expected",
                            t.rust_name()
                        ),
                    );
                }
            }
            float_const(f.base10_parse::<f32>(), span, negate)
        }
        syn::Lit::Bool(b) => {
            if negate {
                return err(span, "cannot negate a bool; use `!`");
            }
            Ok(Expr::const_bool(b.value))
        }
        _ => err(
            span,
            "only integer, float and bool literals are supported in LOOM kernels",
        ),
    }
}

fn float_const(v: syn::Result<f32>, span: Span, negate: bool) -> syn::Result<Expr> {
    let v = v.or_else(|_| err(span, "bad float literal"))?;
    if !v.is_finite() {
        return err(
            span,
            "float literal out of the f32 range; use f32::INFINITY or f32::MAX",
        );
    }
    Ok(Expr::const_f32(if negate { -v } else { v }))
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;
    use crate::ir::*;

    #[test]
    fn integer_literals_take_their_type_from_context() {
        let k = k(
            "let a = 1; let b: u32 = 2; let c = n + 1; let d = 1 + n; let e = 0 < n;
                   let f = 2.5; let g = 1u32; let h = 3f32; let i = -m; let j = max(1, n);
                   let q = if s > 0.0 { 1 } else { n };",
        );
        assert_eq!(local_ty(&k, "a"), Ty::I32);
        assert_eq!(local_ty(&k, "b"), Ty::U32);
        assert_eq!(local_ty(&k, "c"), Ty::U32);
        assert_eq!(local_ty(&k, "d"), Ty::U32);
        assert_eq!(local_ty(&k, "e"), Ty::Bool);
        assert_eq!(local_ty(&k, "f"), Ty::F32);
        assert_eq!(local_ty(&k, "g"), Ty::U32);
        assert_eq!(local_ty(&k, "h"), Ty::F32);
        assert_eq!(local_ty(&k, "i"), Ty::I32);
        assert_eq!(local_ty(&k, "j"), Ty::U32);
        assert_eq!(local_ty(&k, "q"), Ty::U32);
        let ExprKind::Binary(BinOp::Lt, l, _) = &let_value(&k, "e").kind else {
            panic!()
        };
        assert_eq!(**l, Expr::const_u32(0));
    }

    #[test]
    fn literals_fold_and_respect_ranges() {
        let k = k(
            "let a = -2147483648; let b = 2 * 3 + 1; let c = (7u32 >> 1) as f32; let d = u32::MAX;",
        );
        assert_eq!(*let_value(&k, "a"), Expr::const_i32(i32::MIN));
        assert_eq!(*let_value(&k, "b"), Expr::const_i32(7));
        assert_eq!(*let_value(&k, "c"), Expr::const_f32(3.0));
        assert_eq!(*let_value(&k, "d"), Expr::const_u32(u32::MAX));
        assert!(e("let a = 2147483648;").contains("does not fit in i32"));
        assert!(e("let a: u32 = 4294967296;").contains("does not fit in u32"));
        assert!(e("let a = 1i64;").contains("unsupported literal suffix `i64`"));
        assert!(e("let a = 1.0f64;").contains("unsupported literal suffix `f64`"));
    }
}
