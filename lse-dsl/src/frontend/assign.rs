//! Assignments and stores: `x = e`, `buf[i] = e`, `arr[i] = e`, and the compound forms
//! (`x += e` becomes `x = x + e`, `buf[i] += e` becomes `buf[i] = buf[i] + e`).

use syn::spanned::Spanned;

use super::builtins::as_collective;
use super::cx::{Binding, Cx, Site};
use super::syntax::{err, expect, strip, text};
use crate::ir::{Access, Block, Expr, ExprKind, Stmt, Ty};

impl Cx {
    pub(super) fn assign(
        &mut self,
        left: &syn::Expr,
        right: &syn::Expr,
        op: Option<crate::ir::BinOp>,
        whole: &syn::Expr,
        out: &mut Block,
    ) -> syn::Result<()> {
        let site = Site {
            span: whole.span(),
            text: text(whole),
        };
        match strip(left) {
            syn::Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
                let name = p.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
                let var = match self.lookup(&name) {
                    Some(Binding::Local { var, mutable: true }) => *var,
                    Some(Binding::Local { mutable: false, .. }) => {
                        return err(
                            left.span(),
                            format!("cannot assign to `{name}`: it is not mutable; declare it with `let mut {name}`"),
                        )
                    }
                    Some(Binding::Param(id)) => {
                        let msg = if self.buffer_access(*id).is_some() {
                            format!("cannot assign to buffer `{name}` as a whole; assign elements: `{name}[i] = ...`")
                        } else {
                            format!("cannot assign to parameter `{name}`; copy it into a `let mut` first")
                        };
                        return err(left.span(), msg);
                    }
                    Some(Binding::Shared(_)) => {
                        return err(left.span(), format!("cannot assign to shared array `{name}` as a whole; assign elements: `{name}[i] = ...`"))
                    }
                    Some(Binding::Const(_)) => {
                        return err(left.span(), format!("cannot assign to constant `{name}`"))
                    }
                    Some(Binding::Value(_)) => {
                        return err(left.span(), format!("cannot assign to `{name}`: a LOOM `fn`'s parameters are values"))
                    }
                    Some(Binding::Tile(_)) => {
                        return err(left.span(), format!("cannot assign to tile `{name}`; change it with the `tile_*` statements"))
                    }
                    None => return err(left.span(), format!("unknown variable `{name}`")),
                };
                let ty = self.locals[var as usize].ty;
                if op.is_none() {
                    if let Some((cop, call)) = as_collective(right) {
                        if cop != crate::ir::CollectiveOp::Argmax {
                            let (args, tys) = self.collective_args(cop, call, Some(ty))?;
                            check_assign(ty, tys[0], right.span(), &name)?;
                            self.flush_pending(out);
                            self.emit(out, Stmt::Collective { op: cop, dst: vec![var], args }, site);
                            return Ok(());
                        }
                    }
                }
                let rhs = self.expr(right, Some(ty))?;
                let value = match op {
                    Some(op) => {
                        let cur = Expr::new(ExprKind::Var(var), ty);
                        self.make_binary(op, cur, rhs, op_span(whole))?
                    }
                    None => {
                        check_assign(ty, rhs.ty, right.span(), &name)?;
                        rhs
                    }
                };
                self.flush_pending(out);
                self.emit(out, Stmt::Assign { var, value }, site);
                Ok(())
            }
            syn::Expr::Index(ix) => {
                let (binding, name, index) = self.indexed(ix)?;
                let (elem, cur) = match binding {
                    Binding::Param(buf) => {
                        let (elem, access) = self.buffer_access(buf).expect("indexed() returns buffers");
                        if access == Access::Read {
                            return err(
                                ix.expr.span(),
                                format!(
                                    "cannot store to `{name}`: it is a read-only buffer (`&[{t}]`); declare it `&mut [{t}]` to write it",
                                    t = elem.rust_name()
                                ),
                            );
                        }
                        (elem, ExprKind::Load { buf, index: Box::new(index.clone()) })
                    }
                    Binding::Shared(array) => {
                        (self.shared[array as usize].elem, ExprKind::SharedLoad { array, index: Box::new(index.clone()) })
                    }
                    _ => unreachable!("indexed() only returns buffers and shared arrays"),
                };
                let rhs = self.expr(right, Some(elem))?;
                let value = match op {
                    Some(op) => self.make_binary(op, Expr::new(cur.clone(), elem), rhs, op_span(whole))?,
                    None => {
                        expect(&rhs, elem, right.span(), &format!("a value stored to `{name}`"))?;
                        rhs
                    }
                };
                self.flush_pending(out);
                let stmt = match cur {
                    ExprKind::Load { buf, .. } => Stmt::Store { buf, index, value },
                    ExprKind::SharedLoad { array, .. } => Stmt::SharedStore { array, index, value },
                    _ => unreachable!("built above"),
                };
                self.emit(out, stmt, site);
                Ok(())
            }
            _ => err(
                left.span(),
                "can only assign to a `let mut` variable, a buffer element or a shared array element",
            ),
        }
    }
}

fn check_assign(var_ty: Ty, got: Ty, span: proc_macro2::Span, name: &str) -> syn::Result<()> {
    if var_ty == got {
        return Ok(());
    }
    err(
        span,
        format!(
            "type mismatch: `{name}` is {} but the value is {}",
            var_ty.rust_name(),
            got.rust_name()
        ),
    )
}

/// The operator of a compound assignment (`+=`), where its type errors point.
fn op_span(whole: &syn::Expr) -> proc_macro2::Span {
    match whole {
        syn::Expr::Binary(b) => b.op.span(),
        _ => whole.span(),
    }
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;
    use crate::ir::*;

    #[test]
    fn assignments_need_let_mut_and_compound_ops_desugar() {
        let k = k("let mut a = 0.0; a += s; out[local_id()] *= a;");
        let Stmt::Assign { var: 0, value } = &k.body[1] else {
            panic!("{:?}", k.body[1])
        };
        assert!(
            matches!(&value.kind, ExprKind::Binary(BinOp::Add, l, _) if l.kind == ExprKind::Var(0))
        );
        let Stmt::Store {
            buf: 1,
            index,
            value,
        } = &k.body[2]
        else {
            panic!()
        };
        let ExprKind::Binary(BinOp::Mul, l, _) = &value.kind else {
            panic!()
        };
        assert_eq!(
            l.kind,
            ExprKind::Load {
                buf: 1,
                index: Box::new(index.clone())
            }
        );
        let msg = e("let a = 0; a = 1;");
        assert!(
            msg.contains("cannot assign to `a`: it is not mutable; declare it with `let mut a`"),
            "{msg}"
        );
        assert!(e("n = 1;").contains("cannot assign to parameter `n`"));
        assert!(e("out = 1.0;").contains("cannot assign to buffer `out` as a whole"));
        assert!(e("const C: u32 = 1; C = 2;").contains("cannot assign to constant `C`"));
    }
}
