//! The uniformity check: `barrier()` and the collectives must run under uniform control
//! flow, where every work-item of the workgroup takes the same path; under divergent control
//! some work-items would wait forever for the others (a GPU hang).
//!
//! A forward dataflow over the structured IR tracks which variables may be *divergent*
//! (differ between work-items). Sources: `local_id()`, shared-array loads, loads from
//! writable buffers, loads at a divergent index, and any assignment made under divergent
//! control. A uniform assignment under uniform control makes a variable uniform again; at
//! the end of an `if` the two branches' facts are joined; a loop is iterated to a fixpoint
//! (its header sees the facts from the body's end and from every `break`/`continue`), and a
//! loop that some work-items may leave early (a `break`/`continue` under divergent control)
//! is divergent control for its whole body. Only after the fixpoint are the barriers and
//! collectives of a loop checked, with the facts that hold on every iteration.

use super::cx::{site_at, Site, Sites};
use crate::ir::{
    Access, Block, Builtin, CollectiveOp, Expr, ExprKind, Kernel, Param, Stmt, TileOp, VarId,
};

/// Per-variable divergence, indexed by [`VarId`].
type Div = Vec<bool>;
/// The path of the statement that makes control divergent.
type Reason = Vec<u32>;

/// Checks `k`; the error points at the barrier or collective and at the divergent condition.
pub(super) fn check(k: &Kernel, sites: &Sites) -> syn::Result<()> {
    let mut u = Uni {
        k,
        sites,
        checking: true,
        loops: Vec::new(),
    };
    let mut d = vec![false; k.locals.len()];
    u.block(&k.body, &mut Vec::new(), None, &mut d)
}

/// Facts gathered about the loop being analysed.
struct LoopFacts {
    /// The divergent condition under which some work-items leave the loop early.
    early_exit: Option<Reason>,
    /// Join of the facts at every `break`/`continue`.
    at_jumps: Div,
}

struct Uni<'a> {
    k: &'a Kernel,
    sites: &'a Sites,
    /// False while a loop body is iterated to its fixpoint: errors are only reported once
    /// the facts are final.
    checking: bool,
    loops: Vec<LoopFacts>,
}

fn join(a: &mut Div, b: &Div) {
    for (x, y) in a.iter_mut().zip(b) {
        *x |= *y;
    }
}

