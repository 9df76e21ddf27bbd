//! A SwiGLU MLP's gate and up products and its element-wise step in one kernel, written as
//! the down product's activations: `h = silu(x · gateᵀ) ⊙ (x · upᵀ)`, for `x` `[m, k]` and
//! `gate`, `up` `[n, k]`, is `[m, n]`, which the down GEMM reads transposed (`xᵀ`,
//! `gemm.rs`). The GEMMs compute blocks of `yᵀ = w · xᵀ`, so each workgroup's 64 x 64 block
//! of `hᵀ` is already a block of that layout: it is stored as it stands, where the unfused
//! MLP stored both products in f32, read them back for `ffn.swiglu`, stored `h`, and
//! transposed it in `gemm.transpose_x` before the down GEMM.
//!
//! Each workgroup runs the gate's K loop into `g`, turns `g` into `silu(g)` with `u` and `s`
//! as temporaries, runs the up's K loop into `u`, multiplies, and stores. `silu` is LOOM's,
//! `g · (1 / (1 + exp(-g)))`, one tile statement per operation, so every element goes
//! through the same IEEE operations as `ffn.swiglu`'s `silu(a) · b`; the dots are
//! `gemm.xwt`'s and `gemm.xwt_exact`'s (in K steps of 32 where those take 128 and 64, which
//! on the host's fused K loop and in every f32 `tile_dot` keep each element's order), so on
//! the host the fused MLP gives the unfused one's values bit for bit. Both K loops are only
//! the two loads and the dot, so the host runs each fused
//! (`lse-codegen/src/host/tiles/fused.rs`). The three f32 tiles, the operands of a K step and
//! (for a 16-bit `hᵀ`) its rounded block fill the 64 KiB a GPU workgroup may have; the rounded
//! block has a tile of its own, since the host reads a tile that is also a copy's destination
//! from its own storage rather than in place, and the K loops would not run fused.

use loom::{function, kernel};

/// `g` = `silu(g)` = `g · (1 / (1 + exp(-g)))` for a 64 x 64 tile, one tile statement per
/// operation, with `u` and `s` (f32 tiles of its shape) as temporaries; `ones`: 64 values of
/// 1.0.
#[function]
fn silu_tile(g: Tile, u: Tile, s: Tile, ones: &[f32]) {
    tile_copy(u, g);
    tile_scale(u, -1.0);
    tile_exp(u);
    tile_load(s, ones, 0, 0, 64, 64);
    tile_add(u, s);
    tile_div(s, u);
    tile_mul(g, s);
}

/// `hp` = `hᵀ` in `W` (round to nearest even) in `gemm.transpose_x`'s layout for `[m, n]`
/// (`[ceil(m / 64), ceil(n / 2), 64, 2]`, a last block of fewer than 64 rows written out to
/// 64 with zeros), from `xp` = `xᵀ` in that layout for `[m, k]` (`gemm.xwt`'s activations);
/// `ones`: 64 values of 1.0. Grid: x = ceil(m / 64) row blocks, y = ceil(n / 64) column
/// blocks, in `gemm.xwt`'s groups of 8 row blocks. v2: the group order through the crate's
/// functions (`group_order.rs`), as `gemm.xwt` v9.
#[kernel(name = "gemm.xwt_swiglu", version = 2, workgroup = 64, elem = [bf16, f16])]
fn gemm_xwt_swiglu<W>(
    xp: &[W; (m + 63) / 64 * ((k + 1) / 2) * 128],
    gate: &[W; n * k],
    up: &[W; n * k],
    ones: &[f32; 64],
    hp: &mut [W; (m + 63) / 64 * ((n + 1) / 2) * 128],
    m: u32,
    n: u32,
    k: u32,
) {
    const BM: u32 = 64;
    const BN: u32 = 64;
    const BK: u32 = 32;
    let a = tile::<W, BN, BK>();
    let b = tile::<W, BK, BM>();
    let g = tile::<f32, BN, BM>();
    let u = tile::<f32, BN, BM>();
    let s = tile::<f32, BN, BM>();
    let o = tile::<W, BN, BM>();
    // Workgroups in groups of 8 row blocks (`group_order.rs`).
    let row0 = grouped_row_block() * BM;
    let col0 = grouped_col_block() * BN;
    dot_k_pairs(g, a, b, gate, xp, row0, col0, n, k, BK);
    silu_tile(g, u, s, ones);
    tile_zero(u);
    dot_k_pairs(u, a, b, up, xp, row0, col0, n, k, BK);
    tile_mul(g, u);
    tile_copy(o, g);
    tile_store_pairs(
        o,
        hp,
        row0 * ((n + 1) / 2) * 2 + col0 * 64,
        128,
        n - col0,
        BM,
    );
}

