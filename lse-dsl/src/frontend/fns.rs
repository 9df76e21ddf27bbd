//! LOOM functions and procedures: `fn name(a: T, b: &[T], ..) -> R { let ..; value }` and
//! `fn name(a: T, b: &mut [T], t: Tile, ..) { statements }` items at the top level of a
//! kernel body, or anywhere in the crate's source files under `#[loom::function]`, inlined at
//! every call.
//!
//! A function computes one value from its arguments, so its body is `let` bindings and
//! `const` items followed by the value; it cannot store, loop or synchronise. A call lowers
//! each value argument once, in the caller's scope, then lowers the body with the
//! parameters naming those expressions (a buffer parameter names the caller's buffer or
//! shared array itself), so the IR holds the body as if written at the call: nothing of the
//! function is left to any backend. LOOM expressions have no side effects, so a parameter
//! used twice reads the same value twice; the backends share the repeated work.
//!
//! A procedure is called as a statement and its body is statements, lowered in place of
//! the call; its tile parameters name the caller's tiles. A value argument that reads memory
//! is first stored in a fresh local (the body may store where it read); the others are
//! named like a function's (nothing in the body can change them).
//!
//! A body sees its parameters, its own bindings and the crate's functions; one declared
//! in the kernel body also sees the kernel's top-level constants (its `const` items and the
//! const parameters of a constant instance) and the body's other functions; neither sees the
//! kernel's parameters or locals (as Rust `fn` items). Errors inside a body point at the body
//! and at the call they were found through.

use std::collections::HashMap;
use std::rc::Rc;

use syn::spanned::Spanned;

use super::builtins::is_builtin;
use super::cx::{Binding, Cx, Site};
use super::syntax::{err, noted, text};
use super::types::{named_ty, ty_list, type_text};
use crate::ir::{Access, Block, Expr, ExprKind, Param, Stmt, Ty};

/// Value types a function takes and returns.
const VALUES: [Ty; 6] = [Ty::F32, Ty::I32, Ty::U32, Ty::Bool, Ty::Bf16, Ty::F16];
/// Element types of a function's buffer parameters (a kernel's buffers and shared arrays).
const ELEMS: [Ty; 5] = [Ty::F32, Ty::Bf16, Ty::F16, Ty::U32, Ty::I32];

/// One declared function or procedure, its signature checked.
pub(super) struct LoomFn {
    item: syn::ItemFn,
    params: Vec<FnParam>,
    /// The value's type; `None` for a procedure.
    ret: Option<Ty>,
    /// Declared in the kernel body (else a crate function, `#[loom::function]`).
    local: bool,
}

struct FnParam {
    name: String,
    kind: ParamKind,
}

#[derive(Clone, Copy)]
enum ParamKind {
    /// A value of this type.
    Value(Ty),
    /// A buffer or shared array with this element type (`None`: the fn's type parameter,
    /// the same for all such arguments of a call); writable (`&mut [T]`, procedures only)
    /// when `true`.
    Buffer(Option<Ty>, bool),
    /// A tile of any shape and type (procedures only): the argument's.
    Tile,
}

/// The functions a kernel may call, by name: `module`'s (the crate's `#[loom::function]`s,
/// that attribute removed) and those declared at the top level of `body`. A file function
/// whose signature is wrong is `None`: its error is reported at its declaration (by its
/// attribute, or by `kernels_in_crate`), and a call of it says so.
pub(super) fn collect(
    module: &[syn::ItemFn],
    body: &[syn::Stmt],
) -> syn::Result<HashMap<String, Option<Rc<LoomFn>>>> {
    let mut out = HashMap::new();
    let local = body.iter().filter_map(|s| match s {
        syn::Stmt::Item(syn::Item::Fn(f)) => Some(f),
        _ => None,
    });
    let all = module
        .iter()
        .map(|f| (f, false))
        .chain(local.map(|f| (f, true)));
    for (f, local) in all {
        let name = f.sig.ident.to_string();
        if is_builtin(&name) {
            return err(
                f.sig.ident.span(),
                format!("`fn {name}` has the name of a LOOM built-in; choose another name"),
            );
        }
        if out.contains_key(&name) {
            return err(f.sig.ident.span(), format!("`fn {name}` is declared twice"));
        }
        let checked = match signature(f, local) {
            Ok(g) => Some(Rc::new(g)),
            Err(_) if !local => None,
            Err(e) => return Err(e),
        };
        out.insert(name, checked);
    }
    Ok(out)
}

