//! The GEMM on weights that stay quantized in memory: `y = x · wᵀ` (+ `y` when `accumulate`
//! is 1) for a weight `[n, k]` stored in one of ggml's block formats, read as the file holds
//! it (`w`: the tensor's bytes as little-endian `u32` words, rows of `k / QK` blocks one after
//! the other, the first byte 4-aligned). The activations are f32 (already replaced by what
//! their llama.cpp Q8 form stands for, `act_quant`).
//!
//! Each K step, every work-item dequantizes 32 values of one weight row into the shared array
//! `wq` with the operations of ggml's reference `dequantize_row_*` (so exactly the values the
//! f32 dequantization at load gave), then the block goes through the tile `dot` as in
//! `gemm.xwt_exact_f32`: the products and their order are the same, so on the host the result
//! is the same bits as that kernel's on the dequantized weight, while memory holds the
//! quantized bytes only.
//!
//! Bytes are read from the words: byte `o` is `(w[o / 4] >> (o % 4 · 8)) & 255`; 32 bits at an
//! even offset `o` are `w[o / 4]`, or the two halves of `w[o / 4]` and `w[o / 4 + 1]` when
//! `o % 4 == 2` (Q4_0, Q5_0, Q8_0 and Q6_K blocks need not start at a word): the crate's
//! LOOM functions `word_at`, `f16_at` and `i8_at` (`ggml_words.rs`).
//!
//! One body, one kernel per format: the formats are constant instances (`consts`, LOOM.md)
//! labelled by format, `gemm.xwt_q8_0` to `gemm.xwt_q6_k`, and each instance keeps only its
//! own format's dequantization (the `if BYTES == ..` chain folds to one branch). A kernel
//! with a uniform `format` argument instead, measured, ran the 0.8B-shaped Q8_0 and Q4_K_M
//! files at 0.8 of one kernel per format (its per-work-item code lost the straight lanes of
//! a kernel that has one format). Until v2 the eight were written out one by one.
//!
//! Grid (every format): x = ceil(m / 256) row blocks of `y`, y = ceil(n / 32) column blocks; a
//! workgroup owns 256 x 32 of `y` (four 64 x 32 accumulators sharing each dequantized block,
//! so a prefill of 512 rows dequantizes each weight value twice) and work-item `c`
//! dequantizes weight row `col0 + c` into
//! column `c` of `wq` (indexed with `local_id()` itself, which the host lowering sees as
//! consecutive across work-items: one vector store per 16 values, not a scatter).

use loom::kernel;

