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

use crate::ir::{Block, CollectiveOp, Expr, Kernel, VarId};

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
    If { cond: Expr, then_phases: Vec<Phase>, else_phases: Vec<Phase> },
    /// Uniform `for` containing barriers or collectives; bounds evaluated as work-item 0, `var`
    /// has [`VarStorage::Uniform`].
    For { var: VarId, start: Expr, end: Expr, step: Expr, body: Vec<Phase> },
    /// Uniform `while` containing barriers or collectives; `cond` evaluated as work-item 0
    /// before each iteration.
    While { cond: Expr, body: Vec<Phase> },
    /// A collective: evaluate `args` for every work-item, combine (the tree order in
    /// [`crate::ir`]), and assign the result to `dst` for every work-item.
    Collective { op: CollectiveOp, dst: Vec<VarId>, args: Vec<Expr> },
}

/// A kernel in work-item-loop form.
#[derive(Clone, Debug)]
pub struct WilKernel<'k> {
    pub kernel: &'k Kernel,
    /// Indexed by [`VarId`].
    pub storage: Vec<VarStorage>,
    pub phases: Vec<Phase>,
}
