//! The work-item-loop transform: how a SIMT kernel body runs on one CPU thread.
//!
//! A workgroup's work-items run in lock-step only at barriers and collectives, so the body is
//! split there into barrier-free *regions*; each region runs as a loop over the work-items
//! (`for lid in 0..wg`). Uniform control flow that contains barriers or collectives (checked
//! uniform by the front end) becomes a *phase* evaluated once per workgroup, and its
//! condition or bounds are read from work-item 0. Variables whose value must survive from
//! one region to another live in per-work-item arrays; the rest stay scalars inside their
//! region, which is what lets LLVM vectorise a region across work-items (the PoCL
//! work-item-loop transform). Both CPU lowerings (generated Rust and LLVM host code) consume
//! this one structure, so they cannot disagree about the schedule.

use crate::ir::{Block, CollectiveOp, Expr, ExprKind, Kernel, Stmt, TileOp, VarId};

/// Where a kernel variable lives on the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarStorage {
    /// Defined and used inside a single region: a plain scalar in that region's loop body.
    Private,
    /// Crosses a region boundary: an array with one slot per work-item.
    PerItem,
    /// The variable of a uniform phase loop (`Phase::For`): one value per workgroup.
    Uniform,
}

/// One step of a workgroup's schedule on the CPU.
#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    /// Barrier-free statements, run for every work-item `lid = 0..wg` in order. May contain
    /// any control flow, including `break`/`continue` of loops that are inside the region.
    Region(Block),
    /// Uniform `if` containing barriers or collectives; `cond` is evaluated as work-item 0.
    If {
        cond: Expr,
        then_phases: Vec<Phase>,
        else_phases: Vec<Phase>,
    },
    /// Uniform `for` containing barriers or collectives; bounds evaluated as work-item 0, `var`
    /// has [`VarStorage::Uniform`].
    For {
        var: VarId,
        start: Expr,
        end: Expr,
        step: Expr,
        body: Vec<Phase>,
    },
    /// Uniform `while` containing barriers or collectives; `cond` evaluated as work-item 0
    /// before each iteration.
    While { cond: Expr, body: Vec<Phase> },
    /// A collective: evaluate `args` for every work-item, combine (the tree order in
    /// [`crate::ir`]), and assign the result to `dst` for every work-item.
    Collective {
        op: CollectiveOp,
        dst: Vec<VarId>,
        args: Vec<Expr>,
    },
    /// A tile statement, done once for the workgroup; its window expressions are evaluated
    /// as work-item 0 (the front end has checked they are uniform).
    Tile(TileOp),
}

/// A kernel in work-item-loop form.
#[derive(Clone, Debug)]
pub struct WilKernel<'k> {
    pub kernel: &'k Kernel,
    /// Indexed by [`VarId`].
    pub storage: Vec<VarStorage>,
    pub phases: Vec<Phase>,
}

/// Splits `k`'s body into phases and decides where each variable lives (see the module doc).
///
/// Barriers only separate regions and vanish; collectives become [`Phase::Collective`];
/// `if`/`for`/`while` statements that (transitively) contain a barrier or collective become
/// phases (the front end has checked they are uniform); all other statements are grouped into
/// maximal [`Phase::Region`]s. Storage: the variable of a phase `for` is
/// [`VarStorage::Uniform`]; a variable that appears in phase conditions or bounds, in
/// collective arguments or destinations, or in more than one region is
/// [`VarStorage::PerItem`]; everything else is [`VarStorage::Private`].
pub fn transform(k: &Kernel) -> WilKernel<'_> {
    let phases = split_block(&k.body);
    let storage = compute_storage(k.locals.len(), &phases);
    WilKernel {
        kernel: k,
        storage,
        phases,
    }
}

/// Whether a statement is or contains a barrier or collective.
fn has_sync(s: &Stmt) -> bool {
    match s {
        Stmt::Barrier | Stmt::Collective { .. } | Stmt::Tile(_) => true,
        Stmt::If {
            then_body,
            else_body,
            ..
        } => then_body.iter().any(has_sync) || else_body.iter().any(has_sync),
        Stmt::For { body, .. } | Stmt::While { body, .. } => body.iter().any(has_sync),
        _ => false,
    }
}

