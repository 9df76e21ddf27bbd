//! Constant instances: a kernel `fn k<const BM: u32>(...)` with `consts = [48, 16]` is
//! lowered once per listed value, as if written `fn k_bm48(...) { const BM: u32 = 48; ... }`
//! and `fn k_bm16(...) { const BM: u32 = 16; ... }` (kernel names `<name>_bm48` and
//! `<name>_bm16`): one body for kernels that differ only in a block size, such as a GEMM's
//! rows per workgroup. The constant belongs to the body; buffer lengths are written with the
//! scalar parameters as in any kernel.

use syn::spanned::Spanned;

use super::attr::KernelAttr;

/// The const parameter of `sig`, checked against the attribute's `consts`: `None` for a kernel
/// without either, `Some(C)` for one `const C: u32` with `consts`. Any other combination (a
/// const parameter without `consts` or beside `elem`, several of them, another type) is an
/// error.
pub(super) fn const_param(sig: &syn::Signature, a: &KernelAttr) -> syn::Result<Option<syn::Ident>> {
    let consts: Vec<&syn::ConstParam> = sig.generics.const_params().collect();
    let Some(list) = &a.consts else {
        return match consts.first() {
            Some(c) => Err(syn::Error::new(
                c.span(),
                format!(
                    "a LOOM kernel's const parameter needs `consts = [...]` in its attribute, listing the values `{}` is instantiated for (for example `consts = [48, 16]`)",
                    c.ident
                ),
            )),
            None => Ok(None),
        };
    };
    if let Some(e) = &a.elem {
        return Err(syn::Error::new(
            e.span,
            "a LOOM kernel takes `elem` or `consts`, not both",
        ));
    }
    let [c] = consts.as_slice() else {
        return Err(syn::Error::new(
            consts.get(1).map_or(list.span, |c| c.span()),
            format!(
                "`consts` needs a kernel with exactly one const parameter to instantiate, like `fn {}<const BM: u32>(...)`",
                sig.ident
            ),
        ));
    };
    if let Some(p) = sig
        .generics
        .params
        .iter()
        .find(|p| !matches!(p, syn::GenericParam::Const(_)))
    {
        return Err(syn::Error::new(
            p.span(),
            "a LOOM kernel with `consts` has no other generic parameters",
        ));
    }
    let is_u32 = matches!(&c.ty, syn::Type::Path(t) if t.qself.is_none() && t.path.is_ident("u32"));
    if !is_u32 || c.default.is_some() || !c.attrs.is_empty() {
        return Err(syn::Error::new(
            c.span(),
            format!(
                "the const parameter must be written `const {}: u32`, with no default",
                c.ident
            ),
        ));
    }
    Ok(Some(c.ident.clone()))
}

/// The suffix of `c = value`'s instance: `bm48` for `BM = 48`.
pub(super) fn suffix(c: &syn::Ident, value: u32) -> String {
    format!("{}{value}", c.to_string().to_lowercase())
}

/// `item` without its generics, named `<fn>_<suffix>`, its body starting with
/// `const C: u32 = value;`.
pub(super) fn instantiate(item: &syn::ItemFn, c: &syn::Ident, value: u32) -> syn::ItemFn {
    let mut out = item.clone();
    out.sig.generics = syn::Generics::default();
    out.sig.ident = syn::Ident::new(
        &format!("{}_{}", item.sig.ident, suffix(c, value)),
        item.sig.ident.span(),
    );
    let lit = syn::LitInt::new(&value.to_string(), c.span());
    out.block.stmts.insert(
        0,
        syn::parse_quote_spanned!(c.span()=> const #c: u32 = #lit;),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::super::parse_kernels;
    use super::super::tests::attr_err as err;
    use quote::quote;

    #[test]
    fn instances_follow_consts_order_with_the_value_in_their_names() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn copy<const BM: u32>(x: &[f32], y: &mut [f32]) {
                let i = group_id() * BM + local_id();
                y[i] = x[i];
            }
        };
        let attr = quote!(
            name = "t.copy",
            version = 3,
            workgroup = 16,
            consts = [48, 16]
        );
        let ks = parse_kernels(attr, &item).unwrap();
        let names: Vec<(String, String)> = ks.iter().map(|k| (k.fn_name.clone(), k.id())).collect();
        assert_eq!(
            names,
            vec![
                ("copy_bm48".to_string(), "t.copy_bm48.v3".to_string()),
                ("copy_bm16".to_string(), "t.copy_bm16.v3".to_string()),
            ]
        );
        // Each instance has its value where the body reads `BM`.
        let texts: Vec<String> = ks.iter().map(crate::text::ir_text).collect();
        assert!(
            texts[0].contains("48") && !texts[0].contains("16 +"),
            "{}",
            texts[0]
        );
        assert!(texts[1].contains("group_id() * 16"), "{}", texts[1]);
    }

    #[test]
    fn a_const_parameter_and_consts_must_agree() {
        let plain = quote!(name = "t.k", version = 1, workgroup = 64);
        let e = err(
            plain,
            syn::parse_quote!(
                fn k<const BM: u32>(x: &[f32]) {}
            ),
        );
        assert!(
            e.starts_with("a LOOM kernel's const parameter needs `consts = [...]`"),
            "{e}"
        );
        let with = quote!(name = "t.k", version = 1, workgroup = 64, consts = [16]);
        for item in [
            syn::parse_quote!(
                fn k(x: &[f32]) {}
            ),
            syn::parse_quote!(
                fn k<const A: u32, const B: u32>(x: &[f32]) {}
            ),
        ] {
            let e = err(with.clone(), item);
            assert!(
                e.starts_with("`consts` needs a kernel with exactly one const parameter"),
                "{e}"
            );
        }
        let e = err(
            with.clone(),
            syn::parse_quote!(
                fn k<W, const BM: u32>(x: &[W]) {}
            ),
        );
        assert_eq!(
            e,
            "a LOOM kernel with `consts` has no other generic parameters"
        );
        for item in [
            syn::parse_quote!(
                fn k<const BM: usize>(x: &[f32]) {}
            ),
            syn::parse_quote!(
                fn k<const BM: u32 = 4>(x: &[f32]) {}
            ),
        ] {
            let e = err(with.clone(), item);
            assert_eq!(
                e,
                "the const parameter must be written `const BM: u32`, with no default"
            );
        }
        let both = quote!(
            name = "t.k",
            version = 1,
            workgroup = 64,
            elem = [f32],
            consts = [16]
        );
        let e = err(
            both,
            syn::parse_quote!(
                fn k<const BM: u32>(x: &[f32]) {}
            ),
        );
        assert_eq!(e, "a LOOM kernel takes `elem` or `consts`, not both");
    }

    #[test]
    fn an_error_in_one_instance_names_it() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn k<const BM: u32>(y: &mut [f32]) {
                let t = tile::<f32, BM, 8>();
                tile_zero(t);
                tile_store(t, y, 0, 8, BM, 8);
            }
        };
        let e = err(
            quote!(name = "t.k", version = 1, workgroup = 64, consts = [16, 0]),
            item,
        );
        assert!(e.ends_with("(in the `BM = 0` instance)"), "{e}");
    }
}
