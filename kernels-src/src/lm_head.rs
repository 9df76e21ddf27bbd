//! The LM head: logits = hidden · Wᵀ, with W `[vocab, hidden]` in its stored dtype and f32
//! accumulation.
//!
//! Two forms, because scoring and serving have different shapes:
//! - matrix (`lm_head.matrix_<ty>`): up to 128 hidden rows at once (scoring's `head_rows`). Each
//!   work-item owns one vocabulary column and a tile of 128 rows, so every weight element is
//!   read from memory once per tile and used by every row of it.
//! - matrix-vector (`lm_head.matvec_<ty>`): one hidden row (serving's decode step). Each work-item
//!   owns one column.
//!
//! Each is generic over the weight's element type `W` and instantiated for bf16, f16 and f32
//! (`lm_head.matrix_bf16`, `lm_head.matrix_f16`, `lm_head.matrix_f32`, same for matvec);
//! `to_f32` widens a weight element whatever its type.
//!
//! In both, a work-item reads its weight row contiguously, and `fma` keeps one rounding per
//! multiply-add, as the plain-Rust reference does.

use loom::kernel;

/// `hidden`: `[rows, dim]` f32; `w`: `[vocab, dim]` in the instance's element type; `out`:
/// `[rows, vocab]` f32. Grid: x = ceil(vocab / 64) column blocks, y = ceil(rows / 128) row tiles.
///
/// The `k` loop is unrolled by 4 and the row loop by 4, so each accumulator is read and
/// written once per 4 multiply-adds and each widened weight is used by 4 rows from a
/// register; every accumulator still sees its multiply-adds in ascending `k`, one rounding
/// each. Row blocks past the last row of a partial tile are skipped. `local_id()` and the
/// row base are written out in every index rather than bound to variables: the host
/// lowering keeps a variable assigned in a split region per work-item, which would hide from
/// LLVM that `acc` accesses are consecutive across work-items and `hidden` accesses the same
/// for all of them. Columns and rows past the end re-read the
/// last one (the `min`s); their results are not stored.
#[kernel(name = "lm_head.matrix", version = 1, workgroup = 64, elem = [bf16, f16, f32])]
fn lm_head_matrix<W>(hidden: &[f32], w: &[W], out: &mut [f32], rows: u32, vocab: u32, dim: u32) {
    const ROWS: u32 = 128;
    const WG: u32 = 64;
    let acc = shared::<f32>(ROWS * WG);
    for r in 0..ROWS {
        acc[r * WG + local_id()] = 0.0;
    }
    // Main part: `k` in blocks of 4.
    for kb in 0..(dim >> 2) {
        let w0 = to_f32(w[min(group_id() * WG + local_id(), vocab - 1) * dim + kb * 4]);
        let w1 = to_f32(w[min(group_id() * WG + local_id(), vocab - 1) * dim + kb * 4 + 1]);
        let w2 = to_f32(w[min(group_id() * WG + local_id(), vocab - 1) * dim + kb * 4 + 2]);
        let w3 = to_f32(w[min(group_id() * WG + local_id(), vocab - 1) * dim + kb * 4 + 3]);
        // Only the row blocks that hold a row of this tile.
        for rb in 0..min(ROWS / 4, ((rows - group_id_y() * ROWS - 1) >> 2) + 1) {
            let a0 = acc[(rb * 4) * WG + local_id()];
            let a1 = acc[(rb * 4 + 1) * WG + local_id()];
            let a2 = acc[(rb * 4 + 2) * WG + local_id()];
            let a3 = acc[(rb * 4 + 3) * WG + local_id()];
            let b0 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4, rows - 1) * dim + kb * 4],
                w0,
                a0,
            );
            let b1 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 1, rows - 1) * dim + kb * 4],
                w0,
                a1,
            );
            let b2 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 2, rows - 1) * dim + kb * 4],
                w0,
                a2,
            );
            let b3 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 3, rows - 1) * dim + kb * 4],
                w0,
                a3,
            );
            let c0 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4, rows - 1) * dim + kb * 4 + 1],
                w1,
                b0,
            );
            let c1 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 1, rows - 1) * dim + kb * 4 + 1],
                w1,
                b1,
            );
            let c2 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 2, rows - 1) * dim + kb * 4 + 1],
                w1,
                b2,
            );
            let c3 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 3, rows - 1) * dim + kb * 4 + 1],
                w1,
                b3,
            );
            let d0 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4, rows - 1) * dim + kb * 4 + 2],
                w2,
                c0,
            );
            let d1 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 1, rows - 1) * dim + kb * 4 + 2],
                w2,
                c1,
            );
            let d2 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 2, rows - 1) * dim + kb * 4 + 2],
                w2,
                c2,
            );
            let d3 = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 3, rows - 1) * dim + kb * 4 + 2],
                w2,
                c3,
            );
            acc[(rb * 4) * WG + local_id()] = fma(
                hidden[min(group_id_y() * ROWS + rb * 4, rows - 1) * dim + kb * 4 + 3],
                w3,
                d0,
            );
            acc[(rb * 4 + 1) * WG + local_id()] = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 1, rows - 1) * dim + kb * 4 + 3],
                w3,
                d1,
            );
            acc[(rb * 4 + 2) * WG + local_id()] = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 2, rows - 1) * dim + kb * 4 + 3],
                w3,
                d2,
            );
            acc[(rb * 4 + 3) * WG + local_id()] = fma(
                hidden[min(group_id_y() * ROWS + rb * 4 + 3, rows - 1) * dim + kb * 4 + 3],
                w3,
                d3,
            );
        }
    }
    // The last `dim % 4` values of `k`.
    for k in (dim & 0xffff_fffc)..dim {
        let wk = to_f32(w[min(group_id() * WG + local_id(), vocab - 1) * dim + k]);
        for r in 0..ROWS {
            let h = hidden[min(group_id_y() * ROWS + r, rows - 1) * dim + k];
            acc[r * WG + local_id()] = fma(h, wk, acc[r * WG + local_id()]);
        }
    }
    let col = group_id() * WG + local_id();
    if col < vocab {
        let r0 = group_id_y() * ROWS;
        for r in 0..ROWS {
            if r0 + r < rows {
                out[(r0 + r) * vocab + col] = acc[r * WG + local_id()];
            }
        }
    }
}

/// `hidden`: `[dim]` f32; `w`: `[vocab, dim]` in the instance's element type; `out`: `[vocab]`
/// f32. Grid: x = ceil(vocab / 256).
#[kernel(name = "lm_head.matvec", version = 1, workgroup = 256, elem = [bf16, f16, f32])]
fn lm_head_matvec<W>(hidden: &[f32], w: &[W], out: &mut [f32], vocab: u32, dim: u32) {
    let col = group_id() * group_size() + local_id();
    if col < vocab {
        let wrow = col * dim;
        let mut acc = 0.0;
        for k in 0..dim {
            acc = fma(hidden[k], to_f32(w[wrow + k]), acc);
        }
        out[col] = acc;
    }
}
