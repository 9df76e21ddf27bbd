//! A buffer's declared minimum length, `x: &[f32; rows * d]`: the array length is an
//! expression over the kernel's `u32` scalar parameters, the grid's workgroup counts
//! (`num_groups()`, `num_groups_y()`, `num_groups_z()`) and integer literals with `+ - * /`,
//! parentheses, `min(a, b)` and `max(a, b)`. Anything else is an error at its span. The
//! length is launcher metadata ([`crate::ir::LenExpr`]); the body never sees it.

use syn::spanned::Spanned;
use syn::{BinOp, Expr, Lit};

use crate::ir::{LenExpr, LenOp, Param, Ty};

/// What a length may contain, for error messages.
const ALLOWED: &str = "a buffer length is written with `+ - * /`, parentheses, `min(a, b)`, \
                       `max(a, b)`, the kernel's u32 scalar parameters, `num_groups()`, \
                       `num_groups_y()`, `num_groups_z()` and integer literals";

/// The declared length `e`, whose names refer to `params` (all of the kernel's parameters,
/// so a length may name a scalar declared after its buffer).
pub(super) fn parse(e: &Expr, params: &[Param]) -> syn::Result<LenExpr> {
    let bad = |span, msg: String| Err(syn::Error::new(span, msg));
    match e {
        Expr::Paren(p) => parse(&p.expr, params),
        Expr::Group(g) => parse(&g.expr, params),
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) if matches!(i.suffix(), "" | "u32" | "u64" | "usize") => {
                Ok(LenExpr::Lit(i.base10_parse::<u64>()?))
            }
            other => bad(
                other.span(),
                format!(
                    "`{}` is not an unsigned integer literal; {ALLOWED}",
                    quote::ToTokens::to_token_stream(other)
                ),
            ),
        },
        Expr::Path(p) => {
            let Some(name) = p.path.get_ident().filter(|_| p.qself.is_none()) else {
                return bad(
                    e.span(),
                    format!("unsupported in a buffer length: {ALLOWED}"),
                );
            };
            scalar(name, params)
        }
        Expr::Binary(b) => {
            let op = match b.op {
                BinOp::Add(_) => LenOp::Add,
                BinOp::Sub(_) => LenOp::Sub,
                BinOp::Mul(_) => LenOp::Mul,
                BinOp::Div(_) => LenOp::Div,
                other => {
                    return bad(
                        other.span(),
                        format!("unsupported operator in a buffer length: {ALLOWED}"),
                    );
                }
            };
            let l = parse(&b.left, params)?;
            let r = parse(&b.right, params)?;
            Ok(LenExpr::Bin(op, Box::new(l), Box::new(r)))
        }
        Expr::Call(c) if c.args.is_empty() => {
            let axis = match &*c.func {
                Expr::Path(p) if p.path.is_ident("num_groups") => 0,
                Expr::Path(p) if p.path.is_ident("num_groups_y") => 1,
                Expr::Path(p) if p.path.is_ident("num_groups_z") => 2,
                other => {
                    return bad(
                        other.span(),
                        format!("unsupported call in a buffer length: {ALLOWED}"),
                    );
                }
            };
            Ok(LenExpr::Grid(axis))
        }
        Expr::Call(c) => {
            let op = match &*c.func {
                Expr::Path(p) if p.path.is_ident("min") => LenOp::Min,
                Expr::Path(p) if p.path.is_ident("max") => LenOp::Max,
                other => {
                    return bad(
                        other.span(),
                        format!("unsupported call in a buffer length: {ALLOWED}"),
                    );
                }
            };
            let [a, b] = c.args.iter().collect::<Vec<_>>()[..] else {
                return bad(
                    c.span(),
                    "`min` and `max` in a buffer length take two arguments".to_string(),
                );
            };
            let (a, b) = (parse(a, params)?, parse(b, params)?);
            Ok(LenExpr::Bin(op, Box::new(a), Box::new(b)))
        }
        _ => bad(
            e.span(),
            format!("unsupported in a buffer length: {ALLOWED}"),
        ),
    }
}

