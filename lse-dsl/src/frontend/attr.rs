//! The `#[loom::kernel(name = "...", version = N, workgroup = N, subgroup = N, targets = [...],
//! elem = [...], consts = [...])]` attribute.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Lit, MetaNameValue, Token};

use super::DEFAULT_TARGETS;
use crate::ir::Ty;

/// The attribute's settings, validated.
#[derive(Debug, PartialEq)]
pub(super) struct KernelAttr {
    pub name: String,
    pub version: u32,
    pub workgroup: u32,
    /// `subgroup = N`, for the `subgroup_*` built-ins.
    pub subgroup: Option<u32>,
    pub targets: Vec<String>,
    /// `elem = [...]`: the element types a generic kernel is instantiated for.
    pub elem: Option<ElemList>,
    /// `consts = [...]`: the values a kernel's `const` parameter is instantiated for.
    pub consts: Option<ConstList>,
}

/// The `consts` list, in source order, and where it was written. Equality ignores the spans.
#[derive(Debug)]
pub(super) struct ConstList {
    pub instances: Vec<ConstInstance>,
    pub span: Span,
}

/// One entry of `consts`: `48`, `(32, 34)`, or either labelled, `q8_0 = (32, 34)`.
#[derive(Debug)]
pub(super) struct ConstInstance {
    /// The instance's name suffix, if the entry gives one.
    pub label: Option<String>,
    /// One value per const parameter, in their order.
    pub values: Vec<u32>,
    pub span: Span,
}

impl PartialEq for ConstList {
    fn eq(&self, other: &ConstList) -> bool {
        let key = |i: &ConstInstance| (i.label.clone(), i.values.clone());
        self.instances
            .iter()
            .map(key)
            .eq(other.instances.iter().map(key))
    }
}

/// The `elem` list, in source order, and where it was written (errors about a missing type
/// parameter point there). Equality ignores the span.
#[derive(Debug)]
pub(super) struct ElemList {
    pub tys: Vec<Ty>,
    pub span: Span,
}

impl PartialEq for ElemList {
    fn eq(&self, other: &ElemList) -> bool {
        self.tys == other.tys
    }
}

/// The element types `elem` may list.
pub(super) const ELEM_TYS: [Ty; 3] = [Ty::Bf16, Ty::F16, Ty::F32];

const KEYS: &str = "`name`, `version`, `workgroup`, `subgroup`, `targets`, `elem` or `consts`";

/// Parses and validates the attribute's tokens. `at` is where errors about missing keys point
/// (the attribute itself when the tokens are empty).
pub(super) fn parse_attr(attr: TokenStream, at: Span) -> syn::Result<KernelAttr> {
    let at = attr
        .clone()
        .into_iter()
        .next()
        .map(|t| t.span())
        .unwrap_or(at);
    let metas = Punctuated::<MetaNameValue, Token![,]>::parse_terminated
        .parse2(attr)
        .map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("bad #[loom::kernel] attribute: {e}; expected `key = value` pairs with keys {KEYS}"),
            )
        })?;
    let mut name = None;
    let mut version = None;
    let mut workgroup = None;
    let mut subgroup: Option<(u32, Span)> = None;
    let mut targets = None;
    let mut elem = None;
    let mut consts = None;
    for m in &metas {
        let key = m
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        let seen = match key.as_str() {
            "name" => name.replace(parse_name(&m.value)?).is_some(),
            "version" => version.replace(parse_u32(&m.value, "version")?).is_some(),
            "workgroup" => workgroup.replace(parse_workgroup(&m.value)?).is_some(),
            "subgroup" => subgroup
                .replace((parse_u32(&m.value, "subgroup")?, m.value.span()))
                .is_some(),
            "targets" => targets.replace(parse_targets(&m.value)?).is_some(),
            "elem" => elem.replace(parse_elem(&m.value)?).is_some(),
            "consts" => consts.replace(parse_consts(&m.value)?).is_some(),
            _ => {
                let shown = super::render::tokens_text(&quote::ToTokens::to_token_stream(&m.path));
                return Err(syn::Error::new(
                    m.path.span(),
                    format!("unknown #[loom::kernel] key `{shown}`; expected {KEYS}"),
                ));
            }
        };
        if seen {
            return Err(syn::Error::new(
                m.path.span(),
                format!("`{key}` is given twice"),
            ));
        }
    }
    let missing = |k: &str, example: &str| {
        syn::Error::new(
            at,
            format!("#[loom::kernel] needs `{k}` (for example `{k} = {example}`)"),
        )
    };
    let name = name.ok_or_else(|| missing("name", "\"logits.lse_pick\""))?;
    let version = version.ok_or_else(|| missing("version", "1"))?;
    let workgroup = workgroup.ok_or_else(|| missing("workgroup", "256"))?;
    if let Some((n, span)) = subgroup {
        if n < 2 || !n.is_power_of_two() || n > workgroup {
            return Err(syn::Error::new(
                span,
                format!("`subgroup` must be a power of two from 2 to the workgroup size ({workgroup}), found {n}"),
            ));
        }
    }
    Ok(KernelAttr {
        name,
        version,
        workgroup,
        subgroup: subgroup.map(|(n, _)| n),
        targets: targets.unwrap_or_else(|| DEFAULT_TARGETS.iter().map(|s| s.to_string()).collect()),
        elem,
        consts,
    })
}

