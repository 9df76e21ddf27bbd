//! LOOM procedures (`lse-dsl/LOOM.md`, "Functions") for the K loops of the GEMMs on transposed
//! activations (`gemm.xwt`, `gemm.xwt_exact`, `gemm.xwt_bf16x3`, the three `gemm_swiglu` kernels
//! and the narrow ones of `gemm_narrow.rs`): `acc += w[wb + col0 * k ..] · xᵀ` for one block of
//! `cols` columns of `xᵀ` (rows of `x`) starting at `xb` in the transposed layout, over all of K in
//! steps of `bk`. `wb` is where the weight's `[n, k]` matrix starts in `w` (an expert's in a
//! stacked tensor). Each step is only the two loads and the dot, so the host runs the loop fused
//! (`lse-codegen/src/host/tiles/fused.rs`).

use loom::function;

/// The K loop on `xp` in `gemm.transpose_x`'s layout (each two K interleaved, 64 rows of `x`
/// in a block of `(k + 1) / 2 * 128` values), the activations in the weight's type `T`.
#[function]
fn dot_k_pairs_at<T>(
    acc: Tile,
    a: Tile,
    b: Tile,
    w: &[T],
    wb: u32,
    xp: &[T],
    xb: u32,
    cols: u32,
    col0: u32,
    n: u32,
    k: u32,
    bk: u32,
) {
    for k0 in (0..k).step_by(bk) {
        tile_load_pairs(b, xp, xb + k0 * 64, 128, k - k0, cols);
        tile_load(a, w, wb + col0 * k + k0, k, n - col0, k - k0);
        tile_dot(acc, a, b);
    }
}

/// `dot_k_pairs_at` for the block of 64 rows of `x` from `row0` (a multiple of 64) and a
/// weight matrix at the start of `w`.
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
    dot_k_pairs_at(
        acc,
        a,
        b,
        w,
        0,
        xp,
        row0 * ((k + 1) / 2) * 2,
        64,
        col0,
        n,
        k,
        bk,
    );
}

/// The K loop on f32 `xt` in `gemm.transpose_x_f32`'s layout (64 values of K after another,
/// 64 rows of `x` in a block of `k * 64` values), the weight of type `T` widened to f32.
#[function]
fn dot_k_f32_at<T>(
    acc: Tile,
    a: Tile,
    b: Tile,
    w: &[T],
    wb: u32,
    xt: &[f32],
    xb: u32,
    cols: u32,
    col0: u32,
    n: u32,
    k: u32,
    bk: u32,
) {
    for k0 in (0..k).step_by(bk) {
        tile_load(a, w, wb + col0 * k + k0, k, n - col0, k - k0);
        tile_load(b, xt, xb + k0 * 64, 64, k - k0, cols);
        tile_dot(acc, a, b);
    }
}

/// `dot_k_f32_at` for the block of 64 rows of `x` from `row0` (a multiple of 64) and a
/// weight matrix at the start of `w`.
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
    dot_k_f32_at(acc, a, b, w, 0, xt, row0 * k, 64, col0, n, k, bk);
}

/// The K loop on `x3` in `gemm.transpose_x_bf16x3`'s layout for the block of 64 rows of `x`
/// from `row0` (a multiple of 64), against a weight matrix at the start of `w`: f32
/// activations as three bf16 pieces that sum to them exactly, each piece of each chunk of 128
/// K stored as `xp` stores its K (`[ceil(m / 64), ceil(k / 128), 3, 64, 64, 2]`), so the loop
/// runs over three times the chunks' K and step `k3` meets the weight's K from `k3 / 384 * 128
/// + k3 % 128`: each weight block meets the three pieces of its activations in turn, every
/// product exact. `bk` divides 128. `T` is bf16 (the pieces are bf16 by construction).
#[function]
fn dot_k_bf16x3<T>(
    acc: Tile,
    a: Tile,
    b: Tile,
    w: &[T],
    x3: &[T],
    row0: u32,
    col0: u32,
    n: u32,
    k: u32,
    bk: u32,
) {
    for k3 in (0..(k + 127) / 128 * 384).step_by(bk) {
        tile_load_pairs(
            b,
            x3,
            row0 * ((k + 127) / 128) * 384 + k3 * 64,
            128,
            k - min(k, k3 / 384 * 128 + k3 % 128),
            64,
        );
        tile_load(
            a,
            w,
            col0 * k + (k3 / 384 * 128 + k3 % 128),
            k,
            n - col0,
            k - min(k, k3 / 384 * 128 + k3 % 128),
        );
        tile_dot(acc, a, b);
    }
}