impl Uni<'_> {
    fn divergent(&self, e: &Expr, d: &Div) -> bool {
        match &e.kind {
            ExprKind::Const(_) | ExprKind::Param(_) => false,
            ExprKind::Builtin(b) => *b == Builtin::LocalId,
            ExprKind::Var(v) => d[*v as usize],
            ExprKind::Load { buf, index } => match &self.k.params[*buf as usize] {
                Param::Buffer {
                    access: Access::Read,
                    ..
                } => self.divergent(index, d),
                _ => true,
            },
            ExprKind::SharedLoad { .. } => true,
            ExprKind::Unary(_, a) | ExprKind::Cast(a) => self.divergent(a, d),
            ExprKind::Binary(_, a, b) => self.divergent(a, d) || self.divergent(b, d),
            ExprKind::Math(_, args) => args.iter().any(|a| self.divergent(a, d)),
            ExprKind::Select(c, a, b) => {
                self.divergent(c, d) || self.divergent(a, d) || self.divergent(b, d)
            }
        }
    }

    fn block(
        &mut self,
        b: &Block,
        path: &mut Vec<u32>,
        ctl: Option<&Reason>,
        d: &mut Div,
    ) -> syn::Result<()> {
        for (i, s) in b.iter().enumerate() {
            path.push(i as u32);
            let r = self.stmt(s, path, ctl, d);
            path.pop();
            r?;
        }
        Ok(())
    }

    fn set(d: &mut Div, var: VarId, divergent: bool) {
        d[var as usize] = divergent;
    }

    /// `path` is the statement's own path.
    fn stmt(
        &mut self,
        s: &Stmt,
        path: &mut Vec<u32>,
        ctl: Option<&Reason>,
        d: &mut Div,
    ) -> syn::Result<()> {
        match s {
            Stmt::Let { var, value } | Stmt::Assign { var, value } => {
                let v = ctl.is_some() || self.divergent(value, d);
                Self::set(d, *var, v);
            }
            Stmt::Store { .. } | Stmt::SharedStore { .. } => {}
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let own = path.clone();
                let inner = if self.divergent(cond, d) {
                    Some(&own)
                } else {
                    ctl
                };
                let mut d_then = d.clone();
                path.push(0);
                let r = self.block(then_body, path, inner, &mut d_then);
                path.pop();
                r?;
                path.push(1);
                let r = self.block(else_body, path, inner, d);
                path.pop();
                r?;
                join(d, &d_then);
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                // The bounds and step are evaluated once, before the first iteration.
                let bounds =
                    self.divergent(start, d) || self.divergent(end, d) || self.divergent(step, d);
                self.run_loop(body, path, Some(*var), &|_, _| bounds, ctl, d)?;
            }
            Stmt::While { cond, body } => {
                let header = |u: &Uni, d: &Div| u.divergent(cond, d);
                self.run_loop(body, path, None, &header, ctl, d)?;
            }
            Stmt::Break | Stmt::Continue => {
                if let Some(facts) = self.loops.last_mut() {
                    if let (None, Some(r)) = (&facts.early_exit, ctl) {
                        facts.early_exit = Some(r.clone());
                    }
                    join(&mut facts.at_jumps, d);
                }
            }
            Stmt::Barrier => self.require_uniform(path, ctl)?,
            Stmt::Tile(op) => {
                self.require_uniform(path, ctl)?;
                let divergent = op.exprs().iter().any(|e| self.divergent(e, d));
                if self.checking && divergent {
                    let site = site_at(self.sites, path);
                    let what = if matches!(op, TileOp::Scale { .. }) {
                        "the factor of `tile_scale` must be uniform (the same on every work-item of the workgroup); it depends"
                    } else if matches!(op, TileOp::Prefetch { .. }) {
                        "the offset and length of `prefetch` must be uniform (the same on every work-item of the workgroup); one of them depends"
                    } else {
                        "a tile window's offset, stride, rows and cols must be uniform (the same on every work-item of the workgroup); one of them depends"
                    };
                    return Err(syn::Error::new(
                        site.span,
                        format!(
                            "`{}`: {what} on `local_id()`, a shared-array or writable-buffer load, or a variable assigned under divergent control",
                            site.text
                        ),
                    ));
                }
            }
            Stmt::Collective { op, dst, args } => {
                self.require_uniform(path, ctl)?;
                let lane_div = *op == CollectiveOp::Broadcast && self.divergent(&args[1], d);
                // A subgroup op's result differs between subgroups.
                for v in dst {
                    Self::set(d, *v, ctl.is_some() || lane_div || op.is_subgroup());
                }
            }
        }
        Ok(())
    }

    /// A loop at `path`: iterate its body to a fixpoint, then check it with the final facts.
    fn run_loop(
        &mut self,
        body: &Block,
        path: &mut Vec<u32>,
        var: Option<VarId>,
        header: &dyn Fn(&Uni, &Div) -> bool,
        ctl: Option<&Reason>,
        d: &mut Div,
    ) -> syn::Result<()> {
        let own = path.clone();
        let mut d_in = d.clone();
        let mut early_exit: Option<Reason> = None;
        let checking = std::mem::replace(&mut self.checking, false);
        // Each round only adds divergence or an early exit, so this terminates.
        loop {
            let (_, next_in, exit) =
                self.loop_round(body, path, var, header, ctl, &own, &d_in, &early_exit)?;
            let stable = next_in == d_in && exit == early_exit;
            d_in = next_in;
            early_exit = exit;
            if stable {
                break;
            }
        }
        self.checking = checking;
        if checking {
            self.loop_round(body, path, var, header, ctl, &own, &d_in, &early_exit)?;
        }
        *d = d_in;
        Ok(())
    }

    /// One pass over a loop body from header facts `d_in`; returns the body's body-control
    /// reason, the next header facts and the early-exit reason.
    #[allow(clippy::too_many_arguments)]
    fn loop_round(
        &mut self,
        body: &Block,
        path: &mut Vec<u32>,
        var: Option<VarId>,
        header: &dyn Fn(&Uni, &Div) -> bool,
        ctl: Option<&Reason>,
        own: &Reason,
        d_in: &Div,
        early_exit: &Option<Reason>,
    ) -> syn::Result<(Option<Reason>, Div, Option<Reason>)> {
        let body_ctl = if header(self, d_in) {
            Some(own.clone())
        } else {
            ctl.cloned().or_else(|| early_exit.clone())
        };
        let mut d_body = d_in.clone();
        if let Some(v) = var {
            Self::set(&mut d_body, v, body_ctl.is_some());
        }
        self.loops.push(LoopFacts {
            early_exit: None,
            at_jumps: d_in.clone(),
        });
        path.push(0);
        let r = self.block(body, path, body_ctl.as_ref(), &mut d_body);
        path.pop();
        let facts = self.loops.pop().expect("pushed above");
        r?;
        let mut next = d_in.clone();
        join(&mut next, &d_body);
        join(&mut next, &facts.at_jumps);
        let exit = early_exit.clone().or(facts.early_exit);
        Ok((body_ctl, next, exit))
    }

    fn require_uniform(&self, at: &[u32], ctl: Option<&Reason>) -> syn::Result<()> {
        let (true, Some(reason)) = (self.checking, ctl) else {
            return Ok(());
        };
        let site = &site_at(self.sites, at);
        let why = &site_at(self.sites, reason);
        let kind = match stmt_at(&self.k.body, reason) {
            Some(Stmt::If { .. }) => "`if` condition",
            Some(Stmt::While { .. }) => "`while` condition",
            Some(Stmt::For { .. }) => "`for` range",
            _ => "condition",
        };
        let prefetch = matches!(
            stmt_at(&self.k.body, at),
            Some(Stmt::Tile(TileOp::Prefetch { .. }))
        );
        Err(divergence_error(site, why, kind, prefetch))
    }
}