/// Checks `f`'s signature: plain parameters of a value type or `&[T]` and a value type
/// returned (a function), or no return type, and `&mut [T]` and `Tile` parameters too (a
/// procedure).
fn signature(f: &syn::ItemFn, local: bool) -> syn::Result<LoomFn> {
    let sig = &f.sig;
    if let Some(a) = f.attrs.iter().find(|a| !a.path().is_ident("doc")) {
        return err(
            a.span(),
            "attributes on a LOOM `fn` are not supported (doc comments are)",
        );
    }
    let qualifier = [
        sig.constness.map(|c| c.span()),
        sig.asyncness.map(|a| a.span()),
        sig.unsafety.map(|u| u.span()),
        sig.abi.as_ref().map(|a| a.span()),
        sig.variadic.as_ref().map(|v| v.span()),
    ];
    if let Some(span) = qualifier.into_iter().flatten().next() {
        return err(
            span,
            "a LOOM `fn` is a plain `fn` (no `const`, `async`, `unsafe`, `extern` or variadics)",
        );
    }
    let generic = type_param(sig)?;
    let ret = match &sig.output {
        syn::ReturnType::Default => None,
        syn::ReturnType::Type(_, ty) => match named_ty(ty).filter(|t| VALUES.contains(t)) {
            Some(t) => Some(t),
            None => {
                return err(
                    ty.span(),
                    format!(
                        "bad return type `{}`: expected {} (or none, for a procedure)",
                        type_text(ty),
                        ty_list(&VALUES)
                    ),
                )
            }
        },
    };
    let mut params: Vec<FnParam> = Vec::new();
    for arg in &sig.inputs {
        let syn::FnArg::Typed(pt) = arg else {
            return err(arg.span(), "a LOOM `fn` cannot take `self`");
        };
        let p = param(pt, ret.is_none(), generic)?;
        if params.iter().any(|q| q.name == p.name) {
            return err(
                pt.pat.span(),
                format!("parameter `{}` is declared twice", p.name),
            );
        }
        params.push(p);
    }
    let generic_buffer = params
        .iter()
        .any(|p| matches!(p.kind, ParamKind::Buffer(None, _)));
    if let Some(t) = generic.filter(|_| !generic_buffer) {
        return err(
            t.span(),
            format!("`{t}` is the element type of no buffer parameter, so no call could give it"),
        );
    }
    Ok(LoomFn {
        item: f.clone(),
        params,
        ret,
        local,
    })
}

/// Checks the signature of a `#[loom::function]` (`f` without that attribute), where its
/// attribute stands; its body is checked at its calls.
pub fn check_function(f: &syn::ItemFn) -> syn::Result<()> {
    signature(f, false).map(|_| ())
}

/// The fn's one type parameter `T`, if it has one: the element type of its `&[T]`
/// parameters, taken from the arguments at each call. No bounds, lifetimes, const
/// parameters or `where` clauses.
fn type_param(sig: &syn::Signature) -> syn::Result<Option<&syn::Ident>> {
    let g = &sig.generics;
    let bad = |span| {
        err(
            span,
            format!(
                "`fn {}` may have one type parameter, the element type of its buffers (`fn {}<T>(x: &[T], ..)`), without bounds; nothing else generic",
                sig.ident, sig.ident
            ),
        )
    };
    if let Some(w) = &g.where_clause {
        return bad(w.span());
    }
    let mut found = None;
    for p in &g.params {
        match p {
            syn::GenericParam::Type(t)
                if found.is_none()
                    && t.bounds.is_empty()
                    && t.default.is_none()
                    && t.attrs.is_empty() =>
            {
                found = Some(&t.ident)
            }
            other => return bad(other.span()),
        }
    }
    Ok(found)
}

/// One parameter; `procedure` allows `&mut [T]` and `Tile`, `generic` is the fn's type
/// parameter.
fn param(pt: &syn::PatType, procedure: bool, generic: Option<&syn::Ident>) -> syn::Result<FnParam> {
    if let Some(a) = pt.attrs.first() {
        return err(a.span(), "attributes on parameters are not supported");
    }
    let name = match &*pt.pat {
        syn::Pat::Ident(pi)
            if pi.by_ref.is_none() && pi.mutability.is_none() && pi.subpat.is_none() =>
        {
            pi.ident.to_string()
        }
        other => {
            return err(
                other.span(),
                "a parameter must be a plain name (no `mut`, `ref` or patterns)",
            )
        }
    };
    let bad =
        || {
            err(
                pt.ty.span(),
                format!(
                "bad parameter type `{}`: expected a value type ({}), a buffer `&[T]` (T in {}){}",
                type_text(&pt.ty),
                ty_list(&VALUES),
                ty_list(&ELEMS),
                if procedure { ", `&mut [T]` or `Tile`" } else { "" }
            ),
            )
        };
    let only_procedures = |what: &str| {
        err(
            pt.ty.span(),
            format!("a LOOM `fn` with a value cannot take {what}: that needs a procedure (a `fn` without `-> T`, called as a statement)"),
        )
    };
    let kind = match &*pt.ty {
        syn::Type::Reference(r) => {
            let syn::Type::Slice(s) = &*r.elem else {
                return bad();
            };
            let is_generic = match (&*s.elem, generic) {
                (syn::Type::Path(p), Some(g)) => p.qself.is_none() && p.path.is_ident(g),
                _ => false,
            };
            let elem = named_ty(&s.elem).filter(|t| ELEMS.contains(t));
            if elem.is_none() && !is_generic {
                return bad();
            }
            if r.mutability.is_some() && !procedure {
                return only_procedures("`&mut [T]` (it cannot write memory)");
            }
            ParamKind::Buffer(elem, r.mutability.is_some())
        }
        syn::Type::Path(p) if p.qself.is_none() && p.path.is_ident("Tile") => {
            if !procedure {
                return only_procedures("a `Tile`");
            }
            ParamKind::Tile
        }
        ty => match named_ty(ty).filter(|t| VALUES.contains(t)) {
            Some(t) => ParamKind::Value(t),
            None => return bad(),
        },
    };
    Ok(FnParam { name, kind })
}

