//! GPU lowering of the tile statements (AMDGPU and NVPTX): every tile is a row-major LDS /
//! shared-memory array, zero-filled when the kernel starts; each statement is a loop in which
//! work-item `lid` handles elements `lid, lid + wg, ...`, between two barriers. `tile_dot`
//! gives each work-item whole output elements and sums their K products in increasing k with
//! `fma`, the reference order, so GPUs agree with the generated Rust bit for bit, unless the
//! target's matrix unit takes the dot ([`super::matrix`]: 16-bit operands, shapes that are
//! multiples of the instruction's), which sums in the hardware's order.

use super::matrix::{self, MatrixUnit};
use crate::emit::{convert, lty, tile_binary, Emitter, Lowered};
use lse_dsl::ir::{Kernel, TileOp, TileWindow, Ty};

/// The name of tile `t`'s shared-memory array, when tiles are globals of their own.
pub(super) fn global(t: u32) -> String {
    format!("@loom_tile_{t}")
}

/// The module globals of `k`'s tiles.
pub(crate) fn globals(k: &Kernel) -> String {
    k.tiles
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "{} = internal addrspace(3) global [{} x {}] undef, align 16\n",
                global(i as u32),
                t.len(),
                lty(t.elem)
            )
        })
        .collect()
}

/// Zero-fills every tile, then synchronises (the kernel's first statements).
pub(crate) fn zero_all(e: &mut Emitter, wg: u32, barrier: fn(&mut Emitter)) {
    if e.k.tiles.is_empty() {
        return;
    }
    for t in 0..e.k.tiles.len() as u32 {
        zero(e, wg, t);
    }
    barrier(e);
}

fn zero(e: &mut Emitter, wg: u32, t: u32) {
    let len = e.k.tiles[t as usize].len();
    lane_loop(e, wg, len, &mut |e, i| {
        let z = if e.k.tiles[t as usize].elem == Ty::F32 {
            "0.0"
        } else {
            "0"
        };
        write(e, t, i, z);
    });
}

/// Lowers one tile statement between two barriers; a dot goes to `unit` when it fits
/// ([`matrix::fits`]).
pub(crate) fn lower(
    e: &mut Emitter,
    wg: u32,
    barrier: fn(&mut Emitter),
    unit: Option<MatrixUnit>,
    op: &TileOp,
) -> Lowered<()> {
    barrier(e);
    match op {
        TileOp::Zero { dst } => zero(e, wg, *dst),
        TileOp::Load { dst, from } => copy(e, wg, *dst, from, false)?,
        TileOp::Store { src, to } => copy(e, wg, *src, to, true)?,
        TileOp::Dot { acc, a, b, scale } => {
            let tiles = matrix::DotTiles {
                acc: *acc,
                a: *a,
                b: *b,
            };
            match dot_unit(e, unit, wg, &tiles).filter(|_| scale.is_none()) {
                Some((unit, shape)) => matrix::lower_dot(e, unit, wg, &shape, &tiles),
                None => portable_dot(e, wg, &tiles, *scale),
            }
        }
        TileOp::Binary { op, dst, src } => {
            let (op, d, s) = (*op, *dst, *src);
            let cols = e.k.tiles[d as usize].cols;
            let (s_rows, s_cols) = (e.k.tiles[s as usize].rows, e.k.tiles[s as usize].cols);
            each_element(e, wg, d, &mut |e, i| {
                // The source element of a broadcast: its row or column index is 0.
                let si = match (s_rows, s_cols) {
                    (1, 1) => "0".to_string(),
                    (1, _) => e.b.op(format!("urem i32 {i}, {cols}")),
                    (_, 1) => e.b.op(format!("udiv i32 {i}, {cols}")),
                    _ => i.to_string(),
                };
                let x = read(e, d, i);
                let y = read(e, s, &si);
                let v = tile_binary(&mut e.b, op, &x, &y);
                write(e, d, i, &v);
            });
        }
        TileOp::RowReduce { op, dst, src } => {
            let (op, d, s) = (*op, *dst, *src);
            let (rows, cols) = (e.k.tiles[s as usize].rows, e.k.tiles[s as usize].cols);
            lane_loop(e, wg, rows, &mut |e, r| {
                let init = read(e, d, r);
                let row = e.b.op(format!("mul nuw i32 {r}, {cols}"));
                let v = e.carried_loop(cols, "float", &[init], |e, c, acc| {
                    let i = e.b.op(format!("add nuw i32 {row}, {c}"));
                    let y = read(e, s, &i);
                    vec![tile_binary(&mut e.b, op, &acc[0], &y)]
                });
                write(e, d, r, &v[0]);
            });
        }
        TileOp::Exp { dst } => {
            let d = *dst;
            each_element(e, wg, d, &mut |e, i| {
                let x = read(e, d, i);
                let v = crate::math::call(&mut e.b, crate::math::EXP_FN, &x);
                write(e, d, i, &v);
            });
        }
        TileOp::Scale { dst, by } => {
            let d = *dst;
            let by = e.expr(by)?;
            each_element(e, wg, d, &mut |e, i| {
                let x = read(e, d, i);
                let v = e.b.op(format!("fmul float {x}, {by}"));
                write(e, d, i, &v);
            });
        }
        TileOp::Copy { dst, src } => {
            let (d, s) = (*dst, *src);
            let to = e.k.tiles[d as usize].elem;
            each_element(e, wg, d, &mut |e, i| {
                let x = read(e, s, i);
                let v = convert(&mut e.b, &x, Ty::F32, to);
                write(e, d, i, &v);
            });
        }
    }
    barrier(e);
    Ok(())
}

