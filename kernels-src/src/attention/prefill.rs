//! `attention.prefill_<ty>.v1` (ty = bf16, f16, f32): causal flash attention of one prefill
//! pass over a KV cache in its stored dtype, dense or FlashPrefill's block-sparse form
//! (`../shared/research/flashprefill.md` §1.6), from one source.
//!
//! One workgroup per (query tile, query head), one work-item per query row. Query tiles are
//! aligned to absolute positions (tile x covers `[(pos0 / QT + x) * QT, + QT)` clipped to the
//! pass), so a tile lies inside one query block `I` (`QT` divides the block size). The tile
//! walks a list of key blocks in ascending order: in sparse mode `I`'s list for its KV head
//! from the block lists, in dense mode every causal block `0..=I` (no list is read). Each
//! block's keys go in tiles of `KT`, stopping at the tile's last row, under an f32 online
//! softmax: running maximum `m`, running sum `l`, accumulator rescaled by
//! `exp(m_old - m_new)`. While a row's maximum is still -inf it subtracts 0 instead, so masked
//! scores give `exp(-inf) = 0`, never NaN. The key tiles of the blocks `0..=I` are the tiles
//! `0, KT, ..` up to the tile's last row whatever the block size, so sparse mode with every
//! causal block listed runs exactly dense mode's sequence of key tiles and agrees with it to
//! the bit.
//!
//! Written for the host lowering, which runs each loop below once per workgroup with a
//! vectorised loop over the work-items inside:
//! - per-row vectors (query row, accumulator, the tile's scores) live in `shared` arrays laid
//!   out `[i * QT + local_id()]`, consecutive across work-items;
//! - keys and values are staged as f32 in shared memory a slice at a time (`KS` keys, or `DC`
//!   dimensions of the tile's keys), widened by all work-items together, so each staged
//!   element feeds a multiply-add over all rows as one broadcast operand;
//! - the products are unrolled 8 x 4 (8 keys by 4 dimensions for q·k, 8 dimensions by 4 keys
//!   for p·v): 8 independent accumulators hide the multiply-add latency, and each load of a
//!   row vector feeds 8 multiply-adds;
//! - the key loops hold barriers, so they are uniform loops run once per workgroup: their
//!   bounds may come from the lists (loads at a uniform index), and `k0` is one value for the
//!   whole workgroup;
//! - index values are written with `local_id()` and pure expressions inside the region
//!   (between barriers) that uses them, never carried across a barrier in a variable, which
//!   would hide that they are consecutive or the same for every row.
//!
//! Every accumulator sees its multiply-adds in ascending order, one rounding each (`fma`).
//! Shared memory: `(2 * 256 + KT) * QT + KS * 256` floats = 44 KiB (QT = 16, KT = 64, KS = 8).

use loom::kernel;

