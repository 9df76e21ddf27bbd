//! The LM head: logits = hidden · Wᵀ, with W `[vocab, hidden]` in its stored dtype and f32
//! accumulation.
//!
//! Two forms, because scoring and serving have different shapes:
//! - matrix (`lm_head.matrix_<ty>`): up to 128 hidden rows at once (scoring's `head_rows`). Each
//!   work-item owns one vocabulary column and a tile of 4 rows, so every weight element read
//!   is used 4 times from a register.
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
/// `[rows, vocab]` f32. Grid: x = ceil(vocab / 64) column blocks, y = ceil(rows / 16) row tiles.
#[kernel(name = "lm_head.matrix", version = 1, workgroup = 64, elem = [bf16, f16, f32])]
fn lm_head_matrix<W>(hidden: &[f32], w: &[W], out: &mut [f32], rows: u32, vocab: u32, dim: u32) {
    const ROWS: u32 = 16;
    const WG: u32 = 64;
    let acc = shared::<f32>(ROWS * WG);
    let lid = local_id();
    let col = group_id() * WG + lid;
    let r0 = group_id_y() * ROWS;
    // Columns and rows past the end re-read the last one; their results are not stored.
    let last = rows - 1;
    let wrow = min(col, vocab - 1) * dim;
    for r in 0..ROWS {
        acc[r * WG + lid] = 0.0;
    }
    for k in 0..dim {
        let wk = to_f32(w[wrow + k]);
        for r in 0..ROWS {
            let h = hidden[min(r0 + r, last) * dim + k];
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
