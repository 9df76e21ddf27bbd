//! Element-type instances: a kernel `fn k<W>(w: &[W], ...)` with `elem = [bf16, f16, f32]`
//! is lowered once per listed type, as if written `fn k_bf16(w: &[bf16], ...)` and so on.
//!
//! `W` may appear only as the element type of a buffer parameter, so every instance is plain
//! LOOM once `W` is replaced; bodies read such buffers through `to_f32`, which accepts all three
//! types.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;

use super::attr::KernelAttr;
use crate::ir::Ty;

/// The element type parameter of `sig`, checked against the attribute's `elem`: `None` for a
/// non-generic kernel without `elem`, `Some(W)` for a generic one with it. Any other
/// combination, and generics other than one plain type parameter, is an error.
pub(super) fn elem_param(sig: &syn::Signature, a: &KernelAttr) -> syn::Result<Option<syn::Ident>> {
    let g = &sig.generics;
    if let Some(w) = &g.where_clause {
        return Err(syn::Error::new(
            w.span(),
            "a LOOM kernel cannot have a `where` clause; its one type parameter takes no bounds",
        ));
    }
    let mut type_param = None;
    for p in &g.params {
        match p {
            syn::GenericParam::Lifetime(l) => {
                return Err(syn::Error::new(
                    l.span(),
                    "a LOOM kernel cannot have lifetime parameters",
                ));
            }
            // Checked with `consts` (`const_param`).
            syn::GenericParam::Const(_) => {}
            syn::GenericParam::Type(t) => {
                if type_param.is_some() {
                    return Err(syn::Error::new(
                        t.span(),
                        "a LOOM kernel has at most one type parameter (the buffer element type listed by `elem = [...]`)",
                    ));
                }
                if !t.bounds.is_empty() || t.default.is_some() || !t.attrs.is_empty() {
                    return Err(syn::Error::new(
                        t.span(),
                        format!(
                            "the element type parameter `{}` takes no bounds, defaults or attributes",
                            t.ident
                        ),
                    ));
                }
                type_param = Some(t.ident.clone());
            }
        }
    }
    match (type_param, &a.elem) {
        (None, None) => Ok(None),
        (Some(w), Some(_)) => Ok(Some(w)),
        (Some(w), None) => Err(syn::Error::new(
            w.span(),
            format!(
                "a generic LOOM kernel needs `elem = [...]` in its attribute, listing the element types `{w}` is instantiated for (for example `elem = [bf16, f16, f32]`)"
            ),
        )),
        (None, Some(list)) => Err(syn::Error::new(
            list.span,
            format!(
                "`elem` needs a kernel with one type parameter to instantiate, like `fn {}<W>(w: &[W], ...)`",
                sig.ident
            ),
        )),
    }
}

/// Checks that `w` appears only as a buffer element type (`&[W]`, `&mut [W]`) in the
/// parameters of the kernel and of its LOOM `fn`s, and as the element type of tile
/// declarations (`tile::<W, R, C>()`) in the body.
pub(super) fn check_uses(item: &syn::ItemFn, w: &syn::Ident) -> syn::Result<()> {
    let mut finder = Finder { w, found: None };
    finder.inputs(&item.sig);
    finder.visit_block(&item.block);
    match finder.found {
        None => Ok(()),
        Some(span) => Err(syn::Error::new(
            span,
            format!(
                "the element type parameter `{w}` may only be a buffer element type (`&[{w}]` or `&mut [{w}]`) or a tile element type (`tile::<{w}, R, C>()`); read such buffers with `to_f32(..)`"
            ),
        )),
    }
}

/// `item` with `w` replaced by `ty`: no generics, the name `<fn>_<ty>`.
pub(super) fn instantiate(item: &syn::ItemFn, w: &syn::Ident, ty: Ty) -> syn::ItemFn {
    let mut out = item.clone();
    out.sig.generics = syn::Generics::default();
    out.sig.ident = syn::Ident::new(
        &format!("{}_{}", item.sig.ident, ty.rust_name()),
        item.sig.ident.span(),
    );
    buffer_elems(&mut out.sig, w, ty);
    TileElems { w, ty }.visit_block_mut(&mut out.block);
    out
}

