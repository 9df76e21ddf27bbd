//! The GEMM every projection uses: `y = x · wᵀ` (+ `y` when `accumulate` is 1), with `x`
//! `[m, k]` activations, `w` `[n, k]` in its stored dtype and `y` `[m, n]` f32. `gemm.xwt`
//! takes the activations transposed and in the weight's type, in blocks of 64 rows of `x`
//! with each two K interleaved (`xp`, see `transpose_x`, written once per GEMM);
//! `gemm.xwt_exact` takes f32 activations (transposed, in blocks of 64 rows of `x`: `xt`, see
//! `transpose_x_f32`) against a weight of any of the three types.
//!
//! Both are written once with tiles (`LOOM.md`, "Tiles"). `gemm.xwt` runs one 64 x 64
//! accumulator per workgroup over K steps of 128 (48 KiB of GPU shared memory);
//! `gemm.xwt_exact` runs two 64 x 64 accumulators, one K loop each, with K steps of 64 f32
//! values in 64 KiB (an NVIDIA launch gives it as dynamic shared memory, past the 48 KiB a
//! block may declare statically). The activations' blocks are read whole: the transposes
//! write a last block of fewer than 64 rows of `x` out to 64 with zeros, whose products land
//! in rows of `y` the stores clip, so a ragged M keeps every K step's windows whole and the
//! host's fused K loop (below). Partial blocks of the weight (N, K) are zero-padded by the
//! loads; a workgroup whose second accumulator lies past the matrix skips it.
//!
//! Both compute blocks of `yᵀ = w · xᵀ`: the `a` operand is a block of weight rows as stored,
//! which the host reads in place (no copy), and the `b` operand a block of `xᵀ` that is 16 KiB
//! of contiguous memory, read in place too: for `gemm.xwt` a pairs window
//! (`tile_load_pairs`), on AVX512-BF16 levels the operand layout of `vdpbf16ps` (in `xᵀ` rows
//! of the whole `m`, 2 KiB apart at M = 512, the block's lines fell into few L1 sets and the
//! reads missed; copying them into the pair layout cost 5 to 10%), for `gemm.xwt_exact` 64
//! rows of 64 f32 values. Nothing is transposed, interleaved or copied inside the K loop, and
//! `y` is written transposed once at the end. Each K loop (the crate's procedures
//! `dot_k_pairs` and `dot_k_f32`, `k_loops.rs`) is only the two loads and the dot,
//! so where every step's blocks are whole the host runs it fused: each register block of the
//! dot goes through the whole K with its accumulators in registers, in chunks of K whose
//! `xᵀ` stays in L2 (`lse-codegen/src/host/tiles/fused.rs`); `gemm.xwt_exact`'s 16-bit
//! weight rows are widened (exactly) as its `fma` register blocks broadcast them. The host's AMX level runs the bf16
//! dots on AMX tiles; other levels and GPUs use the portable lowering.

use loom::kernel;

/// Grid: x = ceil(m / 64) row blocks of `y`, y = ceil(n / 64) column blocks, taken in groups
/// of 8 row blocks; inside a group row blocks run fastest, so consecutive workgroups (a host
/// thread's run of them, or GPU blocks scheduled together) read the same 64 weight rows,
/// which come from cache after the first: the weight is the larger operand of every
/// projection at M = 512. `accumulate` = 1 adds the product to `y` (a fused residual add);
/// 0 overwrites `y`. v6: one accumulator and K steps of 128; v5's two accumulators shared
/// each step's `xᵀ` block, but their loop was more than the two loads and one dot that the
/// host's fused K loop takes. v7: the groups of 8 row blocks. v8: `xp`'s blocks read whole
/// (64 rows of `x`, the last one's padding zeros from `transpose_x` v3), so a ragged M no
/// longer takes the unfused K loop in its last row block (M = 127 ran at 45% of the
/// `vdpbf16ps` peak against 92% at M = 128). v9: the group order through the crate's
/// functions (`group_order.rs`), the same machine code.
#[kernel(name = "gemm.xwt", version = 9, workgroup = 64, elem = [bf16, f16])]
fn gemm_xwt<W>(
    xp: &[W; (m + 63) / 64 * ((k + 1) / 2) * 128],
    w: &[W; n * k],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    accumulate: u32,
) {
    const BM: u32 = 64;
    const BN: u32 = 64;
    const BK: u32 = 128;
    let a = tile::<W, BN, BK>();
    let b = tile::<W, BK, BM>();
    let acc = tile::<f32, BN, BM>();
    // Workgroups in groups of 8 row blocks (`group_order.rs`).
    let row0 = grouped_row_block() * BM;
    let col0 = grouped_col_block() * BN;
    if accumulate == 1 {
        tile_load_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
    }
    dot_k_pairs(acc, a, b, w, xp, row0, col0, n, k, BK);
    tile_store_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
}

