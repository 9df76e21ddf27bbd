//! Constant instances: a kernel `fn k<const BM: u32>(...)` with `consts = [48, 16]` is
//! lowered once per listed value, as if written `fn k_bm48(...) { const BM: u32 = 48; ... }`
//! and `fn k_bm16(...) { const BM: u32 = 16; ... }` (kernel names `<name>_bm48` and
//! `<name>_bm16`): one body for kernels that differ only in a block size, such as a GEMM's
//! rows per workgroup. A kernel may have several const parameters, each entry of `consts`
//! then a tuple with a value for each (`(32, 34)`: suffix `qk32_bytes34`), and entries may be
//! labelled (`q8_0 = (32, 34)`: suffix `q8_0`), so that kernels that differ in a storage
//! format share one body and keep their formats' names. A const parameter reads as its value
//! in the body and in buffer lengths (`w: &[u32; n * (k / QK) * BYTES / 4]`).

use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;

use super::attr::{ConstInstance, KernelAttr};

/// The const parameters of `sig`, checked against the attribute's `consts`: none for a kernel
/// without either, else one `const C: u32` each, in order, with every entry of `consts`
/// giving one value per parameter (a type parameter beside them is `elem`'s, checked by
/// `generic`). Any other combination (const parameters without `consts`, `consts` without
/// them, another type, a default, an entry of another length) is an error.
pub(super) fn const_params(sig: &syn::Signature, a: &KernelAttr) -> syn::Result<Vec<syn::Ident>> {
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
            None => Ok(Vec::new()),
        };
    };
    if consts.is_empty() {
        return Err(syn::Error::new(
            list.span,
            format!(
                "`consts` needs a kernel with const parameters to instantiate, like `fn {}<const BM: u32>(...)`",
                sig.ident
            ),
        ));
    }
    for c in &consts {
        let is_u32 =
            matches!(&c.ty, syn::Type::Path(t) if t.qself.is_none() && t.path.is_ident("u32"));
        if !is_u32 || c.default.is_some() || !c.attrs.is_empty() {
            return Err(syn::Error::new(
                c.span(),
                format!(
                    "the const parameter must be written `const {}: u32`, with no default",
                    c.ident
                ),
            ));
        }
    }
    let names: Vec<syn::Ident> = consts.iter().map(|c| c.ident.clone()).collect();
    // A parameter of the same name would be ambiguous in the buffer lengths, where the
    // constant reads as its value.
    for arg in &sig.inputs {
        if let syn::FnArg::Typed(pt) = arg {
            if let syn::Pat::Ident(p) = &*pt.pat {
                if names.contains(&p.ident) {
                    return Err(syn::Error::new(
                        p.ident.span(),
                        format!(
                            "the parameter `{}` has the name of a const parameter; rename one",
                            p.ident
                        ),
                    ));
                }
            }
        }
    }
    if let Some(i) = list
        .instances
        .iter()
        .find(|i| i.values.len() != names.len())
    {
        let shown: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        return Err(syn::Error::new(
            i.span,
            format!(
                "this entry of `consts` has {} value(s) for {} const parameter(s) ({}): expected one each, like ({})",
                i.values.len(),
                names.len(),
                shown.join(", "),
                vec!["16"; names.len()].join(", ")
            ),
        ));
    }
    Ok(names)
}

/// The suffix of an instance's names: its label, else each parameter's name in lower case
/// and its value (`bm48` for `BM = 48`; `qk32_bytes34` for `QK = 32, BYTES = 34`).
pub(super) fn suffix(params: &[syn::Ident], inst: &ConstInstance) -> String {
    match &inst.label {
        Some(label) => label.clone(),
        None => params
            .iter()
            .zip(&inst.values)
            .map(|(c, v)| format!("{}{v}", c.to_string().to_lowercase()))
            .collect::<Vec<_>>()
            .join("_"),
    }
}

