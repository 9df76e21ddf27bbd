//! Statements: the body and its blocks (scopes and statement paths), expression statements,
//! `break`, `continue` and `barrier()`; `let`/`const` are in `bindings`, assignments in
//! `assign`, `if`/`for`/`while` in `control`.

use syn::spanned::Spanned;

use super::builtins::call_name;
use super::cx::{Cx, Site};
use super::syntax::{compound_op, err, strip, unsupported_kind};
use crate::ir::{Block, Stmt};

impl Cx {
    /// Lowers the kernel body; it may call `functions` (the crate's `#[loom::function]`s) and
    /// the functions it declares.
    pub(super) fn lower_body(
        &mut self,
        body: &syn::Block,
        functions: &[syn::ItemFn],
    ) -> syn::Result<Block> {
        self.fns = super::fns::collect(functions, &body.stmts)?;
        let mut out = Block::new();
        self.stmts(&body.stmts, &mut out)?;
        self.check_all_called()?;
        Ok(out)
    }

    pub(super) fn stmts(&mut self, stmts: &[syn::Stmt], out: &mut Block) -> syn::Result<()> {
        self.push_scope();
        let r = stmts.iter().try_for_each(|s| self.stmt(s, out));
        self.pop_scope();
        r
    }

    /// Lowers a nested block as branch `branch` of the statement at index `idx` of the
    /// current block.
    pub(super) fn nested(&mut self, b: &syn::Block, idx: usize, branch: u32) -> syn::Result<Block> {
        self.nested_with(idx, branch, |cx, out| cx.stmts(&b.stmts, out))
    }

    pub(super) fn nested_with(
        &mut self,
        idx: usize,
        branch: u32,
        f: impl FnOnce(&mut Cx, &mut Block) -> syn::Result<()>,
    ) -> syn::Result<Block> {
        let depth = self.path.len();
        self.path.extend([idx as u32, branch]);
        let was_top = std::mem::replace(&mut self.top_level, false);
        let mut out = Block::new();
        let r = f(self, &mut out);
        self.top_level = was_top;
        self.path.truncate(depth);
        r.map(|_| out)
    }

    fn stmt(&mut self, s: &syn::Stmt, out: &mut Block) -> syn::Result<()> {
        match s {
            syn::Stmt::Local(l) => self.let_stmt(l, out),
            syn::Stmt::Item(syn::Item::Const(c)) => self.const_item(c),
            // Collected by `lower_body`, inlined at its calls (`fns`).
            syn::Stmt::Item(syn::Item::Fn(_)) if self.top_level => Ok(()),
            syn::Stmt::Item(syn::Item::Fn(f)) => err(
                f.sig.ident.span(),
                "a LOOM `fn` is declared at the top level of the kernel body",
            ),
            syn::Stmt::Item(item) => err(
                item.span(),
                "items (struct, use, static, ...) are not allowed inside a kernel; only `const` and `fn`",
            ),
            syn::Stmt::Macro(m) => err(m.span(), "LOOM kernels do not support macros"),
            syn::Stmt::Expr(e, _) => self.expr_stmt(e, out),
        }
    }

    fn expr_stmt(&mut self, e: &syn::Expr, out: &mut Block) -> syn::Result<()> {
        use syn::Expr as E;
        match e {
            E::Assign(a) => self.assign(&a.left, &a.right, None, e, out),
            E::Binary(b) if compound_op(&b.op).is_some() => {
                self.assign(&b.left, &b.right, compound_op(&b.op), e, out)
            }
            E::If(i) => self.if_stmt(i, out),
            E::ForLoop(f) => self.for_stmt(f, out),
            E::While(w) => self.while_stmt(w, out),
            E::Break(b) => {
                if b.label.is_some() || b.expr.is_some() {
                    return err(
                        e.span(),
                        "labels and `break` values are not supported in LOOM kernels",
                    );
                }
                self.jump(Stmt::Break, "break", e, out)
            }
            E::Continue(c) => {
                if c.label.is_some() {
                    return err(e.span(), "labels are not supported in LOOM kernels");
                }
                self.jump(Stmt::Continue, "continue", e, out)
            }
            E::Block(b) if b.label.is_none() => {
                let was_top = std::mem::replace(&mut self.top_level, false);
                let r = self.stmts(&b.block.stmts, out);
                self.top_level = was_top;
                r
            }
            E::Call(c) if call_name(e).is_some_and(|(n, _)| n == "barrier") => {
                if !c.args.is_empty() {
                    return err(
                        e.span(),
                        format!("`barrier` takes 0 arguments, found {}", c.args.len()),
                    );
                }
                self.emit(
                    out,
                    Stmt::Barrier,
                    Site {
                        span: e.span(),
                        text: "barrier()".into(),
                    },
                );
                Ok(())
            }
            E::Call(c) if call_name(e).is_some_and(|(n, _)| self.procedure(&n).is_some()) => {
                let (name, _) = call_name(e).expect("matched above");
                let f = self.procedure(&name).expect("matched above");
                self.call_proc(f, c, out)
            }
            E::Call(c)
                if call_name(e)
                    .is_some_and(|(n, _)| super::tiles::TILE_STMTS.contains(&n.as_str())) =>
            {
                let (name, _) = call_name(e).expect("matched above");
                self.tile_stmt(&name, c, out)
            }
            E::Macro(m) => err(m.span(), "LOOM kernels do not support macros"),
            E::Paren(_) | E::Group(_) => self.expr_stmt(strip(e), out),
            _ => {
                if let Some(what) = unsupported_kind(e) {
                    return err(e.span(), format!("LOOM kernels do not support {what}"));
                }
                // Lower it for its own errors (unknown names, ...), then reject it.
                self.expr(e, None)?;
                err(
                    e.span(),
                    "this expression statement has no effect; statements are `let`, assignments, stores, `if`, `for`, `while`, `break`, `continue` and `barrier()`",
                )
            }
        }
    }

