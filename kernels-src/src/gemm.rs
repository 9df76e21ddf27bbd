//! The GEMM every projection uses: `y = x · wᵀ` (+ `y` when `accumulate` is 1), with `x`
//! `[m, k]` activations, `w` `[n, k]` in its stored dtype and `y` `[m, n]` f32. `gemm.xwt`
//! takes `x` in the weight's type (f32 activations rounded once by `gemm.round_x`, not once
//! per column block); `gemm.xwt_exact` takes f32 activations against a 16-bit weight.
//!
//! Written once with tiles (`LOOM.md`, "Tiles"): each workgroup owns a 128 x 64 block of `y`
//! as two 64 x 64 accumulators started from `y` (accumulate) or 0, walks `k` in steps of 32,
//! loads the matching `w` block transposed once per step and the two `x` blocks in turn into
//! one tile, and accumulates each with `tile_dot`. Sharing the weight block between two row
//! blocks halves the weight-block loads (a transpose on every target) per product against a
//! 64 x 64 block, inside the same shared memory: the f32 instances' four tiles take 48 KiB,
//! the most static shared memory an NVIDIA block may have. Partial blocks at the edges are
//! zero-padded by the loads and clipped by the stores; a workgroup whose second row block lies
//! past `m` skips it. The host's AMX level runs the dots on AMX tiles; other levels and GPUs
//! use the portable lowering.

use loom::kernel;

/// Grid: x = ceil(n / 64) column blocks, y = ceil(m / 128) row blocks (column blocks run
/// fastest, so a host thread's consecutive workgroups read the same activation rows, the
/// larger operand per workgroup). `accumulate` = 1 adds the product to `y` (a fused residual
/// add); 0 overwrites `y`.
#[kernel(name = "gemm.xwt", version = 2, workgroup = 64, elem = [bf16, f16, f32])]
fn gemm_xwt<W>(
    x: &[W; m * k],
    w: &[W; n * k],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    accumulate: u32,
) {
    const BM: u32 = 64;
    const BN: u32 = 64;
    const BK: u32 = 32;
    let a = tile::<W, BM, BK>();
    let b = tile::<W, BK, BN>();
    let acc0 = tile::<f32, BM, BN>();
    let acc1 = tile::<f32, BM, BN>();
    let row0 = group_id_y() * (2 * BM);
    let row1 = row0 + BM;
    let col0 = group_id() * BN;
    if accumulate == 1 {
        tile_load(acc0, y, row0 * n + col0, n, m - row0, n - col0);
        if row1 < m {
            tile_load(acc1, y, row1 * n + col0, n, m - row1, n - col0);
        }
    }
    for k0 in (0..k).step_by(BK) {
        tile_load_t(b, w, col0 * k + k0, k, k - k0, n - col0);
        tile_load(a, x, row0 * k + k0, k, m - row0, k - k0);
        tile_dot(acc0, a, b);
        if row1 < m {
            tile_load(a, x, row1 * k + k0, k, m - row1, k - k0);
            tile_dot(acc1, a, b);
        }
    }
    tile_store(acc0, y, row0 * n + col0, n, m - row0, n - col0);
    if row1 < m {
        tile_store(acc1, y, row1 * n + col0, n, m - row1, n - col0);
    }
}

/// `y = x` rounded to `W` (round to nearest even), for `x` `[m, k]`: the activations of
/// [`gemm_xwt`], rounded once per GEMM instead of once per column block of `y`. Grid: x =
/// ceil(k / 64), y = ceil(m / 64).
#[kernel(name = "gemm.round_x", version = 1, workgroup = 64, elem = [bf16, f16])]
fn round_x<W>(x: &[f32; m * k], y: &mut [W; m * k], m: u32, k: u32) {
    let t = tile::<W, 64, 64>();
    let row0 = group_id_y() * 64;
    let col0 = group_id() * 64;
    tile_load(t, x, row0 * k + col0, k, m - row0, k - col0);
    tile_store(t, y, row0 * k + col0, k, m - row0, k - col0);
}

/// [`gemm_xwt`] with f32 products: the weight is widened to f32 (exactly) and the
/// activations stay f32, so every product is rounded once by `fma`, as an f32 SGEMM on the
/// widened weight computes it. The model's projections use it: rounding activations to
/// bf16 moves perplexity measurably (README, "Numerics of the GEMM").
#[kernel(name = "gemm.xwt_exact", version = 2, workgroup = 64, elem = [bf16, f16])]
fn gemm_xwt_exact<W>(
    x: &[f32; m * k],
    w: &[W; n * k],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    accumulate: u32,
) {
    const BM: u32 = 64;
    const BN: u32 = 64;
    const BK: u32 = 32;
    let a = tile::<f32, BM, BK>();
    let b = tile::<f32, BK, BN>();
    let acc0 = tile::<f32, BM, BN>();
    let acc1 = tile::<f32, BM, BN>();
    let row0 = group_id_y() * (2 * BM);
    let row1 = row0 + BM;
    let col0 = group_id() * BN;
    if accumulate == 1 {
        tile_load(acc0, y, row0 * n + col0, n, m - row0, n - col0);
        if row1 < m {
            tile_load(acc1, y, row1 * n + col0, n, m - row1, n - col0);
        }
    }
    for k0 in (0..k).step_by(BK) {
        tile_load_t(b, w, col0 * k + k0, k, k - k0, n - col0);
        tile_load(a, x, row0 * k + k0, k, m - row0, k - k0);
        tile_dot(acc0, a, b);
        if row1 < m {
            tile_load(a, x, row1 * k + k0, k, m - row1, k - k0);
            tile_dot(acc1, a, b);
        }
    }
    tile_store(acc0, y, row0 * n + col0, n, m - row0, n - col0);
    if row1 < m {
        tile_store(acc1, y, row1 * n + col0, n, m - row1, n - col0);
    }
}
