//! llama.cpp's activation quantization, as values: before ggml's CPU backend multiplies a
//! quantized weight it quantizes the activation rows to the weight's `vec_dot_type` (Q8_0 for
//! Q4_0, Q5_0, Q8_0; Q8_1 for Q4_1, Q5_1; Q8_K for the K-quants) and takes integer dot
//! products. These kernels write each activation as the value its quantized form stands for,
//! so an f32 GEMM on the dequantized weight forms the same products (up to f32 rounding of
//! the sums) and a GGUF checkpoint scores as llama-perplexity scores it.
//!
//! Rounding to an integer is to nearest even through `(v + 1.5 · 2^23) - 1.5 · 2^23`, exact for
//! `|v| <= 2^22` (the quantized values are at most 128 in magnitude), as ggml's
//! `_mm256_round_ps(_, _MM_ROUND_NEAREST)` and `nearest_int` round.

use loom::kernel;

/// Q8_0 and Q8_1 (the x86 `quantize_row_q8_0` / `_q8_1`): per block of 32 values, `amax` the
/// largest magnitude, `d = amax / 127` stored as f16, `q = round(v · (127 / amax))`, and the
/// value `f16(d) · q`. (Q8_1's block sum, which the Q4_1 and Q5_1 dot products use for the
/// weight's offset, is not modelled: those products take `f16(d · Σq)` where this gives the
/// exact `f16(d) · Σq`.) `x`, `y`: `[blocks · 32]`. Grid: x = blocks.
#[kernel(name = "act_quant.q8_0", version = 1, workgroup = 32)]
fn q8_0(x: &[f32; num_groups() * 32], y: &mut [f32; num_groups() * 32]) {
    let i = group_id() * 32 + local_id();
    let v = x[i];
    let amax = reduce_max(abs(v));
    let d = f16_to_f32(f32_to_f16(amax / 127.0));
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let q = (v * id + 12582912.0) - 12582912.0;
    y[i] = d * q;
}

