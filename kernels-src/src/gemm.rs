//! The GEMM every projection uses: `y = x · wᵀ` (+ `y` when `accumulate` is 1), with `x`
//! `[m, k]` f32 activations, `w` `[n, k]` in its stored dtype and `y` `[m, n]` f32.
//!
//! Written once with tiles (`LOOM.md`, "Tiles"): each workgroup owns a 64 x 64 block of `y`,
//! starts its f32 accumulator from `y` (accumulate) or 0, walks `k` in steps of 64, loads the
//! `x` block (rounded to the weight's 16-bit type, or kept f32 for f32 weights) and the
//! matching `w` block transposed, and accumulates with `tile_dot`; partial blocks at the
//! edges are zero-padded by the loads and clipped by the store. The f32 instances' three
//! tiles take 48 KiB, the most static shared memory an NVIDIA block may have. The host's AMX level runs the dots on AMX tiles; other levels and
//! GPUs use the portable lowering.

use loom::kernel;

/// Grid: x = ceil(n / 64) column blocks, y = ceil(m / 64) row blocks. `accumulate` = 1 adds
/// the product to `y` (a fused residual add); 0 overwrites `y`.
#[kernel(name = "gemm.xwt", version = 1, workgroup = 64, elem = [bf16, f16, f32])]
fn gemm_xwt<W>(
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
    const BK: u32 = 64;
    let a = tile::<W, BM, BK>();
    let b = tile::<W, BK, BN>();
    let acc = tile::<f32, BM, BN>();
    let row0 = group_id_y() * BM;
    let col0 = group_id() * BN;
    if accumulate == 1 {
        tile_load(acc, y, row0 * n + col0, n, m - row0, n - col0);
    }
    for k0 in (0..k).step_by(BK) {
        tile_load(a, x, row0 * k + k0, k, m - row0, k - k0);
        tile_load_t(b, w, col0 * k + k0, k, k - k0, n - col0);
        tile_dot(acc, a, b);
    }
    tile_store(acc, y, row0 * n + col0, n, m - row0, n - col0);
}

/// [`gemm_xwt`] with f32 products: the weight is widened to f32 (exactly) and the
/// activations stay f32, so every product is rounded once by `fma`, as an f32 SGEMM on the
/// widened weight computes it. The model's projections use it: rounding activations to
/// bf16 moves perplexity measurably (README, "Numerics of the GEMM").
#[kernel(name = "gemm.xwt_exact", version = 1, workgroup = 64, elem = [bf16, f16])]
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
    const BK: u32 = 64;
    let a = tile::<f32, BM, BK>();
    let b = tile::<f32, BK, BN>();
    let acc = tile::<f32, BM, BN>();
    let row0 = group_id_y() * BM;
    let col0 = group_id() * BN;
    if accumulate == 1 {
        tile_load(acc, y, row0 * n + col0, n, m - row0, n - col0);
    }
    for k0 in (0..k).step_by(BK) {
        tile_load(a, x, row0 * k + k0, k, m - row0, k - k0);
        tile_load_t(b, w, col0 * k + k0, k, k - k0, n - col0);
        tile_dot(acc, a, b);
    }
    tile_store(acc, y, row0 * n + col0, n, m - row0, n - col0);
}