/// `xp` = `xᵀ` converted to `W` (round to nearest even), for `x` `[m, k]` f32, laid out
/// `[ceil(m / 64), ceil(k / 2), 64, 2]`: `x[c][2i + j]` at `xp[c / 64][i][c % 64][j]`, so a
/// block of 64 rows of `x` is contiguous with each two K interleaved (the padding of an odd
/// `k` is not written; a last block of fewer than 64 rows is written out to 64 with zeros,
/// which `gemm_xwt` reads). The activations of `gemm_xwt`, rounded and transposed once per
/// GEMM instead of once per column block of `y`, in the layout its dots read. Grid: x =
/// ceil(k / 64), y = ceil(m / 64). v3: the zero rows of the last block.
#[kernel(name = "gemm.transpose_x", version = 3, workgroup = 64, elem = [bf16, f16])]
fn transpose_x<W>(
    x: &[f32; m * k],
    xp: &mut [W; (m + 63) / 64 * ((k + 1) / 2) * 128],
    m: u32,
    k: u32,
) {
    let t = tile::<f32, 64, 64>();
    let r = tile::<W, 64, 64>();
    let k0 = group_id() * 64;
    let m0 = group_id_y() * 64;
    tile_load_t(t, x, m0 * k + k0, k, k - k0, m - m0);
    tile_copy(r, t);
    tile_store_pairs(r, xp, m0 * ((k + 1) / 2) * 2 + k0 * 64, 128, k - k0, 64);
}

/// `xt` = `xᵀ` for `x` `[m, k]` f32, laid out `[ceil(m / 64), k, 64]`: `x[c][j]` at
/// `xt[c / 64][j][c % 64]`, so the K rows of a block of 64 rows of `x` are contiguous 256-byte
/// rows (a last block of fewer than 64 rows is written out to 64 with zeros, which
/// `gemm_xwt_exact` reads). The activations of `gemm_xwt_exact`, transposed once per input.
/// Grid: x = ceil(k / 64), y = ceil(m / 64). v2: the zero rows of the last block.
#[kernel(name = "gemm.transpose_x_f32", version = 2, workgroup = 64)]
fn transpose_x_f32(x: &[f32; m * k], xt: &mut [f32; (m + 63) / 64 * k * 64], m: u32, k: u32) {
    let t = tile::<f32, 64, 64>();
    let k0 = group_id() * 64;
    let m0 = group_id_y() * 64;
    tile_load_t(t, x, m0 * k + k0, k, k - k0, m - m0);
    tile_store(t, xt, m0 * k + k0 * 64, 64, k - k0, 64);
}

/// `gemm_xwt` with f32 products: the weight is widened to f32 (exactly) and the
/// activations stay f32, so every product is rounded once by `fma`, as an f32 SGEMM on the
/// widened weight computes it. The model's projections use it: rounding activations to
/// bf16 moves perplexity measurably (README, "Numerics of the GEMM"). A workgroup owns
/// 128 x 64 of `y`, computed as two 64 x 64 blocks of `yᵀ = w · xᵀ` from `xt`
/// (`transpose_x_f32`'s layout), one K loop per block: per K step of 64 the `a` operand
/// is a block of weight rows as stored (the second block's loop reads the same rows again)
/// and the `b` operand 16 KiB of contiguous `xt`; `y` is written transposed once at the end.
/// The host reads both operands in place and widens each weight element as its dot
/// broadcasts it, so each K loop is only the two loads and the dot and runs fused
/// (`lse-codegen/src/host/tiles/fused.rs`): each register block's accumulators stay in
/// registers over the whole K. v5 read `x` in place and widened and
/// transposed the weight block into a tile every step, and loaded and stored its register
/// blocks' accumulators around every step. Grid: x = ceil(m / 128) row blocks, y = ceil(n /
/// 64) column blocks (in groups of 8 row blocks, row blocks fastest inside a group, as in
/// `gemm_xwt`). v7: `xt`'s blocks read whole, as `gemm_xwt` v8 reads `xp`'s. v8: the group
/// order through the crate's functions, as `gemm_xwt` v9.
#[kernel(name = "gemm.xwt_exact", version = 8, workgroup = 64, elem = [bf16, f16, f32])]
fn gemm_xwt_exact<W>(
    xt: &[f32; (m + 63) / 64 * k * 64],
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
    let a = tile::<f32, BN, BK>();
    let b = tile::<f32, BK, BM>();
    let acc0 = tile::<f32, BN, BM>();
    let acc1 = tile::<f32, BN, BM>();
    // Workgroups in groups of 8 row blocks (`group_order.rs`), each of 2 · BM rows.
    let row0 = grouped_row_block() * (2 * BM);
    let row1 = row0 + BM;
    let col0 = grouped_col_block() * BN;
    if accumulate == 1 {
        tile_load_t(acc0, y, row0 * n + col0, n, n - col0, m - row0);
        if row1 < m {
            tile_load_t(acc1, y, row1 * n + col0, n, n - col0, m - row1);
        }
    }
    dot_k_f32(acc0, a, b, w, xt, row0, col0, n, k, BK);
    if row1 < m {
        dot_k_f32(acc1, a, b, w, xt, row1, col0, n, k, BK);
    }
    tile_store_t(acc0, y, row0 * n + col0, n, n - col0, m - row0);
    if row1 < m {
        tile_store_t(acc1, y, row1 * n + col0, n, n - col0, m - row1);
    }
}