impl Cx {
    /// The procedure `name` as seen from the code being lowered, if there is one.
    pub(super) fn procedure(&self, name: &str) -> Option<Rc<LoomFn>> {
        let f = self.fns.get(name)?.as_ref()?;
        let from_module = self.inlining.last().is_some_and(|g| !g.local);
        (f.ret.is_none() && !(f.local && from_module)).then(|| f.clone())
    }

    /// The function `name` as seen from the code being lowered (a body inlined from a
    /// `#[loom::function]` sees only the crate's functions), if there is one; an error at the
    /// call `c` for a file function whose declaration has errors.
    pub(super) fn fn_named(
        &self,
        name: &str,
        c: &syn::ExprCall,
    ) -> syn::Result<Option<Rc<LoomFn>>> {
        let Some(f) = self.fns.get(name) else {
            return Ok(None);
        };
        let Some(f) = f else {
            return err(
                c.func.span(),
                format!("`{name}` is a `#[loom::function]` whose declaration has errors (reported there)"),
            );
        };
        let from_module = self.inlining.last().is_some_and(|g| !g.local);
        if f.local && from_module {
            return Ok(None);
        }
        Ok(Some(f.clone()))
    }

    /// The value of a call of function `f`, inlined (see the module doc).
    pub(super) fn call_fn(&mut self, f: Rc<LoomFn>, c: &syn::ExprCall) -> syn::Result<Expr> {
        let Some(ret) = f.ret else {
            let name = &f.item.sig.ident;
            return err(
                c.span(),
                format!("`{name}` is a procedure (no `-> T`), not a value: call it as a statement, `{name}(..);`"),
            );
        };
        let bound = self.bind_args(&f, c, None)?;
        self.inlined(&f, c, bound, |cx| cx.fn_body(&f, ret))
    }

    /// A call of procedure `f` as a statement: each value argument that reads memory into a
    /// fresh local (the body may store there), then the body's statements into `out` (see
    /// the module doc).
    pub(super) fn call_proc(
        &mut self,
        f: Rc<LoomFn>,
        c: &syn::ExprCall,
        out: &mut Block,
    ) -> syn::Result<()> {
        let bound = self.bind_args(&f, c, Some(out))?;
        self.inlined(&f, c, bound, |cx| {
            let loops = std::mem::replace(&mut cx.loop_depth, 0);
            let top = std::mem::replace(&mut cx.top_level, false);
            let r = cx.stmts(&f.item.block.stmts, out);
            cx.top_level = top;
            cx.loop_depth = loops;
            r
        })
    }

    /// The parameters of `f` bound to the arguments of call `c`, after [`Cx::check_call`].
    /// With `out` (a procedure's call), a value argument that reads memory is stored first
    /// in a fresh local emitted there; other value arguments are named as they are.
    fn bind_args(
        &mut self,
        f: &Rc<LoomFn>,
        c: &syn::ExprCall,
        mut out: Option<&mut Block>,
    ) -> syn::Result<HashMap<String, Binding>> {
        self.check_call(f, c)?;
        let name = &f.item.sig.ident;
        let mut bound = HashMap::new();
        let mut generic = None;
        for (p, arg) in f.params.iter().zip(&c.args) {
            let what = format!("argument `{}` of `{name}`", p.name);
            let b = match p.kind {
                ParamKind::Value(ty) => {
                    let value = self.expr_of(arg, ty, &what)?;
                    match out.as_deref_mut() {
                        Some(out) if reads_memory(&value) => {
                            let var = self.new_local(&p.name, ty);
                            self.flush_pending(out);
                            let site = Site {
                                span: arg.span(),
                                text: text(arg),
                            };
                            self.emit(out, Stmt::Let { var, value }, site);
                            Binding::Local {
                                var,
                                mutable: false,
                            }
                        }
                        _ => Binding::Value(value),
                    }
                }
                ParamKind::Buffer(elem, mutable) => {
                    self.buffer_arg(arg, elem, mutable, &mut generic, &what)?
                }
                ParamKind::Tile => self.tile_binding(arg, &what)?,
            };
            bound.insert(p.name.clone(), b);
        }
        Ok(bound)
    }

    /// Runs `body` with `f`'s parameters `bound`, in `f`'s scopes and on the inlining stack;
    /// its errors get the call `c` ([`call_error`]).
    fn inlined<T>(
        &mut self,
        f: &Rc<LoomFn>,
        c: &syn::ExprCall,
        bound: HashMap<String, Binding>,
        body: impl FnOnce(&mut Cx) -> syn::Result<T>,
    ) -> syn::Result<T> {
        self.called.insert(f.item.sig.ident.to_string());
        self.inlining.push(f.clone());
        let saved = self.enter_fn(bound, f.local);
        let r = body(self);
        self.leave_fn(saved);
        self.inlining.pop();
        r.map_err(|e| call_error(e, f, c))
    }

    /// The checks of a call before its arguments: their number, and no recursion.
    fn check_call(&self, f: &Rc<LoomFn>, c: &syn::ExprCall) -> syn::Result<()> {
        let name = f.item.sig.ident.to_string();
        if c.args.len() != f.params.len() {
            return err(
                c.span(),
                format!(
                    "`{name}` takes {} argument{}, found {}",
                    f.params.len(),
                    if f.params.len() == 1 { "" } else { "s" },
                    c.args.len()
                ),
            );
        }
        if let Some(at) = self.inlining.iter().position(|g| Rc::ptr_eq(g, f)) {
            let through: Vec<String> = self.inlining[at + 1..]
                .iter()
                .map(|g| g.item.sig.ident.to_string())
                .collect();
            let through = through.join("`, `");
            let via = if through.is_empty() {
                String::new()
            } else {
                format!(" (through `{through}`)")
            };
            return err(
                c.span(),
                format!("`fn {name}` calls itself{via}: LOOM functions are inlined, so they cannot recurse"),
            );
        }
        Ok(())
    }