/// Q8_0 as three parts (as `act_quant.q8_0` computes it): per block of 32 values, the
/// integers `q` (into `q` as bytes, in the tile order of `act_quant.q8_k_int` with runs of
/// four blocks, 128 values, where Q8_K's are of 256: value `c` of row `r` at byte
/// `((r / 64 · R + c / 128) · 64 + r % 64) · 128 + c % 128`, `R = ceil(k / 128)` runs a row,
/// a row's last run partial when `k` is not a multiple of 128), `f16(amax / 127)`
/// (into `d`) and `Σ q` (into `sums`, exact in f32), for `gemm.xwt_q8_0_q8_0_bm*`. `x` holds rows
/// of `k` values, `blocks` blocks in all; grid: x = ceil(blocks / 8).
///
/// v3 takes 8 blocks a workgroup, 64 work-items of four values each (`j · 64 + local_id()`
/// of the workgroup's 256, j = 0..3, so the block of a work-item's `j`-th value is `2 j +
/// local_id() / 32`): the blocks' largest magnitudes and sums are row maxima and row sums of
/// a 16 x 16 tile of the 256 (two rows a block), and each block's `q` a 32-byte run stored by
/// `tile_store_packed`. v4 lays out runs of four blocks (v3: one), so the GEMMs read four
/// blocks as one `[rows, 128]` window. v2 gave each block a workgroup of 32 work-items with a
/// workgroup reduction each for the maximum and the sum, and its stores of `d` and the sum
/// were a masked scatter per 16 work-items on the host. v5: rows in blocks of 64, the GEMMs'
/// row blocks (v4: 48). Same values for every input without NaN (a
/// maximum of magnitudes and a sum of integers below 2^24 do not depend on the order).
#[kernel(name = "act_quant.q8_0_int", version = 5, workgroup = 64)]
fn q8_0_int(
    x: &[f32; blocks * 32],
    q: &mut [i32; (blocks * 32 / k + 63) / 64 * 64 * ((k + 127) / 128 * 32)],
    d: &mut [f32; blocks],
    sums: &mut [f32; blocks],
    blocks: u32,
    k: u32,
) {
    let qt = tile::<i8, 1, 32>();
    let q8 = tile::<i8, 2, 128>();
    let t16 = tile::<f32, 16, 16>();
    let r16 = tile::<f32, 16, 1>();
    let vals = shared::<f32>(256);
    let qi = shared::<i32>(256);
    let halves = shared::<f32>(16);
    let l = local_id();
    let first = group_id() * 8;
    let n = min(8, blocks - first);
    let len = n * 32;
    let at0 = first * 32 + l;
    let v0 = if l < len { x[at0] } else { 0.0 };
    let v1 = if l + 64 < len { x[at0 + 64] } else { 0.0 };
    let v2 = if l + 128 < len { x[at0 + 128] } else { 0.0 };
    let v3 = if l + 192 < len { x[at0 + 192] } else { 0.0 };
    // Each 16 values' largest magnitude (a row of the tile), then each block's: rows 2b, 2b + 1.
    vals[l] = abs(v0);
    vals[l + 64] = abs(v1);
    vals[l + 128] = abs(v2);
    vals[l + 192] = abs(v3);
    tile_load(t16, vals, 0, 16, 16, 16);
    tile_row_max(r16, t16);
    tile_store(r16, halves, 0, 1, 16, 1);
    // (Each a choice between two uniform reads: an index formed from `l / 32` was a gather.)
    let lo = l < 32;
    let a0 = if lo {
        max(halves[0], halves[1])
    } else {
        max(halves[2], halves[3])
    };
    let a1 = if lo {
        max(halves[4], halves[5])
    } else {
        max(halves[6], halves[7])
    };
    let a2 = if lo {
        max(halves[8], halves[9])
    } else {
        max(halves[10], halves[11])
    };
    let a3 = if lo {
        max(halves[12], halves[13])
    } else {
        max(halves[14], halves[15])
    };
    let q0 = (v0 * (if a0 != 0.0 { 127.0 / a0 } else { 0.0 }) + 12582912.0) - 12582912.0;
    let q1 = (v1 * (if a1 != 0.0 { 127.0 / a1 } else { 0.0 }) + 12582912.0) - 12582912.0;
    let q2 = (v2 * (if a2 != 0.0 { 127.0 / a2 } else { 0.0 }) + 12582912.0) - 12582912.0;
    let q3 = (v3 * (if a3 != 0.0 { 127.0 / a3 } else { 0.0 }) + 12582912.0) - 12582912.0;
    qi[l] = q0 as i32;
    qi[l + 64] = q1 as i32;
    qi[l + 128] = q2 as i32;
    qi[l + 192] = q3 as i32;
    // Work-item b < n: block b's scale.
    if l < n {
        let a = max(halves[2 * l], halves[2 * l + 1]);
        d[first + l] = f16_to_f32(f32_to_f16(a / 127.0));
    }
    // The sums, as the maxima: the values' `q` in the tile, rows added in pairs.
    vals[l] = q0;
    vals[l + 64] = q1;
    vals[l + 128] = q2;
    vals[l + 192] = q3;
    tile_load(t16, vals, 0, 16, 16, 16);
    tile_zero(r16);
    tile_row_sum(r16, t16);
    tile_store(r16, halves, 0, 1, 16, 1);
    if l < n {
        sums[first + l] = halves[2 * l] + halves[2 * l + 1];
    }
    // The blocks' `q`: two runs of 4 blocks, 64 · 32 words apart, while the 8 blocks start a
    // run and lie in one row (always where a row has a multiple of 8 blocks), else one
    // block at a time.
    let runs = (k + 127) / 128;
    let r0 = first / (k / 32);
    let c0 = first % (k / 32);
    if n == 8 && c0 % 4 == 0 && c0 + 8 <= k / 32 {
        tile_load(q8, qi, 0, 128, 2, 128);
        tile_store_packed(
            q8,
            q,
            ((r0 / 64 * runs + c0 / 4) * 64 + r0 % 64) * 32,
            64 * 32,
            2,
            128,
        );
    } else {
        for b in 0..n {
            let blk = first + b;
            let r = blk / (k / 32);
            let c = blk % (k / 32);
            tile_load(qt, qi, b * 32, 32, 1, 32);
            tile_store_packed(
                qt,
                q,
                ((r / 64 * runs + c / 4) * 64 + r % 64) * 32 + c % 4 * 8,
                8,
                1,
                32,
            );
        }
    }
}

