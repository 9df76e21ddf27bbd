//! `attention.prefill_<ty>.v4` (ty = bf16, f16, f32): causal flash attention of one prefill
//! pass over a KV cache in its stored dtype, dense or FlashPrefill's block-sparse form
//! (`../shared/research/flashprefill.md` §1.6), from one source, on tiles (`LOOM.md`, "Tiles").
//!
//! One workgroup per (query tile, query head): a tile of 64 query rows aligned to absolute
//! positions (tile x covers `[(pos0 / 64 + x) * 64, + 64)` clipped to the pass; workgroup x
//! takes tile `n - 1 - x` of the `n`, the longest first), so a tile lies inside one query
//! block `I` (64 divides the block size). The tile walks a list of key blocks
//! in ascending order: in sparse mode `I`'s list for its KV head from the block lists, in dense
//! mode every causal block `0..=I` (no list is read). Each block's keys go in tiles of 64,
//! stopping at the query tile's last row, under an f32 online softmax: running maximum `m`,
//! running sum `l`, accumulator rescaled by `exp(m_old - m_new)`. While a row's maximum is
//! still -inf it subtracts 0 instead, so masked scores give `exp(-inf) = 0`, never NaN. The key
//! tiles of the blocks `0..=I` are the tiles `0, 64, ..` up to the tile's last row whatever the
//! block size, so sparse mode with every causal block listed runs exactly dense mode's sequence
//! of key tiles and agrees with it to the bit.
//!
//! Per key tile: the scores `S = q · kᵀ` are tile dots over the head dimension, 32 at a time,
//! into a tile that starts at 0, or on the diagonal tile at the causal mask (0 or -inf,
//! loaded from `causal`, so masked scores stay -inf through the dot and the positive scale);
//! the row maximum, `exp` and row sum are tile statements; the per-row scalars (`m`, `l`, the
//! shift and the rescale factor) are one work-item per row, passed through 64-float shared
//! arrays. The accumulator lives in the workgroup's part of the scratch `work` (64 rows by 32
//! dimensions at a time: a tile for all 256 would take the whole 64 KiB): loaded, scaled by
//! the row's factor, added `P · v` by a tile dot and stored back; at the end divided by `l`
//! into `out`. The query's chunks are copied into scratch once, zero-padded, and loaded from
//! there for every key tile. Values, and keys for f32 scores, are widened to f32 by the tile
//! loads, once per 64 query rows (v1 staged them once per 16). v2 kept the accumulator in `out` and read the
//! query from `q`, whose rows lie `n_heads * head_dim` floats apart (8 KiB in Qwen3.5-0.8B): a
//! window's 64 rows fell into a few sets of the host's L1 cache and its loads and stores
//! missed; in `work` each 64-row block is contiguous. v3 gives v2's values.
//!
//! Two precisions for the scores (`round_q`). With `round_q == 0` every product is one `fma`
//! of the f32 query and the widened key in ascending order (the f32 `tile_dot`'s order on
//! every target, `LOOM.md`), so each score, each sum and each accumulator sees the same
//! operations in the same order as v1 did with one work-item per row, and gives the same
//! values (the 0.8B-shaped model's perplexity at ctx 8192 is the same to the last digit).
//! With `round_q != 0` the query is rounded to the cache's type W as it is copied (into the
//! scratch `qr`) and the scores are W tile dots against the keys as stored. The op sets it
//! only for a bf16 cache: the products are exact, as in llama.cpp's CPU flash attention over a
//! bf16 cache, which converts the query to the keys' dot type; the sums' order is the bf16
//! `tile_dot`'s, the target's (`LOOM.md`, "Numeric contract"), and the host runs them on
//! `vdpbf16ps` (or AMX). `P · v` stays f32 in both. v4 adds that mode and gives v3's values
//! without it: its 32-wide chunks (v3's were 64 wide) continue each score's and each
//! accumulator's `fma` chain in the same order, and leave room for the W tiles in the f32
//! instance.
//!
//! Tiles and shared memory: a 64 x 64 f32 tile, three 64 x 32 (or 32 x 64) f32 tiles, two
//! 64 x 32 W tiles, two 64 x 1 tiles and three arrays of 64 floats: 49.25 KiB for a 16-bit W,
//! 57.25 KiB for f32 (an NVIDIA launch gives it as dynamic shared memory, past 48 KiB).

use loom::kernel;