    fn jump(&mut self, s: Stmt, what: &str, e: &syn::Expr, out: &mut Block) -> syn::Result<()> {
        if self.loop_depth == 0 {
            return err(e.span(), format!("`{what}` outside of a loop"));
        }
        self.emit(
            out,
            s,
            Site {
                span: e.span(),
                text: what.into(),
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;

    #[test]
    fn unsupported_syntax_is_rejected_at_its_span() {
        let cases = [
            ("return;", "LOOM kernels do not support `return`"),
            (
                "let f = |a: u32| a;",
                "LOOM kernels do not support closures",
            ),
            (
                "loop { }",
                "LOOM kernels do not support `loop` (use `while`)",
            ),
            (
                "let a = match n { _ => 1 };",
                "LOOM kernels do not support `match` (use `if`)",
            ),
            ("println!(\"hi\");", "LOOM kernels do not support macros"),
            ("let a = &n;", "LOOM kernels do not support references"),
            ("let a = (1, 2);", "tuples"),
            ("let a = [1, 2];", "arrays"),
            ("unsafe { }", "LOOM kernels do not support `unsafe` blocks"),
            ("if let Some(a) = n { }", "`if let` is not supported"),
            (
                "struct S;",
                "items (struct, use, static, ...) are not allowed",
            ),
            (
                "let a = 1; let b = a.0;",
                "LOOM kernels do not support field access",
            ),
            ("n + 1;", "has no effect"),
            ("'l: while true { }", "loop labels are not supported"),
        ];
        for (body, want) in cases {
            let msg = e(body);
            assert!(msg.contains(want), "{body}: {msg}");
            assert!(
                msg.starts_with("3:"),
                "errors point into the body (line 3): {msg}"
            );
        }
    }

    #[test]
    fn odd_inputs_give_errors_not_panics() {
        let bodies = [
            "let a = x[x[0] as u32] as u32; out[a] = 1.0;",
            "let (a, b, c) = argmax(s, 0);",
            "let (a, b) = argmax(s);",
            "let a = shared::<f32>(4, 5);",
            "let a = shared(4);",
            "let a = shared::<f32>(4);",
            "let a = barrier(1);",
            "barrier(1);",
            "let a = broadcast(s);",
            "let a = reduce_sum();",
            "let a = s.max();",
            "let a = s.mul_add(1.0);",
            "let a = local_id::<u32>();",
            "let a = f32::from_bits(1);",
            "let a = std::f32::consts::PI;",
            "let a = -true;",
            "let a = !1.0;",
            "let a = 1.0 % 0.0; let b = 5 / 0;",
            "let a = if s > 0.0 { 1.0 };",
            "let a = if s > 0.0 { let q = 1.0; q } else { 2.0 };",
            "continue;",
            "for (a, b) in 0..n {}",
            "for i in n {}",
            "for i in (0..n).step_by(1, 2) {}",
            "for i in ..n {}",
            "let a;",
            "let a: Vec<u32> = 1;",
            "x;",
            "{ { { let q = shared::<f32>(2); } } }",
            "out[0] = out;",
            "out = 1.0;",
            "let t = shared::<f32>(4); t = 1.0;",
            "let t = shared::<f32>(4); let u = t;",
            "let a = 0u32; a += 1;",
            "let a = 18446744073709551616;",
            "let a = 1e50;",
        ];
        for b in bodies {
            // Each of these is either an error with a location, or (for the few valid ones) a kernel.
            if let Err(msg) = try_k(b) {
                if std::env::var_os("LOOM_SHOW_ERRORS").is_some() {
                    eprintln!("{b}\n    => {msg}");
                }
                assert!(
                    msg.split(':').next().unwrap().parse::<u32>().is_ok(),
                    "{b}: {msg}"
                );
            }
        }
        assert!(
            try_k("let a = 1.0 % 0.0; let b = 5 / 0;").is_ok(),
            "division by a zero constant is a runtime matter"
        );
        assert!(e("let a = 1e50;").contains("out of the f32 range"));
    }
}
