//! Substitutes index-like `let`s of a split region into their uses.
//!
//! A split region (see [`super::split`]) keeps every variable it assigns in a per-work-item
//! array, because its statements no longer run back to back for one work-item. For a
//! variable such as `let col = group_id() * WG + local_id();` that hides from LLVM that
//! `col` is consecutive across work-items (or the same for all of them), which blocks
//! vectorisation. Such a variable is assigned once and its value is a pure integer
//! function of things that do not change while it is live, so the host lowering instead
//! writes its defining expression at every use: LLVM then sees what it would see had the
//! author written the expression inline. Evaluating a pure integer expression again gives
//! the same value, so results are unchanged.

use lse_dsl::ir::{BinOp, Expr, ExprKind, Stmt, VarId};
use lse_dsl::wil::VarStorage;

/// `block` with the lets of [`candidates`] removed and their values written at each use.
pub(super) fn substitute(block: &[Stmt], storage: &[VarStorage]) -> Vec<Stmt> {
    let defs = candidates(block, storage);
    if defs.iter().all(Option::is_none) {
        return block.to_vec();
    }
    rewrite(block, &defs, true)
}

/// For each variable, its defining expression (already substituted) if it may be written at
/// its uses: a [`VarStorage::Private`] integer or bool variable with exactly one `let` and no
/// assignment in `block`, whose value is [`pure`] and reads only loop variables never
/// assigned in `block`, [`VarStorage::Uniform`] variables and other such variables.
pub(super) fn candidates(block: &[Stmt], storage: &[VarStorage]) -> Vec<Option<Expr>> {
    candidates_of(block, storage, VarStorage::Private)
}

/// [`candidates`] for the variables a kernel keeps in per-work-item slots
/// ([`VarStorage::PerItem`]) because regions after their `let` read them, over the whole
/// kernel `body`: a segment bound computed before a reduction and used as a loop bound after
/// it is then written out there, so the loop counts as uniform and the region vectorises
/// (read from the slot, the bound is per work-item, the loop stays inside the work-item loop
/// and the region runs scalar). Each work-item evaluates the expression again with its own
/// `local_id()`, which gives what it stored. The `let`s stay (a uniform phase's condition
/// reads work-item 0's slot): [`rewrite_uses`] substitutes the uses only.
pub(super) fn kernel_wide(body: &[Stmt], storage: &[VarStorage]) -> Vec<Option<Expr>> {
    candidates_of(body, storage, VarStorage::PerItem)
}

/// The candidates of `storage` kind `kind` in `block`.
fn candidates_of(block: &[Stmt], storage: &[VarStorage], kind: VarStorage) -> Vec<Option<Expr>> {
    let mut counts = Counts {
        lets: vec![0; storage.len()],
        assigns: vec![0; storage.len()],
        loop_vars: vec![false; storage.len()],
    };
    counts.block(block);
    let mut defs: Vec<Option<Expr>> = vec![None; storage.len()];
    collect(block, storage, kind, &counts, &mut defs);
    defs
}

/// `block` with each use of a variable that has `defs[v]` replaced by it, its `let`s kept.
pub(super) fn rewrite_uses(block: &[Stmt], defs: &[Option<Expr>]) -> Vec<Stmt> {
    if defs.iter().all(Option::is_none) {
        return block.to_vec();
    }
    rewrite(block, defs, false)
}

struct Counts {
    lets: Vec<u32>,
    assigns: Vec<u32>,
    loop_vars: Vec<bool>,
}

impl Counts {
    fn bump(v: &mut [u32], var: VarId) {
        if let Some(c) = v.get_mut(var as usize) {
            *c += 1;
        }
    }

