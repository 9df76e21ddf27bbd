//! Bindings: `let` (plain, typed, collectives, `let (v, i) = argmax(..)`,
//! `shared::<T>(N)`) and `const` items (folded to constants).

use syn::spanned::Spanned;

use super::builtins::{as_collective, call_name};
use super::cx::{Binding, Cx, Site};
use super::fold::eval;
use super::syntax::{err, strip, text};
use super::types::{named_ty, type_text};
use crate::ir::{Block, Expr, ExprKind, SharedArray, SharedId, Stmt, Ty, WORKGROUP_ALIGN};

/// Most shared memory a kernel may declare (the smallest LDS among the targets).
const MAX_SHARED_BYTES: u32 = 64 * 1024;

impl Cx {
    pub(super) fn const_item(&mut self, c: &syn::ItemConst) -> syn::Result<()> {
        if !c.generics.params.is_empty() {
            return err(c.generics.span(), "a `const` cannot be generic");
        }
        let ty = named_ty(&c.ty).filter(|t| matches!(t, Ty::F32 | Ty::I32 | Ty::U32 | Ty::Bool));
        let Some(ty) = ty else {
            return err(
                c.ty.span(),
                format!(
                    "bad `const` type `{}`: expected f32, i32, u32 or bool",
                    type_text(&c.ty)
                ),
            );
        };
        let name = c.ident.to_string();
        let v = self.without_hoist("a `const` initializer", |cx| {
            cx.expr_of(&c.expr, ty, &format!("the value of `const {name}`"))
        })?;
        let bits = eval(&v, self.workgroup).or_else(|why| {
            err(
                c.expr.span(),
                format!("`const {name}` is not a compile-time constant: {why}"),
            )
        })?;
        self.bind(&name, Binding::Const(Expr::new(ExprKind::Const(bits), ty)));
        Ok(())
    }

    pub(super) fn let_stmt(&mut self, l: &syn::Local, out: &mut Block) -> syn::Result<()> {
        if let Some(a) = l.attrs.first() {
            return err(
                a.span(),
                "attributes on `let` are not supported in LOOM kernels",
            );
        }
        let Some(init) = &l.init else {
            return err(l.span(), "a `let` needs an initializer: `let x = ...;`");
        };
        if let Some((_, els)) = &init.diverge {
            return err(
                els.span(),
                "`let ... else` is not supported in LOOM kernels",
            );
        }
        let (pat, ann) = match &l.pat {
            syn::Pat::Type(pt) => (&*pt.pat, Some(&*pt.ty)),
            p => (p, None),
        };
        if let syn::Pat::Tuple(t) = pat {
            return self.let_argmax(t, ann, &init.expr, out);
        }
        let (name, mutable) = pat_ident(pat)?;
        let want = match ann {
            Some(t) => Some(named_ty(t).ok_or_else(|| {
                syn::Error::new(
                    t.span(),
                    format!(
                        "bad type `{}`: expected f32, i32, u32, bool, bf16 or f16",
                        type_text(t)
                    ),
                )
            })?),
            None => None,
        };
        if let Some((fname, call)) = call_name(&init.expr) {
            if fname == "shared" {
                return self.let_shared(&name, mutable, ann, call);
            }
            if fname == "tile" {
                return self.let_tile(&name, mutable, ann, call);
            }
        }
        let site = Site {
            span: init.expr.span(),
            text: text(&init.expr),
        };
        if let Some((op, call)) = as_collective(&init.expr) {
            if op != crate::ir::CollectiveOp::Argmax {
                let (args, tys) = self.collective_args(op, call, want)?;
                if let Some(t) = want {
                    check_ann(t, tys[0], init.expr.span())?;
                }
                let var = self.new_local(&name, tys[0]);
                self.flush_pending(out);
                self.emit(
                    out,
                    Stmt::Collective {
                        op,
                        dst: vec![var],
                        args,
                    },
                    site,
                );
                self.bind(&name, Binding::Local { var, mutable });
                return Ok(());
            }
        }
        let value = self.expr(&init.expr, want)?;
        if let Some(t) = want {
            check_ann(t, value.ty, init.expr.span())?;
        }
        let var = self.new_local(&name, value.ty);
        self.flush_pending(out);
        self.emit(out, Stmt::Let { var, value }, site);
        self.bind(&name, Binding::Local { var, mutable });
        Ok(())
    }

