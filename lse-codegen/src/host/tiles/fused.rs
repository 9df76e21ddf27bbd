//! A GEMM's K loop in one pass per register block. A uniform `for` loop whose body only loads
//! the two operands of one register-blocked dot (`vdpbf16ps`, `vpdpwssd`, `vpdpbusd`, `fma`)
//! or AMX dot from buffer windows, both read in place ([`super::View`]), runs as the dot's
//! register blocks (AMX: 2 x 2 blocks of accumulator tiles) with the loop's steps inside
//! each: a block's accumulators stay in registers (tile registers) over the whole K instead
//! of being loaded and stored around every step (a tenth of the bf16 GEMM's time at K steps
//! of 64). The products and their order per element are the loop's, so the results are the
//! same. The register-blocked dots run the steps in chunks whose `b` windows fit in L2
//! ([`CHUNK_BYTES`]), every block through one chunk before the next; AMX runs them in one.
//!
//! The views need every step's windows whole (a partial window is a zero-padded copy, which
//! a step would have to make while the other steps' blocks read theirs): a scalar pass over
//! the steps checks that first, and the loop runs as written when one is not.

use super::{HostPhases, Micro, PackedDot};
use crate::emit::{Emitter, Lowered, WindowVals};
use crate::host::remat::pure;
use lse_dsl::ir::{Expr, ExprKind, Kernel, TileMem, TileOp, TileWindow, Ty, VarId};
use lse_dsl::wil::Phase;

/// The most bytes of `b` windows a chunk of a fused dot's steps reads
/// ([`HostPhases::in_chunks`]): a quarter of Zen 5's L2, an eighth of Sapphire Rapids'.
const CHUNK_BYTES: u32 = 256 * 1024;

/// A loop [`HostPhases::fused_dot`] accepts: `acc += a b` run as `dot`, after the loads.
pub(in crate::host) struct FusedDot {
    /// The loop variable.
    var: VarId,
    acc: usize,
    a: usize,
    b: usize,
    dot: PackedDot,
    /// The loop's constant step.
    step: u32,
    /// The body's loads: the tile each points and its window.
    loads: Vec<(usize, TileWindow)>,
}

/// The steps a fused dot's register blocks run through (`i32` values of the emitted code).
pub(super) struct Steps<'f> {
    dot: &'f FusedDot,
    /// The loop variable's first value.
    start: String,
    /// How many steps (at least 1).
    pub(super) trips: String,
}

impl HostPhases {
    /// The dot `body` holds when a uniform `for` loop with it and a constant `step` may run
    /// fused (the module doc): loads of `a` and `b` from buffer windows whose expressions
    /// read no memory and cannot trap (the check evaluates them ahead of the loop), each
    /// operand loaded once and read in place, then the dot.
    pub(in crate::host) fn fused_dot(
        &self,
        k: &Kernel,
        var: VarId,
        step: &Expr,
        body: &[Phase],
    ) -> Option<FusedDot> {
        let ExprKind::Const(step) = step.kind else {
            return None;
        };
        if step == 0 {
            return None;
        }
        if k.locals.get(var as usize)?.ty != Ty::U32 {
            return None;
        }
        let (
            Phase::Tile(TileOp::Dot {
                acc,
                a,
                b,
                scale: None,
            }),
            loads,
        ) = body.split_last()?
        else {
            return None;
        };
        let [acc, a, b] = [*acc, *a, *b].map(|t| t as usize);
        let dot = self.packed_dot([acc, a, b]).or_else(|| {
            self.fma_dot([acc, a, b])
                .then_some(PackedDot::Blocked(Micro::Fma))
        })?;
        let views = self.tiles[a].view.is_some() && self.tiles[b].view.is_some();
        if !views || a == b || acc == a || acc == b {
            return None;
        }
        let mut windows = Vec::new();
        for phase in loads {
            let Phase::Tile(TileOp::Load { dst, from }) = phase else {
                return None;
            };
            let readable = matches!(from.mem, TileMem::Buffer(_))
                && from.exprs().iter().all(|x| pure(x, &|_| true));
            if !readable || windows.iter().any(|(t, _)| *t == *dst as usize) {
                return None;
            }
            windows.push((*dst as usize, from.clone()));
        }
        let mut loaded: Vec<usize> = windows.iter().map(|(t, _)| *t).collect();
        loaded.sort_unstable();
        (loaded == [a.min(b), a.max(b)]).then_some(FusedDot {
            var,
            acc,
            a,
            b,
            dot,
            step,
            loads: windows,
        })
    }

    /// `for var in (start..end).step_by(f.step) { body }` with `body` accepted by
    /// [`HostPhases::fused_dot`]: fused when every step's windows are whole, else as written.
    pub(in crate::host) fn fused_dot_loop(
        &mut self,
        e: &mut Emitter,
        [start, end, step]: [&Expr; 3],
        f: &FusedDot,
        body: &[Phase],
    ) -> Lowered<()> {
        let var = f.var;
        let sv = self.uniform(e, start)?;
        let ev = self.uniform(e, end)?;
        let any = e.b.op(format!("icmp ult i32 {sv}, {ev}"));
        e.if_else(&any, &mut |e, some| {
            if !some {
                // No steps: the loop would only set its variable.
                return e.write_var(var, &sv);
            }
            let span = e.b.op(format!("sub nuw i32 {ev}, {sv}"));
            let last = e.b.op(format!("sub nuw i32 {span}, 1"));
            let q = e.b.op(format!("udiv i32 {last}, {}", f.step));
            let steps = Steps {
                dot: f,
                start: sv.clone(),
                trips: e.b.op(format!("add nuw i32 {q}, 1")),
            };
            let whole = self.all_windows_whole(e, &steps)?;
            e.if_else(&whole, &mut |e, fused| {
                if !fused {
                    e.for_loop(var, start, end, step, &mut |e| self.phases(e, body))
                } else if let PackedDot::Blocked(micro) = f.dot {
                    self.in_chunks(e, &steps, &mut |h, e, chunk| {
                        h.blocked_dot(e, [f.acc, f.a, f.b], None, micro, Some(chunk))
                    })
                } else {
                    self.amx_dot(e, [f.acc, f.a, f.b], Some(&steps))
                }
            })
        })
    }

