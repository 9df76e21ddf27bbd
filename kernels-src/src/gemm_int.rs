//! The quantized GEMMs in integers, as llama.cpp's CPU backend multiplies a Q4_K, Q5_K, Q6_K,
//! Q4_0, Q5_0 or Q8_0 weight: the activation rows quantized to Q8_K (`act_quant.q8_k_int`:
//! 8-bit values `q`, one f32 scale `d` per block of 256, and the integer sums of each 32 and
//! each 16 values' `q`; Q8_0 for a Q4_0, Q5_0 or Q8_0 weight, `gemm.xwt_q4_0_q8_0`,
//! `gemm.xwt_q5_0_q8_0` and `gemm.xwt_q8_0_q8_0` at the end), then per weight
//! block an exact integer dot product of `q` with the weight's quants times their 6- or 8-bit
//! sub-block scales, and per block
//! `y += f32(Σ q·(sc·w)) · (d_x · d_w) + f32(Σ_j s_j · m_j) · (d_x · -dmin_w)` (each scale
//! product formed first, as llama.cpp does; the minimum term, with `s_j` the sum of
//! sub-block `j`'s `q` and `m_j` its 6-bit minimum, only for Q4_K and Q5_K). The integer
//! parts are the ones llama.cpp's `ggml_vec_dot_*` forms, so the two differ only in the
//! rounding of a few f32 operations per block, where the f32 GEMM on dequantized weights
//! (`gemm_quant`) rounds every product.
//!
//! Q4_K and Q5_K, each sub-block of 32: work-item `c` writes the 32 quants of weight row
//! `col0 + c` (0..15 or 0..31) as bytes, four to a word, into the shared array `wq` (a Q4_K
//! word's nibbles masked out: one word per four values); `tile_load_quads` reads them as the
//! u8 tile `b`, the step's activations load into the i8 tile `a`, and
//! `tile_dot_scaled(isum, a, b, sc)` adds the dot times the column's 6-bit sub-block scale
//! into the i32 tile `isum` (`vpdpbusd` on the host levels with AVX512-VNNI: four products
//! per lane; on the host `b` is read where the work-items wrote it). Q6_K, each half block of
//! 128: work-item `c` writes its 6-bit quants `q` (0..63) four to a word the same way, and
//! one byte dot adds them times each sub-block's signed scale (a scale per group of 16 of
//! K); the quants' offset of 32 comes off as each row's sum over a sub-block starts from
//! `-32 ·` the sum of its activations over it (`tile_dot_scaled`'s row offsets). At the end
//! of each block of 256 one `tile_dequant` takes `isum` into the f32 `acc` (zeroing `isum` as
//! it reads it, on the host), and the minimum term is one `tile_dot_dequant` of the
//! activations' sums per 32 (`[64, 8]`, i16) by the minimums
//! (`[8, 64]`) into `acc_min`: where v4 ran ten statements over the block's 48 x 64 f32
//! tiles (the minimum term an f32 dot), each a pass through memory. As in llama.cpp (its
//! `ggml_vec_dot_q4_K_q8_K` and its repacked Q4_K GEMM), the two terms gather in their own
//! sums over all blocks and meet once at the end, where v4 added them per block.
//!
//! The weight comes interleaved by 64 rows (`lse_runtime::ops::gemm_int::interleave`): rows
//! in groups of 64 (the last group padded with zero rows), each block's bytes padded with
//! zeros to `W` words (36 for Q4_K, 44 for Q5_K, 53 for Q6_K), and word `t` of row `g · 64 + c`'s
//! block `sb` at `((g · k / 256 + sb) · W + t) · 64 + c`. Work-item `c` thus reads the words of
//! row `col0 + c` where the other work-items read theirs beside them: one vector load for 16
//! work-items on the host, where rows stored one after another took a gather, and every
//! block starts at a word (a Q6_K block of 210 bytes started at a half-word in every other
//! block).
//!
//! The activations come in `act_quant.q8_k_int`'s layout: four 8-bit values to a word, a
//! block of 256 values of the workgroup's 64 rows one after another (a run of 16 KiB), so
//! each `a` tile is a window of it at a row stride of 64 words, which `tile_load_packed`
//! reads in place on the host (v5 held a word per value, and each step narrowed its 6 KiB
//! to bytes in a copy). The Q4_K and Q5_K GEMMs (v10) read 32 values of each row per
//! sub-block, the Q6_K GEMM (v11) 128, a half block; v9 and v10 read runs of 1.5 KiB, one per
//! K step of 32. The Q8_0-family GEMMs (Q8_0 v8, Q4_0 v3, Q5_0 v3) read `act_quant.q8_0_int`
//! v4's runs of four blocks, 128 values of each row per step (a row's last run partial when
//! K is not a multiple of 128: its blocks past the row meet zero weight words and scales), and
//! multiply them by one `tile_dot_dequant` in four groups of K, whose f32 sums the host keeps
//! in registers over the four blocks: v7 (one block of 32 a step) loaded and stored them at
//! every block, a fifth of the GEMM's samples (`--kernel-times`, ctx 512 x 4, alternated
//! runs, the same perplexity bits: the 0.8B-shaped Q8_0 file's Q8_0 GEMM 2,901 and 2,758 ms
//! against 2,439 and 2,392; its Q4_0 file's Q4_0 GEMM 1,902 and 2,001 against 1,777 and
//! 1,719). The `a` windows take all 64
//! rows of a block, also the last block's rows past `m` (the buffer holds whole blocks, zeros
//! past `m` as the op allocates it; whatever they held, their sums stay in their own rows of
//! `isum`, which meet a `d_x` loaded as 0 and which the store leaves out): v6 (Q8_0 v3) cut
//! the last block's window at `m`, which the host copied through gathers, one vector gather
//! per row and step, an eighth of the Q6_K GEMM's time on the LM head at M = 128 (then three
//! row blocks of 48, the last of 32 rows).
//!
//! Each kernel comes in two instances of its constant `BM` (`consts`, LOOM.md; the formats
//! that share a body are instances too, labelled by format and `BM`): `_bm64` computes 64
//! rows of `y` per workgroup, `_bm16` 16. The weight's words and their unpacking are the
//! same for any number of rows, so the 64-row instance shares them among four times the
//! rows; the 16-row one serves products of few rows, above all a mixture of experts' routed
//! products (16 rows per expert on average in Qwen3.5-35B-A3B at a pass of 512 tokens),
//! where 64-row blocks computed four times the rows. Both read the activations in
//! `act_quant`'s blocks of 64 rows (`XB`): the 16-row instance a window of 16 rows inside
//! one, which is whole where the block is. The products and their order per element are the
//! same in both, so are the results. Until Q4_K v12, Q5_K v12, Q6_K v13, Q8_0 v9, Q4_0 v4 and
//! Q5_0 v4 the larger instance took 48 rows (`_bm48`): M = 512 took 11 row blocks (528 rows)
//! and the LM head's 128 or 127 rows three (144), each unpacking the weight once, where 64
//! rows take 8 and 2 (`--kernel-times`, ctx 512 x 4, alternated runs, the same perplexity
//! bits: the MoE model's Q6_K head at M = 127 about 12% faster, its Q4_K products at M = 512
//! 4%; the 0.8B-shaped model's Q4_0 and Q8_0 GEMMs 4 to 10%).
//!
//! Block `b` of rows multiplies the matrix at word `experts[b] · w_stride` of `w`: an expert's
//! of a stacked or fused `[E, n', k]` tensor interleaved matrix by matrix (`w_stride` its
//! words per matrix, `w` starting at the first expert's gate or up half), or, with a table of
//! zeros and `w_stride` 0, the one weight of a dense product. The caller checks that every
//! expert's matrix lies inside `w` and that the table has an entry per block of rows (their
//! lengths depend on the table and the grid, so they are not declared). The expert's index is
//! read in each weight access (`w[experts[rb] · w_stride + ...]`), not kept in a variable:
//! work-item loops of the host code then see consecutive work-items read consecutive words
//! (a variable read in several regions lives per work-item, and a read through it was a
//! gather).
//!
//! Grid: the 64-row instances x = ceil(m / 64) row blocks of `y`, y = ceil(n / 64) column
//! blocks (the groups of 64 weight rows); a workgroup owns 64 x 64 of `y` (its tiles and
//! shared arrays within a GPU's 64 KiB of shared memory: Q6_K's takes 62 KiB, its scales
//! unpacked per half block). Row blocks run fastest, so
//! consecutive workgroups read the same column block of the weight, which comes from memory
//! once and then from cache, while the activations (64 KiB a row block at K = 1024) come from
//! L2 or L3. v8 (Q8_0 v5) turned the grid so: v7 ran column blocks fastest and streamed the
//! whole weight from memory once per row block, three times for the LM head at M = 128 (208 MB
//! of Q6_K each time), which ran 30% slower than now; at M = 512 and 8192 the two orders are
//! within a few percent of each other. The 16-row instances turn it back (x = ceil(n / 64)
//! column blocks, y = ceil(m / 16) row blocks): an expert's rows stay in cache while its whole
//! matrix streams past them, where with row blocks fastest each workgroup read a short run of
//! a different expert's weight (the experts' down products, K = 512, ran at half the rate).
//! The padding rows of a partial group give columns of `y` that are not stored.
//!
//! Each K step prefetches a piece of the weight words the workgroup reads next (`prefetch`):
//! the K-quant GEMMs the next block's words, an eighth of them per step of 32 (Q4_K v11,
//! Q5_K v11) or a sixteenth per sub-block of 16 (Q6_K v12), the Q8_0-family GEMMs (Q8_0 v7
//! on, Q4_0 v2 on, Q5_0 v2 on) the block four blocks ahead; after the last block, the next column
//! block's first, which the next workgroup of a 16-row instance reads. The hardware
//! prefetchers did not keep up: a mixture of experts' products (the 16-row instances, each
//! expert's weight read from memory once) ran about twice as long as with every expert's
//! weight in the cache (measured by pointing every expert at the first one's). One prefetch
//! of the whole next block at the start of each block (Q4_K: a burst of 144 lines) made the
//! Q4_K experts' products about 10% faster; the pieces, about 40%.

