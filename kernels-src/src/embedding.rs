//! `embedding.gather_<ty>`: the token embedding, the first operation of the prefill. Each
//! token's row of the table is read in its stored dtype and widened to f32 exactly; tables
//! that stay quantized are dequantized as they are read (`embedding.gather_q`: ggml's block
//! formats; `embedding.gather_mlx_<ty>`: mlx's affine quantization).

use loom::kernel;

/// `ids`: `[t]`, each below the table's row count (the op checks); `table`: `[vocab, hidden]`;
/// `x`: `[t, hidden]` f32. Grid: x = t.
#[kernel(name = "embedding.gather", version = 1, workgroup = 256, elem = [bf16, f16, f32])]
fn embed_tokens<E>(
    ids: &[u32; num_groups()],
    table: &[E],
    x: &mut [f32; num_groups() * hidden],
    hidden: u32,
) {
    for c in 0..(hidden + group_size() - 1) / group_size() {
        if c * group_size() + local_id() < hidden {
            x[group_id() * hidden + c * group_size() + local_id()] =
                to_f32(table[ids[group_id()] * hidden + c * group_size() + local_id()]);
        }
    }
}

/// `embed_tokens` on a table that stays in a ggml block format: `table` holds the tensor's
/// bytes as little-endian `u32` words (rows of `hidden / QK` blocks), each value dequantized
/// as ggml's `dequantize_row_*` does; `format` (uniform): 0 = Q8_0, 1 = Q4_K, 2 = Q5_K,
/// 3 = Q6_K, 4 = Q4_0, 5 = Q4_1, 6 = Q5_0, 7 = Q5_1 (`gemm_quant.rs` reads the same bytes the
/// same way).
#[kernel(name = "embedding.gather_q", version = 1, workgroup = 256)]
fn embed_tokens_q(
    ids: &[u32; num_groups()],
    table: &[u32],
    x: &mut [f32; num_groups() * hidden],
    hidden: u32,
    format: u32,
) {
    let id = ids[group_id()];
    for c in 0..(hidden + group_size() - 1) / group_size() {
        let e = c * group_size() + local_id();
        if e < hidden {
            if format == 0 {
                let at = id * (hidden / 32 * 34) + e / 32 * 34;
                let d = f16_at(table, at);
                let o = at + 2 + e % 32;
                let q = ((table[o / 4] << (24 - o % 4 * 8)) as i32) >> 24;
                x[group_id() * hidden + e] = q as f32 * d;
            } else if format < 3 {
                // Q4_K and Q5_K: one layout of scales; Q5_K's fifth bits lie in the 32
                // bytes before its quants.
                let words = if format == 1 { 36u32 } else { 44u32 };
                let at = id * (hidden / 256 * words) + e / 256 * words;
                let j = e % 256 / 32;
                let dm = table[at];
                let d = f16_to_f32(f16_from_bits(dm));
                let dmin = f16_to_f32(f16_from_bits(dm >> 16));
                let s_j = (table[at + 1 + j / 4] >> (j % 4 * 8)) & 255;
                let s_j4 = (table[at + 2 + j / 4] >> (j % 4 * 8)) & 255;
                let sc = if j < 4 {
                    s_j & 63
                } else {
                    (s_j4 & 15) | ((((table[at + j / 4] >> (j % 4 * 8)) & 255) >> 6) << 4)
                };
                let mn = if j < 4 {
                    s_j4 & 63
                } else {
                    (s_j4 >> 4) | ((s_j >> 6) << 4)
                };
                let l = e % 32;
                let qs = at + words - 32 + j / 2 * 8 + l / 4;
                let low = (table[qs] >> (l % 4 * 8 + j % 2 * 4)) & 15;
                let high = if format == 2 {
                    (table[at + 4 + l / 4] >> (l % 4 * 8 + j)) & 1
                } else {
                    0
                };
                let q = low + high * 16;
                x[group_id() * hidden + e] = d * sc as f32 * q as f32 - dmin * mn as f32;
            } else if format == 3 {
                let at = id * (hidden / 256 * 210) + e / 256 * 210;
                let half = e % 256 / 128;
                let kq = e % 128 / 32;
                let l = e % 32;
                let od = at + 208;
                let d = f16_at(table, od);
                let os = at + 192 + 8 * half + 2 * kq + l / 16;
                let s = i8_at(table, os);
                let ol = at + 64 * half + 32 * (kq % 2) + l;
                let oh = at + 128 + 32 * half + l;
                let lo = (table[ol / 4] >> (ol % 4 * 8 + kq / 2 * 4)) & 15;
                let hi = (table[oh / 4] >> (oh % 4 * 8 + 2 * kq)) & 3;
                let q = (lo | (hi << 4)) as i32 - 32;
                x[group_id() * hidden + e] = d * s as f32 * q as f32;
            } else {
                // Q4_0, Q4_1, Q5_0, Q5_1: blocks of 32 of 18, 20, 22, 24 bytes: f16 `d`, f16
                // `m` (Q4_1, Q5_1), 32 fifth bits `qh` (Q5_0, Q5_1; bit `l` for element `l`),
                // 16 bytes `qs` (element `l` in the low nibble of `qs[l % 16]` for `l < 16`,
                // else the high one).
                let block = 18 + 2 * (format - 4);
                let with_min = format % 2 == 1;
                let five = format >= 6;
                let at = id * (hidden / 32 * block) + e / 32 * block;
                let l = e % 32;
                let d = f16_at(table, at);
                let oh = if with_min { at + 4 } else { at + 2 };
                let qs = if five { oh + 4 } else { oh };
                let oq = qs + l % 16;
                let low = (table[oq / 4] >> (oq % 4 * 8 + l / 16 * 4)) & 15;
                let ob = oh + l / 8;
                let high = if five {
                    (table[ob / 4] >> (ob % 4 * 8 + l % 8)) & 1
                } else {
                    0
                };
                let q = low | (high << 4);
                if with_min {
                    let om = at + 2;
                    let mn = f16_at(table, om);
                    x[group_id() * hidden + e] = q as f32 * d + mn;
                } else {
                    let offset = if five { 16 } else { 8 };
                    x[group_id() * hidden + e] = (q as i32 - offset) as f32 * d;
                }
            }
        }
    }
}