    fn block(&mut self, block: &[Stmt]) {
        for s in block {
            match s {
                Stmt::Let { var, .. } => Self::bump(&mut self.lets, *var),
                Stmt::Assign { var, .. } => Self::bump(&mut self.assigns, *var),
                Stmt::Collective { dst, .. } => {
                    for d in dst {
                        Self::bump(&mut self.assigns, *d);
                    }
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    self.block(then_body);
                    self.block(else_body);
                }
                Stmt::For { var, body, .. } => {
                    if let Some(l) = self.loop_vars.get_mut(*var as usize) {
                        *l = true;
                    }
                    Self::bump(&mut self.lets, *var);
                    self.block(body);
                }
                Stmt::While { body, .. } => self.block(body),
                _ => {}
            }
        }
    }

    /// A variable whose value cannot change between a candidate's `let` and its uses.
    fn stable(&self, v: VarId, storage: &[VarStorage], defs: &[Option<Expr>]) -> bool {
        let i = v as usize;
        if storage.get(i) == Some(&VarStorage::Uniform) {
            // A uniform phase's loop variable (its `for` counts as its one `let` when the
            // walk covers the whole kernel).
            let lets = self.lets.get(i).copied();
            let loop_var = self.loop_vars.get(i) == Some(&true);
            return self.assigns.get(i) == Some(&0)
                && (lets == Some(0) || (lets == Some(1) && loop_var));
        }
        let loop_var = self.loop_vars.get(i) == Some(&true)
            && self.lets.get(i) == Some(&1)
            && self.assigns.get(i) == Some(&0);
        loop_var || defs.get(i).is_some_and(Option::is_some)
    }
}

/// Walks `block` in order, deciding each `let` of a `kind` variable once its operands are
/// decided.
fn collect(
    block: &[Stmt],
    storage: &[VarStorage],
    kind: VarStorage,
    counts: &Counts,
    defs: &mut [Option<Expr>],
) {
    for s in block {
        match s {
            Stmt::Let { var, value } => {
                let i = *var as usize;
                let ok = storage.get(i) == Some(&kind)
                    && counts.lets[i] == 1
                    && counts.assigns[i] == 0
                    && (value.ty.is_int() || value.ty == lse_dsl::ir::Ty::Bool)
                    && pure(value, &|v| counts.stable(v, storage, defs));
                if ok {
                    defs[i] = Some(rewrite_expr(value, defs));
                }
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                collect(then_body, storage, kind, counts, defs);
                collect(else_body, storage, kind, counts, defs);
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => {
                collect(body, storage, kind, counts, defs)
            }
            _ => {}
        }
    }
}

/// Whether evaluating `e` reads no memory, cannot trap, and reads only `stable` variables.
pub(super) fn pure(e: &Expr, stable: &dyn Fn(VarId) -> bool) -> bool {
    let rec = |x: &Expr| pure(x, stable);
    match &e.kind {
        ExprKind::Const(_) | ExprKind::Param(_) | ExprKind::Builtin(_) => true,
        ExprKind::Var(v) => stable(*v),
        ExprKind::Load { .. } | ExprKind::SharedLoad { .. } => false,
        ExprKind::Unary(_, a) | ExprKind::Cast(a) => rec(a),
        ExprKind::Binary(op, a, b) => {
            let traps = matches!(op, BinOp::Div | BinOp::Rem)
                && a.ty.is_int()
                && !matches!(b.kind, ExprKind::Const(c) if c != 0 && c != u32::MAX);
            !traps && rec(a) && rec(b)
        }
        ExprKind::Math(_, args) => args.iter().all(rec),
        ExprKind::Select(c, a, b) => rec(c) && rec(a) && rec(b),
    }
}

/// `block` with each use of a variable that has `defs[v]` replaced by it; `drop_lets` removes
/// those variables' `let`s too.
fn rewrite(block: &[Stmt], defs: &[Option<Expr>], drop_lets: bool) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        let r = |e: &Expr| rewrite_expr(e, defs);
        out.push(match s {
            Stmt::Let { var, .. }
                if drop_lets && defs.get(*var as usize).is_some_and(Option::is_some) =>
            {
                continue
            }
            Stmt::Let { var, value } => Stmt::Let {
                var: *var,
                value: r(value),
            },
            Stmt::Assign { var, value } => Stmt::Assign {
                var: *var,
                value: r(value),
            },
            Stmt::Store { buf, index, value } => Stmt::Store {
                buf: *buf,
                index: r(index),
                value: r(value),
            },
            Stmt::SharedStore {
                array,
                index,
                value,
            } => Stmt::SharedStore {
                array: *array,
                index: r(index),
                value: r(value),
            },
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => Stmt::If {
                cond: r(cond),
                then_body: rewrite(then_body, defs, drop_lets),
                else_body: rewrite(else_body, defs, drop_lets),
            },
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => Stmt::For {
                var: *var,
                start: r(start),
                end: r(end),
                step: r(step),
                body: rewrite(body, defs, drop_lets),
            },
            Stmt::While { cond, body } => Stmt::While {
                cond: r(cond),
                body: rewrite(body, defs, drop_lets),
            },
            Stmt::Collective { op, dst, args } => Stmt::Collective {
                op: *op,
                dst: dst.clone(),
                args: args.iter().map(r).collect(),
            },
            Stmt::Break | Stmt::Continue | Stmt::Barrier | Stmt::Tile(_) => s.clone(),
        });
    }
    out
}