/// Turns one structured block into its phase list.
fn split_block(block: &Block) -> Vec<Phase> {
    let mut phases = Vec::new();
    let mut region: Block = Vec::new();
    for s in block {
        if !has_sync(s) {
            region.push(s.clone());
            continue;
        }
        if !region.is_empty() {
            phases.push(Phase::Region(std::mem::take(&mut region)));
        }
        match s {
            Stmt::Barrier => {}
            Stmt::Collective { op, dst, args } => phases.push(Phase::Collective {
                op: *op,
                dst: dst.clone(),
                args: args.clone(),
            }),
            Stmt::Tile(op) => phases.push(Phase::Tile(op.clone())),
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => phases.push(Phase::If {
                cond: cond.clone(),
                then_phases: split_block(then_body),
                else_phases: split_block(else_body),
            }),
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => phases.push(Phase::For {
                var: *var,
                start: start.clone(),
                end: end.clone(),
                step: step.clone(),
                body: split_block(body),
            }),
            Stmt::While { cond, body } => phases.push(Phase::While {
                cond: cond.clone(),
                body: split_block(body),
            }),
            // has_sync is false for every other statement.
            _ => unreachable!("statement without barrier classified as phase"),
        }
    }
    if !region.is_empty() {
        phases.push(Phase::Region(region));
    }
    phases
}

/// Where each variable has been seen so far.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    Nowhere,
    /// Only in the region with this number.
    Region(usize),
    /// In several regions, or in a phase condition/bound/collective.
    Shared,
    /// Variable of a phase loop.
    Uniform,
}

struct StorageWalk {
    seen: Vec<Seen>,
    region_count: usize,
}

impl StorageWalk {
    fn mark_region(&mut self, v: VarId, region: usize) {
        let slot = &mut self.seen[v as usize];
        *slot = match *slot {
            Seen::Nowhere => Seen::Region(region),
            Seen::Region(r) if r == region => Seen::Region(r),
            Seen::Uniform => Seen::Uniform,
            _ => Seen::Shared,
        };
    }

    fn mark_phase(&mut self, v: VarId) {
        let slot = &mut self.seen[v as usize];
        if *slot != Seen::Uniform {
            *slot = Seen::Shared;
        }
    }

    fn phase_expr(&mut self, e: &Expr) {
        let mut vars = Vec::new();
        expr_vars(e, &mut vars);
        for v in vars {
            self.mark_phase(v);
        }
    }

    fn phases(&mut self, phases: &[Phase]) {
        for p in phases {
            match p {
                Phase::Region(block) => {
                    let region = self.region_count;
                    self.region_count += 1;
                    let mut vars = Vec::new();
                    block_vars(block, &mut vars);
                    for v in vars {
                        self.mark_region(v, region);
                    }
                }
                Phase::If {
                    cond,
                    then_phases,
                    else_phases,
                } => {
                    self.phase_expr(cond);
                    self.phases(then_phases);
                    self.phases(else_phases);
                }
                Phase::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    self.seen[*var as usize] = Seen::Uniform;
                    self.phase_expr(start);
                    self.phase_expr(end);
                    self.phase_expr(step);
                    self.phases(body);
                }
                Phase::While { cond, body } => {
                    self.phase_expr(cond);
                    self.phases(body);
                }
                Phase::Collective { dst, args, .. } => {
                    for &d in dst {
                        self.mark_phase(d);
                    }
                    for a in args {
                        self.phase_expr(a);
                    }
                }
                Phase::Tile(op) => {
                    for e in op.exprs() {
                        self.phase_expr(e);
                    }
                }
            }
        }
    }
}

fn compute_storage(n_locals: usize, phases: &[Phase]) -> Vec<VarStorage> {
    let mut walk = StorageWalk {
        seen: vec![Seen::Nowhere; n_locals],
        region_count: 0,
    };
    // Phase-loop variables are uniform wherever they are used, so find them first.
    mark_uniform(phases, &mut walk.seen);
    walk.phases(phases);
    walk.seen
        .iter()
        .map(|s| match s {
            Seen::Nowhere | Seen::Region(_) => VarStorage::Private,
            Seen::Shared => VarStorage::PerItem,
            Seen::Uniform => VarStorage::Uniform,
        })
        .collect()
}

fn mark_uniform(phases: &[Phase], seen: &mut [Seen]) {
    for p in phases {
        match p {
            Phase::For { var, body, .. } => {
                seen[*var as usize] = Seen::Uniform;
                mark_uniform(body, seen);
            }
            Phase::If {
                then_phases,
                else_phases,
                ..
            } => {
                mark_uniform(then_phases, seen);
                mark_uniform(else_phases, seen);
            }
            Phase::While { body, .. } => mark_uniform(body, seen),
            Phase::Region(_) | Phase::Collective { .. } | Phase::Tile(_) => {}
        }
    }
}

