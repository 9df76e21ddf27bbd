//! Expressions and their types.
//!
//! Typing is bidirectional: every lowering takes the type the context wants (`want`), which
//! only unsuffixed integer literals use (float literals are always `f32`; an integer literal
//! takes `want` when it is an integer type, else `i32`). Binary operators lower the operand
//! that has a type of its own first and hand its type to the other side, so `0 < n` and
//! `n > 0` type the same way. There are no implicit conversions: operands of one operator
//! have one type, and every mismatch is an error naming both types.

use proc_macro2::Span;
use syn::spanned::Spanned;

use super::cx::{Binding, Cx};
use super::fold::fold;
use super::literal::{literal, path_constant};
use super::syntax::{
    arith_op, block_expr, compound_op, err, expect, needs_context, storage_value_msg, strip, text,
    unsupported_kind,
};
use super::types::{named_ty, ty_list, type_text, HALF_OPS, NUMERIC, WITH_HALVES};
use crate::ir::{Access, BinOp, Expr, ExprKind, Param, Ty, UnOp};

impl Cx {
    /// Lowers a value expression, with `want` the type the context expects (if any).
    pub(super) fn expr(&mut self, e: &syn::Expr, want: Option<Ty>) -> syn::Result<Expr> {
        use syn::Expr as E;
        match e {
            E::Paren(p) => self.expr(&p.expr, want),
            E::Group(g) => self.expr(&g.expr, want),
            E::Lit(l) => literal(&l.lit, want, false),
            E::Path(p) => self.path_value(p),
            E::Unary(u) => self.unary(u, want),
            E::Binary(b) => self.binary(b, want),
            E::Cast(c) => self.cast(c),
            E::Index(ix) => self.load(ix),
            E::Call(c) => self.call(c, want),
            E::MethodCall(m) => self.method(m, want),
            E::If(i) => self.select(i, want),
            E::Block(b) if b.label.is_none() => match block_expr(&b.block) {
                Some(inner) => self.expr(inner, want),
                None => err(
                    e.span(),
                    "a block used as a value must hold exactly one expression",
                ),
            },
            E::Assign(_) => err(e.span(), "an assignment is a statement, not a value"),
            E::Break(_) | E::Continue(_) => err(
                e.span(),
                "`break` and `continue` are statements, not values",
            ),
            E::Macro(m) => err(m.span(), "LOOM kernels do not support macros"),
            _ => match unsupported_kind(e) {
                Some(what) => err(e.span(), format!("LOOM kernels do not support {what}")),
                None => err(e.span(), "this expression is not supported in LOOM kernels"),
            },
        }
    }

    /// Lowers `e` and requires type `ty`; `what` names the place for the message.
    pub(super) fn expr_of(&mut self, e: &syn::Expr, ty: Ty, what: &str) -> syn::Result<Expr> {
        let v = self.expr(e, Some(ty))?;
        expect(&v, ty, e.span(), what)?;
        Ok(v)
    }

    /// Lowers two operands that must share a type: the one with a type of its own first.
    pub(super) fn operands(
        &mut self,
        a: &syn::Expr,
        b: &syn::Expr,
        want: Option<Ty>,
    ) -> syn::Result<(Expr, Expr)> {
        if needs_context(a) && !needs_context(b) {
            let r = self.expr(b, want)?;
            let l = self.expr(a, Some(r.ty))?;
            Ok((l, r))
        } else {
            let l = self.expr(a, want)?;
            let r = self.expr(b, Some(l.ty))?;
            Ok((l, r))
        }
    }

