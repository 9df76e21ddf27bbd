//! Which parts of a work-item-loop region to interchange with the work-item loop.
//!
//! A `for` loop inside a region runs once per work-item, so the vectoriser, which only
//! handles innermost loops, never sees the work-item loop around it, and a sequential f32
//! accumulation in the `for` cannot be vectorised either. When the loop's bounds are the
//! same for every work-item and cost nothing to evaluate (no loads, no integer division),
//! the host lowering instead runs the `for` once per workgroup with a work-item loop inside
//! (PoCL's horizontal inner-loop parallelisation). Each work-item still performs the same
//! operations in the same order, so results are bit-identical; only the interleaving between
//! work-items of a barrier-free region changes, which no race-free kernel can observe.

use lse_dsl::ir::{BinOp, Builtin, Expr, ExprKind, Stmt, VarId};
use lse_dsl::wil::VarStorage;

/// Whether `e` has one value for the whole workgroup and evaluating it can neither trap
/// nor read memory. `hoisted` are the variables of enclosing interchanged loops.
pub(super) fn uniform_pure(e: &Expr, storage: &[VarStorage], hoisted: &[VarId]) -> bool {
    let rec = |x: &Expr| uniform_pure(x, storage, hoisted);
    match &e.kind {
        ExprKind::Const(_) | ExprKind::Param(_) => true,
        ExprKind::Builtin(b) => !matches!(b, Builtin::LocalId),
        ExprKind::Var(v) => {
            hoisted.contains(v) || storage.get(*v as usize) == Some(&VarStorage::Uniform)
        }
        ExprKind::Load { .. } | ExprKind::SharedLoad { .. } => false,
        ExprKind::Unary(_, a) | ExprKind::Cast(a) => rec(a),
        ExprKind::Binary(op, a, b) => {
            // Integer division traps on 0 (and i32::MIN / -1); a constant divisor other than
            // 0 and -1, or the workgroup size, never does.
            let safe_divisor = matches!(b.kind, ExprKind::Const(c) if c != 0 && c != u32::MAX)
                || matches!(b.kind, ExprKind::Builtin(Builtin::GroupSize));
            let traps = matches!(op, BinOp::Div | BinOp::Rem) && a.ty.is_int() && !safe_divisor;
            !traps && rec(a) && rec(b)
        }
        ExprKind::Math(_, args) => args.iter().all(rec),
        ExprKind::Select(c, a, b) => rec(c) && rec(a) && rec(b),
    }
}

/// Whether `block` has a `break`/`continue` that leaves or continues the loop whose body it is.
fn exits_enclosing_loop(block: &[Stmt]) -> bool {
    block.iter().any(|s| match s {
        Stmt::Break | Stmt::Continue => true,
        Stmt::If {
            then_body,
            else_body,
            ..
        } => exits_enclosing_loop(then_body) || exits_enclosing_loop(else_body),
        _ => false,
    })
}

/// Whether `s` is a `for` the host lowering may interchange with the work-item loop.
pub(super) fn hoistable(s: &Stmt, storage: &[VarStorage], hoisted: &[VarId]) -> bool {
    match s {
        Stmt::For {
            start,
            end,
            step,
            body,
            ..
        } => {
            [start, end, step]
                .iter()
                .all(|x| uniform_pure(x, storage, hoisted))
                && !exits_enclosing_loop(body)
        }
        _ => false,
    }
}

/// Whether `block` (through `if` branches) contains a loop to interchange.
pub(super) fn wants_split(block: &[Stmt], storage: &[VarStorage], hoisted: &[VarId]) -> bool {
    block.iter().any(|s| match s {
        Stmt::If {
            then_body,
            else_body,
            ..
        } => wants_split(then_body, storage, hoisted) || wants_split(else_body, storage, hoisted),
        s => hoistable(s, storage, hoisted),
    })
}

/// Variables a split region assigns (`let`, assignment), which must live per work-item
/// because the region's statements no longer run back to back for one work-item.
pub(super) fn assigned_vars(block: &[Stmt], out: &mut Vec<VarId>) {
    for s in block {
        match s {
            Stmt::Let { var, .. } | Stmt::Assign { var, .. } => out.push(*var),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                assigned_vars(then_body, out);
                assigned_vars(else_body, out);
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => assigned_vars(body, out),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::kernels::bin;
    use lse_dsl::ir::Ty;

    fn u(v: u32) -> Expr {
        Expr::const_u32(v)
    }
    fn var(v: VarId) -> Expr {
        Expr::new(ExprKind::Var(v), Ty::U32)
    }

    #[test]
    fn uniform_pure_expressions() {
        let st = [
            VarStorage::Uniform,
            VarStorage::Private,
            VarStorage::PerItem,
        ];
        let param = Expr::new(ExprKind::Param(0), Ty::U32);
        assert!(uniform_pure(
            &bin(BinOp::Mul, param.clone(), u(4)),
            &st,
            &[]
        ));
        assert!(uniform_pure(
            &Expr::new(ExprKind::Builtin(Builtin::GroupId(1)), Ty::U32),
            &st,
            &[]
        ));
        assert!(!uniform_pure(
            &Expr::new(ExprKind::Builtin(Builtin::LocalId), Ty::U32),
            &st,
            &[]
        ));
        assert!(uniform_pure(&var(0), &st, &[]));
        assert!(!uniform_pure(&var(1), &st, &[]));
        assert!(
            uniform_pure(&var(1), &st, &[1]),
            "variable of an enclosing interchanged loop"
        );
        assert!(!uniform_pure(&var(2), &st, &[]));
        assert!(
            uniform_pure(&bin(BinOp::Div, param.clone(), u(2)), &st, &[]),
            "a constant divisor other than 0 and -1 cannot trap"
        );
        assert!(
            !uniform_pure(&bin(BinOp::Div, u(2), param.clone()), &st, &[]),
            "may trap"
        );
        assert!(!uniform_pure(
            &bin(BinOp::Rem, param.clone(), u(0)),
            &st,
            &[]
        ));
        let load = Expr::new(
            ExprKind::Load {
                buf: 1,
                index: Box::new(u(0)),
            },
            Ty::U32,
        );
        assert!(!uniform_pure(&load, &st, &[]), "reads memory");
    }

    #[test]
    fn loops_that_leave_early_are_not_interchanged() {
        let st = [VarStorage::Private];
        let for_with = |body: Vec<Stmt>| Stmt::For {
            var: 0,
            start: u(0),
            end: u(8),
            step: u(1),
            body,
        };
        assert!(hoistable(&for_with(vec![]), &st, &[]));
        let brk = Stmt::If {
            cond: Expr::const_bool(true),
            then_body: vec![Stmt::Break],
            else_body: vec![],
        };
        assert!(!hoistable(&for_with(vec![brk]), &st, &[]));
        // A `break` of a nested loop is fine.
        let inner = Stmt::While {
            cond: Expr::const_bool(true),
            body: vec![Stmt::Break],
        };
        assert!(hoistable(&for_with(vec![inner]), &st, &[]));
        let nested = Stmt::If {
            cond: Expr::const_bool(true),
            then_body: vec![for_with(vec![])],
            else_body: vec![],
        };
        assert!(wants_split(&[nested], &st, &[]));
        let in_loop = Stmt::While {
            cond: Expr::const_bool(true),
            body: vec![for_with(vec![])],
        };
        assert!(!wants_split(&[in_loop], &st, &[]));
    }
}