/// `[48, 16]`, `[(32, 34), (256, 144)]` or the same labelled, `[q8_0 = (32, 34), ...]`: a
/// non-empty list of distinct entries, each a u32 literal or a tuple of them, labelled all or
/// none with distinct lower-case names.
fn parse_consts(e: &Expr) -> syn::Result<ConstList> {
    let Expr::Array(arr) = e else {
        return Err(syn::Error::new(
            e.span(),
            "`consts` must be a list of u32 literals, like [48, 16], or of labelled tuples, like [q8_0 = (32, 34), q4_k = (256, 144)]",
        ));
    };
    if arr.elems.is_empty() {
        return Err(syn::Error::new(
            e.span(),
            "`consts` must list at least one value",
        ));
    }
    let mut instances: Vec<ConstInstance> = Vec::new();
    for el in &arr.elems {
        let inst = parse_const_instance(el)?;
        if let Some(first) = instances.first() {
            if first.label.is_some() != inst.label.is_some() {
                return Err(syn::Error::new(
                    el.span(),
                    "label every entry of `consts` (`q8_0 = 34`) or none",
                ));
            }
        }
        if let Some(label) = &inst.label {
            if instances.iter().any(|i| i.label.as_ref() == Some(label)) {
                return Err(syn::Error::new(
                    el.span(),
                    format!("the label `{label}` is given twice in `consts`"),
                ));
            }
        }
        if instances.iter().any(|i| i.values == inst.values) {
            let shown = super::render::tokens_text(&quote::ToTokens::to_token_stream(el));
            return Err(syn::Error::new(
                el.span(),
                format!("`{shown}`: these values are listed twice in `consts`"),
            ));
        }
        instances.push(inst);
    }
    Ok(ConstList {
        instances,
        span: e.span(),
    })
}

/// One entry of `consts` (see [`parse_consts`]).
fn parse_const_instance(el: &Expr) -> syn::Result<ConstInstance> {
    let (label, value) = match el {
        Expr::Assign(a) => (Some(const_label(&a.left)?), &*a.right),
        _ => (None, el),
    };
    let values = match value {
        Expr::Tuple(t) if !t.elems.is_empty() => t
            .elems
            .iter()
            .map(const_value)
            .collect::<syn::Result<_>>()?,
        Expr::Paren(p) => vec![const_value(&p.expr)?],
        _ => vec![const_value(value)?],
    };
    Ok(ConstInstance {
        label,
        values,
        span: el.span(),
    })
}

/// A `consts` label: a lower-case identifier (letters, digits, `_`), which names the instance
/// (`<fn>_<label>`, kernel `<name>_<label>`).
fn const_label(e: &Expr) -> syn::Result<String> {
    let ident = match e {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
        _ => None,
    };
    let label = ident.map(|i| i.to_string()).unwrap_or_default();
    let ok = label.starts_with(|c: char| c.is_ascii_lowercase())
        && label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        let shown = super::render::tokens_text(&quote::ToTokens::to_token_stream(e));
        return Err(syn::Error::new(
            e.span(),
            format!(
                "bad label `{shown}` in `consts`: expected a lower-case name such as `q8_0`, which names the instance"
            ),
        ));
    }
    Ok(label)
}

