//! FlashPrefill stage B and C: how much of each query block's attention mass falls on each
//! causal key block, estimated with the key blocks' mean keys (`attention.block_score`).
//!
//! GQA as in FlashPrefill V2: one selection per KV head. The rows of query block `I` are all
//! pass positions `p` in the block times the `g = n_heads / n_kv_heads` query heads of the KV
//! head. For a row `r` and a causal key block `J <= I`, `s = scale * q_r · k̄_J`. A row counts
//! for `J` only when its position is at or after `J`'s last valid token
//! (`min((J + 1) * block, kv_len) - 1`): every row counts for past blocks, only the block's
//! last valid position for the diagonal. Rows outside the pass (before `pos0`, at or after
//! `kv_len`) are never read. Per `(I, J)`: `m = max_r s`, `S = Σ_r exp(s - m)`; then per `I`
//! (stage C) `M = max_J m` and `Score = S * exp(m - M)`, 0 for non-causal blocks.
//!
//! The score is not divided by its row sum: selection compares each score with a fraction of
//! the row's largest, which that division does not change, and leaving it out keeps the
//! scores free of one more rounding. The largest score of a row is at least 1.

use loom::kernel;

/// `q`: `[t, n_heads, head_dim]` f32, rows at positions `pos0..kv_len`; `pooled`:
/// `[n_kv_heads, head_dim, n_kblocks]` (from `attention.key_block_mean`); `scores`:
/// `[n_kv_heads, n_qblocks, n_kblocks]`; `maxes`: scratch of the same size (each row's `m`
/// between the two passes); `qblock0 = pos0 / block`; `group` query heads per KV head.
/// Grid: x = n_qblocks = (kv_len - 1) / block - qblock0 + 1, y = n_kv_heads.
///
/// One workgroup per (query block, KV head); work-item `lid` takes key blocks `lid`,
/// `lid + 64`, ... up to the diagonal. Rows go four positions of one query head at a time:
/// their four dot products share every pooled-key load (the `d` loop is unrolled by 4 as
/// well, each accumulator still adding in ascending `d` with one rounding per `fma`). After
/// each four rows the running `(m, S)` is rescaled once: four exps per chunk for the rows
/// plus one for the rescale. Positions past the block's end in the last chunk re-read the
/// last position (the `min`) and do not count; key blocks past the diagonal re-read the
/// diagonal and store nothing. `qblock0` and `group` come from the launcher rather than
/// integer divisions here, so the host lowering sees the loop bounds as uniform and pure and
/// runs the work-item loop innermost (vectorised over key blocks).
#[kernel(name = "attention.block_score", version = 1, workgroup = 64)]
fn block_score(
    q: &[f32; (kv_len - pos0) * n_kv_heads * group * head_dim],
    pooled: &[f32; n_kv_heads * head_dim * n_kblocks],
    scores: &mut [f32; num_groups_y() * num_groups() * n_kblocks],
    maxes: &mut [f32; num_groups_y() * num_groups() * n_kblocks],
    pos0: u32,
    kv_len: u32,
    qblock0: u32,
    n_kv_heads: u32,
    group: u32,
    head_dim: u32,
    block: u32,
    n_kblocks: u32,
    scale: f32,
) {
    const WG: u32 = 64;
    let lid = local_id();
    let i = group_id();
    let n_qblocks = num_groups();
    let kvh = group_id_y();
    let n_heads = n_kv_heads * group;
    // Absolute query block, and the pass positions it holds.
    let qb = qblock0 + i;
    let p_lo = max(qb * block, pos0);
    let p_hi = min(qb * block + block, kv_len);
    let last = p_hi - 1;
    let n_chunks = (p_hi - p_lo + 3) >> 2;
    let n_jchunks = (qb >> 6) + 1;
    let out_row = (kvh * n_qblocks + i) * n_kblocks;
    let kv_head = kvh * head_dim;
    let mut my_max = f32::NEG_INFINITY;
    for jc in 0..n_jchunks {
        let j = jc * WG + lid;
        let jj = min(j, qb);
        let past = jj < qb;
        let mut m = f32::NEG_INFINITY;
        let mut s = 0.0;
        for gi in 0..group {
            let head = kvh * group + gi;
            for c in 0..n_chunks {
                let p0 = p_lo + c * 4;
                let q0 = ((min(p0, last) - pos0) * n_heads + head) * head_dim;
                let q1 = ((min(p0 + 1, last) - pos0) * n_heads + head) * head_dim;
                let q2 = ((min(p0 + 2, last) - pos0) * n_heads + head) * head_dim;
                let q3 = ((min(p0 + 3, last) - pos0) * n_heads + head) * head_dim;
                let mut a0 = 0.0;
                let mut a1 = 0.0;
                let mut a2 = 0.0;
                let mut a3 = 0.0;
                for d4 in 0..(head_dim >> 2) {
                    let d = d4 * 4;
                    let k0 = pooled[(kv_head + d) * n_kblocks + jj];
                    let k1 = pooled[(kv_head + d + 1) * n_kblocks + jj];
                    let k2 = pooled[(kv_head + d + 2) * n_kblocks + jj];
                    let k3 = pooled[(kv_head + d + 3) * n_kblocks + jj];
                    a0 = fma(q[q0 + d], k0, a0);
                    a1 = fma(q[q1 + d], k0, a1);
                    a2 = fma(q[q2 + d], k0, a2);
                    a3 = fma(q[q3 + d], k0, a3);
                    a0 = fma(q[q0 + d + 1], k1, a0);
                    a1 = fma(q[q1 + d + 1], k1, a1);
                    a2 = fma(q[q2 + d + 1], k1, a2);
                    a3 = fma(q[q3 + d + 1], k1, a3);
                    a0 = fma(q[q0 + d + 2], k2, a0);
                    a1 = fma(q[q1 + d + 2], k2, a1);
                    a2 = fma(q[q2 + d + 2], k2, a2);
                    a3 = fma(q[q3 + d + 2], k2, a3);
                    a0 = fma(q[q0 + d + 3], k3, a0);
                    a1 = fma(q[q1 + d + 3], k3, a1);
                    a2 = fma(q[q2 + d + 3], k3, a2);
                    a3 = fma(q[q3 + d + 3], k3, a3);
                }
                for d in (head_dim & 0xffff_fffc)..head_dim {
                    let kd = pooled[(kv_head + d) * n_kblocks + jj];
                    a0 = fma(q[q0 + d], kd, a0);
                    a1 = fma(q[q1 + d], kd, a1);
                    a2 = fma(q[q2 + d], kd, a2);
                    a3 = fma(q[q3 + d], kd, a3);
                }
                // Which of the four rows count for this key block (-inf: they do not).
                let s0 = if (past && p0 < p_hi) || p0 == last {
                    a0 * scale
                } else {
                    f32::NEG_INFINITY
                };
                let s1 = if (past && p0 + 1 < p_hi) || p0 + 1 == last {
                    a1 * scale
                } else {
                    f32::NEG_INFINITY
                };
                let s2 = if (past && p0 + 2 < p_hi) || p0 + 2 == last {
                    a2 * scale
                } else {
                    f32::NEG_INFINITY
                };
                let s3 = if (past && p0 + 3 < p_hi) || p0 + 3 == last {
                    a3 * scale
                } else {
                    f32::NEG_INFINITY
                };
                let m_new = max(m, max(max(s0, s1), max(s2, s3)));
                if m_new > f32::NEG_INFINITY {
                    s = s * (m - m_new).exp()
                        + (s0 - m_new).exp()
                        + (s1 - m_new).exp()
                        + (s2 - m_new).exp()
                        + (s3 - m_new).exp();
                    m = m_new;
                }
            }
        }
        if j <= qb {
            scores[out_row + j] = s;
            maxes[out_row + j] = m;
            my_max = max(my_max, m);
        }
    }
    // Stage C: rescale every block of the row to the row's largest maximum. The indexes are
    // recomputed under new names: a variable used on both sides of the reduction would be
    // kept per work-item by the host lowering, hiding that loop bounds are uniform and
    // indexes consecutive.
    let row_max = reduce_max(my_max);
    let diag = qblock0 + group_id();
    let row = (group_id_y() * num_groups() + group_id()) * n_kblocks;
    for jc in 0..((n_kblocks + WG - 1) >> 6) {
        let j = jc * WG + local_id();
        if j <= diag {
            let m = maxes[row + j];
            scores[row + j] = if m > f32::NEG_INFINITY {
                scores[row + j] * (m - row_max).exp()
            } else {
                0.0
            };
        } else if j < n_kblocks {
            scores[row + j] = 0.0;
        }
    }
}
