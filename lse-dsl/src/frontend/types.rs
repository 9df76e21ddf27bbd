//! Type names as kernel authors write them.

use crate::ir::Ty;

/// The LOOM type named by `ty`: a single identifier (`f32`, `bf16`, ...) or `half::bf16` /
/// `half::f16`. `None` for anything else.
pub(super) fn named_ty(ty: &syn::Type) -> Option<Ty> {
    let syn::Type::Path(p) = ty else { return None };
    if p.qself.is_some() {
        return None;
    }
    let segs: Vec<String> = p
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    if p.path.segments.iter().any(|s| !s.arguments.is_none()) {
        return None;
    }
    let last = match segs.as_slice() {
        [one] => one.as_str(),
        [krate, t] if krate == "half" && (t == "bf16" || t == "f16") => t.as_str(),
        _ => return None,
    };
    ty_from_name(last)
}

/// The type with this source name.
pub(super) fn ty_from_name(name: &str) -> Option<Ty> {
    Some(match name {
        "f32" => Ty::F32,
        "i32" => Ty::I32,
        "u32" => Ty::U32,
        "bool" => Ty::Bool,
        "bf16" => Ty::Bf16,
        "f16" => Ty::F16,
        _ => return None,
    })
}

/// `"f32, i32 or u32"` style list for messages.
pub(super) fn ty_list(tys: &[Ty]) -> String {
    let names: Vec<&str> = tys.iter().map(|t| t.rust_name()).collect();
    match names.as_slice() {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    }
}

/// The source text of a type, for messages.
pub(super) fn type_text(ty: &syn::Type) -> String {
    // In a type, `<` and `>` are brackets, not operators.
    super::render::tokens_text(&quote::ToTokens::to_token_stream(ty))
        .replace(" < ", "<")
        .replace(" >", ">")
}

/// Numeric value types (arithmetic, comparisons, max/min, reductions).
pub(super) const NUMERIC: [Ty; 3] = [Ty::F32, Ty::I32, Ty::U32];

/// The types `+ - * /` and the ordering comparisons take: [`NUMERIC`] and the 16-bit floats,
/// whose operations run in f32 and round the result once to the 16-bit type.
pub(super) const WITH_HALVES: [Ty; 5] = [Ty::F32, Ty::I32, Ty::U32, Ty::Bf16, Ty::F16];

/// The operators defined on bf16 and f16 values.
pub(super) const HALF_OPS: [crate::ir::BinOp; 10] = {
    use crate::ir::BinOp::*;
    [Add, Sub, Mul, Div, Lt, Le, Gt, Ge, Eq, Ne]
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_half_paths_resolve() {
        let t: syn::Type = syn::parse_quote!(half::bf16);
        assert_eq!(named_ty(&t), Some(Ty::Bf16));
        let t: syn::Type = syn::parse_quote!(u32);
        assert_eq!(named_ty(&t), Some(Ty::U32));
        let t: syn::Type = syn::parse_quote!(std::u32);
        assert_eq!(named_ty(&t), None);
        let t: syn::Type = syn::parse_quote!(f64);
        assert_eq!(named_ty(&t), None);
        let t: syn::Type = syn::parse_quote!(Vec<Option<u32>>);
        assert_eq!(type_text(&t), "Vec<Option<u32>>");
    }

    #[test]
    fn lists_read_naturally() {
        assert_eq!(ty_list(&NUMERIC), "f32, i32 or u32");
        assert_eq!(ty_list(&[Ty::F32]), "f32");
    }
}