/// How errors name an instance: `BM = 16`, or `q8_0: QK = 32, BYTES = 34`.
pub(super) fn describe(params: &[syn::Ident], inst: &ConstInstance) -> String {
    let values = params
        .iter()
        .zip(&inst.values)
        .map(|(c, v)| format!("{c} = {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    match &inst.label {
        Some(label) => format!("{label}: {values}"),
        None => values,
    }
}

/// `item` without its const parameters, named `<fn>_<suffix>`, its body starting with
/// `const C: u32 = value;` for each and its buffer lengths reading the values.
pub(super) fn instantiate(
    item: &syn::ItemFn,
    params: &[syn::Ident],
    inst: &ConstInstance,
) -> syn::ItemFn {
    let mut out = item.clone();
    let generics = std::mem::take(&mut out.sig.generics.params);
    out.sig.generics.params = generics
        .into_iter()
        .filter(|p| !matches!(p, syn::GenericParam::Const(_)))
        .collect();
    out.sig.ident = syn::Ident::new(
        &format!("{}_{}", item.sig.ident, suffix(params, inst)),
        item.sig.ident.span(),
    );
    let mut values = Substitute { params, inst };
    for arg in out.sig.inputs.iter_mut() {
        values.visit_fn_arg_mut(arg);
    }
    for (i, (c, v)) in params.iter().zip(&inst.values).enumerate() {
        let lit = syn::LitInt::new(&v.to_string(), c.span());
        out.block.stmts.insert(
            i,
            syn::parse_quote_spanned!(c.span()=> const #c: u32 = #lit;),
        );
    }
    out
}

/// Replaces the const parameters by their values in the expressions it visits (the buffer
/// lengths of a signature).
struct Substitute<'a> {
    params: &'a [syn::Ident],
    inst: &'a ConstInstance,
}

impl VisitMut for Substitute<'_> {
    fn visit_expr_mut(&mut self, e: &mut syn::Expr) {
        if let syn::Expr::Path(p) = e {
            let at = p
                .path
                .get_ident()
                .and_then(|i| self.params.iter().position(|c| c == i));
            if let (Some(at), None) = (at, &p.qself) {
                let lit = syn::LitInt::new(&self.inst.values[at].to_string(), p.span());
                *e = syn::Expr::Lit(syn::ExprLit {
                    attrs: Vec::new(),
                    lit: syn::Lit::Int(lit),
                });
                return;
            }
        }
        syn::visit_mut::visit_expr_mut(self, e);
    }
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
        let e = err(
            with.clone(),
            syn::parse_quote!(
                fn k(x: &[f32]) {}
            ),
        );
        assert!(
            e.starts_with("`consts` needs a kernel with const parameters"),
            "{e}"
        );
        let e = err(
            with.clone(),
            syn::parse_quote!(
                fn k<const A: u32, const B: u32>(x: &[f32]) {}
            ),
        );
        assert_eq!(
            e,
            "this entry of `consts` has 1 value(s) for 2 const parameter(s) (A, B): expected one each, like (16, 16)"
        );
        let e = err(
            with.clone(),
            syn::parse_quote!(
                fn k<W, const BM: u32>(x: &[W]) {}
            ),
        );
        assert!(
            e.starts_with("a generic LOOM kernel needs `elem = [...]`"),
            "{e}"
        );
        let e = err(
            with.clone(),
            syn::parse_quote!(
                fn k<const BM: u32>(x: &[f32; BM], BM: u32) {}
            ),
        );
        assert_eq!(
            e,
            "the parameter `BM` has the name of a const parameter; rename one"
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
        assert!(
            e.starts_with("`elem` needs a kernel with one type parameter"),
            "{e}"
        );
    }

    #[test]
    fn constant_instances_each_take_every_element_type() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn widen<W, const BITS: u32>(x: &[W; n * BITS], y: &mut [f32; n], n: u32) {
                let i = group_id() * 64 + local_id();
                y[i] = to_f32(x[i * BITS]);
            }
        };
        let attr = quote!(
            name = "t.widen",
            version = 1,
            workgroup = 64,
            elem = [bf16, f32],
            consts = [four = 4, eight = 8]
        );
        let ks = parse_kernels(attr, &item).unwrap();
        let names: Vec<(String, String)> = ks.iter().map(|k| (k.fn_name.clone(), k.id())).collect();
        let want = [
            ("widen_four_bf16", "t.widen_four_bf16.v1"),
            ("widen_four_f32", "t.widen_four_f32.v1"),
            ("widen_eight_bf16", "t.widen_eight_bf16.v1"),
            ("widen_eight_f32", "t.widen_eight_f32.v1"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(f, i)| (f.to_string(), i.to_string()))
            .collect();
        assert_eq!(names, want);
        let text = crate::text::ir_text(&ks[2]);
        assert!(text.contains("x: &[bf16; n * 8]"), "{text}");
        // An error in one instance names both its constants and its type.
        let item: syn::ItemFn = syn::parse_quote! {
            fn k<W, const R: u32>(x: &[W], y: &mut [f32]) {
                let t = tile::<W, R, 8>();
                tile_zero(t);
            }
        };
        let attr = quote!(
            name = "t.k",
            version = 1,
            workgroup = 64,
            elem = [f32],
            consts = [16, 0]
        );
        let e = err(attr, item);
        assert!(e.ends_with("(in the `R = 0, f32` instance)"), "{e}");
    }

    #[test]
    fn several_constants_instantiate_together_under_labels_or_their_values() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn copy<const QK: u32, const BYTES: u32>(
                x: &[u32; n * (k / QK) * BYTES / 4],
                y: &mut [u32; n],
                n: u32,
                k: u32,
            ) {
                let i = group_id() * QK + local_id();
                y[i] = x[i * BYTES];
            }
        };
        let attr = |consts| quote!(name = "t.copy", version = 2, workgroup = 16, consts = #consts);
        let ks = parse_kernels(attr(quote!([q8_0 = (32, 34), q6_k = (256, 210)])), &item).unwrap();
        let names: Vec<(String, String)> = ks.iter().map(|k| (k.fn_name.clone(), k.id())).collect();
        assert_eq!(
            names,
            [
                ("copy_q8_0".to_string(), "t.copy_q8_0.v2".to_string()),
                ("copy_q6_k".to_string(), "t.copy_q6_k.v2".to_string()),
            ]
        );
        // The values stand in the body and in the buffer lengths.
        let texts: Vec<String> = ks.iter().map(crate::text::ir_text).collect();
        assert!(texts[0].contains("group_id() * 32"), "{}", texts[0]);
        assert!(texts[0].contains("n * (k / 32) * 34 / 4"), "{}", texts[0]);
        assert!(texts[1].contains("n * (k / 256) * 210 / 4"), "{}", texts[1]);
        let ks = parse_kernels(attr(quote!([(32, 34), (256, 210)])), &item).unwrap();
        let ids: Vec<String> = ks.iter().map(|k| k.id()).collect();
        assert_eq!(ids, ["t.copy_qk32_bytes34.v2", "t.copy_qk256_bytes210.v2"]);
    }

    #[test]
    fn a_branch_on_a_constant_becomes_its_live_side_but_both_are_checked() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn k<const BM: u32>(y: &mut [u32]) {
                if BM == 16 {
                    y[local_id()] = 111;
                } else if BM == 32 {
                    y[local_id()] = 222;
                } else {
                    y[local_id()] = 333;
                }
            }
        };
        let attr = quote!(
            name = "t.k",
            version = 1,
            workgroup = 64,
            consts = [16, 32, 64]
        );
        let ks = parse_kernels(attr, &item).unwrap();
        for (k, live) in ks.iter().zip(["111", "222", "333"]) {
            let text = crate::text::ir_text(k);
            for value in ["111", "222", "333"] {
                assert_eq!(text.contains(value), value == live, "{text}");
            }
            // The live branch's statements stand in the `if`'s place.
            assert!(!text.contains("if "), "{text}");
        }
        // The dead side is still lowered and checked.
        let item: syn::ItemFn = syn::parse_quote! {
            fn k<const BM: u32>(y: &mut [u32]) {
                if BM == 16 {
                    y[local_id()] = 1.5;
                }
            }
        };
        let e = err(
            quote!(name = "t.k", version = 1, workgroup = 64, consts = [32]),
            item,
        );
        assert!(e.ends_with("(in the `BM = 32` instance)"), "{e}");
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
        let item: syn::ItemFn = syn::parse_quote! {
            fn k<const R: u32, const C: u32>(y: &mut [f32]) {
                let t = tile::<f32, R, C>();
                tile_zero(t);
                tile_store(t, y, 0, C, R, C);
            }
        };
        let e = err(
            quote!(
                name = "t.k",
                version = 1,
                workgroup = 64,
                consts = [a = (16, 8), b = (16, 0)]
            ),
            item,
        );
        assert!(e.ends_with("(in the `b: R = 16, C = 0` instance)"), "{e}");
    }
}
