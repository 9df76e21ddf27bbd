//! The GEMMs of few rows: `gemm.xwt` and `gemm.xwt_exact` (`gemm.rs`) for `x` of at most 48
//! rows, a workgroup taking 16 rows of `x` instead of 64 (or 128). A mixture-of-experts
//! layer multiplies each expert's weights by the few tokens routed to it (16 on average in
//! Qwen3.5-35B-A3B at a pass of 512 tokens: 512 x 8 choices over 256 experts); the wide
//! kernels compute every block of 64 rows whole, zero rows included, so such a product did
//! four times its work.
//!
//! Both read the wide kernels' operands as they are: the weight in place, and a block of 16
//! rows of `x` inside `gemm.transpose_x`'s (or `gemm.transpose_x_f32`'s) block of 64, whose
//! rows past `m` the transpose wrote as zeros, so every window is whole where the wide
//! kernel's is and the host runs the K loop fused the same way (`gemm.rs`). Each workgroup
//! computes a 64 x 16 block of `yᵀ = w · xᵀ` (64 weight rows, 16 rows of `x`); on the host
//! its register blocks are 16 weight rows by the 16 columns. The products and their order
//! per element are the wide kernels', so the results are too.

use loom::kernel;

/// `gemm.xwt` (activations rounded to `W`, in `gemm.transpose_x`'s pairs layout `xp`) on
/// 16 rows of `x` per workgroup. Grid: x = ceil(m / 16) row blocks of `y`, fastest, so the
/// at most 3 that share a block of 64 weight rows run one after the other; y = ceil(n / 64)
/// column blocks. `accumulate` = 1 adds the product to `y`.
#[kernel(name = "gemm.xwt_narrow", version = 1, workgroup = 64, elem = [bf16, f16])]
fn gemm_xwt_narrow<W>(
    xp: &[W; (m + 63) / 64 * ((k + 1) / 2) * 128],
    w: &[W; n * k],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    accumulate: u32,
) {
    const BM: u32 = 16;
    const BN: u32 = 64;
    const BK: u32 = 128;
    let a = tile::<W, BN, BK>();
    let b = tile::<W, BK, BM>();
    let acc = tile::<f32, BN, BM>();
    let row0 = group_id() * BM;
    let col0 = group_id_y() * BN;
    // Block row0 / 64 of `xp`, its columns (rows of `x`) from row0 % 64, two K per pair.
    let xb = row0 / 64 * ((k + 1) / 2) * 128 + row0 % 64 * 2;
    if accumulate == 1 {
        tile_load_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
    }
    for k0 in (0..k).step_by(BK) {
        tile_load_pairs(b, xp, xb + k0 * 64, 128, k - k0, BM);
        tile_load(a, w, col0 * k + k0, k, n - col0, k - k0);
        tile_dot(acc, a, b);
    }
    tile_store_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
}

/// `gemm.xwt_exact` (f32 activations, in `gemm.transpose_x_f32`'s layout `xt`; the weight
/// widened exactly) on 16 rows of `x` per workgroup. Grid and `accumulate` as
/// `gemm_xwt_narrow`'s.
#[kernel(name = "gemm.xwt_exact_narrow", version = 1, workgroup = 64, elem = [bf16, f16, f32])]
fn gemm_xwt_exact_narrow<W>(
    xt: &[f32; (m + 63) / 64 * k * 64],
    w: &[W; n * k],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    accumulate: u32,
) {
    const BM: u32 = 16;
    const BN: u32 = 64;
    const BK: u32 = 64;
    let a = tile::<f32, BN, BK>();
    let b = tile::<f32, BK, BM>();
    let acc = tile::<f32, BN, BM>();
    let row0 = group_id() * BM;
    let col0 = group_id_y() * BN;
    // Block row0 / 64 of `xt`, its columns (rows of `x`) from row0 % 64.
    let xb = row0 / 64 * k * 64 + row0 % 64;
    if accumulate == 1 {
        tile_load_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
    }
    for k0 in (0..k).step_by(BK) {
        tile_load(a, w, col0 * k + k0, k, n - col0, k - k0);
        tile_load(b, xt, xb + k0 * 64, 64, k - k0, BM);
        tile_dot(acc, a, b);
    }
    tile_store_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
}
