//! The LOOM front end: a `#[loom::kernel(...)]` Rust `fn` in, a typed and checked
//! [`ir::Kernel`] out (the language is `LOOM.md`).
//!
//! Stages, each in its own module: the attribute (`attr`), the signature (`params`, with
//! declared buffer lengths in `lengths`),
//! element-type instances of generic kernels (`generic`), constant instances
//! (`const_param`), statements (`stmt`, `bindings`,
//! `assign`, `control`), functions inlined at their calls (`fns`) and expressions with bidirectional type inference (`expr`,
//! `literal`, `builtins`), constant folding (`fold`), then two checks over the finished IR: `break` placement (`breaks`) and uniformity of barriers and
//! collectives (`uniformity`). `cx` holds the lowering state, `syntax`, `types` and `render`
//! small shared helpers.
//! Every error is a `syn::Error` at the offending span, so the proc-macro reports it where
//! the author wrote it.

mod assign;
mod attr;
mod bindings;
mod breaks;
mod builtins;
mod const_param;
mod control;
mod cx;
mod expr;
mod fns;
mod fold;
mod generic;
mod lengths;
mod literal;
mod params;
mod render;
mod stmt;
mod syntax;
mod tiles;
mod types;
mod uniformity;

#[cfg(test)]
mod tests;

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;

use crate::ir;

/// AMDGPU archs built when the attribute names no `targets`.
pub const DEFAULT_TARGETS: [&str; 3] = ["gfx1201", "gfx1100", "gfx942"];

/// Parses and checks one kernel attribute's kernels: one [`ir::Kernel`] for a plain `fn`, one
/// per listed element type, in `elem` order, for a generic `fn k<W>` with `elem = [...]`
/// (instance fn `k_<ty>`, name `<name>_<ty>`), one per entry of `consts = [...]` for a
/// `fn k<const C: u32, ..>` (`k_<suffix>`, `const_param`), and with both, each constant
/// instance per element type (`k_<suffix>_<ty>`). `attr` = the tokens inside
/// `#[loom::kernel(...)]`; `item` = the annotated fn (its own attributes are ignored).
pub fn parse_kernels(attr: TokenStream, item: &syn::ItemFn) -> Result<Vec<ir::Kernel>, syn::Error> {
    parse_kernels_at(attr, item, Span::call_site())
}

/// [`parse_kernels`], with `attr_span` where errors about the attribute as a whole point.
fn parse_kernels_at(
    attr: TokenStream,
    item: &syn::ItemFn,
    attr_span: Span,
) -> syn::Result<Vec<ir::Kernel>> {
    let a = attr::parse_attr(attr, attr_span)?;
    params::check_signature(&item.sig)?;
    let consts = const_param::const_params(&item.sig, &a)?;
    let w = generic::elem_param(&item.sig, &a)?;
    if let Some(w) = &w {
        generic::check_uses(item, w)?;
    }
    // The constant instances (or the fn itself), then each of those per element type:
    // `k_<suffix>_<ty>`, named `<name>_<suffix>_<ty>`.
    let by_consts: Vec<(syn::ItemFn, String, Option<String>)> = match &a.consts {
        Some(list) => list
            .instances
            .iter()
            .map(|i| {
                (
                    const_param::instantiate(item, &consts, i),
                    format!("{}_{}", a.name, const_param::suffix(&consts, i)),
                    Some(const_param::describe(&consts, i)),
                )
            })
            .collect(),
        None => vec![(item.clone(), a.name.clone(), None)],
    };
    let tys = a.elem.as_ref().map(|l| l.tys.clone()).unwrap_or_default();
    let mut kernels = Vec::new();
    for (inst, name, described) in by_consts {
        let Some(w) = &w else {
            let k = lower(&a, &inst, &name);
            kernels.push(match &described {
                Some(d) => k.map_err(|e| generic::in_instance(e, d))?,
                None => k?,
            });
            continue;
        };
        for &ty in &tys {
            let typed = generic::instantiate(&inst, w, ty);
            let instance = match &described {
                Some(d) => format!("{d}, {}", ty.rust_name()),
                None => ty.rust_name().to_string(),
            };
            let name = format!("{name}_{}", ty.rust_name());
            kernels.push(lower(&a, &typed, &name).map_err(|e| generic::in_instance(e, &instance))?);
        }
    }
    Ok(kernels)
}

/// Lowers and checks one non-generic kernel `item` called `name`.
fn lower(a: &attr::KernelAttr, item: &syn::ItemFn, name: &str) -> syn::Result<ir::Kernel> {
    let params = params::parse_params(&item.sig)?;
    let mut cx = cx::Cx::new(a.workgroup, params);
    cx.subgroup = a.subgroup;
    let body = cx.lower_body(&item.block)?;
    breaks::check(&body, &cx.sites)?;
    let kernel = ir::Kernel {
        fn_name: item.sig.ident.to_string(),
        name: name.to_string(),
        version: a.version,
        workgroup_size: a.workgroup,
        subgroup: a.subgroup,
        targets: a.targets.clone(),
        params: cx.params,
        shared: cx.shared,
        tiles: cx.tiles,
        locals: cx.locals,
        body,
    };
    uniformity::check(&kernel, &cx.sites)?;
    let kernel = ir::Kernel {
        body: control::splice_constant_ifs(kernel.body),
        ..kernel
    };
    Ok(kernel)
}

/// For build scripts: every fn in a source file (top level and inside inline `mod`s) that
/// carries `#[loom::kernel(...)]` (or `#[kernel(...)]`), parsed in file order; a generic
/// kernel gives its instances, in `elem` order. Errors are rendered as "file-relative
/// line:col: message" strings (line 1-based, column 1-based), one line per error, covering
/// every kernel of the file.
pub fn kernels_in_file(src: &str) -> Result<Vec<ir::Kernel>, String> {
    let file = syn::parse_file(src).map_err(|e| render_errors(&e, None))?;
    let mut out = Vec::new();
    let mut errors = Vec::new();
    collect(&file.items, &mut out, &mut errors);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors.join("\n"))
    }
}

fn collect(items: &[syn::Item], out: &mut Vec<ir::Kernel>, errors: &mut Vec<String>) {
    for item in items {
        match item {
            syn::Item::Fn(f) => {
                for a in f.attrs.iter().filter(|a| is_kernel_attr(a)) {
                    let tokens = match &a.meta {
                        syn::Meta::List(l) => l.tokens.clone(),
                        _ => TokenStream::new(),
                    };
                    match parse_kernels_at(tokens, f, a.span()) {
                        Ok(ks) => out.extend(ks),
                        Err(e) => errors.push(render_errors(&e, Some(a.span()))),
                    }
                }
            }
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    collect(items, out, errors);
                }
            }
            _ => {}
        }
    }
}

fn is_kernel_attr(a: &syn::Attribute) -> bool {
    let segs: Vec<String> = a
        .path()
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    matches!(
        segs.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        ["loom", "kernel"] | ["kernel"]
    )
}

/// `line:col: message` per error; errors without a location use `fallback`'s.
fn render_errors(e: &syn::Error, fallback: Option<Span>) -> String {
    e.clone()
        .into_iter()
        .map(|one| {
            let mut at = one.span().start();
            if at.line == 0 {
                if let Some(f) = fallback {
                    at = f.start();
                }
            }
            format!("{}:{}: {}", at.line, at.column + 1, one)
        })
        .collect::<Vec<_>>()
        .join("\n")
}