/// `ht` = `hᵀ` in f32 in `gemm.transpose_x_f32`'s layout for `[m, n]` (`[ceil(m / 64), n,
/// 64]`, a last block of fewer than 64 rows written out to 64 with zeros), from `xt` = `xᵀ`
/// in that layout for `[m, k]` (`gemm.xwt_exact`'s activations: f32 products against the
/// widened weights); `ones`: 64 values of 1.0. Grid: x = ceil(m / 64) row blocks, y =
/// ceil(n / 64) column blocks, in groups of 8 row blocks. v2: as `gemm_xwt_swiglu` v2.
#[kernel(name = "gemm.xwt_exact_swiglu", version = 2, workgroup = 64, elem = [bf16, f16, f32])]
fn gemm_xwt_exact_swiglu<W>(
    xt: &[f32; (m + 63) / 64 * k * 64],
    gate: &[W; n * k],
    up: &[W; n * k],
    ones: &[f32; 64],
    ht: &mut [f32; (m + 63) / 64 * n * 64],
    m: u32,
    n: u32,
    k: u32,
) {
    const BM: u32 = 64;
    const BN: u32 = 64;
    const BK: u32 = 32;
    let a = tile::<f32, BN, BK>();
    let b = tile::<f32, BK, BM>();
    let g = tile::<f32, BN, BM>();
    let u = tile::<f32, BN, BM>();
    let s = tile::<f32, BN, BM>();
    let row0 = grouped_row_block() * BM;
    let col0 = grouped_col_block() * BN;
    dot_k_f32(g, a, b, gate, xt, row0, col0, n, k, BK);
    silu_tile(g, u, s, ones);
    tile_zero(u);
    dot_k_f32(u, a, b, up, xt, row0, col0, n, k, BK);
    tile_mul(g, u);
    tile_store(g, ht, row0 * n + col0 * BM, BM, n - col0, BM);
}

/// `h3` = `h` as three exact bf16 pieces in `gemm.transpose_x_bf16x3`'s layout for `[m, n]`
/// (the down product's activations under `--gemm-activations bf16x3`), from `x3` = `x` in
/// that layout for `[m, k]`, against bf16 weights (`gemm.xwt_bf16x3`'s dots: each product
/// exact); `ones`: 64 values of 1.0. Grid as `gemm_xwt_swiglu`'s, in groups of one row block
/// as `gemm.xwt_bf16x3`'s.
#[kernel(name = "gemm.xwt_bf16x3_swiglu", version = 1, workgroup = 64, elem = [bf16])]
fn gemm_xwt_bf16x3_swiglu<W>(
    x3: &[W; (m + 63) / 64 * ((k + 127) / 128) * 384 * 64],
    gate: &[W; n * k],
    up: &[W; n * k],
    ones: &[f32; 64],
    h3: &mut [W; (m + 63) / 64 * ((n + 127) / 128) * 384 * 64],
    m: u32,
    n: u32,
    k: u32,
) {
    const BM: u32 = 64;
    const BN: u32 = 64;
    const BK: u32 = 32;
    let a = tile::<W, BN, BK>();
    let b = tile::<W, BK, BM>();
    let g = tile::<f32, BN, BM>();
    let u = tile::<f32, BN, BM>();
    let s = tile::<f32, BN, BM>();
    let o = tile::<W, BN, BM>();
    let row0 = grouped_row_block_in(1) * BM;
    let col0 = grouped_col_block_in(1) * BN;
    dot_k_bf16x3(g, a, b, gate, x3, row0, col0, n, k, BK);
    silu_tile(g, u, s, ones);
    tile_zero(u);
    dot_k_bf16x3(u, a, b, up, x3, row0, col0, n, k, BK);
    tile_mul(g, u);
    store_bf16x3(g, o, s, h3, row0, col0, n);
}
