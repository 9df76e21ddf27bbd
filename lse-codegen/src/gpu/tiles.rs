//! GPU lowering of the tile statements (AMDGPU and NVPTX): every tile is a row-major LDS /
//! shared-memory array, zero-filled when the kernel starts; each statement is a loop in which
//! work-item `lid` handles elements `lid, lid + wg, ...` (16-byte vectors of them for a load
//! of a whole aligned window), between two barriers. `tile_dot` gives each work-item whole
//! output elements (a register block of them when the accumulator divides into one per
//! work-item) and sums their K products with `fma` in the reference order ([`dot_step`]), so
//! GPUs agree with the generated Rust bit for bit, unless the target's matrix unit takes the
//! dot ([`super::matrix`]: 16-bit operands, shapes that are multiples of the instruction's),
//! which sums in the hardware's order.

use super::matrix::{self, MatrixUnit};
use crate::emit::{
    convert, dequant_sum, dot_step, lty, scaled_sum, tile_binary, Emitter, Lowered, WindowVals,
};
use lse_dsl::ir::{Access, DotScale, Kernel, Param, TileDecl, TileOp, TileWindow, Ty};

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
    // A GPU hides memory latency by running other waves: a prefetch hint, which changes no
    // memory a work-item sees, needs neither code nor barriers.
    let sync = !matches!(op, TileOp::Prefetch { .. });
    if sync {
        barrier(e);
    }
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
        TileOp::Dequant {
            acc,
            src,
            rows,
            cols,
        } => {
            let (d, s, rows, cols) = (*acc, *src, *rows, *cols);
            let n = e.k.tiles[d as usize].cols;
            each_element(e, wg, d, &mut |e, i| {
                let m = e.b.op(format!("udiv i32 {i}, {n}"));
                let j = e.b.op(format!("urem i32 {i}, {n}"));
                let sum = read_raw(e, s, i);
                let x = e.b.op(format!("sitofp i32 {sum} to float"));
                let old = read(e, d, i);
                let factors = [read(e, rows, &m), read(e, cols, &j)];
                let v = dequant_sum(&mut e.b, &factors, &x, &old, false);
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
        TileOp::Prefetch { .. } => {}
    }
    if sync {
        barrier(e);
    }
    Ok(())
}

/// `body(i)` for every element index `i` of tile `t`, spread over the work-items.
fn each_element(e: &mut Emitter, wg: u32, t: u32, body: &mut dyn FnMut(&mut Emitter, &str)) {
    let len = e.k.tiles[t as usize].len();
    lane_loop(e, wg, len, body);
}

/// `acc += a · b` in the reference order: each work-item owns whole output elements and adds
/// their K products with `fma` in the order of [`dot_step`] (integer operands: exact products
/// added in wrapping i32; with a `scale`, each K group's products summed from the row's
/// offset for the group (or 0) and then scaled into `acc` as the generated Rust does: times
/// the column's scale for the group in i32, or dequantized in f32).
fn portable_dot(e: &mut Emitter, wg: u32, t: &matrix::DotTiles, scale: Option<DotScale>) {
    let (m_n, n, k, int) = {
        let (c, x) = (&e.k.tiles[t.acc as usize], &e.k.tiles[t.a as usize]);
        (c.len(), c.cols, x.cols, x.elem.is_dot_int())
    };
    let (acc, a, b) = (t.acc, t.a, t.b);
    let pairs = e.k.bf16_pair_dot(t.a, t.b);
    if e.k.tiles[acc as usize].elem == Ty::F32 && scale.is_none() {
        let rows = m_n / n;
        if let Some(block) = register_block(rows, n, wg) {
            return blocked_dot(e, t, [rows, n, k], block);
        }
    }
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
    let sum_ty = if int { "i32" } else { "float" };
    // Element (m, j)'s products over K indices `k0 + step` for `len` steps, from `init`.
    let products = |e: &mut Emitter, (m, j): (&str, &str), k0: &str, len: u32, init: String| {
        e.carried_loop(len, sum_ty, &[init], |e, step, s| {
            let step = e.b.op(format!("add nuw i32 {k0}, {step}"));
            let kk = &dot_step(&mut e.b, &step, k, pairs);
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
        })
        .remove(0)
    };
    lane_loop(e, wg, m_n, &mut |e, i| {
        let m = e.b.op(format!("udiv i32 {i}, {n}"));
        let j = e.b.op(format!("urem i32 {i}, {n}"));
        let old = read_raw(e, acc, i);
        let Some(scale) = scale else {
            let sum = products(e, (&m, &j), "0", k, old);
            write(e, acc, i, &sum);
            return;
        };
        let groups = scale.groups(&e.k.tiles);
        let len = k / groups;
        let acc_ty = lty(e.k.tiles[acc as usize].elem);
        let sum = e.carried_loop(groups, acc_ty, &[old], |e, g, old| {
            let init = scale.sum_start().map_or("0".to_string(), |o| {
                let ix = e.b.op(format!("mul nuw i32 {m}, {groups}"));
                let ix = e.b.op(format!("add nuw i32 {ix}, {g}"));
                read_raw(e, o, &ix)
            });
            let k0 = e.b.op(format!("mul nuw i32 {g}, {len}"));
            let s = products(e, (&m, &j), &k0, len, init);
            let factors = match scale {
                DotScale::Columns { scale, .. } => {
                    let ix = e.b.op(format!("mul nuw i32 {g}, {n}"));
                    let ix = e.b.op(format!("add nuw i32 {ix}, {j}"));
                    vec![read_raw(e, scale, &ix)]
                }
                DotScale::Dequant { offset, rows, cols } => {
                    let mg = e.b.op(format!("mul nuw i32 {m}, {groups}"));
                    let mg = e.b.op(format!("add nuw i32 {mg}, {g}"));
                    let gj = e.b.op(format!("mul nuw i32 {g}, {n}"));
                    let gj = e.b.op(format!("add nuw i32 {gj}, {j}"));
                    vec![
                        read_raw(e, offset, &mg),
                        read_raw(e, rows, &mg),
                        read_raw(e, cols, &gj),
                    ]
                }
            };
            vec![scaled_sum(&mut e.b, scale, &factors, &s, &old[0], false)]
        });
        write(e, acc, i, &sum[0]);
    });
}

/// The register block `(rm, rn)` of [`blocked_dot`] for an `m x n` f32 accumulator on `wg`
/// work-items: the largest of 8 x 8 down to 2 x 2 that cuts the accumulator into exactly one
/// block per work-item, if any does.
fn register_block(m: u32, n: u32, wg: u32) -> Option<(u32, u32)> {
    [(8, 8), (4, 8), (8, 4), (4, 4), (2, 4), (4, 2), (2, 2)]
        .into_iter()
        .find(|&(rm, rn)| m.is_multiple_of(rm) && n.is_multiple_of(rn) && (m / rm) * (n / rn) == wg)
}

/// The f32 [`portable_dot`] with each work-item holding an `rm x rn` block of the
/// accumulator in registers over K: rows `r + (m / rm) i` and columns `c + (n / rn) j` for
/// its `(r, c)`, so a warp's reads of a `b` row are consecutive and of an `a` column few.
/// Per k it reads `rm + rn` operands for `rm · rn` products, instead of two per product;
/// each element's sum is the same `fma` chain in the reference's order, bit for bit.
fn blocked_dot(e: &mut Emitter, t: &matrix::DotTiles, [m, n, k]: [u32; 3], (rm, rn): (u32, u32)) {
    let (row_step, col_step) = (m / rm, n / rn);
    let lid = e.lid.clone();
    let r0 = e.b.op(format!("udiv i32 {lid}, {col_step}"));
    let c0 = e.b.op(format!("urem i32 {lid}, {col_step}"));
    let rows: Vec<String> = (0..rm)
        .map(|i| e.b.op(format!("add nuw i32 {r0}, {}", row_step * i)))
        .collect();
    let cols: Vec<String> = (0..rn)
        .map(|j| e.b.op(format!("add nuw i32 {c0}, {}", col_step * j)))
        .collect();
    let mut at = Vec::new();
    for r in &rows {
        let rn_ = e.b.op(format!("mul nuw i32 {r}, {n}"));
        for c in &cols {
            at.push(e.b.op(format!("add nuw i32 {rn_}, {c}")));
        }
    }
    let init: Vec<String> = at.iter().map(|i| read(e, t.acc, i)).collect();
    let pairs = e.k.bf16_pair_dot(t.a, t.b);
    let sums = e.carried_loop(k, "float", &init, |e, step, s| {
        let kk = &dot_step(&mut e.b, step, k, pairs);
        let xs: Vec<String> = rows
            .iter()
            .map(|r| {
                let ra = e.b.op(format!("mul nuw i32 {r}, {k}"));
                let ia = e.b.op(format!("add nuw i32 {ra}, {kk}"));
                read(e, t.a, &ia)
            })
            .collect();
        let rb = e.b.op(format!("mul nuw i32 {kk}, {n}"));
        let ys: Vec<String> = cols
            .iter()
            .map(|c| {
                let ib = e.b.op(format!("add nuw i32 {rb}, {c}"));
                read(e, t.b, &ib)
            })
            .collect();
        let mut out = Vec::new();
        for (i, x) in xs.iter().enumerate() {
            for (j, y) in ys.iter().enumerate() {
                let acc = &s[i * ys.len() + j];
                out.push(e.b.call(
                    "float",
                    "llvm.fma.f32",
                    &[("float", x), ("float", y), ("float", acc)],
                ));
            }
        }
        out
    });
    for (i, v) in at.iter().zip(&sums) {
        write(e, t.acc, i, v);
    }
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
/// consecutive banks). A load that [`loads_by_vectors`] allows goes 16 bytes at a time when the
/// window holds the whole tile and its rows are 16-byte aligned (checked as the kernel runs).
fn copy(e: &mut Emitter, wg: u32, t: u32, w: &TileWindow, store: bool) -> Lowered<()> {
    let read_only = w.buffer().is_some_and(|p| {
        matches!(
            e.k.params.get(p as usize),
            Some(Param::Buffer {
                access: Access::Read,
                ..
            })
        )
    });
    let w = e.tile_window(w, &mut |e, x| e.expr(x))?;
    let tile = e.k.tiles[t as usize].clone();
    if !store && loads_by_vectors(&w, &tile, read_only) {
        let fast = whole_and_aligned(e, &w, &tile);
        e.branch_on(&fast, &mut |e, taken| {
            if taken {
                copy_vectors(e, wg, t, &w);
            } else {
                copy_elements(e, wg, t, &w, false);
            }
        });
    } else {
        copy_elements(e, wg, t, &w, store);
    }
    Ok(())
}

/// Whether a load of `tile` from `w` can go by 16-byte vectors of `w`'s memory: a buffer (not a shared array) of the tile's own type, 16-bit, or 32-bit and
/// `read_only` (the kernel never writes it) with rows of at least 64 bytes, read row by row
/// (a plain window, rows a multiple of the vector long) or two rows at a time (a pairs
/// window of 16-bit elements, an even number of rows, a multiple of 4 columns). (With
/// vector loads of their written f32 accumulators or of 8-column f32 tiles, ptxas spilled
/// registers in the integer GEMMs on sm_90; short rows gain little anyway.)
fn loads_by_vectors(w: &WindowVals, tile: &TileDecl, read_only: bool) -> bool {
    let usable = !w.shared && w.elem == tile.elem && !w.transposed && !w.quads && !w.packed;
    match (w.elem.size_bytes(), w.pairs) {
        (2, false) => usable && tile.cols.is_multiple_of(8),
        (4, false) => usable && read_only && tile.cols >= 16 && tile.cols.is_multiple_of(4),
        (2, true) => usable && tile.rows.is_multiple_of(2) && tile.cols.is_multiple_of(4),
        _ => false,
    }
}

/// Whether the window holds every element of `tile` and its first element and line stride
/// are 16-byte aligned (the same for every work-item).
fn whole_and_aligned(e: &mut Emitter, w: &WindowVals, tile: &TileDecl) -> String {
    let rows = e.b.op(format!("icmp uge i32 {}, {}", w.rows, tile.rows));
    let cols = e.b.op(format!("icmp uge i32 {}, {}", w.cols, tile.cols));
    let whole = e.b.op(format!("and i1 {rows}, {cols}"));
    let first = e.window_elem_ptr(w, "0", "0");
    let addr = e.b.op(format!("ptrtoint {} {first} to i64", w.ptr_ty));
    let low = e.b.op(format!("and i64 {addr}, 15"));
    let base = e.b.op(format!("icmp eq i64 {low}, 0"));
    let per_16 = 16 / w.elem.size_bytes();
    let rem = e.b.op(format!("and i32 {}, {}", w.stride, per_16 - 1));
    let stride = e.b.op(format!("icmp eq i32 {rem}, 0"));
    let aligned = e.b.op(format!("and i1 {base}, {stride}"));
    e.b.op(format!("and i1 {whole}, {aligned}"))
}

/// Tile `t` <- window `w` by 16-byte vectors, every element inside the window and every
/// vector aligned ([`whole_and_aligned`]): a plain window's vector is part of one tile row;
/// a pairs window's is four columns of two rows, its even elements the first row's.
fn copy_vectors(e: &mut Emitter, wg: u32, t: u32, w: &WindowVals) {
    let tile = e.k.tiles[t as usize].clone();
    let n = 16 / w.elem.size_bytes();
    let ty = lty(w.elem);
    let md = e.mem_md.clone();
    // Vectors per line of the tile (a row, or two rows of a pairs window) and lines.
    let (per_line, lines) = if w.pairs {
        (tile.cols / 4, tile.rows / 2)
    } else {
        (tile.cols / n, tile.rows)
    };
    lane_loop(e, wg, per_line * lines, &mut |e, v| {
        let line = e.b.op(format!("udiv i32 {v}, {per_line}"));
        let at = e.b.op(format!("urem i32 {v}, {per_line}"));
        let (r, c) = if w.pairs {
            let r = e.b.op(format!("shl nuw i32 {line}, 1"));
            (r, e.b.op(format!("shl nuw i32 {at}, 2")))
        } else {
            (line, e.b.op(format!("mul nuw i32 {at}, {n}")))
        };
        let p = e.window_elem_ptr(w, &r, &c);
        let x =
            e.b.op(format!("load <{n} x {ty}>, {} {p}, align 16{md}", w.ptr_ty));
        let row = e.b.op(format!("mul nuw i32 {r}, {}", tile.cols));
        let i = e.b.op(format!("add nuw i32 {row}, {c}"));
        if w.pairs {
            let next = e.b.op(format!("add nuw i32 {i}, {}", tile.cols));
            for (half, at) in [(0, i), (1, next)] {
                let picks: Vec<String> = (0..4).map(|j| format!("i32 {}", 2 * j + half)).collect();
                let y = e.b.op(format!(
                    "shufflevector <{n} x {ty}> {x}, <{n} x {ty}> poison, <4 x i32> <{}>",
                    picks.join(", ")
                ));
                let dst = elem_ptr(e, t, &at);
                e.b.ins(format!(
                    "store <4 x {ty}> {y}, ptr addrspace(3) {dst}, align 8"
                ));
            }
        } else {
            let dst = elem_ptr(e, t, &i);
            e.b.ins(format!(
                "store <{n} x {ty}> {x}, ptr addrspace(3) {dst}, align 16"
            ));
        }
    });
}

/// [`copy`] element by element, zero-filling (loads) or skipping (stores) what lies outside
/// the window.
fn copy_elements(e: &mut Emitter, wg: u32, t: u32, w: &WindowVals, store: bool) {
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
        let inside = e.window_contains(w, &r, &c);
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
                e.window_write(w, &r, &c, &v, tile.elem);
            } else {
                let v = e.window_read(w, &r, &c, tile.elem);
                write(e, t, i, &v);
            }
        });
    });
}

/// Pointer to element `i` of tile `t`'s shared-memory array.
pub(super) fn elem_ptr(e: &mut Emitter, t: u32, i: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::register_block;

    #[test]
    fn register_blocks_give_each_work_item_one_block() {
        // The exact GEMM's 64 x 64 accumulators on 64 work-items: 8 x 8 each.
        assert_eq!(register_block(64, 64, 64), Some((8, 8)));
        assert_eq!(register_block(32, 32, 64), Some((4, 4)));
        assert_eq!(register_block(64, 32, 64), Some((4, 8)));
        assert_eq!(register_block(16, 16, 32), Some((2, 4)));
        assert_eq!(register_block(64, 64, 256), Some((4, 4)));
        // No block shape fits: the per-element loop.
        assert_eq!(register_block(48, 64, 64), None);
        assert_eq!(register_block(1, 64, 64), None);
        assert_eq!(register_block(64, 64, 2048), None);
    }
}