    /// Runs `body` over `steps` in chunks of consecutive steps whose `b` windows take at most
    /// [`CHUNK_BYTES`] together, each chunk a [`Steps`] of its own: every register block of
    /// the dot reads the whole of `b` over the steps it runs, so a chunk's `b` stays in L2
    /// for the next block (at K = 3584 the f32-activation GEMM's `xt` block, 917 KiB,
    /// streamed from L3 once per block, at 64 to 75% of the `fma` peak). A register block
    /// loads its accumulators before its steps and stores them after, so the products and
    /// their order per element are those of one pass over every step.
    fn in_chunks(
        &mut self,
        e: &mut Emitter,
        steps: &Steps,
        body: &mut dyn FnMut(&mut Self, &mut Emitter, &Steps) -> Lowered<()>,
    ) -> Lowered<()> {
        let b = &self.tiles[steps.dot.b].decl;
        let per_chunk = (CHUNK_BYTES / (b.rows * b.cols * b.elem.size_bytes())).max(1);
        let last = e.b.op(format!("sub nuw i32 {}, 1", steps.trips));
        let q = e.b.op(format!("udiv i32 {last}, {per_chunk}"));
        let chunks = e.b.op(format!("add nuw i32 {q}, 1"));
        let mut result = Ok(());
        e.carried_loop(&chunks, "i32", &[], |e, c, _| {
            let first = e.b.op(format!("mul nuw i32 {c}, {per_chunk}"));
            let left = e.b.op(format!("sub nuw i32 {}, {first}", steps.trips));
            let fewer = e.b.op(format!("icmp ult i32 {left}, {per_chunk}"));
            let trips =
                e.b.op(format!("select i1 {fewer}, i32 {left}, i32 {per_chunk}"));
            let skip = e.b.op(format!("mul nuw i32 {first}, {}", steps.dot.step));
            let chunk = Steps {
                dot: steps.dot,
                start: e.b.op(format!("add nuw i32 {}, {skip}", steps.start)),
                trips,
            };
            let r = body(self, e, &chunk);
            if result.is_ok() {
                result = r;
            }
            Vec::new()
        });
        result
    }

    /// Whether every step's windows cover their tiles (an `i1`).
    fn all_windows_whole(&mut self, e: &mut Emitter, steps: &Steps) -> Lowered<String> {
        let mut result = Ok(());
        let all = e.carried_loop(&steps.trips, "i1", &["true".into()], |e, i, cur| match self
            .step_windows(e, steps, i)
        {
            Ok(windows) => {
                let mut all = cur[0].clone();
                for ((t, _), w) in steps.dot.loads.iter().zip(&windows) {
                    let (rows, cols) = (self.tiles[*t].decl.rows, self.tiles[*t].decl.cols);
                    let r = e.b.op(format!("icmp uge i32 {}, {rows}", w.rows));
                    let c = e.b.op(format!("icmp uge i32 {}, {cols}", w.cols));
                    let both = e.b.op(format!("and i1 {r}, {c}"));
                    all = e.b.op(format!("and i1 {all}, {both}"));
                }
                vec![all]
            }
            Err(why) => {
                result = Err(why);
                cur.to_vec()
            }
        });
        result.map(|()| all[0].clone())
    }

    /// Sets the loop variable to step `i` and evaluates the loads' windows there.
    fn step_windows(
        &mut self,
        e: &mut Emitter,
        steps: &Steps,
        i: &str,
    ) -> Lowered<Vec<WindowVals>> {
        set_step(e, steps, i)?;
        steps
            .dot
            .loads
            .iter()
            .map(|(_, from)| e.tile_window(from, &mut |e, x| self.uniform(e, x)))
            .collect()
    }

    /// The window tile `t` loads at step `i` (the loop variable set there), if the loop
    /// loads it.
    pub(super) fn step_window(
        &mut self,
        e: &mut Emitter,
        steps: &Steps,
        t: usize,
        i: &str,
    ) -> Lowered<Option<WindowVals>> {
        let Some((_, from)) = steps.dot.loads.iter().find(|(l, _)| *l == t) else {
            return Ok(None);
        };
        set_step(e, steps, i)?;
        e.tile_window(from, &mut |e, x| self.uniform(e, x))
            .map(Some)
    }

    /// Points the operands' views at step `i`'s windows (whole: [`Self::all_windows_whole`]).
    pub(super) fn point_step(&mut self, e: &mut Emitter, steps: &Steps, i: &str) -> Lowered<()> {
        let windows = self.step_windows(e, steps, i)?;
        for ((t, _), w) in steps.dot.loads.iter().zip(&windows) {
            self.point_view(e, *t, w, true);
        }
        Ok(())
    }
}

/// Sets the loop variable of `steps`' loop to step `i`.
fn set_step(e: &mut Emitter, steps: &Steps, i: &str) -> Lowered<()> {
    let off = e.b.op(format!("mul nuw i32 {i}, {}", steps.dot.step));
    let at = e.b.op(format!("add nuw i32 {}, {off}", steps.start));
    e.write_var(steps.dot.var, &at)
}