/// `q`, `out`: `[t, n_heads, head_dim]` f32, row `r` at absolute position `pos0 + r`; `k`, `v`:
/// the cache, `[>= pos0 + t, n_kv_heads, head_dim]`. `out[r, h] = Σ_j softmax_j(scale ·
/// q[r, h] · k[j, kvh]) · v[j, kvh]` over the attended keys `j <= pos0 + r`, where query head
/// `h` reads KV head `kvh = h / (n_heads / n_kv_heads)`. `head_dim <= 256`;
/// `n_heads * n_kv_heads < 2^24` (see `kvh` below). `block_size`: a multiple of 64; `qblock0`:
/// `pos0 / block_size`; `n_qblocks = (pos0 + t - 1) / block_size - qblock0 + 1`.
///
/// `dense != 0`: every key `j <= pos0 + r` is attended; `blocks`, `counts` and `max_blocks`
/// are not read (pass 1-element buffers). `dense == 0`: `blocks` is `[n_kv_heads, n_qblocks,
/// max_blocks]` absolute key-block ids, ascending, the first `counts[..]` of each row used,
/// each `<=` the row's query block; `counts`: `[n_kv_heads, n_qblocks]`, at least 1. A query
/// tile in absolute query block `I` reads row `kvh * n_qblocks + I - qblock0` and attends to
/// keys `J * block_size .. min((J + 1) * block_size, p + 1)` of each listed block `J`.
/// Grid: x = ceil((pos0 + t) / 16) - pos0 / 16, y = n_heads. The lengths of `blocks` and
/// `counts` depend on the mode (1 element when dense), so they are not declared; the op
/// checks them.
#[kernel(name = "attention.prefill", version = 1, workgroup = 16, elem = [bf16, f16, f32])]
fn prefill<W>(
    q: &[f32; t * n_heads * head_dim],
    k: &[W; (pos0 + t) * n_kv_heads * head_dim],
    v: &[W; (pos0 + t) * n_kv_heads * head_dim],
    blocks: &[u32],
    counts: &[u32],
    out: &mut [f32; t * n_heads * head_dim],
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
) {
    // Query rows per tile (the workgroup) and its log2; keys per tile; largest head_dim.
    const QT: u32 = 16;
    const QT_LOG2: u32 = 4;
    const KT: u32 = 64;
    const MAX_D: u32 = 256;
    // Keys per staged slice of a key tile, dimensions per staged slice of a value tile.
    const KS: u32 = 8;
    const DC: u32 = 32;
    let qs = shared::<f32>(MAX_D * QT);
    let acc = shared::<f32>(MAX_D * QT);
    let sc = shared::<f32>(KT * QT);
    let kvs = shared::<f32>(KS * MAX_D);

    // First absolute position of the tile, and one past its last row in the pass.
    let first = ((pos0 >> QT_LOG2) + group_id()) * QT;
    let stop = min(first + QT, pos0 + t);
    // This work-item's position; rows outside the pass read the nearest row and store nothing.
    let pos = first + local_id();
    let qrow = ((min(max(pos, pos0), stop - 1) - pos0) * n_heads + group_id_y()) * head_dim;
    for d in 0..head_dim {
        qs[d * QT + local_id()] = q[qrow + d];
        acc[d * QT + local_id()] = 0.0;
    }
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
    for b in 0..n_blocks {
        let key_block = if dense != 0 {
            b
        } else {
            blocks[list * max_blocks + b]
        } * block_size;
        for k0 in (key_block..min(key_block + block_size, stop)).step_by(KT) {
            // Scores of the tile, sc[j] = q · k[k0 + j], for KS keys at a time.
            for g in 0..(KT / KS) {
                // Stage KS keys as f32: kvs[kk * MAX_D + d] = k[k0 + KS g + kk, kvh, d]. Keys
                // past the pass re-read its last row; they are masked below. `kvh` is h / (n_heads
                // / n_kv_heads) as an f32 quotient: an integer division by a parameter may trap,
                // so the host lowering would not write it at its uses and would hide that it is
                // the same for every row. The quotient is exact: h * n_kv_heads and n_heads are
                // below 2^24 (the op checks), and a non-integer h / g is at least 1/g below the
                // next integer, more than its rounding error.
                let kvh = ((group_id_y() * n_kv_heads) as f32 / n_heads as f32) as u32;
                for kk in 0..KS {
                    let krow = (min(k0 + g * KS + kk, pos0 + t - 1) * n_kv_heads + kvh) * head_dim;
                    for d0 in (0..head_dim).step_by(QT) {
                        if d0 + local_id() < head_dim {
                            kvs[kk * MAX_D + d0 + local_id()] = to_f32(k[krow + d0 + local_id()]);
                        }
                    }
                }
                barrier();
                // The KS = 8 keys (s0..s7) by 4 dimensions at a time.
                let j = g * KS;
                for kk in 0..KS {
                    sc[(j + kk) * QT + local_id()] = 0.0;
                }
                for db in 0..(head_dim >> 2) {
                    let d = db * 4;
                    let q0 = qs[d * QT + local_id()];
                    let q1 = qs[(d + 1) * QT + local_id()];
                    let q2 = qs[(d + 2) * QT + local_id()];
                    let q3 = qs[(d + 3) * QT + local_id()];
                    let mut s0 = sc[j * QT + local_id()];
                    let mut s1 = sc[(j + 1) * QT + local_id()];
                    let mut s2 = sc[(j + 2) * QT + local_id()];
                    let mut s3 = sc[(j + 3) * QT + local_id()];
                    let mut s4 = sc[(j + 4) * QT + local_id()];
                    let mut s5 = sc[(j + 5) * QT + local_id()];
                    let mut s6 = sc[(j + 6) * QT + local_id()];
                    let mut s7 = sc[(j + 7) * QT + local_id()];
                    s0 = fma(q0, kvs[d], s0);
                    s1 = fma(q0, kvs[MAX_D + d], s1);
                    s2 = fma(q0, kvs[2 * MAX_D + d], s2);
                    s3 = fma(q0, kvs[3 * MAX_D + d], s3);
                    s4 = fma(q0, kvs[4 * MAX_D + d], s4);
                    s5 = fma(q0, kvs[5 * MAX_D + d], s5);
                    s6 = fma(q0, kvs[6 * MAX_D + d], s6);
                    s7 = fma(q0, kvs[7 * MAX_D + d], s7);
                    s0 = fma(q1, kvs[d + 1], s0);
                    s1 = fma(q1, kvs[MAX_D + d + 1], s1);
                    s2 = fma(q1, kvs[2 * MAX_D + d + 1], s2);
                    s3 = fma(q1, kvs[3 * MAX_D + d + 1], s3);
                    s4 = fma(q1, kvs[4 * MAX_D + d + 1], s4);
                    s5 = fma(q1, kvs[5 * MAX_D + d + 1], s5);
                    s6 = fma(q1, kvs[6 * MAX_D + d + 1], s6);
                    s7 = fma(q1, kvs[7 * MAX_D + d + 1], s7);
                    s0 = fma(q2, kvs[d + 2], s0);
                    s1 = fma(q2, kvs[MAX_D + d + 2], s1);
                    s2 = fma(q2, kvs[2 * MAX_D + d + 2], s2);
                    s3 = fma(q2, kvs[3 * MAX_D + d + 2], s3);
                    s4 = fma(q2, kvs[4 * MAX_D + d + 2], s4);
                    s5 = fma(q2, kvs[5 * MAX_D + d + 2], s5);
                    s6 = fma(q2, kvs[6 * MAX_D + d + 2], s6);
                    s7 = fma(q2, kvs[7 * MAX_D + d + 2], s7);
                    sc[j * QT + local_id()] = fma(q3, kvs[d + 3], s0);
                    sc[(j + 1) * QT + local_id()] = fma(q3, kvs[MAX_D + d + 3], s1);
                    sc[(j + 2) * QT + local_id()] = fma(q3, kvs[2 * MAX_D + d + 3], s2);
                    sc[(j + 3) * QT + local_id()] = fma(q3, kvs[3 * MAX_D + d + 3], s3);
                    sc[(j + 4) * QT + local_id()] = fma(q3, kvs[4 * MAX_D + d + 3], s4);
                    sc[(j + 5) * QT + local_id()] = fma(q3, kvs[5 * MAX_D + d + 3], s5);
                    sc[(j + 6) * QT + local_id()] = fma(q3, kvs[6 * MAX_D + d + 3], s6);
                    sc[(j + 7) * QT + local_id()] = fma(q3, kvs[7 * MAX_D + d + 3], s7);
                }
                // The last `head_dim % 4` dimensions.
                for d in (head_dim & 0xffff_fffc)..head_dim {
                    let qd = qs[d * QT + local_id()];
                    for kk in 0..KS {
                        sc[(j + kk) * QT + local_id()] =
                            fma(qd, kvs[kk * MAX_D + d], sc[(j + kk) * QT + local_id()]);
                    }
                }
                barrier();
            }
            // Scale, causal mask, tile maximum. Only tiles that reach past a row's position need
            // the mask; the select costs one instruction per score against 2 * head_dim
            // multiply-adds, so every tile takes it and there is one code path.
            let row_pos = ((pos0 >> QT_LOG2) + group_id()) * QT + local_id();
            let mut tile_max = f32::NEG_INFINITY;
            for j in 0..KT {
                let x = if k0 + j > row_pos {
                    f32::NEG_INFINITY
                } else {
                    sc[j * QT + local_id()] * scale
                };
                sc[j * QT + local_id()] = x;
                tile_max = max(tile_max, x);
            }
            let m_new = max(m, tile_max);
            // While every score so far is masked, subtract 0: exp(-inf - 0) = 0, not NaN.
            let shift = if m_new == f32::NEG_INFINITY {
                0.0
            } else {
                m_new
            };
            let alpha = exp(m - shift);
            let mut tile_sum = 0.0;
            for j in 0..KT {
                let e = exp(sc[j * QT + local_id()] - shift);
                sc[j * QT + local_id()] = e;
                tile_sum += e;
            }
            l = fma(l, alpha, tile_sum);
            m = m_new;
            // acc = acc * alpha + Σ_j p_j v[k0 + j], in chunks of DC dimensions.
            for c in 0..((head_dim + DC - 1) / DC) {
                // Stage the chunk as f32: kvs[j * DC + dd] = v[k0 + j, kvh, DC c + dd].
                let kvh = ((group_id_y() * n_kv_heads) as f32 / n_heads as f32) as u32;
                for j in 0..KT {
                    let vrow = (min(k0 + j, pos0 + t - 1) * n_kv_heads + kvh) * head_dim + c * DC;
                    for dd in (0..DC).step_by(QT) {
                        if c * DC + dd + local_id() < head_dim {
                            kvs[j * DC + dd + local_id()] = to_f32(v[vrow + dd + local_id()]);
                        }
                    }
                }
                barrier();
                // 8 dimensions by 4 keys at a time.
                let dims = min(DC, head_dim - c * DC);
                for db in 0..(dims >> 3) {
                    let d = c * DC + db * 8;
                    let mut a0 = acc[d * QT + local_id()] * alpha;
                    let mut a1 = acc[(d + 1) * QT + local_id()] * alpha;
                    let mut a2 = acc[(d + 2) * QT + local_id()] * alpha;
                    let mut a3 = acc[(d + 3) * QT + local_id()] * alpha;
                    let mut a4 = acc[(d + 4) * QT + local_id()] * alpha;
                    let mut a5 = acc[(d + 5) * QT + local_id()] * alpha;
                    let mut a6 = acc[(d + 6) * QT + local_id()] * alpha;
                    let mut a7 = acc[(d + 7) * QT + local_id()] * alpha;
                    for jb in 0..(KT >> 2) {
                        let j = jb * 4;
                        let p0 = sc[j * QT + local_id()];
                        let p1 = sc[(j + 1) * QT + local_id()];
                        let p2 = sc[(j + 2) * QT + local_id()];
                        let p3 = sc[(j + 3) * QT + local_id()];
                        let v0 = j * DC + db * 8;
                        let v1 = (j + 1) * DC + db * 8;
                        let v2 = (j + 2) * DC + db * 8;
                        let v3 = (j + 3) * DC + db * 8;
                        a0 = fma(p0, kvs[v0], a0);
                        a1 = fma(p0, kvs[v0 + 1], a1);
                        a2 = fma(p0, kvs[v0 + 2], a2);
                        a3 = fma(p0, kvs[v0 + 3], a3);
                        a4 = fma(p0, kvs[v0 + 4], a4);
                        a5 = fma(p0, kvs[v0 + 5], a5);
                        a6 = fma(p0, kvs[v0 + 6], a6);
                        a7 = fma(p0, kvs[v0 + 7], a7);
                        a0 = fma(p1, kvs[v1], a0);
                        a1 = fma(p1, kvs[v1 + 1], a1);
                        a2 = fma(p1, kvs[v1 + 2], a2);
                        a3 = fma(p1, kvs[v1 + 3], a3);
                        a4 = fma(p1, kvs[v1 + 4], a4);
                        a5 = fma(p1, kvs[v1 + 5], a5);
                        a6 = fma(p1, kvs[v1 + 6], a6);
                        a7 = fma(p1, kvs[v1 + 7], a7);
                        a0 = fma(p2, kvs[v2], a0);
                        a1 = fma(p2, kvs[v2 + 1], a1);
                        a2 = fma(p2, kvs[v2 + 2], a2);
                        a3 = fma(p2, kvs[v2 + 3], a3);
                        a4 = fma(p2, kvs[v2 + 4], a4);
                        a5 = fma(p2, kvs[v2 + 5], a5);
                        a6 = fma(p2, kvs[v2 + 6], a6);
                        a7 = fma(p2, kvs[v2 + 7], a7);
                        a0 = fma(p3, kvs[v3], a0);
                        a1 = fma(p3, kvs[v3 + 1], a1);
                        a2 = fma(p3, kvs[v3 + 2], a2);
                        a3 = fma(p3, kvs[v3 + 3], a3);
                        a4 = fma(p3, kvs[v3 + 4], a4);
                        a5 = fma(p3, kvs[v3 + 5], a5);
                        a6 = fma(p3, kvs[v3 + 6], a6);
                        a7 = fma(p3, kvs[v3 + 7], a7);
                    }
                    acc[d * QT + local_id()] = a0;
                    acc[(d + 1) * QT + local_id()] = a1;
                    acc[(d + 2) * QT + local_id()] = a2;
                    acc[(d + 3) * QT + local_id()] = a3;
                    acc[(d + 4) * QT + local_id()] = a4;
                    acc[(d + 5) * QT + local_id()] = a5;
                    acc[(d + 6) * QT + local_id()] = a6;
                    acc[(d + 7) * QT + local_id()] = a7;
                }
                // The chunk's last `dims % 8` dimensions.
                for dd in (dims & 0xffff_fff8)..dims {
                    let mut a = acc[(c * DC + dd) * QT + local_id()] * alpha;
                    for j in 0..KT {
                        a = fma(sc[j * QT + local_id()], kvs[j * DC + dd], a);
                    }
                    acc[(c * DC + dd) * QT + local_id()] = a;
                }
                barrier();
            }
        }
    }
    if pos >= pos0 && pos < stop {
        for d in 0..head_dim {
            out[qrow + d] = acc[d * QT + local_id()] / l;
        }
    }
}