/// `embed_tokens` on a table in mlx's affine quantization (`gemm_mlx.rs`): `table` holds
/// `bits`-bit values (4 or 8, uniform) packed into little-endian `u32` words, rows of
/// `hidden · bits / 32` words; `scales` and `biases` (`[vocab, hidden / group]`, `W`) give
/// value `j` of a row as `mx.dequantize` does, `W(W(s · q) + b)`, the roundings through tiles
/// of `W`. Each chunk of 256 values of the row: the work-items write `s · q` and `b` into
/// shared arrays, the tiles do the rest.
#[kernel(name = "embedding.gather_mlx", version = 1, workgroup = 256, elem = [bf16, f16, f32])]
fn embed_tokens_mlx<W>(
    ids: &[u32; num_groups()],
    table: &[u32],
    scales: &[W],
    biases: &[W],
    x: &mut [f32; num_groups() * hidden],
    hidden: u32,
    bits: u32,
    group: u32,
) {
    let rounded = tile::<W, 1, 256>();
    let v = tile::<f32, 1, 256>();
    let bias = tile::<f32, 1, 256>();
    let sq = shared::<f32>(256);
    let bq = shared::<f32>(256);
    let id = ids[group_id()];
    for c in 0..(hidden + 255) / 256 {
        let e = c * 256 + local_id();
        if e < hidden {
            // 32 values take `bits` words; bit `o` of those holds value `e`.
            let o = e % 32 * bits;
            let at = id * (hidden / 32 * bits) + e / 32 * bits + o / 32;
            let q = (table[at] >> (o % 32)) & ((1 << bits) - 1);
            let g = id * (hidden / group) + e / group;
            sq[local_id()] = to_f32(scales[g]) * q as f32;
            bq[local_id()] = to_f32(biases[g]);
        }
        let cols = min(hidden - c * 256, 256);
        tile_load(rounded, sq, 0, 256, 1, cols);
        tile_copy(v, rounded);
        tile_load(bias, bq, 0, 256, 1, cols);
        tile_add(v, bias);
        tile_copy(rounded, v);
        tile_store(rounded, x, group_id() * hidden + c * 256, hidden, 1, cols);
    }
}