/// The `u32` scalar parameter `name`.
fn scalar(name: &syn::Ident, params: &[Param]) -> syn::Result<LenExpr> {
    let what = match params.iter().find(|p| *name == p.name()) {
        Some(Param::Scalar { ty: Ty::U32, .. }) => return Ok(LenExpr::Scalar(name.to_string())),
        Some(Param::Scalar { ty, .. }) => {
            format!("`{name}` is a scalar of type {}", ty.rust_name())
        }
        Some(Param::Buffer { .. }) => format!("`{name}` is a buffer"),
        None => format!("unknown name `{name}`"),
    };
    Err(syn::Error::new(name.span(), format!("{what}: {ALLOWED}")))
}

#[cfg(test)]
mod tests {
    use super::super::params::parse_params;
    use crate::ir::{LenExpr, Param};

    /// The declared length of the first parameter of `f`, or the error message.
    fn first_len(f: syn::ItemFn) -> Result<Option<LenExpr>, String> {
        let ps = parse_params(&f.sig).map_err(|e| e.to_string())?;
        match &ps[0] {
            Param::Buffer { len, .. } => Ok(len.clone()),
            Param::Scalar { .. } => panic!("not a buffer"),
        }
    }

    fn text(f: syn::ItemFn) -> String {
        first_len(f)
            .unwrap()
            .expect("a declared length")
            .to_string()
    }

    #[test]
    fn lengths_read_back_in_canonical_form() {
        assert_eq!(
            text(syn::parse_quote!(
                fn k(x: &[f32; rows * d], rows: u32, d: u32) {}
            )),
            "rows * d"
        );
        assert_eq!(
            text(syn::parse_quote!(
                fn k(x: &mut [f32; (pos0 + t) * n / 2], pos0: u32, t: u32, n: u32) {}
            )),
            "(pos0 + t) * n / 2"
        );
        assert_eq!(
            text(syn::parse_quote!(
                fn k(x: &[u32; a - (b - 1u32) + max(a, min(b, 4))], a: u32, b: u32) {}
            )),
            "a - (b - 1) + max(a, min(b, 4))"
        );
        assert_eq!(
            first_len(syn::parse_quote!(
                fn k(x: &[f32], n: u32) {}
            )),
            Ok(None)
        );
    }

    #[test]
    fn lengths_take_only_u32_scalars_and_integer_literals() {
        let err = |f| first_len(f).unwrap_err();
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; n * s], n: u32, s: f32) {}
        ));
        assert!(
            e.starts_with("`s` is a scalar of type f32: a buffer length"),
            "{e}"
        );
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; n], n: i32) {}
        ));
        assert!(e.starts_with("`n` is a scalar of type i32"), "{e}");
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; rows]) {}
        ));
        assert!(e.starts_with("unknown name `rows`"), "{e}");
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; y], y: &[f32]) {}
        ));
        assert!(e.starts_with("`y` is a buffer"), "{e}");
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; 2.5]) {}
        ));
        assert!(
            e.starts_with("`2.5` is not an unsigned integer literal"),
            "{e}"
        );
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; 4i32]) {}
        ));
        assert!(
            e.starts_with("`4i32` is not an unsigned integer literal"),
            "{e}"
        );
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; n % 4], n: u32) {}
        ));
        assert!(
            e.starts_with("unsupported operator in a buffer length"),
            "{e}"
        );
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; n as u32], n: u32) {}
        ));
        assert!(e.starts_with("unsupported in a buffer length"), "{e}");
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; min(n)], n: u32) {}
        ));
        assert!(e.contains("take two arguments"), "{e}");
        let e = err(syn::parse_quote!(
            fn k(x: &[f32; pow(n, 2)], n: u32) {}
        ));
        assert!(e.starts_with("unsupported call in a buffer length"), "{e}");
        for call in [
            quote::quote!(local_id()),
            quote::quote!(num_groups(1)),
            quote::quote!(group_id_y()),
        ] {
            let f: syn::ItemFn = syn::parse_quote!(fn k(x: &[f32; #call * n], n: u32) {});
            let e = err(f);
            assert!(e.starts_with("unsupported call in a buffer length"), "{e}");
        }
    }

    #[test]
    fn lengths_read_the_grids_workgroup_counts() {
        assert_eq!(
            text(syn::parse_quote!(
                fn k(x: &[f32; num_groups() * num_groups_y() * (d + num_groups_z())], d: u32) {}
            )),
            "num_groups() * num_groups_y() * (d + num_groups_z())"
        );
    }
}
