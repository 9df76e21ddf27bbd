//! The kernel's signature: no return value (generics are `generic`'s), and parameters that are buffers
//! (`&[T]`, `&mut [T]`, or with a declared minimum length `&[T; len]`, `&mut [T; len]`: see
//! `lengths`) or scalars.

use syn::spanned::Spanned;
use syn::{FnArg, Pat, Signature, Type};

use super::lengths;
use super::types::{named_ty, ty_list, type_text};
use crate::ir::{Access, Param, Ty};

const BUFFER_ELEMS: [Ty; 5] = [Ty::F32, Ty::Bf16, Ty::F16, Ty::U32, Ty::I32];
const SCALARS: [Ty; 3] = [Ty::F32, Ty::I32, Ty::U32];

/// Rejects signature features a kernel cannot have.
pub(super) fn check_signature(sig: &Signature) -> syn::Result<()> {
    let bad = |span, what: &str| {
        Err(syn::Error::new(
            span,
            format!("a LOOM kernel cannot be {what}"),
        ))
    };
    if let Some(c) = &sig.constness {
        return bad(c.span(), "`const`");
    }
    if let Some(a) = &sig.asyncness {
        return bad(a.span(), "`async`");
    }
    if let Some(u) = &sig.unsafety {
        return bad(u.span(), "`unsafe`");
    }
    if let Some(abi) = &sig.abi {
        return bad(abi.span(), "`extern`");
    }
    if let Some(v) = &sig.variadic {
        return bad(v.span(), "variadic");
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output {
        return Err(syn::Error::new(
            ty.span(),
            "a LOOM kernel returns nothing; write results into a `&mut [T]` buffer",
        ));
    }
    Ok(())
}

/// The parameters in declaration order, declared buffer lengths included.
pub(super) fn parse_params(sig: &Signature) -> syn::Result<Vec<Param>> {
    let mut out: Vec<Param> = Vec::new();
    // (parameter index, declared length), resolved once every parameter is known.
    let mut lens = Vec::new();
    for arg in &sig.inputs {
        let pt = match arg {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(
                    r.span(),
                    "a LOOM kernel cannot take `self`",
                ));
            }
            FnArg::Typed(pt) => pt,
        };
        if let Some(a) = pt.attrs.first() {
            return Err(syn::Error::new(
                a.span(),
                "attributes on kernel parameters are not supported",
            ));
        }
        let name = match &*pt.pat {
            Pat::Ident(pi)
                if pi.by_ref.is_none() && pi.mutability.is_none() && pi.subpat.is_none() =>
            {
                pi.ident.to_string()
            }
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "a kernel parameter must be a plain name (no `mut`, `ref` or patterns)",
                ));
            }
        };
        if out.iter().any(|p| p.name() == name) {
            return Err(syn::Error::new(
                pt.pat.span(),
                format!("parameter `{name}` is declared twice"),
            ));
        }
        let (p, len) = param(name, &pt.ty)?;
        if let Some(len) = len {
            lens.push((out.len(), len));
        }
        out.push(p);
    }
    for (i, e) in lens {
        let parsed = lengths::parse(e, &out)?;
        if let Param::Buffer { len, .. } = &mut out[i] {
            *len = Some(parsed);
        }
    }
    Ok(out)
}