    /// The binding a tile argument passes.
    fn tile_binding(&self, arg: &syn::Expr, what: &str) -> syn::Result<Binding> {
        if let syn::Expr::Path(p) = super::syntax::strip(arg) {
            if let Some(id) = p.path.get_ident() {
                if let Some(b @ Binding::Tile(_)) = self.lookup(&id.to_string()) {
                    return Ok(b.clone());
                }
            }
        }
        err(
            arg.span(),
            format!("{what} must name a tile, found `{}`", text(arg)),
        )
    }

    /// The binding a buffer argument passes: a buffer parameter or shared array of `elem`
    /// (for `None`, the fn's type parameter: `generic`, which the first such argument sets),
    /// a writable one (`&mut [T]` or shared) when `mutable`.
    fn buffer_arg(
        &self,
        arg: &syn::Expr,
        elem: Option<Ty>,
        mutable: bool,
        generic: &mut Option<Ty>,
        what: &str,
    ) -> syn::Result<Binding> {
        let want = elem.or(*generic);
        let fail = |got: String| {
            err(
                arg.span(),
                format!(
                    "{what} must name a {}buffer or shared array of {}, found {got}",
                    if mutable { "writable (`&mut`) " } else { "" },
                    want.map_or("any element type", |t| t.rust_name())
                ),
            )
        };
        let ident = match super::syntax::strip(arg) {
            syn::Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
            _ => None,
        };
        let (b, found, writable, kind) = match ident.and_then(|i| self.lookup(&i.to_string())) {
            Some(b @ Binding::Param(id)) => match &self.params[*id as usize] {
                Param::Buffer { elem, access, .. } => {
                    (b.clone(), *elem, *access == Access::ReadWrite, "a buffer")
                }
                Param::Scalar { ty, .. } => return fail(format!("a {} scalar", ty.rust_name())),
            },
            Some(b @ Binding::Shared(id)) => (
                b.clone(),
                self.shared[*id as usize].elem,
                true,
                "a shared array",
            ),
            Some(_) => return fail("a value".to_string()),
            None => {
                return fail(match ident {
                    Some(i) => format!("nothing named `{i}`"),
                    None => "an expression".to_string(),
                })
            }
        };
        if want.is_some_and(|w| w != found) {
            return fail(format!("{kind} of {}", found.rust_name()));
        }
        if mutable && !writable {
            return fail(format!("the read-only buffer `{}`", text(arg)));
        }
        if elem.is_none() {
            *generic = Some(found);
        }
        Ok(b)
    }

    /// Lowers the body of function `f` (its parameters bound): `let`s and `const`s, then the
    /// value, of type `ret`.
    fn fn_body(&mut self, f: &LoomFn, ret: Ty) -> syn::Result<Expr> {
        let name = &f.item.sig.ident;
        let stmts = &f.item.block.stmts;
        let Some((syn::Stmt::Expr(value, None), init)) = stmts.split_last() else {
            return err(
                f.item.block.span(),
                format!("`fn {name}` must end in its value (an expression without `;`)"),
            );
        };
        for s in init {
            match s {
                syn::Stmt::Local(l) => self.fn_let(l)?,
                syn::Stmt::Item(syn::Item::Const(c)) => self.const_item(c)?,
                _ => {
                    return err(
                        s.span(),
                        "a LOOM `fn` holds `let` bindings and `const` items, then its value; statements that store, loop or synchronise belong in the kernel",
                    )
                }
            }
        }
        self.expr_of(value, ret, &format!("the value of `fn {name}`"))
    }

    /// `let x = e;` or `let x: T = e;` in a function body: `x` names the value of `e`.
    fn fn_let(&mut self, l: &syn::Local) -> syn::Result<()> {
        let (pat, ann) = match &l.pat {
            syn::Pat::Type(pt) => (&*pt.pat, Some(&*pt.ty)),
            p => (p, None),
        };
        let (name, mutable) = super::bindings::pat_ident(pat)?;
        if mutable || !l.attrs.is_empty() {
            return err(
                l.span(),
                "a `let` in a LOOM `fn` binds a name to a value once: no `mut`, no attributes",
            );
        }
        let Some(init) = l.init.as_ref().filter(|i| i.diverge.is_none()) else {
            return err(l.span(), "a `let` needs an initializer: `let x = ...;`");
        };
        let want = match ann {
            Some(t) => Some(named_ty(t).filter(|t| VALUES.contains(t)).ok_or_else(|| {
                syn::Error::new(
                    t.span(),
                    format!("bad type `{}`: expected {}", type_text(t), ty_list(&VALUES)),
                )
            })?),
            None => None,
        };
        let v = match want {
            Some(t) => self.expr_of(&init.expr, t, &format!("the value of `{name}`"))?,
            None => self.expr(&init.expr, None)?,
        };
        self.bind(&name, Binding::Value(v));
        Ok(())
    }