/// A u32 literal of `consts`.
fn const_value(el: &Expr) -> syn::Result<u32> {
    match lit(el) {
        Some(Lit::Int(i)) if i.suffix().is_empty() || i.suffix() == "u32" => {
            i.base10_parse::<u32>().map_err(|_| {
                syn::Error::new(
                    i.span(),
                    format!("`consts` value {i} does not fit in a u32"),
                )
            })
        }
        _ => {
            let shown = super::render::tokens_text(&quote::ToTokens::to_token_stream(el));
            Err(syn::Error::new(
                el.span(),
                format!("bad value `{shown}` in `consts`: expected a u32 literal"),
            ))
        }
    }
}

/// `[bf16, f16, f32]`: a non-empty list of distinct element types.
fn parse_elem(e: &Expr) -> syn::Result<ElemList> {
    let names = super::types::ty_list(&ELEM_TYS);
    let Expr::Array(arr) = e else {
        return Err(syn::Error::new(
            e.span(),
            format!(
                "`elem` must be a list of element types, like [bf16, f16, f32] (any of {names})"
            ),
        ));
    };
    if arr.elems.is_empty() {
        return Err(syn::Error::new(
            e.span(),
            format!("`elem` must list at least one element type ({names})"),
        ));
    }
    let mut tys: Vec<Ty> = Vec::new();
    for el in &arr.elems {
        let ty = match el {
            Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => p
                .path
                .get_ident()
                .and_then(|i| super::types::ty_from_name(&i.to_string()))
                .filter(|t| ELEM_TYS.contains(t)),
            _ => None,
        };
        let Some(ty) = ty else {
            let shown = super::render::tokens_text(&quote::ToTokens::to_token_stream(el));
            return Err(syn::Error::new(
                el.span(),
                format!("bad element type `{shown}` in `elem`: expected {names}"),
            ));
        };
        if tys.contains(&ty) {
            return Err(syn::Error::new(
                el.span(),
                format!(
                    "element type `{}` is listed twice in `elem`",
                    ty.rust_name()
                ),
            ));
        }
        tys.push(ty);
    }
    Ok(ElemList {
        tys,
        span: e.span(),
    })
}

fn lit(e: &Expr) -> Option<&Lit> {
    match e {
        Expr::Lit(l) => Some(&l.lit),
        Expr::Group(g) => lit(&g.expr),
        _ => None,
    }
}

fn parse_name(e: &Expr) -> syn::Result<String> {
    let Some(Lit::Str(s)) = lit(e) else {
        return Err(syn::Error::new(
            e.span(),
            "`name` must be a string, like \"logits.lse_pick\"",
        ));
    };
    let v = s.value();
    let ok_chars = v
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if v.is_empty() || !ok_chars || v.starts_with('.') || v.ends_with('.') || v.contains("..") {
        return Err(syn::Error::new(
            s.span(),
            format!(
                "bad kernel name {v:?}: use dot-separated parts of letters, digits and `_`, like \"logits.lse_pick\""
            ),
        ));
    }
    Ok(v)
}

fn parse_u32(e: &Expr, key: &str) -> syn::Result<u32> {
    match lit(e) {
        Some(Lit::Int(i)) if i.suffix().is_empty() || i.suffix() == "u32" => i
            .base10_parse::<u32>()
            .map_err(|_| syn::Error::new(i.span(), format!("`{key}` must fit in a u32"))),
        _ => Err(syn::Error::new(
            e.span(),
            format!("`{key}` must be an integer literal"),
        )),
    }
}

fn parse_workgroup(e: &Expr) -> syn::Result<u32> {
    let wg = parse_u32(e, "workgroup")?;
    if !(1..=1024).contains(&wg) || !wg.is_power_of_two() {
        return Err(syn::Error::new(
            e.span(),
            format!("`workgroup` must be a power of two from 1 to 1024, found {wg}"),
        ));
    }
    Ok(wg)
}