/// Q8_K (`quantize_row_q8_K_ref`, which the x86 build uses): per block of 256 values, `max`
/// the first value of the largest magnitude (with its sign), `iscale = -127 / max`,
/// `q = min(127, round(iscale · v))`, `d = 1 / iscale` (f32), and the value `d · q`; an
/// all-zero block stays zero. `x`, `y`: `[blocks · 256]`. Grid: x = blocks.
#[kernel(name = "act_quant.q8_k", version = 1, workgroup = 256)]
fn q8_k(x: &[f32; num_groups() * 256], y: &mut [f32; num_groups() * 256]) {
    let i = group_id() * 256 + local_id();
    let v = x[i];
    let (amax, at) = argmax(abs(v), local_id());
    let max = x[group_id() * 256 + at];
    let iscale = if amax != 0.0 { -127.0 / max } else { 0.0 };
    let d = if amax != 0.0 { 1.0 / iscale } else { 0.0 };
    let q = min((iscale * v + 12582912.0) - 12582912.0, 127.0);
    y[i] = d * q;
}

/// Q8_K as three parts (`quantize_row_q8_K_ref`, as `act_quant.q8_k` computes it): per block
/// of 256 values, `max` the first value of the largest magnitude (with its sign),
/// `iscale = -127 / max`, `q = min(127, round(iscale · v))` (into `q`), `d = 1 / iscale`
/// (into `d`; 0 for an all-zero block), and as integers the sums of each 32 consecutive `q`
/// (into `sums`: the Q4_K and Q5_K GEMMs' minimum terms) and, times -32, of each 16 (into
/// `offsets16`: ggml's `bsums` as the Q6_K GEMM takes them, the row offsets that take its
/// quants' offset of 32 off each sub-block's sum). `x` holds rows of `k` values; grid: x =
/// blocks.
///
/// `q` is laid out for the integer GEMMs' `a` tiles (`gemm_int`), four values to a word
/// (little-endian bytes, read by `tile_load_packed`): rows in blocks of 64 (v9: 48), and
/// within a block each block of 256 values its 64 rows' values one after another, i.e. value
/// `c` of row `r` at byte `((r / 64 · k / 256 + c / 256) · 64 + r % 64) · 256 + c % 256` (rows
/// past the last of a partial block are not written). A block's tile is then one run of 16 KiB,
/// where rows `k` apart fell into the same few cache sets (and v5, a word per value, took
/// four times the memory, which the GEMMs narrowed to bytes at every step); v9 lays out whole
/// blocks of 256 where v8 laid out steps of 32 (runs of 1.5 KiB), so that one `a` tile holds
/// a row's whole block for the GEMMs' dots scaled per sub-block. `offsets16` is row by row,
/// a word per 16 values: sum `j` of row `r` at `r · k / 16 + j` (v8: 48 rows in a run per
/// `j`, for the one-column offset tiles of v10 of the Q6_K GEMM).
///
/// v7 (64 work-items, four values each: `j · 64 + local_id()`, j = 0..3): each work-item
/// takes the first of its four values with the largest magnitude, and one `argmax` over the
/// work-items, ties to the lower position, gives the block's first; `max` is `broadcast` from
/// the work-item holding it. The sums per 16 are the row sums of a `[16, 16]` tile of the
/// `q`, and those per 32 add pairs of them. v6 gave each of 256 work-items one value: its
/// collectives, its per-work-item scalars (two divisions each) and its stores of `d` and the
/// sums (a masked scatter per 16 work-items on the host) ran over 16 vectors a block where
/// these run over 4, and its row sums of an `[8, 32]` tile took the host's unvectorised
/// path (rows not a multiple of 16). Same values
/// for every input without NaN; a NaN never wins (it did not in v6 either), and a block
/// without a positive magnitude (all zeros, or all NaN) is stored as zeros with `d` 0, as
/// llama.cpp's `if (!amax)` does. v8: `offsets16` (-32 times the sums per 16, in tile order)
/// where v7 stored the plain sums row by row.
#[kernel(name = "act_quant.q8_k_int", version = 10, workgroup = 64)]
fn q8_k_int(
    x: &[f32; num_groups() * 256],
    q: &mut [i32; (num_groups() * 256 / k + 63) / 64 * 64 * k / 4],
    d: &mut [f32; num_groups()],
    sums: &mut [i32; num_groups() * 8],
    offsets16: &mut [i32; (num_groups() * 256 / k + 63) / 64 * 64 * (k / 16)],
    k: u32,
) {
    let qt16 = tile::<f32, 16, 16>();
    let it = tile::<i8, 8, 32>();
    let st16 = tile::<f32, 16, 1>();
    let qs = shared::<f32>(256);
    let qi = shared::<i32>(256);
    let s16 = shared::<f32>(16);
    let l = local_id();
    let at0 = group_id() * 256 + l;
    let v0 = x[at0];
    let v1 = x[at0 + 64];
    let v2 = x[at0 + 128];
    let v3 = x[at0 + 192];
    // The first of the four with the largest magnitude: a NaN's magnitude counts as -1, below
    // every number's, and a later value must be strictly larger to replace an earlier one.
    let m0 = if abs(v0) >= 0.0 { abs(v0) } else { -1.0 };
    let m1 = if abs(v1) > m0 { abs(v1) } else { m0 };
    let m2 = if abs(v2) > m1 { abs(v2) } else { m1 };
    let m3 = if abs(v3) > m2 { abs(v3) } else { m2 };
    let p1 = if abs(v1) > m0 { l + 64 } else { l };
    let p2 = if abs(v2) > m1 { l + 128 } else { p1 };
    let p3 = if abs(v3) > m2 { l + 192 } else { p2 };
    let w1 = if abs(v1) > m0 { v1 } else { v0 };
    let w2 = if abs(v2) > m1 { v2 } else { w1 };
    let w3 = if abs(v3) > m2 { v3 } else { w2 };
    let (amax, at) = argmax(m3, p3);
    let max = broadcast(w3, at % 64);
    let iscale = if amax > 0.0 { -127.0 / max } else { 0.0 };
    let q0 = min((iscale * v0 + 12582912.0) - 12582912.0, 127.0);
    let q1 = min((iscale * v1 + 12582912.0) - 12582912.0, 127.0);
    let q2 = min((iscale * v2 + 12582912.0) - 12582912.0, 127.0);
    let q3 = min((iscale * v3 + 12582912.0) - 12582912.0, 127.0);
    qi[l] = q0 as i32;
    qi[l + 64] = q1 as i32;
    qi[l + 128] = q2 as i32;
    qi[l + 192] = q3 as i32;
    qs[l] = q0;
    qs[l + 64] = q1;
    qs[l + 128] = q2;
    qs[l + 192] = q3;
    if l == 0 {
        d[group_id()] = if amax > 0.0 { 1.0 / iscale } else { 0.0 };
    }
    // Row `r`, block `sb` of it: one run of 64 words.
    let r = group_id() / (k / 256);
    let sb = group_id() % (k / 256);
    tile_load(it, qi, 0, 32, 8, 32);
    tile_store_packed(
        it,
        q,
        ((r / 64 * (k / 256) + sb) * 64 + r % 64) * 64,
        8,
        8,
        32,
    );
    tile_load(qt16, qs, 0, 16, 16, 16);
    tile_row_sum(st16, qt16);
    tile_store(st16, s16, 0, 1, 16, 1);
    if l < 8 {
        sums[group_id() * 8 + l] = (s16[2 * l] + s16[2 * l + 1]) as i32;
    }
    if l < 16 {
        offsets16[r * (k / 16) + sb * 16 + l] = -32 * (s16[l] as i32);
    }
}