    /// `let (v, i) = argmax(value, index);`
    fn let_argmax(
        &mut self,
        t: &syn::PatTuple,
        ann: Option<&syn::Type>,
        init: &syn::Expr,
        out: &mut Block,
    ) -> syn::Result<()> {
        if let Some(a) = ann {
            return err(
                a.span(),
                "write `let (v, i) = argmax(..);` without a type annotation",
            );
        }
        let Some((crate::ir::CollectiveOp::Argmax, call)) = as_collective(init) else {
            return err(
                t.span(),
                "tuple patterns are only for `let (value, index) = argmax(v, i);`",
            );
        };
        if t.elems.len() != 2 {
            return err(
                t.span(),
                "`argmax` returns two values: `let (value, index) = argmax(v, i);`",
            );
        }
        let (n0, m0) = pat_ident(&t.elems[0])?;
        let (n1, m1) = pat_ident(&t.elems[1])?;
        let (args, tys) = self.collective_args(crate::ir::CollectiveOp::Argmax, call, None)?;
        let v0 = self.new_local(&n0, tys[0]);
        let v1 = self.new_local(&n1, tys[1]);
        self.flush_pending(out);
        let site = Site {
            span: init.span(),
            text: text(init),
        };
        self.emit(
            out,
            Stmt::Collective {
                op: crate::ir::CollectiveOp::Argmax,
                dst: vec![v0, v1],
                args,
            },
            site,
        );
        self.bind(
            &n0,
            Binding::Local {
                var: v0,
                mutable: m0,
            },
        );
        self.bind(
            &n1,
            Binding::Local {
                var: v1,
                mutable: m1,
            },
        );
        Ok(())
    }

    /// Refuses a declaration of `extra` more bytes of workgroup memory when the kernel's
    /// shared arrays and tiles (which a GPU keeps in shared memory too) would pass the limit.
    pub(super) fn check_shared_memory(
        &self,
        extra: u64,
        span: proc_macro2::Span,
    ) -> syn::Result<()> {
        let total = self.workgroup_bytes() + extra.next_multiple_of(u64::from(WORKGROUP_ALIGN));
        if total > MAX_SHARED_BYTES as u64 {
            return err(
                span,
                format!("the kernel's shared arrays and tiles take {total} bytes; the limit is {MAX_SHARED_BYTES}"),
            );
        }
        Ok(())
    }