fn parse_targets(e: &Expr) -> syn::Result<Vec<String>> {
    let Expr::Array(arr) = e else {
        return Err(syn::Error::new(
            e.span(),
            "`targets` must be a list of strings, like [\"gfx1201\", \"gfx942\"]",
        ));
    };
    if arr.elems.is_empty() {
        return Err(syn::Error::new(
            e.span(),
            "`targets` must name at least one AMDGPU arch",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for el in &arr.elems {
        let Some(Lit::Str(s)) = lit(el) else {
            return Err(syn::Error::new(
                el.span(),
                "each target must be a string, like \"gfx1201\"",
            ));
        };
        let v = s.value();
        let rest = v.strip_prefix("gfx").unwrap_or("");
        if rest.is_empty()
            || !rest
                .chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
        {
            return Err(syn::Error::new(
                s.span(),
                format!("bad target {v:?}: expected an AMDGPU arch like \"gfx1201\""),
            ));
        }
        if out.contains(&v) {
            return Err(syn::Error::new(
                s.span(),
                format!("target {v:?} is listed twice"),
            ));
        }
        out.push(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse(ts: TokenStream) -> Result<KernelAttr, String> {
        parse_attr(ts, Span::call_site()).map_err(|e| e.to_string())
    }

    #[test]
    fn full_attribute_parses() {
        let a = parse(quote!(
            name = "a.b_c",
            version = 3,
            workgroup = 64,
            targets = ["gfx942"]
        ))
        .unwrap();
        assert_eq!(
            a,
            KernelAttr {
                name: "a.b_c".into(),
                version: 3,
                workgroup: 64,
                subgroup: None,
                targets: vec!["gfx942".into()],
                elem: None,
                consts: None,
            }
        );
    }

    #[test]
    fn targets_default_to_the_three_archs() {
        let a = parse(quote!(name = "x", version = 1, workgroup = 1)).unwrap();
        assert_eq!(a.targets, vec!["gfx1201", "gfx1100", "gfx942"]);
    }

    #[test]
    fn subgroup_is_a_power_of_two_within_the_workgroup() {
        let a = parse(quote!(
            name = "x",
            version = 1,
            workgroup = 64,
            subgroup = 16
        ))
        .unwrap();
        assert_eq!(a.subgroup, Some(16));
        for bad in [quote!(1), quote!(3), quote!(128), quote!(0)] {
            let e = parse(quote!(name = "x", version = 1, workgroup = 64, subgroup = #bad))
                .unwrap_err();
            assert!(e.contains("`subgroup` must be a power of two"), "{e}");
        }
    }

    #[test]
    fn missing_keys_are_named() {
        assert!(parse(quote!()).unwrap_err().contains("needs `name`"));
        assert!(parse(quote!(name = "x", workgroup = 4))
            .unwrap_err()
            .contains("needs `version`"));
        assert!(parse(quote!(name = "x", version = 1))
            .unwrap_err()
            .contains("needs `workgroup`"));
    }

    #[test]
    fn workgroup_must_be_a_power_of_two_up_to_1024() {
        for bad in [quote!(0), quote!(300), quote!(2048)] {
            let e = parse(quote!(name = "x", version = 1, workgroup = #bad)).unwrap_err();
            assert!(e.contains("power of two from 1 to 1024"), "{e}");
        }
    }

    #[test]
    fn unknown_and_duplicate_keys_are_rejected() {
        let e = parse(quote!(name = "x", version = 1, workgroup = 4, wg = 4)).unwrap_err();
        assert!(e.contains("unknown #[loom::kernel] key `wg`"), "{e}");
        let e = parse(quote!(name = "x", name = "y", version = 1, workgroup = 4)).unwrap_err();
        assert!(e.contains("`name` is given twice"), "{e}");
    }

    #[test]
    fn bad_values_say_what_is_expected() {
        let e = parse(quote!(name = 5, version = 1, workgroup = 4)).unwrap_err();
        assert!(e.contains("`name` must be a string"), "{e}");
        let e = parse(quote!(name = "a..b", version = 1, workgroup = 4)).unwrap_err();
        assert!(e.contains("bad kernel name"), "{e}");
        let e = parse(quote!(name = "a", version = -1, workgroup = 4)).unwrap_err();
        assert!(e.contains("`version` must be an integer literal"), "{e}");
        let e = parse(quote!(
            name = "a",
            version = 1,
            workgroup = 4,
            targets = ["sm_90"]
        ))
        .unwrap_err();
        assert!(e.contains("bad target \"sm_90\""), "{e}");
        let e = parse(quote!(name = "a", version = 1, workgroup = 4, targets = [])).unwrap_err();
        assert!(e.contains("at least one"), "{e}");
        let e = parse(quote!(name = "a" version = 1)).unwrap_err();
        assert!(e.contains("bad #[loom::kernel] attribute"), "{e}");
    }

    #[test]
    fn elem_lists_distinct_element_types_in_order() {
        let a = parse(quote!(
            name = "a",
            version = 1,
            workgroup = 4,
            elem = [f32, bf16]
        ))
        .unwrap();
        assert_eq!(a.elem.map(|l| l.tys), Some(vec![Ty::F32, Ty::Bf16]));
        let bad = |ts: TokenStream| {
            parse(quote!(name = "a", version = 1, workgroup = 4, #ts)).unwrap_err()
        };
        let e = bad(quote!(elem = []));
        assert!(
            e.contains("`elem` must list at least one element type (bf16, f16 or f32)"),
            "{e}"
        );
        let e = bad(quote!(elem = [bf16, f16, bf16]));
        assert_eq!(e, "element type `bf16` is listed twice in `elem`");
        let e = bad(quote!(elem = [u32]));
        assert_eq!(
            e,
            "bad element type `u32` in `elem`: expected bf16, f16 or f32"
        );
        let e = bad(quote!(elem = ["bf16"]));
        assert!(e.starts_with("bad element type `\"bf16\"`"), "{e}");
        let e = bad(quote!(elem = bf16));
        assert!(
            e.starts_with("`elem` must be a list of element types"),
            "{e}"
        );
        let e = bad(quote!(elem = [f32], elem = [f16]));
        assert_eq!(e, "`elem` is given twice");
    }

    #[test]
    fn consts_lists_distinct_u32_values_in_order() {
        let a = parse(quote!(
            name = "a",
            version = 1,
            workgroup = 4,
            consts = [48, 16u32]
        ))
        .unwrap();
        let values = |a: KernelAttr| {
            a.consts
                .unwrap()
                .instances
                .into_iter()
                .map(|i| (i.label, i.values))
                .collect::<Vec<_>>()
        };
        assert_eq!(values(a), [(None, vec![48]), (None, vec![16])]);
        let a = parse(quote!(
            name = "a",
            version = 1,
            workgroup = 4,
            consts = [q8_0 = (32, 34), q6_k = (256, 210u32), one = 7, two = (8)]
        ))
        .unwrap();
        assert_eq!(
            values(a),
            [
                (Some("q8_0".to_string()), vec![32, 34]),
                (Some("q6_k".to_string()), vec![256, 210]),
                (Some("one".to_string()), vec![7]),
                (Some("two".to_string()), vec![8]),
            ]
        );
        let bad = |ts: TokenStream| {
            parse(quote!(name = "a", version = 1, workgroup = 4, #ts)).unwrap_err()
        };
        assert_eq!(
            bad(quote!(consts = [])),
            "`consts` must list at least one value"
        );
        assert_eq!(
            bad(quote!(consts = [16, 48, 16])),
            "`16`: these values are listed twice in `consts`"
        );
        assert_eq!(
            bad(quote!(consts = [a = (1, 2), b = (1, 2)])),
            "`b = (1, 2)`: these values are listed twice in `consts`"
        );
        assert_eq!(
            bad(quote!(consts = [a = 1, a = 2])),
            "the label `a` is given twice in `consts`"
        );
        assert_eq!(
            bad(quote!(consts = [a = 1, 2])),
            "label every entry of `consts` (`q8_0 = 34`) or none"
        );
        for label in [
            quote!(Q8 = 1),
            quote!(a::b = 1),
            quote!(_a = 1),
            quote!(1 = 1),
        ] {
            let e = bad(quote!(consts = [#label]));
            assert!(e.starts_with("bad label `"), "{e}");
        }
        assert_eq!(
            bad(quote!(consts = [(1, -2)])),
            "bad value `-2` in `consts`: expected a u32 literal"
        );
        assert_eq!(
            bad(quote!(consts = [()])),
            "bad value `()` in `consts`: expected a u32 literal"
        );
        assert_eq!(
            bad(quote!(consts = [16, -1])),
            "bad value `-1` in `consts`: expected a u32 literal"
        );
        assert_eq!(
            bad(quote!(consts = [4294967296])),
            "`consts` value 4294967296 does not fit in a u32"
        );
        assert!(bad(quote!(consts = 16)).starts_with("`consts` must be a list of u32 literals"),);
        assert_eq!(
            bad(quote!(consts = [1], consts = [2])),
            "`consts` is given twice"
        );
    }
}