    /// After the body: a function declared in it that nothing called is an error at its name.
    pub(super) fn check_all_called(&self) -> syn::Result<()> {
        let mut unused: Vec<&Rc<LoomFn>> = self
            .fns
            .iter()
            .filter_map(|(n, f)| f.as_ref().filter(|f| f.local && !self.called.contains(n)))
            .collect();
        unused.sort_by_key(|f| f.item.sig.ident.to_string());
        match unused.first() {
            None => Ok(()),
            Some(f) => err(
                f.item.sig.ident.span(),
                format!(
                    "`fn {}` is never called; remove it (its body is checked at its calls)",
                    f.item.sig.ident
                ),
            ),
        }
    }
}

/// Whether evaluating `e` reads a buffer or shared array (whose value a store may change).
fn reads_memory(e: &Expr) -> bool {
    e.any(&|x| matches!(x.kind, ExprKind::Load { .. } | ExprKind::SharedLoad { .. }))
}

/// `e`, an error in the body of `f`, with the call `c` it was found through (and, for a
/// crate function, whose tokens carry no position of their own in the proc macro, the
/// function's name).
fn call_error(e: syn::Error, f: &LoomFn, c: &syn::ExprCall) -> syn::Error {
    let name = &f.item.sig.ident;
    let mut e = if f.local {
        e
    } else {
        noted(e, &format!("in `#[loom::function]` `{name}`"))
    };
    e.combine(syn::Error::new(
        c.span(),
        format!("in this call of `{name}`"),
    ));
    e
}

#[cfg(test)]
mod tests {
    use super::super::parse_kernels;
    use super::super::tests::{e, k};
    use crate::ir::*;
    use quote::quote;