    /// `let arr = shared::<T>(LEN);`
    fn let_shared(
        &mut self,
        name: &str,
        mutable: bool,
        ann: Option<&syn::Type>,
        call: &syn::ExprCall,
    ) -> syn::Result<()> {
        let span = call.span();
        if !self.top_level {
            return err(
                span,
                "`shared::<T>(N)` is only allowed at the top level of the kernel body",
            );
        }
        if mutable {
            return err(span, "write `let arr = shared::<T>(N);` without `mut`: elements are assigned, not the array");
        }
        if let Some(a) = ann {
            return err(
                a.span(),
                "write `let arr = shared::<T>(N);` without a type annotation",
            );
        }
        let syn::Expr::Path(p) = strip(&call.func) else {
            unreachable!("call_name() only matches paths")
        };
        let elem = match &p.path.segments[0].arguments {
            syn::PathArguments::AngleBracketed(a) if a.args.len() == 1 => match &a.args[0] {
                syn::GenericArgument::Type(t) => {
                    named_ty(t).filter(|t| matches!(t, Ty::F32 | Ty::I32 | Ty::U32))
                }
                _ => None,
            },
            _ => None,
        };
        let Some(elem) = elem else {
            return err(span, "write `shared::<T>(N)` with T one of f32, i32 or u32");
        };
        if call.args.len() != 1 {
            return err(
                span,
                format!(
                    "`shared` takes 1 argument (the length), found {}",
                    call.args.len()
                ),
            );
        }
        let len_e = &call.args[0];
        let len = self.without_hoist("a shared array length", |cx| {
            cx.expr_of(len_e, Ty::U32, "a shared array length")
        })?;
        let len = eval(&len, self.workgroup).or_else(|why| {
            err(
                len_e.span(),
                format!("a shared array length must be a compile-time constant, but {why}"),
            )
        })?;
        if len == 0 {
            return err(len_e.span(), "a shared array needs at least one element");
        }
        self.check_shared_memory(elem.size_bytes() as u64 * len as u64, span)?;
        self.shared.push(SharedArray {
            name: name.to_string(),
            elem,
            len,
        });
        let id = (self.shared.len() - 1) as SharedId;
        self.bind(name, Binding::Shared(id));
        Ok(())
    }
}

/// `x` or `mut x`.
pub(super) fn pat_ident(p: &syn::Pat) -> syn::Result<(String, bool)> {
    match p {
        syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
            Ok((pi.ident.to_string(), pi.mutability.is_some()))
        }
        _ => err(
            p.span(),
            "patterns are not supported in LOOM kernels; bind a plain name",
        ),
    }
}

fn check_ann(ann: Ty, got: Ty, span: proc_macro2::Span) -> syn::Result<()> {
    if ann == got {
        return Ok(());
    }
    err(
        span,
        format!(
            "type mismatch: the `let` is annotated {} but the value is {}",
            ann.rust_name(),
            got.rust_name()
        ),
    )
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;
    use crate::ir::*;

    #[test]
    fn consts_fold_with_group_size_and_shared_lengths_are_constant() {
        let k = k(
            "const A: u32 = 4; const B: u32 = A * group_size(); const F: f32 = 0.5 * 3.0;
                   let t = shared::<f32>(B + 1); let b = B; let f = F; t[0] = f;",
        );
        assert_eq!(*let_value(&k, "b"), Expr::const_u32(256));
        assert_eq!(*let_value(&k, "f"), Expr::const_f32(1.5));
        assert_eq!(
            k.shared,
            vec![SharedArray {
                name: "t".into(),
                elem: Ty::F32,
                len: 257
            }]
        );
        assert!(matches!(k.body[2], Stmt::SharedStore { array: 0, .. }));
        let msg = e("const A: u32 = n;");
        assert!(
            msg.contains("`const A` is not a compile-time constant: it reads a kernel parameter"),
            "{msg}"
        );
        let msg = e("let t = shared::<f32>(n);");
        assert!(
            msg.contains("a shared array length must be a compile-time constant"),
            "{msg}"
        );
        let msg = e("if n > 0 { let t = shared::<f32>(4); }");
        assert!(msg.contains("only allowed at the top level"), "{msg}");
        assert!(e("let t = shared::<bf16>(4);").contains("T one of f32, i32 or u32"));
        assert!(e("let t = shared::<f32>(20000);").contains("the limit is 65536"));
        // 4 + 65532 bytes, but each array starts at a multiple of 16.
        let msg = e("let a = shared::<f32>(1); let b = shared::<f32>(16383);");
        assert!(
            msg.contains("take 65552 bytes; the limit is 65536"),
            "{msg}"
        );
        let at_limit = crate::frontend::tests::k(
            "let a = shared::<f32>(4); let b = shared::<f32>(16380); a[0] = 0.0; b[0] = 0.0;",
        );
        assert_eq!(at_limit.workgroup_block().bytes, 65536);
        assert!(e("const A: u32 = 1 / 0;").contains("divides by zero"));
    }
}
