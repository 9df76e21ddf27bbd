//! The GEMMs of few rows: `gemm.xwt` and `gemm.xwt_exact` (`gemm.rs`) with a workgroup
//! taking 16 rows of `x` instead of 64 (or 128), and each block of 16 rows multiplying a
//! weight of its own, picked from a table: the routed experts of a mixture-of-experts layer
//! in one launch. Such a layer multiplies each expert's weights by the few tokens routed to
//! it (16 on average in Qwen3.5-35B-A3B at a pass of 512 tokens: 512 x 8 choices over 256
//! experts); the wide kernels compute every block of 64 rows whole, zero rows included, so
//! such a product did four times its work, and a launch per expert and product (a thousand
//! per layer, each with its transpose) cost more than the arithmetic on the host. A product
//! of at most 32 rows of one weight runs here too, every block on that weight.
//!
//! Both read the wide kernels' operands as they are: the weights in place, and a block of 16
//! rows of `x` inside `gemm.transpose_x`'s (or `gemm.transpose_x_f32`'s) block of 64, whose
//! rows past `m` the transpose wrote as zeros, so every window is whole where the wide
//! kernel's is and the host runs the K loop fused the same way (`gemm.rs`; both kernels'
//! K loops are `k_loops.rs`'s, at the expert's weight and the block's 16 columns). Each
//! workgroup computes a 64 x 16 block of `yᵀ = w · xᵀ` (64 weight rows, 16 rows of `x`); on
//! the host its register blocks are 8 weight rows by the 16 columns. The products and their
//! order per element are the wide kernels', so the results are too.
//!
//! Block `b` of 16 rows (rows `16b..16b + 16` of `x` and `y`) multiplies the `[n, k]` matrix
//! at `w[experts[b] * w_stride + w_offset..]`: an expert's rows of a stacked `[E, n, k]`
//! tensor (`w_stride = n * k`), or of the gate or the up half of a fused `[E, 2n, k]` one
//! (`w_stride = 2 n k`, `w_offset` 0 or `n k`). The caller lays each expert's rows out from a
//! multiple of 16, so no block holds two experts' rows, and checks that every expert's
//! matrix lies inside `w` (its length depends on the table, so it is not declared). Grid: x
//! = ceil(n / 64) column blocks, fastest, so a block of rows stays in cache while its
//! expert's weight streams past it (with the row blocks fastest, every column block read all
//! of `xᵀ` again, 24 MiB at a 35B-A3B layer's 6,000 rows); y = ceil(m / 16) row blocks.
//! `accumulate` = 1 adds the product to `y`.

use loom::kernel;

/// `gemm.xwt` (activations rounded to `W`, in `gemm.transpose_x`'s pairs layout `xp`) on
/// 16 rows of `x` per workgroup, each block of rows on its expert's weight (the module doc).
/// v2: the experts' table.
#[kernel(name = "gemm.xwt_narrow", version = 2, workgroup = 64, elem = [bf16, f16])]
fn gemm_xwt_narrow<W>(
    xp: &[W; (m + 63) / 64 * ((k + 1) / 2) * 128],
    w: &[W],
    experts: &[u32; num_groups_y()],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    w_stride: u32,
    w_offset: u32,
    accumulate: u32,
) {
    const BM: u32 = 16;
    const BN: u32 = 64;
    const BK: u32 = 128;
    let a = tile::<W, BN, BK>();
    let b = tile::<W, BK, BM>();
    let acc = tile::<f32, BN, BM>();
    let row0 = group_id_y() * BM;
    let col0 = group_id() * BN;
    let wb = experts[group_id_y()] * w_stride + w_offset;
    // Block row0 / 64 of `xp`, its columns (rows of `x`) from row0 % 64, two K per pair.
    let xb = row0 / 64 * ((k + 1) / 2) * 128 + row0 % 64 * 2;
    if accumulate == 1 {
        tile_load_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
    }
    dot_k_pairs_at(acc, a, b, w, wb, xp, xb, BM, col0, n, k, BK);
    tile_store_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
}

/// `gemm.xwt_exact` (f32 activations, in `gemm.transpose_x_f32`'s layout `xt`; the weight
/// widened exactly) on 16 rows of `x` per workgroup, each block of rows on its expert's
/// weight (the module doc). v2: the experts' table.
#[kernel(name = "gemm.xwt_exact_narrow", version = 2, workgroup = 64, elem = [bf16, f16, f32])]
fn gemm_xwt_exact_narrow<W>(
    xt: &[f32; (m + 63) / 64 * k * 64],
    w: &[W],
    experts: &[u32; num_groups_y()],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    w_stride: u32,
    w_offset: u32,
    accumulate: u32,
) {
    const BM: u32 = 16;
    const BN: u32 = 64;
    const BK: u32 = 64;
    let a = tile::<f32, BN, BK>();
    let b = tile::<f32, BK, BM>();
    let acc = tile::<f32, BN, BM>();
    let row0 = group_id_y() * BM;
    let col0 = group_id() * BN;
    let wb = experts[group_id_y()] * w_stride + w_offset;
    // Block row0 / 64 of `xt`, its columns (rows of `x`) from row0 % 64.
    let xb = row0 / 64 * k * 64 + row0 % 64;
    if accumulate == 1 {
        tile_load_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
    }
    dot_k_f32_at(acc, a, b, w, wb, xt, xb, BM, col0, n, k, BK);
    tile_store_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
}
