//! A LOOM procedure (`lse-dsl/LOOM.md`, "Functions") that writes f32 values as three exact
//! bf16 pieces in `gemm.transpose_x_bf16x3`'s layout (`gemm.rs`), for the kernels that write
//! it: that transpose and `gemm.xwt_bf16x3_swiglu`.

use loom::function;

/// Stores `t`, a 64 x 64 f32 block of `xᵀ` (K rows from `k0`, a multiple of 64, by the 64 rows
/// of `x` from `row0`, a multiple of 64), into `x3` as `x`'s pieces for a K of `k`: `h =
/// bf16(t)`, `d = bf16(t - h)`, `l = bf16(t - h - d)`, each in its place of the block's chunk
/// of 128 K. `piece` (64 x 64 bf16) and `wide` (64 x 64 f32) are temporaries; `t` is left
/// holding `l`.
#[function]
fn store_bf16x3<T>(t: Tile, piece: Tile, wide: Tile, x3: &mut [T], row0: u32, k0: u32, k: u32) {
    let at = row0 * ((k + 127) / 128) * 384 + k0 / 128 * 384 * 64 + k0 % 128 * 64;
    tile_copy(piece, t);
    tile_store_pairs(piece, x3, at, 128, 64, 64);
    tile_copy(wide, piece);
    tile_sub(t, wide);
    tile_copy(piece, t);
    tile_store_pairs(piece, x3, at + 128 * 64, 128, 64, 64);
    tile_copy(wide, piece);
    tile_sub(t, wide);
    tile_copy(piece, t);
    tile_store_pairs(piece, x3, at + 2 * 128 * 64, 128, 64, 64);
}
