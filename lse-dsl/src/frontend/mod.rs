//! The LOOM front end: a `#[loom::kernel(...)]` Rust `fn` in, a typed and checked
//! [`ir::Kernel`] out (the language is `LOOM.md`).
//!
//! Stages, each in its own module: the attribute (`attr`), the signature (`params`, with
//! declared buffer lengths in `lengths`),
//! element-type instances of generic kernels (`generic`), constant instances
//! (`const_param`), statements (`stmt`, `bindings`,
//! `assign`, `control`), functions inlined at their calls (`fns`; whole files' kernels and
//! functions in `files`) and expressions with bidirectional type inference (`expr`,
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
mod files;
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

use crate::ir;

pub use files::{kernels_in_crate, kernels_in_file, module_functions, rust_files};
pub use fns::check_function;

/// AMDGPU archs built when the attribute names no `targets`.
pub const DEFAULT_TARGETS: [&str; 3] = ["gfx1201", "gfx1100", "gfx942"];

/// Parses and checks one kernel attribute's kernels: one [`ir::Kernel`] for a plain `fn`, one
/// per listed element type, in `elem` order, for a generic `fn k<W>` with `elem = [...]`
/// (instance fn `k_<ty>`, name `<name>_<ty>`), one per entry of `consts = [...]` for a
/// `fn k<const C: u32, ..>` (`k_<suffix>`, `const_param`), and with both, each constant
/// instance per element type (`k_<suffix>_<ty>`). `attr` = the tokens inside
/// `#[loom::kernel(...)]`; `item` = the annotated fn (its own attributes are ignored).
pub fn parse_kernels(attr: TokenStream, item: &syn::ItemFn) -> Result<Vec<ir::Kernel>, syn::Error> {
    parse_kernels_with(attr, item, &[])
}

/// [`parse_kernels`] for a kernel that may call `functions` (its crate's
/// `#[loom::function]`s, from [`module_functions`]).
pub fn parse_kernels_with(
    attr: TokenStream,
    item: &syn::ItemFn,
    functions: &[syn::ItemFn],
) -> Result<Vec<ir::Kernel>, syn::Error> {
    parse_kernels_at(attr, item, functions, Span::call_site())
}

/// [`parse_kernels_with`], with `attr_span` where errors about the attribute as a whole point.
fn parse_kernels_at(
    attr: TokenStream,
    item: &syn::ItemFn,
    functions: &[syn::ItemFn],
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
            let k = lower(&a, &inst, &name, functions);
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
            kernels.push(
                lower(&a, &typed, &name, functions)
                    .map_err(|e| generic::in_instance(e, &instance))?,
            );
        }
    }
    Ok(kernels)
}

/// Lowers and checks one non-generic kernel `item` called `name`.
fn lower(
    a: &attr::KernelAttr,
    item: &syn::ItemFn,
    name: &str,
    functions: &[syn::ItemFn],
) -> syn::Result<ir::Kernel> {
    let params = params::parse_params(&item.sig)?;
    let mut cx = cx::Cx::new(a.workgroup, params);
    cx.subgroup = a.subgroup;
    let body = cx.lower_body(&item.block, functions)?;
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