/// `q`, `out`: `[t, n_heads, head_dim]` f32, row `r` at absolute position `pos0 + r`; `k`, `v`:
/// the cache, `[>= pos0 + t, n_kv_heads, head_dim]`. `out[r, h] = Σ_j softmax_j(scale ·
/// q[r, h] · k[j, kvh]) · v[j, kvh]` over the attended keys `j <= pos0 + r`, where query head
/// `h` reads KV head `kvh = h / (n_heads / n_kv_heads)`. `head_dim <= 256`;
/// `n_heads * n_kv_heads < 2^24` (see `kvh` below); `scale` positive and finite (a masked
/// score is -inf before it is scaled). `causal`: `[64, 128]`, element `(r, c)` -inf where
/// `c > r + 64`, else 0 (the diagonal tile's mask, read at column `64 - d` for a tile whose
/// first row lies `d` rows past its first key). `block_size`: a multiple of 64; `qblock0`:
/// `pos0 / block_size`; `n_qblocks = (pos0 + t - 1) / block_size - qblock0 + 1`.
///
/// `dense != 0`: every key `j <= pos0 + r` is attended; `blocks`, `counts` and `max_blocks`
/// are not read (pass 1-element buffers). `dense == 0`: `blocks` is `[n_kv_heads, n_qblocks,
/// max_blocks]` absolute key-block ids, ascending, the first `counts[..]` of each row used,
/// each `<=` the row's query block; `counts`: `[n_kv_heads, n_qblocks]`, at least 1. A query
/// tile in absolute query block `I` reads row `kvh * n_qblocks + I - qblock0` and attends to
/// keys `J * block_size .. min((J + 1) * block_size, p + 1)` of each listed block `J`.
/// Grid: x = ceil((pos0 + t) / 64) - pos0 / 64, y = n_heads. The lengths of `blocks` and
/// `counts` depend on the mode (1 element when dense), so they are not declared; the op
/// checks them. `work`: scratch, `2 * ceil(head_dim / 32) * 64 * 32` floats per workgroup.
/// `round_q != 0`: the scores take the query rounded to W (see the module); `qr` is then
/// scratch of `ceil(head_dim / 32) * 64 * 32` values per workgroup, else not read (1 element;
/// its length depends on the mode, so it is not declared either).
#[kernel(name = "attention.prefill", version = 4, workgroup = 64, elem = [bf16, f16, f32])]
fn prefill<W>(
    q: &[f32; t * n_heads * head_dim],
    k: &[W; (pos0 + t) * n_kv_heads * head_dim],
    v: &[W; (pos0 + t) * n_kv_heads * head_dim],
    causal: &[f32; 64 * 128],
    blocks: &[u32],
    counts: &[u32],
    out: &mut [f32; t * n_heads * head_dim],
    work: &mut [f32; num_groups() * num_groups_y() * 2 * ((head_dim + 31) / 32) * 64 * 32],
    qr: &mut [W],
    t: u32,
    pos0: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    scale: f32,
    dense: u32,
    block_size: u32,
    qblock0: u32,
    max_blocks: u32,
    round_q: u32,
) {
    // Rows of the query tile (one work-item each) and its log2; keys per key tile; head
    // dimensions per chunk (32: with 64, the f32 instance's tiles would pass 64 KiB).
    const QT: u32 = 64;
    const QT_LOG2: u32 = 6;
    const KT: u32 = 64;
    const DT: u32 = 32;
    // Scores, a chunk of the f32 query or of the accumulator, a chunk of the keys
    // (transposed) and of the values widened to f32, a chunk of the query rounded to W and
    // of the keys as stored; row maxima and per-row factors.
    let s = tile::<f32, QT, KT>();
    let a = tile::<f32, QT, DT>();
    let b = tile::<f32, DT, KT>();
    let vb = tile::<f32, KT, DT>();
    let qa = tile::<W, QT, DT>();
    let kb = tile::<W, DT, KT>();
    let m_tile = tile::<f32, QT, 1>();
    let col = tile::<f32, QT, 1>();
    let rows = shared::<f32>(QT);
    let shift = shared::<f32>(QT);
    let alpha = shared::<f32>(QT);

    // First absolute position of the tile, its first row in the pass, one past its last.
    // Workgroup 0 takes the last tile: later tiles attend to more keys, and starting with
    // them leaves the short ones to even out the cores (or GPU units) at the end.
    let first = ((pos0 >> QT_LOG2) + num_groups() - 1 - group_id()) * QT;
    let row0 = max(first, pos0);
    let stop = min(first + QT, pos0 + t);
    let n_rows = stop - row0;
    let q_stride = n_heads * head_dim;
    let kv_stride = n_kv_heads * head_dim;
    let q_at = ((row0 - pos0) * n_heads + group_id_y()) * head_dim;
    // `kvh` is h / (n_heads / n_kv_heads) as an f32 quotient, so no integer division by a
    // parameter (which may trap) is written. The quotient is exact: h * n_kv_heads and
    // n_heads are below 2^24 (the op checks), and a non-integer h / g is at least 1/g below
    // the next integer, more than its rounding error.
    let kvh = ((group_id_y() * n_kv_heads) as f32 / n_heads as f32) as u32;
    let chunks = (head_dim + DT - 1) / DT;
    // This workgroup's part of `work`: the accumulator's chunks, then the f32 query's, each
    // a contiguous QT x DT block (chunk `c` at `acc_at + c * QT * DT` and `qw_at + c * QT *
    // DT`); with `round_q`, the rounded query's chunks in `qr` likewise, from `qr_at`.
    let group = group_id_y() * num_groups() + group_id();
    let acc_at = group * 2 * chunks * QT * DT;
    let qw_at = acc_at + chunks * QT * DT;
    let qr_at = group * chunks * QT * DT;
    // The accumulator starts at 0, the running maxima at -inf; the query's chunks are copied
    // in, zero-padded (rounded to W by the store into `qr`). In each loop over the head
    // dimension's chunks, `at` is where the chunk starts in `q` and `out` and `dims` its
    // width (the last may be narrower than DT).
    tile_zero(a);
    for c in 0..chunks {
        tile_store(a, work, acc_at + c * QT * DT, DT, QT, DT);
    }
    for c in 0..chunks {
        let at = q_at + c * DT;
        let dims = head_dim - c * DT;
        tile_load(a, q, at, q_stride, n_rows, dims);
        if round_q != 0 {
            tile_store(a, qr, qr_at + c * QT * DT, DT, QT, DT);
        } else {
            tile_store(a, work, qw_at + c * QT * DT, DT, QT, DT);
        }
    }
    rows[local_id()] = f32::NEG_INFINITY;
    tile_load(m_tile, rows, 0, 1, QT, 1);
    // This tile's query block, and in sparse mode its row of the block lists.
    let qblock = first / block_size;
    let n_qblocks = (pos0 + t - 1) / block_size - qblock0 + 1;
    let list = if dense != 0 {
        0
    } else {
        group_id_y() / (n_heads / n_kv_heads) * n_qblocks + qblock - qblock0
    };
    let n_blocks = if dense != 0 { qblock + 1 } else { counts[list] };
    let mut m = f32::NEG_INFINITY;
    let mut l = 0.0;
    for bi in 0..n_blocks {
        let key_block = if dense != 0 {
            bi
        } else {
            blocks[list * max_blocks + bi]
        } * block_size;
        for k0 in (key_block..min(key_block + block_size, stop)).step_by(KT) {
            // Scores: the diagonal tile (the last, the only one past a row's position) starts
            // at the causal mask, the others at 0; keys past the pass are zero-filled by the
            // window and masked.
            if k0 == first {
                tile_load(s, causal, KT - (row0 - first), 2 * KT, QT, KT);
            } else {
                tile_zero(s);
            }
            let kv_at = (k0 * n_kv_heads + kvh) * head_dim;
            let keys = pos0 + t - k0;
            for c in 0..chunks {
                let dims = head_dim - c * DT;
                if round_q != 0 {
                    tile_load(qa, qr, qr_at + c * QT * DT, DT, QT, DT);
                    tile_load_t(kb, k, kv_at + c * DT, kv_stride, dims, keys);
                    tile_dot(s, qa, kb);
                } else {
                    tile_load(a, work, qw_at + c * QT * DT, DT, QT, DT);
                    tile_load_t(b, k, kv_at + c * DT, kv_stride, dims, keys);
                    tile_dot(s, a, b);
                }
            }
            tile_scale(s, scale);
            // Row maxima, the shift (0 while a row's maximum is -inf: exp(-inf - 0) = 0, not
            // NaN) and the accumulator's rescale factor, one work-item per row.
            tile_row_max(m_tile, s);
            tile_store(m_tile, rows, 0, 1, QT, 1);
            let m_new = rows[local_id()];
            let sh = if m_new == f32::NEG_INFINITY {
                0.0
            } else {
                m_new
            };
            shift[local_id()] = sh;
            alpha[local_id()] = exp(m - sh);
            m = m_new;
            tile_load(col, shift, 0, 1, QT, 1);
            tile_sub(s, col);
            tile_exp(s);
            tile_zero(col);
            tile_row_sum(col, s);
            tile_store(col, rows, 0, 1, QT, 1);
            l = fma(l, alpha[local_id()], rows[local_id()]);
            // acc = acc * alpha + p · v, a chunk at a time.
            tile_load(col, alpha, 0, 1, QT, 1);
            for c in 0..chunks {
                tile_load(a, work, acc_at + c * QT * DT, DT, QT, DT);
                tile_mul(a, col);
                tile_load(vb, v, kv_at + c * DT, kv_stride, keys, head_dim - c * DT);
                tile_dot(a, s, vb);
                tile_store(a, work, acc_at + c * QT * DT, DT, QT, DT);
            }
        }
    }
    rows[local_id()] = l;
    tile_load(col, rows, 0, 1, QT, 1);
    for c in 0..chunks {
        let at = q_at + c * DT;
        let dims = head_dim - c * DT;
        tile_load(a, work, acc_at + c * QT * DT, DT, QT, DT);
        tile_div(a, col);
        tile_store(a, out, at, q_stride, n_rows, dims);
    }
}
