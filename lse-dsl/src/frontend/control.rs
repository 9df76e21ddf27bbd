//! Structured control flow: `if`/`else if`/`else`, `for` over `a..b` or
//! `(a..b).step_by(s)`, and `while`.

use syn::spanned::Spanned;

use super::cx::{Binding, Cx, Site};
use super::syntax::{err, strip, text};
use crate::ir::{Block, Expr, ExprKind, Stmt, Ty};

use super::bindings::pat_ident;

impl Cx {
    pub(super) fn if_stmt(&mut self, i: &syn::ExprIf, out: &mut Block) -> syn::Result<()> {
        if let syn::Expr::Let(l) = strip(&i.cond) {
            return err(l.span(), "`if let` is not supported in LOOM kernels");
        }
        let cond = self.expr_of(&i.cond, Ty::Bool, "an `if` condition")?;
        self.flush_pending(out);
        let idx = out.len();
        let then_body = self.nested(&i.then_branch, idx, 0)?;
        let else_body = match &i.else_branch {
            None => Block::new(),
            Some((_, e)) => match strip(e) {
                syn::Expr::Block(b) => self.nested(&b.block, idx, 1)?,
                syn::Expr::If(inner) => self.nested_with(idx, 1, |cx, o| {
                    cx.push_scope();
                    let r = cx.if_stmt(inner, o);
                    cx.pop_scope();
                    r
                })?,
                other => return err(other.span(), "expected `else { ... }` or `else if`"),
            },
        };
        // A condition that folded to a constant (`if BM < 64`, `if BYTES == 34` in a constant
        // instance) keeps only its live branch: both were lowered (and so type-checked)
        // above, but the dead one is dropped before the checks that follow. The branches keep
        // their places here, so the source sites of the live one stay where they were; after
        // the checks, `splice_constant_ifs` puts its statements in the `if`'s place.
        let (then_body, else_body) = match constant_condition(&cond) {
            Some(false) => (Block::new(), else_body),
            Some(true) => (then_body, Block::new()),
            None => (then_body, else_body),
        };
        let site = Site {
            span: i.cond.span(),
            text: text(&i.cond),
        };
        self.emit(
            out,
            Stmt::If {
                cond,
                then_body,
                else_body,
            },
            site,
        );
        Ok(())
    }

    pub(super) fn for_stmt(&mut self, f: &syn::ExprForLoop, out: &mut Block) -> syn::Result<()> {
        if let Some(l) = &f.label {
            return err(l.span(), "loop labels are not supported in LOOM kernels");
        }
        let name = match &*f.pat {
            syn::Pat::Wild(_) => "_i".to_string(),
            p => {
                let (n, m) = pat_ident(p)?;
                if m {
                    return err(
                        p.span(),
                        "a `for` variable cannot be `mut`; copy it into a `let mut`",
                    );
                }
                n
            }
        };
        let shape = "`for` loops iterate over `a..b` or `(a..b).step_by(s)`";
        let (range, step_e) = match strip(&f.expr) {
            syn::Expr::Range(r) => (r, None),
            syn::Expr::MethodCall(m) if m.method == "step_by" => match strip(&m.receiver) {
                syn::Expr::Range(r) if m.args.len() == 1 && m.turbofish.is_none() => {
                    (r, Some(&m.args[0]))
                }
                _ => return err(f.expr.span(), shape),
            },
            other => return err(other.span(), shape),
        };
        if let syn::RangeLimits::Closed(_) = range.limits {
            return err(
                range.span(),
                "inclusive ranges (`a..=b`) are not supported; write `a..b + 1`",
            );
        }
        let (Some(start_e), Some(end_e)) = (&range.start, &range.end) else {
            return err(range.span(), "a `for` range needs both bounds: `a..b`");
        };
        let (start, end) = self.operands(start_e, end_e, None)?;
        if start.ty != end.ty {
            return err(
                range.span(),
                format!(
                    "type mismatch: the range bounds have types {} and {}",
                    start.ty.rust_name(),
                    end.ty.rust_name()
                ),
            );
        }
        let ty = start.ty;
        if !matches!(ty, Ty::I32 | Ty::U32) {
            return err(
                range.span(),
                format!("`for` bounds must be i32 or u32, found {}", ty.rust_name()),
            );
        }
        let step = match step_e {
            None => Expr::new(ExprKind::Const(1), ty),
            Some(s) => {
                let step = self.expr_of(s, ty, "the step of `step_by`")?;
                if let ExprKind::Const(bits) = step.kind {
                    if bits == 0 || (ty == Ty::I32 && (bits as i32) < 0) {
                        return err(s.span(), "the step of `step_by` must be positive");
                    }
                }
                step
            }
        };
        self.flush_pending(out);
        let idx = out.len();
        self.push_scope();
        let var = self.new_local(&name, ty);
        self.bind(
            &name,
            Binding::Local {
                var,
                mutable: false,
            },
        );
        self.loop_depth += 1;
        let body = self.nested(&f.body, idx, 0);
        self.loop_depth -= 1;
        self.pop_scope();
        let body = body?;
        let site = Site {
            span: f.expr.span(),
            text: text(&f.expr),
        };
        self.emit(
            out,
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            },
            site,
        );
        Ok(())
    }

    pub(super) fn while_stmt(&mut self, w: &syn::ExprWhile, out: &mut Block) -> syn::Result<()> {
        if let Some(l) = &w.label {
            return err(l.span(), "loop labels are not supported in LOOM kernels");
        }
        if let syn::Expr::Let(l) = strip(&w.cond) {
            return err(l.span(), "`while let` is not supported in LOOM kernels");
        }
        let cond = self.without_hoist(
            "a `while` condition (it is evaluated before every iteration)",
            |cx| cx.expr_of(&w.cond, Ty::Bool, "a `while` condition"),
        )?;
        let idx = out.len();
        self.loop_depth += 1;
        let body = self.nested(&w.body, idx, 0);
        self.loop_depth -= 1;
        let body = body?;
        let site = Site {
            span: w.cond.span(),
            text: text(&w.cond),
        };
        self.emit(out, Stmt::While { cond, body }, site);
        Ok(())
    }
}