    fn path_value(&mut self, p: &syn::ExprPath) -> syn::Result<Expr> {
        if p.qself.is_some() {
            return err(
                p.span(),
                "qualified paths are not supported in LOOM kernels",
            );
        }
        let segs: Vec<String> = p
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        if let [ty, name] = segs.as_slice() {
            return path_constant(ty, name).ok_or(()).or_else(|_| {
                err(
                    p.span(),
                    format!(
                        "unknown constant `{ty}::{name}`; LOOM knows f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN, u32::MAX, i32::MAX and i32::MIN"
                    ),
                )
            });
        }
        let [name] = segs.as_slice() else {
            return err(p.span(), format!("unknown name `{}`", text(p)));
        };
        match self.lookup(name) {
            Some(Binding::Local { var, .. }) => {
                let var = *var;
                Ok(Expr::new(ExprKind::Var(var), self.locals[var as usize].ty))
            }
            Some(Binding::Const(c) | Binding::Value(c)) => Ok(c.clone()),
            Some(Binding::Param(id)) => {
                let id = *id;
                match &self.params[id as usize] {
                    Param::Scalar { ty, .. } => Ok(Expr::new(ExprKind::Param(id), *ty)),
                    Param::Buffer { .. } => err(
                        p.span(),
                        format!("buffer `{name}` cannot be used as a value; index it: `{name}[i]`"),
                    ),
                }
            }
            Some(Binding::Shared(_)) => err(
                p.span(),
                format!("shared array `{name}` cannot be used as a value; index it: `{name}[i]`"),
            ),
            Some(Binding::Tile(_)) => err(
                p.span(),
                format!("tile `{name}` is not a value: it can only be named in the `tile_*` statements, never copied, returned or indexed"),
            ),
            None => err(p.span(), format!("unknown variable `{name}`")),
        }
    }

    fn unary(&mut self, u: &syn::ExprUnary, want: Option<Ty>) -> syn::Result<Expr> {
        let span = u.span();
        match u.op {
            syn::UnOp::Neg(_) => {
                // `-2147483648` is a valid i32 although `2147483648` is not.
                if let syn::Expr::Lit(syn::ExprLit { lit, .. }) = strip(&u.expr) {
                    return literal(lit, want, true);
                }
                let x = self.expr(&u.expr, want)?;
                match x.ty {
                    Ty::F32 | Ty::I32 | Ty::I16 | Ty::I8 | Ty::U8 | Ty::Bf16 | Ty::F16 => {}
                    Ty::U32 => {
                        return err(
                            span,
                            "cannot negate a u32 value; LOOM negates f32, bf16, f16 and i32",
                        )
                    }
                    Ty::Bool => return err(span, "cannot negate a bool; use `!`"),
                }
                let ty = x.ty;
                Ok(fold(
                    Expr::new(ExprKind::Unary(UnOp::Neg, Box::new(x)), ty),
                    self.workgroup,
                ))
            }
            syn::UnOp::Not(_) => {
                let x = self.expr(&u.expr, want)?;
                match x.ty {
                    Ty::Bool | Ty::I32 | Ty::U32 => {}
                    Ty::F32 => return err(span, "`!` is not defined for f32"),
                    t => return err(span, storage_value_msg(t, "`!`")),
                }
                let ty = x.ty;
                Ok(fold(
                    Expr::new(ExprKind::Unary(UnOp::Not, Box::new(x)), ty),
                    self.workgroup,
                ))
            }
            syn::UnOp::Deref(_) => {
                err(span, "references and `*` are not supported in LOOM kernels")
            }
            _ => err(span, "this operator is not supported in LOOM kernels"),
        }
    }

    fn binary(&mut self, b: &syn::ExprBinary, want: Option<Ty>) -> syn::Result<Expr> {
        use syn::BinOp as S;
        let span = b.span();
        if compound_op(&b.op).is_some() {
            return err(span, "a compound assignment is a statement, not a value");
        }
        if let Some(op) = arith_op(&b.op) {
            let (l, r) = self.operands(&b.left, &b.right, want)?;
            return self.make_binary(op, l, r, b.op.span());
        }
        let op = match b.op {
            S::And(_) => BinOp::And,
            S::Or(_) => BinOp::Or,
            S::Lt(_) => BinOp::Lt,
            S::Le(_) => BinOp::Le,
            S::Gt(_) => BinOp::Gt,
            S::Ge(_) => BinOp::Ge,
            S::Eq(_) => BinOp::Eq,
            S::Ne(_) => BinOp::Ne,
            _ => return err(span, "this operator is not supported in LOOM kernels"),
        };
        if matches!(op, BinOp::And | BinOp::Or) {
            let l = self.expr_of(
                &b.left,
                Ty::Bool,
                &format!("the left operand of `{}`", op.symbol()),
            )?;
            let what = format!("the right operand of `{}`", op.symbol());
            let r = self.without_hoist(
                "the right operand of `&&`/`||` (it is evaluated lazily)",
                |cx| cx.expr_of(&b.right, Ty::Bool, &what),
            )?;
            return self.make_binary(op, l, r, b.op.span());
        }
        let (l, r) = self.operands(&b.left, &b.right, None)?;
        self.make_binary(op, l, r, b.op.span())
    }