/// Copies rows of quantized activations (either kernel above: `q` in their tile order, the
/// per-row parts row after row) into the same layout for the rows `rows` names: output row
/// `i` is input row `rows[i]`, bit for bit. Quantization is row by row, so the rows a mixture
/// of experts' slots gather from the quantized tokens are the quantized gathered rows: one
/// quantization of the tokens serves the experts' gate and up products, where quantizing the
/// gathered rows (`tokens · k` and their padding, 11 times the tokens at 8 of 256 experts)
/// and gathering them in f32 first cost more than the copy.
///
/// Per row: `ceil(k / 4 / 2^qw_log2)` runs of `2^qw_log2` words of `q` (32 for Q8_0's runs of
/// four blocks, the last one partial where `k` is not a multiple of 128; 64 for Q8_K's blocks
/// of 256; a shift and a mask where a division by the run's length took 3.7 times as long),
/// `dl` floats of `d`, `sl` floats of `sums` (Q8_0), `s32l` words of `sums32` and `ol` of
/// `offsets16` (Q8_K); a part of length 0 is not copied. The input rows
/// must lie inside the input buffers (the caller checks: their lengths depend on how many
/// rows were quantized). The padding rows of the output's last block of 64 are not written.
/// One workgroup per output row; grid: x = rows. v2: runs of any length (v1: 8 words) and
/// `offsets16` row by row, as `q8_k_int` v9 lays them out. v3: a row's last run may be
/// partial (`q8_0_int` v4). v4: blocks of 64 rows (`q8_0_int` v5, `q8_k_int` v10).
#[kernel(name = "act_quant.gather_rows", version = 4, workgroup = 64)]
fn gather_rows(
    q: &[i32],
    d: &[f32],
    sums: &[f32],
    sums32: &[i32],
    offsets16: &[i32],
    rows: &[u32; num_groups()],
    gq: &mut [i32; (num_groups() + 63) / 64 * 64 * k / 4],
    gd: &mut [f32; num_groups() * dl],
    gsums: &mut [f32; num_groups() * sl],
    gsums32: &mut [i32; num_groups() * s32l],
    goffsets16: &mut [i32; (num_groups() + 63) / 64 * 64 * ol],
    k: u32,
    qw_log2: u32,
    dl: u32,
    sl: u32,
    s32l: u32,
    ol: u32,
) {
    const WG: u32 = 64;
    let i = group_id();
    let l = local_id();
    let s = rows[i];
    // Word `j` of row `r` is word `j % qw` of its run `j / qw`, at `((r / 64 · runs + j / qw)
    // · 64 + r % 64) · qw`.
    let qw = 1u32 << qw_log2;
    let runs = (k / 4 + qw - 1) / qw;
    for c in 0..(k / 4 + WG - 1) / WG {
        let j = c * WG + l;
        if j < k / 4 {
            let run = j >> qw_log2;
            let at = j & (qw - 1);
            gq[((i / 64 * runs + run) * 64 + i % 64) * qw + at] =
                q[((s / 64 * runs + run) * 64 + s % 64) * qw + at];
        }
    }
    for c in 0..(dl + WG - 1) / WG {
        let j = c * WG + l;
        if j < dl {
            gd[i * dl + j] = d[s * dl + j];
        }
    }
    for c in 0..(sl + WG - 1) / WG {
        let j = c * WG + l;
        if j < sl {
            gsums[i * sl + j] = sums[s * sl + j];
        }
    }
    for c in 0..(s32l + WG - 1) / WG {
        let j = c * WG + l;
        if j < s32l {
            gsums32[i * s32l + j] = sums32[s * s32l + j];
        }
    }
    for c in 0..(ol + WG - 1) / WG {
        let j = c * WG + l;
        if j < ol {
            goffsets16[i * ol + j] = offsets16[s * ol + j];
        }
    }
}