    #[test]
    fn a_call_lowers_to_the_body_written_at_the_call() {
        let with_fn = k("
            /// The 32 bits at even byte offset `o`.
            fn word_at(w: &[u32], o: u32) -> u32 {
                let lo = w[o / 4] >> 16;
                if o % 4 == 0 { w[o / 4] } else { lo | (w[o / 4 + 1] << 16) }
            }
            let o = local_id() * 2;
            out[o] = word_at(ids, o) as f32;
        ");
        let inline = k("
            let o = local_id() * 2;
            out[o] = (if o % 4 == 0 { ids[o / 4] } else { (ids[o / 4] >> 16) | (ids[o / 4 + 1] << 16) }) as f32;
        ");
        assert_eq!(with_fn.body, inline.body);
        assert_eq!(with_fn.locals, inline.locals);
    }

    #[test]
    fn the_loom_md_example_compiles() {
        let doc = include_str!("../../LOOM.md");
        let section = &doc[doc
            .find("## Functions")
            .expect("LOOM.md has a Functions section")..];
        let start = section.find("```rust\n").expect("with an example") + 8;
        let len = section[start..].find("```").expect("closed");
        let ks = super::super::kernels_in_file(&section[start..start + len]).unwrap();
        assert_eq!(ks[0].name, "example.halves");
    }

    #[test]
    fn functions_take_shared_arrays_and_call_each_other_in_any_order() {
        let with_fn = k("
            const SCALE: f32 = 0.5;
            let s = shared::<f32>(64);
            fn twice(v: f32) -> f32 { half_of(v) * 4.0 }
            fn half_of(v: f32) -> f32 { v * SCALE }
            fn at(a: &[f32], i: u32) -> f32 { twice(a[i]) }
            s[local_id()] = x[local_id()];
            barrier();
            out[local_id()] = at(s, 63 - local_id()) + at(x, 0);
        ");
        let inline = k("
            let s = shared::<f32>(64);
            s[local_id()] = x[local_id()];
            barrier();
            out[local_id()] = s[63 - local_id()] * 0.5 * 4.0 + x[0] * 0.5 * 4.0;
        ");
        assert_eq!(with_fn.body, inline.body);
    }

    #[test]
    fn arguments_take_the_parameter_types_and_the_value_the_return_type() {
        let kernel = k("
            fn f(a: u32, b: bool, c: bf16) -> i32 { if b { a as i32 } else { -1 } }
            let r = f(3, true, h[0]);
        ");
        assert_eq!(super::super::tests::local_ty(&kernel, "r"), Ty::I32);
        let msg = e("fn f(a: u32) -> u32 { a }\nlet r = f(s);");
        assert!(
            msg.contains("type mismatch: argument `a` of `f` must be u32, found f32"),
            "{msg}"
        );
        let msg = e("fn f(a: u32) -> f32 { a }\nlet r = f(1);");
        assert!(
            msg.contains("type mismatch: the value of `fn f` must be f32, found u32"),
            "{msg}"
        );
        assert!(msg.contains("in this call of `f`"), "{msg}");
        let msg = e("fn f(a: u32) -> u32 { a }\nlet r = f(1, 2);");
        assert!(msg.contains("`f` takes 1 argument, found 2"), "{msg}");
    }

    #[test]
    fn buffer_arguments_name_a_buffer_or_shared_array_of_the_element_type() {
        for (arg, found) in [
            ("x", "a buffer of f32"),
            ("n", "a u32 scalar"),
            ("ids[0]", "an expression"),
            ("s", "a shared array of f32"),
            ("q", "nothing named `q`"),
        ] {
            let msg = e(&format!(
                "let s = shared::<f32>(4);\nfn f(w: &[u32]) -> u32 {{ w[0] }}\nlet r = f({arg});"
            ));
            assert!(
                msg.contains(&format!(
                    "argument `w` of `f` must name a buffer or shared array of u32, found {found}"
                )),
                "{arg}: {msg}"
            );
        }
    }

    #[test]
    fn a_type_parameter_takes_each_call_s_buffer_element_type() {
        let with_fn = k("
            fn first<T>(a: &[T], i: u32) -> f32 { to_f32(a[i]) }
            fn copy<T>(dst: &mut [T], src: &[T]) { dst[0] = src[1]; }
            out[0] = first(x, 1) + first(h, 2);
            copy(hout, h);
        ");
        let inline = k("
            out[0] = to_f32(x[1]) + to_f32(h[2]);
            hout[0] = h[1];
        ");
        assert_eq!(with_fn.body, inline.body);
        let msg = e("fn copy<T>(dst: &mut [T], src: &[T]) { dst[0] = src[1]; }\ncopy(hout, x);");
        assert!(
            msg.contains("argument `src` of `copy` must name a buffer or shared array of bf16, found a buffer of f32"),
            "{msg}"
        );
    }

    #[test]
    fn a_body_sees_its_parameters_and_the_kernel_constants_only() {
        let msg = e("let t = 1u32;\nfn f(a: u32) -> u32 { a + t }\nlet r = f(1);");
        assert!(msg.contains("unknown variable `t`"), "{msg}");
        let msg = e("fn f(a: u32) -> u32 { a + n }\nlet r = f(1);");
        assert!(msg.contains("unknown variable `n`"), "{msg}");
        let msg = e("fn f(a: u32) -> f32 { x[a] }\nlet r = f(1);");
        assert!(msg.contains("unknown variable `x`"), "{msg}");
    }

    #[test]
    fn a_body_binds_values_and_ends_in_one() {
        let ok = k("fn f(a: u32) -> u32 { const T: u32 = 3; let b: u32 = a * T; let a = b + 1; a }\nlet r = f(2);");
        assert_eq!(
            super::super::tests::let_value(&ok, "r").kind,
            ExprKind::Const(7)
        );
        for (body, want) in [
            ("let mut b = a; b", "no `mut`"),
            ("out[a] = 1.0; a", "then its value"),
            ("for i in 0..a { } a", "then its value"),
            ("barrier(); a", "then its value"),
            ("a;", "must end in its value"),
            ("let b = a;", "must end in its value"),
        ] {
            let msg = e(&format!("fn f(a: u32) -> u32 {{ {body} }}\nlet r = f(2);"));
            assert!(msg.contains(want), "{body}: {msg}");
            assert!(msg.contains("in this call of `f`"), "{body}: {msg}");
        }
    }

    #[test]
    fn signatures_are_checked_at_the_declaration() {
        for (sig, want) in [
            (
                "fn f(a: u32) { a }",
                "`f` is a procedure (no `-> T`), not a value: call it as a statement",
            ),
            ("fn f(a: u32) -> f64 { a }", "bad return type `f64`"),
            (
                "fn f<T>(a: u32) -> u32 { a }",
                "`T` is the element type of no buffer parameter",
            ),
            (
                "fn f<T: Copy>(a: &[T]) -> u32 { 1 }",
                "`fn f` may have one type parameter",
            ),
            (
                "fn f<T, U>(a: &[T], b: &[U]) -> u32 { 1 }",
                "`fn f` may have one type parameter",
            ),
            (
                "fn f<const N: u32>(a: u32) -> u32 { a }",
                "`fn f` may have one type parameter",
            ),
            (
                "fn f(a: &mut [f32]) -> u32 { 1 }",
                "a LOOM `fn` with a value cannot take `&mut [T]` (it cannot write memory)",
            ),
            ("fn f(a: Tile) -> u32 { 1 }", "cannot take a `Tile`"),
            (
                "fn f(a: &[f64]) -> u32 { 1 }",
                "bad parameter type `&[f64]`",
            ),
            (
                "fn f(a: [u32; 4]) -> u32 { 1 }",
                "bad parameter type `[u32; 4]`",
            ),
            ("fn f(mut a: u32) -> u32 { a }", "must be a plain name"),
            (
                "fn f(a: u32, a: u32) -> u32 { a }",
                "parameter `a` is declared twice",
            ),
            (
                "const fn f(a: u32) -> u32 { a }",
                "a LOOM `fn` is a plain `fn`",
            ),
            (
                "unsafe fn f(a: u32) -> u32 { a }",
                "a LOOM `fn` is a plain `fn`",
            ),
            (
                "#[inline] fn f(a: u32) -> u32 { a }",
                "attributes on a LOOM `fn`",
            ),
            (
                "fn exp(a: u32) -> u32 { a }",
                "`fn exp` has the name of a LOOM built-in",
            ),
            (
                "fn f(a: u32) -> u32 { a }\nfn f(b: u32) -> u32 { b }",
                "`fn f` is declared twice",
            ),
        ] {
            let msg = e(&format!("{sig}\nlet r = f(1);"));
            assert!(msg.contains(want), "{sig}: {msg}");
        }
    }

    #[test]
    fn recursion_unused_functions_and_nested_declarations_are_errors() {
        let msg = e("fn f(a: u32) -> u32 { f(a) }\nlet r = f(1);");
        assert!(
            msg.contains("`fn f` calls itself: LOOM functions are inlined"),
            "{msg}"
        );
        let msg = e("fn f(a: u32) -> u32 { g(a) }\nfn g(a: u32) -> u32 { f(a) }\nlet r = f(1);");
        assert!(msg.contains("`fn f` calls itself (through `g`)"), "{msg}");
        let msg = e("fn f(a: u32) -> u32 { a }\nfn g(a: u32) -> u32 { a }\nlet r = f(1);");
        assert_eq!(
            msg,
            "4:4: `fn g` is never called; remove it (its body is checked at its calls)"
        );
        let msg = e("if n > 0 {\nfn f(a: u32) -> u32 { a }\n}");
        assert_eq!(
            msg,
            "4:4: a LOOM `fn` is declared at the top level of the kernel body"
        );
    }

    #[test]
    fn an_error_in_a_body_points_at_the_body_and_at_the_call() {
        let msg = e("fn f(a: u32) -> u32 {\n  a + 1.0\n}\nlet r = f(1);");
        let lines: Vec<&str> = msg.lines().collect();
        assert_eq!(lines.len(), 2, "{msg}");
        assert_eq!(
            lines[0],
            "4:7: type mismatch: float literal where u32 is expected"
        );
        assert_eq!(lines[1], "6:9: in this call of `f`");
    }

    #[test]
    fn collectives_in_a_body_follow_the_rules_of_the_call_site() {
        let ok =
            k("fn total(v: f32) -> f32 { reduce_sum(v) * 2.0 }\nlet r = total(x[local_id()]);");
        assert!(ok.body.iter().any(|s| matches!(
            s,
            Stmt::Collective {
                op: CollectiveOp::ReduceSum,
                ..
            }
        )));
        let msg = e("fn total(v: f32) -> f32 { reduce_sum(v) }\nlet r = if n > 0 { total(s) } else { 0.0 };");
        assert!(msg.contains("a branch of an `if` expression"), "{msg}");
    }

    #[test]
    fn a_procedure_call_lowers_to_its_statements_with_memory_reads_let_bound() {
        let with_proc = k("
            fn store_scaled(dst: &mut [f32], at: u32, v: f32, len: u32) {
                let t = v * 2.0;
                if at < len {
                    dst[at] = t + v;
                }
            }
            for i in 0..4u32 {
                store_scaled(out, i * 2, x[i], n);
            }
        ");
        let inline = k("
            for i in 0..4u32 {
                let v = x[i];
                let t = v * 2.0;
                if i * 2 < n {
                    out[i * 2] = t + v;
                }
            }
        ");
        assert_eq!(with_proc.body, inline.body);
        assert_eq!(with_proc.locals, inline.locals);
    }

    #[test]
    fn procedures_take_tiles_and_writable_buffers_and_check_them() {
        let with_proc = k("
            let a = tile::<f32, 16, 16>();
            let acc = tile::<f32, 16, 16>();
            fn step(acc: Tile, a: Tile, src: &[f32], at: u32) {
                tile_load(a, src, at, 16, 16, 16);
                tile_dot(acc, a, a);
            }
            tile_zero(acc);
            step(acc, a, x, 0);
            step(acc, a, x, 256);
            tile_store(acc, out, 0, 16, 16, 16);
        ");
        let tile_stmts = with_proc
            .body
            .iter()
            .filter(|s| matches!(s, Stmt::Tile(_)))
            .count();
        assert_eq!(tile_stmts, 6);
        for (call, want) in [
            ("step(acc, n, x, 0);", "argument `a` of `step` must name a tile, found `n`"),
            (
                "fill(x);",
                "argument `dst` of `fill` must name a writable (`&mut`) buffer or shared array of f32, found the read-only buffer `x`",
            ),
            (
                "let v = fill(out);",
                "`fill` is a procedure (no `-> T`), not a value",
            ),
        ] {
            let msg = e(&format!(
                "let a = tile::<f32, 16, 16>();\nlet acc = tile::<f32, 16, 16>();\nfn step(acc: Tile, a: Tile, src: &[f32], at: u32) {{ tile_load(a, src, at, 16, 16, 16); tile_dot(acc, a, a); }}\nfn fill(dst: &mut [f32]) {{ dst[0] = 1.0; }}\nstep(acc, a, x, 0);\nfill(out);\n{call}"
            ));
            assert!(msg.contains(want), "{call}: {msg}");
        }
        let msg = e("fn twice(v: f32) -> f32 { v * 2.0 }\ntwice(s);");
        assert!(msg.contains("has no effect"), "{msg}");
    }

    #[test]
    fn a_procedure_body_keeps_the_kernel_rules() {
        for (body, call, want) in [
            (
                "break;",
                "for i in 0..n { p(i); }",
                "`break` outside of a loop",
            ),
            (
                "let t = shared::<f32>(4);",
                "p(1);",
                "is only allowed at the top level of the kernel body",
            ),
            ("barrier();", "if local_id() < 3 { p(1); }", "barrier"),
            (
                "fn q(v: u32) -> u32 { v }",
                "p(1);",
                "declared at the top level",
            ),
            ("let v = x[i];", "p(1);", "unknown variable `x`"),
        ] {
            let msg = e(&format!("fn p(i: u32) {{ {body} }}\n{call}"));
            assert!(msg.contains(want), "{body} / {call}: {msg}");
        }
        for arg in ["1", "ids[0]"] {
            let msg = e(&format!("fn p(i: u32) {{ i = 2; }}\np({arg});"));
            assert!(msg.contains("cannot assign to `i`"), "{arg}: {msg}");
        }
    }

    /// The kernels of a file whose `#[loom::function]`s are `functions`, and two kernels
    /// `a` and `b` with bodies `a` and `b`.
    fn file(functions: &str, a: &str, b: &str) -> Result<Vec<Kernel>, String> {
        let sig = |n: &str| {
            format!("#[loom::kernel(name = \"t.{n}\", version = 1, workgroup = 64)]\nfn {n}(x: &[f32], w: &[u32], out: &mut [f32], n: u32)")
        };
        super::super::kernels_in_file(&format!(
            "{functions}\n{} {{\n{a}\n}}\n{} {{\n{b}\n}}\n",
            sig("a"),
            sig("b")
        ))
    }

    #[test]
    fn file_functions_serve_every_kernel_of_the_file() {
        let functions = "
            #[loom::function]
            fn low(w: &[u32], i: u32) -> u32 { w[i] & 65535 }
            mod inner {
                /// Scaled.
                #[function]
                fn scaled(v: u32, s: f32) -> f32 { v as f32 * s }
            }
        ";
        let ks = file(
            functions,
            "out[0] = scaled(low(w, 1), 2.0);",
            "fn twice(v: f32) -> f32 { v * 2.0 }\nout[1] = twice(scaled(low(w, n), x[0]));",
        )
        .unwrap();
        let inline = file(
            "",
            "out[0] = (w[1] & 65535) as f32 * 2.0;",
            "out[1] = (w[n] & 65535) as f32 * x[0] * 2.0;",
        )
        .unwrap();
        assert_eq!(ks.len(), 2);
        for (k, want) in ks.iter().zip(&inline) {
            assert_eq!(k.body, want.body, "{}", k.name);
        }
    }

    #[test]
    fn file_functions_see_neither_the_kernel_constants_nor_its_functions() {
        let f = "#[loom::function]\nfn g(v: u32) -> u32 { v + C }";
        let msg = file(
            f,
            "const C: u32 = 1;\nout[0] = g(1) as f32;",
            "out[0] = g(2) as f32;",
        )
        .unwrap_err();
        assert!(msg.contains("unknown variable `C`"), "{msg}");
        let f = "#[loom::function]\nfn g(v: u32) -> u32 { h(v) }";
        let msg = file(
            f,
            "fn h(v: u32) -> u32 { v }\nout[0] = (g(1) + h(1)) as f32;",
            "out[0] = g(2) as f32;",
        )
        .unwrap_err();
        assert!(msg.contains("unknown function `h`"), "{msg}");
    }

    #[test]
    fn file_functions_are_checked_for_names_arguments_and_calls() {
        let f = "#[loom::function]\nfn g(v: u32) -> u32 { v }";
        let msg = file(f, "fn g(v: u32) -> u32 { v }\nout[0] = g(1) as f32;", "").unwrap_err();
        assert!(msg.contains("`fn g` is declared twice"), "{msg}");
        let msg = file(f, "", "").unwrap_err();
        assert_eq!(
            msg,
            "2:4: `#[loom::function]` `g` is never called by a kernel; remove it (its body is checked at its calls)"
        );
        let called_by_another = "#[loom::function]\nfn g(v: u32) -> u32 { v }\n#[loom::function]\nfn h(v: u32) -> u32 { g(v) }";
        assert!(file(called_by_another, "out[0] = h(1) as f32;", "").is_ok());
        let msg = file(
            "#[loom::function(inline)]\nfn g(v: u32) -> u32 { v }",
            "",
            "",
        )
        .unwrap_err();
        assert_eq!(msg, "1:1: `#[loom::function]` takes no arguments");
        let item: syn::ItemFn = syn::parse_quote!(
            fn g(v: &mut [f32]) -> u32 {
                1
            }
        );
        let e = super::check_function(&item).unwrap_err().to_string();
        assert!(e.contains("cannot write memory"), "{e}");
    }

    #[test]
    fn generic_and_constant_instances_reach_the_functions() {
        let item: syn::ItemFn = syn::parse_quote! {
            fn widen<W, const S: u32>(x: &[W], y: &mut [f32], n: u32) {
                fn load(a: &[W], i: u32) -> f32 { to_f32(a[i * S]) }
                let i = local_id();
                if i < n {
                    y[i] = load(x, i);
                }
            }
        };
        let attr = quote!(
            name = "t.widen",
            version = 1,
            workgroup = 64,
            elem = [bf16, f32],
            consts = [2, 3]
        );
        let ks = parse_kernels(attr, &item).unwrap();
        let names: Vec<&str> = ks.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "t.widen_s2_bf16",
                "t.widen_s2_f32",
                "t.widen_s3_bf16",
                "t.widen_s3_f32"
            ]
        );
        let text = crate::text::ir_text(&ks[2]);
        assert!(text.contains("* 3"), "{text}");
        assert!(text.contains("bf16"), "{text}");
        let bad: syn::ItemFn = syn::parse_quote! {
            fn k<W>(x: &[W], y: &mut [f32]) {
                fn load(a: &[W], i: u32) -> W { a[i] }
                y[0] = to_f32(load(x, 0));
            }
        };
        let e = super::super::tests::attr_err(
            quote!(name = "t.k", version = 1, workgroup = 64, elem = [bf16]),
            bad,
        );
        assert!(
            e.contains("the element type parameter `W` may only be"),
            "{e}"
        );
    }
}