/// Replaces `W` as the element type of `sig`'s buffer parameters.
fn buffer_elems(sig: &mut syn::Signature, w: &syn::Ident, ty: Ty) {
    for arg in sig.inputs.iter_mut() {
        if let syn::FnArg::Typed(pt) = arg {
            if let Some(elem) = buffer_elem_mut(&mut pt.ty) {
                if is_w(elem, w) {
                    replace(elem, ty);
                }
            }
        }
    }
}

/// Replaces type `W` by `ty`, keeping its span.
fn replace(elem: &mut syn::Type, ty: Ty) {
    let span = elem.span();
    let name = syn::Ident::new(ty.rust_name(), span);
    *elem = syn::parse_quote_spanned!(span=> #name);
}

/// The element type argument of a tile declaration `tile::<T, R, C>`, if `p` is one.
fn tile_elem_arg(p: &syn::Path) -> Option<&syn::GenericArgument> {
    let seg = p
        .segments
        .first()
        .filter(|s| p.segments.len() == 1 && s.ident == "tile")?;
    match &seg.arguments {
        syn::PathArguments::AngleBracketed(a) => a.args.first(),
        _ => None,
    }
}

/// Replaces `W` in tile declarations and in the buffer parameters of LOOM `fn`s.
struct TileElems<'a> {
    w: &'a syn::Ident,
    ty: Ty,
}

impl VisitMut for TileElems<'_> {
    fn visit_item_fn_mut(&mut self, f: &mut syn::ItemFn) {
        buffer_elems(&mut f.sig, self.w, self.ty);
        syn::visit_mut::visit_item_fn_mut(self, f);
    }

    fn visit_path_mut(&mut self, p: &mut syn::Path) {
        let is_tile = tile_elem_arg(p).is_some();
        if let (true, Some(seg)) = (is_tile, p.segments.first_mut()) {
            if let syn::PathArguments::AngleBracketed(a) = &mut seg.arguments {
                if let Some(syn::GenericArgument::Type(t)) = a.args.first_mut() {
                    if is_w(t, self.w) {
                        replace(t, self.ty);
                    }
                }
            }
        }
        syn::visit_mut::visit_path_mut(self, p);
    }
}

/// Adds "(in the `<instance>` instance)" (an element type, or `C = value`) to each of `e`'s messages, keeping their spans: an error
/// that only one instance has must say which.
pub(super) fn in_instance(e: syn::Error, instance: &str) -> syn::Error {
    super::syntax::noted(e, &format!("in the `{instance}` instance"))
}

/// The element type of a buffer type `&[T]` / `&mut [T]`, or `&[T; len]` / `&mut [T; len]`
/// with a declared length (through parentheses).
fn buffer_elem(ty: &syn::Type) -> Option<&syn::Type> {
    match ty {
        syn::Type::Reference(r) => match &*r.elem {
            syn::Type::Slice(s) => Some(&s.elem),
            syn::Type::Array(a) => Some(&a.elem),
            _ => None,
        },
        syn::Type::Paren(p) => buffer_elem(&p.elem),
        _ => None,
    }
}

/// [`buffer_elem`], to replace it (a declared length stays as written).
fn buffer_elem_mut(ty: &mut syn::Type) -> Option<&mut syn::Type> {
    match ty {
        syn::Type::Reference(r) => match &mut *r.elem {
            syn::Type::Slice(s) => Some(&mut s.elem),
            syn::Type::Array(a) => Some(&mut a.elem),
            _ => None,
        },
        syn::Type::Paren(p) => buffer_elem_mut(&mut p.elem),
        _ => None,
    }
}

fn is_w(ty: &syn::Type, w: &syn::Ident) -> bool {
    match ty {
        syn::Type::Path(p) => p.qself.is_none() && p.path.is_ident(w),
        syn::Type::Paren(p) => is_w(&p.elem, w),
        syn::Type::Group(g) => is_w(&g.elem, w),
        _ => false,
    }
}

