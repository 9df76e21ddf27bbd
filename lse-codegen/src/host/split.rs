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

use lse_dsl::ir::{Access, BinOp, Builtin, Expr, ExprKind, Param, Stmt, VarId};
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

/// The `let`s of a split region that stay one scalar for the workgroup instead of moving to
/// per-work-item slots: each is its variable's only assignment in `block`, every work-item
/// runs it (it sits in `block` or in the bodies of loops [`hoistable`] interchanges, under no
/// `if`), and its value is the same for every work-item: built from constants, scalar
/// parameters, builtins other than `local_id()`, the variables of enclosing interchanged
/// loops, uniform variables, earlier such lets, and reads of read-only buffers at such
/// indices. The host lowering evaluates each once, as work-item 0, where it stands (every
/// work-item would have evaluated the same reads and operations), so the work-item loops
/// after it read one value: `x[src + i]` with `let src = rows[r] * h;` is then a vector load,
/// where a per-work-item `src` made it a gather.
pub(super) fn uniform_lets(block: &[Stmt], storage: &[VarStorage], params: &[Param]) -> Vec<VarId> {
    let mut assigned = Vec::new();
    assigned_vars(block, &mut assigned);
    let once = |v: VarId| assigned.iter().filter(|&&a| a == v).count() == 1;
    let mut found = Vec::new();
    collect_uniform_lets(block, storage, params, &mut Vec::new(), &once, &mut found);
    found
}

fn collect_uniform_lets(
    block: &[Stmt],
    storage: &[VarStorage],
    params: &[Param],
    hoisted: &mut Vec<VarId>,
    once: &dyn Fn(VarId) -> bool,
    found: &mut Vec<VarId>,
) {
    for s in block {
        match s {
            Stmt::Let { var, value }
                if storage.get(*var as usize) == Some(&VarStorage::Private)
                    && once(*var)
                    && uniform_value(value, storage, params, hoisted, found) =>
            {
                found.push(*var)
            }
            Stmt::For { var, body, .. } if hoistable(s, storage, hoisted) => {
                hoisted.push(*var);
                collect_uniform_lets(body, storage, params, hoisted, once, found);
                hoisted.pop();
            }
            _ => {}
        }
    }
}

/// Whether `e` has one value for the whole workgroup, reads included (see [`uniform_lets`]).
fn uniform_value(
    e: &Expr,
    storage: &[VarStorage],
    params: &[Param],
    hoisted: &[VarId],
    lets: &[VarId],
) -> bool {
    let rec = |x: &Expr| uniform_value(x, storage, params, hoisted, lets);
    match &e.kind {
        ExprKind::Const(_) | ExprKind::Param(_) => true,
        ExprKind::Builtin(b) => !matches!(b, Builtin::LocalId),
        ExprKind::Var(v) => {
            hoisted.contains(v)
                || lets.contains(v)
                || storage.get(*v as usize) == Some(&VarStorage::Uniform)
        }
        ExprKind::Load { buf, index } => {
            let read_only = matches!(
                params.get(*buf as usize),
                Some(Param::Buffer {
                    access: Access::Read,
                    ..
                })
            );
            read_only && rec(index)
        }
        ExprKind::SharedLoad { .. } => false,
        ExprKind::Unary(_, a) | ExprKind::Cast(a) => rec(a),
        ExprKind::Binary(_, a, b) => rec(a) && rec(b),
        ExprKind::Math(_, args) => args.iter().all(rec),
        ExprKind::Select(c, a, b) => rec(c) && rec(a) && rec(b),
    }
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

    #[test]
    fn uniform_lets_are_single_lets_of_workgroup_values_every_work_item_runs() {
        use crate::tests::kernels::{buffer, builtin, scalar};
        use lse_dsl::ir::Access;
        let params = [
            buffer("rows", Ty::U32, Access::Read),
            buffer("out", Ty::U32, Access::ReadWrite),
            scalar("h", Ty::U32),
        ];
        let load = |buf, index| crate::tests::kernels::load(buf, index, Ty::U32);
        let group = builtin(Builtin::GroupId(0));
        let lid = builtin(Builtin::LocalId);
        let h = Expr::new(ExprKind::Param(2), Ty::U32);
        let set = |var, value| Stmt::Let { var, value };
        let for_each = |var, end, body| Stmt::For {
            var,
            start: u(0),
            end,
            step: u(1),
            body,
        };
        let st = [VarStorage::Private; 10];
        // 0: a read-only buffer at the group's index; 1: from 0 and a parameter; 2: inside an
        // interchanged loop, from its variable (3); 4: a read-write buffer's element; 5: the
        // work-item's id; 6: under an `if`; 7: assigned again; 8: in a loop whose bound is
        // read from memory (not interchanged).
        let block = vec![
            set(0, load(0, group.clone())),
            set(1, bin(BinOp::Mul, var(0), h.clone())),
            for_each(3, h.clone(), vec![set(2, load(0, var(3)))]),
            set(4, load(1, group.clone())),
            set(5, bin(BinOp::Add, var(0), lid)),
            Stmt::If {
                cond: Expr::const_bool(true),
                then_body: vec![set(6, load(0, u(0)))],
                else_body: vec![],
            },
            set(7, u(1)),
            Stmt::Assign {
                var: 7,
                value: u(2),
            },
            for_each(9, load(0, u(0)), vec![set(8, u(3))]),
        ];
        assert_eq!(uniform_lets(&block, &st, &params), vec![0, 1, 2]);
        // A variable read by a later region lives per work-item whatever its value.
        let mut per_item = st;
        per_item[0] = VarStorage::PerItem;
        assert_eq!(uniform_lets(&block, &per_item, &params), vec![2]);
    }
}