    /// Type-checks `l op r` and builds it (folded when both sides are constants).
    pub(super) fn make_binary(&self, op: BinOp, l: Expr, r: Expr, span: Span) -> syn::Result<Expr> {
        let sym = op.symbol();
        if l.ty != r.ty {
            return err(
                span,
                format!(
                    "type mismatch: `{sym}` has operands of type {} and {}; LOOM has no implicit conversions, convert one side with `as`",
                    l.ty.rust_name(),
                    r.ty.rust_name()
                ),
            );
        }
        let ty = l.ty;
        if matches!(ty, Ty::Bf16 | Ty::F16) && !HALF_OPS.contains(&op) {
            return err(
                span,
                format!(
                    "`{sym}` is not defined for {t}; {t} values take + - * / and comparisons",
                    t = ty.rust_name()
                ),
            );
        }
        let allowed: &[Ty] = match op {
            BinOp::And | BinOp::Or => &[Ty::Bool],
            BinOp::Eq | BinOp::Ne => &[Ty::F32, Ty::I32, Ty::U32, Ty::Bool, Ty::Bf16, Ty::F16],
            BinOp::Rem => &NUMERIC,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => &WITH_HALVES,
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => &WITH_HALVES,
            _ => &[Ty::I32, Ty::U32],
        };
        if !allowed.contains(&ty) {
            let hint = match (op, ty) {
                (BinOp::BitAnd, Ty::Bool) => "; use `&&`",
                (BinOp::BitOr, Ty::Bool) => "; use `||`",
                _ => "",
            };
            return err(
                span,
                format!(
                    "`{sym}` is not defined for {}; it takes {}{hint}",
                    ty.rust_name(),
                    ty_list(allowed)
                ),
            );
        }
        let out_ty = if op.is_comparison() { Ty::Bool } else { ty };
        Ok(fold(
            Expr::new(ExprKind::Binary(op, Box::new(l), Box::new(r)), out_ty),
            self.workgroup,
        ))
    }

    fn cast(&mut self, c: &syn::ExprCast) -> syn::Result<Expr> {
        let to = named_ty(&c.ty)
            .filter(|t| NUMERIC.contains(t))
            .ok_or_else(|| {
                syn::Error::new(
                    c.ty.span(),
                    format!(
                        "cannot cast to `{}`: `as` converts to f32, i32 or u32",
                        type_text(&c.ty)
                    ),
                )
            })?;
        let x = self.expr(&c.expr, None)?;
        match x.ty {
            Ty::F32 | Ty::I32 | Ty::U32 => {}
            Ty::Bool if to != Ty::F32 => {}
            Ty::Bool => {
                return err(
                    c.span(),
                    "cannot cast bool to f32; cast it to an integer first",
                )
            }
            t => {
                let conv = if t == Ty::Bf16 {
                    "bf16_to_f32"
                } else {
                    "f16_to_f32"
                };
                return err(
                    c.span(),
                    format!("cannot cast {} with `as`; use `{conv}(x)`", t.rust_name()),
                );
            }
        }
        if x.ty == to {
            return Ok(x);
        }
        Ok(fold(
            Expr::new(ExprKind::Cast(Box::new(x)), to),
            self.workgroup,
        ))
    }