/// Finds the first path that starts with `w` (a type `W`, `W::MAX`, `as W`, ...).
struct Finder<'a> {
    w: &'a syn::Ident,
    found: Option<Span>,
}

impl Finder<'_> {
    /// Visits the parameter types of `sig` but a buffer's element type `W`.
    fn inputs(&mut self, sig: &syn::Signature) {
        for arg in &sig.inputs {
            if let syn::FnArg::Typed(pt) = arg {
                if buffer_elem(&pt.ty).is_some_and(|e| is_w(e, self.w)) {
                    continue;
                }
                self.visit_type(&pt.ty);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Finder<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.inputs(&f.sig);
        self.visit_return_type(&f.sig.output);
        self.visit_block(&f.block);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if let Some(syn::GenericArgument::Type(t)) = tile_elem_arg(p) {
            if is_w(t, self.w) {
                if let syn::PathArguments::AngleBracketed(a) = &p.segments[0].arguments {
                    for arg in a.args.iter().skip(1) {
                        self.visit_generic_argument(arg);
                    }
                }
                return;
            }
        }
        if self.found.is_none() && p.leading_colon.is_none() {
            if let Some(first) = p.segments.first() {
                if first.ident == *self.w {
                    self.found = Some(first.ident.span());
                    return;
                }
            }
        }
        syn::visit::visit_path(self, p);
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_kernels;
    use super::super::tests::attr_err as err;
    use crate::ir::*;
    use quote::quote;

    #[test]
    fn instances_follow_elem_order_with_suffixed_names() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn dot<W>(x: &[f32], w: &[W], out: &mut [f32], n: u32) {
                let i = local_id();
                if i < n { out[i] = x[i] * to_f32(w[i]); }
            }
        };
        let ks = parse_kernels(
            quote!(
                name = "t.dot",
                version = 2,
                workgroup = 64,
                elem = [f16, f32, bf16]
            ),
            &item,
        )
        .unwrap();
        let names: Vec<(String, String)> = ks.iter().map(|k| (k.fn_name.clone(), k.id())).collect();
        assert_eq!(
            names,
            vec![
                ("dot_f16".to_string(), "t.dot_f16.v2".to_string()),
                ("dot_f32".to_string(), "t.dot_f32.v2".to_string()),
                ("dot_bf16".to_string(), "t.dot_bf16.v2".to_string()),
            ]
        );
        for (k, ty) in ks.iter().zip([Ty::F16, Ty::F32, Ty::Bf16]) {
            assert_eq!(
                k.params[1],
                Param::Buffer {
                    name: "w".into(),
                    elem: ty,
                    access: Access::Read,
                    len: None
                }
            );
        }
        // The instances differ only in the weight's element type and its conversion.
        let hashes: Vec<String> = ks.iter().map(crate::text::ir_hash).collect();
        assert_ne!(hashes[0], hashes[1]);
        assert_ne!(hashes[1], hashes[2]);
        let text = crate::text::ir_text(&ks[0]);
        assert!(text.contains("f16_to_f32("), "{text}");
        let text = crate::text::ir_text(&ks[1]);
        assert!(!text.contains("to_f32("), "{text}");
    }

    #[test]
    fn instances_keep_declared_lengths() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn mv<W>(x: &[f32; k], w: &[W; n * k], y: &mut [f32; n], n: u32, k: u32) {
                let i = local_id();
                if i < n { y[i] = x[0] * to_f32(w[i * k]); }
            }
        };
        let attr = quote!(
            name = "t.mv",
            version = 1,
            workgroup = 64,
            elem = [bf16, f32]
        );
        let ks = parse_kernels(attr, &item).unwrap();
        for (k, ty) in ks.iter().zip([Ty::Bf16, Ty::F32]) {
            let Param::Buffer { elem, len, .. } = &k.params[1] else {
                panic!("w is a buffer")
            };
            assert_eq!(*elem, ty);
            assert_eq!(
                len.as_ref().map(ToString::to_string).as_deref(),
                Some("n * k")
            );
        }
    }

    #[test]
    fn a_non_generic_kernel_gives_one_instance() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn k(x: &[f32]) { let a = to_f32(x[0]); }
        };
        let ks = parse_kernels(quote!(name = "t.k", version = 1, workgroup = 64), &item).unwrap();
        assert_eq!(ks.len(), 1);
        assert_eq!(ks[0].fn_name, "k");
    }

    #[test]
    fn generics_and_elem_must_agree() {
        let attr = quote!(name = "t.k", version = 1, workgroup = 64);
        let e = err(
            attr.clone(),
            syn::parse_quote!(
                fn k<W>(w: &[W]) {}
            ),
        );
        assert!(
            e.starts_with("a generic LOOM kernel needs `elem = [...]`"),
            "{e}"
        );
        let with_elem = quote!(name = "t.k", version = 1, workgroup = 64, elem = [bf16]);
        let e = err(
            with_elem.clone(),
            syn::parse_quote!(
                fn k(w: &[bf16]) {}
            ),
        );
        assert!(
            e.starts_with("`elem` needs a kernel with one type parameter"),
            "{e}"
        );
        let e = err(
            with_elem.clone(),
            syn::parse_quote!(
                fn k<W, V>(w: &[W], v: &[V]) {}
            ),
        );
        assert!(
            e.starts_with("a LOOM kernel has at most one type parameter"),
            "{e}"
        );
        let e = err(
            with_elem.clone(),
            syn::parse_quote!(
                fn k<'a, W>(w: &'a [W]) {}
            ),
        );
        assert_eq!(e, "a LOOM kernel cannot have lifetime parameters");
        let e = err(
            with_elem.clone(),
            syn::parse_quote!(
                fn k<const N: u32>(w: &[f32]) {}
            ),
        );
        assert!(
            e.starts_with("a LOOM kernel's const parameter needs `consts = [...]`"),
            "{e}"
        );
        let e = err(
            with_elem.clone(),
            syn::parse_quote!(
                fn k<W: Copy>(w: &[W]) {}
            ),
        );
        assert!(e.contains("takes no bounds"), "{e}");
        let e = err(
            with_elem,
            syn::parse_quote!(
                fn k<W>(w: &[W])
                where
                    W: Copy,
                {
                }
            ),
        );
        assert!(e.contains("`where` clause"), "{e}");
    }

    #[test]
    fn the_type_parameter_is_only_a_buffer_element_type() {
        let attr = quote!(
            name = "t.k",
            version = 1,
            workgroup = 64,
            elem = [bf16, f32]
        );
        let only = "the element type parameter `W` may only be a buffer element type";
        for item in [
            syn::parse_quote!(
                fn k<W>(w: &[W], s: W) {}
            ),
            syn::parse_quote!(
                fn k<W>(w: &[W], v: &[[W; 2]]) {}
            ),
            syn::parse_quote!(
                fn k<W>(w: &[W]) {
                    let a: W = w[0];
                }
            ),
            syn::parse_quote!(
                fn k<W>(w: &[W]) {
                    let a = 1.0 as W;
                }
            ),
            syn::parse_quote!(
                fn k<W>(w: &[W]) {
                    let a = W::MAX;
                }
            ),
        ] {
            let e = err(attr.clone(), item);
            assert!(e.starts_with(only), "{e}");
        }
    }

    #[test]
    fn an_error_in_one_instance_names_it() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn k<W>(w: &[W], out: &mut [f32]) { out[0] = bf16_to_f32(w[0]); }
        };
        let e = err(
            quote!(
                name = "t.k",
                version = 1,
                workgroup = 64,
                elem = [bf16, f16]
            ),
            item,
        );
        assert!(e.ends_with("(in the `f16` instance)"), "{e}");
        assert!(
            e.contains("the argument of `bf16_to_f32` must be bf16"),
            "{e}"
        );
    }
}
