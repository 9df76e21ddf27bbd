//! Statement lowering shared by both targets; barriers and collectives go to the target.

use super::{align_of, lty, Emitter, Lowered, TargetStmts};
use lse_dsl::ir::{Expr, ExprKind, Stmt, Ty};

impl Emitter<'_> {
    /// Lowers one statement.
    pub fn stmt(&mut self, t: &mut dyn TargetStmts, s: &Stmt) -> Lowered<()> {
        match s {
            Stmt::Let { var, value } | Stmt::Assign { var, value } => {
                let v = self.expr(value)?;
                self.write_var(*var, &v)?;
            }
            Stmt::Store { buf, index, value } => {
                let v = self.expr(value)?;
                let p = self.buf_elem_ptr(*buf, index, value.ty)?;
                let md = self.mem_md.clone();
                self.b.ins(format!(
                    "store {} {v}, {} {p}, align {}{md}",
                    lty(value.ty),
                    self.buf_ptr,
                    align_of(value.ty)
                ));
            }
            Stmt::SharedStore {
                array,
                index,
                value,
            } => {
                let v = self.expr(value)?;
                let p = self.shared_elem_ptr(*array, index, value.ty)?;
                let md = self.mem_md.clone();
                self.b.ins(format!(
                    "store {} {v}, {} {p}, align {}{md}",
                    lty(value.ty),
                    self.shared_ptr,
                    align_of(value.ty)
                ));
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let c = self.expr(cond)?;
                self.if_else(&c, &mut |e, taken| {
                    e.block(t, if taken { then_body } else { else_body })
                })?;
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                self.for_loop(*var, start, end, step, &mut |e| e.block(t, body))?;
            }
            Stmt::While { cond, body } => {
                let (head, lbody, exit) = (
                    self.b.label("while.head"),
                    self.b.label("while.body"),
                    self.b.label("while.exit"),
                );
                self.b.br(&head);
                self.b.start(&head);
                let c = self.expr(cond)?;
                self.b.cbr(&c, &lbody, &exit);
                self.b.start(&lbody);
                self.loops.push((head.clone(), exit.clone()));
                self.block(t, body)?;
                self.loops.pop();
                self.b.br(&head);
                self.b.start(&exit);
            }
            Stmt::Break | Stmt::Continue => {
                let target = self
                    .loops
                    .last()
                    .map(|(c, b)| if matches!(s, Stmt::Break) { b } else { c })
                    .cloned();
                match target {
                    Some(l) => {
                        self.b.br(&l);
                        let dead = self.b.label("dead");
                        self.b.start(&dead);
                    }
                    None => return Err("`break` or `continue` outside a loop".into()),
                }
            }
            Stmt::Barrier | Stmt::Collective { .. } | Stmt::Tile(_) => t.sync_stmt(self, s)?,
        }
        Ok(())
    }

    /// `if c { .. } else { .. }` on an evaluated `i1` `c`: `branch(e, true)` lowers the then
    /// side, `branch(e, false)` the else side; the first error stops the lowering.
    pub fn if_else(
        &mut self,
        c: &str,
        branch: &mut dyn FnMut(&mut Self, bool) -> Lowered<()>,
    ) -> Lowered<()> {
        let mut result = Ok(());
        self.branch_on(c, &mut |e, taken| {
            if result.is_ok() {
                result = branch(e, taken);
            }
        });
        result
    }

    /// [`Self::if_else`] for branches that cannot fail (code the lowering itself builds).
    pub fn branch_on(&mut self, c: &str, branch: &mut dyn FnMut(&mut Self, bool)) {
        let (lt, le, end) = (
            self.b.label("if.then"),
            self.b.label("if.else"),
            self.b.label("if.end"),
        );
        self.b.cbr(c, &lt, &le);
        for (label, taken) in [(&lt, true), (&le, false)] {
            self.b.start(label);
            branch(self, taken);
            self.b.br(&end);
        }
        self.b.start(&end);
    }

    /// `for var in (start..end).step_by(step)`: `end` and `step` are evaluated once; the
    /// loop stops when the next value would reach `end`, without overflowing (Rust's
    /// `step_by`). `body` lowers the loop body.
    pub fn for_loop(
        &mut self,
        var: u32,
        start: &Expr,
        end: &Expr,
        step: &Expr,
        body: &mut dyn FnMut(&mut Self) -> Lowered<()>,
    ) -> Lowered<()> {
        let ty = start.ty;
        let sv = self.expr(start)?;
        let ev = self.expr(end)?;
        let stv = self.expr(step)?;
        self.write_var(var, &sv)?;
        let (head, lbody, latch, exit) = (
            self.b.label("for.head"),
            self.b.label("for.body"),
            self.b.label("for.latch"),
            self.b.label("for.exit"),
        );
        self.b.br(&head);
        self.b.start(&head);
        let i = self.read_var(var)?;
        let cmp = if ty == Ty::I32 { "slt" } else { "ult" };
        let c = self.b.op(format!("icmp {cmp} i32 {i}, {ev}"));
        self.b.cbr(&c, &lbody, &exit);
        self.b.start(&lbody);
        self.loops.push((latch.clone(), exit.clone()));
        body(self)?;
        self.loops.pop();
        self.b.br(&latch);
        self.b.start(&latch);
        let i = self.read_var(var)?;
        if matches!(step.kind, ExprKind::Const(1)) {
            // i < end here, so i + 1 cannot overflow.
            let n = self.b.op(format!("add i32 {i}, 1"));
            self.write_var(var, &n)?;
            self.b.br(&head);
        } else {
            let left = self.b.op(format!("sub i32 {ev}, {i}"));
            let more = self.b.op(format!("icmp ugt i32 {left}, {stv}"));
            let inc = self.b.label("for.inc");
            self.b.cbr(&more, &inc, &exit);
            self.b.start(&inc);
            let n = self.b.op(format!("add i32 {i}, {stv}"));
            self.write_var(var, &n)?;
            self.b.br(&head);
        }
        self.b.start(&exit);
        Ok(())
    }
}