/// `body(i)` for every element index `i` of tile `t`, spread over the work-items.
fn each_element(e: &mut Emitter, wg: u32, t: u32, body: &mut dyn FnMut(&mut Emitter, &str)) {
    let len = e.k.tiles[t as usize].len();
    lane_loop(e, wg, len, body);
}

/// `acc += a · b` in the reference order: each work-item owns whole output elements and adds
/// their K products in increasing k with `fma` (integer operands: exact products added in
/// wrapping i32, times the column's `scale` when there is one, then added to `acc`).
fn portable_dot(e: &mut Emitter, wg: u32, t: &matrix::DotTiles, scale: Option<u32>) {
    let (m_n, n, k, int) = {
        let (c, x) = (&e.k.tiles[t.acc as usize], &e.k.tiles[t.a as usize]);
        (c.len(), c.cols, x.cols, c.elem == Ty::I32)
    };
    let (acc, a, b) = (t.acc, t.a, t.b);
    // An operand element as the accumulator's type.
    let operand = |e: &mut Emitter, t: u32, i: &str| {
        if int {
            let v = read_raw(e, t, i);
            let elem = e.k.tiles[t as usize].elem;
            convert(&mut e.b, &v, elem, Ty::I32)
        } else {
            read(e, t, i)
        }
    };
    lane_loop(e, wg, m_n, &mut |e, i| {
        let m = e.b.op(format!("udiv i32 {i}, {n}"));
        let j = e.b.op(format!("urem i32 {i}, {n}"));
        let old = read_raw(e, acc, i);
        let acc_ty = lty(e.k.tiles[acc as usize].elem);
        // A scaled dot sums its products from 0 and adds the scaled sum to `acc` at the end.
        let init = if scale.is_some() { "0" } else { old.as_str() };
        let s = e.carried_loop(k, acc_ty, &[init.to_string()], |e, kk, s| {
            let s = &s[0];
            let ra = e.b.op(format!("mul nuw i32 {m}, {k}"));
            let ia = e.b.op(format!("add nuw i32 {ra}, {kk}"));
            let rb = e.b.op(format!("mul nuw i32 {kk}, {n}"));
            let ib = e.b.op(format!("add nuw i32 {rb}, {j}"));
            let x = operand(e, a, &ia);
            let y = operand(e, b, &ib);
            if int {
                let p = e.b.op(format!("mul i32 {x}, {y}"));
                vec![e.b.op(format!("add i32 {s}, {p}"))]
            } else {
                vec![e.b.call(
                    "float",
                    "llvm.fma.f32",
                    &[("float", &x), ("float", &y), ("float", s)],
                )]
            }
        });
        let sum = match scale {
            Some(st) => {
                let f = read_raw(e, st, &j);
                let p = e.b.op(format!("mul i32 {}, {f}", s[0]));
                e.b.op(format!("add i32 {old}, {p}"))
            }
            None => s[0].clone(),
        };
        write(e, acc, i, &sum);
    });
}

/// `unit` and the dot's shape when the dot runs on the matrix unit.
fn dot_unit(
    e: &Emitter,
    unit: Option<MatrixUnit>,
    wg: u32,
    t: &matrix::DotTiles,
) -> Option<(MatrixUnit, matrix::DotShape)> {
    let unit = unit?;
    let (ta, tb, tc) = (
        &e.k.tiles[t.a as usize],
        &e.k.tiles[t.b as usize],
        &e.k.tiles[t.acc as usize],
    );
    let shape = matrix::DotShape {
        m: tc.rows,
        n: tc.cols,
        k: ta.cols,
        elem: ta.elem,
    };
    matrix::fits(unit, wg, &shape, tc.elem, tb.elem).then_some((unit, shape))
}

