//! LOOM procedures (`lse-dsl/LOOM.md`, "Functions") for the K loops of the GEMMs on
//! transposed activations (`gemm.xwt`, `gemm.xwt_exact` and the two `gemm_swiglu` kernels):
//! `acc += w[col0 .., ..] · xᵀ` for one block of 64 columns of `xᵀ` (64 rows of `x`, block
//! `row0 / 64` of the transposed layout) over all of K in steps of `bk`. Each step is only
//! the two loads and the dot, so the host runs the loop fused
//! (`lse-codegen/src/host/tiles/fused.rs`).

use loom::function;

/// The K loop on `xp` in `gemm.transpose_x`'s layout (each two K interleaved), the
/// activations in the weight's type `T`.
#[function]
fn dot_k_pairs<T>(
    acc: Tile,
    a: Tile,
    b: Tile,
    w: &[T],
    xp: &[T],
    row0: u32,
    col0: u32,
    n: u32,
    k: u32,
    bk: u32,
) {
    for k0 in (0..k).step_by(bk) {
        tile_load_pairs(b, xp, row0 * ((k + 1) / 2) * 2 + k0 * 64, 128, k - k0, 64);
        tile_load(a, w, col0 * k + k0, k, n - col0, k - k0);
        tile_dot(acc, a, b);
    }
}

/// The K loop on f32 `xt` in `gemm.transpose_x_f32`'s layout (64 values of K after another),
/// the weight of type `T` widened to f32.
#[function]
fn dot_k_f32<T>(
    acc: Tile,
    a: Tile,
    b: Tile,
    w: &[T],
    xt: &[f32],
    row0: u32,
    col0: u32,
    n: u32,
    k: u32,
    bk: u32,
) {
    for k0 in (0..k).step_by(bk) {
        tile_load(a, w, col0 * k + k0, k, n - col0, k - k0);
        tile_load(b, xt, row0 * k + k0 * 64, 64, k - k0, 64);
        tile_dot(acc, a, b);
    }
}