/// One parameter, and for a buffer with a declared length that length's expression (parsed
/// by the caller, which knows every parameter).
fn param(name: String, ty: &Type) -> syn::Result<(Param, Option<&syn::Expr>)> {
    match ty {
        Type::Reference(r) => {
            let (elem_ty, len) = match &*r.elem {
                Type::Slice(s) => (&*s.elem, None),
                Type::Array(a) => (&*a.elem, Some(&a.len)),
                _ => {
                    return Err(syn::Error::new(
                        ty.span(),
                        format!(
                            "bad parameter type `{}`: buffers are `&[T]` or `&mut [T]`, or \
                             `&[T; len]` or `&mut [T; len]` with a declared minimum length",
                            type_text(ty)
                        ),
                    ));
                }
            };
            let elem = named_ty(elem_ty)
                .filter(|t| BUFFER_ELEMS.contains(t))
                .ok_or_else(|| {
                    syn::Error::new(
                        elem_ty.span(),
                        format!(
                            "bad buffer element type `{}`: expected {}",
                            type_text(elem_ty),
                            ty_list(&BUFFER_ELEMS)
                        ),
                    )
                })?;
            let access = if r.mutability.is_some() {
                Access::ReadWrite
            } else {
                Access::Read
            };
            let p = Param::Buffer {
                name,
                elem,
                access,
                len: None,
            };
            Ok((p, len))
        }
        Type::Paren(p) => param(name, &p.elem),
        _ => {
            let ty_ok = named_ty(ty).filter(|t| SCALARS.contains(t));
            match ty_ok {
                Some(t) => Ok((Param::Scalar { name, ty: t }, None)),
                None => Err(syn::Error::new(
                    ty.span(),
                    format!(
                        "bad parameter type `{}`: expected a buffer (`&[T]`, `&mut [T]`) or a scalar {}",
                        type_text(ty),
                        ty_list(&SCALARS)
                    ),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(f: syn::ItemFn) -> Signature {
        f.sig
    }

    #[test]
    fn buffers_and_scalars_parse_in_order() {
        let s = sig(syn::parse_quote!(
            fn k(a: &[f32], b: &mut [bf16], c: &[half::f16], n: u32, s: f32) {}
        ));
        let p = parse_params(&s).unwrap();
        assert_eq!(
            p,
            vec![
                Param::Buffer {
                    name: "a".into(),
                    elem: Ty::F32,
                    access: Access::Read,
                    len: None
                },
                Param::Buffer {
                    name: "b".into(),
                    elem: Ty::Bf16,
                    access: Access::ReadWrite,
                    len: None
                },
                Param::Buffer {
                    name: "c".into(),
                    elem: Ty::F16,
                    access: Access::Read,
                    len: None
                },
                Param::Scalar {
                    name: "n".into(),
                    ty: Ty::U32
                },
                Param::Scalar {
                    name: "s".into(),
                    ty: Ty::F32
                },
            ]
        );
    }

    fn err(f: syn::ItemFn) -> String {
        let s = sig(f);
        check_signature(&s)
            .and_then(|_| parse_params(&s).map(|_| ()))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_parameter_types_are_rejected() {
        let e = err(syn::parse_quote!(
            fn k(a: &[f64]) {}
        ));
        assert_eq!(
            e,
            "bad buffer element type `f64`: expected f32, bf16, f16, u32 or i32"
        );
        let e = err(syn::parse_quote!(
            fn k(a: bool) {}
        ));
        assert!(e.starts_with("bad parameter type `bool`"), "{e}");
        let e = err(syn::parse_quote!(
            fn k(a: &f32) {}
        ));
        assert!(e.contains("buffers are `&[T]` or `&mut [T]`"), "{e}");
        let e = err(syn::parse_quote!(
            fn k(a: bf16) {}
        ));
        assert!(e.starts_with("bad parameter type `bf16`"), "{e}");
        let e = err(syn::parse_quote!(
            fn k(mut a: u32) {}
        ));
        assert!(e.contains("plain name"), "{e}");
        let e = err(syn::parse_quote!(
            fn k(a: u32, a: u32) {}
        ));
        assert!(e.contains("declared twice"), "{e}");
    }

    #[test]
    fn signature_features_are_rejected() {
        assert!(err(syn::parse_quote!(
            fn k() -> f32 {}
        ))
        .contains("returns nothing"));
        assert!(err(syn::parse_quote!(
            unsafe fn k() {}
        ))
        .contains("`unsafe`"));
        assert!(err(syn::parse_quote!(
            async fn k() {}
        ))
        .contains("`async`"));
    }
}