/// `y = x · wᵀ` (+ `y`) for a weight in one of the block formats (see the module doc): one
/// instance per format, named by it, with the format's elements per block `QK` and bytes
/// per block `BYTES`. v3: the four row blocks through the crate's procedures `load_rows4`,
/// `dot_rows4` and `store_rows4` (`row_blocks.rs`).
#[kernel(
    name = "gemm.xwt",
    version = 3,
    workgroup = 32,
    consts = [
        q8_0 = (32, 34),
        q4_0 = (32, 18),
        q4_1 = (32, 20),
        q5_0 = (32, 22),
        q5_1 = (32, 24),
        q4_k = (256, 144),
        q5_k = (256, 176),
        q6_k = (256, 210)
    ]
)]
fn gemm_xwt<const QK: u32, const BYTES: u32>(
    x: &[f32; m * k],
    w: &[u32; (n * (k / QK) * BYTES + 3) / 4],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    accumulate: u32,
) {
    const BM: u32 = 64;
    const BN: u32 = 32;
    const BK: u32 = 32;
    let a = tile::<f32, BM, BK>();
    let b = tile::<f32, BK, BN>();
    let acc0 = tile::<f32, BM, BN>();
    let acc1 = tile::<f32, BM, BN>();
    let acc2 = tile::<f32, BM, BN>();
    let acc3 = tile::<f32, BM, BN>();
    let wq = shared::<f32>(BK * BN);
    let row0 = group_id() * (4 * BM);
    let col0 = group_id_y() * BN;
    // Rows past the weight's last dequantize the last row again: their columns of `y` are
    // not stored, and every work-item takes the same path.
    let wrow = min(col0 + local_id(), n - 1);
    if accumulate == 1 {
        load_rows4(acc0, acc1, acc2, acc3, y, row0, BM, col0, m, n);
    }
    for k0 in (0..k).step_by(BK) {
        // The byte where the block holding `k0` starts in weight row `wrow`.
        let at = wrow * (k / QK * BYTES) + k0 / QK * BYTES;
        // The format's dequantization into `wq` (the others' branches fold away).
        if BYTES == 34 {
            // Q8_0 (34-byte blocks of 32: f16 `d`, 32 signed bytes `q`; `x = q · d`).
            let d = f16_at(w, at);
            for j in 0..8u32 {
                let o = at + 2 + 4 * j;
                let word = word_at(w, o);
                for i in 0..4u32 {
                    let q = ((word << (24 - 8 * i)) as i32) >> 24;
                    wq[(4 * j + i) * BN + local_id()] = q as f32 * d;
                }
            }
        } else if BYTES == 18 {
            // Q4_0 (18-byte blocks of 32: f16 `d`, 16 bytes `qs`; element `l < 16` is the low
            // nibble of `qs[l]`, element `l + 16` its high one; `x = (q - 8) · d`). Blocks start at
            // a word or a half-word.
            let d = f16_at(w, at);
            for t in 0..4u32 {
                let o = at + 2 + 4 * t;
                let word = word_at(w, o);
                for i in 0..4u32 {
                    let lo = ((word >> (8 * i)) & 15) as i32 - 8;
                    let hi = ((word >> (8 * i + 4)) & 15) as i32 - 8;
                    wq[(4 * t + i) * BN + local_id()] = lo as f32 * d;
                    wq[(4 * t + i + 16) * BN + local_id()] = hi as f32 * d;
                }
            }
        } else if BYTES == 20 {
            // Q4_1 (20-byte blocks of 32: f16 `d` and `m`, 16 bytes `qs` as Q4_0's;
            // `x = q · d + m`). Blocks start at a word.
            let aw = at / 4;
            let dm = w[aw];
            let d = f16_to_f32(f16_from_bits(dm));
            let mn = f16_to_f32(f16_from_bits(dm >> 16));
            for t in 0..4u32 {
                let word = w[aw + 1 + t];
                for i in 0..4u32 {
                    let lo = (word >> (8 * i)) & 15;
                    let hi = (word >> (8 * i + 4)) & 15;
                    wq[(4 * t + i) * BN + local_id()] = lo as f32 * d + mn;
                    wq[(4 * t + i + 16) * BN + local_id()] = hi as f32 * d + mn;
                }
            }
        } else if BYTES == 22 {
            // Q5_0 (22-byte blocks of 32: f16 `d`, 32 bits `qh` whose bit `l` is the fifth bit of
            // element `l`, 16 bytes `qs` as Q4_0's; `x = (q - 16) · d`). Blocks start at a word or
            // a half-word.
            let d = f16_at(w, at);
            let oh = at + 2;
            let qh = word_at(w, oh);
            for t in 0..4u32 {
                let o = at + 6 + 4 * t;
                let word = word_at(w, o);
                for i in 0..4u32 {
                    let l = 4 * t + i;
                    let lo = ((word >> (8 * i)) & 15) | (((qh >> l) & 1) << 4);
                    let hi = ((word >> (8 * i + 4)) & 15) | (((qh >> (l + 16)) & 1) << 4);
                    wq[l * BN + local_id()] = (lo as i32 - 16) as f32 * d;
                    wq[(l + 16) * BN + local_id()] = (hi as i32 - 16) as f32 * d;
                }
            }
        } else if BYTES == 24 {
            // Q5_1 (24-byte blocks of 32: f16 `d` and `m`, 32 bits `qh` and 16 bytes `qs` as
            // Q5_0's; `x = q · d + m`). Blocks start at a word.
            let aw = at / 4;
            let dm = w[aw];
            let d = f16_to_f32(f16_from_bits(dm));
            let mn = f16_to_f32(f16_from_bits(dm >> 16));
            let qh = w[aw + 1];
            for t in 0..4u32 {
                let word = w[aw + 2 + t];
                for i in 0..4u32 {
                    let l = 4 * t + i;
                    let lo = ((word >> (8 * i)) & 15) | (((qh >> l) & 1) << 4);
                    let hi = ((word >> (8 * i + 4)) & 15) | (((qh >> (l + 16)) & 1) << 4);
                    wq[l * BN + local_id()] = lo as f32 * d + mn;
                    wq[(l + 16) * BN + local_id()] = hi as f32 * d + mn;
                }
            }
        } else if BYTES == 144 || BYTES == 176 {
            // Q4_K (144-byte blocks of 256: f16 `d` and `dmin`, 12 bytes of 6-bit scales and
            // minimums, 128 bytes of 4-bit quants; sub-block `j` of 32 is
            // `(d · sc_j) · q - dmin · m_j`, its quants the low (even `j`) or high (odd `j`)
            // nibbles of bytes `32 (j / 2) ..`). Q5_K (176-byte blocks) has 32 bytes `qh`
            // before the quants whose bit `j` of byte `l` is the fifth bit of element `l` of
            // sub-block `j`. Blocks start at a word: 144 and 176 are multiples of 4.
            let aw = at / 4;
            let j = k0 % 256 / 32;
            let dm = w[aw];
            let d = f16_to_f32(f16_from_bits(dm));
            let dmin = f16_to_f32(f16_from_bits(dm >> 16));
            // Scale byte t of the block's 12 is byte t % 4 of word aw + 1 + t / 4.
            let s_j = (w[aw + 1 + j / 4] >> (j % 4 * 8)) & 255;
            let s_j4 = (w[aw + 2 + j / 4] >> (j % 4 * 8)) & 255;
            let sc = if j < 4 {
                s_j & 63
            } else {
                (s_j4 & 15) | ((((w[aw + j / 4] >> (j % 4 * 8)) & 255) >> 6) << 4)
            };
            let mn = if j < 4 {
                s_j4 & 63
            } else {
                (s_j4 >> 4) | ((s_j >> 6) << 4)
            };
            let d1 = d * sc as f32;
            let m1 = dmin * mn as f32;
            let shift = j % 2 * 4;
            if BYTES == 144 {
                let qs = aw + 4 + j / 2 * 8;
                for t in 0..8u32 {
                    let word = w[qs + t];
                    for i in 0..4u32 {
                        let q = (word >> (8 * i + shift)) & 15;
                        wq[(4 * t + i) * BN + local_id()] = d1 * q as f32 - m1;
                    }
                }
            } else {
                let qs = aw + 12 + j / 2 * 8;
                for t in 0..8u32 {
                    let word = w[qs + t];
                    let high = w[aw + 4 + t];
                    for i in 0..4u32 {
                        let q = ((word >> (8 * i + shift)) & 15) + ((high >> (8 * i + j)) & 1) * 16;
                        wq[(4 * t + i) * BN + local_id()] = d1 * q as f32 - m1;
                    }
                }
            }
        } else if BYTES == 210 {
            // Q6_K (210-byte blocks of 256: 128 bytes `ql`, 64 bytes `qh`, 16 signed scales, f16
            // `d`). In each half of 128, element `l + 32 kq` (`l < 32`) has its low four bits in
            // `ql[64 h + l + 32 (kq % 2)]` (the high nibble for `kq >= 2`), its top two in
            // `qh[32 h + l]` bits `2 kq ..`, and scale `8 h + 2 kq + l / 16`;
            // `x = (d · scale) · (q - 32)`.
            let half = k0 % 256 / 128;
            let kq = k0 % 128 / 32;
            let od = at + 208;
            let d = f16_at(w, od);
            let os = at + 192 + 8 * half + 2 * kq;
            let s0 = i8_at(w, os);
            let s1 = i8_at(w, os + 1);
            let ds0 = d * s0 as f32;
            let ds1 = d * s1 as f32;
            let low_shift = kq / 2 * 4;
            let ql = at + 64 * half + 32 * (kq % 2);
            let qh = at + 128 + 32 * half;
            for t in 0..8u32 {
                let ol = ql + 4 * t;
                let oh = qh + 4 * t;
                let wl = word_at(w, ol);
                let wh = word_at(w, oh);
                let ds = if t < 4 { ds0 } else { ds1 };
                for i in 0..4u32 {
                    let lo = (wl >> (8 * i + low_shift)) & 15;
                    let hi = (wh >> (8 * i + 2 * kq)) & 3;
                    let q = (lo | (hi << 4)) as i32 - 32;
                    wq[(4 * t + i) * BN + local_id()] = ds * q as f32;
                }
            }
        }
        tile_load(b, wq, 0, BN, BK, BN);
        dot_rows4(acc0, acc1, acc2, acc3, a, b, x, row0, BM, k0, m, k);
    }
    store_rows4(acc0, acc1, acc2, acc3, y, row0, BM, col0, m, n);
}