/// Tile `t` <- window (`store` false) or window <- tile `t`. Consecutive work-items take
/// consecutive elements of the buffer or shared array (down a column of the tile for a
/// transposed window), so global accesses coalesce (and shared-array accesses take
/// consecutive banks).
fn copy(e: &mut Emitter, wg: u32, t: u32, w: &TileWindow, store: bool) -> Lowered<()> {
    let w = e.tile_window(w, &mut |e, x| e.expr(x))?;
    let tile = e.k.tiles[t as usize].clone();
    lane_loop(e, wg, tile.len(), &mut |e, n| {
        let (r, c, i) = if w.transposed {
            let r = e.b.op(format!("urem i32 {n}, {}", tile.rows));
            let c = e.b.op(format!("udiv i32 {n}, {}", tile.rows));
            let rc = e.b.op(format!("mul nuw i32 {r}, {}", tile.cols));
            let i = e.b.op(format!("add nuw i32 {rc}, {c}"));
            (r, c, i)
        } else {
            let r = e.b.op(format!("udiv i32 {n}, {}", tile.cols));
            let c = e.b.op(format!("urem i32 {n}, {}", tile.cols));
            (r, c, n.to_string())
        };
        let i = i.as_str();
        let inside = e.window_contains(&w, &r, &c);
        e.branch_on(&inside, &mut |e, taken| {
            if !taken {
                if !store {
                    let z = if tile.elem == Ty::F32 { "0.0" } else { "0" };
                    write(e, t, i, z);
                }
                return;
            }
            if store {
                let v = read_raw(e, t, i);
                e.window_write(&w, &r, &c, &v, tile.elem);
            } else {
                let v = e.window_read(&w, &r, &c, tile.elem);
                write(e, t, i, &v);
            }
        });
    });
    Ok(())
}

fn elem_ptr(e: &mut Emitter, t: u32, i: &str) -> String {
    let ty = lty(e.k.tiles[t as usize].elem);
    e.b.op(format!(
        "getelementptr inbounds {ty}, ptr addrspace(3) {}, i32 {i}",
        e.tiles[t as usize]
    ))
}

pub(super) fn read_raw(e: &mut Emitter, t: u32, i: &str) -> String {
    let elem = e.k.tiles[t as usize].elem;
    let p = elem_ptr(e, t, i);
    e.b.op(format!(
        "load {}, ptr addrspace(3) {p}, align {}",
        lty(elem),
        elem.size_bytes()
    ))
}

/// Element `i` of tile `t` as f32.
fn read(e: &mut Emitter, t: u32, i: &str) -> String {
    let v = read_raw(e, t, i);
    let elem = e.k.tiles[t as usize].elem;
    convert(&mut e.b, &v, elem, Ty::F32)
}

/// Stores `v` (in the tile's own type) to element `i` of tile `t`.
pub(super) fn write(e: &mut Emitter, t: u32, i: &str, v: &str) {
    let elem = e.k.tiles[t as usize].elem;
    let p = elem_ptr(e, t, i);
    e.b.ins(format!(
        "store {} {v}, ptr addrspace(3) {p}, align {}",
        lty(elem),
        elem.size_bytes()
    ));
}

/// `for i in (lid..n).step_by(wg) { body(i) }`.
fn lane_loop(e: &mut Emitter, wg: u32, n: u32, body: &mut dyn FnMut(&mut Emitter, &str)) {
    let lid = e.lid.clone();
    strided_loop(e, &lid, wg, n, body);
}

/// `for i in (start..n).step_by(step) { body(i) }`.
pub(super) fn strided_loop(
    e: &mut Emitter,
    start: &str,
    step: u32,
    n: u32,
    body: &mut dyn FnMut(&mut Emitter, &str),
) {
    let pre = e.b.cur.clone();
    let (head, lbody, exit) = (
        e.b.label("tile.head"),
        e.b.label("tile.body"),
        e.b.label("tile.exit"),
    );
    e.b.br(&head);
    e.b.start(&head);
    let i = e.b.fresh();
    let next = e.b.fresh();
    let latch_label = e.b.label("tile.latch");
    e.b.ins(format!(
        "{i} = phi i32 [ {start}, %{pre} ], [ {next}, %{latch_label} ]"
    ));
    let more = e.b.op(format!("icmp ult i32 {i}, {n}"));
    e.b.cbr(&more, &lbody, &exit);
    e.b.start(&lbody);
    body(e, &i);
    e.b.br(&latch_label);
    e.b.start(&latch_label);
    e.b.ins(format!("{next} = add nuw i32 {i}, {step}"));
    e.b.br(&head);
    e.b.start(&exit);
}