    /// The buffer or shared array named by an indexed expression, and the index (u32).
    pub(super) fn indexed(&mut self, ix: &syn::ExprIndex) -> syn::Result<(Binding, String, Expr)> {
        let base = strip(&ix.expr);
        let name = match base {
            syn::Expr::Path(p) if p.qself.is_none() => p.path.get_ident().map(|i| i.to_string()),
            _ => None,
        };
        let Some(name) = name else {
            return err(base.span(), "only buffers and shared arrays can be indexed");
        };
        let binding = match self.lookup(&name) {
            Some(b @ Binding::Shared(_)) => b.clone(),
            Some(b @ Binding::Param(id))
                if matches!(self.params[*id as usize], Param::Buffer { .. }) =>
            {
                b.clone()
            }
            Some(Binding::Param(id)) => {
                let ty = match &self.params[*id as usize] {
                    Param::Scalar { ty, .. } => ty.rust_name(),
                    Param::Buffer { .. } => unreachable!("matched above"),
                };
                return err(
                    base.span(),
                    format!("cannot index `{name}`: it is a {ty} scalar, not a buffer"),
                );
            }
            Some(
                Binding::Local { .. } | Binding::Const(_) | Binding::Value(_) | Binding::Tile(_),
            ) => {
                return err(
                    base.span(),
                    format!("cannot index `{name}`: only buffers and shared arrays can be indexed"),
                );
            }
            None => return err(base.span(), format!("unknown variable `{name}`")),
        };
        let index = self.expr(&ix.index, Some(Ty::U32))?;
        if index.ty != Ty::U32 {
            return err(
                ix.index.span(),
                format!(
                    "an index must be u32, found {}; convert it with `as u32`",
                    index.ty.rust_name()
                ),
            );
        }
        Ok((binding, name, index))
    }

    fn load(&mut self, ix: &syn::ExprIndex) -> syn::Result<Expr> {
        let (binding, _, index) = self.indexed(ix)?;
        let index = Box::new(index);
        Ok(match binding {
            Binding::Param(buf) => {
                let Param::Buffer { elem, .. } = &self.params[buf as usize] else {
                    unreachable!("indexed() only returns buffers")
                };
                Expr::new(ExprKind::Load { buf, index }, *elem)
            }
            Binding::Shared(array) => Expr::new(
                ExprKind::SharedLoad { array, index },
                self.shared[array as usize].elem,
            ),
            _ => unreachable!("indexed() only returns buffers and shared arrays"),
        })
    }

    /// `if c { a } else { b }` as a value.
    fn select(&mut self, i: &syn::ExprIf, want: Option<Ty>) -> syn::Result<Expr> {
        let Some((_, els)) = &i.else_branch else {
            return err(i.span(), "an `if` used as a value needs an `else` branch");
        };
        let Some(then) = block_expr(&i.then_branch) else {
            return err(
                i.then_branch.span(),
                "each branch of an `if` used as a value must be a single expression",
            );
        };
        let c = self.expr_of(&i.cond, Ty::Bool, "an `if` condition")?;
        let (a, b) = self.without_hoist(
            "a branch of an `if` expression (it is evaluated lazily)",
            |cx| cx.operands(then, els, want),
        )?;
        if a.ty != b.ty {
            return err(
                i.span(),
                format!(
                    "type mismatch: the branches of this `if` have types {} and {}",
                    a.ty.rust_name(),
                    b.ty.rust_name()
                ),
            );
        }
        let ty = a.ty;
        Ok(Expr::new(
            ExprKind::Select(Box::new(c), Box::new(a), Box::new(b)),
            ty,
        ))
    }