/// `x3`: f32 activations `x` `[m, k]` as three bf16 pieces that sum to them exactly, for
/// `gemm.xwt_bf16x3`: `h = bf16(x)`, `d = bf16(x - h)`, `l = x - h - d` (each rounding to
/// nearest even; both differences are exact in f32, and `l` has at most 8 significant bits,
/// so it is exact in bf16 too). Layout `[ceil(m / 64), ceil(k / 128), 3, 64, 64, 2]`: per
/// block of 64 rows of `x` and chunk of 128 K, the three pieces one after another, each in
/// `gemm.transpose_x`'s pairs layout (`x[c][128 q + 2 i + j]`'s piece `p` at
/// `x3[c / 64][q][p][i][c % 64][j]`); rows past `m` in the last block are written as zeros,
/// and so is K past `k` in the 64 K of a workgroup (the half of a last chunk past them is
/// not written: the products clip their windows to `k`). Grid: x = ceil(k / 64), y =
/// ceil(m / 64).
#[kernel(name = "gemm.transpose_x_bf16x3", version = 1, workgroup = 64, elem = [bf16])]
fn transpose_x_bf16x3<W>(
    x: &[f32; m * k],
    x3: &mut [W; (m + 63) / 64 * ((k + 127) / 128) * 384 * 64],
    m: u32,
    k: u32,
) {
    let t = tile::<f32, 64, 64>();
    let piece = tile::<W, 64, 64>();
    let wide = tile::<f32, 64, 64>();
    let k0 = group_id() * 64;
    let m0 = group_id_y() * 64;
    tile_load_t(t, x, m0 * k + k0, k, k - k0, m - m0);
    store_bf16x3(t, piece, wide, x3, m0, k0, k);
}

/// `gemm_xwt` on f32 activations as three exact bf16 pieces (`x3`, `transpose_x_bf16x3`'s
/// layout) against a bf16 weight: every product of a piece and a weight is exact in f32, so
/// the sum is that of the f32 products `x · w`, in the dot's order (on the host's AMX level
/// its tiles' own), at three times `gemm_xwt`'s dots. On a CPU with AMX, where `gemm_xwt`'s
/// dots run at several times the rate of `gemm_xwt_exact`'s `fma` blocks, this is the faster
/// way to f32 products (`--gemm-activations bf16x3`). A workgroup owns 64 x 64 of `y`, as in
/// `gemm_xwt`, over K steps of 128 of the pieces. Grid as `gemm_xwt`'s, but in groups of one
/// row block (`group_order.rs`): a run of workgroups keeps one block of 64 rows' pieces (384
/// KiB at K = 1024, 1.3 MiB at K = 3584) in L2 while the weight streams, where groups of 8
/// blocks' pieces (3 MiB) came from L3 (on a 2-core AMX Xeon 1.2 to 1.5 times the GFLOP/s on
/// the 0.8B shapes at M = 512 and 8192; the LM head's two row blocks, the same).
#[kernel(name = "gemm.xwt_bf16x3", version = 1, workgroup = 64, elem = [bf16])]
fn gemm_xwt_bf16x3<W>(
    x3: &[W; (m + 63) / 64 * ((k + 127) / 128) * 384 * 64],
    w: &[W; n * k],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    accumulate: u32,
) {
    const BM: u32 = 64;
    const BN: u32 = 64;
    const BK: u32 = 128;
    let a = tile::<W, BN, BK>();
    let b = tile::<W, BK, BM>();
    let acc = tile::<f32, BN, BM>();
    let row0 = grouped_row_block_in(1) * BM;
    let col0 = grouped_col_block_in(1) * BN;
    if accumulate == 1 {
        tile_load_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
    }
    dot_k_bf16x3(acc, a, b, w, x3, row0, col0, n, k, BK);
    tile_store_t(acc, y, row0 * n + col0, n, n - col0, m - row0);
}