/// `e` with each variable `v` that has `defs[v]` replaced by it.
pub(super) fn rewrite_expr(e: &Expr, defs: &[Option<Expr>]) -> Expr {
    let r = |x: &Expr| Box::new(rewrite_expr(x, defs));
    let kind = match &e.kind {
        ExprKind::Var(v) => {
            if let Some(Some(d)) = defs.get(*v as usize) {
                return d.clone();
            }
            return e.clone();
        }
        ExprKind::Const(_) | ExprKind::Param(_) | ExprKind::Builtin(_) => return e.clone(),
        ExprKind::Load { buf, index } => ExprKind::Load {
            buf: *buf,
            index: r(index),
        },
        ExprKind::SharedLoad { array, index } => ExprKind::SharedLoad {
            array: *array,
            index: r(index),
        },
        ExprKind::Unary(op, a) => ExprKind::Unary(*op, r(a)),
        ExprKind::Cast(a) => ExprKind::Cast(r(a)),
        ExprKind::Binary(op, a, b) => ExprKind::Binary(*op, r(a), r(b)),
        ExprKind::Math(f, args) => {
            ExprKind::Math(*f, args.iter().map(|a| rewrite_expr(a, defs)).collect())
        }
        ExprKind::Select(c, a, b) => ExprKind::Select(r(c), r(a), r(b)),
    };
    Expr::new(kind, e.ty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::kernels::{bin, builtin};
    use lse_dsl::ir::{Builtin, Ty};

    fn u(v: u32) -> Expr {
        Expr::const_u32(v)
    }
    fn var(v: VarId) -> Expr {
        Expr::new(ExprKind::Var(v), Ty::U32)
    }
    fn lid() -> Expr {
        builtin(Builtin::LocalId)
    }
    fn let_(var: VarId, value: Expr) -> Stmt {
        Stmt::Let { var, value }
    }
    fn store(index: Expr) -> Stmt {
        Stmt::Store {
            buf: 0,
            index,
            value: Expr::const_f32(1.0),
        }
    }

    /// `for var in 0..end { body }`.
    fn for_(var: VarId, end: Expr, body: Vec<Stmt>) -> Stmt {
        Stmt::For {
            var,
            start: u(0),
            end,
            step: u(1),
            body,
        }
    }

    #[test]
    fn pure_index_lets_are_written_at_their_uses() {
        // let a = lid; let b = a * 4; for i in 0..b { out[b + i] = 1 }: both lets go, `b`
        // written out in the bound and the index, `a` inside it.
        let block = vec![
            let_(0, lid()),
            let_(1, bin(BinOp::Mul, var(0), u(4))),
            for_(2, var(1), vec![store(bin(BinOp::Add, var(1), var(2)))]),
        ];
        let st = [VarStorage::Private; 3];
        let out = substitute(&block, &st);
        let b = bin(BinOp::Mul, lid(), u(4));
        assert_eq!(
            out,
            vec![for_(2, b.clone(), vec![store(bin(BinOp::Add, b, var(2)))])]
        );
    }

    #[test]
    fn reassigned_loaded_trapping_or_shared_lets_stay() {
        let load = Expr::new(
            ExprKind::Load {
                buf: 0,
                index: Box::new(u(0)),
            },
            Ty::U32,
        );
        let block = vec![
            // Assigned again.
            let_(0, lid()),
            Stmt::Assign {
                var: 0,
                value: u(1),
            },
            // Reads memory.
            let_(1, load),
            // May divide by zero; dividing by a non-zero constant is fine.
            let_(2, bin(BinOp::Div, u(8), var(4))),
            let_(3, bin(BinOp::Div, lid(), u(8))),
            // Crosses a region boundary.
            let_(4, lid()),
            // Depends on a variable that stays.
            let_(5, var(0)),
            // A float.
            let_(6, Expr::const_f32(2.0)),
        ];
        let mut st = [VarStorage::Private; 7];
        st[4] = VarStorage::PerItem;
        let defs = candidates(&block, &st);
        let kept: Vec<bool> = defs.iter().map(Option::is_none).collect();
        assert_eq!(kept, vec![true, true, true, false, true, true, true]);
    }

    #[test]
    fn per_item_lets_read_after_a_phase_are_written_at_their_uses_and_kept() {
        // for tt in 0..4 (a phase loop) { let tok = gid * 4 + tt; let w = tok + lid;
        // s = reduce_sum(..); for c in 0..tok { out[w + c] = 1 } }: `tok` and `w` are read in
        // the region after the reduction, `s` is the collective's destination and stays.
        let tok = bin(
            BinOp::Add,
            bin(BinOp::Mul, builtin(Builtin::GroupId(0)), u(4)),
            var(0),
        );
        let inner = vec![for_(
            4,
            var(1),
            vec![store(bin(BinOp::Add, var(2), var(4)))],
        )];
        let body = vec![for_(
            0,
            u(4),
            [
                vec![
                    let_(1, tok.clone()),
                    let_(2, bin(BinOp::Add, var(1), lid())),
                    Stmt::Collective {
                        op: lse_dsl::ir::CollectiveOp::ReduceSum,
                        dst: vec![3],
                        args: vec![Expr::const_f32(1.0)],
                    },
                ],
                inner.clone(),
            ]
            .concat(),
        )];
        use VarStorage::{PerItem, Private, Uniform};
        let st = [Uniform, PerItem, PerItem, PerItem, Private];
        let defs = kernel_wide(&body, &st);
        let w = bin(BinOp::Add, tok.clone(), lid());
        assert_eq!(defs[1], Some(tok.clone()));
        assert_eq!(defs[2], Some(w.clone()));
        assert_eq!(defs[3], None);
        assert_eq!(
            rewrite_uses(&inner, &defs),
            vec![for_(
                4,
                tok.clone(),
                vec![store(bin(BinOp::Add, w, var(4)))]
            )]
        );
        // The `let`s stay where they are.
        let first = vec![let_(1, tok.clone())];
        assert_eq!(rewrite_uses(&first, &defs), first);
        // Private variables are not this pass's.
        assert!(
            kernel_wide(&body, &[Uniform, Private, Private, PerItem, Private])
                .iter()
                .all(Option::is_none)
        );
    }

    #[test]
    fn lets_inside_loops_may_read_the_loop_variable() {
        // for kb in 0..8 { let k = kb * 4; out[k] = 1 }; a `let` of the same variable twice
        // stays.
        let block = vec![
            for_(
                0,
                u(8),
                vec![
                    let_(1, bin(BinOp::Mul, var(0), u(4))),
                    store(var(1)),
                    let_(2, u(1)),
                ],
            ),
            let_(2, u(2)),
        ];
        let st = [VarStorage::Private; 3];
        let defs = candidates(&block, &st);
        assert_eq!(defs[1], Some(bin(BinOp::Mul, var(0), u(4))));
        assert_eq!(defs[2], None);
    }
}