    /// The access of buffer parameter `id`.
    pub(super) fn buffer_access(&self, id: u32) -> Option<(Ty, Access)> {
        match &self.params[id as usize] {
            Param::Buffer { elem, access, .. } => Some((*elem, *access)),
            Param::Scalar { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;
    use crate::ir::*;

    #[test]
    fn type_mismatches_name_both_types() {
        let msg = e("let a = s + n;");
        assert!(
            msg.contains("type mismatch: `+` has operands of type f32 and u32"),
            "{msg}"
        );
        let msg = e("let a: f32 = 1;");
        assert!(
            msg.contains("integer literal `1` where f32 is expected; write `1.0`"),
            "{msg}"
        );
        let msg = e("let a: u32 = s;");
        assert!(msg.contains("annotated u32 but the value is f32"), "{msg}");
        let msg = e("let mut a = 0u32; a = s;");
        assert!(msg.contains("`a` is u32 but the value is f32"), "{msg}");
        let msg = e("if n { }");
        assert!(
            msg.contains("an `if` condition must be bool, found u32"),
            "{msg}"
        );
        let msg = e("out[0] = n;");
        assert!(
            msg.contains("a value stored to `out` must be f32, found u32"),
            "{msg}"
        );
        let msg = e("let a = if s > 0.0 { s } else { n };");
        assert!(
            msg.contains("branches of this `if` have types f32 and u32"),
            "{msg}"
        );
        let msg = e("let a = max(s, n);");
        assert!(
            msg.contains("`max` has arguments of type f32 and u32"),
            "{msg}"
        );
        let msg = e("let a = n.exp();");
        assert!(
            msg.contains("the argument of `.exp()` must be f32, found u32"),
            "{msg}"
        );
    }

    #[test]
    fn operators_check_their_operand_types() {
        assert!(e("let a = s << 1.0;").contains("`<<` is not defined for f32"));
        assert!(e("let a = -n;").contains("cannot negate a u32"));
        assert!(e("let a = (n > 0) & (n < 4);").contains("use `&&`"));
        assert!(e("let a = n && true;").contains("left operand of `&&` must be bool, found u32"));
        assert!(e("let a = true as f32;").contains("cannot cast bool to f32"));
        assert!(e("let a = n as bool;").contains("cannot cast to `bool`"));
        let k = k("let a = (n > 0) as u32; let b = s as i32; let c = n as u32;");
        assert!(matches!(let_value(&k, "a").kind, ExprKind::Cast(_)));
        assert_eq!(
            let_value(&k, "c").kind,
            ExprKind::Param(5),
            "a cast to the same type disappears"
        );
    }

    #[test]
    fn sixteen_bit_values_take_arithmetic_and_comparisons_only() {
        let k = k(
            "let i = local_id(); let v = h[i]; hout[i] = h[i]; let f = bf16_to_f32(v);
                   hout[i] = f32_to_bf16(f * 2.0); let s = -(v * h[0] - v / v);
                   let lt = s < v; hout[i] = s;",
        );
        assert_eq!(local_ty(&k, "v"), Ty::Bf16);
        assert_eq!(local_ty(&k, "f"), Ty::F32);
        assert_eq!(local_ty(&k, "s"), Ty::Bf16);
        assert_eq!(local_ty(&k, "lt"), Ty::Bool);
        let msg = e("let a = h[0] % h[1];");
        assert!(msg.contains("`%` is not defined for bf16"), "{msg}");
        let msg = e("let a = h[0] + 1.0;");
        assert!(msg.contains("type mismatch"), "{msg}");
        let msg = e("let a = exp(h[0]);");
        assert!(msg.contains("bf16_to_f32"), "{msg}");
        assert!(e("let a = h[0] as f32;").contains("use `bf16_to_f32(x)`"));
        assert!(e("hout[0] = 1.0;").contains("float literal where bf16 is expected"));
        assert!(e("let a = f16_to_f32(h[0]);")
            .contains("the argument of `f16_to_f32` must be f16, found bf16"));
    }

    #[test]
    fn names_resolve_with_shadowing_and_fresh_ids() {
        let k = k("let a = 1u32; let a = a + n; { let a = 2.0; out[0] = a; } out[1] = a as f32;");
        assert_eq!(k.locals.len(), 3);
        assert_eq!(k.locals.iter().filter(|l| l.name == "a").count(), 3);
        let Stmt::Store { value, .. } = &k.body[4] else {
            panic!("{:?}", k.body[4])
        };
        let ExprKind::Cast(inner) = &value.kind else {
            panic!()
        };
        assert_eq!(inner.kind, ExprKind::Var(1));
        assert!(e("let a = b;").contains("unknown variable `b`"));
        assert!(e("let a = f32::EPSILON;").contains("unknown constant `f32::EPSILON`"));
    }

    #[test]
    fn buffers_are_indexed_by_u32_and_read_only_ones_cannot_be_stored() {
        let msg = e("x[0] = 1.0;");
        assert!(
            msg.contains(
                "cannot store to `x`: it is a read-only buffer (`&[f32]`); declare it `&mut [f32]`"
            ),
            "{msg}"
        );
        assert!(e("let a = x[m];")
            .contains("an index must be u32, found i32; convert it with `as u32`"));
        assert!(e("let a = n[0];").contains("cannot index `n`: it is a u32 scalar, not a buffer"));
        assert!(e("let b = 1u32; let a = b[0];")
            .contains("cannot index `b`: only buffers and shared arrays"));
        assert!(e("let a = x;").contains("buffer `x` cannot be used as a value"));
        let k = k("let a = x[3];");
        assert_eq!(
            let_value(&k, "a").kind,
            ExprKind::Load {
                buf: 0,
                index: Box::new(Expr::const_u32(3))
            }
        );
    }
}