fn divergence_error(site: &Site, why: &Site, kind: &str, prefetch: bool) -> syn::Error {
    let consequence = if prefetch {
        "so the workgroup has no one range to prefetch; `prefetch`, done once per workgroup, runs under uniform control flow like the tile statements"
    } else {
        "so some work-items would wait forever; barriers, collectives and tile statements must run under uniform control flow"
    };
    let mut e = syn::Error::new(
        site.span,
        format!(
            "`{}` under divergent control flow: the {kind} `{}` can differ between the work-items of a workgroup (it depends on `local_id()`, a shared-array or writable-buffer load, or a variable assigned under divergent control), {consequence}",
            site.text, why.text
        ),
    );
    e.combine(syn::Error::new(
        why.span,
        format!("the divergent {kind} around `{}`", site.text),
    ));
    e
}

/// The statement at `path` (see [`super::cx`] for the path layout).
fn stmt_at<'a>(body: &'a Block, path: &[u32]) -> Option<&'a Stmt> {
    let (first, rest) = path.split_first()?;
    let s = body.get(*first as usize)?;
    if rest.is_empty() {
        return Some(s);
    }
    let (branch, rest) = rest.split_first()?;
    let inner = match (s, branch) {
        (Stmt::If { then_body, .. }, 0) => then_body,
        (Stmt::If { else_body, .. }, 1) => else_body,
        (Stmt::For { body, .. } | Stmt::While { body, .. }, 0) => body,
        _ => return None,
    };
    stmt_at(inner, rest)
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;

    #[test]
    fn barrier_under_divergent_if_is_an_error_naming_the_condition() {
        let msg = e("if local_id() < 4 {\n barrier();\n }");
        let first = msg.lines().next().unwrap();
        assert!(
            first.starts_with(
                "4:2: `barrier()` under divergent control flow: the `if` condition `local_id() < 4`"
            ),
            "{msg}"
        );
        assert!(
            msg.lines()
                .nth(1)
                .unwrap()
                .starts_with("3:4: the divergent `if` condition"),
            "{msg}"
        );
    }

    #[test]
    fn collective_in_divergent_loop_is_an_error() {
        let msg = e("for i in local_id()..n { let t = reduce_sum(1.0); }");
        assert!(
            msg.contains(
                "`reduce_sum(1.0)` under divergent control flow: the `for` range `local_id()..n`"
            ),
            "{msg}"
        );
        let msg = e("let mut i = local_id(); while i < n { i += 64; let t = reduce_max(s); }");
        assert!(msg.contains("the `while` condition `i < n`"), "{msg}");
    }

    #[test]
    fn divergence_flows_through_variables_loads_and_loops() {
        // Assigned under divergent control: divergent afterwards.
        assert!(
            e("let mut a = 0u32; if local_id() == 0 { a = 1; } if a == 1 { barrier(); }")
                .contains("`a == 1`")
        );
        // Shared and writable loads are divergent; read-only loads at a uniform index are not.
        assert!(e("let t = shared::<u32>(4); if t[0] == 0 { barrier(); }").contains("`t[0] == 0`"));
        assert!(e("if out[0] > 0.0 { barrier(); }").contains("`out[0] > 0.0`"));
        k("if ids[group_id()] > 0 { barrier(); }");
        assert!(e("if ids[local_id()] > 0 { barrier(); }").contains("`ids[local_id()] > 0`"));
        // Only found after a second pass over the loop: `j` becomes divergent at the end of the body.
        let msg = e("let mut j = 0u32; while j < n { if j == 0 { barrier(); } j = local_id(); }");
        assert!(msg.contains("`j == 0`") || msg.contains("`j < n`"), "{msg}");
        // A uniform reassignment under uniform control makes a variable uniform again.
        k("let mut a = local_id(); a = 0; if a == 0 { barrier(); }");
        // Collective results are uniform, broadcast from a uniform lane too.
        k("let t = reduce_max(x[local_id()]); if t > 0.0 { barrier(); } let b = broadcast(local_id(), 0); if b == 0 { barrier(); }");
        assert!(
            e("let b = broadcast(s, local_id()); if b > 0.0 { barrier(); }").contains("`b > 0.0`")
        );
        // Divergent code without barriers is fine.
        k("if local_id() < n { out[local_id()] = 1.0; }");
        // A loop some work-items leave early makes what it assigns divergent.
        assert!(e("let mut c = 0u32; for i in 0..n { if x[local_id()] > 0.0 { break; } c += 1; } if c > 2 { barrier(); }").contains("`c > 2`"));
    }

    #[test]
    fn for_bounds_are_judged_before_the_loop_runs() {
        // `end` is read once before the loop; making it divergent inside does not make the loop
        // divergent, but it does make a later loop over it divergent.
        k("let mut end = n; for i in 0..end { barrier(); end = local_id(); }");
        let msg = e(
            "let mut end = n; for i in 0..end { end = local_id(); } for j in 0..end { barrier(); }",
        );
        assert!(msg.contains("the `for` range `0..end`"), "{msg}");
    }
}