/// Every variable a block defines, assigns or reads (with repeats).
pub fn block_vars(block: &Block, out: &mut Vec<VarId>) {
    for s in block {
        match s {
            Stmt::Let { var, value } | Stmt::Assign { var, value } => {
                out.push(*var);
                expr_vars(value, out);
            }
            Stmt::Store { index, value, .. } | Stmt::SharedStore { index, value, .. } => {
                expr_vars(index, out);
                expr_vars(value, out);
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                expr_vars(cond, out);
                block_vars(then_body, out);
                block_vars(else_body, out);
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                out.push(*var);
                expr_vars(start, out);
                expr_vars(end, out);
                expr_vars(step, out);
                block_vars(body, out);
            }
            Stmt::While { cond, body } => {
                expr_vars(cond, out);
                block_vars(body, out);
            }
            Stmt::Collective { dst, args, .. } => {
                out.extend(dst.iter().copied());
                for a in args {
                    expr_vars(a, out);
                }
            }
            Stmt::Tile(op) => {
                for e in op.exprs() {
                    expr_vars(e, out);
                }
            }
            Stmt::Break | Stmt::Continue | Stmt::Barrier => {}
        }
    }
}

/// Every variable an expression reads (with repeats).
pub fn expr_vars(e: &Expr, out: &mut Vec<VarId>) {
    match &e.kind {
        ExprKind::Var(v) => out.push(*v),
        ExprKind::Const(_) | ExprKind::Param(_) | ExprKind::Builtin(_) => {}
        ExprKind::Load { index, .. } | ExprKind::SharedLoad { index, .. } => expr_vars(index, out),
        ExprKind::Unary(_, a) | ExprKind::Cast(a) => expr_vars(a, out),
        ExprKind::Binary(_, a, b) => {
            expr_vars(a, out);
            expr_vars(b, out);
        }
        ExprKind::Math(_, args) => {
            for a in args {
                expr_vars(a, out);
            }
        }
        ExprKind::Select(c, a, b) => {
            expr_vars(c, out);
            expr_vars(a, out);
            expr_vars(b, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{BinOp, Builtin, Local, Ty};

    fn kernel(n_locals: usize, body: Block) -> Kernel {
        Kernel {
            fn_name: "k".into(),
            name: "test.k".into(),
            version: 1,
            workgroup_size: 4,
            subgroup: None,
            targets: vec![],
            params: vec![],
            shared: vec![],
            tiles: vec![],
            locals: (0..n_locals)
                .map(|i| Local {
                    name: format!("v{i}"),
                    ty: Ty::U32,
                })
                .collect(),
            body,
        }
    }

    fn var(v: VarId) -> Expr {
        Expr::new(ExprKind::Var(v), Ty::U32)
    }

    fn lid() -> Expr {
        Expr::new(ExprKind::Builtin(Builtin::LocalId), Ty::U32)
    }

    fn add(a: Expr, b: Expr) -> Expr {
        Expr::new(
            ExprKind::Binary(BinOp::Add, Box::new(a), Box::new(b)),
            Ty::U32,
        )
    }

    fn let_(v: VarId, e: Expr) -> Stmt {
        Stmt::Let { var: v, value: e }
    }

    fn for_(v: VarId, end: Expr, body: Block) -> Stmt {
        Stmt::For {
            var: v,
            start: Expr::const_u32(0),
            end,
            step: Expr::const_u32(1),
            body,
        }
    }

    fn sum(dst: VarId, arg: Expr) -> Stmt {
        Stmt::Collective {
            op: CollectiveOp::ReduceSum,
            dst: vec![dst],
            args: vec![arg],
        }
    }

    fn region_len(p: &Phase) -> usize {
        match p {
            Phase::Region(b) => b.len(),
            other => panic!("expected a region, got {other:?}"),
        }
    }

    #[test]
    fn barrier_free_body_is_one_region_of_private_vars() {
        let k = kernel(
            2,
            vec![
                let_(0, lid()),
                let_(1, add(var(0), var(0))),
                for_(1, var(0), vec![Stmt::Break]),
            ],
        );
        let w = transform(&k);
        assert_eq!(w.phases.len(), 1);
        assert_eq!(region_len(&w.phases[0]), 3);
        assert_eq!(w.storage, vec![VarStorage::Private; 2]);
    }

    #[test]
    fn barriers_split_regions_and_disappear() {
        // let a = lid; barrier; barrier; let b = 1; b += a (a crosses a barrier).
        let k = kernel(
            2,
            vec![
                let_(0, lid()),
                Stmt::Barrier,
                Stmt::Barrier,
                let_(1, Expr::const_u32(1)),
                Stmt::Assign {
                    var: 1,
                    value: add(var(1), var(0)),
                },
                Stmt::Barrier,
            ],
        );
        let w = transform(&k);
        assert_eq!(w.phases.len(), 2);
        assert_eq!(region_len(&w.phases[0]), 1);
        assert_eq!(region_len(&w.phases[1]), 2);
        assert_eq!(w.storage, vec![VarStorage::PerItem, VarStorage::Private]);
    }

    #[test]
    fn nested_uniform_loops_with_barriers_become_phases() {
        // for i in 0..4 { let x = lid + i; for j in 0..i { barrier; let y = j; } barrier;
        //   let z = x; } ; a plain loop without barrier stays in a region.
        let k = kernel(
            6,
            vec![
                for_(
                    0,
                    Expr::const_u32(4),
                    vec![
                        let_(1, add(lid(), var(0))),
                        for_(2, var(0), vec![Stmt::Barrier, let_(3, var(2))]),
                        Stmt::Barrier,
                        let_(4, var(1)),
                    ],
                ),
                for_(5, Expr::const_u32(3), vec![Stmt::Continue]),
            ],
        );
        let w = transform(&k);
        assert_eq!(w.phases.len(), 2);
        let Phase::For { var: 0, body, .. } = &w.phases[0] else {
            panic!("outer loop should be a phase: {:?}", w.phases[0]);
        };
        assert_eq!(body.len(), 3);
        assert_eq!(region_len(&body[0]), 1);
        let Phase::For {
            var: 2,
            body: inner,
            ..
        } = &body[1]
        else {
            panic!("inner loop should be a phase: {:?}", body[1]);
        };
        assert_eq!(inner.len(), 1);
        assert_eq!(region_len(&inner[0]), 1);
        assert_eq!(region_len(&body[2]), 1);
        assert_eq!(region_len(&w.phases[1]), 1);
        use VarStorage::*;
        assert_eq!(
            w.storage,
            vec![Uniform, PerItem, Uniform, Private, Private, Private]
        );
    }

    #[test]
    fn collectives_inside_uniform_for_make_args_and_dsts_per_item() {
        // let a = lid; for i in 0..n { let s = reduce_sum(a + i); let t = s; }
        // while c { let m = reduce_sum(1); c = m < 3 } with c defined in the first region.
        let k = kernel(
            6,
            vec![
                let_(0, lid()),
                let_(5, Expr::const_bool(true)),
                for_(
                    1,
                    Expr::const_u32(8),
                    vec![sum(2, add(var(0), var(1))), let_(3, var(2))],
                ),
                Stmt::While {
                    cond: var(5),
                    body: vec![
                        sum(4, Expr::const_u32(1)),
                        Stmt::Assign {
                            var: 5,
                            value: Expr::new(
                                ExprKind::Binary(
                                    BinOp::Lt,
                                    Box::new(var(4)),
                                    Box::new(Expr::const_u32(3)),
                                ),
                                Ty::Bool,
                            ),
                        },
                    ],
                },
            ],
        );
        let w = transform(&k);
        assert_eq!(w.phases.len(), 3);
        assert_eq!(region_len(&w.phases[0]), 2);
        let Phase::For { body, .. } = &w.phases[1] else {
            panic!("{:?}", w.phases[1])
        };
        assert!(matches!(
            body[0],
            Phase::Collective {
                op: CollectiveOp::ReduceSum,
                ..
            }
        ));
        assert_eq!(region_len(&body[1]), 1);
        let Phase::While { body, .. } = &w.phases[2] else {
            panic!("{:?}", w.phases[2])
        };
        assert!(matches!(body[0], Phase::Collective { .. }));
        use VarStorage::*;
        assert_eq!(
            w.storage,
            vec![PerItem, Uniform, PerItem, Private, PerItem, PerItem]
        );
    }

    #[test]
    fn uniform_if_with_barrier_splits_both_branches() {
        let k = kernel(
            2,
            vec![Stmt::If {
                cond: Expr::const_bool(true),
                then_body: vec![let_(0, lid()), Stmt::Barrier, let_(1, var(0))],
                else_body: vec![let_(1, Expr::const_u32(0))],
            }],
        );
        let w = transform(&k);
        let [Phase::If {
            then_phases,
            else_phases,
            ..
        }] = w.phases.as_slice()
        else {
            panic!("{:?}", w.phases)
        };
        assert_eq!(then_phases.len(), 2);
        assert_eq!(else_phases.len(), 1);
        // v1 is defined in a region of each branch: two regions.
        assert_eq!(w.storage, vec![VarStorage::PerItem, VarStorage::PerItem]);
    }
}