/// The value of a condition that folded to a constant, `None` for one decided at run time.
fn constant_condition(cond: &Expr) -> Option<bool> {
    match (cond.ty, &cond.kind) {
        (Ty::Bool, ExprKind::Const(c)) => Some(*c != 0),
        _ => None,
    }
}

/// `block` with every `if` whose condition is a constant replaced by the statements of its
/// live branch, at any depth: the IR of a kernel written with that branch alone, so codegen
/// sees no trace of the `if` (a constant `if` around a loop had changed how the host lowering
/// laid out the work-item loops: 43% more machine code for `gemm.xwt_q8_0_q8_0_bm64`). Run
/// after the checks, whose source sites follow the statements' places.
pub(super) fn splice_constant_ifs(block: Block) -> Block {
    let mut out = Block::with_capacity(block.len());
    for mut stmt in block {
        match &mut stmt {
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                if let Some(taken) = constant_condition(cond) {
                    let live = if taken { then_body } else { else_body };
                    out.extend(splice_constant_ifs(std::mem::take(live)));
                    continue;
                }
                *then_body = splice_constant_ifs(std::mem::take(then_body));
                *else_body = splice_constant_ifs(std::mem::take(else_body));
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => {
                *body = splice_constant_ifs(std::mem::take(body));
            }
            _ => {}
        }
        out.push(stmt);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;
    use crate::ir::*;

    #[test]
    fn control_flow_lowers_to_structured_ir() {
        let k = k("let mut acc = 0.0;
                   for i in 0..n { if i == 3 { continue; } else if i > 9 { break; } else { acc += x[i]; } }
                   for j in (1..m).step_by(2) { acc -= 1.0; }
                   let mut t = 0u32; while t < 4 { t += 1; }");
        let Stmt::For {
            start, step, body, ..
        } = &k.body[1]
        else {
            panic!()
        };
        assert_eq!(*start, Expr::const_u32(0));
        assert_eq!(*step, Expr::const_u32(1));
        let Stmt::If {
            then_body,
            else_body,
            ..
        } = &body[0]
        else {
            panic!()
        };
        assert_eq!(then_body, &vec![Stmt::Continue]);
        assert!(
            matches!(&else_body[0], Stmt::If { then_body, .. } if then_body == &vec![Stmt::Break])
        );
        let Stmt::For { var, step, .. } = &k.body[2] else {
            panic!()
        };
        assert_eq!(k.locals[*var as usize].ty, Ty::I32);
        assert_eq!(*step, Expr::const_i32(2));
        assert!(matches!(&k.body[4], Stmt::While { .. }));
        assert!(e("for i in 0..=n {}").contains("inclusive ranges"));
        assert!(e("for i in 0.0..s {}").contains("`for` bounds must be i32 or u32, found f32"));
        assert!(e("for i in (0..n).step_by(0) {}").contains("must be positive"));
        assert!(e("for i in 0..n { i = 2; }").contains("cannot assign to `i`"));
        assert!(e("break;").contains("`break` outside of a loop"));
        assert!(e("for i in n..m {}").contains("the range bounds have types u32 and i32"));
    }
}