use loom::kernel;

/// Q4_K and Q5_K, interleaved by 64 rows in `WORDS` words per block:
/// - Q4_K (144-byte blocks of 256: f16 `d`, f16 `dmin`, 12 bytes of 6-bit scales `sc_j` and
///   minimums `m_j` for the 8 sub-blocks of 32, 128 bytes of 4-bit quants `q`; the value is
///   `d · sc_j · q - dmin · m_j`): 36 words.
/// - Q5_K (176-byte blocks of 256: Q4_K's `d`, `dmin` and scales, then 32 bytes `qh` of fifth
///   bits, then the 128 bytes of low nibbles; bit `j` of `qh[l]` is value `l` of sub-block
///   `j`'s fifth bit): 44 words.
///
/// Until v13 the two were written out one by one (v12 each).
#[kernel(
    name = "gemm.xwt",
    version = 13,
    workgroup = 64,
    consts = [
        q4_k_q8_k_bm64 = (36, 64),
        q4_k_q8_k_bm16 = (36, 16),
        q5_k_q8_k_bm64 = (44, 64),
        q5_k_q8_k_bm16 = (44, 16)
    ]
)]
fn gemm_xwt<const WORDS: u32, const BM: u32>(
    xq: &[i32; (m + 63) / 64 * 64 * k / 4],
    xd: &[f32; m * (k / 256)],
    xs: &[i32; m * (k / 32)],
    w: &[u32],
    experts: &[u32],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    w_stride: u32,
    accumulate: u32,
) {
    const XB: u32 = 64;
    const BN: u32 = 64;
    const BK: u32 = 32;
    let a = tile::<i8, BM, BK>();
    let b = tile::<u8, BK, BN>();
    let sc = tile::<i32, 1, BN>();
    let isum = tile::<i32, BM, BN>();
    let acc = tile::<f32, BM, BN>();
    let acc_min = tile::<f32, BM, BN>();
    let xsum = tile::<i16, BM, 8>();
    let mins = tile::<i16, 8, BN>();
    let dw = tile::<f32, 1, BN>();
    let dmin = tile::<f32, 1, BN>();
    let dx = tile::<f32, BM, 1>();
    let no_offset = tile::<f32, BM, 1>();
    // The sub-block's quants, four to a word (`b`'s quads).
    let wq = shared::<i32>(BK / 4 * BN);
    // Row 0: `d`; row 1: `-dmin`.
    let wf = shared::<f32>(2 * BN);
    // Rows 0..8: the sub-blocks' 6-bit scales `sc_j`; rows 8..16: their minimums `m_j`.
    let ws = shared::<i32>(16 * BN);
    // The block of rows and the block of columns (see the module doc for the grid).
    let rb = if BM < XB { group_id_y() } else { group_id() };
    let cb = if BM < XB { group_id() } else { group_id_y() };
    let row0 = rb * BM;
    let col0 = cb * BN;
    let blocks = k / 256;
    tile_zero(acc);
    tile_zero(acc_min);
    tile_zero(no_offset);
    for sb in 0..blocks {
        // Word t of this work-item's block: w[experts[rb] * w_stride + (at + t) * 64 +
        // local_id()]. (Written so, and with `at` formed from uniform values in each region
        // that reads it, the host sees consecutive work-items read consecutive words: a vector
        // load, not a gather. A variable used in several regions lives per work-item, and a
        // read through it was a gather; `rb` and `cb`, a group id each, are written out where
        // they are read.)
        let at = (cb * (k / 256) + sb) * WORDS;
        let dm = w[experts[rb] * w_stride + at * BN + local_id()];
        wf[local_id()] = f16_to_f32(f16_from_bits(dm));
        wf[BN + local_id()] = -f16_to_f32(f16_from_bits(dm >> 16));
        // The 12 scale bytes, read once: byte t is byte t % 4 of word 1 + t / 4.
        let s0 = w[experts[rb] * w_stride + (at + 1) * BN + local_id()];
        let s4 = w[experts[rb] * w_stride + (at + 2) * BN + local_id()];
        let s8 = w[experts[rb] * w_stride + (at + 3) * BN + local_id()];
        for j in 0..4u32 {
            let lo = (s0 >> (8 * j)) & 255;
            let mid = (s4 >> (8 * j)) & 255;
            let hi = (s8 >> (8 * j)) & 255;
            ws[j * BN + local_id()] = (lo & 63) as i32;
            ws[(j + 4) * BN + local_id()] = ((hi & 15) | ((lo >> 6) << 4)) as i32;
            ws[(j + 8) * BN + local_id()] = (mid & 63) as i32;
            ws[(j + 12) * BN + local_id()] = ((hi >> 4) | ((mid >> 6) << 4)) as i32;
        }
        for j in 0..8u32 {
            // An eighth of the next block's words (after the last block, of the next column
            // block's first, which the next workgroup reads) per step, coming from memory
            // while the step's dot runs.
            prefetch(
                w,
                experts[rb] * w_stride
                    + ((cb * (k / 256) + sb) * WORDS + WORDS) * BN
                    + j * (WORDS * BN / 8),
                WORDS * BN / 8,
            );
            let shift = j % 2 * 4;
            // `at` again, formed in this region (read through `at`, a gather: see above). The
            // quants follow the scales (and Q5_K's 32 bytes of fifth bits).
            let blk = (cb * (k / 256) + sb) * WORDS;
            let qs = blk + (WORDS - 32) + j / 2 * 8;
            // Word t holds values 4t..4t + 3 of the sub-block, one per byte: `b`'s four rows.
            for t in 0..8u32 {
                let word = w[experts[rb] * w_stride + (qs + t) * BN + local_id()];
                if WORDS == 36 {
                    wq[t * BN + local_id()] = ((word >> shift) & 0x0F0F_0F0F) as i32;
                } else {
                    let high = w[experts[rb] * w_stride + (blk + 4 + t) * BN + local_id()];
                    let q = ((word >> shift) & 0x0F0F_0F0F) | (((high >> j) & 0x0101_0101) << 4);
                    wq[t * BN + local_id()] = q as i32;
                }
            }
            tile_load_quads(b, wq, 0, BN, BK, BN);
            tile_load_packed(
                a,
                xq,
                ((row0 / XB * blocks + sb) * XB + row0 % XB) * 64 + j * (BK / 4),
                64,
                BM,
                BK,
            );
            tile_load(sc, ws, j * BN, BN, 1, BN);
            tile_dot_scaled(isum, a, b, sc);
        }
        // The block's integer sum times `d_x · d_w` (formed first, as llama.cpp scales it)
        // into `acc`; the minimum term, the integer `Σ_j s_j · m_j` times `d_x · -dmin`, into
        // `acc_min`.
        tile_load(dw, wf, 0, BN, 1, BN);
        tile_load(dmin, wf, BN, BN, 1, BN);
        tile_load(dx, xd, row0 * blocks + sb, blocks, m - row0, 1);
        tile_dequant(acc, isum, dx, dw);
        tile_zero(isum);
        tile_load(xsum, xs, row0 * (k / 32) + sb * 8, k / 32, m - row0, 8);
        tile_load(mins, ws, 8 * BN, BN, 8, BN);
        tile_dot_dequant(acc_min, xsum, mins, no_offset, dx, dmin);
    }
    // The two sums meet at the end, as in llama.cpp; then `y`'s own value, if kept.
    tile_add(acc, acc_min);
    if accumulate == 1 {
        tile_load(acc_min, y, row0 * n + col0, n, m - row0, n - col0);
        tile_add(acc, acc_min);
    }
    tile_store(acc, y, row0 * n + col0, n, m - row0, n - col0);
}

