//! The GEMM on weights that stay in mlx's affine quantization (an MLX checkpoint that
//! `mlx_lm convert -q` wrote): `y = x · wᵀ` (+ `y` when `accumulate` is 1) for a weight
//! `[n, k]` of 4- or 8-bit values packed little-endian into `u32` words (`w`, rows of
//! `k · bits / 32` words; value `j` of a row in bits `j · bits ..` of its bit stream) with one
//! scale and one bias per group of `group` values of a row (`scales`, `biases`: `[n, k / group]`
//! in the checkpoint's float dtype `W`; `group` a multiple of 32). The activations are f32.
//!
//! A value is what `mx.dequantize` computes, in the scales' dtype: `W(W(s · q) + b)`, each
//! operation in f32 and rounded to `W` (for f32 scales, no rounding). Each K step, every
//! work-item writes `s · q` for 32 values of one weight row into the shared array `wq`; the
//! block then goes through tiles of `W` and f32 for the two roundings and the bias (one per
//! column of the block: 32 values of a row lie in one group), and through the tile `dot` as
//! in `gemm.xwt_exact_f32`: the products and their order are the same, so on the host the
//! result is the same bits as that kernel's on the weight dequantized at load
//! (`lse_runtime::model::mlx::dequantize_row`).
//!
//! Blocking (both): as `gemm_quant.rs`: x = ceil(m / 256) row blocks of `y`, y = ceil(n / 32)
//! column blocks; a workgroup owns 256 x 32 of `y` (four 64 x 32 accumulators sharing each
//! dequantized block) and work-item `c` dequantizes weight row `col0 + c` into column `c` of
//! `wq`. One kernel per bit width (the constant instances `mlx4` and `mlx8`), so that the
//! unpacking has constant shifts.

use loom::kernel;

/// `BITS`-bit values: a K step's 32 values are `32 / PER_WORD` words of `PER_WORD` values
/// (4 bits: 4 words of 8; 8 bits: 8 words of 4). Until v2 the two widths were written out
/// one by one. v3: the four row blocks through the crate's procedures (`row_blocks.rs`), as
/// `gemm_quant` v3.
#[kernel(
    name = "gemm.xwt",
    version = 3,
    workgroup = 32,
    elem = [bf16, f16, f32],
    consts = [mlx4 = 4, mlx8 = 8]
)]
fn gemm_xwt<W, const BITS: u32>(
    x: &[f32; m * k],
    w: &[u32; n * (k / (32 / BITS))],
    scales: &[W; n * (k / group)],
    biases: &[W; n * (k / group)],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    group: u32,
    accumulate: u32,
) {
    const BM: u32 = 64;
    const BN: u32 = 32;
    const BK: u32 = 32;
    const PER_WORD: u32 = 32 / BITS;
    const MASK: u32 = (1 << BITS) - 1;
    let a = tile::<f32, BM, BK>();
    let b = tile::<f32, BK, BN>();
    let rounded = tile::<W, BK, BN>();
    let bias = tile::<f32, 1, BN>();
    let acc0 = tile::<f32, BM, BN>();
    let acc1 = tile::<f32, BM, BN>();
    let acc2 = tile::<f32, BM, BN>();
    let acc3 = tile::<f32, BM, BN>();
    let wq = shared::<f32>(BK * BN);
    let bq = shared::<f32>(BN);
    let row0 = group_id() * (4 * BM);
    let col0 = group_id_y() * BN;
    // Rows past the weight's last dequantize the last row again: their columns of `y` are
    // not stored, and every work-item takes the same path.
    let wrow = min(col0 + local_id(), n - 1);
    let row_words = k / PER_WORD;
    let groups = k / group;
    if accumulate == 1 {
        load_rows4(acc0, acc1, acc2, acc3, y, row0, BM, col0, m, n);
    }
    for k0 in (0..k).step_by(BK) {
        let at = wrow * row_words + k0 / PER_WORD;
        let g = wrow * groups + k0 / group;
        let s = to_f32(scales[g]);
        bq[local_id()] = to_f32(biases[g]);
        for t in 0..BK / PER_WORD {
            let word = w[at + t];
            for i in 0..PER_WORD {
                wq[(PER_WORD * t + i) * BN + local_id()] = s * ((word >> (BITS * i)) & MASK) as f32;
            }
        }
        // W(W(s · q) + b), the bias broadcast down each column (one weight row).
        tile_load(rounded, wq, 0, BN, BK, BN);
        tile_copy(b, rounded);
        tile_load(bias, bq, 0, BN, 1, BN);
        tile_add(b, bias);
        tile_copy(rounded, b);
        tile_copy(b, rounded);
        dot_rows4(acc0, acc1, acc2, acc3, a, b, x, row0, BM, k0, m, k);
    }
    store_rows4(acc0, acc1, acc2, acc3, y, row0, BM, col0, m, n);
}
