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
/// each. Row blocks past the last row of a partial tile are skipped. Columns and rows past
/// the end re-read the last one (the `min`s); their results are not stored. The index
/// `let`s (`lid`, `col`, `r0`, ...) are pure integer values assigned once, which the host
/// lowering writes out at each use, so LLVM still sees that `acc` accesses are consecutive
/// across work-items and `hidden` accesses the same for all of them.
#[kernel(name = "lm_head.matrix", version = 1, workgroup = 64, elem = [bf16, f16, f32])]
fn lm_head_matrix<W>(hidden: &[f32], w: &[W], out: &mut [f32], rows: u32, vocab: u32, dim: u32) {
    const ROWS: u32 = 128;
    const WG: u32 = 64;
    let acc = shared::<f32>(ROWS * WG);
    let lid = local_id();
    let col = group_id() * WG + lid;
    // This work-item's weight row (the last one for columns past the end).
    let wrow = min(col, vocab - 1) * dim;
    // First row of this tile, and the number of 4-row blocks that hold one of its rows.
    let r0 = group_id_y() * ROWS;
    let row_blocks = min(ROWS / 4, ((rows - r0 - 1) >> 2) + 1);
    for r in 0..ROWS {
        acc[r * WG + lid] = 0.0;
    }
    // Main part: `k` in blocks of 4.
    for kb in 0..(dim >> 2) {
        let k = kb * 4;
        let w0 = to_f32(w[wrow + k]);
        let w1 = to_f32(w[wrow + k + 1]);
        let w2 = to_f32(w[wrow + k + 2]);
        let w3 = to_f32(w[wrow + k + 3]);
        for rb in 0..row_blocks {
            let r = rb * 4;
            // `hidden` rows of the block (the last row for rows past the end).
            let h0 = min(r0 + r, rows - 1) * dim + k;
            let h1 = min(r0 + r + 1, rows - 1) * dim + k;
            let h2 = min(r0 + r + 2, rows - 1) * dim + k;
            let h3 = min(r0 + r + 3, rows - 1) * dim + k;
            // Accumulator slots of the block.
            let s0 = r * WG + lid;
            let s1 = (r + 1) * WG + lid;
            let s2 = (r + 2) * WG + lid;
            let s3 = (r + 3) * WG + lid;
            let mut a0 = acc[s0];
            let mut a1 = acc[s1];
            let mut a2 = acc[s2];
            let mut a3 = acc[s3];
            a0 = fma(hidden[h0], w0, a0);
            a1 = fma(hidden[h1], w0, a1);
            a2 = fma(hidden[h2], w0, a2);
            a3 = fma(hidden[h3], w0, a3);
            a0 = fma(hidden[h0 + 1], w1, a0);
            a1 = fma(hidden[h1 + 1], w1, a1);
            a2 = fma(hidden[h2 + 1], w1, a2);
            a3 = fma(hidden[h3 + 1], w1, a3);
            a0 = fma(hidden[h0 + 2], w2, a0);
            a1 = fma(hidden[h1 + 2], w2, a1);
            a2 = fma(hidden[h2 + 2], w2, a2);
            a3 = fma(hidden[h3 + 2], w2, a3);
            acc[s0] = fma(hidden[h0 + 3], w3, a0);
            acc[s1] = fma(hidden[h1 + 3], w3, a1);
            acc[s2] = fma(hidden[h2 + 3], w3, a2);
            acc[s3] = fma(hidden[h3 + 3], w3, a3);
        }
    }
    // The last `dim % 4` values of `k`.
    for k in (dim & 0xffff_fffc)..dim {
        let wk = to_f32(w[wrow + k]);
        for r in 0..ROWS {
            let h = hidden[min(r0 + r, rows - 1) * dim + k];
            acc[r * WG + lid] = fma(h, wk, acc[r * WG + lid]);
        }
    }
    if col < vocab {
        for r in 0..ROWS {
            if r0 + r < rows {
                out[(r0 + r) * vocab + col] = acc[r * WG + lid];
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