/// Q6_K (210-byte blocks of 256: 128 bytes `ql` of low nibbles, 64 bytes `qh` of high bit
/// pairs, 16 signed 8-bit scales `sc_j` for the sub-blocks of 16, f16 `d`; the value is
/// `d · sc_j · (q - 32)`, and there is no minimum term), interleaved by 64 rows. The quants
/// `q` (0..63) go into the byte dot as they are, u8, each sub-block of 16 scaled by its own
/// `sc_j` and its sum started from the rows' offsets `-32 · Σ x` over the sub-block
/// (`xo16`, from `act_quant.q8_k_int`), so the block's integer sum is `Σ_j sc_j Σ (q - 32)·x`
/// exactly, as before. v11: one dot per half block, grouped by sub-block (scales `[8, 64]`,
/// offsets `[rows, 8]`), whose register blocks keep their sums over all 8 sub-blocks, where
/// v10 took one dot per sub-block and each loaded and stored the block's sums (`isum`);
/// whole blocks (`[256, 64]` weight tiles) would take 77 KiB of a GPU's 64 KiB of shared
/// memory. v9: the offsets as the dots' start (a broadcast per row of a register block),
/// where v8 took them off with an i16 dot per block of the sums per 16 (`[48, 16]`) by
/// `-32 · sc_j` (`[16, 64]`), 8% of its time on the LM head. v13: 64 rows (the module
/// doc), the scales unpacked per half block (8 of them) so that the tiles and shared arrays
/// take 62 KiB, within a GPU's 64.
#[kernel(name = "gemm.xwt_q6_k_q8_k", version = 13, workgroup = 64, consts = [64, 16])]
fn gemm_xwt_q6_k_q8_k<const BM: u32>(
    xq: &[i32; (m + 63) / 64 * 64 * k / 4],
    xd: &[f32; m * (k / 256)],
    xo16: &[i32; (m + 63) / 64 * 64 * (k / 16)],
    w: &[u32],
    experts: &[u32],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    w_stride: u32,
    accumulate: u32,
) {
    const XB: u32 = 64;
    const BN: u32 = 64;
    // Values per half block (`ql`'s and `qh`'s halves), and per sub-block (per scale).
    const HK: u32 = 128;
    const BS: u32 = 16;
    let a = tile::<i8, BM, HK>();
    let b = tile::<u8, HK, BN>();
    let sc = tile::<i32, 8, BN>();
    let offset = tile::<i32, BM, 8>();
    let isum = tile::<i32, BM, BN>();
    let acc = tile::<f32, BM, BN>();
    let dw = tile::<f32, 1, BN>();
    let dx = tile::<f32, BM, 1>();
    // The half block's 128 quants, four to a word (`b`'s quads), and its 8 scales.
    let wq = shared::<i32>(HK / 4 * BN);
    let ws = shared::<i32>(8 * BN);
    let wf = shared::<f32>(BN);
    // The block of rows and the block of columns (see the module doc for the grid).
    let rb = if BM < XB { group_id_y() } else { group_id() };
    let cb = if BM < XB { group_id() } else { group_id_y() };
    let row0 = rb * BM;
    let col0 = cb * BN;
    let blocks = k / 256;
    if accumulate == 1 {
        tile_load(acc, y, row0 * n + col0, n, m - row0, n - col0);
    }
    for sb in 0..blocks {
        // Word t of this work-item's block (its 210 bytes, then two zero bytes):
        // w[experts[rb] * w_stride + (at + t) * 64 + local_id()].
        let at = (cb * (k / 256) + sb) * 53;
        wf[local_id()] = f16_to_f32(f16_from_bits(
            w[experts[rb] * w_stride + (at + 52) * BN + local_id()],
        ));
        for half in 0..2u32 {
            // The half's 8 scales: signed bytes 192 + 8 half.., in words 48 + 2 half.. (`at`
            // written out, as below).
            for t in 0..2u32 {
                let sw = w[experts[rb] * w_stride
                    + ((cb * (k / 256) + sb) * 53 + 48 + 2 * half + t) * BN
                    + local_id()];
                for j in 0..4u32 {
                    ws[(4 * t + j) * BN + local_id()] = ((sw << (24 - 8 * j)) as i32) >> 24;
                }
            }
            for sub in 0..8u32 {
                // A sixteenth of the next block's words per sub-block (see Q4_K).
                prefetch(
                    w,
                    experts[rb] * w_stride
                        + ((cb * (k / 256) + sb) * 53 + 53) * BN
                        + (half * 8 + sub) * (53 * BN / 16),
                    53 * BN / 16,
                );
                // `at` again, formed in this region (see Q4_K: read through `at`, a gather).
                let blk = (cb * (k / 256) + sb) * 53;
                // The sub-block's K step of 32 (the `kq`-th 32 of the half) and which 16 of
                // the step.
                let kq = sub / 2;
                let j = sub % 2;
                // Word t holds values 4t..4t + 3 of the sub-block, one per byte: four low
                // nibbles and their high bit pairs.
                let low_shift = kq / 2 * 4;
                let ql = blk + 16 * half + 8 * (kq % 2) + 4 * j;
                let qh = blk + 32 + 8 * half + 4 * j;
                for t in 0..4u32 {
                    let wl = w[experts[rb] * w_stride + (ql + t) * BN + local_id()];
                    let wh = w[experts[rb] * w_stride + (qh + t) * BN + local_id()];
                    let q =
                        ((wl >> low_shift) & 0x0F0F_0F0F) | (((wh >> (2 * kq)) & 0x0303_0303) << 4);
                    wq[(sub * (BS / 4) + t) * BN + local_id()] = q as i32;
                }
            }
            tile_load_quads(b, wq, 0, BN, HK, BN);
            tile_load_packed(
                a,
                xq,
                ((row0 / XB * blocks + sb) * XB + row0 % XB) * 64 + half * (HK / 4),
                64,
                BM,
                HK,
            );
            tile_load(sc, ws, 0, BN, 8, BN);
            tile_load(
                offset,
                xo16,
                row0 * (k / 16) + sb * 16 + half * 8,
                k / 16,
                BM,
                8,
            );
            tile_dot_scaled(isum, a, b, sc, offset);
        }
        // `d_x · d_w` formed first, as llama.cpp scales a block's integer sum.
        tile_load(dw, wf, 0, BN, 1, BN);
        tile_load(dx, xd, row0 * blocks + sb, blocks, m - row0, 1);
        tile_dequant(acc, isum, dx, dw);
        tile_zero(isum);
    }
    tile_store(acc, y, row0 * n + col0, n, m - row0, n - col0);
}

/// The Q8_0 family against Q8_0 activations (`act_quant.q8_0_int`), as llama.cpp's
/// `ggml_vec_dot_q8_0_q8_0`, `_q4_0_q8_0` and `_q5_0_q8_0`: per block the exact integer
/// `Σ q_x · q_w` (`q_w` the weight's signed value), then `· d_w · d_x` in f32 (`d_x · d_w`
/// formed first, as llama.cpp scales a block's integer sum). The byte dot takes one unsigned
/// operand, so each format's quants go in as unsigned bytes `q_w + o` and the block's
/// `o · Σ q_x` comes off before the scales (exact: both are integers below 2^24). One
/// `tile_dot_dequant` per four blocks (one group of K each) does all of that on the sums
/// where they are (in registers on the host): per block
/// `y += (Σ q_x (q_w + o) - o · Σ q_x) · (d_x · d_w)`, where Q8_0 v1 took seven tile
/// statements over the 48 x 64 block. Interleaved by 64 rows, `WORDS` words per block, so the
/// quants' words straddle two stored words:
/// - Q8_0 (34-byte blocks of 32: f16 `d`, then 32 signed bytes `q`; the value is `d · q`):
///   9 words; the bytes go in with their sign bit flipped, `o = 128`.
/// - Q4_0 (18-byte blocks of 32: f16 `d`, then 16 bytes whose low nibbles are values 0..15
///   and high nibbles values 16..31, `q` in 0..15; the value is `d · (q - 8)`): 5 words
///   (quants in bytes 2..18); the nibbles go in as they are, `o = 8`.
/// - Q5_0 (22-byte blocks of 32: f16 `d`, 4 bytes `qh` whose bit `j` is value `j`'s fifth
///   bit, then Q4_0's 16 bytes of nibbles, `q` in 0..31; the value is `d · (q - 16)`):
///   6 words (`qh` in bytes 2..6, the nibbles in bytes 6..22); Q4_0's bytes with each value's
///   fifth bit put in as bit 4, `o = 16`.
///
/// Until v10 the three were written out one by one (Q8_0 v9, Q4_0 v4, Q5_0 v4).
#[kernel(
    name = "gemm.xwt",
    version = 10,
    workgroup = 64,
    consts = [
        q8_0_q8_0_bm64 = (9, 64),
        q8_0_q8_0_bm16 = (9, 16),
        q4_0_q8_0_bm64 = (5, 64),
        q4_0_q8_0_bm16 = (5, 16),
        q5_0_q8_0_bm64 = (6, 64),
        q5_0_q8_0_bm16 = (6, 16)
    ]
)]
fn gemm_xwt<const WORDS: u32, const BM: u32>(
    xq: &[i32; (m + 63) / 64 * 64 * ((k + 127) / 128 * 32)],
    xd: &[f32; m * (k / 32)],
    xs: &[f32; m * (k / 32)],
    w: &[u32],
    experts: &[u32],
    y: &mut [f32; m * n],
    m: u32,
    n: u32,
    k: u32,
    w_stride: u32,
    accumulate: u32,
) {
    const XB: u32 = 64;
    const BN: u32 = 64;
    // Four blocks of 32 a step, `G` groups of K for the dot.
    const G: u32 = 4;
    const BK: u32 = 32 * G;
    let a = tile::<i8, BM, BK>();
    let b = tile::<u8, BK, BN>();
    let acc = tile::<f32, BM, BN>();
    let offset = tile::<f32, BM, G>();
    let dw = tile::<f32, G, BN>();
    let dx = tile::<f32, BM, G>();
    let wq = shared::<i32>(BK / 4 * BN);
    let wf = shared::<f32>(G * BN);
    // The block of rows and the block of columns (see the module doc for the grid).
    let rb = if BM < XB { group_id_y() } else { group_id() };
    let cb = if BM < XB { group_id() } else { group_id_y() };
    let row0 = rb * BM;
    let col0 = cb * BN;
    let blocks = k / 32;
    if accumulate == 1 {
        tile_load(acc, y, row0 * n + col0, n, m - row0, n - col0);
    }
    for s4 in 0..(blocks + G - 1) / G {
        for h in 0..G {
            // The block 4 blocks ahead, this one's in the next step (one block of 32 ahead came
            // too late from memory).
            prefetch(
                w,
                experts[rb] * w_stride + ((cb * (k / 32) + s4 * G + h) * WORDS + 4 * WORDS) * BN,
                WORDS * BN,
            );
            // Block `s4 · G + h` into rows `h · 32 ..` of `b`; past the row's last block that
            // block again, its words zeroed (they meet the activations' padding) and `d` 0.
            // Word t of this work-item's block: w[experts[rb] * w_stride + (at + t) * 64 +
            // local_id()], with `at` written out in each read (see Q4_K).
            let sb = min(s4 * G + h, blocks - 1);
            let keep = if s4 * G + h < blocks {
                0xFFFF_FFFFu32
            } else {
                0u32
            };
            wf[h * BN + local_id()] = if s4 * G + h < blocks {
                f16_to_f32(f16_from_bits(
                    w[experts[rb] * w_stride + (cb * (k / 32) + sb) * WORDS * BN + local_id()],
                ))
            } else {
                0.0
            };
            if WORDS == 9 {
                // Q8_0: quant bytes 4t..4t + 3, sign bits flipped.
                for t in 0..8u32 {
                    let lo = w
                        [experts[rb] * w_stride + ((cb * (k / 32) + sb) * 9 + t) * BN + local_id()];
                    let hi = w[experts[rb] * w_stride
                        + ((cb * (k / 32) + sb) * 9 + t + 1) * BN
                        + local_id()];
                    wq[(h * 8 + t) * BN + local_id()] =
                        ((((lo >> 16) | (hi << 16)) ^ 0x8080_8080) & keep) as i32;
                }
            } else {
                for t in 0..4u32 {
                    // Quant bytes 4t..4t + 3 (after Q5_0's `qh`): values 4t.. in their low
                    // nibbles, 16 + 4t.. in the high.
                    let lo = w[experts[rb] * w_stride
                        + ((cb * (k / 32) + sb) * WORDS + t + (WORDS - 5)) * BN
                        + local_id()];
                    let hi = w[experts[rb] * w_stride
                        + ((cb * (k / 32) + sb) * WORDS + t + (WORDS - 4)) * BN
                        + local_id()];
                    let q = ((lo >> 16) | (hi << 16)) & keep;
                    if WORDS == 5 {
                        wq[(h * 8 + t) * BN + local_id()] = (q & 0x0F0F_0F0F) as i32;
                        wq[(h * 8 + t + 4) * BN + local_id()] = ((q >> 4) & 0x0F0F_0F0F) as i32;
                    } else {
                        // Q5_0: each value's fifth bit (of `qh`) spread to bit 4 of its byte.
                        let w0 = w[experts[rb] * w_stride
                            + ((cb * (k / 32) + sb) * 6 + 0) * BN
                            + local_id()];
                        let w1 = w[experts[rb] * w_stride
                            + ((cb * (k / 32) + sb) * 6 + 1) * BN
                            + local_id()];
                        let qh = ((w0 >> 16) | (w1 << 16)) & keep;
                        let h0 = qh >> (4 * t);
                        let h1 = qh >> (16 + 4 * t);
                        let spread0 = ((h0 & 1) << 4)
                            | ((h0 & 2) << 11)
                            | ((h0 & 4) << 18)
                            | ((h0 & 8) << 25);
                        let spread1 = ((h1 & 1) << 4)
                            | ((h1 & 2) << 11)
                            | ((h1 & 4) << 18)
                            | ((h1 & 8) << 25);
                        wq[(h * 8 + t) * BN + local_id()] = ((q & 0x0F0F_0F0F) | spread0) as i32;
                        wq[(h * 8 + t + 4) * BN + local_id()] =
                            (((q >> 4) & 0x0F0F_0F0F) | spread1) as i32;
                    }
                }
            }
        }
        tile_load_quads(b, wq, 0, BN, BK, BN);
        tile_load_packed(
            a,
            xq,
            ((row0 / XB * ((k + 127) / 128) + s4) * XB + row0 % XB) * (BK / 4),
            BK / 4,
            BM,
            BK,
        );
        tile_load(
            offset,
            xs,
            row0 * blocks + s4 * G,
            blocks,
            m - row0,
            blocks - s4 * G,
        );
        // The quants' offset `o` (see above).
        if WORDS == 9 {
            tile_scale(offset, -128.0);
        } else if WORDS == 5 {
            tile_scale(offset, -8.0);
        } else {
            tile_scale(offset, -16.0);
        }
        tile_load(dw, wf, 0, BN, G, BN);
        tile_load(
            dx,
            xd,
            row0 * blocks + s4 * G,
            blocks,
            m - row0,
            blocks - s4 * G,
        );
        // Per block, `d_x · d_w` first, as llama.cpp scales a block's integer sum.
        tile_dot_dequant(acc, a, b, offset, dx, dw);
    }
    tile_store(acc, y, row0 * n + col0, n, m - row0, n - col0);
}
